//! Initiator discovery against a target whose discovery log lies: a proxy
//! rewrites the 20-byte header reads (`Controller::discovery_log` reads the
//! header alone, like libnvme) on their way to the host.

mod initiator_util;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::common::Status;
use nvmeof_initiator::{discover, ConnectOptions, Error};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the proxy rewrites a discovery log header (GENCTR at 0, NUMREC at 8).
#[derive(Clone, Copy)]
enum Lie {
    /// A new GENCTR on every read.
    GenctrMoves,
    /// This NUMREC.
    Numrec(u64),
}

/// Forwards to `upstream`; C2HData PDUs of exactly 20 bytes at offset 0
/// (discovery log header reads) are rewritten per `lie`. No digests.
async fn lying_proxy(upstream: SocketAddr, lie: Lie) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicU64::new(1000));
    tokio::spawn(async move {
        while let Ok((down, _)) = l.accept().await {
            let n = n.clone();
            tokio::spawn(async move {
                let Ok(up) = TcpStream::connect(upstream).await else { return };
                let (mut dr, mut dw) = down.into_split();
                let (mut ur, mut uw) = up.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut dr, &mut uw).await;
                });
                let mut icresp = [0u8; 128];
                if ur.read_exact(&mut icresp).await.is_err() || dw.write_all(&icresp).await.is_err() {
                    return;
                }
                loop {
                    let mut ch = [0u8; 8];
                    if ur.read_exact(&mut ch).await.is_err() {
                        return;
                    }
                    let plen = u32::from_le_bytes(ch[4..8].try_into().unwrap()) as usize;
                    let mut pdu = ch.to_vec();
                    pdu.resize(plen.max(8), 0);
                    if ur.read_exact(&mut pdu[8..]).await.is_err() {
                        return;
                    }
                    let pdo = pdu[3] as usize;
                    let datao = u32::from_le_bytes(pdu[12..16].try_into().unwrap());
                    let datal = u32::from_le_bytes(pdu[16..20].try_into().unwrap());
                    if pdu[0] == 0x07 && datao == 0 && datal == 20 && pdu.len() >= pdo + 20 {
                        let h = &mut pdu[pdo..pdo + 20];
                        match lie {
                            Lie::GenctrMoves => {
                                h[0..8].copy_from_slice(&n.fetch_add(1, Ordering::Relaxed).to_le_bytes())
                            }
                            Lie::Numrec(x) => h[8..16].copy_from_slice(&x.to_le_bytes()),
                        }
                    }
                    if dw.write_all(&pdu).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

fn disc_opts() -> ConnectOptions {
    ConnectOptions {
        host: Some(host()),
        command_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        ..ConnectOptions::discovery()
    }
}

/// GENCTR that never settles: a bounded number of retries, then an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_log_whose_genctr_keeps_moving_is_an_error() {
    bounded(20, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        let proxy = lying_proxy(addr, Lie::GenctrMoves).await;
        match discover(proxy, disc_opts()).await {
            Err(Error::Controller(m)) => assert!(m.contains("GENCTR"), "{m}"),
            other => panic!("{other:?}"),
        }
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// NUMREC far beyond anything real: an error before any allocation for it;
/// NUMREC beyond what the target has: zero-filled records or the target's
/// error, no panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_log_with_a_lying_numrec() {
    bounded(20, async {
        let (server, addr) = start(&config(vec![ram_ns(1, 1 << 20)])).await;
        for numrec in [u64::MAX, 1 << 40, (1 << 16) + 1] {
            let proxy = lying_proxy(addr, Lie::Numrec(numrec)).await;
            match discover(proxy, disc_opts()).await {
                Err(Error::Controller(m)) => assert!(m.contains("records"), "{m}"),
                other => panic!("NUMREC {numrec}: {other:?}"),
            }
        }
        // One record more than the log has: read in one piece, zero filled.
        let proxy = lying_proxy(addr, Lie::Numrec(3)).await;
        let log = discover(proxy, disc_opts()).await.unwrap();
        assert_eq!(log.entries.len(), 3);
        assert_eq!(log.entries[1].subnqn, SUBNQN);
        assert!(log.entries[2].subnqn.is_empty() && log.entries[2].traddr.is_empty());
        // Past the 4 KiB read: an LPO beyond the log is refused (Invalid Field).
        let proxy = lying_proxy(addr, Lie::Numrec(8)).await;
        match discover(proxy, disc_opts()).await {
            Err(Error::Nvme { status, .. }) => assert_eq!(status.code(), Status::INVALID_FIELD.code()),
            other => panic!("{other:?}"),
        }
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}
