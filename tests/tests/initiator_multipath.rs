//! `MultipathNamespace` against our target with two ports: path choice by
//! policy (round-robin, first, queue depth) and by
//! ANA state (optimized first, non-optimized only without one), failover on
//! an ANA status before any notice arrives, states following notices, a
//! command waiting for a path to come back (bounded), failover after a lost
//! connection, vectored I/O failing over too.

mod initiator_util;

use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::common::spec::log::AnaState;
use nvmeof_initiator::{
    AuthError, ConnectOptions, Controller, ControllerState, Error, MultipathNamespace, MultipathOptions,
    PathPolicy, PathStatus, ReconnectPolicy,
};
use nvmeof_target::config::TargetConfig;
use nvmeof_target::server::Server;

/// Two ports with ANA states `s1` and `s2`; namespace 1 of [`SUBNQN`].
fn cfg(s1: &str, s2: &str) -> TargetConfig {
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\nana_state = \"{s1}\"\n\n\
         [[port]]\nlisten = \"127.0.0.1:0\"\nana_state = \"{s2}\"\n\n\
         [[subsystem]]\nnqn = \"{SUBNQN}\"\n[[subsystem.namespace]]\nnsid = 1\nram = \"4M\"\n"
    ))
    .unwrap()
}

fn mp_opts(no_path: Duration) -> MultipathOptions {
    MultipathOptions { no_path_timeout: no_path, ..Default::default() }
}

/// Commands sent through each path.
fn commands(mp: &MultipathNamespace) -> Vec<u64> {
    mp.paths().iter().map(|p| p.commands).collect()
}

fn ana(mp: &MultipathNamespace) -> Vec<AnaState> {
    mp.paths().iter().map(|p| p.ana).collect()
}

/// Writes then reads back `n` blocks, one command each, all succeeding.
async fn io(mp: &MultipathNamespace, n: u64, seed: u8) {
    for i in 0..n {
        let data = vec![seed.wrapping_add(i as u8); BS];
        mp.write(i, &data).await.unwrap_or_else(|e| panic!("write {i}: {e}"));
        let mut back = vec![0u8; BS];
        mp.read(i, &mut back).await.unwrap_or_else(|e| panic!("read {i}: {e}"));
        assert_eq!(back, data, "block {i}");
    }
}

/// Waits (bounded) until the path states are `want`.
async fn wait_ana(mp: &MultipathNamespace, want: &[AnaState]) {
    let t0 = std::time::Instant::now();
    while ana(mp) != want {
        assert!(t0.elapsed() < Duration::from_secs(5), "ANA states {:?}, want {want:?}", ana(mp));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn two_paths(server: &Server, o: ConnectOptions, no_path: Duration) -> MultipathNamespace {
    MultipathNamespace::connect(&server.local_addrs[..2], SUBNQN, 1, o, mp_opts(no_path)).await.unwrap()
}

/// Both ports, with `policy`.
async fn with_policy(server: &Server, policy: PathPolicy) -> MultipathNamespace {
    let mp = MultipathOptions { policy, ..mp_opts(Duration::from_secs(5)) };
    MultipathNamespace::connect(&server.local_addrs[..2], SUBNQN, 1, opts(), mp).await.unwrap()
}

#[tokio::test]
async fn paths_by_ana_state_and_notices() {
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", "optimized")).await;
        let mp = two_paths(&server, opts(), Duration::from_secs(5)).await;
        assert_eq!((mp.nsid(), mp.block_size(), mp.blocks()), (1, BS as u32, (4 << 20) / BS as u64));
        // Both optimized: used in turn.
        io(&mp, 8, 1).await;
        assert_eq!(commands(&mp), vec![8, 8]);

        // Port 1 turns non-optimized: the notice moves all I/O to port 2.
        server.reload(&cfg("non-optimized", "optimized")).unwrap();
        wait_ana(&mp, &[AnaState::NON_OPTIMIZED, AnaState::OPTIMIZED]).await;
        let before = commands(&mp);
        io(&mp, 8, 2).await;
        assert_eq!(commands(&mp), vec![before[0], before[1] + 16]);

        // Port 2 inaccessible: the non-optimized path is the one left.
        server.reload(&cfg("non-optimized", "inaccessible")).unwrap();
        wait_ana(&mp, &[AnaState::NON_OPTIMIZED, AnaState::INACCESSIBLE]).await;
        let before = commands(&mp);
        io(&mp, 8, 3).await;
        assert_eq!(commands(&mp), vec![before[0] + 16, before[1]]);
        mp.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

#[tokio::test]
async fn first_path_policy_keeps_the_others_standing_by() {
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", "optimized")).await;
        let mp = with_policy(&server, PathPolicy::First).await;
        io(&mp, 8, 7).await;
        assert_eq!(commands(&mp), vec![16, 0]);
        // The first path turns non-optimized: the optimized standby takes over.
        server.reload(&cfg("non-optimized", "optimized")).unwrap();
        wait_ana(&mp, &[AnaState::NON_OPTIMIZED, AnaState::OPTIMIZED]).await;
        io(&mp, 8, 8).await;
        assert_eq!(commands(&mp), vec![16, 16]);
        mp.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

fn outstanding(mp: &MultipathNamespace) -> Vec<u64> {
    mp.paths().iter().map(|p| p.outstanding).collect()
}

/// Polls `f` once: whether it is still pending.
async fn poll_once<F: std::future::Future + Unpin>(f: &mut F) -> bool {
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *f).poll(cx).is_pending())).await
}

#[tokio::test]
async fn queue_depth_policy_prefers_the_path_with_fewer_commands_outstanding() {
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", "optimized")).await;
        let mp = with_policy(&server, PathPolicy::QueueDepth).await;
        // One command at a time: always a tie, taken in turn.
        io(&mp, 8, 1).await;
        assert_eq!(commands(&mp), vec![8, 8]);
        assert_eq!(outstanding(&mp), vec![0, 0]);
        // A read held outstanding on one path (polled once, then left):
        // every other command goes to the other path.
        let mut buf = vec![0u8; BS];
        let mut held = Box::pin(mp.read(0, &mut buf));
        assert!(poll_once(&mut held).await, "the held read completed in its first poll");
        let out = outstanding(&mp);
        let busy = out.iter().position(|&o| o == 1).unwrap_or_else(|| panic!("outstanding {out:?}"));
        assert_eq!(out.iter().sum::<u64>(), 1, "{out:?}");
        let before = commands(&mp);
        io(&mp, 4, 2).await;
        let after = commands(&mp);
        assert_eq!(after[busy], before[busy], "{before:?} -> {after:?}");
        assert_eq!(after[1 - busy], before[1 - busy] + 8, "{before:?} -> {after:?}");
        // Round-robin would have split them: the count is what decided.
        held.await.unwrap();
        // Block 0 as it was before the writes (1) or after (2): it ran
        // concurrently with them.
        assert!(buf == vec![1u8; BS] || buf == vec![2u8; BS], "held read: {:?}", &buf[..8]);
        assert_eq!(outstanding(&mp), vec![0, 0]);
        // A command dropped while outstanding (a caller's timeout) stops counting.
        let mut buf = vec![0u8; BS];
        let mut dropped = Box::pin(mp.read(1, &mut buf));
        assert!(poll_once(&mut dropped).await);
        assert_eq!(outstanding(&mp).iter().sum::<u64>(), 1);
        drop(dropped);
        assert_eq!(outstanding(&mp), vec![0, 0]);
        mp.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

#[tokio::test]
async fn an_ana_status_fails_over_before_any_notice() {
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", "optimized")).await;
        // No notices: only the refused commands tell the host.
        let o = ConnectOptions { async_events: false, ..opts() };
        let mp = two_paths(&server, o, Duration::from_secs(5)).await;
        server.reload(&cfg("inaccessible", "optimized")).unwrap();
        io(&mp, 7, 4).await;
        // The zero-copy forms fail over the same way.
        let data = bytes::Bytes::from(vec![0x5Au8; 2 * BS]);
        mp.write_bytes(7, data.clone(), Default::default()).await.unwrap();
        assert_eq!(mp.read_bytes(7, 2 * BS).await.unwrap(), data);
        // The first command sent to port 1 was refused (03h/02h) and retried on
        // port 2; the path is marked and its ANA log re-read.
        assert_eq!(ana(&mp), vec![AnaState::INACCESSIBLE, AnaState::OPTIMIZED]);
        let c = commands(&mp);
        assert_eq!(c[0], 1, "one refused command on port 1: {c:?}");
        assert_eq!(c[1], 16, "{c:?}");
        // Compare, Write Zeroes and Deallocate go the same way (port 1 stays
        // marked inaccessible: nothing more is sent there).
        assert!(mp.compare(7, &data).await.unwrap());
        assert!(!mp.compare(7, &[0u8; 2 * BS]).await.unwrap(), "a miscompare is Ok(false), not a path error");
        mp.write_zeroes(7, 1, true, Default::default()).await.unwrap();
        mp.deallocate(&[(8, 1)]).await.unwrap();
        assert_eq!(mp.read_bytes(7, 2 * BS).await.unwrap(), vec![0u8; 2 * BS]);
        assert_eq!(commands(&mp), vec![1, 21]);
        mp.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

/// Vectored reads and writes (an application's own scattered buffers) fail
/// over as the others do: the first, refused on the inaccessible path, goes
/// again on the other, its buffers sent (or filled) again.
#[tokio::test]
async fn vectored_io_fails_over() {
    use std::io::{IoSlice, IoSliceMut};
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", "optimized")).await;
        let o = ConnectOptions { async_events: false, ..opts() };
        let mp = two_paths(&server, o, Duration::from_secs(5)).await;
        server.reload(&cfg("inaccessible", "optimized")).unwrap();
        // Three blocks from buffers of 100, BS and 2 × BS − 100 bytes.
        let data: Vec<u8> = (0..3 * BS).map(|i| (i % 251) as u8).collect();
        let (a, rest) = data.split_at(100);
        let (b, c) = rest.split_at(BS);
        mp.write_vectored(4, &[IoSlice::new(a), IoSlice::new(b), IoSlice::new(c)], Default::default())
            .await
            .unwrap();
        assert_eq!(commands(&mp), vec![1, 1], "refused on port 1, written through port 2");
        mp.write(0, &vec![0u8; BS]).await.unwrap();
        let (mut x, mut y, mut z) = (vec![0u8; 2 * BS - 1], vec![0u8; 1], vec![0u8; BS]);
        let mut bufs = [IoSliceMut::new(&mut x), IoSliceMut::new(&mut y), IoSliceMut::new(&mut z)];
        mp.read_vectored(4, &mut bufs, Default::default()).await.unwrap();
        assert_eq!([x, y, z].concat(), data);
        assert_eq!(commands(&mp), vec![1, 3]);
        mp.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

#[tokio::test]
async fn no_usable_path_waits_bounded() {
    bounded(60, async {
        let (server, _) = start(&cfg("inaccessible", "change")).await;
        let mp = two_paths(&server, opts(), Duration::from_millis(500)).await;
        assert_eq!(ana(&mp), vec![AnaState::INACCESSIBLE, AnaState::CHANGE]);
        let mut buf = vec![0u8; BS];
        let t0 = std::time::Instant::now();
        match mp.read(0, &mut buf).await {
            Err(Error::NoPath(why)) => {
                assert!(why.contains("inaccessible") && why.contains("change"), "{why}")
            }
            r => panic!("expected no path, got {r:?}"),
        }
        assert!(t0.elapsed() >= Duration::from_millis(500), "waited {:?}", t0.elapsed());

        // A command waiting for a path goes out as soon as one comes back.
        let mp2 =
            MultipathNamespace::new(mp.controllers(), 1, mp_opts(Duration::from_secs(20))).await.unwrap();
        let waiting = tokio::spawn({
            let mp2 = mp2.clone();
            async move {
                let mut b = vec![0u8; BS];
                mp2.read(0, &mut b).await
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished());
        server.reload(&cfg("inaccessible", "optimized")).unwrap();
        waiting.await.unwrap().unwrap();
        let c: Vec<PathStatus> = mp2.paths();
        assert_eq!((c[0].commands, c[1].commands), (0, 1), "{c:?}");
        mp.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

#[tokio::test]
async fn a_lost_connection_fails_over() {
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", "optimized")).await;
        let proxy = Proxy::start(server.local_addrs[0]).await;
        // Port 1 reconnects 3 s after the loss: the failover must not wait for that.
        let reconnect = ReconnectPolicy {
            delay: Duration::from_secs(3),
            max_delay: Duration::from_secs(3),
            ctrl_loss_timeout: Some(Duration::from_secs(30)),
            requeue: false,
            fast_io_fail_timeout: None,
        };
        let o = ConnectOptions { kato: Duration::from_secs(2), reconnect, ..opts() };
        let mp = MultipathNamespace::connect(
            &[proxy.addr, server.local_addrs[1]],
            SUBNQN,
            1,
            o,
            mp_opts(Duration::from_secs(5)),
        )
        .await
        .unwrap();
        io(&mp, 4, 5).await;
        // Port 1's connections freeze with commands on them, then drop: those
        // fail (no requeue on multipath paths) and go to port 2.
        proxy.freeze(true);
        let since = proxy.bytes_from_host();
        let before: u64 = commands(&mp).iter().sum();
        let ios: Vec<_> = (0..8u64)
            .map(|i| {
                let mp = mp.clone();
                tokio::spawn(async move {
                    let mut b = vec![0u8; BS];
                    mp.read(i, &mut b).await.map(|()| b[0])
                })
            })
            .collect();
        // At least one read's capsule (72 bytes) is held on port 1, and the
        // eight had time to be sent.
        proxy.wait_from_host(since, 72).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.kill_all();
        proxy.freeze(false);
        for (i, t) in ios.into_iter().enumerate() {
            // Blocks 0..4 as `io` wrote them, the rest never written.
            let want = if i < 4 { 5 + i as u8 } else { 0 };
            let r = tokio::time::timeout(Duration::from_secs(2), t).await.expect("failed over within 2 s");
            assert_eq!(r.unwrap().unwrap(), want, "block {i}");
        }
        assert_eq!(mp.paths()[0].state, ControllerState::Reconnecting, "port 1 still down");
        // Those caught on port 1 were sent twice.
        let sent = commands(&mp).iter().sum::<u64>() - before;
        assert!(sent > 8, "8 reads, {sent} commands: {:?}", mp.paths());
        assert_ne!(mp.paths()[0].state, ControllerState::Failed);
        io(&mp, 4, 6).await;
        mp.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

#[tokio::test]
async fn paths_must_be_one_namespace() {
    bounded(30, async {
        let (a, _) = start(&cfg("optimized", "optimized")).await;
        let (b, _) = start(&cfg("optimized", "optimized")).await;
        let ca = Controller::connect(a.local_addrs[0], SUBNQN, opts()).await.unwrap();
        let cb = Controller::connect(b.local_addrs[0], SUBNQN, opts()).await.unwrap();
        // Same NQN, another target: another namespace (NGUID).
        let e = MultipathNamespace::new(vec![ca.clone(), cb.clone()], 1, MultipathOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Controller(_)), "{e}");
        assert!(matches!(
            MultipathNamespace::new(vec![], 1, MultipathOptions::default()).await,
            Err(Error::InvalidArgument(_))
        ));
        // No namespace 9 there.
        MultipathNamespace::new(vec![ca], 9, MultipathOptions::default()).await.unwrap_err();
        a.shutdown(Duration::from_secs(1)).await;
        b.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

/// One port, one subsystem (with the lines `sub`) whose namespace 1 is a
/// 4 MiB RAM namespace with the identifier lines `ids` (TOML).
fn single(sub: &str, ids: &str) -> TargetConfig {
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n\n\
         [[subsystem]]\nnqn = \"{SUBNQN}\"\n{sub}\n[[subsystem.namespace]]\nnsid = 1\nram = \"4M\"\n{ids}\n"
    ))
    .unwrap()
}

/// Two targets (two stores) with the same configured UUID and disjoint
/// controller ID ranges are one namespace
/// to a multipath host: the NGUID and EUI-64 derive from the UUID, not from
/// the store, so they agree too (Linux joins paths only when every
/// identifier matches). Without it, or with different UUIDs, the host keeps
/// them apart. A reload that changes the UUID replaces the namespace.
#[tokio::test]
async fn targets_given_the_same_uuid_export_one_namespace() {
    bounded(60, async {
        const UUID: &str = "uuid = \"0b1d8c4e-7f2a-4c3e-9a61-3d2b5e8f9a10\"";
        // Disjoint controller ID ranges, as a Linux host needs (it refuses a
        // second controller of a subsystem with an ID it already has).
        let (a, _) = start(&single("cntlid_max = 99", UUID)).await;
        let (b, _) = start(&single("cntlid_min = 100", UUID)).await;
        let ids = |s: &Server| {
            let n = s.target.subsystem(SUBNQN).unwrap().namespace(1).unwrap();
            (n.uuid, n.nguid, n.eui64)
        };
        assert_eq!(ids(&a), ids(&b));
        assert_eq!(ids(&a).0[..4], [0x0b, 0x1d, 0x8c, 0x4e], "the UUID as given");
        let ctrl = |s: &Server| Controller::connect(s.local_addrs[0], SUBNQN, opts());
        let paths = vec![ctrl(&a).await.unwrap(), ctrl(&b).await.unwrap()];
        let mp = MultipathNamespace::new(paths, 1, mp_opts(Duration::from_secs(5))).await.unwrap();
        let cntlids: Vec<u16> = mp.paths().iter().map(|p| p.cntlid).collect();
        assert!(cntlids[0] < 100 && cntlids[1] >= 100, "{cntlids:?}");
        // (Two RAM stores: each path reads back only what went through it;
        // over one replicated store both would see every write.)
        mp.shutdown().await.unwrap();

        // Unconfigured, or configured differently: two namespaces.
        let (c, _) = start(&single("", "")).await;
        let (d, _) = start(&single("", "")).await;
        let (e, _) = start(&single("", "uuid = \"1b1d8c4e-7f2a-4c3e-9a61-3d2b5e8f9a10\"")).await;
        for (x, y) in [(&c, &d), (&a, &e)] {
            assert_ne!(ids(x), ids(y));
            let paths = vec![ctrl(x).await.unwrap(), ctrl(y).await.unwrap()];
            let r = MultipathNamespace::new(paths, 1, mp_opts(Duration::from_secs(5))).await;
            assert!(matches!(&r, Err(Error::Controller(m)) if m.contains("differs")), "{r:?}");
        }
        // A reload with another UUID: new identifiers, a new namespace.
        let before = ids(&a);
        a.reload(&single("cntlid_max = 99", "uuid = \"2b1d8c4e-7f2a-4c3e-9a61-3d2b5e8f9a10\"")).unwrap();
        let after = ids(&a);
        assert!(after.0 != before.0 && after.1 != before.1 && after.2 != before.2, "{before:?} -> {after:?}");
        for s in [a, b, c, d, e] {
            s.shutdown(Duration::from_secs(1)).await;
        }
    })
    .await
}

/// Reservations through a multipath namespace: registrations belong to the
/// host ID, so a reservation taken through one path covers I/O through both;
/// another host is refused; with one path inaccessible, the reservation
/// commands go through the other.
#[tokio::test]
async fn reservations_through_either_path() {
    use nvmeof_initiator::common::spec::reservation::{
        AcquireAction, RegisterAction, ReleaseAction, ReservationType,
    };
    use nvmeof_initiator::common::Status;
    use nvmeof_initiator::HostIdentity;
    bounded(60, async {
        let with_resv = |s1: &str, s2: &str| {
            let mut c = cfg(s1, s2);
            c.subsystems[0].namespaces[0].reservations = true;
            c
        };
        let (server, _) = start(&with_resv("optimized", "optimized")).await;
        let mp = two_paths(&server, opts(), Duration::from_secs(5)).await;
        mp.reservation_register(RegisterAction::REGISTER, 0, 5, false).await.unwrap();
        mp.reservation_acquire(AcquireAction::ACQUIRE, ReservationType::WRITE_EXCLUSIVE, 5, 0).await.unwrap();
        let before = commands(&mp);
        io(&mp, 8, 3).await;
        let after = commands(&mp);
        assert!(
            after.iter().zip(&before).all(|(a, b)| a > b),
            "I/O through both paths: {before:?} -> {after:?}"
        );
        let r = mp.reservation_report().await.unwrap();
        assert_eq!(
            (r.rtype, r.regctl, r.registrants[0].hostid),
            (ReservationType::WRITE_EXCLUSIVE, 1, host().id)
        );

        let other = ConnectOptions { host: Some(HostIdentity::from_id(*b"multipath-other!")), ..opts() };
        let ctrl = Controller::connect(server.local_addrs[1], SUBNQN, other).await.unwrap();
        match ctrl.namespace(1).await.unwrap().write(0, &[1u8; BS]).await {
            Err(Error::Nvme { status, .. }) => assert_eq!(status.code(), Status::RESERVATION_CONFLICT),
            other => panic!("another host's write: {other:?}"),
        }
        ctrl.shutdown().await.unwrap();

        server.reload(&with_resv("inaccessible", "optimized")).unwrap();
        wait_ana(&mp, &[AnaState::INACCESSIBLE, AnaState::OPTIMIZED]).await;
        mp.reservation_release(ReleaseAction::RELEASE, ReservationType::WRITE_EXCLUSIVE, 5).await.unwrap();
        mp.reservation_register(RegisterAction::UNREGISTER, 5, 0, false).await.unwrap();
        assert_eq!(mp.reservation_report().await.unwrap().regctl, 0);
        mp.shutdown().await.unwrap();
    })
    .await;
}

/// Compare and Write through both paths (two ports, two controllers of the
/// subsystem) in turn: compare-and-swap loops from six tasks count exactly
/// their wins, so the pairs are atomic against each other whichever
/// controller they come through; with one path inaccessible they go through
/// the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_write_is_atomic_across_paths() {
    bounded(60, async {
        let (server, _) = start(&cfg("optimized", "optimized")).await;
        let mp = std::sync::Arc::new(two_paths(&server, opts(), Duration::from_secs(5)).await);
        let counter = |n: u64| {
            let mut b = vec![0u8; BS];
            b[..8].copy_from_slice(&n.to_le_bytes());
            b
        };
        mp.write(9, &counter(0)).await.unwrap();
        const TASKS: u64 = 6;
        const WINS: u64 = 20;
        let mut tasks = Vec::new();
        for _ in 0..TASKS {
            let mp = mp.clone();
            tasks.push(tokio::spawn(async move {
                let mut wins = 0;
                let mut now = vec![0u8; BS];
                // Bounded: at most 100 tries per win.
                for _ in 0..WINS * 100 {
                    if wins == WINS {
                        break;
                    }
                    mp.read(9, &mut now).await.unwrap();
                    let n = u64::from_le_bytes(now[..8].try_into().unwrap());
                    if mp.compare_and_write(9, &now, &counter(n + 1), Default::default()).await.unwrap() {
                        wins += 1;
                    }
                }
                wins
            }));
        }
        let mut wins = 0;
        for t in tasks {
            wins += t.await.unwrap();
        }
        assert_eq!(wins, TASKS * WINS);
        let mut end = vec![0u8; BS];
        mp.read(9, &mut end).await.unwrap();
        assert_eq!(end, counter(wins), "every win counted once");
        let c = commands(&mp);
        assert!(c[0] > 0 && c[1] > 0, "both paths used: {c:?}");
        // Path 2 inaccessible: path 1 takes every pair.
        server.reload(&cfg("optimized", "inaccessible")).unwrap();
        wait_ana(&mp, &[AnaState::OPTIMIZED, AnaState::INACCESSIBLE]).await;
        let before = commands(&mp);
        assert!(mp.compare_and_write(9, &counter(wins), &counter(0), Default::default()).await.unwrap());
        assert!(!mp.compare_and_write(9, &counter(wins), &counter(1), Default::default()).await.unwrap());
        assert_eq!(commands(&mp)[1], before[1]);
        mp.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

/// Target A: two ports (discovery filter `filter`) exporting `file` as
/// namespace 1 of [`SUBNQN`] under `uuid`, its log referring to `referrals`.
fn listed(
    filter: &str,
    uuid: &str,
    file: &std::path::Path,
    referrals: &[std::net::SocketAddr],
) -> TargetConfig {
    let r: String = referrals.iter().map(|a| format!("[[referral]]\naddress = \"{a}\"\n")).collect();
    TargetConfig::from_toml(&format!(
        "discovery_filter = \"{filter}\"\n[[port]]\nlisten = \"127.0.0.1:0\"\n[[port]]\nlisten = \"127.0.0.1:0\"\n{r}\n\
         [[subsystem]]\nnqn = \"{SUBNQN}\"\ncntlid_max = 99\n[[subsystem.namespace]]\nnsid = 1\nfile = {file:?}\n{uuid}\n"
    ))
    .unwrap()
}

/// `MultipathNamespace::discover`: every port the discovery logs list for
/// the subsystem (referrals followed: target C) becomes a path; a listed
/// path that does not connect (target B wants DH-HMAC-CHAP, which these
/// options do not offer) is left out while others connect, and is the error
/// when it is the only one; a discovery filter that lists the asking port
/// only gives one path there; a subsystem no log lists is an error.
#[tokio::test]
async fn paths_from_discovery() {
    bounded(60, async {
        const UUID: &str = "uuid = \"0b1d8c4e-7f2a-4c3e-9a61-3d2b5e8f9a11\"";
        const SECRET: &str = "DHHC-1:01:o8/jE9vGsSdaRVAfWmfEhzOZ8S7KkfTi8F/tg64x4BN8zoYw:";
        let keyed = single(
            &format!(
                "cntlid_min = 100\nallowed_hosts = [{{ nqn = \"{}\", dhchap_key = \"{SECRET}\" }}]",
                host().nqn
            ),
            UUID,
        );
        // A and C export one file (one page cache): one store on every path.
        let dir = std::env::temp_dir().join(format!("nvmeof-mp-discover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("shared.img");
        std::fs::File::create(&file).unwrap().set_len(4 << 20).unwrap();
        let (b, b_addr) = start(&keyed).await;
        let c_cfg = TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n[[subsystem]]\nnqn = \"{SUBNQN}\"\ncntlid_min = 200\n\
             [[subsystem.namespace]]\nnsid = 1\nfile = {file:?}\n{UUID}\n"
        ))
        .unwrap();
        let (c, c_addr) = start(&c_cfg).await;
        let (a, a1) = start(&listed("match_any", UUID, &file, &[b_addr, c_addr])).await;
        let a2 = a.local_addrs[1];
        let mp = MultipathNamespace::discover(a1, SUBNQN, 1, opts(), mp_opts(Duration::from_secs(5)))
            .await
            .unwrap();
        let mut cntlids: Vec<u16> = mp.paths().iter().map(|p| p.cntlid).collect();
        cntlids.sort();
        assert_eq!(cntlids.len(), 3, "A's two ports and C's; B's path left out: {cntlids:?}");
        assert!(cntlids[1] < 100 && cntlids[2] >= 200, "{cntlids:?}");
        io(&mp, 9, 3).await;
        assert!(commands(&mp).iter().all(|&n| n > 0), "round-robin over all: {:?}", commands(&mp));
        mp.shutdown().await.unwrap();

        // Only B's path: its error.
        let r =
            MultipathNamespace::discover(b_addr, SUBNQN, 1, opts(), mp_opts(Duration::from_secs(5))).await;
        assert!(matches!(&r, Err(Error::Auth { reason: AuthError::NoKey, .. })), "{r:?}");
        // Not listed anywhere.
        let r = MultipathNamespace::discover(
            a1,
            "nqn.2024-01.io.nvmeof.test:none",
            1,
            opts(),
            mp_opts(Duration::from_secs(5)),
        )
        .await;
        assert!(matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("lists")), "{r:?}");

        // The asking port only: one path, through the port asked.
        a.reload(&listed("address,svcid", UUID, &file, &[])).unwrap();
        let mp = MultipathNamespace::discover(a2, SUBNQN, 1, opts(), mp_opts(Duration::from_secs(5)))
            .await
            .unwrap();
        assert_eq!(mp.paths().len(), 1);
        assert_eq!(mp.controllers()[0].addr(), a2);
        io(&mp, 2, 9).await;
        mp.shutdown().await.unwrap();
        for s in [a, b, c] {
            s.shutdown(Duration::from_secs(1)).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
}
