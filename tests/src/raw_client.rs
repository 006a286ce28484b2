//! A small raw-PDU NVMe/TCP host for integration tests.
//!
//! It speaks the wire protocol directly through the `nvmeof-common` codec, so
//! tests can send well-formed commands as well as malformed PDUs, and observe
//! every PDU the target answers with. Every wait is bounded by
//! [`RawClient::timeout`] (5 s by default): a misbehaving target makes a test
//! fail, never hang.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nvmeof_common::decoder::{DecoderConfig, PduDecoder, Role};
use nvmeof_common::error::DecodeError;
use nvmeof_common::opcode::{AdminOpcode, IoOpcode};
use nvmeof_common::pdu::{CapsuleCmd, DigestFlags, EncodeConfig, H2cData, IcReq, IcResp, Pdu, TermReq};
use nvmeof_common::spec::identify::{Cns, IdentifyCmd};
use nvmeof_common::spec::log::{GetLogPageCmd, LogPageId};
use nvmeof_common::spec::property::{Cc, Csts, PropertyGet, PropertyOffset, PropertySet};
use nvmeof_common::spec::{ConnectCmd, ConnectData, CNTLID_DYNAMIC};
use nvmeof_common::{Cqe, SglDescriptor, Sqe, Status};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Default bound on every wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Host NQN used by the tests unless they pass another.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";
/// Host ID matching [`HOSTNQN`].
pub const HOSTID: [u8; 16] = [0x0f, 0x0e, 0x0d, 0x0c, 0x0b, 0x0a, 0x09, 0x08, 7, 6, 5, 4, 3, 2, 1, 0];

/// Why no PDU was received.
#[derive(Debug)]
pub enum RecvError {
    /// Nothing arrived within the timeout.
    Timeout,
    /// The target closed (or reset) the connection.
    Closed,
    /// The bytes received do not decode.
    Decode(DecodeError),
    /// The target terminated the connection with a C2HTermReq.
    Terminated(TermReq),
    /// A PDU that makes no sense here.
    Unexpected(String),
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for RecvError {}

/// The outcome of one command.
#[derive(Clone, Debug)]
pub struct Completion {
    /// CID of the command.
    pub cid: u16,
    /// The CQE (synthesised as success with DW0/DW1 0 when a C2HData SUCCESS flag completed it).
    pub cqe: Cqe,
    /// Data received in C2HData PDUs, in DATAO order.
    pub data: Vec<u8>,
    /// The command completed through a C2HData with the SUCCESS flag (no CapsuleResp).
    pub via_success_flag: bool,
    /// Every PDU received for this command (R2T, C2HData, CapsuleResp).
    pub pdus: Vec<Pdu>,
}

impl Completion {
    /// Status of the completion.
    pub fn status(&self) -> Status {
        self.cqe.status
    }

    /// Panics unless the command succeeded.
    #[track_caller]
    pub fn ok(self) -> Self {
        assert!(
            self.cqe.status.is_success(),
            "command {} failed: {} (cqe {:?})",
            self.cid,
            self.cqe.status,
            self.cqe
        );
        self
    }

    /// Panics unless the status has SCT/SC `want` (DNR/M ignored).
    #[track_caller]
    pub fn expect_status(&self, want: Status) -> &Self {
        assert_eq!(
            self.cqe.status.code(),
            want.code(),
            "command {}: got {}, want {}",
            self.cid,
            self.cqe.status,
            want
        );
        self
    }

    /// Number of received PDUs of type C2HData.
    pub fn c2h_count(&self) -> usize {
        self.pdus.iter().filter(|p| matches!(p, Pdu::C2hData(_))).count()
    }

    /// Number of received R2Ts.
    pub fn r2t_count(&self) -> usize {
        self.pdus.iter().filter(|p| matches!(p, Pdu::R2t(_))).count()
    }
}

/// A command that failed: its SQE (when this client sent it) and CQE.
#[derive(Clone, Copy, Debug)]
pub struct Failed {
    /// The command, unless the test sent its bytes itself.
    pub sqe: Option<Sqe>,
    /// Its completion.
    pub cqe: Cqe,
}

struct Inflight {
    /// The command as sent (not known for [`RawClient::track`]ed ones).
    sqe: Option<Sqe>,
    /// Data to send in answer to R2Ts.
    r2t_data: Bytes,
    data: Vec<u8>,
    pdus: Vec<Pdu>,
}

/// A raw NVMe/TCP host connection (one queue).
pub struct RawClient {
    stream: TcpStream,
    rbuf: BytesMut,
    dec: PduDecoder,
    /// Encoding parameters for what we send (digests after ICReq/ICResp).
    pub enc: EncodeConfig,
    /// ICResp received, if any.
    pub icresp: Option<IcResp>,
    /// Most data bytes per H2CData PDU (from ICResp).
    pub maxh2cdata: u32,
    /// Split H2CData further to this many bytes (tests of multi-PDU transfers).
    pub h2c_chunk: Option<u32>,
    /// Largest write sent in-capsule (Linux: 8 KiB on the admin queue, IOCCSZ-based on I/O queues).
    pub icd_limit: u32,
    /// Host NQN for Connect.
    pub hostnqn: String,
    /// Host ID for Connect.
    pub hostid: [u8; 16],
    /// Queue ID after Connect.
    pub qid: u16,
    /// Controller ID after Connect.
    pub cntlid: u16,
    /// Bound on every wait.
    pub timeout: Duration,
    /// H2CData PDUs sent so far.
    pub h2c_sent: usize,
    /// Every command that failed on this queue, in the order their CQEs
    /// came (what the controller's Error Information log should hold).
    pub failed: Vec<Failed>,
    next_cid: u16,
    inflight: HashMap<u16, Inflight>,
    done: HashMap<u16, Completion>,
}

impl RawClient {
    /// Opens TCP only (no ICReq): for protocol tests.
    pub async fn tcp(addr: SocketAddr) -> Self {
        let stream = tokio::time::timeout(DEFAULT_TIMEOUT, TcpStream::connect(addr))
            .await
            .expect("TCP connect timed out")
            .expect("TCP connect");
        Self::with_stream(stream)
    }

    fn with_stream(stream: TcpStream) -> Self {
        stream.set_nodelay(true).unwrap();
        let mut cfg = DecoderConfig::new(Role::Host);
        cfg.max_data_pdu = 64 << 20;
        Self {
            stream,
            rbuf: BytesMut::with_capacity(64 * 1024),
            dec: PduDecoder::new(cfg),
            enc: EncodeConfig::default(),
            icresp: None,
            maxh2cdata: 4096,
            h2c_chunk: None,
            icd_limit: 8192,
            hostnqn: HOSTNQN.to_string(),
            hostid: HOSTID,
            qid: 0,
            cntlid: 0,
            timeout: DEFAULT_TIMEOUT,
            h2c_sent: 0,
            failed: Vec::new(),
            next_cid: 1,
            inflight: HashMap::new(),
            done: HashMap::new(),
        }
    }

    /// [`Self::tcp`] with SO_RCVBUF set to `bytes` before connecting, which
    /// keeps the receive window small (no autotuning): a host that reads slowly.
    pub async fn tcp_with_rcvbuf(addr: SocketAddr, bytes: u32) -> Self {
        Self::tcp_with(addr, |sock| sock.set_recv_buffer_size(bytes).expect("SO_RCVBUF")).await
    }

    /// [`Self::tcp`] with the socket set up by `configure` before connecting.
    pub async fn tcp_with(addr: SocketAddr, configure: impl FnOnce(&tokio::net::TcpSocket)) -> Self {
        let sock =
            if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
                .expect("socket");
        configure(&sock);
        let stream = tokio::time::timeout(DEFAULT_TIMEOUT, sock.connect(addr))
            .await
            .expect("TCP connect timed out")
            .expect("TCP connect");
        Self::with_stream(stream)
    }

    /// The connection's socket (for socket options).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Opens TCP and exchanges ICReq/ICResp without digests.
    pub async fn connect(addr: SocketAddr) -> Self {
        Self::connect_with(addr, DigestFlags::new(false, false)).await
    }

    /// Opens TCP and exchanges ICReq/ICResp asking for `dgst`.
    pub async fn connect_with(addr: SocketAddr, dgst: DigestFlags) -> Self {
        let mut c = Self::tcp(addr).await;
        let resp = c.icreq(IcReq { pfv: 0, hpda: 0, dgst, maxr2t: 0 }).await.expect("ICResp");
        assert_eq!(resp.dgst, dgst, "ICResp digests differ from the request");
        assert_eq!(resp.pfv, 0);
        assert_eq!(resp.cpda, 0);
        assert!(resp.maxh2cdata >= 4096 && resp.maxh2cdata % 4 == 0, "MAXH2CDATA {}", resp.maxh2cdata);
        c
    }

    /// Sends `req` and waits for the ICResp; switches digests on as negotiated.
    pub async fn icreq(&mut self, req: IcReq) -> Result<IcResp, RecvError> {
        self.send_pdu(&Pdu::IcReq(req)).await;
        match self.recv_pdu().await? {
            Pdu::IcResp(r) => {
                self.icresp = Some(r);
                self.maxh2cdata = r.maxh2cdata;
                self.enc = EncodeConfig { hdgst: r.dgst.hdgst(), ddgst: r.dgst.ddgst(), pda: r.cpda };
                let mut cfg = *self.dec.config();
                cfg.hdgst = r.dgst.hdgst();
                cfg.ddgst = r.dgst.ddgst();
                self.dec.set_config(cfg);
                Ok(r)
            }
            Pdu::C2hTermReq(t) => Err(RecvError::Terminated(t)),
            other => Err(RecvError::Unexpected(format!("expected ICResp, got {other:?}"))),
        }
    }

    // ------------------------------------------------------------ raw I/O

    /// Writes raw bytes.
    pub async fn send_raw(&mut self, b: &[u8]) {
        tokio::time::timeout(self.timeout, self.stream.write_all(b))
            .await
            .expect("send timed out")
            .expect("send failed");
    }

    /// Writes raw bytes; false if the connection is gone.
    pub async fn try_send_raw(&mut self, b: &[u8]) -> bool {
        matches!(tokio::time::timeout(self.timeout, self.stream.write_all(b)).await, Ok(Ok(())))
    }

    /// Encodes `pdu` with the negotiated parameters and sends it.
    pub async fn send_pdu(&mut self, pdu: &Pdu) {
        let v = pdu.encode_to_vec(&self.enc);
        self.send_raw(&v).await;
    }

    /// Encodes a PDU the way it would be sent (for corruption tests).
    pub fn encode(&self, pdu: &Pdu) -> Vec<u8> {
        pdu.encode_to_vec(&self.enc)
    }

    async fn fill(&mut self, deadline: Instant) -> Result<(), RecvError> {
        if self.rbuf.capacity() - self.rbuf.len() < 16 * 1024 {
            self.rbuf.reserve(256 * 1024);
        }
        match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.rbuf)).await {
            Err(_) => Err(RecvError::Timeout),
            Ok(Ok(0)) | Ok(Err(_)) => Err(RecvError::Closed),
            Ok(Ok(_)) => Ok(()),
        }
    }

    /// Receives the next PDU (bounded by [`Self::timeout`]).
    pub async fn recv_pdu(&mut self) -> Result<Pdu, RecvError> {
        self.recv_pdu_within(self.timeout).await
    }

    /// Receives the next PDU within `t`.
    pub async fn recv_pdu_within(&mut self, t: Duration) -> Result<Pdu, RecvError> {
        let deadline = Instant::now() + t;
        loop {
            match self.dec.decode(&mut self.rbuf) {
                Ok(Some(p)) => return Ok(p),
                Ok(None) => {}
                Err(e) => return Err(RecvError::Decode(e)),
            }
            self.fill(deadline).await?;
        }
    }

    /// Waits until the target closes the connection, collecting the PDUs that
    /// arrive meanwhile (undecodable bytes are dropped). `Err(Timeout)` if it
    /// stays open for `t`.
    pub async fn try_closed_within(&mut self, t: Duration) -> Result<Vec<Pdu>, RecvError> {
        let deadline = Instant::now() + t;
        let mut got = Vec::new();
        loop {
            match self.dec.decode(&mut self.rbuf) {
                Ok(Some(p)) => {
                    got.push(p);
                    continue;
                }
                Ok(None) => {}
                Err(_) => self.rbuf.clear(),
            }
            match self.fill(deadline).await {
                Ok(()) => {}
                Err(RecvError::Closed) => return Ok(got),
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until the target closes the connection; returns the PDUs received
    /// meanwhile. Panics after `t`.
    #[track_caller]
    pub fn expect_closed_within(&mut self, t: Duration) -> impl std::future::Future<Output = Vec<Pdu>> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            match self.try_closed_within(t).await {
                Ok(v) => v,
                Err(e) => panic!("{caller}: connection not closed within {t:?} ({e})"),
            }
        }
    }

    /// Whether the connection is still open: nothing arrives and no EOF within `t`.
    pub async fn is_open_for(&mut self, t: Duration) -> bool {
        let deadline = Instant::now() + t;
        match self.fill(deadline).await {
            Err(RecvError::Timeout) => true,
            Err(_) => false,
            Ok(()) => true,
        }
    }

    /// Expects a C2HTermReq as the next PDU, then the connection to close. Returns it.
    #[track_caller]
    pub fn expect_term(&mut self) -> impl std::future::Future<Output = TermReq> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            let t = loop {
                match self.recv_pdu().await {
                    Ok(Pdu::C2hTermReq(t)) => break t,
                    // Completions of commands sent before the bad PDU may precede it.
                    Ok(Pdu::CapsuleResp(_)) | Ok(Pdu::C2hData(_)) | Ok(Pdu::R2t(_)) => continue,
                    Ok(p) => panic!("{caller}: expected C2HTermReq, got {p:?}"),
                    Err(e) => panic!("{caller}: expected C2HTermReq, got {e}"),
                }
            };
            let after = self.expect_closed_within(self.timeout).await;
            assert!(after.is_empty(), "{caller}: PDUs after C2HTermReq: {after:?}");
            t
        }
    }

    // ------------------------------------------------------------ commands

    /// Next free CID.
    pub fn alloc_cid(&mut self) -> u16 {
        loop {
            let c = self.next_cid;
            self.next_cid = self.next_cid.wrapping_add(1);
            if !self.inflight.contains_key(&c) && !self.done.contains_key(&c) {
                return c;
            }
        }
    }

    /// Sends a command capsule as given, except the CID, which is allocated.
    /// `icd` travels in the capsule; `r2t_data` is kept to answer R2Ts.
    pub async fn send_cmd(&mut self, mut sqe: Sqe, icd: Bytes, r2t_data: Bytes) -> u16 {
        let cid = self.alloc_cid();
        sqe.set_cid(cid);
        self.inflight.insert(cid, Inflight { sqe: Some(sqe), r2t_data, data: Vec::new(), pdus: Vec::new() });
        self.send_pdu(&Pdu::CapsuleCmd(CapsuleCmd { sqe, data: icd })).await;
        cid
    }

    /// Registers a command whose capsule the test sends itself (raw bytes), so
    /// [`Self::wait`] can collect its completion; `r2t_data` answers R2Ts.
    pub fn track(&mut self, cid: u16, r2t_data: Bytes) {
        self.inflight.insert(cid, Inflight { sqe: None, r2t_data, data: Vec::new(), pdus: Vec::new() });
    }

    /// Starts a command that moves no data or reads: SGL set by the caller.
    pub async fn start(&mut self, sqe: Sqe) -> u16 {
        self.send_cmd(sqe, Bytes::new(), Bytes::new()).await
    }

    /// Starts a host-to-controller command: in-capsule up to [`Self::icd_limit`]
    /// (unless `force_r2t`), else a transport SGL answered through R2T/H2CData.
    pub async fn start_write(&mut self, mut sqe: Sqe, data: Bytes, force_r2t: bool) -> u16 {
        let len = data.len() as u32;
        if len <= self.icd_limit && !force_r2t {
            sqe.set_sgl(SglDescriptor::in_capsule(len));
            self.send_cmd(sqe, data, Bytes::new()).await
        } else {
            sqe.set_sgl(SglDescriptor::transport(len));
            self.send_cmd(sqe, Bytes::new(), data).await
        }
    }

    /// Sends `sqe` (+ data) and waits for its completion.
    pub async fn submit(&mut self, sqe: Sqe, data: Option<Bytes>) -> Completion {
        let cid = match data {
            Some(d) => self.start_write(sqe, d, false).await,
            None => self.start(sqe).await,
        };
        self.wait(cid).await
    }

    /// Like [`Self::submit`] but returns transport errors.
    pub async fn try_submit(&mut self, sqe: Sqe, data: Option<Bytes>) -> Result<Completion, RecvError> {
        let cid = match data {
            Some(d) => self.start_write(sqe, d, false).await,
            None => self.start(sqe).await,
        };
        self.try_wait(cid).await
    }

    /// Waits for the completion of `cid`, answering R2Ts meanwhile. Panics on transport errors.
    #[track_caller]
    pub fn wait(&mut self, cid: u16) -> impl std::future::Future<Output = Completion> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            match self.try_wait(cid).await {
                Ok(c) => c,
                Err(e) => panic!("{caller}: command {cid}: {e}"),
            }
        }
    }

    /// Waits for the completion of `cid`, answering R2Ts meanwhile.
    pub async fn try_wait(&mut self, cid: u16) -> Result<Completion, RecvError> {
        loop {
            if let Some(c) = self.done.remove(&cid) {
                return Ok(c);
            }
            if !self.inflight.contains_key(&cid) {
                return Err(RecvError::Unexpected(format!("command {cid} is not in flight")));
            }
            let p = self.recv_pdu().await?;
            self.handle(p).await?;
        }
    }

    /// Waits for any completion.
    pub async fn next_completion(&mut self) -> Result<Completion, RecvError> {
        loop {
            if let Some(&cid) = self.done.keys().next() {
                return Ok(self.done.remove(&cid).unwrap());
            }
            let p = self.recv_pdu().await?;
            self.handle(p).await?;
        }
    }

    /// Commands sent and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    async fn handle(&mut self, p: Pdu) -> Result<(), RecvError> {
        match &p {
            Pdu::R2t(r) => {
                let Some(f) = self.inflight.get_mut(&r.cccid) else {
                    return Err(RecvError::Unexpected(format!("R2T for unknown CID: {r:?}")));
                };
                f.pdus.push(p.clone());
                let (o, l) = (r.r2to as usize, r.r2tl as usize);
                if l == 0 || o + l > f.r2t_data.len() {
                    return Err(RecvError::Unexpected(format!("R2T outside the command's data: {r:?}")));
                }
                let window = f.r2t_data.slice(o..o + l);
                let chunk = self.h2c_chunk.unwrap_or(u32::MAX).min(self.maxh2cdata) as usize;
                let mut off = 0;
                let mut buf = Vec::new();
                while off < l {
                    let n = chunk.min(l - off);
                    let d = H2cData {
                        cccid: r.cccid,
                        ttag: r.ttag,
                        datao: (o + off) as u32,
                        data: window.slice(off..off + n),
                        last: off + n == l,
                    };
                    buf.extend_from_slice(&Pdu::H2cData(d).encode_to_vec(&self.enc));
                    self.h2c_sent += 1;
                    off += n;
                }
                self.send_raw(&buf).await;
            }
            Pdu::C2hData(d) => {
                let Some(f) = self.inflight.get_mut(&d.cccid) else {
                    return Err(RecvError::Unexpected(format!("C2HData for unknown CID {}", d.cccid)));
                };
                if d.datao as usize != f.data.len() {
                    return Err(RecvError::Unexpected(format!(
                        "C2HData DATAO {} but {} bytes received so far",
                        d.datao,
                        f.data.len()
                    )));
                }
                f.data.extend_from_slice(&d.data);
                f.pdus.push(p.clone());
                if d.success {
                    let cid = d.cccid;
                    let f = self.inflight.remove(&cid).unwrap();
                    let cqe = Cqe { result: 0, sqhd: 0, sqid: self.qid, cid, status: Status::SUCCESS };
                    self.done.insert(
                        cid,
                        Completion { cid, cqe, data: f.data, via_success_flag: true, pdus: f.pdus },
                    );
                }
            }
            Pdu::CapsuleResp(r) => {
                let cid = r.cqe.cid;
                let Some(mut f) = self.inflight.remove(&cid) else {
                    return Err(RecvError::Unexpected(format!("CapsuleResp for unknown CID: {:?}", r.cqe)));
                };
                f.pdus.push(p.clone());
                if !r.cqe.status.is_success() {
                    self.failed.push(Failed { sqe: f.sqe, cqe: r.cqe });
                }
                self.done.insert(
                    cid,
                    Completion { cid, cqe: r.cqe, data: f.data, via_success_flag: false, pdus: f.pdus },
                );
            }
            Pdu::C2hTermReq(t) => return Err(RecvError::Terminated(t.clone())),
            other => return Err(RecvError::Unexpected(format!("unexpected PDU {other:?}"))),
        }
        Ok(())
    }

    // ------------------------------------------------------------ fabrics

    /// Connect with explicit command fields and data; records QID/CNTLID on success.
    pub async fn connect_cmd(&mut self, cmd: ConnectCmd, data: ConnectData) -> Completion {
        let sqe = cmd.to_sqe(0);
        let d = Bytes::copy_from_slice(&data.encode());
        let cid = self.send_cmd(sqe, d, Bytes::new()).await;
        let c = self.wait(cid).await;
        if c.status().is_success() {
            self.qid = cmd.qid;
            self.cntlid = c.cqe.dw0() as u16;
        }
        c
    }

    /// Connect data for this host.
    pub fn connect_data(&self, subnqn: &str, cntlid: u16) -> ConnectData {
        ConnectData { hostid: self.hostid, cntlid, subnqn: subnqn.into(), hostnqn: self.hostnqn.clone() }
    }

    /// Admin-queue Connect (SQSIZE 31, KATO 0).
    pub async fn admin_connect(&mut self, subnqn: &str, hostnqn: &str) -> Cqe {
        self.admin_connect_kato(subnqn, hostnqn, 0).await
    }

    /// Admin-queue Connect with a keep-alive timeout.
    pub async fn admin_connect_kato(&mut self, subnqn: &str, hostnqn: &str, kato_ms: u32) -> Cqe {
        self.hostnqn = hostnqn.to_string();
        let data = self.connect_data(subnqn, CNTLID_DYNAMIC);
        self.connect_cmd(ConnectCmd::admin(kato_ms), data).await.cqe
    }

    /// I/O-queue Connect (128 entries).
    pub async fn io_connect(&mut self, qid: u16, cntlid: u16, subnqn: &str, hostnqn: &str) -> Cqe {
        self.hostnqn = hostnqn.to_string();
        let data = self.connect_data(subnqn, cntlid);
        self.connect_cmd(ConnectCmd::io(qid, 128), data).await.cqe
    }

    /// Property Get: `size8` selects an 8-byte access.
    pub async fn property_get(&mut self, offset: PropertyOffset, size8: bool) -> Completion {
        let mut g = PropertyGet::new(offset);
        g.attrib = size8 as u8;
        self.submit(g.to_sqe(0), None).await
    }

    /// Property Set (4 bytes).
    pub async fn property_set(&mut self, offset: PropertyOffset, value: u32) -> Completion {
        self.submit(PropertySet::new32(offset, value).to_sqe(0), None).await
    }

    /// Reads CSTS.
    pub async fn csts(&mut self) -> Csts {
        Csts(self.property_get(PropertyOffset::CSTS, false).await.ok().cqe.dw0())
    }

    /// Sets CC.EN (IOSQES 6, IOCQES 4) and waits for CSTS.RDY (panics after the timeout).
    pub async fn enable(&mut self) {
        let cc = Cc::linux_host_default(Cc::CSS_NVM).with_en(true);
        self.property_set(PropertyOffset::CC, cc.0).await.ok();
        let deadline = Instant::now() + self.timeout;
        loop {
            let csts = self.csts().await;
            assert!(!csts.cfs(), "CSTS.CFS set after enable");
            if csts.rdy() {
                return;
            }
            assert!(Instant::now() < deadline, "CSTS.RDY not set within {:?}", self.timeout);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // ------------------------------------------------------------ admin

    /// Identify (4096 bytes).
    pub async fn identify(&mut self, cns: Cns, nsid: u32) -> Completion {
        self.submit(IdentifyCmd::new(cns, nsid).to_sqe(0), None).await
    }

    /// Get Log Page of `len` bytes at `lpo`.
    pub async fn get_log_page(
        &mut self,
        lid: LogPageId,
        nsid: u32,
        lpo: u64,
        len: u32,
        rae: bool,
    ) -> Completion {
        let mut c = GetLogPageCmd::new(lid, nsid, lpo, len);
        c.rae = rae;
        self.submit(c.to_sqe(0), None).await
    }

    /// Submits `sqe` with a zero-length data descriptor (a command that
    /// moves no data) and waits for its completion.
    pub async fn submit_no_data(&mut self, mut sqe: Sqe) -> Completion {
        sqe.set_sgl(SglDescriptor::transport(0));
        self.submit(sqe, None).await
    }

    /// Keep Alive.
    pub async fn keep_alive(&mut self) -> Completion {
        self.submit_no_data(Sqe::new(AdminOpcode::KEEP_ALIVE.0)).await
    }

    // ------------------------------------------------------------ I/O

    /// A Read/Write/Compare SQE for `nlb` blocks (1-based count) at `lba`.
    pub fn rw_sqe(opcode: IoOpcode, nsid: u32, lba: u64, nlb: u32) -> Sqe {
        assert!(nlb >= 1);
        let mut s = Sqe::new(opcode.0);
        s.set_nsid(nsid).set_slba(lba).set_nlb((nlb - 1) as u16);
        s
    }

    /// Reads `nlb` blocks of `block_size` bytes.
    pub async fn read(&mut self, nsid: u32, lba: u64, nlb: u32, block_size: u32) -> Completion {
        let mut s = Self::rw_sqe(IoOpcode::READ, nsid, lba, nlb);
        s.set_sgl(SglDescriptor::transport(nlb * block_size));
        self.submit(s, None).await
    }

    /// Writes `data` (whole blocks of `block_size`) at `lba`.
    pub async fn write(&mut self, nsid: u32, lba: u64, data: &[u8], block_size: u32) -> Completion {
        self.write_opts(nsid, lba, data, block_size, false, false).await
    }

    /// Writes with FUA and/or forcing the R2T path.
    pub async fn write_opts(
        &mut self,
        nsid: u32,
        lba: u64,
        data: &[u8],
        block_size: u32,
        fua: bool,
        force_r2t: bool,
    ) -> Completion {
        assert_eq!(data.len() % block_size as usize, 0);
        let nlb = (data.len() / block_size as usize) as u32;
        let mut s = Self::rw_sqe(IoOpcode::WRITE, nsid, lba, nlb);
        s.set_fua(fua);
        let cid = self.start_write(s, Bytes::copy_from_slice(data), force_r2t).await;
        self.wait(cid).await
    }
}
