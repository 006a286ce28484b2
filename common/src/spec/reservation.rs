//! Reservations (NVMe Base 2.0 §8.19; NVM Command Set §3.2.5–§3.2.8; Linux
//! `include/linux/nvme.h` `struct nvme_reservation_status_ext`, nvmet `pr.c`):
//! the Register (0Dh), Report (0Eh), Acquire (11h) and Release (15h) I/O
//! commands, their data, the extended Reservation Status data structure and
//! the Reservation Notification log page (LID 80h).
//!
//! Command dword 10 of Register, Acquire and Release: action in bits 2:0,
//! IEKEY in bit 3, reservation type in bits 15:8 (Acquire, Release), CPTPL in
//! bits 31:30 (Register). Report: CDW10 NUMD (0's based), CDW11 bit 0 EDS.

use super::wire::{arr, need, put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use super::SpecError;
use crate::opcode::IoOpcode;
use crate::sqe::{SglDescriptor, Sqe};

/// Reservation type (CDW10 bits 15:8 of Acquire and Release; RTYPE of the
/// status data). Unknown values survive.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ReservationType(pub u8);

impl ReservationType {
    /// No reservation held (status data only).
    pub const NONE: Self = Self(0);
    /// Write Exclusive.
    pub const WRITE_EXCLUSIVE: Self = Self(1);
    /// Exclusive Access.
    pub const EXCLUSIVE_ACCESS: Self = Self(2);
    /// Write Exclusive - Registrants Only.
    pub const WRITE_EXCLUSIVE_REG_ONLY: Self = Self(3);
    /// Exclusive Access - Registrants Only.
    pub const EXCLUSIVE_ACCESS_REG_ONLY: Self = Self(4);
    /// Write Exclusive - All Registrants.
    pub const WRITE_EXCLUSIVE_ALL_REGS: Self = Self(5);
    /// Exclusive Access - All Registrants.
    pub const EXCLUSIVE_ACCESS_ALL_REGS: Self = Self(6);

    /// One of the six defined types.
    pub const fn is_valid(self) -> bool {
        matches!(self.0, 1..=6)
    }
    /// An "All Registrants" type: every registrant holds the reservation.
    pub const fn all_registrants(self) -> bool {
        matches!(self.0, 5 | 6)
    }
    /// A "Registrants Only" type.
    pub const fn registrants_only(self) -> bool {
        matches!(self.0, 3 | 4)
    }
    /// An "Exclusive Access" type: non-holders (or non-registrants) may not read either.
    pub const fn exclusive_access(self) -> bool {
        matches!(self.0, 2 | 4 | 6)
    }
    /// The RESCAP bit (Identify Namespace byte 31) that advertises this type.
    pub const fn rescap_bit(self) -> u8 {
        if self.is_valid() {
            1 << self.0
        } else {
            0
        }
    }
}

/// RESCAP (Identify Namespace byte 31) bits.
pub mod rescap {
    /// Persist Through Power Loss supported.
    pub const PTPL: u8 = 1 << 0;
    /// All six reservation types (bits 6:1).
    pub const ALL_TYPES: u8 = 0x7E;
    /// Ignore Existing Key behaves as NVMe 1.3 and later define it.
    pub const IEKEY_1_3: u8 = 1 << 7;
}

/// Reservation Register action (CDW10 bits 2:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct RegisterAction(pub u8);

impl RegisterAction {
    /// Register a reservation key.
    pub const REGISTER: Self = Self(0);
    /// Unregister the host's key.
    pub const UNREGISTER: Self = Self(1);
    /// Replace the host's key.
    pub const REPLACE: Self = Self(2);
}

/// Reservation Acquire action (CDW10 bits 2:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AcquireAction(pub u8);

impl AcquireAction {
    /// Acquire a reservation.
    pub const ACQUIRE: Self = Self(0);
    /// Preempt a reservation or registrations.
    pub const PREEMPT: Self = Self(1);
    /// Preempt and abort the preempted hosts' commands.
    pub const PREEMPT_AND_ABORT: Self = Self(2);
}

/// Reservation Release action (CDW10 bits 2:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct ReleaseAction(pub u8);

impl ReleaseAction {
    /// Release the reservation.
    pub const RELEASE: Self = Self(0);
    /// Clear the reservation and every registration.
    pub const CLEAR: Self = Self(1);
}

/// CDW10 bit 3: Ignore Existing Key.
pub const IEKEY: u32 = 1 << 3;
/// Report CDW11 bit 0: Extended Data Structure (128-bit host identifiers).
pub const REPORT_EDS: u32 = 1 << 0;
/// Register, Acquire data: two keys (CRKEY and NRKEY or PRKEY).
pub const KEYS_DATA_LEN: usize = 16;
/// Release data: CRKEY.
pub const RELEASE_DATA_LEN: usize = 8;
/// Extended Reservation Status header (bytes 0..64).
pub const STATUS_EXT_HEADER_LEN: usize = 64;
/// Extended Registered Controller data structure.
pub const REGISTRANT_EXT_LEN: usize = 64;
/// Reservation Notification log page.
pub const NOTIFICATION_LOG_LEN: usize = 64;

/// One of the reservation commands, as its SQE carries it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ReservationCmd {
    /// Opcode: [`IoOpcode::RESV_REGISTER`], `RESV_ACQUIRE`, `RESV_RELEASE` or `RESV_REPORT`.
    pub opcode: IoOpcode,
    /// Namespace.
    pub nsid: u32,
    /// Command dword 10.
    pub cdw10: u32,
    /// Command dword 11 (Report: EDS).
    pub cdw11: u32,
}

impl ReservationCmd {
    /// Reservation Register with `action`; `iekey` ignores the current key.
    pub const fn register(nsid: u32, action: RegisterAction, iekey: bool) -> Self {
        let cdw10 = (action.0 as u32 & 7) | if iekey { IEKEY } else { 0 };
        Self { opcode: IoOpcode::RESV_REGISTER, nsid, cdw10, cdw11: 0 }
    }
    /// Reservation Acquire of type `rtype` with `action`.
    pub const fn acquire(nsid: u32, action: AcquireAction, rtype: ReservationType) -> Self {
        let cdw10 = (action.0 as u32 & 7) | (rtype.0 as u32) << 8;
        Self { opcode: IoOpcode::RESV_ACQUIRE, nsid, cdw10, cdw11: 0 }
    }
    /// Reservation Release of type `rtype` with `action`.
    pub const fn release(nsid: u32, action: ReleaseAction, rtype: ReservationType) -> Self {
        let cdw10 = (action.0 as u32 & 7) | (rtype.0 as u32) << 8;
        Self { opcode: IoOpcode::RESV_RELEASE, nsid, cdw10, cdw11: 0 }
    }
    /// Reservation Report of `len` bytes (a multiple of 4, at least 4) with
    /// the extended data structure.
    pub const fn report(nsid: u32, len: u32) -> Self {
        Self { opcode: IoOpcode::RESV_REPORT, nsid, cdw10: (len / 4).saturating_sub(1), cdw11: REPORT_EDS }
    }
    /// Action (CDW10 bits 2:0).
    pub const fn action(&self) -> u8 {
        (self.cdw10 & 7) as u8
    }
    /// Ignore Existing Key (CDW10 bit 3).
    pub const fn iekey(&self) -> bool {
        self.cdw10 & IEKEY != 0
    }
    /// Register: Change Persist Through Power Loss State (CDW10 bits 31:30).
    pub const fn cptpl(&self) -> u8 {
        (self.cdw10 >> 30) as u8
    }
    /// Reservation type (CDW10 bits 15:8).
    pub const fn rtype(&self) -> ReservationType {
        ReservationType((self.cdw10 >> 8) as u8)
    }
    /// Report: bytes asked for ((NUMD + 1) · 4).
    pub const fn report_len(&self) -> u64 {
        (self.cdw10 as u64 + 1) * 4
    }
    /// Report: extended data structure asked for.
    pub const fn eds(&self) -> bool {
        self.cdw11 & REPORT_EDS != 0
    }
    /// Length of the data the command carries or asks for.
    pub const fn data_len(&self) -> u64 {
        match self.opcode {
            IoOpcode::RESV_RELEASE => RELEASE_DATA_LEN as u64,
            IoOpcode::RESV_REPORT => self.report_len(),
            _ => KEYS_DATA_LEN as u64,
        }
    }
    /// Reads the fields from an SQE.
    pub fn from_sqe(sqe: &Sqe) -> Self {
        Self { opcode: IoOpcode(sqe.opcode()), nsid: sqe.nsid(), cdw10: sqe.cdw(10), cdw11: sqe.cdw(11) }
    }
    /// Builds the SQE with a transport SGL of [`Self::data_len`] bytes.
    pub fn to_sqe(&self, cid: u16) -> Sqe {
        let mut s = Sqe::new(self.opcode.0);
        s.set_cid(cid)
            .set_nsid(self.nsid)
            .set_sgl(SglDescriptor::transport(self.data_len() as u32))
            .set_cdw(10, self.cdw10)
            .set_cdw(11, self.cdw11);
        s
    }
}

/// Register and Acquire data: the current key, then the new key (Register)
/// or the key to preempt (Acquire). Release data is the first key alone.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ReservationKeys {
    /// CRKEY: the host's current reservation key.
    pub current: u64,
    /// NRKEY (Register) or PRKEY (Acquire).
    pub other: u64,
}

impl ReservationKeys {
    /// Decodes Register or Acquire data (16 bytes).
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, KEYS_DATA_LEN, "reservation keys")?;
        Ok(Self { current: u64_at(b, 0), other: u64_at(b, 8) })
    }
    /// Decodes Release data (8 bytes).
    pub fn decode_release(b: &[u8]) -> Result<Self, SpecError> {
        need(b, RELEASE_DATA_LEN, "reservation release key")?;
        Ok(Self { current: u64_at(b, 0), other: 0 })
    }
    /// Encodes 16 bytes (Release sends the first 8).
    pub fn encode(&self) -> [u8; KEYS_DATA_LEN] {
        let mut b = [0u8; KEYS_DATA_LEN];
        put_u64(&mut b, 0, self.current);
        put_u64(&mut b, 8, self.other);
        b
    }
}

/// One registrant in the extended Reservation Status data structure.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Registrant {
    /// Controller ID (FFFFh: dynamic controller model, as nvmet reports).
    pub cntlid: u16,
    /// RCSTS bit 0: this host holds the reservation.
    pub holds: bool,
    /// Reservation key.
    pub rkey: u64,
    /// 128-bit host identifier.
    pub hostid: [u8; 16],
}

/// Extended Reservation Status data structure (Report with EDS = 1): 64-byte
/// header, then 64 bytes per registrant.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct ReservationStatus {
    /// Generation: counts Register, Preempt and Clear actions.
    pub generation: u32,
    /// Reservation type held ([`ReservationType::NONE`] when none).
    pub rtype: ReservationType,
    /// Number of registrants (REGCTL), which may exceed `registrants.len()`
    /// when the report was too short to hold them all.
    pub regctl: u16,
    /// PTPLS: persist through power loss state.
    pub ptpls: bool,
    /// Registrants that fit in the report.
    pub registrants: Vec<Registrant>,
}

impl ReservationStatus {
    /// Encodes into exactly `len` bytes: the header, then as many
    /// registrants as fit whole (REGCTL still counts them all), zero padded.
    pub fn encode(&self, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len.max(STATUS_EXT_HEADER_LEN)];
        put_u32(&mut b, 0, self.generation);
        b[4] = self.rtype.0;
        put_u16(&mut b, 5, self.regctl);
        b[9] = self.ptpls as u8;
        for (i, r) in self.registrants.iter().enumerate() {
            let off = STATUS_EXT_HEADER_LEN + i * REGISTRANT_EXT_LEN;
            if off + REGISTRANT_EXT_LEN > len {
                break;
            }
            put_u16(&mut b, off, r.cntlid);
            b[off + 2] = r.holds as u8;
            put_u64(&mut b, off + 8, r.rkey);
            b[off + 16..off + 32].copy_from_slice(&r.hostid);
        }
        b.truncate(len);
        b
    }
    /// Decodes a report: the header and the registrants it holds whole.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, STATUS_EXT_HEADER_LEN, "reservation status")?;
        let regctl = u16_at(b, 5);
        let fit = (b.len() - STATUS_EXT_HEADER_LEN) / REGISTRANT_EXT_LEN;
        let registrants = (0..fit.min(regctl as usize))
            .map(|i| {
                let off = STATUS_EXT_HEADER_LEN + i * REGISTRANT_EXT_LEN;
                Registrant {
                    cntlid: u16_at(b, off),
                    holds: b[off + 2] & 1 != 0,
                    rkey: u64_at(b, off + 8),
                    hostid: arr(b, off + 16),
                }
            })
            .collect();
        Ok(Self {
            generation: u32_at(b, 0),
            rtype: ReservationType(b[4]),
            regctl,
            ptpls: b[9] & 1 != 0,
            registrants,
        })
    }
}

/// Reservation Notification log page type (byte 8).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct NotificationType(pub u8);

impl NotificationType {
    /// Empty log page.
    pub const EMPTY: Self = Self(0);
    /// This host's registration was preempted.
    pub const REGISTRATION_PREEMPTED: Self = Self(1);
    /// The reservation was released.
    pub const RESERVATION_RELEASED: Self = Self(2);
    /// The reservation was preempted.
    pub const RESERVATION_PREEMPTED: Self = Self(3);

    /// The Reservation Notification Mask bit (Features 82h CDW11) that masks this type.
    pub const fn mask_bit(self) -> u32 {
        1 << self.0
    }
}

/// Reservation Notification Mask bits a controller accepts (Features 82h):
/// registration preempted, reservation released, reservation preempted.
pub const NOTIFY_MASK_ALL: u32 = (1 << 1) | (1 << 2) | (1 << 3);

/// Reservation Notification log page (LID 80h): one notification per read.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ReservationNotification {
    /// Log page count: increments per notification, skipping 0.
    pub count: u64,
    /// Notification type.
    pub kind: NotificationType,
    /// Number of available log pages after this one (saturating at 255).
    pub available: u8,
    /// Namespace.
    pub nsid: u32,
}

impl ReservationNotification {
    /// Encodes the 64-byte page.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; NOTIFICATION_LOG_LEN];
        put_u64(&mut b, 0, self.count);
        b[8] = self.kind.0;
        b[9] = self.available;
        put_u32(&mut b, 12, self.nsid);
        b
    }
    /// Decodes the 64-byte page.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, 16, "reservation notification")?;
        Ok(Self { count: u64_at(b, 0), kind: NotificationType(b[8]), available: b[9], nsid: u32_at(b, 12) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn command_fields() {
        let c =
            ReservationCmd::acquire(3, AcquireAction::PREEMPT, ReservationType::EXCLUSIVE_ACCESS_ALL_REGS);
        let s = c.to_sqe(9);
        assert_eq!(s.opcode(), 0x11);
        assert_eq!(s.nsid(), 3);
        assert_eq!(s.cdw(10), 0x0601);
        assert_eq!(s.sgl().length, 16);
        assert_eq!(ReservationCmd::from_sqe(&s), c);
        let r = ReservationCmd::register(1, RegisterAction::REPLACE, true);
        assert_eq!((r.action(), r.iekey(), r.to_sqe(0).cdw(10)), (2, true, 0x0A));
        let rel = ReservationCmd::release(1, ReleaseAction::CLEAR, ReservationType(0));
        assert_eq!(rel.to_sqe(0).sgl().length, 8);
        // Report: NUMD is 0's based dwords; EDS in CDW11 bit 0.
        let rep = ReservationCmd::report(1, 4096);
        let s = rep.to_sqe(0);
        assert_eq!((s.opcode(), s.cdw(10), s.cdw(11), s.sgl().length), (0x0E, 1023, 1, 4096));
        assert_eq!(ReservationType::WRITE_EXCLUSIVE.rescap_bit(), 1 << 1);
        assert_eq!(ReservationType(7).rescap_bit(), 0);
    }

    #[test]
    fn status_layout_matches_linux() {
        // struct nvme_reservation_status_ext: gen 0..4, rtype 4, regctl 5..7,
        // ptpls 9, regctl_eds at 64: cntlid 0..2, rcsts 2, rkey 8..16, hostid 16..32.
        let s = ReservationStatus {
            generation: 7,
            rtype: ReservationType::WRITE_EXCLUSIVE,
            regctl: 2,
            ptpls: false,
            registrants: vec![
                Registrant { cntlid: 0xFFFF, holds: true, rkey: 0x1122, hostid: [0xAB; 16] },
                Registrant { cntlid: 0xFFFF, holds: false, rkey: 5, hostid: [0xCD; 16] },
            ],
        };
        let b = s.encode(192);
        assert_eq!(b.len(), 192);
        assert_eq!(&b[0..10], &[7, 0, 0, 0, 1, 2, 0, 0, 0, 0]);
        assert_eq!(&b[64..67], &[0xFF, 0xFF, 1]);
        assert_eq!(u64_at(&b, 72), 0x1122);
        assert_eq!(&b[80..96], &[0xAB; 16]);
        assert_eq!(ReservationStatus::decode(&b).unwrap(), s);
        // Too short for the second registrant: REGCTL still says 2.
        let short = s.encode(128);
        let d = ReservationStatus::decode(&short).unwrap();
        assert_eq!((d.regctl, d.registrants.len()), (2, 1));
    }

    #[test]
    fn notification_layout() {
        let n = ReservationNotification {
            count: 3,
            kind: NotificationType::RESERVATION_RELEASED,
            available: 1,
            nsid: 2,
        };
        let b = n.encode();
        assert_eq!(b.len(), 64);
        assert_eq!(&b[..16], &[3, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 2, 0, 0, 0]);
        assert_eq!(ReservationNotification::decode(&b).unwrap(), n);
    }

    proptest! {
        #[test]
        fn status_decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = ReservationStatus::decode(&b);
            let _ = ReservationNotification::decode(&b);
            let _ = ReservationKeys::decode(&b);
        }
    }
}
