//! Submission Queue Entry (64 bytes, NVMe Base 2.0 §4.2) and the SGL data
//! block descriptors NVMe/TCP uses (NVMe/TCP 1.0 §3.3 and reference §3.1–3.2).
//!
//! The SQE is kept as its 64 wire bytes with typed accessors, so every field a
//! peer sends (including reserved and unknown ones) survives a round trip and
//! the hot path copies 64 bytes instead of parsing into a wide struct.

/// Size of an SQE on the wire.
pub const SQE_LEN: usize = 64;

/// PSDT = 01b (SGL for data, MPTR a single buffer): SQE FLAGS value used on fabrics.
pub const SQE_FLAGS_PSDT_SGL: u8 = 0x40;
/// FUSE 01b: the first command of a fused operation (NVMe Base 2.0 §3.4.2).
pub const FUSE_FIRST: u8 = 1;
/// FUSE 10b: the second command of a fused operation.
pub const FUSE_SECOND: u8 = 2;

/// SGL descriptor identifier byte (type in bits 7:4, subtype in bits 3:0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct SglId(pub u8);

impl SglId {
    /// Data Block / Offset: in-capsule data, address is an offset into the capsule data.
    pub const DATA_BLOCK_OFFSET: Self = Self(0x01);
    /// Transport SGL Data Block / transport specific: data moved by R2T/H2CData or C2HData.
    pub const TRANSPORT_DATA_BLOCK: Self = Self(0x5A);
    /// Keyed Data Block (RDMA only).
    pub const KEYED_DATA_BLOCK: Self = Self(0x40);

    /// Descriptor type (bits 7:4).
    pub const fn sgl_type(self) -> u8 {
        self.0 >> 4
    }
    /// Descriptor subtype (bits 3:0).
    pub const fn subtype(self) -> u8 {
        self.0 & 0xF
    }
}

/// A 16-byte SGL descriptor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct SglDescriptor {
    /// Address (offset for in-capsule data, 0 for the transport descriptor).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Identifier byte.
    pub id: SglId,
}

impl SglDescriptor {
    /// Descriptor for `len` bytes of in-capsule data at offset 0.
    pub const fn in_capsule(len: u32) -> Self {
        Self { addr: 0, length: len, id: SglId::DATA_BLOCK_OFFSET }
    }
    /// Descriptor for `len` bytes moved by R2T/H2CData or C2HData (Linux uses length 0 for no data).
    pub const fn transport(len: u32) -> Self {
        Self { addr: 0, length: len, id: SglId::TRANSPORT_DATA_BLOCK }
    }
    /// Decodes 16 bytes.
    pub fn decode(b: &[u8; 16]) -> Self {
        Self {
            addr: u64::from_le_bytes(b[0..8].try_into().unwrap()),
            length: u32::from_le_bytes(b[8..12].try_into().unwrap()),
            id: SglId(b[15]),
        }
    }
    /// Encodes to 16 bytes (reserved bytes zero).
    pub fn encode(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..12].copy_from_slice(&self.length.to_le_bytes());
        b[15] = self.id.0;
        b
    }
}

/// A 64-byte submission queue entry.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sqe(pub [u8; SQE_LEN]);

impl Default for Sqe {
    fn default() -> Self {
        Self([0; SQE_LEN])
    }
}

impl core::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sqe")
            .field("opc", &format_args!("{:#04x}", self.opcode()))
            .field("cid", &self.cid())
            .field("nsid", &self.nsid())
            .field("sgl", &self.sgl())
            .field("cdw10", &format_args!("{:#x}", self.cdw(10)))
            .field("cdw11", &format_args!("{:#x}", self.cdw(11)))
            .field("cdw12", &format_args!("{:#x}", self.cdw(12)))
            .finish()
    }
}

macro_rules! le_field {
    ($get:ident, $set:ident, $ty:ty, $off:expr, $doc:expr) => {
        #[doc = concat!("Reads ", $doc, ".")]
        pub fn $get(&self) -> $ty {
            <$ty>::from_le_bytes(self.0[$off..$off + core::mem::size_of::<$ty>()].try_into().unwrap())
        }
        #[doc = concat!("Writes ", $doc, ".")]
        pub fn $set(&mut self, v: $ty) -> &mut Self {
            self.0[$off..$off + core::mem::size_of::<$ty>()].copy_from_slice(&v.to_le_bytes());
            self
        }
    };
}

impl Sqe {
    /// A zeroed SQE with the given opcode and PSDT = SGL (what every fabrics host sends).
    pub fn new(opcode: u8) -> Self {
        let mut s = Self::default();
        s.0[0] = opcode;
        s.0[1] = SQE_FLAGS_PSDT_SGL;
        s
    }
    /// From the 64 wire bytes. Panics if `b` is shorter than 64 bytes.
    pub fn from_slice(b: &[u8]) -> Self {
        Self(b[..SQE_LEN].try_into().unwrap())
    }
    /// Opcode (byte 0).
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }
    /// Sets the opcode.
    pub fn set_opcode(&mut self, v: u8) -> &mut Self {
        self.0[0] = v;
        self
    }
    /// FLAGS byte (FUSE bits 1:0, PSDT bits 7:6).
    pub fn flags(&self) -> u8 {
        self.0[1]
    }
    /// Sets the FLAGS byte.
    pub fn set_flags(&mut self, v: u8) -> &mut Self {
        self.0[1] = v;
        self
    }
    /// FUSE (bits 1:0 of FLAGS).
    pub fn fuse(&self) -> u8 {
        self.0[1] & 3
    }
    /// Sets FUSE ([`FUSE_FIRST`], [`FUSE_SECOND`], 0: not fused).
    pub fn set_fuse(&mut self, v: u8) -> &mut Self {
        self.0[1] = (self.0[1] & !3) | (v & 3);
        self
    }
    /// PSDT (bits 7:6 of FLAGS); 1 = SGL.
    pub fn psdt(&self) -> u8 {
        self.0[1] >> 6
    }
    le_field!(cid, set_cid, u16, 2, "the command identifier (bytes 2-3)");
    le_field!(nsid, set_nsid, u32, 4, "the namespace identifier (bytes 4-7)");
    le_field!(mptr, set_mptr, u64, 16, "the metadata pointer (bytes 16-23)");
    /// Fabrics command type (byte 4; meaningful when the opcode is 0x7F).
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }
    /// Sets the fabrics command type.
    pub fn set_fctype(&mut self, v: u8) -> &mut Self {
        self.0[4] = v;
        self
    }
    /// Command dword `n` (0..=15) read little-endian from byte `4n`.
    pub fn cdw(&self, n: usize) -> u32 {
        u32::from_le_bytes(self.0[n * 4..n * 4 + 4].try_into().unwrap())
    }
    /// Writes command dword `n` (0..=15).
    pub fn set_cdw(&mut self, n: usize, v: u32) -> &mut Self {
        self.0[n * 4..n * 4 + 4].copy_from_slice(&v.to_le_bytes());
        self
    }
    /// The SGL descriptor (DPTR, bytes 24-39).
    pub fn sgl(&self) -> SglDescriptor {
        SglDescriptor::decode(self.0[24..40].try_into().unwrap())
    }
    /// Writes the SGL descriptor.
    pub fn set_sgl(&mut self, d: SglDescriptor) -> &mut Self {
        self.0[24..40].copy_from_slice(&d.encode());
        self
    }
    /// Byte at offset `off` (for fabrics fields such as CATTR or ATTRIB).
    pub fn byte(&self, off: usize) -> u8 {
        self.0[off]
    }
    /// Little-endian u16 at offset `off`.
    pub fn u16_at(&self, off: usize) -> u16 {
        u16::from_le_bytes(self.0[off..off + 2].try_into().unwrap())
    }
    /// Little-endian u32 at offset `off`.
    pub fn u32_at(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.0[off..off + 4].try_into().unwrap())
    }
    /// Little-endian u64 at offset `off`.
    pub fn u64_at(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.0[off..off + 8].try_into().unwrap())
    }
    /// Writes a byte at `off`.
    pub fn set_byte(&mut self, off: usize, v: u8) -> &mut Self {
        self.0[off] = v;
        self
    }
    /// Writes a little-endian u16 at `off`.
    pub fn set_u16_at(&mut self, off: usize, v: u16) -> &mut Self {
        self.0[off..off + 2].copy_from_slice(&v.to_le_bytes());
        self
    }
    /// Writes a little-endian u32 at `off`.
    pub fn set_u32_at(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_le_bytes());
        self
    }
    /// Writes a little-endian u64 at `off`.
    pub fn set_u64_at(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_le_bytes());
        self
    }

    // --- NVM I/O command fields (NVM Command Set §3.2) ---

    /// Starting LBA (CDW10-11) of Read/Write/Compare/Write Zeroes.
    pub fn slba(&self) -> u64 {
        self.u64_at(40)
    }
    /// Sets the starting LBA.
    pub fn set_slba(&mut self, v: u64) -> &mut Self {
        self.set_u64_at(40, v)
    }
    /// Number of logical blocks, 0's based (CDW12 bits 15:0).
    pub fn nlb(&self) -> u16 {
        self.u16_at(48)
    }
    /// Sets NLB (0's based).
    pub fn set_nlb(&mut self, v: u16) -> &mut Self {
        self.set_u16_at(48, v)
    }
    /// Force Unit Access (CDW12 bit 30).
    pub fn fua(&self) -> bool {
        self.cdw(12) & (1 << 30) != 0
    }
    /// Sets or clears FUA.
    pub fn set_fua(&mut self, on: bool) -> &mut Self {
        let v = (self.cdw(12) & !(1 << 30)) | ((on as u32) << 30);
        self.set_cdw(12, v)
    }
}

/// Byte offsets of Fabrics Connect / Property command fields inside the SQE
/// (NVMe-oF 1.1 §3.3, reference §4.2–4.3).
pub mod fabrics_off {
    /// Connect: RECFMT (u16).
    pub const RECFMT: usize = 40;
    /// Connect: QID (u16).
    pub const QID: usize = 42;
    /// Connect: SQSIZE (u16, 0's based).
    pub const SQSIZE: usize = 44;
    /// Connect: CATTR (u8; bit 2 disables SQ flow control).
    pub const CATTR: usize = 46;
    /// Connect: KATO (u32, milliseconds).
    pub const KATO: usize = 48;
    /// Property Get/Set: ATTRIB (u8; bits 2:0 size, 0 = 4 bytes, 1 = 8 bytes).
    pub const ATTRIB: usize = 40;
    /// Property Get/Set: OFST (u32).
    pub const OFST: usize = 44;
    /// Property Set: VALUE (u64).
    pub const VALUE: usize = 48;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_sqe_fields_from_reference_example() {
        // Reference §3.8: 4 KiB read, NSID 1, SGL 0x5A len 4096, CDW12 = 7.
        let mut s = Sqe::new(0x02);
        s.set_cid(0x1234).set_nsid(1).set_sgl(SglDescriptor::transport(4096)).set_slba(0x10).set_nlb(7);
        let b = s.0;
        assert_eq!(&b[0..8], &[0x02, 0x40, 0x34, 0x12, 1, 0, 0, 0]);
        assert_eq!(&b[24..40], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0x5A]);
        assert_eq!(&b[40..52], &[0x10, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0]);
        assert_eq!(s.cdw(12), 7);
        assert!(!s.fua());
        s.set_fua(true);
        assert_eq!(s.cdw(12), 7 | 1 << 30);
        assert_eq!(Sqe::from_slice(&s.0), s);
        assert_eq!(s.sgl().id.sgl_type(), 5);
        assert_eq!(s.sgl().id.subtype(), 0xA);
    }
}
