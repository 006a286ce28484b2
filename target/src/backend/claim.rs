//! Exclusive claims on the block devices a target exports writable.
//!
//! A writable block namespace holds its device open with `O_EXCL`, so the
//! kernel refuses the export of a device something else writes to — a mounted
//! filesystem (on it or on one of its partitions), an active swap area, an
//! LVM/device-mapper, MD RAID or bcache member — with `EBUSY`, and, while the
//! target exports it, refuses to mount it or to build such a stack on it
//! (`mount`, `mkfs`, `pvcreate` and `mdadm` claim devices the same way). Two
//! writers that do not know each other corrupt the data of both; an admin who
//! typed `/dev/sda` for `/dev/sdb` would otherwise export the root disk. LIO's
//! `iblock` backstore opens its devices the same way (`bdev_file_open_by_path`
//! with a holder); nvmet's `nvmet_bdev_ns_enable` passes none and exports a
//! mounted device.
//!
//! Every `O_EXCL` open of a block device is its own holder (since Linux 6.5 the
//! `struct file`), so two of one process exclude each other too. The target
//! opens a device several times (descriptors for FUA writes, the same device
//! in two namespaces, a reload's new namespace beside the one it replaces),
//! so it keeps one claim per device: [`claim`] hands out the claim alive for
//! that device, and the device is released when the last backend on it goes.
//! The I/O descriptors themselves are opened without `O_EXCL`, which a claimed
//! device allows.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};

/// A block device held open with `O_EXCL` (released on drop).
#[derive(Debug)]
pub struct DeviceClaim {
    /// Keeps the claim.
    _file: File,
}

/// The claims alive in this process, by device number.
static CLAIMS: Mutex<Vec<(u64, Weak<DeviceClaim>)>> = Mutex::new(Vec::new());

/// Claims the block device at `path` for this process: the claim already
/// alive for that device, or a new `O_EXCL` open of it.
///
/// # Errors
/// `path` cannot be opened or is not a block device; or (kind
/// [`io::ErrorKind::ResourceBusy`]) something else holds the device, with
/// what ([`in_use`]: mounted where, swap, which driver holds it).
pub fn claim(path: &Path) -> io::Result<Arc<DeviceClaim>> {
    let meta = std::fs::metadata(path)?;
    if !meta.file_type().is_block_device() {
        return Err(super::sys::invalid(format!("{} is not a block device", path.display())));
    }
    let rdev = meta.rdev();
    let mut claims = CLAIMS.lock().unwrap_or_else(|p| p.into_inner());
    claims.retain(|(_, c)| c.strong_count() > 0);
    if let Some(c) = claims.iter().find(|(d, _)| *d == rdev).and_then(|(_, c)| c.upgrade()) {
        return Ok(c);
    }
    match OpenOptions::new().read(true).custom_flags(libc::O_EXCL | libc::O_CLOEXEC).open(path) {
        Ok(file) => {
            let c = Arc::new(DeviceClaim { _file: file });
            claims.push((rdev, Arc::downgrade(&c)));
            Ok(c)
        }
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            let why = in_use(rdev).unwrap_or_else(|| {
                "another program holds it exclusively (a filesystem, a RAID or LVM member, or a process \
                 that opened it with O_EXCL, such as another target)"
                    .into()
            });
            Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "{} is in use: {why}; a writable export would corrupt it (`exclusive = false` exports it \
                     anyway, `read_only = true` exports it read-only)",
                    path.display()
                ),
            ))
        }
        Err(e) => Err(e),
    }
}

/// What is known to use the block device `rdev`, or its partitions, or (a
/// partition) its disk: mounted filesystems (`/proc/self/mountinfo`), swap
/// areas (`/proc/swaps`) and the drivers stacked on it (sysfs `holders`:
/// device-mapper, MD, bcache). `None` when none of these names it; a
/// process's own `O_EXCL` open shows nowhere.
pub fn in_use(rdev: u64) -> Option<String> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap_or_default();
    let mut why = Vec::new();
    for (dev, whose) in related(rdev) {
        let name = sysfs_name(dev).unwrap_or_else(|| format!("{}:{}", libc::major(dev), libc::minor(dev)));
        let of = match whose {
            Related::Itself => String::new(),
            Related::Partition => format!("its partition {name} "),
            Related::Disk => format!("its disk {name} "),
        };
        for at in mounted_at(&mountinfo, dev) {
            why.push(format!("{of}mounted at {at}"));
        }
        if swap_on(&swaps, dev) {
            why.push(format!("{of}an active swap area"));
        }
        for h in holders(dev) {
            why.push(format!("{of}held by {h}"));
        }
    }
    (!why.is_empty()).then(|| why.join(", "))
}

/// How a device [`related`] returns relates to the one asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Related {
    Itself,
    Partition,
    Disk,
}

/// `rdev`, its partitions and, for a partition, its disk: the devices whose
/// claims make an `O_EXCL` open of `rdev` fail (the kernel's `bd_may_claim`).
fn related(rdev: u64) -> Vec<(u64, Related)> {
    let mut out = vec![(rdev, Related::Itself)];
    let dir = sysfs_dir(rdev);
    if dir.join("partition").exists() {
        if let Some(disk) = read_dev(&dir.join("../dev")) {
            out.push((disk, Related::Disk));
        }
    } else if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            if e.path().join("partition").exists() {
                if let Some(part) = read_dev(&e.path().join("dev")) {
                    out.push((part, Related::Partition));
                }
            }
        }
    }
    out
}

/// `/sys/dev/block/MAJ:MIN`.
fn sysfs_dir(rdev: u64) -> std::path::PathBuf {
    format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev)).into()
}

/// The kernel's name of the device (`sdb1`), from its sysfs `uevent`.
fn sysfs_name(rdev: u64) -> Option<String> {
    let uevent = std::fs::read_to_string(sysfs_dir(rdev).join("uevent")).ok()?;
    uevent.lines().find_map(|l| l.strip_prefix("DEVNAME=")).map(str::to_owned)
}

/// A sysfs `dev` file ("MAJ:MIN") as a device number.
fn read_dev(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    parse_maj_min(text.trim())
}

fn parse_maj_min(s: &str) -> Option<u64> {
    let (major, minor) = s.split_once(':')?;
    Some(libc::makedev(major.parse().ok()?, minor.parse().ok()?))
}

/// The mount points of filesystems on `rdev` in `mountinfo` (the third
/// field is the device's "MAJ:MIN", the fifth the mount point, with
/// spaces and such written as octal escapes).
fn mounted_at(mountinfo: &str, rdev: u64) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() > 4 && parse_maj_min(f[2]) == Some(rdev)).then(|| f[4].to_owned())
        })
        .collect()
}

/// Whether `/proc/swaps` lists `rdev` (by path; its first line is a header).
fn swap_on(swaps: &str, rdev: u64) -> bool {
    swaps
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .any(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device() && m.rdev() == rdev))
}

/// The drivers stacked on `rdev` (sysfs `holders`), with a device-mapper
/// device's name (an LVM volume's `VG-LV`) where it has one.
fn holders(rdev: u64) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(sysfs_dir(rdev).join("holders")) else { return Vec::new() };
    let mut out: Vec<String> = entries
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            match std::fs::read_to_string(e.path().join("dm/name")) {
                Ok(dm) if !dm.trim().is_empty() => format!("{name} ({})", dm.trim()),
                _ => name,
            }
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_and_swaps_are_read_by_device_number() {
        let info = "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n\
                    37 35 7:3 / /mnt/with\\040space rw - ext4 /dev/loop3 rw\n\
                    38 35 7:3 /sub /srv/bind rw - ext4 /dev/loop3 rw\n\
                    39 35 7:30 / /other rw - ext4 /dev/loop30 rw\n";
        let loop3 = libc::makedev(7, 3);
        assert_eq!(mounted_at(info, loop3), ["/mnt/with\\040space", "/srv/bind"]);
        assert!(mounted_at(info, libc::makedev(7, 4)).is_empty());
        assert!(mounted_at("garbage\n\n1 2\n", loop3).is_empty());
        assert_eq!(parse_maj_min("259:12"), Some(libc::makedev(259, 12)));
        assert_eq!(parse_maj_min("259"), None);
        assert!(!swap_on("Filename Type Size Used Priority\n/nonexistent partition 1 0 -2\n", loop3));
    }

    #[test]
    fn claim_refuses_what_is_not_a_block_device() {
        let t = super::super::sys::TempPath::new("claim");
        File::create(&t.0).unwrap();
        assert_eq!(claim(&t.0).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(claim(Path::new("/nonexistent/dev")).unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    /// Opens `dev` with `O_EXCL` as another program (or `mount`) would.
    fn exclusive_open(dev: &str) -> io::Result<File> {
        OpenOptions::new().read(true).custom_flags(libc::O_EXCL).open(dev)
    }

    /// The backends claim a device they export writable, once per process
    /// (two backends on it, and a uring beside a thread-pool one, share the
    /// claim), and release it when the last goes; a device another program
    /// holds is refused, saying so, unless read-only or shared.
    #[test]
    fn backends_claim_the_device_once_per_process() {
        use super::super::{Backend, BlockBackend, UringBackend};
        let lo = match super::super::sys::Loop::attach(8 << 20) {
            Ok(lo) => lo,
            Err(e) => {
                eprintln!("note: skipping the device claim test: {e}");
                return;
            }
        };
        let uring = |r: io::Result<UringBackend>| match r {
            Err(e) if e.kind() == io::ErrorKind::Unsupported => None,
            r => Some(r),
        };
        let other = exclusive_open(&lo.dev).unwrap();
        let e = BlockBackend::open(&lo.dev, None).err().expect("claimed by another");
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
        assert!(e.to_string().contains(&format!("{} is in use: another program holds it", lo.dev)), "{e}");
        if let Some(r) = uring(UringBackend::open_block(&lo.dev, None)) {
            assert_eq!(r.err().expect("claimed by another").kind(), io::ErrorKind::ResourceBusy);
        }
        let ro = BlockBackend::open_read_only(&lo.dev, None).unwrap();
        let shared = BlockBackend::open_shared(&lo.dev, None).unwrap();
        if let Some(r) = uring(UringBackend::open_block_shared(&lo.dev, None)) {
            r.unwrap();
        }
        assert_eq!(shared.size(), 8 << 20);
        drop((ro, shared, other));

        let a = BlockBackend::open(&lo.dev, None).unwrap();
        let b = BlockBackend::open(&lo.dev, None).unwrap();
        let u = uring(UringBackend::open_block(&lo.dev, None)).map(Result::unwrap);
        assert_eq!(exclusive_open(&lo.dev).unwrap_err().raw_os_error(), Some(libc::EBUSY));
        let rdev = std::fs::metadata(&lo.dev).unwrap().rdev();
        assert_eq!(in_use(rdev), None, "a process's own O_EXCL open shows nowhere");
        drop((a, u));
        assert!(exclusive_open(&lo.dev).is_err(), "held while one backend is left");
        drop(b);
        exclusive_open(&lo.dev).expect("released with the last backend");
    }
}
