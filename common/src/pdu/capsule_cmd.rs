//! CapsuleCmd: Command Capsule (NVMe/TCP 1.0 §3.6.2.6; reference §1.4, §3.4).

use bytes::Bytes;

use super::{CommonHeader, PduBody, PduType};
use crate::error::DecodeError;
use crate::sqe::{Sqe, SQE_LEN};

/// A command capsule: the 64-byte SQE and optional in-capsule data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapsuleCmd {
    /// Submission queue entry.
    pub sqe: Sqe,
    /// In-capsule data (empty if none).
    pub data: Bytes,
}

impl CapsuleCmd {
    /// A capsule without in-capsule data.
    pub fn new(sqe: Sqe) -> Self {
        Self { sqe, data: Bytes::new() }
    }
}

impl PduBody for CapsuleCmd {
    const TYPE: PduType = PduType::CAPSULE_CMD;
    const HLEN: usize = 8 + SQE_LEN;

    fn write_psh(&self, h: &mut [u8]) {
        h[8..72].copy_from_slice(&self.sqe.0);
    }
    fn data(&self) -> &Bytes {
        &self.data
    }
    fn from_parts(_: &CommonHeader, h: &[u8], data: Bytes) -> Result<Self, DecodeError> {
        Ok(Self { sqe: Sqe::from_slice(&h[8..72]), data })
    }
}
