//! The initiator against a small scripted NVMe/TCP controller built from the
//! codec (RAM disk, configurable in-capsule size, MDTS, MAXH2CDATA, R2T
//! window size, SUCCESS flag, dropped connections, black-holed commands).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nvmeof_common::decoder::{DecoderConfig, PduDecoder, Role};
use nvmeof_common::pdu::{C2hData, CapsuleResp, EncodeConfig, IcResp, Pdu, R2t};
use nvmeof_common::spec::discovery::{AdrFam, DiscoveryLog, DiscoveryLogEntry, SubType, TREQ_DISABLE_SQFLOW};
use nvmeof_common::spec::identify::{encode_ns_list, LbaFormat};
use nvmeof_common::spec::log::{log_window, GetLogPageCmd, LogPageId};
use nvmeof_common::spec::{
    Cap, Cc, ConnectCmd, ConnectData, Csts, IdentifyCmd, IdentifyController, IdentifyNamespace, PropertyGet,
    PropertyOffset, PropertySet, Vs, DISCOVERY_NQN,
};
use nvmeof_common::sqe::SglId;
use nvmeof_common::{Cqe, Sqe, Status};
use nvmeof_initiator::{
    ConnectOptions, Controller, ControllerState, Error, HostIdentity, IoFlags, Payload, ReconnectPolicy,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SUBNQN: &str = "nqn.2024-01.io.example:fake";

#[derive(Clone)]
struct Cfg {
    /// In-capsule data accepted on I/O queues (IOCCSZ = (64 + inline) / 16).
    inline: u32,
    mdts: u8,
    maxh2cdata: u32,
    /// R2T window size (the controller asks for the data in pieces).
    r2t_chunk: u32,
    /// C2HData payload size.
    c2h_chunk: usize,
    mqes: u16,
    grant_queues: u16,
    blocks: u64,
    /// Reads of this LBA never complete.
    black_hole_lba: Option<u64>,
    /// A read of this LBA closes the connection (every time).
    poison_lba: Option<u64>,
    discovery_entries: usize,
    /// LBADS of namespace 1's only LBA format (log2 of its block size).
    lbads: u8,
    /// IOCCSZ reported instead of the one `inline` implies.
    ioccsz: Option<u32>,
    /// Command Retry Delay Times reported in Identify Controller (100 ms units).
    crdt: [u16; 3],
    /// Reads of this LBA fail with this status while
    /// [`Target::failures_left`] is positive.
    failing_lba: Option<(u64, Status)>,
    /// A failing read of `failing_lba` sends data (0xEE bytes) before its status.
    failing_with_data: bool,
    /// CTRATT bits reported in Identify Controller (TBKAS: traffic-based keep-alive).
    ctratt: u32,
}

impl Default for Cfg {
    fn default() -> Self {
        Self {
            inline: 4096,
            mdts: 0,
            maxh2cdata: 8192,
            r2t_chunk: 16384,
            c2h_chunk: 4096,
            mqes: 127,
            grant_queues: 4,
            blocks: 4096,
            black_hole_lba: None,
            poison_lba: None,
            discovery_entries: 3,
            lbads: 9,
            ioccsz: None,
            crdt: [0; 3],
            ctratt: 0,
            failing_with_data: false,
            failing_lba: None,
        }
    }
}

#[derive(Default, Clone, Debug)]
struct Stats {
    admin_connects: usize,
    io_connects: usize,
    keep_alives: usize,
    success_reads: usize,
    resp_reads: usize,
    inline_writes: usize,
    r2t_writes: usize,
    r2ts: usize,
    h2c_pdus: usize,
    max_io_len: usize,
    shutdowns: usize,
    disc_header_reads: usize,
    hdgst_seen: bool,
    /// Connections closed by a read of `poison_lba`.
    poisoned: usize,
    /// Reads of `failing_lba`, failed or not.
    failing_lba_reads: usize,
    /// Byte 0 (ACRE) of each Set Features Host Behavior Support.
    host_behavior_acre: Vec<u8>,
    /// Times an I/O queue had more commands outstanding than its SQSIZE
    /// (reads of `black_hole_lba` are the ones that stay outstanding).
    sq_overflows: usize,
}

struct Target {
    cfg: Cfg,
    disk: Mutex<Vec<u8>>,
    next_cntlid: AtomicU16,
    stats: Mutex<Stats>,
    /// Close the connection when this many more I/O commands arrived (≤ 0: never).
    drop_countdown: AtomicI64,
    /// Reads of `Cfg::failing_lba` still to fail.
    failures_left: AtomicI64,
    /// Close every new connection at once.
    refuse: AtomicBool,
    /// Close the connection on a Property Set of CC with SHN (a controller
    /// that goes away during the shutdown handshake).
    drop_on_shutdown: AtomicBool,
    /// Never answer a Property Set of CC with SHN.
    ignore_shutdown: AtomicBool,
    genctr: AtomicI64,
    /// MQES reported from now on instead of `cfg.mqes` (0: `cfg.mqes`).
    mqes_now: AtomicU16,
}

impl Target {
    fn mqes(&self) -> u16 {
        match self.mqes_now.load(Ordering::SeqCst) {
            0 => self.cfg.mqes,
            m => m,
        }
    }

    /// Namespace 1's block size.
    fn bs(&self) -> usize {
        1 << self.cfg.lbads
    }

    fn stats(&self) -> Stats {
        self.stats.lock().unwrap().clone()
    }
}

async fn start(cfg: Cfg) -> (SocketAddr, Arc<Target>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let t = Arc::new(Target {
        disk: Mutex::new(vec![0; (cfg.blocks as usize) << cfg.lbads]),
        cfg,
        next_cntlid: AtomicU16::new(1),
        stats: Mutex::default(),
        drop_countdown: AtomicI64::new(0),
        failures_left: AtomicI64::new(0),
        refuse: AtomicBool::new(false),
        drop_on_shutdown: AtomicBool::new(false),
        ignore_shutdown: AtomicBool::new(false),
        genctr: AtomicI64::new(1),
        mqes_now: AtomicU16::new(0),
    });
    let t2 = t.clone();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            if t2.refuse.load(Ordering::SeqCst) {
                drop(s);
                continue;
            }
            tokio::spawn(Conn::new(t2.clone()).run(s));
        }
    });
    (addr, t)
}

struct PendingWrite {
    sqe: Sqe,
    buf: Vec<u8>,
    received: usize,
    requested: usize,
}

struct Conn {
    t: Arc<Target>,
    dec: PduDecoder,
    enc: EncodeConfig,
    qid: u16,
    cntlid: u16,
    sqflow_off: bool,
    cc: Cc,
    discovery: bool,
    pending: HashMap<u16, PendingWrite>,
    out: Vec<Pdu>,
    /// SQSIZE of this queue's Connect.
    sqsize: u16,
    /// Reads of `black_hole_lba` received (never answered).
    black_holed: u16,
}

fn ok(sqe: &Sqe, qid: u16, result: u64) -> Pdu {
    status(sqe, qid, Status::SUCCESS, result)
}

fn status(sqe: &Sqe, qid: u16, st: Status, result: u64) -> Pdu {
    Pdu::CapsuleResp(CapsuleResp { cqe: Cqe { result, sqhd: 0, sqid: qid, cid: sqe.cid(), status: st } })
}

impl Conn {
    fn new(t: Arc<Target>) -> Self {
        Self {
            t,
            dec: PduDecoder::new(DecoderConfig::new(Role::Controller)),
            enc: EncodeConfig::default(),
            qid: 0,
            cntlid: 0,
            sqflow_off: false,
            cc: Cc(0),
            discovery: false,
            pending: HashMap::new(),
            out: Vec::new(),
            sqsize: 0,
            black_holed: 0,
        }
    }

    async fn run(mut self, mut s: TcpStream) {
        let mut rbuf = BytesMut::with_capacity(1 << 16);
        loop {
            loop {
                let pdu = match self.dec.decode(&mut rbuf) {
                    Ok(Some(p)) => p,
                    Ok(None) => break,
                    Err(e) => panic!("fake target decode error: {e}"),
                };
                if !self.handle(pdu) {
                    return; // drop the connection
                }
                let mut wire = Vec::new();
                for p in self.out.drain(..) {
                    wire.extend_from_slice(&p.encode_to_vec(&self.enc));
                }
                if s.write_all(&wire).await.is_err() {
                    return;
                }
            }
            match s.read_buf(&mut rbuf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }

    /// Returns false to close the connection.
    fn handle(&mut self, pdu: Pdu) -> bool {
        match pdu {
            Pdu::IcReq(r) => {
                r.validate(0).unwrap();
                let mut dc = DecoderConfig::new(Role::Controller);
                dc.hdgst = r.dgst.hdgst();
                dc.ddgst = r.dgst.ddgst();
                self.t.stats.lock().unwrap().hdgst_seen |= dc.hdgst;
                self.dec.set_config(dc);
                self.enc = EncodeConfig { hdgst: dc.hdgst, ddgst: dc.ddgst, pda: 0 };
                self.out.push(Pdu::IcResp(IcResp {
                    pfv: 0,
                    cpda: 0,
                    dgst: r.dgst,
                    maxh2cdata: self.t.cfg.maxh2cdata,
                }));
                true
            }
            Pdu::CapsuleCmd(c) => self.command(c.sqe, c.data),
            Pdu::H2cData(h) => {
                let p = self.pending.get_mut(&h.cccid).expect("H2CData for a pending write");
                assert_eq!(h.datao as usize, p.received, "H2CData in order");
                assert!(h.data.len() <= self.t.cfg.maxh2cdata as usize);
                p.buf[p.received..p.received + h.data.len()].copy_from_slice(&h.data);
                p.received += h.data.len();
                self.t.stats.lock().unwrap().h2c_pdus += 1;
                if p.received == p.requested && p.received < p.buf.len() {
                    assert!(h.last);
                    self.next_r2t(h.cccid, h.ttag + 1);
                } else if p.received == p.buf.len() {
                    assert!(h.last);
                    let p = self.pending.remove(&h.cccid).unwrap();
                    self.execute_write(&p.sqe, &p.buf);
                }
                true
            }
            other => panic!("fake target: unexpected {other:?}"),
        }
    }

    fn next_r2t(&mut self, cid: u16, ttag: u16) {
        let chunk = self.t.cfg.r2t_chunk as usize;
        let p = self.pending.get_mut(&cid).unwrap();
        let n = (p.buf.len() - p.received).min(chunk);
        self.out.push(Pdu::R2t(R2t { cccid: cid, ttag, r2to: p.received as u32, r2tl: n as u32 }));
        p.requested = p.received + n;
        self.t.stats.lock().unwrap().r2ts += 1;
    }

    fn command(&mut self, sqe: Sqe, data: Bytes) -> bool {
        let qid = self.qid;
        if sqe.opcode() == 0x7F {
            let shn = sqe.fctype() == 0x00 && Cc(PropertySet::from_sqe(&sqe).value as u32).shn() != 0;
            if shn && self.t.drop_on_shutdown.load(Ordering::SeqCst) {
                return false;
            }
            if shn && self.t.ignore_shutdown.load(Ordering::SeqCst) {
                return true;
            }
            self.fabrics(sqe, data);
            return true;
        }
        if qid == 0 {
            self.admin(sqe, &data);
            return true;
        }
        if matches!(sqe.opcode(), 0x01 | 0x02 | 0x05) {
            let left = self.t.drop_countdown.fetch_sub(1, Ordering::SeqCst);
            if left == 1 {
                return false;
            }
        }
        let sgl = sqe.sgl();
        {
            let mut st = self.t.stats.lock().unwrap();
            st.max_io_len = st.max_io_len.max(sgl.length as usize);
        }
        match sqe.opcode() {
            0x02 if Some(sqe.slba()) == self.t.cfg.poison_lba => {
                self.t.stats.lock().unwrap().poisoned += 1;
                return false;
            }
            0x02 => self.read(sqe),
            0x01 | 0x05 | 0x09 => {
                if sgl.id == SglId::DATA_BLOCK_OFFSET {
                    assert!(sgl.length <= self.t.cfg.inline, "in-capsule data above IOCCSZ");
                    assert_eq!(data.len(), sgl.length as usize);
                    self.t.stats.lock().unwrap().inline_writes += 1;
                    self.execute_write(&sqe, &data);
                } else {
                    assert_eq!(sgl.id, SglId::TRANSPORT_DATA_BLOCK);
                    assert!(data.is_empty());
                    self.t.stats.lock().unwrap().r2t_writes += 1;
                    let cid = sqe.cid();
                    let p =
                        PendingWrite { sqe, buf: vec![0; sgl.length as usize], received: 0, requested: 0 };
                    self.pending.insert(cid, p);
                    self.next_r2t(cid, 0);
                }
            }
            0x00 => self.out.push(ok(&sqe, qid, 0)),
            0x08 => {
                let (lba, n) = (sqe.slba() as usize, sqe.nlb() as usize + 1);
                let bs = self.t.bs();
                self.t.disk.lock().unwrap()[lba * bs..(lba + n) * bs].fill(0);
                self.out.push(ok(&sqe, qid, 0));
            }
            _ => self.out.push(status(&sqe, qid, Status::INVALID_OPCODE.with_dnr(), 0)),
        }
        true
    }

    fn read(&mut self, sqe: Sqe) {
        let (lba, n) = (sqe.slba(), sqe.nlb() as u64 + 1);
        let bs = self.t.bs();
        assert_eq!(sqe.sgl().length as u64, n * bs as u64);
        if Some(lba) == self.t.cfg.black_hole_lba {
            self.black_holed += 1;
            if self.black_holed > self.sqsize {
                self.t.stats.lock().unwrap().sq_overflows += 1;
            }
            return;
        }
        if lba + n > self.t.cfg.blocks {
            self.out.push(status(&sqe, self.qid, Status::LBA_RANGE.with_dnr(), 0));
            return;
        }
        if let Some((failing, st)) = self.t.cfg.failing_lba.filter(|f| f.0 == lba) {
            self.t.stats.lock().unwrap().failing_lba_reads += 1;
            if self.t.failures_left.fetch_sub(1, Ordering::SeqCst) > 0 {
                assert_eq!(failing, lba);
                if self.t.cfg.failing_with_data {
                    let junk = Bytes::from(vec![0xEE; (n as usize) * bs]);
                    self.out.push(Pdu::C2hData(C2hData {
                        cccid: sqe.cid(),
                        datao: 0,
                        data: junk,
                        last: true,
                        success: false,
                    }));
                }
                self.out.push(status(&sqe, self.qid, st, 0));
                return;
            }
        }
        let data =
            Bytes::copy_from_slice(&self.t.disk.lock().unwrap()[lba as usize * bs..(lba + n) as usize * bs]);
        self.send_data(&sqe, data);
    }

    fn send_data(&mut self, sqe: &Sqe, data: Bytes) {
        let chunk = self.t.cfg.c2h_chunk;
        let total = data.len();
        let mut off = 0;
        while off < total {
            let n = (total - off).min(chunk);
            let last = off + n == total;
            self.out.push(Pdu::C2hData(C2hData {
                cccid: sqe.cid(),
                datao: off as u32,
                data: data.slice(off..off + n),
                last,
                success: last && self.sqflow_off,
            }));
            off += n;
        }
        let mut st = self.t.stats.lock().unwrap();
        if self.sqflow_off {
            st.success_reads += 1;
        } else {
            st.resp_reads += 1;
            drop(st);
            self.out.push(ok(sqe, self.qid, 0));
        }
    }

    fn execute_write(&mut self, sqe: &Sqe, data: &[u8]) {
        let qid = self.qid;
        match sqe.opcode() {
            0x09 => {
                // DSM deallocate: zero the ranges.
                let nr = sqe.cdw(10) as usize + 1;
                assert!(data.len() >= nr * 16);
                let mut disk = self.t.disk.lock().unwrap();
                for r in data.chunks_exact(16).take(nr) {
                    let nlb = u32::from_le_bytes(r[4..8].try_into().unwrap()) as usize;
                    let slba = u64::from_le_bytes(r[8..16].try_into().unwrap()) as usize;
                    disk[slba * self.t.bs()..(slba + nlb) * self.t.bs()].fill(0);
                }
                self.out.push(ok(sqe, qid, 0));
            }
            op => {
                let (lba, n) = (sqe.slba() as usize, sqe.nlb() as usize + 1);
                let bs = self.t.bs();
                assert_eq!(data.len(), n * bs);
                let mut disk = self.t.disk.lock().unwrap();
                let range = &mut disk[lba * bs..(lba + n) * bs];
                if op == 0x05 {
                    let st = if range == data { Status::SUCCESS } else { Status::COMPARE_FAILED.with_dnr() };
                    self.out.push(status(sqe, qid, st, 0));
                } else {
                    range.copy_from_slice(data);
                    self.out.push(ok(sqe, qid, 0));
                }
            }
        }
    }

    fn fabrics(&mut self, sqe: Sqe, data: Bytes) {
        match sqe.fctype() {
            0x01 => {
                let c = ConnectCmd::from_sqe(&sqe);
                let d = ConnectData::decode(&data).unwrap();
                assert_eq!(sqe.sgl(), nvmeof_common::SglDescriptor::in_capsule(1024));
                self.qid = c.qid;
                self.sqflow_off = c.disable_sqflow();
                self.discovery = d.subnqn == DISCOVERY_NQN;
                if d.subnqn != SUBNQN && !self.discovery {
                    self.out.push(status(&sqe, 0, Status::CONNECT_INVALID_PARAM.with_dnr(), 256 | 1 << 16));
                    return;
                }
                if c.qid == 0 {
                    assert_eq!(d.cntlid, 0xFFFF);
                    assert_eq!(c.sqsize, 31);
                    self.cntlid = self.t.next_cntlid.fetch_add(1, Ordering::SeqCst);
                    self.t.stats.lock().unwrap().admin_connects += 1;
                } else {
                    assert!(c.sqsize <= self.t.mqes(), "SQSIZE above MQES");
                    self.sqsize = c.sqsize;
                    self.cntlid = d.cntlid;
                    self.t.stats.lock().unwrap().io_connects += 1;
                }
                self.out.push(ok(&sqe, c.qid, self.cntlid as u64));
            }
            0x04 => {
                let g = PropertyGet::from_sqe(&sqe);
                let v = match g.offset {
                    PropertyOffset::CAP => {
                        Cap(0).with_mqes(self.t.mqes()).with_to(2).with_css(Cap::CSS_NVM).with_cqr(true).0
                    }
                    PropertyOffset::VS => Vs::V1_3.0 as u64,
                    PropertyOffset::CC => self.cc.0 as u64,
                    PropertyOffset::CSTS => {
                        let shst = if self.cc.shn() != 0 { Csts::SHST_COMPLETE } else { 0 };
                        Csts(0).with_rdy(self.cc.en() && self.cc.shn() == 0).with_shst(shst).0 as u64
                    }
                    _ => {
                        self.out.push(status(&sqe, 0, Status::INVALID_FIELD.with_dnr(), 0));
                        return;
                    }
                };
                self.out.push(ok(&sqe, 0, v));
            }
            0x00 => {
                let s = PropertySet::from_sqe(&sqe);
                assert_eq!(s.offset, PropertyOffset::CC);
                let cc = Cc(s.value as u32);
                if cc.en() {
                    assert_eq!((cc.iosqes(), cc.iocqes(), cc.mps()), (6, 4, 0));
                }
                if cc.shn() == Cc::SHN_NORMAL {
                    self.t.stats.lock().unwrap().shutdowns += 1;
                }
                self.cc = cc;
                self.out.push(ok(&sqe, 0, 0));
            }
            _ => self.out.push(status(&sqe, 0, Status::INVALID_OPCODE.with_dnr(), 0)),
        }
    }

    fn admin(&mut self, sqe: Sqe, data: &[u8]) {
        let cfg = self.t.cfg.clone();
        match sqe.opcode() {
            0x06 => {
                let id = IdentifyCmd::from_sqe(&sqe);
                let buf = match id.cns.0 {
                    1 => {
                        let mut c = IdentifyController::fabrics_io_default();
                        c.cntlid = self.cntlid;
                        c.mdts = cfg.mdts;
                        c.ioccsz = cfg.ioccsz.unwrap_or((64 + cfg.inline) / 16);
                        c.maxcmd = self.t.mqes() + 1;
                        c.subnqn = if self.discovery { DISCOVERY_NQN.into() } else { SUBNQN.into() };
                        c.cntrltype = if self.discovery { 2 } else { 1 };
                        c.sn = "FAKE0001".into();
                        c.mn = "fake".into();
                        c.oncs = 1 | 1 << 2 | 1 << 3;
                        c.crdt = cfg.crdt;
                        c.ctratt |= cfg.ctratt;
                        c.encode()
                    }
                    0 if id.nsid == 1 => {
                        let n = IdentifyNamespace {
                            nsze: cfg.blocks,
                            ncap: cfg.blocks,
                            nuse: cfg.blocks,
                            lbaf: vec![LbaFormat::new(cfg.lbads)],
                            ..Default::default()
                        };
                        n.encode()
                    }
                    0 => vec![0; 4096],
                    2 => encode_ns_list(&[1], id.nsid),
                    _ => {
                        self.out.push(status(&sqe, 0, Status::INVALID_FIELD.with_dnr(), 0));
                        return;
                    }
                };
                self.send_data(&sqe, buf.into());
            }
            0x09 if sqe.cdw(10) & 0xFF == 0x16 => {
                assert_eq!(data.len(), 512, "Host Behavior Support data");
                self.t.stats.lock().unwrap().host_behavior_acre.push(data[0]);
                self.out.push(ok(&sqe, 0, 0));
            }
            0x09 => {
                assert_eq!(sqe.cdw(10) & 0xFF, 7);
                let n = (cfg.grant_queues - 1) as u64;
                self.out.push(ok(&sqe, 0, n | n << 16));
            }
            0x18 => {
                self.t.stats.lock().unwrap().keep_alives += 1;
                self.out.push(ok(&sqe, 0, 0));
            }
            0x02 => {
                let c = GetLogPageCmd::from_sqe(&sqe);
                assert_eq!(c.lid.0, 0x70);
                if c.lpo == 0 {
                    self.t.stats.lock().unwrap().disc_header_reads += 1;
                }
                let entries = (0..cfg.discovery_entries)
                    .map(|i| {
                        DiscoveryLogEntry::tcp(
                            SubType::NVME,
                            &format!("{SUBNQN}{i}"),
                            AdrFam::IPV4,
                            "127.0.0.1",
                            "4420",
                            1,
                        )
                    })
                    .collect();
                // The log changes once, between the first header and record reads.
                if c.lpo > 0 {
                    let _ = self.t.genctr.compare_exchange(1, 2, Ordering::SeqCst, Ordering::SeqCst);
                }
                let log = DiscoveryLog::new(self.t.genctr.load(Ordering::SeqCst) as u64, entries).encode();
                let win = log_window(&log, c.lpo, c.numd_bytes() as usize);
                self.send_data(&sqe, win.into());
            }
            _ => self.out.push(status(&sqe, 0, Status::INVALID_OPCODE.with_dnr(), 0)),
        }
    }
}

fn opts() -> ConnectOptions {
    ConnectOptions {
        host: Some(HostIdentity::from_id([7; 16])),
        io_queues: 2,
        queue_depth: 16,
        kato: Duration::from_secs(5),
        command_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        reconnect: ReconnectPolicy {
            delay: Duration::from_millis(50),
            max_delay: Duration::from_millis(50),
            ctrl_loss_timeout: Some(Duration::from_secs(5)),
            requeue: true,
            fast_io_fail_timeout: None,
        },
        ..ConnectOptions::default()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connect_read_write_in_capsule_and_r2t() {
    let (addr, t) = start(Cfg::default()).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let info = ctrl.info();
    assert_eq!(info.cntlid, 1);
    assert_eq!(info.io_queues, 2);
    assert_eq!(info.queue_depth, 16);
    assert_eq!(info.inline_data, 4096);
    assert_eq!(ctrl.state(), ControllerState::Live);
    assert_eq!(ctrl.active_namespaces().await.unwrap(), vec![1]);
    let ns = ctrl.namespace(1).await.unwrap();
    assert_eq!((ns.block_size(), ns.blocks()), (512, 4096));

    let small = pattern(4096, 1);
    ns.write(0, &small).await.unwrap();
    let big = pattern(64 << 10, 2);
    ns.write_with(64, &big, IoFlags::FUA).await.unwrap();
    let st = t.stats();
    assert_eq!((st.inline_writes, st.r2t_writes), (1, 1));
    // 64 KiB in 16 KiB R2T windows, each split in two 8 KiB H2CData PDUs.
    assert_eq!((st.r2ts, st.h2c_pdus), (4, 8));

    let mut buf = vec![0u8; 4096];
    ns.read(0, &mut buf).await.unwrap();
    assert_eq!(buf, small);
    let mut buf = vec![0u8; 64 << 10];
    ns.read(64, &mut buf).await.unwrap();
    assert_eq!(buf, big);
    assert!(ns.compare(64, &big).await.unwrap());
    assert!(!ns.compare(0, &big[..4096]).await.unwrap());

    // Zero-copy write, write zeroes, deallocate, flush.
    ns.write_bytes(200, Bytes::from(pattern(8192, 3)), IoFlags::default()).await.unwrap();
    ns.write_zeroes(200, 8, false, IoFlags::default()).await.unwrap();
    ns.deallocate(&[(208, 8)]).await.unwrap();
    ns.flush().await.unwrap();
    let mut buf = vec![1u8; 8192];
    ns.read(200, &mut buf).await.unwrap();
    assert!(buf.iter().all(|&b| b == 0));

    // NVMe status errors are typed.
    let mut buf = vec![0u8; 1024];
    match ns.read(4095, &mut buf).await {
        Err(Error::Nvme { status, command, .. }) => {
            assert_eq!(status.code(), Status::LBA_RANGE);
            assert!(status.dnr());
            assert_eq!(command.opcode, 0x02);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(ns.read(0, &mut [0u8; 100]).await, Err(Error::InvalidArgument(_))));

    ctrl.shutdown().await.unwrap();
    assert_eq!(t.stats().shutdowns, 1);
    assert_eq!(ctrl.state(), ControllerState::Shutdown);
    assert!(matches!(ns.read(0, &mut [0u8; 512]).await, Err(Error::Shutdown)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mdts_splits_large_requests() {
    let cfg = Cfg { mdts: 2, ..Cfg::default() }; // 16 KiB
    let (addr, t) = start(cfg).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    assert_eq!(ctrl.info().max_transfer, Some(16384));
    let ns = ctrl.namespace(1).await.unwrap();
    assert_eq!(ns.max_transfer(), 16384);
    let data = pattern(100 << 10, 9);
    ns.write(10, &data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    ns.read(10, &mut back).await.unwrap();
    assert_eq!(back, data);
    assert_eq!(t.stats().max_io_len, 16384);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn success_flag_and_digests() {
    let (addr, t) = start(Cfg { c2h_chunk: 1536, ..Cfg::default() }).await;
    let o = ConnectOptions { disable_sqflow: true, hdr_digest: true, data_digest: true, ..opts() };
    let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let data = pattern(32 << 10, 4);
    ns.write(0, &data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    ns.read(0, &mut back).await.unwrap();
    assert_eq!(back, data);
    let st = t.stats();
    assert!(st.hdgst_seen);
    assert!(st.success_reads >= 2, "{st:?}"); // identify + read
    assert_eq!(st.resp_reads, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connect_entry_disables_sq_flow_control_where_treq_allows() {
    let (addr, t) = start(Cfg::default()).await;
    let port = addr.port().to_string();
    for treq in [0, TREQ_DISABLE_SQFLOW] {
        let before = t.stats();
        let e = DiscoveryLogEntry::tcp(SubType::NVME, SUBNQN, AdrFam::IPV4, "127.0.0.1", &port, 1);
        let ctrl = nvmeof_initiator::connect_entry(&DiscoveryLogEntry { treq, ..e }, opts()).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let mut back = vec![0u8; 4096];
        ns.read(0, &mut back).await.unwrap();
        ctrl.shutdown().await.unwrap();
        let st = t.stats();
        let (success, resp) = (st.success_reads - before.success_reads, st.resp_reads - before.resp_reads);
        if treq == 0 {
            assert!(success == 0 && resp >= 2, "{st:?}"); // identify + read, each with a CapsuleResp
        } else {
            assert!(success >= 2 && resp == 0, "{st:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_share_a_namespace() {
    let (addr, _t) = start(Cfg { blocks: 1 << 14, ..Cfg::default() }).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..64u64 {
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..10u64 {
                let len = [512, 4096, 12288][(i + round) as usize % 3];
                let lba = i * 64;
                let data = pattern(len, (i * 7 + round) as u8);
                ns.write(lba, &data).await.unwrap();
                let mut back = vec![0u8; len];
                ns.read(lba, &mut back).await.unwrap();
                assert_eq!(back, data);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Batched submission.
    let a = pattern(4096, 1);
    let b = pattern(16384, 2);
    let mut ra = vec![0u8; 4096];
    let mut rb = vec![0u8; 16384];
    let mut batch = ns.batch();
    batch.write(0, &a, IoFlags::default());
    batch.write(100, &b, IoFlags::default());
    batch.flush();
    assert!(batch.submit().await.iter().all(|r| r.is_ok()));
    let mut batch = ns.batch();
    batch.read(0, &mut ra, IoFlags::default());
    batch.read(100, &mut rb, IoFlags::default());
    let bad = batch.read(1 << 20, &mut [], IoFlags::default());
    let res = batch.submit().await;
    assert!(res[0].is_ok() && res[1].is_ok());
    assert!(matches!(res[bad], Err(Error::InvalidArgument(_))));
    assert_eq!((ra, rb), (a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timed_out_command_fails_and_queue_keeps_working() {
    let (addr, _t) = start(Cfg { black_hole_lba: Some(77), ..Cfg::default() }).await;
    // 1 s: long enough that a good read on a loaded machine never times out.
    let o = ConnectOptions { command_timeout: Duration::from_millis(1000), io_queues: 1, ..opts() };
    let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let start = std::time::Instant::now();
    let mut buf = vec![0u8; 512];
    match ns.read(77, &mut buf).await {
        Err(Error::Timeout(d)) => assert_eq!(d, Duration::from_millis(1000)),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() >= Duration::from_millis(990));
    ns.read(0, &mut buf).await.unwrap();
    // A dropped (cancelled) request does not leak its slot.
    for _ in 0..40 {
        let _ = tokio::time::timeout(Duration::from_millis(1), ns.read(77, &mut buf)).await;
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..20 {
        ns.read(1, &mut buf).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconnect_resubmits_outstanding_io() {
    let (addr, t) = start(Cfg::default()).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let before = ctrl.info().cntlid;
    t.drop_countdown.store(25, Ordering::SeqCst);
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..20u64 {
                let data = pattern(8192, (i + round) as u8);
                ns.write(i * 32, &data).await.unwrap();
                let mut back = vec![0u8; 8192];
                ns.read(i * 32, &mut back).await.unwrap();
                assert_eq!(back, data);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let st = t.stats();
    assert_eq!(st.admin_connects, 2, "{st:?}");
    assert_eq!(st.io_connects, 4);
    assert_eq!(ctrl.state(), ControllerState::Live);
    assert_ne!(ctrl.info().cntlid, before);
    ctrl.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn controller_loss_fails_requests() {
    let (addr, t) = start(Cfg::default()).await;
    let mut o = opts();
    o.reconnect.ctrl_loss_timeout = Some(Duration::from_millis(500));
    let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let mut states = ctrl.subscribe_state();
    t.refuse.store(true, Ordering::SeqCst);
    t.drop_countdown.store(1, Ordering::SeqCst);
    let mut buf = vec![0u8; 512];
    match ns.read(0, &mut buf).await {
        Err(Error::ControllerLost(why)) => assert!(!why.is_empty()),
        other => panic!("{other:?}"),
    }
    assert_eq!(ctrl.state(), ControllerState::Failed);
    states.wait_for(|s| *s == ControllerState::Failed).await.unwrap();
    assert!(matches!(ns.write(0, &buf).await, Err(Error::ControllerLost(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_requeue_policy_fails_outstanding_with_connection_lost() {
    let (addr, t) = start(Cfg::default()).await;
    let mut o = opts();
    o.reconnect.requeue = false;
    let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    t.drop_countdown.store(1, Ordering::SeqCst);
    let mut buf = vec![0u8; 512];
    assert!(matches!(ns.read(0, &mut buf).await, Err(Error::ConnectionLost)));
    // Once reconnected, requests succeed again. (Requests sent on the other, healthy queue
    // before the association is torn down fail with ConnectionLost too, by policy.)
    while t.stats().admin_connects < 2 || ctrl.state() != ControllerState::Live {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    ns.read(0, &mut buf).await.unwrap();
    assert_eq!(t.stats().admin_connects, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_runs_in_background() {
    let (addr, t) = start(Cfg::default()).await;
    let o = ConnectOptions { kato: Duration::from_millis(200), ..opts() };
    let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
    let start = std::time::Instant::now();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let n = t.stats().keep_alives;
    // One every KATO/2 (100 ms), so about 10; a stalled machine sends fewer
    // (the timer does not catch up), never more than the time allows.
    let most = start.elapsed().as_millis() as usize / 100 + 2;
    assert!((4..=most).contains(&n), "{n} keep-alives in {:?}", start.elapsed());
    ctrl.keep_alive().await.unwrap();
}

/// With a controller that restarts its timer on every command (CTRATT.TBKAS)
/// the host sends no Keep Alive while I/O completes, and one every KATO/4
/// while idle; without TBKAS one every KATO/2 whatever the traffic (Linux
/// `nvme_keep_alive_work`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_is_traffic_based_where_the_controller_says_so() {
    use nvmeof_common::spec::identify::ctratt::TBKAS;
    // Keep Alives counted over 1200 ms of back-to-back reads, then 1200 ms
    // idle, with the upper bound each window's measured length allows (the
    // lower bounds leave room for a stalled machine: the timer never catches
    // up, so a stall only means fewer).
    async fn count(tbkas: bool) -> ((usize, usize), (usize, usize)) {
        let (addr, t) = start(Cfg { ctratt: if tbkas { TBKAS } else { 0 }, ..Cfg::default() }).await;
        let o = ConnectOptions { kato: Duration::from_millis(400), ..opts() };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let before = t.stats().keep_alives;
        let start = std::time::Instant::now();
        let end = start + Duration::from_millis(1200);
        let mut b = vec![0u8; 512];
        for _ in 0..10_000_000 {
            if std::time::Instant::now() >= end {
                break;
            }
            ns.read(0, &mut b).await.unwrap();
        }
        let busy = (t.stats().keep_alives - before, start.elapsed().as_millis() as usize);
        let before = t.stats().keep_alives;
        let start = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let idle = (t.stats().keep_alives - before, start.elapsed().as_millis() as usize);
        ctrl.shutdown().await.unwrap();
        (busy, idle)
    }
    let ((busy, _), (idle, idle_ms)) = count(true).await;
    // A read that stalls past KATO/4 lets one through; two stalls, two.
    assert!(busy <= 2, "{busy} Keep Alives while I/O completed");
    assert!((6..=idle_ms / 100 + 2).contains(&idle), "{idle} Keep Alives in {idle_ms} ms idle at KATO/4");
    let ((busy, busy_ms), (idle, idle_ms)) = count(false).await;
    assert!((3..=busy_ms / 200 + 2).contains(&busy), "{busy} Keep Alives in {busy_ms} ms of I/O at KATO/2");
    assert!((3..=idle_ms / 200 + 2).contains(&idle), "{idle} Keep Alives in {idle_ms} ms idle at KATO/2");
}

/// The connection closing during the shutdown handshake (the controller
/// goes away as it is told to shut down) fails `shutdown` at once. Its
/// Property Set used to be parked for a reconnect that `shutdown` itself had
/// stopped (it aborts the supervisor first), so `shutdown` never returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_when_the_admin_connection_drops_during_it() {
    let (addr, t) = start(Cfg::default()).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    t.drop_on_shutdown.store(true, Ordering::SeqCst);
    let r = tokio::time::timeout(Duration::from_secs(3), ctrl.shutdown()).await.expect("shutdown hangs");
    assert!(r.is_err(), "{r:?}");
    assert_eq!(ctrl.state(), ControllerState::Shutdown);
    let mut buf = vec![0u8; 512];
    let r = tokio::time::timeout(Duration::from_secs(3), ns.read(0, &mut buf)).await.expect("read hangs");
    assert!(matches!(r, Err(Error::Shutdown)), "{r:?}");
}

/// A log page range that passes the last 64-bit offset is refused before
/// anything is sent. Split into commands, the offset of the second one was
/// computed as `lpo + 1 MiB`: a panic in debug builds, and in release builds
/// it wrapped around, so that part of the buffer was filled from the start of
/// the log (from a controller that accepts any offset, like this one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_page_range_past_the_last_offset_is_refused() {
    let (addr, _t) = start(Cfg::default()).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let chunk = ctrl.info().max_transfer.unwrap() as usize;
    let mut buf = vec![0u8; chunk + 4];
    let lpo = u64::MAX - 3;
    let r =
        ctrl.get_log_page(GetLogPageCmd::new(LogPageId::DISCOVERY, 0, lpo, buf.len() as u32), &mut buf).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    // The last dword below 2^64 is still a valid (if unusual) offset.
    let mut last = [0u8; 4];
    ctrl.get_log_page(GetLogPageCmd::new(LogPageId::DISCOVERY, 0, lpo, 4), &mut last).await.unwrap();
    ctrl.shutdown().await.unwrap();
}

/// Without MDTS or a `max_transfer` option (and a MAXH2CDATA of almost 4
/// GiB), a namespace of 64 KiB blocks splits requests into commands that one
/// 32-bit SGL length can describe. The 65536 blocks of a 16-bit NLB are 4
/// GiB there: `max_transfer` said 2^32, a 4 GiB write failed with
/// `InvalidArgument` instead of being split, and the pieces of larger batch
/// requests had their length cast to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_limit_fits_the_sgl_length_with_64k_blocks() {
    let (addr, _t) = start(Cfg { lbads: 16, blocks: 16, maxh2cdata: 0xFFFF_FFFC, ..Cfg::default() }).await;
    let o = ConnectOptions { max_transfer: None, ..opts() };
    let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
    assert_eq!(ctrl.info().max_transfer, Some(0xFFFF_FFFC), "MAXH2CDATA, without MDTS");
    let ns = ctrl.namespace(1).await.unwrap();
    assert_eq!(ns.block_size(), 1 << 16);
    assert!(ns.max_transfer() <= u32::MAX as u64, "{}", ns.max_transfer());
    assert_eq!(ns.max_transfer(), 65535 << 16);
    ctrl.shutdown().await.unwrap();
}

/// Without MDTS, commands stay within the controller's MAXH2CDATA (nvmet
/// refuses larger ones with Data SGL Length Invalid) but no lower than the
/// 1 MiB the `max_transfer` option defaults to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_mdts_commands_stay_within_maxh2cdata() {
    for (maxh2cdata, want) in [(4 << 20, 4 << 20), (8192, 1 << 20)] {
        let (addr, _t) = start(Cfg { maxh2cdata, ..Cfg::default() }).await;
        let o = ConnectOptions { max_transfer: None, ..opts() };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        assert_eq!(ctrl.info().max_transfer, Some(want), "MAXH2CDATA {maxh2cdata}");
        ctrl.shutdown().await.unwrap();
    }
}

/// A host NQN that does not fit the Connect data's 256-byte field (with its
/// terminating NUL) is refused like such a subsystem NQN. It used to be cut
/// to 255 bytes silently: the controller saw, and matched its allowed hosts
/// against, another host's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_nqn_longer_than_its_field_is_refused() {
    let (addr, t) = start(Cfg::default()).await;
    for bad in [String::new(), format!("nqn.2024-01.io.example:{}", "h".repeat(240))] {
        let o = ConnectOptions { host: Some(HostIdentity::new(bad.clone(), [7; 16])), ..opts() };
        let r = Controller::connect(addr, SUBNQN, o).await;
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{} bytes: {r:?}", bad.len());
    }
    assert_eq!(t.stats().admin_connects, 0);
    let longest = format!("nqn.2024-01.io.example:{}", "h".repeat(232));
    assert_eq!(longest.len(), 255);
    let o = ConnectOptions { host: Some(HostIdentity::new(longest, [7; 16])), ..opts() };
    Controller::connect(addr, SUBNQN, o).await.unwrap().shutdown().await.unwrap();
}

/// `congestion_control` is set on every queue's socket; a name the kernel
/// does not know fails the connect with `InvalidArgument` naming it, before
/// any Connect reaches the controller (`reno` is always built in).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn congestion_control_is_applied_or_refused() {
    let (addr, t) = start(Cfg::default()).await;
    let o = ConnectOptions { congestion_control: Some("no-such-cc".parse().unwrap()), ..opts() };
    let r = Controller::connect(addr, SUBNQN, o).await;
    assert!(matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("no-such-cc")), "{r:?}");
    assert_eq!(t.stats().admin_connects, 0);
    let o = ConnectOptions { congestion_control: Some("reno".parse().unwrap()), ..opts() };
    let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let data = pattern(4096, 3);
    ns.write(0, &data).await.unwrap();
    let mut back = vec![0u8; 4096];
    ns.read(0, &mut back).await.unwrap();
    assert_eq!(back, data);
    ctrl.shutdown().await.unwrap();
}

/// An absurd IOCCSZ from Identify Controller does not panic the connect:
/// the in-capsule limit IOCCSZ·16 − 64 was computed in 32 bits, which
/// overflowed (a panic in debug builds; in release builds a wrapped limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_ioccsz_does_not_overflow_the_in_capsule_limit() {
    for (ioccsz, inline) in [(u32::MAX, u32::MAX), (1 << 28, u32::MAX - 63)] {
        let (addr, _t) = start(Cfg { ioccsz: Some(ioccsz), ..Cfg::default() }).await;
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        assert_eq!(ctrl.info().inline_data, inline, "IOCCSZ {ioccsz:#x}");
        ctrl.shutdown().await.unwrap();
    }
}

/// `Duration::MAX` as a timeout means no timeout: connect, I/O and admin
/// commands work. Deadlines were computed as `now + timeout`, which panicked
/// in the queue's driver task: the task died, and the request waiting on it
/// (with `command_timeout`, the first Property Get of `connect`) never
/// returned; with `connect_timeout`, `connect` failed with `Shutdown`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbounded_timeouts_do_not_kill_the_queue_drivers() {
    let (addr, _t) = start(Cfg::default()).await;
    let bound = Duration::from_secs(5);
    let o = ConnectOptions { connect_timeout: Duration::MAX, ..opts() };
    let ctrl =
        tokio::time::timeout(bound, Controller::connect(addr, SUBNQN, o)).await.expect("connect hangs");
    ctrl.unwrap().shutdown().await.unwrap();
    let o = ConnectOptions { command_timeout: Duration::MAX, ..opts() };
    let ctrl =
        tokio::time::timeout(bound, Controller::connect(addr, SUBNQN, o)).await.expect("connect hangs");
    let ctrl = ctrl.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let d = pattern(4096, 1);
    tokio::time::timeout(bound, ns.write(0, &d)).await.expect("write hangs").unwrap();
    let mut back = vec![0u8; 4096];
    tokio::time::timeout(bound, ns.read(0, &mut back)).await.expect("read hangs").unwrap();
    assert_eq!(back, d);
    let ka = Sqe::new(0x18);
    tokio::time::timeout(bound, ctrl.admin_command_timeout(ka, Payload::None, Duration::MAX))
        .await
        .expect("admin command hangs")
        .unwrap();
    ctrl.shutdown().await.unwrap();
}

/// A `shutdown` cancelled during its handshake (an application's own timeout
/// around it) still closes the admin queue: the controller says `Shutdown`,
/// and admin commands fail like I/O does. The admin queue's driver used to be
/// told to stop only at the end of `shutdown`, so it kept its connection (with
/// keep-alive stopped) and served admin commands for as long as a handle lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_shutdown_still_closes_the_admin_queue() {
    let (addr, t) = start(Cfg::default()).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    t.ignore_shutdown.store(true, Ordering::SeqCst);
    assert!(tokio::time::timeout(Duration::from_millis(200), ctrl.shutdown()).await.is_err());
    assert_eq!(ctrl.state(), ControllerState::Shutdown);
    let mut buf = vec![0u8; 512];
    let r = tokio::time::timeout(Duration::from_secs(3), ns.read(0, &mut buf)).await.expect("read hangs");
    assert!(matches!(r, Err(Error::Shutdown)), "{r:?}");
    let r = tokio::time::timeout(Duration::from_secs(3), ctrl.identify_controller())
        .await
        .expect("identify hangs");
    assert!(matches!(r, Err(Error::Shutdown)), "{r:?}");
}

/// With OT set, LPO is an index into the log's list of entries, not a byte
/// offset: any index is accepted, and a read that one command cannot carry
/// is refused (the entry size that a split would need is the log's own). The
/// index used to be refused unless a multiple of 4, and a longer read was
/// split with byte counts added to the index, reading other entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_page_offset_type_index_is_not_a_byte_offset() {
    let (addr, _t) = start(Cfg::default()).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let chunk = ctrl.info().max_transfer.unwrap() as usize;
    let with_ot = |lpo: u64, len: usize| {
        let mut c = GetLogPageCmd::new(LogPageId::DISCOVERY, 0, lpo, len as u32);
        c.ot = true;
        c
    };
    let mut one = vec![0u8; 64];
    ctrl.get_log_page(with_ot(1, one.len()), &mut one).await.unwrap();
    let mut long = vec![0u8; chunk + 4];
    let r = ctrl.get_log_page(with_ot(0, long.len()), &mut long).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    ctrl.shutdown().await.unwrap();
}

/// A raw read longer than 64 MiB whose data comes in one C2HData PDU (as
/// Linux nvmet sends it, MDTS unlimited) completes, with the default
/// `max_transfer` of 1 MiB. The receive side refused PDUs above
/// max(`max_transfer`, 64 MiB) as a protocol error: the connection was reset,
/// the read requeued and sent again, forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_read_above_64_mib_in_one_pdu_completes() {
    // 4 KiB blocks: 65 MiB is one command (NLB is 16 bits).
    const B: usize = 4096;
    let len = (64 << 20) + B;
    let (addr, t) =
        start(Cfg { lbads: 12, blocks: (len / B) as u64 + 8, c2h_chunk: usize::MAX, ..Cfg::default() }).await;
    let ctrl = Controller::connect(addr, SUBNQN, ConnectOptions { io_queues: 1, ..opts() }).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let tail = pattern(B, 3);
    ns.write(((64 << 20) / B) as u64, &tail).await.unwrap();
    let mut sqe = Sqe::new(0x02);
    sqe.set_nsid(1).set_slba(0).set_cdw(12, (len / B - 1) as u32);
    let mut buf = vec![0u8; len];
    let r =
        tokio::time::timeout(Duration::from_secs(20), ctrl.io_command_on(1, sqe, Payload::Read(&mut buf)));
    r.await.expect("read hangs").unwrap();
    assert_eq!(&buf[64 << 20..], &tail[..]);
    assert_eq!(t.stats().admin_connects, 1, "reconnected");
    ctrl.shutdown().await.unwrap();
}

/// A command that costs the connection every time it is sent (a target that
/// crashes on it) is resubmitted a bounded number of times (5, like Linux's
/// `nvme_max_retries`), then fails with `ConnectionLost`; the association
/// stays usable. It used to be requeued after every reconnect, forever: its
/// caller never returned and the queue was torn down again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_that_kills_every_connection_is_not_resubmitted_forever() {
    let (addr, t) = start(Cfg { poison_lba: Some(99), ..Cfg::default() }).await;
    let ctrl = Controller::connect(addr, SUBNQN, ConnectOptions { io_queues: 1, ..opts() }).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let mut buf = vec![0u8; 512];
    let r = tokio::time::timeout(Duration::from_secs(10), ns.read(99, &mut buf)).await.expect("read hangs");
    assert!(matches!(r, Err(Error::ConnectionLost)), "{r:?}");
    assert_eq!(t.stats().poisoned, 6, "sent once and resubmitted 5 times");
    let mut states = ctrl.subscribe_state();
    tokio::time::timeout(Duration::from_secs(5), states.wait_for(|s| *s == ControllerState::Live))
        .await
        .unwrap()
        .unwrap();
    ns.read(0, &mut buf).await.unwrap();
    ctrl.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_are_typed() {
    let (addr, _t) = start(Cfg::default()).await;
    match Controller::connect(addr, "nqn.2024-01.io.example:other", opts()).await {
        Err(Error::Nvme { status, result, command }) => {
            assert_eq!(status.code(), Status::CONNECT_INVALID_PARAM);
            assert_eq!(result, 256 | 1 << 16);
            assert_eq!(command.fctype, Some(1));
        }
        other => panic!("{other:?}"),
    }
    // A port bound but never listening refuses, and (no SO_REUSEADDR) no
    // test running beside this one can take it while it is held.
    let held = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    held.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    let closed = held.local_addr().unwrap().as_socket().unwrap();
    assert!(matches!(Controller::connect(closed, SUBNQN, opts()).await, Err(Error::Transport(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_reads_the_whole_log() {
    let (addr, t) = start(Cfg { discovery_entries: 5, ..Cfg::default() }).await;
    let o = ConnectOptions { host: Some(HostIdentity::from_id([1; 16])), ..ConnectOptions::discovery() };
    let log = nvmeof_initiator::discover(addr, o).await.unwrap();
    assert_eq!(log.entries.len(), 5);
    assert_eq!(log.header.genctr, 2);
    assert_eq!(log.entries[3].subnqn, format!("{SUBNQN}3"));
    assert_eq!(log.entries[3].traddr, "127.0.0.1");
    assert_eq!(nvmeof_initiator::nvme_subsystems(&log).count(), 5);
    // GENCTR changed during the first pass: header read twice per pass, two passes.
    assert_eq!(t.stats().disc_header_reads, 4);
    assert_eq!(t.stats().io_connects, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_passthrough() {
    let (addr, _t) = start(Cfg::default()).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let id = ctrl.identify_controller().await.unwrap();
    assert_eq!(id.sn, "FAKE0001");
    assert_eq!(ctrl.property_get(PropertyOffset::VS).await.unwrap(), Vs::V1_3.0 as u64);
    let mut buf = vec![0u8; 4096];
    let cqe = ctrl
        .admin_command(IdentifyCmd::new(nvmeof_common::spec::Cns::CTRL, 0).to_sqe(0), Payload::Read(&mut buf))
        .await
        .unwrap();
    assert!(cqe.status.is_success());
    assert_eq!(IdentifyController::decode(&buf).unwrap().mn, "fake");
    let err = ctrl.admin_command(Sqe::new(0x80), Payload::None).await.unwrap_err();
    assert_eq!(err.status().map(|s| s.code()), Some(Status::INVALID_OPCODE));
    assert!(err.is_permanent());
    let _ = ctrl.shutdown().await;
}

/// After a reconnect to a controller whose MQES shrank, no more commands are
/// outstanding on a queue than its new SQSIZE. The tickets are sized at the
/// first connect; the queue's slots followed SQSIZE + 1 (the entry count), one
/// more than a full SQ holds, so a reconnect to MQES 3 had 4 outstanding.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconnect_to_a_smaller_mqes_keeps_within_the_new_sqsize() {
    let (addr, t) = start(Cfg { black_hole_lba: Some(77), mqes: 7, ..Cfg::default() }).await;
    let o = ConnectOptions {
        io_queues: 1,
        queue_depth: 8,
        command_timeout: Duration::from_millis(800),
        ..opts()
    };
    let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    // The 7th read closes the connection; the reconnect finds MQES 3.
    t.mqes_now.store(3, Ordering::SeqCst);
    t.drop_countdown.store(7, Ordering::SeqCst);
    let reads: Vec<_> = (0..7)
        .map(|_| {
            let ns = ns.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 512];
                ns.read(77, &mut buf).await
            })
        })
        .collect();
    for r in reads {
        let r = tokio::time::timeout(Duration::from_secs(20), r).await.expect("read hangs").unwrap();
        assert!(matches!(r, Err(Error::Timeout(_))), "{r:?}");
    }
    let st = t.stats();
    // Reconnected (the timeouts start error recovery again, as on Linux).
    assert!(st.io_connects >= 2, "{st:?}");
    assert_eq!(st.sq_overflows, 0, "more commands outstanding than SQSIZE: {st:?}");
}

/// A controller that reports Command Retry Delay Times gets Advanced
/// Command Retry Enable (Set Features Host Behavior Support, as Linux's
/// `nvme_configure_acre`), and a status with CRD makes the retry wait that
/// long (Linux `nvme_retry_req`: CRDT × 100 ms); one without CRD is retried
/// at once, and a controller without CRDT is not sent the feature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_retry_delay_is_enabled_and_honoured() {
    // INTERNAL without DNR, CRD = 2: CRDT2 (3 × 100 ms) before each retry.
    let crd2 = Status(Status::INTERNAL.0 | 2 << 11);
    let cfg = Cfg { crdt: [1, 3, 50], failing_lba: Some((40, crd2)), ..Cfg::default() };
    let (addr, t) = start(cfg).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    assert_eq!(t.stats().host_behavior_acre, vec![1], "ACRE set once, at connect");
    let ns = ctrl.namespace(1).await.unwrap();
    t.failures_left.store(2, Ordering::SeqCst);
    let t0 = std::time::Instant::now();
    ns.read(40, &mut [0u8; 512]).await.unwrap();
    // Two waits of CRDT2: a lower bound, which no scheduling delay undercuts.
    assert!(t0.elapsed() >= Duration::from_millis(600), "retried after {:?}", t0.elapsed());
    assert_eq!(t.stats().failing_lba_reads, 3);
    let _ = ctrl.shutdown().await;

    // No CRDT: no Host Behavior Support; retried (CRD 0) until it works.
    let cfg = Cfg { failing_lba: Some((40, Status::INTERNAL)), ..Cfg::default() };
    let (addr, t) = start(cfg).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    t.failures_left.store(5, Ordering::SeqCst);
    ns.read(40, &mut [0u8; 512]).await.unwrap();
    let st = t.stats();
    assert_eq!((st.failing_lba_reads, st.host_behavior_acre.len()), (6, 0));
    let _ = ctrl.shutdown().await;
}

/// A read that failed after its data arrived is retried into the caller's
/// buffer from where that read began: `read_buf` keeps what the buffer held
/// before and drops the failed attempt's bytes; `read` overwrites them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_read_drops_the_data_of_the_failed_attempt() {
    let cfg = Cfg { failing_lba: Some((40, Status::INTERNAL)), failing_with_data: true, ..Cfg::default() };
    let (addr, t) = start(cfg).await;
    let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
    let ns = ctrl.namespace(1).await.unwrap();
    let data: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    ns.write(40, &data).await.unwrap();
    t.failures_left.store(2, Ordering::SeqCst);
    let got = ns.read_buf(40, BytesMut::from(&b"head"[..]), 1024).await.unwrap();
    assert_eq!(t.stats().failing_lba_reads, 3, "two failed attempts, then the one that worked");
    assert_eq!(got.len(), 4 + 1024);
    assert_eq!(&got[..4], b"head");
    assert!(got[4..] == data[..], "the failed attempts' bytes are gone");
    t.failures_left.store(1, Ordering::SeqCst);
    let mut buf = vec![0u8; 1024];
    ns.read(40, &mut buf).await.unwrap();
    assert!(buf == data);
    let _ = ctrl.shutdown().await;
}
