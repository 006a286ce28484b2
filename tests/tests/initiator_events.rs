//! Asynchronous events through the initiator against our target: the host
//! enables the notices both sides support, keeps an Asynchronous Event
//! Request outstanding, reads each notice's log (re-arming it) and hands the
//! result to the application; again after a reconnect; not at all when
//! turned off; on a persistent discovery controller, discovery log changes.

mod initiator_util;

use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::common::opcode::AdminOpcode;
use nvmeof_initiator::common::spec::features::{aec, AsyncEvent, FeatureId, GetFeaturesCmd};
use nvmeof_initiator::common::spec::log::AnaState;
use nvmeof_initiator::common::spec::DISCOVERY_NQN;
use nvmeof_initiator::common::Sqe;
use nvmeof_initiator::{ConnectOptions, Controller, ControllerEvent, ControllerState, Payload};
use nvmeof_target::config::TargetConfig;
use tokio::sync::broadcast;

/// Two ports; port 2's ANA state `port2`; namespaces 1..=`namespaces` of
/// [`SUBNQN`]; `extra` appended (another subsystem, say).
fn cfg(port2: &str, namespaces: u32, extra: &str) -> TargetConfig {
    let ns: String =
        (1..=namespaces).map(|n| format!("[[subsystem.namespace]]\nnsid = {n}\nram = \"1M\"\n")).collect();
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[port]]\nlisten = \"127.0.0.1:0\"\nana_state = \"{port2}\"\n\n\
         [[subsystem]]\nnqn = \"{SUBNQN}\"\n{ns}\n{extra}"
    ))
    .unwrap()
}

/// Group 1's state in an ANA change event.
fn group1(ev: &ControllerEvent) -> AnaState {
    match ev {
        ControllerEvent::AnaChanged(log) => {
            let g = log.groups.iter().find(|g| g.grpid == 1).expect("group 1 reported");
            assert_eq!(g.nsids, vec![1], "{log:?}");
            g.state
        }
        other => panic!("expected an ANA change, got {other:?}"),
    }
}

async fn aec_at_target(ctrl: &Controller) -> u32 {
    ctrl.get_features(GetFeaturesCmd::new(FeatureId::ASYNC_EVENT), None).await.unwrap()
}

#[tokio::test]
async fn ana_and_namespace_notices_reach_the_application_and_rearm() {
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", 1, "")).await;
        let port2 = server.local_addrs[1];
        let ctrl = Controller::connect(port2, SUBNQN, opts()).await.unwrap();
        // nvmet's and our OAES: namespace attribute and ANA change notices.
        let want = aec::NS_ATTR | aec::ANA_CHANGE;
        assert_eq!(ctrl.info().async_events, want);
        assert_eq!(aec_at_target(&ctrl).await, want);
        let mut rx = ctrl.events();

        server.reload(&cfg("inaccessible", 1, "")).unwrap();
        assert_eq!(group1(&next_event(&mut rx).await), AnaState::INACCESSIBLE);
        // The host read the log with RAE clear and asked again: the next change arrives too.
        server.reload(&cfg("non-optimized", 1, "")).unwrap();
        assert_eq!(group1(&next_event(&mut rx).await), AnaState::NON_OPTIMIZED);

        // Namespaces 2 and 3 appear: one notice, the Changed Namespace List names both.
        server.reload(&cfg("non-optimized", 3, "")).unwrap();
        let ev = next_event(&mut rx).await;
        match &ev {
            ControllerEvent::NamespacesChanged(list) => assert_eq!(list, &vec![2, 3]),
            // A namespace also joins group 1: its ANA notice can come first.
            ControllerEvent::AnaChanged(_) => {
                let ev2 = next_event(&mut rx).await;
                assert_eq!(ev2, ControllerEvent::NamespacesChanged(vec![2, 3]), "after {ev:?}");
            }
            other => panic!("expected a namespace change, got {other:?}"),
        }
        assert_eq!(ctrl.active_namespaces().await.unwrap(), vec![1, 2, 3]);
        // Reading the list cleared it.
        assert_eq!(ctrl.changed_namespaces().await.unwrap(), Vec::<u32>::new());
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

#[tokio::test]
async fn events_resume_after_a_reconnect() {
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", 1, "")).await;
        let proxy = Proxy::start(server.local_addrs[1]).await;
        let o = ConnectOptions { kato: Duration::from_secs(2), ..opts() };
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let mut rx = ctrl.events();
        let mut state = ctrl.subscribe_state();
        proxy.kill_all();
        tokio::time::timeout(Duration::from_secs(5), state.wait_for(|s| *s == ControllerState::Reconnecting))
            .await
            .expect("reconnecting within 5 s")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), state.wait_for(|s| *s == ControllerState::Live))
            .await
            .expect("live again within 10 s")
            .unwrap();
        // The new association has its events enabled and an AER outstanding.
        assert_eq!(aec_at_target(&ctrl).await, aec::NS_ATTR | aec::ANA_CHANGE);
        server.reload(&cfg("change", 1, "")).unwrap();
        assert_eq!(group1(&next_event(&mut rx).await), AnaState::CHANGE);
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

#[tokio::test]
async fn turned_off_the_application_can_ask_itself() {
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", 1, "")).await;
        let port2 = server.local_addrs[1];
        let o = ConnectOptions { async_events: false, ..opts() };
        let ctrl = Controller::connect(port2, SUBNQN, o).await.unwrap();
        assert_eq!(ctrl.info().async_events, 0);
        let mut rx = ctrl.events();
        // No AER from the library: all four the target allows (AERL 3) are the application's.
        let aers: Vec<_> = (0..4)
            .map(|_| {
                let c = ctrl.clone();
                tokio::spawn(async move {
                    c.admin_command_timeout(
                        Sqe::new(AdminOpcode::ASYNC_EVENT.0),
                        Payload::None,
                        Duration::from_secs(20),
                    )
                    .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        server.reload(&cfg("inaccessible", 1, "")).unwrap();
        let mut done = Vec::new();
        for a in aers {
            if let Ok(r) = tokio::time::timeout(Duration::from_secs(1), a).await {
                done.push(r.unwrap().unwrap().dw0());
            }
        }
        assert_eq!(
            done,
            vec![AsyncEvent::ANA_CHANGE.to_dw0()],
            "one of the four completes, with the ANA notice"
        );
        assert!(matches!(rx.try_recv(), Err(broadcast::error::TryRecvError::Empty)));
        drop(ctrl);
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

#[tokio::test]
async fn persistent_discovery_controller_reports_log_changes() {
    bounded(60, async {
        let (server, addr) = start(&cfg("optimized", 1, "")).await;
        let o = ConnectOptions {
            async_events: true,
            kato: Duration::from_secs(5),
            ..ConnectOptions::discovery()
        };
        let ctrl = Controller::connect(addr, DISCOVERY_NQN, o).await.unwrap();
        assert_eq!(ctrl.info().async_events, aec::DISC_CHANGE);
        let before = ctrl.discovery_log().await.unwrap();
        let mut rx = ctrl.events();
        let other = "nqn.2024-01.io.nvmeof.test:events-other";
        server.reload(&cfg("optimized", 1, &format!("[[subsystem]]\nnqn = \"{other}\"\n"))).unwrap();
        match next_event(&mut rx).await {
            ControllerEvent::DiscoveryChanged(log) => {
                assert!(
                    log.header.genctr > before.header.genctr,
                    "{} after {}",
                    log.header.genctr,
                    before.header.genctr
                );
                assert!(log.entries.iter().any(|e| e.subnqn == other), "{log:?}");
                assert!(!before.entries.iter().any(|e| e.subnqn == other));
            }
            ev => panic!("expected a discovery log change, got {ev:?}"),
        }
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}
