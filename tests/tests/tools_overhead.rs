//! What `nvmeof-probe` itself costs: the probe against an in-process RAM
//! target on ONE thread (a current-thread runtime runs the target, the
//! initiator and the probe), compared with a raw loop calling the initiator
//! directly (`Controller::io_command_on`, `Instant` around the await, samples
//! into a preallocated `Vec`).
//!
//! - QD1 round trip: mean and median latency, raw loop vs probe.
//! - Throughput: IOPS at QD 1 and QD 32 on one queue, raw tasks vs probe
//!   slots, and the CPU time per request of the whole thread (target +
//!   initiator + probe or raw loop, from `/proc/thread-self/schedstat`,
//!   connection set-up included on both sides): the difference is what the
//!   probe itself spends per request, a number that does not depend on how
//!   busy the rest of the machine is.
//!
//! A measurement, not a check: ignored by default. Run it in release mode:
//!
//! ```text
//! cargo test --release -p nvmeof-tests --test tools_overhead -- --ignored --nocapture
//! ```
//!
//! The numbers are in tools/README.md ("Overhead of the probe").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmeof_initiator::common::opcode::IoOpcode;
use nvmeof_initiator::common::Sqe;
use nvmeof_initiator::{ConnectOptions, Controller, HostIdentity, Payload, ReconnectPolicy};
use nvmeof_target::backend::MemBackend;
use nvmeof_target::config::TargetConfig;
use nvmeof_target::core::{Limits, Namespace, Subsystem};
use nvmeof_target::server::Server;
use nvmeof_tools::probe::{OpKind, ProbeOptions};

const NQN: &str = "nqn.2024-01.io.nvmeof.test:overhead";
const SIZE: u64 = 64 << 20;
const BS: usize = 4096;
const BLOCKS: u64 = SIZE / 512;

async fn start() -> (Server, String) {
    let cfg = TargetConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        port_ana: vec![Default::default()],
        port_ids: Vec::new(),
        port_params: Vec::new(),
        subsystems: Vec::new(),
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
    let sub = Arc::new(Subsystem::new(NQN, "overhead", None, false));
    sub.add_namespace(Arc::new(Namespace::new(NQN, 1, Arc::new(MemBackend::new(SIZE, 512)))));
    server.target.add_subsystem(sub);
    let addr = server.local_addrs[0].to_string();
    (server, addr)
}

async fn raw_ctrl(addr: &str, qd: u16) -> Controller {
    let opts = ConnectOptions {
        host: Some(HostIdentity::from_id(*b"overhead-raw-001")),
        io_queues: 1,
        queue_depth: qd + 1,
        reconnect: ReconnectPolicy::never(),
        max_transfer: None,
        ..ConnectOptions::default()
    };
    Controller::connect(addr, NQN, opts).await.unwrap()
}

fn read_sqe(lba: u64) -> Sqe {
    let mut s = Sqe::new(IoOpcode::READ.0);
    s.set_nsid(1).set_slba(lba).set_cdw(12, (BS / 512 - 1) as u32);
    s
}

fn lba(i: u64) -> u64 {
    // Same spread as random offsets, without an RNG in the loop.
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) % (BLOCKS / 8) * 8
}

/// (mean, median) in ns of `n` QD1 reads through the initiator directly.
async fn raw_qd1(addr: &str, n: usize) -> (f64, u64) {
    let ctrl = raw_ctrl(addr, 1).await;
    let mut buf = vec![0u8; BS];
    let mut v = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        ctrl.io_command_on(1, read_sqe(lba(i)), Payload::Read(&mut buf)).await.unwrap();
        v.push(t.elapsed().as_nanos() as u64);
    }
    ctrl.shutdown().await.unwrap();
    v.sort_unstable();
    (v.iter().sum::<u64>() as f64 / n as f64, v[n / 2])
}

async fn probe_qd1(addr: &str, n: usize) -> (f64, u64) {
    let c = n.to_string();
    let o = ProbeOptions::parse_args(["p", addr, "--nqn", NQN, "--qd", "1", "--count", &c]).unwrap();
    let r = nvmeof_tools::run_probe(&o).await.unwrap();
    (r.read.mean(), r.read.percentile(50.0))
}

/// CPU time of this thread so far (ns).
fn thread_cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    s.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// (IOPS, CPU ns per request) of `qd` tasks looping on one queue for `secs`.
async fn raw_iops(addr: &str, qd: usize, secs: f64) -> (f64, f64) {
    let cpu = thread_cpu_ns();
    let ctrl = raw_ctrl(addr, qd as u16).await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..qd)
        .map(|k| {
            let (ctrl, stop, done) = (ctrl.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; BS];
                let mut i = k as u64 * 1_000_003;
                while !stop.load(Ordering::Relaxed) {
                    ctrl.io_command_on(1, read_sqe(lba(i)), Payload::Read(&mut buf)).await.unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let n = done.load(Ordering::Relaxed) as f64;
    let iops = n / start.elapsed().as_secs_f64();
    ctrl.shutdown().await.unwrap();
    (iops, (thread_cpu_ns() - cpu) as f64 / n)
}

async fn probe_iops(addr: &str, qd: usize, secs: f64) -> (f64, f64) {
    let (q, t) = (qd.to_string(), format!("{}ms", (secs * 1000.0) as u64));
    let o = ProbeOptions::parse_args(["p", addr, "--nqn", NQN, "--qd", &q, "--time", &t]).unwrap();
    let cpu = thread_cpu_ns();
    let r = nvmeof_tools::run_probe(&o).await.unwrap();
    (r.iops(OpKind::Read), (thread_cpu_ns() - cpu) as f64 / r.read.ops as f64)
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "measurement; run with --release --ignored --nocapture"]
async fn probe_overhead_on_one_core() {
    let (server, addr) = start().await;
    // Warm up both paths.
    raw_qd1(&addr, 2000).await;
    probe_qd1(&addr, 2000).await;
    let n = 20_000;
    let mut raw = Vec::new();
    let mut probe = Vec::new();
    for _ in 0..3 {
        raw.push(raw_qd1(&addr, n).await);
        probe.push(probe_qd1(&addr, n).await);
    }
    let best =
        |v: &[(f64, u64)]| v.iter().copied().fold((f64::MAX, u64::MAX), |a, b| (a.0.min(b.0), a.1.min(b.1)));
    let (rm, r50) = best(&raw);
    let (pm, p50) = best(&probe);
    println!("QD1 4 KiB random read, one thread, {n} requests × 3 rounds (best round):");
    println!("  raw initiator loop: mean {:.2} us, median {:.2} us", rm / 1e3, r50 as f64 / 1e3);
    println!("  nvmeof-probe:       mean {:.2} us, median {:.2} us", pm / 1e3, p50 as f64 / 1e3);
    println!("  probe adds:         mean {:+.0} ns, median {:+} ns", pm - rm, p50 as i64 - r50 as i64);
    for qd in [1usize, 32] {
        let mut r = Vec::new();
        let mut p = Vec::new();
        for _ in 0..5 {
            r.push(raw_iops(&addr, qd, 1.0).await);
            p.push(probe_iops(&addr, qd, 1.0).await);
        }
        let best_iops = |v: &[(f64, f64)]| v.iter().map(|x| x.0).fold(0.0, f64::max);
        let min_cpu = |v: &[(f64, f64)]| v.iter().map(|x| x.1).fold(f64::MAX, f64::min);
        let (ri, pi) = (best_iops(&r), best_iops(&p));
        let (rc, pc) = (min_cpu(&r), min_cpu(&p));
        println!("QD{qd}, one queue, 4 KiB random read, one thread (best of 5 × 1 s, alternating):");
        println!("  raw initiator tasks: {ri:.0} IOPS, {:.0} ns CPU per request", rc);
        println!("  nvmeof-probe slots:  {pi:.0} IOPS, {:.0} ns CPU per request", pc);
        println!("  probe: {:+.1} % IOPS, {:+.0} ns CPU per request", (pi / ri - 1.0) * 100.0, pc - rc);
    }
    server.shutdown(Duration::from_secs(1)).await;
}
