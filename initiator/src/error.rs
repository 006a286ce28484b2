//! Typed errors of the initiator.

use std::sync::Arc;
use std::time::Duration;

use nvmeof_common::auth::FailureReason;
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
    /// DH-HMAC-CHAP in-band authentication on queue `qid` failed, or could
    /// not run (see [`AuthError`]). Permanent (no reconnect loop), as for
    /// the Linux host (`nvmf_should_reconnect` gives up on `-EKEYREJECTED`
    /// and `-ENOKEY`), except an NVMe status without DNR.
    #[error("qid {qid}: authentication failed: {reason}")]
    Auth {
        /// The queue that was authenticating.
        qid: u16,
        /// What went wrong.
        reason: AuthError,
    },
}

/// Why DH-HMAC-CHAP authentication of a queue failed ([`Error::Auth`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The Connect response asked for authentication (AUTHREQ.ATR) but
    /// [`ConnectOptions::dhchap_secret`](crate::ConnectOptions::dhchap_secret)
    /// is not set (Linux: "qid N: no key", `-ENOKEY`).
    #[error("the controller requires authentication but no key was given (ConnectOptions::dhchap_secret)")]
    NoKey,
    /// The Connect response asked for secure channel concatenation
    /// (AUTHREQ.ASCR), which needs TLS; not supported (Linux refuses it too).
    #[error("the controller requires secure channel concatenation, which is not supported")]
    ConcatenationRequired,
    /// The controller ended the exchange with AUTH_Failure1: it did not accept
    /// the host's response (a wrong `dhchap_secret`) or could not use what the
    /// host offered.
    #[error("the controller refused: {0}")]
    Refused(FailureReason),
    /// The controller's message was not the expected one or unusable
    /// (explained); the host sent AUTH_Failure2 with `sent` where Linux does.
    #[error("{what}{}", sent.map(|r| format!(" (AUTH_Failure2 sent: {r})")).unwrap_or_default())]
    Protocol {
        /// What was wrong.
        what: String,
        /// The explanation of the AUTH_Failure2 the host sent, if it sent one.
        sent: Option<FailureReason>,
    },
    /// Bidirectional authentication: the controller's response R2 does not
    /// match [`ConnectOptions::dhchap_ctrl_secret`](crate::ConnectOptions::dhchap_ctrl_secret)
    /// (the host sent AUTH_Failure2).
    #[error("the controller's response does not match dhchap_ctrl_secret (controller not authenticated)")]
    ControllerMismatch,
    /// An Authentication Send or Receive completed with an NVMe status.
    #[error("{step} failed with NVMe status {status}")]
    Status {
        /// The command and message ("Authentication Send (AUTH_Negotiate)" …).
        step: &'static str,
        /// The status.
        status: Status,
    },
}

impl AuthError {
    /// Whether reconnecting cannot help: all but a status without DNR.
    pub fn is_permanent(&self) -> bool {
        match self {
            AuthError::Status { status, .. } => status.dnr(),
            _ => true,
        }
    }
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
    /// an invalid argument, an authentication failure).
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::Nvme { status, .. } => status.dnr(),
            Error::ControllerLost(_) | Error::Shutdown | Error::InvalidArgument(_) => true,
            Error::Auth { reason, .. } => reason.is_permanent(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authentication_failures_are_permanent_unless_a_status_says_retry() {
        let auth = |reason| Error::Auth { qid: 2, reason };
        assert!(auth(AuthError::NoKey).is_permanent());
        assert!(auth(AuthError::Refused(FailureReason::FAILED)).is_permanent());
        assert!(auth(AuthError::ControllerMismatch).is_permanent());
        let step = "Authentication Send (AUTH_Negotiate)";
        assert!(auth(AuthError::Status { step, status: Status::INVALID_FIELD.with_dnr() }).is_permanent());
        assert!(!auth(AuthError::Status { step, status: Status::INTERNAL }).is_permanent());
        let e = auth(AuthError::Refused(FailureReason::FAILED));
        assert_eq!(
            e.to_string(),
            "qid 2: authentication failed: the controller refused: authentication failed (0x01)"
        );
        let e = auth(AuthError::Protocol { what: "odd".into(), sent: Some(FailureReason::HASH_UNUSABLE) });
        assert_eq!(
            e.to_string(),
            "qid 2: authentication failed: odd (AUTH_Failure2 sent: hash function not usable (0x04))"
        );
    }
}
