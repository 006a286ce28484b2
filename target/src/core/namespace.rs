//! A namespace: an NSID, its backend and its stable identifiers.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::Reservations;
use crate::backend::Backend;

/// One namespace of a subsystem.
pub struct Namespace {
    /// Namespace ID (1-based).
    pub nsid: u32,
    /// Storage.
    pub backend: Arc<dyn Backend>,
    /// NGUID (Identify Namespace bytes 104..120, descriptor type 2).
    pub nguid: [u8; 16],
    /// UUID (descriptor type 3).
    pub uuid: [u8; 16],
    /// EUI-64 (Identify Namespace bytes 120..128, descriptor type 1).
    pub eui64: [u8; 8],
    /// log2 of the block size.
    pub block_shift: u32,
    /// Exported read-only (configuration `read_only`): write protected from
    /// the start, and hosts cannot lift it (the store is opened read-only).
    pub read_only: bool,
    /// Namespace Write Protection (Set Features 84h, nvmet `ns->readonly`):
    /// commands other than Read and Flush fail with Namespace is Write Protected.
    write_protected: AtomicBool,
    /// ANA group ([`super::ana`]); a reload may move the namespace to another.
    ana_group: AtomicU32,
    /// Reservations, when enabled (configuration `reservations`, nvmet's
    /// `resv_enable`, off by default as there): without them the
    /// reservation commands are Invalid Opcode and RESCAP is 0.
    pub reservations: Option<Reservations>,
    /// Host commands and data, for the SMART / Health log.
    pub io_stats: super::io_stats::IoStats,
    /// Whether only the hosts in `hosts` see the namespace (configuration
    /// `hosts`); kept beside the list so that the I/O path of a namespace
    /// every host sees reads one flag, not the list.
    masked: AtomicBool,
    /// The hosts that see the namespace while `masked` (SPDK's
    /// `nvmf_ns_add_host` list of a namespace added `no_auto_visible`).
    hosts: ArcSwapOption<Vec<String>>,
    /// Its fused Compare and Write operations run one at a time.
    pub compare_write: Arc<super::fused::CompareWriteLock>,
    /// Its rate limits (configuration `qos_iops`, `qos_bandwidth`).
    pub qos: super::qos::Qos,
    /// Its zones, where it is exported zoned (configuration `zoned`).
    pub zones: Option<Arc<super::zoned::Zones>>,
    /// Where a clean stop saves its zone states (configuration `zone_state_file`).
    pub zone_state_file: Option<std::path::PathBuf>,
}

impl Namespace {
    /// A namespace whose identifiers derive from the subsystem NQN and the
    /// NSID only, so they survive restarts and resizes. The target binary
    /// uses [`Self::for_store`], which ties them to the store as well.
    pub fn new(subnqn: &str, nsid: u32, backend: Arc<dyn Backend>) -> Self {
        Self::derive(subnqn, nsid, None, backend)
    }

    /// A namespace whose identifiers derive from the subsystem NQN, the NSID
    /// and `store` (what holds the data: a file or device path): the same
    /// file under the same NSID keeps them across restarts, resizes and
    /// reloads; another file under that NSID, at startup or by a reload,
    /// gets others. The Linux host recognises a namespace by its identifiers
    /// alone when it reconnects or revalidates after the Namespace Attribute
    /// Changed notice (`nvme_validate_ns`, `nvme_ns_ids_equal`): unchanged
    /// ones make it keep the block device, its page cache and any
    /// filesystem mounted on it, reading and writing the new store as if it
    /// were the old one. Changed ones make it drop the namespace
    /// ("identifiers changed for nsid") and add the new one.
    pub fn for_store(subnqn: &str, nsid: u32, store: &[u8], backend: Arc<dyn Backend>) -> Self {
        Self::derive(subnqn, nsid, Some(store), backend)
    }

    /// The UUID, NGUID and EUI-64 a namespace gets where the configuration
    /// gives none ([`Self::new`], [`Self::for_store`]): derived from the
    /// subsystem NQN, the NSID and the store, so `export-nvmetcli` can carry
    /// them to nvmet and hosts keep seeing the same namespace.
    pub fn derived_ids(subnqn: &str, nsid: u32, store: Option<&[u8]>) -> ([u8; 16], [u8; 16], [u8; 8]) {
        let id = |kind: &[u8]| {
            let nsid = nsid.to_le_bytes();
            match store {
                None => super::stable_id(&[kind, subnqn.as_bytes(), &nsid]),
                Some(s) => super::stable_id(&[kind, subnqn.as_bytes(), &nsid, b"store", s]),
            }
        };
        let nguid = id(b"nguid");
        let mut uuid = id(b"uuid");
        // RFC 4122 version 4 / variant 1 bits so tools print it as a UUID.
        uuid[6] = (uuid[6] & 0x0F) | 0x40;
        uuid[8] = (uuid[8] & 0x3F) | 0x80;
        let e = id(b"eui64");
        let mut eui64 = [0u8; 8];
        eui64.copy_from_slice(&e[..8]);
        (uuid, nguid, eui64)
    }

    fn derive(subnqn: &str, nsid: u32, store: Option<&[u8]>, backend: Arc<dyn Backend>) -> Self {
        let (uuid, nguid, eui64) = Self::derived_ids(subnqn, nsid, store);
        let block_shift = backend.block_size().trailing_zeros();
        Self {
            nsid,
            backend,
            nguid,
            uuid,
            eui64,
            block_shift,
            read_only: false,
            write_protected: AtomicBool::new(false),
            ana_group: AtomicU32::new(super::ana::DEFAULT_ANA_GROUP),
            reservations: None,
            io_stats: Default::default(),
            masked: AtomicBool::new(false),
            hosts: ArcSwapOption::empty(),
            compare_write: Default::default(),
            qos: Default::default(),
            zones: None,
            zone_state_file: None,
        }
    }

    /// This namespace exported zoned (Zoned Namespace command set) with
    /// zones as `cfg` sets them: a zone whose blocks hold no data starts
    /// Empty, any other Full ([`super::zoned`]). Fails where the zone size
    /// does not suit the namespace.
    pub fn with_zones(mut self, cfg: super::zoned::ZoneConfig) -> Result<Self, String> {
        let blocks = self.backend.size() >> self.block_shift;
        let backend = self.backend.clone();
        let zones =
            super::zoned::Zones::new(cfg, blocks, self.block_shift, |off, len| backend.holds_data(off, len))?;
        self.zones = Some(Arc::new(zones));
        Ok(self)
    }

    /// Adopts the size of its store where it changed outside the target
    /// ([`Backend::revalidate`]: `truncate`, `lvextend`), as nvmet's
    /// Identify Namespace does before it reports the size
    /// (`nvmet_ns_revalidate`); whether it changed:
    /// [`super::Subsystem::revalidate_namespace`] then raises the Namespace
    /// Attribute Changed notice (`nvmet_ns_changed`). A zoned
    /// namespace keeps the size its zones were laid out for, until a
    /// restart. Blocking, but only for a `stat` or an ioctl.
    pub fn revalidate(&self) -> bool {
        if self.zones.is_some() {
            return false;
        }
        match self.backend.revalidate() {
            Ok(None) => false,
            Ok(Some((old, new))) => {
                tracing::info!(
                    nsid = self.nsid,
                    old_blocks = old >> self.block_shift,
                    new_blocks = new >> self.block_shift,
                    backend = %self.backend.describe(),
                    "namespace size follows its store, changed outside the target"
                );
                true
            }
            Err(e) => {
                tracing::warn!(nsid = self.nsid, "namespace size not revalidated: {e}");
                false
            }
        }
    }

    /// Command Set Identifier: Zoned Namespace for a zoned namespace, else NVM.
    pub fn csi(&self) -> nvmeof_common::spec::identify::Csi {
        use nvmeof_common::spec::identify::Csi;
        if self.zones.is_some() {
            Csi::ZNS
        } else {
            Csi::NVM
        }
    }

    /// This namespace with rate limits.
    pub fn with_qos(self, limits: super::qos::QosLimits) -> Self {
        self.qos.set(limits);
        self
    }

    /// This namespace, exported read-only when `read_only`: write protected
    /// for good (Set Features 84h cannot lift it).
    pub fn with_read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self.write_protected = AtomicBool::new(read_only);
        self
    }

    /// This namespace with reservations enabled (`on`) or not.
    pub fn with_reservations(mut self, on: bool) -> Self {
        self.reservations = on.then(Reservations::new);
        self
    }

    /// This namespace in ANA group `grpid` (1..=[`super::ana::MAX_ANA_GROUPS`]).
    pub fn with_ana_group(self, grpid: u32) -> Self {
        self.ana_group.store(grpid, Ordering::Relaxed);
        self
    }

    /// This namespace seen by the hosts in `hosts` only (`None`: by every
    /// host the subsystem allows).
    pub fn with_hosts(self, hosts: Option<Vec<String>>) -> Self {
        let _ = self.set_hosts(hosts);
        self
    }

    /// The hosts that see the namespace; `None`: every host.
    pub fn hosts(&self) -> Option<Vec<String>> {
        match self.masked.load(Ordering::Acquire) {
            false => None,
            true => self.hosts.load().as_deref().cloned(),
        }
    }

    /// Replaces the hosts that see the namespace (`None`: every host) and
    /// returns whether `hostnqn`'s view could have changed, as a predicate
    /// over host NQNs: the caller notifies those hosts' controllers
    /// (Namespace Attribute Changed), as SPDK's `nvmf_ns_add_host` and
    /// `nvmf_ns_remove_host` do.
    pub fn set_hosts(&self, hosts: Option<Vec<String>>) -> impl Fn(&str) -> bool {
        let old = self.hosts();
        // The list goes in before the flag that sends readers to it, and the
        // flag goes off before the list goes: a reader that sees the flag
        // finds a list (a stale one at worst, as with any command that
        // passed its checks just before a reload).
        match &hosts {
            Some(h) => {
                self.hosts.store(Some(Arc::new(h.clone())));
                self.masked.store(true, Ordering::Release);
            }
            None => {
                self.masked.store(false, Ordering::Release);
                self.hosts.store(None);
            }
        }
        move |hostnqn: &str| {
            super::subsystem::host_listed(old.as_deref(), hostnqn)
                != super::subsystem::host_listed(hosts.as_deref(), hostnqn)
        }
    }

    /// Whether the host `hostnqn` sees the namespace: in its controllers'
    /// active namespace list, Identify, logs and I/O. Others meet it as an
    /// inactive NSID (Invalid Namespace or Format; Identify Namespace all
    /// zeroes), as SPDK's `nvmf_ctrlr_ns_is_visible` makes them.
    #[inline]
    pub fn visible_to(&self, hostnqn: &str) -> bool {
        !self.masked.load(Ordering::Acquire)
            || self.hosts.load().as_ref().is_none_or(|h| h.iter().any(|a| a == hostnqn))
    }

    /// ANA group (Identify Namespace ANAGRPID).
    #[inline]
    pub fn ana_group(&self) -> u32 {
        self.ana_group.load(Ordering::Relaxed)
    }

    /// Moves the namespace to ANA group `grpid`; whether it changed. The
    /// caller raises the ANA Change notice ([`crate::core::Target::ana_changed`]).
    pub fn set_ana_group(&self, grpid: u32) -> bool {
        self.ana_group.swap(grpid, Ordering::Relaxed) != grpid
    }

    /// Size in logical blocks (of a zoned namespace: its whole zones).
    pub fn blocks(&self) -> u64 {
        let blocks = self.backend.size() >> self.block_shift;
        match &self.zones {
            None => blocks,
            Some(z) => z.blocks().min(blocks),
        }
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u32 {
        1 << self.block_shift
    }

    /// Whether the namespace is write protected.
    pub fn write_protected(&self) -> bool {
        // Relaxed: the flag orders nothing else. A write already past its
        // check when protection is set may still land, as with nvmet (which
        // checks when the command is parsed); Set Features flushes after
        // setting the flag.
        self.write_protected.load(Ordering::Relaxed)
    }

    /// Sets or clears write protection.
    pub fn set_write_protected(&self, on: bool) {
        self.write_protected.store(on, Ordering::Relaxed)
    }
}
