//! Read latency under a stream of large writes, with and without dedicated
//! write queues (`ConnectOptions::write_queues`), on one runtime thread.
//! Usage: `write_queues ADDR NQN [SECONDS]` against a target with a RAM
//! namespace (e.g. `taskset -c 0 nvmeof-target serve --ram 512M`, this on
//! another core): three rounds of each setting, in which four tasks keep
//! 1 MiB writes in flight while another reads 4 KiB one at a time; prints
//! the reads' p50/p99/p99.9 and the write bandwidth. It is how a queue that
//! never waits was found to starve the others of its thread
//! (`nvmeof_net::FairShare`).

use std::time::{Duration, Instant};

use bytes::Bytes;
use nvmeof_initiator::{ConnectOptions, Controller, IoFlags};

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (addr, nqn) = (args[1].as_str(), args[2].as_str());
    let secs: u64 = args.get(3).map_or(5, |s| s.parse().unwrap());
    for round in 0..3 {
        for wq in [0u16, 1] {
            let o = ConnectOptions { io_queues: 1, write_queues: wq, queue_depth: 32, ..Default::default() };
            let ctrl = Controller::connect(addr, nqn, o).await.unwrap();
            let ns = ctrl.namespace(1).await.unwrap();
            let end = Instant::now() + Duration::from_secs(secs);
            let data = Bytes::from(vec![0x5au8; 1 << 20]);
            let region = (ns.blocks() / 2) & !0xfff;
            let mut writers = Vec::new();
            for w in 0..4u64 {
                let (ns, data) = (ns.clone(), data.clone());
                writers.push(tokio::spawn(async move {
                    let mut n = 0u64;
                    let step = (1u64 << 20) / ns.block_size() as u64;
                    let mut lba = w * step;
                    while Instant::now() < end {
                        ns.write_bytes(lba % region, data.clone(), IoFlags::default()).await.unwrap();
                        lba += 4 * step;
                        n += 1;
                    }
                    n
                }));
            }
            let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
            let mut i = 0u64;
            while Instant::now() < end {
                let t = Instant::now();
                ns.read_bytes(region + (i * 8) % region, 4096).await.unwrap();
                h.record(t.elapsed().as_nanos() as u64).unwrap();
                i += 1;
            }
            let mut writes = 0;
            for w in writers {
                writes += w.await.unwrap();
            }
            println!(
                "round {round} write_queues {wq}: reads {} p50 {:.1} us p99 {:.1} us p99.9 {:.1} us; writes {:.2} GB/s",
                h.len(),
                h.value_at_quantile(0.5) as f64 / 1e3,
                h.value_at_quantile(0.99) as f64 / 1e3,
                h.value_at_quantile(0.999) as f64 / 1e3,
                (writes << 20) as f64 / secs as f64 / 1e9
            );
            ctrl.shutdown().await.unwrap();
        }
    }
}
