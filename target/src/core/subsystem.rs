//! NVM subsystems: NQN, identity strings, allowed hosts, namespaces.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

use arc_swap::ArcSwap;

use super::controller::Teardown;
use super::{Controller, Namespace};
use crate::config::HostKeys;

/// Namespaces by NSID; replaced whole on change so the I/O path reads it lock-free.
pub type NamespaceMap = BTreeMap<u32, Arc<Namespace>>;

/// The hosts allowed to connect and the DH-HMAC-CHAP keys of those that
/// must authenticate, swapped as one: a reload that adds a host with its key
/// (or removes one) never shows the host allowed without the key it must
/// authenticate with.
#[derive(Default)]
struct HostAccess {
    /// `None` allows any host (nvmet `attr_allow_any_host`).
    allowed: Option<Vec<String>>,
    keys: BTreeMap<String, Arc<HostKeys>>,
}

impl HostAccess {
    fn allows(&self, hostnqn: &str) -> bool {
        host_listed(self.allowed.as_deref(), hostnqn)
    }
}

/// Whether `allowed` (`None`: any host) lets `hostnqn` in (nvmet `nvmet_host_allowed`).
pub(crate) fn host_listed(allowed: Option<&[String]>, hostnqn: &str) -> bool {
    allowed.is_none_or(|h| h.iter().any(|a| a == hostnqn))
}

/// Port IDs in order, each once: the same ports listed in another order are
/// no change.
fn port_set(ports: Option<Vec<u16>>) -> Option<Vec<u16>> {
    ports.map(|mut p| {
        p.sort_unstable();
        p.dedup();
        p
    })
}

/// What [`Subsystem::set_hosts`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostsChange {
    /// The allowed hosts changed.
    pub allowed: bool,
    /// Some host's keys changed (or were added or removed).
    pub keys: bool,
}

/// An NVM subsystem (or the discovery subsystem).
pub struct Subsystem {
    /// Subsystem NQN.
    pub nqn: String,
    /// Serial number (Identify Controller SN, ≤ 20 ASCII characters, stable).
    pub serial: String,
    /// Model number (Identify Controller MN).
    pub model: String,
    /// Firmware revision (Identify Controller FR, Firmware Slot log slot 1;
    /// ≤ 8 ASCII characters).
    pub firmware: String,
    /// IEEE OUI (Identify Controller IEEE, 24 bits; nvmet's `attr_ieee_oui`).
    pub ieee_oui: u32,
    /// Whether this is the discovery subsystem.
    pub discovery: bool,
    /// Controller IDs its controllers get (nvmet `attr_cntlid_min/max`).
    pub cntlids: std::ops::RangeInclusive<u16>,
    /// Most I/O queues a controller of this subsystem gets (nvmet's
    /// `attr_qid_max`); 0: the target's limit only.
    max_io_queues: AtomicU16,
    /// Who may connect and with which keys; replaced whole by a reload.
    hosts: ArcSwap<HostAccess>,
    /// IDs of the ports it is exported on (nvmet's `ports/N/subsystems`
    /// links); `None`: every port. Read by Connect and the discovery log only.
    ports: RwLock<Option<Vec<u16>>>,
    namespaces: ArcSwap<NamespaceMap>,
    controllers: Mutex<Vec<Weak<Controller>>>,
}

impl Subsystem {
    /// The serial number a subsystem reports where the configuration gives
    /// none: 20 hex digits derived from its NQN, the same on every start.
    pub fn default_serial(nqn: &str) -> String {
        let id = super::stable_id(&[b"serial", nqn.as_bytes()]);
        id[..10].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The firmware revision a subsystem reports where the configuration
    /// gives none: this build's version, at most the 8 characters of
    /// Identify Controller FR.
    pub fn default_firmware() -> String {
        crate::cmd::admin::FIRMWARE_REVISION.chars().take(8).collect()
    }

    /// A subsystem with no namespaces.
    pub fn new(nqn: &str, model: &str, allowed_hosts: Option<Vec<String>>, discovery: bool) -> Self {
        Self {
            nqn: nqn.to_string(),
            serial: Self::default_serial(nqn),
            model: model.to_string(),
            firmware: Self::default_firmware(),
            ieee_oui: 0,
            discovery,
            cntlids: super::target::CNTLID_RANGE,
            max_io_queues: AtomicU16::new(0),
            hosts: ArcSwap::from_pointee(HostAccess { allowed: allowed_hosts, keys: BTreeMap::new() }),
            ports: RwLock::new(None),
            namespaces: ArcSwap::from_pointee(BTreeMap::new()),
            controllers: Mutex::new(Vec::new()),
        }
    }

    /// With this serial number (nvmet's `attr_serial`) instead of the one
    /// derived from the NQN.
    pub fn with_serial(mut self, serial: &str) -> Self {
        self.serial = serial.to_string();
        self
    }

    /// With this firmware revision (nvmet's `attr_firmware`).
    pub fn with_firmware(mut self, firmware: &str) -> Self {
        self.firmware = firmware.to_string();
        self
    }

    /// With this IEEE OUI (nvmet's `attr_ieee_oui`; the low 24 bits count).
    pub fn with_ieee_oui(mut self, oui: u32) -> Self {
        self.ieee_oui = oui & 0xFF_FFFF;
        self
    }

    /// With controller IDs from `cntlids` only. Two targets that export one
    /// subsystem (the same NQN, for multipath across them) need disjoint
    /// ranges: a Linux host refuses a second controller whose ID another
    /// controller of the subsystem already has (`nvme_validate_cntlid`).
    pub fn with_cntlids(mut self, cntlids: std::ops::RangeInclusive<u16>) -> Self {
        self.cntlids = cntlids;
        self
    }

    /// With at most `max` I/O queues per controller (nvmet's `attr_qid_max`),
    /// below the target's own limit; `None`: the target's limit.
    pub fn with_max_io_queues(self, max: Option<u16>) -> Self {
        self.max_io_queues.store(max.unwrap_or(0), Ordering::Relaxed);
        self
    }

    /// Exported on the ports with these IDs only (nvmet links a subsystem to
    /// each port in `ports/N/subsystems`); `None`: on every port.
    pub fn with_ports(self, ports: Option<Vec<u16>>) -> Self {
        *self.ports.write().unwrap_or_else(PoisonError::into_inner) = port_set(ports);
        self
    }

    /// Whether hosts reach it through port `port_id` (the discovery
    /// subsystem: through every port, as nvmet's).
    pub fn on_port(&self, port_id: u16) -> bool {
        self.discovery
            || self
                .ports
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .is_none_or(|p| p.contains(&port_id))
    }

    /// Replaces the ports it is exported on; the ports it left, if any
    /// (every port it was on but is not now, of `all`, the target's port
    /// IDs). Use [`crate::core::Target::set_subsystem_ports`] for a subsystem
    /// the target exports: it also tells discovery and deletes the
    /// controllers connected through the ports left.
    pub fn set_ports(&self, ports: Option<Vec<u16>>, all: &[u16]) -> Option<Vec<u16>> {
        let ports = port_set(ports);
        let mut cur = self.ports.write().unwrap_or_else(PoisonError::into_inner);
        if *cur == ports {
            return None;
        }
        let on = |p: &Option<Vec<u16>>, id: &u16| p.as_ref().is_none_or(|p| p.contains(id));
        let left = all.iter().copied().filter(|id| on(&cur, id) && !on(&ports, id)).collect();
        *cur = ports;
        Some(left)
    }

    /// The subsystem's own limit on I/O queues per controller, if it has one.
    pub fn max_io_queues(&self) -> Option<u16> {
        Some(self.max_io_queues.load(Ordering::Relaxed)).filter(|&n| n != 0)
    }

    /// The I/O queues a new controller gets under the target's own limit
    /// `target_limit`: the subsystem's limit where it is lower.
    pub fn io_queue_limit(&self, target_limit: u16) -> u16 {
        self.max_io_queues().map_or(target_limit, |m| m.min(target_limit))
    }

    /// Sets the limit on I/O queues per controller that new associations
    /// get. Connected controllers keep the count they were given: the Linux
    /// host asks for it only when it connects, so a caller that wants them
    /// to take the new limit deletes them ([`Self::delete_controllers`]), as
    /// nvmet's `attr_qid_max` store does.
    pub fn set_max_io_queues(&self, max: Option<u16>) {
        self.max_io_queues.store(max.unwrap_or(0), Ordering::Relaxed);
    }

    /// Deletes every controller of the subsystem (nvmet's `delete_ctrl`):
    /// their queues close once the commands in flight complete, and the hosts
    /// see the connections end and reconnect (or, when the subsystem is gone,
    /// get refused and give up). Returns how many were live.
    pub fn delete_controllers(&self) -> usize {
        self.delete_controllers_where(|_| true)
    }

    /// Deletes the controllers `which` accepts (as
    /// [`Self::delete_controllers`]); how many of them were live.
    pub fn delete_controllers_where(&self, which: impl Fn(&Controller) -> bool) -> usize {
        let mut live = self.controllers();
        live.retain(|c| c.teardown_state() == Teardown::Alive && which(c));
        for c in &live {
            c.shutdown(Teardown::Deleted);
        }
        live.len()
    }

    /// With these hosts' DH-HMAC-CHAP keys (each must also be allowed).
    pub fn with_host_keys(self, keys: &BTreeMap<String, HostKeys>) -> Self {
        let allowed = self.allowed_hosts();
        self.set_hosts(allowed, keys);
        self
    }

    /// Replaces the allowed hosts and their DH-HMAC-CHAP keys together.
    /// Connected hosts are not touched, as nvmet's `allowed_hosts` link
    /// removal leaves their controllers: a host no longer allowed keeps its
    /// association (its I/O queues and reconnects of them included) until it
    /// disconnects, and associations made before keep the keys they
    /// authenticated with until they re-authenticate. New Connects see the
    /// new lists. Use [`crate::core::Target::set_subsystem_hosts`] for a
    /// subsystem the target exports, so that discovery hears of it.
    pub fn set_hosts(&self, allowed: Option<Vec<String>>, keys: &BTreeMap<String, HostKeys>) -> HostsChange {
        let cur = self.hosts.load();
        let change = HostsChange {
            allowed: cur.allowed != allowed,
            keys: cur.keys.len() != keys.len()
                || !cur.keys.iter().all(|(h, k)| keys.get(h) == Some(k.as_ref())),
        };
        if change != HostsChange::default() {
            let keys = keys.iter().map(|(h, k)| (h.clone(), Arc::new(k.clone()))).collect();
            self.hosts.store(Arc::new(HostAccess { allowed, keys }));
        }
        change
    }

    /// The hosts allowed to connect; `None` allows any host.
    pub fn allowed_hosts(&self) -> Option<Vec<String>> {
        self.hosts.load().allowed.clone()
    }

    /// The keys `hostnqn` authenticates with, if it must (nvmet_setup_auth:
    /// never on the discovery subsystem).
    pub fn host_keys(&self, hostnqn: &str) -> Option<Arc<HostKeys>> {
        if self.discovery {
            return None;
        }
        self.hosts.load().keys.get(hostnqn).cloned()
    }

    /// Whether `hostnqn` may connect (nvmet `nvmet_host_allowed`).
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        self.hosts.load().allows(hostnqn)
    }

    /// Current namespaces (lock-free snapshot).
    pub fn namespaces(&self) -> Arc<NamespaceMap> {
        self.namespaces.load_full()
    }

    /// Looks a namespace up (lock-free).
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        self.namespaces.load().get(&nsid).cloned()
    }

    /// Runs `f` on namespace `nsid`, or returns `None` if there is none.
    /// The per-command form of [`Self::namespace`]: it borrows the namespace
    /// from the map's snapshot instead of cloning its `Arc`, so commands on
    /// queues of different cores do not all increment and decrement the same
    /// reference count (a cache line moving between cores per command).
    pub fn with_namespace<R>(&self, nsid: u32, f: impl FnOnce(&Namespace) -> R) -> Option<R> {
        self.namespaces.load().get(&nsid).map(|ns| f(ns))
    }

    /// Adds or replaces a namespace and notifies connected controllers
    /// (Namespace Attribute Changed AEN, as nvmet's `nvmet_ns_changed`).
    pub fn add_namespace(&self, ns: Arc<Namespace>) {
        let nsid = ns.nsid;
        self.namespaces.rcu(|m| {
            let mut m = NamespaceMap::clone(m);
            m.insert(nsid, ns.clone());
            m
        });
        self.namespace_changed(nsid);
    }

    /// Removes a namespace; returns whether it existed.
    pub fn remove_namespace(&self, nsid: u32) -> bool {
        let mut removed = None;
        self.namespaces.rcu(|m| {
            let mut m = NamespaceMap::clone(m);
            removed = m.remove(&nsid);
            m
        });
        if let Some(ns) = &removed {
            self.notify_hosts(nsid, |hostnqn| ns.visible_to(hostnqn));
        }
        removed.is_some()
    }

    /// Shows namespace `nsid` to the hosts `hosts` only (`None`: to every
    /// host; [`Namespace::visible_to`]) and notifies the controllers of the
    /// hosts that gain or lose it, as SPDK's `nvmf_ns_add_host` /
    /// `nvmf_ns_remove_host`. Returns whether the list changed; an error if
    /// there is no such namespace.
    pub fn set_namespace_hosts(&self, nsid: u32, hosts: Option<Vec<String>>) -> Result<bool, String> {
        let ns = self.namespace(nsid).ok_or_else(|| format!("namespace {nsid} does not exist"))?;
        if ns.hosts() == hosts {
            return Ok(false);
        }
        let affected = ns.set_hosts(hosts);
        self.notify_hosts(nsid, affected);
        Ok(true)
    }

    /// Resizes a namespace's backend and notifies controllers.
    pub fn resize_namespace(&self, nsid: u32, new_size: u64) -> Result<(), String> {
        let ns = self.namespace(nsid).ok_or_else(|| format!("namespace {nsid} does not exist"))?;
        ns.backend.resize(new_size)?;
        self.namespace_changed(nsid);
        Ok(())
    }

    /// Registers a live controller of this subsystem.
    pub fn attach_controller(&self, c: &Arc<Controller>) {
        let mut v = self.controllers.lock().unwrap();
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(c));
    }

    /// Live controllers.
    pub fn controllers(&self) -> Vec<Arc<Controller>> {
        self.controllers.lock().unwrap().iter().filter_map(Weak::upgrade).collect()
    }

    /// Tells the connected controllers that see namespace `nsid` that it was
    /// added or changed (nvmet `nvmet_ns_changed`), e.g. its write
    /// protection. Hosts the namespace is hidden from ([`Namespace::visible_to`])
    /// hear nothing of it, as SPDK's `nvmf_subsystem_ns_changed` skips them.
    pub fn namespace_changed(&self, nsid: u32) {
        if let Some(ns) = self.namespace(nsid) {
            self.notify_hosts(nsid, |hostnqn| ns.visible_to(hostnqn));
        }
    }

    /// Adopts the size of `ns`'s store where it changed outside the target
    /// ([`Namespace::revalidate`]) and then tells the hosts that see it, as
    /// nvmet's `nvmet_ns_revalidate` and `nvmet_ns_changed` go together.
    pub fn revalidate_namespace(&self, ns: &Namespace) {
        if ns.revalidate() {
            self.notify_hosts(ns.nsid, |hostnqn| ns.visible_to(hostnqn));
        }
    }

    /// Raises the Namespace Attribute Changed notice for `nsid` on the
    /// connected controllers of the hosts `hosts` selects: those that saw a
    /// removed namespace, or whose view of one changed
    /// ([`Namespace::set_hosts`]).
    pub fn notify_hosts(&self, nsid: u32, hosts: impl Fn(&str) -> bool) {
        for c in self.controllers().into_iter().filter(|c| hosts(&c.hostnqn)) {
            c.ns_changed(nsid);
        }
    }

    /// Delivers reservation notices for namespace `nsid` to every
    /// controller of each notified host (nvmet `nvmet_pr_send_event_to_host`).
    pub fn reservation_notices(&self, nsid: u32, notices: &[super::reservation::Notice]) {
        if notices.is_empty() {
            return;
        }
        for c in self.controllers() {
            for n in notices.iter().filter(|n| n.hostid == c.hostid) {
                c.reservation_notice(n.kind, nsid);
            }
        }
    }
}
