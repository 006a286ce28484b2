//! DH-HMAC-CHAP through the initiator against our target: a host with keys
//! authenticates the admin queue and every I/O queue after Connect (the
//! target refuses every other command until then, 01h/91h), unidirectional
//! with the NULL group and bidirectional with FFDHE; wrong secrets and a
//! missing one fail the connect at once with [`Error::Auth`]; a reconnect
//! authenticates again, and an authentication failure there loses the
//! controller instead of retrying until the loss timeout.

mod initiator_util;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use initiator_util::*;
use nvmeof_initiator::common::auth::{DhGroup, DhchapSecret, FailureReason, HashId};
use nvmeof_initiator::common::opcode::IoOpcode;
use nvmeof_initiator::common::Sqe;
use nvmeof_initiator::{
    AuthError, ConnectOptions, Controller, ControllerState, Error, Payload, ReconnectPolicy,
};
use nvmeof_target::config::{HostKeys, TargetConfig};

/// A secret of 32 `byte`s, transformed with `transform` before use, through
/// its `DHHC-1` text as `nvme connect --dhchap-secret` takes it.
fn secret(byte: u8, transform: HashId) -> DhchapSecret {
    let s = DhchapSecret::new(vec![byte; 32], transform).unwrap();
    s.to_string().parse().unwrap()
}

/// [`config`] with one RAM namespace, allowing only [`host`], with `keys`.
fn auth_config(keys: Option<HostKeys>) -> TargetConfig {
    let mut cfg = config(vec![ram_ns(1, 4 << 20)]);
    let s = &mut cfg.subsystems[0];
    s.allowed_hosts = Some(vec![host().nqn]);
    s.host_keys = keys.into_iter().map(|k| (host().nqn, k)).collect::<BTreeMap<_, _>>();
    cfg
}

fn with_secrets(
    o: ConnectOptions,
    key: Option<DhchapSecret>,
    ctrl_key: Option<DhchapSecret>,
) -> ConnectOptions {
    ConnectOptions { dhchap_secret: key, dhchap_ctrl_secret: ctrl_key, ..o }
}

/// Admin and I/O commands on every queue: a Flush on each I/O queue by
/// number (the target fails any of them with Authentication Required on a
/// queue that has not authenticated), then data written and read back.
async fn io_on_every_queue(ctrl: &Controller, seed: u8) {
    ctrl.identify_controller().await.expect("admin command after authentication");
    let n = ctrl.io_queue_count() as u16;
    assert_eq!(n, 4);
    for qid in 1..=n {
        let mut flush = Sqe::new(IoOpcode::FLUSH.0);
        flush.set_nsid(1);
        ctrl.io_command_on(qid, flush, Payload::None)
            .await
            .unwrap_or_else(|e| panic!("flush on I/O queue {qid}: {e}"));
    }
    let ns = ctrl.namespace(1).await.unwrap();
    // Round robin: 8 single-command writes and reads use each queue twice.
    for lba in 0..8u64 {
        let data = vec![seed.wrapping_add(lba as u8); BS];
        ns.write(lba, &data).await.unwrap_or_else(|e| panic!("write {lba}: {e}"));
        let mut back = vec![0u8; BS];
        ns.read(lba, &mut back).await.unwrap_or_else(|e| panic!("read {lba}: {e}"));
        assert_eq!(back, data, "block {lba}");
    }
}

/// Connects with `o`, expecting a failure within 3 s (no retries).
async fn connect_fails(addr: std::net::SocketAddr, o: ConnectOptions) -> Error {
    let t0 = Instant::now();
    let r = Controller::connect(addr, SUBNQN, o).await;
    let took = t0.elapsed();
    let e = r.expect_err("connect must fail");
    assert!(took < Duration::from_secs(3), "failing took {took:?}: {e}");
    assert!(e.is_permanent(), "{e}");
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn null_group_unidirectional_authenticates_every_queue() {
    bounded(30, async {
        let key = secret(0x11, HashId(0));
        let (server, addr) = start(&auth_config(Some(HostKeys::new(key.clone())))).await;
        let ctrl = Controller::connect(addr, SUBNQN, with_secrets(opts(), Some(key), None)).await.unwrap();
        assert_eq!(ctrl.state(), ControllerState::Live);
        io_on_every_queue(&ctrl, 1).await;
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ffdhe2048_bidirectional_with_sha384() {
    bounded(60, async {
        // Transformed keys: the host key with the host NQN, the controller
        // key with the subsystem NQN, by different hashes.
        let key = secret(0x21, HashId::SHA256);
        let ctrl_key = secret(0x22, HashId::SHA512);
        let keys = HostKeys {
            key: key.clone(),
            ctrl_key: Some(ctrl_key.clone()),
            hash: HashId::SHA384,
            dhgroup: DhGroup::FFDHE2048,
        };
        let (server, addr) = start(&auth_config(Some(keys))).await;
        let ctrl =
            Controller::connect(addr, SUBNQN, with_secrets(opts(), Some(key), Some(ctrl_key))).await.unwrap();
        io_on_every_queue(&ctrl, 2).await;
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_host_secret_is_refused_at_once() {
    bounded(30, async {
        let (server, addr) = start(&auth_config(Some(HostKeys::new(secret(0x31, HashId(0)))))).await;
        // A reconnect policy that would retry for a long time: nothing retries.
        let o = ConnectOptions {
            reconnect: ReconnectPolicy {
                ctrl_loss_timeout: Some(Duration::from_secs(60)),
                ..opts().reconnect
            },
            ..with_secrets(opts(), Some(secret(0x32, HashId(0))), None)
        };
        match connect_fails(addr, o).await {
            // The target answers the reply with AUTH_Failure1 (failed).
            Error::Auth { qid: 0, reason: AuthError::Refused(FailureReason::FAILED) } => {}
            e => panic!("expected a refusal on the admin queue, got {e:?}"),
        }
        // The same host with the right key still gets in.
        let ctrl =
            Controller::connect(addr, SUBNQN, with_secrets(opts(), Some(secret(0x31, HashId(0))), None))
                .await
                .unwrap();
        io_on_every_queue(&ctrl, 3).await;
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrong_controller_secret_is_refused_by_the_host() {
    bounded(30, async {
        let key = secret(0x41, HashId(0));
        let keys = HostKeys { ctrl_key: Some(secret(0x42, HashId(0))), ..HostKeys::new(key.clone()) };
        let (server, addr) = start(&auth_config(Some(keys))).await;
        let o = with_secrets(opts(), Some(key), Some(secret(0x43, HashId(0))));
        let e = connect_fails(addr, o).await;
        assert!(matches!(e, Error::Auth { qid: 0, reason: AuthError::ControllerMismatch }), "{e:?}");
        assert!(e.to_string().contains("dhchap_ctrl_secret"), "{e}");
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn missing_secret_fails_with_a_clear_error() {
    bounded(30, async {
        let (server, addr) = start(&auth_config(Some(HostKeys::new(secret(0x51, HashId(0)))))).await;
        let e = connect_fails(addr, opts()).await;
        assert!(matches!(e, Error::Auth { qid: 0, reason: AuthError::NoKey }), "{e:?}");
        let text = e.to_string();
        assert!(text.contains("qid 0") && text.contains("no key"), "{text}");
        // A controller key alone is a caller's mistake, refused before connecting.
        let o = with_secrets(opts(), None, Some(secret(0x52, HashId(0))));
        let r = Controller::connect(addr, SUBNQN, o).await;
        assert!(matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("dhchap_secret")), "{r:?}");
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// A secret for a controller that does not ask for authentication is not
/// used (Linux connects the same way).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secret_without_authentication_required_connects_as_usual() {
    bounded(30, async {
        let (server, addr) = start(&auth_config(None)).await;
        let o = with_secrets(opts(), Some(secret(0x61, HashId(0))), Some(secret(0x62, HashId(0))));
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        io_on_every_queue(&ctrl, 6).await;
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconnect_authenticates_every_queue_again() {
    bounded(60, async {
        let key = secret(0x71, HashId::SHA384);
        let ctrl_key = secret(0x72, HashId(0));
        let keys = HostKeys {
            key: key.clone(),
            ctrl_key: Some(ctrl_key.clone()),
            hash: HashId::SHA512,
            dhgroup: DhGroup::FFDHE3072,
        };
        let (server, addr) = start(&auth_config(Some(keys))).await;
        let proxy = Proxy::start(addr).await;
        let ctrl = Controller::connect(proxy.addr, SUBNQN, with_secrets(opts(), Some(key), Some(ctrl_key)))
            .await
            .unwrap();
        io_on_every_queue(&ctrl, 7).await;
        let first = proxy.accepted.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(first, 5, "admin and 4 I/O connections");
        let mut states = ctrl.subscribe_state();
        proxy.kill_all();
        tokio::time::timeout(
            Duration::from_secs(5),
            states.wait_for(|s| *s == ControllerState::Reconnecting),
        )
        .await
        .expect("the cut is noticed")
        .unwrap();
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(10)).await;
        assert!(proxy.accepted.load(std::sync::atomic::Ordering::SeqCst) >= first + 5, "a new association");
        // Every queue of the new association authenticated, or the target would refuse.
        io_on_every_queue(&ctrl, 8).await;
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// After a restart the target holds another key for the host: the reconnect
/// attempt is refused and the controller is lost at once, not retried until
/// the controller-loss timeout (Linux `nvmf_should_reconnect` stops on
/// `-EKEYREJECTED`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_reconnect_loses_the_controller_at_once() {
    bounded(60, async {
        let key = secret(0x81, HashId(0));
        let mut cfg = auth_config(Some(HostKeys::new(key.clone())));
        let (server, addr) = start(&cfg).await;
        let o = ConnectOptions {
            reconnect: ReconnectPolicy {
                delay: Duration::from_millis(100),
                max_delay: Duration::from_millis(100),
                ctrl_loss_timeout: Some(Duration::from_secs(60)),
                requeue: true,
                fast_io_fail_timeout: None,
            },
            ..with_secrets(opts(), Some(key), None)
        };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        io_on_every_queue(&ctrl, 9).await;
        server.shutdown(Duration::from_secs(1)).await;
        wait_state(&ctrl, ControllerState::Reconnecting, Duration::from_secs(5)).await;
        cfg.listen = vec![addr];
        cfg.subsystems[0].host_keys = [(host().nqn, HostKeys::new(secret(0x82, HashId(0))))].into();
        let server2 = restart(&cfg).await;
        let t0 = Instant::now();
        wait_state(&ctrl, ControllerState::Failed, Duration::from_secs(5)).await;
        assert!(t0.elapsed() < Duration::from_secs(3), "lost after {:?}", t0.elapsed());
        let mut buf = vec![0u8; BS];
        let ns_read = ctrl.io_command_on(1, read_sqe(), Payload::Read(&mut buf)).await;
        match ns_read {
            Err(Error::ControllerLost(why)) => assert!(why.contains("authentication"), "{why}"),
            other => panic!("expected ControllerLost, got {other:?}"),
        }
        server2.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Read of block 0 of namespace 1.
fn read_sqe() -> Sqe {
    let mut sqe = Sqe::new(IoOpcode::READ.0);
    sqe.set_nsid(1);
    sqe
}

/// Key rotation without losing the controller: the target's reload swaps the
/// host's key; the application gives the controller the new secret and
/// re-authenticates every queue of the live association (as writing Linux's
/// sysfs `dhchap_secret`); the next reconnect uses it too. Re-authenticating
/// with the old secret after the rotation is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_rotate_with_reauthentication_and_reconnect() {
    bounded(60, async {
        let (k1, k2) = (secret(0x91, HashId::SHA256), secret(0x92, HashId::SHA384));
        let keys = |k: &DhchapSecret| HostKeys { dhgroup: DhGroup::FFDHE2048, ..HostKeys::new(k.clone()) };
        let (server, addr) = start(&auth_config(Some(keys(&k1)))).await;
        let proxy = Proxy::start(addr).await;
        let ctrl = Controller::connect(proxy.addr, SUBNQN, with_secrets(opts(), Some(k1.clone()), None))
            .await
            .unwrap();
        let a = ctrl.info().authentication.expect("the target asked for authentication");
        assert_eq!((a.hash, a.dhgroup, a.bidirectional), (HashId::SHA256, DhGroup::FFDHE2048, false));
        assert_eq!(ctrl.reauthenticate().await.unwrap(), a, "the same secret again");
        io_on_every_queue(&ctrl, 9).await;

        server.reload(&auth_config(Some(keys(&k2)))).unwrap();
        ctrl.set_dhchap_secrets(Some(k2.clone()), None).unwrap();
        ctrl.reauthenticate().await.expect("re-authentication with the rotated secret");
        io_on_every_queue(&ctrl, 10).await;
        // The next association authenticates with it as well.
        proxy.kill_all();
        wait_state(&ctrl, ControllerState::Reconnecting, Duration::from_secs(5)).await;
        wait_state(&ctrl, ControllerState::Live, Duration::from_secs(10)).await;
        io_on_every_queue(&ctrl, 11).await;

        // A secret without the host key is refused; the old key no longer works.
        assert!(matches!(ctrl.set_dhchap_secrets(None, Some(k1.clone())), Err(Error::InvalidArgument(_))));
        ctrl.set_dhchap_secrets(Some(k1), None).unwrap();
        // The target answers AUTH_Failure1 and tears the association down; the
        // I/O queues' closing may reach the initiator first, whose reconnect
        // then cuts the admin queue before it reads the answer: a refusal or
        // a lost connection. Either way the reconnect with this secret is
        // refused, and the controller is lost for good (not retried).
        match ctrl.reauthenticate().await {
            Err(Error::Auth { qid: 0, reason: AuthError::Refused(FailureReason::FAILED) })
            | Err(Error::ConnectionLost) => {}
            r => panic!("re-authentication with the old secret: {r:?}"),
        }
        wait_state(&ctrl, ControllerState::Failed, Duration::from_secs(5)).await;
        ctrl.shutdown().await.ok();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// Without authentication there is nothing to redo.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reauthentication_needs_a_controller_that_asked_for_it() {
    bounded(30, async {
        let (server, addr) = start(&auth_config(None)).await;
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        assert!(ctrl.info().authentication.is_none());
        assert!(matches!(ctrl.reauthenticate().await, Err(Error::InvalidArgument(_))));
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}
