//! NVM I/O commands (nvmet `io-cmd-file.c` / `io-cmd-bdev.c`; reference §6):
//! Read, Write (+FUA), Compare, Flush, Write Zeroes (+deallocate), Dataset
//! Management (deallocate), Copy (format 0; SPDK's, as nvmet has none);
//! Reservation Register, Report, Acquire and Release on namespaces with
//! reservations (nvmet `pr.c`, [`crate::core::reservation`]); Zone Append,
//! Zone Management Send and Receive on zoned namespaces (nvmet `zns.c`,
//! [`crate::core::zoned`]), whose writes go to their zone's write pointer.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::spec::copy::{self, CopyCmd, COPY_MAX_RANGES};
use nvmeof_common::spec::dsm::DSM_RANGE_LEN;
use nvmeof_common::spec::reservation::{
    AcquireAction, RegisterAction, ReleaseAction, ReservationCmd, ReservationKeys, STATUS_EXT_HEADER_LEN,
};
use nvmeof_common::spec::zns::{ZoneMgmtRecvCmd, ZoneMgmtSendCmd, ZoneRecvAction, ZONE_REPORT_HEADER_LEN};
use nvmeof_common::spec::DsmRange;
use nvmeof_common::{Sqe, Status};
use tracing::{info, warn};

use super::{complete, expect_len, Exec, Pending, QueueCtx, Response};
use crate::backend::{Backend, IoCompletion, IoOp};
use crate::core::reservation::Access;
use crate::core::target::Limits;
use crate::core::zoned::ZoneMgmt;
use crate::core::{Controller, Namespace};

/// DSM CDW11 bit 2: Attribute - Deallocate.
const DSM_AD: u32 = 1 << 2;
/// Write Zeroes CDW12 bit 25: Deallocate.
const WZ_DEAC: u32 = 1 << 25;

/// Checks SLBA/NLB against the namespace; returns (byte offset, byte length).
pub(super) fn lba_range(ns: &Namespace, sqe: &Sqe) -> Result<(u64, u64), Status> {
    let slba = sqe.slba();
    let nlb = sqe.nlb() as u64 + 1;
    match slba.checked_add(nlb) {
        Some(end) if end <= ns.blocks() => Ok((slba << ns.block_shift, nlb << ns.block_shift)),
        _ => Err(Status::LBA_RANGE.with_dnr()),
    }
}

/// Invalid Field (with a warn line saying `what`) for `len` bytes past MDTS.
fn within_mdts(ctx: &QueueCtx, len: u64, what: &str) -> Result<(), Status> {
    let max = ctx.target.limits.max_transfer() as u64;
    if len > max {
        warn!(len, max, "{what}");
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    Ok(())
}

/// Parse step for I/O commands: namespace, ANA state, write protection, opcode, SGL length equal to the
/// transfer length (nvmet `nvmet_check_transfer_len` → Data SGL Length
/// Invalid), LBA range, transfer size against MDTS.
pub fn parse(ctx: &QueueCtx, ctrl: &Controller, sqe: &Sqe) -> Result<(), Status> {
    ctrl.with_namespace(sqe.nsid(), |ns| parse_on(ctx, ctrl, ns, sqe))
        .unwrap_or(Err(Status::INVALID_NS.with_dnr()))
}

/// nvmet `nvmet_io_cmd_check_access`: on a write-protected namespace only
/// Read and Flush run (and Verify, which nvmet lacks: it changes nothing,
/// NVMe Base 2.0 §8.13); everything else (Compare and unknown opcodes
/// included, as nvmet checks before the opcode) is Namespace is Write
/// Protected, without DNR (the host may retry once protection is lifted).
pub(super) fn check_access(ns: &Namespace, sqe: &Sqe) -> Result<(), Status> {
    match IoOpcode(sqe.opcode()) {
        _ if !ns.write_protected() => Ok(()),
        // Zone Management Receive changes nothing either.
        IoOpcode::READ | IoOpcode::FLUSH | IoOpcode::VERIFY | IoOpcode::ZONE_MGMT_RECV => Ok(()),
        _ => Err(Status::NS_WRITE_PROTECTED),
    }
}

/// nvmet `nvmet_pr_check_cmd_access`, which `nvmet_parse_io_cmd` runs once
/// the opcode is known and before the execute step looks at lengths and
/// ranges: a reservation another host holds may refuse the command. A
/// command let through counts as in flight for Preempt and Abort until it
/// completes (nvmet `nvmet_pr_get_ns_pc_ref`; Internal Error while a
/// Preempt and Abort waits for its host): its guard waits in
/// `ctx.inflight` for the queue to keep it with the command.
fn check_reservation(
    ctx: &QueueCtx,
    ctrl: &Controller,
    ns: &Namespace,
    access: Access,
) -> Result<(), Status> {
    let Some(r) = &ns.reservations else { return Ok(()) };
    let guard = r.admit(&ctrl.hostid, access, &mut ctx.inflight_cache.borrow_mut())?;
    ctx.inflight.set(Some(guard));
    Ok(())
}

fn is_reservation_cmd(op: IoOpcode) -> bool {
    matches!(
        op,
        IoOpcode::RESV_REGISTER | IoOpcode::RESV_REPORT | IoOpcode::RESV_ACQUIRE | IoOpcode::RESV_RELEASE
    )
}

/// Parse step of the reservation commands, in nvmet's order: Acquire with
/// IEKEY or an undefined type and Release with IEKEY are Invalid Field;
/// Report without the extended data structure is Host Identifier
/// Inconsistent Format (host identifiers are 128 bits on fabrics), and
/// shorter than its 64-byte header Invalid Field. The data must hold what
/// the command carries or asks for (Data SGL Length Invalid, as nvmet's
/// `nvmet_copy_{from,to}_sgl` fail) and fit MDTS (Invalid Field); longer
/// is allowed, as nvmet reads or fills only the start.
fn parse_reservation(ctx: &QueueCtx, sqe: &Sqe) -> Result<(), Status> {
    let cmd = ReservationCmd::from_sqe(sqe);
    let invalid_field = Status::INVALID_FIELD.with_dnr();
    match cmd.opcode {
        IoOpcode::RESV_ACQUIRE if cmd.iekey() || !cmd.rtype().is_valid() => return Err(invalid_field),
        IoOpcode::RESV_RELEASE if cmd.iekey() => return Err(invalid_field),
        IoOpcode::RESV_REPORT if !cmd.eds() => return Err(Status::HOST_ID_INCONSIST.with_dnr()),
        IoOpcode::RESV_REPORT if cmd.report_len() < STATUS_EXT_HEADER_LEN as u64 => {
            return Err(invalid_field)
        }
        _ => {}
    }
    let sgl_len = sqe.sgl().length as u64;
    if sgl_len < cmd.data_len() {
        return Err(Status::SGL_INVALID_DATA.with_dnr());
    }
    within_mdts(ctx, sgl_len, "reservation command data larger than MDTS")
}

fn parse_on(ctx: &QueueCtx, ctrl: &Controller, ns: &Namespace, sqe: &Sqe) -> Result<(), Status> {
    // nvmet_parse_io_cmd: the namespace, then its ANA state through this
    // port, then write protection, then the opcode, then the reservation.
    ctx.ana.check_io(ns.ana_group())?;
    check_access(ns, sqe)?;
    let op = IoOpcode(sqe.opcode());
    let sgl_len = sqe.sgl().length as u64;
    match op {
        IoOpcode::READ | IoOpcode::WRITE | IoOpcode::COMPARE => {
            let access = if op == IoOpcode::WRITE { Access::Write } else { Access::Read };
            check_reservation(ctx, ctrl, ns, access)?;
            parse_blocks_data(ctx, ns, sqe, sgl_len, "transfer larger than MDTS")
        }
        IoOpcode::FLUSH | IoOpcode::WRITE_ZEROES | IoOpcode::DSM => {
            check_reservation(ctx, ctrl, ns, Access::Write)?;
            parse_write_group(ns, sqe, sgl_len)
        }
        IoOpcode::VERIFY => {
            // In the read command group for reservations (NVMe Base 2.0
            // §8.19); no data crosses the network, and the blocks are read
            // into a buffer as a Read's would be: VSL = MDTS.
            check_reservation(ctx, ctrl, ns, Access::Read)?;
            expect_len(sqe, 0)?;
            let (_, len) = lba_range(ns, sqe)?;
            within_mdts(ctx, len, "Verify larger than VSL (MDTS)")
        }
        IoOpcode::COPY => {
            // A write for reservations: it changes the destination's blocks
            // (NVMe Base 2.0 §8.19, Copy is in the write command group).
            check_reservation(ctx, ctrl, ns, Access::Write)?;
            parse_copy(ctx, sqe, sgl_len)
        }
        IoOpcode::ZONE_APPEND | IoOpcode::ZONE_MGMT_SEND | IoOpcode::ZONE_MGMT_RECV if ns.zones.is_some() => {
            parse_zoned(ctx, ctrl, ns, sqe, sgl_len)
        }
        // The opcodes are disjoint, so looking at the reservation commands
        // last answers as nvmet, which parses them first, and keeps the
        // check off the read and write path.
        _ if ns.reservations.is_some() && is_reservation_cmd(op) => parse_reservation(ctx, sqe),
        _ => Err(Status::INVALID_OPCODE.with_dnr()),
    }
}

/// The data of a command that moves its blocks (Read, Write, Compare,
/// Zone Append): the SGL length first, as nvmet_{file,bdev}_execute_rw call
/// nvmet_check_transfer_len before anything looks at the range, then the
/// range, then MDTS (Invalid Field, with a warn line saying `what`).
fn parse_blocks_data(
    ctx: &QueueCtx,
    ns: &Namespace,
    sqe: &Sqe,
    sgl_len: u64,
    what: &str,
) -> Result<(), Status> {
    let len = (sqe.nlb() as u64 + 1) << ns.block_shift;
    if sgl_len != len {
        return Err(Status::SGL_INVALID_DATA.with_dnr());
    }
    lba_range(ns, sqe)?;
    within_mdts(ctx, len, what)
}

/// Parse step of the Zoned Namespace commands on a zoned namespace (nvmet
/// `nvmet_bdev_zns_parse_io_cmd`; elsewhere they are Invalid Opcode, as
/// there): Zone Append as a Write ([`parse_blocks_data`]; ZASL 0 refers to
/// MDTS) in the write group for reservations; Zone
/// Management Send without data (Set Zone Descriptor Extension, the one
/// action with data, is refused) in the write group; Zone Management
/// Receive with the data NUMD asks for (nvmet `nvmet_check_transfer_len`:
/// Data SGL Length Invalid), within MDTS, in the read group.
fn parse_zoned(
    ctx: &QueueCtx,
    ctrl: &Controller,
    ns: &Namespace,
    sqe: &Sqe,
    sgl_len: u64,
) -> Result<(), Status> {
    match IoOpcode(sqe.opcode()) {
        IoOpcode::ZONE_APPEND => {
            check_reservation(ctx, ctrl, ns, Access::Write)?;
            parse_blocks_data(ctx, ns, sqe, sgl_len, "Zone Append larger than ZASL (MDTS)")
        }
        IoOpcode::ZONE_MGMT_SEND => {
            check_reservation(ctx, ctrl, ns, Access::Write)?;
            expect_len(sqe, 0)
        }
        _ => {
            check_reservation(ctx, ctrl, ns, Access::Read)?;
            if sgl_len != ZoneMgmtRecvCmd::from_sqe(sqe).data_len() {
                return Err(Status::SGL_INVALID_DATA.with_dnr());
            }
            within_mdts(ctx, sgl_len, "zone report larger than MDTS")
        }
    }
}

/// A write of the command's blocks (Write, Write Zeroes) on a zoned
/// namespace: it must start at its zone's write pointer, which moves past
/// it ([`crate::core::zoned::Zones::write`]).
#[inline]
fn zone_write(ns: &Namespace, sqe: &Sqe) -> Result<(), Status> {
    match &ns.zones {
        None => Ok(()),
        Some(z) => z.write(sqe.slba(), sqe.nlb() as u64 + 1, false).map(drop),
    }
}

/// Execute step of the Zoned Namespace commands: Zone Append writes at its
/// zone's write pointer and answers the LBA; Zone Management Send moves
/// zones (a Reset drops their blocks first, so they read as zeroes again);
/// Zone Management Receive reports them, after nvmet's checks in nvmet's
/// order (`nvmet_bdev_validate_zone_mgmt_recv`: SLBA, a buffer shorter than
/// the report header, an action other than Report Zones, as this target
/// has no zone descriptor extensions, Partial Report, ZRASF).
fn execute_zoned(ctx: &QueueCtx, ns: &Namespace, sqe: &Sqe, data: Bytes, tag: u32) -> Exec {
    let Some(zones) = &ns.zones else { return Status::INVALID_OPCODE.with_dnr().into() };
    let (op, pending) = match IoOpcode(sqe.opcode()) {
        IoOpcode::ZONE_APPEND => {
            let len = match lba_range(ns, sqe) {
                Ok((_, len)) => len,
                Err(s) => return s.into(),
            };
            let lba = match zones.write(sqe.slba(), sqe.nlb() as u64 + 1, true) {
                Ok(lba) => lba,
                Err(s) => return s.into(),
            };
            ns.io_stats.write(len);
            (IoOp::Write { offset: lba << ns.block_shift, data, fua: sqe.fua() }, Pending::ZoneAppend(lba))
        }
        IoOpcode::ZONE_MGMT_SEND => {
            let cmd = ZoneMgmtSendCmd::from_sqe(sqe);
            match zones.manage(cmd.action, cmd.slba, cmd.select_all) {
                Err(s) => return s.into(),
                Ok(ZoneMgmt::Done) => return Response::status(Status::SUCCESS).into(),
                Ok(ZoneMgmt::Reset { zones: which, ranges }) => {
                    (IoOp::Deallocate { ranges }, Pending::ZoneReset(zones.clone(), which))
                }
            }
        }
        _ => {
            let cmd = ZoneMgmtRecvCmd::from_sqe(sqe);
            let invalid_field = Status::INVALID_FIELD.with_dnr();
            let status = if cmd.slba >= ns.blocks() {
                Status::LBA_RANGE.with_dnr()
            } else if cmd.data_len() < ZONE_REPORT_HEADER_LEN as u64
                || cmd.action != ZoneRecvAction::REPORT
                || cmd.partial > 1
                || !cmd.filter.is_valid()
            {
                invalid_field
            } else {
                let report = zones.report(cmd.slba, cmd.filter, cmd.partial == 1, cmd.data_len() as usize);
                return Response::data(report).into();
            };
            return status.into();
        }
    };
    match ns.backend.submit(tag, op, &ctx.io) {
        Some(c) => Exec::Done(complete(pending, c)),
        None => Exec::Pending(pending),
    }
}

/// Flush, Write Zeroes and Dataset Management past their reservation check.
fn parse_write_group(ns: &Namespace, sqe: &Sqe, sgl_len: u64) -> Result<(), Status> {
    match IoOpcode(sqe.opcode()) {
        // nvmet_{bdev,file}_execute_flush / _write_zeroes: nvmet_check_transfer_len(req, 0)
        // comes first.
        IoOpcode::FLUSH => expect_len(sqe, 0),
        IoOpcode::WRITE_ZEROES => expect_len(sqe, 0).and_then(|()| lba_range(ns, sqe).map(|_| ())),
        _ => {
            // The SGL may be longer than the range list (Linux always sends 4 KiB).
            let nr = (sqe.cdw(10) & 0xFF) as u64 + 1;
            if sgl_len < nr * DSM_RANGE_LEN as u64 {
                return Err(Status::SGL_INVALID_DATA.with_dnr());
            }
            Ok(())
        }
    }
}

/// Largest Copy in bytes whatever MDTS says: the target holds all of a
/// Copy's source data before it writes the destination.
pub const COPY_MAX_BYTES: u32 = 8 << 20;

/// A namespace's Copy limits, as Identify Namespace reports them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CopyLimits {
    /// MSSRL: most blocks in one source range.
    pub mssrl: u16,
    /// MCL: most blocks in all source ranges together.
    pub mcl: u32,
    /// MSRC: most source ranges, 0's based.
    pub msrc: u8,
}

/// The Copy limits of a namespace with `block_shift`-sized blocks: a Copy
/// moves at most what one Write may carry (MDTS), and at most
/// [`COPY_MAX_BYTES`], as its source data is gathered in memory before the
/// one write to the destination; every range count NR can express.
pub fn copy_limits(block_shift: u32, limits: &Limits) -> CopyLimits {
    let mcl = (limits.max_transfer().min(COPY_MAX_BYTES) >> block_shift).max(1);
    CopyLimits { mssrl: mcl.min(u16::MAX as u32) as u16, mcl, msrc: (COPY_MAX_RANGES - 1) as u8 }
}

/// Parse step of Copy: descriptor format 0 only (OCFS bit 0; format 1
/// carries 64-bit guard protection information, which no namespace here
/// has) else Invalid Field; the data must hold the NR + 1 source ranges
/// (Data SGL Length Invalid, as for Dataset Management) and fit MDTS
/// (Invalid Field). Ranges and limits are checked once the ranges arrive.
fn parse_copy(ctx: &QueueCtx, sqe: &Sqe, sgl_len: u64) -> Result<(), Status> {
    let cmd = CopyCmd::from_sqe(sqe);
    if cmd.format() != 0 {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    if sgl_len < cmd.data_len() as u64 {
        return Err(Status::SGL_INVALID_DATA.with_dnr());
    }
    within_mdts(ctx, sgl_len, "copy source range list larger than MDTS")
}

/// A Copy past its parse step: the source ranges are read one after the
/// other, then their data is written to the destination in one Write (with
/// the command's FUA), so the destination gets the sources as they were
/// before the Copy even where they overlap it.
#[derive(Clone)]
pub struct CopyJob {
    backend: Arc<dyn Backend>,
    /// Source ranges in bytes: (offset, length).
    sources: Vec<(u64, u64)>,
    /// The next source range to read; past the last (`sources.len() + 1`):
    /// the write is in flight.
    next: usize,
    /// Data of the ranges read so far.
    read: Vec<Bytes>,
    /// Destination byte offset.
    dest: u64,
    fua: bool,
}

impl std::fmt::Debug for CopyJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyJob")
            .field("ranges", &self.sources.len())
            .field("next", &self.next)
            .field("dest", &self.dest)
            .finish()
    }
}

/// Execute step of Copy: the limits (Command Size Limits Exceeded: a range
/// longer than MSSRL, all ranges longer than MCL), then every range and the
/// destination against the namespace (LBA Out of Range, with the range's
/// SLBA in the error log), then the first read.
fn execute_copy(ctx: &QueueCtx, ns: &Namespace, sqe: &Sqe, data: &[u8], tag: u32) -> Exec {
    let cmd = CopyCmd::from_sqe(sqe);
    let Ok(ranges) = copy::decode_ranges(data, cmd.num_ranges()) else {
        return Status::SGL_INVALID_DATA.with_dnr().into();
    };
    let limits = copy_limits(ns.block_shift, &ctx.target.limits);
    let blocks = ns.blocks();
    let mut total = 0u64;
    let mut sources = Vec::with_capacity(ranges.len());
    for r in &ranges {
        let n = r.blocks() as u64;
        total += n;
        if n > limits.mssrl as u64 || total > limits.mcl as u64 {
            warn!(
                range_blocks = n,
                mssrl = limits.mssrl,
                total_blocks = total,
                mcl = limits.mcl,
                "copy larger than the namespace's limits"
            );
            return Status::CMD_SIZE_LIMIT.with_dnr().into();
        }
        if r.slba.checked_add(n).is_none_or(|e| e > blocks) {
            let status = Status::LBA_RANGE.with_dnr();
            return Response { error_lba: Some(r.slba), ..Response::status(status) }.into();
        }
        sources.push((r.slba << ns.block_shift, n << ns.block_shift));
    }
    if cmd.sdlba.checked_add(total).is_none_or(|e| e > blocks) {
        return Status::LBA_RANGE.with_dnr().into();
    }
    // On a zoned namespace the destination is written as one Write would be.
    if let Some(z) = &ns.zones {
        if let Err(s) = z.write(cmd.sdlba, total, false) {
            return s.into();
        }
    }
    // A host write command for SMART; its blocks never crossed the wire.
    ns.io_stats.write(0);
    let job = CopyJob {
        backend: ns.backend.clone(),
        sources,
        next: 0,
        read: Vec::with_capacity(ranges.len()),
        dest: cmd.sdlba << ns.block_shift,
        fua: cmd.fua(),
    };
    copy_step(ctx, Box::new(job), tag, None)
}

/// Moves a Copy on by its last operation's completion `done` (`None`: not
/// started): the next source read, the write once all are read, the
/// response once the write completes or an operation fails. Called by the
/// queue for a [`Pending::Copy`] completion; operations a backend finishes
/// inline are followed at once.
pub fn copy_step(ctx: &QueueCtx, mut job: Box<CopyJob>, tag: u32, mut done: Option<IoCompletion>) -> Exec {
    // Bounded: one pass per source range plus the write.
    for _ in 0..=job.sources.len() + 1 {
        if let Some(c) = done.take() {
            if !c.status.is_success() {
                return Response::status(c.status).into();
            }
            if job.next > job.sources.len() {
                return Response::status(Status::SUCCESS).into();
            }
            // A short read would shift every later range in the destination.
            if c.data.len() as u64 != job.sources[job.next - 1].1 {
                tracing::error!(
                    got = c.data.len(),
                    want = job.sources[job.next - 1].1,
                    "copy: short source read"
                );
                return Status::INTERNAL.with_dnr().into();
            }
            job.read.push(c.data);
        }
        let op = match job.sources.get(job.next) {
            Some(&(offset, len)) => IoOp::Read { offset, len: len as usize },
            None => {
                let data = match job.read.len() {
                    1 => job.read.pop().unwrap_or_default(),
                    _ => {
                        let len = job.sources.iter().map(|&(_, n)| n as usize).sum();
                        let mut all = BytesMut::with_capacity(len);
                        job.read.drain(..).for_each(|b| all.extend_from_slice(&b));
                        all.freeze()
                    }
                };
                IoOp::Write { offset: job.dest, data, fua: job.fua }
            }
        };
        job.next += 1;
        match submit_step(ctx, job.backend.as_ref(), tag, op) {
            Some(c) => done = Some(c),
            None => return Exec::Pending(Pending::Copy(job)),
        }
    }
    Status::INTERNAL.with_dnr().into()
}

/// Submits one operation of a multi-step command (Copy, Compare and Write)
/// that may run from a completion handler: its completion if the backend
/// finished it inline, else `None` with the queue's ring submitted, as its
/// loop's next pass may come only after the queue sleeps.
pub(super) fn submit_step(ctx: &QueueCtx, backend: &dyn Backend, tag: u32, op: IoOp) -> Option<IoCompletion> {
    let c = backend.submit(tag, op, &ctx.io);
    if c.is_none() {
        if let Some(r) = &ctx.io.ring {
            r.submit();
        }
    }
    c
}

/// Execute step: hands the operation to the namespace's backend.
/// `throttle`: the namespace's rate limits apply; false for a command they
/// held back ([`Pending::Throttled`]) whose time has come, which runs
/// without reserving again.
pub fn execute(
    ctx: &mut QueueCtx,
    ctrl: &Controller,
    sqe: &Sqe,
    data: Bytes,
    tag: u32,
    throttle: bool,
) -> Exec {
    ctrl.with_namespace(sqe.nsid(), |ns| execute_on(ctx, ctrl, ns, sqe, data, tag, throttle))
        .unwrap_or_else(|| Status::INVALID_NS.with_dnr().into())
}

/// The namespace's rate limits ([`crate::core::qos`]): how long command
/// `sqe` must wait, if it must. Every I/O command counts against the
/// command rate but Flush and the reservation commands (SPDK counts the
/// I/O it submits to the bdev); Read, Write and Compare count their data
/// against the bandwidth.
fn qos_wait(ns: &Namespace, sqe: &Sqe) -> Option<std::time::Duration> {
    let bytes = match IoOpcode(sqe.opcode()) {
        IoOpcode::FLUSH => return None,
        op if is_reservation_cmd(op) => return None,
        IoOpcode::READ | IoOpcode::WRITE | IoOpcode::COMPARE | IoOpcode::ZONE_APPEND => {
            sqe.sgl().length as u64
        }
        _ => 0,
    };
    ns.qos.reserve(bytes)
}

fn execute_on(
    ctx: &mut QueueCtx,
    ctrl: &Controller,
    ns: &Namespace,
    sqe: &Sqe,
    data: Bytes,
    tag: u32,
    throttle: bool,
) -> Exec {
    // Again: protection may have been set while the data was in flight.
    if let Err(s) = check_access(ns, sqe) {
        return s.into();
    }
    if throttle && ns.qos.active() {
        if let (Some(wait), Ok(rt)) = (qos_wait(ns, sqe), tokio::runtime::Handle::try_current()) {
            // Held in its slot, and woken through the queue's channel when
            // its time comes (a closed queue drops the wake).
            let sink = ctx.io.sink.clone();
            rt.spawn(async move {
                tokio::time::sleep(wait).await;
                let _ = sink.send(IoCompletion::status(tag, Status::SUCCESS));
            });
            return Exec::Pending(Pending::Throttled(data));
        }
    }
    let (op, pending) = match IoOpcode(sqe.opcode()) {
        IoOpcode::READ | IoOpcode::WRITE | IoOpcode::COMPARE | IoOpcode::WRITE_ZEROES | IoOpcode::VERIFY => {
            // Re-checked: the namespace may have shrunk while data was in flight.
            let (offset, len) = match lba_range(ns, sqe) {
                Ok(r) => r,
                Err(s) => return s.into(),
            };
            // SMART's host commands and data units are counted in each arm,
            // as the command goes to the backend (a backend failure after
            // this is rare).
            match IoOpcode(sqe.opcode()) {
                IoOpcode::READ => {
                    ns.io_stats.read(len);
                    if let Some(r) = ns.backend.read_shared(offset, len as usize, ctx.data_digest) {
                        return match r {
                            Ok(r) => Response {
                                data: r.data,
                                data_crc: r.crc32c,
                                shared: true,
                                ..Response::status(Status::SUCCESS)
                            }
                            .into(),
                            Err(s) => s.into(),
                        };
                    }
                    let buf = ctx.take_read_buf(len as usize);
                    return match ns.backend.read_into(tag, offset, buf, &ctx.io) {
                        Some(c) => Exec::Done(complete(Pending::Plain, c)),
                        None => Exec::Pending(Pending::Plain),
                    };
                }
                IoOpcode::WRITE => {
                    if let Err(s) = zone_write(ns, sqe) {
                        return s.into();
                    }
                    ns.io_stats.write(len);
                    (IoOp::Write { offset, data, fua: sqe.fua() }, Pending::Plain)
                }
                IoOpcode::COMPARE => {
                    ns.io_stats.read(len);
                    (IoOp::Read { offset, len: len as usize }, Pending::Compare(data))
                }
                IoOpcode::VERIFY => {
                    // SMART counts Verify with Read and Compare (NVMe Base 2.0
                    // §5.16.1.3: host read commands, data units read).
                    ns.io_stats.read(len);
                    // A RAM namespace has nothing to check beyond the range; its
                    // shared read costs no copy.
                    if let Some(r) = ns.backend.read_shared(offset, len as usize, false) {
                        return r.map_or_else(Exec::from, |_| Response::status(Status::SUCCESS).into());
                    }
                    (IoOp::Read { offset, len: len as usize }, Pending::Verify)
                }
                _ => {
                    if let Err(s) = zone_write(ns, sqe) {
                        return s.into();
                    }
                    ns.io_stats.write(0);
                    let deallocate = sqe.cdw(12) & WZ_DEAC != 0;
                    (IoOp::WriteZeroes { offset, len, deallocate }, Pending::Plain)
                }
            }
        }
        IoOpcode::FLUSH => (IoOp::Flush, Pending::Plain),
        IoOpcode::DSM => {
            if sqe.cdw(11) & DSM_AD == 0 {
                // Only deallocate has an effect; other attributes are hints.
                return Response::status(Status::SUCCESS).into();
            }
            let nr = (sqe.cdw(10) & 0xFF) as usize + 1;
            let mut ranges = Vec::with_capacity(nr);
            for chunk in data.chunks_exact(DSM_RANGE_LEN).take(nr) {
                let Ok(r) = DsmRange::decode(chunk) else {
                    return Status::SGL_INVALID_DATA.with_dnr().into();
                };
                let end = r.slba.checked_add(r.nlb as u64);
                if end.is_none_or(|e| e > ns.blocks()) {
                    // The range's SLBA in the error log, as nvmet's error_slba.
                    let status = Status::LBA_RANGE.with_dnr();
                    return Response { error_lba: Some(r.slba), ..Response::status(status) }.into();
                }
                if r.nlb > 0 {
                    ranges.push((r.slba << ns.block_shift, (r.nlb as u64) << ns.block_shift));
                }
            }
            (IoOp::Deallocate { ranges }, Pending::Plain)
        }
        IoOpcode::COPY => return execute_copy(ctx, ns, sqe, &data, tag),
        IoOpcode::ZONE_APPEND | IoOpcode::ZONE_MGMT_SEND | IoOpcode::ZONE_MGMT_RECV if ns.zones.is_some() => {
            return execute_zoned(ctx, ns, sqe, data, tag);
        }
        op if ns.reservations.is_some() && is_reservation_cmd(op) => {
            return execute_reservation(ctx, ctrl, ns, sqe, &data, tag);
        }
        _ => return Status::INVALID_OPCODE.with_dnr().into(),
    };
    match ns.backend.submit(tag, op, &ctx.io) {
        Some(c) => Exec::Done(complete(pending, c)),
        None => Exec::Pending(pending),
    }
}

/// Execute step of a reservation command accepted by [`parse_reservation`]
/// on a namespace with reservations: the action on its state as the
/// connecting host (Connect HOSTID), then the notices it owes other hosts.
/// Report answers the whole SGL length, the structure zero padded. A
/// Preempt and Abort that removed hosts completes once their commands in
/// flight on the namespace have (nvmet `nvmet_pr_do_abort`).
fn execute_reservation(
    ctx: &QueueCtx,
    ctrl: &Controller,
    ns: &Namespace,
    sqe: &Sqe,
    data: &[u8],
    tag: u32,
) -> Exec {
    let Some(r) = &ns.reservations else {
        return Status::INVALID_OPCODE.with_dnr().into();
    };
    let cmd = ReservationCmd::from_sqe(sqe);
    let host = &ctrl.hostid;
    if cmd.opcode == IoOpcode::RESV_REPORT {
        let mut b = r.report().encode(cmd.report_len() as usize);
        b.resize(sqe.sgl().length as usize, 0);
        return Response::data(b).into();
    }
    let keys = match cmd.opcode {
        IoOpcode::RESV_RELEASE => ReservationKeys::decode_release(data),
        _ => ReservationKeys::decode(data),
    };
    let Ok(k) = keys else {
        return Status::SGL_INVALID_DATA.with_dnr().into();
    };
    let mut preempted = Vec::new();
    let outcome = match cmd.opcode {
        IoOpcode::RESV_REGISTER => {
            r.register(host, RegisterAction(cmd.action()), cmd.iekey(), (k.current, k.other), cmd.cptpl())
        }
        IoOpcode::RESV_ACQUIRE => {
            let action = AcquireAction(cmd.action());
            r.acquire(host, action, cmd.rtype(), k.current, k.other).map(|a| {
                if action == AcquireAction::PREEMPT_AND_ABORT {
                    preempted = a.preempted;
                }
                a.notices
            })
        }
        _ => r.release(host, ReleaseAction(cmd.action()), cmd.rtype(), k.current),
    };
    let notices = match outcome {
        Ok(n) => n,
        Err(s) => return s.into(),
    };
    ctrl.subsys.reservation_notices(ns.nsid, &notices);
    if preempted.is_empty() {
        return Response::status(Status::SUCCESS).into();
    }
    // Fenced after the state changed, as nvmet: a command checked before it
    // is waited for, one checked after meets the new reservation. The
    // completion comes through the queue's channel, like a backend's, from
    // whichever queue finishes the preempted hosts' last command.
    let sink = ctx.io.sink.clone();
    let queues = r.abort(
        &preempted,
        Box::new(move || {
            let _ = sink.send(IoCompletion::status(tag, Status::SUCCESS));
        }),
    );
    if queues > 0 {
        info!(
            nsid = ns.nsid,
            hosts = preempted.len(),
            queues,
            "preempt and abort: waiting for the preempted hosts' commands in flight; their new commands fail meanwhile"
        );
    }
    Exec::Pending(Pending::Plain)
}
