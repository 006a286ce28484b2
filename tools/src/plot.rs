//! `--plot FILE.svg`: a latency-by-percentile plot (HdrHistogram style, the
//! x axis in "nines") above an IOPS-over-time chart, drawn with `plotters`'
//! SVG backend.

use std::path::Path;

use plotters::prelude::*;

use crate::probe::{OpKind, OpStats, Report};

/// Points (x = nines, y = latency in µs) of a percentile curve: x = log10(1 / (1 − q)).
pub fn percentile_curve(s: &OpStats) -> Vec<(f64, f64)> {
    if s.ops == 0 {
        return Vec::new();
    }
    // Up to the resolution of the sample count (1 / n), at most 99.9999 %.
    let max_x = (s.ops as f64).log10().clamp(1.0, 6.0);
    let steps = (max_x * 40.0) as usize;
    (0..=steps)
        .map(|i| {
            let x = max_x * i as f64 / steps as f64;
            let q = 1.0 - 10f64.powf(-x);
            (x, s.hist.value_at_quantile(q) as f64 / 1e3)
        })
        .collect()
}

fn nines_label(x: f64) -> String {
    let n = x.round() as i32;
    if (x - n as f64).abs() > 1e-6 {
        return String::new();
    }
    match n {
        0 => "0%".into(),
        1 => "90%".into(),
        n => format!("99.{}%", "9".repeat(n as usize - 2)).replace("99.%", "99%"),
    }
}

const COLORS: [RGBColor; 3] = [RGBColor(31, 119, 180), RGBColor(214, 39, 40), RGBColor(44, 160, 44)];

fn err<E: std::fmt::Debug>(e: E) -> std::io::Error {
    std::io::Error::other(format!("plot: {e:?}"))
}

/// Writes the SVG.
pub fn write_plot(r: &Report, path: &Path) -> std::io::Result<()> {
    let root = SVGBackend::new(path, (1000, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, bottom) = root.split_vertically(480);
    let o = &r.opts;
    let title = format!(
        "{} {} bs={} qd={} queues={} — {}",
        o.name,
        o.rw.as_str(),
        o.bs_text(),
        r.qd,
        r.queues,
        r.addr
    );

    let curves: Vec<(OpKind, Vec<(f64, f64)>)> = [OpKind::Read, OpKind::Write, OpKind::Trim]
        .into_iter()
        .map(|op| (op, percentile_curve(r.stats(op))))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let max_x = curves.iter().flat_map(|(_, c)| c.last().map(|p| p.0)).fold(1.0, f64::max);
    let max_y = curves.iter().flat_map(|(_, c)| c.iter().map(|p| p.1)).fold(1.0, f64::max) * 1.05;
    let mut chart = ChartBuilder::on(&top)
        .caption(format!("Latency by percentile: {title}"), ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..max_x, 0f64..max_y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_labels(max_x.round() as usize + 1)
        .x_label_formatter(&|x| nines_label(*x))
        .x_desc("percentile")
        .y_desc("latency (µs)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    for (op, c) in &curves {
        let color = COLORS[*op as usize];
        chart
            .draw_series(LineSeries::new(c.iter().copied(), color.stroke_width(2)))
            .map_err(err)?
            .label(op.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    if !curves.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }

    let tl = &r.timeline;
    let max_t = tl.last().map_or(1.0, |p| p.t).max(1.0);
    let max_iops =
        tl.iter().map(|p| p.read_iops.max(p.write_iops).max(p.trim_iops)).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&bottom)
        .caption("IOPS over time (per second; shaded: warm-up)", ("sans-serif", 18))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..max_t, 0f64..max_iops)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("IOPS")
        .y_label_formatter(&|v| crate::util::fmt_count(*v))
        .draw()
        .map_err(err)?;
    let warm_end = o.warmup.as_secs_f64().min(max_t);
    if warm_end > 0.0 {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, 0.0), (warm_end, max_iops)],
                RGBColor(200, 200, 200).mix(0.4).filled(),
            )))
            .map_err(err)?;
    }
    for (op, on) in
        [(OpKind::Read, o.rw.reads()), (OpKind::Write, o.rw.writes()), (OpKind::Trim, o.rw.trims())]
    {
        if !on || tl.is_empty() {
            continue;
        }
        let color = COLORS[op as usize];
        // A step per interval, so a single interval is visible too.
        let pts = tl.iter().flat_map(|p| {
            let v = match op {
                OpKind::Read => p.read_iops,
                OpKind::Write => p.write_iops,
                _ => p.trim_iops,
            };
            [((p.t - p.secs).max(0.0), v), (p.t, v)]
        });
        chart
            .draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(err)?
            .label(op.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    if !tl.is_empty() {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(nines_label(0.0), "0%");
        assert_eq!(nines_label(1.0), "90%");
        assert_eq!(nines_label(2.0), "99%");
        assert_eq!(nines_label(3.0), "99.9%");
        assert_eq!(nines_label(5.0), "99.999%");
        assert_eq!(nines_label(2.5), "");
    }
}
