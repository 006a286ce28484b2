//! Fabrics Connect command (FCTYPE 01h), its 1024-byte data and response DW0
//! (NVMe-oF 1.1 §3.3; reference §4.2; Linux `struct nvmf_connect_command`,
//! `struct nvmf_connect_data`, `nvmf_connect_cmd_prep`, nvmet `IPO_IATTR_*`).

use super::wire::{cstr_strict, need, put_cstr, put_u16, u16_at};
use super::SpecError;
use crate::opcode::{AdminOpcode, FabricsType};
use crate::sqe::{fabrics_off, SglDescriptor, Sqe};

/// CNTLID value asking for a dynamically allocated controller (admin Connect).
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// Size of the Connect data.
pub const CONNECT_DATA_LEN: usize = 1024;
/// Size of an NQN field in Connect data, Identify and the discovery log.
pub const NQN_FIELD_LEN: usize = 256;

/// Byte offsets inside the Connect data (Linux `struct nvmf_connect_data`).
pub mod data_off {
    /// HOSTID (16 bytes).
    pub const HOSTID: usize = 0;
    /// CNTLID (u16).
    pub const CNTLID: usize = 16;
    /// SUBNQN (256 bytes, NUL-terminated).
    pub const SUBNQN: usize = 256;
    /// HOSTNQN (256 bytes, NUL-terminated).
    pub const HOSTNQN: usize = 512;
}

/// The 1024-byte Connect command data.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ConnectData {
    /// Host identifier (UUID bytes in textual order).
    pub hostid: [u8; 16],
    /// Controller ID: [`CNTLID_DYNAMIC`] on the admin queue, the admin Connect's result on I/O queues.
    pub cntlid: u16,
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
}

impl ConnectData {
    /// Decodes from at least 1024 bytes. NQNs stop at the first NUL; a field
    /// without a NUL in its 256 bytes, or not UTF-8, is an error naming its
    /// offset (which is also the IPO to report with IATTR = 1).
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, CONNECT_DATA_LEN, "connect data")?;
        Ok(Self {
            hostid: b[0..16].try_into().unwrap(),
            cntlid: u16_at(b, data_off::CNTLID),
            subnqn: cstr_strict(b, data_off::SUBNQN, NQN_FIELD_LEN)?,
            hostnqn: cstr_strict(b, data_off::HOSTNQN, NQN_FIELD_LEN)?,
        })
    }

    /// Encodes to 1024 bytes (reserved bytes zero; NQNs truncated to 255 bytes).
    pub fn encode(&self) -> [u8; CONNECT_DATA_LEN] {
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[0..16].copy_from_slice(&self.hostid);
        put_u16(&mut b, data_off::CNTLID, self.cntlid);
        put_cstr(&mut b, data_off::SUBNQN, NQN_FIELD_LEN, &self.subnqn);
        put_cstr(&mut b, data_off::HOSTNQN, NQN_FIELD_LEN, &self.hostnqn);
        b
    }
}

/// Connect command fields (SQE bytes 40–51).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ConnectCmd {
    /// Record format (must be 0).
    pub recfmt: u16,
    /// Queue ID (0 = admin).
    pub qid: u16,
    /// Submission queue size, 0's based.
    pub sqsize: u16,
    /// Connect attributes (bits 1:0 priority class, bit 2 disable SQ flow control).
    pub cattr: u8,
    /// Keep-alive timeout in milliseconds (admin queue; 0 = disabled).
    pub kato_ms: u32,
}

impl ConnectCmd {
    /// CATTR bit 2: disable SQ flow control (Linux `NVME_CONNECT_DISABLE_SQFLOW`).
    pub const CATTR_DISABLE_SQFLOW: u8 = 1 << 2;

    /// Admin-queue Connect as the Linux host sends it: QID 0, SQSIZE 31 (32 entries).
    pub const fn admin(kato_ms: u32) -> Self {
        Self { recfmt: 0, qid: 0, sqsize: 31, cattr: 0, kato_ms }
    }
    /// I/O-queue Connect with `entries` queue entries (SQSIZE = entries − 1), KATO 0.
    pub const fn io(qid: u16, entries: u16) -> Self {
        Self { recfmt: 0, qid, sqsize: entries.saturating_sub(1), cattr: 0, kato_ms: 0 }
    }
    /// Whether SQ flow control is disabled (CATTR bit 2).
    pub const fn disable_sqflow(&self) -> bool {
        self.cattr & Self::CATTR_DISABLE_SQFLOW != 0
    }
    /// Returns a copy with CATTR bit 2 set or cleared.
    pub const fn with_disable_sqflow(mut self, on: bool) -> Self {
        self.cattr =
            (self.cattr & !Self::CATTR_DISABLE_SQFLOW) | if on { Self::CATTR_DISABLE_SQFLOW } else { 0 };
        self
    }
    /// Number of queue entries (SQSIZE + 1).
    pub const fn queue_entries(&self) -> u32 {
        self.sqsize as u32 + 1
    }

    /// Whether `sqe` is a Connect command (OPC 7Fh, FCTYPE 01h).
    pub fn is_connect(sqe: &Sqe) -> bool {
        sqe.opcode() == AdminOpcode::FABRICS.0 && sqe.fctype() == FabricsType::CONNECT.0
    }

    /// Reads the fields from an SQE (opcode and FCTYPE are not checked; see [`Self::is_connect`]).
    pub fn from_sqe(sqe: &Sqe) -> Self {
        Self {
            recfmt: sqe.u16_at(fabrics_off::RECFMT),
            qid: sqe.u16_at(fabrics_off::QID),
            sqsize: sqe.u16_at(fabrics_off::SQSIZE),
            cattr: sqe.byte(fabrics_off::CATTR),
            kato_ms: sqe.u32_at(fabrics_off::KATO),
        }
    }

    /// Builds the SQE: OPC 7Fh, FCTYPE 01h, SGL in-capsule 1024 bytes at offset 0
    /// (what `nvmf_connect_cmd_prep` + nvme-tcp produce).
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(AdminOpcode::FABRICS.0);
        s.set_cid(cid)
            .set_fctype(FabricsType::CONNECT.0)
            .set_sgl(SglDescriptor::in_capsule(CONNECT_DATA_LEN as u32))
            .set_u16_at(fabrics_off::RECFMT, self.recfmt)
            .set_u16_at(fabrics_off::QID, self.qid)
            .set_u16_at(fabrics_off::SQSIZE, self.sqsize)
            .set_byte(fabrics_off::CATTR, self.cattr)
            .set_u32_at(fabrics_off::KATO, self.kato_ms);
        s
    }
}

/// Connect response DW0 bit 17: authentication (DH-HMAC-CHAP) required (ATR).
pub const CONNECT_RSP_ATR: u32 = 1 << 17;
/// Connect response DW0 bit 18: secure channel concatenation required (ASCR).
pub const CONNECT_RSP_ASCR: u32 = 1 << 18;

/// Successful Connect DW0: CNTLID in bits 15:0 plus `authreq` flags
/// ([`CONNECT_RSP_ATR`], [`CONNECT_RSP_ASCR`]).
pub const fn success_dw0(cntlid: u16, authreq: u32) -> u32 {
    cntlid as u32 | (authreq & (CONNECT_RSP_ATR | CONNECT_RSP_ASCR))
}

/// CNTLID from a successful Connect DW0 (bits 15:0).
pub const fn cntlid_from_dw0(dw0: u32) -> u16 {
    dw0 as u16
}

/// DW0 for a *Connect Invalid Parameters* (or Invalid Host) completion: IPO in
/// bits 15:0 (byte offset of the bad field), IATTR bit 16 set when that offset
/// is inside the Connect data, clear when it is inside the SQE (nvmet
/// `IPO_IATTR_CONNECT_DATA` / `IPO_IATTR_CONNECT_SQE`).
pub const fn invalid_param_dw0(in_data: bool, offset: u16) -> u32 {
    offset as u32 | ((in_data as u32) << 16)
}

/// Splits a Connect Invalid Parameters DW0 into (in_data, offset), as
/// `nvmf_log_connect_error` does.
pub const fn parse_invalid_param_dw0(dw0: u32) -> (bool, u16) {
    ((dw0 >> 16) & 1 != 0, dw0 as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn connect_data_offsets() {
        let d = ConnectData {
            hostid: [0x11; 16],
            cntlid: CNTLID_DYNAMIC,
            subnqn: "nqn.2014-08.org.nvmexpress.discovery".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001".into(),
        };
        let b = d.encode();
        assert_eq!(&b[0..16], &[0x11; 16]);
        assert_eq!(&b[16..18], &[0xFF, 0xFF]);
        assert!(b[18..256].iter().all(|&x| x == 0));
        assert_eq!(&b[256..256 + 36], d.subnqn.as_bytes());
        assert_eq!(b[256 + 36], 0);
        assert_eq!(&b[512..512 + 4], b"nqn.");
        assert!(b[768..].iter().all(|&x| x == 0));
        assert_eq!(ConnectData::decode(&b).unwrap(), d);
    }

    #[test]
    fn connect_data_errors() {
        assert!(matches!(ConnectData::decode(&[0; 1023]), Err(SpecError::TooShort { need: 1024, .. })));
        let mut b = [0u8; 1024];
        b[256..512].fill(b'a');
        assert_eq!(ConnectData::decode(&b), Err(SpecError::NotTerminated { offset: 256, len: 256 }));
        let mut b = [0u8; 1024];
        b[512] = 0xC3; // truncated UTF-8 sequence
        assert_eq!(ConnectData::decode(&b), Err(SpecError::NotUtf8 { offset: 512 }));
    }

    #[test]
    fn connect_sqe_layout() {
        let c = ConnectCmd::admin(5000).with_disable_sqflow(true);
        let s = c.to_sqe(7);
        let b = s.0;
        assert_eq!(b[0], 0x7F);
        assert_eq!(&b[2..4], &[7, 0]);
        assert_eq!(b[4], 0x01);
        assert_eq!(&b[24..40], &SglDescriptor::in_capsule(1024).encode());
        assert_eq!(&b[40..52], &[0, 0, 0, 0, 31, 0, 0x04, 0, 0x88, 0x13, 0, 0]);
        assert!(ConnectCmd::is_connect(&s));
        assert_eq!(ConnectCmd::from_sqe(&s), c);
        assert!(c.disable_sqflow());
        assert_eq!(c.queue_entries(), 32);
        assert_eq!(ConnectCmd::io(3, 128).sqsize, 127);
    }

    #[test]
    fn response_dw0() {
        assert_eq!(invalid_param_dw0(true, 256), 0x0001_0100);
        assert_eq!(invalid_param_dw0(false, 42), 42);
        assert_eq!(parse_invalid_param_dw0(0x0001_0010), (true, 16));
        assert_eq!(success_dw0(5, CONNECT_RSP_ATR), 0x0002_0005);
        assert_eq!(cntlid_from_dw0(0x0002_0005), 5);
    }

    proptest! {
        #[test]
        fn connect_data_roundtrip(hostid in any::<[u8; 16]>(), cntlid in any::<u16>(),
                                  subnqn in "[ -~]{0,255}", hostnqn in "\\PC{0,60}") {
            let d = ConnectData { hostid, cntlid, subnqn, hostnqn };
            prop_assert_eq!(ConnectData::decode(&d.encode()).unwrap(), d);
        }

        #[test]
        fn connect_cmd_roundtrip(recfmt in any::<u16>(), qid in any::<u16>(), sqsize in any::<u16>(),
                                 cattr in any::<u8>(), kato_ms in any::<u32>(), cid in any::<u16>()) {
            let c = ConnectCmd { recfmt, qid, sqsize, cattr, kato_ms };
            let s = c.to_sqe(cid);
            prop_assert_eq!(s.cid(), cid);
            prop_assert_eq!(ConnectCmd::from_sqe(&s), c);
        }
    }
}
