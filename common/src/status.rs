//! NVMe completion status (NVMe Base 2.0 §4.2.3, "Status Field").
//!
//! [`Status`] holds the 15 status bits *without* the phase tag, in the same
//! form the Linux kernel uses internally (`NVME_SC_*`): bits 7:0 SC, 10:8 SCT,
//! 12:11 CRD, 13 M, 14 DNR. On the wire the CQE status field is `status << 1 |
//! P`. Unknown values survive decode unchanged.

use core::fmt;

/// Status Code Type (SCT, 3 bits).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct StatusCodeType(pub u8);

impl StatusCodeType {
    /// Generic Command Status.
    pub const GENERIC: Self = Self(0);
    /// Command Specific Status.
    pub const COMMAND_SPECIFIC: Self = Self(1);
    /// Media and Data Integrity Errors.
    pub const MEDIA: Self = Self(2);
    /// Path Related Status.
    pub const PATH: Self = Self(3);
    /// Vendor Specific.
    pub const VENDOR: Self = Self(7);
}

/// A completion status: SC, SCT, CRD, M and DNR bits (no phase tag).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Status(pub u16);

const fn st(sct: u16, sc: u16) -> Status {
    Status((sct << 8) | sc)
}

impl Status {
    /// Successful completion.
    pub const SUCCESS: Self = st(0, 0x00);
    /// Invalid Command Opcode.
    pub const INVALID_OPCODE: Self = st(0, 0x01);
    /// Invalid Field in Command.
    pub const INVALID_FIELD: Self = st(0, 0x02);
    /// Command ID Conflict.
    pub const CMDID_CONFLICT: Self = st(0, 0x03);
    /// Data Transfer Error.
    pub const DATA_XFER_ERROR: Self = st(0, 0x04);
    /// Commands Aborted due to Power Loss Notification.
    pub const POWER_LOSS: Self = st(0, 0x05);
    /// Internal Error.
    pub const INTERNAL: Self = st(0, 0x06);
    /// Command Abort Requested.
    pub const ABORT_REQ: Self = st(0, 0x07);
    /// Command Aborted due to SQ Deletion.
    pub const ABORT_QUEUE: Self = st(0, 0x08);
    /// Command Aborted due to Failed Fused Command: the other command of its
    /// fused operation failed (NVMe Base 2.0 §3.4.2).
    pub const ABORTED_FAILED_FUSED: Self = st(0, 0x09);
    /// Command Aborted due to Missing Fused Command: the command next to a
    /// fused one in the submission queue was not its partner.
    pub const ABORTED_MISSING_FUSED: Self = st(0, 0x0A);
    /// Invalid Namespace or Format.
    pub const INVALID_NS: Self = st(0, 0x0B);
    /// Command Sequence Error.
    pub const CMD_SEQ_ERROR: Self = st(0, 0x0C);
    /// Invalid SGL Last Segment Descriptor.
    pub const SGL_INVALID_LAST: Self = st(0, 0x0D);
    /// Invalid Number of SGL Descriptors.
    pub const SGL_INVALID_COUNT: Self = st(0, 0x0E);
    /// Data SGL Length Invalid.
    pub const SGL_INVALID_DATA: Self = st(0, 0x0F);
    /// SGL Descriptor Type Invalid.
    pub const SGL_INVALID_TYPE: Self = st(0, 0x11);
    /// SGL Offset Invalid.
    pub const SGL_INVALID_OFFSET: Self = st(0, 0x16);
    /// SGL Descriptor Subtype Invalid.
    pub const SGL_INVALID_SUBTYPE: Self = st(0, 0x17);
    /// Host Identifier Inconsistent Format.
    pub const HOST_ID_INCONSIST: Self = st(0, 0x18);
    /// Keep Alive Timer Expired (19h, Linux `NVME_SC_KA_TIMEOUT_EXPIRED`).
    pub const KEEP_ALIVE_EXPIRED: Self = st(0, 0x19);
    /// Keep Alive Timeout Invalid (1Ah, Linux `NVME_SC_KA_TIMEOUT_INVALID`, which
    /// nvmet's `nvmet_execute_keep_alive` returns while KATO is 0).
    pub const KAT_INVALID: Self = st(0, 0x1A);
    /// Transient Transport Error.
    pub const TRANSIENT_TRANSPORT: Self = st(0, 0x22);
    /// Command Interrupted.
    pub const CMD_INTERRUPTED: Self = st(0, 0x21);
    /// Namespace is Write Protected.
    pub const NS_WRITE_PROTECTED: Self = st(0, 0x20);
    /// LBA Out of Range (NVM command set).
    pub const LBA_RANGE: Self = st(0, 0x80);
    /// Capacity Exceeded.
    pub const CAP_EXCEEDED: Self = st(0, 0x81);
    /// Namespace Not Ready.
    pub const NS_NOT_READY: Self = st(0, 0x82);
    /// Reservation Conflict.
    pub const RESERVATION_CONFLICT: Self = st(0, 0x83);

    /// Completion Queue Invalid.
    pub const CQ_INVALID: Self = st(1, 0x00);
    /// Invalid Queue Identifier.
    pub const QID_INVALID: Self = st(1, 0x01);
    /// Invalid Queue Size.
    pub const QUEUE_SIZE: Self = st(1, 0x02);
    /// Abort Command Limit Exceeded.
    pub const ABORT_LIMIT: Self = st(1, 0x03);
    /// Asynchronous Event Request Limit Exceeded.
    pub const ASYNC_LIMIT: Self = st(1, 0x05);
    /// Invalid Log Page.
    pub const INVALID_LOG_PAGE: Self = st(1, 0x09);
    /// Feature Identifier Not Saveable.
    pub const FEATURE_NOT_SAVEABLE: Self = st(1, 0x0D);
    /// Feature Not Changeable.
    pub const FEATURE_NOT_CHANGEABLE: Self = st(1, 0x0E);
    /// Feature Not Namespace Specific.
    pub const FEATURE_NOT_PER_NS: Self = st(1, 0x0F);
    /// Conflicting Attributes (NVM: e.g. DSM/Write Zeroes).
    pub const CONFLICTING_ATTRIBUTES: Self = st(1, 0x80);
    /// Command Size Limits Exceeded (NVM: a Copy past MSSRL, MCL or MSRC).
    pub const CMD_SIZE_LIMIT: Self = st(1, 0x83);
    /// Fabrics Connect: Incompatible Format.
    pub const CONNECT_FORMAT: Self = st(1, 0x80);
    /// Fabrics Connect: Controller Busy.
    pub const CONNECT_CTRL_BUSY: Self = st(1, 0x81);
    /// Fabrics Connect: Connect Invalid Parameters.
    pub const CONNECT_INVALID_PARAM: Self = st(1, 0x82);
    /// Fabrics Connect: Connect Restart Discovery.
    pub const CONNECT_RESTART_DISC: Self = st(1, 0x83);
    /// Fabrics Connect: Connect Invalid Host.
    pub const CONNECT_INVALID_HOST: Self = st(1, 0x84);
    /// Fabrics: Invalid Queue Type.
    pub const INVALID_QUEUE_TYPE: Self = st(1, 0x85);
    /// Fabrics: Discover Restart.
    pub const DISCOVERY_RESTART: Self = st(1, 0x90);
    /// Fabrics: Authentication Required.
    pub const AUTH_REQUIRED: Self = st(1, 0x91);
    /// Zone Boundary Error: a write or Zone Append would cross the end of
    /// the zone's capacity (Zoned Namespace command set; Linux
    /// `NVME_SC_ZONE_BOUNDARY_ERROR`).
    pub const ZONE_BOUNDARY_ERROR: Self = st(1, 0xB8);
    /// Zone Is Full.
    pub const ZONE_FULL: Self = st(1, 0xB9);
    /// Zone Is Read Only.
    pub const ZONE_READ_ONLY: Self = st(1, 0xBA);
    /// Zone Is Offline.
    pub const ZONE_OFFLINE: Self = st(1, 0xBB);
    /// Zone Invalid Write: a write that does not start at the zone's write pointer.
    pub const ZONE_INVALID_WRITE: Self = st(1, 0xBC);
    /// Too Many Active Zones.
    pub const ZONE_TOO_MANY_ACTIVE: Self = st(1, 0xBD);
    /// Too Many Open Zones.
    pub const ZONE_TOO_MANY_OPEN: Self = st(1, 0xBE);
    /// Invalid Zone State Transition.
    pub const ZONE_INVALID_TRANSITION: Self = st(1, 0xBF);

    /// Write Fault.
    pub const WRITE_FAULT: Self = st(2, 0x80);
    /// Unrecovered Read Error.
    pub const READ_ERROR: Self = st(2, 0x81);
    /// Compare Failure.
    pub const COMPARE_FAILED: Self = st(2, 0x85);
    /// Access Denied.
    pub const ACCESS_DENIED: Self = st(2, 0x86);

    /// Asymmetric Access Persistent Loss (path related).
    pub const ANA_PERSISTENT_LOSS: Self = st(3, 0x01);
    /// Asymmetric Access Inaccessible (path related).
    pub const ANA_INACCESSIBLE: Self = st(3, 0x02);
    /// Asymmetric Access Transition (path related).
    pub const ANA_TRANSITION: Self = st(3, 0x03);
    /// Host Pathing Error.
    pub const HOST_PATH_ERROR: Self = st(3, 0x70);

    /// Do Not Retry bit.
    pub const DNR_BIT: u16 = 1 << 14;
    /// More bit (an error log entry is available).
    pub const MORE_BIT: u16 = 1 << 13;

    /// Builds a status from type and code.
    pub const fn new(sct: StatusCodeType, sc: u8) -> Self {
        Self(((sct.0 as u16 & 7) << 8) | sc as u16)
    }
    /// Decodes the 16-bit CQE status field (drops the phase tag).
    pub const fn from_wire(field: u16) -> Self {
        Self(field >> 1)
    }
    /// Encodes as the 16-bit CQE status field with phase tag 0.
    pub const fn to_wire(self) -> u16 {
        self.0 << 1
    }
    /// Status Code.
    pub const fn sc(self) -> u8 {
        self.0 as u8
    }
    /// Status Code Type.
    pub const fn sct(self) -> StatusCodeType {
        StatusCodeType(((self.0 >> 8) & 7) as u8)
    }
    /// Command Retry Delay index.
    pub const fn crd(self) -> u8 {
        ((self.0 >> 11) & 3) as u8
    }
    /// Do Not Retry.
    pub const fn dnr(self) -> bool {
        self.0 & Self::DNR_BIT != 0
    }
    /// More information in the error log.
    pub const fn more(self) -> bool {
        self.0 & Self::MORE_BIT != 0
    }
    /// Same status with DNR set.
    pub const fn with_dnr(self) -> Self {
        Self(self.0 | Self::DNR_BIT)
    }
    /// Same status with the M bit set.
    pub const fn with_more(self) -> Self {
        Self(self.0 | Self::MORE_BIT)
    }
    /// Same status with the M bit clear (as an error log entry records it).
    pub const fn without_more(self) -> Self {
        Self(self.0 & !Self::MORE_BIT)
    }
    /// SCT and SC only (no DNR/M/CRD), for comparisons.
    pub const fn code(self) -> Self {
        Self(self.0 & 0x7FF)
    }
    /// True for a successful completion (SCT 0, SC 0).
    pub const fn is_success(self) -> bool {
        self.0 & 0x7FF == 0
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SCT {:#x}/SC {:#04x}", self.sct().0, self.sc())?;
        if self.dnr() {
            f.write_str(" DNR")?;
        }
        if self.more() {
            f.write_str(" M")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trip_and_fields() {
        let s = Status::CONNECT_INVALID_HOST.with_dnr();
        assert_eq!(s.sct(), StatusCodeType::COMMAND_SPECIFIC);
        assert_eq!(s.sc(), 0x84);
        assert!(s.dnr());
        // Linux NVME_SC_CONNECT_INVALID_HOST | NVME_SC_DNR = 0x4184; wire = << 1.
        assert_eq!(s.0, 0x4184);
        assert_eq!(s.to_wire(), 0x8308);
        assert_eq!(Status::from_wire(0x8309), s);
        assert_eq!(s.code(), Status::CONNECT_INVALID_HOST);
        assert!(!s.is_success());
        assert!(Status::SUCCESS.is_success());
        assert_eq!(format!("{s}"), "SCT 0x1/SC 0x84 DNR");
    }
}
