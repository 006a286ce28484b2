//! Command parse/execute, like nvmet's `fabrics-cmd.c`, `admin-cmd.c`,
//! `discovery.c` and `io-cmd-*.c`: every command is first *parsed* (transfer
//! length and direction validated, handler picked, or an NVMe status) and then
//! *executed* once its data is present. NVMe [`Status`] values cross layers.

pub mod admin;
pub mod auth;
pub mod discovery;
pub mod fabrics;
pub mod fused;
pub mod io;

use std::sync::Arc;

use bytes::Bytes;
use nvmeof_common::opcode::{AdminOpcode, FabricsType, IoOpcode};
use nvmeof_common::spec::features::FeatureId;
use nvmeof_common::spec::log::ErrorLogEntry;
use nvmeof_common::{Sqe, Status};

use crate::backend::{IoCompletion, QueueIo};
use crate::core::{Controller, PortAna, Target};

/// What a queue knows about itself, handed to command handlers.
pub struct QueueCtx {
    /// The target.
    pub target: Arc<Target>,
    /// Port the connection came in on.
    pub port_id: u16,
    /// ANA states of that port: every I/O command checks its namespace's group.
    pub ana: Arc<PortAna>,
    /// That port's own queue limits, as they were when the connection came in.
    pub params: crate::core::PortParams,
    /// Queue ID once connected.
    pub qid: Option<u16>,
    /// Controller once connected.
    pub ctrl: Option<Arc<Controller>>,
    /// Completion channel of this queue (backends and AERs complete here),
    /// and its own io_uring when the queue task reaps one.
    pub io: QueueIo,
    /// SQSIZE from Connect (0's based).
    pub sqsize: u16,
    /// Host disabled SQ flow control (Connect CATTR bit 2): C2HData may carry SUCCESS.
    pub sqflow_disabled: bool,
    /// Set by a command (Disconnect) that closes the queue once its response is sent.
    pub close_requested: bool,
    /// Local address of the connection (discovery log entries of wildcard listeners report it).
    pub local_addr: Option<std::net::SocketAddr>,
    /// The host's address (nvmet's debugfs `host_traddr`): an admin queue's
    /// controller keeps it, for the metrics.
    pub peer_addr: Option<std::net::SocketAddr>,
    /// Read buffers handed out earlier; reused once the socket has sent them.
    pub read_bufs: std::collections::VecDeque<Bytes>,
    /// The connection carries data digests (ICReq DDGST): reads ask the
    /// backend for the data's CRC32C where it has one.
    pub data_digest: bool,
    /// DH-HMAC-CHAP state of the queue.
    pub auth: auth::QueueAuth,
    /// Set by the parse step of an I/O command on a namespace with
    /// reservations: the command's count in flight, which the queue keeps
    /// with the command until it completes (Preempt and Abort waits for it).
    pub inflight: std::cell::Cell<Option<crate::core::inflight::InflightGuard>>,
    /// This queue's in-flight counters on namespaces with reservations.
    pub inflight_cache: std::cell::RefCell<crate::core::inflight::InflightCache>,
}

impl QueueCtx {
    /// A context for a fresh, unconnected queue; `io` says how its backend
    /// completions arrive ([`QueueIo::with_ring`] when the queue task reaps its own io_uring).
    pub fn new(target: Arc<Target>, port_id: u16, io: QueueIo) -> Self {
        Self {
            ana: target.port_ana(port_id),
            params: target.port_params(port_id),
            target,
            port_id,
            qid: None,
            ctrl: None,
            io,
            sqsize: 0,
            sqflow_disabled: false,
            close_requested: false,
            local_addr: None,
            peer_addr: None,
            read_bufs: std::collections::VecDeque::new(),
            data_digest: false,
            auth: auth::QueueAuth::default(),
            inflight: std::cell::Cell::new(None),
            inflight_cache: Default::default(),
        }
    }

    /// A buffer of `len` bytes for a read (stale contents: the backend
    /// overwrites all of them), reusing the allocation
    /// of an earlier read once nothing else holds it (the C2HData was written),
    /// so steady-state reads allocate nothing.
    pub fn take_read_buf(&mut self, len: usize) -> bytes::BytesMut {
        for _ in 0..self.read_bufs.len().min(4) {
            let b = self.read_bufs.pop_front().expect("non-empty");
            match b.try_into_mut() {
                Ok(mut m) if m.capacity() >= len => {
                    // Backends overwrite every byte of a read buffer (files read
                    // past EOF as zeroes), so the old contents stay: `resize`
                    // truncates, or zeroes only the bytes beyond the old length,
                    // and a recycled 4 KiB buffer costs no memset.
                    m.resize(len, 0);
                    return m;
                }
                Ok(_) => {}
                Err(b) => self.read_bufs.push_back(b),
            }
        }
        // A shared-representation buffer: clones of its frozen form only bump a
        // count, and it can be reclaimed later. It starts on a 512-byte
        // boundary, so an io_uring O_DIRECT read can land in it directly
        // (`UringBackend::read_into`).
        const ALIGN: usize = 512;
        let mut m = bytes::BytesMut::with_capacity(len.max(4096) + ALIGN);
        let pad = m.as_ptr().align_offset(ALIGN);
        m.resize(pad + len, 0);
        drop(m.split_to(pad));
        let out = m.split_to(len);
        drop(m);
        out
    }

    /// Keeps a read buffer for reuse (bounded by the queue depth).
    pub fn recycle_read_buf(&mut self, b: Bytes) {
        if self.read_bufs.len() < (self.sqsize as usize + 1).clamp(32, 1024) {
            self.read_bufs.push_back(b);
        }
    }

    /// Whether this is the admin queue (QID 0) of a connected controller.
    pub fn is_admin(&self) -> bool {
        self.qid == Some(0)
    }
}

/// A command's response (or data) produced by a handler.
#[derive(Clone, Debug, Default)]
pub struct Response {
    /// Status.
    pub status: Status,
    /// CQE DW0/DW1.
    pub result: u64,
    /// Data for the host (controller-to-host commands).
    pub data: Bytes,
    /// `data` belongs to the backend ([`crate::backend::Backend::read_shared`]):
    /// not kept for reuse as a read buffer.
    pub shared: bool,
    /// CRC32C of `data` when the backend knew it (the data digest is then not
    /// computed from the bytes).
    pub data_crc: Option<u32>,
    /// The LBA at fault when the command's SQE does not hold it (a Dataset
    /// Management range past the end): the error log entry's LBA.
    pub error_lba: Option<u64>,
}

impl Response {
    /// A status-only response.
    pub fn status(status: Status) -> Self {
        Self { status, ..Default::default() }
    }
    /// Success with a result value.
    pub fn result(result: u64) -> Self {
        Self { status: Status::SUCCESS, result, ..Default::default() }
    }
    /// Success with data.
    pub fn data(data: impl Into<Bytes>) -> Self {
        Self { status: Status::SUCCESS, data: data.into(), ..Default::default() }
    }
}

impl From<Status> for Response {
    fn from(s: Status) -> Self {
        Response::status(s)
    }
}

/// What the queue must remember about an asynchronous command until its completion arrives.
#[derive(Debug)]
pub enum Pending {
    /// Pass the completion through.
    Plain,
    /// Compare: check the read data against these bytes.
    Compare(Bytes),
    /// Verify: the blocks were read (or failed to be); the data is dropped.
    Verify,
    /// Set Features Write Protect: the flush after setting protection.
    WriteProtect(WriteProtectFlush),
    /// Copy: its next step ([`io::copy_step`], which the queue calls).
    Copy(Box<io::CopyJob>),
    /// The Write of a fused Compare and Write: the pair's next step
    /// ([`fused::step`], which the queue calls).
    CompareWrite(Box<fused::CompareWriteJob>),
    /// An I/O command its namespace's rate limits hold back, with its data:
    /// it runs ([`execute_throttled`]) when a completion with its tag says
    /// its time has come.
    Throttled(Bytes),
    /// Zone Append: the LBA its data went to, the result on success.
    ZoneAppend(u64),
    /// Zone Management Send Reset: the zones to empty once the backend
    /// dropped their blocks.
    ZoneReset(Arc<crate::core::zoned::Zones>, Vec<u64>),
}

/// The namespace a Set Features Write Protect flushes (nvmet
/// `nvmet_write_protect_flush_sync`): protection stays on if the flush
/// succeeds (and the controllers hear of the change), else it is lifted again.
#[derive(Clone)]
pub struct WriteProtectFlush {
    /// The namespace made write protected.
    pub ns: Arc<crate::core::Namespace>,
    /// Its subsystem, told of the change.
    pub subsys: Arc<crate::core::Subsystem>,
}

impl std::fmt::Debug for WriteProtectFlush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteProtectFlush").field("nsid", &self.ns.nsid).finish()
    }
}

/// Outcome of executing a command.
#[derive(Debug)]
pub enum Exec {
    /// Finished now.
    Done(Response),
    /// Finishes later: an [`IoCompletion`] with the command's tag arrives on the queue's sink.
    Pending(Pending),
}

impl From<Response> for Exec {
    fn from(r: Response) -> Self {
        Exec::Done(r)
    }
}

impl From<Status> for Exec {
    fn from(s: Status) -> Self {
        Exec::Done(Response::status(s))
    }
}

/// Data direction and length a command expects, from its parse step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// Host to controller.
    pub write: bool,
    /// Bytes.
    pub len: u32,
}

/// Whether the command moves data host-to-controller, by the rule Linux uses:
/// OPC bit 0 (FCTYPE bit 0 for fabrics commands).
pub fn is_write(sqe: &Sqe) -> bool {
    if sqe.opcode() == 0x7F {
        FabricsType(sqe.fctype()).is_write()
    } else {
        sqe.opcode() & 1 != 0
    }
}

/// Exact SGL length check (nvmet `nvmet_check_transfer_len`): a command that
/// moves `want` bytes (0 for commands without data) with any other SGL length
/// gets SGL Data Invalid. Without it a successful non-write command with a
/// non-zero SGL length would be answered with that many bytes of C2HData.
pub(crate) fn expect_len(sqe: &Sqe, want: u64) -> Result<(), Status> {
    if sqe.sgl().length as u64 == want {
        Ok(())
    } else {
        Err(Status::SGL_INVALID_DATA.with_dnr())
    }
}

/// Parameter Error Location for an error no one field of the command caused.
pub const NO_ERROR_LOCATION: u16 = 0xFFFF;

/// The Error Information log entry for `sqe`, which failed with `status` on
/// queue `sqid` (its Error Count is left to the log). The Parameter Error
/// Location is the byte of the SQE at fault, the same byte nvmet's
/// `error_loc` names for these failures (checked against Linux 6.12 by the
/// interop suite's `statuses` client): FLAGS for fused commands and PRPs,
/// OPC (FCTYPE for fabrics commands) for an unknown opcode, NSID for an
/// invalid namespace or one whose ANA state refuses I/O through this port,
/// DPTR for a data descriptor that does not fit, SLBA for
/// a read or write past the end, CDW10 for Identify, Get Log Page and the features
/// (CDW11 for the Host Identifier's EXHID), ATTRIB or OFST for properties. Elsewhere it is FFFFh (no one field at
/// fault; nvmet names OPC for some and records no entry for others). The LBA
/// is the command's SLBA for a read, write, Write Zeroes or Compare out of
/// range or failed by the media or the backend (a Dataset Management range
/// past the end names its own, [`Response::error_lba`]); the namespace is
/// the SQE's NSID (0 for fabrics commands, whose bytes 4-7 are FCTYPE; nvmet
/// copies them as they are).
pub fn error_entry(sqid: u16, sqe: &Sqe, status: Status) -> ErrorLogEntry {
    const FLAGS: u16 = 1;
    const NSID: u16 = 4;
    const FCTYPE: u16 = 4;
    const DPTR: u16 = 24;
    const CDW10: u16 = 40;
    const CDW11: u16 = 44;
    const SLBA: u16 = 40;
    const NLB: u16 = 48;
    // Property Get/Set: ATTRIB (byte 40) and OFST (byte 44).
    const ATTRIB: u16 = 40;
    const OFST: u16 = 44;
    let fabrics = sqe.opcode() == 0x7F;
    let opc = sqe.opcode();
    // Opcodes mean different commands on admin and I/O queues (02h is Get
    // Log Page on one and Read on the other).
    let admin = sqid == 0 && !fabrics;
    let rw = sqid != 0
        && !fabrics
        && [IoOpcode::READ, IoOpcode::WRITE, IoOpcode::WRITE_ZEROES, IoOpcode::COMPARE, IoOpcode::VERIFY]
            .contains(&IoOpcode(opc));
    let slba = sqe.cdw(10) as u64 | (sqe.cdw(11) as u64) << 32;
    let code = status.code();
    let reservation_cmd = matches!(
        IoOpcode(opc),
        IoOpcode::RESV_REGISTER | IoOpcode::RESV_REPORT | IoOpcode::RESV_ACQUIRE | IoOpcode::RESV_RELEASE
    );
    // FLAGS where the queue refused them: PSDT other than SGL, FUSE 11b, a
    // fused command outside the I/O command set (Compare and Write is
    // the only fused operation).
    let bad_flags = sqe.psdt() != 1 || sqe.fuse() == 3 || (sqe.fuse() != 0 && (sqid == 0 || fabrics));
    let location = if code == Status::INVALID_FIELD && bad_flags {
        FLAGS
    } else if code == Status::INVALID_OPCODE
        || (code == Status::RESERVATION_CONFLICT && sqid != 0 && !fabrics && !reservation_cmd)
    {
        // A reservation refusing a read or write names OPC too (nvmet
        // `nvmet_pr_check_cmd_access`).
        if fabrics {
            FCTYPE
        } else {
            0
        }
    } else if [
        Status::INVALID_NS,
        Status::ANA_INACCESSIBLE,
        Status::ANA_PERSISTENT_LOSS,
        Status::ANA_TRANSITION,
    ]
    .contains(&code)
    {
        // nvmet_parse_io_cmd names NSID for an ANA state refusing the I/O too.
        NSID
    } else if [
        Status::SGL_INVALID_DATA,
        Status::SGL_INVALID_OFFSET,
        Status::SGL_INVALID_TYPE,
        Status::SGL_INVALID_SUBTYPE,
        Status::SGL_INVALID_LAST,
        Status::SGL_INVALID_COUNT,
    ]
    .contains(&code)
    {
        DPTR
    } else if code == Status::LBA_RANGE && rw {
        SLBA
    } else if code == Status::CAP_EXCEEDED {
        NLB
    } else if code == Status::INVALID_FIELD && fabrics {
        match FabricsType(sqe.fctype()) {
            FabricsType::PROPERTY_GET if sqe.cdw(10) & 1 != 0 => OFST,
            FabricsType::PROPERTY_GET => ATTRIB,
            FabricsType::PROPERTY_SET => OFST,
            FabricsType::AUTH_SEND | FabricsType::AUTH_RECV => auth::invalid_field_offset(sqe),
            _ => NO_ERROR_LOCATION,
        }
    } else if code == Status::INVALID_FIELD
        && admin
        && AdminOpcode(opc) == AdminOpcode::GET_FEATURES
        && sqe.cdw(10) as u8 == FeatureId::HOST_ID.0
    {
        CDW11
    } else if code == Status::INVALID_FIELD
        && admin
        && [
            AdminOpcode::IDENTIFY,
            AdminOpcode::GET_LOG_PAGE,
            AdminOpcode::GET_FEATURES,
            AdminOpcode::SET_FEATURES,
        ]
        .contains(&AdminOpcode(opc))
    {
        CDW10
    } else {
        NO_ERROR_LOCATION
    };
    let media = status.sct().0 == 2 || code == Status::INTERNAL;
    ErrorLogEntry {
        sqid,
        cid: sqe.cid(),
        status: status.to_wire(),
        param_error_location: location,
        lba: if rw && (code == Status::LBA_RANGE || media) { slba } else { 0 },
        nsid: if fabrics { 0 } else { sqe.nsid() },
        ..Default::default()
    }
}

/// Parse step (before any data is solicited): checks that the command may run
/// on this queue in the controller's state, and for I/O commands validates
/// namespace, LBA range and that the SGL length equals the transfer length.
pub fn parse(ctx: &QueueCtx, sqe: &Sqe) -> Result<(), Status> {
    if sqe.opcode() == 0x7F {
        return fabrics::parse(ctx, sqe);
    }
    let Some(ctrl) = &ctx.ctrl else {
        // Not connected: only Connect is allowed (nvmet_parse_connect_cmd).
        return Err(Status::INVALID_OPCODE.with_dnr());
    };
    if !ctx.auth.authenticated {
        // nvmet_parse_{admin,io}_cmd: nvmet_check_auth_status.
        return Err(Status::AUTH_REQUIRED.with_dnr());
    }
    if ctx.is_admin() {
        return admin::parse(ctx, ctrl, sqe);
    }
    if !ctrl.is_ready() {
        return Err(Status::CMD_SEQ_ERROR.with_dnr());
    }
    io::parse(ctx, ctrl, sqe)
}

/// Execute step, with the command's data (`data` empty for reads).
pub fn execute(ctx: &mut QueueCtx, sqe: &Sqe, data: Bytes, tag: u32) -> Exec {
    if sqe.opcode() == 0x7F {
        return fabrics::execute(ctx, sqe, data);
    }
    if ctx.is_admin() {
        let Some(ctrl) = ctx.ctrl.clone() else {
            return Status::INVALID_OPCODE.with_dnr().into();
        };
        return admin::execute(ctx, &ctrl, sqe, data, tag);
    }
    execute_io(ctx, sqe, data, tag, true)
}

/// Runs an I/O command its namespace's rate limits held back
/// ([`Pending::Throttled`]) once its time has come.
pub fn execute_throttled(ctx: &mut QueueCtx, sqe: &Sqe, data: Bytes, tag: u32) -> Exec {
    execute_io(ctx, sqe, data, tag, false)
}

fn execute_io(ctx: &mut QueueCtx, sqe: &Sqe, data: Bytes, tag: u32, throttle: bool) -> Exec {
    // Borrowed out of the context for the call, not cloned: every queue of
    // the controller shares this `Arc`, and a clone per I/O command would
    // move its reference count between their cores. The I/O path does not
    // look at `ctx.ctrl`.
    let Some(ctrl) = ctx.ctrl.take() else {
        return Status::INVALID_OPCODE.with_dnr().into();
    };
    let exec = io::execute(ctx, &ctrl, sqe, data, tag, throttle);
    ctx.ctrl = Some(ctrl);
    exec
}

/// Turns an asynchronous completion into the command's response.
pub fn complete(pending: Pending, c: IoCompletion) -> Response {
    match pending {
        Pending::Plain => Response { status: c.status, result: c.result, data: c.data, ..Default::default() },
        Pending::WriteProtect(w) => {
            if c.status.is_success() {
                w.subsys.namespace_changed(w.ns.nsid);
            } else {
                tracing::error!(nsid = w.ns.nsid, status = ?c.status, "write protect flush failed");
                w.ns.set_write_protected(false);
            }
            Response::status(c.status)
        }
        // The queue hands a Copy's completions to `io::copy_step`; one that
        // ends here fails the Copy rather than half finishing it.
        Pending::Copy(_) if c.status.is_success() => Response::status(Status::INTERNAL.with_dnr()),
        Pending::Copy(_) => Response::status(c.status),
        Pending::CompareWrite(_) | Pending::Throttled(_) => Response::status(Status::INTERNAL.with_dnr()),
        Pending::Verify => Response::status(c.status),
        Pending::ZoneAppend(lba) if c.status.is_success() => Response::result(lba),
        Pending::ZoneAppend(_) => Response::status(c.status),
        Pending::ZoneReset(zones, which) => {
            if c.status.is_success() {
                zones.finish_reset(&which);
            }
            Response::status(c.status)
        }
        Pending::Compare(expected) => {
            if !c.status.is_success() {
                Response::status(c.status)
            } else if c.data == expected {
                Response::status(Status::SUCCESS)
            } else {
                Response::status(Status::COMPARE_FAILED.with_dnr())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use nvmeof_common::spec::property::{PropertyGet, PropertyOffset};

    use super::*;

    fn location(sqid: u16, sqe: &Sqe, status: Status) -> (u16, u64, u32) {
        let e = error_entry(sqid, sqe, status);
        assert_eq!((e.sqid, e.cid, e.status), (sqid, sqe.cid(), status.to_wire()));
        (e.param_error_location, e.lba, e.nsid)
    }

    #[test]
    fn error_entries_name_the_byte_at_fault_per_queue_type() {
        let mut sqe = Sqe::new(0x02);
        sqe.set_cid(3).set_nsid(1).set_cdw(10, 0x10).set_cdw(11, 1);
        let (field, internal) = (Status::INVALID_FIELD.with_dnr(), Status::INTERNAL);
        // 02h is Get Log Page on the admin queue (CDW10 at fault) and Read on
        // an I/O queue, where a backend failure names the SLBA.
        assert_eq!(location(0, &sqe, field), (40, 0, 1));
        assert_eq!(location(1, &sqe, field), (NO_ERROR_LOCATION, 0, 1));
        assert_eq!(location(0, &sqe, internal), (NO_ERROR_LOCATION, 0, 1));
        assert_eq!(location(1, &sqe, internal), (NO_ERROR_LOCATION, 1 << 32 | 0x10, 1));
        assert_eq!(location(1, &sqe, Status::LBA_RANGE.with_dnr()), (40, 1 << 32 | 0x10, 1));
        assert_eq!(location(1, &sqe, Status::INVALID_NS.with_dnr()), (4, 0, 1));
        assert_eq!(location(1, &sqe, Status::ANA_INACCESSIBLE), (4, 0, 1));
        assert_eq!(location(1, &sqe, Status::SGL_INVALID_DATA.with_dnr()), (24, 0, 1));
        assert_eq!(location(1, &sqe, Status::INVALID_OPCODE.with_dnr()), (0, 0, 1));
        assert_eq!(location(1, &sqe, Status::RESERVATION_CONFLICT.with_dnr()), (0, 0, 1));
        let register = nvmeof_common::spec::ReservationCmd::register(1, Default::default(), false).to_sqe(3);
        assert_eq!(
            location(1, &register, Status::RESERVATION_CONFLICT.with_dnr()),
            (NO_ERROR_LOCATION, 0, 1)
        );
        // FUSE 11b, or fused on the admin queue: the FLAGS byte, whatever
        // the opcode; a fused I/O command refused for its range names it.
        sqe.set_flags(0x43);
        assert_eq!(location(1, &sqe, field), (1, 0, 1));
        sqe.set_flags(0x41);
        assert_eq!(location(0, &sqe, field), (1, 0, 1));
        assert_eq!(location(1, &sqe, field), (NO_ERROR_LOCATION, 0, 1));
        assert_eq!(location(1, &sqe, Status::LBA_RANGE.with_dnr()), (40, 1 << 32 | 0x10, 1));
        // Fabrics: FCTYPE for an unknown one, and no NSID (bytes 4-7 are FCTYPE).
        let mut get = PropertyGet::new(PropertyOffset::CAP).to_sqe(4);
        assert_eq!(location(0, &get, Status::INVALID_OPCODE.with_dnr()), (4, 0, 0));
        get.set_cdw(10, 0);
        assert_eq!(location(0, &get, field), (40, 0, 0), "4-byte Property Get: ATTRIB");
        get.set_cdw(10, 1);
        assert_eq!(location(0, &get, field), (44, 0, 0), "8-byte Property Get: OFST");
    }
}
