//! The DH-HMAC-CHAP computations (NVMe Base 2.x §8.3.4.5.3-5), byte for byte
//! as Linux computes them (`nvme_auth_dhchap_setup_host_response` and
//! `_ctrl_response` in `drivers/nvme/host/auth.c`, `nvmet_auth_host_hash` and
//! `nvmet_auth_ctrl_hash` in `drivers/nvme/target/auth.c`).

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha384, Sha512};

use super::HashId;

/// HMAC with `hash` over the concatenation of `parts`. Panics on an unknown
/// hash: callers only pass hashes they negotiated ([`HashId::is_known`]).
pub fn hmac(hash: HashId, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    fn run<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut m = <M as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    match hash {
        HashId::SHA256 => run::<Hmac<Sha256>>(key, parts),
        HashId::SHA384 => run::<Hmac<Sha384>>(key, parts),
        HashId::SHA512 => run::<Hmac<Sha512>>(key, parts),
        h => panic!("HMAC with unknown hash {h:?}"),
    }
}

/// The hash of `data`. Panics on an unknown hash, as [`hmac()`].
pub fn digest(hash: HashId, data: &[u8]) -> Vec<u8> {
    match hash {
        HashId::SHA256 => Sha256::digest(data).to_vec(),
        HashId::SHA384 => Sha384::digest(data).to_vec(),
        HashId::SHA512 => Sha512::digest(data).to_vec(),
        h => panic!("hash {h:?} unknown"),
    }
}

/// The augmented challenge of a DH group other than NULL: HMAC(H(Ks), C),
/// with Ks the Diffie-Hellman shared secret (`nvme_auth_augmented_challenge`).
pub fn augmented_challenge(hash: HashId, session_key: &[u8], challenge: &[u8]) -> Vec<u8> {
    hmac(hash, &digest(hash, session_key), &[challenge])
}

/// The challenge a response covers: augmented with the Diffie-Hellman
/// shared secret when the group is not NULL, else as it is.
pub fn response_challenge(hash: HashId, session_key: Option<&[u8]>, challenge: &[u8]) -> Vec<u8> {
    match session_key {
        Some(k) => augmented_challenge(hash, k, challenge),
        None => challenge.to_vec(),
    }
}

/// The exchange a response covers.
#[derive(Clone, Copy, Debug)]
pub struct Exchange<'a> {
    /// Negotiated hash.
    pub hash: HashId,
    /// The challenge (C1 for the host's response, C2 for the controller's),
    /// already augmented when a DH group is in use.
    pub challenge: &'a [u8],
    /// Its sequence number (S1, S2).
    pub seqnum: u32,
    /// Transaction identifier.
    pub t_id: u16,
    /// Secure channel concatenation byte (0).
    pub sc_c: u8,
    /// Host NQN.
    pub hostnqn: &'a str,
    /// Subsystem NQN.
    pub subnqn: &'a str,
}

/// The host's response R1 = HMAC(Kh, C1 ‖ S1 ‖ T_ID ‖ SC_C ‖ "HostHost" ‖
/// NQNh ‖ 00h ‖ NQNc), `key` being the transformed host key.
pub fn host_response(key: &[u8], x: &Exchange<'_>) -> Vec<u8> {
    response(key, x, b"HostHost", x.hostnqn, x.subnqn)
}

/// The controller's response R2 = HMAC(Kc, C2 ‖ S2 ‖ T_ID ‖ SC_C ‖
/// "Controller" ‖ NQNc ‖ 00h ‖ NQNh), `key` being the transformed controller key.
pub fn ctrl_response(key: &[u8], x: &Exchange<'_>) -> Vec<u8> {
    response(key, x, b"Controller", x.subnqn, x.hostnqn)
}

/// HMAC(key, C ‖ S ‖ T_ID ‖ SC_C ‖ `label` ‖ `own` NQN ‖ 00h ‖ `peer` NQN):
/// each side names itself first.
fn response(key: &[u8], x: &Exchange<'_>, label: &[u8], own: &str, peer: &str) -> Vec<u8> {
    hmac(
        x.hash,
        key,
        &[
            x.challenge,
            &x.seqnum.to_le_bytes(),
            &x.t_id.to_le_bytes(),
            &[x.sc_c],
            label,
            own.as_bytes(),
            &[0],
            peer.as_bytes(),
        ],
    )
}

/// Compares two responses in time independent of where they differ.
pub fn responses_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::DhchapSecret;

    /// Values computed independently with Python's `hmac` and `hashlib` from
    /// the formulas of Linux's `nvmet_auth_host_hash` / `nvmet_auth_ctrl_hash`
    /// and `nvme_auth_transform_key`.
    #[test]
    fn responses_match_independent_computations() {
        let secret = DhchapSecret::new((0u8..32).collect(), HashId::SHA256).unwrap();
        let key = secret.transformed("nqn.2014-08.org.nvmexpress:uuid:host");
        assert_eq!(hex(&key), "d06bfe416d2de81dd5cccafd02bca7f68fe6d9ed50c7393fa37471335959cdf7");
        let c1: Vec<u8> = (100u8..132).collect();
        let x = Exchange {
            hash: HashId::SHA256,
            challenge: &c1,
            seqnum: 0x11223344,
            t_id: 0x0102,
            sc_c: 0,
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:host",
            subnqn: "nqn.2026-11.io.nvmeof:disk",
        };
        assert_eq!(
            hex(&host_response(&key, &x)),
            "81249f66a0d04d2b325109cf93c93cec5ebdd9ba2cb8a1e06cf7f5d4bc283f1f"
        );
        assert_eq!(
            hex(&ctrl_response(&key, &x)),
            "e61c654bb22ad41bf04f586f529d5a1676a1f12b8e7c23938a6891214699933b"
        );
        let aug = augmented_challenge(HashId::SHA384, &[9u8; 256], &[1u8; 48]);
        assert_eq!(hex(&aug), "d64aa6c3395147a27883f63d249acf0f50830b83fe0959c8fe00398849c5bd55462ef75e37682ba29938e8d845cead66");
        assert!(responses_equal(&aug, &aug.clone()));
        assert!(!responses_equal(&aug, &aug[1..]));
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
