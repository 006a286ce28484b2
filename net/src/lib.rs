//! Socket helpers shared by the target's and the initiator's TCP drivers.
//!
//! Both drivers busy-poll their sockets for a bounded time after activity
//! (`--poll-us`), which tokio's readiness-cached `try_read*` cannot do on its
//! own; the two calls here are what such a loop needs, and [`PollWindow`]
//! decides how long it spins.

#![deny(missing_docs)]

use std::os::fd::AsRawFd;
use std::time::Duration;

use bytes::BufMut;
use nvmeof_common::out::OutQueue;
use tokio::net::TcpStream;

/// Most slices one vectored write takes from an [`OutQueue`].
pub const MAX_IOV: usize = 64;

/// The data digest window for [`OutQueue::set_digest_window`] on this
/// machine: half the per-core L2 cache (between 256 KiB and 4 MiB), so the
/// payloads digested ahead of a write are still cached when the socket copies
/// them; [`nvmeof_common::out::DIGEST_WINDOW`] where the size is unknown.
pub fn digest_window() -> usize {
    static WINDOW: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *WINDOW.get_or_init(|| {
        l2_per_core().map_or(nvmeof_common::out::DIGEST_WINDOW, |l2| (l2 / 2).clamp(256 << 10, 4 << 20))
    })
}

/// The data digest window for a connection that sends the application's
/// own buffers (the initiator's write data): [`APP_DATA_DIGEST_WINDOW`], or
/// [`digest_window`] where that is larger.
///
/// Why this large, larger than the target's: the window bounds each write,
/// and short writes cost more than the cache misses a long window brings. On
/// the 2-vCPU AMD EPYC VM (1 MiB L2 per core, loopback, polling on both
/// sides, one target, windows alternated per round, digest cost against
/// plain writes as the median of per-round ratios), 128 KiB QD16 writes
/// with digests ran 0.90-0.91x plain with 2 MiB, 0.74-0.85x with 512 KiB
/// and 0.59-0.71x with 128 KiB under BBR (3 sets of 10-16 rounds, either
/// order), and 0.85-0.92x / 0.80-0.82x / 0.68-0.71x under CUBIC (2 sets);
/// 1 MiB QD4 writes 0.75x against 0.60x (512 KiB), 128 KiB writes without
/// polling 0.76x against 0.72x. An earlier rule (an eighth of the L2 unless
/// the socket ran BBR, then half of it) came from the Intel Xeon VM (2 MiB
/// L2), where 256 KiB beat 1 MiB by 1.035-1.08x under CUBIC in 3-5 rounds,
/// a gap within the spread of such runs here, and where 256 KiB halved the
/// row under BBR; on the AMD VM that rule's 128 KiB was the slowest window
/// under either algorithm.
pub fn app_data_digest_window() -> usize {
    digest_window().max(APP_DATA_DIGEST_WINDOW)
}

/// The smallest [`app_data_digest_window`]: a queue depth of 16 × 128 KiB
/// writes, digested and then written in one go.
pub const APP_DATA_DIGEST_WINDOW: usize = 2 << 20;

/// The per-core L2 cache size glibc reports, if it does.
fn l2_per_core() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: sysconf only reads a system parameter.
        let l2 = unsafe { libc::sysconf(libc::_SC_LEVEL2_CACHE_SIZE) };
        if l2 > 0 {
            return Some(l2 as usize);
        }
    }
    None
}

/// The `SO_SNDBUF` both drivers set by default on this machine: a quarter of
/// the per-core L2 cache, between 256 KiB and 1 MiB (512 KiB where the size is
/// unknown). The kernel doubles the value for its bookkeeping, so at most half
/// the L2 of payload is queued in the socket, sent but not yet taken by the
/// peer.
///
/// Why: with the kernel's autotuning the send buffer grows to 4 MiB, a
/// sender with 16 × 128 KiB outstanding keeps 2 MiB and more in flight, and
/// the receiver's copy then reads bytes the caches no longer hold. On
/// loopback (Intel Xeon VM, 2 MiB L2 per core, target and probe on a core
/// each, 3 alternating rounds against `--send-buffer 0` on both sides), 512
/// KiB gave 128 KiB QD16 writes 1.20x / 1.50x and reads 1.31x / 1.14x
/// (polling off / on), 1 MiB QD4 writes 1.36x and reads 1.40x (polling on),
/// and left 4 KiB random I/O at QD32 and QD1 within 0.96-1.05x. In an
/// earlier sweep 256 KiB gave 1.02-1.51x on the 128 KiB rows and 640 KiB
/// only 0.96-1.04x: the gain ends once more than half the L2 is in flight. The
/// same bound caps one connection's throughput on a real network at about
/// 2 × this value per round trip (1 MiB per 100 µs: 10 GB/s), so links with a
/// larger bandwidth-delay product should raise it (`--send-buffer`; 0 = the
/// kernel's autotuning).
pub fn default_send_buffer() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| l2_per_core().map_or(512 << 10, |l2| (l2 / 4).clamp(256 << 10, 1 << 20)))
}

/// Sets the socket's `SO_SNDBUF` to `bytes` (0: leaves the kernel's
/// autotuning alone). The kernel reports twice the request, or less where
/// `net.core.wmem_max` caps it (208 KiB on a stock kernel): that is logged
/// once per process (info; the capped size still bounds what is in flight).
pub fn set_send_buffer(stream: &TcpStream, bytes: usize) {
    if bytes == 0 {
        return;
    }
    let sock = socket2::SockRef::from(stream);
    match sock.set_send_buffer_size(bytes).and_then(|()| sock.send_buffer_size()) {
        Ok(got) if got < 2 * bytes => {
            static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::info!(
                    asked = bytes,
                    kernel_bytes = got,
                    "socket send buffer capped by net.core.wmem_max (raise that sysctl to get the size asked for)"
                );
            }
        }
        Ok(got) => tracing::debug!(asked = bytes, kernel_bytes = got, "socket send buffer set"),
        Err(e) => tracing::debug!(error = %e, asked = bytes, "socket send buffer not set"),
    }
}

/// `setsockopt` of an `int` option that socket2 has no call for (shared by
/// the target's and the initiator's drivers).
pub fn set_int_option(
    fd: &impl std::os::fd::AsFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    // SAFETY: a valid socket, a c_int option value of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets the socket's priority (`SO_PRIORITY`: the queueing class of its
/// packets, which `tc` filters and `mqprio` traffic classes map to NIC
/// queues and DCB priorities), as nvmet-tcp's and nvme-tcp's `so_priority`
/// module parameters do (`sock_set_priority`) on every queue's socket. 0
/// leaves the default; above 6 the kernel asks for `CAP_NET_ADMIN`
/// (`EPERM`).
pub fn set_priority(fd: &impl std::os::fd::AsFd, priority: u32) -> std::io::Result<()> {
    if priority == 0 {
        return Ok(());
    }
    let value = libc::c_int::try_from(priority)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "priority out of range"))?;
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_PRIORITY, value)
}

/// The socket's `SO_PRIORITY`.
pub fn priority(fd: &impl std::os::fd::AsFd) -> std::io::Result<u32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket, a c_int buffer of the size given.
    let r = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PRIORITY,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if r == 0 {
        Ok(value as u32)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The options that carry a connection's type of service: IPv4's (an IPv4
/// socket, or an IPv6 socket's IPv4-mapped connection: its packets are IPv4
/// and take `IP_TOS`) or IPv6's (`IPV6_TCLASS`).
#[derive(Clone, Copy)]
struct TosOptions {
    level: libc::c_int,
    /// Makes the kernel keep the received value.
    report: libc::c_int,
    /// Reads the kept packet options (control messages).
    read: libc::c_int,
    /// The control message (and socket option) of the value.
    kind: libc::c_int,
}

impl TosOptions {
    fn of(stream: &impl std::os::fd::AsFd) -> std::io::Result<Self> {
        let peer = socket2::SockRef::from(stream).peer_addr()?;
        let v4 = match peer.as_socket().ok_or(std::io::ErrorKind::InvalidInput)? {
            std::net::SocketAddr::V4(_) => true,
            std::net::SocketAddr::V6(a) => a.ip().to_ipv4_mapped().is_some(),
        };
        Ok(if v4 {
            Self {
                level: libc::IPPROTO_IP,
                report: libc::IP_RECVTOS,
                read: libc::IP_PKTOPTIONS,
                kind: libc::IP_TOS,
            }
        } else {
            Self {
                level: libc::IPPROTO_IPV6,
                report: libc::IPV6_RECVTCLASS,
                read: libc::IPV6_2292PKTOPTIONS,
                kind: libc::IPV6_TCLASS,
            }
        })
    }

    fn received(self, stream: &impl std::os::fd::AsFd) -> std::io::Result<Option<u8>> {
        let mut buf = [0u64; 16];
        let mut len = std::mem::size_of_val(&buf) as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` bytes of control messages to `buf`.
        let r = unsafe {
            libc::getsockopt(
                stream.as_fd().as_raw_fd(),
                self.level,
                self.read,
                buf.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: plain bytes of the u64 array, `len` of them written.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), (len as usize).min(128)) };
        // Control messages: cmsghdr (length, level, type), then the data at the
        // header's aligned size; the next one at the aligned length.
        let w = std::mem::size_of::<usize>();
        let align = |n: usize| n.next_multiple_of(w);
        let hdr = align(std::mem::size_of::<libc::cmsghdr>());
        let mut off = 0;
        while off + hdr <= bytes.len() {
            let at = |i: usize| i32::from_ne_bytes(bytes[off + i..off + i + 4].try_into().expect("4 bytes"));
            let cmsg_len = usize::from_ne_bytes(bytes[off..off + w].try_into().expect("a usize"));
            if cmsg_len < hdr || off + cmsg_len > bytes.len() {
                break;
            }
            if (at(w), at(w + 4)) == (self.level, self.kind) && cmsg_len >= hdr + 4 {
                return Ok(Some(at(hdr) as u8));
            }
            off += align(cmsg_len);
        }
        Ok(None)
    }
}

/// Makes the kernel keep (`on`) or stop keeping the type of service (IPv4) or
/// traffic class (IPv6) of the packets a TCP socket receives, for
/// [`received_tos`]. Over IPv6 the kernel then keeps a copy of every packet's
/// options: turn it off again once read.
pub fn report_received_tos(stream: &impl std::os::fd::AsFd, on: bool) -> std::io::Result<()> {
    let o = TosOptions::of(stream)?;
    set_int_option(stream, o.level, o.report, on.into())
}

/// The type of service (IPv4, `IP_PKTOPTIONS`) or traffic class (IPv6,
/// `IPV6_2292PKTOPTIONS`) a TCP socket received, where
/// [`report_received_tos`] is on: on an accepted socket, what the host's SYN
/// carried (IPv4 keeps only that; IPv6 the latest packet's, if the report was
/// on when it came). `None` where the kernel has none to report.
pub fn received_tos(stream: &impl std::os::fd::AsFd) -> std::io::Result<Option<u8>> {
    TosOptions::of(stream)?.received(stream)
}

/// Sends with the type of service the host's SYN carried, as nvmet does
/// (`nvmet_tcp_set_queue_sock`: `ip_sock_set_tos(sk, inet->rcv_tos)`), so
/// the target's replies (the read data) get the DSCP the host marked its
/// connection with (`nvme connect --tos`, the initiator's
/// `ConnectOptions::tos`); over IPv6 the traffic class likewise (nvmet leaves
/// IPv6 alone). Nothing is set where the SYN carried 0. Returns what was set.
pub fn mirror_received_tos(stream: &TcpStream) -> std::io::Result<Option<u8>> {
    let o = TosOptions::of(stream)?;
    set_int_option(stream, o.level, o.report, 1)?;
    let tos = o.received(stream);
    set_int_option(stream, o.level, o.report, 0)?;
    let Some(tos) = tos?.filter(|&t| t != 0) else { return Ok(None) };
    // IP_TOS / IPV6_TCLASS: the same option the value came in.
    set_int_option(stream, o.level, o.kind, tos.into())?;
    Ok(Some(tos))
}

/// A TCP congestion control algorithm's name (`TCP_CONGESTION`, e.g.
/// `cubic`), held inline so options that carry it stay `Copy`: the kernel's
/// names are at most 15 bytes (`TCP_CA_NAME_MAX` 16 with the NUL).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CongestionControl {
    name: [u8; 15],
    len: u8,
}

impl CongestionControl {
    /// The name.
    pub fn as_str(&self) -> &str {
        // Built from a &str of ASCII graphic bytes only (FromStr).
        std::str::from_utf8(&self.name[..self.len as usize]).unwrap_or("")
    }

    /// Whether this kernel lets this process use the algorithm: sets it on a
    /// fresh, unconnected TCP socket (the error is
    /// [`set_congestion_control`]'s). For checking a configuration up front.
    pub fn check_available(&self) -> std::io::Result<()> {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        sock.set_tcp_congestion(self.as_str().as_bytes()).map_err(|e| self.explain(e))
    }

    fn explain(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(
            e.kind(),
            format!(
                "TCP congestion control {:?}: {e} (available: net.ipv4.tcp_available_congestion_control; \
                 allowed without CAP_NET_ADMIN: net.ipv4.tcp_allowed_congestion_control)",
                self.as_str()
            ),
        )
    }
}

impl std::str::FromStr for CongestionControl {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() || s.len() > 15 || !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "{s:?} is not a TCP congestion control name (1 to 15 ASCII characters, e.g. cubic)"
            ));
        }
        let mut name = [0; 15];
        name[..s.len()].copy_from_slice(s.as_bytes());
        Ok(Self { name, len: s.len() as u8 })
    }
}

impl std::fmt::Display for CongestionControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for CongestionControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// The socket's TCP congestion control algorithm, as the kernel reports it
/// (without its NUL padding).
pub fn congestion_control(stream: &TcpStream) -> std::io::Result<String> {
    let name = socket2::SockRef::from(stream).tcp_congestion()?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Sets the socket's TCP congestion control, as iperf3's `--congestion`;
/// `None` keeps the system's (`net.ipv4.tcp_congestion_control`). On
/// loopback the choice moves results: BBR paces with TCP's own timer at a
/// 1–2 µs round trip, and a sender that pauses longer than that (to compute
/// data digests) leaves the connection idle and its rate moves from run to
/// run. On the 2-vCPU Intel Xeon VM, 128 KiB QD16 writes with digests and
/// polling cost 7–24% against plain writes with BBR and 10–15% with CUBIC
/// set per connection on both sides before the target acknowledged bulk
/// reads at once and the initiator's digest window followed the algorithm
/// (since replaced by one window, [`app_data_digest_window`]); 9.1% and 9.9%
/// in the bench run after (README, performance).
///
/// The error names the algorithm and where the usable ones are listed (the
/// kernel answers `ENOENT` for an unknown name, `EPERM` for one not in
/// `net.ipv4.tcp_allowed_congestion_control` without `CAP_NET_ADMIN`).
pub fn set_congestion_control(stream: &TcpStream, cc: Option<CongestionControl>) -> std::io::Result<()> {
    let Some(cc) = cc else { return Ok(()) };
    socket2::SockRef::from(stream).set_tcp_congestion(cc.as_str().as_bytes()).map_err(|e| cc.explain(e))?;
    tracing::debug!(congestion_control = cc.as_str(), "TCP congestion control set");
    Ok(())
}

/// Writes `out` to the socket until it is empty or the socket would block
/// (`Ok` either way; `out.is_empty()` tells which). Each write computes the
/// data digests of the payloads it carries first ([`OutQueue::prepare`]).
pub fn write_out(stream: &TcpStream, out: &mut OutQueue) -> std::io::Result<()> {
    out.seal();
    while !out.is_empty() {
        out.prepare();
        let mut slices = [std::io::IoSlice::new(&[]); MAX_IOV];
        let n = out.slices(&mut slices);
        match stream.try_write_vectored(&slices[..n]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(w) => out.advance(w),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether the socket has something to read (data, EOF or an error), asked
/// with a zero-timeout `poll(2)`.
///
/// `tcp_poll` reads the receive state without the socket lock and honours
/// `SO_RCVLOWAT`, so a spin loop that waits for the rest of a large PDU calls
/// `recv` only once that has arrived. Where any byte is worth taking, the
/// busy-poll loops call `recv` directly instead: a `poll(2)` before it put
/// one more syscall on the path of every response. `recv` takes the socket
/// lock on every try (the peer's softirq then defers a segment to the backlog,
/// processed at `release_sock`), which measured no slower on 128 KiB reads.
pub fn readable_now(stream: &TcpStream) -> bool {
    let mut pfd = libc::pollfd { fd: stream.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n != 0
}

/// Reads from the socket into `buf`'s spare capacity, with a real `recv` call
/// even when tokio has no readiness cached.
///
/// tokio's `try_read*` answer `WouldBlock` from cached readiness without a
/// syscall until the reactor has seen an epoll event, so a busy-poll loop built
/// on them never sees data that arrived meanwhile. The read goes through
/// `try_io` first (which clears readiness race-free on `WouldBlock`); only when
/// tokio had no readiness cached is `recv` called directly. `Ok(0)`: the peer
/// closed (or `buf` has no spare capacity).
pub fn recv_buf<B: BufMut>(stream: &TcpStream, buf: &mut B) -> std::io::Result<usize> {
    fn raw<B: BufMut>(stream: &TcpStream, buf: &mut B) -> std::io::Result<usize> {
        let sock = socket2::SockRef::from(stream);
        let dst = buf.chunk_mut();
        // SAFETY: `recv` only writes into the slice and reports how many bytes it
        // initialised; exactly those are committed with `advance_mut`.
        let n = sock.recv(unsafe { dst.as_uninit_slice_mut() })?;
        unsafe { buf.advance_mut(n) };
        Ok(n)
    }
    let mut called = false;
    match stream.try_io(tokio::io::Interest::READABLE, || {
        called = true;
        raw(stream, buf)
    }) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && !called => raw(stream, buf),
        r => r,
    }
}

/// How many times the configured busy-poll time a window may grow to.
pub const POLL_GROW_LIMIT: u32 = 8;

/// Adaptive busy-poll window: how long a driver keeps spinning after its last
/// activity before it sleeps in epoll.
///
/// It starts at the configured time and follows KVM's halt-polling rule
/// (`kvm_vcpu_halt` in `virt/kvm/kvm_main.c`): after a sleep that new work
/// ended within the largest window ([`POLL_GROW_LIMIT`] × the configured time),
/// spinning longer would have caught that work without the wake-up, so the
/// window doubles; after a longer sleep it returns to the configured time.
/// A queue whose peer sends in bursts with gaps a little over the configured
/// time thus stops paying a wake-up (~50 µs on idle virtual machines) per
/// burst, while an idle queue still sleeps after at most the largest window.
#[derive(Clone, Copy, Debug)]
pub struct PollWindow {
    base: Duration,
    max: Duration,
    cur: Duration,
}

impl PollWindow {
    /// A window of `base` (zero: polling off), growing up to
    /// [`POLL_GROW_LIMIT`] × `base`.
    pub fn new(base: Duration) -> Self {
        Self { base, max: base.saturating_mul(POLL_GROW_LIMIT), cur: base }
    }

    /// Whether polling is on at all.
    pub fn enabled(&self) -> bool {
        !self.base.is_zero()
    }

    /// How long to keep spinning after the last activity.
    pub fn current(&self) -> Duration {
        self.cur
    }

    /// Records a sleep of `blocked` that ended because new work arrived.
    pub fn woke_after(&mut self, blocked: Duration) {
        self.cur = if blocked <= self.max { self.cur.saturating_mul(2).min(self.max) } else { self.base };
    }
}

/// Bytes a queue's loop moves without waiting before it lets the other
/// tasks of its thread run ([`FairShare`]).
pub const FAIR_SHARE_BYTES: usize = 2 << 20;

/// Passes of a queue's loop without a wait before it lets the other tasks of
/// its thread run ([`FairShare`]); nvmet's `io_work` requeues itself after 64
/// operations (`NVMET_TCP_IO_WORK_BUDGET`).
pub const FAIR_SHARE_PASSES: u32 = 64;

/// When a queue's loop that has not waited yields to the other tasks of its
/// worker thread.
///
/// Why: tokio's socket readiness (`TcpStream::ready`) takes nothing from a
/// task's cooperative budget and the drivers read with their own `recv`, so a
/// queue whose socket always had more (a host streaming large writes) never
/// returned to the runtime, and every other queue on its thread, other
/// hosts' included, waited until it ran dry: on one target core, 4 KiB reads
/// on their own queue beside four 1 MiB writes in flight on another waited
/// p99 14-50 ms, 1.1-1.3 ms with this (`cargo run --release -p nvmeof-tools
/// --example write_queues`, Intel Xeon VM). The Linux host's `io_work`
/// likewise requeues itself after 1 ms and nvmet's after 64 operations.
///
/// The initiator gains from it too, as its callers share the driver's
/// thread: 4 KiB QD32 polled reads (target and probe on a core each, 3
/// rounds each, alternated) went from 695-707K to 713-721K IOPS on a
/// namespace written first (bench/run.sh's case), and from 644-665K to
/// 776-791K where the target read pages never written (cheap for it, so the
/// probe was the bottleneck); 4 KiB writes, QD1 and 128 KiB transfers stayed
/// within the rounds' spread. A 256 KiB share cost 128 KiB polled reads
/// 15-20% (2 rounds), so the share is 2 MiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct FairShare {
    bytes: usize,
    passes: u32,
}

impl FairShare {
    /// Counts a pass that moved `bytes` without waiting; true when the loop
    /// should yield now ([`FAIR_SHARE_BYTES`], [`FAIR_SHARE_PASSES`]), which
    /// starts a new share.
    pub fn busy(&mut self, bytes: usize) -> bool {
        self.bytes += bytes;
        self.passes += 1;
        if self.bytes >= FAIR_SHARE_BYTES || self.passes >= FAIR_SHARE_PASSES {
            *self = Self::default();
            return true;
        }
        false
    }

    /// The loop found nothing more to do (its socket said WouldBlock), so it
    /// is about to wait or yield anyway: a new share starts.
    pub fn waited(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// `SO_PRIORITY` as set and read back; 0 leaves the socket's.
    #[test]
    fn socket_priority() {
        let s = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert_eq!(priority(&s).unwrap(), 0);
        set_priority(&s, 5).unwrap();
        assert_eq!(priority(&s).unwrap(), 5);
        set_priority(&s, 0).unwrap();
        assert_eq!(priority(&s).unwrap(), 5, "0 changes nothing");
        assert!(set_priority(&s, u32::MAX).is_err());
    }

    /// An accepted connection sends with the TOS / traffic class its SYN
    /// carried (IPv4, IPv4-mapped on a dual-stack listener, IPv6), seen on
    /// the accepted socket and, over IPv6, on the packets the client gets;
    /// a SYN without one leaves the socket's 0.
    #[tokio::test]
    async fn accepted_connections_send_with_the_syn_tos() {
        let v6 = tokio::net::TcpListener::bind("[::1]:0").await.unwrap();
        let dual = {
            let s = socket2::Socket::new(socket2::Domain::IPV6, socket2::Type::STREAM, None).unwrap();
            s.set_only_v6(false).unwrap();
            s.bind(&"[::]:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
            s.listen(8).unwrap();
            s.set_nonblocking(true).unwrap();
            tokio::net::TcpListener::from_std(s.into()).unwrap()
        };
        let v4 = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dual_v4: std::net::SocketAddr =
            format!("127.0.0.1:{}", dual.local_addr().unwrap().port()).parse().unwrap();
        for (l, to, tos) in [
            (&v4, v4.local_addr().unwrap(), Some(0x20)),
            (&dual, dual_v4, Some(0x48)),
            (&v6, v6.local_addr().unwrap(), Some(0x28)),
            (&v4, v4.local_addr().unwrap(), None),
        ] {
            let c =
                socket2::Socket::new(socket2::Domain::for_address(to), socket2::Type::STREAM, None).unwrap();
            match (tos, to) {
                (Some(t), std::net::SocketAddr::V4(_)) => c.set_tos(t).unwrap(),
                (Some(t), _) => c.set_tclass_v6(t).unwrap(),
                (None, _) => {}
            }
            c.connect(&to.into()).unwrap();
            let mut c = std::net::TcpStream::from(c);
            let (a, _) = l.accept().await.unwrap();
            assert_eq!(mirror_received_tos(&a).unwrap(), tos.map(|t| t as u8), "{to}");
            let sock = socket2::SockRef::from(&a);
            let set = if to.is_ipv4() { sock.tos().unwrap() } else { sock.tclass_v6().unwrap() };
            assert_eq!(set, tos.unwrap_or(0), "{to}");
            if to.is_ipv6() {
                // IPv6 keeps each packet's class: the client sees the reply's.
                report_received_tos(&c, true).unwrap();
                let mut a = a;
                a.write_all(b"x").await.unwrap();
                let mut b = [0u8; 1];
                std::io::Read::read_exact(&mut c, &mut b).unwrap();
                assert_eq!(received_tos(&c).unwrap(), tos.map(|t| t as u8));
            }
        }
    }

    #[test]
    fn poll_window_grows_on_short_sleeps_and_resets_on_long_ones() {
        let us = Duration::from_micros;
        let mut w = PollWindow::new(us(50));
        assert!(w.enabled());
        assert_eq!(w.current(), us(50));
        w.woke_after(us(70));
        assert_eq!(w.current(), us(100));
        for _ in 0..10 {
            w.woke_after(us(400));
        }
        assert_eq!(w.current(), us(400), "capped at POLL_GROW_LIMIT x 50 us");
        w.woke_after(us(401));
        assert_eq!(w.current(), us(50), "a sleep longer than the largest window resets it");
        // The largest configurable time (a command-line value) still doubles without overflow.
        let mut huge = PollWindow::new(us(u64::MAX));
        huge.woke_after(us(1));
        assert_eq!(huge.current(), us(u64::MAX) * 2);
        let mut off = PollWindow::new(Duration::ZERO);
        off.woke_after(us(1));
        assert!(!off.enabled());
        assert_eq!(off.current(), Duration::ZERO);
    }

    #[test]
    fn fair_share_ends_after_its_bytes_or_passes() {
        let mut f = FairShare::default();
        assert!(!f.busy(FAIR_SHARE_BYTES - 1));
        assert!(f.busy(1), "the bytes are used up");
        assert!(!f.busy(FAIR_SHARE_BYTES - 1), "a new share began");
        f.waited();
        assert!(!f.busy(FAIR_SHARE_BYTES - 1), "a wait began a new one too");
        let mut f = FairShare::default();
        assert!((1..FAIR_SHARE_PASSES).all(|_| !f.busy(0)));
        assert!(f.busy(0), "the passes are used up");
    }

    #[test]
    fn default_send_buffer_is_a_quarter_of_l2_within_bounds() {
        let b = default_send_buffer();
        assert!((256 << 10..=1 << 20).contains(&b), "{b}");
        match l2_per_core() {
            Some(l2) => assert_eq!(b, (l2 / 4).clamp(256 << 10, 1 << 20)),
            None => assert_eq!(b, 512 << 10),
        }
    }

    /// The kernel keeps twice the request (within `net.core.wmem_max`, 208 KiB
    /// on a stock kernel); 0 leaves the autotuned size as it was.
    #[tokio::test]
    async fn send_buffer_is_set_or_left_to_autotuning() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let sock = socket2::SockRef::from(&a);
        let autotuned = sock.send_buffer_size().unwrap();
        set_send_buffer(&a, 0);
        assert_eq!(sock.send_buffer_size().unwrap(), autotuned);
        set_send_buffer(&a, 64 << 10);
        assert_eq!(sock.send_buffer_size().unwrap(), 128 << 10);
        let wmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        if wmem_max > 0 {
            // Above the cap: the kernel gives twice the cap (logged once).
            set_send_buffer(&a, wmem_max + 4096);
            assert_eq!(sock.send_buffer_size().unwrap(), 2 * wmem_max);
        }
    }

    /// The initiator's window is the larger of 2 MiB and the target's.
    #[test]
    fn app_data_digest_window_is_at_least_two_mib() {
        assert_eq!(app_data_digest_window(), digest_window().max(2 << 20));
        assert!(app_data_digest_window() >= digest_window());
    }

    /// `reno` is always built in; an unknown name fails and says which.
    #[tokio::test]
    async fn congestion_control_is_set_or_refused() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let system = congestion_control(&a).unwrap();
        set_congestion_control(&a, None).unwrap();
        assert_eq!(congestion_control(&a).unwrap(), system);
        let reno: CongestionControl = "reno".parse().unwrap();
        reno.check_available().unwrap();
        set_congestion_control(&a, Some(reno)).unwrap();
        assert_eq!(congestion_control(&a).unwrap(), "reno");
        let bad: CongestionControl = "no-such-cc".parse().unwrap();
        let e = set_congestion_control(&a, Some(bad)).unwrap_err();
        assert!(e.to_string().contains("\"no-such-cc\""), "{e}");
        assert!(bad.check_available().unwrap_err().to_string().contains("no-such-cc"));
        assert_eq!(congestion_control(&a).unwrap(), "reno");
        for name in ["", "sixteen-letters!", "cu bic", "cubic\0"] {
            assert!(name.parse::<CongestionControl>().is_err(), "{name:?}");
        }
        let longest: CongestionControl = "fifteen-letters".parse().unwrap();
        assert_eq!(
            (longest.as_str(), longest.to_string()),
            ("fifteen-letters", "fifteen-letters".to_string())
        );
    }

    #[tokio::test]
    async fn sees_data_and_eof_without_the_reactor() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        assert!(!readable_now(&b));
        let mut buf = bytes::BytesMut::with_capacity(64);
        let e = recv_buf(&b, &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        a.write_all(b"hello").await.unwrap();
        // Bounded wait for loopback delivery: 1000 × 1 ms.
        for _ in 0..1000 {
            if readable_now(&b) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(readable_now(&b));
        // No `readable().await` first: tokio has no readiness cached, the
        // direct `recv` still finds the bytes.
        assert_eq!(recv_buf(&b, &mut buf).unwrap(), 5);
        assert_eq!(&buf[..], b"hello");
        drop(a);
        for _ in 0..1000 {
            if readable_now(&b) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(recv_buf(&b, &mut buf).unwrap(), 0, "EOF");
    }
}
