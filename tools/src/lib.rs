//! Shared code of the bundled tools: `nvmeof-probe` (latency/throughput
//! probe) and `nvmeof` (admin CLI).
//!
//! # Layout
//! - [`probe`]: the probe engine: [`probe::ProbeOptions`] (the clap options of
//!   `nvmeof-probe`), [`probe::run_probe`] / [`probe::run_probe_with`] →
//!   [`probe::Report`]; one tokio task per in-flight slot, each bound to an
//!   I/O queue; HdrHistogram latency recording; ping mode.
//! - [`blocksizes`]: request sizes per direction and weighted splits (`--bs
//!   R,W,T`, `--bssplit`), as fio's `bs` and `bssplit`.
//! - [`report`]: fio-like text, fio's JSON layout ([`probe::Report::to_fio_json`]),
//!   ioping-like ping lines and summary, progress lines.
//! - [`hdrlog`]: HdrHistogram interval log output (`--hdr-log`).
//! - [`plot`]: SVG latency-percentile and IOPS-over-time charts (`--plot`).
//! - [`pattern`]: self-describing verify blocks (LBA + generation).
//! - [`pacer`]: sub-millisecond waits for `--rate` (timerfd on Linux).
//! - [`admin`]: the `nvmeof` CLI (discover, identify, list, read, write).
//! - [`discovery_conf`]: nvme-cli's `/etc/nvme/discovery.conf` (`nvmeof discover` without an address).
//! - [`nvme_config`]: nvme-cli's `/etc/nvme/config.json` (DH-HMAC-CHAP keys and settings per host, subsystem, port).
//! - [`error`]: [`error::ToolError`], exit codes, explanations of NVMe statuses.
//! - [`util`]: size/duration/address parsing and formatting.
//!
//! # Example
//! ```no_run
//! # async fn f() -> Result<(), nvmeof_tools::error::ToolError> {
//! use nvmeof_tools::probe::{run_probe, ProbeOptions};
//! let opts = ProbeOptions::parse_args(["nvmeof-probe", "127.0.0.1", "--nqn", "nqn.x", "--time", "2s"]).unwrap();
//! let report = run_probe(&opts).await?;
//! let json = report.to_fio_json();
//! assert!(json["jobs"][0]["read"]["iops"].as_f64().is_some());
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![recursion_limit = "256"]

pub mod admin;
pub mod blocksizes;
pub mod discovery_conf;
pub mod distribution;
pub mod error;
pub mod hdrlog;
pub mod nvme_config;
pub mod pacer;
pub mod pattern;
pub mod plot;
pub mod probe;
pub mod report;
pub mod util;
pub mod zbd;

pub use error::{ExitCode, ToolError};
pub use probe::{run_probe, run_probe_with, Hooks, ProbeEvent, ProbeOptions, Report};

/// Logs to stderr through `tracing`, errors only unless `RUST_LOG` says more
/// (the binaries' stdout carries their reports).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
