//! Verify patterns: every logical block written in verify mode describes
//! itself, so a later read (in the same run or another) can check it.
//!
//! Block layout (little-endian):
//!
//! | bytes | content |
//! |---|---|
//! | 0..8 | magic `NVMEOFPB` |
//! | 8..16 | the block's LBA |
//! | 16..24 | generation (unique per write of the probe) |
//! | 24..end | a pseudo-random stream seeded from (LBA, generation) |
//!
//! A corrupted byte anywhere, data written to the wrong LBA, or a block the
//! probe never wrote is detected (in mixed read/write runs, a never-written
//! block reads as deallocated, all zeros or all ones, and is skipped unless a
//! write of it had completed, see [`WrittenUnits`]). A stale but intact block (a lost write) is
//! not: the check is per block and needs no record of what was written.

use std::sync::atomic::{AtomicU64, Ordering};

/// Magic at the start of every verify block.
pub const MAGIC: [u8; 8] = *b"NVMEOFPB";
/// Header length; blocks must be larger.
pub const HEADER_LEN: usize = 24;

/// One block that did not verify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// LBA of the bad block.
    pub lba: u64,
    /// Offset of the first differing byte within the block.
    pub offset: usize,
    /// Expected byte there.
    pub expected: u8,
    /// Byte read.
    pub actual: u8,
    /// What kind of mismatch.
    pub reason: &'static str,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "verify mismatch at lba={}: {} (block offset {}: expected {:#04x}, read {:#04x})",
            self.lba, self.reason, self.offset, self.expected, self.actual
        )
    }
}

#[inline]
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[inline]
fn stream_seed(lba: u64, generation: u64) -> u64 {
    splitmix(lba ^ generation.rotate_left(32) ^ 0x005E_ED0F_B10C)
}

/// Byte `i` (from `HEADER_LEN`) of the filler of (lba, generation), 8 at a time.
#[inline]
fn filler_word(seed: u64, i: usize) -> [u8; 8] {
    splitmix(seed.wrapping_add(i as u64)).to_le_bytes()
}

/// Fills one block.
pub fn fill_block(block: &mut [u8], lba: u64, generation: u64) {
    block[..8].copy_from_slice(&MAGIC);
    block[8..16].copy_from_slice(&lba.to_le_bytes());
    block[16..24].copy_from_slice(&generation.to_le_bytes());
    let seed = stream_seed(lba, generation);
    for (i, chunk) in block[HEADER_LEN..].chunks_mut(8).enumerate() {
        let w = filler_word(seed, i);
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// Fills a buffer of consecutive blocks starting at `lba`.
pub fn fill(buf: &mut [u8], block_size: usize, lba: u64, generation: u64) {
    for (i, b) in buf.chunks_mut(block_size).enumerate() {
        fill_block(b, lba + i as u64, generation);
    }
}

/// Checks one block read from `lba`.
pub fn check_block(block: &[u8], lba: u64) -> Result<(), Mismatch> {
    let mm = |offset: usize, expected: u8, reason| Mismatch {
        lba,
        offset,
        expected,
        actual: block[offset],
        reason,
    };
    if block[..8] != MAGIC {
        let reason = if block.iter().all(|&b| b == 0) {
            "block is all zeros (never written with --verify)"
        } else if block.iter().all(|&b| b == 0xFF) {
            "block is all ones (never written with --verify)"
        } else {
            "no verify header (bad magic)"
        };
        let i = (0..8).find(|&i| block[i] != MAGIC[i]).unwrap_or(0);
        return Err(mm(i, MAGIC[i], reason));
    }
    let lba_bytes = lba.to_le_bytes();
    if let Some(i) = (0..8).find(|&i| block[8 + i] != lba_bytes[i]) {
        return Err(mm(8 + i, lba_bytes[i], "header holds another LBA (misplaced data or corrupted header)"));
    }
    let generation = u64::from_le_bytes(block[16..24].try_into().expect("8 bytes"));
    let seed = stream_seed(lba, generation);
    for (i, chunk) in block[HEADER_LEN..].chunks(8).enumerate() {
        let w = filler_word(seed, i);
        if chunk != &w[..chunk.len()] {
            let j = (0..chunk.len()).find(|&j| chunk[j] != w[j]).expect("differs");
            return Err(mm(
                HEADER_LEN + i * 8 + j,
                w[j],
                "data differs from the pattern written (or the generation field is corrupted)",
            ));
        }
    }
    Ok(())
}

/// Units of a region (I/O-sized pieces) that writes of this run have
/// completed on, for mixed read/write runs with verify: there a read of a
/// block nothing has written yet finds it deallocated, which is not a fault
/// (fio verifies only what it wrote), while a deallocated block where a
/// write had completed before the read was sent is a lost write.
pub struct WrittenUnits(Box<[AtomicU64]>);

impl WrittenUnits {
    /// None written, for a region of `units` units (one bit each).
    pub fn new(units: u64) -> Self {
        Self((0..units.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    /// Records that a write of `unit` completed.
    pub fn mark(&self, unit: u64) {
        if let Some(w) = self.0.get((unit / 64) as usize) {
            w.fetch_or(1 << (unit % 64), Ordering::Relaxed);
        }
    }

    /// Forgets the writes of `n` units from `first` (their blocks were reset).
    pub fn clear_range(&self, first: u64, n: u64) {
        for unit in first..first.saturating_add(n) {
            if let Some(w) = self.0.get((unit / 64) as usize) {
                w.fetch_and(!(1 << (unit % 64)), Ordering::Relaxed);
            }
        }
    }

    /// Whether a write of `unit` has completed (ask before sending the read).
    pub fn contains(&self, unit: u64) -> bool {
        self.0.get((unit / 64) as usize).is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (unit % 64)) != 0)
    }
}

/// Checks a buffer of consecutive blocks read from `lba`; calls `bad` for
/// each bad block. Where `written(i)` is false for its block `i` (no write of
/// this run had completed on it when the read was sent, see [`WrittenUnits`])
/// a block that reads as deallocated is not checked: all zeros, or all ones,
/// which NVMe also allows (Identify Namespace DLFEAT 010b) and zoned null_blk
/// devices return beyond a zone's write pointer. Returns (bad, skipped) block
/// counts.
pub fn check_read(
    buf: &[u8],
    block_size: usize,
    lba: u64,
    written: impl Fn(usize) -> bool,
    mut bad: impl FnMut(Mismatch),
) -> (u64, u64) {
    let (mut n, mut zero) = (0, 0);
    for (i, b) in buf.chunks(block_size).enumerate() {
        if !written(i) && (b.iter().all(|&x| x == 0) || b.iter().all(|&x| x == 0xFF)) {
            zero += 1;
        } else if let Err(m) = check_block(b, lba + i as u64) {
            n += 1;
            bad(m);
        }
    }
    (n, zero)
}

/// Checks a buffer of consecutive blocks read from `lba`; calls `bad` for each bad block and
/// returns how many were bad.
pub fn check(buf: &[u8], block_size: usize, lba: u64, bad: impl FnMut(Mismatch)) -> u64 {
    check_read(buf, block_size, lba, |_| true, bad).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_zero_blocks_are_skipped_but_bad_ones_are_not() {
        let mut buf = vec![0u8; 2048];
        fill(&mut buf[..1024], 512, 100, 7);
        // Blocks 100-101 written, 102-103 zeros.
        assert_eq!(check_read(&buf, 512, 100, |_| false, |_| panic!()), (0, 2));
        buf[600] ^= 1;
        let mut seen = Vec::new();
        assert_eq!(check_read(&buf, 512, 100, |_| false, |m| seen.push(m.lba)), (1, 2));
        assert_eq!(seen, [101]);
        // The strict check counts the zero blocks as bad.
        assert_eq!(check(&buf, 512, 100, |_| {}), 3);
        // Per block: a zero block a write had completed on (102) is a lost write.
        let mut seen = Vec::new();
        assert_eq!(check_read(&buf, 512, 100, |i| i == 2, |m| seen.push(m.lba)), (2, 1));
        assert_eq!(seen, [101, 102]);
        // Deallocated blocks may read as ones too (DLFEAT 010b); other
        // uniform bytes are damage.
        buf[1024..1536].fill(0xFF);
        buf[1536..].fill(0x5A);
        let mut seen = Vec::new();
        assert_eq!(check_read(&buf, 512, 100, |_| false, |m| seen.push(m.lba)), (2, 1));
        assert_eq!(seen, [101, 103]);
        let mut reasons = Vec::new();
        check(&buf, 512, 100, |m| reasons.push(m.reason));
        assert_eq!(reasons[1], "block is all ones (never written with --verify)");
    }

    #[test]
    fn written_units_record_completed_writes() {
        let w = WrittenUnits::new(130);
        assert!(!w.contains(0) && !w.contains(129));
        w.mark(0);
        w.mark(64);
        w.mark(129);
        assert!(w.contains(0) && w.contains(64) && w.contains(129));
        assert!(!w.contains(1) && !w.contains(63) && !w.contains(128));
        // Out of range: ignored, never written.
        w.mark(10_000);
        assert!(!w.contains(10_000));
    }

    #[test]
    fn round_trip_and_every_corruption_is_caught() {
        let mut buf = vec![0u8; 4096];
        fill(&mut buf, 512, 100, 7);
        assert_eq!(check(&buf, 512, 100, |_| panic!()), 0);
        // Wrong place.
        let mut bad = Vec::new();
        assert_eq!(check(&buf, 512, 101, |m| bad.push(m)), 8);
        // Every single byte flip is detected, in the right block.
        for off in (0..4096).step_by(37) {
            let mut b = buf.clone();
            b[off] ^= 0xFF;
            let mut found = Vec::new();
            check(&b, 512, 100, |m| found.push(m));
            assert_eq!(found.len(), 1, "offset {off}");
            assert_eq!(found[0].lba, 100 + off as u64 / 512);
        }
        let zeros = vec![0u8; 512];
        let e = check_block(&zeros, 3).unwrap_err();
        assert!(e.reason.contains("zeros"));
    }
}
