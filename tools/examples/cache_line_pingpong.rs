//! Round trip of one cache line between two CPU cores, in nanoseconds.
//!
//! `bench/run.sh` runs it between the target's core and the probe's core in
//! each round. On a virtual machine it shows where the hypervisor has put the
//! two vCPUs, which moves every loopback figure: on the AMD EPYC VM of
//! docs/benchmarks-amd-epyc.md a line went back and forth in ~25 ns (SMT
//! siblings), ~55 ns (one core complex) or 310–370 ns (no shared last-level
//! cache), changing seconds apart, and 128 KiB polled reads ran at 2.1–4.0
//! GB/s in the far phases against 4.2–4.8 GB/s in the near ones.
//!
//! Usage: `cache_line_pingpong [CORE_A CORE_B [MILLISECONDS]]` (defaults 0 1 200).
//! Prints the median over ten slices of the run of the mean round trip in ns.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The bounced line, alone in its cache line (and the adjacent-line prefetcher's pair).
#[repr(align(128))]
struct Line(AtomicU32);

const IDLE: u32 = 0;
const PING: u32 = 1;
const STOP: u32 = 2;

/// How long either side waits for the other before giving up.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

fn pin(core: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET stays within it for
    // core < CPU_SETSIZE (checked); sched_setaffinity reads `size_of` bytes.
    unsafe {
        if core >= libc::CPU_SETSIZE as usize {
            return false;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Spins until `line` leaves `from`; `None` when the peer took longer than [`PEER_TIMEOUT`].
fn wait_change(line: &Line, from: u32) -> Option<u32> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let v = line.0.load(Ordering::Acquire);
        if v != from {
            return Some(v);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(4096) && start.elapsed() > PEER_TIMEOUT {
            return None;
        }
        // No `spin_loop()` (PAUSE): it delays noticing the change and added
        // ~13 ns to a 60 ns round trip here; the spin lasts 200 ms.
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, d: u64| args.get(i).map_or(Ok(d), |s| s.parse::<u64>());
    let (Ok(a), Ok(b), Ok(ms)) = (num(0, 0), num(1, 1), num(2, 200)) else {
        eprintln!("usage: cache_line_pingpong [CORE_A CORE_B [MILLISECONDS]]");
        return ExitCode::from(2);
    };
    let ms = ms.clamp(10, 60_000);
    let line: &'static Line = Box::leak(Box::new(Line(AtomicU32::new(IDLE))));
    let peer = std::thread::spawn(move || {
        if !pin(b as usize) {
            return false;
        }
        // Answer every ping until told to stop (or the pinging side is gone).
        loop {
            match wait_change(line, IDLE) {
                Some(PING) => line.0.store(IDLE, Ordering::Release),
                _ => return true,
            }
        }
    });
    if !pin(a as usize) {
        eprintln!("cache_line_pingpong: cannot run on core {a}");
        return ExitCode::FAILURE;
    }
    let slice = Duration::from_millis(ms) / 10;
    let mut means = Vec::with_capacity(10);
    'slices: for _ in 0..10 {
        let start = Instant::now();
        let mut trips = 0u64;
        while !trips.is_multiple_of(1024) || start.elapsed() < slice {
            line.0.store(PING, Ordering::Release);
            if wait_change(line, PING).is_none() {
                break 'slices;
            }
            trips += 1;
        }
        means.push(start.elapsed().as_nanos() as f64 / trips as f64);
    }
    line.0.store(STOP, Ordering::Release);
    let peer_ok = peer.join().unwrap_or(false);
    if !peer_ok || means.len() < 10 {
        eprintln!("cache_line_pingpong: core {b} did not answer (not allowed there, or not scheduled)");
        return ExitCode::FAILURE;
    }
    means.sort_by(f64::total_cmp);
    println!("{:.0}", (means[4] + means[5]) / 2.0);
    ExitCode::SUCCESS
}
