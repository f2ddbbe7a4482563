//! Hybrid addresses: the node id that decides locality and both inner
//! addresses, opaque to this crate and checked by the inner providers.
//!
//! Layout (little endian), 12 bytes of header then the two addresses:
//!
//! ```text
//! 0      'H' (0x48)            magic
//! 1      1                     version
//! 2      S                     shm address length (1..=255)
//! 3      T                     tcp address length (1..=255)
//! 4..12  node id (u64)         see crate::node
//! 12..   S bytes shm address, then T bytes tcp address
//! ```
//!
//! An IPv4 peer with a seven-digit pid fits in 47 bytes, an IPv6 one in
//! 59: under libfabric's FI_NAME_MAX (64), the buffer Open MPI gives
//! `fi_getname`.

use ofi_core::error::{Error, Result};
use ofi_core::provider::AddrOps;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// First byte of every hybrid address.
pub const MAGIC: u8 = b'H';
/// Format version.
pub const VERSION: u8 = 1;
/// Header bytes before the inner addresses.
pub const HEADER: usize = 12;

/// What a hybrid address must look like (named in refusals).
const EXPECTED: &str = "a hybrid address ('H', version 1, shm length, tcp length, \
     8-byte node id, shm address, tcp address) as fi_getname returns it";

/// A decoded hybrid address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HybridAddr {
    /// The node the endpoint runs on.
    pub node: u64,
    /// The shm endpoint's address.
    pub shm: Vec<u8>,
    /// The tcp endpoint's address.
    pub tcp: Vec<u8>,
}

impl HybridAddr {
    /// Encodes the address; inner addresses longer than 255 bytes are refused.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let s = u8::try_from(self.shm.len()).map_err(|_| Error::inval("shm address too long"))?;
        let t = u8::try_from(self.tcp.len()).map_err(|_| Error::inval("tcp address too long"))?;
        let mut v = Vec::with_capacity(HEADER + self.shm.len() + self.tcp.len());
        v.extend_from_slice(&[MAGIC, VERSION, s, t]);
        v.extend_from_slice(&self.node.to_le_bytes());
        v.extend_from_slice(&self.shm);
        v.extend_from_slice(&self.tcp);
        Ok(v)
    }

    /// Decodes an address; anything of another shape is `FI_EINVAL` naming
    /// what was expected.
    pub fn decode(b: &[u8]) -> Result<HybridAddr> {
        let bad = |why: String| Err(Error::inval(format!("hybrid: {why}; expected {EXPECTED}")));
        if b.len() < HEADER {
            return bad(format!(
                "address of {} bytes is shorter than the header",
                b.len()
            ));
        }
        if b[0] != MAGIC || b[1] != VERSION {
            return bad(format!(
                "address starts with {:#04x} {:#04x}, not 'H' and version 1",
                b[0], b[1]
            ));
        }
        let (s, t) = (usize::from(b[2]), usize::from(b[3]));
        if s == 0 || t == 0 || b.len() != HEADER + s + t {
            return bad(format!(
                "address of {} bytes does not hold the shm ({s}) and tcp ({t}) addresses its header announces",
                b.len()
            ));
        }
        let mut node = [0u8; 8];
        node.copy_from_slice(&b[4..12]);
        Ok(HybridAddr {
            node: u64::from_le_bytes(node),
            shm: b[HEADER..HEADER + s].to_vec(),
            tcp: b[HEADER + s..].to_vec(),
        })
    }
}

/// Address handling for hybrid AVs: checks both inner addresses with the
/// inner providers' rules and counts inserts, so endpoints notice new peers.
pub struct HybridAddrOps {
    pub(crate) shm: Arc<dyn AddrOps>,
    pub(crate) tcp: Arc<dyn AddrOps>,
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
            tcp: self
                .tcp
                .canonical(&a.tcp)
                .map_err(|e| Error::inval(format!("hybrid: its tcp part: {}", e.message())))?,
        }
        .encode()?;
        self.inserts.fetch_add(1, Ordering::AcqRel);
        Ok(canon)
    }
    fn to_string(&self, addr: &[u8]) -> String {
        match HybridAddr::decode(addr) {
            Ok(a) => format!(
                "fi_hybrid://{:016x};{};{}",
                a.node,
                self.shm.to_string(&a.shm).trim_end_matches('\0'),
                self.tcp.to_string(&a.tcp)
            ),
            Err(_) => format!("fi_hybrid://invalid({} bytes)", addr.len()),
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
            node: 0x0102_0304_0506_0708,
            shm: b"fi_shm://42.1\0".to_vec(),
            tcp: vec![2, 0, 0x1f, 0x90, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        let b = a.encode().unwrap();
        let mut want = vec![b'H', 1, 14, 16, 8, 7, 6, 5, 4, 3, 2, 1];
        want.extend_from_slice(b"fi_shm://42.1\0");
        want.extend_from_slice(&[2, 0, 0x1f, 0x90, 10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b, want);
        assert_eq!(b.len(), 42);
        assert_eq!(HybridAddr::decode(&b).unwrap(), a);
    }

    #[test]
    fn wrong_shapes_are_einval_naming_the_format() {
        let good = HybridAddr {
            node: 1,
            shm: b"x".to_vec(),
            tcp: b"y".to_vec(),
        }
        .encode()
        .unwrap();
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            good[..11].to_vec(),
            [&good[..], b"z"].concat(),
            good[..good.len() - 1].to_vec(),
            {
                let mut v = good.clone();
                v[0] = b'X';
                v
            },
            {
                let mut v = good.clone();
                v[2] = 0;
                v
            },
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
