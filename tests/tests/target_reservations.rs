//! Reservations (`reservations = true`) between hosts, through the
//! initiator library: registration per host identifier (shared by the
//! controllers of one host), Write Exclusive and Exclusive Access refusing
//! other hosts' I/O with Reservation Conflict, Report, Preempt with its
//! Registration Preempted notification (asynchronous event and log page
//! 80h), Clear, the notification mask, and the statuses nvmet gives a
//! malformed command. A namespace without reservations answers the commands
//! with Invalid Opcode and reports RESCAP 0.

mod initiator_util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use initiator_util::*;
use nvmeof_initiator::common::opcode::IoOpcode;
use nvmeof_initiator::common::spec::features::{FeatureId, GetFeaturesCmd, SetFeaturesCmd};
use nvmeof_initiator::common::spec::log::{GetLogPageCmd, LogPageId};
use nvmeof_initiator::common::spec::reservation::{
    AcquireAction, NotificationType, RegisterAction, ReleaseAction, ReservationCmd, ReservationNotification,
    ReservationType,
};
use nvmeof_initiator::common::Status;
use nvmeof_initiator::{
    ConnectOptions, Controller, ControllerEvent, Error, HostIdentity, IoFlags, Payload, ReconnectPolicy,
};
use nvmeof_target::core::reservation::Reservations;
use nvmeof_target::core::Namespace;
use nvmeof_target::server::Server;
use nvmeof_tests::slow_backend::SlowBackend;

const SIZE: u64 = 1 << 20;
const KEY_A: u64 = 0xAAAA;
const KEY_B: u64 = 0xBBBB;

fn host_opts(id: &[u8; 16]) -> ConnectOptions {
    ConnectOptions { host: Some(HostIdentity::from_id(*id)), io_queues: 1, ..opts() }
}

/// The status of a failed command (without the More bit, which the error
/// log entry sets), or SUCCESS.
fn status_of<T>(r: Result<T, Error>) -> Status {
    match r {
        Ok(_) => Status::SUCCESS,
        Err(Error::Nvme { status, .. }) => status.without_more(),
        Err(e) => panic!("not an NVMe status: {e}"),
    }
}

/// One raw read of log page 80h.
async fn reservation_log(ctrl: &Controller) -> ReservationNotification {
    let mut buf = [0u8; 64];
    ctrl.get_log_page(GetLogPageCmd::new(LogPageId::RESERVATION, 0xFFFF_FFFF, 0, 64), &mut buf)
        .await
        .unwrap();
    ReservationNotification::decode(&buf).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_between_hosts() {
    bounded(60, async {
        let cfg = |on: bool| {
            let ns2 =
                if on { NamespaceConfigExt::with_reservations(ram_ns(2, SIZE)) } else { ram_ns(2, SIZE) };
            config(vec![ram_ns(1, SIZE), ns2])
        };
        let (server, addr) = start(&cfg(true)).await;
        let a = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstA")).await.unwrap();
        // B posts no Asynchronous Event Requests: its log is read below by hand.
        let b_opts = ConnectOptions { async_events: false, ..host_opts(b"reservation-hstB") };
        let b = Controller::connect(addr, SUBNQN, b_opts).await.unwrap();
        // A second controller of host B: another path of the same host.
        let b2 = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstB")).await.unwrap();
        let c = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstC")).await.unwrap();
        let mut a_events = a.events();

        // Identify: ONCS bit 5; RESCAP every type and IEKEY only where enabled.
        assert_ne!(a.identify_controller().await.unwrap().oncs & (1 << 5), 0);
        assert_eq!(a.identify_namespace(1).await.unwrap().rescap, 0);
        assert_eq!(a.identify_namespace(2).await.unwrap().rescap, 0xFE);

        let (a1, a2) = (a.namespace(1).await.unwrap(), a.namespace(2).await.unwrap());
        let (b_ns, b2_ns, c_ns) =
            (b.namespace(2).await.unwrap(), b2.namespace(2).await.unwrap(), c.namespace(2).await.unwrap());
        let block = vec![0x5Au8; BS];
        let mut rbuf = vec![0u8; BS];

        // No reservations on NSID 1: the commands are unknown there.
        let r = a1.reservation_register(RegisterAction::REGISTER, 0, KEY_A, false).await;
        assert_eq!(status_of(r), Status::INVALID_OPCODE.with_dnr());

        a2.reservation_register(RegisterAction::REGISTER, 0, KEY_A, false).await.unwrap();
        b_ns.reservation_register(RegisterAction::REGISTER, 0, KEY_B, false).await.unwrap();
        // Host B is registered through both of its controllers.
        let r = b2_ns.reservation_register(RegisterAction::REGISTER, 0, KEY_A, false).await;
        assert_eq!(status_of(r), Status::RESERVATION_CONFLICT.with_dnr(), "B registered with another key");

        // A takes Write Exclusive: the others may read, not write.
        a2.reservation_acquire(AcquireAction::ACQUIRE, ReservationType::WRITE_EXCLUSIVE, KEY_A, 0)
            .await
            .unwrap();
        a2.write(0, &block).await.unwrap();
        for ns in [&b_ns, &b2_ns, &c_ns] {
            assert_eq!(status_of(ns.write(0, &block).await), Status::RESERVATION_CONFLICT.with_dnr());
            assert_eq!(status_of(ns.flush().await), Status::RESERVATION_CONFLICT.with_dnr());
            ns.read(0, &mut rbuf).await.unwrap();
            assert_eq!(rbuf, block);
        }
        // NSID 1 is not reserved.
        b.namespace(1).await.unwrap().write(0, &block).await.unwrap();

        let report = b_ns.reservation_report().await.unwrap();
        assert_eq!(
            (report.rtype, report.regctl, report.generation),
            (ReservationType::WRITE_EXCLUSIVE, 2, 2)
        );
        let holders: Vec<_> =
            report.registrants.iter().map(|r| (r.hostid, r.rkey, r.holds, r.cntlid)).collect();
        assert_eq!(
            holders,
            vec![(*b"reservation-hstA", KEY_A, true, 0xFFFF), (*b"reservation-hstB", KEY_B, false, 0xFFFF)]
        );

        // A turns it into Exclusive Access (preempting itself): now B cannot read either.
        a2.reservation_acquire(AcquireAction::PREEMPT, ReservationType::EXCLUSIVE_ACCESS, KEY_A, KEY_A)
            .await
            .unwrap();
        assert_eq!(status_of(b_ns.read(0, &mut rbuf).await), Status::RESERVATION_CONFLICT.with_dnr());
        assert_eq!(status_of(c_ns.read(0, &mut rbuf).await), Status::RESERVATION_CONFLICT.with_dnr());
        // Acquiring a reservation someone else holds conflicts.
        let r = b_ns
            .reservation_acquire(AcquireAction::ACQUIRE, ReservationType::EXCLUSIVE_ACCESS, KEY_B, 0)
            .await;
        assert_eq!(status_of(r), Status::RESERVATION_CONFLICT.with_dnr());

        // B preempts A with A's key: B holds it, A is unregistered and told
        // so (asynchronous event, then log page 80h, one entry per read).
        b_ns.reservation_acquire(
            AcquireAction::PREEMPT,
            ReservationType::WRITE_EXCLUSIVE_REG_ONLY,
            KEY_B,
            KEY_A,
        )
        .await
        .unwrap();
        // A's library read the log when the event came (one read per entry).
        let got = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                match a_events.recv().await.unwrap() {
                    ControllerEvent::Reservations(v) => break v,
                    _ => continue,
                }
            }
        })
        .await
        .expect("reservation event");
        let want = ReservationNotification {
            count: 1,
            kind: NotificationType::REGISTRATION_PREEMPTED,
            available: 0,
            nsid: 2,
        };
        assert_eq!(got, vec![want]);
        assert_eq!(a.reservation_log().await.unwrap(), ReservationNotification::default(), "read once");
        // B's other controller holds it as well; A, now unregistered, may not write.
        b2_ns.write(8, &block).await.unwrap();
        assert_eq!(status_of(a2.write(0, &block).await), Status::RESERVATION_CONFLICT.with_dnr());
        let report = c_ns.reservation_report().await.unwrap();
        assert_eq!((report.rtype, report.regctl), (ReservationType::WRITE_EXCLUSIVE_REG_ONLY, 1));

        // Registrants Only: a registrant may write once registered.
        let r = c_ns.write_with(0, &block, IoFlags { fua: true, ..Default::default() }).await;
        assert_eq!(status_of(r), Status::RESERVATION_CONFLICT.with_dnr());
        // As the Linux host's pr_ops register (`nvme_pr_register`): CPTPL
        // 11b (persist through power loss), which nvmet ignores, as here.
        let mut linux_register = ReservationCmd::register(2, RegisterAction::REGISTER, false).to_sqe(0);
        linux_register.set_cdw(10, linux_register.cdw(10) | 3 << 30);
        let keys = nvmeof_initiator::common::spec::ReservationKeys { current: 0, other: 7 }.encode();
        c.io_command(linux_register, Payload::Write(&keys)).await.unwrap();
        c_ns.write(0, &block).await.unwrap();

        // The notification mask (Features 82h) is per namespace.
        let mut set = SetFeaturesCmd::new(FeatureId::RESV_MASK, 1 << 2).to_sqe(0);
        set.set_nsid(2);
        c.admin_command(set, Payload::None).await.unwrap();
        let mut get = GetFeaturesCmd::new(FeatureId::RESV_MASK).to_sqe(0);
        get.set_nsid(2);
        assert_eq!(a.admin_command(get, Payload::None).await.unwrap().dw0(), 1 << 2);
        get.set_nsid(1);
        assert_eq!(status_of(a.admin_command(get, Payload::None).await), Status::INVALID_FIELD.with_dnr());
        let mut bad = SetFeaturesCmd::new(FeatureId::RESV_MASK, 1).to_sqe(0);
        bad.set_nsid(2);
        assert_eq!(status_of(a.admin_command(bad, Payload::None).await), Status::INVALID_FIELD.with_dnr());

        // Malformed commands get nvmet's statuses.
        let mut no_eds = ReservationCmd::report(2, 4096).to_sqe(0);
        no_eds.set_cdw(11, 0);
        let mut buf = vec![0u8; 4096];
        let r = c.io_command(no_eds, Payload::Read(&mut buf)).await;
        assert_eq!(status_of(r), Status::HOST_ID_INCONSIST.with_dnr());
        let mut short = vec![0u8; 32];
        let r = c.io_command(ReservationCmd::report(2, 32).to_sqe(0), Payload::Read(&mut short)).await;
        assert_eq!(status_of(r), Status::INVALID_FIELD.with_dnr());
        let bad_type = ReservationCmd::acquire(2, AcquireAction::ACQUIRE, ReservationType(7)).to_sqe(0);
        let r = c.io_command(bad_type, Payload::Write(&[0u8; 16])).await;
        assert_eq!(status_of(r), Status::INVALID_FIELD.with_dnr());
        let mut short_keys = ReservationCmd::register(2, RegisterAction::REGISTER, false).to_sqe(0);
        short_keys.set_sgl(nvmeof_initiator::common::SglDescriptor::transport(8));
        let r = c.io_command(short_keys, Payload::Write(&[0u8; 8])).await;
        assert_eq!(status_of(r), Status::SGL_INVALID_DATA.with_dnr());
        assert_eq!(IoOpcode::RESV_REPORT.0, 0x0E);

        // Clear (by any registrant with its key) drops everything; the
        // holder B hears its reservation was preempted, and A nothing (not
        // registered any more).
        c_ns.reservation_release(ReleaseAction::CLEAR, ReservationType::NONE, 7).await.unwrap();
        let report = a2.reservation_report().await.unwrap();
        assert_eq!((report.rtype, report.regctl), (ReservationType::NONE, 0));
        // B's log first holds the release from A's type change (nvmet tells
        // the other registrants when a holder preempting itself changes the type).
        let n = reservation_log(&b).await;
        assert_eq!((n.count, n.kind, n.available), (1, NotificationType::RESERVATION_RELEASED, 1));
        let n = reservation_log(&b).await;
        assert_eq!(
            (n.count, n.kind, n.nsid, n.available),
            (2, NotificationType::RESERVATION_PREEMPTED, 2, 0)
        );
        assert_eq!(reservation_log(&a).await.kind, NotificationType::EMPTY);
        a2.write(0, &block).await.unwrap();
        b_ns.read(0, &mut rbuf).await.unwrap();

        // A reload that turns reservations off replaces the namespace: RESCAP
        // 0 and the commands unknown; on again, it starts without registrants.
        a2.reservation_register(RegisterAction::REGISTER, 0, KEY_A, false).await.unwrap();
        server.reload(&cfg(false)).unwrap();
        assert_eq!(a.identify_namespace(2).await.unwrap().rescap, 0);
        let r = a2.reservation_register(RegisterAction::REGISTER, 0, KEY_A, false).await;
        assert_eq!(status_of(r), Status::INVALID_OPCODE.with_dnr());
        server.reload(&cfg(true)).unwrap();
        assert_eq!(a.identify_namespace(2).await.unwrap().rescap, 0xFE);
        assert_eq!(a2.reservation_report().await.unwrap().regctl, 0);

        for ctrl in [a, b, b2, c] {
            ctrl.shutdown().await.unwrap();
        }
        server.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}

/// `reservations = true` on a test namespace.
trait NamespaceConfigExt {
    fn with_reservations(self) -> Self;
}

impl NamespaceConfigExt for nvmeof_target::config::NamespaceConfig {
    fn with_reservations(self) -> Self {
        Self { reservations: true, ..self }
    }
}

/// Register, Acquire and Release are not resubmitted after a lost
/// connection, as the Linux host does not retry them: they fail with
/// `ConnectionLost` (a read outstanding with them is resubmitted and
/// completes), and the report says what the target holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reservation_commands_are_not_resubmitted_after_a_lost_connection() {
    bounded(30, async {
        let (server, addr) =
            start(&config(vec![NamespaceConfigExt::with_reservations(ram_ns(1, SIZE))])).await;
        let proxy = Proxy::start(addr).await;
        let o = ConnectOptions { kato: Duration::from_secs(2), ..host_opts(b"reservation-hstR") };
        assert!(o.reconnect.requeue, "other commands are resubmitted");
        let ctrl = Controller::connect(proxy.addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        ns.reservation_register(RegisterAction::REGISTER, 0, 1, false).await.unwrap();

        proxy.freeze(true);
        let since = proxy.bytes_from_host();
        let (n1, n2) = (ns.clone(), ns.clone());
        let replace =
            tokio::spawn(async move { n1.reservation_register(RegisterAction::REPLACE, 1, 2, false).await });
        let read = tokio::spawn(async move {
            let mut b = vec![0u8; BS];
            n2.read(0, &mut b).await
        });
        // Both held by the proxy: two command capsules, 72 bytes each (the
        // Register's 16 bytes of data come on top, in capsule or after R2T).
        proxy.wait_from_host(since, 2 * 72).await;
        // Cut first: nothing held by the frozen proxy gets through.
        proxy.kill_all();
        tokio::time::sleep(Duration::from_millis(20)).await;
        proxy.freeze(false);
        match replace.await.unwrap() {
            Err(Error::ConnectionLost) => {}
            other => panic!("expected ConnectionLost, got {other:?}"),
        }
        read.await.unwrap().expect("the read is resubmitted");
        wait_state(&ctrl, nvmeof_initiator::ControllerState::Live, Duration::from_secs(10)).await;
        let report = ns.reservation_report().await.unwrap();
        assert_eq!((report.regctl, report.registrants[0].rkey), (1, 1), "the Replace never arrived");
        ns.reservation_register(RegisterAction::REPLACE, 1, 2, false).await.unwrap();
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// With a reservations file, reservations persist through power loss once a
/// host asks (Register with CPTPL 11b, as the Linux host's `pr_ops`):
/// RESCAP bit 0, Report PTPLS, Features 83h, and after a target restart the
/// registrations and the reservation are back and enforced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_persist_through_a_restart() {
    bounded(60, async {
        let file = std::env::temp_dir().join(format!("nvmeof-ptpl-{}.resv", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let mut cfg = config(vec![nvmeof_target::config::NamespaceConfig {
            reservations: true,
            reservations_file: Some(file.clone()),
            hosts: None,
            qos: Default::default(),
            ..ram_ns(1, SIZE)
        }]);
        let (server, addr) = start(&cfg).await;
        let a = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstA")).await.unwrap();
        assert_eq!(a.identify_namespace(1).await.unwrap().rescap, 0xFF, "PTPL supported");
        let ns = a.namespace(1).await.unwrap();
        let mut register = ReservationCmd::register(1, RegisterAction::REGISTER, false).to_sqe(0);
        register.set_cdw(10, register.cdw(10) | 3 << 30);
        let keys = nvmeof_initiator::common::spec::ReservationKeys { current: 0, other: 0x77 }.encode();
        a.io_command(register, Payload::Write(&keys)).await.unwrap();
        ns.reservation_acquire(AcquireAction::ACQUIRE, ReservationType::EXCLUSIVE_ACCESS, 0x77, 0)
            .await
            .unwrap();
        let before = ns.reservation_report().await.unwrap();
        assert!(before.ptpls);
        let mut get = GetFeaturesCmd::new(FeatureId::RESV_PERSIST).to_sqe(0);
        get.set_nsid(1);
        assert_eq!(a.admin_command(get, Payload::None).await.unwrap().dw0(), 1);
        a.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(2)).await;

        // The same port again: the state is back, and another host is refused.
        cfg.listen = vec![addr];
        let server = restart(&cfg).await;
        let a = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstA")).await.unwrap();
        let c = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstC")).await.unwrap();
        assert_eq!(a.namespace(1).await.unwrap().reservation_report().await.unwrap(), before);
        let mut buf = vec![0u8; BS];
        let r = c.namespace(1).await.unwrap().read(0, &mut buf).await;
        assert_eq!(status_of(r), Status::RESERVATION_CONFLICT.with_dnr());
        // Set Features 83h off: a restart after it starts empty.
        let mut set = SetFeaturesCmd::new(FeatureId::RESV_PERSIST, 0).to_sqe(0);
        set.set_nsid(1);
        a.admin_command(set, Payload::None).await.unwrap();
        assert!(!a.namespace(1).await.unwrap().reservation_report().await.unwrap().ptpls);
        for ctrl in [a, c] {
            ctrl.shutdown().await.unwrap();
        }
        server.shutdown(Duration::from_secs(2)).await;
        let server = restart(&cfg).await;
        let a = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstA")).await.unwrap();
        assert_eq!(a.namespace(1).await.unwrap().reservation_report().await.unwrap().regctl, 0);
        a.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(2)).await;
        std::fs::remove_file(&file).unwrap();
    })
    .await;
}

/// Every operation of the slow namespace stays this long in its backend.
const SLOW_DELAY: Duration = Duration::from_millis(1500);

/// A target with RAM namespace 1 and namespace 2 on a [`SlowBackend`] with
/// reservations; the backend, to watch what reaches it.
async fn slow_reserved_target() -> (Server, std::net::SocketAddr, Arc<SlowBackend>) {
    let (server, addr) = start(&config(vec![ram_ns(1, SIZE)])).await;
    let slow = Arc::new(SlowBackend::new(SIZE, BS as u32, SLOW_DELAY));
    let mut ns = Namespace::new(SUBNQN, 2, slow.clone());
    ns.reservations = Some(Reservations::new());
    server.target.subsystem(SUBNQN).unwrap().add_namespace(Arc::new(ns));
    (server, addr, slow)
}

/// Waits (at most 5 s) until the backend has had more than `n` operations.
async fn wait_submitted(slow: &SlowBackend, n: usize) {
    let t0 = Instant::now();
    while slow.submitted() <= n {
        assert!(t0.elapsed() < Duration::from_secs(5), "the command never reached the backend");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Preempt and Abort completes only once the preempted host's commands that
/// had passed their reservation check have completed (nvmet
/// `nvmet_pr_do_abort`): a host fencing another off can rely on none of its
/// writes landing afterwards. Meanwhile the preempted host's new commands
/// fail with Internal Error (no DNR, so a host retries them); afterwards
/// they meet the new reservation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempt_and_abort_waits_for_the_preempted_hosts_commands() {
    bounded(60, async {
        let (server, addr, slow) = slow_reserved_target().await;

        let a = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstA")).await.unwrap();
        let b = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstB")).await.unwrap();
        let (a_ns, b_ns) = (a.namespace(2).await.unwrap(), b.namespace(2).await.unwrap());
        a_ns.reservation_register(RegisterAction::REGISTER, 0, KEY_A, false).await.unwrap();
        b_ns.reservation_register(RegisterAction::REGISTER, 0, KEY_B, false).await.unwrap();
        a_ns.reservation_acquire(AcquireAction::ACQUIRE, ReservationType::WRITE_EXCLUSIVE, KEY_A, 0)
            .await
            .unwrap();

        // A's write reaches the backend (and stays there for SLOW_DELAY).
        let wn = a_ns.clone();
        let started = Instant::now();
        let write = tokio::spawn(async move { wn.write(0, &[0xA5u8; BS]).await });
        wait_submitted(&slow, 0).await;
        // B preempts A and aborts its commands.
        let pn = b_ns.clone();
        let preempt = tokio::spawn(async move {
            pn.reservation_acquire(
                AcquireAction::PREEMPT_AND_ABORT,
                ReservationType::WRITE_EXCLUSIVE,
                KEY_B,
                KEY_A,
            )
            .await
            .map(|_| Instant::now())
        });
        // The state changed at once (B holds it, A is gone) ...
        let t0 = Instant::now();
        loop {
            let rep = b_ns.reservation_report().await.unwrap();
            if rep.regctl == 1 {
                assert_eq!(rep.registrants[0].hostid, *b"reservation-hstB");
                assert!(rep.registrants[0].holds);
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "the preemption never happened: {rep:?}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // ... but the command waits for A's write, and A's new commands fail meanwhile.
        let mut rbuf = vec![0u8; BS];
        let r = a_ns.read(0, &mut rbuf).await;
        assert!(!preempt.is_finished(), "Preempt and Abort completed with A's write still in the backend");
        assert_eq!(status_of(r), Status::INTERNAL, "A's read while the abort waits");
        write.await.unwrap().expect("A's write had passed its reservation check: it completes");
        // The write left the backend SLOW_DELAY after it was submitted, which was
        // after `started`. (Which of the two responses reaches its host first
        // is up to the two connections.)
        let preempt_done = preempt.await.unwrap().unwrap();
        assert!(
            preempt_done - started >= SLOW_DELAY,
            "Preempt and Abort completed {:?} after the write was sent, before it could finish ({SLOW_DELAY:?})",
            preempt_done - started
        );
        // Afterwards A meets B's Write Exclusive: reads run, writes conflict.
        a_ns.read(0, &mut rbuf).await.unwrap();
        assert_eq!(rbuf, vec![0xA5u8; BS]);
        assert_eq!(status_of(a_ns.write(0, &[1u8; BS]).await), Status::RESERVATION_CONFLICT.with_dnr());

        // A plain Preempt does not wait, and fences nothing.
        a_ns.reservation_register(RegisterAction::REGISTER, 0, KEY_A, false).await.unwrap();
        b_ns.reservation_release(ReleaseAction::RELEASE, ReservationType::WRITE_EXCLUSIVE, KEY_B)
            .await
            .unwrap();
        let before = slow.submitted();
        let rn = a_ns.clone();
        let read = tokio::spawn(async move {
            let mut b = vec![0u8; BS];
            rn.read(0, &mut b).await.map(|_| Instant::now())
        });
        wait_submitted(&slow, before).await;
        b_ns.reservation_acquire(AcquireAction::PREEMPT, ReservationType::EXCLUSIVE_ACCESS, KEY_B, KEY_A)
            .await
            .unwrap();
        assert!(!read.is_finished(), "the plain Preempt waited for A's read");
        read.await.unwrap().expect("A's read had passed its check");
        a.shutdown().await.unwrap();
        b.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// A preempted host whose connection ends while its write is still in the
/// backend: the write can still land, so Preempt and Abort waits for it all
/// the same (the closing queue keeps it counted until it completes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preempt_and_abort_waits_for_a_closed_connections_commands() {
    bounded(60, async {
        let (server, addr, slow) = slow_reserved_target().await;

        let proxy = Proxy::start(addr).await;
        // A never reconnects: its write is not resubmitted.
        let reconnect = ReconnectPolicy { ctrl_loss_timeout: Some(Duration::ZERO), ..Default::default() };
        let a = Controller::connect(
            proxy.addr,
            SUBNQN,
            ConnectOptions { reconnect, ..host_opts(b"reservation-hstA") },
        )
        .await
        .unwrap();
        let b = Controller::connect(addr, SUBNQN, host_opts(b"reservation-hstB")).await.unwrap();
        let (a_ns, b_ns) = (a.namespace(2).await.unwrap(), b.namespace(2).await.unwrap());
        a_ns.reservation_register(RegisterAction::REGISTER, 0, KEY_A, false).await.unwrap();
        b_ns.reservation_register(RegisterAction::REGISTER, 0, KEY_B, false).await.unwrap();

        let wn = a_ns.clone();
        let started = Instant::now();
        let write = tokio::spawn(async move { wn.write(0, &[0xA5u8; BS]).await });
        wait_submitted(&slow, 0).await;
        // A's connections end with the write in the backend.
        proxy.kill_all();
        assert!(write.await.unwrap().is_err(), "A's connection was cut");
        b_ns.reservation_acquire(
            AcquireAction::PREEMPT_AND_ABORT,
            ReservationType::WRITE_EXCLUSIVE,
            KEY_B,
            KEY_A,
        )
        .await
        .unwrap();
        // The write finishes SLOW_DELAY after it was submitted, which was after `started`.
        assert!(
            started.elapsed() >= SLOW_DELAY,
            "Preempt and Abort completed {:?} after the write was sent, before it could finish ({SLOW_DELAY:?})",
            started.elapsed()
        );
        let rep = b_ns.reservation_report().await.unwrap();
        assert_eq!((rep.regctl, rep.registrants[0].hostid), (1, *b"reservation-hstB"));
        drop(a);
        b.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}
