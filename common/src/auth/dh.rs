//! Finite-field Diffie-Hellman over the RFC 7919 groups, for the DH part of
//! DH-HMAC-CHAP. Values are big-endian and as long as the prime (Linux's
//! `crypto_kpp_maxsize`, which the kernel pads to), and the exponentiation is
//! constant-time in the private key (`crypto-bigint`'s Montgomery form).

use std::sync::OnceLock;

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use rand::RngCore;

use super::{ffdhe, DhGroup};

/// Why a peer's public value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DhError {
    /// The group is NULL or unknown.
    #[error("DH group {0:?} has no Diffie-Hellman exchange")]
    NoGroup(DhGroup),
    /// Not the group's length.
    #[error("DH value of {got} bytes, the group's are {want}")]
    Length {
        /// Bytes received.
        got: usize,
        /// Bytes expected.
        want: usize,
    },
    /// Outside 2..=p-2 (SP 800-56A's range check; 0, 1 and p-1 would give a
    /// shared secret an attacker knows).
    #[error("DH value out of range")]
    Range,
}

struct Group {
    prime: Vec<u8>,
    params: BoxedMontyParams,
    /// Private exponent length in bits: RFC 7919 §5.2's recommendation
    /// (twice the group's security strength, and more).
    exponent_bits: u32,
}

fn group(g: DhGroup) -> Option<&'static Group> {
    static GROUPS: [OnceLock<Group>; 5] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];
    let (hex, exponent_bits) = match g {
        DhGroup::FFDHE2048 => (ffdhe::FFDHE2048, 225),
        DhGroup::FFDHE3072 => (ffdhe::FFDHE3072, 275),
        DhGroup::FFDHE4096 => (ffdhe::FFDHE4096, 325),
        DhGroup::FFDHE6144 => (ffdhe::FFDHE6144, 375),
        DhGroup::FFDHE8192 => (ffdhe::FFDHE8192, 400),
        _ => return None,
    };
    Some(GROUPS[g.0 as usize - 1].get_or_init(|| {
        let prime: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("RFC 7919 constants are hex"))
            .collect();
        let p = BoxedUint::from_be_slice_vartime(&prime);
        let params = BoxedMontyParams::new_vartime(Odd::new(p).expect("the primes are odd"));
        Group { prime, params, exponent_bits }
    }))
}

fn to_be_padded(x: &BoxedUint, len: usize) -> Vec<u8> {
    let b = x.to_be_bytes();
    // The precision is the prime's, so this is exactly `len` bytes, or more
    // leading zero bytes when a limb rounds it up.
    b[b.len() - len..].to_vec()
}

/// One side's ephemeral key pair in a group.
pub struct DhKeyPair {
    group: DhGroup,
    private: BoxedUint,
    public: Vec<u8>,
}

impl std::fmt::Debug for DhKeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DhKeyPair").field("group", &self.group).finish_non_exhaustive()
    }
}

impl DhKeyPair {
    /// A fresh key pair (random private exponent, public value 2^x mod p), or
    /// `None` for the NULL group and unknown groups.
    pub fn generate(g: DhGroup) -> Option<Self> {
        let grp = group(g)?;
        let bits = grp.exponent_bits;
        let mut x = vec![0u8; bits.div_ceil(8) as usize];
        loop {
            rand::rngs::OsRng.fill_bytes(&mut x);
            x[0] &= 0xFF >> (x.len() as u32 * 8 - bits);
            if x.iter().any(|&b| b != 0) {
                break;
            }
        }
        let precision = grp.params.bits_precision();
        let private = BoxedUint::from_be_slice(&x, precision).expect("shorter than the prime");
        let two = BoxedUint::from_be_slice(&[2], precision).expect("fits");
        let public = BoxedMontyForm::new(two, &grp.params).pow_bounded_exp(&private, bits).retrieve();
        Some(Self { group: g, public: to_be_padded(&public, grp.prime.len()), private })
    }

    /// The group.
    pub fn group(&self) -> DhGroup {
        self.group
    }

    /// The public value to send (the prime's length).
    pub fn public(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret y^x mod p from the peer's public value `y`, padded to
    /// the prime's length.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<Vec<u8>, DhError> {
        let grp = group(self.group).ok_or(DhError::NoGroup(self.group))?;
        let want = grp.prime.len();
        if peer.len() != want {
            return Err(DhError::Length { got: peer.len(), want });
        }
        // 2 <= y <= p - 2: big-endian byte strings of one length compare as numbers.
        let mut p_minus_1 = grp.prime.clone();
        *p_minus_1.last_mut().expect("non-empty") -= 1; // the primes end in FFh
        let mut one = vec![0u8; want];
        one[want - 1] = 1;
        if peer <= one.as_slice() || peer >= p_minus_1.as_slice() {
            return Err(DhError::Range);
        }
        let y = BoxedUint::from_be_slice(peer, grp.params.bits_precision()).expect("the prime's length");
        let s =
            BoxedMontyForm::new(y, &grp.params).pow_bounded_exp(&self.private, grp.exponent_bits).retrieve();
        Ok(to_be_padded(&s, want))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_derive_the_same_secret_in_every_group() {
        for g in [
            DhGroup::FFDHE2048,
            DhGroup::FFDHE3072,
            DhGroup::FFDHE4096,
            DhGroup::FFDHE6144,
            DhGroup::FFDHE8192,
        ] {
            let (a, b) = (DhKeyPair::generate(g).unwrap(), DhKeyPair::generate(g).unwrap());
            assert_eq!(a.public().len(), g.value_len(), "{g:?}");
            assert_ne!(a.public(), b.public());
            let s = a.shared_secret(b.public()).unwrap();
            assert_eq!(s.len(), g.value_len());
            assert_eq!(s, b.shared_secret(a.public()).unwrap(), "{g:?}");
        }
        assert!(DhKeyPair::generate(DhGroup::NULL).is_none());
        assert!(DhKeyPair::generate(DhGroup(6)).is_none());
    }

    #[test]
    fn degenerate_peer_values_are_refused() {
        let a = DhKeyPair::generate(DhGroup::FFDHE2048).unwrap();
        let len = 256;
        let mut v = vec![0u8; len];
        assert_eq!(a.shared_secret(&v), Err(DhError::Range));
        v[len - 1] = 1;
        assert_eq!(a.shared_secret(&v), Err(DhError::Range));
        v[len - 1] = 2;
        assert!(a.shared_secret(&v).is_ok());
        let p = &group(DhGroup::FFDHE2048).unwrap().prime;
        let mut pm1 = p.clone();
        pm1[len - 1] -= 1;
        assert_eq!(a.shared_secret(&pm1), Err(DhError::Range));
        assert_eq!(a.shared_secret(p), Err(DhError::Range));
        assert_eq!(a.shared_secret(&v[1..]), Err(DhError::Length { got: 255, want: 256 }));
    }

    /// g^x computed here agrees with an independent modular exponentiation
    /// (Python's `pow(2, x, p)` gave the same value for this exponent).
    #[test]
    fn public_value_matches_plain_modular_exponentiation() {
        let grp = group(DhGroup::FFDHE2048).unwrap();
        let precision = grp.params.bits_precision();
        let x = BoxedUint::from_be_slice(&[0x01, 0x00, 0x01], precision).unwrap();
        let two = BoxedUint::from_be_slice(&[2], precision).unwrap();
        let y = BoxedMontyForm::new(two, &grp.params).pow_bounded_exp(&x, 17).retrieve();
        let hex: String = to_be_padded(&y, 256).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(&hex[hex.len() - 32..], "ee47dea64e9beb726877a0ab849eb63b");
    }
}
