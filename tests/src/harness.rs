//! Starting a target for a test: loopback, port 0, RAM namespaces.

use std::net::SocketAddr;

use nvmeof_target::config::{NamespaceConfig, NamespaceSource, SubsystemConfig, TargetConfig};
use nvmeof_target::core::Limits;
use nvmeof_target::server::Server;

use crate::raw_client::{RawClient, HOSTNQN};

/// NQN of the subsystem every test target exports.
pub const SUBNQN: &str = "nqn.2024-01.io.nvmeof.test:sub1";
/// Size of namespace 1 (RAM).
pub const NS1_SIZE: u64 = 8 << 20;
/// Block size of namespace 1.
pub const NS1_BS: u32 = 512;

/// Initialises tracing once (honours `RUST_LOG`; silent by default).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_test_writer()
        .try_init();
}

/// Runs `f` and fails the test if it takes longer than `secs`.
pub async fn bounded<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(std::time::Duration::from_secs(secs), f).await {
        Ok(v) => v,
        Err(_) => panic!("test body exceeded its {secs} s bound"),
    }
}

/// A RAM namespace configuration.
pub fn ram_ns(nsid: u32, size: u64, block_size: u32) -> NamespaceConfig {
    NamespaceConfig {
        nsid: Some(nsid),
        source: NamespaceSource::Ram(size),
        block_size,
        read_only: false,
        ana_group: nvmeof_target::core::ana::DEFAULT_ANA_GROUP,
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

/// One subsystem ([`SUBNQN`], any host) with namespace 1 ([`NS1_SIZE`], [`NS1_BS`]),
/// listening on 127.0.0.1:0, default limits.
pub fn default_config() -> TargetConfig {
    TargetConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        port_ana: vec![Default::default()],
        port_ids: Vec::new(),
        port_params: Vec::new(),
        subsystems: vec![SubsystemConfig {
            nqn: SUBNQN.to_string(),
            model: "nvmeof-test".to_string(),
            serial: None,
            firmware: None,
            ieee_oui: None,
            allowed_hosts: None,
            host_keys: Default::default(),
            namespaces: vec![ram_ns(1, NS1_SIZE, NS1_BS)],
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

/// Starts `cfg` and returns the server and its first address.
pub async fn start(cfg: &TargetConfig) -> (Server, SocketAddr) {
    init_tracing();
    let server = Server::start(cfg).await.expect("target starts");
    let addr = server.local_addrs[0];
    (server, addr)
}

/// A started target with an enabled controller: admin queue and I/O queue 1.
pub struct Setup {
    /// The server.
    pub server: Server,
    /// Its address.
    pub addr: SocketAddr,
    /// Admin queue (connected, CC.EN = 1, CSTS.RDY = 1).
    pub admin: RawClient,
    /// I/O queue 1.
    pub io: RawClient,
}

/// Starts `cfg`, connects and enables a controller of [`SUBNQN`] and connects I/O queue 1.
pub async fn setup(cfg: &TargetConfig) -> Setup {
    let (server, addr) = start(cfg).await;
    let admin = admin_queue(addr, SUBNQN).await;
    let io = io_queue(addr, admin.cntlid, 1, cfg.limits.in_capsule_data).await;
    Setup { server, addr, admin, io }
}

/// Connects and enables an admin queue of `subnqn`.
pub async fn admin_queue(addr: SocketAddr, subnqn: &str) -> RawClient {
    let mut admin = RawClient::connect(addr).await;
    let cqe = admin.admin_connect(subnqn, HOSTNQN).await;
    assert!(cqe.status.is_success(), "admin connect: {}", cqe.status);
    admin.enable().await;
    admin
}

/// Connects I/O queue `qid` of controller `cntlid` of [`SUBNQN`].
pub async fn io_queue(addr: SocketAddr, cntlid: u16, qid: u16, icd_limit: u32) -> RawClient {
    let mut io = RawClient::connect(addr).await;
    let cqe = io.io_connect(qid, cntlid, SUBNQN, HOSTNQN).await;
    assert!(cqe.status.is_success(), "I/O connect: {}", cqe.status);
    io.icd_limit = icd_limit;
    io
}

/// Deterministic pseudo-random bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Binary `name` of workspace package `package`, next to this test
/// executable's `deps/` folder. Built every time (cargo does nothing when it
/// is up to date): a binary left by an older build would otherwise be tested
/// instead of the current sources.
///
/// The build names the whole workspace with its tests, the same selection as
/// `cargo test --workspace` (scripts/test.sh): cargo unifies dependency
/// features over the packages and targets selected, so `-p package --bins`
/// would resolve other features and recompile the dependency graph (minutes
/// in CI) where this finds everything up to date.
pub fn built_binary(package: &str, name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = std::process::Command::new(cargo);
    cmd.args(["build", "--workspace", "--bins", "--tests"]);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let st = cmd.status().expect("cargo build runs");
    assert!(st.success(), "building {package} failed");
    let path = profile_dir.join(name);
    assert!(path.exists(), "{} not found", path.display());
    path
}

/// A loopback TCP port held for one test: a socket bound to it that never
/// listens, kept for as long as this value lives. While held, the port
/// refuses connections (a SYN to a bound socket that does not listen gets an
/// RST, as to any closed port), and no other test's `bind(0)` is given it
/// (Linux never picks a port with a socket bound to it), so a test running
/// beside this one cannot start to answer on it. It has `SO_REUSEADDR`, as
/// the target's listeners do, so a target (or a child process) told to
/// listen on it can: a port merely bound and released instead may go to the
/// next `bind(0)` of another test before the target binds it.
pub struct HeldPort {
    addr: SocketAddr,
    _socket: socket2::Socket,
}

impl HeldPort {
    /// Holds a fresh port on 127.0.0.1.
    pub fn new() -> HeldPort {
        HeldPort::at(SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Holds `addr` (port 0: a fresh one), e.g. a stopped target's port, which
    /// `SO_REUSEADDR` lets this bind while its closed connections linger.
    pub fn at(addr: SocketAddr) -> HeldPort {
        let socket =
            socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None).unwrap();
        socket.set_reuse_address(true).unwrap();
        socket.bind(&addr.into()).unwrap();
        let addr = socket.local_addr().unwrap().as_socket().unwrap();
        HeldPort { addr, _socket: socket }
    }

    /// The held address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Default for HeldPort {
    fn default() -> Self {
        HeldPort::new()
    }
}
