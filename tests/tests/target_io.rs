//! Target integration tests: NVM I/O commands over loopback TCP (in-capsule and
//! R2T writes, reads, FUA, Flush, Write Zeroes, DSM, Compare, error statuses,
//! digests, the C2HData SUCCESS flag).

use bytes::Bytes;
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::pdu::{DigestFlags, Pdu};
use nvmeof_common::spec::dsm::{encode_ranges, DsmCmd, DsmRange};
use nvmeof_common::spec::identify::Cns;
use nvmeof_common::spec::ConnectCmd;
use nvmeof_common::{SglDescriptor, Sqe, Status};
use nvmeof_tests::harness::*;
use nvmeof_tests::raw_client::{RawClient, HOSTNQN};

const BS: u32 = NS1_BS;
const NSZE: u64 = NS1_SIZE / NS1_BS as u64;

fn flush_sqe(nsid: u32) -> Sqe {
    let mut s = Sqe::new(IoOpcode::FLUSH.0);
    s.set_nsid(nsid).set_sgl(SglDescriptor::transport(0));
    s
}

#[tokio::test]
async fn write_read_in_capsule_and_r2t() {
    let mut cfg = default_config();
    cfg.limits.max_h2c_data = 8192;
    let mut s = setup(&cfg).await;
    let io = &mut s.io;
    assert_eq!(io.maxh2cdata, 8192);

    // In-capsule write.
    let d = pattern(4096, 1);
    let w = io.write(1, 8, &d, BS).await.ok();
    assert_eq!(w.r2t_count(), 0);
    assert_eq!(w.cqe.sqid, 1);
    let r = io.read(1, 8, 8, BS).await.ok();
    assert_eq!(r.data, d);
    assert!(r.c2h_count() >= 1);
    match r.pdus.iter().rev().find(|p| matches!(p, Pdu::C2hData(_))) {
        Some(Pdu::C2hData(c)) => assert!(c.last, "last C2HData without LAST_PDU"),
        _ => unreachable!(),
    }

    // R2T path: 64 KiB split by MAXH2CDATA (8 KiB) into 8 H2CData PDUs.
    let d = pattern(64 * 1024, 2);
    let before = io.h2c_sent;
    let w = io.write_opts(1, 100, &d, BS, false, true).await.ok();
    assert!(w.r2t_count() >= 1);
    assert_eq!(io.h2c_sent - before, 8);
    assert_eq!(io.read(1, 100, 128, BS).await.ok().data, d);

    // Smaller H2CData PDUs than MAXH2CDATA.
    io.h2c_chunk = Some(1024);
    let d = pattern(16 * 1024, 3);
    let before = io.h2c_sent;
    io.write_opts(1, 300, &d, BS, false, true).await.ok();
    assert_eq!(io.h2c_sent - before, 16);
    io.h2c_chunk = None;
    assert_eq!(io.read(1, 300, 32, BS).await.ok().data, d);

    // A write larger than the in-capsule limit goes through R2T naturally; 1 MiB = MDTS.
    let d = pattern(1 << 20, 4);
    let w = io.write(1, 1024, &d, BS).await.ok();
    assert!(w.r2t_count() >= 1);
    let r = io.read(1, 1024, 2048, BS).await.ok();
    assert!(r.data == d, "1 MiB read-back differs");

    // Last block of the namespace.
    let d = pattern(512, 5);
    io.write(1, NSZE - 1, &d, BS).await.ok();
    assert_eq!(io.read(1, NSZE - 1, 1, BS).await.ok().data, d);

    // Neighbours untouched.
    assert_eq!(io.read(1, 16, 1, BS).await.ok().data, vec![0; 512]);
}

/// The default in-capsule limit (128 KiB, IOCCSZ) is what the target accepts:
/// a write of exactly that size travels in the capsule with no R2T, one block
/// more goes through R2T, and both read back.
#[tokio::test]
async fn default_in_capsule_limit_takes_128k_writes_without_r2t() {
    let cfg = default_config();
    assert_eq!(cfg.limits.in_capsule_data, 128 << 10);
    let mut s = setup(&cfg).await;
    let io = &mut s.io;
    assert_eq!(io.icd_limit, 128 << 10);
    let d = pattern(128 << 10, 6);
    let w = io.write(1, 2048, &d, BS).await.ok();
    assert_eq!(w.r2t_count(), 0, "a 128 KiB write was solicited by R2T: {:?}", w.pdus);
    assert!(io.read(1, 2048, 256, BS).await.ok().data == d, "128 KiB in-capsule read-back differs");
    let d = pattern((128 << 10) + 512, 7);
    let w = io.write(1, 4096, &d, BS).await.ok();
    assert_eq!(w.r2t_count(), 1);
    assert!(io.read(1, 4096, 257, BS).await.ok().data == d, "R2T read-back differs");
}

#[tokio::test]
async fn fua_flush_write_zeroes_dsm_compare() {
    let mut s = setup(&default_config()).await;
    let io = &mut s.io;

    // FUA write.
    let d = pattern(8192, 10);
    io.write_opts(1, 0, &d, BS, true, false).await.ok();
    assert_eq!(io.read(1, 0, 16, BS).await.ok().data, d);

    // Flush.
    io.submit(flush_sqe(1), None).await.ok();

    // Write Zeroes: blocks 204..208 of a written 200..216.
    let d = pattern(16 * 512, 11);
    io.write(1, 200, &d, BS).await.ok();
    let mut wz = Sqe::new(IoOpcode::WRITE_ZEROES.0);
    wz.set_nsid(1).set_slba(204).set_nlb(3).set_sgl(SglDescriptor::transport(0));
    io.submit(wz, None).await.ok();
    let mut want = d.clone();
    want[4 * 512..8 * 512].fill(0);
    assert_eq!(io.read(1, 200, 16, BS).await.ok().data, want);
    // ... with DEAC (CDW12 bit 25).
    let mut wz = Sqe::new(IoOpcode::WRITE_ZEROES.0);
    wz.set_nsid(1).set_slba(210).set_nlb(1).set_sgl(SglDescriptor::transport(0));
    wz.set_cdw(12, wz.cdw(12) | 1 << 25);
    io.submit(wz, None).await.ok();
    want[10 * 512..12 * 512].fill(0);
    assert_eq!(io.read(1, 200, 16, BS).await.ok().data, want);
    // Write Zeroes out of range.
    let mut wz = Sqe::new(IoOpcode::WRITE_ZEROES.0);
    wz.set_nsid(1).set_slba(NSZE - 1).set_nlb(1).set_sgl(SglDescriptor::transport(0));
    io.submit(wz, None).await.expect_status(Status::LBA_RANGE);

    // DSM deallocate: two ranges, in-capsule.
    let d = pattern(32 * 512, 12);
    io.write(1, 300, &d, BS).await.ok();
    let ranges = [DsmRange { cattr: 0, nlb: 8, slba: 310 }, DsmRange { cattr: 0, nlb: 2, slba: 330 }];
    let sqe = DsmCmd::deallocate(1, 2).to_sqe(0);
    io.submit(sqe, Some(Bytes::from(encode_ranges(&ranges).unwrap()))).await.ok();
    let mut want = d.clone();
    want[10 * 512..18 * 512].fill(0);
    want[30 * 512..32 * 512].fill(0);
    assert_eq!(io.read(1, 300, 32, BS).await.ok().data, want);
    // Linux pads the range buffer to 4 KiB (SGL longer than the ranges).
    let mut buf = encode_ranges(&[DsmRange { cattr: 0, nlb: 1, slba: 300 }]).unwrap();
    buf.resize(4096, 0);
    io.submit(DsmCmd::deallocate(1, 1).to_sqe(0), Some(Bytes::from(buf))).await.ok();
    want[..512].fill(0);
    assert_eq!(io.read(1, 300, 32, BS).await.ok().data, want);
    // A range past the end.
    let bad = encode_ranges(&[DsmRange { cattr: 0, nlb: 2, slba: NSZE - 1 }]).unwrap();
    io.submit(DsmCmd::deallocate(1, 1).to_sqe(0), Some(Bytes::from(bad)))
        .await
        .expect_status(Status::LBA_RANGE);

    // Compare: match, then mismatch (2/0x85).
    let d = pattern(4096, 13);
    io.write(1, 400, &d, BS).await.ok();
    let sqe = RawClient::rw_sqe(IoOpcode::COMPARE, 1, 400, 8);
    io.submit(sqe, Some(Bytes::from(d.clone()))).await.ok();
    let mut other = d.clone();
    other[4095] ^= 1;
    let r = io.submit(sqe, Some(Bytes::from(other))).await;
    r.expect_status(Status::COMPARE_FAILED);
    // Compare through R2T too.
    let big = pattern(64 * 1024, 14);
    io.write(1, 1000, &big, BS).await.ok();
    let sqe = RawClient::rw_sqe(IoOpcode::COMPARE, 1, 1000, 128);
    let cid = io.start_write(sqe, Bytes::from(big.clone()), true).await;
    io.wait(cid).await.ok();
}

#[tokio::test]
async fn io_error_statuses() {
    let mut cfg = default_config();
    cfg.limits.mdts = 1; // 8 KiB
    let mut s = setup(&cfg).await;
    let io = &mut s.io;

    // LBA out of range.
    io.read(1, NSZE, 1, BS).await.expect_status(Status::LBA_RANGE);
    io.read(1, NSZE - 1, 2, BS).await.expect_status(Status::LBA_RANGE);
    let r = io.write(1, NSZE, &[7; 512], BS).await;
    assert_eq!(r.status(), Status::LBA_RANGE.with_dnr().with_more());
    let mut huge = RawClient::rw_sqe(IoOpcode::READ, 1, u64::MAX, 1);
    huge.set_sgl(SglDescriptor::transport(512));
    io.submit(huge, None).await.expect_status(Status::LBA_RANGE);

    // Invalid namespace.
    let r = io.read(99, 0, 1, BS).await;
    assert_eq!(r.status(), Status::INVALID_NS.with_dnr().with_more());
    io.read(0, 0, 1, BS).await.expect_status(Status::INVALID_NS);
    io.submit(flush_sqe(99), None).await.expect_status(Status::INVALID_NS);
    // The namespace is checked before the length against MDTS (nvmet parses
    // the command before mapping its data).
    io.read(99, 0, 32, BS).await.expect_status(Status::INVALID_NS);
    // ... and before its data descriptor (here an in-capsule one on a read).
    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 99, 0, 1);
    sqe.set_sgl(SglDescriptor::in_capsule(512));
    io.submit(sqe, None).await.expect_status(Status::INVALID_NS);

    // Transfer over MDTS (8 KiB): Invalid Field, and no data solicited for a write.
    io.read(1, 0, 32, BS).await.expect_status(Status::INVALID_FIELD);
    let w = io.write_opts(1, 0, &[1; 16384], BS, false, true).await;
    w.expect_status(Status::INVALID_FIELD);
    assert_eq!(w.r2t_count(), 0);
    io.read(1, 0, 16, BS).await.ok();

    // SGL length different from NLB: Data SGL Length Invalid.
    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, 0, 8);
    sqe.set_sgl(SglDescriptor::transport(2048));
    let r = io.submit(sqe, None).await;
    assert_eq!(r.status(), Status::SGL_INVALID_DATA.with_dnr().with_more());
    assert!(r.data.is_empty());
    let sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, 0, 2);
    io.submit(sqe, Some(Bytes::from(vec![1; 512]))).await.expect_status(Status::SGL_INVALID_DATA);
    let sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, 0, 1);
    let cid = io.start_write(sqe, Bytes::from(vec![1; 1024]), true).await;
    let r = io.wait(cid).await;
    r.expect_status(Status::SGL_INVALID_DATA);
    assert_eq!(r.r2t_count(), 0);
    // The block was not written by any of them.
    assert_eq!(io.read(1, 0, 1, BS).await.ok().data, vec![0; 512]);

    // DSM announcing more ranges than its data holds.
    let sqe = DsmCmd::deallocate(1, 4).to_sqe(0);
    let one = encode_ranges(&[DsmRange { cattr: 0, nlb: 1, slba: 0 }]).unwrap();
    io.submit(sqe, Some(Bytes::from(one))).await.expect_status(Status::SGL_INVALID_DATA);

    // DSM whose SGL is over MDTS: refused before any data is solicited (its
    // ranges fit in 4 KiB; without the limit it would get an R2T for 4 GiB).
    let mut sqe = DsmCmd::deallocate(1, 1).to_sqe(0);
    sqe.set_sgl(SglDescriptor::transport(0xFFFF_FFF0));
    let r = io.submit(sqe, None).await;
    assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more());
    assert_eq!(r.r2t_count(), 0);

    // Write Zeroes moves no data, so MDTS does not limit it: 4 MiB at once.
    let mut wz = Sqe::new(IoOpcode::WRITE_ZEROES.0);
    wz.set_nsid(1).set_slba(0).set_nlb(8191).set_sgl(SglDescriptor::transport(0));
    io.submit(wz, None).await.ok();

    // Unknown / unsupported I/O opcodes.
    for op in [0x06u8, 0x7E, 0x80] {
        let mut sqe = Sqe::new(op);
        sqe.set_nsid(1).set_sgl(SglDescriptor::transport(0));
        let r = io.submit(sqe, None).await;
        assert_eq!(r.status(), Status::INVALID_OPCODE.with_dnr().with_more(), "opcode {op:#x}");
    }

    // PRPs (PSDT 0) and the reserved FUSE 11b: Invalid Field; a Read as the
    // first command of a fused operation: Invalid Opcode (Compare and
    // Write is the only one, target_fused.rs).
    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, 0, 1);
    sqe.set_sgl(SglDescriptor::transport(512)).set_flags(0);
    io.submit(sqe, None).await.expect_status(Status::INVALID_FIELD);
    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, 0, 1);
    sqe.set_sgl(SglDescriptor::transport(512)).set_flags(0x43);
    io.submit(sqe, None).await.expect_status(Status::INVALID_FIELD);
    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, 0, 1);
    sqe.set_sgl(SglDescriptor::transport(512)).set_flags(0x41);
    io.submit(sqe, None).await.expect_status(Status::INVALID_OPCODE);
    // In-capsule descriptor on a read: Invalid Field.
    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, 0, 1);
    sqe.set_sgl(SglDescriptor::in_capsule(512));
    io.submit(sqe, None).await.expect_status(Status::INVALID_FIELD);
    // An empty in-capsule descriptor is no data (nvmet_tcp_map_data returns
    // before looking at the type): a Flush carrying one runs.
    let mut sqe = flush_sqe(1);
    sqe.set_sgl(SglDescriptor::in_capsule(0));
    io.submit(sqe, None).await.ok();

    // The queue is still healthy.
    let d = pattern(4096, 20);
    io.write(1, 64, &d, BS).await.ok();
    assert_eq!(io.read(1, 64, 8, BS).await.ok().data, d);
}

async fn digest_roundtrip(dgst: DigestFlags) {
    let mut cfg = default_config();
    cfg.limits.max_h2c_data = 16384;
    let (_server, addr) = start(&cfg).await;
    let mut admin = RawClient::connect_with(addr, dgst).await;
    assert!(admin.admin_connect(SUBNQN, HOSTNQN).await.status.is_success());
    admin.enable().await;
    admin.identify(Cns::CTRL, 0).await.ok();
    let mut io = RawClient::connect_with(addr, dgst).await;
    assert!(io.io_connect(1, admin.cntlid, SUBNQN, HOSTNQN).await.status.is_success());
    io.icd_limit = cfg.limits.in_capsule_data;
    let d = pattern(4096, 30);
    io.write(1, 0, &d, BS).await.ok();
    assert_eq!(io.read(1, 0, 8, BS).await.ok().data, d);
    let d = pattern(128 * 1024, 31);
    io.write_opts(1, 64, &d, BS, false, true).await.ok();
    assert_eq!(io.read(1, 64, 256, BS).await.ok().data, d);
    io.submit(flush_sqe(1), None).await.ok();
    io.read(1, NSZE, 1, BS).await.expect_status(Status::LBA_RANGE);
}

#[tokio::test]
async fn header_and_data_digests() {
    digest_roundtrip(DigestFlags::new(true, true)).await;
}

#[tokio::test]
async fn header_digest_only_and_data_digest_only() {
    digest_roundtrip(DigestFlags::new(true, false)).await;
    digest_roundtrip(DigestFlags::new(false, true)).await;
}

#[tokio::test]
async fn c2h_success_flag_when_sq_flow_control_disabled() {
    let (_server, addr) = start(&default_config()).await;
    let admin = admin_queue(addr, SUBNQN).await;
    let mut io = RawClient::connect(addr).await;
    let data = io.connect_data(SUBNQN, admin.cntlid);
    let c = io.connect_cmd(ConnectCmd::io(1, 128).with_disable_sqflow(true), data).await.ok();
    assert_eq!(c.cqe.dw0() as u16, admin.cntlid);
    io.icd_limit = 16384;

    let d = pattern(4096, 40);
    io.write(1, 0, &d, BS).await.ok();
    let r = io.read(1, 0, 8, BS).await.ok();
    assert_eq!(r.data, d);
    assert!(r.via_success_flag, "C2HData without SUCCESS although SQ flow control is disabled: {:?}", r.pdus);
    assert_eq!(r.pdus.len(), 1, "a CapsuleResp followed the SUCCESS C2HData: {:?}", r.pdus);
    match &r.pdus[0] {
        Pdu::C2hData(c) => assert!(c.last && c.success),
        p => panic!("{p:?}"),
    }
    // No stray CapsuleResp: the next PDU is the Flush's completion (an unknown CID would fail here).
    let f = io.submit(flush_sqe(1), None).await.ok();
    assert_eq!(f.pdus.len(), 1);
    // Several reads back to back.
    for i in 0..8u64 {
        let r = io.read(1, i, 1, BS).await.ok();
        assert!(r.via_success_flag);
        assert_eq!(r.data, d[i as usize * 512..(i as usize + 1) * 512]);
    }
    // A failing read still gets a CapsuleResp with the error and no data.
    let r = io.read(1, NSZE, 1, BS).await;
    r.expect_status(Status::LBA_RANGE);
    assert!(!r.via_success_flag && r.data.is_empty());

    // Without CATTR bit 2: data, then a CapsuleResp.
    let mut io2 = RawClient::connect(addr).await;
    assert!(io2.io_connect(2, admin.cntlid, SUBNQN, HOSTNQN).await.status.is_success());
    let r = io2.read(1, 0, 8, BS).await.ok();
    assert!(!r.via_success_flag);
    assert!(matches!(r.pdus.last(), Some(Pdu::CapsuleResp(_))));
    match &r.pdus[0] {
        Pdu::C2hData(c) => assert!(!c.success),
        p => panic!("{p:?}"),
    }
}

#[tokio::test]
async fn full_queue_depth_and_pdu_segmentation() {
    let mut s = setup(&default_config()).await;
    let io = &mut s.io;

    // 128 writes in flight at once (the queue has 128 entries), then 128 reads.
    let mut cids = Vec::new();
    for i in 0..128u64 {
        let sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, i, 1);
        cids.push(io.start_write(sqe, Bytes::from(pattern(512, i)), false).await);
    }
    for cid in cids.drain(..) {
        let c = io.wait(cid).await.ok();
        assert!(c.cqe.sqhd < 128, "SQHD {} outside the queue", c.cqe.sqhd);
    }
    for i in 0..128u64 {
        let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, i, 1);
        sqe.set_sgl(SglDescriptor::transport(512));
        cids.push(io.start(sqe).await);
    }
    for (i, cid) in cids.drain(..).enumerate() {
        assert_eq!(io.wait(cid).await.ok().data, pattern(512, i as u64), "block {i}");
    }

    // Several capsules in one TCP write.
    let mut buf = Vec::new();
    for cid in [1000u16, 1001, 1002] {
        let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, cid as u64 - 1000, 1);
        sqe.set_cid(cid).set_sgl(SglDescriptor::transport(512));
        buf.extend_from_slice(&io.encode(&Pdu::CapsuleCmd(nvmeof_common::pdu::CapsuleCmd::new(sqe))));
        io.track(cid, Bytes::new());
    }
    io.send_raw(&buf).await;
    for cid in [1000u16, 1001, 1002] {
        assert_eq!(io.wait(cid).await.ok().data, pattern(512, cid as u64 - 1000));
    }

    // A write capsule with in-capsule data trickled in 1- to 7-byte pieces.
    let d = pattern(2048, 77);
    let mut sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, 500, 4);
    sqe.set_cid(2000).set_sgl(SglDescriptor::in_capsule(2048));
    let b = io.encode(&Pdu::CapsuleCmd(nvmeof_common::pdu::CapsuleCmd { sqe, data: Bytes::from(d.clone()) }));
    io.track(2000, Bytes::new());
    for (i, piece) in b.chunks(7).enumerate() {
        let n = 1 + i % piece.len();
        io.send_raw(&piece[..n]).await;
        io.send_raw(&piece[n..]).await;
        if i % 16 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
    io.wait(2000).await.ok();
    assert_eq!(io.read(1, 500, 4, BS).await.ok().data, d);

    // In-capsule SGL length different from the data carried.
    let mut sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, 600, 2);
    sqe.set_sgl(SglDescriptor::in_capsule(1024));
    let cid = io.send_cmd(sqe, Bytes::from(vec![9; 512]), Bytes::new()).await;
    io.wait(cid).await.expect_status(Status::SGL_INVALID_DATA);
    assert_eq!(io.read(1, 600, 2, BS).await.ok().data, vec![0; 1024]);
}

/// The SGL length is checked against NLB before the LBA range, as nvmet does
/// (`nvmet_file_execute_rw` / `nvmet_bdev_execute_rw` call
/// `nvmet_check_transfer_len` before any range check): a Read or Write past
/// the end whose SGL length does not match NLB is Data SGL Length Invalid.
#[tokio::test]
async fn sgl_length_is_checked_before_the_lba_range() {
    let mut s = setup(&default_config()).await;
    let io = &mut s.io;
    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, NSZE, 2);
    sqe.set_sgl(SglDescriptor::transport(BS));
    io.submit(sqe, None).await.expect_status(Status::SGL_INVALID_DATA);
    let mut sqe = RawClient::rw_sqe(IoOpcode::READ, 1, u64::MAX, 1);
    sqe.set_sgl(SglDescriptor::transport(2 * BS));
    io.submit(sqe, None).await.expect_status(Status::SGL_INVALID_DATA);
    let sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, NSZE - 1, 4);
    io.submit(sqe, Some(Bytes::from(vec![1; 512]))).await.expect_status(Status::SGL_INVALID_DATA);
    // With a matching SGL the range is what is wrong.
    io.read(1, NSZE - 1, 2, BS).await.expect_status(Status::LBA_RANGE);
}
