//! Robustness of the initiator as an application (a data loader, a
//! checkpoint writer) sees it, against our target on 127.0.0.1: regressions
//! for bugs found in a sweep of the library (each added with its fix), and
//! the behaviour that held in that sweep: a timed-out slow command leaves its
//! queue usable with the right data in later buffers, cancelled requests give
//! their slots back, more requests than the queue depth, invalid requests, an
//! idle association outliving KATO, connect errors, many queues with digests,
//! the target stopped mid-I/O and restarted on the same port.
//!
//! Every test body runs under a time bound.

mod initiator_util;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use initiator_util::*;
use nvmeof_initiator::common::Status;
use nvmeof_initiator::{ConnectOptions, Controller, ControllerState, Error, IoFlags, ReconnectPolicy};
use nvmeof_target::core::Namespace as TargetNamespace;
use nvmeof_target::server::Server;
use nvmeof_tests::harness::{pattern, HeldPort};
use nvmeof_tests::slow_backend::SlowBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// Adds namespace `nsid` backed by RAM whose completions arrive `delay` late.
fn add_slow_ns(server: &Server, nsid: u32, size: u64, delay: Duration) {
    let slow = Arc::new(SlowBackend::new(size, BS as u32, delay));
    server
        .target
        .subsystem(SUBNQN)
        .unwrap()
        .add_namespace(Arc::new(TargetNamespace::new(SUBNQN, nsid, slow)));
}

/// One I/O queue with `depth − 1` commands outstanding at most.
fn one_queue(depth: u16) -> ConnectOptions {
    ConnectOptions { io_queues: 1, queue_depth: depth, ..opts() }
}

fn is_lba_range(r: &Result<(), Error>) -> bool {
    matches!(r, Err(Error::Nvme { status, .. }) if status.code() == Status::LBA_RANGE.code())
}

/// An ICResp without digests.
fn icresp() -> Vec<u8> {
    use nvmeof_initiator::common::pdu::{DigestFlags, EncodeConfig, IcResp, Pdu};
    Pdu::IcResp(IcResp { pfv: 0, cpda: 0, dgst: DigestFlags::new(false, false), maxh2cdata: 1 << 20 })
        .encode_to_vec(&EncodeConfig::default())
}

/// Accepts connections on 127.0.0.1:0 and hands them to `each` (in its own task).
async fn listener<F, Fut>(each: F) -> (SocketAddr, tokio::task::JoinHandle<()>)
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(each(s));
        }
    });
    (addr, task)
}

// ---------------------------------------------------------------------------
// Regressions.

/// A queue whose connection is lost while the association is being
/// re-established (after its own Connect succeeded, before the other queues'
/// did) is reconnected too. The supervisor used to discard every loss report
/// queued during the recovery: the controller then said `Live` while every
/// request routed to that queue waited forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_lost_while_reestablishing_is_reconnected() {
    bounded(40, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20)])).await;
        let proxy = QidProxy::start(addr).await;
        let o = ConnectOptions { io_queues: 2, queue_depth: 8, ..opts() };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let d = pattern(4096, 9);
        ns.write(0, &d).await.unwrap();
        // Next round: queue 1 connects and is cut 100 ms later, while queue 2's
        // Connect is held for 600 ms (so the recovery is still running).
        proxy.trick(1, Trick::CutAfter(Duration::from_millis(100)));
        proxy.trick(2, Trick::DelayConnect(Duration::from_millis(600)));
        proxy.cut(None);
        wait_state(&ctrl, ControllerState::Reconnecting, Duration::from_secs(3)).await;
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(5)).await;
        // Requests on both queues (round robin) complete.
        for i in 0..4 {
            let mut b = vec![0u8; 4096];
            let r = tokio::time::timeout(Duration::from_secs(8), ns.read(0, &mut b)).await;
            r.unwrap_or_else(|_| panic!("read {i} hangs (state {:?})", ctrl.state())).unwrap();
            assert_eq!(b, d);
        }
        assert!(proxy.accepted.load(Ordering::SeqCst) > 6, "queue 1 was not reconnected");
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// With busy polling, the close of an I/O queue's connection that arrives
/// while the driver spins is noticed at once: the outstanding command fails
/// (no requeue) instead of waiting for its deadline, with a worker thread
/// spinning meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_poll_notices_a_close_during_the_spin() {
    bounded(40, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20)])).await;
        add_slow_ns(&server, 2, 1 << 20, Duration::from_secs(3));
        let proxy = QidProxy::start(addr).await;
        let o = ConnectOptions {
            io_queues: 1,
            queue_depth: 8,
            // Long enough that the driver is still spinning when the close comes.
            busy_poll: Duration::from_secs(1),
            command_timeout: Duration::from_secs(8),
            reconnect: ReconnectPolicy { requeue: false, ..opts().reconnect },
            ..opts()
        };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let ns2 = ctrl.namespace(2).await.unwrap();
        let inflight = tokio::spawn(async move {
            let mut b = vec![0u8; 4096];
            let t0 = Instant::now();
            (ns2.read(0, &mut b).await, t0.elapsed())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let accepted = proxy.accepted.load(Ordering::SeqCst);
        proxy.cut(Some(1));
        let (r, took) = inflight.await.unwrap();
        assert!(matches!(r, Err(Error::ConnectionLost)), "{r:?} after {took:?}");
        assert!(took < Duration::from_secs(2), "noticed after {took:?}");
        // The read fails as soon as the driver sees the close; the recovery may
        // not have begun yet (the state still Live), so wait for its new
        // connection before waiting for Live: a shutdown racing the recovery
        // failed with ConnectionLost.
        let t0 = Instant::now();
        while proxy.accepted.load(Ordering::SeqCst) == accepted {
            assert!(t0.elapsed() < Duration::from_secs(10), "no reconnect after the cut");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(10)).await;
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Dropping a `Controller::connect` future (an application's own timeout
/// around it) closes the connection it opened. Its driver tasks used to keep
/// running for the life of the process, here with the socket open until the
/// ICResp timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_connect_closes_its_connection() {
    bounded(30, async {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let (silent, acceptor) = listener(move |s| {
            let _ = tx.send(s);
            async {}
        })
        .await;
        let o = ConnectOptions { connect_timeout: Duration::from_secs(10), ..one_queue(8) };
        let r =
            tokio::time::timeout(Duration::from_millis(300), Controller::connect(silent, SUBNQN, o)).await;
        assert!(r.is_err(), "connect finished: {r:?}");
        let mut s = rx.recv().await.unwrap();
        let mut icreq = [0u8; 128];
        s.read_exact(&mut icreq).await.unwrap();
        let mut more = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(3), s.read(&mut more)).await;
        assert!(matches!(r, Ok(Ok(0))), "connection of a cancelled connect still open: {r:?}");
        acceptor.abort();
    })
    .await;
}

/// A port that accepts but never answers the ICReq, and one that answers the
/// ICReq but never the Connect, fail `connect` with `Error::Timeout` after
/// `connect_timeout` (documented for both steps); they used to fail with
/// `Error::Protocol(HandshakeTimeout)` and `Error::Command(Timeout)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_step_timeouts_are_timeout_errors() {
    bounded(30, async {
        let t = Duration::from_millis(400);
        let o = ConnectOptions { connect_timeout: t, ..one_queue(8) };
        let (silent, a) = listener(|mut s| async move {
            let _ = s.read(&mut [0u8; 256]).await;
            tokio::time::sleep(Duration::from_secs(20)).await;
        })
        .await;
        let t0 = Instant::now();
        let r = Controller::connect(silent, SUBNQN, o.clone()).await;
        assert!(matches!(r, Err(Error::Timeout(d)) if d == t), "no ICResp: {r:?}");
        assert!(t0.elapsed() < t + Duration::from_secs(2), "{:?}", t0.elapsed());
        a.abort();
        let (half, a) = listener(|mut s| async move {
            let mut icreq = [0u8; 128];
            if s.read_exact(&mut icreq).await.is_ok() && s.write_all(&icresp()).await.is_ok() {
                tokio::time::sleep(Duration::from_secs(20)).await;
            }
        })
        .await;
        let t0 = Instant::now();
        let r = Controller::connect(half, SUBNQN, o).await;
        assert!(matches!(r, Err(Error::Timeout(d)) if d == t), "no Connect response: {r:?}");
        assert!(t0.elapsed() < t + Duration::from_secs(2), "{:?}", t0.elapsed());
        a.abort();
    })
    .await;
}

/// Requests split into several commands whose range passes the last 64-bit
/// LBA are refused before anything is sent. The pieces' LBAs used to be
/// `lba + offset` unchecked: a panic in debug builds, and in release builds the
/// pieces after the first wrapped around, so this write put its data at LBA
/// 2044 of the namespace while returning an error for the first piece.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_requests_past_the_last_lba_are_refused() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20)])).await;
        let ctrl = Controller::connect(addr, SUBNQN, one_queue(8)).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let mt = ns.max_transfer() as usize;
        let lba = u64::MAX - 3;
        let big = vec![0xAAu8; 2 * mt];
        let inv = |r: &Result<(), Error>| matches!(r, Err(Error::InvalidArgument(_)));
        let r = ns.write(lba, &big).await;
        assert!(inv(&r), "write: {r:?}");
        let r = ns.write_bytes(lba, Bytes::from(big.clone()), IoFlags::default()).await;
        assert!(inv(&r), "write_bytes: {r:?}");
        let r = ns.compare(lba, &big).await.map(drop);
        assert!(inv(&r), "compare: {r:?}");
        let r = ns.read(lba, &mut vec![0u8; 2 * mt]).await;
        assert!(inv(&r), "read: {r:?}");
        let r = ns.read_buf(lba, BytesMut::new(), 2 * mt).await.map(drop);
        assert!(inv(&r), "read_buf: {r:?}");
        let mut batch = ns.batch();
        batch.write(lba, &big, IoFlags::default());
        let r = batch.submit().await.remove(0);
        assert!(inv(&r), "batch write: {r:?}");
        let r = ns.write_zeroes(u64::MAX - 10, 200_000, false, IoFlags::default()).await;
        assert!(inv(&r), "write_zeroes: {r:?}");
        // Nothing reached the namespace.
        let back = ns.read_bytes(0, 4 << 20).await.unwrap();
        assert!(back.iter().all(|&b| b == 0), "data written at wrapped-around LBAs");
        // A single command is still the controller's to judge.
        assert!(is_lba_range(&ns.read(u64::MAX - 3, &mut [0u8; 512]).await));
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// `write_zeroes` over a huge range fails with the controller's answer for
/// the first commands. It used to build one command per 65536 blocks up front:
/// for `u64::MAX − 1` blocks, 2^48 of them, which aborted the process (out of
/// memory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_zeroes_of_a_huge_range_fails_without_aborting() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20)])).await;
        let ctrl = Controller::connect(addr, SUBNQN, one_queue(8)).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let d = pattern(4096, 2);
        ns.write(0, &d).await.unwrap();
        let r = ns.write_zeroes(ns.blocks(), u64::MAX - ns.blocks(), false, IoFlags::default()).await;
        assert!(is_lba_range(&r), "{r:?}");
        let mut b = vec![0u8; 4096];
        ns.read(0, &mut b).await.unwrap();
        assert_eq!(b, d);
        // Ranges inside the namespace still work, also across groups of commands.
        ns.write_zeroes(0, ns.blocks(), false, IoFlags::default()).await.unwrap();
        ns.read(0, &mut b).await.unwrap();
        assert!(b.iter().all(|&x| x == 0));
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// A KATO of 1 ns (sent to the controller as 0 ms, keep-alive disabled)
/// still leaves a working supervisor: a cut connection is re-established.
/// The keep-alive timer used to panic on its zero period (half of 1 ns),
/// ending the supervisor task, so the controller stayed `Live` over dead
/// connections and requests hung.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiny_kato_keeps_the_supervisor_alive() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        let proxy = Proxy::start(addr).await;
        let o = ConnectOptions { kato: Duration::from_nanos(1), ..one_queue(8) };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        proxy.kill_all();
        wait_state(&ctrl, ControllerState::Reconnecting, Duration::from_secs(3)).await;
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(5)).await;
        let r = tokio::time::timeout(Duration::from_secs(5), ns.read(0, &mut [0u8; 512])).await;
        r.expect("read hangs").unwrap();
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Behaviour that held in the sweep (kept as regression coverage).

/// A slow command runs past its timeout: it fails with `Timeout`, the
/// association is reset (so its late completion can never reach a later
/// command), and the queue serves later reads into other buffers with the
/// right data, with its whole depth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_slow_command_leaves_the_queue_usable() {
    bounded(60, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20)])).await;
        add_slow_ns(&server, 2, 1 << 20, Duration::from_millis(1800));
        // 600 ms: a good read on a loaded machine never takes that long.
        let o = ConnectOptions { command_timeout: Duration::from_millis(600), ..one_queue(4) };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        let ns1 = ctrl.namespace(1).await.unwrap();
        let ns2 = ctrl.namespace(2).await.unwrap();
        let data = pattern(64 << 10, 3);
        ns1.write(0, &data).await.unwrap();
        for _ in 0..3 {
            let mut b = vec![0u8; 4096];
            let r = ns2.read(0, &mut b).await;
            assert!(matches!(r, Err(Error::Timeout(d)) if d == Duration::from_millis(600)), "{r:?}");
            for i in 0..10usize {
                let mut back = vec![0u8; 4096];
                ns1.read(i as u64 * 8, &mut back).await.unwrap();
                assert_eq!(back[..], data[i * 4096..(i + 1) * 4096], "block {i}");
            }
        }
        // After the late completions were due: the full depth (3) at once.
        tokio::time::sleep(Duration::from_millis(2000)).await;
        read_blocks_at_once(&ns1, 3, &data).await;
        assert_eq!(ctrl.state(), ControllerState::Live);
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Reads the first `n` 4 KiB blocks of `ns` at once and checks them against `data`.
async fn read_blocks_at_once(ns: &nvmeof_initiator::Namespace, n: usize, data: &[u8]) {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let ns = ns.clone();
        set.spawn(async move {
            let mut back = vec![0u8; 4096];
            ns.read(i as u64 * 8, &mut back).await.map(|_| (i, back))
        });
    }
    while let Some(r) = set.join_next().await {
        let (i, back) = r.unwrap().unwrap();
        assert_eq!(back[..], data[i * 4096..(i + 1) * 4096], "block {i}");
    }
}

/// Reads dropped while outstanding (borrowed and owned buffers, more of them
/// than the queue depth) give their slots back once the controller answers,
/// and later reads get their own data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_requests_return_their_slots() {
    bounded(60, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20)])).await;
        add_slow_ns(&server, 2, 1 << 20, Duration::from_millis(300));
        let ctrl = Controller::connect(addr, SUBNQN, one_queue(4)).await.unwrap();
        let ns1 = ctrl.namespace(1).await.unwrap();
        let ns2 = ctrl.namespace(2).await.unwrap();
        let data = pattern(64 << 10, 4);
        let slow = pattern(8192, 5);
        ns1.write(0, &data).await.unwrap();
        ns2.write(0, &slow).await.unwrap();
        for _ in 0..10 {
            let mut b = vec![0u8; 8192];
            assert!(tokio::time::timeout(Duration::from_millis(20), ns2.read(0, &mut b)).await.is_err());
            drop(b);
            let owned = ns2.read_buf(0, BytesMut::new(), 8192);
            assert!(tokio::time::timeout(Duration::from_millis(20), owned).await.is_err());
        }
        read_blocks_at_once(&ns1, 3, &data).await;
        let mut b = vec![0u8; 8192];
        ns2.read(0, &mut b).await.unwrap();
        assert_eq!(b, slow);
        assert_eq!(&ns2.read_buf(0, BytesMut::new(), 8192).await.unwrap()[..], &slow[..]);
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// 64 tasks on one queue of 2 slots: every write, borrowed read and owned
/// read completes with its own data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_requests_than_the_queue_depth() {
    bounded(60, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20)])).await;
        let ctrl = Controller::connect(addr, SUBNQN, one_queue(3)).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..64u64 {
            let ns = ns.clone();
            set.spawn(async move {
                let d = pattern(4096, i);
                ns.write(i * 8, &d).await?;
                let mut b = vec![0u8; 4096];
                ns.read(i * 8, &mut b).await?;
                let o = ns.read_buf(i * 8, BytesMut::new(), 4096).await?;
                assert_eq!(b, d);
                assert_eq!(&o[..], &d[..]);
                Ok::<_, Error>(())
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap();
        }
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Zero-length, odd-sized and out-of-range requests fail with the right kind
/// of error and cost the queue nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_fail_with_the_right_errors() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        let ctrl = Controller::connect(addr, SUBNQN, one_queue(4)).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let end = ns.blocks();
        let inv = |r: Result<(), Error>| assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        inv(ns.read(0, &mut []).await);
        inv(ns.read(0, &mut [0u8; 513]).await);
        inv(ns.read(0, &mut [0u8; 100]).await);
        inv(ns.write(0, &[]).await);
        inv(ns.write(0, &[1u8; 1000]).await);
        inv(ns.read_buf(0, BytesMut::new(), 0).await.map(drop));
        inv(ns.read_buf(0, BytesMut::new(), 700).await.map(drop));
        inv(ns.write_zeroes(0, 0, false, IoFlags::default()).await);
        inv(ctrl.io_command_on(0, Default::default(), Default::default()).await.map(drop));
        inv(ctrl.io_command_on(2, Default::default(), Default::default()).await.map(drop));
        inv(ctrl.namespace(7).await.map(drop));
        // More than the SGL's 32-bit length can say: refused before the buffer
        // is grown (it used to be cast to u32, here to a 0-byte transfer).
        let mut sqe = nvmeof_initiator::common::sqe::Sqe::new(0x02);
        sqe.set_nsid(1);
        inv(ctrl.io_read_buf_on(1, sqe, BytesMut::new(), (1 << 32) + 512).await.map(drop));
        let lba = |r: Result<(), Error>| assert!(is_lba_range(&r), "{r:?}");
        lba(ns.read(end, &mut [0u8; 512]).await);
        lba(ns.read(end - 1, &mut [0u8; 1024]).await);
        lba(ns.read(end - 8, &mut vec![0u8; 4 << 20]).await);
        lba(ns.write(end, &[0u8; 512]).await);
        lba(ns.read_buf(end, BytesMut::new(), 512).await.map(drop));
        lba(ns.write_zeroes(end, 1, false, IoFlags::default()).await);
        lba(ns.deallocate(&[(end, 1)]).await);
        lba(ns.compare(end, &[0u8; 512]).await.map(drop));
        // All slots are still there (3 at once) and data lands right.
        let d = pattern(4096, 1);
        ns.write(0, &d).await.unwrap();
        let mut bufs = [vec![0u8; 4096], vec![0u8; 4096], vec![0u8; 4096]];
        let mut batch = ns.batch();
        for b in bufs.iter_mut() {
            batch.read(0, b, IoFlags::default());
        }
        assert!(batch.submit().await.iter().all(Result::is_ok));
        assert!(bufs.iter().all(|b| *b == d));
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// An idle association outlives several KATO periods: keep-alive keeps it,
/// without reconnecting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_association_outlives_kato() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        let proxy = Proxy::start(addr).await;
        let o = ConnectOptions { kato: Duration::from_millis(1000), ..one_queue(8) };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let conns = proxy.accepted.load(Ordering::SeqCst);
        let rx = ctrl.subscribe_state();
        tokio::time::sleep(Duration::from_millis(3500)).await;
        assert!(!rx.has_changed().unwrap(), "state changed: {:?}", ctrl.state());
        assert_eq!(proxy.accepted.load(Ordering::SeqCst), conns, "reconnected");
        ns.read(0, &mut [0u8; 4096]).await.unwrap();
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Wrong subsystem NQN: the Connect status; a closed port: a transport error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        let r = Controller::connect(addr, "nqn.2024-01.io.example:nope", one_queue(8)).await;
        assert!(matches!(&r, Err(e @ Error::Nvme { .. }) if e.is_permanent()), "{r:?}");
        let closed = HeldPort::new();
        let r = Controller::connect(closed.addr(), SUBNQN, one_queue(8)).await;
        assert!(matches!(r, Err(Error::Transport(_))), "{r:?}");
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// 64 I/O queues with header and data digests, 200 tasks over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_queues_with_digests() {
    bounded(60, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20)])).await;
        let o =
            ConnectOptions { io_queues: 64, queue_depth: 8, hdr_digest: true, data_digest: true, ..opts() };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        assert_eq!(ctrl.io_queue_count(), 64);
        let ns = ctrl.namespace(1).await.unwrap();
        let mut set = tokio::task::JoinSet::new();
        for i in 0..200u64 {
            let ns = ns.clone();
            set.spawn(async move {
                let d = pattern(8192 + (i as usize % 4) * 512, i);
                ns.write(i * 32, &d).await?;
                let mut b = vec![0u8; d.len()];
                ns.read(i * 32, &mut b).await?;
                assert_eq!(b, d);
                Ok::<_, Error>(())
            });
        }
        while let Some(r) = set.join_next().await {
            r.unwrap().unwrap();
        }
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// The target stops with a command in flight (no requeue): it fails with
/// `ConnectionLost` at once; a request made while the target is away waits
/// and completes once the target is back on the same port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_stopped_mid_io_then_restarted() {
    bounded(60, async {
        let cfg = config(vec![ram_ns(1, 4 << 20)]);
        let (server, addr) = start(&cfg).await;
        add_slow_ns(&server, 2, 1 << 20, Duration::from_millis(500));
        let o = ConnectOptions {
            reconnect: ReconnectPolicy {
                delay: Duration::from_millis(100),
                max_delay: Duration::from_millis(200),
                ctrl_loss_timeout: Some(Duration::from_secs(20)),
                requeue: false,
                fast_io_fail_timeout: None,
            },
            ..one_queue(8)
        };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        let ns1 = ctrl.namespace(1).await.unwrap();
        let ns2 = ctrl.namespace(2).await.unwrap();
        let inflight = tokio::spawn(async move {
            let mut b = vec![0u8; 4096];
            ns2.read(0, &mut b).await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t0 = Instant::now();
        let stop = tokio::spawn(server.shutdown(Duration::from_millis(100)));
        let r = inflight.await.unwrap();
        assert!(matches!(r, Err(Error::ConnectionLost)), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        stop.await.unwrap();
        let ns = ns1.clone();
        let newer = tokio::spawn(async move { ns.read(0, &mut [0u8; 4096]).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!newer.is_finished());
        let mut cfg2 = cfg.clone();
        cfg2.listen = vec![addr];
        let server2 = restart(&cfg2).await;
        newer.await.unwrap().unwrap();
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(10)).await;
        ns1.read(0, &mut [0u8; 4096]).await.unwrap();
        ctrl.shutdown().await.unwrap();
        server2.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// `fast_io_fail_timeout` (Linux `fast_io_fail_tmo`): once the controller
/// has been reconnecting that long, the commands waiting for the reconnect
/// fail, new ones fail at once, and reconnecting goes on; once it succeeds,
/// I/O waits and runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_io_fail_timeout_fails_the_io_waiting_for_a_reconnect() {
    bounded(60, async {
        let cfg = config(vec![ram_ns(1, 1 << 20)]);
        let (server, addr) = start(&cfg).await;
        let o = ConnectOptions {
            reconnect: ReconnectPolicy {
                max_delay: Duration::from_millis(200),
                ctrl_loss_timeout: Some(Duration::from_secs(40)),
                fast_io_fail_timeout: Some(Duration::from_secs(1)),
                ..opts().reconnect
            },
            ..one_queue(8)
        };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let data = pattern(4096, 9);
        ns.write(0, &data).await.unwrap();

        // The target goes away: every reconnect attempt is refused.
        server.shutdown(Duration::from_millis(100)).await;
        wait_state(&ctrl, ControllerState::Reconnecting, Duration::from_secs(5)).await;
        let t0 = Instant::now();
        let waiting = {
            let ns = ns.clone();
            tokio::spawn(async move { ns.read(0, &mut [0u8; 4096]).await })
        };
        let r = waiting.await.unwrap();
        assert!(matches!(r, Err(Error::ConnectionLost)), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(10), "failed after {:?}", t0.elapsed());
        assert_eq!(ctrl.state(), ControllerState::Reconnecting, "reconnecting goes on");
        // New I/O now fails without waiting (it would wait for the target
        // otherwise, which is not back before this check ends).
        for _ in 0..3 {
            let r = tokio::time::timeout(Duration::from_secs(5), ns.read(0, &mut [0u8; 4096])).await;
            assert!(matches!(r, Ok(Err(Error::ConnectionLost))), "{r:?}");
        }

        // The target is back (a new RAM namespace): the controller
        // reconnects and I/O runs again.
        let mut cfg2 = cfg.clone();
        cfg2.listen = vec![addr];
        let server2 = restart(&cfg2).await;
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(10)).await;
        ns.write(0, &data).await.unwrap();
        let mut back = vec![0u8; 4096];
        ns.read(0, &mut back).await.unwrap();
        assert!(back == data, "read back what was written");
        // A second loss: I/O waits for the reconnect again (the expiry was
        // cleared) and, with the target back within the timeout, completes.
        server2.shutdown(Duration::from_millis(100)).await;
        wait_state(&ctrl, ControllerState::Reconnecting, Duration::from_secs(5)).await;
        let waiting = {
            let ns = ns.clone();
            tokio::spawn(async move { ns.read(0, &mut [0u8; 4096]).await })
        };
        let server3 = restart(&cfg2).await;
        waiting.await.unwrap().expect("waited for the reconnect");
        ctrl.shutdown().await.unwrap();
        server3.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// A proxy that knows which queue each connection carries.

/// What [`QidProxy`] does to the next connection of a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trick {
    /// Hold the Connect command this long before forwarding it.
    DelayConnect(Duration),
    /// Close the connection this long after forwarding the Connect command.
    CutAfter(Duration),
}

/// Byte offset of the QID in a Connect SQE (CDW10 bits 31:16).
const QID_OFF: usize = nvmeof_initiator::common::sqe::fabrics_off::QID;

type Conns = Arc<Mutex<Vec<(u16, [AbortHandle; 2])>>>;

/// Forwards connections to `upstream` and reads the QID of each queue from
/// its Connect command (no header digest: the capsule's SQE starts at byte 8).
struct QidProxy {
    addr: SocketAddr,
    /// One-shot tricks per QID, taken by the next connection of that queue.
    tricks: Arc<Mutex<Vec<(u16, Trick)>>>,
    /// Connections: QID and the tasks forwarding its two directions.
    conns: Conns,
    accepted: Arc<AtomicU64>,
}

impl QidProxy {
    async fn start(upstream: SocketAddr) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let tricks: Arc<Mutex<Vec<(u16, Trick)>>> = Default::default();
        let conns: Conns = Default::default();
        let accepted = Arc::new(AtomicU64::new(0));
        let (t, c, a) = (tricks.clone(), conns.clone(), accepted.clone());
        tokio::spawn(async move {
            while let Ok((down, _)) = l.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let (t, c) = (t.clone(), c.clone());
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(upstream).await else { return };
                    let _ = down.set_nodelay(true);
                    let _ = up.set_nodelay(true);
                    let (mut dr, mut dw) = down.into_split();
                    let (mut ur, mut uw) = up.into_split();
                    let mut icreq = [0u8; 128];
                    if dr.read_exact(&mut icreq).await.is_err() || uw.write_all(&icreq).await.is_err() {
                        return;
                    }
                    let back = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut ur, &mut dw).await;
                    });
                    let mut capsule = [0u8; 72];
                    if dr.read_exact(&mut capsule).await.is_err() {
                        back.abort();
                        return;
                    }
                    let qid = u16::from_le_bytes([capsule[8 + QID_OFF], capsule[9 + QID_OFF]]);
                    let trick = {
                        let mut t = t.lock().unwrap();
                        t.iter().position(|(q, _)| *q == qid).map(|i| t.remove(i).1)
                    };
                    if let Some(Trick::DelayConnect(d)) = trick {
                        tokio::time::sleep(d).await;
                    }
                    if uw.write_all(&capsule).await.is_err() {
                        back.abort();
                        return;
                    }
                    let fwd = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut dr, &mut uw).await;
                    });
                    let handles = [back.abort_handle(), fwd.abort_handle()];
                    if let Some(Trick::CutAfter(d)) = trick {
                        tokio::spawn(async move {
                            tokio::time::sleep(d).await;
                            back.abort();
                            fwd.abort();
                        });
                    }
                    c.lock().unwrap().push((qid, handles));
                });
            }
        });
        Self { addr, tricks, conns, accepted }
    }

    fn trick(&self, qid: u16, t: Trick) {
        self.tricks.lock().unwrap().push((qid, t));
    }

    /// Closes every connection of queue `qid` (or all with `None`).
    fn cut(&self, qid: Option<u16>) {
        let mut c = self.conns.lock().unwrap();
        c.retain(|(q, hs)| {
            if qid.is_none_or(|x| x == *q) {
                hs.iter().for_each(|h| h.abort());
                false
            } else {
                true
            }
        });
    }
}

/// The runtime that runs a controller's tasks shuts down while a command is
/// outstanding (an application that made the controller on a runtime it
/// later drops): the caller, on another runtime, gets an error instead of
/// waiting forever for a driver task that is gone, and so does every later
/// request. The same guard covers a panic in a driver task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_fail_when_the_controllers_runtime_is_gone() {
    bounded(40, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20)])).await;
        add_slow_ns(&server, 2, 1 << 20, Duration::from_secs(30));
        let other =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let o = ConnectOptions { io_queues: 1, command_timeout: Duration::from_secs(60), ..opts() };
        let ctrl = other.spawn(Controller::connect(addr, SUBNQN, o)).await.unwrap().unwrap();
        let ns2 = ctrl.namespace(2).await.unwrap();
        let slow = tokio::spawn(async move {
            let mut b = vec![0u8; 4096];
            let r = ns2.read(0, &mut b).await;
            (r, ns2)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        other.shutdown_background();
        let (r, ns2) = tokio::time::timeout(Duration::from_secs(5), slow)
            .await
            .expect("the outstanding read still waits for a driver task that is gone")
            .unwrap();
        assert!(matches!(r, Err(Error::ControllerLost(_))), "{r:?}");
        let mut b = vec![0u8; 4096];
        let r = tokio::time::timeout(Duration::from_secs(5), ns2.read(0, &mut b))
            .await
            .expect("a new read waits for a driver task that is gone");
        assert!(matches!(r, Err(Error::ControllerLost(_))), "{r:?}");
        drop(ns2);
        drop(ctrl);
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Write Zeroes follows the controller's Write Zeroes Size Limit: ours
/// reports WZSL 13 (32 MiB, Identify CNS 06h), so on a 4 KiB namespace a
/// 20000-block `write_zeroes` goes as three commands (8192, 8192, 3616
/// blocks; the SMART log counts them) where the 16-bit NLB alone would
/// allow one, and every block in the range reads back as zeroes while
/// the blocks on either side keep their data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_zeroes_splits_at_the_controllers_size_limit() {
    use nvmeof_initiator::common::spec::log::SmartLog;
    use nvmeof_initiator::common::spec::{GetLogPageCmd, IdentifyCtrlNvm, LogPageId};
    use nvmeof_target::config::NamespaceConfig;
    bounded(30, async {
        let ns_cfg = NamespaceConfig { block_size: 4096, ..ram_ns(1, 128 << 20) };
        let (server, addr) = start(&config(vec![ns_cfg])).await;
        let ctrl = Controller::connect(addr, SUBNQN, one_queue(8)).await.unwrap();
        let limits = ctrl.info().nvm_limits;
        // WZSL 13; VSL = MDTS (Verify); no Dataset Management limits.
        assert_eq!(
            limits,
            IdentifyCtrlNvm { wzsl: 13, vsl: ctrl.info().identify.mdts, ..Default::default() }
        );
        let ns = ctrl.namespace(1).await.unwrap();
        assert_eq!(ns.block_size(), 4096);
        let host_writes = || async {
            let mut buf = vec![0u8; 512];
            ctrl.get_log_page(GetLogPageCmd::new(LogPageId::SMART, 1, 0, 512), &mut buf).await.unwrap();
            SmartLog::decode(&buf).unwrap().host_writes
        };
        let d = pattern(4096, 3);
        for lba in [99, 100, 100 + 19_999, 100 + 20_000] {
            ns.write(lba, &d).await.unwrap();
        }
        let before = host_writes().await;
        ns.write_zeroes(100, 20_000, false, IoFlags::default()).await.unwrap();
        assert_eq!(
            host_writes().await - before,
            3,
            "Write Zeroes commands for 20000 blocks at 8192 a command"
        );
        let mut b = vec![0u8; 4096];
        for (lba, zero) in [
            (99, false),
            (100, true),
            (100 + 8191, true),
            (100 + 8192, true),
            (100 + 19_999, true),
            (100 + 20_000, false),
        ] {
            ns.read(lba, &mut b).await.unwrap();
            if zero {
                assert!(b.iter().all(|&x| x == 0), "block {lba} not zeroed");
            } else {
                assert_eq!(b, d, "block {lba} outside the range changed");
            }
        }
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}
