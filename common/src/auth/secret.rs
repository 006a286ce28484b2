//! DH-HMAC-CHAP secrets in the `DHHC-1:<hh>:<base64(key ‖ crc32)>:` form
//! that `nvme gen-dhchap-key` prints and nvmet's `dhchap_key` and the Linux
//! host's `--dhchap-secret` take (NVMe Base 2.x §8.3.4.5.8;
//! `nvme_auth_extract_key` in `drivers/nvme/common/auth.c`): `hh` names the
//! hash that transforms the key before use (00 none, 01 SHA-256, 02 SHA-384,
//! 03 SHA-512), the key is 32, 48 or 64 bytes, and the CRC-32 of the key
//! follows it, little-endian.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use crc_fast::CrcAlgorithm;
use rand::RngCore;

use super::HashId;

/// A DH-HMAC-CHAP secret. Its `Debug` form does not show the key.
#[derive(Clone, PartialEq, Eq)]
pub struct DhchapSecret {
    key: Vec<u8>,
    transform: HashId,
}

/// Why a secret was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// Not `DHHC-1:<hh>:<base64>:`.
    #[error("not a DH-HMAC-CHAP secret (expected DHHC-1:<00-03>:<base64>:)")]
    Format,
    /// `hh` above 03.
    #[error("unknown key transformation hash {0:02} (00 to 03)")]
    Transform(u8),
    /// The base64 part does not decode.
    #[error("the key is not valid base64")]
    Base64,
    /// Not 32, 48 or 64 bytes of key (plus 4 of CRC).
    #[error("the key is {0} bytes; it must be 32, 48 or 64 (plus a 4-byte CRC)")]
    Length(usize),
    /// The CRC does not match the key.
    #[error("the key's CRC-32 does not match (a typo in the secret?)")]
    Crc,
}

fn crc32(key: &[u8]) -> u32 {
    crc_fast::checksum(CrcAlgorithm::Crc32IsoHdlc, key) as u32
}

impl DhchapSecret {
    /// A secret from raw key bytes (32, 48 or 64) and the hash that transforms
    /// it (`HashId(0)`: none).
    pub fn new(key: Vec<u8>, transform: HashId) -> Result<Self, SecretError> {
        if ![32, 48, 64].contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        if transform.0 > 3 {
            return Err(SecretError::Transform(transform.0));
        }
        Ok(Self { key, transform })
    }

    /// A fresh random secret of `len` bytes (32, 48 or 64), as `nvme
    /// gen-dhchap-key --key-length LEN --hmac N` makes one.
    pub fn generate(len: usize, transform: HashId) -> Result<Self, SecretError> {
        let mut key = vec![0u8; len];
        rand::rngs::OsRng.fill_bytes(&mut key);
        Self::new(key, transform)
    }

    /// The key bytes as given (before the transformation).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The transformation hash (`HashId(0)`: none).
    pub fn transform(&self) -> HashId {
        self.transform
    }

    /// The key used for the HMAC of a response: the key itself, or with a
    /// transformation HMAC(key, NQN ‖ "NVMe-over-Fabrics") (`nvme_auth_transform_key`).
    /// `nqn` is the host's NQN for the host key, the subsystem's for the controller key.
    pub fn transformed(&self, nqn: &str) -> Vec<u8> {
        if self.transform.0 == 0 {
            return self.key.clone();
        }
        super::chap::hmac(self.transform, &self.key, &[nqn.as_bytes(), b"NVMe-over-Fabrics"])
    }
}

impl FromStr for DhchapSecret {
    type Err = SecretError;

    fn from_str(s: &str) -> Result<Self, SecretError> {
        let s = s.trim();
        let rest = s.strip_prefix("DHHC-1:").ok_or(SecretError::Format)?;
        let (hh, b64) = rest.split_once(':').ok_or(SecretError::Format)?;
        if hh.len() != 2 || !hh.bytes().all(|c| c.is_ascii_digit()) {
            return Err(SecretError::Format);
        }
        let transform: u8 = hh.parse().map_err(|_| SecretError::Format)?;
        if transform > 3 {
            return Err(SecretError::Transform(transform));
        }
        // The secret may end with ':' (nvme_auth_extract_key cuts at the last one).
        let b64 = b64.strip_suffix(':').unwrap_or(b64);
        let raw = STANDARD.decode(b64).map_err(|_| SecretError::Base64)?;
        if ![36, 52, 68].contains(&raw.len()) {
            return Err(SecretError::Length(raw.len().saturating_sub(4)));
        }
        let (key, crc) = raw.split_at(raw.len() - 4);
        if crc32(key) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(SecretError::Crc);
        }
        Self::new(key.to_vec(), HashId(transform))
    }
}

impl fmt::Display for DhchapSecret {
    /// The `DHHC-1:<hh>:<base64>:` form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut raw = self.key.clone();
        raw.extend_from_slice(&crc32(&self.key).to_le_bytes());
        write!(f, "DHHC-1:{:02}:{}:", self.transform.0, STANDARD.encode(raw))
    }
}

impl fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DhchapSecret({} bytes, transform {:02})", self.key.len(), self.transform.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_parse_and_print_in_the_dhhc_form() {
        // The CRC is CRC-32 (ISO-HDLC, as Linux's ~crc32(~0, …)) of the key,
        // little-endian: for 32 zero bytes it is 190A55ADh.
        let zero = DhchapSecret::new(vec![0; 32], HashId(0)).unwrap();
        let text = zero.to_string();
        assert_eq!(text, "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACtVQoZ:");
        assert_eq!(text.parse::<DhchapSecret>().unwrap(), zero);
        // Without the trailing colon, and with surrounding blanks.
        assert_eq!(format!(" {} ", text.trim_end_matches(':')).parse::<DhchapSecret>().unwrap(), zero);
        let g = DhchapSecret::generate(48, HashId::SHA384).unwrap();
        assert!(g.to_string().starts_with("DHHC-1:02:"));
        assert_eq!(g.to_string().parse::<DhchapSecret>().unwrap(), g);
        assert!(!format!("{g:?}").contains(&g.to_string()[10..20]));
    }

    #[test]
    fn bad_secrets_say_why() {
        let good = DhchapSecret::new(vec![7; 32], HashId(1)).unwrap().to_string();
        assert_eq!("DHHC-2:00:abc:".parse::<DhchapSecret>(), Err(SecretError::Format));
        assert_eq!(good.replacen(":01:", ":04:", 1).parse::<DhchapSecret>(), Err(SecretError::Transform(4)));
        assert_eq!("DHHC-1:00:!!!!:".parse::<DhchapSecret>(), Err(SecretError::Base64));
        assert_eq!("DHHC-1:00:AAAA:".parse::<DhchapSecret>(), Err(SecretError::Length(0)));
        // One changed character: the CRC catches it.
        let mut bad = good.into_bytes();
        bad[12] = if bad[12] == b'A' { b'B' } else { b'A' };
        assert_eq!(String::from_utf8(bad).unwrap().parse::<DhchapSecret>(), Err(SecretError::Crc));
    }
}
