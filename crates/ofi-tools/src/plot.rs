//! CSV output and an SVG plot of latency and bandwidth against size.

use crate::report::Row;
use std::fmt::Write as _;

/// Writes one line per size; the percentile columns are empty when the
/// tool did not measure them.
pub fn write_csv(path: &str, rows: &[Row]) -> std::io::Result<()> {
    let mut s = String::from("bytes,iters,seconds,mb_per_sec,usec_per_xfer,p50_us,p99_us,max_us\n");
    for r in rows {
        let _ = write!(
            s,
            "{},{},{:.6},{:.2},{:.3}",
            r.size,
            r.iters,
            r.secs,
            r.mbps(),
            r.usec()
        );
        let _ = match r.lat {
            Some(l) => writeln!(s, ",{:.3},{:.3},{:.3}", l.p50, l.p99, l.max),
            None => writeln!(s, ",,,"),
        };
    }
    std::fs::write(path, s)
}

/// 1024-based labels for sizes, plain for other values.
fn short(v: f64) -> String {
    let u = v as u64;
    if u >= 1 << 20 && u.is_multiple_of(1 << 20) {
        format!("{}M", u >> 20)
    } else if u >= 1 << 10 && u.is_multiple_of(1 << 10) {
        format!("{}K", u >> 10)
    } else if v >= 1.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn log_pos(v: f64, lo: f64, hi: f64, len: f64) -> f64 {
    let (v, lo, hi) = (v.max(lo).log10(), lo.log10(), hi.log10());
    if hi <= lo {
        return 0.0;
    }
    (v - lo) / (hi - lo) * len
}

fn panel(s: &mut String, x0: f64, title: &str, unit: &str, pts: &[(f64, f64)], color: &str) {
    let (w, h) = (420.0, 300.0);
    let (y0, left, bottom) = (40.0, 60.0, 40.0);
    let pw = w - left - 20.0;
    let ph = h - bottom - 10.0;
    let xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let ys: Vec<f64> = pts.iter().map(|p| p.1.max(1e-3)).collect();
    let (xlo, xhi) = (
        xs.iter().cloned().fold(f64::MAX, f64::min).max(1.0),
        xs.iter().cloned().fold(1.0, f64::max),
    );
    let (ylo, yhi) = (
        ys.iter().cloned().fold(f64::MAX, f64::min) * 0.8,
        ys.iter().cloned().fold(1e-3, f64::max) * 1.25,
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="14" font-family="sans-serif">{title}</text>"#,
        x0 + left,
        y0 - 12.0
    );
    let _ = writeln!(
        s,
        r##"<rect x="{}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>"##,
        x0 + left
    );
    let mut path = String::new();
    for (i, (x, y)) in xs.iter().zip(&ys).enumerate() {
        let px = x0 + left + log_pos(*x, xlo, xhi, pw);
        let py = y0 + ph - log_pos(*y, ylo, yhi, ph);
        let _ = write!(path, "{}{px:.1},{py:.1} ", if i == 0 { "M" } else { "L" });
        let _ = writeln!(
            s,
            r#"<circle cx="{px:.1}" cy="{py:.1}" r="2.5" fill="{color}"/>"#
        );
    }
    let _ = writeln!(
        s,
        r#"<path d="{path}" fill="none" stroke="{color}" stroke-width="1.5"/>"#
    );
    // Decade grid lines and labels on both axes.
    let mut d = 10f64.powf(ylo.log10().floor());
    while d <= yhi {
        if d >= ylo {
            let py = y0 + ph - log_pos(d, ylo, yhi, ph);
            let _ = writeln!(
                s,
                r##"<line x1="{}" x2="{}" y1="{py:.1}" y2="{py:.1}" stroke="#ddd"/>"##,
                x0 + left,
                x0 + left + pw
            );
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{:.1}" font-size="10" text-anchor="end" font-family="sans-serif">{}</text>"#,
                x0 + left - 4.0,
                py + 3.0,
                short(d)
            );
        }
        d *= 10.0;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="11" font-family="sans-serif" transform="rotate(-90 {} {})">{unit}</text>"#,
        x0 + 14.0,
        y0 + ph / 2.0 + 20.0,
        x0 + 14.0,
        y0 + ph / 2.0 + 20.0
    );
    let mut d = 1.0f64;
    while d <= xhi {
        if d >= xlo {
            let px = x0 + left + log_pos(d, xlo, xhi, pw);
            let _ = writeln!(
                s,
                r##"<line x1="{px:.1}" x2="{px:.1}" y1="{y0}" y2="{}" stroke="#ddd"/>"##,
                y0 + ph
            );
            let _ = writeln!(
                s,
                r#"<text x="{px:.1}" y="{}" font-size="10" text-anchor="middle" font-family="sans-serif">{}</text>"#,
                y0 + ph + 14.0,
                short(d)
            );
        }
        d *= 16.0;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="11" text-anchor="middle" font-family="sans-serif">message size (bytes, log)</text>"#,
        x0 + left + pw / 2.0,
        y0 + ph + 30.0
    );
}

/// Writes a two-panel SVG: latency (the p50 one-way latency when measured,
/// else µs per transfer) and bandwidth against size.
pub fn write_svg(path: &str, rows: &[Row], tool: &str, provider: &str) -> std::io::Result<()> {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="860" height="340" viewBox="0 0 860 340">"#
    );
    let _ = writeln!(s, r#"<rect width="860" height="340" fill="white"/>"#);
    // Zero-byte rows have no place on log axes.
    let rows: Vec<&Row> = rows.iter().filter(|r| r.size > 0).collect();
    let lat: Vec<(f64, f64)> = rows
        .iter()
        .map(|r| (r.size as f64, r.lat.map_or(r.usec(), |l| l.p50)))
        .collect();
    let bw: Vec<(f64, f64)> = rows.iter().map(|r| (r.size as f64, r.mbps())).collect();
    let what = if rows.iter().all(|r| r.lat.is_some()) {
        "one-way latency p50"
    } else {
        "usec per transfer"
    };
    panel(
        &mut s,
        0.0,
        &format!("ofi {tool} ({provider}): {what}"),
        "usec",
        &lat,
        "#1f77b4",
    );
    panel(
        &mut s,
        430.0,
        &format!("ofi {tool} ({provider}): bandwidth"),
        "MB/s",
        &bw,
        "#d62728",
    );
    s.push_str("</svg>\n");
    std::fs::write(path, s)
}
