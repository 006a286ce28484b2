//! NVMe admin, fabrics and discovery data structures (reference §4–§8).
//!
//! Every structure here is a plain Rust value with `encode` (to the exact wire
//! bytes the Linux host/target and nvme-cli expect) and `decode` (from bytes a
//! peer sent). Command views (`*Cmd`) convert to and from a [`crate::sqe::Sqe`].
//! Wire enumerations are newtypes with named constants so unknown values survive.
//!
//! - [`connect`]: Fabrics Connect command, 1024-byte Connect data, response DW0.
//! - [`property`]: Property Get/Set and the CAP/VS/CC/CSTS/CRTO registers.
//! - [`identify`]: Identify command, Controller/Namespace structures, NS
//!   descriptor list, active NSID list.
//! - [`log`]: Get Log Page command and the error, SMART, firmware slot, changed
//!   namespace, command effects, ANA and supported-log pages.
//! - [`discovery`]: Discovery log page (LID 70h) header and entries.
//! - [`features`]: Set/Get Features, Number of Queues, AER completion, Abort.
//! - [`dsm`]: Dataset Management command and ranges.
//! - [`copy`]: Copy command and its source ranges (descriptor format 0).
//! - [`nqn`]: NQN validation and UUID-form NQNs.
//! - [`reservation`]: reservation commands, keys, status data and notification log.
//! - [`zns`]: Zoned Namespace command set: zone management commands, zone
//!   reports, its Identify Namespace and Identify Controller structures.

pub mod connect;
pub mod copy;
pub mod discovery;
pub mod dsm;
pub mod features;
pub mod identify;
pub mod log;
pub mod nqn;
pub mod property;
pub mod reservation;
pub mod zns;

pub use connect::{ConnectCmd, ConnectData, CNTLID_DYNAMIC};
pub use copy::{CopyCmd, CopyRange};
pub use discovery::{DiscoveryLog, DiscoveryLogEntry, DiscoveryLogHeader};
pub use dsm::{DsmCmd, DsmRange};
pub use features::{AsyncEvent, FeatureId, GetFeaturesCmd, NumQueues, SetFeaturesCmd};
pub use identify::{
    Cns, IdentifyCmd, IdentifyController, IdentifyCtrlNvm, IdentifyNamespace, NsIdDescriptor,
};
pub use log::{GetLogPageCmd, LogPageId};
pub use nqn::{NqnError, DISCOVERY_NQN};
pub use property::{Cap, Cc, Csts, PropertyGet, PropertyOffset, PropertySet, Vs};
pub use reservation::{ReservationCmd, ReservationKeys, ReservationStatus, ReservationType};

/// Errors decoding an admin/fabrics data structure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The buffer is shorter than the structure requires.
    #[error("{what}: need {need} bytes, got {got}")]
    TooShort {
        /// Structure being decoded.
        what: &'static str,
        /// Bytes required.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// A string field is not valid UTF-8.
    #[error("string field at byte offset {offset} is not valid UTF-8")]
    NotUtf8 {
        /// Byte offset of the field in the structure.
        offset: usize,
    },
    /// A NUL-terminated string field has no NUL within its size.
    #[error("string field at byte offset {offset} is not NUL-terminated within {len} bytes")]
    NotTerminated {
        /// Byte offset of the field in the structure.
        offset: usize,
        /// Field size in bytes.
        len: usize,
    },
    /// A descriptor or field holds an invalid value.
    #[error("invalid {what} at byte offset {offset}")]
    Invalid {
        /// What was invalid.
        what: &'static str,
        /// Byte offset of the offending field.
        offset: usize,
    },
    /// More items than the structure can hold.
    #[error("{what}: {got} items exceed the maximum of {max}")]
    TooMany {
        /// Structure being encoded.
        what: &'static str,
        /// Capacity.
        max: usize,
        /// Items given.
        got: usize,
    },
}

/// Getter/builder pairs for bit fields of a `pub struct X(pub uN)` newtype.
///
/// `get / with_x : ty = low_bit, width;` produces `get(self) -> ty` and
/// `with_x(self, v: ty) -> Self` (value masked to `width` bits).
macro_rules! bitfields {
    ($raw:ty; $( $(#[$m:meta])* $get:ident / $set:ident : $ty:ty = $lo:expr, $w:expr; )*) => {
        $(
            $(#[$m])*
            pub const fn $get(self) -> $ty {
                ((self.0 >> $lo) & ((1 << $w) - 1)) as $ty
            }
            #[doc = concat!("Returns a copy with `", stringify!($get), "` replaced (bits ", stringify!($lo),
                " .. +", stringify!($w), ").")]
            pub const fn $set(self, v: $ty) -> Self {
                let mask: $raw = ((1 << $w) - 1) << $lo;
                Self((self.0 & !mask) | (((v as $raw) << $lo) & mask))
            }
        )*
    };
}

/// Getter/builder pairs for single-bit flags of a `pub struct X(pub uN)` newtype.
macro_rules! bitflags_rw {
    ($raw:ty; $( $(#[$m:meta])* $get:ident / $set:ident = $bit:expr; )*) => {
        $(
            $(#[$m])*
            pub const fn $get(self) -> bool {
                (self.0 >> $bit) & 1 != 0
            }
            #[doc = concat!("Returns a copy with `", stringify!($get), "` (bit ", stringify!($bit), ") set or cleared.")]
            pub const fn $set(self, on: bool) -> Self {
                let mask: $raw = 1 << $bit;
                Self((self.0 & !mask) | ((on as $raw) << $bit))
            }
        )*
    };
}

pub(crate) use bitfields;
pub(crate) use bitflags_rw;

/// Little-endian field access and string helpers shared by the structures.
pub(crate) mod wire {
    use super::SpecError;

    pub(crate) fn need(b: &[u8], len: usize, what: &'static str) -> Result<(), SpecError> {
        if b.len() < len {
            Err(SpecError::TooShort { what, need: len, got: b.len() })
        } else {
            Ok(())
        }
    }
    pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
        u16::from_le_bytes(b[off..off + 2].try_into().unwrap())
    }
    pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }
    pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }
    pub(crate) fn u128_at(b: &[u8], off: usize) -> u128 {
        u128::from_le_bytes(b[off..off + 16].try_into().unwrap())
    }
    pub(crate) fn arr<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
        b[off..off + N].try_into().unwrap()
    }
    pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
        b[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
        b[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
        b[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn put_u128(b: &mut [u8], off: usize, v: u128) {
        b[off..off + 16].copy_from_slice(&v.to_le_bytes());
    }

    /// Longest prefix of `s` that fits in `max` bytes without splitting a character.
    pub(crate) fn truncate(s: &str, max: usize) -> &[u8] {
        if s.len() <= max {
            return s.as_bytes();
        }
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        &s.as_bytes()[..end]
    }

    /// Strict NUL-terminated string (Connect data NQNs): stops at the first NUL,
    /// errors if there is none within `len` bytes or the bytes are not UTF-8.
    pub(crate) fn cstr_strict(b: &[u8], off: usize, len: usize) -> Result<String, SpecError> {
        let f = &b[off..off + len];
        let n = f.iter().position(|&c| c == 0).ok_or(SpecError::NotTerminated { offset: off, len })?;
        String::from_utf8(f[..n].to_vec()).map_err(|_| SpecError::NotUtf8 { offset: off })
    }

    /// Lenient NUL-terminated string (Identify SUBNQN, discovery SUBNQN): stops at
    /// the first NUL or the field end; non-UTF-8 is an error naming the offset.
    pub(crate) fn cstr(b: &[u8], off: usize, len: usize) -> Result<String, SpecError> {
        let f = &b[off..off + len];
        let n = f.iter().position(|&c| c == 0).unwrap_or(len);
        String::from_utf8(f[..n].to_vec()).map_err(|_| SpecError::NotUtf8 { offset: off })
    }

    /// Writes `s` NUL-terminated into a zeroed field of `len` bytes (truncated to `len - 1`).
    pub(crate) fn put_cstr(b: &mut [u8], off: usize, len: usize, s: &str) {
        let v = truncate(s, len - 1);
        b[off..off + v.len()].copy_from_slice(v);
        b[off + v.len()..off + len].fill(0);
    }

    /// Fixed-size padded ASCII field (SN, MN, FR, TRADDR…): trailing spaces and
    /// NULs are removed; invalid UTF-8 is replaced lossily (these are display
    /// strings and a peer's garbage must not make the whole structure unreadable).
    pub(crate) fn padded(b: &[u8], off: usize, len: usize) -> String {
        let f = &b[off..off + len];
        let n = f.iter().rposition(|&c| c != b' ' && c != 0).map_or(0, |p| p + 1);
        String::from_utf8_lossy(&f[..n]).into_owned()
    }

    /// Writes `s` into a field of `len` bytes, padded with `pad` (truncated to `len`).
    pub(crate) fn put_padded(b: &mut [u8], off: usize, len: usize, s: &str, pad: u8) {
        let v = truncate(s, len);
        b[off..off + v.len()].copy_from_slice(v);
        b[off + v.len()..off + len].fill(pad);
    }
}

#[cfg(test)]
mod tests {
    use super::wire::*;
    use super::SpecError;

    #[test]
    fn string_helpers() {
        let mut b = [0xAAu8; 16];
        put_cstr(&mut b, 0, 8, "abcdefghij");
        assert_eq!(&b[..8], b"abcdefg\0");
        assert_eq!(cstr_strict(&b, 0, 8).unwrap(), "abcdefg");
        assert_eq!(cstr_strict(&b, 8, 8), Err(SpecError::NotTerminated { offset: 8, len: 8 }));
        put_padded(&mut b, 8, 8, "ab", b' ');
        assert_eq!(&b[8..], b"ab      ");
        assert_eq!(padded(&b, 8, 8), "ab");
        // multi-byte characters are never split
        put_cstr(&mut b, 0, 4, "aé€");
        assert_eq!(cstr(&b, 0, 4).unwrap(), "aé");
        b[0] = 0xFF;
        assert_eq!(cstr(&b, 0, 4), Err(SpecError::NotUtf8 { offset: 0 }));
    }
}
