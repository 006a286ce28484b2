//! A port's own queue limits, `in_capsule_data` and `max_queue_entries` in
//! its `[[port]]` table (nvmet's `ports/N/param_inline_data_size` and
//! `param_max_queue_size`): a controller whose admin queue came in on the
//! port reports them (Identify IOCCSZ and MAXCMD, CAP.MQES), its I/O queues
//! are held to them (Connect SQSIZE, in-capsule data), while the other
//! port keeps the `[limits]` values; hosts fit themselves to them. A reload
//! that changes them applies at the next start only (nvmet takes them only
//! while the port is disabled).

use bytes::Bytes;
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::spec::identify::{Cns, IdentifyController};
use nvmeof_common::spec::property::{Cap, PropertyOffset};
use nvmeof_common::spec::{ConnectCmd, ConnectData};
use nvmeof_common::sqe::fabrics_off;
use nvmeof_common::Status;
use nvmeof_initiator::{ConnectOptions, Controller};
use nvmeof_target::config::TargetConfig;
use nvmeof_target::server::Server;
use nvmeof_tests::harness::*;
use nvmeof_tests::raw_client::RawClient;

const BS: u32 = 512;

/// Two ports on loopback; the second with `port2` (TOML lines), and one
/// 1 MiB RAM namespace in [`SUBNQN`].
fn config(port2: &str) -> TargetConfig {
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n[[port]]\nlisten = \"127.0.0.1:0\"\n{port2}\n\n\
         [[subsystem]]\nnqn = \"{SUBNQN}\"\n[[subsystem.namespace]]\nram = \"1M\"\nblock_size = {BS}\n"
    ))
    .unwrap()
}

/// What a controller created through `addr` reports: (CAP.MQES, Identify IOCCSZ, MAXCMD).
async fn reported(addr: std::net::SocketAddr) -> (u16, u32, u16) {
    let mut admin = admin_queue(addr, SUBNQN).await;
    let cap = Cap(admin.property_get(PropertyOffset::CAP, true).await.ok().cqe.result);
    let id = IdentifyController::decode(&admin.identify(Cns::CTRL, 0).await.ok().data).unwrap();
    (cap.mqes(), id.ioccsz, id.maxcmd)
}

/// An I/O Connect of queue 1 of `cntlid` through `addr` asking for `entries` entries.
async fn io_connect(addr: std::net::SocketAddr, cntlid: u16, entries: u16) -> (RawClient, Status, u32) {
    let mut c = RawClient::connect(addr).await;
    let data: ConnectData = c.connect_data(SUBNQN, cntlid);
    let r = c.connect_cmd(ConnectCmd::io(1, entries), data).await;
    let (s, dw0) = (r.status(), r.cqe.dw0());
    (c, s, dw0)
}

/// An 8 KiB write sent in the capsule whatever the limit (the raw client
/// otherwise keeps to `icd_limit`).
async fn in_capsule_write(io: &mut RawClient, lba: u64, data: &[u8]) -> Status {
    io.icd_limit = data.len() as u32;
    let nlb = (data.len() / BS as usize) as u32;
    let sqe = RawClient::rw_sqe(IoOpcode::WRITE, 1, lba, nlb);
    let cid = io.start_write(sqe, Bytes::copy_from_slice(data), false).await;
    io.wait(cid).await.status()
}

#[tokio::test]
async fn a_ports_own_limits_hold_for_controllers_that_came_in_on_it() {
    bounded(60, async {
        let cfg = config("in_capsule_data = 4096\nmax_queue_entries = 32");
        let server = Server::start(&cfg).await.unwrap();
        let (p1, p2) = (server.local_addrs[0], server.local_addrs[1]);

        // Each port's controllers report its values; port 1 the [limits] ones.
        let l = &cfg.limits;
        assert_eq!(
            reported(p1).await,
            ((l.max_queue_entries - 1) as u16, (64 + l.in_capsule_data) / 16, l.max_queue_entries as u16)
        );
        assert_eq!(reported(p2).await, (31, (64 + 4096) / 16, 32));

        // Through port 2: SQSIZE above its MQES is refused (Connect Invalid
        // Parameters, IPO 44), its MQES + 1 entries are granted.
        let admin2 = admin_queue(p2, SUBNQN).await;
        let (_c, s, dw0) = io_connect(p2, admin2.cntlid, 33).await;
        assert_eq!((s, dw0), (Status::CONNECT_INVALID_PARAM.with_dnr(), fabrics_off::SQSIZE as u32));
        let (mut io2, s, _) = io_connect(p2, admin2.cntlid, 32).await;
        assert!(s.is_success(), "32 entries through port 2: {s}");

        // In-capsule data up to the port's 4 KiB; 8 KiB in the capsule is
        // SGL Offset Invalid (nvmet-tcp's check), through R2T it is fine.
        let d4 = pattern(4096, 1);
        io2.icd_limit = 4096;
        let w = io2.write(1, 0, &d4, BS).await.ok();
        assert_eq!(w.r2t_count(), 0, "4 KiB travels in the capsule");
        let d8 = pattern(8192, 2);
        // (with More: the error log has the entry, as for every failed command)
        assert_eq!(
            in_capsule_write(&mut io2, 16, &d8).await,
            Status::SGL_INVALID_OFFSET.with_dnr().with_more()
        );
        let w = io2.write_opts(1, 16, &d8, BS, false, true).await.ok();
        assert!(w.r2t_count() >= 1);
        assert_eq!(io2.read(1, 16, 16, BS).await.ok().data, d8);
        assert_eq!(io2.read(1, 0, 8, BS).await.ok().data, d4);

        // Through port 1 the same 8 KiB in the capsule, and 33 entries, are fine.
        let admin1 = admin_queue(p1, SUBNQN).await;
        let (mut io1, s, _) = io_connect(p1, admin1.cntlid, 33).await;
        assert!(s.is_success(), "33 entries through port 1: {s}");
        assert_eq!(in_capsule_write(&mut io1, 32, &d8).await, Status::SUCCESS);
        assert_eq!(io1.read(1, 32, 16, BS).await.ok().data, d8);

        // A reload that changes them warns; they apply at the next start.
        server.reload(&config("in_capsule_data = 8192\nmax_queue_entries = 64")).unwrap();
        assert_eq!(reported(p2).await, (31, (64 + 4096) / 16, 32), "unchanged until a restart");
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await;
}

/// The initiator fits itself to the port it connects through: the queue
/// depth it asks for is cut to MQES + 1, writes above IOCCSZ go through R2T.
#[tokio::test]
async fn the_initiator_fits_each_ports_limits() {
    bounded(60, async {
        let cfg = config("in_capsule_data = 4096\nmax_queue_entries = 16");
        let server = Server::start(&cfg).await.unwrap();
        let (p1, p2) = (server.local_addrs[0], server.local_addrs[1]);
        let opts = ConnectOptions { io_queues: 2, queue_depth: 64, ..ConnectOptions::default() };
        let c1 = Controller::connect(p1, SUBNQN, opts.clone()).await.unwrap();
        let c2 = Controller::connect(p2, SUBNQN, opts).await.unwrap();
        let (i1, i2) = (c1.info(), c2.info());
        assert_eq!((i1.queue_depth, i1.inline_data), (64, cfg.limits.in_capsule_data));
        assert_eq!((i2.queue_depth, i2.inline_data), (16, 4096));

        // Writes of every size, and 32 at once on a 16-entry queue pair, read
        // back through the other port.
        let (n1, n2) = (c1.namespace(1).await.unwrap(), c2.namespace(1).await.unwrap());
        for (i, len) in [512usize, 4096, 4608, 65536].into_iter().enumerate() {
            let d = pattern(len, i as u64 + 10);
            let lba = i as u64 * 256;
            n2.write(lba, &d).await.unwrap();
            let mut back = vec![0u8; len];
            n1.read(lba, &mut back).await.unwrap();
            assert!(back == d, "{len} bytes written through port 2 read back differently");
        }
        let mut writes = tokio::task::JoinSet::new();
        for k in 0..32u64 {
            let n2 = n2.clone();
            writes.spawn(async move { n2.write(1024 + k * 8, &pattern(4096, 100 + k)).await });
        }
        while let Some(r) = writes.join_next().await {
            r.unwrap().unwrap();
        }
        for k in 0..32u64 {
            let mut back = vec![0u8; 4096];
            n1.read(1024 + k * 8, &mut back).await.unwrap();
            assert!(back == pattern(4096, 100 + k), "write {k} read back differently");
        }
        c1.shutdown().await.unwrap();
        c2.shutdown().await.unwrap();
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await;
}
