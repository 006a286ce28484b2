//! Target integration tests: fabrics commands (Connect, Property Get/Set,
//! enable/shutdown) and the discovery controller, over loopback TCP.

use std::time::Duration;

use nvmeof_common::opcode::AdminOpcode;
use nvmeof_common::spec::connect::{data_off, invalid_param_dw0};
use nvmeof_common::spec::discovery::{AdrFam, SubType, TrType};
use nvmeof_common::spec::features::{FeatureId, SetFeaturesCmd};
use nvmeof_common::spec::identify::{Cns, IdentifyController};
use nvmeof_common::spec::log::LogPageId;
use nvmeof_common::spec::property::{Cap, Cc, Csts, PropertyOffset, Vs};
use nvmeof_common::spec::{ConnectCmd, DiscoveryLogEntry, DiscoveryLogHeader, CNTLID_DYNAMIC, DISCOVERY_NQN};
use nvmeof_common::sqe::fabrics_off;
use nvmeof_common::Status;
use nvmeof_target::config::SubsystemConfig;
use nvmeof_target::server::build_subsystem;
use nvmeof_tests::harness::*;
use nvmeof_tests::raw_client::{RawClient, HOSTNQN};

const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:99999999-8888-7777-6666-555555555555";
const RESTRICTED: &str = "nqn.2024-01.io.nvmeof.test:restricted";

#[tokio::test]
async fn admin_connect_properties_enable_shutdown() {
    let (_server, addr) = start(&default_config()).await;
    let mut a = RawClient::connect(addr).await;
    let cqe = a.admin_connect(SUBNQN, HOSTNQN).await;
    assert!(cqe.status.is_success(), "{}", cqe.status);
    let cntlid = cqe.dw0() as u16;
    assert!((1..=0xFFEF).contains(&cntlid), "CNTLID {cntlid:#x}");
    assert_eq!(cqe.dw0() >> 16, 0, "no ATR/ASCR expected");
    assert_eq!(cqe.sqid, 0);

    // CAP: 8 bytes only.
    let c = a.property_get(PropertyOffset::CAP, true).await.ok();
    let cap = Cap(c.cqe.result);
    assert_eq!(cap.mqes(), 1023, "CAP.MQES = max_queue_entries - 1");
    assert!(cap.cqr());
    assert_ne!(cap.css() & Cap::CSS_NVM, 0);
    assert!(cap.to() > 0);
    assert_eq!(cap.mpsmin(), 0);
    a.property_get(PropertyOffset::CAP, false).await.expect_status(Status::INVALID_FIELD);

    let vs = Vs(a.property_get(PropertyOffset::VS, false).await.ok().cqe.dw0());
    assert!(vs >= Vs::V1_2, "VS {vs:?}");
    let cc = a.property_get(PropertyOffset::CC, false).await.ok().cqe.dw0();
    assert_eq!(cc, 0, "CC before enable");
    let csts = a.csts().await;
    assert!(!csts.rdy() && !csts.cfs());
    // Unknown property offset.
    a.property_get(PropertyOffset(0x30), false).await.expect_status(Status::INVALID_FIELD);

    a.enable().await;
    let cc = Cc(a.property_get(PropertyOffset::CC, false).await.ok().cqe.dw0());
    assert!(cc.en());
    assert_eq!((cc.iosqes(), cc.iocqes()), (6, 4));

    // Identify works now and names our controller.
    let id = a.identify(Cns::CTRL, 0).await.ok();
    assert_eq!(IdentifyController::decode(&id.data).unwrap().cntlid, cntlid);

    // Normal shutdown: SHST complete.
    a.property_set(PropertyOffset::CC, cc.with_shn(Cc::SHN_NORMAL).0).await.ok();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let csts = a.csts().await;
        if csts.shst() == Csts::SHST_COMPLETE {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "SHST not complete: {csts:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn io_connect_with_cntlid() {
    let (_server, addr) = start(&default_config()).await;
    let admin = admin_queue(addr, SUBNQN).await;
    let mut io = RawClient::connect(addr).await;
    let cqe = io.io_connect(1, admin.cntlid, SUBNQN, HOSTNQN).await;
    assert!(cqe.status.is_success(), "{}", cqe.status);
    assert_eq!(cqe.dw0() as u16, admin.cntlid);
    assert_eq!(cqe.sqid, 1);
    // A second I/O queue of the same controller.
    let mut io2 = RawClient::connect(addr).await;
    assert!(io2.io_connect(2, admin.cntlid, SUBNQN, HOSTNQN).await.status.is_success());
    let r = io2.read(1, 0, 1, NS1_BS).await.ok();
    assert_eq!(r.data.len(), 512);
}

async fn connect_status(
    addr: std::net::SocketAddr,
    cmd: ConnectCmd,
    subnqn: &str,
    hostnqn: &str,
    cntlid: u16,
) -> (Status, u32) {
    let mut c = RawClient::connect(addr).await;
    c.hostnqn = hostnqn.to_string();
    let data = c.connect_data(subnqn, cntlid);
    let r = c.connect_cmd(cmd, data).await;
    (r.status(), r.cqe.dw0())
}

#[tokio::test]
async fn connect_errors() {
    let mut cfg = default_config();
    cfg.limits.max_io_queues = 4;
    cfg.subsystems.push(SubsystemConfig {
        nqn: RESTRICTED.to_string(),
        model: "m".to_string(),
        serial: None,
        firmware: None,
        ieee_oui: None,
        allowed_hosts: Some(vec![OTHER_HOST.to_string()]),
        host_keys: Default::default(),
        namespaces: vec![ram_ns(1, 1 << 20, 512)],
        cntlids: nvmeof_target::core::target::CNTLID_RANGE,
        ports: None,
        max_io_queues: None,
    });
    let (_server, addr) = start(&cfg).await;

    // Unknown subsystem: 1/0x82, IATTR=1, IPO=256.
    let (s, dw0) = connect_status(
        addr,
        ConnectCmd::admin(0),
        "nqn.2024-01.io.nvmeof.test:nope",
        HOSTNQN,
        CNTLID_DYNAMIC,
    )
    .await;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
    assert_eq!(dw0, invalid_param_dw0(true, data_off::SUBNQN as u16));
    assert_eq!(dw0, 0x0001_0100);

    // Host not allowed: 1/0x84 (IATTR=1, IPO=512 as nvmet).
    let (s, dw0) = connect_status(addr, ConnectCmd::admin(0), RESTRICTED, HOSTNQN, CNTLID_DYNAMIC).await;
    assert_eq!(s, Status::CONNECT_INVALID_HOST.with_dnr());
    assert_eq!(dw0, invalid_param_dw0(true, data_off::HOSTNQN as u16));
    // ... while the allowed host gets in.
    let (s, _) = connect_status(addr, ConnectCmd::admin(0), RESTRICTED, OTHER_HOST, CNTLID_DYNAMIC).await;
    assert!(s.is_success(), "{s}");

    // Admin Connect with a CNTLID other than FFFFh: IPO 16.
    let (s, dw0) = connect_status(addr, ConnectCmd::admin(0), SUBNQN, HOSTNQN, 5).await;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
    assert_eq!(dw0, 0x0001_0010);

    // RECFMT != 0: Incompatible Format.
    let mut cmd = ConnectCmd::admin(0);
    cmd.recfmt = 1;
    let (s, _) = connect_status(addr, cmd, SUBNQN, HOSTNQN, CNTLID_DYNAMIC).await;
    assert_eq!(s, Status::CONNECT_FORMAT.with_dnr());

    // Admin SQSIZE 0: IATTR=0, IPO=44.
    let mut cmd = ConnectCmd::admin(0);
    cmd.sqsize = 0;
    let (s, dw0) = connect_status(addr, cmd, SUBNQN, HOSTNQN, CNTLID_DYNAMIC).await;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
    assert_eq!(dw0, fabrics_off::SQSIZE as u32);

    let mut admin = admin_queue(addr, SUBNQN).await;
    let cntlid = admin.cntlid;

    // I/O Connect with a bogus CNTLID: IATTR=1, IPO=16.
    let bogus = if cntlid == 0x1234 { 0x1235 } else { 0x1234 };
    let (s, dw0) = connect_status(addr, ConnectCmd::io(1, 32), SUBNQN, HOSTNQN, bogus).await;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
    assert_eq!(dw0, 0x0001_0010);
    // The right CNTLID but another host NQN is just as unknown.
    let (s, dw0) = connect_status(addr, ConnectCmd::io(1, 32), SUBNQN, OTHER_HOST, cntlid).await;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
    assert_eq!(dw0, 0x0001_0010);

    // QID above the maximum (4): IATTR=0, IPO=42.
    let (s, dw0) = connect_status(addr, ConnectCmd::io(5, 32), SUBNQN, HOSTNQN, cntlid).await;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
    assert_eq!(dw0, fabrics_off::QID as u32);
    assert_eq!(dw0, 42);

    // I/O SQSIZE 0, and above CAP.MQES: IPO=44.
    let mut cmd = ConnectCmd::io(1, 32);
    cmd.sqsize = 0;
    let (s, dw0) = connect_status(addr, cmd, SUBNQN, HOSTNQN, cntlid).await;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
    assert_eq!(dw0, 44);
    let mut cmd = ConnectCmd::io(1, 32);
    cmd.sqsize = 4096;
    let (s, dw0) = connect_status(addr, cmd, SUBNQN, HOSTNQN, cntlid).await;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
    assert_eq!(dw0, 44);

    // QID 4 is the last allowed one.
    let mut io4 = RawClient::connect(addr).await;
    assert!(io4.io_connect(4, cntlid, SUBNQN, HOSTNQN).await.status.is_success());

    // A second Connect on a connected queue: Invalid Opcode (nvmet and SPDK
    // know no Connect once the queue has a controller).
    let again = admin.connect_data(SUBNQN, CNTLID_DYNAMIC);
    let r = admin.connect_cmd(ConnectCmd::admin(0), again).await;
    assert_eq!(r.status(), Status::INVALID_OPCODE.with_dnr().with_more());
    let again = io4.connect_data(SUBNQN, cntlid);
    let r = io4.connect_cmd(ConnectCmd::io(3, 32), again).await;
    assert_eq!(r.status(), Status::INVALID_OPCODE.with_dnr().with_more());
    // The same QID on another connection: Command Sequence Error too.
    let (s, _) = connect_status(addr, ConnectCmd::io(4, 32), SUBNQN, HOSTNQN, cntlid).await;
    assert_eq!(s, Status::CMD_SEQ_ERROR.with_dnr());

    // Nothing but Connect before Connect: Invalid Opcode.
    let mut fresh = RawClient::connect(addr).await;
    fresh.property_get(PropertyOffset::VS, false).await.expect_status(Status::INVALID_OPCODE);
    let r = fresh.identify(Cns::CTRL, 0).await;
    assert_eq!(r.status(), Status::INVALID_OPCODE.with_dnr());

    // The failures did not disturb the live controller.
    admin.identify(Cns::CTRL, 0).await.ok();
    io4.read(1, 0, 1, NS1_BS).await.ok();
}

async fn read_discovery(c: &mut RawClient) -> (DiscoveryLogHeader, Vec<DiscoveryLogEntry>) {
    // Header first, then one 1024-byte entry per Get Log Page (LPO paging), as libnvme does.
    let h = c.get_log_page(LogPageId::DISCOVERY, 0, 0, 1024, false).await.ok();
    assert_eq!(h.data.len(), 1024);
    let header = DiscoveryLogHeader::decode(&h.data).unwrap();
    assert_eq!(header.recfmt, 0);
    let mut entries = Vec::new();
    for i in 0..header.numrec {
        let r = c.get_log_page(LogPageId::DISCOVERY, 0, 1024 * (1 + i), 1024, false).await.ok();
        entries.push(DiscoveryLogEntry::decode(&r.data).unwrap());
    }
    // The header did not move meanwhile.
    let h2 = c.get_log_page(LogPageId::DISCOVERY, 0, 0, 20, false).await.ok();
    assert_eq!(h2.data.len(), 20);
    assert_eq!(DiscoveryLogHeader::decode(&h2.data).unwrap().genctr, header.genctr);
    (header, entries)
}

#[tokio::test]
async fn discovery_log_lists_subsystems_and_genctr_moves() {
    let (server, addr) = start(&default_config()).await;
    let mut d = RawClient::connect(addr).await;
    let cqe = d.admin_connect(DISCOVERY_NQN, HOSTNQN).await;
    assert!(cqe.status.is_success(), "{}", cqe.status);
    d.enable().await;

    let id = IdentifyController::decode(&d.identify(Cns::CTRL, 0).await.ok().data).unwrap();
    assert_eq!(id.subnqn, DISCOVERY_NQN);

    let (h, entries) = read_discovery(&mut d).await;
    assert!(h.numrec >= 2, "{h:?}");
    let port = addr.port().to_string();
    let ours = entries.iter().find(|e| e.subnqn == SUBNQN).expect("our subsystem listed");
    assert_eq!(ours.subtype, SubType::NVME);
    assert_eq!(ours.trtype, TrType::TCP);
    assert_eq!(ours.adrfam, AdrFam::IPV4);
    assert_eq!(ours.traddr, "127.0.0.1");
    assert_eq!(ours.trsvcid, port);
    assert_eq!(ours.cntlid, 0xFFFF);
    assert!(entries.iter().any(|e| e.subtype == SubType::CURRENT_DISCOVERY && e.subnqn == DISCOVERY_NQN));

    // Whole log in one read (header + entries) agrees.
    let len = 1024 * (1 + h.numrec as u32);
    let all = d.get_log_page(LogPageId::DISCOVERY, 0, 0, len, false).await.ok();
    let log = nvmeof_common::spec::DiscoveryLog::decode(&all.data).unwrap();
    assert!(log.is_complete());
    assert_eq!(log.entries, entries);

    // Discovery log change notices (AEC bit 31) with an AER outstanding.
    let set = SetFeaturesCmd::new(FeatureId::ASYNC_EVENT, 1 << 31);
    d.submit(set.to_sqe(0), None).await.ok();
    let mut aer = nvmeof_common::Sqe::new(AdminOpcode::ASYNC_EVENT.0);
    aer.set_sgl(nvmeof_common::SglDescriptor::transport(0));
    let aer = d.start(aer).await;

    // Adding a subsystem changes GENCTR and the entries, and raises the notice.
    let sub2 = "nqn.2024-01.io.nvmeof.test:sub2";
    server.target.add_subsystem(build_subsystem(sub2, "m", None, &[ram_ns(1, 1 << 20, 512)]).unwrap());
    let ev = d.wait(aer).await.ok();
    assert_eq!(ev.cqe.dw0(), 0x0070_F002, "discovery log change AEN");
    let (h2, entries2) = read_discovery(&mut d).await;
    assert_ne!(h2.genctr, h.genctr, "GENCTR unchanged after adding a subsystem");
    assert_eq!(h2.numrec, h.numrec + 1);
    assert!(entries2.iter().any(|e| e.subnqn == sub2 && e.subtype == SubType::NVME));

    // Subsystems the host may not reach are not listed.
    server.target.add_subsystem(
        build_subsystem(RESTRICTED, "m", Some(vec![OTHER_HOST.into()]), &[ram_ns(1, 1 << 20, 512)]).unwrap(),
    );
    let (_, entries3) = read_discovery(&mut d).await;
    assert!(!entries3.iter().any(|e| e.subnqn == RESTRICTED));

    // The discovery controller has no I/O queues and serves no other log pages.
    d.get_log_page(LogPageId::SMART, 0xFFFF_FFFF, 0, 512, false).await.expect_status(Status::INVALID_FIELD);
    let mut io = RawClient::connect(addr).await;
    let s = io.io_connect(1, d.cntlid, DISCOVERY_NQN, HOSTNQN).await.status;
    assert!(!s.is_success(), "I/O queue on the discovery controller: {s}");
}

#[tokio::test]
async fn disconnect_io_queue() {
    let (_server, addr) = start(&default_config()).await;
    let mut admin = admin_queue(addr, SUBNQN).await;
    let mut io = io_queue(addr, admin.cntlid, 1, 16384).await;
    let mut sqe = nvmeof_common::Sqe::new(0x7F);
    sqe.set_fctype(nvmeof_common::opcode::FabricsType::DISCONNECT.0);
    io.submit(sqe, None).await.ok();
    io.expect_closed_within(Duration::from_secs(2)).await;
    // The controller lives on and the QID can be connected again.
    admin.identify(Cns::CTRL, 0).await.ok();
    let mut io = io_queue(addr, admin.cntlid, 1, 16384).await;
    io.read(1, 0, 1, NS1_BS).await.ok();
    // Disconnect is not an admin-queue command.
    admin.submit(sqe, None).await.expect_status(Status::INVALID_OPCODE);
}

#[tokio::test]
async fn enable_with_bad_queue_entry_sizes_is_fatal() {
    let (_server, addr) = start(&default_config()).await;
    let mut a = RawClient::connect(addr).await;
    assert!(a.admin_connect(SUBNQN, HOSTNQN).await.status.is_success());
    // IOSQES 0 / IOCQES 0 on an I/O controller: CSTS.CFS instead of RDY (nvmet_start_ctrl).
    let cc = Cc(0).with_en(true);
    a.property_set(PropertyOffset::CC, cc.0).await.ok();
    let csts = a.csts().await;
    assert!(csts.cfs() && !csts.rdy(), "{csts:?}");
    // 8-byte Set of CC: Invalid Field.
    let set = nvmeof_common::spec::PropertySet::new64(PropertyOffset::CC, 1);
    a.submit(set.to_sqe(0), None).await.expect_status(Status::INVALID_FIELD);
    // Read-only registers cannot be set.
    a.property_set(PropertyOffset::CSTS, 1).await.expect_status(Status::INVALID_FIELD);
}

/// A Connect with CATTR "disable SQ flow control" is answered with SQHD FFFFh
/// (TP 8005, nvmet_install_queue), on the admin queue and on I/O queues; without
/// it the SQHD is a real head pointer. A host that reads anything else keeps SQ
/// flow control on (FreeBSD's libnvmf, whose SQ then never drains).
#[tokio::test]
async fn connect_disabling_sq_flow_control_answers_sqhd_ffff() {
    let (_server, addr) = start(&default_config()).await;
    let mut a = RawClient::connect(addr).await;
    let data = a.connect_data(SUBNQN, CNTLID_DYNAMIC);
    let c = a.connect_cmd(ConnectCmd::admin(0).with_disable_sqflow(true), data).await.ok();
    assert_eq!(c.cqe.sqhd, 0xFFFF, "admin Connect disabling SQ flow control");
    a.enable().await;
    let mut io = RawClient::connect(addr).await;
    let data = io.connect_data(SUBNQN, a.cntlid);
    let c = io.connect_cmd(ConnectCmd::io(1, 128).with_disable_sqflow(true), data).await.ok();
    assert_eq!(c.cqe.sqhd, 0xFFFF, "I/O Connect disabling SQ flow control");
    // With SQ flow control on, SQHD counts the Connect itself.
    let mut io2 = RawClient::connect(addr).await;
    let data = io2.connect_data(SUBNQN, a.cntlid);
    let c = io2.connect_cmd(ConnectCmd::io(2, 128), data).await.ok();
    assert_eq!(c.cqe.sqhd, 1, "I/O Connect with SQ flow control");
    // A rejected Connect is not one that disabled flow control.
    let mut bad = RawClient::connect(addr).await;
    let data = bad.connect_data(SUBNQN, a.cntlid);
    let c = bad.connect_cmd(ConnectCmd::io(0xFFFF, 128).with_disable_sqflow(true), data).await;
    assert!(!c.status().is_success());
    assert_ne!(c.cqe.sqhd, 0xFFFF);
}

/// A normal shutdown resets CC, as nvmet_update_cc does (nvmet_clear_ctrl:
/// RDY cleared, CC = 0, then SHST complete): Property Get CC reads 0 after it,
/// and the next write of CC.EN = 1 is an enable (0→1) that readies the
/// controller again, with CSTS = RDY only (nvmet_start_ctrl assigns CSTS).
#[tokio::test]
async fn shutdown_resets_cc_and_a_later_enable_readies() {
    let (_server, addr) = start(&default_config()).await;
    let mut a = admin_queue(addr, SUBNQN).await;
    let cc = Cc(a.property_get(PropertyOffset::CC, false).await.ok().cqe.dw0());
    assert!(cc.en());
    a.property_set(PropertyOffset::CC, cc.with_shn(Cc::SHN_NORMAL).0).await.ok();
    let csts = a.csts().await;
    assert_eq!(csts.shst(), Csts::SHST_COMPLETE, "{csts:?}");
    assert!(!csts.rdy(), "{csts:?}");
    let after = a.property_get(PropertyOffset::CC, false).await.ok().cqe.dw0();
    assert_eq!(after, 0, "CC after shutdown");
    a.identify(Cns::CTRL, 0).await.expect_status(Status::CMD_SEQ_ERROR);
    // EN = 1 again, SHN = 0, without a write of EN = 0 first.
    a.property_set(PropertyOffset::CC, cc.0).await.ok();
    let csts = a.csts().await;
    assert!(csts.rdy() && !csts.cfs(), "{csts:?}");
    assert_eq!(csts.shst(), Csts::SHST_NORMAL, "{csts:?}");
    a.identify(Cns::CTRL, 0).await.ok();
}

/// A Connect with more than one bad field gets the status of the check nvmet
/// makes first: RECFMT before the data (`nvmet_execute_admin_connect` /
/// `nvmet_execute_io_connect`), an admin CNTLID other than FFFFh before the
/// subsystem and host (`nvmet_alloc_ctrl` comes after it), and on an I/O queue
/// a QID already connected before SQSIZE above MQES (`nvmet_install_queue`).
#[tokio::test]
async fn connect_checks_come_in_nvmets_order() {
    let (_server, addr) = start(&default_config()).await;

    // RECFMT 1 with connect data whose SUBNQN has no NUL: Incompatible Format.
    let mut c = RawClient::connect(addr).await;
    let mut data = c.connect_data(SUBNQN, CNTLID_DYNAMIC).encode();
    data[data_off::SUBNQN..data_off::SUBNQN + 256].fill(b'a');
    let mut cmd = ConnectCmd::admin(0);
    cmd.recfmt = 1;
    let cid = c.send_cmd(cmd.to_sqe(0), bytes::Bytes::copy_from_slice(&data), bytes::Bytes::new()).await;
    assert_eq!(c.wait(cid).await.status(), Status::CONNECT_FORMAT.with_dnr());

    // Admin Connect to an unknown subsystem with CNTLID 5: the CNTLID is reported.
    let (s, dw0) =
        connect_status(addr, ConnectCmd::admin(0), "nqn.2024-01.io.nvmeof.test:nope", HOSTNQN, 5).await;
    assert_eq!(s, Status::CONNECT_INVALID_PARAM.with_dnr());
    assert_eq!(dw0, invalid_param_dw0(true, data_off::CNTLID as u16));

    // I/O Connect for a QID already connected, with SQSIZE above MQES: Command Sequence Error.
    let admin = admin_queue(addr, SUBNQN).await;
    let _io1 = io_queue(addr, admin.cntlid, 1, 8192).await;
    let mut cmd = ConnectCmd::io(1, 32);
    cmd.sqsize = 4096;
    let (s, _) = connect_status(addr, cmd, SUBNQN, HOSTNQN, admin.cntlid).await;
    assert_eq!(s, Status::CMD_SEQ_ERROR.with_dnr());
    // SQSIZE 0 comes first of all.
    let mut cmd = ConnectCmd::io(1, 32);
    cmd.sqsize = 0;
    let (s, dw0) = connect_status(addr, cmd, SUBNQN, HOSTNQN, admin.cntlid).await;
    assert_eq!((s, dw0), (Status::CONNECT_INVALID_PARAM.with_dnr(), fabrics_off::SQSIZE as u32));
    // A refused SQSIZE leaves the QID free.
    let mut cmd = ConnectCmd::io(2, 32);
    cmd.sqsize = 4096;
    let (s, dw0) = connect_status(addr, cmd, SUBNQN, HOSTNQN, admin.cntlid).await;
    assert_eq!((s, dw0), (Status::CONNECT_INVALID_PARAM.with_dnr(), fabrics_off::SQSIZE as u32));
    let _io2 = io_queue(addr, admin.cntlid, 2, 8192).await;
}

/// Property Get/Set look only at ATTRIB bit 0 (8-byte access), as nvmet does
/// (`nvmet_execute_prop_get` / `nvmet_execute_prop_set` test `attrib & 1`):
/// the reserved bits 7:1 do not turn an access into an Invalid Field.
#[tokio::test]
async fn property_attrib_reserved_bits_are_ignored() {
    use nvmeof_common::spec::{PropertyGet, PropertySet};
    let (_server, addr) = start(&default_config()).await;
    let mut a = RawClient::connect(addr).await;
    assert!(a.admin_connect(SUBNQN, HOSTNQN).await.status.is_success());
    let vs = PropertyGet { attrib: 0x02, offset: PropertyOffset::VS };
    let r = a.submit(vs.to_sqe(0), None).await.ok();
    assert_eq!(r.cqe.dw0(), nvmeof_target::cmd::admin::VERSION);
    let cap = PropertyGet { attrib: 0x07, offset: PropertyOffset::CAP };
    let r = a.submit(cap.to_sqe(0), None).await.ok();
    assert_eq!(Cap(r.cqe.result).mqes(), 1023);
    // 4-byte CAP is still refused, whatever the reserved bits.
    let cap4 = PropertyGet { attrib: 0x06, offset: PropertyOffset::CAP };
    a.submit(cap4.to_sqe(0), None).await.expect_status(Status::INVALID_FIELD);
    // A Set of CC with reserved ATTRIB bits enables the controller.
    let cc = Cc::linux_host_default(Cc::CSS_NVM).with_en(true);
    let set = PropertySet { attrib: 0x04, offset: PropertyOffset::CC, value: cc.0 as u64 };
    a.submit(set.to_sqe(0), None).await.ok();
    assert!(a.csts().await.rdy());
    // An 8-byte Set is refused, whatever the reserved bits.
    let set8 = PropertySet { attrib: 0x03, offset: PropertyOffset::CC, value: cc.0 as u64 };
    a.submit(set8.to_sqe(0), None).await.expect_status(Status::INVALID_FIELD);
}

/// A subsystem's `cntlid_min..=cntlid_max` (nvmet's attributes): its
/// controllers get IDs from that range only, in turn; with none free, an
/// admin Connect gets Controller Busy with DNR (nvmet_alloc_ctrl when its ida
/// range is used up), and an ID comes back once its controller is gone.
#[tokio::test]
async fn controller_ids_come_from_the_subsystems_range() {
    bounded(30, async {
        let mut cfg = default_config();
        cfg.subsystems[0].cntlids = 10..=11;
        let (_server, addr) = start(&cfg).await;
        let admin = || async {
            let mut a = RawClient::connect(addr).await;
            let cqe = a.admin_connect(SUBNQN, HOSTNQN).await;
            (a, cqe)
        };
        let (a, first) = admin().await;
        let (b, second) = admin().await;
        let mut ids = [first.dw0() as u16, second.dw0() as u16];
        ids.sort();
        assert_eq!(ids, [10, 11], "{first:?} {second:?}");
        let (_c, third) = admin().await;
        assert_eq!(third.status, Status::CONNECT_CTRL_BUSY.with_dnr(), "{third:?}");
        // One closes: its ID is free again (bounded wait for the close to land).
        let freed = first.dw0() as u16;
        drop(a);
        let t0 = std::time::Instant::now();
        loop {
            let (_d, again) = admin().await;
            if again.status.is_success() {
                assert_eq!(again.dw0() as u16, freed);
                break;
            }
            assert_eq!(again.status, Status::CONNECT_CTRL_BUSY.with_dnr());
            assert!(t0.elapsed() < Duration::from_secs(5), "the closed controller's ID never came back");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        drop(b);
    })
    .await;
}

/// The target replies with the type of service the host's SYN carried, as
/// nvmet copies it (`nvme connect --tos`): over IPv6 the kernel keeps each
/// received packet's traffic class, so the ICResp shows it; a host that marks
/// nothing gets nothing marked.
#[tokio::test]
async fn replies_carry_the_type_of_service_of_the_hosts_syn() {
    let mut cfg = default_config();
    cfg.listen = vec!["[::1]:0".parse().unwrap()];
    let (server, addr) = start(&cfg).await;
    for tclass in [0x28u32, 0xb8, 0] {
        let mut c =
            RawClient::tcp_with(addr, |s| socket2::SockRef::from(s).set_tclass_v6(tclass).unwrap()).await;
        nvmeof_net::report_received_tos(c.stream(), true).unwrap();
        let dgst = nvmeof_common::pdu::DigestFlags::new(false, false);
        c.icreq(nvmeof_common::pdu::IcReq { pfv: 0, hpda: 0, dgst, maxr2t: 0 }).await.unwrap();
        assert_eq!(nvmeof_net::received_tos(c.stream()).unwrap(), Some(tclass as u8));
    }
    server.shutdown(Duration::from_millis(100)).await;
}
