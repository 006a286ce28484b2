//! Target integration tests: asynchronous events, keep-alive, isolation of a
//! healthy connection from a misbehaving one, and graceful shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nvmeof_common::opcode::{AdminOpcode, IoOpcode};
use nvmeof_common::pdu::{CapsuleCmd, DigestFlags, H2cData, IcReq, Pdu};
use nvmeof_common::spec::features::{FeatureId, GetFeaturesCmd, SetFeaturesCmd};
use nvmeof_common::spec::identify::{decode_ns_list, Cns};
use nvmeof_common::spec::log::{ChangedNsList, LogPageId};
use nvmeof_common::spec::IdentifyNamespace;
use nvmeof_common::{SglDescriptor, Sqe, Status};
use nvmeof_target::backend::MemBackend;
use nvmeof_target::core::Namespace;
use nvmeof_tests::harness::*;
use nvmeof_tests::raw_client::{RawClient, RecvError, HOSTNQN};
use nvmeof_tests::slow_backend::SlowBackend;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

const AEN_NS_CHANGED: u32 = 0x0004_0002;

fn aer_sqe() -> Sqe {
    let mut s = Sqe::new(AdminOpcode::ASYNC_EVENT.0);
    s.set_sgl(SglDescriptor::transport(0));
    s
}

async fn changed_ns(admin: &mut RawClient) -> ChangedNsList {
    let l = admin.get_log_page(LogPageId::CHANGED_NS, 0, 0, 4096, false).await.ok();
    ChangedNsList::decode(&l.data)
}

#[tokio::test]
async fn aen_namespace_added_resized_removed() {
    let s = setup(&default_config()).await;
    let (server, mut admin, mut io) = (s.server, s.admin, s.io);
    let subsys = server.target.subsystem(SUBNQN).unwrap();
    admin.submit(SetFeaturesCmd::new(FeatureId::ASYNC_EVENT, 0x100).to_sqe(0), None).await.ok();

    // Add a namespace: the AER completes with Notice / NS Attribute Changed / log 04h.
    let aer = admin.start(aer_sqe()).await;
    assert!(matches!(admin.recv_pdu_within(Duration::from_millis(200)).await, Err(RecvError::Timeout)));
    subsys.add_namespace(Arc::new(Namespace::new(SUBNQN, 2, Arc::new(MemBackend::new(1 << 20, 512)))));
    let c = admin.wait(aer).await.ok();
    assert_eq!(c.cqe.dw0(), AEN_NS_CHANGED);
    // RAE=1 keeps the list.
    let l = admin.get_log_page(LogPageId::CHANGED_NS, 0, 0, 4096, true).await.ok();
    assert_eq!(ChangedNsList::decode(&l.data), ChangedNsList::List(vec![2]));
    assert_eq!(changed_ns(&mut admin).await, ChangedNsList::List(vec![2]));
    // Read with RAE=0 cleared it.
    assert_eq!(changed_ns(&mut admin).await, ChangedNsList::List(vec![]));
    let l = admin.identify(Cns::ACTIVE_NS_LIST, 0).await.ok();
    assert_eq!(decode_ns_list(&l.data), vec![1, 2]);
    let d = pattern(512, 1);
    io.write(2, 5, &d, 512).await.ok();
    assert_eq!(io.read(2, 5, 1, 512).await.ok().data, d);

    // Resize namespace 1: another AER, and Identify Namespace shows the new size.
    let aer = admin.start(aer_sqe()).await;
    let new_size = NS1_SIZE * 2;
    subsys.resize_namespace(1, new_size).unwrap();
    let c = admin.wait(aer).await.ok();
    assert_eq!(c.cqe.dw0(), AEN_NS_CHANGED);
    assert_eq!(changed_ns(&mut admin).await, ChangedNsList::List(vec![1]));
    let n = IdentifyNamespace::decode(&admin.identify(Cns::NS, 1).await.ok().data).unwrap();
    assert_eq!(n.nsze, new_size / NS1_BS as u64);
    let last = new_size / NS1_BS as u64 - 1;
    io.write(1, last, &d, NS1_BS).await.ok();
    assert_eq!(io.read(1, last, 1, NS1_BS).await.ok().data, d);

    // Notices stay masked until the log is read: two changes, one event.
    let aer = admin.start(aer_sqe()).await;
    subsys.add_namespace(Arc::new(Namespace::new(SUBNQN, 3, Arc::new(MemBackend::new(1 << 20, 512)))));
    assert_eq!(admin.wait(aer).await.ok().cqe.dw0(), AEN_NS_CHANGED);
    let aer = admin.start(aer_sqe()).await;
    assert!(subsys.remove_namespace(2));
    assert!(
        matches!(admin.recv_pdu_within(Duration::from_millis(200)).await, Err(RecvError::Timeout)),
        "AEN while notices are masked"
    );
    let mut l = match changed_ns(&mut admin).await {
        ChangedNsList::List(l) => l,
        o => panic!("{o:?}"),
    };
    l.sort_unstable();
    assert_eq!(l, vec![2, 3]);
    io.read(2, 0, 1, 512).await.expect_status(Status::INVALID_NS);
    // Unmasked again: the outstanding AER fires on the next change.
    assert!(subsys.remove_namespace(3));
    assert_eq!(admin.wait(aer).await.ok().cqe.dw0(), AEN_NS_CHANGED);

    // Without the NS attribute notice enabled, no event.
    admin.submit(SetFeaturesCmd::new(FeatureId::ASYNC_EVENT, 0).to_sqe(0), None).await.ok();
    changed_ns(&mut admin).await;
    let _aer = admin.start(aer_sqe()).await;
    subsys.add_namespace(Arc::new(Namespace::new(SUBNQN, 4, Arc::new(MemBackend::new(1 << 20, 512)))));
    assert!(matches!(admin.recv_pdu_within(Duration::from_millis(200)).await, Err(RecvError::Timeout)));
    assert_eq!(changed_ns(&mut admin).await, ChangedNsList::List(vec![4]));
}

#[tokio::test]
async fn aer_limit() {
    let mut s = setup(&default_config()).await;
    let id = nvmeof_common::spec::IdentifyController::decode(&s.admin.identify(Cns::CTRL, 0).await.ok().data)
        .unwrap();
    let limit = id.aerl as usize + 1;
    for _ in 0..limit {
        s.admin.start(aer_sqe()).await;
    }
    let r = s.admin.submit(aer_sqe(), None).await;
    r.expect_status(Status::ASYNC_LIMIT);
}

#[tokio::test]
async fn keep_alive_timeout_closes_all_queues() {
    let (_server, addr) = start(&default_config()).await;
    let mut admin = RawClient::connect(addr).await;
    assert!(admin.admin_connect_kato(SUBNQN, HOSTNQN, 1000).await.status.is_success());
    admin.enable().await;
    let mut io = io_queue(addr, admin.cntlid, 1, 16384).await;
    let mut io2 = io_queue(addr, admin.cntlid, 2, 16384).await;
    let t0 = Instant::now();
    // Nothing more is sent: the controller goes away within ~KATO (+ a grace).
    admin.expect_closed_within(Duration::from_millis(3000)).await;
    let elapsed = t0.elapsed();
    assert!(elapsed >= Duration::from_millis(700), "closed after {elapsed:?}, before KATO");
    io.expect_closed_within(Duration::from_millis(1000)).await;
    io2.expect_closed_within(Duration::from_millis(1000)).await;
    assert!(t0.elapsed() < Duration::from_millis(3500));
    // The controller is gone: its CNTLID no longer accepts I/O queues.
    let mut io3 = RawClient::connect(addr).await;
    let s = io3.io_connect(3, admin.cntlid, SUBNQN, HOSTNQN).await.status;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
}

#[tokio::test]
async fn keep_alive_commands_keep_the_controller() {
    let (_server, addr) = start(&default_config()).await;
    let mut admin = RawClient::connect(addr).await;
    assert!(admin.admin_connect_kato(SUBNQN, HOSTNQN, 1000).await.status.is_success());
    admin.enable().await;
    let mut io = io_queue(addr, admin.cntlid, 1, 16384).await;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(2500) {
        admin.keep_alive().await.ok();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    admin.identify(Cns::CTRL, 0).await.ok();
    io.read(1, 0, 1, NS1_BS).await.ok();
    assert!(!admin.csts().await.cfs());
}

/// A Connect KATO that is not a whole number of seconds is rounded up to one,
/// as nvmet_alloc_ctrl does (`ctrl->kato = DIV_ROUND_UP(kato, 1000)`): with
/// KATO 100 ms an idle controller lives about a second, and Get Features KATO
/// reports the 1000 ms the timer really uses.
#[tokio::test]
async fn connect_kato_is_rounded_up_to_whole_seconds() {
    let (_server, addr) = start(&default_config()).await;
    let mut admin = RawClient::connect(addr).await;
    assert!(admin.admin_connect_kato(SUBNQN, HOSTNQN, 100).await.status.is_success());
    admin.enable().await;
    // Idle for four times the requested KATO: a 100 ms timer would have
    // expired (within 2 × KATO), the rounded 1 s one has not.
    assert!(admin.is_open_for(Duration::from_millis(400)).await, "controller gone before 1 s of idleness");
    let g = admin.submit(GetFeaturesCmd::new(FeatureId::KATO).to_sqe(0), None).await.ok();
    assert_eq!(g.cqe.dw0(), 1000, "KATO reported");
    // It still expires, about a second after that last command.
    let t0 = Instant::now();
    admin.expect_closed_within(Duration::from_millis(3000)).await;
    assert!(t0.elapsed() >= Duration::from_millis(700), "closed after {:?}", t0.elapsed());
}

/// A Connect KATO near u32::MAX ms, rounded up to whole seconds, does not
/// fit in Get Features' 32-bit DW0: it is reported as the largest whole
/// number of seconds that does (it came out truncated, as 704 ms).
#[tokio::test]
async fn connect_kato_near_the_32_bit_limit_is_reported_within_it() {
    let (_server, addr) = start(&default_config()).await;
    let mut admin = RawClient::connect(addr).await;
    assert!(admin.admin_connect_kato(SUBNQN, HOSTNQN, u32::MAX - 100).await.status.is_success());
    admin.enable().await;
    let g = admin.submit(GetFeaturesCmd::new(FeatureId::KATO).to_sqe(0), None).await.ok();
    assert_eq!(g.cqe.dw0(), u32::MAX / 1000 * 1000);
}

/// One malformed connection; `Ok(true)` if the target terminated/closed it.
async fn attack(addr: std::net::SocketAddr, cntlid: u16, i: usize, rng: &mut rand::rngs::StdRng) -> bool {
    let garbage: Vec<u8> = (0..rng.gen_range(1..400)).map(|_| rng.gen()).collect();
    let mut c = RawClient::tcp(addr).await;
    let expect_term = match i % 8 {
        0 => {
            c.try_send_raw(&garbage).await;
            false
        }
        1 => {
            c.try_send_raw(
                &Pdu::IcReq(IcReq { pfv: 7, ..Default::default() }).encode_to_vec(&Default::default()),
            )
            .await;
            true
        }
        2 => {
            let mut sqe = Sqe::new(IoOpcode::READ.0);
            sqe.set_sgl(SglDescriptor::transport(512));
            c.try_send_raw(&Pdu::CapsuleCmd(CapsuleCmd::new(sqe)).encode_to_vec(&Default::default())).await;
            true
        }
        3 => {
            let mut c2 = RawClient::connect(addr).await;
            c2.try_send_raw(&garbage).await;
            c = c2;
            false
        }
        4 => {
            let mut c2 = RawClient::connect_with(addr, DigestFlags::new(true, true)).await;
            let mut sqe = Sqe::new(IoOpcode::READ.0);
            sqe.set_sgl(SglDescriptor::transport(512));
            let mut b = c2.encode(&Pdu::CapsuleCmd(CapsuleCmd::new(sqe)));
            b[72] ^= 1;
            c2.try_send_raw(&b).await;
            c = c2;
            true
        }
        k => {
            // An I/O queue of the *same* controller that then misbehaves.
            let mut c2 = RawClient::connect(addr).await;
            let qid = 2 + (i % 100) as u16;
            let _ = c2.io_connect(qid, cntlid, SUBNQN, HOSTNQN).await;
            let b = match k {
                5 => {
                    // An H2CData header announcing more than ever arrives.
                    let mut b = vec![0x06, 0x00, 24, 24];
                    b.extend_from_slice(&(24u32 + 4096).to_le_bytes());
                    b.extend_from_slice(&[0u8; 16]);
                    b.extend_from_slice(&garbage);
                    b
                }
                6 => {
                    // Unsolicited H2CData.
                    let d =
                        H2cData { cccid: 0xFFFF, ttag: 0, datao: 0, data: Bytes::from(garbage), last: true };
                    Pdu::H2cData(d).encode_to_vec(&Default::default())
                }
                _ => {
                    // A capsule with a bad HLEN.
                    let mut sqe = Sqe::new(IoOpcode::READ.0);
                    sqe.set_nsid(1).set_sgl(SglDescriptor::transport(512));
                    let mut b = Pdu::CapsuleCmd(CapsuleCmd::new(sqe)).encode_to_vec(&Default::default());
                    b[2] = 0x50;
                    b
                }
            };
            c2.try_send_raw(&b).await;
            c = c2;
            k != 5
        }
    };
    match c.try_closed_within(Duration::from_millis(if expect_term { 2000 } else { 300 })).await {
        Ok(pdus) => {
            if expect_term {
                assert!(matches!(pdus.first(), Some(Pdu::C2hTermReq(_))), "attack {i}: {pdus:?}");
            }
            true
        }
        Err(e) => {
            assert!(!expect_term, "attack {i}: connection not terminated: {e}");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn healthy_connection_unaffected_by_malformed_peers() {
    let mut cfg = default_config();
    cfg.limits.max_h2c_data = 16384;
    let s = setup(&cfg).await;
    let (addr, cntlid, mut io) = (s.addr, s.admin.cntlid, s.io);
    let _server = s.server;
    let _admin = s.admin;
    let deadline = Instant::now() + Duration::from_millis(1500);

    let attacker = tokio::spawn(async move {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let (mut n, mut closed) = (0usize, 0usize);
        while Instant::now() < deadline {
            closed += attack(addr, cntlid, n, &mut rng).await as usize;
            n += 1;
        }
        (n, closed)
    });

    // Depth 8: each slot owns 2048 blocks; write a random extent, read it back, verify.
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut slots: Vec<(u64, Vec<u8>)> = vec![(0, Vec::new()); 8];
    let mut by_cid: HashMap<u16, (usize, bool)> = HashMap::new();
    let mut verified = 0usize;
    async fn start_write(
        io: &mut RawClient,
        rng: &mut rand::rngs::StdRng,
        slot: usize,
    ) -> (u16, u64, Vec<u8>) {
        let nlb = if rng.gen_bool(0.2) { rng.gen_range(33..=256) } else { rng.gen_range(1..=32) };
        let lba = slot as u64 * 2048 + rng.gen_range(0..(2048 - nlb as u64));
        let data = pattern(nlb as usize * 512, rng.gen());
        let sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, lba, nlb);
        let cid = io.start_write(sqe, Bytes::from(data.clone()), false).await;
        (cid, lba, data)
    }
    for (i, slot) in slots.iter_mut().enumerate() {
        let (cid, lba, data) = start_write(&mut io, &mut rng, i).await;
        *slot = (lba, data);
        by_cid.insert(cid, (i, true));
    }
    while !by_cid.is_empty() {
        let c = io.next_completion().await.expect("healthy connection failed");
        let (slot, was_write) = by_cid.remove(&c.cid).expect("completion for an unknown CID");
        assert!(c.status().is_success(), "slot {slot}: {} ({:?})", c.status(), c.cqe);
        if was_write {
            let (lba, data) = &slots[slot];
            let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, *lba, (data.len() / 512) as u32);
            sqe.set_sgl(SglDescriptor::transport(data.len() as u32));
            let cid = io.start(sqe).await;
            by_cid.insert(cid, (slot, false));
        } else {
            assert!(c.data == slots[slot].1, "slot {slot}: read-back differs");
            verified += 1;
            if Instant::now() < deadline {
                let (cid, lba, data) = start_write(&mut io, &mut rng, slot).await;
                slots[slot] = (lba, data);
                by_cid.insert(cid, (slot, true));
            }
        }
    }
    let (attacks, closed) = attacker.await.expect("attacker task");
    assert!(verified >= 8, "only {verified} verified I/Os");
    assert!(attacks >= 8 && closed >= attacks / 2, "attacks {attacks}, closed {closed}");
    // Still fine afterwards.
    let d = pattern(4096, 99);
    io.write(1, 0, &d, 512).await.ok();
    assert_eq!(io.read(1, 0, 8, 512).await.ok().data, d);
}

#[tokio::test]
async fn graceful_shutdown_completes_in_flight_read() {
    let s = setup(&default_config()).await;
    let (server, addr, mut admin, mut io) = (s.server, s.addr, s.admin, s.io);
    let slow = Arc::new(SlowBackend::new(1 << 20, 512, Duration::from_millis(400)));
    server.target.subsystem(SUBNQN).unwrap().add_namespace(Arc::new(Namespace::new(SUBNQN, 2, slow)));
    let d = pattern(4096, 5);
    io.write(2, 0, &d, 512).await.ok();
    // Like every host, keep an AER outstanding: it must not hold the shutdown for the grace period.
    admin.start(aer_sqe()).await;
    admin.identify(Cns::CTRL, 0).await.ok();

    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 2, 0, 8);
    sqe.set_sgl(SglDescriptor::transport(4096));
    let cid = io.start(sqe).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let t0 = Instant::now();
    let stop = tokio::spawn(server.shutdown(Duration::from_secs(5)));
    let c = io.wait(cid).await.ok();
    assert_eq!(c.data, d, "in-flight read completed with the wrong data");
    io.expect_closed_within(Duration::from_secs(2)).await;
    admin.expect_closed_within(Duration::from_secs(2)).await;
    tokio::time::timeout(Duration::from_secs(3), stop).await.expect("shutdown hangs").unwrap();
    assert!(t0.elapsed() < Duration::from_secs(3), "shutdown took {:?}", t0.elapsed());
    // No longer listening.
    let r = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await;
    assert!(matches!(r, Ok(Err(_))), "still accepting after shutdown: {r:?}");
}

#[tokio::test]
async fn graceful_shutdown_sends_every_queued_response_before_closing() {
    // A host that reads slowly: the responses to in-flight reads (32 MiB, more
    // than the loopback socket buffers hold) are still queued in the target
    // when the shutdown starts. The queue must close only once they are all
    // sent: closing with a PDU half written hands the host a truncated stream
    // (through a relay, whatever bytes come next), not a clean close.
    let s = setup(&default_config()).await;
    let (server, mut io, _admin) = (s.server, s.io, s.admin);
    let len = 1u32 << 20;
    let lbas = len / NS1_BS;
    let chunks = (NS1_SIZE / u64::from(len)) as u32;
    let mut data = Vec::new();
    for i in 0..chunks {
        let d = pattern(len as usize, 100 + u64::from(i));
        io.write(1, u64::from(i * lbas), &d, NS1_BS).await.ok();
        data.push(d);
    }
    let mut want = HashMap::new();
    for i in 0..32u32 {
        let chunk = i % chunks;
        let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, u64::from(chunk * lbas), lbas);
        sqe.set_sgl(SglDescriptor::transport(len));
        want.insert(io.start(sqe).await, &data[chunk as usize]);
    }
    // Let the target execute all 32 and fill the socket, then stop it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stop = tokio::spawn(server.shutdown(Duration::from_secs(5)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A command that arrives while the target drains stays unread (the host
    // retries it on its next association). Unread bytes at close make the
    // kernel send a RST, which would drop the responses still in the target's
    // send buffer: the close must be a FIN after them.
    let mut late = RawClient::rw_sqe(IoOpcode::READ, 1, 0, 8);
    late.set_sgl(SglDescriptor::transport(4096));
    late.set_cid(999);
    io.send_pdu(&Pdu::CapsuleCmd(CapsuleCmd::new(late))).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    io.timeout = Duration::from_secs(5);
    for _ in 0..32 {
        let c = io.next_completion().await.unwrap_or_else(|e| panic!("{} left: {e}", want.len()));
        let d = want.remove(&c.cid).expect("a read this test started");
        assert!(c.status().is_success(), "{}", c.status());
        assert!(&c.data == d, "read {} completed with the wrong data", c.cid);
    }
    io.expect_closed_within(Duration::from_secs(2)).await;
    tokio::time::timeout(Duration::from_secs(6), stop).await.expect("shutdown hangs").unwrap();
}

#[tokio::test]
async fn graceful_shutdown_completes_write_awaiting_data() {
    let s = setup(&default_config()).await;
    let (server, mut io, _admin) = (s.server, s.io, s.admin);
    // A write whose data the target solicited (R2T) but has not received yet is in flight.
    let d = pattern(64 * 1024, 6);
    let mut sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, 0, 128);
    sqe.set_cid(77).set_sgl(SglDescriptor::transport(d.len() as u32));
    io.send_pdu(&Pdu::CapsuleCmd(CapsuleCmd::new(sqe))).await;
    let r2t = match io.recv_pdu().await {
        Ok(Pdu::R2t(r)) => r,
        other => panic!("expected R2T, got {other:?}"),
    };
    let target = server.target.clone();
    let stop = tokio::spawn(server.shutdown(Duration::from_secs(4)));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let h2c = H2cData { cccid: 77, ttag: r2t.ttag, datao: 0, data: Bytes::from(d.clone()), last: true };
    io.send_pdu(&Pdu::H2cData(h2c)).await;
    io.timeout = Duration::from_secs(3);
    match io.recv_pdu().await {
        Ok(Pdu::CapsuleResp(r)) => {
            assert_eq!(r.cqe.cid, 77);
            assert!(r.cqe.status.is_success(), "{}", r.cqe.status);
        }
        other => panic!("write in flight at shutdown not completed: {other:?}"),
    }
    io.expect_closed_within(Duration::from_secs(2)).await;
    tokio::time::timeout(Duration::from_secs(3), stop).await.expect("shutdown hangs").unwrap();
    assert_eq!(target.connection_count(), 0);
    // The data reached the namespace.
    let ns = target.subsystem(SUBNQN).unwrap().namespace(1).unwrap();
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let c = ns
        .backend
        .submit(
            0,
            nvmeof_target::backend::IoOp::Read { offset: 0, len: d.len() },
            &nvmeof_target::backend::QueueIo::detached(tx),
        )
        .unwrap();
    assert!(c.data == d, "written data not in the namespace");
}

/// A second stop signal ends the wait for connections at once (the binary's
/// second SIGINT or SIGTERM): before, it waited out the whole grace period
/// (10 s) for a host that never sent the data of its write.
#[tokio::test]
async fn shutdown_wait_for_connections_ends_when_cut() {
    let s = setup(&default_config()).await;
    let (server, mut io, _admin) = (s.server, s.io, s.admin);
    let mut sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, 0, 8);
    sqe.set_cid(78).set_sgl(SglDescriptor::transport(4096));
    io.send_pdu(&Pdu::CapsuleCmd(CapsuleCmd::new(sqe))).await;
    assert!(matches!(io.recv_pdu().await, Ok(Pdu::R2t(_))));
    let target = server.target.clone();
    let t0 = std::time::Instant::now();
    let cut = tokio::time::sleep(Duration::from_millis(300));
    let stop = tokio::spawn(server.shutdown_or(Duration::from_secs(30), cut));
    tokio::time::timeout(Duration::from_secs(5), stop).await.expect("shutdown not cut").unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(300), "stopped before the cut: {:?}", t0.elapsed());
    // The host never sent its data: its connection was still open when the wait ended.
    assert!(target.connection_count() >= 1);
}

/// The binary's first SIGINT starts the graceful stop, which waits (up to
/// 10 s) for a write whose data the host never sends; a second SIGINT ends
/// that wait: the target exits at once, status 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_sigint_stops_the_binary_without_waiting_for_hosts() {
    let bin = tokio::task::spawn_blocking(|| built_binary("nvmeof-target", "nvmeof-target")).await.unwrap();
    // A port held for the target (it binds it next; no other test can).
    let held = HeldPort::new();
    let addr = held.addr();
    let mut child = std::process::Command::new(bin)
        .args(["serve", "--ram", "1M", "--nqn", SUBNQN, "--listen", &addr.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    // SIGINT to the child this test started, by its PID.
    let sigint = || {
        let st = std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap();
        assert!(st.success(), "kill -INT {pid}");
    };
    let mut up = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "target not listening on {addr} within 5 s");
    let admin = admin_queue(addr, SUBNQN).await;
    let mut io = io_queue(addr, admin.cntlid, 1, 8192).await;
    let mut sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, 0, 8);
    sqe.set_cid(79).set_sgl(SglDescriptor::transport(4096));
    io.send_pdu(&Pdu::CapsuleCmd(CapsuleCmd::new(sqe))).await;
    assert!(matches!(io.recv_pdu().await, Ok(Pdu::R2t(_))));
    let exited_within = |child: &mut std::process::Child, limit: Duration| {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return Some(st);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    sigint();
    let first = exited_within(&mut child, Duration::from_millis(1500));
    if first.is_some() {
        panic!("the target did not wait for the write in flight: {first:?}");
    }
    sigint();
    let second = exited_within(&mut child, Duration::from_secs(3));
    let _ = child.kill();
    let _ = child.wait();
    let st = second.expect("no exit within 3 s of the second SIGINT");
    assert_eq!(st.code(), Some(0), "{st:?}");
    drop((io, admin));
}

/// A new I/O controller starts with Namespace Attribute Notices and ANA
/// Change Notices enabled, as nvmet creates every controller with
/// `aen_enabled = NVMET_AEN_CFG_OPTIONAL` (`nvmet_alloc_ctrl`):
/// Get Features AEC reads 900h before any Set, and a host that posts an AER
/// without configuring AEC is told of a namespace change.
#[tokio::test]
async fn ns_attribute_notices_are_enabled_from_the_start() {
    let s = setup(&default_config()).await;
    let (server, mut admin) = (s.server, s.admin);
    let g = admin.submit(GetFeaturesCmd::new(FeatureId::ASYNC_EVENT).to_sqe(0), None).await.ok();
    assert_eq!(g.cqe.dw0(), 0x900, "AEC of a new controller");
    let aer = admin.start(aer_sqe()).await;
    let subsys = server.target.subsystem(SUBNQN).unwrap();
    subsys.add_namespace(Arc::new(Namespace::new(SUBNQN, 2, Arc::new(MemBackend::new(1 << 20, 512)))));
    let c = bounded(5, admin.wait(aer)).await.ok();
    assert_eq!(c.cqe.dw0(), AEN_NS_CHANGED);
}
