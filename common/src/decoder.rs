//! Streaming PDU decoder over a receive buffer (reference §1.7).
//!
//! The driver appends socket bytes to a `BytesMut` and calls
//! [`PduDecoder::decode`] until it answers `Ok(None)` ("not yet"). The common
//! header is validated as soon as its 8 bytes are present, so an over-long or
//! malformed PDU is rejected before its body is buffered. A complete PDU is
//! split off the buffer and frozen, and its data is handed out as a `Bytes`
//! slice of that same allocation: no copy.

use bytes::{Bytes, BytesMut};

use crate::digest::{crc32c, DIGEST_LEN};
use crate::error::DecodeError;
use crate::pdu::{self, CommonHeader, Pdu, PduFlags, PduType, CH_LEN, TERM_REQ_MAX_DATA};

/// Which side of the connection is decoding.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// The controller (target) receives ICReq, H2CTermReq, CapsuleCmd, H2CData.
    Controller,
    /// The host receives ICResp, C2HTermReq, CapsuleResp, C2HData, R2T.
    Host,
}

/// Negotiated receive parameters.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct DecoderConfig {
    /// Our side.
    pub role: Role,
    /// Header digests negotiated (false until ICReq/ICResp are exchanged).
    pub hdgst: bool,
    /// Data digests negotiated.
    pub ddgst: bool,
    /// Data alignment we asked the peer for ((pda+1)*4 bytes): CPDA at a controller, HPDA at a host.
    pub pda: u8,
    /// Most in-capsule data bytes accepted in one CapsuleCmd.
    pub max_capsule_data: u32,
    /// Most data bytes accepted in one H2CData / C2HData PDU (MAXH2CDATA at a controller).
    pub max_data_pdu: u32,
}

impl DecoderConfig {
    /// Defaults for a fresh connection at `role`: no digests, alignment 0, 1 MiB limits.
    pub fn new(role: Role) -> Self {
        Self { role, hdgst: false, ddgst: false, pda: 0, max_capsule_data: 1 << 20, max_data_pdu: 1 << 20 }
    }
}

/// Where the parts of a PDU lie, from its validated common header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct FrameLayout {
    /// The common header.
    pub ch: CommonHeader,
    /// Whether a header digest follows HLEN.
    pub hdgst: bool,
    /// Offset of the data from the PDU start.
    pub data_start: usize,
    /// Data bytes.
    pub data_len: usize,
    /// Whether a data digest follows the data.
    pub ddgst: bool,
}

/// Streaming decoder for one connection.
#[derive(Clone, Debug)]
pub struct PduDecoder {
    cfg: DecoderConfig,
}

impl PduDecoder {
    /// A decoder with the given parameters.
    pub fn new(cfg: DecoderConfig) -> Self {
        Self { cfg }
    }

    /// Current parameters.
    pub fn config(&self) -> &DecoderConfig {
        &self.cfg
    }

    /// Replaces the parameters (after ICReq/ICResp negotiation).
    pub fn set_config(&mut self, cfg: DecoderConfig) {
        self.cfg = cfg;
    }

    /// Validates a common header against the negotiated parameters and
    /// computes the PDU layout (reference §1.2–1.5, §1.7 steps 1–4).
    pub fn layout(&self, ch: &CommonHeader) -> Result<FrameLayout, DecodeError> {
        let ty = ch.pdu_type;
        let hlen = ty.hlen().ok_or(DecodeError::UnknownPduType(ty.0))? as usize;
        if ty.is_h2c() != (self.cfg.role == Role::Controller) {
            return Err(DecodeError::UnexpectedPduType(ty));
        }
        if ch.hlen as usize != hlen {
            return Err(DecodeError::InvalidHlen { pdu_type: ty, hlen: ch.hlen });
        }
        let hdgst = self.cfg.hdgst && ty.has_header_digest();
        match (ch.flags.has(PduFlags::HDGSTF), hdgst) {
            (true, false) => return Err(DecodeError::UnexpectedHeaderDigest(ty)),
            (false, true) => return Err(DecodeError::MissingHeaderDigest(ty)),
            _ => {}
        }
        let hdr_len = hlen + if hdgst { DIGEST_LEN } else { 0 };
        let plen = ch.plen as usize;
        let bad_plen = || DecodeError::InvalidPlen { pdu_type: ty, plen: ch.plen };
        let bad_pdo = || DecodeError::InvalidPdo { pdu_type: ty, pdo: ch.pdo };
        let ddgst_flag = ch.flags.has(PduFlags::DDGSTF);

        // TermReq: error data right after the 24-byte header, PLEN 24..=152, no digests.
        if matches!(ty, PduType::H2C_TERM_REQ | PduType::C2H_TERM_REQ) {
            if !(hlen..=hlen + TERM_REQ_MAX_DATA).contains(&plen) {
                return Err(bad_plen());
            }
            if ddgst_flag {
                return Err(DecodeError::UnexpectedDataDigest(ty));
            }
            return Ok(FrameLayout {
                ch: *ch,
                hdgst: false,
                data_start: hlen,
                data_len: plen - hlen,
                ddgst: false,
            });
        }

        let no_data = FrameLayout { ch: *ch, hdgst, data_start: hdr_len, data_len: 0, ddgst: false };
        let may_carry_data = ty.has_data_digest();
        if !may_carry_data || (ty == PduType::CAPSULE_CMD && plen == hdr_len) {
            if plen != hdr_len {
                return Err(bad_plen());
            }
            if ch.pdo != 0 {
                return Err(bad_pdo());
            }
            if ddgst_flag {
                return Err(DecodeError::UnexpectedDataDigest(ty));
            }
            return Ok(no_data);
        }

        // Data PDUs: PDO after header+digest, aligned, inside PLEN.
        let pdo = ch.pdo as usize;
        let align = (self.cfg.pda as usize + 1) * 4;
        if pdo < hdr_len || !pdo.is_multiple_of(align) || pdo >= plen {
            return Err(if plen < hdr_len { bad_plen() } else { bad_pdo() });
        }
        let ddgst = self.cfg.ddgst;
        match (ddgst_flag, ddgst) {
            (true, false) => return Err(DecodeError::UnexpectedDataDigest(ty)),
            (false, true) => return Err(DecodeError::MissingDataDigest(ty)),
            _ => {}
        }
        let dd = if ddgst { DIGEST_LEN } else { 0 };
        if plen < pdo + dd + 1 {
            return Err(bad_plen());
        }
        let data_len = plen - pdo - dd;
        let max = if ty == PduType::CAPSULE_CMD { self.cfg.max_capsule_data } else { self.cfg.max_data_pdu };
        if data_len > max as usize {
            return Err(DecodeError::DataTooLong { pdu_type: ty, len: data_len as u32, max });
        }
        Ok(FrameLayout { ch: *ch, hdgst, data_start: pdo, data_len, ddgst })
    }

    /// Decodes the next whole PDU from the front of `buf`.
    ///
    /// Returns `Ok(None)` while the PDU is incomplete (after reserving room
    /// for the rest of it), `Ok(Some(pdu))` after consuming it, or an error.
    /// Header errors leave `buf` untouched (the stream cannot be resynchronised;
    /// the caller terminates the connection). A data digest error consumes the
    /// PDU, so the caller may fail just that command and go on.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Pdu>, DecodeError> {
        if buf.len() < CH_LEN {
            return Ok(None);
        }
        let ch = CommonHeader::decode(&buf[..CH_LEN]);
        let layout = self.layout(&ch)?;
        let plen = ch.plen as usize;
        if buf.len() < plen {
            buf.reserve(plen - buf.len());
            return Ok(None);
        }
        let frame = buf.split_to(plen).freeze();
        match check_and_decode(&layout, &frame) {
            Ok(pdu) => Ok(Some(pdu)),
            Err(e) if e.is_fatal() => {
                // A header error found once the PDU was whole (header digest,
                // DATAL) leaves it in `buf` too, as promised above: the target
                // quotes that header in its C2HTermReq, which otherwise quoted
                // the next PDU's bytes, or just the 8-byte common header.
                let rest = std::mem::take(buf);
                buf.reserve(frame.len() + rest.len());
                buf.extend_from_slice(&frame);
                buf.extend_from_slice(&rest);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }
}

/// Decodes a complete frame (exactly PLEN bytes) whose layout was validated:
/// checks the header digest, builds the PDU, then checks the data digest.
pub fn decode_frame(layout: &FrameLayout, frame: Bytes) -> Result<Pdu, DecodeError> {
    check_and_decode(layout, &frame)
}

fn check_and_decode(layout: &FrameLayout, frame: &Bytes) -> Result<Pdu, DecodeError> {
    let ch = &layout.ch;
    let hlen = ch.hlen as usize;
    if layout.hdgst {
        let received = pdu::le32(frame, hlen);
        let computed = crc32c(&frame[..hlen]);
        if received != computed {
            return Err(DecodeError::HeaderDigest { pdu_type: ch.pdu_type, received, computed });
        }
    }
    let ddgst = layout.ddgst.then(|| pdu::le32(frame, layout.data_start + layout.data_len));
    let pdu = pdu::decode_frame(ch, frame, layout.data_start, layout.data_len)?;
    if let Some(received) = ddgst {
        let computed = crc32c(pdu.data());
        if received != computed {
            let cccid = match &pdu {
                Pdu::CapsuleCmd(c) => c.sqe.cid(),
                Pdu::H2cData(d) => d.cccid,
                Pdu::C2hData(d) => d.cccid,
                _ => 0,
            };
            return Err(DecodeError::DataDigest { pdu_type: ch.pdu_type, cccid, received, computed });
        }
    }
    Ok(pdu)
}
