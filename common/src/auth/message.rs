//! The authentication messages (layouts as `struct nvmf_auth_dhchap_*` in
//! Linux's `include/linux/nvme.h`; all little-endian). Every message starts
//! with AUTH_Type (00h common, 01h DH-HMAC-CHAP), AUTH_Id and, at bytes 4-5,
//! the transaction identifier T_ID.

use super::{DhGroup, FailureReason, HashId};

/// AUTH_Type of AUTH_Negotiate and the failure messages.
pub const AUTH_TYPE_COMMON: u8 = 0x00;
/// AUTH_Type of the DH-HMAC-CHAP messages.
pub const AUTH_TYPE_DHCHAP: u8 = 0x01;
/// Authentication protocol identifier of DH-HMAC-CHAP in a protocol descriptor.
pub const AUTH_ID_DHCHAP: u8 = 0x01;
/// At most this many hash IDs and this many DH group IDs in a descriptor
/// (`NVME_AUTH_DHCHAP_MAX_HASH_IDS`, `_MAX_DH_IDS`).
pub const MAX_IDS: usize = 30;
/// Size of one protocol descriptor in AUTH_Negotiate.
pub const DESCRIPTOR_LEN: usize = 64;
/// Header of the Challenge, Reply, Success1 and Success2 messages.
pub const HEADER_LEN: usize = 16;
/// Size of AUTH_Failure1/2.
pub const FAILURE_LEN: usize = 8;
/// Reason code of the failure messages: authentication failure.
pub const REASON_FAILURE: u8 = 0x01;

/// AUTH_Id values (the message's step).
pub mod id {
    /// AUTH_Negotiate (type 00h).
    pub const NEGOTIATE: u8 = 0x00;
    /// DH-HMAC-CHAP_Challenge.
    pub const CHALLENGE: u8 = 0x01;
    /// DH-HMAC-CHAP_Reply.
    pub const REPLY: u8 = 0x02;
    /// DH-HMAC-CHAP_Success1.
    pub const SUCCESS1: u8 = 0x03;
    /// DH-HMAC-CHAP_Success2.
    pub const SUCCESS2: u8 = 0x04;
    /// AUTH_Failure2 (host to controller; type 00h).
    pub const FAILURE2: u8 = 0xF0;
    /// AUTH_Failure1 (controller to host; type 00h).
    pub const FAILURE1: u8 = 0xF1;
}

/// AUTH_Negotiate: what the host can do (one DH-HMAC-CHAP descriptor as the
/// Linux host sends; the raw counts are kept so that the controller can answer
/// an odd message as nvmet does).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiate {
    /// Transaction identifier.
    pub t_id: u16,
    /// Secure channel concatenation (00h: none).
    pub sc_c: u8,
    /// Number of protocol descriptors.
    pub napd: u8,
    /// Protocol of the first descriptor (01h DH-HMAC-CHAP).
    pub auth_id: u8,
    /// Hash IDs, in the host's order of preference.
    pub hashes: Vec<HashId>,
    /// DH group IDs, in the host's order of preference.
    pub dhgroups: Vec<DhGroup>,
}

impl Negotiate {
    /// A host's negotiation offering `hashes` and `dhgroups` (at most 30 each).
    pub fn new(t_id: u16, hashes: &[HashId], dhgroups: &[DhGroup]) -> Self {
        Self {
            t_id,
            sc_c: 0,
            napd: 1,
            auth_id: AUTH_ID_DHCHAP,
            hashes: hashes[..hashes.len().min(MAX_IDS)].to_vec(),
            dhgroups: dhgroups[..dhgroups.len().min(MAX_IDS)].to_vec(),
        }
    }
}

/// DH-HMAC-CHAP_Challenge (controller to host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// Transaction identifier.
    pub t_id: u16,
    /// Chosen hash.
    pub hash: HashId,
    /// Chosen DH group.
    pub dhgroup: DhGroup,
    /// Sequence number S1.
    pub seqnum: u32,
    /// Challenge C1 (HL bytes, the hash's length).
    pub challenge: Vec<u8>,
    /// The controller's DH public value (empty for the NULL group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Reply (host to controller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Transaction identifier.
    pub t_id: u16,
    /// Sequence number S2 (0: no bidirectional authentication).
    pub seqnum: u32,
    /// Response R1 (HL bytes).
    pub response: Vec<u8>,
    /// Challenge C2 for bidirectional authentication (CVALID set), HL bytes.
    pub challenge: Option<Vec<u8>>,
    /// The host's DH public value (empty for the NULL group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Success1 (controller to host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Success1 {
    /// Transaction identifier.
    pub t_id: u16,
    /// HL: the hash length.
    pub hl: u8,
    /// Response R2 when the host asked for bidirectional authentication (RVALID).
    pub response: Option<Vec<u8>>,
}

/// AUTH_Failure1 (controller) or AUTH_Failure2 (host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Transaction identifier.
    pub t_id: u16,
    /// Reason code (01h).
    pub reason: u8,
    /// Reason code explanation.
    pub explanation: FailureReason,
}

impl Failure {
    /// An authentication failure with `explanation`.
    pub fn new(t_id: u16, explanation: FailureReason) -> Self {
        Self { t_id, reason: REASON_FAILURE, explanation }
    }
}

/// One authentication message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthMessage {
    /// AUTH_Negotiate.
    Negotiate(Negotiate),
    /// DH-HMAC-CHAP_Challenge.
    Challenge(Challenge),
    /// DH-HMAC-CHAP_Reply.
    Reply(Reply),
    /// DH-HMAC-CHAP_Success1.
    Success1(Success1),
    /// DH-HMAC-CHAP_Success2, with its T_ID.
    Success2(u16),
    /// AUTH_Failure1 (from the controller).
    Failure1(Failure),
    /// AUTH_Failure2 (from the host).
    Failure2(Failure),
}

fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

impl AuthMessage {
    /// The message's transaction identifier.
    pub fn t_id(&self) -> u16 {
        match self {
            Self::Negotiate(m) => m.t_id,
            Self::Challenge(m) => m.t_id,
            Self::Reply(m) => m.t_id,
            Self::Success1(m) => m.t_id,
            Self::Success2(t) => *t,
            Self::Failure1(m) | Self::Failure2(m) => m.t_id,
        }
    }

    /// Its AUTH_Id.
    pub fn id(&self) -> u8 {
        match self {
            Self::Negotiate(_) => id::NEGOTIATE,
            Self::Challenge(_) => id::CHALLENGE,
            Self::Reply(_) => id::REPLY,
            Self::Success1(_) => id::SUCCESS1,
            Self::Success2(_) => id::SUCCESS2,
            Self::Failure1(_) => id::FAILURE1,
            Self::Failure2(_) => id::FAILURE2,
        }
    }

    /// Decodes a message. The error is the failure explanation a controller
    /// answers with, as nvmet does: a message of an unknown type or step is an
    /// incorrect protocol message, one too short for what it declares an
    /// incorrect payload. Bytes beyond the message (a longer transfer) are ignored.
    pub fn decode(b: &[u8]) -> Result<Self, FailureReason> {
        if b.len() < 8 {
            return Err(FailureReason::INCORRECT_PAYLOAD);
        }
        let (ty, auth_id, t_id) = (b[0], b[1], le16(b, 4));
        let payload = FailureReason::INCORRECT_PAYLOAD;
        match (ty, auth_id) {
            (AUTH_TYPE_COMMON, id::NEGOTIATE) => {
                if b.len() < 8 + DESCRIPTOR_LEN {
                    return Err(payload);
                }
                let d = &b[8..8 + DESCRIPTOR_LEN];
                let (halen, dhlen) = (d[2] as usize, d[3] as usize);
                if halen > MAX_IDS || dhlen > MAX_IDS {
                    return Err(payload);
                }
                Ok(Self::Negotiate(Negotiate {
                    t_id,
                    sc_c: b[6],
                    napd: b[7],
                    auth_id: d[0],
                    hashes: d[4..4 + halen].iter().map(|&h| HashId(h)).collect(),
                    dhgroups: d[4 + MAX_IDS..4 + MAX_IDS + dhlen].iter().map(|&g| DhGroup(g)).collect(),
                }))
            }
            (AUTH_TYPE_COMMON, id::FAILURE1 | id::FAILURE2) => {
                let f = Failure { t_id, reason: b[6], explanation: FailureReason(b[7]) };
                Ok(if auth_id == id::FAILURE1 { Self::Failure1(f) } else { Self::Failure2(f) })
            }
            (AUTH_TYPE_DHCHAP, _) if b.len() < HEADER_LEN => Err(payload),
            (AUTH_TYPE_DHCHAP, id::CHALLENGE) => {
                let (hl, dhvlen) = (b[6] as usize, le16(b, 10) as usize);
                if b.len() < HEADER_LEN + hl + dhvlen {
                    return Err(payload);
                }
                Ok(Self::Challenge(Challenge {
                    t_id,
                    hash: HashId(b[8]),
                    dhgroup: DhGroup(b[9]),
                    seqnum: le32(b, 12),
                    challenge: b[HEADER_LEN..HEADER_LEN + hl].to_vec(),
                    dh_value: b[HEADER_LEN + hl..HEADER_LEN + hl + dhvlen].to_vec(),
                }))
            }
            (AUTH_TYPE_DHCHAP, id::REPLY) => {
                // nvmet_auth_reply: the response and the challenge field (HL
                // bytes each, the latter present whether or not CVALID is set)
                // and the DH value must fit in the transfer.
                let (hl, cvalid, dhvlen) = (b[6] as usize, b[8] != 0, le16(b, 10) as usize);
                if b.len() < HEADER_LEN + 2 * hl + dhvlen {
                    return Err(payload);
                }
                let r = &b[HEADER_LEN..];
                Ok(Self::Reply(Reply {
                    t_id,
                    seqnum: le32(b, 12),
                    response: r[..hl].to_vec(),
                    challenge: cvalid.then(|| r[hl..2 * hl].to_vec()),
                    dh_value: r[2 * hl..2 * hl + dhvlen].to_vec(),
                }))
            }
            (AUTH_TYPE_DHCHAP, id::SUCCESS1) => {
                let (hl, rvalid) = (b[6] as usize, b[8] != 0);
                if rvalid && b.len() < HEADER_LEN + hl {
                    return Err(payload);
                }
                Ok(Self::Success1(Success1 {
                    t_id,
                    hl: b[6],
                    response: rvalid.then(|| b[HEADER_LEN..HEADER_LEN + hl].to_vec()),
                }))
            }
            (AUTH_TYPE_DHCHAP, id::SUCCESS2) => Ok(Self::Success2(t_id)),
            _ => Err(FailureReason::INCORRECT_MESSAGE),
        }
    }

    /// Encodes the message.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let header = |b: &mut Vec<u8>, ty: u8, auth_id: u8, t_id: u16, len: usize| {
            b.resize(len, 0);
            b[0] = ty;
            b[1] = auth_id;
            b[4..6].copy_from_slice(&t_id.to_le_bytes());
        };
        match self {
            Self::Negotiate(m) => {
                header(&mut b, AUTH_TYPE_COMMON, id::NEGOTIATE, m.t_id, 8 + DESCRIPTOR_LEN);
                b[6] = m.sc_c;
                b[7] = m.napd;
                let d = &mut b[8..];
                d[0] = m.auth_id;
                let (hashes, groups) =
                    (&m.hashes[..m.hashes.len().min(MAX_IDS)], &m.dhgroups[..m.dhgroups.len().min(MAX_IDS)]);
                d[2] = hashes.len() as u8;
                d[3] = groups.len() as u8;
                for (i, h) in hashes.iter().enumerate() {
                    d[4 + i] = h.0;
                }
                for (i, g) in groups.iter().enumerate() {
                    d[4 + MAX_IDS + i] = g.0;
                }
            }
            Self::Challenge(m) => {
                header(&mut b, AUTH_TYPE_DHCHAP, id::CHALLENGE, m.t_id, HEADER_LEN);
                b[6] = m.challenge.len() as u8;
                b[8] = m.hash.0;
                b[9] = m.dhgroup.0;
                b[10..12].copy_from_slice(&(m.dh_value.len() as u16).to_le_bytes());
                b[12..16].copy_from_slice(&m.seqnum.to_le_bytes());
                b.extend_from_slice(&m.challenge);
                b.extend_from_slice(&m.dh_value);
            }
            Self::Reply(m) => {
                let hl = m.response.len();
                header(&mut b, AUTH_TYPE_DHCHAP, id::REPLY, m.t_id, HEADER_LEN);
                b[6] = hl as u8;
                b[8] = m.challenge.is_some() as u8;
                b[10..12].copy_from_slice(&(m.dh_value.len() as u16).to_le_bytes());
                b[12..16].copy_from_slice(&m.seqnum.to_le_bytes());
                b.extend_from_slice(&m.response);
                if let Some(c) = &m.challenge {
                    b.extend_from_slice(&c[..hl.min(c.len())]);
                }
                b.resize(HEADER_LEN + 2 * hl, 0);
                b.extend_from_slice(&m.dh_value);
            }
            Self::Success1(m) => {
                header(&mut b, AUTH_TYPE_DHCHAP, id::SUCCESS1, m.t_id, HEADER_LEN);
                b[6] = m.hl;
                if let Some(r) = &m.response {
                    b[8] = 1;
                    b.extend_from_slice(r);
                }
            }
            Self::Success2(t_id) => header(&mut b, AUTH_TYPE_DHCHAP, id::SUCCESS2, *t_id, HEADER_LEN),
            Self::Failure1(f) | Self::Failure2(f) => {
                header(&mut b, AUTH_TYPE_COMMON, self.id(), f.t_id, FAILURE_LEN);
                b[6] = f.reason;
                b[7] = f.explanation.0;
            }
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(m: AuthMessage) -> Vec<u8> {
        let b = m.encode();
        assert_eq!(AuthMessage::decode(&b), Ok(m.clone()), "{m:?}");
        b
    }

    #[test]
    fn every_message_round_trips_with_the_linux_layout() {
        let b = round_trip(AuthMessage::Negotiate(Negotiate::new(3, &HashId::ALL, &DhGroup::ALL)));
        // nvme_auth_set_dhchap_negotiate_data: 8-byte header, one 64-byte descriptor.
        assert_eq!(b.len(), 72);
        assert_eq!(&b[..8], &[0, 0, 0, 0, 3, 0, 0, 1]);
        assert_eq!(&b[8..15], &[1, 0, 3, 6, 1, 2, 3]);
        assert_eq!(&b[42..48], &[0, 1, 2, 3, 4, 5]);
        let b = round_trip(AuthMessage::Challenge(Challenge {
            t_id: 3,
            hash: HashId::SHA384,
            dhgroup: DhGroup::NULL,
            seqnum: 0x01020304,
            challenge: vec![0xAA; 48],
            dh_value: vec![],
        }));
        assert_eq!(&b[..16], &[1, 1, 0, 0, 3, 0, 48, 0, 2, 0, 0, 0, 4, 3, 2, 1]);
        let b = round_trip(AuthMessage::Reply(Reply {
            t_id: 3,
            seqnum: 9,
            response: vec![1; 32],
            challenge: None,
            dh_value: vec![7; 256],
        }));
        // The challenge field is there (zeroed) without CVALID.
        assert_eq!(b.len(), 16 + 64 + 256);
        assert_eq!((b[6], b[8], le16(&b, 10)), (32, 0, 256));
        round_trip(AuthMessage::Reply(Reply {
            t_id: 3,
            seqnum: 9,
            response: vec![1; 32],
            challenge: Some(vec![2; 32]),
            dh_value: vec![],
        }));
        round_trip(AuthMessage::Success1(Success1 { t_id: 3, hl: 64, response: Some(vec![5; 64]) }));
        let b = round_trip(AuthMessage::Success1(Success1 { t_id: 3, hl: 64, response: None }));
        assert_eq!(b.len(), 16);
        round_trip(AuthMessage::Success2(3));
        let b = round_trip(AuthMessage::Failure1(Failure::new(3, FailureReason::FAILED)));
        assert_eq!(b, [0, 0xF1, 0, 0, 3, 0, 1, 1]);
        round_trip(AuthMessage::Failure2(Failure::new(3, FailureReason::HASH_UNUSABLE)));
    }

    #[test]
    fn odd_messages_get_nvmets_explanations() {
        assert_eq!(AuthMessage::decode(&[0; 4]), Err(FailureReason::INCORRECT_PAYLOAD));
        // A negotiation without its descriptor.
        assert_eq!(AuthMessage::decode(&[0; 8]), Err(FailureReason::INCORRECT_PAYLOAD));
        let mut neg = AuthMessage::Negotiate(Negotiate::new(1, &HashId::ALL, &DhGroup::ALL)).encode();
        neg[10] = 31;
        assert_eq!(AuthMessage::decode(&neg), Err(FailureReason::INCORRECT_PAYLOAD));
        // A reply whose HL and DHVLEN run past the data.
        let reply = AuthMessage::Reply(Reply {
            t_id: 1,
            seqnum: 0,
            response: vec![1; 32],
            challenge: None,
            dh_value: vec![],
        });
        let b = reply.encode();
        assert_eq!(AuthMessage::decode(&b[..b.len() - 1]), Err(FailureReason::INCORRECT_PAYLOAD));
        let mut b2 = b.clone();
        b2[10] = 1;
        assert_eq!(AuthMessage::decode(&b2), Err(FailureReason::INCORRECT_PAYLOAD));
        // Unknown type or step.
        let mut b3 = b.clone();
        b3[0] = 2;
        assert_eq!(AuthMessage::decode(&b3), Err(FailureReason::INCORRECT_MESSAGE));
        b3[0] = 1;
        b3[1] = 9;
        assert_eq!(AuthMessage::decode(&b3), Err(FailureReason::INCORRECT_MESSAGE));
        // Trailing bytes (a longer transfer) are ignored.
        let mut b4 = b.clone();
        b4.extend_from_slice(&[0; 100]);
        assert_eq!(AuthMessage::decode(&b4), Ok(reply));
    }
}
