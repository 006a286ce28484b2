//! Reservations of one namespace (NVMe Base 2.0 §8.19), after nvmet's `pr.c`
//! (Linux 6.13): registrants keyed by the 128-bit host identifier from
//! Connect, at most one reservation, a generation counter and the
//! notifications each action owes other hosts. The I/O command layer
//! ([`crate::cmd::io`]) decodes the commands, calls these methods and
//! delivers the returned [`Notice`]s to the hosts' controllers; the only
//! I/O here is the reservations file.
//!
//! Registrations belong to hosts, not controllers: they outlive
//! disconnects and are shared by every controller (every path) of one host,
//! and they last as long as the namespace, as nvmet's. With a reservations
//! file ([`Reservations::persistent`], as SPDK's `ptpl_file`) they can
//! persist through power loss: RESCAP bit 0, and once a host turns PTPL
//! on, every change is in the file before its command completes. The file
//! is this target's TOML, or SPDK's own JSON ([`FileFormat::Spdk`]), so
//! registrations move with a namespace from SPDK and back.
//!
//! Where nvmet and the specification differ, this follows the specification
//! in two places: under the All Registrants types every registrant holds
//! the reservation, so any registrant (nvmet: the first one only) may
//! release it or acquire it again with the same type; and Compare belongs
//! to the read command group (nvmet checks Read only).
//!
//! Preempt and Abort completes once every command of the preempted hosts on
//! the namespace that had passed its reservation check has completed, as
//! nvmet's `nvmet_pr_do_abort` waits for its per-controller references
//! (neither aborts them): each I/O command holds an [`InflightGuard`] from
//! its parse step to its completion ([`super::inflight`]), and while the
//! wait lasts new commands of those hosts fail with Internal Error (no DNR:
//! the host retries them, and they then meet the new reservation). A host
//! that fences another one off can rely on none of that host's writes
//! landing after its command completes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use nvmeof_common::spec::reservation::{
    AcquireAction, NotificationType, RegisterAction, Registrant, ReleaseAction, ReservationStatus,
    ReservationType, NOTIFY_MASK_ALL,
};
use nvmeof_common::Status;

use super::inflight::InflightRegistry;
pub use super::inflight::{AccessMemo, InflightCache, InflightGuard};

/// Host identifier (Connect data HOSTID).
pub type HostId = [u8; 16];

/// Controller ID reported for every registrant (dynamic controller model,
/// as nvmet: registrations belong to hosts, not controllers).
const CNTLID_DYNAMIC: u16 = 0xFFFF;

/// Most hosts registered with one namespace. The specification sets no
/// number (nvmet keeps a list without one); a bound keeps hosts connecting
/// under ever new host IDs from growing the state and its file without end.
pub const MAX_REGISTRANTS: usize = 1024;

/// Most registrants SPDK reads back from its `ptpl_file`
/// (`SPDK_NVMF_MAX_NUM_REGISTRANTS`; `nvmf_ns_reservation_load_json` refuses
/// more): the bound of a namespace whose file is in SPDK's format.
pub const SPDK_MAX_REGISTRANTS: usize = 16;

/// Register CPTPL 10b: Persist Through Power Loss off.
pub const CPTPL_CLEAR: u8 = 2;
/// Register CPTPL 11b: Persist Through Power Loss on.
pub const CPTPL_SET: u8 = 3;

fn conflict() -> Status {
    Status::RESERVATION_CONFLICT.with_dnr()
}

/// A notification one host's controllers owe it (Reservation Notification
/// log page and an asynchronous event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notice {
    /// Host to notify.
    pub hostid: HostId,
    /// What happened.
    pub kind: NotificationType,
}

/// The command groups a reservation restricts (NVMe Base 2.0 Figure 515).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read command group: Read, Compare.
    Read,
    /// Write command group: Write, Write Zeroes, Dataset Management, Flush.
    Write,
}

/// What a successful Reservation Acquire did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acquired {
    /// Notifications owed to other hosts.
    pub notices: Vec<Notice>,
    /// Hosts whose registration a Preempt (or Preempt and Abort) removed.
    pub preempted: Vec<HostId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reg {
    hostid: HostId,
    rkey: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Holder {
    /// The registrant that acquired it (All Registrants types: the first
    /// registrant, nvmet's holder pointer, which moves on when it leaves).
    hostid: HostId,
    rtype: ReservationType,
}

#[derive(Clone, Default, Debug)]
struct State {
    /// In order of registration.
    regs: Vec<Reg>,
    holder: Option<Holder>,
    generation: u32,
    /// Reservation Notification Mask (Features 82h): masked types are not
    /// reported. Per namespace, as nvmet keeps it.
    notify_mask: u32,
    /// Persist Through Power Loss state (PTPL): the state above is kept in
    /// the reservations file and restored when the target starts again.
    ptpl: bool,
}

impl State {
    /// What the reservations file keeps (with PTPL on).
    fn persisted(&self) -> (bool, &[Reg], Option<Holder>, u32) {
        (self.ptpl, &self.regs, self.holder, self.generation)
    }

    fn reg(&self, host: &HostId) -> Option<usize> {
        self.regs.iter().position(|r| &r.hostid == host)
    }

    /// Acquire and Release act only for a host registered with key `crkey`
    /// (nvmet looks the pair up before anything else).
    fn registered_with(&self, host: &HostId, crkey: u64) -> Result<(), Status> {
        match self.reg(host) {
            Some(i) if self.regs[i].rkey == crkey => Ok(()),
            _ => Err(conflict()),
        }
    }

    /// Whether `host` holds the reservation: its acquirer or, under the All
    /// Registrants types, any registrant.
    fn holds(&self, host: &HostId) -> bool {
        match self.holder {
            None => false,
            Some(h) => &h.hostid == host || (h.rtype.all_registrants() && self.reg(host).is_some()),
        }
    }

    /// nvmet `nvmet_pr_check_cmd_access`: whether `host` may run commands of
    /// the read and of the write group under the current reservation. The
    /// holder may do anything; Write Exclusive refuses others' writes,
    /// Exclusive Access their reads and writes; the Registrants Only and All
    /// Registrants types refuse them to hosts that are not registered.
    fn may(&self, host: &HostId) -> (bool, bool) {
        let Some(h) = self.holder else { return (true, true) };
        if self.holds(host) {
            return (true, true);
        }
        let registrant = match h.rtype {
            ReservationType::WRITE_EXCLUSIVE | ReservationType::EXCLUSIVE_ACCESS => false,
            _ => self.reg(host).is_some(),
        };
        (registrant || !h.rtype.exclusive_access(), registrant)
    }

    fn notify(&self, out: &mut Vec<Notice>, hostid: HostId, kind: NotificationType) {
        if self.notify_mask & kind.mask_bit() == 0 {
            out.push(Notice { hostid, kind });
        }
    }

    /// Reservation Released to every registrant but `except` (nvmet `nvmet_pr_resv_released`).
    fn released(&self, out: &mut Vec<Notice>, except: &HostId) {
        for r in self.regs.iter().filter(|r| &r.hostid != except) {
            self.notify(out, r.hostid, NotificationType::RESERVATION_RELEASED);
        }
    }

    /// Removes registrant `i` (nvmet `nvmet_pr_unregister_one`): a holder
    /// leaving an All Registrants reservation passes it to the first
    /// registrant left; leaving any other releases it, and the Registrants
    /// Only types tell the registrants.
    fn unregister(&mut self, i: usize, out: &mut Vec<Notice>) {
        let gone = self.regs.remove(i);
        let Some(h) = self.holder else { return };
        if h.hostid != gone.hostid {
            return;
        }
        if h.rtype.all_registrants() {
            self.holder = self.regs.first().map(|r| Holder { hostid: r.hostid, rtype: h.rtype });
        } else {
            self.holder = None;
            if h.rtype.registrants_only() {
                self.released(out, &gone.hostid);
            }
        }
    }

    /// Unregisters every registrant with key `prkey` (but `keep`, when
    /// given), telling each but `sender` its registration was preempted;
    /// whether any matched.
    fn unregister_by_key(
        &mut self,
        prkey: Option<u64>,
        keep: Option<&HostId>,
        sender: &HostId,
        out: &mut Vec<Notice>,
    ) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.regs.len() {
            let r = self.regs[i];
            if prkey.is_none_or(|k| r.rkey == k) && keep != Some(&r.hostid) {
                any = true;
                self.unregister(i, out);
                if &r.hostid != sender {
                    self.notify(out, r.hostid, NotificationType::REGISTRATION_PREEMPTED);
                }
            } else {
                i += 1;
            }
        }
        any
    }
}

/// How a reservations file is written ([`Reservations::persistent`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FileFormat {
    /// This target's TOML (configuration `reservations_format = "nvmeof"`).
    #[default]
    Nvmeof,
    /// SPDK's `ptpl_file` JSON (`reservations_format = "spdk"`), as
    /// `nvmf_ns_reservation_update_json` writes it and
    /// `nvmf_ns_reservation_load_json` reads it: a namespace moved from SPDK
    /// keeps its hosts' registrations, and SPDK can take the file back.
    /// `bdev_uuid` is written where the file does not name one already
    /// (SPDK restores only a file naming its bdev's UUID).
    Spdk {
        /// The UUID of the bdev (or this namespace) the file belongs to.
        bdev_uuid: [u8; 16],
    },
}

/// Where and how the state persists.
#[derive(Debug)]
struct Store {
    path: PathBuf,
    format: FileFormat,
}

/// Reservation state of one namespace.
#[derive(Debug, Default)]
pub struct Reservations {
    state: Mutex<State>,
    /// A reservation is held: only then do reads and writes look at the
    /// state (and take its lock).
    held: AtomicBool,
    /// The reservations file (configuration `reservations_file`): Persist
    /// Through Power Loss is supported (RESCAP bit 0), and while the host
    /// has it on, every change is written there before it completes.
    store: Option<Store>,
    /// Commands in flight per host, for Preempt and Abort.
    inflight: InflightRegistry,
    /// Moves on with every change of `state` (under its lock): a queue's
    /// [`AccessMemo`] of this version still holds.
    version: AtomicU64,
}

impl Reservations {
    /// No registrants, no reservation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reservations that can persist through power loss in `path`, written
    /// in `format`: the state it holds (with PTPL on) is restored; a missing
    /// file starts empty with PTPL off. A file that cannot be read or parsed
    /// is an error, so registrations are never dropped silently.
    pub fn persistent(path: PathBuf, format: FileFormat) -> std::io::Result<Self> {
        let (state, format) = match std::fs::read_to_string(&path) {
            Ok(text) => persist::decode(&text, format).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (State::default(), format),
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        };
        let held = AtomicBool::new(state.holder.is_some());
        Ok(Self { state: Mutex::new(state), held, store: Some(Store { path, format }), ..Self::default() })
    }

    /// The reservations file and its format.
    pub fn file(&self) -> Option<(&Path, FileFormat)> {
        self.store.as_ref().map(|s| (s.path.as_path(), s.format))
    }

    /// How many hosts may be registered: [`SPDK_MAX_REGISTRANTS`] where the
    /// file is SPDK's, else [`MAX_REGISTRANTS`].
    pub fn max_registrants(&self) -> usize {
        match self.store {
            Some(Store { format: FileFormat::Spdk { .. }, .. }) => SPDK_MAX_REGISTRANTS,
            _ => MAX_REGISTRANTS,
        }
    }

    /// Whether Persist Through Power Loss is supported (a reservations file).
    pub fn ptpl_capable(&self) -> bool {
        self.store.is_some()
    }

    /// The Persist Through Power Loss state (Report PTPLS, Features 83h).
    pub fn ptpl(&self) -> bool {
        self.read(|s| s.ptpl)
    }

    /// Sets the Persist Through Power Loss state (Set Features 83h);
    /// Invalid Field where it is not supported.
    pub fn set_ptpl(&self, on: bool) -> Result<(), Status> {
        if !self.ptpl_capable() {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        self.with(|s| {
            s.ptpl = on;
            Ok(())
        })
    }

    fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Runs `f` on a copy of the state and keeps the copy if `f` succeeds
    /// and, where the state persists, once it is in the reservations file:
    /// an acknowledged change survives a crash, and one that could not be
    /// written fails (Internal Error) and changes nothing.
    fn with<R>(&self, f: impl FnOnce(&mut State) -> Result<R, Status>) -> Result<R, Status> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = s.clone();
        let r = f(&mut next)?;
        if let Some(Store { path, format }) = &self.store {
            if (s.ptpl || next.ptpl) && s.persisted() != next.persisted() {
                persist::save(path, *format, &next).map_err(|e| {
                    tracing::error!(file = %path.display(), error = %e, "reservations: cannot write the reservations file; the command fails");
                    Status::INTERNAL
                })?;
            }
        }
        *s = next;
        self.held.store(s.holder.is_some(), Ordering::Release);
        self.version.fetch_add(1, Ordering::Release);
        Ok(r)
    }

    /// Admits an I/O command of group `access` from `host`, sent on the
    /// queue owning `cache`, as `nvmet_parse_io_cmd` does: the reservation
    /// check (`State::may`; Reservation Conflict, with DNR), then the
    /// count in flight for Preempt and Abort (Internal Error, no DNR, while
    /// one waits for this host; nvmet `nvmet_pr_get_ns_pc_ref`). The command
    /// holds the guard until it completes.
    ///
    /// The count is taken before the check, so a command checked before a
    /// preemption is counted when the Preempt and Abort looks
    /// ([`InflightRegistry::enter`]). While a reservation is held the check
    /// uses the queue's memo of what its host may do, recomputed (under the
    /// state's lock) only after the state changed: the queues of one
    /// namespace share no lock on the I/O path.
    pub fn admit(
        &self,
        host: &HostId,
        access: Access,
        cache: &mut InflightCache,
    ) -> Result<InflightGuard, Status> {
        let (guard, memo) = self.inflight.enter(host, cache);
        if self.held.load(Ordering::Acquire) {
            let version = self.version.load(Ordering::Acquire);
            let (read, write) = match *memo {
                Some((v, read, write)) if v == version => (read, write),
                _ => {
                    let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                    let (read, write) = s.may(host);
                    *memo = Some((self.version.load(Ordering::Acquire), read, write));
                    (read, write)
                }
            };
            let allowed = match access {
                Access::Read => read,
                Access::Write => write,
            };
            if !allowed {
                return Err(conflict());
            }
        }
        if guard.fenced() {
            return Err(Status::INTERNAL);
        }
        Ok(guard)
    }

    /// The wait of a Preempt and Abort for the commands of `hosts`:
    /// [`InflightRegistry::abort`]; how many queues had commands in flight.
    pub fn abort(&self, hosts: &[HostId], done: Box<dyn FnOnce() + Send>) -> usize {
        self.inflight.abort(hosts, done)
    }

    /// Reservation Register (nvmet `nvmet_execute_pr_register`). Register:
    /// a host already registered succeeds only with the same key. Unregister
    /// and Replace need the current key unless `iekey`. An unknown action is
    /// Invalid Opcode, as nvmet answers. Success moves the generation.
    ///
    /// A host that is not registered yet gets Internal Error (no state
    /// changes) while the namespace holds [`Self::max_registrants`].
    ///
    /// `cptpl` (CDW10 bits 31:30) 10b turns Persist Through Power Loss off,
    /// 11b on (the Linux host's `pr_ops` always ask 11b), where supported;
    /// elsewhere it is ignored, as nvmet ignores it.
    pub fn register(
        &self,
        host: &HostId,
        action: RegisterAction,
        iekey: bool,
        keys: (u64, u64),
        cptpl: u8,
    ) -> Result<Vec<Notice>, Status> {
        let (crkey, nrkey) = keys;
        let capable = self.ptpl_capable();
        let max = self.max_registrants();
        self.with(|s| {
            let mut out = Vec::new();
            let found = s.reg(host);
            match action {
                RegisterAction::REGISTER => match found {
                    Some(i) if s.regs[i].rkey != nrkey => return Err(conflict()),
                    Some(_) => {}
                    // A full list: Internal Error, as SPDK answers
                    // (`nvmf_ns_reservation_add_registrant`).
                    None if s.regs.len() >= max => {
                        tracing::warn!(
                            registrants = s.regs.len(),
                            limit = max,
                            "reservations: a host cannot register: the namespace has as many registrants as it holds"
                        );
                        return Err(Status::INTERNAL);
                    }
                    None => s.regs.push(Reg { hostid: *host, rkey: nrkey }),
                },
                RegisterAction::UNREGISTER => match found {
                    Some(i) if iekey || s.regs[i].rkey == crkey => s.unregister(i, &mut out),
                    _ => return Err(conflict()),
                },
                RegisterAction::REPLACE => match found {
                    Some(i) if iekey || s.regs[i].rkey == crkey => s.regs[i].rkey = nrkey,
                    _ => return Err(conflict()),
                },
                _ => return Err(Status::INVALID_OPCODE.with_dnr()),
            }
            match cptpl {
                CPTPL_CLEAR if capable => s.ptpl = false,
                CPTPL_SET if capable => s.ptpl = true,
                _ => {}
            }
            s.generation = s.generation.wrapping_add(1);
            Ok(out)
        })
    }

    /// Reservation Acquire (nvmet `nvmet_execute_pr_acquire`): the host must
    /// be registered with key `crkey` (Reservation Conflict otherwise).
    /// Acquire takes a free reservation, or succeeds again for its holder
    /// with the same type. Preempt (and Preempt and Abort) follows nvmet's
    /// `nvmet_pr_preempt`: without a reservation it unregisters the hosts
    /// with key `prkey`; under an All Registrants type, `prkey` 0 takes the
    /// reservation and unregisters every other host, another key
    /// unregisters its hosts; the holder preempting itself changes the type;
    /// `prkey` equal to the holder's key takes the reservation and
    /// unregisters the other hosts with that key; any other non-zero key
    /// unregisters its hosts, and 0 is Invalid Field. Unregistering no host
    /// is Reservation Conflict. `rtype` must be valid and `iekey` clear
    /// (Invalid Field; the caller checks both before the data arrives).
    pub fn acquire(
        &self,
        host: &HostId,
        action: AcquireAction,
        rtype: ReservationType,
        crkey: u64,
        prkey: u64,
    ) -> Result<Acquired, Status> {
        self.with(|s| {
            let mut out = Vec::new();
            s.registered_with(host, crkey)?;
            match action {
                AcquireAction::ACQUIRE => {
                    return match s.holder {
                        None => {
                            s.holder = Some(Holder { hostid: *host, rtype });
                            Ok(Acquired::default())
                        }
                        Some(h) if s.holds(host) && h.rtype == rtype => Ok(Acquired::default()),
                        Some(_) => Err(conflict()),
                    };
                }
                AcquireAction::PREEMPT | AcquireAction::PREEMPT_AND_ABORT => {}
                _ => return Err(Status::INVALID_OPCODE.with_dnr()),
            }
            let before: Vec<HostId> = s.regs.iter().map(|r| r.hostid).collect();
            let ok = match s.holder {
                None => s.unregister_by_key(Some(prkey), None, host, &mut out),
                Some(h) if h.rtype.all_registrants() => {
                    if prkey == 0 {
                        // The new holder first, so that no other host's
                        // command slips in between (nvmet does the same).
                        s.holder = Some(Holder { hostid: *host, rtype });
                        s.unregister_by_key(None, Some(host), host, &mut out);
                        true
                    } else {
                        s.unregister_by_key(Some(prkey), None, host, &mut out)
                    }
                }
                Some(h) if &h.hostid == host => {
                    s.holder = Some(Holder { hostid: *host, rtype });
                    if h.rtype != rtype {
                        s.released(&mut out, host);
                    }
                    true
                }
                Some(h) => {
                    let holder_key = s.reg(&h.hostid).map(|i| s.regs[i].rkey);
                    if holder_key == Some(prkey) {
                        s.holder = Some(Holder { hostid: *host, rtype });
                        s.unregister_by_key(Some(prkey), Some(host), host, &mut out);
                        if h.rtype != rtype {
                            s.released(&mut out, host);
                        }
                        true
                    } else if prkey != 0 {
                        s.unregister_by_key(Some(prkey), None, host, &mut out)
                    } else {
                        return Err(Status::INVALID_FIELD.with_dnr());
                    }
                }
            };
            if !ok {
                return Err(conflict());
            }
            s.generation = s.generation.wrapping_add(1);
            let preempted = before.into_iter().filter(|h| s.reg(h).is_none()).collect();
            Ok(Acquired { notices: out, preempted })
        })
    }

    /// Reservation Release (nvmet `nvmet_execute_pr_release`): the host must
    /// be registered with key `crkey`. Release by a host that holds no
    /// reservation succeeds without effect; by the holder, `rtype` must be
    /// the reservation's (Reservation Conflict otherwise), and releasing a
    /// Registrants Only or All Registrants reservation tells the other
    /// registrants. Clear drops the reservation and every registration,
    /// telling the other hosts theirs were preempted, and moves the
    /// generation.
    pub fn release(
        &self,
        host: &HostId,
        action: ReleaseAction,
        rtype: ReservationType,
        crkey: u64,
    ) -> Result<Vec<Notice>, Status> {
        self.with(|s| {
            let mut out = Vec::new();
            s.registered_with(host, crkey)?;
            match action {
                ReleaseAction::RELEASE => {
                    let Some(h) = s.holder else { return Ok(out) };
                    if !s.holds(host) {
                        return Ok(out);
                    }
                    if h.rtype != rtype {
                        return Err(conflict());
                    }
                    s.holder = None;
                    if h.rtype != ReservationType::WRITE_EXCLUSIVE
                        && h.rtype != ReservationType::EXCLUSIVE_ACCESS
                    {
                        s.released(&mut out, host);
                    }
                }
                ReleaseAction::CLEAR => {
                    s.holder = None;
                    for r in std::mem::take(&mut s.regs) {
                        if &r.hostid != host {
                            s.notify(&mut out, r.hostid, NotificationType::RESERVATION_PREEMPTED);
                        }
                    }
                    s.generation = s.generation.wrapping_add(1);
                }
                _ => return Err(Status::INVALID_OPCODE.with_dnr()),
            }
            Ok(out)
        })
    }

    /// Reservation Report content (nvmet `nvmet_execute_pr_report`): every
    /// registrant with controller ID FFFFh, holders marked (all of them
    /// under the All Registrants types).
    pub fn report(&self) -> ReservationStatus {
        self.read(|s| ReservationStatus {
            generation: s.generation,
            rtype: s.holder.map_or(ReservationType::NONE, |h| h.rtype),
            regctl: s.regs.len().min(u16::MAX as usize) as u16,
            ptpls: s.ptpl,
            registrants: s
                .regs
                .iter()
                .map(|r| Registrant {
                    cntlid: CNTLID_DYNAMIC,
                    holds: s.holds(&r.hostid),
                    rkey: r.rkey,
                    hostid: r.hostid,
                })
                .collect(),
        })
    }

    /// Reservation Notification Mask (Features 82h).
    pub fn notify_mask(&self) -> u32 {
        self.read(|s| s.notify_mask)
    }

    /// Sets the Reservation Notification Mask; bits other than the three
    /// notification types are Invalid Field (nvmet `nvmet_set_feat_resv_notif_mask`).
    pub fn set_notify_mask(&self, mask: u32) -> Result<(), Status> {
        if mask & !NOTIFY_MASK_ALL != 0 {
            return Err(Status::INVALID_FIELD.with_dnr());
        }
        self.with(|s| {
            s.notify_mask = mask;
            Ok(())
        })
    }
}

/// The reservations file, written whole (a temporary file, fsync, rename,
/// fsync of the directory), so a crash leaves the old state or the new one:
/// this target's TOML (keys are hexadecimal strings: TOML integers are
/// signed), or SPDK's JSON.
mod persist {
    use std::path::Path;

    use nvmeof_common::spec::nqn::{format_uuid, parse_uuid};
    use nvmeof_common::spec::reservation::ReservationType;
    use serde::{Deserialize, Serialize};

    use super::{FileFormat, Holder, HostId, Reg, State};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        ptpl: bool,
        generation: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holder: Option<String>,
        #[serde(default)]
        rtype: u8,
        #[serde(default, rename = "registrant", skip_serializing_if = "Vec::is_empty")]
        registrants: Vec<RegFile>,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct RegFile {
        hostid: String,
        rkey: String,
    }

    /// SPDK's `struct _nvmf_ns_reservation` as `nvmf_ns_pr_decoders` reads
    /// it (`ptpl`, `rtype`, `crkey`, `holder_uuid` optional) and
    /// `nvmf_ns_reservation_update_json` writes it, in its order.
    #[derive(Serialize, Deserialize)]
    struct SpdkFile {
        #[serde(default)]
        ptpl: bool,
        #[serde(default)]
        rtype: u32,
        #[serde(default)]
        crkey: u64,
        bdev_uuid: String,
        #[serde(default)]
        holder_uuid: String,
        registrants: Vec<SpdkReg>,
    }

    #[derive(Serialize, Deserialize)]
    struct SpdkReg {
        rkey: u64,
        host_uuid: String,
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn hostid(s: &str) -> Result<HostId, String> {
        let bad = || format!("host ID {s:?} is not 32 hex digits");
        if s.len() != 32 {
            return Err(bad());
        }
        let mut id = [0u8; 16];
        for (i, b) in id.iter_mut().enumerate() {
            *b = u8::from_str_radix(s.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())?;
        }
        Ok(id)
    }

    fn uuid(s: &str) -> Result<HostId, String> {
        parse_uuid(s).ok_or_else(|| format!("{s:?} is not a UUID"))
    }

    /// The state the file holds (with PTPL off, none but that) and the
    /// format to keep writing it in.
    pub(super) fn decode(text: &str, format: FileFormat) -> Result<(State, FileFormat), String> {
        match format {
            FileFormat::Nvmeof => Ok((decode_toml(text)?, format)),
            FileFormat::Spdk { bdev_uuid } => decode_spdk(text, bdev_uuid),
        }
    }

    fn decode_toml(text: &str) -> Result<State, String> {
        let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
        if !f.ptpl {
            return Ok(State::default());
        }
        let mut regs = Vec::with_capacity(f.registrants.len());
        for r in &f.registrants {
            let rkey = u64::from_str_radix(r.rkey.trim_start_matches("0x"), 16)
                .map_err(|_| format!("key {:?} is not hexadecimal", r.rkey))?;
            regs.push(Reg { hostid: hostid(&r.hostid)?, rkey });
        }
        let holder =
            f.holder.as_deref().map(|h| Ok::<_, String>((hostid(h)?, f.rtype as u32))).transpose()?;
        let holder = holder_of(&regs, holder)?;
        Ok(State { regs, holder, generation: f.generation, ptpl: true, notify_mask: 0 })
    }

    /// SPDK's file: empty while PTPL is off (SPDK writes nothing then); the
    /// holder is `holder_uuid`, or under the All Registrants types (where
    /// SPDK writes none) the first registrant, as `nvmf_ns_reservation_restore`
    /// takes it. The holder's key is its registration's (SPDK's `crkey`,
    /// checked as SPDK does). SPDK keeps no generation.
    fn decode_spdk(text: &str, bdev_uuid: [u8; 16]) -> Result<(State, FileFormat), String> {
        if text.trim().is_empty() {
            return Ok((State::default(), FileFormat::Spdk { bdev_uuid }));
        }
        let f: SpdkFile =
            serde_json::from_str(text).map_err(|e| format!("not SPDK's reservations JSON: {e}"))?;
        let format =
            FileFormat::Spdk { bdev_uuid: uuid(&f.bdev_uuid).map_err(|e| format!("bdev_uuid {e}"))? };
        if !f.ptpl {
            return Ok((State::default(), format));
        }
        let mut regs: Vec<Reg> = Vec::with_capacity(f.registrants.len());
        for r in &f.registrants {
            let hostid = uuid(&r.host_uuid).map_err(|e| format!("host_uuid {e}"))?;
            if regs.iter().any(|x| x.hostid == hostid) {
                return Err(format!("host {} is registered twice", r.host_uuid));
            }
            regs.push(Reg { hostid, rkey: r.rkey });
        }
        let holder = match ReservationType(f.rtype.min(0xFF) as u8) {
            _ if f.rtype == 0 => None,
            t if t.all_registrants() => regs.first().map(|r| (r.hostid, f.rtype)),
            _ => Some((uuid(&f.holder_uuid).map_err(|e| format!("holder_uuid {e}"))?, f.rtype)),
        };
        // SPDK refuses a file whose `crkey` no registrant holds.
        if f.crkey != 0 && !regs.iter().any(|r| r.rkey == f.crkey) {
            return Err(format!("crkey {:#x} is no registrant's key", f.crkey));
        }
        let holder = holder_of(&regs, holder)?;
        Ok((State { regs, holder, generation: 0, ptpl: true, notify_mask: 0 }, format))
    }

    /// The holder `(hostid, rtype)`: a registrant, with a valid type.
    fn holder_of(regs: &[Reg], holder: Option<(HostId, u32)>) -> Result<Option<Holder>, String> {
        let Some((hostid, rtype)) = holder else { return Ok(None) };
        let t = ReservationType(rtype.min(0xFF) as u8);
        if rtype > 0xFF || !t.is_valid() || !regs.iter().any(|r| r.hostid == hostid) {
            return Err(format!(
                "holder {} with type {rtype} is not a registrant with a valid type",
                hex(&hostid)
            ));
        }
        Ok(Some(Holder { hostid, rtype: t }))
    }

    pub(super) fn encode(s: &State, format: FileFormat) -> String {
        match format {
            FileFormat::Nvmeof => encode_toml(s),
            FileFormat::Spdk { bdev_uuid } => encode_spdk(s, &bdev_uuid),
        }
    }

    fn encode_toml(s: &State) -> String {
        let f = File {
            ptpl: s.ptpl,
            generation: if s.ptpl { s.generation } else { 0 },
            holder: s.holder.filter(|_| s.ptpl).map(|h| hex(&h.hostid)),
            rtype: s.holder.filter(|_| s.ptpl).map_or(0, |h| h.rtype.0),
            registrants: match s.ptpl {
                true => s
                    .regs
                    .iter()
                    .map(|r| RegFile { hostid: hex(&r.hostid), rkey: format!("{:#x}", r.rkey) })
                    .collect(),
                false => Vec::new(),
            },
        };
        let body = toml::to_string(&f).expect("serializable");
        format!(
            "# Reservations of one namespace, written by nvmeof-target (Persist Through Power Loss).\n{body}"
        )
    }

    /// As `nvmf_ns_update_reservation_info` fills the file: nothing with
    /// PTPL off; `holder_uuid` empty without a reservation and under the
    /// All Registrants types; `crkey` the holder's key.
    fn encode_spdk(s: &State, bdev_uuid: &[u8; 16]) -> String {
        if !s.ptpl {
            return String::new();
        }
        let holder =
            s.holder.map(|h| (h, s.regs.iter().find(|r| r.hostid == h.hostid).map_or(0, |r| r.rkey)));
        let f = SpdkFile {
            ptpl: true,
            rtype: holder.map_or(0, |(h, _)| h.rtype.0 as u32),
            crkey: holder.map_or(0, |(_, k)| k),
            bdev_uuid: format_uuid(bdev_uuid),
            holder_uuid: holder
                .filter(|(h, _)| !h.rtype.all_registrants())
                .map_or_else(String::new, |(h, _)| format_uuid(&h.hostid)),
            registrants: s
                .regs
                .iter()
                .map(|r| SpdkReg { rkey: r.rkey, host_uuid: format_uuid(&r.hostid) })
                .collect(),
        };
        serde_json::to_string(&f).expect("serializable")
    }

    pub(super) fn save(path: &Path, format: FileFormat, s: &State) -> std::io::Result<()> {
        crate::core::write_durably(path, encode(s, format).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: HostId = [0xA; 16];
    const B: HostId = [0xB; 16];
    const C: HostId = [0xC; 16];

    fn reg(r: &Reservations, h: &HostId, key: u64) {
        r.register(h, RegisterAction::REGISTER, false, (0, key), 0).unwrap();
    }

    fn acquire(r: &Reservations, h: &HostId, key: u64, t: ReservationType) -> Result<Vec<Notice>, Status> {
        r.acquire(h, AcquireAction::ACQUIRE, t, key, 0).map(|a| a.notices)
    }

    fn may(r: &Reservations, h: &HostId) -> (bool, bool) {
        r.read(|s| s.may(h))
    }

    #[test]
    fn register_replace_unregister_and_generation() {
        let r = Reservations::new();
        reg(&r, &A, 1);
        // Registering again: the same key succeeds, another conflicts.
        assert!(r.register(&A, RegisterAction::REGISTER, false, (0, 1), 0).is_ok());
        assert_eq!(r.register(&A, RegisterAction::REGISTER, false, (0, 2), 0), Err(conflict()));
        assert_eq!(r.register(&A, RegisterAction::REPLACE, false, (9, 2), 0), Err(conflict()));
        r.register(&A, RegisterAction::REPLACE, false, (1, 2), 0).unwrap();
        r.register(&A, RegisterAction::REPLACE, true, (0, 3), 0).unwrap();
        assert_eq!(r.register(&B, RegisterAction::UNREGISTER, false, (0, 0), 0), Err(conflict()));
        assert_eq!(
            r.register(&A, RegisterAction(3), false, (3, 0), 0),
            Err(Status::INVALID_OPCODE.with_dnr())
        );
        let rep = r.report();
        assert_eq!((rep.generation, rep.regctl, rep.registrants[0].rkey), (4, 1, 3));
        r.register(&A, RegisterAction::UNREGISTER, false, (3, 0), 0).unwrap();
        assert_eq!((r.report().generation, r.report().regctl), (5, 0));
    }

    #[test]
    fn access_by_type() {
        use ReservationType as T;
        // (type, non-holder registrant (read, write), non-registrant (read, write))
        let table = [
            (T::WRITE_EXCLUSIVE, (true, false), (true, false)),
            (T::EXCLUSIVE_ACCESS, (false, false), (false, false)),
            (T::WRITE_EXCLUSIVE_REG_ONLY, (true, true), (true, false)),
            (T::EXCLUSIVE_ACCESS_REG_ONLY, (true, true), (false, false)),
            (T::WRITE_EXCLUSIVE_ALL_REGS, (true, true), (true, false)),
            (T::EXCLUSIVE_ACCESS_ALL_REGS, (true, true), (false, false)),
        ];
        for (t, registrant, other) in table {
            let r = Reservations::new();
            reg(&r, &A, 1);
            reg(&r, &B, 2);
            assert_eq!(may(&r, &C), (true, true), "no reservation yet");
            acquire(&r, &A, 1, t).unwrap();
            assert_eq!(may(&r, &A), (true, true), "{t:?} holder");
            assert_eq!(may(&r, &B), registrant, "{t:?} registrant");
            assert_eq!(may(&r, &C), other, "{t:?} non-registrant");
            assert_eq!(r.report().rtype, t);
            // Another host cannot acquire; under All Registrants B holds it too.
            let b = acquire(&r, &B, 2, t);
            assert_eq!(b.is_ok(), t.all_registrants(), "{t:?}");
            assert_eq!(acquire(&r, &C, 0, t), Err(conflict()), "unregistered");
        }
    }

    #[test]
    fn acquire_needs_the_current_key_and_the_same_type() {
        let r = Reservations::new();
        reg(&r, &A, 1);
        assert_eq!(acquire(&r, &A, 2, ReservationType::WRITE_EXCLUSIVE), Err(conflict()));
        acquire(&r, &A, 1, ReservationType::WRITE_EXCLUSIVE).unwrap();
        acquire(&r, &A, 1, ReservationType::WRITE_EXCLUSIVE).unwrap();
        assert_eq!(acquire(&r, &A, 1, ReservationType::EXCLUSIVE_ACCESS), Err(conflict()));
        // Acquire does not move the generation.
        assert_eq!(r.report().generation, 1);
    }

    #[test]
    fn release_and_its_notices() {
        let r = Reservations::new();
        reg(&r, &A, 1);
        reg(&r, &B, 2);
        // Nothing held: success without effect.
        assert_eq!(r.release(&B, ReleaseAction::RELEASE, ReservationType(1), 2), Ok(vec![]));
        acquire(&r, &A, 1, ReservationType::WRITE_EXCLUSIVE_REG_ONLY).unwrap();
        // Not the holder: no effect; wrong key: conflict; wrong type: conflict.
        assert_eq!(r.release(&B, ReleaseAction::RELEASE, ReservationType(3), 2), Ok(vec![]));
        assert_eq!(r.release(&A, ReleaseAction::RELEASE, ReservationType(3), 9), Err(conflict()));
        assert_eq!(r.release(&A, ReleaseAction::RELEASE, ReservationType(1), 1), Err(conflict()));
        let n = r.release(&A, ReleaseAction::RELEASE, ReservationType(3), 1).unwrap();
        assert_eq!(n, vec![Notice { hostid: B, kind: NotificationType::RESERVATION_RELEASED }]);
        assert_eq!(r.report().rtype, ReservationType::NONE);
        assert_eq!(may(&r, &C), (true, true));
        // Write Exclusive releases tell no one.
        acquire(&r, &A, 1, ReservationType::WRITE_EXCLUSIVE).unwrap();
        assert_eq!(r.release(&A, ReleaseAction::RELEASE, ReservationType(1), 1), Ok(vec![]));
        // A masked type is not reported.
        r.set_notify_mask(NotificationType::RESERVATION_RELEASED.mask_bit()).unwrap();
        acquire(&r, &A, 1, ReservationType::WRITE_EXCLUSIVE_REG_ONLY).unwrap();
        assert_eq!(r.release(&A, ReleaseAction::RELEASE, ReservationType(3), 1), Ok(vec![]));
        assert_eq!(r.set_notify_mask(1), Err(Status::INVALID_FIELD.with_dnr()));
    }

    #[test]
    fn all_registrants_any_registrant_releases_and_holder_passes_on() {
        let r = Reservations::new();
        reg(&r, &A, 1);
        reg(&r, &B, 2);
        acquire(&r, &A, 1, ReservationType::EXCLUSIVE_ACCESS_ALL_REGS).unwrap();
        assert!(r.report().registrants.iter().all(|g| g.holds));
        // The acquirer leaves: the reservation stays, B holds it.
        r.register(&A, RegisterAction::UNREGISTER, false, (1, 0), 0).unwrap();
        assert_eq!(r.report().rtype, ReservationType::EXCLUSIVE_ACCESS_ALL_REGS);
        assert_eq!(may(&r, &B), (true, true));
        assert_eq!(may(&r, &A), (false, false));
        // The last registrant leaves: released.
        r.register(&B, RegisterAction::UNREGISTER, false, (2, 0), 0).unwrap();
        assert_eq!(r.report().rtype, ReservationType::NONE);
        // Any registrant may release.
        reg(&r, &A, 1);
        reg(&r, &B, 2);
        acquire(&r, &A, 1, ReservationType::WRITE_EXCLUSIVE_ALL_REGS).unwrap();
        let n = r.release(&B, ReleaseAction::RELEASE, ReservationType(5), 2).unwrap();
        assert_eq!(n, vec![Notice { hostid: A, kind: NotificationType::RESERVATION_RELEASED }]);
        assert_eq!(r.report().rtype, ReservationType::NONE);
    }

    #[test]
    fn unregistering_a_registrants_only_holder_releases() {
        let r = Reservations::new();
        reg(&r, &A, 1);
        reg(&r, &B, 2);
        acquire(&r, &A, 1, ReservationType::EXCLUSIVE_ACCESS_REG_ONLY).unwrap();
        let n = r.register(&A, RegisterAction::UNREGISTER, true, (0, 0), 0).unwrap();
        assert_eq!(n, vec![Notice { hostid: B, kind: NotificationType::RESERVATION_RELEASED }]);
        assert_eq!(r.report().rtype, ReservationType::NONE);
    }

    #[test]
    fn preempt() {
        let t = ReservationType::WRITE_EXCLUSIVE;
        let r = Reservations::new();
        reg(&r, &A, 1);
        reg(&r, &B, 2);
        reg(&r, &C, 2);
        acquire(&r, &A, 1, t).unwrap();
        let gen = r.report().generation;
        // B preempts A's reservation with A's key: B holds it, A is unregistered.
        let a = r.acquire(&B, AcquireAction::PREEMPT, ReservationType::EXCLUSIVE_ACCESS, 2, 1).unwrap();
        assert_eq!(a.preempted, vec![A]);
        let n = a.notices;
        assert!(n.contains(&Notice { hostid: A, kind: NotificationType::REGISTRATION_PREEMPTED }));
        assert!(n.contains(&Notice { hostid: C, kind: NotificationType::RESERVATION_RELEASED }), "{n:?}");
        let rep = r.report();
        assert_eq!((rep.rtype, rep.regctl, rep.generation), (ReservationType::EXCLUSIVE_ACCESS, 2, gen + 1));
        assert_eq!(may(&r, &A), (false, false));
        // Preempting with the holder's key removes the other hosts with that key (C), not the preemptor.
        reg(&r, &A, 1);
        let a = r.acquire(&A, AcquireAction::PREEMPT_AND_ABORT, t, 1, 2).unwrap();
        assert_eq!(a.preempted, vec![B, C]);
        let n = a.notices;
        assert!(n.contains(&Notice { hostid: B, kind: NotificationType::REGISTRATION_PREEMPTED }));
        assert!(n.contains(&Notice { hostid: C, kind: NotificationType::REGISTRATION_PREEMPTED }));
        assert_eq!(r.report().regctl, 1);
        // A key no one has: conflict; key 0 against a single holder: Invalid Field.
        reg(&r, &B, 2);
        assert_eq!(r.acquire(&B, AcquireAction::PREEMPT, t, 2, 77), Err(conflict()));
        assert_eq!(r.acquire(&B, AcquireAction::PREEMPT, t, 2, 0), Err(Status::INVALID_FIELD.with_dnr()));
        // The holder preempting itself changes the type.
        r.acquire(&A, AcquireAction::PREEMPT, ReservationType::EXCLUSIVE_ACCESS, 1, 1).unwrap();
        assert_eq!(r.report().rtype, ReservationType::EXCLUSIVE_ACCESS);
        // No reservation: preempt unregisters the hosts with that key.
        r.release(&A, ReleaseAction::RELEASE, ReservationType::EXCLUSIVE_ACCESS, 1).unwrap();
        r.acquire(&A, AcquireAction::PREEMPT, t, 1, 2).unwrap();
        assert_eq!(r.report().regctl, 1);
        assert_eq!(r.acquire(&A, AcquireAction(3), t, 1, 2), Err(Status::INVALID_OPCODE.with_dnr()));
    }

    #[test]
    fn preempt_all_registrants_with_key_zero_takes_it_alone() {
        let r = Reservations::new();
        reg(&r, &A, 1);
        reg(&r, &B, 2);
        reg(&r, &C, 3);
        acquire(&r, &A, 1, ReservationType::WRITE_EXCLUSIVE_ALL_REGS).unwrap();
        let a = r.acquire(&C, AcquireAction::PREEMPT, ReservationType::WRITE_EXCLUSIVE, 3, 0).unwrap();
        assert_eq!(a.notices.len(), 2);
        assert_eq!(a.preempted, vec![A, B]);
        let rep = r.report();
        assert_eq!((rep.rtype, rep.regctl), (ReservationType::WRITE_EXCLUSIVE, 1));
        assert_eq!(rep.registrants[0].hostid, C);
        assert_eq!(may(&r, &A), (true, false));
    }

    #[test]
    fn admit_follows_every_change() {
        let r = Reservations::new();
        let (mut qa, mut qb) = (InflightCache::default(), InflightCache::default());
        let admit = |h: &HostId, a: Access, q: &mut InflightCache| r.admit(h, a, q).map(drop);
        reg(&r, &A, 1);
        reg(&r, &B, 2);
        assert_eq!(admit(&B, Access::Write, &mut qb), Ok(()), "no reservation");
        acquire(&r, &A, 1, ReservationType::WRITE_EXCLUSIVE).unwrap();
        assert_eq!(admit(&B, Access::Write, &mut qb), Err(conflict()));
        assert_eq!(admit(&B, Access::Read, &mut qb), Ok(()));
        assert_eq!(admit(&A, Access::Write, &mut qa), Ok(()));
        // The holder turns it into Exclusive Access: B's memo is stale.
        r.acquire(&A, AcquireAction::PREEMPT, ReservationType::EXCLUSIVE_ACCESS, 1, 1).unwrap();
        assert_eq!(admit(&B, Access::Read, &mut qb), Err(conflict()));
        // Registrants Only: B, registered, may; unregistered, may not.
        r.acquire(&A, AcquireAction::PREEMPT, ReservationType::EXCLUSIVE_ACCESS_REG_ONLY, 1, 1).unwrap();
        assert_eq!(admit(&B, Access::Write, &mut qb), Ok(()));
        r.register(&B, RegisterAction::UNREGISTER, false, (2, 0), 0).unwrap();
        assert_eq!(admit(&B, Access::Write, &mut qb), Err(conflict()));
        r.release(&A, ReleaseAction::RELEASE, ReservationType::EXCLUSIVE_ACCESS_REG_ONLY, 1).unwrap();
        assert_eq!(admit(&B, Access::Write, &mut qb), Ok(()));
        // A command let through while a Preempt and Abort waits for its host:
        // Internal Error, after the reservation check.
        let held = r.admit(&B, Access::Write, &mut qb).unwrap();
        assert_eq!(r.abort(&[B], Box::new(|| {})), 1);
        assert_eq!(admit(&B, Access::Read, &mut qb), Err(Status::INTERNAL));
        acquire(&r, &A, 1, ReservationType::WRITE_EXCLUSIVE).unwrap();
        assert_eq!(admit(&B, Access::Write, &mut qb), Err(conflict()), "the conflict comes first");
        drop(held);
        assert_eq!(admit(&B, Access::Read, &mut qb), Ok(()));
    }

    #[test]
    fn clear_drops_everything() {
        let r = Reservations::new();
        reg(&r, &A, 1);
        reg(&r, &B, 2);
        acquire(&r, &A, 1, ReservationType::EXCLUSIVE_ACCESS).unwrap();
        assert_eq!(r.release(&B, ReleaseAction::CLEAR, ReservationType(0), 9), Err(conflict()));
        let n = r.release(&B, ReleaseAction::CLEAR, ReservationType(0), 2).unwrap();
        assert_eq!(n, vec![Notice { hostid: A, kind: NotificationType::RESERVATION_PREEMPTED }]);
        let rep = r.report();
        assert_eq!((rep.rtype, rep.regctl, rep.generation), (ReservationType::NONE, 0, 3));
        assert_eq!(may(&r, &C), (true, true));
        assert_eq!(r.release(&B, ReleaseAction(2), ReservationType(0), 2), Err(conflict()));
    }

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("nvmeof-resv-{}-{name}", std::process::id()))
    }

    #[test]
    fn persists_through_power_loss_once_asked() {
        let path = temp_path("ptpl");
        let _ = std::fs::remove_file(&path);
        let r = Reservations::persistent(path.clone(), FileFormat::Nvmeof).unwrap();
        assert!(r.ptpl_capable() && !r.ptpl());
        // PTPL off: nothing is written, and a restart starts empty.
        reg(&r, &A, 1);
        assert!(!path.exists());
        // Register with CPTPL 11b (as Linux's pr_ops) turns it on and writes the state.
        r.register(&B, RegisterAction::REGISTER, false, (0, u64::MAX), CPTPL_SET).unwrap();
        assert!(r.ptpl() && r.report().ptpls);
        acquire(&r, &B, u64::MAX, ReservationType::EXCLUSIVE_ACCESS_REG_ONLY).unwrap();
        let before = r.report();
        drop(r);
        let again = Reservations::persistent(path.clone(), FileFormat::Nvmeof).unwrap();
        assert_eq!(again.report(), before);
        assert_eq!(may(&again, &C), (false, false), "the restored reservation is enforced");
        assert_eq!(may(&again, &A), (true, true));
        // Set Features 83h off: the file keeps no state any more.
        again.set_ptpl(false).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("ptpl = false") && !text.contains("registrant"), "{text}");
        assert_eq!(Reservations::persistent(path.clone(), FileFormat::Nvmeof).unwrap().report().regctl, 0);
        // Without a file, CPTPL is ignored (nvmet) and Features 83h is refused.
        let plain = Reservations::new();
        plain.register(&A, RegisterAction::REGISTER, false, (0, 1), CPTPL_SET).unwrap();
        assert!(!plain.ptpl());
        assert_eq!(plain.set_ptpl(true), Err(Status::INVALID_FIELD.with_dnr()));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_unwritable_file_fails_the_command_and_changes_nothing() {
        let path = temp_path("gone").join("dir-that-does-not-exist").join("ns.resv");
        let r = Reservations::persistent(path, FileFormat::Nvmeof).unwrap();
        assert_eq!(r.register(&A, RegisterAction::REGISTER, false, (0, 1), CPTPL_SET), Err(Status::INTERNAL));
        let rep = r.report();
        assert_eq!((rep.regctl, rep.generation, rep.ptpls), (0, 0, false));
    }

    #[test]
    fn a_bad_file_is_an_error() {
        for (name, text) in [
            ("junk", "this is not toml"),
            ("badkey", "ptpl = true\ngeneration = 1\n[[registrant]]\nhostid = \"0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a\"\nrkey = \"zz\"\n"),
            ("holder", "ptpl = true\ngeneration = 1\nholder = \"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b\"\nrtype = 1\n"),
        ] {
            let path = temp_path(name);
            std::fs::write(&path, text).unwrap();
            let e = Reservations::persistent(path.clone(), FileFormat::Nvmeof).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{name}: {e}");
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
            std::fs::remove_file(&path).unwrap();
        }
    }

    const BDEV: &str = "6a1f0c2e-3b4d-4e5f-8a9b-0c1d2e3f4a5b";
    const A_UUID: &str = "0a0a0a0a-0a0a-0a0a-0a0a-0a0a0a0a0a0a";
    const B_UUID: &str = "0b0b0b0b-0b0b-0b0b-0b0b-0b0b0b0b0b0b";
    const C_UUID: &str = "0c0c0c0c-0c0c-0c0c-0c0c-0c0c0c0c0c0c";

    fn spdk(bdev_uuid: [u8; 16]) -> FileFormat {
        FileFormat::Spdk { bdev_uuid }
    }

    /// SPDK's `ptpl_file` as `nvmf_ns_reservation_update_json` writes it
    /// (compact JSON, its key order) is restored and written back the same
    /// way, keeping the bdev UUID it names.
    #[test]
    fn spdk_files_are_read_and_written_as_spdk_does() {
        let path = temp_path("spdk");
        let other_uuid = [0x99; 16];
        // Host B holds Write Exclusive with key 0xb2; A and B registered.
        let saved = format!(
            r#"{{"ptpl":true,"rtype":1,"crkey":178,"bdev_uuid":"{BDEV}","holder_uuid":"{B_UUID}","registrants":[{{"rkey":161,"host_uuid":"{A_UUID}"}},{{"rkey":178,"host_uuid":"{B_UUID}"}}]}}"#
        );
        std::fs::write(&path, &saved).unwrap();
        let r = Reservations::persistent(path.clone(), spdk(other_uuid)).unwrap();
        let bdev = nvmeof_common::spec::nqn::parse_uuid(BDEV).unwrap();
        assert_eq!(r.file(), Some((path.as_path(), spdk(bdev))), "the file's bdev UUID is kept");
        let rep = r.report();
        assert_eq!(
            (rep.rtype, rep.regctl, rep.ptpls, rep.generation),
            (ReservationType::WRITE_EXCLUSIVE, 2, true, 0)
        );
        let regs: Vec<(HostId, u64, bool)> =
            rep.registrants.iter().map(|g| (g.hostid, g.rkey, g.holds)).collect();
        assert_eq!(regs, [(A, 0xa1, false), (B, 0xb2, true)]);
        assert_eq!(may(&r, &A), (true, false), "restored and enforced");
        // A change is written back in SPDK's form.
        reg(&r, &C, 0xc3);
        let want = format!(
            r#"{{"ptpl":true,"rtype":1,"crkey":178,"bdev_uuid":"{BDEV}","holder_uuid":"{B_UUID}","registrants":[{{"rkey":161,"host_uuid":"{A_UUID}"}},{{"rkey":178,"host_uuid":"{B_UUID}"}},{{"rkey":195,"host_uuid":"{C_UUID}"}}]}}"#
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), want);
        // All Registrants: SPDK writes no holder and the acquirer's key (C's);
        // read back, the first registrant is the holder (every registrant holds it).
        r.release(&B, ReleaseAction::RELEASE, ReservationType::WRITE_EXCLUSIVE, 0xb2).unwrap();
        acquire(&r, &C, 0xc3, ReservationType::EXCLUSIVE_ACCESS_ALL_REGS).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with(r#"{"ptpl":true,"rtype":6,"crkey":195,"bdev_uuid""#), "{text}");
        assert!(text.contains(r#""holder_uuid":"","#), "{text}");
        let before = r.report();
        drop(r);
        let again = Reservations::persistent(path.clone(), spdk(other_uuid)).unwrap();
        assert_eq!(again.report(), ReservationStatus { generation: 0, ..before });
        // PTPL off: SPDK empties the file; read back, nothing persists, and
        // the bdev UUID the file no longer names comes from the namespace.
        again.set_ptpl(false).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        let empty = Reservations::persistent(path.clone(), spdk(other_uuid)).unwrap();
        assert_eq!((empty.report().regctl, empty.ptpl()), (0, false));
        empty.register(&A, RegisterAction::REGISTER, false, (0, 1), CPTPL_SET).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains(r#""bdev_uuid":"99999999-9999-9999-9999-999999999999","holder_uuid":"","#),
            "{text}"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn registrants_are_bounded() {
        let host = |i: usize| {
            let mut h = [0u8; 16];
            h[..8].copy_from_slice(&(i as u64).to_be_bytes());
            h
        };
        for (r, max) in [
            (Reservations::new(), MAX_REGISTRANTS),
            (Reservations::persistent(temp_path("bounded"), spdk([0; 16])).unwrap(), SPDK_MAX_REGISTRANTS),
        ] {
            assert_eq!(r.max_registrants(), max);
            for i in 0..max {
                reg(&r, &host(i), i as u64 + 1);
            }
            let before = r.report();
            let e = r.register(&host(max), RegisterAction::REGISTER, false, (0, 7), 0);
            assert_eq!(e, Err(Status::INTERNAL), "one more host");
            assert_eq!(r.report(), before, "nothing changed");
            // Those registered still act; one leaving makes room.
            r.register(&host(0), RegisterAction::REPLACE, false, (1, 9), 0).unwrap();
            r.register(&host(1), RegisterAction::UNREGISTER, false, (2, 0), 0).unwrap();
            reg(&r, &host(max), 7);
            assert_eq!(r.report().regctl as usize, max);
        }
    }

    #[test]
    fn a_bad_spdk_file_is_an_error() {
        let file = |rtype: u32, crkey: u64, holder: &str, regs: &[(u64, &str)]| {
            let regs: Vec<String> =
                regs.iter().map(|(k, h)| format!(r#"{{"rkey":{k},"host_uuid":"{h}"}}"#)).collect();
            format!(
                r#"{{"ptpl":true,"rtype":{rtype},"crkey":{crkey},"bdev_uuid":"{BDEV}","holder_uuid":"{holder}","registrants":[{}]}}"#,
                regs.join(",")
            )
        };
        for (name, text) in [
            ("toml", "ptpl = true\ngeneration = 1\n".to_string()),
            ("no-bdev", r#"{"ptpl":true,"registrants":[]}"#.to_string()),
            ("bad-host", file(0, 0, "", &[(1, "0a0a")])),
            ("twice", file(0, 0, "", &[(1, A_UUID), (2, A_UUID)])),
            ("stranger", file(1, 1, C_UUID, &[(1, A_UUID)])),
            ("no-holder", file(2, 1, "", &[(1, A_UUID)])),
            ("crkey", file(1, 7, A_UUID, &[(1, A_UUID)])),
            ("rtype", file(7, 1, A_UUID, &[(1, A_UUID)])),
            ("rtype-wide", file(0x101, 1, A_UUID, &[(1, A_UUID)])),
        ] {
            let path = temp_path(&format!("spdk-{name}"));
            std::fs::write(&path, text).unwrap();
            let e = Reservations::persistent(path.clone(), spdk([0; 16])).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{name}: {e}");
            std::fs::remove_file(&path).unwrap();
        }
        // PTPL off in the file: nothing else is looked at (SPDK restores nothing).
        let path = temp_path("spdk-off");
        std::fs::write(&path, file(7, 7, "x", &[(1, A_UUID)]).replace("\"ptpl\":true", "\"ptpl\":false"))
            .unwrap();
        assert_eq!(Reservations::persistent(path.clone(), spdk([0; 16])).unwrap().report().regctl, 0);
        std::fs::remove_file(&path).unwrap();
    }
}
