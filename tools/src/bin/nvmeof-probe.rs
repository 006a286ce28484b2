//! `nvmeof-probe`: latency and throughput probe for NVMe/TCP targets.
//! See `nvmeof-probe --help` and tools/README.md.

// mimalloc: large (≥128 KiB) I/O buffers would otherwise go through glibc's
// mmap/munmap path and page-fault on every command.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use nvmeof_tools::probe::{Hooks, ProbeEvent, ProbeOptions};
use nvmeof_tools::report::{ping_line, progress_line};
use nvmeof_tools::ExitCode;

/// Verify mismatches printed as they happen (all are counted and listed in the report).
const MISMATCH_LINES: u64 = 20;

fn main() {
    let opts = ProbeOptions::parse();
    nvmeof_tools::init_logging();
    if let Err(e) = opts.validate() {
        eprintln!("nvmeof-probe: {e}");
        std::process::exit(ExitCode::Usage as i32);
    }
    let threads = opts.runtime_threads();
    let rt = if threads == 1 {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(threads).enable_all().build()
    }
    .expect("tokio runtime");
    let code = rt.block_on(run(opts));
    rt.shutdown_timeout(Duration::from_millis(100));
    std::process::exit(code);
}

async fn run(opts: ProbeOptions) -> i32 {
    let hooks = Hooks::default();
    let stop = hooks.stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("nvmeof-probe: interrupted, finishing (Ctrl-C again to abort)");
            stop.store(true, Ordering::Relaxed);
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    let planned = opts.time_limit().map(|t| t + opts.warmup);
    let show_progress = !opts.quiet && !opts.ping;
    let addr = opts.addr();
    let (nsid, json) = (opts.nsid, opts.json);
    let mismatches = Arc::new(AtomicU64::new(0));
    let printed = mismatches.clone();
    let reader_gone = hooks.stop.clone();
    let hooks = Hooks {
        on_event: Some(Arc::new(move |e: &ProbeEvent| match e {
            ProbeEvent::Warning(w) => eprintln!("nvmeof-probe: warning: {w}"),
            ProbeEvent::Progress(p) => {
                if show_progress && (planned.is_none_or(|t| t > Duration::from_secs(2)) || p.t > 2.0) {
                    eprintln!("{}", progress_line(p));
                }
            }
            ProbeEvent::Ping(p) => {
                let line = ping_line(&addr, nsid, p);
                if json {
                    eprintln!("{line}");
                } else if writeln!(std::io::stdout(), "{line}").is_err() {
                    // The reader went away (`| head`): end the run, as ioping
                    // does on SIGPIPE (println! panicked on the broken pipe).
                    reader_gone.store(true, Ordering::Relaxed);
                }
            }
            ProbeEvent::Mismatch(m) => {
                let n = printed.fetch_add(1, Ordering::Relaxed);
                if n < MISMATCH_LINES {
                    eprintln!("nvmeof-probe: {m}");
                } else if n == MISMATCH_LINES {
                    eprintln!("nvmeof-probe: more verify mismatches (see the report)");
                }
            }
        })),
        ..hooks
    };
    // The output files are written after the run: find out now, not after a long run, that they
    // cannot be.
    for (what, path) in [("HdrHistogram log", &opts.hdr_log), ("plot", &opts.plot)] {
        if let Some(p) = path {
            if let Err(e) = std::fs::File::create(p) {
                eprintln!("nvmeof-probe: cannot write the {what} {}: {e}", p.display());
                return ExitCode::Usage as i32;
            }
        }
    }
    let report = match nvmeof_tools::run_probe_with(&opts, hooks).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nvmeof-probe: {e}");
            return e.exit_code() as i32;
        }
    };
    let mut out = std::io::stdout().lock();
    let text = if opts.json {
        serde_json::to_string_pretty(&report.to_fio_json()).expect("serializable") + "\n"
    } else if opts.ping {
        report.ping_summary()
    } else {
        report.to_text()
    };
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
    let mut code = report.exit_code() as i32;
    if let Some(p) = &opts.hdr_log {
        if let Err(e) = nvmeof_tools::hdrlog::write_interval_log_file(&report, p) {
            eprintln!("nvmeof-probe: cannot write the HdrHistogram log {}: {e}", p.display());
            if code == 0 {
                code = ExitCode::Usage as i32;
            }
        }
    }
    if let Some(p) = &opts.plot {
        if let Err(e) = nvmeof_tools::plot::write_plot(&report, p) {
            eprintln!("nvmeof-probe: cannot write the plot {}: {e}", p.display());
            if code == 0 {
                code = ExitCode::Usage as i32;
            }
        }
    }
    if let Some(e) = &report.error {
        eprintln!("nvmeof-probe: {e}");
    }
    if mismatches.load(Ordering::Relaxed) > 0 {
        eprintln!("nvmeof-probe: verify failed: {} bad blocks", mismatches.load(Ordering::Relaxed));
    }
    code
}
