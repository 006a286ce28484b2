//! Copy (I/O OPC 19h): command fields and Source Range Entries in
//! descriptor format 0 (NVM Command Set 1.0 §3.2.2 "Copy command"; Linux
//! `struct nvme_copy_command`, `struct nvme_copy_range`; SPDK
//! `struct spdk_nvme_scc_source_range`).
//!
//! The limits a controller sets for it are in Identify Namespace (MSSRL,
//! MCL, MSRC, [`super::IdentifyNamespace`]), the formats it accepts in
//! Identify Controller OCFS, and support itself in ONCS bit 8.

use super::wire::{need, put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use super::SpecError;
use crate::opcode::IoOpcode;
use crate::sqe::{SglDescriptor, Sqe};

/// Size of one Source Range Entry in descriptor format 0.
pub const COPY_RANGE_LEN: usize = 32;
/// Maximum number of source ranges in one command (NR is 8 bits, 0's based).
pub const COPY_MAX_RANGES: usize = 256;
/// Identify Controller ONCS bit 8: the Copy command is supported.
pub const ONCS_COPY: u16 = 1 << 8;
/// Identify Controller OCFS bit 0: Copy descriptor format 0 is supported.
pub const OCFS_FORMAT0: u16 = 1 << 0;

/// One Source Range Entry, descriptor format 0: bytes 15:08 SLBA, 17:16 NLB
/// (0's based), 27:24 EILBRT, 29:28 ELBAT, 31:30 ELBATM (the last three
/// are end-to-end protection fields, meaningful only with protection
/// information; reserved bytes encode as zero).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CopyRange {
    /// Starting LBA of the source range.
    pub slba: u64,
    /// Number of logical blocks, 0's based (0 is one block).
    pub nlb: u16,
    /// Expected initial logical block reference tag.
    pub eilbrt: u32,
    /// Expected logical block application tag.
    pub elbat: u16,
    /// Expected logical block application tag mask.
    pub elbatm: u16,
}

impl CopyRange {
    /// A range of `blocks` blocks (1..=65536) from `slba`, no protection
    /// fields; `None` for 0 or more than 65536 blocks.
    pub fn new(slba: u64, blocks: u32) -> Option<Self> {
        let nlb = u16::try_from(blocks.checked_sub(1)?).ok()?;
        Some(Self { slba, nlb, ..Self::default() })
    }
    /// Number of blocks (NLB + 1).
    pub const fn blocks(&self) -> u32 {
        self.nlb as u32 + 1
    }
    /// Decodes 32 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, COPY_RANGE_LEN, "copy source range")?;
        Ok(Self {
            slba: u64_at(b, 8),
            nlb: u16_at(b, 16),
            eilbrt: u32_at(b, 24),
            elbat: u16_at(b, 28),
            elbatm: u16_at(b, 30),
        })
    }
    /// Encodes 32 bytes.
    pub fn encode(&self) -> [u8; COPY_RANGE_LEN] {
        let mut b = [0u8; COPY_RANGE_LEN];
        put_u64(&mut b, 8, self.slba);
        put_u16(&mut b, 16, self.nlb);
        put_u32(&mut b, 24, self.eilbrt);
        put_u16(&mut b, 28, self.elbat);
        put_u16(&mut b, 30, self.elbatm);
        b
    }
}

/// Encodes up to 256 ranges back to back (32 · n bytes).
pub fn encode_ranges(ranges: &[CopyRange]) -> Result<Vec<u8>, SpecError> {
    if ranges.len() > COPY_MAX_RANGES {
        return Err(SpecError::TooMany {
            what: "copy source ranges",
            max: COPY_MAX_RANGES,
            got: ranges.len(),
        });
    }
    Ok(ranges.iter().flat_map(|r| r.encode()).collect())
}

/// Decodes `count` ranges (NR + 1) from `b`, which must hold at least
/// 32 · count bytes (extra bytes are ignored).
pub fn decode_ranges(b: &[u8], count: usize) -> Result<Vec<CopyRange>, SpecError> {
    need(b, count * COPY_RANGE_LEN, "copy source ranges")?;
    b.chunks_exact(COPY_RANGE_LEN).take(count).map(CopyRange::decode).collect()
}

/// Copy command fields: NSID, CDW10–11 SDLBA (the destination's first LBA),
/// CDW12 NR (7:0, 0's based), descriptor format (11:8), PRINFOR (15:12),
/// DTYPE (23:20), PRINFOW (29:26), FUA (30), LR (31); CDW13 DSPEC (31:16).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct CopyCmd {
    /// Namespace identifier.
    pub nsid: u32,
    /// Starting destination LBA.
    pub sdlba: u64,
    /// CDW12 as on the wire.
    pub cdw12: u32,
    /// CDW13 as on the wire.
    pub cdw13: u32,
}

impl CopyCmd {
    /// CDW12 bit 30: Force Unit Access for the writes to the destination.
    pub const FUA: u32 = 1 << 30;
    /// CDW12 bit 31: Limited Retry.
    pub const LR: u32 = 1 << 31;

    /// Copies `ranges` ranges (1..=256) in descriptor format 0 to `sdlba` on `nsid`.
    pub const fn new(nsid: u32, sdlba: u64, ranges: usize, fua: bool) -> Self {
        let nr = if ranges == 0 {
            0
        } else if ranges > COPY_MAX_RANGES {
            255
        } else {
            (ranges - 1) as u32
        };
        Self { nsid, sdlba, cdw12: nr | if fua { Self::FUA } else { 0 }, cdw13: 0 }
    }
    /// Number of ranges (NR + 1).
    pub const fn num_ranges(&self) -> usize {
        (self.cdw12 & 0xFF) as usize + 1
    }
    /// Descriptor format (0 is the only one without 64-bit guard protection).
    pub const fn format(&self) -> u8 {
        ((self.cdw12 >> 8) & 0xF) as u8
    }
    /// Protection information field for the reads of the source.
    pub const fn prinfor(&self) -> u8 {
        ((self.cdw12 >> 12) & 0xF) as u8
    }
    /// Protection information field for the writes to the destination.
    pub const fn prinfow(&self) -> u8 {
        ((self.cdw12 >> 26) & 0xF) as u8
    }
    /// Force Unit Access.
    pub const fn fua(&self) -> bool {
        self.cdw12 & Self::FUA != 0
    }
    /// Data length the ranges take in format 0: (NR + 1) · 32.
    pub const fn data_len(&self) -> usize {
        self.num_ranges() * COPY_RANGE_LEN
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        Self {
            nsid: sqe.nsid(),
            sdlba: sqe.cdw(10) as u64 | (sqe.cdw(11) as u64) << 32,
            cdw12: sqe.cdw(12),
            cdw13: sqe.cdw(13),
        }
    }
    /// Builds the SQE (OPC 19h) with a transport SGL of `data_len()` bytes.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(IoOpcode::COPY.0);
        s.set_cid(cid)
            .set_nsid(self.nsid)
            .set_sgl(SglDescriptor::transport(self.data_len() as u32))
            .set_cdw(10, self.sdlba as u32)
            .set_cdw(11, (self.sdlba >> 32) as u32)
            .set_cdw(12, self.cdw12)
            .set_cdw(13, self.cdw13);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn range_and_cmd_layout() {
        let r = CopyRange { slba: 0x1_0000_0002, nlb: 7, eilbrt: 0x0A0B_0C0D, elbat: 0x1122, elbatm: 0x3344 };
        let b = r.encode();
        // Linux struct nvme_copy_range: rsvd0 (8), slba, nlb, rsvd18, rsvd20, eilbrt, elbat, elbatm.
        assert_eq!(&b[..8], &[0; 8]);
        assert_eq!(&b[8..16], &[2, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(&b[16..24], &[7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[24..32], &[0x0D, 0x0C, 0x0B, 0x0A, 0x22, 0x11, 0x44, 0x33]);
        assert_eq!(r.blocks(), 8);
        assert_eq!(CopyRange::new(5, 65536), Some(CopyRange { slba: 5, nlb: 0xFFFF, ..Default::default() }));
        assert_eq!(CopyRange::new(5, 0), None);
        assert_eq!(CopyRange::new(5, 65537), None);

        let c = CopyCmd::new(1, 0x2_0000_0010, 3, true);
        let s = c.to_sqe(4);
        assert_eq!(s.opcode(), 0x19);
        assert_eq!(&s.0[40..52], &[0x10, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0x40]);
        assert_eq!(s.sgl().length, 96);
        assert_eq!((c.num_ranges(), c.format(), c.fua()), (3, 0, true));
        assert_eq!(CopyCmd::new(1, 0, 300, false).num_ranges(), 256);
        let odd = CopyCmd { cdw12: 0x3C00_F1FF, ..c };
        assert_eq!(
            (odd.num_ranges(), odd.format(), odd.prinfor(), odd.prinfow(), odd.fua()),
            (256, 1, 0xF, 0xF, false)
        );

        let buf = encode_ranges(&[r, r]).unwrap();
        assert_eq!(decode_ranges(&buf, 2).unwrap(), vec![r, r]);
        assert!(decode_ranges(&buf[..63], 2).is_err());
        assert!(encode_ranges(&[r; 257]).is_err());
    }

    proptest! {
        #[test]
        fn ranges_roundtrip(v in proptest::collection::vec(any::<(u64, u16, u32, u16, u16)>(), 1..=256)) {
            let r: Vec<CopyRange> = v
                .into_iter()
                .map(|(slba, nlb, eilbrt, elbat, elbatm)| CopyRange { slba, nlb, eilbrt, elbat, elbatm })
                .collect();
            prop_assert_eq!(decode_ranges(&encode_ranges(&r).unwrap(), r.len()).unwrap(), r);
        }

        #[test]
        fn cmd_roundtrip(nsid in any::<u32>(), sdlba in any::<u64>(), cdw12 in any::<u32>(), cdw13 in any::<u32>()) {
            let c = CopyCmd { nsid, sdlba, cdw12, cdw13 };
            prop_assert_eq!(CopyCmd::from_sqe(&c.to_sqe(0)), c);
        }
    }
}
