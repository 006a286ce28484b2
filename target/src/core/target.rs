//! The target registry: limits, ports, subsystems, controllers, discovery.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use nvmeof_common::spec::log::AnaState;
use nvmeof_common::spec::DISCOVERY_NQN;
use tracing::info;

use crate::cmd::admin::MAX_NAMESPACES;

use super::ana::MAX_ANA_GROUPS;
use super::subsystem::{host_listed, HostsChange};
use super::{Controller, PortAna, Subsystem};
use crate::config::HostKeys;

/// Controller IDs a subsystem may use unless configured otherwise (nvmet's
/// `NVME_CNTLID_MIN..=NVME_CNTLID_MAX`; FFF0h and up are reserved).
pub const CNTLID_RANGE: RangeInclusive<u16> = 1..=0xFFEF;

/// ANA log header, group descriptor and NSID sizes (Linux `struct nvme_ana_rsp_hdr`, `nvme_ana_group_desc`).
const ANA_LOG_HEADER: u32 = 16;
const ANA_LOG_PER_GROUP: u32 = 32;
const ANA_LOG_PER_NSID: u32 = 4;

/// Every limit the target enforces, advertised to hosts and logged when hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most I/O queues per controller (max QID).
    pub max_io_queues: u16,
    /// Most entries per I/O queue (CAP.MQES + 1).
    pub max_queue_entries: u32,
    /// MDTS as a power of two of 4 KiB pages (Identify Controller byte 77).
    pub mdts: u8,
    /// Most in-capsule data bytes on I/O queues (IOCCSZ = (64 + this) / 16).
    ///
    /// The default is 128 KiB, not nvmet's 16 KiB (`NVMET_TCP_DEF_INLINE_DATA_SIZE`):
    /// the Linux host and our initiator send every write up to this size inside
    /// the command capsule, which saves the R2T / H2CData exchange per write. On
    /// a 2-core loopback machine that took 128 KiB QD16 writes from ~3.5 to
    /// ~5.3 GB/s (bench/run.sh). The unsolicited data a host can have in flight
    /// stays bounded by the queue depth, as it already was with one R2T per command.
    pub in_capsule_data: u32,
    /// In-capsule data accepted on the admin queue and for fabrics commands
    /// (the Linux host uses 8 KiB there whatever IOCCSZ says).
    pub admin_in_capsule_data: u32,
    /// MAXH2CDATA advertised in ICResp.
    pub max_h2c_data: u32,
    /// Most simultaneous TCP connections on all ports.
    pub max_connections: usize,
    /// How long a new connection gets, from accept, to send ICReq and then a
    /// successful Connect (and to authenticate, when its host must); it is
    /// closed when the time is up.
    pub icreq_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_io_queues: 128,
            max_queue_entries: 1024,
            mdts: 8,
            in_capsule_data: 128 << 10,
            admin_in_capsule_data: 8192,
            max_h2c_data: 1 << 20,
            max_connections: 1024,
            icreq_timeout_ms: 10_000,
        }
    }
}

impl Limits {
    /// Largest MDTS the target honours: 2^18 × 4 KiB = 1 GiB, the cap of
    /// [`Self::max_transfer`].
    pub const MAX_MDTS: u8 = 18;

    /// Sets [`Self::in_capsule_data`]: a multiple of 16 (IOCCSZ counts 16-byte
    /// units) up to 1 MiB.
    pub fn set_in_capsule_data(&mut self, bytes: u32) -> Result<(), &'static str> {
        self.in_capsule_data = Self::check_in_capsule_data(bytes)?;
        Ok(())
    }

    /// Checks an in-capsule data size ([`Self::in_capsule_data`], a port's
    /// [`PortParams::in_capsule_data`]): a multiple of 16 up to 1 MiB.
    pub fn check_in_capsule_data(bytes: u32) -> Result<u32, &'static str> {
        if bytes > 1 << 20 || !bytes.is_multiple_of(16) {
            return Err("must be a multiple of 16 up to 1 MiB");
        }
        Ok(bytes)
    }

    /// Checks a queue size ([`Self::max_queue_entries`], a port's
    /// [`PortParams::max_queue_entries`]): 16 (nvmet's `NVMET_MIN_QUEUE_SIZE`)
    /// to 65536 (MQES is 16 bits, 0's based).
    pub fn check_queue_entries(entries: u32) -> Result<u32, &'static str> {
        if !(16..=65536).contains(&entries) {
            return Err("must be 16..=65536");
        }
        Ok(entries)
    }

    /// Largest data transfer in bytes (2^MDTS × 4 KiB; MDTS 0 = no limit, we cap at 1 GiB).
    pub fn max_transfer(&self) -> u32 {
        if self.mdts == 0 {
            1 << 30
        } else {
            4096u32 << self.mdts.min(Self::MAX_MDTS)
        }
    }

    /// ANAGRPMAX and NANAGRPID: nvmet's 128 groups, fewer where MDTS is too
    /// small for the ANA log the Linux host sizes from them (header, 32 bytes
    /// per group and 4 per namespace of MNAN) and will not read past MDTS
    /// (`nvme_mpath_init_identify`: "ANA log page size ... larger than MDTS").
    pub fn max_ana_groups(&self) -> u32 {
        let room = self.max_transfer().saturating_sub(ANA_LOG_HEADER + ANA_LOG_PER_NSID * MAX_NAMESPACES);
        (room / ANA_LOG_PER_GROUP).min(super::ana::MAX_ANA_GROUPS)
    }

    /// The ANA log's size as the Linux host computes it from Identify
    /// Controller (header, NANAGRPID groups, MNAN NSIDs): at most MDTS.
    pub fn ana_log_len(&self) -> u32 {
        ANA_LOG_HEADER + ANA_LOG_PER_GROUP * self.max_ana_groups() + ANA_LOG_PER_NSID * MAX_NAMESPACES
    }
}

/// A port's own queue limits, nvmet's `param_inline_data_size` and
/// `param_max_queue_size` (`ports/N/`): unset, the target-wide [`Limits`]
/// apply. They hold for the connections that come in on the port: an admin
/// queue's port fixes its controller's IOCCSZ, CAP.MQES and MAXCMD (nvmet's
/// `nvmet_init_cap` reads `ctrl->port`, Identify `req->port`), and each
/// queue takes in-capsule data up to its port's size (nvmet-tcp's
/// `nvmet_tcp_map_data` checks `req.port->inline_data_size`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortParams {
    /// Most in-capsule data bytes on I/O queues (IOCCSZ = (64 + this) / 16).
    pub in_capsule_data: Option<u32>,
    /// Most entries per I/O queue (CAP.MQES + 1).
    pub max_queue_entries: Option<u32>,
}

impl PortParams {
    /// In-capsule data bytes on I/O queues through this port.
    pub fn in_capsule_data(&self, limits: &Limits) -> u32 {
        self.in_capsule_data.unwrap_or(limits.in_capsule_data)
    }

    /// Entries per I/O queue through this port.
    pub fn max_queue_entries(&self, limits: &Limits) -> u32 {
        self.max_queue_entries.unwrap_or(limits.max_queue_entries)
    }
}

/// A listening port (discovery log PORTID / TRADDR / TRSVCID).
#[derive(Clone, Debug)]
pub struct Port {
    /// Port ID.
    pub id: u16,
    /// Listen address.
    pub addr: SocketAddr,
    /// ANA state of each group through this port (all optimized unless configured).
    pub ana: Arc<PortAna>,
    /// Groups the configuration names for this port: the ANA log lists them
    /// even without namespaces, as nvmet lists a port's configfs `ana_groups`.
    pub ana_groups: BTreeSet<u32>,
    /// TCP connections open through this port now (its listener counts
    /// them; the metrics report them).
    pub connections: Arc<AtomicUsize>,
    /// The port's own queue limits.
    pub params: PortParams,
}

/// Another discovery service the discovery log points hosts to (an entry of
/// SUBTYPE 1, "referral"), as nvmet's `ports/N/referrals/NAME`: a host that
/// runs `nvme connect-all` here goes on to that service and connects to what
/// it lists too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Referral {
    /// Address and port of the other discovery service (TRADDR, TRSVCID).
    pub addr: SocketAddr,
    /// PORTID its entry reports (nvmet's `portid` attribute, 0 unless set).
    pub portid: u16,
    /// The ports whose discovery log lists it (their IDs), as nvmet's
    /// referrals belong to the port whose `referrals` directory holds them;
    /// `None`: every port (SPDK's referrals are the target's).
    pub ports: Option<Vec<u16>>,
}

impl Referral {
    /// A referral listed through every port.
    pub fn new(addr: SocketAddr, portid: u16) -> Self {
        Self { addr, portid, ports: None }
    }

    /// Whether the discovery log through port `id` lists it.
    pub fn on_port(&self, id: u16) -> bool {
        self.ports.as_ref().is_none_or(|p| p.contains(&id))
    }
}

/// Which ports' entries a discovery log lists to a host, as SPDK's
/// `discovery_filter` (`nvmf_set_config`, `nvmf_create_target`): each field
/// set keeps only the ports that match, in that respect, the address the
/// host's discovery connection reached (SPDK compares each listener's
/// transport ID with the command's source `trid`). The default lists every
/// port (SPDK's `match_any`); address and service ID together list only the
/// port the host asks through, as nvmet does (`nvmet_execute_disc_get_log_page`
/// walks `req->port` only). A host then runs `nvme connect-all` only to
/// addresses it can reach, rather than also to every other network the target
/// listens on. Referrals are listed either way (SPDK's too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiscoveryFilter {
    /// `transport`: the same transport type. Every port here is TCP, so it
    /// keeps every port; it is kept so that a configuration round-trips.
    pub transport: bool,
    /// `address`: the same address (TRADDR; a wildcard port's is the
    /// address the host reached, as its entries report).
    pub address: bool,
    /// `svcid`: the same TCP port (TRSVCID).
    pub svcid: bool,
}

impl DiscoveryFilter {
    /// nvmet's discovery log: the asking port only (`address,svcid`).
    pub const NVMET: Self = Self { transport: false, address: true, svcid: true };

    /// Whether every port is listed (`match_any`).
    pub fn is_match_any(self) -> bool {
        self == Self::default()
    }
}

impl std::str::FromStr for DiscoveryFilter {
    type Err = String;

    /// SPDK's text: `match_any`, or a comma-separated list of `transport`,
    /// `address` and `svcid` (`nvmf_decode_discovery_filter`).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut f = Self::default();
        let tokens: Vec<&str> = s.split(',').map(str::trim).collect();
        for t in &tokens {
            match *t {
                "match_any" if tokens.len() == 1 => {}
                "match_any" => return Err(format!("{s:?}: match_any stands alone")),
                "transport" => f.transport = true,
                "address" => f.address = true,
                "svcid" => f.svcid = true,
                _ => {
                    return Err(format!(
                        "{s:?}: {t:?} is not match_any, transport, address or svcid (e.g. \"address,svcid\")"
                    ))
                }
            }
        }
        Ok(f)
    }
}

impl std::fmt::Display for DiscoveryFilter {
    /// SPDK's text, as its `save_config` writes it
    /// (`nvmf_subsystem_dump_discover_filter`): `match_any` or the set
    /// tokens in the order transport, address, svcid.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set: Vec<&str> =
            [(self.transport, "transport"), (self.address, "address"), (self.svcid, "svcid")]
                .into_iter()
                .filter_map(|(on, name)| on.then_some(name))
                .collect();
        if set.is_empty() {
            f.write_str("match_any")
        } else {
            f.write_str(&set.join(","))
        }
    }
}

/// What a discovery log describes, read at one GENCTR (see
/// [`Target::discovery_snapshot`]).
pub struct DiscoverySnapshot {
    /// Discovery log generation counter.
    pub genctr: u64,
    /// Listening ports.
    pub ports: Vec<Port>,
    /// Exported NVM subsystems.
    pub subsystems: Vec<Arc<Subsystem>>,
    /// Other discovery services.
    pub referrals: Vec<Referral>,
    /// The discovery subsystem's NQN.
    pub discovery_nqn: String,
    /// Which ports' entries each host sees.
    pub filter: DiscoveryFilter,
}

/// The whole target: shared by every connection.
pub struct Target {
    /// Enforced limits.
    pub limits: Limits,
    /// The discovery subsystem. Its NQN is [`Self::discovery_nqn`] (its
    /// `nqn` field keeps the one it started with).
    pub discovery: Arc<Subsystem>,
    /// The discovery subsystem's NQN now: the well-known discovery NQN, or
    /// the unique one configured ([`Self::with_discovery_nqn`],
    /// [`Self::set_discovery_nqn`]).
    discovery_nqn: RwLock<String>,
    subsystems: RwLock<BTreeMap<String, Arc<Subsystem>>>,
    ports: RwLock<Vec<Port>>,
    referrals: RwLock<Vec<Referral>>,
    discovery_filter: RwLock<DiscoveryFilter>,
    controllers: Mutex<BTreeMap<u16, Weak<Controller>>>,
    next_cntlid: Mutex<u16>,
    genctr: AtomicU64,
    /// ANA change count (nvmet's global `nvmet_ana_chgcnt`).
    ana_chgcnt: AtomicU64,
    connections: AtomicUsize,
    /// Connections refused because `max_connections` were open.
    refused: AtomicU64,
}

impl Target {
    /// An empty target with the given limits.
    pub fn new(limits: Limits) -> Arc<Self> {
        Self::with_discovery_nqn(limits, DISCOVERY_NQN)
    }

    /// An empty target whose discovery subsystem has the NQN `nqn`: a unique
    /// discovery NQN (TP 8013), as nvmet's `discovery_nqn` configfs
    /// attribute renames its discovery subsystem. Hosts reach it by that NQN
    /// or by the well-known one (`nvmet_find_get_subsys` takes both); its
    /// Identify Controller SUBNQN and its log's current discovery subsystem
    /// entry carry `nqn`.
    pub fn with_discovery_nqn(limits: Limits, nqn: &str) -> Arc<Self> {
        Arc::new(Self {
            limits,
            discovery: Arc::new(Subsystem::new(nqn, "nvmeof discovery", None, true)),
            discovery_nqn: RwLock::new(nqn.to_string()),
            subsystems: RwLock::new(BTreeMap::new()),
            ports: RwLock::new(Vec::new()),
            referrals: RwLock::new(Vec::new()),
            discovery_filter: RwLock::new(DiscoveryFilter::default()),
            controllers: Mutex::new(BTreeMap::new()),
            next_cntlid: Mutex::new(1),
            genctr: AtomicU64::new(1),
            ana_chgcnt: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// Adds a subsystem (replacing one with the same NQN, whose controllers
    /// are deleted as [`Self::remove_subsystem`] deletes them).
    ///
    /// Discovery controllers of hosts that may use it (or the one it
    /// replaces) get the discovery log change notice; others see only GENCTR
    /// move, as with nvmet's `nvmet_port_disc_changed(port, subsys)`.
    pub fn add_subsystem(&self, s: Arc<Subsystem>) {
        let mut map = self.subsystems.write().unwrap();
        let old = map.insert(s.nqn.clone(), s.clone());
        // GENCTR moves with the change, under its lock (see `discovery_snapshot`).
        self.bump_genctr();
        drop(map);
        self.notify_discovery(|host| {
            s.host_allowed(host) || old.as_ref().is_some_and(|o| o.host_allowed(host))
        });
        // The subsystem replaced is no longer exported: as when one is removed.
        if let Some(old) = old.filter(|o| !Arc::ptr_eq(o, &s)) {
            let deleted = old.delete_controllers();
            if deleted > 0 {
                info!(subnqn = %old.nqn, controllers = deleted, "subsystem replaced; the old one's controllers deleted");
            }
        }
    }

    /// Removes a subsystem; only hosts that could use it get the notice.
    /// Its controllers are deleted ([`Subsystem::delete_controllers`]).
    pub fn remove_subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        let mut map = self.subsystems.write().unwrap();
        let s = map.remove(nqn);
        if s.is_some() {
            self.bump_genctr();
        }
        drop(map);
        if let Some(s) = &s {
            self.notify_discovery(|host| s.host_allowed(host));
            // nvmet deletes a subsystem's controllers when it leaves a port
            // (nvmet_port_del_ctrls): its hosts lose the namespaces now, not
            // whenever they next disconnect, and their reconnects are refused.
            let deleted = s.delete_controllers();
            if deleted > 0 {
                info!(subnqn = %s.nqn, controllers = deleted, "subsystem removed; its controllers deleted");
            }
        }
        s
    }

    /// Replaces the allowed hosts and DH-HMAC-CHAP keys of subsystem `s`
    /// (see [`Subsystem::set_hosts`]: connected hosts keep their
    /// associations). When the allowed hosts of an exported subsystem
    /// change, GENCTR moves and the discovery controllers of the hosts that
    /// gain or lose it get the discovery log change notice, as nvmet's
    /// `allowed_hosts` link changes and `attr_allow_any_host` writes call
    /// `nvmet_subsys_disc_changed`.
    pub fn set_subsystem_hosts(
        &self,
        s: &Arc<Subsystem>,
        allowed: Option<Vec<String>>,
        keys: &BTreeMap<String, HostKeys>,
    ) -> HostsChange {
        // Under the lock the discovery log is read with (see `discovery_snapshot`).
        let map = self.subsystems.write().unwrap();
        let exported = map.get(&s.nqn).is_some_and(|m| Arc::ptr_eq(m, s));
        let before = s.allowed_hosts();
        let change = s.set_hosts(allowed, keys);
        if change.allowed && exported {
            self.bump_genctr();
        }
        drop(map);
        if change.allowed && exported {
            self.notify_discovery(|host| host_listed(before.as_deref(), host) != s.host_allowed(host));
        }
        change
    }

    /// Looks a subsystem up by NQN (the discovery subsystem by the well-known
    /// discovery NQN or its unique one).
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        if nqn == DISCOVERY_NQN || *self.discovery_nqn.read().unwrap() == nqn {
            return Some(self.discovery.clone());
        }
        self.subsystems.read().unwrap().get(nqn).cloned()
    }

    /// The NVM subsystem `nqn` (never the discovery subsystem).
    pub fn nvm_subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.subsystems.read().unwrap().get(nqn).cloned()
    }

    /// The discovery subsystem's NQN now (its Identify Controller SUBNQN and
    /// its log's current discovery subsystem entries).
    pub fn discovery_nqn(&self) -> String {
        self.discovery_nqn.read().unwrap().clone()
    }

    /// Renames the discovery subsystem (`DISCOVERY_NQN` for the well-known
    /// name only), in place as nvmet's `discovery_nqn` store does: connected
    /// discovery controllers report the new NQN in Identify, new Connects
    /// find it by it (and by the well-known one), the old one no longer
    /// reaches it. GENCTR moves (the log's own entries change); no notice
    /// is sent, as nvmet sends none. Refused when an NVM subsystem has the
    /// NQN (nvmet: "duplicate NQN"). Whether it changed.
    pub fn set_discovery_nqn(&self, nqn: &str) -> Result<bool, String> {
        // Under the subsystems' lock: no subsystem takes the NQN meanwhile,
        // and the discovery log is read with it (see `discovery_snapshot`).
        let map = self.subsystems.write().unwrap();
        if map.contains_key(nqn) {
            return Err(format!("{nqn} is an NVM subsystem's NQN"));
        }
        let mut cur = self.discovery_nqn.write().unwrap();
        if *cur == nqn {
            return Ok(false);
        }
        *cur = nqn.to_string();
        self.bump_genctr();
        drop((cur, map));
        Ok(true)
    }

    /// Looks a subsystem up by NQN as a host connecting through port
    /// `port_id` finds it (nvmet's `nvmet_find_get_subsys(port, nqn)` walks
    /// that port's subsystem links): the discovery subsystem on every port,
    /// an NVM subsystem only on the ports it is exported on.
    pub fn subsystem_on_port(&self, nqn: &str, port_id: u16) -> Option<Arc<Subsystem>> {
        self.subsystem(nqn).filter(|s| s.on_port(port_id))
    }

    /// Replaces the ports subsystem `s` is exported on (`None`: every port),
    /// as linking and unlinking it in nvmet's `ports/N/subsystems`: GENCTR
    /// moves and the discovery controllers of the hosts allowed to use it get
    /// the discovery log change notice (`nvmet_port_disc_changed(port,
    /// subsys)`), and its controllers connected through a port it left are
    /// deleted (`nvmet_port_del_ctrls`): their hosts' reconnects through that
    /// port are refused. `None` when nothing changed, else the controllers
    /// deleted.
    pub fn set_subsystem_ports(&self, s: &Arc<Subsystem>, ports: Option<Vec<u16>>) -> Option<usize> {
        let all: Vec<u16> = self.ports.read().unwrap().iter().map(|p| p.id).collect();
        // Under the lock the discovery log is read with (see `discovery_snapshot`).
        let map = self.subsystems.write().unwrap();
        let exported = map.get(&s.nqn).is_some_and(|m| Arc::ptr_eq(m, s));
        let left = s.set_ports(ports, &all)?;
        if exported {
            self.bump_genctr();
        }
        drop(map);
        if exported {
            self.notify_discovery(|host| s.host_allowed(host));
        }
        Some(s.delete_controllers_where(|c| left.contains(&c.port_id)))
    }

    /// All NVM subsystems.
    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        self.subsystems.read().unwrap().values().cloned().collect()
    }

    /// Registers a port with the next ID (one past the highest so far).
    pub fn add_port(&self, addr: SocketAddr) -> u16 {
        let id = self.ports.read().unwrap().iter().map(|p| p.id).max().map_or(1, |m| m.wrapping_add(1));
        self.add_port_with_id(addr, id)
    }

    /// Registers a port with ID `id` (a configured `portid`, nvmet's
    /// `ports/N`; the configuration keeps them unique).
    pub fn add_port_with_id(&self, addr: SocketAddr, id: u16) -> u16 {
        let mut p = self.ports.write().unwrap();
        p.push(Port {
            id,
            addr,
            ana: Arc::default(),
            ana_groups: BTreeSet::new(),
            connections: Arc::default(),
            params: PortParams::default(),
        });
        self.bump_genctr();
        drop(p);
        self.notify_discovery(|_| true);
        id
    }

    /// Unregisters port `id`, as nvmet's `rmdir ports/N` after its
    /// subsystems are unlinked: the discovery log no longer lists it (GENCTR
    /// moves, discovery controllers get the change notice) and the
    /// controllers connected through it are deleted (`nvmet_port_del_ctrls`),
    /// so their hosts reconnect through a port that is still there. The
    /// caller stops its listener. The controllers deleted, `None` when no
    /// port has that ID.
    pub fn remove_port(&self, id: u16) -> Option<usize> {
        let mut p = self.ports.write().unwrap();
        let i = p.iter().position(|x| x.id == id)?;
        p.remove(i);
        self.bump_genctr();
        drop(p);
        self.notify_discovery(|_| true);
        let through = |c: &Controller| c.port_id == id;
        let mut deleted = self.discovery.delete_controllers_where(through);
        for s in self.subsystems() {
            deleted += s.delete_controllers_where(through);
        }
        Some(deleted)
    }

    /// Registered ports.
    pub fn ports(&self) -> Vec<Port> {
        self.ports.read().unwrap().clone()
    }

    /// Replaces the referrals the discovery log lists. When they change,
    /// GENCTR moves and every discovery controller gets the discovery log
    /// change notice, as nvmet's `nvmet_referral_enable` / `_disable` call
    /// `nvmet_port_disc_changed(port, NULL)`. Whether anything changed.
    pub fn set_referrals(&self, referrals: Vec<Referral>) -> bool {
        self.set_for_every_host(&self.referrals, referrals)
    }

    /// Sets which ports' entries the discovery log lists to each host. When
    /// it changes, GENCTR moves and every discovery controller gets the
    /// discovery log change notice (what a host sees may change). Whether
    /// it changed.
    pub fn set_discovery_filter(&self, filter: DiscoveryFilter) -> bool {
        self.set_for_every_host(&self.discovery_filter, filter)
    }

    /// Replaces a setting of the discovery log that every host's log shows:
    /// when it changes, GENCTR moves (under its lock, see
    /// `discovery_snapshot`) and every discovery controller gets the change
    /// notice. Whether it changed.
    fn set_for_every_host<T: PartialEq>(&self, slot: &RwLock<T>, value: T) -> bool {
        let mut cur = slot.write().unwrap();
        if *cur == value {
            return false;
        }
        *cur = value;
        self.bump_genctr();
        drop(cur);
        self.notify_discovery(|_| true);
        true
    }

    /// The referrals the discovery log lists.
    pub fn referrals(&self) -> Vec<Referral> {
        self.referrals.read().unwrap().clone()
    }

    /// The ANA states of port `id`; every group optimized for a port not
    /// registered (queues built without a listener, as in tests).
    pub fn port_ana(&self, id: u16) -> Arc<PortAna> {
        let ports = self.ports.read().unwrap();
        ports.iter().find(|p| p.id == id).map_or_else(Arc::default, |p| p.ana.clone())
    }

    /// Port `id`, if registered.
    pub fn port(&self, id: u16) -> Option<Port> {
        self.ports.read().unwrap().iter().find(|p| p.id == id).cloned()
    }

    /// The queue limits of port `id` (none of its own when it is not registered).
    pub fn port_params(&self, id: u16) -> PortParams {
        self.ports.read().unwrap().iter().find(|p| p.id == id).map(|p| p.params).unwrap_or_default()
    }

    /// Sets port `id`'s own queue limits. They apply to connections
    /// accepted from then on (nvmet takes them only while the port is
    /// disabled); whether the port is registered.
    pub fn set_port_params(&self, id: u16, params: PortParams) -> bool {
        let mut ports = self.ports.write().unwrap();
        let Some(port) = ports.iter_mut().find(|p| p.id == id) else { return false };
        port.params = params;
        true
    }

    /// Sets the ANA states of port `id`: every group in `default` except
    /// those `groups` names. When a state changes, the change count moves
    /// and the I/O controllers connected through that port get the ANA
    /// Change notice (nvmet `nvmet_port_send_ana_event`). Whether anything
    /// changed.
    pub fn set_port_ana(&self, id: u16, default: AnaState, groups: &BTreeMap<u32, AnaState>) -> bool {
        let mut ports = self.ports.write().unwrap();
        let Some(port) = ports.iter_mut().find(|p| p.id == id) else { return false };
        let mut changed = false;
        for g in 1..=MAX_ANA_GROUPS {
            changed |= port.ana.set(g, groups.get(&g).copied().unwrap_or(default));
        }
        let named: BTreeSet<u32> = groups.keys().copied().collect();
        changed |= port.ana_groups != named;
        port.ana_groups = named;
        drop(ports);
        if changed {
            self.ana_changed(|c| c.port_id == id);
        }
        changed
    }

    /// Moves the ANA change count and raises the ANA Change notice on the
    /// live I/O controllers `which` accepts (nvmet `nvmet_send_ana_event`).
    pub fn ana_changed(&self, which: impl Fn(&Controller) -> bool) {
        self.ana_chgcnt.fetch_add(1, Ordering::Relaxed);
        let ctrls: Vec<_> = self.controllers.lock().unwrap().values().filter_map(Weak::upgrade).collect();
        for c in ctrls {
            if !c.is_discovery() && which(&c) {
                c.ana_changed();
            }
        }
    }

    /// ANA change count (ANA log CHGCNT).
    pub fn ana_chgcnt(&self) -> u64 {
        self.ana_chgcnt.load(Ordering::Relaxed)
    }

    /// Discovery log generation counter.
    pub fn genctr(&self) -> u64 {
        self.genctr.load(Ordering::Relaxed)
    }

    /// GENCTR with the ports and subsystems it describes, read together:
    /// changes bump GENCTR while they hold the lock of what they change, so
    /// a log never pairs the counter of one state with the entries of
    /// another (nvmet builds the log under `nvmet_config_sem`). libnvme
    /// takes equal GENCTRs before and after its reads as proof that the
    /// entries it read are current.
    pub fn discovery_snapshot(&self) -> DiscoverySnapshot {
        let ports = self.ports.read().unwrap();
        let subsystems = self.subsystems.read().unwrap();
        let referrals = self.referrals.read().unwrap();
        let filter = self.discovery_filter.read().unwrap();
        DiscoverySnapshot {
            genctr: self.genctr(),
            ports: ports.clone(),
            subsystems: subsystems.values().cloned().collect(),
            referrals: referrals.clone(),
            discovery_nqn: self.discovery_nqn(),
            filter: *filter,
        }
    }

    /// Bumps GENCTR and notifies every discovery controller (AEN F0h).
    pub fn discovery_changed(&self) {
        self.bump_genctr();
        self.notify_discovery(|_| true);
    }

    /// One GENCTR for all hosts, like nvmet's.
    fn bump_genctr(&self) {
        self.genctr.fetch_add(1, Ordering::Relaxed);
    }

    /// Raises the discovery log change notice on the discovery controllers
    /// whose host NQN `visible` accepts: those whose log the change alters.
    /// The others would re-read an unchanged log, and learn that a subsystem
    /// they may not see came or went.
    fn notify_discovery(&self, visible: impl Fn(&str) -> bool) {
        for c in self.discovery.controllers() {
            if visible(&c.hostnqn) {
                c.discovery_changed();
            }
        }
    }

    /// Allocates a controller ID (1..=0xFFEF, skipping live ones) and registers
    /// the controller built by `make`. `None` when the ID space is exhausted.
    pub fn create_controller(&self, make: impl FnOnce(u16) -> Controller) -> Option<Arc<Controller>> {
        self.create_controller_in(CNTLID_RANGE, make)
    }

    /// [`Self::create_controller`] with an ID from `range` (a subsystem's
    /// `cntlid_min..=cntlid_max`, nvmet's `attr_cntlid_min/max`): the IDs of
    /// all subsystems come from one space, as nvmet's `cntlid_ida`, and each
    /// takes them in turn from where the last one left off (an ID comes back
    /// only after the others of its range). `None` when the range has no free ID.
    pub fn create_controller_in(
        &self,
        range: RangeInclusive<u16>,
        make: impl FnOnce(u16) -> Controller,
    ) -> Option<Arc<Controller>> {
        let (lo, hi) = (*range.start(), *range.end());
        if lo == 0 || lo > hi || hi > *CNTLID_RANGE.end() {
            return None;
        }
        let mut ctrls = self.controllers.lock().unwrap();
        ctrls.retain(|_, w| w.strong_count() > 0);
        let mut next = self.next_cntlid.lock().unwrap();
        let span = u32::from(hi - lo) + 1;
        let start = u32::from((*next).clamp(lo, hi) - lo);
        for k in 0..span {
            let id = lo + ((start + k) % span) as u16;
            if let std::collections::btree_map::Entry::Vacant(e) = ctrls.entry(id) {
                *next = if id >= *CNTLID_RANGE.end() { 1 } else { id + 1 };
                let c = Arc::new(make(id));
                e.insert(Arc::downgrade(&c));
                c.subsys.attach_controller(&c);
                return Some(c);
            }
        }
        None
    }

    /// Finds a live controller.
    pub fn controller(&self, cntlid: u16) -> Option<Arc<Controller>> {
        self.controllers.lock().unwrap().get(&cntlid).and_then(Weak::upgrade)
    }

    /// Counts a new connection; false (and not counted) past `max_connections`.
    pub fn try_add_connection(&self) -> bool {
        let n = self.connections.fetch_add(1, Ordering::AcqRel);
        if n >= self.limits.max_connections {
            self.connections.fetch_sub(1, Ordering::AcqRel);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Uncounts a connection.
    pub fn remove_connection(&self) {
        self.connections.fetch_sub(1, Ordering::AcqRel);
    }

    /// Connections refused so far because `max_connections` were open.
    pub fn connections_refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Current connection count.
    pub fn connection_count(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }
}
