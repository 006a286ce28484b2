//! Tokio side of one NVMe queue: the handle callers submit through
//! ([`QueueShared`]) and the task that owns the socket and the sans-IO
//! [`Queue`] ([`spawn_driver`]).
//!
//! Callers take a *ticket* (a preallocated completion cell, bounded by a
//! semaphore sized to the queue depth), push a [`Submission`] onto the
//! queue's submission list and wake the driver. The driver drains the list
//! into the state machine, encodes every PDU it produced into one vectored
//! write, reads and decodes whatever the socket has, and hands read data and
//! completions to the tickets, waking their callers. Write data is copied
//! once into the ticket's reusable buffer (or passed as `Bytes` without
//! copying) and sent from there.
//!
//! Read data takes one of two paths:
//! - into a caller's `&mut [u8]` ([`Payload::Read`]): the data stays in the
//!   receive buffer (`Bytes` slices parked in the ticket) until the caller's
//!   future, woken by the completion, copies it into its buffer: one copy.
//!   The driver never writes into the caller's slice itself: a future can be
//!   leaked (`mem::forget`) without running its destructor, which ends the
//!   borrow of the slice while the command is still outstanding, so writes
//!   from the driver task could land in freed memory. Only code running inside
//!   the caller's own `poll` may touch that slice.
//! - into an owned buffer ([`Namespace::read_buf`](crate::Namespace::read_buf),
//!   [`Namespace::read_bytes`](crate::Namespace::read_bytes)): the ticket
//!   owns the `BytesMut` while the command runs, so the driver may fill it.
//!   Once a C2HData header for such a command is parsed
//!   ([`C2hHeader`](crate::queue::C2hHeader), [`Queue::c2h_begin`]), the
//!   payload bytes already in the receive buffer are copied into it once and
//!   the rest is read from the socket straight into it (`try_read` into the
//!   buffer's spare capacity), the data digest computed on the way; then
//!   [`Queue::c2h_end`] does the bookkeeping. Dropping the future leaves the
//!   buffer with the ticket (the driver discards the rest of the payload and
//!   frees the buffer with the slot), so cancellation needs no `unsafe`.
//!
//! The driver survives its connection: on loss, the responses already in the
//! socket are read and delivered first (unless the stream itself was bad),
//! then the commands still outstanding are parked (or failed, per policy),
//! the supervisor is told, and the next [`DriverCtrl::Attach`] brings a
//! fresh socket on which parked commands are resubmitted with new CIDs.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use nvmeof_common::auth::{CONNECT_AUTHREQ_ASCR, CONNECT_AUTHREQ_ATR};
use nvmeof_common::decoder::PduDecoder;
use nvmeof_common::digest::{crc32c_append, DIGEST_LEN};
use nvmeof_common::out::OutQueue;
use nvmeof_common::pdu::{CommonHeader, EncodeConfig, PduType, CH_LEN};
use nvmeof_common::{Cqe, DecodeError, Sqe};
use nvmeof_net::{recv_buf, write_out, PollWindow};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tracing::{debug, error, warn, Instrument};

use crate::error::{CommandInfo, Error, Result};
use crate::queue::{
    C2hHeader, Command, CommandFailure, DataXfer, Event, Queue, QueueConfig, QueueError, SubmitError,
};

/// `user_data` of the Connect command the driver itself issues.
const CONNECT_UD: u64 = u64::MAX;
/// `user_data` bit marking a connection-setup command (never parked or resubmitted).
const SETUP_BIT: u64 = 1 << 32;
/// `user_data` bit marking a command that fails with
/// [`Error::ConnectionLost`] when its connection is lost instead of being
/// resubmitted: one whose second execution would not mean what its first
/// did (a reservation Replace, Preempt or Clear that already succeeded
/// fails the second time). The Linux host does not retry such
/// commands either (passthrough and `pr_ops` requests are `REQ_FAILFAST_DRIVER`).
const ONCE_BIT: u64 = 1 << 33;
/// Read at most this much per wake-up before servicing writes.
const READ_BUDGET: usize = 4 << 20;
/// Bytes [`Driver::drop_conn`] reads from a socket it is about to close, for
/// the responses already there (a receive buffer's worth and more).
const SALVAGE_BUDGET: usize = 16 << 20;
/// Payloads up to this size are copied next to their header (one iovec instead of two).
const SMALL_PAYLOAD: usize = 512;
/// Largest read into the receive buffer while large reads into owned buffers
/// are outstanding: a C2HData header arrives with at most this much of its
/// payload, the rest is read straight into the destination.
const OWNED_READ_CAP: usize = 8 << 10;
/// Owned-buffer reads up to this size do not cap the receive-buffer reads:
/// their payloads are copied from the receive buffer (a 4 KiB copy costs less
/// than the extra `recv` per two PDUs that the cap meant at 4 KiB QD32).
const OWNED_DIRECT_MIN: usize = 16 << 10;
/// Scratch size for discarding payload bytes nobody wants any more.
const DISCARD_CHUNK: usize = 64 << 10;
/// Times a command outstanding on a lost connection is resubmitted (Linux
/// `nvme_max_retries`); then it fails with [`Error::ConnectionLost`]. Without
/// a bound, a command that costs the connection every time (a target that
/// crashes on it) was resubmitted after every reconnect, forever.
const MAX_REQUEUES: u8 = 5;

/// Data of a command, as the caller holds it.
#[derive(Debug, Default)]
pub enum Payload<'a> {
    /// No data.
    #[default]
    None,
    /// Host to controller, copied once into a reusable per-slot buffer.
    Write(&'a [u8]),
    /// Host to controller, sent without copying.
    WriteBytes(Bytes),
    /// Controller to host: the received data is copied into this buffer
    /// (its length is the transfer length).
    Read(&'a mut [u8]),
}

impl Payload<'_> {
    /// Bytes the command moves.
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Write(b) => b.len(),
            Payload::WriteBytes(b) => b.len(),
            Payload::Read(b) => b.len(),
        }
    }

    /// Whether the command moves no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Refuses a transfer the SGL's 32-bit length cannot describe: cast to it,
/// a raw command's 4 GiB + n buffer would have been sent as an n-byte one.
fn check_len(len: usize) -> Result<()> {
    if len > u32::MAX as usize {
        return Err(Error::InvalidArgument(format!("transfer of {len} bytes exceeds the 32-bit SGL length")));
    }
    Ok(())
}

/// Where received read data went (diagnostics; cumulative over all queues).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxStats {
    /// Payload bytes parked as receive-buffer slices and copied by the caller
    /// into its `&mut [u8]` ([`Payload::Read`], the one-copy path).
    pub copied_via_chunks: u64,
    /// Payload bytes of owned-buffer reads copied out of the receive buffer
    /// (bytes that arrived together with their PDU header).
    pub copied_from_rbuf: u64,
    /// Payload bytes read from the socket straight into an owned buffer.
    pub direct: u64,
}

#[derive(Default)]
struct RxCounters {
    chunks: AtomicU64,
    rbuf: AtomicU64,
    direct: AtomicU64,
}

/// Data of a command as the queue driver takes it: the public [`Payload`],
/// a read into a buffer the ticket owns while the command runs, or the
/// caller's buffers in pieces ([`Namespace::read_vectored`],
/// [`Namespace::write_vectored`](crate::Namespace::write_vectored)).
///
/// [`Namespace::read_vectored`]: crate::Namespace::read_vectored
pub(crate) enum Xfer<'a> {
    /// A caller-held payload.
    P(Payload<'a>),
    /// Controller to host: `len` bytes appended to this buffer.
    ReadOwned(BytesMut, usize),
    /// Controller to host, into these pieces in order: copied by the
    /// caller's future, as [`Payload::Read`] is.
    ReadScatter(&'a mut (dyn ScatterMut + 'a)),
    /// Host to controller: these pieces, in order, copied once into the
    /// ticket's reusable buffer, as [`Payload::Write`] is.
    WriteGather(&'a [&'a [u8]]),
}

impl Xfer<'_> {
    /// Bytes the command moves.
    fn len(&self) -> usize {
        match self {
            Xfer::P(p) => p.len(),
            Xfer::ReadOwned(_, len) => *len,
            Xfer::ReadScatter(s) => s.total(),
            Xfer::WriteGather(g) => g.iter().map(|b| b.len()).sum(),
        }
    }
}

/// A read's destination in pieces (a scatter list, as `readv`'s).
pub(crate) trait ScatterMut: Send {
    /// Bytes of all pieces together.
    fn total(&self) -> usize;
    /// Copies `data` to byte `off` of the pieces taken as one (what lies
    /// past their end is dropped); returns the bytes copied.
    fn put(&mut self, off: usize, data: &[u8]) -> usize;
}

impl ScatterMut for Vec<&mut [u8]> {
    fn total(&self) -> usize {
        self.iter().map(|b| b.len()).sum()
    }

    fn put(&mut self, mut off: usize, mut data: &[u8]) -> usize {
        let mut copied = 0;
        for piece in self.iter_mut() {
            if data.is_empty() {
                break;
            }
            if off >= piece.len() {
                off -= piece.len();
                continue;
            }
            let n = (piece.len() - off).min(data.len());
            piece[off..off + n].copy_from_slice(&data[..n]);
            (off, data, copied) = (0, &data[n..], copied + n);
        }
        copied
    }
}

/// Where a read's data goes once its command completed.
enum ReadDest<'a> {
    One(&'a mut [u8]),
    Pieces(&'a mut (dyn ScatterMut + 'a)),
}

impl<'a> From<Payload<'a>> for Xfer<'a> {
    fn from(p: Payload<'a>) -> Self {
        Xfer::P(p)
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    #[default]
    Idle,
    InFlight,
    Done,
    Abandoned,
}

#[derive(Default)]
struct TicketState {
    phase: Phase,
    waker: Option<Waker>,
    result: Option<Result<Cqe>>,
    chunks: Vec<(u32, Bytes)>,
    wbuf: BytesMut,
    timeout: Duration,
    /// Destination of an owned-buffer read; data is appended after `owned_base`.
    owned: Option<BytesMut>,
    owned_base: usize,
    /// `owned` is set and larger than [`OWNED_DIRECT_MIN`], counted in
    /// [`QueueShared::owned_large`]; cleared whenever `owned` is taken.
    owned_large: bool,
    /// Bumped for every command prepared on this ticket: lets the driver
    /// tell whether a destination still belongs to the command it started
    /// streaming a payload for.
    seq: u64,
    /// Times the current command was resubmitted after a connection loss.
    requeues: u8,
}

impl TicketState {
    /// Back to idle; returns whether a large owned buffer was dropped.
    fn reset(&mut self) -> bool {
        self.phase = Phase::Idle;
        self.waker = None;
        self.result = None;
        self.chunks.clear();
        self.owned = None;
        std::mem::take(&mut self.owned_large)
    }
}

/// A submitted command, as the driver receives it.
pub(crate) struct Submission {
    user_data: u64,
    cmd: Command,
}

struct SubQ {
    items: Vec<Submission>,
    closed: Option<Error>,
}

/// Orders from the controller supervisor to a driver.
pub(crate) enum DriverCtrl {
    /// Use this socket: handshake, then send `connect`; answer on `reply`.
    Attach {
        stream: TcpStream,
        cfg: QueueConfig,
        connect: Command,
        epoch: u64,
        /// Resubmit parked commands as soon as Connect succeeds (I/O queues),
        /// unless its response asks for authentication: then only setup
        /// commands run until [`DriverCtrl::Release`].
        release: bool,
        reply: oneshot::Sender<Result<Cqe>>,
    },
    /// Close the connection; park (or fail) outstanding commands.
    Detach,
    /// Resubmit parked commands and accept new ones (admin queue, once
    /// enabled; an I/O queue once authenticated).
    Release,
    /// [`crate::ReconnectPolicy::fast_io_fail_timeout`] ran out while
    /// reconnecting: fail the parked commands, and the new ones until the
    /// queue is live again, with [`Error::ConnectionLost`] (Linux
    /// `nvme_failfast_work`). Ignored by a queue that is live.
    FailFast,
    /// Fail everything outstanding, parked and future with this error.
    Fail(Error),
    /// Fail everything with [`Error::Shutdown`] and stop.
    Shutdown,
}

/// Notices from drivers to the supervisor.
#[derive(Debug)]
pub(crate) enum SupMsg {
    /// A live connection failed.
    QueueLost { qid: u16, epoch: u64, error: Error },
}

/// Per-queue state shared by callers and the driver task.
pub(crate) struct QueueShared {
    pub(crate) qid: u16,
    tickets: Box<[Mutex<TicketState>]>,
    free: Mutex<Vec<u32>>,
    permits: Semaphore,
    subq: Mutex<SubQ>,
    notify: Notify,
    ctrl_tx: mpsc::UnboundedSender<DriverCtrl>,
    default_timeout: Duration,
    rx: RxCounters,
    /// Tickets holding an owned read buffer larger than [`OWNED_DIRECT_MIN`].
    owned_large: AtomicUsize,
    /// The socket's own address at the last connect.
    local_addr: Mutex<Option<std::net::SocketAddr>>,
    /// The controller's MAXH2CDATA from the last ICResp (0 before one).
    maxh2cdata: std::sync::atomic::AtomicU32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the driver needs besides the shared handle.
pub(crate) struct DriverParams {
    pub(crate) requeue: bool,
    pub(crate) busy_poll: Duration,
    pub(crate) sup_tx: Option<mpsc::UnboundedSender<SupMsg>>,
    pub(crate) span: tracing::Span,
    /// The controller's count of I/O queues with commands outstanding.
    pub(crate) busy_queues: Arc<AtomicUsize>,
    /// Set on every completion (I/O queues only): traffic-based keep-alive.
    pub(crate) comp_seen: Option<Arc<AtomicBool>>,
}

/// Creates the shared handle of queue `qid` with `tickets` concurrent
/// commands and spawns its driver task (initially without a connection).
pub(crate) fn spawn_driver(
    qid: u16,
    tickets: u32,
    default_timeout: Duration,
    params: DriverParams,
) -> Arc<QueueShared> {
    let tickets = tickets.max(1);
    let (ctrl_tx, ctrl_rx) = mpsc::unbounded_channel();
    let shared = Arc::new(QueueShared {
        qid,
        tickets: (0..tickets).map(|_| Mutex::new(TicketState::default())).collect(),
        free: Mutex::new((0..tickets).rev().collect()),
        permits: Semaphore::new(tickets as usize),
        subq: Mutex::new(SubQ { items: Vec::with_capacity(tickets as usize), closed: None }),
        notify: Notify::new(),
        ctrl_tx,
        default_timeout,
        rx: RxCounters::default(),
        owned_large: AtomicUsize::new(0),
        local_addr: Mutex::new(None),
        maxh2cdata: std::sync::atomic::AtomicU32::new(0),
    });
    let span = params.span.clone();
    let driver = Driver {
        shared: shared.clone(),
        ctrl_rx,
        sup_tx: params.sup_tx,
        conn: None,
        parked: VecDeque::new(),
        released: false,
        failing_fast: false,
        failed: None,
        requeue: params.requeue,
        busy_poll: PollWindow::new(params.busy_poll),
        spin_since: None,
        slept: None,
        busy_queues: params.busy_queues,
        comp_seen: params.comp_seen,
        counted_busy: false,
        share: nvmeof_net::FairShare::default(),
        // spawn_driver runs inside the runtime (it spawns the task below).
        workers: tokio::runtime::Handle::current().metrics().num_workers(),
        local: Vec::with_capacity(tickets as usize),
        span: params.span,
    };
    tokio::spawn(driver.run().instrument(span));
    shared
}

impl QueueShared {
    /// Fails every outstanding ticket and every later submission with `e`,
    /// touching nothing but the shared state (the driver that owned the
    /// commands is gone: see `Drop for Driver`).
    fn fail_orphaned(&self, e: Error) {
        let orphaned = {
            let mut q = lock(&self.subq);
            q.closed = Some(e.clone());
            std::mem::take(&mut q.items)
        };
        drop(orphaned);
        for idx in 0..self.tickets.len() {
            let phase = lock(&self.tickets[idx]).phase;
            if matches!(phase, Phase::InFlight | Phase::Abandoned) {
                self.finish(idx as u64, Err(e.clone()));
            }
        }
    }
}

impl Drop for Driver {
    /// Every normal end of the task fails what is outstanding first
    /// (`fail_all`). Without that, the task is being dropped by a panic in
    /// it or by its runtime shutting down: its callers would wait forever
    /// for completions nobody makes, and later submissions would queue for
    /// nobody. They fail instead. Only the shared state is touched: after a
    /// panic the connection's queue state cannot be trusted (a second panic
    /// while unwinding would abort the process).
    fn drop(&mut self) {
        self.set_busy(false);
        if self.failed.is_none() {
            let why = if std::thread::panicking() {
                error!(qid = self.shared.qid, "queue driver task panicked; failing its commands");
                "queue driver task panicked"
            } else {
                // A runtime shutting down, as at the exit of a program that
                // did not shut the controller down: nothing to alarm anyone.
                debug!(qid = self.shared.qid, "queue driver task dropped; failing its commands");
                "queue driver task was dropped"
            };
            self.shared.fail_orphaned(Error::ControllerLost(why.into()));
        }
    }
}

/// A held completion cell. Dropping it while the command is outstanding
/// hands the cell to the driver, which frees it when the command finishes.
pub(crate) struct Ticket<'q> {
    q: &'q QueueShared,
    idx: u32,
}

impl QueueShared {
    /// Number of commands that may be outstanding at once.
    pub(crate) fn depth(&self) -> usize {
        self.tickets.len()
    }

    pub(crate) fn send_ctrl(&self, m: DriverCtrl) {
        let _ = self.ctrl_tx.send(m);
    }

    /// Takes one ticket, waiting while the queue is full.
    pub(crate) async fn acquire(&self) -> Result<Ticket<'_>> {
        let p = self.permits.acquire().await.map_err(|_| Error::Shutdown)?;
        p.forget();
        let idx = lock(&self.free).pop().expect("a permit guarantees a free ticket");
        Ok(Ticket { q: self, idx })
    }

    /// Takes `n` tickets (at most [`Self::depth`]) at once.
    pub(crate) async fn acquire_many<'q>(&'q self, n: usize, out: &mut Vec<Ticket<'q>>) -> Result<()> {
        let n = n.min(self.depth());
        if n == 0 {
            return Ok(());
        }
        let p = self.permits.acquire_many(n as u32).await.map_err(|_| Error::Shutdown)?;
        p.forget();
        let mut f = lock(&self.free);
        for _ in 0..n {
            out.push(Ticket { q: self, idx: f.pop().expect("permits guarantee free tickets") });
        }
        Ok(())
    }

    fn release(&self, idx: u32) {
        lock(&self.free).push(idx);
        self.permits.add_permits(1);
    }

    /// Pushes submissions and wakes the driver once.
    fn push(&self, subs: impl IntoIterator<Item = Submission>) -> Result<()> {
        {
            let mut q = lock(&self.subq);
            if let Some(e) = &q.closed {
                return Err(e.clone());
            }
            q.items.extend(subs);
        }
        self.notify.notify_one();
        Ok(())
    }

    /// Runs one command: takes a ticket, submits, waits, copies read data and
    /// checks the status.
    pub(crate) async fn execute(
        &self,
        sqe: Sqe,
        payload: impl Into<Xfer<'_>>,
        timeout: Option<Duration>,
        setup: bool,
    ) -> Result<Cqe> {
        let payload = payload.into();
        check_len(payload.len())?;
        let t = self.acquire().await?;
        let info = command_info(self.qid, &sqe);
        let (data, read) = t.prepare(payload, timeout);
        t.submit(Command { sqe, data, timeout }, if setup { SETUP_BIT } else { 0 })?;
        let cqe = t.wait().await?;
        let cqe = check_status(cqe, info)?;
        if let Some(buf) = read {
            t.copy_into(buf);
        }
        Ok(cqe)
    }

    /// Runs one command that is never resubmitted: if its connection is
    /// lost before it completes, it fails with [`Error::ConnectionLost`]
    /// whatever the reconnect policy (see [`ONCE_BIT`]).
    pub(crate) async fn execute_once(&self, sqe: Sqe, payload: Payload<'_>) -> Result<Cqe> {
        check_len(payload.len())?;
        let t = self.acquire().await?;
        let info = command_info(self.qid, &sqe);
        let (data, read) = t.prepare(payload.into(), None);
        t.submit(Command { sqe, data, timeout: None }, ONCE_BIT)?;
        let cqe = check_status(t.wait().await?, info)?;
        if let Some(buf) = read {
            t.copy_into(buf);
        }
        Ok(cqe)
    }

    /// Runs one read into an owned buffer: `len` bytes are appended to `buf`
    /// (without an intermediate copy where the data allows, see the module
    /// documentation). On error the buffer is dropped.
    pub(crate) async fn execute_owned(&self, sqe: Sqe, buf: BytesMut, len: usize) -> Result<BytesMut> {
        let (r, buf) = self.execute_owned_x(sqe, buf, len).await;
        r?;
        buf.ok_or_else(|| Error::Controller("read data missing".into()))
    }

    /// [`Self::execute_owned`] that also gives the buffer back after a
    /// failed command where the driver still has it (for a retry; it may
    /// hold part of the data after the caller's bytes).
    pub(crate) async fn execute_owned_x(
        &self,
        sqe: Sqe,
        buf: BytesMut,
        len: usize,
    ) -> (Result<Cqe>, Option<BytesMut>) {
        if let Err(e) = check_len(len) {
            return (Err(e), Some(buf));
        }
        let t = match self.acquire().await {
            Ok(t) => t,
            Err(e) => return (Err(e), Some(buf)),
        };
        let info = command_info(self.qid, &sqe);
        let (data, _) = t.prepare(Xfer::ReadOwned(buf, len), None);
        if let Err(e) = t.submit(Command { sqe, data, timeout: None }, 0) {
            return (Err(e), t.take_owned());
        }
        let r = t.wait().await;
        let buf = t.take_owned();
        (r.and_then(|c| check_status(c, info)), buf)
    }

    /// Runs the two commands of a fused operation: pushed together, so
    /// they are adjacent in the submission queue (the driver sends its
    /// submissions in order), and never resubmitted after a lost connection
    /// (a resubmitted half would not be next to its partner: see
    /// [`ONCE_BIT`]). The results come back in the same order.
    pub(crate) async fn execute_fused(&self, pair: [(Sqe, Payload<'_>); 2]) -> [Result<Cqe>; 2] {
        if self.depth() < 2 {
            let e = Error::InvalidArgument("a fused operation needs a queue at least 2 commands deep".into());
            return [Err(e.clone()), Err(e)];
        }
        let ops = pair.into_iter().map(|(sqe, p)| (sqe, Xfer::P(p))).collect();
        let mut r = self.execute_batch_with(ops, ONCE_BIT).await.into_iter().map(|(r, _)| r);
        let missing = || Err(Error::Controller("fused operation: a result missing".into()));
        [r.next().unwrap_or_else(missing), r.next().unwrap_or_else(missing)]
    }

    /// Runs many commands with one submission (one wake-up of the driver,
    /// one vectored write) per group of up to [`Self::depth`] commands.
    /// Owned read buffers come back with the results (after an error too,
    /// where the driver still has them: then they may hold part of the data).
    pub(crate) async fn execute_batch(
        &self,
        ops: Vec<(Sqe, Xfer<'_>)>,
    ) -> Vec<(Result<Cqe>, Option<BytesMut>)> {
        self.execute_batch_with(ops, 0).await
    }

    /// [`Self::execute_batch`] with `bits` ([`ONCE_BIT`]) on every command.
    async fn execute_batch_with(
        &self,
        ops: Vec<(Sqe, Xfer<'_>)>,
        bits: u64,
    ) -> Vec<(Result<Cqe>, Option<BytesMut>)> {
        let mut results = Vec::with_capacity(ops.len());
        let mut ops = ops.into_iter().peekable();
        let mut tickets = Vec::new();
        let mut subs = Vec::new();
        let mut reads = Vec::new();
        while ops.peek().is_some() {
            let n = ops.len().min(self.depth());
            tickets.clear();
            if let Err(e) = self.acquire_many(n, &mut tickets).await {
                results.extend(std::iter::repeat_n((Err(e), None), ops.len()));
                return results;
            }
            subs.clear();
            reads.clear();
            let mut infos = Vec::with_capacity(n);
            for t in &tickets {
                let (sqe, payload) = ops.next().expect("counted");
                infos.push(command_info(self.qid, &sqe));
                let (data, read) = t.prepare(payload, None);
                lock(&self.tickets[t.idx as usize]).phase = Phase::InFlight;
                subs.push(Submission {
                    user_data: t.idx as u64 | bits,
                    cmd: Command { sqe, data, timeout: None },
                });
                reads.push(read);
            }
            if let Err(e) = self.push(subs.drain(..)) {
                for t in &tickets {
                    lock(&self.tickets[t.idx as usize]).phase = Phase::Idle;
                }
                results.extend(std::iter::repeat_n((Err(e), None), n));
                continue;
            }
            for ((t, info), read) in tickets.drain(..).zip(infos).zip(reads.drain(..)) {
                let r = t.wait().await;
                let owned = t.take_owned();
                let r = match r.and_then(|c| check_status(c, info)) {
                    Ok(c) => {
                        if let Some(buf) = read {
                            t.copy_into(buf);
                        }
                        (Ok(c), owned)
                    }
                    Err(e) => (Err(e), owned),
                };
                results.push(r);
            }
        }
        results
    }

    /// Records the socket's own address after a connect.
    pub(crate) fn set_local_addr(&self, addr: Option<std::net::SocketAddr>) {
        *lock(&self.local_addr) = addr;
    }

    /// The socket's own address at the last connect.
    pub(crate) fn local_addr(&self) -> Option<std::net::SocketAddr> {
        *lock(&self.local_addr)
    }

    /// The controller's MAXH2CDATA from the last ICResp (0 before one).
    pub(crate) fn maxh2cdata(&self) -> u32 {
        self.maxh2cdata.load(Ordering::Relaxed)
    }

    /// Where received read data went.
    pub(crate) fn rx_stats(&self) -> RxStats {
        RxStats {
            copied_via_chunks: self.rx.chunks.load(Ordering::Relaxed),
            copied_from_rbuf: self.rx.rbuf.load(Ordering::Relaxed),
            direct: self.rx.direct.load(Ordering::Relaxed),
        }
    }

    /// A large owned buffer left its ticket.
    fn owned_done(&self) {
        self.owned_large.fetch_sub(1, Ordering::Relaxed);
    }

    /// Driver side: the `seq` of ticket `ud` if it is in flight with an owned
    /// destination (its C2HData payloads may go straight there).
    fn owned_seq(&self, ud: u64) -> Option<u64> {
        let t = self.tickets.get((ud & 0xFFFF_FFFF) as usize)?;
        let st = lock(t);
        (st.phase == Phase::InFlight && st.owned.is_some()).then_some(st.seq)
    }

    /// Driver side: completes ticket `ud`.
    fn finish(&self, ud: u64, result: Result<Cqe>) {
        let idx = (ud & 0xFFFF_FFFF) as u32;
        let Some(t) = self.tickets.get(idx as usize) else { return };
        let waker = {
            let mut st = lock(t);
            match st.phase {
                Phase::InFlight => {
                    st.result = Some(result);
                    st.phase = Phase::Done;
                    st.waker.take()
                }
                Phase::Abandoned => {
                    if st.reset() {
                        self.owned_done();
                    }
                    drop(st);
                    self.release(idx);
                    None
                }
                p => {
                    warn!(qid = self.qid, ticket = idx, phase = ?p, "completion for a ticket not in flight");
                    None
                }
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    fn deliver_data(&self, ud: u64, offset: u32, data: Bytes) {
        if let Some(t) = self.tickets.get((ud & 0xFFFF_FFFF) as usize) {
            let mut st = lock(t);
            if st.phase != Phase::InFlight {
                return;
            }
            let base = st.owned_base;
            if let Some(buf) = st.owned.as_mut() {
                // Owned destination: data arrives in order (the queue checks DATAO).
                if buf.len() - base == offset as usize {
                    buf.extend_from_slice(&data);
                    self.rx.rbuf.fetch_add(data.len() as u64, Ordering::Relaxed);
                } else {
                    warn!(qid = self.qid, offset, have = buf.len() - base, "read data out of order; dropped");
                }
            } else {
                st.chunks.push((offset, data));
            }
        }
    }

    /// Counts one more resubmission of ticket `ud`'s command; false once it
    /// was resubmitted [`MAX_REQUEUES`] times.
    fn count_requeue(&self, ud: u64) -> bool {
        let Some(t) = self.tickets.get((ud & 0xFFFF_FFFF) as usize) else { return false };
        let mut st = lock(t);
        st.requeues = st.requeues.saturating_add(1);
        st.requeues <= MAX_REQUEUES
    }

    /// Forgets the data received so far (the command will run again).
    fn clear_data(&self, ud: u64) {
        if let Some(t) = self.tickets.get((ud & 0xFFFF_FFFF) as usize) {
            let mut st = lock(t);
            st.chunks.clear();
            let base = st.owned_base;
            if let Some(buf) = st.owned.as_mut() {
                buf.truncate(base);
            }
        }
    }

    fn close(&self, e: Error) {
        lock(&self.subq).closed = Some(e);
    }
}

impl Ticket<'_> {
    fn state(&self) -> MutexGuard<'_, TicketState> {
        lock(&self.q.tickets[self.idx as usize])
    }

    /// Turns the caller's payload into the state machine's form; returns the
    /// read buffer to fill after completion.
    fn prepare<'b>(&self, payload: Xfer<'b>, timeout: Option<Duration>) -> (DataXfer, Option<ReadDest<'b>>) {
        let mut st = self.state();
        st.timeout = timeout.unwrap_or(self.q.default_timeout);
        st.seq = st.seq.wrapping_add(1);
        st.requeues = 0;
        match payload {
            Xfer::P(Payload::None) => (DataXfer::None, None),
            Xfer::P(Payload::WriteBytes(b)) => (DataXfer::Write(b), None),
            Xfer::P(Payload::Write(b)) => {
                // Reuses the ticket's buffer once the previous command's PDUs are gone.
                st.wbuf.clear();
                st.wbuf.reserve(b.len());
                st.wbuf.extend_from_slice(b);
                (DataXfer::Write(st.wbuf.split().freeze()), None)
            }
            Xfer::P(Payload::Read(buf)) => (DataXfer::Read(buf.len() as u32), Some(ReadDest::One(buf))),
            Xfer::ReadScatter(pieces) => {
                (DataXfer::Read(pieces.total() as u32), Some(ReadDest::Pieces(pieces)))
            }
            Xfer::WriteGather(pieces) => {
                st.wbuf.clear();
                st.wbuf.reserve(pieces.iter().map(|b| b.len()).sum());
                for b in pieces {
                    st.wbuf.extend_from_slice(b);
                }
                (DataXfer::Write(st.wbuf.split().freeze()), None)
            }
            Xfer::ReadOwned(mut buf, len) => {
                // Room for all of it now: the driver appends without reallocating.
                buf.reserve(len);
                st.owned_base = buf.len();
                st.owned = Some(buf);
                st.owned_large = len > OWNED_DIRECT_MIN;
                if st.owned_large {
                    self.q.owned_large.fetch_add(1, Ordering::Relaxed);
                }
                (DataXfer::Read(len as u32), None)
            }
        }
    }

    /// Takes back the owned read buffer (after completion).
    fn take_owned(&self) -> Option<BytesMut> {
        let mut st = self.state();
        let b = st.owned.take();
        if std::mem::take(&mut st.owned_large) {
            self.q.owned_done();
        }
        b
    }

    /// Submits `cmd` from this slot; `bits` are [`SETUP_BIT`] or [`ONCE_BIT`].
    fn submit(&self, cmd: Command, bits: u64) -> Result<()> {
        self.state().phase = Phase::InFlight;
        let user_data = self.idx as u64 | bits;
        if let Err(e) = self.q.push(std::iter::once(Submission { user_data, cmd })) {
            self.state().phase = Phase::Idle;
            return Err(e);
        }
        Ok(())
    }

    async fn wait(&self) -> Result<Cqe> {
        poll_fn(|cx| {
            let mut st = self.state();
            if st.phase == Phase::Done {
                st.phase = Phase::Idle;
                let r = st.result.take().expect("done implies a result");
                let timeout = st.timeout;
                return Poll::Ready(r.map_err(|e| match e {
                    Error::Command(CommandFailure::Timeout) => Error::Timeout(timeout),
                    e => e,
                }));
            }
            if !st.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                st.waker = Some(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }

    /// Copies received read data into `dest` (each chunk at its offset).
    fn copy_into(&self, dest: ReadDest<'_>) {
        let mut st = self.state();
        let mut copied = 0;
        match dest {
            ReadDest::One(buf) => {
                for (off, data) in st.chunks.drain(..) {
                    let off = off as usize;
                    let end = (off + data.len()).min(buf.len());
                    if off < end {
                        buf[off..end].copy_from_slice(&data[..end - off]);
                        copied += end - off;
                    }
                }
            }
            ReadDest::Pieces(pieces) => {
                for (off, data) in st.chunks.drain(..) {
                    copied += pieces.put(off as usize, &data);
                }
            }
        }
        self.q.rx.chunks.fetch_add(copied as u64, Ordering::Relaxed);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut st = self.state();
        if st.phase == Phase::InFlight {
            // The caller went away (future dropped); the driver frees the slot on completion.
            // An owned read buffer stays with the ticket (the driver may be filling
            // it) and is dropped when the slot is released.
            st.phase = Phase::Abandoned;
            st.waker = None;
        } else {
            if st.reset() {
                self.q.owned_done();
            }
            drop(st);
            self.q.release(self.idx);
        }
    }
}

/// Describes `sqe` for error messages.
pub(crate) fn command_info(qid: u16, sqe: &Sqe) -> CommandInfo {
    CommandInfo {
        qid,
        opcode: sqe.opcode(),
        fctype: (sqe.opcode() == 0x7F).then(|| sqe.fctype()),
        nsid: sqe.nsid(),
    }
}

/// Maps a non-success NVMe status to [`Error::Nvme`].
pub(crate) fn check_status(cqe: Cqe, command: CommandInfo) -> Result<Cqe> {
    if cqe.status.is_success() {
        Ok(cqe)
    } else {
        Err(Error::Nvme { status: cqe.status, result: cqe.result, command })
    }
}

struct Conn {
    stream: TcpStream,
    queue: Queue,
    dec: PduDecoder,
    enc: EncodeConfig,
    rbuf: BytesMut,
    out: OutQueue,
    epoch: u64,
    /// Connect command to send once the ICResp arrives.
    connect: Option<(Command, oneshot::Sender<Result<Cqe>>)>,
    /// Reply for the Connect in flight, with its CNTLID and timeout.
    connect_reply: Option<(oneshot::Sender<Result<Cqe>>, CommandInfo, u16, Duration)>,
    connected: bool,
    release_on_connect: bool,
    /// Set when the connection must be closed after this wake-up (Connect failed).
    dead: Option<Error>,
    /// Receive state: PDUs from `rbuf`, or a C2HData payload from the socket.
    rx: RxState,
    /// Sink for payload bytes nobody wants any more.
    scratch: Vec<u8>,
}

impl Conn {
    /// Encodes every PDU the queue has to send into `out`.
    fn queue_transmits(&mut self) {
        while let Some(p) = self.queue.poll_transmit() {
            self.out.push(&p, &self.enc);
        }
    }
}

/// What the next received bytes are.
enum RxState {
    /// PDUs, decoded from `rbuf`.
    Pdus,
    /// The rest of a C2HData payload, read from the socket straight into the
    /// command's owned buffer (`rbuf` is empty meanwhile).
    Payload(DirectRx),
    /// The payload is in; its 4-byte data digest (if negotiated) is next in `rbuf`.
    Tail(DirectRx),
}

/// A C2HData payload being moved into an owned destination.
struct DirectRx {
    h: C2hHeader,
    /// Ticket index and command sequence the destination belongs to.
    ud: u64,
    seq: u64,
    /// Payload bytes consumed so far.
    done: usize,
    /// CRC32C of the payload so far (with data digests).
    crc: u32,
    /// The destination went away (command timed out, caller gone): drop the bytes.
    discard: bool,
}

/// Outcome of writing payload bytes into a ticket's owned buffer.
enum Place {
    Placed(usize),
    Gone,
}

impl DirectRx {
    /// Runs `f` on the destination if it still belongs to this command;
    /// `f` appends to the buffer and returns how many bytes it added.
    fn place(
        &mut self,
        shared: &QueueShared,
        f: impl FnOnce(&mut BytesMut) -> io::Result<usize>,
    ) -> io::Result<Place> {
        if self.discard {
            return Ok(Place::Gone);
        }
        let Some(t) = shared.tickets.get((self.ud & 0xFFFF_FFFF) as usize) else { return Ok(Place::Gone) };
        let mut guard = lock(t);
        let st = &mut *guard;
        let expect = st.owned_base + self.h.datao as usize + self.done;
        let mine = st.phase == Phase::InFlight && st.seq == self.seq;
        match st.owned.as_mut() {
            Some(buf) if mine && buf.len() == expect => {
                let before = buf.len();
                let n = f(buf)?;
                if self.h.ddgst {
                    self.crc = crc32c_append(self.crc, &buf[before..before + n]);
                }
                Ok(Place::Placed(n))
            }
            _ => {
                self.discard = true;
                Ok(Place::Gone)
            }
        }
    }

    fn remaining(&self) -> usize {
        self.h.datal as usize - self.done
    }
}

struct Driver {
    shared: Arc<QueueShared>,
    ctrl_rx: mpsc::UnboundedReceiver<DriverCtrl>,
    sup_tx: Option<mpsc::UnboundedSender<SupMsg>>,
    conn: Option<Conn>,
    parked: VecDeque<Submission>,
    released: bool,
    failed: Option<Error>,
    /// Commands that would wait for a reconnect fail instead (set by
    /// [`DriverCtrl::FailFast`], cleared once the queue is live again).
    failing_fast: bool,
    requeue: bool,
    busy_poll: PollWindow,
    /// Start of the current busy-poll window (reset by activity).
    spin_since: Option<Instant>,
    /// When the last spin gave up with commands outstanding: how long the
    /// sleep after it lasts until work arrives tunes `busy_poll`.
    slept: Option<Instant>,
    /// See [`DriverParams::busy_queues`]; this queue counts itself in it
    /// while `counted_busy`.
    busy_queues: Arc<AtomicUsize>,
    counted_busy: bool,
    /// See [`DriverParams::comp_seen`].
    comp_seen: Option<Arc<AtomicBool>>,
    /// This queue's turn on its worker thread (see [`nvmeof_net::FairShare`]).
    share: nvmeof_net::FairShare,
    /// Worker threads of the runtime the driver runs on.
    workers: usize,
    local: Vec<Submission>,
    span: tracing::Span,
}

/// What one busy-poll check found.
enum Spin {
    /// Polling is off, nothing is outstanding, or the window ran out: sleep in epoll.
    Off,
    /// Data or submissions arrived.
    Work,
    /// Nothing yet: let the runtime's other tasks run, then check again.
    Idle,
    /// The socket reported its end (or an error): `pump` must read to see it.
    Failed,
}

async fn conn_ready(conn: &Option<Conn>) -> io::Result<tokio::io::Ready> {
    match conn {
        Some(c) => {
            let interest =
                if c.out.is_empty() { Interest::READABLE } else { Interest::READABLE | Interest::WRITABLE };
            c.stream.ready(interest).await
        }
        None => std::future::pending().await,
    }
}

/// Sleeps until `deadline`; forever where it is `None`.
pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

impl Driver {
    async fn run(mut self) {
        // Whether `pump` reads the socket. While busy polling, `spin` reads
        // the socket itself (non-blocking `recv`); a `recv` in
        // `pump` as well would mostly answer `WouldBlock` (at QD1 it was 1.9 of
        // 4.9 `recv` calls per I/O, one of them between submit and send).
        let mut read = true;
        loop {
            loop {
                match self.ctrl_rx.try_recv() {
                    Ok(m) => {
                        if self.on_ctrl(m) {
                            return;
                        }
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        self.fail_all(Error::Shutdown);
                        return;
                    }
                }
            }
            self.take_submissions();
            let mut budget_hit = false;
            if self.conn.is_some() {
                match self.pump(read) {
                    Ok(b) => budget_hit = b,
                    Err(e) => self.drop_conn(e, true),
                }
            }
            read = true;
            if budget_hit {
                tokio::task::yield_now().await;
                continue;
            }
            match self.spin() {
                Spin::Work => {
                    // `spin` has just asked the socket (and read what it had):
                    // its next check comes before another `recv` is worth it.
                    read = false;
                    continue;
                }
                Spin::Idle => {
                    // Other queues' drivers and the callers that submit share
                    // this thread: spinning without yielding would starve them.
                    tokio::task::yield_now().await;
                    read = false;
                    continue;
                }
                Spin::Failed => {
                    // A `recv` in `pump` finds the end again (or the error is
                    // followed by the end) and drops the connection.
                    self.spin_since = None;
                    continue;
                }
                Spin::Off => {}
            }
            let deadline = self.conn.as_ref().and_then(|c| c.queue.poll_timeout());
            tokio::select! {
                biased;
                m = self.ctrl_rx.recv() => match m {
                    Some(m) => {
                        if self.on_ctrl(m) {
                            return;
                        }
                    }
                    None => {
                        self.fail_all(Error::Shutdown);
                        return;
                    }
                },
                r = conn_ready(&self.conn) => {
                    self.woke();
                    if let Err(e) = r {
                        self.drop_conn(Error::io(e), true);
                    }
                }
                // New submissions: the socket had nothing (`conn_ready` is
                // polled first), so `pump` only writes.
                _ = self.shared.notify.notified() => {
                    self.woke();
                    read = false;
                }
                _ = sleep_until(deadline) => {}
            }
        }
    }

    /// Optional busy poll: while commands are outstanding, check the socket
    /// and the submission list for a bounded time after activity before
    /// sleeping in epoll (wake-ups cost ~50 µs on idle virtual machines).
    fn spin(&mut self) -> Spin {
        if !self.busy_poll.enabled() {
            return Spin::Off;
        }
        let Some(c) = self.conn.as_mut() else { return Spin::Off };
        if c.queue.outstanding() == 0 {
            self.spin_since = None;
            return Spin::Off;
        }
        let now = Instant::now();
        let since = *self.spin_since.get_or_insert(now);
        if now.duration_since(since) >= self.busy_poll.current() {
            self.spin_since = None;
            self.slept = Some(now);
            return Spin::Off;
        }
        // A non-blocking `recv` straight away, not a `poll(2)` first: when the
        // response is there, the check that finds it is the read that takes it,
        // one syscall (~0.4 µs) less on the path of every response (4 KiB QD1
        // reads with polling: p50 13.4 against 15.1 µs, with the target doing
        // the same; AMD EPYC VM). Bytes read here are decoded (or were placed)
        // by the next `pump`.
        match read_some(c, &self.shared) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Ok(n) if n > 0 => {
                self.spin_since = None;
                return Spin::Work;
            }
            // The peer closed (or the socket failed). Reported as `Work`, the
            // next `pump` did not read (`read` false), so the close was never
            // seen: every spin said `Work` again and restarted the window, and
            // the task spun without yielding until a command deadline reset
            // the connection.
            _ => return Spin::Failed,
        }
        if !lock(&self.shared.subq).items.is_empty() {
            self.spin_since = None;
            return Spin::Work;
        }
        Spin::Idle
    }

    /// Work woke the task from a sleep: if a spin had given up before it,
    /// the sleep's length tunes the poll window.
    fn woke(&mut self) {
        if let Some(t) = self.slept.take() {
            self.busy_poll.woke_after(t.elapsed());
        }
    }

    /// Returns true when the task must stop.
    fn on_ctrl(&mut self, m: DriverCtrl) -> bool {
        match m {
            DriverCtrl::Attach { stream, cfg, connect, epoch, release, reply } => {
                self.drop_conn(Error::ConnectionLost, false);
                // A Release meant for an earlier connection (sent after that
                // one was already lost: `drop_conn` had nothing to reset) must
                // not let parked commands onto this one before its Connect,
                // and authentication, are done.
                self.released = false;
                if let Some(e) = &self.failed {
                    let _ = reply.send(Err(e.clone()));
                    return false;
                }
                let queue = Queue::new(cfg, Instant::now());
                let digest_window = nvmeof_net::app_data_digest_window();
                let mut c = Conn {
                    stream,
                    dec: PduDecoder::new(queue.decoder_config()),
                    enc: queue.encode_config(),
                    queue,
                    rbuf: BytesMut::with_capacity(128 << 10),
                    out: {
                        let mut out = OutQueue::new(SMALL_PAYLOAD);
                        out.set_digest_window(digest_window);
                        out
                    },
                    epoch,
                    connect: Some((connect, reply)),
                    connect_reply: None,
                    connected: false,
                    release_on_connect: release,
                    dead: None,
                    rx: RxState::Pdus,
                    scratch: Vec::new(),
                };
                c.queue_transmits();
                debug!(epoch, "attached");
                self.conn = Some(c);
            }
            DriverCtrl::Detach => self.drop_conn(Error::ConnectionLost, false),
            DriverCtrl::Release => {
                self.released = true;
                self.failing_fast = false;
                self.flush_parked(Instant::now());
            }
            DriverCtrl::FailFast => self.fail_fast(),
            DriverCtrl::Fail(e) => self.fail_all(e),
            DriverCtrl::Shutdown => {
                self.fail_all(Error::Shutdown);
                return true;
            }
        }
        false
    }

    fn fail_all(&mut self, e: Error) {
        self.failed = Some(e.clone());
        self.shared.close(e.clone());
        self.drop_conn(e.clone(), false);
        self.take_submissions();
        for s in self.parked.drain(..) {
            self.shared.finish(s.user_data, Err(e.clone()));
        }
    }

    /// [`DriverCtrl::FailFast`]: unless the queue is live, the commands
    /// waiting for a reconnect fail now, and so do new ones until it is.
    fn fail_fast(&mut self) {
        if self.released && self.conn.as_ref().is_some_and(|c| c.connected) {
            return;
        }
        self.failing_fast = true;
        self.take_submissions();
        let n = self.parked.len();
        for s in self.parked.drain(..) {
            self.shared.finish(s.user_data, Err(Error::ConnectionLost));
        }
        debug!(failed = n, "fast_io_fail_timeout: commands waiting for a reconnect fail");
    }

    fn take_submissions(&mut self) {
        let mut local = std::mem::take(&mut self.local);
        std::mem::swap(&mut lock(&self.shared.subq).items, &mut local);
        if local.is_empty() {
            self.local = local;
            return;
        }
        let now = Instant::now();
        for s in local.drain(..) {
            self.route(s, now);
        }
        self.local = local;
    }

    fn route(&mut self, s: Submission, now: Instant) {
        if let Some(e) = &self.failed {
            self.shared.finish(s.user_data, Err(e.clone()));
            return;
        }
        let setup = s.user_data & SETUP_BIT != 0;
        match self.conn.as_mut() {
            Some(c) if c.connected && (setup || (self.released && self.parked.is_empty())) => {
                match c.queue.submit(s.user_data, s.cmd, now) {
                    Ok(_) => {}
                    Err(SubmitError::Full(cmd)) | Err(SubmitError::NotLive(cmd)) => {
                        self.parked.push_back(Submission { user_data: s.user_data, cmd })
                    }
                }
            }
            // Setup commands belong to one connection attempt; without it they fail.
            _ if setup || self.failing_fast => self.shared.finish(s.user_data, Err(Error::ConnectionLost)),
            _ => self.parked.push_back(s),
        }
    }

    fn flush_parked(&mut self, now: Instant) {
        let Some(c) = self.conn.as_mut() else { return };
        if !c.connected || !self.released {
            return;
        }
        while let Some(s) = self.parked.pop_front() {
            match c.queue.submit(s.user_data, s.cmd, now) {
                Ok(_) => {}
                Err(SubmitError::Full(cmd)) | Err(SubmitError::NotLive(cmd)) => {
                    self.parked.push_front(Submission { user_data: s.user_data, cmd });
                    break;
                }
            }
        }
    }

    /// One round of socket work: write new commands, read (when `read`) and
    /// handle PDUs, expire deadlines, deliver events, write everything queued.
    fn pump(&mut self, read: bool) -> Result<bool> {
        let now = Instant::now();
        // New commands go out before the socket is read: a command submitted
        // to a quiet queue (QD1) should not wait for a `recv` that finds nothing.
        let c = self.conn.as_mut().expect("pump needs a connection");
        if c.dead.is_none() {
            c.queue_transmits();
            write_out(&c.stream, &mut c.out).map_err(Error::io)?;
        }
        let mut budget = if read { READ_BUDGET } else { 0 };
        let outstanding = c.queue.outstanding();
        self.set_busy(self.shared.qid != 0 && outstanding > 0);
        // A queue alone on its thread hands completions to the callers after
        // half of what it had outstanding, so their next commands go out
        // (written first in the next round) while the rest are read: the
        // target then works on one half while this side works on the other.
        // Read in one go, the whole depth goes back and forth as one batch
        // and each side idles while the other works. With the target's
        // writes every 16 PDUs (target/src/transport/tcp.rs), one queue at
        // QD32 went from 198–218K to 314–325K 4 KiB reads without polling
        // and from 214–241K to 321–404K writes (A/B, alternating runs).
        // With more busy queues than threads the others fill those gaps, and
        // the smaller batches only cost syscalls: applied to 2 queues at
        // QD32 it cost 7–23 %.
        let cmd_budget = if self.busy_queues.load(Ordering::Relaxed) <= self.workers {
            (outstanding / 2).max(4)
        } else {
            usize::MAX
        };
        let mut completed = 0;
        let mut budget_hit = false;
        let (mut got, mut drained) = (0, false);
        while budget > 0 {
            let c = self.conn.as_mut().expect("pump needs a connection");
            match read_some(c, &self.shared) {
                Ok(0) => return Err(Error::closed()),
                Ok(n) => {
                    got += n;
                    decode_all(c, &self.shared, now)?;
                    completed += self.dispatch(now);
                    budget = budget.saturating_sub(n);
                    if budget == 0 {
                        break;
                    }
                    if completed >= cmd_budget {
                        budget_hit = true;
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    drained = true;
                    break;
                }
                Err(e) => return Err(Error::io(e)),
            }
        }
        // A socket that never runs dry must not keep the other queues (and
        // the callers) of this thread waiting: yield once the share is used.
        if drained {
            self.share.waited();
        } else if self.share.busy(got) {
            budget_hit = true;
        }
        let c = self.conn.as_mut().expect("still connected");
        // Data read by `spin` is decoded here too.
        decode_all(c, &self.shared, now)?;
        let expired = c.queue.handle_timeout(now).map_err(|e| match e {
            // Documented as a timeout (`ConnectOptions::connect_timeout`, `Error::Timeout`):
            // a port that accepts but never answers the ICReq is not a protocol error.
            QueueError::HandshakeTimeout => Error::Timeout(c.queue.config().icresp_timeout),
            e => Error::Protocol(e),
        })?;
        self.dispatch(now);
        if let Some(t) = expired {
            // The timed-out commands have been failed above; the rest are
            // requeued (or failed) when the connection drops, and the
            // supervisor re-establishes the association (Linux error recovery).
            warn!(timeout = ?t, "command timed out; resetting the connection");
            return Err(Error::Timeout(t));
        }
        self.flush_parked(now);
        let c = self.conn.as_mut().expect("still connected");
        if let Some(e) = c.dead.take() {
            // Flush what is queued (best effort) and close without telling the supervisor:
            // the Connect reply already carries the error.
            let _ = write_out(&c.stream, &mut c.out);
            self.drop_conn(e, false);
            return Ok(false);
        }
        c.queue_transmits();
        write_out(&c.stream, &mut c.out).map_err(Error::io)?;
        if c.queue.outstanding() == 0 {
            self.set_busy(false);
        }
        Ok(budget_hit)
    }

    /// Counts this queue in (or out of) the controller's busy I/O queues.
    fn set_busy(&mut self, busy: bool) {
        if busy != self.counted_busy {
            self.counted_busy = busy;
            if busy {
                self.busy_queues.fetch_add(1, Ordering::Relaxed);
            } else {
                self.busy_queues.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Hands queue events to tickets and handles the driver's own Connect.
    fn dispatch(&mut self, now: Instant) -> usize {
        let mut done = 0;
        let Some(c) = self.conn.as_mut() else { return 0 };
        if c.queue.is_live() {
            if let Some((cmd, reply)) = c.connect.take() {
                if let Some(n) = c.queue.negotiated() {
                    self.shared.maxh2cdata.store(n.maxh2cdata, Ordering::Relaxed);
                }
                let info = command_info(c.queue.config().qid, &cmd.sqe);
                // CNTLID from the Connect data (offset 16), for the span of I/O queues.
                let cntlid = match &cmd.data {
                    DataXfer::Write(b) if b.len() >= 18 => u16::from_le_bytes([b[16], b[17]]),
                    _ => 0xFFFF,
                };
                let timeout = cmd.timeout.unwrap_or(c.queue.config().command_timeout);
                match c.queue.submit(CONNECT_UD, cmd, now) {
                    Ok(_) => c.connect_reply = Some((reply, info, cntlid, timeout)),
                    Err(_) => {
                        let _ = reply.send(Err(Error::Controller("cannot submit Connect".into())));
                        c.dead = Some(Error::ConnectionLost);
                    }
                }
            }
        }
        let mut became_connected = false;
        while let Some(ev) = c.queue.poll_event() {
            match ev {
                Event::Data { user_data, offset, data } => self.shared.deliver_data(user_data, offset, data),
                Event::Completion { user_data: CONNECT_UD, result, .. } => {
                    let Some((reply, info, cntlid, timeout)) = c.connect_reply.take() else { continue };
                    let r = match result {
                        Ok(cqe) => check_status(cqe, info),
                        // Like every other command's (`Ticket::wait`): a Connect that
                        // gets no answer is `Error::Timeout`, not `Error::Command`.
                        Err(CommandFailure::Timeout) => Err(Error::Timeout(timeout)),
                        Err(f) => Err(Error::Command(f)),
                    };
                    match &r {
                        Ok(cqe) => {
                            c.connected = true;
                            became_connected = true;
                            // AUTHREQ (ATR, ASCR): the controller refuses other
                            // commands until the queue has authenticated
                            // (01h/91h with DNR), so keep them parked.
                            if cqe.dw0() & (CONNECT_AUTHREQ_ATR | CONNECT_AUTHREQ_ASCR) != 0 {
                                c.release_on_connect = false;
                            }
                            let id = if c.queue.config().qid == 0 { cqe.dw0() as u16 } else { cntlid };
                            self.span.record("cntlid", id);
                        }
                        Err(e) => c.dead = Some(e.clone()),
                    }
                    let _ = reply.send(r);
                }
                Event::Completion { user_data, result, .. } => {
                    self.shared.finish(user_data, result.map_err(Error::Command));
                    done += 1;
                }
            }
        }
        if became_connected {
            debug!("queue connected");
            if c.release_on_connect {
                self.released = true;
                self.failing_fast = false;
            }
            self.flush_parked(now);
        }
        if done > 0 {
            if let Some(seen) = &self.comp_seen {
                // Read first: the line stays shared until keep-alive clears it.
                if !seen.load(Ordering::Relaxed) {
                    seen.store(true, Ordering::Relaxed);
                }
            }
        }
        done
    }

    /// Closes the connection. Outstanding commands are parked for
    /// resubmission (policy `requeue`) or failed; the supervisor hears about
    /// it when `report` is set and the queue had been connected.
    fn drop_conn(&mut self, err: Error, report: bool) {
        self.set_busy(false);
        let Some(mut c) = self.conn.take() else { return };
        if report {
            warn!(error = %err, "connection lost");
        } else {
            debug!(reason = %err, "connection closed");
        }
        // Responses already in the socket's receive buffer are read first,
        // unless the stream itself is what failed (a protocol error leaves
        // the decoder mid-PDU). A queue dropped because another one failed
        // (the reconnect's `Detach`), or whose write failed on a reset
        // connection, may hold completions the controller sent before the
        // end: without this they were resubmitted (executed twice) or, for
        // commands sent once, failed with `ConnectionLost` although they
        // had run. (Linux's error recovery cancels them too, after stopping
        // the queue's socket.) The read is non-blocking and bounded.
        if !matches!(err, Error::Protocol(_)) {
            let salvaged = salvage(&mut c, &self.shared);
            if salvaged > 0 {
                debug!(bytes = salvaged, "read the responses left in the socket");
            }
        }
        if let Some((_, reply)) = c.connect.take() {
            let _ = reply.send(Err(err.clone()));
        }
        if let Some((reply, ..)) = c.connect_reply.take() {
            let _ = reply.send(Err(err.clone()));
        }
        // Deliver what completed before the failure.
        while let Some(ev) = c.queue.poll_event() {
            match ev {
                Event::Data { user_data, offset, data } => self.shared.deliver_data(user_data, offset, data),
                Event::Completion { user_data: CONNECT_UD, .. } => {}
                Event::Completion { user_data, result, .. } => {
                    self.shared.finish(user_data, result.map_err(Error::Command))
                }
            }
        }
        let mut requeue = Vec::new();
        for (ud, cmd) in c.queue.drain_outstanding() {
            if ud == CONNECT_UD {
                continue;
            }
            self.shared.clear_data(ud);
            if let Some(e) = &self.failed {
                self.shared.finish(ud, Err(e.clone()));
            } else if ud & SETUP_BIT != 0 {
                self.shared.finish(ud, Err(err.clone()));
            } else if self.requeue && ud & ONCE_BIT == 0 && self.shared.count_requeue(ud) {
                requeue.push(Submission { user_data: ud, cmd });
            } else {
                self.shared.finish(ud, Err(Error::ConnectionLost));
            }
        }
        for s in requeue.into_iter().rev() {
            self.parked.push_front(s);
        }
        self.released = false;
        if report && c.connected {
            if let Some(tx) = &self.sup_tx {
                let _ = tx.send(SupMsg::QueueLost { qid: self.shared.qid, epoch: c.epoch, error: err });
            }
        }
    }
}

/// Reads at most [`SALVAGE_BUDGET`] bytes of what a connection being dropped
/// still holds and decodes them (handing their events to the queue), until
/// the socket is empty, ends or fails, or a PDU is bad. Returns the bytes read.
fn salvage(c: &mut Conn, shared: &QueueShared) -> usize {
    let now = Instant::now();
    let mut total = 0;
    // Undecoded bytes read by `spin` come first.
    if decode_all(c, shared, now).is_err() {
        return 0;
    }
    while total < SALVAGE_BUDGET {
        match read_some(c, shared) {
            Ok(n) if n > 0 => {
                total += n;
                if decode_all(c, shared, now).is_err() {
                    break;
                }
            }
            _ => break,
        }
    }
    total
}

/// Reads what the socket has: the rest of a C2HData payload straight into
/// its destination, or PDUs into the receive buffer. `Ok(0)`: the peer closed.
fn read_some(c: &mut Conn, shared: &QueueShared) -> io::Result<usize> {
    if let RxState::Payload(d) = &mut c.rx {
        let n = read_payload(d, &c.stream, &mut c.scratch, shared)?;
        if d.remaining() == 0 {
            let RxState::Payload(d) = std::mem::replace(&mut c.rx, RxState::Pdus) else { unreachable!() };
            c.rx = RxState::Tail(d);
        }
        return Ok(n);
    }
    if c.rbuf.capacity() - c.rbuf.len() < 16 << 10 {
        // Half the initial capacity, so a unique buffer is reclaimed in place.
        c.rbuf.reserve(128 << 10);
    }
    if shared.owned_large.load(Ordering::Relaxed) > 0 {
        // Leave large payloads in the socket for `read_payload`.
        recv_buf(&c.stream, &mut (&mut c.rbuf).limit(OWNED_READ_CAP))
    } else {
        recv_buf(&c.stream, &mut c.rbuf)
    }
}

/// Reads payload bytes of `d` from the socket into its destination (or the
/// scratch buffer once the destination is gone). `Ok(0)`: the peer closed.
fn read_payload(
    d: &mut DirectRx,
    stream: &TcpStream,
    scratch: &mut Vec<u8>,
    shared: &QueueShared,
) -> io::Result<usize> {
    let want = d.remaining();
    debug_assert!(want > 0);
    let n = match d.place(shared, |buf| recv_buf(stream, &mut buf.limit(want)))? {
        Place::Placed(n) => {
            shared.rx.direct.fetch_add(n as u64, Ordering::Relaxed);
            n
        }
        Place::Gone => {
            if scratch.is_empty() {
                scratch.resize(DISCARD_CHUNK, 0);
            }
            let m = want.min(scratch.len());
            recv_buf(stream, &mut &mut scratch[..m])?
        }
    };
    d.done += n;
    Ok(n)
}

/// If `rbuf` starts with the header of a C2HData PDU whose payload has not
/// all arrived and whose command reads into an owned buffer, starts moving the
/// payload there: the bytes already buffered are copied, the rest will be read
/// from the socket ([`RxState::Payload`]). Returns whether it did.
fn start_direct(c: &mut Conn, shared: &QueueShared) -> Result<bool> {
    if c.rbuf.len() < CH_LEN || c.rbuf[0] != PduType::C2H_DATA.0 || !c.queue.is_live() {
        return Ok(false);
    }
    let proto = |e: nvmeof_common::DecodeError| Error::Protocol(e.into());
    let layout = c.dec.layout(&CommonHeader::decode(&c.rbuf[..CH_LEN])).map_err(proto)?;
    if c.rbuf.len() < layout.data_start || c.rbuf.len() + OWNED_READ_CAP > layout.ch.plen as usize {
        // Header incomplete (wait), or the whole PDU is here or less than one
        // capped `recv` of it is missing: the decoder's path, after the next
        // `recv`. Reading a small remainder straight into the destination
        // would cost a `recv` per payload: with 4 KiB reads at QD32 that was
        // 1.1 `recv` per I/O (0.64 without), and 10–12 % fewer IOPS.
        return Ok(false);
    }
    let h = C2hHeader::parse(&layout, &c.rbuf[..layout.data_start]).map_err(proto)?;
    let Some(ud) = c.queue.user_data_of(h.cccid) else { return Ok(false) };
    let Some(seq) = shared.owned_seq(ud) else { return Ok(false) };
    if c.queue.c2h_begin(&h)?.is_none() {
        return Ok(false);
    }
    c.rbuf.advance(h.data_start);
    let mut d = DirectRx { h, ud, seq, done: 0, crc: 0, discard: false };
    let n = c.rbuf.len().min(h.datal as usize);
    let head = c.rbuf.split_to(n);
    if let Place::Placed(_) = d
        .place(shared, |buf| {
            buf.extend_from_slice(&head);
            Ok(head.len())
        })
        .map_err(Error::io)?
    {
        shared.rx.rbuf.fetch_add(n as u64, Ordering::Relaxed);
    }
    d.done = n;
    c.rx = if d.remaining() > 0 { RxState::Payload(d) } else { RxState::Tail(d) };
    Ok(true)
}

/// Decodes and handles every complete PDU in the receive buffer.
fn decode_all(c: &mut Conn, shared: &QueueShared, now: Instant) -> Result<()> {
    // The decoder accepts C2HData as long as the longest read submitted
    // (`Queue::decoder_config`), and reads are submitted between calls. With
    // the configured limit alone, a longer read's data in one PDU (as Linux
    // nvmet sends it) was a protocol error: the connection was reset and the
    // requeued read failed the same way again.
    if c.queue.is_live() {
        let limit = c.queue.decoder_config().max_data_pdu;
        if c.dec.config().max_data_pdu != limit {
            c.dec.set_config(c.queue.decoder_config());
        }
    }
    loop {
        match &c.rx {
            RxState::Pdus => {}
            // Payload bytes come from the socket; `rbuf` is empty until they are in.
            RxState::Payload(_) => return Ok(()),
            RxState::Tail(d) if d.h.ddgst && c.rbuf.len() < DIGEST_LEN => return Ok(()),
            RxState::Tail(_) => {
                let RxState::Tail(d) = std::mem::replace(&mut c.rx, RxState::Pdus) else { unreachable!() };
                // A discarded payload's digest is not checked: nobody wants the data.
                let ok = !d.h.ddgst || c.rbuf.get_u32_le() == d.crc || d.discard;
                c.queue.c2h_end(&d.h, ok)?;
                continue;
            }
        }
        if start_direct(c, shared)? {
            continue;
        }
        // Peek the C2HData header so a data digest error can be attributed (the decoder
        // consumes the PDU and reports only the CID).
        let peek = (c.rbuf.len() >= 24 && c.rbuf[0] == PduType::C2H_DATA.0)
            .then(|| (u32::from_le_bytes(c.rbuf[16..20].try_into().expect("4 bytes")), c.rbuf[1]));
        match c.dec.decode(&mut c.rbuf) {
            Ok(Some(pdu)) => {
                let was_live = c.queue.is_live();
                c.queue.handle_pdu(pdu, now)?;
                if !was_live && c.queue.is_live() {
                    c.dec.set_config(c.queue.decoder_config());
                    c.enc = c.queue.encode_config();
                }
            }
            Ok(None) => return Ok(()),
            Err(DecodeError::DataDigest { cccid, .. }) => {
                let (datal, flags) = peek.unwrap_or((0, 0));
                let success = flags & nvmeof_common::pdu::PduFlags::SUCCESS != 0;
                warn!(cid = cccid, "C2HData data digest mismatch");
                c.queue.handle_data_digest_error(cccid, datal, success)?;
            }
            Err(e) => return Err(Error::Protocol(e.into())),
        }
    }
}

#[cfg(test)]
mod tests;
