//! Typed errors of the initiator.

use std::sync::Arc;
use std::time::Duration;

use nvmeof_common::spec::SpecError;
use nvmeof_common::Status;

use crate::queue::{CommandFailure, QueueError};

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which command an NVMe status belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandInfo {
    /// Queue ID.
    pub qid: u16,
    /// Opcode.
    pub opcode: u8,
    /// Fabrics command type (when `opcode` is 0x7F).
    pub fctype: Option<u8>,
    /// Namespace ID.
    pub nsid: u32,
}

impl std::fmt::Display for CommandInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fctype {
            Some(t) => write!(f, "fabrics command {t:#04x} on queue {}", self.qid),
            None => write!(f, "opcode {:#04x} nsid {} on queue {}", self.opcode, self.nsid, self.qid),
        }
    }
}

/// Everything that can go wrong.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// The controller completed the command with a non-success status.
    #[error("NVMe status {status} for {command} (result {result:#x})")]
    Nvme {
        /// Status (SCT/SC, DNR, M, CRD).
        status: Status,
        /// CQE DW0|DW1 (e.g. IPO/IATTR of a failed Connect).
        result: u64,
        /// The failed command.
        command: CommandInfo,
    },
    /// Socket error (connect, read, write) or connection closed by the peer.
    #[error("transport error: {0}")]
    Transport(Arc<std::io::Error>),
    /// The peer broke the NVMe/TCP protocol (decode error, C2HTermReq, bad PDU sequence).
    #[error("protocol error: {0}")]
    Protocol(QueueError),
    /// A transport-level failure of one command (data digest, short read).
    #[error("command failed: {0}")]
    Command(CommandFailure),
    /// The command (or a connection step) did not finish in time.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The command was outstanding when its connection was lost and the
    /// reconnect policy does not resubmit, or it had been resubmitted after
    /// 5 losses already.
    #[error("connection lost while the command was outstanding")]
    ConnectionLost,
    /// Reconnecting failed until the controller-loss timeout (or with a
    /// do-not-retry status); the controller is gone.
    #[error("controller lost: {0}")]
    ControllerLost(Arc<str>),
    /// The controller handle was shut down.
    #[error("controller is shut down")]
    Shutdown,
    /// A data structure returned by the controller could not be decoded.
    #[error("malformed data from controller: {0}")]
    Spec(#[from] SpecError),
    /// The controller's answer is unusable (explained).
    #[error("controller misbehaved: {0}")]
    Controller(String),
    /// Invalid argument from the caller.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A [`crate::MultipathNamespace`] found no usable path within its
    /// no-path timeout (and no command had failed with a path error to
    /// report instead); says each path's state.
    #[error("{0}")]
    NoPath(Arc<str>),
}

impl Error {
    /// The NVMe status, if this is a status error.
    pub fn status(&self) -> Option<Status> {
        match self {
            Error::Nvme { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether retrying cannot help (an NVMe status with DNR, a shut down or lost controller,
    /// an invalid argument).
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::Nvme { status, .. } => status.dnr(),
            Error::ControllerLost(_) | Error::Shutdown | Error::InvalidArgument(_) => true,
            _ => false,
        }
    }

    pub(crate) fn io(e: std::io::Error) -> Self {
        Error::Transport(Arc::new(e))
    }

    pub(crate) fn closed() -> Self {
        Error::io(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed by the controller",
        ))
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::io(e)
    }
}

impl From<QueueError> for Error {
    fn from(e: QueueError) -> Self {
        Error::Protocol(e)
    }
}
