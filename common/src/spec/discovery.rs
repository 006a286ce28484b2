//! Discovery log page (LID 70h): 1024-byte header and 1024-byte entries
//! (NVMe-oF 1.1 §5.3; reference §7.1; Linux `struct nvmf_disc_rsp_page_hdr`,
//! `struct nvmf_disc_rsp_page_entry`, nvmet `nvmet_format_discovery_entry`).
//!
//! Entry layout: 0 TRTYPE · 1 ADRFAM · 2 SUBTYPE · 3 TREQ · 4 PORTID · 6 CNTLID ·
//! 8 ASQSZ · 10 EFLAGS · 32 TRSVCID (32 B) · 256 SUBNQN (256 B) · 512 TRADDR
//! (256 B) · 768 TSAS (256 B). Note SUBNQN comes *before* TRADDR.
//!
//! String padding: the spec calls TRSVCID/TRADDR "ASCII strings"; nvmet copies
//! them from NUL-filled configfs buffers (NUL padding) while SPDK pads them with
//! spaces. libnvme/nvme-cli strip trailing spaces, so both parse. We encode with
//! NUL padding by default ([`Pad::Nul`], Linux behaviour) and decode either.

use super::wire::{cstr, need, padded, put_cstr, put_padded, put_u16, put_u64, u16_at, u64_at};
use super::SpecError;

/// Size of the log header and of each entry.
pub const DISC_RECORD_LEN: usize = 1024;
/// Bytes of the header that carry data (GENCTR, NUMREC, RECFMT).
pub const DISC_HEADER_MIN: usize = 18;

/// Transport type (TRTYPE).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct TrType(pub u8);

impl TrType {
    /// RDMA.
    pub const RDMA: Self = Self(1);
    /// Fibre Channel.
    pub const FC: Self = Self(2);
    /// TCP.
    pub const TCP: Self = Self(3);
    /// Intra-host (loop).
    pub const LOOP: Self = Self(254);
}

/// Address family (ADRFAM).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct AdrFam(pub u8);

impl AdrFam {
    /// IPv4.
    pub const IPV4: Self = Self(1);
    /// IPv6.
    pub const IPV6: Self = Self(2);
    /// InfiniBand.
    pub const IB: Self = Self(3);
    /// Fibre Channel.
    pub const FC: Self = Self(4);
    /// Intra-host.
    pub const LOOP: Self = Self(254);
}

/// Subsystem type (SUBTYPE).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct SubType(pub u8);

impl SubType {
    /// Referral to another discovery service.
    pub const REFERRAL: Self = Self(1);
    /// NVM subsystem.
    pub const NVME: Self = Self(2);
    /// The current discovery subsystem.
    pub const CURRENT_DISCOVERY: Self = Self(3);
}

/// TREQ bits 1:0 value: secure channel not specified.
pub const TREQ_SECURE_NOT_SPECIFIED: u8 = 0;
/// TREQ bits 1:0 value: secure channel required.
pub const TREQ_SECURE_REQUIRED: u8 = 1;
/// TREQ bits 1:0 value: secure channel not required.
pub const TREQ_SECURE_NOT_REQUIRED: u8 = 2;
/// TREQ bit 2: SQ flow control disable supported (nvmet default TREQ = 0x04).
pub const TREQ_DISABLE_SQFLOW: u8 = 1 << 2;
/// EFLAGS bit 0: duplicate returned information.
pub const EFLAGS_DUPRETINFO: u16 = 1 << 0;
/// EFLAGS bit 1: explicit persistent connection support for discovery.
pub const EFLAGS_EPCSD: u16 = 1 << 1;

/// TCP TSAS SECTYPE (TSAS byte 0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct SecType(pub u8);

impl SecType {
    /// No security.
    pub const NONE: Self = Self(0);
    /// TLS 1.2 (obsolete).
    pub const TLS12: Self = Self(1);
    /// TLS 1.3.
    pub const TLS13: Self = Self(2);
}

/// Padding byte for TRSVCID/TRADDR on encode.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Pad {
    /// NUL padding (Linux nvmet).
    #[default]
    Nul,
    /// Space padding (SPDK).
    Space,
}

impl Pad {
    const fn byte(self) -> u8 {
        match self {
            Self::Nul => 0,
            Self::Space => b' ',
        }
    }
}

/// Discovery log page header fields.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct DiscoveryLogHeader {
    /// Generation counter (changes whenever the log changes).
    pub genctr: u64,
    /// Number of records.
    pub numrec: u64,
    /// Record format (0).
    pub recfmt: u16,
}

impl DiscoveryLogHeader {
    /// Decodes from at least 18 bytes (nvme-cli reads the first 20).
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, DISC_HEADER_MIN, "discovery log header")?;
        Ok(Self { genctr: u64_at(b, 0), numrec: u64_at(b, 8), recfmt: u16_at(b, 16) })
    }
    /// Encodes to 1024 bytes.
    pub fn encode(&self) -> [u8; DISC_RECORD_LEN] {
        let mut b = [0u8; DISC_RECORD_LEN];
        put_u64(&mut b, 0, self.genctr);
        put_u64(&mut b, 8, self.numrec);
        put_u16(&mut b, 16, self.recfmt);
        b
    }
}

/// One discovery log entry (1024 bytes).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DiscoveryLogEntry {
    /// Transport type.
    pub trtype: TrType,
    /// Address family.
    pub adrfam: AdrFam,
    /// Subsystem type.
    pub subtype: SubType,
    /// Transport requirements.
    pub treq: u8,
    /// Port ID.
    pub portid: u16,
    /// Controller ID (0xFFFF: dynamic controller model).
    pub cntlid: u16,
    /// Admin max SQ size.
    pub asqsz: u16,
    /// Entry flags.
    pub eflags: u16,
    /// Transport service ID (TCP port as decimal ASCII, 32 bytes).
    pub trsvcid: String,
    /// Subsystem NQN (256 bytes, NUL-terminated).
    pub subnqn: String,
    /// Transport address (IP address as ASCII, 256 bytes).
    pub traddr: String,
    /// Transport specific address subtype (for TCP byte 0 is SECTYPE).
    pub tsas: [u8; 256],
}

impl Default for DiscoveryLogEntry {
    fn default() -> Self {
        Self {
            trtype: TrType::default(),
            adrfam: AdrFam::default(),
            subtype: SubType::default(),
            treq: 0,
            portid: 0,
            cntlid: 0,
            asqsz: 0,
            eflags: 0,
            trsvcid: String::new(),
            subnqn: String::new(),
            traddr: String::new(),
            tsas: [0; 256],
        }
    }
}

impl DiscoveryLogEntry {
    /// A TCP entry as nvmet builds it: TREQ 0x04 (flow control disable supported),
    /// CNTLID 0xFFFF, ASQSZ 32, SECTYPE none.
    pub fn tcp(
        subtype: SubType,
        subnqn: &str,
        adrfam: AdrFam,
        traddr: &str,
        trsvcid: &str,
        portid: u16,
    ) -> Self {
        Self {
            trtype: TrType::TCP,
            adrfam,
            subtype,
            treq: TREQ_DISABLE_SQFLOW,
            portid,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: 0,
            trsvcid: trsvcid.into(),
            subnqn: subnqn.into(),
            traddr: traddr.into(),
            tsas: [0; 256],
        }
    }
    /// TCP SECTYPE (TSAS byte 0).
    pub const fn tcp_sectype(&self) -> SecType {
        SecType(self.tsas[0])
    }
    /// Sets the TCP SECTYPE (TSAS byte 0).
    pub fn set_tcp_sectype(&mut self, s: SecType) -> &mut Self {
        self.tsas[0] = s.0;
        self
    }

    /// Decodes from at least 1024 bytes. TRSVCID/TRADDR lose trailing spaces and
    /// NULs; SUBNQN stops at its first NUL.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        need(b, DISC_RECORD_LEN, "discovery log entry")?;
        Ok(Self {
            trtype: TrType(b[0]),
            adrfam: AdrFam(b[1]),
            subtype: SubType(b[2]),
            treq: b[3],
            portid: u16_at(b, 4),
            cntlid: u16_at(b, 6),
            asqsz: u16_at(b, 8),
            eflags: u16_at(b, 10),
            trsvcid: padded(b, 32, 32),
            subnqn: cstr(b, 256, 256)?,
            traddr: padded(b, 512, 256),
            tsas: b[768..1024].try_into().unwrap(),
        })
    }
    /// Encodes to 1024 bytes with NUL padding (Linux nvmet).
    pub fn encode(&self) -> [u8; DISC_RECORD_LEN] {
        self.encode_with(Pad::Nul)
    }
    /// Encodes to 1024 bytes with the given TRSVCID/TRADDR padding.
    pub fn encode_with(&self, pad: Pad) -> [u8; DISC_RECORD_LEN] {
        let mut b = [0u8; DISC_RECORD_LEN];
        b[0] = self.trtype.0;
        b[1] = self.adrfam.0;
        b[2] = self.subtype.0;
        b[3] = self.treq;
        put_u16(&mut b, 4, self.portid);
        put_u16(&mut b, 6, self.cntlid);
        put_u16(&mut b, 8, self.asqsz);
        put_u16(&mut b, 10, self.eflags);
        put_padded(&mut b, 32, 32, &self.trsvcid, pad.byte());
        put_cstr(&mut b, 256, 256, &self.subnqn);
        put_padded(&mut b, 512, 256, &self.traddr, pad.byte());
        b[768..].copy_from_slice(&self.tsas);
        b
    }
}

/// A whole discovery log page.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct DiscoveryLog {
    /// Header as decoded; on encode NUMREC is replaced by `entries.len()`.
    pub header: DiscoveryLogHeader,
    /// Entries (after decode: the whole entries present in the buffer, at most NUMREC).
    pub entries: Vec<DiscoveryLogEntry>,
}

impl DiscoveryLog {
    /// A log with generation counter `genctr` and the given entries.
    pub fn new(genctr: u64, entries: Vec<DiscoveryLogEntry>) -> Self {
        Self { header: DiscoveryLogHeader { genctr, numrec: entries.len() as u64, recfmt: 0 }, entries }
    }
    /// Encodes header + entries (1024 · (1 + n) bytes), NUL padded. Serve windows with
    /// [`super::log::log_window`].
    pub fn encode(&self) -> Vec<u8> {
        self.encode_with(Pad::Nul)
    }
    /// Encodes with the given string padding.
    pub fn encode_with(&self, pad: Pad) -> Vec<u8> {
        let mut b = Vec::with_capacity(DISC_RECORD_LEN * (1 + self.entries.len()));
        let h = DiscoveryLogHeader { numrec: self.entries.len() as u64, ..self.header };
        b.extend_from_slice(&h.encode());
        for e in &self.entries {
            b.extend_from_slice(&e.encode_with(pad));
        }
        b
    }
    /// Decodes from a possibly partial buffer: the header needs 18 bytes; then
    /// min(NUMREC, whole 1024-byte records present after byte 1024) entries.
    pub fn decode(b: &[u8]) -> Result<Self, SpecError> {
        let header = DiscoveryLogHeader::decode(b)?;
        let avail = b.len().saturating_sub(DISC_RECORD_LEN) / DISC_RECORD_LEN;
        let n = usize::try_from(header.numrec).unwrap_or(usize::MAX).min(avail);
        let entries = (0..n)
            .map(|i| DiscoveryLogEntry::decode(&b[DISC_RECORD_LEN * (1 + i)..]))
            .collect::<Result<_, _>>()?;
        Ok(Self { header, entries })
    }
    /// Whether every record NUMREC announces was decoded.
    pub fn is_complete(&self) -> bool {
        self.entries.len() as u64 == self.header.numrec
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn entry_offsets() {
        let mut e = DiscoveryLogEntry::tcp(
            SubType::NVME,
            "nqn.2024-01.io.example:sub1",
            AdrFam::IPV4,
            "192.168.1.10",
            "4420",
            1,
        );
        e.set_tcp_sectype(SecType::TLS13);
        let b = e.encode();
        assert_eq!(&b[0..12], &[3, 1, 2, 4, 1, 0, 0xFF, 0xFF, 32, 0, 0, 0]);
        assert_eq!(&b[32..36], b"4420");
        assert!(b[36..64].iter().all(|&x| x == 0));
        assert_eq!(&b[256..256 + 27], b"nqn.2024-01.io.example:sub1");
        assert_eq!(b[256 + 27], 0);
        assert_eq!(&b[512..524], b"192.168.1.10");
        assert!(b[524..768].iter().all(|&x| x == 0));
        assert_eq!(b[768], 2);
        assert_eq!(DiscoveryLogEntry::decode(&b).unwrap(), e);
        let s = e.encode_with(Pad::Space);
        assert_eq!(&s[32..40], b"4420    ");
        assert_eq!(&s[524..528], b"    ");
        assert_eq!(DiscoveryLogEntry::decode(&s).unwrap(), e);
    }

    #[test]
    fn log_layout_and_partial() {
        let e = DiscoveryLogEntry::tcp(
            SubType::CURRENT_DISCOVERY,
            crate::spec::DISCOVERY_NQN,
            AdrFam::IPV6,
            "::1",
            "8009",
            2,
        );
        let log = DiscoveryLog::new(7, vec![e.clone(), e.clone()]);
        let b = log.encode();
        assert_eq!(b.len(), 3 * 1024);
        assert_eq!(&b[0..18], &[7, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b[1024 + 2], 3);
        assert_eq!(DiscoveryLog::decode(&b).unwrap(), log);
        let h = DiscoveryLog::decode(&b[..20]).unwrap();
        assert_eq!(h.header.numrec, 2);
        assert!(h.entries.is_empty() && !h.is_complete());
        assert_eq!(DiscoveryLog::decode(&b[..2048 + 100]).unwrap().entries.len(), 1);
        assert!(DiscoveryLog::decode(&b[..17]).is_err());
    }

    fn arb_entry() -> impl Strategy<Value = DiscoveryLogEntry> {
        (
            any::<(u8, u8, u8, u8, u16, u16, u16, u16)>(),
            "([!-~]([ -~]{0,30}[!-~])?)?",
            "[ -~]{0,255}",
            "([!-~]([ -~]{0,100}[!-~])?)?",
            proptest::collection::vec(any::<u8>(), 256),
        )
            .prop_map(|(a, trsvcid, subnqn, traddr, tsas)| DiscoveryLogEntry {
                trtype: TrType(a.0),
                adrfam: AdrFam(a.1),
                subtype: SubType(a.2),
                treq: a.3,
                portid: a.4,
                cntlid: a.5,
                asqsz: a.6,
                eflags: a.7,
                trsvcid,
                subnqn,
                traddr,
                tsas: tsas.try_into().unwrap(),
            })
    }

    proptest! {
        #[test]
        fn entry_roundtrip(e in arb_entry(), space in any::<bool>()) {
            let pad = if space { Pad::Space } else { Pad::Nul };
            prop_assert_eq!(DiscoveryLogEntry::decode(&e.encode_with(pad)).unwrap(), e);
        }

        /// A hostile or broken target's bytes: an error or a bounded log, never a panic.
        #[test]
        fn garbage_log_decodes_without_panic(
            mut b in proptest::collection::vec(any::<u8>(), 0..4200),
            numrec in any::<u64>(),
        ) {
            if b.len() >= 16 {
                b[8..16].copy_from_slice(&numrec.to_le_bytes());
            }
            if let Ok(log) = DiscoveryLog::decode(&b) {
                prop_assert!(log.entries.len() as u64 <= log.header.numrec);
                prop_assert!(log.entries.len() <= b.len().saturating_sub(DISC_RECORD_LEN) / DISC_RECORD_LEN);
            } else {
                prop_assert!(b.len() < DISC_HEADER_MIN || b.len() > DISC_RECORD_LEN);
            }
        }

        #[test]
        fn log_roundtrip(genctr in any::<u64>(), recfmt in any::<u16>(), entries in proptest::collection::vec(arb_entry(), 0..5)) {
            let mut log = DiscoveryLog::new(genctr, entries);
            log.header.recfmt = recfmt;
            prop_assert_eq!(DiscoveryLog::decode(&log.encode()).unwrap(), log);
        }
    }
}
