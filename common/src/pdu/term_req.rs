//! H2CTermReq / C2HTermReq: Terminate Connection Request (NVMe/TCP 1.0
//! §3.6.2.4–5; reference §2.3). Both share one layout.

use bytes::Bytes;

use super::{le16, le32, put16, put32, CommonHeader, PduBody, PduType};
use crate::error::{DecodeError, Fes};

/// Most error data bytes a TermReq carries (the offending PDU header, up to
/// 128 bytes; PLEN range 24..152 as the Linux host checks).
pub const TERM_REQ_MAX_DATA: usize = 128;

/// A terminate-connection request in either direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TermReq {
    /// Fatal Error Status.
    pub fes: Fes,
    /// Fatal Error Information (e.g. offset of the offending field).
    pub fei: u32,
    /// Error data: the header of the PDU that caused the error (≤ 128 bytes).
    pub data: Bytes,
}

impl TermReq {
    /// Builds a TermReq for `err`, quoting up to 128 bytes of the offending PDU header.
    pub fn for_error(err: &DecodeError, offending: &[u8]) -> Self {
        let n = offending.len().min(TERM_REQ_MAX_DATA);
        Self { fes: err.fes(), fei: err.fei(), data: Bytes::copy_from_slice(&offending[..n]) }
    }

    pub(crate) fn decode(h: &[u8], data: Bytes) -> Self {
        Self { fes: Fes(le16(h, 8)), fei: le32(h, 10), data }
    }

    fn write(&self, h: &mut [u8]) {
        put16(h, 8, self.fes.0);
        put32(h, 10, self.fei);
    }
}

macro_rules! term_dir {
    ($name:ident, $ty:expr) => {
        pub(crate) struct $name<'a>(pub &'a TermReq);
        impl PduBody for $name<'_> {
            const TYPE: PduType = $ty;
            const HLEN: usize = 24;
            fn write_psh(&self, h: &mut [u8]) {
                self.0.write(h)
            }
            fn data(&self) -> &Bytes {
                &self.0.data
            }
            fn from_parts(_: &CommonHeader, _: &[u8], _: Bytes) -> Result<Self, DecodeError> {
                unreachable!("TermReq is decoded through TermReq::decode")
            }
        }
    };
}
term_dir!(H2c, PduType::H2C_TERM_REQ);
term_dir!(C2h, PduType::C2H_TERM_REQ);
