//! Per-namespace rate limits: I/O commands per second and bytes per second
//! (SPDK's bdev QoS, `bdev_set_qos_limit --rw_ios_per_sec
//! --rw_mbytes_per_sec`; nvmet has none), so one tenant's namespace cannot
//! take a shared target's whole throughput.
//!
//! Each limit is a generic cell rate algorithm (GCRA) over a theoretical
//! arrival time kept in one atomic: a command reserves its cost (1 / rate
//! seconds per command, `len` / rate per byte) from all queues without a
//! lock and learns how long to wait before it runs. A namespace idle for
//! a while may run [`BURST`] worth of its rate at once, as SPDK's limits
//! are per 1 ms time slice. A command that must wait stays in its queue's
//! slot and is woken through the queue's completion channel
//! ([`crate::cmd::io`]); nothing is dropped or refused.
//!
//! Without limits (the default), the I/O path reads one flag.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How much of its rate an idle namespace may use at once.
pub const BURST: Duration = Duration::from_millis(1);

/// A namespace's limits; `None`: unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QosLimits {
    /// I/O commands per second.
    pub iops: Option<u64>,
    /// Bytes of data per second, reads and writes together.
    pub bytes_per_sec: Option<u64>,
}

impl QosLimits {
    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        self.iops.is_some() || self.bytes_per_sec.is_some()
    }
}

impl std::fmt::Display for QosLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.iops {
            Some(n) => write!(f, "{n} IOPS")?,
            None => f.write_str("unlimited IOPS")?,
        }
        match self.bytes_per_sec {
            Some(n) => write!(f, ", {n} B/s"),
            None => f.write_str(", unlimited bandwidth"),
        }
    }
}

/// Nanoseconds since the first call (a monotonic clock all queues share).
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One rate: units per second, and the theoretical arrival time of the
/// next unit.
#[derive(Default)]
struct Gcra {
    /// Units per second; 0: unlimited.
    rate: AtomicU64,
    /// Nanoseconds (on [`now_ns`]'s clock) by which everything reserved so
    /// far has its share of the rate.
    tat: AtomicU64,
}

impl Gcra {
    /// Reserves `units` at `now`; returns the nanoseconds to wait before
    /// they may go (0: at once).
    fn reserve(&self, units: u64, now: u64) -> u64 {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 || units == 0 {
            return 0;
        }
        let cost = ((units as u128 * 1_000_000_000) / rate as u128).min(u64::MAX as u128) as u64;
        let tolerance = BURST.as_nanos() as u64;
        let mut start = now;
        let _ = self.tat.fetch_update(Ordering::AcqRel, Ordering::Acquire, |tat| {
            start = tat.max(now);
            Some(start.saturating_add(cost))
        });
        // The units may go once the time reserved ahead of them is within the burst.
        start.saturating_sub(tolerance).saturating_sub(now)
    }
}

/// The limits of one namespace, changed in place by a reload.
#[derive(Default)]
pub struct Qos {
    active: AtomicBool,
    iops: Gcra,
    bytes: Gcra,
}

impl std::fmt::Debug for Qos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Qos({})", self.limits())
    }
}

impl Qos {
    /// Limits as given.
    pub fn new(limits: QosLimits) -> Self {
        let q = Self::default();
        q.set(limits);
        q
    }

    /// Whether any limit applies (the I/O path's one check).
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// The limits now.
    pub fn limits(&self) -> QosLimits {
        let get = |g: &Gcra| Some(g.rate.load(Ordering::Relaxed)).filter(|&r| r > 0);
        QosLimits { iops: get(&self.iops), bytes_per_sec: get(&self.bytes) }
    }

    /// Replaces the limits; returns whether they changed. Commands already
    /// waiting keep the time they were given.
    pub fn set(&self, limits: QosLimits) -> bool {
        let changed = limits != self.limits();
        self.iops.rate.store(limits.iops.unwrap_or(0), Ordering::Relaxed);
        self.bytes.rate.store(limits.bytes_per_sec.unwrap_or(0), Ordering::Relaxed);
        self.active.store(limits.any(), Ordering::Relaxed);
        changed
    }

    /// Reserves one command moving `bytes`: how long it must wait before it
    /// runs (`None`: it runs now).
    pub fn reserve(&self, bytes: u64) -> Option<Duration> {
        self.reserve_at(bytes, now_ns())
    }

    fn reserve_at(&self, bytes: u64, now: u64) -> Option<Duration> {
        let wait = self.iops.reserve(1, now).max(self.bytes.reserve(bytes, now));
        (wait > 0).then(|| Duration::from_nanos(wait))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn iops_limit_spaces_commands_after_the_burst() {
        // 10000 IOPS: 100 us a command, a burst of 1 ms = 10 commands.
        let q = Qos::new(QosLimits { iops: Some(10_000), bytes_per_sec: None });
        let now = 5 * MS;
        let waits: Vec<u64> =
            (0..14).map(|_| q.reserve_at(0, now).map_or(0, |d| d.as_nanos() as u64)).collect();
        assert_eq!(&waits[..11], &[0; 11], "the burst: 1 ms of the rate, and the one it ends on");
        assert_eq!(&waits[11..], &[100_000, 200_000, 300_000]);
        // Idle for a second: a full burst again, no debt carried.
        assert_eq!(q.reserve_at(0, now + 1000 * MS), None);
    }

    #[test]
    fn bandwidth_limit_counts_bytes_and_the_longer_wait_wins() {
        // 1 MB/s and 1000 IOPS: a 100 KB command costs 100 ms of bandwidth.
        let q = Qos::new(QosLimits { iops: Some(1000), bytes_per_sec: Some(1_000_000) });
        let now = 10 * MS;
        assert_eq!(q.reserve_at(100_000, now), None);
        assert_eq!(q.reserve_at(100_000, now), Some(Duration::from_millis(99)));
        // A command of no data waits for IOPS only: the third of this
        // millisecond, 1 ms past the burst.
        assert_eq!(q.reserve_at(0, now), Some(Duration::from_millis(1)));
        assert_eq!(q.reserve_at(0, now + 50 * MS), None);
    }

    #[test]
    fn limits_are_replaced_in_place() {
        let q = Qos::default();
        assert!(!q.active());
        assert!(q.set(QosLimits { iops: Some(5), bytes_per_sec: None }));
        assert!(q.active());
        assert!(!q.set(QosLimits { iops: Some(5), bytes_per_sec: None }), "unchanged");
        assert_eq!(q.limits().to_string(), "5 IOPS, unlimited bandwidth");
        assert!(q.set(QosLimits::default()));
        assert!(!q.active());
        assert_eq!(q.reserve_at(1 << 20, 0), None, "unlimited");
    }
}
