//! Verify (I/O OPC 0Ch): the target reads the blocks without sending them, on
//! every backend, and fails the command where they cannot be read; it
//! reports Verify (ONCS bit 7, the effects log, VSL = MDTS in Identify CNS
//! 06h) and answers what breaks its limits with the spec's statuses; the
//! initiator's `Namespace::verify` splits a range past VSL.

mod initiator_util;

use std::sync::Arc;

use initiator_util::{bounded, config, every_backend, opts, ram_ns, start, SUBNQN};
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::spec::features::{FeatureId, SetFeaturesCmd};
use nvmeof_common::spec::identify::Cns;
use nvmeof_common::spec::log::{effects, SmartLog};
use nvmeof_common::spec::{GetLogPageCmd, IdentifyController, IdentifyCtrlNvm, LogPageId};
use nvmeof_common::{SglDescriptor, Sqe, Status};
use nvmeof_initiator::{Controller, Error, IoFlags};
use nvmeof_target::core::Namespace as TargetNamespace;
use nvmeof_tests::flaky_backend::FlakyBackend;
use nvmeof_tests::harness::{default_config, pattern, setup, NS1_BS, NS1_SIZE};
use nvmeof_tests::raw_client::RawClient;

const ONCS_VERIFY: u16 = 1 << 7;

/// A Verify SQE of `blocks` blocks at `slba` on namespace `nsid` (no data).
fn verify_sqe(nsid: u32, slba: u64, blocks: u32) -> Sqe {
    RawClient::rw_sqe(IoOpcode::VERIFY, nsid, slba, blocks)
}

fn status_of(r: Result<(), Error>) -> Status {
    match r {
        Err(Error::Nvme { status, .. }) => status.without_more(),
        other => panic!("not an NVMe status: {other:?}"),
    }
}

/// On each backend: Verify of written blocks succeeds, and one longer than
/// VSL (MDTS, 1 MiB: 2048 blocks of 512 bytes) goes as several commands,
/// which the SMART log counts as host read commands. A file cut short
/// behind the target's back fails a Verify of the blocks it lost (Internal
/// Error, as a Read of them: the target read them, and got less), while the
/// blocks still there verify; past the namespace it is LBA Out of Range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reads_the_blocks_on_every_backend() {
    bounded(60, async {
        const SIZE: u64 = 4 << 20;
        let (cfg, paths) = every_backend("nvmeof-verify", SIZE);
        let (server, addr) = start(&cfg).await;
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        assert_eq!(ctrl.info().identify.oncs & ONCS_VERIFY, ONCS_VERIFY);
        // VSL = MDTS (8: 2^8 pages of 4 KiB, 1 MiB).
        assert_eq!(ctrl.info().nvm_limits.vsl, ctrl.info().identify.mdts);
        let host_reads = |nsid: u32| {
            let ctrl = &ctrl;
            async move {
                let mut buf = vec![0u8; 512];
                ctrl.get_log_page(GetLogPageCmd::new(LogPageId::SMART, nsid, 0, 512), &mut buf)
                    .await
                    .unwrap();
                SmartLog::decode(&buf).unwrap().host_reads
            }
        };
        for nsid in 1..=3u32 {
            let ns = ctrl.namespace(nsid).await.unwrap();
            let bs = ns.block_size() as u64;
            assert_eq!(bs, 512, "ns {nsid}");
            ns.write(0, &pattern(64 * 512, nsid as u64)).await.unwrap();
            ns.verify(0, 64, IoFlags::default()).await.unwrap();
            // 5000 blocks: 2048 + 2048 + 904.
            let before = host_reads(nsid).await;
            ns.verify(100, 5000, IoFlags::default()).await.unwrap();
            assert_eq!(host_reads(nsid).await - before, 3, "ns {nsid}: Verify commands for 5000 blocks");
            let end = ns.blocks();
            assert_eq!(
                status_of(ns.verify(end - 4, 8, IoFlags::default()).await),
                Status::LBA_RANGE.with_dnr()
            );
        }
        // The files lose their second half behind the target's back. Until
        // something reads Identify Namespace (which takes the file's size,
        // as nvmet's does), the namespace keeps its size and the lost
        // blocks fail to read.
        let handles = [ctrl.namespace(2).await.unwrap(), ctrl.namespace(3).await.unwrap()];
        for p in &paths {
            std::fs::OpenOptions::new().write(true).open(p).unwrap().set_len(SIZE / 2).unwrap();
        }
        let half = SIZE / 2 / 512;
        for ns in &handles {
            let nsid = ns.nsid();
            ns.verify(0, half, IoFlags::default()).await.unwrap();
            let r = ns.verify(half - 8, 16, IoFlags::default()).await;
            assert_eq!(
                status_of(r),
                Status::INTERNAL.with_dnr(),
                "ns {nsid}: Verify of blocks the file lost"
            );
            // Identify Namespace: the namespace is the file's size now.
            assert_eq!(ctrl.namespace(nsid).await.unwrap().blocks(), half);
            let r = ns.verify(half - 8, 16, IoFlags::default()).await;
            assert_eq!(status_of(r), Status::LBA_RANGE.with_dnr(), "ns {nsid}: past the new end");
        }
        ctrl.shutdown().await.unwrap();
        server.shutdown(std::time::Duration::from_secs(1)).await;
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
    })
    .await;
}

/// The statuses a Verify meets: data with it is Data SGL Length Invalid,
/// more than VSL (MDTS 1: 8 KiB, 16 blocks) Invalid Field, past the end LBA
/// Out of Range with its SLBA in the error log; none sends data back. A
/// write-protected namespace still verifies (Verify changes nothing). The
/// backend's read error is the command's status (Unrecovered Read Error).
/// Identify and the effects log say Verify is supported, with VSL 1.
#[tokio::test]
async fn verify_statuses_and_limits() {
    let mut cfg = default_config();
    cfg.limits.mdts = 1;
    let mut s = setup(&cfg).await;
    let nsze = NS1_SIZE / NS1_BS as u64;

    let c = s.admin.identify(Cns::CTRL, 0).await.ok();
    assert_eq!(IdentifyController::decode(&c.data).unwrap().oncs & ONCS_VERIFY, ONCS_VERIFY);
    let c = s.admin.identify(Cns::CS_CTRL, 0).await.ok();
    assert_eq!(IdentifyCtrlNvm::decode(&c.data).unwrap().vsl, 1);
    let log = s.admin.get_log_page(LogPageId::CMD_EFFECTS, 0, 0, 4096, false).await.ok();
    let at = 1024 + 4 * 0x0C;
    assert_eq!(u32::from_le_bytes(log.data[at..at + 4].try_into().unwrap()), effects::CSUPP);

    let io = &mut s.io;
    io.write(1, 0, &pattern(16 * NS1_BS as usize, 3), NS1_BS).await.ok();
    // At VSL exactly: success, no data back.
    let r = io.submit_no_data(verify_sqe(1, 0, 16)).await.ok();
    assert_eq!(r.c2h_count(), 0);
    // One block more: Invalid Field.
    let r = io.submit_no_data(verify_sqe(1, 0, 17)).await;
    assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more());
    // Past the end: LBA Out of Range.
    io.submit_no_data(verify_sqe(1, nsze - 1, 2)).await.expect_status(Status::LBA_RANGE);
    // With a data SGL: Data SGL Length Invalid.
    let mut sqe = verify_sqe(1, 0, 1);
    sqe.set_sgl(SglDescriptor::transport(NS1_BS));
    io.submit(sqe, None).await.expect_status(Status::SGL_INVALID_DATA);

    // Write protected: writes refused, Verify runs.
    let mut protect = SetFeaturesCmd::new(FeatureId::WRITE_PROTECT, 1).to_sqe(0);
    protect.set_nsid(1);
    s.admin.submit_no_data(protect).await.ok();
    let io = &mut s.io;
    io.write(1, 0, &pattern(NS1_BS as usize, 4), NS1_BS).await.expect_status(Status::NS_WRITE_PROTECTED);
    io.submit_no_data(verify_sqe(1, 0, 16)).await.ok();
}

/// A block the backend cannot read fails the Verify with the backend's
/// status (Unrecovered Read Error), and the next Verify of it succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_the_backends_read_error() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        let flaky = Arc::new(FlakyBackend::new(1 << 20, 512));
        let ns = TargetNamespace::new(SUBNQN, 2, flaky.clone());
        server.target.subsystem(SUBNQN).unwrap().add_namespace(Arc::new(ns));
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        let ns = ctrl.namespace(2).await.unwrap();
        flaky.fail_next([Status::READ_ERROR.with_dnr()]);
        let before = flaky.submitted();
        assert_eq!(status_of(ns.verify(0, 8, IoFlags::default()).await), Status::READ_ERROR.with_dnr());
        assert_eq!(flaky.submitted() - before, 1);
        ns.verify(0, 8, IoFlags::default()).await.unwrap();
        assert_eq!(flaky.submitted() - before, 2);
        ctrl.shutdown().await.unwrap();
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await;
}
