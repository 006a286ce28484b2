//! Target core objects, like nvmet's `core.c`: the [`Target`] registry of
//! ports and subsystems, [`Subsystem`]s with their [`Namespace`]s and allowed
//! hosts, and [`Controller`]s created by admin Connect.

pub mod controller;
pub mod namespace;
pub mod subsystem;
pub mod target;

pub use controller::Controller;
pub use namespace::Namespace;
pub use subsystem::Subsystem;
pub use target::{Limits, Target};

/// Deterministic 16 bytes derived from `parts` (CRC32C chained), used for
/// serial numbers, NGUID/UUID/EUI-64 that must survive target restarts.
pub fn stable_id(parts: &[&[u8]]) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut crc = 0x4E56_4D65u32;
    for (i, chunk) in out.chunks_mut(4).enumerate() {
        crc = nvmeof_common::digest::crc32c_append(crc, &[i as u8]);
        for p in parts {
            crc = nvmeof_common::digest::crc32c_append(crc, p);
        }
        chunk.copy_from_slice(&crc.to_le_bytes());
    }
    out
}
