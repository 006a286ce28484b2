//! Service-manager notifications: systemd's `sd_notify(3)` protocol (through
//! the `sd-notify` crate), so `Type=notify` units (target/examples/
//! nvmeof-target.service) know when the target serves, reloads and stops,
//! and what it is doing (`systemctl status` shows the STATUS line).
//!
//! Without `NOTIFY_SOCKET` in the environment (not started by systemd) every
//! call does nothing. A failed send is logged once at debug level and never
//! stops the target: a service manager that went away is not a reason to stop
//! serving hosts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sd_notify::NotifyState;
use tracing::debug;

/// Sends `states`; logs the first failure only.
fn notify(states: &[NotifyState<'_>]) {
    static FAILED: AtomicBool = AtomicBool::new(false);
    if let Err(e) = sd_notify::notify(states) {
        if !FAILED.swap(true, Ordering::Relaxed) {
            debug!(error = %e, "service manager notification failed");
        }
    }
}

/// Startup is complete: every port listens and every namespace is open
/// (`READY=1`, with `status`).
pub fn ready(status: &str) {
    notify(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A configuration reload starts (`RELOADING=1` with the monotonic clock's
/// `MONOTONIC_USEC`, which systemd 253+ requires of `Type=notify-reload`
/// services); [`ready`] ends it.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => notify(&[NotifyState::Reloading, now]),
        Err(_) => notify(&[NotifyState::Reloading]),
    }
}

/// Shutdown starts (`STOPPING=1`, with `status`).
pub fn stopping(status: &str) {
    notify(&[NotifyState::Stopping, NotifyState::Status(status)]);
}

/// The keep-alive interval the service manager asks for (`WATCHDOG_USEC`, for
/// this process), if any: half its timeout, as `sd_watchdog_enabled(3)`
/// advises.
pub fn watchdog_interval() -> Option<Duration> {
    sd_notify::watchdog_enabled().map(|t| t / 2).filter(|t| !t.is_zero())
}

/// Sends `WATCHDOG=1` every `interval` from a task on the current tokio
/// runtime, so that a runtime that stops running its tasks (a stuck target)
/// gets the unit restarted (`WatchdogSec=`, `Restart=on-failure`).
pub fn spawn_watchdog(interval: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            notify(&[NotifyState::Watchdog]);
        }
    })
}
