//! NVMe Qualified Names (NVMe Base 2.0 §4.5; reference §8).
//!
//! Two forms: `nqn.yyyy-mm.<reverse-domain>:<string>` and
//! `nqn.2014-08.org.nvmexpress:uuid:<8-4-4-4-12 hex>`, plus the well-known
//! discovery NQN. At most 223 bytes of UTF-8, carried NUL-terminated in
//! 256-byte fields.
//!
//! What the peers enforce: the Linux host only rejects NQNs of 223 bytes or more
//! (`nvmf_parse_options`: `strlen >= NVMF_NQN_SIZE`), so the longest NQN it can
//! use is 222 bytes; nvmet checks no format at all and compares the first 223
//! bytes. [`validate`] is stricter and follows SPDK's `nvmf_nqn_is_valid`
//! (prefix, date digits, reverse-domain labels, a non-empty string after ':');
//! [`validate_lax`] applies only what Linux enforces, for accepting peers' NQNs.

/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Prefix of UUID-form NQNs.
pub const UUID_NQN_PREFIX: &str = "nqn.2014-08.org.nvmexpress:uuid:";
/// Maximum NQN length in bytes (Linux `NVMF_NQN_SIZE`).
pub const NQN_MAX_LEN: usize = 223;
/// Longest NQN the Linux host accepts (it rejects lengths ≥ 223).
pub const LINUX_HOST_NQN_MAX_LEN: usize = NQN_MAX_LEN - 1;
/// Shortest valid NQN (SPDK `SPDK_NVMF_NQN_MIN_LEN`: "nqn.yyyy-mm.").
pub const NQN_MIN_LEN: usize = 11;

/// Which NQN rule failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NqnError {
    /// Longer than 223 bytes.
    #[error("NQN is {len} bytes, more than the maximum of 223")]
    TooLong {
        /// Length in bytes.
        len: usize,
    },
    /// Shorter than 11 bytes.
    #[error("NQN is {len} bytes, less than the minimum of 11")]
    TooShort {
        /// Length in bytes.
        len: usize,
    },
    /// Raw bytes are not UTF-8.
    #[error("NQN is not valid UTF-8")]
    NotUtf8,
    /// Contains a NUL byte.
    #[error("NQN contains a NUL byte at {pos}")]
    ContainsNul {
        /// Byte position.
        pos: usize,
    },
    /// Does not start with "nqn.".
    #[error("NQN does not start with \"nqn.\"")]
    MissingPrefix,
    /// The "yyyy-mm." part is malformed.
    #[error("NQN date is not of the form yyyy-mm.")]
    BadDate,
    /// A reverse-domain label is malformed.
    #[error("NQN reverse domain label {label:?} is invalid")]
    BadDomainLabel {
        /// The offending label.
        label: String,
    },
    /// No ':' followed by at least one character after the domain.
    #[error("NQN has no ':' followed by a non-empty string after the domain")]
    MissingUserString,
    /// UUID form with a malformed UUID.
    #[error("NQN UUID part is not 8-4-4-4-12 hexadecimal digits")]
    BadUuid,
}

/// Which form a valid NQN has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NqnForm {
    /// The well-known discovery NQN.
    Discovery,
    /// `nqn.2014-08.org.nvmexpress:uuid:…`.
    Uuid,
    /// `nqn.yyyy-mm.reverse.domain:string`.
    Domain,
}

/// Strict validation (SPDK rules, see the module docs).
pub fn validate(nqn: &str) -> Result<NqnForm, NqnError> {
    validate_lax(nqn)?;
    if nqn.len() < NQN_MIN_LEN {
        return Err(NqnError::TooShort { len: nqn.len() });
    }
    if nqn == DISCOVERY_NQN {
        return Ok(NqnForm::Discovery);
    }
    if !nqn.starts_with("nqn.") {
        return Err(NqnError::MissingPrefix);
    }
    if let Some(u) = nqn.strip_prefix(UUID_NQN_PREFIX) {
        return parse_uuid(u).map(|_| NqnForm::Uuid).ok_or(NqnError::BadUuid);
    }
    let b = nqn.as_bytes();
    let digits = |r: core::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    if !(digits(4..8) && b[8] == b'-' && digits(9..11) && b.get(11) == Some(&b'.')) {
        return Err(NqnError::BadDate);
    }
    let rest = &nqn[12..];
    let (domain, user) = rest.split_once(':').ok_or(NqnError::MissingUserString)?;
    if user.is_empty() {
        return Err(NqnError::MissingUserString);
    }
    for label in domain.split('.') {
        let lb = label.as_bytes();
        let ok = !lb.is_empty()
            && lb.len() <= 63
            && lb[0].is_ascii_alphabetic()
            && lb[lb.len() - 1].is_ascii_alphanumeric()
            && lb.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-');
        if !ok {
            return Err(NqnError::BadDomainLabel { label: label.into() });
        }
    }
    Ok(NqnForm::Domain)
}

/// Lax validation: only what Linux enforces (≤ 223 bytes, no NUL).
pub fn validate_lax(nqn: &str) -> Result<(), NqnError> {
    if nqn.len() > NQN_MAX_LEN {
        return Err(NqnError::TooLong { len: nqn.len() });
    }
    if let Some(pos) = nqn.bytes().position(|c| c == 0) {
        return Err(NqnError::ContainsNul { pos });
    }
    Ok(())
}

/// Strict validation of raw bytes (e.g. a field already cut at its NUL).
pub fn validate_bytes(nqn: &[u8]) -> Result<NqnForm, NqnError> {
    validate(core::str::from_utf8(nqn).map_err(|_| NqnError::NotUtf8)?)
}

/// Formats 16 bytes as a lowercase 8-4-4-4-12 UUID string (Linux `%pUb`).
pub fn format_uuid(u: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, byte) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

/// Parses an 8-4-4-4-12 UUID string (either case).
pub fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 {
        return None;
    }
    let mut out = [0u8; 16];
    let mut n = 0;
    let mut i = 0;
    while i < 36 {
        if matches!(i, 8 | 13 | 18 | 23) {
            if b[i] != b'-' {
                return None;
            }
            i += 1;
            continue;
        }
        let hi = (b[i] as char).to_digit(16)?;
        let lo = (b[i + 1] as char).to_digit(16)?;
        out[n] = (hi << 4 | lo) as u8;
        n += 1;
        i += 2;
    }
    Some(out)
}

/// Builds `nqn.2014-08.org.nvmexpress:uuid:<uuid>` from 16 bytes (the form of the
/// Linux default host NQN).
pub fn uuid_nqn(u: &[u8; 16]) -> String {
    format!("{UUID_NQN_PREFIX}{}", format_uuid(u))
}

/// The UUID of a UUID-form NQN.
pub fn uuid_from_nqn(nqn: &str) -> Option<[u8; 16]> {
    parse_uuid(nqn.strip_prefix(UUID_NQN_PREFIX)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn forms() {
        assert_eq!(validate(DISCOVERY_NQN), Ok(NqnForm::Discovery));
        assert_eq!(
            validate("nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6"),
            Ok(NqnForm::Uuid)
        );
        assert_eq!(validate("nqn.2024-01.io.example:disk-1"), Ok(NqnForm::Domain));
        assert_eq!(validate("nqn.2016-06.io.spdk:cnode1"), Ok(NqnForm::Domain));
        assert_eq!(
            validate("nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bfZ"),
            Err(NqnError::BadUuid)
        );
        assert_eq!(validate("iqn.2024-01.io.example:x"), Err(NqnError::MissingPrefix));
        assert_eq!(validate("nqn.24-01.io.example:x"), Err(NqnError::BadDate));
        assert_eq!(validate("nqn.2024-01.io.example"), Err(NqnError::MissingUserString));
        assert_eq!(validate("nqn.2024-01.io.example:"), Err(NqnError::MissingUserString));
        assert_eq!(validate("nqn.2024-01.io.1x:y"), Err(NqnError::BadDomainLabel { label: "1x".into() }));
        assert_eq!(validate("nqn.2024-01.io.x-:y"), Err(NqnError::BadDomainLabel { label: "x-".into() }));
        assert_eq!(validate("nqn.2024-01.io..x:y"), Err(NqnError::BadDomainLabel { label: "".into() }));
        assert_eq!(validate("nqn.2024"), Err(NqnError::TooShort { len: 8 }));
        let long = format!("nqn.2024-01.io.example:{}", "a".repeat(201));
        assert_eq!(validate(&long), Err(NqnError::TooLong { len: 224 }));
        assert_eq!(validate(&long[..223]), Ok(NqnForm::Domain));
        assert_eq!(validate("nqn.2024-01.io.x:a\0b"), Err(NqnError::ContainsNul { pos: 18 }));
        assert_eq!(validate_bytes(b"nqn.2024-01.io.x:\xff"), Err(NqnError::NotUtf8));
        assert_eq!(validate("nqn.2024-01.io.example:ünïcödé"), Ok(NqnForm::Domain));
        assert!(validate_lax("anything").is_ok());
    }

    #[test]
    fn uuid_form() {
        let u =
            [0xf8, 0x1d, 0x4f, 0xae, 0x7d, 0xec, 0x11, 0xd0, 0xa7, 0x65, 0x00, 0xa0, 0xc9, 0x1e, 0x6b, 0xf6];
        let n = uuid_nqn(&u);
        assert_eq!(n, "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6");
        assert_eq!(n.len(), 68);
        assert_eq!(uuid_from_nqn(&n), Some(u));
        assert_eq!(parse_uuid("F81D4FAE-7DEC-11D0-A765-00A0C91E6BF6"), Some(u));
        assert_eq!(parse_uuid("f81d4fae+7dec-11d0-a765-00a0c91e6bf6"), None);
    }

    proptest! {
        #[test]
        fn uuid_nqn_roundtrip(u in any::<[u8; 16]>()) {
            let n = uuid_nqn(&u);
            prop_assert_eq!(validate(&n), Ok(NqnForm::Uuid));
            prop_assert_eq!(uuid_from_nqn(&n), Some(u));
        }

        #[test]
        fn domain_nqn_valid(y in 1000u32..10000, m in 1u32..13, d in "[a-z][a-z0-9-]{0,10}[a-z0-9]", s in "\\PC{1,50}") {
            let n = format!("nqn.{y}-{m:02}.com.{d}:{s}");
            prop_assume!(n.len() <= NQN_MAX_LEN);
            prop_assert_eq!(validate(&n), Ok(NqnForm::Domain));
        }
    }
}
