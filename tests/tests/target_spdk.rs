//! `nvmeof-target import-spdk` end to end: a configuration as SPDK's
//! `save_config` writes it, converted and served, gives hosts what SPDK gave
//! them — the subsystem on its listener only, its identity (serial, model,
//! controller IDs), the TCP transport's limits (MQES, I/O queues, IOCCSZ,
//! MDTS), DH-HMAC-CHAP with the keyring's key files, the namespaces a host
//! may see (`no_auto_visible`) with their identifiers as SPDK reports them
//! (UUID and NGUID from the bdev, an EUI-64 where set), reservations with
//! the registrations SPDK persisted in a namespace's `ptpl_file` (kept in
//! SPDK's format), a zoned bdev's zones, and the data of an io_uring bdev's
//! file.

mod initiator_util;

use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::common::auth::DhchapSecret;
use nvmeof_initiator::common::spec::identify::{Csi, NsIdDescriptor};
use nvmeof_initiator::common::spec::reservation::{RegisterAction, ReservationType};
use nvmeof_initiator::{discover, nvme_subsystems, AuthError, ConnectOptions, Controller, Error};
use nvmeof_target::config::TargetConfig;
use nvmeof_target::nvmetcli::DeviceKind;
use nvmeof_target::spdk::convert;

const NQN: &str = "nqn.2016-06.io.spdk:cnode1";
const MALLOC_UUID: &str = "6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b";
const URING_UUID: &str = "c3d4e5f6-a7b8-4c9d-8e0f-112233445566";
const ZONED_UUID: &str = "d4e5f6a7-b8c9-4d0e-8f10-223344556677";

fn bytes(uuid: &str) -> [u8; 16] {
    let hex: String = uuid.chars().filter(|c| *c != '-').collect();
    std::array::from_fn(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
}

/// SPDK's dump of: a keyring with the host's and the controller's keys; a
/// 16 MiB Malloc bdev, an io_uring bdev on `file` (4 KiB blocks) and another
/// Malloc bdev; a TCP transport of 64-entry queues, 2 I/O queues, 4 KiB in
/// the capsule and 128 KiB commands; the discovery subsystem on 127.0.0.1
/// (port 0: any free one), `NQN` on ::1 only, open to `host` only with its
/// keys; namespace 1 (Malloc0), 2 (the file, for `host` only, an EUI-64)
/// and 3 (Malloc1, for another host only), 4 (a zoned bdev of 4 MiB zones,
/// two at a time, on a Malloc bdev of 19.5 MiB); namespace 2's
/// reservations persist in `ptpl`.
fn saved(host: &str, file: &str, key: &str, ctrl_key: &str, ptpl: &str) -> String {
    format!(
        r#"{{ "subsystems": [
  {{ "subsystem": "keyring", "config": [
    {{ "method": "keyring_file_add_key", "params": {{ "name": "key0", "path": "{key}" }} }},
    {{ "method": "keyring_file_add_key", "params": {{ "name": "ckey0", "path": "{ctrl_key}" }} }} ] }},
  {{ "subsystem": "bdev", "config": [
    {{ "method": "bdev_set_options", "params": {{ "bdev_io_pool_size": 65535, "bdev_io_cache_size": 256, "bdev_auto_examine": true }} }},
    {{ "method": "bdev_malloc_create", "params": {{ "name": "Malloc0", "num_blocks": 32768, "block_size": 512, "physical_block_size": 512,
        "uuid": "{MALLOC_UUID}", "optimal_io_boundary": 0, "md_size": 0, "dif_type": 0, "dif_is_head_of_md": false, "dif_pi_format": 0, "numa_id": -1 }} }},
    {{ "method": "bdev_uring_create", "params": {{ "name": "Uring0", "block_size": 4096, "filename": "{file}", "uuid": "{URING_UUID}" }} }},
    {{ "method": "bdev_malloc_create", "params": {{ "name": "Malloc1", "num_blocks": 2048, "block_size": 4096, "uuid": "0b7e8d6c-5a4f-4e3d-9c2b-1a0f9e8d7c6b" }} }},
    {{ "method": "bdev_malloc_create", "params": {{ "name": "Malloc2", "num_blocks": 5000, "block_size": 4096, "uuid": "{ZONED_UUID}" }} }},
    {{ "method": "bdev_zone_block_create", "params": {{ "base_bdev": "Malloc2", "name": "Zoned0", "zone_capacity": 1024, "optimal_open_zones": 2 }} }},
    {{ "method": "bdev_wait_for_examine" }} ] }},
  {{ "subsystem": "nvmf", "config": [
    {{ "method": "nvmf_set_config", "params": {{ "discovery_filter": "match_any", "admin_cmd_passthru": {{ "identify_ctrlr": false }} }} }},
    {{ "method": "nvmf_set_max_subsystems", "params": {{ "max_subsystems": 1024 }} }},
    {{ "method": "nvmf_create_transport", "params": {{ "trtype": "TCP", "max_queue_depth": 64, "max_io_qpairs_per_ctrlr": 2,
        "in_capsule_data_size": 4096, "max_io_size": 131072, "io_unit_size": 131072, "max_aq_depth": 128, "num_shared_buffers": 511,
        "buf_cache_size": 4294967295, "dif_insert_or_strip": false, "zcopy": false, "c2h_success": true, "sock_priority": 0, "abort_timeout_sec": 1 }} }},
    {{ "method": "nvmf_subsystem_add_listener", "params": {{ "nqn": "nqn.2014-08.org.nvmexpress.discovery",
        "listen_address": {{ "trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "0" }}, "secure_channel": false }} }},
    {{ "method": "nvmf_create_subsystem", "params": {{ "nqn": "{NQN}", "allow_any_host": false, "serial_number": "SPDK00000000000001",
        "model_number": "SPDK bdev Controller", "max_namespaces": 32, "min_cntlid": 10, "max_cntlid": 20, "ana_reporting": false }} }},
    {{ "method": "nvmf_subsystem_add_host", "params": {{ "nqn": "{NQN}", "host": "{host}", "dhchap_key": "key0", "dhchap_ctrlr_key": "ckey0" }} }},
    {{ "method": "nvmf_subsystem_add_host", "params": {{ "nqn": "{NQN}", "host": "nqn.2014-08.org.example:other" }} }},
    {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "{NQN}", "namespace": {{ "nsid": 1, "bdev_name": "Malloc0",
        "nguid": "6A1F0C2E3B4D4E5F8A9B0C1D2E3F4A5B", "uuid": "{MALLOC_UUID}", "no_auto_visible": false }} }} }},
    {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "{NQN}", "namespace": {{ "nsid": 2, "bdev_name": "Uring0",
        "nguid": "C3D4E5F6A7B84C9D8E0F112233445566", "eui64": "0050C2FFFE000002", "uuid": "{URING_UUID}", "no_auto_visible": true,
        "ptpl_file": "{ptpl}" }} }} }},
    {{ "method": "nvmf_ns_add_host", "params": {{ "nqn": "{NQN}", "nsid": 2, "host": "{host}" }} }},
    {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "{NQN}", "namespace": {{ "nsid": 3, "bdev_name": "Malloc1", "no_auto_visible": true }} }} }},
    {{ "method": "nvmf_ns_add_host", "params": {{ "nqn": "{NQN}", "nsid": 3, "host": "nqn.2014-08.org.example:other" }} }},
    {{ "method": "nvmf_subsystem_add_ns", "params": {{ "nqn": "{NQN}", "namespace": {{ "nsid": 4, "bdev_name": "Zoned0" }} }} }},
    {{ "method": "nvmf_subsystem_add_listener", "params": {{ "nqn": "{NQN}",
        "listen_address": {{ "trtype": "TCP", "adrfam": "IPv6", "traddr": "::1", "trsvcid": "0" }}, "secure_channel": false }} }} ] }}
] }}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converted_spdk_configuration_serves_the_same_identity() {
    bounded(30, async {
        let dir = std::env::temp_dir().join(format!("nvmeof-spdk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("uring0.img");
        std::fs::File::create(&file).unwrap().set_len(8 << 20).unwrap();
        let (key, ctrl_key) = (dir.join("key0"), dir.join("ckey0"));
        // As `nvme gen-dhchap-key` writes them (SPDK reads the same format).
        let host_secret = "DHHC-1:01:o8/jE9vGsSdaRVAfWmfEhzOZ8S7KkfTi8F/tg64x4BN8zoYw:";
        let ctrl_secret =
            "DHHC-1:02:y2qROP+9W3z/7OkMI0q8PgfPEwe+P/DYCK98wHz6wx04yQ1XM7FMEW17+jPfWbDB6t6oNA==:";
        std::fs::write(&key, format!("{host_secret}\n")).unwrap();
        std::fs::write(&ctrl_key, ctrl_secret).unwrap();
        let hostnqn = host().nqn.clone();
        // What SPDK persisted for namespace 2: this host (by its host ID)
        // and another one registered, this one holding Write Exclusive.
        let ptpl = dir.join("uring0.ptpl");
        let host_uuid = nvmeof_initiator::common::spec::nqn::format_uuid(&host().id);
        let other_uuid = "0b0b0b0b-0b0b-0b0b-0b0b-0b0b0b0b0b0b";
        std::fs::write(
            &ptpl,
            format!(
                r#"{{"ptpl":true,"rtype":1,"crkey":4660,"bdev_uuid":"{URING_UUID}","holder_uuid":"{host_uuid}","registrants":[{{"rkey":43981,"host_uuid":"{other_uuid}"}},{{"rkey":4660,"host_uuid":"{host_uuid}"}}]}}"#
            ),
        )
        .unwrap();
        let json = saved(
            &hostnqn,
            file.to_str().unwrap(),
            key.to_str().unwrap(),
            ctrl_key.to_str().unwrap(),
            ptpl.to_str().unwrap(),
        );
        let read_key = |p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| e.to_string());
        let c = convert(&json, DeviceKind::of, read_key).unwrap();
        // SPDK answers discovery on its discovery listener only, this
        // target on every port: the one difference, and it says so.
        assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
        assert!(c.notes[0].contains("discovery is answered on every port"), "{:?}", c.notes);
        let (server, p1) = start(&TargetConfig::from_toml(&c.toml).unwrap()).await;
        let p2 = server.local_addrs[1];
        assert!(p2.is_ipv6(), "{p2}");

        // The discovery listener lists the subsystem under its own port.
        let log =
            discover(p1, ConnectOptions { host: Some(host()), ..ConnectOptions::discovery() }).await.unwrap();
        let entries: Vec<(String, String)> =
            nvme_subsystems(&log).map(|e| (e.subnqn.clone(), e.trsvcid.clone())).collect();
        assert_eq!(entries, [(NQN.to_string(), p2.port().to_string())]);
        let keys = |o: ConnectOptions| ConnectOptions {
            dhchap_secret: Some(host_secret.parse::<DhchapSecret>().unwrap()),
            dhchap_ctrl_secret: Some(ctrl_secret.parse::<DhchapSecret>().unwrap()),
            ..o
        };
        // Not through the discovery listener's port; not without the key.
        assert!(Controller::connect(p1, NQN, keys(opts())).await.is_err(), "through the discovery port");
        match Controller::connect(p2, NQN, opts()).await {
            Err(Error::Auth { reason: AuthError::NoKey, .. }) => {}
            other => panic!("without the key: {other:?}"),
        }

        // With both keys: authenticated both ways, SPDK's identity and limits.
        let ctrl = Controller::connect(p2, NQN, keys(opts())).await.unwrap();
        assert!(ctrl.info().authentication.as_ref().is_some_and(|a| a.bidirectional), "{:?}", ctrl.info());
        let id = ctrl.identify_controller().await.unwrap();
        assert_eq!((id.sn.trim(), id.mn.trim()), ("SPDK00000000000001", "SPDK bdev Controller"));
        assert!((10..=20).contains(&id.cntlid), "cntlid {}", id.cntlid);
        assert_eq!(id.ieee, [0xe4, 0xd2, 0x5c], "SPDK's (Intel's) OUI");
        // SPDK's CAP.MQES max_queue_depth − 1, IOCCSZ (64 + 4096) / 16, MDTS
        // log2(128 KiB / 4 KiB), 2 I/O queues of the 4 asked for.
        assert_eq!((ctrl.info().cap.mqes(), id.ioccsz, id.mdts), (63, 260, 5));
        assert_eq!((ctrl.info().inline_data, ctrl.io_queue_count()), (4096, 2));
        assert_ne!(id.oncs & (1 << 5), 0, "reservations, as SPDK offers them");

        // Namespace 3 belongs to the other host.
        assert_eq!(ctrl.active_namespaces().await.unwrap(), [1, 2, 4]);
        for (nsid, uuid, eui64) in
            [(1, MALLOC_UUID, None), (2, URING_UUID, Some([0x00, 0x50, 0xc2, 0xff, 0xfe, 0, 0, 2]))]
        {
            let ids = ctrl.namespace_id_descriptors(nsid).await.unwrap();
            // SPDK's list: EUI-64 where set, NGUID, UUID, CSI.
            let mut want = vec![
                NsIdDescriptor::Nguid(bytes(uuid)),
                NsIdDescriptor::Uuid(bytes(uuid)),
                NsIdDescriptor::Csi(Csi::NVM),
            ];
            if let Some(e) = eui64 {
                want.push(NsIdDescriptor::Eui64(e));
            }
            for d in &want {
                assert!(ids.contains(d), "namespace {nsid}: {d:?} not in {ids:?}");
            }
            assert_eq!(ids.len(), want.len(), "namespace {nsid}: {ids:?}");
        }
        let ram = ctrl.namespace(1).await.unwrap();
        assert_eq!((ram.block_size(), ram.size_bytes()), (512, 16 << 20));
        // The io_uring bdev's file: 4 KiB blocks, the data lands in the file.
        let ns = ctrl.namespace(2).await.unwrap();
        assert_eq!((ns.block_size(), ns.size_bytes()), (4096, 8 << 20));
        let data: Vec<u8> = (0..16384u32).map(|i| (i * 7 + 3) as u8).collect();
        ns.write(100, &data).await.unwrap();
        ns.flush().await.unwrap();
        let on_disk = std::fs::read(&file).unwrap();
        assert_eq!(&on_disk[100 * 4096..100 * 4096 + data.len()], &data[..]);
        let mut back = vec![0u8; data.len()];
        ns.read(100, &mut back).await.unwrap();
        assert_eq!(back, data);

        // SPDK's persisted registrations are back: this host holds Write
        // Exclusive with its key, the other host is registered, PTPL is on.
        let st = ns.reservation_report().await.unwrap();
        assert_eq!((st.rtype, st.ptpls, st.generation), (ReservationType::WRITE_EXCLUSIVE, true, 0));
        let regs: Vec<([u8; 16], u64, bool)> = st.registrants.iter().map(|r| (r.hostid, r.rkey, r.holds)).collect();
        assert_eq!(regs, [([0x0b; 16], 0xabcd, false), (host().id, 0x1234, true)]);
        // A change is in SPDK's file, in SPDK's form, before it completes.
        ns.reservation_register(RegisterAction::REPLACE, 0x1234, 0x5678, false).await.unwrap();
        let text = std::fs::read_to_string(&ptpl).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"ptpl":true,"rtype":1,"crkey":22136,"bdev_uuid":"{URING_UUID}","holder_uuid":"{host_uuid}","registrants":[{{"rkey":43981,"host_uuid":"{other_uuid}"}},{{"rkey":22136,"host_uuid":"{host_uuid}"}}]}}"#
            )
        );

        // The zoned bdev: SPDK's zones (capacity 1024 blocks of 4 KiB), as
        // many as SPDK exports (4 whole zones of the 4.88: a multiple of 2).
        let zns = ctrl.namespace(4).await.unwrap();
        assert_eq!((zns.block_size(), zns.size_bytes()), (4096, 16 << 20));
        let zones = zns.zones().await.unwrap();
        let layout: Vec<(u64, u64)> = zones.iter().map(|z| (z.slba, z.capacity)).collect();
        assert_eq!(layout, [(0, 1024), (1024, 1024), (2048, 1024), (3072, 1024)]);
        assert_eq!(zns.zone_append(1024, &[7u8; 8192], Default::default()).await.unwrap(), 1024);
        assert_eq!(zns.zones().await.unwrap()[1].wp, 1026);

        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
}

/// What a host reads of subsystem `nqn` through `addr` with `o`: serial and
/// model numbers, MQES, IOCCSZ, MDTS, the I/O queues granted, and each
/// namespace's identification descriptors (UUID, NGUID, EUI-64).
async fn identity(
    addr: std::net::SocketAddr,
    nqn: &str,
    o: ConnectOptions,
    nsids: &[u32],
) -> (Vec<String>, Vec<Vec<NsIdDescriptor>>) {
    let ctrl = Controller::connect(addr, nqn, o).await.unwrap();
    let id = ctrl.identify_controller().await.unwrap();
    let text = vec![
        id.sn.trim().to_string(),
        id.mn.trim().to_string(),
        ctrl.info().cap.mqes().to_string(),
        id.ioccsz.to_string(),
        id.mdts.to_string(),
        ctrl.io_queue_count().to_string(),
    ];
    let mut ids = Vec::new();
    for &nsid in nsids {
        let mut d: Vec<NsIdDescriptor> = ctrl
            .namespace_id_descriptors(nsid)
            .await
            .unwrap()
            .into_iter()
            .filter(|d| !matches!(d, NsIdDescriptor::Csi(_)))
            .collect();
        d.sort_by_key(|d| format!("{d:?}"));
        ids.push(d);
    }
    ctrl.shutdown().await.unwrap();
    (text, ids)
}

/// `export-spdk`, then `import-spdk` of what it wrote (as SPDK's
/// `save_config` would give it back): hosts see the same subsystems —
/// serial and model numbers, the transport's limits, every namespace's
/// UUID, NGUID and EUI-64 (derived ones included), a host's DH-HMAC-CHAP
/// keys through keyring files only its owner may read, the namespaces a
/// host may see — and the data of a file namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_spdk_configuration_serves_the_same_identity() {
    use std::os::unix::fs::PermissionsExt;
    bounded(40, async {
        let dir = std::env::temp_dir().join(format!("nvmeof-spdk-export-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("ns1.img");
        std::fs::File::create(&file).unwrap().set_len(8 << 20).unwrap();
        let hostnqn = host().nqn.clone();
        let other = "nqn.2014-08.org.nvmexpress:uuid:0b0b0b0b-0b0b-4b0b-8b0b-0b0b0b0b0b0b";
        let secret = "DHHC-1:01:o8/jE9vGsSdaRVAfWmfEhzOZ8S7KkfTi8F/tg64x4BN8zoYw:";
        let toml = format!(
            r#"
[limits]
max_queue_entries = 64
max_io_queues = 2
in_capsule_data = 4096
mdts = 5

[[port]]
listen = "127.0.0.1:0"

[[subsystem]]
nqn = "{NQN}"
model = "to spdk"
allowed_hosts = [{{ nqn = "{hostnqn}", dhchap_key = "{secret}" }}, "{other}"]

[[subsystem.namespace]]
file = {file:?}
block_size = 4096
eui64 = "0011223344556677"

[[subsystem.namespace]]
ram = "4M"
hosts = ["{other}"]

[[subsystem.namespace]]
ram = "4M"
uuid = "{MALLOC_UUID}"
"#
        );
        let cfg = TargetConfig::from_toml(&toml).unwrap();
        let keys = dir.join("keys");
        let e = nvmeof_target::spdk::export(&cfg, Some(&keys));
        assert_eq!(e.notes.len(), 2, "{:?}", e.notes);
        assert!(
            e.notes[0].contains("O_DIRECT") && e.notes[1].contains("readable by their owner only"),
            "{:?}",
            e.notes
        );
        assert_eq!(e.key_files.len(), 1);
        // What export-spdk does with them (see its --key-dir).
        std::fs::create_dir_all(&keys).unwrap();
        for (p, s) in &e.key_files {
            std::fs::write(p, s).unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let read_key = |p: &std::path::Path| std::fs::read_to_string(p).map_err(|e| e.to_string());
        let back = convert(&e.json, DeviceKind::of, read_key).unwrap();
        let back_cfg = TargetConfig::from_toml(&back.toml).unwrap();

        let with_key =
            || ConnectOptions { dhchap_secret: Some(secret.parse::<DhchapSecret>().unwrap()), ..opts() };
        let (server, addr) = start(&cfg).await;
        let ours = identity(addr, NQN, with_key(), &[1, 3]).await;
        // Written through the original target, read through the converted one.
        let ctrl = Controller::connect(addr, NQN, with_key()).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        ns.write(3, &[0x5a; 4096]).await.unwrap();
        ns.flush().await.unwrap();
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;

        let (server, addr) = start(&back_cfg).await;
        let theirs = identity(addr, NQN, with_key(), &[1, 3]).await;
        assert_eq!(ours, theirs);
        assert_eq!(ours.0[1..], ["to spdk", "63", "260", "5", "2"].map(String::from));
        assert!(ours.1[0].contains(&NsIdDescriptor::Eui64([0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77])));
        assert!(ours.1[1].contains(&NsIdDescriptor::Uuid(bytes(MALLOC_UUID))));
        // The host still needs its key; namespace 2 is the other host's only.
        assert!(Controller::connect(addr, NQN, opts()).await.is_err(), "without the key");
        let ctrl = Controller::connect(addr, NQN, with_key()).await.unwrap();
        assert_eq!(ctrl.active_namespaces().await.unwrap(), [1, 3]);
        let mut buf = vec![0u8; 4096];
        ctrl.namespace(1).await.unwrap().read(3, &mut buf).await.unwrap();
        assert!(buf.iter().all(|&b| b == 0x5a));
        ctrl.shutdown().await.unwrap();
        let o =
            ConnectOptions { host: Some(nvmeof_initiator::HostIdentity::new(other, [0x0b; 16])), ..opts() };
        let ctrl = Controller::connect(addr, NQN, o).await.unwrap();
        assert_eq!(ctrl.active_namespaces().await.unwrap(), [1, 2, 3]);
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
}
