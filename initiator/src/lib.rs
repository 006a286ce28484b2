//! Async NVMe-over-TCP initiator (host) library.
//!
//! # Layout
//! - [`queue`]: the sans-IO per-queue state machine (ICReq/ICResp, CID
//!   allocation with a generation counter, in-capsule vs R2T writes, H2CData
//!   splitting, C2HData assembly and the SUCCESS flag, per-command deadlines).
//!   No sockets, no clock: time comes in as `Instant` arguments.
//! - `driver` (private): one tokio task per queue connection owns the socket
//!   and a [`queue::Queue`]; callers hold preallocated completion tickets and
//!   push submissions; each wake-up drains all submissions into one vectored
//!   write and decodes everything readable.
//! - [`Controller`] (`controller`): association setup (Connect, CC enable,
//!   Identify, Number of Queues, I/O queue Connects), admin commands,
//!   keep-alive and reconnect with backoff, orderly shutdown.
//! - `auth` (private): DH-HMAC-CHAP in-band authentication of a queue whose
//!   Connect asks for it ([`ConnectOptions::dhchap_secret`]), the protocol
//!   steps apart from the commands that carry them.
//! - [`Namespace`] (`namespace`): block I/O (read/write/FUA, flush, write
//!   zeroes, deallocate, compare, batches), split by MDTS.
//! - [`ControllerEvent`] (`events`): asynchronous events; a task per
//!   controller keeps an Asynchronous Event Request outstanding and reads each
//!   notice's log ([`Controller::events`]).
//! - [`MultipathNamespace`] (`multipath`): one namespace through several
//!   controllers, path choice and failover by ANA state; its paths given,
//!   or found in the discovery log ([`MultipathNamespace::discover`]).
//! - [`discover`] (`discovery`): discovery log retrieval; [`discover_all`] follows referrals;
//!   [`subsystem_paths`] gives the paths the logs list to a subsystem;
//!   [`discover_nqn`] and [`discover_all_nqn`] connect by a unique discovery NQN.
//! - [`ConnectOptions`], [`HostIdentity`], [`ReconnectPolicy`] (`options`).
//! - [`Error`] (`error`): typed errors.
//!
//! Data flow: `Namespace::read` → ticket + [`queue::Command`] → driver task →
//! `Queue::submit` → CapsuleCmd bytes → socket; socket → `PduDecoder` →
//! `Queue::handle_pdu` → `Event::Data` (zero-copy `Bytes` slices parked in the
//! ticket) + `Event::Completion` → caller wakes and copies the data into its
//! buffer (the only copy).
//!
//! Reads into owned buffers ([`Namespace::read_buf`], [`Namespace::read_bytes`])
//! skip that copy: the ticket owns the buffer while the command runs, and once
//! the driver has parsed a C2HData header ([`queue::C2hHeader`],
//! [`queue::Queue::c2h_begin`]) it reads the payload from the socket straight
//! into it. Reads into a borrowed `&mut [u8]` cannot work that way soundly: a
//! pending future may be leaked with `mem::forget`, which ends the borrow
//! without running any destructor, so the driver task could still write into
//! memory the caller has freed. Only the caller's task (inside its own
//! `poll`) touches a borrowed slice. [`Controller::rx_stats`] tells which path
//! the bytes took.
//!
//! Everything runs on the caller's tokio runtime (multi-thread recommended):
//! [`Controller::connect`] spawns one driver task per queue plus a supervisor
//! task (keep-alive, reconnect) and an events task; a [`MultipathNamespace`]
//! adds one task per path that follows its ANA state.
//!
//! # Example
//! ```no_run
//! # async fn f() -> nvmeof_initiator::Result<()> {
//! use nvmeof_initiator::{ConnectOptions, Controller};
//! let ctrl = Controller::connect("127.0.0.1:4420", "nqn.2024-01.io.example:disk", ConnectOptions::default()).await?;
//! let ns = ctrl.namespace(1).await?;
//! let mut buf = vec![0u8; 4096];
//! ns.read(0, &mut buf).await?;
//! ns.write(8, &buf).await?;
//! ctrl.shutdown().await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod auth;
mod controller;
mod discovery;
mod driver;
mod error;
mod events;
mod multipath;
mod namespace;
mod options;
pub mod queue;

pub use auth::Authentication;
pub use controller::{Controller, ControllerInfo, ControllerState};
pub use discovery::{
    connect_entry, discover, discover_all, discover_all_nqn, discover_nqn, nvme_subsystems, subsystem_paths,
    DiscoveredLog, MAX_DISCOVERY_SERVICES,
};
pub use driver::{Payload, RxStats};
pub use error::{AuthError, CommandInfo, Error, Result};
pub use events::ControllerEvent;
pub use multipath::{MultipathNamespace, MultipathOptions, PathPolicy, PathStatus};
pub use namespace::{Batch, IoFlags, Namespace};
/// TCP congestion control names for [`ConnectOptions::congestion_control`].
pub use nvmeof_net::CongestionControl;
pub use options::{ConnectOptions, HostIdentity, QueueSelect, ReconnectPolicy};

/// The codec crate, re-exported for SQE/CQE/status and spec types.
pub use nvmeof_common as common;
