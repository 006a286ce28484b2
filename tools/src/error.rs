//! Errors of the tools, their exit codes, and plain-language explanations of
//! NVMe statuses (a rejected Connect says why).

use nvmeof_common::opcode::FabricsType;
use nvmeof_common::spec::connect::{data_off, parse_invalid_param_dw0};
use nvmeof_common::sqe::fabrics_off;
use nvmeof_common::Status;
use nvmeof_initiator::Error;

/// Exit codes both tools use; scripts can rely on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    /// 0: success.
    Ok = 0,
    /// 1: the controller answered with an NVMe error status (including a rejected Connect).
    NvmeStatus = 1,
    /// 2: bad command line or arguments that do not fit the target (block size, range).
    Usage = 2,
    /// 3: connection or transport failure (refused, timed out, closed, protocol error).
    Transport = 3,
    /// 4: the subsystem or namespace does not exist.
    NotFound = 4,
    /// 5: `nvmeof-probe --verify` found data that does not match what was written.
    VerifyFailed = 5,
}

/// What went wrong, classified for the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// See [`ExitCode::NvmeStatus`].
    Nvme,
    /// See [`ExitCode::Usage`].
    Usage,
    /// See [`ExitCode::Transport`].
    Transport,
    /// See [`ExitCode::NotFound`].
    NotFound,
    /// See [`ExitCode::VerifyFailed`].
    Verify,
    /// Standard output was closed by its reader (`nvmeof list | head`): the
    /// tool stops quietly with [`ExitCode::Ok`], as a Unix tool ends on SIGPIPE.
    OutputClosed,
}

/// An error with a message that says what failed.
#[derive(Clone, Debug)]
pub struct ToolError {
    /// Classification.
    pub kind: ErrorKind,
    /// Human-readable explanation (one line).
    pub message: String,
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}

impl ToolError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    /// A usage error (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, message)
    }

    /// A not-found error (exit code 4).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        match self.kind {
            ErrorKind::Nvme => ExitCode::NvmeStatus,
            ErrorKind::Usage => ExitCode::Usage,
            ErrorKind::Transport => ExitCode::Transport,
            ErrorKind::NotFound => ExitCode::NotFound,
            ErrorKind::Verify => ExitCode::VerifyFailed,
            ErrorKind::OutputClosed => ExitCode::Ok,
        }
    }

    /// Classifies an initiator error; `what` says what was being done
    /// (e.g. "connect to 10.0.0.1:4420 (nqn.x)").
    pub fn from_initiator(what: &str, e: &Error) -> Self {
        let (kind, detail) = classify(e);
        Self::new(kind, format!("{what}: {detail}"))
    }

    /// Prefixes the message with context.
    pub fn context(mut self, what: &str) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

/// The kind and an explanation of an initiator error.
pub fn classify(e: &Error) -> (ErrorKind, String) {
    match e {
        Error::Nvme { status, result, command } => {
            if command.fctype == Some(FabricsType::CONNECT.0) {
                return explain_connect(*status, *result, command.qid);
            }
            let kind =
                if status.code() == Status::INVALID_NS { ErrorKind::NotFound } else { ErrorKind::Nvme };
            (kind, format!("{} ({}) for {command}", status_meaning(*status), status_codes(*status)))
        }
        Error::Transport(io) => {
            let hint = match io.kind() {
                std::io::ErrorKind::ConnectionRefused => " (nothing listens there: is the target running?)",
                std::io::ErrorKind::TimedOut => " (no answer: wrong address or a firewall?)",
                _ => "",
            };
            (ErrorKind::Transport, format!("transport error: {io}{hint}"))
        }
        Error::Timeout(d) => (ErrorKind::Transport, format!("timed out after {d:?}")),
        Error::Protocol(_)
        | Error::Command(_)
        | Error::ConnectionLost
        | Error::ControllerLost(_)
        | Error::NoPath(_) => (ErrorKind::Transport, e.to_string()),
        Error::Shutdown | Error::Spec(_) | Error::Controller(_) => (ErrorKind::Transport, e.to_string()),
        // A refusal, as a rejected Connect is: retrying with the same keys
        // cannot help (the library does not retry either).
        Error::Auth { .. } => (ErrorKind::Nvme, e.to_string()),
        Error::InvalidArgument(m) => {
            if m.contains("not active") {
                (ErrorKind::NotFound, m.clone())
            } else {
                (ErrorKind::Usage, m.clone())
            }
        }
    }
}

/// `SCT 1 SC 0x84` (and ` DNR` when set).
pub fn status_codes(s: Status) -> String {
    format!("SCT {} SC {:#04x}{}", s.sct().0, s.sc(), if s.dnr() { ", DNR" } else { "" })
}

fn explain_connect(status: Status, result: u64, qid: u16) -> (ErrorKind, String) {
    let codes = status_codes(status);
    let queue = if qid == 0 { "admin queue" } else { "I/O queue" };
    let (kind, what) = match status.code() {
        Status::CONNECT_INVALID_HOST => {
            (ErrorKind::Nvme, "host not allowed: the subsystem does not list this host NQN".to_string())
        }
        Status::CONNECT_INVALID_PARAM => {
            let (in_data, off) = parse_invalid_param_dw0(result as u32);
            let field = if in_data {
                match off as usize {
                    data_off::SUBNQN => "SUBNQN",
                    data_off::HOSTNQN => "HOSTNQN",
                    data_off::CNTLID => "CNTLID",
                    data_off::HOSTID => "HOSTID",
                    _ => "data field",
                }
            } else {
                match off as usize {
                    fabrics_off::QID => "QID",
                    fabrics_off::SQSIZE => "SQSIZE",
                    fabrics_off::KATO => "KATO",
                    fabrics_off::CATTR => "CATTR",
                    _ => "command field",
                }
            };
            if in_data && off as usize == data_off::SUBNQN {
                (ErrorKind::NotFound, "subsystem not found: the target has no subsystem with this NQN".into())
            } else {
                (
                    ErrorKind::Nvme,
                    format!(
                        "invalid parameter {field} (offset {off} in the Connect {})",
                        if in_data { "data" } else { "command" }
                    ),
                )
            }
        }
        Status::CONNECT_CTRL_BUSY => (ErrorKind::Nvme, "controller busy (no controller ID available)".into()),
        Status::CONNECT_FORMAT => (ErrorKind::Nvme, "incompatible Connect format".into()),
        Status::CONNECT_RESTART_DISC => (ErrorKind::Nvme, "restart discovery".into()),
        Status::AUTH_REQUIRED => (ErrorKind::Nvme, "authentication required (give --dhchap-secret)".into()),
        _ => (ErrorKind::Nvme, status_meaning(status)),
    };
    (kind, format!("Connect ({queue}) rejected: {what} ({codes})"))
}

/// A short meaning of an NVMe status.
pub fn status_meaning(s: Status) -> String {
    let m = match s.code() {
        Status::SUCCESS => "success",
        Status::INVALID_OPCODE => "invalid opcode",
        Status::INVALID_FIELD => "invalid field in command",
        Status::CMDID_CONFLICT => "command ID conflict",
        Status::DATA_XFER_ERROR => "data transfer error",
        Status::INTERNAL => "internal error",
        Status::ABORT_REQ => "command abort requested",
        Status::ABORT_QUEUE => "command aborted: SQ deletion",
        Status::INVALID_NS => "namespace not found (invalid namespace or format)",
        Status::CMD_SEQ_ERROR => "command sequence error",
        Status::SGL_INVALID_DATA => "invalid SGL data length",
        Status::LBA_RANGE => "LBA out of range",
        Status::CAP_EXCEEDED => "capacity exceeded",
        Status::NS_NOT_READY => "namespace not ready",
        Status::RESERVATION_CONFLICT => "reservation conflict",
        Status::NS_WRITE_PROTECTED => "namespace is write protected",
        Status::FEATURE_NOT_SAVEABLE => "feature identifier not saveable",
        Status::FEATURE_NOT_CHANGEABLE => "feature not changeable",
        Status::FEATURE_NOT_PER_NS => "feature not namespace specific",
        Status::KEEP_ALIVE_EXPIRED => "keep alive timer expired",
        Status::TRANSIENT_TRANSPORT => "transient transport error",
        Status::INVALID_LOG_PAGE => "invalid log page",
        Status::WRITE_FAULT => "write fault",
        Status::READ_ERROR => "unrecovered read error",
        Status::COMPARE_FAILED => "compare failure",
        Status::ACCESS_DENIED => "access denied",
        Status::ANA_INACCESSIBLE => "ANA inaccessible",
        Status::HOST_PATH_ERROR => "host path error",
        Status::ZONE_BOUNDARY_ERROR => "zone boundary error",
        Status::ZONE_FULL => "zone is full",
        Status::ZONE_READ_ONLY => "zone is read only",
        Status::ZONE_OFFLINE => "zone is offline",
        Status::ZONE_INVALID_WRITE => "zone invalid write (not at the write pointer)",
        Status::ZONE_TOO_MANY_ACTIVE => "too many active zones",
        Status::ZONE_TOO_MANY_OPEN => "too many open zones",
        Status::ZONE_INVALID_TRANSITION => "invalid zone state transition",
        _ => "NVMe error status",
    };
    m.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmeof_common::spec::connect::invalid_param_dw0;
    use nvmeof_initiator::CommandInfo;

    fn connect_err(status: Status, result: u64) -> Error {
        Error::Nvme {
            status,
            result,
            command: CommandInfo { qid: 0, opcode: 0x7F, fctype: Some(FabricsType::CONNECT.0), nsid: 0 },
        }
    }

    #[test]
    fn connect_rejections_are_explained() {
        let e =
            ToolError::from_initiator("connect", &connect_err(Status::CONNECT_INVALID_HOST.with_dnr(), 0));
        assert_eq!(e.kind, ErrorKind::Nvme);
        assert!(e.message.contains("host not allowed") && e.message.contains("SCT 1 SC 0x84"), "{e}");
        let dw0 = invalid_param_dw0(true, data_off::SUBNQN as u16) as u64;
        let e =
            ToolError::from_initiator("connect", &connect_err(Status::CONNECT_INVALID_PARAM.with_dnr(), dw0));
        assert_eq!(e.exit_code(), ExitCode::NotFound);
        assert!(e.message.contains("subsystem not found") && e.message.contains("SC 0x82"), "{e}");
    }

    #[test]
    fn zone_statuses_are_named() {
        let e = Error::Nvme {
            status: Status::ZONE_INVALID_WRITE.with_dnr(),
            result: 0,
            command: CommandInfo { qid: 1, opcode: 0x01, fctype: None, nsid: 1 },
        };
        let t = ToolError::from_initiator("write", &e);
        assert_eq!(t.exit_code(), ExitCode::NvmeStatus);
        assert!(t.message.contains("zone invalid write") && t.message.contains("SC 0xbc"), "{t}");
        assert_eq!(status_meaning(Status::ZONE_TOO_MANY_OPEN), "too many open zones");
    }

    #[test]
    fn authentication_failures_are_refusals() {
        use nvmeof_common::auth::FailureReason;
        use nvmeof_initiator::AuthError;
        let e = Error::Auth { qid: 0, reason: AuthError::Refused(FailureReason::FAILED) };
        let t = ToolError::from_initiator("connect", &e);
        assert_eq!(t.exit_code(), ExitCode::NvmeStatus);
        assert!(t.message.contains("qid 0: authentication failed: the controller refused"), "{t}");
        let t = ToolError::from_initiator("connect", &Error::Auth { qid: 1, reason: AuthError::NoKey });
        assert_eq!(t.kind, ErrorKind::Nvme);
        assert!(t.message.contains("no key"), "{t}");
    }

    #[test]
    fn transport_errors() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = ToolError::from_initiator("connect to x", &Error::from(io));
        assert_eq!(e.exit_code(), ExitCode::Transport);
        assert!(e.message.contains("refused"), "{e}");
    }
}
