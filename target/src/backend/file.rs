//! Regular-file backend (like nvmet's `io-cmd-file.c`).
//!
//! Blocking file I/O never runs on the caller's (tokio) thread: every
//! operation is queued to a small pool of dedicated worker threads
//! (`WorkerPool`, shared with the block-device backend), which send the
//! completion to the submitting queue's [`CompletionSink`].
//!
//! Durability: plain writes land in the page cache, so the backend reports a
//! volatile write cache and hosts send Flush, which is an `fdatasync`. FUA
//! writes go through a second descriptor opened with `O_DSYNC`, so they are
//! durable before they complete.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use bytes::{Bytes, BytesMut};
use crossbeam_channel::{Receiver, Sender};
use nvmeof_common::Status;

use super::{io_error_to_status, Backend, CompletionSink, IoCompletion, IoOp, QueueIo};

/// Worker threads per backend when the caller does not choose.
pub const DEFAULT_WORKERS: usize = 4;

// ---------------------------------------------------------------------------
// Worker pool (shared with the block backend)
// ---------------------------------------------------------------------------

/// Executes backend operations on a worker thread.
pub(crate) trait IoExecutor: Send + Sync + 'static {
    /// Per-worker scratch state (e.g. an aligned bounce buffer), created once per thread.
    type Scratch: Default;

    /// Runs `op` to completion (blocking). Returns read data (empty for other
    /// operations) or the NVMe status of the failure.
    fn execute(&self, scratch: &mut Self::Scratch, op: IoOp) -> Result<Bytes, Status>;
}

/// One queued operation.
struct Job {
    tag: u32,
    op: IoOp,
    sink: CompletionSink,
}

/// A fixed set of std threads fed by a channel; each job completes by sending an
/// [`IoCompletion`] to the job's sink. The threads exit once the pool is dropped
/// (the channel closes) and have finished the queued jobs; drop waits for them.
pub(crate) struct WorkerPool {
    tx: Option<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Starts `workers` threads (at least one) named `name-N`, all running `exec`.
    pub(crate) fn start<E: IoExecutor>(name: &str, workers: usize, exec: Arc<E>) -> io::Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let mut threads = Vec::with_capacity(workers.max(1));
        for i in 0..workers.max(1) {
            let (rx, exec) = (rx.clone(), exec.clone());
            let handle = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || Self::worker(&rx, &*exec))?;
            threads.push(handle);
        }
        Ok(Self { tx: Some(tx), threads })
    }

    /// Queues `op`; its completion goes to `sink`. Returns a completion only if
    /// the operation could not be queued (the pool is gone).
    pub(crate) fn submit(&self, tag: u32, op: IoOp, sink: &CompletionSink) -> Option<IoCompletion> {
        let job = Job { tag, op, sink: sink.clone() };
        match self.tx.as_ref().map(|tx| tx.send(job)) {
            Some(Ok(())) => None,
            _ => Some(IoCompletion::status(tag, Status::INTERNAL.with_dnr())),
        }
    }

    fn worker<E: IoExecutor>(rx: &Receiver<Job>, exec: &E) {
        let mut scratch = E::Scratch::default();
        while let Ok(Job { tag, op, sink }) = rx.recv() {
            let result = panic::catch_unwind(AssertUnwindSafe(|| exec.execute(&mut scratch, op)));
            let completion = match result {
                Ok(Ok(data)) => IoCompletion { tag, status: Status::SUCCESS, result: 0, data },
                Ok(Err(status)) => IoCompletion::status(tag, status),
                Err(_) => {
                    tracing::error!(tag, "backend worker panicked while executing an I/O");
                    IoCompletion::status(tag, Status::INTERNAL.with_dnr())
                }
            };
            // The queue may be gone (host disconnected); its completion is then moot.
            let _ = sink.send(completion);
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        drop(self.tx.take());
        let me = std::thread::current().id();
        for handle in self.threads.drain(..) {
            if handle.thread().id() != me {
                let _ = handle.join();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Helpers shared with the block backend
// ---------------------------------------------------------------------------

/// Size of [`ZEROES`].
pub(crate) const ZEROES_LEN: usize = 256 << 10;

/// A page-aligned zero buffer (usable for `O_DIRECT` writes).
#[repr(C, align(4096))]
pub(crate) struct Zeroes(pub(crate) [u8; ZEROES_LEN]);

/// Source for writing zeroes when the kernel offers no offload.
pub(crate) static ZEROES: Zeroes = Zeroes([0; ZEROES_LEN]);

/// Whether `off..off+len` lies within `size` bytes.
pub(crate) fn in_range(off: u64, len: u64, size: u64) -> bool {
    off.checked_add(len).is_some_and(|end| end <= size)
}

/// Dataset Management deallocate: every range is checked before any is
/// zeroed, so an out-of-range entry fails the command without side effects.
pub(crate) fn deallocate_ranges(
    ranges: &[(u64, u64)],
    check: impl Fn(u64, u64) -> Result<(), Status>,
    mut zero: impl FnMut(u64, u64) -> Result<(), Status>,
) -> Result<Bytes, Status> {
    for &(offset, len) in ranges {
        check(offset, len)?;
    }
    for &(offset, len) in ranges {
        zero(offset, len)?;
    }
    Ok(Bytes::new())
}

/// Whether an error means "this offload is not supported here" (try a fallback).
pub(crate) fn is_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::ENOTTY))
}

/// `fallocate(2)`, retried on `EINTR`.
pub(crate) fn fallocate(file: &File, mode: libc::c_int, offset: u64, len: u64) -> io::Result<()> {
    let off = libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    let len = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: plain syscall on a descriptor we own.
    super::sys::retry_eintr(|| unsafe { libc::fallocate(file.as_raw_fd(), mode, off, len) }).map(drop)
}

/// Zeroes `offset..offset+len` by writing from [`ZEROES`] (chunks stay 4 KiB aligned
/// when `offset` and `len` are, so this also works on `O_DIRECT` descriptors).
pub(crate) fn write_zeroes_by_writing(file: &File, mut offset: u64, mut len: u64) -> io::Result<()> {
    while len > 0 {
        let n = len.min(ZEROES_LEN as u64) as usize;
        file.write_all_at(&ZEROES.0[..n], offset)?;
        offset += n as u64;
        len -= n as u64;
    }
    Ok(())
}

/// Reads exactly `len` bytes at `offset` into `dst` (which must be valid for `len`
/// bytes of writes). End of file before `len` bytes (the file was truncated
/// behind our back) is an error without an errno, which the command gets as
/// Internal Error: nvmet fails a short read the same way (`nvmet_file_io_done`:
/// `ret != req->transfer_len`), rather than answer zeroes for data it lost.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes.
pub(crate) unsafe fn pread_exact_raw(file: &File, dst: *mut u8, len: usize, offset: u64) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let pos = offset + done as u64;
        let pos = libc::off_t::try_from(pos).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `dst + done .. dst + len` is valid for writes (caller's contract).
        let n = unsafe { libc::pread(file.as_raw_fd(), dst.add(done).cast(), len - done, pos) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the file"));
        }
        done += n as usize;
    }
    Ok(())
}

/// Makes writes past `RLIMIT_FSIZE` fail with `EFBIG` instead of ending the
/// process: the kernel raises `SIGXFSZ` on such a write (and on growing a
/// file past it), and the signal's default action terminates the whole
/// target, every namespace and host with it, for one host's write. nvmet's
/// file I/O runs in kernel workers, which have no such limit; ours then fails
/// the command with Internal Error (`errno_to_nvme_status`'s default). A
/// handler the embedding program installed itself is left alone.
fn ignore_sigxfsz() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: queries and, if still the default, sets the disposition of
        // one signal; `old` is a valid out pointer.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGXFSZ, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_DFL
            {
                libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            }
        }
    });
}

/// Opens (or, with `create_size`, creates and extends to at least that size)
/// the regular file backing a namespace with `block_size`-byte blocks, for
/// reading and writing or, without `writable`, for reading only (such a file
/// is never created or grown).
/// Returns it with its metadata and the capacity in whole blocks.
pub(crate) fn open_sized(
    path: &Path,
    create_size: Option<u64>,
    block_size: u32,
    writable: bool,
) -> io::Result<(File, std::fs::Metadata, u64)> {
    if !block_size.is_power_of_two() || block_size < 512 {
        return Err(invalid(format!("invalid block size {block_size}")));
    }
    if !writable && create_size.is_some() {
        return Err(invalid("a read-only namespace's file is not created or grown (no size)".into()));
    }
    ignore_sigxfsz();
    // Whether this call creates the file: a file it created is removed again
    // when it cannot be sized (e.g. `--size 100T`: "File too large"), instead
    // of leaving an empty file behind a failed start.
    let mut created = false;
    let file = match create_size {
        Some(_) => match OpenOptions::new().read(true).write(true).create_new(true).open(path) {
            Ok(f) => {
                created = true;
                f
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                OpenOptions::new().read(true).write(true).open(path)?
            }
            Err(e) => return Err(e),
        },
        None => OpenOptions::new().read(true).write(writable).open(path)?,
    };
    let sized = (|| {
        let meta = file.metadata()?;
        if !meta.file_type().is_file() {
            return Err(invalid(format!("{} is not a regular file", path.display())));
        }
        let mut len = meta.len();
        if let Some(want) = create_size {
            if len < want {
                file.set_len(want)?;
                len = want;
            }
        }
        let size = len / block_size as u64 * block_size as u64;
        if size == 0 {
            return Err(invalid(format!("{} is smaller than one {block_size}-byte block", path.display())));
        }
        Ok((meta, size))
    })();
    match sized {
        Ok((meta, size)) => Ok((file, meta, size)),
        Err(e) => {
            if created {
                let _ = std::fs::remove_file(path);
            }
            Err(e)
        }
    }
}

// ---------------------------------------------------------------------------
// File backend
// ---------------------------------------------------------------------------

/// Shared state the workers execute against.
struct FileInner {
    path: PathBuf,
    /// Main descriptor (reads, cached writes, fallocate, fdatasync).
    file: File,
    /// Same file opened with `O_DSYNC`, for FUA writes.
    dsync: File,
    block_size: u32,
    /// Capacity in bytes. I/O holds the read lock while it runs, so a resize
    /// never races with an in-flight write that could re-extend the file.
    size: RwLock<u64>,
}

impl FileInner {
    fn read(&self, offset: u64, len: usize) -> io::Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let mut buf = BytesMut::with_capacity(len);
        // SAFETY: the buffer has capacity for `len` bytes, and `pread_exact_raw`
        // initializes all of them before `set_len`.
        unsafe {
            pread_exact_raw(&self.file, buf.as_mut_ptr(), len, offset)?;
            buf.set_len(len);
        }
        Ok(buf.freeze())
    }

    fn zero(&self, offset: u64, len: u64, deallocate: bool) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        if deallocate {
            match fallocate(&self.file, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, offset, len) {
                Err(e) if is_unsupported(&e) => {}
                other => return other,
            }
        }
        match fallocate(&self.file, libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE, offset, len) {
            Err(e) if is_unsupported(&e) => write_zeroes_by_writing(&self.file, offset, len),
            other => other,
        }
    }
}

impl IoExecutor for FileInner {
    type Scratch = ();

    fn execute(&self, _scratch: &mut (), op: IoOp) -> Result<Bytes, Status> {
        let size = self.size.read().unwrap_or_else(|e| e.into_inner());
        let check = |off: u64, len: u64| {
            if in_range(off, len, *size) {
                Ok(())
            } else {
                Err(Status::LBA_RANGE.with_dnr())
            }
        };
        let io = |r: io::Result<()>| r.map_err(|e| io_error_to_status(&e));
        match op {
            IoOp::Read { offset, len } => {
                check(offset, len as u64)?;
                self.read(offset, len).map_err(|e| io_error_to_status(&e))
            }
            IoOp::Write { offset, data, fua } => {
                check(offset, data.len() as u64)?;
                let f = if fua { &self.dsync } else { &self.file };
                io(f.write_all_at(&data, offset)).map(|()| Bytes::new())
            }
            IoOp::Flush => io(self.file.sync_data()).map(|()| Bytes::new()),
            IoOp::WriteZeroes { offset, len, deallocate } => {
                check(offset, len)?;
                io(self.zero(offset, len, deallocate)).map(|()| Bytes::new())
            }
            IoOp::Deallocate { ranges } => {
                deallocate_ranges(&ranges, check, |o, l| io(self.zero(o, l, true)))
            }
        }
    }
}

/// A namespace stored in a regular file, executed on a small worker-thread pool.
pub struct FileBackend {
    // Field order matters: the pool (whose drop joins the workers) goes first.
    pool: WorkerPool,
    inner: Arc<FileInner>,
}

impl FileBackend {
    /// Opens `path` as a namespace with `block_size`-byte logical blocks, using
    /// [`DEFAULT_WORKERS`] worker threads.
    ///
    /// With `Some(size)` the file is created if missing and grown (sparsely) to
    /// `size` bytes if smaller; with `None` it must already exist. The capacity
    /// is the file length rounded down to whole blocks and must be at least one block.
    ///
    /// # Errors
    /// Opening, creating or growing the file fails; `path` is not a regular file;
    /// `block_size` is not a power of two of at least 512; or the file is smaller
    /// than one block.
    pub fn open(path: impl AsRef<Path>, create_size: Option<u64>, block_size: u32) -> io::Result<Self> {
        Self::open_with_workers(path, create_size, block_size, DEFAULT_WORKERS)
    }

    /// Like [`FileBackend::open`] without `create_size`, with the file opened
    /// for reading only (a read-only namespace: the NVMe layer refuses every
    /// command that would write, and the descriptors could not write anyway).
    pub fn open_read_only(path: impl AsRef<Path>, block_size: u32) -> io::Result<Self> {
        Self::open_opts(path.as_ref(), None, block_size, DEFAULT_WORKERS, false)
    }

    /// Like [`FileBackend::open`], with `workers` I/O threads (at least one).
    pub fn open_with_workers(
        path: impl AsRef<Path>,
        create_size: Option<u64>,
        block_size: u32,
        workers: usize,
    ) -> io::Result<Self> {
        Self::open_opts(path.as_ref(), create_size, block_size, workers, true)
    }

    fn open_opts(
        path: &Path,
        create_size: Option<u64>,
        block_size: u32,
        workers: usize,
        writable: bool,
    ) -> io::Result<Self> {
        let (file, meta, size) = open_sized(path, create_size, block_size, writable)?;
        let dsync = OpenOptions::new().read(true).write(writable).custom_flags(libc::O_DSYNC).open(path)?;
        if dsync.metadata()?.ino() != meta.ino() || dsync.metadata()?.dev() != meta.dev() {
            return Err(io::Error::other(format!("{} was replaced while opening it", path.display())));
        }
        let inner =
            Arc::new(FileInner { path: path.to_owned(), file, dsync, block_size, size: RwLock::new(size) });
        let pool = WorkerPool::start("nvmet-file", workers, inner.clone())?;
        Ok(Self { pool, inner })
    }

    /// The backing file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl Backend for FileBackend {
    fn size(&self) -> u64 {
        *self.inner.size.read().unwrap_or_else(|e| e.into_inner())
    }

    fn block_size(&self) -> u32 {
        self.inner.block_size
    }

    fn volatile_write_cache(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!("file {}", self.inner.path.display())
    }

    fn allocated_bytes(&self) -> Option<u64> {
        super::file_allocated_bytes(&self.inner.file)
    }

    fn holds_data(&self, offset: u64, len: u64) -> bool {
        super::file_holds_data(&self.inner.file, offset, len)
    }

    fn resize(&self, new_size: u64) -> Result<(), String> {
        let bs = self.inner.block_size as u64;
        let new_size = new_size / bs * bs;
        if new_size == 0 {
            return Err("cannot resize to less than one block".into());
        }
        let mut size = self.inner.size.write().unwrap_or_else(|e| e.into_inner());
        self.inner
            .file
            .set_len(new_size)
            .map_err(|e| format!("resize {}: {e}", self.inner.path.display()))?;
        *size = new_size;
        Ok(())
    }

    fn revalidate(&self) -> Result<Option<(u64, u64)>, String> {
        let now = super::sys::store_size(&self.inner.file, &self.inner.path, self.inner.block_size)?;
        if now == self.size() {
            return Ok(None);
        }
        // The write lock waits for the I/O in flight (it holds the read lock).
        let mut size = self.inner.size.write().unwrap_or_else(|e| e.into_inner());
        let old = std::mem::replace(&mut *size, now);
        Ok((old != now).then_some((old, now)))
    }

    fn submit(&self, tag: u32, op: IoOp, io: &QueueIo) -> Option<IoCompletion> {
        self.pool.submit(tag, op, &io.sink)
    }

    fn sync_all(&self) -> Result<(), String> {
        self.inner.file.sync_data().map_err(|e| format!("fdatasync {}: {e}", self.inner.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sys::{blocks, check_write_zeroes_and_deallocate, run, TempPath};

    #[test]
    fn sparse_create_and_open_rules() {
        let t = TempPath::new("sparse");
        assert!(FileBackend::open(&t.0, None, 512).is_err(), "must exist without create_size");
        let b = FileBackend::open(&t.0, Some((1 << 30) + 100), 4096).unwrap();
        assert_eq!(b.size(), 1 << 30);
        assert_eq!(b.block_size(), 4096);
        assert!(b.volatile_write_cache());
        assert!(b.describe().starts_with("file "));
        assert!(blocks(&t.0) < 64, "1 GiB file should be sparse, has {} blocks", blocks(&t.0));
        drop(b);
        // Reopen without create: same size; a smaller create_size never shrinks.
        assert_eq!(FileBackend::open(&t.0, None, 512).unwrap().size(), 1 << 30);
        assert_eq!(FileBackend::open(&t.0, Some(4096), 4096).unwrap().size(), 1 << 30);
        assert!(FileBackend::open(&t.0, None, 1000).is_err(), "block size must be a power of two");
        assert!(FileBackend::open(std::env::temp_dir(), None, 512).is_err(), "directories are refused");
    }

    /// A file the target creates but cannot size is removed again (a failed
    /// `--size 100T` start left an empty file); one that existed stays.
    #[test]
    fn a_file_created_but_not_sized_is_removed() {
        let t = TempPath::new("unsized");
        let _ = std::fs::remove_file(&t.0);
        // Past the largest file offset of any filesystem (and of off_t).
        assert!(FileBackend::open(&t.0, Some(1 << 63), 512).is_err());
        assert!(!t.0.exists(), "the file it created is left behind");
        std::fs::write(&t.0, b"").unwrap();
        assert!(FileBackend::open(&t.0, Some(1 << 63), 512).is_err());
        assert!(t.0.exists(), "a file that existed is removed");
    }

    #[test]
    fn write_read_fua_flush() {
        let t = TempPath::new("rw");
        let b = FileBackend::open_with_workers(&t.0, Some(1 << 20), 512, 2).unwrap();
        let data: Bytes = (0..8192u32).map(|i| (i * 7) as u8).collect::<Vec<_>>().into();
        let w = run(&b, 1, IoOp::Write { offset: 4096, data: data.clone(), fua: false });
        assert_eq!(w.status, Status::SUCCESS);
        let f = run(&b, 2, IoOp::Write { offset: 65536, data: data.slice(..512), fua: true });
        assert_eq!(f.status, Status::SUCCESS);
        assert_eq!(run(&b, 3, IoOp::Flush).status, Status::SUCCESS);
        let r = run(&b, 4, IoOp::Read { offset: 4096, len: 8192 });
        assert_eq!((r.status, &r.data[..]), (Status::SUCCESS, &data[..]));
        let r = run(&b, 5, IoOp::Read { offset: 65536, len: 1024 });
        assert_eq!(&r.data[..512], &data[..512]);
        assert_eq!(&r.data[512..], &[0u8; 512][..]);
        assert!(b.sync_all().is_ok());
        // Data really is in the file.
        let on_disk = std::fs::read(&t.0).unwrap();
        assert_eq!(&on_disk[4096..4096 + 8192], &data[..]);
    }

    #[test]
    fn fua_and_flush_leave_nothing_dirty() {
        let t = TempPath::new("fua-dirty");
        let b = FileBackend::open(&t.0, Some(2 << 20), 4096).unwrap();
        crate::backend::sys::check_fua_and_flush_leave_nothing_dirty(&b, &t.0);
    }

    #[test]
    fn many_concurrent_submissions_complete() {
        let t = TempPath::new("many");
        let b = FileBackend::open_with_workers(&t.0, Some(1 << 20), 512, 3).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for tag in 0..256u32 {
            let data = Bytes::from(vec![tag as u8; 512]);
            assert!(b
                .submit(
                    tag,
                    IoOp::Write { offset: tag as u64 * 512, data, fua: false },
                    &QueueIo::detached(tx.clone())
                )
                .is_none());
        }
        let mut seen = [false; 256];
        for _ in 0..256 {
            let c = rx.blocking_recv().unwrap();
            assert_eq!(c.status, Status::SUCCESS);
            seen[c.tag as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
        let r = run(&b, 9, IoOp::Read { offset: 200 * 512, len: 512 });
        assert_eq!(&r.data[..], &[200u8; 512][..]);
    }

    #[test]
    fn write_zeroes_punch_hole_and_deallocate() {
        let t = TempPath::new("zero");
        let b = FileBackend::open(&t.0, Some(8 << 20), 4096).unwrap();
        check_write_zeroes_and_deallocate(&b, &t.0);
        let mib = 1 << 20;

        // The writing fallback zeroes too.
        write_zeroes_by_writing(&b.inner.file, 3 * mib as u64 + 4096, ZEROES_LEN as u64 + 4096).unwrap();
        let r = run(&b, 8, IoOp::Read { offset: 3 * mib as u64, len: mib });
        assert!(r.data[..ZEROES_LEN + 8192].iter().all(|&x| x == 0));
        assert!(r.data[ZEROES_LEN + 8192..].iter().all(|&x| x == 0xA5));
    }

    /// A write past `RLIMIT_FSIZE` (an administrator's `ulimit -f`, systemd's
    /// `LimitFSIZE`) fails with EFBIG, which is Internal Error as nvmet maps
    /// it, on both file engines: it used to raise SIGXFSZ, whose default
    /// action ended the whole target. Runs this test binary again as a child
    /// with the limit set, so the limit and the signal stay out of this process.
    #[test]
    fn a_write_past_the_file_size_limit_fails_instead_of_ending_the_target() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};
        const CHILD: &str = "NVMEOF_TEST_FSIZE_CHILD";
        const LIMIT: u64 = 1 << 20;
        if let Some(dir) = std::env::var_os(CHILD) {
            let dir = PathBuf::from(dir);
            let data = Bytes::from(vec![5; 4096]);
            let b = FileBackend::open(dir.join("threads"), None, 512).unwrap();
            let w = run(&b, 1, IoOp::Write { offset: 2 * LIMIT, data: data.clone(), fua: false });
            assert_eq!(w.status, Status::INTERNAL.with_dnr(), "threads");
            let w = run(&b, 2, IoOp::Write { offset: LIMIT - 4096, data: data.clone(), fua: true });
            assert!(w.status.is_success(), "threads, below the limit");
            for direct in [false, true] {
                let b =
                    match crate::backend::UringBackend::open_file_with(dir.join("uring"), None, 4096, direct)
                    {
                        Ok(b) => b,
                        Err(e) if e.kind() == io::ErrorKind::Unsupported => break,
                        Err(e) => panic!("{e}"),
                    };
                let w = run(&b, 3, IoOp::Write { offset: 3 * LIMIT, data: data.clone(), fua: direct });
                assert_eq!(w.status, Status::INTERNAL.with_dnr(), "{}", b.describe());
            }
            // A file created larger than the limit is refused, not fatal either.
            assert!(FileBackend::open(dir.join("new"), Some(4 * LIMIT), 512).is_err());
            return;
        }
        let dir = std::env::temp_dir().join(format!("nvmeof-fsize-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["threads", "uring"] {
            File::create(dir.join(name)).unwrap().set_len(4 * LIMIT).unwrap();
        }
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child
            .args(["--exact", "--nocapture", "--test-threads=1"])
            .arg("backend::file::tests::a_write_past_the_file_size_limit_fails_instead_of_ending_the_target")
            .env(CHILD, &dir)
            .stdout(std::process::Stdio::null());
        // SAFETY: only setrlimit, async-signal-safe, runs between fork and exec.
        unsafe {
            child.pre_exec(|| {
                let lim = libc::rlimit { rlim_cur: LIMIT, rlim_max: libc::RLIM_INFINITY };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let mut child = child.spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("child test still running after 60 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(status.signal(), None, "the child was ended by a signal (SIGXFSZ is {})", libc::SIGXFSZ);
        assert!(status.success(), "{status:?}");
    }

    /// A read of blocks the file no longer holds (truncated behind the
    /// target's back) fails with Internal Error, as nvmet fails a short read
    /// (`nvmet_file_io_done`: `ret != transfer_len`); it used to succeed with
    /// zeroes in place of the data. Blocks still in the file read normally.
    #[test]
    fn read_past_a_truncated_end_fails() {
        let t = TempPath::new("trunc");
        let b = FileBackend::open(&t.0, Some(1 << 20), 4096).unwrap();
        let w = run(&b, 1, IoOp::Write { offset: 0, data: Bytes::from(vec![9; 8192]), fua: false });
        assert!(w.status.is_success());
        OpenOptions::new().write(true).open(&t.0).unwrap().set_len(4096).unwrap();
        let r = run(&b, 2, IoOp::Read { offset: 0, len: 3 * 4096 });
        assert_eq!(r.status, Status::INTERNAL.with_dnr());
        let r = run(&b, 3, IoOp::Read { offset: 8192, len: 4096 });
        assert_eq!(r.status, Status::INTERNAL.with_dnr());
        let r = run(&b, 4, IoOp::Read { offset: 0, len: 4096 });
        assert_eq!((r.status, &r.data[..]), (Status::SUCCESS, &[9; 4096][..]));
    }

    #[test]
    fn resize_grows_and_shrinks() {
        let t = TempPath::new("resize");
        let b = FileBackend::open(&t.0, Some(1 << 20), 512).unwrap();
        b.resize((4 << 20) + 100).unwrap();
        assert_eq!(b.size(), 4 << 20);
        assert_eq!(std::fs::metadata(&t.0).unwrap().len(), 4 << 20);
        let w =
            run(&b, 1, IoOp::Write { offset: (4 << 20) - 512, data: Bytes::from(vec![1; 512]), fua: false });
        assert!(w.status.is_success());
        b.resize(1 << 19).unwrap();
        assert_eq!(b.size(), 1 << 19);
        assert_eq!(std::fs::metadata(&t.0).unwrap().len(), 1 << 19);
        let r = run(&b, 2, IoOp::Read { offset: 1 << 19, len: 512 });
        assert_eq!(r.status, Status::LBA_RANGE.with_dnr());
        assert!(b.resize(100).is_err());
    }

    #[test]
    fn revalidate_follows_the_file() {
        let t = TempPath::new("revalidate");
        let b = FileBackend::open(&t.0, Some(1 << 20), 512).unwrap();
        crate::backend::sys::check_revalidate_follows_the_store(&b, 1 << 20, |len| {
            crate::backend::sys::set_file_len(&t.0, len)
        });
    }

    #[test]
    fn out_of_range_is_lba_range() {
        let t = TempPath::new("oob");
        let b = FileBackend::open(&t.0, Some(1 << 20), 512).unwrap();
        crate::backend::sys::check_out_of_range_is_lba_range(&b, &t.0);
    }
}
