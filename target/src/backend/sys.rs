//! Low-level pieces shared by the block-device and io_uring backends:
//! page-aligned buffers for `O_DIRECT` and block-device ioctls.

use std::alloc::{self, Layout};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

/// Alignment of `O_DIRECT` buffers (covers every logical block size up to
/// 4 KiB and any DMA alignment requirement).
pub(crate) const BUF_ALIGN: usize = 4096;

/// `BLKGETSIZE64`: device size in bytes (`u64`).
pub(crate) const BLKGETSIZE64: libc::Ioctl = libc::_IOR::<libc::size_t>(0x12, 114);
/// `BLKSSZGET`: logical block size (`int`).
pub(crate) const BLKSSZGET: libc::Ioctl = libc::_IO(0x12, 104);
/// `BLKIOMIN`: minimum I/O size, the device's preferred granularity (`unsigned int`).
pub(crate) const BLKIOMIN: libc::Ioctl = libc::_IO(0x12, 120);
/// `BLKIOOPT`: optimal I/O size, 0 where the device names none (`unsigned int`).
pub(crate) const BLKIOOPT: libc::Ioctl = libc::_IO(0x12, 121);
/// `BLKPBSZGET`: physical block size (`unsigned int`).
pub(crate) const BLKPBSZGET: libc::Ioctl = libc::_IO(0x12, 123);

/// `BLKROGET`: whether the device is read-only (`int`).
pub(crate) const BLKROGET: libc::Ioctl = libc::_IO(0x12, 94);

/// Refuses a writable export of the block device `file` (opened from
/// `path`) that the kernel holds read-only (`BLKROGET`: a write-protected
/// medium, `blockdev --setro`, a read-only loop device or device-mapper
/// table). Opening it for writing succeeds and each write would then fail
/// (`EPERM`), so hosts would see a writable namespace that fails every write.
pub(crate) fn check_writable(file: &File, path: &std::path::Path) -> io::Result<()> {
    match ioctl_get::<libc::c_int>(file, BLKROGET) {
        Ok(ro) if ro != 0 => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{}: the device is read-only; export it read-only (`read_only = true`, `--read-only`) \
                 or make it writable (`blockdev --setrw`)",
                path.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// `ioctl` returning an integer through a pointer.
pub(crate) fn ioctl_get<T: Default>(file: &File, req: libc::Ioctl) -> io::Result<T> {
    let mut v = T::default();
    // SAFETY: `req` writes one `T` to the pointer.
    if unsafe { libc::ioctl(file.as_raw_fd(), req, std::ptr::addr_of_mut!(v)) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// Runs `syscall` (a raw libc call returning a negative value and setting
/// `errno` on failure) until it does not fail with `EINTR`.
pub(crate) fn retry_eintr<T: Copy + Default + PartialOrd>(mut syscall: impl FnMut() -> T) -> io::Result<T> {
    loop {
        let r = syscall();
        if r >= T::default() {
            return Ok(r);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// An `InvalidInput` error with `msg`.
pub(crate) fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// A heap buffer aligned to [`BUF_ALIGN`]. Its contents start uninitialized.
pub(crate) struct AlignedBuf {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len: usize,
}

// SAFETY: a uniquely owned heap allocation, like `Box<[u8]>`.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only reads.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, BUF_ALIGN).expect("buffer layout")
    }

    /// An uninitialized buffer of `len` (> 0) bytes.
    pub(crate) fn new_uninit(len: usize) -> Self {
        assert!(len > 0);
        let layout = Self::layout(len);
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc::alloc(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Self { ptr, len }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    /// Only used once the whole buffer is initialized (a read buffer the read
    /// filled completely).
    fn as_ref(&self) -> &[u8] {
        // SAFETY: valid allocation of `len` bytes, initialized per the invariant above.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new_uninit` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

/// A block device's namespace geometry (see [`block_device_geometry`]).
pub(crate) struct BlockGeometry {
    /// Namespace block size.
    pub(crate) block_size: u32,
    /// The device's logical block size.
    pub(crate) dev_block_size: u32,
    /// Capacity in bytes (whole namespace blocks).
    pub(crate) size: u64,
    /// What the device says about its I/O sizes.
    pub(crate) io_hints: super::IoHints,
}

/// The size of the store `file` is (a block device's, `BLKGETSIZE64`, or
/// a regular file's length) in whole `block_size`-byte blocks, for
/// [`super::Backend::revalidate`]: an error names `path`, and a store
/// smaller than one block is one.
pub(crate) fn store_size(file: &File, path: &std::path::Path, block_size: u32) -> Result<u64, String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?;
    let bytes = if meta.file_type().is_block_device() {
        ioctl_get::<libc::size_t>(file, BLKGETSIZE64).map_err(|e| format!("{}: {e}", path.display()))? as u64
    } else {
        meta.len()
    };
    let size = bytes / block_size as u64 * block_size as u64;
    if size == 0 {
        return Err(format!(
            "{} is now smaller than one {block_size}-byte block ({bytes} bytes)",
            path.display()
        ));
    }
    Ok(size)
}

/// Checks that `file` (opened from `path`) is a block device and returns the
/// namespace geometry: `block_size` (default: the device's logical block
/// size), rejecting block sizes the device cannot address, and the capacity.
pub(crate) fn block_device_geometry(
    file: &File,
    path: &std::path::Path,
    block_size: Option<u32>,
) -> io::Result<BlockGeometry> {
    use std::os::unix::fs::FileTypeExt;
    if !file.metadata()?.file_type().is_block_device() {
        return Err(invalid(format!("{} is not a block device", path.display())));
    }
    let dev_block_size = ioctl_get::<libc::c_int>(file, BLKSSZGET)?;
    let dev_block_size = u32::try_from(dev_block_size)
        .ok()
        .filter(|b| b.is_power_of_two() && *b >= 512)
        .ok_or_else(|| io::Error::other(format!("odd logical block size {dev_block_size}")))?;
    let block_size = block_size.unwrap_or(dev_block_size);
    if !block_size.is_power_of_two() || block_size < dev_block_size {
        return Err(invalid(format!(
            "block size {block_size} is not a power-of-two multiple of the device's {dev_block_size}"
        )));
    }
    let dev_size = ioctl_get::<libc::size_t>(file, BLKGETSIZE64)? as u64;
    let size = dev_size / block_size as u64 * block_size as u64;
    if size == 0 {
        return Err(invalid(format!("{} is smaller than one {block_size}-byte block", path.display())));
    }
    Ok(BlockGeometry { block_size, dev_block_size, size, io_hints: block_io_hints(file) })
}

/// The I/O sizes a block device reports, as nvmet's `nvmet_bdev_set_limits`
/// reads them (`bdev_physical_block_size`, `bdev_io_min`, `bdev_io_opt`,
/// `bdev_discard_granularity`): the first three by ioctl, the discard
/// granularity from sysfs (no ioctl has it; a partition's is its disk's).
/// What cannot be read is 0.
pub(crate) fn block_io_hints(file: &File) -> super::IoHints {
    use std::os::unix::fs::MetadataExt;
    let get = |req| ioctl_get::<libc::c_uint>(file, req).unwrap_or(0);
    let discard_granularity = file
        .metadata()
        .ok()
        .and_then(|m| {
            let (major, minor) = (libc::major(m.rdev()), libc::minor(m.rdev()));
            let dev = format!("/sys/dev/block/{major}:{minor}");
            ["queue", "../queue"]
                .iter()
                .find_map(|q| std::fs::read_to_string(format!("{dev}/{q}/discard_granularity")).ok())
        })
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    super::IoHints {
        physical_block_size: get(BLKPBSZGET),
        io_min: get(BLKIOMIN),
        io_opt: get(BLKIOOPT),
        discard_granularity,
    }
}

/// A unique temp path for tests, removed on drop.
#[cfg(test)]
pub(crate) struct TempPath(pub(crate) std::path::PathBuf);

#[cfg(test)]
impl TempPath {
    /// A path in the system temp directory.
    pub(crate) fn new(what: &str) -> Self {
        Self::new_in(&std::env::temp_dir(), what)
    }

    /// A path in `dir`.
    pub(crate) fn new_in(dir: &std::path::Path, what: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(dir.join(format!("nvmeof-{what}-{}-{n}", std::process::id())))
    }
}

#[cfg(test)]
impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Submits `op` to a backend and waits for its completion, checking the tag (tests).
#[cfg(test)]
pub(crate) fn run(b: &dyn super::Backend, tag: u32, op: super::IoOp) -> super::IoCompletion {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = b
        .submit(tag, op, &super::QueueIo::detached(tx))
        .unwrap_or_else(|| rx.blocking_recv().expect("completion"));
    assert_eq!(c.tag, tag);
    c
}

/// [`super::Backend::revalidate`] of a `size`-byte store with 512-byte
/// blocks whose size `set_len` changes from outside (a file's length, a loop
/// device's backing file and capacity): nothing while it stays, the new
/// size rounded down to whole blocks when it grows or shrinks (and I/O
/// follows it), an error and the size kept when it is under one block
/// (shared by the file, block and io_uring backend tests).
#[cfg(test)]
pub(crate) fn check_revalidate_follows_the_store(b: &dyn super::Backend, size: u64, set_len: impl Fn(u64)) {
    use super::IoOp;
    use nvmeof_common::Status;
    assert_eq!(b.revalidate(), Ok(None));
    let grown = size + (2 << 20);
    set_len(grown + 100);
    assert_eq!(b.revalidate(), Ok(Some((size, grown))));
    assert_eq!((b.size(), b.revalidate()), (grown, Ok(None)));
    let data = bytes::Bytes::from(vec![0xA5; 512]);
    let w = run(b, 1, IoOp::Write { offset: grown - 512, data: data.clone(), fua: true });
    assert!(w.status.is_success(), "write at the new end: {}", w.status);
    let r = run(b, 2, IoOp::Read { offset: grown - 512, len: 512 });
    assert!(r.status.is_success() && r.data == data);
    set_len(size / 2);
    assert_eq!(b.revalidate(), Ok(Some((grown, size / 2))));
    assert_eq!(run(b, 3, IoOp::Read { offset: size / 2, len: 512 }).status, Status::LBA_RANGE.with_dnr());
    set_len(100);
    let e = b.revalidate().unwrap_err();
    assert!(e.contains("smaller than one 512-byte block"), "{e}");
    assert_eq!(b.size(), size / 2, "kept");
    set_len(size);
    assert_eq!(b.revalidate(), Ok(Some((size / 2, size))));
}

/// Sets the length of the file at `path` (the store of a file backend, or
/// of a [`Loop`] device, whose capacity `losetup -c` then follows).
#[cfg(test)]
pub(crate) fn set_file_len(path: &std::path::Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).and_then(|f| f.set_len(len)).unwrap();
}

#[cfg(test)]
impl Loop {
    /// Sets the length of the backing file and the device's capacity to it.
    pub(crate) fn set_len(&self, len: u64) {
        set_file_len(&self.file, len);
        let ok = std::process::Command::new("losetup").arg("-c").arg(&self.dev).status();
        assert!(ok.is_ok_and(|s| s.success()), "losetup -c {}", self.dev);
    }
}

/// Out-of-range reads, writes, Write Zeroes and Deallocate of a 1 MiB
/// namespace with 512-byte blocks at `path` fail with LBA Out of Range and
/// write nothing past its end (shared by the file and io_uring backend tests).
#[cfg(test)]
pub(crate) fn check_out_of_range_is_lba_range(b: &dyn super::Backend, path: &std::path::Path) {
    use super::IoOp;
    use nvmeof_common::Status;
    let lba_range = Status::LBA_RANGE.with_dnr();
    let end = 1u64 << 20;
    assert_eq!(run(b, 1, IoOp::Read { offset: end - 512, len: 1024 }).status, lba_range);
    let data = bytes::Bytes::from(vec![0; 512]);
    assert_eq!(run(b, 2, IoOp::Write { offset: end, data, fua: true }).status, lba_range);
    let wz = IoOp::WriteZeroes { offset: u64::MAX - 10, len: 512, deallocate: false };
    assert_eq!(run(b, 3, wz).status, lba_range);
    let ranges = vec![(0, 512), (end, 512)];
    assert_eq!(run(b, 4, IoOp::Deallocate { ranges }).status, lba_range);
    // Nothing past the end was written.
    assert_eq!(std::fs::metadata(path).unwrap().len(), end);
    // The last block itself is fine.
    assert!(run(b, 5, IoOp::Read { offset: end - 512, len: 512 }).status.is_success());
}

/// 512-byte blocks a file occupies on disk (tests: holes).
#[cfg(test)]
pub(crate) fn blocks(p: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().blocks()
}

/// Write Zeroes (with and without deallocate) and Deallocate on a file-backed
/// namespace of at least 8 MiB with 4 KiB blocks at `path`, holding 0xA5 in its
/// first 4 MiB afterwards except where zeroed (shared by the file and io_uring
/// backend tests). Returns the file's block count after the last step.
#[cfg(test)]
pub(crate) fn check_write_zeroes_and_deallocate(b: &dyn super::Backend, path: &std::path::Path) -> u64 {
    use super::IoOp;
    use nvmeof_common::Status;
    let mib = 1usize << 20;
    let data = bytes::Bytes::from(vec![0xA5; 4 * mib]);
    assert!(run(b, 1, IoOp::Write { offset: 0, data, fua: true }).status.is_success());
    let before = blocks(path);
    assert!(before >= (4 * mib as u64) / 512, "written data is allocated ({before} blocks)");

    // Write Zeroes with deallocate punches a hole.
    let z = run(b, 2, IoOp::WriteZeroes { offset: 0, len: mib as u64, deallocate: true });
    assert_eq!(z.status, Status::SUCCESS);
    let r = run(b, 3, IoOp::Read { offset: 0, len: mib });
    assert!(r.data.iter().all(|&x| x == 0));
    let after_punch = blocks(path);
    assert!(after_punch < before, "punch hole frees blocks ({before} -> {after_punch})");

    // Write Zeroes without deallocate (ZERO_RANGE).
    let z = run(b, 4, IoOp::WriteZeroes { offset: mib as u64, len: 4096, deallocate: false });
    assert_eq!(z.status, Status::SUCCESS);
    let r = run(b, 5, IoOp::Read { offset: mib as u64 - 4096, len: 3 * 4096 });
    assert!(r.data[..8192].iter().all(|&x| x == 0));
    assert!(r.data[8192..].iter().all(|&x| x == 0xA5));

    // Deallocate several ranges (an empty one included).
    let ranges = vec![(2 * mib as u64, mib as u64), (3 * mib as u64, 4096), (0, 0)];
    assert_eq!(run(b, 6, IoOp::Deallocate { ranges }).status, Status::SUCCESS);
    let r = run(b, 7, IoOp::Read { offset: 2 * mib as u64, len: mib + 8192 });
    assert!(r.data[..mib + 4096].iter().all(|&x| x == 0));
    assert!(r.data[mib + 4096..].iter().all(|&x| x == 0xA5));
    let after = blocks(path);
    assert!(after < after_punch);
    after
}

/// A backend on the block device `dev` reports the I/O sizes sysfs shows
/// for it (`/sys/block/NAME/queue`), and a loop device has the ones it sets
/// (physical block and minimum I/O size its logical block size).
#[cfg(test)]
pub(crate) fn check_io_hints_match_sysfs(b: &dyn super::Backend, dev: &str) {
    let name = dev.trim_start_matches("/dev/");
    let sysfs = |attr: &str| -> u32 {
        let v = std::fs::read_to_string(format!("/sys/block/{name}/queue/{attr}")).unwrap();
        v.trim().parse().unwrap()
    };
    let want = super::IoHints {
        physical_block_size: sysfs("physical_block_size"),
        io_min: sysfs("minimum_io_size"),
        io_opt: sysfs("optimal_io_size"),
        discard_granularity: sysfs("discard_granularity"),
    };
    assert_eq!(b.io_hints(), Some(want), "{dev}");
    assert!(want.physical_block_size >= 512 && want.io_min >= 512, "{want:?}");
}

/// A loop device over a temp file for tests; detached and removed on drop.
#[cfg(test)]
pub(crate) struct Loop {
    /// Device path (`/dev/loopN`).
    pub(crate) dev: String,
    /// Backing file.
    pub(crate) file: std::path::PathBuf,
}

#[cfg(test)]
impl Loop {
    /// Attaches a `size`-byte loop device, or explains why it cannot.
    pub(crate) fn attach(size: u64) -> Result<Self, String> {
        use std::process::Command;
        // SAFETY: trivial libc call.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let file = std::env::temp_dir().join(format!("nvmeof-loop-{}-{n}-{size}", std::process::id()));
        File::create(&file).and_then(|f| f.set_len(size)).map_err(|e| e.to_string())?;
        match Command::new("losetup").args(["--find", "--show"]).arg(&file).output() {
            Ok(o) if o.status.success() => {
                Ok(Self { dev: String::from_utf8_lossy(&o.stdout).trim().to_owned(), file })
            }
            Ok(o) => {
                let _ = std::fs::remove_file(&file);
                Err(format!("losetup failed: {}", String::from_utf8_lossy(&o.stderr).trim()))
            }
            Err(e) => {
                let _ = std::fs::remove_file(&file);
                Err(format!("cannot run losetup: {e}"))
            }
        }
    }
}

#[cfg(test)]
impl Drop for Loop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("losetup").arg("-d").arg(&self.dev).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// Dirty and under-writeback page-cache pages of `len` bytes at `offset` of
/// the file at `path` (`cachestat(2)`, Linux 6.5; tests). `None` where the
/// kernel lacks it.
#[cfg(test)]
pub(crate) fn dirty_pages(path: &std::path::Path, offset: u64, len: u64) -> Option<(u64, u64)> {
    /// `struct cachestat_range`.
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    /// `struct cachestat`.
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    /// The same number on every architecture (the unified syscall table).
    const SYS_CACHESTAT: libc::c_long = 451;
    let f = File::open(path).ok()?;
    let range = Range { off: offset, len };
    let mut st = Stat::default();
    // SAFETY: valid descriptor; the kernel reads `range` and writes `st`, both live for the call.
    let r = unsafe { libc::syscall(SYS_CACHESTAT, f.as_raw_fd(), &raw const range, &raw mut st, 0) };
    (r == 0).then_some((st.nr_dirty, st.nr_writeback))
}

/// FUA writes leave none of their pages dirty or under writeback (O_DSYNC /
/// RWF_DSYNC really reached the kernel), and a Flush leaves none in the whole
/// file, on a buffered file namespace with 4 KiB blocks at `path` of at least
/// 2 MiB (shared by the file and io_uring backend tests). Skips, with a note,
/// where `cachestat(2)` is missing or the filesystem keeps no dirty pages.
#[cfg(test)]
pub(crate) fn check_fua_and_flush_leave_nothing_dirty(b: &dyn super::Backend, path: &std::path::Path) {
    use super::IoOp;
    let data = bytes::Bytes::from(vec![0x3C; 64 << 10]);
    assert!(run(b, 1, IoOp::Write { offset: 0, data: data.clone(), fua: false }).status.is_success());
    match dirty_pages(path, 0, 64 << 10) {
        None => return eprintln!("note: no cachestat(2) here; FUA durability not checked"),
        Some((0, _)) => return eprintln!("note: {} keeps no dirty pages; FUA not checked", path.display()),
        Some(_) => {}
    }
    assert!(run(b, 2, IoOp::Write { offset: 1 << 20, data, fua: true }).status.is_success());
    assert_eq!(dirty_pages(path, 1 << 20, 64 << 10), Some((0, 0)), "FUA write left dirty pages");
    assert!(dirty_pages(path, 0, 64 << 10).unwrap().0 > 0, "the plain write is still cached");
    assert!(run(b, 3, IoOp::Flush).status.is_success());
    assert_eq!(dirty_pages(path, 0, 0), Some((0, 0)), "Flush left dirty pages");
}
