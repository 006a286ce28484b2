//! A namespace whose file or device changes size outside the target
//! (`truncate`, `lvextend`): as nvmet's Identify Namespace does
//! (`nvmet_ns_revalidate`), the next Identify Namespace reports the store's
//! size and every connected host gets the Namespace Attribute Changed
//! notice; a reload (SIGHUP) picks the change up too, as nvmet's
//! `revalidate_size`. I/O follows the new size, and so do the initiator's
//! namespace handles (the notice re-reads their size). A RAM namespace has
//! no size outside the target and keeps its own.

mod initiator_util;

use std::time::Duration;

use initiator_util::*;
use nvmeof_initiator::common::Status;
use nvmeof_initiator::{Controller, ControllerEvent, Error};

const BS: u64 = 512;

fn set_len(path: &std::path::Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).and_then(|f| f.set_len(len)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_resized_outside_the_target_shows_at_identify_and_at_reload() {
    bounded(60, async {
        let size = 4u64 << 20;
        // RAM (1), a file on worker threads (2), a file on io_uring where offered (3).
        let (cfg, paths) = every_backend("revalidate", size);
        let (server, addr) = start(&cfg).await;
        let watcher = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        let mut events = watcher.events();
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();

        for (nsid, path) in [(2, &paths[0]), (3, &paths[1])] {
            // A handle the application keeps: the notice updates its size.
            let watched = watcher.namespace(nsid).await.unwrap();
            assert_eq!(watched.blocks(), size / BS);
            // Grown by 2 MiB and a bit: whole blocks count.
            let grown = size + (2 << 20);
            set_len(path, grown + 100);
            assert_eq!(ctrl.identify_namespace(nsid).await.unwrap().nsze, grown / BS, "nsid {nsid}");
            assert_eq!(next_event(&mut events).await, ControllerEvent::NamespacesChanged(vec![nsid]));
            assert_eq!(watched.blocks(), grown / BS, "the kept handle follows");
            let ns = ctrl.namespace(nsid).await.unwrap();
            assert_eq!(ns.blocks(), grown / BS);
            let data: Vec<u8> = (0..4096u32).map(|i| (i * 13 + nsid) as u8).collect();
            let last = grown / BS - 8;
            ns.write(last, &data).await.unwrap();
            let mut back = vec![0u8; 4096];
            ns.read(last, &mut back).await.unwrap();
            assert!(back == data, "nsid {nsid}: the new end reads back differently");
            // An unchanged size: no notice (the next event is the shrink's).
            assert_eq!(ctrl.identify_namespace(nsid).await.unwrap().nsze, grown / BS);

            // Shrunk: past the new end is LBA Out of Range.
            set_len(path, size / 2);
            assert_eq!(watcher.identify_namespace(nsid).await.unwrap().nsze, size / 2 / BS);
            assert_eq!(next_event(&mut events).await, ControllerEvent::NamespacesChanged(vec![nsid]));
            assert_eq!(watched.blocks(), size / 2 / BS);
            match ns.read(size / 2 / BS, &mut back).await {
                Err(Error::Nvme { status, .. }) => assert_eq!(status.code(), Status::LBA_RANGE.code()),
                other => panic!("nsid {nsid}: a read past the new end: {other:?}"),
            }

            // A reload notices without an Identify.
            set_len(path, size);
            server.reload(&cfg).unwrap();
            assert_eq!(next_event(&mut events).await, ControllerEvent::NamespacesChanged(vec![nsid]));
            assert_eq!(ctrl.namespace(nsid).await.unwrap().blocks(), size / BS);
            assert_eq!(watched.blocks(), size / BS);
        }

        // RAM: its own size, and no notice came for it (checked by the
        // events above, each for the file namespace alone).
        assert_eq!(ctrl.identify_namespace(1).await.unwrap().nsze, size / BS);
        server.reload(&cfg).unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(300), events.recv()).await.is_err(),
            "a reload with no size change raised a notice"
        );
        watcher.shutdown().await.unwrap();
        ctrl.shutdown().await.unwrap();
        server.shutdown(Duration::from_secs(1)).await;
        for p in paths {
            let _ = std::fs::remove_file(p);
        }
    })
    .await
}
