//! Helpers shared by the fuzz targets.

use nvmeof_common::digest::digest_bytes;
use nvmeof_common::pdu::PduFlags;

/// Bytes announced by a chunk control byte: bit 6 set, ((bits 5:0) + 1) × 64;
/// clear, (bits 5:0) + 1.
pub fn chunk_len(ctl: u8) -> usize {
    let n = (ctl & 0x3F) as usize + 1;
    if ctl & 0x40 != 0 {
        n * 64
    } else {
        n
    }
}

/// Rewrites HDGST/DDGST of every whole PDU in the byte stream `s` whose flags
/// announce them, so mutated PDUs get past the digest checks.
pub fn fix_digests(s: &mut [u8]) {
    let mut o = 0;
    while s.len() - o >= 8 {
        let (flags, hlen, pdo) = (s[o + 1], s[o + 2] as usize, s[o + 3] as usize);
        let plen = u32::from_le_bytes(s[o + 4..o + 8].try_into().unwrap()) as usize;
        if plen < 8 || plen > s.len() - o {
            return;
        }
        let p = &mut s[o..o + plen];
        if flags & PduFlags::HDGSTF != 0 && hlen + 4 <= plen {
            let d = digest_bytes(&p[..hlen]);
            p[hlen..hlen + 4].copy_from_slice(&d);
        }
        if flags & PduFlags::DDGSTF != 0 && pdo > 0 && pdo + 4 <= plen {
            let d = digest_bytes(&p[pdo..plen - 4]);
            p[plen - 4..].copy_from_slice(&d);
        }
        o += plen;
    }
}

/// With `NVMEOF_FUZZ_SEEDS=DIR` set, writes the named seed inputs into DIR
/// (call from a fuzz target's `init`).
pub fn write_seeds_if_asked(seeds: impl FnOnce() -> Vec<(&'static str, Vec<u8>)>) {
    if let Ok(dir) = std::env::var("NVMEOF_FUZZ_SEEDS") {
        std::fs::create_dir_all(&dir).expect("seed dir");
        for (name, bytes) in seeds() {
            std::fs::write(std::path::Path::new(&dir).join(name), bytes).expect("write seed");
        }
    }
}

/// `bytes` as chunks of at most 64 bytes, each behind its control byte
/// (see [`chunk_len`]).
pub fn chunked(bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes.len() + bytes.len() / 64 + 1);
    for c in bytes.chunks(64) {
        v.push(if c.len() == 64 { 0x40 } else { c.len() as u8 - 1 });
        v.extend_from_slice(c);
    }
    v
}

/// `NVMEOF_FUZZ_TRACE=1`: the targets print what they see (for looking at one input).
pub fn trace() -> bool {
    static T: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var_os("NVMEOF_FUZZ_TRACE").is_some())
}
