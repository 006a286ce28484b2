//! Prometheus metrics of a running target (`--metrics-listen ADDR`,
//! configuration `[metrics] listen`): `GET /metrics` on that address answers
//! the Prometheus text exposition format (version 0.0.4), which Prometheus,
//! VictoriaMetrics, Grafana Agent and `curl` read.
//!
//! What it reports is what the target already keeps for its hosts: the
//! SMART counters of each namespace (the commands and bytes hosts read and
//! wrote, [`crate::core::io_stats`]), its capacity and what a thin store holds
//! (the Namespace Utilization), the live controllers of each subsystem with
//! their I/O queues and Error Information log count, and the connections
//! against `max_connections`. SPDK answers the same questions over its RPC
//! (`bdev_get_iostat`, `nvmf_subsystem_get_controllers`), nvmet through the
//! host's block statistics and debugfs; here a scrape reads them without
//! touching the data path (the counters are summed from their per-thread
//! shards, as a SMART read does).
//!
//! [`render`] is the exposition, without sockets; [`serve`] is the HTTP
//! listener around it: one request per connection (`Connection: close`),
//! `GET` or `HEAD` of `/metrics` only, a bounded request head and time per
//! connection and a bounded number of scrapes at once, so a stuck or hostile
//! client cannot hold the target's threads or memory.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tracing::{debug, info, warn};

use crate::core::controller::{Controller, Teardown};
use crate::core::io_stats::IoTotals;
use crate::core::{Namespace, Subsystem, Target};

/// Path the metrics are served on (Prometheus' default `metrics_path`).
pub const METRICS_PATH: &str = "/metrics";
/// Content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Largest request head read (request line and headers); a longer one gets
/// 431 Request Header Fields Too Large.
const MAX_REQUEST_HEAD: usize = 8192;
/// Most headers parsed in a request.
const MAX_HEADERS: usize = 64;
/// Time a client has to send its request and read the answer.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Scrapes served at once; a connection past them is closed at once (a
/// scraper retries at its next interval).
const MAX_SCRAPES: usize = 16;

/// Writes one metric family: its `# HELP` and `# TYPE` lines, then a
/// sample per `(labels, value)`, labels as (name, value) pairs.
fn family<'l, L: AsRef<[(&'static str, &'l str)]>>(
    out: &mut String,
    (name, kind, help): Meta,
    samples: impl IntoIterator<Item = (L, u64)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        out.push_str(name);
        let labels = labels.as_ref();
        if !labels.is_empty() {
            out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(k);
                out.push_str("=\"");
                escape_label_value(out, v);
                out.push('"');
            }
            out.push('}');
        }
        let _ = writeln!(out, " {value}");
    }
}

/// A label value as the text format quotes it: backslash, double quote and
/// line feed escaped (an NQN may hold any printable character but the last).
fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// The subsystems a scrape reports: the discovery subsystem first (its
/// controllers are the hosts' discovery connections), then the NVM
/// subsystems by NQN.
fn subsystems(target: &Target) -> Vec<Arc<Subsystem>> {
    std::iter::once(target.discovery.clone()).chain(target.subsystems()).collect()
}

/// A metric family's name, type and help text.
type Meta = (&'static str, &'static str, &'static str);

/// The metrics of `target` now, in the text exposition format.
pub fn render(target: &Target) -> String {
    const NONE: [(&str, &str); 0] = [];
    let mut text = String::with_capacity(4096);
    let out = &mut text;
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    family(out, ("nvmeof_target_info", "gauge", "The target's version (value 1)."), [(version, 1)]);
    let connections: [(Meta, u64); 3] = [
        (
            ("nvmeof_connections", "gauge", "TCP connections (queues: admin, I/O and discovery) open now."),
            target.connection_count() as u64,
        ),
        (
            ("nvmeof_max_connections", "gauge", "Most connections open at once (limits.max_connections)."),
            target.limits.max_connections as u64,
        ),
        (
            (
                "nvmeof_connections_refused_total",
                "counter",
                "Connections closed at once because max_connections were open.",
            ),
            target.connections_refused(),
        ),
    ];
    for (meta, v) in connections {
        family(out, meta, [(NONE, v)]);
    }

    // Per port: the connections through it (which path hosts use).
    let ports = target.ports();
    let (ids, addrs): (Vec<String>, Vec<String>) =
        ports.iter().map(|p| (p.id.to_string(), p.addr.to_string())).unzip();
    family(
        out,
        (
            "nvmeof_port_connections",
            "gauge",
            "TCP connections open now through each port (portid, listen address).",
        ),
        ports.iter().enumerate().map(|(i, p)| {
            (
                [("portid", ids[i].as_str()), ("address", addrs[i].as_str())],
                p.connections.load(Ordering::Relaxed) as u64,
            )
        }),
    );

    // Per subsystem: its live controllers (one being torn down is gone for
    // its host already).
    let subsystems = subsystems(target);
    let disc_nqn = target.discovery_nqn();
    let live: Vec<Vec<_>> = subsystems
        .iter()
        .map(|s| s.controllers().into_iter().filter(|c| c.teardown_state() == Teardown::Alive).collect())
        .collect();
    family(
        out,
        ("nvmeof_subsystem_controllers", "gauge", "Live controllers (host associations) of each subsystem."),
        subsystems.iter().zip(&live).map(|(s, c)| {
            ([("subsystem", if s.discovery { disc_nqn.as_str() } else { s.nqn.as_str() })], c.len() as u64)
        }),
    );

    // Per controller: which host, how many I/O queues, how many errors.
    let ctrls: Vec<_> = live.into_iter().flatten().collect();
    let ids: Vec<String> = ctrls.iter().map(|c| c.cntlid.to_string()).collect();
    // The host's IP address (nvmet's debugfs `host_traddr`): which node it is.
    let traddrs: Vec<String> =
        ctrls.iter().map(|c| c.host_addr.map(|a| a.ip().to_string()).unwrap_or_default()).collect();
    // The port its admin queue came in on (nvmet's debugfs `port`).
    let portids: Vec<String> = ctrls.iter().map(|c| c.port_id.to_string()).collect();
    let labels = |i: usize| {
        [
            (
                "subsystem",
                if ctrls[i].subsys.discovery { disc_nqn.as_str() } else { ctrls[i].subsys.nqn.as_str() },
            ),
            ("cntlid", ids[i].as_str()),
            ("hostnqn", ctrls[i].hostnqn.as_str()),
            ("host_traddr", traddrs[i].as_str()),
            ("portid", portids[i].as_str()),
        ]
    };
    type CtrlValue = fn(&Controller) -> u64;
    let per_ctrl: [(Meta, CtrlValue); 2] = [
        (("nvmeof_controller_io_queues", "gauge", "I/O queues a controller has connected."), |c| {
            c.io_queue_count() as u64
        }),
        (
            (
                "nvmeof_controller_errors_total",
                "counter",
                "Commands of a controller that failed (its Error Information log count).",
            ),
            Controller::error_count,
        ),
    ];
    for (meta, get) in per_ctrl {
        family(out, meta, ctrls.iter().enumerate().map(|(i, c)| (labels(i), get(c))));
    }

    // Per namespace of the NVM subsystems.
    let nss: Vec<_> = subsystems
        .iter()
        .filter(|s| !s.discovery)
        .flat_map(|s| s.namespaces().values().map(|ns| (s.nqn.clone(), ns.clone())).collect::<Vec<_>>())
        .collect();
    let nsids: Vec<String> = nss.iter().map(|(_, ns)| ns.nsid.to_string()).collect();
    let labels = |i: usize| [("subsystem", nss[i].0.as_str()), ("nsid", nsids[i].as_str())];
    let totals: Vec<IoTotals> = nss.iter().map(|(_, ns)| ns.io_stats.totals()).collect();
    let capacity = |ns: &Namespace| ns.blocks() << ns.block_shift;
    type NsValue<'a> = &'a dyn Fn(usize) -> u64;
    let per_ns: [(Meta, NsValue); 7] = [
        (
            (
                "nvmeof_namespace_read_commands_total",
                "counter",
                "Read and Compare commands hosts sent (SMART Host Read Commands).",
            ),
            &|i| totals[i].read_cmds,
        ),
        (("nvmeof_namespace_read_bytes_total", "counter", "Bytes those commands read."), &|i| {
            totals[i].read_bytes
        }),
        (
            (
                "nvmeof_namespace_write_commands_total",
                "counter",
                "Write, Write Zeroes and Copy commands hosts sent (SMART Host Write Commands).",
            ),
            &|i| totals[i].write_cmds,
        ),
        (("nvmeof_namespace_write_bytes_total", "counter", "Bytes the Write commands carried."), &|i| {
            totals[i].write_bytes
        }),
        (("nvmeof_namespace_capacity_bytes", "gauge", "Size of a namespace."), &|i| capacity(&nss[i].1)),
        (
            (
                "nvmeof_namespace_used_bytes",
                "gauge",
                "Bytes a thin namespace's store holds (a sparse file's blocks, the RAM written; Identify NUSE); the capacity where every block is always there (block devices).",
            ),
            &|i| nss[i].1.backend.allocated_bytes().unwrap_or_else(|| capacity(&nss[i].1)),
        ),
        (
            (
                "nvmeof_namespace_write_protected",
                "gauge",
                "1 where a namespace is write protected (read_only, or Set Features 84h).",
            ),
            &|i| nss[i].1.write_protected() as u64,
        ),
    ];
    for (meta, get) in per_ns {
        family(out, meta, (0..nss.len()).map(|i| (labels(i), get(i))));
    }
    text
}

/// Binds the metrics listener (at startup, so an address in use fails the
/// start with its name rather than later in a log line).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let l = std::net::TcpListener::bind(addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("metrics listen {addr}: {e}")))?;
    l.set_nonblocking(true)?;
    TcpListener::from_std(l)
}

/// Serves scrapes on `listener` until `stop` turns true.
pub async fn serve(listener: TcpListener, target: Arc<Target>, mut stop: watch::Receiver<bool>) {
    let local = listener.local_addr().ok();
    info!(addr = ?local, path = METRICS_PATH, "serving Prometheus metrics");
    let scrapes = Arc::new(Semaphore::new(MAX_SCRAPES));
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors and the like: wait rather than spin.
                    warn!(error = %e, "metrics: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let Ok(permit) = scrapes.clone().try_acquire_owned() else {
            warn!(%peer, limit = MAX_SCRAPES, "metrics: too many scrapes at once, connection closed");
            continue;
        };
        let target = target.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(CONNECTION_TIMEOUT, answer(stream, &target)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => debug!(%peer, error = %e, "metrics: connection failed"),
                Err(_) => debug!(%peer, "metrics: client too slow, connection closed"),
            }
        });
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    /// `GET` (with the body) or `HEAD` (without) of the metrics.
    Metrics { head_only: bool },
    /// An answer other than the metrics: status line and body.
    Other(&'static str, &'static str),
}

/// Parses a complete request head (`httparse`); `None` while incomplete.
fn parse_request(buf: &[u8]) -> Option<Request> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Partial) => None,
        Err(_) => Some(Request::Other("400 Bad Request", "bad request\n")),
        Ok(httparse::Status::Complete(_)) => {
            let head_only = match req.method {
                Some("GET") => false,
                Some("HEAD") => true,
                _ => return Some(Request::Other("405 Method Not Allowed", "only GET and HEAD\n")),
            };
            // A query string (`?name[]=...`, which some scrapers add) is ignored.
            let path = req.path.unwrap_or("").split('?').next().unwrap_or("");
            if path == METRICS_PATH {
                Some(Request::Metrics { head_only })
            } else {
                Some(Request::Other("404 Not Found", "metrics are at /metrics\n"))
            }
        }
    }
}

/// Reads one request from `stream` and answers it.
async fn answer(mut stream: TcpStream, target: &Target) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let request = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(()); // closed before a whole request
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(r) = parse_request(&buf) {
            break r;
        }
        if buf.len() >= MAX_REQUEST_HEAD {
            break Request::Other("431 Request Header Fields Too Large", "request head too large\n");
        }
    };
    let (status, body, head_only) = match request {
        Request::Metrics { head_only } => ("200 OK", render(target), head_only),
        Request::Other(status, body) => (status, body.to_string(), false),
    };
    let mut resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        if status.starts_with("200") { CONTENT_TYPE } else { "text/plain; charset=utf-8" },
        body.len()
    );
    if status.starts_with("405") {
        resp.push_str("Allow: GET, HEAD\r\n");
    }
    resp.push_str("\r\n");
    if !head_only {
        resp.push_str(&body);
    }
    stream.write_all(resp.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;
    use crate::core::controller::Controller;
    use crate::core::{Limits, Namespace};

    fn target_with_ns() -> Arc<Target> {
        let t = Target::new(Limits::default());
        let s = Subsystem::new("nqn.2026-12.io.nvmeof:metrics", "m", None, false);
        s.add_namespace(Arc::new(Namespace::new(&s.nqn, 1, Arc::new(MemBackend::new(1 << 20, 512)))));
        t.add_subsystem(Arc::new(s));
        t
    }

    /// The value of the sample whose line starts with `prefix` (name and labels).
    fn value(text: &str, prefix: &str) -> Option<u64> {
        text.lines().find_map(|l| l.strip_prefix(prefix)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn counts_namespace_io_and_controllers() {
        let t = target_with_ns();
        let s = t.subsystem("nqn.2026-12.io.nvmeof:metrics").unwrap();
        let ns = s.namespace(1).unwrap();
        ns.io_stats.read(4096);
        ns.io_stats.read(512);
        ns.io_stats.write(8192);
        let c = t
            .create_controller(|id| {
                Controller::new(id, s.clone(), "nqn.host:\"a\"\\b".into(), [0; 16], 1, 0, 4)
                    .with_host_addr(Some("192.0.2.7:50000".parse().unwrap()))
            })
            .unwrap();
        assert!(c.add_io_queue(1) && c.add_io_queue(2));
        let text = render(&t);
        let ns = r#"{subsystem="nqn.2026-12.io.nvmeof:metrics",nsid="1"}"#;
        assert_eq!(value(&text, &format!("nvmeof_namespace_read_commands_total{ns}")), Some(2));
        assert_eq!(value(&text, &format!("nvmeof_namespace_read_bytes_total{ns}")), Some(4608));
        assert_eq!(value(&text, &format!("nvmeof_namespace_write_commands_total{ns}")), Some(1));
        assert_eq!(value(&text, &format!("nvmeof_namespace_write_bytes_total{ns}")), Some(8192));
        assert_eq!(value(&text, &format!("nvmeof_namespace_capacity_bytes{ns}")), Some(1 << 20));
        assert_eq!(value(&text, &format!("nvmeof_namespace_write_protected{ns}")), Some(0));
        let sub = r#"{subsystem="nqn.2026-12.io.nvmeof:metrics"}"#;
        assert_eq!(value(&text, &format!("nvmeof_subsystem_controllers{sub}")), Some(1));
        let disc = r#"{subsystem="nqn.2014-08.org.nvmexpress.discovery"}"#;
        assert_eq!(value(&text, &format!("nvmeof_subsystem_controllers{disc}")), Some(0));
        // The host NQN's quote and backslash are escaped.
        let ctrl = format!(
            r#"{{subsystem="nqn.2026-12.io.nvmeof:metrics",cntlid="{}",hostnqn="nqn.host:\"a\"\\b",host_traddr="192.0.2.7",portid="1"}}"#,
            c.cntlid
        );
        assert_eq!(value(&text, &format!("nvmeof_controller_io_queues{ctrl}")), Some(2));
        assert_eq!(value(&text, &format!("nvmeof_controller_errors_total{ctrl}")), Some(0));
        assert_eq!(value(&text, "nvmeof_connections"), Some(0));
        // A controller torn down is no longer reported.
        c.shutdown(crate::core::controller::Teardown::Closed);
        let text = render(&t);
        assert_eq!(value(&text, &format!("nvmeof_subsystem_controllers{sub}")), Some(0));
        assert!(!text.contains("cntlid="), "{text}");
    }

    #[test]
    fn exposition_is_well_formed() {
        let t = target_with_ns();
        let text = render(&t);
        let mut typed = std::collections::BTreeSet::new();
        let mut current = String::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(matches!(kind, "counter" | "gauge"), "{line}");
                assert!(typed.insert(name.to_string()), "family {name} typed twice");
                current = name.to_string();
            } else if line.starts_with("# HELP ") {
                assert!(!line.trim_end().ends_with("HELP"), "{line}");
            } else {
                // name{labels} value, of the family typed last.
                let (series, v) = line.rsplit_once(' ').unwrap();
                v.parse::<u64>().unwrap_or_else(|_| panic!("{line}"));
                let name = series.split('{').next().unwrap();
                assert_eq!(name, current, "{line}");
                assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{line}");
                if name.ends_with("_total") {
                    assert!(text.contains(&format!("# TYPE {name} counter")), "{name}");
                }
            }
        }
        assert!(typed.len() >= 12, "{typed:?}");
    }

    #[test]
    fn request_parsing() {
        assert_eq!(parse_request(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"), None);
        assert_eq!(
            parse_request(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Some(Request::Metrics { head_only: false })
        );
        assert_eq!(
            parse_request(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Some(Request::Metrics { head_only: true })
        );
        assert!(
            matches!(parse_request(b"POST /metrics HTTP/1.1\r\n\r\n"), Some(Request::Other(s, _)) if s.starts_with("405"))
        );
        assert!(
            matches!(parse_request(b"GET / HTTP/1.1\r\n\r\n"), Some(Request::Other(s, _)) if s.starts_with("404"))
        );
        assert!(
            matches!(parse_request(b"\x16\x03\x01\x02\0\r\n\r\n"), Some(Request::Other(s, _)) if s.starts_with("400"))
        );
    }
}
