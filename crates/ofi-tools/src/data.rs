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
