//! State machine tests: PDUs in, PDUs/events out, fake time.

use super::*;
use bytes::BytesMut;
use nvmeof_common::decoder::PduDecoder;
use nvmeof_common::pdu::{IcResp, TermReq};
use nvmeof_common::sqe::SglId;

fn cfg() -> QueueConfig {
    let mut c = QueueConfig::new(1, 8);
    c.inline_limit = 4096;
    c.command_timeout = Duration::from_secs(30);
    c
}

fn live(cfg: QueueConfig, t0: Instant, maxh2cdata: u32) -> Queue {
    let mut q = Queue::new(cfg.clone(), t0);
    match q.poll_transmit() {
        Some(Pdu::IcReq(r)) => {
            assert_eq!(r.pfv, 0);
            assert_eq!(r.hpda, 0);
            assert_eq!(r.maxr2t, 0);
            assert_eq!(r.dgst, DigestFlags::new(cfg.hdgst, cfg.ddgst));
        }
        other => panic!("expected ICReq, got {other:?}"),
    }
    assert!(!q.is_live());
    assert!(q.submit(0, read_cmd(1), t0).is_err());
    let resp = IcResp { pfv: 0, cpda: 0, dgst: DigestFlags::new(cfg.hdgst, cfg.ddgst), maxh2cdata };
    q.handle_pdu(Pdu::IcResp(resp), t0).unwrap();
    assert!(q.is_live());
    q
}

fn read_cmd(blocks: u32) -> Command {
    let mut s = Sqe::new(0x02);
    s.set_nsid(1).set_slba(0).set_nlb((blocks - 1) as u16);
    Command::with_data(s, DataXfer::Read(blocks * 512))
}

fn write_cmd(data: Bytes) -> Command {
    let mut s = Sqe::new(0x01);
    s.set_nsid(1).set_nlb((data.len() / 512 - 1) as u16);
    Command::with_data(s, DataXfer::Write(data))
}

fn resp(cid: u16, status: Status) -> Pdu {
    Pdu::CapsuleResp(CapsuleResp { cqe: Cqe { result: 0, sqhd: 0, sqid: 1, cid, status } })
}

fn c2h(cid: u16, off: u32, data: &[u8], last: bool, success: bool) -> Pdu {
    Pdu::C2hData(C2hData { cccid: cid, datao: off, data: Bytes::copy_from_slice(data), last, success })
}

fn capsule(q: &mut Queue) -> CapsuleCmd {
    match q.poll_transmit() {
        Some(Pdu::CapsuleCmd(c)) => c,
        other => panic!("expected CapsuleCmd, got {other:?}"),
    }
}

fn events(q: &mut Queue) -> Vec<Event> {
    std::iter::from_fn(|| q.poll_event()).collect()
}

fn completion(ev: &Event) -> (u64, &Result<Cqe, CommandFailure>) {
    match ev {
        Event::Completion { user_data, result, .. } => (*user_data, result),
        other => panic!("expected completion, got {other:?}"),
    }
}

#[test]
fn cid_layout() {
    assert_eq!(make_cid(0xA, 0x123), 0xA123);
    assert_eq!(cid_tag(0xA123), 0x123);
    assert_eq!(cid_gen(0xA123), 0xA);
    assert_eq!(make_cid(0x1F, 0x1FFF), 0xFFFF);
}

#[test]
fn icresp_is_validated_like_linux() {
    let t0 = Instant::now();
    let mut c = cfg();
    c.hdgst = true;
    let mut q = Queue::new(c.clone(), t0);
    q.poll_transmit();
    // Digest bits must equal the request.
    let bad = IcResp { pfv: 0, cpda: 0, dgst: DigestFlags::new(false, false), maxh2cdata: 1 << 20 };
    assert!(matches!(
        q.handle_pdu(Pdu::IcResp(bad), t0),
        Err(QueueError::Decode(DecodeError::InvalidDigestField(0)))
    ));
    let mut q = Queue::new(c.clone(), t0);
    let bad = IcResp { pfv: 0, cpda: 0, dgst: DigestFlags::new(true, false), maxh2cdata: 1000 };
    assert!(q.handle_pdu(Pdu::IcResp(bad), t0).is_err());
    let mut q = Queue::new(c.clone(), t0);
    let bad = IcResp { pfv: 0, cpda: 1, dgst: DigestFlags::new(true, false), maxh2cdata: 8192 };
    assert!(q.handle_pdu(Pdu::IcResp(bad), t0).is_err());
    // Anything but ICResp first is a sequence error.
    let mut q = Queue::new(c.clone(), t0);
    assert!(matches!(q.handle_pdu(resp(0, Status::SUCCESS), t0), Err(QueueError::Violation { .. })));
    // Accepted: digests now on in both directions.
    let q = live(c, t0, 8192);
    assert!(q.decoder_config().hdgst);
    assert!(!q.decoder_config().ddgst);
    assert!(q.encode_config().hdgst);
    assert_eq!(q.negotiated().unwrap().maxh2cdata, 8192);
}

#[test]
fn handshake_times_out() {
    let t0 = Instant::now();
    let mut q = Queue::new(cfg(), t0);
    assert_eq!(q.poll_timeout(), Some(t0 + Duration::from_secs(10)));
    q.handle_timeout(t0 + Duration::from_secs(9)).unwrap();
    assert_eq!(q.handle_timeout(t0 + Duration::from_secs(10)), Err(QueueError::HandshakeTimeout));
}

#[test]
fn read_completes_with_data_then_capsule_resp() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 1 << 20);
    let cid = q.submit(7, read_cmd(8), t0).unwrap();
    let c = capsule(&mut q);
    assert_eq!(c.sqe.cid(), cid);
    assert_eq!(c.sqe.sgl(), SglDescriptor::transport(4096));
    assert!(c.data.is_empty());
    let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    q.handle_pdu(c2h(cid, 0, &data[..1024], false, false), t0).unwrap();
    q.handle_pdu(c2h(cid, 1024, &data[1024..], true, false), t0).unwrap();
    assert_eq!(q.outstanding(), 1);
    q.handle_pdu(resp(cid, Status::SUCCESS), t0).unwrap();
    let ev = events(&mut q);
    assert_eq!(ev.len(), 3);
    let mut got = vec![0u8; 4096];
    for e in &ev[..2] {
        match e {
            Event::Data { user_data: 7, offset, data } => {
                got[*offset as usize..*offset as usize + data.len()].copy_from_slice(data)
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, data);
    let (ud, r) = completion(&ev[2]);
    assert_eq!(ud, 7);
    assert_eq!(r.as_ref().unwrap().cid, cid);
    assert_eq!(q.outstanding(), 0);
    assert_eq!(q.stats().completed, 1);
}

#[test]
fn success_flag_completes_without_capsule_resp() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 1 << 20);
    let cid = q.submit(3, read_cmd(1), t0).unwrap();
    capsule(&mut q);
    q.handle_pdu(c2h(cid, 0, &[0xAB; 512], true, true), t0).unwrap();
    let ev = events(&mut q);
    assert_eq!(ev.len(), 2);
    let (ud, r) = completion(&ev[1]);
    assert_eq!(ud, 3);
    let cqe = r.as_ref().unwrap();
    assert!(cqe.status.is_success());
    assert_eq!((cqe.cid, cqe.result), (cid, 0));
    // A stray CapsuleResp afterwards is detected as stale and dropped.
    q.handle_pdu(resp(cid, Status::SUCCESS), t0).unwrap();
    assert!(events(&mut q).is_empty());
    assert_eq!(q.stats().stale, 1);
    // SUCCESS on a short transfer is reported, not silently accepted.
    let cid = q.submit(4, read_cmd(2), t0).unwrap();
    capsule(&mut q);
    q.handle_pdu(c2h(cid, 0, &[0; 512], true, true), t0).unwrap();
    let ev = events(&mut q);
    assert_eq!(completion(&ev[1]).1, &Err(CommandFailure::ShortData { expected: 1024, received: 512 }));
}

#[test]
fn short_read_and_out_of_order_data() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 1 << 20);
    let cid = q.submit(1, read_cmd(2), t0).unwrap();
    capsule(&mut q);
    q.handle_pdu(c2h(cid, 0, &[1; 512], true, false), t0).unwrap();
    q.handle_pdu(resp(cid, Status::SUCCESS), t0).unwrap();
    let ev = events(&mut q);
    assert_eq!(completion(&ev[1]).1, &Err(CommandFailure::ShortData { expected: 1024, received: 512 }));
    // An error status with no data is passed through as a CQE.
    let cid = q.submit(2, read_cmd(2), t0).unwrap();
    capsule(&mut q);
    q.handle_pdu(resp(cid, Status::LBA_RANGE.with_dnr()), t0).unwrap();
    let ev = events(&mut q);
    assert_eq!(completion(&ev[0]).1.as_ref().unwrap().status, Status::LBA_RANGE.with_dnr());
    // Gaps and overruns are fatal.
    let cid = q.submit(3, read_cmd(2), t0).unwrap();
    capsule(&mut q);
    assert!(matches!(
        q.handle_pdu(c2h(cid, 512, &[0; 512], true, false), t0),
        Err(QueueError::Violation { .. })
    ));
    let mut q = live(cfg(), t0, 1 << 20);
    let cid = q.submit(3, read_cmd(1), t0).unwrap();
    assert!(matches!(
        q.handle_pdu(c2h(cid, 0, &[0; 1024], true, false), t0),
        Err(QueueError::Violation { .. })
    ));
    // C2HData for a write is fatal.
    let mut q = live(cfg(), t0, 1 << 20);
    let cid = q.submit(3, write_cmd(Bytes::from(vec![0; 512])), t0).unwrap();
    assert!(q.handle_pdu(c2h(cid, 0, &[0; 512], true, false), t0).is_err());
}

#[test]
fn small_write_goes_in_capsule() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 1 << 20);
    let data = Bytes::from(vec![5u8; 4096]);
    let cid = q.submit(9, write_cmd(data.clone()), t0).unwrap();
    let c = capsule(&mut q);
    assert_eq!(c.sqe.sgl(), SglDescriptor::in_capsule(4096));
    assert_eq!(c.sqe.sgl().id, SglId::DATA_BLOCK_OFFSET);
    assert_eq!(c.data, data);
    // Same allocation: no copy of the caller's bytes.
    assert_eq!(c.data.as_ptr(), data.as_ptr());
    assert!(q.poll_transmit().is_none());
    // An R2T for an in-capsule write is a protocol violation.
    let r2t = R2t { cccid: cid, ttag: 1, r2to: 0, r2tl: 4096 };
    assert!(matches!(q.handle_pdu(Pdu::R2t(r2t), t0), Err(QueueError::Violation { .. })));
}

#[test]
fn admin_queue_and_fabrics_use_8k_inline_limit() {
    let t0 = Instant::now();
    let mut c = cfg();
    c.inline_limit = 0; // I/O queue without in-capsule data
    let mut q = live(c.clone(), t0, 1 << 20);
    q.submit(1, write_cmd(Bytes::from(vec![0; 512])), t0).unwrap();
    assert!(capsule(&mut q).data.is_empty());
    // Fabrics commands (Connect data) always go in-capsule up to 8 KiB.
    let connect = nvmeof_common::spec::ConnectCmd::io(1, 32).to_sqe(0);
    q.submit(2, Command::with_data(connect, DataXfer::Write(Bytes::from(vec![0; 1024]))), t0).unwrap();
    let cc = capsule(&mut q);
    assert_eq!(cc.data.len(), 1024);
    assert_eq!(cc.sqe.sgl(), SglDescriptor::in_capsule(1024));
    c.qid = 0;
    let mut q = live(c, t0, 1 << 20);
    q.submit(1, write_cmd(Bytes::from(vec![0; 8192])), t0).unwrap();
    assert_eq!(capsule(&mut q).data.len(), 8192);
    q.submit(2, write_cmd(Bytes::from(vec![0; 8704])), t0).unwrap();
    assert!(capsule(&mut q).data.is_empty());
}

#[test]
fn large_write_answers_r2t_with_h2c_data_split_by_maxh2cdata() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 8192);
    let data: Bytes = (0..20480u32).map(|i| (i / 512) as u8).collect::<Vec<u8>>().into();
    let cid = q.submit(11, write_cmd(data.clone()), t0).unwrap();
    let c = capsule(&mut q);
    assert_eq!(c.sqe.sgl(), SglDescriptor::transport(20480));
    assert!(c.data.is_empty());
    // First window: 16 KiB → two 8 KiB H2CData PDUs, LAST on the second.
    q.handle_pdu(Pdu::R2t(R2t { cccid: cid, ttag: 0x55, r2to: 0, r2tl: 16384 }), t0).unwrap();
    let pdus: Vec<Pdu> = std::iter::from_fn(|| q.poll_transmit()).collect();
    assert_eq!(pdus.len(), 2);
    for (i, p) in pdus.iter().enumerate() {
        let Pdu::H2cData(h) = p else { panic!("{p:?}") };
        assert_eq!(
            (h.cccid, h.ttag, h.datao, h.data.len(), h.last),
            (cid, 0x55, i as u32 * 8192, 8192, i == 1)
        );
        assert_eq!(h.data, data.slice(i * 8192..(i + 1) * 8192));
    }
    // An R2T going backwards is rejected... on a copy of the state; then the second window.
    q.handle_pdu(Pdu::R2t(R2t { cccid: cid, ttag: 0x56, r2to: 16384, r2tl: 4096 }), t0).unwrap();
    let Some(Pdu::H2cData(h)) = q.poll_transmit() else { panic!() };
    assert_eq!((h.datao, h.data.len(), h.last, h.ttag), (16384, 4096, true, 0x56));
    q.handle_pdu(resp(cid, Status::SUCCESS), t0).unwrap();
    let ev = events(&mut q);
    assert_eq!(completion(&ev[0]).0, 11);
    assert!(completion(&ev[0]).1.is_ok());
}

#[test]
fn bad_r2t_is_fatal() {
    let t0 = Instant::now();
    for r2t in [
        |cid| R2t { cccid: cid, ttag: 0, r2to: 0, r2tl: 0 },
        |cid| R2t { cccid: cid, ttag: 0, r2to: 8192, r2tl: 16384 },
        |cid| R2t { cccid: cid, ttag: 0, r2to: 0, r2tl: 20481 },
        |cid| R2t { cccid: cid | 0x0800, ttag: 0, r2to: 0, r2tl: 512 },
    ] {
        let mut q = live(cfg(), t0, 8192);
        let cid = q.submit(1, write_cmd(Bytes::from(vec![0; 20480])), t0).unwrap();
        assert!(
            matches!(q.handle_pdu(Pdu::R2t(r2t(cid)), t0), Err(QueueError::Violation { .. })),
            "{:?}",
            r2t(cid)
        );
    }
    // Going backwards after a window was served.
    let mut q = live(cfg(), t0, 8192);
    let cid = q.submit(1, write_cmd(Bytes::from(vec![0; 20480])), t0).unwrap();
    q.handle_pdu(Pdu::R2t(R2t { cccid: cid, ttag: 0, r2to: 0, r2tl: 8192 }), t0).unwrap();
    assert!(q.handle_pdu(Pdu::R2t(R2t { cccid: cid, ttag: 0, r2to: 4096, r2tl: 4096 }), t0).is_err());
    // R2T for a read.
    let mut q = live(cfg(), t0, 8192);
    let cid = q.submit(1, read_cmd(8), t0).unwrap();
    assert!(q.handle_pdu(Pdu::R2t(R2t { cccid: cid, ttag: 0, r2to: 0, r2tl: 512 }), t0).is_err());
}

#[test]
fn generation_counter_detects_stale_completions() {
    let t0 = Instant::now();
    let mut c = cfg();
    c.tags = 1;
    let mut q = live(c, t0, 8192);
    let cid1 = q.submit(1, read_cmd(1), t0).unwrap();
    assert!(matches!(q.submit(2, read_cmd(1), t0), Err(SubmitError::Full(_))));
    q.handle_pdu(c2h(cid1, 0, &[0; 512], true, true), t0).unwrap();
    let cid2 = q.submit(2, read_cmd(1), t0).unwrap();
    assert_eq!(cid_tag(cid1), cid_tag(cid2));
    assert_ne!(cid1, cid2);
    events(&mut q);
    // Old CID: dropped, the new command is untouched.
    q.handle_pdu(resp(cid1, Status::SUCCESS), t0).unwrap();
    q.handle_pdu(c2h(cid1, 0, &[0; 512], true, false), t0).unwrap();
    q.handle_pdu(Pdu::R2t(R2t { cccid: cid1, ttag: 0, r2to: 0, r2tl: 512 }), t0).unwrap();
    assert!(events(&mut q).is_empty());
    assert_eq!(q.stats().stale, 3);
    assert_eq!(q.outstanding(), 1);
    q.handle_pdu(c2h(cid2, 0, &[0; 512], true, true), t0).unwrap();
    assert_eq!(completion(&events(&mut q)[1]).0, 2);
    // 16 generations wrap.
    let cids: Vec<u16> = (0..16)
        .map(|i| {
            let cid = q.submit(i, read_cmd(1), t0).unwrap();
            q.handle_pdu(c2h(cid, 0, &[0; 512], true, true), t0).unwrap();
            cid
        })
        .collect();
    assert_eq!(cids.iter().collect::<std::collections::HashSet<_>>().len(), 16);
}

#[test]
fn commands_time_out_with_fake_time() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 8192);
    let a = q.submit(1, read_cmd(1), t0).unwrap();
    let t1 = t0 + Duration::from_secs(10);
    let mut short = read_cmd(1);
    short.timeout = Some(Duration::from_secs(5));
    let b = q.submit(2, short, t1).unwrap();
    assert_eq!(q.poll_timeout(), Some(t1 + Duration::from_secs(5)));
    assert_eq!(q.handle_timeout(t0 + Duration::from_secs(14)), Ok(None));
    assert!(events(&mut q).is_empty());
    // The expired command's own timeout is reported (the driver resets the connection).
    assert_eq!(q.handle_timeout(t0 + Duration::from_secs(15)), Ok(Some(Duration::from_secs(5))));
    let ev = events(&mut q);
    assert_eq!(ev.len(), 1);
    assert_eq!(completion(&ev[0]), (2, &Err(CommandFailure::Timeout)));
    assert_eq!(q.poll_timeout(), Some(t0 + Duration::from_secs(30)));
    // A late answer for the expired command is stale.
    q.handle_pdu(resp(b, Status::SUCCESS), t0).unwrap();
    assert!(events(&mut q).is_empty());
    // Completing `a` leaves the old deadline armed; firing it finds nothing.
    q.handle_pdu(c2h(a, 0, &[0; 512], true, true), t0).unwrap();
    events(&mut q);
    assert_eq!(q.poll_timeout(), None);
    assert_eq!(q.handle_timeout(t0 + Duration::from_secs(31)), Ok(None));
    assert!(events(&mut q).is_empty());
    assert_eq!(q.stats().timeouts, 1);
}

#[test]
fn data_digest_error_fails_only_the_command() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 8192);
    let a = q.submit(1, read_cmd(2), t0).unwrap();
    let b = q.submit(2, read_cmd(1), t0).unwrap();
    q.handle_data_digest_error(a, 512, false).unwrap();
    q.handle_pdu(c2h(a, 512, &[0; 512], true, false), t0).unwrap();
    q.handle_pdu(resp(a, Status::SUCCESS), t0).unwrap();
    q.handle_data_digest_error(b, 512, true).unwrap();
    let ev: Vec<_> = events(&mut q).into_iter().filter(|e| matches!(e, Event::Completion { .. })).collect();
    assert_eq!(completion(&ev[0]), (1, &Err(CommandFailure::DataDigest)));
    assert_eq!(completion(&ev[1]), (2, &Err(CommandFailure::DataDigest)));
    assert!(q.is_live());
}

#[test]
fn term_req_and_unexpected_pdus_are_fatal() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 8192);
    let t = TermReq { fes: Fes::PDU_SEQUENCE, fei: 0, data: Bytes::new() };
    assert_eq!(q.handle_pdu(Pdu::C2hTermReq(t), t0), Err(QueueError::TermReq { fes: 2, fei: 0 }));
    let mut q = live(cfg(), t0, 8192);
    let again = IcResp { pfv: 0, cpda: 0, dgst: DigestFlags::default(), maxh2cdata: 8192 };
    assert!(q.handle_pdu(Pdu::IcResp(again), t0).is_err());
}

#[test]
fn drain_returns_outstanding_commands_in_submission_order() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 8192);
    let data = Bytes::from(vec![1u8; 8192]);
    q.submit(10, read_cmd(1), t0).unwrap();
    q.submit(11, write_cmd(data.clone()), t0 + Duration::from_millis(1)).unwrap();
    let c = q.submit(12, read_cmd(2), t0 + Duration::from_millis(2)).unwrap();
    q.handle_pdu(c2h(c, 0, &[0; 1024], true, true), t0).unwrap();
    let cmds = q.drain_outstanding();
    assert_eq!(cmds.iter().map(|c| c.0).collect::<Vec<_>>(), vec![10, 11]);
    assert!(matches!(&cmds[1].1.data, DataXfer::Write(b) if *b == data));
    assert!(matches!(cmds[0].1.data, DataXfer::Read(512)));
    assert_eq!(q.outstanding(), 0);
    assert!(!q.is_live());
    // A fresh queue takes them again with new CIDs.
    let mut q2 = live(cfg(), t0, 8192);
    for (ud, cmd) in cmds {
        q2.submit(ud, cmd, t0).unwrap();
    }
    assert_eq!(q2.outstanding(), 2);
}

#[test]
fn emitted_pdus_decode_at_a_controller() {
    // Everything the queue emits must pass the codec's controller-side checks.
    let t0 = Instant::now();
    let mut c = cfg();
    c.hdgst = true;
    c.ddgst = true;
    let mut q = Queue::new(c.clone(), t0);
    let mut wire = BytesMut::new();
    let ic = q.poll_transmit().unwrap();
    wire.extend_from_slice(&ic.encode_to_vec(&q.encode_config()));
    let resp = IcResp { pfv: 0, cpda: 0, dgst: DigestFlags::new(true, true), maxh2cdata: 4096 };
    q.handle_pdu(Pdu::IcResp(resp), t0).unwrap();
    let cid = q.submit(1, write_cmd(Bytes::from(vec![7u8; 16384])), t0).unwrap();
    q.submit(2, write_cmd(Bytes::from(vec![8u8; 1024])), t0).unwrap();
    q.submit(3, read_cmd(4), t0).unwrap();
    q.handle_pdu(Pdu::R2t(R2t { cccid: cid, ttag: 3, r2to: 0, r2tl: 16384 }), t0).unwrap();
    let enc = q.encode_config();
    while let Some(p) = q.poll_transmit() {
        wire.extend_from_slice(&p.encode_to_vec(&enc));
    }
    let mut dec = PduDecoder::new(DecoderConfig::new(Role::Controller));
    let first = dec.decode(&mut wire).unwrap().unwrap();
    assert!(matches!(first, Pdu::IcReq(_)));
    let mut dc = DecoderConfig::new(Role::Controller);
    dc.hdgst = true;
    dc.ddgst = true;
    dec.set_config(dc);
    let mut kinds = Vec::new();
    while let Some(p) = dec.decode(&mut wire).unwrap() {
        kinds.push(match p {
            Pdu::CapsuleCmd(c) => format!("cmd{}:{}", c.sqe.cid() & 0xFFF, c.data.len()),
            Pdu::H2cData(h) => format!("h2c{}:{}", h.datao, h.data.len()),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(
        kinds,
        ["cmd0:0", "cmd1:1024", "cmd2:0", "h2c0:4096", "h2c4096:4096", "h2c8192:4096", "h2c12288:4096"]
    );
}

/// Encodes a C2HData PDU and returns the bytes and the decoder's layout of
/// its common header.
fn c2h_wire(
    cid: u16,
    off: u32,
    data: &[u8],
    last: bool,
    success: bool,
    dg: bool,
) -> (Vec<u8>, nvmeof_common::decoder::FrameLayout) {
    let pdu =
        Pdu::C2hData(C2hData { cccid: cid, datao: off, data: Bytes::copy_from_slice(data), last, success });
    let wire = pdu.encode_to_vec(&EncodeConfig { hdgst: dg, ddgst: dg, pda: 0 });
    let mut dc = DecoderConfig::new(Role::Host);
    dc.hdgst = dg;
    dc.ddgst = dg;
    let layout = PduDecoder::new(dc)
        .layout(&nvmeof_common::pdu::CommonHeader::decode(&wire[..8]))
        .expect("valid common header");
    (wire, layout)
}

#[test]
fn c2h_header_parse_matches_the_whole_pdu_decoder() {
    for dg in [false, true] {
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let (wire, layout) = c2h_wire(0x1234, 4096, &data, true, true, dg);
        let h = C2hHeader::parse(&layout, &wire[..layout.data_start]).unwrap();
        assert_eq!((h.cccid, h.datao, h.datal, h.last, h.success), (0x1234, 4096, 3000, true, true));
        assert_eq!(h.ddgst, dg);
        assert_eq!(h.plen(), wire.len());
        assert_eq!(&wire[h.data_start..h.data_start + 3000], &data[..]);
        if dg {
            // The data digest is the CRC32C of the payload, computable in pieces.
            let crc = nvmeof_common::digest::crc32c_append(
                nvmeof_common::digest::crc32c(&data[..1000]),
                &data[1000..],
            );
            assert_eq!(wire[wire.len() - 4..], crc.to_le_bytes());
            // A corrupted header fails its digest.
            let mut bad = wire.clone();
            bad[13] ^= 1;
            assert!(matches!(
                C2hHeader::parse(&layout, &bad[..layout.data_start]),
                Err(DecodeError::HeaderDigest { .. })
            ));
        }
        // DATAL must match PLEN.
        let mut bad = wire.clone();
        bad[16] ^= 1;
        assert!(matches!(
            C2hHeader::parse(&layout, &bad[..layout.data_start]),
            Err(DecodeError::DataLengthMismatch { .. }) | Err(DecodeError::HeaderDigest { .. })
        ));
    }
    // SUCCESS without LAST_PDU is refused (like the whole-PDU decoder).
    let (mut wire, _) = c2h_wire(1, 0, &[0; 512], true, true, false);
    wire[1] &= !nvmeof_common::pdu::PduFlags::LAST_PDU;
    let dc = DecoderConfig::new(Role::Host);
    let layout = PduDecoder::new(dc).layout(&nvmeof_common::pdu::CommonHeader::decode(&wire[..8])).unwrap();
    assert!(matches!(
        C2hHeader::parse(&layout, &wire[..layout.data_start]),
        Err(DecodeError::InvalidFlags { .. })
    ));
}

fn header(cid: u16, off: u32, len: u32, last: bool, success: bool) -> C2hHeader {
    C2hHeader { cccid: cid, datao: off, datal: len, last, success, data_start: 24, ddgst: false }
}

#[test]
fn split_c2h_accounts_like_whole_pdus_without_data_events() {
    let t0 = Instant::now();
    let mut q = live(cfg(), t0, 1 << 20);
    let cid = q.submit(9, read_cmd(8), t0).unwrap();
    capsule(&mut q);
    assert_eq!(q.user_data_of(cid), Some(9));
    assert_eq!(q.user_data_of(cid ^ 0x1000), None, "another generation is not this command");
    let h1 = header(cid, 0, 1024, false, false);
    assert_eq!(q.c2h_begin(&h1).unwrap(), Some((9, 0)));
    // Nothing is accounted before the end: a second begin sees the same offset.
    assert_eq!(q.c2h_begin(&h1).unwrap(), Some((9, 0)));
    q.c2h_end(&h1, true).unwrap();
    let h2 = header(cid, 1024, 3072, true, false);
    assert_eq!(q.c2h_begin(&h2).unwrap(), Some((9, 1024)));
    q.c2h_end(&h2, true).unwrap();
    assert!(events(&mut q).is_empty(), "no Data events: the driver placed the bytes");
    q.handle_pdu(resp(cid, Status::SUCCESS), t0).unwrap();
    let ev = events(&mut q);
    assert_eq!(ev.len(), 1);
    assert!(completion(&ev[0]).1.as_ref().unwrap().status.is_success());

    // SUCCESS flag completes; a short transfer with SUCCESS is reported.
    let cid = q.submit(10, read_cmd(2), t0).unwrap();
    capsule(&mut q);
    let h = header(cid, 0, 1024, true, true);
    q.c2h_begin(&h).unwrap();
    q.c2h_end(&h, true).unwrap();
    let ev = events(&mut q);
    assert_eq!(completion(&ev[0]).0, 10);
    assert!(completion(&ev[0]).1.is_ok());
    let cid = q.submit(11, read_cmd(2), t0).unwrap();
    capsule(&mut q);
    let h = header(cid, 0, 512, true, true);
    q.c2h_begin(&h).unwrap();
    q.c2h_end(&h, true).unwrap();
    let ev = events(&mut q);
    assert_eq!(completion(&ev[0]).1, &Err(CommandFailure::ShortData { expected: 1024, received: 512 }));

    // A digest mismatch fails the command at its completion (SUCCESS or CapsuleResp).
    let cid = q.submit(12, read_cmd(2), t0).unwrap();
    capsule(&mut q);
    let h = header(cid, 0, 512, false, false);
    q.c2h_begin(&h).unwrap();
    q.c2h_end(&h, false).unwrap();
    let h = header(cid, 512, 512, true, false);
    q.c2h_begin(&h).unwrap();
    q.c2h_end(&h, true).unwrap();
    q.handle_pdu(resp(cid, Status::SUCCESS), t0).unwrap();
    let ev = events(&mut q);
    assert_eq!(completion(&ev[0]).1, &Err(CommandFailure::DataDigest));
    let cid = q.submit(13, read_cmd(1), t0).unwrap();
    capsule(&mut q);
    let h = header(cid, 0, 512, true, true);
    q.c2h_begin(&h).unwrap();
    q.c2h_end(&h, false).unwrap();
    assert_eq!(completion(&events(&mut q)[0]).1, &Err(CommandFailure::DataDigest));

    // A command that timed out between begin and end: the end is stale, nothing breaks.
    let cid = q.submit(14, read_cmd(1), t0).unwrap();
    capsule(&mut q);
    let h = header(cid, 0, 512, true, false);
    q.c2h_begin(&h).unwrap();
    q.handle_timeout(t0 + Duration::from_secs(31)).unwrap();
    assert_eq!(completion(&events(&mut q)[0]).1, &Err(CommandFailure::Timeout));
    let stale = q.stats().stale;
    q.c2h_end(&h, true).unwrap();
    assert_eq!(q.stats().stale, stale + 1);
    assert!(events(&mut q).is_empty());
    // Unknown CIDs are stale, not fatal.
    assert_eq!(q.c2h_begin(&header(0x0FFF, 0, 512, true, false)).unwrap(), None);
    assert!(q.is_live());
}

#[test]
fn split_c2h_violations_are_fatal() {
    let t0 = Instant::now();
    // Gap.
    let mut q = live(cfg(), t0, 1 << 20);
    let cid = q.submit(1, read_cmd(2), t0).unwrap();
    assert!(matches!(q.c2h_begin(&header(cid, 512, 512, true, false)), Err(QueueError::Violation { .. })));
    assert!(!q.is_live());
    // Overrun.
    let mut q = live(cfg(), t0, 1 << 20);
    let cid = q.submit(1, read_cmd(1), t0).unwrap();
    assert!(matches!(q.c2h_begin(&header(cid, 0, 1024, true, false)), Err(QueueError::Violation { .. })));
    // Data for a write.
    let mut q = live(cfg(), t0, 1 << 20);
    let cid = q.submit(3, write_cmd(Bytes::from(vec![0; 512])), t0).unwrap();
    assert!(q.c2h_begin(&header(cid, 0, 512, true, false)).is_err());
    // Before ICResp.
    let mut q = Queue::new(cfg(), t0);
    assert!(q.c2h_begin(&header(0, 0, 512, true, false)).is_err());
}
