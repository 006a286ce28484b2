//! Converting this target's configuration into SPDK's: the JSON `save_config`
//! writes and `nvmf_tgt --json` (or `rpc.py load_config`) loads, for
//! `nvmeof-target export-spdk`, an administrator moving a configuration to
//! SPDK (or back after `import-spdk`).
//!
//! The calls are those [`super::convert`] reads, in the order SPDK saves
//! them: the `keyring` section (a `keyring_file_add_key` per DH-HMAC-CHAP
//! key, whose file this export writes), the `bdev` section (one bdev per
//! namespace: `bdev_malloc_create` for RAM, `bdev_aio_create` for a file or
//! block device, `bdev_zone_block_create` over it for a zoned namespace,
//! `bdev_set_qos_limit` for rate limits; then `bdev_wait_for_examine`), and
//! the `nvmf` section (the discovery filter, the TCP transport with this target's limits,
//! referrals, the discovery subsystem's listeners on every port, then each
//! subsystem with its listeners, hosts and namespaces). Hosts see the same
//! identity where SPDK can show it: serial and model numbers, controller
//! ID range, each namespace's NSID, UUID, NGUID and EUI-64 (the derived
//! ones written out), ANA group, and the hosts it is shown to; the queue
//! size, I/O queue count, in-capsule data size and MDTS.
//!
//! What SPDK cannot take is said in a note: its controllers report SPDK's
//! firmware revision and Intel's IEEE OUI, it has no per-subsystem I/O queue
//! limit, no per-port queue limits or port IDs, no zone open limits, and a
//! listener's ANA state is set by RPC, not saved.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use nvmeof_common::spec::log::AnaState;
use nvmeof_common::spec::nqn::format_uuid;

use super::{DISCOVERY_NQN, SPDK_CNTLIDS, SPDK_IEEE_OUI};
use crate::config::{NamespaceSource, ReservationsFormat, TargetConfig};
use crate::core::subsystem::Subsystem;

/// SPDK's TCP transport moves data in buffers of `io_unit_size` and a
/// command in at most `SPDK_NVMF_MAX_SGL_ENTRIES` (16) of them.
const SPDK_MAX_SGL_ENTRIES: u64 = 16;
/// The highest `sock_priority` SPDK's TCP transport takes
/// (`SPDK_NVMF_TCP_DEFAULT_MAX_SOCK_PRIORITY`; `nvmf_tcp_create` fails above).
const SPDK_MAX_SOCK_PRIORITY: u32 = 16;
/// SPDK's default `io_unit_size` for TCP (`SPDK_NVMF_TCP_DEFAULT_IO_UNIT_SIZE`).
const SPDK_IO_UNIT_SIZE: u64 = 131072;
/// A subsystem's most namespaces unless `max_namespaces` says otherwise
/// (`NVMF_SUBSYSTEM_DEFAULT_NAMESPACES`): its highest NSID and ANA group ID.
const SPDK_DEFAULT_NAMESPACES: u32 = 32;

/// A configuration converted for SPDK.
#[derive(Debug)]
pub struct Exported {
    /// The JSON `nvmf_tgt --json` loads, as `save_config` writes it.
    pub json: String,
    /// The keyring's key files to write (path, secret): SPDK reads each
    /// DH-HMAC-CHAP key from a file only its owner may read.
    pub key_files: Vec<(PathBuf, String)>,
    /// What was left out or changed, one sentence each.
    pub notes: Vec<String>,
}

/// `listen_address` / `address` of a TCP address, as SPDK saves it.
fn tcp_address(addr: std::net::SocketAddr) -> Value {
    json!({
        "trtype": "TCP",
        "adrfam": if addr.is_ipv4() { "IPv4" } else { "IPv6" },
        "traddr": addr.ip().to_string(),
        "trsvcid": addr.port().to_string(),
    })
}

/// 32 (NGUID) or 16 (EUI-64) upper-case hex digits, as SPDK saves them.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

fn call(method: &str, params: Value) -> Value {
    json!({ "method": method, "params": params })
}

/// Converts `cfg`. DH-HMAC-CHAP keys become keyring files in `key_dir`
/// (named in [`Exported::key_files`] for the caller to write); without one,
/// hosts with keys are left out, never let in without them.
pub fn export(cfg: &TargetConfig, key_dir: Option<&Path>) -> Exported {
    let mut notes = Vec::new();
    let mut keyring = Vec::new();
    let mut key_files = Vec::new();
    let mut bdevs = Vec::new();
    let mut nvmf = Vec::new();

    // The TCP transport: this target's limits, which SPDK gives every
    // controller (`nvmf_tcp_create`). A command moves in at most 16 buffers
    // of `io_unit_size` (128 KiB unless SPDK's iobuf pool is given larger
    // ones), and the queue depth is 16 bits there.
    let l = &cfg.limits;
    let mut max_io_size = 4096u64 << l.mdts;
    let most = SPDK_MAX_SGL_ENTRIES * SPDK_IO_UNIT_SIZE;
    if max_io_size > most {
        notes.push(format!(
            "commands of at most {} KiB, not {} KiB: SPDK's TCP transport moves a command in 16 buffers of 128 KiB \
             (iobuf_set_options large_bufsize and the transport's io_unit_size raise that)",
            most >> 10,
            max_io_size >> 10
        ));
        max_io_size = most;
    }
    let depth = l.max_queue_entries.min(u32::from(u16::MAX));
    if depth != l.max_queue_entries {
        notes.push(format!("queues of {depth} entries, not {} (SPDK's most)", l.max_queue_entries));
    }
    // SPDK's save_config writes the discovery filter first, in the target's
    // options (`nvmf_subsystem_write_config_json`).
    nvmf.push(call("nvmf_set_config", json!({ "discovery_filter": cfg.discovery_filter.to_string() })));
    nvmf.push(call(
        "nvmf_create_transport",
        json!({
            "trtype": "TCP",
            "max_queue_depth": depth,
            "max_io_qpairs_per_ctrlr": l.max_io_queues,
            "in_capsule_data_size": l.in_capsule_data,
            "max_io_size": max_io_size,
            "io_unit_size": SPDK_IO_UNIT_SIZE.min(max_io_size),
            "sock_priority": cfg.so_priority.min(SPDK_MAX_SOCK_PRIORITY),
        }),
    ));
    if cfg.so_priority > SPDK_MAX_SOCK_PRIORITY {
        notes.push(format!(
            "socket priority {SPDK_MAX_SOCK_PRIORITY}, not {} (SPDK's TCP transport takes at most {SPDK_MAX_SOCK_PRIORITY})",
            cfg.so_priority
        ));
    }
    for r in &cfg.referrals {
        nvmf.push(call(
            "nvmf_discovery_add_referral",
            json!({ "address": tcp_address(r.addr), "secure_channel": false }),
        ));
        if r.portid != 0 {
            notes.push(format!("referral {}: SPDK's entry reports no PORTID {}", r.addr, r.portid));
        }
        if let Some(ports) = &r.ports {
            notes.push(format!(
                "referral {}: SPDK lists it through every listener, not only through ports {ports:?}",
                r.addr
            ));
        }
    }
    // Discovery is answered on every port here.
    for addr in &cfg.listen {
        nvmf.push(call(
            "nvmf_subsystem_add_listener",
            json!({ "nqn": DISCOVERY_NQN, "listen_address": tcp_address(*addr) }),
        ));
    }
    for (i, _) in cfg.listen.iter().enumerate() {
        let id = cfg.port_id(i);
        if id != i as u16 + 1 {
            notes.push(format!("port {id}: SPDK numbers its listeners itself (PORTID {} there)", i + 1));
        }
        let p = cfg.port_params(i);
        if p.in_capsule_data.is_some() || p.max_queue_entries.is_some() {
            notes.push(format!(
                "port {id}: its own in-capsule data and queue size are left out (SPDK's transport limits hold on every port)"
            ));
        }
        let ana = cfg.port_ana.get(i).cloned().unwrap_or_default();
        if ana.state != AnaState::OPTIMIZED || ana.groups.values().any(|s| *s != AnaState::OPTIMIZED) {
            notes.push(format!(
                "port {id}: SPDK saves no ANA state: set it after loading with rpc.py nvmf_subsystem_listener_set_ana_state \
                 (per subsystem, -t tcp -a ADDRESS -s PORT -n STATE -g GROUP)"
            ));
        }
    }
    if let Some(d) = &cfg.discovery_nqn {
        notes.push(format!(
            "discovery NQN {d} left out: SPDK's discovery subsystem has the well-known NQN only"
        ));
    }

    let mut next_key = 0usize;
    for (si, s) in cfg.subsystems.iter().enumerate() {
        let nqn = &s.nqn;
        let uses_ana = s.namespaces.iter().any(|n| n.ana_group != 1)
            || cfg.port_ana.iter().any(|a| a.state != AnaState::OPTIMIZED || !a.groups.is_empty());
        let mut create = json!({
            "nqn": nqn,
            "serial_number": s.serial.clone().unwrap_or_else(|| Subsystem::default_serial(nqn)),
            "model_number": s.model,
            "allow_any_host": s.allowed_hosts.is_none(),
            "min_cntlid": s.cntlids.start(),
            "max_cntlid": s.cntlids.end(),
        });
        if uses_ana {
            create["ana_reporting"] = json!(true);
        }
        // SPDK takes NSIDs and ANA group IDs up to max_namespaces (32 unless set).
        let highest = crate::config::assign_nsids(&s.namespaces)
            .map(|(nsid, n)| nsid.max(n.ana_group))
            .max()
            .unwrap_or(0);
        if highest > SPDK_DEFAULT_NAMESPACES {
            create["max_namespaces"] = json!(highest);
        }
        if (u64::from(*s.cntlids.start()), u64::from(*s.cntlids.end())) == SPDK_CNTLIDS {
            let c = create.as_object_mut().expect("an object");
            c.remove("min_cntlid");
            c.remove("max_cntlid");
        }
        nvmf.push(call("nvmf_create_subsystem", create));
        if let Some(f) = &s.firmware {
            notes.push(format!(
                "subsystem {nqn}: firmware revision {f} left out (SPDK reports its own version)"
            ));
        }
        if s.ieee_oui.is_some_and(|o| o != SPDK_IEEE_OUI) {
            notes.push(format!(
                "subsystem {nqn}: SPDK reports Intel's IEEE OUI (5CD2E4), not the one configured"
            ));
        }
        if let Some(q) = s.max_io_queues.filter(|&q| q < cfg.limits.max_io_queues) {
            notes.push(format!(
                "subsystem {nqn}: its limit of {q} I/O queues is left out (SPDK's is the transport's, {})",
                cfg.limits.max_io_queues
            ));
        }
        for (i, addr) in cfg.listen.iter().enumerate() {
            if s.ports.as_ref().is_none_or(|p| p.contains(&cfg.port_id(i))) {
                nvmf.push(call(
                    "nvmf_subsystem_add_listener",
                    json!({ "nqn": nqn, "listen_address": tcp_address(*addr) }),
                ));
            }
        }
        for host in s.allowed_hosts.iter().flatten() {
            let mut params = json!({ "nqn": nqn, "host": host });
            if let Some(k) = s.host_keys.get(host) {
                let Some(dir) = key_dir.map(|d| std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf()))
                else {
                    notes.push(format!(
                        "subsystem {nqn}: host {host} left out: it authenticates with DH-HMAC-CHAP, and SPDK reads keys \
                         from files (give --key-dir DIR to write them)"
                    ));
                    continue;
                };
                let mut add = |secret: String| {
                    let name = format!("nvmeof-key{next_key}");
                    next_key += 1;
                    let path = dir.join(&name);
                    keyring.push(call(
                        "keyring_file_add_key",
                        json!({ "name": name, "path": path.to_string_lossy() }),
                    ));
                    key_files.push((path, secret));
                    name
                };
                params["dhchap_key"] = json!(add(k.key.to_string()));
                if let Some(c) = &k.ctrl_key {
                    params["dhchap_ctrlr_key"] = json!(add(c.to_string()));
                }
            }
            nvmf.push(call("nvmf_subsystem_add_host", params));
        }

        for (nsid, n) in crate::config::assign_nsids(&s.namespaces) {
            let what = format!("subsystem {nqn} namespace {nsid}");
            // SPDK's bdev names are global: subsystem and NSID make them unique.
            let name = format!("nvmeof{}n{nsid}", si + 1);
            let (uuid, nguid, eui64) = crate::server::namespace_ids(nqn, nsid, n);
            let block_size = u64::from(n.block_size);
            match &n.source {
                NamespaceSource::Ram(bytes) => {
                    if n.zoned.is_some_and(|z| bytes % z.zone_size != 0) {
                        notes.push(format!("{what}: SPDK's zoned bdev exports whole zones only"));
                    }
                    bdevs.push(call(
                        "bdev_malloc_create",
                        json!({ "name": name, "num_blocks": bytes / block_size, "block_size": block_size, "uuid": format_uuid(&uuid) }),
                    ));
                    if n.read_only {
                        notes.push(format!("{what}: a read-only RAM namespace is writable in SPDK"));
                    }
                }
                NamespaceSource::File { path, .. } | NamespaceSource::Block { path, .. } => {
                    let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                    let mut p =
                        json!({ "name": name, "filename": path.to_string_lossy(), "readonly": n.read_only });
                    // A block device's own logical block size is what SPDK detects.
                    if let NamespaceSource::File { buffered_io, .. } = n.source {
                        p["block_size"] = json!(block_size);
                        if buffered_io {
                            notes.push(format!(
                                "{what}: SPDK's AIO bdev reads {} with O_DIRECT, past the page cache",
                                path.display()
                            ));
                        }
                    }
                    bdevs.push(call("bdev_aio_create", p));
                }
            }
            let mut bdev_name = name.clone();
            if let Some(z) = n.zoned {
                let capacity = z.zone_size / block_size;
                bdev_name = format!("{name}z");
                bdevs.push(call(
                    "bdev_zone_block_create",
                    json!({ "name": bdev_name, "base_bdev": name, "zone_capacity": capacity, "optimal_open_zones": 1 }),
                ));
                if z.max_open.is_some() || z.max_active.is_some() {
                    notes.push(format!(
                        "{what}: its open and active zone limits are left out (SPDK's zoned bdev has none)"
                    ));
                }
            }
            if n.qos.any() {
                let mut q = json!({ "name": bdev_name });
                if let Some(iops) = n.qos.iops {
                    if iops % 1000 != 0 {
                        notes.push(format!(
                            "{what}: SPDK rounds its limit of {iops} IOPS up to {} (whole thousands)",
                            iops.div_ceil(1000) * 1000
                        ));
                    }
                    q["rw_ios_per_sec"] = json!(iops);
                }
                if let Some(bytes) = n.qos.bytes_per_sec {
                    // SPDK's megabytes are MiB; a limit between two is rounded up.
                    let mib = bytes.div_ceil(1 << 20);
                    if mib << 20 != bytes {
                        notes.push(format!("{what}: its bandwidth limit is {mib} MiB/s in SPDK (whole MiB)"));
                    }
                    q["rw_mbytes_per_sec"] = json!(mib);
                }
                bdevs.push(call("bdev_set_qos_limit", q));
            }
            let mut ns = json!({
                "nsid": nsid,
                "bdev_name": bdev_name,
                "nguid": hex(&nguid),
                "eui64": hex(&eui64),
                "uuid": format_uuid(&uuid),
            });
            // SPDK puts a namespace given no group in a group of its NSID.
            if uses_ana {
                ns["anagrpid"] = json!(n.ana_group);
            }
            match (&n.reservations_file, n.reservations_format) {
                (Some(f), ReservationsFormat::Spdk) => ns["ptpl_file"] = json!(f.to_string_lossy()),
                (Some(f), ReservationsFormat::Nvmeof) => notes.push(format!(
                    "{what}: its reservations file {} is in this target's format: SPDK starts without them \
                     (reservations_format = \"spdk\" here first keeps them)",
                    f.display()
                )),
                (None, _) => {}
            }
            if n.hosts.is_some() {
                ns["no_auto_visible"] = json!(true);
            }
            nvmf.push(call("nvmf_subsystem_add_ns", json!({ "nqn": nqn, "namespace": ns })));
            for host in n.hosts.iter().flatten() {
                nvmf.push(call("nvmf_ns_add_host", json!({ "nqn": nqn, "nsid": nsid, "host": host })));
            }
        }
    }
    bdevs.push(json!({ "method": "bdev_wait_for_examine" }));
    if !key_files.is_empty() {
        // keyring_file_check_path: no group or other bits, the owner SPDK's user.
        notes.push(format!(
            "{} DH-HMAC-CHAP keys are in files readable by their owner only: SPDK must run as that user",
            key_files.len()
        ));
    }

    let root = json!({
        "subsystems": [
            { "subsystem": "keyring", "config": keyring },
            { "subsystem": "bdev", "config": bdevs },
            { "subsystem": "nvmf", "config": nvmf },
        ]
    });
    let mut json = serde_json::to_string_pretty(&root).expect("a JSON value serializes");
    json.push('\n');
    Exported { json, key_files, notes }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:4a2a1c9e-0000-4000-8000-000000000001";
    const KEY: &str = "DHHC-1:00:oCMdKPLLjLL49xAMSZHqha3+8lnvPS1oqnhp0/9+78hfhoD7:";

    /// The calls of section `name`.
    fn calls<'a>(v: &'a Value, name: &str) -> Vec<&'a Value> {
        v["subsystems"].as_array().unwrap().iter().find(|s| s["subsystem"] == name).unwrap()["config"]
            .as_array()
            .unwrap()
            .iter()
            .collect()
    }

    fn methods(v: &Value, name: &str) -> Vec<String> {
        calls(v, name).iter().map(|c| c["method"].as_str().unwrap().to_string()).collect()
    }

    fn exported(toml: &str, key_dir: Option<&Path>) -> (Value, Exported) {
        let e = export(&TargetConfig::from_toml(toml).unwrap(), key_dir);
        (serde_json::from_str(&e.json).unwrap(), e)
    }

    /// The calls SPDK's `save_config` writes, in its order: keys, bdevs
    /// (then `bdev_wait_for_examine`), the transport, referrals, the
    /// discovery listeners, each subsystem with its listeners, hosts and
    /// namespaces; identifiers as SPDK writes them (NGUID and EUI-64 as
    /// upper-case hex, the UUID dashed).
    #[test]
    fn calls_come_in_save_configs_order_and_spelling() {
        let dir = Path::new("/etc/spdk/keys");
        let (v, e) = exported(
            &format!(
                r#"discovery_filter = "svcid,address"
[[port]]
listen = "127.0.0.1:4420"
[[port]]
listen = "[::1]:4421"
[[referral]]
address = "192.0.2.10:8009"
[[subsystem]]
nqn = "nqn.2026-12.io.example:s"
serial = "SN1"
model = "M"
cntlid_min = 5
cntlid_max = 9
allowed_hosts = [{{ nqn = "{HOST}", dhchap_key = "{KEY}", dhchap_ctrl_key = "{KEY}" }}]
ports = [2]
[[subsystem.namespace]]
ram = "1M"
block_size = 4096
nguid = "000102030405060708090a0b0c0d0e0f"
eui64 = "0011223344556677"
uuid = "6e766d65-6f66-4974-8000-00000000c0de"
"#
            ),
            Some(dir),
        );
        assert_eq!(methods(&v, "keyring"), ["keyring_file_add_key", "keyring_file_add_key"]);
        assert_eq!(methods(&v, "bdev"), ["bdev_malloc_create", "bdev_wait_for_examine"]);
        assert_eq!(
            methods(&v, "nvmf"),
            [
                "nvmf_set_config",
                "nvmf_create_transport",
                "nvmf_discovery_add_referral",
                "nvmf_subsystem_add_listener",
                "nvmf_subsystem_add_listener",
                "nvmf_create_subsystem",
                "nvmf_subsystem_add_listener",
                "nvmf_subsystem_add_host",
                "nvmf_subsystem_add_ns",
            ]
        );
        let nvmf = calls(&v, "nvmf");
        assert_eq!(nvmf[0]["params"], json!({ "discovery_filter": "address,svcid" }));
        assert_eq!(
            nvmf[1]["params"],
            json!({ "trtype": "TCP", "max_queue_depth": 1024, "max_io_qpairs_per_ctrlr": 128, "in_capsule_data_size": 131072,
                    "max_io_size": 1048576, "io_unit_size": 131072, "sock_priority": 0 })
        );
        assert_eq!(nvmf[3]["params"]["nqn"], DISCOVERY_NQN);
        assert_eq!(
            nvmf[4]["params"]["listen_address"],
            json!({ "trtype": "TCP", "adrfam": "IPv6", "traddr": "::1", "trsvcid": "4421" })
        );
        assert_eq!(
            nvmf[5]["params"],
            json!({ "nqn": "nqn.2026-12.io.example:s", "serial_number": "SN1", "model_number": "M",
                    "allow_any_host": false, "min_cntlid": 5, "max_cntlid": 9 })
        );
        assert_eq!(nvmf[6]["params"]["listen_address"]["trsvcid"], "4421", "port 2 only");
        let keys = calls(&v, "keyring");
        assert_eq!(
            nvmf[7]["params"],
            json!({ "nqn": "nqn.2026-12.io.example:s", "host": HOST, "dhchap_key": keys[0]["params"]["name"],
                    "dhchap_ctrlr_key": keys[1]["params"]["name"] })
        );
        assert_eq!(keys[0]["params"]["path"], "/etc/spdk/keys/nvmeof-key0");
        assert_eq!(
            e.key_files,
            [(dir.join("nvmeof-key0"), KEY.to_string()), (dir.join("nvmeof-key1"), KEY.to_string())]
        );
        let bdev = calls(&v, "bdev")[0];
        assert_eq!(
            nvmf[8]["params"]["namespace"],
            json!({ "nsid": 1, "bdev_name": bdev["params"]["name"], "nguid": "000102030405060708090A0B0C0D0E0F",
                    "eui64": "0011223344556677", "uuid": "6e766d65-6f66-4974-8000-00000000c0de" })
        );
        assert_eq!(bdev["params"]["num_blocks"], 256);
        assert_eq!(bdev["params"]["block_size"], 4096);
    }

    /// What SPDK cannot take is named; a host with keys and no --key-dir is
    /// left out, never let in without them; limits SPDK bounds are bounded.
    #[test]
    fn what_spdk_cannot_take_is_named() {
        let (v, e) = exported(
            &format!(
                r#"discovery_nqn = "nqn.2026-12.io.example:disc"
[limits]
mdts = 10
max_queue_entries = 65536
so_priority = 20
[[port]]
listen = "127.0.0.1:4420"
portid = 7
ana_groups = {{ 40 = "inaccessible" }}
in_capsule_data = 8192
[[referral]]
address = "192.0.2.8:8009"
ports = [7]
[[subsystem]]
nqn = "nqn.2026-12.io.example:s"
firmware = "1.0"
ieee_oui = 0x0050c2
max_io_queues = 4
allowed_hosts = [{{ nqn = "{HOST}", dhchap_key = "{KEY}" }}, "nqn.2014-08.org.example:plain"]
[[subsystem.namespace]]
file = "/srv/a.img"
buffered_io = false
ana_group = 40
qos_iops = 1500
qos_bandwidth = "1500000"
reservations_file = "/srv/a.resv"
[[subsystem.namespace]]
nsid = 3
file = "/srv/z.img"
buffered_io = false
block_size = 4096
zoned = true
zone_size = "1M"
max_open_zones = 4
reservations_file = "/srv/z.resv"
reservations_format = "spdk"
"#
            ),
            None,
        );
        let text = e.notes.join("\n");
        for needle in [
            "commands of at most 2048 KiB, not 4096 KiB",
            "queues of 65535 entries, not 65536",
            "socket priority 16, not 20",
            "port 7: SPDK numbers its listeners itself (PORTID 1 there)",
            "port 7: its own in-capsule data and queue size are left out",
            "port 7: SPDK saves no ANA state",
            "discovery NQN nqn.2026-12.io.example:disc left out",
            "firmware revision 1.0 left out",
            "SPDK reports Intel's IEEE OUI",
            "its limit of 4 I/O queues is left out",
            &format!("host {HOST} left out: it authenticates with DH-HMAC-CHAP"),
            "namespace 1: SPDK rounds its limit of 1500 IOPS up to 2000",
            "namespace 1: its bandwidth limit is 2 MiB/s in SPDK",
            "namespace 1: its reservations file /srv/a.resv is in this target's format",
            "namespace 3: its open and active zone limits are left out",
            "referral 192.0.2.8:8009: SPDK lists it through every listener, not only through ports [7]",
        ] {
            assert!(text.contains(needle), "{needle:?} not in\n{text}");
        }
        assert!(!text.contains(KEY));
        assert!(e.key_files.is_empty());
        let nvmf = calls(&v, "nvmf");
        assert_eq!(nvmf[1]["params"]["max_io_size"], 2 << 20);
        assert_eq!(nvmf[1]["params"]["max_queue_depth"], 65535);
        assert_eq!(nvmf[1]["params"]["sock_priority"], 16);
        let hosts: Vec<&Value> = nvmf
            .iter()
            .filter(|c| c["method"] == "nvmf_subsystem_add_host")
            .map(|c| &c["params"]["host"])
            .collect();
        assert_eq!(hosts, [&json!("nqn.2014-08.org.example:plain")]);
        let create = nvmf.iter().find(|c| c["method"] == "nvmf_create_subsystem").unwrap();
        assert_eq!(
            (&create["params"]["ana_reporting"], &create["params"]["max_namespaces"]),
            (&json!(true), &json!(40))
        );
        let ns: Vec<&Value> = nvmf
            .iter()
            .filter(|c| c["method"] == "nvmf_subsystem_add_ns")
            .map(|c| &c["params"]["namespace"])
            .collect();
        assert_eq!(
            (&ns[0]["anagrpid"], &ns[1]["anagrpid"]),
            (&json!(40), &json!(1)),
            "every group given with ANA on"
        );
        assert!(ns[0].get("ptpl_file").is_none());
        assert_eq!(ns[1]["ptpl_file"], "/srv/z.resv");
        let bdevs = calls(&v, "bdev");
        let zone = bdevs.iter().find(|c| c["method"] == "bdev_zone_block_create").unwrap();
        assert_eq!(zone["params"]["zone_capacity"], 256);
        assert_eq!(zone["params"]["base_bdev"], bdevs[2]["params"]["name"]);
        assert_eq!(ns[1]["bdev_name"], zone["params"]["name"]);
        let qos = bdevs.iter().find(|c| c["method"] == "bdev_set_qos_limit").unwrap();
        assert_eq!(
            qos["params"],
            json!({ "name": bdevs[0]["params"]["name"], "rw_ios_per_sec": 1500, "rw_mbytes_per_sec": 2 })
        );
    }
}
