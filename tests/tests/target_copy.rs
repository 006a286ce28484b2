//! Copy (I/O OPC 19h, descriptor format 0): the target copies source ranges
//! to a destination on every backend (RAM, file on worker threads, file on
//! io_uring), as one snapshot of the sources even where they overlap the
//! destination; it reports its limits (ONCS, OCFS, MSSRL, MCL, MSRC, the
//! effects log) and answers what breaks them with the spec's statuses; the
//! initiator's `Namespace::copy` splits a copy past those limits.

mod initiator_util;

use bytes::Bytes;
use initiator_util::{bounded, every_backend, opts, start, SUBNQN};
use nvmeof_common::spec::copy::{encode_ranges, CopyCmd, CopyRange, OCFS_FORMAT0, ONCS_COPY};
use nvmeof_common::spec::identify::Cns;
use nvmeof_common::spec::log::{effects, ErrorLogEntry};
use nvmeof_common::spec::{IdentifyController, IdentifyNamespace, LogPageId};
use nvmeof_common::{SglDescriptor, Status};
use nvmeof_initiator::{Controller, IoFlags};
use nvmeof_tests::harness::{default_config, pattern, setup, NS1_BS, NS1_SIZE};

const NSZE: u64 = NS1_SIZE / NS1_BS as u64;

/// A Copy SQE of `ranges` to `sdlba` on namespace 1, with its range list.
fn copy_cmd(ranges: &[(u64, u32)], sdlba: u64) -> (nvmeof_common::Sqe, Bytes) {
    let r: Vec<CopyRange> = ranges.iter().map(|&(l, n)| CopyRange::new(l, n).unwrap()).collect();
    (CopyCmd::new(1, sdlba, r.len(), false).to_sqe(0), Bytes::from(encode_ranges(&r).unwrap()))
}

/// After `big` (3000 blocks) at 0 was copied onto 1000..4000 in two pieces
/// (2048 blocks, then 952): the second piece's source lies in the first's
/// destination, so it holds what the first wrote there (the old 1048..2000).
async fn check_split_in_order(ns: &nvmeof_initiator::Namespace, big: &[u8], what: &str) {
    let bs = ns.block_size() as usize;
    let mut got = vec![0u8; 3000 * bs];
    ns.read(1000, &mut got).await.unwrap();
    assert!(got[..2048 * bs] == big[..2048 * bs], "{what}: first piece");
    assert!(got[2048 * bs..] == big[1048 * bs..2000 * bs], "{what}: pieces not in order");
}

/// On each backend: several ranges gathered in order, a copy onto its own
/// source (the destination gets the sources as they were), FUA, and a copy
/// longer than the namespace's MCL, which the initiator sends as several
/// commands (together, or in order where they overlap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_gathers_ranges_on_every_backend() {
    bounded(60, async {
        const SIZE: u64 = 4 << 20;
        let (cfg, paths) = every_backend("nvmeof-copy", SIZE);
        let (_server, addr) = start(&cfg).await;
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        let id = &ctrl.info().identify;
        assert_eq!((id.oncs & ONCS_COPY, id.ocfs), (ONCS_COPY, OCFS_FORMAT0));
        for nsid in 1..=3u32 {
            let ns = ctrl.namespace(nsid).await.unwrap();
            let bs = ns.block_size() as usize;
            // The default MDTS (1 MiB) bounds a Copy: 2048 blocks, also per range.
            let idns = ns.identify();
            assert_eq!((idns.mssrl, idns.mcl, idns.msrc), (2048, 2048, 255), "ns {nsid}");

            let a = pattern(64 * bs, nsid as u64);
            let b = pattern(8 * bs, 100 + nsid as u64);
            ns.write(0, &a).await.unwrap();
            ns.write(1000, &b).await.unwrap();
            ns.copy(&[(8, 16), (1000, 8), (0, 4)], 2000, IoFlags::default()).await.unwrap();
            let mut got = vec![0u8; 28 * bs];
            ns.read(2000, &mut got).await.unwrap();
            let want = [&a[8 * bs..24 * bs], &b[..], &a[..4 * bs]].concat();
            assert!(got == want, "ns {nsid}: gathered ranges differ");
            // Neighbours untouched.
            let mut edge = vec![1u8; bs];
            ns.read(2028, &mut edge).await.unwrap();
            assert_eq!(edge, vec![0u8; bs], "ns {nsid}: block after the destination");

            // Blocks 0..32 onto 16..48: a snapshot of the source.
            ns.copy(&[(0, 32)], 16, IoFlags::FUA).await.unwrap();
            let mut got = vec![0u8; 48 * bs];
            ns.read(0, &mut got).await.unwrap();
            assert!(got[..16 * bs] == a[..16 * bs], "ns {nsid}: source head changed");
            assert!(got[16 * bs..] == a[..32 * bs], "ns {nsid}: overlapping copy is not a snapshot");

            // 3000 blocks: over MCL (2048), so two commands.
            let big = pattern(3000 * bs, 200 + nsid as u64);
            ns.write(3000, &big).await.unwrap();
            ns.copy(&[(3000, 3000)], 0, IoFlags::default()).await.unwrap();
            let mut got = vec![0u8; 3000 * bs];
            ns.read(0, &mut got).await.unwrap();
            assert!(got == big, "ns {nsid}: split copy differs");
            // 0..3000 onto 1000..4000: two commands, in order.
            ns.copy(&[(0, 3000)], 1000, IoFlags::default()).await.unwrap();
            check_split_in_order(&ns, &big, &format!("ns {nsid}: Copy commands")).await;

            // The same through the host (what `copy` does where the
            // controller has no Copy): gathered ranges and the overlapping
            // split copy give what the Copy commands gave.
            ns.write(0, &big).await.unwrap();
            ns.copy_through_host(&[(8, 16), (1000, 8), (0, 4)], 5000, IoFlags::FUA).await.unwrap();
            let mut got = vec![0u8; 28 * bs];
            ns.read(5000, &mut got).await.unwrap();
            let mut b_now = vec![0u8; 8 * bs];
            ns.read(1000, &mut b_now).await.unwrap();
            let want = [&big[8 * bs..24 * bs], &b_now[..], &big[..4 * bs]].concat();
            assert!(got == want, "ns {nsid}: gathered through the host");
            ns.copy_through_host(&[(0, 3000)], 1000, IoFlags::default()).await.unwrap();
            check_split_in_order(&ns, &big, &format!("ns {nsid}: through the host")).await;

            // Past the namespace: the target's LBA Out of Range.
            let end = ns.blocks();
            let e = ns.copy(&[(end - 1, 2)], 0, IoFlags::default()).await.unwrap_err();
            assert_eq!(e.status().map(|s| s.code()), Some(Status::LBA_RANGE), "{e}");
            let e = ns.copy(&[(0, 2)], end - 1, IoFlags::default()).await.unwrap_err();
            assert_eq!(e.status().map(|s| s.code()), Some(Status::LBA_RANGE), "{e}");
            // Refused by the initiator itself.
            assert!(ns.copy(&[(0, 0)], 10, IoFlags::default()).await.is_err());
        }
        ctrl.shutdown().await.unwrap();
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
    })
    .await
}

/// Identify and the effects log announce Copy and its limits (MDTS 8 KiB:
/// 16 blocks of 512 bytes); a Copy past them, past the namespace, in
/// another format or with too short a range list fails with the spec's
/// status before anything is written; one whose range list comes through
/// R2T copies.
#[tokio::test]
async fn copy_limits_and_statuses() {
    let mut cfg = default_config();
    cfg.limits.mdts = 1;
    let mut s = setup(&cfg).await;

    let c = s.admin.identify(Cns::CTRL, 0).await.ok();
    let id = IdentifyController::decode(&c.data).unwrap();
    assert_eq!((id.oncs & ONCS_COPY, id.ocfs), (ONCS_COPY, OCFS_FORMAT0));
    let c = s.admin.identify(Cns::NS, 1).await.ok();
    let ns = IdentifyNamespace::decode(&c.data).unwrap();
    assert_eq!((ns.mssrl, ns.mcl, ns.msrc), (16, 16, 255));
    let log = s.admin.get_log_page(LogPageId::CMD_EFFECTS, 0, 0, 4096, false).await.ok();
    let copy_effects = u32::from_le_bytes(log.data[1024 + 4 * 0x19..1024 + 4 * 0x19 + 4].try_into().unwrap());
    assert_eq!(copy_effects, effects::CSUPP | effects::LBCC);

    let io = &mut s.io;
    let src = pattern(16 * NS1_BS as usize, 7);
    io.write(1, 0, &src, NS1_BS).await.ok();
    let dest_untouched = |data: &[u8]| data.iter().all(|&x| x == 0);

    // One range over MSSRL, then ranges that together pass MCL.
    let (sqe, data) = copy_cmd(&[(0, 17)], 100);
    let r = io.submit(sqe, Some(data)).await;
    assert_eq!(r.status(), Status::CMD_SIZE_LIMIT.with_dnr().with_more());
    let (sqe, data) = copy_cmd(&[(0, 10), (20, 10)], 100);
    io.submit(sqe, Some(data)).await.expect_status(Status::CMD_SIZE_LIMIT);

    // A source past the end: LBA Out of Range, its SLBA in the error log.
    let (sqe, data) = copy_cmd(&[(0, 1), (NSZE - 1, 2)], 100);
    let r = io.submit(sqe, Some(data)).await;
    assert_eq!(r.status(), Status::LBA_RANGE.with_dnr().with_more());
    let e = s.admin.get_log_page(LogPageId::ERROR, 0, 0, 64, false).await.ok();
    let newest = ErrorLogEntry::decode(&e.data).unwrap();
    assert_eq!((Status::from_wire(newest.status).code(), newest.lba), (Status::LBA_RANGE, NSZE - 1));
    // The destination past the end.
    let (sqe, data) = copy_cmd(&[(0, 8)], NSZE - 4);
    io.submit(sqe, Some(data)).await.expect_status(Status::LBA_RANGE);

    // Descriptor format 1 (64-bit guard protection): Invalid Field.
    let (mut sqe, data) = copy_cmd(&[(0, 8)], 100);
    sqe.set_cdw(12, sqe.cdw(12) | 1 << 8);
    let r = io.submit(sqe, Some(data)).await;
    assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more());
    // Three ranges announced, one sent: Data SGL Length Invalid.
    let (mut sqe, data) = copy_cmd(&[(0, 8)], 100);
    sqe.set_cdw(12, 2);
    io.submit(sqe, Some(data)).await.expect_status(Status::SGL_INVALID_DATA);
    // A range list over MDTS: refused before any data is solicited.
    let (mut sqe, _) = copy_cmd(&[(0, 8)], 100);
    sqe.set_sgl(SglDescriptor::transport(0xFFFF_FFE0));
    let r = io.submit(sqe, None).await;
    assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more());
    assert_eq!(r.r2t_count(), 0);

    // Nothing reached the destination.
    assert!(dest_untouched(&io.read(1, 100, 16, NS1_BS).await.ok().data));
    assert!(dest_untouched(&io.read(1, NSZE - 4, 4, NS1_BS).await.ok().data));

    // At the limits exactly, the range list through R2T.
    let (sqe, data) = copy_cmd(&[(8, 8), (0, 8)], 100);
    let cid = io.start_write(sqe, data, true).await;
    let r = io.wait(cid).await.ok();
    assert!(r.r2t_count() >= 1);
    let got = io.read(1, 100, 16, NS1_BS).await.ok().data;
    let half = 8 * NS1_BS as usize;
    assert_eq!(&got[..half], &src[half..]);
    assert_eq!(&got[half..], &src[..half]);
    // Sixteen one-block ranges in reverse order; a Copy sends no data back.
    let many: Vec<(u64, u32)> = (0..16).map(|i| (15 - i, 1)).collect();
    let (sqe, data) = copy_cmd(&many, 200);
    let r = io.submit(sqe, Some(data)).await.ok();
    assert_eq!(r.c2h_count(), 0);
    let got = io.read(1, 200, 16, NS1_BS).await.ok().data;
    for (i, block) in got.chunks(NS1_BS as usize).enumerate() {
        let from = (15 - i) * NS1_BS as usize;
        assert_eq!(block, &src[from..from + NS1_BS as usize], "block {i}");
    }
}
