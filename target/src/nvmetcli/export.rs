//! Converting this target's configuration into what `nvmetcli restore`
//! reads (`/etc/nvmet/config.json`): `nvmeof-target export-nvmetcli` for an
//! administrator moving a configuration to the Linux kernel target (nvmet),
//! or back after `import-nvmetcli`.
//!
//! The JSON has the shape `nvmetcli save` writes (`nvmet/nvme.py`,
//! `CFSNode::dump`: each object's attributes by group, every value the text
//! its configfs file takes, keys sorted, two-space indent), and nvmetcli's
//! `Root::restore` writes it back into configfs: hosts first, then
//! subsystems (namespaces, allowed hosts, then attributes), then ports
//! (attributes, subsystem links, ANA groups, referrals). What hosts see stays
//! the same where nvmet can show it: each subsystem's serial number, model,
//! firmware revision, IEEE OUI and controller ID range are written out, the
//! ones this target derives included, and each namespace's UUID and NGUID,
//! so a Linux host that reconnects after the move finds the same
//! subsystem and namespaces (the EUI-64 is the exception: nvmet reports none).
//!
//! What does not map is said in a note: RAM and zoned namespaces (nvmet
//! serves files and block devices, zoned only from a zoned block device),
//! namespaces shown to some hosts only, read-only namespaces, rate limits,
//! reservations persisted through power loss, DH-HMAC-CHAP keys (nvmetcli
//! restores no host attributes), the discovery NQN and socket settings.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{json, Map, Value};

use nvmeof_common::spec::log::AnaState;
use nvmeof_common::spec::nqn::format_uuid;

use super::DeviceKind;
use crate::config::{NamespaceSource, TargetConfig};
use crate::core::subsystem::Subsystem;

/// nvmet's queue size bounds (`NVMET_MIN_QUEUE_SIZE`, `NVMET_MAX_QUEUE_SIZE`):
/// `nvmet_enable_port` clamps `param_max_queue_size` to them.
const NVMET_QUEUE_SIZES: (u32, u32) = (16, 1024);
/// nvmet's most I/O queues per controller (`NVMET_NR_QUEUES`): the largest
/// `attr_qid_max` it takes.
const NVMET_NR_QUEUES: u16 = 128;

/// A configuration converted for nvmetcli.
#[derive(Debug)]
pub struct Exported {
    /// The JSON `nvmetcli restore` reads, as `nvmetcli save` writes it.
    pub json: String,
    /// What was left out or changed, one sentence each.
    pub notes: Vec<String>,
}

/// A string attribute value, as configfs files read.
fn attr(v: impl ToString) -> Value {
    Value::String(v.to_string())
}

/// `v` with every object's keys sorted (as nvmetcli's `json.dumps(...,
/// sort_keys=True)`), whatever order `serde_json` keeps.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let m: BTreeMap<String, Value> = m.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            Value::Object(m.into_iter().collect::<Map<String, Value>>())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        v => v,
    }
}

/// nvmet's `addr` group of a TCP address (ports and referrals).
fn tcp_addr(addr: std::net::SocketAddr) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("adrfam".into(), attr(if addr.is_ipv4() { "ipv4" } else { "ipv6" }));
    m.insert("traddr".into(), attr(addr.ip()));
    m.insert("treq".into(), attr("not specified"));
    m.insert("trsvcid".into(), attr(addr.port()));
    m.insert("trtype".into(), attr("tcp"));
    m
}

/// The name nvmet's `ana_state` takes for `state`.
fn ana_name(state: AnaState) -> &'static str {
    // The configuration parser takes named states only.
    state.name().unwrap_or("optimized")
}

/// Converts `cfg`; `kind` says what each namespace's path is on the machine
/// nvmet will run on ([`DeviceKind::of`]): nvmet gives a file its file
/// system's block size, which a note compares with the configured one.
pub fn export(cfg: &TargetConfig, kind: impl Fn(&Path) -> DeviceKind) -> Exported {
    let mut notes = Vec::new();
    let mut hosts: BTreeSet<String> = BTreeSet::new();
    let mut subsystems = Vec::new();
    // The ANA groups namespaces use: every port gets each (a port without a
    // group's directory reports it inaccessible, `nvmet_ports_make`).
    let mut groups: BTreeSet<u32> = BTreeSet::from([1]);
    let mut buffered = Vec::new();
    let mut keyed = Vec::new();

    for s in &cfg.subsystems {
        let nqn = &s.nqn;
        let mut namespaces = Vec::new();
        for (nsid, n) in crate::config::assign_nsids(&s.namespaces) {
            let what = format!("subsystem {nqn} namespace {nsid}");
            let path = match &n.source {
                NamespaceSource::Ram(_) => {
                    notes.push(format!("{what} left out: it is RAM, which nvmet does not serve (a brd or null_blk device could)"));
                    continue;
                }
                NamespaceSource::File { path, .. } | NamespaceSource::Block { path, .. } => path,
            };
            if n.zoned.is_some() {
                notes.push(format!(
                    "{what} left out: it is zoned, which nvmet serves from a zoned block device only"
                ));
                continue;
            }
            if n.hosts.is_some() {
                // nvmet shows every namespace to every host of the subsystem:
                // exported, it would reach hosts it was hidden from.
                notes.push(format!("{what} left out: it is shown to some hosts only, which nvmet cannot do"));
                continue;
            }
            let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
            if let NamespaceSource::File { buffered_io: true, .. } = n.source {
                buffered.push(what.clone());
            }
            if let (NamespaceSource::File { .. }, DeviceKind::File(bs)) = (&n.source, kind(&path)) {
                if bs != n.block_size {
                    notes.push(format!(
                        "{what}: nvmet gives {} {bs}-byte blocks (its file system's), not {}: \
                         what hosts address by block (partition tables) moves",
                        path.display(),
                        n.block_size
                    ));
                }
            }
            if n.read_only {
                notes.push(format!(
                    "{what}: nvmet has no read-only namespace: hosts can write it (one can write-protect it for all, \
                     `nvme set-feature -f 0x84 -n {nsid} -v 1`, until nvmet restarts)"
                ));
            }
            if n.qos.any() {
                notes.push(format!("{what}: its rate limits are left out (nvmet has none)"));
            }
            if n.reservations_file.is_some() {
                notes.push(format!(
                    "{what}: nvmet keeps reservations in memory only: hosts register again after each restart"
                ));
            }
            let (uuid, nguid, _) = crate::server::namespace_ids(nqn, nsid, n);
            groups.insert(n.ana_group);
            let mut ns = json!({
                "ana": { "grpid": attr(n.ana_group) },
                "ana_grpid": n.ana_group,
                "device": {
                    "nguid": format_uuid(&nguid),
                    "path": path.to_string_lossy(),
                    "uuid": format_uuid(&uuid),
                },
                "enable": 1,
                "nsid": nsid,
            });
            if n.reservations {
                // resv_enable is nvmet's since Linux 6.13; nvmetcli skips
                // (and names) an attribute an older kernel lacks.
                ns["resv"] = json!({ "enable": "1" });
            }
            namespaces.push(ns);
        }

        let mut a = Map::new();
        a.insert("allow_any_host".into(), attr(s.allowed_hosts.is_none() as u8));
        a.insert("serial".into(), attr(s.serial.clone().unwrap_or_else(|| Subsystem::default_serial(nqn))));
        a.insert("model".into(), attr(&s.model));
        let firmware = s.firmware.clone().unwrap_or_else(Subsystem::default_firmware);
        a.insert("firmware".into(), attr(firmware));
        a.insert("ieee_oui".into(), attr(format!("0x{:06x}", s.ieee_oui.unwrap_or(0))));
        a.insert("cntlid_min".into(), attr(s.cntlids.start()));
        a.insert("cntlid_max".into(), attr(s.cntlids.end()));
        let qid_max = s.max_io_queues.unwrap_or(cfg.limits.max_io_queues).min(cfg.limits.max_io_queues);
        if qid_max > NVMET_NR_QUEUES {
            notes.push(format!(
                "subsystem {nqn}: {NVMET_NR_QUEUES} I/O queues per controller (nvmet's most), not {qid_max}"
            ));
        }
        a.insert("qid_max".into(), attr(qid_max.clamp(1, NVMET_NR_QUEUES)));
        let allowed = s.allowed_hosts.clone().unwrap_or_default();
        hosts.extend(allowed.iter().cloned());
        if !s.host_keys.is_empty() {
            keyed.extend(s.host_keys.keys().map(|h| format!("{h} (of {nqn})")));
        }
        subsystems.push(json!({
            "allowed_hosts": allowed,
            "attr": a,
            "namespaces": namespaces,
            "nqn": nqn,
        }));
    }

    let mut ports = Vec::new();
    for (i, addr) in cfg.listen.iter().enumerate() {
        let id = cfg.port_id(i);
        let params = cfg.port_params(i);
        let queue = params.max_queue_entries(&cfg.limits);
        let (lo, hi) = NVMET_QUEUE_SIZES;
        if !(lo..=hi).contains(&queue) {
            notes.push(format!(
                "port {id}: queues of {} entries (nvmet takes {lo} to {hi}), not {queue}",
                queue.clamp(lo, hi)
            ));
        }
        let ana = cfg.port_ana.get(i).cloned().unwrap_or_default();
        let ana_groups: Vec<Value> = groups
            .iter()
            .chain(ana.groups.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .map(|g| {
                let state = ana.groups.get(g).copied().unwrap_or(ana.state);
                json!({ "ana": { "state": ana_name(state) }, "grpid": g })
            })
            .collect();
        // In nvmet each port lists its own referrals: each port gets those
        // listed through it here (every one without `ports`).
        let referrals: Vec<Value> = cfg
            .referrals
            .iter()
            .enumerate()
            .filter(|(_, referral)| referral.on_port(id))
            .map(|(r, referral)| {
                let mut addr = tcp_addr(referral.addr);
                addr.insert("portid".into(), attr(referral.portid));
                json!({ "addr": addr, "enable": 1, "name": format!("referral-{}", r + 1) })
            })
            .collect();
        let linked: Vec<&str> = cfg
            .subsystems
            .iter()
            .filter(|s| s.ports.as_ref().is_none_or(|p| p.contains(&id)))
            .map(|s| s.nqn.as_str())
            .collect();
        ports.push(json!({
            "addr": tcp_addr(*addr),
            "ana_groups": ana_groups,
            "param": {
                "inline_data_size": attr(params.in_capsule_data(&cfg.limits)),
                "max_queue_size": attr(queue.clamp(lo, hi)),
            },
            "portid": id,
            "referrals": referrals,
            "subsystems": linked,
        }));
    }

    if !buffered.is_empty() {
        notes.push(format!(
            "{} read through the page cache here; nvmet opens files with O_DIRECT unless the namespace's \
             buffered_io is 1, which nvmetcli does not restore (write it before enabling the namespace)",
            buffered.join(", ")
        ));
    }
    if !keyed.is_empty() {
        notes.push(format!(
            "nvmetcli restores no DH-HMAC-CHAP keys: write the configuration's keys of {} into \
             /sys/kernel/config/nvmet/hosts/NQN/dhchap_key (dhchap_ctrl_key, dhchap_hash, dhchap_dhgroup)",
            keyed.join(", ")
        ));
    }
    if let Some(d) = &cfg.discovery_nqn {
        notes.push(format!(
            "nvmetcli restores no discovery NQN: echo {d} > /sys/kernel/config/nvmet/discovery_nqn"
        ));
    }
    let f = cfg.discovery_filter;
    if cfg.listen.len() > 1 && !(f.address && f.svcid) {
        notes.push(format!(
            "discovery_filter {f}: nvmet's discovery log lists only the port a host asks through \
             (\"address,svcid\" here), not the other ports"
        ));
    }
    if cfg.so_priority != 0 {
        notes.push(format!("socket priority {}: nvmet-tcp's so_priority module parameter", cfg.so_priority));
    }
    if cfg.listen.is_empty() {
        notes.push("no port: nvmet exports nothing until one is added".into());
    }

    let hosts: Vec<Value> = hosts.into_iter().map(|nqn| json!({ "nqn": nqn })).collect();
    let root = sorted(json!({ "hosts": hosts, "ports": ports, "subsystems": subsystems }));
    let mut json = serde_json::to_string_pretty(&root).expect("a JSON value serializes");
    json.push('\n');
    Exported { json, notes }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:4a2a1c9e-0000-4000-8000-000000000001";
    const KEY: &str = "DHHC-1:00:oCMdKPLLjLL49xAMSZHqha3+8lnvPS1oqnhp0/9+78hfhoD7:";

    fn exported(toml: &str) -> (Value, Vec<String>) {
        let cfg = TargetConfig::from_toml(toml).unwrap();
        let e = export(&cfg, |_| DeviceKind::File(4096));
        (serde_json::from_str(&e.json).unwrap(), e.notes)
    }

    /// Keys sorted at every level, two-space indent, a newline at the end:
    /// `nvmetcli save`'s `json.dumps(..., sort_keys=True, indent=2)`.
    #[test]
    fn json_is_laid_out_as_nvmetcli_saves_it() {
        let cfg = TargetConfig::from_toml(
            "[[port]]\nlisten = \"[::1]:4420\"\n[[subsystem]]\nnqn = \"nqn.2026-12.io.example:s\"\n\
             [[subsystem.namespace]]\nblock = \"/dev/nvme0n1\"\n",
        )
        .unwrap();
        let e = export(&cfg, |_| DeviceKind::Block);
        assert!(
            e.json.starts_with("{\n  \"hosts\": [],\n  \"ports\": [\n    {\n      \"addr\": {\n"),
            "{}",
            e.json
        );
        assert!(e.json.ends_with("}\n"));
        fn check_sorted(v: &Value) {
            match v {
                Value::Object(m) => {
                    let keys: Vec<&String> = m.keys().collect();
                    let mut s = keys.clone();
                    s.sort();
                    assert_eq!(keys, s);
                    m.values().for_each(check_sorted);
                }
                Value::Array(a) => a.iter().for_each(check_sorted),
                _ => {}
            }
        }
        let v: Value = serde_json::from_str(&e.json).unwrap();
        check_sorted(&v);
        let port = &v["ports"][0];
        assert_eq!(
            port["addr"],
            json!({ "adrfam": "ipv6", "traddr": "::1", "treq": "not specified", "trsvcid": "4420", "trtype": "tcp" })
        );
        // The target's own limits, which nvmet would otherwise replace with its 16 KiB.
        assert_eq!(port["param"], json!({ "inline_data_size": "131072", "max_queue_size": "1024" }));
        assert_eq!(port["portid"], 1);
        assert_eq!(port["subsystems"], json!(["nqn.2026-12.io.example:s"]));
        let ns = &v["subsystems"][0]["namespaces"][0];
        assert_eq!(
            (ns["device"]["path"].as_str(), ns["enable"].as_i64(), ns["nsid"].as_i64()),
            (Some("/dev/nvme0n1"), Some(1), Some(1))
        );
        assert_eq!((ns["ana"]["grpid"].as_str(), ns["ana_grpid"].as_i64()), (Some("1"), Some(1)));
        assert!(
            ns.get("resv").is_none(),
            "resv_enable only where reservations are on (kernels before 6.13 lack it)"
        );
        assert!(e.notes.is_empty(), "{:?}", e.notes);
    }

    /// What nvmet cannot take is left out or changed, each with a note; a
    /// namespace hidden from some hosts is left out rather than shown to all.
    #[test]
    fn what_nvmet_cannot_take_is_named() {
        let (v, notes) = exported(&format!(
            r#"discovery_nqn = "nqn.2026-12.io.example:disc"

[limits]
so_priority = 3
max_io_queues = 128
max_queue_entries = 4096

[[port]]
listen = "127.0.0.1:4420"

[[port]]
listen = "127.0.0.1:4421"

[[subsystem]]
nqn = "nqn.2026-12.io.example:s"
allowed_hosts = [{{ nqn = "{HOST}", dhchap_key = "{KEY}" }}]
max_io_queues = 100

[[subsystem.namespace]]
ram = "1M"

[[subsystem.namespace]]
file = "/srv/zoned.img"
zoned = true
zone_size = "1M"

[[subsystem.namespace]]
file = "/srv/masked.img"
hosts = ["{HOST}"]

[[subsystem.namespace]]
file = "/srv/kept.img"
block_size = 512
read_only = true
qos_iops = 1000
reservations_file = "/srv/kept.resv"
"#
        ));
        let ns = v["subsystems"][0]["namespaces"].as_array().unwrap();
        assert_eq!(ns.len(), 1, "RAM, zoned and masked namespaces left out: {ns:?}");
        assert_eq!(
            (ns[0]["nsid"].as_i64(), ns[0]["device"]["path"].as_str()),
            (Some(4), Some("/srv/kept.img"))
        );
        assert_eq!(ns[0]["resv"], json!({ "enable": "1" }), "reservations_file implies reservations");
        assert_eq!(v["subsystems"][0]["attr"]["qid_max"], "100");
        assert_eq!(v["ports"][0]["param"]["max_queue_size"], "1024", "nvmet's largest");
        assert_eq!(v["hosts"], json!([{ "nqn": HOST }]));
        let text = notes.join("\n");
        for needle in [
            "namespace 1 left out: it is RAM",
            "namespace 2 left out: it is zoned",
            "namespace 3 left out: it is shown to some hosts only",
            "namespace 4: nvmet gives /srv/kept.img 4096-byte blocks (its file system's), not 512",
            "namespace 4: nvmet has no read-only namespace",
            "namespace 4: its rate limits are left out",
            "namespace 4: nvmet keeps reservations in memory only",
            "port 1: queues of 1024 entries (nvmet takes 16 to 1024), not 4096",
            &format!("nvmetcli restores no DH-HMAC-CHAP keys: write the configuration's keys of {HOST}"),
            "echo nqn.2026-12.io.example:disc > /sys/kernel/config/nvmet/discovery_nqn",
            "socket priority 3",
            "discovery_filter match_any: nvmet's discovery log lists only the port a host asks through",
        ] {
            assert!(text.contains(needle), "{needle:?} not in\n{text}");
        }
        assert!(!text.contains(KEY), "no secret in the notes");
    }

    /// Each port gets every ANA group a namespace is in, in the port's state
    /// for it (nvmet reports a group a port has no directory for
    /// inaccessible); each port gets the referrals listed through it; subsystems
    /// are linked to the ports they are exported on; the I/O queue limit is
    /// the subsystem's or the target's, at most nvmet's 128.
    #[test]
    fn ports_carry_groups_referrals_and_links() {
        let (v, _) = exported(
            r#"[limits]
max_io_queues = 200

[[port]]
listen = "0.0.0.0:4420"
portid = 5
ana_state = "inaccessible"
ana_groups = { 3 = "non-optimized", 9 = "change" }
in_capsule_data = 8192
max_queue_entries = 64

[[port]]
listen = "[::]:4421"
portid = 6

[[referral]]
address = "[2001:db8::1]:8009"

[[referral]]
address = "192.0.2.44:8009"
portid = 2
ports = [6]

[[subsystem]]
nqn = "nqn.2026-12.io.example:s"
ports = [6]

[[subsystem.namespace]]
block = "/dev/sdb"
ana_group = 3

[[subsystem]]
nqn = "nqn.2026-12.io.example:t"
serial = "SN-T"
firmware = "9.9"
ieee_oui = 0xabcdef
cntlid_min = 10
cntlid_max = 20
"#,
        );
        let p5 = &v["ports"][0];
        let groups = |p: &Value| -> Vec<(u64, String)> {
            p["ana_groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| (g["grpid"].as_u64().unwrap(), g["ana"]["state"].as_str().unwrap().to_string()))
                .collect()
        };
        let named = |v: &[(u64, &str)]| v.iter().map(|(g, s)| (*g, s.to_string())).collect::<Vec<_>>();
        assert_eq!(groups(p5), named(&[(1, "inaccessible"), (3, "non-optimized"), (9, "change")]));
        assert_eq!(groups(&v["ports"][1]), named(&[(1, "optimized"), (3, "optimized")]));
        assert_eq!(p5["param"], json!({ "inline_data_size": "8192", "max_queue_size": "64" }));
        assert_eq!(
            (p5["addr"]["traddr"].as_str(), p5["addr"]["adrfam"].as_str()),
            (Some("0.0.0.0"), Some("ipv4"))
        );
        assert_eq!(v["ports"][1]["addr"]["traddr"], "::");
        assert_eq!(p5["subsystems"], json!(["nqn.2026-12.io.example:t"]));
        assert_eq!(
            v["ports"][1]["subsystems"],
            json!(["nqn.2026-12.io.example:s", "nqn.2026-12.io.example:t"])
        );
        let everywhere = json!({ "addr": { "adrfam": "ipv6", "portid": "0", "traddr": "2001:db8::1", "treq": "not specified",
                                 "trsvcid": "8009", "trtype": "tcp" }, "enable": 1, "name": "referral-1" });
        assert_eq!(p5["referrals"], json!([everywhere]));
        // Port 6's own referral, there only.
        assert_eq!(
            v["ports"][1]["referrals"],
            json!([everywhere, { "addr": { "adrfam": "ipv4", "portid": "2", "traddr": "192.0.2.44", "treq": "not specified",
                                 "trsvcid": "8009", "trtype": "tcp" }, "enable": 1, "name": "referral-2" }])
        );
        let s = &v["subsystems"][0]["attr"];
        assert_eq!(s["qid_max"], "128");
        assert_eq!(s["serial"].as_str().unwrap(), Subsystem::default_serial("nqn.2026-12.io.example:s"));
        assert_eq!(s["allow_any_host"], "1");
        let t = &v["subsystems"][1]["attr"];
        assert_eq!(
            *t,
            json!({ "allow_any_host": "1", "cntlid_max": "20", "cntlid_min": "10", "firmware": "9.9",
                    "ieee_oui": "0xabcdef", "model": t["model"].clone(), "qid_max": "128", "serial": "SN-T" })
        );
        assert_eq!(v["subsystems"][1]["namespaces"], json!([]));
    }
}
