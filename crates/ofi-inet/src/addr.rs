//! Socket addresses in libfabric's formats: FI_SOCKADDR_IN (a 16-byte
//! `struct sockaddr_in`) and FI_SOCKADDR_IN6 (a 28-byte `struct sockaddr_in6`).

use ofi_core::consts::addr_format;
use ofi_core::error::{errno, Error, Result};
use ofi_core::provider::AddrOps;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, ToSocketAddrs};

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// Encodes a socket address as `struct sockaddr_in` / `sockaddr_in6` bytes.
pub fn encode(sa: &SocketAddr) -> Vec<u8> {
    match sa {
        SocketAddr::V4(v4) => {
            let mut b = vec![0u8; 16];
            b[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
            b[2..4].copy_from_slice(&v4.port().to_be_bytes());
            b[4..8].copy_from_slice(&v4.ip().octets());
            b
        }
        SocketAddr::V6(v6) => {
            let mut b = vec![0u8; 28];
            b[0..2].copy_from_slice(&AF_INET6.to_ne_bytes());
            b[2..4].copy_from_slice(&v6.port().to_be_bytes());
            b[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
            b[8..24].copy_from_slice(&v6.ip().octets());
            b[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
            b
        }
    }
}

/// Decodes `struct sockaddr_in` / `sockaddr_in6` bytes.
pub fn decode(b: &[u8]) -> Result<SocketAddr> {
    if b.len() < 2 {
        return Err(Error::inval("socket address shorter than its family field"));
    }
    let fam = u16::from_ne_bytes([b[0], b[1]]);
    match fam {
        AF_INET if b.len() >= 16 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        AF_INET6 if b.len() >= 28 => {
            let port = u16::from_be_bytes([b[2], b[3]]);
            let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[8..24]);
            let scope = u32::from_ne_bytes([b[24], b[25], b[26], b[27]]);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(o),
                port,
                flow,
                scope,
            )))
        }
        AF_INET | AF_INET6 => Err(Error::inval(format!(
            "socket address of family {fam} is truncated ({} bytes)",
            b.len()
        ))),
        _ => Err(Error::inval(format!(
            "address family {fam} is neither AF_INET nor AF_INET6"
        ))),
    }
}

/// Decodes an address an application gives for an endpoint of address
/// format `format` (`fi_setname`): the family must be the offer's.
pub fn decode_for(b: &[u8], format: u32) -> Result<SocketAddr> {
    let sa = decode(b)?;
    let want = match format {
        addr_format::FI_SOCKADDR_IN | addr_format::FI_SOCKADDR_IN6 => format,
        _ => format_of(&sa),
    };
    if format_of(&sa) != want {
        return Err(Error::inval(format!(
            "{sa} is not an address of the endpoint's format {want}"
        )));
    }
    Ok(sa)
}

/// The libfabric format of an address.
pub fn format_of(sa: &SocketAddr) -> u32 {
    match sa {
        SocketAddr::V4(_) => addr_format::FI_SOCKADDR_IN,
        SocketAddr::V6(_) => addr_format::FI_SOCKADDR_IN6,
    }
}

/// Resolves `node:service` (numeric or by name), preferring `family` when
/// given. Unresolvable names are `FI_ENODATA`.
pub fn resolve(
    node: Option<&str>,
    service: Option<&str>,
    family: Option<u32>,
    numeric: bool,
) -> Result<Vec<SocketAddr>> {
    let port: u16 = match service {
        None | Some("") => 0,
        Some(s) => s
            .parse()
            .map_err(|_| Error::inval(format!("service '{s}' is not a port number")))?,
    };
    let host = node.unwrap_or("0.0.0.0");
    let mut out: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) if numeric => {
            return Err(Error::inval(format!(
                "node '{host}' is not numeric (FI_NUMERICHOST)"
            )))
        }
        Err(_) => (host, port)
            .to_socket_addrs()
            .map_err(|e| Error::new(errno::FI_ENODATA, format!("cannot resolve '{host}': {e}")))?
            .collect(),
    };
    if let Some(f) = family {
        out.retain(|a| format_of(a) == f);
    }
    if out.is_empty() {
        return Err(Error::nodata(format!(
            "'{host}' has no address of the requested format"
        )));
    }
    Ok(out)
}

/// Address handling for the AVs of socket-addressed endpoints.
#[derive(Debug, Default)]
pub struct SockAddrOps;

impl AddrOps for SockAddrOps {
    fn canonical(&self, addr: &[u8]) -> Result<Vec<u8>> {
        let sa = decode(addr)?;
        if sa.port() == 0 {
            return Err(Error::inval(format!("address {sa} has no port")));
        }
        if sa.ip().is_unspecified() {
            return Err(Error::inval(format!(
                "address {sa} is the wildcard address"
            )));
        }
        Ok(encode(&sa))
    }
    fn to_string(&self, addr: &[u8]) -> String {
        match decode(addr) {
            Ok(SocketAddr::V4(a)) => format!("fi_sockaddr_in://{a}"),
            Ok(SocketAddr::V6(a)) => format!("fi_sockaddr_in6://{a}"),
            Err(_) => "fi_addr_unspec://?".into(),
        }
    }
    fn resolve(&self, node: &str, service: &str) -> Result<Vec<u8>> {
        let sa = resolve(Some(node), Some(service), None, false)?;
        Ok(encode(&sa[0]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_in_golden_bytes() {
        let sa: SocketAddr = "127.0.0.1:47592".parse().unwrap();
        let b = encode(&sa);
        assert_eq!(b, [2, 0, 0xb9, 0xe8, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decode(&b).unwrap(), sa);
    }

    #[test]
    fn sockaddr_in6_roundtrip() {
        let sa: SocketAddr = "[::1]:9000".parse().unwrap();
        let b = encode(&sa);
        assert_eq!(b.len(), 28);
        assert_eq!(decode(&b).unwrap(), sa);
        assert_eq!(SockAddrOps.to_string(&b), "fi_sockaddr_in6://[::1]:9000");
    }

    #[test]
    fn bad_addresses_are_rejected() {
        assert!(decode(&[2, 0, 1]).is_err());
        assert!(decode(&[7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]).is_err());
        assert!(SockAddrOps
            .canonical(&encode(&"127.0.0.1:0".parse().unwrap()))
            .is_err());
        assert!(SockAddrOps
            .canonical(&encode(&"0.0.0.0:5".parse().unwrap()))
            .is_err());
        assert!(resolve(Some("localhost"), Some("x"), None, false).is_err());
        assert!(resolve(Some("host.invalid"), Some("1"), None, true).is_err());
        assert_eq!(
            resolve(Some("127.0.0.1"), Some("5"), None, true).unwrap()[0].port(),
            5
        );
    }
}
