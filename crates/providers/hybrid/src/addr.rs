//! Hybrid addresses: the node id that decides locality and both inner
//! addresses, as one FI_ADDR_STR string (NUL-terminated), so that C
//! callers' `fi_av_insert` can find where each address ends:
//!
//! ```text
//! fi_hyb://NNNNNNNN;<shm part>;<network part>\0
//! ```
//!
//! `NNNNNNNN` is the node id (32 bits, hex; see crate::node). Each inner
//! address is opaque to this crate: one that is a NUL-terminated string
//! without ';' is carried as `s` + its text, any other as `b` + its bytes
//! in unpadded base64url. An IPv4 peer with a seven-digit pid takes 60
//! bytes: under libfabric's FI_NAME_MAX (64), the buffer Open MPI gives
//! `fi_getname`.

use ofi_core::error::{Error, Result};
use ofi_core::provider::AddrOps;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Prefix of every hybrid address.
pub const SCHEME: &str = "fi_hyb://";

/// What a hybrid address must look like (named in refusals).
const EXPECTED: &str = "a hybrid address ('fi_hyb://' node id ';' shm part ';' network part, \
     NUL-terminated) as fi_getname returns it";

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn b64_encode(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | u32::from(x) << (16 - 8 * i));
        for k in 0..=c.len() {
            out.push(B64[(n >> (18 - 6 * k)) as usize & 63] as char);
        }
    }
    out
}

fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for c in s.as_bytes().chunks(4) {
        if c.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, &x) in c.iter().enumerate() {
            let v = B64.iter().position(|&y| y == x)? as u32;
            n |= v << (18 - 6 * i);
        }
        for k in 0..c.len() - 1 {
            out.push((n >> (16 - 8 * k)) as u8);
        }
    }
    Some(out)
}

fn part_encode(b: &[u8]) -> String {
    match b.split_last() {
        Some((0, text))
            if !text.is_empty() && text.iter().all(|&c| c.is_ascii_graphic() && c != b';') =>
        {
            format!("s{}", String::from_utf8_lossy(text))
        }
        _ => format!("b{}", b64_encode(b)),
    }
}

fn part_decode(s: &str) -> Option<Vec<u8>> {
    match s.split_at_checked(1)? {
        ("s", t) if !t.is_empty() => Some([t.as_bytes(), &[0]].concat()),
        ("b", t) if !t.is_empty() => b64_decode(t),
        _ => None,
    }
}

/// A decoded hybrid address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HybridAddr {
    /// The node the endpoint runs on (32 bits are carried).
    pub node: u64,
    /// The shm endpoint's address.
    pub shm: Vec<u8>,
    /// The network endpoint's address (tcp's, or udp's under
    /// FI_HYBRID_NET=udp).
    pub net: Vec<u8>,
}

impl HybridAddr {
    /// Encodes the address (with its NUL).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut v = format!(
            "{SCHEME}{:08x};{};{}",
            self.node as u32,
            part_encode(&self.shm),
            part_encode(&self.net)
        )
        .into_bytes();
        v.push(0);
        Ok(v)
    }

    /// Decodes an address; anything of another shape is `FI_EINVAL` naming
    /// what was expected.
    pub fn decode(b: &[u8]) -> Result<HybridAddr> {
        let bad = |why: &str| Err(Error::inval(format!("hybrid: {why}; expected {EXPECTED}")));
        let Some((0, body)) = b.split_last() else {
            return bad(&format!("address of {} bytes does not end in NUL", b.len()));
        };
        let Ok(text) = std::str::from_utf8(body) else {
            return bad("address is not UTF-8");
        };
        let Some(rest) = text.strip_prefix(SCHEME) else {
            return bad("address does not start with fi_hyb://");
        };
        let mut it = rest.split(';');
        let (Some(node), Some(shm), Some(net), None) = (it.next(), it.next(), it.next(), it.next())
        else {
            return bad("address does not have three ';'-separated parts");
        };
        let Some(node) = (node.len() == 8)
            .then(|| u32::from_str_radix(node, 16).ok())
            .flatten()
        else {
            return bad("node id is not 8 hex digits");
        };
        match (part_decode(shm), part_decode(net)) {
            (Some(shm), Some(net)) => Ok(HybridAddr {
                node: u64::from(node),
                shm,
                net,
            }),
            _ => bad("an inner address is malformed"),
        }
    }

    /// True when both addresses name the same node (the locality rule).
    pub fn same_node(a: u64, b: u64) -> bool {
        a as u32 == b as u32
    }
}

/// Address handling for hybrid AVs: checks both inner addresses with the
/// inner providers' rules and counts inserts, so endpoints notice new peers.
pub struct HybridAddrOps {
    pub(crate) shm: Arc<dyn AddrOps>,
    pub(crate) net: Arc<dyn AddrOps>,
    /// Addresses accepted so far (a change tells endpoints to mirror the AV).
    pub(crate) inserts: Arc<AtomicU64>,
}

impl AddrOps for HybridAddrOps {
    fn canonical(&self, addr: &[u8]) -> Result<Vec<u8>> {
        let a = HybridAddr::decode(addr)?;
        let canon = HybridAddr {
            node: a.node,
            shm: self
                .shm
                .canonical(&a.shm)
                .map_err(|e| Error::inval(format!("hybrid: its shm part: {}", e.message())))?,
            net: self
                .net
                .canonical(&a.net)
                .map_err(|e| Error::inval(format!("hybrid: its network part: {}", e.message())))?,
        }
        .encode()?;
        self.inserts.fetch_add(1, Ordering::AcqRel);
        Ok(canon)
    }
    fn to_string(&self, addr: &[u8]) -> String {
        match HybridAddr::decode(addr) {
            Ok(a) => format!(
                "fi_hyb://{:08x};{};{}",
                a.node as u32,
                self.shm.to_string(&a.shm).trim_end_matches('\0'),
                self.net.to_string(&a.net)
            ),
            Err(_) => format!("fi_hyb://invalid({} bytes)", addr.len()),
        }
    }
    fn resolve(&self, node: &str, service: &str) -> Result<Vec<u8>> {
        Err(Error::inval(format!(
            "hybrid: {node}:{service} cannot be resolved to a hybrid address \
             (it carries the peer's node id and shm address); insert the bytes the peer's fi_getname returns"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_bytes_round_trip() {
        let a = HybridAddr {
            node: 0x0102_0304,
            shm: b"fi_shm://4194304.1\0".to_vec(),
            net: vec![2, 0, 0x1f, 0x90, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        let b = a.encode().unwrap();
        assert_eq!(
            b,
            b"fi_hyb://01020304;sfi_shm://4194304.1;bAgAfkAoAAAEAAAAAAAAAAA\0".to_vec()
        );
        assert!(b.len() <= 64, "{} bytes: over FI_NAME_MAX", b.len());
        assert_eq!(HybridAddr::decode(&b).unwrap(), a);
        // Every length of binary part round-trips.
        for n in 1..40u8 {
            let x = HybridAddr {
                node: 7,
                shm: (0..n).collect(),
                net: vec![n; n as usize],
            };
            assert_eq!(HybridAddr::decode(&x.encode().unwrap()).unwrap(), x);
        }
    }

    #[test]
    fn wrong_shapes_are_einval_naming_the_format() {
        let good = HybridAddr {
            node: 1,
            shm: b"x\0".to_vec(),
            net: b"y\0".to_vec(),
        }
        .encode()
        .unwrap();
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            good[..good.len() - 1].to_vec(),
            b"fi_shm://12.0\0".to_vec(),
            b"fi_hyb://0000001;sx;sy\0".to_vec(),
            b"fi_hyb://00000001;sx\0".to_vec(),
            b"fi_hyb://00000001;sx;sy;sz\0".to_vec(),
            b"fi_hyb://00000001;sx;b!\0".to_vec(),
            b"fi_hyb://00000001;sx;bA\0".to_vec(),
            b"fi_hyb://00000001;x;sy\0".to_vec(),
            // A plain sockaddr_in, as a tcp user would pass.
            vec![2, 0, 0x1f, 0x90, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        ];
        for c in cases {
            let e = HybridAddr::decode(&c).unwrap_err();
            assert_eq!(e.code(), ofi_core::error::errno::FI_EINVAL, "{c:?}");
            assert!(e.message().contains("expected a hybrid address"), "{e}");
        }
    }
}
