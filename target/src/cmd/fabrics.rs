//! Fabrics commands: Connect, Property Get/Set, Disconnect (nvmet
//! `fabrics-cmd.c`; reference §4).

use bytes::Bytes;
use nvmeof_common::opcode::FabricsType;
use nvmeof_common::spec::connect::{data_off, invalid_param_dw0, CONNECT_DATA_LEN};
use nvmeof_common::spec::property::{Cap, PropertyGet, PropertyOffset, PropertySet};
use nvmeof_common::spec::{ConnectCmd, ConnectData, SpecError, CNTLID_DYNAMIC};
use nvmeof_common::sqe::fabrics_off;
use nvmeof_common::{Sqe, Status};
use tracing::{info, warn};

use super::{expect_len, Exec, QueueCtx, Response};
use crate::core::Controller;

/// Admin queue depth limit: SPDK's default (`SPDK_NVMF_TCP_DEFAULT_AQ_DEPTH`,
/// 128). nvmet-tcp bounds the admin SQSIZE by nothing ("for fabrics, this
/// value applies to only the I/O Submission Queues", `nvmet_install_queue`);
/// Linux and SPDK hosts ask for 32 entries, other hosts for more.
pub const ADMIN_QUEUE_ENTRIES: u32 = 128;
/// KATO given to discovery controllers whose host passed 0 (nvmet: 120 s).
pub const DISCOVERY_KATO_MS: u32 = 120_000;

/// Parse step for OPC 7Fh: which fabrics commands this queue accepts now.
pub fn parse(ctx: &QueueCtx, sqe: &Sqe) -> Result<(), Status> {
    let ft = FabricsType(sqe.fctype());
    if ctx.qid.is_none() {
        // A queue that is not connected accepts only Connect (nvmet_parse_connect_cmd).
        return if ft == FabricsType::CONNECT { Ok(()) } else { Err(Status::INVALID_OPCODE.with_dnr()) };
    }
    match ft {
        // A second Connect on a live queue: Invalid Opcode, as nvmet and SPDK
        // answer it (once the queue has a controller, nvmet_req_init parses
        // fabrics commands with nvmet_parse_fabrics_{admin,io}_cmd, which know
        // no Connect; SPDK's nvmf_ctrlr_process_fabrics_cmd likewise).
        // Command Sequence Error is for a QID already connected on another
        // connection (nvmet_install_queue), below in `connect`.
        FabricsType::CONNECT => Err(Status::INVALID_OPCODE.with_dnr()),
        // nvmet_execute_prop_{get,set}: nvmet_check_transfer_len(req, 0); Disconnect
        // moves no data either.
        FabricsType::PROPERTY_GET | FabricsType::PROPERTY_SET if ctx.is_admin() => expect_len(sqe, 0),
        FabricsType::DISCONNECT if !ctx.is_admin() => expect_len(sqe, 0),
        // Allowed on every connected queue before it has authenticated
        // (nvmet_parse_fabrics_{admin,io}_cmd).
        FabricsType::AUTH_SEND | FabricsType::AUTH_RECV => super::auth::parse(sqe),
        _ => Err(Status::INVALID_OPCODE.with_dnr()),
    }
}

/// Execute step for OPC 7Fh.
pub fn execute(ctx: &mut QueueCtx, sqe: &Sqe, data: Bytes) -> Exec {
    match FabricsType(sqe.fctype()) {
        FabricsType::CONNECT => connect(ctx, sqe, &data).into(),
        FabricsType::PROPERTY_GET => property_get(ctx, sqe).into(),
        FabricsType::PROPERTY_SET => property_set(ctx, sqe).into(),
        FabricsType::AUTH_SEND => super::auth::send(ctx, &data).into(),
        FabricsType::AUTH_RECV => super::auth::receive(ctx, sqe).into(),
        FabricsType::DISCONNECT => {
            // Deletes this I/O queue: answer, then the queue closes.
            ctx.close_requested = true;
            Response::status(Status::SUCCESS).into()
        }
        _ => Status::INVALID_OPCODE.with_dnr().into(),
    }
}

fn invalid_param(in_data: bool, offset: usize) -> Response {
    Response {
        status: Status::CONNECT_INVALID_PARAM.with_dnr(),
        result: invalid_param_dw0(in_data, offset as u16) as u64,
        ..Default::default()
    }
}

/// Connect (reference §4.2 table; nvmet `nvmet_execute_admin_connect` /
/// `nvmet_execute_io_connect`).
fn connect(ctx: &mut QueueCtx, sqe: &Sqe, data: &[u8]) -> Response {
    if data.len() != CONNECT_DATA_LEN {
        return Status::SGL_INVALID_DATA.with_dnr().into();
    }
    let cmd = ConnectCmd::from_sqe(sqe);
    // The checks come in nvmet's order (nvmet_execute_admin_connect /
    // nvmet_execute_io_connect, then nvmet_install_queue), so a Connect with
    // several bad fields is answered as nvmet answers it: RECFMT first, then
    // an admin CNTLID other than FFFFh, then subsystem and host.
    if cmd.recfmt != 0 {
        warn!(recfmt = cmd.recfmt, "Connect with unsupported record format");
        return Status::CONNECT_FORMAT.with_dnr().into();
    }
    let cntlid = u16::from_le_bytes([data[data_off::CNTLID], data[data_off::CNTLID + 1]]);
    if cmd.qid == 0 && cntlid != CNTLID_DYNAMIC {
        warn!(cntlid, "admin Connect with a CNTLID other than FFFFh");
        return invalid_param(true, data_off::CNTLID);
    }
    let d = match ConnectData::decode(data) {
        Ok(d) => d,
        Err(e) => {
            warn!(error = %e, "Connect data malformed");
            // IATTR/IPO name the NQN field that failed (a HOSTNQN without a
            // NUL is not the SUBNQN's fault).
            let offset = match e {
                SpecError::NotTerminated { offset, .. } | SpecError::NotUtf8 { offset } => offset,
                _ => data_off::SUBNQN,
            };
            return invalid_param(true, offset);
        }
    };
    let target = ctx.target.clone();
    // A subsystem not exported on this port is as unknown here, as with
    // nvmet (`nvmet_find_get_subsys(req->port, ..)`), for I/O queues too.
    let Some(subsys) = target.subsystem_on_port(&d.subnqn, ctx.port_id) else {
        if target.subsystem(&d.subnqn).is_some() {
            warn!(subnqn = %d.subnqn, port_id = ctx.port_id, "Connect to a subsystem not exported on this port");
        } else {
            warn!(subnqn = %d.subnqn, "Connect to unknown subsystem");
        }
        return invalid_param(true, data_off::SUBNQN);
    };
    // Only a new association is checked (nvmet_alloc_ctrl; an I/O queue's
    // nvmet_ctrl_find_get is not): a host a reload removed keeps the
    // controller it has, I/O queues included, until it disconnects.
    if cmd.qid == 0 && !subsys.host_allowed(&d.hostnqn) {
        warn!(hostnqn = %d.hostnqn, subnqn = %d.subnqn, "host not allowed for subsystem");
        return Response {
            status: Status::CONNECT_INVALID_HOST.with_dnr(),
            result: invalid_param_dw0(true, data_off::HOSTNQN as u16) as u64,
            ..Default::default()
        };
    }
    let limits = &target.limits;
    if cmd.qid == 0 {
        if cmd.sqsize == 0 || cmd.queue_entries() > ADMIN_QUEUE_ENTRIES {
            warn!(
                sqsize = cmd.sqsize,
                "admin Connect SQSIZE out of range (limit {ADMIN_QUEUE_ENTRIES} entries)"
            );
            return invalid_param(false, fabrics_off::SQSIZE);
        }
        let kato = if subsys.discovery && cmd.kato_ms == 0 { DISCOVERY_KATO_MS } else { cmd.kato_ms };
        // KATO is kept in whole seconds, rounded up, as nvmet_alloc_ctrl does
        // (`ctrl->kato = DIV_ROUND_UP(kato, 1000)`) and as Set Features KATO
        // already does here: the timer then matches KAS (1 s) and what Get
        // Features KATO reports.
        let kato = kato.div_ceil(1000).saturating_mul(1000);
        // The subsystem's own limit (nvmet's attr_qid_max) applies below the
        // target's; Set Features Number of Queues reports it.
        let max_qid = if subsys.discovery { 0 } else { subsys.io_queue_limit(limits.max_io_queues) };
        let (hostnqn, hostid, port) = (d.hostnqn.clone(), d.hostid, ctx.port_id);
        let keys = subsys.host_keys(&d.hostnqn);
        let Some(ctrl) = target.create_controller_in(subsys.cntlids.clone(), |id| {
            Controller::new(id, subsys.clone(), hostnqn, hostid, port, kato, max_qid)
                .with_host_keys(keys)
                .with_host_addr(ctx.peer_addr)
                .with_port_params(ctx.params)
        }) else {
            // nvmet_alloc_ctrl: Controller Busy when its ida range is used up.
            warn!(subnqn = %subsys.nqn, cntlids = ?subsys.cntlids, "no free controller ID in the subsystem's range");
            return Status::CONNECT_CTRL_BUSY.with_dnr().into();
        };
        let auth = ctrl.host_keys().is_some();
        info!(cntlid = ctrl.cntlid, subnqn = %subsys.nqn, hostnqn = %d.hostnqn, kato_ms = kato, auth, "controller created");
        let cntlid = ctrl.cntlid;
        ctx.ctrl = Some(ctrl);
        ctx.qid = Some(0);
        ctx.sqsize = cmd.sqsize;
        ctx.sqflow_disabled = cmd.disable_sqflow();
        return connected(ctx, cntlid, auth);
    }

    // I/O queue: join the host's existing controller of this subsystem.
    let ctrl = match target.controller(d.cntlid) {
        Some(c) if c.subsys.nqn == subsys.nqn && c.hostnqn == d.hostnqn && c.hostid == d.hostid => c,
        _ => {
            warn!(cntlid = d.cntlid, "I/O Connect for unknown controller");
            return invalid_param(true, data_off::CNTLID);
        }
    };
    if cmd.qid > ctrl.max_qid {
        warn!(qid = cmd.qid, max_qid = ctrl.max_qid, "I/O Connect beyond the queue limit");
        return invalid_param(false, fabrics_off::QID);
    }
    // nvmet_install_queue: SQSIZE 0, then a QID already connected, then SQSIZE above MQES.
    if cmd.sqsize == 0 {
        warn!("I/O Connect with SQSIZE 0");
        return invalid_param(false, fabrics_off::SQSIZE);
    }
    if !ctrl.add_io_queue(cmd.qid) {
        warn!(qid = cmd.qid, "I/O queue already connected");
        return Status::CMD_SEQ_ERROR.with_dnr().into();
    }
    // MQES is the controller's (nvmet: `NVME_CAP_MQES(ctrl->cap)`, from
    // the admin queue's port).
    let max_entries = ctrl.port_params.max_queue_entries(limits);
    if cmd.queue_entries() > max_entries {
        warn!(
            sqsize = cmd.sqsize,
            limit = max_entries,
            port_id = ctrl.port_id,
            "I/O Connect SQSIZE above MQES"
        );
        ctrl.remove_io_queue(cmd.qid);
        return invalid_param(false, fabrics_off::SQSIZE);
    }
    info!(cntlid = ctrl.cntlid, qid = cmd.qid, entries = cmd.queue_entries(), "I/O queue connected");
    let (cntlid, auth) = (ctrl.cntlid, ctrl.host_keys().is_some());
    ctx.ctrl = Some(ctrl);
    ctx.qid = Some(cmd.qid);
    ctx.sqsize = cmd.sqsize;
    ctx.sqflow_disabled = cmd.disable_sqflow();
    connected(ctx, cntlid, auth)
}

/// The Connect response: CNTLID, and AUTHREQ.ATR when the host must
/// authenticate. nvmet 6.12 sets ATR on every queue of such a host, admin and
/// I/O (`nvmet_connect_result`; only secure channel concatenation, which
/// needs TLS, spares the I/O queues), and the Linux host then authenticates
/// each queue (`nvmf_connect_io_queue`).
fn connected(ctx: &mut QueueCtx, cntlid: u16, auth: bool) -> Response {
    ctx.auth = super::auth::QueueAuth::after_connect(auth);
    let atr = if auth { nvmeof_common::auth::CONNECT_AUTHREQ_ATR } else { 0 };
    Response::result((cntlid as u32 | atr) as u64)
}

/// CAP as reported by this target (reference §4.6). CSS: the NVM command
/// set and I/O command sets (bit 6), as nvmet's `nvmet_init_cap`: a host
/// then enables the controller with CC.CSS 110b and learns each
/// namespace's command set from its CSI descriptor, which a zoned
/// namespace needs.
pub fn cap(ctx: &QueueCtx) -> Cap {
    // The controller's port, as nvmet_init_cap's `ctrl->port->max_queue_size`.
    let params = ctx.ctrl.as_ref().map_or(ctx.params, |c| c.port_params);
    let mqes = (params.max_queue_entries(&ctx.target.limits) - 1).min(0xFFFF) as u16;
    Cap(0)
        .with_mqes(mqes)
        .with_cqr(true)
        .with_to(15)
        .with_css(Cap::CSS_NVM | Cap::CSS_IOCS)
        .with_mpsmin(0)
        .with_mpsmax(0)
}

/// ATTRIB bit 0: an 8-byte access. nvmet looks at this bit alone and ignores
/// the reserved ones (`attrib & 1` in `nvmet_execute_prop_get` / `_set`).
const ATTRIB_8_BYTES: u8 = 1 << 0;

/// Property Get (nvmet `nvmet_execute_prop_get`): CAP only as 8 bytes, the others as 4.
fn property_get(ctx: &QueueCtx, sqe: &Sqe) -> Response {
    let cmd = PropertyGet::from_sqe(sqe);
    let ctrl = ctx.ctrl.as_ref().expect("parse checked the queue is connected");
    let regs = ctrl.regs();
    let v = match (cmd.offset, cmd.attrib & ATTRIB_8_BYTES != 0) {
        (PropertyOffset::CAP, true) => cap(ctx).0,
        (PropertyOffset::VS, false) => super::admin::VERSION as u64,
        (PropertyOffset::CC, false) => regs.cc as u64,
        (PropertyOffset::CSTS, false) => regs.csts as u64,
        _ => return Status::INVALID_FIELD.with_dnr().into(),
    };
    Response::result(v)
}

/// Property Set: only CC, only 4 bytes (nvmet `nvmet_execute_prop_set`).
fn property_set(ctx: &QueueCtx, sqe: &Sqe) -> Response {
    let cmd = PropertySet::from_sqe(sqe);
    if cmd.offset != PropertyOffset::CC || cmd.attrib & ATTRIB_8_BYTES != 0 {
        return Status::INVALID_FIELD.with_dnr().into();
    }
    let ctrl = ctx.ctrl.as_ref().expect("parse checked the queue is connected");
    ctrl.set_cc(cmd.value as u32);
    Response::status(Status::SUCCESS)
}
