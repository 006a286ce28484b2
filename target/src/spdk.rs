//! Converting an SPDK NVMe-oF target configuration, as SPDK's `save_config`
//! RPC writes it (`scripts/rpc.py save_config > spdk.json`, what `nvmf_tgt
//! --json` or `spdk_tgt -c` loads), into this target's TOML configuration:
//! `nvmeof-target import-spdk` for an administrator moving from SPDK.
//!
//! SPDK saves the RPC calls that rebuild its state, grouped by framework
//! subsystem: `{"subsystems": [{"subsystem": "bdev", "config": [{"method":
//! "bdev_malloc_create", "params": {...}}, ...]}, ...]}`. The `keyring`,
//! `bdev` and `nvmf` sections are read (looked up by name: their order is
//! the framework's), the rest is SPDK's own tuning. What maps:
//! - The TCP transport's `max_queue_depth`, `max_io_qpairs_per_ctrlr`,
//!   `in_capsule_data_size`, `max_io_size` and `sock_priority` become
//!   `[limits]` `max_queue_entries`, `max_io_queues`, `in_capsule_data`,
//!   `mdts` (SPDK's `log2(max_io_size / 4096)`) and `so_priority`, so hosts
//!   get the same MQES, I/O queue count, IOCCSZ and MDTS.
//! - Listeners (`nvmf_subsystem_add_listener`, per subsystem in SPDK) become
//!   `[[port]]` tables, one per address in the order SPDK saved them (the
//!   discovery subsystem's first), and each subsystem lists its own
//!   (`ports`, left out when it listens on every port). Referrals
//!   (`nvmf_discovery_add_referral`) become `[[referral]]` tables, and
//!   `nvmf_set_config`'s `discovery_filter` the `discovery_filter`: hosts
//!   find the same listeners in the discovery log.
//! - Each subsystem keeps its NQN, serial and model number, controller ID
//!   range, SPDK's IEEE OUI and, when `allow_any_host` is false (SPDK's default), its hosts
//!   (`nvmf_subsystem_add_host`) with their DH-HMAC-CHAP keys, read from the
//!   files the `keyring` section names (`keyring_file_add_key`).
//! - Each namespace keeps its NSID, UUID, NGUID and EUI-64 exactly as SPDK
//!   reports them (the bdev's UUID where the namespace set none), its ANA
//!   group, the hosts that see it (`no_auto_visible` with `nvmf_ns_add_host`:
//!   `hosts` here) and its bdev's QoS limits (`bdev_set_qos_limit`
//!   `rw_ios_per_sec`, `rw_mbytes_per_sec`). SPDK offers reservations on
//!   every namespace, so every namespace has `reservations = true`; a
//!   namespace's `ptpl_file` is its `reservations_file`, kept in SPDK's
//!   format (`reservations_format = "spdk"`), so hosts keep the
//!   registrations they persisted through power loss.
//! - Malloc bdevs become RAM namespaces of the same size and block size;
//!   AIO and io_uring bdevs a block device or a file (by what the path is
//!   here) with their block size and read-only flag, files with direct I/O
//!   (`buffered_io = false`), as SPDK's `O_DIRECT` opens. A zoned bdev
//!   (`bdev_zone_block_create`) on one of them becomes that namespace with
//!   `zoned = true` and zones of its capacity, over the same blocks (SPDK
//!   maps zone LBAs onto the base bdev one to one), a RAM one of SPDK's size
//!   (whole zones, a multiple of `optimal_open_zones`); a zone capacity that
//!   is not a power of two does not convert (SPDK's zones are then larger
//!   than their capacity, which Linux hosts refuse).
//!
//! What does not map is said in a note (a comment at the top of the output,
//! and on stderr): other transports, TLS listeners and PSKs, bdevs of other
//! kinds (NVMe controllers SPDK drives itself, logical volumes, RAID, null,
//! ...), metadata and protection information, read- or write-only
//! bandwidth limits, hosts a key of which cannot be read. A subsystem's
//! namespace that cannot be exported is left out, never replaced by
//! something else. The output is
//! checked by parsing it as a [`crate::config::TargetConfig`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Map, Value};

use crate::core::DiscoveryFilter;
use crate::nvmetcli::{quoted, Converted, DeviceKind};

mod export;
pub use export::{export, Exported};

/// The discovery subsystem's NQN, whose listeners are where SPDK answers
/// discovery.
const DISCOVERY_NQN: &str = nvmeof_common::spec::DISCOVERY_NQN;

/// SPDK's controller ID range unless set (`NVMF_MIN_CNTLID`, `NVMF_MAX_CNTLID`).
const SPDK_CNTLIDS: (u64, u64) = (1, 0xFFEF);

/// The IEEE OUI SPDK's controllers report (Intel's, bytes E4 D2 5C).
const SPDK_IEEE_OUI: u32 = 0x5c_d2_e4;

/// One saved RPC call.
struct Call<'a> {
    method: &'a str,
    params: &'a Map<String, Value>,
}

/// The calls of framework subsystem `name`, in order (a `null` config is
/// none; `--with-batches` nests arrays of calls, taken in order too).
fn section<'a>(root: &'a Value, name: &str) -> Vec<Call<'a>> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    let empty = EMPTY.get_or_init(Map::new);
    let mut calls = Vec::new();
    let subsystems = root.get("subsystems").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    for s in subsystems.iter().filter(|s| s.get("subsystem").and_then(Value::as_str) == Some(name)) {
        let entries = s.get("config").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
        let flat = entries.iter().flat_map(|e| match e {
            Value::Array(batch) => batch.iter().collect::<Vec<_>>(),
            one => vec![one],
        });
        for e in flat {
            if let Some(method) = e.get("method").and_then(Value::as_str) {
                let params = e.get("params").and_then(Value::as_object).unwrap_or(empty);
                calls.push(Call { method, params });
            }
        }
    }
    calls
}

fn string<'a>(p: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    p.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty())
}

fn uint(p: &Map<String, Value>, key: &str) -> Option<u64> {
    p.get(key).and_then(Value::as_u64)
}

fn flag(p: &Map<String, Value>, key: &str) -> bool {
    p.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// What a bdev becomes.
#[derive(Clone)]
enum BdevKind {
    /// `bdev_malloc_create`: RAM of this many bytes.
    Ram { bytes: u64, block_size: u64 },
    /// `bdev_aio_create`, `bdev_uring_create`: a file or block device.
    Path { path: String, block_size: Option<u64>, read_only: bool },
    /// `bdev_zone_block_create`: `base` exported zoned, zones of
    /// `zone_capacity` blocks in groups of `optimal_open_zones`.
    Zoned { base: String, zone_capacity: u64, optimal_open_zones: u64 },
    /// Anything else: why it cannot be exported here.
    Unsupported(String),
}

#[derive(Clone)]
struct Bdev {
    kind: BdevKind,
    uuid: Option<String>,
}

/// A bdev's `bdev_set_qos_limit`.
#[derive(Default, Clone)]
struct Qos {
    iops: Option<u64>,
    mbytes: Option<u64>,
    one_way: Vec<&'static str>,
}

/// A TCP listen address of a listener or referral (`listen_address`,
/// `address`): `IP:PORT`, `[IP]:PORT` for IPv6; `Err` says why not.
fn address(a: Option<&Value>) -> Result<String, String> {
    let a = a.and_then(Value::as_object).ok_or("no address")?;
    let trtype = string(a, "trtype").unwrap_or_default();
    if !trtype.eq_ignore_ascii_case("tcp") {
        return Err(format!("{trtype:?} transport: this target speaks NVMe/TCP only"));
    }
    let traddr = string(a, "traddr").ok_or("no traddr")?;
    let trsvcid = string(a, "trsvcid").ok_or("no trsvcid")?;
    let text = match string(a, "adrfam") {
        Some(f) if f.eq_ignore_ascii_case("ipv6") => format!("[{traddr}]:{trsvcid}"),
        _ => format!("{traddr}:{trsvcid}"),
    };
    text.parse::<std::net::SocketAddr>()
        .map(|_| text.clone())
        .map_err(|_| format!("{text} is not an IP address and port"))
}

/// A host of a subsystem (`nvmf_subsystem_add_host`).
struct Host {
    nqn: String,
    /// DH-HMAC-CHAP secrets (`DHHC-1:...`) read from the keyring's files.
    key: Option<String>,
    ctrl_key: Option<String>,
}

#[derive(Default)]
struct Subsystem<'a> {
    create: Option<&'a Map<String, Value>>,
    hosts: Vec<Host>,
    namespaces: Vec<&'a Map<String, Value>>,
    ns_hosts: BTreeMap<u64, Vec<String>>,
    /// Port numbers (positions in `ports`, from 1).
    ports: Vec<u16>,
}

/// The subsystem `nqn` (made on first mention, in that order).
fn sub<'m, 'a>(
    order: &mut Vec<&'a str>,
    subsystems: &'m mut BTreeMap<&'a str, Subsystem<'a>>,
    nqn: &'a str,
) -> &'m mut Subsystem<'a> {
    if !order.contains(&nqn) {
        order.push(nqn);
    }
    subsystems.entry(nqn).or_default()
}

/// Converts SPDK's saved JSON; `kind` says what each AIO or io_uring bdev's
/// file name is ([`DeviceKind::of`] on the machine that will run the
/// target), `read_key` reads a keyring key file (a DH-HMAC-CHAP secret).
pub fn convert(
    json: &str,
    kind: impl Fn(&Path) -> DeviceKind,
    read_key: impl Fn(&Path) -> Result<String, String>,
) -> Result<Converted, String> {
    let bad = |e: String| format!("not an SPDK configuration: {e}");
    let root: Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    if !root.get("subsystems").is_some_and(Value::is_array) {
        return Err(bad("no \"subsystems\" array (save_config's output has one)".into()));
    }
    let mut notes = Vec::new();

    // Keyring: key name → file.
    let mut keys: BTreeMap<&str, &str> = BTreeMap::new();
    for c in section(&root, "keyring") {
        if c.method == "keyring_file_add_key" {
            if let (Some(name), Some(path)) = (string(c.params, "name"), string(c.params, "path")) {
                keys.insert(name, path);
            }
        }
    }
    let secret = |name: &str, host: &str, notes: &mut Vec<String>| -> Option<String> {
        let Some(path) = keys.get(name) else {
            notes.push(format!("host {host}: key {name:?} is not in the keyring section"));
            return None;
        };
        match read_key(Path::new(path)) {
            Ok(s) if s.trim().parse::<nvmeof_common::auth::DhchapSecret>().is_ok() => {
                Some(s.trim().to_string())
            }
            Ok(_) => {
                notes.push(format!(
                    "host {host}: key {name:?} ({path}) is not a DH-HMAC-CHAP secret (DHHC-1:...)"
                ));
                None
            }
            Err(e) => {
                notes.push(format!("host {host}: key {name:?} cannot be read: {e}"));
                None
            }
        }
    };

    // Bdevs by name, and their QoS limits.
    let mut bdevs: BTreeMap<&str, Bdev> = BTreeMap::new();
    let mut qos: BTreeMap<&str, Qos> = BTreeMap::new();
    // NVMe controllers SPDK attached as bdevs: name, transport.
    let mut nvme_controllers: Vec<(&str, &str)> = Vec::new();
    for c in section(&root, "bdev") {
        let p = c.params;
        let uuid = string(p, "uuid").map(str::to_string);
        let bdev_kind = match c.method {
            "bdev_malloc_create" => {
                let block_size = uint(p, "block_size").unwrap_or(512);
                let md = uint(p, "md_size").unwrap_or(0);
                if md != 0 || uint(p, "dif_type").unwrap_or(0) != 0 {
                    BdevKind::Unsupported(format!(
                        "it has {md} bytes of metadata per block (protection information and metadata are not offered here)"
                    ))
                } else {
                    let bytes = uint(p, "num_blocks").unwrap_or(0).saturating_mul(block_size);
                    BdevKind::Ram { bytes, block_size }
                }
            }
            "bdev_aio_create" | "bdev_uring_create" => match string(p, "filename") {
                Some(path) => BdevKind::Path {
                    path: path.to_string(),
                    block_size: uint(p, "block_size").filter(|&b| b != 0),
                    read_only: flag(p, "readonly"),
                },
                None => BdevKind::Unsupported("it has no filename".into()),
            },
            "bdev_set_qos_limit" => {
                if let Some(name) = string(p, "name") {
                    let q = qos.entry(name).or_default();
                    q.iops = uint(p, "rw_ios_per_sec").filter(|&v| v > 0);
                    q.mbytes = uint(p, "rw_mbytes_per_sec").filter(|&v| v > 0);
                    q.one_way = ["r_mbytes_per_sec", "w_mbytes_per_sec"]
                        .into_iter()
                        .filter(|k| uint(p, k).is_some_and(|v| v > 0))
                        .collect();
                }
                continue;
            }
            "bdev_nvme_attach_controller" => {
                if let Some(name) = string(p, "name") {
                    nvme_controllers.push((name, string(p, "trtype").unwrap_or("PCIe")));
                }
                continue;
            }
            "bdev_null_create" => BdevKind::Unsupported("a null bdev discards what is written".into()),
            "bdev_zone_block_create" => match string(p, "base_bdev") {
                Some(base) => BdevKind::Zoned {
                    base: base.to_string(),
                    zone_capacity: uint(p, "zone_capacity").unwrap_or(0),
                    optimal_open_zones: uint(p, "optimal_open_zones").unwrap_or(1).max(1),
                },
                None => BdevKind::Unsupported("a zoned bdev without a base_bdev".into()),
            },
            m if m.ends_with("_create") => {
                BdevKind::Unsupported(format!("made by {m}, which is not converted"))
            }
            _ => continue,
        };
        if let Some(name) = string(p, "name") {
            bdevs.insert(name, Bdev { kind: bdev_kind, uuid });
        }
    }

    // The nvmf section: gathered first, as SPDK saves listeners before
    // (v22) or after (v24) hosts, and the discovery listeners before any
    // subsystem (NQN order).
    let nvmf = section(&root, "nvmf");
    let mut limits: Vec<String> = Vec::new();
    let mut ports: Vec<String> = Vec::new();
    let mut referrals: Vec<String> = Vec::new();
    let mut order: Vec<&str> = Vec::new();
    let mut subsystems: BTreeMap<&str, Subsystem> = BTreeMap::new();
    let mut tcp_transport = false;
    let mut discovery_filter = None;
    for c in &nvmf {
        let p = c.params;
        let nqn = string(p, "nqn").unwrap_or_default();
        match c.method {
            "nvmf_set_config" => match string(p, "discovery_filter").map(str::parse::<DiscoveryFilter>) {
                None => {}
                Some(Ok(f)) => discovery_filter = Some(f).filter(|f| !f.is_match_any()),
                Some(Err(e)) => notes.push(format!("discovery_filter left out (every port is listed): {e}")),
            },
            "nvmf_create_transport" => {
                let trtype = string(p, "trtype").unwrap_or_default();
                if !trtype.eq_ignore_ascii_case("tcp") {
                    notes
                        .push(format!("the {trtype:?} transport left out: this target speaks NVMe/TCP only"));
                    continue;
                }
                tcp_transport = true;
                transport_limits(p, &mut limits, &mut notes);
            }
            "nvmf_discovery_add_referral" => {
                let subnqn = string(p, "subnqn").unwrap_or(DISCOVERY_NQN);
                match address(p.get("address")) {
                    Err(e) => notes.push(format!("a referral left out: {e}")),
                    Ok(a) if flag(p, "secure_channel") => {
                        notes.push(format!("referral {a} left out: it requires TLS, which this target does not offer"))
                    }
                    Ok(a) if subnqn != DISCOVERY_NQN => notes.push(format!(
                        "referral {a} left out: it names subsystem {subnqn} (referrals here are to discovery services)"
                    )),
                    Ok(a) => referrals.push(a),
                }
            }
            "nvmf_create_subsystem" => sub(&mut order, &mut subsystems, nqn).create = Some(p),
            "nvmf_subsystem_add_host" => {
                let Some(host) = string(p, "host") else { continue };
                if string(p, "psk").is_some() {
                    notes.push(format!(
                        "subsystem {nqn}: host {host} has a TLS PSK, which this target does not use (it connects without TLS)"
                    ));
                }
                let mut ok = true;
                let mut key = |k: &str| {
                    string(p, k).and_then(|n| {
                        secret(n, host, &mut notes).or_else(|| {
                            ok = false;
                            None
                        })
                    })
                };
                let (key, ctrl_key) = (key("dhchap_key"), key("dhchap_ctrlr_key"));
                if ok {
                    sub(&mut order, &mut subsystems, nqn).hosts.push(Host {
                        nqn: host.to_string(),
                        key,
                        ctrl_key,
                    });
                } else {
                    // Never let in without its key a host that had to authenticate.
                    notes.push(format!("subsystem {nqn}: host {host} left out (its keys did not convert)"));
                }
            }
            "nvmf_subsystem_add_ns" => {
                if let Some(ns) = p.get("namespace").and_then(Value::as_object) {
                    sub(&mut order, &mut subsystems, nqn).namespaces.push(ns);
                }
            }
            "nvmf_ns_add_host" => {
                if let (Some(nsid), Some(host)) = (uint(p, "nsid"), string(p, "host")) {
                    sub(&mut order, &mut subsystems, nqn)
                        .ns_hosts
                        .entry(nsid)
                        .or_default()
                        .push(host.to_string());
                }
            }
            "nvmf_subsystem_add_listener" => match address(p.get("listen_address")) {
                Err(e) => notes.push(format!("a listener of {nqn} left out: {e}")),
                Ok(a) if flag(p, "secure_channel") => notes.push(format!(
                    "listener {a} of {nqn} left out: it requires TLS, which this target does not offer"
                )),
                Ok(a) => {
                    let id = match ports.iter().position(|x| *x == a) {
                        Some(i) => i + 1,
                        None => {
                            ports.push(a);
                            ports.len()
                        }
                    } as u16;
                    let s = sub(&mut order, &mut subsystems, nqn);
                    if !s.ports.contains(&id) {
                        s.ports.push(id);
                    }
                }
            },
            _ => {}
        }
    }
    if !tcp_transport && !nvmf.is_empty() {
        notes.push("no TCP transport (nvmf_create_transport): this target's own limits apply".into());
    }

    let mut body = String::new();
    if let Some(f) = discovery_filter {
        let _ = writeln!(body, "discovery_filter = \"{f}\"\n");
    }
    if !limits.is_empty() {
        let _ = writeln!(body, "[limits]\n{}\n", limits.join("\n"));
    }
    if ports.is_empty() {
        notes.push("no TCP listener: the target listens on its default address (0.0.0.0:4420)".into());
    }
    for (i, listen) in ports.iter().enumerate() {
        let _ = writeln!(body, "[[port]]\nlisten = {}\nportid = {}\n", quoted(listen), i + 1);
    }
    if !ports.is_empty() && subsystems.get(DISCOVERY_NQN).is_none_or(|d| d.ports.len() != ports.len()) {
        notes.push(
            "discovery is answered on every port here (SPDK: where the discovery subsystem listens)".into(),
        );
    }
    for r in &referrals {
        let _ = writeln!(body, "[[referral]]\naddress = {}\n", quoted(r));
    }

    for nqn in order.iter().copied().filter(|&n| n != DISCOVERY_NQN) {
        let s = &subsystems[nqn];
        let Some(create) = s.create else {
            notes.push(format!("subsystem {nqn} left out: it has no nvmf_create_subsystem"));
            continue;
        };
        let _ = writeln!(body, "[[subsystem]]\nnqn = {}", quoted(nqn));
        if let Some(v) = string(create, "model_number") {
            let _ = writeln!(body, "model = {}", quoted(v));
        }
        if let Some(v) = string(create, "serial_number") {
            let _ = writeln!(body, "serial = {}", quoted(v));
        }
        // SPDK reports Intel's OUI in every controller (`nvmf_ctrlr_cdata_init`).
        let _ = writeln!(body, "ieee_oui = 0x{SPDK_IEEE_OUI:06x}");
        let min = uint(create, "min_cntlid").filter(|&v| v != SPDK_CNTLIDS.0);
        let max = uint(create, "max_cntlid").filter(|&v| v != SPDK_CNTLIDS.1);
        for (key, v) in [("cntlid_min", min), ("cntlid_max", max)] {
            if let Some(v) = v {
                let _ = writeln!(body, "{key} = {v}");
            }
        }
        if flag(create, "passthrough") {
            notes.push(format!("subsystem {nqn}: admin command passthrough is not offered here"));
        }
        // SPDK's nvmf_create_subsystem allows no host unless told.
        let any_host = flag(create, "allow_any_host");
        if any_host {
            if s.hosts.iter().any(|h| h.key.is_some()) {
                notes.push(format!(
                    "subsystem {nqn} allows any host: its hosts' DH-HMAC-CHAP keys apply only with allowed_hosts here"
                ));
            }
        } else {
            let entries: Vec<String> = s
                .hosts
                .iter()
                .map(|h| match (&h.key, &h.ctrl_key) {
                    (None, _) => quoted(&h.nqn),
                    (Some(k), None) => format!("{{ nqn = {}, dhchap_key = {} }}", quoted(&h.nqn), quoted(k)),
                    (Some(k), Some(c)) => format!(
                        "{{ nqn = {}, dhchap_key = {}, dhchap_ctrl_key = {} }}",
                        quoted(&h.nqn),
                        quoted(k),
                        quoted(c)
                    ),
                })
                .collect();
            let _ = writeln!(body, "allowed_hosts = [{}]", entries.join(", "));
            if entries.is_empty() {
                notes.push(format!("subsystem {nqn} allows no host (allow_any_host false, no host added)"));
            }
        }
        if s.ports.len() != ports.len() {
            let ids: Vec<String> = s.ports.iter().map(u16::to_string).collect();
            let _ = writeln!(body, "ports = [{}]", ids.join(", "));
            if s.ports.is_empty() {
                notes.push(format!("subsystem {nqn} has no TCP listener: configured, not exported"));
            }
        }
        let allowed: Option<Vec<&str>> =
            (!any_host).then(|| s.hosts.iter().map(|h| h.nqn.as_str()).collect());
        for ns in &s.namespaces {
            namespace(
                nqn,
                ns,
                s,
                allowed.as_deref(),
                &bdevs,
                &qos,
                &nvme_controllers,
                &kind,
                &mut body,
                &mut notes,
            );
        }
        body.push('\n');
    }

    Converted::finish(
        "Converted from an SPDK configuration saved by save_config (nvmeof-target import-spdk).",
        notes,
        &body,
    )
}

/// `[limits]` lines from the TCP transport's options: what SPDK told hosts
/// (`nvmf_tcp_create`, `nvmf_ctrlr_cdata_init`, `spdk_nvmf_ctrlr_connect`):
/// CAP.MQES `max_queue_depth` − 1, IOCCSZ from `in_capsule_data_size`, MDTS
/// `log2(max_io_size / 4096)`, `max_io_qpairs_per_ctrlr` I/O queues (saved
/// without the admin queue SPDK's own count includes).
fn transport_limits(p: &Map<String, Value>, limits: &mut Vec<String>, notes: &mut Vec<String>) {
    if let Some(depth) = uint(p, "max_queue_depth") {
        let entries = depth.clamp(16, 65536);
        if entries != depth {
            notes.push(format!("max_queue_depth {depth}: queues of {entries} entries here (16..=65536)"));
        }
        limits.push(format!("max_queue_entries = {entries}"));
    }
    if let Some(q) = uint(p, "max_io_qpairs_per_ctrlr") {
        limits.push(format!("max_io_queues = {}", q.clamp(1, u16::MAX as u64)));
    }
    if let Some(size) = uint(p, "in_capsule_data_size") {
        let bytes = size.min(1 << 20) / 16 * 16;
        if bytes != size {
            notes.push(format!(
                "in_capsule_data_size {size}: {bytes} bytes here (a multiple of 16 up to 1 MiB)"
            ));
        }
        limits.push(format!("in_capsule_data = {bytes}"));
    }
    if let Some(io) = uint(p, "max_io_size").filter(|&v| v > 0) {
        let pages = (io / 4096).max(1);
        let log2 = 63 - pages.leading_zeros() as u64;
        let mdts = log2.clamp(1, crate::core::Limits::MAX_MDTS as u64);
        if mdts != log2 {
            notes.push(format!("max_io_size {io}: commands of up to {} KiB here", 4u64 << mdts));
        }
        limits.push(format!("mdts = {mdts}"));
    }
    if let Some(prio) = uint(p, "sock_priority").filter(|&v| v > 0) {
        limits.push(format!("so_priority = {prio}"));
    }
}

/// The bdev a zoned bdev (`bdev_zone_block_create`) is made on, if it can
/// be exported zoned here: a RAM, file or device bdev, and zones as large as
/// their capacity. SPDK's zones are the capacity rounded up to a power of
/// two (`spdk_align64pow2`), the rest of each never written; Linux hosts
/// refuse a capacity below the zone size, so only powers of two convert.
fn zoned_base<'b>(
    bdevs: &'b BTreeMap<&str, Bdev>,
    base: &str,
    capacity: u64,
) -> Result<&'b BdevKind, String> {
    match bdevs.get(base).map(|b| &b.kind) {
        None => Err(format!("its base bdev {base} is not made by a method this converter knows")),
        Some(BdevKind::Unsupported(why)) => Err(format!("its base bdev {base}: {why}")),
        Some(BdevKind::Zoned { .. }) => Err(format!("its base bdev {base} is zoned already")),
        Some(_) if !capacity.is_power_of_two() => Err(format!(
            "its zone capacity of {capacity} blocks is not a power of two (zones here are as large as their capacity)"
        )),
        Some(k) => Ok(k),
    }
}

/// One `nvmf_subsystem_add_ns` as a `[[subsystem.namespace]]` table (or a
/// note saying why it is left out).
#[allow(clippy::too_many_arguments)]
fn namespace(
    nqn: &str,
    ns: &Map<String, Value>,
    s: &Subsystem<'_>,
    allowed: Option<&[&str]>,
    bdevs: &BTreeMap<&str, Bdev>,
    qos: &BTreeMap<&str, Qos>,
    nvme_controllers: &[(&str, &str)],
    kind: &impl Fn(&Path) -> DeviceKind,
    body: &mut String,
    notes: &mut Vec<String>,
) {
    let nsid = uint(ns, "nsid").filter(|&n| n > 0);
    let what = match nsid {
        Some(n) => format!("subsystem {nqn} namespace {n}"),
        None => format!("a namespace of subsystem {nqn}"),
    };
    let Some(name) = string(ns, "bdev_name") else {
        notes.push(format!("{what} left out: no bdev_name"));
        return;
    };
    let Some(bdev) = bdevs.get(name) else {
        // The controller's bdevs are its namespaces, `{name}n{nsid}`.
        let why = match nvme_controllers.iter().find(|(c, _)| name.starts_with(c)) {
            Some((c, t)) if t.eq_ignore_ascii_case("pcie") => format!(
                "bdev {name} is a namespace of NVMe controller {c}, which SPDK drives itself: \
                 bind it to the kernel's nvme driver and export its /dev/nvmeXnY as a block namespace"
            ),
            Some((c, t)) => format!(
                "bdev {name} is a namespace of NVMe-oF controller {c} ({t}), which SPDK connects to itself: \
                 connect it with nvme connect and export its /dev/nvmeXnY as a block namespace"
            ),
            None => format!("bdev {name} is not made by a method this converter knows"),
        };
        notes.push(format!("{what} left out: {why}"));
        return;
    };
    let mut t = String::from("\n[[subsystem.namespace]]\n");
    if let Some(n) = nsid {
        let _ = writeln!(t, "nsid = {n}");
    }
    // A zoned bdev exports its base bdev's blocks where they are (SPDK's
    // `vbdev_zone_block` maps zone LBAs onto the base one to one).
    let (kind_of, zones) = match &bdev.kind {
        BdevKind::Zoned { base, zone_capacity, optimal_open_zones } => {
            match zoned_base(bdevs, base, *zone_capacity) {
                Ok(k) => (k, Some((*zone_capacity, *optimal_open_zones))),
                Err(why) => {
                    notes.push(format!("{what} left out: bdev {name}: a zoned bdev: {why}"));
                    return;
                }
            }
        }
        k => (k, None),
    };
    match kind_of {
        BdevKind::Unsupported(why) => {
            notes.push(format!("{what} left out: bdev {name}: {why}"));
            return;
        }
        // A zoned bdev's base is never zoned (`zoned_base`).
        BdevKind::Zoned { .. } => return,
        BdevKind::Ram { bytes, block_size } => {
            if !matches!(block_size, 512 | 1024 | 2048 | 4096) {
                notes.push(format!(
                    "{what} left out: bdev {name} has {block_size}-byte blocks (512 to 4096 here)"
                ));
                return;
            }
            // SPDK's zoned bdev: whole zones, a multiple of optimal_open_zones.
            let bytes = match zones {
                Some((cap, group)) => {
                    let zone = cap.saturating_mul(*block_size);
                    let count = bytes / zone;
                    (count - count % group) * zone
                }
                None => *bytes,
            };
            if bytes == 0 {
                notes.push(format!("{what} left out: bdev {name} holds no whole zone"));
                return;
            }
            let _ = writeln!(t, "ram = \"{bytes}\"\nblock_size = {block_size}");
            if let Some((cap, _)) = zones {
                let _ = writeln!(t, "zoned = true\nzone_size = \"{}\"", cap * block_size);
            }
        }
        BdevKind::Path { path, block_size, read_only } => {
            if let Some(b) = block_size.filter(|b| !matches!(b, 512 | 1024 | 2048 | 4096)) {
                notes.push(format!("{what} left out: bdev {name} has {b}-byte blocks (512 to 4096 here)"));
                return;
            }
            // A device node absent here (a disk not attached yet) is still a
            // device, not a file to create.
            let here = match kind(Path::new(path)) {
                DeviceKind::Missing if path.starts_with("/dev/") => {
                    notes.push(format!("{what}: {path} does not exist here (exported as a block device)"));
                    DeviceKind::Block
                }
                k => k,
            };
            let block = match here {
                DeviceKind::Block => {
                    let _ = writeln!(t, "block = {}", quoted(path));
                    if let Some(b) = block_size {
                        let _ = writeln!(t, "block_size = {b}");
                    }
                    *block_size
                }
                k => {
                    if k == DeviceKind::Missing {
                        notes.push(format!("{what}: {path} does not exist here (exported as a file)"));
                    }
                    let b = block_size.unwrap_or_else(|| {
                        notes.push(format!("{what}: bdev {name} gives no block size (512 here)"));
                        512
                    });
                    let _ = writeln!(t, "file = {}\nbuffered_io = false\nblock_size = {b}", quoted(path));
                    Some(b)
                }
            };
            if *read_only {
                t.push_str("read_only = true\n");
            }
            if let Some((cap, group)) = zones {
                // The zone size is in bytes here, SPDK's capacity in blocks.
                let Some(zone) = block.and_then(|b| cap.checked_mul(b)) else {
                    notes.push(format!(
                        "{what} left out: bdev {name}: a zoned bdev of {cap}-block zones on a device whose block size \
                         SPDK did not save (configure zoned = true and zone_size by hand)"
                    ));
                    return;
                };
                if group > 1 {
                    notes.push(format!(
                        "{what}: SPDK exports a multiple of {group} zones (optimal_open_zones), this target every whole zone of {path}"
                    ));
                }
                let _ = writeln!(t, "zoned = true\nzone_size = \"{zone}\"");
            }
        }
    }
    // The identifiers exactly as SPDK reports them: the namespace's, else
    // the bdev's UUID for both the UUID and the NGUID
    // (`spdk_nvmf_subsystem_add_ns_ext`), and no EUI-64 unless set. Unset
    // ones are written as zeroes so that none is derived in their place.
    let id = |v: Option<&str>| v.map(|v| v.replace('-', "").to_ascii_lowercase());
    let uuid = id(string(ns, "uuid").or(bdev.uuid.as_deref()));
    let nguid = id(string(ns, "nguid").or(bdev.uuid.as_deref()));
    let eui64 = id(string(ns, "eui64"));
    for (key, v, digits) in [("uuid", uuid, 32), ("nguid", nguid, 32), ("eui64", eui64, 16)] {
        let v = v.filter(|v| v.len() == digits && v.bytes().all(|c| c.is_ascii_hexdigit()));
        let _ = writeln!(t, "{key} = {}", quoted(&v.unwrap_or_else(|| "0".repeat(digits))));
    }
    if let Some(g) = uint(ns, "anagrpid").filter(|&g| g != 1) {
        if (1..=128).contains(&g) {
            let _ = writeln!(t, "ana_group = {g}");
        } else {
            notes.push(format!("{what}: ANA group {g} is group 1 here (groups 1 to 128)"));
        }
    }
    // SPDK offers reservations on every namespace.
    t.push_str("reservations = true\n");
    // SPDK's own file, read and written in SPDK's format: the hosts keep
    // their registrations, and SPDK can take the file back.
    if let Some(ptpl) = string(ns, "ptpl_file") {
        let _ = writeln!(t, "reservations_file = {}\nreservations_format = \"spdk\"", quoted(ptpl));
    }
    if flag(ns, "no_auto_visible") {
        let listed = nsid.and_then(|n| s.ns_hosts.get(&n)).cloned().unwrap_or_default();
        let (hosts, strangers): (Vec<String>, Vec<String>) =
            listed.into_iter().partition(|h| allowed.is_none_or(|a| a.contains(&h.as_str())));
        for h in strangers {
            notes
                .push(format!("{what}: host {h} left out of its hosts: it may not connect to the subsystem"));
        }
        let hosts: Vec<String> = hosts.iter().map(|h| quoted(h)).collect();
        let _ = writeln!(t, "hosts = [{}]", hosts.join(", "));
    }
    if let Some(q) = qos.get(name) {
        if let Some(iops) = q.iops {
            let _ = writeln!(t, "qos_iops = {iops}");
        }
        if let Some(mb) = q.mbytes {
            // SPDK's megabytes are MiB (`limit * 1024 * 1024`).
            let _ = writeln!(t, "qos_bandwidth = \"{mb}M\"");
        }
        if !q.one_way.is_empty() {
            notes.push(format!(
                "{what}: bdev {name}'s {} left out (one limit for reads and writes together here)",
                q.one_way.join(" and ")
            ));
        }
    }
    body.push_str(&t);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{IoEngine, NamespaceSource, TargetConfig};
    use nvmeof_common::auth::{DhchapSecret, HashId};

    const HOST1: &str = "nqn.2014-08.org.nvmexpress:uuid:4a2a1c9e-0000-4000-8000-000000000001";
    const HOST2: &str = "nqn.2014-08.org.nvmexpress:uuid:4a2a1c9e-0000-4000-8000-000000000002";
    const KEY0: &str = "DHHC-1:01:o8/jE9vGsSdaRVAfWmfEhzOZ8S7KkfTi8F/tg64x4BN8zoYw:";
    const CKEY0: &str = "DHHC-1:02:y2qROP+9W3z/7OkMI0q8PgfPEwe+P/DYCK98wHz6wx04yQ1XM7FMEW17+jPfWbDB6t6oNA==:";

    /// What SPDK v24/v25's `save_config` writes (the framework's other
    /// sections, SPDK's bdev and transport tuning and `bdev_wait_for_examine`
    /// included) for: a keyring of three keys (one file unreadable); a
    /// Malloc bdev with QoS limits, an AIO bdev on a device, an io_uring bdev
    /// on a file, a read-only AIO file, a null bdev, a Malloc bdev with
    /// metadata, zoned bdevs (on RAM, on a file, of a capacity not a power
    /// of two) and an NVMe controller SPDK drives itself; a TCP
    /// and an RDMA transport, a referral of each kind; the discovery
    /// subsystem listening on port 8009 only, `cnode1` (two hosts with keys,
    /// one namespace per bdev kind, one masked), `cnode2` open to any host
    /// on both ports with ANA reporting, a ptpl file and an EUI-64, `cnode3`
    /// with no listener and a TLS listener.
    fn saved() -> String {
        format!(
            r#"{{
  "subsystems": [
    {{ "subsystem": "keyring", "config": [
      {{ "method": "keyring_file_add_key", "params": {{ "name": "key0", "path": "/etc/spdk/key0" }} }},
      {{ "method": "keyring_file_add_key", "params": {{ "name": "ckey0", "path": "/etc/spdk/ckey0" }} }},
      {{ "method": "keyring_file_add_key", "params": {{ "name": "lost", "path": "/etc/spdk/lost" }} }}
    ] }},
    {{ "subsystem": "iobuf", "config": [ {{ "method": "iobuf_set_options", "params": {{ "small_pool_count": 8192 }} }} ] }},
    {{ "subsystem": "sock", "config": [ {{ "method": "sock_set_default_impl", "params": {{ "impl_name": "posix" }} }} ] }},
    {{ "subsystem": "vmd", "config": null }},
    {{ "subsystem": "bdev", "config": [
      {{ "method": "bdev_set_options", "params": {{ "bdev_io_pool_size": 65535, "bdev_io_cache_size": 256, "bdev_auto_examine": true }} }},
      {{ "method": "bdev_nvme_set_options", "params": {{ "action_on_timeout": "none" }} }},
      {{ "method": "bdev_nvme_attach_controller", "params": {{ "name": "Nvme0", "trtype": "PCIe", "traddr": "0000:5e:00.0" }} }},
      {{ "method": "bdev_nvme_attach_controller", "params": {{ "name": "Remote", "trtype": "tcp", "traddr": "192.0.2.20", "trsvcid": "4420", "subnqn": "nqn.x:y" }} }},
      {{ "method": "bdev_zone_block_create", "params": {{ "base_bdev": "Malloc9", "name": "Zoned0", "zone_capacity": 8192, "optimal_open_zones": 4 }} }},
      {{ "method": "bdev_malloc_create", "params": {{ "name": "Malloc0", "num_blocks": 131072, "block_size": 512, "physical_block_size": 512,
          "uuid": "6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", "optimal_io_boundary": 0, "md_size": 0, "dif_type": 0, "dif_is_head_of_md": false, "dif_pi_format": 0, "numa_id": -1 }} }},
      {{ "method": "bdev_set_qos_limit", "params": {{ "name": "Malloc0", "rw_ios_per_sec": 20000, "rw_mbytes_per_sec": 100, "r_mbytes_per_sec": 50 }} }},
      {{ "method": "bdev_aio_create", "params": {{ "name": "AIO0", "filename": "/dev/sdb", "readonly": false, "fallocate": false,
          "uuid": "0b7e8d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b", "nowait": false }} }},
      {{ "method": "bdev_uring_create", "params": {{ "name": "Uring0", "block_size": 4096, "filename": "/var/lib/spdk/uring0.img",
          "uuid": "c3d4e5f6-a7b8-4c9d-8e0f-112233445566" }} }},
      {{ "method": "bdev_aio_create", "params": {{ "name": "AIO1", "block_size": 512, "filename": "/srv/golden.img", "readonly": true, "fallocate": false,
          "uuid": "1b7e8d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b" }} }},
      {{ "method": "bdev_null_create", "params": {{ "name": "Null0", "num_blocks": 2097152, "block_size": 512, "uuid": "2b7e8d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b" }} }},
      {{ "method": "bdev_malloc_create", "params": {{ "name": "MallocMd", "num_blocks": 1024, "block_size": 520, "md_size": 8, "dif_type": 1,
          "uuid": "3b7e8d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b" }} }},
      {{ "method": "bdev_malloc_create", "params": {{ "name": "Malloc9", "num_blocks": 80000, "block_size": 4096, "uuid": "4b7e8d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b" }} }},
      {{ "method": "bdev_malloc_create", "params": {{ "name": "Malloc7", "num_blocks": 65536, "block_size": 512 }} }},
      {{ "method": "bdev_zone_block_create", "params": {{ "base_bdev": "Malloc7", "name": "Zoned1", "zone_capacity": 3000, "optimal_open_zones": 1 }} }},
      {{ "method": "bdev_aio_create", "params": {{ "name": "AIO2", "block_size": 4096, "filename": "/srv/zoned.img" }} }},
      {{ "method": "bdev_zone_block_create", "params": {{ "base_bdev": "AIO2", "name": "Zoned2", "zone_capacity": 4096, "optimal_open_zones": 2 }} }},
      {{ "method": "bdev_lvol_create", "params": {{ "name": "lvs/lv0" }} }},
      {{ "method": "bdev_wait_for_examine" }}
    ] }},
    {{ "subsystem": "nvmf", "config": [
      {{ "method": "nvmf_set_config", "params": {{ "discovery_filter": "match_any", "admin_cmd_passthru": {{ "identify_ctrlr": false }},
          "dhchap_digests": [ "sha256", "sha384", "sha512" ], "dhchap_dhgroups": [ "null", "ffdhe2048" ] }} }},
      {{ "method": "nvmf_set_max_subsystems", "params": {{ "max_subsystems": 1024 }} }},
      {{ "method": "nvmf_set_crdt", "params": {{ "crdt1": 0, "crdt2": 0, "crdt3": 0 }} }},
      {{ "method": "nvmf_create_transport", "params": {{ "trtype": "TCP", "max_queue_depth": 256, "max_io_qpairs_per_ctrlr": 7,
          "in_capsule_data_size": 8192, "max_io_size": 262144, "io_unit_size": 131072, "max_aq_depth": 128, "num_shared_buffers": 511,
          "buf_cache_size": 4294967295, "dif_insert_or_strip": false, "zcopy": false, "c2h_success": true, "sock_priority": 2,
          "abort_timeout_sec": 1, "ack_timeout": 0, "data_wr_pool_size": 0 }} }},
      {{ "method": "nvmf_create_transport", "params": {{ "trtype": "RDMA", "max_queue_depth": 128 }} }},
      {{ "method": "nvmf_discovery_add_referral", "params": {{ "address": {{ "trtype": "TCP", "adrfam": "IPv4", "traddr": "192.0.2.9", "trsvcid": "8009" }},
          "secure_channel": false, "subnqn": "nqn.2014-08.org.nvmexpress.discovery" }} }},
      {{ "method": "nvmf_discovery_add_referral", "params": {{ "address": {{ "trtype": "TCP", "adrfam": "IPv4", "traddr": "192.0.2.10", "trsvcid": "4420" }},
          "secure_channel": false, "subnqn": "nqn.2016-06.io.spdk:remote" }} }},
      {{ "method": "nvmf_subsystem_add_listener", "params": {{ "nqn": "nqn.2014-08.org.nvmexpress.discovery",
          "listen_address": {{ "trtype": "TCP", "adrfam": "IPv4", "traddr": "192.0.2.5", "trsvcid": "8009" }}, "secure_channel": false }} }},
      {{ "method": "nvmf_create_subsystem", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "allow_any_host": false,
          "serial_number": "SPDK00000000000001", "model_number": "SPDK bdev Controller", "max_namespaces": 32,
          "min_cntlid": 1, "max_cntlid": 65519, "ana_reporting": false }} }},
      {{ "method": "nvmf_subsystem_add_host", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "host": "{HOST1}", "dhchap_key": "key0", "dhchap_ctrlr_key": "ckey0" }} }},
      {{ "method": "nvmf_subsystem_add_host", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "host": "{HOST2}" }} }},
      {{ "method": "nvmf_subsystem_add_host", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "host": "nqn.2014-08.org.example:lost", "dhchap_key": "lost" }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 1, "bdev_name": "Malloc0",
          "nguid": "6A1F0C2E3B4D4E5F8A9B0C1D2E3F4A5B", "uuid": "6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b", "no_auto_visible": false }} }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 2, "bdev_name": "AIO0",
          "nguid": "0B7E8D6C5A4F4E3D9C2B1A0F9E8D7C6B", "uuid": "0b7e8d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b", "no_auto_visible": true }} }} }},
      {{ "method": "nvmf_ns_add_host", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "nsid": 2, "host": "{HOST2}" }} }},
      {{ "method": "nvmf_ns_add_host", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "nsid": 2, "host": "nqn.2014-08.org.example:stranger" }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 3, "bdev_name": "Uring0",
          "nguid": "C3D4E5F6A7B84C9D8E0F112233445566", "uuid": "c3d4e5f6-a7b8-4c9d-8e0f-112233445566", "no_auto_visible": false }} }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 4, "bdev_name": "Null0" }} }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 5, "bdev_name": "MallocMd" }} }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 6, "bdev_name": "Nvme0n1" }} }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 7, "bdev_name": "lvs/lv0" }} }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 9, "bdev_name": "Remoten1" }} }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 8, "bdev_name": "Zoned0" }} }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 11, "bdev_name": "Zoned1" }} }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {{ "nsid": 12, "bdev_name": "Zoned2" }} }} }},
      {{ "method": "nvmf_subsystem_add_listener", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1",
          "listen_address": {{ "trtype": "TCP", "adrfam": "IPv4", "traddr": "192.0.2.5", "trsvcid": "4420" }}, "secure_channel": false }} }},
      {{ "method": "nvmf_subsystem_add_listener", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode1",
          "listen_address": {{ "trtype": "RDMA", "adrfam": "IPv4", "traddr": "192.0.2.5", "trsvcid": "4420" }}, "secure_channel": false }} }},
      {{ "method": "nvmf_create_subsystem", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode2", "allow_any_host": true,
          "serial_number": "SPDK00000000000002", "model_number": "fast tier", "max_namespaces": 32,
          "min_cntlid": 100, "max_cntlid": 199, "ana_reporting": true }} }},
      {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode2", "namespace": {{ "nsid": 10, "bdev_name": "AIO1",
          "ptpl_file": "/var/lib/spdk/golden.ptpl", "eui64": "0050C2FFFE000001", "uuid": "1b7e8d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b",
          "anagrpid": 3, "no_auto_visible": false }} }} }},
      {{ "method": "nvmf_subsystem_add_listener", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode2",
          "listen_address": {{ "trtype": "TCP", "adrfam": "IPv6", "traddr": "fd00::5", "trsvcid": "4420" }}, "secure_channel": false }} }},
      {{ "method": "nvmf_subsystem_add_listener", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode2",
          "listen_address": {{ "trtype": "TCP", "adrfam": "IPv4", "traddr": "192.0.2.5", "trsvcid": "4420" }}, "secure_channel": false }} }},
      {{ "method": "nvmf_subsystem_add_listener", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode2",
          "listen_address": {{ "trtype": "TCP", "adrfam": "IPv4", "traddr": "192.0.2.5", "trsvcid": "8009" }}, "secure_channel": false }} }},
      {{ "method": "nvmf_create_subsystem", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode3", "allow_any_host": true, "serial_number": "idle" }} }},
      {{ "method": "nvmf_subsystem_add_listener", "params": {{ "nqn": "nqn.2016-06.io.spdk:cnode3",
          "listen_address": {{ "trtype": "TCP", "adrfam": "IPv4", "traddr": "192.0.2.5", "trsvcid": "4430" }}, "secure_channel": true }} }}
    ] }},
    {{ "subsystem": "nbd", "config": [] }}
  ]
}}"#
        )
    }

    fn kind(p: &Path) -> DeviceKind {
        match p.to_str().unwrap() {
            p if p.starts_with("/dev/") => DeviceKind::Block,
            "/srv/golden.img" => DeviceKind::File(4096),
            _ => DeviceKind::Missing,
        }
    }

    fn read_key(p: &Path) -> Result<String, String> {
        match p.to_str().unwrap() {
            "/etc/spdk/key0" => Ok(format!("{KEY0}\n")),
            "/etc/spdk/ckey0" => Ok(CKEY0.into()),
            _ => Err("No such file or directory (os error 2)".into()),
        }
    }

    #[test]
    fn converts_what_spdk_saves() {
        let c = convert(&saved(), kind, read_key).unwrap();
        let cfg = TargetConfig::from_toml(&c.toml).unwrap();
        assert!(cfg.discovery_filter.is_match_any(), "SPDK's match_any");
        // The TCP transport's limits, as SPDK told hosts: MQES 255, 7 I/O
        // queues, IOCCSZ (64 + 8192) / 16, MDTS log2(256 KiB / 4 KiB).
        let l = &cfg.limits;
        assert_eq!((l.max_queue_entries, l.max_io_queues, l.in_capsule_data, l.mdts), (256, 7, 8192, 6));
        assert_eq!(cfg.so_priority, 2);
        // Ports in the order SPDK saved its listeners (discovery's first);
        // RDMA and TLS listeners left out.
        let listen: Vec<String> = cfg.listen.iter().map(|a| a.to_string()).collect();
        assert_eq!(listen, ["192.0.2.5:8009", "192.0.2.5:4420", "[fd00::5]:4420"]);
        assert_eq!(cfg.port_ids, [1, 2, 3]);
        let r: Vec<String> = cfg.referrals.iter().map(|r| r.addr.to_string()).collect();
        assert_eq!(r, ["192.0.2.9:8009"]);

        let nqns: Vec<&str> = cfg.subsystems.iter().map(|s| s.nqn.as_str()).collect();
        assert_eq!(
            nqns,
            ["nqn.2016-06.io.spdk:cnode1", "nqn.2016-06.io.spdk:cnode2", "nqn.2016-06.io.spdk:cnode3"]
        );
        let a = &cfg.subsystems[0];
        assert_eq!(
            (a.model.as_str(), a.serial.as_deref(), a.cntlids.clone(), a.ieee_oui),
            ("SPDK bdev Controller", Some("SPDK00000000000001"), 1..=0xFFEF, Some(0x5cd2e4))
        );
        // The host whose key file is missing is left out, not let in without it.
        assert_eq!(a.allowed_hosts, Some(vec![HOST1.to_string(), HOST2.to_string()]));
        let k = &a.host_keys[HOST1];
        assert_eq!(k.key, KEY0.parse::<DhchapSecret>().unwrap());
        assert_eq!(k.ctrl_key, Some(CKEY0.parse::<DhchapSecret>().unwrap()));
        assert_eq!(k.hash, HashId::SHA256);
        assert!(!a.host_keys.contains_key(HOST2));
        assert_eq!(a.ports, Some(vec![2]));
        let nsids: Vec<Option<u32>> = a.namespaces.iter().map(|n| n.nsid).collect();
        assert_eq!(
            nsids,
            [Some(1), Some(2), Some(3), Some(8), Some(12)],
            "the bdevs that cannot be exported are left out"
        );
        let (n1, n2, n3) = (&a.namespaces[0], &a.namespaces[1], &a.namespaces[2]);
        assert_eq!((&n1.source, n1.block_size), (&NamespaceSource::Ram(64 << 20), 512));
        assert_eq!(n1.qos.iops, Some(20000));
        assert_eq!(n1.qos.bytes_per_sec, Some(100 << 20), "SPDK's MB are MiB");
        let uuid =
            [0x6a, 0x1f, 0x0c, 0x2e, 0x3b, 0x4d, 0x4e, 0x5f, 0x8a, 0x9b, 0x0c, 0x1d, 0x2e, 0x3f, 0x4a, 0x5b];
        assert_eq!((n1.ids.uuid, n1.ids.nguid, n1.ids.eui64), (Some(uuid), Some(uuid), Some([0; 8])));
        assert!(
            matches!(&n2.source, NamespaceSource::Block { path, io_engine: IoEngine::BLOCK_DEFAULT, exclusive: true }
                if path == Path::new("/dev/sdb")),
            "{:?}",
            n2.source
        );
        assert_eq!(
            n2.hosts,
            Some(vec![HOST2.to_string()]),
            "masked: HOST2 only (the stranger may not connect)"
        );
        assert!(
            matches!(&n3.source, NamespaceSource::File { path, .. } if path == Path::new("/var/lib/spdk/uring0.img")),
            "{:?}",
            n3.source
        );
        assert_eq!((n3.block_size, n3.read_only, n3.hosts.clone()), (4096, false, None));
        assert!(c.toml.contains("file = \"/var/lib/spdk/uring0.img\"\nbuffered_io = false"), "{}", c.toml);
        assert!(a.namespaces.iter().all(|n| n.reservations), "SPDK offers reservations on every namespace");
        // Zoned bdevs: zones of their capacity on the base bdev's blocks; a
        // RAM one keeps SPDK's size (8 of its 9 whole 32 MiB zones: a
        // multiple of optimal_open_zones 4).
        let zoned =
            |z: u64| Some(crate::core::zoned::ZoneConfig { zone_size: z, max_open: None, max_active: None });
        let (n8, n12) = (&a.namespaces[3], &a.namespaces[4]);
        assert_eq!(
            (&n8.source, n8.block_size, n8.zoned),
            (&NamespaceSource::Ram(256 << 20), 4096, zoned(32 << 20))
        );
        assert!(
            matches!(&n12.source, NamespaceSource::File { path, .. } if path == Path::new("/srv/zoned.img")),
            "{:?}",
            n12.source
        );
        assert_eq!((n12.block_size, n12.zoned), (4096, zoned(16 << 20)));
        assert!(a.namespaces[..3].iter().all(|n| n.zoned.is_none()));

        let b = &cfg.subsystems[1];
        assert_eq!((b.allowed_hosts.clone(), b.ports.clone(), b.cntlids.clone()), (None, None, 100..=199));
        let n = &b.namespaces[0];
        assert_eq!((n.nsid, n.block_size, n.read_only, n.ana_group), (Some(10), 512, true, 3));
        assert_eq!(n.ids.eui64, Some([0x00, 0x50, 0xc2, 0xff, 0xfe, 0x00, 0x00, 0x01]));
        assert_eq!(n.ids.nguid.map(|g| g[0]), Some(0x1b), "the bdev's UUID, as SPDK fills it in");
        assert_eq!(n.reservations_file.as_deref(), Some(Path::new("/var/lib/spdk/golden.ptpl")));
        assert_eq!(n.reservations_format, crate::config::ReservationsFormat::Spdk);
        assert_eq!(cfg.subsystems[2].ports, Some(vec![]));

        let says = [
            "key \"lost\" cannot be read",
            "host nqn.2014-08.org.example:lost left out",
            "the \"RDMA\" transport left out",
            "referral 192.0.2.10:4420 left out: it names subsystem nqn.2016-06.io.spdk:remote",
            "a listener of nqn.2016-06.io.spdk:cnode1 left out: \"RDMA\" transport",
            "listener 192.0.2.5:4430 of nqn.2016-06.io.spdk:cnode3 left out: it requires TLS",
            "discovery is answered on every port here",
            "host nqn.2014-08.org.example:stranger left out of its hosts",
            "bdev Malloc0's r_mbytes_per_sec left out",
            "namespace 4 left out: bdev Null0: a null bdev",
            "namespace 5 left out: bdev MallocMd: it has 8 bytes of metadata",
            "namespace 6 left out: bdev Nvme0n1 is a namespace of NVMe controller Nvme0",
            "namespace 7 left out: bdev lvs/lv0: made by bdev_lvol_create",
            "namespace 9 left out: bdev Remoten1 is a namespace of NVMe-oF controller Remote (tcp)",
            "namespace 11 left out: bdev Zoned1: a zoned bdev: its zone capacity of 3000 blocks is not a power of two",
            "namespace 12: SPDK exports a multiple of 2 zones (optimal_open_zones), this target every whole zone of /srv/zoned.img",
            "/srv/zoned.img does not exist here (exported as a file)",
            "/var/lib/spdk/uring0.img does not exist here",
            "subsystem nqn.2016-06.io.spdk:cnode3 has no TCP listener",
        ];
        crate::nvmetcli::tests::assert_notes(&c, &says);
    }

    /// SPDK v22 saved listeners before hosts, and `--with-batches` nests
    /// calls in arrays; neither changes the result. A device node missing
    /// here is still exported as a device.
    #[test]
    fn older_layouts_and_batches() {
        let json = format!(
            r#"{{"subsystems": [
  {{"subsystem": "bdev", "config": [[{{"method": "bdev_aio_create", "params": {{"name": "a", "filename": "/dev/disk/by-id/nvme-x"}}}}]]}},
  {{"subsystem": "nvmf", "config": [
    {{"method": "nvmf_set_config", "params": {{"discovery_filter": "transport,address"}}}},
    {{"method": "nvmf_subsystem_add_listener", "params": {{"nqn": "nqn.2016-06.io.spdk:a",
      "listen_address": {{"trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "4420"}}}}}},
    [{{"method": "nvmf_create_subsystem", "params": {{"nqn": "nqn.2016-06.io.spdk:a"}}}},
     {{"method": "nvmf_subsystem_add_host", "params": {{"nqn": "nqn.2016-06.io.spdk:a", "host": "{HOST1}"}}}}],
    {{"method": "nvmf_subsystem_add_ns", "params": {{"nqn": "nqn.2016-06.io.spdk:a", "namespace": {{"nsid": 1, "bdev_name": "a"}}}}}}
  ]}}
]}}"#
        );
        let c = convert(&json, |_| DeviceKind::Missing, read_key).unwrap();
        let cfg = TargetConfig::from_toml(&c.toml).unwrap();
        assert_eq!(cfg.listen.iter().map(|a| a.to_string()).collect::<Vec<_>>(), ["127.0.0.1:4420"]);
        assert_eq!(cfg.discovery_filter.to_string(), "transport,address");
        let s = &cfg.subsystems[0];
        assert_eq!((s.allowed_hosts.clone(), s.ports.clone()), (Some(vec![HOST1.to_string()]), None));
        assert!(
            matches!(&s.namespaces[0].source, NamespaceSource::Block { path, .. }
                if path == Path::new("/dev/disk/by-id/nvme-x")),
            "{:?}",
            s.namespaces[0].source
        );
        // No UUID anywhere (an old bdev): zeroes, nothing derived.
        assert_eq!((s.namespaces[0].ids.uuid, s.namespaces[0].ids.nguid), (Some([0; 16]), Some([0; 16])));
        for says in ["does not exist here (exported as a block device)", "no TCP transport"] {
            assert!(c.notes.iter().any(|n| n.contains(says)), "no note {says:?}: {:?}", c.notes);
        }
    }

    #[test]
    fn bad_input() {
        for (json, says) in [
            ("", "not an SPDK configuration"),
            ("[1, 2]", "no \"subsystems\" array"),
            (r#"{"ports": []}"#, "no \"subsystems\" array"),
            // nvmetcli's file is not SPDK's.
            (r#"{"hosts": [], "ports": [], "subsystems": [{"nqn": "x"}]}"#, ""),
        ] {
            match convert(json, kind, read_key) {
                Err(e) => assert!(e.contains(says), "{json}: {e}"),
                // An nvmetcli file has a subsystems array but no sections:
                // nothing converts, which the notes say.
                Ok(c) => {
                    assert!(c.notes.iter().any(|n| n.contains("no TCP listener")), "{json}: {:?}", c.notes)
                }
            }
        }
        // A serial SPDK would not take either: the result is checked.
        let long = r#"{"subsystems": [{"subsystem": "nvmf", "config": [
            {"method": "nvmf_create_subsystem", "params": {"nqn": "nqn.2016-06.io.spdk:x", "serial_number": "this serial is far too long to fit"}}]}]}"#;
        let e = convert(long, kind, read_key).unwrap_err();
        assert!(e.contains("not valid here") && e.contains("serial"), "{e}");
    }
}
