//! Asymmetric Namespace Access through a running target: two ports of one
//! subsystem, states changed by a configuration reload (SIGHUP's path), the
//! ANA Change notice on the controllers of the port that changed, the ANA
//! log each port reports, and I/O refused or served per port.

use std::time::Duration;

use nvmeof_common::opcode::AdminOpcode;
use nvmeof_common::spec::identify::Cns;
use nvmeof_common::spec::log::{AnaLog, AnaState, LogPageId};
use nvmeof_common::spec::{GetLogPageCmd, IdentifyController, IdentifyNamespace};
use nvmeof_common::{SglDescriptor, Sqe, Status};
use nvmeof_initiator::{ConnectOptions, Controller};
use nvmeof_target::config::TargetConfig;
use nvmeof_tests::harness::*;
use nvmeof_tests::raw_client::{RawClient, RecvError};

/// Notice / ANA change / log 0Ch.
const AEN_ANA_CHANGE: u32 = 0x000C_0302;

fn aer_sqe() -> Sqe {
    let mut s = Sqe::new(AdminOpcode::ASYNC_EVENT.0);
    s.set_sgl(SglDescriptor::transport(0));
    s
}

/// Two ports on 127.0.0.1:0 with the `ana` keys given per port, and
/// [`SUBNQN`] with RAM namespaces 1 (group 1) and 2 (group `ns2_group`).
fn config(port1: &str, port2: &str, ns2_group: u32) -> TargetConfig {
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n{port1}\n\n[[port]]\nlisten = \"127.0.0.1:0\"\n{port2}\n\n\
         [[subsystem]]\nnqn = \"{SUBNQN}\"\n\n\
         [[subsystem.namespace]]\nnsid = 1\nram = \"1M\"\n\n\
         [[subsystem.namespace]]\nnsid = 2\nram = \"1M\"\nana_group = {ns2_group}\n"
    ))
    .unwrap()
}

/// The ANA log; `rae` keeps the notice masked.
async fn ana_log(admin: &mut RawClient, rae: bool) -> AnaLog {
    let mut c = GetLogPageCmd::new(LogPageId::ANA, 0xFFFF_FFFF, 0, 8208);
    c.rae = rae;
    AnaLog::decode(&admin.submit(c.to_sqe(0), None).await.ok().data).unwrap()
}

/// (group, state, NSIDs) of each group in a log.
fn states(l: &AnaLog) -> Vec<(u32, AnaState, Vec<u32>)> {
    l.groups.iter().map(|g| (g.grpid, g.state, g.nsids.clone())).collect()
}

async fn no_event(admin: &mut RawClient) {
    assert!(
        matches!(admin.recv_pdu_within(Duration::from_millis(200)).await, Err(RecvError::Timeout)),
        "unexpected event"
    );
}

#[tokio::test]
async fn ana_states_follow_the_configuration_per_port() {
    bounded(60, async {
        let cfg = config("", "", 1);
        let (server, a) = start(&cfg).await;
        let b = server.local_addrs[1];
        // One host, one controller through each port (a multipath host).
        let mut admin_a = admin_queue(a, SUBNQN).await;
        let mut io_a = io_queue(a, admin_a.cntlid, 1, 0).await;
        let mut admin_b = admin_queue(b, SUBNQN).await;
        let mut io_b = io_queue(b, admin_b.cntlid, 1, 0).await;

        // What the Linux host checks before it uses ANA.
        let id = IdentifyController::decode(&admin_a.identify(Cns::CTRL, 0).await.ok().data).unwrap();
        assert_eq!(id.cmic & 0x08, 0x08, "CMIC: ANA reporting");
        assert_eq!((id.anacap, id.anatt, id.anagrpmax, id.nanagrpid), (0x1F, 10, 128, 128));
        assert_ne!(id.oaes & 1 << 11, 0, "OAES: ANA change notices");
        let all_optimized = vec![(1, AnaState::OPTIMIZED, vec![1, 2])];
        assert_eq!(states(&ana_log(&mut admin_a, false).await), all_optimized);
        assert_eq!(states(&ana_log(&mut admin_b, false).await), all_optimized);

        // Port 2 goes inaccessible: its controller hears of it, port 1's does not.
        let aer_a = admin_a.start(aer_sqe()).await;
        let aer_b = admin_b.start(aer_sqe()).await;
        server.reload(&config("", "ana_state = \"inaccessible\"", 1)).unwrap();
        assert_eq!(admin_b.wait(aer_b).await.ok().cqe.dw0(), AEN_ANA_CHANGE);
        no_event(&mut admin_a).await;
        let l = ana_log(&mut admin_b, true).await;
        assert_eq!(states(&l), vec![(1, AnaState::INACCESSIBLE, vec![1, 2])]);
        assert_eq!(l.chgcnt, 1);
        assert!(l.groups.iter().all(|g| g.chgcnt == 1));
        assert_eq!(states(&ana_log(&mut admin_a, true).await), all_optimized);
        // I/O through port 2 is refused (no DNR: the host retries on another
        // path; logged, so More), through port 1 it runs.
        let d = pattern(512, 7);
        let c = io_b.write(1, 0, &d, 512).await;
        assert_eq!(c.status(), Status::ANA_INACCESSIBLE.with_more(), "{}", c.status());
        io_b.read(2, 0, 1, 512).await.expect_status(Status::ANA_INACCESSIBLE);
        io_a.write(1, 0, &d, 512).await.ok();
        assert_eq!(io_a.read(1, 0, 1, 512).await.ok().data, d);
        // Identify Namespace through port 2: nothing in use, as nvmet; through
        // port 1 the RAM chunk (128 KiB, 256 blocks) the write allocated.
        let n = IdentifyNamespace::decode(&admin_b.identify(Cns::NS, 1).await.ok().data).unwrap();
        assert_eq!((n.anagrpid, n.nuse), (1, 0));
        let n = IdentifyNamespace::decode(&admin_a.identify(Cns::NS, 1).await.ok().data).unwrap();
        assert_eq!((n.anagrpid, n.nuse), (1, 256));

        // Masked until the log is read with RAE=0: the next change raises nothing.
        let aer_b = admin_b.start(aer_sqe()).await;
        server.reload(&config("", "ana_state = \"change\"", 1)).unwrap();
        no_event(&mut admin_b).await;
        io_b.read(1, 0, 1, 512).await.expect_status(Status::ANA_TRANSITION);
        ana_log(&mut admin_b, false).await;

        // Namespace 2 moves to group 2, which port 1 reports non-optimized
        // and port 2 optimized: both controllers hear of it (nvmet sends a
        // namespace's move to every controller of the subsystem).
        let ana2 = "ana_groups = { 2 = \"non-optimized\" }";
        let b2 = "ana_state = \"change\"\nana_groups = { 2 = \"optimized\" }";
        server.reload(&config(ana2, b2, 2)).unwrap();
        assert_eq!(admin_a.wait(aer_a).await.ok().cqe.dw0(), AEN_ANA_CHANGE);
        assert_eq!(admin_b.wait(aer_b).await.ok().cqe.dw0(), AEN_ANA_CHANGE);
        let la = ana_log(&mut admin_a, false).await;
        assert_eq!(
            states(&la),
            vec![(1, AnaState::OPTIMIZED, vec![1]), (2, AnaState::NON_OPTIMIZED, vec![2])]
        );
        assert!(la.chgcnt >= 3, "{}", la.chgcnt);
        assert_eq!(
            states(&ana_log(&mut admin_b, false).await),
            vec![(1, AnaState::CHANGE, vec![1]), (2, AnaState::OPTIMIZED, vec![2])]
        );
        io_b.write(2, 3, &d, 512).await.ok();
        let n = IdentifyNamespace::decode(&admin_b.identify(Cns::NS, 2).await.ok().data).unwrap();
        assert_eq!((n.anagrpid, n.nuse, n.nsze), (2, 256, 2048));
        assert_eq!(io_a.read(2, 3, 1, 512).await.ok().data, d, "non-optimized still serves I/O");
        io_b.read(1, 0, 1, 512).await.expect_status(Status::ANA_TRANSITION);

        // An unchanged reload raises nothing.
        let _aer = admin_a.start(aer_sqe()).await;
        server.reload(&config(ana2, b2, 2)).unwrap();
        no_event(&mut admin_a).await;
        // The refusals are in port 2's controller's error log, at the NSID byte.
        let e = admin_b.get_log_page(LogPageId::ERROR, 0, 0, 64, false).await.ok();
        let newest = nvmeof_common::spec::log::ErrorLogEntry::decode(&e.data).unwrap();
        let st = Status::from_wire(newest.status);
        assert_eq!((st.code(), newest.param_error_location, newest.nsid), (Status::ANA_TRANSITION, 4, 1));
    })
    .await
}

/// Our initiator against the same two ports: the ANA log as each port
/// reports it, and an I/O refused by an inaccessible port as a retryable
/// NVMe status.
#[tokio::test]
async fn initiator_reads_each_ports_ana_log() {
    bounded(60, async {
        let (server, a) = start(&config("", "ana_state = \"inaccessible\"", 1)).await;
        let b = server.local_addrs[1];
        let opts = || ConnectOptions { io_queues: 1, queue_depth: 8, ..Default::default() };
        let ca = Controller::connect(a, SUBNQN, opts()).await.expect("connect through port 1");
        let cb = Controller::connect(b, SUBNQN, opts()).await.expect("connect through port 2");
        assert_eq!(states(&ca.ana_log().await.unwrap()), vec![(1, AnaState::OPTIMIZED, vec![1, 2])]);
        assert_eq!(states(&cb.ana_log().await.unwrap()), vec![(1, AnaState::INACCESSIBLE, vec![1, 2])]);
        let mut buf = vec![0u8; 512];
        ca.namespace(1).await.unwrap().read(0, &mut buf).await.unwrap();
        let e = cb.namespace(1).await.unwrap().read(0, &mut buf).await.unwrap_err();
        assert_eq!(e.status().map(|s| s.code()), Some(Status::ANA_INACCESSIBLE), "{e}");
        assert!(!e.is_permanent(), "an ANA status is worth retrying on another path");
        ca.shutdown().await.unwrap();
        cb.shutdown().await.unwrap();
    })
    .await
}

#[test]
fn ana_keys_are_checked() {
    let bad = |port: &str, group: &str| {
        TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n{port}\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\
             [[subsystem.namespace]]\nram = \"1M\"\n{group}\n"
        ))
        .unwrap_err()
        .to_string()
    };
    assert!(
        bad("ana_state = \"active\"", "").starts_with("port[0].ana_state: \"active\" is not an ANA state")
    );
    assert!(bad("ana_groups = { 0 = \"optimized\" }", "").starts_with("port[0].ana_groups.0: ANA group 0"));
    assert!(bad("ana_groups = { x = \"optimized\" }", "").starts_with("port[0].ana_groups.x:"));
    assert!(bad("ana_groups = { 2 = \"up\" }", "").starts_with("port[0].ana_groups.2: \"up\""));
    assert!(bad("", "ana_group = 129").starts_with("subsystem[0].namespace[0].ana_group: ANA group 129"));
    // MDTS 1 (8 KiB) leaves room for 127 groups in the log the host reads.
    let e = TargetConfig::from_toml(&format!(
        "[limits]\nmdts = 1\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n[[subsystem.namespace]]\nram = \"1M\"\nana_group = 128\n"
    ))
    .unwrap_err();
    assert!(e.to_string().contains("1..=127"), "{e}");
    let ok = config("ana_state = \"non-optimized\"", "ana_groups = { 128 = \"persistent-loss\" }", 128);
    assert_eq!(ok.port_ana[0].state, AnaState::NON_OPTIMIZED);
    assert_eq!(ok.port_ana[1].groups.get(&128), Some(&AnaState::PERSISTENT_LOSS));
    assert_eq!(ok.subsystems[0].namespaces[1].ana_group, 128);
}
