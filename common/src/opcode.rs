//! Command opcodes: admin, NVM I/O and fabrics command types (NVMe Base 2.0
//! §5, NVM Command Set §3, NVMe-oF §6). Newtypes so unknown values survive.

/// Admin command opcode (SQE byte 0 on queue 0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct AdminOpcode(pub u8);

impl AdminOpcode {
    /// Delete I/O Submission Queue (not used on fabrics).
    pub const DELETE_SQ: Self = Self(0x00);
    /// Create I/O Submission Queue (not used on fabrics).
    pub const CREATE_SQ: Self = Self(0x01);
    /// Get Log Page.
    pub const GET_LOG_PAGE: Self = Self(0x02);
    /// Delete I/O Completion Queue (not used on fabrics).
    pub const DELETE_CQ: Self = Self(0x04);
    /// Create I/O Completion Queue (not used on fabrics).
    pub const CREATE_CQ: Self = Self(0x05);
    /// Identify.
    pub const IDENTIFY: Self = Self(0x06);
    /// Abort.
    pub const ABORT: Self = Self(0x08);
    /// Set Features.
    pub const SET_FEATURES: Self = Self(0x09);
    /// Get Features.
    pub const GET_FEATURES: Self = Self(0x0A);
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT: Self = Self(0x0C);
    /// Namespace Management.
    pub const NS_MGMT: Self = Self(0x0D);
    /// Firmware Commit.
    pub const FW_COMMIT: Self = Self(0x10);
    /// Firmware Image Download.
    pub const FW_DOWNLOAD: Self = Self(0x11);
    /// Device Self-test.
    pub const DEVICE_SELF_TEST: Self = Self(0x14);
    /// Namespace Attachment.
    pub const NS_ATTACH: Self = Self(0x15);
    /// Keep Alive.
    pub const KEEP_ALIVE: Self = Self(0x18);
    /// Directive Send.
    pub const DIRECTIVE_SEND: Self = Self(0x19);
    /// Directive Receive.
    pub const DIRECTIVE_RECV: Self = Self(0x1A);
    /// Doorbell Buffer Config (not used on fabrics).
    pub const DBBUF: Self = Self(0x7C);
    /// Fabrics command (FCTYPE in SQE byte 4).
    pub const FABRICS: Self = Self(0x7F);
    /// Format NVM.
    pub const FORMAT_NVM: Self = Self(0x80);
    /// Security Send.
    pub const SECURITY_SEND: Self = Self(0x81);
    /// Security Receive.
    pub const SECURITY_RECV: Self = Self(0x82);
    /// Sanitize.
    pub const SANITIZE: Self = Self(0x84);
}

/// NVM command set I/O opcode.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct IoOpcode(pub u8);

impl IoOpcode {
    /// Flush.
    pub const FLUSH: Self = Self(0x00);
    /// Write.
    pub const WRITE: Self = Self(0x01);
    /// Read.
    pub const READ: Self = Self(0x02);
    /// Write Uncorrectable.
    pub const WRITE_UNCOR: Self = Self(0x04);
    /// Compare.
    pub const COMPARE: Self = Self(0x05);
    /// Write Zeroes.
    pub const WRITE_ZEROES: Self = Self(0x08);
    /// Dataset Management.
    pub const DSM: Self = Self(0x09);
    /// Verify.
    pub const VERIFY: Self = Self(0x0C);
    /// Reservation Register.
    pub const RESV_REGISTER: Self = Self(0x0D);
    /// Reservation Report.
    pub const RESV_REPORT: Self = Self(0x0E);
    /// Reservation Acquire.
    pub const RESV_ACQUIRE: Self = Self(0x11);
    /// Reservation Release.
    pub const RESV_RELEASE: Self = Self(0x15);
    /// Copy.
    pub const COPY: Self = Self(0x19);
    /// Zone Management Send (Zoned Namespace command set).
    pub const ZONE_MGMT_SEND: Self = Self(0x79);
    /// Zone Management Receive (Zoned Namespace command set).
    pub const ZONE_MGMT_RECV: Self = Self(0x7A);
    /// Zone Append (Zoned Namespace command set).
    pub const ZONE_APPEND: Self = Self(0x7D);
    /// Fabrics command (allowed on I/O queues too).
    pub const FABRICS: Self = Self(0x7F);
}

/// Fabrics command type (SQE byte 4 when OPC is 0x7F).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct FabricsType(pub u8);

impl FabricsType {
    /// Property Set.
    pub const PROPERTY_SET: Self = Self(0x00);
    /// Connect.
    pub const CONNECT: Self = Self(0x01);
    /// Property Get.
    pub const PROPERTY_GET: Self = Self(0x04);
    /// Authentication Send.
    pub const AUTH_SEND: Self = Self(0x05);
    /// Authentication Receive.
    pub const AUTH_RECV: Self = Self(0x06);
    /// Disconnect.
    pub const DISCONNECT: Self = Self(0x08);

    /// Data direction rule used by Linux: FCTYPE bit 0 set means host to controller.
    pub const fn is_write(self) -> bool {
        self.0 & 1 != 0
    }
}

/// Data transfer direction encoded in OPC bits 1:0 (NVMe Base 2.0 Fig. 90).
pub const fn opcode_data_direction(opc: u8) -> DataDirection {
    match opc & 3 {
        0 => DataDirection::None,
        1 => DataDirection::HostToController,
        2 => DataDirection::ControllerToHost,
        _ => DataDirection::Bidirectional,
    }
}

/// Direction of a command's data transfer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DataDirection {
    /// No data.
    None,
    /// Host to controller (writes).
    HostToController,
    /// Controller to host (reads).
    ControllerToHost,
    /// Both (not used by NVMe/TCP).
    Bidirectional,
}
