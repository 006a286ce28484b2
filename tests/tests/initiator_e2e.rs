//! End-to-end: the `nvmeof-initiator` library against the `nvmeof-target`
//! server, in process over 127.0.0.1.
//!
//! - concurrent randomized read/write/verify (shadow model), with and without
//!   header and data digests, in-capsule and R2T writes, I/O larger than MDTS;
//! - target restart (requeue and completion; controller loss);
//! - a target that stops answering (a freezing proxy): command timeout,
//!   connection loss without requeue;
//! - NVMe status mapping; discovery.
//!
//! Every test body runs under a time bound.

mod initiator_util;

use std::io::{IoSlice, IoSliceMut};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use initiator_util::*;
use nvmeof_initiator::common::spec::discovery::TREQ_DISABLE_SQFLOW;
use nvmeof_initiator::common::{Sqe, Status};
use nvmeof_initiator::{
    connect_entry, discover, nvme_subsystems, ConnectOptions, Controller, ControllerState, Error,
    HostIdentity, IoFlags, Namespace, Payload, ReconnectPolicy,
};
use nvmeof_target::config::{NamespaceConfig, TargetConfig};
use nvmeof_tests::capsule_log::CapsuleLog;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Target defaults: in-capsule data on I/O queues, MDTS (8 → 1 MiB).
const TARGET_INLINE: usize = 128 << 10;
const TARGET_MDTS_BYTES: u64 = 1 << 20;

/// NVMe statuses without DNR that were retried (see [`retrying!`]).
static RETRIED: AtomicU64 = AtomicU64::new(0);

/// Awaits `$op` (re-evaluated per attempt), retrying up to 5 times with a
/// growing pause when the controller refuses it with an NVMe status without
/// DNR, the way the Linux host retries such errors. Our target answers
/// commands that arrive while it drains for shutdown with "Command Aborted
/// due to SQ Deletion" (SC 08h, no DNR); by the time a retry goes out the
/// connection is closed and the library holds the command for the next
/// association.
macro_rules! retrying {
    ($op:expr) => {{
        let mut attempt = 0u64;
        loop {
            match $op.await {
                Err(e @ Error::Nvme { .. }) if !e.is_permanent() && attempt < 5 => {
                    attempt += 1;
                    RETRIED.fetch_add(1, Ordering::Relaxed);
                    eprintln!("retrying after: {e}");
                    tokio::time::sleep(Duration::from_millis(50 * attempt)).await;
                }
                r => break r,
            }
        }
    }};
}

fn fill(rng: &mut StdRng, buf: &mut [u8]) {
    rng.fill(buf);
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let p = std::env::temp_dir().join(format!("nvmeof-e2e-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------
// Randomized concurrent I/O with a shadow model.

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    inline_writes: AtomicU64,
    r2t_writes: AtomicU64,
    bytes: AtomicU64,
    batches: AtomicU64,
}

/// One worker owns `[base, base + blocks)` and keeps a shadow copy of it.
struct Worker {
    ns: Namespace,
    base: u64,
    shadow: Vec<u8>,
    rng: StdRng,
}

impl Worker {
    fn new(ns: Namespace, base: u64, blocks: u64, seed: u64) -> Self {
        Self { ns, base, shadow: vec![0; blocks as usize * BS], rng: StdRng::seed_from_u64(seed) }
    }

    fn blocks(&self) -> u64 {
        (self.shadow.len() / BS) as u64
    }

    /// A random extent: 1..=512 blocks (512 B … 256 KiB), half of them in-capsule sized.
    fn extent(&mut self, max_blocks: u64) -> (u64, u64) {
        let max = max_blocks.min(self.blocks());
        let n = if self.rng.gen_bool(0.5) {
            self.rng.gen_range(1..=(TARGET_INLINE / BS) as u64).min(max)
        } else {
            self.rng.gen_range(1..=max)
        };
        let off = self.rng.gen_range(0..=self.blocks() - n);
        (off, n)
    }

    async fn step(&mut self, c: &Counters) -> Result<(), String> {
        let (off, n) = self.extent(512);
        let range = off as usize * BS..(off + n) as usize * BS;
        let lba = self.base + off;
        match self.rng.gen_range(0..10) {
            0..=3 => {
                let mut data = vec![0u8; range.len()];
                fill(&mut self.rng, &mut data);
                let flags = if self.rng.gen_bool(0.1) { IoFlags::FUA } else { IoFlags::default() };
                let r = if self.rng.gen_bool(0.2) {
                    let b = Bytes::from(data.clone());
                    retrying!(self.ns.write_bytes(lba, b.clone(), flags))
                } else {
                    retrying!(self.ns.write_with(lba, &data, flags))
                };
                r.map_err(|e| format!("write lba {lba} blocks {n}: {e}"))?;
                self.shadow[range.clone()].copy_from_slice(&data);
                c.writes.fetch_add(1, Ordering::Relaxed);
                if data.len() <= TARGET_INLINE {
                    c.inline_writes.fetch_add(1, Ordering::Relaxed);
                } else {
                    c.r2t_writes.fetch_add(1, Ordering::Relaxed);
                }
                c.bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
            4..=8 => {
                if self.rng.gen_bool(0.5) {
                    // Fresh garbage in the buffer: a read that delivers nothing is caught.
                    let mut buf = vec![0xA5u8; range.len()];
                    retrying!(self.ns.read(lba, &mut buf))
                        .map_err(|e| format!("read lba {lba} blocks {n}: {e}"))?;
                    check(&buf, &self.shadow[range.clone()], lba)?;
                } else {
                    // Into an owned buffer (payload read straight from the socket).
                    let buf = retrying!(self.ns.read_bytes(lba, range.len()))
                        .map_err(|e| format!("read_bytes lba {lba} blocks {n}: {e}"))?;
                    check(&buf, &self.shadow[range.clone()], lba)?;
                }
                c.reads.fetch_add(1, Ordering::Relaxed);
                c.bytes.fetch_add(range.len() as u64, Ordering::Relaxed);
            }
            _ => {
                // A batch: a write and a read of two disjoint halves of the worker's range.
                let half = self.blocks() / 2;
                let (w_off, r_off) = if self.rng.gen_bool(0.5) { (0, half) } else { (half, 0) };
                let wn = self.rng.gen_range(1..=half.min(128));
                let rn = self.rng.gen_range(1..=half.min(128));
                let mut data = vec![0u8; wn as usize * BS];
                fill(&mut self.rng, &mut data);
                let mut rbuf = vec![0x5Au8; rn as usize * BS];
                let results = {
                    let mut b = self.ns.batch();
                    b.write(self.base + w_off, &data, IoFlags::default());
                    b.read(self.base + r_off, &mut rbuf, IoFlags::default());
                    b.submit().await
                };
                for (i, r) in results.into_iter().enumerate() {
                    match r {
                        Ok(()) => {}
                        // Refused without DNR: that request did not run; run it again alone.
                        Err(e @ Error::Nvme { .. }) if !e.is_permanent() => {
                            RETRIED.fetch_add(1, Ordering::Relaxed);
                            eprintln!("batch: retrying after: {e}");
                            let r = if i == 0 {
                                retrying!(self.ns.write(self.base + w_off, &data))
                            } else {
                                retrying!(self.ns.read(self.base + r_off, &mut rbuf))
                            };
                            r.map_err(|e| format!("batch retry: {e}"))?;
                        }
                        Err(e) => return Err(format!("batch: {e}")),
                    }
                }
                let w = w_off as usize * BS;
                self.shadow[w..w + data.len()].copy_from_slice(&data);
                let r = r_off as usize * BS;
                check(&rbuf, &self.shadow[r..r + rbuf.len()], self.base + r_off)?;
                c.batches.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Reads the whole range back and compares it with the shadow.
    async fn verify_all(&mut self) -> Result<(), String> {
        let mut buf = vec![0xEEu8; self.shadow.len()];
        retrying!(self.ns.read(self.base, &mut buf)).map_err(|e| format!("final read: {e}"))?;
        check(&buf, &self.shadow, self.base)
    }
}

fn check(got: &[u8], want: &[u8], lba: u64) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
    Err(format!(
        "data mismatch in the extent at lba {lba}: first difference at byte {i} (block +{}): got {:#04x}, expected {:#04x}",
        i / BS,
        got[i],
        want[i]
    ))
}

/// 32 tasks × 4 concurrent workers on disjoint ranges, over 4 I/O queues of
/// depth 32, for `run_for`, on a RAM namespace.
async fn random_io(digests: bool, run_for: Duration) {
    random_io_on(|size| ram_ns(1, size), digests, run_for).await;
}

/// Size of the namespace [`random_io_on`] uses.
const RANDOM_IO_SIZE: u64 = 32 * 4 * 1024 * BS as u64;

/// [`random_io`] on the namespace `ns(size)` makes.
async fn random_io_on(ns: impl Fn(u64) -> NamespaceConfig, digests: bool, run_for: Duration) {
    const TASKS: u64 = 32;
    const PER_TASK: u64 = 4;
    const BLOCKS_PER_WORKER: u64 = 1024; // 512 KiB
    let size = TASKS * PER_TASK * BLOCKS_PER_WORKER * BS as u64;
    assert_eq!(size, RANDOM_IO_SIZE);
    let (server, addr) = start(&config(vec![ns(size)])).await;
    let o = ConnectOptions { hdr_digest: digests, data_digest: digests, ..opts() };
    let ctrl = Controller::connect(addr, SUBNQN, o).await.expect("connect");
    let info = ctrl.info();
    assert_eq!(info.io_queues, 4);
    assert_eq!(info.queue_depth, 33);
    assert_eq!(info.inline_data as usize, TARGET_INLINE, "target's in-capsule limit as seen by the host");
    let ns = ctrl.namespace(1).await.expect("namespace 1");
    assert_eq!(ns.size_bytes(), size);

    let counters = Arc::new(Counters::default());
    let deadline = Instant::now() + run_for;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let ns = ns.clone();
        let c = counters.clone();
        tasks.spawn(async move {
            let mk = |i: u64| {
                let w = t * PER_TASK + i;
                Worker::new(ns.clone(), w * BLOCKS_PER_WORKER, BLOCKS_PER_WORKER, 0xC0FFEE ^ w)
            };
            let run = |mut w: Worker, c: Arc<Counters>| async move {
                while Instant::now() < deadline {
                    w.step(&c).await?;
                }
                w.verify_all().await
            };
            let (a, b, cc, d) = tokio::join!(
                run(mk(0), c.clone()),
                run(mk(1), c.clone()),
                run(mk(2), c.clone()),
                run(mk(3), c.clone())
            );
            a.and(b).and(cc).and(d)
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task panicked").expect("I/O and verification");
    }
    let c = &counters;
    let (reads, writes, inl, r2t, batches) = (
        c.reads.load(Ordering::Relaxed),
        c.writes.load(Ordering::Relaxed),
        c.inline_writes.load(Ordering::Relaxed),
        c.r2t_writes.load(Ordering::Relaxed),
        c.batches.load(Ordering::Relaxed),
    );
    eprintln!(
        "random_io digests={digests}: {reads} reads, {writes} writes ({inl} in-capsule, {r2t} R2T), \
         {batches} batches, {} MiB",
        c.bytes.load(Ordering::Relaxed) >> 20
    );
    assert!(reads >= 50 && inl >= 20 && r2t >= 20 && batches >= 5, "too little I/O ran");
    let rx = ctrl.rx_stats();
    eprintln!("random_io digests={digests}: {rx:?}");
    assert!(rx.direct > 0 && rx.copied_via_chunks > 0, "both read paths ran");
    // Queues reap io_uring completions themselves: the backend's shared ring
    // and its reaper thread are for submitters without a queue ring.
    assert!(
        !thread_names().iter().any(|n| n == "nvmet-uring"),
        "an io_uring reaper thread ran: completions crossed a thread"
    );
    ctrl.shutdown().await.expect("orderly shutdown");
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_io_verified_without_digests() {
    bounded(30, random_io(false, Duration::from_secs(2))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_io_verified_with_header_and_data_digests() {
    bounded(30, random_io(true, Duration::from_secs(2))).await;
}

/// Names of this process's threads.
fn thread_names() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    dir.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect()
}

/// The same on io_uring file namespaces: each target queue submits to and
/// reaps its own ring (no reaper thread exists); first with O_DIRECT where the
/// filesystem allows it (/var/tmp; `buffered_io = false`), then through the
/// page cache (/dev/shm; the default).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_io_verified_on_io_uring_files() {
    use nvmeof_target::config::{IoEngine, NamespaceSource};
    let dirs = [PathBuf::from("/var/tmp"), PathBuf::from("/dev/shm"), std::env::temp_dir()];
    let mut ran = 0;
    for dir in dirs.iter().filter(|d| d.is_dir()).take(2) {
        let path = dir.join(format!("nvmeof-e2e-uring-{}-{ran}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let probe = nvmeof_target::backend::UringBackend::open_file_with(
            &path,
            Some(RANDOM_IO_SIZE),
            BS as u32,
            ran == 0,
        );
        match &probe {
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                eprintln!("note: skipping: {e}");
                return;
            }
            Err(e) => panic!("{}: {e}", path.display()),
            Ok(b) => eprintln!("io_uring namespace: {}", nvmeof_target::backend::Backend::describe(b)),
        }
        drop(probe);
        let p = path.clone();
        let ns = move |size| NamespaceConfig {
            nsid: Some(1),
            source: NamespaceSource::File {
                path: p.clone(),
                size: Some(size),
                io_engine: IoEngine::Uring,
                buffered_io: ran == 1,
            },
            block_size: BS as u32,
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
        };
        bounded(60, random_io_on(ns, ran == 1, Duration::from_secs(2))).await;
        let _ = std::fs::remove_file(&path);
        ran += 1;
    }
    assert!(ran > 0, "no directory for the namespace file");
}

/// 3 MiB (and 3 MiB + 512 B) reads and writes, split by the library into
/// MDTS-sized commands, alone and from several tasks at once.
async fn large_io(digests: bool) {
    let size = 64u64 << 20;
    let (server, addr) = start(&config(vec![ram_ns(1, size)])).await;
    let o = ConnectOptions { hdr_digest: digests, data_digest: digests, ..opts() };
    let ctrl = Controller::connect(addr, SUBNQN, o).await.expect("connect");
    assert_eq!(ctrl.info().max_transfer, Some(TARGET_MDTS_BYTES as u32));
    let ns = ctrl.namespace(1).await.unwrap();
    assert_eq!(ns.max_transfer(), TARGET_MDTS_BYTES);

    let mut rng = StdRng::seed_from_u64(3);
    for (lba, len) in [(7u64, 3usize << 20), (20_000, (3 << 20) + BS), (40_000, (1 << 20) - BS)] {
        let mut data = vec![0u8; len];
        fill(&mut rng, &mut data);
        ns.write(lba, &data).await.unwrap_or_else(|e| panic!("write {len} at {lba}: {e}"));
        let mut back = vec![0u8; len];
        ns.read(lba, &mut back).await.unwrap_or_else(|e| panic!("read {len} at {lba}: {e}"));
        check(&back, &data, lba).unwrap();
        // The same extent through a batch and write_bytes.
        fill(&mut rng, &mut data);
        ns.write_bytes(lba, Bytes::from(data.clone()), IoFlags::default()).await.unwrap();
        let mut back2 = vec![0u8; len];
        let r = {
            let mut b = ns.batch();
            b.read(lba, &mut back2, IoFlags::default());
            b.submit().await
        };
        assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
        check(&back2, &data, lba).unwrap();
    }

    // Vectored: pieces of odd lengths (a byte, a page less and more one,
    // ...) adding up to whole blocks, one command for a few KiB, several for
    // 3 MiB with pieces split across the commands' boundaries.
    for (lba, total) in [(90_000u64, 4096usize), (100_000, (3 << 20) + 1536)] {
        let pattern = [1usize, 4095, 4097, 131_079, 333_333, 9, 700_001];
        let cut = |total: usize, rev: bool| {
            let mut lens = Vec::new();
            let mut left = total;
            for i in 0.. {
                let l = pattern[if rev { pattern.len() - 1 - i % pattern.len() } else { i % pattern.len() }];
                if l >= left {
                    lens.push(left);
                    break;
                }
                lens.push(l);
                left -= l;
            }
            lens
        };
        let mut data = vec![0u8; total];
        fill(&mut rng, &mut data);
        let mut rest: &[u8] = &data;
        let slices: Vec<IoSlice<'_>> = cut(total, false)
            .into_iter()
            .map(|l| {
                let (head, tail) = rest.split_at(l);
                rest = tail;
                IoSlice::new(head)
            })
            .collect();
        ns.write_vectored(lba, &slices, IoFlags::default())
            .await
            .unwrap_or_else(|e| panic!("writev {total}: {e}"));
        let mut back = vec![0u8; total];
        ns.read(lba, &mut back).await.unwrap();
        check(&back, &data, lba).unwrap();
        let mut into = vec![0u8; total];
        let mut rest: &mut [u8] = &mut into;
        let mut slices: Vec<IoSliceMut<'_>> = cut(total, true)
            .into_iter()
            .map(|l| {
                let (head, tail) = std::mem::take(&mut rest).split_at_mut(l);
                rest = tail;
                IoSliceMut::new(head)
            })
            .collect();
        ns.read_vectored(lba, &mut slices, IoFlags::default())
            .await
            .unwrap_or_else(|e| panic!("readv {total}: {e}"));
        drop(slices);
        check(&into, &data, lba).unwrap();

        // In a batch: the extent read again into two halves while its
        // halves, swapped, are written 8 MiB further on.
        let (mut a, mut b) = (vec![0u8; total / 2], vec![0u8; total - total / 2]);
        let mut halves = [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)];
        let (first, second) = data.split_at(total / 2);
        let swapped = [IoSlice::new(second), IoSlice::new(first)];
        let lba2 = lba + (8 << 20) / BS as u64;
        let r = {
            let mut batch = ns.batch();
            batch.read_vectored(lba, &mut halves, IoFlags::default());
            batch.write_vectored(lba2, &swapped, IoFlags::default());
            batch.submit().await
        };
        assert!(r.iter().all(|r| r.is_ok()), "{r:?}");
        check(&[a, b].concat(), &data, lba).unwrap();
        let mut back = vec![0u8; total];
        ns.read(lba2, &mut back).await.unwrap();
        check(&back, &[second, first].concat(), lba2).unwrap();
    }
    // Not whole blocks together: refused before anything is sent.
    let mut odd = [0u8; 700];
    let r = ns.read_vectored(0, &mut [IoSliceMut::new(&mut odd)], IoFlags::default()).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");

    // Eight tasks with 3 MiB extents of their own, concurrently.
    let mut set = tokio::task::JoinSet::new();
    for t in 0..8u64 {
        let ns = ns.clone();
        set.spawn(async move {
            let mut rng = StdRng::seed_from_u64(100 + t);
            let lba = t * (6 << 20) / BS as u64 + 1;
            for _ in 0..3 {
                let mut data = vec![0u8; 3 << 20];
                fill(&mut rng, &mut data);
                ns.write(lba, &data).await.unwrap();
                let mut back = vec![0u8; 3 << 20];
                ns.read(lba, &mut back).await.unwrap();
                check(&back, &data, lba).unwrap();
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
    ctrl.shutdown().await.unwrap();
    server.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn io_larger_than_mdts_is_split() {
    bounded(30, large_io(false)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn io_larger_than_mdts_is_split_with_digests() {
    bounded(30, large_io(true)).await;
}

// ---------------------------------------------------------------------------
// Target restart.

/// Workers writing and verifying their own ranges until `stop`; returns the
/// workers (for a final verification) or the first error.
fn spawn_workers(
    ns: &Namespace,
    n: u64,
    blocks: u64,
    stop: Arc<AtomicBool>,
    ops: Arc<AtomicU64>,
) -> tokio::task::JoinSet<Result<Worker, String>> {
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let mut w = Worker::new(ns.clone(), i * blocks, blocks, 77 + i);
        let stop = stop.clone();
        let ops = ops.clone();
        set.spawn(async move {
            let c = Counters::default();
            while !stop.load(Ordering::Relaxed) {
                w.step(&c).await?;
                ops.fetch_add(1, Ordering::Relaxed);
            }
            Ok(w)
        });
    }
    set
}

/// Records every state the controller goes through.
fn watch_states(ctrl: &Controller) -> Arc<std::sync::Mutex<Vec<ControllerState>>> {
    let seen = Arc::new(std::sync::Mutex::new(vec![ctrl.state()]));
    let mut rx = ctrl.subscribe_state();
    let s = seen.clone();
    tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let v = *rx.borrow_and_update();
            s.lock().unwrap().push(v);
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn target_restart_on_same_port_requeues_and_completes() {
    bounded(40, async {
        let dir = TempDir::new("restart");
        // A file namespace keeps the data across the restart.
        let toml = |listen: &str| {
            format!(
                "[[port]]\nlisten = \"{listen}\"\n\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\n\
                 [[subsystem.namespace]]\nnsid = 1\nfile = \"{}\"\nsize = \"16M\"\nblock_size = {BS}\n",
                dir.0.join("disk.img").display()
            )
        };
        let cfg = TargetConfig::from_toml(&toml("127.0.0.1:0")).expect("config");
        let (server, addr) = start(&cfg).await;
        let cfg2 = TargetConfig::from_toml(&toml(&addr.to_string())).expect("config");
        assert_eq!(cfg2.listen, vec![addr]);
        let o = ConnectOptions { kato: Duration::from_secs(2), ..opts() };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        let first_cntlid = ctrl.info().cntlid;
        let states = watch_states(&ctrl);
        let ns = ctrl.namespace(1).await.unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let mut set = spawn_workers(&ns, 8, 2048, stop.clone(), ops.clone());

        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = ops.load(Ordering::Relaxed);
        assert!(before > 0, "no I/O before the restart");
        server.shutdown(Duration::from_secs(3)).await;
        // I/O waits while the target is away.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let server2 = restart(&cfg2).await;
        assert_eq!(server2.local_addrs[0], addr);
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(10)).await;
        let at_restart = ops.load(Ordering::Relaxed);
        // Let a good amount of I/O run on the new association.
        let until = Instant::now() + Duration::from_secs(10);
        while ops.load(Ordering::Relaxed) < at_restart + 200 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.store(true, Ordering::Relaxed);
        let mut workers = Vec::new();
        while let Some(r) = set.join_next().await {
            workers.push(r.unwrap().expect("every I/O completes across the restart"));
        }
        for w in &mut workers {
            w.verify_all().await.expect("data written before and after the restart");
        }
        let seen = states.lock().unwrap().clone();
        assert!(seen.contains(&ControllerState::Reconnecting), "states: {seen:?}");
        assert_eq!(ctrl.state(), ControllerState::Live);
        eprintln!(
            "restart: {before} ops before, {} total; cntlid {first_cntlid} → {}; states {seen:?}; \
             {} NVMe-status retries",
            ops.load(Ordering::Relaxed),
            ctrl.info().cntlid,
            RETRIED.load(Ordering::Relaxed)
        );
        ctrl.shutdown().await.unwrap();
        server2.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn target_gone_fails_io_with_controller_lost_after_ctrl_loss_timeout() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 16 << 20)])).await;
        let loss = Duration::from_millis(1500);
        let o = ConnectOptions {
            kato: Duration::from_secs(2),
            reconnect: ReconnectPolicy {
                delay: Duration::from_millis(200),
                max_delay: Duration::from_millis(200),
                ctrl_loss_timeout: Some(loss),
                requeue: true,
                fast_io_fail_timeout: None,
            },
            ..opts()
        };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        let states = watch_states(&ctrl);
        let ns = ctrl.namespace(1).await.unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let mut set = spawn_workers(&ns, 8, 2048, stop.clone(), ops.clone());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(ops.load(Ordering::Relaxed) > 0);
        let t0 = Instant::now();
        server.shutdown(Duration::from_secs(2)).await;
        // Every worker ends with ControllerLost (never a hang, never another error).
        while let Some(r) = set.join_next().await {
            let e = match r.unwrap() {
                Ok(_) => panic!("worker finished without an error"),
                Err(e) => e,
            };
            assert!(e.contains("controller lost"), "unexpected error: {e}");
        }
        let took = t0.elapsed();
        assert!(took >= loss - Duration::from_millis(400), "gave up too early: {took:?}");
        assert!(took < loss + Duration::from_secs(3), "gave up too late: {took:?}");
        assert_eq!(ctrl.state(), ControllerState::Failed);
        let seen = states.lock().unwrap().clone();
        assert!(seen.contains(&ControllerState::Reconnecting), "states: {seen:?}");
        // Later requests fail at once.
        let mut buf = vec![0u8; BS];
        let t1 = Instant::now();
        match ns.read(0, &mut buf).await {
            Err(Error::ControllerLost(why)) => eprintln!("controller lost: {why}"),
            other => panic!("expected ControllerLost, got {other:?}"),
        }
        assert!(t1.elapsed() < Duration::from_millis(500));
        assert!(Error::ControllerLost("x".into()).is_permanent());
    })
    .await;
}

// ---------------------------------------------------------------------------
// A target that stops answering, a connection cut (through the proxy).

/// A command that times out fails with `Timeout` and, as in Linux
/// (`nvme_tcp_timeout` starts error recovery), the association is reset: the
/// connection is closed (a late completion or R2T can no longer act on the
/// command) and re-established, after which I/O works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unresponsive_target_times_out_commands_and_resets_the_association() {
    bounded(60, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 16 << 20)])).await;
        let proxy = Proxy::start(addr).await;
        let timeout = Duration::from_millis(700);
        // No keep-alive: only the command deadline can notice the silence.
        let o = ConnectOptions {
            kato: Duration::ZERO,
            command_timeout: timeout,
            reconnect: ReconnectPolicy {
                ctrl_loss_timeout: Some(Duration::from_secs(30)),
                ..opts().reconnect
            },
            ..opts()
        };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let data = vec![0x3Cu8; 64 << 10];
        ns.write(0, &data).await.unwrap();
        let connections = proxy.accepted.load(Ordering::SeqCst);

        proxy.freeze(true);
        let t0 = Instant::now();
        let mut rd = vec![0u8; 64 << 10];
        let r = ns.read(0, &mut rd).await;
        let took = t0.elapsed();
        assert!(matches!(r, Err(Error::Timeout(d)) if d == timeout), "{r:?}");
        assert!(took >= timeout, "timed out early: {took:?}");
        assert!(took < timeout + Duration::from_secs(2), "timed out late: {took:?}");
        wait_state(&ctrl, ControllerState::Reconnecting, Duration::from_secs(3)).await;
        proxy.freeze(false);
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(20)).await;
        assert!(proxy.accepted.load(Ordering::SeqCst) > connections, "no new connection");

        // The new association serves I/O.
        let mut back = vec![0u8; 64 << 10];
        ns.read(0, &mut back).await.expect("read after recovery");
        check(&back, &data, 0).unwrap();
        ns.write(1000, &data).await.unwrap();
        ns.read(1000, &mut back).await.unwrap();
        check(&back, &data, 1000).unwrap();

        // An explicit per-command timeout on the admin queue does the same.
        proxy.freeze(true);
        let t1 = Instant::now();
        let r = ctrl.admin_command_timeout(Sqe::new(0x18), Payload::None, Duration::from_millis(300)).await;
        assert!(matches!(r, Err(Error::Timeout(d)) if d == Duration::from_millis(300)), "{r:?}");
        assert!(t1.elapsed() < Duration::from_secs(2));
        wait_state(&ctrl, ControllerState::Reconnecting, Duration::from_secs(3)).await;
        proxy.freeze(false);
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(20)).await;
        ns.read(1000, &mut back).await.unwrap();
        check(&back, &data, 1000).unwrap();
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_cut_without_requeue_fails_outstanding_then_reconnects() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 16 << 20)])).await;
        let proxy = Proxy::start(addr).await;
        let o = ConnectOptions {
            kato: Duration::from_secs(2),
            reconnect: ReconnectPolicy {
                delay: Duration::from_millis(100),
                max_delay: Duration::from_millis(100),
                ctrl_loss_timeout: Some(Duration::from_secs(10)),
                requeue: false,
                fast_io_fail_timeout: None,
            },
            ..opts()
        };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let data = vec![0x77u8; 8 << 10];
        ns.write(64, &data).await.unwrap();

        proxy.freeze(true);
        let since = proxy.bytes_from_host();
        let ns2 = ns.clone();
        let outstanding = tokio::spawn(async move {
            let mut rd = vec![0u8; 8 << 10];
            ns2.read(64, &mut rd).await
        });
        // The read's command capsule (72 bytes) is held by the proxy.
        proxy.wait_from_host(since, 72).await;
        // Cut first: nothing held by the frozen proxy may get through.
        proxy.kill_all();
        tokio::time::sleep(Duration::from_millis(20)).await;
        proxy.freeze(false);
        match outstanding.await.unwrap() {
            Err(Error::ConnectionLost) => {}
            other => panic!("expected ConnectionLost, got {other:?}"),
        }
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(10)).await;
        let mut back = vec![0u8; 8 << 10];
        ns.read(64, &mut back).await.unwrap();
        check(&back, &data, 64).unwrap();
        assert!(proxy.accepted.load(Ordering::SeqCst) >= 10, "a second association was built");
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// `host_traddr` and `host_iface` bind every queue's socket, at connect and
/// at each reconnect, as `nvme connect --host-traddr/--host-iface` do: the
/// target sees every connection come from 127.0.0.2 (the proxy records the
/// peers), and `Controller::local_addr` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_traddr_and_host_iface_bind_every_connection() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        let proxy = Proxy::start(addr).await;
        let src: std::net::IpAddr = "127.0.0.2".parse().unwrap();
        let o = ConnectOptions {
            io_queues: 2,
            host_traddr: Some(src),
            host_iface: Some("lo".into()),
            tos: Some(0x28),
            ..opts()
        };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        assert_eq!(ctrl.local_addr().map(|a| a.ip()), Some(src));
        let ns = ctrl.namespace(1).await.unwrap();
        ns.write(0, &[0x5a; BS]).await.unwrap();
        let first = proxy.peers.lock().unwrap().clone();
        assert_eq!(first.len(), 3, "admin and 2 I/O queues: {first:?}");
        proxy.kill_all();
        wait_state(&ctrl, ControllerState::Reconnecting, Duration::from_secs(5)).await;
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(10)).await;
        let mut back = [0u8; BS];
        ns.read(0, &mut back).await.unwrap();
        assert_eq!(back, [0x5a; BS]);
        let peers = proxy.peers.lock().unwrap().clone();
        assert!(peers.len() >= 6, "a second association was built: {peers:?}");
        assert!(peers.iter().all(|p| p.ip() == src), "{peers:?}");
        assert_eq!(ctrl.local_addr().map(|a| a.ip()), Some(src));
        ctrl.shutdown().await.unwrap();

        // Without them the source is the usual 127.0.0.1.
        let before = proxy.peers.lock().unwrap().len();
        let ctrl =
            Controller::connect(proxy.addr, SUBNQN, ConnectOptions { io_queues: 1, ..opts() }).await.unwrap();
        assert_eq!(ctrl.local_addr().map(|a| a.ip().to_string()).as_deref(), Some("127.0.0.1"));
        assert!(proxy.peers.lock().unwrap()[before..].iter().all(|p| p.ip().to_string() == "127.0.0.1"));
        ctrl.shutdown().await.unwrap();

        // An interface the kernel lacks fails the connect at once, by name.
        let o = ConnectOptions { host_iface: Some("nvmeof-none0".into()), ..opts() };
        match Controller::connect(addr, SUBNQN, o).await {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("nvmeof-none0"), "{m}"),
            other => panic!("connected through a missing interface: {other:?}"),
        }
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// With `write_queues`, reads travel on their own queues and every other
/// command on the write queues, as Linux's `nr_write_queues` maps them
/// (write queues first): checked on the wire, per queue and opcode. Without
/// it, or when the controller grants too few queues, every queue takes both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_queues_carry_everything_but_the_reads() {
    bounded(30, async {
        const READ: u8 = 0x02;
        let (server, addr) = start(&config(vec![ram_ns(1, 8 << 20)])).await;
        let proxy = CapsuleLog::start(addr).await;
        // 4 KiB in capsule, 2 MiB split by MDTS, flush, read_buf, batches.
        let workload = |ctrl: Controller| async move {
            let ns = ctrl.namespace(1).await.unwrap();
            let big = vec![0x3c; 2 << 20];
            for i in 0..8u64 {
                ns.write(i * 8, &[i as u8; 4096]).await.unwrap();
                let mut b = [0u8; 4096];
                ns.read(i * 8, &mut b).await.unwrap();
                assert_eq!(b, [i as u8; 4096]);
            }
            ns.write(4096, &big).await.unwrap();
            assert_eq!(&ns.read_bytes(4096, 2 << 20).await.unwrap()[..], &big[..]);
            ns.flush().await.unwrap();
            let mut bufs = [[0u8; 512]; 4];
            let mut reads = ns.batch();
            for (i, b) in bufs.iter_mut().enumerate() {
                reads.read(i as u64 * 8, b, IoFlags::default());
            }
            assert!(reads.submit().await.iter().all(Result::is_ok));
            let mut mixed = ns.batch();
            mixed.write(100, &[1; 512], IoFlags::default());
            mixed.read(0, &mut bufs[0], IoFlags::default());
            assert!(mixed.submit().await.iter().all(Result::is_ok));
            ctrl.shutdown().await.unwrap();
        };
        let run = |o: ConnectOptions| {
            let proxy = &proxy;
            async move {
                proxy.commands.lock().unwrap().clear();
                let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
                let info = ctrl.info();
                workload(ctrl).await;
                let cmds = std::mem::take(&mut *proxy.commands.lock().unwrap());
                (info, cmds)
            }
        };
        // The I/O queues (admin commands left out) that carried reads, or the rest.
        let qids = |cmds: &[(u16, u8)], read: bool| {
            let mut q: Vec<u16> =
                cmds.iter().filter(|c| c.0 != 0 && (c.1 == READ) == read).map(|c| c.0).collect();
            q.sort_unstable();
            q.dedup();
            q
        };

        let (info, cmds) = run(ConnectOptions { io_queues: 2, write_queues: 2, ..opts() }).await;
        assert_eq!((info.io_queues, info.write_queues), (4, 2));
        // The last read is the mixed batch's: it goes with its write, on a
        // write queue. Every other read: qids 3 and 4 only; the rest
        // (writes, flush): 1 and 2 only.
        let last_read = cmds.iter().rposition(|c| c.1 == READ).unwrap();
        assert!(cmds[last_read].0 <= 2, "the mixed batch's read went with its write: {cmds:?}");
        let before: Vec<_> = cmds[..last_read].to_vec();
        assert_eq!(qids(&before, true), [3, 4], "{cmds:?}");
        assert_eq!(qids(&cmds, false), [1, 2], "{cmds:?}");

        // Shared queues: both carry commands.
        let all = |cmds: &[(u16, u8)]| {
            let mut q = [qids(cmds, true), qids(cmds, false)].concat();
            q.sort_unstable();
            q.dedup();
            q
        };
        let (info, cmds) = run(ConnectOptions { io_queues: 2, ..opts() }).await;
        assert_eq!((info.io_queues, info.write_queues), (2, 0));
        assert_eq!(all(&cmds), [1, 2], "{cmds:?}");
        server.shutdown(Duration::from_secs(1)).await;

        // A controller granting only the read queues' count: shared queues.
        let mut cfg = config(vec![ram_ns(1, 8 << 20)]);
        cfg.limits.max_io_queues = 2;
        let (server, addr) = start(&cfg).await;
        let proxy = CapsuleLog::start(addr).await;
        proxy.commands.lock().unwrap().clear();
        let o = ConnectOptions { io_queues: 2, write_queues: 2, ..opts() };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        assert_eq!((ctrl.info().io_queues, ctrl.info().write_queues), (2, 0));
        workload(ctrl).await;
        let cmds = proxy.commands.lock().unwrap().clone();
        assert_eq!(all(&cmds), [1, 2], "{cmds:?}");
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Reconnect attempts back off exponentially: with delay 50 ms doubling to a
/// 400 ms cap over a 1.3 s loss timeout there are about 5 attempts, where a
/// fixed 50 ms delay would make ~25.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconnect_attempts_back_off_exponentially() {
    bounded(30, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 16 << 20)])).await;
        let o = ConnectOptions {
            kato: Duration::from_secs(2),
            reconnect: ReconnectPolicy {
                delay: Duration::from_millis(50),
                max_delay: Duration::from_millis(400),
                ctrl_loss_timeout: Some(Duration::from_millis(1300)),
                requeue: false,
                fast_io_fail_timeout: None,
            },
            ..opts()
        };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        // Replace the target by a listener that accepts and drops every
        // connection: each reconnect attempt is one accept.
        server.shutdown(Duration::from_secs(1)).await;
        let l = tokio::net::TcpListener::bind(addr).await.unwrap();
        let count = Arc::new(AtomicU64::new(0));
        let c2 = count.clone();
        let acceptor = tokio::spawn(async move {
            while let Ok((s, _)) = l.accept().await {
                c2.fetch_add(1, Ordering::SeqCst);
                drop(s);
            }
        });
        wait_state(&ctrl, ControllerState::Failed, Duration::from_secs(5)).await;
        acceptor.abort();
        let attempts = count.load(Ordering::SeqCst);
        assert!((3..=7).contains(&attempts), "{attempts} reconnect connections; expected ~5 with backoff");
    })
    .await;
}

// ---------------------------------------------------------------------------
// Status mapping and discovery.

fn nvme_status(r: Result<(), Error>) -> Status {
    match r {
        Err(Error::Nvme { status, .. }) => status,
        other => panic!("expected an NVMe status error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nvme_status_errors_are_mapped() {
    bounded(20, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 4 << 20), ram_ns(2, 1 << 20)])).await;
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let end = ns.blocks();
        let mut buf = vec![0u8; 2 * BS];

        // LBA out of range: SCT 0, SC 0x80.
        for (lba, len) in [(end, BS), (end - 1, 2 * BS)] {
            let st = nvme_status(ns.read(lba, &mut buf[..len]).await);
            assert_eq!(st.code(), Status::LBA_RANGE, "read at {lba}: {st}");
            assert_eq!(st.sct().0, 0);
            assert_eq!(st.sc(), 0x80);
            assert!(st.dnr());
            let st = nvme_status(ns.write(lba, &buf[..len]).await);
            assert_eq!(st.code(), Status::LBA_RANGE, "write at {lba}: {st}");
        }
        match ns.read(end, &mut buf[..BS]).await {
            Err(e @ Error::Nvme { .. }) => {
                assert!(e.is_permanent());
                let Error::Nvme { command, .. } = e else { unreachable!() };
                assert_eq!(command.opcode, 0x02);
                assert_eq!(command.nsid, 1);
                assert!(command.qid >= 1);
            }
            other => panic!("{other:?}"),
        }

        // A raw I/O command with a bogus NSID: Invalid Namespace or Format (0x0B).
        let mut sqe = Sqe::new(0x02);
        sqe.set_nsid(0xDEAD).set_slba(0).set_cdw(12, 0);
        let st = match ctrl.io_command(sqe, Payload::Read(&mut buf[..BS])).await {
            Err(Error::Nvme { status, .. }) => status,
            other => panic!("{other:?}"),
        };
        assert_eq!(st.code(), Status::INVALID_NS, "{st}");
        assert_eq!(st.sc(), 0x0B);

        // A handle for a namespace that is then removed from the target.
        let ns2 = ctrl.namespace(2).await.unwrap();
        ns2.write(0, &buf[..BS]).await.unwrap();
        assert!(server.target.subsystem(SUBNQN).unwrap().remove_namespace(2));
        let st = nvme_status(ns2.read(0, &mut buf[..BS]).await);
        assert_eq!(st.code(), Status::INVALID_NS, "{st}");
        let st = nvme_status(ns2.write(0, &buf[..BS]).await);
        assert_eq!(st.code(), Status::INVALID_NS, "{st}");
        assert!(ctrl.namespace(2).await.is_err());

        // Compare: match → true, mismatch → false (not an error).
        let data: Vec<u8> = (0..4 * BS).map(|i| (i * 7 % 251) as u8).collect();
        ns.write(100, &data).await.unwrap();
        assert!(ns.compare(100, &data).await.unwrap());
        let mut other = data.clone();
        other[3 * BS + 17] ^= 1;
        assert!(!ns.compare(100, &other).await.unwrap());
        // Compare beyond the end is still an error.
        let st = nvme_status(ns.compare(end, &data[..BS]).await.map(drop));
        assert_eq!(st.code(), Status::LBA_RANGE);

        // The queues survive all of this.
        let mut back = vec![0u8; 4 * BS];
        ns.read(100, &mut back).await.unwrap();
        check(&back, &data, 100).unwrap();
        assert_eq!(ctrl.state(), ControllerState::Live);
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_lists_our_subsystem() {
    bounded(20, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        let log = discover(addr, ConnectOptions { host: Some(host()), ..ConnectOptions::discovery() })
            .await
            .expect("discovery");
        let subs: Vec<_> = nvme_subsystems(&log).collect();
        assert_eq!(subs.len(), 1, "{:?}", log.entries);
        let e = subs[0];
        assert_eq!(e.subnqn, SUBNQN);
        assert_eq!(e.traddr, "127.0.0.1");
        assert_eq!(e.trsvcid, addr.port().to_string());
        // The subsystem it names is connectable from the entry, with SQ flow control
        // disabled as its TREQ allows (reads then end with a SUCCESS-flagged C2HData).
        assert_eq!(e.treq & TREQ_DISABLE_SQFLOW, TREQ_DISABLE_SQFLOW);
        let ctrl = connect_entry(e, opts()).await.unwrap();
        assert!(!ctrl.info().discovery);
        let ns = ctrl.namespace(1).await.unwrap();
        let data = vec![0x5A; 8 * BS];
        ns.write(8, &data).await.unwrap();
        let mut back = vec![0u8; 8 * BS];
        ns.read(8, &mut back).await.unwrap();
        assert_eq!(back, data);
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_not_allowed_is_refused_with_a_connect_status() {
    bounded(20, async {
        let mut cfg = config(vec![ram_ns(1, 1 << 20)]);
        cfg.subsystems[0].allowed_hosts = Some(vec![host().nqn]);
        let (server, addr) = start(&cfg).await;
        let stranger = HostIdentity::from_id(*b"e2e-stranger-001");
        let o = ConnectOptions { host: Some(stranger), ..opts() };
        match Controller::connect(addr, SUBNQN, o).await {
            Err(Error::Nvme { status, command, .. }) => {
                assert_eq!(status.code(), Status::CONNECT_INVALID_HOST, "{status}");
                assert_eq!(command.fctype, Some(0x01));
            }
            other => panic!("expected a Connect status error, got {other:?}"),
        }
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.expect("the allowed host connects");
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}
