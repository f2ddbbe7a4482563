//! The result table shared by `ofi pingpong` and `ofi bw`: fi_pingpong's
//! columns and number format, plus latency percentiles when measured.

/// fi_pingpong's number format: a unit suffix, with one decimal below ten
/// when the value is not whole (`1.5k`, `3.9g`).
fn unit_str(v: u64, base: u64) -> String {
    for (i, suffix) in ["g", "m", "k"].iter().enumerate() {
        let unit = base.pow(3 - i as u32);
        if v >= unit {
            let x = v as f64 / unit as f64;
            let tenths = (x * 10.0).floor() / 10.0;
            return if x < 10.0 && tenths.fract() != 0.0 {
                format!("{tenths:.1}{suffix}")
            } else {
                format!("{}{suffix}", v / unit)
            };
        }
    }
    v.to_string()
}

/// Counts in thousands.
pub fn cnt_str(v: u64) -> String {
    unit_str(v, 1000)
}

/// Bytes in KiB.
pub fn size_str(v: u64) -> String {
    unit_str(v, 1024)
}

/// One-way latency percentiles (µs).
#[derive(Clone, Copy, Debug)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl Latency {
    /// Percentiles of `samples` (sorted in place); zeros when empty.
    pub fn of(samples: &mut [f64]) -> Latency {
        samples.sort_by(|x, y| x.total_cmp(y));
        let pick = |q: f64| {
            samples
                .get(((samples.len() as f64 - 1.0) * q).round() as usize)
                .copied()
                .unwrap_or(0.0)
        };
        Latency {
            p50: pick(0.5),
            p99: pick(0.99),
            max: pick(1.0),
        }
    }
}

/// One size's result.
#[derive(Clone, Debug)]
pub struct Row {
    /// Message size.
    pub size: usize,
    /// Iterations (the #sent and #ack columns).
    pub iters: usize,
    /// Transfers of `size` bytes the iterations made (pingpong: two per
    /// iteration; bw: one).
    pub xfers: f64,
    /// Seconds for all iterations.
    pub secs: f64,
    /// Percentiles, when the tool measures each transfer.
    pub lat: Option<Latency>,
}

impl Row {
    /// MB/s as fi_pingpong counts it (10^6 bytes, every transfer).
    pub fn mbps(&self) -> f64 {
        self.xfers * self.size as f64 / self.secs / 1e6
    }
    /// µs per transfer.
    pub fn usec(&self) -> f64 {
        self.secs * 1e6 / self.xfers
    }
}

const HEADER: &str =
    "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec";
const HEADER_LAT: &str = "   p50(us)   p99(us)   max(us)";

/// Prints the column header; `lat` adds the percentile columns.
pub fn print_header(lat: bool) {
    outln!("{HEADER}{}", if lat { HEADER_LAT } else { "" });
}

/// Prints one row in fi_pingpong's format.
pub fn print_row(r: &Row) {
    let total = (r.xfers * r.size as f64) as u64;
    out!(
        "{:<8}{:<8}={:<8}{:<8}{:>9.2}s{:>11.2}{:>13.2}{:>13.2}",
        size_str(r.size as u64),
        cnt_str(r.iters as u64),
        cnt_str(r.iters as u64),
        size_str(total),
        r.secs,
        r.mbps(),
        r.usec(),
        r.xfers / r.secs / 1e6,
    );
    match r.lat {
        Some(l) => outln!("{:>10.2}{:>10.2}{:>10.2}", l.p50, l.p99, l.max),
        None => outln!(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_like_fi_pingpong() {
        assert_eq!(size_str(8), "8");
        assert_eq!(size_str(1536), "1.5k");
        assert_eq!(size_str(3072), "3k");
        assert_eq!(size_str(12288), "12k");
        assert_eq!(size_str(4_194_304_000), "3.9g");
        assert_eq!(cnt_str(10_000), "10k");
        assert_eq!(cnt_str(200_000), "200k");
        assert_eq!(size_str(3_200_000), "3m");
    }

    #[test]
    fn percentiles_pick_ranks() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let l = Latency::of(&mut v);
        assert_eq!((l.p50, l.p99, l.max), (51.0, 99.0, 100.0));
        let e = Latency::of(&mut []);
        assert_eq!(e.max, 0.0);
    }
}
