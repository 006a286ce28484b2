//! Per-queue NVMe/TCP protocol state machine, without sockets or clocks.
//!
//! One [`Queue`] lives for one TCP connection (one NVMe queue). The driver
//! feeds it decoded PDUs ([`Queue::handle_pdu`]), submissions
//! ([`Queue::submit`]) and the current time ([`Queue::handle_timeout`]), and
//! pulls out PDUs to send ([`Queue::poll_transmit`]), events for callers
//! ([`Queue::poll_event`]) and the next deadline ([`Queue::poll_timeout`]).
//!
//! What it owns (NVMe/TCP 1.0 §3.3–3.6, reference §2–§3):
//! - the ICReq/ICResp handshake and the negotiated digests/MAXH2CDATA;
//! - CID allocation: a 12-bit tag indexing a preallocated slot and a 4-bit
//!   generation counter in bits 15:12 (Linux `nvme_cid`), so completions for
//!   a CID whose slot has since been reused are detected as stale;
//! - the choice between in-capsule data and R2T for writes, answering R2T
//!   with H2CData PDUs split by MAXH2CDATA (slices of the caller's `Bytes`,
//!   no copy);
//! - C2HData bookkeeping (in-order offsets, short reads, the SUCCESS flag,
//!   data digest errors), either for whole decoded PDUs
//!   ([`Queue::handle_pdu`]) or split into header and payload so the payload
//!   can be read from the socket straight into the command's destination
//!   ([`C2hHeader`], [`Queue::c2h_begin`], [`Queue::c2h_end`]);
//! - per-command deadlines.
//!
//! Nothing here allocates per command in the steady state: slots, the free
//! tag stack and the output/event queues are allocated once.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nvmeof_common::decoder::{DecoderConfig, FrameLayout, Role};
use nvmeof_common::digest::{crc32c, DIGEST_LEN};
use nvmeof_common::error::Fes;
use nvmeof_common::opcode::AdminOpcode;
use nvmeof_common::pdu::{
    C2hData, CapsuleCmd, CapsuleResp, DigestFlags, EncodeConfig, H2cData, IcReq, Pdu, PduFlags, PduType, R2t,
};
use nvmeof_common::{Cqe, DecodeError, SglDescriptor, Sqe, Status};

/// Bits of a CID that index the command slot.
pub const TAG_BITS: u32 = 12;
/// Most command slots per queue (12-bit tag).
pub const MAX_TAGS: usize = 1 << TAG_BITS;
const TAG_MASK: u16 = (1 << TAG_BITS) - 1;

/// In-capsule data limit for the admin queue and every fabrics command
/// (Linux `NVME_TCP_ADMIN_CCSZ`, reference §3.4).
pub const ADMIN_INLINE_LIMIT: u32 = 8192;

/// Builds a CID from a 4-bit generation and a 12-bit tag.
pub const fn make_cid(gen: u8, tag: u16) -> u16 {
    ((gen as u16 & 0xF) << TAG_BITS) | (tag & TAG_MASK)
}

/// The tag (slot index) of a CID.
pub const fn cid_tag(cid: u16) -> u16 {
    cid & TAG_MASK
}

/// The generation of a CID.
pub const fn cid_gen(cid: u16) -> u8 {
    (cid >> TAG_BITS) as u8
}

/// Static parameters of one queue connection.
#[derive(Clone, Debug)]
pub struct QueueConfig {
    /// Queue ID (0 = admin).
    pub qid: u16,
    /// Command slots (CIDs in use at once), at most [`MAX_TAGS`].
    pub tags: u16,
    /// Ask for header digests.
    pub hdgst: bool,
    /// Ask for data digests.
    pub ddgst: bool,
    /// In-capsule data limit for non-fabrics commands on this queue
    /// (admin queue: 8192; I/O queues: IOCCSZ·16 − 64).
    pub inline_limit: u32,
    /// Default per-command timeout.
    pub command_timeout: Duration,
    /// How long to wait for the ICResp (Linux: 10 s).
    pub icresp_timeout: Duration,
    /// Largest C2HData payload accepted in one PDU, raised to the length of
    /// the longest read submitted on the connection ([`Queue::decoder_config`]).
    pub max_c2h_data: u32,
}

impl QueueConfig {
    /// Defaults for queue `qid` with `tags` slots: no digests, 8 KiB in-capsule
    /// limit, 30 s command timeout, 10 s ICResp timeout.
    pub fn new(qid: u16, tags: u16) -> Self {
        Self {
            qid,
            tags,
            hdgst: false,
            ddgst: false,
            inline_limit: ADMIN_INLINE_LIMIT,
            command_timeout: Duration::from_secs(30),
            icresp_timeout: Duration::from_secs(10),
            max_c2h_data: 64 << 20,
        }
    }
}

/// Data moved by a command.
#[derive(Clone, Debug, Default)]
pub enum DataXfer {
    /// No data.
    #[default]
    None,
    /// Host to controller: in-capsule if small enough, else by R2T/H2CData.
    Write(Bytes),
    /// Controller to host: this many bytes arrive in C2HData PDUs.
    Read(u32),
}

impl DataXfer {
    /// Bytes moved.
    pub fn len(&self) -> u32 {
        match self {
            DataXfer::None => 0,
            DataXfer::Write(b) => b.len() as u32,
            DataXfer::Read(n) => *n,
        }
    }
    /// Whether no data is moved.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A command to submit. The queue fills in the CID and the SGL descriptor.
#[derive(Clone, Debug)]
pub struct Command {
    /// The submission queue entry (CID and DPTR are overwritten).
    pub sqe: Sqe,
    /// Data transfer.
    pub data: DataXfer,
    /// Timeout overriding [`QueueConfig::command_timeout`].
    pub timeout: Option<Duration>,
}

impl Command {
    /// A command without data.
    pub fn new(sqe: Sqe) -> Self {
        Self { sqe, data: DataXfer::None, timeout: None }
    }
    /// A command with data.
    pub fn with_data(sqe: Sqe, data: DataXfer) -> Self {
        Self { sqe, data, timeout: None }
    }
}

/// Why a single command failed at the transport level (the connection survives).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandFailure {
    /// No completion before the deadline.
    #[error("command timed out")]
    Timeout,
    /// A C2HData PDU of this command failed its data digest.
    #[error("data digest error in C2HData")]
    DataDigest,
    /// The controller completed a read successfully with fewer bytes than asked.
    #[error("short data: expected {expected} bytes, received {received}")]
    ShortData {
        /// Bytes requested.
        expected: u32,
        /// Bytes received.
        received: u32,
    },
}

/// Output for the owner of a submitted command.
#[derive(Clone, Debug)]
pub enum Event {
    /// Read data for `user_data` at byte `offset` of the command's data.
    Data {
        /// Token given to [`Queue::submit`].
        user_data: u64,
        /// Offset within the command's data.
        offset: u32,
        /// The bytes (a slice of the receive buffer).
        data: Bytes,
    },
    /// The command finished. `Ok` carries the CQE whatever its NVMe status.
    Completion {
        /// Token given to [`Queue::submit`].
        user_data: u64,
        /// The CID it ran under.
        cid: u16,
        /// CQE or transport failure.
        result: Result<Cqe, CommandFailure>,
    },
}

/// Fatal errors: the connection must be closed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueueError {
    /// The byte stream could not be decoded.
    #[error("PDU decode error: {0}")]
    Decode(#[from] DecodeError),
    /// The controller terminated the connection.
    #[error("C2HTermReq received: FES {fes:#x}, FEI {fei:#x}")]
    TermReq {
        /// Fatal error status.
        fes: u16,
        /// Fatal error information.
        fei: u32,
    },
    /// A PDU that violates the protocol state (reference §3.5–3.7).
    #[error("protocol violation: {what} (CID {cid:#06x})")]
    Violation {
        /// What was wrong.
        what: &'static str,
        /// The CID concerned (0 if none).
        cid: u16,
    },
    /// No ICResp within the timeout.
    #[error("no ICResp within the timeout")]
    HandshakeTimeout,
}

/// Why [`Queue::submit`] refused a command (it is handed back).
#[derive(Debug)]
pub enum SubmitError {
    /// The ICResp has not arrived yet or the queue failed.
    NotLive(Command),
    /// Every slot is in use.
    Full(Command),
}

/// The header of a C2HData PDU, parsed before its payload has arrived.
///
/// With it the driver can ask the queue where the payload belongs
/// ([`Queue::c2h_begin`]), move the payload bytes itself (e.g. from the socket
/// straight into the command's buffer) and then report the outcome
/// ([`Queue::c2h_end`]). Validation equals that of the whole-PDU decoder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct C2hHeader {
    /// CID of the command.
    pub cccid: u16,
    /// Offset of the payload within the command's data.
    pub datao: u32,
    /// Payload length (DATAL).
    pub datal: u32,
    /// LAST_PDU flag.
    pub last: bool,
    /// SUCCESS flag (no CapsuleResp follows).
    pub success: bool,
    /// Offset of the payload from the PDU start (PDO).
    pub data_start: usize,
    /// Whether a 4-byte data digest follows the payload.
    pub ddgst: bool,
}

impl C2hHeader {
    /// Parses the header of a C2HData PDU. `layout` is what
    /// [`nvmeof_common::decoder::PduDecoder::layout`] said about its common
    /// header; `bytes` starts at the PDU and holds at least
    /// `layout.data_start` bytes (header, header digest, padding). Checks the
    /// header digest, DATAL against PLEN and SUCCESS ⇒ LAST_PDU.
    pub fn parse(layout: &FrameLayout, bytes: &[u8]) -> Result<Self, DecodeError> {
        let ch = &layout.ch;
        let ty = ch.pdu_type;
        debug_assert_eq!(ty, PduType::C2H_DATA);
        let hlen = ch.hlen as usize;
        assert!(bytes.len() >= layout.data_start && layout.data_start >= hlen, "C2HData header incomplete");
        if layout.hdgst {
            let received = le32(bytes, hlen);
            let computed = crc32c(&bytes[..hlen]);
            if received != computed {
                return Err(DecodeError::HeaderDigest { pdu_type: ty, received, computed });
            }
        }
        let datal = le32(bytes, 16);
        if datal as usize != layout.data_len {
            return Err(DecodeError::DataLengthMismatch {
                pdu_type: ty,
                datal,
                actual: layout.data_len as u32,
            });
        }
        if datal == 0 {
            return Err(DecodeError::EmptyData(ty));
        }
        let last = ch.flags.has(PduFlags::LAST_PDU);
        let success = ch.flags.has(PduFlags::SUCCESS);
        if success && !last {
            return Err(DecodeError::InvalidFlags { pdu_type: ty, flags: ch.flags.0 });
        }
        Ok(Self {
            cccid: u16::from_le_bytes([bytes[8], bytes[9]]),
            datao: le32(bytes, 12),
            datal,
            last,
            success,
            data_start: layout.data_start,
            ddgst: layout.ddgst,
        })
    }

    /// Bytes of the whole PDU (PLEN).
    pub fn plen(&self) -> usize {
        self.data_start + self.datal as usize + if self.ddgst { DIGEST_LEN } else { 0 }
    }
}

/// Longest timeout taken as given; longer ones (e.g. `Duration::MAX` for "no
/// timeout") end then instead, like tokio's far future.
const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 365 * 86400);

/// `now + timeout` without overflow: `Instant + Duration::MAX` panics, and it
/// did so in the queue's driver task, which then left its callers waiting.
fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    now + timeout.min(MAX_TIMEOUT)
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    None,
    Read,
    WriteInline,
    WriteR2t,
}

#[derive(Debug)]
struct Slot {
    gen: u8,
    active: bool,
    user_data: u64,
    sqe: Sqe,
    kind: Kind,
    len: u32,
    data: Bytes,
    /// C2H bytes received (reads) or H2C bytes requested so far (R2T writes).
    done: u32,
    digest_error: bool,
    timeout: Option<Duration>,
    deadline: Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Handshake,
    Live,
    Failed,
}

/// Negotiated connection parameters (after ICResp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Header digests on.
    pub hdgst: bool,
    /// Data digests on.
    pub ddgst: bool,
    /// Controller's MAXH2CDATA.
    pub maxh2cdata: u32,
    /// Controller's CPDA.
    pub cpda: u8,
}

/// Counters for diagnostics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Commands submitted.
    pub submitted: u64,
    /// Commands completed (any outcome).
    pub completed: u64,
    /// PDUs for CIDs not (or no longer) outstanding that were dropped.
    pub stale: u64,
    /// Commands that timed out.
    pub timeouts: u64,
}

/// The state machine of one queue connection.
#[derive(Debug)]
pub struct Queue {
    cfg: QueueConfig,
    state: State,
    handshake_deadline: Instant,
    negotiated: Option<Negotiated>,
    slots: Box<[Slot]>,
    free: Vec<u16>,
    active: usize,
    next_deadline: Option<Instant>,
    out: VecDeque<Pdu>,
    events: VecDeque<Event>,
    stats: QueueStats,
    /// Longest read submitted on this connection: its data may come in one
    /// C2HData PDU (Linux nvmet sends one per command), so the decoder must
    /// accept that much even above [`QueueConfig::max_c2h_data`].
    max_read: u32,
}

impl Queue {
    /// Starts a connection: queues the ICReq (PFV 0, HPDA 0, MAXR2T 0 like
    /// Linux, digests as configured).
    pub fn new(cfg: QueueConfig, now: Instant) -> Self {
        let tags = (cfg.tags as usize).clamp(1, MAX_TAGS);
        let slots = (0..tags)
            .map(|_| Slot {
                gen: 0,
                active: false,
                user_data: 0,
                sqe: Sqe::default(),
                kind: Kind::None,
                len: 0,
                data: Bytes::new(),
                done: 0,
                digest_error: false,
                timeout: None,
                deadline: now,
            })
            .collect();
        // LIFO free stack, lowest tag on top: recently used slots stay hot.
        let free = (0..tags as u16).rev().collect();
        let mut out = VecDeque::with_capacity(2 * tags + 4);
        out.push_back(Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            dgst: DigestFlags::new(cfg.hdgst, cfg.ddgst),
            maxr2t: 0,
        }));
        Self {
            handshake_deadline: deadline_after(now, cfg.icresp_timeout),
            cfg,
            state: State::Handshake,
            negotiated: None,
            slots,
            free,
            active: 0,
            next_deadline: None,
            out,
            events: VecDeque::with_capacity(2 * tags),
            stats: QueueStats::default(),
            max_read: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    /// Whether the ICResp was accepted and commands may be submitted.
    pub fn is_live(&self) -> bool {
        self.state == State::Live
    }

    /// Parameters negotiated by ICReq/ICResp, once live.
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.negotiated
    }

    /// Counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Commands outstanding.
    pub fn outstanding(&self) -> usize {
        self.active
    }

    /// Free command slots.
    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Decoder parameters for the current state (digests only after ICResp;
    /// the PDU data limit grows with the longest read submitted).
    pub fn decoder_config(&self) -> DecoderConfig {
        let mut c = DecoderConfig::new(Role::Host);
        c.max_data_pdu = self.cfg.max_c2h_data.max(self.max_read);
        if let Some(n) = self.negotiated {
            c.hdgst = n.hdgst;
            c.ddgst = n.ddgst;
        }
        c
    }

    /// Encoder parameters for the current state.
    pub fn encode_config(&self) -> EncodeConfig {
        match self.negotiated {
            Some(n) => EncodeConfig { hdgst: n.hdgst, ddgst: n.ddgst, pda: n.cpda },
            None => EncodeConfig::default(),
        }
    }

    /// Next PDU to send.
    pub fn poll_transmit(&mut self) -> Option<Pdu> {
        self.out.pop_front()
    }

    /// Whether PDUs are waiting to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.out.is_empty()
    }

    /// Next event for command owners.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Earliest instant at which [`Queue::handle_timeout`] has work (it may
    /// find none: deadlines of completed commands are forgotten lazily).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Handshake => Some(self.handshake_deadline),
            State::Live if self.active > 0 => self.next_deadline,
            _ => None,
        }
    }

    /// Submits a command under `user_data`; returns its CID.
    pub fn submit(&mut self, user_data: u64, cmd: Command, now: Instant) -> Result<u16, SubmitError> {
        if self.state != State::Live {
            return Err(SubmitError::NotLive(cmd));
        }
        let Some(tag) = self.free.pop() else {
            return Err(SubmitError::Full(cmd));
        };
        let Command { mut sqe, data, timeout } = cmd;
        let slot = &mut self.slots[tag as usize];
        slot.gen = (slot.gen + 1) & 0xF;
        let cid = make_cid(slot.gen, tag);
        sqe.set_cid(cid);
        let is_fabrics = sqe.opcode() == AdminOpcode::FABRICS.0;
        let limit = if self.cfg.qid == 0 || is_fabrics { ADMIN_INLINE_LIMIT } else { self.cfg.inline_limit };
        let (kind, len, bytes, capsule_data) = match data {
            DataXfer::None => (Kind::None, 0, Bytes::new(), Bytes::new()),
            DataXfer::Read(0) => (Kind::None, 0, Bytes::new(), Bytes::new()),
            DataXfer::Read(n) => {
                self.max_read = self.max_read.max(n);
                (Kind::Read, n, Bytes::new(), Bytes::new())
            }
            DataXfer::Write(b) if b.is_empty() => (Kind::None, 0, Bytes::new(), Bytes::new()),
            DataXfer::Write(b) if b.len() as u64 <= limit as u64 => {
                (Kind::WriteInline, b.len() as u32, b.clone(), b)
            }
            DataXfer::Write(b) => (Kind::WriteR2t, b.len() as u32, b, Bytes::new()),
        };
        // Reference §3.2: 0x01 for in-capsule data, 0x5A otherwise (length 0 without data).
        sqe.set_sgl(if kind == Kind::WriteInline {
            SglDescriptor::in_capsule(len)
        } else {
            SglDescriptor::transport(len)
        });
        let deadline = deadline_after(now, timeout.unwrap_or(self.cfg.command_timeout));
        *slot = Slot {
            gen: slot.gen,
            active: true,
            user_data,
            sqe,
            kind,
            len,
            data: bytes,
            done: 0,
            digest_error: false,
            timeout,
            deadline,
        };
        self.active += 1;
        self.stats.submitted += 1;
        if self.next_deadline.is_none_or(|d| deadline < d) {
            self.next_deadline = Some(deadline);
        }
        self.out.push_back(Pdu::CapsuleCmd(CapsuleCmd { sqe, data: capsule_data }));
        Ok(cid)
    }

    /// Handles one decoded PDU from the controller.
    pub fn handle_pdu(&mut self, pdu: Pdu, now: Instant) -> Result<(), QueueError> {
        let _ = now;
        let r = match (self.state, pdu) {
            (_, Pdu::C2hTermReq(t)) => Err(QueueError::TermReq { fes: t.fes.0, fei: t.fei }),
            (State::Handshake, Pdu::IcResp(r)) => {
                // Linux `nvme_tcp_init_connection`: PFV 0, CPDA 0, digests equal to the request,
                // MAXH2CDATA ≥ 4096 and dword aligned.
                let asked = DigestFlags::new(self.cfg.hdgst, self.cfg.ddgst);
                r.validate(asked, 0)?;
                self.negotiated = Some(Negotiated {
                    hdgst: r.dgst.hdgst(),
                    ddgst: r.dgst.ddgst(),
                    maxh2cdata: r.maxh2cdata,
                    cpda: r.cpda,
                });
                self.state = State::Live;
                Ok(())
            }
            (State::Handshake, _) => Err(violation("PDU before ICResp", 0)),
            (State::Live, Pdu::CapsuleResp(r)) => self.handle_resp(r),
            (State::Live, Pdu::C2hData(d)) => self.handle_c2h(d),
            (State::Live, Pdu::R2t(r)) => self.handle_r2t(r),
            (State::Live, _) => Err(violation("unexpected PDU type", 0)),
            (State::Failed, _) => Err(violation("PDU after failure", 0)),
        };
        if r.is_err() {
            self.state = State::Failed;
        }
        r
    }

    /// Handles a C2HData PDU whose data digest did not match (the decoder
    /// consumed it): the command fails with [`CommandFailure::DataDigest`]
    /// when it completes; the connection stays (Linux host behaviour,
    /// reference §1.6). `datal` and `success` come from the PDU header.
    pub fn handle_data_digest_error(
        &mut self,
        cccid: u16,
        datal: u32,
        success: bool,
    ) -> Result<(), QueueError> {
        let Some(tag) = self.lookup(cccid) else {
            self.stats.stale += 1;
            tracing::warn!(cid = cccid, "data digest error on a stale CID");
            return Ok(());
        };
        let slot = &mut self.slots[tag];
        if slot.kind != Kind::Read {
            self.state = State::Failed;
            return Err(violation("C2HData for a command without read data", cccid));
        }
        slot.digest_error = true;
        slot.done = slot.done.saturating_add(datal);
        if success {
            self.complete(tag, Err(CommandFailure::DataDigest));
        }
        Ok(())
    }

    /// The `user_data` of the outstanding command with CID `cid`, if any.
    pub fn user_data_of(&self, cid: u16) -> Option<u64> {
        self.lookup(cid).map(|tag| self.slots[tag].user_data)
    }

    /// First half of a C2HData PDU handled in two steps: checks the header
    /// against the command (a read, in-order DATAO, inside its length) and
    /// returns the command's `user_data` and the byte offset of the payload
    /// within its data. `Ok(None)`: the CID is not outstanding (the payload
    /// must be discarded). Nothing changes until [`Queue::c2h_end`].
    pub fn c2h_begin(&mut self, h: &C2hHeader) -> Result<Option<(u64, u32)>, QueueError> {
        if self.state != State::Live {
            self.state = State::Failed;
            return Err(violation("C2HData before ICResp", h.cccid));
        }
        let Some(tag) = self.check_c2h(h)? else { return Ok(None) };
        Ok(Some((self.slots[tag].user_data, h.datao)))
    }

    /// Second half: the payload of `h` was consumed (moved to the command's
    /// destination or discarded); `digest_ok` is false when its data digest
    /// did not match. Accounts the data and completes the command if the PDU
    /// carried SUCCESS. No [`Event::Data`] is produced.
    pub fn c2h_end(&mut self, h: &C2hHeader, digest_ok: bool) -> Result<(), QueueError> {
        let Some(tag) = self.check_c2h(h)? else { return Ok(()) };
        if !digest_ok {
            tracing::warn!(qid = self.cfg.qid, cid = h.cccid, "C2HData data digest mismatch");
            self.slots[tag].digest_error = true;
        }
        self.slots[tag].done += h.datal;
        if h.success {
            self.complete_success(tag, h.cccid);
        }
        Ok(())
    }

    /// Common C2HData checks: `Ok(None)` for a stale CID (counted), the slot
    /// otherwise; a violation fails the queue.
    fn check_c2h(&mut self, h: &C2hHeader) -> Result<Option<usize>, QueueError> {
        let Some(tag) = self.lookup(h.cccid) else {
            self.stats.stale += 1;
            tracing::warn!(
                qid = self.cfg.qid,
                cid = h.cccid,
                "C2HData for a CID that is not outstanding; dropped"
            );
            return Ok(None);
        };
        let s = &self.slots[tag];
        // Data must arrive in order and inside the command (reference §3.6; FES 04h).
        let err = if s.kind != Kind::Read {
            Some("C2HData for a command without read data")
        } else if h.datao != s.done {
            Some("C2HData DATAO is not the next expected offset")
        } else if h.datao as u64 + h.datal as u64 > s.len as u64 {
            Some("C2HData beyond the command's data length")
        } else {
            None
        };
        if let Some(what) = err {
            self.state = State::Failed;
            return Err(violation(what, h.cccid));
        }
        Ok(Some(tag))
    }

    /// Completes a read whose last C2HData carried SUCCESS (reference §3.6):
    /// status 0 unless a digest error or short data was seen.
    fn complete_success(&mut self, tag: usize, cid: u16) {
        let s = &self.slots[tag];
        let result = if s.digest_error {
            Err(CommandFailure::DataDigest)
        } else if s.done != s.len {
            Err(CommandFailure::ShortData { expected: s.len, received: s.done })
        } else {
            Ok(Cqe { result: 0, sqhd: 0, sqid: self.cfg.qid, cid, status: Status::SUCCESS })
        };
        self.complete(tag, result);
    }

    /// Expires commands (and the handshake) whose deadline passed. Returns the
    /// timeout of the first command that expired, if any: the caller resets the
    /// connection then, as Linux does (`nvme_tcp_timeout` starts error
    /// recovery), so a late completion or R2T can never act on a command its
    /// submitter was told had failed.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<Option<Duration>, QueueError> {
        match self.state {
            State::Handshake if now >= self.handshake_deadline => {
                self.state = State::Failed;
                return Err(QueueError::HandshakeTimeout);
            }
            State::Live => {}
            _ => return Ok(None),
        }
        match self.next_deadline {
            Some(d) if now >= d && self.active > 0 => {}
            _ => return Ok(None),
        }
        let mut expired = None;
        let mut next: Option<Instant> = None;
        for tag in 0..self.slots.len() {
            let s = &self.slots[tag];
            if !s.active {
                continue;
            }
            if s.deadline <= now {
                tracing::warn!(
                    qid = self.cfg.qid,
                    cid = make_cid(s.gen, tag as u16),
                    opcode = s.sqe.opcode(),
                    "command timed out"
                );
                self.stats.timeouts += 1;
                expired.get_or_insert(s.timeout.unwrap_or(self.cfg.command_timeout));
                self.complete(tag, Err(CommandFailure::Timeout));
            } else if next.is_none_or(|n| s.deadline < n) {
                next = Some(s.deadline);
            }
        }
        self.next_deadline = next;
        Ok(expired)
    }

    /// Takes back every outstanding command (connection lost), with the CID
    /// and SGL left as the queue set them; the caller resubmits or fails them.
    /// Commands come back in submission order (by deadline, then tag).
    pub fn drain_outstanding(&mut self) -> Vec<(u64, Command)> {
        let mut v: Vec<(Instant, usize)> =
            self.slots.iter().enumerate().filter(|(_, s)| s.active).map(|(i, s)| (s.deadline, i)).collect();
        v.sort();
        let mut cmds = Vec::with_capacity(v.len());
        for (_, tag) in v {
            let s = &mut self.slots[tag];
            s.active = false;
            let data = match s.kind {
                Kind::None => DataXfer::None,
                Kind::Read => DataXfer::Read(s.len),
                Kind::WriteInline | Kind::WriteR2t => DataXfer::Write(std::mem::take(&mut s.data)),
            };
            cmds.push((s.user_data, Command { sqe: s.sqe, data, timeout: s.timeout }));
            self.free.push(tag as u16);
        }
        self.active = 0;
        self.next_deadline = None;
        self.out.clear();
        self.state = State::Failed;
        cmds
    }

    fn lookup(&self, cid: u16) -> Option<usize> {
        let tag = cid_tag(cid) as usize;
        let s = self.slots.get(tag)?;
        (s.active && s.gen == cid_gen(cid)).then_some(tag)
    }

    fn complete(&mut self, tag: usize, result: Result<Cqe, CommandFailure>) {
        let s = &mut self.slots[tag];
        debug_assert!(s.active);
        s.active = false;
        s.data = Bytes::new();
        self.active -= 1;
        self.stats.completed += 1;
        let cid = make_cid(s.gen, tag as u16);
        self.events.push_back(Event::Completion { user_data: s.user_data, cid, result });
        self.free.push(tag as u16);
    }

    fn handle_resp(&mut self, r: CapsuleResp) -> Result<(), QueueError> {
        let cid = r.cqe.cid;
        let Some(tag) = self.lookup(cid) else {
            // A completion for a CID we no longer track (timed out, or a stray
            // response after a SUCCESS C2HData). Linux resets the queue; we drop it.
            self.stats.stale += 1;
            tracing::warn!(qid = self.cfg.qid, cid, "CapsuleResp for a CID that is not outstanding; dropped");
            return Ok(());
        };
        let s = &self.slots[tag];
        let result = if s.digest_error {
            Err(CommandFailure::DataDigest)
        } else if s.kind == Kind::Read && r.cqe.status.is_success() && s.done != s.len {
            // Linux flags short data-in on a successful read as an error.
            Err(CommandFailure::ShortData { expected: s.len, received: s.done })
        } else {
            Ok(r.cqe)
        };
        self.complete(tag, result);
        Ok(())
    }

    fn handle_c2h(&mut self, d: C2hData) -> Result<(), QueueError> {
        let h = C2hHeader {
            cccid: d.cccid,
            datao: d.datao,
            datal: d.data.len() as u32,
            last: d.last,
            success: d.success,
            data_start: 0,
            ddgst: false,
        };
        let Some(tag) = self.check_c2h(&h)? else { return Ok(()) };
        let s = &mut self.slots[tag];
        s.done += h.datal;
        let user_data = s.user_data;
        self.events.push_back(Event::Data { user_data, offset: d.datao, data: d.data });
        if d.success {
            // SUCCESS (only with LAST_PDU, checked by the decoder): completed with status 0, no
            // CapsuleResp follows (reference §3.6).
            self.complete_success(tag, d.cccid);
        }
        Ok(())
    }

    fn handle_r2t(&mut self, r: R2t) -> Result<(), QueueError> {
        let tag = cid_tag(r.cccid) as usize;
        if tag >= self.slots.len() {
            return Err(violation("R2T for an unknown CID", r.cccid));
        }
        let Some(tag) = self.lookup(r.cccid) else {
            self.stats.stale += 1;
            tracing::warn!(
                qid = self.cfg.qid,
                cid = r.cccid,
                "R2T for a CID that is not outstanding; dropped"
            );
            return Ok(());
        };
        let maxh2c = self.negotiated.map_or(4096, |n| n.maxh2cdata).max(4096);
        let s = &mut self.slots[tag];
        // Linux `nvme_tcp_handle_r2t`: a write waiting for R2T, R2TL ≠ 0,
        // R2TO ≥ data already requested, R2TO + R2TL ≤ length.
        if s.kind != Kind::WriteR2t {
            return Err(violation("R2T for a command that expects no R2T", r.cccid));
        }
        if r.r2tl == 0 {
            return Err(violation("R2T with R2TL 0", r.cccid));
        }
        if r.r2to < s.done || r.r2to as u64 + r.r2tl as u64 > s.len as u64 {
            return Err(violation("R2T window outside the command's data", r.cccid));
        }
        let end = r.r2to + r.r2tl;
        let mut off = r.r2to;
        while off < end {
            let n = (end - off).min(maxh2c);
            self.out.push_back(Pdu::H2cData(H2cData {
                cccid: r.cccid,
                ttag: r.ttag,
                datao: off,
                data: s.data.slice(off as usize..(off + n) as usize),
                last: off + n == end,
            }));
            off += n;
        }
        s.done = end;
        Ok(())
    }
}

fn violation(what: &'static str, cid: u16) -> QueueError {
    QueueError::Violation { what, cid }
}

/// Fatal Error Status matching a [`QueueError`] (for logging or an H2CTermReq).
pub fn fes_of(e: &QueueError) -> Fes {
    match e {
        QueueError::Decode(d) => d.fes(),
        QueueError::Violation { .. } => Fes::PDU_SEQUENCE,
        _ => Fes::INVALID_HEADER_FIELD,
    }
}

#[cfg(test)]
mod tests;
