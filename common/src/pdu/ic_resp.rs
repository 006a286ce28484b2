//! ICResp: Initialize Connection Response (NVMe/TCP 1.0 §3.6.2.3; reference §1.4, §2.1).

use bytes::Bytes;

use super::ic_req::DigestFlags;
use super::{le16, le32, put16, put32, CommonHeader, PduBody, PduType, EMPTY};
use crate::error::DecodeError;

/// Initialize Connection Response, the controller's answer to ICReq.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct IcResp {
    /// PDU format version (0 = 1.0).
    pub pfv: u16,
    /// Controller PDU data alignment for H2C data: (cpda+1)*4 bytes.
    pub cpda: u8,
    /// Digests enabled for this connection.
    pub dgst: DigestFlags,
    /// Maximum data bytes in one H2CData PDU.
    pub maxh2cdata: u32,
}

impl IcResp {
    /// Checks the answer as the Linux host does in `nvme_tcp_init_connection`:
    /// PFV 0, CPDA 0 (we support up to `max_cpda`), digests exactly as requested,
    /// MAXH2CDATA ≥ 4096 and a multiple of 4.
    pub fn validate(&self, requested: DigestFlags, max_cpda: u8) -> Result<(), DecodeError> {
        if self.pfv != 0 {
            return Err(DecodeError::UnsupportedPfv(self.pfv));
        }
        if self.cpda > 31 || self.cpda > max_cpda {
            return Err(DecodeError::UnsupportedPda(self.cpda));
        }
        if self.dgst != requested {
            return Err(DecodeError::InvalidDigestField(self.dgst.0));
        }
        if self.maxh2cdata < 4096 || !self.maxh2cdata.is_multiple_of(4) {
            return Err(DecodeError::InvalidIcResp("MAXH2CDATA below 4096 or not a multiple of 4"));
        }
        Ok(())
    }
}

impl PduBody for IcResp {
    const TYPE: PduType = PduType::IC_RESP;
    const HLEN: usize = 128;

    fn write_psh(&self, h: &mut [u8]) {
        put16(h, 8, self.pfv);
        h[10] = self.cpda;
        h[11] = self.dgst.0;
        put32(h, 12, self.maxh2cdata);
    }
    fn data(&self) -> &Bytes {
        &EMPTY
    }
    fn from_parts(_: &CommonHeader, h: &[u8], _: Bytes) -> Result<Self, DecodeError> {
        Ok(Self { pfv: le16(h, 8), cpda: h[10], dgst: DigestFlags(h[11]), maxh2cdata: le32(h, 12) })
    }
}
