//! Decode errors: one variant per protocol violation, each mapped to the
//! TermReq Fatal Error Status and Fatal Error Information (NVMe/TCP 1.0
//! §3.6.2.x, reference §2.3).

use crate::pdu::PduType;

/// Fatal Error Status of an H2CTermReq / C2HTermReq.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Fes(pub u16);

impl Fes {
    /// Invalid PDU Header Field (FEI = byte offset of the field).
    pub const INVALID_HEADER_FIELD: Self = Self(0x01);
    /// PDU Sequence Error.
    pub const PDU_SEQUENCE: Self = Self(0x02);
    /// Header Digest Error.
    pub const HEADER_DIGEST: Self = Self(0x03);
    /// Data Transfer Out of Range.
    pub const DATA_OUT_OF_RANGE: Self = Self(0x04);
    /// Data Transfer Limit Exceeded (formerly R2T Limit Exceeded).
    pub const DATA_LIMIT_EXCEEDED: Self = Self(0x05);
    /// Unsupported Parameter (FEI = byte offset of the parameter).
    pub const UNSUPPORTED_PARAMETER: Self = Self(0x06);
}

/// Byte offsets inside a PDU used as Fatal Error Information.
pub mod field {
    /// PDU-Type.
    pub const PDU_TYPE: u32 = 0;
    /// FLAGS.
    pub const FLAGS: u32 = 1;
    /// HLEN.
    pub const HLEN: u32 = 2;
    /// PDO.
    pub const PDO: u32 = 3;
    /// PLEN.
    pub const PLEN: u32 = 4;
    /// ICReq PFV.
    pub const PFV: u32 = 8;
    /// ICReq HPDA / ICResp CPDA.
    pub const PDA: u32 = 10;
    /// ICReq/ICResp DGST.
    pub const DGST: u32 = 11;
    /// ICReq MAXR2T / ICResp MAXH2CDATA.
    pub const MAXR2T: u32 = 12;
    /// Data PDU DATAO.
    pub const DATAO: u32 = 12;
    /// Data PDU DATAL.
    pub const DATAL: u32 = 16;
}

/// Everything that can be wrong with bytes handed to the decoder.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// PDU-Type is not one of the nine defined types.
    #[error("unknown PDU type {0:#04x}")]
    UnknownPduType(u8),
    /// A defined type that this side never receives (e.g. R2T at the controller).
    #[error("PDU type {0:?} not accepted in this direction")]
    UnexpectedPduType(PduType),
    /// HLEN is not the fixed length of the type.
    #[error("HLEN {hlen} invalid for {pdu_type:?}")]
    InvalidHlen {
        /// PDU type.
        pdu_type: PduType,
        /// Received HLEN.
        hlen: u8,
    },
    /// PLEN shorter than the header, or not the exact length of a data-less PDU.
    #[error("PLEN {plen} invalid for {pdu_type:?}")]
    InvalidPlen {
        /// PDU type.
        pdu_type: PduType,
        /// Received PLEN.
        plen: u32,
    },
    /// PDO inside the header, beyond PLEN, misaligned, or set on a PDU without data.
    #[error("PDO {pdo} invalid for {pdu_type:?}")]
    InvalidPdo {
        /// PDU type.
        pdu_type: PduType,
        /// Received PDO.
        pdo: u8,
    },
    /// Header digest negotiated but HDGSTF clear.
    #[error("header digest negotiated but HDGSTF clear on {0:?}")]
    MissingHeaderDigest(PduType),
    /// HDGSTF set although header digests were not negotiated or the type never has one.
    #[error("HDGSTF set without negotiated header digest on {0:?}")]
    UnexpectedHeaderDigest(PduType),
    /// Data digest negotiated, data present, DDGSTF clear.
    #[error("data digest negotiated but DDGSTF clear on {0:?}")]
    MissingDataDigest(PduType),
    /// DDGSTF set although data digests were not negotiated, or on a PDU without data.
    #[error("DDGSTF set without negotiated data digest on {0:?}")]
    UnexpectedDataDigest(PduType),
    /// A flag combination the spec forbids (e.g. SUCCESS without LAST_PDU).
    #[error("invalid flags {flags:#04x} on {pdu_type:?}")]
    InvalidFlags {
        /// PDU type.
        pdu_type: PduType,
        /// Received FLAGS.
        flags: u8,
    },
    /// HDGST does not match the header.
    #[error("header digest mismatch on {pdu_type:?}: received {received:#010x}, computed {computed:#010x}")]
    HeaderDigest {
        /// PDU type.
        pdu_type: PduType,
        /// Digest on the wire.
        received: u32,
        /// Digest computed over the header.
        computed: u32,
    },
    /// DDGST does not match the data. The PDU was consumed whole, so the stream
    /// stays in sync: a host may fail just the command (CID given), a target may
    /// terminate the connection.
    #[error("data digest mismatch on {pdu_type:?} (command {cccid:#06x}): received {received:#010x}, computed {computed:#010x}")]
    DataDigest {
        /// PDU type.
        pdu_type: PduType,
        /// CID of the command the data belongs to (CapsuleCmd CID, or CCCID).
        cccid: u16,
        /// Digest on the wire.
        received: u32,
        /// Digest computed over the data.
        computed: u32,
    },
    /// DATAL disagrees with the data length implied by PLEN and PDO.
    #[error("DATAL {datal} but PDU carries {actual} data bytes ({pdu_type:?})")]
    DataLengthMismatch {
        /// PDU type.
        pdu_type: PduType,
        /// DATAL field.
        datal: u32,
        /// Bytes between PDO and the end (less DDGST).
        actual: u32,
    },
    /// A data PDU with DATAL 0.
    #[error("zero-length data in {0:?}")]
    EmptyData(PduType),
    /// More data than the negotiated maximum (MAXH2CDATA, in-capsule size, ...).
    #[error("{pdu_type:?} carries {len} data bytes, limit {max}")]
    DataTooLong {
        /// PDU type.
        pdu_type: PduType,
        /// Data length announced.
        len: u32,
        /// Negotiated maximum.
        max: u32,
    },
    /// ICReq/ICResp PFV is not 0 (format version 1.0).
    #[error("unsupported PDU format version {0}")]
    UnsupportedPfv(u16),
    /// HPDA/CPDA above 31 or not supported by this side.
    #[error("unsupported PDU data alignment {0}")]
    UnsupportedPda(u8),
    /// An ICResp the host cannot accept (reason given).
    #[error("unacceptable ICResp: {0}")]
    InvalidIcResp(&'static str),
    /// DGST has reserved bits set (ICReq) or differs from the request (ICResp).
    #[error("invalid DGST field {0:#04x}")]
    InvalidDigestField(u8),
}

impl DecodeError {
    /// Fatal Error Status to put in the TermReq answering this error.
    pub fn fes(&self) -> Fes {
        use DecodeError::*;
        match self {
            HeaderDigest { .. } => Fes::HEADER_DIGEST,
            // No FES exists for data digests; SPDK reports HDGST_ERROR when it
            // terminates a queue for a data digest error, and we follow it.
            DataDigest { .. } => Fes::HEADER_DIGEST,
            DataTooLong { .. } => Fes::DATA_LIMIT_EXCEEDED,
            _ => Fes::INVALID_HEADER_FIELD,
        }
    }

    /// Fatal Error Information: byte offset of the offending field where the FES calls for one.
    pub fn fei(&self) -> u32 {
        use DecodeError::*;
        match self {
            UnknownPduType(_) | UnexpectedPduType(_) => field::PDU_TYPE,
            InvalidHlen { .. } => field::HLEN,
            InvalidPlen { .. } => field::PLEN,
            InvalidPdo { .. } => field::PDO,
            MissingHeaderDigest(_)
            | UnexpectedHeaderDigest(_)
            | MissingDataDigest(_)
            | UnexpectedDataDigest(_)
            | InvalidFlags { .. } => field::FLAGS,
            DataLengthMismatch { .. } | EmptyData(_) => field::DATAL,
            UnsupportedPfv(_) => field::PFV,
            UnsupportedPda(_) => field::PDA,
            InvalidDigestField(_) => field::DGST,
            InvalidIcResp(_) => field::MAXR2T,
            HeaderDigest { .. } | DataDigest { .. } | DataTooLong { .. } => 0,
        }
    }

    /// False only for a data digest error, after which the byte stream is still in sync.
    pub fn is_fatal(&self) -> bool {
        !matches!(self, DecodeError::DataDigest { .. })
    }
}
