//! io_uring backend for regular files and block devices.
//!
//! One io_uring instance per backend. Submission happens on the caller's thread
//! (the queue task): [`Backend::submit`] checks the range, registers the
//! operation, pushes its SQE under a short lock and calls `io_uring_enter`
//! without waiting. A dedicated reaper thread waits on the completion queue and
//! sends each finished operation straight to the submitting queue's
//! [`CompletionSink`] with its tag, so the channel send is the only hop.
//!
//! Only the reaper reads the completion queue; submission-queue pushes (by
//! submitters and by the reaper, which resubmits short transfers and retries)
//! are serialized by the state lock. Several threads may call `io_uring_enter`
//! at once; the kernel serializes them and only consumes entries whose tail has
//! been published.
//!
//! At most `cq_entries - WAKE_RESERVE` operations are in the kernel at a time
//! (so the completion queue never overflows); further operations wait in a FIFO
//! that the reaper feeds into the ring as completions arrive.
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
//!   (the file was truncated behind our back) reads the rest as zeroes, like
//!   the thread-pool backends; a write that makes no progress fails with
//!   [`Status::WRITE_FAULT`].
//! - Flush is `IORING_OP_FSYNC` with `DATASYNC`; FUA writes carry `RWF_DSYNC`
//!   (a FUA request on block devices), so they are durable on completion.
//! - Write Zeroes / Deallocate use `IORING_OP_FALLOCATE`: deallocation tries
//!   `PUNCH_HOLE` (an unmapping write-zeroes on block devices), then
//!   `ZERO_RANGE` (on block devices the kernel zeroes with its own fallback);
//!   when the filesystem supports neither, zeroes are written from a static
//!   aligned buffer through the ring.
//! - Resize (regular files): new submissions wait on the size lock while the
//!   resize waits for every in-flight operation to finish, then truncates.
//!
//! [`UringBackend::open_file`] / [`UringBackend::open_block`] fail with
//! [`io::ErrorKind::Unsupported`] when io_uring is not usable here (seccomp,
//! `kernel.io_uring_disabled`, an old kernel); callers may then fall back to the
//! thread-pool backends.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use io_uring::{opcode, squeue, types, IoUring, Probe};
use nvmeof_common::Status;

use super::file::{in_range, is_unsupported, ZEROES, ZEROES_LEN};
use super::sys::{block_device_geometry, invalid, AlignedBuf, BlockGeometry, BUF_ALIGN};
use super::{io_error_to_status, Backend, CompletionSink, IoCompletion, IoOp};

/// Submission-queue entries per ring.
const SQ_ENTRIES: u32 = 256;
/// Completion-queue entries per ring (bounds the operations in the kernel).
const CQ_ENTRIES: u32 = 4096;
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
/// Retries of an operation that failed with `EINTR` / `EAGAIN`.
const MAX_RETRIES: u8 = 16;

// ---------------------------------------------------------------------------
// Aligned buffers
// ---------------------------------------------------------------------------

// ---------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------

/// Write payload: the caller's bytes, or an aligned copy of them (`O_DIRECT`).
enum WriteData {
    Shared(Bytes),
    Copied(AlignedBuf),
}

impl WriteData {
    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Shared(b) => b,
            Self::Copied(b) => b.as_ref(),
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
    Read { buf: AlignedBuf, offset: u64, done: usize },
    Write { data: WriteData, offset: u64, done: usize, fua: bool },
    Flush,
    Zero(Zeroing),
}

/// One registered operation.
struct Op {
    tag: u32,
    sink: CompletionSink,
    retries: u8,
    kind: Kind,
}

/// What to do after a completion.
enum Next {
    /// Submit the (updated) operation again.
    Again(Op),
    /// Finished: send this completion.
    Done(CompletionSink, IoCompletion),
}

impl Op {
    /// The SQE for the operation's next step (`user_data` still to be set).
    fn sqe(&self, fd: types::Fd) -> squeue::Entry {
        match &self.kind {
            Kind::Read { buf, offset, done } => {
                let n = (buf.len - done).min(MAX_RW) as u32;
                // SAFETY: `done < buf.len`, so the pointer stays inside the allocation.
                let ptr = unsafe { buf.ptr.as_ptr().add(*done) };
                opcode::Read::new(fd, ptr, n).offset(offset + *done as u64).build()
            }
            Kind::Write { data, offset, done, fua } => {
                let rest = &data.as_slice()[*done..];
                let flags = if *fua { libc::RWF_DSYNC } else { 0 };
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
                    // End of file: the rest reads as zeroes.
                    // SAFETY: `done < buf.len`; the range is inside the allocation.
                    unsafe { std::ptr::write_bytes(buf.ptr.as_ptr().add(*done), 0, buf.len - *done) };
                    *done = buf.len;
                } else {
                    *done += n;
                }
                if *done < buf.len {
                    return Next::Again(self);
                }
                let Kind::Read { buf, .. } = std::mem::replace(&mut self.kind, Kind::Flush) else {
                    unreachable!()
                };
                // The whole buffer is initialized now.
                self.finish(Ok(Bytes::from_owner(buf)))
            }
            Kind::Write { data, done, .. } => {
                if n == 0 {
                    return self.finish(Err(Status::WRITE_FAULT));
                }
                *done += n;
                if *done < data.as_slice().len() {
                    return Next::Again(self);
                }
                self.finish(Ok(Bytes::new()))
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
        Next::Done(self.sink, completion)
    }
}

// ---------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------

/// Registered operations and ring accounting (behind [`Shared::state`]).
#[derive(Default)]
struct State {
    /// Operations by `user_data`; `None` slots are free.
    slots: Vec<Option<Op>>,
    free: Vec<usize>,
    /// Registered operations (in the ring or in `pending`).
    live: usize,
    /// SQEs pushed and not yet reaped (including the wake-up NOP).
    in_ring: usize,
    /// Operations waiting for room in the ring, oldest first.
    pending: VecDeque<usize>,
    /// The backend is being dropped: the reaper exits once `live` is 0.
    shutdown: bool,
    /// Threads waiting in `resize` for `live` to reach 0.
    drain_waiters: usize,
}

impl State {
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

/// Everything the submitters and the reaper share.
struct Shared {
    // Field order: the ring is torn down before the state (which owns the
    // buffers); by then the reaper has seen every operation complete.
    ring: IoUring,
    state: Mutex<State>,
    /// Signalled when `live` reaches 0 while a resize waits.
    drained: Condvar,
    /// The descriptor every operation uses (`O_DIRECT` when `direct`).
    file: File,
    path: PathBuf,
    is_block: bool,
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
    /// Most SQEs in the kernel at once.
    cap: usize,
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fd(&self) -> types::Fd {
        types::Fd(self.file.as_raw_fd())
    }

    /// Moves pending operations into the submission queue while there is room.
    /// Called with the state lock held (which makes this the only SQ user).
    fn fill_ring(&self, st: &mut State) {
        if st.pending.is_empty() || st.in_ring >= self.cap {
            return;
        }
        // SAFETY: the state lock is held, so no other `SubmissionQueue` exists.
        let mut sq = unsafe { self.ring.submission_shared() };
        while st.in_ring < self.cap {
            let Some(&idx) = st.pending.front() else { break };
            let Some(op) = st.slots[idx].as_ref() else {
                st.pending.pop_front();
                continue;
            };
            let sqe = op.sqe(self.fd()).user_data(idx as u64);
            // SAFETY: every buffer the entry points to is owned by the operation
            // (heap memory that stays put while it moves between slots) or is
            // static, and the operation is only dropped after its CQE is reaped.
            if unsafe { sq.push(&sqe) }.is_err() {
                break; // SQ full: the next io_uring_enter makes room.
            }
            st.pending.pop_front();
            st.in_ring += 1;
        }
    }

    /// Submits queued SQEs without waiting. Entries the kernel could not take
    /// now stay queued; the reaper's next wait submits them.
    fn enter(&self) {
        loop {
            match self.ring.submit() {
                Ok(_) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY)) => return,
                Err(e) => {
                    tracing::error!(path = %self.path.display(), error = %e, "io_uring submit failed");
                    return;
                }
            }
        }
    }

    /// Checks `op` against the capacity and alignment and turns it into a [`Kind`];
    /// `Ok(None)` means there is nothing to do (zero length).
    fn prepare(&self, op: IoOp, size: u64) -> Result<Option<Kind>, Status> {
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
                Some(Kind::Read { buf: AlignedBuf::new_uninit(len), offset, done: 0 })
            }
            IoOp::Write { offset, data, fua } => {
                check(offset, data.len() as u64)?;
                if data.is_empty() {
                    return Ok(None);
                }
                let data = if self.direct && (data.as_ptr() as usize) & (self.mem_align - 1) != 0 {
                    WriteData::Copied(AlignedBuf::copy_of(&data))
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
}

fn zeroing(mut ranges: Vec<(u64, u64)>, deallocate: bool) -> Option<Kind> {
    ranges.retain(|&(_, len)| len > 0);
    (!ranges.is_empty())
        .then(|| Kind::Zero(Zeroing { ranges, idx: 0, deallocate, step: Zeroing::first_step(deallocate) }))
}

/// The reaper: waits for completions, resubmits unfinished operations, feeds
/// pending ones into the ring and sends finished ones to their sinks.
fn reap(sh: &Shared) {
    let (busy, idle) = (types::Timespec::from(REAP_TIMEOUT), types::Timespec::from(REAP_TIMEOUT_IDLE));
    let (busy, idle) = (types::SubmitArgs::new().timespec(&busy), types::SubmitArgs::new().timespec(&idle));
    let mut is_idle = true;
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(256);
    let mut done: Vec<(CompletionSink, IoCompletion)> = Vec::with_capacity(256);
    let mut failures = 0u32;
    loop {
        match sh.ring.submitter().submit_with_args(1, if is_idle { &idle } else { &busy }) {
            Ok(_) => failures = 0,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME | libc::EINTR | libc::EAGAIN | libc::EBUSY)
                ) => {}
            Err(e) => {
                if failures == 0 {
                    tracing::error!(path = %sh.path.display(), error = %e, "io_uring wait failed");
                }
                failures = failures.saturating_add(1);
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        {
            // SAFETY: only this thread reads the completion queue.
            let cq = unsafe { sh.ring.completion_shared() };
            cqes.extend(cq.map(|c| (c.user_data(), c.result())));
        }
        let exit = {
            let mut st = sh.lock_state();
            for (user_data, res) in cqes.drain(..) {
                st.in_ring = st.in_ring.saturating_sub(1);
                if user_data == WAKE {
                    continue;
                }
                let idx = user_data as usize;
                let Some(op) = st.slots.get_mut(idx).and_then(Option::take) else {
                    tracing::error!(user_data, "io_uring completion for an unknown operation");
                    continue;
                };
                match op.complete(res) {
                    Next::Again(op) => {
                        st.slots[idx] = Some(op);
                        st.pending.push_front(idx);
                    }
                    Next::Done(sink, completion) => {
                        st.free.push(idx);
                        st.live -= 1;
                        done.push((sink, completion));
                    }
                }
            }
            sh.fill_ring(&mut st);
            if st.live == 0 && st.drain_waiters > 0 {
                sh.drained.notify_all();
            }
            is_idle = st.live == 0;
            st.shutdown && st.live == 0
        };
        for (sink, completion) in done.drain(..) {
            // The queue may be gone (host disconnected); its completion is then moot.
            let _ = sink.send(completion);
        }
        if exit {
            return;
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
fn new_ring() -> io::Result<IoUring> {
    let ring = IoUring::builder()
        .setup_cqsize(CQ_ENTRIES)
        .setup_clamp()
        .build(SQ_ENTRIES)
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
}

/// Opens `path` (already opened as `buffered`) with `O_DIRECT` if the namespace's
/// `block_size` satisfies the filesystem's alignment; else explains why not.
fn open_file_direct(path: &Path, buffered: &File, block_size: u32) -> io::Result<Result<DataFile, String>> {
    let direct = match OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(path) {
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
    Ok(Ok(DataFile { file: direct, direct: true, io_align: off as u64, mem_align: mem as usize }))
}

// ---------------------------------------------------------------------------
// Backend
// ---------------------------------------------------------------------------

/// A namespace stored in a regular file or block device, executed through io_uring.
pub struct UringBackend {
    shared: Arc<Shared>,
    reaper: Option<JoinHandle<()>>,
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
        Self::open_file_opts(path.as_ref(), create_size, block_size, true)
    }

    /// [`UringBackend::open_file`], optionally never using `O_DIRECT`.
    pub(crate) fn open_file_opts(
        path: &Path,
        create_size: Option<u64>,
        block_size: u32,
        allow_direct: bool,
    ) -> io::Result<Self> {
        if !block_size.is_power_of_two() || block_size < 512 {
            return Err(invalid(format!("invalid block size {block_size}")));
        }
        let ring = new_ring()?;
        let (file, _, size) = super::file::open_sized(path, create_size, block_size)?;
        let why_not = if allow_direct {
            open_file_direct(path, &file, block_size)?
        } else {
            Err("O_DIRECT not requested".into())
        };
        let data = why_not.unwrap_or_else(|why| {
            tracing::info!(path = %path.display(), reason = %why, "io_uring backend: using buffered I/O");
            DataFile { file, direct: false, io_align: 1, mem_align: 1 }
        });
        Self::start(ring, data, path, false, block_size, size)
    }

    /// Opens the block device at `path`, like [`BlockBackend::open`](super::BlockBackend::open):
    /// `block_size` `None` uses the device's logical block size; a given size must
    /// be a power-of-two multiple of it. Uses `O_DIRECT` unless the device refuses
    /// it (then buffered I/O, logged at `info`).
    ///
    /// # Errors
    /// [`io::ErrorKind::Unsupported`] when io_uring is not usable here (checked
    /// before the device is opened); otherwise the errors of
    /// [`BlockBackend::open`](super::BlockBackend::open).
    pub fn open_block(path: impl AsRef<Path>, block_size: Option<u32>) -> io::Result<Self> {
        let path = path.as_ref();
        let ring = new_ring()?;
        let open =
            |flags: libc::c_int| OpenOptions::new().read(true).write(true).custom_flags(flags).open(path);
        let (file, direct) = match open(libc::O_DIRECT) {
            Ok(file) => (file, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::info!(path = %path.display(), "io_uring backend: O_DIRECT refused, using buffered I/O");
                (open(0)?, false)
            }
            Err(e) => return Err(e),
        };
        let BlockGeometry { block_size, dev_block_size, size } =
            block_device_geometry(&file, path, block_size)?;
        let mem_align = match dio_align(&file) {
            Some((mem, _)) if mem.is_power_of_two() && mem as usize <= BUF_ALIGN => mem as usize,
            _ => dev_block_size as usize,
        };
        let data = DataFile { file, direct, io_align: dev_block_size as u64, mem_align };
        Self::start(ring, data, path, true, block_size, size)
    }

    fn start(
        ring: IoUring,
        data: DataFile,
        path: &Path,
        is_block: bool,
        block_size: u32,
        size: u64,
    ) -> io::Result<Self> {
        let cap = (ring.params().cq_entries() as usize).saturating_sub(WAKE_RESERVE).max(1);
        let shared = Arc::new(Shared {
            ring,
            state: Mutex::new(State::default()),
            drained: Condvar::new(),
            file: data.file,
            path: path.to_owned(),
            is_block,
            direct: data.direct,
            io_align: data.io_align.max(1),
            mem_align: data.mem_align.max(1),
            block_size,
            size: RwLock::new(size),
            size_now: AtomicU64::new(size),
            cap,
        });
        let sh = shared.clone();
        let reaper = std::thread::Builder::new().name("nvmet-uring".into()).spawn(move || reap(&sh))?;
        Ok(Self { shared, reaper: Some(reaper) })
    }

    /// The backing file's or device's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Whether I/O bypasses the page cache (`O_DIRECT`).
    pub fn is_direct(&self) -> bool {
        self.shared.direct
    }
}

impl Backend for UringBackend {
    fn size(&self) -> u64 {
        self.shared.size_now.load(Ordering::Acquire)
    }

    fn block_size(&self) -> u32 {
        self.shared.block_size
    }

    fn volatile_write_cache(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        let kind = if self.shared.is_block { "block" } else { "file" };
        let mode = if self.shared.direct { "O_DIRECT" } else { "buffered" };
        format!("{kind} {} (io_uring, {mode})", self.shared.path.display())
    }

    fn resize(&self, new_size: u64) -> Result<(), String> {
        let sh = &*self.shared;
        if sh.is_block {
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
        {
            let mut st = sh.lock_state();
            st.drain_waiters += 1;
            while st.live > 0 {
                st = sh.drained.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            st.drain_waiters -= 1;
        }
        sh.file.set_len(new_size).map_err(|e| format!("resize {}: {e}", sh.path.display()))?;
        *size = new_size;
        sh.size_now.store(new_size, Ordering::Release);
        Ok(())
    }

    fn submit(&self, tag: u32, op: IoOp, sink: &CompletionSink) -> Option<IoCompletion> {
        let sh = &*self.shared;
        let size = sh.size.read().unwrap_or_else(PoisonError::into_inner);
        let kind = match sh.prepare(op, *size) {
            Ok(Some(kind)) => kind,
            Ok(None) => return Some(IoCompletion::status(tag, Status::SUCCESS)),
            Err(status) => return Some(IoCompletion::status(tag, status)),
        };
        {
            let mut st = sh.lock_state();
            let idx = st.insert(Op { tag, sink: sink.clone(), retries: 0, kind });
            st.pending.push_back(idx);
            sh.fill_ring(&mut st);
        }
        drop(size);
        sh.enter();
        None
    }

    fn sync_all(&self) -> Result<(), String> {
        self.shared.file.sync_data().map_err(|e| format!("fdatasync {}: {e}", self.shared.path.display()))
    }
}

impl Drop for UringBackend {
    fn drop(&mut self) {
        {
            let mut st = self.shared.lock_state();
            st.shutdown = true;
            // Wake the reaper now rather than at its next timeout.
            // SAFETY: the state lock is held, so no other `SubmissionQueue` exists.
            let mut sq = unsafe { self.shared.ring.submission_shared() };
            let nop = opcode::Nop::new().build().user_data(WAKE);
            // SAFETY: a NOP references no memory.
            if unsafe { sq.push(&nop) }.is_ok() {
                st.in_ring += 1;
            }
        }
        self.shared.enter();
        if let Some(handle) = self.reaper.take() {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
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
        let c = b.submit(4, IoOp::Read { offset: 0, len: 0 }, &tx).expect("inline");
        assert_eq!((c.tag, c.status, c.data.len()), (4, Status::SUCCESS, 0));
        assert!(b.submit(5, IoOp::Write { offset: 0, data: Bytes::new(), fua: false }, &tx).is_some());
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
            assert!(b.submit(tag, op, &tx).is_none());
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
                        assert!(b.submit(1000 + tag, op, &tx).is_none());
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
        let b = match UringBackend::open_file_opts(&t.0, Some(1 << 20), 512, false) {
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

    #[test]
    fn uring_read_past_truncated_end_reads_zeroes() {
        let t = TempPath::new("trunc");
        let Some(b) = open(&t, 1 << 20, 4096) else { return };
        assert!(run(&b, 1, IoOp::Write { offset: 0, data: Bytes::from(vec![9; 8192]), fua: false })
            .status
            .is_success());
        // Someone else shrinks the file behind the backend's back.
        std::fs::OpenOptions::new().write(true).open(&t.0).unwrap().set_len(4096).unwrap();
        let r = run(&b, 2, IoOp::Read { offset: 0, len: 3 * 4096 });
        assert_eq!(r.status, Status::SUCCESS);
        assert!(r.data[..4096].iter().all(|&x| x == 9));
        assert!(r.data[4096..].iter().all(|&x| x == 0));
    }

    #[test]
    fn uring_resize_waits_for_in_flight_io() {
        let t = TempPath::new("resize");
        let Some(b) = open(&t, 1 << 20, 512) else { return };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for tag in 0..64u32 {
            let op = IoOp::Write { offset: tag as u64 * 4096, data: pattern(4096, tag), fua: false };
            assert!(b.submit(tag, op, &tx).is_none());
        }
        b.resize((4 << 20) + 100).unwrap();
        assert_eq!(b.size(), 4 << 20);
        assert_eq!(std::fs::metadata(&t.0).unwrap().len(), 4 << 20);
        for _ in 0..64 {
            assert!(rx.blocking_recv().unwrap().status.is_success());
        }
        let w = run(
            &b,
            100,
            IoOp::Write { offset: (4 << 20) - 512, data: Bytes::from(vec![1; 512]), fua: false },
        );
        assert!(w.status.is_success());
        b.resize(1 << 19).unwrap();
        assert_eq!(b.size(), 1 << 19);
        assert_eq!(std::fs::metadata(&t.0).unwrap().len(), 1 << 19);
        let r = run(&b, 101, IoOp::Read { offset: 1 << 19, len: 512 });
        assert_eq!(r.status, Status::LBA_RANGE.with_dnr());
        let r = run(&b, 102, IoOp::Read { offset: 4096, len: 4096 });
        assert_eq!(&r.data[..], &pattern(4096, 1)[..]);
        assert!(b.resize(100).is_err());
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
            assert!(b.submit(tag, op, &tx).is_none());
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
        let ns = |io_engine| NamespaceConfig {
            nsid: None,
            source: NamespaceSource::File { path: t.0.clone(), size: Some(1 << 20), io_engine },
            block_size: 512,
        };
        let threads = crate::server::open_backend(&ns(IoEngine::Threads)).unwrap();
        assert!(!threads.describe().contains("io_uring"), "{}", threads.describe());
        drop(threads);
        let available = new_ring().is_ok();
        let auto = crate::server::open_backend(&ns(IoEngine::Auto)).unwrap();
        assert_eq!(auto.describe().contains("io_uring"), available, "{}", auto.describe());
        drop(auto);
        match crate::server::open_backend(&ns(IoEngine::Uring)) {
            Ok(b) => assert!(available && b.describe().contains("io_uring")),
            Err(e) => assert!(!available && e.kind() == io::ErrorKind::Unsupported, "{e}"),
        }
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
        // A block namespace without a configured engine opens with io_uring
        // (IoEngine::BLOCK_DEFAULT), as `--block` and a config file without
        // `io_engine` do.
        let default_ns = crate::config::NamespaceConfig {
            nsid: None,
            source: crate::config::NamespaceSource::Block {
                path: lo.dev.clone().into(),
                io_engine: crate::config::IoEngine::BLOCK_DEFAULT,
            },
            block_size: 512,
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
    fn qd_reads(b: &dyn Backend, qd: u32, dur: Duration) -> f64 {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let blocks = b.size() / 4096;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % blocks * 4096
        };
        for tag in 0..qd {
            if let Some(c) = b.submit(tag, IoOp::Read { offset: next(), len: 4096 }, &tx) {
                panic!("inline completion {:?}", c.status);
            }
        }
        let start = Instant::now();
        let mut done = 0u64;
        while start.elapsed() < dur {
            let c = rx.blocking_recv().unwrap();
            assert!(c.status.is_success());
            done += 1;
            assert!(b.submit(c.tag, IoOp::Read { offset: next(), len: 4096 }, &tx).is_none());
        }
        let rate = done as f64 / start.elapsed().as_secs_f64();
        for _ in 0..qd {
            rx.blocking_recv().unwrap();
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
        fn submit(&self, tag: u32, op: IoOp, sink: &CompletionSink) -> Option<IoCompletion> {
            self.pool.submit(tag, op, sink)
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
            ("uring, buffered", Box::new(UringBackend::open_file_opts(&t.0, None, 4096, false).unwrap())),
            (
                "threads, O_DIRECT (4 workers)",
                Box::new(DirectThreads {
                    pool: crate::backend::file::WorkerPool::start("bench", 4, Arc::new(DirectExec(direct)))
                        .unwrap(),
                    size,
                }),
            ),
            ("uring, O_DIRECT", Box::new(UringBackend::open_file(&t.0, None, 4096).unwrap())),
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
