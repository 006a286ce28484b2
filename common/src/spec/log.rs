//! Get Log Page (admin OPC 02h) command fields and log page structures
//! (NVMe Base 2.0 §5.16; reference §5.4; Linux `struct nvme_get_log_page_command`,
//! `struct nvme_error_slot`, `struct nvme_smart_log`, `struct nvme_fw_slot_info_log`,
//! `struct nvme_effects_log`, `struct nvme_ana_rsp_hdr`, `struct nvme_ana_group_desc`).

use super::wire::{arr, need, put_u128, put_u16, put_u32, put_u64, u128_at, u16_at, u32_at, u64_at};
use super::SpecError;
use crate::opcode::AdminOpcode;
use crate::sqe::{SglDescriptor, Sqe};

/// Log page identifier (LID).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct LogPageId(pub u8);

impl LogPageId {
    /// Supported log pages.
    pub const SUPPORTED: Self = Self(0x00);
    /// Error information.
    pub const ERROR: Self = Self(0x01);
    /// SMART / health information.
    pub const SMART: Self = Self(0x02);
    /// Firmware slot information.
    pub const FW_SLOT: Self = Self(0x03);
    /// Changed namespace list.
    pub const CHANGED_NS: Self = Self(0x04);
    /// Commands supported and effects.
    pub const CMD_EFFECTS: Self = Self(0x05);
    /// Device self-test.
    pub const DEVICE_SELF_TEST: Self = Self(0x06);
    /// Telemetry host-initiated.
    pub const TELEMETRY_HOST: Self = Self(0x07);
    /// Telemetry controller-initiated.
    pub const TELEMETRY_CTRL: Self = Self(0x08);
    /// Endurance group information.
    pub const ENDURANCE_GROUP: Self = Self(0x09);
    /// Asymmetric namespace access.
    pub const ANA: Self = Self(0x0C);
    /// Feature identifiers supported and effects.
    pub const FEATURE_EFFECTS: Self = Self(0x12);
    /// Rotational media information.
    pub const ROTATIONAL_MEDIA: Self = Self(0x16);
    /// Discovery log page (discovery controllers).
    pub const DISCOVERY: Self = Self(0x70);
    /// Reservation notification.
    pub const RESERVATION: Self = Self(0x80);
    /// Sanitize status.
    pub const SANITIZE: Self = Self(0x81);
}

/// Get Log Page command fields: CDW10 (LID 7:0, LSP 14:8, RAE 15, NUMDL 31:16),
/// CDW11 (NUMDU 15:0, LSI 31:16), CDW12/13 LPO, CDW14 (UUID index 6:0, OT 23, CSI 31:24).
///
/// LSP is 7 bits as in NVMe 2.0 and libnvme (`NVME_LOG_CDW10_LSP_MASK` 0x7F);
/// older revisions defined only bits 11:8.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct GetLogPageCmd {
    /// Namespace identifier (0xFFFFFFFF = controller-wide for SMART).
    pub nsid: u32,
    /// Log page identifier.
    pub lid: LogPageId,
    /// Log specific parameter (7 bits).
    pub lsp: u8,
    /// Retain asynchronous event.
    pub rae: bool,
    /// Number of dwords, 0's based (NUMDU:NUMDL).
    pub numd: u32,
    /// Log specific identifier.
    pub lsi: u16,
    /// Log page offset in bytes (dword aligned).
    pub lpo: u64,
    /// UUID index (7 bits).
    pub uuid_index: u8,
    /// Offset type (LPO is an index, not bytes).
    pub ot: bool,
    /// Command set identifier.
    pub csi: u8,
}

impl GetLogPageCmd {
    /// Reads `len` bytes (rounded up to whole dwords, at least one) of log `lid` at byte offset `lpo`.
    pub const fn new(lid: LogPageId, nsid: u32, lpo: u64, len: u32) -> Self {
        let dwords = if len == 0 { 1 } else { len.div_ceil(4) };
        Self {
            nsid,
            lid,
            lsp: 0,
            rae: false,
            numd: dwords - 1,
            lsi: 0,
            lpo,
            uuid_index: 0,
            ot: false,
            csi: 0,
        }
    }
    /// Transfer length in bytes: (NUMD + 1) · 4.
    pub const fn numd_bytes(&self) -> u64 {
        (self.numd as u64 + 1) * 4
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        let (c10, c11, c14) = (sqe.cdw(10), sqe.cdw(11), sqe.cdw(14));
        Self {
            nsid: sqe.nsid(),
            lid: LogPageId(c10 as u8),
            lsp: (c10 >> 8) as u8 & 0x7F,
            rae: c10 & (1 << 15) != 0,
            numd: (c10 >> 16) | (c11 & 0xFFFF) << 16,
            lsi: (c11 >> 16) as u16,
            lpo: sqe.u64_at(48),
            uuid_index: c14 as u8 & 0x7F,
            ot: c14 & (1 << 23) != 0,
            csi: (c14 >> 24) as u8,
        }
    }
    /// Builds the SQE (OPC 02h, transport SGL of `numd_bytes()`).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let c10 =
            self.lid.0 as u32 | ((self.lsp & 0x7F) as u32) << 8 | (self.rae as u32) << 15 | (self.numd << 16);
        let c11 = (self.numd >> 16) | (self.lsi as u32) << 16;
        let c14 = (self.uuid_index & 0x7F) as u32 | (self.ot as u32) << 23 | (self.csi as u32) << 24;
        let mut s = Sqe::new(AdminOpcode::GET_LOG_PAGE.0);
        s.set_cid(cid)
            .set_nsid(self.nsid)
            .set_sgl(SglDescriptor::transport(self.numd_bytes().min(u32::MAX as u64) as u32))
            .set_cdw(10, c10)
            .set_cdw(11, c11)
            .set_u64_at(48, self.lpo)
            .set_cdw(14, c14);
        s
    }
}

/// Bytes `[lpo, lpo + len)` of a whole log image, zero-filled past its end (how a
/// target serves an arbitrary Get Log Page window).
pub fn log_window(full: &[u8], lpo: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    if let Ok(start) = usize::try_from(lpo) {
        if start < full.len() {
            let n = (full.len() - start).min(len);
            out[..n].copy_from_slice(&full[start..start + n]);
        }
    }
    out
}

/// Error information log entry (64 bytes; Linux `struct nvme_error_slot`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ErrorLogEntry {
    /// Error count (unique, incrementing; 0 = empty entry).
    pub error_count: u64,
    /// Submission queue ID.
    pub sqid: u16,
    /// Command ID.
    pub cid: u16,
    /// Status field as in the CQE (bit 0 phase tag, bits 15:1 status).
    pub status: u16,
    /// Parameter error location (bits 7:0 byte, 10:8 bit).
    pub param_error_location: u16,
    /// LBA.
    pub lba: u64,
    /// Namespace.
    pub nsid: u32,
    /// Vendor specific information available (log page ID).
    pub vs: u8,
    /// Transport type.
    pub trtype: u8,
    /// Command specific information.
    pub cs: u64,
    /// Transport type specific information.
    pub ttsi: u16,
    /// Log page version.
    pub version: u8,
}

/// Size of an error log entry.
pub const ERROR_LOG_ENTRY_LEN: usize = 64;

impl ErrorLogEntry {
    /// Decodes from at least 64 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, ERROR_LOG_ENTRY_LEN, "error log entry")?;
        Ok(Self {
            error_count: u64_at(b, 0),
            sqid: u16_at(b, 8),
            cid: u16_at(b, 10),
            status: u16_at(b, 12),
            param_error_location: u16_at(b, 14),
            lba: u64_at(b, 16),
            nsid: u32_at(b, 24),
            vs: b[28],
            trtype: b[29],
            cs: u64_at(b, 32),
            ttsi: u16_at(b, 40),
            version: b[63],
        })
    }
    /// Encodes to 64 bytes.
    pub fn encode(&self) -> [u8; ERROR_LOG_ENTRY_LEN] {
        let mut b = [0u8; ERROR_LOG_ENTRY_LEN];
        put_u64(&mut b, 0, self.error_count);
        put_u16(&mut b, 8, self.sqid);
        put_u16(&mut b, 10, self.cid);
        put_u16(&mut b, 12, self.status);
        put_u16(&mut b, 14, self.param_error_location);
        put_u64(&mut b, 16, self.lba);
        put_u32(&mut b, 24, self.nsid);
        b[28] = self.vs;
        b[29] = self.trtype;
        put_u64(&mut b, 32, self.cs);
        put_u16(&mut b, 40, self.ttsi);
        b[63] = self.version;
        b
    }
}

/// Encodes an error log (newest first) as consecutive 64-byte entries.
pub fn encode_error_log(entries: &[ErrorLogEntry]) -> Vec<u8> {
    entries.iter().flat_map(|e| e.encode()).collect()
}

/// Decodes every whole 64-byte entry in `b`.
pub fn decode_error_log(b: &[u8]) -> Vec<ErrorLogEntry> {
    b.chunks_exact(ERROR_LOG_ENTRY_LEN).map(|c| ErrorLogEntry::decode(c).unwrap()).collect()
}

/// Size of the SMART / health log and the firmware slot log.
pub const SMART_LOG_LEN: usize = 512;

/// SMART / Health Information log (LID 02h, 512 bytes; Linux `struct nvme_smart_log`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SmartLog {
    /// Critical warning bits.
    pub critical_warning: u8,
    /// Composite temperature (K).
    pub composite_temp: u16,
    /// Available spare (%).
    pub avail_spare: u8,
    /// Available spare threshold (%).
    pub spare_thresh: u8,
    /// Percentage used.
    pub percent_used: u8,
    /// Endurance group critical warning summary.
    pub endu_grp_crit_warn: u8,
    /// Data units read (1000 × 512 bytes).
    pub data_units_read: u128,
    /// Data units written (1000 × 512 bytes).
    pub data_units_written: u128,
    /// Host read commands.
    pub host_reads: u128,
    /// Host write commands.
    pub host_writes: u128,
    /// Controller busy time (minutes).
    pub ctrl_busy_time: u128,
    /// Power cycles.
    pub power_cycles: u128,
    /// Power-on hours.
    pub power_on_hours: u128,
    /// Unsafe shutdowns.
    pub unsafe_shutdowns: u128,
    /// Media and data integrity errors.
    pub media_errors: u128,
    /// Number of error information log entries.
    pub num_err_log_entries: u128,
    /// Warning composite temperature time (minutes).
    pub warning_temp_time: u32,
    /// Critical composite temperature time (minutes).
    pub critical_comp_time: u32,
    /// Temperature sensors 1–8 (K).
    pub temp_sensor: [u16; 8],
    /// Thermal management temperature 1/2 transition counts.
    pub thm_temp_trans_count: [u32; 2],
    /// Total time for thermal management temperature 1/2 (s).
    pub thm_temp_total_time: [u32; 2],
}

impl SmartLog {
    /// Decodes from at least 512 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, SMART_LOG_LEN, "smart log")?;
        let mut temp_sensor = [0u16; 8];
        for (i, t) in temp_sensor.iter_mut().enumerate() {
            *t = u16_at(b, 200 + 2 * i);
        }
        Ok(Self {
            critical_warning: b[0],
            composite_temp: u16_at(b, 1),
            avail_spare: b[3],
            spare_thresh: b[4],
            percent_used: b[5],
            endu_grp_crit_warn: b[6],
            data_units_read: u128_at(b, 32),
            data_units_written: u128_at(b, 48),
            host_reads: u128_at(b, 64),
            host_writes: u128_at(b, 80),
            ctrl_busy_time: u128_at(b, 96),
            power_cycles: u128_at(b, 112),
            power_on_hours: u128_at(b, 128),
            unsafe_shutdowns: u128_at(b, 144),
            media_errors: u128_at(b, 160),
            num_err_log_entries: u128_at(b, 176),
            warning_temp_time: u32_at(b, 192),
            critical_comp_time: u32_at(b, 196),
            temp_sensor,
            thm_temp_trans_count: [u32_at(b, 216), u32_at(b, 220)],
            thm_temp_total_time: [u32_at(b, 224), u32_at(b, 228)],
        })
    }
    /// Encodes to 512 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SMART_LOG_LEN];
        b[0] = self.critical_warning;
        put_u16(&mut b, 1, self.composite_temp);
        b[3] = self.avail_spare;
        b[4] = self.spare_thresh;
        b[5] = self.percent_used;
        b[6] = self.endu_grp_crit_warn;
        let wide = [
            self.data_units_read,
            self.data_units_written,
            self.host_reads,
            self.host_writes,
            self.ctrl_busy_time,
            self.power_cycles,
            self.power_on_hours,
            self.unsafe_shutdowns,
            self.media_errors,
            self.num_err_log_entries,
        ];
        for (i, v) in wide.iter().enumerate() {
            put_u128(&mut b, 32 + 16 * i, *v);
        }
        put_u32(&mut b, 192, self.warning_temp_time);
        put_u32(&mut b, 196, self.critical_comp_time);
        for (i, t) in self.temp_sensor.iter().enumerate() {
            put_u16(&mut b, 200 + 2 * i, *t);
        }
        put_u32(&mut b, 216, self.thm_temp_trans_count[0]);
        put_u32(&mut b, 220, self.thm_temp_trans_count[1]);
        put_u32(&mut b, 224, self.thm_temp_total_time[0]);
        put_u32(&mut b, 228, self.thm_temp_total_time[1]);
        b
    }
}

/// Firmware Slot Information log (LID 03h, 512 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct FwSlotLog {
    /// Active firmware info (bits 2:0 active slot, 6:4 next slot).
    pub afi: u8,
    /// Firmware revision for slots 1–7 (8 bytes ASCII each, at 8 + 8·i).
    pub frs: [[u8; 8]; 7],
}

impl FwSlotLog {
    /// Decodes from at least 512 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, SMART_LOG_LEN, "firmware slot log")?;
        let mut frs = [[0u8; 8]; 7];
        for (i, f) in frs.iter_mut().enumerate() {
            *f = arr(b, 8 + 8 * i);
        }
        Ok(Self { afi: b[0], frs })
    }
    /// Encodes to 512 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; SMART_LOG_LEN];
        b[0] = self.afi;
        for (i, f) in self.frs.iter().enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(f);
        }
        b
    }
    /// Slot `slot` (1..=7) revision as a string, trailing spaces/NULs removed.
    pub fn revision(&self, slot: usize) -> Option<String> {
        let f = self.frs.get(slot.checked_sub(1)?)?;
        Some(super::wire::padded(f, 0, 8))
    }
}

/// Size of the changed namespace list, command effects and ANA-free 4 KiB logs.
pub const LOG_4K: usize = 4096;

/// Changed Namespace List log (LID 04h): up to 1024 NSIDs, or overflow.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum ChangedNsList {
    /// The changed NSIDs (at most 1024, none 0).
    List(Vec<u32>),
    /// More than 1024 namespaces changed (first entry 0xFFFFFFFF).
    Overflow,
}

impl ChangedNsList {
    /// From a set of changed NSIDs (overflow if more than 1024).
    pub fn from_nsids(nsids: &[u32]) -> Self {
        if nsids.len() > 1024 {
            Self::Overflow
        } else {
            Self::List(nsids.to_vec())
        }
    }
    /// Encodes to 4096 bytes (zero-terminated list).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; LOG_4K];
        match self {
            Self::Overflow => put_u32(&mut b, 0, 0xFFFF_FFFF),
            Self::List(v) => {
                for (i, n) in v.iter().take(1024).enumerate() {
                    put_u32(&mut b, 4 * i, *n);
                }
            }
        }
        b
    }
    /// Decodes (stops at the first 0 entry; whole dwords only).
    pub fn decode(b: &[u8]) -> Self {
        if b.len() >= 4 && u32_at(b, 0) == 0xFFFF_FFFF {
            return Self::Overflow;
        }
        Self::List(super::identify::decode_ns_list(b))
    }
}

/// Command effects bits (Linux `NVME_CMD_EFFECTS_*`).
pub mod effects {
    /// Command supported.
    pub const CSUPP: u32 = 1 << 0;
    /// Logical block content change.
    pub const LBCC: u32 = 1 << 1;
    /// Namespace capability change.
    pub const NCC: u32 = 1 << 2;
    /// Namespace inventory change.
    pub const NIC: u32 = 1 << 3;
    /// Controller capability change.
    pub const CCC: u32 = 1 << 4;
    /// Command submission and execution (bits 18:16), shift.
    pub const CSE_SHIFT: u32 = 16;
    /// Command submission and execution mask.
    pub const CSE_MASK: u32 = 7 << 16;
    /// UUID selection supported.
    pub const UUID_SEL: u32 = 1 << 19;
}

/// Commands Supported and Effects log (LID 05h, 4096 bytes): 256 admin
/// entries at 0, 256 I/O entries at 1024.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CommandEffectsLog {
    /// Admin command effects, indexed by opcode.
    pub acs: [u32; 256],
    /// I/O command effects, indexed by opcode.
    pub iocs: [u32; 256],
}

impl Default for CommandEffectsLog {
    fn default() -> Self {
        Self { acs: [0; 256], iocs: [0; 256] }
    }
}

impl CommandEffectsLog {
    /// Decodes from at least 4096 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, LOG_4K, "command effects log")?;
        let mut l = Self::default();
        for i in 0..256 {
            l.acs[i] = u32_at(b, 4 * i);
            l.iocs[i] = u32_at(b, 1024 + 4 * i);
        }
        Ok(l)
    }
    /// Encodes to 4096 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; LOG_4K];
        for i in 0..256 {
            put_u32(&mut b, 4 * i, self.acs[i]);
            put_u32(&mut b, 1024 + 4 * i, self.iocs[i]);
        }
        b
    }
}

/// ANA state of a group.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AnaState(pub u8);

impl AnaState {
    /// Optimized.
    pub const OPTIMIZED: Self = Self(0x01);
    /// Non-optimized.
    pub const NON_OPTIMIZED: Self = Self(0x02);
    /// Inaccessible.
    pub const INACCESSIBLE: Self = Self(0x03);
    /// Persistent loss.
    pub const PERSISTENT_LOSS: Self = Self(0x04);
    /// Change.
    pub const CHANGE: Self = Self(0x0F);

    /// The defined states with their names, as nvmet's configfs `ana_state`
    /// and nvme-cli spell them.
    pub const NAMED: [(Self, &'static str); 5] = [
        (Self::OPTIMIZED, "optimized"),
        (Self::NON_OPTIMIZED, "non-optimized"),
        (Self::INACCESSIBLE, "inaccessible"),
        (Self::PERSISTENT_LOSS, "persistent-loss"),
        (Self::CHANGE, "change"),
    ];

    /// The state's name ([`Self::NAMED`]), `None` for a reserved value.
    pub fn name(self) -> Option<&'static str> {
        Self::NAMED.iter().find(|(st, _)| *st == self).map(|(_, n)| *n)
    }

    /// The state a name ([`Self::NAMED`]) stands for.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::NAMED.iter().find(|(_, n)| *n == name).map(|(st, _)| *st)
    }
}

/// LSP bit 0 of an ANA Get Log Page: return groups only (no NSID lists).
pub const ANA_LSP_RGO: u8 = 1 << 0;

/// ANA group descriptor (32 bytes + 4 per NSID).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct AnaGroupDesc {
    /// ANA group ID.
    pub grpid: u32,
    /// Change count.
    pub chgcnt: u64,
    /// ANA state (bits 3:0 of byte 16).
    pub state: AnaState,
    /// Namespaces in the group (empty when RGO was requested).
    pub nsids: Vec<u32>,
}

/// ANA log (LID 0Ch): 16-byte header (CHGCNT u64, NGRPS u16) + group descriptors.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct AnaLog {
    /// Change count.
    pub chgcnt: u64,
    /// Group descriptors (NGRPS = `groups.len()`).
    pub groups: Vec<AnaGroupDesc>,
}

impl AnaLog {
    /// Encodes header and descriptors (variable length).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; 16];
        put_u64(&mut b, 0, self.chgcnt);
        put_u16(&mut b, 8, self.groups.len() as u16);
        for g in &self.groups {
            let off = b.len();
            b.resize(off + 32 + 4 * g.nsids.len(), 0);
            put_u32(&mut b, off, g.grpid);
            put_u32(&mut b, off + 4, g.nsids.len() as u32);
            put_u64(&mut b, off + 8, g.chgcnt);
            b[off + 16] = g.state.0;
            for (i, n) in g.nsids.iter().enumerate() {
                put_u32(&mut b, off + 32 + 4 * i, *n);
            }
        }
        b
    }
    /// Decodes; every declared group and NSID must be present.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, 16, "ana log header")?;
        let ngrps = u16_at(b, 8) as usize;
        let mut groups = Vec::with_capacity(ngrps.min(1024));
        let mut off = 16;
        for _ in 0..ngrps {
            need(b, off + 32, "ana group descriptor")?;
            let nn = u32_at(b, off + 4) as usize;
            let end = nn
                .checked_mul(4)
                .and_then(|x| x.checked_add(off + 32))
                .ok_or(SpecError::Invalid { what: "ana nnsids", offset: off + 4 })?;
            need(b, end, "ana group nsids")?;
            groups.push(AnaGroupDesc {
                grpid: u32_at(b, off),
                chgcnt: u64_at(b, off + 8),
                state: AnaState(b[off + 16]),
                nsids: (0..nn).map(|i| u32_at(b, off + 32 + 4 * i)).collect(),
            });
            off = end;
        }
        Ok(Self { chgcnt: u64_at(b, 0), groups })
    }
}

/// Supported Log Pages log (LID 00h): 256 u32 entries, bit 0 LSUPP.
pub fn encode_supported_logs(lids: &[LogPageId]) -> Vec<u8> {
    let mut b = vec![0u8; 1024];
    for l in lids {
        put_u32(&mut b, 4 * l.0 as usize, 1);
    }
    b
}

/// LIDs whose LSUPP bit is set in a Supported Log Pages log.
pub fn decode_supported_logs(b: &[u8]) -> Vec<LogPageId> {
    b.chunks_exact(4)
        .take(256)
        .enumerate()
        .filter(|(_, c)| c[0] & 1 != 0)
        .map(|(i, _)| LogPageId(i as u8))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn get_log_page_sqe_layout() {
        // libnvme discovery header read: LID 70h, 20 bytes → NUMD 4.
        let mut c = GetLogPageCmd::new(LogPageId::DISCOVERY, 0, 1024, 20);
        c.rae = true;
        c.lsp = 0x7F;
        c.lsi = 0xABCD;
        c.csi = 2;
        assert_eq!(c.numd, 4);
        assert_eq!(c.numd_bytes(), 20);
        let s = c.to_sqe(3);
        assert_eq!(s.opcode(), 0x02);
        assert_eq!(&s.0[40..48], &[0x70, 0xFF, 4, 0, 0, 0, 0xCD, 0xAB]);
        assert_eq!(&s.0[48..56], &[0, 4, 0, 0, 0, 0, 0, 0]);
        assert_eq!(s.0[59], 2);
        assert_eq!(s.sgl().length, 20);
        assert_eq!(GetLogPageCmd::from_sqe(&s), c);
        let big = GetLogPageCmd::new(LogPageId::ERROR, 0, 0, 0x40000 + 4);
        assert_eq!(big.numd, 0x10000);
        assert_eq!(&big.to_sqe(0).0[42..46], &[0, 0, 1, 0]);
    }

    #[test]
    fn window() {
        let full: Vec<u8> = (0..10).collect();
        assert_eq!(log_window(&full, 8, 4), vec![8, 9, 0, 0]);
        assert_eq!(log_window(&full, 12, 2), vec![0, 0]);
        assert_eq!(log_window(&full, u64::MAX, 1), vec![0]);
    }

    #[test]
    fn page_offsets() {
        let e = ErrorLogEntry {
            error_count: 1,
            sqid: 2,
            cid: 3,
            status: 0x4005,
            nsid: 9,
            version: 1,
            ..Default::default()
        };
        let b = e.encode();
        assert_eq!(&b[8..14], &[2, 0, 3, 0, 5, 0x40]);
        assert_eq!(&b[24..28], &[9, 0, 0, 0]);
        assert_eq!(b[63], 1);
        let s = SmartLog {
            critical_warning: 1,
            composite_temp: 300,
            data_units_read: 7,
            data_units_written: 8,
            power_on_hours: 5,
            temp_sensor: [1, 2, 3, 4, 5, 6, 7, 8],
            ..Default::default()
        };
        let b = s.encode();
        assert_eq!(b.len(), 512);
        assert_eq!(&b[0..3], &[1, 44, 1]);
        assert_eq!(b[32], 7);
        assert_eq!(b[48], 8);
        assert_eq!(b[128], 5);
        assert_eq!(&b[200..204], &[1, 0, 2, 0]);
        let mut fw = FwSlotLog { afi: 1, ..Default::default() };
        fw.frs[0] = *b"1.0     ";
        let b = fw.encode();
        assert_eq!(&b[8..16], b"1.0     ");
        assert_eq!(fw.revision(1).as_deref(), Some("1.0"));
        assert_eq!(fw.revision(0), None);
        let mut ce = CommandEffectsLog::default();
        ce.acs[0x06] = effects::CSUPP;
        ce.iocs[0x01] = effects::CSUPP | effects::LBCC;
        let b = ce.encode();
        assert_eq!(&b[24..28], &[1, 0, 0, 0]);
        assert_eq!(&b[1028..1032], &[3, 0, 0, 0]);
        let b = ChangedNsList::from_nsids(&(1..=1025).collect::<Vec<_>>()).encode();
        assert_eq!(&b[0..8], &[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]);
        assert_eq!(ChangedNsList::decode(&b), ChangedNsList::Overflow);
        let b = ChangedNsList::from_nsids(&[3, 1]).encode();
        assert_eq!(&b[0..12], &[3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        let sl = encode_supported_logs(&[LogPageId::ERROR, LogPageId::DISCOVERY]);
        assert_eq!(sl[4], 1);
        assert_eq!(sl[0x70 * 4], 1);
        assert_eq!(decode_supported_logs(&sl), vec![LogPageId::ERROR, LogPageId::DISCOVERY]);
    }

    #[test]
    fn ana_layout() {
        let l = AnaLog {
            chgcnt: 5,
            groups: vec![AnaGroupDesc { grpid: 1, chgcnt: 2, state: AnaState::OPTIMIZED, nsids: vec![1, 2] }],
        };
        let b = l.encode();
        assert_eq!(b.len(), 16 + 32 + 8);
        assert_eq!(&b[8..10], &[1, 0]);
        assert_eq!(&b[16..24], &[1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(b[32], 1);
        assert_eq!(&b[48..56], &[1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(AnaLog::decode(&b).unwrap(), l);
        assert!(AnaLog::decode(&b[..50]).is_err());
    }

    proptest! {
        #[test]
        fn get_log_page_roundtrip(nsid in any::<u32>(), lid in any::<u8>(), lsp in 0u8..128, rae in any::<bool>(),
                                  numd in any::<u32>(), lsi in any::<u16>(), lpo in any::<u64>(),
                                  uuid_index in 0u8..128, ot in any::<bool>(), csi in any::<u8>()) {
            let c = GetLogPageCmd { nsid, lid: LogPageId(lid), lsp, rae, numd, lsi, lpo, uuid_index, ot, csi };
            prop_assert_eq!(GetLogPageCmd::from_sqe(&c.to_sqe(0)), c);
        }

        #[test]
        fn error_entry_roundtrip(b in proptest::collection::vec(any::<u8>(), 64)) {
            let e = ErrorLogEntry::decode(&b).unwrap();
            prop_assert_eq!(ErrorLogEntry::decode(&e.encode()).unwrap(), e);
            prop_assert_eq!(decode_error_log(&encode_error_log(&[e, e])), vec![e, e]);
        }

        #[test]
        fn smart_roundtrip(b in proptest::collection::vec(any::<u8>(), 512)) {
            let s = SmartLog::decode(&b).unwrap();
            prop_assert_eq!(SmartLog::decode(&s.encode()).unwrap(), s);
        }

        #[test]
        fn fw_slot_roundtrip(afi in any::<u8>(), frs in any::<[[u8; 8]; 7]>()) {
            let f = FwSlotLog { afi, frs };
            prop_assert_eq!(FwSlotLog::decode(&f.encode()).unwrap(), f);
        }

        #[test]
        fn changed_ns_roundtrip(v in proptest::collection::vec(1u32..0xFFFF_FFFF, 0..1100)) {
            let l = ChangedNsList::from_nsids(&v);
            prop_assert_eq!(ChangedNsList::decode(&l.encode()), l);
        }

        #[test]
        fn effects_roundtrip(a in proptest::collection::vec(any::<u32>(), 256), i in proptest::collection::vec(any::<u32>(), 256)) {
            let l = CommandEffectsLog { acs: a.try_into().unwrap(), iocs: i.try_into().unwrap() };
            prop_assert_eq!(CommandEffectsLog::decode(&l.encode()).unwrap(), l);
        }

        #[test]
        fn ana_roundtrip(chgcnt in any::<u64>(),
                         g in proptest::collection::vec((any::<u32>(), any::<u64>(), any::<u8>(),
                                                         proptest::collection::vec(any::<u32>(), 0..8)), 0..8)) {
            let l = AnaLog {
                chgcnt,
                groups: g.into_iter().map(|(grpid, chgcnt, s, nsids)| AnaGroupDesc { grpid, chgcnt, state: AnaState(s), nsids }).collect(),
            };
            prop_assert_eq!(AnaLog::decode(&l.encode()).unwrap(), l);
        }

        #[test]
        fn supported_logs_roundtrip(set in proptest::collection::btree_set(any::<u8>(), 0..20)) {
            let lids: Vec<LogPageId> = set.into_iter().map(LogPageId).collect();
            prop_assert_eq!(decode_supported_logs(&encode_supported_logs(&lids)), lids);
        }
    }
}
