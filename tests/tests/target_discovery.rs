//! Target integration tests: the discovery controller over loopback TCP,
//! checked against nvmet (`drivers/nvme/target/discovery.c`): log page format
//! and windows, the commands a discovery controller takes, host filtering and
//! discovery log change notices.

use std::time::Duration;

use nvmeof_common::opcode::AdminOpcode;
use nvmeof_common::spec::connect::{data_off, invalid_param_dw0};
use nvmeof_common::spec::discovery::{AdrFam, SecType, SubType, TrType, TREQ_DISABLE_SQFLOW};
use nvmeof_common::spec::features::{FeatureId, GetFeaturesCmd, SetFeaturesCmd};
use nvmeof_common::spec::identify::{Cns, IdentifyCmd, IdentifyController};
use nvmeof_common::spec::log::{GetLogPageCmd, LogPageId};
use nvmeof_common::spec::{ConnectCmd, DiscoveryLog, DISCOVERY_NQN};
use nvmeof_common::sqe::fabrics_off;
use nvmeof_common::{SglDescriptor, Sqe, Status};
use nvmeof_target::config::{SubsystemConfig, TargetConfig};
use nvmeof_target::server::{build_subsystem, Server};
use nvmeof_tests::harness::*;
use nvmeof_tests::raw_client::{RawClient, HOSTNQN};

const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:99999999-8888-7777-6666-555555555555";
const RESTRICTED: &str = "nqn.2024-01.io.nvmeof.test:restricted";
const OPEN2: &str = "nqn.2024-01.io.nvmeof.test:open2";

/// A subsystem with a 1 MiB RAM namespace, open to `allowed_hosts`.
fn restricted_config(nqn: &str, allowed_hosts: Option<Vec<String>>) -> SubsystemConfig {
    SubsystemConfig {
        nqn: nqn.into(),
        model: "m".into(),
        serial: None,
        firmware: None,
        ieee_oui: None,
        allowed_hosts,
        host_keys: Default::default(),
        namespaces: vec![ram_ns(1, 1 << 20, 512)],
        cntlids: nvmeof_target::core::target::CNTLID_RANGE,
        ports: None,
        max_io_queues: None,
    }
}

/// Connects and enables a discovery controller for `hostnqn` (KATO 0).
async fn discovery_queue(addr: std::net::SocketAddr, hostnqn: &str) -> RawClient {
    let mut d = RawClient::connect(addr).await;
    let cqe = d.admin_connect(DISCOVERY_NQN, hostnqn).await;
    assert!(cqe.status.is_success(), "discovery connect: {}", cqe.status);
    d.enable().await;
    d
}

/// The whole log in one read of `len` bytes.
async fn log_bytes(d: &mut RawClient, lpo: u64, len: u32) -> Vec<u8> {
    d.get_log_page(LogPageId::DISCOVERY, 0, lpo, len, true).await.ok().data
}

/// Enables discovery log change notices and leaves one AER outstanding; returns its CID.
async fn arm_aen(d: &mut RawClient) -> u16 {
    let set = SetFeaturesCmd::new(FeatureId::ASYNC_EVENT, 1 << 31);
    assert_eq!(d.submit(set.to_sqe(0), None).await.ok().cqe.dw0(), 1 << 31);
    let mut aer = Sqe::new(AdminOpcode::ASYNC_EVENT.0);
    aer.set_sgl(SglDescriptor::transport(0));
    let aer = d.start(aer).await;
    // A round trip, so the target holds the AER before the test changes anything.
    d.keep_alive().await.ok();
    aer
}

/// Whether the AER `aer` has completed: a Keep Alive sent now completes after
/// any notice the target queued before it arrived.
async fn aen_fired(d: &mut RawClient, aer: u16) -> bool {
    let mut ka = Sqe::new(AdminOpcode::KEEP_ALIVE.0);
    ka.set_sgl(SglDescriptor::transport(0));
    let ka = d.start(ka).await;
    let first = d.next_completion().await.expect("a completion");
    if first.cid == aer {
        assert_eq!(first.cqe.dw0(), 0x0070_F002, "discovery log change notice");
        d.wait(ka).await.ok();
        return true;
    }
    assert_eq!(first.cid, ka);
    first.ok();
    false
}

/// Header, entry fields and windows of the discovery log (nvmet
/// `nvmet_execute_disc_get_log_page`, `nvmet_format_discovery_entry`).
#[tokio::test]
async fn discovery_log_format_and_windows() {
    bounded(30, async {
        let (_server, addr) = start(&default_config()).await;
        let mut d = discovery_queue(addr, HOSTNQN).await;

        let full = log_bytes(&mut d, 0, 3 * 1024).await;
        let log = DiscoveryLog::decode(&full).unwrap();
        assert!(log.is_complete());
        assert_eq!((log.header.numrec, log.header.recfmt), (2, 0));
        assert!(log.header.genctr > 0);
        // Entry 0: the current discovery subsystem (6.x nvmet), then our subsystem.
        assert_eq!(log.entries[0].subtype, SubType::CURRENT_DISCOVERY);
        assert_eq!(log.entries[0].subnqn, DISCOVERY_NQN);
        assert_eq!(log.entries[1].subtype, SubType::NVME);
        assert_eq!(log.entries[1].subnqn, SUBNQN);
        for e in &log.entries {
            assert_eq!(e.trtype, TrType::TCP);
            assert_eq!(e.adrfam, AdrFam::IPV4);
            assert_eq!(e.treq, TREQ_DISABLE_SQFLOW, "nvmet default TREQ");
            assert_eq!(e.portid, 1);
            assert_eq!(e.cntlid, 0xFFFF);
            assert_eq!(e.asqsz, 32);
            assert_eq!(e.eflags, 0);
            assert_eq!(e.traddr, "127.0.0.1");
            assert_eq!(e.trsvcid, addr.port().to_string());
            assert_eq!(e.tcp_sectype(), SecType::NONE);
            assert!(e.tsas.iter().all(|&b| b == 0));
        }
        // Raw offsets, NUL padding (nvmet copies NUL-filled configfs strings).
        let e1 = &full[2048..3072];
        assert_eq!(&e1[512..521], b"127.0.0.1");
        assert!(e1[521..768].iter().all(|&b| b == 0));
        assert!(full[18..1024].iter().all(|&b| b == 0), "header reserved bytes");

        // Windows: a 20-byte header read, half entries, past the end (zero filled).
        assert_eq!(log_bytes(&mut d, 0, 20).await, full[..20]);
        assert_eq!(log_bytes(&mut d, 1024 + 512, 1024).await, full[1536..2560]);
        let tail = log_bytes(&mut d, 2048 + 1020, 16).await;
        assert_eq!(&tail[..4], &full[3068..3072]);
        assert!(tail[4..].iter().all(|&b| b == 0));
        // LPO at the end: zeros; LPO not dword aligned or past the end: Invalid Field.
        assert!(log_bytes(&mut d, 3072, 8).await.iter().all(|&b| b == 0));
        for lpo in [2, 1025, 3076, 1 << 40] {
            let r = d.get_log_page(LogPageId::DISCOVERY, 0, lpo, 4, false).await;
            assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more(), "LPO {lpo}");
        }
        // NUMDU: a 256 KiB read (NUMD above 16 bits) returns the log and zeros.
        let big = log_bytes(&mut d, 0, 256 << 10).await;
        assert_eq!(big.len(), 256 << 10);
        assert_eq!(big[..3072], full[..]);
        assert!(big[3072..].iter().all(|&b| b == 0));
        // LSP and LSI are ignored (nvmet does not look at them).
        let mut c = GetLogPageCmd::new(LogPageId::DISCOVERY, 0, 0, 3072);
        c.lsp = 0x7F;
        c.lsi = 0x1234;
        assert_eq!(d.submit(c.to_sqe(0), None).await.ok().data, full);
        // A wrong SGL length: SGL Data Invalid, nothing sent.
        let mut s = GetLogPageCmd::new(LogPageId::DISCOVERY, 0, 0, 1024).to_sqe(0);
        s.set_sgl(SglDescriptor::transport(512));
        let r = d.submit(s, None).await;
        assert_eq!(r.status(), Status::SGL_INVALID_DATA.with_dnr().with_more());
        assert!(r.data.is_empty());
    })
    .await;
}

/// What a discovery controller accepts (nvmet `nvmet_parse_discovery_cmd`):
/// Identify CNS 01h, Get Log Page 70h, Set/Get Features KATO and AEC, AER,
/// Keep Alive, Property Get/Set; everything else Invalid Opcode, other
/// CNS/LID/FID Invalid Field.
#[tokio::test]
async fn discovery_controller_commands() {
    bounded(30, async {
        let (_server, addr) = start(&default_config()).await;
        // Before CC.EN: Invalid Opcode, not Command Sequence Error.
        let mut d = RawClient::connect(addr).await;
        assert!(d.admin_connect(DISCOVERY_NQN, HOSTNQN).await.status.is_success());
        let r = d.identify(Cns::CTRL, 0).await;
        assert_eq!(r.status(), Status::INVALID_OPCODE.with_dnr().with_more());
        d.enable().await;

        let id = IdentifyController::decode(&d.identify(Cns::CTRL, 0).await.ok().data).unwrap();
        assert_eq!((id.cntrltype, id.subnqn.as_str()), (2, DISCOVERY_NQN));
        assert_eq!(id.oaes, 1 << 31);
        assert_eq!(id.lpa & (1 << 2), 1 << 2, "LPA: extended data for Get Log Page");
        for cns in [Cns::NS, Cns::ACTIVE_NS_LIST, Cns::NS_DESC_LIST, Cns(0x10)] {
            let r = d.submit(IdentifyCmd::new(cns, 1).to_sqe(0), None).await;
            assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more(), "CNS {cns:?}");
        }
        for lid in [LogPageId::SUPPORTED, LogPageId::ERROR, LogPageId::SMART, LogPageId::CHANGED_NS] {
            let r = d.get_log_page(lid, 0xFFFF_FFFF, 0, 512, false).await;
            assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more(), "LID {lid:?}");
        }
        // Opcodes an I/O controller has but a discovery controller does not.
        for op in [0x00u8, 0x01, 0x04, 0x05, 0x08, 0x14, 0x0D, 0x10, 0x11, 0x80, 0x84, 0xC0] {
            let mut s = Sqe::new(op);
            s.set_sgl(SglDescriptor::transport(0));
            let r = d.submit(s, None).await;
            assert_eq!(r.status(), Status::INVALID_OPCODE.with_dnr().with_more(), "opcode {op:#x}");
        }
        // Features: KATO (0 at Connect ⇒ nvmet's 120 s) and AEC; nothing else.
        let kato = d.submit(GetFeaturesCmd::new(FeatureId::KATO).to_sqe(0), None).await.ok();
        assert_eq!(kato.cqe.dw0(), 120_000);
        for fid in [FeatureId::NUM_QUEUES, FeatureId::VOLATILE_WC, FeatureId::HOST_ID] {
            let r = d.submit(GetFeaturesCmd::new(fid).to_sqe(0), None).await;
            assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more(), "Get Features {fid:?}");
            let r = d.submit(SetFeaturesCmd::new(fid, 0).to_sqe(0), None).await;
            assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more(), "Set Features {fid:?}");
        }
        let r = d.submit(SetFeaturesCmd::new(FeatureId::ASYNC_EVENT, 1 << 8).to_sqe(0), None).await;
        assert_eq!(r.status(), Status::INVALID_FIELD.with_dnr().with_more(), "AEC beyond bit 31");
        d.keep_alive().await.ok();
        let set = d.submit(SetFeaturesCmd::new(FeatureId::KATO, 1500).to_sqe(0), None).await.ok();
        assert_eq!(set.cqe.dw0(), 2);
        let kato = d.submit(GetFeaturesCmd::new(FeatureId::KATO).to_sqe(0), None).await.ok();
        assert_eq!(kato.cqe.dw0(), 2000);
        d.keep_alive().await.ok();

        // No I/O queues: an I/O Connect naming the discovery controller is refused (QID).
        let mut io = RawClient::connect(addr).await;
        let cqe = io.io_connect(1, d.cntlid, DISCOVERY_NQN, HOSTNQN).await;
        assert_eq!(cqe.status, Status::CONNECT_INVALID_PARAM.with_dnr());
        assert_eq!(cqe.dw0(), invalid_param_dw0(false, fabrics_off::QID as u16));
        // An admin Connect to the discovery NQN with a CNTLID other than FFFFh: refused.
        let mut a = RawClient::connect(addr).await;
        let mut data = a.connect_data(DISCOVERY_NQN, 1);
        data.hostnqn = HOSTNQN.into();
        let c = a.connect_cmd(ConnectCmd::admin(0), data).await;
        assert_eq!(c.cqe.status, Status::CONNECT_INVALID_PARAM.with_dnr());
        assert_eq!(c.cqe.dw0(), invalid_param_dw0(true, data_off::CNTLID as u16));
        // The discovery controller itself is unaffected.
        d.keep_alive().await.ok();
    })
    .await;
}

/// A persistent discovery controller (`nvme discover --persistent`: KATO set
/// at Connect) is torn down when the host stops sending anything for KATO.
#[tokio::test]
async fn persistent_discovery_controller_keep_alive_timeout() {
    bounded(30, async {
        let (_server, addr) = start(&default_config()).await;
        let mut d = RawClient::connect(addr).await;
        assert!(d.admin_connect_kato(DISCOVERY_NQN, HOSTNQN, 1000).await.status.is_success());
        d.enable().await;
        let kato = d.submit(GetFeaturesCmd::new(FeatureId::KATO).to_sqe(0), None).await.ok();
        assert_eq!(kato.cqe.dw0(), 1000);
        // Keep Alives every 300 ms keep it for well over KATO.
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            d.keep_alive().await.ok();
        }
        // Silence: the controller goes within KATO plus one timer period.
        d.expect_closed_within(Duration::from_secs(4)).await;
    })
    .await;
}

/// Only subsystems the connecting host may use are listed, and a change that
/// concerns only other hosts raises no notice for this one (nvmet
/// `nvmet_port_disc_changed(port, subsys)` skips controllers whose host
/// `nvmet_host_allowed` refuses); GENCTR still moves (nvmet's is global).
#[tokio::test]
async fn discovery_change_notice_only_for_hosts_allowed_to_see_the_change() {
    bounded(30, async {
        let (server, addr) = start(&default_config()).await;
        let mut d = discovery_queue(addr, HOSTNQN).await;
        let mut other = discovery_queue(addr, OTHER_HOST).await;
        let g0 = DiscoveryLog::decode(&log_bytes(&mut d, 0, 20).await).unwrap().header.genctr;
        let aer = arm_aen(&mut d).await;
        let aer_other = arm_aen(&mut other).await;

        // A subsystem only OTHER_HOST may use: a notice for it, none for us.
        let restricted =
            build_subsystem(RESTRICTED, "m", Some(vec![OTHER_HOST.into()]), &[ram_ns(1, 1 << 20, 512)])
                .unwrap();
        server.target.add_subsystem(restricted);
        assert!(aen_fired(&mut other, aer_other).await, "the allowed host gets the notice");
        assert!(!aen_fired(&mut d, aer).await, "notice for a subsystem this host cannot see");
        let log = DiscoveryLog::decode(&log_bytes(&mut d, 0, 4096).await).unwrap();
        assert!(log.header.genctr > g0);
        assert!(!log.entries.iter().any(|e| e.subnqn == RESTRICTED));
        let theirs = DiscoveryLog::decode(&log_bytes(&mut other, 0, 4096).await).unwrap();
        assert!(theirs.entries.iter().any(|e| e.subnqn == RESTRICTED));

        // Removing it: still nothing for us.
        server.target.remove_subsystem(RESTRICTED);
        assert!(!aen_fired(&mut d, aer).await, "notice for removing a subsystem this host cannot see");

        // A subsystem any host may use: the notice arrives.
        server.target.add_subsystem(build_subsystem(OPEN2, "m", None, &[ram_ns(1, 1 << 20, 512)]).unwrap());
        assert!(aen_fired(&mut d, aer).await, "no notice for a subsystem this host can see");
        let log = DiscoveryLog::decode(&log_bytes(&mut d, 0, 4096).await).unwrap();
        assert!(log.entries.iter().any(|e| e.subnqn == OPEN2));
    })
    .await;
}

/// The same through a configuration reload (SIGHUP): adding a subsystem
/// restricted to another host notifies only that host.
#[tokio::test]
async fn reload_notifies_only_hosts_that_see_the_change() {
    bounded(30, async {
        let mut cfg = default_config();
        let (server, addr) = start(&cfg).await;
        let mut d = discovery_queue(addr, HOSTNQN).await;
        let aer = arm_aen(&mut d).await;
        cfg.subsystems.push(restricted_config(RESTRICTED, Some(vec![OTHER_HOST.into()])));
        server.reload(&cfg).unwrap();
        assert!(!aen_fired(&mut d, aer).await, "notice for a subsystem this host cannot see");
        cfg.subsystems.push(restricted_config(OPEN2, None));
        server.reload(&cfg).unwrap();
        assert!(aen_fired(&mut d, aer).await);
        // An unchanged configuration changes nothing: same GENCTR, no notice.
        let g = DiscoveryLog::decode(&log_bytes(&mut d, 0, 20).await).unwrap().header.genctr;
        let _ = log_bytes(&mut d, 0, 20).await;
        d.get_log_page(LogPageId::DISCOVERY, 0, 0, 20, false).await.ok(); // RAE=0 re-arms
        let aer = arm_aen(&mut d).await;
        server.reload(&cfg).unwrap();
        assert!(!aen_fired(&mut d, aer).await);
        assert_eq!(DiscoveryLog::decode(&log_bytes(&mut d, 0, 20).await).unwrap().header.genctr, g);
    })
    .await;
}

/// A reload replaces a running subsystem's allowed hosts, as nvmet's
/// `allowed_hosts` links and `attr_allow_any_host` do while it runs: new
/// Connects use the new list (a host left out gets Connect Invalid Host), a
/// host already connected keeps its controller, I/O queues included
/// (nvmet checks the host in `nvmet_alloc_ctrl` only), and the discovery
/// controllers of exactly the hosts that gain or lose the subsystem get the
/// notice (`nvmet_subsys_disc_changed`), with the log changed for them.
#[tokio::test]
async fn reload_replaces_allowed_hosts_and_keeps_connected_hosts() {
    bounded(30, async {
        let mut cfg = default_config();
        cfg.subsystems.push(restricted_config(RESTRICTED, Some(vec![OTHER_HOST.into()])));
        let (server, addr) = start(&cfg).await;
        let lists =
            |log: Vec<u8>| DiscoveryLog::decode(&log).unwrap().entries.iter().any(|e| e.subnqn == RESTRICTED);
        let refused = |cqe: nvmeof_common::Cqe| {
            assert_eq!(cqe.status, Status::CONNECT_INVALID_HOST.with_dnr());
            assert_eq!(cqe.dw0(), invalid_param_dw0(true, data_off::HOSTNQN as u16));
        };
        let mut d = discovery_queue(addr, HOSTNQN).await;
        let mut other = discovery_queue(addr, OTHER_HOST).await;
        assert!(!lists(log_bytes(&mut d, 0, 4096).await));
        refused(RawClient::connect(addr).await.admin_connect(RESTRICTED, HOSTNQN).await);
        // OTHER_HOST connects while it may: an admin queue and I/O queue 1.
        let mut o = RawClient::connect(addr).await;
        let cqe = o.admin_connect(RESTRICTED, OTHER_HOST).await;
        assert!(cqe.status.is_success(), "{}", cqe.status);
        let cntlid = cqe.dw0() as u16;
        o.enable().await;
        let mut oio = RawClient::connect(addr).await;
        assert!(oio.io_connect(1, cntlid, RESTRICTED, OTHER_HOST).await.status.is_success());
        let aer = arm_aen(&mut d).await;
        let aer_other = arm_aen(&mut other).await;

        // Now only HOSTNQN: both hosts' logs change, both get the notice.
        cfg.subsystems[1].allowed_hosts = Some(vec![HOSTNQN.into()]);
        server.reload(&cfg).unwrap();
        assert!(aen_fired(&mut d, aer).await, "no notice for the host that gained the subsystem");
        assert!(aen_fired(&mut other, aer_other).await, "no notice for the host that lost it");
        assert!(lists(log_bytes(&mut d, 0, 4096).await));
        assert!(!lists(log_bytes(&mut other, 0, 4096).await));
        let mut h = RawClient::connect(addr).await;
        let cqe = h.admin_connect(RESTRICTED, HOSTNQN).await;
        assert!(cqe.status.is_success(), "the added host: {}", cqe.status);
        refused(RawClient::connect(addr).await.admin_connect(RESTRICTED, OTHER_HOST).await);
        // The removed host's controller stays: admin commands, I/O on its
        // queue, and another I/O queue of it.
        let id = IdentifyController::decode(&o.identify(Cns::CTRL, 0).await.ok().data).unwrap();
        assert_eq!(id.cntlid, cntlid);
        oio.write(1, 0, &[0x5A; 512], 512).await.ok();
        assert_eq!(oio.read(1, 0, 1, 512).await.ok().data, vec![0x5A; 512]);
        let mut oio2 = RawClient::connect(addr).await;
        let cqe = oio2.io_connect(2, cntlid, RESTRICTED, OTHER_HOST).await;
        assert!(cqe.status.is_success(), "I/O queue of the removed host's controller: {}", cqe.status);

        // Any host: only OTHER_HOST's log changes, so only it hears of it
        // (both re-arm: a log read with RAE clear unmasks the notice).
        d.get_log_page(LogPageId::DISCOVERY, 0, 0, 20, false).await.ok();
        other.get_log_page(LogPageId::DISCOVERY, 0, 0, 20, false).await.ok();
        let aer = arm_aen(&mut d).await;
        let aer_other = arm_aen(&mut other).await;
        cfg.subsystems[1].allowed_hosts = None;
        server.reload(&cfg).unwrap();
        assert!(aen_fired(&mut other, aer_other).await, "no notice for the host that gained the subsystem");
        assert!(!aen_fired(&mut d, aer).await, "notice for a host whose log did not change");
        assert!(lists(log_bytes(&mut other, 0, 4096).await));
        let cqe = RawClient::connect(addr).await.admin_connect(RESTRICTED, OTHER_HOST).await;
        assert!(cqe.status.is_success(), "any host: {}", cqe.status);
    })
    .await;
}

/// A subsystem named with the well-known discovery NQN cannot be exported
/// (nvmet `nvmet_subsys_make`: "can't create discovery subsystem through
/// configfs"): Connect to that NQN reaches the discovery controller, so its
/// namespaces would be unreachable, and the log would list the discovery NQN
/// as an NVM subsystem for connect-all.
#[tokio::test]
async fn subsystem_with_the_discovery_nqn_is_refused() {
    init_tracing();
    let mut cfg = default_config();
    cfg.subsystems[0].nqn = DISCOVERY_NQN.into();
    match Server::start(&cfg).await {
        Ok(s) => {
            let addr = s.local_addrs[0];
            let mut d = discovery_queue(addr, HOSTNQN).await;
            let log = DiscoveryLog::decode(&log_bytes(&mut d, 0, 4096).await).unwrap();
            panic!("started; the log lists {:?}", log.entries.iter().map(|e| e.subtype).collect::<Vec<_>>());
        }
        Err(e) => assert!(e.to_string().contains(DISCOVERY_NQN), "{e}"),
    }
    let toml = format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n[[subsystem]]\nnqn = \"{DISCOVERY_NQN}\"\n\
         [[subsystem.namespace]]\nram = \"1M\"\n"
    );
    let e = TargetConfig::from_toml(&toml).unwrap_err().to_string();
    assert!(e.contains("subsystem[0].nqn"), "{e}");
    // A reload adding it is refused and changes nothing.
    let (server, _addr) = start(&default_config()).await;
    let mut bad = default_config();
    bad.subsystems
        .push(SubsystemConfig { nqn: DISCOVERY_NQN.into(), ..default_config().subsystems.remove(0) });
    assert!(server.reload(&bad).is_err());
    assert!(server.target.discovery.namespaces().is_empty());
    assert_eq!(server.target.subsystems().len(), 1);
}

/// Two ports, IPv4 and IPv6: each entry carries its port's ADRFAM, TRADDR,
/// TRSVCID and PORTID; the port the host came in on comes first.
#[tokio::test]
async fn ipv4_and_ipv6_ports() {
    bounded(30, async {
        let mut cfg = default_config();
        cfg.listen.push("[::1]:0".parse().unwrap());
        let (server, _) = start(&cfg).await;
        let (v4, v6) = (server.local_addrs[0], server.local_addrs[1]);
        for (via, first) in [(v6, 2u16), (v4, 1)] {
            let mut d = discovery_queue(via, HOSTNQN).await;
            let log = DiscoveryLog::decode(&log_bytes(&mut d, 0, 5 * 1024).await).unwrap();
            assert!(log.is_complete());
            assert_eq!(log.header.numrec, 4);
            assert_eq!(log.entries[0].portid, first);
            assert_eq!(log.entries[0].subtype, SubType::CURRENT_DISCOVERY);
            for e in &log.entries {
                let (fam, addr) = if e.portid == 1 { (AdrFam::IPV4, v4) } else { (AdrFam::IPV6, v6) };
                assert_eq!(e.adrfam, fam);
                assert_eq!(e.traddr, addr.ip().to_string());
                assert_eq!(e.trsvcid, addr.port().to_string());
            }
            assert_eq!(log.entries.iter().filter(|e| e.subnqn == SUBNQN).count(), 2);
        }
    })
    .await;
}
