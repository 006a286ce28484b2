//! Asynchronous events (NVMe 2.0 §5.2, Asynchronous Event Request), handled
//! the way the Linux host does: at each association setup the host enables
//! the notices the controller supports and it understands (Set Features
//! Asynchronous Event Configuration, `nvme_enable_aen`), keeps one
//! Asynchronous Event Request outstanding (`NVME_NR_AEN_COMMANDS`), and on a
//! notice reads the log page it names with RAE clear, which re-arms that
//! notice at the controller (`nvme_handle_aen_notice`): the Changed Namespace
//! List, the ANA log, the discovery log. Applications see the result as a
//! [`ControllerEvent`] ([`crate::Controller::events`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use nvmeof_common::opcode::AdminOpcode;
use nvmeof_common::spec::discovery::DiscoveryLog;
use nvmeof_common::spec::features::{aec, aer_notice, AerType, AsyncEvent};
use nvmeof_common::spec::log::AnaLog;
use nvmeof_common::spec::reservation::{NotificationType, ReservationNotification};
use nvmeof_common::Sqe;
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

use crate::controller::{Controller, ControllerState, Core, Handle};
use crate::driver::Payload;
use crate::error::Error;

/// Events buffered per [`crate::Controller::events`] receiver before the
/// oldest are dropped (the receiver then sees `RecvError::Lagged`).
const EVENT_BUFFER: usize = 64;

/// How long an AER may stay outstanding: as long as the association lives
/// (the queue caps any timeout at decades). Linux sends it without a timeout.
const AER_TIMEOUT: Duration = Duration::MAX;

/// After an AER failed without an NVMe status and the association still
/// looks live, the next one waits this long (a connection loss switches the
/// controller to reconnecting well within it).
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// What an Asynchronous Event Request reported, with the log page the host
/// read to re-arm it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ControllerEvent {
    /// Namespace Attribute Changed (notice 00h): the Changed Namespace List
    /// (log 04h) as read. `[0xFFFF_FFFF]` means more than 1024 changed.
    /// Namespaces added, removed or resized are among them; re-read their
    /// Identify data ([`crate::Controller::active_namespaces`],
    /// [`crate::Controller::namespace`]).
    NamespacesChanged(Vec<u32>),
    /// Asymmetric Namespace Access change (notice 03h): the ANA log as read,
    /// each group's state through this controller's port.
    AnaChanged(AnaLog),
    /// Discovery log page change (notice F0h) on a discovery controller:
    /// the whole discovery log as read.
    DiscoveryChanged(DiscoveryLog),
    /// Reservation Log Page Available (I/O command set event, log 80h):
    /// the reservation notifications read from the log, oldest first, one
    /// read per entry until it is empty (as many as the controller kept).
    /// What they say concerns this host: its registration preempted, a
    /// reservation it is registered for released or preempted. The Linux
    /// host reads no log for this event (a uevent only); this library does,
    /// so an application hears it lost its registration.
    Reservations(Vec<ReservationNotification>),
    /// Any other event, as the completion reported it. The host read no log
    /// page for it: reading `lid` with RAE clear re-arms the event. Also
    /// reported for one of the notices above when reading its log failed.
    Other(AsyncEvent),
}

/// The Asynchronous Event Request command (no fields besides the opcode).
fn aer_sqe() -> Sqe {
    Sqe::new(AdminOpcode::ASYNC_EVENT.0)
}

/// Keeps an AER outstanding while the controller is live and turns each
/// completion into a [`ControllerEvent`]. Holds the shared state but not the
/// handle: it ends when the last [`Controller`] is dropped, the controller
/// shuts down or is lost for good.
pub(crate) async fn run(core: Arc<Core>, handle: Weak<Handle>) {
    let mut state = core.state.subscribe();
    loop {
        let now = *state.borrow_and_update();
        match now {
            ControllerState::Live => {}
            ControllerState::Reconnecting => {
                if state.changed().await.is_err() {
                    return;
                }
                continue;
            }
            ControllerState::Failed | ControllerState::Shutdown => return,
        }
        let epoch = core.epoch.load(Ordering::SeqCst);
        if core.info().async_events == 0 {
            // Nothing enabled for this association; a reconnect may change that.
            if state.changed().await.is_err() {
                return;
            }
            continue;
        }
        // A setup command: it fails at once when the connection drops instead
        // of waiting to be resubmitted on the next association, which first
        // needs its events enabled again.
        match core.admin.execute(aer_sqe(), Payload::None, Some(AER_TIMEOUT), true).await {
            Ok(cqe) => {
                let Some(h) = handle.upgrade() else { return };
                let ctrl = Controller::from_handle(h);
                let ev = read_logs(&ctrl, AsyncEvent::from_dw0(cqe.dw0())).await;
                // No receiver is not an error: the log was still read, as the
                // controller needs for its next notice.
                let _ = core.events.send(ev);
            }
            Err(e @ Error::Nvme { .. }) => {
                // Linux stops asking after an error status (for one,
                // Asynchronous Event Request Limit Exceeded when the
                // application sends its own); the next association asks again.
                warn!(epoch, error = %e, "Asynchronous Event Request refused; no more events on this association");
                while core.epoch.load(Ordering::SeqCst) == epoch {
                    if state.changed().await.is_err() {
                        return;
                    }
                }
            }
            Err(e) => {
                debug!(epoch, error = %e, "Asynchronous Event Request ended without a completion");
                if core.epoch.load(Ordering::SeqCst) == epoch && *state.borrow() == ControllerState::Live {
                    // Wait for the state change a connection loss brings, bounded.
                    let _ = tokio::time::timeout(RETRY_PAUSE, state.changed()).await;
                }
            }
        }
    }
}

/// Reads the log page a notice names with RAE clear (re-arming it) and
/// returns the event with what it says.
async fn read_logs(ctrl: &Controller, ev: AsyncEvent) -> ControllerEvent {
    if ev == AsyncEvent::RESERVATION_LOG {
        return match reservation_notifications(ctrl).await {
            Ok(v) => {
                info!(event = ?ev, notifications = v.len(), "asynchronous event");
                ControllerEvent::Reservations(v)
            }
            Err(err) => {
                warn!(event = ?ev, error = %err, "cannot read the reservation notification log");
                ControllerEvent::Other(ev)
            }
        };
    }
    if ev.ty != AerType::NOTICE {
        return ControllerEvent::Other(ev);
    }
    let r = match ev.info {
        aer_notice::NS_CHANGED => match ctrl.changed_namespaces().await {
            // The handles' sizes first: the application that hears of the
            // change finds them current.
            Ok(list) => {
                ctrl.refresh_namespace_sizes(&list).await;
                Ok(ControllerEvent::NamespacesChanged(list))
            }
            Err(e) => Err(e),
        },
        aer_notice::ANA => ctrl.ana_log().await.map(ControllerEvent::AnaChanged),
        aer_notice::DISC_CHANGED => ctrl.discovery_log().await.map(ControllerEvent::DiscoveryChanged),
        _ => return ControllerEvent::Other(ev),
    };
    match r {
        Ok(e) => {
            info!(event = ?ev, "asynchronous event");
            e
        }
        Err(err) => {
            warn!(event = ?ev, error = %err, "cannot read the log page of an asynchronous event");
            ControllerEvent::Other(ev)
        }
    }
}

/// Most reads of the reservation log per event: more than any controller
/// keeps (nvmet and ours queue 64), so a log that never empties ends.
const MAX_RESERVATION_READS: usize = 256;

/// Reads the Reservation Notification log until it is empty.
async fn reservation_notifications(ctrl: &Controller) -> crate::error::Result<Vec<ReservationNotification>> {
    let mut v = Vec::new();
    for _ in 0..MAX_RESERVATION_READS {
        let n = ctrl.reservation_log().await?;
        if n.kind == NotificationType::EMPTY {
            break;
        }
        let last = n.available == 0;
        v.push(n);
        if last {
            break;
        }
    }
    Ok(v)
}

/// The events to enable for a controller with `oaes` (Identify Controller
/// OAES): those it reports of the ones the Linux host enables
/// (`NVME_AEN_SUPPORTED`, [`aec::LINUX_HOST_SUPPORTED`]).
pub(crate) fn enabled_for(oaes: u32) -> u32 {
    oaes & aec::LINUX_HOST_SUPPORTED
}

/// Broadcast channel for the events of one controller.
pub(crate) fn channel() -> broadcast::Sender<ControllerEvent> {
    broadcast::channel(EVENT_BUFFER).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enables_what_both_sides_support() {
        // nvmet's OAES for an I/O controller (NVMET_AEN_CFG_OPTIONAL): 900h.
        assert_eq!(enabled_for(0x900), aec::NS_ATTR | aec::ANA_CHANGE);
        // A discovery controller's: discovery log change only.
        assert_eq!(enabled_for(1 << 31), aec::DISC_CHANGE);
        // Telemetry and the rest are not read by this host, so not enabled.
        assert_eq!(enabled_for(aec::TELEMETRY | aec::LBA_STATUS), 0);
    }
}
