//! The DGRAM endpoint: one UDP datagram per message, unreliable by
//! contract (a datagram may be lost; it is never damaged or duplicated by
//! the provider). A 24-byte header carries the tag and remote CQ data
//! (`ofi_wire::udp::Dgram`); with an auth key every datagram ends with a
//! truncated HMAC and datagrams that fail it are dropped, so endpoints of
//! different keys exchange nothing.
//!
//! Sends go to the socket at once and complete when it took them
//! (`FI_EAGAIN` when its buffer is full). Receives match in posting order
//! against the message or tagged queue (tag and ignore bits, directed
//! receive by source); a datagram is read only while a receive is posted,
//! and one no receive takes waits, within a bound, as unexpected.
//! Multicast: [`DgramEp::join_group`] (the core's `fi_join`).
#![allow(unsafe_code)]

use crate::domain::{Member, Shared};
use crate::sys::{Part, RawAddr, UdpSocket};
use crate::UdpConfig;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::Info;
use ofi_core::object::{EpBindings, RecvOp, SendOp};
use ofi_core::provider::{EndpointOps, McOps, Progress};
use ofi_core::util::auth::AuthKey;
use ofi_core::util::cq::{CqErrEntry, CqTaggedEntry};
use ofi_core::util::hash::IdMap;
use ofi_core::util::iov::{copy_to_iov, iov_len, IoVec};
use ofi_core::util::lock::SpinLock;
use ofi_core::util::matching::{MatchQueues, PostedRecv, Unexpected, MAX_IOV};
use ofi_wire::udp::{dflag, Dgram, DgramRepr, DGRAM_HDR_LEN, MAC_LEN};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

/// The first transcript part of a DGRAM message's MAC.
const LABEL: &[u8] = b"ofi-udp-v1 dgram";
/// Most datagrams read per drive of the endpoint.
const BATCH: usize = 64;
/// Unexpected datagrams kept at most (bytes), the oldest dropped past it.
const MAX_UNEXPECTED: usize = 1 << 20;

/// What an unexpected datagram of `len` bytes counts against
/// [`MAX_UNEXPECTED`]: its payload and its entry (so empty datagrams,
/// which a peer can send by the million, are bounded too).
fn charge(len: usize) -> usize {
    len + std::mem::size_of::<Unexpected<Vec<u8>>>()
}

/// Most iov entries per operation.
pub const IOV_LIMIT: usize = 4;

/// A multicast group the endpoint joined.
struct Group {
    id: u64,
    group: SocketAddr,
    /// A socket of its own, bound to the group's address and port (unless
    /// the endpoint's socket, bound to the wildcard address on that port,
    /// takes the group's datagrams), in the domain's poller.
    sock: Option<UdpSocket>,
    fi_addr: u64,
    recv: bool,
}

struct Inner {
    b: EpBindings,
    mq: MatchQueues<Vec<u8>>,
    unexpected_bytes: usize,
    /// Destinations by fi_addr, for the AV generation `dest_gen`.
    dests: IdMap<u64, RawAddr>,
    dest_gen: u64,
    /// Sources by address, for the AV generation `src_gen`.
    srcs: std::collections::HashMap<SocketAddr, u64>,
    src_gen: u64,
    scratch: Vec<u8>,
    groups: Vec<Group>,
    next_group: u64,
    src_ok: bool,
    /// Datagrams dropped (malformed, failing the key, no room).
    dropped: u64,
}

/// A udp DGRAM endpoint.
pub struct DgramEp {
    shared: Arc<Shared>,
    sock: UdpSocket,
    key_poll: u64,
    me: Vec<u8>,
    local: SocketAddr,
    ifindex: u32,
    max_msg: usize,
    key: Option<AuthKey>,
    enabled: AtomicBool,
    inner: SpinLock<Inner>,
    this: Weak<DgramEp>,
}

impl DgramEp {
    /// Opens the endpoint on the offer's source address.
    pub fn open(
        cfg: &UdpConfig,
        info: &Info,
        shared: Arc<Shared>,
        key: Option<AuthKey>,
    ) -> Result<Arc<DgramEp>> {
        let src = match &info.src_addr {
            Some(b) => crate::addr::decode(b)?,
            None => "127.0.0.1:0".parse().expect("literal address"),
        };
        let sock = UdpSocket::bind(&src, false)
            .map_err(|e| Error::os(e, &format!("udp: binding {src}")))?;
        sock.set_buffers(cfg.socket_buffer);
        let local = sock
            .local_addr()
            .map_err(|e| Error::os(e, "udp: getsockname"))?;
        let _ = sock.no_fragments(local.is_ipv6());
        let ifname = info.domain_attr.name.clone().unwrap_or_default();
        let ifindex = crate::sys::if_index(&ifname);
        // Multicast goes out of the endpoint's interface.
        let _ = sock.multicast_from(local.ip(), ifindex);
        let max_msg = info
            .ep_attr
            .max_msg_size
            .min(crate::dgram_max(&ifname, local.is_ipv6()));
        let key_poll = shared.key();
        shared
            .watch(sock.fd(), key_poll)
            .map_err(|e| Error::os(e, "udp: epoll add"))?;
        let scratch = vec![0u8; ofi_wire::udp::MAX_DATAGRAM + 1];
        Ok(Arc::new_cyclic(|this| DgramEp {
            shared,
            me: crate::addr::encode(&local),
            sock,
            key_poll,
            local,
            ifindex,
            max_msg,
            key,
            enabled: AtomicBool::new(false),
            inner: SpinLock::new(Inner {
                b: EpBindings::default(),
                mq: MatchQueues::new(info.rx_attr.size.clamp(16, 4096)),
                unexpected_bytes: 0,
                dests: IdMap::default(),
                dest_gen: u64::MAX,
                srcs: std::collections::HashMap::new(),
                src_gen: u64::MAX,
                scratch,
                groups: Vec::new(),
                next_group: 1,
                src_ok: info.caps & FI_SOURCE != 0,
                dropped: 0,
            }),
            this: this.clone(),
        }))
    }

    fn dest(&self, g: &mut Inner, fi_addr: u64) -> Result<RawAddr> {
        let av =
            g.b.av
                .clone()
                .ok_or_else(|| Error::new(errno::FI_ENOAV, "udp: no address vector bound"))?;
        let gen = av.generation();
        if gen != g.dest_gen {
            g.dests.clear();
            g.dest_gen = gen;
        }
        if let Some(a) = g.dests.get(&fi_addr) {
            return Ok(a.clone());
        }
        let bytes = av.lookup(fi_addr).map_err(|_| {
            Error::inval(format!(
                "udp: destination fi_addr {fi_addr} is not in the address vector"
            ))
        })?;
        let sa = crate::addr::decode(&bytes)?;
        if sa.is_ipv4() != self.local.is_ipv4() {
            return Err(Error::inval(format!(
                "udp: destination {sa} is not of the endpoint's address family"
            )));
        }
        let a = RawAddr::new(&sa);
        g.dests.insert(fi_addr, a.clone());
        Ok(a)
    }

    fn source(g: &mut Inner, from: &SocketAddr) -> u64 {
        let Some(av) = g.b.av.clone() else {
            return FI_ADDR_NOTAVAIL;
        };
        let gen = av.generation();
        if gen != g.src_gen {
            g.srcs.clear();
            g.src_gen = gen;
        }
        if let Some(a) = g.srcs.get(from) {
            return *a;
        }
        let a = av
            .reverse(&crate::addr::encode(from))
            .unwrap_or(FI_ADDR_NOTAVAIL);
        if g.srcs.len() < 4096 {
            g.srcs.insert(*from, a);
        }
        a
    }

    fn mac(&self, hdr: &[u8], body: &[&[u8]]) -> Option<[u8; MAC_LEN]> {
        let k = self.key.as_ref()?;
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + body.len());
        parts.push(LABEL);
        parts.push(hdr);
        // The body's parts as one: its length prefix must not depend on
        // how the sender split it.
        let joined: Vec<u8>;
        if body.len() == 1 {
            parts.push(body[0]);
        } else {
            joined = body.concat();
            parts.push(&joined);
        }
        let t = k.mac(&parts);
        let mut m = [0u8; MAC_LEN];
        m.copy_from_slice(&t[..MAC_LEN]);
        Some(m)
    }

    fn mac_ok(&self, hdr: &[u8], body: &[u8], tag: &[u8]) -> bool {
        match &self.key {
            None => tag.is_empty(),
            Some(k) => {
                let t = k.mac(&[LABEL, hdr, body]);
                tag.len() == MAC_LEN && ofi_core::util::auth::ct_eq(&t[..MAC_LEN], tag)
            }
        }
    }

    /// Reads datagrams while receives are posted (at most [`BATCH`]).
    fn drive_rx(&self, g: &mut Inner) {
        for _ in 0..BATCH {
            if g.mq.posted_len(false) + g.mq.posted_len(true) == 0 {
                return;
            }
            let mut got = None;
            let Inner {
                scratch, groups, ..
            } = &mut *g;
            for s in
                std::iter::once(&self.sock).chain(groups.iter().filter_map(|x| x.sock.as_ref()))
            {
                match s.recv_from(scratch) {
                    Ok(Some(r)) => {
                        got = Some(r);
                        break;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "udp: receive failed");
                    }
                }
            }
            let Some(r) = got else {
                return;
            };
            self.on_datagram(g, r.len, r.truncated, &r.from);
        }
    }

    fn on_datagram(&self, g: &mut Inner, len: usize, truncated: bool, from: &SocketAddr) {
        let bytes = &g.scratch[..len];
        let d = Dgram::new_unchecked(bytes);
        let r = match DgramRepr::parse(&d) {
            Ok(r) if !truncated => r,
            _ => {
                g.dropped += 1;
                tracing::debug!(%from, len, "udp: dropping a malformed or oversized datagram");
                return;
            }
        };
        let body = d.body();
        let (msg, tag) = body.split_at(r.len);
        if !self.mac_ok(&bytes[..DGRAM_HDR_LEN], msg, tag) {
            g.dropped += 1;
            tracing::debug!(%from, "udp: dropping a datagram that does not prove this endpoint's auth key");
            return;
        }
        let tagged = r.flags & dflag::TAGGED != 0;
        let cq_data = r.flags & dflag::CQ_DATA != 0;
        let src = Self::source(g, from);
        let idx = g.mq.find_posted(tagged, src, r.tag);
        let Some(i) = idx else {
            // No receive takes it: unexpected, within the bound.
            let payload = g.scratch[DGRAM_HDR_LEN..DGRAM_HDR_LEN + r.len].to_vec();
            g.unexpected_bytes += charge(payload.len());
            g.mq.push_unexpected(
                tagged,
                Unexpected {
                    src,
                    tag: r.tag,
                    data: r.data,
                    flags: if cq_data { FI_REMOTE_CQ_DATA } else { 0 },
                    len: r.len,
                    claimed: None,
                    payload,
                },
            );
            self.trim_unexpected(g);
            return;
        };
        let Some(p) = g.mq.take_posted(tagged, i) else {
            return;
        };
        let msg = &g.scratch[DGRAM_HDR_LEN..DGRAM_HDR_LEN + r.len];
        let meta = Meta {
            tagged,
            tag: r.tag,
            data: r.data,
            cq_data,
            src,
        };
        Self::complete_recv(&g.b, g.src_ok, &p, msg, &meta);
    }

    /// Drops the oldest unexpected datagrams past the bound.
    fn trim_unexpected(&self, g: &mut Inner) {
        while g.unexpected_bytes > MAX_UNEXPECTED {
            let q = usize::from(g.mq.unexpected_len(true) > g.mq.unexpected_len(false));
            let Some(u) = g.mq.take_unexpected(q == 1, 0) else {
                break;
            };
            g.unexpected_bytes -= charge(u.len);
            g.dropped += 1;
        }
    }

    /// Copies `msg` into receive `p` and reports it (FI_ETRUNC when it
    /// does not fit).
    fn complete_recv(b: &EpBindings, src_ok: bool, p: &PostedRecv, msg: &[u8], m: &Meta) {
        let cap = p.len;
        let n = msg.len().min(cap);
        // SAFETY: the receive's ranges are writable until it completes
        // (post_recv's contract); n fits in them.
        unsafe { copy_to_iov(p.iov(), 0, &msg[..n]) };
        let flags = FI_RECV
            | if m.tagged { FI_TAGGED } else { FI_MSG }
            | if m.cq_data { FI_REMOTE_CQ_DATA } else { 0 };
        let src = if src_ok { m.src } else { FI_ADDR_NOTAVAIL };
        let buf = p.iov.first().map_or(0, |v| v.base);
        if msg.len() > cap {
            if let Some(cq) = &b.rx_cq {
                cq.push_err(
                    CqErrEntry {
                        op_context: p.context,
                        flags,
                        len: n,
                        buf,
                        data: m.data,
                        tag: m.tag,
                        olen: msg.len() - cap,
                        err: errno::FI_ETRUNC,
                        prov_errno: errno::FI_ETRUNC,
                        ..Default::default()
                    },
                    src,
                );
            }
            if let Some(c) = &b.recv_cntr {
                c.add_err(1);
            }
            return;
        }
        let wanted = !b.rx_selective || p.flags & FI_COMPLETION != 0;
        if wanted {
            if let Some(cq) = &b.rx_cq {
                cq.push(
                    CqTaggedEntry {
                        op_context: p.context,
                        flags,
                        len: n,
                        buf,
                        data: m.data,
                        tag: m.tag,
                    },
                    src,
                );
            }
        }
        if let Some(c) = &b.recv_cntr {
            c.add(1);
        }
    }

    /// Joins multicast group `addr` (a socket address): the endpoint
    /// receives what is sent to it (unless `flags` is `FI_SEND` alone) and
    /// the group's address goes into the address vector; the returned
    /// group's fi_addr sends to it. Dropping the group leaves.
    pub fn join_group(&self, addr: &[u8], flags: u64) -> Result<Box<dyn McOps>> {
        let group = crate::addr::decode(addr)?;
        if !group.ip().is_multicast() {
            return Err(Error::inval(format!(
                "udp: join: {} is not a multicast address",
                group.ip()
            )));
        }
        if group.is_ipv4() != self.local.is_ipv4() {
            return Err(Error::inval(format!(
                "udp: join: group {group} is not of the endpoint's address family ({})",
                self.local
            )));
        }
        if group.port() == 0 {
            return Err(Error::inval(format!(
                "udp: join: group {group} names no port"
            )));
        }
        let recv = flags & (FI_SEND | FI_RECV) != FI_SEND;
        let mut g = self.inner.lock();
        let av =
            g.b.av
                .clone()
                .ok_or_else(|| Error::new(errno::FI_ENOAV, "udp: join: no address vector bound"))?;
        let mut sock = None;
        if recv {
            // The endpoint's own socket takes the group's datagrams only
            // when it is bound to the wildcard address: the kernel gives a
            // socket bound to a unicast address none (an offer binds the
            // interface's). Otherwise the group gets a socket of its own,
            // bound to the group's address, which may share the port.
            let own = group.port() == self.local.port() && self.local.ip().is_unspecified();
            let iface = self.local.ip();
            let s = if own {
                None
            } else {
                let s = UdpSocket::bind(&group, true)
                    .map_err(|e| Error::os(e, &format!("udp: join: binding {group}")))?;
                Some(s)
            };
            let target = s.as_ref().unwrap_or(&self.sock);
            target
                .join(group.ip(), iface, self.ifindex)
                .map_err(|e| Error::os(e, &format!("udp: join: {group} on {iface}")))?;
            if let Some(s) = &s {
                let _ = self.shared.watch(s.fd(), self.key_poll);
            }
            sock = s;
        }
        let mut out = [FI_ADDR_NOTAVAIL];
        let inserted = av.insert(&[&crate::addr::encode(&group)], &mut out);
        let fi_addr = out[0];
        if inserted.is_err() || fi_addr == FI_ADDR_NOTAVAIL {
            if let Some(s) = &sock {
                self.shared.unwatch(s.fd());
                let _ = s.leave(group.ip(), self.local.ip(), self.ifindex);
            } else if recv {
                let _ = self.sock.leave(group.ip(), self.local.ip(), self.ifindex);
            }
            return Err(inserted.err().unwrap_or_else(|| {
                Error::inval(format!("udp: join: the address vector refused {group}"))
            }));
        }
        let id = g.next_group;
        g.next_group += 1;
        g.groups.push(Group {
            id,
            group,
            sock,
            fi_addr,
            recv,
        });
        Ok(Box::new(Membership {
            ep: self.this.clone(),
            id,
            fi_addr,
        }))
    }

    fn leave(&self, id: u64) {
        let mut g = self.inner.lock();
        let Some(i) = g.groups.iter().position(|x| x.id == id) else {
            return;
        };
        let grp = g.groups.swap_remove(i);
        if grp.recv {
            let target = grp.sock.as_ref().unwrap_or(&self.sock);
            let _ = target.leave(grp.group.ip(), self.local.ip(), self.ifindex);
        }
        if let Some(s) = &grp.sock {
            self.shared.unwatch(s.fd());
        }
        if let Some(av) = &g.b.av {
            let _ = av.remove(&[grp.fi_addr]);
        }
    }
}

/// A joined group (`struct fid_mc`): leaves when dropped.
struct Membership {
    ep: Weak<DgramEp>,
    id: u64,
    fi_addr: u64,
}

impl McOps for Membership {
    fn fi_addr(&self) -> u64 {
        self.fi_addr
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if let Some(ep) = self.ep.upgrade() {
            ep.leave(self.id);
        }
    }
}

/// A received datagram's matching fields.
struct Meta {
    tagged: bool,
    tag: u64,
    data: u64,
    cq_data: bool,
    src: u64,
}

impl Member for DgramEp {
    fn drive(&self) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        if let Some(mut g) = self.inner.try_lock() {
            self.drive_rx(&mut g);
        }
    }
    fn deadline(&self) -> Option<Instant> {
        None
    }
    fn restless(&self) -> bool {
        false
    }
}

impl Progress for DgramEp {
    fn progress(&self) {
        self.shared.progress();
    }
    fn arm(&self) -> bool {
        self.shared.arm()
    }
    fn disarm(&self) {
        self.shared.disarm();
    }
    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.shared.fd())
    }
}

impl EndpointOps for DgramEp {
    fn enable(&self, b: EpBindings) -> Result<()> {
        let mut g = self.inner.lock();
        g.src_ok = b.info.caps & FI_SOURCE != 0;
        g.b = b;
        drop(g);
        self.enabled.store(true, Ordering::Release);
        Ok(())
    }
    fn getname(&self) -> Result<Vec<u8>> {
        Ok(self.me.clone())
    }
    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "udp: send on an endpoint that is not enabled",
            ));
        }
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::inval(format!(
                "udp: {} iov entries exceed the limit of {IOV_LIMIT}",
                op.iov.len()
            )));
        }
        let len = iov_len(op.iov);
        if len > self.max_msg {
            return Err(Error::new(
                errno::FI_EMSGSIZE,
                format!(
                    "udp: a message of {len} bytes exceeds max_msg_size {}",
                    self.max_msg
                ),
            ));
        }
        let cq_data = op.flags & FI_REMOTE_CQ_DATA != 0;
        let r = DgramRepr {
            flags: if op.tagged { dflag::TAGGED } else { 0 }
                | if cq_data { dflag::CQ_DATA } else { 0 }
                | if self.key.is_some() { dflag::MAC } else { 0 },
            tag: if op.tagged { op.tag } else { 0 },
            data: if cq_data { op.data } else { 0 },
            len,
        };
        let hdr = r.to_bytes();
        let mut g = self.inner.lock();
        let to = self.dest(&mut g, op.dest)?;
        let body: Vec<&[u8]> = op
            .iov
            .iter()
            .filter(|v| v.len > 0)
            // SAFETY: the ranges are readable for this call (post_send's contract).
            .map(|v| unsafe { std::slice::from_raw_parts(v.base as *const u8, v.len) })
            .collect();
        let mac = self.mac(&hdr, &body);
        let mut parts = [Part { base: 0, len: 0 }; 2 + MAX_IOV];
        parts[0] = Part::bytes(&hdr);
        let mut n = 1;
        for v in op.iov.iter().filter(|v| v.len > 0) {
            parts[n] = Part {
                base: v.base,
                len: v.len,
            };
            n += 1;
        }
        if let Some(m) = &mac {
            parts[n] = Part::bytes(m);
            n += 1;
        }
        // SAFETY: header and MAC are ours; the user ranges are readable
        // for this call (post_send's contract).
        match unsafe { self.sock.send_to(&to, &parts[..n]) } {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(Error::again());
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => return Err(Error::again()),
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                return Err(Error::new(
                    errno::FI_EMSGSIZE,
                    format!("udp: the path to the destination does not carry {len} bytes"),
                ))
            }
            Err(e) => return Err(Error::os(e, "udp: sendmsg")),
        }
        let flags = FI_SEND | if op.tagged { FI_TAGGED } else { FI_MSG };
        g.b.tx_done(op.context, flags, g.b.tx_completion(op.flags), None);
        Ok(())
    }
    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "udp: receive on an endpoint that is not enabled",
            ));
        }
        if op.iov.len() > IOV_LIMIT {
            return Err(Error::inval(format!(
                "udp: {} iov entries exceed the limit of {IOV_LIMIT}",
                op.iov.len()
            )));
        }
        if op.flags & (FI_PEEK | FI_CLAIM | FI_DISCARD | FI_MULTI_RECV) != 0 {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "udp: DGRAM endpoints take no FI_PEEK, FI_CLAIM, FI_DISCARD or FI_MULTI_RECV",
            ));
        }
        let mut g = self.inner.lock();
        let completion = op.flags & FI_COMPLETION != 0 || !g.b.rx_selective;
        let mut iov = [IoVec::default(); MAX_IOV];
        iov[..op.iov.len()].copy_from_slice(op.iov);
        let p = PostedRecv {
            iov,
            iov_cnt: op.iov.len(),
            len: iov_len(op.iov),
            src: op.src,
            tag: if op.tagged { op.tag } else { 0 },
            ignore: if op.tagged { op.ignore } else { 0 },
            context: op.context,
            flags: op.flags | if completion { FI_COMPLETION } else { 0 },
            consumed: 0,
        };
        let ignore = p.ignore;
        if let Some(i) = g.mq.find_unexpected(op.tagged, op.src, p.tag, ignore) {
            if let Some(u) = g.mq.take_unexpected(op.tagged, i) {
                g.unexpected_bytes -= charge(u.len);
                let meta = Meta {
                    tagged: op.tagged,
                    tag: u.tag,
                    data: u.data,
                    cq_data: u.flags & FI_REMOTE_CQ_DATA != 0,
                    src: u.src,
                };
                Self::complete_recv(&g.b, g.src_ok, &p, &u.payload, &meta);
                return Ok(());
            }
        }
        g.mq.post(op.tagged, p);
        Ok(())
    }
    fn cancel(&self, context: usize) -> Result<()> {
        let mut g = self.inner.lock();
        let Some((tagged, p)) = g.mq.cancel(context) else {
            return Err(Error::new(
                errno::FI_ENOENT,
                "udp: no posted receive has this context",
            ));
        };
        if let Some(cq) = &g.b.rx_cq {
            cq.push_err(
                CqErrEntry {
                    op_context: p.context,
                    flags: FI_RECV | if tagged { FI_TAGGED } else { FI_MSG },
                    err: errno::FI_ECANCELED,
                    prov_errno: errno::FI_ECANCELED,
                    tag: p.tag,
                    ..Default::default()
                },
                FI_ADDR_NOTAVAIL,
            );
        }
        if let Some(c) = &g.b.recv_cntr {
            c.add_err(1);
        }
        Ok(())
    }
    fn setopt(&self, name: i32, _value: usize) -> Result<()> {
        Err(Error::new(
            errno::FI_ENOPROTOOPT,
            format!("udp: option {name} is not supported"),
        ))
    }
    fn getopt(&self, name: i32) -> Result<usize> {
        Err(Error::new(
            errno::FI_ENOPROTOOPT,
            format!("udp: option {name} is not supported"),
        ))
    }
    fn join(&self, addr: &[u8], flags: u64) -> Result<Box<dyn McOps>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "udp: join on an endpoint that is not enabled",
            ));
        }
        self.join_group(addr, flags)
    }
    fn close(&self) {
        self.enabled.store(false, Ordering::Release);
        self.shared.unwatch(self.sock.fd());
        let mut g = self.inner.lock();
        for grp in std::mem::take(&mut g.groups) {
            if let Some(s) = &grp.sock {
                self.shared.unwatch(s.fd());
            }
        }
        let (posted, _) = g.mq.drain_all();
        for p in posted {
            if let Some(cq) = &g.b.rx_cq {
                cq.push_err(
                    CqErrEntry {
                        op_context: p.context,
                        flags: FI_RECV,
                        err: errno::FI_ECANCELED,
                        prov_errno: errno::FI_ECANCELED,
                        ..Default::default()
                    },
                    FI_ADDR_NOTAVAIL,
                );
            }
        }
        g.b = EpBindings::default();
    }
}
