//! Identify (admin OPC 06h): command fields, Identify Controller (CNS 01h),
//! Identify Namespace (CNS 00h), I/O command set independent namespace (CNS 08h),
//! the NVM command set's controller limits (CNS 06h),
//! namespace identification descriptors (CNS 03h) and the active NSID list (CNS 02h)
//! (NVMe Base 2.0 §5.17; reference §5.3; Linux `struct nvme_id_ctrl`,
//! `struct nvme_id_ns`, `struct nvme_id_ns_cs_indep`, `nvme_process_ns_desc`).

use super::wire::{
    arr, cstr, need, padded, put_cstr, put_padded, put_u128, put_u16, put_u32, put_u64, u128_at, u16_at,
    u32_at, u64_at,
};
use super::SpecError;
use crate::opcode::AdminOpcode;
use crate::sqe::{SglDescriptor, Sqe};

/// Size of every Identify data structure.
pub const IDENTIFY_DATA_LEN: usize = 4096;
/// Number of entries in an NSID list (CNS 02h).
pub const NS_LIST_MAX: usize = 1024;
/// Identify Controller ONCS bit 3: the Write Zeroes command.
pub const ONCS_WRITE_ZEROES: u16 = 1 << 3;

/// Identify Controller CTRATT bits (NVMe base spec, Controller Attributes).
pub mod ctratt {
    /// Bit 0: 128-bit host identifier supported.
    pub const HOST_ID_128: u32 = 1 << 0;
    /// Bit 6: Traffic Based Keep Alive Support: every command restarts the
    /// keep-alive timer, so a host with I/O completing sends no Keep Alive.
    pub const TBKAS: u32 = 1 << 6;
}

/// Controller or Namespace Structure (CNS, CDW10 bits 7:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Cns(pub u8);

impl Cns {
    /// Identify Namespace (NVM).
    pub const NS: Self = Self(0x00);
    /// Identify Controller.
    pub const CTRL: Self = Self(0x01);
    /// Active namespace ID list.
    pub const ACTIVE_NS_LIST: Self = Self(0x02);
    /// Namespace identification descriptor list.
    pub const NS_DESC_LIST: Self = Self(0x03);
    /// NVM set list.
    pub const NVMSET_LIST: Self = Self(0x04);
    /// I/O command set specific Identify Namespace (CSI in CDW11).
    pub const CS_NS: Self = Self(0x05);
    /// I/O command set specific Identify Controller (CSI in CDW11).
    pub const CS_CTRL: Self = Self(0x06);
    /// Active namespace ID list for a command set.
    pub const ACTIVE_NS_LIST_CS: Self = Self(0x07);
    /// I/O command set independent Identify Namespace.
    pub const IND_CS_NS: Self = Self(0x08);
    /// Allocated namespace ID list.
    pub const ALLOCATED_NS_LIST: Self = Self(0x10);
    /// Identify Namespace for an allocated NSID.
    pub const ALLOCATED_NS: Self = Self(0x11);
    /// Controllers attached to a namespace.
    pub const NS_CTRL_LIST: Self = Self(0x12);
    /// Controllers in the subsystem.
    pub const CTRL_LIST: Self = Self(0x13);
    /// Secondary controller list.
    pub const SECONDARY_CTRL_LIST: Self = Self(0x15);
    /// Namespace granularity list.
    pub const NS_GRANULARITY: Self = Self(0x16);
    /// UUID list.
    pub const UUID_LIST: Self = Self(0x17);
    /// Endurance group list.
    pub const ENDGRP_LIST: Self = Self(0x19);
    /// I/O command set data structure.
    pub const IOCS: Self = Self(0x1C);
}

/// Command Set Identifier (CSI).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Csi(pub u8);

impl Csi {
    /// NVM command set.
    pub const NVM: Self = Self(0);
    /// Key Value command set.
    pub const KV: Self = Self(1);
    /// Zoned Namespace command set.
    pub const ZNS: Self = Self(2);
}

/// Identify command fields: NSID, CDW10 (CNS 7:0, CNTID 31:16), CDW11 (CNSSID
/// 15:0, CSI 31:24), CDW14 (UUID index 6:0).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct IdentifyCmd {
    /// Namespace identifier.
    pub nsid: u32,
    /// Controller or namespace structure.
    pub cns: Cns,
    /// Controller identifier (CNS 12h/13h).
    pub cntid: u16,
    /// CNS specific identifier (e.g. NVM set / endurance group).
    pub cnssid: u16,
    /// Command set identifier.
    pub csi: Csi,
    /// UUID index (bits 6:0 of CDW14).
    pub uuid_index: u8,
}

impl IdentifyCmd {
    /// Identify with `cns` for namespace `nsid` (CSI 0).
    pub const fn new(cns: Cns, nsid: u32) -> Self {
        Self { nsid, cns, cntid: 0, cnssid: 0, csi: Csi::NVM, uuid_index: 0 }
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        let (c10, c11) = (sqe.cdw(10), sqe.cdw(11));
        Self {
            nsid: sqe.nsid(),
            cns: Cns(c10 as u8),
            cntid: (c10 >> 16) as u16,
            cnssid: c11 as u16,
            csi: Csi((c11 >> 24) as u8),
            uuid_index: sqe.cdw(14) as u8 & 0x7F,
        }
    }
    /// Builds the SQE (OPC 06h, transport SGL of 4096 bytes).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(AdminOpcode::IDENTIFY.0);
        s.set_cid(cid)
            .set_nsid(self.nsid)
            .set_sgl(SglDescriptor::transport(IDENTIFY_DATA_LEN as u32))
            .set_cdw(10, self.cns.0 as u32 | (self.cntid as u32) << 16)
            .set_cdw(11, self.cnssid as u32 | (self.csi.0 as u32) << 24)
            .set_cdw(14, (self.uuid_index & 0x7F) as u32);
        s
    }
}

/// Power state descriptor (32 bytes; Linux `struct nvme_id_power_state`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PowerStateDescriptor {
    /// MP: maximum power (centiwatts, or 0.0001 W if MXPS).
    pub mp: u16,
    /// Flags byte 3: bit 0 MXPS, bit 1 NOPS.
    pub flags: u8,
    /// ENLAT: entry latency (µs).
    pub enlat: u32,
    /// EXLAT: exit latency (µs).
    pub exlat: u32,
    /// RRT: relative read throughput.
    pub rrt: u8,
    /// RRL: relative read latency.
    pub rrl: u8,
    /// RWT: relative write throughput.
    pub rwt: u8,
    /// RWL: relative write latency.
    pub rwl: u8,
    /// IDLP: idle power.
    pub idlp: u16,
    /// IPS: idle power scale (bits 7:6 of byte 18).
    pub ips: u8,
    /// ACTP: active power.
    pub actp: u16,
    /// APW (bits 2:0) / APS (bits 7:6) of byte 22.
    pub apw_aps: u8,
}

impl PowerStateDescriptor {
    /// The PSD0 nvmet reports: MP 0x9C4 (25 W), ENLAT 16 µs, EXLAT 4 µs.
    pub const NVMET_PSD0: Self = Self {
        mp: 0x9C4,
        flags: 0,
        enlat: 16,
        exlat: 4,
        rrt: 0,
        rrl: 0,
        rwt: 0,
        rwl: 0,
        idlp: 0,
        ips: 0,
        actp: 0,
        apw_aps: 0,
    };

    /// Decodes 32 bytes at `off`.
    fn read(b: &[u8], off: usize) -> Self {
        Self {
            mp: u16_at(b, off),
            flags: b[off + 3],
            enlat: u32_at(b, off + 4),
            exlat: u32_at(b, off + 8),
            rrt: b[off + 12],
            rrl: b[off + 13],
            rwt: b[off + 14],
            rwl: b[off + 15],
            idlp: u16_at(b, off + 16),
            ips: b[off + 18],
            actp: u16_at(b, off + 20),
            apw_aps: b[off + 22],
        }
    }
    /// Encodes 32 bytes at `off`.
    fn write(&self, b: &mut [u8], off: usize) {
        put_u16(b, off, self.mp);
        b[off + 3] = self.flags;
        put_u32(b, off + 4, self.enlat);
        put_u32(b, off + 8, self.exlat);
        b[off + 12] = self.rrt;
        b[off + 13] = self.rrl;
        b[off + 14] = self.rwt;
        b[off + 15] = self.rwl;
        put_u16(b, off + 16, self.idlp);
        b[off + 18] = self.ips;
        put_u16(b, off + 20, self.actp);
        b[off + 22] = self.apw_aps;
    }
}

/// Byte offsets in the Identify Controller data structure (Linux `struct nvme_id_ctrl`).
pub mod ctrl_off {
    #![allow(missing_docs)]
    pub const VID: usize = 0;
    pub const SSVID: usize = 2;
    pub const SN: usize = 4;
    pub const MN: usize = 24;
    pub const FR: usize = 64;
    pub const RAB: usize = 72;
    pub const IEEE: usize = 73;
    pub const CMIC: usize = 76;
    pub const MDTS: usize = 77;
    pub const CNTLID: usize = 78;
    pub const VER: usize = 80;
    pub const RTD3R: usize = 84;
    pub const RTD3E: usize = 88;
    pub const OAES: usize = 92;
    pub const CTRATT: usize = 96;
    pub const RRLS: usize = 100;
    pub const CNTRLTYPE: usize = 111;
    pub const FGUID: usize = 112;
    pub const CRDT1: usize = 128;
    pub const OACS: usize = 256;
    pub const ACL: usize = 258;
    pub const AERL: usize = 259;
    pub const FRMW: usize = 260;
    pub const LPA: usize = 261;
    pub const ELPE: usize = 262;
    pub const NPSS: usize = 263;
    pub const AVSCC: usize = 264;
    pub const APSTA: usize = 265;
    pub const WCTEMP: usize = 266;
    pub const CCTEMP: usize = 268;
    pub const KAS: usize = 320;
    pub const ENDGIDMAX: usize = 340;
    pub const ANATT: usize = 342;
    pub const ANACAP: usize = 343;
    pub const ANAGRPMAX: usize = 344;
    pub const NANAGRPID: usize = 348;
    pub const SQES: usize = 512;
    pub const CQES: usize = 513;
    pub const MAXCMD: usize = 514;
    pub const NN: usize = 516;
    pub const ONCS: usize = 520;
    pub const FUSES: usize = 522;
    pub const FNA: usize = 524;
    pub const VWC: usize = 525;
    pub const AWUN: usize = 526;
    pub const AWUPF: usize = 528;
    pub const NVSCC: usize = 530;
    pub const NWPC: usize = 531;
    pub const ACWU: usize = 532;
    pub const OCFS: usize = 534;
    pub const SGLS: usize = 536;
    pub const MNAN: usize = 540;
    pub const SUBNQN: usize = 768;
    pub const IOCCSZ: usize = 1792;
    pub const IORCSZ: usize = 1796;
    pub const ICDOFF: usize = 1800;
    pub const FCATT: usize = 1802;
    pub const MSDBD: usize = 1803;
    pub const OFCS: usize = 1804;
    pub const DCTYPE: usize = 1806;
    pub const PSD0: usize = 2048;
}

/// Identify Controller data structure (CNS 01h), the fields a fabrics target fills.
/// Fields not listed are encoded as zero.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct IdentifyController {
    /// PCI vendor ID.
    pub vid: u16,
    /// PCI subsystem vendor ID.
    pub ssvid: u16,
    /// Serial number (20 bytes ASCII, space padded).
    pub sn: String,
    /// Model number (40 bytes ASCII, space padded).
    pub mn: String,
    /// Firmware revision (8 bytes ASCII, space padded).
    pub fr: String,
    /// Recommended arbitration burst.
    pub rab: u8,
    /// IEEE OUI.
    pub ieee: [u8; 3],
    /// Controller multi-path I/O and namespace sharing capabilities
    /// (bit 0 multi-port, 1 multi-controller, 3 ANA).
    pub cmic: u8,
    /// Maximum data transfer size, 2^MDTS minimum pages (0 = no limit).
    pub mdts: u8,
    /// Controller ID.
    pub cntlid: u16,
    /// Version (same encoding as the VS register).
    pub ver: u32,
    /// RTD3 resume latency (µs).
    pub rtd3r: u32,
    /// RTD3 entry latency (µs).
    pub rtd3e: u32,
    /// Optional asynchronous events supported (see [`super::features::aec`]).
    pub oaes: u32,
    /// Controller attributes ([`ctratt`]: bit 0 128-bit host ID, bit 6 TBKAS).
    pub ctratt: u32,
    /// Read recovery levels supported.
    pub rrls: u16,
    /// Controller type (1 I/O, 2 discovery, 3 administrative).
    pub cntrltype: u8,
    /// FRU globally unique identifier.
    pub fguid: [u8; 16],
    /// Command retry delay times 1–3 (100 ms units).
    pub crdt: [u16; 3],
    /// Optional admin command support.
    pub oacs: u16,
    /// Abort command limit (0's based).
    pub acl: u8,
    /// Asynchronous event request limit (0's based).
    pub aerl: u8,
    /// Firmware updates.
    pub frmw: u8,
    /// Log page attributes (bit 1 command effects log, bit 2 extended data/LPO).
    pub lpa: u8,
    /// Error log page entries (0's based).
    pub elpe: u8,
    /// Number of power states supported (0's based).
    pub npss: u8,
    /// Admin vendor specific command configuration.
    pub avscc: u8,
    /// Autonomous power state transition attributes.
    pub apsta: u8,
    /// Warning composite temperature threshold (K).
    pub wctemp: u16,
    /// Critical composite temperature threshold (K).
    pub cctemp: u16,
    /// Keep alive support, 100 ms granularity (must be ≠ 0 for I/O controllers).
    pub kas: u16,
    /// Endurance group identifier maximum.
    pub endgidmax: u16,
    /// ANA transition time (s).
    pub anatt: u8,
    /// ANA capabilities.
    pub anacap: u8,
    /// ANA group identifier maximum.
    pub anagrpmax: u32,
    /// Number of ANA group identifiers.
    pub nanagrpid: u32,
    /// SQ entry size (max 7:4, min 3:0; 0x66).
    pub sqes: u8,
    /// CQ entry size (max 7:4, min 3:0; 0x44).
    pub cqes: u8,
    /// Maximum outstanding commands.
    pub maxcmd: u16,
    /// Number of namespaces (maximum NSID).
    pub nn: u32,
    /// Optional NVM command support (bit 2 DSM, 3 Write Zeroes, 5 reservations …).
    pub oncs: u16,
    /// Fused operation support.
    pub fuses: u16,
    /// Format NVM attributes.
    pub fna: u8,
    /// Volatile write cache (bit 0 present, bits 2:1 flush broadcast).
    pub vwc: u8,
    /// Atomic write unit normal (0's based LBAs).
    pub awun: u16,
    /// Atomic write unit power fail (0's based LBAs).
    pub awupf: u16,
    /// I/O command set vendor specific command configuration.
    pub nvscc: u8,
    /// Namespace write protection capabilities.
    pub nwpc: u8,
    /// Atomic compare & write unit.
    pub acwu: u16,
    /// Optional copy formats supported (bit 0: Copy source range format 0).
    pub ocfs: u16,
    /// SGL support (bits 1:0 01b supported; bit 20 address as offset …).
    pub sgls: u32,
    /// Maximum number of allowed namespaces.
    pub mnan: u32,
    /// Subsystem NQN (256 bytes, NUL-terminated).
    pub subnqn: String,
    /// I/O queue command capsule supported size (16-byte units, ≥ 4).
    pub ioccsz: u32,
    /// I/O queue response capsule supported size (16-byte units, ≥ 1).
    pub iorcsz: u32,
    /// In-capsule data offset (16-byte units; must be 0 for the Linux TCP host).
    pub icdoff: u16,
    /// Fabrics controller attributes (bit 0: static controller model).
    pub fcatt: u8,
    /// Maximum SGL data block descriptors.
    pub msdbd: u8,
    /// Optional fabric commands supported (bit 0 Disconnect).
    pub ofcs: u16,
    /// Discovery controller type (1 DDC, 2 CDC).
    pub dctype: u8,
    /// Power state 0 descriptor.
    pub psd0: PowerStateDescriptor,
}

impl IdentifyController {
    /// A controller description the stock Linux host accepts on an I/O controller
    /// (values after nvmet, reference §5.3): RAB 6, VER 1.3, CNTRLTYPE 1, CTRATT
    /// 128-bit host ID, ACL/AERL 3, LPA 0x07, ELPE 127, KAS 10, SQES 0x66, CQES
    /// 0x44, MAXCMD 128, NN 1024, VWC 1, SGLS bit 0 + bit 20, MNAN 1024, IOCCSZ 4,
    /// IORCSZ 1, MSDBD 1, PSD0 like nvmet. Callers still set SN, MN, FR, CNTLID,
    /// SUBNQN, MDTS, OAES, ONCS and IOCCSZ for their in-capsule size.
    pub fn fabrics_io_default() -> Self {
        Self {
            rab: 6,
            ver: super::property::Vs::V1_3.0,
            cntrltype: 1,
            ctratt: 1,
            acl: 3,
            aerl: 3,
            frmw: 0x03,
            lpa: 0x07,
            elpe: 127,
            kas: 10,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: 128,
            nn: 1024,
            vwc: 1,
            sgls: 1 | 1 << 20,
            mnan: 1024,
            ioccsz: 4,
            iorcsz: 1,
            msdbd: 1,
            psd0: PowerStateDescriptor::NVMET_PSD0,
            ..Self::default()
        }
    }

    /// Decodes from at least 4096 bytes. SN/MN/FR lose their padding; SUBNQN
    /// stops at the first NUL (or the end of its 256 bytes).
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        use ctrl_off as o;
        need(b, IDENTIFY_DATA_LEN, "identify controller")?;
        Ok(Self {
            vid: u16_at(b, o::VID),
            ssvid: u16_at(b, o::SSVID),
            sn: padded(b, o::SN, 20),
            mn: padded(b, o::MN, 40),
            fr: padded(b, o::FR, 8),
            rab: b[o::RAB],
            ieee: arr(b, o::IEEE),
            cmic: b[o::CMIC],
            mdts: b[o::MDTS],
            cntlid: u16_at(b, o::CNTLID),
            ver: u32_at(b, o::VER),
            rtd3r: u32_at(b, o::RTD3R),
            rtd3e: u32_at(b, o::RTD3E),
            oaes: u32_at(b, o::OAES),
            ctratt: u32_at(b, o::CTRATT),
            rrls: u16_at(b, o::RRLS),
            cntrltype: b[o::CNTRLTYPE],
            fguid: arr(b, o::FGUID),
            crdt: [u16_at(b, o::CRDT1), u16_at(b, o::CRDT1 + 2), u16_at(b, o::CRDT1 + 4)],
            oacs: u16_at(b, o::OACS),
            acl: b[o::ACL],
            aerl: b[o::AERL],
            frmw: b[o::FRMW],
            lpa: b[o::LPA],
            elpe: b[o::ELPE],
            npss: b[o::NPSS],
            avscc: b[o::AVSCC],
            apsta: b[o::APSTA],
            wctemp: u16_at(b, o::WCTEMP),
            cctemp: u16_at(b, o::CCTEMP),
            kas: u16_at(b, o::KAS),
            endgidmax: u16_at(b, o::ENDGIDMAX),
            anatt: b[o::ANATT],
            anacap: b[o::ANACAP],
            anagrpmax: u32_at(b, o::ANAGRPMAX),
            nanagrpid: u32_at(b, o::NANAGRPID),
            sqes: b[o::SQES],
            cqes: b[o::CQES],
            maxcmd: u16_at(b, o::MAXCMD),
            nn: u32_at(b, o::NN),
            oncs: u16_at(b, o::ONCS),
            fuses: u16_at(b, o::FUSES),
            fna: b[o::FNA],
            vwc: b[o::VWC],
            awun: u16_at(b, o::AWUN),
            awupf: u16_at(b, o::AWUPF),
            nvscc: b[o::NVSCC],
            nwpc: b[o::NWPC],
            acwu: u16_at(b, o::ACWU),
            ocfs: u16_at(b, o::OCFS),
            sgls: u32_at(b, o::SGLS),
            mnan: u32_at(b, o::MNAN),
            subnqn: cstr(b, o::SUBNQN, 256)?,
            ioccsz: u32_at(b, o::IOCCSZ),
            iorcsz: u32_at(b, o::IORCSZ),
            icdoff: u16_at(b, o::ICDOFF),
            fcatt: b[o::FCATT],
            msdbd: b[o::MSDBD],
            ofcs: u16_at(b, o::OFCS),
            dctype: b[o::DCTYPE],
            psd0: PowerStateDescriptor::read(b, o::PSD0),
        })
    }

    /// Encodes to 4096 bytes. SN/MN/FR are space padded (truncated to their
    /// size); SUBNQN is NUL-terminated (truncated to 255 bytes).
    pub fn encode(&self) -> Vec<u8> {
        use ctrl_off as o;
        let mut b = vec![0u8; IDENTIFY_DATA_LEN];
        put_u16(&mut b, o::VID, self.vid);
        put_u16(&mut b, o::SSVID, self.ssvid);
        put_padded(&mut b, o::SN, 20, &self.sn, b' ');
        put_padded(&mut b, o::MN, 40, &self.mn, b' ');
        put_padded(&mut b, o::FR, 8, &self.fr, b' ');
        b[o::RAB] = self.rab;
        b[o::IEEE..o::IEEE + 3].copy_from_slice(&self.ieee);
        b[o::CMIC] = self.cmic;
        b[o::MDTS] = self.mdts;
        put_u16(&mut b, o::CNTLID, self.cntlid);
        put_u32(&mut b, o::VER, self.ver);
        put_u32(&mut b, o::RTD3R, self.rtd3r);
        put_u32(&mut b, o::RTD3E, self.rtd3e);
        put_u32(&mut b, o::OAES, self.oaes);
        put_u32(&mut b, o::CTRATT, self.ctratt);
        put_u16(&mut b, o::RRLS, self.rrls);
        b[o::CNTRLTYPE] = self.cntrltype;
        b[o::FGUID..o::FGUID + 16].copy_from_slice(&self.fguid);
        for (i, v) in self.crdt.iter().enumerate() {
            put_u16(&mut b, o::CRDT1 + 2 * i, *v);
        }
        put_u16(&mut b, o::OACS, self.oacs);
        b[o::ACL] = self.acl;
        b[o::AERL] = self.aerl;
        b[o::FRMW] = self.frmw;
        b[o::LPA] = self.lpa;
        b[o::ELPE] = self.elpe;
        b[o::NPSS] = self.npss;
        b[o::AVSCC] = self.avscc;
        b[o::APSTA] = self.apsta;
        put_u16(&mut b, o::WCTEMP, self.wctemp);
        put_u16(&mut b, o::CCTEMP, self.cctemp);
        put_u16(&mut b, o::KAS, self.kas);
        put_u16(&mut b, o::ENDGIDMAX, self.endgidmax);
        b[o::ANATT] = self.anatt;
        b[o::ANACAP] = self.anacap;
        put_u32(&mut b, o::ANAGRPMAX, self.anagrpmax);
        put_u32(&mut b, o::NANAGRPID, self.nanagrpid);
        b[o::SQES] = self.sqes;
        b[o::CQES] = self.cqes;
        put_u16(&mut b, o::MAXCMD, self.maxcmd);
        put_u32(&mut b, o::NN, self.nn);
        put_u16(&mut b, o::ONCS, self.oncs);
        put_u16(&mut b, o::FUSES, self.fuses);
        b[o::FNA] = self.fna;
        b[o::VWC] = self.vwc;
        put_u16(&mut b, o::AWUN, self.awun);
        put_u16(&mut b, o::AWUPF, self.awupf);
        b[o::NVSCC] = self.nvscc;
        b[o::NWPC] = self.nwpc;
        put_u16(&mut b, o::ACWU, self.acwu);
        put_u16(&mut b, o::OCFS, self.ocfs);
        put_u32(&mut b, o::SGLS, self.sgls);
        put_u32(&mut b, o::MNAN, self.mnan);
        put_cstr(&mut b, o::SUBNQN, 256, &self.subnqn);
        put_u32(&mut b, o::IOCCSZ, self.ioccsz);
        put_u32(&mut b, o::IORCSZ, self.iorcsz);
        put_u16(&mut b, o::ICDOFF, self.icdoff);
        b[o::FCATT] = self.fcatt;
        b[o::MSDBD] = self.msdbd;
        put_u16(&mut b, o::OFCS, self.ofcs);
        b[o::DCTYPE] = self.dctype;
        self.psd0.write(&mut b, o::PSD0);
        b
    }
}

/// LBA format descriptor (4 bytes; Linux `struct nvme_lbaf`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct LbaFormat {
    /// Metadata size per LBA (bytes).
    pub ms: u16,
    /// LBA data size, log2 (9 = 512 bytes, 12 = 4096 bytes).
    pub lbads: u8,
    /// Relative performance (bits 1:0).
    pub rp: u8,
}

impl LbaFormat {
    /// Format with `lbads` (log2 of the block size), no metadata.
    pub const fn new(lbads: u8) -> Self {
        Self { ms: 0, lbads, rp: 0 }
    }
    /// Block size in bytes (`None` if LBADS is out of range).
    pub const fn block_size(&self) -> Option<u32> {
        if self.lbads < 32 {
            Some(1 << self.lbads)
        } else {
            None
        }
    }
}

/// Byte offsets in the Identify Namespace data structure (Linux `struct nvme_id_ns`).
pub mod ns_off {
    #![allow(missing_docs)]
    pub const NSZE: usize = 0;
    pub const NCAP: usize = 8;
    pub const NUSE: usize = 16;
    pub const NSFEAT: usize = 24;
    pub const NLBAF: usize = 25;
    pub const FLBAS: usize = 26;
    pub const MC: usize = 27;
    pub const DPC: usize = 28;
    pub const DPS: usize = 29;
    pub const NMIC: usize = 30;
    pub const RESCAP: usize = 31;
    pub const FPI: usize = 32;
    pub const DLFEAT: usize = 33;
    pub const NAWUN: usize = 34;
    pub const NAWUPF: usize = 36;
    pub const NACWU: usize = 38;
    pub const NABSN: usize = 40;
    pub const NABO: usize = 42;
    pub const NABSPF: usize = 44;
    pub const NOIOB: usize = 46;
    pub const NVMCAP: usize = 48;
    pub const NPWG: usize = 64;
    pub const NPWA: usize = 66;
    pub const NPDG: usize = 68;
    pub const NPDA: usize = 70;
    pub const NOWS: usize = 72;
    pub const MSSRL: usize = 74;
    pub const MCL: usize = 76;
    pub const MSRC: usize = 80;
    pub const ANAGRPID: usize = 92;
    pub const NSATTR: usize = 99;
    pub const NVMSETID: usize = 100;
    pub const ENDGID: usize = 102;
    pub const NGUID: usize = 104;
    pub const EUI64: usize = 120;
    pub const LBAF: usize = 128;
}

/// Maximum number of LBA formats in Identify Namespace.
pub const LBAF_MAX: usize = 64;

/// Identify Namespace data structure (CNS 00h, NVM command set).
///
/// NLBAF is not stored: it is `lbaf.len() - 1` on encode (0 for an empty
/// table), and decode reads NLBAF + 1 formats (at most 64).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct IdentifyNamespace {
    /// Namespace size (LBAs).
    pub nsze: u64,
    /// Namespace capacity (LBAs; 0 makes the Linux host ignore the namespace).
    pub ncap: u64,
    /// Namespace utilisation (LBAs).
    pub nuse: u64,
    /// Namespace features (bit 0 thin, 1 NAWUN/NAWUPF/NACWU valid, 4 OPTPERF …).
    pub nsfeat: u8,
    /// Formatted LBA size: bits 3:0 + 6:5 format index, bit 4 extended metadata.
    pub flbas: u8,
    /// Metadata capabilities.
    pub mc: u8,
    /// End-to-end data protection capabilities.
    pub dpc: u8,
    /// End-to-end data protection type settings.
    pub dps: u8,
    /// Namespace multi-path I/O and sharing capabilities (bit 0 shared).
    pub nmic: u8,
    /// Reservation capabilities.
    pub rescap: u8,
    /// Format progress indicator.
    pub fpi: u8,
    /// Deallocate logical block features (bits 2:0 read value, bit 3 write zeroes deallocates).
    pub dlfeat: u8,
    /// Namespace atomic write unit normal.
    pub nawun: u16,
    /// Namespace atomic write unit power fail.
    pub nawupf: u16,
    /// Namespace atomic compare & write unit.
    pub nacwu: u16,
    /// Namespace atomic boundary size normal.
    pub nabsn: u16,
    /// Namespace atomic boundary offset.
    pub nabo: u16,
    /// Namespace atomic boundary size power fail.
    pub nabspf: u16,
    /// Namespace optimal I/O boundary.
    pub noiob: u16,
    /// NVM capacity (bytes).
    pub nvmcap: u128,
    /// Preferred write granularity (0's based).
    pub npwg: u16,
    /// Preferred write alignment (0's based).
    pub npwa: u16,
    /// Preferred deallocate granularity (0's based).
    pub npdg: u16,
    /// Preferred deallocate alignment (0's based).
    pub npda: u16,
    /// Optimal write size (0's based).
    pub nows: u16,
    /// Maximum single source range length of a Copy (LBAs).
    pub mssrl: u16,
    /// Maximum copy length: all source ranges of a Copy together (LBAs).
    pub mcl: u32,
    /// Maximum source range count of a Copy (0's based).
    pub msrc: u8,
    /// ANA group identifier.
    pub anagrpid: u32,
    /// Namespace attributes (bit 0 write protected).
    pub nsattr: u8,
    /// NVM set identifier.
    pub nvmsetid: u16,
    /// Endurance group identifier.
    pub endgid: u16,
    /// Namespace globally unique identifier.
    pub nguid: [u8; 16],
    /// IEEE extended unique identifier.
    pub eui64: [u8; 8],
    /// LBA format table (1..=64 entries).
    pub lbaf: Vec<LbaFormat>,
}

impl IdentifyNamespace {
    /// Index of the formatted LBA format (Linux `nvme_lbaf_index`).
    pub const fn lba_format_index(&self) -> usize {
        ((self.flbas & 0xF) | ((self.flbas & 0x60) >> 1)) as usize
    }
    /// Block size of the current LBA format.
    pub fn block_size(&self) -> Option<u32> {
        self.lbaf.get(self.lba_format_index()).and_then(|f| f.block_size())
    }

    /// Decodes from at least 4096 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        use ns_off as o;
        need(b, IDENTIFY_DATA_LEN, "identify namespace")?;
        let n = (b[o::NLBAF] as usize + 1).min(LBAF_MAX);
        let lbaf = (0..n)
            .map(|i| {
                let off = o::LBAF + 4 * i;
                LbaFormat { ms: u16_at(b, off), lbads: b[off + 2], rp: b[off + 3] }
            })
            .collect();
        Ok(Self {
            nsze: u64_at(b, o::NSZE),
            ncap: u64_at(b, o::NCAP),
            nuse: u64_at(b, o::NUSE),
            nsfeat: b[o::NSFEAT],
            flbas: b[o::FLBAS],
            mc: b[o::MC],
            dpc: b[o::DPC],
            dps: b[o::DPS],
            nmic: b[o::NMIC],
            rescap: b[o::RESCAP],
            fpi: b[o::FPI],
            dlfeat: b[o::DLFEAT],
            nawun: u16_at(b, o::NAWUN),
            nawupf: u16_at(b, o::NAWUPF),
            nacwu: u16_at(b, o::NACWU),
            nabsn: u16_at(b, o::NABSN),
            nabo: u16_at(b, o::NABO),
            nabspf: u16_at(b, o::NABSPF),
            noiob: u16_at(b, o::NOIOB),
            nvmcap: u128_at(b, o::NVMCAP),
            npwg: u16_at(b, o::NPWG),
            npwa: u16_at(b, o::NPWA),
            npdg: u16_at(b, o::NPDG),
            npda: u16_at(b, o::NPDA),
            nows: u16_at(b, o::NOWS),
            mssrl: u16_at(b, o::MSSRL),
            mcl: u32_at(b, o::MCL),
            msrc: b[o::MSRC],
            anagrpid: u32_at(b, o::ANAGRPID),
            nsattr: b[o::NSATTR],
            nvmsetid: u16_at(b, o::NVMSETID),
            endgid: u16_at(b, o::ENDGID),
            nguid: arr(b, o::NGUID),
            eui64: arr(b, o::EUI64),
            lbaf,
        })
    }

    /// Encodes to 4096 bytes (at most 64 LBA formats are written).
    pub fn encode(&self) -> Vec<u8> {
        use ns_off as o;
        let mut b = vec![0u8; IDENTIFY_DATA_LEN];
        put_u64(&mut b, o::NSZE, self.nsze);
        put_u64(&mut b, o::NCAP, self.ncap);
        put_u64(&mut b, o::NUSE, self.nuse);
        b[o::NSFEAT] = self.nsfeat;
        b[o::NLBAF] = self.lbaf.len().clamp(1, LBAF_MAX) as u8 - 1;
        b[o::FLBAS] = self.flbas;
        b[o::MC] = self.mc;
        b[o::DPC] = self.dpc;
        b[o::DPS] = self.dps;
        b[o::NMIC] = self.nmic;
        b[o::RESCAP] = self.rescap;
        b[o::FPI] = self.fpi;
        b[o::DLFEAT] = self.dlfeat;
        put_u16(&mut b, o::NAWUN, self.nawun);
        put_u16(&mut b, o::NAWUPF, self.nawupf);
        put_u16(&mut b, o::NACWU, self.nacwu);
        put_u16(&mut b, o::NABSN, self.nabsn);
        put_u16(&mut b, o::NABO, self.nabo);
        put_u16(&mut b, o::NABSPF, self.nabspf);
        put_u16(&mut b, o::NOIOB, self.noiob);
        put_u128(&mut b, o::NVMCAP, self.nvmcap);
        put_u16(&mut b, o::NPWG, self.npwg);
        put_u16(&mut b, o::NPWA, self.npwa);
        put_u16(&mut b, o::NPDG, self.npdg);
        put_u16(&mut b, o::NPDA, self.npda);
        put_u16(&mut b, o::NOWS, self.nows);
        put_u16(&mut b, o::MSSRL, self.mssrl);
        put_u32(&mut b, o::MCL, self.mcl);
        b[o::MSRC] = self.msrc;
        put_u32(&mut b, o::ANAGRPID, self.anagrpid);
        b[o::NSATTR] = self.nsattr;
        put_u16(&mut b, o::NVMSETID, self.nvmsetid);
        put_u16(&mut b, o::ENDGID, self.endgid);
        b[o::NGUID..o::NGUID + 16].copy_from_slice(&self.nguid);
        b[o::EUI64..o::EUI64 + 8].copy_from_slice(&self.eui64);
        for (i, f) in self.lbaf.iter().take(LBAF_MAX).enumerate() {
            let off = o::LBAF + 4 * i;
            put_u16(&mut b, off, f.ms);
            b[off + 2] = f.lbads;
            b[off + 3] = f.rp;
        }
        b
    }
}

/// I/O command set independent Identify Namespace (CNS 08h; Linux
/// `struct nvme_id_ns_cs_indep`). The Linux host uses it when VS ≥ 2.0 and
/// ignores the namespace unless NSTAT bit 0 (NRDY) is set.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct IdentifyNsIndep {
    /// Namespace features.
    pub nsfeat: u8,
    /// Namespace multi-path I/O and sharing capabilities.
    pub nmic: u8,
    /// Reservation capabilities.
    pub rescap: u8,
    /// Format progress indicator.
    pub fpi: u8,
    /// ANA group identifier.
    pub anagrpid: u32,
    /// Namespace attributes.
    pub nsattr: u8,
    /// NVM set identifier.
    pub nvmsetid: u16,
    /// Endurance group identifier.
    pub endgid: u16,
    /// Namespace status (bit 0 NRDY: namespace ready).
    pub nstat: u8,
}

impl IdentifyNsIndep {
    /// Decodes from at least 4096 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, IDENTIFY_DATA_LEN, "identify ns cs-independent")?;
        Ok(Self {
            nsfeat: b[0],
            nmic: b[1],
            rescap: b[2],
            fpi: b[3],
            anagrpid: u32_at(b, 4),
            nsattr: b[8],
            nvmsetid: u16_at(b, 10),
            endgid: u16_at(b, 12),
            nstat: b[14],
        })
    }
    /// Encodes to 4096 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_DATA_LEN];
        b[0] = self.nsfeat;
        b[1] = self.nmic;
        b[2] = self.rescap;
        b[3] = self.fpi;
        put_u32(&mut b, 4, self.anagrpid);
        b[8] = self.nsattr;
        put_u16(&mut b, 10, self.nvmsetid);
        put_u16(&mut b, 12, self.endgid);
        b[14] = self.nstat;
        b
    }
}

/// NVM command set specific Identify Controller (CNS 06h, CSI 00h; NVM Command
/// Set Specification 1.0 §4.1.5.2, Linux `struct nvme_id_ctrl_nvm`): size
/// limits of the commands that move no data between host and controller, to
/// which MDTS does not apply. Sizes are powers of two in units of the minimum
/// memory page size (CAP.MPSMIN: 4 KiB); 0 means no limit is reported. The
/// Linux host (`nvme_init_non_mdts_limits`) takes WZSL as its
/// `max_write_zeroes_sectors` (else MDTS), DMRL and DMRSL as its discard limits.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct IdentifyCtrlNvm {
    /// Verify Size Limit (2^n pages).
    pub vsl: u8,
    /// Write Zeroes Size Limit (2^n pages).
    pub wzsl: u8,
    /// Write Uncorrectable Size Limit (2^n pages).
    pub wusl: u8,
    /// Dataset Management Ranges Limit (ranges per command).
    pub dmrl: u8,
    /// Dataset Management Range Size Limit (logical blocks per range).
    pub dmrsl: u32,
    /// Dataset Management Size Limit (logical blocks per command).
    pub dmsl: u64,
}

impl IdentifyCtrlNvm {
    /// Decodes from at least 4096 bytes.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, IDENTIFY_DATA_LEN, "identify ctrl nvm")?;
        Ok(Self { vsl: b[0], wzsl: b[1], wusl: b[2], dmrl: b[3], dmrsl: u32_at(b, 4), dmsl: u64_at(b, 8) })
    }
    /// Encodes to 4096 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_DATA_LEN];
        b[0] = self.vsl;
        b[1] = self.wzsl;
        b[2] = self.wusl;
        b[3] = self.dmrl;
        put_u32(&mut b, 4, self.dmrsl);
        put_u64(&mut b, 8, self.dmsl);
        b
    }
    /// A size limit field (VSL, WZSL, WUSL) in bytes, for a 4 KiB minimum
    /// page size: `None` where it reports no limit (0).
    pub fn limit_bytes(field: u8) -> Option<u64> {
        (field != 0).then(|| 1u64.checked_shl(12 + u32::from(field)).unwrap_or(u64::MAX))
    }
}

/// Namespace Identifier Type (NIDT) of a namespace identification descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Nidt(pub u8);

impl Nidt {
    /// IEEE EUI-64 (8 bytes).
    pub const EUI64: Self = Self(1);
    /// NGUID (16 bytes).
    pub const NGUID: Self = Self(2);
    /// UUID (16 bytes).
    pub const UUID: Self = Self(3);
    /// Command set identifier (1 byte).
    pub const CSI: Self = Self(4);

    /// Required NIDL for known types.
    pub const fn expected_len(self) -> Option<usize> {
        match self.0 {
            1 => Some(8),
            2 | 3 => Some(16),
            4 => Some(1),
            _ => None,
        }
    }
}

/// One namespace identification descriptor (CNS 03h).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum NsIdDescriptor {
    /// NIDT 1: IEEE EUI-64.
    Eui64([u8; 8]),
    /// NIDT 2: NGUID.
    Nguid([u8; 16]),
    /// NIDT 3: UUID.
    Uuid([u8; 16]),
    /// NIDT 4: command set identifier.
    Csi(Csi),
    /// Another type, kept verbatim (1..=255 bytes).
    Other {
        /// Identifier type.
        nidt: Nidt,
        /// Identifier bytes.
        nid: Vec<u8>,
    },
}

impl NsIdDescriptor {
    /// Identifier type.
    pub fn nidt(&self) -> Nidt {
        match self {
            Self::Eui64(_) => Nidt::EUI64,
            Self::Nguid(_) => Nidt::NGUID,
            Self::Uuid(_) => Nidt::UUID,
            Self::Csi(_) => Nidt::CSI,
            Self::Other { nidt, .. } => *nidt,
        }
    }
    fn nid(&self) -> &[u8] {
        match self {
            Self::Eui64(v) => v,
            Self::Nguid(v) | Self::Uuid(v) => v,
            Self::Csi(c) => core::slice::from_ref(&c.0),
            Self::Other { nid, .. } => nid,
        }
    }
}

/// Encodes a descriptor list into 4096 bytes: {NIDT, NIDL, 2 reserved, NID}
/// back to back, zero-filled after the last one (NIDL 0 terminates).
pub fn encode_ns_desc_list(descs: &[NsIdDescriptor]) -> Result<Vec<u8>, SpecError> {
    let mut b = vec![0u8; IDENTIFY_DATA_LEN];
    let mut off = 0;
    for d in descs {
        let nid = d.nid();
        if nid.is_empty() || nid.len() > 255 {
            return Err(SpecError::Invalid { what: "namespace descriptor length", offset: off + 1 });
        }
        if off + 4 + nid.len() > IDENTIFY_DATA_LEN {
            return Err(SpecError::TooMany { what: "ns descriptor list", max: IDENTIFY_DATA_LEN, got: off });
        }
        b[off] = d.nidt().0;
        b[off + 1] = nid.len() as u8;
        b[off + 4..off + 4 + nid.len()].copy_from_slice(nid);
        off += 4 + nid.len();
    }
    Ok(b)
}

/// Decodes a descriptor list, stopping at NIDL 0 or the end of the buffer.
/// A known type with the wrong length, or a descriptor running past the end,
/// is an error (the Linux host rejects those in `nvme_process_ns_desc`).
pub fn decode_ns_desc_list(b: &[u8]) -> Result<Vec<NsIdDescriptor>, SpecError> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 4 <= b.len() {
        let nidt = Nidt(b[off]);
        let nidl = b[off + 1] as usize;
        if nidl == 0 {
            break;
        }
        if off + 4 + nidl > b.len() {
            return Err(SpecError::Invalid { what: "namespace descriptor length", offset: off + 1 });
        }
        if nidt.expected_len().is_some_and(|l| l != nidl) {
            return Err(SpecError::Invalid { what: "namespace descriptor length", offset: off + 1 });
        }
        let nid = &b[off + 4..off + 4 + nidl];
        out.push(match nidt {
            Nidt::EUI64 => NsIdDescriptor::Eui64(nid.try_into().unwrap()),
            Nidt::NGUID => NsIdDescriptor::Nguid(nid.try_into().unwrap()),
            Nidt::UUID => NsIdDescriptor::Uuid(nid.try_into().unwrap()),
            Nidt::CSI => NsIdDescriptor::Csi(Csi(nid[0])),
            _ => NsIdDescriptor::Other { nidt, nid: nid.to_vec() },
        });
        off += 4 + nidl;
    }
    Ok(out)
}

/// Encodes an NSID list (CNS 02h/07h) into 4096 bytes: the NSIDs of `nsids`
/// greater than `after`, ascending and de-duplicated, at most 1024, zero-terminated.
/// NSIDs 0, 0xFFFFFFFE and 0xFFFFFFFF are never listed.
pub fn encode_ns_list(nsids: &[u32], after: u32) -> Vec<u8> {
    let mut v: Vec<u32> = nsids.iter().copied().filter(|&n| n > after && n < 0xFFFF_FFFE).collect();
    v.sort_unstable();
    v.dedup();
    let mut b = vec![0u8; IDENTIFY_DATA_LEN];
    for (i, n) in v.iter().take(NS_LIST_MAX).enumerate() {
        put_u32(&mut b, 4 * i, *n);
    }
    b
}

/// Decodes an NSID list, stopping at the first 0 entry (at most 1024 entries).
pub fn decode_ns_list(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .take(NS_LIST_MAX)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .take_while(|&n| n != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn identify_sqe_layout() {
        let c =
            IdentifyCmd { nsid: 1, cns: Cns::CS_NS, cntid: 0x1234, cnssid: 7, csi: Csi::ZNS, uuid_index: 3 };
        let s = c.to_sqe(5);
        assert_eq!(s.opcode(), 0x06);
        assert_eq!(&s.0[40..48], &[0x05, 0, 0x34, 0x12, 7, 0, 0, 2]);
        assert_eq!(s.0[56], 3);
        assert_eq!(s.sgl(), SglDescriptor::transport(4096));
        assert_eq!(IdentifyCmd::from_sqe(&s), c);
    }

    #[test]
    fn identify_ctrl_nvm_offsets() {
        // struct nvme_id_ctrl_nvm: vsl 0, wzsl 1, wusl 2, dmrl 3, dmrsl 4 (le32), dmsl 8 (le64).
        let c = IdentifyCtrlNvm {
            vsl: 8,
            wzsl: 13,
            wusl: 2,
            dmrl: 0xFF,
            dmrsl: 0x0102_0304,
            dmsl: 0x1122_3344_5566_7788,
        };
        let b = c.encode();
        assert_eq!(b.len(), IDENTIFY_DATA_LEN);
        assert_eq!(&b[..16], &[8, 13, 2, 0xFF, 4, 3, 2, 1, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        assert!(b[16..].iter().all(|&x| x == 0));
        // Linux nvme_mps_to_sectors: 1 << (wzsl + 12 - 9) sectors.
        assert_eq!(IdentifyCtrlNvm::limit_bytes(13), Some(32 << 20));
        assert_eq!(IdentifyCtrlNvm::limit_bytes(0), None);
        assert_eq!(IdentifyCtrlNvm::limit_bytes(51), Some(1 << 63));
        assert_eq!(IdentifyCtrlNvm::limit_bytes(52), Some(u64::MAX));
        assert_eq!(IdentifyCtrlNvm::limit_bytes(255), Some(u64::MAX));
        assert!(IdentifyCtrlNvm::decode(&b[..4095]).is_err());
    }

    #[test]
    fn identify_controller_offsets() {
        let c = IdentifyController {
            vid: 0x1B36,
            sn: "0123456789abcdef".into(),
            mn: "Linux".into(),
            fr: "6.8.0".into(),
            mdts: 5,
            cntlid: 0x0102,
            subnqn: "nqn.2024-01.io.example:sub".into(),
            oncs: 0x2C,
            ocfs: 1,
            kas: 10,
            sgls: 0x0010_0001,
            ioccsz: (64 + 8192) / 16,
            icdoff: 0,
            fcatt: 1,
            msdbd: 1,
            ofcs: 1,
            dctype: 2,
            ..IdentifyController::fabrics_io_default()
        };
        let b = c.encode();
        assert_eq!(b.len(), 4096);
        assert_eq!(&b[0..2], &[0x36, 0x1B]);
        assert_eq!(&b[4..24], b"0123456789abcdef    ");
        assert_eq!(&b[24..29], b"Linux");
        assert!(b[29..64].iter().all(|&x| x == b' '));
        assert_eq!(&b[64..72], b"6.8.0   ");
        assert_eq!(b[72], 6);
        assert_eq!(b[77], 5);
        assert_eq!(&b[78..80], &[0x02, 0x01]);
        assert_eq!(&b[80..84], &[0, 3, 1, 0]);
        assert_eq!(b[111], 1);
        assert_eq!(&b[320..322], &[10, 0]);
        assert_eq!(b[512], 0x66);
        assert_eq!(b[513], 0x44);
        assert_eq!(&b[514..516], &[128, 0]);
        assert_eq!(&b[516..520], &[0, 4, 0, 0]);
        assert_eq!(&b[520..522], &[0x2C, 0]);
        assert_eq!(b[525], 1);
        assert_eq!(&b[534..536], &[1, 0]);
        assert_eq!(&b[536..540], &[1, 0, 0x10, 0]);
        assert_eq!(&b[768..768 + 26], c.subnqn.as_bytes());
        assert_eq!(b[768 + 26], 0);
        assert_eq!(&b[1792..1796], &516u32.to_le_bytes());
        assert_eq!(&b[1796..1800], &[1, 0, 0, 0]);
        assert_eq!(&b[1800..1802], &[0, 0]);
        assert_eq!(b[1802], 1);
        assert_eq!(b[1803], 1);
        assert_eq!(&b[1804..1806], &[1, 0]);
        assert_eq!(b[1806], 2);
        assert_eq!(&b[2048..2050], &[0xC4, 0x09]);
        assert_eq!(&b[2052..2056], &[16, 0, 0, 0]);
        assert_eq!(&b[2056..2060], &[4, 0, 0, 0]);
        assert_eq!(IdentifyController::decode(&b).unwrap(), c);
        assert!(matches!(IdentifyController::decode(&b[..4095]), Err(SpecError::TooShort { .. })));
    }

    #[test]
    fn identify_namespace_offsets() {
        let ns = IdentifyNamespace {
            nsze: 0x1000,
            ncap: 0x1000,
            nuse: 0x800,
            nmic: 1,
            nguid: [0xAB; 16],
            eui64: [0xCD; 8],
            anagrpid: 1,
            lbaf: vec![LbaFormat::new(9), LbaFormat { ms: 8, lbads: 12, rp: 2 }],
            flbas: 1,
            mssrl: 0x0102,
            mcl: 0x0304_0506,
            msrc: 0x7F,
            ..Default::default()
        };
        let b = ns.encode();
        // Copy limits (Linux struct nvme_id_ns: mssrl, mcl, msrc after nows).
        assert_eq!(&b[72..81], &[0, 0, 2, 1, 6, 5, 4, 3, 0x7F]);
        assert_eq!(&b[0..8], &0x1000u64.to_le_bytes());
        assert_eq!(&b[16..24], &0x800u64.to_le_bytes());
        assert_eq!(b[25], 1);
        assert_eq!(b[26], 1);
        assert_eq!(b[30], 1);
        assert_eq!(&b[92..96], &[1, 0, 0, 0]);
        assert_eq!(&b[104..120], &[0xAB; 16]);
        assert_eq!(&b[120..128], &[0xCD; 8]);
        assert_eq!(&b[128..136], &[0, 0, 9, 0, 8, 0, 12, 2]);
        let d = IdentifyNamespace::decode(&b).unwrap();
        assert_eq!(d, ns);
        assert_eq!(d.block_size(), Some(4096));
        assert_eq!(IdentifyNamespace { flbas: 0x21, ..Default::default() }.lba_format_index(), 17);
    }

    #[test]
    fn ns_desc_list_layout() {
        let l = vec![
            NsIdDescriptor::Eui64([1; 8]),
            NsIdDescriptor::Nguid([2; 16]),
            NsIdDescriptor::Uuid([3; 16]),
            NsIdDescriptor::Csi(Csi::NVM),
        ];
        let b = encode_ns_desc_list(&l).unwrap();
        assert_eq!(&b[0..4], &[1, 8, 0, 0]);
        assert_eq!(&b[12..16], &[2, 16, 0, 0]);
        assert_eq!(&b[32..36], &[3, 16, 0, 0]);
        assert_eq!(&b[52..57], &[4, 1, 0, 0, 0]);
        assert!(b[57..].iter().all(|&x| x == 0));
        assert_eq!(decode_ns_desc_list(&b).unwrap(), l);
        let mut bad = b.clone();
        bad[1] = 9;
        assert!(matches!(decode_ns_desc_list(&bad), Err(SpecError::Invalid { offset: 1, .. })));
    }

    #[test]
    fn ns_list_layout() {
        let b = encode_ns_list(&[5, 3, 1, 3, 0xFFFF_FFFF, 9], 1);
        assert_eq!(&b[0..16], &[3, 0, 0, 0, 5, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decode_ns_list(&b), vec![3, 5, 9]);
        let many: Vec<u32> = (1..=2000).collect();
        let b = encode_ns_list(&many, 0);
        let d = decode_ns_list(&b);
        assert_eq!(d.len(), 1024);
        assert_eq!(d[1023], 1024);
        assert_eq!(decode_ns_list(&encode_ns_list(&many, 1024))[0], 1025);
    }

    fn ascii(max: usize) -> impl Strategy<Value = String> {
        proptest::string::string_regex(&format!("([!-~]([ -~]{{0,{}}}[!-~])?)?", max - 2)).unwrap()
    }

    /// A 4096-byte image with random numeric fields and the given strings, decoded.
    fn arb_ctrl() -> impl Strategy<Value = IdentifyController> {
        (
            proptest::collection::vec(any::<u8>(), IDENTIFY_DATA_LEN),
            ascii(20),
            ascii(40),
            ascii(8),
            "[ -~]{0,255}",
        )
            .prop_map(|(mut b, sn, mn, fr, subnqn)| {
                put_padded(&mut b, ctrl_off::SN, 20, &sn, b' ');
                put_padded(&mut b, ctrl_off::MN, 40, &mn, b' ');
                put_padded(&mut b, ctrl_off::FR, 8, &fr, b' ');
                put_cstr(&mut b, ctrl_off::SUBNQN, 256, &subnqn);
                let c = IdentifyController::decode(&b).unwrap();
                assert_eq!((&c.sn, &c.mn, &c.fr, &c.subnqn), (&sn, &mn, &fr, &subnqn));
                c
            })
    }

    /// Identify Namespace decoded from a random 4096-byte image.
    fn arb_ns() -> impl Strategy<Value = IdentifyNamespace> {
        proptest::collection::vec(any::<u8>(), IDENTIFY_DATA_LEN)
            .prop_map(|b| IdentifyNamespace::decode(&b).unwrap())
    }

    fn arb_desc() -> impl Strategy<Value = NsIdDescriptor> {
        prop_oneof![
            any::<[u8; 8]>().prop_map(NsIdDescriptor::Eui64),
            any::<[u8; 16]>().prop_map(NsIdDescriptor::Nguid),
            any::<[u8; 16]>().prop_map(NsIdDescriptor::Uuid),
            any::<u8>().prop_map(|c| NsIdDescriptor::Csi(Csi(c))),
            (5u8..=255, proptest::collection::vec(any::<u8>(), 1..40))
                .prop_map(|(t, nid)| NsIdDescriptor::Other { nidt: Nidt(t), nid }),
        ]
    }

    proptest! {
        #[test]
        fn identify_cmd_roundtrip(nsid in any::<u32>(), cns in any::<u8>(), cntid in any::<u16>(),
                                  cnssid in any::<u16>(), csi in any::<u8>(), uuid_index in 0u8..128) {
            let c = IdentifyCmd { nsid, cns: Cns(cns), cntid, cnssid, csi: Csi(csi), uuid_index };
            prop_assert_eq!(IdentifyCmd::from_sqe(&c.to_sqe(1)), c);
        }

        #[test]
        fn identify_controller_roundtrip(c in arb_ctrl()) {
            prop_assert_eq!(IdentifyController::decode(&c.encode()).unwrap(), c);
        }

        #[test]
        fn identify_namespace_roundtrip(ns in arb_ns()) {
            prop_assert_eq!(IdentifyNamespace::decode(&ns.encode()).unwrap(), ns);
        }

        #[test]
        fn identify_ns_indep_roundtrip(v in any::<(u8, u8, u8, u8, u32, u8, u16, u16, u8)>()) {
            let n = IdentifyNsIndep {
                nsfeat: v.0, nmic: v.1, rescap: v.2, fpi: v.3, anagrpid: v.4,
                nsattr: v.5, nvmsetid: v.6, endgid: v.7, nstat: v.8,
            };
            prop_assert_eq!(IdentifyNsIndep::decode(&n.encode()).unwrap(), n);
        }

        #[test]
        fn identify_ctrl_nvm_roundtrip(v in any::<(u8, u8, u8, u8, u32, u64)>()) {
            let c = IdentifyCtrlNvm { vsl: v.0, wzsl: v.1, wusl: v.2, dmrl: v.3, dmrsl: v.4, dmsl: v.5 };
            prop_assert_eq!(IdentifyCtrlNvm::decode(&c.encode()).unwrap(), c);
        }

        #[test]
        fn ns_desc_list_roundtrip(l in proptest::collection::vec(arb_desc(), 0..20)) {
            let b = encode_ns_desc_list(&l).unwrap();
            prop_assert_eq!(b.len(), 4096);
            prop_assert_eq!(decode_ns_desc_list(&b).unwrap(), l);
        }

        #[test]
        fn ns_list_roundtrip(mut v in proptest::collection::btree_set(1u32..0xFFFF_FFFE, 0..1100)) {
            let list: Vec<u32> = std::mem::take(&mut v).into_iter().collect();
            let d = decode_ns_list(&encode_ns_list(&list, 0));
            prop_assert_eq!(&d[..], &list[..list.len().min(1024)]);
        }
    }
}
