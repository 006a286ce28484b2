//! One namespace's Compare and Write fused operations, one at a time.
//!
//! A fused Compare and Write reads the blocks, compares them with the
//! host's data and writes only on a match; two of them on the same blocks
//! must not interleave (the second's read between the first's read and
//! write), or both hosts of an ATS lock (VMware's VMFS, which needs fused
//! Compare and Write of an NVMe datastore) believe they won it. Like the
//! Linux SCSI target's COMPARE AND WRITE (`sbc_compare_and_write`, which
//! holds the device's `caw_sem` from its read to its write), the operations
//! of one namespace run one after another, from every queue; other commands
//! do not wait for them.
//!
//! The lock is not held by a thread: an operation that finds it taken
//! leaves its queue's command slot waiting and is woken through its queue's
//! completion channel (an [`IoCompletion`] with its tag) when the holder
//! lets go. Every waiter is woken then and tries again, so a waiter whose
//! queue went away meanwhile never keeps the others waiting.

use std::sync::{Arc, Mutex, MutexGuard};

use nvmeof_common::Status;

use crate::backend::{CompletionSink, IoCompletion};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct State {
    held: bool,
    /// Queues to wake when the holder lets go: their channel and the tag of
    /// the waiting command.
    waiters: Vec<(CompletionSink, u32)>,
}

/// The Compare and Write lock of one namespace.
#[derive(Default)]
pub struct CompareWriteLock {
    state: Mutex<State>,
}

impl std::fmt::Debug for CompareWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = lock(&self.state);
        f.debug_struct("CompareWriteLock").field("held", &s.held).field("waiters", &s.waiters.len()).finish()
    }
}

impl CompareWriteLock {
    /// Takes the lock, or (when another operation holds it) registers the
    /// command `tag` of the queue whose channel is `sink` to be woken when
    /// it is let go: the wake is `IoCompletion::status(tag, SUCCESS)`, after
    /// which the command tries again.
    pub fn acquire_or_wait(self: &Arc<Self>, sink: &CompletionSink, tag: u32) -> Option<CompareWriteGuard> {
        let mut s = lock(&self.state);
        if s.held {
            s.waiters.push((sink.clone(), tag));
            return None;
        }
        s.held = true;
        Some(CompareWriteGuard { lock: self.clone() })
    }

    /// Whether an operation holds the lock.
    pub fn is_held(&self) -> bool {
        lock(&self.state).held
    }

    fn release(&self) {
        let waiters = {
            let mut s = lock(&self.state);
            s.held = false;
            std::mem::take(&mut s.waiters)
        };
        for (sink, tag) in waiters {
            // A queue that closed meanwhile has dropped its receiver: nothing waits there.
            let _ = sink.send(IoCompletion::status(tag, Status::SUCCESS));
        }
    }
}

/// The lock held: let go (and the waiters woken) when dropped, so a queue
/// torn down in the middle of an operation releases it too.
pub struct CompareWriteGuard {
    lock: Arc<CompareWriteLock>,
}

impl Drop for CompareWriteGuard {
    fn drop(&mut self) {
        self.lock.release();
    }
}

impl std::fmt::Debug for CompareWriteGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CompareWriteGuard")
    }
}
