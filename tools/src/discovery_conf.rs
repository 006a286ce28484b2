//! nvme-cli's `/etc/nvme/discovery.conf`: the discovery controllers `nvme
//! discover` (and `nvme connect-all`) asks when no address is given. Each
//! line that is not blank or a `#` comment holds `nvme discover` options
//! (`-t tcp -a 192.0.2.1 -s 8009`, `--traddr=192.0.2.1`, ...), as nvme-cli
//! reads it (`discover_from_conf_file`: the line split at blanks and parsed
//! as arguments). Sans-IO: [`parse`] takes the file's text.

use crate::util::{parse_host_id, parse_host_nqn};

/// Where nvme-cli keeps the file.
pub const DEFAULT_PATH: &str = "/etc/nvme/discovery.conf";

/// The port of a discovery controller when a line names none: NVMe/TCP's
/// discovery port, as nvme-cli takes it (libnvme `nvmf_get_default_trsvcid`).
pub const DEFAULT_DISCOVERY_PORT: u16 = 8009;

/// One discovery controller of the file, with the options its line gives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// The line (from 1).
    pub line: usize,
    /// `HOST:PORT` (`[IPv6]:PORT`): `--traddr` and `--trsvcid`.
    pub addr: String,
    /// `--nqn`: the discovery subsystem's NQN.
    pub nqn: Option<String>,
    /// `--hostnqn`.
    pub hostnqn: Option<String>,
    /// `--hostid`.
    pub hostid: Option<[u8; 16]>,
    /// `--host-traddr`.
    pub host_traddr: Option<std::net::IpAddr>,
    /// `--host-iface`.
    pub host_iface: Option<String>,
    /// `--tos`.
    pub tos: Option<u8>,
    /// `--hdr-digest`.
    pub hdr_digest: bool,
    /// `--data-digest`.
    pub data_digest: bool,
}

/// What the options of nvme-cli's discover take a value.
const VALUED: &[(&str, char)] = &[
    ("transport", 't'),
    ("traddr", 'a'),
    ("trsvcid", 's'),
    ("nqn", 'n'),
    ("hostnqn", 'q'),
    ("hostid", 'I'),
    ("host-traddr", 'w'),
    ("host-iface", 'f'),
    ("tos", 'T'),
    ("dhchap-secret", 'S'),
    ("keep-alive-tmo", 'k'),
    ("reconnect-delay", 'c'),
    ("ctrl-loss-tmo", 'l'),
    ("nr-io-queues", 'i'),
    ("queue-size", 'Q'),
];

/// Options without a value: digests, and nvme-cli's own that change
/// nothing here (`--persistent`, `--duplicate-connect`, ...).
const FLAGS: &[(&str, char)] = &[
    ("hdr-digest", 'g'),
    ("data-digest", 'G'),
    ("persistent", 'p'),
    ("duplicate-connect", 'D'),
    ("force", 'O'),
];

/// The entries of the file's `text`, and why any line was skipped (a
/// transport other than TCP, no address, an option that does not parse).
pub fn parse(text: &str) -> (Vec<Entry>, Vec<String>) {
    let (mut entries, mut skipped) = (Vec::new(), Vec::new());
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match entry(i + 1, line) {
            Ok(e) => entries.push(e),
            Err(why) => skipped.push(format!("line {}: {why}", i + 1)),
        }
    }
    (entries, skipped)
}

/// The `(name, value)` pairs of one line's options (a flag's value empty).
fn options(line: &str) -> Result<Vec<(&'static str, String)>, String> {
    let mut words = line.split_whitespace();
    let mut out = Vec::new();
    while let Some(w) = words.next() {
        let (name, inline) = if let Some(long) = w.strip_prefix("--") {
            let (n, v) = long.split_once('=').map_or((long, None), |(n, v)| (n, Some(v.to_string())));
            // nvme-cli also spells the digest flags with underscores.
            let n = n.replace('_', "-");
            let name = VALUED.iter().chain(FLAGS).map(|(l, _)| *l).find(|l| *l == n);
            (name.ok_or_else(|| format!("unknown option --{n}"))?, v)
        } else if let Some(short) = w.strip_prefix('-').filter(|s| !s.is_empty()) {
            let c = short.chars().next().unwrap_or_default();
            let rest = &short[c.len_utf8()..];
            let name = VALUED.iter().chain(FLAGS).find(|(_, s)| *s == c).map(|(l, _)| *l);
            (
                name.ok_or_else(|| format!("unknown option -{c}"))?,
                (!rest.is_empty()).then(|| rest.to_string()),
            )
        } else {
            return Err(format!("{w:?} is not an option"));
        };
        if FLAGS.iter().any(|(l, _)| *l == name) {
            if inline.is_some() {
                return Err(format!("--{name} takes no value"));
            }
            out.push((name, String::new()));
        } else {
            let v = match inline {
                Some(v) => v,
                None => words.next().ok_or_else(|| format!("--{name} needs a value"))?.to_string(),
            };
            out.push((name, v));
        }
    }
    Ok(out)
}

fn entry(line: usize, text: &str) -> Result<Entry, String> {
    let mut e = Entry { line, ..Entry::default() };
    let (mut traddr, mut trsvcid) = (None, None);
    for (name, v) in options(text)? {
        match name {
            "transport" if v.eq_ignore_ascii_case("tcp") => {}
            "transport" => return Err(format!("transport {v} (NVMe/TCP only here)")),
            "traddr" => traddr = Some(v),
            "trsvcid" => {
                trsvcid = Some(
                    v.parse::<u16>().ok().filter(|&p| p > 0).ok_or(format!("trsvcid {v:?} is not a port"))?,
                )
            }
            "nqn" => e.nqn = Some(v),
            "hostnqn" => e.hostnqn = Some(parse_host_nqn(&v)?),
            "hostid" => e.hostid = Some(parse_host_id(&v)?),
            "host-traddr" => {
                e.host_traddr =
                    Some(v.parse().map_err(|_| format!("host-traddr {v:?} is not an IP address"))?)
            }
            "host-iface" => e.host_iface = Some(v),
            "tos" => e.tos = Some(v.parse().map_err(|_| format!("tos {v:?} is not 0-255"))?),
            "hdr-digest" => e.hdr_digest = true,
            "data-digest" => e.data_digest = true,
            // Connection tuning of nvme-cli's own persistent controllers, and
            // the key of the connections `nvme connect-all` makes (a discovery
            // controller asks for none: nvmet's and this target's).
            _ => {}
        }
    }
    let traddr = traddr.ok_or("no --traddr")?;
    let port = trsvcid.unwrap_or(DEFAULT_DISCOVERY_PORT);
    e.addr = match traddr.parse::<std::net::IpAddr>() {
        Ok(ip) => std::net::SocketAddr::new(ip, port).to_string(),
        Err(_) => format!("{traddr}:{port}"),
    };
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_nvme_cli_reads() {
        let text = "# Used for extracting default parameters for discovery\n\
                    #\n# Example:\n# --transport=<trtype> --traddr=<traddr> --trsvcid=<trsvcid>\n\n\
                    -t tcp -a 192.0.2.1 -s 4420 -S DHHC-1:00:for-connect-all:\n\
                    --transport=tcp --traddr=fd00::5 --hostnqn=nqn.2014-08.org.example:h -g --data_digest\n\
                    -ttcp -afiler.example -I 746f6f6c-732d-7265-7376-2d6f74686572 -w 192.0.2.9 -f eth0 -T 40 -k 30 -p\n\
                    -t rdma -a 192.0.2.2 -s 4420\n\
                    -t tcp -s 8009\n\
                    -t tcp -a 192.0.2.3 -s 0\n\
                    -t tcp -a 192.0.2.3 --tls\n\
                    -t tcp -a 192.0.2.3 -n\n";
        let (entries, skipped) = parse(text);
        assert_eq!(entries.len(), 3, "{entries:?}");
        assert_eq!((entries[0].line, entries[0].addr.as_str()), (6, "192.0.2.1:4420"));
        let e = &entries[1];
        assert_eq!(e.addr, "[fd00::5]:8009", "nvme-cli's discovery port where none is given");
        assert_eq!(e.hostnqn.as_deref(), Some("nqn.2014-08.org.example:h"));
        assert!(e.hdr_digest && e.data_digest);
        let e = &entries[2];
        assert_eq!(e.addr, "filer.example:8009");
        assert_eq!(e.hostid, Some(*b"tools-resv-other"));
        assert_eq!(
            (e.host_traddr, e.host_iface.as_deref(), e.tos),
            (Some("192.0.2.9".parse().unwrap()), Some("eth0"), Some(40))
        );
        assert!(!e.hdr_digest && !e.data_digest);
        assert_eq!(
            skipped,
            [
                "line 9: transport rdma (NVMe/TCP only here)",
                "line 10: no --traddr",
                "line 11: trsvcid \"0\" is not a port",
                "line 12: unknown option --tls",
                "line 13: --nqn needs a value",
            ]
        );
        assert_eq!(parse(""), (vec![], vec![]));
    }

    proptest::proptest! {
        /// Whatever the file holds, lines parse or are skipped: never a panic.
        #[test]
        fn any_text_parses_or_is_skipped(text in "(-{1,2}[a-zA-Z_=-]{0,12}[ \t]+[^\n ]{0,8}[ \t\n]*){0,12}") {
            let (entries, skipped) = parse(&text);
            proptest::prop_assert!(entries.len() + skipped.len() <= text.lines().count());
        }
    }
}
