//! Target core objects, like nvmet's `core.c`: the [`Target`] registry of
//! ports and subsystems, [`Subsystem`]s with their [`Namespace`]s and allowed
//! hosts, [`Controller`]s created by admin Connect, and the ANA states
//! each port reports ([`PortAna`]).

pub mod ana;
pub mod controller;
pub mod error_log;
pub mod fused;
pub mod inflight;
pub mod io_stats;
pub mod namespace;
pub mod qos;
pub mod reservation;
pub mod subsystem;
pub mod target;
pub mod zoned;

pub use ana::PortAna;
pub use controller::Controller;
pub use error_log::ErrorLog;
pub use namespace::Namespace;
pub use reservation::Reservations;
pub use subsystem::Subsystem;
pub use target::{DiscoveryFilter, Limits, PortParams, Referral, Target};

/// Deterministic 16 bytes derived from `parts`, used for serial numbers and
/// NGUID/UUID/EUI-64 that must survive target restarts: the first half of
/// SHA-256 over the parts, each preceded by its length (so `["ab", "c"]` and
/// `["a", "bc"]` differ). A chained CRC32C did this before: linear, so every
/// word of two equal-length inputs collided together with odds 2^-32 per
/// pair, and the Linux host refuses a namespace whose identifiers another
/// one already has (`nvme_global_check_duplicate_ids`).
pub fn stable_id(parts: &[&[u8]]) -> [u8; 16] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.finalize()[..16]);
    out
}

/// Replaces the file at `path` with `bytes` so that a crash leaves either
/// the old file or the new one: a temporary file beside it (its name with
/// `.tmp` added) written and synced, renamed over it, the directory synced.
/// For state the next start trusts (reservations, zone states).
pub(crate) fn write_durably(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = path.with_file_name(tmp_name);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    sync_parent(path)
}

/// Syncs the directory holding `path`, so a file created, renamed or
/// removed there stays so.
pub(crate) fn sync_parent(path: &std::path::Path) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::stable_id;

    #[test]
    fn stable_ids_separate_parts_and_do_not_change() {
        assert_ne!(stable_id(&[b"ab", b"c"]), stable_id(&[b"a", b"bc"]));
        assert_ne!(stable_id(&[b"x"]), stable_id(&[b"x", b""]));
        // Fixed: identifiers a host has seen must come out the same in every
        // build (value from Python: sha256 over u64-LE length + bytes per part).
        assert_eq!(
            stable_id(&[b"nguid", b"nqn.2026-12.io.nvmeof:a", &1u32.to_le_bytes()]),
            [242, 26, 24, 14, 8, 96, 105, 212, 165, 160, 246, 30, 131, 95, 52, 84],
        );
    }
}
