//! `nvmeof get-feature`, `set-feature` and `show-regs`, as nvme-cli's
//! commands of those names: a feature's value (decoded for the ones a
//! fabrics controller has), and the controller's registers read as fabrics
//! properties (NVMe over Fabrics: Property Get of CAP, VS, CC and CSTS).

use std::io::Write;

use nvmeof_common::spec::features::{write_protect, FeatureId, FeatureSel, GetFeaturesCmd, SetFeaturesCmd};
use nvmeof_common::spec::property::{Cap, Cc, Csts, PropertyOffset, Vs};
use nvmeof_initiator::Controller;
use serde_json::{json, Value};

use super::{emit, hex, out_err, parse_dec_or_hex, Cli};
use crate::error::ToolError;

/// Get Features select values, as nvme-cli's `--sel` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FeatureSelArg {
    /// The value in use.
    Current,
    /// The value after a reset (the controller's default).
    Default,
    /// The value saved across power cycles.
    Saved,
    /// What the feature supports: saveable, namespace specific, changeable.
    Supported,
}

impl FeatureSelArg {
    fn wire(self) -> FeatureSel {
        FeatureSel(self as u8)
    }

    fn label(self) -> &'static str {
        match self {
            FeatureSelArg::Current => "Current value",
            FeatureSelArg::Default => "Default value",
            FeatureSelArg::Saved => "Saved value",
            FeatureSelArg::Supported => "Capabilities",
        }
    }
}

/// A number in decimal or with a 0x prefix in hexadecimal (nvme-cli takes both).
pub(super) fn parse_num(s: &str) -> Result<u32, String> {
    parse_dec_or_hex(s)
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("{s:?} is not a 32-bit number (decimal or 0x hex)"))
}

/// A feature identifier (0–255), decimal or 0x hex.
pub(super) fn parse_fid(s: &str) -> Result<u8, String> {
    let n = parse_num(s)?;
    u8::try_from(n).map_err(|_| format!("{s:?}: a feature identifier is 0-255"))
}

/// A flag as nvme-cli prints one.
fn yes_no(b: bool) -> &'static str {
    if b {
        "yes"
    } else {
        "no"
    }
}

/// The name a report gives `fid`.
fn feature_label(fid: FeatureId) -> String {
    match fid.name() {
        Some(n) => format!("{:#04x} ({n})", fid.0),
        None => format!("{:#04x}", fid.0),
    }
}

/// The data buffer Get Features returns for `fid` without `--data-len`, in
/// bytes: the extended (128-bit) Host Identifier's 16, else none. Only that
/// one: nvmet (`nvmet_get_feat_data_len`) and this target refuse a data
/// buffer for any other feature with Invalid SGL Data Length, Timestamp's
/// included (neither has it).
fn data_len(fid: FeatureId) -> usize {
    match fid {
        FeatureId::HOST_ID => 16,
        _ => 0,
    }
}

/// The fields of `fid`'s Dword 0 (`value`), or of its data, as nvme-cli prints them.
fn decode(fid: FeatureId, sel: FeatureSelArg, value: u32, data: &[u8]) -> Vec<(String, Value)> {
    let yes = |b: bool| Value::from(yes_no(b));
    if sel == FeatureSelArg::Supported {
        return vec![
            ("saveable".into(), yes(value & 1 != 0)),
            ("namespace specific".into(), yes(value & 2 != 0)),
            ("changeable".into(), yes(value & 4 != 0)),
        ];
    }
    match fid {
        FeatureId::VOLATILE_WC => vec![("Volatile Write Cache Enable (WCE)".into(), yes(value & 1 != 0))],
        FeatureId::NUM_QUEUES => vec![
            ("Number of IO Submission Queues Allocated (NSQA)".into(), ((value & 0xFFFF) + 1).into()),
            ("Number of IO Completion Queues Allocated (NCQA)".into(), ((value >> 16) + 1).into()),
        ],
        FeatureId::KATO => vec![("Keep Alive Timeout (KATO) in milliseconds".into(), value.into())],
        FeatureId::ASYNC_EVENT => {
            vec![("Asynchronous events enabled".into(), format!("{value:#010x}").into())]
        }
        FeatureId::RESV_MASK => vec![
            ("Mask Registration Preempted Notification (REGPRE)".into(), yes(value & 2 != 0)),
            ("Mask Reservation Released Notification (RESREL)".into(), yes(value & 4 != 0)),
            ("Mask Reservation Preempted Notification (RESPRE)".into(), yes(value & 8 != 0)),
        ],
        FeatureId::RESV_PERSIST => vec![("Persist Through Power Loss (PTPL)".into(), yes(value & 1 != 0))],
        FeatureId::WRITE_PROTECT => {
            let state = match value & 7 {
                write_protect::NONE => "No Write Protect".to_string(),
                write_protect::WRITE_PROTECT => "Write Protect".to_string(),
                write_protect::UNTIL_POWER_CYCLE => "Write Protect Until Power Cycle".to_string(),
                write_protect::PERMANENT => "Permanent Write Protect".to_string(),
                n => format!("reserved ({n})"),
            };
            vec![("Namespace Write Protect".into(), state.into())]
        }
        FeatureId::TIMESTAMP if data.len() >= 8 => {
            let mut ms = [0u8; 8];
            ms[..6].copy_from_slice(&data[..6]);
            vec![
                ("Timestamp in milliseconds since the epoch".into(), u64::from_le_bytes(ms).into()),
                ("Synch".into(), yes(data[6] & 1 != 0)),
                ("Timestamp Origin".into(), ((data[6] >> 1) & 7).into()),
            ]
        }
        FeatureId::HOST_ID if !data.is_empty() => vec![("Host Identifier".into(), hex(data).into())],
        _ => Vec::new(),
    }
}

/// `nvmeof get-feature`: Get Features `fid` of namespace `nsid` (0: the controller).
#[allow(clippy::too_many_arguments)]
pub(super) async fn get_feature(
    cli: &Cli,
    ctrl: &Controller,
    fid: FeatureId,
    nsid: u32,
    sel: FeatureSelArg,
    cdw11: Option<u32>,
    data_len_arg: Option<u32>,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    // The 128-bit Host Identifier needs EXHID (CDW11 bit 0): nvmet and this
    // target refuse the 64-bit one with Invalid Field, as fabrics use the
    // extended one only.
    let cdw11 = cdw11.unwrap_or(if fid == FeatureId::HOST_ID { 1 } else { 0 });
    let len = match data_len_arg {
        Some(l) => l as usize,
        None if sel == FeatureSelArg::Supported => 0,
        None => data_len(fid),
    };
    if len > 4096 {
        return Err(ToolError::usage(format!("get-feature: --data-len {len} is more than 4096 bytes")));
    }
    let mut data = vec![0u8; len];
    let cmd = GetFeaturesCmd { nsid, fid, sel: sel.wire(), cdw11, cdw14: 0 };
    let buf = (len > 0).then_some(data.as_mut_slice());
    let value = ctrl
        .get_features(cmd, buf)
        .await
        .map_err(|e| ToolError::from_initiator(&format!("get-feature {}", feature_label(fid)), &e))?;
    let fields = decode(fid, sel, value, &data);
    if cli.json {
        let decoded: serde_json::Map<String, Value> = fields.into_iter().collect();
        let mut v = json!({
            "fid": fid.0, "name": fid.name(), "nsid": nsid, "sel": format!("{sel:?}").to_lowercase(),
            "value": value, "decoded": decoded,
        });
        if len > 0 {
            v["data"] = hex(&data).into();
        }
        return emit(out, &v);
    }
    let mut s = format!("get-feature:{}, {}:{value:#010x}\n", feature_label(fid), sel.label());
    for (k, v) in fields {
        let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        s += &format!("\t{k}: {v}\n");
    }
    if len > 0 && fid != FeatureId::HOST_ID {
        s += &format!("\tdata: {}\n", hex(&data));
    }
    write!(out, "{s}").map_err(out_err)
}

/// `nvmeof set-feature`: Set Features `fid` of namespace `nsid` to `value`
/// (CDW11), saved across power cycles with `save`.
pub(super) async fn set_feature(
    cli: &Cli,
    ctrl: &Controller,
    fid: FeatureId,
    nsid: u32,
    value: u32,
    save: bool,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let cmd = SetFeaturesCmd { nsid, sv: save, ..SetFeaturesCmd::new(fid, value) };
    let dw0 = ctrl.set_features(cmd, None).await.map_err(|e| {
        ToolError::from_initiator(&format!("set-feature {} to {value:#x}", feature_label(fid)), &e)
    })?;
    if cli.json {
        emit(
            out,
            &json!({ "fid": fid.0, "name": fid.name(), "nsid": nsid, "value": value, "save": save, "cdw0": dw0 }),
        )
    } else {
        writeln!(
            out,
            "set-feature:{}, value:{value:#010x}, cdw0:{dw0:#010x}, save:{save}",
            feature_label(fid)
        )
        .map_err(out_err)
    }
}

/// `nvmeof show-regs`: CAP, VS, CC and CSTS with their fields.
pub(super) async fn show_regs(cli: &Cli, ctrl: &Controller, out: &mut dyn Write) -> Result<(), ToolError> {
    let get = |o: PropertyOffset, name: &'static str| async move {
        ctrl.property_get(o).await.map_err(|e| ToolError::from_initiator(&format!("Property Get {name}"), &e))
    };
    let cap = Cap(get(PropertyOffset::CAP, "CAP").await?);
    let vs = Vs(get(PropertyOffset::VS, "VS").await? as u32);
    let cc = Cc(get(PropertyOffset::CC, "CC").await? as u32);
    let csts = Csts(get(PropertyOffset::CSTS, "CSTS").await? as u32);
    let yes = yes_no;
    let mut css = Vec::new();
    for (bit, name) in
        [(Cap::CSS_NVM, "NVM"), (Cap::CSS_IOCS, "I/O command sets"), (Cap::CSS_NO_IO, "admin only")]
    {
        if cap.css() & bit != 0 {
            css.push(name);
        }
    }
    let cc_css = match cc.css() {
        Cc::CSS_NVM => "NVM".to_string(),
        Cc::CSS_CSI => "all supported I/O command sets".to_string(),
        Cc::CSS_ADMIN_ONLY => "admin only".to_string(),
        n => format!("reserved ({n})"),
    };
    let shn = ["none", "normal", "abrupt", "reserved"][cc.shn() as usize & 3];
    let shst =
        ["normal operation", "shutdown processing occurring", "shutdown processing complete", "reserved"]
            [csts.shst() as usize & 3];
    let version = format!("{}.{}.{}", vs.major(), vs.minor(), vs.tertiary());
    if cli.json {
        return emit(
            out,
            &json!({
                "cap": cap.0, "vs": vs.0, "cc": cc.0, "csts": csts.0,
                "decoded": {
                    "mqes": cap.mqes() as u32 + 1, "cqr": cap.cqr(), "to_ms": cap.to() as u32 * 500,
                    "css": css, "nssrs": cap.nssrs(), "mpsmin": 1u64 << (12 + cap.mpsmin()),
                    "mpsmax": 1u64 << (12 + cap.mpsmax()), "version": version,
                    "en": cc.en(), "cc_css": cc_css, "shn": shn, "iosqes": 1u32 << cc.iosqes(),
                    "iocqes": 1u32 << cc.iocqes(), "rdy": csts.rdy(), "cfs": csts.cfs(), "shst": shst,
                },
            }),
        );
    }
    let s = format!(
        "cap     : {:#018x}\n\
         \tMaximum Queue Entries Supported (MQES): {}\n\
         \tContiguous Queues Required (CQR): {}\n\
         \tTimeout (TO): {} ms\n\
         \tCommand Sets Supported (CSS): {}\n\
         \tNVM Subsystem Reset Supported (NSSRS): {}\n\
         \tMemory Page Size Minimum (MPSMIN): {} bytes, Maximum (MPSMAX): {} bytes\n\
         version : {:#010x} ({version})\n\
         cc      : {:#010x}\n\
         \tEnable (EN): {}\n\
         \tI/O Command Set Selected (CSS): {cc_css}\n\
         \tShutdown Notification (SHN): {shn}\n\
         \tI/O Submission / Completion Queue Entry Size (IOSQES / IOCQES): {} / {} bytes\n\
         csts    : {:#010x}\n\
         \tReady (RDY): {}\n\
         \tController Fatal Status (CFS): {}\n\
         \tShutdown Status (SHST): {shst}\n",
        cap.0,
        cap.mqes() as u32 + 1,
        yes(cap.cqr()),
        cap.to() as u32 * 500,
        if css.is_empty() { "none".to_string() } else { css.join(", ") },
        yes(cap.nssrs()),
        1u64 << (12 + cap.mpsmin()),
        1u64 << (12 + cap.mpsmax()),
        vs.0,
        cc.0,
        yes(cc.en()),
        1u32 << cc.iosqes(),
        1u32 << cc.iocqes(),
        csts.0,
        yes(csts.rdy()),
        yes(csts.cfs()),
    );
    write!(out, "{s}").map_err(out_err)
}
