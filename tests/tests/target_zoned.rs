//! Zoned namespaces (configuration `zoned`; the Zoned Namespace command
//! set, as SPDK's zoned bdev emulates and nvmet passes through for zoned
//! block devices), driven through the initiator: what a host learns of them
//! (CAP.CSS, the CSI descriptor, the zoned Identify structures, the command
//! effects log), writes at the write pointer and nowhere else, Zone Append,
//! the zone state machine with its open and active limits, Reset dropping
//! the data, reports with filters, the statuses of bad commands, and a
//! file's zones at startup following what the file holds.

mod initiator_util;

use initiator_util::{bounded, opts, start, SUBNQN};
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::spec::identify::{
    decode_ns_desc_list, decode_ns_list, Csi, IdentifyCmd, IDENTIFY_DATA_LEN,
};
use nvmeof_common::spec::log::{effects, CommandEffectsLog, GetLogPageCmd, LogPageId};
use nvmeof_common::spec::property::{Cap, PropertyOffset};
use nvmeof_common::spec::zns::{
    IdentifyCtrlZns, ZoneMgmtRecvCmd, ZoneReportFilter, ZoneSendAction, ZoneState, NO_ZONE_LIMIT, OZCS_RAZB,
};
use nvmeof_common::spec::{Cns, NsIdDescriptor};
use nvmeof_common::{Sqe, Status};
use nvmeof_initiator::{Controller, Error, IoFlags, Namespace, Payload};
use nvmeof_target::config::TargetConfig;
use nvmeof_target::server::Server;

const BS: u64 = 512;
/// Zone size in blocks (1 MiB zones of 512-byte blocks).
const ZB: u64 = 2048;

fn cfg(ns1: &str) -> TargetConfig {
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\
         [[subsystem.namespace]]\nnsid = 1\n{ns1}\n\
         [[subsystem.namespace]]\nnsid = 2\nram = \"1M\"\n"
    ))
    .unwrap()
}

fn status<T: std::fmt::Debug>(r: Result<T, Error>) -> Status {
    match r {
        Err(Error::Nvme { status, .. }) => status.code(),
        other => panic!("expected an NVMe status, got {other:?}"),
    }
}

async fn state(ns: &Namespace, zone: u64) -> (ZoneState, u64) {
    let r = ns.report_zones(zone * ZB, ZoneReportFilter::ALL, 1).await.unwrap();
    (r.zones[0].state, r.zones[0].wp)
}

/// A target whose namespace 1 is `ns1` (TOML), a controller, and that namespace.
async fn start_ns(ns1: &str) -> (Server, Controller, Namespace) {
    let (server, addr) = start(&cfg(ns1)).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    (server, ctrl, ns)
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zoned_namespace_as_a_host_sees_it() {
    bounded(60, async {
        let zoned =
            "ram = \"4M\"\nzoned = true\nzone_size = \"1M\"\nmax_open_zones = 2\nmax_active_zones = 3";
        let (server, addr) = start(&cfg(zoned)).await;
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        // CAP.CSS: NVM and I/O command sets (nvmet's), so a host can find
        // the command set of each namespace.
        let cap = Cap(ctrl.property_get(PropertyOffset::CAP).await.unwrap());
        assert_eq!(cap.css(), Cap::CSS_NVM | Cap::CSS_IOCS);
        let mut buf = [0u8; IDENTIFY_DATA_LEN];
        ctrl.identify_raw(IdentifyCmd::new(Cns::NS_DESC_LIST, 1), &mut buf).await.unwrap();
        assert!(decode_ns_desc_list(&buf).unwrap().contains(&NsIdDescriptor::Csi(Csi::ZNS)));
        ctrl.identify_raw(IdentifyCmd::new(Cns::NS_DESC_LIST, 2), &mut buf).await.unwrap();
        assert!(decode_ns_desc_list(&buf).unwrap().contains(&NsIdDescriptor::Csi(Csi::NVM)));
        // The namespaces of each command set.
        for (csi, want) in [(Csi::ZNS, vec![1]), (Csi::NVM, vec![2])] {
            let mut c = IdentifyCmd::new(Cns::ACTIVE_NS_LIST_CS, 0);
            c.csi = csi;
            ctrl.identify_raw(c, &mut buf).await.unwrap();
            assert_eq!(decode_ns_list(&buf), want, "{csi:?}");
        }
        let mut c = IdentifyCmd::new(Cns::CS_CTRL, 0);
        c.csi = Csi::ZNS;
        ctrl.identify_raw(c, &mut buf).await.unwrap();
        assert_eq!(IdentifyCtrlZns::decode(&buf).unwrap().zasl, 0);
        // The zoned set's effects log has Zone Append (the Linux host makes
        // a zoned namespace read-only without it).
        let mut log = vec![0u8; 4096];
        let mut lc = GetLogPageCmd::new(LogPageId::CMD_EFFECTS, 0, 0, 4096);
        lc.csi = Csi::ZNS.0;
        ctrl.get_log_page(lc, &mut log).await.unwrap();
        let e = CommandEffectsLog::decode(&log).unwrap();
        assert_eq!(e.iocs[0x7D], effects::CSUPP | effects::LBCC);
        assert_eq!(e.iocs[0x7A], effects::CSUPP);
        assert_eq!(e.iocs[0x01], effects::CSUPP | effects::LBCC);

        let ns = ctrl.namespace(1).await.unwrap();
        assert_eq!(ns.blocks(), 4 * ZB);
        let id = ns.identify_zoned().await.unwrap();
        assert_eq!((id.zoc, id.ozcs, id.zsze[0], id.mor, id.mar), (0, OZCS_RAZB, ZB, 1, 2));
        let plain = ctrl.namespace(2).await.unwrap();
        assert_eq!(plain.identify_zoned().await.unwrap().zsze[0], 0);
        let zones = ns.zones().await.unwrap();
        assert_eq!(zones.len(), 4);
        for (i, z) in zones.iter().enumerate() {
            assert_eq!(
                (z.state, z.slba, z.wp, z.capacity),
                (ZoneState::EMPTY, i as u64 * ZB, i as u64 * ZB, ZB)
            );
        }
        drop(ctrl);
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await;
}

/// `Namespace::zones` walks 16384 zones in reports of at most 2047
/// descriptors each (nvmet refuses a report the size of a namespace
/// without MDTS, as the interop suite's zoned step found).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_zones_are_reported_in_bounded_pieces() {
    bounded(60, async {
        let (server, ctrl, ns) = start_ns("ram = \"8M\"\nzoned = true\nzone_size = \"512\"").await;
        let zones = ns.zones().await.unwrap();
        assert_eq!(zones.len(), 16384);
        assert!(zones.iter().enumerate().all(|(i, z)| z.slba == i as u64 && z.state == ZoneState::EMPTY));
        drop(ctrl);
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_go_to_the_write_pointer() {
    bounded(60, async {
        let zoned =
            "ram = \"4M\"\nzoned = true\nzone_size = \"1M\"\nmax_open_zones = 2\nmax_active_zones = 3";
        let (server, ctrl, ns) = start_ns(zoned).await;
        let a = data(4096, 1);
        ns.write(0, &a).await.unwrap();
        assert_eq!(state(&ns, 0).await, (ZoneState::IMPLICITLY_OPEN, 8));
        // Not at the write pointer, before or after it.
        assert_eq!(status(ns.write(0, &a).await), Status::ZONE_INVALID_WRITE);
        assert_eq!(status(ns.write(16, &a).await), Status::ZONE_INVALID_WRITE);
        // Past the zone's end.
        let long = vec![7u8; ((ZB - 8 + 1) * BS) as usize];
        assert_eq!(status(ns.write_with(8, &long, IoFlags::default()).await), Status::ZONE_BOUNDARY_ERROR);
        // Write Zeroes is a write too.
        assert_eq!(
            status(ns.write_zeroes(100, 8, false, IoFlags::default()).await),
            Status::ZONE_INVALID_WRITE
        );
        ns.write_zeroes(8, 8, false, IoFlags::default()).await.unwrap();
        assert_eq!(state(&ns, 0).await.1, 16);

        // Zone Append: where the pointer is, answered.
        let b = data(4096, 2);
        assert_eq!(ns.zone_append(ZB, &b, IoFlags::default()).await.unwrap(), ZB);
        assert_eq!(
            ns.zone_append(ZB, &b, IoFlags { fua: true, ..Default::default() }).await.unwrap(),
            ZB + 8
        );
        let mut back = vec![0u8; 8192];
        ns.read(ZB, &mut back).await.unwrap();
        assert_eq!((&back[..4096], &back[4096..]), (&b[..], &b[..]));
        ns.read(0, &mut back).await.unwrap();
        assert_eq!(&back[..4096], &a[..]);
        assert!(back[4096..].iter().all(|&x| x == 0));
        // SLBA must be the zone's start.
        assert_eq!(status(ns.zone_append(ZB + 1, &b, IoFlags::default()).await), Status::INVALID_FIELD);

        // MOR 2: a write to a third zone closes an implicitly opened one.
        ns.write(2 * ZB, &a).await.unwrap();
        assert_eq!(state(&ns, 0).await.0, ZoneState::CLOSED);
        assert_eq!(state(&ns, 1).await.0, ZoneState::IMPLICITLY_OPEN);
        // MAR 3: a fourth zone cannot become active.
        assert_eq!(status(ns.write(3 * ZB, &a).await), Status::ZONE_TOO_MANY_ACTIVE);
        // Finish: Full, its resources free; writes to it fail.
        ns.manage_zone(ZoneSendAction::FINISH, ZB, false).await.unwrap();
        assert_eq!(state(&ns, 1).await.0, ZoneState::FULL);
        assert_eq!(status(ns.zone_append(ZB, &b, IoFlags::default()).await), Status::ZONE_FULL);
        ns.write(3 * ZB, &a).await.unwrap();
        // Explicit open of a closed zone at MOR closes an implicit one.
        ns.manage_zone(ZoneSendAction::OPEN, 0, false).await.unwrap();
        assert_eq!(state(&ns, 0).await.0, ZoneState::EXPLICITLY_OPEN);
        assert_eq!(
            status(ns.manage_zone(ZoneSendAction::CLOSE, ZB, false).await),
            Status::ZONE_INVALID_TRANSITION
        );
        assert_eq!(status(ns.manage_zone(ZoneSendAction::OPEN, 5, false).await), Status::INVALID_FIELD);
        assert_eq!(
            status(ns.manage_zone(ZoneSendAction::OFFLINE, 0, false).await),
            Status::ZONE_INVALID_TRANSITION
        );

        // Reports by state.
        let full = ns.report_zones(0, ZoneReportFilter::FULL, 8).await.unwrap();
        assert_eq!((full.nr_zones, full.zones[0].slba), (1, ZB));
        let closed = ns.report_zones(0, ZoneReportFilter::CLOSED, 8).await.unwrap();
        assert_eq!(closed.nr_zones, 1);
        // Reset drops the data: the zone reads zeroes and takes writes from its start.
        ns.manage_zone(ZoneSendAction::RESET, 0, false).await.unwrap();
        assert_eq!(state(&ns, 0).await, (ZoneState::EMPTY, 0));
        ns.read(0, &mut back).await.unwrap();
        assert!(back.iter().all(|&x| x == 0));
        ns.write(0, &b).await.unwrap();
        // Reset of every zone.
        ns.manage_zone(ZoneSendAction::RESET, 0, true).await.unwrap();
        for z in ns.zones().await.unwrap() {
            assert_eq!((z.state, z.wp), (ZoneState::EMPTY, z.slba));
        }
        ns.read(ZB, &mut back).await.unwrap();
        assert!(back.iter().all(|&x| x == 0));
        drop(ctrl);
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await;
}

/// A raw Zone Management Receive of `len` bytes with CDW13 `cdw13`.
async fn recv(
    ctrl: &Controller,
    nsid: u32,
    slba: u64,
    len: u32,
    cdw13: u32,
    sgl: Option<u32>,
) -> Result<Vec<u8>, Error> {
    let mut sqe: Sqe = ZoneMgmtRecvCmd::report(nsid, slba, len, ZoneReportFilter::ALL, false).to_sqe(0);
    sqe.set_cdw(13, cdw13);
    let mut buf = vec![0u8; sgl.unwrap_or(len) as usize];
    if let Some(l) = sgl {
        sqe.set_sgl(nvmeof_common::sqe::SglDescriptor::transport(l));
    }
    ctrl.io_command(sqe, Payload::Read(&mut buf)).await.map(|_| buf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_zone_commands_get_nvmets_statuses() {
    bounded(60, async {
        let (server, ctrl, ns) = start_ns("ram = \"4M\"\nzoned = true\nzone_size = \"1M\"").await;
        let id = ns.identify_zoned().await.unwrap();
        assert_eq!((id.mor, id.mar), (NO_ZONE_LIMIT, NO_ZONE_LIMIT));
        // Extended report (no descriptor extensions here), an undefined
        // filter, a Partial Report value other than 0/1: Invalid Field.
        for cdw13 in [1, 8 << 8, 2 << 16] {
            assert_eq!(
                status(recv(&ctrl, 1, 0, 4096, cdw13, None).await),
                Status::INVALID_FIELD,
                "{cdw13:#x}"
            );
        }
        // A buffer shorter than the report header; SLBA past the end.
        assert_eq!(status(recv(&ctrl, 1, 0, 32, 0, None).await), Status::INVALID_FIELD);
        assert_eq!(status(recv(&ctrl, 1, 4 * ZB, 4096, 0, None).await), Status::LBA_RANGE);
        // The SGL must be what NUMD asks for (nvmet_check_transfer_len).
        assert_eq!(status(recv(&ctrl, 1, 0, 4096, 0, Some(8192)).await), Status::SGL_INVALID_DATA);
        // Header only: the count of zones.
        let b = recv(&ctrl, 1, 0, 64, 0, None).await.unwrap();
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), 4);
        // Partial report: Number of Zones counts the descriptors returned.
        let b = recv(&ctrl, 1, ZB, 64 * 3, 1 << 16, None).await.unwrap();
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), 2);
        // The zone commands on a namespace that is not zoned: Invalid Opcode.
        let plain = ctrl.namespace(2).await.unwrap();
        assert_eq!(
            status(plain.zone_append(0, &[0u8; 512], IoFlags::default()).await),
            Status::INVALID_OPCODE
        );
        assert_eq!(status(plain.manage_zone(ZoneSendAction::RESET, 0, true).await), Status::INVALID_OPCODE);
        assert_eq!(status(recv(&ctrl, 2, 0, 4096, 0, None).await), Status::INVALID_OPCODE);
        // Zone Append's data must match NLB.
        let mut sqe = Sqe::new(IoOpcode::ZONE_APPEND.0);
        sqe.set_nsid(1).set_slba(0).set_cdw(12, 1);
        let r = ctrl.io_command(sqe, Payload::Write(&[0u8; 512])).await;
        assert_eq!(status(r), Status::SGL_INVALID_DATA);
        // Compare and Write is not offered on a zoned namespace.
        let r = ns.compare_and_write(0, &[0u8; 512], &[1u8; 512], IoFlags::default()).await;
        assert_eq!(status(r), Status::INVALID_FIELD);
        // A Copy's destination is a write at the pointer.
        ns.write(0, &[5u8; 1024]).await.unwrap();
        assert_eq!(status(ns.copy(&[(0, 2)], ZB + 4, IoFlags::default()).await), Status::ZONE_INVALID_WRITE);
        ns.copy(&[(0, 2)], 2, IoFlags::default()).await.unwrap();
        assert_eq!(state(&ns, 0).await.1, 4);
        let mut back = vec![0u8; 2048];
        ns.read(0, &mut back).await.unwrap();
        assert!(back.iter().all(|&x| x == 5));
        drop(ctrl);
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_files_zones_start_from_what_it_holds() {
    bounded(60, async {
        let path = std::env::temp_dir().join(format!("nvmeof-zoned-{}.img", std::process::id()));
        // 4 MiB sparse with data in zone 2 only.
        {
            use std::os::unix::fs::FileExt;
            let f = std::fs::File::create(&path).unwrap();
            f.set_len(4 << 20).unwrap();
            f.write_all_at(&[9u8; 4096], 2 << 20).unwrap();
        }
        let toml = format!("file = \"{}\"\nzoned = true\nzone_size = \"1M\"", path.display());
        let (server, ctrl, ns) = start_ns(&toml).await;
        let states: Vec<ZoneState> = ns.zones().await.unwrap().iter().map(|z| z.state).collect();
        assert_eq!(states, [ZoneState::EMPTY, ZoneState::EMPTY, ZoneState::FULL, ZoneState::EMPTY]);
        assert_eq!(state(&ns, 2).await.1, 3 * ZB);
        let mut back = vec![0u8; 4096];
        ns.read(2 * ZB, &mut back).await.unwrap();
        assert!(back.iter().all(|&x| x == 9));
        // Written data makes its zone Full at the next start; a Reset
        // punches the old data out of the file.
        ns.write(0, &data(4096, 3)).await.unwrap();
        ns.manage_zone(ZoneSendAction::RESET, 2 * ZB, false).await.unwrap();
        ns.flush().await.unwrap();
        drop((ctrl, ns));
        server.shutdown(std::time::Duration::from_secs(1)).await;
        let (server, ctrl, ns) = start_ns(&toml).await;
        let states: Vec<ZoneState> = ns.zones().await.unwrap().iter().map(|z| z.state).collect();
        assert_eq!(states, [ZoneState::FULL, ZoneState::EMPTY, ZoneState::EMPTY, ZoneState::EMPTY]);
        ns.read(0, &mut back).await.unwrap();
        assert_eq!(back, data(4096, 3));
        ns.read(2 * ZB, &mut back).await.unwrap();
        assert!(back.iter().all(|&x| x == 0));
        drop((ctrl, ns));
        server.shutdown(std::time::Duration::from_secs(1)).await;
        std::fs::remove_file(&path).unwrap();
    })
    .await;
}

#[tokio::test]
async fn zone_settings_are_checked() {
    let bad = |ns: &str| {
        TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n[[subsystem.namespace]]\nram = \"4M\"\n{ns}\n"
    ))
    .unwrap_err()
    .to_string()
    };
    assert!(bad("zone_size = \"1M\"").contains("zone_size"));
    assert!(bad("zone_state_file = \"/x.zones\"").contains("zone_state_file"));
    assert!(bad("zoned = true\nzone_state_file = \"/x.zones\"").contains("RAM"));
    assert!(bad("zoned = true\nzone_size = \"3M\"").contains("power of two"));
    assert!(bad("zoned = true\nzone_size = \"256\"").contains("power of two"));
    assert!(bad("zoned = true\nmax_open_zones = 0").contains("max_open_zones"));
    assert!(bad("zoned = true\nmax_open_zones = 4\nmax_active_zones = 2").contains("max_open_zones"));
    // A zone larger than the namespace: the namespace cannot be opened.
    let err =
        Server::start(&cfg("ram = \"4M\"\nzoned = true\nzone_size = \"8M\"")).await.err().expect("refused");
    assert!(err.to_string().contains("zone size"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_zones_unless_their_settings_change() {
    bounded(60, async {
        let zoned = |size: &str| format!("ram = \"4M\"\nzoned = true\nzone_size = \"{size}\"");
        let (server, ctrl, ns) = start_ns(&zoned("1M")).await;
        ns.write(0, &data(4096, 4)).await.unwrap();
        // The same settings: the namespace and its zones stay as they are.
        server.reload(&cfg(&zoned("1M"))).unwrap();
        assert_eq!(state(&ns, 0).await, (ZoneState::IMPLICITLY_OPEN, 8));
        // Another zone size: another namespace (a new RAM store) with 2 MiB zones.
        server.reload(&cfg(&zoned("2M"))).unwrap();
        assert_eq!(ns.identify_zoned().await.unwrap().zsze[0], 2 * ZB);
        let zones = ns.zones().await.unwrap();
        assert_eq!(zones.len(), 2);
        assert!(zones.iter().all(|z| z.state == ZoneState::EMPTY));
        // Not zoned any more: an NVM namespace, whose writes go anywhere.
        server.reload(&cfg("ram = \"4M\"")).unwrap();
        assert_eq!(ns.identify_zoned().await.unwrap().zsze[0], 0);
        ns.write(100, &data(512, 5)).await.unwrap();
        assert_eq!(status(ns.report_zones(0, ZoneReportFilter::ALL, 1).await), Status::INVALID_OPCODE);
        drop((ctrl, ns));
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_keeps_the_zone_states_for_the_next_start() {
    bounded(60, async {
        let dir = std::env::temp_dir();
        let (path, states) = (
            dir.join(format!("nvmeof-zstate-{}.img", std::process::id())),
            dir.join(format!("nvmeof-zstate-{}.zones", std::process::id())),
        );
        let toml = format!(
            "file = \"{}\"\nsize = \"4M\"\nzoned = true\nzone_size = \"1M\"\nzone_state_file = \"{}\"",
            path.display(),
            states.display()
        );
        let (server, ctrl, ns) = start_ns(&toml).await;
        let a = data(4096, 6);
        ns.write(0, &a).await.unwrap();
        assert_eq!(ns.zone_append(ZB, &a, IoFlags::default()).await.unwrap(), ZB);
        ns.manage_zone(ZoneSendAction::FINISH, 3 * ZB, false).await.unwrap();
        drop((ctrl, ns));
        server.shutdown(std::time::Duration::from_secs(1)).await;
        assert!(states.exists(), "a clean stop saves the zone states");
        // The next start: open zones come back Closed at their write
        // pointers, the file is gone (a crash now falls back to the store).
        let (server, ctrl, ns) = start_ns(&toml).await;
        assert!(!states.exists(), "the start deletes the zone state file");
        let got: Vec<(ZoneState, u64)> = ns.zones().await.unwrap().iter().map(|z| (z.state, z.wp)).collect();
        assert_eq!(
            got,
            [
                (ZoneState::CLOSED, 8),
                (ZoneState::CLOSED, ZB + 8),
                (ZoneState::EMPTY, 2 * ZB),
                (ZoneState::FULL, 4 * ZB)
            ]
        );
        ns.write(8, &a).await.unwrap();
        let mut back = vec![0u8; 8192];
        ns.read(0, &mut back).await.unwrap();
        assert_eq!((&back[..4096], &back[4096..]), (&a[..], &a[..]));
        drop((ctrl, ns));
        server.shutdown(std::time::Duration::from_secs(1)).await;
        // Without the file (as after a crash): the zones holding data start Full.
        std::fs::remove_file(&states).unwrap();
        let (server, ctrl, ns) = start_ns(&toml).await;
        let got: Vec<ZoneState> = ns.zones().await.unwrap().iter().map(|z| z.state).collect();
        assert_eq!(got, [ZoneState::FULL, ZoneState::FULL, ZoneState::EMPTY, ZoneState::EMPTY]);
        drop((ctrl, ns));
        server.shutdown(std::time::Duration::from_secs(1)).await;
        let _ = (std::fs::remove_file(&path), std::fs::remove_file(&states));
    })
    .await;
}
