//! `SO_PRIORITY` on every connection, as nvmet-tcp's and nvme-tcp's
//! `so_priority` module parameters set it (`sock_set_priority`): the
//! target's listener and each accepted queue socket carry `so_priority`
//! (`[limits]`), the initiator's queue sockets `ConnectOptions::so_priority`.
//! Both ends run in this process, so the sockets are found among its own
//! descriptors by their addresses and their option read back.

mod initiator_util;

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};

use initiator_util::*;
use nvmeof_initiator::{ConnectOptions, Controller};

/// (local, peer, SO_PRIORITY) of every TCP socket this process holds
/// (a listener's peer is `None`).
fn own_sockets() -> Vec<(SocketAddr, Option<SocketAddr>, u32)> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = e.file_name().to_string_lossy().parse::<RawFd>() else { continue };
        if !std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")) {
            continue;
        }
        // SAFETY: the descriptor is open (listed just now) and only borrowed here.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let s = socket2::SockRef::from(&fd);
        let Some(local) = s.local_addr().ok().and_then(|a| a.as_socket()) else { continue };
        let peer = s.peer_addr().ok().and_then(|a| a.as_socket());
        if let Ok(p) = nvmeof_net::priority(&fd) {
            v.push((local, peer, p));
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_ends_set_so_priority_on_every_queue() {
    bounded(30, async {
        let mut cfg = config(vec![ram_ns(1, 1 << 20)]);
        cfg.so_priority = 5;
        let (server, addr) = start(&cfg).await;
        let o = ConnectOptions { io_queues: 2, so_priority: Some(3), ..opts() };
        let c = Controller::connect(addr, SUBNQN, o).await.unwrap();
        let plain =
            Controller::connect(addr, SUBNQN, ConnectOptions { io_queues: 1, ..opts() }).await.unwrap();
        let socks = own_sockets();
        let listener: Vec<u32> = socks.iter().filter(|s| s.0 == addr && s.1.is_none()).map(|s| s.2).collect();
        assert_eq!(listener, [5], "the listener: {socks:?}");
        // The target's ends: every accepted socket of the port.
        let target: Vec<u32> = socks.iter().filter(|s| s.0 == addr && s.1.is_some()).map(|s| s.2).collect();
        assert_eq!(target, [5; 5], "admin + 2 I/O queues, admin + 1: {socks:?}");
        // The host's ends: 3 with the option, the other controller's 2 without.
        let mut host: Vec<u32> = socks.iter().filter(|s| s.1 == Some(addr)).map(|s| s.2).collect();
        host.sort();
        assert_eq!(host, [0, 0, 3, 3, 3], "{socks:?}");
        c.shutdown().await.unwrap();
        plain.shutdown().await.unwrap();
        server.shutdown(std::time::Duration::from_secs(1)).await;
    })
    .await
}
