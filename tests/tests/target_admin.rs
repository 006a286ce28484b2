//! Target integration tests: admin commands over loopback TCP (Identify, Get
//! Log Page, Set/Get Features, Keep Alive, opcode and state checks).

use nvmeof_common::opcode::AdminOpcode;
use nvmeof_common::spec::features::{FeatureId, GetFeaturesCmd, NumQueues, SetFeaturesCmd};
use nvmeof_common::spec::identify::{decode_ns_desc_list, decode_ns_list, Cns, Csi, NsIdDescriptor};
use nvmeof_common::spec::log::{ChangedNsList, FwSlotLog, LogPageId, SmartLog};
use nvmeof_common::spec::{IdentifyController, IdentifyNamespace};
use nvmeof_common::{SglDescriptor, Sqe, Status};
use nvmeof_tests::harness::*;
use nvmeof_tests::raw_client::{RawClient, HOSTNQN};

#[tokio::test]
async fn identify_controller_namespace_lists() {
    let mut cfg = default_config();
    cfg.subsystems[0].namespaces.push(ram_ns(3, 4 << 20, 4096));
    let mut s = setup(&cfg).await;
    let a = &mut s.admin;

    let c = a.identify(Cns::CTRL, 0).await.ok();
    assert_eq!(c.data.len(), 4096);
    let id = IdentifyController::decode(&c.data).unwrap();
    assert_eq!(id.subnqn, SUBNQN);
    assert_eq!(id.cntlid, a.cntlid);
    assert_ne!(id.kas, 0, "KAS");
    assert_eq!(id.ioccsz, (64 + cfg.limits.in_capsule_data) / 16, "IOCCSZ");
    assert_eq!(id.iorcsz, 1);
    assert_eq!(id.icdoff, 0);
    assert_eq!(id.sgls & 3, 1, "SGLS: SGLs supported");
    assert_ne!(id.sgls & (1 << 20), 0, "SGLS: address as offset (in-capsule data)");
    assert_eq!(id.mdts, cfg.limits.mdts);
    assert_eq!((id.sqes, id.cqes), (0x66, 0x44));
    assert_eq!(id.cntrltype, 1);
    assert!(id.nn >= 3);
    assert_eq!(id.msdbd, 1);
    assert_eq!(id.mn, "nvmeof-test");
    assert!(!id.sn.is_empty());

    // Identify Namespace.
    let n1 = IdentifyNamespace::decode(&a.identify(Cns::NS, 1).await.ok().data).unwrap();
    assert_eq!(n1.nsze, NS1_SIZE / NS1_BS as u64);
    assert_eq!(n1.ncap, n1.nsze);
    assert_eq!(n1.block_size(), Some(NS1_BS));
    // DLFEAT: deallocated blocks read as zeroes, Write Zeroes honours DEAC
    // (target_io's Write Zeroes and DSM checks hold the promise).
    assert_eq!(n1.dlfeat, 0x09);
    let n3 = IdentifyNamespace::decode(&a.identify(Cns::NS, 3).await.ok().data).unwrap();
    assert_eq!(n3.nsze, (4 << 20) / 4096);
    assert_eq!(n3.block_size(), Some(4096));

    // Active namespace list, from NSID 0 and after NSID 1.
    let l = a.identify(Cns::ACTIVE_NS_LIST, 0).await.ok();
    assert_eq!(decode_ns_list(&l.data), vec![1, 3]);
    let l = a.identify(Cns::ACTIVE_NS_LIST, 1).await.ok();
    assert_eq!(decode_ns_list(&l.data), vec![3]);

    // Namespace identification descriptors agree with Identify Namespace.
    let d = decode_ns_desc_list(&a.identify(Cns::NS_DESC_LIST, 1).await.ok().data).unwrap();
    assert!(d.contains(&NsIdDescriptor::Csi(Csi::NVM)), "{d:?}");
    assert!(d.iter().any(|x| matches!(x, NsIdDescriptor::Uuid(_))), "{d:?}");
    if n1.nguid != [0; 16] {
        assert!(d.contains(&NsIdDescriptor::Nguid(n1.nguid)), "{d:?}");
    }
    if n1.eui64 != [0; 8] {
        assert!(d.contains(&NsIdDescriptor::Eui64(n1.eui64)), "{d:?}");
    }
    let d3 = decode_ns_desc_list(&a.identify(Cns::NS_DESC_LIST, 3).await.ok().data).unwrap();
    assert_ne!(d, d3, "two namespaces share identifiers");

    // Identify with an SGL shorter than 4096: Data SGL Length Invalid.
    let mut sqe = nvmeof_common::spec::IdentifyCmd::new(Cns::CTRL, 0).to_sqe(0);
    sqe.set_sgl(SglDescriptor::transport(1024));
    a.submit(sqe, None).await.expect_status(Status::SGL_INVALID_DATA);
}

#[tokio::test]
async fn get_log_pages_with_offsets() {
    let mut s = setup(&default_config()).await;
    let a = &mut s.admin;

    // SMART, controller-wide: 512 bytes.
    let r = a.get_log_page(LogPageId::SMART, 0xFFFF_FFFF, 0, 512, false).await.ok();
    assert_eq!(r.data.len(), 512);
    // A window inside it (LPO/NUMD) matches the whole read.
    let w = a.get_log_page(LogPageId::SMART, 0xFFFF_FFFF, 128, 64, false).await.ok();
    assert_eq!(w.data, r.data[128..192]);
    // SMART of an unknown namespace.
    let r = a.get_log_page(LogPageId::SMART, 7, 0, 512, false).await;
    assert!(!r.status().is_success());

    // Error information log: whole entries, and an odd NUMD.
    let e = a.get_log_page(LogPageId::ERROR, 0, 0, 64, false).await.ok();
    assert_eq!(e.data.len(), 64);
    let e = a.get_log_page(LogPageId::ERROR, 0, 64, 12, false).await.ok();
    assert_eq!(e.data.len(), 12);

    // Changed namespace list: 4 KiB, empty.
    let c = a.get_log_page(LogPageId::CHANGED_NS, 0, 0, 4096, false).await.ok();
    assert_eq!(c.data.len(), 4096);
    assert_eq!(ChangedNsList::decode(&c.data), ChangedNsList::List(vec![]));

    // LPO not dword aligned: Invalid Field.
    a.get_log_page(LogPageId::SMART, 0xFFFF_FFFF, 2, 64, false).await.expect_status(Status::INVALID_FIELD);
    // LPO past the end of the log: Invalid Field.
    a.get_log_page(LogPageId::SMART, 0xFFFF_FFFF, 8192, 64, false).await.expect_status(Status::INVALID_FIELD);
    // Unsupported log page.
    let r = a.get_log_page(LogPageId(0x7F), 0, 0, 512, false).await;
    assert!(!r.status().is_success());
    // Transfer over MDTS (1 MiB): Invalid Field.
    let r = a.get_log_page(LogPageId::ERROR, 0, 0, 2 << 20, false).await;
    r.expect_status(Status::INVALID_FIELD);
}

#[tokio::test]
async fn features_and_keep_alive() {
    let mut s = setup(&default_config()).await;
    let a = &mut s.admin;

    // Number of Queues.
    let set = SetFeaturesCmd::new(FeatureId::NUM_QUEUES, NumQueues::from_counts(4, 4).to_dw());
    let r = a.submit(set.to_sqe(0), None).await.ok();
    let nq = NumQueues::from_dw(r.cqe.dw0());
    assert!(nq.io_queue_pairs() >= 1, "{nq:?}");
    let g = a.submit(GetFeaturesCmd::new(FeatureId::NUM_QUEUES).to_sqe(0), None).await.ok();
    assert_eq!(g.cqe.dw0(), r.cqe.dw0());
    // 0xFFFF is invalid in a request.
    let set = SetFeaturesCmd::new(FeatureId::NUM_QUEUES, 0xFFFF_FFFF);
    a.submit(set.to_sqe(0), None).await.expect_status(Status::INVALID_FIELD);

    // KATO (connected with 0): Keep Alive is refused while disabled, accepted after.
    let g = a.submit(GetFeaturesCmd::new(FeatureId::KATO).to_sqe(0), None).await.ok();
    assert_eq!(g.cqe.dw0(), 0);
    let ka = a.keep_alive().await;
    assert_eq!(ka.status().code(), Status::KAT_INVALID, "Keep Alive with KATO 0");
    a.submit(SetFeaturesCmd::new(FeatureId::KATO, 5000).to_sqe(0), None).await.ok();
    let g = a.submit(GetFeaturesCmd::new(FeatureId::KATO).to_sqe(0), None).await.ok();
    assert_eq!(g.cqe.dw0(), 5000);
    a.keep_alive().await.ok();

    // Asynchronous Event Configuration.
    a.submit(SetFeaturesCmd::new(FeatureId::ASYNC_EVENT, 0x100).to_sqe(0), None).await.ok();
    let g = a.submit(GetFeaturesCmd::new(FeatureId::ASYNC_EVENT).to_sqe(0), None).await.ok();
    assert_eq!(g.cqe.dw0(), 0x100);

    // Unknown feature.
    a.submit(SetFeaturesCmd::new(FeatureId(0x7E), 1).to_sqe(0), None)
        .await
        .expect_status(Status::INVALID_FIELD);
}

/// Keep Alive while KATO is 0 completes with Keep Alive Timeout Invalid, generic
/// status 1Ah without DNR, as nvmet's `nvmet_execute_keep_alive` answers
/// (`NVME_SC_KA_TIMEOUT_INVALID`); 19h would be Keep Alive Timer Expired.
#[tokio::test]
async fn keep_alive_with_kato_zero_is_timeout_invalid_1ah() {
    let mut s = setup(&default_config()).await;
    let ka = s.admin.keep_alive().await;
    let st = ka.status();
    assert_eq!((st.sct().0, st.sc(), st.dnr()), (0, 0x1A, false), "Keep Alive with KATO 0: {st}");
    // The wire form the host decodes: (SCT << 8 | SC) << 1 in the status
    // field, with More (bit 14) for its error log entry.
    assert_eq!(st.to_wire(), 0x1A << 1 | 1 << 14);
}

#[tokio::test]
async fn invalid_admin_opcode() {
    let mut s = setup(&default_config()).await;
    for op in [0x7E, 0x03, AdminOpcode::FORMAT_NVM.0, 0xC0] {
        let mut sqe = Sqe::new(op);
        sqe.set_sgl(SglDescriptor::transport(0));
        let r = s.admin.submit(sqe, None).await;
        assert_eq!(r.status(), Status::INVALID_OPCODE.with_dnr().with_more(), "opcode {op:#x}");
    }
    // Queue management commands exist only on PCIe: Create I/O SQ (01h, the Write opcode
    // on I/O queues) and Delete I/O SQ (00h).
    let mut sqe = Sqe::new(AdminOpcode::CREATE_SQ.0);
    sqe.set_sgl(SglDescriptor::transport(0));
    assert_eq!(s.admin.submit(sqe, None).await.status(), Status::INVALID_OPCODE.with_dnr().with_more());
    let mut sqe = Sqe::new(AdminOpcode::DELETE_SQ.0);
    sqe.set_sgl(SglDescriptor::transport(0));
    assert_eq!(s.admin.submit(sqe, None).await.status(), Status::INVALID_OPCODE.with_dnr().with_more());
    // The queue still works.
    s.admin.identify(Cns::CTRL, 0).await.ok();
}

#[tokio::test]
async fn commands_before_enable_are_sequence_errors() {
    let (_server, addr) = start(&default_config()).await;
    let mut a = RawClient::connect(addr).await;
    assert!(a.admin_connect(SUBNQN, HOSTNQN).await.status.is_success());
    // Admin command before CC.EN.
    let r = a.identify(Cns::CTRL, 0).await;
    assert_eq!(r.status(), Status::CMD_SEQ_ERROR.with_dnr().with_more());
    // I/O queue connects, but I/O before CC.EN is a Command Sequence Error.
    let mut io = RawClient::connect(addr).await;
    assert!(io.io_connect(1, a.cntlid, SUBNQN, HOSTNQN).await.status.is_success());
    let r = io.read(1, 0, 1, NS1_BS).await;
    assert_eq!(r.status(), Status::CMD_SEQ_ERROR.with_dnr().with_more());
    assert!(r.data.is_empty(), "no data for a failed read");
    let r = io.write(1, 0, &[1; 512], NS1_BS).await;
    assert_eq!(r.status(), Status::CMD_SEQ_ERROR.with_dnr().with_more());
    // After enabling, both work.
    a.enable().await;
    a.identify(Cns::CTRL, 0).await.ok();
    io.write(1, 0, &[1; 512], NS1_BS).await.ok();
    assert_eq!(io.read(1, 0, 1, NS1_BS).await.ok().data, vec![1; 512]);
    // Disabling again (controller reset) makes I/O fail again.
    a.property_set(nvmeof_common::spec::PropertyOffset::CC, 0).await.ok();
    assert!(!a.csts().await.rdy());
    let r = io.read(1, 0, 1, NS1_BS).await;
    assert_eq!(r.status(), Status::CMD_SEQ_ERROR.with_dnr().with_more());
}

/// SMART / Health Information is controller-wide only for NSID FFFFFFFFh; any
/// other NSID names a namespace, and NSID 0 names none: Invalid Namespace or
/// Format with DNR, as nvmet answers (`nvmet_execute_get_log_page_smart` →
/// `nvmet_get_smart_log_nsid` → `nvmet_req_find_ns`).
#[tokio::test]
async fn smart_log_for_nsid_0_is_invalid_namespace() {
    let mut s = setup(&default_config()).await;
    let a = &mut s.admin;
    let r = a.get_log_page(LogPageId::SMART, 0, 0, 512, false).await;
    assert_eq!(r.status(), Status::INVALID_NS.with_dnr().with_more(), "SMART log, NSID 0");
    let r = a.get_log_page(LogPageId::SMART, 7, 0, 512, false).await;
    assert_eq!(r.status(), Status::INVALID_NS.with_dnr().with_more(), "SMART log, inactive NSID");
    assert_eq!(a.get_log_page(LogPageId::SMART, 1, 0, 512, false).await.ok().data.len(), 512);
    assert_eq!(a.get_log_page(LogPageId::SMART, 0xFFFF_FFFF, 0, 512, false).await.ok().data.len(), 512);
}

/// (Host Read Commands, Data Units Read, Host Write Commands, Data Units
/// Written) of the SMART log for `nsid`.
async fn smart_io(c: &mut RawClient, nsid: u32) -> (u128, u128, u128, u128) {
    let l = SmartLog::decode(&c.get_log_page(LogPageId::SMART, nsid, 0, 512, false).await.ok().data).unwrap();
    (l.host_reads, l.data_units_read, l.host_writes, l.data_units_written)
}

/// SMART's Host Read / Write Commands and Data Units Read / Written count
/// every host's I/O to each namespace (Read and Compare as reads, Write and
/// Write Zeroes as writes; data units are thousands of 512 bytes, rounded
/// up); NSID FFFFFFFFh sums the subsystem's namespaces, and a new controller
/// (here the second host's) sees what the first did.
#[tokio::test]
async fn smart_log_counts_the_host_io_of_each_namespace() {
    let mut cfg = default_config();
    cfg.subsystems[0].namespaces.push(ram_ns(2, 1 << 20, 4096));
    let mut s = setup(&cfg).await;
    assert_eq!(smart_io(&mut s.admin, 0xFFFF_FFFF).await, (0, 0, 0, 0));
    // Namespace 1 (512-byte blocks): 3 writes of 8 blocks, 2 reads of 1000
    // blocks (512,000 bytes: exactly one data unit each), one Write Zeroes.
    for lba in [0, 8, 16] {
        s.io.write(1, lba, &[7; 4096], NS1_BS).await.ok();
    }
    for _ in 0..2 {
        s.io.read(1, 0, 1000, NS1_BS).await.ok();
    }
    let mut wz = Sqe::new(nvmeof_common::opcode::IoOpcode::WRITE_ZEROES.0);
    wz.set_nsid(1).set_slba(100).set_cdw(12, 7);
    s.io.submit(wz, None).await.ok();
    // Namespace 2 (4096-byte blocks): one write of 2 blocks; a read past its
    // end fails its checks and counts nothing.
    s.io.write(2, 0, &[9; 8192], 4096).await.ok();
    assert!(!s.io.read(2, 256, 1, 4096).await.status().is_success());
    assert_eq!(smart_io(&mut s.admin, 1).await, (2, 2, 4, 1), "3 × 4 KiB = 24 units of 512: 1 data unit");
    assert_eq!(smart_io(&mut s.admin, 2).await, (0, 0, 1, 1));
    assert_eq!(smart_io(&mut s.admin, 0xFFFF_FFFF).await, (2, 2, 5, 2));
    // Another host's controller reads the same totals.
    let mut other = RawClient::connect(s.addr).await;
    assert!(other.admin_connect(SUBNQN, "nqn.2024-01.io.nvmeof.test:smart-other").await.status.is_success());
    other.enable().await;
    assert_eq!(smart_io(&mut other, 0xFFFF_FFFF).await, (2, 2, 5, 2));
}

/// A subsystem's `serial` and `firmware` (nvmet's `attr_serial`,
/// `attr_firmware`) are what Identify Controller (SN, FR, space padded) and
/// the Firmware Slot log report; without them, the serial derived from the
/// NQN and this build's version.
#[tokio::test]
async fn configured_serial_and_firmware_are_reported() {
    let mut cfg = default_config();
    cfg.subsystems[0].serial = Some("SN-0042".into());
    cfg.subsystems[0].firmware = Some("fw9.9".into());
    let mut s = setup(&cfg).await;
    let raw = s.admin.identify(Cns::CTRL, 0).await.ok().data;
    assert_eq!((&raw[4..24], &raw[64..72]), (&b"SN-0042             "[..], &b"fw9.9   "[..]));
    let id = IdentifyController::decode(&raw).unwrap();
    assert_eq!((id.sn.trim(), id.fr.trim()), ("SN-0042", "fw9.9"));
    let fw = FwSlotLog::decode(&s.admin.get_log_page(LogPageId::FW_SLOT, 0, 0, 512, false).await.ok().data)
        .unwrap();
    assert_eq!((fw.afi, fw.revision(1).unwrap()), (1, "fw9.9".to_string()));
    let mut d = setup(&default_config()).await;
    let id = IdentifyController::decode(&d.admin.identify(Cns::CTRL, 0).await.ok().data).unwrap();
    assert_eq!((id.sn.trim().len(), id.fr.trim()), (20, env!("CARGO_PKG_VERSION")));
}
