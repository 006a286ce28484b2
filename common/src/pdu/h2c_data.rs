//! H2CData: Host to Controller Data (NVMe/TCP 1.0 §3.6.2.8; reference §1.4, §3.5).

use bytes::Bytes;

use super::{le16, le32, put16, put32, CommonHeader, PduBody, PduFlags, PduType};
use crate::error::DecodeError;

/// Write data sent in answer to an R2T.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct H2cData {
    /// CID of the command.
    pub cccid: u16,
    /// Transfer tag from the R2T.
    pub ttag: u16,
    /// Offset of this data within the command's data.
    pub datao: u32,
    /// The data (DATAL = its length).
    pub data: Bytes,
    /// LAST_PDU: final PDU of the current R2T window.
    pub last: bool,
}

impl PduBody for H2cData {
    const TYPE: PduType = PduType::H2C_DATA;
    const HLEN: usize = 24;

    fn type_flags(&self) -> u8 {
        if self.last {
            PduFlags::LAST_PDU
        } else {
            0
        }
    }
    fn write_psh(&self, h: &mut [u8]) {
        put16(h, 8, self.cccid);
        put16(h, 10, self.ttag);
        put32(h, 12, self.datao);
        put32(h, 16, self.data.len() as u32);
    }
    fn data(&self) -> &Bytes {
        &self.data
    }
    fn from_parts(ch: &CommonHeader, h: &[u8], data: Bytes) -> Result<Self, DecodeError> {
        super::check_datal(ch, le32(h, 16), data.len())?;
        Ok(Self {
            cccid: le16(h, 8),
            ttag: le16(h, 10),
            datao: le32(h, 12),
            data,
            last: ch.flags.has(PduFlags::LAST_PDU),
        })
    }
}
