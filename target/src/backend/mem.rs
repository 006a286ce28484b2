//! RAM backend: executes inline on the queue's task (no thread hop), for
//! tests and benchmarks.
//!
//! The namespace is held in 128 KiB chunks, each a reference-counted [`Bytes`].
//! A read that falls inside one chunk hands out a slice of it (a count bump,
//! no copy: the socket write copies straight from the namespace's memory). A
//! write modifies a chunk in place when nothing else references it, and
//! copies it first (copy-on-write) when a read of it is still being sent, so
//! data already handed out never changes under the socket. Chunks never
//! written take no memory and read from a static zero page.
//!
//! For connections with data digests, each chunk keeps the CRC32C of every
//! 4 KiB block a digested read has seen (`BlockCrcs`); writes drop the CRCs
//! of the blocks they touch. A later read's digest is then joined from the
//! block CRCs ([`Crc32cCombine`]) instead of reading the data twice: the
//! socket copy is the only pass over it. On the 2-core Intel VM the CRC of
//! cold namespace memory took a third of the target's time at 128 KiB reads
//! with polling (12 µs of 34 µs per read).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use bytes::{Bytes, BytesMut};
use nvmeof_common::digest::{crc32c, crc32c_append, Crc32cCombine};
use nvmeof_common::Status;

use super::{Backend, IoCompletion, IoOp, QueueIo, SharedRead};

/// Bytes per chunk: the largest read served without a copy (the probe's and
/// fio's 128 KiB sequential I/O, aligned, is one chunk).
const CHUNK: usize = 128 << 10;

/// What unwritten (or deallocated) chunks read as.
static ZERO_CHUNK: [u8; CHUNK] = [0; CHUNK];

/// Bytes per block whose CRC32C a chunk keeps.
const CRC_BLOCK: usize = 4096;

/// Blocks per chunk (one bit each in [`BlockCrcs::known`]).
const CRC_BLOCKS: usize = CHUNK / CRC_BLOCK;

/// CRC32Cs of a chunk's 4 KiB blocks, for data digests of later reads.
struct BlockCrcs {
    crc: [u32; CRC_BLOCKS],
    /// Bit `i`: `crc[i]` is the CRC of block `i`'s current bytes.
    known: u32,
}

/// One chunk of the namespace.
#[derive(Default)]
struct Slot {
    /// The bytes; empty: a chunk of zeroes.
    data: Bytes,
    /// Allocated by the first digested read of the chunk.
    crcs: Option<Box<BlockCrcs>>,
}

impl Slot {
    /// Forgets the CRCs of the blocks `within..within + n` overlaps (their
    /// bytes are about to change).
    fn forget_crcs(&mut self, within: usize, n: usize) {
        if let Some(c) = &mut self.crcs {
            if n > 0 {
                let (first, last) = (within / CRC_BLOCK, (within + n - 1) / CRC_BLOCK);
                let mask = (u32::MAX >> (31 - (last - first))) << first;
                c.known &= !mask;
            }
        }
    }
}

/// Joins the CRCs of consecutive 4 KiB blocks.
fn block_combine() -> &'static Crc32cCombine {
    static C: std::sync::OnceLock<Crc32cCombine> = std::sync::OnceLock::new();
    C.get_or_init(|| Crc32cCombine::new(CRC_BLOCK))
}

/// The CRC32C of a block of zeroes.
fn zero_block_crc() -> u32 {
    static Z: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *Z.get_or_init(|| crc32c(&ZERO_CHUNK[..CRC_BLOCK]))
}

/// The CRC32C of `data`, which starts `within` bytes into its chunk: the
/// partial blocks at either end are read, each whole block's CRC comes from
/// `block_crc(block index in the chunk, its bytes)`.
fn range_crc(data: &[u8], within: usize, mut block_crc: impl FnMut(usize, &[u8]) -> u32) -> u32 {
    let head = (within.next_multiple_of(CRC_BLOCK) - within).min(data.len());
    let mut crc = crc32c(&data[..head]);
    let mut pos = head;
    let combine = block_combine();
    while data.len() - pos >= CRC_BLOCK {
        let b = block_crc((within + pos) / CRC_BLOCK, &data[pos..pos + CRC_BLOCK]);
        crc = combine.combine(crc, b);
        pos += CRC_BLOCK;
    }
    crc32c_append(crc, &data[pos..])
}

/// A namespace held in memory. Contents are lost on exit.
pub struct MemBackend {
    /// One entry per chunk.
    chunks: RwLock<Vec<Mutex<Slot>>>,
    /// Capacity in bytes (a multiple of the block size).
    size: AtomicU64,
    block_size: u32,
}

/// The machine's physical memory in bytes (None where unknown).
fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf only reads system parameters.
    let (pages, page) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    (pages > 0 && page > 0).then(|| (pages as u64).saturating_mul(page as u64))
}

impl MemBackend {
    /// Refuses a capacity larger than the machine's memory: its contents
    /// could never be held, and the chunk table alone (40 bytes per 128 KiB,
    /// allocated up front) of a mistyped size such as `100T` took all memory
    /// until the OOM killer ended the target.
    pub fn check_capacity(size: u64) -> Result<(), String> {
        match physical_memory() {
            Some(mem) if size > mem => Err(format!(
                "a RAM namespace of {size} bytes is larger than this machine's memory ({mem} bytes)"
            )),
            _ => Ok(()),
        }
    }

    /// A zero-filled namespace of `size` bytes (rounded down to whole blocks).
    pub fn new(size: u64, block_size: u32) -> Self {
        let size = size / block_size as u64 * block_size as u64;
        let n = size.div_ceil(CHUNK as u64) as usize;
        Self {
            chunks: RwLock::new((0..n).map(|_| Mutex::default()).collect()),
            size: AtomicU64::new(size),
            block_size,
        }
    }

    /// Flips bits of one byte (test hook for verify-mode and corruption tests).
    pub fn corrupt_byte(&self, offset: u64) {
        if offset < self.size() {
            self.modify(offset, 1, |d| d[0] ^= 0xFF);
        }
    }

    fn in_range(&self, offset: u64, len: u64) -> bool {
        offset.checked_add(len).is_some_and(|e| e <= self.size())
    }

    /// Calls `f` on each chunk piece of `offset..offset+len` (in range) with
    /// the piece's bytes, made writable (copy-on-write if the chunk is shared).
    fn modify(&self, offset: u64, len: u64, mut f: impl FnMut(&mut [u8])) {
        let chunks = self.chunks.read().unwrap();
        // A shrink since this I/O's range check cut off what lies past the
        // capacity now (a resize changes it under the write lock): dropped,
        // also inside the last chunk, whose tail the shrink zeroed and a
        // later grow must show as zeroes.
        let len = len.min(self.size().saturating_sub(offset));
        for_each_piece(offset, len, |idx, within, n| {
            // No chunk: a shrink cut it off after this I/O's range check;
            // bytes past the new end are dropped, as on a file truncated
            // under a write.
            let Some(chunk) = chunks.get(idx) else { return };
            let mut slot = chunk.lock().unwrap();
            slot.forget_crcs(within, n);
            f(&mut writable(&mut slot.data)[within..within + n]);
        });
    }

    /// Zeroes `offset..offset+len` (in range); whole chunks are released.
    fn zero(&self, offset: u64, len: u64) {
        let chunks = self.chunks.read().unwrap();
        let len = len.min(self.size().saturating_sub(offset));
        for_each_piece(offset, len, |idx, within, n| {
            let Some(chunk) = chunks.get(idx) else { return };
            let mut slot = chunk.lock().unwrap();
            if within == 0 && n == CHUNK {
                *slot = Slot::default();
            } else if !slot.data.is_empty() {
                slot.forget_crcs(within, n);
                writable(&mut slot.data)[within..within + n].fill(0);
            }
        });
    }

    /// Copies `offset..offset+dst.len()` (in range) into `dst`.
    fn copy_out(&self, offset: u64, dst: &mut [u8]) {
        let chunks = self.chunks.read().unwrap();
        let mut done = 0;
        for_each_piece(offset, dst.len() as u64, |idx, within, n| {
            // No chunk (cut off by a shrink under this read): zeroes.
            let c = chunks.get(idx).map(|c| c.lock().unwrap());
            let src = match &c {
                Some(c) if !c.data.is_empty() => &c.data[within..within + n],
                _ => &ZERO_CHUNK[within..within + n],
            };
            dst[done..done + n].copy_from_slice(src);
            done += n;
        });
    }

    fn execute(&self, op: IoOp) -> (Status, Bytes) {
        match op {
            IoOp::Read { offset, len } => {
                if !self.in_range(offset, len as u64) {
                    return (Status::LBA_RANGE.with_dnr(), Bytes::new());
                }
                if let Some(r) = self.slice(offset, len, false) {
                    return (Status::SUCCESS, r.data);
                }
                let mut buf = vec![0; len];
                self.copy_out(offset, &mut buf);
                (Status::SUCCESS, Bytes::from(buf))
            }
            IoOp::Write { offset, data, .. } => {
                if !self.in_range(offset, data.len() as u64) {
                    return (Status::LBA_RANGE.with_dnr(), Bytes::new());
                }
                let mut done = 0;
                self.modify(offset, data.len() as u64, |d| {
                    copy_streaming(d, &data[done..done + d.len()]);
                    done += d.len();
                });
                (Status::SUCCESS, Bytes::new())
            }
            IoOp::Flush => (Status::SUCCESS, Bytes::new()),
            IoOp::WriteZeroes { offset, len, .. } => {
                if !self.in_range(offset, len) {
                    return (Status::LBA_RANGE.with_dnr(), Bytes::new());
                }
                self.zero(offset, len);
                (Status::SUCCESS, Bytes::new())
            }
            IoOp::Deallocate { ranges } => {
                if ranges.iter().any(|&(o, l)| !self.in_range(o, l)) {
                    return (Status::LBA_RANGE.with_dnr(), Bytes::new());
                }
                for (offset, len) in ranges {
                    self.zero(offset, len);
                }
                (Status::SUCCESS, Bytes::new())
            }
        }
    }

    /// A reference to `offset..offset+len` (in range) when it lies in one
    /// chunk, with its CRC32C if `crc` (from the chunk's block CRCs where
    /// known; the blocks computed here are kept for the next read).
    fn slice(&self, offset: u64, len: usize, crc: bool) -> Option<SharedRead> {
        self.slice_with(offset, len, crc, || {})
    }

    /// [`Self::slice`], running `unlocked` while the chunk's lock is let go
    /// for the CRC computation (tests put a racing write there).
    fn slice_with(&self, offset: u64, len: usize, crc: bool, unlocked: impl FnOnce()) -> Option<SharedRead> {
        let idx = (offset / CHUNK as u64) as usize;
        let within = (offset % CHUNK as u64) as usize;
        if within + len > CHUNK {
            return None;
        }
        let chunks = self.chunks.read().unwrap();
        let chunk = chunks.get(idx)?;
        let c = chunk.lock().unwrap();
        if c.data.is_empty() {
            let data = Bytes::from_static(&ZERO_CHUNK[within..within + len]);
            let crc32c = crc.then(|| range_crc(&data, within, |_, _| zero_block_crc()));
            return Some(SharedRead { data, crc32c });
        }
        let data = c.data.slice(within..within + len);
        if !crc {
            drop(c);
            prefetch_small_read(&data);
            return Some(SharedRead { data, crc32c: None });
        }
        let (mut have, known) = match &c.crcs {
            Some(b) => (b.crc, b.known),
            None => ([0; CRC_BLOCKS], 0),
        };
        let base = c.data.as_ptr();
        // The CRCs of missing blocks are computed without the lock (12 µs for
        // 128 KiB of cold memory): `data` holds the chunk's allocation, so a
        // write in the meantime copies the chunk (see `writable`), and the
        // chunk still starting at `base` afterwards means nothing changed.
        drop(c);
        unlocked();
        let mut computed = 0u32;
        let crc32c = range_crc(&data, within, |i, block| {
            if known >> i & 1 == 0 {
                have[i] = crc32c(block);
                computed |= 1 << i;
            }
            have[i]
        });
        if computed != 0 {
            let mut c = chunk.lock().unwrap();
            if c.data.as_ptr() == base {
                let b = c.crcs.get_or_insert_with(|| Box::new(BlockCrcs { crc: [0; CRC_BLOCKS], known: 0 }));
                for i in (0..CRC_BLOCKS).filter(|i| computed >> i & 1 == 1) {
                    b.crc[i] = have[i];
                }
                b.known |= computed;
            }
        }
        prefetch_small_read(&data);
        Some(SharedRead { data, crc32c: Some(crc32c) })
    }
}

/// Reads up to this long have their first lines prefetched ([`prefetch_small_read`]).
const PREFETCH_MAX: usize = 16 << 10;

/// Cache lines prefetched at the start of each 4 KiB of a small read.
const PREFETCH_LINES: usize = 8;

/// Starts loading the first lines of each 4 KiB of a small read from memory
/// while the queue goes on with the other commands of its batch, so that the
/// socket copy later finds them coming or come. A 4 KiB random read over a
/// namespace larger than the caches is a cold page for that copy, which
/// spent most of the target's time waiting on memory (perf: `_copy_from_iter`
/// 57% of the target core at 4 KiB randread QD32 with polling). The hardware
/// prefetcher streams the rest of a page once its first lines missed; the
/// whole page prefetched stalled the core on fill buffers instead (64
/// prefetches per page: no gain). Measured on the 2-core Intel VM, 4 KiB
/// randread QD32 with polling, 6 alternating rounds: 8 lines per page 1.09×,
/// 4 or 16 lines 1.06×, 1 line 1.05×; 16 KiB reads 1.03×; 64 KiB reads 0.985×
/// and 128 KiB reads 0.93×, hence only up to 16 KiB.
fn prefetch_small_read(data: &[u8]) {
    if data.len() > PREFETCH_MAX {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    for page in data.chunks(4096) {
        for line in page.chunks(64).take(PREFETCH_LINES) {
            // SAFETY: a prefetch is only a hint (it never faults), and SSE is
            // part of the x86-64 baseline.
            unsafe { std::arch::x86_64::_mm_prefetch(line.as_ptr().cast(), std::arch::x86_64::_MM_HINT_T0) };
        }
    }
}

/// The chunk in `slot` as a writable buffer that is stored back when dropped.
/// Unique: the allocation is reused in place. Shared (a read of it is still
/// queued on a socket): copied first, leaving the reader's bytes untouched.
fn writable(slot: &mut Bytes) -> ChunkMut<'_> {
    let cur = std::mem::take(slot);
    let buf = if cur.is_empty() {
        BytesMut::zeroed(CHUNK)
    } else {
        cur.try_into_mut().unwrap_or_else(|shared| BytesMut::from(&shared[..]))
    };
    ChunkMut { slot, buf }
}

/// A chunk being written (see [`writable`]).
struct ChunkMut<'a> {
    slot: &'a mut Bytes,
    buf: BytesMut,
}

impl std::ops::Deref for ChunkMut<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl std::ops::DerefMut for ChunkMut<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for ChunkMut<'_> {
    fn drop(&mut self) {
        *self.slot = std::mem::take(&mut self.buf).freeze();
    }
}

/// Writes at least this long are copied with non-temporal stores.
const STREAM_MIN: usize = 4096;

/// Copies `src` into `dst` (same length). Long copies on x86-64 use
/// non-temporal (streaming) stores: the namespace is far larger than the
/// caches, so an ordinary copy first reads every destination line from memory
/// (read for ownership) only to overwrite it, and evicts hot lines for data
/// that is not read back soon. Streaming stores halve the memory traffic of a
/// write (perf: the copy into the namespace was half the target's time for
/// 128 KiB writes).
fn copy_streaming(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    if dst.len() >= STREAM_MIN {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // Head up to a 16-byte aligned destination, ordinary copy.
        let head = dst.as_ptr().align_offset(16).min(dst.len());
        dst[..head].copy_from_slice(&src[..head]);
        let body = (dst.len() - head) / 64 * 64;
        // SAFETY: SSE2 is part of the x86-64 baseline. Every access lies in
        // `head..head + body`, inside both slices (equal lengths), and the
        // stores' destination is 16-byte aligned (`head` aligned it; steps of
        // 16). Loads are unaligned loads.
        unsafe {
            let s = src.as_ptr().add(head);
            let d = dst.as_mut_ptr().add(head);
            let mut i = 0;
            while i < body {
                let a = _mm_loadu_si128(s.add(i) as *const __m128i);
                let b = _mm_loadu_si128(s.add(i + 16) as *const __m128i);
                let c = _mm_loadu_si128(s.add(i + 32) as *const __m128i);
                let e = _mm_loadu_si128(s.add(i + 48) as *const __m128i);
                _mm_stream_si128(d.add(i) as *mut __m128i, a);
                _mm_stream_si128(d.add(i + 16) as *mut __m128i, b);
                _mm_stream_si128(d.add(i + 32) as *mut __m128i, c);
                _mm_stream_si128(d.add(i + 48) as *mut __m128i, e);
                i += 64;
            }
            // Streaming stores are weakly ordered: fence them before the
            // chunk's lock is released, so a reader on another core that takes
            // the lock next sees them.
            _mm_sfence();
        }
        dst[head + body..].copy_from_slice(&src[head + body..]);
        return;
    }
    dst.copy_from_slice(src);
}

/// Splits `offset..offset+len` at chunk boundaries: `f(chunk index, offset in
/// chunk, length)` for each piece, in order.
fn for_each_piece(offset: u64, len: u64, mut f: impl FnMut(usize, usize, usize)) {
    let mut pos = offset;
    let end = offset + len;
    while pos < end {
        let idx = (pos / CHUNK as u64) as usize;
        let within = (pos % CHUNK as u64) as usize;
        let n = (CHUNK - within).min((end - pos) as usize);
        f(idx, within, n);
        pos += n as u64;
    }
}

impl Backend for MemBackend {
    fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn volatile_write_cache(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        format!("ram {} MiB", self.size() >> 20)
    }
    /// The chunks written (and not deallocated since), counted when asked:
    /// Identify Namespace is rare, and a counter kept by the writes would
    /// put a shared cache line on the I/O path.
    fn allocated_bytes(&self) -> Option<u64> {
        let chunks = self.chunks.read().unwrap();
        let held = chunks.iter().filter(|c| !c.lock().unwrap().data.is_empty()).count() as u64;
        Some((held * CHUNK as u64).min(self.size()))
    }
    fn holds_data(&self, offset: u64, len: u64) -> bool {
        let chunks = self.chunks.read().unwrap();
        let first = (offset / CHUNK as u64) as usize;
        let last = offset.saturating_add(len).div_ceil(CHUNK as u64) as usize;
        chunks.iter().take(last).skip(first).any(|c| !c.lock().unwrap().data.is_empty())
    }
    fn resize(&self, new_size: u64) -> Result<(), String> {
        Self::check_capacity(new_size)?;
        let new_size = new_size / self.block_size as u64 * self.block_size as u64;
        let mut chunks = self.chunks.write().unwrap();
        let old = self.size();
        if new_size < old {
            // Bytes cut off read as zeroes if the namespace grows again.
            let tail = (new_size % CHUNK as u64) as usize;
            if tail != 0 {
                let idx = (new_size / CHUNK as u64) as usize;
                let mut slot = chunks[idx].lock().unwrap();
                if !slot.data.is_empty() {
                    slot.forget_crcs(tail, CHUNK - tail);
                    writable(&mut slot.data)[tail..].fill(0);
                }
            }
        }
        let n = new_size.div_ceil(CHUNK as u64) as usize;
        chunks.resize_with(n, Mutex::default);
        self.size.store(new_size, Ordering::Release);
        Ok(())
    }
    fn read_shared(&self, offset: u64, len: usize, crc: bool) -> Option<Result<SharedRead, Status>> {
        if !self.in_range(offset, len as u64) {
            return Some(Err(Status::LBA_RANGE.with_dnr()));
        }
        self.slice(offset, len, crc).map(Ok)
    }
    fn read_into(&self, tag: u32, offset: u64, mut buf: BytesMut, _io: &QueueIo) -> Option<IoCompletion> {
        if !self.in_range(offset, buf.len() as u64) {
            return Some(IoCompletion::status(tag, Status::LBA_RANGE.with_dnr()));
        }
        self.copy_out(offset, &mut buf);
        Some(IoCompletion { tag, status: Status::SUCCESS, result: 0, data: buf.freeze() })
    }
    fn submit(&self, tag: u32, op: IoOp, _io: &QueueIo) -> Option<IoCompletion> {
        let (status, data) = self.execute(op);
        Some(IoCompletion { tag, status, result: 0, data })
    }
}

/// A [`MemBackend`] whose completions go to the queue's sink instead of being
/// returned inline, the way the thread-pool and io_uring backends complete:
/// commands stay in flight until the queue takes the completion from its
/// channel (the queue's unit tests and the `target_queue` fuzz target use it).
pub struct DeferredMemBackend(pub MemBackend);

impl Backend for DeferredMemBackend {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn allocated_bytes(&self) -> Option<u64> {
        self.0.allocated_bytes()
    }
    fn holds_data(&self, offset: u64, len: u64) -> bool {
        self.0.holds_data(offset, len)
    }
    fn block_size(&self) -> u32 {
        self.0.block_size()
    }
    fn volatile_write_cache(&self) -> bool {
        self.0.volatile_write_cache()
    }
    fn describe(&self) -> String {
        format!("{} (deferred completions)", self.0.describe())
    }
    fn resize(&self, new_size: u64) -> Result<(), String> {
        self.0.resize(new_size)
    }
    fn submit(&self, tag: u32, op: IoOp, io: &QueueIo) -> Option<IoCompletion> {
        let c = self.0.submit(tag, op, io).expect("RAM completes inline");
        let _ = io.sink.send(c);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(b: &MemBackend, offset: u64, len: usize) -> Bytes {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let r = b.submit(0, IoOp::Read { offset, len }, &QueueIo::detached(tx.clone())).unwrap();
        assert!(r.status.is_success());
        r.data
    }

    /// The streaming copy equals an ordinary copy for every destination
    /// alignment and length around the streaming threshold and the 64-byte
    /// loop, and leaves bytes outside the destination alone.
    #[test]
    fn streaming_copy_matches_copy_from_slice() {
        let src: Vec<u8> = (0..STREAM_MIN as u32 * 3).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in
            [0, 1, 63, STREAM_MIN - 1, STREAM_MIN, STREAM_MIN + 1, STREAM_MIN + 63, 2 * STREAM_MIN + 17]
        {
            for dst_off in 0..17 {
                for src_off in [0, 1, 5] {
                    let mut dst = vec![0xA5u8; len + 40];
                    copy_streaming(&mut dst[dst_off..dst_off + len], &src[src_off..src_off + len]);
                    assert_eq!(
                        &dst[dst_off..dst_off + len],
                        &src[src_off..src_off + len],
                        "len {len} dst_off {dst_off}"
                    );
                    assert!(dst[..dst_off].iter().chain(&dst[dst_off + len..]).all(|&b| b == 0xA5));
                }
            }
        }
    }

    fn write(b: &MemBackend, offset: u64, data: &[u8]) {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let op = IoOp::Write { offset, data: Bytes::copy_from_slice(data), fua: false };
        assert!(b.submit(0, op, &QueueIo::detached(tx.clone())).unwrap().status.is_success());
    }

    /// The bytes held follow the chunks written: a write into an empty
    /// chunk adds one (a second write into it nothing), zeroing part of a
    /// chunk keeps it, zeroing all of it releases it, a shrink drops the
    /// chunks it cuts off (and a grow adds none).
    #[test]
    fn allocated_bytes_count_the_chunks_written() {
        let b = MemBackend::new(1 << 20, 512);
        let held = |b: &MemBackend| b.allocated_bytes().unwrap() / CHUNK as u64;
        assert_eq!(held(&b), 0);
        write(&b, 0, &[1; 512]);
        write(&b, 512, &[2; 512]);
        assert_eq!(held(&b), 1);
        // Across a chunk boundary: two more.
        write(&b, 3 * CHUNK as u64 - 512, &[3; 1024]);
        assert_eq!(held(&b), 3);
        b.zero(0, 512);
        assert_eq!(held(&b), 3, "part of a chunk zeroed: still held");
        b.zero(0, CHUNK as u64);
        assert_eq!(held(&b), 2);
        b.zero(0, CHUNK as u64);
        assert_eq!(held(&b), 2, "an empty chunk released twice counts once");
        // Chunks 2 and 3 hold data; the shrink drops 3 and cuts 2 short.
        b.resize(2 * CHUNK as u64 + 512).unwrap();
        assert_eq!(held(&b), 1, "chunk 3 dropped, chunk 2 cut but held");
        b.resize(CHUNK as u64).unwrap();
        assert_eq!(held(&b), 0);
        b.resize(1 << 20).unwrap();
        assert_eq!(held(&b), 0);
        write(&b, (1 << 20) - 512, &[4; 512]);
        assert_eq!(b.allocated_bytes(), Some(CHUNK as u64));
    }

    #[test]
    fn read_write_zero_and_range() {
        let b = MemBackend::new(1 << 20, 512);
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let w = b.submit(
            1,
            IoOp::Write { offset: 512, data: Bytes::from_static(&[7; 512]), fua: false },
            &QueueIo::detached(tx.clone()),
        );
        assert_eq!(w.unwrap().status, Status::SUCCESS);
        let r = b.submit(2, IoOp::Read { offset: 512, len: 512 }, &QueueIo::detached(tx.clone())).unwrap();
        assert_eq!((r.tag, &r.data[..]), (2, &[7u8; 512][..]));
        let z = b
            .submit(
                3,
                IoOp::WriteZeroes { offset: 512, len: 512, deallocate: true },
                &QueueIo::detached(tx.clone()),
            )
            .unwrap();
        assert!(z.status.is_success());
        assert_eq!(
            &b.submit(4, IoOp::Read { offset: 512, len: 4 }, &QueueIo::detached(tx.clone())).unwrap().data[..],
            &[0; 4]
        );
        let oob = b
            .submit(5, IoOp::Read { offset: (1 << 20) - 512, len: 1024 }, &QueueIo::detached(tx.clone()))
            .unwrap();
        assert_eq!(oob.status, Status::LBA_RANGE.with_dnr());
        assert_eq!(b.read_shared((1 << 20) - 512, 1024, false), Some(Err(Status::LBA_RANGE.with_dnr())));
    }

    #[test]
    fn shared_read_keeps_its_bytes_across_a_later_write() {
        let b = MemBackend::new(1 << 20, 512);
        write(&b, 4096, &[1; 4096]);
        let held = b.read_shared(4096, 4096, false).unwrap().unwrap().data;
        // The write must not change bytes a socket may still be sending.
        write(&b, 4096, &[2; 4096]);
        assert_eq!(&held[..], &[1; 4096][..]);
        assert_eq!(&read(&b, 4096, 4096)[..], &[2; 4096][..]);
        drop(held);
        // Unshared again: written in place, still correct.
        write(&b, 4096 + 512, &[3; 512]);
        let r = read(&b, 4096, 4096);
        assert_eq!((&r[..512], &r[512..1024], &r[1024..]), (&[2; 512][..], &[3; 512][..], &[2; 3072][..]));
    }

    #[test]
    fn io_across_chunk_boundaries() {
        let b = MemBackend::new(1 << 20, 512);
        let data: Vec<u8> = (0..3 * CHUNK).map(|i| (i * 7 % 251) as u8).collect();
        let off = CHUNK as u64 / 2;
        write(&b, off, &data[..2 * CHUNK]);
        // Spans three chunks: no single slice, copied.
        assert_eq!(b.read_shared(off, 2 * CHUNK, true), None);
        assert_eq!(&read(&b, off, 2 * CHUNK)[..], &data[..2 * CHUNK]);
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let c = b.read_into(0, off - 512, BytesMut::zeroed(1024), &QueueIo::detached(tx.clone())).unwrap();
        assert_eq!((&c.data[..512], &c.data[512..]), (&[0; 512][..], &data[..512]));
        // Zeroing a range that covers a whole chunk and parts of two others.
        b.zero(off + 512, 2 * CHUNK as u64 - 1024);
        let r = read(&b, off, 2 * CHUNK);
        assert_eq!(&r[..512], &data[..512]);
        assert!(r[512..2 * CHUNK - 512].iter().all(|&x| x == 0));
        assert_eq!(&r[2 * CHUNK - 512..], &data[2 * CHUNK - 512..2 * CHUNK]);
    }

    #[test]
    fn shrink_then_grow_reads_zeroes() {
        let b = MemBackend::new(1 << 20, 512);
        write(&b, 200 << 10, &[9; 8192]);
        b.resize(202 << 10).unwrap();
        assert_eq!(b.size(), 202 << 10);
        b.resize(1 << 20).unwrap();
        let r = read(&b, 200 << 10, 8192);
        assert_eq!((&r[..2048], &r[2048..]), (&[9; 2048][..], &[0; 6144][..]));
        b.corrupt_byte(200 << 10);
        assert_eq!(read(&b, 200 << 10, 1)[0], 9 ^ 0xFF);
    }

    /// An I/O range-checked against the old size that reaches the chunk
    /// table after a shrink published a shorter one: what the race leaves
    /// behind, driven directly (the chunk accessors run after the check).
    #[test]
    fn io_past_a_shrink_in_flight_is_dropped_or_reads_zeroes() {
        let b = MemBackend::new(1 << 20, 512);
        write(&b, 900 << 10, &[5; 4096]);
        b.resize(256 << 10).unwrap();
        b.modify(900 << 10, 4096, |d| d.fill(7));
        b.zero(900 << 10, 4096);
        let mut out = [1u8; 4096];
        b.copy_out(900 << 10, &mut out);
        assert_eq!(out, [0; 4096]);
        assert_eq!(b.slice(900 << 10, 4096, true), None);
        b.resize(1 << 20).unwrap();
        assert_eq!(&read(&b, 900 << 10, 4096)[..], &[0; 4096][..]);
    }

    /// The same for a shrink to the middle of a chunk: a write executing
    /// after it leaves nothing past the new end, so a later grow reads zeroes
    /// there (it read the write's bytes: the chunk outlives the shrink).
    #[test]
    fn write_racing_a_shrink_leaves_nothing_past_the_end() {
        let b = MemBackend::new(1 << 20, 512);
        b.resize(100 * 512).unwrap();
        // What Write does after its range check (made against the old 1 MiB).
        b.modify(99 * 512, 2 * 512, |d| d.fill(0xFF));
        b.resize(1 << 20).unwrap();
        assert!(read(&b, 99 * 512, 512).iter().all(|&x| x == 0xFF));
        assert!(read(&b, 100 * 512, 512).iter().all(|&x| x == 0), "bytes past the shrunk end came back");
    }

    /// Reads and writes on two threads while the namespace shrinks and grows
    /// under them: no panic, and the namespace reads back what is written
    /// after the last resize.
    #[test]
    fn io_concurrent_with_resizes() {
        let b = std::sync::Arc::new(MemBackend::new(1 << 20, 512));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let workers: Vec<_> = (0..2u8)
            .map(|t| {
                let (b, stop) = (b.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) && i < 1_000_000 {
                        // Ranges across chunk boundaries, over the whole 1 MiB.
                        let off = (i * 77 * 512 + t as u64 * 4096) % ((1 << 20) - 8192);
                        let op = if i.is_multiple_of(2) {
                            IoOp::Write { offset: off, data: Bytes::from(vec![t + 1; 8192]), fua: false }
                        } else {
                            IoOp::Read { offset: off, len: 8192 }
                        };
                        let (st, data) = b.execute(op);
                        assert!(st.is_success() || st == Status::LBA_RANGE.with_dnr());
                        assert!(data.is_empty() || data.len() == 8192);
                        i += 1;
                    }
                })
            })
            .collect();
        for r in 0..200u64 {
            b.resize(if r.is_multiple_of(2) { (128 + r * 3) << 10 } else { 1 << 20 }).unwrap();
            std::thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            w.join().unwrap();
        }
        write(&b, 0, &[3; 4096]);
        assert_eq!(&read(&b, 0, 4096)[..], &[3; 4096][..]);
        assert_eq!(b.size(), 1 << 20);
    }

    fn known_crcs(b: &MemBackend, chunk: usize) -> u32 {
        b.chunks.read().unwrap()[chunk].lock().unwrap().crcs.as_ref().map_or(0, |c| c.known)
    }

    /// A digested read's CRC is the CRC of the bytes it hands out, after
    /// writes, zeroes, deallocations and resizes of any alignment: the kept
    /// block CRCs never outlive the bytes they describe.
    #[test]
    fn shared_read_crc_matches_its_bytes_after_any_change() {
        let b = MemBackend::new(1 << 20, 512);
        let check = |off: u64, len: usize| {
            let r = b.read_shared(off, len, true).unwrap().unwrap();
            assert_eq!(r.crc32c, Some(crc32c(&r.data)), "read {off}+{len}");
        };
        let reads: [(u64, usize); 7] = [
            (0, CHUNK),
            (512, 4096),
            (4096, 8192),
            (100, 9000),
            (CHUNK as u64, CHUNK),
            (3 * 4096 + 7, 1),
            (0, 4096),
        ];
        // Unwritten chunks: zeroes.
        for &(o, l) in &reads {
            check(o, l);
        }
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..300u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = x % (3 * CHUNK as u64);
            let len = 1 + (x >> 20) % 20_000;
            match step % 6 {
                0..=2 => {
                    let data: Vec<u8> = (0..len).map(|i| (i ^ x ^ step) as u8).collect();
                    b.modify(off, len, |d| d.copy_from_slice(&data[..d.len()]));
                }
                3 => b.zero(off, len),
                4 => b.zero(off / CHUNK as u64 * CHUNK as u64, CHUNK as u64),
                _ => {
                    b.resize((x >> 30) % (1 << 20) / 512 * 512 + 512).unwrap();
                    b.resize(1 << 20).unwrap();
                }
            }
            for &(o, l) in &reads {
                check(o, l);
                check(o + 2 * CHUNK as u64, l);
            }
        }
    }

    /// Digested reads keep their blocks' CRCs; a write forgets only those of
    /// the blocks it touches; plain reads keep none.
    #[test]
    fn block_crcs_are_kept_per_block() {
        let b = MemBackend::new(1 << 20, 512);
        write(&b, 0, &[7; CHUNK]);
        b.read_shared(0, CHUNK, false).unwrap().unwrap();
        assert_eq!(known_crcs(&b, 0), 0);
        b.read_shared(4096 + 100, 3 * 4096, true).unwrap().unwrap();
        // Whole blocks 2 and 3 (block 1 and 4 only in part).
        assert_eq!(known_crcs(&b, 0), 0b1100);
        b.read_shared(0, CHUNK, true).unwrap().unwrap();
        assert_eq!(known_crcs(&b, 0), u32::MAX);
        write(&b, 4096 + 4000, &[1; 200]);
        assert_eq!(known_crcs(&b, 0), !0b110);
        b.zero(31 * 4096, 1);
        assert_eq!(known_crcs(&b, 0), !0b110 & !(1 << 31));
        let r = b.read_shared(0, CHUNK, true).unwrap().unwrap();
        assert_eq!((r.crc32c, known_crcs(&b, 0)), (Some(crc32c(&r.data)), u32::MAX));
        // A CRC computed while a write replaced the chunk is not kept (the
        // chunk was copied: the read's bytes are the old ones).
        b.zero(0, CHUNK as u64);
        write(&b, 0, &[4; CHUNK]);
        let r = b.slice_with(0, CHUNK, true, || write(&b, 8192, &[5; 4096])).unwrap();
        assert_eq!((r.data[8192], r.crc32c), (4, Some(crc32c(&[4; CHUNK]))));
        assert_eq!(known_crcs(&b, 0), 0);
        let r = b.read_shared(0, CHUNK, true).unwrap().unwrap();
        assert_eq!((r.data[8192], r.crc32c), (5, Some(crc32c(&r.data))));
        assert_eq!(known_crcs(&b, 0), u32::MAX);
    }

    /// Digested reads racing writes to the same chunk on other threads: each
    /// read's CRC matches the bytes it got (they never change under it).
    #[test]
    fn shared_read_crc_holds_under_concurrent_writes() {
        let b = std::sync::Arc::new(MemBackend::new(1 << 20, 512));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (b, stop) = (b.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) && i < 2_000_000 {
                    let off = (i * 4096 + i % 7 * 512) % (CHUNK as u64 - 8192);
                    b.modify(off, 8192 - i % 3 * 512, |d| d.fill(i as u8));
                    i += 1;
                }
            })
        };
        for i in 0..3000usize {
            let (off, len) = [(0, CHUNK), (4096, 65536), (512, 20000)][i % 3];
            let r = b.read_shared(off, len, true).unwrap().unwrap();
            assert_eq!(r.crc32c, Some(crc32c(&r.data)), "read {i}");
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    }
}
