//! The passive endpoint: a listening socket; each accepted connection is
//! held until its HELLO arrives, then reported as FI_CONNREQ with a handle
//! the application accepts (by opening an endpoint with the info) or rejects.

use crate::gate::{Accepting, Dropped, Gate};
use crate::link::Link;
use crate::sys::Socket;
use crate::TcpConfig;
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::{ConnHandle, Info};
use ofi_core::provider::{PassiveEndpointOps, Progress};
use ofi_core::util::eq::{EqCore, EqEvent};
use ofi_core::util::lock::SpinLock;
use ofi_inet::poller::Poller;
use ofi_proto::tcp::{Conn, Event, Rx};
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A connection request waiting for accept or reject: what `info.handle` holds.
pub struct Request {
    /// The socket and protocol state, taken by the accepting endpoint.
    pub link: Mutex<Option<Link>>,
}

struct Inner {
    /// Where `listen` binds (the offer's source, or what `setname` gave).
    src: SocketAddr,
    eq: Option<(Arc<EqCore>, usize)>,
    listener: Option<Socket>,
    waiting: Vec<Link>,
    closing: Vec<Link>,
    rx: Rx,
    next_id: u64,
    /// The listening address (for log lines), once listening.
    bound: Option<SocketAddr>,
    /// `waiting` connections in their handshake (cap and deadline).
    gate: Gate,
    /// The listener's accept state (backoff, rate-limited warnings).
    accepting: Accepting,
}

/// A tcp passive endpoint.
pub struct TcpPep {
    cfg: TcpConfig,
    /// The auth key connectors must prove (`None`: none).
    key: Option<ofi_core::util::auth::AuthKey>,
    info: Info,
    poller: Poller,
    inner: SpinLock<Inner>,
}

impl TcpPep {
    /// A passive endpoint for an MSG offer (binds at `listen`).
    pub fn open(cfg: TcpConfig, info: &Info) -> Result<TcpPep> {
        let src = match &info.src_addr {
            Some(b) => crate::addr::decode(b)?,
            None => "0.0.0.0:0".parse().expect("literal address"),
        };
        Ok(TcpPep {
            cfg,
            key: ofi_core::util::auth::AuthKey::of(info)?,
            info: info.clone(),
            poller: Poller::new().map_err(|e| Error::os(e, "tcp: epoll"))?,
            inner: SpinLock::new(Inner {
                src,
                eq: None,
                listener: None,
                waiting: Vec::new(),
                closing: Vec::new(),
                rx: Rx::new(Default::default()),
                next_id: 1,
                bound: None,
                gate: Gate::new(cfg.limits),
                accepting: Accepting::default(),
            }),
        })
    }

    fn drive(&self, g: &mut Inner) {
        let (bound, src) = (g.bound, g.src);
        let at = move || bound.unwrap_or(src).to_string();
        if g.listener.is_some() && g.accepting.may_accept(Instant::now) {
            while let Some(l) = &g.listener {
                match l.accept() {
                    Ok(Some((sock, peer))) => {
                        g.accepting.recovered(&at());
                        let id = g.next_id;
                        g.next_id += 1;
                        let conn = Conn::incoming(id, FI_ADDR_NOTAVAIL, self.cfg.proto);
                        let conn = match crate::auth::arm(conn, &self.key) {
                            Ok(c) => c,
                            Err(e) => {
                                tracing::warn!(%peer, error = %e, "tcp: dropping a connection");
                                continue;
                            }
                        };
                        let _ = self.poller.add(&sock, id, false);
                        g.waiting
                            .push(Link::new(sock, conn, false, self.cfg.peer_timeout));
                        let mut drops = Vec::new();
                        let Inner { gate, waiting, .. } = &mut *g;
                        gate.admit(
                            id,
                            Instant::now(),
                            |i| waiting.iter().any(|l| l.conn.id() == i && l.half_open()),
                            |i, why| drops.push((i, why)),
                        );
                        for (i, why) in drops {
                            self.drop_half_open(g, i, why);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        g.accepting.failed(&e, Instant::now(), &at());
                        break;
                    }
                }
            }
        }
        if !g.gate.is_empty() {
            let mut drops = Vec::new();
            let Inner { gate, waiting, .. } = &mut *g;
            gate.sweep(
                Instant::now(),
                |i| waiting.iter().any(|l| l.conn.id() == i && l.half_open()),
                |i, why| drops.push((i, why)),
            );
            for (i, why) in drops {
                self.drop_half_open(g, i, why);
            }
        }
        let mut i = 0;
        while i < g.waiting.len() {
            let Inner { waiting, rx, .. } = &mut *g;
            waiting[i].drive(rx);
            let mut request = None;
            let mut dead = false;
            while let Some(ev) = waiting[i].conn.poll_event() {
                match ev {
                    Event::ConnRequest {
                        peer_addr,
                        private_data,
                        ..
                    } => request = Some((peer_addr, private_data)),
                    Event::ProtocolError(e) => {
                        tracing::warn!(error = %e, "tcp: dropping a connection that sent a malformed request");
                        dead = true;
                    }
                    Event::AuthFailed { why } => {
                        let who = waiting[i].sock.peer_addr().ok();
                        tracing::warn!(peer = ?who, "tcp: refusing a connection: {why}");
                    }
                    Event::ConnectionLost { .. } => dead = true,
                    _ => {}
                }
            }
            if dead || waiting[i].conn.is_closed() {
                let l = g.waiting.swap_remove(i);
                self.poller.remove(&l.sock);
                continue;
            }
            if let Some((addr, data)) = request {
                let link = g.waiting.swap_remove(i);
                self.poller.remove(&link.sock);
                let peer = link.sock.peer_addr().unwrap_or(g.src);
                let mut info = self.info.clone();
                info.dest_addr = Some(if addr.is_empty() {
                    crate::addr::encode(&peer)
                } else {
                    addr
                });
                info.src_addr = link.sock.local_addr().ok().map(|a| crate::addr::encode(&a));
                let req = Arc::new(Request {
                    link: Mutex::new(Some(link)),
                });
                info.handle = Some(ConnHandle(req));
                if let Some((eq, fid)) = &g.eq {
                    eq.push(EqEvent {
                        event: eq_event::FI_CONNREQ,
                        fid: *fid,
                        info: Some(Box::new(info)),
                        cm_data: data,
                        ..Default::default()
                    });
                }
                continue;
            }
            i += 1;
        }
        let Inner { closing, rx, .. } = &mut *g;
        for l in closing.iter_mut() {
            l.drive(rx);
            while l.conn.poll_event().is_some() {}
        }
        closing.retain(|l| {
            let done = l.conn.is_closed();
            if done {
                self.poller.remove(&l.sock);
            }
            !done
        });
    }
}

impl TcpPep {
    /// Drops a waiting connection still in its handshake (the gate's cap
    /// or deadline), logging it.
    fn drop_half_open(&self, g: &mut Inner, id: u64, why: Dropped) {
        if let Some(i) = g.waiting.iter().position(|l| l.conn.id() == id) {
            let l = g.waiting.swap_remove(i);
            self.poller.remove(&l.sock);
            tracing::warn!(
                peer = ?l.sock.peer_addr().ok(),
                listener = %g.bound.unwrap_or(g.src),
                "tcp: dropping an incoming connection: {}",
                why.describe(g.gate.limits())
            );
        }
    }
}

impl Progress for TcpPep {
    fn progress(&self) {
        if let Some(mut g) = self.inner.try_lock() {
            self.drive(&mut g);
        }
    }
    fn arm(&self) -> bool {
        self.inner.lock().closing.is_empty()
    }
    fn disarm(&self) {}
    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.poller.fd())
    }
}

impl PassiveEndpointOps for TcpPep {
    fn bind_eq(&self, eq: Arc<EqCore>, fid: usize) -> Result<()> {
        self.inner.lock().eq = Some((eq, fid));
        Ok(())
    }
    fn listen(&self) -> Result<()> {
        let mut g = self.inner.lock();
        if g.listener.is_some() {
            return Err(Error::new(errno::FI_EALREADY, "tcp: already listening"));
        }
        let l = Socket::listen_in(&g.src, self.cfg.port_range)?;
        self.poller
            .add(&l, 0, false)
            .map_err(|e| Error::os(e, "tcp: epoll add"))?;
        g.bound = l.local_addr().ok();
        g.listener = Some(l);
        Ok(())
    }
    fn getname(&self) -> Result<Vec<u8>> {
        let g = self.inner.lock();
        match &g.listener {
            Some(l) => Ok(crate::addr::encode(
                &l.local_addr()
                    .map_err(|e| Error::os(e, "tcp: getsockname"))?,
            )),
            None => Ok(crate::addr::encode(&g.src)),
        }
    }
    fn setname(&self, addr: &[u8]) -> Result<()> {
        let sa = crate::addr::decode_for(addr, self.info.addr_format)?;
        let mut g = self.inner.lock();
        if g.listener.is_some() {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "tcp: setname on a listening passive endpoint",
            ));
        }
        g.src = sa;
        Ok(())
    }
    fn getopt(&self, name: i32) -> Result<usize> {
        match name {
            opt::FI_OPT_CM_DATA_SIZE => Ok(self.cfg.proto.max_cm_data),
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("tcp: option {name} is not supported on a passive endpoint"),
            )),
        }
    }
    fn reject(&self, handle: &ConnHandle, param: &[u8]) -> Result<()> {
        let req =
            handle.0.clone().downcast::<Request>().map_err(|_| {
                Error::inval("tcp: reject: the handle is not a tcp connection request")
            })?;
        let mut slot = req.link.lock().unwrap_or_else(|e| e.into_inner());
        let mut link = slot.take().ok_or_else(|| {
            Error::inval("tcp: reject: the request was already accepted or rejected")
        })?;
        // A refused reject (private data over the limit) keeps the
        // request for another answer.
        if let Err(e) = link.conn.reject(param) {
            *slot = Some(link);
            return Err(Error::new(e, "tcp: reject"));
        }
        drop(slot);
        let mut g = self.inner.lock();
        let key = link.conn.id();
        let _ = self.poller.add(&link.sock, key, true);
        g.closing.push(link);
        self.drive(&mut g);
        Ok(())
    }
    fn release(&self) {
        // Its waiting connections go (as on close): the address is the
        // active endpoint's now.
        let mut g = self.inner.lock();
        g.listener = None;
        g.waiting.clear();
    }
    fn close(&self) {
        self.release();
    }
}
