//! One namespace reached through several controllers (paths) of a
//! subsystem, chosen by ANA state the way Linux native multipath does
//! (`drivers/nvme/host/multipath.c`):
//!
//! - a path is usable while its controller is live and its ANA state,
//!   the state of the namespace's group through that controller's port, is
//!   optimized or non-optimized (`nvme_path_is_disabled`, `__nvme_find_path`);
//!   optimized paths are used first, in turn (the `round-robin` iopolicy),
//!   the one with the fewest commands outstanding (`queue-depth`) or the
//!   first of them ([`PathPolicy::First`]), non-optimized ones only when no
//!   optimized path is usable;
//! - a command that fails with a path error is retried on another path
//!   (`nvme_failover_req`): a status of type 3h (path related) without DNR
//!   (`nvme_is_path_error`), or the loss of the connection or controller.
//!   An ANA status also marks the path with the state it reports and has the
//!   ANA log re-read (`NVME_NS_ANA_PENDING`, `nvme_ana_work`);
//! - each path's state follows the ANA Change notices of its controller
//!   ([`crate::ControllerEvent::AnaChanged`]) and is re-read after each
//!   reconnect (`nvme_mpath_init_identify`);
//! - with no usable path, a command waits for one (Linux queues it while a
//!   path may come back, `nvme_available_path`), here for at most
//!   [`MultipathOptions::no_path_timeout`].

use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nvmeof_common::spec::log::{AnaLog, AnaState};
use nvmeof_common::spec::reservation::{
    AcquireAction, RegisterAction, ReleaseAction, ReservationStatus, ReservationType,
};
use nvmeof_common::status::StatusCodeType;
use tokio::sync::{broadcast, watch, Notify};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::controller::{Controller, ControllerState};
use crate::error::{Error, Result};
use crate::events::ControllerEvent;
use crate::namespace::{IoFlags, Namespace};
use crate::options::{ConnectOptions, ReconnectPolicy};

/// Which of the usable paths of the best ANA state a command takes (Linux's
/// `iopolicy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PathPolicy {
    /// Each in turn (Linux's `round-robin`): spreads the load over ports.
    #[default]
    RoundRobin,
    /// The first in the order given (what Linux's default `numa` policy
    /// does on one node): the others are standbys.
    First,
    /// The one with the fewest commands outstanding (Linux's `queue-depth`,
    /// `nvme_queue_depth_path`): a path whose port or link is slower or
    /// busier gets less, where round-robin gives each the same share. Linux
    /// counts a controller's commands; this counts those of this handle
    /// (and its clones), so that the count costs nothing on the
    /// controller's queues. Ties are taken in turn.
    QueueDepth,
}

/// Options of a [`MultipathNamespace`].
#[derive(Clone, Debug)]
pub struct MultipathOptions {
    /// Path choice among the usable paths of the best ANA state.
    pub policy: PathPolicy,
    /// How long a command waits for a usable path when there is none, before
    /// it fails (with the last path error, or [`Error::NoPath`]).
    pub no_path_timeout: Duration,
    /// Most paths one command tries (a retry on the same path after a state
    /// change counts too) before it fails with the last path error.
    pub max_attempts: u32,
}

impl Default for MultipathOptions {
    fn default() -> Self {
        Self { policy: PathPolicy::RoundRobin, no_path_timeout: Duration::from_secs(30), max_attempts: 16 }
    }
}

/// What [`MultipathNamespace::paths`] reports for one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathStatus {
    /// The controller's address.
    pub addr: std::net::SocketAddr,
    /// Controller ID of its current association.
    pub cntlid: u16,
    /// Association state.
    pub state: ControllerState,
    /// The namespace's ANA state through this path.
    pub ana: AnaState,
    /// Commands (calls of this handle) sent through this path.
    pub commands: u64,
    /// Commands of this handle outstanding on this path now (what
    /// [`PathPolicy::QueueDepth`] compares).
    pub outstanding: u64,
}

struct Path {
    ctrl: Controller,
    ns: Namespace,
    ana: AtomicU8,
    /// Change count of the newest ANA log applied: an older log (a notice's,
    /// read before the log `new` read) must not undo a newer state.
    chgcnt: AtomicU64,
    /// Asks the path's watcher to re-read the ANA log.
    reread: Notify,
    commands: AtomicU64,
    /// Commands of this handle outstanding on the path.
    outstanding: AtomicU64,
}

/// One command outstanding on a path: counted from the attempt's start until
/// it completes, fails or is dropped (a caller's timeout or cancellation).
struct Outstanding<'a>(&'a AtomicU64);

impl<'a> Outstanding<'a> {
    fn new(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Outstanding<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What path choice knows of one path.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    ana: AnaState,
    usable: bool,
    outstanding: u64,
}

/// The index of the path a command takes: a usable optimized path, else a
/// usable non-optimized one, by `policy`, looking from `start` on (the
/// turn); `avoid`, the path a command just failed on, only when nothing else
/// is usable. Sans-IO, so that the policies are tested without controllers.
fn choose(
    n: usize,
    path: impl Fn(usize) -> Candidate,
    policy: PathPolicy,
    start: usize,
    avoid: Option<usize>,
) -> Option<usize> {
    for want in [AnaState::OPTIMIZED, AnaState::NON_OPTIMIZED] {
        let mut eligible = (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| Some(i) != avoid)
            .map(|i| (i, path(i)))
            .filter(|(_, c)| c.ana == want && c.usable);
        let found = match policy {
            PathPolicy::RoundRobin | PathPolicy::First => eligible.next().map(|(i, _)| i),
            // The first of the least loaded (`min_by_key` keeps the last).
            PathPolicy::QueueDepth => eligible
                .fold(None, |best: Option<(usize, u64)>, (i, c)| match best {
                    Some(b) if b.1 <= c.outstanding => Some(b),
                    _ => Some((i, c.outstanding)),
                })
                .map(|(i, _)| i),
        };
        if found.is_some() {
            return found;
        }
    }
    avoid.filter(|&i| path(i).usable)
}

impl Path {
    fn ana(&self) -> AnaState {
        AnaState(self.ana.load(Ordering::Acquire))
    }

    fn set_ana(&self, st: AnaState, why: &str) {
        let old = AnaState(self.ana.swap(st.0, Ordering::AcqRel));
        if old != st {
            info!(addr = %self.ctrl.addr(), nsid = self.ns.nsid(), from = ?old.name(), to = ?st.name(), why, "path ANA state");
        }
    }

    /// The namespace's state in `log`; unchanged where no group lists it, or
    /// where the log is older than one applied before (unless `fresh`: after
    /// a reconnect, whose controller may count from 0 again).
    fn apply(&self, log: &AnaLog, why: &str, fresh: bool) {
        let seen = self.chgcnt.load(Ordering::Acquire);
        if !fresh && log.chgcnt < seen {
            debug!(nsid = self.ns.nsid(), chgcnt = log.chgcnt, seen, "older ANA log ignored");
            return;
        }
        self.chgcnt.store(log.chgcnt, Ordering::Release);
        match log.groups.iter().find(|g| g.nsids.contains(&self.ns.nsid())) {
            Some(g) => self.set_ana(g.state, why),
            None => debug!(nsid = self.ns.nsid(), "namespace in no group of the ANA log"),
        }
    }

    fn has_ana(&self) -> bool {
        self.ctrl.info().identify.cmic & 0x08 != 0
    }

    async fn reread(&self, why: &str, fresh: bool) {
        if !self.has_ana() {
            return;
        }
        match self.ctrl.ana_log().await {
            Ok(log) => self.apply(&log, why, fresh),
            Err(e) => debug!(addr = %self.ctrl.addr(), error = %e, "cannot re-read the ANA log"),
        }
    }

    fn usable(&self) -> bool {
        self.ctrl.state() == ControllerState::Live
            && matches!(self.ana(), AnaState::OPTIMIZED | AnaState::NON_OPTIMIZED)
    }
}

type EventRx = broadcast::Receiver<ControllerEvent>;
type StateRx = watch::Receiver<ControllerState>;

struct Shared {
    nsid: u32,
    paths: Vec<Arc<Path>>,
    opts: MultipathOptions,
    rr: AtomicUsize,
    /// Raised on every change of a path's state.
    changed: watch::Sender<u64>,
    watchers: Vec<JoinHandle<()>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for w in &self.watchers {
            w.abort();
        }
    }
}

/// A namespace reached through several controllers of one subsystem, with
/// path choice and failover by ANA state (see the module documentation).
/// Cheap to clone. The controllers stay open while a clone lives.
#[derive(Clone)]
pub struct MultipathNamespace {
    inner: Arc<Shared>,
}

impl std::fmt::Debug for MultipathNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultipathNamespace")
            .field("nsid", &self.inner.nsid)
            .field("paths", &self.paths())
            .finish()
    }
}

/// Whether `e` is worth retrying on another path: a path-related status
/// (type 3h) without DNR, as Linux's `nvme_is_path_error`, or the loss of
/// the command's connection or controller (Linux fails such commands over
/// with a host path status).
fn is_path_error(e: &Error) -> bool {
    match e {
        Error::Nvme { status, .. } => status.sct() == StatusCodeType::PATH && !status.dnr(),
        Error::Transport(_)
        | Error::Protocol(_)
        | Error::Timeout(_)
        | Error::ConnectionLost
        | Error::ControllerLost(_) => true,
        _ => false,
    }
}

/// The state an ANA status says the path is in.
fn ana_of_status(e: &Error) -> Option<AnaState> {
    let code = e.status()?.code();
    [
        (nvmeof_common::Status::ANA_INACCESSIBLE, AnaState::INACCESSIBLE),
        (nvmeof_common::Status::ANA_PERSISTENT_LOSS, AnaState::PERSISTENT_LOSS),
        (nvmeof_common::Status::ANA_TRANSITION, AnaState::CHANGE),
    ]
    .into_iter()
    .find(|(s, _)| *s == code)
    .map(|(_, a)| a)
}

/// Keeps one path's ANA state current: ANA Change notices, reconnects, and
/// re-read requests after an ANA status.
async fn watch_path(path: Arc<Path>, changed: watch::Sender<u64>, mut events: EventRx, mut state: StateRx) {
    loop {
        tokio::select! {
            r = events.recv() => match r {
                Ok(ControllerEvent::AnaChanged(log)) => path.apply(&log, "ANA change notice", false),
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(_)) => path.reread("events missed", false).await,
                Err(broadcast::error::RecvError::Closed) => return,
            },
            r = state.changed() => {
                if r.is_err() {
                    return;
                }
                let s = *state.borrow_and_update();
                info!(addr = %path.ctrl.addr(), state = ?s, "path controller state");
                if s == ControllerState::Live {
                    // Notices raised while it was down are lost with the association.
                    path.reread("reconnected", true).await;
                }
            }
            _ = path.reread.notified() => path.reread("ANA status", false).await,
        }
        changed.send_modify(|g| *g += 1);
    }
}

/// Runs `$op`, an I/O call on the `Namespace` of a usable path, failing
/// over to another path after a path error ([`Attempts`]); returns its value.
macro_rules! on_a_path {
    ($mp:expr, |$ns:ident| $op:expr) => {
        on_a_path!($mp, |_: &Error| true, |$ns| $op)
    };
    // `$retry`: whether an error may move the command to another path at
    // all (then `Attempts::failed` decides by the error).
    ($mp:expr, $retry:expr, |$ns:ident| $op:expr) => {{
        let mut attempts = $mp.attempts();
        loop {
            let path = attempts.next().await?;
            let $ns = &path.ns;
            let outstanding = Outstanding::new(&path.outstanding);
            let r = $op.await;
            drop(outstanding);
            match r {
                Ok(v) => break Ok(v),
                Err(e) if ($retry)(&e) => attempts.failed(&path, e)?,
                Err(e) => break Err(e),
            }
        }
    }};
}

/// `opts` for one path: outstanding commands of a lost connection fail at
/// once instead of waiting for its reconnect (`reconnect.requeue` off), so
/// they fail over.
fn path_options(opts: ConnectOptions) -> ConnectOptions {
    ConnectOptions { reconnect: ReconnectPolicy { requeue: false, ..opts.reconnect.clone() }, ..opts }
}

/// For a command that must not run twice (a reservation Register, Acquire
/// or Release): it moves to another path only when the path refused it
/// unexecuted (an ANA status); any other error, a lost connection included,
/// is returned (the Linux host sends `pr_ops` through one path,
/// `nvme_send_ns_head_pr_command`, and does not retry them).
fn refused_unexecuted(e: &Error) -> bool {
    ana_of_status(e).is_some()
}

impl MultipathNamespace {
    /// Namespace `nsid` through each of `paths` (controllers of one
    /// subsystem, one per port): Identify Namespace and the ANA log through
    /// each. Fails when `paths` is empty, when they are not all of one
    /// subsystem, or when the namespace differs between them (identifiers,
    /// size or block size: Linux's `nvme_ns_ids_equal` check).
    pub async fn new(paths: Vec<Controller>, nsid: u32, opts: MultipathOptions) -> Result<Self> {
        let Some(first) = paths.first().cloned() else {
            return Err(Error::InvalidArgument("no paths".into()));
        };
        let subnqn = first.subnqn().to_string();
        let mut built = Vec::with_capacity(paths.len());
        for ctrl in paths {
            if ctrl.subnqn() != subnqn {
                return Err(Error::InvalidArgument(format!(
                    "paths to different subsystems: {subnqn} and {}",
                    ctrl.subnqn()
                )));
            }
            let ns = ctrl.namespace(nsid).await?.for_multipath();
            if let Some(p) = built.first().map(|(p, _): &(Arc<Path>, _)| &p.ns) {
                let (a, b) = (p.identify(), ns.identify());
                if (a.nguid, a.eui64, p.block_size(), p.blocks())
                    != (b.nguid, b.eui64, ns.block_size(), ns.blocks())
                {
                    return Err(Error::Controller(format!(
                        "namespace {nsid} differs between {} and {} (identifiers, size or block size)",
                        first.addr(),
                        ctrl.addr()
                    )));
                }
            }
            // Subscribed before the first ANA log read: a notice after it is not missed.
            let rx = (ctrl.events(), ctrl.subscribe_state());
            let path = Arc::new(Path {
                ctrl,
                ns,
                ana: AtomicU8::new(AnaState::OPTIMIZED.0),
                chgcnt: AtomicU64::new(0),
                reread: Notify::new(),
                commands: AtomicU64::new(0),
                outstanding: AtomicU64::new(0),
            });
            if path.has_ana() {
                let log = path.ctrl.ana_log().await?;
                path.apply(&log, "initial ANA log", true);
            }
            built.push((path, rx));
        }
        let (changed, _) = watch::channel(0);
        let mut watchers = Vec::with_capacity(built.len());
        let mut paths = Vec::with_capacity(built.len());
        for (p, (ev, st)) in built {
            watchers.push(tokio::spawn(watch_path(p.clone(), changed.clone(), ev, st)));
            paths.push(p);
        }
        Ok(Self { inner: Arc::new(Shared { nsid, paths, opts, rr: AtomicUsize::new(0), changed, watchers }) })
    }

    /// Connects to `subnqn` at each of `addrs` with `opts` (outstanding
    /// commands of a lost connection failing at once instead of waiting
    /// for its reconnect, so they fail over: `reconnect.requeue` off) and
    /// builds the namespace over all of them ([`Self::new`]). Fails if any
    /// path fails to connect.
    pub async fn connect(
        addrs: &[std::net::SocketAddr],
        subnqn: &str,
        nsid: u32,
        opts: ConnectOptions,
        mp: MultipathOptions,
    ) -> Result<Self> {
        let opts = path_options(opts);
        let mut ctrls = Vec::with_capacity(addrs.len());
        for a in addrs {
            ctrls.push(Controller::connect(*a, subnqn, opts.clone()).await?);
        }
        Self::new(ctrls, nsid, mp).await
    }

    /// Finds every path to `subnqn` in the discovery log at `discovery`
    /// (and those of its referrals, [`crate::discover_all`]: what `nvme
    /// connect-all` reads), connects to each as [`Self::connect`] does and
    /// builds the namespace over them: an application names one discovery
    /// address and gets every port the target lists for it. The discovery
    /// connections use `opts` (host identity, keys, source address, digests)
    /// without I/O queues, keep-alive, events or reconnects. A listed path
    /// that cannot be connected is left out, with a warning, while another
    /// connects (`connect-all` goes on too); with none, the last error is
    /// returned. Fails with [`Error::InvalidArgument`] when no log lists
    /// `subnqn`.
    pub async fn discover(
        discovery: std::net::SocketAddr,
        subnqn: &str,
        nsid: u32,
        opts: ConnectOptions,
        mp: MultipathOptions,
    ) -> Result<Self> {
        let logs = crate::discover_all(discovery, opts.clone().for_discovery()).await?;
        let entries = crate::subsystem_paths(logs.iter().filter_map(|d| d.log.as_ref().ok()), subnqn);
        if entries.is_empty() {
            return Err(Error::InvalidArgument(format!("no discovery log at {discovery} lists {subnqn}")));
        }
        let opts = path_options(opts);
        let mut ctrls = Vec::with_capacity(entries.len());
        let mut last = None;
        for e in &entries {
            match crate::connect_entry(e, opts.clone()).await {
                Ok(c) => ctrls.push(c),
                Err(err) => {
                    warn!(subnqn, traddr = %e.traddr, trsvcid = %e.trsvcid, error = %err, "a listed path does not connect: left out");
                    last = Some(err);
                }
            }
        }
        match last {
            Some(err) if ctrls.is_empty() => Err(err),
            _ => {
                info!(
                    subnqn,
                    paths = ctrls.len(),
                    listed = entries.len(),
                    "multipath namespace from discovery"
                );
                Self::new(ctrls, nsid, mp).await
            }
        }
    }

    /// Namespace ID.
    pub fn nsid(&self) -> u32 {
        self.inner.nsid
    }

    /// Logical block size in bytes.
    pub fn block_size(&self) -> u32 {
        self.inner.paths[0].ns.block_size()
    }

    /// Namespace size in blocks.
    pub fn blocks(&self) -> u64 {
        self.inner.paths[0].ns.blocks()
    }

    /// Each path's controller, association state, ANA state and use.
    pub fn paths(&self) -> Vec<PathStatus> {
        self.inner
            .paths
            .iter()
            .map(|p| PathStatus {
                addr: p.ctrl.addr(),
                cntlid: p.ctrl.info().cntlid,
                state: p.ctrl.state(),
                ana: p.ana(),
                commands: p.commands.load(Ordering::Relaxed),
                outstanding: p.outstanding.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// The controllers, in the order given.
    pub fn controllers(&self) -> Vec<Controller> {
        self.inner.paths.iter().map(|p| p.ctrl.clone()).collect()
    }

    /// A usable path: an optimized one, else a non-optimized one, by the
    /// policy. `avoid`, the path a command just failed on, comes last: after
    /// a lost connection its controller still says live until the supervisor
    /// hears of the loss, where Linux has already marked it resetting.
    fn pick(&self, avoid: Option<&Arc<Path>>) -> Option<Arc<Path>> {
        let paths = &self.inner.paths;
        let start = match self.inner.opts.policy {
            PathPolicy::RoundRobin | PathPolicy::QueueDepth => self.inner.rr.fetch_add(1, Ordering::Relaxed),
            PathPolicy::First => 0,
        };
        let candidate = |i: usize| {
            let p = &paths[i];
            Candidate { ana: p.ana(), usable: p.usable(), outstanding: p.outstanding.load(Ordering::Relaxed) }
        };
        let avoid = avoid.and_then(|a| paths.iter().position(|p| Arc::ptr_eq(a, p)));
        choose(paths.len(), candidate, self.inner.opts.policy, start, avoid).map(|i| paths[i].clone())
    }

    /// Waits (bounded by the no-path timeout from `since`) for a usable path.
    async fn path(
        &self,
        since: tokio::time::Instant,
        last: &Option<Error>,
        avoid: Option<&Arc<Path>>,
    ) -> Result<Arc<Path>> {
        let mut rx = self.inner.changed.subscribe();
        let deadline = since + self.inner.opts.no_path_timeout;
        loop {
            rx.borrow_and_update();
            if let Some(p) = self.pick(avoid) {
                return Ok(p);
            }
            // Controllers become live again without an ANA change: look again now and then.
            let wake = deadline.min(tokio::time::Instant::now() + Duration::from_millis(100));
            let _ = tokio::time::timeout_at(wake, rx.changed()).await;
            if tokio::time::Instant::now() >= deadline {
                if let Some(p) = self.pick(avoid) {
                    return Ok(p);
                }
                return Err(last.clone().unwrap_or_else(|| Error::NoPath(self.describe().into())));
            }
        }
    }

    fn describe(&self) -> String {
        let v: Vec<String> = self
            .paths()
            .iter()
            .map(|p| format!("{} {:?} {}", p.addr, p.state, p.ana.name().unwrap_or("reserved")))
            .collect();
        format!("no usable path to namespace {}: {}", self.inner.nsid, v.join(", "))
    }

    fn attempts(&self) -> Attempts<'_> {
        Attempts { mp: self, since: tokio::time::Instant::now(), last: None, failed_on: None, made: 0 }
    }

    /// Reads `buf.len()` bytes (whole blocks) from `lba`.
    pub async fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.read_with(lba, buf, IoFlags::default()).await
    }

    /// [`Self::read`] with flags.
    pub async fn read_with(&self, lba: u64, buf: &mut [u8], flags: IoFlags) -> Result<()> {
        on_a_path!(self, |ns| ns.read_with(lba, buf, flags))
    }

    /// Writes `buf` (whole blocks) at `lba`.
    pub async fn write(&self, lba: u64, buf: &[u8]) -> Result<()> {
        self.write_with(lba, buf, IoFlags::default()).await
    }

    /// [`Self::write`] with flags (FUA).
    pub async fn write_with(&self, lba: u64, buf: &[u8], flags: IoFlags) -> Result<()> {
        on_a_path!(self, |ns| ns.write_with(lba, buf, flags))
    }

    /// Reads into `bufs` in order, as `preadv` does ([`Namespace::read_vectored`]:
    /// straight from the socket into each buffer); a retry on another path
    /// fills them again.
    pub async fn read_vectored(
        &self,
        lba: u64,
        bufs: &mut [std::io::IoSliceMut<'_>],
        flags: IoFlags,
    ) -> Result<()> {
        on_a_path!(self, |ns| ns.read_vectored(lba, bufs, flags))
    }

    /// Writes `bufs` in order, as `pwritev` does ([`Namespace::write_vectored`]:
    /// no copy into one buffer); a retry on another path sends them again.
    pub async fn write_vectored(
        &self,
        lba: u64,
        bufs: &[std::io::IoSlice<'_>],
        flags: IoFlags,
    ) -> Result<()> {
        on_a_path!(self, |ns| ns.write_vectored(lba, bufs, flags))
    }

    /// Reads `len` bytes (whole blocks) from `lba` into a new buffer, which
    /// the queue fills straight from the socket
    /// ([`Namespace::read_bytes`]); each attempt has its own buffer.
    pub async fn read_bytes(&self, lba: u64, len: usize) -> Result<bytes::Bytes> {
        on_a_path!(self, |ns| ns.read_bytes(lba, len))
    }

    /// Writes `data` (whole blocks) at `lba` without copying it
    /// ([`Namespace::write_bytes`]); a retry sends the same `Bytes` again.
    pub async fn write_bytes(&self, lba: u64, data: bytes::Bytes, flags: IoFlags) -> Result<()> {
        on_a_path!(self, |ns| ns.write_bytes(lba, data.clone(), flags))
    }

    /// Flush.
    pub async fn flush(&self) -> Result<()> {
        on_a_path!(self, |ns| ns.flush())
    }

    /// Compares `buf` with the blocks at `lba` ([`Namespace::compare`]):
    /// `Ok(false)` on a miscompare.
    pub async fn compare(&self, lba: u64, buf: &[u8]) -> Result<bool> {
        on_a_path!(self, |ns| ns.compare(lba, buf))
    }

    /// Compare and Write ([`Namespace::compare_and_write`]) through one
    /// path: `Ok(true)` when it wrote. A pair that ran and whose answer was
    /// lost must not run again (it would compare against its own write), so
    /// it moves to another path only when refused for its ANA state, as the
    /// reservation commands. The namespace's Compare and Writes are atomic
    /// against each other whichever controller they come through.
    pub async fn compare_and_write(
        &self,
        lba: u64,
        expected: &[u8],
        new: &[u8],
        flags: IoFlags,
    ) -> Result<bool> {
        on_a_path!(self, refused_unexecuted, |ns| ns.compare_and_write(lba, expected, new, flags))
    }

    /// Write Zeroes over `blocks` blocks from `lba`
    /// ([`Namespace::write_zeroes`]); after a path error the whole range is
    /// zeroed again on the next path (zeroing is idempotent).
    pub async fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool, flags: IoFlags) -> Result<()> {
        on_a_path!(self, |ns| ns.write_zeroes(lba, blocks, deallocate, flags))
    }

    /// [`Namespace::zero_out`] on a usable path (Write Zeroes, or writes of
    /// zeroes where the controller has none); after a path error the whole
    /// range is zeroed again on another path.
    pub async fn zero_out(&self, lba: u64, blocks: u64, flags: IoFlags) -> Result<()> {
        on_a_path!(self, |ns| ns.zero_out(lba, blocks, flags))
    }

    /// Verifies `blocks` blocks from `lba` ([`Namespace::verify`]); after a
    /// path error, the whole range again on the next path.
    pub async fn verify(&self, lba: u64, blocks: u64, flags: IoFlags) -> Result<()> {
        on_a_path!(self, |ns| ns.verify(lba, blocks, flags))
    }

    /// Deallocates the `(lba, blocks)` ranges ([`Namespace::deallocate`]);
    /// after a path error, all of them again on the next path.
    pub async fn deallocate(&self, ranges: &[(u64, u32)]) -> Result<()> {
        on_a_path!(self, |ns| ns.deallocate(ranges))
    }

    /// Copies blocks inside the namespace ([`Namespace::copy`]); after a
    /// path error, the whole copy again on the next path (the same result
    /// unless a source overlaps the destination).
    pub async fn copy(&self, ranges: &[(u64, u32)], dest_lba: u64, flags: IoFlags) -> Result<()> {
        on_a_path!(self, |ns| ns.copy(ranges, dest_lba, flags))
    }

    /// Reservation Register ([`Namespace::reservation_register`]) through
    /// one path: registrations belong to the host ID, shared by every path.
    /// Moved to another path only when refused for its ANA state.
    pub async fn reservation_register(
        &self,
        action: RegisterAction,
        current_key: u64,
        new_key: u64,
        ignore_existing_key: bool,
    ) -> Result<()> {
        on_a_path!(self, refused_unexecuted, |ns| ns.reservation_register(
            action,
            current_key,
            new_key,
            ignore_existing_key
        ))
    }

    /// Reservation Acquire ([`Namespace::reservation_acquire`]) through one path.
    pub async fn reservation_acquire(
        &self,
        action: AcquireAction,
        rtype: ReservationType,
        current_key: u64,
        preempt_key: u64,
    ) -> Result<()> {
        on_a_path!(self, refused_unexecuted, |ns| ns.reservation_acquire(
            action,
            rtype,
            current_key,
            preempt_key
        ))
    }

    /// Reservation Release ([`Namespace::reservation_release`]) through one path.
    pub async fn reservation_release(
        &self,
        action: ReleaseAction,
        rtype: ReservationType,
        current_key: u64,
    ) -> Result<()> {
        on_a_path!(self, refused_unexecuted, |ns| ns.reservation_release(action, rtype, current_key))
    }

    /// Reservation Report ([`Namespace::reservation_report`]), failed over like a read.
    pub async fn reservation_report(&self) -> Result<ReservationStatus> {
        on_a_path!(self, |ns| ns.reservation_report())
    }

    /// Shuts every path's controller down ([`Controller::shutdown`]); the
    /// first error, if any, after trying them all.
    pub async fn shutdown(&self) -> Result<()> {
        let mut first = Ok(());
        for p in &self.inner.paths {
            if let Err(e) = p.ctrl.shutdown().await {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

/// The paths one command tries, failing over on path errors.
struct Attempts<'a> {
    mp: &'a MultipathNamespace,
    since: tokio::time::Instant,
    last: Option<Error>,
    /// The path of the last failure.
    failed_on: Option<Arc<Path>>,
    made: u32,
}

impl Attempts<'_> {
    /// The path for the next attempt; the last path error once the attempts
    /// are used up.
    async fn next(&mut self) -> Result<Arc<Path>> {
        if self.made >= self.mp.inner.opts.max_attempts.max(1) {
            return Err(self.last.take().unwrap_or_else(|| Error::NoPath(self.mp.describe().into())));
        }
        self.made += 1;
        let p = self.mp.path(self.since, &self.last, self.failed_on.as_ref()).await?;
        p.commands.fetch_add(1, Ordering::Relaxed);
        Ok(p)
    }

    /// `Ok` to try again (a path error), else the error to return.
    fn failed(&mut self, p: &Arc<Path>, e: Error) -> Result<()> {
        if !is_path_error(&e) {
            return Err(e);
        }
        warn!(addr = %p.ctrl.addr(), nsid = self.mp.inner.nsid, attempt = self.made, error = %e, "path error; failing over");
        if let Some(st) = ana_of_status(&e) {
            p.set_ana(st, "ANA status");
            p.reread.notify_one();
        }
        self.last = Some(e);
        self.failed_on = Some(p.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmeof_common::Status;

    fn nvme(st: Status) -> Error {
        Error::Nvme {
            status: st,
            result: 0,
            command: crate::error::CommandInfo { qid: 1, opcode: 2, fctype: None, nsid: 1 },
        }
    }

    fn cand(ana: AnaState, usable: bool, outstanding: u64) -> Candidate {
        Candidate { ana, usable, outstanding }
    }

    fn choose_in(c: &[Candidate], policy: PathPolicy, start: usize, avoid: Option<usize>) -> Option<usize> {
        choose(c.len(), |i| c[i], policy, start, avoid)
    }

    /// Path choice as Linux's `__nvme_find_path` / `nvme_round_robin_path` /
    /// `nvme_queue_depth_path`: optimized before non-optimized, unusable
    /// paths never, the failed path only when nothing else is usable.
    #[test]
    fn path_choice_by_policy() {
        use PathPolicy::*;
        let (opt, non) = (AnaState::OPTIMIZED, AnaState::NON_OPTIMIZED);
        let three = [cand(opt, true, 5), cand(opt, true, 2), cand(opt, true, 2)];
        // Round-robin and first: the turn decides; queue depth: the least
        // loaded, the first of them from the turn on.
        assert_eq!(choose_in(&three, RoundRobin, 0, None), Some(0));
        assert_eq!(choose_in(&three, RoundRobin, 4, None), Some(1));
        assert_eq!(choose_in(&three, First, 0, None), Some(0));
        assert_eq!(choose_in(&three, QueueDepth, 0, None), Some(1));
        assert_eq!(choose_in(&three, QueueDepth, 2, None), Some(2));
        assert_eq!(choose_in(&three, QueueDepth, 3, None), Some(1));
        // Optimized first, even when busier.
        let mixed = [cand(non, true, 0), cand(opt, true, 9)];
        for policy in [RoundRobin, First, QueueDepth] {
            assert_eq!(choose_in(&mixed, policy, 0, None), Some(1), "{policy:?}");
            // The failed path only when no other is usable; non-optimized before it.
            assert_eq!(choose_in(&mixed, policy, 0, Some(1)), Some(0), "{policy:?}");
            let one = [cand(non, false, 0), cand(opt, true, 9)];
            assert_eq!(choose_in(&one, policy, 0, Some(1)), Some(1), "{policy:?}");
            // Unusable (controller not live, or inaccessible): never.
            let none = [cand(opt, false, 0), cand(AnaState::INACCESSIBLE, false, 0)];
            assert_eq!(choose_in(&none, policy, 0, None), None, "{policy:?}");
            assert_eq!(choose_in(&none, policy, 0, Some(0)), None, "{policy:?}");
        }
        let busy_opt = [cand(opt, true, 7), cand(non, true, 0), cand(opt, false, 0)];
        assert_eq!(choose_in(&busy_opt, QueueDepth, 1, None), Some(0), "the only usable optimized path");
        assert_eq!(choose_in(&[], QueueDepth, 0, None), None);
    }

    #[test]
    fn path_errors_are_those_linux_fails_over() {
        assert!(is_path_error(&nvme(Status::ANA_INACCESSIBLE)));
        assert!(is_path_error(&nvme(Status::ANA_TRANSITION)));
        assert!(is_path_error(&nvme(Status::HOST_PATH_ERROR)));
        assert!(!is_path_error(&nvme(Status::ANA_INACCESSIBLE.with_dnr())), "DNR: complete, no failover");
        assert!(!is_path_error(&nvme(Status::LBA_RANGE)));
        assert!(is_path_error(&Error::ConnectionLost));
        assert!(!is_path_error(&Error::InvalidArgument("x".into())));
        assert_eq!(ana_of_status(&nvme(Status::ANA_INACCESSIBLE.with_more())), Some(AnaState::INACCESSIBLE));
        assert_eq!(ana_of_status(&nvme(Status::ANA_TRANSITION)), Some(AnaState::CHANGE));
        assert_eq!(ana_of_status(&nvme(Status::HOST_PATH_ERROR)), None);
    }
}
