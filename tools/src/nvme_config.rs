//! nvme-cli's JSON configuration, `/etc/nvme/config.json` (libnvme's
//! `json_read_config`): hosts, each with its subsystems and their ports,
//! and the DH-HMAC-CHAP keys and connection settings `nvme connect` takes
//! from there when its command line gives none. The tools read it the same
//! way, so a host set up for the kernel (`nvme connect` with the keys in
//! config.json) connects with these tools without the secrets pasted on
//! the command line. Sans-IO: [`lookup`] takes the file's text.
//!
//! The layout, as libnvme reads it (`json_parse_host`, `json_parse_subsys`,
//! `json_parse_port`): an array of hosts `{ "hostnqn", "hostid",
//! "dhchap_key", "subsystems": [ { "nqn", "ports": [ { "transport",
//! "traddr", "trsvcid", "host_traddr", "host_iface", "dhchap_key",
//! "dhchap_ctrl_key", "hdr_digest", "data_digest", "tos", ... } ] } ] }`.
//! A port's `dhchap_key` is the host's key on that connection, the host's
//! own `dhchap_key` the one for every other (`nvmf_add_ctrl` falls back to
//! it), `dhchap_ctrl_key` the key the controller proves it holds.

use std::net::SocketAddr;

use nvmeof_common::auth::DhchapSecret;
use nvmeof_common::spec::nqn::parse_uuid;
use serde_json::Value;

/// Where nvme-cli keeps the file (`nvme connect --config`'s default).
pub const DEFAULT_PATH: &str = "/etc/nvme/config.json";

/// What the file gives one connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortSettings {
    /// The host's DH-HMAC-CHAP secret: the port's, else the host's.
    pub dhchap_secret: Option<DhchapSecret>,
    /// The controller's secret (bidirectional authentication).
    pub dhchap_ctrl_secret: Option<DhchapSecret>,
    /// `hdr_digest`.
    pub hdr_digest: bool,
    /// `data_digest`.
    pub data_digest: bool,
    /// `tos`: IP type of service (libnvme's -1, unset, is `None`).
    pub tos: Option<u8>,
}

/// The settings of the file's `text` for host `hostnqn` / `hostid`
/// connecting to subsystem `subnqn` at `addr`: `None` where the file lists
/// no such host. A host entry matches by NQN and, where it names one, host
/// ID (libnvme's `nvme_lookup_host`); a subsystem by NQN; a port by
/// transport `tcp` and the address and port it names (what it leaves out
/// matches any). A key that is not a DH-HMAC-CHAP secret is an error, so a
/// connection never goes out without the key it was given.
pub fn lookup(
    text: &str,
    hostnqn: &str,
    hostid: &[u8; 16],
    subnqn: &str,
    addr: &SocketAddr,
) -> Result<Option<PortSettings>, String> {
    let root: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    // libnvme reads an array of hosts; its schema describes `{"hosts": [...]}`.
    let hosts = match &root {
        Value::Array(h) => h,
        Value::Object(o) => o.get("hosts").and_then(Value::as_array).ok_or("no \"hosts\" array")?,
        _ => return Err("not an array of hosts".into()),
    };
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let secret = |v: &Value, k: &str| -> Result<Option<DhchapSecret>, String> {
        match str_of(v, k) {
            None => Ok(None),
            Some(s) => s.parse().map(Some).map_err(|e| format!("{k} {s:?}: {e}")),
        }
    };
    let Some(host) = hosts.iter().find(|h| {
        str_of(h, "hostnqn").as_deref() == Some(hostnqn)
            && str_of(h, "hostid").is_none_or(|id| parse_uuid(&id).as_ref() == Some(hostid))
    }) else {
        return Ok(None);
    };
    let mut out = PortSettings { dhchap_secret: secret(host, "dhchap_key")?, ..PortSettings::default() };
    let subsystems = host.get("subsystems").and_then(Value::as_array).into_iter().flatten();
    let port = subsystems
        .filter(|s| str_of(s, "nqn").as_deref() == Some(subnqn))
        .flat_map(|s| s.get("ports").and_then(Value::as_array).into_iter().flatten())
        .find(|p| {
            str_of(p, "transport").is_some_and(|t| t.eq_ignore_ascii_case("tcp"))
                && str_of(p, "traddr")
                    .is_none_or(|a| a.parse::<std::net::IpAddr>().is_ok_and(|ip| ip == addr.ip()))
                && str_of(p, "trsvcid").is_none_or(|s| s.parse::<u16>() == Ok(addr.port()))
        });
    if let Some(p) = port {
        if let Some(k) = secret(p, "dhchap_key")? {
            out.dhchap_secret = Some(k);
        }
        out.dhchap_ctrl_secret = secret(p, "dhchap_ctrl_key")?;
        let flag = |k: &str| p.get(k).and_then(Value::as_bool).unwrap_or(false);
        out.hdr_digest = flag("hdr_digest");
        out.data_digest = flag("data_digest");
        out.tos = p.get("tos").and_then(Value::as_i64).and_then(|t| u8::try_from(t).ok());
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:1164775d-7d3c-4ca6-9dfa-e1fcd301bca3";
    const HOST_ID: &str = "f42e64ca-ee56-4fb5-8e9e-64ed10b935ce";
    const KEY: &str = "DHHC-1:01:o8/jE9vGsSdaRVAfWmfEhzOZ8S7KkfTi8F/tg64x4BN8zoYw:";
    const CKEY: &str = "DHHC-1:02:y2qROP+9W3z/7OkMI0q8PgfPEwe+P/DYCK98wHz6wx04yQ1XM7FMEW17+jPfWbDB6t6oNA==:";
    const HOST_KEY: &str = "DHHC-1:00:X+MTWSYkko7Riont9CHs6sqXZwf2Ov4KODgDL/EcDmnWHWLh:";

    /// As `nvme connect --dump-config` writes it (JSON_C_TO_STRING_PRETTY).
    fn config() -> String {
        format!(
            r#"[
  {{
    "hostnqn":"{HOST}",
    "hostid":"{HOST_ID}",
    "dhchap_key":"{HOST_KEY}",
    "subsystems":[
      {{
        "nqn":"nqn.2024-01.io.example:disk",
        "ports":[
          {{ "transport":"rdma", "traddr":"192.0.2.5", "trsvcid":"4420", "dhchap_key":"junk" }},
          {{ "transport":"tcp", "traddr":"192.0.2.5", "trsvcid":"4420", "dhchap_key":"{KEY}",
             "dhchap_ctrl_key":"{CKEY}", "hdr_digest":true, "tos":40, "ctrl_loss_tmo":-1 }},
          {{ "transport":"tcp", "traddr":"192.0.2.6", "data_digest":true }}
        ]
      }}
    ]
  }},
  {{ "hostnqn":"nqn.2014-08.org.example:other", "dhchap_key":"{KEY}" }}
]
"#
        )
    }

    #[test]
    fn finds_the_keys_nvme_connect_would_use() {
        let id = parse_uuid(HOST_ID).unwrap();
        let get = |subnqn: &str, addr: &str| {
            lookup(&config(), HOST, &id, subnqn, &addr.parse().unwrap()).unwrap().expect("the host is listed")
        };
        let s = get("nqn.2024-01.io.example:disk", "192.0.2.5:4420");
        assert_eq!(s.dhchap_secret, Some(KEY.parse().unwrap()), "the port's key");
        assert_eq!(s.dhchap_ctrl_secret, Some(CKEY.parse().unwrap()));
        assert_eq!((s.hdr_digest, s.data_digest, s.tos), (true, false, Some(40)));
        // Any port of the address named without one; another port of a named one
        // is not that entry: the host's own key.
        let s = get("nqn.2024-01.io.example:disk", "192.0.2.6:4421");
        assert_eq!((s.dhchap_secret, s.data_digest), (Some(HOST_KEY.parse().unwrap()), true));
        let s = get("nqn.2024-01.io.example:disk", "192.0.2.5:4421");
        assert_eq!(
            s,
            PortSettings { dhchap_secret: Some(HOST_KEY.parse().unwrap()), ..PortSettings::default() }
        );
        let s = get("nqn.2024-01.io.example:other", "192.0.2.5:4420");
        assert_eq!(s.dhchap_secret, Some(HOST_KEY.parse().unwrap()), "another subsystem: the host's key");
        // Another host ID under the same NQN, or a host not listed: nothing.
        let other_id = [7u8; 16];
        assert_eq!(lookup(&config(), HOST, &other_id, "x", &"192.0.2.5:4420".parse().unwrap()), Ok(None));
        assert_eq!(
            lookup(&config(), "nqn.2014-08.org.example:nobody", &id, "x", &"192.0.2.5:4420".parse().unwrap()),
            Ok(None)
        );
        // An entry without a host ID matches any.
        let s = lookup(
            &config(),
            "nqn.2014-08.org.example:other",
            &other_id,
            "x",
            &"192.0.2.5:4420".parse().unwrap(),
        );
        assert_eq!(s.unwrap().unwrap().dhchap_secret, Some(KEY.parse().unwrap()));
        // The schema's layout too.
        let wrapped = format!("{{\"hosts\": {}}}", config());
        assert_eq!(
            lookup(&wrapped, HOST, &id, "nqn.2024-01.io.example:disk", &"192.0.2.5:4420".parse().unwrap())
                .unwrap(),
            Some(get("nqn.2024-01.io.example:disk", "192.0.2.5:4420"))
        );
    }

    #[test]
    fn bad_files_and_keys_are_errors() {
        let id = parse_uuid(HOST_ID).unwrap();
        let a: SocketAddr = "192.0.2.5:4420".parse().unwrap();
        for bad in ["", "{", "42", "{\"hosts\": 1}"] {
            assert!(lookup(bad, HOST, &id, "x", &a).is_err(), "{bad:?}");
        }
        let text = config().replace(HOST_KEY, "DHHC-1:01:not-base64:");
        let e = lookup(&text, HOST, &id, "x", &a).unwrap_err();
        assert!(e.contains("dhchap_key"), "{e}");
    }

    proptest::proptest! {
        /// A file cut short or with any byte changed is read or refused, never
        /// a panic.
        #[test]
        fn any_change_is_read_or_refused(cut in 0usize..2000, at in 0usize..2000, byte in 0x20u8..0x7f) {
            let mut text = config().into_bytes();
            let at = at % text.len();
            text[at] = byte;
            text.truncate(cut.max(1).min(text.len()));
            let text = String::from_utf8(text).unwrap();
            let id = parse_uuid(HOST_ID).unwrap();
            let _ = lookup(&text, HOST, &id, "nqn.2024-01.io.example:disk", &"192.0.2.5:4420".parse().unwrap());
        }
    }
}
