//! A subsystem's own I/O queue limit (`max_io_queues` in its table, nvmet's
//! `attr_qid_max`) and the deletion of controllers that nvmet does when a
//! subsystem's setting hosts read at connect time changes, or when the
//! subsystem stops being exported: hosts get at most that many I/O queues,
//! a reload that changes the limit ends the subsystem's associations so that
//! their hosts reconnect and get it (other subsystems' hosts are not
//! touched), and a reload that removes the subsystem ends them for good
//! (the reconnect is refused with DNR). The initiator goes on with fewer
//! queues when a reconnect grants fewer, and takes them back when it grants
//! more again.

mod initiator_util;

use std::time::{Duration, Instant};

use initiator_util::*;
use nvmeof_initiator::common::spec::features::{FeatureId, GetFeaturesCmd};
use nvmeof_initiator::{ConnectOptions, Controller, ControllerState, Error, Namespace};
use nvmeof_target::config::TargetConfig;

/// A second subsystem, without a limit of its own.
const OTHER: &str = "nqn.2024-01.io.nvmeof.test:other";

/// [`SUBNQN`] with `limit` (a TOML value, or "" for none) and a 1 MiB RAM
/// namespace; [`OTHER`] with one too unless `other` is false.
fn cfg(limit: &str, other: bool) -> TargetConfig {
    let limit = if limit.is_empty() { String::new() } else { format!("max_io_queues = {limit}\n") };
    let other = if other {
        format!("[[subsystem]]\nnqn = \"{OTHER}\"\n[[subsystem.namespace]]\nram = \"1M\"\n")
    } else {
        String::new()
    };
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n{limit}\
         [[subsystem.namespace]]\nram = \"1M\"\n\n{other}"
    ))
    .unwrap()
}

/// Number of Queues as the controller reports it: (submission, completion)
/// queues, each 0's based.
async fn number_of_queues(c: &Controller) -> (u32, u32) {
    let dw0 = c.get_features(GetFeaturesCmd::new(FeatureId::NUM_QUEUES), None).await.unwrap();
    (dw0 & 0xFFFF, dw0 >> 16)
}

/// Waits (up to 10 s) until `c` is live on an association other than `old`.
async fn reconnected(c: &Controller, old: u16) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let cntlid = c.info().cntlid;
        if cntlid != old && c.state() == ControllerState::Live {
            return cntlid;
        }
        assert!(Instant::now() < deadline, "no new association within 10 s (state {:?})", c.state());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subsystem_limit_caps_io_queues_and_a_changed_limit_reconnects_its_hosts() {
    bounded(60, async {
        let (server, addr) = start(&cfg("2", true)).await;
        // opts() asks for 4 I/O queues.
        let c = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        assert_eq!(c.io_queue_count(), 2, "the subsystem's limit, not the 4 asked for");
        assert_eq!(number_of_queues(&c).await, (1, 1));
        let other = Controller::connect(addr, OTHER, opts()).await.unwrap();
        assert_eq!(other.io_queue_count(), 4, "a subsystem without a limit: the target's");
        let (cntlid, other_cntlid) = (c.info().cntlid, other.info().cntlid);

        let ns = c.namespace(1).await.unwrap();
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        ns.write(8, &data).await.unwrap();

        // An unchanged limit leaves the association alone.
        server.reload(&cfg("2", true)).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!((c.info().cntlid, c.state()), (cntlid, ControllerState::Live));

        // A new limit: the controller is deleted, the host reconnects on a new
        // association, which reports the new limit; the data is still there.
        server.reload(&cfg("3", true)).unwrap();
        let new_cntlid = reconnected(&c, cntlid).await;
        assert_ne!(new_cntlid, cntlid);
        assert_eq!(number_of_queues(&c).await, (2, 2));
        let mut back = vec![0u8; 4096];
        ns.read(8, &mut back).await.unwrap();
        assert_eq!(back, data);
        let fresh = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        assert_eq!(fresh.io_queue_count(), 3);
        fresh.shutdown().await.unwrap();

        // Back to the target's limit (the key removed).
        server.reload(&cfg("", true)).unwrap();
        let third = reconnected(&c, new_cntlid).await;
        assert_eq!(number_of_queues(&c).await, (127, 127));
        assert_eq!(c.io_queue_count(), 2, "the initiator keeps the queues it connected with");
        ns.read(8, &mut back).await.unwrap();
        assert_eq!(back, data);
        assert_ne!(third, new_cntlid);
        // The target's own limit written out is no change hosts would see.
        server.reload(&cfg("128", true)).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!((c.info().cntlid, c.state()), (third, ControllerState::Live));

        // The other subsystem's host never noticed.
        assert_eq!((other.info().cntlid, other.state()), (other_cntlid, ControllerState::Live));
        other.namespace(1).await.unwrap().read(0, &mut back).await.unwrap();
        c.shutdown().await.unwrap();
        other.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_subsystem_ends_its_associations_and_refuses_reconnects() {
    bounded(60, async {
        let (server, addr) = start(&cfg("", true)).await;
        let c = Controller::connect(addr, OTHER, opts()).await.unwrap();
        let keep = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        let ns = c.namespace(1).await.unwrap();
        let mut buf = vec![0u8; 4096];
        ns.read(0, &mut buf).await.unwrap();
        let mut state = c.subscribe_state();

        // OTHER leaves the configuration: its controller is deleted, and
        // the reconnect gets Connect Invalid Parameters with DNR, so the
        // initiator gives up at once instead of retrying for ctrl_loss_timeout.
        server.reload(&cfg("", false)).unwrap();
        tokio::time::timeout(Duration::from_secs(5), state.wait_for(|s| *s == ControllerState::Failed))
            .await
            .expect("the controller lost within 5 s")
            .unwrap();
        let e = ns.read(0, &mut buf).await.expect_err("no I/O on a removed subsystem");
        assert!(matches!(e, Error::ControllerLost(_)), "{e:?}");
        assert!(Controller::connect(addr, OTHER, opts()).await.is_err());

        // The subsystem that stays is not touched.
        assert_eq!(keep.state(), ControllerState::Live);
        keep.namespace(1).await.unwrap().read(0, &mut buf).await.unwrap();
        keep.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}

/// Waits (up to 10 s) until `c` is live with `n` I/O queues in use.
async fn in_use(c: &Controller, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.state() != ControllerState::Live || c.io_queue_count() != n {
        assert!(
            Instant::now() < deadline,
            "not live with {n} queues within 10 s (state {:?}, {} in use)",
            c.state(),
            c.io_queue_count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// 32 writes of 4 KiB at once (tasks of their own, spread over the queues
/// in use), then the same read back, with `tag` in every block.
async fn write_read_all(ns: &Namespace, tag: u8) {
    let block = move |i: u64| vec![tag ^ i as u8; 4096];
    let mut set = tokio::task::JoinSet::new();
    for i in 0..32u64 {
        let ns = ns.clone();
        set.spawn(async move { ns.write(64 + i * 8, &block(i)).await });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap().unwrap();
    }
    let mut set = tokio::task::JoinSet::new();
    for i in 0..32u64 {
        let ns = ns.clone();
        set.spawn(async move {
            let mut b = vec![0u8; 4096];
            ns.read(64 + i * 8, &mut b).await.unwrap();
            assert_eq!(b, block(i), "block {i}");
        });
    }
    while let Some(r) = set.join_next().await {
        r.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_initiator_goes_on_with_fewer_queues_and_takes_them_back() {
    bounded(60, async {
        let (server, addr) = start(&cfg("", false)).await;
        // 2 read queues and 2 write queues (qids 1-2 writes, 3-4 reads).
        let c = Controller::connect(addr, SUBNQN, ConnectOptions { io_queues: 2, write_queues: 2, ..opts() })
            .await
            .unwrap();
        assert_eq!((c.io_queue_count(), c.info().write_queues), (4, 2));
        let ns = c.namespace(1).await.unwrap();
        write_read_all(&ns, 1).await;

        // 3 granted: the write queues stay, one read queue is left.
        server.reload(&cfg("3", false)).unwrap();
        in_use(&c, 3).await;
        assert_eq!((c.info().io_queues, c.info().write_queues), (3, 2));
        write_read_all(&ns, 2).await;
        let e =
            c.io_command_on(4, nvmeof_initiator::common::Sqe::new(0), nvmeof_initiator::Payload::None).await;
        assert!(matches!(e, Err(Error::InvalidArgument(_))), "queue 4 is out of use: {e:?}");

        // 2 granted: too few for dedicated write queues, both take everything.
        server.reload(&cfg("2", false)).unwrap();
        in_use(&c, 2).await;
        assert_eq!((c.info().io_queues, c.info().write_queues), (2, 0));
        write_read_all(&ns, 3).await;

        // The limit lifted: all four again, split as at connect.
        server.reload(&cfg("", false)).unwrap();
        in_use(&c, 4).await;
        assert_eq!((c.info().io_queues, c.info().write_queues), (4, 2));
        write_read_all(&ns, 4).await;
        c.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}
