//! `interop_statuses`: the rows of [`nvmeof_tests::conformance`] (commands a
//! host can get wrong) against the Linux kernel target of the interop suite
//! (`tests/interop/run.sh kernel-target`, client `statuses`), checking the
//! status nvmet answers each with. `tests/tests/target_conformance.rs` runs
//! the same rows against our target.
//!
//! Configuration (environment): `NVME_ADDR` (default 127.0.0.1), `NVME_PORT`
//! (default 4420), `NVME_NQN` (required; namespace 1 must exist and any host
//! be allowed), `NVME_BACKEND` (`brd` or `file`: what backs nvmet's namespace).
//!
//! Prints one line per row (`ok` or `FAIL`, what came, what was wanted), then
//! `interop_statuses: N passed, M failed`. Exit status: 0 if every row
//! passed, 1 if one failed, 2 for usage errors.

use std::net::{IpAddr, SocketAddr};

use nvmeof_tests::conformance::{Conformance, Peer};

fn usage(msg: &str) -> ! {
    eprintln!("interop_statuses: {msg}\nusage: NVME_NQN=NQN [NVME_ADDR=IP] [NVME_PORT=PORT] [NVME_BACKEND=brd|file] interop_statuses");
    std::process::exit(2);
}

fn main() {
    if std::env::args().len() > 1 {
        usage("takes no arguments (configuration comes from the environment)");
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let ip: IpAddr = env("NVME_ADDR")
        .unwrap_or_else(|| "127.0.0.1".into())
        .parse()
        .unwrap_or_else(|_| usage("NVME_ADDR is not an IP address"));
    let port: u16 = env("NVME_PORT")
        .unwrap_or_else(|| "4420".into())
        .parse()
        .unwrap_or_else(|_| usage("NVME_PORT is not a port"));
    let nqn = env("NVME_NQN").unwrap_or_else(|| usage("NVME_NQN is required"));
    let peer = match env("NVME_BACKEND").as_deref() {
        None | Some("brd") => Peer::Nvmet { file: false },
        Some("file") => Peer::Nvmet { file: true },
        Some(b) => usage(&format!("NVME_BACKEND {b:?}: brd or file")),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let rows = rt.block_on(async {
        tokio::time::timeout(
            std::time::Duration::from_secs(60),
            Conformance::new(SocketAddr::new(ip, port), &nqn, peer).run(),
        )
        .await
        .unwrap_or_else(|_| {
            eprintln!("interop_statuses: the rows did not finish within 60 s");
            std::process::exit(1);
        })
    });
    let failed = rows.iter().filter(|r| !r.passed()).count();
    for r in &rows {
        println!("{r}");
    }
    println!("interop_statuses: {} passed, {failed} failed", rows.len() - failed);
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
