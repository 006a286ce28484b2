//! NVMe/TCP PDUs (NVMe/TCP 1.0 §3.6; reference §1).
//!
//! Every PDU starts with the 8-byte [`CommonHeader`], followed by the
//! type-specific header (together HLEN bytes), an optional header digest,
//! padding up to PDO, the data and an optional data digest:
//!
//! ```text
//! | CH+PSH (HLEN) | HDGST (4, opt) | PAD | DATA | DDGST (4, opt) |
//! 0               HLEN                   PDO                     PLEN
//! ```
//!
//! One module per PDU type. Encoding writes the header (with digest and
//! padding) into a caller-provided `BytesMut` and returns the payload as
//! [`DataTail`], so the payload is never copied: a driver hands
//! `[header, data, ddgst]` to one vectored write.

mod c2h_data;
mod capsule_cmd;
mod capsule_resp;
mod h2c_data;
mod ic_req;
mod ic_resp;
mod r2t;
mod term_req;

pub use c2h_data::C2hData;
pub use capsule_cmd::CapsuleCmd;
pub use capsule_resp::CapsuleResp;
pub use h2c_data::H2cData;
pub use ic_req::{DigestFlags, IcReq};
pub use ic_resp::IcResp;
pub use r2t::R2t;
pub use term_req::{TermReq, TERM_REQ_MAX_DATA};

use bytes::{BufMut, Bytes, BytesMut};

use crate::digest::{crc32c, DIGEST_LEN};
use crate::error::DecodeError;

/// Length of the common header.
pub const CH_LEN: usize = 8;

/// PDU-Type (CH byte 0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct PduType(pub u8);

impl PduType {
    /// Initialize Connection Request.
    pub const IC_REQ: Self = Self(0x00);
    /// Initialize Connection Response.
    pub const IC_RESP: Self = Self(0x01);
    /// Host to Controller Terminate Connection Request.
    pub const H2C_TERM_REQ: Self = Self(0x02);
    /// Controller to Host Terminate Connection Request.
    pub const C2H_TERM_REQ: Self = Self(0x03);
    /// Command Capsule.
    pub const CAPSULE_CMD: Self = Self(0x04);
    /// Response Capsule.
    pub const CAPSULE_RESP: Self = Self(0x05);
    /// Host to Controller Data.
    pub const H2C_DATA: Self = Self(0x06);
    /// Controller to Host Data.
    pub const C2H_DATA: Self = Self(0x07);
    /// Ready to Transfer.
    pub const R2T: Self = Self(0x09);

    /// Fixed HLEN of the type, `None` for an undefined type.
    pub const fn hlen(self) -> Option<u8> {
        match self.0 {
            0x00 | 0x01 => Some(128),
            0x02 | 0x03 | 0x05 | 0x06 | 0x07 | 0x09 => Some(24),
            0x04 => Some(72),
            _ => None,
        }
    }
    /// Whether a header digest follows the header when negotiated (reference §1.2).
    pub const fn has_header_digest(self) -> bool {
        matches!(self.0, 0x04..=0x07 | 0x09)
    }
    /// Whether the type may carry data covered by a data digest.
    pub const fn has_data_digest(self) -> bool {
        matches!(self.0, 0x04 | 0x06 | 0x07)
    }
    /// Whether the type travels host to controller.
    pub const fn is_h2c(self) -> bool {
        matches!(self.0, 0x00 | 0x02 | 0x04 | 0x06)
    }
}

/// FLAGS (CH byte 1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct PduFlags(pub u8);

impl PduFlags {
    /// A header digest follows the header.
    pub const HDGSTF: u8 = 1 << 0;
    /// A data digest follows the data.
    pub const DDGSTF: u8 = 1 << 1;
    /// Last data PDU of the transfer (H2C: of the current R2T).
    pub const LAST_PDU: u8 = 1 << 2;
    /// C2HData only: the command completed successfully, no CapsuleResp follows.
    pub const SUCCESS: u8 = 1 << 3;

    /// Whether all bits of `mask` are set.
    pub const fn has(self, mask: u8) -> bool {
        self.0 & mask == mask
    }
}

/// The 8-byte common header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct CommonHeader {
    /// PDU-Type.
    pub pdu_type: PduType,
    /// FLAGS.
    pub flags: PduFlags,
    /// Header length (CH + PSH, without digest and padding).
    pub hlen: u8,
    /// PDU data offset (0 when no data).
    pub pdo: u8,
    /// Total PDU length.
    pub plen: u32,
}

impl CommonHeader {
    /// Decodes the first 8 bytes of `b`. Panics if `b` is shorter.
    pub fn decode(b: &[u8]) -> Self {
        Self {
            pdu_type: PduType(b[0]),
            flags: PduFlags(b[1]),
            hlen: b[2],
            pdo: b[3],
            plen: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
    /// Encodes into 8 bytes.
    pub fn encode(&self) -> [u8; CH_LEN] {
        let p = self.plen.to_le_bytes();
        [self.pdu_type.0, self.flags.0, self.hlen, self.pdo, p[0], p[1], p[2], p[3]]
    }
}

/// Negotiated per-connection parameters that shape encoded PDUs (reference §2.2).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct EncodeConfig {
    /// Header digests negotiated.
    pub hdgst: bool,
    /// Data digests negotiated.
    pub ddgst: bool,
    /// Data alignment the receiver asked for (HPDA for C2H, CPDA for H2C): (pda+1)*4 bytes.
    pub pda: u8,
}

/// The payload part of an encoded PDU: the data (shared, not copied) and its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataTail {
    /// Data bytes, to be written right after the header.
    pub data: Bytes,
    /// Data digest (little-endian wire bytes), written after the data.
    pub ddgst: Option<[u8; DIGEST_LEN]>,
}

/// [`DataTail`] with the data digest left to the caller ([`Pdu::encode_deferred`]):
/// a sender can compute it right before the payload goes to the socket, while
/// the payload is still in the CPU cache for the socket copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeferredTail {
    /// Data bytes, to be written right after the header.
    pub data: Bytes,
    /// Whether a data digest (`crc32c(&data)`, little-endian) follows the data.
    pub ddgst: bool,
}

/// A decoded or to-be-encoded PDU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pdu {
    /// ICReq.
    IcReq(IcReq),
    /// ICResp.
    IcResp(IcResp),
    /// H2CTermReq.
    H2cTermReq(TermReq),
    /// C2HTermReq.
    C2hTermReq(TermReq),
    /// CapsuleCmd.
    CapsuleCmd(CapsuleCmd),
    /// CapsuleResp.
    CapsuleResp(CapsuleResp),
    /// H2CData.
    H2cData(H2cData),
    /// C2HData.
    C2hData(C2hData),
    /// R2T.
    R2t(R2t),
}

/// What a PDU type module provides to the shared encoder/decoder.
pub(crate) trait PduBody: Sized {
    /// PDU type.
    const TYPE: PduType;
    /// Fixed HLEN.
    const HLEN: usize;
    /// Type-specific flag bits (LAST_PDU, SUCCESS); digest flags are added by the encoder.
    fn type_flags(&self) -> u8 {
        0
    }
    /// Writes the type-specific fields into `hdr` (the whole HLEN bytes, CH
    /// already filled; offsets are from the PDU start as in the spec).
    fn write_psh(&self, hdr: &mut [u8]);
    /// The data carried (empty if none).
    fn data(&self) -> &Bytes;
    /// Builds the PDU from a validated header and its data.
    fn from_parts(ch: &CommonHeader, header: &[u8], data: Bytes) -> Result<Self, DecodeError>;
}

/// Computes PDO for a data PDU: `round_up(HLEN + hdgst, (pda+1)*4)` (reference §1.5).
pub const fn data_offset(hlen: usize, hdgst: bool, pda: u8) -> usize {
    let base = hlen + if hdgst { DIGEST_LEN } else { 0 };
    let align = (pda as usize + 1) * 4;
    base.div_ceil(align) * align
}

/// Shared encoder: header, digests, padding and PLEN for any PDU body.
pub(crate) fn encode_body<P: PduBody>(p: &P, cfg: &EncodeConfig, dst: &mut BytesMut) -> Option<DeferredTail> {
    let hdgst = cfg.hdgst && P::TYPE.has_header_digest();
    let data = p.data();
    let dlen = data.len();
    let ddgst = cfg.ddgst && P::TYPE.has_data_digest() && dlen > 0;
    let hd = if hdgst { DIGEST_LEN } else { 0 };
    // TermReq error data directly follows the 24-byte header with PDO 0, as the
    // Linux host reads it and SPDK sends it (reference §2.3).
    let is_term = matches!(P::TYPE, PduType::H2C_TERM_REQ | PduType::C2H_TERM_REQ);
    let pdo = if dlen == 0 || is_term { 0 } else { data_offset(P::HLEN, hdgst, cfg.pda) };
    let data_start = if is_term {
        P::HLEN
    } else if dlen == 0 {
        P::HLEN + hd
    } else {
        pdo
    };
    let plen = data_start + dlen + if ddgst { DIGEST_LEN } else { 0 };
    let mut flags = p.type_flags();
    if hdgst {
        flags |= PduFlags::HDGSTF;
    }
    if ddgst {
        flags |= PduFlags::DDGSTF;
    }
    let ch = CommonHeader {
        pdu_type: P::TYPE,
        flags: PduFlags(flags),
        hlen: P::HLEN as u8,
        pdo: pdo as u8,
        plen: plen as u32,
    };
    let start = dst.len();
    dst.reserve(data_start);
    dst.put_slice(&ch.encode());
    dst.put_bytes(0, P::HLEN - CH_LEN);
    p.write_psh(&mut dst[start..start + P::HLEN]);
    if hdgst {
        let d = crc32c(&dst[start..start + P::HLEN]);
        dst.put_u32_le(d);
    }
    // Zero padding between header(+digest) and PDO.
    dst.put_bytes(0, data_start - (P::HLEN + hd));
    if dlen == 0 {
        return None;
    }
    Some(DeferredTail { data: data.clone(), ddgst })
}

impl Pdu {
    /// PDU type of this PDU.
    pub fn pdu_type(&self) -> PduType {
        match self {
            Pdu::IcReq(_) => PduType::IC_REQ,
            Pdu::IcResp(_) => PduType::IC_RESP,
            Pdu::H2cTermReq(_) => PduType::H2C_TERM_REQ,
            Pdu::C2hTermReq(_) => PduType::C2H_TERM_REQ,
            Pdu::CapsuleCmd(_) => PduType::CAPSULE_CMD,
            Pdu::CapsuleResp(_) => PduType::CAPSULE_RESP,
            Pdu::H2cData(_) => PduType::H2C_DATA,
            Pdu::C2hData(_) => PduType::C2H_DATA,
            Pdu::R2t(_) => PduType::R2T,
        }
    }

    /// Appends the header (common header, PDU header, header digest, padding)
    /// to `dst` and returns the data to send after it, if any. The data is a
    /// reference-counted clone, not a copy.
    pub fn encode(&self, cfg: &EncodeConfig, dst: &mut BytesMut) -> Option<DataTail> {
        let t = self.encode_deferred(cfg, dst)?;
        let ddgst = t.ddgst.then(|| crc32c(&t.data).to_le_bytes());
        Some(DataTail { data: t.data, ddgst })
    }

    /// [`Self::encode`] without computing the data digest: the header (with
    /// DDGSTF and a PLEN that counts the digest) goes to `dst`, and the caller
    /// writes `crc32c(&data)` after the data.
    pub fn encode_deferred(&self, cfg: &EncodeConfig, dst: &mut BytesMut) -> Option<DeferredTail> {
        match self {
            Pdu::H2cTermReq(t) => encode_body(&term_req::H2c(t), cfg, dst),
            Pdu::C2hTermReq(t) => encode_body(&term_req::C2h(t), cfg, dst),
            Pdu::IcReq(p) => encode_body(p, cfg, dst),
            Pdu::IcResp(p) => encode_body(p, cfg, dst),
            Pdu::CapsuleCmd(p) => encode_body(p, cfg, dst),
            Pdu::CapsuleResp(p) => encode_body(p, cfg, dst),
            Pdu::H2cData(p) => encode_body(p, cfg, dst),
            Pdu::C2hData(p) => encode_body(p, cfg, dst),
            Pdu::R2t(p) => encode_body(p, cfg, dst),
        }
    }

    /// Encodes the whole PDU into one contiguous buffer (copies the data; for
    /// tests, small PDUs and tools).
    pub fn encode_to_vec(&self, cfg: &EncodeConfig) -> Vec<u8> {
        let mut dst = BytesMut::with_capacity(self.wire_len_hint());
        if let Some(tail) = self.encode(cfg, &mut dst) {
            dst.extend_from_slice(&tail.data);
            if let Some(d) = tail.ddgst {
                dst.extend_from_slice(&d);
            }
        }
        dst.to_vec()
    }

    fn wire_len_hint(&self) -> usize {
        self.data().len() + 160
    }

    /// The data payload (empty for PDUs without data).
    pub fn data(&self) -> &Bytes {
        match self {
            Pdu::H2cTermReq(t) | Pdu::C2hTermReq(t) => &t.data,
            Pdu::CapsuleCmd(p) => &p.data,
            Pdu::H2cData(p) => &p.data,
            Pdu::C2hData(p) => &p.data,
            _ => &EMPTY,
        }
    }
}

/// Shared empty payload for PDU types without data.
pub(crate) static EMPTY: Bytes = Bytes::new();

/// Decodes one complete PDU from `frame` (exactly PLEN bytes) after the
/// streaming decoder has validated the common header and digests: splits off
/// header and data (zero-copy) and builds the typed PDU.
pub(crate) fn decode_frame(
    ch: &CommonHeader,
    frame: &Bytes,
    data_start: usize,
    data_len: usize,
) -> Result<Pdu, DecodeError> {
    let header = &frame[..ch.hlen as usize];
    let data = if data_len == 0 { Bytes::new() } else { frame.slice(data_start..data_start + data_len) };
    Ok(match ch.pdu_type {
        PduType::IC_REQ => Pdu::IcReq(IcReq::from_parts(ch, header, data)?),
        PduType::IC_RESP => Pdu::IcResp(IcResp::from_parts(ch, header, data)?),
        PduType::H2C_TERM_REQ => Pdu::H2cTermReq(TermReq::decode(header, data)),
        PduType::C2H_TERM_REQ => Pdu::C2hTermReq(TermReq::decode(header, data)),
        PduType::CAPSULE_CMD => Pdu::CapsuleCmd(CapsuleCmd::from_parts(ch, header, data)?),
        PduType::CAPSULE_RESP => Pdu::CapsuleResp(CapsuleResp::from_parts(ch, header, data)?),
        PduType::H2C_DATA => Pdu::H2cData(H2cData::from_parts(ch, header, data)?),
        PduType::C2H_DATA => Pdu::C2hData(C2hData::from_parts(ch, header, data)?),
        PduType::R2T => Pdu::R2t(R2t::from_parts(ch, header, data)?),
        other => return Err(DecodeError::UnknownPduType(other.0)),
    })
}

macro_rules! from_variant {
    ($($t:ident => $v:ident),*) => {
        $(impl From<$t> for Pdu {
            fn from(p: $t) -> Self {
                Pdu::$v(p)
            }
        })*
    };
}
from_variant!(IcReq => IcReq, IcResp => IcResp, CapsuleCmd => CapsuleCmd, CapsuleResp => CapsuleResp,
    H2cData => H2cData, C2hData => C2hData, R2t => R2t);

/// DATAL must equal the bytes actually carried (Linux `nvmet_tcp_handle_h2c_data_pdu`
/// checks `DATAL == PLEN - HLEN - digests`).
pub(crate) fn check_datal(ch: &CommonHeader, datal: u32, actual: usize) -> Result<(), DecodeError> {
    if datal as usize != actual {
        return Err(DecodeError::DataLengthMismatch { pdu_type: ch.pdu_type, datal, actual: actual as u32 });
    }
    if actual == 0 {
        return Err(DecodeError::EmptyData(ch.pdu_type));
    }
    Ok(())
}

pub(crate) fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

pub(crate) fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

pub(crate) fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests;
