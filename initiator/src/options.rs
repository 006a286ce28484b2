//! Connection options, reconnect policy and the host identity.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nvmeof_common::auth::DhchapSecret;
use nvmeof_common::spec::nqn;

/// Where nvme-cli (libnvme) keeps the Linux host's identity: `hostnqn` and
/// `hostid` (`nvmf_hostnqn_from_file`, `nvmf_hostid_from_file`).
pub const NVME_CLI_DIR: &str = "/etc/nvme";

/// Host NQN and host identifier (HOSTID) sent in every Connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostIdentity {
    /// Host NQN.
    pub nqn: String,
    /// Host identifier (UUID bytes in textual order).
    pub id: [u8; 16],
}

impl HostIdentity {
    /// Identity from a host ID, with the UUID-form NQN
    /// `nqn.2014-08.org.nvmexpress:uuid:<id>`.
    pub fn from_id(id: [u8; 16]) -> Self {
        Self { nqn: nqn::uuid_nqn(&id), id }
    }

    /// Identity with an explicit NQN and ID.
    pub fn new(nqn: impl Into<String>, id: [u8; 16]) -> Self {
        Self { nqn: nqn.into(), id }
    }

    /// This machine's identity: the Linux host's where nvme-cli has one
    /// (`/etc/nvme/hostnqn`, `/etc/nvme/hostid`, as `nvme connect` sends
    /// them), so this host is the same host to a target as the kernel's
    /// (its `allowed_hosts` entry, its reservations); else
    /// [`Self::own`]. The same as [`Self::resolve`]`(None, None)`.
    pub fn default_for_host() -> Self {
        Self::resolve(None, None)
    }

    /// The identity for an NQN and ID given by hand, either or both missing
    /// (the `--hostnqn` and `--hostid` of `nvme connect`), the rest filled
    /// in as libnvme does (`nvme_host_get_ids`): the NQN from
    /// `/etc/nvme/hostnqn`, else the UUID form of the given ID; the ID from
    /// `/etc/nvme/hostid`, else the UUID of a UUID-form NQN; what is still
    /// missing from [`Self::own`].
    pub fn resolve(nqn: Option<&str>, id: Option<[u8; 16]>) -> Self {
        Self::resolve_in(Path::new(NVME_CLI_DIR), nqn, id)
    }

    fn resolve_in(dir: &Path, nqn: Option<&str>, id: Option<[u8; 16]>) -> Self {
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        let nqn =
            nqn.map(str::to_string).or_else(|| read("hostnqn")).or_else(|| id.map(|i| nqn::uuid_nqn(&i)));
        let id = id
            .or_else(|| read("hostid").and_then(|s| nqn::parse_uuid(&s)))
            .or_else(|| nqn.as_deref().and_then(nqn::uuid_from_nqn));
        match (nqn, id) {
            (Some(nqn), Some(id)) => Self::new(nqn, id),
            (Some(nqn), None) => Self::new(nqn, Self::own().id),
            (None, _) => Self::own(),
        }
    }

    /// This library's own stable identity for this machine and user, found
    /// in this order:
    /// 1. a UUID stored in `$XDG_CONFIG_HOME/nvmeof/hostid` (or `~/.config/nvmeof/hostid`);
    /// 2. a UUID derived from `/etc/machine-id` (hashed with an application key, so the
    ///    machine ID itself is not disclosed);
    /// 3. a random UUID, stored in the file of step 1 so that it stays the same.
    ///
    /// The NQN is the UUID form (like the Linux host's default).
    pub fn own() -> Self {
        let path = config_dir().map(|d| d.join("nvmeof").join("hostid"));
        if let Some(id) = path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|s| nqn::parse_uuid(s.trim()))
        {
            return Self::from_id(id);
        }
        if let Some(id) = std::fs::read_to_string("/etc/machine-id").ok().and_then(|s| id_from_machine_id(&s))
        {
            return Self::from_id(id);
        }
        let id = random_uuid();
        if let Some(p) = path {
            if let Some(dir) = p.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            if let Err(e) = std::fs::write(&p, format!("{}\n", nqn::format_uuid(&id))) {
                tracing::debug!(path = %p.display(), error = %e, "could not store the generated host ID");
            }
        }
        Self::from_id(id)
    }
}

fn config_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_CONFIG_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    std::env::var_os("HOME").filter(|d| !d.is_empty()).map(|h| PathBuf::from(h).join(".config"))
}

/// FNV-1a, 128-bit.
fn fnv128(data: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    data.iter().fold(OFFSET, |h, &b| (h ^ b as u128).wrapping_mul(PRIME))
}

/// Marks 16 bytes as a version-4 (random) RFC 4122 UUID.
fn as_uuid_v4(mut b: [u8; 16]) -> [u8; 16] {
    b[6] = (b[6] & 0x0F) | 0x40;
    b[8] = (b[8] & 0x3F) | 0x80;
    b
}

/// Derives a host ID from the contents of `/etc/machine-id` (32 hex digits);
/// `None` if it does not look like one.
pub(crate) fn id_from_machine_id(s: &str) -> Option<[u8; 16]> {
    let s = s.trim();
    if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut key = b"nvmeof-initiator host id v1:".to_vec();
    key.extend_from_slice(s.as_bytes());
    Some(as_uuid_v4(fnv128(&key).to_be_bytes()))
}

fn random_uuid() -> [u8; 16] {
    let mut b = [0u8; 16];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .is_ok();
    if !ok {
        // Last resort: time, process ID and an address, hashed.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let seed = format!("{:?}{}{:p}", t, std::process::id(), &b);
        b = fnv128(seed.as_bytes()).to_be_bytes();
    }
    as_uuid_v4(b)
}

/// What happens when a connection of the controller fails.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// Wait before the first reconnect attempt (Linux `reconnect_delay`, 10 s).
    pub delay: Duration,
    /// Backoff cap: the wait doubles after every failed attempt, up to this.
    pub max_delay: Duration,
    /// Give up after this long without a working association (Linux
    /// `ctrl_loss_tmo`, 600 s); `None` retries forever, `Some(ZERO)` never reconnects.
    pub ctrl_loss_timeout: Option<Duration>,
    /// Resubmit commands that were outstanding on the lost connection once
    /// reconnected (`true`), or fail them at once with
    /// [`crate::Error::ConnectionLost`] (`false`). A command is resubmitted
    /// at most 5 times (Linux `nvme_max_retries`), then fails with that error.
    /// Commands submitted while reconnecting wait for the outcome (or for
    /// [`Self::fast_io_fail_timeout`]).
    /// Either way, commands whose responses had reached the host's socket
    /// before the connection was dropped complete with those responses.
    pub requeue: bool,
    /// Reconnecting for longer than this fails the commands waiting for the
    /// reconnect (those resubmitted and those submitted since) with
    /// [`crate::Error::ConnectionLost`], and new ones at once, until the
    /// controller is live again; reconnecting goes on up to
    /// [`Self::ctrl_loss_timeout`] (Linux `fast_io_fail_tmo`, off by
    /// default). `None` lets them wait for the outcome.
    pub fast_io_fail_timeout: Option<Duration>,
}

impl Default for ReconnectPolicy {
    fn default() -> Self {
        Self {
            delay: Duration::from_secs(2),
            max_delay: Duration::from_secs(30),
            ctrl_loss_timeout: Some(Duration::from_secs(600)),
            requeue: true,
            fast_io_fail_timeout: None,
        }
    }
}

impl ReconnectPolicy {
    /// No reconnect: the first connection failure loses the controller.
    pub fn never() -> Self {
        Self {
            delay: Duration::ZERO,
            max_delay: Duration::ZERO,
            ctrl_loss_timeout: Some(Duration::ZERO),
            requeue: false,
            fast_io_fail_timeout: None,
        }
    }
}

/// How namespace handles pick an I/O queue for each request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueSelect {
    /// Rotate over the I/O queues, one request at a time.
    #[default]
    RoundRobin,
    /// Stick to one queue per OS thread (good locality with a multi-thread runtime).
    PerThread,
}

/// Options of [`crate::Controller::connect`].
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// Host NQN and ID; `None` uses [`HostIdentity::default_for_host`].
    pub host: Option<HostIdentity>,
    /// I/O queues to ask for (capped by the controller's Number of Queues answer).
    pub io_queues: u16,
    /// Further I/O queues dedicated to writes (`nvme connect
    /// --nr-write-queues`, default 0): with them, reads go to the
    /// [`Self::io_queues`] and every other command (writes, flushes, Write
    /// Zeroes, passthrough) to these, so a large write queued in a socket
    /// never holds up the reads behind it. As with Linux, the controller must
    /// grant more than `io_queues` queues for any to be dedicated (then up to
    /// this many); otherwise all queues take all commands.
    /// [`crate::ControllerInfo::write_queues`] says what was set up.
    pub write_queues: u16,
    /// Entries per I/O queue (SQSIZE + 1), clamped to CAP.MQES + 1 and MAXCMD;
    /// at most `depth − 1` commands are outstanding per queue.
    pub queue_depth: u16,
    /// Ask for header digests.
    pub hdr_digest: bool,
    /// Ask for data digests.
    pub data_digest: bool,
    /// Keep-alive timeout sent in the admin Connect (in whole milliseconds); a
    /// Keep Alive command goes out every KATO/2. `Duration::ZERO` (or anything
    /// under 1 ms) disables keep-alive.
    pub kato: Duration,
    /// Default per-command timeout (I/O and admin). A command that runs past
    /// it fails with [`Error::Timeout`](crate::Error::Timeout) and, as with
    /// Linux, the association is reset: its queues reconnect per
    /// [`Self::reconnect`] and the other outstanding commands are resubmitted
    /// (or failed) by that policy.
    pub command_timeout: Duration,
    /// Timeout of TCP connect and of the ICReq/ICResp exchange. As with
    /// Linux's host, an unanswered SYN is sent again once only, so a connect
    /// to a host that is down fails after about 3 s (a transport error,
    /// `TimedOut`) when this is longer.
    pub connect_timeout: Duration,
    /// Reconnect behaviour.
    pub reconnect: ReconnectPolicy,
    /// Ask the controller to disable SQ flow control (Connect CATTR bit 2);
    /// nvmet then completes reads with SUCCESS-flagged C2HData and no CapsuleResp.
    pub disable_sqflow: bool,
    /// Largest data transfer per command (default 1 MiB), in addition to the
    /// controller's MDTS; `None` leaves only the controller's bound: MDTS, or
    /// where it reports none its MAXH2CDATA (at least 1 MiB), which the Linux
    /// kernel target enforces per command (4 MiB).
    pub max_transfer: Option<u32>,
    /// Times a [`crate::Namespace`] request's command that the controller
    /// failed with a status without Do Not Retry is sent again before the
    /// error is returned (Linux `nvme_max_retries`, 5), after the Command
    /// Retry Delay its status names (CRD: CRDT1–3 of Identify Controller, in
    /// 100 ms units); 0 returns every error at once. As with Linux, a request
    /// with [`crate::IoFlags::limited_retry`] is not retried, nor are
    /// commands sent through [`crate::Controller`] (passthrough) or
    /// reservation commands, and a path error of a [`crate::MultipathNamespace`]
    /// namespace moves to another path instead.
    pub max_retries: u8,
    /// Queue choice for namespace I/O.
    pub queue_select: QueueSelect,
    /// Busy-poll the socket for this long after activity while commands are
    /// outstanding, before sleeping (trades CPU for latency; zero disables).
    /// The window grows up to [`nvmeof_net::POLL_GROW_LIMIT`] × this while
    /// sleeps keep ending within that ([`nvmeof_net::PollWindow`]).
    pub busy_poll: Duration,
    /// `SO_SNDBUF` of every queue's socket in bytes; 0 leaves it to the
    /// kernel's autotuning. The default, [`nvmeof_net::default_send_buffer`],
    /// keeps write data in flight cache-resident (it says what that gave);
    /// raise it, or use 0, where one connection's bandwidth × round trip
    /// exceeds twice this.
    pub send_buffer: usize,
    /// TCP congestion control of every queue's socket (`TCP_CONGESTION`, e.g.
    /// `cubic`); `None` keeps the system's. Connecting fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) where the
    /// kernel refuses the name ([`nvmeof_net::set_congestion_control`] says
    /// when it matters).
    pub congestion_control: Option<nvmeof_net::CongestionControl>,
    /// Source address of every queue's socket (`nvme connect --host-traddr`):
    /// bound before connecting, as Linux's `nvme_tcp_alloc_queue` does, so a
    /// host with several addresses or NICs picks the one the target sees
    /// (and its route). Its family must be the target address's; connecting
    /// fails with [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// otherwise, and with a transport error where the bind fails (an
    /// address this host does not have).
    pub host_traddr: Option<std::net::IpAddr>,
    /// Network interface every queue's socket is bound to (`SO_BINDTODEVICE`,
    /// `nvme connect --host-iface`): its packets leave through that interface
    /// whatever the routing table says. Connecting fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming it
    /// where the kernel has no such interface (Linux checks the name too).
    pub host_iface: Option<String>,
    /// IP type of service of every queue's socket (`nvme connect --tos`):
    /// `IP_TOS` over IPv4, `IPV6_TCLASS` over IPv6 (DSCP and ECN bits, for
    /// networks that give storage traffic its own class); `None` keeps the
    /// system's (0).
    pub tos: Option<u8>,
    /// `SO_PRIORITY` of every queue's socket (the Linux host's nvme-tcp
    /// `so_priority` module parameter): the queueing class `tc` filters and
    /// `mqprio` traffic classes map to NIC queues and DCB priorities; `None`
    /// keeps the default (0). Above 6 the kernel asks for `CAP_NET_ADMIN`:
    /// connecting then fails with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    pub so_priority: Option<u32>,
    /// Enable the asynchronous events the controller supports among those
    /// the host reads logs for (namespace attribute, firmware activation,
    /// ANA and discovery log changes) and keep an Asynchronous Event Request
    /// outstanding, as the Linux host does; see
    /// [`crate::Controller::events`]. Takes one admin command slot.
    pub async_events: bool,
    /// The host's DH-HMAC-CHAP secret (`nvme connect --dhchap-secret`; parse
    /// the `DHHC-1:…` text with `str::parse`). When a Connect response asks
    /// for in-band authentication (AUTHREQ.ATR), on the admin queue or an I/O
    /// queue, at connect or reconnect, the queue runs DH-HMAC-CHAP with it
    /// (any hash, any DH group the controller picks) before anything else is
    /// sent on it (each step within [`Self::connect_timeout`]); without it
    /// such a connect fails with [`Error::Auth`](crate::Error::Auth). A
    /// controller that does not ask is used without authentication, as the
    /// Linux host does.
    pub dhchap_secret: Option<DhchapSecret>,
    /// The controller's secret (`--dhchap-ctrl-secret`): with it the host also
    /// challenges the controller (bidirectional authentication) and fails the
    /// connect unless the controller's response proves it holds this secret.
    /// Needs [`Self::dhchap_secret`].
    pub dhchap_ctrl_secret: Option<DhchapSecret>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            host: None,
            io_queues: std::thread::available_parallelism().map_or(1, |n| n.get().min(64) as u16),
            write_queues: 0,
            queue_depth: 128,
            hdr_digest: false,
            data_digest: false,
            kato: Duration::from_secs(5),
            command_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            reconnect: ReconnectPolicy::default(),
            disable_sqflow: false,
            max_transfer: Some(1 << 20),
            max_retries: 5,
            queue_select: QueueSelect::RoundRobin,
            busy_poll: Duration::ZERO,
            send_buffer: nvmeof_net::default_send_buffer(),
            congestion_control: None,
            host_traddr: None,
            host_iface: None,
            tos: None,
            so_priority: None,
            async_events: true,
            dhchap_secret: None,
            dhchap_ctrl_secret: None,
        }
    }
}

impl ConnectOptions {
    /// Options for a discovery controller: no I/O queues, KATO 0 (Linux default
    /// for non-persistent discovery), no reconnect, no asynchronous events
    /// (a persistent discovery controller turns them on, with a KATO, to
    /// learn of discovery log changes).
    pub fn discovery() -> Self {
        Self::default().for_discovery()
    }

    /// These options (host identity, keys, source address, digests,
    /// timeouts) for a discovery controller, as [`Self::discovery`] sets
    /// them: no I/O queues, KATO 0, no reconnect, no asynchronous events.
    pub fn for_discovery(self) -> Self {
        Self {
            io_queues: 0,
            kato: Duration::ZERO,
            reconnect: ReconnectPolicy::never(),
            async_events: false,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// nvme-cli's files first, the gaps filled as libnvme's
    /// `nvme_host_get_ids`; this library's own identity where there are none.
    #[test]
    fn host_identity_follows_nvme_cli() {
        let dir = std::env::temp_dir().join(format!("nvmeof-hostid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (own, given) = (HostIdentity::own(), [0x42; 16]);
        let r = |nqn: Option<&str>, id| HostIdentity::resolve_in(&dir, nqn, id);
        // No files: this library's own, or what was given.
        assert_eq!(r(None, None), own);
        assert_eq!(
            r(Some("nqn.2014-08.org.example:h"), None),
            HostIdentity::new("nqn.2014-08.org.example:h", own.id)
        );
        assert_eq!(r(None, Some(given)), HostIdentity::from_id(given));
        let uuid_nqn = "nqn.2014-08.org.nvmexpress:uuid:1164775d-7d3c-4ca6-9dfa-e1fcd301bca3";
        let in_nqn = nqn::parse_uuid("1164775d-7d3c-4ca6-9dfa-e1fcd301bca3").unwrap();
        assert_eq!(r(Some(uuid_nqn), None).id, in_nqn, "the UUID of a UUID-form NQN");
        // A host NQN file alone: its NQN, the ID its UUID (or this library's).
        std::fs::write(dir.join("hostnqn"), format!("{uuid_nqn}\n")).unwrap();
        assert_eq!(r(None, None), HostIdentity::new(uuid_nqn, in_nqn));
        std::fs::write(dir.join("hostnqn"), "nqn.2014-08.org.example:named\n").unwrap();
        assert_eq!(r(None, None), HostIdentity::new("nqn.2014-08.org.example:named", own.id));
        assert_eq!(r(None, Some(given)), HostIdentity::new("nqn.2014-08.org.example:named", given));
        // Both files (nvme-cli's package writes them apart, so they may not match).
        let file_id = "f42e64ca-ee56-4fb5-8e9e-64ed10b935ce";
        std::fs::write(dir.join("hostid"), format!("{file_id}\n")).unwrap();
        let both = HostIdentity::new("nqn.2014-08.org.example:named", nqn::parse_uuid(file_id).unwrap());
        assert_eq!(r(None, None), both);
        // What is given wins over the files.
        assert_eq!(r(Some(uuid_nqn), None), HostIdentity::new(uuid_nqn, both.id));
        assert_eq!(r(Some(uuid_nqn), Some(given)), HostIdentity::new(uuid_nqn, given));
        // A host ID file that holds no UUID is passed over.
        std::fs::write(dir.join("hostid"), "not a uuid\n").unwrap();
        assert_eq!(r(None, None).id, own.id);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn machine_id_derivation_is_stable_and_uuid_shaped() {
        let a = id_from_machine_id("0123456789abcdef0123456789abcdef\n").unwrap();
        let b = id_from_machine_id("0123456789abcdef0123456789abcdef").unwrap();
        assert_eq!(a, b);
        assert_eq!(a[6] >> 4, 4);
        assert_eq!(a[8] >> 6, 2);
        assert_ne!(a, id_from_machine_id("0123456789abcdef0123456789abcdee").unwrap());
        assert!(id_from_machine_id("xyz").is_none());
        let h = HostIdentity::from_id(a);
        assert!(h.nqn.starts_with("nqn.2014-08.org.nvmexpress:uuid:"));
        assert_eq!(nqn::uuid_from_nqn(&h.nqn), Some(a));
    }

    #[test]
    fn default_identity_is_stable() {
        assert_eq!(HostIdentity::default_for_host(), HostIdentity::default_for_host());
    }
}
