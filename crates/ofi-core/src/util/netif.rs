//! Network interfaces and their addresses (getifaddrs), for providers that
//! offer one fabric per interface subnet.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One address of one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfAddr {
    /// Interface name (`lo`, `eth0`).
    pub name: String,
    /// The address.
    pub addr: IpAddr,
    /// Prefix length of its subnet.
    pub prefix: u8,
    /// True for the loopback interface.
    pub loopback: bool,
    /// True when the interface is up.
    pub up: bool,
}

impl IfAddr {
    /// The subnet as `a.b.c.d/len` (the network address, host bits cleared).
    pub fn subnet(&self) -> String {
        match self.addr {
            IpAddr::V4(a) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(self.prefix.min(32)))
                };
                format!("{}/{}", Ipv4Addr::from(u32::from(a) & mask), self.prefix)
            }
            IpAddr::V6(a) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(self.prefix.min(128)))
                };
                format!("{}/{}", Ipv6Addr::from(u128::from(a) & mask), self.prefix)
            }
        }
    }
    /// True when `ip` lies in this address's subnet.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(self.prefix.min(32)))
                };
                u32::from(a) & mask == u32::from(*b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(self.prefix.min(128)))
                };
                u128::from(a) & mask == u128::from(*b) & mask
            }
            _ => false,
        }
    }
}

fn prefix_len(bytes: &[u8]) -> u8 {
    bytes.iter().map(|b| b.count_ones() as u8).sum()
}

/// Every IPv4 and IPv6 address of every interface.
pub fn interfaces() -> std::io::Result<Vec<IfAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        let flags = ifa.ifa_flags;
        // SAFETY: ifa_addr is non-null and points at a sockaddr.
        let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
        let (addr, prefix) = match family {
            libc::AF_INET => {
                // SAFETY: the family says this is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                let prefix = if ifa.ifa_netmask.is_null() {
                    32
                } else {
                    // SAFETY: the netmask of an AF_INET address is a sockaddr_in.
                    let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in) };
                    prefix_len(&m.sin_addr.s_addr.to_ne_bytes())
                };
                (IpAddr::V4(ip), prefix)
            }
            libc::AF_INET6 => {
                // SAFETY: the family says this is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                let prefix = if ifa.ifa_netmask.is_null() {
                    128
                } else {
                    // SAFETY: the netmask of an AF_INET6 address is a sockaddr_in6.
                    let m = unsafe { &*(ifa.ifa_netmask as *const libc::sockaddr_in6) };
                    prefix_len(&m.sin6_addr.s6_addr)
                };
                (IpAddr::V6(ip), prefix)
            }
            _ => continue,
        };
        out.push(IfAddr {
            name,
            addr,
            prefix,
            loopback: flags & libc::IFF_LOOPBACK as u32 != 0,
            up: flags & libc::IFF_UP as u32 != 0,
        });
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn loopback_is_listed_with_its_subnet() {
        let all = interfaces().unwrap();
        let lo = all
            .iter()
            .find(|a| a.loopback && a.addr.is_ipv4())
            .expect("IPv4 loopback");
        assert!(lo.up);
        assert_eq!(lo.addr, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(lo.subnet(), format!("127.0.0.0/{}", lo.prefix));
        assert!(lo.contains(&IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))));
        assert!(!lo.contains(&IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
    }
}
