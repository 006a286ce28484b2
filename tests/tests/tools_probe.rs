//! The bundled tools (`nvmeof-tools`) against an in-process RAM target on
//! 127.0.0.1: the probe's library API (fio JSON layout for many flag
//! combinations, percentiles against raw samples, verify mode catching a
//! corrupted block, rate limiting, ping mode, HdrHistogram log and plot
//! files), the `nvmeof` admin CLI's output and exit codes, and one
//! end-to-end run of each built binary.
//!
//! Every test body runs under a time bound; the whole file takes ~15 s.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvmeof_target::backend::MemBackend;
use nvmeof_target::config::TargetConfig;
use nvmeof_target::core::{Limits, Namespace, Subsystem};
use nvmeof_target::server::Server;
use nvmeof_tools::admin;
use nvmeof_tools::probe::{Hooks, OpKind, ProbeEvent, ProbeOptions, Report};
use nvmeof_tools::report::{percentile_key, ping_line, PERCENTILES};
use nvmeof_tools::util::fmt_bytes;
use nvmeof_tools::{ExitCode, ToolError};
use serde_json::Value;

const NQN: &str = "nqn.2024-01.io.nvmeof.test:tools";
const NS_SIZE: u64 = 16 << 20;

use nvmeof_common::spec::log::LogPageId;
use nvmeof_tests::capsule_log::CapsuleLog;
use nvmeof_tests::durability_log::DurabilityLog;
use nvmeof_tests::harness::{bounded, init_tracing, HeldPort};

/// A target with subsystem [`NQN`] and namespace 1 on a RAM backend we keep a handle to.
struct TestTarget {
    server: Server,
    addr: String,
    mem: Arc<MemBackend>,
}

async fn start_target(block_size: u32, allowed_hosts: Option<Vec<String>>) -> TestTarget {
    start_target_with(block_size, allowed_hosts, Limits::default()).await
}

async fn start_target_with(
    block_size: u32,
    allowed_hosts: Option<Vec<String>>,
    limits: Limits,
) -> TestTarget {
    init_tracing();
    let cfg = TargetConfig {
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        port_ana: vec![Default::default()],
        port_ids: Vec::new(),
        port_params: Vec::new(),
        subsystems: Vec::new(),
        limits,
        poll_us: 0,
        send_buffer: nvmeof_net::default_send_buffer(),
        congestion_control: None,
        so_priority: 0,
        referrals: Vec::new(),
        metrics_listen: None,
        discovery_nqn: None,
        discovery_filter: Default::default(),
    };
    let server = Server::start(&cfg).await.expect("target starts");
    let mem = Arc::new(MemBackend::new(NS_SIZE, block_size));
    let sub = Arc::new(Subsystem::new(NQN, "nvmeof-tools-test", allowed_hosts, false));
    sub.add_namespace(Arc::new(Namespace::new(NQN, 1, mem.clone())));
    server.target.add_subsystem(sub);
    let addr = server.local_addrs[0].to_string();
    TestTarget { server, addr, mem }
}

/// [`start_target`] (512-byte blocks) with namespace 2 on a [`DurabilityLog`]
/// (RAM that logs the writes, Flushes and Deallocates reaching it).
async fn start_target_with_log() -> (TestTarget, Arc<DurabilityLog>) {
    let t = start_target(512, None).await;
    let log = Arc::new(DurabilityLog::new(NS_SIZE, 512));
    t.server.target.subsystem(NQN).unwrap().add_namespace(Arc::new(Namespace::new(NQN, 2, log.clone())));
    (t, log)
}

impl TestTarget {
    fn opts(&self, extra: &[&str]) -> ProbeOptions {
        let mut args = vec!["nvmeof-probe", self.addr.as_str(), "--nqn", NQN];
        args.extend_from_slice(extra);
        ProbeOptions::parse_args(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    async fn probe(&self, extra: &[&str]) -> Report {
        nvmeof_tools::run_probe(&self.opts(extra)).await.unwrap_or_else(|e| panic!("{extra:?}: {e}"))
    }

    async fn stop(self) {
        self.server.shutdown(Duration::from_secs(1)).await;
    }
}

/// Hooks that collect the probe's warnings.
fn warning_hooks() -> (Hooks, Arc<Mutex<Vec<String>>>) {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let w2 = warnings.clone();
    let hooks = Hooks {
        on_event: Some(Arc::new(move |e: &ProbeEvent| {
            if let ProbeEvent::Warning(w) = e {
                w2.lock().unwrap().push(w.clone());
            }
        })),
        ..Hooks::default()
    };
    (hooks, warnings)
}

fn u(v: &Value, what: &str) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{what} is not an unsigned integer: {v}"))
}

fn f(v: &Value, what: &str) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{what} is not a number: {v}"))
}

/// Checks fio's JSON layout and its internal consistency; returns (read, write, trim) total_ios.
/// `bs`: the request size of reads, writes and trims (`None`: several,
/// `--bssplit`).
fn check_fio_json(j: &Value, bs: [Option<u64>; 3], ctx: &str) -> (u64, u64, u64) {
    // The output must survive a text round trip, as a consumer would read it.
    let j: Value = serde_json::from_str(&serde_json::to_string_pretty(j).unwrap()).unwrap();
    let jobs = j["jobs"].as_array().unwrap_or_else(|| panic!("{ctx}: no jobs array"));
    assert_eq!(jobs.len(), 1, "{ctx}");
    let job = &jobs[0];
    assert!(job["jobname"].is_string(), "{ctx}: jobname");
    let mut totals = [0, 0, 0];
    for (i, op) in ["read", "write", "trim"].into_iter().enumerate() {
        let o = &job[op];
        assert!(o.is_object(), "{ctx}: {op} missing");
        let ios = u(&o["total_ios"], "total_ios");
        let bytes = u(&o["io_bytes"], "io_bytes");
        let bw = u(&o["bw_bytes"], "bw_bytes");
        let iops = f(&o["iops"], "iops");
        if let Some(bs) = bs[i] {
            assert_eq!(bytes, ios * bs, "{ctx}: {op} io_bytes");
            assert!((iops * bs as f64 - bw as f64).abs() <= 1.0 + bw as f64 * 1e-9, "{ctx}: {op} bw vs iops");
        }
        let lat = &o["lat_ns"];
        let (min, max) = (u(&lat["min"], "min"), u(&lat["max"], "max"));
        let (mean, sd) = (f(&lat["mean"], "mean"), f(&lat["stddev"], "stddev"));
        let pct = lat["percentile"].as_object().unwrap_or_else(|| panic!("{ctx}: {op} percentile"));
        assert_eq!(pct.len(), PERCENTILES.len(), "{ctx}");
        let mut prev = 0;
        for p in PERCENTILES {
            let k = percentile_key(p);
            let v = u(&pct[&k], &k);
            assert!(v >= prev, "{ctx}: {op} percentiles not monotonic");
            prev = v;
        }
        for k in ["50.000000", "90.000000", "99.000000", "99.900000", "99.990000", "99.999000"] {
            assert!(pct.contains_key(k), "{ctx}: {op} lacks percentile {k}");
        }
        if ios > 0 {
            assert!(min > 0 && min <= max && sd >= 0.0, "{ctx}: {op} min/max");
            assert!(mean >= min as f64 && mean <= max as f64, "{ctx}: {op} mean");
            // Histogram values are within 0.1 % of the exact extremes.
            let p50 = u(&pct["50.000000"], "p50");
            assert!(p50 as f64 >= min as f64 * 0.999 && p50 as f64 <= max as f64 * 1.001, "{ctx}: p50");
        } else {
            assert_eq!((min, max, bw), (0, 0, 0), "{ctx}: {op} empty");
        }
        totals[i] = ios;
    }
    let own = &job["nvmeof_probe"];
    assert!(own.is_object(), "{ctx}: own keys");
    assert_eq!(own["nqn"], NQN, "{ctx}");
    (totals[0], totals[1], totals[2])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_without_nqn_uses_the_one_subsystem_discovery_lists() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let o = ProbeOptions::parse_args(["nvmeof-probe", t.addr.as_str(), "--count", "50"]).unwrap();
        assert_eq!(o.nqn, None);
        let r = nvmeof_tools::run_probe(&o).await.unwrap();
        assert_eq!(r.stats(OpKind::Read).ops, 50);
        assert_eq!(r.to_fio_json()["jobs"][0]["nvmeof_probe"]["nqn"], NQN);
        // A second subsystem: which one is meant is for the user to say.
        let other = "nqn.2024-01.io.nvmeof.test:tools-other";
        let sub = Arc::new(Subsystem::new(other, "nvmeof-tools-test", None, false));
        sub.add_namespace(Arc::new(Namespace::new(other, 1, Arc::new(MemBackend::new(NS_SIZE, 512)))));
        t.server.target.add_subsystem(sub);
        let e = nvmeof_tools::run_probe(&o).await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        assert!(
            e.message.contains("2 subsystems") && e.message.contains(NQN) && e.message.contains(other),
            "{e}"
        );
        // Naming one still works.
        let o = t.opts(&["--count", "10"]);
        assert_eq!(nvmeof_tools::run_probe(&o).await.unwrap().stats(OpKind::Read).ops, 10);
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flag_combination_reports_fio_json() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let combos: &[&[&str]] = &[
            &["--rw", "read", "--count", "300"],
            &["--rw", "write", "--count", "300", "--bs", "128k", "--qd", "2"],
            &["--rw", "randread", "--time", "300ms", "--qd", "4", "--queues", "2"],
            &["--rw", "randwrite", "--count", "200", "--bs", "1m"],
            &["--rw", "randrw", "--mix", "70", "--count", "400", "--qd", "8", "--queues", "3"],
            &["--rw", "rw", "--mix", "0", "--count", "100"],
            &["--rw", "randrw", "--mix", "100", "--count", "100"],
            &["--count", "200", "--digests", "--bs", "64k", "--qd", "2"],
            &["--time", "600ms", "--warmup", "300ms", "--qd", "2"],
            &["--count", "300", "--rate", "3000", "--qd", "2"],
            &["--rw", "write", "--verify", "--size", "256k", "--offset", "1m", "--count", "64"],
            &[
                "--rw", "randrw", "--verify", "--size", "256k", "--offset", "1m", "--count", "200", "--qd",
                "4",
            ],
            &["--count", "100", "--bs", "512", "--size", "4k", "--offset", "8m", "--poll-us", "20"],
            // Reads complete by the C2HData SUCCESS flag (no response capsule); the region
            // was written with the pattern above, so every read is checked.
            &[
                "--rw",
                "randrw",
                "--verify",
                "--size",
                "256k",
                "--offset",
                "1m",
                "--count",
                "200",
                "--qd",
                "4",
                "--disable-sqflow",
                "--digests",
            ],
            &["--ping", "--count", "5", "--interval", "1ms"],
            &["--ping", "--rw", "write", "--count", "3", "--interval", "0", "--verify"],
            &["--rw", "trim", "--count", "100", "--bs", "8k"],
            &["--rw", "randtrim", "--time", "300ms", "--qd", "4", "--queues", "2"],
            &["--rw", "trimwrite", "--count", "40", "--qd", "2"],
            &["--rw", "randrw", "--bs", "4k,16k", "--count", "100", "--qd", "4", "--write-queues", "1"],
            &["--rw", "rw", "--bssplit", "4k/70:32k/30", "--time", "300ms", "--qd", "2", "--rate", "2000"],
            &["--rw", "randrw", "--thinktime", "1ms", "--thinktime-blocks", "2", "--count", "90"],
        ];
        for extra in combos {
            let opts = t.opts(extra);
            let r = nvmeof_tools::run_probe(&opts).await.unwrap_or_else(|e| panic!("{extra:?}: {e}"));
            let ctx = format!("{extra:?}");
            assert!(r.error.is_none(), "{ctx}: {:?}", r.error);
            let bs = [OpKind::Read, OpKind::Write, OpKind::Trim].map(|op| opts.sizes().of(op).only());
            let (reads, writes, trims) = check_fio_json(&r.to_fio_json(), bs, &ctx);
            if let Some(c) = opts.count {
                assert_eq!(reads + writes + trims, c, "{ctx}: count");
            }
            assert_eq!(reads > 0, opts.rw.reads() && (opts.mix > 0 || !opts.rw.writes()), "{ctx}: reads");
            assert_eq!(trims > 0, opts.rw.trims(), "{ctx}: trims");
            if !opts.rw.reads() {
                assert_eq!(reads, 0, "{ctx}");
            }
            if opts.verify {
                assert_eq!(r.verify.as_ref().unwrap().mismatches, 0, "{ctx}");
                assert_eq!(r.exit_code(), ExitCode::Ok, "{ctx}");
            }
            let text = if opts.ping { r.ping_summary() } else { r.to_text() };
            assert!(text.contains(if opts.ping { "requests completed" } else { "IOPS=" }), "{ctx}: {text}");
            assert!(!text.contains("NaN"), "{ctx}: {text}");
            if opts.warmup > Duration::ZERO {
                assert!(r.timeline.iter().any(|p| p.warmup), "{ctx}: warm-up in the timeline");
                let s = r.runtime.as_secs_f64();
                assert!((0.55..1.5).contains(&s), "{ctx}: measured time {s} excludes the warm-up");
            }
        }
        t.stop().await;
    })
    .await;
}

/// hdrhistogram's rank: the smallest sample with at least ceil(q·n) samples at or below it.
fn reference_percentile(sorted: &[u64], p: f64) -> u64 {
    let n = sorted.len();
    let rank = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n);
    sorted[rank - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percentiles_match_sorted_raw_samples() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let r = t
            .probe(&["--rw", "randrw", "--count", "6000", "--qd", "4", "--queues", "2", "--record-samples"])
            .await;
        let samples = r.samples.clone().expect("samples recorded");
        let j = r.to_fio_json();
        for op in [OpKind::Read, OpKind::Write] {
            let mut v = samples[op as usize].clone();
            v.sort_unstable();
            let st = r.stats(op);
            assert_eq!(v.len() as u64, st.ops);
            assert!(v.len() > 1000, "both kinds got requests");
            assert_eq!((st.min(), st.max_ns), (v[0], *v.last().unwrap()), "exact extremes");
            let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
            assert!((st.mean() - mean).abs() <= mean * 1e-9, "exact mean");
            let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / (v.len() - 1) as f64;
            assert!((st.stddev() - var.sqrt()).abs() <= var.sqrt() * 1e-6 + 1e-6, "exact stddev");
            for p in PERCENTILES {
                let want = reference_percentile(&v, p);
                let got = u(&j["jobs"][0][op.as_str()]["lat_ns"]["percentile"][percentile_key(p)], "pct");
                // 3 significant digits: the reported value is the top of the sample's bucket.
                let tol = want / 1000 + 1;
                assert!(
                    got >= want && got - want <= tol,
                    "{} p{p}: histogram {got} vs samples {want}",
                    op.as_str()
                );
            }
        }
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_depth_is_clamped_to_the_granted_queue_size() {
    bounded(60, async {
        // 8 entries per queue: 7 commands in flight, not the 32 asked for.
        let limits = Limits { max_queue_entries: 8, ..Limits::default() };
        let t = start_target_with(512, None, limits).await;
        let (hooks, warnings) = warning_hooks();
        let opts = t.opts(&["--qd", "32", "--queues", "2", "--count", "400"]);
        let r = nvmeof_tools::run_probe_with(&opts, hooks).await.unwrap();
        assert_eq!(r.read.ops, 400);
        let w = warnings.lock().unwrap().clone();
        assert!(w.iter().any(|w| w.contains("7 in flight per queue, not 32")), "{w:?}");
        // The run used (and reports) what the queues hold, not 32 slots per
        // queue of which 25 would wait in the initiator with their clock running.
        let j = r.to_fio_json();
        let own = &j["jobs"][0]["nvmeof_probe"];
        assert_eq!((u(&own["qd"], "qd"), u(&own["qd_requested"], "qd_requested")), (7, 32));
        assert!(r.to_text().contains("qd=7, queues=2"), "{}", r.to_text());
        t.stop().await;
    })
    .await;
}

/// `--write-queues`: every slot's writes travel on the write queues (qids
/// 1..=N) and its reads on the others, as the target sees them; a target
/// granting too few queues gets shared queues and a warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_queues_carry_the_writes_of_every_slot() {
    bounded(60, async {
        const READ: u8 = 0x02;
        const WRITE: u8 = 0x01;
        let t = start_target(512, None).await;
        let proxy = CapsuleLog::start(t.addr.parse().unwrap()).await;
        let addr = proxy.addr.to_string();
        let args = ["nvmeof-probe", &addr, "--nqn", NQN, "--rw", "randrw", "--count", "600"];
        let run = |extra: &[&str]| {
            let opts = ProbeOptions::parse_args([&args[..], extra].concat()).unwrap();
            let (hooks, warnings) = warning_hooks();
            let proxy = &proxy;
            async move {
                proxy.commands.lock().unwrap().clear();
                let r = nvmeof_tools::run_probe_with(&opts, hooks).await.unwrap();
                let cmds = std::mem::take(&mut *proxy.commands.lock().unwrap());
                let w = warnings.lock().unwrap().clone();
                (r, cmds, w)
            }
        };
        let qids = |cmds: &[(u16, u8)], op: u8| {
            let mut q: Vec<u16> = cmds.iter().filter(|c| c.0 != 0 && c.1 == op).map(|c| c.0).collect();
            q.sort_unstable();
            q.dedup();
            q
        };
        let (r, cmds, w) = run(&["--queues", "2", "--write-queues", "2", "--qd", "4"]).await;
        assert!(w.is_empty(), "{w:?}");
        assert_eq!((r.queues, r.write_queues), (2, 2));
        assert!(r.read.ops > 0 && r.write.ops > 0 && r.read.ops + r.write.ops == 600);
        assert_eq!((qids(&cmds, READ), qids(&cmds, WRITE)), (vec![3, 4], vec![1, 2]), "{cmds:?}");
        assert!(r.to_text().contains("queues=2, write_queues=2"), "{}", r.to_text());
        let own = &r.to_fio_json()["jobs"][0]["nvmeof_probe"];
        assert_eq!((u(&own["write_queues"], "wq"), u(&own["write_queues_requested"], "wqr")), (2, 2));
        // Without: both kinds on the one queue.
        let (r, cmds, _) = run(&["--qd", "4"]).await;
        assert_eq!(r.write_queues, 0);
        assert_eq!((qids(&cmds, READ), qids(&cmds, WRITE)), (vec![1], vec![1]), "{cmds:?}");
        t.stop().await;

        // A target that grants 2 queues: shared, and said so.
        let t = start_target_with(512, None, Limits { max_io_queues: 2, ..Limits::default() }).await;
        let opts = t.opts(&["--rw", "randrw", "--count", "200", "--queues", "2", "--write-queues", "1"]);
        let (hooks, warnings) = warning_hooks();
        let r = nvmeof_tools::run_probe_with(&opts, hooks).await.unwrap();
        assert_eq!((r.queues, r.write_queues), (2, 0));
        let w = warnings.lock().unwrap().clone();
        assert!(
            w.iter().any(|w| w.contains("granted 0 write queues of the 1 asked for: reads and writes share")),
            "{w:?}"
        );
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_of_u64_max_is_accepted() {
    bounded(60, async {
        let t = start_target(512, None).await;
        // The time bound ends it; sizing the sample buffers from the count overflowed.
        let r = t.probe(&["--count", &u64::MAX.to_string(), "--time", "200ms"]).await;
        assert!(r.read.ops > 0 && r.error.is_none());
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_exactly_the_corrupted_lba() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let region = ["--size", "1m", "--offset", "1m", "--bs", "4k"];
        let mut w = vec!["--rw", "write", "--verify", "--count", "256", "--qd", "4"];
        w.extend_from_slice(&region);
        let r = t.probe(&w).await;
        let v = r.verify.as_ref().unwrap();
        assert_eq!((v.written_blocks, v.mismatches), (2048, 0));
        // Clean read-back of the whole region.
        let mut rd = vec!["--rw", "read", "--verify", "--count", "256", "--qd", "4"];
        rd.extend_from_slice(&region);
        let r = t.probe(&rd).await;
        assert_eq!(
            (r.verify.as_ref().unwrap().checked_blocks, r.verify.as_ref().unwrap().mismatches),
            (2048, 0)
        );
        // One flipped byte inside LBA 2048 + 37 (the region starts at LBA 2048).
        let bad_lba = 2048 + 37;
        t.mem.corrupt_byte(bad_lba * 512 + 100);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let hooks = Hooks {
            on_event: Some(Arc::new(move |e: &ProbeEvent| {
                if let ProbeEvent::Mismatch(m) = e {
                    s2.lock().unwrap().push(m.lba);
                }
            })),
            ..Hooks::default()
        };
        let r = nvmeof_tools::run_probe_with(&t.opts(&rd), hooks).await.unwrap();
        let v = r.verify.as_ref().unwrap();
        assert_eq!(v.mismatches, 1, "{:?}", v.first);
        assert_eq!(v.first[0].lba, bad_lba);
        assert_eq!(v.first[0].offset, 100);
        assert_eq!(*seen.lock().unwrap(), vec![bad_lba]);
        assert_eq!(r.exit_code(), ExitCode::VerifyFailed);
        let j = r.to_fio_json();
        assert_eq!(j["jobs"][0]["nvmeof_probe"]["verify"]["mismatches"], 1);
        assert_eq!(j["jobs"][0]["nvmeof_probe"]["verify"]["first_mismatches"][0]["lba"], bad_lba);
        assert!(r.to_text().contains(&format!("lba={bad_lba}")));
        // Random reads find it too (and only it), whatever the request size.
        let r = t
            .probe(&[
                "--rw", "randread", "--verify", "--size", "1m", "--offset", "1m", "--bs", "8k", "--count",
                "2000", "--qd", "4",
            ])
            .await;
        let v = r.verify.as_ref().unwrap();
        assert!(v.first.iter().all(|m| m.lba == bad_lba) && v.mismatches > 0, "{:?}", v.first);
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_verify_skips_never_written_blocks_only() {
    bounded(60, async {
        let t = start_target(512, None).await;
        // A fresh region, mixed reads and writes: reads of units no write has
        // reached yet find zeros, which is not a fault (fio verifies only what
        // it wrote). The old probe failed this run with hundreds of mismatches.
        let r = t
            .probe(&[
                "--rw", "randrw", "--verify", "--size", "256k", "--offset", "4m", "--bs", "4k", "--count",
                "400", "--qd", "4", "--queues", "2",
            ])
            .await;
        let v = r.verify.as_ref().unwrap();
        assert_eq!(v.mismatches, 0, "{:?}", v.first);
        assert_eq!(r.exit_code(), ExitCode::Ok);
        assert!(v.unwritten_blocks > 0 && v.checked_blocks > 0, "{v:?}");
        assert_eq!(v.checked_blocks + v.unwritten_blocks, r.stats(OpKind::Read).ops * 8);
        assert!(r.to_text().contains("never-written blocks read as zeros or ones"), "{}", r.to_text());
        assert_eq!(
            r.to_fio_json()["jobs"][0]["nvmeof_probe"]["verify"]["unwritten_blocks"],
            v.unwritten_blocks
        );

        // Only all-zero blocks are skipped: a damaged never-written block is still reported.
        let bad_lba = 6 * 2048 + 3;
        t.mem.corrupt_byte(bad_lba * 512 + 10);
        let r = t
            .probe(&[
                "--rw", "randrw", "--mix", "100", "--verify", "--size", "4k", "--offset", "6m", "--count",
                "5",
            ])
            .await;
        let v = r.verify.as_ref().unwrap();
        assert_eq!((v.mismatches, v.unwritten_blocks, v.checked_blocks), (5, 35, 5), "{v:?}");
        assert!(v.first.iter().all(|m| m.lba == bad_lba), "{:?}", v.first);
        assert_eq!(r.exit_code(), ExitCode::VerifyFailed);

        // Read-only runs check every block: zeros there mean a write of an earlier run is missing.
        let r =
            t.probe(&["--rw", "read", "--verify", "--size", "4k", "--offset", "7m", "--count", "1"]).await;
        let v = r.verify.as_ref().unwrap();
        assert_eq!((v.mismatches, v.unwritten_blocks), (8, 0), "{v:?}");
        t.stop().await;
    })
    .await;
}

/// `--random-distribution`: a skewed run keeps writing the same few units of
/// its region, a uniform one spreads over nearly all of them; neither leaves
/// its region. Counted on the target's namespace, not in the probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_distribution_concentrates_the_requests() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let a = t.addr.as_str();
        // Each run writes 2000 × 4 KiB to its own 4 MiB (1024 units).
        let mut touched = Vec::new();
        for (dist, offset) in [("zipf:2", "4m"), ("pareto:0.9", "8m"), ("random", "12m")] {
            let args =
                ["--rw", "randwrite", "--random-distribution", dist, "--offset", offset, "--size", "4m"];
            let r = t
                .probe(&[&args[..], &["--bs", "4k", "--count", "2000", "--qd", "4", "--seed", "7"]].concat())
                .await;
            assert_eq!((r.write.ops, r.errors), (2000, 0), "{dist}");
            let j = r.to_fio_json();
            assert_eq!(j["jobs"][0]["job options"]["random_distribution"], dist, "{dist}");
            assert_eq!(j["jobs"][0]["nvmeof_probe"]["random_distribution"], dist, "{dist}");
            let skewed = dist != "random";
            assert_eq!(r.to_text().contains(&format!("random_distribution={dist}")), skewed, "{dist}");
            let lba = (parse_mib(offset) << 20) / 512;
            let data = admin_raw(
                &["nvmeof", "read", a, "--nqn", NQN, "--lba", &lba.to_string(), "--count", "8192"],
                b"",
            )
            .await
            .unwrap();
            touched.push(data.chunks(4096).filter(|c| c.iter().any(|&b| b != 0)).count());
        }
        // Expected: zipf θ=2 about 60 units; pareto 0.9 about 190 (its 1800
        // requests on the hottest 10% touch those 102 units, the other 200
        // spread thinly); uniform 1024·(1 − e^(−2000/1024)) ≈ 879.
        assert!(touched[0] < 200, "zipf:2 touched {} of 1024 units", touched[0]);
        assert!((120..400).contains(&touched[1]), "pareto:0.9 touched {} of 1024 units", touched[1]);
        assert!(touched[2] > 780, "uniform touched {} of 1024 units", touched[2]);
        // Nothing landed before the regions.
        let head = admin_raw(&["nvmeof", "read", a, "--nqn", NQN, "--lba", "0", "--count", "8192"], b"")
            .await
            .unwrap();
        assert!(head.iter().all(|&b| b == 0));
        t.stop().await;
    })
    .await;
}

fn parse_mib(s: &str) -> u64 {
    s.trim_end_matches('m').parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_holds_within_five_percent() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let r = t.probe(&["--rate", "2000", "--time", "2s", "--qd", "4"]).await;
        let n = r.read.ops as f64;
        assert!((n - 4000.0).abs() <= 200.0, "{n} requests in 2 s at 2000 IOPS");
        let iops = r.iops(OpKind::Read);
        assert!((iops - 2000.0).abs() <= 100.0, "measured {iops} IOPS");
        // Coordinated omission: latency is measured from the schedule, and the lag is reported.
        let lag = r.sched_lag.as_ref().expect("schedule lag");
        assert_eq!(lag.ops, r.read.ops);
        assert!(r.to_fio_json()["jobs"][0]["nvmeof_probe"]["sched_lag_ns"]["percentile"].is_object());
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sparse_rate_schedule_still_measures_the_whole_run_time() {
    bounded(60, async {
        let t = start_target(512, None).await;
        // Sends due at 0, 200 and 400 ms; the next (600 ms) is past the end.
        let r = t.probe(&["--rate", "5", "--time", "600ms", "--qd", "2"]).await;
        assert_eq!(r.read.ops, 3);
        // The run lasts --time: it ended at the last send (~400 ms), which made 3
        // requests in 600 ms look like 7.5 IOPS against a cap of 5.
        assert!(r.runtime >= Duration::from_millis(600), "{:?}", r.runtime);
        assert!(r.iops(OpKind::Read) <= 5.0, "{}", r.iops(OpKind::Read));
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_mode_emits_one_line_per_request() {
    bounded(60, async {
        let t = start_target(4096, None).await;
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l2 = lines.clone();
        let addr = t.addr.clone();
        let hooks = Hooks {
            on_event: Some(Arc::new(move |e: &ProbeEvent| {
                if let ProbeEvent::Ping(p) = e {
                    l2.lock().unwrap().push(ping_line(&addr, 1, p));
                }
            })),
            ..Hooks::default()
        };
        let opts = t.opts(&["--ping", "--count", "7", "--interval", "2ms", "--warmup", "0"]);
        let r = nvmeof_tools::run_probe_with(&opts, hooks).await.unwrap();
        let lines = lines.lock().unwrap().clone();
        assert_eq!(lines.len(), 7);
        for (i, l) in lines.iter().enumerate() {
            assert!(l.starts_with(&format!("4 KiB from {} nsid=1 lba=", t.addr)), "{l}");
            assert!(l.contains(&format!(": request={} time=", i + 1)), "{l}");
            assert!([" ns", " us", " ms", " s"].iter().any(|u| l.ends_with(u)), "{l}");
        }
        assert_eq!(r.read.ops, 7);
        let s = r.ping_summary();
        assert!(s.contains("7 requests completed") && s.contains("min/avg/max/mdev"), "{s}");
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hdr_interval_log_and_svg_plot() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let dir = test_dir("hdr");
        let (log, svg) = (dir.join("lat.hlog"), dir.join("lat.svg"));
        let r = t
            .probe(&["--rw", "randrw", "--time", "1500ms", "--qd", "2", "--hdr-log", log.to_str().unwrap()])
            .await;
        nvmeof_tools::hdrlog::write_interval_log_file(&r, &log).unwrap();
        nvmeof_tools::plot::write_plot(&r, &svg).unwrap();
        // Requests per tag (read, write, trim) and intervals in the log.
        let counts = |path: &std::path::Path| {
            let text = std::fs::read(path).unwrap();
            assert!(text.starts_with(b"#[Histogram log format version 1.3]"));
            use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
            use hdrhistogram::serialization::Deserializer;
            let mut counts = [0u64; 3];
            let mut intervals = 0;
            let mut base = false;
            for e in IntervalLogIterator::new(&text) {
                match e.expect("log parses") {
                    LogEntry::BaseTime(_) => base = true,
                    LogEntry::StartTime(_) => {}
                    LogEntry::Interval(h) => {
                        intervals += 1;
                        let hist: hdrhistogram::Histogram<u64> = Deserializer::new()
                            .deserialize(&mut base64_decode(h.encoded_histogram()).as_slice())
                            .expect("V2 deflate histogram");
                        let i = match h.tag().map(|t| t.as_str()) {
                            Some("read") => 0,
                            Some("write") => 1,
                            Some("trim") => 2,
                            other => panic!("tag {other:?}"),
                        };
                        counts[i] += hist.len();
                        assert!(h.duration() <= Duration::from_secs(1));
                    }
                }
            }
            assert!(base);
            (counts, intervals)
        };
        let (c, intervals) = counts(&log);
        assert!(intervals >= 4, "2 tags × 2 intervals, got {intervals}");
        assert_eq!(c, [r.read.ops, r.write.ops, 0]);
        let svg_text = std::fs::read_to_string(&svg).unwrap();
        assert!(svg_text.contains("<svg") && svg_text.contains("Latency by percentile"));
        assert!(svg_text.contains("IOPS over time"));
        // Trims too: tagged `trim` in the log, a curve and a line of their own in the plot.
        let r = t
            .probe(&[
                "--rw",
                "trimwrite",
                "--time",
                "1200ms",
                "--qd",
                "2",
                "--bs",
                "64k",
                "--hdr-log",
                log.to_str().unwrap(),
            ])
            .await;
        assert!(r.trim.ops > 0 && r.write.ops > 0);
        nvmeof_tools::hdrlog::write_interval_log_file(&r, &log).unwrap();
        assert_eq!(counts(&log).0, [0, r.write.ops, r.trim.ops]);
        nvmeof_tools::plot::write_plot(&r, &svg).unwrap();
        let svg_text = std::fs::read_to_string(&svg).unwrap();
        // The legends' labels (one per chart), each a line of its own.
        let labels = |name: &str| svg_text.lines().filter(|l| l.trim() == name).count();
        assert_eq!((labels("read"), labels("write"), labels("trim")), (0, 2, 2), "{svg_text}");
        let _ = std::fs::remove_dir_all(&dir);
        t.stop().await;
    })
    .await;
}

/// Standard base64 (the interval log's histogram encoding).
fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 {c}"),
        }
    };
    let b: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in b.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c) << (18 - 6 * i);
        }
        out.extend_from_slice(&acc.to_be_bytes()[1..chunk.len()]);
    }
    out
}

async fn admin_raw(args: &[&str], stdin: &[u8]) -> Result<Vec<u8>, ToolError> {
    let cli = admin::Cli::parse_args(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let mut out = Vec::new();
    let mut input = stdin;
    admin::run(&cli, &mut input, &mut out).await?;
    Ok(out)
}

/// A test's own directory in the temporary directory (per process and
/// test: one test removing its directory leaves the others' files alone).
fn test_dir(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("nvmeof-tools-test-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn admin(args: &[&str], stdin: &[u8]) -> Result<String, ToolError> {
    admin_raw(args, stdin).await.map(|o| String::from_utf8(o).expect("text output"))
}

#[test]
fn bad_host_nqns_and_a_zero_timeout_are_usage_errors() {
    // Longer than the 223 bytes of an NQN: the 256-byte Connect field cut it short
    // without a word, and the host connected under another name.
    let long = format!("nqn.2014-08.org.example:{}", "h".repeat(250));
    for bad in ["", long.as_str()] {
        let e = admin::Cli::parse_args(["nvmeof", "--hostnqn", bad, "list", "127.0.0.1", "--nqn", NQN])
            .expect_err("bad --hostnqn accepted by nvmeof");
        assert_eq!(e.exit_code(), 2, "{e}");
        let e = ProbeOptions::parse_args(["nvmeof-probe", "127.0.0.1", "--nqn", NQN, "--hostnqn", bad])
            .expect_err("bad --hostnqn accepted by nvmeof-probe");
        assert_eq!(e.exit_code(), 2, "{e}");
    }
    // A zero timeout failed every command as a transport error (exit code 3).
    let e = admin::Cli::parse_args(["nvmeof", "--timeout", "0", "discover", "127.0.0.1"])
        .expect_err("--timeout 0 accepted");
    assert_eq!(e.exit_code(), 2, "{e}");
    assert!(
        admin::Cli::parse_args(["nvmeof", "--hostnqn", "nqn.2014-08.org.example:h", "discover", "x"]).is_ok()
    );
}

/// Options that had no effect (`--interval` outside ping mode, `--threads 0`)
/// were ignored without a word; they are usage errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_options_without_effect_are_usage_errors() {
    bounded(30, async {
        for (bad, says) in [
            (vec!["--interval", "5ms"], "--interval applies to --ping only"),
            (vec!["--threads", "0"], "--threads must be at least 1"),
            (
                vec!["--rw", "read", "--random-distribution", "zipf:1.2"],
                "--random-distribution zipf:1.2 applies to the random modes",
            ),
            (vec!["--fua", "--rw", "randread"], "--rw randread writes nothing"),
            (vec!["--flush-every", "8", "--rw", "read"], "--fua and --flush-every apply to writes"),
            (vec!["--flush-every", "8", "--rw", "write", "--ping"], "--flush-every does not apply to --ping"),
        ] {
            let mut args = vec!["nvmeof-probe", "127.0.0.1:9", "--nqn", NQN];
            args.extend_from_slice(&bad);
            let o = ProbeOptions::parse_args(&args).unwrap();
            let e = nvmeof_tools::run_probe(&o).await.expect_err(says);
            assert_eq!(e.exit_code(), ExitCode::Usage, "{bad:?}: {e}");
            assert!(e.message.contains(says), "{bad:?}: {e}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_addresses_are_usage_errors() {
    bounded(60, async {
        // A port out of range or missing, an unclosed [ or no host: bad command
        // lines (exit 2), which were reported as connection failures (exit 3).
        for bad in ["127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:0", "[::1", ":4420"] {
            let o = ProbeOptions::parse_args(["nvmeof-probe", bad, "--nqn", NQN]).unwrap();
            let e = nvmeof_tools::run_probe(&o).await.expect_err(bad);
            assert_eq!(e.exit_code(), ExitCode::Usage, "{bad}: {e}");
            assert!(e.message.contains("invalid address"), "{bad}: {e}");
            for cmd in [vec!["discover", bad], vec!["list", bad, "--nqn", NQN]] {
                let mut args = vec!["nvmeof"];
                args.extend_from_slice(&cmd);
                let e = admin(&args, b"").await.expect_err(bad);
                assert_eq!(e.exit_code(), ExitCode::Usage, "{args:?}: {e}");
            }
        }
    })
    .await;
}

/// `nvmeof discover` without an address asks the discovery controllers of
/// nvme-cli's discovery.conf, each with its line's options (here the host
/// NQN, which decides what the log lists), as `nvme discover` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_reads_nvme_clis_discovery_conf() {
    bounded(60, async {
        let allowed = "nqn.2024-01.io.nvmeof.test:allowed-host";
        let t = start_target(512, Some(vec![allowed.to_string()])).await;
        let port = t.addr.rsplit_once(':').unwrap().1.to_string();
        let dir = std::env::temp_dir().join(format!("nvmeof-discovery-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("discovery.conf");
        let conf_s = conf.to_str().unwrap();
        let allowed_line = format!("-t tcp -a 127.0.0.1 -s {port} -q {allowed}\n");
        let plain_line = format!("--transport=tcp --traddr=127.0.0.1 --trsvcid={port}\n");
        std::fs::write(&conf, format!("# discovery controllers\n\n{allowed_line}{plain_line}")).unwrap();
        let text = admin(&["nvmeof", "discover", "--discovery-conf", conf_s], b"").await.unwrap();
        let logs: Vec<&str> = text.split("Discovery Log at ").skip(1).collect();
        assert_eq!(logs.len(), 2, "{text}");
        assert!(
            logs[0].starts_with(&format!("127.0.0.1:{port}: "))
                && logs[0].contains(&format!("subnqn:  {NQN}"))
        );
        assert!(!logs[1].contains(NQN), "not for the host the subsystem does not allow: {text}");
        let j: Value = serde_json::from_str(
            &admin(&["nvmeof", "discover", "--discovery-conf", conf_s, "--json"], b"").await.unwrap(),
        )
        .unwrap();
        let services = j["services"].as_array().unwrap();
        assert_eq!(services.len(), 2, "{j}");
        assert_eq!(services[0]["address"], format!("127.0.0.1:{port}"));
        assert!(services[0]["records"].as_array().unwrap().iter().any(|r| r["subnqn"] == NQN), "{j}");
        assert!(services[1]["records"].as_array().unwrap().iter().all(|r| r["subnqn"] != NQN), "{j}");
        // A line for another transport is skipped and said so; the rest is asked.
        std::fs::write(&conf, format!("-t rdma -a 127.0.0.1 -s {port}\n{allowed_line}")).unwrap();
        let e = admin(&["nvmeof", "discover", "--discovery-conf", conf_s], b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        assert!(e.to_string().contains("line 1: transport rdma (NVMe/TCP only here)"), "{e}");
        // A controller that cannot be reached: exit code 3, naming it.
        let dead = HeldPort::new();
        let dead_port = dead.addr().port();
        std::fs::write(&conf, format!("{allowed_line}-t tcp -a 127.0.0.1 -s {dead_port}\n")).unwrap();
        let e = admin(&["nvmeof", "discover", "--discovery-conf", conf_s], b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Transport, "{e}");
        assert!(e.to_string().contains(&format!("127.0.0.1:{dead_port}")), "{e}");
        // No file, or nothing in it: usage errors that name it.
        std::fs::write(&conf, "# nothing\n").unwrap();
        let e = admin(&["nvmeof", "discover", "--discovery-conf", conf_s], b"").await.unwrap_err();
        assert!(
            e.exit_code() == ExitCode::Usage
                && e.to_string().contains("lists no NVMe/TCP discovery controller"),
            "{e}"
        );
        std::fs::remove_file(&conf).unwrap();
        let e = admin(&["nvmeof", "discover", "--discovery-conf", conf_s], b"").await.unwrap_err();
        assert!(e.exit_code() == ExitCode::Usage && e.to_string().contains(conf_s), "{e}");
        assert!(
            admin::Cli::parse_args(["nvmeof", "discover", "127.0.0.1", "--discovery-conf", conf_s]).is_err()
        );
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_cli_outputs_and_exit_codes() {
    bounded(60, async {
        let allowed = "nqn.2024-01.io.nvmeof.test:allowed-host";
        let t = start_target(512, Some(vec![allowed.to_string()])).await;
        let a = t.addr.as_str();
        let h = ["--hostnqn", allowed];
        // discover (the log lists only the subsystems this host may use)
        let j: Value = serde_json::from_str(
            &admin(&["nvmeof", "discover", a, "--json", h[0], h[1]], b"").await.unwrap(),
        )
        .unwrap();
        let recs = j["records"].as_array().unwrap();
        assert!(recs
            .iter()
            .any(|r| r["subnqn"] == NQN && r["trtype"] == "tcp" && r["subtype"] == "nvme subsystem"));
        let text = admin(&["nvmeof", "discover", a, h[0], h[1]], b"").await.unwrap();
        assert!(text.contains(&format!("subnqn:  {NQN}")), "{text}");
        // identify
        let j: Value = serde_json::from_str(
            &admin(&["nvmeof", "identify", a, "--nqn", NQN, "--json", h[0], h[1]], b"").await.unwrap(),
        )
        .unwrap();
        assert_eq!(j["subnqn"], NQN);
        assert_eq!(j["mn"], "nvmeof-tools-test");
        // ONCS with Copy (bit 8) and its format 0.
        assert_eq!((j["oncs"].as_u64().map(|o| o & 0x100), j["ocfs"].as_u64()), (Some(0x100), Some(1)));
        // The NVM command set's limits (Identify CNS 06h): WZSL 13, 32 MiB.
        assert_eq!((j["nvm"]["wzsl"].as_u64(), j["nvm"]["dmrsl"].as_u64()), (Some(13), Some(0)));
        let j: Value = serde_json::from_str(
            &admin(&["nvmeof", "identify", a, "--nqn", NQN, "--nsid", "1", "--json", h[0], h[1]], b"")
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!((j["nsze"].as_u64(), j["block_size"].as_u64()), (Some(NS_SIZE / 512), Some(512)));
        // The UUID from the identification descriptors (a derived one: version 4).
        let uuid = j["uuid"].as_str().and_then(nvmeof_initiator::common::spec::nqn::parse_uuid);
        assert_eq!(uuid.map(|u| u[6] >> 4), Some(4), "{}", j["uuid"]);
        // Copy limits: the default MDTS (1 MiB) in 512-byte blocks.
        assert_eq!(
            (j["mssrl"].as_u64(), j["mcl"].as_u64(), j["msrc"].as_u64()),
            (Some(2048), Some(2048), Some(255))
        );
        // list
        let text = admin(&["nvmeof", "list", a, "--nqn", NQN, h[0], h[1]], b"").await.unwrap();
        assert!(
            text.lines().nth(1).unwrap().split_whitespace().collect::<Vec<_>>()[..4]
                == ["1", "16", "MiB", "32768"],
            "{text}"
        );
        let j: Value = serde_json::from_str(
            &admin(&["nvmeof", "list", a, "--nqn", NQN, "--json", h[0], h[1]], b"").await.unwrap(),
        )
        .unwrap();
        assert_eq!(j["namespaces"][0]["size_bytes"], NS_SIZE);
        // Usage (NUSE): nothing written to the thin-provisioned RAM namespace yet.
        assert_eq!(j["namespaces"][0]["used_bytes"], 0);
        assert_eq!(text.lines().nth(1).unwrap().split_whitespace().nth(5), Some("0"), "{text}");
        // ana-log: the one port reports group 1 optimized with namespace 1.
        let ana = admin(&["nvmeof", "ana-log", a, "--nqn", NQN, h[0], h[1]], b"").await.unwrap();
        let row: Vec<_> = ana.lines().nth(2).unwrap().split_whitespace().collect();
        assert_eq!(row, ["1", "optimized", "1"], "{ana}");
        let j: Value = serde_json::from_str(
            &admin(&["nvmeof", "ana-log", a, "--nqn", NQN, "--json", h[0], h[1]], b"").await.unwrap(),
        )
        .unwrap();
        assert_eq!(
            j["groups"],
            serde_json::json!([{ "grpid": 1, "state": "optimized", "chgcnt": 0, "nsids": [1] }])
        );
        // Without --nqn the discovery log names the subsystem: the one this host may use...
        assert_eq!(admin(&["nvmeof", "list", a, h[0], h[1]], b"").await.unwrap(), text);
        // ...and none for a host the subsystem does not allow.
        let e = admin(&["nvmeof", "list", a, "--hostnqn", "nqn.2024-01.io.nvmeof.test:intruder"], b"")
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NotFound, "{e}");
        assert!(e.message.contains("lists no NVM subsystem"), "{e}");
        // write from stdin (zero-padded), read back to stdout and to a file
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let w = admin(&["nvmeof", "write", a, "--nqn", NQN, "--lba", "5", h[0], h[1]], &data).await.unwrap();
        assert!(w.contains("wrote 2 blocks"), "{w}");
        // The RAM chunk (128 KiB) it went to is in use now.
        let j: Value = serde_json::from_str(
            &admin(&["nvmeof", "list", a, "--nqn", NQN, "--json", h[0], h[1]], b"").await.unwrap(),
        )
        .unwrap();
        assert_eq!(j["namespaces"][0]["used_bytes"], 128 << 10);
        let text = admin(&["nvmeof", "list", a, "--nqn", NQN, h[0], h[1]], b"").await.unwrap();
        let usage: Vec<_> = text.lines().nth(1).unwrap().split_whitespace().skip(5).take(2).collect();
        assert_eq!(usage.join(" "), fmt_bytes(128 << 10), "{text}");
        let raw =
            admin_raw(&["nvmeof", "read", a, "--nqn", NQN, "--lba", "5", "--count", "2", h[0], h[1]], b"")
                .await
                .unwrap();
        assert_eq!(raw.len(), 1024);
        assert_eq!(&raw[..1000], &data[..]);
        let file = std::env::temp_dir().join(format!("nvmeof-tools-read-{}", std::process::id()));
        let fs = file.to_str().unwrap();
        admin(
            &["nvmeof", "read", a, "--nqn", NQN, "--lba", "5", "--count", "2", "--file", fs, h[0], h[1]],
            b"",
        )
        .await
        .unwrap();
        let got = std::fs::read(&file).unwrap();
        let _ = std::fs::remove_file(&file);
        assert_eq!(&got[..1000], &data[..]);
        assert!(got[1000..].iter().all(|&b| b == 0));
        // copy: the two blocks at 5, second first, to 60 (Copy on the target), read back.
        let c = admin(
            &[
                "nvmeof", "copy", a, "--nqn", NQN, "--range", "6:1", "--range", "5:1", "--to", "60", h[0],
                h[1],
            ],
            b"",
        )
        .await
        .unwrap();
        assert!(c.contains("copied 2 blocks") && c.contains("2 range(s) to lba 60"), "{c}");
        let copied =
            admin_raw(&["nvmeof", "read", a, "--nqn", NQN, "--lba", "60", "--count", "2", h[0], h[1]], b"")
                .await
                .unwrap();
        assert_eq!((&copied[..512], &copied[512..]), (&raw[512..], &raw[..512]));
        // A destination past the namespace: a usage error before anything is sent.
        let past = (NS_SIZE / 512 - 1).to_string();
        let e = admin(&["nvmeof", "copy", a, "--nqn", NQN, "--range", "5:2", "--to", &past, h[0], h[1]], b"")
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        // verify: from lba 60 to the end of the namespace (several commands past
        // VSL, 1 MiB); past the end a usage error.
        let j: Value = serde_json::from_str(
            &admin(&["nvmeof", "verify", a, "--nqn", NQN, "--lba", "60", "--json", h[0], h[1]], b"")
                .await
                .unwrap(),
        )
        .unwrap();
        assert_eq!((j["lba"].as_u64(), j["blocks"].as_u64()), (Some(60), Some(NS_SIZE / 512 - 60)), "{j}");
        let v = admin(&["nvmeof", "verify", a, "--nqn", NQN, "--lba", "5", "--count", "2", h[0], h[1]], b"")
            .await
            .unwrap();
        assert!(v.starts_with("verified 2 blocks (1 KiB) at lba 5 of nsid 1 in "), "{v}");
        let e =
            admin(&["nvmeof", "verify", a, "--nqn", NQN, "--lba", &past, "--count", "2", h[0], h[1]], b"")
                .await
                .unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        // compare-and-write: blocks 60..62 hold what the copy put there; a
        // match writes, a stale --expected is exit code 1 and writes
        // nothing, files of different lengths a usage error.
        let dir = std::env::temp_dir();
        let (old_f, new_f) = (
            dir.join(format!("nvmeof-caw-old-{}", std::process::id())),
            dir.join(format!("nvmeof-caw-new-{}", std::process::id())),
        );
        let fresh = vec![0x3Cu8; 1024];
        std::fs::write(&old_f, &copied).unwrap();
        std::fs::write(&new_f, &fresh).unwrap();
        let (old_s, new_s) = (old_f.to_str().unwrap(), new_f.to_str().unwrap());
        let caw = |expected: &'static str| {
            let (o, n) = if expected == "old" { (old_s, new_s) } else { (new_s, old_s) };
            let (o, n) = (o.to_string(), n.to_string());
            async move {
                admin(
                    &[
                        "nvmeof",
                        "compare-and-write",
                        a,
                        "--nqn",
                        NQN,
                        "--lba",
                        "60",
                        "--expected",
                        &o,
                        "--new",
                        &n,
                        h[0],
                        h[1],
                    ],
                    b"",
                )
                .await
            }
        };
        let w = caw("old").await.unwrap();
        assert_eq!(w.trim(), "compared and wrote 2 blocks at lba 60 of nsid 1");
        let now = |lba: &str| {
            let lba = lba.to_string();
            async move {
                admin_raw(
                    &["nvmeof", "read", a, "--nqn", NQN, "--lba", &lba, "--count", "2", h[0], h[1]],
                    b"",
                )
                .await
                .unwrap()
            }
        };
        assert_eq!(now("60").await, fresh);
        let e = caw("old").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus, "{e}");
        assert!(e.message.contains("miscompare") && e.message.contains("nothing written"), "{e}");
        assert_eq!(now("60").await, fresh);
        std::fs::write(&new_f, &fresh[..512]).unwrap();
        let e = caw("old").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        let _ = (std::fs::remove_file(&old_f), std::fs::remove_file(&new_f));
        // Errors: exit codes and messages.
        let e = admin(
            &["nvmeof", "list", a, "--nqn", NQN, "--hostnqn", "nqn.2024-01.io.nvmeof.test:intruder"],
            b"",
        )
        .await
        .unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus, "{e}");
        assert!(e.message.contains("host not allowed") && e.message.contains("SCT 1 SC 0x84"), "{e}");
        let e = admin(&["nvmeof", "list", a, "--nqn", "nqn.2024-01.io.nvmeof.test:nope", h[0], h[1]], b"")
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NotFound, "{e}");
        assert!(e.message.contains("subsystem not found") && e.message.contains("SC 0x82"), "{e}");
        let e = admin(&["nvmeof", "identify", a, "--nqn", NQN, "--nsid", "9", h[0], h[1]], b"")
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NotFound, "{e}");
        assert!(e.message.contains("namespace 9 not found"), "{e}");
        let e =
            admin(&["nvmeof", "read", a, "--nqn", NQN, "--lba", "32767", "--count", "2", h[0], h[1]], b"")
                .await
                .unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        // nvme connect's socket options: a source address works (discovery's
        // connection too, without --nqn); a missing interface is a usage error.
        let via = ["--host-traddr", "127.0.0.2", "--host-iface", "lo", "--tos", "16"];
        assert_eq!(admin(&[&["nvmeof", "list", a, h[0], h[1]][..], &via].concat(), b"").await.unwrap(), text);
        let e =
            admin(&["nvmeof", "list", a, "--host-iface", "nvmeof-none0", h[0], h[1]], b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        assert!(e.message.contains("\"nvmeof-none0\": no such network interface"), "{e}");
        // A port nobody listens on: the target's port after it stopped (held,
        // so no test beside this one takes it meanwhile).
        let addr = t.addr.clone();
        t.stop().await;
        let _held = HeldPort::at(addr.parse().unwrap());
        let e = admin(&["nvmeof", "list", &addr, "--nqn", NQN, h[0], h[1]], b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Transport, "{e}");
        assert!(e.message.contains("refused"), "{e}");
        // Without --nqn the discovery that would find the subsystem is what fails.
        let e = admin(&["nvmeof", "list", &addr, h[0], h[1]], b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Transport, "{e}");
        assert!(e.message.contains("discovery at") && e.message.contains("refused"), "{e}");
    })
    .await;
}

/// `nvmeof smart-log`: the target's SMART counters after the probe's I/O,
/// as nvme-cli names them; of every namespace or of one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_smart_log_counts_the_probes_io() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let a = t.addr.as_str();
        let w = t.probe(&["--rw", "randwrite", "--bs", "4k", "--count", "300", "--qd", "4"]).await;
        let r = t.probe(&["--rw", "randread", "--bs", "64k", "--count", "50", "--qd", "4"]).await;
        assert_eq!((w.write.ops, r.read.ops), (300, 50));
        for nsid in [None, Some("1")] {
            let mut args = vec!["nvmeof", "smart-log", a, "--nqn", NQN, "--json"];
            args.extend(nsid.iter().flat_map(|n| ["--nsid", n]));
            let j: Value = serde_json::from_str(&admin(&args, b"").await.unwrap()).unwrap();
            // 300 × 4 KiB = 2400 units of 512 bytes: 3 data units (rounded up);
            // 50 × 64 KiB = 6400: 7.
            assert_eq!(
                (
                    &j["host_write_commands"],
                    &j["data_units_written"],
                    &j["host_read_commands"],
                    &j["data_units_read"]
                ),
                (&Value::from(300), &Value::from(3), &Value::from(50), &Value::from(7)),
                "{nsid:?}: {j}"
            );
            assert_eq!(
                (&j["critical_warning"], &j["num_err_log_entries"]),
                (&Value::from(0), &Value::from(0))
            );
        }
        let text = admin(&["nvmeof", "smart-log", a, "--nqn", NQN], b"").await.unwrap();
        assert!(text.lines().any(|l| l == "host_write_commands: 300"), "{text}");
        let e = admin(&["nvmeof", "smart-log", a, "--nqn", NQN, "--nsid", "9"], b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NotFound, "{e}");
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_write_pads_with_zeroes_up_to_count() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let a = t.addr.as_str();
        // 3 MiB of 0xAB at lba 100, then 1.5 MiB + 1000 bytes of input with
        // --count covering 2.5 MiB more: the input lands as given, the rest of
        // the range (last partial block, then whole commands of padding) reads
        // as zeroes, and nothing past --count changes.
        let fill = vec![0xABu8; 3 << 20];
        let w = admin(&["nvmeof", "write", a, "--nqn", NQN, "--lba", "100"], &fill).await.unwrap();
        assert!(w.contains("wrote 6144 blocks"), "{w}");
        let data: Vec<u8> = (0..(3 << 19) + 1000u32).map(|i| (i % 251) as u8 + 1).collect();
        let count = 5 * 1024; // 2.5 MiB of blocks
        let w = admin(
            &["nvmeof", "write", a, "--nqn", NQN, "--lba", "100", "--count", &count.to_string()],
            &data,
        )
        .await
        .unwrap();
        assert!(w.contains(&format!("wrote {count} blocks")), "{w}");
        let raw = admin_raw(&["nvmeof", "read", a, "--nqn", NQN, "--lba", "100", "--count", "6144"], b"")
            .await
            .unwrap();
        assert_eq!(raw.len(), 3 << 20);
        assert!(raw[..data.len()] == data[..], "input bytes differ");
        let pad_end = count * 512;
        assert!(raw[data.len()..pad_end].iter().all(|&b| b == 0), "padding is not zeroes");
        assert!(raw[pad_end..].iter().all(|&b| b == 0xAB), "blocks past --count changed");
        t.stop().await;
    })
    .await;
}

/// A binary of nvmeof-tools, built on demand.
fn binary(name: &str) -> PathBuf {
    nvmeof_tests::harness::built_binary("nvmeof-tools", name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binaries_end_to_end() {
    bounded(300, async {
        let t = start_target(512, None).await;
        let probe = binary("nvmeof-probe");
        let a = t.addr.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(probe)
                .args([
                    a.as_str(),
                    "--nqn",
                    NQN,
                    "--ping",
                    "--count",
                    "4",
                    "--interval",
                    "1ms",
                    "--rw",
                    "read",
                ])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<&str> = stdout.lines().filter(|l| l.contains(" from ")).collect();
        assert_eq!(lines.len(), 4, "{stdout}");
        for (i, l) in lines.iter().enumerate() {
            assert!(l.starts_with("4 KiB from ") && l.contains(&format!("request={}", i + 1)), "{l}");
        }
        assert!(stdout.contains("4 requests completed"), "{stdout}");
        // JSON output parses; the exit code of a missing namespace is 4.
        let probe = binary("nvmeof-probe");
        let a = t.addr.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(&probe)
                .args([a.as_str(), "--nqn", NQN, "--count", "100", "--json"])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(out.status.success());
        let j: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
        check_fio_json(&j, [Some(4096); 3], "binary --json");
        let cli = binary("nvmeof");
        let a = t.addr.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(cli).args(["identify", a.as_str(), "--nqn", NQN, "--nsid", "3"]).output().unwrap()
        })
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("namespace 3 not found"));
        // An output file that cannot be written is a usage error before the run, not after it.
        let probe = binary("nvmeof-probe");
        let a = t.addr.clone();
        let missing = std::env::temp_dir().join(format!("nvmeof-probe-no-such-dir-{}", std::process::id()));
        let out = tokio::task::spawn_blocking(move || {
            let mut outs = Vec::new();
            for flag in ["--hdr-log", "--plot"] {
                let f = missing.join("out");
                let args = [a.as_str(), "--nqn", NQN, "--count", "100", "-q", flag, f.to_str().unwrap()];
                outs.push(Command::new(&probe).args(args).output().unwrap());
            }
            outs
        })
        .await
        .unwrap();
        for out in out {
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert!(err.contains("cannot write the"), "{err}");
            assert!(out.stdout.is_empty(), "the run went ahead: {}", String::from_utf8_lossy(&out.stdout));
        }
        t.stop().await;
    })
    .await;
}

/// Runs `bin args` with its standard output closed before it writes
/// (`| head` that has already exited) and returns its exit status and stderr.
fn run_with_stdout_closed(bin: PathBuf, args: Vec<String>) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_stop_quietly_when_their_reader_goes_away() {
    // `nvmeof list | head` ended with "output: Broken pipe" and exit 2, and
    // `nvmeof-probe --ping ... | head` panicked in println! (exit 101). Both
    // now end quietly with 0, as a Unix tool ends on SIGPIPE; the probe stops
    // its run instead of pinging on for --count requests.
    bounded(300, async {
        let t = start_target(512, None).await;
        let (nvmeof, probe) = (binary("nvmeof"), binary("nvmeof-probe"));
        let a = t.addr.clone();
        let list: Vec<String> = ["list", a.as_str(), "--nqn", NQN].map(String::from).into();
        let (st, err) =
            tokio::task::spawn_blocking(move || run_with_stdout_closed(nvmeof, list)).await.unwrap();
        assert_eq!(st.code(), Some(0), "nvmeof list: {err}");
        assert!(err.is_empty(), "nvmeof list: {err}");
        let a = t.addr.clone();
        let ping: Vec<String> =
            [a.as_str(), "--nqn", NQN, "--ping", "--count", "100000", "--interval", "1ms", "--rw", "read"]
                .map(String::from)
                .into();
        let t0 = std::time::Instant::now();
        let (st, err) =
            tokio::task::spawn_blocking(move || run_with_stdout_closed(probe, ping)).await.unwrap();
        assert_eq!(st.code(), Some(0), "nvmeof-probe --ping: {err}");
        assert!(!err.contains("panicked"), "{err}");
        // 100000 pings 1 ms apart would take minutes.
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(60),
            "the probe did not stop: {:?}",
            t0.elapsed()
        );
        t.stop().await;
    })
    .await;
}

/// `nvmeof events`: ANA changes of the controller, discovery log changes of
/// the discovery controller, one line (or JSON object) each, ending after
/// `--count`. The target changes every 500 ms until the watch ends, so the
/// first change after it subscribed is the one it prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_cli_events() {
    bounded(60, async {
        let toml = |state: &str, extra: &str| {
            TargetConfig::from_toml(&format!(
                "[[port]]\nlisten = \"127.0.0.1:0\"\nana_state = \"{state}\"\n\n[[subsystem]]\nnqn = \"{NQN}\"\n\
                 [[subsystem.namespace]]\nnsid = 1\nram = \"1M\"\n{extra}"
            ))
            .unwrap()
        };
        init_tracing();
        let server = Server::start(&toml("optimized", "")).await.unwrap();
        let a = server.local_addrs[0].to_string();
        // Toggles the port's ANA state (or, with `sub`, a second subsystem) until `done`.
        let toggle = |sub: bool, done: Arc<std::sync::atomic::AtomicBool>| {
            let server = &server;
            async move {
                for i in 0..100 {
                    if done.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    let (state, extra) = match (sub, i % 2) {
                        (false, 0) => ("inaccessible", String::new()),
                        (false, _) => ("optimized", String::new()),
                        (true, 0) => ("optimized", format!("[[subsystem]]\nnqn = \"{NQN}-2\"\n")),
                        (true, _) => ("optimized", String::new()),
                    };
                    server.reload(&toml(state, &extra)).unwrap();
                }
            }
        };
        let watch = |args: Vec<String>, sub: bool| {
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let d2 = done.clone();
            let w = async move {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let r = admin(&args, b"").await;
                d2.store(true, std::sync::atomic::Ordering::SeqCst);
                r
            };
            let t = toggle(sub, done);
            async move { tokio::join!(w, t).0 }
        };
        let args = |extra: &[&str]| {
            let mut v: Vec<String> = ["nvmeof", "events", a.as_str(), "--count", "2", "--duration", "30s"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            v.extend(extra.iter().map(|s| s.to_string()));
            v
        };
        let text = watch(args(&["--nqn", NQN]), false).await.unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with(&format!("watching {NQN} at {a} (cntlid ")), "{text}");
        assert!(lines[0].ends_with("events enabled 0x900)"), "{text}");
        // Two changes in a row: the log was re-read and the notice re-armed in between.
        for l in &lines[1..] {
            assert!(l.starts_with("ANA change (change count "), "{text}");
            assert!(l.ends_with("optimized [1]") || l.ends_with("inaccessible [1]"), "{text}");
        }
        assert_ne!(lines[1], lines[2], "{text}");

        let json = watch(args(&["--nqn", NQN, "--json"]), false).await.unwrap();
        for l in json.lines() {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["event"], "ana-change", "{l}");
            assert_eq!(v["groups"][0]["grpid"], 1, "{l}");
        }
        assert_eq!(json.lines().count(), 2, "{json}");

        let disc = watch(args(&["--discovery", "--json"]), true).await.unwrap();
        let evs: Vec<Value> = disc.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(evs.len(), 2, "{disc}");
        let n = |v: &Value| v["log"]["records"].as_array().unwrap().len();
        assert!(evs.iter().all(|v| v["event"] == "discovery-change"), "{disc}");
        assert_eq!(n(&evs[0]).abs_diff(n(&evs[1])), 1, "a subsystem came or went: {disc}");
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// `nvmeof gen-dhchap-key` prints secrets nvme-cli's format describes, and
/// both tools authenticate with `--dhchap-secret` (DH-HMAC-CHAP) where the
/// target requires it; without it, or with a wrong one, they fail with an
/// NVMe-refusal exit code that says what to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_authenticate_with_dhchap_secrets() {
    use nvmeof_common::auth::{DhchapSecret, HashId};
    bounded(60, async {
        let parse = |s: String| s.trim().parse::<DhchapSecret>().unwrap_or_else(|e| panic!("{s:?}: {e}"));
        let k = parse(admin(&["nvmeof", "gen-dhchap-key"], b"").await.unwrap());
        assert_eq!((k.key().len(), k.transform()), (32, HashId::SHA256));
        let k3 = parse(admin(&["nvmeof", "gen-dhchap-key", "--hmac", "3"], b"").await.unwrap());
        assert_eq!((k3.key().len(), k3.transform()), (64, HashId::SHA512));
        let j: Value =
            serde_json::from_str(&admin(&["nvmeof", "--json", "gen-dhchap-key", "--hmac", "0", "--key-length", "48"], b"").await.unwrap())
                .unwrap();
        let k0 = parse(j["secret"].as_str().unwrap().to_string());
        assert_eq!((k0.key().len(), k0.transform()), (48, HashId(0)));
        assert_ne!(admin(&["nvmeof", "gen-dhchap-key"], b"").await.unwrap().trim(), k.to_string(), "random");
        assert!(admin::Cli::parse_args(["nvmeof", "gen-dhchap-key", "--key-length", "40"]).is_err());

        const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:a5a5a5a5-0000-4000-8000-000000000001";
        init_tracing();
        let cfg = TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n[[subsystem]]\nnqn = \"{NQN}\"\n\
             allowed_hosts = [{{ nqn = \"{HOST}\", dhchap_key = \"{k}\", dhchap_ctrl_key = \"{k3}\", dhchap_dhgroup = \"ffdhe2048\" }}]\n\
             [[subsystem.namespace]]\nram = \"1M\"\n"
        ))
        .unwrap();
        let server = Server::start(&cfg).await.unwrap();
        let a = server.local_addrs[0].to_string();
        let (ks, k3s) = (k.to_string(), k3.to_string());
        let list = |extra: &'static [&'static str], secrets: Vec<String>| {
            let a = a.clone();
            async move {
                let mut args: Vec<String> = ["nvmeof", "--hostnqn", HOST].iter().map(|s| s.to_string()).collect();
                args.extend(secrets);
                args.extend(["list", &a, "--nqn", NQN].iter().map(|s| s.to_string()));
                args.extend(extra.iter().map(|s| s.to_string()));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                admin(&args, b"").await
            }
        };
        let out = list(&[], vec!["--dhchap-secret".into(), ks.clone()]).await.unwrap();
        assert!(out.contains("1 MiB") || out.contains("1.0 MiB") || out.contains("1048576"), "{out}");
        list(&[], vec!["--dhchap-secret".into(), ks.clone(), "--dhchap-ctrl-secret".into(), k3s.clone()]).await.unwrap();
        let e = list(&[], vec![]).await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus, "{e}");
        assert!(e.to_string().contains("--dhchap-secret"), "{e}");
        let e = list(&[], vec!["--dhchap-secret".into(), k0.to_string()]).await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus, "{e}");
        assert!(e.to_string().contains("refused"), "{e}");
        // The controller key of the wrong host: the tool refuses the target.
        let e = list(&[], vec!["--dhchap-secret".into(), ks.clone(), "--dhchap-ctrl-secret".into(), ks.clone()])
            .await
            .unwrap_err();
        assert!(e.to_string().contains("dhchap_ctrl_secret"), "{e}");
        // nvme-cli's config.json gives the keys where the command line gives
        // none (as `nvme connect`): the port's keys, or the host's own key.
        let port = a.rsplit_once(':').unwrap().1.to_string();
        let dir = test_dir("dhchap");
        let json = dir.join("config.json");
        let cfg_arg = |p: &std::path::Path| vec!["--config".to_string(), p.display().to_string()];
        std::fs::write(
            &json,
            format!(
                r#"[{{"hostnqn":"{HOST}","subsystems":[{{"nqn":"{NQN}","ports":[{{"transport":"tcp","traddr":"127.0.0.1","trsvcid":"{port}","dhchap_key":"{ks}","dhchap_ctrl_key":"{k3s}"}}]}}]}}]"#
            ),
        )
        .unwrap();
        list(&[], cfg_arg(&json)).await.unwrap();
        let e = list(&[], vec!["--config".into(), "none".into()]).await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus, "without the file: {e}");
        // The wrong controller key in the file: the tool refuses the target.
        std::fs::write(&json, std::fs::read_to_string(&json).unwrap().replace(&k3s, &ks)).unwrap();
        assert!(list(&[], cfg_arg(&json)).await.is_err(), "the controller proved a key it does not hold");
        std::fs::write(&json, format!(r#"[{{"hostnqn":"{HOST}","dhchap_key":"{ks}"}}]"#)).unwrap();
        list(&[], cfg_arg(&json)).await.unwrap();
        std::fs::write(&json, "[{").unwrap();
        let e = list(&[], cfg_arg(&json)).await.unwrap_err();
        assert!(e.exit_code() == ExitCode::Usage && e.to_string().contains("config.json"), "{e}");
        std::fs::write(&json, format!(r#"[{{"hostnqn":"{HOST}","dhchap_key":"{ks}"}}]"#)).unwrap();
        let opts = ProbeOptions::parse_args([
            "nvmeof-probe", &a, "--nqn", NQN, "--hostnqn", HOST, "--config", json.to_str().unwrap(), "--time", "200ms",
            "--quiet",
        ])
        .unwrap();
        assert!(nvmeof_tools::run_probe(&opts).await.unwrap().read.ops > 0);
        let _ = std::fs::remove_dir_all(&dir);
        // The probe, two queues, each authenticated.
        let opts = ProbeOptions::parse_args([
            "nvmeof-probe", &a, "--nqn", NQN, "--hostnqn", HOST, "--dhchap-secret", &ks, "--dhchap-ctrl-secret", &k3s,
            "--queues", "2", "--time", "300ms", "--quiet",
        ])
        .unwrap();
        let r = nvmeof_tools::run_probe(&opts).await.unwrap();
        assert!(r.read.ops > 0);
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_cli_reservations() {
    bounded(60, async {
        init_tracing();
        let t = start_target(512, None).await;
        // A second namespace with reservations.
        let sub = t.server.target.subsystem(NQN).expect("the test subsystem");
        let mem = Arc::new(MemBackend::new(NS_SIZE, 512));
        sub.add_namespace(Arc::new(Namespace::new(NQN, 2, mem).with_reservations(true)));
        let a = t.addr.as_str();
        fn resv<'a>(a: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
            let mut v = vec!["nvmeof", "resv", a, "--nqn", NQN, "--nsid", "2"];
            v.extend_from_slice(extra);
            v
        }
        let done = admin(&resv(a, &["register", "--new-key", "0xa1"]), b"").await.unwrap();
        assert_eq!(done, "nsid 2: reservation register done\n");
        admin(&resv(a, &["acquire", "--key", "161", "--rtype", "write-exclusive"]), b"").await.unwrap();
        let j: Value = serde_json::from_str(&admin(&resv(a, &["--json"]), b"").await.unwrap()).unwrap();
        assert_eq!((j["rtype"].as_str(), j["regctl"].as_u64()), (Some("write-exclusive"), Some(1)), "{j}");
        assert_eq!(
            (j["registrants"][0]["rkey"].as_u64(), j["registrants"][0]["holds"].as_bool()),
            (Some(0xa1), Some(true))
        );
        let text = admin(&resv(a, &[]), b"").await.unwrap();
        assert!(
            text.starts_with("nsid 2: reservation write-exclusive, 1 registrant(s), generation 1\n"),
            "{text}"
        );
        assert!(text.lines().nth(2).unwrap().trim_end().ends_with("0xa1                yes"), "{text}");
        // Another host (another host ID) may not write; this one may.
        let other = nvmeof_initiator::ConnectOptions {
            host: Some(nvmeof_initiator::HostIdentity::from_id(*b"tools-resv-other")),
            io_queues: 1,
            ..Default::default()
        };
        let ctrl = nvmeof_initiator::Controller::connect(t.server.local_addrs[0], NQN, other).await.unwrap();
        let e = ctrl.namespace(2).await.unwrap().write(0, &[1u8; 512]).await.unwrap_err();
        assert_eq!(e.status().map(|s| s.code()), Some(nvmeof_common::Status::RESERVATION_CONFLICT), "{e}");
        ctrl.shutdown().await.unwrap();
        // `--hostid` acts as that host (as `nvme resv-register --hostid`):
        // the other host registers, and is a registrant by its ID.
        let other_id = "746f6f6c-732d-7265-7376-2d6f74686572"; // b"tools-resv-other"
        admin(&resv(a, &["register", "--new-key", "0xb2", "--hostid", other_id]), b"").await.unwrap();
        let j: Value = serde_json::from_str(&admin(&resv(a, &["--json"]), b"").await.unwrap()).unwrap();
        assert_eq!(j["regctl"].as_u64(), Some(2), "{j}");
        let hostid: String = b"tools-resv-other".iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            (j["registrants"][1]["hostid"].as_str(), j["registrants"][1]["rkey"].as_u64()),
            (Some(hostid.as_str()), Some(0xb2))
        );
        admin(&resv(a, &["unregister", "--key", "0xb2", "--hostid", other_id]), b"").await.unwrap();
        assert!(admin::Cli::parse_args(resv(a, &["--hostid", "tools-resv-other"])).is_err(), "not a UUID");
        admin(&["nvmeof", "write", a, "--nqn", NQN, "--nsid", "2", "--lba", "0"], &[2u8; 512]).await.unwrap();
        // Usage and status errors exit as such.
        let e = admin(&resv(a, &["acquire", "--key", "0xa1"]), b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        let e = admin(&resv(a, &["release", "--key", "0xb2", "--rtype", "write-exclusive"]), b"")
            .await
            .unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus, "{e}");
        assert!(e.to_string().contains("reservation conflict"), "{e}");
        assert!(admin::Cli::parse_args(resv(a, &["register", "--new-key", "0xZZ"])).is_err());
        admin(&resv(a, &["release", "--key", "0xa1", "--rtype", "write-exclusive"]), b"").await.unwrap();
        admin(&resv(a, &["unregister", "--key", "0xa1"]), b"").await.unwrap();
        let j: Value = serde_json::from_str(&admin(&resv(a, &["--json"]), b"").await.unwrap()).unwrap();
        assert_eq!(
            (j["rtype"].as_str(), j["regctl"].as_u64(), j["generation"].as_u64()),
            (Some("none"), Some(0), Some(4))
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_lists_and_manages_a_zoned_namespace() {
    bounded(60, async {
        init_tracing();
        let cfg = TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{NQN}\"\n\
             [[subsystem.namespace]]\nram = \"4M\"\nzoned = true\nzone_size = \"1M\"\n"
        ))
        .unwrap();
        let server = Server::start(&cfg).await.expect("target starts");
        let a = server.local_addrs[0].to_string();
        let zones = |args: &'static [&'static str]| {
            let a = a.clone();
            async move {
                let mut v = vec!["nvmeof", "zones", a.as_str(), "--nqn", NQN];
                v.extend_from_slice(args);
                admin(&v, b"").await
            }
        };
        let report = zones(&[]).await.unwrap();
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 4, "{report}");
        assert_eq!(lines[1], "zone 1: slba 2048 wp 2048 capacity 2048 EMPTY");
        assert_eq!(
            zones(&["finish", "--lba", "2048"]).await.unwrap().trim(),
            "finish: the zone at lba 2048 of nsid 1"
        );
        let v: Value = serde_json::from_str(&zones(&["--json"]).await.unwrap()).unwrap();
        assert_eq!(
            (v["zones"][1]["state"].as_str(), v["zones"][1]["wp"].as_u64()),
            (Some("FULL"), Some(4096))
        );
        // A full zone cannot be opened: the status, exit code 1.
        let e = zones(&["open", "--lba", "2048"]).await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus, "{e}");
        let e = zones(&["reset"]).await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        zones(&["reset", "--all"]).await.unwrap();
        assert!(zones(&[]).await.unwrap().lines().all(|l| l.ends_with("EMPTY")));
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// `--zonemode zbd` on a zoned namespace (16 zones of 256 KiB, 3 open and 4
/// active at most): every write lands on a write pointer (the target refuses
/// others with Zone Invalid Write, which would end the run), sequential and
/// random runs reset full zones and go on, mixed runs verify, Zone Append
/// shares zones; writes without the mode, or the mode on a conventional
/// namespace, are usage errors.
/// `nvmeof flush`, `dsm`, `write-zeroes`, `get-feature`, `set-feature` and
/// `show-regs` against the RAM target: the blocks they change read back as
/// they should, the Flush reaches the backend, and the features and
/// registers read are the target's limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_nvm_feature_and_register_commands() {
    bounded(60, async {
        let (t, log) = start_target_with_log().await;
        let a = t.addr.as_str();
        let run = |args: &'static [&'static str]| {
            let mut v = vec!["nvmeof"];
            v.extend_from_slice(args);
            v.insert(2, a);
            v
        };
        let ok = |args: &'static [&'static str]| {
            let v = run(args);
            async move { admin(&v, b"").await.unwrap_or_else(|e| panic!("{v:?}: {e}")) }
        };
        let fails = |args: &'static [&'static str]| {
            let v = run(args);
            async move { admin(&v, b"").await.map(drop).expect_err("fails") }
        };
        let data = nvmeof_tests::harness::pattern(32 * 512, 7);
        let write = |data: Vec<u8>| {
            let v = run(&["write", "--lba", "0"]);
            async move { admin(&v, &data).await }
        };
        let read32 = || {
            let v = run(&["read", "--lba", "0", "--count", "32"]);
            async move { admin_raw(&v, b"").await.unwrap() }
        };
        write(data.clone()).await.unwrap();
        assert_eq!(read32().await, data);

        // dsm: the ranges read as zeroes (DLFEAT), the rest is kept.
        let out = ok(&["dsm", "--range", "0:8", "--range", "16:4"]).await;
        assert_eq!(out, "deallocated 12 blocks (6 KiB) in 2 range(s) of nsid 1\n");
        let mut want = data.clone();
        want[..8 * 512].fill(0);
        want[16 * 512..20 * 512].fill(0);
        assert_eq!(read32().await, want);
        let e = fails(&["dsm", "--range", "32760:16"]).await;
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        // write-zeroes
        let j: Value =
            serde_json::from_str(&ok(&["write-zeroes", "--lba", "8", "--count", "2", "--json"]).await)
                .unwrap();
        assert_eq!(
            (j["blocks"].as_u64(), j["bytes"].as_u64(), j["deac"].as_bool()),
            (Some(2), Some(1024), Some(false))
        );
        want[8 * 512..10 * 512].fill(0);
        assert_eq!(read32().await, want);
        // flush reaches the backend of the namespace named
        assert!(ok(&["flush", "--nsid", "2"]).await.starts_with("flushed nsid 2 in "));
        assert_eq!(log.take(), "F");

        // get-feature: the target's limits and this host's identifier
        let q = Limits::default().max_io_queues;
        let out = ok(&["get-feature", "-f", "7"]).await;
        assert!(
            out.starts_with(&format!(
                "get-feature:0x07 (Number of Queues), Current value:{:#010x}\n",
                (q as u32 - 1) * 0x1_0001
            )),
            "{out}"
        );
        assert!(out.contains(&format!("(NSQA): {q}\n")) && out.contains(&format!("(NCQA): {q}\n")), "{out}");
        let hostid = nvmeof_initiator::HostIdentity::default_for_host().id;
        let j: Value = serde_json::from_str(&ok(&["get-feature", "-f", "0x81", "--json"]).await).unwrap();
        let hex: String = hostid.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!((j["name"].as_str(), j["data"].as_str()), (Some("Host Identifier"), Some(hex.as_str())));
        let out = ok(&["get-feature", "-f", "6", "--sel", "supported"]).await;
        assert!(
            out.starts_with("get-feature:0x06 (Volatile Write Cache), Capabilities:")
                && out.contains("changeable: "),
            "{out}"
        );
        let e = fails(&["get-feature", "-f", "4"]).await;
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus);
        assert!(e.message.contains("invalid field in command"), "{e}");
        // set-feature: write protection, seen by get-feature and by writes
        ok(&["set-feature", "-f", "0x84", "-n", "1", "-v", "1"]).await;
        assert!(ok(&["get-feature", "-f", "0x84", "-n", "1"])
            .await
            .contains("Namespace Write Protect: Write Protect\n"));
        let e = write(data.clone()).await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus);
        assert!(e.message.contains("namespace is write protected"), "{e}");
        ok(&["set-feature", "-f", "0x84", "-n", "1", "-v", "0"]).await;
        write(data.clone()).await.unwrap();
        assert!(ok(&["get-feature", "-f", "0x84", "-n", "1"]).await.contains("No Write Protect"));

        // show-regs: CAP.MQES is the queue entry limit, the controller is enabled and ready
        let out = ok(&["show-regs"]).await;
        let mqes = Limits::default().max_queue_entries;
        for line in [format!("(MQES): {mqes}\n"), "Enable (EN): yes\n".into(), "Ready (RDY): yes\n".into()] {
            assert!(out.contains(&line), "{line:?} in {out}");
        }
        let j: Value = serde_json::from_str(&ok(&["show-regs", "--json"]).await).unwrap();
        assert_eq!(
            (j["decoded"]["mqes"].as_u64(), j["csts"].as_u64().map(|c| c & 1)),
            (Some(mqes as u64), Some(1))
        );
        assert!(admin::Cli::parse_args(["nvmeof", "get-feature", a, "-f", "256"]).is_err());

        // get-log: the Supported Log Pages log as bytes, a hex dump and its offset
        let raw = admin_raw(&run(&["get-log", "-i", "0", "-l", "1024", "--raw-binary"]), b"").await.unwrap();
        assert_eq!(raw.len(), 1024);
        let lids = nvmeof_common::spec::log::decode_supported_logs(&raw);
        for lid in [LogPageId::ERROR, LogPageId::SMART, LogPageId::ANA] {
            assert!(lids.contains(&lid), "{lid:?} in {lids:?}");
        }
        let out = ok(&["get-log", "-i", "0", "-l", "32", "-o", "8"]).await;
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ");
        let want = format!("Log page 0x00, 32 bytes from offset 8:\n00000008: {}  \"", hex(&raw[8..24]));
        assert!(out.starts_with(&want), "{out}");
        assert_eq!(out.lines().count(), 3, "{out}");
        let e = fails(&["get-log", "-i", "2", "-l", "510"]).await;
        assert_eq!(e.exit_code(), ExitCode::Usage, "{e}");
        t.stop().await;
    })
    .await;
}

/// `--rw trim` and `randtrim` deallocate each request's blocks with Dataset
/// Management (one range), reported as fio's `trim`; trimmed blocks read
/// back as zeroes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_modes_deallocate_and_are_reported() {
    bounded(60, async {
        let (t, log) = start_target_with_log().await;

        let r = t
            .probe(&["--nsid", "2", "--rw", "randtrim", "--bs", "8k", "--qd", "4", "--count", "50", "-q"])
            .await;
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!((r.trim.ops, r.trim.bytes, r.read.ops, r.write.ops), (50, 50 * 8192, 0, 0));
        assert_eq!(log.take(), "D".repeat(50));
        let j = r.to_fio_json();
        assert_eq!(
            (j["jobs"][0]["trim"]["total_ios"].as_u64(), j["jobs"][0]["trim"]["io_bytes"].as_u64()),
            (Some(50), Some(50 * 8192))
        );
        assert_eq!(j["jobs"][0]["job options"]["rw"], "randtrim");
        let text = r.to_text();
        assert!(text.contains("(rw=randtrim, bs=8 KiB,") && text.contains("\n  trim: IOPS="), "{text}");
        assert!(!text.contains("  read:") && !text.contains("  write:"), "{text}");

        // Sequential: 16 units written, the first 8 trimmed read back as zeroes.
        t.probe(&["--rw", "write", "--bs", "4k", "--count", "16", "-q"]).await;
        let r = t.probe(&["--rw", "trim", "--bs", "4k", "--count", "8", "-q"]).await;
        assert_eq!(r.trim.ops, 8);
        let data = admin_raw(&["nvmeof", "read", &t.addr, "--nqn", NQN, "--lba", "0", "--count", "128"], b"")
            .await
            .unwrap();
        assert!(data[..32768].iter().all(|&b| b == 0), "trimmed blocks hold data");
        assert!(
            data[32768..].chunks(512).all(|blk| blk.iter().any(|&b| b != 0)),
            "untrimmed blocks lost their data"
        );
        // trimwrite writes the units it trimmed: 4 of the 8 zeroed units hold data again.
        let r = t.probe(&["--rw", "trimwrite", "--bs", "4k", "--count", "8", "-q"]).await;
        assert_eq!((r.trim.ops, r.write.ops), (4, 4));
        let data = admin_raw(&["nvmeof", "read", &t.addr, "--nqn", NQN, "--lba", "0", "--count", "64"], b"")
            .await
            .unwrap();
        assert!(
            data[..16384].chunks(512).all(|blk| blk.iter().any(|&b| b != 0)),
            "trimwrite left units unwritten"
        );
        assert!(data[16384..].iter().all(|&b| b == 0), "trimwrite wrote past the units it trimmed");

        // trimwrite: each unit trimmed, then written (one slot: strictly in turn), in ping mode too.
        let r = t.probe(&["--nsid", "2", "--rw", "trimwrite", "--count", "20", "-q"]).await;
        assert_eq!((r.trim.ops, r.write.ops, log.take()), (10, 10, "Dw".repeat(10)));
        let r =
            t.probe(&["--nsid", "2", "--rw", "trimwrite", "--ping", "--interval", "0", "--count", "4"]).await;
        assert_eq!((r.trim.ops, r.write.ops, log.take()), (2, 2, "DwDw".to_string()));
        let r =
            t.probe(&["--nsid", "2", "--rw", "randtrim", "--ping", "--interval", "0", "--count", "3"]).await;
        assert_eq!((r.trim.ops, log.take().as_str()), (3, "DDD"));
        for bad in [["--rw", "trim", "--verify"], ["--rw", "randtrim", "--fua"]] {
            let e = nvmeof_tools::run_probe(&t.opts(&bad)).await.map(drop).unwrap_err();
            assert_eq!(e.exit_code(), ExitCode::Usage, "{bad:?}: {e}");
        }
        t.stop().await;
    })
    .await;
}

/// `--bs READ,WRITE` and `--bssplit` (fio's): each direction's requests
/// have its sizes, drawn with the split's weights; random requests start on
/// multiples of the smallest size and end within the region; sequential
/// ones follow each other; the reports count the bytes each request moved
/// and name the sizes as fio does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_sizes_per_direction_and_split_reach_the_target() {
    bounded(60, async {
        let (t, log) = start_target_with_log().await;
        let within = |e: &(char, u64, u64), region: u64| e.1 + e.2 <= region;

        let r = t
            .probe(&["--nsid", "2", "--rw", "randrw", "--bs", "4k,16k", "--qd", "4", "--count", "200", "-q"])
            .await;
        assert!(r.error.is_none(), "{:?}", r.error);
        let ext = log.take_extents();
        assert_eq!(ext.len(), 200);
        for e in &ext {
            assert_eq!(e.2, if e.0 == 'R' { 4096 } else { 16384 }, "{e:?}");
            assert!(e.1 % 4096 == 0 && within(e, NS_SIZE), "{e:?}: not on a 4 KiB unit, or past the end");
        }
        let writes = ext.iter().filter(|e| e.0 == 'W').count() as u64;
        assert_eq!((r.read.ops, r.write.ops), (200 - writes, writes));
        assert_eq!((r.read.bytes, r.write.bytes), ((200 - writes) * 4096, writes * 16384));
        let j = r.to_fio_json();
        assert_eq!(j["jobs"][0]["job options"]["bs"], "4k,16k");
        assert_eq!(j["jobs"][0]["nvmeof_probe"]["bs"], "4k,16k");
        assert_eq!(j["jobs"][0]["write"]["io_bytes"].as_u64(), Some(writes * 16384));
        assert!(r.to_text().contains("(rw=randrw, bs=4k,16k,"), "{}", r.to_text());
        // The write size alone: one size, reported as before.
        let r = t.probe(&["--nsid", "2", "--rw", "randwrite", "--bs", "4k,16k", "--count", "20", "-q"]).await;
        assert!(log.take_extents().iter().all(|e| e.2 == 16384));
        assert_eq!(r.to_fio_json()["jobs"][0]["nvmeof_probe"]["bs"].as_u64(), Some(16384));

        // Sequential with a split: each write starts where the one before ended.
        let r = t
            .probe(&["--nsid", "2", "--rw", "write", "--bssplit", "4k/50:16k/50", "--count", "100", "-q"])
            .await;
        let ext = log.take_extents();
        assert_eq!(ext.len(), 100);
        let mut at = 0;
        for e in &ext {
            assert!(e.0 == 'W' && e.1 == at && (e.2 == 4096 || e.2 == 16384), "{e:?}, expected at {at}");
            at += e.2;
        }
        let small = ext.iter().filter(|e| e.2 == 4096).count();
        assert!((20..=80).contains(&small), "{small} of 100 writes of 4 KiB at 50%");
        assert_eq!(r.write.bytes, at);
        let opts = &r.to_fio_json()["jobs"][0]["job options"];
        assert_eq!((opts["bssplit"].as_str(), opts.get("bs")), (Some("4k/50:16k/50"), None));

        // A region barely larger than the largest request: requests move back to end within it.
        let r = t
            .probe(&[
                "--nsid",
                "2",
                "--rw",
                "randread",
                "--size",
                "80k",
                "--bssplit",
                "16k/50:64k/50",
                "--count",
                "100",
                "-q",
            ])
            .await;
        assert_eq!(r.read.ops, 100);
        let ext = log.take_extents();
        assert!(ext.iter().all(|e| within(e, 80 << 10) && e.1 % 16384 == 0), "{ext:?}");
        assert!(ext.iter().any(|e| e.2 == 65536 && e.1 == 16384), "no 64 KiB read at the region's last fit");

        // Ping mode: one request at a time, each with its direction's size.
        let r = t
            .probe(&[
                "--nsid",
                "2",
                "--ping",
                "--interval",
                "0",
                "--rw",
                "randrw",
                "--bs",
                "8k,4k",
                "--count",
                "20",
            ])
            .await;
        let ext = log.take_extents();
        assert_eq!(ext.len(), 20);
        assert!(ext.iter().all(|e| e.2 == if e.0 == 'R' { 8192 } else { 4096 }), "{ext:?}");
        assert_eq!(r.read.bytes + r.write.bytes, ext.iter().map(|e| e.2).sum::<u64>());

        // Zoned runs need one size.
        let e = nvmeof_tools::run_probe(&t.opts(&["--rw", "write", "--bs", "4k,8k", "--zonemode", "zbd"]))
            .await
            .map(drop);
        assert_eq!(e.unwrap_err().exit_code(), ExitCode::Usage);
        t.stop().await;
    })
    .await;
}

/// `--verify` with several request sizes (fio verifies bssplit runs too),
/// 6 KiB requests ending inside 4 KiB units: a mixed run on a fresh region
/// skips only never-written blocks (a unit half written by a 6 KiB write is
/// not taken for written), a read-back of a written region checks every
/// block of every size, and a flipped byte is found at its LBA only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_with_several_request_sizes() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let split = ["--bssplit", "4k/40:6k/30:64k/30"];
        let run = |rw: &'static str, offset: &'static str, size: &'static str, count: &'static str| {
            let mut a = vec!["--rw", rw, "--verify", "--offset", offset, "--size", size, "--count", count];
            a.extend(["--qd", "4", "--queues", "2"]);
            a
        };
        // Mostly writes: many units half written by 6 KiB writes stay so for a while.
        let mut a = run("randrw", "8m", "1m", "1500");
        a.extend(["--mix", "30"]);
        a.extend(split);
        let r = t.probe(&a).await;
        let v = r.verify.as_ref().unwrap();
        assert_eq!((v.mismatches, r.exit_code()), (0, ExitCode::Ok), "{:?}", v.first);
        assert!(v.unwritten_blocks > 0 && v.checked_blocks > 0, "{v:?}");
        assert_eq!(v.checked_blocks + v.unwritten_blocks, r.stats(OpKind::Read).bytes / 512);
        assert_eq!(v.written_blocks, r.stats(OpKind::Write).bytes / 512);

        // The whole of another region written, then read back in every size: all checked.
        let r = t
            .probe(&[
                "--rw", "write", "--verify", "--offset", "12m", "--size", "256k", "--bs", "4k", "--count",
                "64",
            ])
            .await;
        assert_eq!(r.verify.as_ref().unwrap().written_blocks, 512);
        let mut a = run("randread", "12m", "256k", "300");
        a.extend(split);
        let r = t.probe(&a).await;
        let v = r.verify.as_ref().unwrap();
        assert_eq!((v.mismatches, v.unwritten_blocks), (0, 0), "{:?}", v.first);
        assert_eq!(v.checked_blocks, r.stats(OpKind::Read).bytes / 512);
        let mut a = run("randrw", "12m", "256k", "300");
        a.extend(split);
        let v = t.probe(&a).await.verify.unwrap();
        assert_eq!((v.mismatches, v.unwritten_blocks), (0, 0), "{:?}", v.first);

        let bad_lba = 12 * 2048 + 77;
        t.mem.corrupt_byte(bad_lba * 512 + 300);
        let mut a = run("randread", "12m", "256k", "2000");
        a.extend(split);
        let r = t.probe(&a).await;
        let v = r.verify.as_ref().unwrap();
        assert!(
            v.mismatches > 0 && v.first.iter().all(|m| m.lba == bad_lba && m.offset == 300),
            "{:?}",
            v.first
        );
        assert_eq!(r.exit_code(), ExitCode::VerifyFailed);
        t.stop().await;
    })
    .await;
}

/// `--thinktime` (fio's): a slot pauses after each completion (after each N
/// with `--thinktime-blocks N`) before its next request, so one slot sends
/// at most one request per pause; the pause is not latency. Refused with
/// `--ping` and `--rate`, which space requests themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinktime_pauses_each_slot_between_requests() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let r =
            t.probe(&["--rw", "randread", "--qd", "1", "--time", "400ms", "--thinktime", "20ms", "-q"]).await;
        assert!(r.error.is_none(), "{:?}", r.error);
        // One request, then 20 ms: at most 21 in 400 ms.
        assert!((1..=21).contains(&r.read.ops), "{} reads in 400 ms with 20 ms pauses", r.read.ops);
        let p50 = r.to_fio_json()["jobs"][0]["read"]["lat_ns"]["percentile"]["50.000000"].as_u64().unwrap();
        assert!(p50 < 15_000_000, "the pause counted as latency: p50 {p50} ns");
        // A pause after every 10: more requests in the same time, at most 10 per pause.
        let r = t
            .probe(&[
                "--rw",
                "randread",
                "--time",
                "400ms",
                "--thinktime",
                "20ms",
                "--thinktime-blocks",
                "10",
                "-q",
            ])
            .await;
        assert!((22..=210).contains(&r.read.ops), "{} reads with a 20 ms pause every 10", r.read.ops);
        let j = r.to_fio_json();
        let o = &j["jobs"][0]["job options"];
        assert_eq!((o["thinktime"].as_str(), o["thinktime_blocks"].as_str()), (Some("20000"), Some("10")));
        assert!(r.to_text().contains(", thinktime=20ms every 10,"), "{}", r.to_text());
        for bad in [&["--thinktime", "1ms", "--ping"][..], &["--thinktime", "1ms", "--rate", "100"]] {
            let e = nvmeof_tools::run_probe(&t.opts(bad)).await.map(drop).unwrap_err();
            assert_eq!(e.exit_code(), ExitCode::Usage, "{bad:?}: {e}");
        }
        assert!(
            ProbeOptions::parse_args(["p", "x", "--thinktime-blocks", "2"]).is_err(),
            "needs --thinktime"
        );
        t.stop().await;
    })
    .await;
}

/// `--percentile-list` (fio's percentile_list): the JSON's percentile keys
/// and the text's cells are exactly those given, in order, with the decimals
/// they have; bad lists are usage errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn percentile_list_sets_the_reported_percentiles() {
    bounded(60, async {
        let t = start_target(512, None).await;
        let r = t
            .probe(&["--rw", "randrw", "--count", "300", "--percentile-list", "50:99.5:99.9999", "-q"])
            .await;
        let j = r.to_fio_json();
        for op in ["read", "write"] {
            let pct = j["jobs"][0][op]["lat_ns"]["percentile"].as_object().unwrap();
            let keys: Vec<&str> = pct.keys().map(String::as_str).collect();
            assert_eq!(keys, ["50.000000", "99.500000", "99.999900"], "{op}");
            let v: Vec<u64> = pct.values().map(|v| v.as_u64().unwrap()).collect();
            assert!(v[0] > 0 && v[0] <= v[1] && v[1] <= v[2], "{op}: {v:?}");
        }
        let text = r.to_text();
        assert!(
            text.contains(" 50.000th=[") && text.contains(" 99.500th=[") && text.contains("99.9999th=["),
            "{text}"
        );
        assert!(!text.contains("90.000th") && !text.contains("100.000th"), "{text}");
        let many = vec!["50"; 21].join(":");
        for bad in ["0", "101", "50:x", "", many.as_str()] {
            assert!(ProbeOptions::parse_args(["p", "x", "--percentile-list", bad]).is_err(), "{bad:?}");
        }
        t.stop().await;
    })
    .await;
}

/// `--fua` sets FUA on every write and `--flush-every N` sends one Flush
/// after each N completed writes (never before the Nth has reached the
/// target), reported as fio's `sync`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fua_and_flush_every_reach_the_target_and_are_reported() {
    bounded(60, async {
        let (t, log) = start_target_with_log().await;
        let take = || log.take();

        let r = t
            .probe(&[
                "--nsid",
                "2",
                "--rw",
                "randwrite",
                "--qd",
                "4",
                "--count",
                "64",
                "--fua",
                "--flush-every",
                "8",
                "-q",
            ])
            .await;
        assert!(r.error.is_none(), "{:?}", r.error);
        assert_eq!((r.write.ops, r.sync.ops, r.sync.bytes), (64, 8, 0));
        assert!(r.sync.min() > 0 && r.sync.percentile(99.0) >= r.sync.min());
        let ops = take();
        assert_eq!(
            (ops.matches('W').count(), ops.matches('w').count(), ops.matches('F').count()),
            (64, 0, 8),
            "{ops}"
        );
        // The k-th Flush follows at least 8k writes.
        let mut writes = 0;
        let mut flushes = 0;
        for c in ops.chars() {
            match c {
                'F' => {
                    flushes += 1;
                    assert!(writes >= 8 * flushes, "flush {flushes} after {writes} writes: {ops}");
                }
                _ => writes += 1,
            }
        }
        let j = r.to_fio_json();
        let job = &j["jobs"][0];
        assert_eq!(job["sync"]["total_ios"], 8, "{job}");
        assert_eq!(job["sync"]["lat_ns"]["N"], 8);
        assert_eq!(job["job options"]["fsync"], "8");
        assert_eq!(
            (job["nvmeof_probe"]["fua"].as_bool(), job["nvmeof_probe"]["flush_every"].as_u64()),
            (Some(true), Some(8))
        );
        let text = r.to_text();
        assert!(
            text.contains("bs=4 KiB, fua, flush_every=8,")
                && text.contains("  flush: 8 after every 8 writes\n    sync ("),
            "{text}"
        );

        // Mixed, no FUA: a Flush per 5 writes, whatever share the writes are.
        let r =
            t.probe(&["--nsid", "2", "--rw", "randrw", "--count", "100", "--flush-every", "5", "-q"]).await;
        let ops = take();
        assert_eq!(r.sync.ops, r.write.ops / 5);
        assert_eq!(
            (ops.matches('w').count() as u64, ops.matches('F').count() as u64, ops.matches('W').count()),
            (r.write.ops, r.write.ops / 5, 0),
            "{ops}"
        );
        assert!(r.to_fio_json()["jobs"][0]["nvmeof_probe"]["fua"] == false);

        // Without the flags, no FUA and no Flush; no `sync` block.
        let r = t.probe(&["--nsid", "2", "--rw", "write", "--count", "10", "-q"]).await;
        assert_eq!(take(), "w".repeat(10));
        assert!(r.to_fio_json()["jobs"][0].get("sync").is_none());
        assert!(!r.to_text().contains("flush"));

        // Ping mode times durable writes one at a time.
        let r = t
            .probe(&["--nsid", "2", "--rw", "write", "--ping", "--interval", "0", "--count", "3", "--fua"])
            .await;
        assert_eq!((r.write.ops, take().as_str()), (3, "WWW"));
        t.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_zonemode_zbd_writes_a_zoned_namespace() {
    bounded(60, async {
        init_tracing();
        let cfg = TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{NQN}\"\n\
             [[subsystem.namespace]]\nram = \"4M\"\nzoned = true\nzone_size = \"256K\"\n\
             max_open_zones = 3\nmax_active_zones = 4\n\
             [[subsystem.namespace]]\nram = \"1M\"\n"
        ))
        .unwrap();
        let server = Server::start(&cfg).await.expect("target starts");
        let a = server.local_addrs[0].to_string();
        let opts = |extra: &[&str]| {
            let mut args = vec!["nvmeof-probe", a.as_str(), "--nqn", NQN, "-q"];
            args.extend_from_slice(extra);
            ProbeOptions::parse_args(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"))
        };
        let probe = |extra: &'static [&'static str]| {
            let o = opts(extra);
            async move {
                let r = nvmeof_tools::run_probe(&o).await.unwrap_or_else(|e| panic!("{extra:?}: {e}"));
                assert!(r.error.is_none(), "{extra:?}: {:?}", r.error);
                r
            }
        };
        let usage = |extra: &'static [&'static str], says: &'static str| {
            let o = opts(extra);
            async move {
                let e = nvmeof_tools::run_probe(&o).await.map(drop).unwrap_err();
                assert_eq!(e.exit_code(), ExitCode::Usage, "{extra:?}: {e}");
                assert!(e.to_string().contains(says), "{extra:?}: {e}");
            }
        };
        let ctrl = nvmeof_initiator::Controller::connect(server.local_addrs[0], NQN, Default::default())
            .await
            .unwrap();
        let ns = ctrl.namespace(1).await.unwrap();
        let written = || async {
            let z = ns.zones().await.unwrap();
            assert_eq!(z.len(), 16);
            let active = z.iter().filter(|d| d.state.is_active()).count();
            assert!(active <= 4, "{active} active zones");
            z.iter().map(|d| d.wp - d.slba).sum::<u64>()
        };

        // Writes without the mode would fail: refused up front. Reads are fine.
        usage(&["--rw", "randwrite", "--count", "1"], "--zonemode zbd").await;
        probe(&["--rw", "randread", "--count", "20"]).await;
        usage(&["--rw", "write", "--zonemode", "zbd", "--nsid", "2", "--count", "1"], "not zoned").await;
        usage(&["--zonemode", "zbd", "--zone-append", "--verify", "--rw", "randwrite"], "--zone-append")
            .await;
        usage(&["--rw", "write", "--zone-append", "--count", "1"], "--zonemode zbd").await;

        // Sequential 64 KiB writes, 4 in flight over the 3 zones the target
        // lets be open: 8 of them fill two zones' worth of blocks.
        let r = probe(&[
            "--zonemode",
            "zbd",
            "--rw",
            "write",
            "--bs",
            "64k",
            "--qd",
            "4",
            "--count",
            "8",
            "--verify",
        ])
        .await;
        assert_eq!(r.write.ops, 8);
        let z = r.zones.clone().expect("zone summary");
        assert_eq!((z.zones, z.max_open, z.append, z.resets, z.zone_bytes), (16, 3, false, 0, 256 << 10));
        assert_eq!(written().await, 8 * 128);
        // Reads stay below the write pointers, so every block read holds
        // the pattern; with --read-beyond-wp most find unwritten blocks.
        let r = probe(&["--zonemode", "zbd", "--rw", "randread", "--verify", "--count", "300"]).await;
        let v = r.verify.clone().unwrap();
        assert_eq!((v.mismatches, v.checked_blocks), (0, 300 * 8), "{:?}", v.first);
        assert!(r.zones.is_none(), "no zone line without writes");
        let r = probe(&[
            "--zonemode",
            "zbd",
            "--rw",
            "randread",
            "--verify",
            "--count",
            "300",
            "--read-beyond-wp",
        ])
        .await;
        assert!(r.verify.unwrap().mismatches > 0);
        usage(&["--rw", "randread", "--read-beyond-wp", "--count", "1"], "--zonemode zbd").await;
        // 100 more: the 16 zones hold 64, so zones are reset and written again.
        let r = probe(&["--zonemode", "zbd", "--rw", "write", "--bs", "64k", "--qd", "4", "--count", "100"])
            .await;
        assert_eq!(r.write.ops, 100);
        let resets = r.zones.as_ref().unwrap().resets;
        assert!(resets >= 9, "{resets} resets");
        let text = r.to_text();
        assert!(
            text.contains(&format!("  zones: 16 of 256 KiB, 3 written at a time (Write), {resets} resets")),
            "{text}"
        );
        let j = r.to_fio_json();
        assert_eq!(j["jobs"][0]["zone_resets"].as_u64(), Some(resets));
        assert_eq!(j["jobs"][0]["job options"]["zonemode"].as_str(), Some("zbd"));
        written().await;

        // Random mixed reads and writes, verified, on emptied zones (the runs
        // above wrote data without the pattern): reads of zones being reset
        // are not held against the target.
        ns.manage_zone(nvmeof_common::spec::zns::ZoneSendAction::RESET, 0, true).await.unwrap();
        let r = probe(&[
            "--zonemode",
            "zbd",
            "--rw",
            "randrw",
            "--bs",
            "4k",
            "--qd",
            "8",
            "--verify",
            "--count",
            "3000",
        ])
        .await;
        let v = r.verify.clone().unwrap();
        assert_eq!(v.mismatches, 0, "{:?}", v.first);
        assert!(v.checked_blocks > 0 && r.write.ops > 1000, "{v:?}");
        assert!(r.zones.as_ref().unwrap().resets > 0);
        written().await;

        // Zone Append: 8 in flight share the open zones.
        let r = probe(&[
            "--zonemode",
            "zbd",
            "--zone-append",
            "--rw",
            "randwrite",
            "--bs",
            "16k",
            "--qd",
            "8",
            "--count",
            "500",
        ])
        .await;
        assert_eq!(r.write.ops, 500);
        assert!(r.zones.as_ref().unwrap().append);
        written().await;
        // --max-open-zones 1: one zone at a time.
        let r = probe(&[
            "--zonemode",
            "zbd",
            "--rw",
            "randwrite",
            "--max-open-zones",
            "1",
            "--qd",
            "4",
            "--count",
            "50",
        ])
        .await;
        assert_eq!((r.write.ops, r.zones.as_ref().unwrap().max_open), (50, 1));
        // Zones open outside the region use up the open limit: a write run
        // there is refused up front, a read run is not bound by it.
        use nvmeof_common::spec::zns::ZoneSendAction;
        ns.manage_zone(ZoneSendAction::RESET, 0, true).await.unwrap();
        for z in 0..3 {
            ns.manage_zone(ZoneSendAction::OPEN, z * 512, false).await.unwrap();
        }
        usage(
            &["--zonemode", "zbd", "--offset", "3840k", "--size", "256k", "--count", "10", "--rw", "write"],
            "hold all 3 open zones",
        )
        .await;
        probe(&[
            "--zonemode",
            "zbd",
            "--offset",
            "3840k",
            "--size",
            "256k",
            "--count",
            "10",
            "--rw",
            "randread",
        ])
        .await;
        ns.manage_zone(ZoneSendAction::CLOSE, 0, true).await.unwrap();
        // Ping mode writes too.
        let r = probe(&["--zonemode", "zbd", "--ping", "--rw", "write", "--count", "5", "--interval", "1ms"])
            .await;
        assert_eq!(r.write.ops, 5);

        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

/// `nvmeof paths`: every path the discovery log (and its referrals) lists
/// for the subsystem, with the namespace's ANA state through each, a path
/// that does not connect (a target that wants DH-HMAC-CHAP) said with why;
/// exit 0 while one connects, the path's error when none does, 4 for a
/// subsystem no log lists or a namespace that is not active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_paths_lists_every_path_with_its_ana_state() {
    bounded(30, async {
        init_tracing();
        const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:a5a5a5a5-0000-4000-8000-000000000002";
        const KEY: &str = "DHHC-1:01:o8/jE9vGsSdaRVAfWmfEhzOZ8S7KkfTi8F/tg64x4BN8zoYw:";
        let keyed = TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n[[subsystem]]\nnqn = \"{NQN}\"\n\
             allowed_hosts = [{{ nqn = \"{HOST}\", dhchap_key = \"{KEY}\" }}]\n[[subsystem.namespace]]\nram = \"1M\"\n"
        ))
        .unwrap();
        let b = Server::start(&keyed).await.unwrap();
        let b_addr = b.local_addrs[0];
        let cfg = TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n[[port]]\nlisten = \"127.0.0.1:0\"\nana_state = \"non-optimized\"\n\
             [[referral]]\naddress = \"{b_addr}\"\n[[subsystem]]\nnqn = \"{NQN}\"\n[[subsystem.namespace]]\nram = \"1M\"\n"
        ))
        .unwrap();
        let a = Server::start(&cfg).await.unwrap();
        let (a1, a2) = (a.local_addrs[0].to_string(), a.local_addrs[1].to_string());
        let text = admin(&["nvmeof", "--hostnqn", HOST, "paths", &a1], b"").await.unwrap();
        let rows: Vec<Vec<&str>> = text.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert_eq!((rows[0][0], rows[0][1], rows[0][3]), (a1.as_str(), "1", "optimized"), "{text}");
        assert_eq!((rows[1][0], rows[1][1], rows[1][3]), (a2.as_str(), "2", "non-optimized"), "{text}");
        assert_eq!((rows[2][0], rows[2][3..5].join(" ").as_str()), (b_addr.to_string().as_str(), "cannot connect:"));
        assert!(text.contains("--dhchap-secret"), "why: {text}");
        let j: Value =
            serde_json::from_str(&admin(&["nvmeof", "--hostnqn", HOST, "--json", "paths", &a2, "--nqn", NQN], b"").await.unwrap())
                .unwrap();
        assert_eq!((j["subnqn"].as_str(), j["nsid"].as_u64()), (Some(NQN), Some(1)));
        let p = j["paths"].as_array().unwrap();
        let states: Vec<(&str, Option<&str>)> =
            p.iter().map(|x| (x["trsvcid"].as_str().unwrap(), x["ana_state"].as_str())).collect();
        let port = |a: &str| a.rsplit_once(':').unwrap().1.to_string();
        assert_eq!(states[..2], [(port(&a2).as_str(), Some("non-optimized")), (port(&a1).as_str(), Some("optimized"))]);
        assert!(p[2]["error"].as_str().unwrap().contains("--dhchap-secret"), "{}", p[2]);
        // The keyed target alone: its error; a namespace not there or a
        // subsystem not listed: not found.
        let e = admin(&["nvmeof", "--hostnqn", HOST, "paths", &b_addr.to_string()], b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NvmeStatus, "{e}");
        let e = admin(&["nvmeof", "--hostnqn", HOST, "paths", &a1, "--nqn", NQN, "--nsid", "7"], b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NotFound, "{e}");
        assert!(e.to_string().contains("namespace 7 is not active"), "{e}");
        let e = admin(&["nvmeof", "paths", &a1, "--nqn", "nqn.2024-01.io.nvmeof.test:none"], b"").await.unwrap_err();
        assert_eq!(e.exit_code(), ExitCode::NotFound, "{e}");
        a.shutdown(Duration::from_secs(1)).await;
        b.shutdown(Duration::from_secs(1)).await;
    })
    .await
}
