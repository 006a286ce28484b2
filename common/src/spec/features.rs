//! Set/Get Features (admin OPC 09h/0Ah), Number of Queues, Asynchronous Event
//! Configuration, AER completion DW0 and Abort (NVMe Base 2.0 §5.27, §5.2, §5.1;
//! reference §5.5, §5.7, §5.8; Linux `NVME_FEAT_*`, `NVME_AEN_*`,
//! `nvme_set_queue_count`, nvmet `nvmet_execute_set_features`).

use crate::opcode::AdminOpcode;
use crate::sqe::Sqe;

/// Feature identifier (FID).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct FeatureId(pub u8);

impl FeatureId {
    /// Arbitration.
    pub const ARBITRATION: Self = Self(0x01);
    /// Power management.
    pub const POWER_MGMT: Self = Self(0x02);
    /// LBA range type.
    pub const LBA_RANGE: Self = Self(0x03);
    /// Temperature threshold.
    pub const TEMP_THRESH: Self = Self(0x04);
    /// Error recovery.
    pub const ERR_RECOVERY: Self = Self(0x05);
    /// Volatile write cache (CDW11 bit 0 WCE).
    pub const VOLATILE_WC: Self = Self(0x06);
    /// Number of queues.
    pub const NUM_QUEUES: Self = Self(0x07);
    /// Interrupt coalescing.
    pub const IRQ_COALESCE: Self = Self(0x08);
    /// Interrupt vector configuration.
    pub const IRQ_CONFIG: Self = Self(0x09);
    /// Write atomicity normal.
    pub const WRITE_ATOMIC: Self = Self(0x0A);
    /// Asynchronous event configuration.
    pub const ASYNC_EVENT: Self = Self(0x0B);
    /// Autonomous power state transition.
    pub const AUTO_PST: Self = Self(0x0C);
    /// Host memory buffer.
    pub const HOST_MEM_BUF: Self = Self(0x0D);
    /// Timestamp.
    pub const TIMESTAMP: Self = Self(0x0E);
    /// Keep alive timer (CDW11 = KATO in ms).
    pub const KATO: Self = Self(0x0F);
    /// Host controlled thermal management.
    pub const HCTM: Self = Self(0x10);
    /// Non-operational power state config.
    pub const NOPSC: Self = Self(0x11);
    /// Read recovery level config.
    pub const RRL: Self = Self(0x12);
    /// Host behavior support.
    pub const HOST_BEHAVIOR: Self = Self(0x16);
    /// Sanitize config.
    pub const SANITIZE: Self = Self(0x17);
    /// Software progress marker.
    pub const SW_PROGRESS: Self = Self(0x80);
    /// Host identifier (16-byte data with CDW11 bit 0 EXHID).
    pub const HOST_ID: Self = Self(0x81);
    /// Reservation notification mask.
    pub const RESV_MASK: Self = Self(0x82);
    /// Reservation persistence.
    pub const RESV_PERSIST: Self = Self(0x83);
    /// Namespace write protection config.
    pub const WRITE_PROTECT: Self = Self(0x84);

    /// The feature's name as the NVMe Base Specification (Figure "Feature
    /// Identifiers") and nvme-cli's `get-feature` spell it; `None` for
    /// identifiers without a constant here (vendor specific ones included).
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x01 => "Arbitration",
            0x02 => "Power Management",
            0x03 => "LBA Range Type",
            0x04 => "Temperature Threshold",
            0x05 => "Error Recovery",
            0x06 => "Volatile Write Cache",
            0x07 => "Number of Queues",
            0x08 => "Interrupt Coalescing",
            0x09 => "Interrupt Vector Configuration",
            0x0A => "Write Atomicity Normal",
            0x0B => "Asynchronous Event Configuration",
            0x0C => "Autonomous Power State Transition",
            0x0D => "Host Memory Buffer",
            0x0E => "Timestamp",
            0x0F => "Keep Alive Timer",
            0x10 => "Host Controlled Thermal Management",
            0x11 => "Non-Operational Power State Config",
            0x12 => "Read Recovery Level Config",
            0x16 => "Host Behavior Support",
            0x17 => "Sanitize Config",
            0x80 => "Software Progress Marker",
            0x81 => "Host Identifier",
            0x82 => "Reservation Notification Mask",
            0x83 => "Reservation Persistence",
            0x84 => "Namespace Write Protection Config",
            _ => return None,
        })
    }
}

/// Namespace Write Protection Config (FID 84h) states, CDW11 bits 2:0
/// (Linux `NVME_NS_NO_WRITE_PROTECT` ..).
pub mod write_protect {
    /// No write protection.
    pub const NONE: u32 = 0;
    /// Write protected until cleared.
    pub const WRITE_PROTECT: u32 = 1;
    /// Write protected until the next power cycle.
    pub const UNTIL_POWER_CYCLE: u32 = 2;
    /// Permanently write protected.
    pub const PERMANENT: u32 = 3;
}

/// Get Features select (SEL, CDW10 bits 10:8).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct FeatureSel(pub u8);

impl FeatureSel {
    /// Current value.
    pub const CURRENT: Self = Self(0);
    /// Default value.
    pub const DEFAULT: Self = Self(1);
    /// Saved value.
    pub const SAVED: Self = Self(2);
    /// Supported capabilities.
    pub const SUPPORTED: Self = Self(3);
}

/// Set Features command fields: NSID, CDW10 (FID 7:0, SV bit 31), CDW11–CDW15
/// (feature specific). Data (e.g. Host Identifier, Timestamp) goes through the SGL.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct SetFeaturesCmd {
    /// Namespace identifier.
    pub nsid: u32,
    /// Feature identifier.
    pub fid: FeatureId,
    /// Save across power cycles.
    pub sv: bool,
    /// CDW11 (the value for most features).
    pub cdw11: u32,
    /// CDW12.
    pub cdw12: u32,
    /// CDW13.
    pub cdw13: u32,
    /// CDW14 (bits 6:0 UUID index).
    pub cdw14: u32,
    /// CDW15.
    pub cdw15: u32,
}

impl SetFeaturesCmd {
    /// Set `fid` to `cdw11`.
    pub const fn new(fid: FeatureId, cdw11: u32) -> Self {
        Self { nsid: 0, fid, sv: false, cdw11, cdw12: 0, cdw13: 0, cdw14: 0, cdw15: 0 }
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        let c10 = sqe.cdw(10);
        Self {
            nsid: sqe.nsid(),
            fid: FeatureId(c10 as u8),
            sv: c10 & (1 << 31) != 0,
            cdw11: sqe.cdw(11),
            cdw12: sqe.cdw(12),
            cdw13: sqe.cdw(13),
            cdw14: sqe.cdw(14),
            cdw15: sqe.cdw(15),
        }
    }
    /// Builds the SQE (OPC 09h; the SGL is left zero — set it when the feature carries data).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(AdminOpcode::SET_FEATURES.0);
        s.set_cid(cid)
            .set_nsid(self.nsid)
            .set_cdw(10, self.fid.0 as u32 | (self.sv as u32) << 31)
            .set_cdw(11, self.cdw11)
            .set_cdw(12, self.cdw12)
            .set_cdw(13, self.cdw13)
            .set_cdw(14, self.cdw14)
            .set_cdw(15, self.cdw15);
        s
    }
}

/// Get Features command fields: NSID, CDW10 (FID 7:0, SEL 10:8), CDW11, CDW14.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct GetFeaturesCmd {
    /// Namespace identifier.
    pub nsid: u32,
    /// Feature identifier.
    pub fid: FeatureId,
    /// Select.
    pub sel: FeatureSel,
    /// CDW11 (feature specific, e.g. EXHID for Host Identifier).
    pub cdw11: u32,
    /// CDW14 (bits 6:0 UUID index).
    pub cdw14: u32,
}

impl GetFeaturesCmd {
    /// Get the current value of `fid`.
    pub const fn new(fid: FeatureId) -> Self {
        Self { nsid: 0, fid, sel: FeatureSel::CURRENT, cdw11: 0, cdw14: 0 }
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        let c10 = sqe.cdw(10);
        Self {
            nsid: sqe.nsid(),
            fid: FeatureId(c10 as u8),
            sel: FeatureSel((c10 >> 8) as u8 & 7),
            cdw11: sqe.cdw(11),
            cdw14: sqe.cdw(14),
        }
    }
    /// Builds the SQE (OPC 0Ah; SGL left zero).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(AdminOpcode::GET_FEATURES.0);
        s.set_cid(cid)
            .set_nsid(self.nsid)
            .set_cdw(10, self.fid.0 as u32 | ((self.sel.0 & 7) as u32) << 8)
            .set_cdw(11, self.cdw11)
            .set_cdw(14, self.cdw14);
        s
    }
}

/// Number of Queues value (Set CDW11 / completion DW0): submission queues in
/// 15:0, completion queues in 31:16, both 0's based (0xFFFF invalid in a request).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct NumQueues {
    /// NSQR/NSQA, 0's based.
    pub nsq: u16,
    /// NCQR/NCQA, 0's based.
    pub ncq: u16,
}

impl NumQueues {
    /// From 1-based queue counts (clamped to 1..=65535), as `nvme_set_queue_count` builds it.
    pub const fn from_counts(sq: u32, cq: u32) -> Self {
        const fn zb(n: u32) -> u16 {
            if n == 0 {
                0
            } else if n > 0xFFFF {
                0xFFFE
            } else {
                (n - 1) as u16
            }
        }
        Self { nsq: zb(sq), ncq: zb(cq) }
    }
    /// From a dword (CDW11 or DW0).
    pub const fn from_dw(v: u32) -> Self {
        Self { nsq: v as u16, ncq: (v >> 16) as u16 }
    }
    /// To a dword.
    pub const fn to_dw(self) -> u32 {
        self.nsq as u32 | (self.ncq as u32) << 16
    }
    /// Usable I/O queue pairs: min(NSQ, NCQ) + 1 (what the Linux host uses).
    pub const fn io_queue_pairs(self) -> u32 {
        (if self.nsq < self.ncq { self.nsq } else { self.ncq }) as u32 + 1
    }
}

/// Asynchronous Event Configuration bits (FID 0Bh CDW11; Identify OAES uses the same bits).
pub mod aec {
    /// SMART / health critical warnings (bits 7:0).
    pub const SMART_MASK: u32 = 0xFF;
    /// Namespace attribute notices.
    pub const NS_ATTR: u32 = 1 << 8;
    /// Firmware activation notices.
    pub const FW_ACT: u32 = 1 << 9;
    /// Telemetry log notices.
    pub const TELEMETRY: u32 = 1 << 10;
    /// ANA change notices.
    pub const ANA_CHANGE: u32 = 1 << 11;
    /// Predictable latency event aggregate log change notices.
    pub const PLEA: u32 = 1 << 12;
    /// LBA status information notices.
    pub const LBA_STATUS: u32 = 1 << 13;
    /// Endurance group event aggregate log change notices.
    pub const EGEA: u32 = 1 << 14;
    /// Normal NVM subsystem shutdown notices.
    pub const NNSSHDN: u32 = 1 << 15;
    /// Zone descriptor changed notices.
    pub const ZONE_DESC: u32 = 1 << 27;
    /// Discovery log page change notices (discovery controllers).
    pub const DISC_CHANGE: u32 = 1 << 31;
    /// The bits the Linux host enables when OAES advertises them (`NVME_AEN_SUPPORTED`).
    pub const LINUX_HOST_SUPPORTED: u32 = NS_ATTR | FW_ACT | ANA_CHANGE | DISC_CHANGE;
}

/// Asynchronous event type (AER completion DW0 bits 2:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AerType(pub u8);

impl AerType {
    /// Error status.
    pub const ERROR: Self = Self(0);
    /// SMART / health status.
    pub const SMART: Self = Self(1);
    /// Notice.
    pub const NOTICE: Self = Self(2);
    /// Immediate.
    pub const IMMEDIATE: Self = Self(3);
    /// One-shot.
    pub const ONE_SHOT: Self = Self(4);
    /// I/O command set specific status.
    pub const IO_CMD_SET: Self = Self(6);
    /// Vendor specific.
    pub const VENDOR: Self = Self(7);
}

/// Notice event information values (AER DW0 bits 15:8 when type = NOTICE).
pub mod aer_notice {
    /// Namespace attribute changed (log page 04h).
    pub const NS_CHANGED: u8 = 0x00;
    /// Firmware activation starting (log page 03h).
    pub const FW_ACT_STARTING: u8 = 0x01;
    /// Telemetry log changed.
    pub const TELEMETRY: u8 = 0x02;
    /// ANA change (log page 0Ch).
    pub const ANA: u8 = 0x03;
    /// Discovery log page change (log page 70h).
    pub const DISC_CHANGED: u8 = 0xF0;
}

/// An asynchronous event as reported in the AER completion DW0: type 2:0,
/// information 15:8, associated log page 23:16.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct AsyncEvent {
    /// Event type (3 bits).
    pub ty: AerType,
    /// Event information.
    pub info: u8,
    /// Log page to read (with RAE = 0) to re-arm the event.
    pub lid: u8,
}

impl AsyncEvent {
    /// Namespace attribute changed: notice, info 00h, log page 04h.
    pub const NS_CHANGED: Self = Self { ty: AerType::NOTICE, info: aer_notice::NS_CHANGED, lid: 0x04 };
    /// Firmware activation starting: notice, info 01h, log page 03h.
    pub const FW_ACT_STARTING: Self =
        Self { ty: AerType::NOTICE, info: aer_notice::FW_ACT_STARTING, lid: 0x03 };
    /// ANA change: notice, info 03h, log page 0Ch.
    pub const ANA_CHANGE: Self = Self { ty: AerType::NOTICE, info: aer_notice::ANA, lid: 0x0C };
    /// Discovery log change: notice, info F0h, log page 70h.
    pub const DISC_CHANGED: Self = Self { ty: AerType::NOTICE, info: aer_notice::DISC_CHANGED, lid: 0x70 };
    /// Reservation log page available: I/O command set specific, info 00h,
    /// log page 80h (nvmet `NVME_AEN_RESV_LOG_PAGE_AVALIABLE`).
    pub const RESERVATION_LOG: Self = Self { ty: AerType::IO_CMD_SET, info: 0x00, lid: 0x80 };

    /// Completion DW0 for this event (Linux `nvme_aer_type`/`nvme_aer_subtype` decode it).
    pub const fn to_dw0(self) -> u32 {
        (self.ty.0 & 7) as u32 | (self.info as u32) << 8 | (self.lid as u32) << 16
    }
    /// Parses a completion DW0.
    pub const fn from_dw0(dw0: u32) -> Self {
        Self { ty: AerType(dw0 as u8 & 7), info: (dw0 >> 8) as u8, lid: (dw0 >> 16) as u8 }
    }
}

/// Abort command fields (CDW10: SQID 15:0, CID 31:16). DW0 bit 0 set in the
/// completion means "not aborted" (nvmet always answers that).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct AbortCmd {
    /// Submission queue of the command to abort.
    pub sqid: u16,
    /// Command identifier to abort.
    pub cid: u16,
}

/// Abort completion DW0 value meaning the command was not aborted.
pub const ABORT_DW0_NOT_ABORTED: u32 = 1;

impl AbortCmd {
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        let c10 = sqe.cdw(10);
        Self { sqid: c10 as u16, cid: (c10 >> 16) as u16 }
    }
    /// Builds the SQE (OPC 08h).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(AdminOpcode::ABORT.0);
        s.set_cid(cid).set_cdw(10, self.sqid as u32 | (self.cid as u32) << 16);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn feature_names_follow_the_spec_and_unknown_ones_have_none() {
        assert_eq!(FeatureId::NUM_QUEUES.name(), Some("Number of Queues"));
        assert_eq!(FeatureId::WRITE_PROTECT.name(), Some("Namespace Write Protection Config"));
        assert_eq!(FeatureId::HOST_ID.name(), Some("Host Identifier"));
        // Named identifiers have names; reserved and vendor specific ones none.
        for f in [FeatureId::ARBITRATION, FeatureId::KATO, FeatureId::SANITIZE, FeatureId::RESV_PERSIST] {
            assert!(f.name().is_some(), "{f:?}");
        }
        for id in [0x00, 0x13, 0x7F, 0x85, 0xC0, 0xFF] {
            assert_eq!(FeatureId(id).name(), None, "{id:#x}");
        }
    }

    #[test]
    fn features_sqe_layout() {
        let s =
            SetFeaturesCmd { sv: true, ..SetFeaturesCmd::new(FeatureId::NUM_QUEUES, 0x0003_0003) }.to_sqe(1);
        assert_eq!(s.opcode(), 0x09);
        assert_eq!(&s.0[40..48], &[0x07, 0, 0, 0x80, 3, 0, 3, 0]);
        let g =
            GetFeaturesCmd { sel: FeatureSel::SUPPORTED, ..GetFeaturesCmd::new(FeatureId::KATO) }.to_sqe(2);
        assert_eq!(g.opcode(), 0x0A);
        assert_eq!(&g.0[40..44], &[0x0F, 0x03, 0, 0]);
        assert_eq!(GetFeaturesCmd::from_sqe(&g).sel, FeatureSel::SUPPORTED);
        let a = AbortCmd { sqid: 1, cid: 0x1234 }.to_sqe(3);
        assert_eq!(&a.0[40..44], &[1, 0, 0x34, 0x12]);
    }

    #[test]
    fn num_queues() {
        let n = NumQueues::from_counts(4, 4);
        assert_eq!(n.to_dw(), 0x0003_0003);
        assert_eq!(NumQueues::from_dw(0x007F_0003).io_queue_pairs(), 4);
        assert_eq!(NumQueues::from_counts(0, 0x10000).ncq, 0xFFFE);
    }

    #[test]
    fn aer_dw0() {
        assert_eq!(AsyncEvent::NS_CHANGED.to_dw0(), 0x0004_0002);
        assert_eq!(AsyncEvent::DISC_CHANGED.to_dw0(), 0x0070_F002);
        assert_eq!(AsyncEvent::ANA_CHANGE.to_dw0(), 0x000C_0302);
        assert_eq!(AsyncEvent::from_dw0(0x0004_0002), AsyncEvent::NS_CHANGED);
        assert_eq!(aec::LINUX_HOST_SUPPORTED, 0x8000_0B00);
    }

    proptest! {
        #[test]
        fn features_roundtrip(nsid in any::<u32>(), fid in any::<u8>(), sv in any::<bool>(), sel in 0u8..8,
                              d in any::<[u32; 5]>()) {
            let s = SetFeaturesCmd { nsid, fid: FeatureId(fid), sv, cdw11: d[0], cdw12: d[1], cdw13: d[2], cdw14: d[3], cdw15: d[4] };
            prop_assert_eq!(SetFeaturesCmd::from_sqe(&s.to_sqe(9)), s);
            let g = GetFeaturesCmd { nsid, fid: FeatureId(fid), sel: FeatureSel(sel), cdw11: d[0], cdw14: d[1] };
            prop_assert_eq!(GetFeaturesCmd::from_sqe(&g.to_sqe(9)), g);
        }

        #[test]
        fn aer_and_queues_roundtrip(ty in 0u8..8, info in any::<u8>(), lid in any::<u8>(), v in any::<u32>(),
                                    sqid in any::<u16>(), cid in any::<u16>()) {
            let e = AsyncEvent { ty: AerType(ty), info, lid };
            prop_assert_eq!(AsyncEvent::from_dw0(e.to_dw0()), e);
            prop_assert_eq!(NumQueues::from_dw(v).to_dw(), v);
            let a = AbortCmd { sqid, cid };
            prop_assert_eq!(AbortCmd::from_sqe(&a.to_sqe(0)), a);
        }
    }
}
