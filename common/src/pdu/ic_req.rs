//! ICReq: Initialize Connection Request (NVMe/TCP 1.0 §3.6.2.2; reference §1.4, §2.1).

use bytes::Bytes;

use super::{le16, le32, put16, put32, CommonHeader, PduBody, PduType, EMPTY};
use crate::error::DecodeError;

/// DGST field bits shared by ICReq and ICResp.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct DigestFlags(pub u8);

impl DigestFlags {
    /// Header digest enable (bit 0).
    pub const HDGST: u8 = 1 << 0;
    /// Data digest enable (bit 1).
    pub const DDGST: u8 = 1 << 1;

    /// Builds the field from two booleans.
    pub const fn new(hdgst: bool, ddgst: bool) -> Self {
        Self((hdgst as u8) | ((ddgst as u8) << 1))
    }
    /// Header digest requested/enabled.
    pub const fn hdgst(self) -> bool {
        self.0 & Self::HDGST != 0
    }
    /// Data digest requested/enabled.
    pub const fn ddgst(self) -> bool {
        self.0 & Self::DDGST != 0
    }
}

/// Initialize Connection Request, the first PDU the host sends.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct IcReq {
    /// PDU format version (0 = 1.0).
    pub pfv: u16,
    /// Host PDU data alignment: C2H data at a multiple of (hpda+1)*4 bytes.
    pub hpda: u8,
    /// Digests the host asks for.
    pub dgst: DigestFlags,
    /// Maximum outstanding R2Ts per command, 0's based.
    pub maxr2t: u32,
}

impl IcReq {
    /// Checks the fields a controller must validate (reference §2.1 checklist;
    /// Linux `nvmet_tcp_handle_icreq` rejects PFV ≠ 0 and HPDA ≠ 0).
    pub fn validate(&self, max_hpda: u8) -> Result<(), DecodeError> {
        if self.pfv != 0 {
            return Err(DecodeError::UnsupportedPfv(self.pfv));
        }
        if self.hpda > 31 || self.hpda > max_hpda {
            return Err(DecodeError::UnsupportedPda(self.hpda));
        }
        if self.dgst.0 & !3 != 0 {
            return Err(DecodeError::InvalidDigestField(self.dgst.0));
        }
        Ok(())
    }
}

impl PduBody for IcReq {
    const TYPE: PduType = PduType::IC_REQ;
    const HLEN: usize = 128;

    fn write_psh(&self, h: &mut [u8]) {
        put16(h, 8, self.pfv);
        h[10] = self.hpda;
        h[11] = self.dgst.0;
        put32(h, 12, self.maxr2t);
    }
    fn data(&self) -> &Bytes {
        &EMPTY
    }
    fn from_parts(_: &CommonHeader, h: &[u8], _: Bytes) -> Result<Self, DecodeError> {
        Ok(Self { pfv: le16(h, 8), hpda: h[10], dgst: DigestFlags(h[11]), maxr2t: le32(h, 12) })
    }
}
