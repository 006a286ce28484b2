//! NVMe in-band authentication, DH-HMAC-CHAP (NVMe Base 2.x §8.3.4.5, TP 8006),
//! as the Linux host (`drivers/nvme/host/auth.c`) and target
//! (`drivers/nvme/target/fabrics-cmd-auth.c`, `auth.c`) run it:
//!
//! 1. host → AUTH_Negotiate: the hash functions and DH groups it can use;
//! 2. controller → DH-HMAC-CHAP_Challenge: the chosen hash and group, a
//!    sequence number S1, a random challenge C1 and its DH public value;
//! 3. host → DH-HMAC-CHAP_Reply: R1 = HMAC(Kh, C1 ‖ S1 ‖ T_ID ‖ SC_C ‖
//!    "HostHost" ‖ NQNh ‖ 0 ‖ NQNc), its DH public value, and for
//!    bidirectional authentication its own S2 and C2;
//! 4. controller → DH-HMAC-CHAP_Success1, with R2 = HMAC(Kc, C2 ‖ S2 ‖ T_ID ‖
//!    SC_C ‖ "Controller" ‖ NQNc ‖ 0 ‖ NQNh) when asked;
//! 5. host → DH-HMAC-CHAP_Success2 (bidirectional only).
//!
//! Either side may end it with AUTH_Failure1 (controller) or AUTH_Failure2
//! (host). With a DH group other than NULL the challenges are first
//! "augmented" with the shared secret: Ca = HMAC(H(g^xy mod p), C).
//!
//! The messages travel as the data of the Fabrics Authentication Send (host
//! to controller) and Receive (controller to host) commands, SECP E9h,
//! SPSP0 01h, SPSP1 01h. This module is sans-IO: [`message`] encodes and
//! decodes the messages, [`secret`] parses `DHHC-1` secrets, [`chap`]
//! computes the responses and [`dh`] the finite-field Diffie-Hellman.

pub mod chap;
pub mod dh;
mod ffdhe;
pub mod message;
pub mod secret;

pub use chap::{ctrl_response, host_response};
pub use dh::DhKeyPair;
pub use message::{AuthMessage, Challenge, Failure, Negotiate, Reply, Success1};
pub use secret::DhchapSecret;

use crate::sqe::Sqe;

/// Security Protocol (SECP) of NVMe in-band authentication.
pub const SECP_NVME_AUTH: u8 = 0xE9;
/// SPSP0 and SPSP1 of DH-HMAC-CHAP: 01h each.
pub const SPSP: u8 = 0x01;
/// Byte offsets in the Authentication Send/Receive SQE.
pub mod sqe_off {
    /// SPSP0.
    pub const SPSP0: usize = 41;
    /// SPSP1.
    pub const SPSP1: usize = 42;
    /// SECP.
    pub const SECP: usize = 43;
    /// Transfer length (Send) or allocation length (Receive), u32.
    pub const TL: usize = 44;
}

/// The fields of an Authentication Send or Receive command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthCmd {
    /// SECP.
    pub secp: u8,
    /// SPSP0.
    pub spsp0: u8,
    /// SPSP1.
    pub spsp1: u8,
    /// TL (Send) or AL (Receive).
    pub len: u32,
}

impl AuthCmd {
    /// The DH-HMAC-CHAP values for `len` bytes.
    pub fn dhchap(len: u32) -> Self {
        Self { secp: SECP_NVME_AUTH, spsp0: SPSP, spsp1: SPSP, len }
    }

    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        Self {
            spsp0: sqe.byte(sqe_off::SPSP0),
            spsp1: sqe.byte(sqe_off::SPSP1),
            secp: sqe.byte(sqe_off::SECP),
            len: sqe.u32_at(sqe_off::TL),
        }
    }

    /// Builds the SQE: Authentication Send when `send`, else Receive. The
    /// caller sets the SGL.
    pub fn to_sqe(&self, send: bool, cid: u16) -> Sqe {
        let fctype =
            if send { crate::opcode::FabricsType::AUTH_SEND } else { crate::opcode::FabricsType::AUTH_RECV };
        let mut sqe = Sqe::new(0x7F);
        sqe.set_cid(cid);
        sqe.set_fctype(fctype.0)
            .set_byte(sqe_off::SPSP0, self.spsp0)
            .set_byte(sqe_off::SPSP1, self.spsp1)
            .set_byte(sqe_off::SECP, self.secp)
            .set_cdw(11, self.len);
        sqe
    }
}

/// Hash function identifier (HashID): the HMAC and hash of the exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HashId(pub u8);

impl HashId {
    /// SHA-256 (32-byte values).
    pub const SHA256: Self = Self(1);
    /// SHA-384 (48-byte values).
    pub const SHA384: Self = Self(2);
    /// SHA-512 (64-byte values).
    pub const SHA512: Self = Self(3);
    /// Every hash this implementation offers, in the Linux host's order.
    pub const ALL: [Self; 3] = [Self::SHA256, Self::SHA384, Self::SHA512];

    /// Digest length in bytes, 0 for an unknown identifier (HL in the messages).
    #[allow(clippy::len_without_is_empty)] // an identifier, not a collection
    pub fn len(self) -> usize {
        match self {
            Self::SHA256 => 32,
            Self::SHA384 => 48,
            Self::SHA512 => 64,
            _ => 0,
        }
    }

    /// Whether the identifier is one of the three known hashes.
    pub fn is_known(self) -> bool {
        self.len() != 0
    }

    /// The name nvmet and nvme-cli use ("sha256" …), as in `hmac(sha256)`.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Self::SHA256 => Some("sha256"),
            Self::SHA384 => Some("sha384"),
            Self::SHA512 => Some("sha512"),
            _ => None,
        }
    }

    /// Parses "sha256", "hmac(sha256)" etc.
    pub fn from_name(name: &str) -> Option<Self> {
        let n = name.trim();
        let n = n.strip_prefix("hmac(").and_then(|s| s.strip_suffix(')')).unwrap_or(n);
        Self::ALL.into_iter().find(|h| h.name() == Some(n))
    }
}

/// Diffie-Hellman group identifier (DHgroupID).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DhGroup(pub u8);

impl DhGroup {
    /// No Diffie-Hellman: the challenges are used as they are.
    pub const NULL: Self = Self(0);
    /// ffdhe2048.
    pub const FFDHE2048: Self = Self(1);
    /// ffdhe3072.
    pub const FFDHE3072: Self = Self(2);
    /// ffdhe4096.
    pub const FFDHE4096: Self = Self(3);
    /// ffdhe6144.
    pub const FFDHE6144: Self = Self(4);
    /// ffdhe8192.
    pub const FFDHE8192: Self = Self(5);
    /// Every group this implementation offers, in the Linux host's order.
    pub const ALL: [Self; 6] =
        [Self::NULL, Self::FFDHE2048, Self::FFDHE3072, Self::FFDHE4096, Self::FFDHE6144, Self::FFDHE8192];

    /// Whether the identifier is NULL or one of the five FFDHE groups.
    pub fn is_known(self) -> bool {
        self.0 <= 5
    }

    /// Length of the group's public values and shared secret in bytes (0 for NULL).
    pub fn value_len(self) -> usize {
        match self.0 {
            1 => 256,
            2 => 384,
            3 => 512,
            4 => 768,
            5 => 1024,
            _ => 0,
        }
    }

    /// The name nvmet and nvme-cli use ("null", "ffdhe2048" …).
    pub fn name(self) -> Option<&'static str> {
        match self.0 {
            0 => Some("null"),
            1 => Some("ffdhe2048"),
            2 => Some("ffdhe3072"),
            3 => Some("ffdhe4096"),
            4 => Some("ffdhe6144"),
            5 => Some("ffdhe8192"),
            _ => None,
        }
    }

    /// Parses "null", "ffdhe2048" …
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|g| g.name() == Some(name.trim()))
    }
}

/// Reason code explanation of an AUTH_Failure1/2 message (reason code 01h,
/// "authentication failure").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FailureReason(pub u8);

impl FailureReason {
    /// Authentication failed (a response did not match).
    pub const FAILED: Self = Self(0x01);
    /// Authentication protocol not usable.
    pub const NOT_USABLE: Self = Self(0x02);
    /// Secure channel concatenation mismatch.
    pub const CONCAT_MISMATCH: Self = Self(0x03);
    /// No usable hash function.
    pub const HASH_UNUSABLE: Self = Self(0x04);
    /// No usable DH group.
    pub const DHGROUP_UNUSABLE: Self = Self(0x05);
    /// Incorrect payload.
    pub const INCORRECT_PAYLOAD: Self = Self(0x06);
    /// Incorrect protocol message.
    pub const INCORRECT_MESSAGE: Self = Self(0x07);

    /// Words for a log line.
    pub fn describe(self) -> &'static str {
        match self.0 {
            0x01 => "authentication failed",
            0x02 => "authentication protocol not usable",
            0x03 => "secure channel concatenation mismatch",
            0x04 => "hash function not usable",
            0x05 => "DH group not usable",
            0x06 => "incorrect payload",
            0x07 => "incorrect protocol message",
            _ => "unknown reason",
        }
    }
}

impl std::fmt::Display for FailureReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:#04x})", self.describe(), self.0)
    }
}

/// `len` random bytes from the operating system (challenges C1 and C2).
pub fn random_bytes(len: usize) -> Vec<u8> {
    use rand::RngCore;
    let mut b = vec![0u8; len];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b
}

/// The next sequence number (S1 of a challenge, S2 of a bidirectional reply):
/// a process-wide counter that starts at a random value and skips 0, which
/// means "no bidirectional authentication" in a reply (`nvme_auth_get_seqnum`).
pub fn next_seqnum() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static SEQNUM: AtomicU32 = AtomicU32::new(0);
    let mut cur = SEQNUM.load(Ordering::Relaxed);
    loop {
        let next = if cur == 0 {
            u32::from_le_bytes(random_bytes(4).try_into().expect("4 bytes")).max(1)
        } else {
            cur.wrapping_add(1).max(1)
        };
        match SEQNUM.compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(now) => cur = now,
        }
    }
}

/// Connect response DW0 bit 17, AUTHREQ.ATR: DH-HMAC-CHAP must run on this
/// queue before any other command but Fabrics ones.
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;
/// Connect response DW0 bit 18, AUTHREQ.ASCR: secure channel concatenation required.
pub const CONNECT_AUTHREQ_ASCR: u32 = 1 << 18;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_cmd_round_trips_through_the_sqe() {
        let c = AuthCmd::dhchap(1234);
        let sqe = c.to_sqe(true, 7);
        assert_eq!(sqe.opcode(), 0x7F);
        assert_eq!(sqe.fctype(), 0x05);
        assert_eq!(sqe.byte(43), 0xE9);
        assert_eq!((sqe.byte(41), sqe.byte(42)), (1, 1));
        assert_eq!(sqe.u32_at(44), 1234);
        assert_eq!(AuthCmd::from_sqe(&sqe), c);
        assert_eq!(c.to_sqe(false, 7).fctype(), 0x06);
    }

    #[test]
    fn sequence_numbers_count_up_and_skip_zero() {
        let a = next_seqnum();
        let b = next_seqnum();
        // Other tests of this process may take numbers in between.
        assert!(a != 0 && b != 0 && a != b, "{a} then {b}");
        assert_eq!(random_bytes(48).len(), 48);
        assert_ne!(random_bytes(32), random_bytes(32));
    }

    #[test]
    fn names_parse_as_nvme_cli_writes_them() {
        assert_eq!(HashId::from_name("hmac(sha384)"), Some(HashId::SHA384));
        assert_eq!(HashId::from_name("sha512"), Some(HashId::SHA512));
        assert_eq!(HashId::from_name("md5"), None);
        assert_eq!(DhGroup::from_name("ffdhe8192"), Some(DhGroup::FFDHE8192));
        assert_eq!(DhGroup::from_name("null"), Some(DhGroup::NULL));
        assert_eq!(DhGroup::FFDHE3072.value_len(), 384);
    }
}
