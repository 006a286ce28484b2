//! Discovery: read the discovery log of a discovery controller (reference §7).

use std::net::{IpAddr, SocketAddr};

use nvmeof_common::spec::discovery::{DiscoveryLog, DiscoveryLogEntry, SubType, TrType, TREQ_DISABLE_SQFLOW};
use nvmeof_common::spec::DISCOVERY_NQN;
use tracing::warn;

use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::options::ConnectOptions;

/// Connects to the discovery controller at `addr` (well-known discovery NQN),
/// reads the whole discovery log and disconnects. `opts` should usually be
/// [`ConnectOptions::discovery`] (with the host identity set if the target
/// filters by host NQN).
pub async fn discover(addr: impl tokio::net::ToSocketAddrs, opts: ConnectOptions) -> Result<DiscoveryLog> {
    discover_nqn(addr, DISCOVERY_NQN, opts).await
}

/// Like [`discover`], connecting by the discovery subsystem NQN `nqn`: a
/// service's unique discovery NQN (TP 8013; nvmet's `discovery_nqn`, as
/// `nvme discover --nqn` sends it), or the well-known one.
pub async fn discover_nqn(
    addr: impl tokio::net::ToSocketAddrs,
    nqn: &str,
    opts: ConnectOptions,
) -> Result<DiscoveryLog> {
    let ctrl = Controller::connect(addr, nqn, opts).await?;
    let log = ctrl.discovery_log().await;
    let closed = ctrl.shutdown().await;
    let log = log?;
    if let Err(e) = closed {
        tracing::debug!(error = %e, "discovery controller shutdown failed");
    }
    Ok(log)
}

/// Most discovery services [`discover_all`] reads, the first included.
pub const MAX_DISCOVERY_SERVICES: usize = 16;

/// One discovery service's log as [`discover_all`] read it.
#[derive(Debug)]
pub struct DiscoveredLog {
    /// The service's address.
    pub addr: SocketAddr,
    /// Its log, or why it could not be read.
    pub log: Result<DiscoveryLog>,
}

/// Reads the discovery log at `addr` and then, as `nvme connect-all` does,
/// the log of every discovery service its referrals name (SUBTYPE 1), and of
/// theirs in turn, breadth first. Each service is read once (a referral back
/// to one already read, or to itself, is skipped) and at most
/// [`MAX_DISCOVERY_SERVICES`] in all, so referral loops end.
///
/// The first log must be read (its error is returned); a referral that
/// cannot be reached is reported in its [`DiscoveredLog::log`] and the
/// others are still read, as nvme-cli goes on past a failed referral.
/// Entries for other transports, or with addresses that are not numeric, are
/// skipped. A referral is read through the NQN its entry names (libnvme's
/// `nvmf_connect_disc_entry` connects to its SUBNQN), the well-known one where
/// the entry's is empty.
pub async fn discover_all(addr: SocketAddr, opts: ConnectOptions) -> Result<Vec<DiscoveredLog>> {
    discover_all_nqn(addr, DISCOVERY_NQN, opts).await
}

/// Like [`discover_all`], reading the first log through the discovery NQN
/// `nqn` ([`discover_nqn`]).
pub async fn discover_all_nqn(
    addr: SocketAddr,
    nqn: &str,
    opts: ConnectOptions,
) -> Result<Vec<DiscoveredLog>> {
    let first = discover_nqn(addr, nqn, opts.clone()).await?;
    let mut out = vec![DiscoveredLog { addr, log: Ok(first) }];
    let mut next = 0;
    while next < out.len() {
        let referrals: Vec<(SocketAddr, String)> = match &out[next].log {
            Ok(log) => log
                .entries
                .iter()
                .filter(|e| e.subtype == SubType::REFERRAL)
                .filter_map(|e| {
                    let nqn = if e.subnqn.is_empty() { DISCOVERY_NQN } else { e.subnqn.as_str() };
                    Some((referral_addr(e)?, nqn.to_string()))
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        next += 1;
        for (r, nqn) in referrals {
            if out.iter().any(|d| d.addr == r) {
                continue;
            }
            if out.len() == MAX_DISCOVERY_SERVICES {
                warn!(referral = %r, max = MAX_DISCOVERY_SERVICES, "too many discovery services: not following more referrals");
                return Ok(out);
            }
            let log = discover_nqn(r, &nqn, opts.clone()).await;
            if let Err(e) = &log {
                warn!(referral = %r, error = %e, "cannot read the discovery log of a referral");
            }
            out.push(DiscoveredLog { addr: r, log });
        }
    }
    Ok(out)
}

/// A referral's address, or `None` (logged) where it is not TCP or not numeric.
fn referral_addr(e: &DiscoveryLogEntry) -> Option<SocketAddr> {
    entry_addr(e)
        .map_err(|err| warn!(traddr = %e.traddr, trsvcid = %e.trsvcid, error = %err, "skipping a referral"))
        .ok()
}

/// The entries of `log` that name NVM subsystems reachable over TCP (what
/// `nvme connect-all` connects to: no referrals, no current-discovery entries;
/// [`discover_all`] follows the referrals).
pub fn nvme_subsystems(log: &DiscoveryLog) -> impl Iterator<Item = &DiscoveryLogEntry> {
    log.entries.iter().filter(|e| e.subtype == SubType::NVME && e.trtype == TrType::TCP)
}

/// The paths to `subnqn` that `logs` list (e.g. [`discover_all`]'s, read
/// from a discovery service and its referrals): its [`nvme_subsystems`]
/// entries, one per address (TRADDR, TRSVCID) however many logs list it,
/// in the logs' order — what `nvme connect-all` connects to.
pub fn subsystem_paths<'a>(
    logs: impl IntoIterator<Item = &'a DiscoveryLog>,
    subnqn: &str,
) -> Vec<DiscoveryLogEntry> {
    let mut paths: Vec<DiscoveryLogEntry> = Vec::new();
    for log in logs {
        for e in nvme_subsystems(log).filter(|e| e.subnqn == subnqn) {
            if !paths.iter().any(|o| (&o.traddr, &o.trsvcid) == (&e.traddr, &e.trsvcid)) {
                paths.push(e.clone());
            }
        }
    }
    paths
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

    /// One path per address across logs, in order; other subsystems,
    /// referrals and other transports are no paths.
    #[test]
    fn subsystem_paths_are_one_per_address() {
        let named = |nqn: &str, e: DiscoveryLogEntry| DiscoveryLogEntry { subnqn: nqn.into(), ..e };
        let (x, y) = ("nqn.2026-11.io.nvmeof:x", "nqn.2026-11.io.nvmeof:y");
        let referral =
            DiscoveryLogEntry { subtype: SubType::REFERRAL, ..entry(TrType::TCP, "10.0.0.9", "8009") };
        let a = DiscoveryLog::new(
            1,
            vec![
                entry(TrType::TCP, "10.0.0.1", "4420"),
                named(y, entry(TrType::TCP, "10.0.0.2", "4420")),
                referral,
                entry(TrType::RDMA, "10.0.0.3", "4420"),
                entry(TrType::TCP, "10.0.0.1", "4421"),
            ],
        );
        let b = DiscoveryLog::new(
            1,
            vec![
                DiscoveryLogEntry { portid: 7, ..entry(TrType::TCP, "10.0.0.1", "4420") },
                entry(TrType::TCP, "10.0.0.4", "4420"),
            ],
        );
        let got: Vec<(String, String, u16)> =
            subsystem_paths([&a, &b], x).into_iter().map(|e| (e.traddr, e.trsvcid, e.portid)).collect();
        let want = [("10.0.0.1", "4420", 1), ("10.0.0.1", "4421", 1), ("10.0.0.4", "4420", 1)];
        assert_eq!(got, want.map(|(a, s, p)| (a.to_string(), s.to_string(), p)));
        assert!(subsystem_paths([&a], "nqn.2026-11.io.nvmeof:none").is_empty());
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
