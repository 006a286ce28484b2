//! The probe engine behind `nvmeof-probe`: options, connection set-up, the
//! per-slot workers, ping mode, and the collected [`Report`].
//!
//! # How it measures
//! - One tokio task per in-flight slot (`qd × queues`); slot `i` is bound to
//!   I/O queue `i % queues + 1` and submits through
//!   [`Controller::io_command_on`], so each queue sees exactly `qd` requests.
//! - Each slot owns its data buffer, its histograms and its random generator,
//!   all allocated before the run; the loop itself does not allocate (except
//!   once per second when an HdrHistogram interval log is requested, and for
//!   the optional raw-sample recording used by the tests).
//! - Latency is taken with [`Instant`] right before the submission and right
//!   after the `await` returns, recorded in ns into an HdrHistogram (3
//!   significant digits) per operation type; exact min/max/mean/stddev are
//!   kept beside it.
//! - With `--rate`, every request has an intended send time on a global
//!   schedule (`start + n / rate`); latency is measured from that intended
//!   time, not from the actual send, so a stalled target is not hidden by
//!   the probe waiting for it (coordinated omission). How late the probe
//!   itself sent is reported separately (`sched_lag`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use hdrhistogram::Histogram;
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::spec::discovery::DiscoveryLog;
use nvmeof_common::spec::dsm::{DsmCmd, DsmRange, DSM_RANGE_LEN};
use nvmeof_common::spec::identify::{Cns, Csi, IdentifyCmd, NsIdDescriptor, IDENTIFY_DATA_LEN};
use nvmeof_common::spec::zns::{IdentifyCtrlZns, IdentifyNsZns, ZoneMgmtSendCmd, ZoneSendAction};
use nvmeof_common::{Sqe, Status};
use nvmeof_initiator::{
    discover, nvme_subsystems, ConnectOptions, Controller, HostIdentity, Payload, ReconnectPolicy,
};

use crate::blocksizes::{BlockSizes, SizeTable};
use crate::distribution::{parse_distribution, Distribution, UnitPicker};
use crate::error::{ErrorKind, ToolError};
use crate::pacer::Pacer;
use crate::pattern::{self, Mismatch};
use crate::util::{self, parse_duration, parse_size, DEFAULT_PORT};
use crate::zbd::{ZonePlan, ZonePlanOptions, ZoneStart, ZoneWrite, ZonedWrites};

/// Most verify mismatches kept in the report (all are counted).
pub const MAX_MISMATCHES_KEPT: usize = 100;
/// Significant digits of every latency histogram (0.1 % precision).
pub const HIST_SIGFIG: u8 = 3;

/// I/O pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RwMode {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    Randread,
    /// Random writes.
    Randwrite,
    /// Random mixed reads and writes (`--mix` % reads).
    Randrw,
    /// Sequential mixed reads and writes (`--mix` % reads).
    Rw,
    /// Sequential trims: Dataset Management with Deallocate of each request's blocks.
    Trim,
    /// Random trims.
    Randtrim,
    /// Sequential trim-then-write: each unit is trimmed, then written (fio's trimwrite).
    Trimwrite,
}

impl RwMode {
    /// fio's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
            RwMode::Randread => "randread",
            RwMode::Randwrite => "randwrite",
            RwMode::Randrw => "randrw",
            RwMode::Rw => "rw",
            RwMode::Trim => "trim",
            RwMode::Randtrim => "randtrim",
            RwMode::Trimwrite => "trimwrite",
        }
    }

    /// Whether offsets are random.
    pub fn random(self) -> bool {
        matches!(self, RwMode::Randread | RwMode::Randwrite | RwMode::Randrw | RwMode::Randtrim)
    }

    /// Whether the mode issues reads.
    pub fn reads(self) -> bool {
        matches!(self, RwMode::Read | RwMode::Randread | RwMode::Rw | RwMode::Randrw)
    }

    /// Whether the mode issues writes.
    pub fn writes(self) -> bool {
        matches!(self, RwMode::Write | RwMode::Randwrite | RwMode::Rw | RwMode::Randrw | RwMode::Trimwrite)
    }

    /// Whether the mode issues trims (Deallocate).
    pub fn trims(self) -> bool {
        matches!(self, RwMode::Trim | RwMode::Randtrim | RwMode::Trimwrite)
    }
}

/// How writes treat a zoned namespace (fio's `zonemode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ZoneMode {
    /// Blocks are written where the pattern says: for conventional
    /// namespaces (a zoned one refuses writes off its write pointers).
    #[default]
    None,
    /// Zoned namespaces: each write goes to a zone's write pointer, one in
    /// flight per zone (or many with --zone-append); full zones are reset
    /// before they are written again.
    Zbd,
}

impl ZoneMode {
    /// fio's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            ZoneMode::None => "none",
            ZoneMode::Zbd => "zbd",
        }
    }
}

/// Operation type of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Read.
    Read = 0,
    /// Write.
    Write = 1,
    /// Trim: Dataset Management with Deallocate (the trim modes).
    Trim = 2,
    /// Flush (`--flush-every`; fio's `sync`).
    Flush = 3,
}

impl OpKind {
    /// `"read"`, `"write"`, `"trim"` or `"sync"` (fio's names).
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Trim => "trim",
            OpKind::Flush => "sync",
        }
    }
}

/// Options of `nvmeof-probe` (also the library entry point's input).
#[derive(clap::Parser, Clone, Debug)]
#[command(
    name = "nvmeof-probe",
    version,
    about = "Latency and throughput probe for NVMe/TCP targets (ioping/fio-like)",
    after_help = "Exit codes: 0 ok, 1 NVMe error status, 2 usage, 3 connection/transport error, \
                  4 subsystem or namespace not found, 5 verify mismatch."
)]
pub struct ProbeOptions {
    /// Target address: HOST or HOST:PORT (default port 4420).
    pub target: String,
    /// Subsystem NQN (default: the one NVM subsystem the target's discovery
    /// log lists).
    #[arg(long)]
    pub nqn: Option<String>,
    /// Namespace ID.
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// I/O pattern.
    #[arg(long, value_enum, default_value_t = RwMode::Randread)]
    pub rw: RwMode,
    /// Percentage of reads in mixed modes (randrw, rw).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub mix: u8,
    /// Which units random modes pick, as fio's random_distribution: random (uniform), zipf:THETA
    /// (unit of rank k drawn ∝ 1/k^THETA, e.g. zipf:1.2) or pareto:H (a fraction H of the
    /// requests goes to the hottest 1-H of the region, e.g. pareto:0.8). The hot units are
    /// scattered over the region, not packed at its start.
    #[arg(long, value_name = "DIST", default_value = "random", value_parser = parse_distribution)]
    pub random_distribution: Distribution,
    /// Request size (e.g. 512, 4k, 128k, 1m); a multiple of the namespace block size.
    /// As fio's bs: READ,WRITE or READ,WRITE,TRIM gives the directions sizes of their own
    /// (4k,64k: reads 4 KiB, writes and trims 64 KiB; an empty value is 4k).
    #[arg(long, default_value = "4k", value_parser = BlockSizes::parse_bs)]
    pub bs: BlockSizes,
    /// Request sizes drawn per request with weights, as fio's bssplit:
    /// SIZE/PERCENT:SIZE/PERCENT... (e.g. 4k/60:64k/30:1m/10; sizes without a
    /// percentage share the rest evenly); a comma starts the writes' list, a
    /// second one the trims' (missing: those of the direction before).
    /// Instead of --bs. Random offsets are aligned to the smallest size.
    #[arg(long, value_name = "SPLIT", value_parser = BlockSizes::parse_bssplit, conflicts_with = "bs")]
    pub bssplit: Option<BlockSizes>,
    /// Requests in flight per queue.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub qd: u32,
    /// I/O queues (connections) to use.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub queues: u16,
    /// Further I/O queues for everything but reads (`nvme connect
    /// --nr-write-queues`): the writes of each slot go to these and its reads
    /// to the --queues ones, so reads do not wait behind writes in a socket.
    /// The controller must grant more than --queues queues (a warning says
    /// when it did not: then all queues take both).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub write_queues: u16,
    /// Run time, e.g. 10s, 500ms, 2m (default 10s; none with --count or in ping mode; with both --time and --count, whichever ends first).
    #[arg(long, value_parser = parse_duration)]
    pub time: Option<Duration>,
    /// Number of measured requests (after warm-up).
    #[arg(long)]
    pub count: Option<u64>,
    /// Total request rate cap in IOPS; latency is then measured from the scheduled send time.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: Option<u64>,
    /// Pause each slot this long after a request completes before its next
    /// (fio's thinktime), as an application that computes between its
    /// reads: e.g. 500us, 2ms. Latency is still measured from each send.
    #[arg(long, value_parser = parse_duration)]
    pub thinktime: Option<Duration>,
    /// With --thinktime: pause after every N requests of a slot instead
    /// (fio's thinktime_blocks).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), requires = "thinktime")]
    pub thinktime_blocks: u64,
    /// Warm-up time excluded from the statistics (seconds, or with a unit).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Enable header and data digests (CRC32C).
    #[arg(long)]
    pub digests: bool,
    /// Ask the target to disable SQ flow control (Connect CATTR bit 2, like
    /// `nvme connect --disable-sqflow`): a successful read then completes with
    /// the C2HData SUCCESS flag instead of a separate response capsule.
    #[arg(long)]
    pub disable_sqflow: bool,
    /// Write a self-checking pattern (LBA + generation) and check every block read. In mixed modes
    /// (randrw, rw) a read of a unit no write of the run has completed on may find it
    /// deallocated (all zeros, or all ones): those blocks are counted as never written, not checked.
    #[arg(long)]
    pub verify: bool,
    /// Send every write with Force Unit Access (FUA, CDW12 bit 30; `nvme write --force-unit-access`):
    /// it completes only once the data is durable, so its latency is what a write
    /// the host must not lose costs (fio's sync=dsync, ioping -Y).
    #[arg(long)]
    pub fua: bool,
    /// Send a Flush of the namespace after every N writes (fio's fsync=N): the slot
    /// whose write completes the Nth sends it and waits for it before its next
    /// request; its latency is reported as `sync` (text and JSON; not in --hdr-log
    /// or --plot).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub flush_every: Option<u64>,
    /// Size of the region to use (default: from --offset to the end of the namespace).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Start of the region in bytes (a multiple of the block size).
    #[arg(long, default_value = "0", value_parser = parse_size)]
    pub offset: u64,
    /// Zoned namespaces, as fio's zonemode: zbd sends each write to a zone's write
    /// pointer (random modes pick a random zone, sequential ones go zone after zone), one
    /// in flight per zone, and resets a zone that has no room left before writing it again;
    /// reads stay below the write pointers (see --read-beyond-wp); the region is rounded to
    /// whole zones. Without it, writes to a zoned namespace are refused (usage error), as
    /// they would fail.
    #[arg(long, value_enum, default_value_t = ZoneMode::None)]
    pub zonemode: ZoneMode,
    /// With --zonemode zbd: write with Zone Append, so many writes share a zone (the
    /// target picks where each lands and says so in its completion).
    #[arg(long)]
    pub zone_append: bool,
    /// With --zonemode zbd: let reads go beyond the zones' write pointers, where a
    /// controller returns deallocated blocks without reading anything (fio's
    /// read_beyond_wp); by default a read there moves below the pointer of its zone, or of
    /// the next zone holding data.
    #[arg(long)]
    pub read_beyond_wp: bool,
    /// With --zonemode zbd: most zones written at a time (fio's max_open_zones; default:
    /// the namespace's open and active zone limits, and no more than the writes in flight).
    #[arg(long, value_name = "N")]
    pub max_open_zones: Option<u32>,
    /// ioping mode: one request at a time, one line each, then a summary.
    #[arg(long)]
    pub ping: bool,
    /// Pause between ping requests (default 1s).
    #[arg(long, value_parser = parse_duration)]
    pub interval: Option<Duration>,
    /// The latency percentiles to report, as fio's percentile_list: P:P:...
    /// (e.g. 50:99:99.99:99.9999; 1 to 20 values above 0 and at most 100,
    /// reported in the order given). Default 50:90:99:99.9:99.99:99.999.
    #[arg(long, value_name = "P:P:...", value_parser = parse_percentile_list)]
    pub percentile_list: Option<PercentileList>,
    /// Print fio-style JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write an HdrHistogram interval log (1 s intervals, tags read/write/trim, values in ns).
    #[arg(long)]
    pub hdr_log: Option<PathBuf>,
    /// Write an SVG with a latency percentile plot and IOPS over time.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Job name in the report.
    #[arg(long, default_value = "nvmeof-probe")]
    pub name: String,
    /// Host NQN to connect as (default: nvme-cli's /etc/nvme/hostnqn, as
    /// `nvme connect`; without it this machine's UUID host NQN).
    #[arg(long, value_parser = util::parse_host_nqn)]
    pub hostnqn: Option<String>,
    /// Host identifier to connect as, a UUID (default: nvme-cli's
    /// /etc/nvme/hostid, else the UUID of a UUID host NQN, as `nvme connect
    /// --hostid`): reservations belong to it.
    #[arg(long, value_name = "UUID", value_parser = util::parse_host_id)]
    pub hostid: Option<[u8; 16]>,
    /// DH-HMAC-CHAP secret for targets that require in-band authentication
    /// (`DHHC-1:..`, as `nvme connect --dhchap-secret`).
    #[arg(long, value_name = "SECRET", value_parser = util::parse_dhchap_secret)]
    pub dhchap_secret: Option<nvmeof_common::auth::DhchapSecret>,
    /// The controller's DH-HMAC-CHAP secret: the target must authenticate too.
    #[arg(long, value_name = "SECRET", value_parser = util::parse_dhchap_secret, requires = "dhchap_secret")]
    pub dhchap_ctrl_secret: Option<nvmeof_common::auth::DhchapSecret>,
    /// Seed of the random offsets (default: time based).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Busy-poll the sockets for this many µs after activity (trades CPU for latency).
    #[arg(long, default_value_t = 0)]
    pub poll_us: u64,
    /// SO_SNDBUF of each queue's socket in bytes; 0 leaves it to the kernel's
    /// autotuning (default: the initiator's, a quarter of the per-core L2
    /// cache, 256 KiB to 1 MiB).
    #[arg(long)]
    pub send_buffer: Option<usize>,
    /// TCP congestion control of the probe's sockets (e.g. cubic), as iperf3's
    /// --congestion; default: the system's (net.ipv4.tcp_congestion_control).
    /// On loopback BBR's pacing makes runs with pauses between bursts (data
    /// digests) vary.
    #[arg(long, value_name = "ALGO")]
    pub congestion: Option<nvmeof_initiator::CongestionControl>,
    /// Source address, interface and type of service of the connections.
    #[command(flatten)]
    pub socket: SocketArgs,
    /// Runtime worker threads (default: min(queues + write queues, CPUs)); 1 runs everything on one thread.
    #[arg(long)]
    pub threads: Option<usize>,
    /// No per-second progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Keep every latency sample in the report (tests; memory grows with the run).
    #[arg(long, hide = true)]
    pub record_samples: bool,
}

impl ProbeOptions {
    /// What the probe connects with, for `qd` commands per queue.
    pub fn connect_options(&self, qd: u32) -> ConnectOptions {
        let host = HostIdentity::resolve(self.hostnqn.as_deref(), self.hostid);
        let base = connect_options(self.queues, qd, self.digests, host, self.poll_us);
        // Unset: the initiator's default, which `base` already carries.
        let base = self.socket.apply(base);
        ConnectOptions {
            write_queues: self.write_queues,
            disable_sqflow: self.disable_sqflow,
            send_buffer: self.send_buffer.unwrap_or(base.send_buffer),
            congestion_control: self.congestion.or(base.congestion_control),
            dhchap_secret: self.dhchap_secret.clone(),
            dhchap_ctrl_secret: self.dhchap_ctrl_secret.clone(),
            ..base
        }
    }

    /// Parses command-line style arguments (the first is the program name).
    pub fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        <Self as clap::Parser>::try_parse_from(args)
    }

    /// The target address with the default port added.
    pub fn addr(&self) -> String {
        util::with_default_port(&self.target, DEFAULT_PORT)
    }

    /// The runtime thread count the binary uses.
    pub fn runtime_threads(&self) -> usize {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.threads.unwrap_or_else(|| (self.queues as usize + self.write_queues as usize).min(cpus)).max(1)
    }

    /// The latency percentiles reported: `--percentile-list`, else
    /// [`crate::report::PERCENTILES`].
    pub fn percentiles(&self) -> Vec<f64> {
        self.percentile_list.as_ref().map_or_else(|| crate::report::PERCENTILES.to_vec(), |l| l.0.clone())
    }

    /// The request sizes: `--bssplit`, else `--bs`.
    pub fn sizes(&self) -> &BlockSizes {
        self.bssplit.as_ref().unwrap_or(&self.bs)
    }

    /// The kinds of request `--rw` sends (besides `--flush-every`'s Flushes).
    pub fn ops(&self) -> Vec<OpKind> {
        let rw = self.rw;
        [(rw.reads(), OpKind::Read), (rw.writes(), OpKind::Write), (rw.trims(), OpKind::Trim)]
            .into_iter()
            .filter_map(|(on, op)| on.then_some(op))
            .collect()
    }

    /// The one size of every request, where they all have one (no
    /// `--bssplit`, and one `--bs` for the directions the run sends).
    pub fn single_bs(&self) -> Option<u64> {
        self.sizes().single(&self.ops())
    }

    /// The request sizes for a reader: `4 KiB` where every request has
    /// one size, else fio's form (`4k,64k`, `4k/60:64k/40`).
    pub fn bs_text(&self) -> String {
        self.single_bs().map_or_else(|| self.sizes().to_string(), util::fmt_bytes)
    }

    /// The run time limit in effect (`None`: until the count is reached or stopped).
    pub fn time_limit(&self) -> Option<Duration> {
        match (self.time, self.count, self.ping) {
            (Some(t), _, _) => Some(t),
            (None, None, false) => Some(Duration::from_secs(10)),
            _ => None,
        }
    }

    /// Checks combinations the parser cannot.
    pub fn validate(&self) -> Result<(), ToolError> {
        if self.single_bs().is_none() && self.zonemode == ZoneMode::Zbd {
            // The zone plan counts requests of one size.
            return Err(ToolError::usage(format!(
                "--zonemode zbd needs one request size (--bs {} gives --rw {} several)",
                self.sizes(),
                self.rw.as_str()
            )));
        }
        if self.count == Some(0) {
            return Err(ToolError::usage("--count must be at least 1"));
        }
        if self.time == Some(Duration::ZERO) {
            return Err(ToolError::usage("--time must be positive"));
        }
        if self.ping && (self.qd != 1 || self.queues != 1 || self.write_queues != 0 || self.rate.is_some()) {
            return Err(ToolError::usage(
                "--ping sends one request at a time: --qd, --queues, --write-queues and --rate do not apply (use --interval)",
            ));
        }
        // Options that would otherwise do nothing: a user who gave them
        // expected an effect (ioping pauses, a thread count).
        if self.random_distribution.skewed() && !self.rw.random() {
            return Err(ToolError::usage(format!(
                "--random-distribution {} applies to the random modes (randread, randwrite, randrw)",
                self.random_distribution
            )));
        }
        if self.thinktime.is_some() && (self.ping || self.rate.is_some()) {
            // Both already space requests out: --interval in ping mode, the
            // schedule with --rate (whose latency counts from the intended
            // send, which a pause would then inflate).
            return Err(ToolError::usage(
                "--thinktime applies to bench runs without --rate (--ping has --interval)",
            ));
        }
        if self.interval.is_some() && !self.ping {
            return Err(ToolError::usage("--interval applies to --ping only (use --rate to pace a run)"));
        }
        if self.zonemode == ZoneMode::None
            && (self.zone_append || self.max_open_zones.is_some() || self.read_beyond_wp)
        {
            return Err(ToolError::usage(
                "--zone-append, --max-open-zones and --read-beyond-wp apply to --zonemode zbd",
            ));
        }
        if self.max_open_zones == Some(0) {
            return Err(ToolError::usage("--max-open-zones must be at least 1"));
        }
        if self.zone_append && self.verify {
            // The pattern names each block's LBA, and only the completion
            // says where an append went.
            return Err(ToolError::usage(
                "--verify cannot be used with --zone-append: the target picks where each append lands",
            ));
        }
        if self.rw.trims() && (self.verify || self.zonemode == ZoneMode::Zbd) {
            return Err(ToolError::usage(format!(
                "--rw {}: --verify and --zonemode zbd apply to reads and writes",
                self.rw.as_str()
            )));
        }
        if (self.fua || self.flush_every.is_some()) && !self.rw.writes() {
            return Err(ToolError::usage(format!(
                "--fua and --flush-every apply to writes: --rw {} writes nothing",
                self.rw.as_str()
            )));
        }
        if self.ping && self.flush_every.is_some() {
            return Err(ToolError::usage(
                "--flush-every does not apply to --ping (use --fua to time durable writes one at a time)",
            ));
        }
        if self.threads == Some(0) {
            return Err(ToolError::usage("--threads must be at least 1"));
        }
        if self.nqn.as_deref() == Some("") {
            return Err(ToolError::usage("--nqn must not be empty"));
        }
        util::target_addr(&self.target, DEFAULT_PORT).map_err(ToolError::usage)?;
        Ok(())
    }
}

/// `--percentile-list`: the latency percentiles to report, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct PercentileList(pub Vec<f64>);

/// Parses fio's `percentile_list`: `P:P:...`, 1 to 20 values, each above
/// 0 and at most 100.
fn parse_percentile_list(s: &str) -> Result<PercentileList, String> {
    let v = s
        .split(':')
        .map(|p| {
            p.trim()
                .parse::<f64>()
                .ok()
                .filter(|p| *p > 0.0 && *p <= 100.0)
                .ok_or_else(|| format!("{p:?}: a percentile is a number above 0 and at most 100"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if v.len() > 20 {
        return Err(format!("{} percentiles: at most 20 (as fio)", v.len()));
    }
    Ok(PercentileList(v))
}

/// Something the run reports while it goes.
#[derive(Clone, Debug)]
pub enum ProbeEvent {
    /// Something worth telling that does not stop the run.
    Warning(String),
    /// One second of progress (every second, from the first).
    Progress(TimelinePoint),
    /// One ping-mode request.
    Ping(PingSample),
    /// A block failed verification.
    Mismatch(Mismatch),
}

/// Callback for [`ProbeEvent`]s.
pub type EventFn = Arc<dyn Fn(&ProbeEvent) + Send + Sync>;

/// Hooks of a run: an event callback and a stop flag (Ctrl-C).
#[derive(Clone, Default)]
pub struct Hooks {
    /// Called for every event (from worker tasks; keep it short).
    pub on_event: Option<EventFn>,
    /// Set to end the run early; the report covers what completed.
    pub stop: Arc<AtomicBool>,
}

impl Hooks {
    fn emit(&self, e: ProbeEvent) {
        if let Some(f) = &self.on_event {
            f(&e);
        }
    }
}

/// One ping-mode request.
#[derive(Clone, Debug)]
pub struct PingSample {
    /// 1-based request number.
    pub request: u64,
    /// Read or write.
    pub op: OpKind,
    /// Bytes transferred.
    pub bytes: u64,
    /// First LBA.
    pub lba: u64,
    /// Round trip in ns.
    pub latency_ns: u64,
    /// Sent during warm-up (not in the statistics).
    pub warmup: bool,
}

/// Requests and bandwidth of one second of the run.
#[derive(Clone, Debug, Default)]
pub struct TimelinePoint {
    /// Seconds since the start (end of this interval).
    pub t: f64,
    /// Length of the interval in seconds.
    pub secs: f64,
    /// Read IOPS in this interval.
    pub read_iops: f64,
    /// Write IOPS.
    pub write_iops: f64,
    /// Read bytes/s.
    pub read_bw: f64,
    /// Write bytes/s.
    pub write_bw: f64,
    /// Mean read latency (ns) in this interval.
    pub read_lat_mean_ns: f64,
    /// Mean write latency (ns).
    pub write_lat_mean_ns: f64,
    /// Trim IOPS (the trim modes).
    pub trim_iops: f64,
    /// Trimmed bytes/s.
    pub trim_bw: f64,
    /// Mean trim latency (ns).
    pub trim_lat_mean_ns: f64,
    /// Whether this interval is (partly) warm-up.
    pub warmup: bool,
}

/// Latency statistics of one operation type.
#[derive(Clone, Debug)]
pub struct OpStats {
    /// Completed requests.
    pub ops: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Exact smallest latency (ns).
    pub min_ns: u64,
    /// Exact largest latency (ns).
    pub max_ns: u64,
    sum_ns: f64,
    sum_sq: f64,
    /// All latencies (ns), 3 significant digits.
    pub hist: Histogram<u64>,
}

impl Default for OpStats {
    fn default() -> Self {
        Self::new()
    }
}

impl OpStats {
    /// Empty statistics.
    pub fn new() -> Self {
        Self {
            ops: 0,
            bytes: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            sum_ns: 0.0,
            sum_sq: 0.0,
            hist: Histogram::new(HIST_SIGFIG).expect("valid sigfig"),
        }
    }

    /// Records one request.
    #[inline]
    pub fn record(&mut self, lat_ns: u64, bytes: u64) {
        self.ops += 1;
        self.bytes += bytes;
        self.min_ns = self.min_ns.min(lat_ns);
        self.max_ns = self.max_ns.max(lat_ns);
        let v = lat_ns as f64;
        self.sum_ns += v;
        self.sum_sq += v * v;
        let _ = self.hist.record(lat_ns.max(1));
    }

    /// Adds another's statistics.
    pub fn merge(&mut self, o: &OpStats) {
        self.ops += o.ops;
        self.bytes += o.bytes;
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
        self.sum_ns += o.sum_ns;
        self.sum_sq += o.sum_sq;
        let _ = self.hist.add(&o.hist);
    }

    /// Smallest latency (0 without requests).
    pub fn min(&self) -> u64 {
        if self.ops == 0 {
            0
        } else {
            self.min_ns
        }
    }

    /// Mean latency in ns.
    pub fn mean(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.sum_ns / self.ops as f64
        }
    }

    /// Sample standard deviation in ns (like fio).
    pub fn stddev(&self) -> f64 {
        if self.ops < 2 {
            return 0.0;
        }
        let n = self.ops as f64;
        let var = (self.sum_sq - self.sum_ns * self.sum_ns / n) / (n - 1.0);
        var.max(0.0).sqrt()
    }

    /// Latency at percentile `p` (0–100), from the histogram.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.ops == 0 {
            0
        } else {
            self.hist.value_at_quantile(p / 100.0)
        }
    }
}

/// Histograms of one interval of an HdrHistogram log.
#[derive(Clone, Debug)]
pub struct IntervalHists {
    /// Offset of the interval start from the measurement start.
    pub start: Duration,
    /// Interval length.
    pub length: Duration,
    /// Read latencies.
    pub read: Histogram<u64>,
    /// Write latencies.
    pub write: Histogram<u64>,
    /// Trim latencies (the trim modes).
    pub trim: Histogram<u64>,
}

/// Verification results.
#[derive(Clone, Debug, Default)]
pub struct VerifyStats {
    /// Blocks written with the pattern.
    pub written_blocks: u64,
    /// Blocks read and checked.
    pub checked_blocks: u64,
    /// Blocks that failed the check.
    pub mismatches: u64,
    /// Mixed read/write runs: blocks read as deallocated (all zeros or all
    /// ones) from units no write of the
    /// run had completed on before the read was sent (never written: not
    /// checked, not counted in `checked_blocks`).
    pub unwritten_blocks: u64,
    /// The first [`MAX_MISMATCHES_KEPT`] failures.
    pub first: Vec<Mismatch>,
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Report {
    /// The options of the run.
    pub opts: ProbeOptions,
    /// Resolved target address.
    pub addr: String,
    /// I/O queues actually used.
    pub queues: u16,
    /// Write queues actually used (`--write-queues`; 0: none, or not granted).
    pub write_queues: u16,
    /// Requests in flight per queue actually used: `--qd`, or less where the
    /// controller granted smaller queues.
    pub qd: u32,
    /// Namespace block size.
    pub block_size: u32,
    /// Region used: first byte and length.
    pub region: (u64, u64),
    /// Wall-clock start of the measurement.
    pub started: SystemTime,
    /// Measured time (after warm-up).
    pub runtime: Duration,
    /// Reads.
    pub read: OpStats,
    /// Writes.
    pub write: OpStats,
    /// Trims (Deallocate).
    pub trim: OpStats,
    /// Flushes sent by `--flush-every` (fio's `sync`; bytes 0).
    pub sync: OpStats,
    /// How late requests were sent against the `--rate` schedule (ns).
    pub sched_lag: Option<OpStats>,
    /// Verification results (with `--verify`).
    pub verify: Option<VerifyStats>,
    /// Failed requests.
    pub errors: u64,
    /// The first failure, which ended the run.
    pub error: Option<ToolError>,
    /// Per-second progress.
    pub timeline: Vec<TimelinePoint>,
    /// 1 s interval histograms (with `--hdr-log`).
    pub intervals: Vec<IntervalHists>,
    /// Raw latencies (ns) in completion order per slot, reads then writes (with `record_samples`).
    pub samples: Option<[Vec<u64>; 2]>,
    /// Zones written (with `--zonemode zbd`).
    pub zones: Option<ZoneSummary>,
}

/// What `--zonemode zbd` used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSummary {
    /// Zone size in bytes.
    pub zone_bytes: u64,
    /// Zones of the region writes could go to.
    pub zones: usize,
    /// Most zones written at a time.
    pub max_open: usize,
    /// Writes were Zone Appends.
    pub append: bool,
    /// Zones reset because they had no room left.
    pub resets: u64,
}

impl Report {
    /// Statistics of `op`.
    pub fn stats(&self, op: OpKind) -> &OpStats {
        match op {
            OpKind::Read => &self.read,
            OpKind::Write => &self.write,
            OpKind::Trim => &self.trim,
            OpKind::Flush => &self.sync,
        }
    }

    /// Requests per second of `op` over the measured time.
    pub fn iops(&self, op: OpKind) -> f64 {
        let s = self.runtime.as_secs_f64();
        if s > 0.0 {
            self.stats(op).ops as f64 / s
        } else {
            0.0
        }
    }

    /// Bytes per second of `op`.
    pub fn bw_bytes(&self, op: OpKind) -> f64 {
        let s = self.runtime.as_secs_f64();
        if s > 0.0 {
            self.stats(op).bytes as f64 / s
        } else {
            0.0
        }
    }

    /// The exit code this run deserves.
    pub fn exit_code(&self) -> crate::error::ExitCode {
        if let Some(e) = &self.error {
            return e.exit_code();
        }
        if self.verify.as_ref().is_some_and(|v| v.mismatches > 0) {
            return crate::error::ExitCode::VerifyFailed;
        }
        crate::error::ExitCode::Ok
    }
}

/// Running totals of one slot (requests, latency sum and bytes per
/// operation type, warm-up included) for the progress lines. Only its slot
/// writes them, with plain stores (no locked read-modify-write in the I/O
/// loop); cache lines of their own, so slots on different threads do not
/// share lines.
#[repr(align(64))]
#[derive(Default)]
struct SlotLive {
    ops: [AtomicU64; 3],
    lat_ns: [AtomicU64; 3],
    bytes: [AtomicU64; 3],
}

/// Everything the slots share (read-only except atomics).
struct Shared {
    ctrl: Controller,
    nsid: u32,
    block_size: usize,
    /// Where requests go and their sizes.
    geo: Geometry,
    /// The largest request's bytes (the slots' buffers).
    max_bytes: usize,
    mode: RwMode,
    mix: u64,
    /// `--fua`.
    fua: bool,
    picker: UnitPicker,
    t0: Instant,
    measure_start: Instant,
    end: Option<Instant>,
    period_ns: Option<f64>,
    count: Option<u64>,
    claimed: AtomicU64,
    sched: AtomicU64,
    seq: AtomicU64,
    live: Box<[SlotLive]>,
    /// Read, write, trim and flush statistics of each queue's slots (index
    /// qid - 1, then [`OpKind`]). One histogram per queue rather than per slot: at QD32
    /// per-slot histograms add up to more than the L2 cache, and a record
    /// then costs a miss.
    queue_stats: Box<[Mutex<[OpStats; 4]>]>,
    /// `--flush-every`: writes per Flush.
    flush_every: Option<u64>,
    /// `--thinktime` and `--thinktime-blocks`.
    thinktime: Option<(Duration, u64)>,
    /// Writes completed (warm-up included), counted for `--flush-every` only.
    writes_done: AtomicU64,
    verify: bool,
    /// Mixed modes with verify: units whose writes have completed.
    written: Option<pattern::WrittenUnits>,
    /// `--zonemode zbd`: where writes and reads go.
    zoned: Option<Arc<ZonedWrites>>,
    read_beyond_wp: bool,
    gen_base: u64,
    gen: AtomicU64,
    hooks: Hooks,
    mismatches: Mutex<VerifyStats>,
    errors: AtomicU64,
    error: Mutex<Option<ToolError>>,
    interval: Option<Duration>,
    record_samples: bool,
    samples_hint: usize,
}

/// What one slot collected.
struct SlotOut {
    lag: Option<OpStats>,
    intervals: Vec<(u32, [Histogram<u64>; 3])>,
    samples: [Vec<u64>; 2],
    written_blocks: u64,
    checked_blocks: u64,
    unwritten_blocks: u64,
}

/// xorshift64* generator.
struct Rng(u64);

/// The generator `rand_distr` draws from ([`UnitPicker`]'s skewed distributions).
impl rand_core::TryRng for Rng {
    type Error = std::convert::Infallible;
    #[inline]
    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok((self.next() >> 32) as u32)
    }
    #[inline]
    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        Ok(self.next())
    }
    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        rand_core::utils::fill_bytes_via_next_word(dst, || Ok(self.next()))
    }
}

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    #[inline]
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n`.
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
}

/// The command of `op`: a Read or Write of `blocks` blocks at `lba`, a
/// Dataset Management Deallocate of one range (whose LBA and length go in
/// its data, [`IoBuf::range`]), or a Flush of the namespace.
fn rw_sqe(op: OpKind, nsid: u32, lba: u64, blocks: u64) -> Sqe {
    let opc = match op {
        OpKind::Read => IoOpcode::READ,
        OpKind::Write => IoOpcode::WRITE,
        // One range, in the data (`IoBuf::range`).
        OpKind::Trim => return DsmCmd::deallocate(nsid, 1).to_sqe(0),
        OpKind::Flush => {
            let mut s = Sqe::new(IoOpcode::FLUSH.0);
            s.set_nsid(nsid);
            return s;
        }
    };
    let mut s = Sqe::new(opc.0);
    s.set_nsid(nsid).set_slba(lba).set_cdw(12, (blocks - 1) as u32);
    s
}

/// A Zone Append of `blocks` blocks to the zone starting at `zslba`.
fn append_sqe(nsid: u32, zslba: u64, blocks: u64) -> Sqe {
    let mut s = Sqe::new(IoOpcode::ZONE_APPEND.0);
    s.set_nsid(nsid).set_slba(zslba).set_cdw(12, (blocks - 1) as u32);
    s
}

fn new_hist() -> Histogram<u64> {
    Histogram::new(HIST_SIGFIG).expect("valid sigfig")
}

impl Shared {
    fn fail(&self, what: String, e: &nvmeof_initiator::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut slot = self.error.lock().unwrap();
        if slot.is_none() {
            *slot = Some(ToolError::from_initiator(&what, e));
        }
        self.hooks.stop.store(true, Ordering::Relaxed);
    }

    fn mismatch(&self, m: Mismatch) {
        {
            let mut v = self.mismatches.lock().unwrap();
            v.mismatches += 1;
            if v.first.len() < MAX_MISMATCHES_KEPT {
                v.first.push(m.clone());
            }
        }
        self.hooks.emit(ProbeEvent::Mismatch(m));
    }

    /// Where `--zonemode zbd` writes go.
    fn zone_target(&self) -> Option<ZoneTarget<'_>> {
        self.zoned.as_deref().map(|zones| ZoneTarget {
            zones,
            ctrl: &self.ctrl,
            nsid: self.nsid,
            region_lba: self.geo.region_lba,
            blocks_per_io: self.geo.blocks_per_io,
            written: self.written.as_ref(),
            read_beyond_wp: self.read_beyond_wp,
        })
    }

    /// The next request: its kind, its unit of the region, its first LBA
    /// and its blocks.
    fn pick(&self, rng: &mut Rng) -> (OpKind, u64, u64, u64) {
        let op = match self.mode {
            RwMode::Read | RwMode::Randread => OpKind::Read,
            RwMode::Write | RwMode::Randwrite => OpKind::Write,
            // Trimwrite's writes follow their trims in the slot (`slot`).
            RwMode::Trim | RwMode::Randtrim | RwMode::Trimwrite => OpKind::Trim,
            RwMode::Randrw | RwMode::Rw => {
                if rng.below(100) < self.mix {
                    OpKind::Read
                } else {
                    OpKind::Write
                }
            }
        };
        let g = &self.geo;
        let blocks = g.blocks(op, rng);
        let (unit, lba) = if self.mode.random() {
            let unit = self.picker.pick(rng);
            (unit, g.random_at(unit, blocks))
        } else {
            g.seq_at(self.seq.fetch_add(g.seq_step(blocks), Ordering::Relaxed), blocks)
        };
        (op, unit, lba, blocks)
    }
}

/// A slot's data buffers, passed to each request without copying: reads land
/// from the socket straight in `rd` ([`Controller::io_read_buf_on`]); writes
/// send `wr` as `Bytes` ([`Payload::WriteBytes`]: a count bump, nothing
/// allocated). Verify mode writes a fresh pattern each time, so it fills
/// `scratch` and lets the queue copy it once ([`Payload::Write`]).
struct IoBuf {
    rd: BytesMut,
    wr: Bytes,
    scratch: Vec<u8>,
    /// The buffers' length: the largest request.
    len: usize,
    block_size: usize,
    /// The current request's bytes (set by [`Self::run_at`]).
    cur: usize,
    /// `--fua`: every write (and Zone Append) has Force Unit Access.
    fua: bool,
    /// A trim's Dataset Management range.
    range: [u8; DSM_RANGE_LEN],
}

impl IoBuf {
    /// Buffers of `len` bytes for requests of blocks of `block_size`;
    /// writes send pseudo-random data (not zeroes), with FUA when `fua`.
    fn new(len: usize, block_size: usize, fua: bool, rng: &mut Rng) -> Self {
        let mut wr = vec![0; len];
        for w in wr.chunks_mut(8) {
            let v = rng.next().to_le_bytes();
            w.copy_from_slice(&v[..w.len()]);
        }
        Self {
            rd: BytesMut::zeroed(len),
            wr: wr.into(),
            scratch: Vec::new(),
            len,
            block_size,
            cur: len,
            fua,
            range: [0; DSM_RANGE_LEN],
        }
    }

    /// The data the next write, of `blocks` blocks, sends: to be filled
    /// (verify mode). Allocated once, at the largest size.
    fn write_data_mut(&mut self, blocks: u64) -> &mut [u8] {
        self.scratch.resize(self.len, 0);
        &mut self.scratch[..blocks as usize * self.block_size]
    }

    /// The data a write of the current request sends: a view of `wr` (a
    /// count bump).
    fn write_bytes(&self) -> Bytes {
        self.wr.slice(..self.cur)
    }

    /// The data the last read returned.
    fn read_data(&self) -> &[u8] {
        &self.rd
    }

    /// Runs `op` of `blocks` blocks at `lba` of namespace `nsid` on queue
    /// `qid`, or the zoned write `zone`, whose zone is released afterwards;
    /// returns where a zoned write landed.
    async fn run_at(
        &mut self,
        ctrl: &Controller,
        qid: u16,
        op: OpKind,
        (nsid, lba, blocks): (u32, u64, u64),
        zone: Option<(&ZoneTarget<'_>, &ZoneWrite)>,
    ) -> nvmeof_initiator::Result<Option<u64>> {
        self.cur = blocks as usize * self.block_size;
        let Some((zt, w)) = zone else {
            if op == OpKind::Trim {
                self.range = DsmRange { cattr: 0, nlb: blocks as u32, slba: lba }.encode();
            }
            return self.run(ctrl, qid, op, rw_sqe(op, nsid, lba, blocks)).await.map(|_| None);
        };
        let r = self.run(ctrl, qid, op, zt.sqe(w)).await;
        zt.zones.done(w);
        zt.landed(w, r?).map(Some)
    }

    /// Runs `sqe` on queue `qid`; read data is in [`Self::read_data`]
    /// afterwards. Returns the completion's DW0–DW1 (a Zone Append's LBA).
    /// A Zone Append is sent once: resubmitted after a reconnect, it could
    /// append twice.
    async fn run(
        &mut self,
        ctrl: &Controller,
        qid: u16,
        op: OpKind,
        mut sqe: Sqe,
    ) -> nvmeof_initiator::Result<u64> {
        let result = |c: nvmeof_common::Cqe| c.dw0() as u64 | (c.dw1() as u64) << 32;
        if op == OpKind::Write && self.fua {
            sqe.set_fua(true);
        }
        match op {
            OpKind::Read => {
                let mut buf = std::mem::take(&mut self.rd);
                buf.clear();
                match ctrl.io_read_buf_on(qid, sqe, buf, self.cur).await {
                    Ok(b) => {
                        self.rd = b;
                        Ok(0)
                    }
                    Err(e) => {
                        // The buffer went with the failed request: start a fresh one.
                        self.rd = BytesMut::zeroed(self.len);
                        Err(e)
                    }
                }
            }
            OpKind::Write if sqe.opcode() == IoOpcode::ZONE_APPEND.0 => {
                ctrl.io_command_once_on(qid, sqe, Payload::WriteBytes(self.write_bytes())).await.map(result)
            }
            OpKind::Write if !self.scratch.is_empty() => {
                ctrl.io_command_on(qid, sqe, Payload::Write(&self.scratch[..self.cur])).await.map(result)
            }
            OpKind::Write => {
                ctrl.io_command_on(qid, sqe, Payload::WriteBytes(self.write_bytes())).await.map(result)
            }
            OpKind::Trim => ctrl.io_command_on(qid, sqe, Payload::Write(&self.range)).await.map(result),
            OpKind::Flush => ctrl.io_command_on(qid, sqe, Payload::None).await.map(result),
        }
    }
}

/// Where a `--zonemode zbd` write goes.
struct ZoneTarget<'a> {
    zones: &'a ZonedWrites,
    ctrl: &'a Controller,
    nsid: u32,
    region_lba: u64,
    blocks_per_io: u64,
    written: Option<&'a pattern::WrittenUnits>,
    read_beyond_wp: bool,
}

impl ZoneTarget<'_> {
    /// Where a request for `lba` goes: a write to the zone the plan picks
    /// (see [`Self::start`]), a read below the write pointers unless
    /// `--read-beyond-wp`. `Ok(None)` once the run is over.
    async fn place(
        &self,
        op: OpKind,
        lba: u64,
        write_qid: u16,
        rng: &mut Rng,
        stop: &AtomicBool,
        end: Option<Instant>,
    ) -> Result<Option<(u64, Option<ZoneWrite>)>, (String, nvmeof_initiator::Error)> {
        match op {
            OpKind::Read if self.read_beyond_wp => Ok(Some((lba, None))),
            OpKind::Read => Ok(Some((self.zones.read_lba(lba), None))),
            OpKind::Trim | OpKind::Flush => Ok(Some((lba, None))),
            OpKind::Write => Ok(self.start(write_qid, rng, stop, end).await?.map(|w| (w.lba, Some(w)))),
        }
    }

    /// Claims the next write's zone, resetting it first where it has no
    /// room (on `qid`); `Ok(None)` once the run is over. A failed reset is
    /// returned with what failed.
    async fn start(
        &self,
        qid: u16,
        rng: &mut Rng,
        stop: &AtomicBool,
        end: Option<Instant>,
    ) -> Result<Option<ZoneWrite>, (String, nvmeof_initiator::Error)> {
        let Some(w) = self.zones.claim(&mut |n| rng.below(n), stop, end).await else {
            return Ok(None);
        };
        if w.reset_first {
            self.zones.begin_reset(&w);
            // Reads of the zone from now on may find zeroes (see `ZonedWrites::epoch`).
            if let Some(wu) = self.written {
                let first = (w.zslba - self.region_lba) / self.blocks_per_io;
                wu.clear_range(first, self.zones.zone_blocks() / self.blocks_per_io);
            }
            let cmd = ZoneMgmtSendCmd {
                nsid: self.nsid,
                slba: w.zslba,
                action: ZoneSendAction::RESET,
                select_all: false,
            };
            let r = self.ctrl.io_command_on(qid, cmd.to_sqe(0), Payload::None).await;
            self.zones.end_reset(&w, r.is_ok());
            if let Err(e) = r {
                self.zones.done(&w);
                return Err((format!("reset of the zone at lba {} on queue {qid}", w.zslba), e));
            }
        }
        Ok(Some(w))
    }

    /// The command that writes `w`.
    fn sqe(&self, w: &ZoneWrite) -> Sqe {
        if self.zones.append() {
            append_sqe(self.nsid, w.zslba, self.blocks_per_io)
        } else {
            rw_sqe(OpKind::Write, self.nsid, w.lba, self.blocks_per_io)
        }
    }

    /// Where `w` landed: its LBA, or a Zone Append's from its completion
    /// (`result`), which must lie within the zone's capacity.
    fn landed(&self, w: &ZoneWrite, result: u64) -> nvmeof_initiator::Result<u64> {
        if !self.zones.append() {
            return Ok(w.lba);
        }
        let cap = self.zones.capacity(w.zone);
        if result < w.zslba || result + self.blocks_per_io > w.zslba + cap {
            return Err(nvmeof_initiator::Error::Controller(format!(
                "Zone Append to the zone at lba {} completed at lba {result}, outside the zone's {cap} writable blocks",
                w.zslba
            )));
        }
        Ok(result)
    }
}

/// The record of written units a run needs: mixed modes with `--verify` only.
fn written_units(opts: &ProbeOptions, units: u64) -> Option<pattern::WrittenUnits> {
    (opts.verify && opts.rw.reads() && opts.rw.writes()).then(|| pattern::WrittenUnits::new(units))
}

/// One in-flight slot: submits its reads on queue `qids[0]` and its writes
/// on `qids[1]` until the run ends.
async fn slot(sh: Arc<Shared>, idx: usize, qids: [u16; 2], seed: u64) -> SlotOut {
    let mut rng = Rng::new(seed);
    let mut buf = IoBuf::new(sh.max_bytes, sh.block_size, sh.fua, &mut rng);
    let cap = if sh.record_samples { sh.samples_hint } else { 0 };
    let mut out = SlotOut {
        lag: sh.period_ns.map(|_| OpStats::new()),
        intervals: Vec::new(),
        samples: [Vec::with_capacity(cap), Vec::with_capacity(cap)],
        written_blocks: 0,
        checked_blocks: 0,
        unwritten_blocks: 0,
    };
    let mut cur = sh.interval.map(|_| [new_hist(), new_hist(), new_hist()]);
    let mut cur_idx = 0u32;
    let mut next_boundary = sh.interval.map(|i| sh.measure_start + i);
    let stop = &sh.hooks.stop;
    let mut pacer = Pacer::new();
    let mut clock = Instant::now();
    let (mut live_ops, mut live_lat, mut live_bytes) = ([0u64; 3], [0u64; 3], [0u64; 3]);
    let mut flush_due = false;
    let mut rewrite = None;
    let mut done_requests = 0u64;
    // `--verify` in mixed modes: whether each unit a read touches had a write
    // completed on it when the read was sent (reused: no allocation per read).
    let mut written_now: Vec<bool> = Vec::new();
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        // `--flush-every`: the Flush the last write made due goes first, before
        // the run-end checks, so every N writes have theirs.
        if std::mem::take(&mut flush_due) && !flush(&sh, qids[1], &mut buf).await {
            break;
        }
        // When this request is meant to go out.
        let intended = match sh.period_ns {
            Some(p) => {
                let n = sh.sched.fetch_add(1, Ordering::Relaxed);
                let t = sh.t0 + Duration::from_nanos((n as f64 * p) as u64);
                if let Some(e) = sh.end.filter(|&e| t >= e) {
                    // Nothing more is due within the run time, but the run still
                    // lasts until its end: leaving now would end the measured
                    // time early (at the last send) and overstate the IOPS.
                    pacer.wait_until(e, stop).await;
                    break;
                }
                if !pacer.wait_until(t, stop).await {
                    break;
                }
                Some(t)
            }
            None => None,
        };
        // Without a schedule, decide with the last completion time: one clock read less per request.
        let start_ref = intended.unwrap_or(clock);
        if sh.end.is_some_and(|e| start_ref >= e) {
            break;
        }
        let measured = start_ref >= sh.measure_start;
        if measured {
            if let Some(c) = sh.count {
                if sh.claimed.fetch_add(1, Ordering::Relaxed) >= c {
                    break;
                }
            }
        }
        // trimwrite: the unit just trimmed is written next.
        let (op, mut unit, mut lba, blocks) = match rewrite.take() {
            Some((unit, lba)) => {
                let blocks = sh.geo.blocks(OpKind::Write, &mut rng);
                (OpKind::Write, unit, sh.geo.fit(lba, blocks), blocks)
            }
            None => sh.pick(&mut rng),
        };
        let zt = sh.zone_target();
        let mut zw = None;
        if let Some(zt) = &zt {
            match zt.place(op, lba, qids[1], &mut rng, stop, sh.end).await {
                Ok(Some((at, w))) => {
                    (lba, unit, zw) = (at, (at - sh.geo.region_lba) / sh.geo.blocks_per_io, w)
                }
                Ok(None) => break,
                Err((what, e)) => {
                    sh.fail(what, &e);
                    break;
                }
            }
        }
        if op == OpKind::Write && sh.verify {
            let generation = sh.gen_base.wrapping_add(sh.gen.fetch_add(1, Ordering::Relaxed));
            pattern::fill(buf.write_data_mut(blocks), sh.block_size, lba, generation);
        }
        // A read of a zone being reset may find zeroes in written units: asked first.
        let epoch =
            zt.as_ref().filter(|_| op == OpKind::Read && sh.written.is_some()).map(|z| z.zones.epoch(lba));
        // Asked before the read is sent: a write completing meanwhile may or may not be seen.
        written_now.clear();
        if let Some(w) = sh.written.as_ref().filter(|_| op == OpKind::Read) {
            written_now.extend(sh.geo.touched_units(lba, blocks).map(|u| w.contains(u)));
        }
        let send = Instant::now();
        // Reads on the read queue, writes and trims on the write queue.
        let qid = qids[(op != OpKind::Read) as usize];
        let r = buf.run_at(&sh.ctrl, qid, op, (sh.nsid, lba, blocks), zt.as_ref().zip(zw.as_ref())).await;
        let done = Instant::now();
        clock = done;
        match r {
            Ok(Some(landed)) => (lba, unit) = (landed, (landed - sh.geo.region_lba) / sh.geo.blocks_per_io),
            Ok(None) => {}
            Err(e) => {
                sh.fail(format!("{} of {} bytes at lba {lba} on queue {qid}", op.as_str(), buf.cur), &e);
                break;
            }
        }
        let zone_kept =
            epoch.is_none_or(|e| e % 2 == 0 && zt.as_ref().is_some_and(|z| z.zones.epoch(lba) == e));
        let lat = done.duration_since(intended.unwrap_or(send)).as_nanos() as u64;
        let bytes = buf.cur as u64;
        let k = op as usize;
        live_ops[k] += 1;
        live_lat[k] += lat;
        live_bytes[k] += bytes;
        sh.live[idx].ops[k].store(live_ops[k], Ordering::Relaxed);
        sh.live[idx].lat_ns[k].store(live_lat[k], Ordering::Relaxed);
        sh.live[idx].bytes[k].store(live_bytes[k], Ordering::Relaxed);
        match op {
            OpKind::Write => {
                out.written_blocks += blocks;
                if let Some(w) = &sh.written {
                    sh.geo.whole_units(lba, blocks).for_each(|u| w.mark(u));
                }
                flush_due = sh
                    .flush_every
                    .is_some_and(|n| (sh.writes_done.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(n));
            }
            OpKind::Read if sh.verify => {
                let written =
                    |i| zone_kept && (sh.written.is_none() || written_now[sh.geo.unit_of_block(lba, i)]);
                let (_, zero) =
                    pattern::check_read(buf.read_data(), sh.block_size, lba, written, |m| sh.mismatch(m));
                out.unwritten_blocks += zero;
                out.checked_blocks += blocks - zero;
            }
            OpKind::Trim if sh.mode == RwMode::Trimwrite => rewrite = Some((unit, lba)),
            OpKind::Read | OpKind::Trim | OpKind::Flush => {}
        }
        // `--thinktime`: the pause after every N of this slot's requests (fio's
        // thinktime_blocks), cut short by the run's end; the next request
        // is measured from its own send.
        if let Some((pause, every)) = sh.thinktime {
            done_requests += 1;
            if done_requests.is_multiple_of(every) {
                let until = done + pause;
                pacer.wait_until(sh.end.map_or(until, |e| until.min(e)), stop).await;
                clock = Instant::now();
            }
        }
        if !measured {
            continue;
        }
        sh.queue_stats[qid as usize - 1].lock().unwrap_or_else(PoisonError::into_inner)[op as usize]
            .record(lat, bytes);
        if let (Some(lag), Some(t)) = (out.lag.as_mut(), intended) {
            lag.record(send.saturating_duration_since(t).as_nanos() as u64, 0);
        }
        // Samples hold reads and writes; interval histograms trims too.
        if let Some(v) = out.samples.get_mut(op as usize).filter(|_| sh.record_samples) {
            v.push(lat);
        }
        if let (Some(h), Some(nb), Some(iv)) = (cur.as_mut(), next_boundary.as_mut(), sh.interval) {
            while done >= *nb {
                if h.iter().any(|h| !h.is_empty()) {
                    out.intervals.push((cur_idx, h.clone()));
                    h.iter_mut().for_each(Histogram::reset);
                }
                cur_idx += 1;
                *nb += iv;
            }
            if let Some(h) = h.get_mut(op as usize) {
                let _ = h.record(lat.max(1));
            }
        }
    }
    if let Some(h) = cur {
        if h.iter().any(|h| !h.is_empty()) {
            out.intervals.push((cur_idx, h));
        }
    }
    out
}

/// Sends the Flush `--flush-every` made due on queue `qid` and records its
/// latency (from its send: it has no place on a `--rate` schedule, and the
/// slot's next request is measured from its own intended time, so the wait
/// shows there too). False when it failed, which ends the run.
async fn flush(sh: &Shared, qid: u16, buf: &mut IoBuf) -> bool {
    let send = Instant::now();
    let r = buf.run(&sh.ctrl, qid, OpKind::Flush, rw_sqe(OpKind::Flush, sh.nsid, 0, 0)).await;
    if let Err(e) = r {
        sh.fail(format!("flush of namespace {} on queue {qid}", sh.nsid), &e);
        return false;
    }
    if send >= sh.measure_start {
        let lat = send.elapsed().as_nanos() as u64;
        sh.queue_stats[qid as usize - 1].lock().unwrap_or_else(PoisonError::into_inner)
            [OpKind::Flush as usize]
            .record(lat, 0);
    }
    true
}

/// Connection options for the probe and the admin tool.
pub fn connect_options(
    io_queues: u16,
    qd: u32,
    digests: bool,
    host: HostIdentity,
    poll_us: u64,
) -> ConnectOptions {
    ConnectOptions {
        host: Some(host),
        io_queues,
        queue_depth: (qd + 1).clamp(2, u16::MAX as u32) as u16,
        hdr_digest: digests,
        data_digest: digests,
        reconnect: ReconnectPolicy::never(),
        max_transfer: None,
        busy_poll: Duration::from_micros(poll_us),
        ..ConnectOptions::default()
    }
}

/// Connects to subsystem `nqn` at `addr`, or to the one subsystem discovery
/// finds there when `nqn` is `None` ([`subsystem_nqn`]); errors say what failed.
/// With `nvme_config` (nvme-cli's `config.json`), what it gives this host
/// for the subsystem and port fills in what `opts` leaves unset
/// ([`with_nvme_config`]).
pub async fn connect(
    addr: &str,
    nqn: Option<&str>,
    opts: ConnectOptions,
    nvme_config: Option<&Path>,
) -> Result<Controller, ToolError> {
    let nqn = &subsystem_nqn(addr, nqn, &opts).await?;
    let opts = match nvme_config {
        Some(path) => with_nvme_config(opts, path, addr, nqn).await?,
        None => opts,
    };
    let host = opts.host.clone();
    Controller::connect(addr, nqn, opts).await.map_err(|e| {
        let mut err = ToolError::from_initiator(&format!("connect to {addr} (subsystem {nqn})"), &e);
        if e.status().is_some_and(|s| s.code() == Status::CONNECT_INVALID_HOST) {
            let h = host.unwrap_or_else(HostIdentity::default_for_host).nqn;
            err.message += &format!("; this host connected as {h} (choose another with --hostnqn)");
        }
        if matches!(e, nvmeof_initiator::Error::Auth { reason: nvmeof_initiator::AuthError::NoKey, .. }) {
            err.message += " (give it with --dhchap-secret)";
        }
        err
    })
}

/// What a discovery connection takes from the connection options of the
/// tool: the host identity, the timeouts, the digests and the socket's
/// source, interface and type of service.
pub fn discovery_options(opts: &ConnectOptions) -> ConnectOptions {
    ConnectOptions {
        host: opts.host.clone(),
        connect_timeout: opts.connect_timeout,
        command_timeout: opts.command_timeout,
        hdr_digest: opts.hdr_digest,
        data_digest: opts.data_digest,
        host_traddr: opts.host_traddr,
        host_iface: opts.host_iface.clone(),
        tos: opts.tos,
        so_priority: opts.so_priority,
        ..ConnectOptions::discovery()
    }
}

/// `opts` for subsystem `nqn` at `addr` with what nvme-cli's `config.json`
/// at `path` gives this host there ([`crate::nvme_config::lookup`]): its
/// DH-HMAC-CHAP keys where `opts` has none (nvme-cli's order: the command
/// line, then the file), digests and TOS added. A missing file is no file;
/// one that cannot be read or parsed is a usage error naming it.
pub async fn with_nvme_config(
    opts: ConnectOptions,
    path: &Path,
    addr: &str,
    nqn: &str,
) -> Result<ConnectOptions, ToolError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(opts),
        Err(e) => {
            return Err(ToolError::usage(format!("{}: {e} (--config none reads none)", path.display())))
        }
    };
    let Some(sock) = tokio::net::lookup_host(addr).await.ok().and_then(|mut a| a.next()) else {
        return Ok(opts);
    };
    let host = opts.host.clone().unwrap_or_else(HostIdentity::default_for_host);
    let found = crate::nvme_config::lookup(&text, &host.nqn, &host.id, nqn, &sock)
        .map_err(|e| ToolError::usage(format!("{}: {e} (--config none reads none)", path.display())))?;
    let Some(s) = found else { return Ok(opts) };
    if opts.dhchap_secret.is_none() && s.dhchap_secret.is_some() {
        tracing::info!(file = %path.display(), subnqn = nqn, "DH-HMAC-CHAP keys from nvme-cli's configuration");
    }
    Ok(ConnectOptions {
        dhchap_ctrl_secret: match opts.dhchap_secret {
            Some(_) => opts.dhchap_ctrl_secret,
            None => opts.dhchap_ctrl_secret.or(s.dhchap_ctrl_secret),
        },
        dhchap_secret: opts.dhchap_secret.or(s.dhchap_secret),
        hdr_digest: opts.hdr_digest || s.hdr_digest,
        data_digest: opts.data_digest || s.data_digest,
        tos: opts.tos.or(s.tos),
        ..opts
    })
}

/// Where the tools' connections come from, with `nvme connect`'s names for
/// these options.
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct SocketArgs {
    /// Source address of every connection, as `nvme connect --host-traddr`
    /// (a host with several addresses picks the one the target sees).
    #[arg(long, global = true, value_name = "ADDR")]
    pub host_traddr: Option<std::net::IpAddr>,
    /// Network interface every connection goes through (SO_BINDTODEVICE),
    /// as `nvme connect --host-iface`.
    #[arg(long, global = true, value_name = "IFACE")]
    pub host_iface: Option<String>,
    /// IP type of service of every connection (IP_TOS, IPV6_TCLASS; 0-255),
    /// as `nvme connect --tos`.
    #[arg(long, global = true, value_name = "TOS")]
    pub tos: Option<u8>,
    /// Socket priority of every connection (SO_PRIORITY: the class tc /
    /// mqprio map to NIC queues; above 6 needs CAP_NET_ADMIN), as the Linux
    /// host's nvme-tcp so_priority.
    #[arg(long, global = true, value_name = "PRIO")]
    pub so_priority: Option<u32>,
    /// nvme-cli's JSON configuration, whose DH-HMAC-CHAP keys (and digests,
    /// TOS) for this host, subsystem and port apply where the command line
    /// gives none, as `nvme connect --config`; `none`: read none.
    #[arg(long = "config", global = true, value_name = "FILE", default_value = crate::nvme_config::DEFAULT_PATH)]
    pub nvme_config: PathBuf,
}

impl SocketArgs {
    /// The nvme-cli JSON configuration to read (none for `--config none`).
    pub fn nvme_config(&self) -> Option<&Path> {
        Some(self.nvme_config.as_path()).filter(|p| !p.as_os_str().is_empty() && p.as_os_str() != "none")
    }

    /// `opts` with these socket options.
    pub fn apply(&self, opts: ConnectOptions) -> ConnectOptions {
        ConnectOptions {
            host_traddr: self.host_traddr,
            host_iface: self.host_iface.clone(),
            tos: self.tos,
            so_priority: self.so_priority,
            ..opts
        }
    }
}

/// The subsystem to connect to at `addr`: `nqn` when given, else the one NVM
/// subsystem the discovery controller there lists (asked with
/// [`discovery_options`] of `opts`), so a target exporting one subsystem needs no
/// `--nqn`. nvmet and `nvmeof-target` serve discovery on their I/O ports;
/// SPDK only where a discovery listener was added (then give `--nqn`).
pub async fn subsystem_nqn(
    addr: &str,
    nqn: Option<&str>,
    opts: &ConnectOptions,
) -> Result<String, ToolError> {
    if let Some(n) = nqn {
        return Ok(n.to_string());
    }
    let log = discover(addr, discovery_options(opts)).await.map_err(|e| {
        ToolError::from_initiator(&format!("discovery at {addr} (to find the subsystem; or give --nqn)"), &e)
    })?;
    let nqn = only_subsystem(&log, addr)?;
    tracing::info!(%addr, subnqn = %nqn, "no --nqn given: the discovery log lists this one subsystem");
    Ok(nqn)
}

/// The one NVM subsystem `log` lists for TCP. Entries for the port of `addr`
/// (`HOST:PORT` or `[IPv6]:PORT`) count first: our target lists every port's subsystems, nvmet only the
/// asked port's (`nvmet_execute_disc_get_log_page`). None is a not-found
/// error, several a usage error naming them.
pub fn only_subsystem(log: &DiscoveryLog, addr: &str) -> Result<String, ToolError> {
    let port = addr.rsplit_once(':').map(|(_, p)| p);
    let mut all: Vec<&str> = Vec::new();
    let mut here: Vec<&str> = Vec::new();
    for e in nvme_subsystems(log) {
        let n = e.subnqn.as_str();
        if !all.contains(&n) {
            all.push(n);
        }
        if Some(e.trsvcid.as_str()) == port && !here.contains(&n) {
            here.push(n);
        }
    }
    let names = if here.is_empty() { all } else { here };
    match names.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(ToolError::not_found(format!(
            "the discovery log at {addr} lists no NVM subsystem for this host (give --nqn)"
        ))),
        many => Err(ToolError::usage(format!(
            "the discovery log at {addr} lists {} subsystems; choose one with --nqn: {}",
            many.len(),
            many.join(", ")
        ))),
    }
}

/// Namespace facts the probe needs.
#[derive(Clone, Copy, Debug)]
pub struct NsInfo {
    /// Block size in bytes.
    pub block_size: u32,
    /// Size in blocks.
    pub blocks: u64,
}

/// Identify Namespace `nsid`; a missing namespace becomes a not-found error listing the active ones.
pub async fn namespace_info(ctrl: &Controller, nsid: u32) -> Result<NsInfo, ToolError> {
    let not_found = |ctrl: &Controller| {
        let ctrl = ctrl.clone();
        async move {
            let list = ctrl.active_namespaces().await.unwrap_or_default();
            let list: Vec<String> = list.iter().map(u32::to_string).collect();
            ToolError::not_found(format!(
                "namespace {nsid} not found in {} (active namespaces: {})",
                ctrl.subnqn(),
                if list.is_empty() { "none".to_string() } else { list.join(", ") }
            ))
        }
    };
    let id = match ctrl.identify_namespace(nsid).await {
        Ok(id) => id,
        Err(e) if e.status().is_some_and(|s| s.code() == Status::INVALID_NS) => {
            return Err(not_found(ctrl).await)
        }
        Err(e) => return Err(ToolError::from_initiator(&format!("Identify Namespace {nsid}"), &e)),
    };
    if id.nsze == 0 {
        return Err(not_found(ctrl).await);
    }
    let block_size = id.block_size().ok_or_else(|| {
        ToolError::new(ErrorKind::Transport, format!("namespace {nsid}: unusable LBA format"))
    })?;
    Ok(NsInfo { block_size, blocks: id.nsze })
}

/// The region and request geometry of a run.
#[derive(Clone)]
struct Geometry {
    block_size: usize,
    region_lba: u64,
    region_bytes: u64,
    /// The region in units of `blocks_per_io` blocks.
    units: u64,
    /// Blocks of a unit: the smallest request (every request, where they
    /// all have one size); random requests start on a unit, as fio aligns
    /// them to its smallest size (`blockalign`).
    blocks_per_io: u64,
    /// Blocks of the largest request.
    max_blocks: u64,
    /// Blocks of each direction's requests (read, write, trim).
    sizes: [SizeTable; 3],
}

impl Geometry {
    /// Whether requests have more than one size (then a sequential run
    /// counts its position in blocks, not units).
    fn varied(&self) -> bool {
        self.max_blocks != self.blocks_per_io
    }

    /// `lba`, moved back where a request of `blocks` would end past the region.
    #[inline]
    fn fit(&self, lba: u64, blocks: u64) -> u64 {
        lba.min(self.region_lba + self.units * self.blocks_per_io - blocks)
    }

    /// The blocks of the next `op` request.
    #[inline]
    fn blocks(&self, op: OpKind, rng: &mut Rng) -> u64 {
        self.sizes[op as usize].pick(|n| rng.below(n))
    }

    /// How far a sequential request of `blocks` moves the position.
    #[inline]
    fn seq_step(&self, blocks: u64) -> u64 {
        if self.varied() {
            blocks
        } else {
            1
        }
    }

    /// The unit and first LBA of the sequential request of `blocks` at
    /// position `pos` (the sum of the steps before it): with one size the
    /// unit after unit, else the next blocks, back at the region's start
    /// where the rest is shorter than the request (fio wraps alike).
    #[inline]
    fn seq_at(&self, pos: u64, blocks: u64) -> (u64, u64) {
        if !self.varied() {
            let unit = pos % self.units;
            return (unit, self.region_lba + unit * self.blocks_per_io);
        }
        let region = self.units * self.blocks_per_io;
        let off = Some(pos % region).filter(|o| o + blocks <= region).unwrap_or(0);
        (off / self.blocks_per_io, self.region_lba + off)
    }

    /// The first LBA of a random request of `blocks` at `unit`.
    #[inline]
    fn random_at(&self, unit: u64, blocks: u64) -> u64 {
        self.fit(self.region_lba + unit * self.blocks_per_io, blocks)
    }

    /// The units a request of `blocks` at `lba` writes whole: what its
    /// completion records (`--verify` in mixed modes). Where every request
    /// has one size, that is the request's unit; with several sizes a request
    /// may end inside a unit (6 KiB over 4 KiB units), which stays unrecorded
    /// until a write covers it whole.
    fn whole_units(&self, lba: u64, blocks: u64) -> std::ops::Range<u64> {
        let start = lba - self.region_lba;
        start.div_ceil(self.blocks_per_io)..(start + blocks) / self.blocks_per_io
    }

    /// The first unit a request at `lba` touches and, for block `i` of it,
    /// the index of that block's unit from the first.
    fn unit_of_block(&self, lba: u64, i: usize) -> usize {
        let start = lba - self.region_lba;
        ((start + i as u64) / self.blocks_per_io - start / self.blocks_per_io) as usize
    }

    /// The units a request of `blocks` at `lba` touches.
    fn touched_units(&self, lba: u64, blocks: u64) -> std::ops::Range<u64> {
        let start = lba - self.region_lba;
        start / self.blocks_per_io..(start + blocks).div_ceil(self.blocks_per_io)
    }
}

fn geometry(opts: &ProbeOptions, ns: NsInfo, max_transfer: Option<u32>) -> Result<Geometry, ToolError> {
    let bsz = ns.block_size as u64;
    let ns_bytes = ns.blocks * bsz;
    let flag = if opts.bssplit.is_some() { "--bssplit" } else { "--bs" };
    let ops = opts.ops();
    for bs in opts.sizes().used(&ops) {
        if !bs.is_multiple_of(bsz) {
            return Err(ToolError::usage(format!(
                "{flag} {bs} is not a multiple of the namespace block size {bsz}"
            )));
        }
        if let Some(m) = max_transfer.filter(|&m| bs > m as u64) {
            return Err(ToolError::usage(format!(
                "{flag} {} exceeds the controller's maximum transfer size {} (MDTS, or MAXH2CDATA without one)",
                util::fmt_bytes(bs),
                util::fmt_bytes(m as u64)
            )));
        }
        if bs / bsz > 1 << 16 {
            return Err(ToolError::usage(format!("{flag} {bs} exceeds 65536 blocks per command")));
        }
    }
    let min_bs = opts.sizes().used(&ops).min().unwrap_or(bsz);
    let max_bs = opts.sizes().used(&ops).max().unwrap_or(bsz);
    let blocks_per_io = min_bs / bsz;
    if !opts.offset.is_multiple_of(bsz) {
        return Err(ToolError::usage(format!(
            "--offset {} is not a multiple of the block size {bsz}",
            opts.offset
        )));
    }
    if opts.offset >= ns_bytes {
        return Err(ToolError::usage(format!(
            "--offset {} is beyond the namespace ({})",
            opts.offset,
            util::fmt_bytes(ns_bytes)
        )));
    }
    let avail = ns_bytes - opts.offset;
    let size = opts.size.unwrap_or(avail);
    if size > avail {
        return Err(ToolError::usage(format!(
            "--offset {} + --size {} is beyond the namespace ({})",
            opts.offset,
            size,
            util::fmt_bytes(ns_bytes)
        )));
    }
    let units = size / min_bs;
    if units == 0 || units * min_bs < max_bs {
        return Err(ToolError::usage(format!(
            "the region ({}) is smaller than one request ({})",
            util::fmt_bytes(size),
            util::fmt_bytes(max_bs)
        )));
    }
    if opts.verify && (ns.block_size as usize) <= pattern::HEADER_LEN {
        return Err(ToolError::usage("--verify needs blocks larger than 24 bytes"));
    }
    Ok(Geometry {
        block_size: ns.block_size as usize,
        region_lba: opts.offset / bsz,
        region_bytes: units * min_bs,
        units,
        blocks_per_io,
        max_blocks: max_bs / bsz,
        sizes: [OpKind::Read, OpKind::Write, OpKind::Trim].map(|op| SizeTable::new(opts.sizes().of(op), bsz)),
    })
}

/// Whether namespace `nsid` is zoned (its Command Set Identifier is the
/// Zoned Namespace command set's); a controller without the descriptor
/// list (CNS 03h) has none.
async fn is_zoned(ctrl: &Controller, nsid: u32) -> bool {
    match ctrl.namespace_id_descriptors(nsid).await {
        Ok(d) => d.iter().any(|d| matches!(d, NsIdDescriptor::Csi(c) if *c == Csi::ZNS)),
        Err(e) => {
            tracing::debug!(error = %e, "no namespace identification descriptors");
            false
        }
    }
}

/// With `--zonemode zbd`: rounds the region to whole zones and plans where
/// writes and reads go. Without it, refuses writes to a zoned namespace:
/// they would fail with Zone Invalid Write.
async fn zone_setup(
    opts: &ProbeOptions,
    ctrl: &Controller,
    g: &mut Geometry,
    write_slots: usize,
    hooks: &Hooks,
) -> Result<Option<Arc<ZonedWrites>>, ToolError> {
    let nsid = opts.nsid;
    if opts.zonemode == ZoneMode::None {
        if opts.rw.writes() && is_zoned(ctrl, nsid).await {
            return Err(ToolError::usage(format!(
                "namespace {nsid} is zoned: writes must go to the zones' write pointers \
                 (use --zonemode zbd, and --zone-append to share zones between writes)"
            )));
        }
        return Ok(None);
    }
    let ns = ctrl
        .namespace(nsid)
        .await
        .map_err(|e| ToolError::from_initiator(&format!("Identify Namespace {nsid}"), &e))?;
    let not_zoned = || ToolError::usage(format!("--zonemode zbd: namespace {nsid} is not zoned"));
    let idz = match ns.identify_zoned().await {
        Ok(z) => z,
        // nvmet and ours refuse the zoned Identify of a conventional namespace.
        Err(e) if e.status().is_some() => return Err(not_zoned()),
        Err(e) => return Err(ToolError::from_initiator(&format!("zoned Identify Namespace {nsid}"), &e)),
    };
    let zone_blocks = idz.zsze.get(ns.identify().lba_format_index()).copied().unwrap_or(0);
    if zone_blocks == 0 {
        return Err(not_zoned());
    }
    let bsz = g.block_size as u64;
    // One request size here (`validate`): the unit.
    let bs = g.blocks_per_io * bsz;
    if !zone_blocks.is_multiple_of(g.blocks_per_io) {
        return Err(ToolError::usage(format!(
            "--bs {bs} does not divide the zone size ({})",
            util::fmt_bytes(zone_blocks * bsz)
        )));
    }
    // Whole zones only, as fio rounds its region in zonemode=zbd.
    let (start, end) = (g.region_lba, g.region_lba + g.region_bytes / bsz);
    let first = start.div_ceil(zone_blocks) * zone_blocks;
    let last = end / zone_blocks * zone_blocks;
    if last <= first {
        return Err(ToolError::usage(format!(
            "--zonemode zbd: the region ({} from byte {}) holds no whole zone of {}",
            util::fmt_bytes(g.region_bytes),
            start * bsz,
            util::fmt_bytes(zone_blocks * bsz)
        )));
    }
    if (first, last) != (start, end) {
        hooks.emit(ProbeEvent::Warning(format!(
            "--zonemode zbd: the region is rounded to whole zones: offset {}, size {}",
            first * bsz,
            util::fmt_bytes((last - first) * bsz)
        )));
    }
    g.region_lba = first;
    g.units = (last - first) / g.blocks_per_io;
    g.region_bytes = g.units * bs;
    if opts.zone_append && write_slots > 0 {
        // ZASL: 2^n minimum memory pages (CAP.MPSMIN), 0 for MDTS.
        let mut buf = [0u8; IDENTIFY_DATA_LEN];
        let mut cmd = IdentifyCmd::new(Cns::CS_CTRL, 0);
        cmd.csi = Csi::ZNS;
        ctrl.identify_raw(cmd, &mut buf)
            .await
            .map_err(|e| ToolError::from_initiator("zoned Identify Controller", &e))?;
        let zasl = IdentifyCtrlZns::decode(&buf)
            .map_err(|e| ToolError::new(ErrorKind::Transport, e.to_string()))?
            .zasl;
        let info = ctrl.info();
        let page = 1u64 << (12 + info.cap.mpsmin());
        let limit = if zasl == 0 { info.max_transfer.map(u64::from) } else { page.checked_shl(zasl as u32) };
        if let Some(l) = limit.filter(|&l| bs > l) {
            return Err(ToolError::usage(format!(
                "--bs {} exceeds the controller's Zone Append size limit ({})",
                util::fmt_bytes(bs),
                util::fmt_bytes(l)
            )));
        }
    }
    let report = ns
        .zones()
        .await
        .map_err(|e| ToolError::from_initiator(&format!("Report Zones of namespace {nsid}"), &e))?;
    let count = ((last - first) / zone_blocks) as usize;
    let mut zones = vec![ZoneStart { cap: 0, written: 0, writable: false, open: false }; count];
    let (mut open_outside, mut active_outside) = (0usize, 0usize);
    for d in &report {
        if (first..last).contains(&d.slba) {
            if let Some(z) = zones.get_mut(((d.slba - first) / zone_blocks) as usize) {
                *z = ZoneStart::from_descriptor(d);
            }
        } else {
            // Zones the run does not touch still count against the limits.
            open_outside += d.state.is_open() as usize;
            active_outside += d.state.is_active() as usize;
        }
    }
    let left =
        |limit: u32, used: usize, what: &str| match (limit as usize).checked_sub(used).filter(|&n| n > 0) {
            Some(n) => Ok(n),
            None => Err(ToolError::usage(format!(
                "namespace {nsid}: its zones outside the region hold all {limit} {what} zones it allows \
             (close or finish some: nvmeof zones ADDR close --all)"
            ))),
        };
    // The limits bound writes only: a run that reads opens nothing.
    let (mar, mor) = match write_slots {
        0 => (None, None),
        _ => (IdentifyNsZns::limit(idz.mar), IdentifyNsZns::limit(idz.mor)),
    };
    let max_active = match mar {
        Some(m) => left(m, active_outside, "active")?,
        None => usize::MAX,
    };
    let mut max_open = write_slots.max(1).min(opts.max_open_zones.map_or(usize::MAX, |n| n as usize));
    if let Some(m) = mor {
        max_open = max_open.min(left(m, open_outside, "open")?);
    }
    let plan = ZonePlan::new(
        first,
        zone_blocks,
        &zones,
        ZonePlanOptions {
            blocks: g.blocks_per_io,
            append: opts.zone_append,
            random: opts.rw.random(),
            max_open,
            max_active,
        },
    );
    if write_slots > 0 && plan.writable() == 0 {
        return Err(ToolError::usage(format!(
            "--zonemode zbd: no zone of the region takes writes of {} (read only, offline or too small)",
            util::fmt_bytes(bs)
        )));
    }
    let max_open = plan.max_open();
    if !opts.zone_append && write_slots > max_open && !opts.ping {
        hooks.emit(ProbeEvent::Warning(format!(
            "--zonemode zbd: {write_slots} requests in flight write to {max_open} zones at a time, one plain \
             Write per zone: use --zone-append to have more writes in flight"
        )));
    }
    Ok(Some(Arc::new(ZonedWrites::new(plan))))
}

/// What a run's report says about the zones it wrote.
fn zone_summary(opts: &ProbeOptions, z: Option<&ZonedWrites>, g: &Geometry) -> Option<ZoneSummary> {
    z.filter(|_| opts.rw.writes()).map(|z| ZoneSummary {
        zone_bytes: z.zone_blocks() * g.block_size as u64,
        zones: z.writable(),
        max_open: z.max_open(),
        append: z.append(),
        resets: z.resets(),
    })
}

fn time_seed() -> u64 {
    let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    (t.as_nanos() as u64) ^ ((std::process::id() as u64) << 40)
}

/// Runs the probe described by `opts` (connects, runs, disconnects).
pub async fn run_probe(opts: &ProbeOptions) -> Result<Report, ToolError> {
    run_probe_with(opts, Hooks::default()).await
}

/// Runs the probe with an event callback and a stop flag. Connection and
/// set-up failures are errors; failures during the run end it early and are
/// in [`Report::error`].
pub async fn run_probe_with(opts: &ProbeOptions, hooks: Hooks) -> Result<Report, ToolError> {
    opts.validate()?;
    let addr = opts.addr();
    let qd = if opts.ping { 1 } else { opts.qd };
    let ctrl =
        connect(&addr, opts.nqn.as_deref(), opts.connect_options(qd), opts.socket.nvme_config()).await?;
    // The report names the subsystem it measured, found or given.
    let opts = &ProbeOptions { nqn: Some(ctrl.subnqn().to_string()), ..opts.clone() };
    let r = run_connected(opts, &addr, &ctrl, hooks).await;
    if let Err(e) = ctrl.shutdown().await {
        tracing::debug!(error = %e, "controller shutdown failed");
    }
    r
}

async fn run_connected(
    opts: &ProbeOptions,
    addr: &str,
    ctrl: &Controller,
    hooks: Hooks,
) -> Result<Report, ToolError> {
    let ns = namespace_info(ctrl, opts.nsid).await?;
    let info = ctrl.info();
    let mut g = geometry(opts, ns, info.max_transfer)?;
    // With write queues: qids 1..=write_queues take the writes, the rest the reads.
    let write_queues = info.write_queues;
    let queues = ctrl.io_queue_count() as u16 - write_queues;
    if queues < opts.queues {
        hooks.emit(ProbeEvent::Warning(format!(
            "the controller granted {queues} I/O queues of the {} asked for",
            opts.queues
        )));
    }
    if opts.write_queues > 0 && write_queues < opts.write_queues {
        hooks.emit(ProbeEvent::Warning(format!(
            "the controller granted {write_queues} write queues of the {} asked for{}",
            opts.write_queues,
            if write_queues == 0 { ": reads and writes share the queues" } else { "" }
        )));
    }
    let per_queue = (info.queue_depth.saturating_sub(1) as u32).max(1);
    if !opts.ping && per_queue < opts.qd {
        hooks.emit(ProbeEvent::Warning(format!(
            "queue depth capped by the controller: {per_queue} in flight per queue, not {}",
            opts.qd
        )));
    }
    // No more slots than the queues hold: extra ones would only wait in the
    // initiator for a free command slot, and that wait would count as latency.
    let qd = if opts.ping { 1 } else { opts.qd.min(per_queue) };
    let slots = qd as usize * queues as usize;
    let zoned = zone_setup(opts, ctrl, &mut g, if opts.rw.writes() { slots } else { 0 }, &hooks).await?;
    if opts.ping {
        return run_ping(opts, addr, ctrl, g, ns, zoned, hooks).await;
    }
    let seed = opts.seed.unwrap_or_else(time_seed);
    let t0 = Instant::now();
    let measure_start = t0 + opts.warmup;
    let end = opts.time_limit().map(|t| measure_start + t);
    let samples_hint = match opts.count {
        Some(c) => (c / slots as u64).saturating_add(16).min(1 << 24) as usize,
        None => 1 << 12,
    };
    let sh = Arc::new(Shared {
        ctrl: ctrl.clone(),
        nsid: opts.nsid,
        block_size: g.block_size,
        geo: g.clone(),
        max_bytes: (g.max_blocks as usize) * g.block_size,
        mode: opts.rw,
        mix: opts.mix as u64,
        picker: UnitPicker::new(opts.random_distribution, g.units, seed),
        t0,
        measure_start,
        end,
        period_ns: opts.rate.map(|r| 1e9 / r as f64),
        count: opts.count,
        claimed: AtomicU64::new(0),
        sched: AtomicU64::new(0),
        seq: AtomicU64::new(0),
        live: (0..slots).map(|_| SlotLive::default()).collect(),
        queue_stats: (0..queues + write_queues)
            .map(|_| Mutex::new([OpStats::new(), OpStats::new(), OpStats::new(), OpStats::new()]))
            .collect(),
        flush_every: opts.flush_every,
        thinktime: opts.thinktime.map(|t| (t, opts.thinktime_blocks)),
        writes_done: AtomicU64::new(0),
        fua: opts.fua,
        verify: opts.verify,
        written: written_units(opts, g.units),
        zoned: zoned.clone(),
        read_beyond_wp: opts.read_beyond_wp,
        gen_base: time_seed().rotate_left(17),
        gen: AtomicU64::new(0),
        hooks: hooks.clone(),
        mismatches: Mutex::new(VerifyStats::default()),
        errors: AtomicU64::new(0),
        error: Mutex::new(None),
        interval: opts.hdr_log.as_ref().map(|_| Duration::from_secs(1)),
        record_samples: opts.record_samples,
        samples_hint,
    });
    let started = SystemTime::now() + opts.warmup;
    let mut tasks = Vec::with_capacity(slots);
    for i in 0..slots {
        let read_qid = write_queues + (i % queues as usize) as u16 + 1;
        let write_qid = if write_queues > 0 { (i % write_queues as usize) as u16 + 1 } else { read_qid };
        let qids = [read_qid, write_qid];
        tasks.push(tokio::spawn(slot(sh.clone(), i, qids, seed.wrapping_add(i as u64 * 0x1000_0001))));
    }
    let done = Arc::new(AtomicBool::new(false));
    let monitor = tokio::spawn(monitor(sh.clone(), done.clone()));
    let mut outs = Vec::with_capacity(slots);
    for t in tasks {
        match t.await {
            Ok(o) => outs.push(o),
            Err(e) => {
                hooks.stop.store(true, Ordering::Relaxed);
                return Err(ToolError::new(ErrorKind::Transport, format!("probe task failed: {e}")));
            }
        }
    }
    let finished = Instant::now();
    done.store(true, Ordering::Relaxed);
    let timeline = monitor.await.unwrap_or_default();
    let runtime = finished.saturating_duration_since(measure_start);
    let mut read = OpStats::new();
    let mut write = OpStats::new();
    let mut trim = OpStats::new();
    let mut sync = OpStats::new();
    let mut lag = sh.period_ns.map(|_| OpStats::new());
    let mut by_idx: std::collections::BTreeMap<u32, [Histogram<u64>; 3]> = Default::default();
    let mut samples = [Vec::new(), Vec::new()];
    let (mut written, mut checked, mut unwritten) = (0, 0, 0);
    for q in &sh.queue_stats {
        let q = q.lock().unwrap_or_else(PoisonError::into_inner);
        read.merge(&q[0]);
        write.merge(&q[1]);
        trim.merge(&q[2]);
        sync.merge(&q[3]);
    }
    for o in outs {
        if let (Some(l), Some(ol)) = (lag.as_mut(), o.lag.as_ref()) {
            l.merge(ol);
        }
        for (i, h) in o.intervals {
            let e = by_idx.entry(i).or_insert_with(|| [new_hist(), new_hist(), new_hist()]);
            for (e, h) in e.iter_mut().zip(&h) {
                let _ = e.add(h);
            }
        }
        if opts.record_samples {
            samples[0].extend_from_slice(&o.samples[0]);
            samples[1].extend_from_slice(&o.samples[1]);
        }
        written += o.written_blocks;
        checked += o.checked_blocks;
        unwritten += o.unwritten_blocks;
    }
    let intervals = by_idx
        .into_iter()
        .map(|(i, [r, w, t])| {
            let start = Duration::from_secs(i as u64);
            let length = runtime.saturating_sub(start).min(Duration::from_secs(1));
            IntervalHists { start, length, read: r, write: w, trim: t }
        })
        .collect();
    let verify = opts.verify.then(|| {
        let mut v = sh.mismatches.lock().unwrap().clone();
        v.written_blocks = written;
        v.checked_blocks = checked;
        v.unwritten_blocks = unwritten;
        v
    });
    let error = sh.error.lock().unwrap().clone();
    Ok(Report {
        opts: opts.clone(),
        addr: addr.to_string(),
        queues,
        write_queues,
        qd,
        block_size: g.block_size as u32,
        region: (g.region_lba * g.block_size as u64, g.region_bytes),
        started,
        runtime,
        read,
        write,
        trim,
        sync,
        sched_lag: lag,
        verify,
        errors: sh.errors.load(Ordering::Relaxed),
        error,
        timeline,
        intervals,
        samples: opts.record_samples.then_some(samples),
        zones: zone_summary(opts, zoned.as_deref(), &g),
    })
}

/// Samples the live counters every second and reports progress.
async fn monitor(sh: Arc<Shared>, done: Arc<AtomicBool>) -> Vec<TimelinePoint> {
    let mut timeline = Vec::new();
    let mut last = [(0u64, 0u64, 0u64); 3];
    let mut last_t = sh.t0;
    let mut next = sh.t0 + Duration::from_secs(1);
    loop {
        // Wake often enough to notice the end quickly.
        while Instant::now() < next && !done.load(Ordering::Relaxed) {
            let rem = next.saturating_duration_since(Instant::now()).min(Duration::from_millis(20));
            tokio::time::sleep(rem).await;
        }
        let now = Instant::now();
        let finished = done.load(Ordering::Relaxed);
        let secs = now.duration_since(last_t).as_secs_f64();
        if finished && secs < 0.2 {
            break;
        }
        let mut cur = [(0u64, 0u64, 0u64); 3];
        for l in sh.live.iter() {
            for (k, c) in cur.iter_mut().enumerate() {
                c.0 += l.ops[k].load(Ordering::Relaxed);
                c.1 += l.lat_ns[k].load(Ordering::Relaxed);
                c.2 += l.bytes[k].load(Ordering::Relaxed);
            }
        }
        let rate = |i: usize| {
            let d_ops = cur[i].0 - last[i].0;
            let d_lat = cur[i].1 - last[i].1;
            let d_bytes = cur[i].2 - last[i].2;
            let mean = if d_ops > 0 { d_lat as f64 / d_ops as f64 } else { 0.0 };
            (d_ops as f64 / secs, d_bytes as f64 / secs, mean)
        };
        let (ri, rb, rl) = rate(0);
        let (wi, wb, wl) = rate(1);
        let (ti, tb, tl) = rate(2);
        let p = TimelinePoint {
            t: now.duration_since(sh.t0).as_secs_f64(),
            secs,
            read_iops: ri,
            write_iops: wi,
            read_bw: rb,
            write_bw: wb,
            read_lat_mean_ns: rl,
            write_lat_mean_ns: wl,
            trim_iops: ti,
            trim_bw: tb,
            trim_lat_mean_ns: tl,
            warmup: last_t < sh.measure_start,
        };
        if !finished {
            sh.hooks.emit(ProbeEvent::Progress(p.clone()));
        }
        timeline.push(p);
        last = cur;
        last_t = now;
        next += Duration::from_secs(1);
        if finished {
            break;
        }
    }
    timeline
}

async fn run_ping(
    opts: &ProbeOptions,
    addr: &str,
    ctrl: &Controller,
    g: Geometry,
    ns: NsInfo,
    zoned: Option<Arc<ZonedWrites>>,
    hooks: Hooks,
) -> Result<Report, ToolError> {
    let interval = opts.interval.unwrap_or(Duration::from_secs(1));
    let seed = opts.seed.unwrap_or_else(time_seed);
    let mut rng = Rng::new(seed);
    let picker = UnitPicker::new(opts.random_distribution, g.units, seed);
    let mut buf = IoBuf::new(g.max_blocks as usize * g.block_size, g.block_size, opts.fua, &mut rng);
    let mut pacer = Pacer::new();
    let t0 = Instant::now();
    let measure_start = t0 + opts.warmup;
    let end = opts.time.map(|t| measure_start + t);
    let started = SystemTime::now() + opts.warmup;
    let mut stats = [OpStats::new(), OpStats::new(), OpStats::new()];
    let mut samples = [Vec::new(), Vec::new()];
    let mut verify = VerifyStats::default();
    let written = written_units(opts, g.units);
    let zt = zoned.as_deref().map(|zones| ZoneTarget {
        zones,
        ctrl,
        nsid: opts.nsid,
        region_lba: g.region_lba,
        blocks_per_io: g.blocks_per_io,
        written: written.as_ref(),
        read_beyond_wp: opts.read_beyond_wp,
    });
    let mut measured = 0u64;
    let mut seq = 0u64;
    // trimwrite: the unit just trimmed, written next.
    let mut rewrite = None;
    let mut written_now: Vec<bool> = Vec::new();
    let mut error = None;
    let gen_base = time_seed().rotate_left(17);
    let mut n = 0u64;
    let mut last_done = t0;
    while !hooks.stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if end.is_some_and(|e| now >= e) || opts.count.is_some_and(|c| measured >= c) {
            break;
        }
        n += 1;
        let rewritten = rewrite.take();
        let op = match opts.rw {
            _ if rewritten.is_some() => OpKind::Write,
            RwMode::Read | RwMode::Randread => OpKind::Read,
            RwMode::Write | RwMode::Randwrite => OpKind::Write,
            RwMode::Trim | RwMode::Randtrim | RwMode::Trimwrite => OpKind::Trim,
            _ if rng.below(100) < opts.mix as u64 => OpKind::Read,
            _ => OpKind::Write,
        };
        let blocks = g.blocks(op, &mut rng);
        let (mut unit, mut lba) = if let Some((u, at)) = rewritten {
            (u, g.fit(at, blocks))
        } else if opts.rw.random() {
            let unit = picker.pick(&mut rng);
            (unit, g.random_at(unit, blocks))
        } else {
            seq += g.seq_step(blocks);
            g.seq_at(seq - g.seq_step(blocks), blocks)
        };
        let mut zw = None;
        if let Some(zt) = &zt {
            match zt.place(op, lba, 1, &mut rng, &hooks.stop, end).await {
                Ok(Some((at, w))) => (lba, unit, zw) = (at, (at - g.region_lba) / g.blocks_per_io, w),
                Ok(None) => break,
                Err((what, e)) => {
                    error = Some(ToolError::from_initiator(&what, &e));
                    break;
                }
            }
        }
        if op == OpKind::Write && opts.verify {
            pattern::fill(buf.write_data_mut(blocks), g.block_size, lba, gen_base.wrapping_add(n));
        }
        let warmup = now < measure_start;
        written_now.clear();
        if let Some(w) = written.as_ref().filter(|_| op == OpKind::Read) {
            written_now.extend(g.touched_units(lba, blocks).map(|u| w.contains(u)));
        }
        let send = Instant::now();
        let r = buf.run_at(ctrl, 1, op, (opts.nsid, lba, blocks), zt.as_ref().zip(zw.as_ref())).await;
        let done = Instant::now();
        match r {
            Ok(Some(landed)) => (lba, unit) = (landed, (landed - g.region_lba) / g.blocks_per_io),
            Ok(None) => {}
            Err(e) => {
                error = Some(ToolError::from_initiator(
                    &format!("{} of {} bytes at lba {lba}", op.as_str(), buf.cur),
                    &e,
                ));
                break;
            }
        }
        last_done = done;
        let lat = done.duration_since(send).as_nanos() as u64;
        if op == OpKind::Trim && opts.rw == RwMode::Trimwrite {
            rewrite = Some((unit, lba));
        }
        if op == OpKind::Write {
            verify.written_blocks += blocks;
            if let Some(w) = &written {
                g.whole_units(lba, blocks).for_each(|u| w.mark(u));
            }
        } else if op == OpKind::Read && opts.verify {
            let was_written = |i| written.is_none() || written_now[g.unit_of_block(lba, i)];
            let (_, zero) = pattern::check_read(buf.read_data(), g.block_size, lba, was_written, |m| {
                verify.mismatches += 1;
                if verify.first.len() < MAX_MISMATCHES_KEPT {
                    verify.first.push(m.clone());
                }
                hooks.emit(ProbeEvent::Mismatch(m));
            });
            verify.unwritten_blocks += zero;
            verify.checked_blocks += blocks - zero;
        }
        let bytes = buf.cur as u64;
        hooks.emit(ProbeEvent::Ping(PingSample { request: n, op, bytes, lba, latency_ns: lat, warmup }));
        if !warmup {
            measured += 1;
            stats[op as usize].record(lat, bytes);
            if let Some(v) = samples.get_mut(op as usize).filter(|_| opts.record_samples) {
                v.push(lat);
            }
        }
        if opts.count.is_some_and(|c| measured >= c) {
            break;
        }
        if !interval.is_zero() {
            let wake = done + interval;
            let wake = end.map_or(wake, |e| wake.min(e));
            pacer.wait_until(wake, &hooks.stop).await;
        }
    }
    let [read, write, trim] = stats;
    Ok(Report {
        opts: opts.clone(),
        addr: addr.to_string(),
        queues: 1,
        write_queues: 0,
        qd: 1,
        block_size: ns.block_size,
        region: (g.region_lba * g.block_size as u64, g.region_bytes),
        started,
        runtime: last_done.saturating_duration_since(measure_start),
        read,
        write,
        trim,
        sync: OpStats::new(),
        sched_lag: None,
        verify: opts.verify.then_some(verify),
        errors: error.is_some() as u64,
        error,
        timeline: Vec::new(),
        intervals: Vec::new(),
        samples: opts.record_samples.then_some(samples),
        zones: zone_summary(opts, zoned.as_deref(), &g),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ExitCode;
    use nvmeof_common::spec::discovery::{DiscoveryLogEntry, SubType, TrType};

    #[test]
    fn only_subsystem_prefers_the_asked_port_and_names_the_choices() {
        let entry = |subtype, trtype, port: &str, nqn: &str| DiscoveryLogEntry {
            subtype,
            trtype,
            trsvcid: port.into(),
            subnqn: nqn.into(),
            traddr: "127.0.0.1".into(),
            ..DiscoveryLogEntry::default()
        };
        let (nvme, tcp) = (SubType::NVME, TrType::TCP);
        let log = DiscoveryLog::new(
            1,
            vec![
                entry(SubType::CURRENT_DISCOVERY, tcp, "4420", "nqn.2014-08.org.nvmexpress.discovery"),
                entry(SubType::REFERRAL, tcp, "4420", "nqn.referral"),
                entry(nvme, TrType::RDMA, "4420", "nqn.rdma"),
                entry(nvme, tcp, "4420", "nqn.a"),
                entry(nvme, tcp, "4421", "nqn.a"),
                entry(nvme, tcp, "4421", "nqn.b"),
            ],
        );
        // Only nqn.a is on the asked port; discovery, referral and RDMA entries never count.
        assert_eq!(only_subsystem(&log, "127.0.0.1:4420").unwrap(), "nqn.a");
        assert_eq!(only_subsystem(&log, "[::1]:4420").unwrap(), "nqn.a");
        let e = only_subsystem(&log, "127.0.0.1:4421").unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage);
        assert!(e.message.contains("2 subsystems") && e.message.contains("nqn.a, nqn.b"), "{e}");
        // No entry for the asked port (another address's log): all of them count.
        let e = only_subsystem(&log, "127.0.0.1:8009").unwrap_err();
        assert!(e.message.contains("nqn.a, nqn.b"), "{e}");
        let log = DiscoveryLog::new(1, vec![entry(nvme, tcp, "4421", "nqn.b")]);
        assert_eq!(only_subsystem(&log, "127.0.0.1:8009").unwrap(), "nqn.b");
        let e = only_subsystem(&DiscoveryLog::new(1, Vec::new()), "127.0.0.1:4420").unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NotFound);
    }

    /// With sizes that are not multiples of the smallest (6 KiB over 4 KiB
    /// units of 512-byte blocks), a write records only the units it covers
    /// whole, and a read maps each of its blocks to the unit it lies in.
    #[test]
    fn verify_units_of_mixed_sizes() {
        let o = ProbeOptions::parse_args([
            "p",
            "x",
            "--rw",
            "randrw",
            "--verify",
            "--bssplit",
            "4k/50:6k/50",
            "--offset",
            "1m",
            "--size",
            "64k",
        ])
        .unwrap();
        o.validate().unwrap();
        let g = geometry(&o, NsInfo { block_size: 512, blocks: 8192 }, None).unwrap();
        assert_eq!((g.region_lba, g.blocks_per_io, g.max_blocks, g.units), (2048, 8, 12, 16));
        // 6 KiB at unit 2: unit 2 whole, half of unit 3.
        assert_eq!(g.whole_units(2048 + 16, 12), 2..3);
        assert_eq!(g.touched_units(2048 + 16, 12), 2..4);
        // 6 KiB from the middle of unit 3 (a sequential run's position): unit 4 only.
        assert_eq!(g.whole_units(2048 + 28, 12), 4..5);
        assert_eq!(g.touched_units(2048 + 28, 12), 3..5);
        assert_eq!(
            (0..12).map(|i| g.unit_of_block(2048 + 28, i)).collect::<Vec<_>>(),
            [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]
        );
        // 4 KiB inside one unit; nothing whole where a request covers none.
        assert_eq!(g.whole_units(2048 + 8, 8), 1..2);
        assert!(g.whole_units(2048 + 4, 6).is_empty());
        // Zoned runs still need one size.
        let z = ProbeOptions::parse_args([
            "p",
            "x",
            "--rw",
            "randwrite",
            "--bssplit",
            "4k/50:8k/50",
            "--zonemode",
            "zbd",
        ]);
        assert!(z.unwrap().validate().is_err());
    }

    #[test]
    fn parses_flags() {
        let o = ProbeOptions::parse_args([
            "nvmeof-probe",
            "10.0.0.1",
            "--nqn",
            "nqn.x",
            "--rw",
            "randrw",
            "--mix",
            "70",
            "--bs",
            "128k",
            "--qd",
            "8",
            "--queues",
            "2",
            "--time",
            "3s",
            "--rate",
            "1000",
            "--warmup",
            "1",
        ])
        .unwrap();
        assert_eq!(o.addr(), "10.0.0.1:4420");
        assert_eq!((o.rw, o.mix, o.single_bs(), o.qd, o.queues), (RwMode::Randrw, 70, Some(128 << 10), 8, 2));
        // Sizes per direction and splits, as fio's bs and bssplit.
        let sizes =
            |a: &[&str]| ProbeOptions::parse_args(["p", "x"].iter().chain(a)).map(|p| (p.validate(), p));
        let (v, p) = sizes(&["--rw", "randread", "--bs", "4k,64k"]).unwrap();
        assert!(v.is_ok());
        assert_eq!((p.single_bs(), p.bs_text().as_str()), (Some(4096), "4 KiB"), "reads only: one size");
        let (v, p) = sizes(&["--rw", "randrw", "--bs", "4k,64k"]).unwrap();
        assert!(v.is_ok());
        assert_eq!((p.single_bs(), p.bs_text().as_str()), (None, "4k,64k"));
        let (v, p) = sizes(&["--rw", "randrw", "--bs", "4k,64k", "--verify"]).unwrap();
        assert!(v.is_ok(), "{p:?}: --verify with several sizes");
        let (v, _) = sizes(&["--rw", "write", "--bssplit", "4k/50:8k/50", "--zonemode", "zbd"]).unwrap();
        assert!(v.unwrap_err().message.contains("one request size"));
        let (v, p) = sizes(&["--rw", "randread", "--bssplit", "4k/60:64k/40"]).unwrap();
        assert!(v.is_ok());
        assert_eq!((p.single_bs(), p.bs_text().as_str()), (None, "4k/60:64k/40"));
        assert!(sizes(&["--bs", "8k", "--bssplit", "4k/100"]).is_err(), "--bs and --bssplit conflict");
        assert!(sizes(&["--bssplit", "4k/50:8k/40"]).is_err());
        assert_eq!(
            (o.time, o.rate, o.warmup),
            (Some(Duration::from_secs(3)), Some(1000), Duration::from_secs(1))
        );
        let c = o.connect_options(8);
        assert_eq!((c.io_queues, c.queue_depth, c.disable_sqflow, c.data_digest), (2, 9, false, false));
        let d = ProbeOptions::parse_args(["p", "x", "--nqn", "n", "--disable-sqflow", "--digests"]).unwrap();
        let c = d.connect_options(1);
        assert!(c.disable_sqflow && c.hdr_digest && c.data_digest);
        assert_eq!(c.send_buffer, ConnectOptions::default().send_buffer);
        let s = ProbeOptions::parse_args(["p", "x", "--nqn", "n", "--send-buffer", "0"]).unwrap();
        assert_eq!(s.connect_options(1).send_buffer, 0, "0: the kernel's autotuning");
        assert_eq!(c.congestion_control, None, "the system's unless asked");
        let cc = ProbeOptions::parse_args(["p", "x", "--nqn", "n", "--congestion", "cubic"]).unwrap();
        assert_eq!(cc.connect_options(1).congestion_control.map(|c| c.to_string()).as_deref(), Some("cubic"));
        assert!(ProbeOptions::parse_args(["p", "x", "--nqn", "n", "--congestion", "not a name"]).is_err());
        // nvme connect's socket options reach every connection, discovery's too.
        let args = [
            "p",
            "x",
            "--host-traddr",
            "127.0.0.2",
            "--host-iface",
            "lo",
            "--tos",
            "40",
            "--so-priority",
            "3",
        ];
        let so = ProbeOptions::parse_args(args).unwrap().connect_options(1);
        for c in [&so, &discovery_options(&so)] {
            assert_eq!(c.host_traddr, Some("127.0.0.2".parse().unwrap()));
            assert_eq!((c.host_iface.as_deref(), c.tos, c.so_priority), (Some("lo"), Some(40), Some(3)));
        }
        let none = ProbeOptions::parse_args(["p", "x"]).unwrap().connect_options(1);
        assert_eq!((none.host_traddr, none.host_iface, none.tos, none.so_priority), (None, None, None, None));
        // The host: this machine's (nvme-cli's where it has one), or as given.
        assert_eq!(none.host, Some(HostIdentity::default_for_host()));
        let id = [
            "p",
            "x",
            "--hostid",
            "746F6F6C-732D-7265-7376-2D6F74686572",
            "--hostnqn",
            "nqn.2014-08.org.example:h",
        ];
        let host = ProbeOptions::parse_args(id).unwrap().connect_options(1).host.unwrap();
        assert_eq!((host.nqn.as_str(), &host.id), ("nqn.2014-08.org.example:h", b"tools-resv-other"));
        assert_eq!(
            discovery_options(&ProbeOptions::parse_args(id).unwrap().connect_options(1)).host,
            Some(host)
        );
        assert!(ProbeOptions::parse_args(["p", "x", "--hostid", "42"]).is_err());
        assert!(ProbeOptions::parse_args(["p", "x", "--tos", "256"]).is_err());
        assert!(ProbeOptions::parse_args(["p", "x", "--host-traddr", "host.example"]).is_err());
        assert!(ProbeOptions::parse_args(["p", "x", "--nqn", "n", "--mix", "101"]).is_err());
        assert!(ProbeOptions::parse_args(["p", "x", "--nqn", "n", "--rw", "readtrim"]).is_err());
        let p = ProbeOptions::parse_args(["p", "x", "--nqn", "n", "--ping", "--qd", "4"]).unwrap();
        assert_eq!(p.validate().unwrap_err().kind, ErrorKind::Usage);
        assert_eq!(
            ProbeOptions::parse_args(["p", "x", "--nqn", "n"]).unwrap().time_limit(),
            Some(Duration::from_secs(10))
        );
    }

    #[test]
    fn stats_exact_moments() {
        let mut s = OpStats::new();
        for v in [100, 200, 300, 400] {
            s.record(v, 4096);
        }
        assert_eq!((s.min(), s.max_ns, s.mean()), (100, 400, 250.0));
        assert!((s.stddev() - 129.0994).abs() < 1e-3);
        assert_eq!(s.percentile(50.0), 200);
    }

    #[test]
    fn rng_below_is_in_range() {
        let mut r = Rng::new(1);
        assert!((0..10_000).all(|_| r.below(7) < 7));
    }
}
