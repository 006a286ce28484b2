//! Discovery: read the discovery log of a discovery controller (reference §7).

use nvmeof_common::spec::discovery::{DiscoveryLog, DiscoveryLogEntry, SubType, TrType};
use nvmeof_common::spec::DISCOVERY_NQN;

use crate::controller::Controller;
use crate::error::Result;
use crate::options::ConnectOptions;

/// Connects to the discovery controller at `addr` (well-known discovery NQN),
/// reads the whole discovery log and disconnects. `opts` should usually be
/// [`ConnectOptions::discovery`] (with the host identity set if the target
/// filters by host NQN).
pub async fn discover(addr: impl tokio::net::ToSocketAddrs, opts: ConnectOptions) -> Result<DiscoveryLog> {
    let ctrl = Controller::connect(addr, DISCOVERY_NQN, opts).await?;
    let log = ctrl.discovery_log().await;
    let closed = ctrl.shutdown().await;
    let log = log?;
    if let Err(e) = closed {
        tracing::debug!(error = %e, "discovery controller shutdown failed");
    }
    Ok(log)
}

/// The entries of `log` that name NVM subsystems reachable over TCP (what
/// `nvme connect-all` connects to: no referrals, no current-discovery entries).
pub fn nvme_subsystems(log: &DiscoveryLog) -> impl Iterator<Item = &DiscoveryLogEntry> {
    log.entries.iter().filter(|e| e.subtype == SubType::NVME && e.trtype == TrType::TCP)
}
