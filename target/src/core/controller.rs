//! Controllers: created by an admin-queue Connect, owning CC/CSTS, features,
//! keep-alive and asynchronous events (nvmet `core.c`).

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nvmeof_common::spec::features::AsyncEvent;
use nvmeof_common::spec::log::ErrorLogEntry;
use nvmeof_common::spec::property::{Cc, Csts};
use nvmeof_common::spec::reservation::{NotificationType, ReservationNotification};
use nvmeof_common::Status;
use tokio::sync::watch;

use super::{ErrorLog, Namespace, Subsystem};
use crate::backend::{CompletionSink, IoCompletion};

/// Most outstanding Asynchronous Event Requests (nvmet AERL 3 → 4).
pub const MAX_AERS: usize = 4;
/// Changed Namespace List capacity before it reports overflow (0xFFFFFFFF).
const MAX_CHANGED_NS: usize = 1024;
/// AEC bit 8: Namespace Attribute Notices.
pub const AEC_NS_ATTR: u32 = 1 << 8;
/// AEC bit 11: Asymmetric Namespace Access Change Notices.
pub const AEC_ANA_CHANGE: u32 = 1 << 11;
/// AEC bit 31: Discovery Log Page Change Notices.
pub const AEC_DISC_CHANGE: u32 = 1 << 31;
/// Reservation notifications kept per controller until read (nvmet
/// `NVMET_PR_LOG_QUEUE_SIZE`); later ones are counted as lost.
pub const RESV_LOG_QUEUE: usize = 64;

/// Reservation Notification log (LID 80h) of one controller, after nvmet's
/// `nvmet_pr_log_mgr`: a queue read one entry at a time, with a count
/// that moves per notification (lost ones included) and skips 0.
#[derive(Default)]
struct ResvLog {
    queue: VecDeque<ReservationNotification>,
    counter: u64,
}

/// Controller register state.
#[derive(Clone, Copy, Debug, Default)]
pub struct Regs {
    /// Controller Configuration.
    pub cc: u32,
    /// Controller Status.
    pub csts: u32,
}

#[derive(Default)]
struct AenState {
    outstanding: Vec<(CompletionSink, u32)>,
    pending: VecDeque<u32>,
    changed_ns: Vec<u32>,
    changed_overflow: bool,
    /// Notices masked, by AEC bit: one is masked once reported, until its log
    /// is read with RAE=0 (nvmet's per-event `aen_masked` bits).
    masked: u32,
}

/// Why a controller was torn down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Teardown {
    /// Still alive.
    Alive,
    /// Admin queue closed or host shut it down.
    Closed,
    /// Keep-alive timer expired.
    KeepAliveExpired,
    /// Deleted by the target (nvmet's `delete_ctrl`): its subsystem was
    /// removed, or a setting its host reads only when it connects changed.
    Deleted,
}

/// A controller (one association of a host with a subsystem).
pub struct Controller {
    /// Controller ID.
    pub cntlid: u16,
    /// Subsystem.
    pub subsys: Arc<Subsystem>,
    /// Host NQN from Connect.
    pub hostnqn: String,
    /// Host ID from Connect.
    pub hostid: [u8; 16],
    /// Port the admin queue came in on.
    pub port_id: u16,
    /// That port's own queue limits, from the admin queue's connection: the
    /// controller's IOCCSZ, CAP.MQES and MAXCMD, and what its I/O queues may ask.
    pub port_params: super::PortParams,
    /// Where the admin queue's connection came from (nvmet's debugfs
    /// `host_traddr`), where known.
    pub host_addr: Option<std::net::SocketAddr>,
    /// Highest I/O queue ID allowed.
    pub max_qid: u16,
    /// The host's DH-HMAC-CHAP keys when it must authenticate on every
    /// queue: fixed at admin Connect, refreshed by a re-authentication of the
    /// admin queue ([`Self::refresh_host_keys`]).
    host_keys: Mutex<Option<Arc<crate::config::HostKeys>>>,
    regs: Mutex<Regs>,
    /// CC.EN && CSTS.RDY, kept beside `regs` by [`Self::set_cc`]: every I/O
    /// command checks it, and a load keeps the line shared between the
    /// queues' cores where the registers' mutex would bounce it.
    ready: AtomicBool,
    kato_ms: AtomicU32,
    epoch: Instant,
    /// When the keep-alive timer was last restarted, in ms since `epoch`.
    last_activity_ms: AtomicU64,
    /// A command arrived since the timer last looked (nvmet's `reset_tbkas`).
    activity: AtomicBool,
    aec: AtomicU32,
    aen: Mutex<AenState>,
    resv_log: Mutex<ResvLog>,
    io_qids: Mutex<BTreeSet<u16>>,
    /// Error Information log; locked only when a command fails.
    errors: Mutex<ErrorLog>,
    teardown: watch::Sender<Teardown>,
}

impl Controller {
    /// A new controller; the keep-alive timer starts now (nvmet starts it at admin Connect).
    /// An I/O controller starts with Namespace Attribute Notices and ANA
    /// Change Notices enabled, as nvmet_alloc_ctrl sets `aen_enabled =
    /// NVMET_AEN_CFG_OPTIONAL`; a discovery controller with none,
    /// since it accepts only Discovery Log Page Change Notices.
    pub fn new(
        cntlid: u16,
        subsys: Arc<Subsystem>,
        hostnqn: String,
        hostid: [u8; 16],
        port_id: u16,
        kato_ms: u32,
        max_qid: u16,
    ) -> Self {
        let aec = if subsys.discovery { 0 } else { AEC_NS_ATTR | AEC_ANA_CHANGE };
        Self {
            cntlid,
            subsys,
            hostnqn,
            hostid,
            port_id,
            port_params: super::PortParams::default(),
            host_addr: None,
            max_qid,
            host_keys: Mutex::new(None),
            regs: Mutex::new(Regs::default()),
            ready: AtomicBool::new(false),
            kato_ms: AtomicU32::new(kato_ms),
            epoch: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
            activity: AtomicBool::new(false),
            aec: AtomicU32::new(aec),
            aen: Mutex::new(AenState::default()),
            resv_log: Mutex::new(ResvLog::default()),
            io_qids: Mutex::new(BTreeSet::new()),
            errors: Mutex::new(ErrorLog::default()),
            teardown: watch::channel(Teardown::Alive).0,
        }
    }

    /// With the address the host connected from.
    pub fn with_host_addr(mut self, addr: Option<std::net::SocketAddr>) -> Self {
        self.host_addr = addr;
        self
    }

    /// With the queue limits of the port its admin queue came in on.
    pub fn with_port_params(mut self, params: super::PortParams) -> Self {
        self.port_params = params;
        self
    }

    /// With the host's DH-HMAC-CHAP keys (the host must authenticate).
    pub fn with_host_keys(self, keys: Option<Arc<crate::config::HostKeys>>) -> Self {
        *self.host_keys.lock().unwrap() = keys;
        self
    }

    /// The host's DH-HMAC-CHAP keys, if it must authenticate.
    pub fn host_keys(&self) -> Option<Arc<crate::config::HostKeys>> {
        self.host_keys.lock().unwrap().clone()
    }

    /// Takes the subsystem's current keys for this host, as nvmet's
    /// `nvmet_setup_auth` does when the admin queue negotiates again: a key
    /// rotated by a reload then applies to this association's
    /// re-authentications. A host whose keys were removed keeps the ones it
    /// had (nvmet keeps `host_key` then too).
    pub fn refresh_host_keys(&self) {
        if let Some(k) = self.subsys.host_keys(&self.hostnqn) {
            *self.host_keys.lock().unwrap() = Some(k);
        }
    }

    /// Whether this is a discovery controller.
    pub fn is_discovery(&self) -> bool {
        self.subsys.discovery
    }

    /// Current registers.
    pub fn regs(&self) -> Regs {
        *self.regs.lock().unwrap()
    }

    /// Whether CC.EN and CSTS.RDY are set (I/O and most admin commands allowed).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Property Set CC, following nvmet `nvmet_update_cc`: EN 0→1 validates
    /// MPS/AMS/CSS (and IOSQES/IOCQES for I/O controllers) and sets CSTS to
    /// RDY or CFS alone (`nvmet_start_ctrl` assigns it, so an earlier SHST or
    /// CFS goes); EN 1→0 clears RDY and CC (`nvmet_clear_ctrl`); SHN set
    /// completes shutdown at once, after the same reset of RDY and CC, so CC
    /// reads 0 afterwards and the next write of EN = 1 is an enable again.
    pub fn set_cc(&self, new: u32) {
        let mut r = self.regs.lock().unwrap();
        let old = Cc(r.cc);
        let cc = Cc(new);
        r.cc = new;
        let mut csts = Csts(r.csts);
        if cc.en() && !old.en() {
            let css_ok = matches!(cc.css(), Cc::CSS_NVM | Cc::CSS_CSI);
            let qes_ok = self.is_discovery() || (cc.iosqes() == 6 && cc.iocqes() == 4);
            if cc.mps() != 0 || cc.ams() != 0 || !css_ok || !qes_ok {
                csts = Csts(0).with_cfs(true);
            } else {
                csts = Csts(0).with_rdy(true);
                self.touch();
            }
        }
        if !cc.en() && old.en() {
            // Controller reset (nvmet_clear_ctrl): RDY and the register.
            csts = csts.with_rdy(false);
            r.cc = 0;
        }
        if cc.shn() != Cc::SHN_NONE && old.shn() == Cc::SHN_NONE {
            // nvmet_clear_ctrl, then SHST complete.
            csts = csts.with_rdy(false).with_shst(Csts::SHST_COMPLETE);
            r.cc = 0;
        }
        if cc.shn() == Cc::SHN_NONE && old.shn() != Cc::SHN_NONE {
            csts = csts.with_shst(Csts::SHST_NORMAL);
        }
        r.csts = csts.0;
        self.ready.store(Cc(r.cc).en() && csts.rdy(), Ordering::Release);
    }

    /// KATO in milliseconds (0 = disabled).
    pub fn kato_ms(&self) -> u32 {
        self.kato_ms.load(Ordering::Relaxed)
    }

    /// Sets KATO (Set Features 0Fh).
    pub fn set_kato_ms(&self, ms: u32) {
        self.kato_ms.store(ms, Ordering::Relaxed);
        self.touch();
    }

    /// Notes a command for the keep-alive timer (Keep Alive command, or any
    /// command: TBKAS). The timer restarts when it next looks
    /// ([`Self::keep_alive_remaining`]), as nvmet's `reset_tbkas` flag does:
    /// a controller is kept if any command arrived within the last KATO
    /// period it checked.
    ///
    /// Called for every command on every queue of the controller, from all
    /// cores: no clock read, and a load before the store, so that in steady
    /// state the flag's cache line stays shared instead of bouncing between
    /// cores (the timer clears it once per check).
    pub fn touch(&self) {
        if !self.activity.load(Ordering::Relaxed) {
            self.activity.store(true, Ordering::Relaxed);
        }
    }

    /// Time until the keep-alive timer expires, or `None` when disabled. A
    /// command noted since the last call restarts the timer now.
    pub fn keep_alive_remaining(&self) -> Option<Duration> {
        let kato = self.kato_ms() as u64;
        if kato == 0 {
            return None;
        }
        let now = self.epoch.elapsed().as_millis() as u64;
        if self.activity.load(Ordering::Relaxed) && self.activity.swap(false, Ordering::Relaxed) {
            self.last_activity_ms.store(now, Ordering::Relaxed);
        }
        let last = self.last_activity_ms.load(Ordering::Relaxed);
        Some(Duration::from_millis((last + kato).saturating_sub(now)))
    }

    /// Async Event Configuration (Set Features 0Bh).
    pub fn aec(&self) -> u32 {
        self.aec.load(Ordering::Relaxed)
    }

    /// Sets the Async Event Configuration.
    pub fn set_aec(&self, v: u32) {
        self.aec.store(v, Ordering::Relaxed);
    }

    /// Registers an I/O queue; false if that QID is already connected.
    pub fn add_io_queue(&self, qid: u16) -> bool {
        self.io_qids.lock().unwrap().insert(qid)
    }

    /// I/O queues connected now.
    pub fn io_queue_count(&self) -> usize {
        self.io_qids.lock().unwrap().len()
    }

    /// Unregisters an I/O queue.
    pub fn remove_io_queue(&self, qid: u16) {
        self.io_qids.lock().unwrap().remove(&qid);
    }

    /// Records a failed command in the Error Information log (its Error
    /// Count is assigned here).
    pub fn record_error(&self, entry: ErrorLogEntry) {
        self.errors.lock().unwrap().record(entry);
    }

    /// The Error Information log page (LID 01h), newest entry first.
    pub fn error_log_page(&self) -> Vec<u8> {
        self.errors.lock().unwrap().encode()
    }

    /// Errors recorded since the controller was created.
    pub fn error_count(&self) -> u64 {
        self.errors.lock().unwrap().count()
    }

    /// Subscribes to teardown; queues of this controller close when it changes.
    pub fn teardown_watch(&self) -> watch::Receiver<Teardown> {
        self.teardown.subscribe()
    }

    /// Current teardown state.
    pub fn teardown_state(&self) -> Teardown {
        *self.teardown.borrow()
    }

    /// Tears the controller down: every queue of the association closes and
    /// outstanding AERs are dropped with their connection.
    pub fn shutdown(&self, why: Teardown) {
        if why == Teardown::KeepAliveExpired {
            let mut r = self.regs.lock().unwrap();
            r.csts = Csts(r.csts).with_cfs(true).0;
        }
        self.teardown.send_if_modified(|t| {
            if *t == Teardown::Alive {
                *t = why;
                true
            } else {
                false
            }
        });
        self.aen.lock().unwrap().outstanding.clear();
    }

    /// Queues an AER (admin queue slot `tag`, completion through `sink`).
    /// Fails with Asynchronous Event Request Limit Exceeded past [`MAX_AERS`].
    pub fn post_aer(&self, sink: &CompletionSink, tag: u32) -> Result<(), Status> {
        let mut a = self.aen.lock().unwrap();
        if a.outstanding.len() >= MAX_AERS {
            return Err(Status::ASYNC_LIMIT.with_dnr());
        }
        a.outstanding.push((sink.clone(), tag));
        Self::deliver(&mut a);
        Ok(())
    }

    /// Namespace `nsid` when this controller's host sees it; `None` for an
    /// inactive NSID, or one hidden from the host ([`Namespace::visible_to`]).
    pub fn namespace(&self, nsid: u32) -> Option<Arc<Namespace>> {
        self.subsys.namespace(nsid).filter(|ns| ns.visible_to(&self.hostnqn))
    }

    /// Runs `f` on namespace `nsid` when this controller's host sees it
    /// (the per-command form of [`Self::namespace`], borrowing as
    /// [`Subsystem::with_namespace`] does).
    #[inline]
    pub fn with_namespace<R>(&self, nsid: u32, f: impl FnOnce(&Namespace) -> R) -> Option<R> {
        self.subsys.with_namespace(nsid, |ns| ns.visible_to(&self.hostnqn).then(|| f(ns))).flatten()
    }

    /// The namespaces this controller's host sees, by ascending NSID: its
    /// active namespaces.
    pub fn namespaces(&self) -> Vec<Arc<Namespace>> {
        self.subsys.namespaces().values().filter(|ns| ns.visible_to(&self.hostnqn)).cloned().collect()
    }

    /// Records a namespace change and raises the Namespace Attribute Changed
    /// notice when enabled (nvmet `nvmet_ns_changed` + `nvmet_add_async_event`).
    pub fn ns_changed(&self, nsid: u32) {
        let mut a = self.aen.lock().unwrap();
        if !a.changed_ns.contains(&nsid) {
            if a.changed_ns.len() >= MAX_CHANGED_NS {
                a.changed_overflow = true;
            } else {
                a.changed_ns.push(nsid);
            }
        }
        self.notice(&mut a, AEC_NS_ATTR, AsyncEvent::NS_CHANGED);
    }

    /// Raises a discovery log change notice (discovery controllers, AEC bit 31).
    pub fn discovery_changed(&self) {
        let mut a = self.aen.lock().unwrap();
        self.notice(&mut a, AEC_DISC_CHANGE, AsyncEvent::DISC_CHANGED);
    }

    /// Raises the ANA Change notice (AEC bit 11; log page 0Ch).
    pub fn ana_changed(&self) {
        let mut a = self.aen.lock().unwrap();
        self.notice(&mut a, AEC_ANA_CHANGE, AsyncEvent::ANA_CHANGE);
    }

    /// Logs a reservation notification for namespace `nsid` and raises the
    /// Reservation Log Page Available event (nvmet `nvmet_pr_add_resv_log`
    /// and `nvmet_add_async_event`, which no AEC bit gates). Past
    /// [`RESV_LOG_QUEUE`] waiting entries the notification is lost: the
    /// count still moves, so the host sees the gap.
    pub fn reservation_notice(&self, kind: NotificationType, nsid: u32) {
        {
            let mut l = self.resv_log.lock().unwrap();
            l.counter = l.counter.wrapping_add(1).max(1);
            if l.queue.len() < RESV_LOG_QUEUE {
                let count = l.counter;
                l.queue.push_back(ReservationNotification { count, kind, nsid, available: 0 });
            } else {
                tracing::info!(
                    cntlid = self.cntlid,
                    nsid,
                    kind = kind.0,
                    "reservation notification lost: log full"
                );
            }
        }
        // One undelivered event stands for any number of entries, so a host
        // that posts no AER does not grow the queue.
        let dw0 = AsyncEvent::RESERVATION_LOG.to_dw0();
        let mut a = self.aen.lock().unwrap();
        if !a.pending.contains(&dw0) {
            a.pending.push_back(dw0);
            Self::deliver(&mut a);
        }
    }

    /// Takes the oldest reservation notification (log page 80h): its count
    /// and the number still waiting after it, or an empty page.
    pub fn reservation_log(&self) -> ReservationNotification {
        let mut l = self.resv_log.lock().unwrap();
        match l.queue.pop_front() {
            Some(n) => ReservationNotification { available: l.queue.len().min(255) as u8, ..n },
            None => ReservationNotification::default(),
        }
    }

    /// Queues notice `event` when its AEC bit is enabled and not masked,
    /// then masks it (nvmet `nvmet_aen_bit_enabled`).
    fn notice(&self, a: &mut AenState, bit: u32, event: AsyncEvent) {
        if self.aec() & bit != 0 && a.masked & bit == 0 {
            a.masked |= bit;
            a.pending.push_back(event.to_dw0());
            Self::deliver(a);
        }
    }

    /// Takes the Changed Namespace List (log page 04h); with `rae` false the
    /// list is cleared and notices are unmasked.
    pub fn changed_ns_log(&self, rae: bool) -> Vec<u32> {
        let mut a = self.aen.lock().unwrap();
        let list = if a.changed_overflow { vec![0xFFFF_FFFF] } else { a.changed_ns.clone() };
        if !rae {
            a.changed_ns.clear();
            a.changed_overflow = false;
            a.masked &= !AEC_NS_ATTR;
        }
        list
    }

    /// Unmasks the notice of AEC bit `bit` after its log was read with RAE=0
    /// (nvmet `nvmet_clear_aen_bit`).
    pub fn clear_notice_mask(&self, bit: u32) {
        self.aen.lock().unwrap().masked &= !bit;
    }

    fn deliver(a: &mut AenState) {
        while !a.outstanding.is_empty() && !a.pending.is_empty() {
            let dw0 = a.pending.pop_front().unwrap();
            let (sink, tag) = a.outstanding.remove(0);
            let mut c = IoCompletion::status(tag, Status::SUCCESS);
            c.result = dw0 as u64;
            // A closed admin queue drops the event with it.
            let _ = sink.send(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller(kato_ms: u32) -> Controller {
        let subsys = Arc::new(Subsystem::new("nqn.2026-11.io.nvmeof:kato", "nvmeof test", None, false));
        Controller::new(1, subsys, "nqn.2026-11.io.nvmeof:host".into(), [0; 16], 0, kato_ms, 1)
    }

    #[test]
    fn keep_alive_timer_restarts_when_it_looks_after_a_command() {
        let c = controller(60_000);
        let pause = Duration::from_millis(20);
        // No command yet: the timer runs from the controller's creation.
        std::thread::sleep(pause);
        assert!(c.keep_alive_remaining().unwrap() <= Duration::from_millis(60_000) - pause);
        // Commands noted since the last look restart it at the next look...
        c.touch();
        c.touch();
        assert_eq!(c.keep_alive_remaining(), Some(Duration::from_millis(60_000)));
        // ...once: without another command it runs down again.
        std::thread::sleep(pause);
        assert!(c.keep_alive_remaining().unwrap() <= Duration::from_millis(60_000) - pause);
        c.set_kato_ms(0);
        assert_eq!(c.keep_alive_remaining(), None);
    }
}
