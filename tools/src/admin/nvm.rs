//! `nvmeof flush`, `dsm` and `write-zeroes`: the NVM commands without data
//! to send back, as nvme-cli's `flush`, `dsm --ad` and `write-zeroes`.

use std::io::Write;
use std::time::Instant;

use nvmeof_initiator::{Controller, IoFlags};
use serde_json::json;

use super::{check_range, checked_ranges, emit, open_namespace, out_err, Cli};
use crate::error::ToolError;
use crate::probe::namespace_info;
use crate::util::fmt_bytes;

/// `nvmeof flush`: a Flush of namespace `nsid`, timed.
pub(super) async fn flush(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let ns = open_namespace(ctrl, nsid).await?;
    let started = Instant::now();
    ns.flush().await.map_err(|e| ToolError::from_initiator(&format!("flush of nsid {nsid}"), &e))?;
    let secs = started.elapsed().as_secs_f64();
    if cli.json {
        emit(out, &json!({ "nsid": nsid, "seconds": secs }))
    } else {
        writeln!(out, "flushed nsid {nsid} in {secs:.6} s").map_err(out_err)
    }
}

/// `nvmeof dsm`: Dataset Management with Deallocate over `ranges`, which
/// must lie within the namespace (checked first, as the controller would
/// refuse the whole command for one range past its end).
pub(super) async fn deallocate(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    ranges: &[(u64, u32)],
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let (info, total) = checked_ranges(ctrl, nsid, ranges).await?;
    let ns = open_namespace(ctrl, nsid).await?;
    ns.deallocate(ranges).await.map_err(|e| {
        ToolError::from_initiator(
            &format!("deallocate of {total} blocks in {} range(s) (nsid {nsid})", ranges.len()),
            &e,
        )
    })?;
    let bytes = total * info.block_size as u64;
    if cli.json {
        let r: Vec<_> = ranges.iter().map(|&(lba, n)| json!({ "lba": lba, "blocks": n })).collect();
        emit(out, &json!({ "nsid": nsid, "ranges": r, "blocks": total, "bytes": bytes }))
    } else {
        writeln!(
            out,
            "deallocated {total} blocks ({}) in {} range(s) of nsid {nsid}",
            fmt_bytes(bytes),
            ranges.len()
        )
        .map_err(out_err)
    }
}

/// `nvmeof write-zeroes`: Write Zeroes over `count` blocks from `lba`
/// (several commands past the controller's Write Zeroes Size Limit).
#[allow(clippy::too_many_arguments)]
pub(super) async fn write_zeroes(
    cli: &Cli,
    ctrl: &Controller,
    nsid: u32,
    lba: u64,
    count: u64,
    deac: bool,
    fua: bool,
    out: &mut dyn Write,
) -> Result<(), ToolError> {
    let info = namespace_info(ctrl, nsid).await?;
    check_range(nsid, lba, count, info.blocks)?;
    let ns = open_namespace(ctrl, nsid).await?;
    ns.write_zeroes(lba, count, deac, IoFlags { fua, ..IoFlags::default() }).await.map_err(|e| {
        ToolError::from_initiator(&format!("write zeroes of {count} blocks at lba {lba} (nsid {nsid})"), &e)
    })?;
    let bytes = count * info.block_size as u64;
    if cli.json {
        emit(
            out,
            &json!({ "nsid": nsid, "lba": lba, "blocks": count, "bytes": bytes, "deac": deac, "fua": fua }),
        )
    } else {
        writeln!(out, "zeroed {count} blocks ({}) at lba {lba} of nsid {nsid}", fmt_bytes(bytes))
            .map_err(out_err)
    }
}
