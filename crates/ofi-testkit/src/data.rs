//! Data patterns: every 8-byte word depends on a seed and its position, so
//! shifted, stale or foreign bytes show; stamped messages; hex.

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fills `buf` with the pattern of `seed`: every 8-byte word depends on the
/// seed and its position, so shifted, stale or foreign bytes show.
pub fn fill(buf: &mut [u8], seed: u64) {
    let s = mix(seed ^ 0x5eed);
    for (j, c) in buf.chunks_mut(8).enumerate() {
        let w = mix(s ^ j as u64).to_le_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
}

/// The first offset where `buf` differs from the pattern of `seed`.
pub fn mismatch(buf: &[u8], seed: u64) -> Option<usize> {
    let s = mix(seed ^ 0x5eed);
    for (j, c) in buf.chunks(8).enumerate() {
        let w = mix(s ^ j as u64).to_le_bytes();
        if c != &w[..c.len()] {
            let k = c
                .iter()
                .zip(w.iter())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Some(j * 8 + k);
        }
    }
    None
}

/// `len` bytes of the pattern of `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(&mut v, seed);
    v
}

/// Writes a stamped message: `seq` in the first 8 bytes, then the pattern
/// of `seq` (`buf` holds at least 8 bytes).
pub fn stamp(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    fill(&mut buf[8..], seq);
}

/// Checks a stamped message of `len` bytes; its sequence number.
pub fn check_stamp(buf: &[u8], len: usize) -> Result<u64, String> {
    if len < 8 || len > buf.len() {
        return Err(format!("length {len} (buffer {})", buf.len()));
    }
    let seq = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
    match mismatch(&buf[8..len], seq) {
        None => Ok(seq),
        Some(at) => Err(format!(
            "message seq {seq} of {len} bytes differs from its pattern at byte {}",
            at + 8
        )),
    }
}

/// Hex encoding (addresses over stdin/stdout).
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Hex decoding.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}
