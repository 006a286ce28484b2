//! io_uring backend for regular files and block devices.
//!
//! Operations live in rings of two kinds:
//! - **A queue's own ring** ([`QueueRing`], what the target's queues use). The
//!   queue task pushes SQEs while it handles PDUs, submits them all with one
//!   `io_uring_enter` per pass of its loop, and reaps the completion queue
//!   itself, on whichever thread runs it; an eventfd registered with the ring
//!   wakes the task when it sleeps. A completion therefore reaches its queue
//!   with no thread hop and no channel.
//! - **The backend's shared ring**, for submitters without a queue ring (tests,
//!   tools): a reaper thread, started on first use, waits on it and sends each
//!   finished operation to the submitter's [`CompletionSink`].
//!
//! A ring may carry operations of several backends (each names its
//! descriptor). Its submission and completion queues are only touched under
//! its state lock (uncontended for a queue ring). At most `cq_entries -
//! WAKE_RESERVE` operations are in the kernel at a time (so the completion
//! queue never overflows); further operations wait in a FIFO that reaping
//! feeds into the ring.
//!
//! Data path:
//! - `O_DIRECT` is used for block devices, and for regular files whose
//!   filesystem supports it with an alignment the namespace block size
//!   satisfies; otherwise the backend logs one `info!` line and uses buffered
//!   I/O.
//! - Reads land in freshly allocated 4 KiB-aligned buffers that become the
//!   completion's [`Bytes`] without a copy; with `O_DIRECT`, write data that is
//!   not aligned for the device is copied into an aligned buffer first.
//! - Short transfers are resubmitted for the rest; a read that hits end of file
//!   (the file was truncated behind our back) fails with Internal Error, as
//!   nvmet fails a short read and like the thread-pool backends; a write that
//!   makes no progress fails with [`Status::WRITE_FAULT`].
//! - Flush is `IORING_OP_FSYNC` with `DATASYNC`; FUA writes carry `RWF_DSYNC`
//!   (a FUA request on block devices), so they are durable on completion.
//!   They use a second descriptor of the file, so the writeback errors their
//!   sync reports are still reported to the next Flush (`errseq_t` keeps one
//!   cursor per open file).
//! - Buffered writes to a filesystem without async buffered writes (every
//!   one but XFS and btrfs: ext4, tmpfs, ...) bypass the ring: io_uring would
//!   punt each of them to its io-wq, which runs the writes to one inode on a
//!   single hashed worker, one after another. Writes under 128 KiB go to a
//!   small pool of writer threads instead (the thread-pool engine's
//!   `WorkerPool`), whose completions reach the queue through its
//!   [`CompletionSink`]; larger writes (faster on the ring there), reads,
//!   Flush and Write Zeroes stay on the ring.
//! - Write Zeroes / Deallocate use `IORING_OP_FALLOCATE`: deallocation tries
//!   `PUNCH_HOLE` (an unmapping write-zeroes on block devices), then
//!   `ZERO_RANGE` (on block devices the kernel zeroes with its own fallback);
//!   when the filesystem supports neither, zeroes are written from a static
//!   aligned buffer through the ring.
//! - Resize (regular files): new submissions wait on the size lock while the
//!   resize waits for every in-flight operation to finish, then truncates. It
//!   reaps the queue rings holding this backend's operations itself (their
//!   owners may be blocked on that lock); those completions reach the queues
//!   through their channels.
//! - A queue that closes with operations in flight hands its ring to the
//!   process's one drain thread: the kernel may still write into their buffers
//!   until they complete. One thread for all rings, so a device that stops
//!   completing I/O while hosts reconnect does not cost a thread per closed queue.
//!
//! [`UringBackend::open_file`] / [`UringBackend::open_block`] fail with
//! [`io::ErrorKind::Unsupported`] when io_uring is not usable here (seccomp,
//! `kernel.io_uring_disabled`, an old kernel); callers may then fall back to the
//! thread-pool backends.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use io_uring::{opcode, squeue, types, IoUring, Probe};
use nvmeof_common::Status;
use tokio::io::unix::AsyncFd;

use super::file::{in_range, is_unsupported, IoExecutor, WorkerPool, DEFAULT_WORKERS, ZEROES, ZEROES_LEN};
use super::sys::{block_device_geometry, invalid, AlignedBuf, BlockGeometry, BUF_ALIGN};
use super::{io_error_to_status, Backend, CompletionSink, IoCompletion, IoHints, IoOp, QueueIo};

/// Submission-queue entries of a backend's shared ring.
const SQ_ENTRIES: u32 = 256;
/// Completion-queue entries of a backend's shared ring (bounds the operations in the kernel).
const CQ_ENTRIES: u32 = 4096;
/// Submission-queue entries of a queue's own ring.
const QUEUE_SQ_ENTRIES: u32 = 256;
/// Completion-queue entries of a queue's own ring: room for a deep queue's
/// commands; more wait in the ring's FIFO.
const QUEUE_CQ_ENTRIES: u32 = 1024;
/// Completion-queue slots kept free for the reaper's wake-up NOP.
const WAKE_RESERVE: usize = 16;
/// `user_data` of the NOP that wakes the reaper on shutdown.
const WAKE: u64 = u64::MAX;
/// How long the reaper sleeps in the kernel before it re-checks its queues
/// (a safety net: entries the kernel refused with `EAGAIN` get resubmitted).
const REAP_TIMEOUT: Duration = Duration::from_millis(100);
/// The same while no operation is registered.
const REAP_TIMEOUT_IDLE: Duration = Duration::from_secs(1);
/// Largest transfer per SQE (the kernel caps a single read/write below 2 GiB anyway).
const MAX_RW: usize = 1 << 30;
/// Aligned write-copy buffers a ring keeps for reuse.
const MAX_SPARE: usize = 64;
/// A closed queue's operations still in flight after this long get a warning
/// (the device has stopped completing I/O).
const DRAIN_WARN_AFTER: Duration = Duration::from_secs(30);
/// Retries of an operation that failed with `EINTR` / `EAGAIN`.
const MAX_RETRIES: u8 = 16;

// ---------------------------------------------------------------------------
// Aligned buffers
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------

/// Write payload: the caller's bytes, or an aligned copy of the first `len`
/// bytes' worth (`O_DIRECT`), in a buffer recycled through the ring.
enum WriteData {
    Shared(Bytes),
    Copied(AlignedBuf, usize),
}

impl WriteData {
    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Shared(b) => b,
            // SAFETY: the first `len` bytes were initialized by the copy (the
            // rest of the recycled buffer may not be, so it is never viewed).
            Self::Copied(b, len) => unsafe { std::slice::from_raw_parts(b.ptr.as_ptr(), *len) },
        }
    }
}

/// Where a read lands: the queue's recycled buffer when its address suits the
/// descriptor (no allocation), else a fresh aligned buffer.
enum ReadBuf {
    /// A queue read buffer; `ptr` is its start, taken once from `&mut` (the
    /// heap storage does not move with the `BytesMut`).
    Queue {
        buf: BytesMut,
        ptr: NonNull<u8>,
    },
    Aligned(AlignedBuf),
}

// SAFETY: `ptr` points into the `BytesMut` the variant owns (like `AlignedBuf`,
// a uniquely owned heap buffer); nothing else reads or writes through it.
unsafe impl Send for ReadBuf {}
// SAFETY: shared access only reads the pointer value.
unsafe impl Sync for ReadBuf {}

impl ReadBuf {
    fn ptr(&self) -> *mut u8 {
        match self {
            Self::Queue { ptr, .. } => ptr.as_ptr(),
            Self::Aligned(b) => b.ptr.as_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Queue { buf, .. } => buf.len(),
            Self::Aligned(b) => b.len,
        }
    }

    /// The completion's data (the whole buffer is initialized by then).
    fn into_bytes(self) -> Bytes {
        match self {
            Self::Queue { buf, .. } => buf.freeze(),
            Self::Aligned(b) => Bytes::from_owner(b),
        }
    }
}

/// How the current zeroing range is being zeroed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ZeroStep {
    /// `fallocate(PUNCH_HOLE | KEEP_SIZE)`.
    Punch,
    /// `fallocate(ZERO_RANGE | KEEP_SIZE)`.
    ZeroRange,
    /// Writing from [`ZEROES`]; this many bytes of the range are done.
    Write(u64),
}

/// Zeroing of one or more byte ranges, one ring operation at a time.
struct Zeroing {
    ranges: Vec<(u64, u64)>,
    idx: usize,
    deallocate: bool,
    step: ZeroStep,
}

impl Zeroing {
    fn first_step(deallocate: bool) -> ZeroStep {
        if deallocate {
            ZeroStep::Punch
        } else {
            ZeroStep::ZeroRange
        }
    }

    /// Moves to the next range; true when all are done.
    fn next_range(&mut self) -> bool {
        self.idx += 1;
        self.step = Self::first_step(self.deallocate);
        self.idx >= self.ranges.len()
    }
}

/// What an operation does; it owns every buffer its SQE points to.
enum Kind {
    Read { buf: ReadBuf, offset: u64, done: usize },
    Write { data: WriteData, offset: u64, done: usize, fua: bool },
    Flush,
    Zero(Zeroing),
}

/// One registered operation.
struct Op {
    tag: u32,
    /// Where the completion goes; `None` on a queue ring (the queue reaps it).
    sink: Option<CompletionSink>,
    /// The backend: keeps the descriptor open while the operation is in flight.
    file: Arc<FileShared>,
    retries: u8,
    kind: Kind,
}

/// What to do after a completion.
enum Next {
    /// Submit the (updated) operation again.
    Again(Op),
    /// Finished: deliver this completion (and keep the aligned copy buffer, if any, for reuse).
    Done(Arc<FileShared>, Option<CompletionSink>, IoCompletion, Option<AlignedBuf>),
}

impl Op {
    /// The SQE for the operation's next step (`user_data` still to be set).
    fn sqe(&self) -> squeue::Entry {
        let fd = self.file.fd();
        match &self.kind {
            Kind::Read { buf, offset, done } => {
                let n = (buf.len() - done).min(MAX_RW) as u32;
                // SAFETY: `done < buf.len()`, so the pointer stays inside the allocation.
                let ptr = unsafe { buf.ptr().add(*done) };
                opcode::Read::new(fd, ptr, n).offset(offset + *done as u64).build()
            }
            Kind::Write { data, offset, done, fua } => {
                let rest = &data.as_slice()[*done..];
                let (fd, flags) = if *fua { (self.file.fua_fd(), libc::RWF_DSYNC) } else { (fd, 0) };
                opcode::Write::new(fd, rest.as_ptr(), rest.len().min(MAX_RW) as u32)
                    .offset(offset + *done as u64)
                    .rw_flags(flags)
                    .build()
            }
            Kind::Flush => opcode::Fsync::new(fd).flags(types::FsyncFlags::DATASYNC).build(),
            Kind::Zero(z) => {
                let (off, len) = z.ranges[z.idx];
                let keep = libc::FALLOC_FL_KEEP_SIZE;
                match z.step {
                    ZeroStep::Punch => opcode::Fallocate::new(fd, len)
                        .offset(off)
                        .mode(libc::FALLOC_FL_PUNCH_HOLE | keep)
                        .build(),
                    ZeroStep::ZeroRange => opcode::Fallocate::new(fd, len)
                        .offset(off)
                        .mode(libc::FALLOC_FL_ZERO_RANGE | keep)
                        .build(),
                    ZeroStep::Write(done) => {
                        let n = (len - done).min(ZEROES_LEN as u64) as u32;
                        opcode::Write::new(fd, ZEROES.0.as_ptr(), n).offset(off + done).build()
                    }
                }
            }
        }
    }

    /// Applies the CQE result `res`.
    fn complete(mut self, res: i32) -> Next {
        if res < 0 {
            let errno = -res;
            if matches!(errno, libc::EINTR | libc::EAGAIN) && self.retries < MAX_RETRIES {
                self.retries += 1;
                return Next::Again(self);
            }
            let err = io::Error::from_raw_os_error(errno);
            if let Kind::Zero(z) = &mut self.kind {
                if is_unsupported(&err) {
                    match z.step {
                        ZeroStep::Punch => {
                            z.step = ZeroStep::ZeroRange;
                            return Next::Again(self);
                        }
                        ZeroStep::ZeroRange => {
                            z.step = ZeroStep::Write(0);
                            return Next::Again(self);
                        }
                        ZeroStep::Write(_) => {}
                    }
                }
            }
            return self.finish(Err(io_error_to_status(&err)));
        }
        self.retries = 0;
        let n = res as usize;
        match &mut self.kind {
            Kind::Read { buf, done, .. } => {
                if n == 0 {
                    // End of file (truncated behind our back): an error, as
                    // nvmet_file_io_done fails a short read, not zeroes in
                    // place of the lost data.
                    return self.finish(Err(Status::INTERNAL.with_dnr()));
                }
                *done += n;
                if *done < buf.len() {
                    return Next::Again(self);
                }
                let Kind::Read { buf, .. } = std::mem::replace(&mut self.kind, Kind::Flush) else {
                    unreachable!()
                };
                // The whole buffer is initialized now.
                self.finish(Ok(buf.into_bytes()))
            }
            Kind::Write { data, done, .. } => {
                if n == 0 {
                    return self.finish(Err(Status::WRITE_FAULT));
                }
                *done += n;
                if *done < data.as_slice().len() {
                    return Next::Again(self);
                }
                let Kind::Write { data, .. } = std::mem::replace(&mut self.kind, Kind::Flush) else {
                    unreachable!()
                };
                let mut next = self.finish(Ok(Bytes::new()));
                if let (Next::Done(.., spare), WriteData::Copied(buf, _)) = (&mut next, data) {
                    *spare = Some(buf);
                }
                next
            }
            Kind::Flush => self.finish(Ok(Bytes::new())),
            Kind::Zero(z) => {
                if let ZeroStep::Write(done) = &mut z.step {
                    if n == 0 {
                        return self.finish(Err(Status::WRITE_FAULT));
                    }
                    *done += n as u64;
                    if *done < z.ranges[z.idx].1 {
                        return Next::Again(self);
                    }
                }
                if z.next_range() {
                    self.finish(Ok(Bytes::new()))
                } else {
                    Next::Again(self)
                }
            }
        }
    }

    fn finish(self, result: Result<Bytes, Status>) -> Next {
        let completion = match result {
            Ok(data) => IoCompletion { tag: self.tag, status: Status::SUCCESS, result: 0, data },
            Err(status) => IoCompletion::status(self.tag, status),
        };
        Next::Done(self.file, self.sink, completion, None)
    }
}

// ---------------------------------------------------------------------------
// Rings
// ---------------------------------------------------------------------------

/// Registered operations and ring accounting (behind [`Ring::state`]).
#[derive(Default)]
struct RingState {
    /// Operations by `user_data`; `None` slots are free.
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
    /// Registered operations (in the ring or in `pending`).
    live: usize,
    /// SQEs pushed and not yet reaped (including the wake-up NOP).
    in_ring: usize,
    /// SQEs pushed since the last `io_uring_enter`.
    unsubmitted: usize,
    /// Operations waiting for room in the ring, oldest first.
    pending: VecDeque<usize>,
    /// The backend's shared ring is being dropped: its reaper exits once `live` is 0.
    shutdown: bool,
    /// Aligned buffers of finished `O_DIRECT` write copies, for the next ones.
    spare: Vec<AlignedBuf>,
}

impl RingState {
    fn insert(&mut self, op: Op) -> usize {
        self.live += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(op);
                i
            }
            None => {
                self.slots.push(Some(op));
                self.slots.len() - 1
            }
        }
    }
}

/// One io_uring instance and the operations in it. Operations may belong to
/// several backends (each carries its descriptor). Two kinds exist:
/// - a **queue ring**, owned by one queue task ([`QueueRing`]), which submits
///   and reaps it on its own thread, so a completion reaches the queue without
///   a thread hop; an eventfd registered with the ring wakes the task when it
///   sleeps;
/// - a backend's **shared ring**, for submitters that do not reap (tests,
///   tools), with a reaper thread that sends each completion to its sink.
struct Ring {
    // Field order: the ring is torn down before the state (which owns the
    // buffers); by then every operation has completed.
    uring: IoUring,
    state: Mutex<RingState>,
    /// Most SQEs in the kernel at once (the completion queue never overflows).
    cap: usize,
    /// Queue rings: the queue's channel, for completions another thread reaps
    /// (a resize waiting for in-flight I/O, or the drain after the queue closed).
    owner: Option<CompletionSink>,
    /// Queue rings: non-blocking eventfd the kernel signals on every completion.
    eventfd: Option<OwnedFd>,
}

impl Ring {
    /// A ring with `sq` submission and `cq` completion entries, checked for
    /// everything the backend uses.
    fn new(sq: u32, cq: u32, owner: Option<CompletionSink>) -> io::Result<Self> {
        let uring = new_ring(sq, cq)?;
        let eventfd = match owner {
            Some(_) => {
                // SAFETY: plain syscall; the result is checked.
                let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                // SAFETY: `fd` was just created and is owned by nothing else.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                uring.submitter().register_eventfd(fd.as_raw_fd())?;
                Some(fd)
            }
            None => None,
        };
        let cap = (uring.params().cq_entries() as usize).saturating_sub(WAKE_RESERVE).max(1);
        Ok(Self { uring, state: Mutex::new(RingState::default()), cap, owner, eventfd })
    }

    fn lock_state(&self) -> MutexGuard<'_, RingState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An aligned buffer of at least `len` bytes: a spare one, else a new one
    /// (rounded up to a power of two, so it fits later requests of that size).
    fn aligned_buf(&self, len: usize) -> AlignedBuf {
        {
            let mut st = self.lock_state();
            if let Some(i) = st.spare.iter().position(|b| b.len >= len) {
                return st.spare.swap_remove(i);
            }
        }
        AlignedBuf::new_uninit(len.next_power_of_two().max(BUF_ALIGN))
    }

    /// Registers `op` and queues its SQE (submitted by the next [`Ring::enter`]).
    fn push(&self, op: Op) {
        let mut st = self.lock_state();
        let idx = st.insert(op);
        st.pending.push_back(idx);
        self.fill_ring(&mut st);
    }

    /// Moves pending operations into the submission queue while there is room.
    /// Called with the state lock held (which makes this the only SQ user).
    fn fill_ring(&self, st: &mut RingState) {
        if st.pending.is_empty() || st.in_ring >= self.cap {
            return;
        }
        // SAFETY: the state lock is held, so no other `SubmissionQueue` exists.
        let mut sq = unsafe { self.uring.submission_shared() };
        while st.in_ring < self.cap {
            let Some(&idx) = st.pending.front() else { break };
            let Some(op) = st.slots[idx].as_ref() else {
                st.pending.pop_front();
                continue;
            };
            let sqe = op.sqe().user_data(idx as u64);
            // SAFETY: every buffer the entry points to is owned by the operation
            // (heap memory that stays put while it moves between slots) or is
            // static, the descriptor is kept open by the operation's
            // `Arc<FileShared>`, and the operation is only dropped after its CQE
            // is reaped.
            if unsafe { sq.push(&sqe) }.is_err() {
                break; // SQ full: the next io_uring_enter makes room.
            }
            st.pending.pop_front();
            st.in_ring += 1;
            st.unsubmitted += 1;
        }
    }

    /// Submits queued SQEs without waiting, refilling from the FIFO while the
    /// kernel takes them. Entries the kernel could not take now stay queued for
    /// the next call.
    fn enter(&self) {
        for _ in 0..8 {
            {
                let mut st = self.lock_state();
                self.fill_ring(&mut st);
                if st.unsubmitted == 0 {
                    return;
                }
                st.unsubmitted = 0;
            }
            let r = self.uring.submit();
            // Entries the kernel did not take stay in the SQ: all of them
            // when it answers EAGAIN or EBUSY (a full CQ), the rest after an
            // entry that failed before issue (`io_submit_sqes` stops there
            // without IORING_SETUP_SUBMIT_ALL). Counted again, so the next
            // call (every pass of the queue's loop makes one) submits them;
            // reset to 0 they waited for an unrelated later submission, and
            // an idle queue's command for the host's timeout.
            {
                let mut st = self.lock_state();
                // SAFETY: the state lock is held, so no other `SubmissionQueue` exists.
                let left = unsafe { self.uring.submission_shared() }.len();
                st.unsubmitted = st.unsubmitted.max(left);
            }
            match r {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => return,
                Err(e) => {
                    tracing::error!(error = %e, "io_uring submit failed");
                    return;
                }
            }
        }
    }

    /// Whether operations are registered (in the kernel or waiting for room).
    fn has_live(&self) -> bool {
        self.lock_state().live > 0
    }

    /// Takes every completion the kernel posted: unfinished operations are
    /// queued again (submitted by the next [`Ring::enter`]), finished ones go
    /// to `finished` with their own sink (shared ring) or `None` (queue ring).
    /// `finished` runs under the state lock, so it must not submit. Returns
    /// whether anything was reaped.
    fn reap(&self, mut finished: impl FnMut(Option<CompletionSink>, IoCompletion)) -> bool {
        let mut st = self.lock_state();
        // SAFETY: the state lock is held, so this is the only `CompletionQueue`.
        let mut cq = unsafe { self.uring.completion_shared() };
        if cq.is_empty() {
            return false;
        }
        for cqe in &mut cq {
            st.in_ring = st.in_ring.saturating_sub(1);
            let user_data = cqe.user_data();
            if user_data == WAKE {
                continue;
            }
            let idx = user_data as usize;
            let Some(op) = st.slots.get_mut(idx).and_then(Option::take) else {
                tracing::error!(user_data, "io_uring completion for an unknown operation");
                continue;
            };
            match op.complete(cqe.result()) {
                Next::Again(op) => {
                    st.slots[idx] = Some(op);
                    st.pending.push_front(idx);
                }
                Next::Done(file, sink, completion, spare) => {
                    if let Some(b) = spare {
                        if st.spare.len() < MAX_SPARE {
                            st.spare.push(b);
                        }
                    }
                    st.free.push(idx);
                    st.live -= 1;
                    file.live.fetch_sub(1, Ordering::AcqRel);
                    finished(sink, completion);
                }
            }
        }
        drop(cq);
        self.fill_ring(&mut st);
        true
    }

    /// [`Ring::reap`], sending each finished operation to its sink or to the
    /// owner's channel (every thread but the owning queue's reaps this way).
    fn reap_and_send(&self) -> bool {
        self.reap(|sink, completion| {
            // The queue may be gone (host disconnected); its completion is then moot.
            if let Some(s) = sink.as_ref().or(self.owner.as_ref()) {
                let _ = s.send(completion);
            }
        })
    }

    /// Blocks until every operation in the ring has completed (for a queue ring
    /// whose queue is gone: the kernel may still write into their buffers).
    fn drain_blocking(&self) {
        let ts = types::Timespec::from(REAP_TIMEOUT);
        let args = types::SubmitArgs::new().timespec(&ts);
        while self.has_live() {
            self.enter();
            let _ = self.uring.submitter().submit_with_args(1, &args);
            self.reap_and_send();
        }
    }
}

/// The reaper of a backend's shared ring: waits for completions, resubmits
/// unfinished operations, feeds pending ones into the ring and sends finished
/// ones to their sinks.
fn reap_shared(ring: &Ring) {
    let (busy, idle) = (types::Timespec::from(REAP_TIMEOUT), types::Timespec::from(REAP_TIMEOUT_IDLE));
    let (busy, idle) = (types::SubmitArgs::new().timespec(&busy), types::SubmitArgs::new().timespec(&idle));
    let mut is_idle = true;
    let mut failures = 0u32;
    loop {
        match ring.uring.submitter().submit_with_args(1, if is_idle { &idle } else { &busy }) {
            Ok(_) => failures = 0,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => {
                if failures == 0 {
                    tracing::error!(error = %e, "io_uring wait failed");
                }
                failures = failures.saturating_add(1);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        ring.reap_and_send();
        ring.enter();
        let (live, shutdown) = {
            let st = ring.lock_state();
            (st.live, st.shutdown)
        };
        is_idle = live == 0;
        if shutdown && live == 0 {
            return;
        }
    }
}

/// A queue's own io_uring, created on the queue's first io_uring operation.
///
/// The queue task pushes SQEs while it handles PDUs, submits them with one
/// `io_uring_enter` per pass of its loop ([`QueueRing::submit`]), and reaps
/// completions itself ([`QueueRing::reap`]), on whichever thread runs it; while
/// it sleeps, [`QueueRing::ready`] wakes it through the ring's eventfd. No
/// other thread touches a completion on the way, except a resize that reaps
/// on the queue's behalf while it waits for in-flight I/O (those completions
/// then arrive on the queue's channel).
pub struct QueueRing {
    // Field order: the eventfd registration goes before the ring.
    afd: OnceLock<Option<AsyncFd<RingEventFd>>>,
    ring: OnceLock<Option<Arc<Ring>>>,
    /// Backends whose resize knows about this ring.
    registered: Mutex<Vec<Weak<FileShared>>>,
    /// The backend registered last, so that the usual case (one namespace per
    /// queue) skips the lock. The address stays unique while its `Weak` is in
    /// `registered`: a dead entry is only dropped under the lock, right before
    /// this is set to the file being registered.
    last_registered: AtomicPtr<FileShared>,
    owner: CompletionSink,
}

/// A queue ring's eventfd, for `AsyncFd`; holding the ring keeps the descriptor open.
struct RingEventFd(Arc<Ring>);

impl AsRawFd for RingEventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.eventfd.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }
}

impl QueueRing {
    /// A queue ring whose completions go to the queue (or to `owner`, its channel,
    /// when another thread reaps them). No ring exists until the first operation.
    pub fn new(owner: CompletionSink) -> Self {
        Self {
            afd: OnceLock::new(),
            ring: OnceLock::new(),
            registered: Mutex::new(Vec::new()),
            last_registered: AtomicPtr::new(std::ptr::null_mut()),
            owner,
        }
    }

    /// The ring, created on first use, and made known to `file`'s resize.
    /// `None` when no ring can be created here (the caller uses the backend's
    /// shared ring).
    fn ring_for(&self, file: &Arc<FileShared>) -> Option<&Arc<Ring>> {
        let ring = self
            .ring
            .get_or_init(|| match Ring::new(QUEUE_SQ_ENTRIES, QUEUE_CQ_ENTRIES, Some(self.owner.clone())) {
                Ok(r) => Some(Arc::new(r)),
                Err(e) => {
                    tracing::warn!(error = %e, "no io_uring for this queue; using the backend's shared ring");
                    None
                }
            })
            .as_ref()?;
        let ptr = Arc::as_ptr(file).cast_mut();
        if self.last_registered.load(Ordering::Acquire) == ptr {
            return Some(ring);
        }
        let mut registered = self.registered.lock().unwrap_or_else(PoisonError::into_inner);
        if !registered.iter().any(|w| w.as_ptr() == Arc::as_ptr(file)) {
            registered.retain(|w| w.strong_count() > 0);
            registered.push(Arc::downgrade(file));
            let mut rings = file.rings.lock().unwrap_or_else(PoisonError::into_inner);
            rings.retain(|w| w.strong_count() > 0);
            rings.push(Arc::downgrade(ring));
        }
        self.last_registered.store(ptr, Ordering::Release);
        Some(ring)
    }

    fn get(&self) -> Option<&Arc<Ring>> {
        self.ring.get().and_then(Option::as_ref)
    }

    /// Submits the SQEs pushed since the last call (one `io_uring_enter`).
    pub fn submit(&self) {
        if let Some(r) = self.get() {
            r.enter();
        }
    }

    /// Appends the completions the kernel has posted to `out` (never blocks).
    /// Returns whether there were any.
    pub fn reap(&self, out: &mut Vec<IoCompletion>) -> bool {
        let Some(r) = self.get() else { return false };
        r.reap(|sink, c| match sink {
            Some(s) => {
                let _ = s.send(c);
            }
            None => out.push(c),
        })
    }

    /// Whether operations are in flight on this queue's ring.
    pub fn in_flight(&self) -> bool {
        self.get().is_some_and(|r| r.has_live())
    }

    /// Waits until the kernel has posted a completion since the last call, then
    /// returns (the caller reaps). Pending forever while no ring exists or the
    /// runtime cannot watch its eventfd.
    pub async fn ready(&self) {
        let Some(ring) = self.get() else { return std::future::pending().await };
        let afd = self.afd.get_or_init(|| {
            ring.eventfd.as_ref()?;
            // SAFETY: the eventfd belongs to the ring, which `RingEventFd` keeps
            // alive, so the descriptor stays open and the same while registered.
            unsafe {
                AsyncFd::register_with_interest(RingEventFd(ring.clone()), tokio::io::Interest::READABLE)
            }
            .map_err(|e| tracing::warn!(error = %e, "cannot watch the io_uring eventfd; polling it"))
            .ok()
        });
        let Some(afd) = afd else {
            // No reactor for the eventfd: check again shortly (the caller reaps).
            return tokio::time::sleep(Duration::from_millis(1)).await;
        };
        loop {
            let Ok(mut guard) = afd.readable().await else {
                return tokio::time::sleep(Duration::from_millis(1)).await;
            };
            if clear_eventfd(afd.get_ref().as_raw_fd()) {
                return;
            }
            guard.clear_ready();
        }
    }
}

impl Drop for QueueRing {
    fn drop(&mut self) {
        // Stop watching the eventfd before the ring closes it.
        self.afd.take();
        let Some(ring) = self.ring.take().flatten() else { return };
        if !ring.has_live() {
            return;
        }
        // The queue closed with I/O in flight; the kernel may still write into
        // those operations' buffers, so they live until their completions
        // arrive, on the drain thread rather than blocking this task.
        match Drainer::get() {
            Some(d) => d.add(ring),
            None => ring.drain_blocking(),
        }
    }
}

/// Reads (and so resets) a non-blocking eventfd; whether it had been signalled.
fn clear_eventfd(fd: RawFd) -> bool {
    let mut count = 0u64;
    // SAFETY: reads 8 bytes into a u64; a bad or non-eventfd descriptor only makes it fail.
    unsafe { libc::read(fd, (&raw mut count).cast(), 8) == 8 }
}

/// The drain thread: reaps the rings of closed queues until their last
/// operation completes, then drops them (and with them the buffers).
struct Drainer {
    /// Rings being drained, with when each arrived and whether it was warned about.
    rings: Mutex<Vec<(Arc<Ring>, Instant, bool)>>,
    more: Condvar,
}

impl Drainer {
    /// The process's drainer, its thread started on first use; `None` when no
    /// thread can be started (the caller drains in place).
    fn get() -> Option<&'static Drainer> {
        static DRAINER: Drainer = Drainer { rings: Mutex::new(Vec::new()), more: Condvar::new() };
        static STARTED: OnceLock<bool> = OnceLock::new();
        let started = *STARTED.get_or_init(|| {
            match std::thread::Builder::new().name("nvmet-uring-drain".into()).spawn(|| DRAINER.run()) {
                Ok(_) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "no io_uring drain thread; closed queues drain in place");
                    false
                }
            }
        });
        started.then_some(&DRAINER)
    }

    fn add(&self, ring: Arc<Ring>) {
        self.rings.lock().unwrap_or_else(PoisonError::into_inner).push((ring, Instant::now(), false));
        self.more.notify_one();
    }

    fn run(&self) {
        let mut fds = Vec::new();
        loop {
            fds.clear();
            {
                let mut rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
                while rings.is_empty() {
                    rings = self.more.wait(rings).unwrap_or_else(PoisonError::into_inner);
                }
                // Reaping sends nothing anywhere that could block: the queue's
                // channel is unbounded (and its receiver usually gone).
                rings.retain_mut(|(ring, since, warned)| {
                    ring.enter();
                    ring.reap_and_send();
                    if !ring.has_live() {
                        return false;
                    }
                    if !*warned && since.elapsed() >= DRAIN_WARN_AFTER {
                        *warned = true;
                        tracing::warn!(
                            operations = ring.lock_state().live,
                            "io_uring operations of a closed queue still in flight after {} s: the device is not \
                             completing I/O; their buffers are held until it does",
                            DRAIN_WARN_AFTER.as_secs()
                        );
                    }
                    if let Some(fd) = &ring.eventfd {
                        fds.push(libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
                    }
                    true
                });
                if rings.is_empty() {
                    continue;
                }
            }
            // Sleep until a ring posts a completion (its eventfd) or, as a safety
            // net for entries the kernel refused with EAGAIN and for rings added
            // meanwhile, REAP_TIMEOUT passes.
            // SAFETY: `fds` is a valid array of `fds.len()` pollfd entries whose
            // descriptors stay open: their rings are held in `self.rings`.
            unsafe {
                libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, REAP_TIMEOUT.as_millis() as i32)
            };
            for p in &fds {
                clear_eventfd(p.fd);
            }
        }
    }
}

fn zeroing(mut ranges: Vec<(u64, u64)>, deallocate: bool) -> Option<Kind> {
    ranges.retain(|&(_, len)| len > 0);
    (!ranges.is_empty())
        .then(|| Kind::Zero(Zeroing { ranges, idx: 0, deallocate, step: Zeroing::first_step(deallocate) }))
}

/// What every operation on one backend refers to.
struct FileShared {
    /// The descriptor every operation but FUA writes uses (`O_DIRECT` when `direct`).
    file: File,
    /// The same file opened again, for FUA writes: their `RWF_DSYNC` checks
    /// for writeback errors like an `fdatasync` and consumes what it reports
    /// for its own descriptor (`errseq_t`, `file_check_and_advance_wb_err`),
    /// so on `file` it would hide a failed writeback of an earlier plain
    /// write from the next Flush, which then reported success for data
    /// never written. The thread-pool engine uses a separate `O_DSYNC`
    /// descriptor the same way.
    fua: File,
    path: PathBuf,
    /// A block device's I/O sizes; `None` for a regular file.
    io_hints: Option<IoHints>,
    direct: bool,
    /// Offsets and lengths must be multiples of this (1: any).
    io_align: u64,
    /// With `O_DIRECT`, write data whose address is not a multiple of this is copied.
    mem_align: usize,
    block_size: u32,
    /// Capacity in bytes. Submitters hold the read lock while they register an
    /// operation; resize holds the write lock while it drains and truncates.
    size: RwLock<u64>,
    /// Copy of `size` readable while a resize holds the lock.
    size_now: AtomicU64,
    /// This backend's operations registered in any ring.
    live: AtomicUsize,
    /// Queue rings that have carried this backend's operations: a resize reaps
    /// them while it waits for `live` to reach 0.
    rings: Mutex<Vec<Weak<Ring>>>,
    /// A block device's exclusive claim (writable namespaces; [`super::claim`]).
    _claim: Option<Arc<super::claim::DeviceClaim>>,
}

impl FileShared {
    fn is_block(&self) -> bool {
        self.io_hints.is_some()
    }

    fn fd(&self) -> types::Fd {
        types::Fd(self.file.as_raw_fd())
    }

    fn fua_fd(&self) -> types::Fd {
        types::Fd(self.fua.as_raw_fd())
    }

    /// Checks `op` against the capacity and alignment and turns it into a [`Kind`];
    /// `Ok(None)` means there is nothing to do (zero length).
    fn prepare(
        &self,
        op: IoOp,
        size: u64,
        ring: &Ring,
        read_buf: Option<BytesMut>,
    ) -> Result<Option<Kind>, Status> {
        let check = |off: u64, len: u64| {
            if !in_range(off, len, size) {
                Err(Status::LBA_RANGE.with_dnr())
            } else if (off | len) & (self.io_align - 1) != 0 {
                Err(Status::INVALID_FIELD.with_dnr())
            } else {
                Ok(())
            }
        };
        Ok(match op {
            IoOp::Read { offset, len } => {
                check(offset, len as u64)?;
                if len == 0 {
                    return Ok(None);
                }
                let buf = match read_buf {
                    // The queue's buffer, where its address suits the descriptor.
                    Some(mut buf)
                        if buf.len() == len && (buf.as_ptr() as usize) & (self.mem_align - 1) == 0 =>
                    {
                        let ptr = NonNull::new(buf.as_mut_ptr()).expect("non-empty buffer");
                        ReadBuf::Queue { buf, ptr }
                    }
                    _ => ReadBuf::Aligned(AlignedBuf::new_uninit(len)),
                };
                Some(Kind::Read { buf, offset, done: 0 })
            }
            IoOp::Write { offset, data, fua } => {
                check(offset, data.len() as u64)?;
                if data.is_empty() {
                    return Ok(None);
                }
                let data = if self.direct && (data.as_ptr() as usize) & (self.mem_align - 1) != 0 {
                    let buf = ring.aligned_buf(data.len());
                    // SAFETY: `buf` holds at least `data.len()` bytes and does not overlap `data`.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.ptr.as_ptr(), data.len()) };
                    WriteData::Copied(buf, data.len())
                } else {
                    WriteData::Shared(data)
                };
                Some(Kind::Write { data, offset, done: 0, fua })
            }
            IoOp::Flush => Some(Kind::Flush),
            IoOp::WriteZeroes { offset, len, deallocate } => {
                check(offset, len)?;
                zeroing(vec![(offset, len)], deallocate)
            }
            IoOp::Deallocate { ranges } => {
                for &(offset, len) in &ranges {
                    check(offset, len)?;
                }
                zeroing(ranges, true)
            }
        })
    }

    /// Waits until none of this backend's operations is in flight, reaping the
    /// queue rings that carry them (their owners may be blocked on the size
    /// lock this resize holds). Called with the size write lock held.
    fn wait_drained(&self) {
        let start = Instant::now();
        let mut warned = start;
        while self.live.load(Ordering::Acquire) > 0 {
            let rings: Vec<Arc<Ring>> = {
                let rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
                rings.iter().filter_map(Weak::upgrade).collect()
            };
            for r in &rings {
                r.enter();
                r.reap_and_send();
                r.enter();
            }
            if self.live.load(Ordering::Acquire) == 0 {
                break;
            }
            if warned.elapsed() >= Duration::from_secs(5) {
                warned = Instant::now();
                tracing::warn!(path = %self.path.display(), waited_s = start.elapsed().as_secs(),
                    in_flight = self.live.load(Ordering::Acquire), "resize still waiting for in-flight I/O");
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

// ---------------------------------------------------------------------------
// Opening
// ---------------------------------------------------------------------------

fn unavailable(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, format!("io_uring unavailable: {what}"))
}

/// Creates a ring and checks that it supports everything the backend uses.
fn new_ring(sq: u32, cq: u32) -> io::Result<IoUring> {
    let ring = IoUring::builder()
        .setup_cqsize(cq)
        .setup_clamp()
        .build(sq)
        .map_err(|e| unavailable(format_args!("io_uring_setup: {e}")))?;
    if !ring.params().is_feature_ext_arg() {
        return Err(unavailable("kernel too old (no IORING_FEAT_EXT_ARG, needs Linux 5.11)"));
    }
    let mut probe = Probe::new();
    ring.submitter().register_probe(&mut probe).map_err(|e| unavailable(format_args!("probe: {e}")))?;
    for (code, name) in [
        (opcode::Read::CODE, "READ"),
        (opcode::Write::CODE, "WRITE"),
        (opcode::Fsync::CODE, "FSYNC"),
        (opcode::Fallocate::CODE, "FALLOCATE"),
        (opcode::Nop::CODE, "NOP"),
    ] {
        if !probe.is_supported(code) {
            return Err(unavailable(format_args!("kernel lacks IORING_OP_{name}")));
        }
    }
    Ok(ring)
}

/// Checks once per process that io_uring is usable here (a first ring is
/// created and probed), so opening a backend fails early with
/// [`io::ErrorKind::Unsupported`] instead of failing its first I/O.
fn check_available() -> io::Result<()> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    match AVAILABLE.get_or_init(|| new_ring(8, 16).map(drop).map_err(|e| e.to_string())) {
        Ok(()) => Ok(()),
        Err(e) => Err(io::Error::new(io::ErrorKind::Unsupported, e.clone())),
    }
}

/// `O_DIRECT` alignment reported by `statx(STATX_DIOALIGN)`: `(memory, offset)`.
/// `None` when the kernel or filesystem does not report it; an offset alignment
/// of 0 means the file does not support `O_DIRECT`.
fn dio_align(file: &File) -> Option<(u32, u32)> {
    // SAFETY: `statx` is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor, empty path with AT_EMPTY_PATH, valid out pointer.
    let r = unsafe {
        libc::statx(file.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut stx)
    };
    if r != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    Some((stx.stx_dio_mem_align, stx.stx_dio_offset_align))
}

/// Tries one aligned `O_DIRECT` read of `len` bytes at offset 0.
fn probe_direct_read(file: &File, len: usize) -> io::Result<()> {
    let buf = AlignedBuf::new_uninit(len);
    // SAFETY: `buf` is valid for `len` bytes of writes.
    super::sys::retry_eintr(|| unsafe { libc::pread(file.as_raw_fd(), buf.ptr.as_ptr().cast(), len, 0) })
        .map(drop)
}

/// How the data descriptor was opened.
struct DataFile {
    file: File,
    direct: bool,
    io_align: u64,
    mem_align: usize,
    /// A block device's exclusive claim (writable namespaces; [`super::claim`]).
    claim: Option<Arc<super::claim::DeviceClaim>>,
}

impl DataFile {
    /// `path` opened again like `file` (the descriptor for FUA writes),
    /// checked to be the same file.
    fn reopen(&self, path: &Path, writable: bool) -> io::Result<File> {
        let flags = if self.direct { libc::O_DIRECT } else { 0 };
        let f = OpenOptions::new().read(true).write(writable).custom_flags(flags).open(path)?;
        let (a, b) = (f.metadata()?, self.file.metadata()?);
        if a.ino() != b.ino() || a.dev() != b.dev() || a.rdev() != b.rdev() {
            return Err(io::Error::other(format!("{} was replaced while opening it", path.display())));
        }
        Ok(f)
    }
}

/// Opens `path` (already opened as `buffered`) with `O_DIRECT` if the namespace's
/// `block_size` satisfies the filesystem's alignment; else explains why not.
fn open_file_direct(
    path: &Path,
    buffered: &File,
    block_size: u32,
    writable: bool,
) -> io::Result<Result<DataFile, String>> {
    let direct = match OpenOptions::new().read(true).write(writable).custom_flags(libc::O_DIRECT).open(path) {
        Ok(f) => f,
        Err(e) => return Ok(Err(format!("O_DIRECT open refused: {e}"))),
    };
    let (a, b) = (direct.metadata()?, buffered.metadata()?);
    if a.ino() != b.ino() || a.dev() != b.dev() {
        return Err(io::Error::other(format!("{} was replaced while opening it", path.display())));
    }
    let (mem, off) = match dio_align(&direct) {
        Some((_, 0)) => return Ok(Err("the filesystem does not support O_DIRECT".into())),
        Some((mem, off)) => (mem.max(1), off),
        None => match probe_direct_read(&direct, block_size as usize) {
            Ok(()) => (block_size, block_size),
            Err(e) => return Ok(Err(format!("O_DIRECT read of one block failed: {e}"))),
        },
    };
    if off > block_size
        || !block_size.is_multiple_of(off)
        || !mem.is_power_of_two()
        || mem as usize > BUF_ALIGN
    {
        return Ok(Err(format!(
            "namespace block size {block_size} does not meet the O_DIRECT alignment \
             (offset {off}, memory {mem})"
        )));
    }
    Ok(Ok(DataFile {
        file: direct,
        direct: true,
        io_align: off as u64,
        mem_align: mem as usize,
        claim: None,
    }))
}

/// Whether io_uring hands every buffered write to this regular file to its
/// io-wq workers: the filesystem lacks `FOP_BUFFER_WASYNC`, so `io_write`
/// cannot try the write without blocking and punts it, and io-wq runs the
/// writes to one regular file one at a time (`io_wq_hash_work` hashes them by
/// inode). XFS (since Linux 6.0) and btrfs (6.1) set the flag; ext4, tmpfs and
/// the rest do not. Unknown: assume it does.
fn punts_buffered_writes(file: &File) -> bool {
    const XFS_SUPER_MAGIC: u32 = 0x5846_5342;
    const BTRFS_SUPER_MAGIC: u32 = 0x9123_683e;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `st` is valid for writes of one `statfs`.
    if unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return true;
    }
    // SAFETY: fstatfs succeeded, so it filled `st`. The magic numbers are
    // 32-bit; `f_type`'s width varies between architectures.
    let f_type = unsafe { st.assume_init() }.f_type as u32;
    !matches!(f_type, XFS_SUPER_MAGIC | BTRFS_SUPER_MAGIC)
}

/// Buffered writes at least this large stay on the ring even where io_uring
/// serializes them ([`punts_buffered_writes`]). Measured on ext4 (4 writer
/// threads against the ring, 4 alternating rounds): 4 KiB random writes QD32
/// 1.09x on the threads, 16 KiB 1.07x, 32 KiB 1.10x, 64 KiB 1.04x; 128 KiB
/// random writes QD16 0.97x and 128 KiB sequential writes 0.90x.
const THREADED_WRITE_LIMIT: usize = 128 << 10;

/// Runs a [`UringBackend`]'s buffered writes on its writer threads (see the
/// module documentation); receives only [`IoOp::Write`]s already checked
/// against the capacity and counted in [`FileShared::live`].
struct BufferedWrites(Arc<FileShared>);

/// Uncounts one operation from [`FileShared::live`] when dropped.
struct LiveOp<'a>(&'a AtomicUsize);

impl Drop for LiveOp<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl IoExecutor for BufferedWrites {
    type Scratch = ();

    fn execute(&self, _: &mut (), op: IoOp) -> Result<Bytes, Status> {
        let sh = &*self.0;
        // On every way out, a panic included, so a resize never waits forever.
        let _live = LiveOp(&sh.live);
        let IoOp::Write { offset, data, fua } = op else {
            return Err(Status::INTERNAL.with_dnr());
        };
        // FUA: RWF_DSYNC on the second descriptor, as on the ring (see `FileShared::fua`).
        let (fd, flags) = if fua { (sh.fua.as_raw_fd(), libc::RWF_DSYNC) } else { (sh.file.as_raw_fd(), 0) };
        let mut done = 0;
        while done < data.len() {
            let rest = &data[done..];
            let iov = libc::iovec { iov_base: rest.as_ptr().cast_mut().cast(), iov_len: rest.len() };
            let at = (offset + done as u64) as libc::off_t;
            // SAFETY: `iov` describes `rest`, which stays alive and unchanged for the call.
            let n = super::sys::retry_eintr(|| unsafe { libc::pwritev2(fd, &iov, 1, at, flags) })
                .map_err(|e| io_error_to_status(&e))?;
            if n == 0 {
                // No progress, as the ring treats a zero-length completion.
                return Err(Status::WRITE_FAULT);
            }
            done += n as usize;
        }
        Ok(Bytes::new())
    }
}

// ---------------------------------------------------------------------------
// Backend
// ---------------------------------------------------------------------------

/// A namespace stored in a regular file or block device, executed through io_uring.
pub struct UringBackend {
    file: Arc<FileShared>,
    /// Threads for buffered writes where io_uring would serialize them
    /// ([`punts_buffered_writes`]); `None`: writes go through the ring.
    writers: Option<WorkerPool>,
    /// The shared ring and its reaper, started on the first operation from a
    /// submitter without a queue ring.
    shared: Mutex<Option<(Arc<Ring>, JoinHandle<()>)>>,
}

impl UringBackend {
    /// Opens the regular file `path`, like [`FileBackend::open`](super::FileBackend::open):
    /// with `Some(size)` it is created if missing and grown (sparsely) to `size`
    /// bytes if smaller; the capacity is the file length rounded down to whole
    /// `block_size`-byte blocks. Uses `O_DIRECT` where the filesystem allows it
    /// for `block_size`, else buffered I/O (logged at `info`).
    ///
    /// # Errors
    /// [`io::ErrorKind::Unsupported`] when io_uring is not usable here (checked
    /// before the file is touched); otherwise the errors of
    /// [`FileBackend::open`](super::FileBackend::open).
    pub fn open_file(path: impl AsRef<Path>, create_size: Option<u64>, block_size: u32) -> io::Result<Self> {
        Self::open_file_opts(path.as_ref(), create_size, block_size, true, true)
    }

    /// [`UringBackend::open_file_with`] without `create_size`, the file
    /// opened for reading only (a read-only namespace).
    pub fn open_file_read_only(path: impl AsRef<Path>, block_size: u32, direct: bool) -> io::Result<Self> {
        Self::open_file_opts(path.as_ref(), None, block_size, direct, false)
    }

    /// [`UringBackend::open_file`]; with `direct` false the file is used
    /// through the page cache (nvmet's `buffered_io`), never with `O_DIRECT`.
    pub fn open_file_with(
        path: impl AsRef<Path>,
        create_size: Option<u64>,
        block_size: u32,
        direct: bool,
    ) -> io::Result<Self> {
        Self::open_file_opts(path.as_ref(), create_size, block_size, direct, true)
    }

    fn open_file_opts(
        path: &Path,
        create_size: Option<u64>,
        block_size: u32,
        allow_direct: bool,
        writable: bool,
    ) -> io::Result<Self> {
        if !block_size.is_power_of_two() || block_size < 512 {
            return Err(invalid(format!("invalid block size {block_size}")));
        }
        check_available()?;
        let (file, _, size) = super::file::open_sized(path, create_size, block_size, writable)?;
        let direct = if allow_direct {
            open_file_direct(path, &file, block_size, writable)?.map_err(|why| {
                tracing::info!(path = %path.display(), reason = %why, "io_uring backend: O_DIRECT not possible, using the page cache");
            })
        } else {
            Err(())
        };
        let data = direct.unwrap_or(DataFile { file, direct: false, io_align: 1, mem_align: 1, claim: None });
        let fua = data.reopen(path, writable)?;
        Ok(Self::new(data, fua, path, None, block_size, size, writable))
    }

    /// Opens the block device at `path`, like [`BlockBackend::open`](super::BlockBackend::open):
    /// `block_size` `None` uses the device's logical block size; a given size must
    /// be a power-of-two multiple of it. Uses `O_DIRECT` unless the device refuses
    /// it (then buffered I/O, logged at `info`). The device is claimed for this
    /// process ([`super::claim`]).
    ///
    /// # Errors
    /// [`io::ErrorKind::Unsupported`] when io_uring is not usable here (checked
    /// before the device is opened); otherwise the errors of
    /// [`BlockBackend::open`](super::BlockBackend::open).
    pub fn open_block(path: impl AsRef<Path>, block_size: Option<u32>) -> io::Result<Self> {
        Self::open_block_opts(path.as_ref(), block_size, true, true)
    }

    /// [`UringBackend::open_block`] with the device opened for reading only
    /// (a read-only namespace), and not claimed.
    pub fn open_block_read_only(path: impl AsRef<Path>, block_size: Option<u32>) -> io::Result<Self> {
        Self::open_block_opts(path.as_ref(), block_size, false, false)
    }

    /// [`UringBackend::open_block`] without claiming the device
    /// ([`BlockBackend::open_shared`](super::BlockBackend::open_shared)).
    pub fn open_block_shared(path: impl AsRef<Path>, block_size: Option<u32>) -> io::Result<Self> {
        Self::open_block_opts(path.as_ref(), block_size, true, false)
    }

    fn open_block_opts(
        path: &Path,
        block_size: Option<u32>,
        writable: bool,
        exclusive: bool,
    ) -> io::Result<Self> {
        check_available()?;
        let claim = if exclusive { Some(super::claim::claim(path)?) } else { None };
        let open =
            |flags: libc::c_int| OpenOptions::new().read(true).write(writable).custom_flags(flags).open(path);
        let (file, direct) = match open(libc::O_DIRECT) {
            Ok(file) => (file, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::info!(path = %path.display(), "io_uring backend: O_DIRECT refused, using buffered I/O");
                (open(0)?, false)
            }
            Err(e) => return Err(e),
        };
        if writable {
            super::sys::check_writable(&file, path)?;
        }
        let BlockGeometry { block_size, dev_block_size, size, io_hints } =
            block_device_geometry(&file, path, block_size)?;
        let mem_align = match dio_align(&file) {
            Some((mem, _)) if mem.is_power_of_two() && mem as usize <= BUF_ALIGN => mem as usize,
            _ => dev_block_size as usize,
        };
        let data = DataFile { file, direct, io_align: dev_block_size as u64, mem_align, claim };
        let fua = data.reopen(path, writable)?;
        Ok(Self::new(data, fua, path, Some(io_hints), block_size, size, writable))
    }

    /// `writable` false: a read-only namespace, which needs no writer threads.
    /// `io_hints`: a block device's (a regular file has none).
    fn new(
        data: DataFile,
        fua: File,
        path: &Path,
        io_hints: Option<IoHints>,
        block_size: u32,
        size: u64,
        writable: bool,
    ) -> Self {
        let file = Arc::new(FileShared {
            file: data.file,
            fua,
            path: path.to_owned(),
            io_hints,
            direct: data.direct,
            io_align: data.io_align.max(1),
            mem_align: data.mem_align.max(1),
            block_size,
            size: RwLock::new(size),
            size_now: AtomicU64::new(size),
            live: AtomicUsize::new(0),
            rings: Mutex::new(Vec::new()),
            _claim: data.claim,
        });
        let writers = if !writable || file.direct || file.is_block() || !punts_buffered_writes(&file.file) {
            None
        } else {
            match WorkerPool::start("nvmet-uring-wr", DEFAULT_WORKERS, Arc::new(BufferedWrites(file.clone())))
            {
                Ok(pool) => {
                    tracing::info!(path = %path.display(), threads = DEFAULT_WORKERS,
                        "io_uring backend: this filesystem has no async buffered writes (io_uring would run \
                         them one at a time on its worker), so buffered writes under 128 KiB run on writer threads");
                    Some(pool)
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e,
                        "io_uring backend: cannot start writer threads, buffered writes go through io_uring");
                    None
                }
            }
        };
        Self { file, writers, shared: Mutex::new(None) }
    }

    /// The backend's shared ring, started (with its reaper thread) on first use.
    fn shared_ring(&self) -> Result<Arc<Ring>, Status> {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((ring, _)) = &*shared {
            return Ok(ring.clone());
        }
        let started = Ring::new(SQ_ENTRIES, CQ_ENTRIES, None).map(Arc::new).and_then(|ring| {
            let r = ring.clone();
            let reaper =
                std::thread::Builder::new().name("nvmet-uring".into()).spawn(move || reap_shared(&r))?;
            Ok((ring, reaper))
        });
        match started {
            Ok((ring, reaper)) => {
                *shared = Some((ring.clone(), reaper));
                Ok(ring)
            }
            Err(e) => {
                tracing::error!(path = %self.file.path.display(), error = %e, "cannot start the io_uring reaper");
                Err(Status::INTERNAL)
            }
        }
    }

    /// The backing file's or device's path.
    pub fn path(&self) -> &Path {
        &self.file.path
    }

    /// Whether I/O bypasses the page cache (`O_DIRECT`).
    pub fn is_direct(&self) -> bool {
        self.file.direct
    }

    /// The same backend with buffered writes on the ring even where io_uring
    /// serializes them (tests of the ring's buffered write path).
    #[cfg(test)]
    fn without_writer_threads(mut self) -> Self {
        self.writers = None;
        self
    }
}

impl Backend for UringBackend {
    fn size(&self) -> u64 {
        self.file.size_now.load(Ordering::Acquire)
    }

    fn block_size(&self) -> u32 {
        self.file.block_size
    }

    fn volatile_write_cache(&self) -> bool {
        true
    }

    fn io_hints(&self) -> Option<IoHints> {
        self.file.io_hints
    }

    fn allocated_bytes(&self) -> Option<u64> {
        if self.file.is_block() {
            None
        } else {
            super::file_allocated_bytes(&self.file.file)
        }
    }

    fn holds_data(&self, offset: u64, len: u64) -> bool {
        self.file.is_block() || super::file_holds_data(&self.file.file, offset, len)
    }

    fn describe(&self) -> String {
        let kind = if self.file.is_block() { "block" } else { "file" };
        let mode = match (self.file.direct, self.writers.is_some()) {
            (true, _) => "O_DIRECT",
            (false, false) => "buffered",
            (false, true) => "buffered, writes on threads",
        };
        format!("{kind} {} (io_uring, {mode})", self.file.path.display())
    }

    fn resize(&self, new_size: u64) -> Result<(), String> {
        let sh = &*self.file;
        if sh.is_block() {
            return Err("block devices cannot be resized by the target".into());
        }
        let bs = sh.block_size as u64;
        let new_size = new_size / bs * bs;
        if new_size == 0 {
            return Err("cannot resize to less than one block".into());
        }
        // New submissions wait on the lock; in-flight ones (which could re-extend
        // the file after a shrink) finish first.
        let mut size = sh.size.write().unwrap_or_else(PoisonError::into_inner);
        sh.wait_drained();
        sh.file.set_len(new_size).map_err(|e| format!("resize {}: {e}", sh.path.display()))?;
        *size = new_size;
        sh.size_now.store(new_size, Ordering::Release);
        Ok(())
    }

    fn revalidate(&self) -> Result<Option<(u64, u64)>, String> {
        let sh = &*self.file;
        let now = super::sys::store_size(&sh.file, &sh.path, sh.block_size)?;
        if now == sh.size_now.load(Ordering::Acquire) {
            return Ok(None);
        }
        // Operations registered before keep the range they were checked
        // against; nothing to drain, the store is as it is (no truncate here).
        let mut size = sh.size.write().unwrap_or_else(PoisonError::into_inner);
        let old = std::mem::replace(&mut *size, now);
        sh.size_now.store(now, Ordering::Release);
        Ok((old != now).then_some((old, now)))
    }

    fn submit(&self, tag: u32, op: IoOp, io: &QueueIo) -> Option<IoCompletion> {
        self.start_op(tag, op, io, None)
    }

    /// Reads into the queue's (recycled) buffer where its address suits the
    /// descriptor, so steady-state reads allocate nothing.
    fn read_into(&self, tag: u32, offset: u64, buf: BytesMut, io: &QueueIo) -> Option<IoCompletion> {
        self.start_op(tag, IoOp::Read { offset, len: buf.len() }, io, Some(buf))
    }

    fn sync_all(&self) -> Result<(), String> {
        self.file.file.sync_data().map_err(|e| format!("fdatasync {}: {e}", self.file.path.display()))
    }
}

impl UringBackend {
    /// Registers `op` on the queue's ring (submitted by the queue's next
    /// [`QueueRing::submit`]) or, without one, on the shared ring (submitted now).
    fn start_op(&self, tag: u32, op: IoOp, io: &QueueIo, read_buf: Option<BytesMut>) -> Option<IoCompletion> {
        if let (Some(writers), IoOp::Write { offset, data, .. }) = (&self.writers, &op) {
            if data.len() < THREADED_WRITE_LIMIT {
                let (offset, len) = (*offset, data.len() as u64);
                return self.start_threaded_write(writers, tag, (offset, len), op, io);
            }
        }
        let sh = &self.file;
        let queue_ring = io.ring.as_ref().and_then(|q| q.ring_for(sh));
        let shared;
        let ring = match queue_ring {
            Some(r) => r,
            None => match self.shared_ring() {
                Ok(r) => {
                    shared = r;
                    &shared
                }
                Err(status) => return Some(IoCompletion::status(tag, status)),
            },
        };
        let size = sh.size.read().unwrap_or_else(PoisonError::into_inner);
        let kind = match sh.prepare(op, *size, ring, read_buf) {
            Ok(Some(kind)) => kind,
            Ok(None) => return Some(IoCompletion::status(tag, Status::SUCCESS)),
            Err(status) => return Some(IoCompletion::status(tag, status)),
        };
        let sink = queue_ring.is_none().then(|| io.sink.clone());
        sh.live.fetch_add(1, Ordering::AcqRel);
        ring.push(Op { tag, sink, file: sh.clone(), retries: 0, kind });
        drop(size);
        if queue_ring.is_none() {
            ring.enter();
        }
        None
    }

    /// Queues the buffered write `op` (of `len` bytes at `offset`) on the
    /// writer threads. Counted in `live` while the size lock is held, like
    /// ring operations, so a resize waits for it.
    fn start_threaded_write(
        &self,
        writers: &WorkerPool,
        tag: u32,
        (offset, len): (u64, u64),
        op: IoOp,
        io: &QueueIo,
    ) -> Option<IoCompletion> {
        let sh = &self.file;
        let size = sh.size.read().unwrap_or_else(PoisonError::into_inner);
        if !in_range(offset, len, *size) {
            return Some(IoCompletion::status(tag, Status::LBA_RANGE.with_dnr()));
        }
        if len == 0 {
            return Some(IoCompletion::status(tag, Status::SUCCESS));
        }
        sh.live.fetch_add(1, Ordering::AcqRel);
        let refused = writers.submit(tag, op, &io.sink);
        if refused.is_some() {
            // Never queued, so never uncounted by a writer.
            sh.live.fetch_sub(1, Ordering::AcqRel);
        }
        drop(size);
        refused
    }
}

impl Drop for UringBackend {
    fn drop(&mut self) {
        let Some((ring, reaper)) = self.shared.get_mut().unwrap_or_else(PoisonError::into_inner).take()
        else {
            return;
        };
        {
            let mut st = ring.lock_state();
            st.shutdown = true;
            // Wake the reaper now rather than at its next timeout.
            // SAFETY: the state lock is held, so no other `SubmissionQueue` exists.
            let mut sq = unsafe { ring.uring.submission_shared() };
            let nop = opcode::Nop::new().build().user_data(WAKE);
            // SAFETY: a NOP references no memory.
            if unsafe { sq.push(&nop) }.is_ok() {
                st.in_ring += 1;
                st.unsubmitted += 1;
            }
        }
        ring.enter();
        if reaper.thread().id() != std::thread::current().id() {
            let _ = reaper.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sys::{blocks, check_write_zeroes_and_deallocate, run, Loop, TempPath};
    use crate::backend::FileBackend;
    use std::os::unix::fs::FileExt;
    use std::time::Instant;

    /// Opens a file backend, or `None` (with a note) where io_uring is unavailable.
    fn open(t: &TempPath, size: u64, bs: u32) -> Option<UringBackend> {
        match UringBackend::open_file(&t.0, Some(size), bs) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                eprintln!("note: skipping io_uring test: {e}");
                None
            }
            Err(e) => panic!("open {}: {e}", t.0.display()),
        }
    }

    fn pattern(len: usize, seed: u32) -> Bytes {
        (0..len as u32)
            .map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8)
            .collect::<Vec<_>>()
            .into()
    }

    #[test]
    fn uring_write_read_back() {
        let t = TempPath::new("rw");
        let Some(b) = open(&t, 1 << 20, 512) else { return };
        assert_eq!(b.size(), 1 << 20);
        assert_eq!(b.block_size(), 512);
        assert!(b.volatile_write_cache());
        assert!(b.describe().starts_with("file ") && b.describe().contains("io_uring"), "{}", b.describe());
        eprintln!("{}", b.describe());
        let data = pattern(8192, 1);
        assert_eq!(
            run(&b, 1, IoOp::Write { offset: 4096, data: data.clone(), fua: false }).status,
            Status::SUCCESS
        );
        let r = run(&b, 2, IoOp::Read { offset: 4096, len: 8192 });
        assert_eq!(r.status, Status::SUCCESS);
        assert_eq!(&r.data[..], &data[..]);
        assert_eq!(r.data.as_ptr() as usize % BUF_ALIGN, 0, "read data stays in its aligned buffer");
        // Never-written blocks read as zeroes; zero-length operations complete inline.
        let r = run(&b, 3, IoOp::Read { offset: 65536, len: 1024 });
        assert!(r.status.is_success() && r.data.iter().all(|&x| x == 0));
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let c =
            b.submit(4, IoOp::Read { offset: 0, len: 0 }, &QueueIo::detached(tx.clone())).expect("inline");
        assert_eq!((c.tag, c.status, c.data.len()), (4, Status::SUCCESS, 0));
        assert!(b
            .submit(
                5,
                IoOp::Write { offset: 0, data: Bytes::new(), fua: false },
                &QueueIo::detached(tx.clone())
            )
            .is_some());
    }

    #[test]
    fn uring_many_concurrent_submits() {
        let t = TempPath::new("many");
        let Some(b) = open(&t, 4 << 20, 512) else { return };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let n = 256u32;
        for tag in 0..n {
            let data = pattern(4096, tag);
            let op = IoOp::Write { offset: tag as u64 * 4096, data, fua: tag % 17 == 0 };
            assert!(b.submit(tag, op, &QueueIo::detached(tx.clone())).is_none());
        }
        let mut seen = vec![false; n as usize];
        for _ in 0..n {
            let c = rx.blocking_recv().unwrap();
            assert_eq!(c.status, Status::SUCCESS, "tag {}", c.tag);
            assert!(!std::mem::replace(&mut seen[c.tag as usize], true), "tag {} twice", c.tag);
        }
        // Reads, submitted from several threads at once.
        std::thread::scope(|s| {
            for part in 0..4u32 {
                let (b, tx) = (&b, tx.clone());
                s.spawn(move || {
                    for tag in (part..n).step_by(4) {
                        let op = IoOp::Read { offset: tag as u64 * 4096, len: 4096 };
                        assert!(b.submit(1000 + tag, op, &QueueIo::detached(tx.clone())).is_none());
                    }
                });
            }
        });
        let mut seen = vec![false; n as usize];
        for _ in 0..n {
            let c = rx.blocking_recv().unwrap();
            assert_eq!(c.status, Status::SUCCESS);
            let tag = c.tag - 1000;
            assert!(!std::mem::replace(&mut seen[tag as usize], true));
            assert_eq!(&c.data[..], &pattern(4096, tag)[..], "tag {tag}");
        }
        assert!(rx.try_recv().is_err(), "no extra completions");
        let on_disk = std::fs::read(&t.0).unwrap();
        assert_eq!(&on_disk[200 * 4096..201 * 4096], &pattern(4096, 200)[..]);
    }

    /// Submits `ops` through the queue ring of `io` and drives it the way the
    /// transport task does (submit, reap) until all have completed.
    fn run_on_ring(b: &dyn Backend, io: &QueueIo, ops: Vec<(u32, IoOp)>) -> Vec<IoCompletion> {
        let ring = io.ring.as_ref().expect("queue ring");
        let n = ops.len();
        let mut out: Vec<IoCompletion> =
            ops.into_iter().filter_map(|(tag, op)| b.submit(tag, op, io)).collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        while out.len() < n {
            assert!(Instant::now() < deadline, "{} of {n} operations completed", out.len());
            ring.submit();
            if !ring.reap(&mut out) {
                std::thread::yield_now();
            }
        }
        out
    }

    #[test]
    fn uring_queue_ring_completes_on_the_reaping_thread() {
        let t = TempPath::new("qring");
        let Some(b) = open(&t, 8 << 20, 4096) else { return };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let io = QueueIo::with_ring(tx);
        // More operations than the ring's completion queue holds: the rest wait in its FIFO.
        let n = 2 * QUEUE_CQ_ENTRIES;
        let writes = (0..n).map(|tag| {
            let data = pattern(4096, tag);
            (tag, IoOp::Write { offset: tag as u64 * 4096, data, fua: tag % 100 == 0 })
        });
        let done = run_on_ring(&b, &io, writes.collect());
        assert!(done.iter().all(|c| c.status.is_success()));
        let mut tags: Vec<u32> = done.iter().map(|c| c.tag).collect();
        tags.sort_unstable();
        assert!(tags.iter().copied().eq(0..n), "each operation completes once");
        let reads = (0..2048u32).map(|i| (10_000 + i, IoOp::Read { offset: i as u64 * 4096, len: 4096 }));
        for c in run_on_ring(&b, &io, reads.collect()) {
            let block = c.tag - 10_000;
            assert!(c.data[..] == pattern(4096, block)[..], "block {block} reads back what was written");
        }
        assert!(!io.ring.as_ref().unwrap().in_flight());
        assert!(rx.try_recv().is_err(), "nothing went through the channel");
        assert!(b.shared.lock().unwrap().is_none(), "no shared ring, no reaper thread");
        assert_eq!(b.file.live.load(Ordering::Acquire), 0);
    }

    /// Buffered writes under [`THREADED_WRITE_LIMIT`] to a filesystem without
    /// async buffered writes (tmpfs always; the temp directory's when it is
    /// not XFS or btrfs) complete through the queue's channel from the writer
    /// threads, not through its ring; larger ones, those elsewhere, and all
    /// with `O_DIRECT`, through the ring. Either way every
    /// write completes once, FUA ones included, and reads back.
    #[test]
    fn uring_buffered_writes_bypass_the_ring_where_io_uring_serializes_them() {
        let shm = Path::new("/dev/shm");
        let mut cases = vec![(std::env::temp_dir(), false), (std::env::temp_dir(), true)];
        if shm.is_dir() {
            cases.push((shm.to_owned(), false));
        }
        for (dir, direct) in cases {
            let t = TempPath::new_in(&dir, "wthreads");
            let b = match UringBackend::open_file_with(&t.0, Some(4 << 20), 4096, direct) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Unsupported => return,
                Err(e) => panic!("{e}"),
            };
            let punts = punts_buffered_writes(&b.file.file);
            if dir == shm {
                assert!(punts, "tmpfs has no async buffered writes");
            }
            let threaded = !b.is_direct() && punts;
            assert_eq!(b.writers.is_some(), threaded, "{}", b.describe());
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
            let io = QueueIo::with_ring(tx);
            let ring = io.ring.as_ref().unwrap();
            let n = 256u32;
            for tag in 0..n {
                let op =
                    IoOp::Write { offset: tag as u64 * 4096, data: pattern(4096, tag), fua: tag % 16 == 0 };
                assert!(b.submit(tag, op, &io).is_none());
            }
            // Writes of THREADED_WRITE_LIMIT and more stay on the ring.
            let big = pattern(THREADED_WRITE_LIMIT, 7);
            let op = IoOp::Write { offset: 2 << 20, data: big.clone(), fua: false };
            assert!(b.submit(n, op, &io).is_none());
            let n = n + 1;
            let (mut done, mut via_channel) = (Vec::new(), 0);
            let deadline = Instant::now() + Duration::from_secs(20);
            while done.len() < n as usize {
                assert!(Instant::now() < deadline, "{} of {n} writes completed", done.len());
                ring.submit();
                ring.reap(&mut done);
                while let Ok(c) = rx.try_recv() {
                    via_channel += 1;
                    done.push(c);
                }
                std::thread::yield_now();
            }
            assert!(done.iter().all(|c| c.status.is_success()));
            let mut tags: Vec<u32> = done.iter().map(|c| c.tag).collect();
            tags.sort_unstable();
            assert!(tags.iter().copied().eq(0..n), "each write completes once");
            assert_eq!(via_channel, if threaded { n - 1 } else { 0 }, "{}", b.describe());
            assert_eq!(b.file.live.load(Ordering::Acquire), 0);
            let reads = (0..n - 1).map(|i| (1000 + i, IoOp::Read { offset: i as u64 * 4096, len: 4096 }));
            for c in run_on_ring(&b, &io, reads.collect()) {
                assert!(c.data[..] == pattern(4096, c.tag - 1000)[..], "block {} reads back", c.tag - 1000);
            }
            let r = run_on_ring(&b, &io, vec![(999, IoOp::Read { offset: 2 << 20, len: big.len() })]);
            assert!(r[0].data == big, "the large write reads back");
        }
    }

    /// A resize waits for the queue rings' in-flight operations by reaping them
    /// itself (their queue may be blocked on the size lock); their completions
    /// reach the queue's channel.
    #[test]
    fn uring_resize_reaps_queue_rings_it_waits_for() {
        let t = TempPath::new("qresize");
        let Some(b) = open(&t, 1 << 20, 512) else { return };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let io = QueueIo::with_ring(tx);
        for tag in 0..64u32 {
            let op = IoOp::Write { offset: tag as u64 * 4096, data: pattern(4096, tag), fua: false };
            assert!(b.submit(tag, op, &io).is_none());
        }
        // Not even submitted to the kernel yet: the queue task has not run its pass.
        b.resize(2 << 20).unwrap();
        assert_eq!(b.size(), 2 << 20);
        let mut seen = 0u64;
        for _ in 0..64 {
            let c = rx.try_recv().expect("completion delivered by the resize");
            assert!(c.status.is_success());
            seen |= 1 << c.tag;
        }
        assert_eq!(seen, u64::MAX);
        assert!(!io.ring.as_ref().unwrap().in_flight());
        let r = run_on_ring(&b, &io, vec![(1, IoOp::Read { offset: 63 * 4096, len: 4096 })]);
        assert_eq!(&r[0].data[..], &pattern(4096, 63)[..]);
    }

    /// Queues that close with operations in flight return at once; the
    /// operations still complete (their buffers live until then), drained by
    /// one thread for all of them.
    #[test]
    fn uring_queue_ring_dropped_with_io_in_flight() {
        let t = TempPath::new("qdrop");
        let Some(b) = open(&t, 4 << 20, 4096) else { return };
        const QUEUES: u32 = 8;
        for q in 0..QUEUES {
            let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
            let io = QueueIo::with_ring(tx);
            for i in 0..512 / QUEUES {
                let tag = q * (512 / QUEUES) + i;
                let op = IoOp::Write { offset: tag as u64 * 4096, data: pattern(4096, tag), fua: false };
                assert!(b.submit(tag, op, &io).is_none());
            }
            // The last queue closes before its pass submitted anything to the kernel.
            if q + 1 < QUEUES {
                io.ring.as_ref().unwrap().submit();
            }
            drop(io);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while b.file.live.load(Ordering::Acquire) > 0 {
            assert!(Instant::now() < deadline, "in-flight operations never completed");
            std::thread::sleep(Duration::from_millis(1));
        }
        for tag in [0, 63, 64, 511] {
            let r = run(&b, 1, IoOp::Read { offset: tag as u64 * 4096, len: 4096 });
            assert_eq!(&r.data[..], &pattern(4096, tag)[..], "block {tag}");
        }
        // Thread names are cut to 15 bytes in /proc.
        let drainers = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("comm")).ok())
            .filter(|comm| comm.trim_end() == "nvmet-uring-dra")
            .count();
        assert_eq!(drainers, 1, "one drain thread for every closed queue");
    }

    /// A sleeping queue task is woken through the ring's eventfd.
    #[tokio::test]
    async fn uring_queue_ring_wakes_through_its_eventfd() {
        let t = TempPath::new("qwake");
        let Some(b) = open(&t, 1 << 20, 4096) else { return };
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let io = QueueIo::with_ring(tx);
        let ring = io.ring.as_ref().unwrap();
        for round in 0..20u32 {
            let op = IoOp::Write { offset: 0, data: pattern(4096, round), fua: round % 2 == 0 };
            assert!(b.submit(round, op, &io).is_none());
            ring.submit();
            let mut out = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(10);
            while out.is_empty() {
                assert!(Instant::now() < deadline, "no completion in round {round}");
                tokio::time::timeout(Duration::from_secs(10), ring.ready()).await.expect("eventfd wake-up");
                ring.reap(&mut out);
            }
            assert_eq!((out[0].tag, out[0].status), (round, Status::SUCCESS));
        }
    }

    #[test]
    fn uring_fua_and_flush_are_on_disk() {
        let t = TempPath::new("fua");
        let Some(b) = open(&t, 1 << 20, 4096) else { return };
        let data = pattern(16384, 7);
        assert!(run(&b, 1, IoOp::Write { offset: 8192, data: data.clone(), fua: true }).status.is_success());
        assert!(run(&b, 2, IoOp::Write { offset: 65536, data: data.slice(..4096), fua: false })
            .status
            .is_success());
        assert_eq!(run(&b, 3, IoOp::Flush).status, Status::SUCCESS);
        assert!(b.sync_all().is_ok());
        let on_disk = std::fs::read(&t.0).unwrap();
        assert_eq!(on_disk.len(), 1 << 20);
        assert_eq!(&on_disk[8192..8192 + 16384], &data[..]);
        assert_eq!(&on_disk[65536..65536 + 4096], &data[..4096]);
    }

    /// FUA (RWF_DSYNC) and Flush (IORING_OP_FSYNC) through the page cache.
    #[test]
    fn uring_fua_and_flush_leave_nothing_dirty() {
        let t = TempPath::new("fua-dirty");
        let b = match UringBackend::open_file_with(&t.0, Some(2 << 20), 4096, false) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Unsupported => return,
            Err(e) => panic!("{e}"),
        };
        crate::backend::sys::check_fua_and_flush_leave_nothing_dirty(&b, &t.0);
        drop(b);
        // And with the writes on the ring.
        let t = TempPath::new("fua-dirty-ring");
        let b =
            UringBackend::open_file_with(&t.0, Some(2 << 20), 4096, false).unwrap().without_writer_threads();
        crate::backend::sys::check_fua_and_flush_leave_nothing_dirty(&b, &t.0);
    }

    #[test]
    fn uring_write_zeroes_punch_hole_and_deallocate() {
        let t = TempPath::new("zero");
        let Some(b) = open(&t, 8 << 20, 4096) else { return };
        check_write_zeroes_and_deallocate(&b, &t.0);
        let mib = 1usize << 20;
        // And the file itself says so.
        let on_disk = std::fs::read(&t.0).unwrap();
        assert!(on_disk[..mib + 4096].iter().all(|&x| x == 0));
        assert!(on_disk[mib + 4096..2 * mib].iter().all(|&x| x == 0xA5));
    }

    /// tmpfs has no `FALLOC_FL_ZERO_RANGE`: Write Zeroes falls back to writing zeroes.
    #[test]
    fn uring_write_zeroes_by_writing_on_tmpfs() {
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            eprintln!("note: skipping tmpfs zeroing test: no /dev/shm");
            return;
        }
        let t = TempPath::new_in(shm, "tmpfs");
        let Some(b) = open(&t, 2 << 20, 512) else { return };
        let len = ZEROES_LEN + 3 * 512;
        assert!(run(&b, 1, IoOp::Write { offset: 0, data: Bytes::from(vec![7; 2 << 20]), fua: false })
            .status
            .is_success());
        let z = run(&b, 2, IoOp::WriteZeroes { offset: 512, len: len as u64, deallocate: false });
        assert_eq!(z.status, Status::SUCCESS);
        let r = run(&b, 3, IoOp::Read { offset: 0, len: len + 1024 });
        assert!(r.data[..512].iter().all(|&x| x == 7));
        assert!(r.data[512..512 + len].iter().all(|&x| x == 0));
        assert!(r.data[512 + len..].iter().all(|&x| x == 7));
    }

    #[test]
    fn uring_revalidate_follows_the_file() {
        let t = TempPath::new("urevalidate");
        let Some(b) = open(&t, 1 << 20, 512) else { return };
        crate::backend::sys::check_revalidate_follows_the_store(&b, 1 << 20, |len| {
            crate::backend::sys::set_file_len(&t.0, len)
        });
    }

    #[test]
    fn uring_out_of_range_is_lba_range() {
        let t = TempPath::new("oob");
        let Some(b) = open(&t, 1 << 20, 512) else { return };
        crate::backend::sys::check_out_of_range_is_lba_range(&b, &t.0);
    }

    #[test]
    fn uring_direct_with_unaligned_input() {
        let t = TempPath::new("direct");
        let Some(b) = open(&t, 4 << 20, 4096) else { return };
        if !b.is_direct() {
            eprintln!("note: {} has no O_DIRECT here; checking the buffered path", t.0.display());
        }
        // Data starting one byte into its allocation is misaligned for O_DIRECT.
        let backing = pattern((1 << 20) + 1, 3);
        let data = backing.slice(1..);
        assert_ne!(data.as_ptr() as usize % 512, 0);
        let w = run(&b, 1, IoOp::Write { offset: 1 << 20, data: data.clone(), fua: false });
        assert_eq!(w.status, Status::SUCCESS);
        let w = run(&b, 2, IoOp::Write { offset: 3 << 20, data: data.slice(4096..8192), fua: true });
        assert_eq!(w.status, Status::SUCCESS);
        let r = run(&b, 3, IoOp::Read { offset: 1 << 20, len: 1 << 20 });
        assert!(r.status.is_success() && r.data[..] == data[..]);
        let r = run(&b, 4, IoOp::Read { offset: 3 << 20, len: 4096 });
        assert_eq!(&r.data[..], &data[4096..8192]);
        if b.is_direct() {
            // Offsets off the filesystem's O_DIRECT alignment are refused, not half-done.
            let r = run(&b, 5, IoOp::Read { offset: 1, len: 4096 });
            assert_eq!(r.status, Status::INVALID_FIELD.with_dnr());
        }
        assert_eq!(run(&b, 6, IoOp::Flush).status, Status::SUCCESS);
        let on_disk = std::fs::read(&t.0).unwrap();
        assert!(on_disk[1 << 20..2 << 20] == data[..]);
    }

    #[test]
    fn uring_buffered_when_direct_not_wanted() {
        let t = TempPath::new("buffered");
        let b = match UringBackend::open_file_opts(&t.0, Some(1 << 20), 512, false, true) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Unsupported => return,
            Err(e) => panic!("{e}"),
        };
        assert!(!b.is_direct());
        assert!(b.describe().contains("buffered"));
        let data = pattern(1000, 9).slice(1..);
        // Buffered I/O takes any offset and length.
        assert!(run(&b, 1, IoOp::Write { offset: 3, data: data.clone(), fua: true }).status.is_success());
        let r = run(&b, 2, IoOp::Read { offset: 3, len: data.len() });
        assert_eq!(&r.data[..], &data[..]);
    }

    /// A read of blocks the file no longer holds fails with Internal Error,
    /// as nvmet fails a short read (`nvmet_file_io_done`); it used to succeed
    /// with zeroes in place of the data. Buffered and `O_DIRECT`.
    #[test]
    fn uring_read_past_truncated_end_fails() {
        for direct in [false, true] {
            let t = TempPath::new("trunc");
            let b = match UringBackend::open_file_opts(&t.0, Some(1 << 20), 4096, direct, true) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Unsupported => return,
                Err(e) => panic!("{e}"),
            };
            assert!(run(&b, 1, IoOp::Write { offset: 0, data: Bytes::from(vec![9; 8192]), fua: false })
                .status
                .is_success());
            // Someone else shrinks the file behind the backend's back.
            std::fs::OpenOptions::new().write(true).open(&t.0).unwrap().set_len(4096).unwrap();
            let r = run(&b, 2, IoOp::Read { offset: 0, len: 3 * 4096 });
            assert_eq!(r.status, Status::INTERNAL.with_dnr(), "{}", b.describe());
            let r = run(&b, 3, IoOp::Read { offset: 8192, len: 4096 });
            assert_eq!(r.status, Status::INTERNAL.with_dnr(), "{}", b.describe());
            let r = run(&b, 4, IoOp::Read { offset: 0, len: 4096 });
            assert_eq!((r.status, &r.data[..]), (Status::SUCCESS, &[9; 4096][..]), "{}", b.describe());
        }
    }

    /// With `O_DIRECT` (writes on the ring) and through the page cache (on
    /// most filesystems, writes on the writer threads).
    #[test]
    fn uring_resize_waits_for_in_flight_io() {
        let t = TempPath::new("resize");
        let Some(b) = open(&t, 1 << 20, 512) else { return };
        resize_waits_for_in_flight_io(&b, &t.0);
        drop(b);
        let t = TempPath::new("resize-buffered");
        let b = UringBackend::open_file_with(&t.0, Some(1 << 20), 512, false).unwrap();
        resize_waits_for_in_flight_io(&b, &t.0);
    }

    fn resize_waits_for_in_flight_io(b: &UringBackend, path: &Path) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for tag in 0..64u32 {
            let op = IoOp::Write { offset: tag as u64 * 4096, data: pattern(4096, tag), fua: false };
            assert!(b.submit(tag, op, &QueueIo::detached(tx.clone())).is_none());
        }
        b.resize((4 << 20) + 100).unwrap();
        assert_eq!(b.size(), 4 << 20);
        assert_eq!(std::fs::metadata(path).unwrap().len(), 4 << 20);
        for _ in 0..64 {
            assert!(rx.blocking_recv().unwrap().status.is_success());
        }
        let w =
            run(b, 100, IoOp::Write { offset: (4 << 20) - 512, data: Bytes::from(vec![1; 512]), fua: false });
        assert!(w.status.is_success());
        b.resize(1 << 19).unwrap();
        assert_eq!(b.size(), 1 << 19);
        assert_eq!(std::fs::metadata(path).unwrap().len(), 1 << 19);
        let r = run(b, 101, IoOp::Read { offset: 1 << 19, len: 512 });
        assert_eq!(r.status, Status::LBA_RANGE.with_dnr());
        let r = run(b, 102, IoOp::Read { offset: 4096, len: 4096 });
        assert_eq!(&r.data[..], &pattern(4096, 1)[..]);
        assert!(b.resize(100).is_err());
    }

    /// A write whose writeback fails (here: ENOSPC from the full tmpfs under
    /// the loop device under ext4) makes the next Flush fail, also when a FUA
    /// write came in between: on io_uring the FUA write (RWF_DSYNC) used the
    /// Flush's descriptor, so it consumed the error (`errseq_t`, one cursor
    /// per open file) and the Flush reported success for data never written.
    /// The thread-pool engine (O_DSYNC descriptor for FUA) is checked too.
    /// Needs root: runs this test again as a child in its own mount namespace,
    /// so every mount goes away with it (the loop device detaches itself).
    #[test]
    fn writeback_error_reaches_the_next_flush_after_a_fua_write() {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        const CHILD: &str = "NVMEOF_TEST_WRITEBACK_CHILD";
        if let Some(dir) = std::env::var_os(CHILD) {
            return writeback_error_child(Path::new(&dir));
        }
        // SAFETY: trivial libc call.
        if unsafe { libc::geteuid() } != 0 {
            return eprintln!("note: skipping writeback-error test: not root");
        }
        let dir = std::env::temp_dir().join(format!("nvmeof-wb-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("tmpfs")).unwrap();
        std::fs::create_dir_all(dir.join("ext4")).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .args(["--exact", "--nocapture", "--test-threads=1"])
            .arg("backend::uring::tests::writeback_error_reaches_the_next_flush_after_a_fua_write")
            .env(CHILD, &dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: only unshare(2) and mount(2), async-signal-safe, between fork and exec.
        unsafe {
            child.pre_exec(|| {
                if libc::unshare(libc::CLONE_NEWNS) != 0
                    || libc::mount(
                        c"none".as_ptr(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let mut child = match child.spawn() {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return eprintln!("note: skipping writeback-error test: no private mount namespace: {e}");
            }
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = child.wait_with_output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        for l in log.lines().filter(|l| l.starts_with("note:")) {
            eprintln!("{l}");
        }
        assert!(status.success(), "child {status:?}:\n{log}");
    }

    /// The child of [`writeback_error_reaches_the_next_flush_after_a_fua_write`],
    /// in a private mount namespace: ext4 (no journal) on a loop device over a
    /// 16 MiB tmpfs, under `dir`.
    fn writeback_error_child(dir: &Path) {
        use std::io::Write;
        use std::process::Command;
        let (tmpfs, ext4) = (dir.join("tmpfs"), dir.join("ext4"));
        let sh = |args: &[&str]| -> Option<String> {
            match Command::new(args[0]).args(&args[1..]).output() {
                Ok(o) if o.status.success() => Some(String::from_utf8_lossy(&o.stdout).trim().to_owned()),
                Ok(o) => {
                    eprintln!(
                        "note: skipping writeback-error test: {args:?}: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    );
                    None
                }
                Err(e) => {
                    eprintln!("note: skipping writeback-error test: {}: {e}", args[0]);
                    None
                }
            }
        };
        let t = tmpfs.to_str().unwrap();
        let Some(_) = sh(&["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", t]) else { return };
        let img = tmpfs.join("img");
        File::create(&img).unwrap().set_len(64 << 20).unwrap();
        let Some(dev) = sh(&["losetup", "--find", "--show", img.to_str().unwrap()]) else { return };
        let mounted = sh(&["mkfs.ext4", "-q", "-F", "-O", "^has_journal", &dev]).is_some()
            && sh(&["mount", "-o", "noatime,errors=continue", &dev, ext4.to_str().unwrap()]).is_some();
        // Detached now, or (while mounted) as soon as the mount namespace goes.
        let _ = Command::new("losetup").arg("-d").arg(&dev).status();
        if !mounted {
            return;
        }
        // ext4: io_uring's buffered writes run on the writer threads; "uring-ring" keeps them on the ring.
        for engine in ["threads", "uring", "uring-ring"] {
            let path = ext4.join(engine);
            // Allocated but unwritten, so writing it needs room in the tmpfs.
            let f = File::create(&path).unwrap();
            super::super::file::fallocate(&f, 0, 0, 8 << 20).unwrap();
            f.sync_all().unwrap();
            drop(f);
            let b: Box<dyn Backend> = match engine {
                "threads" => Box::new(FileBackend::open(&path, None, 4096).unwrap()),
                _ => match UringBackend::open_file_with(&path, None, 4096, false) {
                    Ok(b) if engine == "uring-ring" => Box::new(b.without_writer_threads()),
                    Ok(b) => Box::new(b),
                    Err(e) if e.kind() == io::ErrorKind::Unsupported => return,
                    Err(e) => panic!("{e}"),
                },
            };
            let filler = tmpfs.join("filler");
            let mut fill = File::create(&filler).unwrap();
            let mib = vec![0xEE; 1 << 20];
            for _ in 0..64 {
                if fill.write_all(&mib).is_err() {
                    break;
                }
            }
            let a = IoOp::Write { offset: 0, data: Bytes::from(vec![1; 4096]), fua: false };
            assert_eq!(run(&*b, 1, a).status, Status::SUCCESS, "{engine}: write A");
            // Writeback of A, started (and its error seen) through another descriptor.
            let other = File::open(&path).unwrap();
            assert!(other.sync_data().is_err(), "{engine}: writeback of A did not fail");
            let fua = IoOp::Write { offset: 4 << 20, data: Bytes::from(vec![2; 4096]), fua: true };
            let _ = run(&*b, 2, fua);
            let flush = run(&*b, 3, IoOp::Flush).status;
            assert!(!flush.is_success(), "{engine}: Flush succeeded after A's writeback failed");
            drop(b);
            drop(fill);
            std::fs::remove_file(&filler).unwrap();
        }
    }

    #[test]
    fn uring_drop_completes_in_flight_io() {
        let t = TempPath::new("drop");
        let Some(b) = open(&t, 8 << 20, 4096) else { return };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // More operations than the ring holds at once, so some wait in the FIFO.
        let n = 5000u32;
        for tag in 0..n {
            let op = if tag % 2 == 0 {
                IoOp::Read { offset: (tag as u64 % 2048) * 4096, len: 4096 }
            } else {
                IoOp::Write {
                    offset: (tag as u64 % 2048) * 4096,
                    data: Bytes::from(vec![1; 4096]),
                    fua: false,
                }
            };
            assert!(b.submit(tag, op, &QueueIo::detached(tx.clone())).is_none());
        }
        drop(b);
        let mut count = 0;
        while let Ok(c) = rx.try_recv() {
            assert!(c.status.is_success());
            count += 1;
        }
        assert_eq!(count, n, "every operation completed before drop returned");
    }

    #[test]
    fn uring_open_rules() {
        let t = TempPath::new("rules");
        match UringBackend::open_file(&t.0, None, 512) {
            Err(e) if e.kind() == io::ErrorKind::Unsupported => return,
            r => assert!(r.is_err(), "must exist without create_size"),
        }
        assert!(
            UringBackend::open_file(&t.0, Some(4096), 1000).is_err(),
            "block size must be a power of two"
        );
        assert!(UringBackend::open_file(std::env::temp_dir(), None, 512).is_err(), "directories are refused");
        let b = UringBackend::open_file(&t.0, Some((1 << 30) + 100), 4096).unwrap();
        assert_eq!(b.size(), 1 << 30);
        assert!(blocks(&t.0) < 64, "sparse");
        assert_eq!(b.path(), t.0.as_path());
        drop(b);
        assert!(UringBackend::open_block(&t.0, None).is_err(), "a regular file is not a block device");
    }

    #[test]
    fn uring_engine_selection_in_open_backend() {
        use crate::config::{IoEngine, NamespaceConfig, NamespaceSource};
        let t = TempPath::new("engine");
        let ns = |io_engine, buffered_io| NamespaceConfig {
            nsid: None,
            source: NamespaceSource::File { path: t.0.clone(), size: Some(1 << 20), io_engine, buffered_io },
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
        };
        let threads = crate::server::open_backend(&ns(IoEngine::Threads, true)).unwrap();
        assert!(!threads.describe().contains("io_uring"), "{}", threads.describe());
        drop(threads);
        assert!(
            ns(IoEngine::Threads, false).check_engine().is_err(),
            "the thread pool has no O_DIRECT for files"
        );
        let available = check_available().is_ok();
        // The default for files: io_uring through the page cache.
        let auto = crate::server::open_backend(&ns(IoEngine::FILE_DEFAULT, true)).unwrap();
        let want = if available { "(io_uring, buffered" } else { "file " };
        assert!(auto.describe().contains(want), "{}", auto.describe());
        drop(auto);
        match crate::server::open_backend(&ns(IoEngine::Uring, false)) {
            Ok(b) => {
                assert!(available && b.describe().contains("io_uring"));
                // O_DIRECT where the filesystem allows it (else the page cache, logged).
                let f = UringBackend::open_file(&t.0, None, 512).unwrap();
                assert_eq!(b.describe(), f.describe());
            }
            Err(e) => assert!(!available && e.kind() == io::ErrorKind::Unsupported, "{e}"),
        }
    }

    /// `O_ACCMODE` of `f`'s open flags.
    fn access_mode(f: &File) -> libc::c_int {
        // SAFETY: F_GETFL on an open descriptor.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) & libc::O_ACCMODE }
    }

    #[test]
    fn uring_read_only_file_and_loop_device() {
        let t = TempPath::new("uring-ro");
        std::fs::write(&t.0, vec![0xC3u8; 64 << 10]).unwrap();
        assert!(UringBackend::open_file_opts(&t.0, Some(1 << 20), 512, false, false).is_err(), "no size");
        for direct in [false, true] {
            let b = match UringBackend::open_file_read_only(&t.0, 512, direct) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                    eprintln!("note: skipping io_uring read-only test: {e}");
                    return;
                }
                Err(e) => panic!("{e}"),
            };
            assert_eq!(
                (access_mode(&b.file.file), access_mode(&b.file.fua)),
                (libc::O_RDONLY, libc::O_RDONLY)
            );
            assert_eq!(b.size(), 64 << 10);
            let r = run(&b, 1, IoOp::Read { offset: 4096, len: 4096 });
            assert!(r.status.is_success() && r.data.iter().all(|&x| x == 0xC3), "direct {direct}");
            assert!(run(&b, 2, IoOp::Flush).status.is_success());
        }
        assert_eq!(std::fs::metadata(&t.0).unwrap().len(), 64 << 10, "not grown");
        let lo = match Loop::attach(4 << 20) {
            Ok(lo) => lo,
            Err(why) => {
                eprintln!("note: skipping io_uring read-only loop-device test: {why}");
                return;
            }
        };
        let b = UringBackend::open_block_read_only(&lo.dev, None).unwrap();
        assert_eq!((access_mode(&b.file.file), access_mode(&b.file.fua)), (libc::O_RDONLY, libc::O_RDONLY));
        assert!(run(&b, 3, IoOp::Read { offset: 0, len: 4096 }).status.is_success());
    }

    #[test]
    fn uring_loop_device_io() {
        let lo = match Loop::attach(16 << 20) {
            Ok(lo) => lo,
            Err(why) => {
                eprintln!("note: skipping io_uring loop-device test: {why}");
                return;
            }
        };
        let b = match UringBackend::open_block(&lo.dev, None) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                eprintln!("note: skipping io_uring loop-device test: {e}");
                return;
            }
            Err(e) => panic!("open {}: {e}", lo.dev),
        };
        eprintln!("{} lbs={}", b.describe(), b.block_size());
        assert_eq!(b.size(), 16 << 20);
        assert!(b.describe().starts_with("block /dev/loop"));
        crate::backend::sys::check_io_hints_match_sysfs(&b, &lo.dev);
        if b.block_size() == 512 {
            crate::backend::sys::check_revalidate_follows_the_store(&b, 16 << 20, |len| lo.set_len(len));
        }
        // A block namespace without a configured engine opens with io_uring
        // (IoEngine::BLOCK_DEFAULT), as `--block` and a config file without
        // `io_engine` do.
        let default_ns = crate::config::NamespaceConfig {
            nsid: None,
            source: crate::config::NamespaceSource::Block {
                path: lo.dev.clone().into(),
                io_engine: crate::config::IoEngine::BLOCK_DEFAULT,
                exclusive: true,
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
        };
        let d = crate::server::open_backend(&default_ns).unwrap();
        assert!(d.describe().contains("(io_uring, O_DIRECT)"), "{}", d.describe());
        drop(d);
        assert!(b.resize(32 << 20).is_err());
        assert!(UringBackend::open_block(&lo.dev, Some(100)).is_err());
        let bs = b.block_size() as u64;

        let backing = pattern((1 << 20) + 1, 5);
        let data = backing.slice(1..);
        assert_eq!(
            run(&b, 1, IoOp::Write { offset: 1 << 20, data: data.clone(), fua: false }).status,
            Status::SUCCESS
        );
        let w = run(&b, 2, IoOp::Write { offset: 8 << 20, data: data.slice(..4096), fua: true });
        assert_eq!(w.status, Status::SUCCESS);
        assert_eq!(run(&b, 3, IoOp::Flush).status, Status::SUCCESS);
        let r = run(&b, 4, IoOp::Read { offset: 1 << 20, len: 1 << 20 });
        assert!(r.status.is_success() && r.data[..] == data[..]);
        let r = run(&b, 5, IoOp::Read { offset: 8 << 20, len: 4096 });
        assert_eq!(&r.data[..], &data[..4096]);

        let z = run(&b, 6, IoOp::WriteZeroes { offset: 1 << 20, len: 65536, deallocate: false });
        assert_eq!(z.status, Status::SUCCESS);
        let z = run(&b, 7, IoOp::WriteZeroes { offset: (1 << 20) + 65536, len: 65536, deallocate: true });
        assert_eq!(z.status, Status::SUCCESS);
        let d = run(&b, 8, IoOp::Deallocate { ranges: vec![((1 << 20) + 131072, 4096)] });
        assert_eq!(d.status, Status::SUCCESS);
        let r = run(&b, 9, IoOp::Read { offset: 1 << 20, len: 131072 + 8192 });
        assert!(r.data[..131072 + 4096].iter().all(|&x| x == 0));
        assert_eq!(&r.data[131072 + 4096..], &data[131072 + 4096..131072 + 8192]);

        let end = b.size();
        let lba_range = Status::LBA_RANGE.with_dnr();
        assert_eq!(run(&b, 11, IoOp::Read { offset: end - bs, len: 2 * bs as usize }).status, lba_range);
        let wz = IoOp::WriteZeroes { offset: end, len: bs, deallocate: true };
        assert_eq!(run(&b, 12, wz).status, lba_range);
        assert_eq!(
            run(&b, 13, IoOp::Read { offset: 1, len: bs as usize }).status,
            Status::INVALID_FIELD.with_dnr()
        );
        assert!(run(&b, 14, IoOp::Read { offset: end - bs, len: bs as usize }).status.is_success());
        assert!(b.sync_all().is_ok());
        drop(b);
        // What the backend wrote is in the backing file.
        let backing_file = std::fs::read(&lo.file).unwrap();
        assert_eq!(&backing_file[8 << 20..(8 << 20) + 4096], &data[..4096]);
        drop(lo);
    }

    /// Keeps `qd` random 4 KiB reads in flight from one thread for `dur`; returns completions/s.
    /// io_uring backends run on a queue ring that this thread submits and
    /// reaps (polling it), as a target queue does; the thread pool's
    /// completions are awaited on the channel.
    fn qd_reads(b: &dyn Backend, qd: u32, dur: Duration) -> f64 {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let io = QueueIo::with_ring(tx);
        let ring = io.ring.as_ref().unwrap();
        let blocks = b.size() / 4096;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % blocks * 4096
        };
        for tag in 0..qd {
            if let Some(c) = b.submit(tag, IoOp::Read { offset: next(), len: 4096 }, &io) {
                panic!("inline completion {:?}", c.status);
            }
        }
        ring.submit();
        let on_ring = ring.in_flight();
        let mut reaped: Vec<IoCompletion> = Vec::new();
        let mut wait = || loop {
            if !on_ring {
                return rx.blocking_recv().unwrap();
            }
            if let Some(c) = reaped.pop() {
                return c;
            }
            ring.submit();
            ring.reap(&mut reaped);
        };
        let start = Instant::now();
        let mut done = 0u64;
        while start.elapsed() < dur {
            let c = wait();
            assert!(c.status.is_success());
            done += 1;
            assert!(b.submit(c.tag, IoOp::Read { offset: next(), len: 4096 }, &io).is_none());
        }
        let rate = done as f64 / start.elapsed().as_secs_f64();
        for _ in 0..qd {
            wait();
        }
        rate
    }

    /// The thread-pool engine reading with `O_DIRECT` (what `BlockBackend` does),
    /// as the like-for-like baseline of the comparison.
    struct DirectThreads {
        pool: crate::backend::file::WorkerPool,
        size: u64,
    }

    struct DirectExec(File);

    impl crate::backend::file::IoExecutor for DirectExec {
        type Scratch = ();

        fn execute(&self, _: &mut (), op: IoOp) -> Result<Bytes, Status> {
            let IoOp::Read { offset, len } = op else { return Err(Status::INVALID_OPCODE) };
            let buf = AlignedBuf::new_uninit(len);
            // SAFETY: `buf` is valid for `len` bytes of writes.
            unsafe { crate::backend::file::pread_exact_raw(&self.0, buf.ptr.as_ptr(), len, offset) }
                .map_err(|e| io_error_to_status(&e))?;
            Ok(Bytes::from_owner(buf))
        }
    }

    impl Backend for DirectThreads {
        fn size(&self) -> u64 {
            self.size
        }
        fn block_size(&self) -> u32 {
            4096
        }
        fn volatile_write_cache(&self) -> bool {
            true
        }
        fn describe(&self) -> String {
            "threads O_DIRECT".into()
        }
        fn resize(&self, _: u64) -> Result<(), String> {
            Err("no".into())
        }
        fn submit(&self, tag: u32, op: IoOp, io: &QueueIo) -> Option<IoCompletion> {
            self.pool.submit(tag, op, &io.sink)
        }
    }

    /// Information only: `cargo test --release -p nvmeof-target uring_compare -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement; run with --release --ignored --nocapture"]
    fn uring_compare_random_reads() {
        let t = TempPath::new("bench");
        let size = 256u64 << 20;
        {
            let f = File::create(&t.0).unwrap();
            let chunk = pattern(1 << 20, 0);
            for i in 0..256 {
                f.write_all_at(&chunk, i << 20).unwrap();
            }
            f.sync_all().unwrap();
        }
        let Some(probe) = open(&t, size, 4096) else { return };
        drop(probe);
        let dur = Duration::from_secs(2);
        let direct = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&t.0).unwrap();
        let engines: Vec<(&str, Box<dyn Backend>)> = vec![
            (
                "threads, buffered (FileBackend, 4 workers)",
                Box::new(FileBackend::open(&t.0, None, 4096).unwrap()),
            ),
            (
                "uring, buffered (polling its queue ring)",
                Box::new(UringBackend::open_file_with(&t.0, None, 4096, false).unwrap()),
            ),
            (
                "threads, O_DIRECT (4 workers)",
                Box::new(DirectThreads {
                    pool: crate::backend::file::WorkerPool::start("bench", 4, Arc::new(DirectExec(direct)))
                        .unwrap(),
                    size,
                }),
            ),
            (
                "uring, O_DIRECT (polling its queue ring)",
                Box::new(UringBackend::open_file(&t.0, None, 4096).unwrap()),
            ),
        ];
        eprintln!("4 KiB random reads, 256 MiB file, one submitting thread, {} CPUs:", num_cpus());
        for (name, b) in &engines {
            let qd32 = qd_reads(&**b, 32, dur);
            let qd1 = qd_reads(&**b, 1, dur);
            eprintln!("  {name:<44} QD32 {qd32:>9.0}/s   QD1 {qd1:>8.0}/s ({:.1} us)", 1e6 / qd1);
        }
    }

    fn num_cpus() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}
