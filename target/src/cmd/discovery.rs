//! Discovery log page (LID 70h) content, like nvmet's `discovery.c`
//! (`nvmet_execute_disc_get_log_page`, `nvmet_format_discovery_entry`).
//!
//! The log is rebuilt for every Get Log Page so each read sees the current
//! GENCTR together with the matching entries; libnvme re-reads the header and
//! retries when GENCTR moved between its reads (reference §7.2).

use std::net::{IpAddr, SocketAddr};

use nvmeof_common::spec::discovery::{AdrFam, SubType};
use nvmeof_common::spec::{DiscoveryLog, DiscoveryLogEntry, DISCOVERY_NQN};

use crate::core::target::{DiscoverySnapshot, Port};
use crate::core::{Controller, Target};

/// The whole discovery log for `ctrl` (header + entries, 1024 bytes each).
///
/// For every port, starting with the one the host came in on: a "current
/// discovery subsystem" entry (SUBTYPE 3, the discovery subsystem's NQN: the
/// well-known one, or the unique one configured, as nvmet names its renamed
/// discovery subsystem there), then one
/// SUBTYPE 2 entry per NVM subsystem exported on that port that the host is
/// allowed to connect to. Field
/// values follow nvmet: TRTYPE TCP, TREQ 0x04 (SQ flow control disable
/// supported), CNTLID 0xFFFF, ASQSZ 32, EFLAGS 0, SECTYPE none. TRADDR is the
/// port's configured address (see [`discovery_log_with_local_addr`] for
/// wildcard listeners). The referrals follow (SUBTYPE 1, the discovery NQN,
/// the other service's address and PORTID), after the subsystems as in
/// nvmet's log, with TREQ 0 (not specified: nothing is known of that
/// service) as nvmet's zero-filled referrals report, and the well-known NQN
/// (nvmet's `NVME_DISC_SUBSYS_NAME`: another service's unique NQN is unknown
/// here, and every service answers to the well-known one).
///
/// The target's [`DiscoveryFilter`](crate::core::DiscoveryFilter) may keep only the ports that match the
/// asking port (here, without the connection's local address; see
/// [`discovery_log_with_local_addr`]).
pub fn discovery_log(target: &Target, ctrl: &Controller) -> Vec<u8> {
    discovery_log_with_local_addr(target, ctrl, None)
}

/// Like [`discovery_log`], but a port listening on a wildcard address
/// (`0.0.0.0` / `::`) reports `local` instead — the address the host reached us
/// on — as nvmet's `nvmet_set_disc_traddr` does, so `connect-all` dials a
/// usable address. `local` is only substituted when its family fits the port.
///
/// `local` is also what the target's [`DiscoveryFilter`](crate::core::DiscoveryFilter) compares each port
/// with (SPDK's command source `trid`); without it, the address of the port
/// the host came in on stands for it.
pub fn discovery_log_with_local_addr(
    target: &Target,
    ctrl: &Controller,
    local: Option<SocketAddr>,
) -> Vec<u8> {
    let DiscoverySnapshot { genctr, mut ports, subsystems, referrals, discovery_nqn, filter } =
        target.discovery_snapshot();
    // The port the host came in on first (nvmet reports only that one).
    ports.sort_by_key(|p| (p.id != ctrl.port_id, p.id));
    let came_in = local.or_else(|| ports.iter().find(|p| p.id == ctrl.port_id).map(|p| p.addr));
    let local_ip = local.map(|l| l.ip());
    let mut entries = Vec::new();
    for port in &ports {
        let (adrfam, traddr) = port_address(port, local_ip);
        if let Some(c) = came_in.filter(|_| !filter.is_match_any()) {
            // The address this port's entries report (a wildcard port's is
            // the one the host reached) against the one the host asked on.
            let addr_differs = filter.address && traddr != canonical(c.ip()).to_string();
            if addr_differs || (filter.svcid && port.addr.port() != c.port()) {
                continue;
            }
        }
        let trsvcid = port.addr.port().to_string();
        let entry =
            |subtype, nqn: &str| DiscoveryLogEntry::tcp(subtype, nqn, adrfam, &traddr, &trsvcid, port.id);
        entries.push(entry(SubType::CURRENT_DISCOVERY, &discovery_nqn));
        // A subsystem under each port it is exported on (nvmet lists the
        // asking port's subsystem links).
        for s in
            subsystems.iter().filter(|s| !s.discovery && s.on_port(port.id) && s.host_allowed(&ctrl.hostnqn))
        {
            entries.push(entry(SubType::NVME, &s.nqn));
        }
    }
    // A referral of a port (nvmet's ports/N/referrals) only through that
    // port, as nvmet lists the asking port's only.
    for r in referrals.iter().filter(|r| r.on_port(ctrl.port_id)) {
        let (fam, traddr) = address(r.addr.ip());
        let e = DiscoveryLogEntry::tcp(
            SubType::REFERRAL,
            DISCOVERY_NQN,
            fam,
            &traddr,
            &r.addr.port().to_string(),
            r.portid,
        );
        entries.push(DiscoveryLogEntry { treq: 0, ..e });
    }
    DiscoveryLog::new(genctr, entries).encode()
}

/// ADRFAM and TRADDR text for a port.
fn port_address(port: &Port, local: Option<IpAddr>) -> (AdrFam, String) {
    let mut ip = port.addr.ip();
    if ip.is_unspecified() {
        if let Some(l) = local {
            let l = canonical(l);
            // An IPv4 wildcard can only have been reached over IPv4; an IPv6
            // wildcard (dual stack) over either.
            if l.is_ipv4() || ip.is_ipv6() {
                ip = l;
            }
        }
    }
    address(ip)
}

/// ADRFAM and TRADDR text for an address (IPv4-mapped ones as IPv4).
fn address(ip: IpAddr) -> (AdrFam, String) {
    let ip = canonical(ip);
    let fam = if ip.is_ipv4() { AdrFam::IPV4 } else { AdrFam::IPV6 };
    (fam, ip.to_string())
}

/// IPv4-mapped IPv6 addresses as plain IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nvmeof_common::spec::discovery::{SecType, TrType, TREQ_DISABLE_SQFLOW};

    use super::*;
    use crate::core::{DiscoveryFilter, Limits, Subsystem};

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";

    fn setup() -> (Arc<Target>, Arc<Controller>) {
        let t = Target::new(Limits::default());
        let port = t.add_port("192.168.7.2:4420".parse().unwrap());
        t.add_subsystem(Arc::new(Subsystem::new("nqn.2024-01.io.example:a", "m", None, false)));
        t.add_subsystem(Arc::new(Subsystem::new(
            "nqn.2024-01.io.example:b",
            "m",
            Some(vec![HOST.to_string()]),
            false,
        )));
        t.add_subsystem(Arc::new(Subsystem::new(
            "nqn.2024-01.io.example:hidden",
            "m",
            Some(vec!["nqn.2024-01.io.example:other-host".to_string()]),
            false,
        )));
        let c = t
            .create_controller(|id| {
                Controller::new(id, t.discovery.clone(), HOST.into(), [0; 16], port, 0, 0)
            })
            .unwrap();
        (t, c)
    }

    #[test]
    fn two_subsystems_one_port() {
        let (t, c) = setup();
        let b = discovery_log(&t, &c);
        let log = DiscoveryLog::decode(&b).unwrap();
        assert!(log.is_complete());
        assert_eq!(b.len(), 4 * 1024);
        assert_eq!(log.header.genctr, t.genctr());
        assert_eq!(log.header.numrec, 3);
        assert_eq!(log.header.recfmt, 0);
        let e = &log.entries;
        assert_eq!(e[0].subtype, SubType::CURRENT_DISCOVERY);
        assert_eq!(e[0].subnqn, DISCOVERY_NQN);
        assert_eq!(e[1].subnqn, "nqn.2024-01.io.example:a");
        assert_eq!(e[2].subnqn, "nqn.2024-01.io.example:b");
        for x in e {
            assert_eq!(x.trtype, TrType::TCP);
            assert_eq!(x.adrfam, AdrFam::IPV4);
            assert_eq!(x.treq, TREQ_DISABLE_SQFLOW);
            assert_eq!(x.portid, 1);
            assert_eq!(x.cntlid, 0xFFFF);
            assert_eq!(x.asqsz, 32);
            assert_eq!(x.eflags, 0);
            assert_eq!(x.trsvcid, "4420");
            assert_eq!(x.traddr, "192.168.7.2");
            assert_eq!(x.tcp_sectype(), SecType::NONE);
        }
        assert_eq!(e[1].subtype, SubType::NVME);
        // Raw offsets the Linux host reads.
        let r = &b[2048..3072];
        assert_eq!(&r[0..4], &[3, 1, 2, 4]);
        assert_eq!(&r[32..36], b"4420");
        assert_eq!(&r[256..256 + 24], b"nqn.2024-01.io.example:a");
        assert_eq!(&r[512..523], b"192.168.7.2");
    }

    /// A unique discovery NQN (nvmet's `discovery_nqn`) names the current
    /// discovery subsystem entry; referrals keep the well-known NQN; both
    /// NQNs find the discovery subsystem, which no NVM subsystem lookup does.
    #[test]
    fn unique_discovery_nqn() {
        use crate::core::target::Referral;
        const UNIQUE: &str = "nqn.2026-12.io.example:discovery";
        let t = Target::with_discovery_nqn(Limits::default(), UNIQUE);
        let port = t.add_port("192.168.7.2:4420".parse().unwrap());
        t.add_subsystem(Arc::new(Subsystem::new("nqn.2024-01.io.example:a", "m", None, false)));
        t.set_referrals(vec![Referral::new("192.0.2.9:8009".parse().unwrap(), 4)]);
        let c = t
            .create_controller(|id| {
                Controller::new(id, t.discovery.clone(), HOST.into(), [0; 16], port, 0, 0)
            })
            .unwrap();
        let log = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
        let got: Vec<_> = log.entries.iter().map(|e| (e.subtype, e.subnqn.as_str())).collect();
        assert_eq!(
            got,
            [
                (SubType::CURRENT_DISCOVERY, UNIQUE),
                (SubType::NVME, "nqn.2024-01.io.example:a"),
                (SubType::REFERRAL, DISCOVERY_NQN)
            ]
        );
        for nqn in [UNIQUE, DISCOVERY_NQN] {
            assert!(Arc::ptr_eq(&t.subsystem(nqn).unwrap(), &t.discovery), "{nqn}");
        }
        assert!(t.subsystem("nqn.2026-12.io.example:discovery2").is_none());
        assert_eq!((t.discovery.nqn.as_str(), t.discovery_nqn()), (UNIQUE, UNIQUE.to_string()));
        let id = crate::cmd::admin::identify_controller(&t, &c);
        assert_eq!((id.subnqn.as_str(), id.cntrltype), (UNIQUE, 2));

        // Renamed in place, as nvmet's discovery_nqn store: the connected
        // controller's Identify and the log name the new NQN, lookups follow.
        const RENAMED: &str = "nqn.2026-12.io.example:discovery2";
        let g = t.genctr();
        assert_eq!(t.set_discovery_nqn(RENAMED), Ok(true));
        assert_eq!(t.set_discovery_nqn(RENAMED), Ok(false));
        assert!(t.genctr() > g);
        assert_eq!(crate::cmd::admin::identify_controller(&t, &c).subnqn, RENAMED);
        let log = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
        assert_eq!(
            (log.entries[0].subtype, log.entries[0].subnqn.as_str()),
            (SubType::CURRENT_DISCOVERY, RENAMED)
        );
        for nqn in [RENAMED, DISCOVERY_NQN] {
            assert!(Arc::ptr_eq(&t.subsystem(nqn).unwrap(), &t.discovery), "{nqn}");
        }
        assert!(t.subsystem(UNIQUE).is_none());
        // Not to an NVM subsystem's NQN (nvmet: "duplicate NQN").
        let e = t.set_discovery_nqn("nqn.2024-01.io.example:a").unwrap_err();
        assert!(e.contains("nqn.2024-01.io.example:a"), "{e}");
        assert_eq!(t.discovery_nqn(), RENAMED);
    }

    #[test]
    fn genctr_changes_after_add_subsystem() {
        let (t, c) = setup();
        let g0 = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap().header.genctr;
        t.add_subsystem(Arc::new(Subsystem::new("nqn.2024-01.io.example:c", "m", None, false)));
        let log = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
        assert!(log.header.genctr > g0);
        assert_eq!(log.header.numrec, 4);
        t.remove_subsystem("nqn.2024-01.io.example:a");
        let log2 = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
        assert!(log2.header.genctr > log.header.genctr);
        assert_eq!(log2.header.numrec, 3);
    }

    /// Referrals close the log (after every port's entries) with SUBTYPE 1,
    /// the discovery NQN and TREQ 0, and move GENCTR only when they change.
    #[test]
    fn referrals_follow_the_ports_entries() {
        use crate::core::target::Referral;
        let (t, c) = setup();
        let before = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
        let refs = vec![
            Referral::new("192.0.2.9:8009".parse().unwrap(), 4),
            Referral::new("[::ffff:192.0.2.8]:4420".parse().unwrap(), 0),
            Referral::new("[2001:db8::7]:4420".parse().unwrap(), 0),
        ];
        assert!(t.set_referrals(refs.clone()));
        let log = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
        assert!(log.header.genctr > before.header.genctr);
        assert_eq!(log.entries[..before.entries.len()], before.entries[..]);
        let added: Vec<_> = log.entries[before.entries.len()..]
            .iter()
            .map(|e| {
                assert_eq!(
                    (e.subtype, e.subnqn.as_str(), e.treq, e.cntlid),
                    (SubType::REFERRAL, DISCOVERY_NQN, 0, 0xFFFF)
                );
                (e.adrfam, e.traddr.as_str(), e.trsvcid.as_str(), e.portid)
            })
            .collect();
        assert_eq!(
            added,
            [
                (AdrFam::IPV4, "192.0.2.9", "8009", 4),
                (AdrFam::IPV4, "192.0.2.8", "4420", 0),
                (AdrFam::IPV6, "2001:db8::7", "4420", 0),
            ]
        );
        assert!(!t.set_referrals(refs), "the same referrals again are no change");
        assert_eq!(DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap().header.genctr, log.header.genctr);
        assert!(t.set_referrals(Vec::new()));
        let after = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
        assert_eq!((after.entries, after.header.genctr > log.header.genctr), (before.entries, true));
    }

    /// GENCTR and the entries of one log belong together: a log built while
    /// a subsystem comes and goes never shows the counter of one state with
    /// the entries of another (libnvme takes matching GENCTRs before and
    /// after its reads as proof that the entries are current).
    #[test]
    fn genctr_matches_the_entries_under_concurrent_changes() {
        let (t, c) = setup();
        let base = t.genctr();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (t, done) = (t.clone(), done.clone());
            std::thread::spawn(move || {
                let start = std::time::Instant::now();
                for _ in 0..5_000 {
                    if start.elapsed() > std::time::Duration::from_secs(2) {
                        break;
                    }
                    t.add_subsystem(Arc::new(Subsystem::new("nqn.2024-01.io.example:x", "m", None, false)));
                    t.remove_subsystem("nqn.2024-01.io.example:x");
                }
                done.store(true, std::sync::atomic::Ordering::Release);
            })
        };
        let mut checked = 0u32;
        while !done.load(std::sync::atomic::Ordering::Acquire) && checked < 200_000 {
            let log = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
            let present = log.entries.iter().any(|e| e.subnqn == "nqn.2024-01.io.example:x");
            // Each add and each remove bumps GENCTR once.
            let odd = (log.header.genctr - base) % 2 == 1;
            assert_eq!(
                present, odd,
                "GENCTR {} with x present: {present} (check {checked})",
                log.header.genctr
            );
            checked += 1;
        }
        writer.join().unwrap();
    }

    /// A subsystem exported on some ports (nvmet's `ports/N/subsystems`
    /// links) is listed under those only; moving it deletes its controllers
    /// on the port it left, moves GENCTR, and a lookup through a port
    /// finds it only where it is exported (discovery: everywhere).
    #[test]
    fn subsystem_on_some_ports() {
        use crate::core::controller::Teardown;
        let (t, c) = setup();
        let p2 = t.add_port("192.168.8.2:4420".parse().unwrap());
        let a = t.subsystem("nqn.2024-01.io.example:a").unwrap();
        let on = |port| {
            t.create_controller(|id| Controller::new(id, a.clone(), HOST.into(), [0; 16], port, 0, 0))
                .unwrap()
        };
        let (a1, a2) = (on(c.port_id), on(p2));
        let g = t.genctr();
        assert_eq!(t.set_subsystem_ports(&a, Some(vec![p2])), Some(1));
        assert_eq!(t.set_subsystem_ports(&a, Some(vec![p2])), None, "unchanged");
        assert_eq!(t.set_subsystem_ports(&a, Some(vec![p2, p2])), None, "the same ports");
        assert!(t.genctr() > g);
        assert_eq!((a1.teardown_state(), a2.teardown_state()), (Teardown::Deleted, Teardown::Alive));
        let log = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
        let got: Vec<_> = log.entries.iter().map(|e| (e.portid, e.subtype, e.subnqn.as_str())).collect();
        assert_eq!(
            got,
            [
                (c.port_id, SubType::CURRENT_DISCOVERY, DISCOVERY_NQN),
                (c.port_id, SubType::NVME, "nqn.2024-01.io.example:b"),
                (p2, SubType::CURRENT_DISCOVERY, DISCOVERY_NQN),
                (p2, SubType::NVME, "nqn.2024-01.io.example:a"),
                (p2, SubType::NVME, "nqn.2024-01.io.example:b"),
            ]
        );
        assert!(t.subsystem_on_port(&a.nqn, c.port_id).is_none());
        assert!(t.subsystem_on_port(&a.nqn, p2).is_some());
        assert!(t.subsystem_on_port(DISCOVERY_NQN, c.port_id).is_some());
        // Nowhere, then every port again.
        assert_eq!(t.set_subsystem_ports(&a, Some(vec![])), Some(1));
        assert_eq!(a2.teardown_state(), Teardown::Deleted);
        assert!(t.subsystem_on_port(&a.nqn, p2).is_none());
        assert_eq!(t.set_subsystem_ports(&a, None), Some(0));
        assert!(
            t.subsystem_on_port(&a.nqn, c.port_id).is_some() && t.subsystem_on_port(&a.nqn, p2).is_some()
        );
    }

    /// SPDK's `discovery_filter`: each token keeps the ports whose entries
    /// match where the host asked (address, TCP port, or both: nvmet's log,
    /// the asking port only); a wildcard port matches by the address the
    /// host reached; referrals stay; a change moves GENCTR and notifies.
    #[test]
    fn discovery_filter_keeps_matching_ports() {
        use crate::core::target::Referral;
        let (t, c) = setup(); // port 1: 192.168.7.2:4420, subsystems a and b
        let p2 = t.add_port("192.168.7.2:4421".parse().unwrap());
        let p3 = t.add_port("10.0.0.1:4420".parse().unwrap());
        let p4 = t.add_port("0.0.0.0:4430".parse().unwrap());
        t.set_referrals(vec![Referral::new("192.0.2.9:8009".parse().unwrap(), 4)]);
        let ports = |local: Option<&str>| {
            let local = local.map(|l| l.parse().unwrap());
            let log = DiscoveryLog::decode(&discovery_log_with_local_addr(&t, &c, local)).unwrap();
            assert_eq!(log.entries.last().unwrap().subtype, SubType::REFERRAL);
            let mut ids: Vec<u16> =
                log.entries.iter().filter(|e| e.subtype != SubType::REFERRAL).map(|e| e.portid).collect();
            ids.dedup();
            ids
        };
        let all = vec![1, p2, p3, p4];
        assert_eq!(ports(Some("192.168.7.2:4420")), all, "match_any");
        let set = |f: &str| {
            let g = t.genctr();
            assert!(t.set_discovery_filter(f.parse().unwrap()), "{f}");
            assert!(!t.set_discovery_filter(f.parse().unwrap()), "{f} again");
            assert!(t.genctr() > g);
        };
        set("transport");
        assert_eq!(ports(Some("192.168.7.2:4420")), all, "every port is TCP");
        set("address");
        // The wildcard port reports the address the host reached: a match.
        assert_eq!(ports(Some("192.168.7.2:4420")), [1, p2, p4]);
        assert_eq!(ports(Some("10.0.0.1:4420")), [p3, p4]);
        set("svcid");
        assert_eq!(ports(Some("192.168.7.2:4420")), [1, p3]);
        set("address,svcid");
        assert_eq!(ports(Some("192.168.7.2:4420")), [1]);
        assert_eq!(ports(Some("[::ffff:192.168.7.2]:4420")), [1], "IPv4-mapped");
        assert_eq!(ports(Some("127.0.0.1:4430")), [p4]);
        // Without the connection's address: the asking port's.
        assert_eq!(ports(None), [1]);
        set("transport,address,svcid");
        assert_eq!(ports(Some("10.0.0.1:4420")), [p3]);
        set("match_any");
        assert_eq!(ports(Some("10.0.0.1:4420")), all);
    }

    /// A port's own referrals (nvmet's `ports/N/referrals`) are listed
    /// through that port only; the others through every port.
    #[test]
    fn port_referrals_through_their_port() {
        use crate::core::target::Referral;
        let (t, c) = setup(); // port 1
        let p2 = t.add_port("192.168.8.2:4420".parse().unwrap());
        let c2 = t
            .create_controller(|id| Controller::new(id, t.discovery.clone(), HOST.into(), [0; 16], p2, 0, 0))
            .unwrap();
        let r =
            |a: &str, portid, ports: Option<Vec<u16>>| Referral { addr: a.parse().unwrap(), portid, ports };
        t.set_referrals(vec![
            r("192.0.2.1:8009", 3, Some(vec![1])),
            r("192.0.2.2:8009", 4, Some(vec![p2])),
            r("192.0.2.3:8009", 0, None),
            r("192.0.2.1:8009", 5, Some(vec![p2])),
            r("192.0.2.4:8009", 6, Some(vec![])),
        ]);
        let referrals = |c| {
            let log = DiscoveryLog::decode(&discovery_log(&t, c)).unwrap();
            log.entries
                .iter()
                .filter(|e| e.subtype == SubType::REFERRAL)
                .map(|e| (e.traddr.clone(), e.portid))
                .collect::<Vec<_>>()
        };
        let s = |a: &str, id| (a.to_string(), id);
        assert_eq!(referrals(&c), [s("192.0.2.1", 3), s("192.0.2.3", 0)]);
        assert_eq!(referrals(&c2), [s("192.0.2.2", 4), s("192.0.2.3", 0), s("192.0.2.1", 5)]);
    }

    /// The filter's text is SPDK's, both ways.
    #[test]
    fn discovery_filter_text() {
        for (text, want) in [
            ("match_any", "match_any"),
            ("svcid,address", "address,svcid"),
            ("address, svcid,address", "address,svcid"),
            ("transport,address,svcid", "transport,address,svcid"),
            ("transport", "transport"),
        ] {
            let f: DiscoveryFilter = text.parse().unwrap();
            assert_eq!(f.to_string(), want, "{text}");
            assert_eq!(want.parse::<DiscoveryFilter>(), Ok(f));
        }
        assert_eq!("address,svcid".parse(), Ok(DiscoveryFilter::NVMET));
        assert!("match_any".parse::<DiscoveryFilter>().unwrap().is_match_any());
        for bad in ["", "match_any,address", "address,match_any", "port", "address,,svcid", "ADDRESS"] {
            assert!(bad.parse::<DiscoveryFilter>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ports_and_addresses() {
        let (t, c) = setup();
        let p2 = t.add_port("[::]:4421".parse().unwrap());
        let p3 = t.add_port("0.0.0.0:8009".parse().unwrap());
        let log = DiscoveryLog::decode(&discovery_log(&t, &c)).unwrap();
        assert_eq!(log.entries.len(), 9);
        assert_eq!(log.entries[3].portid, p2);
        assert_eq!(log.entries[3].subtype, SubType::CURRENT_DISCOVERY);
        assert_eq!((log.entries[3].adrfam, log.entries[3].traddr.as_str()), (AdrFam::IPV6, "::"));
        assert_eq!(log.entries[6].trsvcid, "8009");
        // Wildcards report the address the host reached.
        let local = Some("10.0.0.5:8009".parse().unwrap());
        let log = DiscoveryLog::decode(&discovery_log_with_local_addr(&t, &c, local)).unwrap();
        assert_eq!((log.entries[3].adrfam, log.entries[3].traddr.as_str()), (AdrFam::IPV4, "10.0.0.5"));
        assert_eq!(log.entries[6].traddr, "10.0.0.5");
        assert_eq!(log.entries[0].traddr, "192.168.7.2");
        let v6 = Some("[fd00::7]:4421".parse().unwrap());
        let log = DiscoveryLog::decode(&discovery_log_with_local_addr(&t, &c, v6)).unwrap();
        assert_eq!((log.entries[3].adrfam, log.entries[3].traddr.as_str()), (AdrFam::IPV6, "fd00::7"));
        assert_eq!(log.entries[6].traddr, "0.0.0.0");
        // The host's own port comes first.
        let c3 = t
            .create_controller(|id| Controller::new(id, t.discovery.clone(), HOST.into(), [0; 16], p3, 0, 0))
            .unwrap();
        let log = DiscoveryLog::decode(&discovery_log(&t, &c3)).unwrap();
        assert_eq!(log.entries[0].portid, p3);
    }
}
