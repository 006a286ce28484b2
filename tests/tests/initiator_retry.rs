//! The initiator sends a namespace command again after a status without Do
//! Not Retry, as the Linux host does (`nvme_decide_disposition`: up to
//! `nvme_max_retries`, 5, times), and returns any other error at once. The
//! target's namespace 2 sits on a [`FlakyBackend`], which fails exactly the
//! operations a test asks it to, so every count below is the number of times
//! a command reached the target's backend.

mod initiator_util;

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use initiator_util::*;
use nvmeof_initiator::common::Status;
use nvmeof_initiator::{ConnectOptions, Controller, Error, IoFlags, Namespace};
use nvmeof_target::core::Namespace as TargetNamespace;
use nvmeof_target::server::Server;
use nvmeof_tests::flaky_backend::FlakyBackend;
use nvmeof_tests::harness::pattern;

const SIZE: u64 = 1 << 20;

/// What nvmet answers a fenced host's command with while a Preempt and Abort
/// runs (`nvmet_pr_get_ns_pc_ref`): Internal Error without DNR.
const TRANSIENT: Status = Status::INTERNAL;

/// A target with RAM namespace 1 and namespace 2 on a [`FlakyBackend`].
async fn flaky_target() -> (Server, std::net::SocketAddr, Arc<FlakyBackend>) {
    let (server, addr) = start(&config(vec![ram_ns(1, SIZE)])).await;
    let flaky = Arc::new(FlakyBackend::new(SIZE, BS as u32));
    let ns = TargetNamespace::new(SUBNQN, 2, flaky.clone());
    server.target.subsystem(SUBNQN).unwrap().add_namespace(Arc::new(ns));
    (server, addr, flaky)
}

async fn connect(addr: std::net::SocketAddr, opts: ConnectOptions) -> (Controller, Namespace) {
    let ctrl = Controller::connect(addr, SUBNQN, opts).await.unwrap();
    let ns = ctrl.namespace(2).await.unwrap();
    (ctrl, ns)
}

fn status_of<T: std::fmt::Debug>(r: Result<T, Error>) -> Status {
    match r {
        Err(Error::Nvme { status, .. }) => status.without_more(),
        other => panic!("not an NVMe status: {other:?}"),
    }
}

/// Runs `f` (the request on line `line`) after queueing `failures`; returns its result and how many
/// operations reached the backend meanwhile. Every queued failure must have
/// been used.
async fn with_failures<T>(
    line: u32,
    flaky: &FlakyBackend,
    failures: impl IntoIterator<Item = Status>,
    f: impl std::future::Future<Output = T>,
) -> (T, usize) {
    flaky.fail_next(failures);
    let before = flaky.submitted();
    let r = f.await;
    assert_eq!(flaky.failures_left(), 0, "line {line}: a queued failure was not used");
    (r, flaky.submitted() - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_statuses_are_retried_up_to_five_times() {
    bounded(60, async {
        let (server, addr, flaky) = flaky_target().await;
        let (ctrl, ns) = connect(addr, ConnectOptions { io_queues: 1, ..opts() }).await;
        assert_eq!(ConnectOptions::default().max_retries, 5, "Linux nvme_max_retries");
        let data = pattern(8 * BS, 1);
        let mut buf = vec![0u8; data.len()];

        // Two failures, then the write lands: three executions.
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT; 2], ns.write(0, &data)).await;
        r.unwrap();
        assert_eq!(n, 3);
        // Five failures: the fifth retry succeeds, with the data.
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT; 5], ns.read(0, &mut buf)).await;
        r.unwrap();
        assert_eq!((n, &buf), (6, &data));
        // Six: the error of the last execution comes back.
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT; 6], ns.read(0, &mut buf)).await;
        assert_eq!((status_of(r), n), (TRANSIENT, 6));
        // A status with DNR is returned at once, whatever it is.
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT.with_dnr()], ns.read(0, &mut buf)).await;
        assert_eq!((status_of(r), n), (TRANSIENT.with_dnr(), 1));
        let (r, n) = with_failures(line!(), &flaky, [Status::LBA_RANGE.with_dnr()], ns.write(0, &data)).await;
        assert_eq!((status_of(r), n), (Status::LBA_RANGE.with_dnr(), 1));
        // Limited Retry: the Linux host sets it on the requests it does not
        // retry itself (REQ_FAILFAST_DEV), and so do we.
        let lr = IoFlags { limited_retry: true, ..IoFlags::default() };
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT], ns.read_with(0, &mut buf, lr)).await;
        assert_eq!((status_of(r), n), (TRANSIENT, 1));

        // Every other namespace request: one failure, then success.
        let bytes = Bytes::from(pattern(4 * BS, 2));
        let (r, n) =
            with_failures(line!(), &flaky, [TRANSIENT], ns.write_bytes(64, bytes.clone(), IoFlags::FUA))
                .await;
        r.unwrap();
        assert_eq!(n, 2);
        // A read into an owned buffer gets it back after the failure, without
        // the failed read's bytes: the caller's prefix stays, then the data.
        let prefix = BytesMut::from(&b"prefix"[..]);
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT; 3], ns.read_buf(64, prefix, 4 * BS)).await;
        let got = r.unwrap();
        assert_eq!((n, &got[..6], &got[6..]), (4, &b"prefix"[..], &bytes[..]));
        let (r, n) =
            with_failures(line!(), &flaky, [TRANSIENT], ns.write_zeroes(64, 4, false, IoFlags::default()))
                .await;
        r.unwrap();
        assert_eq!(n, 2);
        assert!(ns.read_bytes(64, 4 * BS).await.unwrap().iter().all(|&b| b == 0));
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT], ns.compare(0, &data)).await;
        assert!(r.unwrap(), "the retried compare matches");
        assert_eq!(n, 2);
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT], ns.deallocate(&[(128, 8)])).await;
        r.unwrap();
        assert_eq!(n, 2);

        // Namespace 1 (RAM, never failing) is not disturbed.
        let ns1 = ctrl.namespace(1).await.unwrap();
        ns1.write(0, &data).await.unwrap();
        ctrl.shutdown().await.unwrap();
        server.shutdown(std::time::Duration::from_secs(2)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_failed_commands_of_a_split_request_or_batch_go_again() {
    bounded(60, async {
        let (server, addr, flaky) = flaky_target().await;
        // 4 KiB per command: a 16 KiB request is 4 commands.
        let split = ConnectOptions { io_queues: 1, max_transfer: Some(4096), ..opts() };
        let (ctrl, ns) = connect(addr, split).await;
        let data = pattern(16 << 10, 3);

        // Whichever commands meet the failures are sent again, alone. (All
        // four reach the backend before any retry: the first ones there
        // take the failures.)
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT], ns.write(0, &data)).await;
        r.unwrap();
        assert_eq!(n, 5);
        let mut buf = vec![0u8; data.len()];
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT; 2], ns.read(0, &mut buf)).await;
        r.unwrap();
        assert_eq!(n, 6);
        assert_eq!(buf, data);
        let (r, n) = with_failures(
            line!(),
            &flaky,
            [TRANSIENT],
            ns.write_bytes(0, Bytes::from(data.clone()), IoFlags::default()),
        )
        .await;
        r.unwrap();
        assert_eq!(n, 5);
        // Owned pieces: the retried piece keeps its place in the one buffer.
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT; 3], ns.read_bytes(0, data.len())).await;
        let got = r.unwrap();
        assert_eq!(n, 7);
        assert_eq!(&got[..], &data[..]);
        // Commands that keep failing fail their request after 5 retries.
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT; 24], ns.read(0, &mut buf)).await;
        assert_eq!((status_of(r), n), (TRANSIENT, 24));

        // A batch: each request's result is its own, after retries.
        let mut a = vec![0u8; 4096];
        let mut b = vec![0u8; 8192];
        let mut batch = ns.batch();
        batch.read(0, &mut a, IoFlags::default());
        batch.read(8, &mut b, IoFlags::default());
        batch.write(64, &data[..4096], IoFlags { limited_retry: true, ..IoFlags::default() });
        let (results, n) = with_failures(line!(), &flaky, [TRANSIENT; 2], batch.submit()).await;
        // The write with Limited Retry fails if it met a failure; the reads
        // never fail (each has 5 retries).
        assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
        match &results[2] {
            Ok(()) => assert_eq!(n, 6),
            Err(_) => assert_eq!(n, 5, "the failed write is not sent again"),
        }
        assert_eq!((&a[..], &b[..]), (&data[..4096], &data[4096..12288]));

        // max_retries 0: every error comes back at once.
        let (ctrl0, ns0) = connect(addr, ConnectOptions { io_queues: 1, max_retries: 0, ..opts() }).await;
        let (r, n) = with_failures(line!(), &flaky, [TRANSIENT], ns0.read(0, &mut buf[..4096])).await;
        assert_eq!((status_of(r), n), (TRANSIENT, 1));
        ctrl0.shutdown().await.unwrap();
        ctrl.shutdown().await.unwrap();
        server.shutdown(std::time::Duration::from_secs(2)).await;
    })
    .await;
}

/// `zero_out`, as Linux's `blkdev_issue_zeroout`: Write Zeroes where the
/// controller offers it; where it refuses one with Invalid Opcode (nvmet's
/// file namespaces on tmpfs, with DNR), the range is written with zeroes
/// instead, and the handle (and its clones) writes from then on. Other
/// errors are returned as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_out_writes_zeroes_where_write_zeroes_is_refused() {
    bounded(60, async {
        let (server, addr, flaky) = flaky_target().await;
        let (ctrl, ns) = connect(addr, ConnectOptions { io_queues: 1, ..opts() }).await;
        let data = pattern(64 * BS, 7);
        ns.write(0, &data).await.unwrap();
        flaky.take_kinds();
        let none = IoFlags::default();

        ns.zero_out(4, 8, none).await.unwrap();
        assert_eq!(flaky.take_kinds(), "Z", "offered: one Write Zeroes");
        let refused = Status::INVALID_OPCODE.with_dnr();
        let (r, _) = with_failures(line!(), &flaky, [refused], ns.zero_out(16, 8, none)).await;
        r.unwrap();
        assert_eq!(flaky.take_kinds(), "ZW", "refused: written instead");
        ns.clone().zero_out(32, 8, none).await.unwrap();
        assert_eq!(flaky.take_kinds(), "W", "remembered: written at once");
        let mut back = vec![0u8; data.len()];
        ns.read(0, &mut back).await.unwrap();
        for (blk, (got, want)) in back.chunks(BS).zip(data.chunks(BS)).enumerate() {
            let zeroed = (4..12).contains(&blk) || (16..24).contains(&blk) || (32..40).contains(&blk);
            if zeroed {
                assert!(got.iter().all(|&b| b == 0), "block {blk} not zeroed");
            } else {
                assert_eq!(got, want, "block {blk} changed");
            }
        }

        assert_eq!(flaky.take_kinds(), "R");
        // Another failure is the caller's: returned, nothing written.
        let fresh = ctrl.namespace(2).await.unwrap();
        let (r, _) =
            with_failures(line!(), &flaky, [Status::INTERNAL.with_dnr()], fresh.zero_out(48, 8, none)).await;
        assert_eq!(status_of(r).code(), Status::INTERNAL);
        assert_eq!(flaky.take_kinds(), "Z");
        assert!(matches!(fresh.zero_out(0, 0, none).await, Err(Error::InvalidArgument(_))));
        drop((fresh, ns));
        ctrl.shutdown().await.unwrap();
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await;
}
