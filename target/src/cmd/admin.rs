//! Admin commands of I/O and discovery controllers, like nvmet's `admin-cmd.c`
//! and the admin half of `discovery.c` (reference §5, §7).
//!
//! [`parse`] runs before any data is solicited: it checks the controller state
//! (I/O controllers: Command Sequence Error before CC.EN/CSTS.RDY; discovery
//! controllers: Invalid Opcode before CSTS.RDY), the opcode (Invalid Opcode for
//! anything this controller type does not implement) and the SGL length
//! (Data SGL Length Invalid where nvmet requires an exact length). [`execute`]
//! builds the reply.
//!
//! Supported: Identify (CNS 00h/01h/02h/03h/05h/06h/07h/08h; discovery: 01h),
//! Get Log Page (00h/01h/02h/03h/04h/05h/0Ch/80h; discovery: 70h) honouring LPO and
//! NUMD, Set/Get Features (07h, 0Bh, 0Fh, 82h, 83h, 84h, 06h Get, 81h Get; discovery: 0Bh, 0Fh),
//! Keep Alive, Asynchronous Event Request and Abort ("not aborted").

use std::sync::Arc;

use bytes::Bytes;
use nvmeof_common::opcode::{AdminOpcode, IoOpcode};
use nvmeof_common::spec::copy::{OCFS_FORMAT0, ONCS_COPY};
use nvmeof_common::spec::features::{
    aec, write_protect, FeatureId, GetFeaturesCmd, NumQueues, SetFeaturesCmd, ABORT_DW0_NOT_ABORTED,
};
use nvmeof_common::spec::identify::{
    ctratt, encode_ns_desc_list, encode_ns_list, Csi, IdentifyCtrlNvm, IdentifyNsIndep, LbaFormat,
    NsIdDescriptor, PowerStateDescriptor, IDENTIFY_DATA_LEN, ONCS_WRITE_ZEROES,
};
use nvmeof_common::spec::log::{
    effects, encode_supported_logs, log_window, AnaGroupDesc, AnaLog, AnaState, ChangedNsList,
    CommandEffectsLog, FwSlotLog, SmartLog, ANA_LSP_RGO, LOG_4K,
};
use nvmeof_common::spec::property::{Csts, Vs};
use nvmeof_common::spec::reservation::rescap;
use nvmeof_common::spec::zns::{IdentifyCtrlZns, IdentifyNsZns, OZCS_RAZB};
use nvmeof_common::spec::{
    Cns, GetLogPageCmd, IdentifyCmd, IdentifyController, IdentifyNamespace, LogPageId,
};
use nvmeof_common::{Sqe, Status};
use tracing::{debug, info};

use super::{discovery, expect_len, io, Exec, Pending, QueueCtx, Response, WriteProtectFlush};
use crate::backend::{IoHints, IoOp};
use crate::core::ana::DEFAULT_ANA_GROUP;
use crate::core::controller::{AEC_ANA_CHANGE, AEC_DISC_CHANGE, MAX_AERS};
use crate::core::error_log::ERROR_LOG_ENTRIES;
use crate::core::io_stats::IoTotals;
use crate::core::target::Limits;
use crate::core::{Controller, Namespace, Target};

/// Version reported in Identify Controller VER and the VS property: NVMe 1.3.0.
/// Below 2.0 the Linux host skips CNS 08h and needs no CSI descriptor, which
/// keeps it on its simplest namespace-scan path (reference §4.6).
pub const VERSION: u32 = Vs::V1_3.0;
/// Firmware revision (Identify FR, firmware slot 1): the crate version.
pub const FIRMWARE_REVISION: &str = env!("CARGO_PKG_VERSION");
/// NN and MNAN: the highest NSID hosts should expect (nvmet `NVMET_MAX_NAMESPACES`).
pub const MAX_NAMESPACES: u32 = 1024;
/// Keep Alive Support: 1 s granularity (units of 100 ms, nvmet `NVMET_KAS`).
pub const KAS: u16 = 10;
/// Async event configuration bits an I/O controller accepts: SMART critical
/// warnings 4:0 (never raised), Namespace Attribute Notices and ANA Change
/// Notices (nvmet `NVMET_AEN_CFG_ALL`).
pub const IO_AEC_SUPPORTED: u32 = 0x1F | aec::NS_ATTR | aec::ANA_CHANGE;
/// Async event configuration bits a discovery controller accepts.
pub const DISC_AEC_SUPPORTED: u32 = aec::DISC_CHANGE;

/// CTRATT: 128-bit host identifier (bit 0) and traffic-based keep-alive
/// (bit 6, TBKAS: the queue restarts the timer on every command), as nvmet.
const CTRATT: u32 = ctratt::HOST_ID_128 | ctratt::TBKAS;
/// CMIC: multi-port (bit 0) and multi-controller (bit 1) subsystem, ANA
/// reporting (bit 3), as nvmet.
const CMIC_MULTI_PORT_CTRL_ANA: u8 = 0x0B;
/// ANACAP: every state reportable (optimized, non-optimized, inaccessible,
/// persistent loss, change: bits 4:0), as nvmet.
const ANACAP: u8 = 0x1F;
/// ANATT: seconds a group may stay in the change state (nvmet: 10).
const ANATT: u8 = 10;
/// ONCS: Compare (bit 0), Dataset Management (bit 2), Write Zeroes (bit 3),
/// Reservations (bit 5; nvmet sets it whether or not a namespace has them
/// enabled, and RESCAP says which do), Verify (bit 7; nvmet has none),
/// Copy (bit 8; nvmet has no Copy, SPDK sets it where the bdev can copy;
/// every backend here can).
const ONCS: u16 = (1 << 0) | (1 << 2) | ONCS_WRITE_ZEROES | (1 << 5) | ONCS_VERIFY | ONCS_COPY;
/// FUSES bit 0: the Compare and Write fused operation.
pub const FUSES_COMPARE_WRITE: u16 = 1 << 0;
/// ONCS bit 7: Verify.
pub const ONCS_VERIFY: u16 = 1 << 7;
/// RESCAP of a namespace with reservations: every type and IEKEY as NVMe
/// 1.3 defines it, as nvmet; [`rescap_of`] adds Persist Through Power Loss.
const RESCAP: u8 = rescap::ALL_TYPES | rescap::IEKEY_1_3;
/// SGLS bits 1:0 = 01b: SGLs supported, byte aligned.
const SGLS_SUPPORTED: u32 = 1 << 0;
/// SGLS bit 20: SGL address used as an offset (in-capsule data).
const SGLS_OFFSET: u32 = 1 << 20;
/// LPA: SMART per namespace (0), commands effects log (1), extended data / LPO (2).
const LPA_IO: u8 = 0x07;
/// LPA for the discovery controller: extended data / LPO only (nvmet).
const LPA_DISC: u8 = 1 << 2;
/// FRMW: slot 1 read-only (bit 0), one slot (bits 3:1).
const FRMW: u8 = 0x03;
/// Identify Namespace NMIC bit 0: may be shared by controllers (nvmet sets it).
const NMIC_SHARED: u8 = 1 << 0;
/// Identify Namespace DLFEAT: deallocated blocks read as zeroes (bits 2:0 =
/// 001b) and Write Zeroes may deallocate (bit 3, DEAC honoured). Every
/// backend keeps both promises: RAM drops the chunk, files and block devices
/// punch a hole, and where they cannot, zero the range (`backend::file`,
/// `backend::block`). nvmet 6.12 reports 0 (a 2025 nvmet patch series sets
/// these bits for block devices that unmap on Write Zeroes). With both set the Linux host
/// sets DEAC on its Write Zeroes (`NVME_NS_DEAC`), so zeroing a range of an
/// exported sparse file (mkfs, `blkdiscard -z`) punches holes instead of
/// allocating blocks of zeroes.
const DLFEAT_DEALLOCATED_ZEROES_WZ_DEAC: u8 = 0x08 | 0x01;
/// CNS 08h NSFEAT bit 5 (VWCNP): no volatile write cache behind this
/// namespace (Linux `NVME_NS_VWC_NOT_PRESENT`, which nvmet sets for block
/// devices without one). Bit 3 is UIDREUSE.
const NSFEAT_VWC_NOT_PRESENT: u8 = 1 << 5;
/// CNS 08h NSTAT bit 0: namespace ready.
const NSTAT_NRDY: u8 = 1 << 0;
/// Get Features 81h CDW11 bit 0: extended (128-bit) host identifier.
const EXHID: u32 = 1 << 0;
/// Most bytes accepted as Set Features data (the largest feature payload is 512 B).
const MAX_SET_FEATURES_DATA: u32 = 4096;

fn invalid_field() -> Status {
    Status::INVALID_FIELD.with_dnr()
}

fn invalid_opcode() -> Status {
    Status::INVALID_OPCODE.with_dnr()
}

fn invalid_ns() -> Status {
    Status::INVALID_NS.with_dnr()
}

/// Get Log Page: SGL length must equal (NUMD + 1) · 4 and fit MDTS.
fn check_log_len(ctx: &QueueCtx, sqe: &Sqe) -> Result<(), Status> {
    let want = GetLogPageCmd::from_sqe(sqe).numd_bytes();
    expect_len(sqe, want)?;
    if want > ctx.target.limits.max_transfer() as u64 {
        return Err(invalid_field());
    }
    Ok(())
}

/// Parse step for an admin command (the admin queue of a connected controller;
/// fabrics commands never get here).
pub fn parse(ctx: &QueueCtx, ctrl: &Arc<Controller>, sqe: &Sqe) -> Result<(), Status> {
    let op = AdminOpcode(sqe.opcode());
    if ctrl.is_discovery() {
        // nvmet_parse_discovery_cmd: not ready ⇒ Invalid Opcode.
        if !Csts(ctrl.regs().csts).rdy() {
            return Err(invalid_opcode());
        }
        return match op {
            AdminOpcode::IDENTIFY => expect_len(sqe, IDENTIFY_DATA_LEN as u64),
            AdminOpcode::GET_LOG_PAGE => check_log_len(ctx, sqe),
            AdminOpcode::SET_FEATURES
            | AdminOpcode::GET_FEATURES
            | AdminOpcode::ASYNC_EVENT
            | AdminOpcode::KEEP_ALIVE => expect_len(sqe, 0),
            _ => Err(invalid_opcode()),
        };
    }
    // nvmet_check_ctrl_status: CC.EN and CSTS.RDY required.
    if !ctrl.is_ready() {
        return Err(Status::CMD_SEQ_ERROR.with_dnr());
    }
    match op {
        AdminOpcode::IDENTIFY => expect_len(sqe, IDENTIFY_DATA_LEN as u64),
        AdminOpcode::GET_LOG_PAGE => check_log_len(ctx, sqe),
        AdminOpcode::GET_FEATURES => {
            let want = if FeatureId(sqe.cdw(10) as u8) == FeatureId::HOST_ID { 16 } else { 0 };
            expect_len(sqe, want)
        }
        AdminOpcode::SET_FEATURES => {
            if sqe.sgl().length > MAX_SET_FEATURES_DATA {
                Err(Status::SGL_INVALID_DATA.with_dnr())
            } else {
                Ok(())
            }
        }
        AdminOpcode::ABORT | AdminOpcode::ASYNC_EVENT | AdminOpcode::KEEP_ALIVE => expect_len(sqe, 0),
        _ => Err(invalid_opcode()),
    }
}

/// Execute step for an admin command accepted by [`parse`]. AERs stay
/// pending until an event completes them on `ctx.sink` with `tag`.
pub fn execute(ctx: &mut QueueCtx, ctrl: &Arc<Controller>, sqe: &Sqe, data: Bytes, tag: u32) -> Exec {
    let _ = data; // No supported admin command consumes host data.
    let disc = ctrl.is_discovery();
    let r = match AdminOpcode(sqe.opcode()) {
        AdminOpcode::IDENTIFY => identify(&ctx.target, ctrl, sqe),
        AdminOpcode::GET_LOG_PAGE => get_log_page(&ctx.target, ctrl, sqe, ctx.local_addr),
        AdminOpcode::SET_FEATURES if !disc && FeatureId(sqe.cdw(10) as u8) == FeatureId::WRITE_PROTECT => {
            return set_write_protect(ctx, ctrl, sqe, tag);
        }
        AdminOpcode::SET_FEATURES => set_features(ctrl, sqe),
        AdminOpcode::GET_FEATURES => get_features(ctrl, sqe),
        AdminOpcode::KEEP_ALIVE => keep_alive(ctrl),
        AdminOpcode::ASYNC_EVENT => {
            return match ctrl.post_aer(&ctx.io.sink, tag) {
                Ok(()) => Exec::Pending(Pending::Plain),
                Err(s) => s.into(),
            }
        }
        AdminOpcode::ABORT if !disc => Ok(Response::result(ABORT_DW0_NOT_ABORTED as u64)),
        _ => Err(invalid_opcode()),
    };
    match r {
        Ok(resp) => resp.into(),
        Err(s) => s.into(),
    }
}

// ---------------------------------------------------------------- Identify

fn identify(target: &Target, ctrl: &Controller, sqe: &Sqe) -> Result<Response, Status> {
    let cmd = IdentifyCmd::from_sqe(sqe);
    if ctrl.is_discovery() {
        // nvmet_execute_disc_identify: CNS 01h only.
        return match cmd.cns {
            Cns::CTRL => Ok(Response::data(identify_controller(target, ctrl).encode())),
            _ => Err(invalid_field()),
        };
    }
    let find = || ctrl.namespace(cmd.nsid).ok_or_else(invalid_ns);
    let buf = match cmd.cns {
        Cns::NS => {
            if cmd.nsid == 0xFFFF_FFFF {
                return Err(invalid_ns());
            }
            // Inactive NSID (or one hidden from this host): all-zero structure.
            ctrl.namespace(cmd.nsid).map_or_else(
                || vec![0; IDENTIFY_DATA_LEN],
                |ns| {
                    // nvmet_execute_identify_ns: the store's size now.
                    ctrl.subsys.revalidate_namespace(&ns);
                    let ana = target.port_ana(ctrl.port_id).state(ns.ana_group());
                    identify_ns(&ns, ana, &target.limits).encode()
                },
            )
        }
        Cns::CTRL => identify_controller(target, ctrl).encode(),
        Cns::ACTIVE_NS_LIST | Cns::ACTIVE_NS_LIST_CS => {
            if cmd.nsid >= 0xFFFF_FFFE {
                return Err(invalid_ns());
            }
            // CNS 07h lists the namespaces of one command set (nvmet
            // `nvmet_execute_identify_nslist` with `match_css`).
            let nsids: Vec<u32> = ctrl
                .namespaces()
                .iter()
                .filter(|ns| cmd.cns == Cns::ACTIVE_NS_LIST || ns.csi() == cmd.csi)
                .map(|ns| ns.nsid)
                .collect();
            encode_ns_list(&nsids, cmd.nsid)
        }
        Cns::NS_DESC_LIST => {
            let ns = find()?;
            encode_ns_desc_list(&ns_descriptors(&ns)).map_err(|_| Status::INTERNAL.with_dnr())?
        }
        Cns::CS_NS if cmd.csi == Csi::NVM => {
            // NVM command set specific namespace data: no limits or PI to report.
            find()?;
            vec![0; IDENTIFY_DATA_LEN]
        }
        Cns::CS_NS if cmd.csi == Csi::ZNS => {
            // nvmet_execute_identify_cns_cs_ns: NSID FFFFFFFFh is Invalid
            // Namespace; a namespace that is not zoned answers zeroes.
            if cmd.nsid == 0xFFFF_FFFF {
                return Err(invalid_ns());
            }
            let ns = find()?;
            ns.zones.as_ref().map_or_else(|| vec![0; IDENTIFY_DATA_LEN], |z| identify_ns_zns(z).encode())
        }
        Cns::CS_CTRL if cmd.csi == Csi::NVM => identify_ctrl_nvm(&target.limits).encode(),
        // ZASL 0: Zone Append follows MDTS (nvmet reports the smaller of
        // MDTS and the zoned device's limit; every namespace here takes MDTS).
        Cns::CS_CTRL if cmd.csi == Csi::ZNS => IdentifyCtrlZns { zasl: 0 }.encode(),
        Cns::IND_CS_NS => {
            let ns = find()?;
            let nsfeat = if ns.backend.volatile_write_cache() { 0 } else { NSFEAT_VWC_NOT_PRESENT };
            IdentifyNsIndep {
                nsfeat,
                nmic: NMIC_SHARED,
                rescap: rescap_of(&ns),
                nsattr: nsattr(&ns),
                nstat: NSTAT_NRDY,
                ..Default::default()
            }
            .encode()
        }
        _ => return Err(invalid_field()),
    };
    Ok(Response::data(buf))
}

/// The Zoned Namespace command set's Identify Namespace of a zoned
/// namespace: no zone operation characteristics (the Linux host refuses
/// any), reads across zone boundaries allowed, MAR and MOR, and the zone
/// size of its one LBA format (nvmet `nvmet_execute_identify_cns_cs_ns`).
fn identify_ns_zns(z: &crate::core::zoned::Zones) -> IdentifyNsZns {
    let mut id = IdentifyNsZns { ozcs: OZCS_RAZB, mar: z.mar(), mor: z.mor(), ..Default::default() };
    id.zsze[0] = z.zone_blocks();
    id
}

/// Write Zeroes Size Limit reported in the NVM command set's Identify
/// Controller: 2^13 pages of 4 KiB, 32 MiB. Linux 6.x hosts take WZSL as the
/// largest Write Zeroes they send (`nvme_init_non_mdts_limits`; nvmet reports
/// 0, which leaves them at MDTS, 1 MiB here) and put the size, in blocks,
/// into the command's 16-bit NLB without a further bound
/// (`nvme_setup_write_zeroes`). 32 MiB is 65536 blocks of 512 bytes, the
/// most NLB can carry at the smallest block size a namespace here may have
/// (namespaces come and go while a host keeps the limit it read at connect),
/// and at any MDTS: with `mdts` 14 or more and WZSL 0 a host would cut a
/// Write Zeroes on a 512-byte namespace short. `blkdiscard -z`, mkfs and
/// BLKZEROOUT thus zero 32 MiB per command instead of 1 MiB. A Write
/// Zeroes larger than this (nvme-cli on a 4 KiB namespace: up to 256 MiB)
/// still runs: the limit tells hosts how to split, the target's cost does
/// not depend on it (a punched hole or fallocate, as for Deallocate, whose
/// ranges have no size limit either).
pub const WRITE_ZEROES_SIZE_LIMIT: u8 = 13;

/// NVM command set specific Identify Controller (CNS 06h, CSI 0). nvmet
/// returns zeroes (`nvmet_execute_identify_ctrl_nvm`); here WZSL is
/// [`WRITE_ZEROES_SIZE_LIMIT`] and VSL is MDTS (a Verify reads its blocks
/// into a buffer as a Read of that size would, and is refused past it).
/// Dataset Management has no range or size limit (256 ranges, 2^32 blocks
/// each, as the command can carry); Write Uncorrectable is not supported.
pub fn identify_ctrl_nvm(limits: &Limits) -> IdentifyCtrlNvm {
    IdentifyCtrlNvm { vsl: limits.mdts, wzsl: WRITE_ZEROES_SIZE_LIMIT, ..Default::default() }
}

/// Identify Controller VWC and Get Features Volatile Write Cache: always
/// present, as nvmet reports (`id->vwc = NVME_CTRL_VWC_PRESENT`). Hosts read
/// VWC once per association (Linux: `ctrl->vwc`, at connect or reset), and a
/// namespace added later (SIGHUP) may be a file or block device: had VWC
/// followed the namespaces present at Identify time (none, or only RAM), the
/// host would never send Flush or FUA for it. Namespaces without a cache say
/// so themselves (NSFEAT VWCNP, [`NSFEAT_VWC_NOT_PRESENT`]).
const VOLATILE_WRITE_CACHE: bool = true;

/// Identify Controller (CNS 01h) for `ctrl`, values after nvmet
/// (`nvmet_execute_identify_ctrl` / `nvmet_execute_disc_identify`).
pub fn identify_controller(target: &Target, ctrl: &Controller) -> IdentifyController {
    let limits = &target.limits;
    let subsys = &ctrl.subsys;
    // IOCCSZ, MAXCMD: the admin queue's port (nvmet's `req->port`,
    // `NVMET_MAX_CMD(ctrl)`).
    let in_capsule_data = ctrl.port_params.in_capsule_data(limits);
    let max_queue_entries = ctrl.port_params.max_queue_entries(limits);
    let mut sgls = SGLS_SUPPORTED;
    if in_capsule_data > 0 {
        sgls |= SGLS_OFFSET;
    }
    let common = IdentifyController {
        sn: subsys.serial.clone(),
        mn: subsys.model.clone(),
        fr: subsys.firmware.clone(),
        // nvmet_execute_identify_ctrl: put_unaligned_le24(subsys->ieee_oui, id->ieee).
        ieee: {
            let [b0, b1, b2, _] = subsys.ieee_oui.to_le_bytes();
            [b0, b1, b2]
        },
        mdts: limits.mdts,
        cntlid: ctrl.cntlid,
        ver: VERSION,
        kas: KAS,
        aerl: (MAX_AERS - 1) as u8,
        maxcmd: max_queue_entries.min(0xFFFF) as u16,
        sgls,
        // The discovery subsystem's current NQN (renamed in place, as nvmet's).
        subnqn: if ctrl.is_discovery() { target.discovery_nqn() } else { subsys.nqn.clone() },
        ..Default::default()
    };
    if ctrl.is_discovery() {
        // IOCCSZ and IORCSZ 0, as nvmet 6.12's nvmet_execute_disc_identify
        // (the interop suite compares: a proposed "report ioccsz and iorcsz
        // for disc ctrl" is not in it); the Linux host checks neither for
        // discovery. MAXCMD and SGLS are the port's, as nvmet's.
        return IdentifyController { cntrltype: 2, oaes: DISC_AEC_SUPPORTED, lpa: LPA_DISC, ..common };
    }
    let max_nsid = subsys.namespaces().keys().next_back().copied().unwrap_or(0);
    IdentifyController {
        rab: 6,
        cmic: CMIC_MULTI_PORT_CTRL_ANA,
        oaes: aec::NS_ATTR | aec::ANA_CHANGE,
        ctratt: CTRATT,
        cntrltype: 1,
        acl: 3,
        frmw: FRMW,
        lpa: LPA_IO,
        elpe: (ERROR_LOG_ENTRIES - 1) as u8,
        sqes: 0x66,
        cqes: 0x44,
        nn: MAX_NAMESPACES.max(max_nsid),
        oncs: ONCS,
        // FUSES bit 0: Compare and Write (SPDK's `fuses.compare_and_write`);
        // ACWU 0 (0's based: one block), as SPDK reports it, with each
        // namespace's NACWU beside it (NSFEAT bit 1).
        fuses: FUSES_COMPARE_WRITE,
        acwu: 0,
        ocfs: OCFS_FORMAT0,
        vwc: VOLATILE_WRITE_CACHE as u8,
        mnan: MAX_NAMESPACES,
        ioccsz: (64 + in_capsule_data) / 16,
        iorcsz: 1,
        icdoff: 0,
        msdbd: 1,
        // OFCS bit 0: Disconnect is supported (cmd::fabrics deletes the I/O queue).
        ofcs: 1,
        // NWPC bit 0: No Write Protect and Write Protect states (nvmet).
        nwpc: 1,
        psd0: PowerStateDescriptor::NVMET_PSD0,
        anatt: ANATT,
        anacap: ANACAP,
        anagrpmax: limits.max_ana_groups(),
        nanagrpid: limits.max_ana_groups(),
        ..common
    }
}

/// Identify Namespace (CNS 00h) for an active namespace whose ANA group is
/// in state `ana` through the asking controller's port: one LBA format, no
/// metadata, capacity = size, shared, its ANA group, its Copy limits
/// ([`io::copy_limits`]). The utilisation (NUSE) is what the store holds
/// where it allocates lazily (sparse files, RAM; NSFEAT THINP set, so a
/// deallocation shows in it, NVMe Base 2.0 §5.17.2.1 NSFEAT bit 0), else
/// the size, as nvmet reports it; 0 while the ANA group is inaccessible or
/// lost, as nvmet.
pub fn identify_ns(ns: &Namespace, ana: AnaState, limits: &Limits) -> IdentifyNamespace {
    let blocks = ns.blocks();
    let copy = io::copy_limits(ns.block_shift, limits);
    let allocated = ns.backend.allocated_bytes();
    let nuse = match ana {
        AnaState::INACCESSIBLE | AnaState::PERSISTENT_LOSS => 0,
        _ => allocated.map_or(blocks, |b| b.div_ceil(ns.block_size() as u64).min(blocks)),
    };
    let mut id = IdentifyNamespace {
        nsfeat: if allocated.is_some() { NSFEAT_THINP } else { 0 },
        nsze: blocks,
        ncap: blocks,
        nuse,
        nmic: NMIC_SHARED,
        rescap: rescap_of(ns),
        dlfeat: DLFEAT_DEALLOCATED_ZEROES_WZ_DEAC,
        anagrpid: ns.ana_group(),
        nsattr: nsattr(ns),
        nguid: ns.nguid,
        eui64: ns.eui64,
        lbaf: vec![LbaFormat::new(ns.block_shift as u8)],
        mssrl: copy.mssrl,
        mcl: copy.mcl,
        msrc: copy.msrc,
        ..Default::default()
    };
    if let Some(h) = ns.backend.io_hints() {
        apply_io_hints(&mut id, &h, ns.block_shift);
    }
    id
}

/// Identify Namespace NSFEAT bit 0 (THINP): thin provisioning, NUSE follows
/// the allocation.
const NSFEAT_THINP: u8 = 1 << 0;
/// Identify Namespace NSFEAT bit 1: NAWUN, NAWUPF and NACWU are the namespace's.
const NSFEAT_ATOMICS: u8 = 1 << 1;
/// Identify Namespace NSFEAT bit 4 (OPTPERF): NPWG, NPWA, NPDG, NPDA and NOWS are given.
const NSFEAT_IO_OPT: u8 = 1 << 4;

/// A block device's I/O sizes in Identify Namespace, as nvmet's
/// `nvmet_bdev_set_limits`: the atomic write units are one physical block,
/// the preferred write granularity and alignment the minimum I/O size, the
/// preferred deallocate granularity and alignment the discard granularity,
/// the optimal write size the optimal I/O size; each in namespace blocks,
/// 0's based (a size under one block counts as one). The Linux host sets
/// its device's physical block size (the smaller of NPWG and NAWUPF), its
/// minimum I/O size (NPWG) and its optimal I/O size (NOWS) from them.
fn apply_io_hints(id: &mut IdentifyNamespace, h: &IoHints, block_shift: u32) {
    // nvmet's to0based: 1 to 65536 units, 0's based.
    let blocks0 = |bytes: u32| ((bytes >> block_shift).clamp(1, 1 << 16) - 1) as u16;
    id.nsfeat |= NSFEAT_ATOMICS | NSFEAT_IO_OPT;
    let lpp0b = blocks0(h.physical_block_size);
    (id.nawun, id.nawupf, id.nacwu) = (lpp0b, lpp0b, lpp0b);
    id.npwg = blocks0(h.io_min);
    id.npwa = id.npwg;
    id.npdg = blocks0(h.discard_granularity);
    id.npda = id.npdg;
    id.nows = blocks0(h.io_opt);
}

/// RESCAP (CNS 00h and 08h): [`RESCAP`] where reservations are enabled,
/// with Persist Through Power Loss (bit 0) where they have a reservations file; else 0.
fn rescap_of(ns: &Namespace) -> u8 {
    match &ns.reservations {
        Some(r) if r.ptpl_capable() => RESCAP | rescap::PTPL,
        Some(_) => RESCAP,
        None => 0,
    }
}

/// NSATTR (CNS 00h and 08h): bit 0 while the namespace is write protected
/// (nvmet `NVME_NS_ATTR_RO`).
fn nsattr(ns: &Namespace) -> u8 {
    ns.write_protected() as u8
}

/// Namespace identification descriptors (CNS 03h): EUI-64, NGUID, UUID (those
/// that are non-zero) and the CSI (NVM, or Zoned Namespace for a zoned one:
/// the Linux host learns the command set here).
fn ns_descriptors(ns: &Namespace) -> Vec<NsIdDescriptor> {
    let mut d = Vec::with_capacity(4);
    if ns.eui64 != [0; 8] {
        d.push(NsIdDescriptor::Eui64(ns.eui64));
    }
    if ns.nguid != [0; 16] {
        d.push(NsIdDescriptor::Nguid(ns.nguid));
    }
    if ns.uuid != [0; 16] {
        d.push(NsIdDescriptor::Uuid(ns.uuid));
    }
    d.push(NsIdDescriptor::Csi(ns.csi()));
    d
}

// ---------------------------------------------------------------- Get Log Page

/// Log pages an I/O controller serves (Supported Log Pages content).
const IO_LOGS: [LogPageId; 8] = [
    LogPageId::SUPPORTED,
    LogPageId::ERROR,
    LogPageId::SMART,
    LogPageId::FW_SLOT,
    LogPageId::CHANGED_NS,
    LogPageId::CMD_EFFECTS,
    LogPageId::ANA,
    LogPageId::RESERVATION,
];

fn get_log_page(
    target: &Target,
    ctrl: &Controller,
    sqe: &Sqe,
    local: Option<std::net::SocketAddr>,
) -> Result<Response, Status> {
    let cmd = GetLogPageCmd::from_sqe(sqe);
    let len = usize::try_from(cmd.numd_bytes()).map_err(|_| invalid_field())?;
    debug!(lid = cmd.lid.0, lpo = cmd.lpo, len, lsp = cmd.lsp, rae = cmd.rae, "get log page");
    // LPO must be dword aligned; index offsets (OT) are not supported.
    if cmd.lpo & 3 != 0 || cmd.ot {
        return Err(invalid_field());
    }
    let page = if ctrl.is_discovery() {
        // nvmet_execute_disc_get_log_page: LID 70h only.
        if cmd.lid != LogPageId::DISCOVERY {
            return Err(invalid_field());
        }
        discovery::discovery_log_with_local_addr(target, ctrl, local)
    } else {
        match cmd.lid {
            LogPageId::SUPPORTED => encode_supported_logs(&IO_LOGS),
            LogPageId::ERROR => ctrl.error_log_page(),
            LogPageId::SMART => smart_log(ctrl, cmd.nsid)?,
            LogPageId::FW_SLOT => fw_slot_log(&ctrl.subsys.firmware),
            LogPageId::CHANGED_NS => {
                // Keep the list (and the notice mask) when the read will fail.
                let keep = cmd.rae || cmd.lpo > LOG_4K as u64;
                ChangedNsList::List(ctrl.changed_ns_log(keep)).encode()
            }
            LogPageId::CMD_EFFECTS => match Csi(cmd.csi) {
                Csi::NVM => command_effects_log(false),
                // The Linux host reads the zoned set's log for a zoned
                // namespace and makes it read-only without Zone Append there
                // (`nvme_update_zone_info`).
                Csi::ZNS => command_effects_log(true),
                _ => return Err(Status::INVALID_LOG_PAGE),
            },
            LogPageId::ANA => {
                // As long as the log can be (header, NANAGRPID groups, MNAN
                // NSIDs), zero padded: the Linux host reads that much at
                // once, libnvme in 4 KiB pieces whose LPO would otherwise
                // pass the end of a short log (nvmet ignores LPO here).
                let mut log = ana_log(target, ctrl, cmd.lsp & ANA_LSP_RGO != 0);
                log.resize(log.len().max(target.limits.ana_log_len() as usize), 0);
                log
            }
            // nvmet_execute_get_log_page_resv: one notification per read,
            // taken whatever RAE says; a read that will fail takes none.
            LogPageId::RESERVATION if cmd.lpo >= 64 => return Err(invalid_field()),
            LogPageId::RESERVATION => ctrl.reservation_log().encode(),
            _ => return Err(invalid_field()),
        }
    };
    if cmd.lpo > page.len() as u64 {
        return Err(invalid_field());
    }
    if !cmd.rae {
        match cmd.lid {
            LogPageId::DISCOVERY => ctrl.clear_notice_mask(AEC_DISC_CHANGE),
            LogPageId::ANA => ctrl.clear_notice_mask(AEC_ANA_CHANGE),
            _ => {}
        }
    }
    Ok(Response::data(log_window(&page, cmd.lpo, len)))
}

/// ANA log (LID 0Ch) as `ctrl`'s port reports it, after nvmet's
/// `nvmet_execute_get_log_page_ana`: the groups in use (group 1, the groups
/// of the subsystem's namespaces, the groups configured for the port) in
/// ascending order, each with its state through that port and, unless
/// `rgo` (Return Groups Only), the NSIDs of its namespaces; one change count
/// for the header and every group, as nvmet's global `nvmet_ana_chgcnt`.
fn ana_log(target: &Target, ctrl: &Controller, rgo: bool) -> Vec<u8> {
    let namespaces = ctrl.namespaces();
    // A port not registered (queues built without a listener): all optimized, as `Target::port_ana`.
    let (port, mut groups) = target.port(ctrl.port_id).map(|p| (p.ana, p.ana_groups)).unwrap_or_default();
    groups.insert(DEFAULT_ANA_GROUP);
    groups.extend(namespaces.iter().map(|ns| ns.ana_group()));
    let chgcnt = target.ana_chgcnt();
    AnaLog {
        chgcnt,
        groups: groups
            .into_iter()
            .map(|grpid| AnaGroupDesc {
                grpid,
                chgcnt,
                state: port.state(grpid),
                nsids: match rgo {
                    true => Vec::new(),
                    false => {
                        namespaces.iter().filter(|ns| ns.ana_group() == grpid).map(|ns| ns.nsid).collect()
                    }
                },
            })
            .collect(),
    }
    .encode()
}

/// SMART / Health log (LID 02h): for NSID FFFFFFFFh the sum over the
/// subsystem's namespaces (nvmet's `nvmet_get_smart_log_all`), else for an
/// active namespace; NSID 0 names none and is Invalid Namespace, as nvmet
/// answers (`nvmet_get_smart_log_nsid` → `nvmet_req_find_ns`). Data Units
/// Read / Written and Host Read / Write Commands count every host's I/O to
/// the namespaces since they were added ([`crate::core::io_stats::IoStats`]; nvmet takes them from
/// the block device and reports zeros for files); Number of Error
/// Information Log Entries is the controller's error count, as nvmet fills it
/// from `err_counter`.
fn smart_log(ctrl: &Controller, nsid: u32) -> Result<Vec<u8>, Status> {
    let namespaces = match nsid {
        0xFFFF_FFFF => ctrl.namespaces(),
        _ => vec![ctrl.namespace(nsid).ok_or_else(invalid_ns)?],
    };
    let mut log = SmartLog { num_err_log_entries: ctrl.error_count() as u128, ..Default::default() };
    for ns in namespaces {
        let io = ns.io_stats.totals();
        // Each namespace's data units are rounded up before they are added, as
        // `nvmet_get_smart_log_all` adds DIV_ROUND_UP(sectors, 1000) per namespace.
        log.data_units_read += IoTotals::data_units(io.read_bytes);
        log.data_units_written += IoTotals::data_units(io.write_bytes);
        log.host_reads += io.read_cmds as u128;
        log.host_writes += io.write_cmds as u128;
    }
    Ok(log.encode())
}

/// Firmware Slot Information (LID 03h): slot 1 active, its revision the
/// subsystem's (Identify Controller FR).
fn fw_slot_log(firmware: &str) -> Vec<u8> {
    let mut log = FwSlotLog { afi: 1, ..Default::default() };
    let mut frs = [b' '; 8];
    let n = firmware.len().min(8);
    frs[..n].copy_from_slice(&firmware.as_bytes()[..n]);
    log.frs[0] = frs;
    log.encode()
}

/// Commands Supported and Effects (LID 05h) of the NVM command set (CSI
/// 0), or with `zoned` of the Zoned Namespace command set (CSI 2): the NVM
/// commands and the zone commands, as nvmet's `nvmet_get_cmd_effects_zns`.
fn command_effects_log(zoned: bool) -> Vec<u8> {
    let mut log = CommandEffectsLog::default();
    for op in [
        AdminOpcode::GET_LOG_PAGE,
        AdminOpcode::IDENTIFY,
        AdminOpcode::ABORT,
        AdminOpcode::SET_FEATURES,
        AdminOpcode::GET_FEATURES,
        AdminOpcode::ASYNC_EVENT,
        AdminOpcode::KEEP_ALIVE,
    ] {
        log.acs[op.0 as usize] = effects::CSUPP;
    }
    for op in [
        IoOpcode::FLUSH,
        IoOpcode::READ,
        IoOpcode::COMPARE,
        IoOpcode::VERIFY,
        IoOpcode::RESV_REGISTER,
        IoOpcode::RESV_REPORT,
        IoOpcode::RESV_ACQUIRE,
        IoOpcode::RESV_RELEASE,
    ] {
        log.iocs[op.0 as usize] = effects::CSUPP;
    }
    for op in [IoOpcode::WRITE, IoOpcode::WRITE_ZEROES, IoOpcode::DSM, IoOpcode::COPY] {
        log.iocs[op.0 as usize] = effects::CSUPP | effects::LBCC;
    }
    if zoned {
        log.iocs[IoOpcode::ZONE_APPEND.0 as usize] = effects::CSUPP | effects::LBCC;
        log.iocs[IoOpcode::ZONE_MGMT_SEND.0 as usize] = effects::CSUPP | effects::LBCC;
        log.iocs[IoOpcode::ZONE_MGMT_RECV.0 as usize] = effects::CSUPP;
    }
    log.encode()
}

// ---------------------------------------------------------------- Features

/// Number of Queues answer: every allowed I/O queue, whatever was requested
/// (nvmet answers `max_qid - 1` in both halves; the host uses the minimum).
fn num_queues(ctrl: &Controller) -> u64 {
    let n = ctrl.max_qid.saturating_sub(1);
    NumQueues { nsq: n, ncq: n }.to_dw() as u64
}

/// KATO as reported: whole seconds (nvmet keeps KATO in seconds), in ms.
fn kato_reported_ms(ctrl: &Controller) -> u64 {
    // DW0 is 32 bits: a Connect KATO near u32::MAX ms, rounded up to whole
    // seconds, would not fit, and the host would read it truncated.
    ((ctrl.kato_ms() as u64).div_ceil(1000) * 1000).min(u32::MAX as u64 / 1000 * 1000)
}

fn set_features(ctrl: &Controller, sqe: &Sqe) -> Result<Response, Status> {
    let cmd = SetFeaturesCmd::from_sqe(sqe);
    if cmd.sv {
        return Err(Status::FEATURE_NOT_SAVEABLE.with_dnr());
    }
    let disc = ctrl.is_discovery();
    match cmd.fid {
        FeatureId::KATO => {
            // nvmet_set_feat_kato: rounded up to seconds; DW0 = seconds.
            let secs = cmd.cdw11.div_ceil(1000);
            ctrl.set_kato_ms(secs.saturating_mul(1000));
            Ok(Response::result(secs as u64))
        }
        FeatureId::ASYNC_EVENT => {
            let mask = if disc { DISC_AEC_SUPPORTED } else { IO_AEC_SUPPORTED };
            if cmd.cdw11 & !mask != 0 {
                return Err(invalid_field());
            }
            ctrl.set_aec(cmd.cdw11);
            Ok(Response::result(cmd.cdw11 as u64))
        }
        FeatureId::NUM_QUEUES if !disc => {
            let req = NumQueues::from_dw(cmd.cdw11);
            if req.nsq == 0xFFFF || req.ncq == 0xFFFF {
                return Err(invalid_field());
            }
            let asked = req.nsq.max(req.ncq) as u32 + 1;
            if asked > ctrl.max_qid as u32 {
                // The limit that binds: the subsystem's max_io_queues or the target's.
                info!(
                    cntlid = ctrl.cntlid,
                    asked,
                    granted = ctrl.max_qid,
                    subsystem_limit = ?ctrl.subsys.max_io_queues(),
                    "host asked for more I/O queues than the limit; granting the limit"
                );
            }
            Ok(Response::result(num_queues(ctrl)))
        }
        // The host identifier comes from Connect on fabrics.
        FeatureId::HOST_ID if !disc => Err(Status::CMD_SEQ_ERROR.with_dnr()),
        FeatureId::RESV_MASK if !disc => set_resv_mask(ctrl, sqe.nsid(), cmd.cdw11),
        FeatureId::RESV_PERSIST if !disc => {
            with_reservations(ctrl, sqe.nsid(), |r| r.set_ptpl(cmd.cdw11 & 1 != 0))?;
            Ok(Response::result((cmd.cdw11 & 1) as u64))
        }
        _ => Err(invalid_field()),
    }
}

/// Runs `f` on the reservations of namespace `nsid`: Invalid Namespace if
/// it is not active, Invalid Field without reservations (nvmet's
/// `nvmet_req_find_ns`, then `pr.enable`).
fn with_reservations<R>(
    ctrl: &Controller,
    nsid: u32,
    f: impl FnOnce(&crate::core::Reservations) -> Result<R, Status>,
) -> Result<R, Status> {
    let ns = ctrl.namespace(nsid).ok_or_else(invalid_ns)?;
    f(ns.reservations.as_ref().ok_or_else(invalid_field)?)
}

/// Set Features Reservation Notification Mask (82h), after nvmet's
/// `nvmet_set_feat_resv_notif_mask`: undefined bits are Invalid Field; one
/// namespace (Invalid Namespace if inactive, Invalid Field without
/// reservations) or, for NSID FFFFFFFFh, every namespace with
/// reservations. The mask belongs to the namespace, shared by all hosts, as
/// in nvmet.
fn set_resv_mask(ctrl: &Controller, nsid: u32, mask: u32) -> Result<Response, Status> {
    if mask & !nvmeof_common::spec::reservation::NOTIFY_MASK_ALL != 0 {
        return Err(invalid_field());
    }
    if nsid == 0xFFFF_FFFF {
        for ns in ctrl.namespaces() {
            if let Some(r) = &ns.reservations {
                r.set_notify_mask(mask)?;
            }
        }
    } else {
        with_reservations(ctrl, nsid, |r| r.set_notify_mask(mask))?;
    }
    Ok(Response::result(mask as u64))
}

/// Set Features Namespace Write Protection Config (84h), after nvmet
/// `nvmet_set_feat_write_protect`: the NSID must name an active namespace
/// (Invalid Namespace otherwise, FFFFFFFFh included); CDW11 1 protects it and
/// flushes it (the flush's failure lifts the protection again and is the
/// command's status), 0 lifts the protection; both tell the controllers
/// (Namespace Attribute Changed), and the Linux host then marks the block
/// device read-only or writable (`NVME_NS_ATTR_RO`). The states "until power
/// cycle" and "permanent" are not supported (NWPC bit 0 only), so they are
/// Invalid Field, as the spec asks; nvmet completes them successfully
/// without changing anything. A namespace exported read-only (configuration
/// `read_only`) keeps its protection: lifting it is Feature Not Changeable.
fn set_write_protect(ctx: &mut QueueCtx, ctrl: &Arc<Controller>, sqe: &Sqe, tag: u32) -> Exec {
    let cmd = SetFeaturesCmd::from_sqe(sqe);
    if cmd.sv {
        return Status::FEATURE_NOT_SAVEABLE.with_dnr().into();
    }
    let Some(ns) = ctrl.namespace(sqe.nsid()) else {
        return invalid_ns().into();
    };
    match cmd.cdw11 {
        write_protect::NONE if ns.read_only => Status::FEATURE_NOT_CHANGEABLE.with_dnr().into(),
        write_protect::NONE => {
            ns.set_write_protected(false);
            ctrl.subsys.namespace_changed(ns.nsid);
            Response::default().into()
        }
        write_protect::WRITE_PROTECT => {
            // Set first, so that no write starts after the flush (nvmet too).
            ns.set_write_protected(true);
            let backend = ns.backend.clone();
            let pending = Pending::WriteProtect(WriteProtectFlush { ns, subsys: ctrl.subsys.clone() });
            match backend.submit(tag, IoOp::Flush, &ctx.io) {
                Some(c) => Exec::Done(super::complete(pending, c)),
                None => Exec::Pending(pending),
            }
        }
        _ => invalid_field().into(),
    }
}

fn get_features(ctrl: &Controller, sqe: &Sqe) -> Result<Response, Status> {
    let cmd = GetFeaturesCmd::from_sqe(sqe);
    let disc = ctrl.is_discovery();
    // SEL is ignored (current = default = saved), as nvmet does.
    match cmd.fid {
        FeatureId::KATO => Ok(Response::result(kato_reported_ms(ctrl))),
        FeatureId::ASYNC_EVENT => Ok(Response::result(ctrl.aec() as u64)),
        FeatureId::NUM_QUEUES if !disc => Ok(Response::result(num_queues(ctrl))),
        FeatureId::VOLATILE_WC if !disc => Ok(Response::result(VOLATILE_WRITE_CACHE as u64)),
        // nvmet_get_feat_write_protect: per namespace, Invalid Namespace if none.
        FeatureId::WRITE_PROTECT if !disc => {
            let ns = ctrl.namespace(sqe.nsid()).ok_or_else(invalid_ns)?;
            let state = if ns.write_protected() { write_protect::WRITE_PROTECT } else { write_protect::NONE };
            Ok(Response::result(state as u64))
        }
        FeatureId::HOST_ID if !disc => {
            if cmd.cdw11 & EXHID == 0 {
                return Err(invalid_field());
            }
            Ok(Response::data(ctrl.hostid.to_vec()))
        }
        // nvmet_get_feat_resv_notif_mask: per namespace.
        FeatureId::RESV_MASK if !disc => {
            with_reservations(ctrl, sqe.nsid(), |r| Ok(Response::result(r.notify_mask() as u64)))
        }
        // Reservation Persistence: the PTPL state (bit 0), per namespace.
        // nvmet, without Persist Through Power Loss, has no such feature.
        FeatureId::RESV_PERSIST if !disc => {
            with_reservations(ctrl, sqe.nsid(), |r| Ok(Response::result(r.ptpl() as u64)))
        }
        _ => Err(invalid_field()),
    }
}

// ---------------------------------------------------------------- Keep Alive

fn keep_alive(ctrl: &Controller) -> Result<Response, Status> {
    // nvmet_execute_keep_alive: KATO 0 ⇒ Keep Alive Timeout Invalid (no DNR).
    if ctrl.kato_ms() == 0 {
        return Err(Status::KAT_INVALID);
    }
    ctrl.touch();
    Ok(Response::default())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use nvmeof_common::spec::features::{AbortCmd, AsyncEvent, FeatureSel};
    use nvmeof_common::spec::identify::{ctrl_off, decode_ns_desc_list, decode_ns_list, ns_off};
    use nvmeof_common::spec::log::decode_supported_logs;
    use nvmeof_common::spec::property::Cc;
    use nvmeof_common::spec::{DiscoveryLog, DISCOVERY_NQN};
    use nvmeof_common::SglDescriptor;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    use super::*;
    use crate::backend::{IoCompletion, MemBackend};
    use crate::core::{Limits, Subsystem};

    const SUBNQN: &str = "nqn.2024-01.io.example:disk";
    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";

    struct Env {
        target: Arc<Target>,
        subsys: Arc<Subsystem>,
        ctrl: Arc<Controller>,
        ctx: QueueCtx,
        rx: UnboundedReceiver<IoCompletion>,
    }

    fn env_for(discovery: bool, ready: bool) -> Env {
        let target = Target::new(Limits::default());
        let port = target.add_port("127.0.0.1:4420".parse().unwrap());
        let subsys = Arc::new(Subsystem::new(SUBNQN, "nvmeof test", None, false));
        subsys.add_namespace(Arc::new(Namespace::new(SUBNQN, 1, Arc::new(MemBackend::new(1 << 20, 512)))));
        // Namespace 3 holds data in its first 128 KiB chunk (32 blocks): NUSE 32.
        let ram3 = MemBackend::new(1 << 20, 4096);
        ram3.corrupt_byte(0);
        subsys.add_namespace(Arc::new(Namespace::new(SUBNQN, 3, Arc::new(ram3))));
        target.add_subsystem(subsys.clone());
        let s = if discovery { target.discovery.clone() } else { subsys.clone() };
        let max_qid = if discovery { 0 } else { 8 };
        let hostid = [0xAB; 16];
        let ctrl = target
            .create_controller(|id| Controller::new(id, s, HOST.into(), hostid, port, 5000, max_qid))
            .unwrap();
        if ready {
            ctrl.set_cc(Cc::linux_host_default(Cc::CSS_NVM).with_en(true).0);
            assert!(ctrl.is_ready());
        }
        let (sink, rx) = unbounded_channel();
        let ctx = QueueCtx {
            ana: target.port_ana(port),
            params: Default::default(),
            target: target.clone(),
            port_id: port,
            qid: Some(0),
            ctrl: Some(ctrl.clone()),
            io: crate::backend::QueueIo::detached(sink),
            sqsize: 31,
            sqflow_disabled: false,
            close_requested: false,
            local_addr: None,
            peer_addr: None,
            read_bufs: Default::default(),
            data_digest: false,
            auth: Default::default(),
            inflight: Default::default(),
            inflight_cache: Default::default(),
        };
        Env { target, subsys, ctrl, ctx, rx }
    }

    fn env() -> Env {
        env_for(false, true)
    }

    impl Env {
        /// parse + execute; the response of a finished command.
        fn run(&mut self, sqe: &Sqe) -> Result<Response, Status> {
            self.run_tag(sqe, 0)
        }
        fn run_tag(&mut self, sqe: &Sqe, tag: u32) -> Result<Response, Status> {
            parse(&self.ctx, &self.ctrl, sqe)?;
            match execute(&mut self.ctx, &self.ctrl.clone(), sqe, Bytes::new(), tag) {
                Exec::Done(r) if r.status.is_success() => Ok(r),
                Exec::Done(r) => Err(r.status),
                Exec::Pending(p) => panic!("unexpected pending {p:?}"),
            }
        }
        fn identify(&mut self, cns: Cns, nsid: u32) -> Result<Bytes, Status> {
            let r = self.run(&IdentifyCmd::new(cns, nsid).to_sqe(1))?;
            assert_eq!(r.data.len(), 4096);
            Ok(r.data)
        }
        fn log(&mut self, lid: LogPageId, lpo: u64, len: u32, rae: bool) -> Result<Bytes, Status> {
            let mut c = GetLogPageCmd::new(lid, 0xFFFF_FFFF, lpo, len);
            c.rae = rae;
            let r = self.run(&c.to_sqe(2))?;
            assert_eq!(r.data.len() as u64, c.numd_bytes());
            Ok(r.data)
        }
        fn set_feature(&mut self, fid: FeatureId, cdw11: u32) -> Result<u64, Status> {
            self.run(&SetFeaturesCmd::new(fid, cdw11).to_sqe(3)).map(|r| r.result)
        }
        fn get_feature(&mut self, fid: FeatureId) -> Result<u64, Status> {
            self.run(&GetFeaturesCmd::new(fid).to_sqe(4)).map(|r| r.result)
        }
    }

    fn u16_at(b: &[u8], o: usize) -> u16 {
        u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
    }
    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    #[test]
    fn identify_controller_fields_linux_checks() {
        let mut e = env();
        let b = e.identify(Cns::CTRL, 0).unwrap();
        use ctrl_off as o;
        assert_eq!(u16_at(&b, o::CNTLID), e.ctrl.cntlid);
        assert_eq!(u32_at(&b, o::VER), 0x0001_0300);
        assert_eq!(VERSION, 0x0001_0300);
        assert_eq!(u16_at(&b, o::KAS), 10);
        assert_eq!(u32_at(&b, o::IOCCSZ), (64 + (128 << 10)) / 16);
        assert_eq!(u32_at(&b, o::IORCSZ), 1);
        assert_eq!(u16_at(&b, o::ICDOFF), 0);
        assert_eq!(u32_at(&b, o::SGLS), 1 | 1 << 20);
        assert_eq!(b[o::MDTS], 8);
        assert_eq!(u32_at(&b, o::OAES), 1 << 8 | 1 << 11);
        assert_eq!(b[o::CNTRLTYPE], 1);
        assert_eq!(b[o::CMIC], 0x0B);
        assert_eq!(b[o::SQES], 0x66);
        assert_eq!(b[o::CQES], 0x44);
        assert_eq!(u16_at(&b, o::MAXCMD), 1024);
        assert_eq!(u32_at(&b, o::NN), 1024);
        assert_eq!(u32_at(&b, o::MNAN), 1024);
        assert_eq!(u16_at(&b, o::ONCS), 0x1AD);
        // Present even with only RAM namespaces: one added later may have a cache.
        assert_eq!(b[o::VWC], 1);
        assert_eq!(b[o::ACL], 3);
        assert_eq!(b[o::AERL], 3);
        assert_eq!(b[o::LPA], 0x07);
        assert_eq!(b[o::ELPE], 127);
        assert_eq!(b[o::MSDBD], 1);
        assert_eq!(u32_at(&b, o::CTRATT), 0x41);
        assert_eq!(&b[o::SUBNQN..o::SUBNQN + SUBNQN.len()], SUBNQN.as_bytes());
        assert_eq!(b[o::SUBNQN + SUBNQN.len()], 0);
        let id = IdentifyController::decode(&b).unwrap();
        assert_eq!(id.sn, e.subsys.serial);
        assert_eq!(id.mn, "nvmeof test");
        assert_eq!(id.fr, FIRMWARE_REVISION);
        assert_eq!(&b[o::SN..o::SN + 20], e.subsys.serial.as_bytes());
        // No OUI configured: zeroes, as nvmet's default attr_ieee_oui.
        assert_eq!(id.ieee, [0; 3]);
    }

    /// A configured IEEE OUI goes into Identify Controller bytes 73..76 low
    /// byte first (nvmet's `put_unaligned_le24`), which nvme-cli prints back
    /// as the OUI ("ieee : 0050c2").
    #[test]
    fn identify_controller_ieee_oui() {
        let target = Target::new(Limits::default());
        let port = target.add_port("127.0.0.1:4420".parse().unwrap());
        let s = Arc::new(Subsystem::new(SUBNQN, "m", None, false).with_ieee_oui(0x0050C2));
        target.add_subsystem(s.clone());
        let ctrl = target
            .create_controller(|id| Controller::new(id, s, HOST.into(), [1; 16], port, 5000, 1))
            .unwrap();
        let b = identify_controller(&target, &ctrl).encode();
        assert_eq!(&b[ctrl_off::IEEE..ctrl_off::IEEE + 3], &[0xC2, 0x50, 0x00]);
    }

    #[test]
    fn identify_discovery_controller() {
        let mut e = env_for(true, true);
        let b = e.identify(Cns::CTRL, 0).unwrap();
        let id = IdentifyController::decode(&b).unwrap();
        assert_eq!(id.cntrltype, 2);
        assert_eq!(id.subnqn, DISCOVERY_NQN);
        assert_eq!(id.oaes, 1 << 31);
        assert_eq!(id.cntlid, e.ctrl.cntlid);
        assert_eq!(id.sgls & 3, 1);
        assert_eq!(id.icdoff, 0);
        assert_eq!(id.ver, VERSION);
        // As nvmet 6.12's: no command or response capsule size.
        assert_eq!((id.ioccsz, id.iorcsz), (0, 0));
        // Discovery: CNS other than 01h ⇒ Invalid Field; other opcodes ⇒ Invalid Opcode.
        assert_eq!(e.identify(Cns::NS, 1), Err(invalid_field()));
        assert_eq!(e.run(&AbortCmd { sqid: 0, cid: 1 }.to_sqe(9)).unwrap_err(), invalid_opcode());
        assert_eq!(e.log(LogPageId::SMART, 0, 512, false), Err(invalid_field()));
        assert_eq!(e.set_feature(FeatureId::NUM_QUEUES, 0), Err(invalid_field()));
        assert_eq!(e.set_feature(FeatureId::ASYNC_EVENT, 1 << 8), Err(invalid_field()));
        assert_eq!(e.set_feature(FeatureId::ASYNC_EVENT, 1 << 31), Ok(1 << 31));
        assert_eq!(e.get_feature(FeatureId::ASYNC_EVENT), Ok(1 << 31));
    }

    #[test]
    fn not_ready_statuses() {
        let mut e = env_for(false, false);
        assert_eq!(e.identify(Cns::CTRL, 0), Err(Status::CMD_SEQ_ERROR.with_dnr()));
        let mut d = env_for(true, false);
        assert_eq!(d.identify(Cns::CTRL, 0), Err(invalid_opcode()));
    }

    #[test]
    fn opcodes_and_lengths() {
        let mut e = env();
        for op in [0x00, 0x01, 0x04, 0x05, 0x0D, 0x10, 0x11, 0x80, 0x81, 0x84, 0xC0] {
            assert_eq!(e.run(&Sqe::new(op)).unwrap_err(), invalid_opcode(), "opcode {op:#x}");
        }
        let mut s = IdentifyCmd::new(Cns::CTRL, 0).to_sqe(1);
        s.set_sgl(SglDescriptor::transport(4095));
        assert_eq!(e.run(&s).unwrap_err(), Status::SGL_INVALID_DATA.with_dnr());
        let mut s = GetLogPageCmd::new(LogPageId::SMART, 0, 0, 512).to_sqe(1);
        s.set_sgl(SglDescriptor::transport(1024));
        assert_eq!(e.run(&s).unwrap_err(), Status::SGL_INVALID_DATA.with_dnr());
        // Beyond MDTS (1 MiB).
        assert_eq!(e.log(LogPageId::ERROR, 0, 2 << 20, false), Err(invalid_field()));
        let mut s = Sqe::new(AdminOpcode::KEEP_ALIVE.0);
        s.set_sgl(SglDescriptor::transport(8));
        assert_eq!(e.run(&s).unwrap_err(), Status::SGL_INVALID_DATA.with_dnr());
        assert_eq!(e.identify(Cns(0x1F), 0), Err(invalid_field()));
        // Abort: "not aborted".
        let r = e.run(&AbortCmd { sqid: 1, cid: 7 }.to_sqe(9)).unwrap();
        assert_eq!(r.result, 1);
    }

    #[test]
    fn identify_namespaces() {
        let mut e = env();
        let b = e.identify(Cns::NS, 1).unwrap();
        let id = IdentifyNamespace::decode(&b).unwrap();
        // Thin provisioned: nothing written to namespace 1 yet.
        assert_eq!((id.nsze, id.ncap, id.nuse, id.nsfeat), (2048, 2048, 0, NSFEAT_THINP));
        assert_eq!(id.block_size(), Some(512));
        assert_eq!(b[ns_off::NLBAF], 0);
        assert_eq!(b[ns_off::NMIC], 1);
        let ns1 = e.subsys.namespace(1).unwrap();
        assert_eq!(id.nguid, ns1.nguid);
        assert_eq!(id.eui64, ns1.eui64);
        let id3 = IdentifyNamespace::decode(&e.identify(Cns::NS, 3).unwrap()).unwrap();
        assert_eq!((id3.nsze, id3.block_size(), id3.nuse), (256, Some(4096), 32));
        // Inactive ⇒ zeros; broadcast ⇒ Invalid NS.
        assert!(e.identify(Cns::NS, 2).unwrap().iter().all(|&x| x == 0));
        assert_eq!(e.identify(Cns::NS, 0xFFFF_FFFF), Err(invalid_ns()));
        // Active list.
        assert_eq!(decode_ns_list(&e.identify(Cns::ACTIVE_NS_LIST, 0).unwrap()), vec![1, 3]);
        assert_eq!(decode_ns_list(&e.identify(Cns::ACTIVE_NS_LIST, 1).unwrap()), vec![3]);
        assert!(decode_ns_list(&e.identify(Cns::ACTIVE_NS_LIST, 3).unwrap()).is_empty());
        assert_eq!(e.identify(Cns::ACTIVE_NS_LIST, 0xFFFF_FFFE), Err(invalid_ns()));
        assert_eq!(e.identify(Cns::ACTIVE_NS_LIST, 0xFFFF_FFFF), Err(invalid_ns()));
        // Descriptors.
        let d = decode_ns_desc_list(&e.identify(Cns::NS_DESC_LIST, 1).unwrap()).unwrap();
        assert_eq!(
            d,
            vec![
                NsIdDescriptor::Eui64(ns1.eui64),
                NsIdDescriptor::Nguid(ns1.nguid),
                NsIdDescriptor::Uuid(ns1.uuid),
                NsIdDescriptor::Csi(Csi::NVM)
            ]
        );
        assert_eq!(e.identify(Cns::NS_DESC_LIST, 2), Err(invalid_ns()));
        // CSI-specific structures.
        let mut cs = IdentifyCmd::new(Cns::CS_NS, 1);
        assert!(e.run(&cs.to_sqe(1)).unwrap().data.iter().all(|&x| x == 0));
        // The zoned set's structure of a namespace that is not zoned: zeroes
        // (nvmet); of no namespace: Invalid Namespace.
        cs.csi = Csi::ZNS;
        assert!(e.run(&cs.to_sqe(1)).unwrap().data.iter().all(|&x| x == 0));
        cs.nsid = 0xFFFF_FFFF;
        assert_eq!(e.run(&cs.to_sqe(1)).unwrap_err(), invalid_ns());
        cs.csi = Csi::KV;
        cs.nsid = 1;
        assert_eq!(e.run(&cs.to_sqe(1)).unwrap_err(), invalid_field());
        let mut cc = IdentifyCmd::new(Cns::CS_CTRL, 0);
        let nvm = IdentifyCtrlNvm::decode(&e.run(&cc.to_sqe(1)).unwrap().data).unwrap();
        // WZSL 13: 32 MiB, 65536 blocks of 512 bytes (NLB's reach); VSL = MDTS.
        assert_eq!(nvm, IdentifyCtrlNvm { vsl: e.ctx.target.limits.mdts, wzsl: 13, ..Default::default() });
        assert_eq!(IdentifyCtrlNvm::limit_bytes(nvm.wzsl), Some(65536 * 512));
        cc.csi = Csi::KV;
        assert_eq!(e.run(&cc.to_sqe(1)).unwrap_err(), invalid_field());
        let ind = IdentifyNsIndep::decode(&e.identify(Cns::IND_CS_NS, 3).unwrap()).unwrap();
        // RAM: VWCNP (bit 5), so hosts skip Flush for it; not UIDREUSE (bit 3).
        assert_eq!((ind.nstat, ind.nmic, ind.nsfeat), (1, 1, 1 << 5));
        assert_eq!(e.identify(Cns::IND_CS_NS, 9), Err(invalid_ns()));
        let mut l = IdentifyCmd::new(Cns::ACTIVE_NS_LIST_CS, 0);
        assert_eq!(decode_ns_list(&e.run(&l.to_sqe(1)).unwrap().data), vec![1, 3]);
        l.csi = Csi::ZNS;
        assert!(decode_ns_list(&e.run(&l.to_sqe(1)).unwrap().data).is_empty());
    }

    #[test]
    fn log_page_window_and_errors() {
        let mut e = env();
        let fw = e.log(LogPageId::FW_SLOT, 0, 512, false).unwrap();
        assert_eq!(fw[0], 1);
        assert_eq!(FwSlotLog::decode(&fw).unwrap().revision(1).unwrap(), FIRMWARE_REVISION);
        // LPO/NUMD slicing: 8 bytes at offset 8 = FRS1.
        let w = e.log(LogPageId::FW_SLOT, 8, 8, false).unwrap();
        assert_eq!(&w[..], &fw[8..16]);
        // Past the end of the page: zero padded.
        let w = e.log(LogPageId::FW_SLOT, 504, 16, false).unwrap();
        assert_eq!(&w[..], &[0; 16]);
        assert_eq!(e.log(LogPageId::FW_SLOT, 516, 4, false), Err(invalid_field()));
        assert_eq!(e.log(LogPageId::FW_SLOT, 2, 4, false), Err(invalid_field()));
        let smart = e.log(LogPageId::SMART, 0, 512, false).unwrap();
        assert_eq!(smart.len(), 512);
        let mut c = GetLogPageCmd::new(LogPageId::SMART, 7, 0, 512);
        assert_eq!(e.run(&c.to_sqe(1)).unwrap_err(), invalid_ns());
        c.nsid = 3;
        assert!(e.run(&c.to_sqe(1)).is_ok());
        assert_eq!(e.log(LogPageId::ERROR, 0, 8192, false).unwrap().len(), 8192);
        assert_eq!(e.log(LogPageId::DISCOVERY, 0, 20, false), Err(invalid_field()));
        assert_eq!(e.log(LogPageId(0xC0), 0, 4, false), Err(invalid_field()));
        let sl = decode_supported_logs(&e.log(LogPageId::SUPPORTED, 0, 1024, false).unwrap());
        assert_eq!(sl, IO_LOGS.to_vec());
        // Command effects.
        let ce = CommandEffectsLog::decode(&e.log(LogPageId::CMD_EFFECTS, 0, 4096, false).unwrap()).unwrap();
        assert_eq!(ce.acs[0x06], effects::CSUPP);
        assert_eq!(ce.acs[0x18], effects::CSUPP);
        assert_eq!(ce.acs[0x80], 0);
        assert_eq!(ce.iocs[0x01], effects::CSUPP | effects::LBCC);
        assert_eq!(ce.iocs[0x02], effects::CSUPP);
        assert_eq!(ce.iocs[0x09], effects::CSUPP | effects::LBCC);
        assert_eq!(ce.iocs[0x0C], effects::CSUPP);
        assert_eq!(ce.iocs[0x7D], 0);
        // The Zoned Namespace set's: its commands too; other sets: none.
        let mut c = GetLogPageCmd::new(LogPageId::CMD_EFFECTS, 0, 0, 4096);
        c.csi = 2;
        let zns = CommandEffectsLog::decode(&e.run(&c.to_sqe(1)).unwrap().data).unwrap();
        assert_eq!(
            (zns.iocs[0x7D], zns.iocs[0x79], zns.iocs[0x7A]),
            (ce.iocs[0x01], ce.iocs[0x01], ce.iocs[0x02])
        );
        assert_eq!(zns.iocs[0x02], effects::CSUPP);
        c.csi = 1;
        assert_eq!(e.run(&c.to_sqe(1)).unwrap_err(), Status::INVALID_LOG_PAGE);
    }

    #[test]
    fn changed_ns_and_aer_flow() {
        let mut e = env();
        assert_eq!(e.set_feature(FeatureId::ASYNC_EVENT, aec::NS_ATTR), Ok(aec::NS_ATTR as u64));
        assert_eq!(e.get_feature(FeatureId::ASYNC_EVENT), Ok(aec::NS_ATTR as u64));
        let aer = Sqe::new(AdminOpcode::ASYNC_EVENT.0);
        parse(&e.ctx, &e.ctrl, &aer).unwrap();
        let ctrl = e.ctrl.clone();
        assert!(matches!(execute(&mut e.ctx, &ctrl, &aer, Bytes::new(), 31), Exec::Pending(Pending::Plain)));
        assert!(e.rx.try_recv().is_err());
        e.subsys.add_namespace(Arc::new(Namespace::new(SUBNQN, 5, Arc::new(MemBackend::new(1 << 20, 512)))));
        let c = e.rx.try_recv().unwrap();
        assert_eq!(c.tag, 31);
        assert!(c.status.is_success());
        assert_eq!(c.result as u32, AsyncEvent::NS_CHANGED.to_dw0());
        // RAE=1 keeps the list.
        let l = e.log(LogPageId::CHANGED_NS, 0, 4096, true).unwrap();
        assert_eq!(decode_ns_list(&l), vec![5]);
        // Masked until read with RAE=0: another change raises nothing yet.
        assert!(matches!(execute(&mut e.ctx, &ctrl, &aer, Bytes::new(), 30), Exec::Pending(_)));
        e.subsys.remove_namespace(1);
        assert!(e.rx.try_recv().is_err());
        let l = e.log(LogPageId::CHANGED_NS, 0, 4096, false).unwrap();
        assert_eq!(decode_ns_list(&l), vec![5, 1]);
        assert!(decode_ns_list(&e.log(LogPageId::CHANGED_NS, 0, 4096, false).unwrap()).is_empty());
        // Unmasked now: the outstanding AER (tag 30) completes on the next change.
        e.subsys.add_namespace(Arc::new(Namespace::new(SUBNQN, 1, Arc::new(MemBackend::new(1 << 20, 512)))));
        assert_eq!(e.rx.try_recv().unwrap().tag, 30);
        // Identify reflects the change.
        assert_eq!(decode_ns_list(&e.identify(Cns::ACTIVE_NS_LIST, 0).unwrap()), vec![1, 3, 5]);
        // AER limit: 4 outstanding.
        for t in 0..4 {
            assert!(matches!(execute(&mut e.ctx, &ctrl, &aer, Bytes::new(), t), Exec::Pending(_)));
        }
        match execute(&mut e.ctx, &ctrl, &aer, Bytes::new(), 9) {
            Exec::Done(r) => assert_eq!(r.status, Status::ASYNC_LIMIT.with_dnr()),
            Exec::Pending(_) => panic!("fifth AER accepted"),
        }
    }

    #[test]
    fn ana_log_identify_and_io_follow_the_port_state() {
        let mut e = env();
        let port = e.ctrl.port_id;
        let b = e.identify(Cns::CTRL, 0).unwrap();
        use ctrl_off as o;
        assert_eq!((b[o::ANATT], b[o::ANACAP]), (10, 0x1F));
        assert_eq!((u32_at(&b, o::ANAGRPMAX), u32_at(&b, o::NANAGRPID)), (128, 128));
        // The Linux host sizes the log from NANAGRPID and MNAN; it must fit MDTS.
        let small = Limits { mdts: 1, ..Limits::default() };
        assert_eq!(small.max_ana_groups(), 127);
        assert!(16 + 32 * small.max_ana_groups() + 4 * MAX_NAMESPACES <= small.max_transfer());
        assert_eq!((Limits::default().ana_log_len(), small.ana_log_len()), (8208, 8176));
        let ana = |e: &mut Env, lsp: u8| {
            let mut c = GetLogPageCmd::new(LogPageId::ANA, 0xFFFF_FFFF, 0, 8208);
            c.lsp = lsp;
            c.rae = true;
            AnaLog::decode(&e.run(&c.to_sqe(2)).unwrap().data).unwrap()
        };
        // Default: group 1, every namespace, optimized, nothing changed yet.
        let g = |grpid, chgcnt, state, nsids: &[u32]| AnaGroupDesc {
            grpid,
            chgcnt,
            state,
            nsids: nsids.to_vec(),
        };
        let l = ana(&mut e, 0);
        assert_eq!((l.chgcnt, l.groups.clone()), (0, vec![g(1, 0, AnaState::OPTIMIZED, &[1, 3])]));
        let n = IdentifyNamespace::decode(&e.identify(Cns::NS, 3).unwrap()).unwrap();
        assert_eq!((n.anagrpid, n.nuse), (1, 32));
        // Namespace 3 into group 2, which this port reports inaccessible.
        assert!(e.subsys.namespace(3).unwrap().set_ana_group(2));
        let groups = BTreeMap::from([(2, AnaState::INACCESSIBLE), (5, AnaState::NON_OPTIMIZED)]);
        assert!(e.target.set_port_ana(port, AnaState::OPTIMIZED, &groups));
        assert!(!e.target.set_port_ana(port, AnaState::OPTIMIZED, &groups), "same states: no change");
        let l = ana(&mut e, 0);
        assert_eq!(
            (l.chgcnt, l.groups),
            (
                1,
                vec![
                    g(1, 1, AnaState::OPTIMIZED, &[1]),
                    g(2, 1, AnaState::INACCESSIBLE, &[3]),
                    // Configured for the port, no namespaces: listed, as nvmet lists a port's groups.
                    g(5, 1, AnaState::NON_OPTIMIZED, &[]),
                ]
            )
        );
        // Return Groups Only: no NSIDs.
        assert!(ana(&mut e, ANA_LSP_RGO).groups.iter().all(|d| d.nsids.is_empty()));
        let n = IdentifyNamespace::decode(&e.identify(Cns::NS, 3).unwrap()).unwrap();
        assert_eq!((n.anagrpid, n.nuse), (2, 0));
        // I/O through this port: refused on group 2 (no DNR, so the host may
        // retry on another path), served on group 1.
        assert_eq!(io_status(&mut e, IoOpcode::READ, 3, 4096, 0), Status::ANA_INACCESSIBLE);
        assert_eq!(io_status(&mut e, IoOpcode::WRITE, 3, 4096, 0), Status::ANA_INACCESSIBLE);
        assert_eq!(io_status(&mut e, IoOpcode::READ, 1, 512, 0), Status::SUCCESS);
        e.target.set_port_ana(port, AnaState::CHANGE, &BTreeMap::new());
        assert_eq!(io_status(&mut e, IoOpcode::READ, 1, 512, 0), Status::ANA_TRANSITION);
        e.target.set_port_ana(port, AnaState::PERSISTENT_LOSS, &BTreeMap::new());
        assert_eq!(io_status(&mut e, IoOpcode::FLUSH, 3, 0, 0), Status::ANA_PERSISTENT_LOSS);
        e.target.set_port_ana(port, AnaState::NON_OPTIMIZED, &BTreeMap::new());
        assert_eq!(io_status(&mut e, IoOpcode::READ, 3, 4096, 0), Status::SUCCESS);
        // Another port's states do not touch this one's queues.
        let other = e.target.add_port("127.0.0.1:4421".parse().unwrap());
        e.target.set_port_ana(other, AnaState::INACCESSIBLE, &BTreeMap::new());
        assert_eq!(io_status(&mut e, IoOpcode::READ, 1, 512, 0), Status::SUCCESS);
        assert_eq!(ana(&mut e, 0).groups[0].state, AnaState::NON_OPTIMIZED);
    }

    /// An I/O command's status through `io::parse` then `io::execute` (RAM
    /// namespaces finish at once).
    fn io_status(e: &mut Env, op: IoOpcode, nsid: u32, len: u32, cdw11: u32) -> Status {
        let mut s = Sqe::new(op.0);
        s.set_nsid(nsid).set_sgl(SglDescriptor::transport(len)).set_nlb(0).set_cdw(11, cdw11);
        if op == IoOpcode::DSM {
            s.set_cdw(10, 0);
        }
        let ctrl = e.ctrl.clone();
        if let Err(st) = super::super::io::parse(&e.ctx, &ctrl, &s) {
            return st;
        }
        let data = Bytes::from(vec![0u8; len as usize]);
        match super::super::io::execute(&mut e.ctx, &ctrl, &s, data, 5, true) {
            Exec::Done(r) => r.status,
            Exec::Pending(p) => panic!("RAM namespace pending {p:?}"),
        }
    }

    #[test]
    fn write_protect_feature() {
        let mut e = env();
        let wp = |cdw11, nsid| {
            let mut s = SetFeaturesCmd::new(FeatureId::WRITE_PROTECT, cdw11).to_sqe(3);
            s.set_nsid(nsid);
            s
        };
        let get = |nsid| {
            let mut s = GetFeaturesCmd::new(FeatureId::WRITE_PROTECT).to_sqe(4);
            s.set_nsid(nsid);
            s
        };
        let id = IdentifyController::decode(&e.identify(Cns::CTRL, 0).unwrap()).unwrap();
        assert_eq!(id.nwpc, 1, "NWPC: write protect / no write protect only");
        assert_eq!(e.run(&get(1)).unwrap().result, 0);
        assert_eq!(io_status(&mut e, IoOpcode::WRITE, 1, 512, 0), Status::SUCCESS);
        // Unknown namespaces, FFFFFFFFh included: Invalid Namespace (nvmet_req_find_ns).
        for nsid in [0, 2, 0xFFFF_FFFF] {
            assert_eq!(e.run(&wp(1, nsid)).unwrap_err(), invalid_ns(), "nsid {nsid:#x}");
            assert_eq!(e.run(&get(nsid)).unwrap_err(), invalid_ns(), "nsid {nsid:#x}");
        }
        // Until power cycle / permanent: not supported (NWPC bits 1, 2 clear).
        for state in [2, 3, 4, 0x8000_0001] {
            assert_eq!(e.run(&wp(state, 1)).unwrap_err(), invalid_field(), "state {state}");
        }
        assert_eq!(e.run(&get(1)).unwrap().result, 0);
        assert!(decode_ns_list(&e.log(LogPageId::CHANGED_NS, 0, 4096, false).unwrap()).is_empty());

        e.run(&wp(1, 1)).unwrap();
        assert_eq!(e.run(&get(1)).unwrap().result, 1);
        assert_eq!(e.run(&get(3)).unwrap().result, 0, "per namespace");
        let ns = IdentifyNamespace::decode(&e.identify(Cns::NS, 1).unwrap()).unwrap();
        assert_eq!(ns.nsattr & 1, 1, "NSATTR write protected");
        let ind = IdentifyNsIndep::decode(&e.identify(Cns::IND_CS_NS, 1).unwrap()).unwrap();
        assert_eq!(ind.nsattr & 1, 1);
        assert_eq!(IdentifyNamespace::decode(&e.identify(Cns::NS, 3).unwrap()).unwrap().nsattr, 0);
        // The hosts hear of it (nvmet_ns_changed).
        assert_eq!(decode_ns_list(&e.log(LogPageId::CHANGED_NS, 0, 4096, false).unwrap()), vec![1]);
        // Only Read and Flush run (nvmet_io_cmd_check_access); no DNR.
        assert_eq!(io_status(&mut e, IoOpcode::READ, 1, 512, 0), Status::SUCCESS);
        assert_eq!(io_status(&mut e, IoOpcode::FLUSH, 1, 0, 0), Status::SUCCESS);
        for op in [IoOpcode::WRITE, IoOpcode::WRITE_ZEROES, IoOpcode::COMPARE, IoOpcode::DSM, IoOpcode(0x7F)]
        {
            let len = if op == IoOpcode::WRITE_ZEROES { 0 } else { 512 };
            assert_eq!(io_status(&mut e, op, 1, len, 1 << 2), Status::NS_WRITE_PROTECTED, "{op:?}");
        }
        assert_eq!(io_status(&mut e, IoOpcode::WRITE, 3, 4096, 0), Status::SUCCESS, "other namespace");
        // A write parsed before protection was set is refused when it executes.
        let mut w = Sqe::new(IoOpcode::WRITE.0);
        w.set_nsid(3).set_sgl(SglDescriptor::transport(4096)).set_nlb(0);
        super::super::io::parse(&e.ctx, &e.ctrl, &w).unwrap();
        e.run(&wp(1, 3)).unwrap();
        let ctrl = e.ctrl.clone();
        match super::super::io::execute(&mut e.ctx, &ctrl, &w, Bytes::from(vec![1u8; 4096]), 6, true) {
            Exec::Done(r) => assert_eq!(r.status, Status::NS_WRITE_PROTECTED),
            Exec::Pending(_) => panic!("pending"),
        }
        // Lifted again: writes run, and the hosts hear of it again.
        e.run(&wp(0, 1)).unwrap();
        assert_eq!(e.run(&get(1)).unwrap().result, 0);
        assert_eq!(IdentifyNamespace::decode(&e.identify(Cns::NS, 1).unwrap()).unwrap().nsattr, 0);
        assert_eq!(io_status(&mut e, IoOpcode::WRITE, 1, 512, 0), Status::SUCCESS);
        assert_eq!(decode_ns_list(&e.log(LogPageId::CHANGED_NS, 0, 4096, false).unwrap()), vec![3, 1]);
        // Saving is refused as for every feature.
        let mut sv = SetFeaturesCmd::new(FeatureId::WRITE_PROTECT, 1);
        sv.sv = true;
        let mut sv = sv.to_sqe(3);
        sv.set_nsid(1);
        assert_eq!(e.run(&sv).unwrap_err(), Status::FEATURE_NOT_SAVEABLE.with_dnr());
        assert_eq!(e.run(&get(1)).unwrap().result, 0);
    }

    /// A RAM backend with a twist: its Flush fails (completing through the
    /// queue's sink, as the file and block backends do), or it reports a
    /// block device's I/O sizes.
    struct RamVariant {
        ram: MemBackend,
        flush_fails: bool,
        hints: Option<IoHints>,
    }

    impl crate::backend::Backend for RamVariant {
        fn size(&self) -> u64 {
            self.ram.size()
        }
        fn block_size(&self) -> u32 {
            self.ram.block_size()
        }
        fn volatile_write_cache(&self) -> bool {
            true
        }
        fn describe(&self) -> String {
            "ram variant".into()
        }
        fn resize(&self, new_size: u64) -> Result<(), String> {
            self.ram.resize(new_size)
        }
        fn submit(&self, tag: u32, op: IoOp, io: &crate::backend::QueueIo) -> Option<IoCompletion> {
            if !self.flush_fails {
                return self.ram.submit(tag, op, io);
            }
            let c = match op {
                IoOp::Flush => IoCompletion::status(tag, Status::WRITE_FAULT),
                op => self.ram.submit(tag, op, io).expect("RAM completes inline"),
            };
            let _ = io.sink.send(c);
            None
        }
        fn io_hints(&self) -> Option<IoHints> {
            self.hints
        }
    }

    #[test]
    fn write_protect_is_lifted_when_its_flush_fails() {
        let mut e = env();
        e.subsys.add_namespace(Arc::new(Namespace::new(
            SUBNQN,
            7,
            Arc::new(RamVariant { ram: MemBackend::new(1 << 20, 512), flush_fails: true, hints: None }),
        )));
        e.log(LogPageId::CHANGED_NS, 0, 4096, false).unwrap();
        let mut s = SetFeaturesCmd::new(FeatureId::WRITE_PROTECT, 1).to_sqe(3);
        s.set_nsid(7);
        parse(&e.ctx, &e.ctrl, &s).unwrap();
        let ctrl = e.ctrl.clone();
        let pending = match execute(&mut e.ctx, &ctrl, &s, Bytes::new(), 12) {
            Exec::Pending(p @ Pending::WriteProtect(_)) => p,
            other => panic!("expected the flush pending, got {other:?}"),
        };
        // Protected while the flush runs.
        assert_eq!(io_status(&mut e, IoOpcode::WRITE, 7, 512, 0), Status::NS_WRITE_PROTECTED);
        let c = e.rx.try_recv().unwrap();
        assert_eq!((c.tag, c.status), (12, Status::WRITE_FAULT));
        let r = crate::cmd::complete(pending, c);
        assert_eq!(r.status, Status::WRITE_FAULT, "the flush's status is the command's");
        let mut g = GetFeaturesCmd::new(FeatureId::WRITE_PROTECT).to_sqe(4);
        g.set_nsid(7);
        assert_eq!(e.run(&g).unwrap().result, 0, "protection lifted again");
        assert!(decode_ns_list(&e.log(LogPageId::CHANGED_NS, 0, 4096, false).unwrap()).is_empty());
        // The write went to the sink too (this backend always completes there).
        assert!(matches!(io_status_pending(&mut e, 7), Some(Status::SUCCESS)));
    }

    /// A write on a namespace whose backend completes through the sink: its status from there.
    fn io_status_pending(e: &mut Env, nsid: u32) -> Option<Status> {
        let mut s = Sqe::new(IoOpcode::WRITE.0);
        s.set_nsid(nsid).set_sgl(SglDescriptor::transport(512)).set_nlb(0);
        let ctrl = e.ctrl.clone();
        super::super::io::parse(&e.ctx, &ctrl, &s).ok()?;
        match super::super::io::execute(&mut e.ctx, &ctrl, &s, Bytes::from(vec![0u8; 512]), 13, true) {
            Exec::Done(r) => Some(r.status),
            Exec::Pending(_) => e.rx.try_recv().ok().map(|c| c.status),
        }
    }

    #[test]
    fn features() {
        let mut e = env();
        // Number of Queues: max_qid - 1 in both halves.
        assert_eq!(e.set_feature(FeatureId::NUM_QUEUES, 0x0003_0003), Ok(0x0007_0007));
        assert_eq!(e.set_feature(FeatureId::NUM_QUEUES, 0x00FF_00FF), Ok(0x0007_0007));
        assert_eq!(e.get_feature(FeatureId::NUM_QUEUES), Ok(0x0007_0007));
        assert_eq!(e.set_feature(FeatureId::NUM_QUEUES, 0xFFFF_0000), Err(invalid_field()));
        assert_eq!(e.set_feature(FeatureId::NUM_QUEUES, 0x0000_FFFF), Err(invalid_field()));
        // AEC mask.
        assert_eq!(e.set_feature(FeatureId::ASYNC_EVENT, 1 << 11), Ok(1 << 11));
        assert_eq!(e.set_feature(FeatureId::ASYNC_EVENT, 1 << 12), Err(invalid_field()));
        assert_eq!(e.set_feature(FeatureId::ASYNC_EVENT, 1 << 31), Err(invalid_field()));
        // KATO, rounded up to seconds.
        assert_eq!(e.get_feature(FeatureId::KATO), Ok(5000));
        assert_eq!(e.set_feature(FeatureId::KATO, 1500), Ok(2));
        assert_eq!(e.ctrl.kato_ms(), 2000);
        assert_eq!(e.get_feature(FeatureId::KATO), Ok(2000));
        // VWC.
        assert_eq!(e.get_feature(FeatureId::VOLATILE_WC), Ok(1));
        assert_eq!(e.set_feature(FeatureId::VOLATILE_WC, 1), Err(invalid_field()));
        // Host identifier.
        let mut g = GetFeaturesCmd::new(FeatureId::HOST_ID);
        g.cdw11 = 1;
        let mut s = g.to_sqe(1);
        s.set_sgl(SglDescriptor::transport(16));
        assert_eq!(&e.run(&s).unwrap().data[..], &[0xAB; 16]);
        s.set_cdw(11, 0);
        assert_eq!(e.run(&s).unwrap_err(), invalid_field());
        assert_eq!(e.run(&g.to_sqe(1)).unwrap_err(), Status::SGL_INVALID_DATA.with_dnr());
        assert_eq!(e.set_feature(FeatureId::HOST_ID, 1), Err(Status::CMD_SEQ_ERROR.with_dnr()));
        // Unsupported features.
        for fid in
            [FeatureId::ARBITRATION, FeatureId::POWER_MGMT, FeatureId::TEMP_THRESH, FeatureId::IRQ_COALESCE]
        {
            assert_eq!(e.set_feature(fid, 0), Err(invalid_field()));
            assert_eq!(e.get_feature(fid), Err(invalid_field()));
        }
        // SV ⇒ not saveable; SEL ignored.
        let sv = SetFeaturesCmd { sv: true, ..SetFeaturesCmd::new(FeatureId::KATO, 1000) };
        assert_eq!(e.run(&sv.to_sqe(1)).unwrap_err(), Status::FEATURE_NOT_SAVEABLE.with_dnr());
        let sel = GetFeaturesCmd { sel: FeatureSel::DEFAULT, ..GetFeaturesCmd::new(FeatureId::KATO) };
        assert_eq!(e.run(&sel.to_sqe(1)).unwrap().result, 2000);
    }

    #[test]
    fn keep_alive_and_kato_zero() {
        let mut e = env();
        let ka = Sqe::new(AdminOpcode::KEEP_ALIVE.0);
        assert!(e.run(&ka).is_ok());
        assert!(e.ctrl.keep_alive_remaining().unwrap() > std::time::Duration::from_millis(4000));
        assert_eq!(e.set_feature(FeatureId::KATO, 0), Ok(0));
        assert_eq!(e.run(&ka).unwrap_err(), Status::KAT_INVALID);
    }

    #[test]
    fn discovery_log_page_and_aen() {
        let mut e = env_for(true, true);
        let hdr = e.log(LogPageId::DISCOVERY, 0, 20, true).unwrap();
        let h = DiscoveryLog::decode(&hdr).unwrap().header;
        assert_eq!(h.numrec, 2);
        assert_eq!(h.genctr, e.target.genctr());
        let entries = e.log(LogPageId::DISCOVERY, 1024, 2048, false).unwrap();
        assert_eq!(entries[2], 3);
        assert_eq!(&entries[1024 + 256..1024 + 256 + SUBNQN.len()], SUBNQN.as_bytes());
        let mut full = hdr.to_vec();
        full.resize(1024, 0);
        full.extend_from_slice(&entries);
        assert!(DiscoveryLog::decode(&full).unwrap().is_complete());
        assert_eq!(e.log(LogPageId::DISCOVERY, 3 * 1024 + 4, 4, false), Err(invalid_field()));
        assert_eq!(e.log(LogPageId::DISCOVERY, 2, 4, false), Err(invalid_field()));
        // AEN F0h on change, re-armed by a RAE=0 read.
        e.set_feature(FeatureId::ASYNC_EVENT, aec::DISC_CHANGE).unwrap();
        let aer = Sqe::new(AdminOpcode::ASYNC_EVENT.0);
        let ctrl = e.ctrl.clone();
        parse(&e.ctx, &ctrl, &aer).unwrap();
        assert!(matches!(execute(&mut e.ctx, &ctrl, &aer, Bytes::new(), 31), Exec::Pending(_)));
        e.target.add_subsystem(Arc::new(Subsystem::new("nqn.2024-01.io.example:two", "m", None, false)));
        assert_eq!(e.rx.try_recv().unwrap().result as u32, AsyncEvent::DISC_CHANGED.to_dw0());
        assert!(matches!(execute(&mut e.ctx, &ctrl, &aer, Bytes::new(), 30), Exec::Pending(_)));
        e.target.add_subsystem(Arc::new(Subsystem::new("nqn.2024-01.io.example:three", "m", None, false)));
        assert!(e.rx.try_recv().is_err(), "masked until the log is read");
        let h = DiscoveryLog::decode(&e.log(LogPageId::DISCOVERY, 0, 20, false).unwrap()).unwrap().header;
        assert_eq!(h.numrec, 4);
        e.target.remove_subsystem("nqn.2024-01.io.example:two");
        assert_eq!(e.rx.try_recv().unwrap().tag, 30);
        // Keep Alive on discovery.
        assert!(e.run(&Sqe::new(AdminOpcode::KEEP_ALIVE.0)).is_ok());
    }

    #[test]
    fn a_block_devices_io_sizes_reach_identify_namespace_as_nvmet_reports_them() {
        use crate::backend::Backend;
        let identify = |bs: u32, hints: Option<IoHints>| {
            let ram = MemBackend::new(1 << 20, bs);
            let backend: Arc<dyn Backend> = match hints {
                Some(h) => Arc::new(RamVariant { ram, flush_fails: false, hints: Some(h) }),
                None => Arc::new(ram),
            };
            identify_ns(&Namespace::new(SUBNQN, 1, backend), AnaState::OPTIMIZED, &Limits::default())
        };
        // 512-byte blocks on 4 KiB physical blocks, 64 KiB optimal I/O, 1 MiB discard granularity.
        let ssd =
            IoHints { physical_block_size: 4096, io_min: 4096, io_opt: 65536, discard_granularity: 1 << 20 };
        let id = identify(512, Some(ssd));
        assert_eq!(id.nsfeat, NSFEAT_ATOMICS | NSFEAT_IO_OPT);
        assert_eq!((id.nawun, id.nawupf, id.nacwu), (7, 7, 7));
        assert_eq!((id.npwg, id.npwa, id.npdg, id.npda, id.nows), (7, 7, 2047, 2047, 127));
        // In 4 KiB namespace blocks; sizes the device does not name (0) count as one block.
        let id = identify(4096, Some(IoHints { io_opt: 0, discard_granularity: 0, ..ssd }));
        assert_eq!((id.nawupf, id.npwg, id.npdg, id.nows), (0, 0, 0, 0));
        assert_eq!(id.nsfeat, 0x12);
        // At most 65536 blocks.
        let id = identify(512, Some(IoHints { discard_granularity: 1 << 30, ..ssd }));
        assert_eq!(id.npdg, u16::MAX);
        // Files and RAM: none of it, as nvmet (block devices only); they are thin provisioned.
        let id = identify(512, None);
        assert_eq!((id.nsfeat, id.nawupf, id.npwg, id.npdg, id.nows), (NSFEAT_THINP, 0, 0, 0, 0));
    }
}
