//! Sans-IO NVMe/TCP codec shared by the nvmeof target and initiator.
//!
//! # Layout
//! - [`pdu`]: the nine NVMe/TCP PDU types (one module each), the [`pdu::Pdu`]
//!   enum, flags, the common header, and encoders that emit header bytes plus
//!   the payload [`bytes::Bytes`] for vectored writes.
//! - [`decoder`]: streaming decoder over a `BytesMut` receive buffer; answers
//!   `Ok(None)` until a whole PDU (with digests) is buffered, verifies digests,
//!   and hands payloads out as zero-copy `Bytes` slices.
//! - [`digest`]: CRC32C header/data digests (hardware accelerated).
//! - [`error`]: one [`error::DecodeError`] variant per protocol violation, each
//!   mapped to the TermReq fatal error status and offset.
//! - [`sqe`], [`cqe`], [`status`], [`opcode`]: NVMe command and completion
//!   entries, status codes and opcodes as newtypes with named constants.
//! - [`auth`]: DH-HMAC-CHAP in-band authentication (messages, secrets, HMACs, FFDHE).
//! - [`spec`]: fabrics Connect, properties, Identify, log pages, discovery log,
//!   features, DSM ranges, NQN rules.
//!
//! Data flows: socket bytes → [`decoder::PduDecoder`] → [`pdu::Pdu`] →
//! (target/initiator state machines) → [`pdu::Pdu`] encoders → socket.
#![deny(missing_docs)]

pub mod auth;
pub mod cqe;
pub mod decoder;
pub mod digest;
pub mod error;
pub mod opcode;
pub mod out;
pub mod pdu;
pub mod spec;
pub mod sqe;
pub mod status;

pub use cqe::Cqe;
pub use decoder::{DecoderConfig, PduDecoder};
pub use error::DecodeError;
pub use pdu::Pdu;
pub use sqe::{SglDescriptor, SglId, Sqe};
pub use status::Status;
