//! Block-device backend (like nvmet's `io-cmd-bdev.c`).
//!
//! The device is opened with `O_DIRECT` when it allows it (no double caching in
//! the host page cache); reads land in freshly allocated page-aligned buffers that
//! become the completion's [`Bytes`] without a copy, and writes whose data is not
//! suitably aligned go through a per-worker aligned bounce buffer. A second
//! descriptor opened with `O_DSYNC` serves FUA writes (the kernel turns these into
//! FUA requests when the device supports them). Flush is `fdatasync`, which
//! flushes the device's volatile write cache. Execution uses the same worker pool
//! as the file backend.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use nvmeof_common::Status;

use super::file::{
    deallocate_ranges, fallocate, in_range, is_unsupported, pread_exact_raw, write_zeroes_by_writing,
    IoExecutor, WorkerPool, DEFAULT_WORKERS,
};
use super::sys::{block_device_geometry, AlignedBuf, BlockGeometry, BUF_ALIGN};
use super::{io_error_to_status, Backend, IoCompletion, IoHints, IoOp, QueueIo};

/// `BLKZEROOUT`: zero a byte range (`u64[2]` = start, length).
const BLKZEROOUT: libc::Ioctl = libc::_IO(0x12, 127);

/// Largest bounce-buffer chunk; bigger unaligned writes are issued in pieces.
const BOUNCE_MAX: usize = 1 << 20;

/// Per-worker aligned bounce buffer for writes whose data is not aligned.
#[derive(Default)]
pub(crate) struct Bounce(Option<AlignedBuf>);

impl Bounce {
    /// Copies `src` (at most [`BOUNCE_MAX`] bytes) into the aligned buffer and returns the copy.
    fn fill(&mut self, src: &[u8]) -> &[u8] {
        let big_enough = matches!(&self.0, Some(b) if b.len >= src.len());
        if !big_enough {
            self.0 = Some(AlignedBuf::new_uninit(src.len().next_power_of_two().clamp(BUF_ALIGN, BOUNCE_MAX)));
        }
        let buf = self.0.as_ref().expect("bounce buffer");
        // SAFETY: the buffer holds at least `src.len()` bytes, does not overlap `src`,
        // and the returned slice covers only the bytes just written.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), buf.ptr.as_ptr(), src.len());
            std::slice::from_raw_parts(buf.ptr.as_ptr(), src.len())
        }
    }
}

/// `BLKZEROOUT` on `offset..offset+len`.
fn blk_zeroout(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let range = [offset, len];
    // SAFETY: BLKZEROOUT reads two u64s from the pointer.
    super::sys::retry_eintr(|| unsafe { libc::ioctl(file.as_raw_fd(), BLKZEROOUT, range.as_ptr()) }).map(drop)
}

/// Shared state the workers execute against.
struct BlockInner {
    path: PathBuf,
    /// Main descriptor (reads, plain writes, zeroing, fdatasync).
    file: File,
    /// Same device opened with `O_DSYNC`, for FUA writes.
    dsync: File,
    /// Whether the descriptors use `O_DIRECT`.
    direct: bool,
    /// Capacity in bytes (the device's, [`Backend::revalidate`] follows it).
    size: AtomicU64,
    /// Namespace block size (a multiple of the device's).
    block_size: u32,
    /// Device logical block size: the alignment every I/O must have.
    dev_block_size: u32,
    io_hints: IoHints,
    /// The device's exclusive claim (writable namespaces; [`super::claim`]).
    _claim: Option<Arc<super::claim::DeviceClaim>>,
}

impl BlockInner {
    fn read(&self, offset: u64, len: usize) -> io::Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let buf = AlignedBuf::new_uninit(len);
        // SAFETY: `buf` is valid for `len` bytes of writes; on success all are initialized.
        unsafe { pread_exact_raw(&self.file, buf.ptr.as_ptr(), len, offset)? };
        Ok(Bytes::from_owner(buf))
    }

    fn write(&self, bounce: &mut Bounce, offset: u64, data: &[u8], fua: bool) -> io::Result<()> {
        let f = if fua { &self.dsync } else { &self.file };
        if !self.direct || (data.as_ptr() as usize) & (self.dev_block_size as usize - 1) == 0 {
            return f.write_all_at(data, offset);
        }
        let mut pos = offset;
        for chunk in data.chunks(BOUNCE_MAX) {
            f.write_all_at(bounce.fill(chunk), pos)?;
            pos += chunk.len() as u64;
        }
        Ok(())
    }

    fn zero(&self, offset: u64, len: u64, deallocate: bool) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        if deallocate {
            // On a block device this is an unmapping Write Zeroes that fails with
            // EOPNOTSUPP unless the device guarantees zeroes afterwards.
            match fallocate(&self.file, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, offset, len) {
                Err(e) if is_unsupported(&e) => {}
                other => return other,
            }
        }
        match blk_zeroout(&self.file, offset, len) {
            Err(e) if is_unsupported(&e) => write_zeroes_by_writing(&self.file, offset, len),
            other => other,
        }
    }
}

impl IoExecutor for BlockInner {
    type Scratch = Bounce;

    fn execute(&self, bounce: &mut Bounce, op: IoOp) -> Result<Bytes, Status> {
        let align = self.dev_block_size as u64 - 1;
        let check = |off: u64, len: u64| {
            if !in_range(off, len, self.size.load(Ordering::Acquire)) {
                Err(Status::LBA_RANGE.with_dnr())
            } else if (off | len) & align != 0 {
                Err(Status::INVALID_FIELD.with_dnr())
            } else {
                Ok(())
            }
        };
        let io = |r: io::Result<()>| r.map(|()| Bytes::new()).map_err(|e| io_error_to_status(&e));
        match op {
            IoOp::Read { offset, len } => {
                check(offset, len as u64)?;
                self.read(offset, len).map_err(|e| io_error_to_status(&e))
            }
            IoOp::Write { offset, data, fua } => {
                check(offset, data.len() as u64)?;
                io(self.write(bounce, offset, &data, fua))
            }
            IoOp::Flush => io(self.file.sync_data()),
            IoOp::WriteZeroes { offset, len, deallocate } => {
                check(offset, len)?;
                io(self.zero(offset, len, deallocate))
            }
            IoOp::Deallocate { ranges } => {
                deallocate_ranges(&ranges, check, |o, l| io(self.zero(o, l, true)).map(drop))
            }
        }
    }
}

/// A namespace backed by a block device, executed on a small worker-thread pool.
pub struct BlockBackend {
    // Field order matters: the pool (whose drop joins the workers) goes first.
    pool: WorkerPool,
    inner: Arc<BlockInner>,
}

impl BlockBackend {
    /// Opens the block device at `path` with [`DEFAULT_WORKERS`] worker threads.
    ///
    /// `block_size` is the namespace's logical block size: `None` uses the device's
    /// (`BLKSSZGET`); a given size must be a power of two and a multiple of the
    /// device's. The capacity is the device size (`BLKGETSIZE64`) rounded down to
    /// whole blocks. The device is opened with `O_DIRECT`, or without it (and a
    /// warning) where the device refuses it, and claimed for this process
    /// ([`super::claim`]): it is not exported while mounted or held by another
    /// driver or program, nor can it be mounted while exported.
    ///
    /// # Errors
    /// The device is in use ([`io::ErrorKind::ResourceBusy`], saying by what);
    /// opening the device, or the `ioctl`s, fail; `path` is not a block device;
    /// `block_size` is invalid; or the device is smaller than one block.
    pub fn open(path: impl AsRef<Path>, block_size: Option<u32>) -> io::Result<Self> {
        Self::open_with_workers(path, block_size, DEFAULT_WORKERS)
    }

    /// Like [`BlockBackend::open`], with the device opened for reading only
    /// (a read-only namespace), and not claimed: a mounted device can be
    /// exported read-only.
    pub fn open_read_only(path: impl AsRef<Path>, block_size: Option<u32>) -> io::Result<Self> {
        Self::open_opts(path.as_ref(), block_size, DEFAULT_WORKERS, false, false)
    }

    /// Like [`BlockBackend::open`], without claiming the device: it is
    /// exported even while mounted or held by another driver or program
    /// (`exclusive = false`, for a cluster filesystem that shares it).
    pub fn open_shared(path: impl AsRef<Path>, block_size: Option<u32>) -> io::Result<Self> {
        Self::open_opts(path.as_ref(), block_size, DEFAULT_WORKERS, true, false)
    }

    /// Like [`BlockBackend::open`], with `workers` I/O threads (at least one).
    pub fn open_with_workers(
        path: impl AsRef<Path>,
        block_size: Option<u32>,
        workers: usize,
    ) -> io::Result<Self> {
        Self::open_opts(path.as_ref(), block_size, workers, true, true)
    }

    fn open_opts(
        path: &Path,
        block_size: Option<u32>,
        workers: usize,
        writable: bool,
        exclusive: bool,
    ) -> io::Result<Self> {
        // Claimed before the I/O descriptors open, so a busy device fails with what holds it.
        let claim = if exclusive { Some(super::claim::claim(path)?) } else { None };
        let open =
            |flags: libc::c_int| OpenOptions::new().read(true).write(writable).custom_flags(flags).open(path);
        let (file, dsync, direct) = match open(libc::O_DIRECT) {
            Ok(file) => (file, open(libc::O_DIRECT | libc::O_DSYNC)?, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %path.display(), "O_DIRECT refused, using buffered I/O");
                (open(0)?, open(libc::O_DSYNC)?, false)
            }
            Err(e) => return Err(e),
        };
        if writable {
            super::sys::check_writable(&file, path)?;
        }
        let BlockGeometry { block_size, dev_block_size, size, io_hints } =
            block_device_geometry(&file, path, block_size)?;
        let inner = Arc::new(BlockInner {
            path: path.to_owned(),
            file,
            dsync,
            direct,
            size: AtomicU64::new(size),
            block_size,
            dev_block_size,
            io_hints,
            _claim: claim,
        });
        let pool = WorkerPool::start("nvmet-bdev", workers, inner.clone())?;
        Ok(Self { pool, inner })
    }

    /// The device path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether I/O bypasses the page cache (`O_DIRECT`).
    pub fn is_direct(&self) -> bool {
        self.inner.direct
    }
}

impl Backend for BlockBackend {
    fn size(&self) -> u64 {
        self.inner.size.load(Ordering::Acquire)
    }

    fn block_size(&self) -> u32 {
        self.inner.block_size
    }

    fn volatile_write_cache(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!("block {}", self.inner.path.display())
    }

    fn resize(&self, _new_size: u64) -> Result<(), String> {
        Err("block devices cannot be resized by the target".into())
    }

    fn revalidate(&self) -> Result<Option<(u64, u64)>, String> {
        let now = super::sys::store_size(&self.inner.file, &self.inner.path, self.inner.block_size)?;
        let old = self.inner.size.swap(now, Ordering::AcqRel);
        Ok((old != now).then_some((old, now)))
    }

    fn submit(&self, tag: u32, op: IoOp, io: &QueueIo) -> Option<IoCompletion> {
        self.pool.submit(tag, op, &io.sink)
    }

    fn io_hints(&self) -> Option<IoHints> {
        Some(self.inner.io_hints)
    }

    fn sync_all(&self) -> Result<(), String> {
        self.inner.file.sync_data().map_err(|e| format!("fdatasync {}: {e}", self.inner.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sys::{run, Loop};

    #[test]
    fn aligned_buffers() {
        let b = AlignedBuf::new_uninit(1000);
        assert_eq!(b.ptr.as_ptr() as usize % BUF_ALIGN, 0);
        let mut bounce = Bounce::default();
        let src: Vec<u8> = (0..=255).collect();
        let copy = bounce.fill(&src[1..]);
        assert_eq!(copy.as_ptr() as usize % BUF_ALIGN, 0);
        assert_eq!(copy, &src[1..]);
    }

    #[test]
    fn regular_file_is_refused() {
        let p = std::env::temp_dir().join(format!("nvmeof-notblk-{}", std::process::id()));
        std::fs::write(&p, [0u8; 4096]).unwrap();
        let r = BlockBackend::open(&p, None);
        let _ = std::fs::remove_file(&p);
        assert!(r.is_err());
    }

    /// `O_ACCMODE` of `f`'s open flags.
    fn access_mode(f: &std::fs::File) -> libc::c_int {
        use std::os::fd::AsRawFd;
        // SAFETY: F_GETFL on an open descriptor.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) & libc::O_ACCMODE }
    }

    #[test]
    fn read_only_loop_device() {
        let lo = match Loop::attach(4 << 20) {
            Ok(lo) => lo,
            Err(why) => {
                eprintln!("note: skipping read-only loop-device test: {why}");
                return;
            }
        };
        let rw = BlockBackend::open_with_workers(&lo.dev, None, 1).unwrap();
        assert_eq!(access_mode(&rw.inner.file), libc::O_RDWR);
        let data = Bytes::from(vec![0x5A; 4096]);
        assert!(run(&rw, 1, IoOp::Write { offset: 8192, data: data.clone(), fua: true }).status.is_success());
        let b = BlockBackend::open_read_only(&lo.dev, None).unwrap();
        assert_eq!(access_mode(&b.inner.file), libc::O_RDONLY);
        assert_eq!(access_mode(&b.inner.dsync), libc::O_RDONLY);
        assert_eq!(b.size(), 4 << 20);
        let r = run(&b, 2, IoOp::Read { offset: 8192, len: 4096 });
        assert!(r.status.is_success() && r.data == data);
        assert!(run(&b, 3, IoOp::Flush).status.is_success());
        drop((rw, b));

        // A device the kernel holds read-only (`blockdev --setro`) is not
        // exported writable (its writes would fail); the error says what to do.
        /// `blockdev --setro` on the device until dropped (the flag outlives
        /// the loop device's detach: the next one of that number would have it).
        struct SetRo<'a>(&'a str);
        fn blockdev(flag: &str, dev: &str) {
            let ok = std::process::Command::new("blockdev").arg(flag).arg(dev).status();
            assert!(ok.is_ok_and(|s| s.success()), "blockdev {flag} {dev}");
        }
        impl Drop for SetRo<'_> {
            fn drop(&mut self) {
                blockdev("--setrw", self.0);
            }
        }
        blockdev("--setro", &lo.dev);
        let set_ro = SetRo(&lo.dev);
        let e = BlockBackend::open(&lo.dev, None).err().expect("writable open of a read-only device");
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied, "{e}");
        let e = e.to_string();
        assert!(
            e.contains(&format!("{}: the device is read-only", lo.dev)) && e.contains("--read-only"),
            "{e}"
        );
        if let Err(e) = crate::backend::UringBackend::open_block(&lo.dev, None) {
            assert!(
                e.kind() == io::ErrorKind::Unsupported || e.to_string().contains("the device is read-only"),
                "{e}"
            );
        } else {
            panic!("io_uring backend: writable open of a read-only device");
        }
        let ro = BlockBackend::open_read_only(&lo.dev, None).map(|b| b.size());
        drop(set_ro);
        assert_eq!(ro.unwrap(), 4 << 20, "exported read-only");
    }

    #[test]
    fn loop_device_io() {
        let lo = match Loop::attach(16 << 20) {
            Ok(lo) => lo,
            Err(why) => {
                eprintln!("note: skipping block backend loop-device test: {why}");
                return;
            }
        };
        let b = BlockBackend::open_with_workers(&lo.dev, None, 2).unwrap();
        eprintln!("loop device {} direct={} lbs={}", lo.dev, b.is_direct(), b.block_size());
        assert_eq!(b.size(), 16 << 20);
        assert!(b.volatile_write_cache());
        assert!(b.describe().starts_with("block /dev/loop"));
        super::super::sys::check_io_hints_match_sysfs(&b, &lo.dev);
        assert!(b.resize(32 << 20).is_err());
        if b.block_size() == 512 {
            super::super::sys::check_revalidate_follows_the_store(&b, 16 << 20, |len| lo.set_len(len));
        }
        assert!(BlockBackend::open(&lo.dev, Some(100)).is_err());
        let bs = b.block_size() as u64;

        // Unaligned source data (offset by one byte) exercises the bounce buffer.
        let backing: Bytes = (0..(1 << 20) + 1).map(|i: u32| (i % 251) as u8).collect::<Vec<_>>().into();
        let data = backing.slice(1..);
        let w = run(&b, 1, IoOp::Write { offset: 1 << 20, data: data.clone(), fua: false });
        assert_eq!(w.status, Status::SUCCESS);
        let w = run(&b, 2, IoOp::Write { offset: 8 << 20, data: data.slice(..4096), fua: true });
        assert_eq!(w.status, Status::SUCCESS);
        assert_eq!(run(&b, 3, IoOp::Flush).status, Status::SUCCESS);
        let r = run(&b, 4, IoOp::Read { offset: 1 << 20, len: 1 << 20 });
        assert_eq!(r.status, Status::SUCCESS);
        assert!(r.data[..] == data[..]);
        let r = run(&b, 5, IoOp::Read { offset: 8 << 20, len: 4096 });
        assert_eq!(&r.data[..], &data[..4096]);

        // Write Zeroes (plain and deallocating) and Deallocate read back as zeroes.
        let z = run(&b, 6, IoOp::WriteZeroes { offset: 1 << 20, len: 65536, deallocate: false });
        assert_eq!(z.status, Status::SUCCESS);
        let z = run(&b, 7, IoOp::WriteZeroes { offset: (1 << 20) + 65536, len: 65536, deallocate: true });
        assert_eq!(z.status, Status::SUCCESS);
        let d = run(&b, 8, IoOp::Deallocate { ranges: vec![((1 << 20) + 131072, 4096)] });
        assert_eq!(d.status, Status::SUCCESS);
        let r = run(&b, 9, IoOp::Read { offset: 1 << 20, len: 131072 + 8192 });
        assert!(r.data[..131072 + 4096].iter().all(|&x| x == 0));
        assert_eq!(&r.data[131072 + 4096..], &data[131072 + 4096..131072 + 8192]);

        // The writing fallback zeroes too (and works with O_DIRECT).
        write_zeroes_by_writing(&b.inner.file, 8 << 20, 4096).unwrap();
        assert!(run(&b, 10, IoOp::Read { offset: 8 << 20, len: 4096 }).data.iter().all(|&x| x == 0));

        // Range and alignment checks.
        let end = b.size();
        let lba_range = Status::LBA_RANGE.with_dnr();
        assert_eq!(run(&b, 11, IoOp::Read { offset: end - bs, len: 2 * bs as usize }).status, lba_range);
        let wz = IoOp::WriteZeroes { offset: end, len: bs, deallocate: true };
        assert_eq!(run(&b, 12, wz).status, lba_range);
        let unaligned = IoOp::Read { offset: 1, len: bs as usize };
        assert_eq!(run(&b, 13, unaligned).status, Status::INVALID_FIELD.with_dnr());
        assert!(run(&b, 14, IoOp::Read { offset: end - bs, len: bs as usize }).status.is_success());
        assert!(b.sync_all().is_ok());
        drop(b);
        drop(lo);
    }
}
