//! `nvmeof-target`: export files, block devices or RAM over NVMe/TCP.

// mimalloc: large (≥128 KiB) I/O buffers would otherwise go through glibc's
// mmap/munmap path and page-fault on every command.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use nvmeof_target::config::{
    default_listen, parse_size, IoEngine, NamespaceConfig, NamespaceSource, SubsystemConfig, TargetConfig,
    DEFAULT_MODEL,
};
use nvmeof_target::core::Limits;
use nvmeof_target::server::Server;

#[derive(Parser)]
#[command(name = "nvmeof-target", version, about = "User-space NVMe-over-TCP target")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Export namespaces (from flags, or from --config).
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML configuration (ports, subsystems, namespaces, allowed hosts); excludes the other export flags.
    #[arg(long, conflicts_with_all = ["file", "ram", "block", "listen", "nqn"])]
    config: Option<PathBuf>,
    /// Export this regular file (repeat for several namespaces).
    #[arg(long)]
    file: Vec<PathBuf>,
    /// Create (sparse) or grow each --file to this size, e.g. 10G.
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// Export a RAM namespace of this size (repeatable).
    #[arg(long, value_parser = parse_size)]
    ram: Vec<u64>,
    /// Export a block device (repeatable).
    #[arg(long)]
    block: Vec<PathBuf>,
    /// Listen address (repeatable); default 0.0.0.0:4420.
    #[arg(long)]
    listen: Vec<SocketAddr>,
    /// Subsystem NQN; default derived from the host name.
    #[arg(long)]
    nqn: Option<String>,
    /// Allow only this host NQN (repeatable); default any host.
    #[arg(long = "allow-host")]
    allow_host: Vec<String>,
    /// Logical block size of file and RAM namespaces.
    #[arg(long, default_value_t = 512)]
    block_size: u32,
    /// Busy-poll sockets for this many µs after activity (trades CPU for latency).
    #[arg(long)]
    poll_us: Option<u64>,
    /// Worker threads (cores) serving connections, 1 to 1024; default: one per CPU.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    threads: Option<u32>,
    /// I/O engine of file and block namespaces: threads, uring, or auto (io_uring
    /// if available, else threads); overrides the configuration file. Default: auto.
    #[arg(long)]
    io_engine: Option<IoEngine>,
    /// File namespaces through the page cache (true, the default) or with
    /// O_DIRECT where the filesystem allows it (false; io_uring engine only),
    /// like nvmet's buffered_io; overrides the configuration file. Block
    /// devices always use O_DIRECT.
    #[arg(long)]
    buffered_io: Option<bool>,
    /// Most in-capsule write data on I/O queues in bytes (IOCCSZ); larger writes
    /// use R2T. Default 131072; nvmet's default is 16384. Overrides the configuration file.
    #[arg(long)]
    in_capsule_data: Option<u32>,
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn config_from_flags(a: &ServeArgs) -> Result<TargetConfig, String> {
    let mut nss = Vec::new();
    for f in &a.file {
        nss.push(NamespaceConfig {
            nsid: None,
            source: NamespaceSource::File {
                path: f.clone(),
                size: a.size,
                io_engine: a.io_engine.unwrap_or(IoEngine::FILE_DEFAULT),
                buffered_io: true,
            },
            block_size: a.block_size,
        });
    }
    for r in &a.ram {
        nss.push(NamespaceConfig { nsid: None, source: NamespaceSource::Ram(*r), block_size: a.block_size });
    }
    for b in &a.block {
        let source = NamespaceSource::Block {
            path: b.clone(),
            io_engine: a.io_engine.unwrap_or(IoEngine::BLOCK_DEFAULT),
        };
        nss.push(NamespaceConfig { nsid: None, source, block_size: 512 });
    }
    if nss.is_empty() {
        return Err("nothing to export: give --file, --ram, --block or --config".into());
    }
    for ns in &nss {
        // The flags are the configuration keys: `block_size` is --block-size.
        ns.check_size().map_err(|(key, e)| format!("--{}: {e}", key.replace('_', "-")))?;
    }
    let nqn = a.nqn.clone().unwrap_or_else(|| format!("nqn.2026-11.io.nvmeof:{}", hostname()));
    nvmeof_common::spec::nqn::validate_lax(&nqn).map_err(|e| format!("--nqn: {e}"))?;
    Ok(TargetConfig {
        listen: if a.listen.is_empty() { vec![default_listen()] } else { a.listen.clone() },
        subsystems: vec![SubsystemConfig {
            nqn,
            model: DEFAULT_MODEL.into(),
            allowed_hosts: (!a.allow_host.is_empty()).then(|| a.allow_host.clone()),
            namespaces: nss,
        }],
        limits: Limits::default(),
        poll_us: a.poll_us.unwrap_or(0),
    })
}

fn print_host_commands(cfg: &TargetConfig, addrs: &[SocketAddr]) {
    for s in &cfg.subsystems {
        for a in addrs {
            let ip = if a.ip().is_unspecified() { "<this-host-ip>".to_string() } else { a.ip().to_string() };
            println!("On a Linux host (nvme-cli):");
            println!("  nvme discover -t tcp -a {ip} -s {}", a.port());
            println!("  nvme connect -t tcp -a {ip} -s {} -n {}", a.port(), s.nqn);
        }
    }
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let Cmd::Serve(args) = cli.cmd;
    let mut cfg = match &args.config {
        Some(p) => match TargetConfig::from_file(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("nvmeof-target: config {}: {e}", p.display());
                return std::process::ExitCode::from(2);
            }
        },
        None => match config_from_flags(&args) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("nvmeof-target: {e}");
                return std::process::ExitCode::from(2);
            }
        },
    };
    if let Some(p) = args.poll_us {
        cfg.poll_us = p;
    }
    if let Some(e) = args.io_engine {
        cfg.set_io_engine(e);
    }
    if let Some(b) = args.buffered_io {
        cfg.set_buffered_io(b);
    }
    if let Err(e) = cfg.check_engines() {
        eprintln!("nvmeof-target: {e}");
        return std::process::ExitCode::from(2);
    }
    if let Some(v) = args.in_capsule_data {
        if let Err(e) = cfg.limits.set_in_capsule_data(v) {
            eprintln!("nvmeof-target: --in-capsule-data: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = args.threads {
        rt.worker_threads(n as usize);
    }
    let rt = rt.thread_name("nvmeof-target").enable_all().build().expect("tokio runtime");
    rt.block_on(async move {
        let server = match Server::start(&cfg).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("nvmeof-target: {e}");
                return std::process::ExitCode::from(1);
            }
        };
        print_host_commands(&cfg, &server.local_addrs);
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
                _ = hup.recv() => {
                    // Reload the configuration file: add/remove/resize namespaces live.
                    let Some(path) = &args.config else {
                        tracing::warn!("SIGHUP ignored: no --config file to reload");
                        continue;
                    };
                    match TargetConfig::from_file(path).map_err(|e| e.to_string())
                        .and_then(|c| server.reload(&c).map_err(|e| e.to_string())) {
                        Ok(()) => tracing::info!(config = %path.display(), "configuration reloaded"),
                        Err(e) => tracing::error!(error = %e, "reload failed; keeping the running configuration"),
                    }
                }
            }
        }
        tracing::info!("signal received: stopping");
        server.shutdown(Duration::from_secs(10)).await;
        std::process::ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Result<TargetConfig, String> {
        let cli =
            Cli::try_parse_from(["nvmeof-target", "serve"].iter().chain(args)).map_err(|e| e.to_string())?;
        let Cmd::Serve(a) = cli.cmd;
        config_from_flags(&a)
    }

    #[test]
    fn flags_are_checked_like_the_configuration_file() {
        assert!(flags(&["--ram", "1M", "--block-size", "4096", "--threads", "2"]).is_ok());
        // Identify Namespace gives the block size as log2: 1000 cannot be described.
        let e = flags(&["--ram", "1M", "--block-size", "1000"]).unwrap_err();
        assert!(e.contains("--block-size") && e.contains("512, 1024, 2048 or 4096"), "{e}");
        let e = flags(&["--file", "/nonexistent/x", "--block-size", "8192"]).unwrap_err();
        assert!(e.contains("--block-size"), "{e}");
        let e = flags(&["--ram", "0"]).unwrap_err();
        assert!(e.contains("--ram") && e.contains("smaller than one 512-byte block"), "{e}");
        for t in ["0", "1025"] {
            let e = flags(&["--ram", "1M", "--threads", t]).unwrap_err();
            assert!(e.contains("--threads"), "{t}: {e}");
        }
    }
}
