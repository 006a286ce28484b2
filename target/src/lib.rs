//! User-space NVMe-over-TCP target.
//!
//! # Layout
//! Shaped like the Linux kernel's nvmet:
//! - [`transport::tcp`]: listeners and one task per connection (= queue).
//! - [`queue`]: the sans-IO per-queue state machine (ICReq, capsules,
//!   R2T/H2CData, C2HData, TermReq), command slots and output batching.
//! - [`cmd`]: parse/execute of fabrics, admin, discovery and I/O commands.
//! - [`core`]: target registry, subsystems, namespaces, controllers
//!   (CC/CSTS, keep-alive, AEN).
//! - [`backend`]: RAM, file and block-device storage behind a
//!   submission/completion interface.
//! - [`config`] and [`server`]: configuration (CLI or TOML) and running it;
//!   [`metrics`]: Prometheus metrics of a running target; [`service`]:
//!   systemd readiness, reload, stop and watchdog notifications;
//!   [`nvmetcli`] and [`spdk`]: converting a saved Linux kernel target or SPDK
//!   configuration.
//!
//! Data flows socket → `QueueState::handle_bytes` → `cmd::parse` → (R2T …) →
//! `cmd::execute` → backend → `QueueState::handle_completion` → C2HData /
//! CapsuleResp → socket. NVMe status values cross every layer.
#![deny(missing_docs)]

pub mod backend;
pub mod check;
pub mod cmd;
pub mod config;
pub mod core;
pub mod metrics;
pub mod nvmetcli;
pub mod queue;
pub mod server;
pub mod service;
pub mod spdk;
pub mod transport;
