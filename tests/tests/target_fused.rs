//! Fused Compare and Write (NVMe Base 2.0 §3.4.2; SPDK's statuses, as
//! nvmet has none): the target pairs a Compare sent as the first command of
//! a fused operation with the Write after it, writes only when the blocks
//! match, completes the Compare first, answers every broken pairing with
//! the spec's statuses, and runs the operations of one namespace one after
//! another from all queues, so concurrent compare-and-swap loops never both
//! win.

mod initiator_util;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use initiator_util::{bounded, every_backend, opts, start};
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::pdu::Pdu;
use nvmeof_common::spec::identify::Cns;
use nvmeof_common::spec::IdentifyController;
use nvmeof_common::{SglDescriptor, Sqe, Status};
use nvmeof_initiator::{Controller, Error, IoFlags};
use nvmeof_target::config::TargetConfig;
use nvmeof_target::core::Namespace;
use nvmeof_tests::harness::{admin_queue, default_config, io_queue, pattern, setup, SUBNQN};
use nvmeof_tests::raw_client::RawClient;
use nvmeof_tests::slow_backend::SlowBackend;

const BS: u32 = 512;
const FIRST: u8 = 0x41;
const SECOND: u8 = 0x42;

fn fused(op: IoOpcode, flags: u8, nsid: u32, lba: u64, nlb: u32) -> Sqe {
    let mut s = RawClient::rw_sqe(op, nsid, lba, nlb);
    s.set_flags(flags);
    s
}

/// Sends a fused Compare and Write of `expected` → `new` at `lba` (the
/// Compare through R2T when `compare_r2t`, the Write when `write_r2t`);
/// returns the statuses of the Compare and the Write.
async fn compare_and_write(
    io: &mut RawClient,
    nsid: u32,
    lba: u64,
    expected: &[u8],
    new: &[u8],
    (compare_r2t, write_r2t): (bool, bool),
) -> (Status, Status) {
    let nlb = (expected.len() / BS as usize) as u32;
    let c = fused(IoOpcode::COMPARE, FIRST, nsid, lba, nlb);
    let c = io.start_write(c, Bytes::copy_from_slice(expected), compare_r2t).await;
    let w = fused(IoOpcode::WRITE, SECOND, nsid, lba, (new.len() / BS as usize) as u32);
    let w = io.start_write(w, Bytes::copy_from_slice(new), write_r2t).await;
    let cs = io.wait(c).await.status().without_more();
    let ws = io.wait(w).await.status().without_more();
    (cs, ws)
}

/// The harness's subsystem with namespaces 1 (RAM), 2 (a file through
/// threads) and 3 (a file through io_uring where the kernel has it), 1 MiB each.
fn backends(name: &str) -> (TargetConfig, Vec<std::path::PathBuf>) {
    let (every, paths) = every_backend(name, 1 << 20);
    let mut cfg = default_config();
    cfg.subsystems[0].namespaces = every.subsystems[0].namespaces.clone();
    (cfg, paths)
}

async fn read(io: &mut RawClient, nsid: u32, lba: u64, nlb: u32) -> Vec<u8> {
    io.read(nsid, lba, nlb, BS).await.ok().data
}

/// On every backend (RAM; a file through threads and through io_uring):
/// a match writes, a miscompare is Compare Failure on the Compare and
/// Failed Fused Command on the Write and writes nothing, through in-capsule
/// data and R2T, in either order of the two commands' data; the identify
/// data says Compare and Write is supported (FUSES bit 0, ACWU 0 as SPDK).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_write_writes_only_on_match_on_every_backend() {
    bounded(60, async {
        let (cfg, paths) = backends("nvmeof-fused");
        let (_server, addr) = start(&cfg).await;
        let mut admin = admin_queue(addr, SUBNQN).await;
        let id = IdentifyController::decode(&admin.identify(Cns::CTRL, 0).await.ok().data).unwrap();
        assert_eq!((id.fuses & 1, id.acwu), (1, 0), "FUSES bit 0: Compare and Write; ACWU 0");
        let mut io = io_queue(addr, admin.cntlid, 1, 8192).await;
        let miscompare = (Status::COMPARE_FAILED.with_dnr(), Status::ABORTED_FAILED_FUSED.with_dnr());
        for nsid in 1..=3u32 {
            let (a, b, c) = (pattern(512, nsid as u64), pattern(512, 10 + nsid as u64), pattern(512, 20));
            io.write(nsid, 10, &a, BS).await.ok();
            assert_eq!(
                compare_and_write(&mut io, nsid, 10, &a, &b, (false, false)).await,
                (Status::SUCCESS, Status::SUCCESS)
            );
            assert_eq!(read(&mut io, nsid, 10, 1).await, b, "nsid {nsid}: a match writes");
            // `a` is stale now.
            assert_eq!(compare_and_write(&mut io, nsid, 10, &a, &c, (false, false)).await, miscompare);
            assert_eq!(read(&mut io, nsid, 10, 1).await, b, "nsid {nsid}: a miscompare writes nothing");
            // 16 KiB through R2T, either half, and both.
            let big_a = pattern(16384, 30 + nsid as u64);
            let big_b = pattern(16384, 40 + nsid as u64);
            io.write(nsid, 64, &big_a, BS).await.ok();
            for (i, r2t) in [(true, false), (false, true), (true, true)].into_iter().enumerate() {
                let (old, new) = if i % 2 == 0 { (&big_a, &big_b) } else { (&big_b, &big_a) };
                assert_eq!(
                    compare_and_write(&mut io, nsid, 64, old, new, r2t).await,
                    (Status::SUCCESS, Status::SUCCESS),
                    "nsid {nsid}, R2T {r2t:?}"
                );
                assert_eq!(&read(&mut io, nsid, 64, 32).await, new);
            }
            let now = read(&mut io, nsid, 64, 32).await;
            let mut other = now.clone();
            other[16383] ^= 1;
            // One byte off in the last block: no write.
            assert_eq!(compare_and_write(&mut io, nsid, 64, &other, &big_a, (true, true)).await, miscompare);
            assert_eq!(read(&mut io, nsid, 64, 32).await, now);
        }
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
    })
    .await;
}

/// Receives the next two capsule responses: (CID, status) in the order sent.
async fn two_responses(io: &mut RawClient) -> Vec<(u16, Status)> {
    let mut got = Vec::new();
    while got.len() < 2 {
        match io.recv_pdu_within(Duration::from_secs(5)).await.expect("a response") {
            Pdu::CapsuleResp(r) => got.push((r.cqe.cid, r.cqe.status.without_more())),
            other => panic!("unexpected PDU {:?}", other.pdu_type()),
        }
    }
    got
}

/// The Compare completes before the Write (as SPDK sends them), whether
/// the pair succeeds or not.
#[tokio::test]
async fn the_compare_completes_first() {
    bounded(30, async {
        let mut s = setup(&default_config()).await;
        let a = Bytes::from(pattern(512, 1));
        s.io.write(1, 0, &a, BS).await.ok();
        for (expected, want) in [
            (a.clone(), (Status::SUCCESS, Status::SUCCESS)),
            (
                Bytes::from(pattern(512, 2)),
                (Status::COMPARE_FAILED.with_dnr(), Status::ABORTED_FAILED_FUSED.with_dnr()),
            ),
        ] {
            let mut c = fused(IoOpcode::COMPARE, FIRST, 1, 0, 1);
            c.set_sgl(SglDescriptor::in_capsule(512)).set_cid(100);
            let mut w = fused(IoOpcode::WRITE, SECOND, 1, 0, 1);
            w.set_sgl(SglDescriptor::in_capsule(512)).set_cid(101);
            let mut bytes =
                s.io.encode(&Pdu::CapsuleCmd(nvmeof_common::pdu::CapsuleCmd { sqe: c, data: expected }));
            bytes.extend(
                s.io.encode(&Pdu::CapsuleCmd(nvmeof_common::pdu::CapsuleCmd { sqe: w, data: a.clone() })),
            );
            // Both capsules in one segment, as a host sends a pair.
            s.io.send_raw(&bytes).await;
            assert_eq!(two_responses(&mut s.io).await, vec![(100, want.0), (101, want.1)]);
        }
    })
    .await;
}

/// Broken pairs get the statuses SPDK gives them, nothing is written by
/// them, and the queue goes on: a second without a first is Missing Fused
/// Command; a first followed by another command is aborted with it (the
/// other command runs); a second that is no Write is Invalid Opcode (its
/// first aborted); a first that is no Compare is Invalid Opcode and the
/// second after it Failed Fused Command; a new first aborts the waiting
/// one; a pair on different blocks is Invalid Field on the Compare; a half
/// refused for its range fails the other with Failed Fused Command; fused
/// commands on the admin queue and FUSE 11b are Invalid Field.
#[tokio::test]
async fn broken_pairs_get_the_spec_statuses() {
    bounded(30, async {
        let mut s = setup(&default_config()).await;
        let io = &mut s.io;
        let a = pattern(512, 3);
        let b = Bytes::from(pattern(512, 4));
        io.write(1, 5, &a, BS).await.ok();
        let missing = Status::ABORTED_MISSING_FUSED.with_dnr();
        let failed = Status::ABORTED_FAILED_FUSED.with_dnr();
        let compare = |lba| fused(IoOpcode::COMPARE, FIRST, 1, lba, 1);
        let write = |lba| fused(IoOpcode::WRITE, SECOND, 1, lba, 1);
        let a_bytes = Bytes::from(a.clone());

        // A second alone.
        io.submit(write(5), Some(b.clone())).await.expect_status(missing);
        // A first, then a plain Read, which runs.
        let c = io.start_write(compare(5), a_bytes.clone(), false).await;
        let r = io.read(1, 5, 1, BS).await.ok().data;
        assert_eq!(r, a);
        io.wait(c).await.expect_status(missing);
        // A first, then a second that is a Read.
        let c = io.start_write(compare(5), a_bytes.clone(), false).await;
        let mut rd = fused(IoOpcode::READ, SECOND, 1, 5, 1);
        rd.set_sgl(SglDescriptor::transport(512));
        let rd = io.start(rd).await;
        io.wait(c).await.expect_status(missing);
        io.wait(rd).await.expect_status(Status::INVALID_OPCODE);
        // A first that is a Write, then a second.
        let mut w1 = fused(IoOpcode::WRITE, FIRST, 1, 5, 1);
        w1.set_fua(false);
        io.submit(w1, Some(b.clone())).await.expect_status(Status::INVALID_OPCODE);
        io.submit(write(5), Some(b.clone())).await.expect_status(failed);
        // Two firsts: the second first pairs with the Write (through R2T, the
        // aborted one's data still arriving when it is aborted).
        let c1 = io.start_write(compare(5), a_bytes.clone(), true).await;
        let (c2, w) = (
            io.start_write(compare(5), a_bytes.clone(), false).await,
            io.start_write(write(5), b.clone(), false).await,
        );
        io.wait(c1).await.expect_status(missing);
        io.wait(c2).await.ok();
        io.wait(w).await.ok();
        assert_eq!(read(io, 1, 5, 1).await, b);
        // Different blocks: Invalid Field on the Compare.
        io.write(1, 6, &a, BS).await.ok();
        let c = io.start_write(compare(5), b.clone(), false).await;
        let w = io.start_write(write(6), a_bytes.clone(), false).await;
        io.wait(c).await.expect_status(Status::INVALID_FIELD);
        io.wait(w).await.expect_status(failed);
        // A Compare past the namespace, then its second.
        let end = nvmeof_tests::harness::NS1_SIZE / BS as u64;
        io.submit(compare(end), Some(a_bytes.clone())).await.expect_status(Status::LBA_RANGE);
        io.submit(write(end), Some(b.clone())).await.expect_status(failed);
        // A Write past the namespace aborts its waiting Compare.
        let c = io.start_write(compare(5), b.clone(), false).await;
        let w = io.start_write(write(end), a_bytes.clone(), false).await;
        io.wait(w).await.expect_status(Status::LBA_RANGE);
        io.wait(c).await.expect_status(failed);
        assert_eq!(read(io, 1, 5, 1).await, b, "no broken pair wrote");
        assert_eq!(read(io, 1, 6, 1).await, a);
        // FUSE 11b.
        let mut bad = compare(5);
        bad.set_flags(0x43);
        io.submit(bad, Some(b.clone())).await.expect_status(Status::INVALID_FIELD);
        // Fused on the admin queue.
        let mut ka = Sqe::new(0x18);
        ka.set_flags(FIRST);
        s.admin.submit_no_data(ka).await.expect_status(Status::INVALID_FIELD);
        // Still healthy.
        assert_eq!(
            compare_and_write(&mut s.io, 1, 5, &b, &a, (false, false)).await,
            (Status::SUCCESS, Status::SUCCESS)
        );
        assert_eq!(read(&mut s.io, 1, 5, 1).await, a);
    })
    .await;
}

/// Compare-and-swap loops on one block from four queues (two controllers)
/// on a file backend: every queue reads the counter and swaps in counter +
/// 1, retrying on a miscompare. Were two Compare and Writes to interleave,
/// both would win with the same value; the counter ends at exactly the
/// number of wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_compare_and_writes_never_both_win() {
    bounded(120, async {
        let (cfg, paths) = backends("nvmeof-fused-race");
        let (_server, addr) = start(&cfg).await;
        const QUEUES: usize = 4;
        const WINS: u64 = 60;
        let mut tasks = Vec::new();
        let block = |n: u64| {
            let mut b = vec![0u8; 512];
            b[..8].copy_from_slice(&n.to_le_bytes());
            b
        };
        let mut admins = Vec::new();
        for i in 0..QUEUES {
            if i % 2 == 0 {
                admins.push(admin_queue(addr, SUBNQN).await);
            }
            let cntlid = admins.last().unwrap().cntlid;
            let mut io = io_queue(addr, cntlid, 1 + (i % 2) as u16, 8192).await;
            tasks.push(tokio::spawn(async move {
                let (mut wins, mut misses) = (0u64, 0u64);
                // Bounded: at most 50 tries per win.
                for _ in 0..WINS * 50 {
                    if wins == WINS {
                        break;
                    }
                    let now = read(&mut io, 2, 7, 1).await;
                    let n = u64::from_le_bytes(now[..8].try_into().unwrap());
                    match compare_and_write(&mut io, 2, 7, &now, &block(n + 1), (false, false)).await {
                        (s, w) if s.is_success() && w.is_success() => wins += 1,
                        (s, _) => {
                            assert_eq!(s, Status::COMPARE_FAILED.with_dnr());
                            misses += 1;
                        }
                    }
                }
                (wins, misses)
            }));
        }
        let mut wins = 0;
        let mut misses = 0;
        for t in tasks {
            let (w, m) = t.await.unwrap();
            wins += w;
            misses += m;
        }
        let mut admin = admins.pop().unwrap();
        let mut io = io_queue(addr, admin.cntlid, 3, 8192).await;
        let end = u64::from_le_bytes(read(&mut io, 2, 7, 1).await[..8].try_into().unwrap());
        assert_eq!(wins, WINS * QUEUES as u64, "every queue won its share");
        assert_eq!(end, wins, "the counter counts every win once ({misses} miscompares)");
        let _ = admin.keep_alive().await;
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
    })
    .await;
}

/// A queue closed in the middle of a Compare and Write (its read in flight
/// on a slow backend) lets go of the namespace's lock: another queue's
/// Compare and Write runs.
#[tokio::test]
async fn a_closed_queue_lets_go_of_the_lock() {
    bounded(30, async {
        let s = setup(&default_config()).await;
        let slow = Arc::new(SlowBackend::new(1 << 20, 512, Duration::from_millis(300)));
        s.server.target.subsystem(SUBNQN).unwrap().add_namespace(Arc::new(Namespace::new(
            SUBNQN,
            2,
            slow.clone(),
        )));
        let mut io = s.io;
        let zero = vec![0u8; 512];
        let one = pattern(512, 9);
        let c =
            io.start_write(fused(IoOpcode::COMPARE, FIRST, 2, 0, 1), Bytes::from(zero.clone()), false).await;
        let w =
            io.start_write(fused(IoOpcode::WRITE, SECOND, 2, 0, 1), Bytes::from(one.clone()), false).await;
        let _ = (c, w);
        // Its read is in flight: the lock is held.
        let t = std::time::Instant::now();
        while slow.submitted() == 0 && t.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(slow.submitted(), 1);
        drop(io);
        let mut other = io_queue(s.addr, s.admin.cntlid, 2, 8192).await;
        // The closed queue's pair may have written before the target saw
        // the connection go: either way this one runs, and does not wait
        // for ever on the lock (the test's bound).
        let (cs, ws) = compare_and_write(&mut other, 2, 0, &zero, &one, (false, false)).await;
        let miscompare = (Status::COMPARE_FAILED.with_dnr(), Status::ABORTED_FAILED_FUSED.with_dnr());
        assert!((cs.is_success() && ws.is_success()) || (cs, ws) == miscompare, "{cs} {ws}");
        assert_eq!(read(&mut other, 2, 0, 1).await, one);
        let two = pattern(512, 10);
        let (cs, ws) = compare_and_write(&mut other, 2, 0, &one, &two, (false, false)).await;
        assert!(cs.is_success() && ws.is_success(), "{cs} {ws}");
    })
    .await;
}

/// The initiator's `Namespace::compare_and_write` over its four queues:
/// compare-and-swap loops from eight tasks count exactly their wins on
/// each backend; a miscompare is `Ok(false)` and writes nothing; lengths
/// that differ, or past one command, are refused before anything is sent;
/// an LBA past the namespace is the Compare's LBA Out of Range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initiator_compare_and_write_counts_every_win() {
    bounded(120, async {
        let (cfg, paths) = every_backend("nvmeof-fused-init", 1 << 20);
        let (_server, addr) = start(&cfg).await;
        let ctrl = Controller::connect(addr, initiator_util::SUBNQN, opts()).await.unwrap();
        assert_eq!(ctrl.io_queue_count(), 4);
        for nsid in 1..=3u32 {
            let ns = ctrl.namespace(nsid).await.unwrap();
            let counter = |n: u64| {
                let mut b = vec![0u8; 512];
                b[..8].copy_from_slice(&n.to_le_bytes());
                b
            };
            ns.write(3, &counter(0)).await.unwrap();
            const TASKS: u64 = 8;
            const WINS: u64 = 25;
            let mut tasks = Vec::new();
            for _ in 0..TASKS {
                let ns = ns.clone();
                tasks.push(tokio::spawn(async move {
                    let (mut wins, mut misses) = (0, 0);
                    let mut now = vec![0u8; 512];
                    // Bounded: at most 100 tries per win.
                    for _ in 0..WINS * 100 {
                        if wins == WINS {
                            break;
                        }
                        ns.read(3, &mut now).await.unwrap();
                        let n = u64::from_le_bytes(now[..8].try_into().unwrap());
                        if ns.compare_and_write(3, &now, &counter(n + 1), IoFlags::default()).await.unwrap() {
                            wins += 1;
                        } else {
                            misses += 1;
                        }
                    }
                    (wins, misses)
                }));
            }
            let (mut wins, mut misses) = (0, 0);
            for t in tasks {
                let (w, m) = t.await.unwrap();
                (wins, misses) = (wins + w, misses + m);
            }
            assert_eq!(wins, TASKS * WINS, "nsid {nsid}");
            let mut end = vec![0u8; 512];
            ns.read(3, &mut end).await.unwrap();
            assert_eq!(end, counter(wins), "nsid {nsid}: every win counted once ({misses} miscompares)");
            // A stale value: no write.
            assert!(!ns.compare_and_write(3, &counter(0), &counter(7), IoFlags::FUA).await.unwrap());
            ns.read(3, &mut end).await.unwrap();
            assert_eq!(end, counter(wins));
            // Refused before sending.
            for r in [
                ns.compare_and_write(3, &counter(wins), &[0u8; 1024], IoFlags::default()).await,
                ns.compare_and_write(0, &vec![0u8; 2 << 20], &vec![0u8; 2 << 20], IoFlags::default()).await,
                ns.compare_and_write(0, &[0u8; 100], &[0u8; 100], IoFlags::default()).await,
            ] {
                assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
            }
            let past = ns.blocks();
            match ns.compare_and_write(past, &counter(0), &counter(1), IoFlags::default()).await {
                Err(Error::Nvme { status, .. }) => assert_eq!(status.code(), Status::LBA_RANGE),
                other => panic!("nsid {nsid}: {other:?}"),
            }
        }
        ctrl.shutdown().await.unwrap();
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
    })
    .await;
}
