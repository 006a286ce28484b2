//! Target configuration: from the command line or a TOML file.
//!
//! ```toml
//! [limits]            # all optional
//! mdts = 8            # 2^8 × 4 KiB = 1 MiB per command
//! max_io_queues = 128
//! max_queue_entries = 1024
//! in_capsule_data = 16384
//! max_h2c_data = 1048576
//! max_connections = 1024
//! poll_us = 0         # busy-poll after activity (µs); 0 = sleep in epoll
//!
//! [[port]]
//! listen = "0.0.0.0:4420"
//!
//! [[subsystem]]
//! nqn = "nqn.2026-11.io.nvmeof:disk"
//! model = "nvmeof"                       # optional
//! allowed_hosts = ["nqn.2014-08.org.nvmexpress:uuid:..."]   # omit: any host
//!
//! [[subsystem.namespace]]
//! nsid = 1                               # optional: next free
//! file = "/var/tmp/disk.img"             # or ram = "1G", or block = "/dev/sdb"
//! size = "10G"                           # file only: create sparse / grow
//! block_size = 512                       # optional
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use crate::core::Limits;

/// Errors that name the key and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// File could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// TOML syntax or type error (the message names the key).
    #[error("{0}")]
    Toml(String),
    /// A value is out of range or inconsistent.
    #[error("{key}: {why}")]
    Invalid {
        /// Dotted key path.
        key: String,
        /// Reason.
        why: String,
    },
}

fn invalid(key: impl Into<String>, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { key: key.into(), why: why.into() }
}

/// Parses sizes like `4096`, `4k`, `512M`, `1G`, `2T` (binary units).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_lowercase();
            let mul: u64 = match unit.trim_end_matches("ib").trim_end_matches('b') {
                "" => 1,
                "k" => 1 << 10,
                "m" => 1 << 20,
                "g" => 1 << 30,
                "t" => 1 << 40,
                _ => return Err(format!("unknown size unit in {s:?} (use k, M, G or T)")),
            };
            (&t[..i], mul)
        }
        None => (t, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("not a size: {s:?}"))?;
    n.checked_mul(mul).ok_or_else(|| format!("size too large: {s:?}"))
}

/// Where a namespace's data lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceSource {
    /// Regular file, created sparse with `size` if given.
    File {
        /// Path.
        path: PathBuf,
        /// Create/grow to this many bytes.
        size: Option<u64>,
    },
    /// Block device.
    Block(PathBuf),
    /// RAM of this many bytes.
    Ram(u64),
}

/// A namespace to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// NSID (None: next free).
    pub nsid: Option<u32>,
    /// Backing store.
    pub source: NamespaceSource,
    /// Logical block size.
    pub block_size: u32,
}

/// A subsystem to export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubsystemConfig {
    /// NQN.
    pub nqn: String,
    /// Model string.
    pub model: String,
    /// Allowed host NQNs (None = any).
    pub allowed_hosts: Option<Vec<String>>,
    /// Namespaces.
    pub namespaces: Vec<NamespaceConfig>,
}

/// The whole configuration.
#[derive(Clone, Debug)]
pub struct TargetConfig {
    /// Listen addresses.
    pub listen: Vec<SocketAddr>,
    /// Subsystems.
    pub subsystems: Vec<SubsystemConfig>,
    /// Limits.
    pub limits: Limits,
    /// Busy-poll window in µs.
    pub poll_us: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    port: Vec<RawPort>,
    #[serde(default)]
    subsystem: Vec<RawSubsystem>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    mdts: Option<u8>,
    max_io_queues: Option<u16>,
    max_queue_entries: Option<u32>,
    in_capsule_data: Option<u32>,
    max_h2c_data: Option<u32>,
    max_connections: Option<usize>,
    poll_us: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    listen: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSubsystem {
    nqn: String,
    model: Option<String>,
    allowed_hosts: Option<Vec<String>>,
    #[serde(default)]
    namespace: Vec<RawNamespace>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNamespace {
    nsid: Option<u32>,
    file: Option<PathBuf>,
    ram: Option<String>,
    block: Option<PathBuf>,
    size: Option<String>,
    block_size: Option<u32>,
}

/// Default model string.
pub const DEFAULT_MODEL: &str = "nvmeof";

impl TargetConfig {
    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Toml(e.to_string()))?;
        let mut limits = Limits::default();
        let l = raw.limits;
        if let Some(v) = l.mdts {
            limits.mdts = v;
        }
        if let Some(v) = l.max_io_queues {
            if v == 0 {
                return Err(invalid("limits.max_io_queues", "must be at least 1"));
            }
            limits.max_io_queues = v;
        }
        if let Some(v) = l.max_queue_entries {
            if !(16..=65536).contains(&v) {
                return Err(invalid("limits.max_queue_entries", "must be 16..=65536"));
            }
            limits.max_queue_entries = v;
        }
        if let Some(v) = l.in_capsule_data {
            if v > 1 << 20 || v % 16 != 0 {
                return Err(invalid("limits.in_capsule_data", "must be a multiple of 16 up to 1 MiB"));
            }
            limits.in_capsule_data = v;
        }
        if let Some(v) = l.max_h2c_data {
            if v < 4096 || v % 4 != 0 {
                return Err(invalid("limits.max_h2c_data", "must be ≥ 4096 and a multiple of 4"));
            }
            limits.max_h2c_data = v;
        }
        if let Some(v) = l.max_connections {
            limits.max_connections = v;
        }
        let mut listen = Vec::new();
        for (i, p) in raw.port.iter().enumerate() {
            let a = p
                .listen
                .parse()
                .map_err(|e| invalid(format!("port[{i}].listen"), format!("{:?}: {e}", p.listen)))?;
            listen.push(a);
        }
        if listen.is_empty() {
            listen.push(default_listen());
        }
        let mut subsystems = Vec::new();
        for (i, s) in raw.subsystem.into_iter().enumerate() {
            let key = format!("subsystem[{i}]");
            nvmeof_common::spec::nqn::validate_lax(&s.nqn)
                .map_err(|e| invalid(format!("{key}.nqn"), e.to_string()))?;
            let mut namespaces = Vec::new();
            for (j, n) in s.namespace.into_iter().enumerate() {
                let nkey = format!("{key}.namespace[{j}]");
                let size = n
                    .size
                    .as_deref()
                    .map(parse_size)
                    .transpose()
                    .map_err(|e| invalid(format!("{nkey}.size"), e))?;
                let source = match (n.file, n.ram, n.block) {
                    (Some(path), None, None) => NamespaceSource::File { path, size },
                    (None, Some(r), None) => {
                        NamespaceSource::Ram(parse_size(&r).map_err(|e| invalid(format!("{nkey}.ram"), e))?)
                    }
                    (None, None, Some(b)) => NamespaceSource::Block(b),
                    _ => return Err(invalid(nkey, "exactly one of file, ram or block is required")),
                };
                let block_size = n.block_size.unwrap_or(512);
                if !matches!(block_size, 512 | 1024 | 2048 | 4096) {
                    return Err(invalid(format!("{nkey}.block_size"), "must be 512, 1024, 2048 or 4096"));
                }
                if n.nsid == Some(0) || n.nsid.is_some_and(|x| x >= 0xFFFF_FFFE) {
                    return Err(invalid(format!("{nkey}.nsid"), "must be 1..=0xFFFFFFFD"));
                }
                namespaces.push(NamespaceConfig { nsid: n.nsid, source, block_size });
            }
            subsystems.push(SubsystemConfig {
                nqn: s.nqn,
                model: s.model.unwrap_or_else(|| DEFAULT_MODEL.to_string()),
                allowed_hosts: s.allowed_hosts,
                namespaces,
            });
        }
        Ok(Self { listen, subsystems, limits, poll_us: l.poll_us.unwrap_or(0) })
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Self::from_toml(&text)
    }
}

/// 0.0.0.0:4420, the IANA NVMe/TCP port.
pub fn default_listen() -> SocketAddr {
    "0.0.0.0:4420".parse().unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert!(parse_size("12Q").is_err());
    }

    #[test]
    fn example_config_parses_and_errors_name_keys() {
        let c = TargetConfig::from_toml(include_str!("../examples/target.toml")).unwrap();
        assert_eq!(c.subsystems.len(), 2);
        assert_eq!(c.listen.len(), 2);
        let e = TargetConfig::from_toml("[[subsystem]]\nnqn = \"nqn.2026-11.x:y\"\n[[subsystem.namespace]]\nram = \"1G\"\nfile = \"/x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("subsystem[0].namespace[0]"), "{e}");
        let e = TargetConfig::from_toml("[limits]\nmax_h2c_data = 100\n").unwrap_err().to_string();
        assert!(e.contains("limits.max_h2c_data"), "{e}");
        let e = TargetConfig::from_toml("[[port]]\nlisten = \"nonsense\"\n").unwrap_err().to_string();
        assert!(e.contains("port[0].listen"), "{e}");
        let e = TargetConfig::from_toml("[bogus]\n").unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
    }
}
