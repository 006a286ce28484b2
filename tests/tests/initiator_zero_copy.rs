//! Reads into owned buffers (`Namespace::read_buf` / `read_bytes`) against
//! our target: the payload goes from the socket straight into the buffer
//! (proved with `Controller::rx_stats`), digests, the SUCCESS flag, digest
//! errors, timeouts, reconnects and cancellation in the middle of a payload.

mod initiator_util;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use initiator_util::*;
use nvmeof_initiator::queue::CommandFailure;
use nvmeof_initiator::{ConnectOptions, Controller, ControllerState, Error, Namespace, RxStats};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MIB: usize = 1 << 20;

fn delta(a: RxStats, b: RxStats) -> RxStats {
    RxStats {
        copied_via_chunks: b.copied_via_chunks - a.copied_via_chunks,
        copied_from_rbuf: b.copied_from_rbuf - a.copied_from_rbuf,
        direct: b.direct - a.direct,
    }
}

fn same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!("{what}: first difference at byte {i}: got {:#04x}, expected {:#04x}", got[i], want[i]);
    }
}

/// Writes 8 MiB of random data at LBA 0 and returns it.
async fn fill_disk(ns: &Namespace) -> Vec<u8> {
    let mut data = vec![0u8; 8 * MIB];
    StdRng::seed_from_u64(42).fill(&mut data[..]);
    ns.write(0, &data).await.unwrap();
    data
}

async fn owned_reads_bypass_the_receive_buffer(o: ConnectOptions) {
    let (server, addr) = start(&config(vec![ram_ns(1, 16 * MIB as u64)])).await;
    let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let disk = fill_disk(&ns).await;

    // Large reads: 1 MiB (one command), 3 MiB + 512 B (split by MDTS, pieces joined in place).
    let s0 = ctrl.rx_stats();
    let mut total = 0usize;
    for i in 0..6u64 {
        let lba = i * 977;
        for len in [MIB, 3 * MIB + BS, 256 << 10] {
            let off = lba as usize * BS;
            let b = ns.read_bytes(lba, len).await.unwrap();
            same(&b, &disk[off..off + len], "read_bytes");
            total += len;
        }
    }
    // read_buf appends to what the buffer holds and can be reused.
    let mut buf = BytesMut::with_capacity(4 * MIB);
    buf.extend_from_slice(b"header!!");
    let buf = ns.read_buf(8, buf, 2 * MIB).await.unwrap();
    assert_eq!(&buf[..8], b"header!!");
    same(&buf[8..], &disk[8 * BS..8 * BS + 2 * MIB], "read_buf");
    total += 2 * MIB;
    let d = delta(s0, ctrl.rx_stats());
    eprintln!("owned reads of {total} bytes: {d:?}");
    assert_eq!(d.copied_via_chunks, 0, "owned reads never take the parked-chunks path");
    assert_eq!(d.direct + d.copied_from_rbuf, total as u64, "every byte is accounted once");
    assert!(
        d.direct as f64 >= 0.9 * total as f64,
        "most payload bytes come straight from the socket: {d:?} of {total}"
    );

    // Small reads arrive with their header: copied once out of the receive buffer.
    let s1 = ctrl.rx_stats();
    for i in 0..50u64 {
        let b = ns.read_bytes(i * 3, 4096).await.unwrap();
        same(&b, &disk[(i * 3) as usize * BS..(i * 3) as usize * BS + 4096], "small read_bytes");
    }
    let d = delta(s1, ctrl.rx_stats());
    assert_eq!(d.copied_via_chunks, 0);
    assert_eq!(d.direct + d.copied_from_rbuf, 50 * 4096);
    // A payload shorter than one capped `recv` is never read on its own (a
    // `recv` per 4 KiB costs more than the copy).
    assert_eq!(d.direct, 0, "small payloads read straight from the socket: {d:?}");

    // For contrast: reads into a borrowed slice copy everything from the receive buffer.
    let s2 = ctrl.rx_stats();
    let mut slice = vec![0u8; 3 * MIB];
    ns.read(0, &mut slice).await.unwrap();
    same(&slice, &disk[..3 * MIB], "read");
    let d = delta(s2, ctrl.rx_stats());
    assert_eq!(d, RxStats { copied_via_chunks: 3 * MIB as u64, copied_from_rbuf: 0, direct: 0 });

    // Owned and borrowed reads mixed, concurrently, on every queue.
    let mut set = tokio::task::JoinSet::new();
    for t in 0..16u64 {
        let ns = ns.clone();
        let disk = disk.clone();
        set.spawn(async move {
            let mut rng = StdRng::seed_from_u64(t);
            for _ in 0..20 {
                let blocks = rng.gen_range(1..=4096u64);
                let lba = rng.gen_range(0..=(disk.len() / BS) as u64 - blocks);
                let (off, len) = (lba as usize * BS, blocks as usize * BS);
                if rng.gen_bool(0.5) {
                    let b = ns.read_bytes(lba, len).await.unwrap();
                    same(&b, &disk[off..off + len], "concurrent read_bytes");
                } else {
                    let mut v = vec![0u8; len];
                    ns.read(lba, &mut v).await.unwrap();
                    same(&v, &disk[off..off + len], "concurrent read");
                }
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    assert_eq!(ctrl.state(), ControllerState::Live);
    ctrl.shutdown().await.unwrap();
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owned_reads_bypass_the_receive_buffer_plain() {
    bounded(30, owned_reads_bypass_the_receive_buffer(opts())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owned_reads_bypass_the_receive_buffer_with_digests() {
    let o = ConnectOptions { hdr_digest: true, data_digest: true, ..opts() };
    bounded(30, owned_reads_bypass_the_receive_buffer(o)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owned_reads_bypass_the_receive_buffer_with_success_flag() {
    // SQ flow control off: the target completes reads with a SUCCESS-flagged C2HData.
    let o = ConnectOptions { disable_sqflow: true, data_digest: true, ..opts() };
    bounded(30, owned_reads_bypass_the_receive_buffer(o)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn data_digest_error_fails_only_that_read() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 16 * MIB as u64)])).await;
        let proxy = Proxy::start(addr).await;
        // With a CapsuleResp after the data, and with SUCCESS-flagged C2HData.
        for disable_sqflow in [false, true] {
            let o = ConnectOptions { hdr_digest: true, data_digest: true, disable_sqflow, ..opts() };
            let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
            let ns = ctrl.namespace(1).await.unwrap();
            let disk = fill_disk(&ns).await;
            let conns = proxy.accepted.load(Ordering::SeqCst);
            for _ in 0..3 {
                // Owned buffer: the digest is computed while the payload streams in.
                proxy.corrupt.store(1, Ordering::SeqCst);
                match ns.read_bytes(100, MIB).await {
                    Err(Error::Command(CommandFailure::DataDigest)) => {}
                    other => panic!("expected a data digest failure, got {:?}", other.map(|b| b.len())),
                }
                assert_eq!(proxy.corrupt.load(Ordering::SeqCst), 0, "the corruption was applied");
                let b = ns.read_bytes(100, MIB).await.unwrap();
                same(&b, &disk[100 * BS..100 * BS + MIB], "read after a digest error");
                // Borrowed slice (decoder path) for comparison.
                proxy.corrupt.store(1, Ordering::SeqCst);
                let mut v = vec![0u8; MIB];
                match ns.read(100, &mut v).await {
                    Err(Error::Command(CommandFailure::DataDigest)) => {}
                    other => panic!("expected a data digest failure, got {other:?}"),
                }
                ns.read(100, &mut v).await.unwrap();
                same(&v, &disk[100 * BS..100 * BS + MIB], "read after a digest error");
            }
            assert_eq!(proxy.accepted.load(Ordering::SeqCst), conns, "digest errors do not reset the queue");
            assert_eq!(ctrl.state(), ControllerState::Live);
            ctrl.shutdown().await.unwrap();
        }
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Drops read futures while their payload is streaming in (the proxy slows
/// the target-to-host direction down), then checks that the queues still
/// work and return the right data. Buffers of cancelled borrowed reads are
/// freed right away.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_reads_mid_payload_is_safe() {
    bounded(40, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 16 * MIB as u64)])).await;
        let proxy = Proxy::start(addr).await;
        for digests in [false, true] {
            let o = ConnectOptions { io_queues: 1, hdr_digest: digests, data_digest: digests, ..opts() };
            let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
            let ns = ctrl.namespace(1).await.unwrap();
            let disk = fill_disk(&ns).await;
            let conns = proxy.accepted.load(Ordering::SeqCst);
            // 1 MiB at 128 KiB per 5 ms: ~40 ms per command.
            proxy.throttle(Some((128 << 10, Duration::from_millis(5))));
            let mut mid_payload = 0;
            for (i, frac) in [0.05f64, 0.3, 0.6, 0.9].into_iter().enumerate() {
                let lba = i as u64 * 2048;
                // Owned buffer: dropped once `frac` of its payload is in.
                if drop_when_streamed(&ctrl, ns.read_bytes(lba, MIB), (frac * MIB as f64) as u64).await {
                    mid_payload += 1;
                }
                // Split 3 MiB read: dropped in the middle of the second command.
                if drop_when_streamed(&ctrl, ns.read_bytes(lba, 3 * MIB), (1.5 * MIB as f64) as u64).await {
                    mid_payload += 1;
                }
                // Borrowed slice, freed as soon as the future is gone.
                let mut v = vec![0u8; MIB];
                let wait = Duration::from_millis(5 + 10 * i as u64);
                let _ = tokio::time::timeout(wait, ns.read(lba, &mut v)).await;
                drop(v);
                // Let the abandoned payloads drain (the queue serves them in order).
                let b = ns.read_bytes(lba, 4096).await.unwrap();
                same(&b, &disk[lba as usize * BS..lba as usize * BS + 4096], "read after cancellations");
            }
            assert!(mid_payload >= 6, "futures were dropped while their payload streamed in ({mid_payload})");
            proxy.throttle(None);
            // The queue survived: the same data through both paths, concurrently.
            let mut set = tokio::task::JoinSet::new();
            for i in 0..8u64 {
                let ns = ns.clone();
                let disk = disk.clone();
                set.spawn(async move {
                    let lba = i * 1000;
                    let off = lba as usize * BS;
                    let b = ns.read_bytes(lba, MIB).await.unwrap();
                    same(&b, &disk[off..off + MIB], "owned read after cancellations");
                    let mut v = vec![0u8; MIB];
                    ns.read(lba, &mut v).await.unwrap();
                    same(&v, &disk[off..off + MIB], "read after cancellations");
                });
            }
            while let Some(r) = set.join_next().await {
                r.unwrap();
            }
            assert_eq!(proxy.accepted.load(Ordering::SeqCst), conns, "no reconnect was needed");
            ctrl.shutdown().await.unwrap();
        }
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Polls `read` until at least `bytes` more payload bytes went straight into
/// owned buffers, then drops it; true if it was dropped that way (false if it
/// finished first).
async fn drop_when_streamed<T>(
    ctrl: &Controller,
    read: impl std::future::Future<Output = T>,
    bytes: u64,
) -> bool {
    let start = ctrl.rx_stats().direct;
    let mut read = std::pin::pin!(read);
    loop {
        tokio::select! {
            _ = &mut read => return false,
            _ = tokio::time::sleep(Duration::from_micros(500)) => {
                if ctrl.rx_stats().direct >= start + bytes {
                    return true;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timeout_mid_payload_discards_the_rest() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 16 * MIB as u64)])).await;
        let proxy = Proxy::start(addr).await;
        let timeout = Duration::from_millis(300);
        let o = ConnectOptions {
            io_queues: 1,
            data_digest: true,
            command_timeout: timeout,
            kato: Duration::ZERO,
            ..opts()
        };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let disk = fill_disk(&ns).await;
        // 1 MiB at 32 KiB per 20 ms: ~650 ms, well past the timeout.
        proxy.throttle(Some((32 << 10, Duration::from_millis(20))));
        let s0 = ctrl.rx_stats();
        let t0 = Instant::now();
        match ns.read_bytes(0, MIB).await {
            Err(Error::Timeout(d)) => assert_eq!(d, timeout),
            other => panic!("expected a timeout, got {:?}", other.map(|b| b.len())),
        }
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(ctrl.rx_stats().direct > s0.direct, "the payload had started streaming in");
        proxy.throttle(None);
        // The rest of the timed-out payload is discarded; the stream stays in sync.
        for lba in [0u64, 4096, 77] {
            let b = ns.read_bytes(lba, MIB).await.unwrap();
            same(&b, &disk[lba as usize * BS..lba as usize * BS + MIB], "read after a timeout");
        }
        // The reset's reconnect releases the queues before it marks the
        // controller live, so the reads can finish first (a clean-clone CI
        // saw `Reconnecting` here once): wait, bounded.
        let t1 = Instant::now();
        while ctrl.state() != ControllerState::Live && t1.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(ctrl.state(), ControllerState::Live);
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_cut_mid_payload_requeues_owned_read() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 16 * MIB as u64)])).await;
        let proxy = Proxy::start(addr).await;
        let o = ConnectOptions { io_queues: 1, kato: Duration::from_secs(2), ..opts() };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let disk = fill_disk(&ns).await;
        proxy.throttle(Some((32 << 10, Duration::from_millis(10))));
        let s0 = ctrl.rx_stats();
        let ns2 = ns.clone();
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"prefix");
        let read = tokio::spawn(async move { ns2.read_buf(10, buf, 2 * MIB).await });
        let until = Instant::now() + Duration::from_secs(5);
        while ctrl.rx_stats().direct < s0.direct + (100 << 10) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.kill_all();
        proxy.throttle(None);
        // Requeued on the new association; the partial data of the first try is replaced.
        let b = read.await.unwrap().expect("the read completes after the reconnect");
        assert_eq!(&b[..6], b"prefix");
        same(&b[6..], &disk[10 * BS..10 * BS + 2 * MIB], "read across a reconnect");
        // The read may have finished just before the cut; the association comes back either way.
        let mut st = ctrl.subscribe_state();
        tokio::time::timeout(Duration::from_secs(10), st.wait_for(|s| *s == ControllerState::Live))
            .await
            .expect("controller live again after the cut")
            .unwrap();
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}
