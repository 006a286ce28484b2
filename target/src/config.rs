//! Target configuration: from the command line or a TOML file.
//!
//! ```toml
//! io_engine = "threads"   # optional, before any table: "threads" | "uring" | "auto"
//! discovery_nqn = "nqn.2026-11.io.nvmeof:discovery"   # optional, before any table: a unique
//!                         # discovery NQN (nvmet's discovery_nqn; the well-known one works too); SIGHUP renames
//! discovery_filter = "address,svcid"   # optional, before any table: which ports the discovery log lists
//!                         # to a host (SPDK's discovery_filter): "match_any" (default: every port) or any of
//!                         # "transport", "address", "svcid", comma-separated: only ports matching the
//!                         # address / TCP port the host asked on ("address,svcid": that port only, as nvmet)
//!
//! [limits]            # all optional
//! mdts = 8            # 2^8 × 4 KiB = 1 MiB per command (1..=18)
//! max_io_queues = 128
//! max_queue_entries = 1024
//! in_capsule_data = 131072   # writes up to this size travel in the capsule (no R2T)
//! max_h2c_data = 1048576
//! max_connections = 1024   # at least 1
//! poll_us = 0         # busy-poll after activity (µs); 0 = sleep in epoll
//! send_buffer = 524288   # SO_SNDBUF per connection; 0 = kernel autotuning; default: L2 / 4
//! congestion_control = "cubic"   # TCP_CONGESTION per connection; default: the system's
//! so_priority = 3     # SO_PRIORITY per connection (nvmet-tcp's so_priority); 0 = default
//!
//! [[port]]
//! listen = "0.0.0.0:4420"
//! portid = 1                             # optional: nvmet's ports/N, the discovery log's PORTID
//!                                        #   (default: the table's position, from 1)
//! ana_state = "optimized"                # optional: every ANA group's state through this port
//! ana_groups = { 2 = "non-optimized" }   # optional: states of single groups (1..=128)
//! in_capsule_data = 16384                # optional: this port's own [limits] value (nvmet's
//! max_queue_entries = 128                #   param_inline_data_size, param_max_queue_size)
//!
//! [metrics]                              # optional: Prometheus metrics (GET /metrics)
//! listen = "127.0.0.1:9464"              # address of the metrics listener (a restart applies changes)
//!
//! [[referral]]                            # optional: another discovery service the log lists
//! address = "192.0.2.10:8009"             # IP:PORT (TRADDR, TRSVCID); SIGHUP applies changes
//! portid = 1                              # optional: its entry's PORTID (default 0)
//! ports = [1]                             # optional: listed through these ports only (their
//!                                         #   portid; nvmet's ports/N/referrals); default every port
//!
//! [[subsystem]]
//! nqn = "nqn.2026-11.io.nvmeof:disk"
//! model = "nvmeof"                       # optional
//! serial = "0123456789"                  # optional: Identify SN (≤ 20), default derived from the NQN
//! firmware = "1.0"                       # optional: Identify FR (≤ 8), default this build's version
//! ieee_oui = 0x0050c2                    # optional: Identify IEEE OUI (24 bits), default 0
//! allowed_hosts = ["nqn.2014-08.org.nvmexpress:uuid:..."]   # omit: any host; SIGHUP applies changes
//! cntlid_min = 1                         # optional: controller IDs (to 0xFFEF); disjoint ranges
//! cntlid_max = 65519                     #   for targets exporting one subsystem (multipath)
//! max_io_queues = 4                      # optional: I/O queues per controller (nvmet's attr_qid_max)
//! ports = [1]                            # optional: exported on these ports only (their portid);
//!                                        #   default every port; SIGHUP applies changes
//! # An entry may instead be a table that also sets DH-HMAC-CHAP keys for the host:
//! # { nqn = "...", dhchap_key = "DHHC-1:00:...:", dhchap_ctrl_key = "DHHC-1:...",
//! #   dhchap_hash = "sha256", dhchap_dhgroup = "null" }
//!
//! [[subsystem.namespace]]
//! nsid = 1                               # optional: next free
//! file = "/var/tmp/disk.img"             # or ram = "1G", or block = "/dev/sdb"
//! size = "10G"                           # file only: create sparse / grow
//! block_size = 512                       # optional
//! io_engine = "uring"                    # optional (file/block only): overrides the top-level one
//! buffered_io = true                     # optional (file only): false = O_DIRECT (io_uring)
//! read_only = false                      # optional (file/block only): export read-only
//! exclusive = true                       # optional (block only): false exports a device in use
//! ana_group = 1                          # optional: ANA group (1..=128)
//! hosts = ["nqn.2014-08.org.nvmexpress:uuid:..."]   # optional: only these hosts see it; SIGHUP applies
//! reservations = false                  # optional: persistent reservations (nvmet resv_enable)
//! reservations_file = "/var/lib/nvmeof/ns1.resv"  # optional: they persist through power loss
//! reservations_format = "nvmeof"         # optional: "spdk" reads and writes SPDK's ptpl_file JSON
//! qos_iops = 20000                       # optional: I/O commands per second; SIGHUP applies
//! qos_bandwidth = "500M"                 # optional: bytes per second (reads and writes together)
//! zoned = true                           # optional: a zoned namespace (Zoned Namespace command set)
//! zone_size = "64M"                      # optional (zoned): a power of two; default 64M
//! max_open_zones = 14                    # optional (zoned): MOR + 1; default no limit
//! max_active_zones = 14                  # optional (zoned): MAR + 1; default no limit
//! zone_state_file = "/var/lib/nvmeof/ns1.zones"  # optional (zoned): zone states kept across clean restarts
//! uuid = "0b1d8c4e-..."                  # optional: identifiers (also nguid, eui64); see NamespaceIds
//! ```
//!
//! `io_engine` chooses how file and block namespaces execute I/O: `threads` (a
//! worker-thread pool), `uring` (io_uring; opening fails where the kernel does
//! not offer it) or `auto` (io_uring where available, else the thread pool with
//! a warning). Unset, both use `auto` ([`IoEngine::FILE_DEFAULT`],
//! [`IoEngine::BLOCK_DEFAULT`]).
//!
//! `buffered_io` is nvmet's attribute of the same name: file namespaces go
//! through the page cache (the default), or with `false` are opened with
//! `O_DIRECT` where the filesystem allows it (io_uring only; the thread pool
//! always uses the page cache for files). Block devices always use `O_DIRECT`.
//!
//! `read_only = true` opens the file or device for reading only and exports
//! the namespace write protected for good (Namespace Write Protection, which
//! hosts cannot lift): the Linux host marks the block device read-only, and
//! commands other than Read and Flush fail with Namespace is Write Protected.
//! A read-only file must exist (no `size`).
//!
//! `exclusive` (block devices, default `true`) claims a writable block
//! namespace's device for the target, as LIO's `iblock` does (nvmet does
//! not): a device that is mounted (or one of its partitions is), an active
//! swap area, or held by LVM, MD RAID or another program is not exported
//! (the error says by what), and while exported it cannot be mounted or
//! built on. `exclusive = false` exports such a device anyway, e.g. under a
//! cluster filesystem that shares it; read-only namespaces are never claimed.
//!
//! `reservations = true` enables reservations on the namespace (nvmet's
//! `resv_enable`, off by default there too): hosts register keys and take
//! Write Exclusive or Exclusive Access reservations (Linux `blkpr`
//! ioctls, `nvme resv-register`, `resv-acquire`, ...), which other hosts'
//! reads and writes then meet as Reservation Conflict. Registrations last
//! until the target stops or a reload replaces the namespace (changing the
//! key does). With `reservations_file` (which implies `reservations`)
//! they can persist through power loss, as SPDK's `ptpl_file`: once a host
//! turns Persist Through Power Loss on (Register with CPTPL 11b, as the
//! Linux host's `pr_ops` always ask, or Set Features 83h), every change is
//! written to the file before the command completes, and the target
//! restores the registrations and the reservation when it starts again.
//! `reservations_format = "spdk"` keeps the file in SPDK's `ptpl_file` JSON
//! instead of this target's TOML: a namespace moved from SPDK (`import-spdk`
//! points at its `ptpl_file`) keeps its hosts' registrations, and SPDK can
//! take the file back.
//!
//! `hosts` hides the namespace from every host not listed (namespace
//! masking, as SPDK's `no_auto_visible` namespaces with `nvmf_ns_add_host`;
//! nvmet has none): one subsystem can give each host its own namespaces. A
//! hidden namespace is an inactive NSID to the other hosts: absent from their
//! active namespace list, ANA log and SMART totals, all zeroes in Identify
//! Namespace, and Invalid Namespace or Format for their commands. `hosts =
//! []` hides it from every host. A reload that changes the list tells the
//! controllers of the hosts that gain or lose the namespace (Namespace
//! Attribute Changed), and their Linux hosts add or drop its block device.
//! Where the subsystem lists `allowed_hosts`, every host here must be one.
//!
//! `qos_iops` and `qos_bandwidth` limit the namespace's rate (SPDK's bdev
//! QoS, `bdev_set_qos_limit`; nvmet has none): I/O commands per second from
//! every host and queue together (all but Flush and the reservation
//! commands), and bytes per second that Reads, Writes and Compares move. A
//! command past them waits in the target until the rate allows it (nothing
//! is refused), so one tenant's namespace cannot take a shared target's
//! whole throughput; an idle namespace may use 1 ms of its rate at once. A
//! reload changes them in place.
//!
//! `zoned` exports the namespace with the Zoned Namespace command set, as
//! SPDK's zoned bdev emulates one over any bdev (nvmet exports only zoned
//! block devices so): zones of `zone_size`, sequential write required,
//! Zone Append, Zone Management Send and Receive
//! ([`crate::core::zoned`]). A Linux host sees a host-managed zoned block
//! device (`/sys/block/nvmeXnY/queue/zoned`), for zonefs, f2fs, btrfs or
//! ZenFS. Zone states live in memory: at start a zone whose blocks hold no
//! data (a hole of a sparse file; RAM) is Empty, any other Full; with a
//! `zone_state_file` a clean stop saves the zone states there (after the
//! data is flushed) and the next start restores them and deletes the file,
//! so after a crash the zones come from the store again. A zoned namespace
//! keeps the size it started with: a reload that changes its size or zone
//! settings replaces it.
//!
//! `ana_state` and `ana_groups` set what each port reports for Asymmetric
//! Namespace Access (nvmet's `ports/N/ana_groups/G/ana_state`): every group
//! is `optimized` unless configured (`non-optimized`, `inaccessible`,
//! `persistent-loss`, `change`). A namespace is in group 1 unless its
//! `ana_group` says otherwise. A host with native multipath sends I/O down
//! the optimized ports, and a port whose state refuses I/O answers with the
//! ANA status, so the host moves it to another path. Unlike the listen
//! addresses, both apply on reload (SIGHUP), and connected hosts get the ANA
//! Change notice: an admin fails a subsystem over from one port to another
//! by editing the file.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::Deserialize;

use nvmeof_common::auth::{DhGroup, DhchapSecret, HashId};
use nvmeof_common::spec::log::AnaState;

use crate::core::ana::{parse_ana_state, DEFAULT_ANA_GROUP};
use crate::core::qos::QosLimits;
use crate::core::target::Referral;
use crate::core::{DiscoveryFilter, Limits, PortParams};

/// Errors that name the key and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// File could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// TOML syntax or type error (the message names the key).
    #[error("{0}")]
    Toml(String),
    /// A value is out of range or inconsistent.
    #[error("{key}: {why}")]
    Invalid {
        /// Dotted key path.
        key: String,
        /// Reason.
        why: String,
    },
}

fn invalid(key: impl Into<String>, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), why: why.into() }
}

/// Parses sizes like `4096`, `4k`, `512M`, `1G`, `2T` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_lowercase();
            let mul: u64 = match unit.trim_end_matches("ib").trim_end_matches('b') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(format!("unknown size unit in {s:?} (use k, M, G or T)")),
            };
            (&t[..i], mul)
        }
        None => (t, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("not a size: {s:?}"))?;
    n.checked_mul(mul).ok_or_else(|| format!("size too large: {s:?}"))
}

/// Checks a subsystem NQN: 1 to 223 bytes without NUL (what Linux enforces;
/// an empty one cannot be named in Connect), and not the discovery NQN.
pub fn check_subsystem_nqn(nqn: &str) -> Result<(), String> {
    if nqn.is_empty() {
        return Err("the NQN is empty".into());
    }
    nvmeof_common::spec::nqn::validate_lax(nqn).map_err(|e| e.to_string())?;
    if nqn == nvmeof_common::spec::DISCOVERY_NQN {
        return Err("the discovery subsystem's NQN cannot name an NVM subsystem".into());
    }
    Ok(())
}

/// Checks a unique discovery NQN (`discovery_nqn`, `--discovery-nqn`): 1 to
/// 223 bytes without NUL, as nvmet's `discovery_nqn` attribute takes it.
pub fn check_discovery_nqn(nqn: &str) -> Result<(), String> {
    if nqn.is_empty() {
        return Err("the NQN is empty".into());
    }
    nvmeof_common::spec::nqn::validate_lax(nqn).map_err(|e| e.to_string())
}

/// Checks an allowed host NQN: 1 to 223 bytes without NUL, as a host can
/// send it in Connect (a longer or empty one would never match any host).
pub fn check_host_nqn(nqn: &str) -> Result<(), String> {
    if nqn.is_empty() {
        return Err("the host NQN is empty".into());
    }
    nvmeof_common::spec::nqn::validate_lax(nqn).map_err(|e| e.to_string())
}

/// The format of a namespace's `reservations_file` (`reservations_format`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReservationsFormat {
    /// This target's TOML.
    #[default]
    Nvmeof,
    /// SPDK's `ptpl_file` JSON ([`crate::core::reservation::FileFormat::Spdk`]).
    Spdk,
}

impl ReservationsFormat {
    /// The file format of a namespace whose UUID (SPDK's bdev UUID where the
    /// file names none) is `uuid`.
    pub fn file_format(self, uuid: [u8; 16]) -> crate::core::reservation::FileFormat {
        use crate::core::reservation::FileFormat;
        match self {
            Self::Nvmeof => FileFormat::Nvmeof,
            Self::Spdk => FileFormat::Spdk { bdev_uuid: uuid },
        }
    }
}

/// How a file or block-device namespace executes I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IoEngine {
    /// Blocking I/O on a small worker-thread pool ([`FileBackend`](crate::backend::FileBackend),
    /// [`BlockBackend`](crate::backend::BlockBackend)).
    Threads,
    /// io_uring ([`UringBackend`](crate::backend::UringBackend)); opening fails where
    /// the kernel does not offer it.
    Uring,
    /// io_uring where available, else the thread pool (with a warning).
    Auto,
}

impl IoEngine {
    /// Engine of a regular-file namespace when none is configured. With the
    /// page cache (`buffered_io`, the default) both engines keep the same
    /// caching and durability; io_uring completes cached reads inside the
    /// submitting queue's `io_uring_enter` instead of a worker thread and a
    /// wake-up (bench/run.sh, file backend rows: 2.4–3.2× the threads' IOPS
    /// for 4 KiB QD32 reads, 0.99–1.2× for writes); `auto` falls back to the
    /// threads with a warning where io_uring is unavailable.
    pub const FILE_DEFAULT: Self = Self::Auto;
    /// Engine of a block-device namespace when none is configured. Block
    /// devices use `O_DIRECT`, where io_uring keeps every command in flight
    /// instead of one per worker thread (bench/run.sh, block device rows:
    /// 2.0× the threads' IOPS at 4 KiB QD32); `auto` falls back to the threads
    /// with a warning where io_uring is unavailable.
    pub const BLOCK_DEFAULT: Self = Self::Auto;

    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Threads => "threads",
            Self::Uring => "uring",
            Self::Auto => "auto",
        }
    }
}

impl fmt::Display for IoEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for IoEngine {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "threads" => Ok(Self::Threads),
            "uring" | "io_uring" | "io-uring" => Ok(Self::Uring),
            "auto" => Ok(Self::Auto),
            _ => Err(format!("unknown I/O engine {s:?} (use threads, uring or auto)")),
        }
    }
}

/// Where a namespace's data lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceSource {
    /// Regular file, created sparse with `size` if given.
    File {
        /// Path.
        path: PathBuf,
        /// Create/grow to this many bytes.
        size: Option<u64>,
        /// I/O engine.
        io_engine: IoEngine,
        /// Through the page cache (nvmet's `buffered_io`); false: `O_DIRECT`
        /// where the filesystem allows it (io_uring only).
        buffered_io: bool,
    },
    /// Block device.
    Block {
        /// Device path.
        path: PathBuf,
        /// I/O engine.
        io_engine: IoEngine,
        /// Claimed for this process while exported writable (`exclusive`,
        /// default true; [`crate::backend::claim`]): not exported while
        /// mounted or held by another driver or program. Read-only namespaces
        /// are never claimed.
        exclusive: bool,
    },
    /// RAM of this many bytes.
    Ram(u64),
}

/// A namespace to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// NSID (None: next free).
    pub nsid: Option<u32>,
    /// Backing store.
    pub source: NamespaceSource,
    /// Logical block size.
    pub block_size: u32,
    /// Exported read-only: the file or device is opened for reading only and
    /// the namespace is write protected for good (NSATTR bit 0; the Linux
    /// host marks the block device read-only; writes fail with Namespace is
    /// Write Protected). File and block namespaces only; a read-only file is
    /// never created or grown (no `size`).
    pub read_only: bool,
    /// ANA group (1..=[`crate::core::ana::MAX_ANA_GROUPS`]).
    pub ana_group: u32,
    /// Identifiers given by the configuration (the rest are derived).
    pub ids: NamespaceIds,
    /// Reservations enabled (nvmet `resv_enable`; [`crate::core::reservation`]).
    pub reservations: bool,
    /// Where reservations persist through power loss (implies `reservations`).
    pub reservations_file: Option<PathBuf>,
    /// How `reservations_file` is written.
    pub reservations_format: ReservationsFormat,
    /// The hosts that see the namespace (`None`: every host;
    /// [`crate::core::Namespace::visible_to`]).
    pub hosts: Option<Vec<String>>,
    /// Rate limits ([`crate::core::qos`]; `qos_iops`, `qos_bandwidth`).
    pub qos: crate::core::qos::QosLimits,
    /// Exported zoned, with these zones (`zoned`, `zone_size`,
    /// `max_open_zones`, `max_active_zones`; [`crate::core::zoned`]).
    pub zoned: Option<crate::core::zoned::ZoneConfig>,
    /// Where a clean stop saves the zone states of a zoned namespace, for
    /// the next start (`zone_state_file`).
    pub zone_state_file: Option<PathBuf>,
}

/// Namespace identifiers a configuration gives (nvmet's `device_uuid` and
/// `device_nguid`, and the EUI-64). Unset, all three derive from the
/// subsystem NQN, the NSID and the store (the file or device path). With
/// any of them set, the unset ones derive from the NQN, the NSID and the
/// given ones instead of the path: two targets exporting one replicated
/// store under the same NQN and NSID with the same `uuid` present the same
/// three identifiers, so a Linux host with native multipath sees one
/// namespace through both (it joins paths only when all identifiers match,
/// `nvme_ns_ids_equal`), whatever the paths on each. A RAM namespace given
/// identifiers keeps them across restarts, though not its data: a host that
/// reconnects after a restart takes it for the same namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NamespaceIds {
    /// UUID (Identify descriptor type 3).
    pub uuid: Option<[u8; 16]>,
    /// NGUID (Identify Namespace bytes 104..120).
    pub nguid: Option<[u8; 16]>,
    /// IEEE EUI-64 (Identify Namespace bytes 120..128).
    pub eui64: Option<[u8; 8]>,
}

impl NamespaceIds {
    /// Whether the configuration gives any identifier.
    pub fn any(&self) -> bool {
        self.uuid.is_some() || self.nguid.is_some() || self.eui64.is_some()
    }
}

/// Parses `N` bytes written as 2N hex digits, optionally grouped with `-`
/// or `:` (a UUID as `uuidgen` prints it, an NGUID or EUI-64 as `nvme id-ns`
/// does). All zeroes means "not reported" in Identify, so it is refused.
fn parse_id<const N: usize>(text: &str) -> Result<[u8; N], String> {
    let digits: Vec<u8> = text.bytes().filter(|&c| c != b'-' && c != b':').collect();
    if digits.len() != 2 * N {
        return Err(format!("{text:?}: want {} hex digits (optionally grouped with '-' or ':')", 2 * N));
    }
    // (`from_str_radix` alone takes a sign: "+1" is 1.)
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(format!("{text:?}: not hexadecimal"));
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(digits.chunks(2)) {
        let hi = (pair[0] as char).to_digit(16).unwrap_or(0) as u8;
        let lo = (pair[1] as char).to_digit(16).unwrap_or(0) as u8;
        *o = hi << 4 | lo;
    }
    // All zeroes is "no identifier": Identify reports it so and the
    // descriptor list leaves it out, as nvmet's NGUID unless set (kept so
    // that nothing is derived in its place: `import-nvmetcli` uses it).
    Ok(out)
}

/// The zones of a namespace's `zoned`, `zone_size`, `max_open_zones` and
/// `max_active_zones` keys (the last three need the first).
fn zone_config(
    n: &RawNamespace,
    nkey: &str,
    block_size: u32,
) -> Result<Option<crate::core::zoned::ZoneConfig>, ConfigError> {
    use crate::core::zoned::ZoneConfig;
    if n.zoned != Some(true) {
        for (set, key) in [
            (n.zone_size.is_some(), "zone_size"),
            (n.max_open_zones.is_some(), "max_open_zones"),
            (n.max_active_zones.is_some(), "max_active_zones"),
            (n.zone_state_file.is_some(), "zone_state_file"),
        ] {
            if set {
                return Err(invalid(
                    format!("{nkey}.{key}"),
                    "applies to zoned namespaces only (zoned = true)",
                ));
            }
        }
        return Ok(None);
    }
    let zone_size = match n.zone_size.as_deref().map(parse_size).transpose() {
        Ok(v) => v.unwrap_or(ZoneConfig::default().zone_size),
        Err(e) => return Err(invalid(format!("{nkey}.zone_size"), e)),
    };
    let z = ZoneConfig { zone_size, max_open: n.max_open_zones, max_active: n.max_active_zones };
    z.check(block_size as u64).map_err(|(key, why)| invalid(format!("{nkey}.{key}"), why))?;
    Ok(Some(z))
}

/// [`parse_id`] of an optional key; the error names `key()`.
fn optional_id<const N: usize>(
    text: Option<&str>,
    key: impl FnOnce() -> String,
) -> Result<Option<[u8; N]>, ConfigError> {
    text.map(parse_id).transpose().map_err(|e| invalid(key(), e))
}

impl NamespaceConfig {
    /// Logical block sizes a file or RAM namespace can have: powers of two
    /// (Identify Namespace gives LBADS as log2), from 512 (the smallest the
    /// spec allows) to 4096 (the largest the Linux host takes on any page size).
    pub const BLOCK_SIZES: [u32; 4] = [512, 1024, 2048, 4096];

    /// Checks the block size, and that a RAM namespace (or a file namespace's
    /// `size`) holds at least one block. The error names the configuration key at fault (`block_size` or
    /// `ram`) beside the reason.
    pub fn check_size(&self) -> Result<(), (&'static str, String)> {
        if !Self::BLOCK_SIZES.contains(&self.block_size) {
            return Err((
                "block_size",
                format!("block size {} must be 512, 1024, 2048 or 4096", self.block_size),
            ));
        }
        match self.source {
            NamespaceSource::Ram(n) if n < self.block_size as u64 => Err((
                "ram",
                format!("a RAM namespace of {n} bytes is smaller than one {}-byte block", self.block_size),
            )),
            // Refused before the file is created (it was created, then refused).
            NamespaceSource::File { size: Some(n), .. } if n < self.block_size as u64 => Err((
                "size",
                format!("a file namespace of {n} bytes is smaller than one {}-byte block", self.block_size),
            )),
            _ => Ok(()),
        }
    }

    /// `read_only` applies to files and block devices (a RAM namespace starts
    /// empty: read-only, it would only ever read zeroes), and a read-only
    /// file is opened as it is (`size` would create or grow it). The error
    /// names the key at fault.
    pub fn check_read_only(&self) -> Result<(), (&'static str, String)> {
        if !self.read_only {
            return Ok(());
        }
        match self.source {
            NamespaceSource::Ram(_) => Err(("read_only", "applies to file and block namespaces only".into())),
            NamespaceSource::File { size: Some(_), .. } => {
                Err(("size", "a read-only file is not created or grown: leave size out".into()))
            }
            _ => Ok(()),
        }
    }

    /// `buffered_io = false` (`O_DIRECT`) needs io_uring: the thread pool
    /// always goes through the page cache for files.
    pub fn check_engine(&self) -> Result<(), String> {
        match &self.source {
            NamespaceSource::File { io_engine: IoEngine::Threads, buffered_io: false, .. } => Err(
                "buffered_io = false (O_DIRECT) needs io_engine uring or auto; the threads engine always uses the page cache for files".into(),
            ),
            _ => Ok(()),
        }
    }
}

/// DH-HMAC-CHAP keys of one host (nvmet's `hosts/NQN/dhchap_*` attributes):
/// a host with a key must authenticate on every queue before it may use it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostKeys {
    /// The host's secret (`dhchap_key`; the host gives the same with `nvme
    /// connect --dhchap-secret`).
    pub key: DhchapSecret,
    /// The controller's secret for bidirectional authentication
    /// (`dhchap_ctrl_key`; the host's `--dhchap-ctrl-secret`): used when the host asks.
    pub ctrl_key: Option<DhchapSecret>,
    /// The hash offered first (`dhchap_hash`; nvmet's default SHA-256). A host
    /// that does not offer it gets the first of its own list this target knows.
    pub hash: HashId,
    /// The DH group offered first (`dhchap_dhgroup`; nvmet's default NULL),
    /// with the same fallback.
    pub dhgroup: DhGroup,
}

impl HostKeys {
    /// Keys with nvmet's defaults: SHA-256, no DH group, unidirectional.
    pub fn new(key: DhchapSecret) -> Self {
        Self { key, ctrl_key: None, hash: HashId::SHA256, dhgroup: DhGroup::NULL }
    }
}

/// A subsystem to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubsystemConfig {
    /// NQN.
    pub nqn: String,
    /// Model string.
    pub model: String,
    /// Serial number (Identify Controller SN, nvmet's `attr_serial`); `None`
    /// derives one from the NQN.
    pub serial: Option<String>,
    /// Firmware revision (Identify Controller FR, nvmet's `attr_firmware`);
    /// `None` is this build's version.
    pub firmware: Option<String>,
    /// IEEE OUI (Identify Controller IEEE, nvmet's `attr_ieee_oui`; at most
    /// 24 bits); `None` reports 0, as nvmet does by default.
    pub ieee_oui: Option<u32>,
    /// Allowed host NQNs (None = any).
    pub allowed_hosts: Option<Vec<String>>,
    /// DH-HMAC-CHAP keys by host NQN (each host also in `allowed_hosts`).
    pub host_keys: BTreeMap<String, HostKeys>,
    /// Namespaces.
    pub namespaces: Vec<NamespaceConfig>,
    /// Controller IDs (`cntlid_min`, `cntlid_max`; nvmet's attributes of
    /// those names): disjoint ranges for targets that export one subsystem.
    pub cntlids: std::ops::RangeInclusive<u16>,
    /// Most I/O queues per controller (`max_io_queues`, nvmet's
    /// `attr_qid_max`), at most `limits.max_io_queues`; `None`: that limit.
    pub max_io_queues: Option<u16>,
    /// The ports it is exported on (`ports`, nvmet's `ports/N/subsystems`
    /// links), by port ID ([`TargetConfig::port_id`], the PORTID its
    /// discovery log entries carry); `None`: every port.
    pub ports: Option<Vec<u16>>,
}

/// The NSID of each namespace of a subsystem's configuration: its `nsid`, or
/// the one after the highest so far. [`TargetConfig::from_toml`] refuses a
/// list whose NSIDs repeat or run past 0xFFFFFFFD, so this is the numbering
/// startup and SIGHUP reload both use.
pub fn assign_nsids(nss: &[NamespaceConfig]) -> impl Iterator<Item = (u32, &NamespaceConfig)> {
    nss.iter().scan(1u32, |next, n| {
        let nsid = n.nsid.unwrap_or(*next);
        *next = (*next).max(nsid.saturating_add(1));
        Some((nsid, n))
    })
}

/// What a port reports for Asymmetric Namespace Access.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAnaConfig {
    /// State of every group `groups` does not name (`ana_state`).
    pub state: AnaState,
    /// States of single groups (`ana_groups`).
    pub groups: BTreeMap<u32, AnaState>,
}

impl Default for PortAnaConfig {
    /// Every group optimized.
    fn default() -> Self {
        Self { state: AnaState::OPTIMIZED, groups: BTreeMap::new() }
    }
}

/// The whole configuration.
#[derive(Clone, Debug)]
pub struct TargetConfig {
    /// Listen addresses.
    pub listen: Vec<SocketAddr>,
    /// ANA states of each port, in the order of `listen`.
    pub port_ana: Vec<PortAnaConfig>,
    /// Port ID of each port, in the order of `listen` (`portid`, nvmet's
    /// `ports/N`): the PORTID of its discovery log entries, what a
    /// subsystem's `ports` names. A port without one here is its position
    /// (1 for the first); see [`Self::port_id`].
    pub port_ids: Vec<u16>,
    /// Each port's own queue limits (`in_capsule_data`, `max_queue_entries`;
    /// nvmet's `param_inline_data_size`, `param_max_queue_size`), in the
    /// order of `listen`; a port without an entry has none (see
    /// [`Self::port_params`]).
    pub port_params: Vec<PortParams>,
    /// Subsystems.
    pub subsystems: Vec<SubsystemConfig>,
    /// Limits.
    pub limits: Limits,
    /// Busy-poll window in µs.
    pub poll_us: u64,
    /// `SO_SNDBUF` of every connection in bytes, 0 for the kernel's
    /// autotuning ([`nvmeof_net::default_send_buffer`] unless configured).
    pub send_buffer: usize,
    /// TCP congestion control of every connection; `None` keeps the system's
    /// ([`nvmeof_net::set_congestion_control`] says when it matters).
    pub congestion_control: Option<nvmeof_net::CongestionControl>,
    /// `SO_PRIORITY` of every connection and listener (nvmet-tcp's
    /// `so_priority` module parameter: the queueing class `tc`/`mqprio`
    /// map to NIC queues and DCB priorities); 0 leaves the default.
    pub so_priority: u32,
    /// Other discovery services the discovery log refers hosts to.
    pub referrals: Vec<Referral>,
    /// Where Prometheus metrics are served (`[metrics] listen`,
    /// `--metrics-listen`; [`crate::metrics`]); `None`: nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// The discovery subsystem's unique NQN (`discovery_nqn`,
    /// `--discovery-nqn`; nvmet's `discovery_nqn`); `None`: the well-known
    /// one only. Hosts may connect by either.
    pub discovery_nqn: Option<String>,
    /// Which ports the discovery log lists to each host (`discovery_filter`,
    /// `--discovery-filter`; SPDK's `discovery_filter`).
    pub discovery_filter: DiscoveryFilter,
}

impl TargetConfig {
    /// The port ID of the `i`-th port (0-based) of `listen`: its `portid`,
    /// or its position counted from 1.
    pub fn port_id(&self, i: usize) -> u16 {
        self.port_ids.get(i).copied().unwrap_or(i as u16 + 1)
    }

    /// The own queue limits of the `i`-th port (0-based) of `listen`.
    pub fn port_params(&self, i: usize) -> PortParams {
        self.port_params.get(i).copied().unwrap_or_default()
    }
}

/// Checks a list of port IDs (a subsystem's or a referral's `ports`): each
/// names a `[[port]]` table (nvmet's links need the port to exist too), once.
fn check_port_list(key: &str, ports: &[u16], port_ids: &[u16]) -> Result<(), ConfigError> {
    for (j, &p) in ports.iter().enumerate() {
        if !port_ids.contains(&p) {
            let ids: Vec<String> = port_ids.iter().map(u16::to_string).collect();
            return Err(invalid(
                format!("{key}[{j}]"),
                format!("port {p} is no [[port]]'s portid ({})", ids.join(", ")),
            ));
        }
        if ports[..j].contains(&p) {
            return Err(invalid(format!("{key}[{j}]"), format!("port {p} is listed twice")));
        }
    }
    Ok(())
}

/// Parses the address of a referral: an IP address and a port, both given
/// (`192.0.2.10:8009`, `[2001:db8::1]:4420`); the discovery log entry carries
/// them as TRADDR and TRSVCID, so a host name (which the entry cannot hold)
/// or the unspecified address is refused.
pub fn parse_referral_address(s: &str) -> Result<SocketAddr, String> {
    let a: SocketAddr = s
        .parse()
        .map_err(|_| format!("{s:?} is not IP:PORT (e.g. 192.0.2.10:8009 or [2001:db8::1]:4420)"))?;
    if a.ip().is_unspecified() || a.port() == 0 {
        return Err(format!("{s:?}: a host must be able to connect to it (no wildcard address, no port 0)"));
    }
    Ok(a)
}

/// Parses a congestion control name and checks that this kernel lets the
/// target use it (set on a scratch socket), so a typo fails at startup rather
/// than on every connection.
pub fn check_congestion_control(name: &str) -> Result<nvmeof_net::CongestionControl, String> {
    let cc: nvmeof_net::CongestionControl = name.parse()?;
    cc.check_available().map_err(|e| e.to_string())?;
    Ok(cc)
}

/// Checks a `send_buffer` value: 0 (the kernel's autotuning) or 4 KiB to 1 GiB
/// (`SO_SNDBUF` is an `int` the kernel doubles).
pub fn check_send_buffer(v: usize) -> Result<(), String> {
    if v == 0 || (4096..=1 << 30).contains(&v) {
        Ok(())
    } else {
        Err(format!("{v} is neither 0 (the kernel's autotuning) nor 4096 to 1073741824 bytes"))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    io_engine: Option<IoEngine>,
    discovery_nqn: Option<String>,
    discovery_filter: Option<String>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    port: Vec<RawPort>,
    #[serde(default)]
    subsystem: Vec<RawSubsystem>,
    #[serde(default)]
    referral: Vec<RawReferral>,
    metrics: Option<RawMetrics>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReferral {
    address: String,
    portid: Option<u16>,
    ports: Option<Vec<u16>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    mdts: Option<u8>,
    max_io_queues: Option<u16>,
    max_queue_entries: Option<u32>,
    in_capsule_data: Option<u32>,
    max_h2c_data: Option<u32>,
    max_connections: Option<usize>,
    poll_us: Option<u64>,
    send_buffer: Option<usize>,
    congestion_control: Option<String>,
    so_priority: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    listen: String,
    portid: Option<u16>,
    in_capsule_data: Option<u32>,
    max_queue_entries: Option<u32>,
    ana_state: Option<String>,
    ana_groups: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSubsystem {
    nqn: String,
    model: Option<String>,
    serial: Option<String>,
    firmware: Option<String>,
    ieee_oui: Option<u32>,
    allowed_hosts: Option<Vec<RawHost>>,
    cntlid_min: Option<u16>,
    cntlid_max: Option<u16>,
    max_io_queues: Option<u16>,
    ports: Option<Vec<u16>>,
    #[serde(default)]
    namespace: Vec<RawNamespace>,
}

/// An `allowed_hosts` entry: an NQN, or a table with the host's keys.
#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "an allowed host: an NQN, or a table of nqn and (all optional) dhchap_key, dhchap_ctrl_key, dhchap_hash, dhchap_dhgroup"
)]
enum RawHost {
    Nqn(String),
    Keys(RawHostKeys),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHostKeys {
    nqn: String,
    dhchap_key: Option<String>,
    dhchap_ctrl_key: Option<String>,
    dhchap_hash: Option<String>,
    dhchap_dhgroup: Option<String>,
}

/// Builds a host's keys from its settings; errors name the key at fault
/// relative to the host's entry.
pub fn host_keys(
    key: Option<&str>,
    ctrl_key: Option<&str>,
    hash: Option<&str>,
    dhgroup: Option<&str>,
) -> Result<Option<HostKeys>, (&'static str, String)> {
    let parse = |k: &'static str, v: &str| v.parse::<DhchapSecret>().map_err(|e| (k, e.to_string()));
    let Some(key) = key else {
        // nvmet takes a controller key without a host key and never uses it;
        // here that is a mistake worth naming.
        if ctrl_key.is_some() || hash.is_some() || dhgroup.is_some() {
            return Err(("dhchap_key", "missing: the other dhchap settings need the host key".into()));
        }
        return Ok(None);
    };
    let mut k = HostKeys::new(parse("dhchap_key", key)?);
    k.ctrl_key = ctrl_key.map(|c| parse("dhchap_ctrl_key", c)).transpose()?;
    if let Some(h) = hash {
        k.hash =
            HashId::from_name(h).ok_or(("dhchap_hash", format!("{h:?} is not sha256, sha384 or sha512")))?;
    }
    if let Some(g) = dhgroup {
        k.dhgroup = DhGroup::from_name(g).ok_or((
            "dhchap_dhgroup",
            format!("{g:?} is not null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144 or ffdhe8192"),
        ))?;
    }
    Ok(Some(k))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNamespace {
    nsid: Option<u32>,
    file: Option<PathBuf>,
    ram: Option<String>,
    block: Option<PathBuf>,
    size: Option<String>,
    block_size: Option<u32>,
    io_engine: Option<IoEngine>,
    buffered_io: Option<bool>,
    exclusive: Option<bool>,
    read_only: Option<bool>,
    ana_group: Option<u32>,
    reservations: Option<bool>,
    reservations_file: Option<PathBuf>,
    reservations_format: Option<ReservationsFormat>,
    hosts: Option<Vec<String>>,
    qos_iops: Option<u64>,
    qos_bandwidth: Option<String>,
    zoned: Option<bool>,
    zone_size: Option<String>,
    max_open_zones: Option<u32>,
    max_active_zones: Option<u32>,
    zone_state_file: Option<PathBuf>,
    uuid: Option<String>,
    nguid: Option<String>,
    eui64: Option<String>,
}

/// Default model string.
pub const DEFAULT_MODEL: &str = "nvmeof";

impl TargetConfig {
    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Toml(e.to_string()))?;
        let mut limits = Limits::default();
        let l = raw.limits;
        if let Some(v) = l.mdts {
            // Identify Controller advertises the value as given, while the
            // target caps a command at 1 GiB (`Limits::max_transfer`): 0 ("no
            // limit") or more than 18 would promise hosts transfers it refuses.
            if !(1..=Limits::MAX_MDTS).contains(&v) {
                return Err(invalid(
                    "limits.mdts",
                    format!("must be 1..={} (2^mdts × 4 KiB per command: 8 KiB to 1 GiB)", Limits::MAX_MDTS),
                ));
            }
            limits.mdts = v;
        }
        if let Some(v) = l.max_io_queues {
            if v == 0 {
                return Err(invalid("limits.max_io_queues", "must be at least 1"));
            }
            limits.max_io_queues = v;
        }
        if let Some(v) = l.max_queue_entries {
            limits.max_queue_entries =
                Limits::check_queue_entries(v).map_err(|e| invalid("limits.max_queue_entries", e))?;
        }
        if let Some(v) = l.in_capsule_data {
            limits.set_in_capsule_data(v).map_err(|e| invalid("limits.in_capsule_data", e))?;
        }
        if let Some(v) = l.max_h2c_data {
            if v < 4096 || v % 4 != 0 {
                return Err(invalid("limits.max_h2c_data", "must be ≥ 4096 and a multiple of 4"));
            }
            limits.max_h2c_data = v;
        }
        if let Some(v) = l.max_connections {
            if v == 0 {
                return Err(invalid("limits.max_connections", "must be at least 1"));
            }
            limits.max_connections = v;
        }
        let max_groups = limits.max_ana_groups();
        let check_group = |g: u32| {
            if (1..=max_groups).contains(&g) {
                Ok(g)
            } else {
                Err(format!("ANA group {g} is not 1..={max_groups} (the most groups MDTS leaves room for)"))
            }
        };
        let mut listen = Vec::new();
        let mut port_ana = Vec::new();
        let mut port_ids: Vec<u16> = Vec::new();
        let mut port_params = Vec::new();
        for (i, p) in raw.port.iter().enumerate() {
            let a = p
                .listen
                .parse()
                .map_err(|e| invalid(format!("port[{i}].listen"), format!("{:?}: {e}", p.listen)))?;
            listen.push(a);
            // nvmet's ports/N: any 16-bit number, each port its own.
            let id = p.portid.unwrap_or(i as u16 + 1);
            if let Some(j) = port_ids.iter().position(|&o| o == id) {
                return Err(invalid(format!("port[{i}].portid"), format!("{id} is port[{j}]'s too")));
            }
            port_ids.push(id);
            let mut ana = PortAnaConfig::default();
            if let Some(st) = &p.ana_state {
                ana.state = parse_ana_state(st).map_err(|e| invalid(format!("port[{i}].ana_state"), e))?;
            }
            for (g, st) in p.ana_groups.iter().flatten() {
                let key = format!("port[{i}].ana_groups.{g}");
                let grp = g
                    .parse::<u32>()
                    .map_err(|_| format!("{g:?} is not a group number"))
                    .and_then(check_group)
                    .map_err(|e| invalid(&key, e))?;
                ana.groups.insert(grp, parse_ana_state(st).map_err(|e| invalid(&key, e))?);
            }
            port_ana.push(ana);
            // nvmet's param_inline_data_size, param_max_queue_size.
            port_params.push(PortParams {
                in_capsule_data: p
                    .in_capsule_data
                    .map(Limits::check_in_capsule_data)
                    .transpose()
                    .map_err(|e| invalid(format!("port[{i}].in_capsule_data"), e))?,
                max_queue_entries: p
                    .max_queue_entries
                    .map(Limits::check_queue_entries)
                    .transpose()
                    .map_err(|e| invalid(format!("port[{i}].max_queue_entries"), e))?,
            });
        }
        if listen.is_empty() {
            listen.push(default_listen());
            port_ana.push(PortAnaConfig::default());
            port_ids.push(1);
        }
        let mut subsystems = Vec::new();
        for (i, s) in raw.subsystem.into_iter().enumerate() {
            let key = format!("subsystem[{i}]");
            check_subsystem_nqn(&s.nqn).map_err(|e| invalid(format!("{key}.nqn"), e))?;
            // `allowed_hosts = []` allows no host; leaving it out allows any.
            let listed = s.allowed_hosts.is_some();
            let mut allowed = Vec::new();
            let mut keys = BTreeMap::new();
            for (h, host) in s.allowed_hosts.into_iter().flatten().enumerate() {
                let hkey = format!("{key}.allowed_hosts[{h}]");
                let nqn = match host {
                    RawHost::Nqn(n) => n,
                    RawHost::Keys(k) => {
                        let hk = host_keys(
                            k.dhchap_key.as_deref(),
                            k.dhchap_ctrl_key.as_deref(),
                            k.dhchap_hash.as_deref(),
                            k.dhchap_dhgroup.as_deref(),
                        )
                        .map_err(|(field, e)| invalid(format!("{hkey}.{field}"), e))?;
                        if let Some(hk) = hk {
                            keys.insert(k.nqn.clone(), hk);
                        }
                        k.nqn
                    }
                };
                check_host_nqn(&nqn).map_err(|e| invalid(hkey.clone(), e))?;
                allowed.push(nqn);
            }
            // Identify Controller MN, SN and FR: 40, 20 and 8 bytes of
            // printable ASCII, space padded (nvmet refuses anything else in
            // its configfs `attr_model`, `attr_serial`, `attr_firmware`);
            // longer text was cut, mid-character for UTF-8.
            for (field, v, max) in
                [("model", &s.model, 40), ("serial", &s.serial, 20), ("firmware", &s.firmware, 8)]
            {
                if v.as_ref().is_some_and(|v| {
                    v.is_empty() || v.len() > max || !v.bytes().all(|c| (0x20..=0x7E).contains(&c))
                }) {
                    return Err(invalid(
                        format!("{key}.{field}"),
                        format!("must be 1 to {max} printable ASCII characters"),
                    ));
                }
            }
            // nvmet's attr_ieee_oui refuses values of 0x1000000 and up (24 bits).
            if s.ieee_oui.is_some_and(|v| v > 0xFF_FFFF) {
                return Err(invalid(format!("{key}.ieee_oui"), "must fit 24 bits (0 to 0xFFFFFF)"));
            }
            // nvmet: NVME_CNTLID_MIN <= cntlid_min <= cntlid_max <= NVME_CNTLID_MAX.
            let all = crate::core::target::CNTLID_RANGE;
            let cntlids = s.cntlid_min.unwrap_or(*all.start())..=s.cntlid_max.unwrap_or(*all.end());
            for (field, v) in [("cntlid_min", s.cntlid_min), ("cntlid_max", s.cntlid_max)] {
                if v.is_some_and(|v| !all.contains(&v)) {
                    return Err(invalid(format!("{key}.{field}"), "must be 1..=65519 (0xFFEF)"));
                }
            }
            if cntlids.is_empty() {
                return Err(invalid(format!("{key}.cntlid_max"), "is below cntlid_min"));
            }
            // nvmet's attr_qid_max: 1..=NVMET_NR_QUEUES (the target's limit here).
            if s.max_io_queues.is_some_and(|v| !(1..=limits.max_io_queues).contains(&v)) {
                return Err(invalid(
                    format!("{key}.max_io_queues"),
                    format!("must be 1..={} (limits.max_io_queues)", limits.max_io_queues),
                ));
            }
            // Port IDs name `[[port]]` tables (nvmet's ports/N/subsystems
            // links need the port to exist too); `ports = []` exports the
            // subsystem nowhere, as a subsystem nvmet links to no port.
            if let Some(ports) = &s.ports {
                check_port_list(&format!("{key}.ports"), ports, &port_ids)?;
            }
            let mut namespaces = Vec::new();
            for (j, n) in s.namespace.into_iter().enumerate() {
                let nkey = format!("{key}.namespace[{j}]");
                let size = n
                    .size
                    .as_deref()
                    .map(parse_size)
                    .transpose()
                    .map_err(|e| invalid(format!("{nkey}.size"), e))?;
                let io_engine = n.io_engine.or(raw.io_engine);
                if n.buffered_io.is_some() && n.file.is_none() {
                    return Err(invalid(format!("{nkey}.buffered_io"), "applies to file namespaces only"));
                }
                if n.exclusive.is_some() && n.block.is_none() {
                    return Err(invalid(format!("{nkey}.exclusive"), "applies to block namespaces only"));
                }
                let zoned = zone_config(&n, &nkey, n.block_size.unwrap_or(512))?;
                let source = match (n.file, n.ram, n.block) {
                    (Some(path), None, None) => NamespaceSource::File {
                        path,
                        size,
                        io_engine: io_engine.unwrap_or(IoEngine::FILE_DEFAULT),
                        buffered_io: n.buffered_io.unwrap_or(true),
                    },
                    (None, Some(r), None) => {
                        if n.io_engine.is_some() {
                            return Err(invalid(
                                format!("{nkey}.io_engine"),
                                "applies to file and block namespaces only",
                            ));
                        }
                        NamespaceSource::Ram(parse_size(&r).map_err(|e| invalid(format!("{nkey}.ram"), e))?)
                    }
                    (None, None, Some(path)) => NamespaceSource::Block {
                        path,
                        io_engine: io_engine.unwrap_or(IoEngine::BLOCK_DEFAULT),
                        exclusive: n.exclusive.unwrap_or(true),
                    },
                    _ => return Err(invalid(nkey, "exactly one of file, ram or block is required")),
                };
                let block_size = n.block_size.unwrap_or(512);
                let ids = NamespaceIds {
                    uuid: optional_id(n.uuid.as_deref(), || format!("{nkey}.uuid"))?,
                    nguid: optional_id(n.nguid.as_deref(), || format!("{nkey}.nguid"))?,
                    eui64: optional_id(n.eui64.as_deref(), || format!("{nkey}.eui64"))?,
                };
                if n.nsid == Some(0) || n.nsid.is_some_and(|x| x >= 0xFFFF_FFFE) {
                    return Err(invalid(format!("{nkey}.nsid"), "must be 1..=0xFFFFFFFD"));
                }
                let ns = NamespaceConfig {
                    nsid: n.nsid,
                    source,
                    block_size,
                    read_only: n.read_only.unwrap_or(false),
                    ana_group: n
                        .ana_group
                        .map(check_group)
                        .transpose()
                        .map_err(|e| invalid(format!("{nkey}.ana_group"), e))?
                        .unwrap_or(DEFAULT_ANA_GROUP),
                    ids,
                    reservations: n.reservations.unwrap_or(n.reservations_file.is_some()),
                    reservations_file: n.reservations_file.clone(),
                    reservations_format: n.reservations_format.unwrap_or_default(),
                    hosts: n.hosts.clone(),
                    qos: QosLimits {
                        iops: match n.qos_iops {
                            Some(0) => return Err(invalid(format!("{nkey}.qos_iops"), "must be at least 1")),
                            v => v,
                        },
                        bytes_per_sec: match n.qos_bandwidth.as_deref().map(parse_size).transpose() {
                            Ok(Some(0)) => {
                                return Err(invalid(
                                    format!("{nkey}.qos_bandwidth"),
                                    "must be at least 1 byte/s",
                                ))
                            }
                            Ok(v) => v,
                            Err(e) => return Err(invalid(format!("{nkey}.qos_bandwidth"), e)),
                        },
                    },
                    zoned,
                    zone_state_file: n.zone_state_file.clone(),
                };
                for (h, host) in n.hosts.iter().flatten().enumerate() {
                    let hkey = format!("{nkey}.hosts[{h}]");
                    check_host_nqn(host).map_err(|e| invalid(hkey.clone(), e))?;
                    // A host the subsystem refuses would never see it: a typo.
                    if listed && !allowed.contains(host) {
                        return Err(invalid(hkey, format!("{host} is not in {key}.allowed_hosts")));
                    }
                }
                if matches!(ns.source, NamespaceSource::Ram(_)) && ns.zone_state_file.is_some() {
                    return Err(invalid(
                        format!("{nkey}.zone_state_file"),
                        "applies to file and block namespaces (a RAM namespace starts empty)",
                    ));
                }
                if !ns.reservations && ns.reservations_file.is_some() {
                    return Err(invalid(
                        format!("{nkey}.reservations_file"),
                        "needs reservations (set false here)",
                    ));
                }
                if n.reservations_format.is_some() && ns.reservations_file.is_none() {
                    return Err(invalid(
                        format!("{nkey}.reservations_format"),
                        "applies to a reservations_file",
                    ));
                }
                ns.check_size().map_err(|(key, e)| invalid(format!("{nkey}.{key}"), e))?;
                ns.check_read_only().map_err(|(key, e)| invalid(format!("{nkey}.{key}"), e))?;
                ns.check_engine().map_err(|e| invalid(format!("{nkey}.buffered_io"), e))?;
                namespaces.push(ns);
            }
            // Two entries with one NSID (explicit, or an implicit one landing
            // on an explicit one) would be one namespace opened twice, and a
            // reload would match the wrong entry to it.
            let mut seen = std::collections::HashSet::new();
            for (j, (nsid, _)) in assign_nsids(&namespaces).enumerate() {
                if nsid >= 0xFFFF_FFFE {
                    return Err(invalid(format!("{key}.namespace[{j}]"), "no NSID left (past 0xFFFFFFFD)"));
                }
                if !seen.insert(nsid) {
                    return Err(invalid(
                        format!("{key}.namespace[{j}].nsid"),
                        format!("NSID {nsid} is used twice"),
                    ));
                }
            }
            // A Linux host refuses a namespace whose identifier another one
            // already has (`nvme_global_check_duplicate_ids`, "ignoring nsid").
            for (j, n) in namespaces.iter().enumerate() {
                let earlier =
                    subsystems.iter().flat_map(|o: &SubsystemConfig| &o.namespaces).chain(&namespaces[..j]);
                for o in earlier {
                    // All zeroes is no identifier (nvmet's NGUID unless set;
                    // hosts skip it, and Identify leaves it out).
                    let set = |id: Option<&[u8]>| id.is_some_and(|b| b.iter().any(|&x| x != 0));
                    for (field, dup) in [
                        ("uuid", set(n.ids.uuid.as_ref().map(|b| &b[..])) && n.ids.uuid == o.ids.uuid),
                        ("nguid", set(n.ids.nguid.as_ref().map(|b| &b[..])) && n.ids.nguid == o.ids.nguid),
                        ("eui64", set(n.ids.eui64.as_ref().map(|b| &b[..])) && n.ids.eui64 == o.ids.eui64),
                    ] {
                        if dup {
                            return Err(invalid(
                                format!("{key}.namespace[{j}].{field}"),
                                "another namespace has it (hosts ignore namespaces with duplicate identifiers)",
                            ));
                        }
                    }
                }
            }
            if subsystems.iter().any(|o: &SubsystemConfig| o.nqn == s.nqn) {
                return Err(invalid(format!("{key}.nqn"), format!("{} is used twice", s.nqn)));
            }
            subsystems.push(SubsystemConfig {
                nqn: s.nqn,
                model: s.model.unwrap_or_else(|| DEFAULT_MODEL.to_string()),
                serial: s.serial,
                firmware: s.firmware,
                ieee_oui: s.ieee_oui,
                allowed_hosts: listed.then_some(allowed),
                host_keys: keys,
                namespaces,
                cntlids,
                max_io_queues: s.max_io_queues,
                ports: s.ports,
            });
        }
        let send_buffer = l.send_buffer.unwrap_or_else(nvmeof_net::default_send_buffer);
        check_send_buffer(send_buffer).map_err(|e| invalid("limits.send_buffer", e))?;
        let congestion_control = l
            .congestion_control
            .map(|n| check_congestion_control(&n))
            .transpose()
            .map_err(|e| invalid("limits.congestion_control", e))?;
        let discovery_nqn = raw.discovery_nqn;
        if let Some(d) = &discovery_nqn {
            check_discovery_nqn(d).map_err(|e| invalid("discovery_nqn", e))?;
            // nvmet refuses a discovery_nqn that names a subsystem (and the
            // reverse): a Connect to it could not say which one it meant.
            if let Some(i) = subsystems.iter().position(|s| s.nqn == *d) {
                return Err(invalid(format!("subsystem[{i}].nqn"), format!("{d:?} is the discovery_nqn")));
            }
        }
        let discovery_filter = raw
            .discovery_filter
            .map(|f| f.parse())
            .transpose()
            .map_err(|e| invalid("discovery_filter", e))?
            .unwrap_or_default();
        let mut referrals = Vec::new();
        for (i, r) in raw.referral.into_iter().enumerate() {
            let key = format!("referral[{i}].address");
            let addr = parse_referral_address(&r.address).map_err(|e| invalid(&key, e))?;
            if let Some(ports) = &r.ports {
                check_port_list(&format!("referral[{i}].ports"), ports, &port_ids)?;
            }
            // One entry per address in a port's log (nvmet's referrals of
            // one port are by name, but one address twice would send
            // `connect-all` there twice).
            let referral = Referral { addr, portid: r.portid.unwrap_or(0), ports: r.ports };
            let both = |o: &Referral| port_ids.iter().any(|&p| o.on_port(p) && referral.on_port(p));
            if referrals.iter().any(|o: &Referral| o.addr == addr && both(o)) {
                return Err(invalid(key, format!("{addr} is already a referral of the same port")));
            }
            referrals.push(referral);
        }
        let metrics_listen = raw
            .metrics
            .map(|m| {
                m.listen.parse().map_err(|e| {
                    invalid("metrics.listen", format!("{:?}: {e} (e.g. 127.0.0.1:9464)", m.listen))
                })
            })
            .transpose()?;
        Ok(Self {
            listen,
            port_ana,
            port_ids,
            port_params,
            subsystems,
            limits,
            poll_us: l.poll_us.unwrap_or(0),
            send_buffer,
            congestion_control,
            so_priority: l.so_priority.unwrap_or(0),
            referrals,
            metrics_listen,
            discovery_nqn,
            discovery_filter,
        })
    }

    /// Sets `buffered_io` of every file namespace (the `--buffered-io`
    /// command-line override).
    pub fn set_buffered_io(&mut self, buffered: bool) {
        for ns in self.subsystems.iter_mut().flat_map(|s| s.namespaces.iter_mut()) {
            if let NamespaceSource::File { buffered_io, .. } = &mut ns.source {
                *buffered_io = buffered;
            }
        }
    }

    /// Checks every namespace's engine settings ([`NamespaceConfig::check_engine`]).
    pub fn check_engines(&self) -> Result<(), String> {
        self.subsystems.iter().flat_map(|s| s.namespaces.iter()).try_for_each(NamespaceConfig::check_engine)
    }

    /// Sets the I/O engine of every file and block-device namespace (the
    /// `--io-engine` command-line override).
    pub fn set_io_engine(&mut self, engine: IoEngine) {
        for ns in self.subsystems.iter_mut().flat_map(|s| s.namespaces.iter_mut()) {
            match &mut ns.source {
                NamespaceSource::File { io_engine, .. } | NamespaceSource::Block { io_engine, .. } => {
                    *io_engine = engine
                }
                NamespaceSource::Ram(_) => {}
            }
        }
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Self::from_toml(&text)
    }
}

/// 0.0.0.0:4420, the IANA NVMe/TCP port.
pub fn default_listen() -> SocketAddr {
    "0.0.0.0:4420".parse().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert!(parse_size("12Q").is_err());
    }

    #[test]
    fn example_config_parses_and_errors_name_keys() {
        let c = TargetConfig::from_toml(include_str!("../examples/target.toml")).unwrap();
        assert_eq!(c.subsystems.len(), 2);
        assert_eq!(c.listen.len(), 2);
        let e = TargetConfig::from_toml("[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n[[subsystem.namespace]]\nram = \"1G\"\nfile = \"/x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("subsystem[0].namespace[0]"), "{e}");
        let e = TargetConfig::from_toml("[limits]\nmax_h2c_data = 100\n").unwrap_err().to_string();
        assert!(e.contains("limits.max_h2c_data"), "{e}");
        let e = TargetConfig::from_toml("[[port]]\nlisten = \"nonsense\"\n").unwrap_err().to_string();
        assert!(e.contains("port[0].listen"), "{e}");
        let e = TargetConfig::from_toml("[bogus]\n").unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn discovery_filter() {
        assert!(TargetConfig::from_toml("").unwrap().discovery_filter.is_match_any());
        let c = TargetConfig::from_toml("discovery_filter = \"svcid,address\"").unwrap();
        assert_eq!(c.discovery_filter, DiscoveryFilter::NVMET);
        let e = TargetConfig::from_toml("discovery_filter = \"match_any,svcid\"").unwrap_err().to_string();
        assert!(e.contains("discovery_filter") && e.contains("match_any stands alone"), "{e}");
        let e = TargetConfig::from_toml("discovery_filter = \"port\"").unwrap_err().to_string();
        assert!(e.contains("discovery_filter") && e.contains("\"port\""), "{e}");
    }

    #[test]
    fn discovery_nqn() {
        assert_eq!(TargetConfig::from_toml("").unwrap().discovery_nqn, None);
        let sub =
            "\n[[subsystem]]\nnqn = \"nqn.2026-12.io.example:disk\"\n[[subsystem.namespace]]\nram = \"1M\"\n";
        let c = TargetConfig::from_toml(&format!("discovery_nqn = \"nqn.2026-12.io.example:disc\"\n{sub}"))
            .unwrap();
        assert_eq!(c.discovery_nqn.as_deref(), Some("nqn.2026-12.io.example:disc"));
        // A subsystem of that name, an empty or an over-long NQN: refused, naming the key.
        let e = TargetConfig::from_toml(&format!("discovery_nqn = \"nqn.2026-12.io.example:disk\"\n{sub}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("subsystem[0].nqn") && e.contains("discovery_nqn"), "{e}");
        for bad in [String::new(), format!("nqn.2026-12.io.example:{}", "x".repeat(210))] {
            let e = TargetConfig::from_toml(&format!("discovery_nqn = \"{bad}\"\n")).unwrap_err().to_string();
            assert!(e.contains("discovery_nqn"), "{e}");
        }
    }

    #[test]
    fn metrics_listen() {
        assert_eq!(TargetConfig::from_toml("").unwrap().metrics_listen, None);
        let c = TargetConfig::from_toml("[metrics]\nlisten = \"127.0.0.1:9464\"\n").unwrap();
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
        let c = TargetConfig::from_toml("[metrics]\nlisten = \"[::1]:9464\"\n").unwrap();
        assert_eq!(c.metrics_listen, Some("[::1]:9464".parse().unwrap()));
        let e = TargetConfig::from_toml("[metrics]\nlisten = \"localhost\"\n").unwrap_err().to_string();
        assert!(e.contains("metrics.listen") && e.contains("localhost"), "{e}");
        let e = TargetConfig::from_toml("[metrics]\nport = 9464\n").unwrap_err().to_string();
        assert!(e.contains("port"), "{e}");
    }

    #[test]
    fn reservations_key() {
        let ns = |extra: &str| {
            let c = TargetConfig::from_toml(&format!(
                "[[subsystem]]\nnqn = \"nqn.2026-12.x:y\"\n[[subsystem.namespace]]\nram = \"1M\"\n{extra}"
            ));
            c.map(|c| c.subsystems[0].namespaces[0].reservations)
        };
        assert!(!ns("").unwrap(), "off by default, as nvmet's resv_enable");
        assert!(ns("reservations = true\n").unwrap());
        assert!(ns("reservations_file = \"/x.resv\"\n").unwrap(), "a file implies reservations");
        let e = ns("reservations = false\nreservations_file = \"/x.resv\"\n").unwrap_err().to_string();
        assert!(e.contains("reservations_file"), "{e}");
        let e = ns("reservations = 1\n").unwrap_err().to_string();
        assert!(e.contains("reservations"), "{e}");
        let format = |extra: &str| {
            TargetConfig::from_toml(&format!(
                "[[subsystem]]\nnqn = \"nqn.2026-12.x:y\"\n[[subsystem.namespace]]\nram = \"1M\"\n{extra}"
            ))
            .map(|c| c.subsystems[0].namespaces[0].reservations_format)
        };
        assert_eq!(format("reservations_file = \"/x\"\n").unwrap(), ReservationsFormat::Nvmeof);
        let spdk = "reservations_file = \"/x\"\nreservations_format = \"spdk\"\n";
        assert_eq!(format(spdk).unwrap(), ReservationsFormat::Spdk);
        let e = format("reservations = true\nreservations_format = \"spdk\"\n").unwrap_err().to_string();
        assert!(e.contains("reservations_format") && e.contains("reservations_file"), "{e}");
        let e =
            format("reservations_file = \"/x\"\nreservations_format = \"json\"\n").unwrap_err().to_string();
        assert!(e.contains("reservations_format"), "{e}");
    }

    /// The model, serial and firmware are Identify Controller MN, SN and FR:
    /// 40, 20 and 8 printable ASCII bytes. Longer or non-ASCII text was
    /// accepted and reported cut (UTF-8 mid-character).
    #[test]
    fn model_serial_and_firmware_are_printable_ascii() {
        for (field, max) in [("model", 40), ("serial", 20), ("firmware", 8)] {
            let cfg = |m: &str| {
                TargetConfig::from_toml(&format!(
                    "[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n{field} = \"{m}\"\n"
                ))
            };
            let ok = cfg(&"M".repeat(max)).unwrap().subsystems.remove(0);
            let got = match field {
                "model" => ok.model,
                "serial" => ok.serial.unwrap(),
                _ => ok.firmware.unwrap(),
            };
            assert_eq!(got, "M".repeat(max));
            for bad in [String::new(), "Ünïcode".into(), "tab\\there".into(), "M".repeat(max + 1)] {
                let e = cfg(&bad).unwrap_err().to_string();
                assert!(
                    e.contains(&format!("subsystem[0].{field}")) && e.contains(&format!("1 to {max}")),
                    "{bad:?}: {e}"
                );
            }
        }
        let c = TargetConfig::from_toml("[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n").unwrap();
        assert_eq!((c.subsystems[0].serial.as_ref(), c.subsystems[0].firmware.as_ref()), (None, None));
    }

    /// Limits a host is told about are bounded to what the target honours:
    /// MDTS above 18 or 0 ("no limit") was advertised as given while
    /// commands were capped at 1 GiB; no connection at all was accepted.
    #[test]
    fn limits_are_bounded() {
        let limits = |l: &str| TargetConfig::from_toml(&format!("[limits]\n{l}\n"));
        for v in [0, 19, 30, 255] {
            let e = limits(&format!("mdts = {v}")).unwrap_err().to_string();
            assert!(e.contains("limits.mdts") && e.contains("1..=18"), "{v}: {e}");
        }
        assert_eq!(limits("mdts = 1").unwrap().limits.mdts, 1);
        assert_eq!(limits("mdts = 18").unwrap().limits.max_transfer(), 1 << 30);
        let e = limits("max_connections = 0").unwrap_err().to_string();
        assert!(e.contains("limits.max_connections"), "{e}");
        assert_eq!(limits("max_connections = 1").unwrap().limits.max_connections, 1);
        for (k, v) in [("max_queue_entries", "15"), ("max_queue_entries", "65537"), ("max_io_queues", "0")] {
            let e = limits(&format!("{k} = {v}")).unwrap_err().to_string();
            assert!(e.contains(&format!("limits.{k}")), "{e}");
        }
        let e = limits("in_capsule_data = 100").unwrap_err().to_string();
        assert!(e.contains("limits.in_capsule_data"), "{e}");
        assert_eq!(limits("").unwrap().send_buffer, nvmeof_net::default_send_buffer());
        assert_eq!(limits("send_buffer = 0").unwrap().send_buffer, 0, "0: the kernel's autotuning");
        assert_eq!(limits("send_buffer = 4194304").unwrap().send_buffer, 4 << 20);
        for v in ["1", "4095", "1073741825"] {
            let e = limits(&format!("send_buffer = {v}")).unwrap_err().to_string();
            assert!(e.contains("limits.send_buffer"), "{v}: {e}");
        }
        assert_eq!((limits("").unwrap().so_priority, limits("so_priority = 3").unwrap().so_priority), (0, 3));
        assert!(limits("so_priority = -1").is_err());
        assert_eq!(limits("").unwrap().congestion_control, None, "the system's");
        let reno = limits("congestion_control = \"reno\"").unwrap().congestion_control;
        assert_eq!(reno.map(|c| c.to_string()).as_deref(), Some("reno"));
        for v in ["no-such-cc", "", "cu bic"] {
            let e = limits(&format!("congestion_control = {v:?}")).unwrap_err().to_string();
            assert!(e.contains("limits.congestion_control"), "{v}: {e}");
        }
        let e = limits("mtds = 8").unwrap_err().to_string();
        assert!(e.contains("mtds"), "a typo is refused: {e}");
    }

    /// NQNs are 1..=223 bytes: an empty subsystem NQN was exported (and
    /// printed as `nvme connect ... -n `), and an empty or overlong allowed
    /// host, which no host can send, was accepted.
    /// `allowed_hosts` entries may be tables with DH-HMAC-CHAP keys; every
    /// bad value names its key.
    #[test]
    fn allowed_hosts_take_dhchap_keys() {
        let key = DhchapSecret::new(vec![3; 32], HashId::SHA256).unwrap().to_string();
        let ckey = DhchapSecret::new(vec![4; 48], HashId(0)).unwrap().to_string();
        let cfg = |hosts: &str| {
            TargetConfig::from_toml(&format!(
                "[[subsystem]]\nnqn = \"nqn.2026-11.x:s\"\nallowed_hosts = [{hosts}]\n[[subsystem.namespace]]\nram = \"1M\"\n"
            ))
        };
        let c = cfg(&format!(
            "\"nqn.2026-11.x:plain\", {{ nqn = \"nqn.2026-11.x:h\", dhchap_key = \"{key}\", \
             dhchap_ctrl_key = \"{ckey}\", dhchap_hash = \"hmac(sha512)\", dhchap_dhgroup = \"ffdhe3072\" }}, \
             {{ nqn = \"nqn.2026-11.x:nokeys\" }}"
        ))
        .unwrap();
        let s = &c.subsystems[0];
        assert_eq!(
            s.allowed_hosts.as_deref(),
            Some(
                &["nqn.2026-11.x:plain".to_string(), "nqn.2026-11.x:h".into(), "nqn.2026-11.x:nokeys".into()]
                    [..]
            )
        );
        assert_eq!(s.host_keys.len(), 1);
        let k = &s.host_keys["nqn.2026-11.x:h"];
        assert_eq!(k.key.to_string(), key);
        assert_eq!(k.ctrl_key.as_ref().map(|c| c.to_string()), Some(ckey));
        assert_eq!((k.hash, k.dhgroup), (HashId::SHA512, DhGroup::FFDHE3072));
        // nvmet's defaults.
        let c = cfg(&format!("{{ nqn = \"nqn.2026-11.x:h\", dhchap_key = \"{key}\" }}")).unwrap();
        let k = &c.subsystems[0].host_keys["nqn.2026-11.x:h"];
        assert_eq!((k.hash, k.dhgroup, k.ctrl_key.is_none()), (HashId::SHA256, DhGroup::NULL, true));
        for (entry, want) in [
            ("dhchap_key = \"DHHC-1:00:AAAA:\"", "allowed_hosts[0].dhchap_key"),
            ("dhchap_key = \"KEY\", dhchap_ctrl_key = \"x\"", "allowed_hosts[0].dhchap_ctrl_key"),
            ("dhchap_key = \"KEY\", dhchap_hash = \"md5\"", "allowed_hosts[0].dhchap_hash"),
            ("dhchap_key = \"KEY\", dhchap_dhgroup = \"ffdhe1024\"", "allowed_hosts[0].dhchap_dhgroup"),
            ("dhchap_ctrl_key = \"KEY\"", "allowed_hosts[0].dhchap_key"),
            ("dhchap_kye = \"KEY\"", "an NQN, or a table of nqn and (all optional) dhchap_key"),
        ] {
            let e = cfg(&format!("{{ nqn = \"nqn.2026-11.x:h\", {} }}", entry.replace("KEY", &key)))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{entry}: {e}");
        }
    }

    #[test]
    fn subsystem_and_host_nqns_are_checked() {
        let sub = |nqn: &str, hosts: &str| {
            TargetConfig::from_toml(&format!(
                "[[subsystem]]\nnqn = \"{nqn}\"\nallowed_hosts = [{hosts}]\n[[subsystem.namespace]]\nram = \"1M\"\n"
            ))
        };
        let e = sub("", "").unwrap_err().to_string();
        assert!(e.contains("subsystem[0].nqn") && e.contains("empty"), "{e}");
        let e = sub(nvmeof_common::spec::DISCOVERY_NQN, "").unwrap_err().to_string();
        assert!(e.contains("subsystem[0].nqn") && e.contains("discovery"), "{e}");
        let e = sub("nqn.2026-11.x:y", "\"nqn.2026-11.x:h\", \"\"").unwrap_err().to_string();
        assert!(e.contains("subsystem[0].allowed_hosts[1]") && e.contains("empty"), "{e}");
        let long = "n".repeat(224);
        let e = sub("nqn.2026-11.x:y", &format!("\"{long}\"")).unwrap_err().to_string();
        assert!(e.contains("subsystem[0].allowed_hosts[0]") && e.contains("223"), "{e}");
        let c = sub("nqn.2026-11.x:y", "\"nqn.2026-11.x:h\"").unwrap();
        assert_eq!(c.subsystems[0].allowed_hosts, Some(vec!["nqn.2026-11.x:h".to_string()]));
    }

    #[test]
    fn block_size_and_ram_size_are_checked() {
        let ns = |extra: &str| {
            TargetConfig::from_toml(&format!(
                "[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n[[subsystem.namespace]]\n{extra}\n"
            ))
        };
        for bs in NamespaceConfig::BLOCK_SIZES {
            assert!(ns(&format!("ram = \"1M\"\nblock_size = {bs}")).is_ok(), "{bs}");
        }
        // Not a power of two (LBADS is log2), or out of 512..=4096.
        for bs in [0, 256, 1000, 3072, 8192, 65536] {
            let e = ns(&format!("ram = \"1M\"\nblock_size = {bs}")).unwrap_err().to_string();
            assert!(
                e.contains("namespace[0].block_size") && e.contains("512, 1024, 2048 or 4096"),
                "{bs}: {e}"
            );
        }
        let e = ns("ram = \"0\"").unwrap_err().to_string();
        assert!(e.contains("namespace[0].ram") && e.contains("smaller than one 512-byte block"), "{e}");
        let e = ns("ram = \"2k\"\nblock_size = 4096").unwrap_err().to_string();
        assert!(e.contains("namespace[0].ram"), "{e}");
        assert!(ns("ram = \"4k\"\nblock_size = 4096").is_ok());
        // A file's `size` too: refused before the file is created.
        let e = ns("file = \"/x\"\nsize = \"0\"").unwrap_err().to_string();
        assert!(e.contains("namespace[0].size") && e.contains("smaller than one 512-byte block"), "{e}");
        assert!(ns("file = \"/x\"\nsize = \"512\"").is_ok());
        assert!(ns("file = \"/x\"").is_ok(), "no size: the file's own");
    }

    /// NSIDs are unique within a subsystem (an implicit one may land on an
    /// explicit one) and stay below the broadcast values; NQNs are unique.
    #[test]
    fn nsids_and_nqns_are_unique() {
        let sub = |nqn: &str, nsids: &[Option<u32>]| {
            let mut t = format!("[[subsystem]]\nnqn = \"{nqn}\"\n");
            for n in nsids {
                t += "[[subsystem.namespace]]\nram = \"1M\"\n";
                if let Some(n) = n {
                    t += &format!("nsid = {n}\n");
                }
            }
            t
        };
        let parse = |t: String| {
            TargetConfig::from_toml(&t).map(|c| {
                c.subsystems
                    .iter()
                    .map(|s| assign_nsids(&s.namespaces).map(|(n, _)| n).collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(
            parse(sub("nqn.2026-11.x:a", &[Some(2), None, Some(5), None])).unwrap(),
            vec![vec![2, 3, 5, 6]]
        );
        let e = parse(sub("nqn.2026-11.x:a", &[Some(2), None, Some(3)])).unwrap_err().to_string();
        assert!(e.contains("namespace[2].nsid") && e.contains("NSID 3 is used twice"), "{e}");
        let e = parse(sub("nqn.2026-11.x:a", &[Some(4), Some(4)])).unwrap_err().to_string();
        assert!(e.contains("NSID 4 is used twice"), "{e}");
        let e = parse(sub("nqn.2026-11.x:a", &[Some(0xFFFF_FFFD), None])).unwrap_err().to_string();
        assert!(e.contains("namespace[1]") && e.contains("no NSID left"), "{e}");
        let e = parse(sub("nqn.2026-11.x:a", &[None]) + &sub("nqn.2026-11.x:a", &[None]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("subsystem[1].nqn") && e.contains("used twice"), "{e}");
        assert!(parse(sub("nqn.2026-11.x:a", &[None]) + &sub("nqn.2026-11.x:b", &[None])).is_ok());
    }

    #[test]
    fn buffered_io_choice() {
        let ns = |extra: &str| {
            format!(
                "[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n[[subsystem.namespace]]\nfile = \"/x\"\n{extra}"
            )
        };
        let buffered = |c: &TargetConfig| match &c.subsystems[0].namespaces[0].source {
            NamespaceSource::File { buffered_io, io_engine, .. } => (*buffered_io, *io_engine),
            other => panic!("{other:?}"),
        };
        // Default: the page cache, on io_uring where available.
        let mut c = TargetConfig::from_toml(&ns("")).unwrap();
        assert_eq!(buffered(&c), (true, IoEngine::Auto));
        c.set_buffered_io(false);
        assert_eq!(buffered(&c), (false, IoEngine::Auto));
        assert!(c.check_engines().is_ok());
        c.set_io_engine(IoEngine::Threads);
        assert!(c.check_engines().unwrap_err().contains("buffered_io"));
        let c = TargetConfig::from_toml(&ns("buffered_io = false\nio_engine = \"uring\"\n")).unwrap();
        assert_eq!(buffered(&c), (false, IoEngine::Uring));
        let e = TargetConfig::from_toml(&ns("buffered_io = false\nio_engine = \"threads\"\n")).unwrap_err();
        assert!(e.to_string().contains("namespace[0].buffered_io"), "{e}");
        let e = TargetConfig::from_toml(
            "[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n[[subsystem.namespace]]\nram = \"1M\"\nbuffered_io = true\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("file namespaces only"), "{e}");
    }

    #[test]
    fn block_devices_are_claimed_unless_shared() {
        let ns = |src: &str, extra: &str| {
            format!("[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n[[subsystem.namespace]]\n{src}\n{extra}")
        };
        let exclusive = |text: String| match &TargetConfig::from_toml(&text).unwrap().subsystems[0].namespaces
            [0]
        .source
        {
            NamespaceSource::Block { exclusive, .. } => *exclusive,
            other => panic!("{other:?}"),
        };
        assert!(exclusive(ns("block = \"/dev/sdz\"", "")));
        assert!(exclusive(ns("block = \"/dev/sdz\"", "exclusive = true")));
        assert!(!exclusive(ns("block = \"/dev/sdz\"", "exclusive = false")));
        for src in ["file = \"/x\"", "ram = \"1M\""] {
            let e = TargetConfig::from_toml(&ns(src, "exclusive = false")).unwrap_err().to_string();
            assert!(e.contains("namespace[0].exclusive") && e.contains("block namespaces only"), "{e}");
        }
    }

    #[test]
    fn io_engine_choice() {
        let engines = |c: &TargetConfig| {
            c.subsystems[0]
                .namespaces
                .iter()
                .map(|n| match &n.source {
                    NamespaceSource::File { io_engine, .. } | NamespaceSource::Block { io_engine, .. } => {
                        Some(*io_engine)
                    }
                    NamespaceSource::Ram(_) => None,
                })
                .collect::<Vec<_>>()
        };
        let nss = "[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n\
                   [[subsystem.namespace]]\nfile = \"/x\"\n\
                   [[subsystem.namespace]]\nblock = \"/dev/y\"\nio_engine = \"uring\"\n\
                   [[subsystem.namespace]]\nram = \"1M\"\n\
                   [[subsystem.namespace]]\nblock = \"/dev/z\"\n";
        let c = TargetConfig::from_toml(nss).unwrap();
        // Unset: files and block devices use io_uring where available.
        let (t, u, a) = (Some(IoEngine::Threads), Some(IoEngine::Uring), Some(IoEngine::Auto));
        assert_eq!(engines(&c), [a, u, None, a]);
        let mut c = TargetConfig::from_toml(&format!("io_engine = \"threads\"\n{nss}")).unwrap();
        assert_eq!(engines(&c), [t, u, None, t]);
        let mut c2 = TargetConfig::from_toml(&format!("io_engine = \"auto\"\n{nss}")).unwrap();
        assert_eq!(engines(&c2), [a, u, None, a]);
        c.set_io_engine(IoEngine::Uring);
        assert_eq!(engines(&c), [u, u, None, u]);
        c2.set_io_engine(IoEngine::Threads);
        assert_eq!(engines(&c2), [t, t, None, t]);

        let e = TargetConfig::from_toml(&format!("io_engine = \"fast\"\n{nss}")).unwrap_err().to_string();
        assert!(e.contains("io_engine") && e.contains("uring"), "{e}");
        let e = TargetConfig::from_toml(
            "[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n[[subsystem.namespace]]\nram = \"1M\"\nio_engine = \"uring\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("subsystem[0].namespace[0].io_engine"), "{e}");
        assert_eq!("URING".parse::<IoEngine>(), Ok(IoEngine::Uring));
        assert_eq!(IoEngine::Auto.to_string(), "auto");
        assert!("x".parse::<IoEngine>().is_err());
    }

    /// `uuid`, `nguid` and `eui64` take hex digits grouped or not (all
    /// zeroes: none); wrong lengths, non-hex and an identifier two
    /// namespaces share are refused, naming the key.
    #[test]
    fn namespace_identifiers() {
        let one = |ns: &str| {
            TargetConfig::from_toml(&format!(
                "[[subsystem]]\nnqn = \"nqn.2026-11.x:a\"\n[[subsystem.namespace]]\nram = \"1M\"\n{ns}\n"
            ))
        };
        let c = one("uuid = \"0b1d8c4e-7f2a-4c3e-9a61-3d2b5e8f9a10\"\nnguid = \"00112233445566778899AABBCCDDEEFF\"\neui64 = \"01:23:45:67:89:ab:cd:ef\"")
            .unwrap();
        let ids = c.subsystems[0].namespaces[0].ids;
        assert_eq!(
            ids.uuid,
            Some([
                0x0b, 0x1d, 0x8c, 0x4e, 0x7f, 0x2a, 0x4c, 0x3e, 0x9a, 0x61, 0x3d, 0x2b, 0x5e, 0x8f, 0x9a,
                0x10
            ])
        );
        assert_eq!(
            ids.nguid,
            Some([
                0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0xDD, 0xEE,
                0xFF
            ])
        );
        assert_eq!(ids.eui64, Some([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]));
        assert!(!one("").unwrap().subsystems[0].namespaces[0].ids.any());
        // All zeroes: none reported (nothing derived in its place), and two
        // namespaces may both have none.
        let c =
            one("eui64 = \"0000000000000000\"\nnguid = \"00000000-0000-0000-0000-000000000000\"").unwrap();
        let ids = c.subsystems[0].namespaces[0].ids;
        assert_eq!((ids.eui64, ids.nguid, ids.uuid), (Some([0; 8]), Some([0; 16]), None));
        for (ns, key, why) in [
            ("uuid = \"0b1d8c4e-7f2a-4c3e-9a61\"", "namespace[0].uuid", "32 hex digits"),
            ("nguid = \"00112233445566778899AABBCCDDEEFG\"", "namespace[0].nguid", "not hexadecimal"),
            ("eui64 = \"+1234567890abcde\"", "namespace[0].eui64", "not hexadecimal"),
            ("eui64 = \"é1234567890abcd\"", "namespace[0].eui64", "not hexadecimal"),
        ] {
            let e = one(ns).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(why), "{ns}: {e}");
        }
        // Shared between two namespaces, in one subsystem or two.
        let two = |a: &str, b: &str| {
            TargetConfig::from_toml(&format!(
                "[[subsystem]]\nnqn = \"nqn.2026-11.x:a\"\n[[subsystem.namespace]]\nram = \"1M\"\n{a}\n\
                 [[subsystem]]\nnqn = \"nqn.2026-11.x:b\"\n[[subsystem.namespace]]\nram = \"1M\"\n{b}\n"
            ))
        };
        let u = "uuid = \"0b1d8c4e-7f2a-4c3e-9a61-3d2b5e8f9a10\"";
        let e = two(u, u).unwrap_err().to_string();
        assert!(e.contains("subsystem[1].namespace[0].uuid") && e.contains("another namespace"), "{e}");
        assert!(two(u, "uuid = \"1b1d8c4e-7f2a-4c3e-9a61-3d2b5e8f9a10\"").is_ok());
        let e = one("eui64 = \"0123456789abcdef\"\n[[subsystem.namespace]]\nram = \"1M\"\neui64 = \"0123456789ABCDEF\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("subsystem[0].namespace[1].eui64"), "{e}");
        let none = "eui64 = \"0000000000000000\"";
        assert!(two(none, none).is_ok(), "no identifier is no duplicate");
    }

    /// `cntlid_min` / `cntlid_max` bound a subsystem's controller IDs as
    /// nvmet's attributes do (1..=0xFFEF, min <= max).
    #[test]
    fn controller_id_range() {
        let sub = |extra: &str| {
            TargetConfig::from_toml(&format!(
                "[[subsystem]]\nnqn = \"nqn.2026-11.x:a\"\n{extra}\n[[subsystem.namespace]]\nram = \"1M\"\n"
            ))
        };
        assert_eq!(sub("").unwrap().subsystems[0].cntlids, 1..=0xFFEF);
        assert_eq!(sub("cntlid_min = 100").unwrap().subsystems[0].cntlids, 100..=0xFFEF);
        assert_eq!(sub("cntlid_min = 5\ncntlid_max = 5").unwrap().subsystems[0].cntlids, 5..=5);
        for (extra, key) in [
            ("cntlid_min = 0", "subsystem[0].cntlid_min"),
            ("cntlid_max = 65520", "subsystem[0].cntlid_max"),
            ("cntlid_min = 10\ncntlid_max = 9", "subsystem[0].cntlid_max"),
        ] {
            let e = sub(extra).unwrap_err().to_string();
            assert!(e.contains(key), "{extra}: {e}");
        }
    }

    /// `ieee_oui` (nvmet's `attr_ieee_oui`): 24 bits, hex in TOML.
    #[test]
    fn ieee_oui() {
        let sub = |extra: &str| {
            TargetConfig::from_toml(&format!(
                "[[subsystem]]\nnqn = \"nqn.2026-11.x:a\"\n{extra}\n[[subsystem.namespace]]\nram = \"1M\"\n"
            ))
        };
        assert_eq!(sub("").unwrap().subsystems[0].ieee_oui, None);
        assert_eq!(sub("ieee_oui = 0x0050c2").unwrap().subsystems[0].ieee_oui, Some(0x0050c2));
        assert_eq!(sub("ieee_oui = 0xFFFFFF").unwrap().subsystems[0].ieee_oui, Some(0xFF_FFFF));
        for bad in ["ieee_oui = 0x1000000", "ieee_oui = -1", "ieee_oui = \"0050c2\""] {
            let e = sub(bad).unwrap_err().to_string();
            assert!(e.contains("ieee_oui"), "{bad}: {e}");
        }
    }

    /// A subsystem's `max_io_queues` (nvmet's `attr_qid_max`): 1 up to the
    /// target's `limits.max_io_queues`.
    #[test]
    fn subsystem_io_queue_limit() {
        let sub = |limits: &str, extra: &str| {
            TargetConfig::from_toml(&format!(
                "{limits}\n[[subsystem]]\nnqn = \"nqn.2026-11.x:a\"\n{extra}\n[[subsystem.namespace]]\nram = \"1M\"\n"
            ))
        };
        assert_eq!(sub("", "").unwrap().subsystems[0].max_io_queues, None);
        assert_eq!(sub("", "max_io_queues = 1").unwrap().subsystems[0].max_io_queues, Some(1));
        assert_eq!(sub("", "max_io_queues = 128").unwrap().subsystems[0].max_io_queues, Some(128));
        let lim = "[limits]\nmax_io_queues = 8";
        assert_eq!(sub(lim, "max_io_queues = 8").unwrap().subsystems[0].max_io_queues, Some(8));
        for (limits, extra, why) in [
            ("", "max_io_queues = 0", "1..=128"),
            ("", "max_io_queues = 129", "1..=128"),
            (lim, "max_io_queues = 9", "1..=8"),
        ] {
            let e = sub(limits, extra).unwrap_err().to_string();
            assert!(e.contains("subsystem[0].max_io_queues") && e.contains(why), "{extra}: {e}");
        }
    }

    /// A subsystem's `ports`: `portid`s of `[[port]]` tables (by default
    /// their positions from 1; the default port is 1), each once; `[]` is
    /// nowhere.
    #[test]
    fn subsystem_ports() {
        let sub = |ports: &str, extra: &str| {
            TargetConfig::from_toml(&format!(
                "{ports}\n[[subsystem]]\nnqn = \"nqn.2026-11.x:a\"\n{extra}\n[[subsystem.namespace]]\nram = \"1M\"\n"
            ))
        };
        let two = "[[port]]\nlisten = \"127.0.0.1:4420\"\n[[port]]\nlisten = \"127.0.0.1:4421\"";
        assert_eq!(sub(two, "").unwrap().subsystems[0].ports, None);
        assert_eq!(sub(two, "ports = [2]").unwrap().subsystems[0].ports, Some(vec![2]));
        assert_eq!(sub(two, "ports = [2, 1]").unwrap().subsystems[0].ports, Some(vec![2, 1]));
        assert_eq!(sub(two, "ports = []").unwrap().subsystems[0].ports, Some(vec![]));
        assert_eq!(sub("", "ports = [1]").unwrap().subsystems[0].ports, Some(vec![1]));
        // nvmet's port numbers: `portid`, each its own.
        let ids = "[[port]]\nlisten = \"127.0.0.1:4420\"\nportid = 10\n[[port]]\nlisten = \"127.0.0.1:4421\"\nportid = 20";
        let c = sub(ids, "ports = [20]").unwrap();
        assert_eq!((c.port_ids.clone(), c.port_id(0), c.port_id(1)), (vec![10, 20], 10, 20));
        assert_eq!(c.subsystems[0].ports, Some(vec![20]));
        assert_eq!(sub(two, "").unwrap().port_ids, [1, 2]);
        let e = sub(ids, "ports = [2]").unwrap_err().to_string();
        assert!(e.contains("port 2 is no [[port]]'s portid (10, 20)"), "{e}");
        for dup in [
            "[[port]]\nlisten = \"127.0.0.1:4420\"\nportid = 5\n[[port]]\nlisten = \"127.0.0.1:4421\"\nportid = 5",
            "[[port]]\nlisten = \"127.0.0.1:4420\"\nportid = 2\n[[port]]\nlisten = \"127.0.0.1:4421\"",
        ] {
            let e = sub(dup, "").unwrap_err().to_string();
            assert!(e.contains("port[1].portid") && e.contains("is port[0]'s too"), "{e}");
        }
        for (ports, extra, why) in [
            (two, "ports = [3]", "subsystem[0].ports[0]: port 3 is no [[port]]'s portid (1, 2)"),
            (two, "ports = [0]", "port 0 is no [[port]]'s portid (1, 2)"),
            ("", "ports = [2]", "port 2 is no [[port]]'s portid (1)"),
            (two, "ports = [1, 2, 1]", "subsystem[0].ports[2]: port 1 is listed twice"),
            (two, "ports = 1", "ports"),
            (two, "ports = [\"127.0.0.1:4420\"]", "ports"),
        ] {
            let e = sub(ports, extra).unwrap_err().to_string();
            assert!(e.contains(why), "{extra}: {e}");
        }
    }

    /// A port's own `in_capsule_data` and `max_queue_entries` (nvmet's
    /// `param_inline_data_size`, `param_max_queue_size`), checked as the
    /// `[limits]` ones; a port without them has none.
    #[test]
    fn port_params() {
        let cfg = |p2: &str| {
            TargetConfig::from_toml(&format!(
                "[limits]\nin_capsule_data = 65536\n[[port]]\nlisten = \"127.0.0.1:4420\"\n[[port]]\nlisten = \"127.0.0.1:4421\"\n{p2}\n[[subsystem]]\nnqn = \"nqn.2026-11.x:a\"\n"
            ))
        };
        let c = cfg("in_capsule_data = 4096\nmax_queue_entries = 64").unwrap();
        assert_eq!(c.port_params(0), PortParams::default());
        assert_eq!(c.port_params(1), PortParams { in_capsule_data: Some(4096), max_queue_entries: Some(64) });
        assert_eq!(c.port_params(2), PortParams::default(), "no such port");
        let p = c.port_params(1);
        assert_eq!((p.in_capsule_data(&c.limits), p.max_queue_entries(&c.limits)), (4096, 64));
        let p = c.port_params(0);
        assert_eq!((p.in_capsule_data(&c.limits), p.max_queue_entries(&c.limits)), (65536, 1024), "[limits]");
        assert_eq!(cfg("in_capsule_data = 0").unwrap().port_params(1).in_capsule_data, Some(0));
        for (bad, why) in [
            ("in_capsule_data = 4100", "port[1].in_capsule_data: must be a multiple of 16"),
            ("in_capsule_data = 2000000", "port[1].in_capsule_data: must be a multiple of 16 up to 1 MiB"),
            ("max_queue_entries = 15", "port[1].max_queue_entries: must be 16..=65536"),
            ("max_queue_entries = 65537", "port[1].max_queue_entries: must be 16..=65536"),
        ] {
            let e = cfg(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    /// `[[referral]]`: an IP address and port a host can connect to, each
    /// once; PORTID 0 unless given.
    #[test]
    fn referrals() {
        let cfg =
            |r: &str| TargetConfig::from_toml(&format!("{r}\n[[subsystem]]\nnqn = \"nqn.2026-11.x:a\"\n"));
        assert!(cfg("").unwrap().referrals.is_empty());
        let c = cfg(
            "[[referral]]\naddress = \"192.0.2.10:8009\"\n[[referral]]\naddress = \"[2001:db8::1]:4420\"\nportid = 3",
        )
        .unwrap();
        assert_eq!(
            c.referrals,
            [
                Referral::new("192.0.2.10:8009".parse().unwrap(), 0),
                Referral::new("[2001:db8::1]:4420".parse().unwrap(), 3),
            ]
        );
        for (bad, says) in [
            ("address = \"192.0.2.10\"", "referral[0].address"),
            ("address = \"disco.example:8009\"", "is not IP:PORT"),
            ("address = \"0.0.0.0:8009\"", "no wildcard address"),
            ("address = \"192.0.2.10:0\"", "no port 0"),
            (
                "address = \"192.0.2.10:8009\"\n[[referral]]\naddress = \"192.0.2.10:8009\"",
                "already a referral",
            ),
            ("address = \"192.0.2.10:8009\"\nportid = 70000", "portid"),
            ("address = \"192.0.2.10:8009\"\ntrsvcid = 1", "trsvcid"),
            (
                "address = \"192.0.2.10:8009\"\nports = [2]",
                "referral[0].ports[0]: port 2 is no [[port]]'s portid (1)",
            ),
        ] {
            let e = cfg(&format!("[[referral]]\n{bad}")).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        // A port's own referrals (nvmet's ports/N/referrals): one address
        // may be a referral of two ports, with a PORTID each, not twice
        // on one port.
        let two =
            "[[port]]\nlisten = \"127.0.0.1:4420\"\n[[port]]\nlisten = \"127.0.0.1:4421\"\nportid = 5\n";
        let r = |ports: &str, portid: u16| {
            format!("[[referral]]\naddress = \"192.0.2.10:8009\"\nportid = {portid}\n{ports}\n")
        };
        let c = cfg(&format!("{two}{}{}", r("ports = [1]", 3), r("ports = [5]", 4))).unwrap();
        let got: Vec<_> =
            c.referrals.iter().map(|x| (x.portid, x.ports.clone(), x.on_port(1), x.on_port(5))).collect();
        assert_eq!(got, [(3, Some(vec![1]), true, false), (4, Some(vec![5]), false, true)]);
        for (bad, says) in [
            (format!("{}{}", r("ports = [1, 5]", 3), r("ports = [5]", 4)), "referral[1].address"),
            (format!("{}{}", r("", 3), r("ports = [5]", 4)), "already a referral of the same port"),
            (r("ports = [5, 5]", 3), "referral[0].ports[1]: port 5 is listed twice"),
            (r("ports = [2]", 3), "referral[0].ports[0]: port 2 is no [[port]]'s portid (1, 5)"),
        ] {
            let e = cfg(&format!("{two}{bad}")).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(cfg(&format!("{two}{}", r("ports = []", 0))).unwrap().referrals[0].ports, Some(vec![]));
    }
}
