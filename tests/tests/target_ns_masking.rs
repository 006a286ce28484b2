//! Namespace masking (`hosts` in a namespace's table, as SPDK's
//! `no_auto_visible` namespaces and `nvmf_ns_add_host`): a namespace listed
//! for some hosts is an inactive NSID to the others — missing from their
//! active namespace list and ANA log, zeroes in Identify Namespace, Invalid
//! Namespace or Format for their commands, left out of their SMART totals and
//! their namespace change notices — and a reload that changes the list
//! tells exactly the hosts whose view changed, keeping the namespace's data.

mod initiator_util;

use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::common::spec::features::{FeatureId, GetFeaturesCmd, SetFeaturesCmd};
use nvmeof_initiator::common::spec::log::{GetLogPageCmd, LogPageId, SmartLog, SMART_LOG_LEN};
use nvmeof_initiator::common::{Sqe, Status};
use nvmeof_initiator::{ConnectOptions, Controller, ControllerEvent, Error, HostIdentity, Payload};
use nvmeof_target::config::TargetConfig;
use tokio::sync::broadcast;

/// The second host of these tests (the first is [`host`]).
fn host_b() -> HostIdentity {
    HostIdentity::from_id(*b"e2e-initiator-02")
}

/// Namespaces 1 (every host), 2 (`ns2`: a TOML array, or "" for every
/// host) and 3 (no host), 1 MiB of RAM each, plus `extra` namespaces.
fn cfg(ns2: &str, extra: &str) -> TargetConfig {
    let hosts2 = if ns2.is_empty() { String::new() } else { format!("hosts = {ns2}\n") };
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\
         [[subsystem.namespace]]\nnsid = 1\nram = \"1M\"\n\
         [[subsystem.namespace]]\nnsid = 2\nram = \"1M\"\n{hosts2}\
         [[subsystem.namespace]]\nnsid = 3\nram = \"1M\"\nhosts = []\n{extra}"
    ))
    .unwrap()
}

/// The next namespace change event (ANA notices, which a new namespace in
/// group 1 also raises, skipped), within 5 s.
async fn next_ns_change(rx: &mut broadcast::Receiver<ControllerEvent>) -> Vec<u32> {
    for _ in 0..4 {
        match next_event(rx).await {
            ControllerEvent::NamespacesChanged(list) => return list,
            ControllerEvent::AnaChanged(_) => continue,
            other => panic!("expected a namespace change, got {other:?}"),
        }
    }
    panic!("no namespace change among 4 events")
}

/// The NVMe status `r` failed with ([`Error::status`]).
fn nvme_status<T: std::fmt::Debug>(r: Result<T, Error>) -> Status {
    let e = r.expect_err("an NVMe status");
    e.status().unwrap_or_else(|| panic!("expected an NVMe status, got {e:?}"))
}

/// Host Read Commands of the SMART log for `nsid` (FFFFFFFFh: the sum).
async fn smart_reads(ctrl: &Controller, nsid: u32) -> Result<u128, Error> {
    let mut buf = vec![0u8; SMART_LOG_LEN];
    ctrl.get_log_page(GetLogPageCmd::new(LogPageId::SMART, nsid, 0, SMART_LOG_LEN as u32), &mut buf).await?;
    Ok(SmartLog::decode(&buf).unwrap().host_reads)
}

/// Group 1's NSIDs in the ANA log `ctrl` reads.
async fn ana_nsids(ctrl: &Controller) -> Vec<u32> {
    let log = ctrl.ana_log().await.unwrap();
    log.groups.iter().find(|g| g.grpid == 1).expect("group 1").nsids.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_namespaces_are_inactive_to_other_hosts() {
    bounded(60, async {
        let a_nqn = host().nqn;
        let (server, addr) = start(&cfg(&format!("[\"{a_nqn}\"]"), "")).await;
        let a = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        let b = Controller::connect(addr, SUBNQN, ConnectOptions { host: Some(host_b()), ..opts() })
            .await
            .unwrap();
        let mut a_events = a.events();
        let mut b_events = b.events();

        assert_eq!(a.active_namespaces().await.unwrap(), vec![1, 2], "A sees its namespace");
        assert_eq!(b.active_namespaces().await.unwrap(), vec![1], "B sees the shared one only");
        // Identify Controller's NN is the subsystem's, whoever asks.
        assert_eq!(b.identify_controller().await.unwrap().nn, a.identify_controller().await.unwrap().nn);
        assert_eq!(a.identify_namespace(2).await.unwrap().nsze, 2048);
        assert_eq!(b.identify_namespace(2).await.unwrap().nsze, 0, "inactive to B: all zeroes");
        assert_eq!(a.identify_namespace(3).await.unwrap().nsze, 0, "hosts = [] hides it from all");
        assert!(b.namespace(2).await.is_err());
        assert_eq!(ana_nsids(&a).await, vec![1, 2]);
        assert_eq!(ana_nsids(&b).await, vec![1]);

        // B's commands on namespace 2: Invalid Namespace or Format, DNR.
        let data: Vec<u8> = (0..4 * BS).map(|i| (i * 13 % 251) as u8).collect();
        let mut buf = vec![0u8; 4 * BS];
        let mut sqe = Sqe::new(0x02);
        sqe.set_nsid(2).set_slba(0).set_cdw(12, 0);
        let st = nvme_status(b.io_command(sqe, Payload::Read(&mut buf[..BS])).await);
        assert_eq!((st.code(), st.dnr()), (Status::INVALID_NS, true), "{st}");
        let mut wp = GetFeaturesCmd::new(FeatureId::WRITE_PROTECT).to_sqe(0);
        wp.set_nsid(2);
        let st = nvme_status(b.admin_command(wp, Payload::None).await);
        assert_eq!(st.code(), Status::INVALID_NS, "Get Features 84h: {st}");

        // A's I/O counts in A's SMART log only.
        let ns2 = a.namespace(2).await.unwrap();
        ns2.write(8, &data).await.unwrap();
        ns2.read(8, &mut buf).await.unwrap();
        assert_eq!(buf, data);
        assert_eq!(smart_reads(&a, 2).await.unwrap(), 1);
        assert_eq!(smart_reads(&a, 0xFFFF_FFFF).await.unwrap(), 1);
        assert_eq!(smart_reads(&b, 0xFFFF_FFFF).await.unwrap(), 0, "B's total leaves namespace 2 out");
        assert_eq!(nvme_status(smart_reads(&b, 2).await).code(), Status::INVALID_NS);

        // A write-protects namespace 2: A hears of it, B does not (B's next
        // notice is the one for namespace 4 below, alone).
        a.set_features(SetFeaturesCmd { nsid: 2, ..SetFeaturesCmd::new(FeatureId::WRITE_PROTECT, 1) }, None)
            .await
            .unwrap();
        assert_eq!(next_ns_change(&mut a_events).await, vec![2]);
        a.set_features(SetFeaturesCmd { nsid: 2, ..SetFeaturesCmd::new(FeatureId::WRITE_PROTECT, 0) }, None)
            .await
            .unwrap();
        assert_eq!(next_ns_change(&mut a_events).await, vec![2]);
        let ns4 = "[[subsystem.namespace]]\nnsid = 4\nram = \"1M\"\n";
        server.reload(&cfg(&format!("[\"{a_nqn}\"]"), ns4)).unwrap();
        assert_eq!(next_ns_change(&mut b_events).await, vec![4]);
        assert_eq!(next_ns_change(&mut a_events).await, vec![4]);

        // The reload gives namespace 2 to B: both hear of it, the data stays.
        let b_nqn = host_b().nqn;
        server.reload(&cfg(&format!("[\"{b_nqn}\"]"), ns4)).unwrap();
        assert_eq!(next_ns_change(&mut a_events).await, vec![2]);
        assert_eq!(next_ns_change(&mut b_events).await, vec![2]);
        assert_eq!(a.active_namespaces().await.unwrap(), vec![1, 4]);
        assert_eq!(b.active_namespaces().await.unwrap(), vec![1, 2, 4]);
        let st = nvme_status(ns2.read(8, &mut buf).await);
        assert_eq!(st.code(), Status::INVALID_NS, "A's handle on a namespace it lost: {st}");
        let b2 = b.namespace(2).await.unwrap();
        buf.fill(0);
        b2.read(8, &mut buf).await.unwrap();
        assert_eq!(buf, data, "the namespace is the same one, with A's data");

        // Visible to every host again: only A's view changed.
        server.reload(&cfg("", ns4)).unwrap();
        assert_eq!(next_ns_change(&mut a_events).await, vec![2]);
        assert_eq!(a.active_namespaces().await.unwrap(), vec![1, 2, 4]);
        assert_eq!(b.active_namespaces().await.unwrap(), vec![1, 2, 4]);
        // Removing it tells both.
        server.reload(&cfg("[]", ns4)).unwrap();
        assert_eq!(next_ns_change(&mut a_events).await, vec![2]);
        assert_eq!(next_ns_change(&mut b_events).await, vec![2]);
        assert_eq!(b.active_namespaces().await.unwrap(), vec![1, 4]);

        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

/// Every host a namespace lists must be a valid host NQN, and one the
/// subsystem lets in where it lists `allowed_hosts`.
#[test]
fn configured_hosts_are_checked() {
    let cfg = |allowed: &str, hosts: &str| {
        TargetConfig::from_toml(&format!(
            "[[subsystem]]\nnqn = \"{SUBNQN}\"\n{allowed}\n[[subsystem.namespace]]\nram = \"1M\"\nhosts = {hosts}\n"
        ))
    };
    let c = cfg("", "[\"nqn.2026-11.x:h\"]").unwrap();
    assert_eq!(c.subsystems[0].namespaces[0].hosts, Some(vec!["nqn.2026-11.x:h".to_string()]));
    let e = cfg("allowed_hosts = [\"nqn.2026-11.x:a\"]", "[\"nqn.2026-11.x:h\"]").unwrap_err().to_string();
    assert!(e.contains("subsystem[0].namespace[0].hosts[0]") && e.contains("allowed_hosts"), "{e}");
    cfg("allowed_hosts = [\"nqn.2026-11.x:a\"]", "[\"nqn.2026-11.x:a\"]").unwrap();
    let e = cfg("", "[\"nqn.2026-11.x:h\", \"\"]").unwrap_err().to_string();
    assert!(e.contains("subsystem[0].namespace[0].hosts[1]") && e.contains("empty"), "{e}");
}
