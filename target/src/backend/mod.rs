//! Storage backends (like nvmet's `io-cmd-file.c` / `io-cmd-bdev.c`).
//!
//! The interface is submission/completion shaped: [`Backend::submit`] either
//! finishes the I/O inline and returns its [`IoCompletion`] (the RAM backend
//! does), or returns `None` and the completion reaches the queue later: on its
//! [`CompletionSink`] (thread-pool backends), or from the queue's own io_uring,
//! which the queue task reaps itself ([`QueueIo`], io_uring backends).
//! Completions carry the submitting queue's tag, so they are routed straight
//! to the owning queue task.
//! Errors cross this boundary as NVMe [`Status`] values, never `errno`.

pub mod block;
pub mod claim;
pub mod file;
pub mod mem;
pub(crate) mod sys;
pub mod uring;

use bytes::{Bytes, BytesMut};
use nvmeof_common::Status;

pub use block::BlockBackend;
pub use file::FileBackend;
pub use mem::{DeferredMemBackend, MemBackend};
pub use uring::UringBackend;

/// One backend operation, in bytes (the command layer converts LBAs).
#[derive(Clone, Debug)]
pub enum IoOp {
    /// Read `len` bytes at `offset`.
    Read {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: usize,
    },
    /// Write `data` at `offset`; with `fua` the data is durable before completion.
    Write {
        /// Byte offset.
        offset: u64,
        /// Data to write.
        data: Bytes,
        /// Force Unit Access.
        fua: bool,
    },
    /// Make all completed writes durable.
    Flush,
    /// Zero `len` bytes at `offset`; `deallocate` lets the backend punch a hole.
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Byte count.
        len: u64,
        /// Deallocate (DEAC) requested.
        deallocate: bool,
    },
    /// Deallocate (discard) byte ranges `(offset, len)`; reads of them return zeroes.
    Deallocate {
        /// Byte ranges.
        ranges: Vec<(u64, u64)>,
    },
}

/// The I/O sizes of the device under a namespace, in bytes (0: the device
/// names none), which Identify Namespace passes on to hosts as nvmet does
/// for block devices (`nvmet_bdev_set_limits`: NSFEAT bits 1 and 4, NAWUN,
/// NAWUPF, NACWU, NPWG, NPWA, NPDG, NPDA, NOWS). The Linux host takes its
/// device's physical block size, minimum and optimal I/O size from them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoHints {
    /// Physical block size: the unit the device writes atomically.
    pub physical_block_size: u32,
    /// Minimum (preferred) I/O size.
    pub io_min: u32,
    /// Optimal I/O size.
    pub io_opt: u32,
    /// Discard (deallocate) granularity.
    pub discard_granularity: u32,
}

/// Bytes handed out by [`Backend::read_shared`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedRead {
    /// The bytes (unchanged while held).
    pub data: Bytes,
    /// Their CRC32C, when asked for and known to the backend.
    pub crc32c: Option<u32>,
}

/// Result of one operation, tagged with the submitter's tag.
#[derive(Clone, Debug)]
pub struct IoCompletion {
    /// Submitter's tag (the queue's command slot).
    pub tag: u32,
    /// NVMe status.
    pub status: Status,
    /// Command-specific result (CQE DW0/DW1); used by asynchronous admin completions.
    pub result: u64,
    /// Read data (empty otherwise).
    pub data: Bytes,
}

impl IoCompletion {
    /// A completion with status only.
    pub fn status(tag: u32, status: Status) -> Self {
        Self { tag, status, result: 0, data: Bytes::new() }
    }
}

/// Where asynchronous completions go: one channel per queue, read by that queue's task.
pub type CompletionSink = tokio::sync::mpsc::UnboundedSender<IoCompletion>;

/// What a queue hands a backend with each operation: its completion channel
/// and, for a queue whose task reaps it, its own io_uring (used by
/// [`UringBackend`], so a completion reaches the queue without a thread hop).
pub struct QueueIo {
    /// The queue's completion channel.
    pub sink: CompletionSink,
    /// The queue's io_uring; `None`: io_uring backends use their shared ring
    /// with its reaper thread (submitters that never call [`uring::QueueRing::reap`]).
    pub ring: Option<uring::QueueRing>,
}

impl QueueIo {
    /// For a submitter that only reads `sink` (tests, tools): io_uring
    /// backends deliver through their shared ring's reaper thread.
    pub fn detached(sink: CompletionSink) -> Self {
        Self { sink, ring: None }
    }

    /// For a queue task that submits and reaps its own ring
    /// ([`uring::QueueRing::submit`], [`uring::QueueRing::reap`],
    /// [`uring::QueueRing::ready`]).
    pub fn with_ring(sink: CompletionSink) -> Self {
        Self { ring: Some(uring::QueueRing::new(sink.clone())), sink }
    }
}

/// A namespace's storage.
pub trait Backend: Send + Sync + 'static {
    /// Capacity in bytes (may change on resize).
    fn size(&self) -> u64;
    /// Logical block size in bytes (512 or 4096).
    fn block_size(&self) -> u32;
    /// Whether the backend has a volatile write cache that Flush/FUA must drain.
    fn volatile_write_cache(&self) -> bool;
    /// Human-readable description for logs ("file /path", "ram 1 GiB").
    fn describe(&self) -> String;
    /// Changes the capacity (namespace resize). Backends that cannot resize return an error string.
    fn resize(&self, new_size: u64) -> Result<(), String>;
    /// Re-reads the size of the store and adopts it where it changed outside
    /// the target (a file's length after `truncate`, a block device's after
    /// `lvextend` or a LUN resize), rounded down to whole blocks, as nvmet's
    /// `nvmet_ns_revalidate` does (`i_size_read`, `bdev_nr_bytes`).
    /// `Ok(Some((old, new)))` when it changed; an error where the store
    /// cannot be read or is now smaller than one block (the size stays).
    /// Stores with no size of their own outside the target (RAM) keep theirs.
    fn revalidate(&self) -> Result<Option<(u64, u64)>, String> {
        Ok(None)
    }
    /// Submits `op`. Returns the completion if it finished inline, else `None`
    /// and the completion arrives on `sink` with the same `tag`.
    fn submit(&self, tag: u32, op: IoOp, io: &QueueIo) -> Option<IoCompletion>;
    /// Reads `len` bytes at `offset` without copying, for backends whose data
    /// already lives in memory: a reference to bytes that stay unchanged while
    /// held (later writes must not alter them). `None`: not available for this
    /// range; the queue falls back to [`Backend::read_into`]. With `crc` (the
    /// connection has data digests) the backend may add the bytes' CRC32C
    /// when it knows it without reading them again.
    fn read_shared(&self, offset: u64, len: usize, crc: bool) -> Option<Result<SharedRead, Status>> {
        let _ = (offset, len, crc);
        None
    }
    /// Reads `buf.len()` bytes at `offset` into `buf` (a buffer recycled by the
    /// queue, so steady-state reads allocate nothing). Backends that manage
    /// their own (aligned) buffers keep the default, which submits a plain Read.
    fn read_into(&self, tag: u32, offset: u64, buf: BytesMut, io: &QueueIo) -> Option<IoCompletion> {
        self.submit(tag, IoOp::Read { offset, len: buf.len() }, io)
    }
    /// The I/O sizes of the device under the namespace: block devices have
    /// them, files and RAM none (nvmet reports them for block devices only).
    fn io_hints(&self) -> Option<IoHints> {
        None
    }
    /// Bytes the store holds for the namespace, where it allocates lazily
    /// (thin provisioning: a sparse file's blocks, the RAM chunks written):
    /// Identify Namespace reports it as the Namespace Utilization and sets
    /// NSFEAT THINP. `None` where every block is always there (block
    /// devices), which reports the whole size, as nvmet does for all.
    fn allocated_bytes(&self) -> Option<u64> {
        None
    }
    /// Whether `len` bytes at `offset` may hold data: false only where the
    /// store knows they hold none (a hole of a sparse file, RAM never
    /// written). A zoned namespace starts such zones Empty, others Full
    /// ([`crate::core::zoned`]). Blocking (a file is asked with `lseek`).
    fn holds_data(&self, offset: u64, len: u64) -> bool {
        let _ = (offset, len);
        true
    }
    /// Flushes everything durable (used on shutdown). Blocking.
    fn sync_all(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Bytes a file has allocated (`st_blocks` × 512: its data and the
/// filesystem's delayed allocations; a punched hole frees them), or `None`
/// if it cannot be stat'ed.
pub(crate) fn file_allocated_bytes(file: &std::fs::File) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| m.blocks() * 512)
}

/// Whether `len` bytes of `file` at `offset` hold data: `lseek(SEEK_DATA)`
/// finds none there only in a hole (or past the end). Where the filesystem
/// cannot tell (an error), they may.
pub(crate) fn file_holds_data(file: &std::fs::File, offset: u64, len: u64) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(off) = libc::off_t::try_from(offset) else { return true };
    // SAFETY: lseek on a descriptor this file owns; the position it moves
    // is not used (reads and writes give their offsets).
    let next = unsafe { libc::lseek(file.as_raw_fd(), off, libc::SEEK_DATA) };
    if next < 0 {
        // ENXIO: no data at or after `offset`.
        return std::io::Error::last_os_error().raw_os_error() != Some(libc::ENXIO);
    }
    (next as u64) < offset.saturating_add(len)
}

/// Maps an I/O error to the NVMe status nvmet gives it (`errno_to_nvme_status`,
/// drivers/nvme/target/core.c): ENOSPC → Capacity Exceeded, EREMOTEIO → LBA
/// Out of Range, EOPNOTSUPP → Invalid Opcode, EIO and anything else → Internal
/// Error, all with DNR. Where we differ: EINVAL → Invalid Field (DNR; nvmet:
/// Internal Error), and the medium errors ENODATA / EILSEQ → Unrecovered Read
/// Error, retryable (nvmet: ENODATA → Access Denied, EILSEQ → Internal Error).
///
/// EIO must carry DNR: a failed `fdatasync` reports a writeback error once
/// (per open file, `errseq_t`) and the pages are no longer dirty, so the
/// retry a host makes of a Flush without DNR (Linux: up to
/// `nvme_max_retries`) would succeed with the data never written.
pub fn io_error_to_status(e: &std::io::Error) -> Status {
    match e.raw_os_error() {
        Some(libc::ENOSPC) => Status::CAP_EXCEEDED.with_dnr(),
        Some(libc::EREMOTEIO) => Status::LBA_RANGE.with_dnr(),
        Some(libc::EOPNOTSUPP) => Status::INVALID_OPCODE.with_dnr(),
        Some(libc::EINVAL) => Status::INVALID_FIELD.with_dnr(),
        Some(libc::ENODATA) | Some(libc::EILSEQ) => Status::READ_ERROR,
        _ => Status::INTERNAL.with_dnr(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_map_to_nvmet_statuses() {
        let status = |errno| io_error_to_status(&std::io::Error::from_raw_os_error(errno));
        // EIO was Write Fault without DNR (also for reads and Flush): a host
        // retried the failed Flush, whose second fdatasync reports success.
        assert_eq!(status(libc::EIO), Status::INTERNAL.with_dnr());
        assert_eq!(status(libc::EREMOTEIO), Status::LBA_RANGE.with_dnr());
        assert_eq!(status(libc::ENOSPC), Status::CAP_EXCEEDED.with_dnr());
        assert_eq!(status(libc::EOPNOTSUPP), Status::INVALID_OPCODE.with_dnr());
        assert_eq!(status(libc::EDQUOT), Status::INTERNAL.with_dnr());
        assert_eq!(status(libc::EINVAL), Status::INVALID_FIELD.with_dnr());
        assert_eq!(status(libc::ENODATA), Status::READ_ERROR);
        assert_eq!(io_error_to_status(&std::io::ErrorKind::WriteZero.into()), Status::INTERNAL.with_dnr());
    }
}
