//! Zoned Namespace command set (CSI 02h; NVMe Zoned Namespace Command Set
//! Specification 1.1): Zone Management Send and Receive, the zone report and
//! its descriptors, the command set's Identify Namespace and Identify
//! Controller structures. Zone Append (OPC 7Dh) has a Write's fields
//! (SLBA, which must be a zone's first LBA, and NLB) and returns the LBA it
//! wrote in CQE DW0–DW1.
//!
//! Layouts follow Linux `include/linux/nvme.h` (`struct nvme_zone_mgmt_send_cmd`,
//! `nvme_zone_mgmt_recv_cmd`, `nvme_zone_report`, `nvme_zone_descriptor`,
//! `nvme_id_ns_zns`, `nvme_id_ctrl_zns`), which nvmet (`drivers/nvme/target/zns.c`)
//! and the host (`drivers/nvme/host/zns.c`) use.

use super::identify::IDENTIFY_DATA_LEN;
use super::wire::{need, put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use super::SpecError;
use crate::opcode::IoOpcode;
use crate::sqe::{SglDescriptor, Sqe};

/// Size of one zone descriptor (and of the report's header).
pub const ZONE_DESCRIPTOR_LEN: usize = 64;
/// Size of the zone report header (Number of Zones and reserved bytes).
pub const ZONE_REPORT_HEADER_LEN: usize = 64;
/// MAR / MOR value meaning "no limit" (the fields are 0's based).
pub const NO_ZONE_LIMIT: u32 = 0xFFFF_FFFF;
/// Identify Namespace (ZNS) OZCS bit 0: reads may cross zone boundaries (RAZB).
pub const OZCS_RAZB: u16 = 1 << 0;

/// Zone State (ZS, descriptor byte 1 bits 7:4).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ZoneState(pub u8);

impl ZoneState {
    /// ZSE: Empty.
    pub const EMPTY: Self = Self(0x1);
    /// ZSIO: Implicitly Opened (by a write).
    pub const IMPLICITLY_OPEN: Self = Self(0x2);
    /// ZSEO: Explicitly Opened (by Zone Management Send Open).
    pub const EXPLICITLY_OPEN: Self = Self(0x3);
    /// ZSC: Closed.
    pub const CLOSED: Self = Self(0x4);
    /// ZSRO: Read Only.
    pub const READ_ONLY: Self = Self(0xD);
    /// ZSF: Full.
    pub const FULL: Self = Self(0xE);
    /// ZSO: Offline.
    pub const OFFLINE: Self = Self(0xF);

    /// Open, implicitly or explicitly (counts against MOR).
    pub const fn is_open(self) -> bool {
        matches!(self.0, 0x2 | 0x3)
    }
    /// Open or Closed (counts against MAR).
    pub const fn is_active(self) -> bool {
        matches!(self.0, 0x2..=0x4)
    }
    /// The name nvme-cli and blkzone print.
    pub const fn name(self) -> &'static str {
        match self.0 {
            0x1 => "EMPTY",
            0x2 => "IMP_OPENED",
            0x3 => "EXP_OPENED",
            0x4 => "CLOSED",
            0xD => "READ_ONLY",
            0xE => "FULL",
            0xF => "OFFLINE",
            _ => "UNKNOWN",
        }
    }
}

/// Zone Type (ZT, descriptor byte 0 bits 3:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ZoneType(pub u8);

impl ZoneType {
    /// Sequential Write Required, the only type ZNS defines.
    pub const SEQ_WRITE_REQUIRED: Self = Self(0x2);
}

/// Zone Send Action (ZSA, Zone Management Send CDW13 bits 7:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ZoneSendAction(pub u8);

impl ZoneSendAction {
    /// Close Zone.
    pub const CLOSE: Self = Self(0x1);
    /// Finish Zone.
    pub const FINISH: Self = Self(0x2);
    /// Open Zone.
    pub const OPEN: Self = Self(0x3);
    /// Reset Zone.
    pub const RESET: Self = Self(0x4);
    /// Offline Zone.
    pub const OFFLINE: Self = Self(0x5);
    /// Set Zone Descriptor Extension.
    pub const SET_ZDE: Self = Self(0x10);
}

/// Zone Receive Action (ZRA, Zone Management Receive CDW13 bits 7:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ZoneRecvAction(pub u8);

impl ZoneRecvAction {
    /// Report Zones.
    pub const REPORT: Self = Self(0x0);
    /// Extended Report Zones (descriptors followed by their extensions).
    pub const EXTENDED_REPORT: Self = Self(0x1);
}

/// Zone Receive Action Specific Field of Report Zones (ZRASF, CDW13 bits
/// 15:8): which zones the report lists.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ZoneReportFilter(pub u8);

impl ZoneReportFilter {
    /// Every zone.
    pub const ALL: Self = Self(0);
    /// Empty zones.
    pub const EMPTY: Self = Self(1);
    /// Implicitly opened zones.
    pub const IMPLICITLY_OPEN: Self = Self(2);
    /// Explicitly opened zones.
    pub const EXPLICITLY_OPEN: Self = Self(3);
    /// Closed zones.
    pub const CLOSED: Self = Self(4);
    /// Full zones.
    pub const FULL: Self = Self(5);
    /// Read-only zones.
    pub const READ_ONLY: Self = Self(6);
    /// Offline zones.
    pub const OFFLINE: Self = Self(7);

    /// The state the filter selects; `None` for ALL, and for values the
    /// specification does not define (see [`Self::is_valid`]).
    pub const fn state(self) -> Option<ZoneState> {
        match self.0 {
            1 => Some(ZoneState::EMPTY),
            2 => Some(ZoneState::IMPLICITLY_OPEN),
            3 => Some(ZoneState::EXPLICITLY_OPEN),
            4 => Some(ZoneState::CLOSED),
            5 => Some(ZoneState::FULL),
            6 => Some(ZoneState::READ_ONLY),
            7 => Some(ZoneState::OFFLINE),
            _ => None,
        }
    }
    /// A value the specification defines (0–7).
    pub const fn is_valid(self) -> bool {
        self.0 <= 7
    }
    /// True when a zone in `state` is listed.
    pub fn selects(self, state: ZoneState) -> bool {
        self.0 == 0 || self.state() == Some(state)
    }
}

/// Zone Management Send: CDW10–11 SLBA (a zone's first LBA), CDW13 ZSA
/// (7:0) and Select All (bit 8: every zone the action applies to, SLBA
/// ignored).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ZoneMgmtSendCmd {
    /// Namespace identifier.
    pub nsid: u32,
    /// The zone's first LBA.
    pub slba: u64,
    /// The action.
    pub action: ZoneSendAction,
    /// Apply to every zone in a state the action applies to.
    pub select_all: bool,
}

impl ZoneMgmtSendCmd {
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        let cdw13 = sqe.cdw(13);
        Self {
            nsid: sqe.nsid(),
            slba: sqe.slba(),
            action: ZoneSendAction(cdw13 as u8),
            select_all: cdw13 & (1 << 8) != 0,
        }
    }
    /// Builds the SQE (OPC 79h, no data).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(IoOpcode::ZONE_MGMT_SEND.0);
        s.set_cid(cid)
            .set_nsid(self.nsid)
            .set_sgl(SglDescriptor::transport(0))
            .set_cdw(10, self.slba as u32)
            .set_cdw(11, (self.slba >> 32) as u32)
            .set_cdw(13, self.action.0 as u32 | (self.select_all as u32) << 8);
        s
    }
}

/// Zone Management Receive: CDW10–11 SLBA (reports start at the zone that
/// holds it), CDW12 NUMD (dwords of data, 0's based), CDW13 ZRA (7:0),
/// ZRASF (15:8) and Partial Report (bit 16: Number of Zones counts only the
/// descriptors that fit).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ZoneMgmtRecvCmd {
    /// Namespace identifier.
    pub nsid: u32,
    /// An LBA of the first zone to report.
    pub slba: u64,
    /// Number of dwords of data, 0's based.
    pub numd: u32,
    /// The action.
    pub action: ZoneRecvAction,
    /// The zones to list.
    pub filter: ZoneReportFilter,
    /// CDW13 bits 23:16 as on the wire: bit 16 is Partial Report; nvmet
    /// refuses other values.
    pub partial: u8,
}

impl ZoneMgmtRecvCmd {
    /// A Report Zones of `len` bytes (a multiple of 4, at least 4) from the
    /// zone holding `slba`.
    pub fn report(nsid: u32, slba: u64, len: u32, filter: ZoneReportFilter, partial: bool) -> Self {
        Self {
            nsid,
            slba,
            numd: (len / 4).saturating_sub(1),
            action: ZoneRecvAction::REPORT,
            filter,
            partial: partial as u8,
        }
    }
    /// Bytes of data: (NUMD + 1) · 4.
    pub const fn data_len(&self) -> u64 {
        (self.numd as u64 + 1) * 4
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        let cdw13 = sqe.cdw(13);
        Self {
            nsid: sqe.nsid(),
            slba: sqe.slba(),
            numd: sqe.cdw(12),
            action: ZoneRecvAction(cdw13 as u8),
            filter: ZoneReportFilter((cdw13 >> 8) as u8),
            partial: (cdw13 >> 16) as u8,
        }
    }
    /// Builds the SQE (OPC 7Ah) with a transport SGL of `data_len()` bytes.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(IoOpcode::ZONE_MGMT_RECV.0);
        s.set_cid(cid)
            .set_nsid(self.nsid)
            .set_sgl(SglDescriptor::transport(self.data_len().min(u32::MAX as u64) as u32))
            .set_cdw(10, self.slba as u32)
            .set_cdw(11, (self.slba >> 32) as u32)
            .set_cdw(12, self.numd)
            .set_cdw(13, self.action.0 as u32 | (self.filter.0 as u32) << 8 | (self.partial as u32) << 16);
        s
    }
}

/// One zone descriptor of a report: byte 0 ZT, 1 ZS (7:4), 2 ZA, 3 ZAI,
/// 15:8 ZCAP, 23:16 ZSLBA, 31:24 WP.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ZoneDescriptor {
    /// Zone type.
    pub zone_type: ZoneType,
    /// Zone state.
    pub state: ZoneState,
    /// Zone attributes.
    pub attrs: u8,
    /// Zone capacity in blocks.
    pub capacity: u64,
    /// The zone's first LBA.
    pub slba: u64,
    /// Write pointer (the next LBA a write must start at).
    pub wp: u64,
}

impl ZoneDescriptor {
    /// Decodes 64 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, ZONE_DESCRIPTOR_LEN, "zone descriptor")?;
        Ok(Self {
            zone_type: ZoneType(b[0] & 0xF),
            state: ZoneState(b[1] >> 4),
            attrs: b[2],
            capacity: u64_at(b, 8),
            slba: u64_at(b, 16),
            wp: u64_at(b, 24),
        })
    }
    /// Encodes 64 bytes.
    pub fn encode(&self) -> [u8; ZONE_DESCRIPTOR_LEN] {
        let mut b = [0u8; ZONE_DESCRIPTOR_LEN];
        b[0] = self.zone_type.0 & 0xF;
        b[1] = self.state.0 << 4;
        b[2] = self.attrs;
        put_u64(&mut b, 8, self.capacity);
        put_u64(&mut b, 16, self.slba);
        put_u64(&mut b, 24, self.wp);
        b
    }
}

/// A zone report: the header's Number of Zones and the descriptors that
/// followed it.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ZoneReport {
    /// Number of Zones: the zones that matched (or, for a partial report,
    /// the descriptors returned).
    pub nr_zones: u64,
    /// The descriptors in the data, in LBA order.
    pub zones: Vec<ZoneDescriptor>,
}

impl ZoneReport {
    /// Encodes into exactly `len` bytes: the header, as many descriptors
    /// as fit, zeroes after them.
    pub fn encode(&self, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        if len >= 8 {
            put_u64(&mut b, 0, self.nr_zones);
        }
        let room = len.saturating_sub(ZONE_REPORT_HEADER_LEN) / ZONE_DESCRIPTOR_LEN;
        for (i, z) in self.zones.iter().take(room).enumerate() {
            let at = ZONE_REPORT_HEADER_LEN + i * ZONE_DESCRIPTOR_LEN;
            b[at..at + ZONE_DESCRIPTOR_LEN].copy_from_slice(&z.encode());
        }
        b
    }
    /// Decodes a report: the descriptors present are the smaller of Number
    /// of Zones and what the buffer holds.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, ZONE_REPORT_HEADER_LEN, "zone report")?;
        let nr_zones = u64_at(b, 0);
        let room = (b.len() - ZONE_REPORT_HEADER_LEN) / ZONE_DESCRIPTOR_LEN;
        let n = nr_zones.min(room as u64) as usize;
        let zones = b[ZONE_REPORT_HEADER_LEN..]
            .chunks_exact(ZONE_DESCRIPTOR_LEN)
            .take(n)
            .map(ZoneDescriptor::decode)
            .collect::<Result<_, _>>()?;
        Ok(Self { nr_zones, zones })
    }
}

/// Zoned Namespace command set Identify Namespace (CNS 05h, CSI 02h): ZOC,
/// OZCS, MAR, MOR (0's based, [`NO_ZONE_LIMIT`] for none), RRL, FRL and the
/// 64 LBA format extensions at byte 2816, 16 bytes each (ZSZE: zone size in
/// blocks; ZDES: descriptor extension size in 64-byte units).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct IdentifyNsZns {
    /// Zone Operation Characteristics (the Linux host refuses non-zero).
    pub zoc: u16,
    /// Optional Zoned Command Support ([`OZCS_RAZB`]).
    pub ozcs: u16,
    /// Maximum Active Resources, 0's based.
    pub mar: u32,
    /// Maximum Open Resources, 0's based.
    pub mor: u32,
    /// Reset Recommended Limit (seconds).
    pub rrl: u32,
    /// Finish Recommended Limit (seconds).
    pub frl: u32,
    /// Zone size in blocks per LBA format (indexed as FLBAS; 64 formats).
    pub zsze: [u64; 64],
    /// Zone Descriptor Extension Size per LBA format.
    pub zdes: [u8; 64],
}

/// Byte offset of the LBA format extensions in [`IdentifyNsZns`].
const LBAFE_OFFSET: usize = 2816;

impl Default for IdentifyNsZns {
    fn default() -> Self {
        Self { zoc: 0, ozcs: 0, mar: 0, mor: 0, rrl: 0, frl: 0, zsze: [0; 64], zdes: [0; 64] }
    }
}

impl IdentifyNsZns {
    /// Decodes from at least 4096 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, IDENTIFY_DATA_LEN, "identify namespace zns")?;
        let mut id = Self {
            zoc: u16_at(b, 0),
            ozcs: u16_at(b, 2),
            mar: u32_at(b, 4),
            mor: u32_at(b, 8),
            rrl: u32_at(b, 12),
            frl: u32_at(b, 16),
            ..Self::default()
        };
        for i in 0..64 {
            let at = LBAFE_OFFSET + i * 16;
            id.zsze[i] = u64_at(b, at);
            id.zdes[i] = b[at + 8];
        }
        Ok(id)
    }
    /// Encodes to 4096 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_DATA_LEN];
        put_u16(&mut b, 0, self.zoc);
        put_u16(&mut b, 2, self.ozcs);
        put_u32(&mut b, 4, self.mar);
        put_u32(&mut b, 8, self.mor);
        put_u32(&mut b, 12, self.rrl);
        put_u32(&mut b, 16, self.frl);
        for i in 0..64 {
            let at = LBAFE_OFFSET + i * 16;
            put_u64(&mut b, at, self.zsze[i]);
            b[at + 8] = self.zdes[i];
        }
        b
    }
    /// A 0's based resource limit as a count; `None` for no limit.
    pub const fn limit(field: u32) -> Option<u32> {
        if field == NO_ZONE_LIMIT {
            None
        } else {
            Some(field + 1)
        }
    }
}

/// Zoned Namespace command set Identify Controller (CNS 06h, CSI 02h): ZASL,
/// the Zone Append size limit (2^n units of CAP.MPSMIN, 4 KiB; 0: MDTS).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct IdentifyCtrlZns {
    /// Zone Append Size Limit.
    pub zasl: u8,
}

impl IdentifyCtrlZns {
    /// Decodes from at least 4096 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, IDENTIFY_DATA_LEN, "identify controller zns")?;
        Ok(Self { zasl: b[0] })
    }
    /// Encodes to 4096 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_DATA_LEN];
        b[0] = self.zasl;
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn commands_match_linux_layout() {
        // struct nvme_zone_mgmt_send_cmd: slba at byte 40, zsa at 52, select_all at 53.
        let s =
            ZoneMgmtSendCmd { nsid: 3, slba: 0x1_0000_0800, action: ZoneSendAction::RESET, select_all: true }
                .to_sqe(9);
        assert_eq!(s.opcode(), 0x79);
        assert_eq!(&s.0[40..48], &[0x00, 0x08, 0, 0, 1, 0, 0, 0]);
        assert_eq!((s.0[52], s.0[53]), (4, 1));
        assert_eq!(ZoneMgmtSendCmd::from_sqe(&s).slba, 0x1_0000_0800);
        assert!(ZoneMgmtSendCmd::from_sqe(&s).select_all);

        // struct nvme_zone_mgmt_recv_cmd: numd at byte 48, zra 52, zrasf 53, pr 54.
        let c = ZoneMgmtRecvCmd::report(1, 0x4000, 4096, ZoneReportFilter::FULL, true);
        let s = c.to_sqe(2);
        assert_eq!(s.opcode(), 0x7A);
        assert_eq!(&s.0[48..52], &[0xFF, 0x03, 0, 0]);
        assert_eq!(&s.0[52..55], &[0, 5, 1]);
        assert_eq!(s.sgl().length, 4096);
        assert_eq!(ZoneMgmtRecvCmd::from_sqe(&s), c);
        assert_eq!(c.data_len(), 4096);
    }

    #[test]
    fn report_layout_and_truncation() {
        let z = ZoneDescriptor {
            zone_type: ZoneType::SEQ_WRITE_REQUIRED,
            state: ZoneState::IMPLICITLY_OPEN,
            attrs: 0,
            capacity: 0x8000,
            slba: 0x10000,
            wp: 0x10010,
        };
        let b = z.encode();
        assert_eq!((b[0], b[1]), (2, 0x20));
        assert_eq!(&b[8..16], &[0, 0x80, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[16..24], &[0, 0, 1, 0, 0, 0, 0, 0]);
        assert_eq!(&b[24..32], &[0x10, 0, 1, 0, 0, 0, 0, 0]);
        let r = ZoneReport { nr_zones: 5, zones: vec![z; 3] };
        // Room for two descriptors: the header still says 5.
        let b = r.encode(64 + 2 * 64 + 10);
        assert_eq!(b.len(), 202);
        let d = ZoneReport::decode(&b).unwrap();
        assert_eq!((d.nr_zones, d.zones.len()), (5, 2));
        assert_eq!(d.zones[1], z);
        assert!(ZoneReport::decode(&b[..63]).is_err());
    }

    #[test]
    fn filters_and_states() {
        assert!(ZoneReportFilter::ALL.selects(ZoneState::FULL));
        assert!(ZoneReportFilter::CLOSED.selects(ZoneState::CLOSED));
        assert!(!ZoneReportFilter::CLOSED.selects(ZoneState::EMPTY));
        assert!(!ZoneReportFilter(8).is_valid());
        assert!(ZoneState::EXPLICITLY_OPEN.is_open() && ZoneState::CLOSED.is_active());
        assert!(!ZoneState::FULL.is_active() && !ZoneState::CLOSED.is_open());
        assert_eq!(IdentifyNsZns::limit(NO_ZONE_LIMIT), None);
        assert_eq!(IdentifyNsZns::limit(13), Some(14));
    }

    proptest! {
        #[test]
        fn identify_round_trip(zoc: u16, ozcs: u16, mar: u32, mor: u32, zsze: [u64; 16], zdes: [u8; 16], zasl: u8) {
            let mut id = IdentifyNsZns { zoc, ozcs, mar, mor, rrl: 1, frl: 2, ..Default::default() };
            id.zsze[..16].copy_from_slice(&zsze);
            id.zdes[48..].copy_from_slice(&zdes);
            let b = id.encode();
            prop_assert_eq!(b.len(), 4096);
            prop_assert_eq!(u64_at(&b, 2816), zsze[0]);
            prop_assert_eq!(IdentifyNsZns::decode(&b).unwrap(), id);
            prop_assert_eq!(IdentifyCtrlZns::decode(&IdentifyCtrlZns { zasl }.encode()).unwrap().zasl, zasl);
        }

        #[test]
        fn descriptor_round_trip(zt in 0u8..16, zs in 0u8..16, za: u8, cap: u64, slba: u64, wp: u64) {
            let z = ZoneDescriptor {
                zone_type: ZoneType(zt), state: ZoneState(zs), attrs: za, capacity: cap, slba, wp,
            };
            prop_assert_eq!(ZoneDescriptor::decode(&z.encode()).unwrap(), z);
        }
    }
}
