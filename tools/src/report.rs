//! Rendering a [`Report`]: fio-like text, fio's JSON layout, ioping-like
//! ping lines and summary, progress lines.

use serde_json::{json, Map, Value};

use crate::probe::{OpKind, OpStats, PingSample, Report, TimelinePoint};
use crate::util::{fmt_bytes, fmt_count, fmt_ns};

/// Percentiles reported unless `--percentile-list` names others (fio's
/// layout keys: `"99.900000"`).
pub const PERCENTILES: [f64; 6] = [50.0, 90.0, 99.0, 99.9, 99.99, 99.999];

/// Verify mismatches listed in the text report.
pub const TEXT_MISMATCHES: usize = 10;

/// fio's percentile key for `p`.
pub fn percentile_key(p: f64) -> String {
    format!("{p:.6}")
}

fn lat_json(s: &OpStats, pcts: &[f64]) -> Value {
    let pct: Map<String, Value> =
        pcts.iter().map(|&p| (percentile_key(p), Value::from(s.percentile(p)))).collect();
    json!({
        "min": s.min(),
        "max": s.max_ns,
        "mean": s.mean(),
        "stddev": s.stddev(),
        "N": s.ops,
        "percentile": pct,
    })
}

fn op_json(r: &Report, op: OpKind) -> Value {
    let s = r.stats(op);
    let bw = r.bw_bytes(op);
    json!({
        "io_bytes": s.bytes,
        "io_kbytes": s.bytes / 1024,
        "bw_bytes": bw.round() as u64,
        "bw": (bw / 1024.0).round() as u64,
        "iops": r.iops(op),
        "runtime": r.runtime.as_millis() as u64,
        "total_ios": s.ops,
        "short_ios": 0,
        "drop_ios": 0,
        "lat_ns": lat_json(s, &r.opts.percentiles()),
    })
}

fn timeline_json(t: &TimelinePoint) -> Value {
    json!({
        "t": t.t,
        "secs": t.secs,
        "read_iops": t.read_iops,
        "write_iops": t.write_iops,
        "read_bw_bytes": t.read_bw,
        "write_bw_bytes": t.write_bw,
        "read_lat_mean_ns": t.read_lat_mean_ns,
        "write_lat_mean_ns": t.write_lat_mean_ns,
        "trim_iops": t.trim_iops,
        "trim_bw_bytes": t.trim_bw,
        "trim_lat_mean_ns": t.trim_lat_mean_ns,
        "warmup": t.warmup,
    })
}

/// The report's zone line (`--zonemode zbd`).
fn zones_text(z: &crate::probe::ZoneSummary) -> String {
    format!(
        "  zones: {} of {}, {} written at a time ({}), {} reset{}\n",
        z.zones,
        fmt_bytes(z.zone_bytes),
        z.max_open,
        if z.append { "Zone Append" } else { "Write" },
        z.resets,
        if z.resets == 1 { "" } else { "s" }
    )
}

impl Report {
    /// The report in fio's JSON layout (`jobs[0].read/write` with `io_bytes`,
    /// `bw_bytes`, `iops`, `total_ios`, `lat_ns{min,max,mean,stddev,percentile}`),
    /// plus this tool's own keys under `jobs[0].nvmeof_probe`.
    pub fn to_fio_json(&self) -> Value {
        let o = &self.opts;
        let started = self.started.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let mut own = json!({
            "target": self.addr,
            "nqn": o.nqn.as_deref().unwrap_or_default(),
            "nsid": o.nsid,
            "mode": if o.ping { "ping" } else { "bench" },
            "rw": o.rw.as_str(),
            "rwmixread": o.mix,
            "random_distribution": o.random_distribution.to_string(),
            // A number where every request has one size, else fio's form.
            "bs": o.single_bs().map_or_else(|| json!(o.sizes().to_string()), |b| json!(b)),
            "qd_requested": o.qd,
            "qd": self.qd,
            "queues_requested": o.queues,
            "queues": self.queues,
            "write_queues_requested": o.write_queues,
            "write_queues": self.write_queues,
            "block_size": self.block_size,
            "region_offset": self.region.0,
            "region_size": self.region.1,
            "rate_iops": o.rate,
            "warmup_s": o.warmup.as_secs_f64(),
            "digests": o.digests,
            "fua": o.fua,
            "flush_every": o.flush_every,
            "runtime_ns": self.runtime.as_nanos() as u64,
            "errors": self.errors,
            "error": self.error.as_ref().map(|e| e.message.clone()),
            "exit_code": self.exit_code() as i32,
            "timeline": self.timeline.iter().map(timeline_json).collect::<Vec<_>>(),
        });
        if let Some(l) = &self.sched_lag {
            own["sched_lag_ns"] = lat_json(l, &o.percentiles());
        }
        if let Some(z) = &self.zones {
            own["zones"] = json!({
                "zone_size": z.zone_bytes,
                "zones": z.zones,
                "max_open": z.max_open,
                "zone_append": z.append,
                "resets": z.resets,
            });
        }
        if let Some(v) = &self.verify {
            own["verify"] = json!({
                "written_blocks": v.written_blocks,
                "checked_blocks": v.checked_blocks,
                "unwritten_blocks": v.unwritten_blocks,
                "mismatches": v.mismatches,
                "first_mismatches": v.first.iter().map(|m| json!({
                    "lba": m.lba,
                    "offset": m.offset,
                    "expected": m.expected,
                    "actual": m.actual,
                    "reason": m.reason,
                })).collect::<Vec<_>>(),
            });
        }
        let mut job_options = json!({
            "rw": o.rw.as_str(),
            // fio names a split `bssplit`.
            "bs": o.bssplit.is_none().then(|| o.single_bs().map_or_else(|| o.bs.to_string(), |b| b.to_string())),
            "bssplit": o.bssplit.as_ref().map(|b| b.to_string()),
            "iodepth": o.qd.to_string(),
            "numjobs": o.queues.to_string(),
            "rwmixread": o.mix.to_string(),
            "random_distribution": o.random_distribution.to_string(),
            "rate_iops": o.rate.map(|r| r.to_string()),
            "runtime": o.time_limit().map(|t| format!("{}ms", t.as_millis())),
            "number_ios": o.count.map(|c| c.to_string()),
            "ramp_time": format!("{}ms", o.warmup.as_millis()),
            "offset": o.offset.to_string(),
            "size": self.region.1.to_string(),
            "verify": if o.verify { "pattern" } else { "0" },
            "zonemode": o.zonemode.as_str(),
            "fsync": o.flush_every.map(|n| n.to_string()),
            // fio's thinktime is in microseconds.
            "thinktime": o.thinktime.map(|t| t.as_micros().to_string()),
            "thinktime_blocks": o.thinktime.map(|_| o.thinktime_blocks.to_string()),
            "max_open_zones": o.max_open_zones.map(|n| n.to_string()),
        });
        if let Value::Object(m) = &mut job_options {
            m.retain(|_, v| !v.is_null());
        }
        let mut job = json!({
            "jobname": o.name,
            "groupid": 0,
            "error": if self.error.is_some() { 1 } else { 0 },
            "job options": job_options,
            "read": op_json(self, OpKind::Read),
            "write": op_json(self, OpKind::Write),
            "trim": op_json(self, OpKind::Trim),
            "job_runtime": self.runtime.as_millis() as u64,
            "elapsed": self.runtime.as_secs(),
            "nvmeof_probe": own,
        });
        if o.flush_every.is_some() {
            // fio's block for fsync=N: count and latency, no bytes.
            job["sync"] =
                json!({ "total_ios": self.sync.ops, "lat_ns": lat_json(&self.sync, &o.percentiles()) });
        }
        if let Some(z) = &self.zones {
            // fio's key, in zonemode=zbd.
            job["zone_resets"] = z.resets.into();
        }
        json!({
            "nvmeof-probe version": env!("CARGO_PKG_VERSION"),
            "timestamp": started.as_secs(),
            "timestamp_ms": started.as_millis() as u64,
            "jobs": [job],
        })
    }

    /// The fio-like text report.
    pub fn to_text(&self) -> String {
        let o = &self.opts;
        let mut s = String::new();
        let rate = o.rate.map(|r| format!(", rate={r} IOPS")).unwrap_or_default();
        let dist = match o.random_distribution {
            d if d.skewed() => format!(", random_distribution={d}"),
            _ => String::new(),
        };
        let wq = if self.write_queues > 0 {
            format!(", write_queues={}", self.write_queues)
        } else {
            String::new()
        };
        let durable = match (o.fua, o.flush_every) {
            (false, None) => String::new(),
            (true, None) => ", fua".to_string(),
            (fua, Some(n)) => format!("{}, flush_every={n}", if fua { ", fua" } else { "" }),
        };
        let think = match (o.thinktime, o.thinktime_blocks) {
            (None, _) => String::new(),
            (Some(t), 1) => format!(", thinktime={t:?}"),
            (Some(t), n) => format!(", thinktime={t:?} every {n}"),
        };
        s += &format!(
            "{}: (rw={}{dist}, bs={}{durable}{think}, qd={}, queues={}{wq}{rate}) {} {} nsid={}\n",
            o.name,
            o.rw.as_str(),
            o.bs_text(),
            self.qd,
            self.queues,
            self.addr,
            o.nqn.as_deref().unwrap_or_default(),
            o.nsid
        );
        for op in [OpKind::Read, OpKind::Write, OpKind::Trim] {
            let st = self.stats(op);
            if st.ops == 0 {
                continue;
            }
            let bw = self.bw_bytes(op);
            s += &format!(
                "  {}: IOPS={}, BW={:.1}MiB/s ({:.1}MB/s)({}/{}msec)\n",
                op.as_str(),
                fmt_count(self.iops(op)),
                bw / (1 << 20) as f64,
                bw / 1e6,
                fmt_bytes(st.bytes),
                self.runtime.as_millis()
            );
            s += &lat_text(st, "lat", &o.percentiles());
        }
        if self.read.ops + self.write.ops + self.trim.ops == 0 {
            s += "  no requests completed\n";
        }
        if let Some(n) = o.flush_every.filter(|_| self.sync.ops > 0) {
            // fio's heading for its fsync=N latencies.
            s += &format!("  flush: {} after every {n} writes\n", self.sync.ops);
            s += &lat_text(&self.sync, "sync", &o.percentiles());
        }
        if let Some(l) = &self.sched_lag {
            s += &format!(
                "  schedule: latency measured from the intended send time; sends were late by avg={}, max={}, p99={}\n",
                fmt_ns(l.mean()),
                fmt_ns(l.max_ns as f64),
                fmt_ns(l.percentile(99.0) as f64)
            );
        }
        if let Some(v) = &self.verify {
            s += &format!(
                "  verify: {} blocks written, {} blocks checked, {} mismatches{}\n",
                v.written_blocks,
                v.checked_blocks,
                v.mismatches,
                unwritten_note(v)
            );
            // The first few here; --json lists up to MAX_MISMATCHES_KEPT.
            for m in v.first.iter().take(TEXT_MISMATCHES) {
                s += &format!("    {m}\n");
            }
            let shown = v.first.len().min(TEXT_MISMATCHES) as u64;
            if v.mismatches > shown {
                s += &format!("    ... and {} more\n", v.mismatches - shown);
            }
        }
        if let Some(z) = &self.zones {
            s += &zones_text(z);
        }
        if let Some(e) = &self.error {
            s += &format!("  error: {e} ({} failed requests)\n", self.errors);
        }
        s
    }

    /// ioping-like summary of a ping run.
    pub fn ping_summary(&self) -> String {
        let o = &self.opts;
        let mut all = self.read.clone();
        all.merge(&self.write);
        all.merge(&self.trim);
        let n = all.ops;
        let busy = all.mean() * n as f64;
        let iops = if busy > 0.0 { n as f64 / (busy / 1e9) } else { 0.0 };
        let bw = if busy > 0.0 { all.bytes as f64 / (busy / 1e9) } else { 0.0 };
        let what = match (self.read.ops > 0, self.write.ops > 0, self.trim.ops > 0) {
            (true, false, false) => "read",
            (false, true, false) => "written",
            (false, false, true) => "trimmed",
            _ => "transferred",
        };
        let mut s = format!(
            "\n--- {} nsid={} ({}) ioping statistics ---\n",
            self.addr,
            o.nsid,
            o.nqn.as_deref().unwrap_or_default()
        );
        s += &format!(
            "{n} requests completed in {}, {} {what}, {} iops, {}/s\n",
            fmt_ns(busy),
            fmt_bytes(all.bytes),
            fmt_count(iops),
            fmt_bytes(bw as u64)
        );
        if n > 0 {
            let wall = self.runtime.as_secs_f64();
            s += &format!(
                "generated {n} requests in {:.2} s, {}, {:.0} iops, {}/s\n",
                wall,
                fmt_bytes(all.bytes),
                if wall > 0.0 { n as f64 / wall } else { 0.0 },
                fmt_bytes(if wall > 0.0 { (all.bytes as f64 / wall) as u64 } else { 0 })
            );
            s += &format!(
                "min/avg/max/mdev = {} / {} / {} / {}\n",
                fmt_ns(all.min() as f64),
                fmt_ns(all.mean()),
                fmt_ns(all.max_ns as f64),
                fmt_ns(all.stddev())
            );
            s += &format!(
                "percentiles: 50%={} 90%={} 99%={} 99.9%={}\n",
                fmt_ns(all.percentile(50.0) as f64),
                fmt_ns(all.percentile(90.0) as f64),
                fmt_ns(all.percentile(99.0) as f64),
                fmt_ns(all.percentile(99.9) as f64)
            );
        }
        if let Some(v) = &self.verify {
            s += &format!(
                "verify: {} blocks checked, {} mismatches{}\n",
                v.checked_blocks,
                v.mismatches,
                unwritten_note(v)
            );
        }
        if let Some(z) = &self.zones {
            s += zones_text(z).trim_start();
        }
        if let Some(e) = &self.error {
            s += &format!("error: {e}\n");
        }
        s
    }
}

/// A percentile as the text report heads it: three decimals, more where
/// `--percentile-list` gives them (99.9999, not a rounded 100.000).
fn pct_text(p: f64) -> String {
    let t = format!("{p:.6}");
    let t = t.trim_end_matches('0');
    let decimals = t.len() - t.find('.').map_or(t.len(), |i| i + 1);
    format!("{p:.*}", decimals.max(3))
}

fn lat_text(st: &OpStats, name: &str, pcts: &[f64]) -> String {
    // Unit like fio: the smallest that keeps the minimum below 10000.
    let (unit, div) = if st.min() >= 10_000_000 {
        ("msec", 1e6)
    } else if st.min() >= 10_000 {
        ("usec", 1e3)
    } else {
        ("nsec", 1.0)
    };
    let mut s = format!(
        "    {name} ({unit}): min={}, max={}, avg={:.2}, stdev={:.2}\n",
        (st.min() as f64 / div).round(),
        (st.max_ns as f64 / div).round(),
        st.mean() / div,
        st.stddev() / div
    );
    s += &format!("    {name} percentiles ({unit}):\n");
    let cells: Vec<String> = pcts
        .iter()
        .map(|&p| format!("{:>7}th=[{:>8}]", pct_text(p), (st.percentile(p) as f64 / div).round()))
        .collect();
    for row in cells.chunks(3) {
        s += &format!("     | {}\n", row.join(", "));
    }
    s
}

/// One ping line: `4 KiB from 10.0.0.1:4420 nsid=1 lba=8: request=1 time=123.4 us`.
pub fn ping_line(addr: &str, nsid: u32, p: &PingSample) -> String {
    let dir = match p.op {
        OpKind::Read => "from",
        OpKind::Trim => "trimmed at",
        _ => "to",
    };
    format!(
        "{} {dir} {addr} nsid={nsid} lba={}: request={} time={}{}",
        fmt_bytes(p.bytes),
        p.lba,
        p.request,
        fmt_ns(p.latency_ns as f64),
        if p.warmup { " (warmup)" } else { "" }
    )
}

/// One progress line for stderr.
pub fn progress_line(p: &TimelinePoint) -> String {
    let part = |name: &str, iops: f64, bw: f64, lat: f64| {
        format!("{name}: IOPS={} BW={:.1}MiB/s lat={}", fmt_count(iops), bw / (1 << 20) as f64, fmt_ns(lat))
    };
    let mut parts = Vec::new();
    if p.read_iops > 0.0 {
        parts.push(part("read", p.read_iops, p.read_bw, p.read_lat_mean_ns));
    }
    if p.write_iops > 0.0 {
        parts.push(part("write", p.write_iops, p.write_bw, p.write_lat_mean_ns));
    }
    if p.trim_iops > 0.0 {
        parts.push(part("trim", p.trim_iops, p.trim_bw, p.trim_lat_mean_ns));
    }
    if parts.is_empty() {
        parts.push("no completions".into());
    }
    format!("[{:>5.0}s] {}{}", p.t, parts.join(" | "), if p.warmup { " (warmup)" } else { "" })
}

/// The text reports' note on never-written blocks of a mixed run (none: empty).
fn unwritten_note(v: &crate::probe::VerifyStats) -> String {
    match v.unwritten_blocks {
        0 => String::new(),
        n => format!(" ({n} never-written blocks read as zeros or ones, not checked)"),
    }
}
