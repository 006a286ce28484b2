//! R2T: Ready to Transfer (NVMe/TCP 1.0 §3.6.2.10; reference §1.4, §3.5).

use bytes::Bytes;

use super::{le16, le32, put16, put32, CommonHeader, PduBody, PduType, EMPTY};
use crate::error::DecodeError;

/// The controller asks for `r2tl` bytes of write data starting at `r2to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct R2t {
    /// CID of the command.
    pub cccid: u16,
    /// Controller-chosen transfer tag, echoed in H2CData.
    pub ttag: u16,
    /// Offset of the requested data.
    pub r2to: u32,
    /// Length of the requested data.
    pub r2tl: u32,
}

impl PduBody for R2t {
    const TYPE: PduType = PduType::R2T;
    const HLEN: usize = 24;

    fn write_psh(&self, h: &mut [u8]) {
        put16(h, 8, self.cccid);
        put16(h, 10, self.ttag);
        put32(h, 12, self.r2to);
        put32(h, 16, self.r2tl);
    }
    fn data(&self) -> &Bytes {
        &EMPTY
    }
    fn from_parts(_: &CommonHeader, h: &[u8], _: Bytes) -> Result<Self, DecodeError> {
        Ok(Self { cccid: le16(h, 8), ttag: le16(h, 10), r2to: le32(h, 12), r2tl: le32(h, 16) })
    }
}
