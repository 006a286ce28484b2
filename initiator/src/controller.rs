//! A connected NVMe-oF controller: association setup (reference §4.5, §5.1),
//! admin commands, keep-alive and reconnect.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use nvmeof_common::auth::{DhchapSecret, CONNECT_AUTHREQ_ASCR, CONNECT_AUTHREQ_ATR};
use nvmeof_common::opcode::AdminOpcode;
use nvmeof_common::spec::discovery::{DiscoveryLog, DiscoveryLogHeader, DISC_RECORD_LEN};
use nvmeof_common::spec::features::{FeatureId, GetFeaturesCmd, NumQueues, SetFeaturesCmd};
use nvmeof_common::spec::identify::{
    ctratt, decode_ns_desc_list, decode_ns_list, Cns, IdentifyCmd, IdentifyCtrlNvm, NsIdDescriptor,
    IDENTIFY_DATA_LEN, NS_LIST_MAX,
};
use nvmeof_common::spec::log::{AnaLog, GetLogPageCmd, LogPageId};
use nvmeof_common::spec::reservation::{ReservationNotification, NOTIFICATION_LOG_LEN};
use nvmeof_common::spec::{
    Cap, Cc, ConnectCmd, ConnectData, Csts, IdentifyController, IdentifyNamespace, PropertyGet,
    PropertyOffset, PropertySet, Vs, CNTLID_DYNAMIC, DISCOVERY_NQN,
};
use nvmeof_common::{Cqe, Sqe};
use tokio::net::TcpStream;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::auth::{self, Authentication, HostExchange};
use crate::driver::{
    sleep_until, spawn_driver, DriverCtrl, DriverParams, Payload, QueueShared, RxStats, SupMsg,
};
use crate::error::{AuthError, Error, Result};
use crate::events::{self, ControllerEvent};
use crate::namespace::Namespace;
use crate::options::{ConnectOptions, HostIdentity, QueueSelect};
use crate::queue::{Command, DataXfer, QueueConfig, ADMIN_INLINE_LIMIT, MAX_TAGS};

/// Admin queue entries (SQSIZE 31, like Linux).
const ADMIN_ENTRIES: u16 = 32;
/// Commands outstanding at once on the admin queue.
const ADMIN_TICKETS: u32 = 30;
/// Linux default shutdown timeout.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Association state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControllerState {
    /// All queues connected.
    Live,
    /// A connection failed; reconnecting. Requests wait (or fail, per policy).
    Reconnecting,
    /// Reconnecting gave up; every request fails with [`Error::ControllerLost`].
    Failed,
    /// [`Controller::shutdown`] ran or the last handle was dropped.
    Shutdown,
}

/// What the controller told us at connect time (refreshed on reconnect).
#[derive(Clone, Debug)]
pub struct ControllerInfo {
    /// Controller ID of the current association.
    pub cntlid: u16,
    /// CAP register.
    pub cap: Cap,
    /// VS register.
    pub vs: Vs,
    /// The CC value written when enabling (EN = 1).
    pub cc: Cc,
    /// Identify Controller data.
    pub identify: IdentifyController,
    /// Connected I/O queues.
    pub io_queues: u16,
    /// Of [`Self::io_queues`], the ones dedicated to commands other than reads
    /// (qids 1 to this; reads use the others), as
    /// [`ConnectOptions::write_queues`] asked and the controller's queue
    /// count allowed; 0 when every queue takes every command.
    pub write_queues: u16,
    /// Entries per I/O queue (SQSIZE + 1).
    pub queue_depth: u16,
    /// Largest data transfer per command in bytes, if limited: MDTS (or, where the controller reports
    /// none, its MAXH2CDATA, which nvmet enforces per command) and the `max_transfer` option.
    pub max_transfer: Option<u32>,
    /// In-capsule data limit on I/O queues (IOCCSZ·16 − 64, 0 if unsupported).
    pub inline_data: u32,
    /// Whether this is a discovery controller.
    pub discovery: bool,
    /// The NVM command set's size limits for commands that move no data
    /// (Identify CNS 06h: WZSL, DMRL, DMRSL, ...), read at connect as the Linux
    /// host's `nvme_init_non_mdts_limits` does; all zero (no limits) where the
    /// controller reports none (nvmet), refuses the Identify or is a discovery
    /// controller.
    pub nvm_limits: IdentifyCtrlNvm,
    /// Asynchronous events enabled (the Asynchronous Event Configuration
    /// value set): those of OAES the host reads logs for, 0 where none or
    /// [`ConnectOptions::async_events`] is off.
    pub async_events: u32,
    /// What the admin queue's DH-HMAC-CHAP used, when the controller asked
    /// for authentication (every queue of the association authenticates).
    pub authentication: Option<Authentication>,
}

/// Shared state behind every handle, also held by the supervisor task.
pub(crate) struct Core {
    addr: SocketAddr,
    subnqn: String,
    host: HostIdentity,
    opts: ConnectOptions,
    pub(crate) admin: Arc<QueueShared>,
    pub(crate) io: Vec<Arc<QueueShared>>,
    info: RwLock<Arc<ControllerInfo>>,
    pub(crate) state: watch::Sender<ControllerState>,
    /// Association number, raised before each reconnect attempt.
    pub(crate) epoch: AtomicU64,
    rr: AtomicUsize,
    /// An I/O command completed since keep-alive last looked (Linux
    /// `ctrl->comp_seen`, for traffic-based keep-alive).
    comp_seen: Arc<AtomicBool>,
    /// Of `io`, the first ones dedicated to commands other than reads
    /// ([`ConnectOptions::write_queues`]); 0 when every queue takes everything.
    write_queues: usize,
    /// The I/O queues in use and how many of them take the writes, packed
    /// as `in_use << 16 | writes` so that a request reads both at once
    /// ([`layout`]): all of `io` and `write_queues`, unless a reconnect was
    /// granted fewer queues than `io` has ([`Self::reestablish`]).
    layout: AtomicU32,
    /// Round-robin position among the read queues when `write_queues` > 0.
    rr_reads: AtomicUsize,
    /// Asynchronous events for [`Controller::events`].
    pub(crate) events: broadcast::Sender<ControllerEvent>,
    /// Next DH-HMAC-CHAP transaction identifier ([`Setup::t_ids`]).
    t_ids: AtomicU16,
    /// The DH-HMAC-CHAP secrets the next authentication uses
    /// ([`Controller::set_dhchap_secrets`]).
    secrets: RwLock<Secrets>,
    /// The size in blocks (NSZE) each namespace's handles share, by NSID:
    /// a Namespace Attribute Changed notice re-reads it for the namespaces
    /// it lists ([`Controller::refresh_namespace_sizes`]).
    ns_sizes: Mutex<std::collections::HashMap<u32, std::sync::Weak<AtomicU64>>>,
}

/// DH-HMAC-CHAP secrets: the host's, and the controller's for bidirectional authentication.
#[derive(Clone, Default)]
struct Secrets {
    key: Option<DhchapSecret>,
    ctrl_key: Option<DhchapSecret>,
}

pub(crate) struct Handle {
    core: Arc<Core>,
    supervisor: Mutex<Option<JoinHandle<()>>>,
    /// The task keeping an Asynchronous Event Request outstanding.
    events: Mutex<Option<JoinHandle<()>>>,
}

impl Handle {
    /// Stops the supervisor and the events task.
    fn stop_tasks(&self) {
        for t in [&self.supervisor, &self.events] {
            if let Some(h) = t.lock().unwrap_or_else(|e| e.into_inner()).take() {
                h.abort();
            }
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.stop_tasks();
        for q in self.core.io.iter().chain(std::iter::once(&self.core.admin)) {
            q.send_ctrl(DriverCtrl::Shutdown);
        }
        self.core.state.send_replace(ControllerState::Shutdown);
    }
}

/// A connected controller. Cheap to clone; all clones share the association.
/// Dropping the last clone closes every connection (without the CC shutdown
/// handshake; call [`Controller::shutdown`] for that).
#[derive(Clone)]
pub struct Controller {
    inner: Arc<Handle>,
}

impl std::fmt::Debug for Controller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.inner.core;
        f.debug_struct("Controller")
            .field("addr", &c.addr)
            .field("subnqn", &c.subnqn)
            .field("cntlid", &self.info().cntlid)
            .field("state", &self.state())
            .finish()
    }
}

/// Connects a queue's socket to `addr`. The options that must precede the
/// connect (source address, interface, type of service) are set before it,
/// in the order of Linux's `nvme_tcp_alloc_queue`; no-delay, send buffer and
/// congestion control follow.
async fn tcp_connect(addr: SocketAddr, opts: &ConnectOptions) -> Result<TcpStream> {
    let socket = tcp_socket(addr, opts)?;
    let timeout = opts.connect_timeout;
    let s =
        tokio::time::timeout(timeout, socket.connect(addr)).await.map_err(|_| Error::Timeout(timeout))??;
    let sock = socket2::SockRef::from(&s);
    sock.set_nodelay(true)?;
    nvmeof_net::set_send_buffer(&s, opts.send_buffer);
    nvmeof_net::set_congestion_control(&s, opts.congestion_control)
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
    Ok(s)
}

/// A socket for `addr` with [`ConnectOptions::tos`], [`ConnectOptions::so_priority`],
/// [`ConnectOptions::host_traddr`] and [`ConnectOptions::host_iface`] set.
fn tcp_socket(addr: SocketAddr, opts: &ConnectOptions) -> Result<tokio::net::TcpSocket> {
    let socket =
        if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    let sock = socket2::SockRef::from(&socket);
    // One resend of an unanswered SYN (`TCP_SYNCNT`), as Linux's host
    // (`tcp_sock_set_syncnt(queue->sock->sk, 1)`): a connect to a host that
    // is down (no RST) fails after about 3 s (the SYN, one resend after 1 s,
    // 2 s more) instead of waiting out `connect_timeout` at every reconnect
    // attempt.
    nvmeof_net::set_int_option(&socket, libc::IPPROTO_TCP, libc::TCP_SYNCNT, 1)?;
    if let Some(tos) = opts.tos {
        let r = if addr.is_ipv4() { sock.set_tos(tos.into()) } else { sock.set_tclass_v6(tos.into()) };
        r.map_err(|e| Error::InvalidArgument(format!("tos {tos}: {e}")))?;
    }
    if let Some(p) = opts.so_priority {
        // nvme_tcp_alloc_queue: sock_set_priority(queue->sock->sk, so_priority).
        nvmeof_net::set_priority(&socket, p).map_err(|e| {
            Error::InvalidArgument(format!("so_priority {p}: {e} (above 6 needs CAP_NET_ADMIN)"))
        })?;
    }
    if let Some(ip) = opts.host_traddr {
        if ip.is_ipv4() != addr.is_ipv4() {
            return Err(Error::InvalidArgument(format!(
                "host_traddr {ip} and the target address {addr} are of different address families"
            )));
        }
        // The port is left to the connect (IP_BIND_ADDRESS_NO_PORT): `bind`
        // would reserve an ephemeral port for this socket alone, knowing
        // nothing of the destination, while the connect picks one that is
        // unique for the 4-tuple only, so many queues bound to one address
        // do not use up its ports.
        nvmeof_net::set_int_option(&socket, libc::IPPROTO_IP, libc::IP_BIND_ADDRESS_NO_PORT, 1)?;
        socket.bind(SocketAddr::new(ip, 0)).map_err(|e| {
            warn!(%ip, error = %e, "cannot bind the socket to host_traddr");
            std::io::Error::new(e.kind(), format!("binding to host_traddr {ip}: {e}"))
        })?;
    }
    if let Some(iface) = &opts.host_iface {
        // The kernel cuts a longer name to IFNAMSIZ - 1 bytes (and binds to
        // whichever interface that names); an empty one unbinds.
        if iface.is_empty() || iface.len() >= libc::IFNAMSIZ || iface.bytes().any(|b| b == 0) {
            return Err(Error::InvalidArgument(format!("host_iface {iface:?} is not an interface name")));
        }
        sock.bind_device(Some(iface.as_bytes())).map_err(|e| {
            warn!(iface, error = %e, "cannot bind the socket to host_iface");
            match e.raw_os_error() {
                Some(libc::ENODEV) => {
                    Error::InvalidArgument(format!("host_iface {iface:?}: no such network interface"))
                }
                _ => std::io::Error::new(e.kind(), format!("binding to host_iface {iface:?}: {e}")).into(),
            }
        })?;
    }
    Ok(socket)
}

/// Which I/O queues a command may use: with dedicated write queues
/// ([`ConnectOptions::write_queues`]), reads go to the read queues and every
/// other command to the write queues, as Linux's blk-mq maps `REQ_OP_READ`
/// to HCTX_TYPE_READ and the rest to HCTX_TYPE_DEFAULT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueUse {
    /// A read.
    Read,
    /// Anything else (writes, flushes, passthrough).
    Default,
}

/// The I/O queues to create, and how many of them are dedicated to writes,
/// for `io_queues` read (or shared) queues and `write_queues` write queues
/// asked for when the controller granted `granted` (Linux
/// `nvmf_set_io_queues`: dedicated write queues only once every read queue
/// is there, else shared queues).
fn queue_split(io_queues: u16, write_queues: u16, granted: u16) -> (u16, u16) {
    if write_queues > 0 && io_queues < granted {
        let writes = write_queues.min(granted - io_queues);
        (io_queues + writes, writes)
    } else {
        (io_queues.min(granted), 0)
    }
}

/// [`Core::layout`] for `in_use` I/O queues when `write_queues` of all of
/// them took the writes: the write queues stay while a read queue is left,
/// else every queue in use takes everything (as [`queue_split`] shares them
/// when too few are granted).
fn layout(in_use: usize, write_queues: usize) -> u32 {
    let writes = if in_use > write_queues { write_queues } else { 0 };
    ((in_use as u32) << 16) | writes as u32
}

/// Everything needed to (re)build the association.
struct Setup<'a> {
    addr: SocketAddr,
    subnqn: &'a str,
    host: &'a HostIdentity,
    opts: &'a ConnectOptions,
    /// DH-HMAC-CHAP transaction identifiers: one counter per controller, as
    /// Linux's `ctrl->transaction++` (any value is valid; distinct ones let
    /// the controller tell a late message of an earlier exchange apart).
    t_ids: &'a AtomicU16,
    /// The secrets this (re)connect authenticates with.
    secrets: Secrets,
}

struct AdminSetup {
    cntlid: u16,
    cap: Cap,
    vs: Vs,
    cc: Cc,
    identify: IdentifyController,
    discovery: bool,
    nvm_limits: IdentifyCtrlNvm,
    authentication: Option<Authentication>,
    /// The admin queue's ICResp MAXH2CDATA.
    maxh2cdata: u32,
}

impl Setup<'_> {
    fn connect_cmd(&self, qid: u16, entries: u16, kato_ms: u32, cntlid: u16) -> Command {
        let c = ConnectCmd { recfmt: 0, qid, sqsize: entries - 1, cattr: 0, kato_ms }
            .with_disable_sqflow(self.opts.disable_sqflow);
        let data = ConnectData {
            hostid: self.host.id,
            cntlid,
            subnqn: self.subnqn.to_string(),
            hostnqn: self.host.nqn.clone(),
        };
        Command {
            sqe: c.to_sqe(0),
            data: DataXfer::Write(Bytes::copy_from_slice(&data.encode())),
            timeout: Some(self.opts.connect_timeout),
        }
    }

    /// The queue of a connection whose Connect asks for `entries` (SQSIZE + 1).
    fn queue_config(&self, qid: u16, entries: u16, inline_limit: u32) -> QueueConfig {
        QueueConfig {
            qid,
            // A full SQ keeps one entry empty (head = tail + 1): SQSIZE commands
            // at most, as Linux sizes its tag sets (`ctrl->sqsize`). The tickets
            // are sized once, at the first connect; after a reconnect to a
            // controller with a smaller MQES the queue parks what does not fit.
            tags: entries - 1,
            hdgst: self.opts.hdr_digest,
            ddgst: self.opts.data_digest,
            inline_limit,
            command_timeout: self.opts.command_timeout,
            icresp_timeout: self.opts.connect_timeout,
            // One C2HData never carries more than a whole command's data.
            max_c2h_data: self.opts.max_transfer.map_or(u32::MAX, |m| m.max(64 << 20)),
        }
    }

    async fn attach(
        &self,
        q: &QueueShared,
        cfg: QueueConfig,
        connect: Command,
        epoch: u64,
        release: bool,
    ) -> Result<(Cqe, Option<Authentication>)> {
        let stream = tcp_connect(self.addr, self.opts).await?;
        q.set_local_addr(stream.local_addr().ok());
        let qid = cfg.qid;
        let (tx, rx) = oneshot::channel();
        q.send_ctrl(DriverCtrl::Attach { stream, cfg, connect, epoch, release, reply: tx });
        let cqe = rx.await.map_err(|_| Error::Shutdown)??;
        // The driver kept the queue closed to other commands (see `DriverCtrl::Attach`).
        let auth = self.authenticate(q, qid, cqe.dw0()).await?;
        if auth.is_some() && release {
            q.send_ctrl(DriverCtrl::Release);
        }
        Ok((cqe, auth))
    }

    /// Runs DH-HMAC-CHAP on a queue whose Connect response (`dw0`) asks for
    /// it, as Linux's `nvmf_connect_admin_queue` / `nvmf_connect_io_queue`
    /// do: ASCR is refused (secure channel concatenation needs TLS), ATR
    /// without a host key fails ("qid N: no key"). Returns what it used, if it ran.
    async fn authenticate(&self, q: &QueueShared, qid: u16, dw0: u32) -> Result<Option<Authentication>> {
        if dw0 & CONNECT_AUTHREQ_ASCR != 0 {
            warn!(qid, "secure channel concatenation required; not supported");
            return Err(Error::Auth { qid, reason: AuthError::ConcatenationRequired });
        }
        if dw0 & CONNECT_AUTHREQ_ATR == 0 {
            return Ok(None);
        }
        self.exchange(q, qid).await.map(Some)
    }

    /// One DH-HMAC-CHAP exchange on queue `qid` with the current secrets.
    async fn exchange(&self, q: &QueueShared, qid: u16) -> Result<Authentication> {
        let Some(key) = &self.secrets.key else {
            warn!(qid, "authentication required but no key");
            return Err(Error::Auth { qid, reason: AuthError::NoKey });
        };
        let t_id = self.t_ids.fetch_add(1, Ordering::Relaxed);
        let ex = HostExchange::new(
            qid,
            t_id,
            &self.host.nqn,
            self.subnqn,
            key.clone(),
            self.secrets.ctrl_key.clone(),
        );
        auth::authenticate(q, ex, self.opts.connect_timeout).await
    }

    /// Admin queue: connect, enable, identify (reference §4.5 steps 1–7).
    async fn admin(&self, admin: &QueueShared, epoch: u64) -> Result<AdminSetup> {
        let kato_ms = kato_ms(self.opts.kato);
        let cfg = self.queue_config(0, ADMIN_ENTRIES, ADMIN_INLINE_LIMIT);
        let (cqe, authentication) = self
            .attach(admin, cfg, self.connect_cmd(0, ADMIN_ENTRIES, kato_ms, CNTLID_DYNAMIC), epoch, false)
            .await?;
        let cntlid = cqe.dw0() as u16;
        let cap = Cap(prop_get(admin, PropertyOffset::CAP, true).await?);
        if cap.mpsmin() > 0 {
            return Err(Error::Controller(format!(
                "CAP.MPSMIN {} (pages above 4 KiB) not supported",
                cap.mpsmin()
            )));
        }
        let css = if cap.css() & Cap::CSS_IOCS != 0 { Cc::CSS_CSI } else { Cc::CSS_NVM };
        let cc = Cc::linux_host_default(css);
        prop_set(admin, PropertyOffset::CC, cc.0 as u64, true).await?;
        let cc = cc.with_en(true);
        prop_set(admin, PropertyOffset::CC, cc.0 as u64, true).await?;
        wait_csts(admin, ready_timeout(cap), |c| c.rdy(), true).await?;
        let vs = Vs(prop_get(admin, PropertyOffset::VS, true).await? as u32);
        let identify = identify_ctrl(admin, true).await?;
        if identify.cntlid != cntlid {
            warn!(connect = cntlid, identify = identify.cntlid, "CNTLID from Identify differs from Connect");
        }
        let discovery = self.subnqn == DISCOVERY_NQN || identify.cntrltype == 2;
        if !discovery && identify.sgls & 3 == 0 {
            // Linux `nvme_tcp_alloc_admin_queue` refuses such a controller; we only warn.
            warn!(sgls = identify.sgls, "controller reports no SGL support");
        }
        configure_acre(admin, &identify).await?;
        let nvm_limits =
            if discovery { IdentifyCtrlNvm::default() } else { identify_ctrl_nvm(admin).await? };
        let maxh2cdata = admin.maxh2cdata();
        Ok(AdminSetup { cntlid, cap, vs, cc, identify, discovery, nvm_limits, authentication, maxh2cdata })
    }

    /// Set Features Number of Queues; returns the pairs granted (capped by `want`).
    async fn num_queues(&self, admin: &QueueShared, want: u16) -> Result<u16> {
        let cmd = SetFeaturesCmd::new(
            FeatureId::NUM_QUEUES,
            NumQueues::from_counts(want as u32, want as u32).to_dw(),
        );
        let cqe = admin.execute(cmd.to_sqe(0), Payload::None, None, true).await?;
        Ok((NumQueues::from_dw(cqe.dw0()).io_queue_pairs().min(want as u32)) as u16)
    }

    /// Set Features Asynchronous Event Configuration with the notices both
    /// sides support (Linux `nvme_enable_aen`); returns the value set, 0 when
    /// none or turned off. A refusal only costs the events, as with Linux
    /// ("Failed to configure AEN"); a lost connection fails the setup.
    async fn enable_events(&self, admin: &QueueShared, a: &AdminSetup) -> Result<u32> {
        let want = events::enabled_for(a.identify.oaes);
        if !self.opts.async_events || want == 0 {
            return Ok(0);
        }
        let cmd = SetFeaturesCmd::new(FeatureId::ASYNC_EVENT, want);
        match admin.execute(cmd.to_sqe(0), Payload::None, None, true).await {
            Ok(_) => Ok(want),
            Err(e @ Error::Nvme { .. }) => {
                warn!(aec = format_args!("{want:#x}"), error = %e, "cannot enable asynchronous events");
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    fn io_params(&self, a: &AdminSetup) -> (u16, u32) {
        let mut entries = self.opts.queue_depth.max(2) as u32;
        entries = entries.min(a.cap.mqes() as u32 + 1).min(MAX_TAGS as u32);
        if a.identify.maxcmd > 1 {
            entries = entries.min(a.identify.maxcmd as u32);
        }
        // In 64 bits: IOCCSZ is the controller's 32-bit value, and ·16 overflowed.
        let inline = if a.identify.icdoff == 0 && a.identify.ioccsz >= 4 {
            (a.identify.ioccsz as u64 * 16 - 64).min(u32::MAX as u64) as u32
        } else {
            0
        };
        (entries.max(2) as u16, inline)
    }

    fn max_transfer(&self, a: &AdminSetup) -> Option<u32> {
        // MDTS is a power of two in CAP.MPSMIN pages (4 KiB here); 0 = no limit.
        let mdts = (a.identify.mdts != 0)
            .then(|| 4096u64 << a.identify.mdts.min(20))
            .map(|v| v.min(u32::MAX as u64) as u32)
            // Without MDTS, no more per command than the controller's
            // MAXH2CDATA (but at least the 1 MiB the `max_transfer` option
            // defaults to): nvmet reports none over TCP, yet refuses a larger
            // command, read or write, with Data SGL Length Invalid
            // (`nvmet_tcp_map_data` bounds every SGL by NVMET_TCP_MAXH2CDATA,
            // 4 MiB, in Linux 6.12.y: the interop suite's kernel target).
            .or((a.maxh2cdata > 0).then(|| a.maxh2cdata.max(1 << 20) & !3));
        match (mdts, self.opts.max_transfer) {
            (Some(m), Some(o)) => Some(m.min(o)),
            (m, o) => m.or(o),
        }
    }

    /// Connects the I/O queues in parallel.
    async fn io_queues(&self, io: &[Arc<QueueShared>], a: &AdminSetup, epoch: u64) -> Result<()> {
        let (entries, inline) = self.io_params(a);
        let futs = io.iter().map(|q| {
            let cfg = self.queue_config(q.qid, entries, inline);
            let cmd = self.connect_cmd(q.qid, entries, 0, a.cntlid);
            self.attach(q, cfg, cmd, epoch, true)
        });
        for r in join_all(futs).await {
            r?;
        }
        Ok(())
    }

    fn info(&self, a: AdminSetup, io_queues: u16, write_queues: u16, async_events: u32) -> ControllerInfo {
        let (entries, inline) = self.io_params(&a);
        ControllerInfo {
            async_events,
            max_transfer: self.max_transfer(&a),
            cntlid: a.cntlid,
            cap: a.cap,
            vs: a.vs,
            cc: a.cc,
            identify: a.identify,
            io_queues,
            write_queues,
            queue_depth: entries,
            inline_data: inline,
            discovery: a.discovery,
            nvm_limits: a.nvm_limits,
            authentication: a.authentication,
        }
    }
}

/// Drivers started by a [`Controller::connect`] that has not finished, or
/// the admin queue's during [`Controller::shutdown`]: shut down when dropped
/// (the future finished, failed or was cancelled) unless emptied first.
struct SpawnedDrivers(Vec<Arc<QueueShared>>);

impl Drop for SpawnedDrivers {
    fn drop(&mut self) {
        for q in &self.0 {
            q.send_ctrl(DriverCtrl::Shutdown);
        }
    }
}

/// Polls a set of futures to completion concurrently (no extra tasks).
async fn join_all<F: std::future::Future>(futs: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut futs: Vec<_> = futs.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *o = Some(v);
                        *f = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("all finished")).collect()
}

/// The KATO field of the admin Connect (milliseconds) for `kato`.
fn kato_ms(kato: Duration) -> u32 {
    kato.as_millis().min(u32::MAX as u128) as u32
}

fn ready_timeout(cap: Cap) -> Duration {
    // Linux `nvme_wait_ready`: (CAP.TO + 1) · 500 ms.
    Duration::from_millis((cap.to() as u64 + 1) * 500)
}

async fn prop_get(admin: &QueueShared, off: PropertyOffset, setup: bool) -> Result<u64> {
    let cqe = admin.execute(PropertyGet::new(off).to_sqe(0), Payload::None, None, setup).await?;
    Ok(cqe.result)
}

async fn prop_set(admin: &QueueShared, off: PropertyOffset, value: u64, setup: bool) -> Result<()> {
    let cmd = if off.size() == Some(8) {
        PropertySet::new64(off, value)
    } else {
        PropertySet::new32(off, value as u32)
    };
    admin.execute(cmd.to_sqe(0), Payload::None, None, setup).await.map(drop)
}

/// Polls CSTS until `done` holds (1 ms, doubling up to 32 ms), failing on CFS
/// or an all-ones register (Linux `nvme_wait_ready`).
async fn wait_csts(
    admin: &QueueShared,
    timeout: Duration,
    done: impl Fn(Csts) -> bool,
    setup: bool,
) -> Result<Csts> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        let csts = Csts(prop_get(admin, PropertyOffset::CSTS, setup).await? as u32);
        if csts.0 == u32::MAX {
            return Err(Error::Controller("CSTS reads all ones (controller dead)".into()));
        }
        if csts.cfs() {
            return Err(Error::Controller("controller fatal status (CSTS.CFS)".into()));
        }
        if done(csts) {
            return Ok(csts);
        }
        if start.elapsed() >= timeout {
            return Err(Error::Timeout(timeout));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(32));
    }
}

/// Where the controller reports a Command Retry Delay (CRDT1), turns on
/// Advanced Command Retry Enable with Set Features Host Behavior Support, as
/// the Linux host does (`nvme_configure_acre`): without it a controller
/// leaves CRD 0 in its statuses, so a host that retries
/// ([`ConnectOptions::max_retries`]) is never asked to wait. A refusal is
/// logged and ignored, as Linux ignores an NVMe status there; a lost
/// connection fails the setup.
async fn configure_acre(admin: &QueueShared, identify: &IdentifyController) -> Result<()> {
    if identify.crdt[0] == 0 {
        return Ok(());
    }
    // The Host Behavior Support data structure (512 bytes): byte 0 is ACRE.
    let mut data = [0u8; HOST_BEHAVIOR_LEN];
    data[0] = 1;
    let cmd = SetFeaturesCmd::new(FeatureId::HOST_BEHAVIOR, 0);
    match admin.execute(cmd.to_sqe(0), Payload::Write(&data), None, true).await {
        Ok(_) => {
            debug!(crdt = ?identify.crdt, "advanced command retry enabled");
            Ok(())
        }
        Err(e @ Error::Nvme { .. }) => {
            warn!(error = %e, "cannot enable advanced command retry (ACRE)");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Size of the Host Behavior Support data structure (NVMe Base 2.0
/// §5.27.1.18; Linux `struct nvme_feat_host_behavior`).
const HOST_BEHAVIOR_LEN: usize = 512;

/// Identify CNS 06h, CSI NVM: the controller's Write Zeroes, Verify and
/// Dataset Management limits. A controller that refuses it (an NVMe status)
/// reports none, as Linux tolerates the failure; a lost connection fails
/// the setup.
async fn identify_ctrl_nvm(admin: &QueueShared) -> Result<IdentifyCtrlNvm> {
    let mut buf = vec![0u8; IDENTIFY_DATA_LEN];
    let sqe = IdentifyCmd::new(Cns::CS_CTRL, 0).to_sqe(0);
    match admin.execute(sqe, Payload::Read(&mut buf), None, true).await {
        Ok(_) => Ok(IdentifyCtrlNvm::decode(&buf)?),
        Err(e @ Error::Nvme { .. }) => {
            debug!(error = %e, "no NVM command set controller limits");
            Ok(IdentifyCtrlNvm::default())
        }
        Err(e) => Err(e),
    }
}

async fn identify_ctrl(admin: &QueueShared, setup: bool) -> Result<IdentifyController> {
    let mut buf = vec![0u8; IDENTIFY_DATA_LEN];
    let sqe = IdentifyCmd::new(Cns::CTRL, 0).to_sqe(0);
    admin.execute(sqe, Payload::Read(&mut buf), None, setup).await?;
    Ok(IdentifyController::decode(&buf)?)
}

impl Core {
    fn all_queues(&self) -> impl Iterator<Item = &Arc<QueueShared>> {
        std::iter::once(&self.admin).chain(self.io.iter())
    }

    fn setup(&self) -> Setup<'_> {
        Setup {
            addr: self.addr,
            subnqn: &self.subnqn,
            host: &self.host,
            opts: &self.opts,
            t_ids: &self.t_ids,
            secrets: self.secrets.read().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    pub(crate) fn info(&self) -> Arc<ControllerInfo> {
        self.info.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// [`ConnectOptions::max_retries`].
    pub(crate) fn max_retries(&self) -> u8 {
        self.opts.max_retries
    }

    /// Whether the controller restarts its keep-alive timer on every command
    /// (Identify Controller CTRATT bit 6, TBKAS).
    fn traffic_based_keep_alive(&self) -> bool {
        self.info().identify.ctratt & ctratt::TBKAS != 0
    }

    /// An I/O queue for the next request of this kind.
    pub(crate) fn pick_io(&self, usage: QueueUse) -> Result<&QueueShared> {
        let layout = self.layout.load(Ordering::Relaxed);
        let (n, writes) = ((layout >> 16) as usize, (layout & 0xFFFF) as usize);
        if n == 0 {
            return Err(Error::InvalidArgument("controller has no I/O queues".into()));
        }
        // With dedicated write queues, the first `write_queues` take everything
        // but reads and the rest take the reads (Linux `nvme_tcp_map_queues`:
        // HCTX_TYPE_DEFAULT at offset 0, HCTX_TYPE_READ after it).
        let (first, count, rr) = match (writes, usage) {
            (0, _) => (0, n, &self.rr),
            (w, QueueUse::Default) => (0, w, &self.rr),
            (w, QueueUse::Read) => (w, n - w, &self.rr_reads),
        };
        let i = match self.opts.queue_select {
            QueueSelect::RoundRobin => rr.fetch_add(1, Ordering::Relaxed) % count,
            QueueSelect::PerThread => {
                thread_local!(static SLOT: usize = {
                    static NEXT: AtomicUsize = AtomicUsize::new(0);
                    NEXT.fetch_add(1, Ordering::Relaxed)
                });
                SLOT.with(|s| *s) % count
            }
        };
        Ok(&self.io[first + i])
    }

    /// Re-establishes the association after a failure (all queues).
    async fn reestablish(&self, epoch: u64) -> Result<ControllerInfo> {
        let s = self.setup();
        let a = s.admin(&self.admin, epoch).await?;
        let mut in_use = 0;
        if !self.io.is_empty() {
            let granted = s.num_queues(&self.admin, self.io.len() as u16).await? as usize;
            if granted == 0 {
                return Err(Error::Controller("controller now grants no I/O queues".into()));
            }
            // A controller may grant fewer queues than before (nvmet's
            // attr_qid_max, which deletes the controllers to make hosts
            // reconnect): go on with that many, as the Linux host shrinks its
            // hardware queues (blk_mq_update_nr_hw_queues). New requests go to
            // those; the ones that waited on a queue left out fail with
            // ConnectionLost (they cannot move to another queue's tags).
            // A later reconnect granting more brings the others back.
            in_use = granted.min(self.io.len());
            if in_use < self.io.len() {
                warn!(
                    granted,
                    queues = self.io.len(),
                    "the controller now grants fewer I/O queues: using {in_use}; commands waiting on the others fail"
                );
            }
            self.layout.store(layout(in_use, self.write_queues), Ordering::Relaxed);
            for q in &self.io[in_use..] {
                q.send_ctrl(DriverCtrl::FailFast);
            }
            s.io_queues(&self.io[..in_use], &a, epoch).await?;
        }
        let aec = s.enable_events(&self.admin, &a).await?;
        self.admin.send_ctrl(DriverCtrl::Release);
        let writes = layout(in_use, self.write_queues) & 0xFFFF;
        Ok(s.info(a, in_use as u16, writes as u16, aec))
    }

    /// Reconnect loop (Linux error recovery + `nvme_tcp_reconnect_or_remove`).
    /// Returns false when the controller is lost for good.
    async fn recover(&self, err: Error) -> bool {
        warn!(error = %err, "association failed; reconnecting");
        self.state.send_replace(ControllerState::Reconnecting);
        for q in self.all_queues() {
            q.send_ctrl(DriverCtrl::Detach);
        }
        let policy = &self.opts.reconnect;
        let start = Instant::now();
        let mut fast_fail = FastFail { at: policy.fast_io_fail_timeout.map(|t| start + t), expired: false };
        let mut last = err;
        let mut attempt = 0u32;
        let mut delay = policy.delay;
        loop {
            if let Some(t) = policy.ctrl_loss_timeout {
                if start.elapsed() + delay > t {
                    break;
                }
            }
            self.failing_fast(tokio::time::sleep(delay), &mut fast_fail).await;
            // Exponential backoff between failed attempts, capped.
            delay = (delay * 2).min(policy.max_delay.max(policy.delay));
            attempt += 1;
            let epoch = self.epoch.fetch_add(1, Ordering::SeqCst) + 1;
            match self.failing_fast(self.reestablish(epoch), &mut fast_fail).await {
                Ok(info) => {
                    info!(attempt, cntlid = info.cntlid, "reconnected");
                    *self.info.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(info);
                    self.state.send_replace(ControllerState::Live);
                    return true;
                }
                Err(e) => {
                    warn!(attempt, error = %e, "reconnect attempt failed");
                    for q in self.all_queues() {
                        q.send_ctrl(DriverCtrl::Detach);
                        if fast_fail.expired {
                            // Commands that reached a queue this attempt had
                            // connected wait for no reconnect either.
                            q.send_ctrl(DriverCtrl::FailFast);
                        }
                    }
                    let permanent = e.is_permanent();
                    last = e;
                    if permanent {
                        break;
                    }
                }
            }
        }
        let why: Arc<str> = format!("{} (after {attempt} reconnect attempts)", last).into();
        warn!(reason = %why, "controller lost");
        self.state.send_replace(ControllerState::Failed);
        for q in self.all_queues() {
            q.send_ctrl(DriverCtrl::Fail(Error::ControllerLost(why.clone())));
        }
        false
    }

    /// Runs `f`; when [`ReconnectPolicy::fast_io_fail_timeout`] runs out
    /// meanwhile, tells every queue to fail what waits for the reconnect
    /// (once; Linux `nvme_failfast_work`, which sets `FAILFAST_EXPIRED` until
    /// the controller is live again).
    async fn failing_fast<F: std::future::Future>(&self, f: F, fast_fail: &mut FastFail) -> F::Output {
        tokio::pin!(f);
        loop {
            let at = fast_fail.at.filter(|_| !fast_fail.expired);
            tokio::select! {
                out = &mut f => return out,
                _ = sleep_until(at) => {
                    fast_fail.expired = true;
                    warn!("fast_io_fail_timeout expired: I/O waiting for the reconnect fails");
                    for q in self.all_queues() {
                        q.send_ctrl(DriverCtrl::FailFast);
                    }
                }
            }
        }
    }

    async fn keep_alive(&self, setup: bool) -> Result<()> {
        let timeout = self.opts.kato.max(Duration::from_secs(1));
        self.admin
            .execute(Sqe::new(AdminOpcode::KEEP_ALIVE.0), Payload::None, Some(timeout), setup)
            .await
            .map(drop)
    }
}

/// When a reconnect loop fails the I/O waiting for it
/// ([`ReconnectPolicy::fast_io_fail_timeout`]).
struct FastFail {
    /// The deadline, if any.
    at: Option<Instant>,
    /// Passed: the queues were told.
    expired: bool,
}

/// Keep-alive and failure handling for one association.
async fn supervise(core: Arc<Core>, mut rx: mpsc::UnboundedReceiver<SupMsg>) {
    // The KATO the controller was given, in whole milliseconds. Taken from
    // `opts.kato` as is, a KATO of 1 ns made the period below zero, and
    // `interval_at` panics on that: the panic ended this task, so no
    // connection loss was recovered any more (the controller stayed `Live`,
    // requests hung). A KATO under 1 ms is sent as 0 (disabled) and now also
    // disables keep-alive here.
    let kato = Duration::from_millis(kato_ms(core.opts.kato).into());
    let mut tbkas = core.traffic_based_keep_alive();
    let mut ka = keep_alive_timer(kato, tbkas);
    loop {
        let failure = tokio::select! {
            m = rx.recv() => match m {
                None => return,
                Some(SupMsg::QueueLost { qid, epoch, error }) => {
                    if epoch != core.epoch.load(Ordering::SeqCst) {
                        debug!(qid, epoch, "ignoring loss report from an older association");
                        continue;
                    }
                    warn!(qid, error = %error, "queue connection lost");
                    error
                }
            },
            _ = async { match ka.as_mut() { Some(i) => { i.tick().await; } None => std::future::pending().await } } => {
                // Traffic-based keep-alive (CTRATT.TBKAS, Linux
                // `nvme_keep_alive_work`): a controller that restarts its
                // timer on every command needs no Keep Alive while I/O
                // completes.
                if tbkas && core.comp_seen.swap(false, Ordering::Relaxed) {
                    continue;
                }
                // Keep Alive runs as a setup command: it fails at once (instead of waiting
                // for a reconnect) when the admin connection drops.
                match core.keep_alive(true).await {
                    Ok(()) => continue,
                    Err(e) => {
                        warn!(error = %e, "keep-alive failed");
                        e
                    }
                }
            }
        };
        if !core.recover(failure).await {
            return;
        }
        // Reports queued meanwhile are not drained here: those from the
        // association just replaced carry an older epoch and are skipped above,
        // but a queue of the new association can already have lost its
        // connection (after its own Connect succeeded, while the other queues
        // were still connecting). Dropping that report left the queue without
        // a connection, and its requests waiting forever, while the controller
        // said `Live`.
        // The controller of the new association may differ in TBKAS.
        tbkas = core.traffic_based_keep_alive();
        ka = keep_alive_timer(kato, tbkas);
    }
}

/// The Keep Alive timer for `kato` (none when 0): every KATO/2, or KATO/4
/// with traffic-based keep-alive, where one completion can put the next
/// Keep Alive off by two periods (Linux `nvme_keep_alive_work_period`).
fn keep_alive_timer(kato: Duration, tbkas: bool) -> Option<tokio::time::Interval> {
    if kato.is_zero() {
        return None;
    }
    let period = if tbkas { kato / 4 } else { kato / 2 };
    let mut i = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    Some(i)
}

impl Controller {
    /// Connects to subsystem `subnqn` at `addr`: admin queue (Connect,
    /// CC enable, Identify Controller), Number of Queues, then the I/O queues.
    pub async fn connect(
        addr: impl tokio::net::ToSocketAddrs,
        subnqn: &str,
        opts: ConnectOptions,
    ) -> Result<Self> {
        let addr = tokio::net::lookup_host(addr)
            .await?
            .next()
            .ok_or_else(|| Error::InvalidArgument("address resolves to nothing".into()))?;
        if subnqn.is_empty() || subnqn.len() >= 256 {
            return Err(Error::InvalidArgument(format!(
                "subsystem NQN length {} out of range",
                subnqn.len()
            )));
        }
        let host = opts.host.clone().unwrap_or_else(HostIdentity::default_for_host);
        // Same bounds as the subsystem NQN's: the Connect data would cut a
        // longer one to 255 bytes, connecting as another host.
        if host.nqn.is_empty() || host.nqn.len() >= 256 {
            return Err(Error::InvalidArgument(format!("host NQN length {} out of range", host.nqn.len())));
        }
        // The controller is only challenged within an exchange the host key
        // starts: alone, a controller key would silently go unused.
        if opts.dhchap_ctrl_secret.is_some() && opts.dhchap_secret.is_none() {
            return Err(Error::InvalidArgument("dhchap_ctrl_secret needs dhchap_secret".into()));
        }
        let (sup_tx, sup_rx) = mpsc::unbounded_channel();
        let ctrl_span = info_span!("nvme_ctrl", %addr, subnqn, cntlid = tracing::field::Empty);
        let queue_span =
            |qid: u16| info_span!(parent: &ctrl_span, "nvme_queue", qid, cntlid = tracing::field::Empty);
        let busy_queues = Arc::new(AtomicUsize::new(0));
        let comp_seen = Arc::new(AtomicBool::new(false));
        let params = |qid: u16| DriverParams {
            requeue: opts.reconnect.requeue,
            busy_poll: if qid == 0 { Duration::ZERO } else { opts.busy_poll },
            sup_tx: Some(sup_tx.clone()),
            span: queue_span(qid),
            busy_queues: busy_queues.clone(),
            comp_seen: (qid > 0).then(|| comp_seen.clone()),
        };
        let admin = spawn_driver(0, ADMIN_TICKETS, opts.command_timeout, params(0));
        // Stops the drivers if this future is dropped before it finishes (an
        // application's own timeout around `connect`). Each driver holds the
        // sender of its own control channel (in its `QueueShared`), so it never
        // sees the channel close: without this it kept running for as long as
        // the process lived, its socket open until the connection failed on
        // its own (ICResp or command timeout, the target's keep-alive timeout).
        let mut spawned = SpawnedDrivers(vec![admin.clone()]);
        let t_ids = AtomicU16::new(0);
        let secrets = Secrets { key: opts.dhchap_secret.clone(), ctrl_key: opts.dhchap_ctrl_secret.clone() };
        let setup = Setup { addr, subnqn, host: &host, opts: &opts, t_ids: &t_ids, secrets: secrets.clone() };
        let epoch = 1;
        let mut io = Vec::new();
        let r: Result<ControllerInfo> = async {
            let a = setup.admin(&admin, epoch).await?;
            let want = if a.discovery || opts.io_queues == 0 {
                0
            } else {
                opts.io_queues.saturating_add(opts.write_queues)
            };
            let granted = if want > 0 { setup.num_queues(&admin, want).await? } else { 0 };
            if want > 0 && granted == 0 {
                return Err(Error::Controller("controller grants no I/O queues".into()));
            }
            let (n, write_queues) = queue_split(opts.io_queues, opts.write_queues, granted);
            if opts.write_queues > 0 && write_queues == 0 && n > 0 {
                info!(
                    granted,
                    read_queues = opts.io_queues,
                    "too few I/O queues granted for dedicated write queues; reads and writes share them"
                );
            }
            let (entries, _) = setup.io_params(&a);
            for qid in 1..=n {
                let q = spawn_driver(qid, entries as u32 - 1, opts.command_timeout, params(qid));
                spawned.0.push(q.clone());
                io.push(q);
            }
            setup.io_queues(&io, &a, epoch).await?;
            let aec = setup.enable_events(&admin, &a).await?;
            admin.send_ctrl(DriverCtrl::Release);
            Ok(setup.info(a, n, write_queues, aec))
        }
        .instrument(ctrl_span.clone())
        .await;
        // On error, dropping `spawned` shuts the drivers down.
        let info = r?;
        spawned.0.clear();
        ctrl_span.record("cntlid", info.cntlid);
        info!(parent: &ctrl_span, cntlid = info.cntlid, io_queues = info.io_queues, write_queues = info.write_queues, depth = info.queue_depth,
            max_transfer = ?info.max_transfer, "connected");
        let (state, _) = watch::channel(ControllerState::Live);
        let write_queues = info.write_queues as usize;
        let io_len = io.len();
        let core = Arc::new(Core {
            addr,
            subnqn: subnqn.to_string(),
            host,
            opts,
            admin,
            io,
            info: RwLock::new(Arc::new(info)),
            state,
            epoch: AtomicU64::new(epoch),
            rr: AtomicUsize::new(0),
            comp_seen,
            write_queues,
            layout: AtomicU32::new(layout(io_len, write_queues)),
            rr_reads: AtomicUsize::new(0),
            events: events::channel(),
            t_ids: AtomicU16::new(t_ids.into_inner()),
            secrets: RwLock::new(secrets),
            ns_sizes: Default::default(),
        });
        let sup = tokio::spawn(supervise(core.clone(), sup_rx).instrument(ctrl_span.clone()));
        let handle = Arc::new(Handle {
            core: core.clone(),
            supervisor: Mutex::new(Some(sup)),
            events: Mutex::new(None),
        });
        let ev = tokio::spawn(events::run(core, Arc::downgrade(&handle)).instrument(ctrl_span));
        *handle.events.lock().unwrap_or_else(|e| e.into_inner()) = Some(ev);
        Ok(Self { inner: handle })
    }

    /// A handle sharing `h`'s association.
    pub(crate) fn from_handle(h: Arc<Handle>) -> Self {
        Self { inner: h }
    }

    pub(crate) fn core(&self) -> &Core {
        &self.inner.core
    }

    /// Controller data of the current association.
    pub fn info(&self) -> Arc<ControllerInfo> {
        self.core().info()
    }

    /// Replaces the DH-HMAC-CHAP secrets for the authentications that follow:
    /// every reconnect, and [`Self::reauthenticate`]. As writing Linux's sysfs
    /// `dhchap_secret` / `dhchap_ctrl_secret`, minus the immediate
    /// re-authentication: after the target rotates a host's key, a
    /// reconnect with the old one would be refused for good.
    pub fn set_dhchap_secrets(
        &self,
        key: Option<DhchapSecret>,
        ctrl_key: Option<DhchapSecret>,
    ) -> Result<()> {
        if ctrl_key.is_some() && key.is_none() {
            return Err(Error::InvalidArgument("dhchap_ctrl_secret needs dhchap_secret".into()));
        }
        *self.core().secrets.write().unwrap_or_else(|e| e.into_inner()) = Secrets { key, ctrl_key };
        Ok(())
    }

    /// Runs DH-HMAC-CHAP again, with the current secrets, on the admin queue
    /// and then on each I/O queue of the live association, as Linux does when
    /// a secret is written to sysfs (`nvme_ctrl_auth_work`). Commands keep
    /// running meanwhile. Fails with [`Error::InvalidArgument`] when the
    /// controller did not ask for authentication, or with the first queue's
    /// error. A controller that refuses tears the association down: the
    /// error is then its refusal, or [`Error::ConnectionLost`] when the other
    /// queues' closing started the reconnect first, and the reconnect policy
    /// takes over (a reconnect with the refused secrets fails for good).
    pub async fn reauthenticate(&self) -> Result<Authentication> {
        let core = self.core();
        if core.info().authentication.is_none() {
            return Err(Error::InvalidArgument("the controller did not ask for authentication".into()));
        }
        if self.state() != ControllerState::Live {
            return Err(Error::ConnectionLost);
        }
        let setup = core.setup();
        let mut admin = None;
        for q in core.all_queues() {
            let a = setup.exchange(q, q.qid).await?;
            admin.get_or_insert(a);
        }
        let a = admin.expect("the admin queue comes first");
        let mut info = core.info.write().unwrap_or_else(|e| e.into_inner());
        let mut i = (**info).clone();
        i.authentication = Some(a);
        *info = Arc::new(i);
        Ok(a)
    }

    /// Current association state.
    pub fn state(&self) -> ControllerState {
        *self.core().state.borrow()
    }

    /// Watches association state changes.
    pub fn subscribe_state(&self) -> watch::Receiver<ControllerState> {
        self.core().state.subscribe()
    }

    /// Receives the controller's asynchronous events from now on (see
    /// [`ControllerEvent`]): the host keeps an Asynchronous Event Request
    /// outstanding where [`ConnectOptions::async_events`] is on and the
    /// controller reports notices it understands
    /// ([`ControllerInfo::async_events`]), and reads each notice's log page,
    /// which re-arms it, whether anyone receives or not. Events raised while
    /// the association was down are lost with it: after a reconnect
    /// ([`Self::subscribe_state`]) re-read what matters. A receiver that
    /// falls more than 64 events behind loses the oldest
    /// (`RecvError::Lagged`).
    pub fn events(&self) -> broadcast::Receiver<ControllerEvent> {
        self.core().events.subscribe()
    }

    /// The host identity used in Connect.
    pub fn host(&self) -> &HostIdentity {
        &self.core().host
    }

    /// The subsystem NQN.
    pub fn subnqn(&self) -> &str {
        &self.core().subnqn
    }

    /// The controller's address.
    pub fn addr(&self) -> SocketAddr {
        self.core().addr
    }

    /// The host's end of the admin queue's connection, as of its last
    /// (re)connect: the source address the target sees (Linux shows it as
    /// `src_addr` in the controller's `address` attribute), e.g. to check
    /// [`ConnectOptions::host_traddr`]. `None` before the first connect.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.core().admin.local_addr()
    }

    /// Number of I/O queues in use: those the controller granted at connect,
    /// or fewer after a reconnect to a controller that grants fewer.
    pub fn io_queue_count(&self) -> usize {
        (self.core().layout.load(Ordering::Relaxed) >> 16) as usize
    }

    /// Where received read data went, summed over all queues since connect:
    /// copied by callers out of the receive buffer ([`Namespace::read`]),
    /// or placed into owned buffers ([`Namespace::read_buf`]) by a copy out
    /// of the receive buffer or straight from the socket.
    pub fn rx_stats(&self) -> RxStats {
        self.core().all_queues().map(|q| q.rx_stats()).fold(RxStats::default(), |a, b| RxStats {
            copied_via_chunks: a.copied_via_chunks + b.copied_via_chunks,
            copied_from_rbuf: a.copied_from_rbuf + b.copied_from_rbuf,
            direct: a.direct + b.direct,
        })
    }

    /// Sends any admin command. `payload` gives the data direction and buffer;
    /// a non-success status becomes [`Error::Nvme`].
    pub async fn admin_command(&self, sqe: Sqe, payload: Payload<'_>) -> Result<Cqe> {
        self.core().admin.execute(sqe, payload, None, false).await
    }

    /// Like [`Self::admin_command`] with a timeout for this command.
    pub async fn admin_command_timeout(
        &self,
        sqe: Sqe,
        payload: Payload<'_>,
        timeout: Duration,
    ) -> Result<Cqe> {
        self.core().admin.execute(sqe, payload, Some(timeout), false).await
    }

    /// Sends any I/O command on an I/O queue chosen by the queue policy.
    pub async fn io_command(&self, sqe: Sqe, payload: Payload<'_>) -> Result<Cqe> {
        self.core().pick_io(QueueUse::Default)?.execute(sqe, payload, None, false).await
    }

    /// I/O queue `qid` (1-based), if in use.
    fn io_queue(&self, qid: u16) -> Result<&QueueShared> {
        let in_use = self.io_queue_count();
        if qid == 0 || qid as usize > in_use {
            return Err(Error::InvalidArgument(format!("no I/O queue {qid} ({in_use} in use)")));
        }
        Ok(&self.core().io[qid as usize - 1])
    }

    /// Sends any I/O command on I/O queue `qid` (1-based).
    pub async fn io_command_on(&self, qid: u16, sqe: Sqe, payload: Payload<'_>) -> Result<Cqe> {
        let q = self.io_queue(qid)?;
        q.execute(sqe, payload, None, false).await
    }

    /// Sends an I/O command on I/O queue `qid` (1-based) exactly once: a
    /// connection lost while it runs fails it with [`Error::ConnectionLost`]
    /// instead of resubmitting it after the reconnect (commands sent through
    /// [`Self::io_command_on`] are resubmitted per the reconnect policy). For
    /// commands that must not run twice, such as Zone Append: a second try
    /// could append the data twice.
    pub async fn io_command_once_on(&self, qid: u16, sqe: Sqe, payload: Payload<'_>) -> Result<Cqe> {
        self.io_queue(qid)?.execute_once(sqe, payload).await
    }

    /// Sends a controller-to-host I/O command (Read or any command that
    /// returns `len` bytes) on I/O queue `qid` (1-based) and appends the data
    /// to `buf`, which is returned. As with
    /// [`Namespace::read_buf`](crate::Namespace::read_buf), the queue owns the
    /// buffer while the command runs and reads the payload from the socket
    /// straight into it (no intermediate copy). `len` must not exceed the
    /// maximum transfer size; on error the buffer is dropped.
    pub async fn io_read_buf_on(&self, qid: u16, sqe: Sqe, buf: BytesMut, len: usize) -> Result<BytesMut> {
        // `execute_owned` reserves room for `len` bytes itself.
        self.io_queue(qid)?.execute_owned(sqe, buf, len).await
    }

    /// Identify Controller (CNS 01h), fresh from the controller.
    pub async fn identify_controller(&self) -> Result<IdentifyController> {
        identify_ctrl(&self.core().admin, false).await
    }

    /// Identify with any CNS into a 4096-byte buffer.
    pub async fn identify_raw(&self, cmd: IdentifyCmd, buf: &mut [u8; IDENTIFY_DATA_LEN]) -> Result<()> {
        self.admin_command(cmd.to_sqe(0), Payload::Read(buf)).await.map(drop)
    }

    /// Identify Namespace (CNS 00h).
    pub async fn identify_namespace(&self, nsid: u32) -> Result<IdentifyNamespace> {
        let mut buf = [0u8; IDENTIFY_DATA_LEN];
        self.identify_raw(IdentifyCmd::new(Cns::NS, nsid), &mut buf).await?;
        Ok(IdentifyNamespace::decode(&buf)?)
    }

    /// The Namespace Identification Descriptor list of namespace `nsid`
    /// (CNS 03h): its EUI-64, NGUID, UUID and Command Set Identifier
    /// ([`NsIdDescriptor::Csi`]: `Csi::ZNS` for a zoned namespace), as
    /// `nvme ns-descs` shows them.
    pub async fn namespace_id_descriptors(&self, nsid: u32) -> Result<Vec<NsIdDescriptor>> {
        let mut buf = [0u8; IDENTIFY_DATA_LEN];
        self.identify_raw(IdentifyCmd::new(Cns::NS_DESC_LIST, nsid), &mut buf).await?;
        Ok(decode_ns_desc_list(&buf)?)
    }

    /// Active namespace IDs (CNS 02h, continued while the 1024-entry list is full).
    pub async fn active_namespaces(&self) -> Result<Vec<u32>> {
        let mut all = Vec::new();
        let mut after = 0u32;
        let mut buf = [0u8; IDENTIFY_DATA_LEN];
        loop {
            self.identify_raw(IdentifyCmd::new(Cns::ACTIVE_NS_LIST, after), &mut buf).await?;
            let list = decode_ns_list(&buf);
            let full = list.len() == NS_LIST_MAX;
            match list.last() {
                Some(&last) if full && last > after && last < 0xFFFF_FFFE => after = last,
                _ => {
                    all.extend(list);
                    return Ok(all);
                }
            }
            all.extend(list);
        }
    }

    /// A handle for I/O on namespace `nsid` (after Identify Namespace).
    pub async fn namespace(&self, nsid: u32) -> Result<Namespace> {
        let id = self.identify_namespace(nsid).await?;
        Namespace::new(self.clone(), nsid, id)
    }

    /// The size cell the handles of namespace `nsid` share, set to `nsze`
    /// (the size just read).
    pub(crate) fn namespace_size_cell(&self, nsid: u32, nsze: u64) -> Arc<AtomicU64> {
        let mut m = self.core().ns_sizes.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|_, w| w.strong_count() > 0);
        let cell = m.get(&nsid).and_then(std::sync::Weak::upgrade).unwrap_or_else(|| {
            let c = Arc::new(AtomicU64::new(nsze));
            m.insert(nsid, Arc::downgrade(&c));
            c
        });
        cell.store(nsze, Ordering::Release);
        cell
    }

    /// Re-reads the size of those of `nsids` that have handles (all of them
    /// for `[0xFFFF_FFFF]`, "more than 1024 changed"), so that
    /// [`Namespace::blocks`](crate::Namespace::blocks) of every handle
    /// follows a namespace the target resized, as the Linux host revalidates
    /// the namespaces a Namespace Attribute Changed notice lists
    /// (`nvme_scan_ns_list` → `nvme_validate_ns`). A namespace that is gone
    /// reads as 0 blocks.
    pub(crate) async fn refresh_namespace_sizes(&self, nsids: &[u32]) {
        let live: Vec<(u32, Arc<AtomicU64>)> = {
            let m = self.core().ns_sizes.lock().unwrap_or_else(|e| e.into_inner());
            let all = nsids == [0xFFFF_FFFF];
            m.iter()
                .filter(|(n, _)| all || nsids.contains(n))
                .filter_map(|(n, w)| w.upgrade().map(|c| (*n, c)))
                .collect()
        };
        for (nsid, cell) in live {
            match self.identify_namespace(nsid).await {
                Ok(id) => {
                    let old = cell.swap(id.nsze, Ordering::AcqRel);
                    if old != id.nsze {
                        info!(nsid, old_blocks = old, new_blocks = id.nsze, "namespace size changed");
                    }
                }
                Err(e) => warn!(nsid, error = %e, "namespace size not re-read after a change notice"),
            }
        }
    }

    /// Get Log Page: reads `buf.len()` bytes (a multiple of 4) of the log
    /// described by `cmd` starting at `cmd.lpo`, split into commands no larger
    /// than the maximum transfer size. `cmd.numd` is recomputed; RAE is kept on
    /// every command but the last, which uses `cmd.rae`. With `cmd.ot` set,
    /// `cmd.lpo` is an entry index (any value) and the read must fit one
    /// command: the entry size a split needs is defined by each log.
    pub async fn get_log_page(&self, cmd: GetLogPageCmd, buf: &mut [u8]) -> Result<()> {
        if buf.is_empty() || !buf.len().is_multiple_of(4) || (!cmd.ot && !cmd.lpo.is_multiple_of(4)) {
            return Err(Error::InvalidArgument(
                "log page length and offset must be non-zero dword multiples".into(),
            ));
        }
        let chunk = self.info().max_transfer.unwrap_or(1 << 20).max(4096) as usize & !3;
        if cmd.ot && buf.len() > chunk {
            return Err(Error::InvalidArgument(format!(
                "a log page read by entry index (OT) of {} bytes exceeds one command's {chunk}",
                buf.len()
            )));
        }
        // Each command's offset is `lpo` plus the bytes before it: past the
        // last 64-bit offset that sum overflowed (in release builds it wrapped
        // to the start of the log).
        if !cmd.ot && buf.len() as u64 - 1 > u64::MAX - cmd.lpo {
            return Err(Error::InvalidArgument(format!(
                "{} log page bytes from offset {} pass the last 64-bit offset",
                buf.len(),
                cmd.lpo
            )));
        }
        let total = buf.len();
        let mut off = 0usize;
        for part in buf.chunks_mut(chunk) {
            let mut c = GetLogPageCmd::new(cmd.lid, cmd.nsid, cmd.lpo + off as u64, part.len() as u32);
            c.lsp = cmd.lsp;
            c.lsi = cmd.lsi;
            c.csi = cmd.csi;
            c.uuid_index = cmd.uuid_index;
            c.ot = cmd.ot;
            off += part.len();
            c.rae = if off < total { true } else { cmd.rae };
            self.admin_command(c.to_sqe(0), Payload::Read(part)).await?;
        }
        Ok(())
    }

    /// Reads the Asymmetric Namespace Access log (LID 0Ch) as the Linux host
    /// does (`nvme_read_ana_log`): as long as Identify Controller says it can
    /// be (header, NANAGRPID groups, 4 bytes per namespace of MNAN), with RAE
    /// clear, which re-arms the controller's ANA Change notice. Each group
    /// gives its state through this controller's port and its NSIDs. Fails
    /// with [`Error::Controller`] when the controller reports no ANA (CMIC bit 3).
    pub async fn ana_log(&self) -> Result<AnaLog> {
        /// Largest log read (the Linux host's bound is MDTS; nvmet's is 8 KiB).
        const MAX_ANA_LOG: u64 = 16 << 20;
        let id = &self.info().identify;
        if id.cmic & 0x08 == 0 {
            return Err(Error::Controller(
                "the controller reports no ANA (Identify Controller CMIC bit 3)".into(),
            ));
        }
        let nn = if id.mnan != 0 { id.mnan } else { id.nn };
        let len = 16 + 32 * u64::from(id.nanagrpid) + 4 * u64::from(nn);
        if len > MAX_ANA_LOG {
            return Err(Error::Controller(format!(
                "an ANA log of {len} bytes (NANAGRPID {}, MNAN {nn}) is larger than {MAX_ANA_LOG}",
                id.nanagrpid
            )));
        }
        let mut buf = vec![0u8; len as usize];
        self.get_log_page(GetLogPageCmd::new(LogPageId::ANA, 0xFFFF_FFFF, 0, len as u32), &mut buf).await?;
        Ok(AnaLog::decode(&buf)?)
    }

    /// Reads the Changed Namespace List (LID 04h) with RAE clear, as the Linux
    /// host does after a Namespace Attribute Changed notice
    /// (`nvme_clear_changed_ns_log`): the NSIDs whose attributes changed since
    /// the last read, `[0xFFFF_FFFF]` when more than 1024 did. Reading it
    /// re-arms the notice.
    pub async fn changed_namespaces(&self) -> Result<Vec<u32>> {
        let mut buf = vec![0u8; IDENTIFY_DATA_LEN];
        let cmd = GetLogPageCmd::new(LogPageId::CHANGED_NS, 0xFFFF_FFFF, 0, buf.len() as u32);
        self.get_log_page(cmd, &mut buf).await?;
        Ok(decode_ns_list(&buf))
    }

    /// Reads one entry of the Reservation Notification log (log page 80h),
    /// which the read removes; an empty page (type 0) when none is left.
    /// [`ControllerEvent::Reservations`](crate::ControllerEvent::Reservations)
    /// reports them as they come.
    pub async fn reservation_log(&self) -> Result<ReservationNotification> {
        let mut buf = [0u8; NOTIFICATION_LOG_LEN];
        let cmd = GetLogPageCmd::new(LogPageId::RESERVATION, 0xFFFF_FFFF, 0, buf.len() as u32);
        self.get_log_page(cmd, &mut buf).await?;
        Ok(ReservationNotification::decode(&buf)?)
    }

    /// Get Features; returns CQE DW0. `buf` receives the feature's data, if it has any.
    pub async fn get_features(&self, cmd: GetFeaturesCmd, buf: Option<&mut [u8]>) -> Result<u32> {
        let payload = buf.map_or(Payload::None, Payload::Read);
        Ok(self.admin_command(cmd.to_sqe(0), payload).await?.dw0())
    }

    /// Set Features; returns CQE DW0.
    pub async fn set_features(&self, cmd: SetFeaturesCmd, data: Option<&[u8]>) -> Result<u32> {
        let payload = data.map_or(Payload::None, Payload::Write);
        Ok(self.admin_command(cmd.to_sqe(0), payload).await?.dw0())
    }

    /// Property Get (fabrics); 8-byte access for CAP, else 4 bytes.
    pub async fn property_get(&self, offset: PropertyOffset) -> Result<u64> {
        prop_get(&self.core().admin, offset, false).await
    }

    /// Property Set (fabrics).
    pub async fn property_set(&self, offset: PropertyOffset, value: u64) -> Result<()> {
        prop_set(&self.core().admin, offset, value, false).await
    }

    /// Sends one Keep Alive command now.
    pub async fn keep_alive(&self) -> Result<()> {
        self.core().keep_alive(false).await
    }

    /// Reads the whole discovery log page (LID 70h) like libnvme: header,
    /// then every record with LPO paging, then the header again; retried while
    /// GENCTR changes in between.
    pub async fn discovery_log(&self) -> Result<DiscoveryLog> {
        const MAX_RECORDS: u64 = 1 << 16;
        for attempt in 0..10 {
            let mut hdr = [0u8; 20];
            let mut cmd = GetLogPageCmd::new(LogPageId::DISCOVERY, 0, 0, 20);
            cmd.rae = true;
            self.get_log_page(cmd, &mut hdr).await?;
            let h = DiscoveryLogHeader::decode(&hdr)?;
            if h.numrec > MAX_RECORDS {
                return Err(Error::Controller(format!("discovery log claims {} records", h.numrec)));
            }
            let mut recs = vec![0u8; h.numrec as usize * DISC_RECORD_LEN];
            if !recs.is_empty() {
                // libnvme splits the records into 4 KiB reads.
                let mut off = 0;
                let total = recs.len();
                for part in recs.chunks_mut(4096) {
                    let mut c = GetLogPageCmd::new(
                        LogPageId::DISCOVERY,
                        0,
                        (DISC_RECORD_LEN + off) as u64,
                        part.len() as u32,
                    );
                    off += part.len();
                    c.rae = off < total;
                    self.admin_command(c.to_sqe(0), Payload::Read(part)).await?;
                }
            }
            let mut hdr2 = [0u8; 20];
            self.get_log_page(GetLogPageCmd::new(LogPageId::DISCOVERY, 0, 0, 20), &mut hdr2).await?;
            let h2 = DiscoveryLogHeader::decode(&hdr2)?;
            if h2.genctr != h.genctr || h2.numrec != h.numrec {
                debug!(attempt, "discovery log changed while reading; retrying");
                continue;
            }
            let mut full = Vec::with_capacity(DISC_RECORD_LEN + recs.len());
            full.extend_from_slice(&hdr);
            full.resize(DISC_RECORD_LEN, 0);
            full.extend_from_slice(&recs);
            return Ok(DiscoveryLog::decode(&full)?);
        }
        Err(Error::Controller("discovery log kept changing (GENCTR) while being read".into()))
    }

    /// Orderly shutdown (reference §4.5): stops keep-alive and reconnects,
    /// closes the I/O queues, sets CC.SHN = 01b, waits for CSTS.SHST = 10b,
    /// then closes the admin queue. Outstanding and later requests fail with
    /// [`Error::Shutdown`].
    pub async fn shutdown(&self) -> Result<()> {
        let core = self.core();
        self.inner.stop_tasks();
        let was_live = self.state() == ControllerState::Live;
        core.state.send_replace(ControllerState::Shutdown);
        for q in &core.io {
            q.send_ctrl(DriverCtrl::Shutdown);
        }
        // Stops the admin queue when this future ends, also when it is
        // dropped during the handshake below (an application's timeout):
        // otherwise a controller that says `Shutdown` kept serving admin
        // commands on a connection without keep-alive.
        let _admin = SpawnedDrivers(vec![core.admin.clone()]);
        let r = if was_live {
            let info = self.info();
            let timeout = SHUTDOWN_TIMEOUT
                .max(Duration::from_micros(info.identify.rtd3e as u64))
                .min(Duration::from_secs(60));
            // As setup commands: the supervisor is stopped, so nothing would
            // reconnect for a command parked after a connection loss, and
            // `shutdown` would wait for it forever. These fail with the loss.
            async {
                prop_set(&core.admin, PropertyOffset::CC, info.cc.with_shn(Cc::SHN_NORMAL).0 as u64, true)
                    .await?;
                wait_csts(&core.admin, timeout, |c| c.shst() == Csts::SHST_COMPLETE, true).await.map(drop)
            }
            .await
        } else {
            Ok(())
        };
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(tos: Option<u8>, host_traddr: Option<&str>, host_iface: Option<&str>) -> ConnectOptions {
        ConnectOptions {
            tos,
            host_traddr: host_traddr.map(|a| a.parse().unwrap()),
            host_iface: host_iface.map(str::to_owned),
            ..ConnectOptions::default()
        }
    }

    #[test]
    fn write_queues_split_as_linux_does() {
        // (read or shared queues, write queues, granted) → (created, of which write queues)
        for (io, w, granted, want) in [
            (4, 0, 8, (4, 0)),
            (4, 0, 2, (2, 0)),
            (2, 2, 4, (4, 2)),
            (2, 4, 8, (6, 4)),
            // Dedicated write queues only once every read queue is there.
            (2, 2, 3, (3, 1)),
            (2, 2, 2, (2, 0)),
            (4, 2, 3, (3, 0)),
        ] {
            assert_eq!(queue_split(io, w, granted), want, "io {io} write {w} granted {granted}");
        }
    }

    fn syn_retries(s: &tokio::net::TcpSocket) -> libc::c_int {
        use std::os::fd::AsRawFd;
        let (mut v, mut len) = (0 as libc::c_int, std::mem::size_of::<libc::c_int>() as libc::socklen_t);
        // SAFETY: a valid socket and an int-sized buffer with its length.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_SYNCNT,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        v
    }

    #[tokio::test]
    async fn socket_options_are_set_before_connecting() {
        let v4: SocketAddr = "127.0.0.1:4420".parse().unwrap();
        let v6: SocketAddr = "[::1]:4420".parse().unwrap();
        // IP_TOS over IPv4, IPV6_TCLASS over IPv6; the system's 0 unless asked.
        let s = tcp_socket(v4, &opts(Some(0xb8), None, None)).unwrap();
        assert_eq!(socket2::SockRef::from(&s).tos().unwrap(), 0xb8);
        let s = tcp_socket(v4, &opts(None, None, None)).unwrap();
        assert_eq!(socket2::SockRef::from(&s).tos().unwrap(), 0);
        assert_eq!(syn_retries(&s), 1, "one SYN resend, as Linux's host");
        assert_eq!(socket2::SockRef::from(&s).device().unwrap(), None);
        if let Ok(s) = tcp_socket(v6, &opts(Some(0x20), None, None)) {
            assert_eq!(socket2::SockRef::from(&s).tclass_v6().unwrap(), 0x20);
        }
        // The source address is bound; the port waits for the connect, which
        // picks one no connection to that destination uses.
        let s = tcp_socket(v4, &opts(None, Some("127.0.0.2"), Some("lo"))).unwrap();
        let local = s.local_addr().unwrap();
        assert_eq!(local.ip().to_string(), "127.0.0.2");
        assert_eq!(local.port(), 0);
        assert_eq!(socket2::SockRef::from(&s).device().unwrap().as_deref(), Some(&b"lo"[..]));
    }

    #[tokio::test]
    async fn bad_socket_options_are_refused_by_name() {
        let v4: SocketAddr = "127.0.0.1:4420".parse().unwrap();
        let err = |o: ConnectOptions| match tcp_socket(v4, &o) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{o:?} accepted"),
        };
        let e = err(opts(None, Some("::1"), None));
        assert!(e.contains("host_traddr ::1") && e.contains("different address families"), "{e}");
        let e = err(opts(None, None, Some("nvmeof-none0")));
        assert!(matches!(
            tcp_socket(v4, &opts(None, None, Some("nvmeof-none0"))),
            Err(Error::InvalidArgument(_))
        ));
        assert!(e.contains("\"nvmeof-none0\": no such network interface"), "{e}");
        for bad in ["", "a-name-too-long-x", "l\0o"] {
            let e = err(opts(None, None, Some(bad)));
            assert!(e.contains("is not an interface name"), "{bad:?}: {e}");
        }
        // 192.0.2.1 (TEST-NET-1) is no address of this host: the bind fails.
        let e = err(opts(None, Some("192.0.2.1"), None));
        assert!(e.contains("binding to host_traddr 192.0.2.1"), "{e}");
    }
}
