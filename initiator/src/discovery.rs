//! Discovery: read the discovery log of a discovery controller (reference §7).

use std::net::{IpAddr, SocketAddr};

use nvmeof_common::spec::discovery::{DiscoveryLog, DiscoveryLogEntry, SubType, TrType, TREQ_DISABLE_SQFLOW};
use nvmeof_common::spec::DISCOVERY_NQN;

use crate::controller::Controller;
use crate::error::{Error, Result};
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

/// Connects to the subsystem a discovery log entry names (TRADDR, TRSVCID,
/// SUBNQN), the way `nvme connect-all` does through libnvme.
///
/// Where the entry's TREQ says the port supports disabling SQ flow control
/// (bit 2, set by the Linux target on every port and by ours), the Connect asks
/// for it: successful reads then complete with the C2HData SUCCESS flag and no
/// response capsule (reference §3.6). Entries for other transports, or with an
/// address or service that is not a numeric IP address and port, are refused
/// with [`Error::InvalidArgument`].
pub async fn connect_entry(entry: &DiscoveryLogEntry, mut opts: ConnectOptions) -> Result<Controller> {
    opts.disable_sqflow |= entry.treq & TREQ_DISABLE_SQFLOW != 0;
    Controller::connect(entry_addr(entry)?, &entry.subnqn, opts).await
}

/// The socket address of a TCP discovery log entry.
fn entry_addr(entry: &DiscoveryLogEntry) -> Result<SocketAddr> {
    if entry.trtype != TrType::TCP {
        return Err(Error::InvalidArgument(format!("transport type {} is not TCP", entry.trtype.0)));
    }
    let ip: IpAddr = entry
        .traddr
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("TRADDR {:?} is not an IP address", entry.traddr)))?;
    let port: u16 = entry
        .trsvcid
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("TRSVCID {:?} is not a port number", entry.trsvcid)))?;
    Ok(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvmeof_common::spec::discovery::AdrFam;

    fn entry(trtype: TrType, traddr: &str, trsvcid: &str) -> DiscoveryLogEntry {
        let e = DiscoveryLogEntry::tcp(
            SubType::NVME,
            "nqn.2026-11.io.nvmeof:x",
            AdrFam::IPV4,
            traddr,
            trsvcid,
            1,
        );
        DiscoveryLogEntry { trtype, ..e }
    }

    #[test]
    fn entry_addresses() {
        assert_eq!(
            entry_addr(&entry(TrType::TCP, "127.0.0.1", "4420")).unwrap(),
            "127.0.0.1:4420".parse().unwrap()
        );
        assert_eq!(entry_addr(&entry(TrType::TCP, "::1", "4421")).unwrap(), "[::1]:4421".parse().unwrap());
        for bad in [
            entry(TrType::RDMA, "127.0.0.1", "4420"),
            entry(TrType::TCP, "host.example", "4420"),
            entry(TrType::TCP, "127.0.0.1", "nvme"),
            entry(TrType::TCP, "127.0.0.1", "70000"),
        ] {
            assert!(matches!(entry_addr(&bad), Err(Error::InvalidArgument(_))), "{bad:?}");
        }
    }
}
