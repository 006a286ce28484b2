//! Precise waits for `--rate`: tokio's timer has millisecond granularity, far
//! coarser than the gaps of a rate-limited run (500 µs at 2000 IOPS). On
//! Linux each slot arms a `timerfd` (no timer slack, nanosecond resolution)
//! registered with the tokio reactor, so a slot wakes within microseconds of
//! its scheduled send time without spinning. Elsewhere: tokio's timer for
//! the bulk, then yielding until the instant passes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The last stretch of every wait is spent yielding to the runtime instead of
/// sleeping: waking a sleeping thread (a halted vCPU in particular) takes
/// 20–100 µs, which would be added to the measured latency.
const SPIN_BELOW: Duration = Duration::from_micros(150);
/// Longest single wait, so that a stop request is noticed.
const MAX_NAP: Duration = Duration::from_millis(100);

/// A per-slot timer with sub-millisecond precision.
pub struct Pacer {
    #[cfg(target_os = "linux")]
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

impl Default for Pacer {
    fn default() -> Self {
        Self::new()
    }
}

impl Pacer {
    /// A new timer (falls back to tokio's timer if no timerfd can be made).
    pub fn new() -> Self {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::{FromRawFd, OwnedFd};
            // SAFETY: plain syscall; the returned descriptor is owned below.
            let raw = unsafe {
                libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC)
            };
            let fd = (raw >= 0)
                // SAFETY: `raw` is a fresh descriptor nobody else owns.
                .then(|| unsafe { OwnedFd::from_raw_fd(raw) })
                .and_then(|fd| {
                    // SAFETY: the AsyncFd owns the descriptor, which stays open (and the same
                    // timer) until the AsyncFd is dropped.
                    unsafe {
                        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
                    }
                    .ok()
                });
            Self { fd }
        }
        #[cfg(not(target_os = "linux"))]
        Self {}
    }

    /// Waits until `t`; returns false (early) when `stop` is set.
    pub async fn wait_until(&mut self, t: Instant, stop: &AtomicBool) -> bool {
        loop {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= t {
                return true;
            }
            let rem = t - now;
            if rem < SPIN_BELOW {
                tokio::task::yield_now().await;
                continue;
            }
            self.nap((rem - SPIN_BELOW).min(MAX_NAP)).await;
        }
    }

    #[cfg(target_os = "linux")]
    async fn nap(&mut self, d: Duration) {
        use std::os::fd::AsRawFd;
        let Some(fd) = self.fd.as_ref() else {
            return fallback_nap(d).await;
        };
        // An all-zero `it_value` disarms the timer instead of arming it
        // (timerfd_settime(2)): the wait below would then never end. A nap of
        // zero (exactly SPIN_BELOW left in `wait_until`) becomes one of 1 ns.
        let d = d.max(Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as _ },
        };
        // SAFETY: valid descriptor and pointers to initialised structures.
        if unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) } != 0 {
            return fallback_nap(d).await;
        }
        loop {
            let Ok(mut guard) = fd.readable().await else {
                return fallback_nap(d).await;
            };
            let mut n = 0u64;
            // SAFETY: reads 8 bytes into a u64 we own.
            let r = unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
            if r == 8 {
                return;
            }
            guard.clear_ready();
        }
    }

    #[cfg(not(target_os = "linux"))]
    async fn nap(&mut self, d: Duration) {
        fallback_nap(d).await
    }
}

/// tokio's timer (1 ms granularity) up to 1.5 ms before the deadline, then yields.
async fn fallback_nap(d: Duration) {
    if d > Duration::from_micros(2500) {
        tokio::time::sleep(d - Duration::from_micros(1500)).await;
    } else {
        tokio::task::yield_now().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_nap_of_zero_returns() {
        // `wait_until` naps for `remaining - SPIN_BELOW`, which is zero when
        // exactly SPIN_BELOW remains; an all-zero `it_value` disarms a timerfd
        // (timerfd_settime(2)), and the slot then waited forever.
        let mut p = Pacer::new();
        let r = tokio::time::timeout(Duration::from_secs(2), p.nap(Duration::ZERO)).await;
        assert!(r.is_ok(), "nap(0) did not return");
        // The timer still works afterwards.
        let r = tokio::time::timeout(Duration::from_secs(2), p.nap(Duration::from_micros(200))).await;
        assert!(r.is_ok(), "nap(200 µs) did not return");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn wakes_close_to_the_deadline() {
        let mut p = Pacer::new();
        let stop = AtomicBool::new(false);
        let mut late = Vec::with_capacity(51);
        for _ in 0..51 {
            let t = Instant::now() + Duration::from_micros(300);
            assert!(p.wait_until(t, &stop).await);
            late.push(Instant::now() - t);
        }
        // The median, not the worst: on a shared 2-core machine any one wait
        // can lose the CPU for a time slice. Typically a few µs.
        late.sort();
        assert!(late[25] < Duration::from_millis(2), "{late:?}");
    }
}
