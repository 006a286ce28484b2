//! Initiator discovery against a target whose discovery log lies (a proxy
//! rewrites the 20-byte header reads, which `Controller::discovery_log` makes
//! alone, like libnvme, on their way to the host), and across targets that
//! refer to each other (referrals).

mod initiator_util;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::common::spec::discovery::{AdrFam, SubType, TrType};
use nvmeof_initiator::common::spec::DISCOVERY_NQN;
use nvmeof_initiator::common::Status;
use nvmeof_initiator::{
    discover, discover_all, discover_all_nqn, discover_nqn, nvme_subsystems, ConnectOptions, Controller,
    ControllerEvent, ControllerState, Error, MAX_DISCOVERY_SERVICES,
};
use nvmeof_target::config::TargetConfig;
use nvmeof_tests::harness::HeldPort;
use nvmeof_tools::{admin, ExitCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the proxy rewrites a discovery log header (GENCTR at 0, NUMREC at 8).
#[derive(Clone, Copy)]
enum Lie {
    /// A new GENCTR on every read.
    GenctrMoves,
    /// This NUMREC.
    Numrec(u64),
}

/// Forwards to `upstream`; C2HData PDUs of exactly 20 bytes at offset 0
/// (discovery log header reads) are rewritten per `lie`. No digests.
async fn lying_proxy(upstream: SocketAddr, lie: Lie) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicU64::new(1000));
    tokio::spawn(async move {
        while let Ok((down, _)) = l.accept().await {
            let n = n.clone();
            tokio::spawn(async move {
                let Ok(up) = TcpStream::connect(upstream).await else { return };
                let (mut dr, mut dw) = down.into_split();
                let (mut ur, mut uw) = up.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut dr, &mut uw).await;
                });
                let mut icresp = [0u8; 128];
                if ur.read_exact(&mut icresp).await.is_err() || dw.write_all(&icresp).await.is_err() {
                    return;
                }
                loop {
                    let mut ch = [0u8; 8];
                    if ur.read_exact(&mut ch).await.is_err() {
                        return;
                    }
                    let plen = u32::from_le_bytes(ch[4..8].try_into().unwrap()) as usize;
                    let mut pdu = ch.to_vec();
                    pdu.resize(plen.max(8), 0);
                    if ur.read_exact(&mut pdu[8..]).await.is_err() {
                        return;
                    }
                    let pdo = pdu[3] as usize;
                    let datao = u32::from_le_bytes(pdu[12..16].try_into().unwrap());
                    let datal = u32::from_le_bytes(pdu[16..20].try_into().unwrap());
                    if pdu[0] == 0x07 && datao == 0 && datal == 20 && pdu.len() >= pdo + 20 {
                        let h = &mut pdu[pdo..pdo + 20];
                        match lie {
                            Lie::GenctrMoves => {
                                h[0..8].copy_from_slice(&n.fetch_add(1, Ordering::Relaxed).to_le_bytes())
                            }
                            Lie::Numrec(x) => h[8..16].copy_from_slice(&x.to_le_bytes()),
                        }
                    }
                    if dw.write_all(&pdu).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn disc_opts() -> ConnectOptions {
    ConnectOptions {
        host: Some(host()),
        command_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        ..ConnectOptions::discovery()
    }
}

/// GENCTR that never settles: a bounded number of retries, then an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_log_whose_genctr_keeps_moving_is_an_error() {
    bounded(20, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        let proxy = lying_proxy(addr, Lie::GenctrMoves).await;
        match discover(proxy, disc_opts()).await {
            Err(Error::Controller(m)) => assert!(m.contains("GENCTR"), "{m}"),
            other => panic!("{other:?}"),
        }
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// NUMREC far beyond anything real: an error before any allocation for it;
/// NUMREC beyond what the target has: zero-filled records or the target's
/// error, no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_log_with_a_lying_numrec() {
    bounded(20, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        for numrec in [u64::MAX, 1 << 40, (1 << 16) + 1] {
            let proxy = lying_proxy(addr, Lie::Numrec(numrec)).await;
            match discover(proxy, disc_opts()).await {
                Err(Error::Controller(m)) => assert!(m.contains("records"), "{m}"),
                other => panic!("NUMREC {numrec}: {other:?}"),
            }
        }
        // One record more than the log has: read in one piece, zero filled.
        let proxy = lying_proxy(addr, Lie::Numrec(3)).await;
        let log = discover(proxy, disc_opts()).await.unwrap();
        assert_eq!(log.entries.len(), 3);
        assert_eq!(log.entries[1].subnqn, SUBNQN);
        assert!(log.entries[2].subnqn.is_empty() && log.entries[2].traddr.is_empty());
        // Past the 4 KiB read: an LPO beyond the log is refused (Invalid Field).
        let proxy = lying_proxy(addr, Lie::Numrec(8)).await;
        match discover(proxy, disc_opts()).await {
            Err(Error::Nvme { status, .. }) => assert_eq!(status.code(), Status::INVALID_FIELD.code()),
            other => panic!("{other:?}"),
        }
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// A target exporting `nqn` on one loopback port whose discovery log refers
/// hosts to `referrals` (address, PORTID).
fn referring(nqn: &str, referrals: &[(SocketAddr, u16)]) -> TargetConfig {
    let r: String =
        referrals.iter().map(|(a, id)| format!("[[referral]]\naddress = \"{a}\"\nportid = {id}\n")).collect();
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n\n{r}\n[[subsystem]]\nnqn = \"{nqn}\"\n[[subsystem.namespace]]\nram = \"1M\"\n"
    ))
    .unwrap()
}

/// Referrals, as nvmet's `ports/N/referrals`: a reload that adds them gives
/// the persistent discovery controllers the change notice and a log that
/// ends with them; `discover_all` follows them (each service once, so a
/// referral back to the first ends the walk) and reports the one it cannot
/// reach; `nvmeof discover --referrals` prints every log and exits 3 for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn referrals_are_listed_announced_and_followed() {
    bounded(30, async {
        let (nqn_a, nqn_b) = ("nqn.2024-01.io.nvmeof.test:referrer", "nqn.2024-01.io.nvmeof.test:referred");
        let (server_a, a) = start(&referring(nqn_a, &[])).await;
        let (server_b, b) = start(&referring(nqn_b, &[(a, 1)])).await;
        let closed = HeldPort::new();
        let dead = closed.addr();
        let o = ConnectOptions { async_events: true, kato: Duration::from_secs(5), ..disc_opts() };
        let watcher = Controller::connect(a, DISCOVERY_NQN, o).await.unwrap();
        let mut rx = watcher.events();
        server_a.reload(&referring(nqn_a, &[(b, 0), (dead, 7)])).unwrap();
        let log = match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Ok(ControllerEvent::DiscoveryChanged(log))) => log,
            other => panic!("expected a discovery log change, got {other:?}"),
        };
        let n = log.entries.len();
        assert!(n >= 4, "{log:?}");
        assert!(log.entries[..n - 2].iter().all(|e| e.subtype != SubType::REFERRAL), "{log:?}");
        for (e, (to, portid)) in log.entries[n - 2..].iter().zip([(b, 0), (dead, 7)]) {
            assert_eq!(
                (e.subtype, e.subnqn.as_str(), e.trtype, e.adrfam),
                (SubType::REFERRAL, DISCOVERY_NQN, TrType::TCP, AdrFam::IPV4),
                "{e:?}"
            );
            assert_eq!((e.traddr.clone(), e.trsvcid.clone()), (to.ip().to_string(), to.port().to_string()));
            assert_eq!((e.portid, e.treq, e.cntlid, e.asqsz), (portid, 0, 0xFFFF, 32), "{e:?}");
        }
        watcher.shutdown().await.unwrap();

        let logs = discover_all(a, disc_opts()).await.unwrap();
        let addrs: Vec<SocketAddr> = logs.iter().map(|d| d.addr).collect();
        assert_eq!(addrs, [a, b, dead], "A, then its referrals in order; B's back to A skipped");
        assert!(matches!(&logs[2].log, Err(Error::Transport(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused), "{:?}", logs[2].log);
        let nqns: Vec<&str> = logs[..2]
            .iter()
            .flat_map(|d| nvme_subsystems(d.log.as_ref().unwrap()))
            .map(|e| e.subnqn.as_str())
            .collect();
        assert_eq!(nqns, [nqn_a, nqn_b]);

        let cli =
            admin::Cli::parse_args(["nvmeof", "discover", &a.to_string(), "--referrals", "--json"]).unwrap();
        let mut out = Vec::new();
        let e = admin::run(&cli, &mut &b""[..], &mut out).await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Transport, "{e}");
        assert!(e.message.contains(&format!("referral {dead}")), "{e}");
        let j: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let services = j["services"].as_array().unwrap();
        let got: Vec<_> = services.iter().map(|s| s["address"].as_str().unwrap().to_string()).collect();
        assert_eq!(got, addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert!(services[1]["records"].as_array().unwrap().iter().any(|r| r["subnqn"] == nqn_b));
        assert!(services[2]["error"].is_string() && services[2]["records"].is_null());
        let cli = admin::Cli::parse_args(["nvmeof", "discover", &b.to_string(), "--referrals"]).unwrap();
        let mut out = Vec::new();
        let e = admin::run(&cli, &mut &b""[..], &mut out).await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Transport, "{e}");
        let text = String::from_utf8(out).unwrap();
        // B refers to A, A to B (skipped, read already) and to the dead one.
        assert!(text.starts_with(&format!("Discovery Log at {b}:")), "{text}");
        assert!(text.contains(&format!("Discovery Log at {a}:")), "{text}");
        assert!(text.contains(&format!("Discovery Log at {dead}: cannot be read")), "{text}");
        assert_eq!(text.matches("subtype: discovery subsystem referral").count(), 3, "{text}");
        server_a.shutdown(Duration::from_secs(1)).await;
        server_b.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

/// However many services the referrals name, `discover_all` reads at most
/// `MAX_DISCOVERY_SERVICES` of them (the first included), in the log's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_all_reads_at_most_max_discovery_services() {
    bounded(30, async {
        // Ports nothing listens on: each read fails at once (refused).
        let closed: Vec<HeldPort> = (0..MAX_DISCOVERY_SERVICES + 4).map(|_| HeldPort::new()).collect();
        let dead: Vec<SocketAddr> = closed.iter().map(HeldPort::addr).collect();
        let refs: Vec<(SocketAddr, u16)> = dead.iter().map(|&a| (a, 0)).collect();
        let (server, a) = start(&referring("nqn.2024-01.io.nvmeof.test:many", &refs)).await;
        let logs = discover_all(a, disc_opts()).await.unwrap();
        let addrs: Vec<SocketAddr> = logs.iter().map(|d| d.addr).collect();
        assert_eq!(addrs[0], a);
        assert_eq!(addrs[1..], dead[..MAX_DISCOVERY_SERVICES - 1]);
        assert!(logs[1..].iter().all(|d| d.log.is_err()));
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

/// A unique discovery NQN (`discovery_nqn`, nvmet's attribute of that name):
/// the discovery controller answers to it and to the well-known NQN alike,
/// its Identify SUBNQN and its log's own entry carry it, an NQN that is
/// neither is refused as any unknown subsystem, and `nvmeof discover --nqn`
/// reads the log through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_discovery_nqn() {
    bounded(30, async {
        const UNIQUE: &str = "nqn.2026-12.io.nvmeof.test:discovery";
        let nqn = "nqn.2026-12.io.nvmeof.test:disk";
        let cfg = TargetConfig::from_toml(&format!(
            "discovery_nqn = \"{UNIQUE}\"\n[[port]]\nlisten = \"127.0.0.1:0\"\n\n\
             [[subsystem]]\nnqn = \"{nqn}\"\n[[subsystem.namespace]]\nram = \"1M\"\n"
        ))
        .unwrap();
        let (server, a) = start(&cfg).await;
        let unique = discover_nqn(a, UNIQUE, disc_opts()).await.unwrap();
        let got: Vec<_> = unique.entries.iter().map(|e| (e.subtype, e.subnqn.as_str())).collect();
        assert_eq!(got, [(SubType::CURRENT_DISCOVERY, UNIQUE), (SubType::NVME, nqn)]);
        let known = discover(a, disc_opts()).await.unwrap();
        assert_eq!(known.entries, unique.entries);
        let logs = discover_all_nqn(a, UNIQUE, disc_opts()).await.unwrap();
        assert_eq!((logs.len(), logs[0].addr), (1, a));
        assert_eq!(logs[0].log.as_ref().unwrap().entries, unique.entries);

        let c = Controller::connect(a, UNIQUE, disc_opts()).await.unwrap();
        assert!(c.info().discovery);
        let id = c.identify_controller().await.unwrap();
        assert_eq!((id.subnqn.as_str(), id.cntrltype), (UNIQUE, 2));

        // SIGHUP renames it in place (nvmet's discovery_nqn store): the
        // connected controller reports the new NQN, which reaches it; the old
        // one is refused.
        const RENAMED: &str = "nqn.2026-12.io.nvmeof.test:discovery-renamed";
        let renamed = cfg.clone();
        server
            .reload(&nvmeof_target::config::TargetConfig { discovery_nqn: Some(RENAMED.into()), ..renamed })
            .unwrap();
        assert_eq!(c.identify_controller().await.unwrap().subnqn, RENAMED);
        let log = discover_nqn(a, RENAMED, disc_opts()).await.unwrap();
        assert_eq!(
            (log.entries[0].subtype, log.entries[0].subnqn.as_str()),
            (SubType::CURRENT_DISCOVERY, RENAMED)
        );
        match discover_nqn(a, UNIQUE, disc_opts()).await {
            Err(Error::Nvme { status, .. }) => {
                assert_eq!(status.code(), Status::CONNECT_INVALID_PARAM.code())
            }
            other => panic!("the old NQN: {other:?}"),
        }
        c.shutdown().await.unwrap();
        server.reload(&cfg).unwrap();

        match discover_nqn(a, "nqn.2026-12.io.nvmeof.test:discovery2", disc_opts()).await {
            Err(Error::Nvme { status, .. }) => {
                assert_eq!(status.code(), Status::CONNECT_INVALID_PARAM.code())
            }
            other => panic!("{other:?}"),
        }

        for args in [vec!["--nqn", UNIQUE], vec!["-n", UNIQUE, "--referrals"]] {
            let mut argv = vec!["nvmeof", "discover"];
            let addr = a.to_string();
            argv.push(&addr);
            argv.extend(args.iter().copied());
            let cli = admin::Cli::parse_args(argv.clone()).unwrap();
            let mut out = Vec::new();
            admin::run(&cli, &mut &b""[..], &mut out).await.unwrap();
            let text = String::from_utf8(out).unwrap();
            let own = text.split("=====Discovery Log Entry").nth(1).unwrap_or_default().to_string();
            assert!(own.contains("subtype: current discovery subsystem"), "{argv:?}: {text}");
            assert!(own.contains(&format!("subnqn:  {UNIQUE}\n")), "{argv:?}: {text}");
        }
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

/// Two ports, nvmet's port numbers 7 and 9; subsystem `a` on both, `b` on
/// the ports `b_ports` lists (`None`: the key left out).
fn linked(a: &str, b: &str, ports: [SocketAddr; 2], b_ports: Option<&str>) -> TargetConfig {
    let b_ports = b_ports.map(|p| format!("ports = {p}\n")).unwrap_or_default();
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"{}\"\nportid = 7\n[[port]]\nlisten = \"{}\"\nportid = 9\n\n\
         [[subsystem]]\nnqn = \"{a}\"\n[[subsystem.namespace]]\nram = \"1M\"\n\n\
         [[subsystem]]\nnqn = \"{b}\"\n{b_ports}[[subsystem.namespace]]\nram = \"1M\"\n",
        ports[0], ports[1]
    ))
    .unwrap()
}

/// `(PORTID, TRSVCID, SUBNQN)` of each NVM subsystem entry.
fn nvme_entries(log: &nvmeof_initiator::common::spec::DiscoveryLog) -> Vec<(u16, String, String)> {
    nvme_subsystems(log).map(|e| (e.portid, e.trsvcid.clone(), e.subnqn.clone())).collect()
}

/// A subsystem's `ports` (nvmet's `ports/N/subsystems` links): the
/// discovery log lists it under those ports only, a Connect through another
/// port is refused as for an unknown subsystem (Connect Invalid Parameters,
/// DNR), and a reload that moves it to another port notifies the persistent
/// discovery controllers and deletes the controllers connected through the
/// port it left, whose reconnects are then refused (the initiator gives up,
/// as the Linux host does), while the other subsystem's are not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subsystem_ports_link_and_unlink() {
    bounded(40, async {
        let (a, b) = ("nqn.2026-12.io.nvmeof.test:both-ports", "nqn.2026-12.io.nvmeof.test:port-two");
        let wild: [SocketAddr; 2] = ["127.0.0.1:0".parse().unwrap(); 2];
        let (server, p1) = start(&linked(a, b, wild, Some("[9]"))).await;
        let p2 = server.local_addrs[1];
        let ports = [p1, p2];
        let s = |p: SocketAddr| p.port().to_string();
        let (a_, b_) = (a.to_string(), b.to_string());
        let both = vec![(7, s(p1), a_.clone()), (9, s(p2), a_.clone()), (9, s(p2), b_.clone())];
        for p in ports {
            assert_eq!(nvme_entries(&discover(p, disc_opts()).await.unwrap()).len(), 3);
        }
        let mut through1 = nvme_entries(&discover(p1, disc_opts()).await.unwrap());
        through1.sort();
        assert_eq!(through1, both);

        match Controller::connect(p1, b, opts()).await {
            Err(Error::Nvme { status, .. }) => {
                assert_eq!(status.code(), Status::CONNECT_INVALID_PARAM.code());
                assert!(status.dnr(), "{status:?}");
            }
            other => panic!("connect to {b} through port 1: {other:?}"),
        }
        let on2 = Controller::connect(p2, b, opts()).await.unwrap();
        let a_on2 = Controller::connect(p2, a, opts()).await.unwrap();
        let ns = on2.namespace(1).await.unwrap();
        ns.write(0, &[0x5a; 4096]).await.unwrap();
        let mut state = on2.subscribe_state();

        let o = ConnectOptions { async_events: true, kato: Duration::from_secs(5), ..disc_opts() };
        let watcher = Controller::connect(p1, DISCOVERY_NQN, o).await.unwrap();
        let mut rx = watcher.events();
        server.reload(&linked(a, b, wild, Some("[7]"))).unwrap();
        let log = match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Ok(ControllerEvent::DiscoveryChanged(log))) => log,
            other => panic!("expected a discovery log change, got {other:?}"),
        };
        let mut moved = nvme_entries(&log);
        moved.sort();
        assert_eq!(moved, [(7, s(p1), a_.clone()), (7, s(p1), b_.clone()), (9, s(p2), a_.clone())]);
        // Deleted (port 2 was left), then its reconnects through port 2 refused.
        tokio::time::timeout(Duration::from_secs(15), state.wait_for(|s| *s == ControllerState::Failed))
            .await
            .expect("the controller on the port left fails")
            .unwrap();
        assert_eq!(a_on2.state(), ControllerState::Live);
        a_on2.identify_controller().await.unwrap();
        let on1 = Controller::connect(p1, b, opts()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        on1.namespace(1).await.unwrap().read(0, &mut buf).await.unwrap();
        assert_eq!(buf, [0x5a; 4096]);

        // `ports = []`: exported nowhere; leaving the key out: every port.
        server.reload(&linked(a, b, wild, Some("[]"))).unwrap();
        tokio::time::timeout(Duration::from_secs(15), async {
            let mut s = on1.subscribe_state();
            s.wait_for(|s| *s == ControllerState::Failed).await.unwrap();
        })
        .await
        .expect("the controller on port 1 fails");
        for p in ports {
            assert!(nvme_entries(&discover(p, disc_opts()).await.unwrap()).iter().all(|e| e.2 == a_));
        }
        server.reload(&linked(a, b, wild, None)).unwrap();
        let mut all = nvme_entries(&discover(p2, disc_opts()).await.unwrap());
        all.sort();
        assert_eq!(all, [(7, s(p1), a_.clone()), (7, s(p1), b_.clone()), (9, s(p2), a_), (9, s(p2), b_)]);
        for c in [watcher, a_on2] {
            c.shutdown().await.unwrap();
        }
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

/// Three loopback ports (two on 127.0.0.1, one on 127.0.0.2) exporting one
/// subsystem, listed to hosts as `filter` says (SPDK's `discovery_filter`).
fn filtered(nqn: &str, ports: &[SocketAddr; 3], filter: &str) -> TargetConfig {
    let p: String = ports.iter().map(|a| format!("[[port]]\nlisten = \"{a}\"\n")).collect();
    TargetConfig::from_toml(&format!(
        "discovery_filter = \"{filter}\"\n{p}\n[[subsystem]]\nnqn = \"{nqn}\"\n[[subsystem.namespace]]\nram = \"1M\"\n"
    ))
    .unwrap()
}

/// The discovery filter, through real connections: `address` lists the
/// ports on the address the host asked on, `address,svcid` the asking port
/// only (nvmet's log), `match_any` every port; a reload that changes it
/// gives the persistent discovery controllers the change notice and the
/// filtered log; a host connects to what it was shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_filter_lists_matching_ports() {
    bounded(30, async {
        let nqn = "nqn.2026-12.io.nvmeof.test:filtered";
        let asked: [SocketAddr; 3] =
            ["127.0.0.1:0", "127.0.0.1:0", "127.0.0.2:0"].map(|a| a.parse().unwrap());
        let (server, p1) = start(&filtered(nqn, &asked, "address")).await;
        let (p2, p3) = (server.local_addrs[1], server.local_addrs[2]);
        // Reloads name the ports as configured (port 0), so they stay the same ports.
        let listed = |log: &nvmeof_initiator::common::spec::DiscoveryLog| {
            let mut v: Vec<(u16, String, String)> = log
                .entries
                .iter()
                .filter(|e| e.subtype != SubType::REFERRAL)
                .map(|e| (e.portid, e.traddr.clone(), e.trsvcid.clone()))
                .collect();
            v.dedup();
            v
        };
        let port = |id: u16, a: SocketAddr| (id, a.ip().to_string(), a.port().to_string());
        let log = discover(p1, disc_opts()).await.unwrap();
        assert_eq!(listed(&log), [port(1, p1), port(2, p2)]);
        assert_eq!(nvme_subsystems(&log).count(), 2, "{log:?}");
        let log = discover(p3, disc_opts()).await.unwrap();
        assert_eq!(listed(&log), [port(3, p3)]);
        // What the log lists is where the host connects.
        let e = nvme_subsystems(&log).next().unwrap();
        let to: SocketAddr = format!("{}:{}", e.traddr, e.trsvcid).parse().unwrap();
        let c = Controller::connect(to, &e.subnqn, opts()).await.unwrap();
        c.shutdown().await.unwrap();

        let o = ConnectOptions { async_events: true, kato: Duration::from_secs(5), ..disc_opts() };
        let watcher = Controller::connect(p2, DISCOVERY_NQN, o).await.unwrap();
        let mut rx = watcher.events();
        server.reload(&filtered(nqn, &asked, "address,svcid")).unwrap();
        let log = match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Ok(ControllerEvent::DiscoveryChanged(log))) => log,
            other => panic!("expected a discovery log change, got {other:?}"),
        };
        assert_eq!(listed(&log), [port(2, p2)]);
        assert_eq!(listed(&discover(p1, disc_opts()).await.unwrap()), [port(1, p1)]);
        server.reload(&filtered(nqn, &asked, "match_any")).unwrap();
        let log = match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Ok(ControllerEvent::DiscoveryChanged(log))) => log,
            other => panic!("expected a discovery log change, got {other:?}"),
        };
        // The asking port first, then the others.
        assert_eq!(listed(&log), [port(2, p2), port(1, p1), port(3, p3)]);
        assert_eq!(
            listed(&discover(p3, disc_opts()).await.unwrap()),
            [port(3, p3), port(1, p1), port(2, p2)]
        );
        watcher.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}
