//! `nvmeof-target check-config FILE`: checks a configuration before it is
//! started or reloaded (SIGHUP), without changing anything, as `nginx -t` or
//! `sshd -t` do: the file parses ([`TargetConfig::from_file`], errors name
//! the key), and then what starting it needs from this machine: each
//! namespace's file or block device is there and opens as it would be
//! opened (read-only or read-write; nothing is created or grown, nothing is
//! written), a writable block device is not in use (mounted, swap, held by
//! LVM or MD: [`crate::backend::claim`]), RAM namespaces fit in memory, the directories of reservation and
//! zone state files exist, and each listen address is one of this machine's.
//! The ports themselves are not bound: the running target holds them.
//!
//! The report says what the file exports (ports, subsystems, namespaces
//! with their sizes) so an administrator sees what a reload will do.

use std::fs::{File, OpenOptions};
use std::net::SocketAddr;
use std::path::Path;

use crate::backend::mem::MemBackend;
use crate::config::{assign_nsids, NamespaceConfig, NamespaceSource, TargetConfig};
use crate::core::Reservations;

/// What [`check`] found.
#[derive(Debug, Default)]
pub struct Report {
    /// What the configuration exports, one line each (subsystem lines
    /// unindented, their namespaces indented).
    pub lines: Vec<String>,
    /// What would keep it from starting here.
    pub problems: Vec<String>,
}

/// What the discovery service answers as: its NQN, which ports its log
/// lists to a host, and the referrals.
fn discovery_line(cfg: &TargetConfig) -> String {
    let nqn = cfg.discovery_nqn.as_deref().unwrap_or(nvmeof_common::spec::DISCOVERY_NQN);
    let f = cfg.discovery_filter;
    let lists = if f.is_match_any() || cfg.listen.len() < 2 {
        "every port".to_string()
    } else if f.address && f.svcid {
        "the port a host asks through".to_string()
    } else if f.address {
        "the ports on the address a host asks on".to_string()
    } else if f.svcid {
        "the ports on the TCP port a host asks on".to_string()
    } else {
        "every port (all TCP)".to_string()
    };
    let mut line = format!("discovery: {nqn}, its log lists {lists} (filter {f})");
    if !cfg.referrals.is_empty() {
        let to: Vec<String> = cfg
            .referrals
            .iter()
            .map(|r| match &r.ports {
                None => r.addr.to_string(),
                Some(p) => format!("{} (through ports {p:?})", r.addr),
            })
            .collect();
        line.push_str(&format!(", referrals {}", to.join(", ")));
    }
    line
}

/// Checks `cfg` against this machine.
pub fn check(cfg: &TargetConfig) -> Report {
    let mut r = Report::default();
    for (i, addr) in cfg.listen.iter().enumerate() {
        let p = cfg.port_params(i);
        let mut own = Vec::new();
        if let Some(ic) = p.in_capsule_data {
            own.push(format!("in-capsule data {ic} bytes"));
        }
        if let Some(q) = p.max_queue_entries {
            own.push(format!("{q} queue entries"));
        }
        let own = if own.is_empty() { String::new() } else { format!(" ({})", own.join(", ")) };
        r.lines.push(format!("port {}: {addr}{own}", cfg.port_id(i)));
        if let Err(e) = local_address(addr) {
            r.problems.push(format!("port {} ({addr}): {e}", cfg.port_id(i)));
        }
    }
    r.lines.push(discovery_line(cfg));
    if let Some(m) = cfg.metrics_listen {
        r.lines.push(format!("metrics: http://{m}{}", crate::metrics::METRICS_PATH));
        if let Err(e) = local_address(&m) {
            r.problems.push(format!("metrics listen {m}: {e}"));
        }
    }
    for s in &cfg.subsystems {
        let ports = s.ports.as_ref().map_or_else(
            || "every port".to_string(),
            |p| if p.is_empty() { "no port".into() } else { format!("ports {p:?}") },
        );
        let hosts =
            s.allowed_hosts.as_ref().map_or_else(|| "any host".to_string(), |h| format!("{} hosts", h.len()));
        r.lines.push(format!("subsystem {}: {ports}, {hosts}", s.nqn));
        for (nsid, n) in assign_nsids(&s.namespaces) {
            match store(n) {
                Ok((what, bytes)) => {
                    r.lines.push(format!("  namespace {nsid}: {what}"));
                    // Zones::new: at least one zone.
                    if let Some(z) = n.zoned.filter(|z| z.zone_size > bytes) {
                        r.problems.push(format!(
                            "subsystem {} namespace {nsid}: zone size {} is larger than the namespace ({bytes} bytes)",
                            s.nqn, z.zone_size
                        ));
                    }
                }
                Err(e) => r.problems.push(format!("subsystem {} namespace {nsid}: {e}", s.nqn)),
            }
            for (what, file) in
                [("reservations_file", &n.reservations_file), ("zone_state_file", &n.zone_state_file)]
            {
                if let Some(e) = file.as_deref().and_then(parent_missing) {
                    r.problems.push(format!("subsystem {} namespace {nsid} {what}: {e}", s.nqn));
                }
            }
            // Registrations a start would refuse to drop (the bdev UUID
            // only fills a file that names none).
            if let Some(path) = &n.reservations_file {
                if let Err(e) =
                    Reservations::persistent(path.clone(), n.reservations_format.file_format([0; 16]))
                {
                    r.problems.push(format!("subsystem {} namespace {nsid} reservations_file: {e}", s.nqn));
                }
            }
        }
    }
    r
}

/// Whether `addr`'s IP is one of this machine's (a socket binds to it), or
/// a wildcard.
fn local_address(addr: &SocketAddr) -> Result<(), String> {
    let probe = SocketAddr::new(addr.ip(), 0);
    std::net::UdpSocket::bind(probe).map(drop).map_err(|e| format!("not an address of this machine: {e}"))
}

/// The store of `n` as starting would open it: a description and its size
/// in bytes, or why it would not open.
fn store(n: &NamespaceConfig) -> Result<(String, u64), String> {
    let bs = n.block_size as u64;
    match &n.source {
        NamespaceSource::Ram(size) => {
            MemBackend::check_capacity(*size)?;
            Ok((format!("RAM, {size} bytes ({} blocks of {bs})", size / bs), *size))
        }
        NamespaceSource::File { path, size, .. } => {
            let meta = match std::fs::metadata(path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return match size {
                        Some(want) if !n.read_only => match parent_missing(path) {
                            Some(e) => Err(format!("{}: {e}", path.display())),
                            None => Ok((
                                format!(
                                    "file {} (created at start: {want} bytes, sparse; {} blocks of {bs})",
                                    path.display(),
                                    want / bs
                                ),
                                *want,
                            )),
                        },
                        _ => Err(format!("{}: does not exist (give `size` to create it)", path.display())),
                    };
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
                Ok(m) => m,
            };
            if !meta.is_file() {
                return Err(format!("{} is not a regular file", path.display()));
            }
            open(path, n.read_only)?;
            let len = meta.len().max(size.unwrap_or(0));
            if len < bs {
                return Err(format!("{} is smaller than one {bs}-byte block", path.display()));
            }
            let grown = if len > meta.len() {
                format!(", grown at start from {}", meta.len())
            } else {
                String::new()
            };
            Ok((
                format!("file {}: {len} bytes{grown} ({} blocks of {bs}){}", path.display(), len / bs, ro(n)),
                len,
            ))
        }
        NamespaceSource::Block { path, exclusive, .. } => {
            let f = open(path, n.read_only)?;
            let g = crate::backend::sys::block_device_geometry(&f, path, None)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if !n.read_only {
                crate::backend::sys::check_writable(&f, path).map_err(|e| e.to_string())?;
            }
            // What a start would find claiming it (`claim::claim`), as far as
            // the system tells: not an `O_EXCL` open, so that a running target
            // holding the device does not fail the check of its next reload.
            if *exclusive && !n.read_only {
                use std::os::unix::fs::MetadataExt;
                let rdev = f.metadata().map_err(|e| format!("{}: {e}", path.display()))?.rdev();
                if let Some(why) = crate::backend::claim::in_use(rdev) {
                    return Err(format!(
                        "{} is in use: {why} (`exclusive = false` exports it anyway)",
                        path.display()
                    ));
                }
            }
            let what = format!(
                "block device {}: {} bytes ({} blocks of {}){}",
                path.display(),
                g.size,
                g.size / g.block_size as u64,
                g.block_size,
                ro(n)
            );
            Ok((what, g.size))
        }
    }
}

fn ro(n: &NamespaceConfig) -> &'static str {
    if n.read_only {
        ", read-only"
    } else {
        ""
    }
}

/// Opens `path` as the target would (reading, and writing unless
/// `read_only`), without creating it.
fn open(path: &Path, read_only: bool) -> Result<File, String> {
    OpenOptions::new().read(true).write(!read_only).open(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Why the directory `path` would be created in is missing, if it is.
fn parent_missing(path: &Path) -> Option<String> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty())?;
    (!dir.is_dir()).then(|| format!("directory {} does not exist", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("nvmeof-check-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reports_what_it_exports_and_what_would_not_start() {
        let d = dir();
        let there = d.join("there.img");
        std::fs::File::create(&there).unwrap().set_len(1 << 20).unwrap();
        let small = d.join("small.img");
        std::fs::File::create(&small).unwrap().set_len(100).unwrap();
        let cfg = TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:4420\"\n[[port]]\nlisten = \"192.0.2.77:4420\"\nportid = 7\nmax_queue_entries = 64\n\
             [[subsystem]]\nnqn = \"nqn.2026-12.io.nvmeof:a\"\nports = [1]\n\
             [[subsystem.namespace]]\nfile = \"{there}\"\n\
             [[subsystem.namespace]]\nfile = \"{new}\"\nsize = \"4M\"\n\
             [[subsystem.namespace]]\nram = \"1M\"\n\
             [[subsystem.namespace]]\nfile = \"{missing}\"\n\
             [[subsystem.namespace]]\nfile = \"{small}\"\n\
             [[subsystem.namespace]]\nfile = \"{nodir}\"\nsize = \"1M\"\n\
             [[subsystem.namespace]]\nblock = \"{there}\"\n\
             [[subsystem.namespace]]\nram = \"1M\"\nreservations_file = \"{nodir}\"\n\
             [[subsystem.namespace]]\nram = \"1M\"\nzoned = true\nzone_size = \"2M\"\n\
             [[subsystem.namespace]]\nram = \"1M\"\nreservations_file = \"{small}\"\nreservations_format = \"spdk\"\n",
            there = there.display(),
            new = d.join("new.img").display(),
            missing = d.join("missing.img").display(),
            small = small.display(),
            nodir = d.join("no/such/dir.img").display(),
        ))
        .unwrap();
        let r = check(&cfg);
        let lines = r.lines.join("\n");
        for want in [
            "port 1: 127.0.0.1:4420",
            "port 7: 192.0.2.77:4420 (64 queue entries)",
            "discovery: nqn.2014-08.org.nvmexpress.discovery, its log lists every port (filter match_any)",
            "subsystem nqn.2026-12.io.nvmeof:a: ports [1], any host",
            &format!("  namespace 1: file {}: 1048576 bytes (2048 blocks of 512)", there.display()),
            "  namespace 2: file ",
            "(created at start: 4194304 bytes, sparse; 8192 blocks of 512)",
            "  namespace 3: RAM, 1048576 bytes (2048 blocks of 512)",
        ] {
            assert!(lines.contains(want), "no {want:?} in\n{lines}");
        }
        let problems = r.problems.join("\n");
        for want in [
            "port 7 (192.0.2.77:4420): not an address of this machine",
            "namespace 4: ",
            "missing.img: does not exist (give `size` to create it)",
            "namespace 5: ",
            "small.img is smaller than one 512-byte block",
            "namespace 6: ",
            "no/such does not exist",
            "namespace 7: ",
            "is not a block device",
            "namespace 8 reservations_file: directory ",
            "namespace 9: zone size 2097152 is larger than the namespace (1048576 bytes)",
            // 100 zero bytes: not SPDK's reservations JSON.
            "namespace 10 reservations_file: ",
            "small.img: not SPDK's reservations JSON",
        ] {
            assert!(problems.contains(want), "no {want:?} in\n{problems}");
        }
        assert_eq!(r.problems.len(), 8, "{problems}");
        assert!(!d.join("new.img").exists(), "nothing is created");
        assert_eq!(std::fs::metadata(&small).unwrap().len(), 100, "nothing is grown");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The discovery line names the NQN, what the filter lists and the
    /// referrals.
    #[test]
    fn reports_the_discovery_service() {
        let line = |toml: &str| discovery_line(&TargetConfig::from_toml(toml).unwrap());
        let two = "[[port]]\nlisten = \"127.0.0.1:4420\"\n[[port]]\nlisten = \"127.0.0.1:4421\"\n";
        assert_eq!(
            line(&format!(
                "discovery_nqn = \"nqn.2026-12.io.example:d\"\ndiscovery_filter = \"address,svcid\"\n{two}\
                 [[referral]]\naddress = \"192.0.2.1:8009\"\n[[referral]]\naddress = \"192.0.2.2:8009\"\nports = [2]\n"
            )),
            "discovery: nqn.2026-12.io.example:d, its log lists the port a host asks through (filter address,svcid), \
             referrals 192.0.2.1:8009, 192.0.2.2:8009 (through ports [2])"
        );
        assert!(line(&format!("discovery_filter = \"svcid\"\n{two}"))
            .contains("the ports on the TCP port a host asks on"));
        assert!(line(&format!("discovery_filter = \"transport\"\n{two}")).contains("every port (all TCP)"));
        // One port: every port, whatever the filter.
        assert!(line("discovery_filter = \"address\"\n[[port]]\nlisten = \"127.0.0.1:4420\"\n")
            .contains("lists every port"));
    }
}
