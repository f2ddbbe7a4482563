//! shm addresses: `fi_shm://PID.INDEX` (FI_ADDR_STR, NUL-terminated).

use ofi_core::error::{Error, Result};
use ofi_core::provider::AddrOps;

/// Prefix of every shm address.
pub const SCHEME: &str = "fi_shm://";

/// An endpoint's identity: its process and index within that process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShmAddr {
    /// Process id.
    pub pid: u32,
    /// Endpoint index in the process.
    pub idx: u32,
}

impl std::fmt::Display for ShmAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}.{}", self.pid, self.idx)
    }
}

impl ShmAddr {
    /// The 64-bit id carried in ring entries.
    pub fn id(&self) -> u64 {
        (u64::from(self.pid) << 32) | u64::from(self.idx)
    }
    /// From a 64-bit id.
    pub fn from_id(id: u64) -> Self {
        ShmAddr {
            pid: (id >> 32) as u32,
            idx: id as u32,
        }
    }
    /// The address bytes (with the trailing NUL).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = format!("{SCHEME}{}.{}", self.pid, self.idx).into_bytes();
        v.push(0);
        v
    }
    /// Parses address bytes; trailing NULs are ignored.
    pub fn parse(b: &[u8]) -> Result<Self> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let s =
            std::str::from_utf8(&b[..end]).map_err(|_| Error::inval("shm address is not UTF-8"))?;
        let rest = s.strip_prefix(SCHEME).ok_or_else(|| {
            Error::inval(format!("shm address '{s}' does not start with {SCHEME}"))
        })?;
        let (p, i) = rest.split_once('.').unwrap_or((rest, "0"));
        let pid = p
            .parse::<u32>()
            .map_err(|_| Error::inval(format!("shm address '{s}': bad pid")))?;
        let idx = i
            .parse::<u32>()
            .map_err(|_| Error::inval(format!("shm address '{s}': bad endpoint index")))?;
        if pid == 0 {
            return Err(Error::inval(format!("shm address '{s}': pid 0")));
        }
        Ok(ShmAddr { pid, idx })
    }
}

/// Address handling for shm AVs.
#[derive(Debug, Default)]
pub struct ShmAddrOps;

impl AddrOps for ShmAddrOps {
    fn canonical(&self, addr: &[u8]) -> Result<Vec<u8>> {
        Ok(ShmAddr::parse(addr)?.to_bytes())
    }
    fn to_string(&self, addr: &[u8]) -> String {
        match ShmAddr::parse(addr) {
            Ok(a) => format!("{SCHEME}{}.{}", a.pid, a.idx),
            Err(_) => String::from_utf8_lossy(addr).into_owned(),
        }
    }
    fn resolve(&self, node: &str, service: &str) -> Result<Vec<u8>> {
        let s = if service.is_empty() {
            node.to_string()
        } else {
            format!("{node}.{service}")
        };
        let s = if s.starts_with(SCHEME) {
            s
        } else {
            format!("{SCHEME}{s}")
        };
        self.canonical(s.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn roundtrip_and_rejects() {
        let a = ShmAddr { pid: 42, idx: 3 };
        assert_eq!(ShmAddr::parse(&a.to_bytes()).unwrap(), a);
        assert_eq!(ShmAddr::from_id(a.id()), a);
        assert!(ShmAddr::parse(b"fi_shm://x.1").is_err());
        assert!(ShmAddr::parse(b"fi_tcp://1.1").is_err());
        assert!(ShmAddr::parse(b"fi_shm://0.1").is_err());
        assert_eq!(ShmAddrOps.resolve("42", "3").unwrap(), a.to_bytes());
    }
}
