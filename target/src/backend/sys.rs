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

/// `ioctl` returning an integer through a pointer.
pub(crate) fn ioctl_get<T: Default>(file: &File, req: libc::Ioctl) -> io::Result<T> {
    let mut v = T::default();
    // SAFETY: `req` writes one `T` to the pointer.
    if unsafe { libc::ioctl(file.as_raw_fd(), req, std::ptr::addr_of_mut!(v)) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
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

    /// An aligned copy of `src` (non-empty).
    pub(crate) fn copy_of(src: &[u8]) -> Self {
        let buf = Self::new_uninit(src.len());
        // SAFETY: `buf` holds `src.len()` bytes and does not overlap `src`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf.ptr.as_ptr(), src.len()) };
        buf
    }
}

impl AsRef<[u8]> for AlignedBuf {
    /// Only used once the whole buffer is initialized (a copy, or a read buffer
    /// the read filled completely).
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
