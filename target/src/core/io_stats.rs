//! What the SMART / Health log counts of a namespace's I/O: host read and
//! write commands and the data they moved.
//!
//! nvmet fills those SMART fields from the block device's `part_stat`
//! (`nvmet_get_smart_log_nsid`; zero for file namespaces). Here every
//! namespace counts what hosts asked of it, whatever its backend. The
//! counters are sharded by thread: each of the first threads that count owns
//! a cache line in every namespace and adds to it with a plain load and
//! store (it is the line's only writer), so counting costs the data path
//! neither a locked instruction nor a cache-line transfer. Threads past
//! those share the last line with atomic adds. A SMART read sums the lines.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Shards per namespace: the first `SHARDS - 1` threads own one each, the
/// rest share the last.
const SHARDS: usize = 16;
const SHARED: usize = SHARDS - 1;

/// One thread's counters, alone on its cache line.
#[derive(Default)]
#[repr(align(64))]
struct Shard {
    read_cmds: AtomicU64,
    read_bytes: AtomicU64,
    write_cmds: AtomicU64,
    write_bytes: AtomicU64,
}

/// A namespace's I/O counters.
pub struct IoStats {
    shards: [Shard; SHARDS],
}

/// Totals of one namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoTotals {
    /// Read and Compare commands (SMART Host Read Commands).
    pub read_cmds: u64,
    /// Bytes those commands read.
    pub read_bytes: u64,
    /// Write, Write Zeroes and Copy commands (SMART Host Write Commands).
    pub write_cmds: u64,
    /// Bytes the Write commands carried (Write Zeroes and Copy carry none).
    pub write_bytes: u64,
}

impl IoTotals {
    /// SMART Data Units: thousands of 512-byte units, rounded up (NVMe base
    /// specification, SMART / Health Information log bytes 32–63).
    pub fn data_units(bytes: u64) -> u128 {
        (bytes as u128).div_ceil(512).div_ceil(1000)
    }
}

thread_local! {
    /// This thread's shard, handed out on first use: its own while there are
    /// some left, else [`SHARED`].
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT.fetch_add(1, Ordering::Relaxed).min(SHARED));
        }
        s.get()
    })
}

/// Adds `n` to `c`: a plain load and store on an owned shard (this thread is
/// its only writer), an atomic add on the shared one.
#[inline]
fn add(shard: usize, c: &AtomicU64, n: u64) {
    if shard == SHARED {
        c.fetch_add(n, Ordering::Relaxed);
    } else {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
}

impl Default for IoStats {
    fn default() -> Self {
        Self { shards: std::array::from_fn(|_| Shard::default()) }
    }
}

impl IoStats {
    /// A read (or compare) of `bytes`.
    #[inline]
    pub fn read(&self, bytes: u64) {
        let i = shard_index();
        add(i, &self.shards[i].read_cmds, 1);
        add(i, &self.shards[i].read_bytes, bytes);
    }

    /// A write of `bytes` (0 for Write Zeroes and Copy).
    #[inline]
    pub fn write(&self, bytes: u64) {
        let i = shard_index();
        add(i, &self.shards[i].write_cmds, 1);
        add(i, &self.shards[i].write_bytes, bytes);
    }

    /// The counts so far.
    pub fn totals(&self) -> IoTotals {
        let mut t = IoTotals::default();
        for s in &self.shards {
            t.read_cmds += s.read_cmds.load(Ordering::Relaxed);
            t.read_bytes += s.read_bytes.load(Ordering::Relaxed);
            t.write_cmds += s.write_cmds.load(Ordering::Relaxed);
            t.write_bytes += s.write_bytes.load(Ordering::Relaxed);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_units_are_thousands_of_512_bytes_rounded_up() {
        assert_eq!(IoTotals::data_units(0), 0);
        assert_eq!(IoTotals::data_units(1), 1);
        assert_eq!(IoTotals::data_units(512_000), 1);
        assert_eq!(IoTotals::data_units(512_001), 2);
        assert_eq!(IoTotals::data_units(4096 * 1000), 8);
    }

    #[test]
    fn threads_add_up_exactly() {
        let s = std::sync::Arc::new(IoStats::default());
        // More threads than shards: some own one, the rest share the last.
        let threads: Vec<_> = (0..SHARDS + 3)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        s.read(4096);
                        s.write(512);
                    }
                    s.write(0);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let n = (SHARDS + 3) as u64;
        assert_eq!(
            s.totals(),
            IoTotals {
                read_cmds: 1000 * n,
                read_bytes: 4096 * 1000 * n,
                write_cmds: 1001 * n,
                write_bytes: 512 * 1000 * n
            }
        );
    }
}
