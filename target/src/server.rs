//! Running a target from a [`TargetConfig`]: open backends, create
//! subsystems, bind ports, accept connections; graceful shutdown.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::backend::{Backend, BlockBackend, FileBackend, MemBackend, UringBackend};
use crate::config::{
    assign_nsids, IoEngine, NamespaceConfig, NamespaceSource, SubsystemConfig, TargetConfig,
};
use crate::core::ana::ana_state_name;
use crate::core::{Namespace, Reservations, Subsystem, Target};
use crate::transport::tcp::{self, ConnOptions};

/// A running target.
pub struct Server {
    /// The target registry (add/remove/resize namespaces through it while running).
    pub target: Arc<Target>,
    /// Bound addresses, in configuration order (actual ports when 0 was asked).
    pub local_addrs: Vec<SocketAddr>,
    /// Where the Prometheus metrics are served ([`crate::metrics`]; the actual
    /// port when 0 was asked), if anywhere.
    pub metrics_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    accept_tasks: Vec<JoinHandle<()>>,
    /// The ports listening now, in configuration order: those it started
    /// with and those reloads added ([`Server::reload`]).
    ports: Mutex<Vec<LivePort>>,
    /// The configuration each namespace (subsystem NQN, NSID) was last
    /// opened or resized with: [`Server::reload`] resizes a namespace only
    /// when its `size` changes, and replaces it when its store changes.
    configured: Mutex<HashMap<(String, u32), NamespaceConfig>>,
    /// The limits, busy-poll window, send buffer, congestion control and
    /// socket priority the target started with: a reload does not change
    /// them, and says so when the file does.
    started: (crate::core::Limits, ConnOptions),
    /// The metrics address the target started with (a reload does not move it).
    started_metrics: Option<SocketAddr>,
}

/// A reload error that left the running configuration as it was.
fn unchanged(e: std::io::Error, what: std::fmt::Arguments<'_>) -> std::io::Error {
    // Opening may have created or grown a file already; what hosts see is as it was.
    std::io::Error::new(e.kind(), format!("{what}: {e}; the exported namespaces are unchanged"))
}

/// Whether two configurations of one NSID describe the same store (size
/// aside): when they do not, the NSID now names another namespace (a path,
/// device, engine or block size changed, or an entry before it was removed and
/// implicit NSIDs moved up; or `read_only` changed: the store is opened
/// again with the other access), which a reload replaces instead of resizing.
fn same_store(a: &NamespaceConfig, b: &NamespaceConfig) -> bool {
    use NamespaceSource::{Block, File, Ram};
    a.block_size == b.block_size
        && a.read_only == b.read_only
        // Reservations come and go with a namespace object (nvmet changes
        // `resv_enable` only while the namespace is disabled).
        && a.reservations == b.reservations
        && a.reservations_file == b.reservations_file
        && a.reservations_format == b.reservations_format
        // New identifiers make hosts drop the namespace and add it again.
        && a.ids == b.ids
        // A zoned namespace keeps the zones (and the size) it started with.
        && a.zoned == b.zoned
        && a.zone_state_file == b.zone_state_file
        && (a.zoned.is_none() || configured_size(a) == configured_size(b))
        && match (&a.source, &b.source) {
            (
                File { path: p, io_engine: e, buffered_io: bu, .. },
                File { path: q, io_engine: f, buffered_io: bv, .. },
            ) => (p, e, bu) == (q, f, bv),
            (Block { .. }, Block { .. }) => a.source == b.source,
            (Ram(_), Ram(_)) => true,
            _ => false,
        }
}

/// What a namespace derives its identifiers from besides NQN and NSID
/// ([`Namespace::for_store`]): its file or device path as configured, and for
/// RAM a value of its own that no restart repeats (a RAM store starts empty:
/// after a restart it is another namespace, and a host must not keep the old
/// one's cached pages for it).
pub(crate) fn store_identity(n: &NamespaceConfig) -> Vec<u8> {
    // Given identifiers stand for the store (`NamespaceIds`): the others then
    // agree between targets that are given the same ones.
    if n.ids.any() {
        let opt = |id: Option<&[u8]>| id.map_or_else(|| vec![0], |b| [&[1u8][..], b].concat());
        let ids = &n.ids;
        return [
            &b"ids:"[..],
            &opt(ids.uuid.as_ref().map(|b| &b[..])),
            &opt(ids.nguid.as_ref().map(|b| &b[..])),
            &opt(ids.eui64.as_ref().map(|b| &b[..])),
        ]
        .concat();
    }
    static RAM_STORES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    let (kind, id) = match &n.source {
        NamespaceSource::File { path, .. } => ("file", path.as_os_str().as_encoded_bytes().to_vec()),
        NamespaceSource::Block { path, .. } => ("block", path.as_os_str().as_encoded_bytes().to_vec()),
        NamespaceSource::Ram(_) => {
            let start = *START.get_or_init(|| {
                let t =
                    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                t.as_nanos() ^ ((std::process::id() as u128) << 96)
            });
            let n = RAM_STORES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ("ram", [start.to_le_bytes().as_slice(), &n.to_le_bytes()].concat())
        }
    };
    [kind.as_bytes(), b":", &id].concat()
}

/// The UUID, NGUID and EUI-64 namespace `n` is served with as NSID `nsid`
/// of subsystem `nqn`: those the configuration gives, the others derived
/// from the store as [`new_namespace`] derives them (a RAM store is a new
/// one on each call). What `export-nvmetcli` and `export-spdk` write out.
pub(crate) fn namespace_ids(nqn: &str, nsid: u32, n: &NamespaceConfig) -> ([u8; 16], [u8; 16], [u8; 8]) {
    let (uuid, nguid, eui64) = Namespace::derived_ids(nqn, nsid, Some(&store_identity(n)));
    (n.ids.uuid.unwrap_or(uuid), n.ids.nguid.unwrap_or(nguid), n.ids.eui64.unwrap_or(eui64))
}

/// The capacity a namespace's configuration asks for, if any (block devices: none).
fn configured_size(n: &NamespaceConfig) -> Option<u64> {
    match &n.source {
        NamespaceSource::Ram(sz) => Some(*sz),
        NamespaceSource::File { size, .. } => *size,
        NamespaceSource::Block { .. } => None,
    }
}

/// Opens the backend for a namespace, with the namespace's [`IoEngine`]: `auto`
/// falls back to the thread pool (with one warning) where io_uring is unavailable.
/// An error names the file or device (the system's own message, such as "No
/// such file or directory", does not).
pub fn open_backend(ns: &NamespaceConfig) -> std::io::Result<Arc<dyn Backend>> {
    open_backend_inner(ns).map_err(|e| match &ns.source {
        NamespaceSource::File { path, .. } | NamespaceSource::Block { path, .. }
            if !e.to_string().contains(&*path.to_string_lossy()) =>
        {
            std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
        }
        _ => e,
    })
}

fn open_backend_inner(ns: &NamespaceConfig) -> std::io::Result<Arc<dyn Backend>> {
    /// Opens with io_uring per `engine`; `Ok(None)` means "use the thread pool".
    fn uring(
        engine: IoEngine,
        path: &std::path::Path,
        open: impl FnOnce() -> std::io::Result<UringBackend>,
    ) -> std::io::Result<Option<Arc<dyn Backend>>> {
        match engine {
            IoEngine::Threads => Ok(None),
            IoEngine::Uring => Ok(Some(Arc::new(open()?))),
            IoEngine::Auto => match open() {
                Ok(b) => Ok(Some(Arc::new(b))),
                Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                    warn!(path = %path.display(), error = %e, "io_engine auto: io_uring unavailable, using worker threads");
                    Ok(None)
                }
                Err(e) => Err(e),
            },
        }
    }
    Ok(match &ns.source {
        NamespaceSource::Ram(size) => {
            MemBackend::check_capacity(*size).map_err(std::io::Error::other)?;
            Arc::new(MemBackend::new(*size, ns.block_size))
        }
        NamespaceSource::File { path, size, io_engine, buffered_io } => {
            let (bs, direct) = (ns.block_size, !*buffered_io);
            let open = || match ns.read_only {
                true => UringBackend::open_file_read_only(path, bs, direct),
                false => UringBackend::open_file_with(path, *size, bs, direct),
            };
            match uring(*io_engine, path, open)? {
                Some(b) => b,
                None if ns.read_only => Arc::new(FileBackend::open_read_only(path, bs)?),
                None => Arc::new(FileBackend::open(path, *size, bs)?),
            }
        }
        NamespaceSource::Block { path, io_engine, exclusive } => {
            let open = || match (ns.read_only, exclusive) {
                (true, _) => UringBackend::open_block_read_only(path, None),
                (false, true) => UringBackend::open_block(path, None),
                (false, false) => UringBackend::open_block_shared(path, None),
            };
            match uring(*io_engine, path, open)? {
                Some(b) => b,
                None if ns.read_only => Arc::new(BlockBackend::open_read_only(path, None)?),
                None if *exclusive => Arc::new(BlockBackend::open(path, None)?),
                None => Arc::new(BlockBackend::open_shared(path, None)?),
            }
        }
    })
}

/// The per-connection tuning of `cfg` (fixed while the target runs).
fn conn_options(cfg: &TargetConfig) -> ConnOptions {
    ConnOptions {
        poll_us: cfg.poll_us,
        send_buffer: cfg.send_buffer,
        congestion_control: cfg.congestion_control,
        so_priority: cfg.so_priority,
    }
}

/// Checks a subsystem NQN ([`crate::config::check_subsystem_nqn`]) for
/// configurations built without the parser: the well-known discovery NQN is
/// refused as nvmet's `nvmet_subsys_make` does (Connect to it reaches the
/// discovery controller, so the subsystem's namespaces would be unreachable,
/// and the discovery log would list the discovery NQN as an NVM subsystem).
fn check_subsystem_nqn(nqn: &str) -> std::io::Result<()> {
    crate::config::check_subsystem_nqn(nqn)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("subsystem {nqn:?}: {e}")))
}

/// The namespace `n` configures as `nsid` of subsystem `nqn`, on backend `b`.
/// Identifiers follow the store: the same file reopened (engine, buffering
/// or block size changed) keeps them, another file or a new RAM store gets others.
/// Fails when its reservations file cannot be read.
fn new_namespace(
    nqn: &str,
    nsid: u32,
    n: &NamespaceConfig,
    b: Arc<dyn Backend>,
) -> std::io::Result<Namespace> {
    let mut ns = Namespace::for_store(nqn, nsid, &store_identity(n), b)
        .with_read_only(n.read_only)
        .with_ana_group(n.ana_group)
        .with_reservations(n.reservations)
        .with_hosts(n.hosts.clone())
        .with_qos(n.qos);
    if let Some(z) = n.zoned {
        ns = ns.with_zones(z).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("zoned namespace: {e}"))
        })?;
        if let (Some(zones), Some(path)) = (&ns.zones, &n.zone_state_file) {
            restore_zone_states(nqn, nsid, zones, path)?;
            ns.zone_state_file = Some(path.clone());
        }
        if let Some(zones) = &ns.zones {
            let (empty, full) = zones.initial_counts();
            info!(subnqn = nqn, nsid, zone_size = z.zone_size, zones = zones.count(), empty, full, max_open = ?z.max_open, max_active = ?z.max_active, "zoned namespace");
        }
    }
    if n.qos.any() {
        info!(subnqn = nqn, nsid, limits = %n.qos, "namespace rate limits");
    }
    // As given (a given UUID keeps its own version bits).
    ns.uuid = n.ids.uuid.unwrap_or(ns.uuid);
    ns.nguid = n.ids.nguid.unwrap_or(ns.nguid);
    ns.eui64 = n.ids.eui64.unwrap_or(ns.eui64);
    if let Some(path) = &n.reservations_file {
        // SPDK names the bdev; `import-spdk` gives the namespace its UUID.
        let r = Reservations::persistent(path.clone(), n.reservations_format.file_format(ns.uuid))?;
        let st = r.report();
        if st.ptpls {
            info!(subnqn = nqn, nsid, file = %path.display(), registrants = st.regctl, rtype = st.rtype.0, "reservations restored (persist through power loss)");
        }
        ns.reservations = Some(r);
    }
    Ok(ns)
}

/// Restores a zoned namespace's zone states from `path`, which the last
/// clean stop wrote ([`save_zone_states`]), then deletes it: from then on
/// only another clean stop writes it, so a crash cannot bring back write
/// pointers older than the data written since (the zones then come from
/// the store: Full where it holds data). A file that does not fit the zones
/// is logged and deleted too; one that cannot be deleted fails the
/// namespace.
fn restore_zone_states(
    nqn: &str,
    nsid: u32,
    zones: &crate::core::zoned::Zones,
    path: &std::path::Path,
) -> std::io::Result<()> {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => warn!(subnqn = nqn, nsid, file = %path.display(), error = %e, "zone state file not read"),
        Ok(b) => match zones.restore(&b) {
            Ok(()) => {
                info!(subnqn = nqn, nsid, file = %path.display(), "zone states restored (saved by the last clean stop)")
            }
            Err(e) => {
                warn!(subnqn = nqn, nsid, file = %path.display(), error = %e, "zone state file not used")
            }
        },
    }
    std::fs::remove_file(path)
        .and_then(|()| crate::core::sync_parent(path))
        .map_err(|e| std::io::Error::new(e.kind(), format!("zone state file {}: {e}", path.display())))
}

/// Writes `zones`' states to `path` ([`crate::core::write_durably`]),
/// after the namespace's data was flushed.
fn save_zone_states(zones: &crate::core::zoned::Zones, path: &std::path::Path) -> std::io::Result<()> {
    crate::core::write_durably(path, &zones.save())
}

/// Applies the configured ANA states to the target's ports (port IDs follow
/// the order of `cfg.listen`); connected hosts of a port whose states
/// changed get the ANA Change notice.
fn apply_port_ana(target: &Target, cfg: &TargetConfig) {
    for (i, ana) in cfg.port_ana.iter().enumerate() {
        let id = cfg.port_id(i);
        if target.set_port_ana(id, ana.state, &ana.groups) {
            info!(port_id = id, state = ana_state_name(ana.state), groups = ?ana.groups.iter().map(|(g, s)| (g, ana_state_name(*s))).collect::<Vec<_>>(), "ANA states of port");
        }
    }
}

/// A port listening: its address and ID as configured, the address bound
/// (the actual port where 0 was asked), and the stop of its listener and of
/// the connections it accepted.
struct LivePort {
    addr: SocketAddr,
    id: u16,
    local: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Binds the `i`-th port of `cfg` (not yet registered or accepting).
fn bind_port(cfg: &TargetConfig, i: usize) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let addr = cfg.listen[i];
    let l = tcp::bind(addr, cfg.so_priority)
        .map_err(|e| std::io::Error::new(e.kind(), format!("listen {addr}: {e}")))?;
    let local = l.local_addr()?;
    Ok((l, local))
}

/// Registers the `i`-th port of `cfg`, bound to `l`, and starts accepting
/// on it.
fn open_port(
    target: &Arc<Target>,
    cfg: &TargetConfig,
    i: usize,
    (l, local): (tokio::net::TcpListener, SocketAddr),
    opts: ConnOptions,
) -> LivePort {
    let port_id = target.add_port_with_id(local, cfg.port_id(i));
    let params = cfg.port_params(i);
    if params != Default::default() {
        target.set_port_params(port_id, params);
        info!(port_id, in_capsule_data = ?params.in_capsule_data, max_queue_entries = ?params.max_queue_entries, "port's own queue limits");
    }
    let (stop, stop_rx) = watch::channel(false);
    let task = tokio::spawn(tcp::serve_port(target.clone(), l, port_id, opts, stop_rx));
    LivePort { addr: cfg.listen[i], id: port_id, local, stop, task }
}

/// Sets the referrals the discovery log lists and its port filter;
/// discovery controllers get the change notice when they changed.
fn apply_discovery(target: &Target, cfg: &TargetConfig) {
    if target.set_referrals(cfg.referrals.clone()) {
        let to: Vec<String> = cfg
            .referrals
            .iter()
            .map(|r| match &r.ports {
                None => format!("{} (portid {})", r.addr, r.portid),
                Some(p) => format!("{} (portid {}, through ports {p:?})", r.addr, r.portid),
            })
            .collect();
        info!(referrals = ?to, "discovery log referrals");
    }
    if target.set_discovery_filter(cfg.discovery_filter) {
        info!(discovery_filter = %cfg.discovery_filter, "discovery log filter");
    }
}

/// Builds a subsystem with its namespaces and no host keys.
pub fn build_subsystem(
    nqn: &str,
    model: &str,
    hosts: Option<Vec<String>>,
    nss: &[NamespaceConfig],
) -> std::io::Result<Arc<Subsystem>> {
    subsystem_from_config(&SubsystemConfig {
        nqn: nqn.into(),
        model: model.into(),
        serial: None,
        firmware: None,
        ieee_oui: None,
        allowed_hosts: hosts,
        host_keys: Default::default(),
        namespaces: nss.to_vec(),
        cntlids: crate::core::target::CNTLID_RANGE,
        ports: None,
        max_io_queues: None,
    })
}

/// Builds a subsystem with its namespaces from its configuration.
pub fn subsystem_from_config(cfg: &SubsystemConfig) -> std::io::Result<Arc<Subsystem>> {
    let (nqn, nss) = (cfg.nqn.as_str(), &cfg.namespaces);
    check_subsystem_nqn(nqn)?;
    let mut sub = Subsystem::new(nqn, &cfg.model, cfg.allowed_hosts.clone(), false)
        .with_host_keys(&cfg.host_keys)
        .with_cntlids(cfg.cntlids.clone())
        .with_max_io_queues(cfg.max_io_queues)
        .with_ports(cfg.ports.clone());
    if let Some(sn) = &cfg.serial {
        sub = sub.with_serial(sn);
    }
    if let Some(fr) = &cfg.firmware {
        sub = sub.with_firmware(fr);
    }
    if let Some(oui) = cfg.ieee_oui {
        sub = sub.with_ieee_oui(oui);
    }
    let s = Arc::new(sub);
    for (nsid, n) in assign_nsids(nss) {
        let b =
            open_backend(n).map_err(|e| std::io::Error::new(e.kind(), format!("namespace {nsid}: {e}")))?;
        info!(subnqn = nqn, nsid, backend = %b.describe(), size = b.size(), block_size = b.block_size(), read_only = n.read_only, "namespace");
        let ns = new_namespace(nqn, nsid, n, b)
            .map_err(|e| std::io::Error::new(e.kind(), format!("namespace {nsid}: {e}")))?;
        s.add_namespace(Arc::new(ns));
    }
    Ok(s)
}

/// What a reload changes of the ports `live`: the IDs of those `cfg` no
/// longer lists, and the positions in `cfg` of those to open. A port is the
/// same while its address and ID are; one whose ID changed on the same
/// address keeps listening as it was (its socket holds the address: a
/// restart applies that), said in the log.
fn port_changes(live: &[LivePort], cfg: &TargetConfig) -> (Vec<u16>, Vec<usize>) {
    let wanted: Vec<(SocketAddr, u16)> =
        (0..cfg.listen.len()).map(|i| (cfg.listen[i], cfg.port_id(i))).collect();
    let mut gone: Vec<u16> =
        live.iter().filter(|p| !wanted.contains(&(p.addr, p.id))).map(|p| p.id).collect();
    let mut added: Vec<usize> =
        (0..wanted.len()).filter(|&i| !live.iter().any(|p| (p.addr, p.id) == wanted[i])).collect();
    added.retain(|&i| {
        let (addr, id) = wanted[i];
        let Some(old) = live.iter().find(|p| p.addr == addr && addr.port() != 0 && gone.contains(&p.id)) else {
            return true;
        };
        warn!(addr = %addr, port_id = old.id, new_port_id = id, "reload: a port's ID is not changed while running (restart the target to apply it)");
        gone.retain(|&g| g != old.id);
        false
    });
    // An ID another port takes over would clash until that one is gone:
    // removals come first (see `reload`).
    (gone, added)
}

impl Server {
    /// Addresses listening now, in configuration order (actual ports where
    /// 0 was asked): those the target started with ([`Self::local_addrs`])
    /// as reloads added and removed ports.
    pub fn listening(&self) -> Vec<SocketAddr> {
        self.ports.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|p| p.local).collect()
    }

    /// Starts serving `cfg` on the current tokio runtime.
    pub async fn start(cfg: &TargetConfig) -> std::io::Result<Self> {
        let disc_nqn = cfg.discovery_nqn.as_deref().unwrap_or(nvmeof_common::spec::DISCOVERY_NQN);
        let target = Target::with_discovery_nqn(cfg.limits.clone(), disc_nqn);
        if cfg.discovery_nqn.is_some() {
            info!(discovery_nqn = disc_nqn, "unique discovery NQN (the well-known one is answered too)");
        }
        for s in &cfg.subsystems {
            target.add_subsystem(subsystem_from_config(s)?);
        }
        let (stop, stop_rx) = watch::channel(false);
        let opts = conn_options(cfg);
        let mut ports = Vec::new();
        for i in 0..cfg.listen.len() {
            ports.push(open_port(&target, cfg, i, bind_port(cfg, i)?, opts));
        }
        let local_addrs = ports.iter().map(|p| p.local).collect();
        let mut accept_tasks = Vec::new();
        let mut metrics_addr = None;
        if let Some(addr) = cfg.metrics_listen {
            let l = crate::metrics::bind(addr)?;
            metrics_addr = Some(l.local_addr()?);
            accept_tasks.push(tokio::spawn(crate::metrics::serve(l, target.clone(), stop_rx.clone())));
        }
        apply_port_ana(&target, cfg);
        apply_discovery(&target, cfg);
        info!(limits = ?target.limits, poll_us = cfg.poll_us, send_buffer = cfg.send_buffer, congestion_control = ?cfg.congestion_control, "target running");
        let configured = cfg
            .subsystems
            .iter()
            .flat_map(|s| assign_nsids(&s.namespaces).map(|(nsid, n)| ((s.nqn.clone(), nsid), n.clone())))
            .collect();
        let started = (cfg.limits.clone(), opts);
        Ok(Self {
            target,
            local_addrs,
            metrics_addr,
            stop,
            accept_tasks,
            ports: Mutex::new(ports),
            configured: Mutex::new(configured),
            started,
            started_metrics: cfg.metrics_listen,
        })
    }

    /// Applies a changed configuration while hosts stay connected (SIGHUP):
    /// new subsystems and namespaces are added, missing ones removed, a
    /// namespace whose store changed (path, device, engine, block size)
    /// replaced, and one whose configured size changed resized. Connected
    /// hosts get the Namespace Attribute Changed AEN. A subsystem's `ports`
    /// change live, as nvmet's port links (see
    /// [`Target::set_subsystem_ports`]), and so do ports: new ones listen
    /// (bound before anything else changes, so an address in use fails the
    /// reload), removed ones stop and their controllers are deleted
    /// ([`Target::remove_port`]). A port's own queue limits, its ID on an
    /// address that stays, limits,
    /// `poll_us`, `send_buffer`, `congestion_control`, the metrics address
    /// and the models and
    /// controller ID ranges of running subsystems are not changed (a warning
    /// says so when the configuration changes them). Allowed hosts and DH-HMAC-CHAP keys are replaced; hosts
    /// already connected keep their associations, as with nvmet. A changed
    /// `max_io_queues` deletes the subsystem's controllers so that their
    /// hosts reconnect and get it, and a removed subsystem's controllers are
    /// deleted, as nvmet's `attr_qid_max` store and port unlink do.
    ///
    /// "Changed" is against the configuration applied before, not the
    /// namespace's capacity: a file larger than its `size` keeps its length at
    /// startup (`size` creates or grows), so comparing with the capacity would
    /// truncate it on any reload of an unchanged configuration. For the same
    /// reason a larger `size` only grows a file; a smaller one resizes it to
    /// exactly that.
    pub fn reload(&self, cfg: &TargetConfig) -> std::io::Result<()> {
        let mut configured = self.configured.lock().unwrap_or_else(PoisonError::into_inner);
        // First open everything the configuration adds or replaces, so that a
        // namespace that cannot be opened fails the reload before anything
        // changes (namespaces listed before it used to be added, and removals
        // after it skipped).
        let mut new_subsystems = HashMap::new();
        let mut new_backends = HashMap::new();
        let disc_nqn = cfg.discovery_nqn.as_deref().unwrap_or(nvmeof_common::spec::DISCOVERY_NQN);
        for sc in &cfg.subsystems {
            check_subsystem_nqn(&sc.nqn).map_err(|e| unchanged(e, format_args!("reload")))?;
            // The file's parser refuses this too; a configuration built in
            // code is checked here.
            if sc.nqn == disc_nqn {
                let e = format!("subsystem {} has the discovery NQN", sc.nqn);
                return Err(unchanged(
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
                    format_args!("reload"),
                ));
            }
            match self.target.nvm_subsystem(&sc.nqn) {
                None => {
                    let s = subsystem_from_config(sc)
                        .map_err(|e| unchanged(e, format_args!("subsystem {}", sc.nqn)))?;
                    new_subsystems.insert(sc.nqn.clone(), s);
                }
                Some(s) => {
                    let identity_changed = s.model != sc.model
                        || sc.serial.as_ref().is_some_and(|sn| *sn != s.serial)
                        || sc.firmware.as_ref().is_some_and(|fr| *fr != s.firmware)
                        || sc.ieee_oui.unwrap_or(0) != s.ieee_oui;
                    if identity_changed || s.cntlids != sc.cntlids {
                        warn!(subnqn = %sc.nqn, "reload: the model, serial, firmware, IEEE OUI and controller ID range of a running subsystem are not changed (restart the target to apply them)");
                    }
                    for (nsid, n) in assign_nsids(&sc.namespaces) {
                        let key = (sc.nqn.clone(), nsid);
                        let open = match (s.namespace(nsid), configured.get(&key)) {
                            (None, _) => true,
                            (Some(_), Some(old)) => !same_store(old, n),
                            (Some(_), None) => false,
                        };
                        if open {
                            let b = open_backend(n)
                                .map_err(|e| unchanged(e, format_args!("{} namespace {nsid}", sc.nqn)))?;
                            new_backends.insert(key, b);
                        }
                    }
                }
            }
        }
        // Ports, as nvmet's ports/N come and go: bound first, so that an
        // address that cannot be had fails the reload before anything changes.
        let mut live = self.ports.lock().unwrap_or_else(PoisonError::into_inner);
        let (gone, added) = port_changes(&live, cfg);
        let mut bound = Vec::new();
        for &i in &added {
            bound.push((
                i,
                bind_port(cfg, i).map_err(|e| unchanged(e, format_args!("port {}", cfg.port_id(i))))?,
            ));
        }
        // Like a subsystem's model above: applied only by a restart, which
        // the log says (the reload reported success while the new
        // limit silently did not apply).
        let (limits, conn) = &self.started;
        for (what, changed) in [
            ("the limits are", *limits != cfg.limits),
            ("poll_us, send_buffer, congestion_control and so_priority are", *conn != conn_options(cfg)),
            ("the metrics address is", self.started_metrics != cfg.metrics_listen),
        ] {
            if changed {
                warn!("reload: {what} not changed while running (restart the target to apply them)");
            }
        }
        // nvmet's discovery_nqn store renames the discovery subsystem in
        // place; before the subsystems, one of which may take the old NQN.
        // Removed subsystems still hold their NQNs here, so a rename to one
        // of them waits for the next reload (said below).
        let rename_waits = match self.target.set_discovery_nqn(disc_nqn) {
            Ok(renamed) => {
                if renamed {
                    info!(discovery_nqn = disc_nqn, "reload: discovery subsystem renamed");
                }
                false
            }
            Err(_) => true,
        };
        for id in gone {
            if let Some(i) = live.iter().position(|p| p.id == id) {
                let p = live.remove(i);
                // Its listener and the connections it accepted stop; the
                // controllers through it are deleted.
                let _ = p.stop.send(true);
                let deleted = self.target.remove_port(id).unwrap_or(0);
                info!(port_id = id, addr = %p.local, controllers_deleted = deleted, "reload: port removed");
            }
        }
        for (i, b) in bound {
            let p = open_port(&self.target, cfg, i, b, self.started.1);
            info!(port_id = p.id, addr = %p.local, "reload: port added");
            live.push(p);
        }
        // In configuration order, as `listening` reports them.
        let position =
            |p: &LivePort| (0..cfg.listen.len()).find(|&i| (cfg.listen[i], cfg.port_id(i)) == (p.addr, p.id));
        live.sort_by_key(position);
        for p in live.iter() {
            let Some(params) = position(p).map(|i| cfg.port_params(i)) else { continue };
            if self.target.port_params(p.id) != params {
                // nvmet takes param_* only while the port is disabled; here
                // connected controllers keep the IOCCSZ and MQES they were
                // given, and their new I/O queues must agree.
                warn!(port_id = p.id, "reload: a port's own queue limits are not changed while running (restart the target to apply them)");
            }
        }
        drop(live);
        let mut failed = Vec::new();
        let mut keep = Vec::new();
        for sc in &cfg.subsystems {
            keep.push(sc.nqn.clone());
            let Some(s) = self.target.nvm_subsystem(&sc.nqn) else {
                let Some(s) = new_subsystems.remove(&sc.nqn) else { continue };
                info!(subnqn = %sc.nqn, "reload: adding subsystem");
                self.target.add_subsystem(s);
                for (nsid, n) in assign_nsids(&sc.namespaces) {
                    configured.insert((sc.nqn.clone(), nsid), n.clone());
                }
                continue;
            };
            // Hosts and keys change at once, as nvmet's allowed_hosts links
            // and dhchap_key writes do; connected hosts keep their associations.
            let change = self.target.set_subsystem_hosts(&s, sc.allowed_hosts.clone(), &sc.host_keys);
            if change.allowed {
                let hosts =
                    sc.allowed_hosts.as_ref().map_or_else(|| "any host".to_string(), |h| h.join(", "));
                info!(subnqn = %sc.nqn, allowed = %hosts, "reload: allowed hosts replaced; new connects use them, connected hosts stay");
            }
            if change.keys {
                info!(subnqn = %sc.nqn, hosts = sc.host_keys.len(), "reload: DH-HMAC-CHAP keys replaced; new associations use them");
            }
            // nvmet's attr_qid_max store deletes the subsystem's controllers
            // ("Force reconnect"): a Linux host asks for its queue count only
            // when it connects, and reconnects with the new limit.
            // Only a change hosts would see counts (none to 128 under a target
            // limit of 128 is none).
            let limit = self.target.limits.max_io_queues;
            let before = s.io_queue_limit(limit);
            s.set_max_io_queues(sc.max_io_queues);
            let now = s.io_queue_limit(limit);
            if now != before {
                let deleted = s.delete_controllers();
                info!(subnqn = %sc.nqn, max_io_queues = now, controllers_deleted = deleted, "reload: I/O queue limit changed; connected hosts reconnect to get it");
            }
            // nvmet's ports/N/subsystems link and unlink: discovery hears of
            // it, and the controllers connected through a port left are deleted.
            if let Some(deleted) = self.target.set_subsystem_ports(&s, sc.ports.clone()) {
                let ports = sc.ports.as_ref().map_or_else(|| "every port".to_string(), |p| format!("{p:?}"));
                info!(subnqn = %sc.nqn, ports = %ports, controllers_deleted = deleted, "reload: the ports the subsystem is exported on changed; controllers connected through a port it left are deleted");
            }
            let mut wanted = Vec::new();
            for (nsid, n) in assign_nsids(&sc.namespaces) {
                wanted.push(nsid);
                let key = (sc.nqn.clone(), nsid);
                match (s.namespace(nsid), new_backends.remove(&key)) {
                    (running, Some(b)) => {
                        let new = match new_namespace(&sc.nqn, nsid, n, b.clone()) {
                            Ok(ns) => ns,
                            Err(e) => {
                                failed.push(format!("{} namespace {nsid}: {e}", sc.nqn));
                                continue;
                            }
                        };
                        if running.is_some() {
                            info!(subnqn = %sc.nqn, nsid, backend = %b.describe(), "reload: replacing namespace (its store changed)");
                            s.remove_namespace(nsid);
                        } else {
                            info!(subnqn = %sc.nqn, nsid, backend = %b.describe(), "reload: adding namespace");
                        }
                        s.add_namespace(Arc::new(new));
                    }
                    (None, None) => continue,
                    (Some(ns), None) => {
                        // Its store's size now (nvmet's revalidate_size):
                        // a file or device grown or shrunk outside the target.
                        s.revalidate_namespace(&ns);
                        if s.set_namespace_hosts(nsid, n.hosts.clone()) == Ok(true) {
                            let hosts =
                                n.hosts.as_ref().map_or_else(|| "every host".to_string(), |h| h.join(", "));
                            info!(subnqn = %sc.nqn, nsid, hosts = %hosts, "reload: the hosts that see the namespace replaced; those that gained or lost it are notified");
                        }
                        if ns.qos.set(n.qos) {
                            info!(subnqn = %sc.nqn, nsid, limits = %n.qos, "reload: namespace rate limits changed");
                        }
                        if ns.set_ana_group(n.ana_group) {
                            // nvmet's configfs ana_grpid store: nvmet_send_ana_event(subsys, NULL).
                            info!(subnqn = %sc.nqn, nsid, ana_group = n.ana_group, "reload: moving namespace to another ANA group");
                            self.target.ana_changed(|c| Arc::ptr_eq(&c.subsys, &s));
                        }
                        let old = configured.get(&key).and_then(configured_size);
                        if let Some(sz) = configured_size(n).filter(|&sz| Some(sz) != old) {
                            let cur = ns.backend.size();
                            let grow_only = matches!(n.source, NamespaceSource::File { .. })
                                && old.is_none_or(|o| sz > o);
                            let sz = if grow_only { sz.max(cur) } else { sz };
                            let sz = sz / ns.block_size() as u64 * ns.block_size() as u64;
                            if sz != cur {
                                info!(subnqn = %sc.nqn, nsid, old = cur, new = sz, "reload: resizing namespace");
                                if let Err(e) = s.resize_namespace(nsid, sz) {
                                    failed.push(format!("{} namespace {nsid}: {e}", sc.nqn));
                                    continue;
                                }
                            }
                        }
                    }
                }
                configured.insert(key, n.clone());
            }
            for nsid in s.namespaces().keys().copied().collect::<Vec<_>>() {
                if !wanted.contains(&nsid) {
                    info!(subnqn = %sc.nqn, nsid, "reload: removing namespace");
                    s.remove_namespace(nsid);
                    configured.remove(&(sc.nqn.clone(), nsid));
                }
            }
        }
        for s in self.target.subsystems() {
            if !keep.contains(&s.nqn) {
                info!(subnqn = %s.nqn, "reload: removing subsystem");
                self.target.remove_subsystem(&s.nqn);
            }
        }
        configured.retain(|(nqn, _), _| keep.contains(nqn));
        if rename_waits {
            // Its subsystem is gone now.
            match self.target.set_discovery_nqn(disc_nqn) {
                Ok(_) => info!(discovery_nqn = disc_nqn, "reload: discovery subsystem renamed"),
                Err(e) => failed.push(format!("discovery_nqn: {e}")),
            }
        }
        apply_port_ana(&self.target, cfg);
        apply_discovery(&self.target, cfg);
        if failed.is_empty() {
            Ok(())
        } else {
            // Everything else is applied; a later reload retries these.
            Err(std::io::Error::other(format!("partly failed, the rest applied: {}", failed.join("; "))))
        }
    }

    /// Stops accepting, lets connections finish in-flight commands (bounded by
    /// `grace`), then flushes every backend.
    pub async fn shutdown(self, grace: Duration) {
        self.shutdown_or(grace, std::future::pending()).await
    }

    /// [`Server::shutdown`], except that the wait for connections also ends
    /// when `cut` completes (the binary's second SIGINT or SIGTERM: an admin
    /// who asks twice does not want to wait out the grace period). The
    /// backends are flushed either way.
    pub async fn shutdown_or(self, grace: Duration, cut: impl std::future::Future<Output = ()>) {
        let _ = self.stop.send(true);
        let ports = std::mem::take(&mut *self.ports.lock().unwrap_or_else(PoisonError::into_inner));
        for p in &ports {
            let _ = p.stop.send(true);
        }
        for t in ports.into_iter().map(|p| p.task).chain(self.accept_tasks) {
            let _ = t.await;
        }
        let deadline = tokio::time::Instant::now() + grace;
        tokio::pin!(cut);
        while self.target.connection_count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                _ = &mut cut => {
                    warn!("second stop signal: not waiting for connections any longer");
                    break;
                }
            }
        }
        if self.target.connection_count() > 0 {
            warn!(left = self.target.connection_count(), "connections still open after the grace period");
        }
        for s in self.target.subsystems() {
            for ns in s.namespaces().values() {
                if let Err(e) = ns.backend.sync_all() {
                    warn!(nsid = ns.nsid, error = %e, "flush on shutdown failed");
                    continue;
                }
                // Only over flushed data: the next start trusts these write pointers.
                if let (Some(z), Some(path)) = (&ns.zones, &ns.zone_state_file) {
                    match save_zone_states(z, path) {
                        Ok(()) => info!(nsid = ns.nsid, file = %path.display(), "zone states saved"),
                        Err(e) => {
                            warn!(nsid = ns.nsid, file = %path.display(), error = %e, "zone states not saved")
                        }
                    }
                }
            }
        }
        info!("target stopped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NQN: &str = "nqn.2026-11.io.nvmeof:reload";

    /// One port on 127.0.0.1:0 and subsystem [`NQN`] with `namespaces` (TOML).
    fn subsystem_config(namespaces: &str) -> TargetConfig {
        TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{NQN}\"\n\n{namespaces}"
        ))
        .unwrap()
    }

    /// NGUID, UUID and EUI-64 of namespace `nsid` of [`NQN`].
    fn ids(server: &Server, nsid: u32) -> ([u8; 16], [u8; 16], [u8; 8]) {
        let n = server.target.subsystem(NQN).unwrap().namespace(nsid).unwrap();
        (n.nguid, n.uuid, n.eui64)
    }

    fn config(path: &std::path::Path, size: &str) -> TargetConfig {
        TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{NQN}\"\n\n\
             [[subsystem.namespace]]\nfile = \"{}\"\nsize = \"{size}\"\nio_engine = \"threads\"\n\n\
             [[subsystem.namespace]]\nram = \"{size}\"\n",
            path.display()
        ))
        .unwrap()
    }

    /// A file longer than its configured `size` keeps its length at startup;
    /// a reload of the same configuration must not truncate it (it did: the
    /// reload compared `size` with the capacity and shrank the file to it).
    /// A larger `size` only grows a file (as at startup); a smaller one
    /// resizes it to exactly that. RAM namespaces take the size as given.
    #[tokio::test]
    async fn reload_resizes_only_namespaces_whose_configured_size_changed() {
        let path = std::env::temp_dir().join(format!("nvmeof-reload-{}", std::process::id()));
        std::fs::write(&path, vec![0xA5; 4 << 20]).unwrap();
        let cfg = config(&path, "1M");
        let server = Server::start(&cfg).await.unwrap();
        let size = |nsid| server.target.subsystem(NQN).unwrap().namespace(nsid).unwrap().backend.size();
        let file_len = || std::fs::metadata(&path).unwrap().len();
        assert_eq!((size(1), size(2), file_len()), (4 << 20, 1 << 20, 4 << 20));

        server.reload(&cfg).unwrap();
        assert_eq!((size(1), size(2), file_len()), (4 << 20, 1 << 20, 4 << 20), "unchanged config");
        assert_eq!(std::fs::read(&path).unwrap()[(4 << 20) - 1], 0xA5, "data past `size` kept");

        // Raised below the file's length: the file keeps it (it was cut to 2 MiB).
        let cfg = config(&path, "2M");
        server.reload(&cfg).unwrap();
        assert_eq!((size(1), size(2), file_len()), (4 << 20, 2 << 20, 4 << 20), "size raised");
        assert_eq!(std::fs::read(&path).unwrap()[(4 << 20) - 1], 0xA5, "data past `size` kept");
        // Raised past it: grown.
        let cfg = config(&path, "6M");
        server.reload(&cfg).unwrap();
        assert_eq!((size(1), size(2), file_len()), (6 << 20, 6 << 20, 6 << 20), "size raised past the file");
        // Lowered: resized to exactly that.
        let cfg = config(&path, "2M");
        server.reload(&cfg).unwrap();
        assert_eq!((size(1), size(2), file_len()), (2 << 20, 2 << 20, 2 << 20), "size lowered");
        server.reload(&cfg).unwrap();
        assert_eq!((size(1), size(2), file_len()), (2 << 20, 2 << 20, 2 << 20));

        server.shutdown(Duration::from_millis(100)).await;
        let _ = std::fs::remove_file(&path);
    }

    /// Removing an entry moves the implicit NSIDs of those after it: the NSID
    /// then names another store, which replaces the namespace instead of
    /// resizing the old one to the new entry's `size` (that cut the first
    /// file to the second's size).
    #[tokio::test]
    async fn reload_replaces_a_namespace_whose_nsid_now_names_another_file() {
        let dir = std::env::temp_dir();
        let a = dir.join(format!("nvmeof-reload-a-{}", std::process::id()));
        let b = dir.join(format!("nvmeof-reload-b-{}", std::process::id()));
        let ns = |p: &std::path::Path, size: &str| {
            format!(
                "[[subsystem.namespace]]\nfile = \"{}\"\nsize = \"{size}\"\nio_engine = \"threads\"\n",
                p.display()
            )
        };
        let both = subsystem_config(&format!("{}{}", ns(&a, "4M"), ns(&b, "1M")));
        let server = Server::start(&both).await.unwrap();
        server.reload(&subsystem_config(&ns(&b, "1M"))).unwrap();
        let s = server.target.subsystem(NQN).unwrap();
        assert_eq!(s.namespaces().keys().copied().collect::<Vec<_>>(), vec![1]);
        assert_eq!(s.namespace(1).unwrap().backend.size(), 1 << 20);
        assert_eq!(std::fs::metadata(&a).unwrap().len(), 4 << 20, "a.img truncated");
        assert_eq!(std::fs::metadata(&b).unwrap().len(), 1 << 20);
        server.shutdown(Duration::from_millis(100)).await;
        let _ = std::fs::remove_file(&a);
        let _ = std::fs::remove_file(&b);
    }

    /// A reload that gives an NSID another file gives it other identifiers
    /// (the Linux host revalidates a namespace by its identifiers alone, and
    /// with the old ones kept the block device and any filesystem on it
    /// silently moved to the new file); reopening the same file with another
    /// engine keeps them.
    #[tokio::test]
    async fn reload_that_moves_an_nsid_to_another_file_changes_its_identifiers() {
        let dir = std::env::temp_dir();
        let a = dir.join(format!("nvmeof-reload-ids-a-{}", std::process::id()));
        let b = dir.join(format!("nvmeof-reload-ids-b-{}", std::process::id()));
        let ns = |p: &std::path::Path, engine: &str| {
            format!(
                "[[subsystem.namespace]]\nfile = \"{}\"\nsize = \"1M\"\nio_engine = \"{engine}\"\n",
                p.display()
            )
        };
        let cfg = |body: String| subsystem_config(&body);
        let server =
            Server::start(&cfg(format!("{}{}", ns(&a, "threads"), ns(&b, "threads")))).await.unwrap();
        let (a1, b2) = (ids(&server, 1), ids(&server, 2));
        // Same file, another engine: the same namespace.
        server.reload(&cfg(format!("{}{}", ns(&a, "auto"), ns(&b, "threads")))).unwrap();
        assert_eq!(ids(&server, 1), a1);
        // The first entry removed: NSID 1 now names b.
        server.reload(&cfg(ns(&b, "threads"))).unwrap();
        let now = ids(&server, 1);
        assert_ne!(now.0, a1.0, "NGUID kept for another file");
        assert_ne!(now.1, a1.1, "UUID kept for another file");
        assert_ne!(now.2, a1.2, "EUI-64 kept for another file");
        assert_ne!(now, b2, "b's NSID 2 identifiers reused for NSID 1");
        server.shutdown(Duration::from_millis(100)).await;
        let _ = std::fs::remove_file(&a);
        let _ = std::fs::remove_file(&b);
    }

    /// A restart that gives an NSID another file gives it other identifiers
    /// (a reconnecting Linux host kept the block device, and any filesystem
    /// on it, for the other file); the same file keeps them, and a RAM
    /// namespace, empty again, gets new ones.
    #[tokio::test]
    async fn restart_with_another_file_under_an_nsid_changes_its_identifiers() {
        let dir = std::env::temp_dir();
        let a = dir.join(format!("nvmeof-restart-ids-a-{}", std::process::id()));
        let b = dir.join(format!("nvmeof-restart-ids-b-{}", std::process::id()));
        let cfg = |body: String| subsystem_config(&body);
        let file = |p: &std::path::Path| {
            format!("[[subsystem.namespace]]\nfile = \"{}\"\nsize = \"1M\"\n", p.display())
        };
        let ram = "[[subsystem.namespace]]\nram = \"1M\"\n".to_string();
        let ids_after_start = |c: TargetConfig| async move {
            let server = Server::start(&c).await.unwrap();
            let ids = ids(&server, 1);
            server.shutdown(Duration::from_millis(100)).await;
            ids
        };
        let first = ids_after_start(cfg(file(&a))).await;
        assert_eq!(ids_after_start(cfg(file(&a))).await, first, "same file, other identifiers");
        let other = ids_after_start(cfg(file(&b))).await;
        assert_ne!(other.0, first.0, "NGUID kept for another file");
        assert_ne!(other.1, first.1, "UUID kept for another file");
        assert_ne!(other.2, first.2, "EUI-64 kept for another file");
        assert_ne!(
            ids_after_start(cfg(ram.clone())).await,
            ids_after_start(cfg(ram)).await,
            "RAM identifiers repeated"
        );
        let _ = std::fs::remove_file(&a);
        let _ = std::fs::remove_file(&b);
    }

    /// A namespace that cannot be opened fails the reload before anything
    /// changes (it used to add the namespaces listed before it and skip the
    /// removals after it).
    #[tokio::test]
    async fn reload_that_cannot_open_a_namespace_changes_nothing() {
        let missing = std::env::temp_dir().join(format!("nvmeof-reload-missing-{}", std::process::id()));
        let ns = |nsid: u32, what: &str| format!("[[subsystem.namespace]]\nnsid = {nsid}\n{what}\n");
        let cfg = |nss: &[String]| {
            TargetConfig::from_toml(&format!(
                "[[port]]\nlisten = \"127.0.0.1:0\"\n[[subsystem]]\nnqn = \"{NQN}\"\n{}",
                nss.concat()
            ))
            .unwrap()
        };
        let server = Server::start(&cfg(&[ns(1, "ram = \"1M\""), ns(4, "ram = \"1M\"")])).await.unwrap();
        let nsids = || server.target.subsystem(NQN).unwrap().namespaces().keys().copied().collect::<Vec<_>>();
        // Adds 3, cannot open 2 (no `size`: the file must exist), drops 4.
        let bad = cfg(&[
            ns(1, "ram = \"1M\""),
            ns(3, "ram = \"2M\""),
            ns(2, &format!("file = \"{}\"", missing.display())),
        ]);
        let e = server.reload(&bad).unwrap_err().to_string();
        assert_eq!(nsids(), vec![1, 4]);
        assert!(e.contains("namespace 2") && e.contains("namespaces are unchanged"), "{e}");
        // Without the bad namespace it applies.
        server.reload(&cfg(&[ns(1, "ram = \"1M\""), ns(3, "ram = \"2M\"")])).unwrap();
        assert_eq!(nsids(), vec![1, 3]);
        server.shutdown(Duration::from_millis(100)).await;
    }

    /// A reload renames the discovery subsystem in place (nvmet's
    /// `discovery_nqn` store): its old NQN may then name a subsystem, and a
    /// rename to the NQN of a subsystem the same reload removes applies once
    /// that one is gone.
    #[tokio::test]
    async fn reload_renames_the_discovery_subsystem() {
        const DISC: &str = "nqn.2026-12.io.nvmeof:disc";
        const DISC2: &str = "nqn.2026-12.io.nvmeof:disc2";
        let cfg = |disc: &str, nqn: &str| {
            TargetConfig::from_toml(&format!(
                "discovery_nqn = \"{disc}\"\n[[port]]\nlisten = \"127.0.0.1:0\"\n[[subsystem]]\nnqn = \"{nqn}\"\n\
                 [[subsystem.namespace]]\nram = \"1M\"\n"
            ))
            .unwrap()
        };
        let server = Server::start(&cfg(DISC, NQN)).await.unwrap();
        assert_eq!(server.target.discovery_nqn(), DISC);
        // Renamed, and the old NQN is now a subsystem's.
        server.reload(&cfg(DISC2, DISC)).unwrap();
        assert_eq!(server.target.discovery_nqn(), DISC2);
        assert!(Arc::ptr_eq(&server.target.subsystem(DISC2).unwrap(), &server.target.discovery));
        assert!(!server.target.subsystem(DISC).unwrap().discovery);
        assert!(server.target.subsystem(NQN).is_none());
        // Back to DISC, which the same reload takes from the subsystem.
        server.reload(&cfg(DISC, "nqn.2026-12.io.nvmeof:other")).unwrap();
        assert_eq!(server.target.discovery_nqn(), DISC);
        assert!(Arc::ptr_eq(&server.target.subsystem(DISC).unwrap(), &server.target.discovery));
        assert!(server.target.subsystem(DISC2).is_none());
        assert!(server.target.subsystem("nqn.2026-12.io.nvmeof:other").is_some());
        server.shutdown(Duration::from_millis(100)).await;
    }
}
