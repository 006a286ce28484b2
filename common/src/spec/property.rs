//! Fabrics Property Get/Set (FCTYPE 04h/00h) and the controller registers they
//! reach (NVMe Base 2.0 §3.1.4; NVMe-oF 1.1 §3.4/3.5; reference §4.3; Linux
//! `NVME_REG_*`, `NVME_CAP_*`, `NVME_CC_*`, `NVME_CSTS_*`).

use super::{bitfields, bitflags_rw};
use crate::opcode::{AdminOpcode, FabricsType};
use crate::sqe::{fabrics_off, Sqe};

/// Property (register) offset, the OFST field.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct PropertyOffset(pub u32);

impl PropertyOffset {
    /// Controller Capabilities (8 bytes, RO).
    pub const CAP: Self = Self(0x00);
    /// Version (4 bytes, RO).
    pub const VS: Self = Self(0x08);
    /// Controller Configuration (4 bytes, RW).
    pub const CC: Self = Self(0x14);
    /// Controller Status (4 bytes, RO).
    pub const CSTS: Self = Self(0x1C);
    /// NVM Subsystem Reset (4 bytes, WO; write [`NSSR_RESET_VALUE`]).
    pub const NSSR: Self = Self(0x20);
    /// Controller Ready Timeouts (4 bytes, RO).
    pub const CRTO: Self = Self(0x68);

    /// Size in bytes of the register at this offset, or `None` for an offset
    /// that is not a fabrics property.
    pub const fn size(self) -> Option<usize> {
        match self.0 {
            0x00 => Some(8),
            0x08 | 0x14 | 0x1C | 0x20 | 0x68 => Some(4),
            _ => None,
        }
    }
}

/// Value written to NSSR to request an NVM subsystem reset ("NVMe").
pub const NSSR_RESET_VALUE: u32 = 0x4E56_4D65;

/// Controller Capabilities (CAP, offset 00h).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Cap(pub u64);

impl Cap {
    /// CSS bit 0 (CAP bit 37): NVM command set.
    pub const CSS_NVM: u8 = 1 << 0;
    /// CSS bit 6 (CAP bit 43): one or more I/O command sets (host then selects CC.CSS = 110b).
    pub const CSS_IOCS: u8 = 1 << 6;
    /// CSS bit 7 (CAP bit 44): no I/O command set (admin only).
    pub const CSS_NO_IO: u8 = 1 << 7;

    bitfields! { u64;
        /// MQES (15:0): maximum queue entries supported, 0's based.
        mqes / with_mqes: u16 = 0, 16;
        /// AMS (18:17): arbitration mechanisms supported.
        ams / with_ams: u8 = 17, 2;
        /// TO (31:24): worst-case CSTS.RDY transition time, 500 ms units.
        to / with_to: u8 = 24, 8;
        /// DSTRD (35:32): doorbell stride.
        dstrd / with_dstrd: u8 = 32, 4;
        /// CSS (44:37): command sets supported (see `CSS_*`).
        css / with_css: u8 = 37, 8;
        /// CPS (47:46): controller power scope.
        cps / with_cps: u8 = 46, 2;
        /// MPSMIN (51:48): minimum memory page size, 2^(12+MPSMIN).
        mpsmin / with_mpsmin: u8 = 48, 4;
        /// MPSMAX (55:52): maximum memory page size, 2^(12+MPSMAX).
        mpsmax / with_mpsmax: u8 = 52, 4;
    }
    bitflags_rw! { u64;
        /// CQR (16): contiguous queues required.
        cqr / with_cqr = 16;
        /// NSSRS (36): NVM subsystem reset supported.
        nssrs / with_nssrs = 36;
        /// BPS (45): boot partition support.
        bps / with_bps = 45;
        /// PMRS (56): persistent memory region supported.
        pmrs / with_pmrs = 56;
        /// CMBS (57): controller memory buffer supported.
        cmbs / with_cmbs = 57;
        /// NSSS (58): NVM subsystem shutdown supported.
        nsss / with_nsss = 58;
        /// CRWMS (59): controller ready with media support (CRTO valid).
        crwms / with_crwms = 59;
        /// CRIMS (60): controller ready independent of media support.
        crims / with_crims = 60;
    }
}

/// Version (VS, offset 08h): major 31:16, minor 15:8, tertiary 7:0.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct Vs(pub u32);

impl Vs {
    /// NVMe 1.2.
    pub const V1_2: Self = Self::new(1, 2, 0);
    /// NVMe 1.3 (keeps the Linux host on the simplest scan path).
    pub const V1_3: Self = Self::new(1, 3, 0);
    /// NVMe 1.4.
    pub const V1_4: Self = Self::new(1, 4, 0);
    /// NVMe 2.0 (host then uses Identify CNS 08h).
    pub const V2_0: Self = Self::new(2, 0, 0);
    /// NVMe 2.1 (what current nvmet reports).
    pub const V2_1: Self = Self::new(2, 1, 0);

    /// Builds a version (Linux `NVME_VS`).
    pub const fn new(major: u16, minor: u8, tertiary: u8) -> Self {
        Self((major as u32) << 16 | (minor as u32) << 8 | tertiary as u32)
    }
    /// Major version.
    pub const fn major(self) -> u16 {
        (self.0 >> 16) as u16
    }
    /// Minor version.
    pub const fn minor(self) -> u8 {
        (self.0 >> 8) as u8
    }
    /// Tertiary version.
    pub const fn tertiary(self) -> u8 {
        self.0 as u8
    }
}

/// Controller Configuration (CC, offset 14h).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Cc(pub u32);

impl Cc {
    /// CSS 000b: NVM command set.
    pub const CSS_NVM: u8 = 0;
    /// CSS 110b: all supported I/O command sets.
    pub const CSS_CSI: u8 = 6;
    /// CSS 111b: admin command set only.
    pub const CSS_ADMIN_ONLY: u8 = 7;
    /// SHN 00b: no notification.
    pub const SHN_NONE: u8 = 0;
    /// SHN 01b: normal shutdown.
    pub const SHN_NORMAL: u8 = 1;
    /// SHN 10b: abrupt shutdown.
    pub const SHN_ABRUPT: u8 = 2;

    /// What the Linux host writes before enabling (`nvme_enable_ctrl`): CSS, MPS 0,
    /// AMS 0, SHN 0, IOSQES 6, IOCQES 4, EN 0.
    pub const fn linux_host_default(css: u8) -> Self {
        Self(0).with_css(css).with_iosqes(6).with_iocqes(4)
    }

    bitflags_rw! { u32;
        /// EN (0): enable.
        en / with_en = 0;
        /// CRIME (24): controller ready independent of media enable.
        crime / with_crime = 24;
    }
    bitfields! { u32;
        /// CSS (6:4): I/O command set selected.
        css / with_css: u8 = 4, 3;
        /// MPS (10:7): memory page size, 2^(12+MPS).
        mps / with_mps: u8 = 7, 4;
        /// AMS (13:11): arbitration mechanism selected.
        ams / with_ams: u8 = 11, 3;
        /// SHN (15:14): shutdown notification (see `SHN_*`).
        shn / with_shn: u8 = 14, 2;
        /// IOSQES (19:16): I/O SQ entry size, log2 (6 = 64 bytes).
        iosqes / with_iosqes: u8 = 16, 4;
        /// IOCQES (23:20): I/O CQ entry size, log2 (4 = 16 bytes).
        iocqes / with_iocqes: u8 = 20, 4;
    }
}

/// Controller Status (CSTS, offset 1Ch).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Csts(pub u32);

impl Csts {
    /// SHST 00b: normal operation.
    pub const SHST_NORMAL: u8 = 0;
    /// SHST 01b: shutdown processing occurring.
    pub const SHST_OCCURRING: u8 = 1;
    /// SHST 10b: shutdown processing complete.
    pub const SHST_COMPLETE: u8 = 2;

    bitflags_rw! { u32;
        /// RDY (0): ready.
        rdy / with_rdy = 0;
        /// CFS (1): controller fatal status.
        cfs / with_cfs = 1;
        /// NSSRO (4): NVM subsystem reset occurred.
        nssro / with_nssro = 4;
        /// PP (5): processing paused.
        pp / with_pp = 5;
        /// ST (6): shutdown type (1 = subsystem shutdown).
        st / with_st = 6;
    }
    bitfields! { u32;
        /// SHST (3:2): shutdown status (see `SHST_*`).
        shst / with_shst: u8 = 2, 2;
    }
}

/// Controller Ready Timeouts (CRTO, offset 68h), 500 ms units.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Crto(pub u32);

impl Crto {
    bitfields! { u32;
        /// CRWMT (15:0): controller ready with media timeout.
        crwmt / with_crwmt: u16 = 0, 16;
        /// CRIMT (31:16): controller ready independent of media timeout.
        crimt / with_crimt: u16 = 16, 16;
    }
}

/// ATTRIB size code for a 4-byte property.
pub const ATTRIB_SIZE_4: u8 = 0;
/// ATTRIB size code for an 8-byte property.
pub const ATTRIB_SIZE_8: u8 = 1;

const fn attrib_for(size8: bool) -> u8 {
    if size8 {
        ATTRIB_SIZE_8
    } else {
        ATTRIB_SIZE_4
    }
}

/// Size in bytes named by an ATTRIB byte (bits 2:0): 0 → 4, 1 → 8, else `None`.
pub const fn attrib_size(attrib: u8) -> Option<usize> {
    match attrib & 7 {
        0 => Some(4),
        1 => Some(8),
        _ => None,
    }
}

/// Property Get command (FCTYPE 04h). The value comes back in CQE DW0 (low)
/// and DW1 (high), i.e. the 64-bit `Cqe::result`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PropertyGet {
    /// ATTRIB byte (bits 2:0 size: 0 = 4 bytes, 1 = 8 bytes).
    pub attrib: u8,
    /// Register offset.
    pub offset: PropertyOffset,
}

impl PropertyGet {
    /// Get of `offset` with its natural size (8 bytes for CAP, else 4).
    pub const fn new(offset: PropertyOffset) -> Self {
        Self { attrib: attrib_for(offset.0 == 0), offset }
    }
    /// Access size in bytes (`None` for a reserved size code).
    pub const fn size(&self) -> Option<usize> {
        attrib_size(self.attrib)
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        Self { attrib: sqe.byte(fabrics_off::ATTRIB), offset: PropertyOffset(sqe.u32_at(fabrics_off::OFST)) }
    }
    /// Builds the SQE (OPC 7Fh, FCTYPE 04h, no data).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(AdminOpcode::FABRICS.0);
        s.set_cid(cid)
            .set_fctype(FabricsType::PROPERTY_GET.0)
            .set_byte(fabrics_off::ATTRIB, self.attrib)
            .set_u32_at(fabrics_off::OFST, self.offset.0);
        s
    }
}

/// Property Set command (FCTYPE 00h).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PropertySet {
    /// ATTRIB byte (bits 2:0 size: 0 = 4 bytes, 1 = 8 bytes).
    pub attrib: u8,
    /// Register offset.
    pub offset: PropertyOffset,
    /// Value (only the low 4 bytes count for a 4-byte property).
    pub value: u64,
}

impl PropertySet {
    /// 4-byte Set (what the Linux host uses for CC).
    pub const fn new32(offset: PropertyOffset, value: u32) -> Self {
        Self { attrib: ATTRIB_SIZE_4, offset, value: value as u64 }
    }
    /// 8-byte Set.
    pub const fn new64(offset: PropertyOffset, value: u64) -> Self {
        Self { attrib: ATTRIB_SIZE_8, offset, value }
    }
    /// Access size in bytes (`None` for a reserved size code).
    pub const fn size(&self) -> Option<usize> {
        attrib_size(self.attrib)
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        Self {
            attrib: sqe.byte(fabrics_off::ATTRIB),
            offset: PropertyOffset(sqe.u32_at(fabrics_off::OFST)),
            value: sqe.u64_at(fabrics_off::VALUE),
        }
    }
    /// Builds the SQE (OPC 7Fh, FCTYPE 00h, no data).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(AdminOpcode::FABRICS.0);
        s.set_cid(cid)
            .set_fctype(FabricsType::PROPERTY_SET.0)
            .set_byte(fabrics_off::ATTRIB, self.attrib)
            .set_u32_at(fabrics_off::OFST, self.offset.0)
            .set_u64_at(fabrics_off::VALUE, self.value);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cap_fields() {
        // nvmet: MQES 1023, TO 15, CSS NVM + IOCS.
        let cap = Cap(0).with_mqes(1023).with_to(15).with_css(Cap::CSS_NVM | Cap::CSS_IOCS).with_cqr(true);
        assert_eq!(cap.0, 1023 | 1 << 16 | 15 << 24 | 1 << 37 | 1 << 43);
        assert_eq!(cap.mqes(), 1023);
        assert!(cap.cqr());
        assert_eq!(cap.css(), 0x41);
        let cap = cap.with_mpsmax(4).with_mpsmin(0).with_crwms(true).with_dstrd(0xF);
        assert_eq!(cap.0 >> 52 & 0xF, 4);
        assert_eq!(cap.0 >> 59 & 1, 1);
        assert_eq!(cap.dstrd(), 0xF);
        assert_eq!(cap.with_mqes(0xFFFF).with_mqes(1).mqes(), 1);
    }

    #[test]
    fn cc_csts_vs() {
        let cc = Cc::linux_host_default(Cc::CSS_NVM).with_en(true);
        assert_eq!(cc.0, 0x0046_0001);
        assert_eq!(cc.iosqes(), 6);
        assert_eq!(cc.iocqes(), 4);
        assert_eq!(cc.with_shn(Cc::SHN_NORMAL).0 & 0xC000, 0x4000);
        assert_eq!(Cc(6 << 4).css(), Cc::CSS_CSI);
        assert_eq!(Cc(0).with_mps(3).with_ams(1).with_crime(true).0, 3 << 7 | 1 << 11 | 1 << 24);
        let csts = Csts(0).with_rdy(true).with_shst(Csts::SHST_COMPLETE);
        assert_eq!(csts.0, 0x9);
        assert!(Csts(2).cfs());
        assert_eq!(Vs::V1_3.0, 0x0001_0300);
        assert_eq!(Vs(0x0002_0100).minor(), 1);
        assert!(Vs::V2_0 > Vs::V1_4);
        assert_eq!(Crto(0).with_crimt(3).with_crwmt(2).0, 0x0003_0002);
    }

    #[test]
    fn property_sqe_layout() {
        let g = PropertyGet::new(PropertyOffset::CAP).to_sqe(9);
        assert_eq!(&g.0[0..5], &[0x7F, 0x40, 9, 0, 0x04]);
        assert_eq!(g.0[40], 1);
        assert_eq!(&g.0[44..48], &[0, 0, 0, 0]);
        assert_eq!(PropertyGet::from_sqe(&g).size(), Some(8));
        let s = PropertySet::new32(PropertyOffset::CC, 0x0046_0001).to_sqe(10);
        assert_eq!(s.0[4], 0x00);
        assert_eq!(s.0[40], 0);
        assert_eq!(&s.0[44..48], &[0x14, 0, 0, 0]);
        assert_eq!(&s.0[48..56], &[1, 0, 0x46, 0, 0, 0, 0, 0]);
        assert_eq!(PropertyOffset::CSTS.size(), Some(4));
        assert_eq!(PropertyOffset(0x24).size(), None);
        assert_eq!(attrib_size(2), None);
    }

    proptest! {
        #[test]
        fn property_roundtrip(attrib in any::<u8>(), offset in any::<u32>(), value in any::<u64>(), cid in any::<u16>()) {
            let g = PropertyGet { attrib, offset: PropertyOffset(offset) };
            prop_assert_eq!(PropertyGet::from_sqe(&g.to_sqe(cid)), g);
            let s = PropertySet { attrib, offset: PropertyOffset(offset), value };
            prop_assert_eq!(PropertySet::from_sqe(&s.to_sqe(cid)), s);
        }

        #[test]
        fn register_fields_roundtrip(raw in any::<u64>(), v in any::<u16>()) {
            let cap = Cap(raw);
            prop_assert_eq!(cap.with_mqes(v).mqes(), v);
            prop_assert_eq!(cap.with_mqes(cap.mqes()), cap);
            prop_assert_eq!(cap.with_css(cap.css()).with_to(cap.to()), cap);
            let cc = Cc(raw as u32);
            prop_assert_eq!(cc.with_shn(cc.shn()).with_iosqes(cc.iosqes()).with_en(cc.en()), cc);
            prop_assert_eq!(cc.with_mps(v as u8).mps(), v as u8 & 0xF);
        }
    }
}
