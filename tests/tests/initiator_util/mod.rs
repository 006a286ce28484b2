//! Helpers shared by the `initiator_*` suites: a target on loopback, connect
//! options, time bounds, and a TCP proxy that can freeze, cut, throttle and
//! corrupt the stream between initiator and target.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmeof_initiator::{
    ConnectOptions, Controller, ControllerEvent, ControllerState, HostIdentity, ReconnectPolicy,
};
use nvmeof_target::config::{IoEngine, NamespaceConfig, NamespaceSource, SubsystemConfig, TargetConfig};
use nvmeof_target::core::Limits;
use nvmeof_target::server::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Subsystem of every test target.
pub const SUBNQN: &str = "nqn.2024-01.io.nvmeof.test:e2e";
/// Block size of the test namespaces.
pub const BS: usize = 512;

pub use nvmeof_tests::harness::{bounded, init_tracing};

/// The host identity of the tests.
pub fn host() -> HostIdentity {
    HostIdentity::from_id(*b"e2e-initiator-01")
}

/// One subsystem ([`SUBNQN`], any host) with `namespaces`, on 127.0.0.1:0.
pub fn config(namespaces: Vec<NamespaceConfig>) -> TargetConfig {
    TargetConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        port_ana: vec![Default::default()],
        port_ids: Vec::new(),
        port_params: Vec::new(),
        subsystems: vec![SubsystemConfig {
            nqn: SUBNQN.to_string(),
            model: "nvmeof-e2e".to_string(),
            serial: None,
            firmware: None,
            ieee_oui: None,
            allowed_hosts: None,
            host_keys: Default::default(),
            namespaces,
            cntlids: nvmeof_target::core::target::CNTLID_RANGE,
            ports: None,
            max_io_queues: None,
        }],
        limits: Limits::default(),
        poll_us: 0,
        send_buffer: nvmeof_net::default_send_buffer(),
        congestion_control: None,
        so_priority: 0,
        referrals: Vec::new(),
        metrics_listen: None,
        discovery_nqn: None,
        discovery_filter: Default::default(),
    }
}

/// A RAM namespace.
pub fn ram_ns(nsid: u32, size: u64) -> NamespaceConfig {
    NamespaceConfig {
        nsid: Some(nsid),
        source: NamespaceSource::Ram(size),
        block_size: BS as u32,
        read_only: false,
        ana_group: 1,
        ids: Default::default(),
        reservations: false,
        reservations_file: None,
        reservations_format: Default::default(),
        hosts: None,
        qos: Default::default(),
        zoned: None,
        zone_state_file: None,
    }
}

/// A file namespace through the page cache (`size`: create or grow it).
pub fn file_ns(nsid: u32, path: &std::path::Path, size: Option<u64>, engine: IoEngine) -> NamespaceConfig {
    NamespaceConfig {
        nsid: Some(nsid),
        source: NamespaceSource::File { path: path.to_owned(), size, io_engine: engine, buffered_io: true },
        block_size: BS as u32,
        read_only: false,
        ana_group: 1,
        ids: Default::default(),
        reservations: false,
        reservations_file: None,
        reservations_format: Default::default(),
        hosts: None,
        qos: Default::default(),
        zoned: None,
        zone_state_file: None,
    }
}

/// A target with a namespace on each backend, `size` bytes each: RAM (NSID
/// 1), a file on worker threads (2) and a file on io_uring where the kernel
/// offers it (3). The files are `NAME-PID-0` and `-1` on /dev/shm (or the
/// temporary directory), removed first; the caller removes them at the end.
pub fn every_backend(name: &str, size: u64) -> (TargetConfig, Vec<std::path::PathBuf>) {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let paths: Vec<_> = (0..2).map(|i| dir.join(format!("{name}-{}-{i}", std::process::id()))).collect();
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    let cfg = config(vec![
        ram_ns(1, size),
        file_ns(2, &paths[0], Some(size), IoEngine::Threads),
        file_ns(3, &paths[1], Some(size), IoEngine::Auto),
    ]);
    (cfg, paths)
}

/// Starts `cfg`; returns the server and its address.
pub async fn start(cfg: &TargetConfig) -> (Server, SocketAddr) {
    init_tracing();
    let s = Server::start(cfg).await.expect("target starts");
    let a = s.local_addrs[0];
    (s, a)
}

/// 4 I/O queues, 32 commands each, explicit host, 10 s command timeout,
/// reconnect every 100 ms for up to 10 s with requeue.
pub fn opts() -> ConnectOptions {
    ConnectOptions {
        host: Some(host()),
        io_queues: 4,
        // 32 commands outstanding per queue (depth − 1).
        queue_depth: 33,
        command_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        reconnect: ReconnectPolicy {
            delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(100),
            ctrl_loss_timeout: Some(Duration::from_secs(10)),
            requeue: true,
            fast_io_fail_timeout: None,
        },
        ..ConnectOptions::default()
    }
}

/// A TCP proxy between initiator and target.
pub struct Proxy {
    /// Where the initiator connects.
    pub addr: SocketAddr,
    frozen: watch::Sender<bool>,
    kill: watch::Sender<u64>,
    /// Target-to-host throttle: at most `.0` bytes, then a pause of `.1`.
    throttle: watch::Sender<Option<(usize, Duration)>>,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicU64>,
    /// The initiator's address of each connection accepted so far, in order.
    pub peers: Arc<std::sync::Mutex<Vec<SocketAddr>>>,
    /// C2HData PDUs (payload > 4 KiB) still to corrupt (one payload byte each).
    pub corrupt: Arc<AtomicU32>,
    /// Bytes read from the host so far (held ones included, while frozen).
    from_host: Arc<AtomicU64>,
}

struct Ctl {
    frozen: watch::Receiver<bool>,
    kill: watch::Receiver<u64>,
    throttle: watch::Receiver<Option<(usize, Duration)>>,
    corrupt: Option<Arc<AtomicU32>>,
    /// The host-to-target direction counts what it reads.
    counted: Option<Arc<AtomicU64>>,
    gen: u64,
}

impl Proxy {
    /// Listens on 127.0.0.1:0 and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (frozen, _) = watch::channel(false);
        let (kill, _) = watch::channel(0u64);
        let (throttle, _) = watch::channel(None);
        let accepted = Arc::new(AtomicU64::new(0));
        let corrupt = Arc::new(AtomicU32::new(0));
        let peers = Arc::new(std::sync::Mutex::new(Vec::new()));
        let from_host = Arc::new(AtomicU64::new(0));
        let (f, k, t, a, c, p, h) = (
            frozen.clone(),
            kill.clone(),
            throttle.clone(),
            accepted.clone(),
            corrupt.clone(),
            peers.clone(),
            from_host.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Ok((down, peer)) = l.accept().await else { return };
                p.lock().unwrap().push(peer);
                let Ok(up) = TcpStream::connect(upstream).await else { continue };
                let _ = down.set_nodelay(true);
                let _ = up.set_nodelay(true);
                a.fetch_add(1, Ordering::SeqCst);
                let gen = *k.borrow();
                let ctl = |corrupt, counted| Ctl {
                    frozen: f.subscribe(),
                    kill: k.subscribe(),
                    throttle: t.subscribe(),
                    corrupt,
                    counted,
                    gen,
                };
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pump(dr, uw, ctl(None, Some(h.clone()))));
                tokio::spawn(pump(ur, dw, ctl(Some(c.clone()), None)));
            }
        });
        Self { addr, frozen, kill, throttle, accepted, corrupt, peers, from_host }
    }

    /// Bytes read from the host so far, on every connection.
    pub fn bytes_from_host(&self) -> u64 {
        self.from_host.load(Ordering::SeqCst)
    }

    /// Waits (at most 5 s, else panics) until the host has sent `n` bytes
    /// more than `since` (a [`Proxy::bytes_from_host`] value): e.g. commands
    /// spawned while frozen are held by the proxy, not still on their way.
    pub async fn wait_from_host(&self, since: u64, n: u64) {
        let until = Instant::now() + Duration::from_secs(5);
        while self.bytes_from_host() < since + n {
            assert!(
                Instant::now() < until,
                "{} of {n} bytes from the host within 5 s",
                self.bytes_from_host() - since
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops (or resumes) forwarding in both directions; held bytes stay held.
    pub fn freeze(&self, on: bool) {
        self.frozen.send_replace(on);
    }

    /// Closes every connection accepted so far (held bytes are dropped).
    pub fn kill_all(&self) {
        self.kill.send_modify(|g| *g += 1);
    }

    /// Limits the target-to-host direction to `chunk` bytes per `pause`.
    pub fn throttle(&self, t: Option<(usize, Duration)>) {
        self.throttle.send_replace(t);
    }
}

/// Follows PDU boundaries in the target-to-host stream to flip one payload
/// byte of armed C2HData PDUs.
#[derive(Default)]
struct Tracker {
    hdr: Vec<u8>,
    pos: usize,
    plen: usize,
    flip_at: Option<usize>,
}

impl Tracker {
    fn process(&mut self, buf: &mut [u8], corrupt: &AtomicU32) {
        let mut i = 0;
        while i < buf.len() {
            if self.hdr.len() < 8 {
                let n = (8 - self.hdr.len()).min(buf.len() - i);
                self.hdr.extend_from_slice(&buf[i..i + n]);
                i += n;
                self.pos += n;
                if self.hdr.len() == 8 {
                    self.plen = u32::from_le_bytes(self.hdr[4..8].try_into().unwrap()) as usize;
                    let pdo = self.hdr[3] as usize;
                    let big_c2h = self.hdr[0] == 0x07 && self.plen > pdo + 4096;
                    if big_c2h
                        && corrupt
                            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                            .is_ok()
                    {
                        self.flip_at = Some(pdo + (self.plen - pdo) / 2);
                    }
                }
                continue;
            }
            let n = (self.plen - self.pos).min(buf.len() - i);
            if let Some(f) = self.flip_at {
                if (self.pos..self.pos + n).contains(&f) {
                    buf[i + f - self.pos] ^= 0xFF;
                }
            }
            self.pos += n;
            i += n;
            if self.pos >= self.plen {
                self.hdr.clear();
                self.pos = 0;
                self.plen = 0;
                self.flip_at = None;
            }
        }
    }
}

async fn pump(mut r: tokio::net::tcp::OwnedReadHalf, mut w: tokio::net::tcp::OwnedWriteHalf, mut c: Ctl) {
    let mut buf = vec![0u8; 256 << 10];
    let mut tracker = Tracker::default();
    let gen = c.gen;
    loop {
        let limit = match *c.throttle.borrow() {
            Some((chunk, _)) if c.corrupt.is_some() => chunk.min(buf.len()),
            _ => buf.len(),
        };
        let n = tokio::select! {
            r = r.read(&mut buf[..limit]) => match r { Ok(0) | Err(_) => return, Ok(n) => n },
            _ = c.kill.wait_for(|g| *g != gen) => return,
        };
        if let Some(corrupt) = &c.corrupt {
            tracker.process(&mut buf[..n], corrupt);
        }
        if let Some(counted) = &c.counted {
            counted.fetch_add(n as u64, Ordering::SeqCst);
        }
        // While frozen, hold what was read and read no more.
        tokio::select! {
            r = c.frozen.wait_for(|f| !*f) => if r.is_err() { return },
            _ = c.kill.wait_for(|g| *g != gen) => return,
        }
        tokio::select! {
            r = w.write_all(&buf[..n]) => if r.is_err() { return },
            _ = c.kill.wait_for(|g| *g != gen) => return,
        }
        let pause = match *c.throttle.borrow() {
            Some((_, pause)) if c.corrupt.is_some() => Some(pause),
            _ => None,
        };
        if let Some(p) = pause {
            tokio::select! {
                _ = tokio::time::sleep(p) => {}
                _ = c.kill.wait_for(|g| *g != gen) => return,
            }
        }
    }
}

/// Starts `cfg` on exactly the address it names, retrying while the port is
/// still held by the previous instance.
pub async fn restart(cfg: &TargetConfig) -> Server {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        match Server::start(cfg).await {
            Ok(s) => return s,
            Err(e) if Instant::now() < until => {
                eprintln!("restart: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("target does not restart: {e}"),
        }
    }
}

/// Waits until `ctrl` is in state `want`; panics after `within`.
pub async fn wait_state(ctrl: &Controller, want: ControllerState, within: Duration) {
    let mut rx = ctrl.subscribe_state();
    tokio::time::timeout(within, rx.wait_for(|s| *s == want))
        .await
        .unwrap_or_else(|_| panic!("controller not {want:?} within {within:?} (now {:?})", ctrl.state()))
        .unwrap();
}

/// The next event of a controller's [`Controller::events`], within 5 s.
pub async fn next_event(rx: &mut tokio::sync::broadcast::Receiver<ControllerEvent>) -> ControllerEvent {
    tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("an event within 5 s")
        .expect("event channel open")
}
