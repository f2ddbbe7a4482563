//! Message sizes (`-S`) and the integrity pattern (`-c`).

use crate::args::Args;

/// fi_pingpong's `-S all` list: 0, then 2^k and 3·2^(k-1) up to 6 MiB.
pub fn all_sizes() -> Vec<usize> {
    let mut v = vec![0, 1];
    let mut p = 2usize;
    while p <= 4 << 20 {
        v.push(p);
        v.push(p + p / 2);
        p *= 2;
    }
    v
}

/// One size: bytes with an optional k/m/g suffix (1024-based).
pub fn parse_size(s: &str) -> Option<usize> {
    let t = s.trim().to_ascii_lowercase();
    let (n, m) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 1usize << 10),
        'm' => (&t[..t.len() - 1], 1 << 20),
        'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (&t[..], 1),
    };
    n.parse::<usize>().ok()?.checked_mul(m)
}

/// The sizes `-S` asks for: `all`, one size, or a comma-separated list;
/// `default` when `-S` is absent.
pub fn sizes(a: &Args, default: &[usize]) -> Result<Vec<usize>, String> {
    match a.get("S") {
        None => Ok(default.to_vec()),
        Some("all") => Ok(all_sizes()),
        Some(s) => s
            .split(',')
            .map(|x| parse_size(x).ok_or_else(|| format!("bad size '{x}'")))
            .collect(),
    }
}

/// A count option (`-I`, `-W` …) with its default.
pub fn count(a: &Args, k: &str, default: usize) -> Result<usize, String> {
    match a.get(k) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|_| format!("bad -{k} '{v}' (a count is expected)")),
    }
}

/// The most iterations per size (`-I`): fi_pingpong's `int`.
pub const MAX_ITERS: usize = i32::MAX as usize;

/// An iteration count (`-I`): at least 1 (no iteration has no rate to
/// report) and at most [`MAX_ITERS`].
pub fn iterations(a: &Args, k: &str, default: usize) -> Result<usize, String> {
    let n = count(a, k, default)?;
    if !(1..=MAX_ITERS).contains(&n) {
        return Err(format!(
            "bad -{k} {n}: the number of iterations must be between 1 and {MAX_ITERS}"
        ));
    }
    Ok(n)
}

/// Bytes in a readable unit (`93.1 TiB`).
pub fn human(bytes: u128) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} bytes")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The memory this machine can still give (`MemAvailable`), if known.
fn available_memory() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Refuses sizes whose buffers (`copies` of the largest) cannot fit in the
/// memory this machine has available, before anything is allocated.
pub fn check_memory(sizes: &[usize], copies: usize) -> Result<(), String> {
    let Some(&max) = sizes.iter().max() else {
        return Ok(());
    };
    let need = max as u128 * copies as u128;
    match available_memory() {
        Some(have) if need > have => Err(format!(
            "size {max} ({}) needs {copies} buffers of that size, {} in all; this machine has {} \
             available",
            human(max as u128),
            human(need),
            human(have)
        )),
        _ => Ok(()),
    }
}

/// Refuses sizes above the largest message of the offer (`max_msg_size`).
pub fn check_max_msg(sizes: &[usize], info: &ofi::Info) -> Result<(), String> {
    let limit = info.ep_attr.max_msg_size;
    match sizes.iter().find(|&&s| s > limit) {
        Some(s) => Err(format!(
            "size {s} ({}) exceeds the largest message of provider {} (max_msg_size {limit})",
            human(*s as u128),
            info.provider()
        )),
        None => Ok(()),
    }
}

/// A zeroed buffer of `len` bytes, or a clear error when it cannot be had.
pub fn zeroed<T: Clone + Default>(len: usize, what: &str) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        format!(
            "cannot allocate {what} ({})",
            human(len as u128 * std::mem::size_of::<T>() as u128)
        )
    })?;
    v.resize(len, T::default());
    Ok(v)
}

/// The integrity pattern: byte i of `seed` is `(i * 31 + seed * 7) mod 251`,
/// which repeats every 251 bytes, so it is built once and copied.
fn pattern(seed: usize) -> [u8; 251] {
    let mut p = [0u8; 251];
    for (i, b) in p.iter_mut().enumerate() {
        *b = ((i * 31 + seed * 7) % 251) as u8;
    }
    p
}

/// Fills `buf` with the pattern of `seed`.
pub fn fill(buf: &mut [u8], seed: usize) {
    let p = pattern(seed);
    for chunk in buf.chunks_mut(251) {
        chunk.copy_from_slice(&p[..chunk.len()]);
    }
}

/// Checks that `buf` holds the pattern of `seed`.
pub fn check(buf: &[u8], seed: usize) -> Result<(), String> {
    let p = pattern(seed);
    for (k, chunk) in buf.chunks(251).enumerate() {
        if chunk != &p[..chunk.len()] {
            let j = chunk.iter().zip(&p).position(|(a, b)| a != b).unwrap_or(0);
            return Err(format!(
                "data check failed at byte {} of {}: got {:#x}, want {:#x}",
                k * 251 + j,
                buf.len(),
                chunk[j],
                p[j]
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Args {
        let v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        Args::parse(&v, "SI", &[]).unwrap()
    }

    #[test]
    fn size_lists_match_fi_pingpong() {
        let all = all_sizes();
        assert_eq!(&all[..8], &[0, 1, 2, 3, 4, 6, 8, 12]);
        assert_eq!(*all.last().unwrap(), 6 << 20);
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("99999999999999g"), None);
        assert_eq!(
            sizes(&args(&["-S", "8,4k,1m"]), &[]).unwrap(),
            [8, 4096, 1 << 20]
        );
        assert_eq!(sizes(&args(&[]), &[64]).unwrap(), [64]);
        assert!(sizes(&args(&["-S", "8,,9"]), &[]).is_err());
        assert_eq!(count(&args(&["-I", "7"]), "I", 10), Ok(7));
        assert!(count(&args(&["-I", "x"]), "I", 10).is_err());
    }

    #[test]
    fn absurd_counts_and_sizes_are_refused() {
        assert_eq!(iterations(&args(&["-I", "7"]), "I", 10), Ok(7));
        assert_eq!(iterations(&args(&[]), "I", 10), Ok(10));
        let e = iterations(&args(&["-I", "0"]), "I", 10).unwrap_err();
        assert!(e.contains("between 1 and"), "{e}");
        assert!(iterations(&args(&["-I", "99999999999999"]), "I", 10).is_err());
        let e = check_memory(&[64, 99_999_999_999_999], 2).unwrap_err();
        assert!(e.contains("available") && e.contains("TiB"), "{e}");
        assert!(check_memory(&[64, 4096], 2).is_ok());
        assert!(zeroed::<u8>(usize::MAX / 2, "a test buffer").is_err());
        assert_eq!(zeroed::<u8>(3, "x").unwrap(), [0, 0, 0]);
        assert_eq!(human(3 << 40), "3.0 TiB");
        let mut info = ofi::Info::hints();
        info.ep_attr.max_msg_size = 100;
        assert!(check_max_msg(&[10, 100], &info).is_ok());
        let e = check_max_msg(&[10, 101], &info).unwrap_err();
        assert!(e.contains("max_msg_size 100"), "{e}");
    }

    #[test]
    fn pattern_round_trips_and_reports_the_first_bad_byte() {
        let mut b = vec![0u8; 1000];
        fill(&mut b, 3);
        assert!(check(&b, 3).is_ok());
        assert!(check(&b, 4).is_err());
        b[600] ^= 1;
        let e = check(&b, 3).unwrap_err();
        assert!(e.contains("byte 600 of 1000"), "{e}");
    }
}
