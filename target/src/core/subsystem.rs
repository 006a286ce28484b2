//! NVM subsystems: NQN, identity strings, allowed hosts, namespaces.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use arc_swap::ArcSwap;

use super::{Controller, Namespace};
use crate::config::HostKeys;

/// Namespaces by NSID; replaced whole on change so the I/O path reads it lock-free.
pub type NamespaceMap = BTreeMap<u32, Arc<Namespace>>;

/// An NVM subsystem (or the discovery subsystem).
pub struct Subsystem {
    /// Subsystem NQN.
    pub nqn: String,
    /// Serial number (Identify Controller SN, ≤ 20 ASCII characters, stable).
    pub serial: String,
    /// Model number (Identify Controller MN).
    pub model: String,
    /// Whether this is the discovery subsystem.
    pub discovery: bool,
    /// Hosts allowed to connect; `None` allows any host.
    pub allowed_hosts: Option<Vec<String>>,
    /// DH-HMAC-CHAP keys of the hosts that must authenticate; replaced whole
    /// by a reload (new associations use the new ones).
    host_keys: ArcSwap<BTreeMap<String, Arc<HostKeys>>>,
    namespaces: ArcSwap<NamespaceMap>,
    controllers: Mutex<Vec<Weak<Controller>>>,
}

impl Subsystem {
    /// A subsystem with no namespaces.
    pub fn new(nqn: &str, model: &str, allowed_hosts: Option<Vec<String>>, discovery: bool) -> Self {
        let id = super::stable_id(&[b"serial", nqn.as_bytes()]);
        let serial: String = id[..10].iter().map(|b| format!("{b:02x}")).collect();
        Self {
            nqn: nqn.to_string(),
            serial,
            model: model.to_string(),
            discovery,
            allowed_hosts,
            host_keys: ArcSwap::from_pointee(BTreeMap::new()),
            namespaces: ArcSwap::from_pointee(BTreeMap::new()),
            controllers: Mutex::new(Vec::new()),
        }
    }

    /// With these hosts' DH-HMAC-CHAP keys (each must also be allowed).
    pub fn with_host_keys(self, keys: &BTreeMap<String, HostKeys>) -> Self {
        self.set_host_keys(keys);
        self
    }

    /// Replaces the hosts' DH-HMAC-CHAP keys; returns whether they changed.
    /// Associations made before keep the keys they authenticated with, as
    /// nvmet's controllers keep theirs until they re-authenticate.
    pub fn set_host_keys(&self, keys: &BTreeMap<String, HostKeys>) -> bool {
        let cur = self.host_keys.load();
        if cur.len() == keys.len() && cur.iter().all(|(h, k)| keys.get(h) == Some(k.as_ref())) {
            return false;
        }
        self.host_keys.store(Arc::new(keys.iter().map(|(h, k)| (h.clone(), Arc::new(k.clone()))).collect()));
        true
    }

    /// The keys `hostnqn` authenticates with, if it must (nvmet_setup_auth:
    /// never on the discovery subsystem).
    pub fn host_keys(&self, hostnqn: &str) -> Option<Arc<HostKeys>> {
        if self.discovery {
            return None;
        }
        self.host_keys.load().get(hostnqn).cloned()
    }

    /// Whether `hostnqn` may connect (nvmet `nvmet_host_allowed`).
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        self.allowed_hosts.as_ref().is_none_or(|h| h.iter().any(|a| a == hostnqn))
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
        let mut existed = false;
        self.namespaces.rcu(|m| {
            let mut m = NamespaceMap::clone(m);
            existed = m.remove(&nsid).is_some();
            m
        });
        if existed {
            self.namespace_changed(nsid);
        }
        existed
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

    /// Tells connected controllers that namespace `nsid` was added, removed
    /// or changed (nvmet `nvmet_ns_changed`), e.g. its write protection.
    pub fn namespace_changed(&self, nsid: u32) {
        for c in self.controllers() {
            c.ns_changed(nsid);
        }
    }
}
