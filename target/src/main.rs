//! `nvmeof-target`: export files, block devices or RAM over NVMe/TCP.

// mimalloc: large (≥128 KiB) I/O buffers would otherwise go through glibc's
// mmap/munmap path and page-fault on every command.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use nvmeof_target::config::{
    check_congestion_control, check_discovery_nqn, check_host_nqn, check_send_buffer, check_subsystem_nqn,
    default_listen, host_keys, parse_referral_address, parse_size, IoEngine, NamespaceConfig,
    NamespaceSource, PortAnaConfig, SubsystemConfig, TargetConfig, DEFAULT_MODEL,
};
use nvmeof_target::core::ana::DEFAULT_ANA_GROUP;
use nvmeof_target::core::qos::QosLimits;
use nvmeof_target::core::zoned::ZoneConfig;
use nvmeof_target::core::{DiscoveryFilter, Limits, Referral};
use nvmeof_target::server::Server;
use nvmeof_target::service;

#[derive(Parser)]
#[command(name = "nvmeof-target", version, about = "User-space NVMe-over-TCP target")]
struct Cli {
    /// Log lines on stderr as text, or as one JSON object each (for a log
    /// shipper: `timestamp`, `level`, `message`, the fields, and the spans
    /// with the connection's `peer`, `qid` and `cntlid`). `RUST_LOG` sets the
    /// level either way.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

/// `--log-format`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Cmd {
    /// Export namespaces (from flags, or from --config).
    Serve(Box<ServeArgs>),
    /// Convert a Linux kernel target (nvmet) configuration saved by
    /// `nvmetcli save` into a --config file (printed; notes on stderr).
    ImportNvmetcli {
        /// The saved configuration.
        #[arg(default_value = nvmeof_target::nvmetcli::DEFAULT_SAVE_FILE)]
        path: PathBuf,
    },
    /// Convert a --config file into the JSON `nvmetcli restore` reads, for the
    /// Linux kernel target (nvmet): printed, notes on stderr on what nvmet
    /// cannot take (RAM or zoned namespaces, keys nvmetcli does not restore).
    /// Serial numbers and namespace UUIDs and NGUIDs are written out, so hosts
    /// see the same subsystems and namespaces.
    ExportNvmetcli {
        /// The configuration file.
        path: PathBuf,
    },
    /// Convert a --config file into SPDK's configuration, as `save_config`
    /// writes it, for `nvmf_tgt --json FILE` (or `rpc.py load_config`): printed,
    /// notes on stderr on what SPDK cannot take. Serial numbers and namespace
    /// UUIDs, NGUIDs and EUI-64s are written out, so hosts see the same
    /// subsystems and namespaces.
    ExportSpdk {
        /// The configuration file.
        path: PathBuf,
        /// Where to write the hosts' DH-HMAC-CHAP keys as SPDK keyring files
        /// (made if missing; each file readable by its owner only). Without
        /// it, hosts with keys are left out.
        #[arg(long)]
        key_dir: Option<PathBuf>,
    },
    /// Convert an SPDK NVMe-oF target configuration saved by SPDK's
    /// `save_config` RPC (`rpc.py save_config`) into a --config file
    /// (printed; notes on stderr). DH-HMAC-CHAP keys are read from the files
    /// its keyring names.
    ImportSpdk {
        /// The saved configuration (JSON).
        path: PathBuf,
    },
    /// Check a --config file before starting or reloading it, changing
    /// nothing: it parses, each namespace's file or device opens, RAM fits,
    /// each listen address is this machine's. Prints what it exports; exit
    /// 0 when it would start, 1 naming each problem, 2 when it does not parse.
    CheckConfig {
        /// The configuration file.
        path: PathBuf,
    },
}

/// "1 port", "2 ports".
fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// `check-config`: the report on stdout, problems on stderr.
fn check_config(path: &Path) -> std::process::ExitCode {
    let cfg = match TargetConfig::from_file(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmeof-target: config {}: {e}", path.display());
            return std::process::ExitCode::from(2);
        }
    };
    let r = nvmeof_target::check::check(&cfg);
    for l in &r.lines {
        println!("{l}");
    }
    for p in &r.problems {
        eprintln!("problem: {p}");
    }
    if r.problems.is_empty() {
        let namespaces: usize = cfg.subsystems.iter().map(|s| s.namespaces.len()).sum();
        println!(
            "{}: OK ({} in {} on {})",
            path.display(),
            count(namespaces, "namespace"),
            count(cfg.subsystems.len(), "subsystem"),
            count(cfg.listen.len(), "port")
        );
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!("{}: {}: it would not start as it is", path.display(), count(r.problems.len(), "problem"));
        std::process::ExitCode::from(1)
    }
}

/// `import-nvmetcli`: the TOML on stdout, each note on stderr; exit 2 when
/// the file cannot be read or converted.
fn import_nvmetcli(path: &Path) -> std::process::ExitCode {
    use nvmeof_target::nvmetcli::{convert, DeviceKind};
    print_converted(path, |json| convert(json, DeviceKind::of))
}

/// `export-nvmetcli`: the JSON on stdout, each note on stderr; exit 2 when
/// the configuration cannot be read.
fn export_nvmetcli(path: &Path) -> std::process::ExitCode {
    use nvmeof_target::nvmetcli::{export, DeviceKind};
    match TargetConfig::from_file(path) {
        Ok(cfg) => {
            let e = export(&cfg, DeviceKind::of);
            for n in &e.notes {
                eprintln!("note: {n}");
            }
            print!("{}", e.json);
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvmeof-target: config {}: {e}", path.display());
            std::process::ExitCode::from(2)
        }
    }
}

/// `export-spdk`: the key files written, the JSON on stdout, each note on
/// stderr; exit 2 when the configuration cannot be read, 1 when a key file
/// cannot be written (nothing printed).
fn export_spdk(path: &Path, key_dir: Option<&Path>) -> std::process::ExitCode {
    let cfg = match TargetConfig::from_file(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmeof-target: config {}: {e}", path.display());
            return std::process::ExitCode::from(2);
        }
    };
    let e = nvmeof_target::spdk::export(&cfg, key_dir);
    if let Err(err) = write_key_files(key_dir, &e.key_files) {
        eprintln!("nvmeof-target: {err}");
        return std::process::ExitCode::from(1);
    }
    for n in &e.notes {
        eprintln!("note: {n}");
    }
    print!("{}", e.json);
    std::process::ExitCode::SUCCESS
}

/// Writes each key file, readable by its owner only (SPDK's file keyring
/// refuses a key file others may read), in `dir` (made, owner-only, if missing).
fn write_key_files(dir: Option<&Path>, files: &[(PathBuf, String)]) -> Result<(), String> {
    use std::io::Write as _;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let (Some(dir), false) = (dir, files.is_empty()) else { return Ok(()) };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("--key-dir {}: {e}", dir.display()))?;
    for (path, secret) in files {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("key file {}: {e}", path.display()))?;
        // An existing file keeps its mode on open: make it owner-only too.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .and_then(|()| f.write_all(secret.as_bytes()))
            .and_then(|()| f.sync_all())
            .map_err(|e| format!("key file {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `import-spdk`: as `import-nvmetcli`, the keyring's key files read here.
fn import_spdk(path: &Path) -> std::process::ExitCode {
    use nvmeof_target::nvmetcli::DeviceKind;
    let read_key = |p: &Path| std::fs::read_to_string(p).map_err(|e| e.to_string());
    print_converted(path, |json| nvmeof_target::spdk::convert(json, DeviceKind::of, read_key))
}

/// Reads `path`, converts it, prints the TOML on stdout and each note on
/// stderr; exit 2 when the file cannot be read or converted.
fn print_converted(
    path: &Path,
    convert: impl FnOnce(&str) -> Result<nvmeof_target::nvmetcli::Converted, String>,
) -> std::process::ExitCode {
    let converted = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|json| convert(&json).map_err(|e| format!("{}: {e}", path.display())));
    match converted {
        Ok(c) => {
            for n in &c.notes {
                eprintln!("note: {n}");
            }
            print!("{}", c.toml);
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nvmeof-target: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML configuration (ports, subsystems, namespaces, allowed hosts); excludes the other export flags.
    #[arg(long, conflicts_with_all = ["file", "size", "ram", "block", "listen", "nqn", "allow_host", "dhchap_secret", "block_size", "read_only", "shared", "reservations", "referral", "discovery_nqn", "discovery_filter", "qos_iops", "qos_bandwidth", "zoned"])]
    config: Option<PathBuf>,
    /// Export this regular file (repeat for several namespaces).
    #[arg(long)]
    file: Vec<PathBuf>,
    /// Create (sparse) or grow each --file to this size, e.g. 10G.
    #[arg(long, value_parser = parse_size, requires = "file")]
    size: Option<u64>,
    /// Export a RAM namespace of this size (repeatable).
    #[arg(long, value_parser = parse_size)]
    ram: Vec<u64>,
    /// Export a block device (repeatable). A writable one is claimed
    /// (O_EXCL): one that is mounted, swap or held by LVM/MD is refused.
    #[arg(long)]
    block: Vec<PathBuf>,
    /// Do not claim the --block devices: export them even while mounted or
    /// held by another driver or program (configuration `exclusive = false`).
    #[arg(long, requires = "block")]
    shared: bool,
    /// Export the --file and --block namespaces read-only: opened for reading
    /// only, write protected for good (hosts see a read-only device; writes
    /// fail with Namespace is Write Protected). Not with --ram or --size.
    #[arg(long, conflicts_with_all = ["ram", "size"])]
    read_only: bool,
    /// Enable persistent reservations on every namespace (Reservation
    /// Register/Acquire/Release/Report; Linux blkpr ioctls, `nvme resv-*`).
    #[arg(long)]
    reservations: bool,
    /// Limit each namespace to this many I/O commands per second, from all
    /// hosts together (configuration `qos_iops`); commands past it wait.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    qos_iops: Option<u64>,
    /// Limit each namespace to this many bytes per second of reads and
    /// writes, e.g. 500M (configuration `qos_bandwidth`); commands past it wait.
    #[arg(long, value_parser = parse_nonzero_size)]
    qos_bandwidth: Option<u64>,
    /// Export every namespace zoned (Zoned Namespace command set, as SPDK's
    /// zoned bdev; configuration `zoned`): Linux hosts see host-managed
    /// zoned block devices. A zone whose blocks hold no data starts Empty,
    /// any other Full.
    #[arg(long)]
    zoned: bool,
    /// Zone size of --zoned namespaces, a power of two; default 64M.
    #[arg(long, value_parser = parse_size, requires = "zoned")]
    zone_size: Option<u64>,
    /// Most zones of a --zoned namespace open at once; default no limit.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), requires = "zoned")]
    max_open_zones: Option<u32>,
    /// Most zones of a --zoned namespace open or closed at once; default no limit.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), requires = "zoned")]
    max_active_zones: Option<u32>,
    /// Listen address (repeatable); default 0.0.0.0:4420.
    #[arg(long)]
    listen: Vec<SocketAddr>,
    /// List another discovery service in the discovery log (a referral, as
    /// nvmet's ports/N/referrals): IP:PORT, e.g. 192.0.2.10:8009 (repeatable).
    /// `nvme connect-all` goes on to it and connects to what it lists too.
    #[arg(long, value_name = "IP:PORT", value_parser = parse_referral_address)]
    referral: Vec<SocketAddr>,
    /// A unique NQN for the discovery subsystem (nvmet's discovery_nqn), e.g.
    /// nqn.2026-11.io.nvmeof:discovery: its Identify and the discovery log's own
    /// entry carry it, and hosts may connect by it (`nvme discover --nqn ...`)
    /// as by the well-known nqn.2014-08.org.nvmexpress.discovery.
    #[arg(long, value_name = "NQN")]
    discovery_nqn: Option<String>,
    /// Which ports the discovery log lists to a host (SPDK's
    /// discovery_filter): match_any (default: every --listen address), or
    /// any of transport, address, svcid, comma-separated, for only the
    /// ports with the address / TCP port the host asked on. address,svcid
    /// lists the asking port only, as the Linux kernel target does.
    #[arg(long, value_name = "FILTER", value_parser = |s: &str| s.parse::<DiscoveryFilter>())]
    discovery_filter: Option<DiscoveryFilter>,
    /// Subsystem NQN; default derived from the host name.
    #[arg(long)]
    nqn: Option<String>,
    /// Allow only this host NQN (repeatable); default any host.
    #[arg(long = "allow-host")]
    allow_host: Vec<String>,
    /// DH-HMAC-CHAP: the allowed hosts must authenticate with this secret
    /// (`DHHC-1:..`, from `nvme gen-dhchap-key` or `nvmeof gen-dhchap-key`).
    #[arg(long, value_name = "SECRET", requires = "allow_host")]
    dhchap_secret: Option<String>,
    /// DH-HMAC-CHAP: the controller's secret, for hosts that ask the target to
    /// authenticate too (bidirectional).
    #[arg(long, value_name = "SECRET", requires = "dhchap_secret")]
    dhchap_ctrl_secret: Option<String>,
    /// DH-HMAC-CHAP hash offered first: sha256 (default), sha384, sha512.
    #[arg(long, value_name = "HASH", requires = "dhchap_secret")]
    dhchap_hash: Option<String>,
    /// DH-HMAC-CHAP Diffie-Hellman group offered first: null (default),
    /// ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192.
    #[arg(long, value_name = "GROUP", requires = "dhchap_secret")]
    dhchap_dhgroup: Option<String>,
    /// Logical block size of file and RAM namespaces.
    #[arg(long, default_value_t = 512)]
    block_size: u32,
    /// Busy-poll sockets for this many µs after activity (trades CPU for latency).
    #[arg(long)]
    poll_us: Option<u64>,
    /// Serve Prometheus metrics (GET /metrics: per-namespace commands and bytes,
    /// controllers, I/O queues, connections) on this address, e.g. 127.0.0.1:9464;
    /// overrides the configuration's `[metrics] listen`. Default: none.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// SO_SNDBUF of each connection in bytes; 0 leaves it to the kernel's
    /// autotuning. Default: a quarter of the per-core L2 cache, 256 KiB to
    /// 1 MiB (keeps data in flight cache-resident; raise it, or use 0, for links
    /// whose bandwidth × round trip exceeds twice this). Overrides the configuration file.
    #[arg(long)]
    send_buffer: Option<usize>,
    /// TCP congestion control of each connection (e.g. cubic), as iperf3's
    /// --congestion; default: the system's (net.ipv4.tcp_congestion_control).
    /// On loopback BBR's pacing makes transfers with data digests vary from
    /// run to run. Overrides the configuration file.
    #[arg(long, value_name = "ALGO")]
    congestion: Option<String>,
    /// SO_PRIORITY of each connection and listener (nvmet-tcp's so_priority):
    /// the queueing class tc / mqprio map to NIC queues and DCB priorities;
    /// above 6 needs CAP_NET_ADMIN. Default 0 (none). Overrides the configuration file.
    #[arg(long, value_name = "PRIO")]
    so_priority: Option<u32>,
    /// Worker threads (cores) serving connections, 1 to 1024; default: one per CPU.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: Option<u32>,
    /// I/O engine of file and block namespaces: threads, uring, or auto (io_uring
    /// if available, else threads); overrides the configuration file. Default: auto.
    #[arg(long)]
    io_engine: Option<IoEngine>,
    /// File namespaces through the page cache (true, the default) or with
    /// O_DIRECT where the filesystem allows it (false; io_uring engine only),
    /// like nvmet's buffered_io; overrides the configuration file. Block
    /// devices always use O_DIRECT.
    #[arg(long)]
    buffered_io: Option<bool>,
    /// Most in-capsule write data on I/O queues in bytes (IOCCSZ); larger writes
    /// use R2T. Default 131072; nvmet's default is 16384. Overrides the configuration file.
    #[arg(long)]
    in_capsule_data: Option<u32>,
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn parse_nonzero_size(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err("must be at least 1".into()),
        n => Ok(n),
    }
}

/// The rate limits every namespace given by flags gets.
fn qos(a: &ServeArgs) -> QosLimits {
    QosLimits { iops: a.qos_iops, bytes_per_sec: a.qos_bandwidth }
}

/// The zones every namespace given by flags gets, with `--zoned`.
fn zoned(a: &ServeArgs) -> Option<ZoneConfig> {
    a.zoned.then(|| ZoneConfig {
        zone_size: a.zone_size.unwrap_or(ZoneConfig::default().zone_size),
        max_open: a.max_open_zones,
        max_active: a.max_active_zones,
    })
}

fn config_from_flags(a: &ServeArgs) -> Result<TargetConfig, String> {
    if let Some(z) = zoned(a) {
        // The flags are the configuration keys: `zone_size` is --zone-size.
        z.check(a.block_size as u64).map_err(|(key, why)| format!("--{}: {why}", key.replace('_', "-")))?;
    }
    let mut nss = Vec::new();
    for f in &a.file {
        nss.push(NamespaceConfig {
            nsid: None,
            source: NamespaceSource::File {
                path: f.clone(),
                size: a.size,
                io_engine: a.io_engine.unwrap_or(IoEngine::FILE_DEFAULT),
                buffered_io: true,
            },
            block_size: a.block_size,
            read_only: a.read_only,
            ana_group: DEFAULT_ANA_GROUP,
            ids: Default::default(),
            reservations: a.reservations,
            reservations_file: None,
            reservations_format: Default::default(),
            hosts: None,
            qos: qos(a),
            zoned: zoned(a),
            zone_state_file: None,
        });
    }
    for r in &a.ram {
        nss.push(NamespaceConfig {
            nsid: None,
            source: NamespaceSource::Ram(*r),
            block_size: a.block_size,
            read_only: false,
            ana_group: DEFAULT_ANA_GROUP,
            ids: Default::default(),
            reservations: a.reservations,
            reservations_file: None,
            reservations_format: Default::default(),
            hosts: None,
            qos: qos(a),
            zoned: zoned(a),
            zone_state_file: None,
        });
    }
    for b in &a.block {
        let source = NamespaceSource::Block {
            path: b.clone(),
            io_engine: a.io_engine.unwrap_or(IoEngine::BLOCK_DEFAULT),
            exclusive: !a.shared,
        };
        nss.push(NamespaceConfig {
            nsid: None,
            source,
            block_size: 512,
            read_only: a.read_only,
            ana_group: DEFAULT_ANA_GROUP,
            ids: Default::default(),
            reservations: a.reservations,
            reservations_file: None,
            reservations_format: Default::default(),
            hosts: None,
            qos: qos(a),
            zoned: zoned(a),
            zone_state_file: None,
        });
    }
    if nss.is_empty() {
        return Err("nothing to export: give --file, --ram, --block or --config".into());
    }
    for ns in &nss {
        // The flags are the configuration keys: `block_size` is --block-size.
        ns.check_size().map_err(|(key, e)| format!("--{}: {e}", key.replace('_', "-")))?;
    }
    let nqn = a.nqn.clone().unwrap_or_else(|| format!("nqn.2026-11.io.nvmeof:{}", hostname()));
    check_subsystem_nqn(&nqn).map_err(|e| format!("--nqn: {e}"))?;
    if let Some(d) = &a.discovery_nqn {
        check_discovery_nqn(d).map_err(|e| format!("--discovery-nqn: {e}"))?;
        if *d == nqn {
            return Err(format!("--discovery-nqn {d}: the subsystem's NQN (--nqn) too"));
        }
    }
    for h in &a.allow_host {
        check_host_nqn(h).map_err(|e| format!("--allow-host {h:?}: {e}"))?;
    }
    let keys = host_keys(
        a.dhchap_secret.as_deref(),
        a.dhchap_ctrl_secret.as_deref(),
        a.dhchap_hash.as_deref(),
        a.dhchap_dhgroup.as_deref(),
    )
    .map_err(|(key, e)| {
        // The configuration keys' flags (the secrets are "secret" on the
        // command line, as nvme-cli's).
        let flag = match key {
            "dhchap_key" => "--dhchap-secret",
            "dhchap_ctrl_key" => "--dhchap-ctrl-secret",
            "dhchap_hash" => "--dhchap-hash",
            _ => "--dhchap-dhgroup",
        };
        format!("{flag}: {e}")
    })?;
    let host_keys =
        keys.map(|k| a.allow_host.iter().map(|h| (h.clone(), k.clone())).collect()).unwrap_or_default();
    let listen = if a.listen.is_empty() { vec![default_listen()] } else { a.listen.clone() };
    if let Some((i, r)) = a.referral.iter().enumerate().find(|(i, r)| a.referral[..*i].contains(r)) {
        return Err(format!("--referral {r}: given twice (the {} time)", i + 1));
    }
    Ok(TargetConfig {
        port_ana: vec![PortAnaConfig::default(); listen.len()],
        port_ids: Vec::new(),
        port_params: Vec::new(),
        listen,
        subsystems: vec![SubsystemConfig {
            nqn,
            model: DEFAULT_MODEL.into(),
            serial: None,
            firmware: None,
            ieee_oui: None,
            allowed_hosts: (!a.allow_host.is_empty()).then(|| a.allow_host.clone()),
            host_keys,
            namespaces: nss,
            cntlids: nvmeof_target::core::target::CNTLID_RANGE,
            ports: None,
            max_io_queues: None,
        }],
        limits: Limits::default(),
        poll_us: a.poll_us.unwrap_or(0),
        send_buffer: nvmeof_net::default_send_buffer(),
        congestion_control: None,
        so_priority: 0,
        referrals: a.referral.iter().map(|&addr| Referral::new(addr, 0)).collect(),
        metrics_listen: None,
        discovery_nqn: a.discovery_nqn.clone(),
        discovery_filter: a.discovery_filter.unwrap_or_default(),
    })
}

/// The command-line settings that override the configuration: `--poll-us`, `--metrics-listen`,
/// `--send-buffer`, `--congestion`, `--so-priority`, `--io-engine`,
/// `--buffered-io` (then checked together) and `--in-capsule-data`.
fn apply_overrides(cfg: &mut TargetConfig, a: &ServeArgs) -> Result<(), String> {
    if let Some(p) = a.poll_us {
        cfg.poll_us = p;
    }
    if let Some(m) = a.metrics_listen {
        cfg.metrics_listen = Some(m);
    }
    if let Some(b) = a.send_buffer {
        check_send_buffer(b).map_err(|e| format!("--send-buffer: {e}"))?;
        cfg.send_buffer = b;
    }
    if let Some(c) = &a.congestion {
        cfg.congestion_control = Some(check_congestion_control(c).map_err(|e| format!("--congestion: {e}"))?);
    }
    if let Some(p) = a.so_priority {
        cfg.so_priority = p;
    }
    if let Some(e) = a.io_engine {
        cfg.set_io_engine(e);
    }
    if let Some(b) = a.buffered_io {
        cfg.set_buffered_io(b);
    }
    cfg.check_engines()?;
    if let Some(v) = a.in_capsule_data {
        cfg.limits.set_in_capsule_data(v).map_err(|e| format!("--in-capsule-data: {e}"))?;
    }
    Ok(())
}

/// Reads `--config` with the command-line overrides applied: at startup and
/// again on each SIGHUP, so that a namespace a reload adds gets the
/// `--io-engine` / `--buffered-io` the command line chose (a reload used the
/// file alone, so `--io-engine threads` did not reach namespaces it added).
fn config_from_file(path: &std::path::Path, a: &ServeArgs) -> Result<TargetConfig, String> {
    let mut cfg = TargetConfig::from_file(path).map_err(|e| format!("config {}: {e}", path.display()))?;
    apply_overrides(&mut cfg, a)?;
    Ok(cfg)
}

/// The nvme-cli commands that reach each subsystem through each bound
/// address. A subsystem with allowed hosts gets one pair per host, with
/// `--hostnqn`: nvme-cli otherwise sends /etc/nvme/hostnqn, which the
/// subsystem refuses (and the discovery log omits it for) unless it is listed.
fn host_commands(cfg: &TargetConfig, addrs: &[SocketAddr]) -> Vec<String> {
    let mut lines = Vec::new();
    for s in &cfg.subsystems {
        let hosts: Vec<Option<&str>> = match &s.allowed_hosts {
            Some(h) => h.iter().map(|h| Some(h.as_str())).collect(),
            None => vec![None],
        };
        // Listening on both wildcards (0.0.0.0 and ::) on one port makes the
        // same "<this-host-ip>" lines: printed once.
        let mut shown: Vec<(String, u16)> = Vec::new();
        // The i-th address is port `cfg.port_id(i)`; a subsystem with
        // `ports` is reached through those only.
        let on_port = |i: usize| s.ports.as_ref().is_none_or(|p| p.contains(&cfg.port_id(i)));
        for (_, a) in addrs.iter().enumerate().filter(|&(i, _)| on_port(i)) {
            let ip = if a.ip().is_unspecified() { "<this-host-ip>".to_string() } else { a.ip().to_string() };
            if shown.contains(&(ip.clone(), a.port())) {
                continue;
            }
            shown.push((ip.clone(), a.port()));
            lines.push("On a Linux host (nvme-cli):".to_string());
            for h in &hosts {
                let q = h.map(|h| format!(" --hostnqn {h}")).unwrap_or_default();
                // Discovery needs no authentication (nvmet_setup_auth skips the
                // discovery subsystem). The secrets themselves are not printed:
                // logs are not the place for them.
                let auth = match h.and_then(|h| s.host_keys.get(h)) {
                    Some(k) if k.ctrl_key.is_some() => {
                        " --dhchap-secret <host secret> --dhchap-ctrl-secret <controller secret>"
                    }
                    Some(_) => " --dhchap-secret <host secret>",
                    None => "",
                };
                lines.push(format!("  nvme discover -t tcp -a {ip} -s {}{q}", a.port()));
                lines.push(format!("  nvme connect -t tcp -a {ip} -s {} -n {}{q}{auth}", a.port(), s.nqn));
            }
        }
    }
    lines
}

/// The service manager's STATUS line of a running target: what it exports
/// where (`systemctl status` shows it).
fn serving_status(server: &Server) -> String {
    let subsystems = server.target.subsystems();
    let namespaces: usize = subsystems.iter().map(|s| s.namespaces().len()).sum();
    let ports: Vec<String> = server.listening().iter().map(|a| a.to_string()).collect();
    format!(
        "serving {} in {} on {}",
        count(namespaces, "namespace"),
        count(subsystems.len(), "subsystem"),
        ports.join(", ")
    )
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr);
    match cli.log_format {
        // Colour codes only on a terminal: not in a log file or the journal.
        LogFormat::Text => logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init(),
        // The event's fields at the top, each span's fields in `spans`.
        LogFormat::Json => {
            logs.json().flatten_event(true).with_span_list(true).with_current_span(false).init()
        }
    }
    let args = match cli.cmd {
        Cmd::Serve(args) => *args,
        Cmd::ImportNvmetcli { path } => return import_nvmetcli(&path),
        Cmd::ImportSpdk { path } => return import_spdk(&path),
        Cmd::ExportNvmetcli { path } => return export_nvmetcli(&path),
        Cmd::ExportSpdk { path, key_dir } => return export_spdk(&path, key_dir.as_deref()),
        Cmd::CheckConfig { path } => return check_config(&path),
    };
    let cfg = match &args.config {
        Some(p) => config_from_file(p, &args),
        None => config_from_flags(&args).and_then(|mut c| apply_overrides(&mut c, &args).map(|()| c)),
    };
    let cfg = match cfg {
        Ok(c) => c,
        Err(e) => {
            eprintln!("nvmeof-target: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n as usize);
    }
    let rt = rt.thread_name("nvmeof-target").enable_all().build().expect("tokio runtime");
    rt.block_on(async move {
        // The handlers are installed once, before startup: a signal that
        // arrives while a namespace opens or a reload runs is kept for the
        // loop below. `tokio::signal::ctrl_c()` made afresh on each pass lost
        // a SIGINT sent during a reload (the target kept running), and a
        // SIGHUP during startup ended the process (its default action).
        use tokio::signal::unix::{signal, SignalKind};
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
        let server = match Server::start(&cfg).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("nvmeof-target: {e}");
                return std::process::ExitCode::from(1);
            }
        };
        for l in host_commands(&cfg, &server.local_addrs) {
            println!("{l}");
        }
        if let Some(m) = server.metrics_addr {
            println!("Prometheus metrics: http://{m}{}", nvmeof_target::metrics::METRICS_PATH);
        }
        // Ready only now: every port listens and every namespace is open, so
        // units ordered after this one can connect (Type=notify).
        service::ready(&serving_status(&server));
        if let Some(every) = service::watchdog_interval() {
            service::spawn_watchdog(every);
        }
        loop {
            tokio::select! {
                _ = int.recv() => break,
                _ = term.recv() => break,
                _ = hup.recv() => {
                    // Reload the configuration file: add/remove/resize namespaces live.
                    // RELOADING=1 before, READY=1 after, also when nothing
                    // is reloaded: `systemctl reload` waits for READY.
                    service::reloading();
                    let Some(path) = &args.config else {
                        tracing::warn!("SIGHUP ignored: no --config file to reload");
                        service::ready(&format!("{}; SIGHUP ignored: no --config file", serving_status(&server)));
                        continue;
                    };
                    match config_from_file(path, &args)
                        .and_then(|c| server.reload(&c).map_err(|e| e.to_string())) {
                        Ok(()) => {
                            tracing::info!(config = %path.display(), "configuration reloaded");
                            service::ready(&serving_status(&server));
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "reload failed");
                            service::ready(&format!("{}; last reload failed: {e}", serving_status(&server)));
                        }
                    }
                }
            }
        }
        tracing::info!(
            "signal received: stopping (a second SIGINT or SIGTERM stops without waiting for hosts)"
        );
        let open = server.target.connection_count();
        service::stopping(&format!(
            "stopping: completing the commands of {open} connection{}",
            if open == 1 { "" } else { "s" }
        ));
        let again = async {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        };
        server.shutdown_or(Duration::from_secs(10), again).await;
        std::process::ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(args: &[&str]) -> Result<ServeArgs, String> {
        let cli =
            Cli::try_parse_from(["nvmeof-target", "serve"].iter().chain(args)).map_err(|e| e.to_string())?;
        match cli.cmd {
            Cmd::Serve(a) => Ok(*a),
            Cmd::ImportNvmetcli { .. }
            | Cmd::ImportSpdk { .. }
            | Cmd::ExportNvmetcli { .. }
            | Cmd::ExportSpdk { .. }
            | Cmd::CheckConfig { .. } => Err("not serve".into()),
        }
    }

    fn flags(a: &[&str]) -> Result<TargetConfig, String> {
        config_from_flags(&args(a)?)
    }

    /// What SIGHUP reloads carries the command-line overrides, like startup.
    #[test]
    fn config_file_reads_apply_the_command_line_overrides() {
        let path = std::env::temp_dir().join(format!("nvmeof-main-config-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[[subsystem]]\nnqn = \"nqn.2026-11.io.nvmeof:x\"\n\n[[subsystem.namespace]]\n\
             file = \"/var/tmp/x.img\"\nbuffered_io = false\n",
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let engine = |c: &TargetConfig| match &c.subsystems[0].namespaces[0].source {
            NamespaceSource::File { io_engine, buffered_io, .. } => (*io_engine, *buffered_io),
            _ => unreachable!(),
        };
        let a = args(&["--config", p, "--io-engine", "uring", "--buffered-io", "true"]).unwrap();
        let c = config_from_file(&path, &a).unwrap();
        assert_eq!(engine(&c), (IoEngine::Uring, true));
        // The overrides are checked together: O_DIRECT needs io_uring.
        let a = args(&["--config", p, "--io-engine", "threads"]).unwrap();
        let e = config_from_file(&path, &a).unwrap_err();
        assert!(e.contains("buffered_io"), "{e}");
        let a = args(&["--config", p]).unwrap();
        assert_eq!(engine(&config_from_file(&path, &a).unwrap()), (IoEngine::Auto, false));
        let a = args(&["--config", p, "--send-buffer", "1048576"]).unwrap();
        assert_eq!(config_from_file(&path, &a).unwrap().send_buffer, 1 << 20);
        assert_eq!(config_from_file(&path, &args(&["--config", p]).unwrap()).unwrap().metrics_listen, None);
        let a = args(&["--config", p, "--metrics-listen", "127.0.0.1:9464"]).unwrap();
        assert_eq!(
            config_from_file(&path, &a).unwrap().metrics_listen,
            Some("127.0.0.1:9464".parse().unwrap())
        );
        let _ = std::fs::remove_file(&path);
    }

    /// `--config` refuses every export flag: `--allow-host`, `--size` and
    /// `--block-size` were silently ignored (an --allow-host beside --config
    /// left the subsystem open to any host). `--size` needs `--file`.
    #[test]
    fn config_refuses_the_export_flags() {
        for extra in [
            &["--allow-host", "nqn.2026-11.x:h"][..],
            &["--size", "1G"],
            &["--block-size", "4096"],
            &["--file", "/x"],
            &["--ram", "1M"],
            &["--listen", "127.0.0.1:4420"],
            &["--nqn", "nqn.2026-11.x:y"],
            &["--read-only"],
        ] {
            let e = args(&[&["--config", "/x.toml"][..], extra].concat()).err();
            assert!(e.as_deref().is_some_and(|e| e.contains("cannot be used with")), "{extra:?}: {e:?}");
        }
        // The overrides combine with it.
        assert!(args(&["--config", "/x.toml", "--io-engine", "threads", "--threads", "2"]).is_ok());
        let e = args(&["--ram", "1M", "--size", "1G"]).err().unwrap_or_default();
        assert!(e.contains("--file"), "{e}");
    }

    /// `--read-only` marks the file and block namespaces; RAM and `--size`
    /// (which creates or grows the file) are refused with it.
    #[test]
    fn reservations_flag() {
        let c = flags(&["--file", "/x.img", "--ram", "1M", "--reservations"]).unwrap();
        assert!(c.subsystems[0].namespaces.iter().all(|n| n.reservations));
        assert!(flags(&["--ram", "1M"]).unwrap().subsystems[0].namespaces.iter().all(|n| !n.reservations));
        assert!(args(&["--config", "/x.toml", "--reservations"]).is_err());
    }

    #[test]
    fn qos_flags() {
        let c = flags(&["--file", "/x.img", "--ram", "1M", "--qos-iops", "500", "--qos-bandwidth", "10M"])
            .unwrap();
        let want = QosLimits { iops: Some(500), bytes_per_sec: Some(10 << 20) };
        assert!(c.subsystems[0].namespaces.iter().all(|n| n.qos == want));
        assert!(flags(&["--ram", "1M"]).unwrap().subsystems[0].namespaces.iter().all(|n| !n.qos.any()));
        assert!(args(&["--ram", "1M", "--qos-iops", "0"]).is_err());
        assert!(args(&["--ram", "1M", "--qos-bandwidth", "0"]).is_err());
        assert!(args(&["--config", "/x.toml", "--qos-iops", "5"]).is_err());
    }

    #[test]
    fn zoned_flags() {
        let c = flags(&[
            "--ram",
            "4M",
            "--file",
            "/x.img",
            "--zoned",
            "--zone-size",
            "1M",
            "--max-open-zones",
            "2",
        ])
        .unwrap();
        let want = ZoneConfig { zone_size: 1 << 20, max_open: Some(2), max_active: None };
        assert!(c.subsystems[0].namespaces.iter().all(|n| n.zoned == Some(want)));
        let c = flags(&["--ram", "4M", "--zoned"]).unwrap();
        assert_eq!(c.subsystems[0].namespaces[0].zoned, Some(ZoneConfig::default()));
        assert!(flags(&["--ram", "4M"]).unwrap().subsystems[0].namespaces[0].zoned.is_none());
        let e = flags(&["--ram", "4M", "--zoned", "--zone-size", "3M"]).unwrap_err();
        assert!(e.contains("--zone-size") && e.contains("power of two"), "{e}");
        let e = flags(&["--ram", "4M", "--zoned", "--max-open-zones", "4", "--max-active-zones", "2"])
            .unwrap_err();
        assert!(e.contains("--max-open-zones"), "{e}");
        assert!(args(&["--ram", "4M", "--zone-size", "1M"]).is_err());
        assert!(args(&["--ram", "4M", "--zoned", "--max-open-zones", "0"]).is_err());
        assert!(args(&["--config", "/x.toml", "--zoned"]).is_err());
    }

    #[test]
    fn shared_flag() {
        let exclusive = |a: &[&str]| {
            flags(a).unwrap().subsystems[0]
                .namespaces
                .iter()
                .map(|n| match &n.source {
                    NamespaceSource::Block { exclusive, .. } => *exclusive,
                    _ => panic!("not a block namespace"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(exclusive(&["--block", "/dev/x", "--block", "/dev/y"]), [true, true]);
        assert_eq!(exclusive(&["--block", "/dev/x", "--block", "/dev/y", "--shared"]), [false, false]);
        assert!(args(&["--ram", "1M", "--shared"]).is_err(), "--shared needs --block");
        assert!(args(&["--config", "/x.toml", "--shared"]).is_err());
    }

    #[test]
    fn read_only_flag() {
        let c = flags(&["--file", "/x.img", "--block", "/dev/x", "--read-only"]).unwrap();
        assert!(c.subsystems[0].namespaces.iter().all(|n| n.read_only));
        assert!(flags(&["--file", "/x.img"]).unwrap().subsystems[0].namespaces.iter().all(|n| !n.read_only));
        for bad in [&["--ram", "1M", "--read-only"][..], &["--file", "/x.img", "--size", "1G", "--read-only"]]
        {
            let e = args(bad).err();
            assert!(e.as_deref().is_some_and(|e| e.contains("cannot be used with")), "{bad:?}: {e:?}");
        }
    }

    /// `--referral IP:PORT`, repeatable, each once; not with `--config`
    /// (whose `[[referral]]` tables say it).
    #[test]
    fn referral_flag() {
        let c = flags(&["--ram", "1M", "--referral", "192.0.2.10:8009", "--referral", "[::1]:4420"]).unwrap();
        let want: Vec<SocketAddr> = vec!["192.0.2.10:8009".parse().unwrap(), "[::1]:4420".parse().unwrap()];
        assert_eq!(
            c.referrals.iter().map(|r| (r.addr, r.portid)).collect::<Vec<_>>(),
            [(want[0], 0), (want[1], 0)]
        );
        assert!(flags(&["--ram", "1M"]).unwrap().referrals.is_empty());
        let e = flags(&["--ram", "1M", "--referral", "192.0.2.10:8009", "--referral", "192.0.2.10:8009"])
            .unwrap_err();
        assert!(e.contains("--referral 192.0.2.10:8009: given twice"), "{e}");
        for bad in ["192.0.2.10", "[::]:4420", "host.example:8009"] {
            assert!(args(&["--ram", "1M", "--referral", bad]).is_err(), "{bad}");
        }
        let e = args(&["--config", "/x.toml", "--referral", "192.0.2.10:8009"]).err().unwrap_or_default();
        assert!(e.contains("cannot be used with"), "{e}");
    }

    /// `--nqn` and `--allow-host` are checked like the file's `nqn` and
    /// `allowed_hosts` (an empty NQN was exported, an empty host accepted).
    #[test]
    fn nqn_flags_are_checked() {
        let e = flags(&["--ram", "1M", "--nqn", ""]).unwrap_err();
        assert!(e.contains("--nqn") && e.contains("empty"), "{e}");
        let e = flags(&["--ram", "1M", "--nqn", nvmeof_common::spec::DISCOVERY_NQN]).unwrap_err();
        assert!(e.contains("--nqn") && e.contains("discovery"), "{e}");
        let e = flags(&["--ram", "1M", "--allow-host", ""]).unwrap_err();
        assert!(e.contains("--allow-host") && e.contains("empty"), "{e}");
        let long = "n".repeat(224);
        let e = flags(&["--ram", "1M", "--allow-host", &long]).unwrap_err();
        assert!(e.contains("--allow-host") && e.contains("223"), "{e}");
    }

    /// The printed nvme-cli lines reach the subsystem: with allowed hosts
    /// they carry `--hostnqn` (without it nvme-cli sends /etc/nvme/hostnqn,
    /// which the subsystem refuses unless listed).
    #[test]
    fn printed_commands_show_both_wildcards_of_one_port_once() {
        let addrs: Vec<SocketAddr> =
            vec!["0.0.0.0:4420".parse().unwrap(), "[::]:4420".parse().unwrap(), "[::]:4421".parse().unwrap()];
        let c = flags(&["--ram", "1M", "--nqn", "nqn.2026-11.x:y"]).unwrap();
        let lines = host_commands(&c, &addrs);
        let connects: Vec<&String> = lines.iter().filter(|l| l.contains("nvme connect")).collect();
        assert_eq!(
            connects,
            [
                "  nvme connect -t tcp -a <this-host-ip> -s 4420 -n nqn.2026-11.x:y",
                "  nvme connect -t tcp -a <this-host-ip> -s 4421 -n nqn.2026-11.x:y",
            ]
        );
    }

    /// A subsystem with `ports` gets lines for those ports' addresses only
    /// (port N: the N-th address).
    #[test]
    fn printed_commands_follow_the_subsystems_ports() {
        let addrs: Vec<SocketAddr> =
            vec!["127.0.0.1:4420".parse().unwrap(), "127.0.0.2:4421".parse().unwrap()];
        let mut c = flags(&["--ram", "1M", "--nqn", "nqn.2026-11.x:y"]).unwrap();
        let connects = |c: &TargetConfig| -> Vec<String> {
            host_commands(c, &addrs).into_iter().filter(|l| l.contains("nvme connect")).collect()
        };
        assert_eq!(connects(&c).len(), 2);
        c.subsystems[0].ports = Some(vec![2]);
        assert_eq!(connects(&c), ["  nvme connect -t tcp -a 127.0.0.2 -s 4421 -n nqn.2026-11.x:y"]);
        c.subsystems[0].ports = Some(vec![]);
        assert!(connects(&c).is_empty());
    }

    /// `--dhchap-secret` gives every `--allow-host` the keys; the printed
    /// connect lines ask for the secrets without showing them.
    #[test]
    fn dhchap_flags_key_every_allowed_host() {
        use nvmeof_common::auth::{DhGroup, DhchapSecret, HashId};
        let key = DhchapSecret::new(vec![5; 32], HashId(0)).unwrap().to_string();
        let ckey = DhchapSecret::new(vec![6; 64], HashId::SHA512).unwrap().to_string();
        let (h1, h2) = ("nqn.2026-11.x:h1", "nqn.2026-11.x:h2");
        let c = flags(&[
            "--ram",
            "1M",
            "--allow-host",
            h1,
            "--allow-host",
            h2,
            "--dhchap-secret",
            &key,
            "--dhchap-ctrl-secret",
            &ckey,
            "--dhchap-dhgroup",
            "ffdhe4096",
        ])
        .unwrap();
        let keys = &c.subsystems[0].host_keys;
        assert_eq!(keys.len(), 2);
        for h in [h1, h2] {
            let k = &keys[h];
            assert_eq!(
                (k.key.to_string(), k.ctrl_key.as_ref().unwrap().to_string()),
                (key.clone(), ckey.clone())
            );
            assert_eq!((k.hash, k.dhgroup), (HashId::SHA256, DhGroup::FFDHE4096));
        }
        let lines = host_commands(&c, &["127.0.0.1:4420".parse().unwrap()]);
        assert!(
            lines[2].ends_with(&format!(
                "--hostnqn {h1} --dhchap-secret <host secret> --dhchap-ctrl-secret <controller secret>"
            )),
            "{lines:?}"
        );
        assert!(lines[1].ends_with(&format!("--hostnqn {h1}")), "discovery needs no secret: {lines:?}");
        assert!(!lines.iter().any(|l| l.contains("DHHC")), "secrets printed: {lines:?}");
        // Errors name the flag; a secret needs an allowed host.
        let e = flags(&["--ram", "1M", "--allow-host", h1, "--dhchap-secret", "DHHC-1:00:xx:"]).unwrap_err();
        assert!(e.contains("--dhchap-secret"), "{e}");
        let e = flags(&["--ram", "1M", "--allow-host", h1, "--dhchap-secret", &key, "--dhchap-hash", "md5"])
            .unwrap_err();
        assert!(e.contains("--dhchap-hash"), "{e}");
        assert!(flags(&["--ram", "1M", "--dhchap-secret", &key]).is_err());
    }

    #[test]
    fn printed_commands_name_the_allowed_hosts() {
        let addrs: Vec<SocketAddr> = vec!["127.0.0.1:4420".parse().unwrap(), "[::]:4421".parse().unwrap()];
        let c = flags(&["--ram", "1M", "--nqn", "nqn.2026-11.x:y"]).unwrap();
        assert_eq!(
            host_commands(&c, &addrs[..1]),
            [
                "On a Linux host (nvme-cli):",
                "  nvme discover -t tcp -a 127.0.0.1 -s 4420",
                "  nvme connect -t tcp -a 127.0.0.1 -s 4420 -n nqn.2026-11.x:y",
            ]
        );
        let c =
            flags(&["--ram", "1M", "--nqn", "nqn.2026-11.x:y", "--allow-host", "nqn.2026-11.x:h1"]).unwrap();
        let lines = host_commands(&c, &addrs);
        assert_eq!(
            lines[4..],
            [
                "  nvme discover -t tcp -a <this-host-ip> -s 4421 --hostnqn nqn.2026-11.x:h1",
                "  nvme connect -t tcp -a <this-host-ip> -s 4421 -n nqn.2026-11.x:y --hostnqn nqn.2026-11.x:h1",
            ]
        );
        let c =
            flags(&["--ram", "1M", "--allow-host", "nqn.2026-11.x:h1", "--allow-host", "nqn.2026-11.x:h2"])
                .unwrap();
        let lines = host_commands(&c, &addrs[..1]);
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert!(
            lines[1].ends_with("--hostnqn nqn.2026-11.x:h1")
                && lines[4].ends_with("--hostnqn nqn.2026-11.x:h2")
        );
    }

    #[test]
    fn flags_are_checked_like_the_configuration_file() {
        assert!(flags(&["--ram", "1M", "--block-size", "4096", "--threads", "2"]).is_ok());
        // Identify Namespace gives the block size as log2: 1000 cannot be described.
        let e = flags(&["--ram", "1M", "--block-size", "1000"]).unwrap_err();
        assert!(e.contains("--block-size") && e.contains("512, 1024, 2048 or 4096"), "{e}");
        let e = flags(&["--file", "/nonexistent/x", "--block-size", "8192"]).unwrap_err();
        assert!(e.contains("--block-size"), "{e}");
        let e = flags(&["--ram", "0"]).unwrap_err();
        assert!(e.contains("--ram") && e.contains("smaller than one 512-byte block"), "{e}");
        for t in ["0", "1025"] {
            let e = flags(&["--ram", "1M", "--threads", t]).unwrap_err();
            assert!(e.contains("--threads"), "{t}: {e}");
        }
        // What `serve` builds from flags alone: the export flags, then the overrides.
        let serve = |a: &[&str]| {
            let a = args(a)?;
            config_from_flags(&a).and_then(|mut c| apply_overrides(&mut c, &a).map(|()| c))
        };
        let e = serve(&["--ram", "1M", "--send-buffer", "100"]).unwrap_err();
        assert!(e.contains("--send-buffer"), "{e}");
        assert_eq!(serve(&["--ram", "1M"]).unwrap().send_buffer, nvmeof_net::default_send_buffer());
        assert_eq!(serve(&["--ram", "1M", "--send-buffer", "0"]).unwrap().send_buffer, 0);
        assert_eq!(serve(&["--ram", "1M"]).unwrap().congestion_control, None);
        let reno = serve(&["--ram", "1M", "--congestion", "reno"]).unwrap().congestion_control;
        assert_eq!(reno.map(|c| c.to_string()).as_deref(), Some("reno"));
        let e = serve(&["--ram", "1M", "--congestion", "no-such-cc"]).unwrap_err();
        assert!(e.contains("--congestion") && e.contains("no-such-cc"), "{e}");
        let m = serve(&["--ram", "1M", "--metrics-listen", "[::1]:9464"]).unwrap().metrics_listen;
        assert_eq!(m, Some("[::1]:9464".parse().unwrap()));
        assert!(args(&["--ram", "1M", "--metrics-listen", "localhost:9464"]).is_err());
        let d = flags(&["--ram", "1M", "--discovery-nqn", "nqn.2026-12.x:disc"]).unwrap().discovery_nqn;
        assert_eq!(d.as_deref(), Some("nqn.2026-12.x:disc"));
        assert_eq!(flags(&["--ram", "1M"]).unwrap().discovery_nqn, None);
        let e = flags(&["--ram", "1M", "--nqn", "nqn.2026-12.x:a", "--discovery-nqn", "nqn.2026-12.x:a"])
            .unwrap_err();
        assert!(e.contains("--discovery-nqn") && e.contains("--nqn"), "{e}");
        let e = flags(&["--ram", "1M", "--discovery-nqn", ""]).unwrap_err();
        assert!(e.contains("--discovery-nqn") && e.contains("empty"), "{e}");
        // With --config the file says it (`discovery_nqn`).
        assert!(args(&["--config", "t.toml", "--discovery-nqn", "nqn.2026-12.x:disc"]).is_err());
        assert!(flags(&["--ram", "1M"]).unwrap().discovery_filter.is_match_any());
        let f = flags(&["--ram", "1M", "--discovery-filter", "svcid,address"]).unwrap().discovery_filter;
        assert_eq!(f, DiscoveryFilter::NVMET);
        assert!(args(&["--ram", "1M", "--discovery-filter", "port"]).is_err());
        assert!(args(&["--config", "t.toml", "--discovery-filter", "address"]).is_err());
    }
}
