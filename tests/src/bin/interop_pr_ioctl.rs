//! `interop_pr_ioctl`: the Linux block layer's persistent reservation ioctls
//! (`IOC_PR_*`, `include/uapi/linux/pr.h`) on a block device, for the interop
//! suite's guest (copied into it as `/guest/bin/pr-ioctl`). The kernel's
//! NVMe `pr_ops` (`drivers/nvme/host/pr.c`) turn them into Reservation
//! Register / Acquire / Release commands, as cluster software meets them;
//! nvme-cli's `resv-*` commands are passthrough instead.
//!
//! Usage: `pr-ioctl DEV register OLD NEW [ignore]`, `reserve KEY TYPE`,
//! `release KEY TYPE`, `preempt OLD NEW TYPE`, `preempt-abort OLD NEW TYPE`,
//! `clear KEY`. Keys in decimal or 0x hex; TYPE 1 to 6 (`enum pr_type`:
//! Write Exclusive, Exclusive Access, then the Registrants Only and All
//! Registrants kinds of each). Exit status: 0 done, 1 the ioctl failed (its
//! errno printed, or the `enum pr_status` the NVMe pr_ops return as is:
//! 0x18 for Reservation Conflict), 2 usage.

use std::os::fd::AsRawFd;

/// `struct pr_registration`.
#[repr(C)]
struct PrRegistration {
    old_key: u64,
    new_key: u64,
    flags: u32,
    pad: u32,
}

/// `struct pr_reservation`.
#[repr(C)]
struct PrReservation {
    key: u64,
    kind: u32,
    flags: u32,
}

/// `struct pr_preempt`.
#[repr(C)]
struct PrPreempt {
    old_key: u64,
    new_key: u64,
    kind: u32,
    flags: u32,
}

/// `struct pr_clear`.
#[repr(C)]
struct PrClear {
    key: u64,
    flags: u32,
    pad: u32,
}

/// `PR_FL_IGNORE_KEY`.
const PR_FL_IGNORE_KEY: u32 = 1;

/// `_IOW('p', nr, T)`.
const fn iow<T>(nr: u64) -> u64 {
    (1 << 30) | ((std::mem::size_of::<T>() as u64) << 16) | ((b'p' as u64) << 8) | nr
}

fn usage(msg: &str) -> ! {
    eprintln!(
        "pr-ioctl: {msg}\nusage: pr-ioctl DEV register OLD NEW [ignore] | reserve KEY TYPE | release KEY TYPE \
         | preempt OLD NEW TYPE | preempt-abort OLD NEW TYPE | clear KEY"
    );
    std::process::exit(2)
}

fn num(args: &[String], i: usize) -> u64 {
    let Some(s) = args.get(i) else { usage("missing argument") };
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.unwrap_or_else(|_| usage(&format!("not a number: {s}")))
}

fn kind(args: &[String], i: usize) -> u32 {
    match num(args, i) {
        t @ 1..=6 => t as u32,
        t => usage(&format!("reservation type {t}: 1 to 6")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        usage("missing device or action");
    }
    // The kernel asks for a device opened for writing (blkdev_pr_allowed).
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&args[0])
        .unwrap_or_else(|e| usage(&format!("{}: {e}", args[0])));
    let fd = dev.as_raw_fd();
    // SAFETY: each ioctl gets a pointer to the structure its number encodes,
    // alive for the call.
    let r = unsafe {
        match args[1].as_str() {
            "register" => {
                let ignore = args.get(4).map(String::as_str) == Some("ignore");
                let flags = if ignore { PR_FL_IGNORE_KEY } else { 0 };
                let p = PrRegistration { old_key: num(&args, 2), new_key: num(&args, 3), flags, pad: 0 };
                libc::ioctl(fd, iow::<PrRegistration>(200) as _, &p)
            }
            "reserve" | "release" => {
                let p = PrReservation { key: num(&args, 2), kind: kind(&args, 3), flags: 0 };
                let nr = if args[1] == "reserve" { 201 } else { 202 };
                libc::ioctl(fd, iow::<PrReservation>(nr) as _, &p)
            }
            "preempt" | "preempt-abort" => {
                let p = PrPreempt {
                    old_key: num(&args, 2),
                    new_key: num(&args, 3),
                    kind: kind(&args, 4),
                    flags: 0,
                };
                let nr = if args[1] == "preempt" { 203 } else { 204 };
                libc::ioctl(fd, iow::<PrPreempt>(nr) as _, &p)
            }
            "clear" => {
                let p = PrClear { key: num(&args, 2), flags: 0, pad: 0 };
                libc::ioctl(fd, iow::<PrClear>(205) as _, &p)
            }
            other => usage(&format!("unknown action {other}")),
        }
    };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        eprintln!("pr-ioctl {}: {e}", args[1..].join(" "));
        std::process::exit(1);
    }
    if r > 0 {
        // The pr_ops' own status (`enum pr_status`), returned as is.
        let what = match r {
            0x18 => "reservation conflict",
            0x2 => "I/O error",
            _ => "path failure or other",
        };
        eprintln!("pr-ioctl {}: pr status {r:#x} ({what})", args[1..].join(" "));
        std::process::exit(1);
    }
    println!("pr-ioctl {}: ok", args[1..].join(" "));
}
