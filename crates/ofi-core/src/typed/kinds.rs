//! Enumerations with libfabric's values: [`EpType`], [`AddrFormat`],
//! [`Threading`], [`Progress`], [`AvType`], [`Protocol`].

use crate::consts::{self, addr_format, av_type, ep_type, progress, protocol, threading};
use crate::error::{errno, Error};
use std::fmt;
use std::str::FromStr;

/// A number that names no variant of a typed kind (a newer libfabric's
/// value, or a corrupt one): refused rather than guessed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownValue {
    /// What was being converted (`"endpoint type"` …).
    pub what: &'static str,
    /// The number.
    pub value: u32,
}

impl fmt::Display for UnknownValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} is not one ofi knows", self.what, self.value)
    }
}

impl std::error::Error for UnknownValue {}

impl From<UnknownValue> for Error {
    fn from(u: UnknownValue) -> Error {
        Error::new(errno::FI_EINVAL, u.to_string())
    }
}

/// An enum over libfabric's numbers: `u32::from`, `TryFrom<u32>`,
/// `Display` and `FromStr` by the names `ofi info` prints.
macro_rules! kind_enum {
    (
        $(#[$m:meta])* $name:ident, $what:literal, $table:expr, $prefix:literal,
        { $($(#[$vm:meta])* $v:ident = $val:path,)* }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        #[repr(u32)]
        pub enum $name {
            $($(#[$vm])* $v = $val,)*
        }
        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                v as u32
            }
        }
        impl TryFrom<u32> for $name {
            type Error = UnknownValue;
            fn try_from(v: u32) -> Result<Self, UnknownValue> {
                match v {
                    $(x if x == $val => Ok($name::$v),)*
                    _ => Err(UnknownValue { what: $what, value: v }),
                }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let v = u32::from(*self);
                match consts::enum_name($table, v) {
                    Some(n) => f.write_str(n),
                    None => write!(f, "Unknown ({v})"),
                }
            }
        }
        impl FromStr for $name {
            type Err = Error;
            /// The full name (`FI_EP_RDM`) or its short form (`rdm`).
            fn from_str(s: &str) -> Result<Self, Error> {
                let v = consts::enum_value($table, $prefix, s)
                    .ok_or_else(|| Error::inval(format!("unknown {} '{s}'", $what)))?;
                Ok($name::try_from(v)?)
            }
        }
    };
}

kind_enum! {
    /// Endpoint types (`ep_attr.type`).
    EpType, "endpoint type", consts::EP_TYPE_NAMES, "FI_EP_", {
        /// Unspecified (hints: any).
        Unspec = ep_type::FI_EP_UNSPEC,
        /// Connected, reliable (with connection management).
        Msg = ep_type::FI_EP_MSG,
        /// Unconnected, unreliable datagrams.
        Dgram = ep_type::FI_EP_DGRAM,
        /// Reliable datagrams: unconnected, reliable.
        Rdm = ep_type::FI_EP_RDM,
        /// Socket stream.
        SockStream = ep_type::FI_EP_SOCK_STREAM,
        /// Socket datagram.
        SockDgram = ep_type::FI_EP_SOCK_DGRAM,
    }
}

kind_enum! {
    /// Address formats (`fi_info.addr_format`).
    AddrFormat, "address format", consts::ADDR_FORMAT_NAMES, "FI_", {
        /// Unspecified (hints: any).
        Unspec = addr_format::FI_FORMAT_UNSPEC,
        /// `struct sockaddr` (IPv4 or IPv6).
        Sockaddr = addr_format::FI_SOCKADDR,
        /// `struct sockaddr_in`.
        SockaddrIn = addr_format::FI_SOCKADDR_IN,
        /// `struct sockaddr_in6`.
        SockaddrIn6 = addr_format::FI_SOCKADDR_IN6,
        /// `struct sockaddr_ib`.
        SockaddrIb = addr_format::FI_SOCKADDR_IB,
        /// PSM.
        Psmx = addr_format::FI_ADDR_PSMX,
        /// GNI.
        Gni = addr_format::FI_ADDR_GNI,
        /// BGQ.
        Bgq = addr_format::FI_ADDR_BGQ,
        /// MLX.
        Mlx = addr_format::FI_ADDR_MLX,
        /// A formatted string (`fi_shm://…`).
        Str = addr_format::FI_ADDR_STR,
        /// PSM2.
        Psmx2 = addr_format::FI_ADDR_PSMX2,
        /// IB UD.
        IbUd = addr_format::FI_ADDR_IB_UD,
        /// EFA.
        Efa = addr_format::FI_ADDR_EFA,
        /// PSM3.
        Psmx3 = addr_format::FI_ADDR_PSMX3,
        /// OPX.
        Opx = addr_format::FI_ADDR_OPX,
        /// CXI.
        Cxi = addr_format::FI_ADDR_CXI,
    }
}

kind_enum! {
    /// Threading models (`domain_attr.threading`).
    Threading, "threading model", consts::THREADING_NAMES, "FI_THREAD_", {
        /// Unspecified (hints: any).
        Unspec = threading::FI_THREAD_UNSPEC,
        /// Every call from any thread.
        Safe = threading::FI_THREAD_SAFE,
        /// Calls serialised per object.
        Fid = threading::FI_THREAD_FID,
        /// Calls serialised per domain.
        Domain = threading::FI_THREAD_DOMAIN,
        /// Calls serialised per completion queue.
        Completion = threading::FI_THREAD_COMPLETION,
        /// Calls serialised per endpoint.
        Endpoint = threading::FI_THREAD_ENDPOINT,
    }
}

kind_enum! {
    /// Progress models (`domain_attr.control_progress` / `data_progress`).
    Progress, "progress model", consts::PROGRESS_NAMES, "FI_PROGRESS_", {
        /// Unspecified (hints: any).
        Unspec = progress::FI_PROGRESS_UNSPEC,
        /// The provider progresses on its own (a thread of its own).
        Auto = progress::FI_PROGRESS_AUTO,
        /// The application's calls drive progress.
        Manual = progress::FI_PROGRESS_MANUAL,
    }
}

kind_enum! {
    /// Address vector types (`domain_attr.av_type`).
    AvType, "address vector type", consts::AV_TYPE_NAMES, "FI_AV_", {
        /// Unspecified (hints: any).
        Unspec = av_type::FI_AV_UNSPEC,
        /// fi_addr values are opaque.
        Map = av_type::FI_AV_MAP,
        /// fi_addr values are indices.
        Table = av_type::FI_AV_TABLE,
    }
}

kind_enum! {
    /// Endpoint protocols (`ep_attr.protocol`).
    Protocol, "protocol", consts::PROTOCOL_NAMES, "FI_PROTO_", {
        /// Unspecified (hints: any).
        Unspec = protocol::FI_PROTO_UNSPEC,
        /// UDP.
        Udp = protocol::FI_PROTO_UDP,
        /// TCP sockets.
        SockTcp = protocol::FI_PROTO_SOCK_TCP,
        /// RxM.
        Rxm = protocol::FI_PROTO_RXM,
        /// RxD.
        Rxd = protocol::FI_PROTO_RXD,
        /// Shared memory.
        Shm = protocol::FI_PROTO_SHM,
        /// RxM over TCP.
        RxmTcp = protocol::FI_PROTO_RXM_TCP,
        /// xnet (tcp).
        Xnet = protocol::FI_PROTO_XNET,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_convert_both_ways_and_refuse_unknown_numbers() {
        assert_eq!(u32::from(EpType::Rdm), 3);
        assert_eq!(EpType::try_from(1), Ok(EpType::Msg));
        assert_eq!(AddrFormat::try_from(9), Ok(AddrFormat::Str));
        assert_eq!(Threading::try_from(3), Ok(Threading::Domain));
        assert_eq!(Progress::try_from(2), Ok(Progress::Manual));
        let e = EpType::try_from(77).unwrap_err();
        assert_eq!(
            e,
            UnknownValue {
                what: "endpoint type",
                value: 77
            }
        );
        assert_eq!(Error::from(e).code(), errno::FI_EINVAL);
        assert_eq!(EpType::Rdm.to_string(), "FI_EP_RDM");
        assert_eq!("rdm".parse::<EpType>().unwrap(), EpType::Rdm);
        assert_eq!(
            "FI_PROGRESS_AUTO".parse::<Progress>().unwrap(),
            Progress::Auto
        );
        assert!("warp".parse::<EpType>().is_err());
    }
}
