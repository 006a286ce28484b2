//! The `nvmeof` admin CLI: discover, identify, list, ana-log, smart-log, events, read, write, copy,
//! compare-and-write, verify, resv, zones, flush, dsm, write-zeroes, get-feature, set-feature,
//! show-regs, get-log, gen-dhchap-key.
//!
//! Output goes to the writer the caller passes (the binary passes stdout),
//! human-readable by default and JSON with `--json`. Every failure is a
//! [`ToolError`] whose [`ToolError::exit_code`] scripts can trust.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nvmeof_common::spec::discovery::{AdrFam, DiscoveryLog, DiscoveryLogEntry, SecType, SubType, TrType};
use nvmeof_common::spec::identify::NsIdDescriptor;
use nvmeof_common::spec::log::{AnaLog, AnaState, GetLogPageCmd, LogPageId, SmartLog, SMART_LOG_LEN};
use nvmeof_common::spec::reservation::{
    AcquireAction, NotificationType, RegisterAction, ReleaseAction, ReservationStatus, ReservationType,
};
use nvmeof_common::spec::DISCOVERY_NQN;
use nvmeof_common::spec::{IdentifyController, IdentifyNamespace};
use nvmeof_initiator::{
    discover_all_nqn, discover_nqn, ConnectOptions, Controller, ControllerEvent, ControllerState,
    HostIdentity, IoFlags, ReconnectPolicy,
};
use serde_json::{json, Value};

use nvmeof_common::spec::features::FeatureId;

use crate::error::{ErrorKind, ToolError};

mod features;
mod logs;
mod nvm;

use crate::probe::{connect, connect_options, discovery_options, namespace_info, SocketArgs};
use crate::util::{
    fmt_bytes, parse_dhchap_secret, parse_host_id, parse_host_nqn, parse_positive_duration, target_addr,
    DEFAULT_PORT,
};
pub use features::FeatureSelArg;

/// `nvmeof`: administer and access NVMe/TCP targets.
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "nvmeof",
    version,
    about = "NVMe/TCP admin CLI: discover, identify, list, read, write, flush, dsm, get-feature, show-regs, resv, zones and more",
    after_help = "ADDR is HOST[:PORT]; the default port is 4420 (nvmeof-target serves discovery and I/O \
                  on the same port; a Linux nvmet discovery port is usually 8009: give it explicitly).\n\
                  Exit codes: 0 ok, 1 NVMe error status (e.g. Connect rejected), 2 usage, \
                  3 connection/transport error, 4 subsystem or namespace not found."
)]
pub struct Cli {
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Host NQN to connect as (default: nvme-cli's /etc/nvme/hostnqn, as
    /// `nvme connect`; without it this machine's UUID host NQN).
    #[arg(long, global = true, value_parser = parse_host_nqn)]
    pub hostnqn: Option<String>,
    /// Host identifier to connect as, a UUID (default: nvme-cli's
    /// /etc/nvme/hostid, else the UUID of a UUID host NQN, as `nvme connect
    /// --hostid`): reservations belong to it.
    #[arg(long, global = true, value_name = "UUID", value_parser = parse_host_id)]
    pub hostid: Option<[u8; 16]>,
    /// Connect and command timeout (e.g. 10s).
    #[arg(long, global = true, default_value = "10s", value_parser = parse_positive_duration)]
    pub timeout: Duration,
    /// Enable header and data digests.
    #[arg(long, global = true)]
    pub digests: bool,
    /// DH-HMAC-CHAP secret for targets that require in-band authentication
    /// (`DHHC-1:..`, as `nvme connect --dhchap-secret`).
    #[arg(long, global = true, value_name = "SECRET", value_parser = parse_dhchap_secret)]
    pub dhchap_secret: Option<nvmeof_common::auth::DhchapSecret>,
    /// The controller's DH-HMAC-CHAP secret: the target must authenticate too.
    #[arg(long, global = true, value_name = "SECRET", value_parser = parse_dhchap_secret, requires = "dhchap_secret")]
    pub dhchap_ctrl_secret: Option<nvmeof_common::auth::DhchapSecret>,
    /// Source address, interface and type of service of the connections.
    #[command(flatten)]
    pub socket: SocketArgs,
    /// What to do.
    #[command(subcommand)]
    pub cmd: Command,
}

/// Subcommands.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum Command {
    /// Read the discovery log of HOST or HOST:PORT (default port 4420); without an address,
    /// of every discovery controller nvme-cli's /etc/nvme/discovery.conf lists (as `nvme
    /// discover` without one).
    Discover {
        /// Target address (none: the discovery controllers of --discovery-conf).
        addr: Option<String>,
        /// nvme-cli's file of discovery controllers, one line of `nvme discover` options each
        /// (`-t tcp -a ADDR -s PORT`, `--hostnqn`, `--hostid`, `--host-traddr`, `--host-iface`,
        /// `--tos`, digests; port 8009 where a line names none), read when no address is given.
        #[arg(long, value_name = "FILE", conflicts_with = "addr", default_value = crate::discovery_conf::DEFAULT_PATH)]
        discovery_conf: PathBuf,
        /// Also read the logs of the discovery services its referrals name, and of theirs in
        /// turn (as `nvme connect-all` follows them; each service once, 16 at most).
        #[arg(long)]
        referrals: bool,
        /// The discovery subsystem's NQN: a service's unique discovery NQN (as `nvme discover
        /// --nqn`; nvmet's discovery_nqn, nvmeof-target's --discovery-nqn). Default: the
        /// well-known nqn.2014-08.org.nvmexpress.discovery, which every service answers to.
        #[arg(long, short = 'n', default_value = DISCOVERY_NQN)]
        nqn: String,
    },
    /// Identify Controller, or Identify Namespace with --nsid.
    Identify {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID (omit for the controller).
        #[arg(long)]
        nsid: Option<u32>,
    },
    /// List the active namespaces with their size, block size and usage (NUSE).
    List {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
    },
    /// Every path to a namespace that the discovery log at ADDR (and those of its referrals)
    /// lists for the subsystem, as `nvme connect-all` would connect them: each port's address,
    /// PORTID, controller ID and the namespace's ANA state through it (a multipath host sends
    /// I/O down the optimized ones first), or why it does not connect. Exit code 0 when at
    /// least one connects.
    Paths {
        /// Discovery address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
    },
    /// The ANA log as the port at ADDR reports it: each ANA group's state and namespaces
    /// (with several ports to one subsystem, each says which paths hosts should use).
    AnaLog {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
    },
    /// The SMART / Health log (as `nvme smart-log`): host read and write commands, data units
    /// (thousands of 512 bytes), error log entries, warnings; of every namespace, or of --nsid.
    SmartLog {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID (default: all of them, FFFFFFFFh).
        #[arg(long, default_value_t = 0xFFFF_FFFF)]
        nsid: u32,
    },
    /// Watch the asynchronous events of a controller (namespace changes, ANA changes) or, with
    /// --discovery, of the discovery controller (discovery log changes): one line per event
    /// (a JSON object per line with --json), until --count events, --duration or Ctrl-C.
    /// The controller stays connected (keep-alive) and reconnects after a connection loss.
    Events {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists); with
        /// --discovery, the discovery subsystem's (a unique discovery NQN; default the
        /// well-known one).
        #[arg(long)]
        nqn: Option<String>,
        /// Watch the discovery controller (a persistent discovery connection) instead.
        #[arg(long)]
        discovery: bool,
        /// Stop after this many events.
        #[arg(long)]
        count: Option<u64>,
        /// Stop after this long (e.g. 10m).
        #[arg(long, value_parser = parse_positive_duration)]
        duration: Option<Duration>,
    },
    /// Print a new random DH-HMAC-CHAP secret (`DHHC-1:..`, as `nvme gen-dhchap-key`) for
    /// `nvmeof-target --dhchap-secret`, nvmet's dhchap_key and `nvme connect --dhchap-secret`.
    GenDhchapKey {
        /// Hash that transforms the secret with the NQN before use: 0 none, 1 SHA-256, 2 SHA-384, 3 SHA-512.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=3))]
        hmac: u8,
        /// Key length in bytes: 32, 48 or 64 (default: the hash's length, 32 without one).
        #[arg(long, value_parser = ["32", "48", "64"])]
        key_length: Option<String>,
    },
    /// Read blocks to stdout or a file.
    Read {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// First LBA.
        #[arg(long)]
        lba: u64,
        /// Number of blocks.
        #[arg(long)]
        count: u64,
        /// Write the data to this file instead of stdout.
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Write blocks from a file or stdin (the last block is zero-padded).
    Write {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// First LBA.
        #[arg(long)]
        lba: u64,
        /// Number of blocks (default: the input length rounded up to whole blocks).
        #[arg(long)]
        count: Option<u64>,
        /// Read the data from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Force Unit Access.
        #[arg(long)]
        fua: bool,
    },
    /// Copy blocks inside a namespace on the target, as `nvme copy` (the Copy command): the
    /// --range source ranges, in order, to consecutive blocks from --to. No data crosses the
    /// network; a copy past the namespace's Copy limits goes as several commands. From a target
    /// without Copy (the Linux kernel target) the blocks are read and written back instead.
    Copy {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// A source range, LBA:BLOCKS (repeat for more; copied in the order given).
        #[arg(long = "range", required = true, value_parser = parse_copy_range)]
        ranges: Vec<(u64, u32)>,
        /// First LBA of the destination.
        #[arg(long)]
        to: u64,
        /// Force Unit Access: the destination is durable when the command completes.
        #[arg(long)]
        fua: bool,
    },
    /// Compare and Write (a fused Compare and Write): the blocks from --lba are written with the
    /// --new file only if they hold the --expected file, as one operation, atomic against every
    /// other Compare and Write on the namespace (a compare-and-swap, as VMware's ATS locks use).
    /// Both files hold the same whole number of blocks. Exit code 1 on a miscompare (nothing
    /// written) and from a controller without fused Compare and Write (the Linux kernel target).
    CompareAndWrite {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// First LBA.
        #[arg(long)]
        lba: u64,
        /// What the blocks must hold.
        #[arg(long)]
        expected: PathBuf,
        /// What they get where they do.
        #[arg(long)]
        new: PathBuf,
        /// Force Unit Access on the write.
        #[arg(long)]
        fua: bool,
    },
    /// Verify blocks on the target, as `nvme verify` (the Verify command): the target reads
    /// them and reports whether it could, without sending the data; a range past the
    /// controller's Verify size limit goes as several commands. Exit code 1 names the failing
    /// status (Unrecovered Read Error where the media failed).
    Verify {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// First LBA.
        #[arg(long)]
        lba: u64,
        /// Number of blocks (default: from --lba to the end of the namespace).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Reservations of a namespace, as `nvme resv-report / resv-register / resv-acquire /
    /// resv-release`: `report` (the default) prints the reservation held and every registrant;
    /// the other actions act as this host (its host ID, shared by all its connections).
    Resv {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// What to do.
        #[arg(value_enum, default_value_t = ResvAction::Report)]
        action: ResvAction,
        /// This host's current reservation key (CRKEY; decimal or 0x hex).
        #[arg(long, default_value_t = 0, value_parser = parse_key)]
        key: u64,
        /// register, replace: the new key (NRKEY).
        #[arg(long, default_value_t = 0, value_parser = parse_key)]
        new_key: u64,
        /// preempt, preempt-abort: the key whose holders are preempted (PRKEY).
        #[arg(long, default_value_t = 0, value_parser = parse_key)]
        preempt_key: u64,
        /// acquire, preempt, release: the reservation type.
        #[arg(long, value_enum)]
        rtype: Option<ResvType>,
        /// unregister, replace: ignore the current key (IEKEY).
        #[arg(long)]
        ignore_key: bool,
    },
    /// Zones of a zoned namespace, as `nvme zns report-zones / open-zone / close-zone /
    /// finish-zone / reset-zone`: `report` (the default) lists every zone (first LBA, write
    /// pointer, capacity, state); the other actions act on the zone starting at --lba, or with
    /// --all on every zone they apply to. Exit code 1 names the status a refused action got.
    Zones {
        /// Target address.
        addr: String,
        /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
        #[arg(long)]
        nqn: Option<String>,
        /// Namespace ID.
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// What to do.
        #[arg(value_enum, default_value_t = ZoneAction::Report)]
        action: ZoneAction,
        /// The zone's first LBA (open, close, finish, reset).
        #[arg(long, conflicts_with = "all")]
        lba: Option<u64>,
        /// Every zone the action applies to (Select All).
        #[arg(long)]
        all: bool,
    },
    /// Flush, as `nvme flush`: the target makes every write completed before it durable
    /// (fdatasync on our file backend) before it completes; prints how long that took.
    Flush {
        /// Where the namespace is.
        #[command(flatten)]
        ns: NsArgs,
    },
    /// Deallocate (discard, TRIM) block ranges, as `nvme dsm --ad` (Dataset Management with
    /// the Deallocate attribute): the target may unmap them (punch holes in a file); reads of
    /// them then return what the namespace's DLFEAT says (zeroes on ours). Ranges past the
    /// controller's DSM limits go as several commands.
    Dsm {
        /// Where the namespace is.
        #[command(flatten)]
        ns: NsArgs,
        /// A range, LBA:BLOCKS (repeat for more).
        #[arg(long = "range", required = true, value_parser = parse_copy_range)]
        ranges: Vec<(u64, u32)>,
    },
    /// Write Zeroes, as `nvme write-zeroes`: --count blocks from --lba read as zeroes
    /// afterwards, without sending any data; past the controller's Write Zeroes Size Limit it
    /// goes as several commands.
    WriteZeroes {
        /// Where the namespace is.
        #[command(flatten)]
        ns: NsArgs,
        /// First LBA.
        #[arg(long)]
        lba: u64,
        /// Number of blocks.
        #[arg(long)]
        count: u64,
        /// Deallocate (DEAC): the target may unmap the blocks instead of writing zeroes.
        #[arg(long)]
        deac: bool,
        /// Force Unit Access: the zeroes are durable when the command completes.
        #[arg(long)]
        fua: bool,
    },
    /// Get Features, as `nvme get-feature`: a feature's value (Dword 0 of the completion, and
    /// the Host Identifier's data), decoded for the features a fabrics controller has. Exit
    /// code 1 names the status of a feature the controller does not support (Invalid Field in
    /// Command).
    GetFeature {
        /// The controller, feature and namespace.
        #[command(flatten)]
        at: FeatureArgs,
        /// Which value: current, default, saved, or the feature's capabilities (supported).
        #[arg(long, short = 's', value_enum, default_value_t = features::FeatureSelArg::Current)]
        sel: features::FeatureSelArg,
        /// Command Dword 11 (feature specific; default 0, EXHID 1 for the Host Identifier).
        #[arg(long, short = 'c', value_parser = features::parse_num)]
        cdw11: Option<u32>,
        /// Bytes of data to fetch (default: 16 for the Host Identifier, else none).
        #[arg(long, short = 'l')]
        data_len: Option<u32>,
    },
    /// Set Features, as `nvme set-feature`: sets a feature to --value (Command Dword 11),
    /// e.g. `set-feature ADDR -f 0x84 -n 1 -v 1` write-protects namespace 1 (0 lifts it).
    SetFeature {
        /// The controller, feature and namespace.
        #[command(flatten)]
        at: FeatureArgs,
        /// The value (Command Dword 11; decimal or 0x hex).
        #[arg(long, short = 'v', value_parser = features::parse_num)]
        value: u32,
        /// Save it across power cycles (SV).
        #[arg(long)]
        save: bool,
    },
    /// The controller's registers, as `nvme show-regs` on a fabrics controller: CAP, VS, CC
    /// and CSTS read with Property Get, with their fields.
    ShowRegs {
        /// Where the controller is.
        #[command(flatten)]
        ctrl: CtrlArgs,
    },
    /// Any log page, as `nvme get-log`: --log-len bytes of log --log-id as a hex dump (or
    /// JSON, or the bytes themselves with --raw-binary).
    GetLog {
        /// Where the controller is.
        #[command(flatten)]
        ctrl: CtrlArgs,
        /// Log page identifier (decimal or 0x hex; e.g. 1 Error Information, 2 SMART, 0x0c ANA).
        #[arg(long, short = 'i', value_parser = features::parse_fid)]
        log_id: u8,
        /// Bytes to read (a multiple of 4, at most 1 MiB).
        #[arg(long, short = 'l')]
        log_len: u32,
        /// Namespace ID (default: all namespaces, FFFFFFFFh).
        #[arg(long, short = 'n', default_value_t = 0xFFFF_FFFF)]
        nsid: u32,
        /// Log Specific Parameter (LSP, 0-127).
        #[arg(long, short = 's', default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=127))]
        lsp: u8,
        /// Byte offset in the log (LPO; a multiple of 4).
        #[arg(long, short = 'o', default_value_t = 0)]
        offset: u64,
        /// Retain Asynchronous Event (RAE): reading the log does not re-arm its event.
        #[arg(long)]
        rae: bool,
        /// Write the log's bytes to stdout instead of a hex dump.
        #[arg(long, short = 'b')]
        raw_binary: bool,
    },
}

/// The controller a command talks to.
#[derive(clap::Args, Debug, Clone)]
pub struct CtrlArgs {
    /// Target address.
    pub addr: String,
    /// Subsystem NQN (default: the one NVM subsystem the discovery log lists).
    #[arg(long)]
    pub nqn: Option<String>,
}

/// The feature `get-feature` and `set-feature` act on.
#[derive(clap::Args, Debug, Clone)]
pub struct FeatureArgs {
    /// Where the controller is.
    #[command(flatten)]
    pub ctrl: CtrlArgs,
    /// Feature identifier (decimal or 0x hex; e.g. 7 Number of Queues, 0x84 Namespace Write
    /// Protection Config).
    #[arg(long, short = 'f', value_parser = features::parse_fid)]
    pub feature_id: u8,
    /// Namespace ID for namespace-specific features (0: the controller).
    #[arg(long, short = 'n', default_value_t = 0)]
    pub nsid: u32,
}

/// The namespace a command acts on.
#[derive(clap::Args, Debug, Clone)]
pub struct NsArgs {
    /// Where its controller is.
    #[command(flatten)]
    pub ctrl: CtrlArgs,
    /// Namespace ID.
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
}

/// `nvmeof zones` actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ZoneAction {
    /// Report every zone.
    Report,
    /// Open Zone.
    Open,
    /// Close Zone.
    Close,
    /// Finish Zone.
    Finish,
    /// Reset Zone.
    Reset,
}

/// `nvmeof resv` actions (the Register, Acquire and Release actions, and Report).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ResvAction {
    /// Reservation Report.
    Report,
    /// Register `--new-key`.
    Register,
    /// Unregister (with `--key`, or `--ignore-key`).
    Unregister,
    /// Replace `--key` by `--new-key`.
    Replace,
    /// Acquire a reservation of `--rtype`.
    Acquire,
    /// Preempt the holders of `--preempt-key`, taking a reservation of `--rtype`.
    Preempt,
    /// Preempt and abort.
    PreemptAbort,
    /// Release the reservation of `--rtype` this host holds.
    Release,
    /// Clear the reservation and every registration.
    Clear,
}

impl ResvAction {
    /// The action as the command line spells it.
    fn name(self) -> String {
        use clap::ValueEnum;
        self.to_possible_value().expect("no skipped variants").get_name().into()
    }
}

/// Reservation types, as nvme-cli's `--rtype` 1 to 6.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ResvType {
    /// Write Exclusive (1).
    WriteExclusive,
    /// Exclusive Access (2).
    ExclusiveAccess,
    /// Write Exclusive - Registrants Only (3).
    WriteExclusiveRegOnly,
    /// Exclusive Access - Registrants Only (4).
    ExclusiveAccessRegOnly,
    /// Write Exclusive - All Registrants (5).
    WriteExclusiveAllRegs,
    /// Exclusive Access - All Registrants (6).
    ExclusiveAccessAllRegs,
}

impl ResvType {
    fn wire(self) -> ReservationType {
        ReservationType(self as u8 + 1)
    }
}

/// The name of a reservation type as `--rtype` spells it (`none` when none is held).
fn rtype_name(t: ReservationType) -> String {
    use clap::ValueEnum;
    match t.0 {
        0 => "none".into(),
        n @ 1..=6 => ResvType::value_variants()[n as usize - 1]
            .to_possible_value()
            .expect("no skipped variants")
            .get_name()
            .into(),
        n => format!("unknown ({n})"),
    }
}

/// A `--range` of `nvmeof copy`: LBA:BLOCKS, at least one block.
fn parse_copy_range(s: &str) -> Result<(u64, u32), String> {
    let bad = || format!("{s:?} is not a range LBA:BLOCKS (e.g. 2048:8)");
    let (lba, blocks) = s.split_once(':').ok_or_else(bad)?;
    let lba = lba.parse().map_err(|_| bad())?;
    match blocks.parse() {
        Ok(0) => Err(format!("{s:?}: a range has at least one block")),
        Ok(n) => Ok((lba, n)),
        Err(_) => Err(bad()),
    }
}

/// A number in decimal or with a 0x prefix in hexadecimal (nvme-cli takes
/// both); `None` if it is neither or does not fit 64 bits.
fn parse_dec_or_hex(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A reservation key: decimal or 0x-prefixed hexadecimal.
fn parse_key(s: &str) -> Result<u64, String> {
    parse_dec_or_hex(s).ok_or_else(|| format!("{s:?} is not a 64-bit key (decimal or 0x hex)"))
}

impl Cli {
    /// Parses command-line style arguments (the first is the program name).
    pub fn parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        <Self as clap::Parser>::try_parse_from(args)
    }

    fn opts(&self, io_queues: u16) -> ConnectOptions {
        ConnectOptions {
            connect_timeout: self.timeout,
            command_timeout: self.timeout,
            dhchap_secret: self.dhchap_secret.clone(),
            dhchap_ctrl_secret: self.dhchap_ctrl_secret.clone(),
            ..self.socket.apply(connect_options(
                io_queues,
                16,
                self.digests,
                HostIdentity::resolve(self.hostnqn.as_deref(), self.hostid),
                0,
            ))
        }
    }
}

fn out_err(e: std::io::Error) -> ToolError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return ToolError::new(crate::error::ErrorKind::OutputClosed, "output closed by its reader");
    }
    ToolError::usage(format!("output: {e}"))
}

fn emit(out: &mut dyn Write, v: &Value) -> Result<(), ToolError> {
    writeln!(out, "{}", serde_json::to_string_pretty(v).expect("serializable")).map_err(out_err)
}

/// Runs one command; `input` is stdin for `write`, `out` is stdout.
pub async fn run(cli: &Cli, input: &mut dyn Read, out: &mut dyn Write) -> Result<(), ToolError> {
    match &cli.cmd {
        Command::Discover { addr: None, referrals, nqn, discovery_conf } => {
            discover_from_conf(cli, discovery_conf, nqn, *referrals, out).await
        }
        Command::Discover { addr: Some(addr), referrals: true, nqn, .. } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            discover_referrals(cli, &addr, nqn, out).await
        }
        Command::Discover { addr: Some(addr), referrals: false, nqn, .. } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let log = discover_nqn(addr.as_str(), nqn, discovery_options(&cli.opts(0)))
                .await
                .map_err(|e| ToolError::from_initiator(&format!("discovery at {addr}"), &e))?;
            if cli.json {
                emit(out, &discovery_json(&log))
            } else {
                write!(out, "{}", discovery_text(&addr, &log)).map_err(out_err)
            }
        }
        Command::GenDhchapKey { hmac, key_length } => {
            let hash = nvmeof_common::auth::HashId(*hmac);
            let len = match key_length {
                Some(l) => l.parse().expect("clap checked the value"),
                None => hash.len().max(32),
            };
            let secret = nvmeof_common::auth::DhchapSecret::generate(len, hash)
                .map_err(|e| ToolError::usage(e.to_string()))?;
            if cli.json {
                emit(out, &json!({ "secret": secret.to_string(), "key_length": len, "hmac": hmac }))
            } else {
                writeln!(out, "{secret}").map_err(out_err)
            }
        }
        Command::Identify { addr, nqn, nsid } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(0), cli.socket.nvme_config()).await?;
            let r = identify(cli, &ctrl, *nsid, out).await;
            close(ctrl).await;
            r
        }
        Command::List { addr, nqn } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(0), cli.socket.nvme_config()).await?;
            let r = list(cli, &ctrl, out).await;
            close(ctrl).await;
            r
        }
        Command::Paths { addr, nqn, nsid } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            paths(cli, &addr, nqn.as_deref(), *nsid, out).await
        }
        Command::AnaLog { addr, nqn } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(0), cli.socket.nvme_config()).await?;
            let r = ana_log(cli, &ctrl, out).await;
            close(ctrl).await;
            r
        }
        Command::SmartLog { addr, nqn, nsid } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(0), cli.socket.nvme_config()).await?;
            let r = smart_log(cli, &ctrl, *nsid, out).await;
            close(ctrl).await;
            r
        }
        Command::Events { addr, nqn, discovery, count, duration } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            // A watch outlives connection losses (the one-shot commands give up).
            let base = ConnectOptions { reconnect: ReconnectPolicy::default(), ..cli.opts(0) };
            let ctrl = if *discovery {
                let o = ConnectOptions {
                    async_events: true,
                    kato: ConnectOptions::default().kato,
                    reconnect: ReconnectPolicy::default(),
                    ..discovery_options(&base)
                };
                Controller::connect(addr.as_str(), nqn.as_deref().unwrap_or(DISCOVERY_NQN), o)
                    .await
                    .map_err(|e| ToolError::from_initiator(&format!("connect to discovery at {addr}"), &e))?
            } else {
                connect(&addr, nqn.as_deref(), base, cli.socket.nvme_config()).await?
            };
            let r = events(cli, &ctrl, *count, *duration, out).await;
            close(ctrl).await;
            r
        }
        Command::Read { addr, nqn, nsid, lba, count, file } => {
            if cli.json && file.is_none() {
                return Err(ToolError::usage("read --json needs --file (the data goes to stdout otherwise)"));
            }
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(1), cli.socket.nvme_config()).await?;
            let r = read(cli, &ctrl, *nsid, *lba, *count, file.as_ref(), out).await;
            close(ctrl).await;
            r
        }
        Command::Write { addr, nqn, nsid, lba, count, file, fua } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let mut data = Vec::new();
            let src = file.as_ref().map_or("stdin".to_string(), |f| f.display().to_string());
            match file {
                Some(f) => std::fs::File::open(f).and_then(|mut f| f.read_to_end(&mut data)),
                None => input.read_to_end(&mut data),
            }
            .map_err(|e| ToolError::usage(format!("cannot read {src}: {e}")))?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(1), cli.socket.nvme_config()).await?;
            let r = write(cli, &ctrl, *nsid, *lba, *count, data, *fua, &src, out).await;
            close(ctrl).await;
            r
        }
        Command::Copy { addr, nqn, nsid, ranges, to, fua } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(1), cli.socket.nvme_config()).await?;
            let r = copy(cli, &ctrl, *nsid, ranges, *to, *fua, out).await;
            close(ctrl).await;
            r
        }
        Command::CompareAndWrite { addr, nqn, nsid, lba, expected, new, fua } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let read = |f: &PathBuf| {
                std::fs::read(f).map_err(|e| ToolError::usage(format!("cannot read {}: {e}", f.display())))
            };
            let (expected, new) = (read(expected)?, read(new)?);
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(1), cli.socket.nvme_config()).await?;
            let r = compare_and_write(cli, &ctrl, *nsid, *lba, &expected, &new, *fua, out).await;
            close(ctrl).await;
            r
        }
        Command::Verify { addr, nqn, nsid, lba, count } => {
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(1), cli.socket.nvme_config()).await?;
            let r = verify(cli, &ctrl, *nsid, *lba, *count, out).await;
            close(ctrl).await;
            r
        }
        Command::Zones { addr, nqn, nsid, action, lba, all } => {
            if *action != ZoneAction::Report && lba.is_none() && !all {
                return Err(ToolError::usage("zones: --lba or --all is required for this action"));
            }
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(1), cli.socket.nvme_config()).await?;
            let r = zones(cli, &ctrl, *nsid, *action, lba.unwrap_or(0), *all, out).await;
            close(ctrl).await;
            r
        }
        Command::Resv { addr, nqn, nsid, action, key, new_key, preempt_key, rtype, ignore_key } => {
            let needs_type = matches!(
                action,
                ResvAction::Acquire | ResvAction::Preempt | ResvAction::PreemptAbort | ResvAction::Release
            );
            if needs_type && rtype.is_none() {
                return Err(ToolError::usage(format!("resv {}: --rtype is required", action.name())));
            }
            let addr = target_addr(addr, DEFAULT_PORT).map_err(ToolError::usage)?;
            let ctrl = connect(&addr, nqn.as_deref(), cli.opts(1), cli.socket.nvme_config()).await?;
            let keys =
                ResvKeys { key: *key, new_key: *new_key, preempt_key: *preempt_key, ignore_key: *ignore_key };
            let r = resv(cli, &ctrl, *nsid, *action, keys, rtype.map(ResvType::wire), out).await;
            close(ctrl).await;
            r
        }
        Command::Flush { ns } => {
            let ctrl = ns.ctrl.connect(cli, 1).await?;
            let r = nvm::flush(cli, &ctrl, ns.nsid, out).await;
            close(ctrl).await;
            r
        }
        Command::Dsm { ns, ranges } => {
            let ctrl = ns.ctrl.connect(cli, 1).await?;
            let r = nvm::deallocate(cli, &ctrl, ns.nsid, ranges, out).await;
            close(ctrl).await;
            r
        }
        Command::WriteZeroes { ns, lba, count, deac, fua } => {
            let ctrl = ns.ctrl.connect(cli, 1).await?;
            let r = nvm::write_zeroes(cli, &ctrl, ns.nsid, *lba, *count, *deac, *fua, out).await;
            close(ctrl).await;
            r
        }
        Command::GetFeature { at, sel, cdw11, data_len } => {
            let c = at.ctrl.connect(cli, 0).await?;
            let fid = FeatureId(at.feature_id);
            let r = features::get_feature(cli, &c, fid, at.nsid, *sel, *cdw11, *data_len, out).await;
            close(c).await;
            r
        }
        Command::SetFeature { at, value, save } => {
            let c = at.ctrl.connect(cli, 0).await?;
            let r =
                features::set_feature(cli, &c, FeatureId(at.feature_id), at.nsid, *value, *save, out).await;
            close(c).await;
            r
        }
        Command::ShowRegs { ctrl } => {
            let c = ctrl.connect(cli, 0).await?;
            let r = features::show_regs(cli, &c, out).await;
            close(c).await;
            r
        }
        Command::GetLog { ctrl, log_id, log_len, nsid, lsp, offset, rae, raw_binary } => {
            let c = ctrl.connect(cli, 0).await?;
            let req = logs::LogRequest {
                lid: *log_id,
                len: *log_len,
                nsid: *nsid,
                lsp: *lsp,
                offset: *offset,
                rae: *rae,
            };
            let r = logs::get_log(cli, &c, &req, *raw_binary, out).await;
            close(c).await;
            r
        }
    }
}

impl CtrlArgs {
    /// Connects with `io_queues` I/O queues (errors name the address and subsystem).
    async fn connect(&self, cli: &Cli, io_queues: u16) -> Result<Controller, ToolError> {
        let addr = target_addr(&self.addr, DEFAULT_PORT).map_err(ToolError::usage)?;
        connect(&addr, self.nqn.as_deref(), cli.opts(io_queues), cli.socket.nvme_config()).await
    }
}

/// The keys and flags of `nvmeof resv`.
#[derive(Clone, Copy)]
struct ResvKeys {
    key: u64,
    new_key: u64,
    preempt_key: u64,
    ignore_key: bool,
}

async fn resv(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    action: ResvAction,
    k: ResvKeys,
    rtype: Option<ReservationType>,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let ns = open_namespace(ctrl, nsid).await?;
    let t = rtype.unwrap_or(ReservationType::NONE);
    let r = match action {
        ResvAction::Report => {
            let status = ns
                .reservation_report()
                .await
                .map_err(|e| ToolError::from_initiator(&format!("reservation report (nsid {nsid})"), &e))?;
            return if cli.json {
                emit(out, &resv_report_json(nsid, &status))
            } else {
                write!(out, "{}", resv_report_text(nsid, &status)).map_err(out_err)
            };
        }
        ResvAction::Register => {
            ns.reservation_register(RegisterAction::REGISTER, k.key, k.new_key, false).await
        }
        ResvAction::Unregister => {
            ns.reservation_register(RegisterAction::UNREGISTER, k.key, 0, k.ignore_key).await
        }
        ResvAction::Replace => {
            ns.reservation_register(RegisterAction::REPLACE, k.key, k.new_key, k.ignore_key).await
        }
        ResvAction::Acquire => ns.reservation_acquire(AcquireAction::ACQUIRE, t, k.key, 0).await,
        ResvAction::Preempt => ns.reservation_acquire(AcquireAction::PREEMPT, t, k.key, k.preempt_key).await,
        ResvAction::PreemptAbort => {
            ns.reservation_acquire(AcquireAction::PREEMPT_AND_ABORT, t, k.key, k.preempt_key).await
        }
        ResvAction::Release => ns.reservation_release(ReleaseAction::RELEASE, t, k.key).await,
        ResvAction::Clear => ns.reservation_release(ReleaseAction::CLEAR, t, k.key).await,
    };
    let name = action.name();
    r.map_err(|e| ToolError::from_initiator(&format!("reservation {name} (nsid {nsid})"), &e))?;
    if cli.json {
        emit(out, &json!({ "nsid": nsid, "action": name, "rtype": rtype.map(rtype_name) }))
    } else {
        writeln!(out, "nsid {nsid}: reservation {name} done").map_err(out_err)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn resv_report_json(nsid: u32, s: &ReservationStatus) -> Value {
    let regs: Vec<Value> = s
        .registrants
        .iter()
        .map(|r| json!({ "hostid": hex(&r.hostid), "rkey": r.rkey, "holds": r.holds, "cntlid": r.cntlid }))
        .collect();
    json!({ "nsid": nsid, "generation": s.generation, "rtype": rtype_name(s.rtype), "regctl": s.regctl,
            "ptpls": s.ptpls, "registrants": regs })
}

fn resv_report_text(nsid: u32, s: &ReservationStatus) -> String {
    let mut t = format!(
        "nsid {nsid}: reservation {}, {} registrant(s), generation {}\n",
        rtype_name(s.rtype),
        s.regctl,
        s.generation
    );
    if !s.registrants.is_empty() {
        t += &format!("  {:<32}  {:<18}  {}\n", "host ID", "key", "holds");
    }
    for r in &s.registrants {
        t += &format!(
            "  {:<32}  {:<18}  {}\n",
            hex(&r.hostid),
            format!("{:#x}", r.rkey),
            if r.holds { "yes" } else { "no" }
        );
    }
    t
}

async fn close(ctrl: Controller) {
    if let Err(e) = ctrl.shutdown().await {
        tracing::debug!(error = %e, "controller shutdown failed");
    }
}

fn trtype(t: TrType) -> String {
    match t {
        TrType::TCP => "tcp".into(),
        TrType::RDMA => "rdma".into(),
        TrType::FC => "fc".into(),
        TrType::LOOP => "loop".into(),
        TrType(x) => format!("unknown ({x})"),
    }
}

fn adrfam(a: AdrFam) -> String {
    match a {
        AdrFam::IPV4 => "ipv4".into(),
        AdrFam::IPV6 => "ipv6".into(),
        AdrFam::IB => "ib".into(),
        AdrFam::FC => "fc".into(),
        AdrFam::LOOP => "loop".into(),
        AdrFam(x) => format!("unknown ({x})"),
    }
}

fn subtype(s: SubType) -> String {
    match s {
        SubType::NVME => "nvme subsystem".into(),
        SubType::REFERRAL => "discovery subsystem referral".into(),
        SubType::CURRENT_DISCOVERY => "current discovery subsystem".into(),
        SubType(x) => format!("unknown ({x})"),
    }
}

fn treq(t: u8) -> String {
    let mut s = match t & 3 {
        0 => "not specified".to_string(),
        1 => "required".to_string(),
        2 => "not required".to_string(),
        _ => "reserved".to_string(),
    };
    if t & nvmeof_common::spec::discovery::TREQ_DISABLE_SQFLOW != 0 {
        s += ", sq flow control disable supported";
    }
    s
}

fn sectype(e: &DiscoveryLogEntry) -> String {
    match e.tcp_sectype() {
        SecType::NONE => "none".into(),
        SecType::TLS12 => "tls1.2".into(),
        SecType::TLS13 => "tls1.3".into(),
        SecType(x) => format!("unknown ({x})"),
    }
}

/// The discovery log in nvme-cli's JSON layout (`genctr`, `records[]`).
pub fn discovery_json(log: &DiscoveryLog) -> Value {
    let records: Vec<Value> = log
        .entries
        .iter()
        .map(|e| {
            json!({
                "trtype": trtype(e.trtype),
                "adrfam": adrfam(e.adrfam),
                "subtype": subtype(e.subtype),
                "treq": treq(e.treq),
                "portid": e.portid,
                "trsvcid": e.trsvcid,
                "subnqn": e.subnqn,
                "traddr": e.traddr,
                "eflags": e.eflags,
                "sectype": sectype(e),
            })
        })
        .collect();
    json!({ "genctr": log.header.genctr, "numrec": log.header.numrec, "records": records })
}

/// `discover --referrals`: every log [`discover_all`] reads, in its order;
/// after printing them all, the first referral that could not be read is the
/// error (exit code).
/// The discovery logs of `addr`'s service and of the services its referrals
/// name, in turn.
async fn referral_logs(addr: &str, nqn: &str, opts: ConnectOptions) -> Result<Vec<Service>, ToolError> {
    let first = tokio::net::lookup_host(addr)
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| ToolError::usage(format!("cannot resolve {addr}")))?;
    let logs = discover_all_nqn(first, nqn, discovery_options(&opts))
        .await
        .map_err(|e| ToolError::from_initiator(&format!("discovery at {addr}"), &e))?;
    Ok(logs
        .into_iter()
        .map(|d| Service { addr: d.addr.to_string(), referral: true, log: d.log.map_err(Into::into) })
        .collect())
}

async fn discover_referrals(cli: &Cli, addr: &str, nqn: &str, out: &mut dyn Write) -> Result<(), ToolError> {
    let services = referral_logs(addr, nqn, cli.opts(0)).await?;
    emit_services(cli, &services, &[], out)
}

/// `discover` without an address: every discovery controller of nvme-cli's
/// `discovery.conf` at `path`, each with the options of its line (over the
/// command line's), and with `referrals` the services they name. A line
/// skipped or a controller that cannot be read is reported, and the others
/// are still asked; the exit code is then the first failure's.
async fn discover_from_conf(
    cli: &Cli,
    path: &Path,
    nqn: &str,
    referrals: bool,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ToolError::usage(format!("no address given, and {} cannot be read: {e}", path.display()))
    })?;
    let (entries, skipped) = crate::discovery_conf::parse(&text);
    let skipped: Vec<String> = skipped.iter().map(|s| format!("{} {s}", path.display())).collect();
    if entries.is_empty() {
        return Err(ToolError::usage(format!(
            "no address given, and {} lists no NVMe/TCP discovery controller{}",
            path.display(),
            skipped.iter().map(|s| format!("; {s}")).collect::<String>()
        )));
    }
    let mut services = Vec::new();
    for e in &entries {
        let base = cli.opts(0);
        let opts = ConnectOptions {
            host: Some(HostIdentity::resolve(
                e.hostnqn.as_deref().or(cli.hostnqn.as_deref()),
                e.hostid.or(cli.hostid),
            )),
            host_traddr: e.host_traddr.or(base.host_traddr),
            host_iface: e.host_iface.clone().or(base.host_iface.clone()),
            tos: e.tos.or(base.tos),
            hdr_digest: e.hdr_digest || base.hdr_digest,
            data_digest: e.data_digest || base.data_digest,
            ..base
        };
        let nqn = e.nqn.as_deref().unwrap_or(nqn);
        if referrals {
            match referral_logs(&e.addr, nqn, opts).await {
                Ok(logs) => services.extend(logs),
                Err(err) => {
                    services.push(Service { addr: e.addr.clone(), referral: false, log: Err(err.into()) })
                }
            }
        } else {
            let log = discover_nqn(e.addr.as_str(), nqn, discovery_options(&opts)).await.map_err(Into::into);
            services.push(Service { addr: e.addr.clone(), referral: false, log });
        }
    }
    emit_services(cli, &services, &skipped, out)?;
    if let Some(s) = skipped.first() {
        return Err(ToolError::usage(format!("{s} (skipped)")));
    }
    Ok(())
}

/// One discovery service's log, or why it could not be read.
struct Service {
    addr: String,
    /// Reached through a referral (an error there names it so).
    referral: bool,
    log: Result<DiscoveryLog, ServiceError>,
}

/// Why a service's log could not be read.
enum ServiceError {
    Initiator(nvmeof_initiator::Error),
    Tool(ToolError),
}

impl From<nvmeof_initiator::Error> for ServiceError {
    fn from(e: nvmeof_initiator::Error) -> Self {
        Self::Initiator(e)
    }
}

impl From<ToolError> for ServiceError {
    fn from(e: ToolError) -> Self {
        Self::Tool(e)
    }
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Initiator(e) => e.fmt(f),
            Self::Tool(e) => e.fmt(f),
        }
    }
}

/// The logs of `services` (and the configuration lines `skipped`) as text or
/// JSON; the first service that could not be read is the error.
fn emit_services(
    cli: &Cli,
    services: &[Service],
    skipped: &[String],
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    if cli.json {
        let list: Vec<Value> = services
            .iter()
            .map(|d| match &d.log {
                Ok(log) => {
                    let mut v = discovery_json(log);
                    v["address"] = json!(d.addr);
                    v
                }
                Err(e) => json!({ "address": d.addr, "error": e.to_string() }),
            })
            .collect();
        let mut v = json!({ "services": list });
        if !skipped.is_empty() {
            v["skipped"] = json!(skipped);
        }
        emit(out, &v)?;
    } else {
        for s in skipped {
            writeln!(out, "{s}: skipped").map_err(out_err)?;
        }
        for d in services {
            match &d.log {
                Ok(log) => write!(out, "{}", discovery_text(&d.addr, log)),
                Err(e) => writeln!(out, "Discovery Log at {}: cannot be read: {e}", d.addr),
            }
            .map_err(out_err)?;
        }
    }
    match services.iter().find_map(|d| d.log.as_ref().err().map(|e| (d, e))) {
        Some((d, ServiceError::Initiator(e))) => {
            let what = if d.referral { "discovery at referral" } else { "discovery at" };
            Err(ToolError::from_initiator(&format!("{what} {}", d.addr), e))
        }
        Some((_, ServiceError::Tool(e))) => Err(e.clone()),
        None => Ok(()),
    }
}

/// The discovery log as text (like `nvme discover`).
pub fn discovery_text(addr: &str, log: &DiscoveryLog) -> String {
    let mut s =
        format!("Discovery Log at {addr}: generation {}, {} records\n", log.header.genctr, log.entries.len());
    for (i, e) in log.entries.iter().enumerate() {
        s += &format!("=====Discovery Log Entry {i}======\n");
        s += &format!("trtype:  {}\n", trtype(e.trtype));
        s += &format!("adrfam:  {}\n", adrfam(e.adrfam));
        s += &format!("subtype: {}\n", subtype(e.subtype));
        s += &format!("treq:    {}\n", treq(e.treq));
        s += &format!("portid:  {}\n", e.portid);
        s += &format!("trsvcid: {}\n", e.trsvcid);
        s += &format!("subnqn:  {}\n", e.subnqn);
        s += &format!("traddr:  {}\n", e.traddr);
        s += &format!("eflags:  {:#x}\n", e.eflags);
        s += &format!("sectype: {}\n", sectype(e));
    }
    s
}

fn version(v: u32) -> String {
    format!("{}.{}.{}", v >> 16, (v >> 8) & 0xFF, v & 0xFF)
}

/// Identify Controller data (and connection facts) as JSON.
pub fn controller_json(id: &IdentifyController, ctrl: &Controller) -> Value {
    let info = ctrl.info();
    json!({
        "vid": id.vid,
        "ssvid": id.ssvid,
        "sn": id.sn.trim(),
        "mn": id.mn.trim(),
        "fr": id.fr.trim(),
        "rab": id.rab,
        "ieee": hex(&id.ieee),
        "cmic": id.cmic,
        "mdts": id.mdts,
        "cntlid": id.cntlid,
        "ver": id.ver,
        "version": version(id.ver),
        "oaes": id.oaes,
        "ctratt": id.ctratt,
        "cntrltype": id.cntrltype,
        "oacs": id.oacs,
        "acl": id.acl,
        "aerl": id.aerl,
        "lpa": id.lpa,
        "elpe": id.elpe,
        "kas": id.kas,
        "sqes": id.sqes,
        "cqes": id.cqes,
        "maxcmd": id.maxcmd,
        "nn": id.nn,
        "oncs": id.oncs,
        "fuses": id.fuses,
        "ocfs": id.ocfs,
        "vwc": id.vwc,
        "sgls": id.sgls,
        "subnqn": id.subnqn,
        "ioccsz": id.ioccsz,
        "iorcsz": id.iorcsz,
        "icdoff": id.icdoff,
        "fcatt": id.fcatt,
        "msdbd": id.msdbd,
        "anatt": id.anatt,
        "anacap": id.anacap,
        "anagrpmax": id.anagrpmax,
        "nanagrpid": id.nanagrpid,
        // Identify CNS 06h (NVM command set), as `nvme id-ctrl-nvm` prints it.
        "nvm": {
            "vsl": info.nvm_limits.vsl,
            "wzsl": info.nvm_limits.wzsl,
            "wusl": info.nvm_limits.wusl,
            "dmrl": info.nvm_limits.dmrl,
            "dmrsl": info.nvm_limits.dmrsl,
            "dmsl": info.nvm_limits.dmsl,
        },
        "connection": {
            "address": ctrl.addr().to_string(),
            "hostnqn": ctrl.host().nqn,
            "io_queues": info.io_queues,
            "queue_depth": info.queue_depth,
            "max_transfer": info.max_transfer,
            "inline_data": info.inline_data,
        },
    })
}

/// Identify Namespace data as JSON.
pub fn namespace_json(nsid: u32, id: &IdentifyNamespace) -> Value {
    let bs = id.block_size().unwrap_or(0) as u64;
    let lbaf: Vec<Value> = id
        .lbaf
        .iter()
        .map(|f| json!({ "ms": f.ms, "lbads": f.lbads, "rp": f.rp, "block_size": f.block_size() }))
        .collect();
    json!({
        "nsid": nsid,
        "nsze": id.nsze,
        "ncap": id.ncap,
        "nuse": id.nuse,
        "nsfeat": id.nsfeat,
        "nlbaf": id.lbaf.len().saturating_sub(1),
        "flbas": id.flbas,
        "block_size": bs,
        "size_bytes": id.nsze * bs,
        // NUSE in bytes: what a thin-provisioned namespace holds (nvme list's "Usage").
        "used_bytes": id.nuse * bs,
        "nmic": id.nmic,
        "anagrpid": id.anagrpid,
        "mssrl": id.mssrl,
        "mcl": id.mcl,
        "msrc": id.msrc,
        "nguid": hex(&id.nguid),
        "eui64": hex(&id.eui64),
        "lbafs": lbaf,
    })
}

fn text_of(v: &Value, indent: &str) -> String {
    let mut s = String::new();
    if let Value::Object(m) = v {
        for (k, val) in m {
            match val {
                Value::Object(_) => {
                    s += &format!("{indent}{k}:\n");
                    s += &text_of(val, &format!("{indent}  "));
                }
                Value::Array(a) => {
                    for (i, x) in a.iter().enumerate() {
                        s += &format!("{indent}{k}[{i}]: {}\n", x);
                    }
                }
                Value::String(t) => s += &format!("{indent}{k:<12}: {t}\n"),
                Value::Null => s += &format!("{indent}{k:<12}: -\n"),
                x => s += &format!("{indent}{k:<12}: {x}\n"),
            }
        }
    }
    s
}

async fn identify(
    cli: &Cli,
    ctrl: &Controller,
    nsid: Option<u32>,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let v = match nsid {
        None => {
            let id = ctrl
                .identify_controller()
                .await
                .map_err(|e| ToolError::from_initiator("Identify Controller", &e))?;
            controller_json(&id, ctrl)
        }
        Some(n) => {
            namespace_info(ctrl, n).await?;
            let id = ctrl
                .identify_namespace(n)
                .await
                .map_err(|e| ToolError::from_initiator(&format!("Identify Namespace {n}"), &e))?;
            let mut v = namespace_json(n, &id);
            // The UUID is in the identification descriptors only (`nvme
            // ns-descs`); a controller without the list (before NVMe 1.3)
            // has none to show.
            if let Ok(descs) = ctrl.namespace_id_descriptors(n).await {
                let uuid = descs.iter().find_map(|d| match d {
                    NsIdDescriptor::Uuid(u) => Some(nvmeof_common::spec::nqn::format_uuid(u)),
                    _ => None,
                });
                v["uuid"] = uuid.map_or(Value::Null, Value::from);
            }
            v
        }
    };
    if cli.json {
        emit(out, &v)
    } else {
        write!(out, "{}", text_of(&v, "")).map_err(out_err)
    }
}

/// A SMART / Health log as JSON, with nvme-cli's keys (temperatures in kelvins).
pub fn smart_log_json(l: &SmartLog) -> Value {
    // 128-bit counters: numbers while they fit 64 bits, decimal strings past that.
    let n = |v: u128| u64::try_from(v).map_or_else(|_| Value::from(v.to_string()), Value::from);
    json!({
        "critical_warning": l.critical_warning,
        "temperature": l.composite_temp,
        "avail_spare": l.avail_spare,
        "spare_thresh": l.spare_thresh,
        "percent_used": l.percent_used,
        "endurance_grp_critical_warning_summary": l.endu_grp_crit_warn,
        "data_units_read": n(l.data_units_read),
        "data_units_written": n(l.data_units_written),
        "host_read_commands": n(l.host_reads),
        "host_write_commands": n(l.host_writes),
        "controller_busy_time": n(l.ctrl_busy_time),
        "power_cycles": n(l.power_cycles),
        "power_on_hours": n(l.power_on_hours),
        "unsafe_shutdowns": n(l.unsafe_shutdowns),
        "media_errors": n(l.media_errors),
        "num_err_log_entries": n(l.num_err_log_entries),
        "warning_temp_time": l.warning_temp_time,
        "critical_comp_time": l.critical_comp_time,
    })
}

async fn smart_log(cli: &Cli, ctrl: &Controller, nsid: u32, out: &mut dyn Write) -> Result<(), ToolError> {
    if nsid != 0xFFFF_FFFF {
        namespace_info(ctrl, nsid).await?;
    }
    let mut buf = vec![0u8; SMART_LOG_LEN];
    ctrl.get_log_page(GetLogPageCmd::new(LogPageId::SMART, nsid, 0, SMART_LOG_LEN as u32), &mut buf)
        .await
        .map_err(|e| ToolError::from_initiator("SMART log", &e))?;
    let log = SmartLog::decode(&buf).expect("a whole log");
    let v = smart_log_json(&log);
    if cli.json {
        return emit(out, &v);
    }
    let of = if nsid == 0xFFFF_FFFF { "all namespaces".to_string() } else { format!("namespace {nsid}") };
    let s = format!("SMART / Health log of {} ({of}) through {}\n", ctrl.subnqn(), ctrl.addr());
    write!(out, "{s}{}", text_of(&v, "")).map_err(out_err)
}

/// ANA state names as nvme-cli prints them.
fn ana_state(s: AnaState) -> String {
    s.name().map_or_else(|| format!("reserved ({:#x})", s.0), str::to_string)
}

/// What one listed path gave `paths`: its controller ID and the
/// namespace's ANA state through it (`None`: the controller reports no
/// ANA state for the namespace), or why it did not connect.
type PathOutcome = Result<(u16, Option<AnaState>), ToolError>;

/// `paths`: each path the discovery logs at `addr` list for the subsystem,
/// connected in turn (nvme-cli's `config.json` keys applying per address,
/// as for the other commands): the namespace's ANA state through it.
async fn paths(
    cli: &Cli,
    addr: &str,
    nqn: Option<&str>,
    nsid: u32,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let services = referral_logs(addr, DISCOVERY_NQN, cli.opts(0)).await?;
    let nqn = match nqn {
        Some(n) => n.to_string(),
        None => match &services[0].log {
            Ok(log) => crate::probe::only_subsystem(log, addr)?,
            Err(ServiceError::Tool(e)) => return Err(e.clone()),
            Err(ServiceError::Initiator(e)) => {
                return Err(ToolError::from_initiator(&format!("discovery at {addr}"), e))
            }
        },
    };
    let listed = nvmeof_initiator::subsystem_paths(services.iter().filter_map(|s| s.log.as_ref().ok()), &nqn);
    if listed.is_empty() {
        return Err(ToolError::not_found(format!("no discovery log at {addr} lists {nqn}")));
    }
    // Where each entry points, as an address to connect to and to print.
    let at = |e: &DiscoveryLogEntry| {
        if e.traddr.contains(':') {
            format!("[{}]:{}", e.traddr, e.trsvcid)
        } else {
            format!("{}:{}", e.traddr, e.trsvcid)
        }
    };
    let mut rows: Vec<(DiscoveryLogEntry, PathOutcome)> = Vec::new();
    for e in listed {
        let at = at(&e);
        let outcome = async {
            let ctrl = connect(&at, Some(&nqn), cli.opts(0), cli.socket.nvme_config()).await?;
            let r = async {
                let id = ctrl
                    .identify_namespace(nsid)
                    .await
                    .map_err(|e| ToolError::from_initiator(&format!("Identify Namespace {nsid}"), &e))?;
                // An inactive NSID identifies as zeroes.
                if id.nsze == 0 {
                    return Err(ToolError::not_found(format!("namespace {nsid} is not active there")));
                }
                let ana = if id.anagrpid == 0 {
                    None
                } else {
                    let log = ctrl.ana_log().await.map_err(|e| ToolError::from_initiator("ANA log", &e))?;
                    log.groups.iter().find(|g| g.grpid == id.anagrpid).map(|g| g.state)
                };
                Ok((ctrl.info().cntlid, ana))
            }
            .await;
            close(ctrl).await;
            r
        }
        .await;
        rows.push((e, outcome));
    }
    let state = |a: &Option<AnaState>| a.map_or_else(|| "-".to_string(), ana_state);
    if cli.json {
        let paths: Vec<Value> = rows
            .iter()
            .map(|(e, o)| {
                let mut v = json!({ "traddr": e.traddr, "trsvcid": e.trsvcid, "portid": e.portid });
                match o {
                    Ok((cntlid, ana)) => {
                        v["cntlid"] = json!(cntlid);
                        v["ana_state"] = json!(state(ana));
                    }
                    Err(err) => v["error"] = json!(err.message),
                }
                v
            })
            .collect();
        emit(out, &json!({ "subnqn": nqn, "nsid": nsid, "paths": paths }))?;
    } else {
        let mut s = format!("Paths to namespace {nsid} of {nqn} (discovery at {addr}):\n");
        s += &format!("{:<40} {:<7} {:<7} {}\n", "Address", "Portid", "Cntlid", "ANA state");
        for (e, o) in &rows {
            let at = at(e);
            s += &match o {
                Ok((cntlid, ana)) => format!("{at:<40} {:<7} {cntlid:<7} {}\n", e.portid, state(ana)),
                Err(err) => format!("{at:<40} {:<7} {:<7} cannot connect: {}\n", e.portid, "-", err.message),
            };
        }
        write!(out, "{s}").map_err(out_err)?;
    }
    // Exit 0 while a path connects; else the first path's failure.
    match rows.iter().find(|(_, o)| o.is_ok()) {
        Some(_) => Ok(()),
        None => Err(rows.into_iter().find_map(|(_, o)| o.err()).expect("at least one path")),
    }
}

/// The groups of an ANA log as JSON.
fn ana_groups_json(log: &AnaLog) -> Vec<Value> {
    log.groups
        .iter()
        .map(|g| json!({ "grpid": g.grpid, "state": ana_state(g.state), "chgcnt": g.chgcnt, "nsids": g.nsids }))
        .collect()
}

/// An ANA log as JSON.
pub fn ana_log_json(subnqn: &str, log: &AnaLog) -> Value {
    json!({ "subnqn": subnqn, "chgcnt": log.chgcnt, "groups": ana_groups_json(log) })
}

async fn ana_log(cli: &Cli, ctrl: &Controller, out: &mut dyn Write) -> Result<(), ToolError> {
    let log = ctrl.ana_log().await.map_err(|e| ToolError::from_initiator("ANA log", &e))?;
    if cli.json {
        return emit(out, &ana_log_json(ctrl.subnqn(), &log));
    }
    let mut s =
        format!("ANA log of {} through {} (change count {})\n", ctrl.subnqn(), ctrl.addr(), log.chgcnt);
    s += &format!("{:<6} {:<16} {}\n", "Group", "State", "Namespaces");
    for g in &log.groups {
        let nsids: Vec<String> = g.nsids.iter().map(u32::to_string).collect();
        s += &format!("{:<6} {:<16} {}\n", g.grpid, ana_state(g.state), nsids.join(" "));
    }
    write!(out, "{s}").map_err(out_err)
}

/// A reservation notification's type, as words.
fn notification_name(t: NotificationType) -> String {
    match t {
        NotificationType::REGISTRATION_PREEMPTED => "registration preempted".into(),
        NotificationType::RESERVATION_RELEASED => "reservation released".into(),
        NotificationType::RESERVATION_PREEMPTED => "reservation preempted".into(),
        NotificationType(n) => format!("type {n}"),
    }
}

/// One event as JSON.
pub fn event_json(ev: &ControllerEvent) -> Value {
    match ev {
        ControllerEvent::NamespacesChanged(nsids) => json!({ "event": "namespaces-changed", "nsids": nsids }),
        ControllerEvent::AnaChanged(log) => {
            json!({ "event": "ana-change", "chgcnt": log.chgcnt, "groups": ana_groups_json(log) })
        }
        ControllerEvent::DiscoveryChanged(log) => {
            json!({ "event": "discovery-change", "log": discovery_json(log) })
        }
        ControllerEvent::Reservations(v) => {
            let n: Vec<Value> = v
                .iter()
                .map(|n| json!({ "count": n.count, "type": notification_name(n.kind), "nsid": n.nsid }))
                .collect();
            json!({ "event": "reservation", "notifications": n })
        }
        ControllerEvent::Other(e) => {
            json!({ "event": "other", "type": e.ty.0, "info": e.info, "lid": e.lid })
        }
        other => json!({ "event": "unknown", "debug": format!("{other:?}") }),
    }
}

/// One event as a line of text.
fn event_text(ev: &ControllerEvent) -> String {
    match ev {
        ControllerEvent::NamespacesChanged(nsids) if nsids.first() == Some(&0xFFFF_FFFF) => {
            "namespaces changed: more than 1024".into()
        }
        ControllerEvent::NamespacesChanged(nsids) => {
            let l: Vec<String> = nsids.iter().map(u32::to_string).collect();
            format!("namespaces changed: {}", l.join(" "))
        }
        ControllerEvent::AnaChanged(log) => {
            let g: Vec<String> = log
                .groups
                .iter()
                .map(|g| {
                    let n: Vec<String> = g.nsids.iter().map(u32::to_string).collect();
                    format!("group {} {} [{}]", g.grpid, ana_state(g.state), n.join(" "))
                })
                .collect();
            format!("ANA change (change count {}): {}", log.chgcnt, g.join(", "))
        }
        ControllerEvent::DiscoveryChanged(log) => {
            let n: Vec<&str> = log.entries.iter().map(|e| e.subnqn.as_str()).collect();
            format!(
                "discovery log change: generation {}, {} records: {}",
                log.header.genctr,
                log.entries.len(),
                n.join(" ")
            )
        }
        ControllerEvent::Reservations(v) => {
            let n: Vec<String> = v
                .iter()
                .map(|n| format!("{} on nsid {} (count {})", notification_name(n.kind), n.nsid, n.count))
                .collect();
            format!("reservation: {}", n.join(", "))
        }
        ControllerEvent::Other(e) => {
            format!("event: type {:#x} info {:#04x} log page {:#04x}", e.ty.0, e.info, e.lid)
        }
        other => format!("event: {other:?}"),
    }
}

fn write_line(out: &mut dyn Write, line: &str) -> Result<(), ToolError> {
    writeln!(out, "{line}").and_then(|()| out.flush()).map_err(out_err)
}

async fn events(
    cli: &Cli,
    ctrl: &Controller,
    count: Option<u64>,
    duration: Option<Duration>,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let mut rx = ctrl.events();
    let mut state = ctrl.subscribe_state();
    let info = ctrl.info();
    if info.async_events == 0 {
        return Err(ToolError::new(
            crate::error::ErrorKind::Nvme,
            format!(
                "the controller reports no asynchronous events this host reads (OAES {:#x})",
                info.identify.oaes
            ),
        ));
    }
    if !cli.json {
        let line = format!(
            "watching {} at {} (cntlid {}, events enabled {:#x})",
            ctrl.subnqn(),
            ctrl.addr(),
            info.cntlid,
            info.async_events
        );
        write_line(out, &line)?;
    }
    let end = duration.map(|d| tokio::time::Instant::now() + d);
    let until_end = async {
        match end {
            Some(t) => tokio::time::sleep_until(t).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(until_end);
    let mut seen = 0u64;
    while count.is_none_or(|c| seen < c) {
        tokio::select! {
            r = rx.recv() => match r {
                Ok(ev) => {
                    seen += 1;
                    let line = if cli.json { event_json(&ev).to_string() } else { event_text(&ev) };
                    write_line(out, &line)?;
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "events missed (output too slow)");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            },
            r = state.changed() => {
                if r.is_err() {
                    break;
                }
                let s = *state.borrow_and_update();
                match s {
                    ControllerState::Failed => {
                        return Err(ToolError::new(crate::error::ErrorKind::Transport, "controller lost (reconnecting gave up)"));
                    }
                    ControllerState::Shutdown => break,
                    // Events raised while reconnecting are lost with the association.
                    _ => tracing::info!(state = ?s, "controller state"),
                }
            }
            _ = &mut until_end => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    Ok(())
}

async fn list(cli: &Cli, ctrl: &Controller, out: &mut dyn Write) -> Result<(), ToolError> {
    let ids = ctrl
        .active_namespaces()
        .await
        .map_err(|e| ToolError::from_initiator("Identify active namespaces", &e))?;
    let mut rows = Vec::new();
    for n in ids {
        let id = ctrl
            .identify_namespace(n)
            .await
            .map_err(|e| ToolError::from_initiator(&format!("Identify Namespace {n}"), &e))?;
        rows.push(namespace_json(n, &id));
    }
    if cli.json {
        return emit(out, &json!({ "subnqn": ctrl.subnqn(), "namespaces": rows }));
    }
    let mut s = format!(
        "{:<6} {:>12} {:>14} {:>10} {:>12}  {:<32}\n",
        "NSID", "Size", "Blocks", "Block size", "Usage", "NGUID"
    );
    for r in &rows {
        s += &format!(
            "{:<6} {:>12} {:>14} {:>10} {:>12}  {}\n",
            r["nsid"].to_string(),
            fmt_bytes(r["size_bytes"].as_u64().unwrap_or(0)),
            r["nsze"].to_string(),
            r["block_size"].to_string(),
            fmt_bytes(r["used_bytes"].as_u64().unwrap_or(0)),
            r["nguid"].as_str().unwrap_or("")
        );
    }
    if rows.is_empty() {
        s += "(no active namespaces)\n";
    }
    write!(out, "{s}").map_err(out_err)
}

/// The facts of namespace `nsid` and the blocks `ranges` (LBA, blocks) add
/// up to, once each range is checked to lie within the namespace.
async fn checked_ranges(
    ctrl: &Controller,
    nsid: u32,
    ranges: &[(u64, u32)],
) -> Result<(crate::probe::NsInfo, u64), ToolError> {
    let info = namespace_info(ctrl, nsid).await?;
    for &(lba, n) in ranges {
        check_range(nsid, lba, n as u64, info.blocks)?;
    }
    Ok((info, ranges.iter().map(|&(_, n)| n as u64).sum()))
}

fn check_range(nsid: u32, lba: u64, count: u64, blocks: u64) -> Result<(), ToolError> {
    if count == 0 {
        return Err(ToolError::usage("--count must be at least 1"));
    }
    match lba.checked_add(count) {
        Some(end) if end <= blocks => Ok(()),
        _ => Err(ToolError::usage(format!(
            "blocks {lba}..{} are beyond namespace {nsid} ({blocks} blocks)",
            lba.saturating_add(count)
        ))),
    }
}

/// Bytes per command the CLI uses for big transfers.
const CHUNK: u64 = 1 << 20;

async fn read(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    lba: u64,
    count: u64,
    file: Option<&PathBuf>,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let info = namespace_info(ctrl, nsid).await?;
    check_range(nsid, lba, count, info.blocks)?;
    let ns = open_namespace(ctrl, nsid).await?;
    let bs = info.block_size as u64;
    let per = (CHUNK / bs).max(1);
    let mut fout = match file {
        Some(p) => Some(
            std::fs::File::create(p)
                .map_err(|e| ToolError::usage(format!("cannot create {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let mut buf = vec![0u8; (per.min(count) * bs) as usize];
    let mut done = 0;
    while done < count {
        let n = per.min(count - done);
        let b = &mut buf[..(n * bs) as usize];
        ns.read(lba + done, b).await.map_err(|e| {
            ToolError::from_initiator(&format!("read of {n} blocks at lba {} (nsid {nsid})", lba + done), &e)
        })?;
        match fout.as_mut() {
            Some(f) => f.write_all(b),
            None => out.write_all(b),
        }
        .map_err(out_err)?;
        done += n;
    }
    if let Some(f) = fout.as_mut() {
        f.flush().map_err(out_err)?;
        let summary = json!({ "nsid": nsid, "lba": lba, "blocks": count, "bytes": count * bs,
                              "file": file.map(|p| p.display().to_string()) });
        if cli.json {
            emit(out, &summary)?;
        } else {
            writeln!(
                out,
                "read {count} blocks ({}) from lba {lba} of nsid {nsid} into {}",
                fmt_bytes(count * bs),
                file.map(|p| p.display().to_string()).unwrap_or_default()
            )
            .map_err(out_err)?;
        }
    } else {
        out.flush().map_err(out_err)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn write(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    lba: u64,
    count: Option<u64>,
    data: Vec<u8>,
    fua: bool,
    src: &str,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let info = namespace_info(ctrl, nsid).await?;
    let bs = info.block_size as u64;
    let need = (data.len() as u64).div_ceil(bs);
    let count = match count {
        Some(c) if need > c => {
            return Err(ToolError::usage(format!(
                "{src} holds {} bytes, more than --count {c} blocks of {bs} bytes",
                data.len()
            )))
        }
        Some(c) => c,
        None if data.is_empty() => return Err(ToolError::usage(format!("{src} is empty: nothing to write"))),
        None => need,
    };
    check_range(nsid, lba, count, info.blocks)?;
    let ns = open_namespace(ctrl, nsid).await?;
    let flags = IoFlags { fua, ..IoFlags::default() };
    let per = (CHUNK / bs).max(1);
    // The input's last block and any further blocks up to --count are zeroes.
    // They are written from one reused command-sized buffer rather than by
    // growing `data` to the whole range: `--count` may name gigabytes past a
    // short input (zeroing a range), which must not need that much memory.
    let mut padded = Vec::new();
    let mut done = 0;
    while done < count {
        let n = per.min(count - done);
        let (from, len) = ((done * bs) as usize, (n * bs) as usize);
        let chunk = match data.get(from..from + len) {
            Some(whole) => whole,
            None => {
                let have = data.get(from..).unwrap_or_default();
                padded.clear();
                padded.extend_from_slice(have);
                padded.resize(len, 0);
                &padded[..]
            }
        };
        let at = lba + done;
        ns.write_with(at, chunk, flags).await.map_err(|e| {
            ToolError::from_initiator(&format!("write of {n} blocks at lba {at} (nsid {nsid})"), &e)
        })?;
        done += n;
    }
    if cli.json {
        emit(out, &json!({ "nsid": nsid, "lba": lba, "blocks": count, "bytes": count * bs, "fua": fua }))
    } else {
        writeln!(out, "wrote {count} blocks ({}) at lba {lba} of nsid {nsid}", fmt_bytes(count * bs))
            .map_err(out_err)
    }
}

async fn copy(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    ranges: &[(u64, u32)],
    to: u64,
    fua: bool,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let (info, total) = checked_ranges(ctrl, nsid, ranges).await?;
    check_range(nsid, to, total, info.blocks)?;
    let ns = open_namespace(ctrl, nsid).await?;
    ns.copy(ranges, to, IoFlags { fua, ..IoFlags::default() }).await.map_err(|e| {
        ToolError::from_initiator(&format!("copy of {total} blocks to lba {to} (nsid {nsid})"), &e)
    })?;
    let bytes = total * info.block_size as u64;
    if cli.json {
        let r: Vec<Value> = ranges.iter().map(|&(lba, n)| json!({ "lba": lba, "blocks": n })).collect();
        emit(
            out,
            &json!({ "nsid": nsid, "ranges": r, "to": to, "blocks": total, "bytes": bytes, "fua": fua }),
        )
    } else {
        writeln!(
            out,
            "copied {total} blocks ({}) from {} range(s) to lba {to} of nsid {nsid}",
            fmt_bytes(bytes),
            ranges.len()
        )
        .map_err(out_err)
    }
}

#[allow(clippy::too_many_arguments)]
async fn compare_and_write(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    lba: u64,
    expected: &[u8],
    new: &[u8],
    fua: bool,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let info = namespace_info(ctrl, nsid).await?;
    let bs = info.block_size as usize;
    if expected.len() != new.len() || expected.is_empty() || !expected.len().is_multiple_of(bs) {
        return Err(ToolError::usage(format!(
            "compare-and-write: --expected holds {} bytes and --new {}: both must be the same whole number of \
             {bs}-byte blocks",
            expected.len(),
            new.len()
        )));
    }
    let count = (expected.len() / bs) as u64;
    check_range(nsid, lba, count, info.blocks)?;
    let ns = open_namespace(ctrl, nsid).await?;
    let what = format!("compare and write of {count} blocks at lba {lba} (nsid {nsid})");
    let wrote = match ns.compare_and_write(lba, expected, new, IoFlags { fua, ..IoFlags::default() }).await {
        Ok(w) => w,
        Err(nvmeof_initiator::Error::InvalidArgument(m)) => {
            return Err(ToolError::new(ErrorKind::Nvme, format!("{what}: {m}")))
        }
        Err(e) => return Err(ToolError::from_initiator(&what, &e)),
    };
    if cli.json {
        emit(out, &json!({ "nsid": nsid, "lba": lba, "blocks": count, "written": wrote, "fua": fua }))?;
    } else if wrote {
        writeln!(out, "compared and wrote {count} blocks at lba {lba} of nsid {nsid}").map_err(out_err)?;
    }
    if wrote {
        Ok(())
    } else {
        Err(ToolError::new(
            ErrorKind::Nvme,
            format!(
                "{what}: miscompare (Compare Failure): the blocks do not hold --expected; nothing written"
            ),
        ))
    }
}

async fn verify(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    lba: u64,
    count: Option<u64>,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let info = namespace_info(ctrl, nsid).await?;
    let count = count.unwrap_or_else(|| info.blocks.saturating_sub(lba));
    if count == 0 {
        return Err(ToolError::usage(format!(
            "verify: no blocks from lba {lba} (nsid {nsid} has {})",
            info.blocks
        )));
    }
    check_range(nsid, lba, count, info.blocks)?;
    let ns = open_namespace(ctrl, nsid).await?;
    let started = std::time::Instant::now();
    ns.verify(lba, count, IoFlags::default()).await.map_err(|e| {
        ToolError::from_initiator(&format!("verify of {count} blocks at lba {lba} (nsid {nsid})"), &e)
    })?;
    let secs = started.elapsed().as_secs_f64();
    let bytes = count * info.block_size as u64;
    if cli.json {
        emit(out, &json!({ "nsid": nsid, "lba": lba, "blocks": count, "bytes": bytes, "seconds": secs }))
    } else {
        writeln!(
            out,
            "verified {count} blocks ({}) at lba {lba} of nsid {nsid} in {:.3} s",
            fmt_bytes(bytes),
            secs
        )
        .map_err(out_err)
    }
}

/// Namespace `nsid` of `ctrl` (Identify Namespace); the error names it.
async fn open_namespace(ctrl: &Controller, nsid: u32) -> Result<nvmeof_initiator::Namespace, ToolError> {
    ctrl.namespace(nsid).await.map_err(|e| ToolError::from_initiator(&format!("namespace {nsid}"), &e))
}

/// `nvmeof zones`: a report of every zone, or one Zone Management Send.
async fn zones(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    action: ZoneAction,
    lba: u64,
    all: bool,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    use nvmeof_common::spec::zns::ZoneSendAction;
    let ns = open_namespace(ctrl, nsid).await?;
    let zsa = match action {
        ZoneAction::Report => {
            let zones = ns
                .zones()
                .await
                .map_err(|e| ToolError::from_initiator(&format!("report zones of nsid {nsid}"), &e))?;
            if cli.json {
                let list: Vec<Value> = zones
                    .iter()
                    .map(|z| json!({ "slba": z.slba, "wp": z.wp, "capacity": z.capacity, "state": z.state.name() }))
                    .collect();
                return emit(out, &json!({ "nsid": nsid, "zones": list }));
            }
            for (i, z) in zones.iter().enumerate() {
                writeln!(
                    out,
                    "zone {i}: slba {} wp {} capacity {} {}",
                    z.slba,
                    z.wp,
                    z.capacity,
                    z.state.name()
                )
                .map_err(out_err)?;
            }
            return Ok(());
        }
        ZoneAction::Open => ZoneSendAction::OPEN,
        ZoneAction::Close => ZoneSendAction::CLOSE,
        ZoneAction::Finish => ZoneSendAction::FINISH,
        ZoneAction::Reset => ZoneSendAction::RESET,
    };
    let name = format!("{action:?}").to_lowercase();
    let what = if all { "every zone".to_string() } else { format!("the zone at lba {lba}") };
    ns.manage_zone(zsa, lba, all)
        .await
        .map_err(|e| ToolError::from_initiator(&format!("{name} {what} (nsid {nsid})"), &e))?;
    if cli.json {
        emit(out, &json!({ "nsid": nsid, "action": name, "lba": (!all).then_some(lba), "all": all }))
    } else {
        writeln!(out, "{name}: {what} of nsid {nsid}").map_err(out_err)
    }
}

#[cfg(test)]
mod tests {
    use nvmeof_common::spec::reservation::ReservationNotification;

    use super::*;

    #[test]
    fn reservation_names_keys_and_events() {
        assert_eq!(rtype_name(ReservationType::NONE), "none");
        assert_eq!(rtype_name(ReservationType::WRITE_EXCLUSIVE), "write-exclusive");
        assert_eq!(rtype_name(ReservationType::EXCLUSIVE_ACCESS_ALL_REGS), "exclusive-access-all-regs");
        assert_eq!(rtype_name(ReservationType(9)), "unknown (9)");
        assert_eq!(ResvType::ExclusiveAccessRegOnly.wire(), ReservationType::EXCLUSIVE_ACCESS_REG_ONLY);
        assert_eq!(ResvAction::PreemptAbort.name(), "preempt-abort");
        assert_eq!(parse_key("0xA1"), Ok(0xa1));
        assert_eq!(parse_copy_range("2048:8"), Ok((2048, 8)));
        for bad in ["2048", "2048:0", ":8", "1:x", "1:4294967296", "-1:2"] {
            assert!(parse_copy_range(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_key("161"), Ok(161));
        assert_eq!(parse_key("0xffffffffffffffff"), Ok(u64::MAX));
        assert!(parse_key("-1").is_err() && parse_key("0x").is_err());
        let n = |count, kind| ReservationNotification { count, kind, available: 0, nsid: 2 };
        let ev = ControllerEvent::Reservations(vec![
            n(1, NotificationType::RESERVATION_RELEASED),
            n(2, NotificationType::REGISTRATION_PREEMPTED),
        ]);
        assert_eq!(
            event_text(&ev),
            "reservation: reservation released on nsid 2 (count 1), registration preempted on nsid 2 (count 2)"
        );
        let j = event_json(&ev);
        assert_eq!(j["event"], "reservation");
        assert_eq!(j["notifications"][1], json!({ "count": 2, "type": "registration preempted", "nsid": 2 }));
    }

    #[test]
    fn socket_options_go_anywhere_on_the_command_line() {
        let cli = Cli::parse_args(["nvmeof", "list", "10.0.0.1", "--host-traddr", "10.0.0.2", "--tos", "8"])
            .unwrap();
        let o = cli.opts(1);
        assert_eq!((o.host_traddr, o.tos, o.host_iface), (Some("10.0.0.2".parse().unwrap()), Some(8), None));
        let cli = Cli::parse_args(["nvmeof", "--host-iface", "eth1", "discover", "10.0.0.1"]).unwrap();
        assert_eq!(discovery_options(&cli.opts(0)).host_iface.as_deref(), Some("eth1"));
    }
}
