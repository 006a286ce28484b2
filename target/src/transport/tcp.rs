//! NVMe/TCP transport: listeners and the per-connection driver task.
//!
//! One task per connection (= per queue) owns the socket and the
//! [`QueueState`]; it reads whatever is available, lets the state machine
//! consume whole PDUs, and writes all queued PDUs with vectored writes. Backend
//! completions arrive on the queue's own channel, so no lock or thread hop is
//! shared with other queues; io_uring completions are reaped by the task
//! itself from the queue's own ring (woken through its eventfd when asleep),
//! so they cross no thread either. With `poll_us` > 0 the task spins on non-blocking
//! reads for that long after activity before sleeping in epoll (the wake-up
//! of an idle core costs ~50 µs on these machines); the window adapts up to
//! 8× that while sleeps keep ending soon after they start ([`PollWindow`]).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use nvmeof_net::{readable_now, recv_buf, PollWindow};
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, info_span, warn, Instrument};

use crate::backend::{IoCompletion, QueueIo};
use crate::cmd::QueueCtx;
use crate::core::controller::Teardown;
use crate::core::Target;
use crate::queue::{Phase, QueueState};

/// PDUs handled before what they produced is written out. A `writev` of a
/// whole queue depth of responses reaches the host only as the call ends, so
/// the host idles meanwhile; writing every 16 lets it start on the first part
/// while the target prepares the rest. With the initiator's half-depth
/// batches, one queue at QD32 went from 198–218K to 314–325K 4 KiB reads
/// without polling and from 327–452K to 373–493K with it; 2 queues were
/// unchanged within noise.
/// A byte limit (64 KiB) did as well at 4 KiB but halved 128 KiB reads: one
/// `writev` per 128 KiB PDU doubled the target's CPU per I/O.
const FLUSH_EVERY: usize = 16;

/// A PDU whose unreceived rest is at least this large is waited for whole
/// ([`handle_received`]).
const RCVLOWAT_MIN: usize = 32 * 1024;
/// The largest low mark set (a longer rest is received in pieces of this size).
const RCVLOWAT_MAX: usize = 256 * 1024;

/// Handles the PDUs in `rx` ([`QueueState::handle_pdus`], up to
/// [`FLUSH_EVERY`]; returns whether more wait), then sets `SO_RCVLOWAT` for
/// what is left (`rx` starts at a PDU): the rest of a partly received PDU
/// when it is large, else 1 (also once the queue is closing). The socket then reports readable (the lockless
/// check of the busy-poll loop, and epoll) only once that much has arrived,
/// so a 128 KiB write is not received piecemeal, each `recv` taking the
/// socket lock while the host's segments keep arriving (and the segments
/// then go through the socket's backlog on this core). 128 KiB sequential
/// writes QD16 with header and data digests, A/B against the target without
/// it (Intel Xeon VM, target and probe on a core each): 1.17x with polling on
/// both sides, 1.18x without polling; without digests 1.00x either way, and
/// 4 KiB writes 1.00x (they never set it). Safe against stalls: the header
/// has been checked (PLEN within the limits), the host must send the rest
/// anyway, and the kernel wakes the reader regardless when its receive
/// window is about to close (`tcp_data_ready`).
fn handle_received(q: &mut QueueState, rx: &mut BytesMut, stream: &TcpStream, low_mark: &mut usize) -> bool {
    let more = q.handle_pdus(rx, FLUSH_EVERY);
    // Closing: nothing more is parsed; the close must see the host's bytes and FIN as before.
    let want = if q.phase() == Phase::Closing { 1 } else { pdu_rest_mark(rx) };
    set_receive_low_mark(stream, low_mark, want);
    more
}

/// The `SO_RCVLOWAT` [`handle_received`] sets for a receive buffer.
fn pdu_rest_mark(rx: &[u8]) -> usize {
    let Some(plen) = rx.get(4..8) else { return 1 };
    let plen = u32::from_le_bytes(plen.try_into().expect("4 bytes")) as usize;
    match plen.saturating_sub(rx.len()) {
        rest if rest >= RCVLOWAT_MIN => rest.min(RCVLOWAT_MAX),
        _ => 1,
    }
}

/// After a read of at least [`ACK_BULK_READ`] bytes, acknowledges what was
/// read at once (`TCP_QUICKACK`, which also sends the ACK the kernel held).
///
/// Why: while the target is busy the kernel delays ACKs of data that waits
/// in the receive queue (`__tcp_ack_snd_check` acks at once only while the
/// window it would advertise does not shrink), so the host's ACKs ride on
/// the target's R2Ts and responses. A host whose congestion window is a few
/// packets (BBR on a 1-2 µs loopback round trip keeps ~20-28, `ss -ti`) is
/// then clocked by those instead of by what the target has taken. Intel Xeon
/// VM, loopback, BBR, target and probe on a core each, polling, 5 rounds
/// against the target without it: 128 KiB QD16 writes with digests 6.06
/// against 4.65 GB/s (4.06-6.46: the runs spread), 16 KiB QD32 with digests
/// 1.27x (3 rounds: plain 1.63x); 4 KiB writes QD32 and 128 KiB writes
/// without polling within noise (0.97-1.04x, 3 rounds); with CUBIC, whose
/// window is not a few packets, 1.0x. The kernel's nvmet does not do this;
/// SPDK has it as a socket option (`enable_quickack`, off by default). The
/// initiator does not either: there it made 128 KiB reads under BBR
/// 0.92-0.95x and left 16 KiB reads with polling unchanged (3 rounds).
fn ack_bulk_read(stream: &TcpStream, n: usize) {
    if n < ACK_BULK_READ {
        return;
    }
    // A failure only leaves the kernel's ACK timing as it was.
    let _ = socket2::SockRef::from(stream).set_quickack(true);
}

/// The smallest read [`ack_bulk_read`] acknowledges at once: more than a
/// queue depth of command capsules (32 × 72 bytes), so reads, and QD1 round
/// trips (answered with a PDU that carries the ACK anyway), pay no extra call.
const ACK_BULK_READ: usize = 16 * 1024;

/// Sets `SO_RCVLOWAT` to `want` unless it is already `*cur`.
fn set_receive_low_mark(stream: &TcpStream, cur: &mut usize, want: usize) {
    if *cur != want {
        // A failure leaves the mark as it was (the next call tries again).
        if nvmeof_net::set_int_option(stream, libc::SOL_SOCKET, libc::SO_RCVLOWAT, want as libc::c_int)
            .is_ok()
        {
            *cur = want;
        }
    }
}

/// Tuning of connection tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnOptions {
    /// Busy-poll for this many microseconds after activity before sleeping
    /// (0 = off); the window grows up to [`nvmeof_net::POLL_GROW_LIMIT`] × this
    /// while sleeps keep ending within that.
    pub poll_us: u64,
    /// `SO_SNDBUF` in bytes, 0 for the kernel's autotuning
    /// ([`nvmeof_net::default_send_buffer`] says why it is set).
    pub send_buffer: usize,
    /// TCP congestion control of every connection; `None` keeps the system's
    /// ([`nvmeof_net::set_congestion_control`] says when it matters).
    pub congestion_control: Option<nvmeof_net::CongestionControl>,
    /// `SO_PRIORITY` of every connection and listener (nvmet-tcp's
    /// `so_priority`); 0 leaves the default.
    pub so_priority: u32,
}

impl Default for ConnOptions {
    fn default() -> Self {
        Self {
            poll_us: 0,
            send_buffer: nvmeof_net::default_send_buffer(),
            congestion_control: None,
            so_priority: 0,
        }
    }
}

/// Binds a listener with SO_REUSEADDR (socket2), IPv6-only for IPv6
/// addresses, and `SO_PRIORITY` `priority` (0: none; nvmet-tcp's
/// `nvmet_tcp_add_port` sets `so_priority` there too: the SYN-ACKs carry
/// it); an error where the kernel refuses it (above 6 without
/// `CAP_NET_ADMIN`).
pub fn bind(addr: SocketAddr, priority: u32) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let domain = if addr.is_ipv6() { Domain::IPV6 } else { Domain::IPV4 };
    let s = Socket::new(domain, Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_nonblocking(true)?;
    nvmeof_net::set_priority(&s, priority).map_err(|e| {
        std::io::Error::new(e.kind(), format!("so_priority {priority}: {e} (above 6 needs CAP_NET_ADMIN)"))
    })?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    TcpListener::from_std(s.into())
}

/// Accepts connections on `listener` until `stop` flips to true.
pub async fn serve_port(
    target: Arc<Target>,
    listener: TcpListener,
    port_id: u16,
    opts: ConnOptions,
    mut stop: watch::Receiver<bool>,
) {
    match listener.local_addr() {
        Ok(local) => info!(%local, port_id, "listening"),
        Err(e) => info!(port_id, error = %e, "listening (address unknown)"),
    }
    // This port's own count (the metrics' nvmeof_port_connections).
    let on_port = target.port(port_id).map(|p| p.connections);
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    // A port a reload removed takes no connection it accepted
                    // after that (both branches may be ready at once).
                    if *stop.borrow() {
                        drop(stream);
                        break;
                    }
                    if !target.try_add_connection() {
                        warn!(%peer, limit = target.limits.max_connections, "connection limit reached; refusing connection");
                        drop(stream);
                        continue;
                    }
                    let t = target.clone();
                    let stop = stop.clone();
                    let on_port = on_port.clone();
                    if let Some(n) = &on_port {
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::spawn(async move {
                        let span = info_span!("conn", %peer, qid = tracing::field::Empty, cntlid = tracing::field::Empty);
                        run_connection(t.clone(), stream, port_id, opts, stop).instrument(span).await;
                        t.remove_connection();
                        if let Some(n) = on_port {
                            n.fetch_sub(1, Ordering::Relaxed);
                        }
                    });
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            _ = stop.changed() => break,
        }
    }
}

/// Drives one connection until it closes.
pub async fn run_connection(
    target: Arc<Target>,
    stream: TcpStream,
    port_id: u16,
    opts: ConnOptions,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    nvmeof_net::set_send_buffer(&stream, opts.send_buffer);
    // Reply with the DSCP the host marked its connection with (nvmet's
    // nvmet_tcp_set_queue_sock copies the SYN's TOS the same way).
    match nvmeof_net::mirror_received_tos(&stream) {
        Ok(Some(tos)) => debug!(tos, "sending with the type of service of the host's SYN"),
        Ok(None) => {}
        Err(e) => debug!(error = %e, "type of service of the host's SYN not read"),
    }
    // Checked at startup (config); a failure now (module unloaded since) leaves
    // the system's algorithm and the connection up.
    if let Err(e) = nvmeof_net::set_congestion_control(&stream, opts.congestion_control) {
        warn!(error = %e, "congestion control not set; the system's applies");
    }
    // nvmet_tcp_set_queue_sock: sock_set_priority(so_priority). The
    // listener took it at startup, so a failure here is unexpected.
    if let Err(e) = nvmeof_net::set_priority(&stream, opts.so_priority) {
        warn!(error = %e, so_priority = opts.so_priority, "socket priority not set");
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut ctx = QueueCtx::new(target.clone(), port_id, QueueIo::with_ring(tx));
    ctx.local_addr = stream.local_addr().ok();
    ctx.peer_addr = stream.peer_addr().ok();
    let mut q = QueueState::new(ctx);
    q.out.set_digest_window(nvmeof_net::digest_window());
    // Bytes received per wake-up before the PDUs are handled: a quarter of
    // the per-core L2, so the payloads are still in L2 when their digests are
    // checked and they are copied into the namespace. Reading everything the
    // socket held (2 MiB and more with 16 × 128 KiB writes in flight) first
    // left them in L3 or memory: 128 KiB writes ran 1.13x faster with 256 KiB
    // per pass, and 512 KiB beat 1 MiB by 8% (Intel Xeon VM, 2 MiB L2).
    let read_burst = nvmeof_net::digest_window() / 2;
    let mut rbuf = BytesMut::with_capacity(256 * 1024);
    // SO_RCVLOWAT as last set (the socket's default is 1).
    let mut low_mark = 1;
    let mut teardown: Option<watch::Receiver<Teardown>> = None;
    let icreq_deadline = Instant::now() + Duration::from_millis(target.limits.icreq_timeout_ms);
    let mut poll = PollWindow::new(Duration::from_micros(opts.poll_us));
    let mut last_activity = Instant::now();
    // Peer closed its side: nothing more can be delivered, so the queue closes
    // at once (an outstanding AER would otherwise keep it open until KATO).
    let mut eof = false;
    // Graceful shutdown: no new commands; close once in-flight I/O has completed.
    let mut draining = false;
    // Received PDUs are still waiting: handling stopped at `FLUSH_EVERY`.
    let mut more = false;
    let mut reaped: Vec<IoCompletion> = Vec::new();
    // Set once the queue is closing: what is still queued (a C2HTermReq
    // behind read data) gets this long to reach a host that does not read.
    let mut closing_deadline: Option<Instant> = None;
    // This queue's turn on its worker thread (see `FairShare`).
    let mut share = nvmeof_net::FairShare::default();
    let mut yield_due = false;

    loop {
        if std::mem::take(&mut yield_due) {
            tokio::task::yield_now().await;
        }
        // The queue's own io_uring: submit what the last pass queued (one
        // io_uring_enter for all of it) and handle what has finished, on this
        // thread.
        if uring_pass(&mut q, &mut reaped) {
            last_activity = Instant::now();
        }
        // Write out everything queued; stop at WouldBlock.
        if let Err(e) = nvmeof_net::write_out(&stream, &mut q.out) {
            debug!(error = %e, "write failed");
            break;
        }
        if more {
            more = handle_received(&mut q, &mut rbuf, &stream, &mut low_mark);
            yield_due = share.busy(0);
            continue;
        }
        if q.phase() == Phase::Closing {
            // Nothing after a TermReq is parsed: drop what the host still sends
            // instead of buffering it for as long as it leaves our last PDUs unread.
            rbuf.clear();
            if q.out.is_empty() {
                break;
            }
            let deadline = *closing_deadline.get_or_insert_with(|| Instant::now() + CLOSING_SEND_LIMIT);
            if Instant::now() >= deadline {
                warn!(
                    unsent_bytes = q.out.len(),
                    limit_ms = CLOSING_SEND_LIMIT.as_millis() as u64,
                    "closing queue: the host did not read its last PDUs in time; dropping the connection"
                );
                break;
            }
        }
        // Draining closes only once every response is on the wire: closing
        // with a PDU half written would hand the host a truncated stream.
        if eof || (draining && q.in_flight_io() == 0 && q.out.is_empty()) {
            break;
        }
        if teardown.is_none() {
            if let Some(ctrl) = &q.ctx.ctrl {
                let span = tracing::Span::current();
                span.record("qid", q.ctx.qid.unwrap_or(0));
                span.record("cntlid", ctrl.cntlid);
                teardown = Some(ctrl.teardown_watch());
            }
        }
        if let Some(t) = &teardown {
            if *t.borrow() != Teardown::Alive {
                info!(reason = ?*t.borrow(), "controller torn down; closing queue");
                break;
            }
        }

        // Adaptive polling: spin on non-blocking reads/completions for the window after activity.
        if poll.enabled() && last_activity.elapsed() < poll.current() && !draining {
            // While no large PDU is awaited (SO_RCVLOWAT at 1) the check is the
            // `recv` itself: a `poll(2)` first put one more syscall (~0.4 µs)
            // on the path of every command (4 KiB QD1 reads with polling: p50
            // 13.2 against 13.7 µs, AMD EPYC VM). Waiting for the rest of a
            // large PDU, `poll` honours the low mark where a non-blocking `recv`
            // would take every partial segment.
            if low_mark <= 1 || readable_now(&stream) {
                match recv_buf(&stream, &mut rbuf) {
                    Ok(0) => eof = true,
                    Ok(n) => {
                        ack_bulk_read(&stream, n);
                        last_activity = Instant::now();
                        more = handle_received(&mut q, &mut rbuf, &stream, &mut low_mark);
                        yield_due = share.busy(n);
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
            if let Ok(c) = rx.try_recv() {
                last_activity = Instant::now();
                q.handle_completion(c);
                yield_due = share.busy(0);
                continue;
            }
            share.waited();
            tokio::task::yield_now().await;
            continue;
        }

        submit_before_sleep(&q);
        let kato_sleep = keep_alive_deadline(&q);
        // The deadline runs until the queue is connected, not just until ICReq:
        // a host that sent ICReq (128 bytes) and nothing more otherwise held its
        // connection and its slot in the connection limit forever, as no
        // keep-alive timer runs before Connect (nvmet has no timer here at all).
        // A queue that must authenticate gets the same time for DH-HMAC-CHAP
        // (nvmet only restarts the exchange after KATO or 120 s, and keeps the
        // queue): an unauthenticated host holds nothing for longer.
        let ic_wait = ((q.ctx.ctrl.is_none() || !q.ctx.auth.authenticated) && q.phase() != Phase::Closing)
            .then_some(icreq_deadline);
        let want_write = !q.out.is_empty();
        // Polling gave up: how long this sleep lasts until work arrives tunes the window.
        let slept = (poll.enabled() && !draining).then(Instant::now);
        // While draining, bytes the host sends are left unread (unless a command
        // waits for its data): waiting for READABLE then would spin.
        let read_wanted = !draining || q.awaiting_data();
        let interest = match (read_wanted, want_write) {
            (true, true) => Interest::READABLE | Interest::WRITABLE,
            (false, _) => Interest::WRITABLE,
            (true, false) => Interest::READABLE,
        };
        tokio::select! {
            biased;
            c = rx.recv() => {
                if let Some(c) = c {
                    if let Some(t) = slept {
                        poll.woke_after(t.elapsed());
                    }
                    q.handle_completion(c);
                    while let Ok(c) = rx.try_recv() {
                        q.handle_completion(c);
                    }
                    yield_due = share.busy(0);
                }
            }
            // While draining, keep reading only for commands still waiting for H2C data.
            r = stream.ready(interest), if read_wanted || want_write => {
                let Ok(ready) = r else { break };
                if ready.is_readable() && read_wanted {
                    // The socket stays ready (no WouldBlock seen) when the burst ends.
                    let mut burst = 0;
                    let mut drained = false;
                    while burst < read_burst {
                        match recv_buf(&stream, &mut rbuf) {
                            Ok(0) => { eof = true; break; }
                            Ok(n) => {
                                burst += n;
                                // Half the buffer: a unique buffer is reclaimed in place instead of reallocated.
                                if rbuf.capacity() - rbuf.len() < 64 * 1024 { rbuf.reserve(256 * 1024); }
                                continue;
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => { drained = true; break; }
                            Err(_) => { eof = true; break; }
                        }
                    }
                    if drained {
                        share.waited();
                    } else {
                        yield_due = share.busy(burst);
                    }
                    ack_bulk_read(&stream, burst);
                    more = handle_received(&mut q, &mut rbuf, &stream, &mut low_mark);
                    last_activity = Instant::now();
                    if let Some(t) = slept {
                        poll.woke_after(last_activity - t);
                    }
                }
            }
            // The kernel finished io_uring operations (the next pass reaps them).
            _ = async { match &q.ctx.io.ring { Some(r) => r.ready().await, None => std::future::pending().await } },
                if q.ctx.io.ring.as_ref().is_some_and(|r| r.in_flight()) => {
                if let Some(t) = slept {
                    poll.woke_after(t.elapsed());
                }
            }
            _ = sleep_until_opt(kato_sleep) => {
                if let Some(ctrl) = &q.ctx.ctrl {
                    if ctrl.keep_alive_remaining() == Some(Duration::ZERO) {
                        warn!(cntlid = ctrl.cntlid, kato_ms = ctrl.kato_ms(), "keep-alive timeout expired; tearing down the controller");
                        ctrl.shutdown(Teardown::KeepAliveExpired);
                    }
                }
            }
            _ = sleep_until_opt(closing_deadline) => {}
            _ = sleep_until_opt(ic_wait) => {
                let missing = if q.phase() == Phase::AwaitIcReq {
                    "ICReq"
                } else if q.ctx.ctrl.is_none() {
                    "successful Connect"
                } else {
                    "DH-HMAC-CHAP authentication"
                };
                warn!(limit_ms = target.limits.icreq_timeout_ms, "no {missing} within the limit after accept; closing");
                break;
            }
            _ = async { match &mut teardown { Some(t) => { let _ = t.changed().await; } None => std::future::pending().await } } => {}
            _ = stop.changed(), if !draining => {
                // Graceful shutdown: finish what is in flight, then close.
                draining = true;
                q.set_draining();
            }
        }
    }

    // Commands of namespaces with reservations still in a backend count for
    // a Preempt and Abort until they complete: the connection's end does not
    // stop a write already submitted, so wait for them (nvmet's queue
    // release waits for all of its commands too).
    settle_inflight(&mut q, &mut rx, &mut reaped).await;
    if draining && !eof {
        close_gracefully(&stream).await;
    }
    // After a C2HTermReq (or the host's H2CTermReq): FIN, not RST, as when
    // draining. Closing at once with bytes of the host unread, or letting the
    // host's next bytes reach the closed socket, resets the connection and drops
    // what is still in the send buffer, the C2HTermReq at its end included,
    // whenever the host's receive window holds it back. (nvmet sends no TermReq
    // and has nothing to follow here: nvmet_tcp_fatal_error just shuts the socket.)
    let linger = !draining && !eof && q.phase() == Phase::Closing;

    // Queue teardown (nvmet_tcp_release_queue): the admin queue takes its controller with it.
    if let Some(ctrl) = &q.ctx.ctrl {
        match q.ctx.qid {
            // While draining for shutdown the I/O queues finish on their own;
            // tearing the controller down here would cut their in-flight commands.
            Some(0) if !draining => {
                info!(cntlid = ctrl.cntlid, "admin queue closed; controller removed");
                ctrl.shutdown(Teardown::Closed);
            }
            Some(0) => {}
            Some(qid) => ctrl.remove_io_queue(qid),
            None => {}
        }
    }
    if linger {
        close_gracefully(&stream).await;
    }
    debug!("connection closed");
}

/// How long a closing queue (after a fatal error) keeps sending what it has
/// queued to a host that does not read. Without it a host with KATO 0 could
/// hold the connection, its buffers and its slot in the connection limit
/// forever; nvmet shuts the socket at once (nvmet_tcp_fatal_error) and leaves
/// the rest to the kernel's orphan-socket limits.
const CLOSING_SEND_LIMIT: Duration = Duration::from_secs(5);

/// How long a queue closed by a graceful shutdown waits for the host to close
/// its side after our FIN.
const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// Ends a connection with a FIN after the last response, then discards what
/// the host still sends until it closes its side (bounded by [`CLOSE_LINGER`]).
/// Closing with unread bytes in the receive buffer (commands that arrived while
/// draining) would make the kernel send a RST instead, and a RST throws away
/// responses still in the send buffer.
async fn close_gracefully(stream: &TcpStream) {
    if socket2::SockRef::from(stream).shutdown(std::net::Shutdown::Write).is_err() {
        return;
    }
    let mut scratch = [0u8; 16 * 1024];
    let _ = tokio::time::timeout(CLOSE_LINGER, async {
        loop {
            if stream.readable().await.is_err() {
                return;
            }
            match stream.try_read(&mut scratch) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    })
    .await;
}

/// How long a closing queue waits for its commands counted in flight on
/// namespaces with reservations ([`settle_inflight`]).
const INFLIGHT_SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// Handles completions until no command counted in flight for Preempt and
/// Abort is still executing, at most [`INFLIGHT_SETTLE_LIMIT`].
async fn settle_inflight(
    q: &mut QueueState,
    rx: &mut mpsc::UnboundedReceiver<IoCompletion>,
    reaped: &mut Vec<IoCompletion>,
) {
    if !q.executing_counted() {
        return;
    }
    let deadline = Instant::now() + INFLIGHT_SETTLE_LIMIT;
    loop {
        uring_pass(q, reaped);
        submit_before_sleep(q);
        if !q.executing_counted() {
            return;
        }
        if Instant::now() >= deadline {
            warn!(
                limit_s = INFLIGHT_SETTLE_LIMIT.as_secs(),
                "closing queue: commands of namespaces with reservations still executing; closing without them"
            );
            return;
        }
        tokio::select! {
            c = rx.recv() => match c {
                Some(c) => q.handle_completion(c),
                None => return,
            },
            _ = async { match &q.ctx.io.ring { Some(r) => r.ready().await, None => std::future::pending().await } },
                if q.ctx.io.ring.as_ref().is_some_and(|r| r.in_flight()) => {}
            _ = tokio::time::sleep_until(deadline.into()) => {}
        }
    }
}

/// Submits the queue ring's new SQEs and handles its completions; true if any.
fn uring_pass(q: &mut QueueState, reaped: &mut Vec<IoCompletion>) -> bool {
    let Some(ring) = &q.ctx.io.ring else { return false };
    ring.submit();
    if !ring.reap(reaped) {
        return false;
    }
    for c in reaped.drain(..) {
        q.handle_completion(c);
    }
    true
}

/// Before the queue sleeps: submits what the last reap queued on its ring
/// (the rest of a short read or write, the next way of a Write Zeroes the
/// filesystem refused, an EAGAIN retry, operations that waited for room),
/// whose completion is what may wake it. Left for the next pass's submit,
/// they waited for unrelated work: a Read across the end of a file cut short
/// behind the target's back, or a Write Zeroes on tmpfs (no
/// FALLOC_FL_ZERO_RANGE), hung until the host's timeout. Not at the end of
/// every pass: a queue that goes on working submits them with its next
/// commands, in one io_uring_enter (an extra one at the end of every pass
/// measured 0.97-0.98x on 4 KiB reads at QD32 from a file through io_uring).
fn submit_before_sleep(q: &QueueState) {
    if let Some(ring) = &q.ctx.io.ring {
        ring.submit();
    }
}

fn keep_alive_deadline(q: &QueueState) -> Option<Instant> {
    // Only the admin queue runs the controller's keep-alive timer.
    if q.ctx.qid != Some(0) {
        return None;
    }
    let rem = q.ctx.ctrl.as_ref()?.keep_alive_remaining()?;
    Some(Instant::now() + rem)
}

async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer holding the first `have` bytes of a PDU of `plen` bytes.
    fn partial(plen: u32, have: usize) -> Vec<u8> {
        let mut b = vec![0u8; have];
        if have >= 8 {
            b[4..8].copy_from_slice(&plen.to_le_bytes());
        }
        b
    }

    #[test]
    fn low_mark_is_the_rest_of_a_large_pdu_only() {
        // No complete common header yet: any byte wakes the reader.
        assert_eq!(pdu_rest_mark(&[]), 1);
        assert_eq!(pdu_rest_mark(&partial(200_000, 7)), 1);
        // A 128 KiB write capsule (72-byte header) with 8 bytes in: the rest.
        let plen = 72 + (128 << 10);
        assert_eq!(pdu_rest_mark(&partial(plen, 8)), plen as usize - 8);
        assert_eq!(pdu_rest_mark(&partial(plen, 90_000)), plen as usize - 90_000);
        // Small rests (and small PDUs: commands, 4 KiB writes) keep the default.
        assert_eq!(pdu_rest_mark(&partial(plen, plen as usize - RCVLOWAT_MIN + 1)), 1);
        assert_eq!(pdu_rest_mark(&partial(72 + 4096, 8)), 1);
        // Complete, or more than one PDU in the buffer: nothing to wait for.
        assert_eq!(pdu_rest_mark(&partial(plen, plen as usize)), 1);
        assert_eq!(pdu_rest_mark(&partial(72, 4096)), 1);
        // A long rest (a 1 MiB H2CData) is waited for in pieces of at most RCVLOWAT_MAX.
        assert_eq!(pdu_rest_mark(&partial(24 + (1 << 20), 24)), RCVLOWAT_MAX);
    }
}
