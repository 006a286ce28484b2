//! `nvmeof get-log`, as nvme-cli's `get-log`: any log page's bytes.
//!
//! No `error-log`: the Error Information log is per controller (nvmet's and
//! this target's), and each `nvmeof` command connects a controller of its
//! own, whose log holds only its own failures.

use std::io::Write;

use nvmeof_common::spec::log::{GetLogPageCmd, LogPageId};
use nvmeof_initiator::Controller;
use serde_json::json;

use super::{emit, hex, out_err, Cli};
use crate::error::ToolError;

/// Most bytes `get-log` reads (one command: the initiator's transfer limit
/// applies too).
pub(super) const MAX_LOG_LEN: u32 = 1 << 20;

/// What `get-log` reads.
pub(super) struct LogRequest {
    /// Log page identifier.
    pub lid: u8,
    /// Bytes.
    pub len: u32,
    /// Namespace ID.
    pub nsid: u32,
    /// Log Specific Parameter.
    pub lsp: u8,
    /// Byte offset (LPO).
    pub offset: u64,
    /// Retain Asynchronous Event.
    pub rae: bool,
}

/// `nvmeof get-log`: `len` bytes of log page `lid` from byte `offset`, as a
/// hex dump (offset, 16 bytes, ASCII), JSON (`data` in hex) or, with `raw`,
/// the bytes themselves.
pub(super) async fn get_log(
    cli: &Cli,
    ctrl: &Controller,
    r: &LogRequest,
    raw: bool,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    if r.len == 0 || !r.len.is_multiple_of(4) || r.len > MAX_LOG_LEN {
        return Err(ToolError::usage(format!(
            "get-log: --log-len {} must be a positive multiple of 4 up to {MAX_LOG_LEN}",
            r.len
        )));
    }
    if !r.offset.is_multiple_of(4) {
        return Err(ToolError::usage(format!("get-log: --offset {} must be a multiple of 4", r.offset)));
    }
    let mut buf = vec![0u8; r.len as usize];
    let cmd = GetLogPageCmd {
        lsp: r.lsp,
        rae: r.rae,
        ..GetLogPageCmd::new(LogPageId(r.lid), r.nsid, r.offset, r.len)
    };
    ctrl.get_log_page(cmd, &mut buf)
        .await
        .map_err(|e| ToolError::from_initiator(&format!("get-log {:#04x}", r.lid), &e))?;
    if raw {
        return out.write_all(&buf).map_err(out_err);
    }
    if cli.json {
        return emit(
            out,
            &json!({ "lid": r.lid, "nsid": r.nsid, "offset": r.offset, "len": r.len, "data": hex(&buf) }),
        );
    }
    let mut s = format!("Log page {:#04x}, {} bytes from offset {}:\n", r.lid, r.len, r.offset);
    for (i, row) in buf.chunks(16).enumerate() {
        let bytes: Vec<String> = row.iter().map(|b| format!("{b:02x}")).collect();
        let text: String =
            row.iter().map(|&b| if b.is_ascii_graphic() || b == b' ' { b as char } else { '.' }).collect();
        s += &format!("{:08x}: {:<47}  \"{text}\"\n", r.offset + i as u64 * 16, bytes.join(" "));
    }
    write!(out, "{s}").map_err(out_err)
}
