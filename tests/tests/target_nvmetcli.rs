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

        // On port 2 only, under PORTID 2.
        let log =
            discover(p1, ConnectOptions { host: Some(host()), ..ConnectOptions::discovery() }).await.unwrap();
        let entries: Vec<(u16, String)> =
            nvme_subsystems(&log).map(|e| (e.portid, e.trsvcid.clone())).collect();
        assert_eq!(entries, [(2, p2.port().to_string())]);
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
