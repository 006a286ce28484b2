//! Per-connection queue state machine (sans-IO), shaped like SPDK's request
//! states: new → (need data: R2T/H2CData) → executing → transferring C2H data
//! → completed. The TCP driver feeds it received bytes and backend
//! completions and writes out what it queued; it never touches a socket.
//!
//! Command slots are preallocated per queue; the R2T transfer tag is the slot
//! index, so an H2CData finds its command in O(1).

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use nvmeof_common::decoder::{DecoderConfig, PduDecoder, Role};
use nvmeof_common::error::{DecodeError, Fes};
use nvmeof_common::opcode::{FabricsType, IoOpcode};
use nvmeof_common::out::OutQueue;
use nvmeof_common::pdu::{
    C2hData, CapsuleCmd, CapsuleResp, DigestFlags, EncodeConfig, H2cData, IcReq, IcResp, Pdu, R2t, TermReq,
    CH_LEN,
};
use nvmeof_common::sqe::{SglId, FUSE_FIRST, FUSE_SECOND};
use nvmeof_common::{Cqe, Sqe, Status};
use tracing::{debug, warn};

use crate::backend::IoCompletion;
use crate::cmd::fused::CompareWriteExec;
use crate::cmd::{self, Exec, Pending, QueueCtx, Response};
use crate::core::inflight::InflightGuard;

/// Command slots before Connect (admin queue depth).
const INITIAL_SLOTS: usize = 32;

#[derive(Debug)]
enum SlotState {
    Free,
    /// Waiting for H2CData: `received` of `expected` bytes so far.
    AwaitData {
        expected: u32,
        received: u32,
    },
    /// Handed to a backend or waiting for an event (AER).
    Executing(Pending),
    /// Half of a fused operation with its data in, waiting for the other
    /// half's (the data is taken when the pair starts; the slot then waits
    /// for the pair to complete, which the other slot drives).
    Parked(Bytes),
}

/// A command's part in a fused operation (NVMe Base 2.0 §3.4.2).
#[derive(Clone, Copy, Debug, Default)]
struct FusedLink {
    /// The first command (a Compare), else the second (a Write).
    first: bool,
    /// The other command's slot, once paired.
    partner: Option<u16>,
    /// The pair broke while this command's data was arriving: it completes
    /// with this status once the data is in, instead of running.
    abort: Option<Status>,
}

/// Where the queue is in pairing fused commands, which go by arrival order
/// (SPDK `nvmf_tcp_check_fused_ordering`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FusedFirst {
    /// No first command waits for its second.
    None,
    /// The first command in this slot waits for the next command to be its second.
    Waiting(u16),
    /// The last command was a first command refused before it could run:
    /// a second right after it is aborted with Failed Fused Command.
    Failed,
}

struct Slot {
    state: SlotState,
    sqe: Sqe,
    /// Assembles write data arriving in several H2CData PDUs.
    buf: BytesMut,
    /// A single H2CData PDU carrying all the data is kept as is (zero copy).
    whole: Option<Bytes>,
    /// The command counts as in flight on a namespace with reservations
    /// (from its parse step until its slot is freed).
    inflight: Option<InflightGuard>,
    /// Half of a fused operation.
    fused: Option<FusedLink>,
}

/// Connection phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for ICReq.
    AwaitIcReq,
    /// Exchanging capsules.
    Live,
    /// Closing: send what is queued (maybe a C2HTermReq), then close.
    Closing,
}

/// One NVMe/TCP queue (one TCP connection).
pub struct QueueState {
    /// Queue context shared with command handlers.
    pub ctx: QueueCtx,
    phase: Phase,
    decoder: PduDecoder,
    enc: EncodeConfig,
    slots: Vec<Slot>,
    free: Vec<u16>,
    sqhd: u16,
    draining: bool,
    /// Bytes ever queued in `out` (what was sent is this less `out.len()`).
    pushed: u64,
    /// For each completed command whose response may still be unsent, the
    /// value of `pushed` once its response was queued.
    unsent: VecDeque<u64>,
    /// Encoded PDUs waiting for the socket.
    pub out: OutQueue,
    /// Fused commands being paired.
    fused_first: FusedFirst,
}

impl QueueState {
    /// A fresh queue awaiting ICReq.
    pub fn new(ctx: QueueCtx) -> Self {
        let limits = &ctx.target.limits;
        let dec = DecoderConfig {
            max_capsule_data: ctx.params.in_capsule_data(limits).max(limits.admin_in_capsule_data),
            max_data_pdu: limits.max_h2c_data,
            ..DecoderConfig::new(Role::Controller)
        };
        let mut q = Self {
            ctx,
            phase: Phase::AwaitIcReq,
            decoder: PduDecoder::new(dec),
            enc: EncodeConfig::default(),
            slots: Vec::new(),
            free: Vec::new(),
            sqhd: 0,
            draining: false,
            pushed: 0,
            unsent: VecDeque::new(),
            out: OutQueue::default(),
            fused_first: FusedFirst::None,
        };
        q.grow_slots(INITIAL_SLOTS);
        q
    }

    /// Current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Commands in flight (slots in use).
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether a command waits for H2CData (the socket must still be read).
    pub fn awaiting_data(&self) -> bool {
        self.slots.iter().any(|s| matches!(s.state, SlotState::AwaitData { .. }))
    }

    /// Graceful shutdown: commands that arrive from now on are not executed
    /// (the host requeues them after the connection closes); those in flight
    /// complete normally.
    pub fn set_draining(&mut self) {
        self.draining = true;
        // A first fused command would wait for a second that is not run.
        if let FusedFirst::Waiting(first) = std::mem::replace(&mut self.fused_first, FusedFirst::None) {
            self.abort_fused(first, Status::ABORTED_MISSING_FUSED.with_dnr());
        }
    }

    /// Commands in flight that will complete on their own, i.e. not counting
    /// Asynchronous Event Requests, which wait for an event indefinitely.
    pub fn in_flight_io(&self) -> usize {
        let admin = self.ctx.is_admin();
        self.slots
            .iter()
            .filter(|s| !matches!(s.state, SlotState::Free))
            .filter(|s| !(admin && s.sqe.opcode() == nvmeof_common::opcode::AdminOpcode::ASYNC_EVENT.0))
            .count()
    }

    /// Whether a command counted in flight for Preempt and Abort (an I/O
    /// command of a namespace with reservations) is executing.
    pub fn executing_counted(&self) -> bool {
        self.slots.iter().any(|s| s.inflight.is_some() && matches!(s.state, SlotState::Executing(_)))
    }

    fn grow_slots(&mut self, n: usize) {
        while self.slots.len() < n {
            self.free.push(self.slots.len() as u16);
            self.slots.push(Slot {
                state: SlotState::Free,
                sqe: Sqe::default(),
                buf: BytesMut::new(),
                whole: None,
                inflight: None,
                fused: None,
            });
        }
        // Lowest tags first, so small queues touch few slots.
        self.free.sort_unstable_by(|a, b| b.cmp(a));
    }

    /// Queues `pdu` for the socket.
    fn push(&mut self, pdu: &Pdu, cfg: &EncodeConfig) {
        self.push_with_data_crc(pdu, cfg, None);
    }

    /// [`Self::push`] with the data's CRC32C when known ([`Response::data_crc`]).
    fn push_with_data_crc(&mut self, pdu: &Pdu, cfg: &EncodeConfig, data_crc: Option<u32>) {
        let before = self.out.len();
        self.out.push_with_data_crc(pdu, cfg, data_crc);
        self.pushed += (self.out.len() - before) as u64;
    }

    /// Completed commands whose responses have not all reached the socket.
    fn unsent_responses(&mut self) -> usize {
        let sent = self.pushed - self.out.len() as u64;
        while self.unsent.front().is_some_and(|&end| end <= sent) {
            self.unsent.pop_front();
        }
        self.unsent.len()
    }

    fn terminate(&mut self, err: &DecodeError, offending: &[u8]) {
        warn!(error = %err, fes = err.fes().0, fei = err.fei(), "protocol error: sending C2HTermReq and closing the queue");
        self.terminate_with(TermReq::for_error(err, offending));
    }

    fn terminate_with(&mut self, t: TermReq) {
        if self.phase != Phase::Closing {
            // TermReq never carries digests (reference §2.3).
            self.push(&Pdu::C2hTermReq(t), &EncodeConfig::default());
            self.phase = Phase::Closing;
        }
    }

    /// Consumes whole PDUs from the receive buffer.
    pub fn handle_bytes(&mut self, rx: &mut BytesMut) {
        self.handle_pdus(rx, usize::MAX);
    }

    /// [`Self::handle_bytes`], stopping after `max` PDUs; returns true when
    /// it stopped there with the header of another PDU waiting in `rx`.
    pub fn handle_pdus(&mut self, rx: &mut BytesMut, max: usize) -> bool {
        let mut handled = 0;
        while self.phase != Phase::Closing {
            let head: [u8; CH_LEN] = match rx.get(..CH_LEN) {
                Some(h) => h.try_into().unwrap(),
                None => return false,
            };
            if handled == max {
                return true;
            }
            handled += 1;
            match self.decoder.decode(rx) {
                Ok(Some(pdu)) => self.handle_pdu(pdu),
                Ok(None) => return false,
                Err(e) => {
                    let hlen = (head[2] as usize).clamp(CH_LEN, rx.len().max(CH_LEN));
                    let offending =
                        if e.is_fatal() { rx.get(..hlen).unwrap_or(&head).to_vec() } else { head.to_vec() };
                    // The Linux target treats an H2C data digest error as fatal too.
                    self.terminate(&e, &offending);
                }
            }
        }
        false
    }

    fn handle_pdu(&mut self, pdu: Pdu) {
        match (self.phase, pdu) {
            // Whatever the phase, even before ICReq: the receiver of a TermReq
            // sends nothing more and closes (nvmet_tcp_try_recv_pdu closes on it
            // without a word, as it does on any type it does not accept); it was
            // answered with a C2HTermReq (PDU Sequence Error) before ICReq.
            (_, Pdu::H2cTermReq(t)) => {
                warn!(fes = t.fes.0, fei = t.fei, "host terminated the connection");
                self.phase = Phase::Closing;
            }
            (Phase::AwaitIcReq, Pdu::IcReq(r)) => self.handle_icreq(r),
            (Phase::AwaitIcReq, _) | (Phase::Live, Pdu::IcReq(_)) => {
                warn!("PDU out of sequence");
                self.terminate_with(TermReq { fes: Fes::PDU_SEQUENCE, fei: 0, data: Bytes::new() });
            }
            (Phase::Live, Pdu::CapsuleCmd(c)) => self.handle_capsule(c),
            (Phase::Live, Pdu::H2cData(d)) => self.handle_h2c_data(d),
            (_, other) => {
                // The decoder admits only H2C types; anything else is a bug.
                warn!(pdu_type = ?other.pdu_type(), "unexpected PDU");
                self.phase = Phase::Closing;
            }
        }
    }

    fn handle_icreq(&mut self, r: IcReq) {
        // Only HPDA 0 is supported, like the Linux target (nvmet_tcp_handle_icreq).
        if let Err(e) = r.validate(0) {
            let mut hdr = Pdu::IcReq(r).encode_to_vec(&EncodeConfig::default());
            hdr.truncate(128);
            self.terminate(&e, &hdr);
            return;
        }
        let limits = &self.ctx.target.limits;
        let resp = IcResp { pfv: 0, cpda: 0, dgst: DigestFlags(r.dgst.0), maxh2cdata: limits.max_h2c_data };
        self.push(&Pdu::IcResp(resp), &EncodeConfig::default());
        let hd = r.dgst.hdgst();
        let dd = r.dgst.ddgst();
        self.enc = EncodeConfig { hdgst: hd, ddgst: dd, pda: r.hpda };
        self.ctx.data_digest = dd;
        let mut cfg = *self.decoder.config();
        cfg.hdgst = hd;
        cfg.ddgst = dd;
        self.decoder.set_config(cfg);
        self.phase = Phase::Live;
        debug!(hdgst = hd, ddgst = dd, maxr2t = r.maxr2t, "ICReq accepted");
    }

    fn in_capsule_limit(&self, sqe: &Sqe) -> u32 {
        // The port's size (nvmet-tcp: `req.port->inline_data_size`).
        let l = &self.ctx.target.limits;
        let ic = self.ctx.params.in_capsule_data(l);
        if self.ctx.qid.is_none_or(|q| q == 0) || sqe.opcode() == 0x7F {
            l.admin_in_capsule_data.max(ic)
        } else {
            ic
        }
    }

    fn handle_capsule(&mut self, c: CapsuleCmd) {
        if let Some(ctrl) = &self.ctx.ctrl {
            // TBKAS: any command restarts the keep-alive timer.
            ctrl.touch();
        }
        // A command holds its slot until its response is on the socket, as in
        // nvmet (nvmet_tcp_put_cmd runs once the response is sent, and a
        // command finding no free one is fatal in nvmet_tcp_done_recv_pdu):
        // a host that sends commands but never reads its socket otherwise had
        // their responses buffered here without limit.
        let unsent = self.unsent_responses();
        let Some(tag) = (self.free.len() > unsent).then(|| self.free.pop()).flatten() else {
            warn!(
                limit = self.slots.len(),
                in_flight = self.in_flight(),
                unsent_responses = unsent,
                "host exceeded the queue depth (commands whose responses it has not read count); closing the queue"
            );
            self.terminate_with(TermReq { fes: Fes::PDU_SEQUENCE, fei: 0, data: Bytes::new() });
            return;
        };
        let sqe = c.sqe;
        {
            let slot = &mut self.slots[tag as usize];
            slot.sqe = sqe;
        }
        let sgl = sqe.sgl();
        let write = cmd::is_write(&sqe);
        let fuse = sqe.fuse();
        let io_queue = self.ctx.qid.is_some_and(|q| q > 0) && sqe.opcode() != 0x7F;
        let flags = if sqe.psdt() != 1 || fuse == 3 || (fuse != 0 && !io_queue) {
            // nvmet_req_init: PRPs are not supported. FUSE 11b is reserved,
            // and the one fused operation, Compare and Write, is made of
            // I/O commands.
            Err(Status::INVALID_FIELD.with_dnr())
        } else {
            Ok(())
        };
        let data = if sgl.id == SglId::DATA_BLOCK_OFFSET && sgl.length != 0 {
            // In-capsule data (nvmet_tcp_map_data; like it, a zero length is
            // no data whatever the descriptor type, so a Flush sent with an
            // empty in-capsule descriptor runs).
            if !write {
                Err(Status::INVALID_FIELD.with_dnr())
            } else if sgl.length > self.in_capsule_limit(&sqe) || sgl.addr != 0 {
                warn!(
                    len = sgl.length,
                    limit = self.in_capsule_limit(&sqe),
                    "in-capsule data beyond the limit"
                );
                Err(Status::SGL_INVALID_OFFSET.with_dnr())
            } else if sgl.length as usize != c.data.len() {
                Err(Status::SGL_INVALID_DATA.with_dnr())
            } else {
                Ok(())
            }
        } else if !c.data.is_empty() {
            Err(Status::SGL_INVALID_DATA.with_dnr())
        } else {
            Ok(())
        };
        if self.draining {
            // Shutting down: leave new commands unanswered; the connection closes
            // once in-flight ones finish and the host requeues them on its next
            // association (nvmet shuts the socket the same way).
            debug!(cid = sqe.cid(), "command arrived while draining; left for the host to requeue");
            self.free.push(tag);
            return;
        }
        // Flags, then the fused pairing (SPDK pairs fused commands as they
        // arrive), then parse, then the data descriptor, so a command for an
        // inactive namespace gets Invalid Namespace whatever its data
        // (nvmet_req_init checks the flags and parses before
        // nvmet_tcp_map_data looks at the SGL).
        let fused = if fuse == 0 && self.fused_first == FusedFirst::None {
            // The I/O path: nothing to pair.
            Ok(())
        } else {
            self.pair_fused(tag, &sqe, if flags.is_ok() { fuse } else { 0 })
        };
        let status = flags.and(fused).and_then(|()| cmd::parse(&self.ctx, &sqe)).and(data).and_then(|()| {
            let max = self.ctx.target.limits.max_transfer();
            // MDTS bounds every command's data, Dataset Management's too: its
            // ranges fit in 4 KiB, and a larger SGL would otherwise be solicited
            // by R2T and buffered in full.
            if sgl.length > max {
                warn!(len = sgl.length, max, "transfer larger than MDTS");
                return Err(Status::INVALID_FIELD.with_dnr());
            }
            Ok(())
        });
        // Dropped with a refused command, kept with an accepted one.
        let inflight = self.ctx.inflight.take();
        if let Err(s) = status {
            self.fused_refused(tag);
            self.finish(tag, Response::status(s));
            return;
        }
        self.slots[tag as usize].inflight = inflight;
        if write && sgl.id != SglId::DATA_BLOCK_OFFSET && sgl.length > 0 {
            // Solicit the data: one R2T for all of it (like nvmet; MAXR2T is 1 for Linux hosts).
            let slot = &mut self.slots[tag as usize];
            slot.state = SlotState::AwaitData { expected: sgl.length, received: 0 };
            slot.whole = None;
            slot.buf.clear();
            let r2t = R2t { cccid: sqe.cid(), ttag: tag, r2to: 0, r2tl: sgl.length };
            let enc = self.enc;
            self.push(&Pdu::R2t(r2t), &enc);
            return;
        }
        self.run(tag, c.data);
    }

    fn handle_h2c_data(&mut self, d: H2cData) {
        let tag = d.ttag as usize;
        let Some(slot) = self.slots.get_mut(tag) else {
            warn!(ttag = d.ttag, "H2CData with unknown transfer tag");
            let e = TermReq { fes: Fes::INVALID_HEADER_FIELD, fei: 10, data: Bytes::new() };
            self.terminate_with(e);
            return;
        };
        let SlotState::AwaitData { expected, received } = slot.state else {
            warn!(ttag = d.ttag, "unsolicited H2CData");
            self.terminate_with(TermReq { fes: Fes::PDU_SEQUENCE, fei: 0, data: Bytes::new() });
            return;
        };
        if slot.sqe.cid() != d.cccid {
            warn!(ttag = d.ttag, cccid = d.cccid, "H2CData CCCID does not match its R2T");
            self.terminate_with(TermReq { fes: Fes::PDU_SEQUENCE, fei: 0, data: Bytes::new() });
            return;
        }
        let len = d.data.len() as u32;
        if d.datao != received || received as u64 + len as u64 > expected as u64 {
            warn!(datao = d.datao, datal = len, received, expected, "H2CData outside the R2T window");
            self.terminate_with(TermReq { fes: Fes::DATA_OUT_OF_RANGE, fei: 0, data: Bytes::new() });
            return;
        }
        let received = received + len;
        if received == expected && d.datao == 0 {
            slot.whole = Some(d.data);
        } else {
            if slot.buf.capacity() < expected as usize {
                slot.buf.reserve(expected as usize - slot.buf.len());
            }
            slot.buf.extend_from_slice(&d.data);
        }
        slot.state = SlotState::AwaitData { expected, received };
        if received == expected {
            let data = match slot.whole.take() {
                Some(w) => w,
                None => slot.buf.split().freeze(),
            };
            self.run(tag as u16, data);
        }
    }

    /// Pairs fused commands by arrival order (SPDK
    /// `nvmf_tcp_check_fused_ordering`, with the statuses of its
    /// `nvmf_ctrlr_process_io_fused_cmd`): a first command (FUSE 01b) must be
    /// a Compare, and the command right after it a Write that is its second
    /// (FUSE 10b). A first followed by anything else is aborted with Missing
    /// Fused Command; a second that is no Write is Invalid Opcode (and its
    /// first aborted), one without a first Missing Fused Command, or Failed
    /// Fused Command where the first was refused. Returns the status that
    /// refuses command `tag` (with `fuse`, 0 where its flags are invalid).
    #[cold]
    fn pair_fused(&mut self, tag: u16, sqe: &Sqe, fuse: u8) -> Result<(), Status> {
        let prev = std::mem::replace(&mut self.fused_first, FusedFirst::None);
        let op = IoOpcode(sqe.opcode());
        if let FusedFirst::Waiting(first) = prev {
            if fuse == FUSE_SECOND && op == IoOpcode::WRITE {
                if let Some(l) = self.slots[first as usize].fused.as_mut() {
                    l.partner = Some(tag);
                }
                self.slots[tag as usize].fused =
                    Some(FusedLink { first: false, partner: Some(first), abort: None });
                return Ok(());
            }
            warn!(
                first_cid = self.slots[first as usize].sqe.cid(),
                cid = sqe.cid(),
                opcode = sqe.opcode(),
                fuse,
                "fused Compare not followed by its Write: aborted"
            );
            self.abort_fused(first, Status::ABORTED_MISSING_FUSED.with_dnr());
            if fuse == FUSE_SECOND {
                return Err(Status::INVALID_OPCODE.with_dnr());
            }
        } else if fuse == FUSE_SECOND {
            warn!(cid = sqe.cid(), "second fused command without its first");
            return Err(if prev == FusedFirst::Failed {
                Status::ABORTED_FAILED_FUSED.with_dnr()
            } else {
                Status::ABORTED_MISSING_FUSED.with_dnr()
            });
        }
        if fuse == FUSE_FIRST {
            if op != IoOpcode::COMPARE {
                warn!(cid = sqe.cid(), opcode = sqe.opcode(), "first fused command is not a Compare");
                self.fused_first = FusedFirst::Failed;
                return Err(Status::INVALID_OPCODE.with_dnr());
            }
            self.slots[tag as usize].fused = Some(FusedLink { first: true, partner: None, abort: None });
            self.fused_first = FusedFirst::Waiting(tag);
        }
        Ok(())
    }

    /// Command `tag`, half of a fused operation, was refused before it
    /// could run: the other half is aborted with Failed Fused Command (its
    /// second, if it comes, where it is the first).
    fn fused_refused(&mut self, tag: u16) {
        let Some(link) = self.slots[tag as usize].fused.take() else { return };
        if link.first {
            self.fused_first = FusedFirst::Failed;
        } else if let Some(first) = link.partner {
            self.abort_fused(first, Status::ABORTED_FAILED_FUSED.with_dnr());
        }
    }

    /// Completes fused command `tag` with `status` without running it: now
    /// if its data is in, else once it is.
    fn abort_fused(&mut self, tag: u16, status: Status) {
        let slot = &mut self.slots[tag as usize];
        match slot.state {
            SlotState::Parked(_) => self.finish(tag, Response::status(status)),
            SlotState::AwaitData { .. } => {
                if let Some(l) = slot.fused.as_mut() {
                    l.abort = Some(status);
                }
            }
            _ => {}
        }
    }

    /// Half of a fused operation has its data: it waits for the other
    /// half's, or the pair starts.
    fn run_fused(&mut self, tag: u16, link: FusedLink, data: Bytes) {
        if let Some(status) = link.abort {
            self.finish(tag, Response::status(status));
            return;
        }
        let ready = link.partner.filter(|&p| matches!(self.slots[p as usize].state, SlotState::Parked(_)));
        let Some(partner) = ready else {
            self.slots[tag as usize].state = SlotState::Parked(data);
            return;
        };
        // The first waits (Parked, empty) for the pair, which the second's slot drives.
        let other =
            match std::mem::replace(&mut self.slots[partner as usize].state, SlotState::Parked(Bytes::new()))
            {
                SlotState::Parked(d) => d,
                _ => Bytes::new(),
            };
        self.slots[tag as usize].state = SlotState::Parked(Bytes::new());
        let (first, second, compare, write) =
            if link.first { (tag, partner, data, other) } else { (partner, tag, other, data) };
        let (csqe, wsqe) = (self.slots[first as usize].sqe, self.slots[second as usize].sqe);
        let r = cmd::fused::start(&self.ctx, (&csqe, compare), (&wsqe, write), second as u32);
        self.fused_step_done(first, second, r);
    }

    /// Keeps a pair's job in its second's slot, or completes both (the first first, as SPDK).
    fn fused_step_done(&mut self, first: u16, second: u16, r: CompareWriteExec) {
        match r {
            CompareWriteExec::Pending(job) => {
                self.slots[second as usize].state = SlotState::Executing(Pending::CompareWrite(job));
            }
            CompareWriteExec::Done { compare, write } => {
                self.finish(first, Response::status(compare));
                self.finish(second, Response::status(write));
            }
        }
    }

    fn run(&mut self, tag: u16, data: Bytes) {
        let sqe = self.slots[tag as usize].sqe;
        if let Some(link) = self.slots[tag as usize].fused {
            self.run_fused(tag, link, data);
        } else {
            match cmd::execute(&mut self.ctx, &sqe, data, tag as u32) {
                Exec::Done(r) => self.finish(tag, r),
                Exec::Pending(p) => self.slots[tag as usize].state = SlotState::Executing(p),
            }
        }
        if self.ctx.qid.is_some() {
            let want = (self.ctx.sqsize as usize + 1).max(INITIAL_SLOTS);
            if self.slots.len() < want {
                self.grow_slots(want);
            }
        }
    }

    /// Delivers an asynchronous completion (backend or AER).
    pub fn handle_completion(&mut self, c: IoCompletion) {
        let tag = c.tag as u16;
        let Some(slot) = self.slots.get_mut(tag as usize) else { return };
        let SlotState::Executing(p) = std::mem::replace(&mut slot.state, SlotState::Free) else {
            slot.state = SlotState::Free;
            debug!(tag, "completion for an idle slot ignored");
            return;
        };
        if self.phase == Phase::Closing {
            // After a C2HTermReq (or H2CTermReq, or Disconnect) nothing more goes
            // out: the driver may still hold the TermReq when a backend completes.
            debug!(tag, "completion on a closing queue dropped");
            slot.inflight = None;
            slot.fused = None;
            self.free.push(tag);
            return;
        }
        let r = match p {
            Pending::Throttled(data) => {
                let sqe = slot.sqe;
                match cmd::execute_throttled(&mut self.ctx, &sqe, data, c.tag) {
                    Exec::Done(r) => r,
                    Exec::Pending(p) => {
                        self.slots[tag as usize].state = SlotState::Executing(p);
                        return;
                    }
                }
            }
            Pending::CompareWrite(job) => {
                let first = slot.fused.and_then(|l| l.partner);
                let r = cmd::fused::step(&self.ctx, job, c.tag, Some(c));
                match first {
                    Some(first) => self.fused_step_done(first, tag, r),
                    // Not paired: cannot be (the job starts from a pair).
                    None => self.finish(tag, Response::status(Status::INTERNAL.with_dnr())),
                }
                return;
            }
            Pending::Copy(job) => match cmd::io::copy_step(&self.ctx, job, c.tag, Some(c)) {
                Exec::Done(r) => r,
                Exec::Pending(p) => {
                    slot.state = SlotState::Executing(p);
                    return;
                }
            },
            p => cmd::complete(p, c),
        };
        self.finish(tag, r);
    }

    /// Sends the data and completion of the command in `tag` and frees the slot.
    fn finish(&mut self, tag: u16, mut r: Response) {
        let sqe = self.slots[tag as usize].sqe;
        let cid = sqe.cid();
        if !r.status.is_success() {
            if let Some(ctrl) = &self.ctx.ctrl {
                // Every failure on a queue of a controller goes in its Error
                // Information log, and the More bit says so (nvmet_set_error
                // sets it with the entry). A queue without a controller (a
                // failed Connect) has no log to write.
                let mut entry = cmd::error_entry(self.ctx.qid.unwrap_or(0), &sqe, r.status);
                if let Some(lba) = r.error_lba {
                    entry.lba = lba;
                }
                ctrl.record_error(entry);
                r.status = r.status.with_more();
            }
        }
        let mut sent_success = false;
        if r.status.is_success() && !cmd::is_write(&sqe) && sqe.sgl().length > 0 {
            let want = sqe.sgl().length as usize;
            if r.data.len() != want {
                // Exactly the SGL length: the Linux host treats short data as an error.
                let mut v = BytesMut::with_capacity(want);
                v.extend_from_slice(&r.data[..r.data.len().min(want)]);
                v.resize(want, 0);
                r.data = v.freeze();
                r.data_crc = None;
            }
            // SUCCESS flag only when the host disabled SQ flow control and the
            // completion has nothing to report (reference §3.6).
            let success = self.ctx.sqflow_disabled && r.result == 0;
            // I/O-queue read buffers are reused for a later read once the socket
            // has sent them; admin data (Vec-backed) is not worth keeping.
            let keep = (self.ctx.qid.is_some_and(|q| q > 0) && !r.shared).then(|| r.data.clone());
            let pdu =
                C2hData { cccid: cid, datao: 0, data: std::mem::take(&mut r.data), last: true, success };
            let enc = self.enc;
            self.push_with_data_crc(&Pdu::C2hData(pdu), &enc, r.data_crc);
            sent_success = success;
            if let Some(b) = keep {
                self.ctx.recycle_read_buf(b);
            }
        }
        if !self.ctx.sqflow_disabled {
            self.sqhd = (self.sqhd + 1) % (self.ctx.sqsize.max(1) + 1);
        }
        if !sent_success {
            // A Connect that disabled SQ flow control is answered with SQHD
            // FFFFh, which tells the host no SQHD updates follow (TP 8005;
            // nvmet_install_queue sets `sq_head = 0xffff`). A host that reads
            // any other value there (FreeBSD's libnvmf does) keeps SQ flow
            // control on and sees its queue fill up, as SQHD then stays put.
            let connect = sqe.opcode() == 0x7F && sqe.fctype() == FabricsType::CONNECT.0;
            let sqhd =
                if connect && self.ctx.sqflow_disabled && r.status.is_success() { 0xFFFF } else { self.sqhd };
            let cqe = Cqe { result: r.result, sqhd, sqid: self.ctx.qid.unwrap_or(0), cid, status: r.status };
            let enc = self.enc;
            self.push(&Pdu::CapsuleResp(CapsuleResp { cqe }), &enc);
        }
        self.unsent.push_back(self.pushed);
        let slot = &mut self.slots[tag as usize];
        slot.state = SlotState::Free;
        slot.inflight = None;
        slot.fused = None;
        self.free.push(tag);
        if self.ctx.close_requested {
            self.phase = Phase::Closing;
        }
    }

    /// Marks the queue closing (controller torn down, shutdown).
    pub fn close(&mut self) {
        self.phase = Phase::Closing;
    }
}

#[cfg(test)]
mod tests {
    //! The queue driven without sockets: bytes in, bytes out.
    use std::sync::Arc;

    use nvmeof_common::pdu::PduType;
    use nvmeof_common::spec::property::{Cc, PropertyGet, PropertyOffset, PropertySet};
    use nvmeof_common::spec::{ConnectCmd, ConnectData, CNTLID_DYNAMIC};
    use nvmeof_common::SglDescriptor;

    use super::*;
    use tokio::sync::mpsc::UnboundedReceiver;

    use crate::backend::{Backend, DeferredMemBackend, MemBackend};
    use crate::core::{Limits, Namespace, Subsystem, Target};

    const NQN: &str = "nqn.2026-11.io.nvmeof:unit";

    fn target() -> Arc<Target> {
        target_with(Arc::new(MemBackend::new(1 << 20, 512)))
    }

    fn target_with(backend: Arc<dyn Backend>) -> Arc<Target> {
        let t = Target::new(Limits::default());
        let s = Arc::new(Subsystem::new(NQN, "unit", None, false));
        s.add_namespace(Arc::new(Namespace::new(NQN, 1, backend)));
        t.add_subsystem(s);
        t
    }

    fn queue() -> QueueState {
        queue_on(&target())
    }

    fn queue_on(t: &Arc<Target>) -> QueueState {
        queue_rx(t).0
    }

    /// A queue and the receiving end of its completion channel.
    fn queue_rx(t: &Arc<Target>) -> (QueueState, UnboundedReceiver<IoCompletion>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let q = QueueState::new(QueueCtx {
            ana: t.port_ana(1),
            params: Default::default(),
            target: t.clone(),
            port_id: 1,
            qid: None,
            ctrl: None,
            io: crate::backend::QueueIo::detached(tx),
            sqsize: 0,
            sqflow_disabled: false,
            close_requested: false,
            local_addr: None,
            peer_addr: None,
            read_bufs: Default::default(),
            data_digest: false,
            auth: Default::default(),
            inflight: Default::default(),
            inflight_cache: Default::default(),
        });
        (q, rx)
    }

    fn exchange(q: &mut QueueState, pdu: Pdu, cfg: &EncodeConfig) -> Vec<Pdu> {
        let mut rx = BytesMut::from(&pdu.encode_to_vec(cfg)[..]);
        q.handle_bytes(&mut rx);
        assert!(rx.is_empty());
        decode(&q.out.take_all(), cfg)
    }

    /// The PDUs in the queue's output `out`.
    fn decode(out: &[u8], cfg: &EncodeConfig) -> Vec<Pdu> {
        let mut dec = PduDecoder::new(DecoderConfig {
            hdgst: cfg.hdgst,
            ddgst: cfg.ddgst,
            ..DecoderConfig::new(Role::Host)
        });
        let mut buf = BytesMut::from(out);
        let mut pdus = Vec::new();
        while let Some(p) = dec.decode(&mut buf).unwrap() {
            pdus.push(p);
        }
        pdus
    }

    fn cqe(p: &Pdu) -> Cqe {
        match p {
            Pdu::CapsuleResp(r) => r.cqe,
            other => panic!("expected CapsuleResp, got {other:?}"),
        }
    }

    #[test]
    fn icreq_connect_property_get_without_sockets() {
        let mut q = queue();
        let out = exchange(&mut q, Pdu::IcReq(IcReq::default()), &EncodeConfig::default());
        assert!(matches!(&out[..], [Pdu::IcResp(r)] if r.maxh2cdata == 1 << 20 && r.cpda == 0));
        assert_eq!(q.phase(), Phase::Live);

        let data = ConnectData {
            hostid: [7; 16],
            cntlid: CNTLID_DYNAMIC,
            subnqn: NQN.into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000007".into(),
        };
        let cmd =
            CapsuleCmd { sqe: ConnectCmd::admin(5000).to_sqe(1), data: Bytes::from(data.encode().to_vec()) };
        let out = exchange(&mut q, Pdu::CapsuleCmd(cmd), &EncodeConfig::default());
        let c = cqe(&out[0]);
        assert!(c.status.is_success(), "{}", c.status);
        assert_eq!(c.cid, 1);
        assert_eq!(q.ctx.qid, Some(0));
        assert_eq!(c.result as u16, q.ctx.ctrl.as_ref().unwrap().cntlid);

        let get = CapsuleCmd::new(PropertyGet::new(PropertyOffset::CAP).to_sqe(2));
        let c = cqe(&exchange(&mut q, Pdu::CapsuleCmd(get), &EncodeConfig::default())[0]);
        assert!(c.status.is_success());
        assert_eq!(c.result & 0xFFFF, 1023, "MQES");

        // Admin commands before CC.EN: Command Sequence Error (nvmet_check_ctrl_status
        // runs before the opcode is looked at).
        let c = cqe(&exchange(
            &mut q,
            Pdu::CapsuleCmd(CapsuleCmd::new(Sqe::new(0xC5))),
            &EncodeConfig::default(),
        )[0]);
        assert_eq!(c.status, Status::CMD_SEQ_ERROR.with_dnr().with_more());
    }

    /// Connects `q` (after ICReq) as queue `qid` of controller `cntlid` (0xFFFF: a new one).
    fn connect(q: &mut QueueState, qid: u16, cntlid: u16) -> Cqe {
        exchange(q, Pdu::IcReq(IcReq::default()), &EncodeConfig::default());
        let data = ConnectData {
            hostid: [7; 16],
            cntlid,
            subnqn: NQN.into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000007".into(),
        };
        let cmd = if qid == 0 { ConnectCmd::admin(0) } else { ConnectCmd::io(qid, 32) };
        let cmd = CapsuleCmd { sqe: cmd.to_sqe(1), data: Bytes::from(data.encode().to_vec()) };
        cqe(&exchange(q, Pdu::CapsuleCmd(cmd), &EncodeConfig::default())[0])
    }

    /// An enabled controller's admin queue and its I/O queue 1 (with its completion channel).
    fn admin_and_io(t: &Arc<Target>) -> (QueueState, (QueueState, UnboundedReceiver<IoCompletion>)) {
        let mut admin = queue_on(t);
        let cntlid = connect(&mut admin, 0, CNTLID_DYNAMIC).result as u16;
        let cc = Cc::linux_host_default(Cc::CSS_NVM).with_en(true);
        let set = CapsuleCmd::new(PropertySet::new32(PropertyOffset::CC, cc.0).to_sqe(2));
        assert!(cqe(&exchange(&mut admin, Pdu::CapsuleCmd(set), &EncodeConfig::default())[0])
            .status
            .is_success());
        let (mut io, rx) = queue_rx(t);
        assert!(connect(&mut io, 1, cntlid).status.is_success());
        (admin, (io, rx))
    }

    #[test]
    fn handle_pdus_stops_after_max_and_resumes() {
        // The transport writes out what 16 commands produced before handling
        // more (transport/tcp.rs FLUSH_EVERY); nothing may be lost or reordered.
        let (_admin, (mut io, _)) = admin_and_io(&target());
        let enc = EncodeConfig::default();
        let mut rx = BytesMut::new();
        for cid in 0..5u16 {
            let mut read = Sqe::new(0x02);
            read.set_cid(cid).set_nsid(1).set_sgl(SglDescriptor::transport(512));
            rx.extend_from_slice(&Pdu::CapsuleCmd(CapsuleCmd::new(read)).encode_to_vec(&enc));
        }
        let cids = |pdus: Vec<Pdu>| -> Vec<u16> {
            pdus.iter()
                .filter_map(|p| match p {
                    Pdu::C2hData(d) => Some(d.cccid),
                    _ => None,
                })
                .collect()
        };
        assert!(io.handle_pdus(&mut rx, 2));
        assert_eq!(cids(decode(&io.out.take_all(), &enc)), [0, 1]);
        assert!(io.handle_pdus(&mut rx, 2));
        assert_eq!(cids(decode(&io.out.take_all(), &enc)), [2, 3]);
        // The last one: stops because the buffer is empty, not at the limit.
        assert!(!io.handle_pdus(&mut rx, 2));
        assert_eq!(cids(decode(&io.out.take_all(), &enc)), [4]);
        assert!(rx.is_empty());
    }

    #[test]
    fn a_copy_moves_on_with_each_backend_completion() {
        // With completions through the queue's channel (as the thread-pool
        // and io_uring backends deliver them), each one hands the Copy on to
        // its next operation: two reads, then the write, then the response.
        use nvmeof_common::spec::copy::{encode_ranges, CopyCmd, CopyRange};
        let t = target_with(Arc::new(DeferredMemBackend(MemBackend::new(1 << 20, 512))));
        let (_admin, (mut io, mut done)) = admin_and_io(&t);
        let enc = EncodeConfig::default();
        let mut write = Sqe::new(0x01);
        write.set_cid(1).set_nsid(1).set_slba(0).set_nlb(1).set_sgl(SglDescriptor::in_capsule(1024));
        let data: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
        exchange(&mut io, Pdu::CapsuleCmd(CapsuleCmd { sqe: write, data: Bytes::from(data.clone()) }), &enc);
        io.handle_completion(done.try_recv().expect("write completion"));
        io.out.take_all();
        // Block 1, then block 0, to blocks 8 and 9.
        let ranges = encode_ranges(&[CopyRange::new(1, 1).unwrap(), CopyRange::new(0, 1).unwrap()]).unwrap();
        let mut copy = CopyCmd::new(1, 8, 2, false).to_sqe(2);
        copy.set_sgl(SglDescriptor::in_capsule(ranges.len() as u32));
        assert!(exchange(
            &mut io,
            Pdu::CapsuleCmd(CapsuleCmd { sqe: copy, data: Bytes::from(ranges) }),
            &enc
        )
        .is_empty());
        for step in 0..3 {
            assert!(io.out.take_all().is_empty(), "answered before step {step}");
            io.handle_completion(done.try_recv().unwrap_or_else(|_| panic!("no completion for step {step}")));
        }
        assert!(done.try_recv().is_err(), "more than two reads and a write");
        let out = decode(&io.out.take_all(), &enc);
        assert!(
            matches!(&out[..], [Pdu::CapsuleResp(r)] if r.cqe.cid == 2 && r.cqe.status.is_success()),
            "{out:?}"
        );
        let mut read = Sqe::new(0x02);
        read.set_cid(3).set_nsid(1).set_slba(8).set_nlb(1).set_sgl(SglDescriptor::transport(1024));
        assert!(exchange(&mut io, Pdu::CapsuleCmd(CapsuleCmd::new(read)), &enc).is_empty());
        io.handle_completion(done.try_recv().expect("read completion"));
        let got: Vec<u8> = decode(&io.out.take_all(), &enc)
            .into_iter()
            .filter_map(|p| match p {
                Pdu::C2hData(d) => Some(d.data.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(got, [&data[512..], &data[..512]].concat());
        assert_eq!(io.in_flight(), 0);
    }

    #[test]
    fn fused_pairs_wait_for_the_namespace_lock_and_complete_the_compare_first() {
        // Completions through the queues' channels: queue 1's pair takes
        // namespace 1's Compare and Write lock with its read; queue 2's
        // pair waits for it without touching the backend, and is woken
        // through its channel once queue 1's write completes.
        let t = target_with(Arc::new(DeferredMemBackend(MemBackend::new(1 << 20, 512))));
        let (mut admin, (mut io1, mut done1)) = admin_and_io(&t);
        let cntlid = admin.ctx.ctrl.as_ref().expect("controller").cntlid;
        let (mut io2, mut done2) = queue_rx(&t);
        assert!(connect(&mut io2, 2, cntlid).status.is_success());
        admin.out.take_all();
        let enc = EncodeConfig::default();
        let capsule = |op: u8, cid: u16, fuse: u8, data: &[u8]| {
            let mut s = Sqe::new(op);
            s.set_cid(cid).set_nsid(1).set_slba(4).set_sgl(SglDescriptor::in_capsule(512)).set_fuse(fuse);
            Pdu::CapsuleCmd(CapsuleCmd { sqe: s, data: Bytes::copy_from_slice(data) })
        };
        let (zero, one, two) = ([0u8; 512], [1u8; 512], [2u8; 512]);
        assert!(exchange(&mut io1, capsule(0x05, 10, FUSE_FIRST, &zero), &enc).is_empty());
        assert!(exchange(&mut io1, capsule(0x01, 11, FUSE_SECOND, &one), &enc).is_empty());
        let read1 = done1.try_recv().expect("queue 1 reads the blocks");
        // Queue 2 swaps 1 for 2: it waits.
        assert!(exchange(&mut io2, capsule(0x05, 20, FUSE_FIRST, &one), &enc).is_empty());
        assert!(exchange(&mut io2, capsule(0x01, 21, FUSE_SECOND, &two), &enc).is_empty());
        assert!(done2.try_recv().is_err(), "queue 2 went to the backend while the lock was held");
        io1.handle_completion(read1);
        assert!(io1.out.take_all().is_empty());
        io1.handle_completion(done1.try_recv().expect("queue 1 writes"));
        let statuses = |q: &mut QueueState| -> Vec<(u16, Status)> {
            decode(&q.out.take_all(), &enc).iter().map(|p| (cqe(p).cid, cqe(p).status)).collect()
        };
        assert_eq!(statuses(&mut io1), [(10, Status::SUCCESS), (11, Status::SUCCESS)]);
        // The wake, then queue 2's read and write.
        for step in ["wake", "read", "write"] {
            assert!(io2.out.take_all().is_empty(), "answered before its {step}");
            io2.handle_completion(done2.try_recv().unwrap_or_else(|_| panic!("no {step} for queue 2")));
        }
        assert_eq!(statuses(&mut io2), [(20, Status::SUCCESS), (21, Status::SUCCESS)]);
        assert!(!t.subsystem(NQN).unwrap().namespace(1).unwrap().compare_write.is_held());
        assert_eq!((io1.in_flight(), io2.in_flight()), (0, 0));
        // A first left waiting when the queue drains: Missing Fused Command.
        assert!(exchange(&mut io1, capsule(0x05, 12, FUSE_FIRST, &two), &enc).is_empty());
        assert_eq!(io1.in_flight_io(), 1);
        io1.set_draining();
        assert_eq!(statuses(&mut io1), [(12, Status::ABORTED_MISSING_FUSED.with_dnr().with_more())]);
        assert_eq!(io1.in_flight_io(), 0);
    }

    #[test]
    fn completion_after_c2h_term_req_is_not_sent() {
        // Found by fuzz/fuzz_targets/target_queue.rs: a write completing
        // asynchronously after a malformed PDU behind it had queued the
        // C2HTermReq got its CapsuleResp sent after the TermReq.
        let t = target_with(Arc::new(DeferredMemBackend(MemBackend::new(1 << 20, 512))));
        let (_admin, (mut io, mut done)) = admin_and_io(&t);
        let mut write = Sqe::new(0x01);
        write.set_cid(5).set_nsid(1).set_sgl(SglDescriptor::in_capsule(512));
        let cmd = Pdu::CapsuleCmd(CapsuleCmd { sqe: write, data: Bytes::from(vec![0xA5; 512]) });
        let enc = EncodeConfig::default();
        // While the queue is live the completion is answered as usual.
        assert!(exchange(&mut io, cmd.clone(), &enc).is_empty());
        io.handle_completion(done.try_recv().expect("write completion"));
        let out = decode(&io.out.take_all(), &enc);
        assert!(matches!(&out[..], [Pdu::CapsuleResp(r)] if r.cqe.cid == 5 && r.cqe.status.is_success()));

        // The write and a malformed PDU in one receive buffer.
        let mut bytes = cmd.encode_to_vec(&enc);
        let mut bad = Pdu::CapsuleCmd(CapsuleCmd::new(Sqe::new(0x02))).encode_to_vec(&enc);
        bad[2] = 24;
        bytes.extend_from_slice(&bad);
        io.handle_bytes(&mut BytesMut::from(&bytes[..]));
        assert_eq!(io.phase(), Phase::Closing);
        io.handle_completion(done.try_recv().expect("write completion"));
        let out = decode(&io.out.take_all(), &enc);
        assert!(matches!(&out[..], [Pdu::C2hTermReq(t)] if t.fes == Fes::INVALID_HEADER_FIELD), "{out:?}");
        assert_eq!(io.in_flight(), 0);
    }

    #[test]
    fn responses_the_host_has_not_read_count_against_the_queue_depth() {
        // A host that never reads its socket but keeps sending commands: each
        // read's C2HData and CQE waited in `out` while its slot was freed at
        // once, so the queue buffered responses without limit. nvmet frees a
        // command only once its response is on the socket (nvmet_try_send_response
        // → nvmet_tcp_put_cmd), and a command beyond its pool is a fatal error
        // (nvmet_tcp_done_recv_pdu: "out of commands").
        let (_admin, (mut io, _)) = admin_and_io(&target());
        let enc = EncodeConfig::default();
        let read = |cid: u16| {
            let mut sqe = Sqe::new(0x02);
            sqe.set_cid(cid).set_nsid(1).set_sgl(SglDescriptor::transport(512));
            Pdu::CapsuleCmd(CapsuleCmd::new(sqe))
        };
        // A host that reads as it goes sends any number of commands.
        for cid in 0..100u16 {
            let out = exchange(&mut io, read(cid), &enc);
            assert!(matches!(&out[..], [Pdu::C2hData(_), Pdu::CapsuleResp(_)]), "{out:?}");
        }
        // This one stops reading: a queue depth of responses is all it gets.
        let depth = io.slots.len();
        let mut rx = BytesMut::new();
        for cid in 0..=depth as u16 {
            rx.extend_from_slice(&read(cid).encode_to_vec(&enc));
        }
        io.handle_bytes(&mut rx);
        assert_eq!(io.phase(), Phase::Closing);
        let out = decode(&io.out.take_all(), &enc);
        let cqes = out.iter().filter(|p| matches!(p, Pdu::CapsuleResp(_))).count();
        assert_eq!(cqes, depth, "responses queued for a host that does not read");
        assert!(
            matches!(out.last(), Some(Pdu::C2hTermReq(t)) if t.fes == Fes::PDU_SEQUENCE),
            "{:?}",
            out.last()
        );
    }

    #[test]
    fn commands_without_data_reject_a_nonzero_sgl_length() {
        // Found by fuzz/fuzz_targets/target_queue.rs: a Flush whose SGL said 256
        // bytes completed successfully after 256 bytes of zeroes in a C2HData.
        // nvmet checks nvmet_check_transfer_len(req, 0) in Flush, Write Zeroes and
        // Property Get/Set: SGL Data Invalid, nothing sent but the CQE.
        let (mut admin, (mut io, _)) = admin_and_io(&target());
        let cc = Cc::linux_host_default(Cc::CSS_NVM).with_en(true);

        let no_data = |q: &mut QueueState, mut sqe: Sqe, len: u32| {
            sqe.set_cid(9).set_sgl(SglDescriptor::transport(len));
            exchange(q, Pdu::CapsuleCmd(CapsuleCmd::new(sqe)), &EncodeConfig::default())
        };
        for opc in [0x00, 0x08] {
            let mut sqe = Sqe::new(opc);
            sqe.set_nsid(1);
            let out = no_data(&mut io, sqe, 256);
            assert_eq!(out.len(), 1, "opcode {opc:#x}: only a CQE, got {out:?}");
            let want = Status::SGL_INVALID_DATA.with_dnr().with_more();
            assert_eq!(cqe(&out[0]).status, want, "opcode {opc:#x}");
            assert!(cqe(&no_data(&mut io, sqe, 0)[0]).status.is_success(), "opcode {opc:#x}");
        }
        for sqe in [
            PropertyGet::new(PropertyOffset::CAP).to_sqe(0),
            PropertySet::new32(PropertyOffset::CC, cc.0).to_sqe(0),
        ] {
            let out = no_data(&mut admin, sqe, 8);
            assert_eq!(out.len(), 1, "FCTYPE {:#x}: only a CQE, got {out:?}", sqe.fctype());
            assert_eq!(cqe(&out[0]).status, Status::SGL_INVALID_DATA.with_dnr().with_more());
        }
    }

    #[test]
    fn failures_go_in_the_error_log_with_the_more_bit() {
        use nvmeof_common::opcode::IoOpcode;
        use nvmeof_common::spec::log::{decode_error_log, LogPageId, SmartLog};
        use nvmeof_common::spec::GetLogPageCmd;

        let t = target();
        let cfg = EncodeConfig::default();
        let (mut admin, (mut io, _)) = admin_and_io(&t);
        // A Connect that fails has no controller to log it (nor has nvmet's).
        let mut fresh = queue_on(&t);
        let c = connect(&mut fresh, 1, 0xFFF0);
        assert!(!c.status.is_success() && !c.status.more(), "{}", c.status);

        let submit = |q: &mut QueueState, sqe: Sqe| exchange(q, Pdu::CapsuleCmd(CapsuleCmd::new(sqe)), &cfg);
        let blocks = (1u64 << 20) / 512;
        let mut past_end = Sqe::new(IoOpcode::READ.0);
        past_end.set_cid(7).set_nsid(1).set_cdw(10, blocks as u32).set_sgl(SglDescriptor::transport(512));
        let c = cqe(&submit(&mut io, past_end)[0]);
        assert_eq!(c.status, Status::LBA_RANGE.with_dnr().with_more());
        let mut inactive = past_end;
        inactive.set_cid(8).set_nsid(9).set_cdw(10, 0);
        assert_eq!(cqe(&submit(&mut io, inactive)[0]).status, Status::INVALID_NS.with_dnr().with_more());
        let mut unknown = Sqe::new(0xC4);
        unknown.set_cid(9);
        assert_eq!(
            cqe(&submit(&mut admin, unknown)[0]).status,
            Status::INVALID_OPCODE.with_dnr().with_more()
        );
        // A successful read sets no More bit and logs nothing.
        let mut ok = past_end;
        ok.set_cid(10).set_cdw(10, 0);
        assert!(submit(&mut io, ok)
            .iter()
            .all(|p| !matches!(p, Pdu::CapsuleResp(r) if !r.cqe.status.is_success())));

        // Dataset Management: the failing range's SLBA, from the data.
        use nvmeof_common::spec::dsm::{DsmCmd, DsmRange};
        let range = DsmRange { cattr: 0, nlb: 8, slba: blocks - 4 };
        let mut dsm = DsmCmd::deallocate(1, 1).to_sqe(11);
        dsm.set_sgl(SglDescriptor::in_capsule(16));
        let cmd = CapsuleCmd { sqe: dsm, data: Bytes::copy_from_slice(&range.encode()) };
        let c = cqe(&exchange(&mut io, Pdu::CapsuleCmd(cmd), &cfg)[0]);
        assert_eq!(c.status, Status::LBA_RANGE.with_dnr().with_more());

        let log = |q: &mut QueueState, lid, nsid, len| {
            let out = submit(q, GetLogPageCmd::new(lid, nsid, 0, len).to_sqe(11));
            match &out[0] {
                Pdu::C2hData(d) => d.data.clone(),
                other => panic!("expected C2HData, got {other:?}"),
            }
        };
        let entries = decode_error_log(&log(&mut admin, LogPageId::ERROR, 0, 4096));
        assert_eq!(entries.len(), 64);
        // Newest first, counted from 1; unused entries are zero.
        let mut used: Vec<_> = entries.iter().filter(|e| e.error_count != 0).collect();
        assert_eq!(used.len(), 4, "{entries:?}");
        let e = used.remove(0);
        assert_eq!(
            (e.error_count, e.sqid, e.cid, e.param_error_location, e.lba),
            (4, 1, 11, 0xFFFF, blocks - 4)
        );
        let e = used[0];
        assert_eq!((e.error_count, e.sqid, e.cid, e.param_error_location, e.nsid), (3, 0, 9, 0, 0));
        assert_eq!(e.status, Status::INVALID_OPCODE.with_dnr().to_wire(), "status without More");
        let e = used[1];
        assert_eq!((e.error_count, e.sqid, e.cid, e.param_error_location, e.nsid, e.lba), (2, 1, 8, 4, 9, 0));
        let e = used[2];
        assert_eq!((e.error_count, e.sqid, e.cid, e.param_error_location, e.nsid), (1, 1, 7, 40, 1));
        assert_eq!((e.lba, e.status), (blocks, Status::LBA_RANGE.with_dnr().to_wire()));
        // SMART counts them (nvmet: Number of Error Information Log Entries = err_counter).
        let smart = SmartLog::decode(&log(&mut admin, LogPageId::SMART, 0xFFFF_FFFF, 512)).unwrap();
        assert_eq!(smart.num_err_log_entries, 4);
    }

    #[test]
    fn malformed_header_gets_c2h_term_req_and_closes() {
        let mut q = queue();
        exchange(&mut q, Pdu::IcReq(IcReq::default()), &EncodeConfig::default());
        let mut bad =
            Pdu::CapsuleCmd(CapsuleCmd::new(Sqe::new(0x06))).encode_to_vec(&EncodeConfig::default());
        bad[2] = 24; // HLEN wrong for CapsuleCmd
        let mut rx = BytesMut::from(&bad[..]);
        q.handle_bytes(&mut rx);
        assert_eq!(q.phase(), Phase::Closing);
        let out = q.out.take_all();
        let mut dec = PduDecoder::new(DecoderConfig::new(Role::Host));
        match dec.decode(&mut BytesMut::from(&out[..])).unwrap() {
            Some(Pdu::C2hTermReq(t)) => {
                assert_eq!((t.fes, t.fei), (Fes::INVALID_HEADER_FIELD, 2));
                assert_eq!(&t.data[..8], &bad[..8]);
            }
            other => panic!("expected C2HTermReq, got {other:?}"),
        }
        assert_eq!(PduType(out[0]), PduType::C2H_TERM_REQ);
    }

    #[test]
    fn capsule_before_icreq_is_a_sequence_error() {
        let mut q = queue();
        let mut rx = BytesMut::from(
            &Pdu::CapsuleCmd(CapsuleCmd::new(Sqe::new(0x06))).encode_to_vec(&EncodeConfig::default())[..],
        );
        q.handle_bytes(&mut rx);
        assert_eq!(q.phase(), Phase::Closing);
        let out = q.out.take_all();
        assert_eq!(out[0], 0x03);
        assert_eq!(u16::from_le_bytes([out[8], out[9]]), Fes::PDU_SEQUENCE.0);
    }
}
