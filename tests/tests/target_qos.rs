//! Per-namespace rate limits (`qos_iops`, `qos_bandwidth`; SPDK's bdev
//! QoS): commands past a namespace's rate wait in the target and all
//! complete, with their data intact; the other namespaces of the subsystem
//! are not held back; a reload changes the limits in place; bad values are
//! refused naming the key.
//!
//! The durations checked are lower bounds a limit imposes (100 reads at 200
//! IOPS cannot take less than about half a second, however fast the
//! machine), and a ratio of at least 3 between a limited namespace and an
//! unlimited one doing the same work (the unlimited one finishes its 100
//! reads in milliseconds, the limited one needs about 495).

mod initiator_util;

use std::time::{Duration, Instant};

use initiator_util::{bounded, opts, start, SUBNQN};
use nvmeof_initiator::{Controller, IoFlags, Namespace};
use nvmeof_target::config::TargetConfig;

const BS: usize = 512;

fn cfg(ns1: &str, ns3: &str) -> TargetConfig {
    TargetConfig::from_toml(&format!(
        "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\
         [[subsystem.namespace]]\nnsid = 1\nram = \"4M\"\n{ns1}\n\
         [[subsystem.namespace]]\nnsid = 2\nram = \"4M\"\n\n\
         [[subsystem.namespace]]\nnsid = 3\nram = \"4M\"\n{ns3}\n"
    ))
    .unwrap()
}

/// `n` 4 KiB reads at once (spread over the controller's queues); their time.
async fn reads(ns: &Namespace, n: u64) -> Duration {
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        let ns = ns.clone();
        tasks.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            ns.read(i * 8, &mut buf).await.unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    t.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_past_the_rate_wait_and_complete() {
    bounded(60, async {
        let (server, addr) = start(&cfg("qos_iops = 200", "qos_bandwidth = \"1M\"")).await;
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        let (ns1, ns2, ns3) = (
            ctrl.namespace(1).await.unwrap(),
            ctrl.namespace(2).await.unwrap(),
            ctrl.namespace(3).await.unwrap(),
        );
        // 200 IOPS: 100 reads take at least (100 - 1) / 200 s less the 1 ms burst.
        let limited = reads(&ns1, 100).await;
        assert!(limited >= Duration::from_millis(450), "100 reads at 200 IOPS in {limited:?}");
        let free = reads(&ns2, 100).await;
        assert!(free * 3 < limited, "the unlimited namespace took {free:?}, the limited one {limited:?}");
        // 1 MiB/s: 512 KiB of writes (8 of 64 KiB at once, 62.5 ms each of
        // the rate) take 7 × 62.5 ms before the last one goes; the data is
        // all there.
        let data: Vec<u8> = (0..8 * 65536).map(|i| (i % 251) as u8).collect();
        let t = Instant::now();
        let mut tasks = Vec::new();
        for (i, chunk) in data.chunks(65536).enumerate() {
            let (ns3, chunk) = (ns3.clone(), chunk.to_vec());
            tasks.push(tokio::spawn(async move {
                ns3.write_with((i * 65536 / BS) as u64, &chunk, IoFlags::default()).await.unwrap()
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(400), "512 KiB at 1 MiB/s in {took:?}");
        // Reading counts too: 8 reads of 64 KiB one after the other.
        let t = Instant::now();
        let mut back = vec![0u8; data.len()];
        for (i, chunk) in back.chunks_mut(65536).enumerate() {
            ns3.read((i * 65536 / BS) as u64, chunk).await.unwrap();
        }
        assert!(t.elapsed() >= Duration::from_millis(400), "512 KiB read at 1 MiB/s in {:?}", t.elapsed());
        assert!(back == data, "throttled writes wrote what was sent");

        // A reload lifts namespace 1's limit and gives namespace 3 an IOPS one.
        server.reload(&cfg("", "qos_iops = 100")).unwrap();
        let lifted = reads(&ns1, 100).await;
        assert!(lifted * 3 < limited, "after the reload: {lifted:?}, before {limited:?}");
        let now_limited = reads(&ns3, 50).await;
        assert!(now_limited >= Duration::from_millis(450), "50 reads at 100 IOPS in {now_limited:?}");
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
    })
    .await;
}

#[test]
fn bad_limits_are_refused_naming_the_key() {
    for (line, key) in [
        ("qos_iops = 0", "qos_iops"),
        ("qos_bandwidth = \"0\"", "qos_bandwidth"),
        ("qos_bandwidth = \"fast\"", "qos_bandwidth"),
    ] {
        let toml = format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n\n[[subsystem]]\nnqn = \"{SUBNQN}\"\n\
             [[subsystem.namespace]]\nram = \"4M\"\n{line}\n"
        );
        let e = TargetConfig::from_toml(&toml).unwrap_err().to_string();
        assert!(e.contains(key), "{line}: {e}");
    }
}
