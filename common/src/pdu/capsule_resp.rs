//! CapsuleResp: Response Capsule (NVMe/TCP 1.0 §3.6.2.7; reference §1.4, §3.3).

use bytes::Bytes;

use super::{CommonHeader, PduBody, PduType, EMPTY};
use crate::cqe::Cqe;
use crate::error::DecodeError;

/// A response capsule: one completion queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapsuleResp {
    /// Completion queue entry.
    pub cqe: Cqe,
}

impl PduBody for CapsuleResp {
    const TYPE: PduType = PduType::CAPSULE_RESP;
    const HLEN: usize = 24;

    fn write_psh(&self, h: &mut [u8]) {
        h[8..24].copy_from_slice(&self.cqe.encode());
    }
    fn data(&self) -> &Bytes {
        &EMPTY
    }
    fn from_parts(_: &CommonHeader, h: &[u8], _: Bytes) -> Result<Self, DecodeError> {
        Ok(Self { cqe: Cqe::decode(h[8..24].try_into().unwrap()) })
    }
}
