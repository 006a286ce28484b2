//! Converting a Linux kernel target (nvmet) configuration, as `nvmetcli save`
//! writes it (`/etc/nvmet/config.json`), into this target's TOML
//! configuration: `nvmeof-target import-nvmetcli` for an administrator moving
//! from nvmet.
//!
//! nvmetcli's dump (`nvmet/nvme.py`, `CFSNode::dump`) is configfs read back:
//! each object's writable attributes by group (`attr_serial` is
//! `"attr": {"serial": ...}`, every value the text the file holds), `enable`
//! where the object has one, and its links (`ports[].subsystems`,
//! `subsystems[].allowed_hosts`). What maps:
//! - TCP ports (`ports/N`) become `[[port]]` tables with `portid = N`, in port
//!   number order, with their ANA group states, in-capsule data size and
//!   queue size (`param_inline_data_size`, `param_max_queue_size`, as nvmet
//!   applies them: hosts keep their IOCCSZ and MQES); other transports are
//!   left out.
//! - Each subsystem keeps its NQN, model, serial, firmware, IEEE OUI,
//!   controller ID range, `qid_max` (`max_io_queues`), allowed hosts (when
//!   `allow_any_host` is 0) and the ports it is linked to (`ports`, left out
//!   when it is on every port), so hosts see the same identity.
//! - Each enabled namespace keeps its NSID, `device_path` (a block device or
//!   a file, by what the path is here), UUID and NGUID, and no EUI-64, as
//!   nvmet reports them (hosts match namespaces by them), ANA group and
//!   `resv_enable`; files keep nvmet's block size (the file system's, at
//!   most 4 KiB) and direct I/O (`buffered_io = false`: nvmet's
//!   `buffered_io` is 0 unless set, and nvmetcli does not save it).
//! - Referrals become `[[referral]]` tables, each listed through the ports
//!   whose `referrals` held it (`ports`, left out when that is every port),
//!   as nvmet lists the asking port's own.
//! - `discovery_filter = "address,svcid"`: the discovery log lists to a host
//!   the port it asks through only, as nvmet's does.
//!
//! nvmetcli does not save nvmet's `discovery_nqn`: give `discovery_nqn` by
//! hand where nvmet had one.
//!
//! What does not map is said in a note (a comment at the top of the output,
//! and on stderr): passthrough subsystems, disabled namespaces, ports of
//! other transports or that require TLS, protection information. The output
//! is checked by parsing it as a [`TargetConfig`], so what this returns
//! starts (given the files and devices it names).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::config::TargetConfig;

mod export;
pub use export::{export, Exported};

/// Where nvmetcli saves and restores by default (`DEFAULT_SAVE_FILE`).
pub const DEFAULT_SAVE_FILE: &str = "/etc/nvmet/config.json";

/// What a namespace's `device_path` is on this machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A block device: exported as `block`.
    Block,
    /// A regular file: exported as `file`, with the block size nvmet gives
    /// it: its file system's block size, at most 4 KiB
    /// (`nvmet_file_ns_enable`: `min(i_blkbits, 12)`).
    File(u32),
    /// Nothing there (yet): exported as `file` with 4 KiB blocks (what nvmet
    /// gives a file on ext4, XFS or tmpfs), with a note.
    Missing,
}

impl DeviceKind {
    /// What `path` is on this machine (symbolic links followed).
    pub fn of(path: &Path) -> Self {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        match std::fs::metadata(path) {
            Ok(m) if m.file_type().is_block_device() => Self::Block,
            // st_blksize is 1 << i_blkbits on Linux file systems.
            Ok(m) => Self::File((m.blksize() as u32).clamp(512, 4096)),
            Err(_) => Self::Missing,
        }
    }
}

/// A converted configuration.
#[derive(Debug)]
pub struct Converted {
    /// The TOML configuration (`serve --config`), notes as comments on top.
    pub toml: String,
    /// What was left out or changed, one sentence each.
    pub notes: Vec<String>,
}

impl Converted {
    /// The configuration: `title` and the notes as comments, then `body`,
    /// checked by parsing it as a [`TargetConfig`].
    pub(crate) fn finish(title: &str, notes: Vec<String>, body: &str) -> Result<Self, String> {
        let mut toml = format!("# {title}\n");
        for n in &notes {
            let _ = writeln!(toml, "# note: {n}");
        }
        toml.push('\n');
        toml.push_str(body);
        TargetConfig::from_toml(&toml)
            .map_err(|e| format!("the converted configuration is not valid here: {e}"))?;
        Ok(Converted { toml, notes })
    }
}

/// A group of configfs attributes: name → the text the file held.
type Attrs = BTreeMap<String, Value>;

#[derive(Deserialize, Default)]
#[serde(default)]
struct Saved {
    ports: Vec<SavedPort>,
    subsystems: Vec<SavedSubsystem>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SavedPort {
    portid: Option<u16>,
    addr: Attrs,
    param: Attrs,
    subsystems: Vec<String>,
    ana_groups: Vec<SavedAnaGroup>,
    referrals: Vec<SavedReferral>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SavedAnaGroup {
    grpid: u32,
    ana: Attrs,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SavedReferral {
    name: String,
    addr: Attrs,
    enable: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SavedSubsystem {
    nqn: String,
    attr: Attrs,
    allowed_hosts: Vec<String>,
    namespaces: Vec<SavedNamespace>,
    passthru: Vec<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SavedNamespace {
    nsid: u32,
    enable: Option<i64>,
    device: Attrs,
    ana: Attrs,
    ana_grpid: Option<u32>,
    resv: Attrs,
}

/// An attribute's text (nvmetcli saves files' contents as strings; a few
/// keys are numbers), trimmed; `None` when absent or empty.
fn text(attrs: &Attrs, key: &str) -> Option<String> {
    let s = match attrs.get(key)? {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => (*b as u8).to_string(),
        _ => return None,
    };
    (!s.is_empty()).then_some(s)
}

/// A number nvmet shows in decimal or, like `attr_ieee_oui`, as `0x...`.
fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// nvmet-tcp's in-capsule data size where a port sets none
/// (`NVMET_TCP_DEF_INLINE_DATA_SIZE`, 4 pages).
const NVMET_TCP_INLINE_DATA_SIZE: u64 = 16384;
/// nvmet's queue size bounds (`NVMET_MIN_QUEUE_SIZE`, `NVMET_MAX_QUEUE_SIZE`).
const NVMET_QUEUE_SIZES: (u64, u64) = (16, 1024);

/// A port's `in_capsule_data` and `max_queue_entries`: what nvmet gives
/// hosts there, from its `param_inline_data_size` and `param_max_queue_size`
/// (-1, "unset", is what they read before the port is first enabled).
/// nvmet-tcp sets an unset inline size to 16 KiB, and `nvmet_enable_port`
/// clamps the queue size to 16..=1024 (unset: 1024). Identify IOCCSZ counts
/// 16-byte units, so hosts were told the size rounded down to a multiple of
/// 16; here it must be one, and at most 1 MiB.
fn port_params(param: &Attrs, id: u16, notes: &mut Vec<String>) -> (u64, u64) {
    let value = |k: &str| text(param, k).filter(|v| !v.starts_with('-')).and_then(|v| number(&v));
    let inline = value("inline_data_size").unwrap_or(NVMET_TCP_INLINE_DATA_SIZE);
    let in_capsule = inline.min(1 << 20) / 16 * 16;
    if in_capsule != inline {
        notes.push(format!(
            "port {id}: in-capsule data {in_capsule} bytes (param_inline_data_size {inline}: a multiple of 16 up to 1 MiB here)"
        ));
    }
    let (lo, hi) = NVMET_QUEUE_SIZES;
    (in_capsule, value("max_queue_size").unwrap_or(hi).clamp(lo, hi))
}

/// `IP:PORT` of an `addr` group (`[IP]:PORT` for `adrfam` ipv6).
fn socket_address(addr: &Attrs, traddr: &str, trsvcid: &str) -> String {
    match text(addr, "adrfam").as_deref() {
        Some("ipv6") => format!("[{traddr}]:{trsvcid}"),
        _ => format!("{traddr}:{trsvcid}"),
    }
}

/// A TOML string literal.
pub(crate) fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Converts nvmetcli's saved JSON; `kind` says what each namespace's device
/// path is ([`DeviceKind::of`] on the machine that will run the target).
pub fn convert(json: &str, kind: impl Fn(&Path) -> DeviceKind) -> Result<Converted, String> {
    let bad = |e: String| format!("not an nvmetcli configuration: {e}");
    let value: Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    if !value.is_object() {
        return Err(bad("not a JSON object".into()));
    }
    let saved: Saved = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
    let mut notes = Vec::new();
    // nvmet's discovery log lists the port a host asks through, not the
    // others (`nvmet_execute_disc_get_log_page` walks `req->port`).
    let mut body = format!("discovery_filter = \"{}\"\n\n", crate::core::DiscoveryFilter::NVMET);

    // Ports, in port number order (a TCP port only).
    let mut ports: Vec<&SavedPort> = Vec::new();
    let mut saved_ports: Vec<&SavedPort> = saved.ports.iter().collect();
    saved_ports.sort_by_key(|p| p.portid);
    for p in saved_ports {
        let Some(id) = p.portid else {
            notes.push("a port without a portid: left out".into());
            continue;
        };
        let trtype = text(&p.addr, "trtype").unwrap_or_default();
        if trtype != "tcp" {
            notes
                .push(format!("port {id} ({trtype:?} transport) left out: this target speaks NVMe/TCP only"));
            continue;
        }
        // nvmet 6.7+: addr_tsas "tls1.3" with treq "required" takes TLS only.
        let tls = text(&p.addr, "tsas").is_some_and(|t| t.starts_with("tls"));
        let required = text(&p.addr, "treq").is_some_and(|t| t == "required");
        if tls && required {
            notes.push(format!(
                "port {id} left out: it requires TLS, which this target does not offer (hosts there connect with --tls)"
            ));
            continue;
        }
        if tls {
            notes.push(format!("port {id}: TLS is optional there; here hosts connect without it"));
        }
        let Some(traddr) = text(&p.addr, "traddr") else {
            notes.push(format!("port {id} left out: no addr_traddr"));
            continue;
        };
        let trsvcid = text(&p.addr, "trsvcid").unwrap_or_else(|| "4420".into());
        let listen = socket_address(&p.addr, &traddr, &trsvcid);
        if text(&p.param, "pi_enable").is_some_and(|v| v != "0") {
            notes.push(format!("port {id}: protection information (param_pi_enable) is not offered here"));
        }
        let _ = writeln!(body, "[[port]]\nlisten = {}\nportid = {id}", quoted(&listen));
        let (in_capsule, queue) = port_params(&p.param, id, &mut notes);
        let _ = writeln!(body, "in_capsule_data = {in_capsule}\nmax_queue_entries = {queue}");
        let mut groups: Vec<&SavedAnaGroup> = p.ana_groups.iter().collect();
        groups.sort_by_key(|g| g.grpid);
        let states: Vec<String> = groups
            .iter()
            .filter_map(|g| text(&g.ana, "state").map(|s| format!("{} = {}", g.grpid, quoted(&s))))
            .collect();
        if !states.is_empty() {
            let _ = writeln!(body, "ana_groups = {{ {} }}", states.join(", "));
        }
        body.push('\n');
        ports.push(p);
    }
    if ports.is_empty() {
        notes.push("no TCP port: the target listens on its default address (0.0.0.0:4420)".into());
    }

    // Referrals: each port's own (nvmet lists the asking port's only), an
    // address referred to the same way by several ports as one referral
    // with those ports (all of them: no `ports`).
    let mut referrals: Vec<(String, u16, Vec<u16>)> = Vec::new();
    for p in &ports {
        let id = p.portid.unwrap_or_default();
        for r in &p.referrals {
            if r.enable == Some(0) {
                continue;
            }
            let trtype = text(&r.addr, "trtype").unwrap_or_default();
            if trtype != "tcp" {
                notes.push(format!(
                    "referral {:?} of port {id} ({trtype:?} transport) left out: referrals here are NVMe/TCP",
                    r.name
                ));
                continue;
            }
            let (Some(traddr), Some(trsvcid)) = (text(&r.addr, "traddr"), text(&r.addr, "trsvcid")) else {
                notes.push(format!("referral {:?} of port {id} left out: no address", r.name));
                continue;
            };
            let address = socket_address(&r.addr, &traddr, &trsvcid);
            let portid = text(&r.addr, "portid").and_then(|v| number(&v)).unwrap_or(0) as u16;
            if referrals.iter().any(|(a, _, on)| *a == address && on.contains(&id)) {
                notes.push(format!(
                    "referral {:?} of port {id} left out: the port already refers to {address}",
                    r.name
                ));
                continue;
            }
            match referrals.iter_mut().find(|(a, pid, _)| *a == address && *pid == portid) {
                Some((_, _, on)) => on.push(id),
                None => referrals.push((address, portid, vec![id])),
            }
        }
    }
    let all: Vec<u16> = ports.iter().map(|p| p.portid.unwrap_or_default()).collect();
    for (address, portid, on) in &referrals {
        let _ = writeln!(body, "[[referral]]\naddress = {}\nportid = {portid}", quoted(address));
        if *on != all {
            let ids: Vec<String> = on.iter().map(u16::to_string).collect();
            let _ = writeln!(body, "ports = [{}]", ids.join(", "));
        }
        body.push('\n');
    }

    for s in &saved.subsystems {
        let nqn = &s.nqn;
        // nvmetcli saves a `passthru` entry for every subsystem where the
        // kernel has passthrough (the configfs directory is always there,
        // its unset device_path reading "(null)" on 6.12); one in use is
        // enabled.
        let passthru =
            s.passthru.iter().any(|p| p.get("enable").and_then(Value::as_i64).is_some_and(|e| e != 0));
        if passthru {
            notes.push(format!(
                "subsystem {nqn} left out: it passes an NVMe controller through (passthru), which this target does not"
            ));
            continue;
        }
        let _ = writeln!(body, "[[subsystem]]\nnqn = {}", quoted(nqn));
        for (key, attr) in [("model", "model"), ("serial", "serial"), ("firmware", "firmware")] {
            if let Some(v) = text(&s.attr, attr) {
                let _ = writeln!(body, "{key} = {}", quoted(&v));
            }
        }
        if let Some(oui) = text(&s.attr, "ieee_oui").and_then(|v| number(&v)).filter(|&v| v != 0) {
            let _ = writeln!(body, "ieee_oui = 0x{oui:06x}");
        }
        let min = text(&s.attr, "cntlid_min").and_then(|v| number(&v)).filter(|&v| v != 1);
        let max = text(&s.attr, "cntlid_max").and_then(|v| number(&v)).filter(|&v| v != 0xFFEF);
        for (key, v) in [("cntlid_min", min), ("cntlid_max", max)] {
            if let Some(v) = v {
                let _ = writeln!(body, "{key} = {v}");
            }
        }
        // nvmet's default qid_max is NVMET_NR_QUEUES (128), this target's limit too.
        if let Some(q) = text(&s.attr, "qid_max").and_then(|v| number(&v)).filter(|&q| q < 128) {
            let _ = writeln!(body, "max_io_queues = {q}");
        }
        if text(&s.attr, "pi_enable").is_some_and(|v| v != "0") {
            notes.push(format!(
                "subsystem {nqn}: protection information (attr_pi_enable) is not offered here"
            ));
        }
        if text(&s.attr, "allow_any_host").is_some_and(|v| v == "0") {
            let hosts: Vec<String> = s.allowed_hosts.iter().map(|h| quoted(h)).collect();
            let _ = writeln!(body, "allowed_hosts = [{}]", hosts.join(", "));
            if hosts.is_empty() {
                notes.push(format!("subsystem {nqn} allows no host (allow_any_host 0, no allowed_hosts)"));
            }
        }
        let linked: Vec<u16> =
            ports.iter().filter(|p| p.subsystems.contains(nqn)).filter_map(|p| p.portid).collect();
        if linked.len() != ports.len() {
            let ids: Vec<String> = linked.iter().map(u16::to_string).collect();
            let _ = writeln!(body, "ports = [{}]", ids.join(", "));
            if linked.is_empty() {
                notes.push(format!("subsystem {nqn} is linked to no TCP port: configured, not exported"));
            }
        }
        for n in &s.namespaces {
            if n.enable == Some(0) {
                notes.push(format!("subsystem {nqn} namespace {} left out: disabled in nvmet", n.nsid));
                continue;
            }
            let Some(path) = text(&n.device, "path") else {
                notes.push(format!("subsystem {nqn} namespace {} left out: no device_path", n.nsid));
                continue;
            };
            let _ = writeln!(body, "\n[[subsystem.namespace]]\nnsid = {}", n.nsid);
            match kind(Path::new(&path)) {
                DeviceKind::Block => {
                    let _ = writeln!(body, "block = {}", quoted(&path));
                }
                k => {
                    let block_size = match k {
                        DeviceKind::File(bs) => bs,
                        _ => {
                            notes.push(format!(
                                "subsystem {nqn} namespace {}: {path} does not exist here (exported as a file \
                                 with 4 KiB blocks)",
                                n.nsid
                            ));
                            4096
                        }
                    };
                    let _ = writeln!(
                        body,
                        "file = {}\nbuffered_io = false\nblock_size = {block_size}",
                        quoted(&path)
                    );
                }
            }
            // The identifiers exactly as nvmet reports them, unset ones
            // (all zeroes) included: this target would otherwise derive an
            // NGUID and EUI-64, and a host reconnecting after the move would
            // see the namespace's identity change (and drop it).
            for key in ["uuid", "nguid"] {
                if let Some(id) = text(&n.device, key) {
                    let _ = writeln!(body, "{key} = {}", quoted(&id));
                }
            }
            // nvmet reports no EUI-64.
            let _ = writeln!(body, "eui64 = \"0000000000000000\"");
            let group =
                n.ana_grpid.or_else(|| text(&n.ana, "grpid").and_then(|v| number(&v)).map(|v| v as u32));
            if let Some(g) = group.filter(|&g| g != 1) {
                let _ = writeln!(body, "ana_group = {g}");
            }
            if text(&n.resv, "enable").is_some_and(|v| v != "0") {
                let _ = writeln!(body, "reservations = true");
            }
        }
        body.push('\n');
    }

    Converted::finish(
        "Converted from an nvmet configuration saved by nvmetcli (nvmeof-target import-nvmetcli).",
        notes,
        &body,
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::NamespaceSource;
    use nvmeof_common::spec::log::AnaState;

    const HOST1: &str = "nqn.2014-08.org.nvmexpress:uuid:4a2a1c9e-0000-4000-8000-000000000001";
    const HOST2: &str = "nqn.2014-08.org.nvmexpress:uuid:4a2a1c9e-0000-4000-8000-000000000002";

    /// What `nvmetcli save` writes (keys sorted, every writable attribute
    /// as its file's text) for: a TCP port 1 on IPv4 with ANA group 2
    /// non-optimized and a referral, a TCP port 2 on IPv6, an RDMA port 3;
    /// subsystem `a` open to two hosts on port 1 only (a block device, a
    /// file that is not there, a disabled namespace), `b` on ports 1 and 2
    /// (a queue limit, an OUI, a controller ID range), a passthrough
    /// subsystem and one linked to no port. nvmetcli saves an unused
    /// `passthru` entry for a subsystem where the kernel has passthrough.
    fn saved() -> String {
        format!(
            r#"{{
  "hosts": [ {{ "nqn": "{HOST1}" }}, {{ "nqn": "{HOST2}" }} ],
  "ports": [
    {{
      "addr": {{ "adrfam": "ipv6", "traddr": "fd00::5", "treq": "not specified", "trsvcid": "4421", "trtype": "tcp", "tsas": "none" }},
      "ana_groups": [ {{ "ana": {{ "state": "optimized" }}, "grpid": 1 }} ],
      "param": {{ "inline_data_size": "16384", "max_queue_size": "-1", "pi_enable": "0" }},
      "portid": 2,
      "referrals": [ {{ "addr": {{ "adrfam": "ipv4", "traddr": "192.0.2.9", "treq": "not specified", "trsvcid": "8009", "trtype": "tcp" }}, "enable": 1, "name": "r1" }},
                     {{ "addr": {{ "adrfam": "ipv4", "portid": "4", "traddr": "198.51.100.7", "treq": "not specified", "trsvcid": "8009", "trtype": "tcp" }}, "enable": 1, "name": "r2" }} ],
      "subsystems": [ "nqn.2014-08.org.example:b" ]
    }},
    {{
      "addr": {{ "adrfam": "ipv4", "traddr": "192.0.2.5", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp", "tsas": "none" }},
      "ana_groups": [ {{ "ana": {{ "state": "optimized" }}, "grpid": 1 }}, {{ "ana": {{ "state": "non-optimized" }}, "grpid": 2 }} ],
      "param": {{ "inline_data_size": "8200", "max_queue_size": "2048", "pi_enable": "0" }},
      "portid": 1,
      "referrals": [ {{ "addr": {{ "adrfam": "ipv4", "traddr": "192.0.2.9", "treq": "not specified", "trsvcid": "8009", "trtype": "tcp" }}, "enable": 1, "name": "r1" }},
                     {{ "addr": {{ "adrfam": "ipv4", "portid": "7", "traddr": "192.0.2.9", "treq": "not specified", "trsvcid": "8009", "trtype": "tcp" }}, "enable": 1, "name": "again" }} ],
      "subsystems": [ "nqn.2014-08.org.example:a", "nqn.2014-08.org.example:b" ]
    }},
    {{
      "addr": {{ "adrfam": "ipv4", "traddr": "192.0.2.5", "treq": "not specified", "trsvcid": "4420", "trtype": "rdma" }},
      "ana_groups": [], "param": {{}}, "portid": 3, "referrals": [],
      "subsystems": [ "nqn.2014-08.org.example:a" ]
    }}
  ],
  "subsystems": [
    {{
      "allowed_hosts": [ "{HOST1}", "{HOST2}" ],
      "attr": {{ "allow_any_host": "0", "cntlid_max": "65519", "cntlid_min": "1", "firmware": "6.12.11", "ieee_oui": "0x000000", "model": "Linux", "pi_enable": "0", "qid_max": "128", "serial": "8d2e3c1f9a7b6e54", "version": "1.3" }},
      "namespaces": [
        {{ "ana": {{ "grpid": "2" }}, "ana_grpid": 2, "device": {{ "nguid": "00000000-0000-0000-0000-000000000000", "p2pmem": "none", "path": "/dev/nvme0n1", "uuid": "0f5a6e38-1b2c-4d3e-8f40-5a6b7c8d9e01" }}, "enable": 1, "nsid": 1, "resv": {{ "enable": "1" }} }},
        {{ "ana": {{ "grpid": "1" }}, "ana_grpid": 1, "device": {{ "nguid": "2f2e2d2c-2b2a-2928-2726-252423222120", "path": "/srv/nvmet/disk2.img", "uuid": "0f5a6e38-1b2c-4d3e-8f40-5a6b7c8d9e02" }}, "enable": 1, "nsid": 2, "resv": {{ "enable": "0" }} }},
        {{ "ana": {{ "grpid": "1" }}, "ana_grpid": 1, "device": {{ "path": "/dev/sdb", "uuid": "0f5a6e38-1b2c-4d3e-8f40-5a6b7c8d9e03" }}, "enable": 0, "nsid": 3, "resv": {{ "enable": "0" }} }}
      ],
      "nqn": "nqn.2014-08.org.example:a",
      "passthru": [ {{ "admin_timeout": 0, "clear_ids": 1, "device": {{ "path": "(null)" }}, "enable": 0, "io_timeout": 0 }} ]
    }},
    {{
      "allowed_hosts": [],
      "attr": {{ "allow_any_host": "1", "cntlid_max": "1999", "cntlid_min": "1000", "firmware": "6.12.11", "ieee_oui": "0x0050c2", "model": "fast ssd", "pi_enable": "0", "qid_max": "4", "serial": "b-0001", "version": "1.3" }},
      "namespaces": [ {{ "ana_grpid": 1, "device": {{ "path": "/dev/nvme1n1", "uuid": "0f5a6e38-1b2c-4d3e-8f40-5a6b7c8d9e04" }}, "enable": 1, "nsid": 5 }} ],
      "nqn": "nqn.2014-08.org.example:b"
    }},
    {{
      "allowed_hosts": [], "attr": {{ "allow_any_host": "1" }}, "namespaces": [],
      "nqn": "nqn.2014-08.org.example:passthru",
      "passthru": [ {{ "admin_timeout": 0, "clear_ids": 1, "device": {{ "path": "/dev/nvme2" }}, "enable": 1, "io_timeout": 0 }} ]
    }},
    {{
      "allowed_hosts": [], "attr": {{ "allow_any_host": "1", "serial": "idle" }}, "namespaces": [],
      "nqn": "nqn.2014-08.org.example:idle"
    }}
  ]
}}"#
        )
    }

    fn kind(p: &Path) -> DeviceKind {
        match p.to_str().unwrap() {
            p if p.starts_with("/dev/") => DeviceKind::Block,
            _ => DeviceKind::Missing,
        }
    }

    #[test]
    fn converts_what_nvmetcli_saves() {
        let c = convert(&saved(), kind).unwrap();
        let cfg = TargetConfig::from_toml(&c.toml).unwrap();
        // Ports in number order, with nvmet's numbers; RDMA left out.
        let listen: Vec<String> = cfg.listen.iter().map(|a| a.to_string()).collect();
        assert_eq!(listen, ["192.0.2.5:4420", "[fd00::5]:4421"]);
        assert_eq!(cfg.port_ids, [1, 2]);
        // nvmet's in-capsule size in 16-byte units (IOCCSZ), its queue size
        // clamped to 1024; port 2's unset queue size is nvmet's 1024.
        let params: Vec<(Option<u32>, Option<u32>)> =
            cfg.port_params.iter().map(|p| (p.in_capsule_data, p.max_queue_entries)).collect();
        assert_eq!(params, [(Some(8192), Some(1024)), (Some(16384), Some(1024))]);
        let groups: Vec<(u32, AnaState)> = cfg.port_ana[0].groups.iter().map(|(g, s)| (*g, *s)).collect();
        assert_eq!(groups, [(1, AnaState::OPTIMIZED), (2, AnaState::NON_OPTIMIZED)]);
        // One referral of both ports (every port: no `ports`), one of port 2
        // only; port 1's second one to the same address is left out.
        let r: Vec<String> =
            cfg.referrals.iter().map(|r| format!("{} {} {:?}", r.addr, r.portid, r.ports)).collect();
        assert_eq!(r, ["192.0.2.9:8009 0 None", "198.51.100.7:8009 4 Some([2])"]);

        let nqns: Vec<&str> = cfg.subsystems.iter().map(|s| s.nqn.as_str()).collect();
        assert_eq!(
            nqns,
            ["nqn.2014-08.org.example:a", "nqn.2014-08.org.example:b", "nqn.2014-08.org.example:idle"]
        );
        let a = &cfg.subsystems[0];
        assert_eq!(a.allowed_hosts, Some(vec![HOST1.to_string(), HOST2.to_string()]));
        assert_eq!(a.ports, Some(vec![1]));
        assert_eq!(
            (a.model.as_str(), a.serial.as_deref(), a.firmware.as_deref()),
            ("Linux", Some("8d2e3c1f9a7b6e54"), Some("6.12.11"))
        );
        assert_eq!((a.ieee_oui, a.max_io_queues, a.cntlids.clone()), (None, None, 1..=0xFFEF));
        assert_eq!(a.namespaces.len(), 2, "the disabled one left out");
        let (n1, n2) = (&a.namespaces[0], &a.namespaces[1]);
        assert_eq!((n1.nsid, n2.nsid), (Some(1), Some(2)));
        assert!(
            matches!(&n1.source, NamespaceSource::Block { path, .. } if path == Path::new("/dev/nvme0n1")),
            "{:?}",
            n1.source
        );
        assert!(
            matches!(&n2.source, NamespaceSource::File { path, .. } if path == Path::new("/srv/nvmet/disk2.img")),
            "{:?}",
            n2.source
        );
        assert_eq!((n1.ana_group, n1.reservations), (2, true));
        assert_eq!((n2.ana_group, n2.reservations), (1, false));
        assert_eq!(n1.ids.uuid.map(|u| u[15]), Some(0x01));
        assert_eq!(n1.ids.nguid, Some([0; 16]), "nvmet's zero NGUID stays zero (not reported)");
        assert_eq!((n1.ids.eui64, n2.ids.eui64), (Some([0; 8]), Some([0; 8])), "nvmet reports no EUI-64");
        assert_eq!(n2.ids.nguid.map(|g| g[0]), Some(0x2f));
        assert!(c.toml.contains("file = \"/srv/nvmet/disk2.img\"\nbuffered_io = false"), "{}", c.toml);
        assert_eq!((n1.block_size, n2.block_size), (512, 4096), "a device's own; nvmet's for a file");

        let b = &cfg.subsystems[1];
        assert_eq!((b.allowed_hosts.clone(), b.ports.clone()), (None, None), "any host, every port");
        assert_eq!(
            (b.model.as_str(), b.ieee_oui, b.max_io_queues, b.cntlids.clone()),
            ("fast ssd", Some(0x0050c2), Some(4), 1000..=1999)
        );
        assert_eq!(b.namespaces[0].nsid, Some(5));
        assert_eq!(cfg.subsystems[2].ports, Some(vec![]));

        let says = [
            "port 3 (\"rdma\" transport) left out",
            "subsystem nqn.2014-08.org.example:passthru left out",
            "namespace 3 left out: disabled in nvmet",
            "/srv/nvmet/disk2.img does not exist here",
            "subsystem nqn.2014-08.org.example:idle is linked to no TCP port",
            "port 1: in-capsule data 8192 bytes (param_inline_data_size 8200",
            "referral \"again\" of port 1 left out: the port already refers to 192.0.2.9:8009",
        ];
        assert_notes(&c, &says);
    }

    /// `c` has exactly one note for each of `says` (each in its TOML too).
    pub(crate) fn assert_notes(c: &Converted, says: &[&str]) {
        for says in says {
            assert!(c.notes.iter().any(|n| n.contains(says)), "no note {says:?}: {:#?}", c.notes);
            assert!(c.toml.lines().any(|l| l.starts_with("# note: ") && l.contains(says)), "{}", c.toml);
        }
        assert_eq!(c.notes.len(), says.len(), "{:#?}", c.notes);
    }

    #[test]
    fn tls_ports_and_bad_input() {
        let port = |tsas: &str, treq: &str| {
            format!(
                r#"{{"ports": [{{"portid": 1, "addr": {{"adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "4420", "trtype": "tcp", "tsas": "{tsas}", "treq": "{treq}"}}, "subsystems": []}}], "subsystems": []}}"#
            )
        };
        let c = convert(&port("tls1.3", "required"), kind).unwrap();
        assert_eq!(TargetConfig::from_toml(&c.toml).unwrap().listen, [crate::config::default_listen()]);
        assert!(c.notes.iter().any(|n| n.contains("requires TLS")), "{:?}", c.notes);
        let c = convert(&port("tls1.3", "not required"), kind).unwrap();
        assert_eq!(TargetConfig::from_toml(&c.toml).unwrap().listen[0].to_string(), "127.0.0.1:4420");
        assert!(c.notes.iter().any(|n| n.contains("TLS is optional there")), "{:?}", c.notes);

        // A referral of another transport is left out, with a note.
        let rdma_referral = r#"{"ports": [{"portid": 1, "addr": {"trtype": "tcp", "adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "4420"},
            "referrals": [{"name": "r", "enable": 1, "addr": {"trtype": "rdma", "adrfam": "ipv4", "traddr": "192.0.2.9", "trsvcid": "4420"}}]}]}"#;
        let c = convert(rdma_referral, kind).unwrap();
        assert!(TargetConfig::from_toml(&c.toml).unwrap().referrals.is_empty());
        assert!(
            c.notes.iter().any(|n| n.contains("referral \"r\" of port 1 (\"rdma\" transport) left out")),
            "{:?}",
            c.notes
        );

        assert!(convert("{", kind).unwrap_err().contains("not an nvmetcli configuration"));
        assert!(convert("[]", kind).unwrap_err().contains("not an nvmetcli configuration"));
        let bad_serial = r#"{"subsystems": [{"nqn": "nqn.2014-08.org.example:x", "attr": {"serial": "this serial is far too long to fit"}}]}"#;
        let e = convert(bad_serial, kind).unwrap_err();
        assert!(e.contains("subsystem[0].serial"), "{e}");
        // An empty configuration: nothing exported, the default port.
        let c = convert("{}", kind).unwrap();
        assert!(TargetConfig::from_toml(&c.toml).unwrap().subsystems.is_empty());
        assert!(c.notes.iter().any(|n| n.contains("no TCP port")), "{:?}", c.notes);
    }
}
