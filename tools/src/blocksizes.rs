//! Request sizes of a probe run, per direction, as fio gives them:
//! `--bs 4k` (every request), `--bs 4k,64k` (reads 4 KiB, writes and trims
//! 64 KiB), `--bs 4k,64k,8k` (and trims 8 KiB), and `--bssplit
//! 4k/60:64k/30:1m/10` (a size drawn per request with those weights; a
//! comma gives the writes and trims lists of their own). The syntax and the
//! rules for what is left out are fio's (`bs` and `bssplit` in fio's
//! HOWTO), so a fio job's values can be passed as they are.

use std::fmt;

use crate::probe::OpKind;
use crate::util::parse_size;

/// fio's default request size, for a direction left empty (`--bs ,8k`).
pub const DEFAULT_BS: u64 = 4096;

/// The sizes of one direction: `(bytes, percent)` entries, the percentages
/// adding up to 100.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeSplit(Vec<(u64, u8)>);

impl SizeSplit {
    /// Every request `bytes`.
    pub fn single(bytes: u64) -> Self {
        Self(vec![(bytes, 100)])
    }

    /// The entries: `(bytes, percent)`.
    pub fn entries(&self) -> &[(u64, u8)] {
        &self.0
    }

    /// The one size, where there is only one.
    pub fn only(&self) -> Option<u64> {
        match self.0.as_slice() {
            [(b, _)] => Some(*b),
            _ => None,
        }
    }

    /// The smallest size drawn (entries of 0% are never drawn).
    pub fn min(&self) -> u64 {
        self.drawn().min().unwrap_or(DEFAULT_BS)
    }

    /// The largest size drawn.
    pub fn max(&self) -> u64 {
        self.drawn().max().unwrap_or(DEFAULT_BS)
    }

    fn drawn(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().filter(|e| e.1 > 0).map(|e| e.0)
    }

    /// Parses fio's `SIZE/PERCENT:SIZE/PERCENT...`; entries without a
    /// percentage share what the others leave of 100 evenly (the last of
    /// them takes the remainder of the division), as fio fills them in.
    fn parse(s: &str) -> Result<Self, String> {
        let mut given = 0u32;
        let mut entries = Vec::new();
        for e in s.split(':') {
            let (size, pct) = match e.split_once('/') {
                Some((size, p)) if !p.trim().is_empty() => {
                    let p: u8 = p
                        .trim()
                        .parse()
                        .ok()
                        .filter(|&p| p <= 100)
                        .ok_or_else(|| format!("{e:?}: the percentage must be 0 to 100"))?;
                    given += p as u32;
                    (size, Some(p))
                }
                Some((size, _)) => (size, None),
                None => (e, None),
            };
            let bytes = parse_size(size)?;
            if bytes == 0 {
                return Err(format!("{e:?}: a request size must be positive"));
            }
            entries.push((bytes, pct));
        }
        if given > 100 {
            return Err(format!("{s:?}: the percentages add up to {given}, more than 100"));
        }
        let blank = entries.iter().filter(|e| e.1.is_none()).count() as u32;
        if blank == 0 && given != 100 {
            return Err(format!("{s:?}: the percentages add up to {given}, not 100"));
        }
        let left = 100 - given;
        let mut k = 0;
        let entries = entries
            .into_iter()
            .map(|(b, p)| {
                let p = p.unwrap_or_else(|| {
                    k += 1;
                    (left / blank + if k == blank { left % blank } else { 0 }) as u8
                });
                (b, p)
            })
            .collect::<Vec<_>>();
        if entries.iter().all(|e| e.1 == 0) {
            return Err(format!("{s:?}: no size has a share of the requests"));
        }
        Ok(Self(entries))
    }
}

/// fio's short form of a size: `4k`, `1m`, or bytes.
fn short(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b.is_multiple_of(1 << 20) => format!("{}m", b >> 20),
        b if b >= 1 << 10 && b.is_multiple_of(1 << 10) => format!("{}k", b >> 10),
        b => b.to_string(),
    }
}

impl fmt::Display for SizeSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(b) = self.only() {
            return f.write_str(&short(b));
        }
        for (i, (b, p)) in self.0.iter().enumerate() {
            write!(f, "{}{}/{p}", if i > 0 { ":" } else { "" }, short(*b))?;
        }
        Ok(())
    }
}

/// The index of `op`'s direction in [`BlockSizes`]: reads, writes (and
/// Flushes), trims.
fn dir(op: OpKind) -> usize {
    match op {
        OpKind::Read => 0,
        OpKind::Write | OpKind::Flush => 1,
        OpKind::Trim => 2,
    }
}

/// The request sizes of reads, writes and trims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockSizes {
    dirs: [SizeSplit; 3],
    /// Given as a split (`--bssplit`): reported under fio's `bssplit` key.
    split: bool,
}

impl BlockSizes {
    /// Every request of every direction `bytes`.
    pub fn uniform(bytes: u64) -> Self {
        Self { dirs: std::array::from_fn(|_| SizeSplit::single(bytes)), split: false }
    }

    /// Parses `--bs`: `SIZE` or `READ,WRITE[,TRIM]` (fio's `bs`).
    pub fn parse_bs(s: &str) -> Result<Self, String> {
        Self::parse_dirs(s, |p| parse_size(p).map(SizeSplit::single), false)
    }

    /// Parses `--bssplit`: `SPLIT[,SPLIT[,SPLIT]]` for reads, writes and
    /// trims (fio's `bssplit`).
    pub fn parse_bssplit(s: &str) -> Result<Self, String> {
        Self::parse_dirs(s, SizeSplit::parse, true)
    }

    /// Per direction, as fio reads `bs=` and `bssplit=`: a missing write
    /// value is the read one and a missing trim value the write one
    /// (`8k,32k`: writes and trims 32k), an empty one fio's default
    /// (`8k,32k,`: trims 4k; `,8k`: reads 4k).
    fn parse_dirs(
        s: &str,
        one: impl Fn(&str) -> Result<SizeSplit, String>,
        split: bool,
    ) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if parts.len() > 3 {
            return Err(format!("{s:?}: at most three values (reads, writes, trims)"));
        }
        let mut dirs: Vec<SizeSplit> = Vec::with_capacity(3);
        for i in 0..3 {
            let d = match parts.get(i) {
                None => dirs[i - 1].clone(),
                Some(&"") => SizeSplit::single(DEFAULT_BS),
                Some(p) => one(p)?,
            };
            if d.entries().iter().any(|e| e.0 == 0 || e.0 > u32::MAX as u64) {
                return Err(format!("{s:?}: a request size must be 1 byte to 4 GiB"));
            }
            dirs.push(d);
        }
        let dirs: [SizeSplit; 3] = dirs.try_into().expect("three directions");
        Ok(Self { dirs, split })
    }

    /// The sizes of `op`'s requests (a Flush has none: the write sizes).
    pub fn of(&self, op: OpKind) -> &SizeSplit {
        &self.dirs[dir(op)]
    }

    /// The one size of every request of the directions in `ops`, where
    /// there is one (the runs whose requests all have one size).
    pub fn single(&self, ops: &[OpKind]) -> Option<u64> {
        let mut sizes = ops.iter().map(|&op| self.of(op).only());
        let first = sizes.next()??;
        sizes.all(|s| s == Some(first)).then_some(first)
    }

    /// The sizes the directions in `ops` may draw.
    pub fn used(&self, ops: &[OpKind]) -> impl Iterator<Item = u64> + '_ {
        let mut sent = [false; 3];
        ops.iter().for_each(|&op| sent[dir(op)] = true);
        (0..3).filter(move |&i| sent[i]).flat_map(move |i| self.dirs[i].drawn())
    }

    /// Whether it was given as `--bssplit`.
    pub fn is_split(&self) -> bool {
        self.split
    }
}

impl fmt::Display for BlockSizes {
    /// fio's form, shortest first: `4k`, `4k,64k` (writes and trims
    /// alike), `4k,64k,8k`; splits alike.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [r, w, t] = &self.dirs;
        if r == w && w == t {
            write!(f, "{r}")
        } else if w == t {
            write!(f, "{r},{w}")
        } else {
            write!(f, "{r},{w},{t}")
        }
    }
}

/// The sizes of one direction as a request draws them: `(cumulative
/// percent, blocks)` entries; a single entry draws nothing from the
/// generator, so a run with one size picks its offsets exactly as before
/// sizes could vary.
#[derive(Clone, Debug)]
pub struct SizeTable(Box<[(u8, u64)]>);

impl SizeTable {
    /// `split` in blocks of `block_size` bytes (each size is a multiple of it).
    pub fn new(split: &SizeSplit, block_size: u64) -> Self {
        let mut cum = 0u8;
        Self(
            split
                .entries()
                .iter()
                .filter(|e| e.1 > 0)
                .map(|&(b, p)| {
                    cum += p;
                    (cum, b / block_size)
                })
                .collect(),
        )
    }

    /// The blocks of the next request; `below(100)` draws a percentile
    /// where there is more than one size.
    #[inline]
    pub fn pick(&self, below: impl FnOnce(u64) -> u64) -> u64 {
        match &*self.0 {
            [(_, b)] => *b,
            t => {
                let r = below(100) as u8;
                t.iter().find(|e| r < e.0).unwrap_or(&t[t.len() - 1]).1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bs_per_direction_as_fio() {
        let b = BlockSizes::parse_bs("4k").unwrap();
        assert_eq!(b, BlockSizes::uniform(4096));
        assert_eq!(b.to_string(), "4k");
        let b = BlockSizes::parse_bs("8k,32k").unwrap();
        assert_eq!(
            [OpKind::Read, OpKind::Write, OpKind::Trim].map(|o| b.of(o).only()),
            [Some(8192), Some(32768), Some(32768)]
        );
        assert_eq!(b.to_string(), "8k,32k");
        let b = BlockSizes::parse_bs("8k,32k,").unwrap();
        assert_eq!(b.of(OpKind::Trim).only(), Some(4096));
        assert_eq!(b.to_string(), "8k,32k,4k");
        let b = BlockSizes::parse_bs(",8k").unwrap();
        assert_eq!((b.of(OpKind::Read).only(), b.of(OpKind::Write).only()), (Some(4096), Some(8192)));
        assert_eq!(b.single(&[OpKind::Read]), Some(4096));
        assert_eq!(b.single(&[OpKind::Read, OpKind::Write]), None);
        assert!(BlockSizes::parse_bs("4k,4k,4k,4k").is_err());
        assert!(BlockSizes::parse_bs("0").is_err());
        assert!(BlockSizes::parse_bs("8g").is_err());
        assert!(BlockSizes::parse_bs("4q").is_err());
    }

    #[test]
    fn bssplit_fills_blank_percentages_evenly() {
        let b = BlockSizes::parse_bssplit("4k/10:64k/50:32k/40").unwrap();
        assert_eq!(b.of(OpKind::Read).entries(), &[(4096, 10), (65536, 50), (32768, 40)]);
        assert_eq!(b.of(OpKind::Trim), b.of(OpKind::Read));
        assert_eq!(b.to_string(), "4k/10:64k/50:32k/40");
        assert!(b.is_split());
        assert_eq!((b.of(OpKind::Read).min(), b.of(OpKind::Read).max()), (4096, 65536));
        // Blanks share the remainder; the last blank takes what division leaves.
        let b = BlockSizes::parse_bssplit("4k/50:8k:16k/").unwrap();
        assert_eq!(b.of(OpKind::Write).entries(), &[(4096, 50), (8192, 25), (16384, 25)]);
        let b = BlockSizes::parse_bssplit("4k:8k:16k").unwrap();
        assert_eq!(b.of(OpKind::Read).entries(), &[(4096, 33), (8192, 33), (16384, 34)]);
        // Per direction: reads, then writes (and trims).
        let b = BlockSizes::parse_bssplit("2k/50:4k/50,4k/90:8k/10").unwrap();
        assert_eq!(b.of(OpKind::Read).entries(), &[(2048, 50), (4096, 50)]);
        assert_eq!(b.of(OpKind::Trim).entries(), &[(4096, 90), (8192, 10)]);
        assert_eq!(b.to_string(), "2k/50:4k/50,4k/90:8k/10");
        for bad in ["4k/60:8k/60", "4k/50:8k/40", "4k/101", "4k/x", "0/100", "4k/0"] {
            assert!(BlockSizes::parse_bssplit(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn used_sizes_follow_the_directions() {
        let b = BlockSizes::parse_bs("4k,64k,8k").unwrap();
        let mut r: Vec<u64> = b.used(&[OpKind::Read]).collect();
        assert_eq!(r, [4096]);
        r = b.used(&[OpKind::Read, OpKind::Write]).collect();
        assert_eq!(r, [4096, 65536]);
        r = b.used(&[OpKind::Trim, OpKind::Write]).collect();
        assert_eq!(r, [65536, 8192]);
    }

    #[test]
    fn size_table_draws_by_weight() {
        let t = SizeTable::new(&SizeSplit::single(8192), 512);
        assert_eq!(t.pick(|_| unreachable!("one size draws nothing")), 16);
        let split = SizeSplit::parse("4k/10:64k/0:32k/90").unwrap();
        let t = SizeTable::new(&split, 4096);
        let picks: Vec<u64> = (0..100).map(|r| t.pick(|n| r % n)).collect();
        assert_eq!(picks.iter().filter(|&&b| b == 1).count(), 10);
        assert_eq!(picks.iter().filter(|&&b| b == 8).count(), 90);
        assert!(!picks.contains(&16), "a 0% size is never drawn");
    }
}
