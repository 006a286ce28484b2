//! The initiator's sans-IO queue (`nvmeof_initiator::queue::Queue`) after a
//! normal ICReq/ICResp exchange, with a few commands outstanding, fed the
//! fuzz bytes as the controller's byte stream the way the driver
//! (`initiator/src/driver.rs` `decode_all`) feeds it.
//!
//! Input layout:
//! - byte 0: bit 0 HDGST, bit 1 DDGST negotiated; bit 2 C2HData PDUs take the
//!   driver's two-step path (`C2hHeader::parse`, `c2h_begin`, `c2h_end`);
//!   bit 3 rewrites the fuzz PDUs' digests to correct values; bit 4 the queue
//!   is an I/O queue (QID 1), else the admin queue.
//! - then operations, one control byte each: `11xxxxxx` advances the clock by
//!   x seconds and runs the timeouts; `10xxxxxx` submits one more command of
//!   kind x % 5; otherwise a chunk of [`nvmeof_fuzz::chunk_len`] stream bytes.
//!
//! Invariants: no panic; a completion only for an outstanding command, once,
//! under the CID it was given; read data inside the command's length; H2CData
//! only for an R2T write, inside its data and within MAXH2CDATA; the queue's
//! outstanding count matches; after a fatal error, `drain_outstanding` hands
//! back exactly the commands never completed.
#![no_main]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use nvmeof_common::decoder::PduDecoder;
use nvmeof_common::digest::crc32c;
use nvmeof_common::error::DecodeError;
use nvmeof_common::pdu::{CommonHeader, DigestFlags, IcResp, Pdu, PduFlags, PduType, CH_LEN};
use nvmeof_common::Sqe;
use nvmeof_fuzz::{chunk_len, chunked, fix_digests, trace, write_seeds_if_asked};
use nvmeof_initiator::queue::{C2hHeader, Command, DataXfer, Event, Queue, QueueConfig, QueueError};

const MAXH2CDATA: u32 = 8192;
const TAGS: u16 = 8;
const MAX_OPS: usize = 512;

#[derive(Debug)]
struct Outstanding {
    cid: u16,
    read: u32,
    write: u32,
}

struct Harness {
    q: Queue,
    dec: PduDecoder,
    rbuf: BytesMut,
    now: Instant,
    direct: bool,
    next_ud: u64,
    out: BTreeMap<u64, Outstanding>,
}

impl Harness {
    fn command(kind: u8) -> Command {
        let rw = |opc: u8| {
            let mut s = Sqe::new(opc);
            s.set_nsid(1);
            s
        };
        match kind % 5 {
            0 => Command::with_data(rw(0x02), DataXfer::Read(1024)),
            1 => Command::with_data(rw(0x01), DataXfer::Write(Bytes::from(vec![0x5A; 512]))),
            2 => Command::with_data(rw(0x01), DataXfer::Write(Bytes::from(vec![0xA5; 20000]))),
            3 => Command::new(Sqe::new(0x18)),
            _ => Command::with_data(rw(0x02), DataXfer::Read(512)),
        }
    }

    fn submit(&mut self, kind: u8) {
        let cmd = Self::command(kind);
        let (read, write) = match &cmd.data {
            DataXfer::Read(n) => (*n, 0),
            DataXfer::Write(b) => (0, b.len() as u32),
            DataXfer::None => (0, 0),
        };
        let ud = self.next_ud;
        if let Ok(cid) = self.q.submit(ud, cmd, self.now) {
            self.next_ud += 1;
            self.out.insert(ud, Outstanding { cid, read, write });
        }
    }

    /// Checks what the queue produced.
    fn check(&mut self) {
        while let Some(p) = self.q.poll_transmit() {
            match p {
                Pdu::CapsuleCmd(_) => {}
                Pdu::H2cData(d) => {
                    let o = self.out.values().find(|o| o.cid == d.cccid);
                    let o = o.unwrap_or_else(|| panic!("H2CData for CID {:#x} not outstanding", d.cccid));
                    assert!(o.write > 0, "H2CData for a command without write data");
                    assert!(
                        d.datao as u64 + d.data.len() as u64 <= o.write as u64,
                        "H2CData beyond the write"
                    );
                    assert!(d.data.len() as u32 <= MAXH2CDATA, "H2CData beyond MAXH2CDATA");
                    assert!(!d.data.is_empty(), "empty H2CData");
                }
                other => panic!("initiator sent {other:?}"),
            }
        }
        while let Some(e) = self.q.poll_event() {
            if trace() {
                eprintln!("event {e:?}");
            }
            match e {
                Event::Data { user_data, offset, data } => {
                    let o = self.out.get(&user_data).expect("data for a command not outstanding");
                    assert!(o.read > 0, "read data for a command without read data");
                    assert!(
                        offset as u64 + data.len() as u64 <= o.read as u64,
                        "read data beyond its length"
                    );
                }
                Event::Completion { user_data, cid, .. } => {
                    let o = self.out.remove(&user_data).expect("completion for a command not outstanding");
                    assert_eq!(o.cid, cid, "completion under another CID");
                }
            }
        }
        assert_eq!(self.q.outstanding(), self.out.len(), "outstanding count");
    }

    /// The driver's two-step C2HData path; `Ok(false)`: not taken.
    fn direct_c2h(&mut self) -> Result<bool, QueueError> {
        if !self.direct || self.rbuf.len() < CH_LEN || self.rbuf[0] != PduType::C2H_DATA.0 {
            return Ok(false);
        }
        let layout = self.dec.layout(&CommonHeader::decode(&self.rbuf[..CH_LEN]))?;
        if self.rbuf.len() < layout.ch.plen as usize {
            return Ok(false);
        }
        let h = C2hHeader::parse(&layout, &self.rbuf[..layout.data_start])?;
        self.q.c2h_begin(&h)?;
        self.rbuf.advance(h.data_start);
        let payload = self.rbuf.split_to(h.datal as usize);
        let ok = !h.ddgst || self.rbuf.get_u32_le() == crc32c(&payload);
        self.q.c2h_end(&h, ok)?;
        Ok(true)
    }

    /// `decode_all` of the driver.
    fn decode_all(&mut self) -> Result<(), QueueError> {
        for _ in 0..MAX_OPS {
            if self.direct_c2h()? {
                self.check();
                continue;
            }
            let peek = (self.rbuf.len() >= 24 && self.rbuf[0] == PduType::C2H_DATA.0)
                .then(|| (u32::from_le_bytes(self.rbuf[16..20].try_into().unwrap()), self.rbuf[1]));
            match self.dec.decode(&mut self.rbuf) {
                Ok(Some(pdu)) => self.q.handle_pdu(pdu, self.now)?,
                Ok(None) => return Ok(()),
                Err(DecodeError::DataDigest { cccid, .. }) => {
                    let (datal, flags) = peek.unwrap_or((0, 0));
                    self.q.handle_data_digest_error(cccid, datal, flags & PduFlags::SUCCESS != 0)?;
                }
                Err(e) => return Err(e.into()),
            }
            self.check();
        }
        Ok(())
    }
}

fn run(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else { return };
    let (hdgst, ddgst) = (sel & 1 != 0, sel & 2 != 0);
    let qid = u16::from(sel & 0x10 != 0);
    let mut cfg = QueueConfig::new(qid, TAGS);
    cfg.hdgst = hdgst;
    cfg.ddgst = ddgst;
    if qid > 0 {
        cfg.inline_limit = 4096;
    }
    let now = Instant::now();
    let mut q = Queue::new(cfg, now);
    assert!(matches!(q.poll_transmit(), Some(Pdu::IcReq(_))));
    let resp = IcResp { pfv: 0, cpda: 0, dgst: DigestFlags::new(hdgst, ddgst), maxh2cdata: MAXH2CDATA };
    q.handle_pdu(Pdu::IcResp(resp), now).expect("valid ICResp");
    let dec = PduDecoder::new(q.decoder_config());
    let mut h = Harness {
        q,
        dec,
        rbuf: BytesMut::new(),
        now,
        direct: sel & 4 != 0,
        next_ud: 0,
        out: BTreeMap::new(),
    };
    for kind in 0..5 {
        h.submit(kind);
    }
    h.check();

    // Operations, and the stream bytes gathered so their digests can be fixed.
    let mut ops = Vec::new();
    let mut stream = Vec::new();
    let mut rest = rest;
    while let Some((&ctl, r)) = rest.split_first() {
        if ctl & 0x80 != 0 {
            ops.push((ctl, 0));
            rest = r;
            continue;
        }
        let len = chunk_len(ctl).min(r.len());
        stream.extend_from_slice(&r[..len]);
        ops.push((ctl, len));
        rest = &r[len..];
    }
    if sel & 8 != 0 {
        fix_digests(&mut stream);
    }
    let mut at = 0;
    let mut failed = false;
    for (ctl, len) in ops.into_iter().take(MAX_OPS) {
        let r = match ctl & 0xC0 {
            0xC0 => {
                h.now += Duration::from_secs((ctl & 0x3F) as u64);
                h.q.handle_timeout(h.now).map(|_| ())
            }
            0x80 => {
                h.submit(ctl & 0x3F);
                Ok(())
            }
            _ => {
                h.rbuf.extend_from_slice(&stream[at..at + len]);
                at += len;
                h.decode_all()
            }
        };
        h.check();
        if trace() {
            eprintln!("op {ctl:#04x} len {len}: {r:?}");
        }
        if r.is_err() {
            failed = true;
            break;
        }
    }
    // Connection gone (fatal error, or the end of the input): every command
    // not completed comes back exactly once.
    let drained = h.q.drain_outstanding();
    assert!(h.q.poll_event().is_none() && !h.q.has_transmit(), "output after drain_outstanding");
    let mut back: Vec<u64> = drained.iter().map(|(ud, _)| *ud).collect();
    back.sort_unstable();
    let want: Vec<u64> = h.out.keys().copied().collect();
    assert_eq!(back, want, "drain_outstanding after failed={failed}");
    assert_eq!(h.q.outstanding(), 0);
}

/// Seeds: the controller's answers to the five commands submitted at start.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    use nvmeof_common::pdu::{C2hData, CapsuleResp, EncodeConfig, R2t};
    use nvmeof_common::{Cqe, Status};
    use nvmeof_initiator::queue::make_cid;
    let cqe = |tag: u16| {
        let cqe = Cqe { result: 0, sqhd: 0, sqid: 0, cid: make_cid(1, tag), status: Status::SUCCESS };
        Pdu::CapsuleResp(CapsuleResp { cqe })
    };
    let c2h = |tag: u16, len: usize, success: bool| {
        let data = Bytes::from(vec![0x3C; len]);
        Pdu::C2hData(C2hData { cccid: make_cid(1, tag), datao: 0, data, last: true, success })
    };
    let r2t = Pdu::R2t(R2t { cccid: make_cid(1, 2), ttag: 7, r2to: 0, r2tl: 20000 });
    let pdus = [c2h(0, 1024, false), cqe(0), cqe(1), r2t, cqe(2), cqe(3), c2h(4, 512, true)];
    let mut v = Vec::new();
    for (name, sel) in
        [("admin", 0u8), ("admin-direct", 4), ("io-digests", 0x13), ("io-digests-direct", 0x17)]
    {
        let enc = EncodeConfig { hdgst: sel & 1 != 0, ddgst: sel & 2 != 0, pda: 0 };
        let mut stream = Vec::new();
        for p in &pdus {
            let mut p = p.clone();
            if let Pdu::CapsuleResp(r) = &mut p {
                r.cqe.sqid = u16::from(sel & 0x10 != 0);
            }
            stream.extend_from_slice(&p.encode_to_vec(&enc));
        }
        v.push((name, std::iter::once(sel).chain(chunked(&stream)).collect()));
    }
    v
}

fuzz_target!(init: write_seeds_if_asked(seeds), |data: &[u8]| run(data));
