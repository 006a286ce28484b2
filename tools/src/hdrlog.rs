//! HdrHistogram interval log output (`--hdr-log`), readable by the standard
//! HdrHistogram tools (`HistogramLogProcessor`, HistogramLogAnalyzer, the
//! `hdrhistogram` crates' `IntervalLogIterator`).
//!
//! One histogram per second and operation type, tagged `read` / `write` /
//! `trim` (the directions the run sends),
//! values in nanoseconds, compressed with the V2 deflate encoding; the
//! `Interval_Max` column is in milliseconds (MaxValueDivisor 1e6), as the
//! Java tools expect for nanosecond logs.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2DeflateSerializer;

use crate::probe::Report;

/// Writes the report's interval histograms as an interval log to `w`.
pub fn write_interval_log(r: &Report, w: &mut impl Write) -> std::io::Result<()> {
    let start = r.started.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    // The histogram lines (preceded by the writer's MaxValueDivisor line).
    let mut body = Vec::new();
    {
        let mut ser = V2DeflateSerializer::new();
        let mut log = IntervalLogWriterBuilder::new()
            .with_max_value_divisor(1e6)
            .begin_log_with(&mut body, &mut ser)?;
        let (rd, wr, tr) = (r.opts.rw.reads(), r.opts.rw.writes(), r.opts.rw.trims());
        for iv in &r.intervals {
            let len = if iv.length.is_zero() { Duration::from_millis(1) } else { iv.length };
            for (on, h, tag) in [(rd, &iv.read, "read"), (wr, &iv.write, "write"), (tr, &iv.trim, "trim")] {
                if on {
                    log.write_histogram(h, iv.start, len, Tag::new(tag))
                        .map_err(|e| std::io::Error::other(e.to_string()))?;
                }
            }
        }
    }
    let split = body.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    writeln!(w, "#[Histogram log format version 1.3]")?;
    writeln!(w, "#[Written by nvmeof-probe {}; values in ns]", env!("CARGO_PKG_VERSION"))?;
    writeln!(w, "#[StartTime: {start:.3} (seconds since epoch)]")?;
    writeln!(w, "#[BaseTime: {start:.3} (seconds since epoch)]")?;
    w.write_all(&body[..split])?;
    writeln!(w, "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"")?;
    w.write_all(&body[split..])
}

/// Writes the interval log to `path`.
pub fn write_interval_log_file(r: &Report, path: &Path) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    write_interval_log(r, &mut f)?;
    f.flush()
}
