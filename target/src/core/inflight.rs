//! Commands in flight per host on one namespace with reservations, for
//! Preempt and Abort (nvmet's per-controller `pc_ref` percpu references,
//! `nvmet_pr_set_ctrl_to_abort` and `nvmet_pr_do_abort`).
//!
//! Every I/O command of such a namespace holds an [`InflightGuard`] from its
//! parse step until it completes. A Preempt and Abort fences the preempted
//! hosts off (their new commands fail, [`InflightGuard::fenced`]) and
//! completes once their guards taken before the fence are all gone.
//!
//! The counts are per queue, as nvmet's are per CPU: a queue's commands
//! only touch its own counter (`QueueInflight`, found through the queue's
//! [`InflightCache`] without a lock) and read the host's fence flag, which
//! only changes during a Preempt and Abort. No cache line moves between
//! the cores of a host's queues on the I/O path; the registry's lock is
//! taken once per queue and namespace, and by Preempt and Abort.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::reservation::HostId;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Preempt and Abort waits in progress for one host: its new commands fail meanwhile.
#[derive(Debug, Default)]
struct HostFence {
    fenced: AtomicUsize,
}

/// The commands of one queue (of one host) on one namespace.
struct QueueInflight {
    count: AtomicUsize,
    fence: Arc<HostFence>,
    /// Preempt and Abort waits told when `count` drops to 0.
    waiters: Mutex<Vec<Arc<AbortWait>>>,
}

impl QueueInflight {
    /// One command fewer; the last one out tells the waits.
    fn leave(&self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        // Under the lock, so a wait registering now either sees the count
        // at 0 or is taken here.
        let waiters = {
            let mut w = lock(&self.waiters);
            if self.count.load(Ordering::SeqCst) != 0 {
                return;
            }
            std::mem::take(&mut *w)
        };
        for w in waiters {
            w.queue_drained();
        }
    }
}

/// One Preempt and Abort waiting for its preempted hosts' commands.
struct AbortWait {
    /// Queues with commands still in flight (and one for the set-up).
    remaining: AtomicUsize,
    fences: Vec<Arc<HostFence>>,
    done: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl AbortWait {
    fn queue_drained(&self) {
        if self.remaining.fetch_sub(1, Ordering::SeqCst) != 1 {
            return;
        }
        for f in &self.fences {
            f.fenced.fetch_sub(1, Ordering::SeqCst);
        }
        if let Some(done) = lock(&self.done).take() {
            done();
        }
    }
}

/// Held by one I/O command of a namespace with reservations from its
/// parse step until it completes (see [`InflightRegistry::enter`]).
pub struct InflightGuard(Arc<QueueInflight>);

impl std::fmt::Debug for InflightGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("InflightGuard").field(&self.0.count).finish()
    }
}

impl InflightGuard {
    /// A Preempt and Abort waits for this host's commands: this one must
    /// not run (nvmet answers Internal Error without DNR; the host retries
    /// it, and it then meets the new reservation).
    pub fn fenced(&self) -> bool {
        self.0.fence.fenced.load(Ordering::SeqCst) > 0
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.leave();
    }
}

/// What one queue's host may do on one namespace, as computed at a
/// version of its reservation state: (version, may read, may write).
pub type AccessMemo = Option<(u64, bool, bool)>;

/// One queue's counters, one per namespace with reservations it used
/// (by [`InflightRegistry`] identity), each with the queue's [`AccessMemo`].
/// Kept by the queue for its lifetime.
#[derive(Default)]
pub struct InflightCache(Vec<(u64, Arc<QueueInflight>, AccessMemo)>);

impl std::fmt::Debug for InflightCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InflightCache").field("namespaces", &self.0.len()).finish()
    }
}

#[derive(Default)]
struct HostEntry {
    fence: Arc<HostFence>,
    queues: Vec<Weak<QueueInflight>>,
}

/// The in-flight counters of one namespace.
pub struct InflightRegistry {
    /// Tells this namespace's counters apart in a queue's cache (a replaced
    /// namespace gets a new registry, and new counters).
    id: u64,
    hosts: Mutex<HashMap<HostId, HostEntry>>,
}

impl Default for InflightRegistry {
    fn default() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self { id: NEXT.fetch_add(1, Ordering::Relaxed), hosts: Mutex::default() }
    }
}

impl std::fmt::Debug for InflightRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InflightRegistry").field("id", &self.id).finish_non_exhaustive()
    }
}

impl InflightRegistry {
    /// Counts one command of `host`, sent on the queue owning `cache`, in
    /// flight until the guard is dropped (nvmet `nvmet_pr_get_ns_pc_ref`).
    /// Taken before the reservation check, so a command checked before a
    /// preemption is always counted when the Preempt and Abort looks;
    /// [`InflightGuard::fenced`] after the check says whether such a wait is
    /// on. A queue belongs to one host: `cache` must always come with the
    /// same `host`. Also returns the queue's [`AccessMemo`] for the namespace.
    pub fn enter<'c>(
        &self,
        host: &HostId,
        cache: &'c mut InflightCache,
    ) -> (InflightGuard, &'c mut AccessMemo) {
        let i = match cache.0.iter().position(|(id, ..)| *id == self.id) {
            Some(i) => i,
            None => {
                let mut hosts = lock(&self.hosts);
                let e = hosts.entry(*host).or_default();
                e.queues.retain(|w| w.strong_count() > 0);
                let q = Arc::new(QueueInflight {
                    count: AtomicUsize::new(0),
                    fence: e.fence.clone(),
                    waiters: Mutex::default(),
                });
                e.queues.push(Arc::downgrade(&q));
                cache.0.push((self.id, q, None));
                cache.0.len() - 1
            }
        };
        let (_, q, memo) = &mut cache.0[i];
        // Counted first, the fence looked at later; `abort` does the
        // opposite: one of the two sees the other (sequentially consistent).
        q.count.fetch_add(1, Ordering::SeqCst);
        (InflightGuard(q.clone()), memo)
    }

    /// The wait of a Preempt and Abort (nvmet `nvmet_pr_set_ctrl_to_abort`
    /// and `nvmet_pr_do_abort`): fences `hosts` off (their new commands
    /// fail) and calls `done` once none of their commands is in flight,
    /// at once if none is, else from the completion of the last one; then
    /// the fence is lifted. No time limit, as in nvmet: a closing
    /// connection waits for its commands for a while (`transport::tcp`),
    /// then frees them. Returns how many queues had commands in flight.
    pub fn abort(&self, hosts: &[HostId], done: Box<dyn FnOnce() + Send>) -> usize {
        let mut fences = Vec::with_capacity(hosts.len());
        let mut queues = Vec::new();
        {
            // Under the registry lock: a queue that registers later sees the fence.
            let mut map = lock(&self.hosts);
            for h in hosts {
                let e = map.entry(*h).or_default();
                e.fence.fenced.fetch_add(1, Ordering::SeqCst);
                fences.push(e.fence.clone());
                queues.extend(e.queues.iter().filter_map(Weak::upgrade));
            }
        }
        let wait = Arc::new(AbortWait {
            remaining: AtomicUsize::new(queues.len() + 1),
            fences,
            done: Mutex::new(Some(done)),
        });
        let mut busy = 0;
        for q in &queues {
            let mut w = lock(&q.waiters);
            if q.count.load(Ordering::SeqCst) == 0 {
                drop(w);
                wait.queue_drained();
            } else {
                w.push(wait.clone());
                busy += 1;
            }
        }
        wait.queue_drained();
        busy
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// The guard alone.
    fn enter(r: &InflightRegistry, h: &HostId, c: &mut InflightCache) -> InflightGuard {
        r.enter(h, c).0
    }

    const A: HostId = [0xA; 16];
    const B: HostId = [0xB; 16];
    const C: HostId = [0xC; 16];
    const D: HostId = [0xD; 16];

    /// A flag set by the `done` callback of [`InflightRegistry::abort`].
    fn done_flag() -> (Arc<AtomicBool>, Box<dyn FnOnce() + Send>) {
        let flag = Arc::new(AtomicBool::new(false));
        let f = flag.clone();
        (flag, Box::new(move || f.store(true, Ordering::SeqCst)))
    }

    #[test]
    fn abort_waits_for_the_commands_in_flight() {
        let r = InflightRegistry::default();
        // One queue of A, two of B (another path), one of D.
        let (mut qa, mut qb1, mut qb2, mut qd) = Default::default();
        // Nothing in flight: done at once, and nothing stays fenced.
        let (done, cb) = done_flag();
        assert_eq!(r.abort(&[A], cb), 0);
        assert!(done.load(Ordering::SeqCst));
        assert!(!enter(&r, &A, &mut qa).fenced());
        let (a1, a2) = (enter(&r, &A, &mut qa), enter(&r, &A, &mut qa));
        let (b1, b2) = (enter(&r, &B, &mut qb1), enter(&r, &B, &mut qb2));
        let (done, cb) = done_flag();
        assert_eq!(r.abort(&[A, B, C], cb), 3, "A's queue and B's two");
        assert!(enter(&r, &A, &mut qa).fenced() && enter(&r, &B, &mut qb2).fenced());
        let mut qc = InflightCache::default();
        assert!(enter(&r, &C, &mut qc).fenced(), "a queue that comes after the fence");
        assert!(!enter(&r, &D, &mut qd).fenced(), "only the preempted hosts");
        drop(a1);
        drop(b1);
        assert!(!done.load(Ordering::SeqCst), "commands of A and B are still in flight");
        drop(b2);
        // A command refused while fenced does not count as drained early.
        drop(enter(&r, &A, &mut qa));
        assert!(!done.load(Ordering::SeqCst));
        drop(a2);
        assert!(done.load(Ordering::SeqCst));
        assert!(!enter(&r, &A, &mut qa).fenced() && !enter(&r, &B, &mut qb1).fenced());
        assert!(!enter(&r, &C, &mut qc).fenced());
    }

    #[test]
    fn aborts_overlap() {
        let r = InflightRegistry::default();
        let (mut qa, mut qb) = (InflightCache::default(), InflightCache::default());
        let a1 = enter(&r, &A, &mut qa);
        let b1 = enter(&r, &B, &mut qb);
        let (first, cb) = done_flag();
        r.abort(&[A], cb);
        let (second, cb) = done_flag();
        r.abort(&[A, B], cb);
        drop(a1);
        assert!(first.load(Ordering::SeqCst));
        assert!(!second.load(Ordering::SeqCst));
        assert!(enter(&r, &A, &mut qa).fenced(), "the second abort still fences A");
        drop(b1);
        assert!(second.load(Ordering::SeqCst));
        assert!(!enter(&r, &A, &mut qa).fenced());
    }

    #[test]
    fn a_closed_queue_is_forgotten() {
        let r = InflightRegistry::default();
        for _ in 0..3 {
            let mut q = InflightCache::default();
            drop(enter(&r, &A, &mut q));
        }
        let (done, cb) = done_flag();
        r.abort(&[A], cb);
        assert!(done.load(Ordering::SeqCst));
        let mut q = InflightCache::default();
        drop(enter(&r, &A, &mut q));
        assert_eq!(lock(&r.hosts)[&A].queues.len(), 1, "dead queues pruned");
    }

    #[test]
    fn namespaces_are_told_apart() {
        let (r1, r2) = (InflightRegistry::default(), InflightRegistry::default());
        let mut q = InflightCache::default();
        let g1 = enter(&r1, &A, &mut q);
        let (done, cb) = done_flag();
        r2.abort(&[A], cb);
        assert!(done.load(Ordering::SeqCst), "A has nothing in flight on the other namespace");
        drop(g1);
    }
}
