//! The `nvmeof-target` binary as an administrator runs it: startup errors and
//! exit codes, the log a service manager records, and SIGHUP.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_nvmeof-target");
const NQN: &str = "nqn.2024-01.io.test:cli";

/// A temporary folder of this test process, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("nvmeof-target-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn command(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    // The log as a service manager sees it: stderr is a pipe.
    c.arg("serve").args(args).env("RUST_LOG", "info").env_remove("NO_COLOR").env_remove("RUST_BACKTRACE");
    c
}

/// Runs the binary expecting it to exit by itself (a startup failure) within 30 s.
fn run_failing(args: &[&str]) -> (Option<i32>, String) {
    let mut child =
        command(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("nvmeof-target {args:?} still running after 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.code(), err)
}

/// A running target; its stderr lines arrive on a channel. Killed on drop.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Running {
    fn start(args: &[&str]) -> Self {
        let mut child =
            command(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let (tx, lines) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut r = Self { child, lines, log: Vec::new() };
        r.wait_for("target running");
        r
    }

    /// Waits (at most 30 s) for a stderr line containing `what`; returns it.
    fn wait_for(&mut self, what: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.log.push(l.clone());
                    if l.contains(what) {
                        return l;
                    }
                }
                Err(_) => panic!("no line with {what:?} within 30 s; log:\n{}", self.log.join("\n")),
            }
        }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: signals the child this test started, by its PID.
        assert_eq!(unsafe { libc::kill(self.child.id() as libc::pid_t, sig) }, 0);
    }

    /// SIGTERM, then the exit status (within 30 s).
    fn stop(self) -> Option<i32> {
        self.signal(libc::SIGTERM);
        self.exit_within(Duration::from_secs(30)).expect("no exit within 30 s of SIGTERM")
    }

    /// The exit status, if the target exits within `limit`.
    fn exit_within(mut self, limit: Duration) -> Option<Option<i32>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s.code());
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port held for the target to listen on: bound (with `SO_REUSEADDR`, as
/// the target's listeners, so the target can bind it too) and never
/// listening, for as long as the socket lives. A port merely bound and
/// released may be given to another test's `bind(0)` before the target
/// binds it; Linux never gives one that a socket holds.
fn held_port() -> (socket2::Socket, std::net::SocketAddr) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.set_reuse_address(true).unwrap();
    s.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    let addr = s.local_addr().unwrap().as_socket().unwrap();
    (s, addr)
}

fn config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("target.toml");
    std::fs::write(&p, body).unwrap();
    p
}

/// Logs written to a pipe (a log file, the journal) carry no terminal colour
/// codes (they did: every field was wrapped in escape sequences).
#[test]
fn log_to_a_pipe_has_no_colour_codes() {
    let r = Running::start(&["--ram", "1M", "--listen", "127.0.0.1:0", "--nqn", NQN]);
    let log = r.log.join("\n");
    assert!(!log.contains('\x1b'), "escape codes in the log:\n{log:?}");
    assert!(log.contains(&format!("subnqn=\"{NQN}\"")), "{log}");
    assert_eq!(r.stop(), Some(0));
}

/// `--log-format json`: every line is one JSON object with the timestamp,
/// level and message at the top, the event's fields beside them and the
/// connection's span fields (`peer`, `qid`, `cntlid`) in `spans`.
#[test]
fn json_logs_are_one_object_per_line() {
    let mut r =
        Running::start(&["--log-format", "json", "--ram", "1M", "--listen", "127.0.0.1:0", "--nqn", NQN]);
    // The port task may log it before or after "target running".
    let line = match r.log.iter().find(|l| l.contains("\"listening\"")) {
        Some(l) => l.clone(),
        None => r.wait_for("\"listening\""),
    };
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let addr = v["local"].as_str().unwrap_or_else(|| panic!("no address: {line}")).to_string();
    // A connection that sends garbage: its log lines carry the connection's span.
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    std::io::Write::write_all(&mut s, &[0xff; 128]).unwrap();
    let line = r.wait_for("\"spans\"");
    drop(s);
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert!(v["spans"].as_array().unwrap().iter().any(|s| s["peer"].is_string()), "{line}");
    for l in &r.log {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string() && v["message"].is_string(), "{l}");
    }
    assert_eq!(r.stop(), Some(0));
    assert!(command(&["--log-format", "xml"]).output().unwrap().status.code() == Some(2));
}

/// A namespace that cannot be opened names its file or device (the error
/// was "namespace 1: No such file or directory").
#[test]
fn open_errors_name_the_path() {
    let dir = TempDir::new("open");
    let missing = dir.0.join("missing.img");
    let (code, err) = run_failing(&["--file", missing.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(missing.to_str().unwrap()) && err.contains("No such file"), "{err}");
    let (code, err) = run_failing(&["--file", dir.0.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("{}: ", dir.0.display())), "{err}");
    // A `--size` smaller than one block is a usage error, before the file is created.
    let small = dir.0.join("small.img");
    let (code, err) =
        run_failing(&["--file", small.to_str().unwrap(), "--size", "100", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--size"), "{err}");
    assert!(!small.exists(), "the file was created");
}

/// A RAM namespace larger than the machine's memory is refused at startup
/// (its chunk table alone was allocated up front: `--ram 1000T` took all
/// memory until the OOM killer ended the target).
#[test]
fn ram_namespace_larger_than_memory_is_refused() {
    let mem = {
        // SAFETY: sysconf only reads system parameters.
        let (pages, page) =
            unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
        pages as u64 * page as u64
    };
    // Twice the memory: on the old code only a small chunk table (0.03 % of it).
    let size = format!("{}", mem * 2);
    let (code, err) = run_failing(&["--ram", &size, "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("larger than this machine's memory"), "{err}");
}

/// SIGHUP applies namespaces and ports but not limits: a changed limit is
/// said to need a restart (the reload reported success and the change
/// silently did not apply); a broken file keeps the running configuration
/// and logs why.
#[test]
fn sighup_says_what_it_does_not_apply() {
    let dir = TempDir::new("hup");
    let body = |listen: &str, limits: &str, ram: &str| {
        format!(
            "{limits}\n[[port]]\nlisten = \"{listen}\"\n[[subsystem]]\nnqn = \"{NQN}\"\n\
             [[subsystem.namespace]]\nram = \"{ram}\"\n"
        )
    };
    let path = config(&dir.0, &body("127.0.0.1:0", "", "1M"));
    let mut r = Running::start(&["--config", path.to_str().unwrap()]);

    // Namespaces only: applied, no warning.
    config(&dir.0, &body("127.0.0.1:0", "", "2M"));
    r.signal(libc::SIGHUP);
    r.wait_for("configuration reloaded");
    assert!(!r.log.iter().any(|l| l.contains("not changed while running")), "{:?}", r.log);

    // A port replaced (applied: the old one removed, the new one added) and
    // a limit changed (said to need a restart).
    let (_held, free) = held_port();
    let free = free.to_string();
    config(&dir.0, &body(&free, "[limits]\nmax_queue_entries = 64", "2M"));
    r.signal(libc::SIGHUP);
    let limits = r.wait_for("reload: the limits are not changed");
    assert!(limits.contains("WARN") && limits.contains("restart"), "{limits}");
    r.wait_for("reload: port removed");
    let added = r.wait_for("reload: port added");
    assert!(added.contains(&free), "{added}");
    r.wait_for("configuration reloaded");
    assert!(std::net::TcpStream::connect(&free).is_ok(), "the new port accepts");

    // A broken file: the error names the key, the target keeps running.
    config(&dir.0, &body("127.0.0.1:0", "[limits]\nmdts = 30", "2M"));
    r.signal(libc::SIGHUP);
    let e = r.wait_for("reload failed");
    assert!(e.contains("limits.mdts"), "{e}");
    let log = r.log.join("\n");
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(r.stop(), Some(0));
}

/// SIGINT sent while a SIGHUP reload runs stops the target (it was lost
/// about one time in three: the SIGINT listener was made afresh after each
/// reload, and missed a signal delivered before that).
#[test]
fn sigint_right_after_sighup_stops_the_target() {
    let dir = TempDir::new("int");
    let path = config(
        &dir.0,
        &format!("[[port]]\nlisten = \"127.0.0.1:0\"\n[[subsystem]]\nnqn = \"{NQN}\"\n[[subsystem.namespace]]\nram = \"1M\"\n"),
    );
    for i in 0..20 {
        let r = Running::start(&["--config", path.to_str().unwrap()]);
        r.signal(libc::SIGHUP);
        r.signal(libc::SIGINT);
        let code = r.exit_within(Duration::from_secs(10));
        assert_eq!(code, Some(Some(0)), "try {i}: SIGINT after SIGHUP did not stop the target");
    }
}

/// The next service-manager notification that is not a watchdog keep-alive
/// (counted in `watchdogs`), within 10 s.
fn notification(sock: &std::os::unix::net::UnixDatagram, watchdogs: &mut usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        let Ok(n) = sock.recv(&mut buf) else { continue };
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        if msg == "WATCHDOG=1\n" {
            *watchdogs += 1;
        } else {
            return msg;
        }
    }
    panic!("no notification within 10 s");
}

/// Under systemd (`Type=notify`, target/examples/nvmeof-target.service): READY
/// once the port listens, with a STATUS line of what it serves; WATCHDOG=1
/// every half WATCHDOG_USEC; RELOADING=1 (with the monotonic clock) and READY
/// around a SIGHUP reload, the failed one saying why; STOPPING on SIGTERM.
/// A datagram socket of this test stands in for systemd's NOTIFY_SOCKET.
#[test]
fn service_manager_notifications() {
    let dir = TempDir::new("notify");
    let sock_path = dir.0.join("notify");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let (_held, addr) = held_port();
    let body = |namespaces: usize| {
        let ns = "[[subsystem.namespace]]\nram = \"1M\"\n".repeat(namespaces);
        format!("[[port]]\nlisten = \"{addr}\"\n[[subsystem]]\nnqn = \"{NQN}\"\n{ns}")
    };
    let path = config(&dir.0, &body(1));
    let child = command(&["--config", path.to_str().unwrap()])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000")
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let r = Running { child, lines: mpsc::channel().1, log: Vec::new() };
    let mut watchdogs = 0;

    let ready = notification(&sock, &mut watchdogs);
    assert!(std::net::TcpStream::connect(addr).is_ok(), "READY before the port listens");
    assert_eq!(ready, format!("READY=1\nSTATUS=serving 1 namespace in 1 subsystem on {addr}\n"));

    // WATCHDOG_USEC 200 ms: a keep-alive every 100 ms.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 64];
    while watchdogs < 3 && Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            assert_eq!(&buf[..n], b"WATCHDOG=1\n");
            watchdogs += 1;
        }
    }
    assert!(watchdogs >= 3, "{watchdogs} watchdog keep-alives in 10 s");

    config(&dir.0, &body(2));
    r.signal(libc::SIGHUP);
    let reloading = notification(&sock, &mut watchdogs);
    let usec: u64 = reloading
        .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
        .and_then(|u| u.strip_suffix('\n'))
        .and_then(|u| u.parse().ok())
        .unwrap_or_else(|| panic!("{reloading:?}"));
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec for clock_gettime to fill.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) }, 0);
    let now = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1000;
    assert!(usec <= now && now - usec < 10_000_000, "MONOTONIC_USEC {usec}, now {now}");
    let ready = notification(&sock, &mut watchdogs);
    assert_eq!(ready, format!("READY=1\nSTATUS=serving 2 namespaces in 1 subsystem on {addr}\n"));

    // A reload that fails: still serving, and why.
    config(&dir.0, "[[port]]\nlisten = \"not an address\"\n");
    r.signal(libc::SIGHUP);
    assert!(notification(&sock, &mut watchdogs).starts_with("RELOADING=1\nMONOTONIC_USEC="));
    let ready = notification(&sock, &mut watchdogs);
    let serving =
        format!("READY=1\nSTATUS=serving 2 namespaces in 1 subsystem on {addr}; last reload failed: ");
    assert!(ready.starts_with(&serving) && ready.contains("not an address"), "{ready:?}");

    r.signal(libc::SIGTERM);
    let stopping = notification(&sock, &mut watchdogs);
    assert_eq!(stopping, "STOPPING=1\nSTATUS=stopping: completing the commands of 0 connections\n");
    assert_eq!(r.exit_within(Duration::from_secs(30)), Some(Some(0)));
}

/// `import-nvmetcli`: the converted configuration on stdout (it parses),
/// each note on stderr too; a file that is not nvmetcli's exits 2 naming it.
#[test]
fn import_nvmetcli_prints_a_config_and_its_notes() {
    let dir = TempDir::new("nvmetcli");
    let saved = dir.0.join("config.json");
    std::fs::write(
        &saved,
        r#"{"hosts": [], "ports": [
             {"portid": 1, "addr": {"adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "4420", "trtype": "tcp"}, "subsystems": ["nqn.2014-08.org.example:a"]},
             {"portid": 2, "addr": {"adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "4420", "trtype": "rdma"}, "subsystems": []}],
           "subsystems": [{"nqn": "nqn.2014-08.org.example:a", "attr": {"allow_any_host": "1", "serial": "abc"},
             "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "/dev/nvmeof-cli-test-missing", "uuid": "6e766d65-6f66-4974-8000-000000000001"}}]}]}"#,
    )
    .unwrap();
    let out = Command::new(BIN).arg("import-nvmetcli").arg(&saved).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let cfg = nvmeof_target::config::TargetConfig::from_toml(&stdout).unwrap();
    assert_eq!((cfg.port_ids.clone(), cfg.subsystems[0].serial.as_deref()), (vec![1], Some("abc")));
    for says in ["port 2 (\"rdma\" transport) left out", "/dev/nvmeof-cli-test-missing does not exist here"] {
        assert!(stderr.lines().any(|l| l.starts_with("note: ") && l.contains(says)), "{stderr}");
        assert!(stdout.lines().any(|l| l.starts_with("# note: ") && l.contains(says)), "{stdout}");
    }
    std::fs::write(&saved, "[[port]]\nlisten = \"127.0.0.1:4420\"\n").unwrap();
    let out = Command::new(BIN).arg("import-nvmetcli").arg(&saved).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(saved.to_str().unwrap()) && stderr.contains("not an nvmetcli configuration"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// `export-nvmetcli`: the JSON on stdout, which `import-nvmetcli` takes
/// back to the same subsystem, each note on stderr; a configuration that
/// does not parse exits 2 naming it, printing nothing.
#[test]
fn export_nvmetcli_prints_json_and_its_notes() {
    let dir = TempDir::new("export-nvmetcli");
    let cfg = config(
        &dir.0,
        &format!(
            "[[port]]\nlisten = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"{NQN}\"\nserial = \"cli-1\"\n\
             [[subsystem.namespace]]\nram = \"1M\"\n[[subsystem.namespace]]\nfile = \"/dev/null\"\nblock_size = 512\n"
        ),
    );
    let out = Command::new(BIN).arg("export-nvmetcli").arg(&cfg).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(json["subsystems"][0]["attr"]["serial"], "cli-1");
    assert_eq!(json["subsystems"][0]["namespaces"][0]["nsid"], 2);
    assert!(
        stderr.lines().any(|l| l.starts_with("note: ") && l.contains("namespace 1 left out: it is RAM")),
        "{stderr}"
    );
    let saved = dir.0.join("config.json");
    std::fs::write(&saved, stdout.as_bytes()).unwrap();
    let out = Command::new(BIN).arg("import-nvmetcli").arg(&saved).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let back = nvmeof_target::config::TargetConfig::from_toml(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!((back.subsystems[0].nqn.as_str(), back.subsystems[0].serial.as_deref()), (NQN, Some("cli-1")));
    assert_eq!(back.subsystems[0].namespaces[0].nsid, Some(2));

    std::fs::write(&cfg, "[[port]]\nlisten = 4420\n").unwrap();
    let out = Command::new(BIN).arg("export-nvmetcli").arg(&cfg).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(cfg.to_str().unwrap()), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// `export-spdk --key-dir`: the keys in files only their owner may read (as
/// SPDK's file keyring demands), named by the JSON on stdout, which
/// `import-spdk` takes back with the keys; without --key-dir a host with a
/// key is left out; a key directory that cannot be made exits 1 printing
/// nothing.
#[test]
fn export_spdk_writes_owner_only_key_files() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("export-spdk");
    let host = "nqn.2014-08.org.nvmexpress:uuid:4a2a1c9e-0000-4000-8000-000000000001";
    let key = "DHHC-1:00:oCMdKPLLjLL49xAMSZHqha3+8lnvPS1oqnhp0/9+78hfhoD7:";
    let cfg = config(
        &dir.0,
        &format!(
            "[[port]]\nlisten = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"{NQN}\"\n\
             allowed_hosts = [{{ nqn = \"{host}\", dhchap_key = \"{key}\" }}]\n[[subsystem.namespace]]\nram = \"1M\"\n"
        ),
    );
    let keys = dir.0.join("keys");
    let out = Command::new(BIN).arg("export-spdk").arg(&cfg).arg("--key-dir").arg(&keys).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(std::fs::metadata(&keys).unwrap().permissions().mode() & 0o777, 0o700);
    let file = keys.join("nvmeof-key0");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), key);
    assert!(stdout.contains(file.to_str().unwrap()), "{stdout}");
    let saved = dir.0.join("spdk.json");
    std::fs::write(&saved, stdout.as_bytes()).unwrap();
    let out = Command::new(BIN).arg("import-spdk").arg(&saved).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let back = nvmeof_target::config::TargetConfig::from_toml(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(back.subsystems[0].host_keys[host].key.to_string(), key);

    let out = Command::new(BIN).arg("export-spdk").arg(&cfg).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        !stdout.contains("nvmf_subsystem_add_host") && !stdout.contains("keyring_file_add_key"),
        "{stdout}"
    );
    assert!(stderr.contains(&format!("host {host} left out")), "{stderr}");

    let blocked = dir.0.join("a-file");
    std::fs::write(&blocked, "").unwrap();
    let out = Command::new(BIN)
        .arg("export-spdk")
        .arg(&cfg)
        .arg("--key-dir")
        .arg(blocked.join("keys"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty());
}

/// `import-spdk`: the converted configuration on stdout, each note on
/// stderr too, the DH-HMAC-CHAP key read from the keyring's file; a host
/// whose key file is gone is left out (never let in without its key); a
/// file that is not SPDK's exits 2 naming it.
#[test]
fn import_spdk_prints_a_config_and_its_notes() {
    let dir = TempDir::new("spdk");
    let saved = dir.0.join("spdk.json");
    let key = dir.0.join("key0");
    let secret = "DHHC-1:01:o8/jE9vGsSdaRVAfWmfEhzOZ8S7KkfTi8F/tg64x4BN8zoYw:";
    std::fs::write(&key, format!("{secret}\n")).unwrap();
    let json = format!(
        r#"{{"subsystems": [
  {{"subsystem": "keyring", "config": [{{"method": "keyring_file_add_key", "params": {{"name": "key0", "path": "{}"}}}}]}},
  {{"subsystem": "bdev", "config": [{{"method": "bdev_malloc_create", "params": {{"name": "Malloc0", "num_blocks": 2048, "block_size": 512}}}},
                                   {{"method": "bdev_null_create", "params": {{"name": "Null0", "num_blocks": 2048, "block_size": 512}}}}]}},
  {{"subsystem": "nvmf", "config": [
    {{"method": "nvmf_create_transport", "params": {{"trtype": "TCP", "max_queue_depth": 128}}}},
    {{"method": "nvmf_create_subsystem", "params": {{"nqn": "nqn.2016-06.io.spdk:a", "serial_number": "abc"}}}},
    {{"method": "nvmf_subsystem_add_host", "params": {{"nqn": "nqn.2016-06.io.spdk:a", "host": "nqn.2014-08.org.example:h", "dhchap_key": "key0"}}}},
    {{"method": "nvmf_subsystem_add_ns", "params": {{"nqn": "nqn.2016-06.io.spdk:a", "namespace": {{"nsid": 1, "bdev_name": "Malloc0"}}}}}},
    {{"method": "nvmf_subsystem_add_ns", "params": {{"nqn": "nqn.2016-06.io.spdk:a", "namespace": {{"nsid": 2, "bdev_name": "Null0"}}}}}},
    {{"method": "nvmf_subsystem_add_listener", "params": {{"nqn": "nqn.2016-06.io.spdk:a",
      "listen_address": {{"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "4420"}}}}}}]}}]}}"#,
        key.display()
    );
    std::fs::write(&saved, &json).unwrap();
    let run = || Command::new(BIN).arg("import-spdk").arg(&saved).output().unwrap();
    let out = run();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let cfg = nvmeof_target::config::TargetConfig::from_toml(&stdout).unwrap();
    let s = &cfg.subsystems[0];
    assert_eq!((s.serial.as_deref(), s.namespaces.len()), (Some("abc"), 1));
    assert_eq!(s.allowed_hosts, Some(vec!["nqn.2014-08.org.example:h".to_string()]));
    assert_eq!(s.host_keys["nqn.2014-08.org.example:h"].key, secret.parse().unwrap());
    for says in ["namespace 2 left out: bdev Null0: a null bdev", "discovery is answered on every port"] {
        assert!(stderr.lines().any(|l| l.starts_with("note: ") && l.contains(says)), "{stderr}");
        assert!(stdout.lines().any(|l| l.starts_with("# note: ") && l.contains(says)), "{stdout}");
    }
    std::fs::remove_file(&key).unwrap();
    let out = run();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let cfg = nvmeof_target::config::TargetConfig::from_toml(&stdout).unwrap();
    assert_eq!(cfg.subsystems[0].allowed_hosts, Some(vec![]), "{stdout}");
    assert!(stderr.contains("key \"key0\" cannot be read") && stderr.contains("allows no host"), "{stderr}");

    std::fs::write(&saved, "[[port]]\nlisten = \"127.0.0.1:4420\"\n").unwrap();
    let out = run();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(saved.to_str().unwrap()) && stderr.contains("not an SPDK configuration"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

/// `check-config`: what a configuration exports and whether it would start
/// here, before a start or a SIGHUP; nothing is created. Exit 0 when it
/// would start, 1 naming each problem, 2 when it does not parse.
#[test]
fn check_config_says_whether_it_would_start() {
    let dir = TempDir::new("check");
    let data = dir.0.join("ns.img");
    let body = |ns: &str| {
        format!(
            "[[port]]\nlisten = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"{NQN}\"\n\
             [[subsystem.namespace]]\nfile = \"{}\"\nsize = \"8M\"\n{ns}",
            data.display()
        )
    };
    let run = |cfg: &Path| {
        let out = Command::new(BIN).arg("check-config").arg(cfg).output().unwrap();
        let (o, e) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code(), o.into_owned(), e.into_owned())
    };
    let cfg = config(&dir.0, &body(""));
    let (code, out, err) = run(&cfg);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("port 1: 127.0.0.1:4420"), "{out}");
    assert!(out.contains(&format!("subsystem {NQN}: every port, any host")), "{out}");
    assert!(out.contains("(created at start: 8388608 bytes, sparse; 16384 blocks of 512)"), "{out}");
    assert!(out.contains("OK (1 namespace in 1 subsystem on 1 port)"), "{out}");
    assert!(!data.exists(), "check-config created the file");

    let cfg = config(&dir.0, &body("[[subsystem.namespace]]\nblock = \"/dev/nvmeof-check-missing\"\n"));
    let (code, out, err) = run(&cfg);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.lines().any(|l| l.starts_with("problem: ")
            && l.contains("namespace 2: /dev/nvmeof-check-missing: No such file or directory")),
        "{err}"
    );
    assert!(err.contains("1 problem: it would not start as it is"), "{err}");

    let cfg = config(&dir.0, &body("bogus = 1\n"));
    let (code, _, err) = run(&cfg);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains(cfg.to_str().unwrap()) && err.contains("bogus"), "{err}");
}

/// A loop device over a file in `dir` with an ext4 filesystem mounted at
/// `dir/mnt`, for [`a_block_device_in_use_is_not_exported`]; unmounted and
/// detached on drop. `None` (with a note) where this machine cannot make one
/// (not root, no loop devices).
struct MountedLoop {
    dev: String,
    mnt: PathBuf,
    mounted: bool,
}

impl MountedLoop {
    fn new(dir: &Path) -> Option<Self> {
        let sh = |args: &[&str]| -> Result<String, String> {
            match Command::new(args[0]).args(&args[1..]).output() {
                Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_owned()),
                Ok(o) => Err(format!("{args:?}: {}", String::from_utf8_lossy(&o.stderr).trim())),
                Err(e) => Err(format!("{args:?}: {e}")),
            }
        };
        // SAFETY: trivial libc call.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("note: skipping the block-device claim test: not root");
            return None;
        }
        let img = dir.join("disk.img");
        std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
        let dev = match sh(&["losetup", "--find", "--show", img.to_str().unwrap()]) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("note: skipping the block-device claim test: {e}");
                return None;
            }
        };
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let mut m = Self { dev, mnt, mounted: false };
        sh(&["mkfs.ext4", "-q", "-F", &m.dev]).unwrap();
        m.mount().unwrap();
        Some(m)
    }

    fn mount(&mut self) -> Result<(), String> {
        let o = Command::new("mount").arg(&self.dev).arg(&self.mnt).output().unwrap();
        self.mounted = o.status.success();
        if self.mounted {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&o.stderr).trim().to_owned())
        }
    }

    fn umount(&mut self) {
        if self.mounted {
            assert!(Command::new("umount").arg(&self.mnt).status().unwrap().success());
            self.mounted = false;
        }
    }
}

impl Drop for MountedLoop {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.mnt).status();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// A writable block namespace claims its device, as LIO's iblock does: a
/// mounted device is not exported (the error says where it is mounted), nor
/// reported fine by check-config; `--read-only` and `--shared` export it
/// anyway; and while the target exports it, it cannot be mounted (nor does
/// that claim fail check-config for the running target's next reload). A
/// device the kernel holds read-only is exported read-only only.
#[test]
fn a_block_device_in_use_is_not_exported() {
    let dir = TempDir::new("claim");
    let Some(mut m) = MountedLoop::new(&dir.0) else { return };
    let dev = m.dev.clone();
    // The command line with `extra` flags.
    let argv = |extra: &[&str]| -> Vec<String> {
        ["--block", dev.as_str(), "--listen", "127.0.0.1:0", "--nqn", NQN]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect()
    };
    let run_with = |extra: &[&str]| run_failing(&argv(extra).iter().map(String::as_str).collect::<Vec<_>>());
    let start_with =
        |extra: &[&str]| Running::start(&argv(extra).iter().map(String::as_str).collect::<Vec<_>>());
    let mounted_at = format!("mounted at {}", m.mnt.display());
    for engine in ["threads", "uring"] {
        let (code, err) = run_with(&["--io-engine", engine]);
        assert_eq!(code, Some(1), "{engine}: {err}");
        assert!(err.contains(&format!("{dev} is in use: {mounted_at}")), "{engine}: {err}");
    }
    let cfg = config(
        &dir.0,
        &format!(
            "[[port]]\nlisten = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"{NQN}\"\n\
             [[subsystem.namespace]]\nblock = \"{dev}\"\n"
        ),
    );
    let check = || {
        let out = Command::new(BIN).arg("check-config").arg(&cfg).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = check();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("namespace 1: {dev} is in use: {mounted_at}")), "{err}");

    // Read-only and shared exports do not claim it.
    for extra in [&["--read-only"][..], &["--shared"][..]] {
        let r = start_with(extra);
        assert_eq!(r.stop(), Some(0), "{extra:?}");
    }

    m.umount();
    assert_eq!(check().0, Some(0));
    let r = start_with(&[]);
    let e = m.mount().expect_err("mounted while exported");
    assert!(e.contains("busy") || e.contains("in use") || e.contains("already"), "{e}");
    let (code, err) = check();
    assert_eq!(code, Some(0), "a running target's claim fails its own check: {err}");
    assert_eq!(r.stop(), Some(0));
    m.mount().expect("mountable once the target stopped");

    // A device the kernel holds read-only is not exported writable (every
    // write would fail), nor reported fine; read-only it is.
    m.umount();
    /// `blockdev --setro DEV` until dropped (the flag would outlive the loop device).
    struct SetRo(String);
    impl Drop for SetRo {
        fn drop(&mut self) {
            let _ = Command::new("blockdev").arg("--setrw").arg(&self.0).status();
        }
    }
    assert!(Command::new("blockdev").arg("--setro").arg(&dev).status().unwrap().success());
    let set_ro = SetRo(dev.clone());
    let (code, err) = run_with(&[]);
    let (check_code, check_err) = check();
    let ro_stop = start_with(&["--read-only"]).stop();
    drop(set_ro);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("{dev}: the device is read-only")), "{err}");
    assert_eq!(check_code, Some(1), "{check_err}");
    assert!(check_err.contains("the device is read-only"), "{check_err}");
    assert_eq!(ro_stop, Some(0));
}
