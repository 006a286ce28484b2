//! Dataset Management (I/O OPC 09h): command fields and 16-byte ranges
//! (NVM Command Set 1.0 §3.2.3; reference §6.3; Linux `struct nvme_dsm_cmd`,
//! `struct nvme_dsm_range`, `nvme_setup_discard`).

use super::wire::{need, put_u32, put_u64, u32_at, u64_at};
use super::SpecError;
use crate::opcode::IoOpcode;
use crate::sqe::{SglDescriptor, Sqe};

/// Size of one range.
pub const DSM_RANGE_LEN: usize = 16;
/// Maximum number of ranges (NR is 8 bits, 0's based).
pub const DSM_MAX_RANGES: usize = 256;

/// One DSM range: 0 context attributes u32, 4 length in LBAs u32 (not 0's based), 8 SLBA u64.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct DsmRange {
    /// Context attributes.
    pub cattr: u32,
    /// Length in logical blocks.
    pub nlb: u32,
    /// Starting LBA.
    pub slba: u64,
}

impl DsmRange {
    /// Decodes 16 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, DSM_RANGE_LEN, "dsm range")?;
        Ok(Self { cattr: u32_at(b, 0), nlb: u32_at(b, 4), slba: u64_at(b, 8) })
    }
    /// Encodes 16 bytes.
    pub fn encode(&self) -> [u8; DSM_RANGE_LEN] {
        let mut b = [0u8; DSM_RANGE_LEN];
        put_u32(&mut b, 0, self.cattr);
        put_u32(&mut b, 4, self.nlb);
        put_u64(&mut b, 8, self.slba);
        b
    }
}

/// Encodes up to 256 ranges back to back (16 · n bytes). The Linux host pads its
/// buffer to 4096 bytes; callers wanting that can `resize(4096, 0)`.
pub fn encode_ranges(ranges: &[DsmRange]) -> Result<Vec<u8>, SpecError> {
    if ranges.len() > DSM_MAX_RANGES {
        return Err(SpecError::TooMany { what: "dsm ranges", max: DSM_MAX_RANGES, got: ranges.len() });
    }
    Ok(ranges.iter().flat_map(|r| r.encode()).collect())
}

/// Decodes `count` ranges (NR + 1) from `b`, which must hold at least 16 · count
/// bytes (extra bytes, like the Linux host's 4 KiB padding, are ignored).
pub fn decode_ranges(b: &[u8], count: usize) -> Result<Vec<DsmRange>, SpecError> {
    need(b, count * DSM_RANGE_LEN, "dsm ranges")?;
    b.chunks_exact(DSM_RANGE_LEN).take(count).map(DsmRange::decode).collect()
}

/// DSM command fields: NSID, CDW10 NR (7:0, 0's based), CDW11 attributes
/// (bit 0 IDR, bit 1 IDW, bit 2 AD).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct DsmCmd {
    /// Namespace identifier.
    pub nsid: u32,
    /// Number of ranges, 0's based.
    pub nr: u8,
    /// CDW11 attributes.
    pub attributes: u32,
}

impl DsmCmd {
    /// Integral dataset for read.
    pub const IDR: u32 = 1 << 0;
    /// Integral dataset for write.
    pub const IDW: u32 = 1 << 1;
    /// Attribute deallocate.
    pub const AD: u32 = 1 << 2;

    /// Deallocate `ranges` ranges (1..=256) on `nsid`, as the Linux host's discard.
    pub const fn deallocate(nsid: u32, ranges: usize) -> Self {
        let nr = if ranges == 0 {
            0
        } else if ranges > DSM_MAX_RANGES {
            255
        } else {
            (ranges - 1) as u8
        };
        Self { nsid, nr, attributes: Self::AD }
    }
    /// Number of ranges (NR + 1).
    pub const fn num_ranges(&self) -> usize {
        self.nr as usize + 1
    }
    /// Minimum data length in bytes: (NR + 1) · 16.
    pub const fn data_len(&self) -> usize {
        self.num_ranges() * DSM_RANGE_LEN
    }
    /// Attribute deallocate set.
    pub const fn ad(&self) -> bool {
        self.attributes & Self::AD != 0
    }
    /// Integral dataset for read set.
    pub const fn idr(&self) -> bool {
        self.attributes & Self::IDR != 0
    }
    /// Integral dataset for write set.
    pub const fn idw(&self) -> bool {
        self.attributes & Self::IDW != 0
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        Self { nsid: sqe.nsid(), nr: sqe.cdw(10) as u8, attributes: sqe.cdw(11) }
    }
    /// Builds the SQE (OPC 09h) with a transport SGL of `data_len()` bytes; replace
    /// the SGL for in-capsule data or a padded 4 KiB buffer.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(IoOpcode::DSM.0);
        s.set_cid(cid)
            .set_nsid(self.nsid)
            .set_sgl(SglDescriptor::transport(self.data_len() as u32))
            .set_cdw(10, self.nr as u32)
            .set_cdw(11, self.attributes);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn range_and_cmd_layout() {
        let r = DsmRange { cattr: 1, nlb: 8, slba: 0x1_0000_0002 };
        assert_eq!(r.encode(), [1, 0, 0, 0, 8, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0]);
        let c = DsmCmd::deallocate(1, 2);
        let s = c.to_sqe(4);
        assert_eq!(s.opcode(), 0x09);
        assert_eq!(&s.0[40..48], &[1, 0, 0, 0, 4, 0, 0, 0]);
        assert_eq!(s.sgl().length, 32);
        assert!(c.ad() && !c.idr() && !c.idw());
        let mut buf = encode_ranges(&[r, r]).unwrap();
        buf.resize(4096, 0);
        assert_eq!(decode_ranges(&buf, c.num_ranges()).unwrap(), vec![r, r]);
        assert!(decode_ranges(&buf[..31], 2).is_err());
        assert!(encode_ranges(&[r; 257]).is_err());
        assert_eq!(DsmCmd::deallocate(1, 256).nr, 255);
    }

    proptest! {
        #[test]
        fn ranges_roundtrip(v in proptest::collection::vec(any::<(u32, u32, u64)>(), 1..=256)) {
            let r: Vec<DsmRange> = v.into_iter().map(|(cattr, nlb, slba)| DsmRange { cattr, nlb, slba }).collect();
            prop_assert_eq!(decode_ranges(&encode_ranges(&r).unwrap(), r.len()).unwrap(), r);
        }

        #[test]
        fn cmd_roundtrip(nsid in any::<u32>(), nr in any::<u8>(), attributes in any::<u32>()) {
            let c = DsmCmd { nsid, nr, attributes };
            prop_assert_eq!(DsmCmd::from_sqe(&c.to_sqe(0)), c);
        }
    }
}
