//! shm addresses (FI_ADDR_STR, NUL-terminated): the native
//! `fi_shm://PID.INDEX`, and names as fi_shm(7) describes them
//! (`fi_ns://node:service`, `fi_shm://node`, any `prefix://name`, or a
//! plain name), which an endpoint opened with that source address holds
//! (an alias to its segment, `ofi_shmem::name`) and which an AV resolves to
//! the native address when it inserts them.

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

/// What an address names: an endpoint by its identity, or a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `fi_shm://PID[.INDEX]`.
    Native(ShmAddr),
    /// Any other address: the name after `prefix://` (or the whole
    /// string), as an endpoint's alias holds it.
    Name(String),
}

impl Target {
    /// Reads address bytes (up to the first NUL): native when it parses
    /// as one, else a name. Empty, non-UTF-8 or over-long names are
    /// refused.
    pub fn of(b: &[u8]) -> Result<Target> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let s =
            std::str::from_utf8(&b[..end]).map_err(|_| Error::inval("shm address is not UTF-8"))?;
        if s.starts_with(SCHEME) {
            if let Ok(a) = ShmAddr::parse(s.as_bytes()) {
                return Ok(Target::Native(a));
            }
        }
        let name = s.split_once("://").map_or(s, |(_, n)| n);
        if name.is_empty() || name.len() > ofi_shmem::name::NAME_MAX {
            return Err(Error::inval(format!(
                "shm address '{s}': the name is empty or longer than {} bytes",
                ofi_shmem::name::NAME_MAX
            )));
        }
        Ok(Target::Name(name.to_string()))
    }
}

/// The address getinfo derives from `node` and `service` (fi_shm(7)): an
/// address containing `://` as given, else `fi_ns://node:service`,
/// `fi_ns://service` or `fi_shm://node`; `None` without either.
pub fn from_node(node: Option<&str>, service: Option<&str>) -> Option<String> {
    let service = service.filter(|s| !s.is_empty());
    match (node.filter(|n| !n.is_empty()), service) {
        (Some(n), _) if n.contains("://") => Some(n.to_string()),
        (Some(n), Some(s)) => Some(format!("fi_ns://{n}:{s}")),
        (None, Some(s)) => Some(format!("fi_ns://{s}")),
        (Some(n), None) => Some(format!("{SCHEME}{n}")),
        (None, None) => None,
    }
}

/// `s` as address bytes (with the trailing NUL).
pub fn str_bytes(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// The default source address of an offer: `fi_shm://PID` (this
/// process's endpoints, each with its own index).
pub fn default_src() -> Vec<u8> {
    str_bytes(&format!("{SCHEME}{}", std::process::id()))
}

/// The native address of what `addr` names: itself, or the endpoint that
/// holds the name now (`FI_EINVAL` when none does).
pub fn resolve_bytes(addr: &[u8]) -> Result<ShmAddr> {
    match Target::of(addr)? {
        Target::Native(a) => Ok(a),
        Target::Name(n) => match ofi_shmem::name::resolve(ofi_shmem::proc::uid(), &n) {
            Some((pid, idx)) if pid != 0 => Ok(ShmAddr { pid, idx }),
            _ => Err(Error::inval(format!("no shm endpoint is named '{n}'"))),
        },
    }
}

/// Address handling for shm AVs.
#[derive(Debug, Default)]
pub struct ShmAddrOps;

impl AddrOps for ShmAddrOps {
    fn canonical(&self, addr: &[u8]) -> Result<Vec<u8>> {
        Ok(resolve_bytes(addr)?.to_bytes())
    }
    fn to_string(&self, addr: &[u8]) -> String {
        match ShmAddr::parse(addr) {
            Ok(a) => format!("{SCHEME}{}.{}", a.pid, a.idx),
            Err(_) => String::from_utf8_lossy(addr).into_owned(),
        }
    }
    fn resolve(&self, node: &str, service: &str) -> Result<Vec<u8>> {
        // PID and INDEX as node and service: the native address.
        if node.parse::<u32>().is_ok() && service.parse::<u32>().is_ok() {
            return self.canonical(format!("{SCHEME}{node}.{service}").as_bytes());
        }
        let s = from_node(Some(node), Some(service))
            .ok_or_else(|| Error::inval("shm: an empty node and service name nothing"))?;
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

    #[test]
    fn names_as_fi_shm_describes() {
        assert_eq!(
            from_node(Some("127.0.0.1"), Some("9228")).unwrap(),
            "fi_ns://127.0.0.1:9228"
        );
        assert_eq!(from_node(None, Some("9228")).unwrap(), "fi_ns://9228");
        assert_eq!(from_node(Some("host"), None).unwrap(), "fi_shm://host");
        assert_eq!(from_node(Some("x://y"), Some("1")).unwrap(), "x://y");
        assert_eq!(from_node(None, None), None);
        let name = |s: &str| Target::of(s.as_bytes()).unwrap();
        assert_eq!(name("fi_ns://a:1\0"), Target::Name("a:1".into()));
        assert_eq!(name("other://a:1"), Target::Name("a:1".into()));
        assert_eq!(name("fi_shm://127.0.0.1"), Target::Name("127.0.0.1".into()));
        assert_eq!(name("plain"), Target::Name("plain".into()));
        assert_eq!(
            name("fi_shm://7.2"),
            Target::Native(ShmAddr { pid: 7, idx: 2 })
        );
        assert!(Target::of(b"fi_ns://").is_err());
        assert!(Target::of(b"").is_err());
        assert!(Target::of(&[0xff, 0xfe]).is_err());
        assert!(Target::of("fi_ns://".repeat(40).as_bytes()).is_err());
        // A name nobody holds does not resolve.
        assert!(resolve_bytes(b"fi_ns://nobody-holds-this:1").is_err());
    }
}
