//! File namespaces (io_uring and worker threads) under I/O from many queues
//! while SIGHUP-style reloads shrink, grow, remove and re-add them: every
//! command completes (no hang) with success or the status the change
//! explains, and acknowledged data below the smallest size survives.

mod initiator_util;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::common::Status;
use nvmeof_initiator::{Controller, Error, IoFlags};
use nvmeof_target::config::IoEngine;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const MIB: u64 = 1 << 20;
/// The smallest size a reload gives the namespaces.
const SMALL: u64 = 2 * MIB;
const BIG: u64 = 8 * MIB;
/// Blocks of 4 KiB each writer owns below `SMALL` (verified at the end).
const OWNED: u64 = 32;
const WRITERS: u64 = 8;

/// Whether `e` is what a shrink (LBA Out of Range) or a removal (Invalid
/// Namespace) explains.
fn explained(e: &Error) -> bool {
    let s = e.status().map(|s| s.code());
    s == Some(Status::LBA_RANGE) || s == Some(Status::INVALID_NS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_during_resizes_and_removals() {
    bounded(60, async {
        let dir = std::env::temp_dir();
        let pid = std::process::id();
        let paths: Vec<PathBuf> = (1..=2).map(|n| dir.join(format!("nvmeof-lifecycle-{pid}-{n}"))).collect();
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
        let cfg_for = |size: u64, with_1: bool, with_2: bool| {
            let mut nss = Vec::new();
            if with_1 {
                nss.push(file_ns(1, &paths[0], Some(size), IoEngine::Auto));
            }
            if with_2 {
                nss.push(file_ns(2, &paths[1], Some(size), IoEngine::Threads));
            }
            config(nss)
        };
        let (server, addr) = start(&cfg_for(BIG, true, true)).await;
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for nsid in [1u32, 2] {
            let ns = ctrl.namespace(nsid).await.unwrap();
            for w in 0..WRITERS {
                let (ns, stop) = (ns.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    let mut rng = StdRng::seed_from_u64(nsid as u64 * 100 + w);
                    let mut last = vec![None::<u8>; OWNED as usize];
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let blk4k = if rng.gen_bool(0.5) {
                            // Owned, below the smallest size.
                            w * OWNED + rng.gen_range(0..OWNED)
                        } else {
                            // Anywhere up to the largest size (may be cut off).
                            SMALL / 4096 + rng.gen_range(0..(BIG - SMALL) / 4096)
                        };
                        let lba = blk4k * 8;
                        let fill = (n % 251) as u8 + 1;
                        let op = rng.gen_range(0..10);
                        let r = match op {
                            0..=5 => {
                                let flags = if op == 0 { IoFlags::FUA } else { IoFlags::default() };
                                let r = ns.write_with(lba, &[fill; 4096], flags).await;
                                if r.is_ok() && blk4k < SMALL / 4096 {
                                    last[(blk4k - w * OWNED) as usize] = Some(fill);
                                }
                                r
                            }
                            6..=8 => {
                                let mut buf = vec![0u8; 4096];
                                let r = ns.read(lba, &mut buf).await;
                                if r.is_ok() && blk4k < SMALL / 4096 {
                                    if let Some(f) = last[(blk4k - w * OWNED) as usize] {
                                        assert!(buf.iter().all(|&x| x == f), "ns {nsid} block {blk4k}");
                                    }
                                }
                                r
                            }
                            _ => ns.flush().await,
                        };
                        match r {
                            Ok(()) => {}
                            Err(e) if explained(&e) => {}
                            Err(e) => panic!("ns {nsid} op {op} lba {lba}: {e}"),
                        }
                    }
                    (nsid, w, last, n)
                }));
            }
        }
        // Reloads while the I/O runs.
        for round in 0..12 {
            tokio::time::sleep(Duration::from_millis(60)).await;
            let size = if round % 2 == 0 { SMALL } else { BIG };
            // Namespace 1 (io_uring) goes away in rounds 4 and 8, 2 (threads) in 2, 6 and 10.
            server.reload(&cfg_for(size, round % 4 != 0 || round == 0, round % 4 != 2)).unwrap();
        }
        server.reload(&cfg_for(BIG, true, true)).unwrap();
        stop.store(true, Ordering::Relaxed);
        let mut total = 0;
        for t in tasks {
            let (nsid, w, last, n) = t.await.unwrap();
            total += n;
            let ns = ctrl.namespace(nsid).await.unwrap();
            for (i, f) in last.iter().enumerate() {
                let Some(f) = f else { continue };
                let blk4k = w * OWNED + i as u64;
                let mut buf = vec![0u8; 4096];
                ns.read(blk4k * 8, &mut buf).await.unwrap();
                // Both were removed and re-added: same file, same data.
                assert!(buf.iter().all(|&x| x == *f), "ns {nsid} block {blk4k} lost an acknowledged write");
            }
        }
        eprintln!("{total} commands");
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
    })
    .await;
}

/// Operations the io_uring backend resubmits on a queue's own ring finish
/// before the queue sleeps: a Read of blocks the file lost behind the
/// target's back (the rest of a short read, then end of file: Internal
/// Error), and a Write Zeroes without DEAC on tmpfs, which has no
/// FALLOC_FL_ZERO_RANGE (the backend falls back to writing zeroes). Both
/// used to wait in the ring unsubmitted until the host's timeout, once the
/// queue had nothing else to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uring_queue_ring_finishes_resubmitted_operations() {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    bounded(30, async {
        let path = dir.join(format!("nvmeof-resubmit-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let (server, addr) = start(&config(vec![file_ns(1, &path, Some(4 * MIB), IoEngine::Auto)])).await;
        // A short timeout: a hang shows as Timeout.
        let mut o = opts();
        o.command_timeout = Duration::from_secs(5);
        let ctrl = Controller::connect(addr, SUBNQN, o).await.unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let bs = ns.block_size() as u64;
        let fill = vec![0x5Au8; (MIB / 2) as usize];
        ns.write(0, &fill).await.unwrap();
        ns.write(MIB / bs, &fill).await.unwrap();
        // Write Zeroes without DEAC over 64 KiB of the written data.
        ns.write_zeroes(16, 64 * 1024 / bs, false, IoFlags::default()).await.unwrap();
        let mut back = vec![0u8; 128 * 1024];
        ns.read(0, &mut back).await.unwrap();
        let (head, rest) = back.split_at(16 * bs as usize);
        assert!(head.iter().all(|&x| x == 0x5A));
        assert!(rest[..64 * 1024].iter().all(|&x| x == 0), "not zeroed");
        assert!(rest[64 * 1024..].iter().all(|&x| x == 0x5A), "zeroed too much");
        // The file loses all but its first MiB; a read across that end.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(MIB).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let r = ns.read(MIB / bs - 8, &mut buf).await;
        match r {
            Err(Error::Nvme { status, .. }) => assert_eq!(status.without_more(), Status::INTERNAL.with_dnr()),
            other => panic!("read across the file's new end: {other:?}"),
        }
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
        let _ = std::fs::remove_file(&path);
    })
    .await;
}
