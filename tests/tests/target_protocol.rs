//! Target integration tests: NVMe/TCP protocol errors. Each must be answered
//! with a C2HTermReq carrying the right FES/FEI, after which the target sends
//! nothing more and closes the connection.

use bytes::Bytes;
use nvmeof_common::error::Fes;
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::pdu::{CapsuleCmd, DigestFlags, H2cData, IcReq, Pdu, R2t, TermReq};
use nvmeof_common::{SglDescriptor, Sqe};
use nvmeof_tests::harness::*;
use nvmeof_tests::raw_client::RawClient;

fn icreq() -> IcReq {
    IcReq { pfv: 0, hpda: 0, dgst: DigestFlags::default(), maxr2t: 0 }
}

fn read_capsule() -> Pdu {
    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, 0, 1);
    sqe.set_cid(7).set_sgl(SglDescriptor::transport(512));
    Pdu::CapsuleCmd(CapsuleCmd::new(sqe))
}

#[track_caller]
fn assert_fes(t: &TermReq, fes: Fes, fei: u32) {
    assert_eq!((t.fes, t.fei), (fes, fei), "TermReq {t:?}");
    assert!(t.data.len() <= 128, "error data longer than 128 bytes");
}

/// Sends a write capsule (transport SGL, `len` bytes) and returns the R2T.
async fn write_awaiting_r2t(io: &mut RawClient, cid: u16, len: u32) -> R2t {
    let mut sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, 0, len / NS1_BS);
    sqe.set_cid(cid).set_sgl(SglDescriptor::transport(len));
    io.send_pdu(&Pdu::CapsuleCmd(CapsuleCmd::new(sqe))).await;
    match io.recv_pdu().await {
        Ok(Pdu::R2t(r)) => {
            assert_eq!((r.cccid, r.r2to, r.r2tl), (cid, 0, len));
            r
        }
        other => panic!("expected R2T, got {other:?}"),
    }
}

fn h2c(cccid: u16, ttag: u16, datao: u32, len: usize, last: bool) -> Pdu {
    Pdu::H2cData(H2cData { cccid, ttag, datao, data: Bytes::from(vec![0xA5; len]), last })
}

#[tokio::test]
async fn icreq_bad_pfv() {
    let (_server, addr) = start(&default_config()).await;
    let mut c = RawClient::tcp(addr).await;
    c.send_pdu(&Pdu::IcReq(IcReq { pfv: 1, ..icreq() })).await;
    let t = c.expect_term().await;
    assert_fes(&t, Fes::INVALID_HEADER_FIELD, 8);
    // The offending header is quoted.
    assert!(t.data.len() >= 16 && t.data[0] == 0x00 && t.data[2] == 128, "{:?}", t.data);
}

#[tokio::test]
async fn icreq_bad_hpda_and_digest_bits() {
    let (_server, addr) = start(&default_config()).await;
    let mut c = RawClient::tcp(addr).await;
    c.send_pdu(&Pdu::IcReq(IcReq { hpda: 1, ..icreq() })).await;
    assert_fes(&c.expect_term().await, Fes::INVALID_HEADER_FIELD, 10);
    let mut c = RawClient::tcp(addr).await;
    c.send_pdu(&Pdu::IcReq(IcReq { dgst: DigestFlags(0x84), ..icreq() })).await;
    assert_fes(&c.expect_term().await, Fes::INVALID_HEADER_FIELD, 11);
}

#[tokio::test]
async fn bad_hlen() {
    let (_server, addr) = start(&default_config()).await;
    // ICReq with HLEN 64.
    let mut c = RawClient::tcp(addr).await;
    let mut b = c.encode(&Pdu::IcReq(icreq()));
    b[2] = 64;
    c.send_raw(&b).await;
    assert_fes(&c.expect_term().await, Fes::INVALID_HEADER_FIELD, 2);
    // CapsuleCmd with HLEN 70 after a good ICReq.
    let mut c = RawClient::connect(addr).await;
    let mut b = c.encode(&read_capsule());
    b[2] = 70;
    c.send_raw(&b).await;
    let t = c.expect_term().await;
    assert_fes(&t, Fes::INVALID_HEADER_FIELD, 2);
    assert_eq!(t.data.first(), Some(&0x04), "offending header quoted");
}

#[tokio::test]
async fn bad_plen_pdo_and_type() {
    let (_server, addr) = start(&default_config()).await;
    // ICReq with PLEN 200.
    let mut c = RawClient::tcp(addr).await;
    let mut b = c.encode(&Pdu::IcReq(icreq()));
    b[4] = 200;
    c.send_raw(&b).await;
    assert_fes(&c.expect_term().await, Fes::INVALID_HEADER_FIELD, 4);
    // A controller-to-host type (R2T) from the host.
    let mut c = RawClient::connect(addr).await;
    let r2t = Pdu::R2t(R2t { cccid: 1, ttag: 1, r2to: 0, r2tl: 512 }).encode_to_vec(&Default::default());
    c.send_raw(&r2t).await;
    assert_fes(&c.expect_term().await, Fes::INVALID_HEADER_FIELD, 0);
    // A reserved type.
    let mut c = RawClient::connect(addr).await;
    let mut b = vec![0u8; 24];
    b[0] = 0x0B;
    b[2] = 24;
    b[4] = 24;
    c.send_raw(&b).await;
    assert_fes(&c.expect_term().await, Fes::INVALID_HEADER_FIELD, 0);
    // CapsuleCmd with data whose PDO points into the header.
    let mut c = RawClient::connect(addr).await;
    let mut sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, 0, 1);
    sqe.set_sgl(SglDescriptor::in_capsule(512));
    let mut b = c.encode(&Pdu::CapsuleCmd(CapsuleCmd { sqe, data: Bytes::from(vec![1; 512]) }));
    b[3] = 64;
    c.send_raw(&b).await;
    assert_fes(&c.expect_term().await, Fes::INVALID_HEADER_FIELD, 3);
}

#[tokio::test]
async fn capsule_before_icreq_and_second_icreq() {
    let (_server, addr) = start(&default_config()).await;
    let mut c = RawClient::tcp(addr).await;
    c.send_pdu(&read_capsule()).await;
    assert_eq!(c.expect_term().await.fes, Fes::PDU_SEQUENCE);
    let mut c = RawClient::connect(addr).await;
    c.send_pdu(&Pdu::IcReq(icreq())).await;
    assert_eq!(c.expect_term().await.fes, Fes::PDU_SEQUENCE);
}

#[tokio::test]
async fn header_digest_errors() {
    let (_server, addr) = start(&default_config()).await;
    // Mismatch: FES 3.
    let mut c = RawClient::connect_with(addr, DigestFlags::new(true, false)).await;
    let mut b = c.encode(&read_capsule());
    assert_eq!(b.len(), 76);
    b[73] ^= 0x55;
    c.send_raw(&b).await;
    assert_eq!(c.expect_term().await.fes, Fes::HEADER_DIGEST);
    // Header digests negotiated but HDGSTF clear: invalid FLAGS.
    let mut c = RawClient::connect_with(addr, DigestFlags::new(true, false)).await;
    let b = read_capsule().encode_to_vec(&Default::default());
    c.send_raw(&b).await;
    assert_fes(&c.expect_term().await, Fes::INVALID_HEADER_FIELD, 1);
    // HDGSTF set without negotiation.
    let mut c = RawClient::connect(addr).await;
    let mut b =
        read_capsule().encode_to_vec(&nvmeof_common::pdu::EncodeConfig { hdgst: true, ..Default::default() });
    b[1] |= 1;
    c.send_raw(&b).await;
    assert_fes(&c.expect_term().await, Fes::INVALID_HEADER_FIELD, 1);
}

#[tokio::test]
async fn h2c_data_over_maxh2cdata() {
    let mut cfg = default_config();
    cfg.limits.max_h2c_data = 4096;
    let mut s = setup(&cfg).await;
    assert_eq!(s.io.maxh2cdata, 4096);
    let r = write_awaiting_r2t(&mut s.io, 9, 16384).await;
    s.io.send_pdu(&h2c(9, r.ttag, 0, 8192, false)).await;
    assert_fes(&s.io.expect_term().await, Fes::DATA_LIMIT_EXCEEDED, 0);
}

#[tokio::test]
async fn h2c_data_unknown_ttag() {
    let mut s = setup(&default_config()).await;
    let r = write_awaiting_r2t(&mut s.io, 9, 4096).await;
    let bogus = r.ttag.wrapping_add(0x4000);
    s.io.send_pdu(&h2c(9, bogus, 0, 4096, true)).await;
    let t = s.io.expect_term().await;
    // An unknown TTAG is an invalid header field (FEI = TTAG offset 10) or a sequence error.
    assert!(
        (t.fes == Fes::INVALID_HEADER_FIELD && t.fei == 10) || t.fes == Fes::PDU_SEQUENCE,
        "TermReq {t:?}"
    );
}

#[tokio::test]
async fn h2c_data_unsolicited_or_wrong_cccid() {
    let mut s = setup(&default_config()).await;
    // No write outstanding at all.
    s.io.send_pdu(&h2c(3, 0, 0, 512, true)).await;
    let t = s.io.expect_term().await;
    assert!(t.fes == Fes::PDU_SEQUENCE || t.fes == Fes::INVALID_HEADER_FIELD, "{t:?}");

    // Right TTAG, another command's CID.
    let mut io = io_queue(s.addr, s.admin.cntlid, 2, 16384).await;
    let r = write_awaiting_r2t(&mut io, 9, 4096).await;
    io.send_pdu(&h2c(10, r.ttag, 0, 4096, true)).await;
    assert_eq!(io.expect_term().await.fes, Fes::PDU_SEQUENCE);
}

#[tokio::test]
async fn h2c_data_outside_r2t_window() {
    let mut s = setup(&default_config()).await;
    // DATAO not the next expected offset.
    let r = write_awaiting_r2t(&mut s.io, 9, 8192).await;
    s.io.send_pdu(&h2c(9, r.ttag, 512, 4096, false)).await;
    assert_fes(&s.io.expect_term().await, Fes::DATA_OUT_OF_RANGE, 0);

    // Right offsets, but more data than the R2T asked for.
    let mut io = io_queue(s.addr, s.admin.cntlid, 2, 16384).await;
    let r = write_awaiting_r2t(&mut io, 9, 8192).await;
    io.send_pdu(&h2c(9, r.ttag, 0, 4096, false)).await;
    io.send_pdu(&h2c(9, r.ttag, 4096, 8192, true)).await;
    assert_fes(&io.expect_term().await, Fes::DATA_OUT_OF_RANGE, 0);
}

#[tokio::test]
async fn host_term_req_closes_silently_and_target_keeps_serving() {
    let mut s = setup(&default_config()).await;
    let t = TermReq { fes: Fes::PDU_SEQUENCE, fei: 0, data: Bytes::new() };
    s.io.send_pdu(&Pdu::H2cTermReq(t)).await;
    let after = s.io.expect_closed_within(std::time::Duration::from_secs(5)).await;
    assert!(after.is_empty(), "target answered an H2CTermReq: {after:?}");

    // Protocol errors on one queue leave the controller and the target usable.
    let mut io = io_queue(s.addr, s.admin.cntlid, 1, 16384).await;
    let d = pattern(4096, 1);
    io.write(1, 0, &d, NS1_BS).await.ok();
    assert_eq!(io.read(1, 0, 8, NS1_BS).await.ok().data, d);
    s.admin.property_get(nvmeof_common::spec::PropertyOffset::VS, false).await.ok();
    let mut garbage = RawClient::tcp(s.addr).await;
    garbage.send_raw(&[0xFF; 64]).await;
    assert_fes(&garbage.expect_term().await, Fes::INVALID_HEADER_FIELD, 0);
    assert_eq!(io.read(1, 0, 8, NS1_BS).await.ok().data, d);
}

#[tokio::test]
async fn data_digest_error_on_capsule_terminates() {
    let (_server, addr) = start(&default_config()).await;
    let mut c = RawClient::connect_with(addr, DigestFlags::new(false, true)).await;
    let mut sqe = Sqe::new(0x7F);
    sqe.set_sgl(SglDescriptor::in_capsule(16));
    let mut b = c.encode(&Pdu::CapsuleCmd(CapsuleCmd { sqe, data: Bytes::from(vec![1; 16]) }));
    let n = b.len();
    b[n - 1] ^= 0xFF;
    c.send_raw(&b).await;
    // nvmet treats a data digest error on H2C data as fatal; SPDK reports FES 3 for it.
    let t = c.expect_term().await;
    assert_eq!(t.fes, Fes::HEADER_DIGEST, "{t:?}");
}

#[tokio::test]
async fn icreq_timeout_and_connection_limit() {
    let mut cfg = default_config();
    cfg.limits.icreq_timeout_ms = 300;
    cfg.limits.max_connections = 2;
    let (_server, addr) = start(&cfg).await;
    // No ICReq: closed after the ICReq timeout.
    let mut idle = RawClient::tcp(addr).await;
    let t0 = std::time::Instant::now();
    idle.expect_closed_within(std::time::Duration::from_secs(3)).await;
    assert!(t0.elapsed() >= std::time::Duration::from_millis(250), "closed after {:?}", t0.elapsed());
    // Give the target a moment to uncount it.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // Two connections fit (connected at once: the same timeout closes a
    // connection without Connect); a third is refused (closed without ICResp).
    let mut a = RawClient::connect(addr).await;
    assert!(a.admin_connect(SUBNQN, nvmeof_tests::raw_client::HOSTNQN).await.status.is_success());
    let mut b = RawClient::connect(addr).await;
    assert!(b.admin_connect(SUBNQN, nvmeof_tests::raw_client::HOSTNQN).await.status.is_success());
    let mut c = RawClient::tcp(addr).await;
    let _ = c.try_send_raw(&Pdu::IcReq(icreq()).encode_to_vec(&Default::default())).await;
    let got = c.expect_closed_within(std::time::Duration::from_secs(2)).await;
    assert!(got.is_empty(), "refused connection got {got:?}");
    // The admitted ones work.
    a.property_get(nvmeof_common::spec::PropertyOffset::VS, false).await.ok();
}

#[tokio::test]
async fn host_term_req_before_icreq_closes_silently() {
    // The receiver of a TermReq sends nothing more, whatever the phase; a
    // C2HTermReq (PDU Sequence Error) answered it before ICReq.
    let (_server, addr) = start(&default_config()).await;
    let mut c = RawClient::tcp(addr).await;
    c.send_pdu(&Pdu::H2cTermReq(TermReq { fes: Fes::PDU_SEQUENCE, fei: 0, data: Bytes::new() })).await;
    let after = c.expect_closed_within(std::time::Duration::from_secs(5)).await;
    assert!(after.is_empty(), "target answered an H2CTermReq: {after:?}");
}

#[tokio::test]
async fn errors_found_in_a_whole_pdu_quote_its_header() {
    // Header digest and DATAL are checked once the whole PDU is in; the
    // C2HTermReq quoted the bytes after it (the next PDU) or just 8 bytes.
    let mut s = setup(&default_config()).await;
    let mut c = RawClient::connect_with(s.addr, DigestFlags::new(true, false)).await;
    let mut bad = c.encode(&read_capsule());
    bad[73] ^= 0x55;
    let mut b = bad.clone();
    b.extend_from_slice(&c.encode(&Pdu::CapsuleCmd(CapsuleCmd::new(Sqe::new(0x06)))));
    c.send_raw(&b).await;
    let t = c.expect_term().await;
    assert_eq!(t.fes, Fes::HEADER_DIGEST, "{t:?}");
    assert_eq!(&t.data[..], &bad[..72], "quoted header");

    // DATAL disagreeing with PLEN, alone in the stream.
    let r = write_awaiting_r2t(&mut s.io, 9, 4096).await;
    let mut b = s.io.encode(&h2c(9, r.ttag, 0, 4096, true));
    b[16..20].copy_from_slice(&512u32.to_le_bytes());
    s.io.send_raw(&b).await;
    let t = s.io.expect_term().await;
    assert_fes(&t, Fes::INVALID_HEADER_FIELD, 16);
    assert_eq!(&t.data[..], &b[..24], "quoted header");
}

/// I/O queue 2 with a 64 KiB receive buffer: 16 MiB of reads asked for, then a
/// PDU with a bad HLEN, so the target's C2HTermReq waits behind the read data.
async fn term_req_behind_16_mib(s: &Setup) -> RawClient {
    let mut io = RawClient::tcp_with_rcvbuf(s.addr, 64 << 10).await;
    io.icreq(icreq()).await.expect("ICResp");
    let cqe = io.io_connect(2, s.admin.cntlid, SUBNQN, nvmeof_tests::raw_client::HOSTNQN).await;
    assert!(cqe.status.is_success(), "{}", cqe.status);
    for cid in 0..64u16 {
        let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, 0, (256 << 10) / NS1_BS);
        sqe.set_cid(100 + cid).set_sgl(SglDescriptor::transport(256 << 10));
        io.send_pdu(&Pdu::CapsuleCmd(CapsuleCmd::new(sqe))).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut b = io.encode(&read_capsule());
    b[2] = 70;
    io.send_raw(&b).await;
    io
}

#[tokio::test]
async fn term_req_reaches_a_slow_host_that_keeps_sending() {
    // The C2HTermReq queued behind 16 MiB of read data the host reads slowly
    // (64 KiB receive buffer) while its pipeline keeps sending. The target closed
    // as soon as the TermReq was in the kernel's send buffer; the host's next
    // bytes then reset the connection, which dropped the rest of that buffer,
    // the TermReq included.
    let s = setup(&default_config()).await;
    let mut io = term_req_behind_16_mib(&s).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let mut reads = 0;
    let t = loop {
        // Whatever the host still sends is garbage to a target that gave up on it.
        let _ = io.try_send_raw(&[0]).await;
        match io.recv_pdu().await {
            Ok(Pdu::C2hTermReq(t)) => break t,
            Ok(Pdu::C2hData(_)) | Ok(Pdu::CapsuleResp(_)) => reads += 1,
            Ok(p) => panic!("unexpected {p:?}"),
            Err(e) => panic!("connection ended before the C2HTermReq, after {reads} PDUs: {e}"),
        }
        assert!(reads < 1000, "no C2HTermReq");
    };
    assert_fes(&t, Fes::INVALID_HEADER_FIELD, 2);
}

#[tokio::test]
async fn closing_queue_whose_host_never_reads_is_dropped() {
    // A fatal error queues the C2HTermReq behind 16 MiB of read data, and the
    // host never reads (64 KiB receive buffer). With KATO 0 nothing else ends
    // the queue: it held its socket, buffers and connection slot for as long
    // as the host kept the connection open. The send gets a bounded time.
    let s = setup(&default_config()).await;
    let io = term_req_behind_16_mib(&s).await;
    // The setup's admin and I/O queue stay; the closing queue must go.
    let target = s.server.target.clone();
    let t0 = std::time::Instant::now();
    while target.connection_count() > 2 && t0.elapsed() < std::time::Duration::from_secs(15) {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(target.connection_count(), 2, "closing queue still open after {:?}", t0.elapsed());
    drop(io);
}

#[tokio::test]
async fn connection_that_never_connects_is_closed_after_the_icreq_timeout() {
    // The ICReq timeout stopped counting at ICReq: a host that sent those 128
    // bytes and nothing more kept its connection, and its slot in the
    // connection limit, forever (no controller, so no keep-alive timer either).
    let mut cfg = default_config();
    cfg.limits.icreq_timeout_ms = 300;
    let (_server, addr) = start(&cfg).await;
    let mut idle = RawClient::connect(addr).await;
    let t0 = std::time::Instant::now();
    let got = idle.expect_closed_within(std::time::Duration::from_secs(3)).await;
    assert!(got.is_empty(), "{got:?}");
    assert!(t0.elapsed() < std::time::Duration::from_secs(2), "closed after {:?}", t0.elapsed());
    // A queue that connects in time stays (KATO 0: nothing else ends it).
    let mut a = RawClient::connect(addr).await;
    assert!(a.admin_connect(SUBNQN, nvmeof_tests::raw_client::HOSTNQN).await.status.is_success());
    assert!(a.is_open_for(std::time::Duration::from_millis(800)).await);
    a.property_get(nvmeof_common::spec::PropertyOffset::VS, false).await.ok();
}

/// Resident memory of this process (the target runs in it), in bytes.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_queue_does_not_buffer_what_the_host_keeps_sending() {
    // A queue closing behind 16 MiB of read data its host does not read waits
    // up to 5 s for the send, reading (to avoid a reset that would drop the
    // C2HTermReq) whatever the host still sends. Nothing parses it once the
    // queue is closing: it must be dropped, not buffered (a host sending at
    // loopback speed gets through ~1.5 GiB a second). Checked by a sweep that
    // suspected the receive loop; it held.
    let s = setup(&default_config()).await;
    let mut io = term_req_behind_16_mib(&s).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let before = rss_bytes();
    let junk = vec![0u8; 1 << 20];
    let t0 = std::time::Instant::now();
    let mut sent = 0u64;
    // At most 768 MiB or 3 s; a write the target does not take (its receive
    // buffer full) ends the flood.
    while sent < 768 << 20 && t0.elapsed() < std::time::Duration::from_secs(3) {
        match tokio::time::timeout(std::time::Duration::from_millis(500), io.try_send_raw(&junk)).await {
            Ok(true) => sent += junk.len() as u64,
            _ => break,
        }
    }
    let grown = rss_bytes().saturating_sub(before);
    // Other tests of this binary run beside it: a margin for their memory.
    assert!(grown < 256 << 20, "the target buffered {} MiB of the {} MiB sent", grown >> 20, sent >> 20);
    drop(io);
}
