//! The target's Prometheus metrics (`--metrics-listen`, `[metrics] listen`):
//! scraped over HTTP from a running target while a host does I/O, the
//! counters must be what the host did; the HTTP side answers only GET and
//! HEAD of /metrics, and the binary serves them from its flag.

use std::net::SocketAddr;
use std::time::Duration;

use nvmeof_initiator::{ConnectOptions, Controller, HostIdentity};
use nvmeof_target::server::Server;
use nvmeof_tests::harness::{self, bounded, built_binary, HeldPort, SUBNQN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `request` to `addr` and returns the status line, the head and the body.
async fn http(addr: SocketAddr, request: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).await.expect("metrics listener");
    s.write_all(request.as_bytes()).await.unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).await.unwrap();
    let resp = String::from_utf8(resp).expect("UTF-8 answer");
    let (head, body) = resp.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.lines().next().unwrap().to_string();
    (status, head.to_string(), body.to_string())
}

async fn scrape(addr: SocketAddr) -> String {
    let (status, head, body) = http(addr, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert_eq!(status, "HTTP/1.1 200 OK", "{head}");
    assert!(head.contains("Content-Type: text/plain; version=0.0.4"), "{head}");
    assert!(head.contains(&format!("Content-Length: {}", body.len())), "{head}");
    body
}

/// The value of the sample named `series` (metric name and labels).
fn value(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Starts the harness target with `max_connections` and metrics on
/// 127.0.0.1:0; returns it, its NVMe/TCP address and its metrics address.
async fn start(max_connections: Option<usize>) -> (Server, SocketAddr, SocketAddr) {
    let mut cfg = harness::default_config();
    cfg.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    if let Some(m) = max_connections {
        cfg.limits.max_connections = m;
    }
    let (server, addr) = harness::start(&cfg).await;
    let maddr = server.metrics_addr.expect("metrics address");
    (server, addr, maddr)
}

fn ns1(metric: &str) -> String {
    format!("{metric}{{subsystem=\"{SUBNQN}\",nsid=\"1\"}}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_a_host_did() {
    bounded(60, async {
        let (server, addr, maddr) = start(None).await;

        let before = scrape(maddr).await;
        assert_eq!(value(&before, &ns1("nvmeof_namespace_read_commands_total")), Some(0));
        assert_eq!(value(&before, &ns1("nvmeof_namespace_capacity_bytes")), Some(harness::NS1_SIZE));
        assert_eq!(value(&before, "nvmeof_connections"), Some(0));

        let host = HostIdentity::from_id(*b"metrics-host-001");
        let hostnqn = host.nqn.clone();
        let o = ConnectOptions { host: Some(host), io_queues: 2, ..ConnectOptions::default() };
        let ctrl = Controller::connect(addr, SUBNQN, o).await.expect("connect");
        let ns = ctrl.namespace(1).await.unwrap();
        let data = vec![0x5Au8; 4096];
        for i in 0..3 {
            ns.write(i * 8, &data).await.unwrap();
        }
        let mut buf = vec![0u8; 8192];
        for i in 0..5 {
            ns.read(i * 16, &mut buf).await.unwrap();
        }

        let text = scrape(maddr).await;
        assert_eq!(value(&text, &ns1("nvmeof_namespace_read_commands_total")), Some(5), "{text}");
        assert_eq!(value(&text, &ns1("nvmeof_namespace_read_bytes_total")), Some(5 * 8192));
        assert_eq!(value(&text, &ns1("nvmeof_namespace_write_commands_total")), Some(3));
        assert_eq!(value(&text, &ns1("nvmeof_namespace_write_bytes_total")), Some(3 * 4096));
        // RAM is thin: what the writes touched is allocated, not the whole size.
        let used = value(&text, &ns1("nvmeof_namespace_used_bytes")).unwrap();
        assert!((4096..harness::NS1_SIZE).contains(&used), "used {used}");
        // Admin queue and two I/O queues, all through port 1.
        assert_eq!(value(&text, "nvmeof_connections"), Some(3), "{text}");
        let port1 = format!("nvmeof_port_connections{{portid=\"1\",address=\"{addr}\"}}");
        assert_eq!(value(&text, &port1), Some(3), "{text}");
        assert_eq!(value(&text, &format!("nvmeof_subsystem_controllers{{subsystem=\"{SUBNQN}\"}}")), Some(1));
        let ctrl_series = format!(
            "nvmeof_controller_io_queues{{subsystem=\"{SUBNQN}\",cntlid=\"{}\",hostnqn=\"{hostnqn}\",host_traddr=\"127.0.0.1\",portid=\"1\"}}",
            ctrl.info().cntlid
        );
        assert_eq!(value(&text, &ctrl_series), Some(2), "{text}");

        // HEAD: the same head without the body.
        let (status, head, body) = http(maddr, "HEAD /metrics HTTP/1.0\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.is_empty(), "{body}");
        assert!(head.contains(&format!("Content-Length: {}", scrape(maddr).await.len())), "{head}");

        // The host leaves: its controller and connections go.
        ctrl.shutdown().await.unwrap();
        drop(ns);
        drop(ctrl);
        let mut text = String::new();
        for _ in 0..100 {
            text = scrape(maddr).await;
            if value(&text, "nvmeof_connections") == Some(0) && !text.contains("cntlid=") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(value(&text, "nvmeof_connections"), Some(0), "{text}");
        assert_eq!(value(&text, &port1), Some(0), "{text}");
        assert_eq!(value(&text, &format!("nvmeof_subsystem_controllers{{subsystem=\"{SUBNQN}\"}}")), Some(0));
        // Counters stay.
        assert_eq!(value(&text, &ns1("nvmeof_namespace_write_commands_total")), Some(3));
        server.shutdown(Duration::from_secs(1)).await;
        assert!(TcpStream::connect(maddr).await.is_err(), "metrics listener still open after shutdown");
    })
    .await
}

#[tokio::test]
async fn metrics_listener_answers_only_get_and_head_of_metrics() {
    bounded(30, async {
        let (server, _, maddr) = start(None).await;
        let (status, _, _) = http(maddr, "GET / HTTP/1.1\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        let (status, head, _) = http(maddr, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
        assert!(head.contains("Allow: GET, HEAD"), "{head}");
        let (status, _, _) = http(maddr, "\u{1}\u{2} nonsense\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 400 Bad Request");
        // A head that never ends is cut at 8 KiB.
        let long = format!("GET /metrics HTTP/1.1\r\nX-Long: {}", "a".repeat(10_000));
        let (status, _, _) = http(maddr, &long).await;
        assert_eq!(status, "HTTP/1.1 431 Request Header Fields Too Large");
        // A query string is ignored (some scrapers add one).
        let (status, _, body) = http(maddr, "GET /metrics?name[]=x HTTP/1.1\r\n\r\n").await;
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.contains("nvmeof_target_info{version="), "{body}");
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await
}

#[tokio::test]
async fn refused_connections_are_counted() {
    bounded(30, async {
        let (server, addr, maddr) = start(Some(2)).await;
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        // Both counted before the third: wait for the gauge.
        let mut text = String::new();
        for _ in 0..100 {
            text = scrape(maddr).await;
            if value(&text, "nvmeof_connections") == Some(2) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(value(&text, "nvmeof_connections"), Some(2), "{text}");
        let mut c = TcpStream::connect(addr).await.unwrap();
        // The target closes the third at once: end of stream.
        let mut b = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut b)).await.expect("closed in time");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        let text = scrape(maddr).await;
        assert_eq!(value(&text, "nvmeof_connections_refused_total"), Some(1), "{text}");
        assert_eq!(value(&text, "nvmeof_max_connections"), Some(2));
        assert_eq!(value(&text, "nvmeof_connections"), Some(2));
        server.shutdown(Duration::from_millis(200)).await;
    })
    .await
}

/// The binary serves them at `--metrics-listen`, and says where at startup.
#[tokio::test]
async fn binary_serves_metrics_from_its_flag() {
    let bin = tokio::task::spawn_blocking(|| built_binary("nvmeof-target", "nvmeof-target")).await.unwrap();
    // Ports held for the target (it binds them next; no other test can).
    let held = [HeldPort::new(), HeldPort::new()];
    let (addr, maddr) = (held[0].addr(), held[1].addr());
    let mut child = std::process::Command::new(bin)
        .args(["serve", "--ram", "1M", "--nqn", SUBNQN, "--listen", &addr.to_string()])
        .args(["--metrics-listen", &maddr.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut text = None;
    for _ in 0..100 {
        if TcpStream::connect(maddr).await.is_ok() {
            text = Some(bounded(10, scrape(maddr)).await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Stop the child this test started, by its PID, before asserting.
    let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if child.try_wait().unwrap().is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let text = text.expect("metrics served within 5 s");
    assert!(stdout.contains(&format!("Prometheus metrics: http://{maddr}/metrics")), "{stdout}");
    assert_eq!(value(&text, &ns1("nvmeof_namespace_capacity_bytes")), Some(1 << 20), "{text}");
}
