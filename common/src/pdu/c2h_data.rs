//! C2HData: Controller to Host Data (NVMe/TCP 1.0 §3.6.2.9; reference §1.4, §3.6).

use bytes::Bytes;

use super::{le16, le32, put16, put32, CommonHeader, PduBody, PduFlags, PduType};
use crate::error::DecodeError;

/// Read data sent to the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct C2hData {
    /// CID of the command.
    pub cccid: u16,
    /// Offset of this data within the command's data.
    pub datao: u32,
    /// The data (DATAL = its length).
    pub data: Bytes,
    /// LAST_PDU: final data PDU of the command.
    pub last: bool,
    /// SUCCESS: command completed, no CapsuleResp follows (only with `last`,
    /// only when the host disabled SQ flow control).
    pub success: bool,
}

impl PduBody for C2hData {
    const TYPE: PduType = PduType::C2H_DATA;
    const HLEN: usize = 24;

    fn type_flags(&self) -> u8 {
        (if self.last { PduFlags::LAST_PDU } else { 0 }) | if self.success { PduFlags::SUCCESS } else { 0 }
    }
    fn write_psh(&self, h: &mut [u8]) {
        put16(h, 8, self.cccid);
        put32(h, 12, self.datao);
        put32(h, 16, self.data.len() as u32);
    }
    fn data(&self) -> &Bytes {
        &self.data
    }
    fn from_parts(ch: &CommonHeader, h: &[u8], data: Bytes) -> Result<Self, DecodeError> {
        super::check_datal(ch, le32(h, 16), data.len())?;
        let last = ch.flags.has(PduFlags::LAST_PDU);
        let success = ch.flags.has(PduFlags::SUCCESS);
        // SUCCESS without LAST_PDU is a protocol error (Linux nvme_tcp_handle_c2h_data).
        if success && !last {
            return Err(DecodeError::InvalidFlags { pdu_type: Self::TYPE, flags: ch.flags.0 });
        }
        Ok(Self { cccid: le16(h, 8), datao: le32(h, 12), data, last, success })
    }
}
