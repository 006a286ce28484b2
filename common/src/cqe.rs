//! Completion Queue Entry (16 bytes, NVMe Base 2.0 §4.2.1).

use crate::status::Status;

/// Size of a CQE on the wire.
pub const CQE_LEN: usize = 16;

/// A completion queue entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Cqe {
    /// DW0 | DW1 << 32: command-specific result (Property Get returns 8 bytes here).
    pub result: u64,
    /// SQ head pointer.
    pub sqhd: u16,
    /// SQ identifier.
    pub sqid: u16,
    /// Command identifier (echo of the SQE's CID).
    pub cid: u16,
    /// Status (phase tag dropped).
    pub status: Status,
}

impl Cqe {
    /// Decodes 16 bytes.
    pub fn decode(b: &[u8; CQE_LEN]) -> Self {
        Self {
            result: u64::from_le_bytes(b[0..8].try_into().unwrap()),
            sqhd: u16::from_le_bytes([b[8], b[9]]),
            sqid: u16::from_le_bytes([b[10], b[11]]),
            cid: u16::from_le_bytes([b[12], b[13]]),
            status: Status::from_wire(u16::from_le_bytes([b[14], b[15]])),
        }
    }
    /// Encodes to 16 bytes (phase tag 0).
    pub fn encode(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        b[0..8].copy_from_slice(&self.result.to_le_bytes());
        b[8..10].copy_from_slice(&self.sqhd.to_le_bytes());
        b[10..12].copy_from_slice(&self.sqid.to_le_bytes());
        b[12..14].copy_from_slice(&self.cid.to_le_bytes());
        b[14..16].copy_from_slice(&self.status.to_wire().to_le_bytes());
        b
    }
    /// DW0 of the result.
    pub fn dw0(&self) -> u32 {
        self.result as u32
    }
    /// DW1 of the result.
    pub fn dw1(&self) -> u32 {
        (self.result >> 32) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_known_bytes() {
        let c = Cqe {
            result: 0x1_0000_0005,
            sqhd: 2,
            sqid: 1,
            cid: 0x1007,
            status: Status::LBA_RANGE.with_dnr(),
        };
        let b = c.encode();
        assert_eq!(b, [5, 0, 0, 0, 1, 0, 0, 0, 2, 0, 1, 0, 0x07, 0x10, 0x00, 0x81]);
        assert_eq!(Cqe::decode(&b), c);
        assert_eq!(c.dw0(), 5);
        assert_eq!(c.dw1(), 1);
    }
}
