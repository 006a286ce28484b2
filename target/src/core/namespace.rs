//! A namespace: an NSID, its backend and its stable identifiers.

use std::sync::Arc;

use crate::backend::Backend;

/// One namespace of a subsystem.
pub struct Namespace {
    /// Namespace ID (1-based).
    pub nsid: u32,
    /// Storage.
    pub backend: Arc<dyn Backend>,
    /// NGUID (Identify Namespace bytes 104..120, descriptor type 2).
    pub nguid: [u8; 16],
    /// UUID (descriptor type 3).
    pub uuid: [u8; 16],
    /// EUI-64 (Identify Namespace bytes 120..128, descriptor type 1).
    pub eui64: [u8; 8],
    /// log2 of the block size.
    pub block_shift: u32,
}

impl Namespace {
    /// A namespace whose identifiers derive from the subsystem NQN and the
    /// NSID only, so they survive restarts and resizes (hosts use them to
    /// recognise the same namespace after a reconnect).
    pub fn new(subnqn: &str, nsid: u32, backend: Arc<dyn Backend>) -> Self {
        let nguid = super::stable_id(&[b"nguid", subnqn.as_bytes(), &nsid.to_le_bytes()]);
        let mut uuid = super::stable_id(&[b"uuid", subnqn.as_bytes(), &nsid.to_le_bytes()]);
        // RFC 4122 version 4 / variant 1 bits so tools print it as a UUID.
        uuid[6] = (uuid[6] & 0x0F) | 0x40;
        uuid[8] = (uuid[8] & 0x3F) | 0x80;
        let e = super::stable_id(&[b"eui64", subnqn.as_bytes(), &nsid.to_le_bytes()]);
        let mut eui64 = [0u8; 8];
        eui64.copy_from_slice(&e[..8]);
        let block_shift = backend.block_size().trailing_zeros();
        Self { nsid, backend, nguid, uuid, eui64, block_shift }
    }

    /// Size in logical blocks.
    pub fn blocks(&self) -> u64 {
        self.backend.size() >> self.block_shift
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        1 << self.block_shift
    }
}
