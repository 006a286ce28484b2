//! Read-only namespaces (`read_only = true`): the file is opened for reading
//! only (every descriptor the target holds on it), hosts read it, and every
//! command that would write fails with Namespace is Write Protected, which a
//! host cannot lift; a reload that drops `read_only` makes it writable.

mod initiator_util;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use initiator_util::*;
use nvmeof_initiator::common::spec::features::{FeatureId, GetFeaturesCmd, SetFeaturesCmd};
use nvmeof_initiator::common::Status;
use nvmeof_initiator::{Controller, IoFlags, Payload};
use nvmeof_target::config::{IoEngine, NamespaceConfig};

const SIZE: usize = 1 << 20;
/// Linux `O_ACCMODE`, `O_RDONLY`, `O_RDWR`.
const O_ACCMODE: u32 = 3;
const O_RDONLY: u32 = 0;
const O_RDWR: u32 = 2;

/// Access modes (`O_ACCMODE` of the open flags) of this process's
/// descriptors on `path`, from /proc/self/fdinfo.
fn access_modes(path: &Path) -> Vec<u32> {
    let want = std::fs::metadata(path).unwrap();
    let mut modes = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(m) = std::fs::metadata(e.path()) else { continue };
        if (m.dev(), m.ino()) != (want.dev(), want.ino()) {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", e.file_name().to_string_lossy()));
        let Ok(info) = info else { continue };
        let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).expect("flags line");
        modes.push(u32::from_str_radix(flags.trim(), 8).unwrap() & O_ACCMODE);
    }
    modes
}

async fn write_protect_state(ctrl: &Controller, nsid: u32) -> u32 {
    let mut get = GetFeaturesCmd::new(FeatureId::WRITE_PROTECT).to_sqe(0);
    get.set_nsid(nsid);
    ctrl.admin_command(get, Payload::None).await.unwrap().dw0()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_files_are_read_and_never_written() {
    bounded(60, async {
        let pid = std::process::id();
        let paths: Vec<PathBuf> =
            (1..=2).map(|n| std::env::temp_dir().join(format!("nvmeof-ro-{pid}-{n}"))).collect();
        let pattern: Vec<u8> = (0..SIZE).map(|i| (i * 7 + i / 4096) as u8).collect();
        for p in &paths {
            std::fs::write(p, &pattern).unwrap();
        }
        let cfg = |ro| {
            config(vec![
                NamespaceConfig { read_only: ro, ..file_ns(1, &paths[0], None, IoEngine::Threads) },
                // io_uring where available (else the threads again).
                NamespaceConfig { read_only: ro, ..file_ns(2, &paths[1], None, IoEngine::Auto) },
            ])
        };
        let (server, addr) = start(&cfg(true)).await;
        for p in &paths {
            let modes = access_modes(p);
            assert!(!modes.is_empty(), "no descriptor on {}", p.display());
            assert!(modes.iter().all(|&m| m == O_RDONLY), "{}: modes {modes:?}", p.display());
        }
        let ctrl = Controller::connect(addr, SUBNQN, opts()).await.unwrap();
        for nsid in [1u32, 2] {
            let ns = ctrl.namespace(nsid).await.unwrap();
            assert_eq!(ns.identify().nsattr & 1, 1, "ns {nsid}: NSATTR write protected");
            assert_eq!(ns.size_bytes(), SIZE as u64);
            let mut buf = vec![0u8; 64 << 10];
            ns.read(8, &mut buf).await.unwrap();
            assert_eq!(buf[..], pattern[4096..4096 + (64 << 10)], "ns {nsid}: read");
            let refused = [
                ns.write(0, &[1u8; 4096]).await,
                ns.write_with(16, &[2u8; 512], IoFlags::FUA).await,
                ns.write_zeroes(0, 8, false, IoFlags::default()).await,
                ns.deallocate(&[(0, 8)]).await,
                ns.copy(&[(0, 8)], 64, IoFlags::default()).await,
            ];
            for (i, r) in refused.into_iter().enumerate() {
                let e = r.expect_err("a write to a read-only namespace succeeded");
                assert_eq!(
                    e.status().map(|s| s.code()),
                    Some(Status::NS_WRITE_PROTECTED),
                    "ns {nsid} op {i}: {e}"
                );
            }
            ns.flush().await.unwrap();
            assert_eq!(write_protect_state(&ctrl, nsid).await, 1);
            // Hosts cannot lift it (Feature Not Changeable); setting it again is harmless.
            let mut lift = SetFeaturesCmd::new(FeatureId::WRITE_PROTECT, 0).to_sqe(0);
            lift.set_nsid(nsid);
            let e = ctrl.admin_command(lift, Payload::None).await.unwrap_err();
            assert_eq!(e.status(), Some(Status::FEATURE_NOT_CHANGEABLE.with_dnr().with_more()), "{e}");
            let mut again = SetFeaturesCmd::new(FeatureId::WRITE_PROTECT, 1).to_sqe(0);
            again.set_nsid(nsid);
            ctrl.admin_command(again, Payload::None).await.unwrap();
            assert_eq!(write_protect_state(&ctrl, nsid).await, 1);
        }
        for p in &paths {
            assert!(std::fs::read(p).unwrap() == pattern, "{} changed", p.display());
        }
        // Without read_only the reload reopens the files writable.
        server.reload(&cfg(false)).unwrap();
        for p in &paths {
            assert!(access_modes(p).contains(&O_RDWR), "{}", p.display());
        }
        for nsid in [1u32, 2] {
            let ns = ctrl.namespace(nsid).await.unwrap();
            ns.write(0, &[9u8; 4096]).await.unwrap();
            assert_eq!(write_protect_state(&ctrl, nsid).await, 0);
        }
        ctrl.shutdown().await.unwrap();
        server.shutdown(std::time::Duration::from_secs(5)).await;
        for p in &paths {
            assert_eq!(std::fs::read(p).unwrap()[..4096], [9u8; 4096]);
            let _ = std::fs::remove_file(p);
        }
    })
    .await
}

#[test]
fn read_only_configuration_is_checked() {
    use nvmeof_target::config::TargetConfig;
    let parse = |ns: &str| {
        TargetConfig::from_toml(&format!(
            "[[port]]\nlisten = \"127.0.0.1:0\"\n[[subsystem]]\nnqn = \"nqn.2026-11.io.nvmeof:ro\"\n[[subsystem.namespace]]\n{ns}\n"
        ))
    };
    let c = parse("file = \"/x.img\"\nread_only = true").unwrap();
    assert!(c.subsystems[0].namespaces[0].read_only);
    assert!(parse("block = \"/dev/x\"\nread_only = true").unwrap().subsystems[0].namespaces[0].read_only);
    assert!(!parse("file = \"/x.img\"").unwrap().subsystems[0].namespaces[0].read_only);
    let e = parse("ram = \"1M\"\nread_only = true").unwrap_err().to_string();
    assert!(e.contains("namespace[0].read_only"), "{e}");
    let e = parse("file = \"/x.img\"\nsize = \"1M\"\nread_only = true").unwrap_err().to_string();
    assert!(e.contains("namespace[0].size"), "{e}");
}
