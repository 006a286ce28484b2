//! Thin provisioning: on the backends that allocate lazily (sparse files on
//! worker threads and on io_uring, RAM), Identify Namespace sets NSFEAT THINP
//! and its Namespace Utilization (NUSE) follows what the store holds: 0 for a
//! new sparse namespace, the blocks a write allocated, and less again after
//! a deallocation (NVMe Base 2.0: with THINP and Dataset Management,
//! deallocated blocks show in NUSE), so `nvme list` on a host shows a sparse
//! file's real usage. Capacity and size stay the namespace's size.

mod initiator_util;

use std::time::Duration;

use initiator_util::{bounded, every_backend, opts, start, SUBNQN};
use nvmeof_initiator::Controller;

const SIZE: u64 = 16 << 20;
/// Blocks of 512 bytes in 1 MiB.
const MIB_BLOCKS: u64 = 2048;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn utilization_follows_writes_and_deallocations() {
    bounded(60, async {
        let (cfg, paths) = every_backend("nvmeof-thin", SIZE);
        let (server, addr) = start(&cfg).await;
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        let data = vec![0xA5u8; 1 << 20];
        for nsid in 1..=3u32 {
            let nuse = |ctrl: &Controller| {
                let ctrl = ctrl.clone();
                async move {
                    let id = ctrl.identify_namespace(nsid).await.unwrap();
                    assert_eq!(id.nsfeat & 1, 1, "ns {nsid}: NSFEAT THINP");
                    assert_eq!((id.nsze, id.ncap), (SIZE / 512, SIZE / 512), "ns {nsid}");
                    id.nuse
                }
            };
            assert_eq!(nuse(&ctrl).await, 0, "ns {nsid}: nothing written to the new namespace");
            let ns = ctrl.namespace(nsid).await.unwrap();
            // 1 MiB at 4 MiB and 1 MiB at 8 MiB (whole RAM chunks and pages).
            ns.write(4 * MIB_BLOCKS, &data).await.unwrap();
            ns.write(8 * MIB_BLOCKS, &data).await.unwrap();
            let written = nuse(&ctrl).await;
            // A filesystem may count a few blocks of its own beside the data.
            assert!((2 * MIB_BLOCKS..=2 * MIB_BLOCKS + 256).contains(&written), "ns {nsid}: NUSE {written}");
            ns.deallocate(&[(4 * MIB_BLOCKS, MIB_BLOCKS as u32)]).await.unwrap();
            let after = nuse(&ctrl).await;
            assert!(
                (MIB_BLOCKS..=MIB_BLOCKS + 256).contains(&after),
                "ns {nsid}: NUSE {after} after 1 MiB of {written} blocks was deallocated"
            );
            let mut back = vec![0u8; 1 << 20];
            ns.read(8 * MIB_BLOCKS, &mut back).await.unwrap();
            assert_eq!(back, data, "ns {nsid}: the blocks left are intact");
        }
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
    })
    .await
}
