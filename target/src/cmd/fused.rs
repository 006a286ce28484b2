//! The Compare and Write fused operation (NVMe Base 2.0 §3.4.2, NVM
//! Command Set 1.0 §3.2.1.1; SPDK `nvmf_bdev_ctrlr_compare_and_write_cmd`,
//! which nvmet lacks: it refuses every fused command with Invalid Field).
//!
//! The queue pairs a Compare sent as the first command of a fused
//! operation with the Write after it ([`crate::queue`]) and, once both
//! have their data, starts the pair here: with the namespace's
//! [`CompareWriteLock`] held, the
//! blocks are read and compared, and written only if they match. Both
//! commands complete together, the Compare first, with SPDK's statuses:
//! a miscompare is Compare Failure on the Compare and Command Aborted due
//! to Failed Fused Command on the Write; a failed read or write fails its
//! own command and aborts the other.

use std::sync::Arc;

use bytes::Bytes;
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::{Sqe, Status};
use tracing::{debug, warn};

use super::io::{check_access, lba_range, submit_step};
use super::QueueCtx;
use crate::backend::{Backend, IoCompletion, IoOp};
use crate::core::fused::{CompareWriteGuard, CompareWriteLock};

/// Where a Compare and Write is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Waiting for the namespace's lock (woken by a completion with its tag).
    Lock,
    /// The blocks are being read.
    Read,
    /// The blocks compared equal and are being written.
    Write,
}

/// A Compare and Write under way, kept in the Write's command slot.
pub struct CompareWriteJob {
    backend: Arc<dyn Backend>,
    lock: Arc<CompareWriteLock>,
    /// Held from the read to the end of the write.
    guard: Option<CompareWriteGuard>,
    stage: Stage,
    offset: u64,
    /// The Compare's data.
    expected: Bytes,
    /// The Write's data.
    data: Bytes,
    fua: bool,
}

impl std::fmt::Debug for CompareWriteJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompareWriteJob")
            .field("stage", &self.stage)
            .field("offset", &self.offset)
            .field("len", &self.data.len())
            .finish()
    }
}

/// Outcome of a step of a Compare and Write.
#[derive(Debug)]
pub enum CompareWriteExec {
    /// Goes on: a completion with the Write's tag arrives on the queue.
    Pending(Box<CompareWriteJob>),
    /// Both commands complete with these statuses.
    Done {
        /// The Compare's status.
        compare: Status,
        /// The Write's status.
        write: Status,
    },
}

impl CompareWriteExec {
    /// Both commands fail: `at_fault` with `status`, the other aborted.
    fn failed(status: Status, compare_at_fault: bool) -> Self {
        let aborted = Status::ABORTED_FAILED_FUSED.with_dnr();
        if compare_at_fault {
            Self::Done { compare: status, write: aborted }
        } else {
            Self::Done { compare: aborted, write: status }
        }
    }
}

/// Starts the pair once both commands have their data: the execute-time
/// checks (the namespace, its write protection and range again, as for any
/// command; the two commands naming the same blocks, else Invalid Field on
/// the Compare as SPDK answers), then the lock. `tag` is the Write's slot,
/// whose completions drive the job.
pub fn start(ctx: &QueueCtx, compare: (&Sqe, Bytes), write: (&Sqe, Bytes), tag: u32) -> CompareWriteExec {
    let (csqe, expected) = compare;
    let (wsqe, data) = write;
    let Some(ctrl) = &ctx.ctrl else {
        return CompareWriteExec::failed(Status::INTERNAL.with_dnr(), true);
    };
    debug_assert_eq!(
        (IoOpcode(csqe.opcode()), IoOpcode(wsqe.opcode())),
        (IoOpcode::COMPARE, IoOpcode::WRITE)
    );
    if csqe.nsid() != wsqe.nsid() || csqe.slba() != wsqe.slba() || csqe.nlb() != wsqe.nlb() {
        warn!(
            compare_slba = csqe.slba(),
            compare_nlb = csqe.nlb(),
            write_slba = wsqe.slba(),
            write_nlb = wsqe.nlb(),
            "fused Compare and Write on different blocks"
        );
        return CompareWriteExec::failed(Status::INVALID_FIELD.with_dnr(), true);
    }
    let job = ctrl.with_namespace(csqe.nsid(), |ns| {
        check_access(ns, wsqe).map_err(|s| (s, false))?;
        if ns.zones.is_some() {
            // Its Write would have to start at the zone's write pointer,
            // where no data is to compare; the pair is not offered there.
            warn!(nsid = ns.nsid, "fused Compare and Write on a zoned namespace");
            return Err((Status::INVALID_FIELD.with_dnr(), true));
        }
        let (offset, len) = lba_range(ns, csqe).map_err(|s| (s, true))?;
        ns.io_stats.read(len);
        ns.io_stats.write(len);
        Ok(CompareWriteJob {
            backend: ns.backend.clone(),
            lock: ns.compare_write.clone(),
            guard: None,
            stage: Stage::Lock,
            offset,
            expected,
            data,
            fua: wsqe.fua(),
        })
    });
    match job {
        None => CompareWriteExec::failed(Status::INVALID_NS.with_dnr(), true),
        Some(Err((s, compare_at_fault))) => CompareWriteExec::failed(s, compare_at_fault),
        Some(Ok(job)) => step(ctx, Box::new(job), tag, None),
    }
}

/// Moves a Compare and Write on by its last completion `done` (`None`: not
/// started): a wake while it waits for the lock, the read, the write.
/// Called by the queue for a [`super::Pending::CompareWrite`] completion;
/// operations a backend finishes inline are followed at once.
pub fn step(
    ctx: &QueueCtx,
    mut job: Box<CompareWriteJob>,
    tag: u32,
    mut done: Option<IoCompletion>,
) -> CompareWriteExec {
    // Bounded: the lock, the read, the write.
    for _ in 0..3 {
        let op = match job.stage {
            Stage::Lock => {
                // `done`, if any, is the wake: the lock was let go, try again.
                let Some(guard) = job.lock.acquire_or_wait(&ctx.io.sink, tag) else {
                    debug!(tag, "compare and write waits for another on the namespace");
                    return CompareWriteExec::Pending(job);
                };
                job.guard = Some(guard);
                job.stage = Stage::Read;
                IoOp::Read { offset: job.offset, len: job.expected.len() }
            }
            Stage::Read => {
                let Some(c) = done.take() else { break };
                if !c.status.is_success() {
                    return CompareWriteExec::failed(c.status, true);
                }
                if c.data != job.expected {
                    return CompareWriteExec::failed(Status::COMPARE_FAILED.with_dnr(), true);
                }
                job.stage = Stage::Write;
                IoOp::Write { offset: job.offset, data: job.data.clone(), fua: job.fua }
            }
            Stage::Write => {
                let Some(c) = done.take() else { break };
                return if c.status.is_success() {
                    CompareWriteExec::Done { compare: Status::SUCCESS, write: Status::SUCCESS }
                } else {
                    CompareWriteExec::failed(c.status, false)
                };
            }
        };
        match submit_step(ctx, job.backend.as_ref(), tag, op) {
            Some(c) => done = Some(c),
            None => return CompareWriteExec::Pending(job),
        }
    }
    CompareWriteExec::failed(Status::INTERNAL.with_dnr(), false)
}
