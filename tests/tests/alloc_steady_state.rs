//! Steady-state heap allocations per I/O, target and initiator together in one
//! process (issue: "no per-I/O heap allocation"). A counting global allocator
//! wraps the system one; after a warm-up, the allocations made while a fixed
//! number of 4 KiB reads and writes (and flushes) run are divided by the I/O count.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use nvmeof_initiator::{ConnectOptions, Controller, HostIdentity};
use nvmeof_target::backend::{Backend, UringBackend};
use nvmeof_target::config::{IoEngine, NamespaceConfig, NamespaceSource, SubsystemConfig, TargetConfig};
use nvmeof_target::core::Limits;
use nvmeof_target::server::Server;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const NQN: &str = "nqn.2024-01.io.nvmeof.test:alloc";

async fn measure(ns: &nvmeof_initiator::Namespace, n: u64, write: bool) -> f64 {
    let mut buf = vec![0x5Au8; 4096];
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for i in 0..n {
        let lba = (i * 8) % 8192;
        if write {
            ns.write(lba, &buf).await.unwrap();
        } else {
            ns.read(lba, &mut buf).await.unwrap();
        }
    }
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCS.load(Ordering::SeqCst) as f64 / n as f64
}

/// The zero-copy API the probe uses: one `BytesMut` moved into each read
/// (filled from the socket), one `Bytes` sent by every write.
async fn measure_owned(ns: &nvmeof_initiator::Namespace, n: u64, write: bool) -> f64 {
    let mut buf = bytes::BytesMut::zeroed(4096);
    let data = bytes::Bytes::from(vec![0xA5; 4096]);
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for i in 0..n {
        let lba = (i * 8) % 8192;
        if write {
            ns.write_bytes(lba, data.clone(), Default::default()).await.unwrap();
        } else {
            buf.clear();
            buf = ns.read_buf(lba, buf, 4096).await.unwrap();
        }
    }
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCS.load(Ordering::SeqCst) as f64 / n as f64
}

/// Flushes: a command without data, as a checkpoint writer issues after
/// each of its writes.
async fn measure_flush(ns: &nvmeof_initiator::Namespace, n: u64) -> f64 {
    ALLOCS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..n {
        ns.flush().await.unwrap();
    }
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCS.load(Ordering::SeqCst) as f64 / n as f64
}

#[tokio::test(flavor = "current_thread")]
async fn steady_state_allocations_per_io() {
    // An io_uring file namespace too (O_DIRECT where /var/tmp allows it),
    // where io_uring is usable here.
    let path = std::path::PathBuf::from(format!("/var/tmp/nvmeof-alloc-{}.img", std::process::id()));
    let uring_file = match UringBackend::open_file(&path, Some(8 << 20), 512) {
        Ok(b) => {
            println!("io_uring namespace: {}", b.describe());
            Some(path.clone())
        }
        Err(e) => {
            println!("note: no io_uring namespace: {e}");
            None
        }
    };
    let cfg = TargetConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        port_ana: vec![Default::default()],
        port_ids: Vec::new(),
        port_params: Vec::new(),
        subsystems: vec![SubsystemConfig {
            nqn: NQN.into(),
            model: "alloc".into(),
            serial: None,
            firmware: None,
            ieee_oui: None,
            allowed_hosts: None,
            host_keys: Default::default(),
            namespaces: vec![NamespaceConfig {
                nsid: Some(1),
                source: NamespaceSource::Ram(8 << 20),
                block_size: 512,
                read_only: false,
                ana_group: 1,
                ids: Default::default(),
                reservations: false,
                reservations_file: None,
                reservations_format: Default::default(),
                hosts: None,
                qos: Default::default(),
                zoned: None,
                zone_state_file: None,
            }]
            .into_iter()
            .chain(uring_file.as_ref().map(|path| NamespaceConfig {
                nsid: Some(2),
                source: NamespaceSource::File {
                    path: path.clone(),
                    size: Some(8 << 20),
                    io_engine: IoEngine::Uring,
                    buffered_io: false,
                },
                block_size: 512,
                read_only: false,
                ana_group: 1,
                ids: Default::default(),
                reservations: false,
                reservations_file: None,
                reservations_format: Default::default(),
                hosts: None,
                qos: Default::default(),
                zoned: None,
                zone_state_file: None,
            }))
            .collect(),
            cntlids: nvmeof_target::core::target::CNTLID_RANGE,
            ports: None,
            max_io_queues: None,
        }],
        limits: Limits::default(),
        poll_us: 0,
        send_buffer: nvmeof_net::default_send_buffer(),
        congestion_control: None,
        so_priority: 0,
        referrals: Vec::new(),
        metrics_listen: None,
        discovery_nqn: None,
        discovery_filter: Default::default(),
    };
    let server = Server::start(&cfg).await.unwrap();
    let opts = ConnectOptions {
        host: Some(HostIdentity::from_id([0xA1; 16])),
        io_queues: 1,
        queue_depth: 32,
        ..Default::default()
    };
    let ctrl = Controller::connect(server.local_addrs[0], NQN, opts).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    // Warm up: buffers, slots and channels reach their steady sizes.
    measure(&ns, 2000, true).await;
    measure(&ns, 2000, false).await;
    let w = measure(&ns, 5000, true).await;
    let r = measure(&ns, 5000, false).await;
    println!("steady state: {w:.3} allocations per 4 KiB write, {r:.3} per 4 KiB read (target + initiator)");
    measure_owned(&ns, 2000, true).await;
    measure_owned(&ns, 2000, false).await;
    let wo = measure_owned(&ns, 5000, true).await;
    let ro = measure_owned(&ns, 5000, false).await;
    println!("owned buffers: {wo:.3} allocations per 4 KiB write_bytes, {ro:.3} per 4 KiB read_buf");
    measure_flush(&ns, 2000).await;
    let f = measure_flush(&ns, 5000).await;
    println!("flush: {f:.3} allocations per flush");
    let uring = match uring_file {
        Some(_) => {
            let ns2 = ctrl.namespace(2).await.unwrap();
            measure(&ns2, 2000, true).await;
            measure(&ns2, 2000, false).await;
            let w = measure(&ns2, 5000, true).await;
            let r = measure(&ns2, 5000, false).await;
            println!("io_uring file: {w:.3} allocations per 4 KiB write, {r:.3} per 4 KiB read");
            Some((w, r))
        }
        None => None,
    };
    ctrl.shutdown().await.unwrap();
    server.shutdown(Duration::from_secs(1)).await;
    // Writes: none. Reads: the target reuses its read buffers; what remains is
    // the initiator's receive buffer being refilled (~0.07: one new 128 KiB
    // buffer per ~27 reads of 4 KiB), not an allocation per command.
    assert!(w < 0.01, "{w} allocations per write");
    assert!(r < 0.1, "{r} allocations per read");
    assert!(wo < 0.01, "{wo} allocations per write_bytes");
    assert!(ro < 0.1, "{ro} allocations per read_buf");
    assert!(f < 0.01, "{f} allocations per flush");
    // io_uring: reads land in the queue's recycled buffers and O_DIRECT write
    // copies reuse the ring's aligned buffers.
    if let Some((w, r)) = uring {
        let _ = std::fs::remove_file(&path);
        assert!(w < 0.01, "{w} allocations per io_uring write");
        assert!(r < 0.1, "{r} allocations per io_uring read");
    }
}
