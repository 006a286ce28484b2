//! `nvmeof-target import-nvmetcli` end to end: a configuration as `nvmetcli
//! save` writes it, converted and served, gives hosts what nvmet gave them —
//! the subsystem on its port only, its identity (serial, model, firmware,
//! IEEE OUI, controller IDs), its queue limit and allowed hosts, the
//! namespace's identifiers exactly as nvmet reports them (the UUID, no NGUID,
//! no EUI-64) and its ANA group's state.

mod initiator_util;

use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::common::spec::identify::NsIdDescriptor;
use nvmeof_initiator::common::spec::log::AnaState;
use nvmeof_initiator::common::Status;
use nvmeof_initiator::{discover, nvme_subsystems, ConnectOptions, Controller, Error, HostIdentity};
use nvmeof_target::config::TargetConfig;
use nvmeof_target::nvmetcli::{convert, DeviceKind};

const NQN: &str = "nqn.2014-08.org.example:migrated";
const UUID: [u8; 16] = [0x6e, 0x76, 0x6d, 0x65, 0x6f, 0x66, 0x49, 0x74, 0x80, 0, 0, 0, 0, 0, 0xc0, 0xde];

/// nvmetcli's dump of: TCP ports 1 and 2 on loopback (port 0: any free
/// one), port 2 with ANA group 2 non-optimized; the subsystem on port 2
/// only, open to `host` only, with a file namespace in ANA group 2.
fn saved(host: &str, file: &str) -> String {
    let port = |id: u16, subsystems: &str, groups: &str| {
        format!(
            r#"{{ "addr": {{ "adrfam": "ipv4", "traddr": "127.0.0.1", "treq": "not specified", "trsvcid": "0", "trtype": "tcp", "tsas": "none" }},
                 "ana_groups": [{groups}], "param": {{ "inline_data_size": "16384", "max_queue_size": "-1", "pi_enable": "0" }},
                 "portid": {id}, "referrals": [], "subsystems": [{subsystems}] }}"#
        )
    };
    let optimized = r#"{ "ana": { "state": "optimized" }, "grpid": 1 }"#;
    format!(
        r#"{{ "hosts": [ {{ "nqn": "{host}" }} ],
  "ports": [ {}, {} ],
  "subsystems": [ {{
    "allowed_hosts": [ "{host}" ],
    "attr": {{ "allow_any_host": "0", "cntlid_max": "399", "cntlid_min": "300", "firmware": "6.12.118", "ieee_oui": "0x0050c2",
              "model": "nvmet migrated", "pi_enable": "0", "qid_max": "3", "serial": "migr-0001", "version": "1.3" }},
    "namespaces": [ {{ "ana": {{ "grpid": "2" }}, "ana_grpid": 2,
      "device": {{ "nguid": "00000000-0000-0000-0000-000000000000", "p2pmem": "none", "path": "{file}", "uuid": "6e766d65-6f66-4974-8000-00000000c0de" }},
      "enable": 1, "nsid": 1, "resv": {{ "enable": "1" }} }} ],
    "nqn": "{NQN}",
    "passthru": [ {{ "admin_timeout": 0, "clear_ids": 1, "device": {{ "path": "(null)" }}, "enable": 0, "io_timeout": 0 }} ]
  }} ]
}}"#,
        port(1, "", optimized),
        port(
            2,
            &format!("\"{NQN}\""),
            &format!(r#"{optimized}, {{ "ana": {{ "state": "non-optimized" }}, "grpid": 2 }}"#)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converted_nvmet_configuration_serves_the_same_identity() {
    bounded(30, async {
        let dir = std::env::temp_dir().join(format!("nvmeof-nvmetcli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ns1.img");
        std::fs::File::create(&file).unwrap().set_len(16 << 20).unwrap();
        let hostnqn = host().nqn.clone();
        let c = convert(&saved(&hostnqn, file.to_str().unwrap()), DeviceKind::of).unwrap();
        assert!(c.notes.is_empty(), "{:?}", c.notes);
        let (server, p1) = start(&TargetConfig::from_toml(&c.toml).unwrap()).await;
        let p2 = server.local_addrs[1];

        // On port 2 only, under PORTID 2; and, as nvmet's, the discovery log
        // through a port lists that port only: through port 1, nothing.
        assert!(c.toml.contains("discovery_filter = \"address,svcid\""), "{}", c.toml);
        let disc = || ConnectOptions { host: Some(host()), ..ConnectOptions::discovery() };
        let log = discover(p1, disc()).await.unwrap();
        assert_eq!(nvme_subsystems(&log).count(), 0, "{:?}", log.entries);
        assert!(log.entries.iter().all(|e| e.portid == 1), "{:?}", log.entries);
        let log = discover(p2, disc()).await.unwrap();
        let entries: Vec<(u16, String)> =
            nvme_subsystems(&log).map(|e| (e.portid, e.trsvcid.clone())).collect();
        assert_eq!(entries, [(2, p2.port().to_string())]);
        assert!(log.entries.iter().all(|e| e.portid == 2), "{:?}", log.entries);
        match Controller::connect(p1, NQN, opts()).await {
            Err(Error::Nvme { status, .. }) => {
                assert_eq!(status.code(), Status::CONNECT_INVALID_PARAM.code())
            }
            other => panic!("through port 1: {other:?}"),
        }
        // Another host is refused.
        let other = ConnectOptions { host: Some(HostIdentity::from_id(*b"not-the-allowed!")), ..opts() };
        match Controller::connect(p2, NQN, other).await {
            Err(Error::Nvme { status, .. }) => assert_eq!(status.code(), Status::CONNECT_INVALID_HOST.code()),
            other => panic!("another host: {other:?}"),
        }

        let ctrl = Controller::connect(p2, NQN, opts()).await.unwrap();
        let id = ctrl.identify_controller().await.unwrap();
        assert_eq!((id.sn.trim(), id.mn.trim(), id.fr.trim()), ("migr-0001", "nvmet migrated", "6.12.118"));
        assert_eq!(id.ieee, [0xc2, 0x50, 0x00], "OUI 0050C2, least significant byte first");
        assert!((300..=399).contains(&id.cntlid), "cntlid {}", id.cntlid);
        // nvmet-tcp's 16 KiB in-capsule data and 1024-entry queues, not this
        // target's own defaults.
        assert_eq!((id.ioccsz, id.maxcmd, ctrl.info().cap.mqes()), (1028, 1024, 1023));
        assert_eq!(ctrl.info().inline_data, 16384);
        assert_eq!(ctrl.io_queue_count(), 3, "qid_max 3 (4 asked)");
        let ids = ctrl.namespace_id_descriptors(1).await.unwrap();
        assert!(ids.contains(&NsIdDescriptor::Uuid(UUID)), "{ids:?}");
        assert!(
            !ids.iter().any(|d| matches!(d, NsIdDescriptor::Nguid(_) | NsIdDescriptor::Eui64(_))),
            "{ids:?}"
        );
        let ns = ctrl.identify_namespace(1).await.unwrap();
        assert_eq!((ns.nguid, ns.eui64, ns.anagrpid), ([0; 16], [0; 8], 2));
        let ana = ctrl.ana_log().await.unwrap();
        let g2 = ana.groups.iter().find(|g| g.grpid == 2).expect("group 2");
        assert_eq!((g2.state, g2.nsids.clone()), (AnaState::NON_OPTIMIZED, vec![1]));
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
}

const NQN_A: &str = "nqn.2014-08.org.example:to-nvmet-a";
const NQN_B: &str = "nqn.2014-08.org.example:to-nvmet-b";
/// The NGUID namespace 2 of `NQN_A` is given.
const NGUID: &str = "5eed0000-0000-4000-8000-0000000000a2";

/// What a Linux host reads of one subsystem through `addr`: serial, model,
/// firmware, IEEE OUI, controller ID, I/O queues, and each namespace's UUID
/// and NGUID (Identify descriptors).
async fn identity(addr: std::net::SocketAddr, nqn: &str, nsids: &[u32]) -> (Vec<String>, u16, Vec<[u8; 16]>) {
    let ctrl = Controller::connect(addr, nqn, opts()).await.unwrap();
    let id = ctrl.identify_controller().await.unwrap();
    let mut ids = Vec::new();
    for &nsid in nsids {
        let d = ctrl.namespace_id_descriptors(nsid).await.unwrap();
        // The UUID, then the NGUID (as the JSON lists them).
        ids.extend(d.iter().filter_map(|d| match d {
            NsIdDescriptor::Uuid(u) => Some(*u),
            _ => None,
        }));
        ids.extend(d.iter().filter_map(|d| match d {
            NsIdDescriptor::Nguid(u) => Some(*u),
            _ => None,
        }));
    }
    let text = vec![
        id.sn.trim().to_string(),
        id.mn.trim().to_string(),
        id.fr.trim().to_string(),
        format!("{:02x}{:02x}{:02x}", id.ieee[2], id.ieee[1], id.ieee[0]),
        ctrl.io_queue_count().to_string(),
    ];
    ctrl.shutdown().await.unwrap();
    (text, id.cntlid, ids)
}

/// `export-nvmetcli` writes what the target serves: each subsystem's
/// identity as hosts read it (derived serial number and namespace UUIDs and
/// NGUIDs included), each port's PORTID, subsystem links, ANA states and
/// referrals as its discovery log and ANA log report them. Converted back by
/// `import-nvmetcli`, as a configuration moved to nvmet and back would be, it
/// serves the same identity again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_configuration_names_what_the_target_serves() {
    use nvmeof_target::nvmetcli::export;
    use serde_json::Value;
    bounded(40, async {
        let dir = std::env::temp_dir().join(format!("nvmeof-nvmetcli-export-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let files: Vec<_> = (1..=3).map(|i| dir.join(format!("ns{i}.img"))).collect();
        for f in &files {
            std::fs::File::create(f).unwrap().set_len(8 << 20).unwrap();
        }
        let hostnqn = host().nqn.clone();
        let toml = format!(
            r#"
[[port]]
listen = "127.0.0.1:0"
portid = 3
ana_groups = {{ 2 = "non-optimized" }}

[[port]]
listen = "127.0.0.1:0"
portid = 4

[[referral]]
address = "192.0.2.10:8009"
portid = 9

[[subsystem]]
nqn = "{NQN_A}"
model = "to nvmet"
ieee_oui = 0x0050c2
cntlid_min = 300
cntlid_max = 399
max_io_queues = 3
allowed_hosts = ["{hostnqn}"]
ports = [4]

[[subsystem.namespace]]
file = {f1:?}
block_size = 4096
ana_group = 2

[[subsystem.namespace]]
file = {f2:?}
block_size = 4096
nguid = "{NGUID}"

[[subsystem]]
nqn = "{NQN_B}"

[[subsystem.namespace]]
file = {f3:?}
block_size = 4096
ana_group = 2
"#,
            f1 = files[0],
            f2 = files[1],
            f3 = files[2],
        );
        let cfg = TargetConfig::from_toml(&toml).unwrap();
        let e = export(&cfg, |_| DeviceKind::File(4096));
        assert_eq!(e.notes.len(), 2, "{:?}", e.notes);
        assert!(e.notes[0].contains("page cache"), "{:?}", e.notes);
        // This log lists every port (below); nvmet's would not.
        assert!(e.notes[1].starts_with("discovery_filter match_any: nvmet's discovery log"), "{:?}", e.notes);
        let json: Value = serde_json::from_str(&e.json).unwrap();
        let (server, p3) = start(&cfg).await;
        let p4 = server.local_addrs[1];

        // Ports: the discovery log through port 3 lists, under each port's
        // PORTID, the subsystems the JSON links to it, and the referral.
        let log =
            discover(p3, ConnectOptions { host: Some(host()), ..ConnectOptions::discovery() }).await.unwrap();
        let mut served: Vec<(u16, String, String)> =
            nvme_subsystems(&log).map(|e| (e.portid, e.trsvcid.clone(), e.subnqn.clone())).collect();
        served.sort();
        let mut exported = Vec::new();
        for (port, addr) in json["ports"].as_array().unwrap().iter().zip([p3, p4]) {
            assert_eq!(port["addr"]["traddr"], "127.0.0.1");
            assert_eq!(port["addr"]["trtype"], "tcp");
            for s in port["subsystems"].as_array().unwrap() {
                let id = port["portid"].as_u64().unwrap() as u16;
                exported.push((id, addr.port().to_string(), s.as_str().unwrap().to_string()));
            }
            let referral = &port["referrals"][0];
            assert_eq!(
                (referral["addr"]["traddr"].as_str(), referral["addr"]["trsvcid"].as_str()),
                (Some("192.0.2.10"), Some("8009"))
            );
            assert_eq!(referral["addr"]["portid"], "9");
        }
        exported.sort();
        assert_eq!(served, exported);
        assert!(log.entries.iter().any(|e| e.traddr == "192.0.2.10" && e.trsvcid == "8009" && e.portid == 9));

        // Subsystems: the identity hosts read is the one written out.
        let subsystem = |nqn: &str| {
            json["subsystems"].as_array().unwrap().iter().find(|s| s["nqn"] == nqn).unwrap().clone()
        };
        let exported_identity = |s: &Value| {
            let a = &s["attr"];
            let text: Vec<String> = ["serial", "model", "firmware"]
                .iter()
                .map(|k| a[*k].as_str().unwrap().to_string())
                .chain([
                    a["ieee_oui"].as_str().unwrap().trim_start_matches("0x").to_string(),
                    // opts() asks for 4 I/O queues
                    a["qid_max"].as_str().unwrap().parse::<usize>().unwrap().min(4).to_string(),
                ])
                .collect();
            let mut ids = Vec::new();
            for ns in s["namespaces"].as_array().unwrap() {
                for k in ["uuid", "nguid"] {
                    ids.push(
                        nvmeof_initiator::common::spec::nqn::parse_uuid(ns["device"][k].as_str().unwrap())
                            .unwrap(),
                    );
                }
            }
            let range: Vec<u16> = ["cntlid_min", "cntlid_max"]
                .iter()
                .map(|k| a[*k].as_str().unwrap().parse().unwrap())
                .collect();
            (text, range, ids)
        };
        let (a, b) = (subsystem(NQN_A), subsystem(NQN_B));
        assert_eq!(
            (a["attr"]["allow_any_host"].as_str(), a["allowed_hosts"].clone()),
            (Some("0"), serde_json::json!([hostnqn]))
        );
        assert_eq!(json["hosts"], serde_json::json!([{ "nqn": hostnqn }]));
        assert_eq!(b["attr"]["allow_any_host"], "1");
        assert_eq!(a["namespaces"][1]["device"]["nguid"], NGUID);
        let (text_a, range_a, ids_a) = exported_identity(&a);
        let (text_b, _, ids_b) = exported_identity(&b);
        assert_eq!((text_a[1].as_str(), text_a[3].as_str(), text_a[4].as_str()), ("to nvmet", "0050c2", "3"));
        let served_a = identity(p4, NQN_A, &[1, 2]).await;
        assert_eq!(served_a.0, text_a);
        assert!((range_a[0]..=range_a[1]).contains(&served_a.1), "cntlid {}", served_a.1);
        assert_eq!(served_a.2, ids_a);
        let served_b = identity(p3, NQN_B, &[1]).await;
        assert_eq!(served_b.0, text_b);
        assert_eq!(served_b.2, ids_b);

        // ANA: group 2 is non-optimized through port 3, optimized through 4.
        let state = |port: usize, grp: u64| {
            json["ports"][port]["ana_groups"].as_array().unwrap().iter().find(|g| g["grpid"] == grp).unwrap()
                ["ana"]["state"]
                .clone()
        };
        assert_eq!(
            (state(0, 1), state(0, 2), state(1, 2)),
            ("optimized".into(), "non-optimized".into(), "optimized".into())
        );
        let ctrl = Controller::connect(p3, NQN_B, opts()).await.unwrap();
        let g2 = ctrl.ana_log().await.unwrap().groups.into_iter().find(|g| g.grpid == 2).unwrap();
        assert_eq!((g2.state, g2.nsids), (AnaState::NON_OPTIMIZED, vec![1]));
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;

        // And back: import-nvmetcli of it serves the same identity.
        let back = convert(&e.json, |_| DeviceKind::File(4096)).unwrap();
        let cfg = TargetConfig::from_toml(&back.toml).unwrap();
        let (server, p3) = start(&cfg).await;
        let p4 = server.local_addrs[1];
        assert_eq!(identity(p4, NQN_A, &[1, 2]).await.2, ids_a);
        assert_eq!(identity(p3, NQN_B, &[1]).await.0, text_b);
        let again = identity(p4, NQN_A, &[1, 2]).await;
        assert_eq!(again.0, text_a);
        assert!((range_a[0]..=range_a[1]).contains(&again.1));
        server.shutdown(Duration::from_secs(1)).await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
}
