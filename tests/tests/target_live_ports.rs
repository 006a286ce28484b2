//! Ports added and removed by a reload (SIGHUP), as nvmet's `ports/N` are
//! made and removed while it runs and SPDK's listeners are added and
//! removed: a new port accepts hosts and the discovery log lists it at once;
//! a port no longer configured stops listening, the discovery log drops it
//! and the controllers connected through it are deleted (their hosts
//! reconnect elsewhere), while those on other ports keep working; an
//! address that cannot be bound fails the reload before anything changes.

mod initiator_util;

use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::{
    discover, nvme_subsystems, ConnectOptions, Controller, ControllerState, ReconnectPolicy,
};
use nvmeof_target::config::TargetConfig;

const NQN: &str = "nqn.2014-08.org.example:live-ports";

/// Ports with IDs `ids` (and addresses `addrs`, 127.0.0.1:0 where not given),
/// one subsystem on every port.
fn cfg(ports: &[(u16, &str)]) -> TargetConfig {
    let mut t = String::new();
    for (id, addr) in ports {
        t += &format!("[[port]]\nlisten = \"{addr}\"\nportid = {id}\n\n");
    }
    t += &format!("[[subsystem]]\nnqn = \"{NQN}\"\n[[subsystem.namespace]]\nram = \"4M\"\n");
    TargetConfig::from_toml(&t).unwrap()
}

/// (PORTID, TRSVCID) of the subsystem's entries the discovery log through `addr` lists.
async fn entries(addr: std::net::SocketAddr) -> Vec<(u16, String)> {
    let log =
        discover(addr, ConnectOptions { host: Some(host()), ..ConnectOptions::discovery() }).await.unwrap();
    let mut e: Vec<(u16, String)> = nvme_subsystems(&log).map(|e| (e.portid, e.trsvcid.clone())).collect();
    e.sort();
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_and_removes_ports() {
    bounded(60, async {
        let any = "127.0.0.1:0";
        let (server, p1) = start(&cfg(&[(1, any)])).await;
        // Lost connections fail at once: what matters is the controller's state.
        let once = ConnectOptions {
            reconnect: ReconnectPolicy { ctrl_loss_timeout: Some(Duration::ZERO), ..Default::default() },
            ..opts()
        };
        let c1 = Controller::connect(p1, NQN, once.clone()).await.unwrap();

        // Port 2 added: it accepts hosts, and discovery lists it.
        server.reload(&cfg(&[(1, any), (2, any)])).unwrap();
        let listening = server.listening();
        assert_eq!(listening.len(), 2);
        assert_eq!(listening[0], p1);
        let p2 = listening[1];
        assert_eq!(entries(p1).await, [(1, p1.port().to_string()), (2, p2.port().to_string())]);
        let c2 = Controller::connect(p2, NQN, once.clone()).await.unwrap();
        let ns2 = c2.namespace(1).await.unwrap();
        ns2.write(0, &[7u8; BS]).await.unwrap();

        // Port 1 removed: no longer listening or listed, its controller deleted;
        // port 2's controller goes on.
        server.reload(&cfg(&[(2, any)])).unwrap();
        assert_eq!(server.listening(), [p2]);
        let mut state = c1.subscribe_state();
        let t0 = std::time::Instant::now();
        while *state.borrow() == ControllerState::Live {
            assert!(t0.elapsed() < Duration::from_secs(10), "the controller through port 1 is still live");
            let _ = tokio::time::timeout(Duration::from_millis(100), state.changed()).await;
        }
        assert!(Controller::connect(p1, NQN, once.clone()).await.is_err(), "port 1 still accepts");
        assert_eq!(entries(p2).await, [(2, p2.port().to_string())]);
        let mut back = vec![0u8; BS];
        ns2.read(0, &mut back).await.unwrap();
        assert_eq!(back, [7u8; BS]);

        // An address already taken: the reload fails and changes nothing.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let busy = taken.local_addr().unwrap().to_string();
        let e = server.reload(&cfg(&[(2, any), (3, &busy)])).unwrap_err().to_string();
        assert!(e.contains("port 3") && e.contains("unchanged"), "{e}");
        assert_eq!(server.listening(), [p2]);
        assert_eq!(entries(p2).await, [(2, p2.port().to_string())]);
        ns2.read(0, &mut back).await.unwrap();

        c2.shutdown().await.unwrap();
        let _ = c1.shutdown().await;
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}
