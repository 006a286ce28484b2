//! The target's sans-IO queue state machine (`QueueState`) driven without
//! sockets, the way `transport::tcp::run_connection` drives it: received bytes
//! go to `handle_pdus` in chunks (so PDUs arrive split), backend completions
//! are drained from the queue's channel into `handle_completion`, and what the
//! queue writes to `out` is checked.
//!
//! Input layout:
//! - byte 0, bits 1:0, the setup done before the fuzz bytes:
//!   0 nothing (the fuzz bytes start with the ICReq), 1 ICReq, 2 ICReq and an
//!   admin Connect, 3 an enabled admin queue A plus an I/O queue B connected to
//!   its controller (the fuzz bytes go to B). Bit 2 HDGST, bit 3 DDGST asked
//!   in the harness's ICReq; bits 5:4 the PDUs handled per call before the
//!   output is taken (0 all, as `handle_bytes`; 1, 2 or 16, as the transport's
//!   `handle_pdus` with `FLUSH_EVERY`); bit 6 (setups 0 to 2) gives the host
//!   DH-HMAC-CHAP keys, so Connect asks it to authenticate and the fuzz bytes
//!   meet the Authentication Send/Receive state machine, with every other
//!   command refused until it is done; bit 7 rewrites HDGST/DDGST of the fuzz
//!   PDUs that carry the digest flags to their correct values.
//! - byte 1: bit 0 disables SQ flow control in Connect, bit 1 a 4-entry I/O
//!   queue, bit 2 Connect to the discovery subsystem (setup 2), bit 3 enable
//!   the controller (setup 2), bit 4 lets chunks go to queue A too (setup 3),
//!   bit 5 makes the namespace complete I/O through the queue's channel (as the
//!   thread-pool and io_uring backends do) instead of inline, bit 6 (with bit 5)
//!   holds those completions back until all fuzz bytes are in, so they stay
//!   pending across chunks, PDU handling and a possible C2HTermReq; bit 7
//!   shrinks namespace 1 to 32 KiB and adds namespace 2 half-way through the
//!   chunks and removes namespace 2 after them, so AERs the fuzz bytes sent
//!   complete (Namespace Attribute Changed) amid other commands.
//! - then chunks: one control byte and its bytes. Bit 7 of the control byte
//!   picks queue A (setup 3 with byte 1 bit 4); bit 6 set: ((bits 5:0) + 1) × 64
//!   bytes, clear: (bits 5:0) + 1 bytes.
//!
//! Invariants: no panic; everything the target writes decodes as whole, valid
//! PDUs with a host-role decoder (digests as ICResp negotiated); after a
//! C2HTermReq nothing more is sent and the queue is closing; responses on a
//! queue carry its SQID; C2HData only for commands whose opcode (FCTYPE for
//! fabrics) moves data to the host; with the fuzz bytes on the I/O queue only, the admin
//! queue still answers Keep Alive afterwards.
//!
//! Seeds cover I/O (Copy among it), admin, authentication, namespace events, write
//! protection and a Preempt and Abort waiting for a write in flight.
//! `NVMEOF_FUZZ_SEEDS=DIR` writes the seed inputs into DIR at start-up;
//! `NVMEOF_FUZZ_TRACE=1` prints the PDUs the target sends.
#![no_main]

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use nvmeof_common::auth::message::Negotiate;
use nvmeof_common::auth::{AuthCmd, AuthMessage, DhGroup, DhchapSecret, HashId};
use nvmeof_common::decoder::{DecoderConfig, PduDecoder, Role};
use nvmeof_common::pdu::{CapsuleCmd, DigestFlags, EncodeConfig, H2cData, IcReq, Pdu};
use nvmeof_common::spec::{
    Cc, ConnectCmd, ConnectData, CopyCmd, CopyRange, DsmRange, PropertyOffset, PropertySet, CNTLID_DYNAMIC,
    DISCOVERY_NQN,
};
use nvmeof_common::{Cqe, SglDescriptor, Sqe};
use nvmeof_fuzz::{chunk_len, chunked, fix_digests, trace, write_seeds_if_asked};
use nvmeof_target::backend::{Backend, DeferredMemBackend, IoCompletion, MemBackend};
use nvmeof_target::cmd::QueueCtx;
use nvmeof_target::config::HostKeys;
use nvmeof_target::core::controller::Teardown;
use nvmeof_target::core::zoned::ZoneConfig;
use nvmeof_target::core::{Limits, Namespace, Subsystem, Target};
use nvmeof_target::queue::{Phase, QueueState};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

const NQN: &str = "nqn.2026-11.io.nvmeof:fuzz";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000f0";
const HOSTID: [u8; 16] = [0xF0; 16];
/// Completions handled per step (AERs are the only asynchronous ones with a RAM namespace).
const MAX_COMPLETIONS: usize = 64;

fn ram_namespace(nsid: u32, deferred: bool) -> Arc<Namespace> {
    let ram = MemBackend::new(64 << 10, 512);
    let backend: Arc<dyn Backend> = if deferred { Arc::new(DeferredMemBackend(ram)) } else { Arc::new(ram) };
    // With reservations: fuzzed reservation commands reach their state machine.
    Arc::new(Namespace::new(NQN, nsid, backend).with_reservations(true))
}

/// A zoned RAM namespace: 8 zones of 16 blocks, at most 2 open and 3
/// active, so fuzzed writes and zone commands reach the zone state machine.
fn zoned_namespace(nsid: u32, deferred: bool) -> Arc<Namespace> {
    let ram = MemBackend::new(64 << 10, 512);
    let backend: Arc<dyn Backend> = if deferred { Arc::new(DeferredMemBackend(ram)) } else { Arc::new(ram) };
    let zones = ZoneConfig { zone_size: 8 << 10, max_open: Some(2), max_active: Some(3) };
    Arc::new(Namespace::new(NQN, nsid, backend).with_zones(zones).expect("8 zones fit"))
}

fn target(deferred: bool, auth: bool) -> (Arc<Target>, Arc<Subsystem>) {
    let t = Target::new(Limits::default());
    let mut keys = std::collections::BTreeMap::new();
    if auth {
        let key = DhchapSecret::new((1u8..=32).collect(), HashId::SHA256).expect("a 32-byte key");
        let ctrl_key = DhchapSecret::new((7u8..=54).collect(), HashId::SHA384).expect("a 48-byte key");
        // ffdhe2048 offered first: a fuzzed Reply's DH value reaches the exponentiation.
        let k = HostKeys { ctrl_key: Some(ctrl_key), dhgroup: DhGroup::FFDHE2048, ..HostKeys::new(key) };
        keys.insert(HOSTNQN.to_string(), k);
    }
    let s = Arc::new(Subsystem::new(NQN, "fuzz", None, false).with_host_keys(&keys));
    s.add_namespace(ram_namespace(1, deferred));
    s.add_namespace(zoned_namespace(3, deferred));
    t.add_subsystem(s.clone());
    (t, s)
}

/// What the host side sees of one connection.
struct HostView {
    dec: PduDecoder,
    buf: BytesMut,
    terminated: bool,
    pdus: Vec<Pdu>,
}

impl HostView {
    fn new() -> Self {
        let cfg = DecoderConfig { max_data_pdu: 1 << 30, ..DecoderConfig::new(Role::Host) };
        Self { dec: PduDecoder::new(cfg), buf: BytesMut::new(), terminated: false, pdus: Vec::new() }
    }

    fn absorb(&mut self, bytes: &[u8], phase: Phase, qid: Option<u16>, sent: &Shadow) {
        if bytes.is_empty() {
            return;
        }
        assert!(!self.terminated, "target sent {} bytes after its C2HTermReq", bytes.len());
        self.buf.extend_from_slice(bytes);
        loop {
            let pdu = match self.dec.decode(&mut self.buf) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => panic!("target sent an invalid PDU: {e}"),
            };
            match &pdu {
                Pdu::IcResp(r) => {
                    let cfg =
                        DecoderConfig { hdgst: r.dgst.hdgst(), ddgst: r.dgst.ddgst(), ..*self.dec.config() };
                    self.dec.set_config(cfg);
                }
                Pdu::C2hTermReq(_) => {
                    self.terminated = true;
                    assert!(self.buf.is_empty(), "target sent {} bytes after its C2HTermReq", self.buf.len());
                    assert_eq!(phase, Phase::Closing, "C2HTermReq sent but the queue stays open");
                }
                Pdu::CapsuleResp(r) => {
                    assert_eq!(r.cqe.sqid, qid.unwrap_or(0), "CQE SQID is not this queue's");
                }
                Pdu::C2hData(d) => {
                    // Data goes to the host only for commands that read (nvmet answers
                    // the others' non-zero SGL length with SGL Data Invalid).
                    assert!(
                        sent.may_read(d.cccid),
                        "C2HData for CID {:#x}, which moves no data to the host",
                        d.cccid
                    );
                }
                _ => {}
            }
            if trace() {
                eprintln!("qid {qid:?} <- {pdu:?}");
            }
            self.pdus.push(pdu);
        }
        assert!(self.buf.is_empty(), "target output ends inside a PDU ({} bytes)", self.buf.len());
    }
}

/// The commands sent on a connection, decoded from the bytes fed to the
/// queue by a decoder set up like the queue's, until that stream goes bad.
struct Shadow {
    dec: Option<PduDecoder>,
    buf: BytesMut,
    /// CID → whether some command sent under it moves data controller-to-host.
    reads: HashMap<u16, bool>,
}

impl Shadow {
    fn new(limits: &Limits) -> Self {
        let cfg = DecoderConfig {
            max_capsule_data: limits.in_capsule_data.max(limits.admin_in_capsule_data),
            max_data_pdu: limits.max_h2c_data,
            ..DecoderConfig::new(Role::Controller)
        };
        Self { dec: Some(PduDecoder::new(cfg)), buf: BytesMut::new(), reads: HashMap::new() }
    }

    fn feed(&mut self, bytes: &[u8]) {
        let Some(dec) = &mut self.dec else { return };
        self.buf.extend_from_slice(bytes);
        loop {
            match dec.decode(&mut self.buf) {
                Ok(Some(Pdu::IcReq(r))) => {
                    let cfg = DecoderConfig { hdgst: r.dgst.hdgst(), ddgst: r.dgst.ddgst(), ..*dec.config() };
                    dec.set_config(cfg);
                }
                Ok(Some(Pdu::CapsuleCmd(c))) => {
                    if trace() {
                        eprintln!("-> {:?} ({} data bytes)", c.sqe, c.data.len());
                    }
                    // Data direction: OPC bits 1:0 (FCTYPE's for fabrics commands), 10b or 11b reads.
                    let dir = if c.sqe.opcode() == 0x7F { c.sqe.fctype() } else { c.sqe.opcode() };
                    *self.reads.entry(c.sqe.cid()).or_default() |= dir & 2 != 0;
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(_) => {
                    self.dec = None;
                    return;
                }
            }
        }
    }

    /// Whether a C2HData for `cid` is allowed (unknown once the stream went bad).
    fn may_read(&self, cid: u16) -> bool {
        self.dec.is_none() || self.reads.get(&cid).copied().unwrap_or(false)
    }
}

/// One connection: the queue, its completion channel, receive buffer and host view.
struct Conn {
    q: QueueState,
    rx: UnboundedReceiver<IoCompletion>,
    rbuf: BytesMut,
    host: HostView,
    shadow: Shadow,
    /// PDUs handled before the output is taken (and completions delivered).
    max_pdus: usize,
    /// Completions stay in the channel until this is cleared.
    hold_completions: bool,
}

impl Conn {
    fn new(t: &Arc<Target>) -> Self {
        let (tx, rx) = unbounded_channel();
        let q = QueueState::new(QueueCtx::new(t.clone(), 1, nvmeof_target::backend::QueueIo::detached(tx)));
        Self {
            q,
            rx,
            rbuf: BytesMut::new(),
            host: HostView::new(),
            shadow: Shadow::new(&t.limits),
            max_pdus: usize::MAX,
            hold_completions: false,
        }
    }

    /// Delivers pending completions and checks the output.
    fn pump(&mut self) {
        let drain = if self.hold_completions { 0 } else { MAX_COMPLETIONS };
        for _ in 0..drain {
            match self.rx.try_recv() {
                Ok(c) => self.q.handle_completion(c),
                Err(_) => break,
            }
        }
        let out = self.q.out.take_all();
        self.host.absorb(&out, self.q.phase(), self.q.ctx.qid, &self.shadow);
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.shadow.feed(bytes);
        self.rbuf.extend_from_slice(bytes);
        // The transport writes out every `FLUSH_EVERY` PDUs before handling more.
        while self.q.handle_pdus(&mut self.rbuf, self.max_pdus) {
            self.pump();
        }
        self.pump();
    }

    /// Sends one PDU from the harness and returns the CQE it got, if any.
    fn send(&mut self, pdu: Pdu, cfg: &EncodeConfig) -> Option<Cqe> {
        let n = self.host.pdus.len();
        self.feed(&pdu.encode_to_vec(cfg));
        self.host.pdus[n..].iter().find_map(|p| match p {
            Pdu::CapsuleResp(r) => Some(r.cqe),
            _ => None,
        })
    }

    /// The real driver's teardown (`nvmet_tcp_release_queue`).
    fn close(self) {
        if let Some(ctrl) = &self.q.ctx.ctrl {
            match self.q.ctx.qid {
                Some(0) => ctrl.shutdown(Teardown::Closed),
                Some(qid) => ctrl.remove_io_queue(qid),
                None => {}
            }
        }
    }
}

fn icreq(dgst: u8) -> Pdu {
    Pdu::IcReq(IcReq { dgst: DigestFlags(dgst), ..IcReq::default() })
}

fn connect(cmd: ConnectCmd, subnqn: &str, cntlid: u16) -> Pdu {
    let data = ConnectData { hostid: HOSTID, cntlid, subnqn: subnqn.into(), hostnqn: HOSTNQN.into() };
    Pdu::CapsuleCmd(CapsuleCmd { sqe: cmd.to_sqe(0x7000), data: Bytes::from(data.encode().to_vec()) })
}

fn enable(c: &mut Conn) {
    let cc = Cc::linux_host_default(Cc::CSS_NVM).with_en(true);
    let set = PropertySet::new32(PropertyOffset::CC, cc.0).to_sqe(0x7001);
    let cqe = c.send(Pdu::CapsuleCmd(CapsuleCmd::new(set)), &EncodeConfig::default());
    assert!(cqe.is_some_and(|c| c.status.is_success()), "CC.EN=1 failed: {cqe:?}");
}

/// An enabled admin queue (no digests).
fn admin_queue(t: &Arc<Target>, sqflow_off: bool) -> Conn {
    let mut a = Conn::new(t);
    let enc = EncodeConfig::default();
    a.send(icreq(0), &enc);
    // KATO set, so Keep Alive is valid (with KATO 0 nvmet answers Keep Alive Timeout Invalid).
    let cmd = ConnectCmd::admin(120_000).with_disable_sqflow(sqflow_off);
    let cqe = a.send(connect(cmd, NQN, CNTLID_DYNAMIC), &enc).expect("admin Connect answered");
    assert!(cqe.status.is_success(), "admin Connect failed: {}", cqe.status);
    enable(&mut a);
    a
}

/// Splits the chunk area into (to queue A, length) pairs and the per-queue streams.
fn chunks(mut data: &[u8], to_a_allowed: bool) -> (Vec<(bool, usize)>, [Vec<u8>; 2]) {
    let mut list = Vec::new();
    let mut streams = [Vec::new(), Vec::new()];
    while let Some((&ctl, rest)) = data.split_first() {
        let len = chunk_len(ctl).min(rest.len());
        let to_a = to_a_allowed && ctl & 0x80 != 0;
        streams[to_a as usize].extend_from_slice(&rest[..len]);
        list.push((to_a, len));
        data = &rest[len..];
    }
    (list, streams)
}

fn run(data: &[u8]) {
    let [sel, opt, ref rest @ ..] = *data else { return };
    let setup = sel & 3;
    let dgst = (sel >> 2) & 3;
    let sqflow_off = opt & 1 != 0;
    let (t, sub) = target(opt & 0x20 != 0, sel & 0x40 != 0 && setup != 3);

    let mut a = None;
    let mut b = Conn::new(&t);
    b.max_pdus = [usize::MAX, 1, 2, 16][usize::from((sel >> 4) & 3)];
    let enc = EncodeConfig::default();
    match setup {
        0 => {}
        1 => {
            b.send(icreq(dgst), &enc);
        }
        2 => {
            b.send(icreq(dgst), &enc);
            let enc = EncodeConfig { hdgst: dgst & 1 != 0, ddgst: dgst & 2 != 0, pda: 0 };
            let subnqn = if opt & 4 != 0 { DISCOVERY_NQN } else { NQN };
            let cmd = ConnectCmd::admin(0).with_disable_sqflow(sqflow_off);
            let cqe = b.send(connect(cmd, subnqn, CNTLID_DYNAMIC), &enc).expect("admin Connect answered");
            assert!(cqe.status.is_success(), "admin Connect failed: {}", cqe.status);
            if opt & 8 != 0 {
                let cc = Cc::linux_host_default(Cc::CSS_NVM).with_en(true);
                let set = PropertySet::new32(PropertyOffset::CC, cc.0).to_sqe(0x7001);
                b.send(Pdu::CapsuleCmd(CapsuleCmd::new(set)), &enc);
            }
        }
        _ => {
            let admin = admin_queue(&t, false);
            let cntlid = admin.q.ctx.ctrl.as_ref().unwrap().cntlid;
            b.send(icreq(dgst), &enc);
            let enc = EncodeConfig { hdgst: dgst & 1 != 0, ddgst: dgst & 2 != 0, pda: 0 };
            let entries = if opt & 2 != 0 { 4 } else { 32 };
            let cmd = ConnectCmd::io(1, entries).with_disable_sqflow(sqflow_off);
            let cqe = b.send(connect(cmd, NQN, cntlid), &enc).expect("I/O Connect answered");
            assert!(cqe.status.is_success(), "I/O Connect failed: {}", cqe.status);
            a = Some(admin);
        }
    }

    b.hold_completions = opt & 0x40 != 0;
    let to_a_allowed = a.is_some() && opt & 0x10 != 0;
    let (list, mut streams) = chunks(rest, to_a_allowed);
    if sel & 0x80 != 0 {
        streams.iter_mut().for_each(|s| fix_digests(s));
    }
    let mut at = [0usize; 2];
    let half = list.len() / 2;
    for (k, (to_a, len)) in list.into_iter().enumerate() {
        if opt & 0x80 != 0 && k == half {
            // Namespace events half-way: each completes an outstanding AER
            // (Namespace Attribute Changed) while commands may be in flight
            // on namespace 1, which shrinks under them.
            sub.resize_namespace(1, 32 << 10).expect("RAM namespaces resize");
            sub.add_namespace(ram_namespace(2, opt & 0x20 != 0));
        }
        let i = to_a as usize;
        let bytes = &streams[i][at[i]..at[i] + len];
        at[i] += len;
        match (to_a, a.as_mut()) {
            (true, Some(a)) => a.feed(bytes),
            _ => b.feed(bytes),
        }
    }
    if opt & 0x80 != 0 {
        sub.remove_namespace(2);
    }
    b.hold_completions = false;
    b.pump();
    if let Some(a) = a.as_mut() {
        a.pump();
    }

    if let Some(mut a) = a {
        if !to_a_allowed {
            // Whatever the I/O queue got, the admin queue is untouched.
            let ka = Sqe::new(0x18);
            let cqe = a.send(Pdu::CapsuleCmd(CapsuleCmd::new(ka)), &EncodeConfig::default());
            assert!(
                cqe.is_some_and(|c| c.status.is_success()),
                "admin queue broken by bytes on the I/O queue: {cqe:?}"
            );
            assert_eq!(a.q.phase(), Phase::Live);
        }
        b.close();
        a.close();
    } else {
        b.close();
    }
}

/// Seed inputs: setups with a few valid commands after them.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    fn cmd(sqe: Sqe, data: &[u8]) -> Vec<u8> {
        Pdu::CapsuleCmd(CapsuleCmd { sqe, data: Bytes::copy_from_slice(data) })
            .encode_to_vec(&EncodeConfig::default())
    }
    fn input(head: [u8; 2], pdus: &[Vec<u8>]) -> Vec<u8> {
        // Each PDU in 64-byte chunks (the last one as short as it is).
        head.iter().copied().chain(pdus.iter().flat_map(|p| chunked(p))).collect()
    }
    let rw = |opc: u8, cid: u16, sgl: SglDescriptor| {
        let mut s = Sqe::new(opc);
        s.set_cid(cid).set_nsid(1).set_slba(2).set_nlb(0).set_sgl(sgl);
        s
    };
    let block = [0xA5u8; 512];
    // The one H2CData PDU of a 512-byte write (or compare) sent by R2T.
    let h2c_block = |cccid: u16| {
        Pdu::H2cData(H2cData { cccid, ttag: 0, datao: 0, data: Bytes::copy_from_slice(&block), last: true })
            .encode_to_vec(&EncodeConfig::default())
    };
    let dsm = DsmRange { cattr: 0, nlb: 8, slba: 16 }.encode();
    let mut dsm_sqe = Sqe::new(0x09);
    dsm_sqe.set_cid(6).set_nsid(1).set_cdw(10, 0).set_cdw(11, 1 << 2).set_sgl(SglDescriptor::in_capsule(16));
    // Copy: block 2 and blocks 16..24 to 40 (its completion path resumes
    // through `handle_completion` with deferred completions).
    let copy_ranges: Vec<u8> = [CopyRange::new(2, 1), CopyRange::new(16, 8)]
        .iter()
        .flat_map(|r| r.expect("valid range").encode())
        .collect();
    let mut copy_sqe = CopyCmd::new(1, 40, 2, false).to_sqe(7);
    copy_sqe.set_sgl(SglDescriptor::in_capsule(copy_ranges.len() as u32));
    let h2c = h2c_block(3);
    let io = vec![
        cmd(rw(0x01, 1, SglDescriptor::in_capsule(512)), &block),
        cmd(rw(0x02, 2, SglDescriptor::transport(512)), &[]),
        cmd(rw(0x01, 3, SglDescriptor::transport(512)), &[]),
        h2c,
        cmd(rw(0x00, 4, SglDescriptor::transport(0)), &[]),
        cmd(rw(0x08, 5, SglDescriptor::transport(0)), &[]),
        cmd(dsm_sqe, &dsm),
        cmd(copy_sqe, &copy_ranges),
    ];
    let mut identify = Sqe::new(0x06);
    identify.set_cid(1).set_cdw(10, 1).set_sgl(SglDescriptor::transport(4096));
    let mut log = Sqe::new(0x02);
    log.set_cid(2)
        .set_nsid(0xFFFF_FFFF)
        .set_cdw(10, 0x02 | (127 << 16))
        .set_sgl(SglDescriptor::transport(512));
    let mut nq = Sqe::new(0x09);
    nq.set_cid(3).set_cdw(10, 0x07).set_cdw(11, 0x0003_0003);
    let mut aer = Sqe::new(0x0C);
    aer.set_cid(4);
    let admin =
        vec![cmd(identify, &[]), cmd(log, &[]), cmd(nq, &[]), cmd(aer, &[]), cmd(Sqe::new(0x18), &[])];
    // Namespace Attribute Changed notices enabled (Set Features 0Bh, AEC bit 8, as
    // the Linux host's nvme_enable_aen), then an AER for them.
    let mut aec = Sqe::new(0x09);
    aec.set_cid(5).set_cdw(10, 0x0B).set_cdw(11, 1 << 8);
    let aen = vec![cmd(aec, &[]), cmd(aer, &[])];
    let mut raw = vec![icreq(0).encode_to_vec(&EncodeConfig::default())];
    raw.push(connect(ConnectCmd::admin(0), NQN, CNTLID_DYNAMIC).encode_to_vec(&EncodeConfig::default()));
    // DH-HMAC-CHAP: a negotiation, the challenge read, a (wrong) Reply, Success1 read.
    let neg = AuthMessage::Negotiate(Negotiate::new(1, &HashId::ALL, &DhGroup::ALL)).encode();
    let mut send = AuthCmd::dhchap(neg.len() as u32).to_sqe(true, 1);
    send.set_sgl(SglDescriptor::in_capsule(neg.len() as u32));
    let mut recv = AuthCmd::dhchap(4096).to_sqe(false, 2);
    recv.set_sgl(SglDescriptor::transport(4096));
    let reply = AuthMessage::Reply(nvmeof_common::auth::Reply {
        t_id: 1,
        seqnum: 5,
        response: vec![0x11; 32],
        challenge: Some(vec![0x22; 32]),
        dh_value: vec![0x33; 256],
    })
    .encode();
    let mut send_reply = AuthCmd::dhchap(reply.len() as u32).to_sqe(true, 3);
    send_reply.set_sgl(SglDescriptor::in_capsule(reply.len() as u32));
    let mut recv2 = recv;
    recv2.set_cid(4);
    let auth = vec![
        cmd(send, &neg),
        cmd(recv, &[]),
        cmd(send_reply, &reply),
        cmd(recv2, &[]),
        cmd(Sqe::new(0x18), &[]),
    ];
    vec![
        ("raw-icreq-connect", input([0, 0], &raw)),
        ("auth", input([0x42, 0], &auth)),
        ("admin-enabled", input([2, 8], &admin)),
        ("discovery", input([2, 0x0C], &admin)),
        ("io", input([3, 0], &io)),
        ("io-small-sqflow-off", input([3, 3], &io)),
        ("io-and-admin", input([3, 0x10], &io)),
        ("io-deferred", input([3, 0x20], &io)),
        ("admin-aer-ns-events", input([2, 0x88], &aen)),
        ("io-ns-events-admin-aer", {
            // I/O to queue B, then the notice set-up and an AER to queue A
            // (control byte bit 7 on each chunk).
            let (mut aec_a, mut aer_a) = (aec, aer);
            aec_a.set_cid(8);
            aer_a.set_cid(9);
            let mut to_a = chunked(&[cmd(aec_a, &[]), cmd(aer_a, &[])].concat());
            for i in (0..to_a.len()).step_by(65) {
                to_a[i] |= 0x80;
            }
            [input([3, 0x90], &io), to_a].concat()
        }),
        ("io-preempt-and-abort", {
            // Completions held back (byte 1 bits 5 and 6): the host registers
            // key 1 on namespace 1 (reservations on), a write stays in
            // flight, then its own Preempt and Abort with key 1 unregisters
            // it and waits for that write, while a read is refused
            // (Internal Error) until the completions are let through.
            let keys = |a: u64, b: u64| [a.to_le_bytes(), b.to_le_bytes()].concat();
            let resv = |opc: u8, cid: u16, cdw10: u32| {
                let mut s = Sqe::new(opc);
                s.set_cid(cid).set_nsid(1).set_cdw(10, cdw10).set_sgl(SglDescriptor::in_capsule(16));
                s
            };
            let pdus = vec![
                cmd(resv(0x0D, 20, 0), &keys(0, 1)),
                cmd(rw(0x01, 21, SglDescriptor::in_capsule(512)), &block),
                cmd(resv(0x11, 22, 2 | (1 << 8)), &keys(1, 1)),
                cmd(rw(0x02, 23, SglDescriptor::transport(512)), &[]),
            ];
            input([3, 0x60], &pdus)
        }),
        ("io-write-protect", {
            // Namespace 1 write protected on queue A (its flush completes
            // through the channel), I/O on queue B (all but Read and Flush
            // refused), protection lifted on queue A.
            let wp = |cid: u16, on: u32| {
                let mut s = Sqe::new(0x09);
                s.set_cid(cid).set_nsid(1).set_cdw(10, 0x84).set_cdw(11, on);
                let mut c = chunked(&cmd(s, &[]));
                for i in (0..c.len()).step_by(65) {
                    c[i] |= 0x80;
                }
                c
            };
            [vec![3, 0x30], wp(10, 1), input([3, 0x30], &io)[2..].to_vec(), wp(11, 0)].concat()
        }),
        ("io-fused-compare-write", {
            // Compare and Write pairs with completions through the channel:
            // a match (in-capsule), a pair whose Compare's data comes by
            // R2T after the Write's, a Compare followed by a Read (aborted),
            // and a Write alone as the second half.
            let fused = |op: u8, cid: u16, fuse: u8, sgl: SglDescriptor| {
                let mut s = rw(op, cid, sgl);
                s.set_fuse(fuse);
                s
            };
            let h2c_compare = h2c_block(32);
            let pdus = vec![
                cmd(rw(0x01, 29, SglDescriptor::in_capsule(512)), &block),
                cmd(fused(0x05, 30, 1, SglDescriptor::in_capsule(512)), &block),
                cmd(fused(0x01, 31, 2, SglDescriptor::in_capsule(512)), &[0x5A; 512]),
                cmd(fused(0x05, 32, 1, SglDescriptor::transport(512)), &[]),
                cmd(fused(0x01, 33, 2, SglDescriptor::in_capsule(512)), &block),
                h2c_compare,
                cmd(fused(0x05, 34, 1, SglDescriptor::in_capsule(512)), &block),
                cmd(rw(0x02, 35, SglDescriptor::transport(512)), &[]),
                cmd(fused(0x01, 36, 2, SglDescriptor::in_capsule(512)), &block),
            ];
            input([3, 0x20], &pdus)
        }),
        ("io-zoned", {
            // On the zoned namespace 3: writes at and off the write pointer,
            // Zone Appends (in-capsule and by R2T), a report, Finish, Reset
            // (a deallocate that completes through the channel when
            // deferred), and a Reset of every zone.
            let z = |opc: u8, cid: u16, slba: u64, sgl: SglDescriptor| {
                let mut s = Sqe::new(opc);
                s.set_cid(cid).set_nsid(3).set_slba(slba).set_nlb(0).set_sgl(sgl);
                s
            };
            let send = |cid: u16, slba: u64, zsa: u32| {
                let mut s = z(0x79, cid, slba, SglDescriptor::transport(0));
                s.set_cdw(12, 0).set_cdw(13, zsa);
                s
            };
            let mut report = z(0x7A, 45, 0, SglDescriptor::transport(4096));
            report.set_cdw(12, 1023).set_cdw(13, 1 << 16);
            let h2c_append = h2c_block(44);
            let pdus = vec![
                cmd(z(0x01, 40, 0, SglDescriptor::in_capsule(512)), &block),
                cmd(z(0x01, 41, 0, SglDescriptor::in_capsule(512)), &block),
                cmd(z(0x7D, 42, 16, SglDescriptor::in_capsule(512)), &block),
                cmd(z(0x7D, 43, 17, SglDescriptor::in_capsule(512)), &block),
                cmd(z(0x7D, 44, 32, SglDescriptor::transport(512)), &[]),
                h2c_append,
                cmd(report, &[]),
                cmd(send(46, 16, 2), &[]),
                cmd(send(47, 0, 4), &[]),
                cmd(send(48, 0, 4 | 1 << 8), &[]),
            ];
            input([3, 0x20], &pdus)
        }),
    ]
}

fuzz_target!(init: write_seeds_if_asked(seeds), |data: &[u8]| run(data));
