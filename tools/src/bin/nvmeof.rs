//! `nvmeof`: NVMe/TCP admin CLI (discover, identify, list, ana-log, events, read, write, gen-dhchap-key).
//! See `nvmeof --help` and tools/README.md for the exit codes.

// mimalloc: large (≥128 KiB) I/O buffers would otherwise go through glibc's
// mmap/munmap path and page-fault on every command.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use nvmeof_tools::admin::{run, Cli};

fn main() {
    let cli = Cli::parse();
    nvmeof_tools::init_logging();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let r = rt.block_on(async {
        let mut stdin = std::io::stdin().lock();
        let mut stdout = std::io::stdout().lock();
        run(&cli, &mut stdin, &mut stdout).await
    });
    if let Err(e) = r {
        if e.kind == nvmeof_tools::error::ErrorKind::OutputClosed {
            return;
        }
        eprintln!("nvmeof: {e}");
        std::process::exit(e.exit_code() as i32);
    }
}
