//! Argument parsing and number formatting shared by the tools.

use std::time::Duration;

/// NVMe/TCP port used when an address has none (the IANA NVMe/TCP I/O port,
/// where `nvmeof-target` also serves its discovery controller).
pub const DEFAULT_PORT: u16 = 4420;

/// Parses a byte size: a number with an optional binary suffix
/// (`k`/`K`/`KiB` = 1024, `m`, `g`, `t`; a trailing `B` is allowed), e.g.
/// `4k`, `128K`, `1m`, `256MiB`, `4096`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1u64 << 10),
        Some('m') => (&body[..body.len() - 1], 1 << 20),
        Some('g') => (&body[..body.len() - 1], 1 << 30),
        Some('t') => (&body[..body.len() - 1], 1 << 40),
        _ => (body, 1),
    };
    let n: u64 =
        num.trim().parse().map_err(|_| format!("invalid size {s:?} (examples: 4k, 128k, 1m, 512)"))?;
    n.checked_mul(mult).ok_or_else(|| format!("size {s:?} is too large"))
}

/// Parses a duration: a number (decimals allowed) with an optional unit
/// `ns`, `us`, `ms`, `s`, `m`, `h`; a bare number means seconds (`10s`, `1.5`, `500ms`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("invalid duration {s:?} (examples: 10s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" | "sec" => v,
        "ns" => v / 1e9,
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        u => return Err(format!("invalid duration unit {u:?} in {s:?} (use ns, us, ms, s, m, h)")),
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("duration {s:?} out of range"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a duration that must be positive (`--timeout`): a zero timeout would fail every command.
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("duration {s:?} must be positive"));
    }
    Ok(d)
}

/// Parses a host NQN (`--hostnqn`): not empty, at most 223 bytes, no NUL (what Linux
/// enforces). The Connect data field holds 256 bytes: a longer name was cut short
/// silently, and the host connected under a name it was not given.
pub fn parse_host_nqn(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("the host NQN must not be empty".into());
    }
    nvmeof_common::spec::nqn::validate_lax(s).map_err(|e| e.to_string())?;
    Ok(s.to_string())
}

/// Parses a host identifier (`--hostid`): a UUID, as `nvme connect --hostid`
/// and `/etc/nvme/hostid` give it.
pub fn parse_host_id(s: &str) -> Result<[u8; 16], String> {
    nvmeof_common::spec::nqn::parse_uuid(s.trim())
        .ok_or_else(|| format!("{s:?} is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"))
}

/// Parses a DH-HMAC-CHAP secret (`DHHC-1:..`, as `nvme gen-dhchap-key` prints it).
pub fn parse_dhchap_secret(s: &str) -> Result<nvmeof_common::auth::DhchapSecret, String> {
    s.parse().map_err(|e: nvmeof_common::auth::secret::SecretError| e.to_string())
}

/// Adds the default port to `ADDR` when it has none: `10.0.0.1` →
/// `10.0.0.1:4420`, `::1` → `[::1]:4420`; `host:port` and `[v6]:port` are kept.
pub fn with_default_port(addr: &str, port: u16) -> String {
    let a = addr.trim();
    if a.starts_with('[') {
        return if a.contains("]:") { a.to_string() } else { format!("{a}:{port}") };
    }
    match a.matches(':').count() {
        0 => format!("{a}:{port}"),
        1 => a.to_string(),
        _ => format!("[{a}]:{port}"),
    }
}

/// `ADDR` with the default port added ([`with_default_port`]), checked for a
/// host and a port in 1..=65535: a malformed address is a usage error, not a
/// connection failure.
pub fn target_addr(addr: &str, port: u16) -> Result<String, String> {
    let a = with_default_port(addr, port);
    let bad =
        |why: &str| format!("invalid address {addr:?}: {why} (use HOST, HOST:PORT, [IPv6] or [IPv6]:PORT)");
    let (host, p) = match a.strip_prefix('[') {
        Some(rest) => rest.split_once("]:").ok_or_else(|| bad("unbalanced ["))?,
        None => a.rsplit_once(':').ok_or_else(|| bad("no port"))?,
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(a),
        _ => Err(bad(&format!("port {p:?} is not in 1..=65535"))),
    }
}

/// A byte count with a binary unit: `512 B`, `4 KiB`, `1.5 MiB`.
pub fn fmt_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else if (v - v.round()).abs() < 1e-9 {
        format!("{} {}", v.round() as u64, UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A count in fio's short form: `950`, `12.3k`, `1.20M`.
pub fn fmt_count(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

/// A latency in nanoseconds with a readable unit: `850 ns`, `123.4 us`, `12.35 ms`, `1.203 s`.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("128K"), Ok(128 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("512b"), Ok(512));
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999t").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("3 weeks").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn host_nqns_and_timeouts() {
        assert_eq!(parse_host_nqn("nqn.2014-08.org.example:h"), Ok("nqn.2014-08.org.example:h".into()));
        assert!(parse_host_nqn("").is_err());
        assert!(parse_host_nqn(&"a".repeat(224)).is_err());
        assert!(parse_host_nqn(&"a".repeat(223)).is_ok());
        assert!(parse_host_nqn("nqn.x\u{0}y").is_err());
        assert!(parse_positive_duration("0").is_err());
        assert!(parse_positive_duration("0ms").is_err());
        assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
    }

    #[test]
    fn addresses() {
        assert_eq!(with_default_port("127.0.0.1", 4420), "127.0.0.1:4420");
        assert_eq!(with_default_port("127.0.0.1:5000", 4420), "127.0.0.1:5000");
        assert_eq!(with_default_port("localhost", 4420), "localhost:4420");
        assert_eq!(with_default_port("::1", 4420), "[::1]:4420");
        assert_eq!(with_default_port("[::1]", 4420), "[::1]:4420");
        assert_eq!(with_default_port("[::1]:7", 4420), "[::1]:7");
    }

    #[test]
    fn target_addresses_are_checked() {
        assert_eq!(target_addr("127.0.0.1", 4420).as_deref(), Ok("127.0.0.1:4420"));
        assert_eq!(target_addr("::1", 4420).as_deref(), Ok("[::1]:4420"));
        assert_eq!(target_addr("[::1]:7", 4420).as_deref(), Ok("[::1]:7"));
        assert_eq!(target_addr("host.example:8009", 4420).as_deref(), Ok("host.example:8009"));
        for bad in
            ["", ":4420", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:x", "[::1", "[]:4420"]
        {
            assert!(target_addr(bad, 4420).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_bytes(4096), "4 KiB");
        assert_eq!(fmt_bytes(1 << 20), "1 MiB");
        assert_eq!(fmt_bytes(1536 << 10), "1.5 MiB");
        assert_eq!(fmt_count(950.0), "950");
        assert_eq!(fmt_count(12345.0), "12.3k");
        assert_eq!(fmt_ns(123_400.0), "123.4 us");
        assert_eq!(fmt_ns(800.0), "800 ns");
    }
}
