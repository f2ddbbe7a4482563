//! The MSG endpoint: one connection, made with `connect` or `accept`,
//! reported on the event queue, carrying messages in order.
#![allow(unsafe_code)]

use crate::domain::{Member, Shared};
use crate::link::{Fast, Link};
use crate::pep::Request;
use crate::sys::Socket;
use crate::{TcpConfig, INJECT_SIZE};
use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::info::{ConnHandle, Info};
use ofi_core::object::{AtomicOp, EpBindings, RecvOp, RmaOp, SendOp};
use ofi_core::provider::{EndpointOps, Progress};
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::auth::AuthKey;
use ofi_core::util::eq::{EqError, EqEvent};
use ofi_core::util::lock::SpinLock;
use ofi_inet::tcp_core::completions::drain_rx;
use ofi_inet::tcp_core::one_sided::{ack_level, query_atomic, refused, Ops, Target};
use ofi_inet::tcp_core::sends::Sends;
use ofi_proto::tcp::{Conn, Event, Memory, RecvReq, RmaReq, Rx, RxConfig};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    Connecting,
    Accepting,
    Connected,
    Done,
}

struct Inner {
    b: EpBindings,
    rx: Rx,
    link: Option<Link>,
    phase: Phase,
    sends: Sends,
    ops: Ops,
    handle: Option<ConnHandle>,
    /// The address to connect from: the offer's source, or `setname`'s.
    src: Option<Vec<u8>>,
    /// The connection ended (the peer shut down or was lost) with this
    /// error: a receive posted afterwards takes a message that arrived
    /// before, or fails with it.
    gone: Option<i32>,
}

/// A tcp MSG endpoint.
pub struct TcpMsgEp {
    cfg: TcpConfig,
    /// The auth key the connect handshake proves (`None`: none); the
    /// accepting side's handshake is the passive endpoint's.
    auth: Option<AuthKey>,
    info: Info,
    shared: Arc<Shared>,
    enabled: AtomicBool,
    key: AtomicU64,
    inner: SpinLock<Inner>,
}

impl TcpMsgEp {
    /// An endpoint for an MSG offer; with `info.handle` it is the accepting
    /// side of that connection request.
    pub fn open(
        cfg: TcpConfig,
        info: &Info,
        shared: Arc<Shared>,
        auth: Option<AuthKey>,
    ) -> Result<TcpMsgEp> {
        let rxc = RxConfig {
            max_unexpected_bytes: cfg.max_unexpected_bytes,
            depth: info.rx_attr.size.max(64),
            ..Default::default()
        };
        let key = shared.key();
        let ep = TcpMsgEp {
            cfg,
            auth,
            info: info.clone(),
            shared,
            enabled: AtomicBool::new(false),
            key: AtomicU64::new(key),
            inner: SpinLock::new(Inner {
                b: EpBindings::default(),
                rx: Rx::new(rxc),
                link: None,
                phase: Phase::Idle,
                sends: Sends::new(crate::NAME),
                ops: Ops::new(crate::NAME),
                handle: info.handle.clone(),
                src: info.src_addr.clone(),
                gone: None,
            }),
        };
        Ok(ep)
    }

    fn eq_event(g: &Inner, event: u32, data: Vec<u8>) {
        if let Some(eq) = &g.b.eq {
            eq.push(EqEvent {
                event,
                fid: g.b.fid,
                cm_data: data,
                ..Default::default()
            });
        }
    }

    fn eq_error(g: &Inner, err: i32, data: Vec<u8>) {
        if let Some(eq) = &g.b.eq {
            eq.push_err(EqError {
                fid: g.b.fid,
                err,
                prov_errno: err,
                err_data: data,
                ..Default::default()
            });
        }
    }

    fn drive(&self, g: &mut Inner) {
        self.drive_with(g, true);
    }

    /// Drives the connection, then turns what it produced into events and
    /// completions. A receive that the pass unblocked (a wakeup: a CTS or
    /// an acknowledgement to send) takes another pass, whose events are
    /// handled the same way: a completion it produced (the answer to a
    /// FI_TRANSMIT_COMPLETE send read in that pass) must not wait in the
    /// connection for a progress call that readiness would never trigger.
    fn drive_with(&self, g: &mut Inner, read: bool) {
        let mut read = read;
        for _ in 0..1024 {
            // One connection: every wakeup names it, and this pass (which
            // then reads: a parked message may now be placed) serves them
            // all; any left past the bound keep the endpoint restless.
            if g.rx.has_wakeups() {
                read = true;
                while g.rx.next_wakeup().is_some() {}
            }
            let Some(link) = g.link.as_mut() else { return };
            link.drive_with(&mut g.rx, read);
            self.handle_events(g);
            drain_rx(&g.b, &mut g.rx, false);
            if !g.rx.has_wakeups() {
                break;
            }
        }
        if let Some(l) = &mut g.link {
            let key = self.key.load(Ordering::Relaxed);
            if l.conn.is_closed() {
                l.keep_watched(&self.shared.poller, key, false);
            } else {
                // Polled with recv on every pass while nobody sleeps on the
                // poller: out of it (see Link::keep_watched).
                let quiet = self.shared.quiet() && !l.connecting;
                l.keep_watched(&self.shared.poller, key, !quiet);
                l.sync_interest(&self.shared.poller, key);
            }
        }
    }

    /// Turns the connection's events into EQ entries and transmit
    /// completions (receive events stay on the `Rx` for `drain_rx`).
    fn handle_events(&self, g: &mut Inner) {
        let was = g.phase;
        while let Some(ev) = g.link.as_mut().and_then(|l| l.conn.poll_event()) {
            match ev {
                Event::Connected { private_data } => {
                    g.phase = Phase::Connected;
                    Self::eq_event(g, eq_event::FI_CONNECTED, private_data);
                }
                Event::Rejected {
                    private_data,
                    reason,
                } => {
                    g.phase = Phase::Done;
                    let err = if reason == ofi_proto::tcp::reject::AUTH {
                        errno::FI_EKEYREJECTED
                    } else {
                        errno::FI_ECONNREFUSED
                    };
                    Self::eq_error(g, err, private_data);
                }
                Event::AuthFailed { why } => {
                    tracing::warn!("tcp: authentication failed, connection closed: {why}");
                    if g.phase != Phase::Done {
                        g.phase = Phase::Done;
                        Self::eq_error(g, errno::FI_EKEYREJECTED, Vec::new());
                    }
                }
                Event::PeerShutdown => {
                    // Messages that arrived before stay for later receives
                    // (a delivery-complete sender was told they arrived).
                    g.rx.fail_posted(errno::FI_ECONNRESET);
                    if g.phase != Phase::Done {
                        g.gone = Some(errno::FI_ECONNRESET);
                        g.phase = Phase::Done;
                        // Once per connection: a local shutdown reported it.
                        Self::eq_event(g, eq_event::FI_SHUTDOWN, Vec::new());
                    }
                }
                Event::ConnectionLost { err } => {
                    g.rx.fail_posted(err);
                    g.gone = Some(err);
                    let before = if g.phase == Phase::Done { was } else { g.phase };
                    g.phase = Phase::Done;
                    if before == Phase::Connected {
                        Self::eq_event(g, eq_event::FI_SHUTDOWN, Vec::new());
                    } else {
                        Self::eq_error(g, err, Vec::new());
                    }
                }
                Event::ProtocolError(e) => {
                    tracing::warn!(error = %e, "tcp: closing a connection whose peer broke the protocol");
                    let connected = g.phase == Phase::Connected;
                    g.phase = Phase::Done;
                    if let Some(l) = g.link.as_mut() {
                        l.conn.on_error(errno::FI_EIO, &mut g.rx);
                    }
                    if connected {
                        Self::eq_event(g, eq_event::FI_SHUTDOWN, Vec::new());
                    } else {
                        Self::eq_error(g, errno::FI_EIO, Vec::new());
                    }
                }
                Event::SendComplete { context } => g.sends.complete(&g.b, context, None),
                Event::SendError { context, err } => g.sends.complete(&g.b, context, Some(err)),
                Event::RmaComplete { context } => g.ops.complete(&g.b, context, None),
                Event::RmaError { context, err } => g.ops.complete(&g.b, context, Some(err)),
                // Receive events are queued on the Rx and drained by the caller.
                _ => {}
            }
        }
    }
}

impl TcpMsgEp {
    /// The endpoint's state, if it is enabled and has a connection.
    fn connected_for(&self, what: &str) -> Result<ofi_core::util::lock::SpinGuard<'_, Inner>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                format!("tcp: {what} on an endpoint that is not enabled"),
            ));
        }
        let g = self.inner.lock();
        if g.phase == Phase::Done || g.link.is_none() {
            return Err(Error::new(
                errno::FI_ENOTCONN,
                "tcp: the endpoint is not connected",
            ));
        }
        Ok(g)
    }

    /// Queues a one-sided request on the connection and drives it, unless
    /// `more` (FI_MORE) holds it back (as on RDM endpoints).
    fn queue_one_sided(&self, g: &mut Inner, req: RmaReq, more: bool) -> Result<()> {
        let Inner { link, ops, .. } = &mut *g;
        let Some(link) = link.as_mut() else {
            ops.abandon(&req);
            return Err(Error::new(errno::FI_ENOTCONN, "tcp: no connection"));
        };
        if let Err(e) = link.conn.queue_rma(req) {
            ops.abandon(&req);
            return Err(refused(crate::NAME, e));
        }
        if !more {
            self.drive(g);
        }
        Ok(())
    }
}

impl Member for TcpMsgEp {
    fn drive(&self) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        if let Some(mut g) = self.inner.try_lock() {
            TcpMsgEp::drive(self, &mut g);
        }
    }
    fn restless(&self) -> bool {
        self.inner.try_lock().is_none_or(|g| {
            g.rx.has_wakeups()
                || g.link
                    .as_ref()
                    .is_some_and(|l| l.connecting || l.has_read_ahead())
        })
    }
    fn single(&self) -> bool {
        true
    }
    fn idle(&self) -> bool {
        // A socket out of the poller cannot report readiness: not idle
        // (unless its connection is over).
        self.inner.try_lock().is_some_and(|g| {
            !g.rx.has_wakeups()
                && !g
                    .link
                    .as_ref()
                    .is_some_and(|l| l.needs_drive() || (!l.watched() && !l.conn.is_closed()))
        })
    }
    fn watch_all(&self) {
        let mut g = self.inner.lock();
        if let Some(l) = g.link.as_mut() {
            if !l.conn.is_closed() {
                l.keep_watched(&self.shared.poller, self.key.load(Ordering::Relaxed), true);
            }
        }
    }
}

impl Progress for TcpMsgEp {
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

impl EndpointOps for TcpMsgEp {
    fn enable(&self, b: EpBindings) -> Result<()> {
        let mut g = self.inner.lock();
        let target = Target::for_endpoint(&b).map(|t| Box::new(t) as Box<dyn Memory>);
        g.rx.set_memory(target);
        if let Some(x) = &b.srx {
            g.rx.set_shared(x.srx.clone(), x.member);
        }
        g.b = b;
        drop(g);
        self.enabled.store(true, Ordering::Release);
        Ok(())
    }
    fn getname(&self) -> Result<Vec<u8>> {
        let g = self.inner.lock();
        match &g.link {
            Some(l) => Ok(crate::addr::encode(
                &l.sock
                    .local_addr()
                    .map_err(|e| Error::os(e, "tcp: getsockname"))?,
            )),
            None => g.src.clone().ok_or_else(|| {
                Error::new(
                    errno::FI_EOPBADSTATE,
                    "tcp: the endpoint has no address yet",
                )
            }),
        }
    }
    fn setname(&self, addr: &[u8]) -> Result<()> {
        let sa = crate::addr::decode_for(addr, self.info.addr_format)?;
        let mut g = self.inner.lock();
        if g.phase != Phase::Idle || g.handle.is_some() {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "tcp: setname on an endpoint that is connecting, connected or accepting",
            ));
        }
        g.src = Some(crate::addr::encode(&sa));
        Ok(())
    }
    unsafe fn post_send(&self, op: &SendOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "tcp: send on an endpoint that is not enabled",
            ));
        }
        let mut g = self.inner.lock();
        if g.phase == Phase::Done || g.link.is_none() {
            return Err(Error::new(
                errno::FI_ENOTCONN,
                "tcp: the endpoint is not connected",
            ));
        }
        let ack = ack_level(op.flags, g.b.info.tx_attr.op_flags);
        let more = op.flags & FI_MORE != 0;
        let Inner { link, sends, b, .. } = &mut *g;
        let link = link.as_mut().expect("checked above");
        let fast = if more {
            Fast::Queue
        } else {
            // SAFETY: post_send's caller keeps `op`'s ranges readable for
            // this call, and until the send completes unless FI_INJECT:
            // send_fast's contract.
            unsafe { link.send_fast(sends, b, op, ack) }
        };
        match fast {
            Fast::Sent => return Ok(()),
            Fast::Staged => {
                self.drive_with(&mut g, false);
                return Ok(());
            }
            Fast::Queue => {}
        }
        let selective = g.b.tx_selective;
        // SAFETY: post_send's caller keeps `op`'s ranges readable for this
        // call, and until the send completes unless FI_INJECT (which start
        // copies here): start's contract.
        let mut req = unsafe { g.sends.start(op, selective, INJECT_SIZE)? };
        req.ack = ack;
        req.fence = op.flags & FI_FENCE != 0;
        let Inner { link, sends, .. } = &mut *g;
        let link = link.as_mut().expect("checked above");
        if let Err(e) = link.conn.queue_send(req) {
            sends.abandon(&req);
            return Err(Error::new(e, "tcp: the connection refused the send"));
        }
        if !more {
            self.drive_with(&mut g, false);
        }
        Ok(())
    }
    unsafe fn post_rma(&self, op: &RmaOp<'_>) -> Result<()> {
        let mut g = self.connected_for("RMA")?;
        let selective = g.b.tx_selective;
        // SAFETY: post_rma's caller keeps the local ranges valid until the
        // request completes (with FI_INJECT, for this call, and start_rma
        // copies them): start_rma's contract.
        let req = unsafe { g.ops.start_rma(op, selective)? };
        self.queue_one_sided(&mut g, req, op.flags & FI_MORE != 0)
    }
    unsafe fn post_atomic(&self, op: &AtomicOp<'_>) -> Result<()> {
        let mut g = self.connected_for("atomic")?;
        let selective = g.b.tx_selective;
        // SAFETY: post_atomic's caller keeps operand, compare and result
        // memory valid until the atomic completes: start_atomic's contract.
        let req = unsafe { g.ops.start_atomic(op, selective)? };
        self.queue_one_sided(&mut g, req, op.flags & FI_MORE != 0)
    }
    fn query_atomic(&self, kind: AtomicKind, op: u32, datatype: u32) -> Result<usize> {
        query_atomic(kind, op, datatype)
    }
    unsafe fn post_recv(&self, op: &RecvOp<'_>) -> Result<()> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Err(Error::new(
                errno::FI_EOPBADSTATE,
                "tcp: receive on an endpoint that is not enabled",
            ));
        }
        if op.tagged {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "tcp: MSG endpoints carry untagged messages",
            ));
        }
        let mut g = self.inner.lock();
        let completion = op.flags & FI_COMPLETION != 0 || !g.b.rx_selective;
        let req = RecvReq::msg(op.iov, op.context)
            .with_flags(op.flags | if completion { FI_COMPLETION } else { 0 });
        g.rx.post_recv(&req)
            .map_err(|e| Error::new(e, "tcp: receive refused"))?;
        // The connection is gone: the receive took a message that arrived
        // before, or nothing more will come.
        if let Some(err) = g.gone {
            g.rx.fail_posted(err);
        }
        // No socket read here (the next progress call reads): a post costs
        // no system call. A message the post unblocked shows as a wakeup.
        let Inner { b, rx, .. } = &mut *g;
        drain_rx(b, rx, false);
        Ok(())
    }
    fn srx_posted(&self) {
        let mut g = self.inner.lock();
        if g.rx.rescan_shared() {
            // Eager messages complete now; a rendezvous shows as a wakeup
            // (restless: the domain's progress sends its CTS).
            let Inner { b, rx, .. } = &mut *g;
            drain_rx(b, rx, false);
        }
    }
    fn cancel(&self, context: usize) -> Result<()> {
        let mut g = self.inner.lock();
        let Inner { b, rx, .. } = &mut *g;
        rx.cancel(context)
            .map_err(|e| Error::new(e, "tcp: no posted receive has this context"))?;
        drain_rx(b, rx, false);
        Ok(())
    }
    fn setopt(&self, name: i32, value: usize) -> Result<()> {
        match name {
            opt::FI_OPT_MIN_MULTI_RECV => {
                self.inner.lock().rx.set_min_multi_recv(value);
                Ok(())
            }
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("tcp: option {name} is not supported"),
            )),
        }
    }
    fn getopt(&self, name: i32) -> Result<usize> {
        match name {
            opt::FI_OPT_MIN_MULTI_RECV => Ok(self.inner.lock().rx.config().min_multi_recv),
            opt::FI_OPT_CM_DATA_SIZE => Ok(self.cfg.proto.max_cm_data),
            _ => Err(Error::new(
                errno::FI_ENOPROTOOPT,
                format!("tcp: option {name} is not supported"),
            )),
        }
    }
    fn close(&self) {
        self.enabled.store(false, Ordering::Release);
        let mut g = self.inner.lock();
        let Inner { link, rx, .. } = &mut *g;
        if let Some(l) = link.as_mut() {
            l.conn.on_error(errno::FI_ECANCELED, rx);
        }
        rx.close(errno::FI_ECANCELED);
        g.link = None;
        g.b = EpBindings::default();
    }
    fn connect(&self, addr: &[u8], param: &[u8]) -> Result<()> {
        let to = crate::addr::decode(addr)?;
        let mut g = self.inner.lock();
        if g.phase != Phase::Idle {
            return Err(Error::new(
                errno::FI_EISCONN,
                "tcp: connect on an endpoint that already connected",
            ));
        }
        // Refused before a socket is bound (a port set with setname would
        // linger in TIME_WAIT after a connection that never started).
        if param.len() > self.cfg.proto.max_cm_data {
            return Err(Error::inval(format!(
                "tcp: connect: {} bytes of private data exceed FI_OPT_CM_DATA_SIZE ({})",
                param.len(),
                self.cfg.proto.max_cm_data
            )));
        }
        let from = g.src.as_deref().and_then(|b| crate::addr::decode(b).ok());
        let sock = Socket::connect(&to, from.as_ref())
            .map_err(|e| Error::os(e, &format!("tcp: connect to {to}")))?;
        let me = sock
            .local_addr()
            .map(|a| crate::addr::encode(&a))
            .unwrap_or_default();
        let conn = Conn::connect(1, 0, self.cfg.proto, &me, param)
            .map_err(|e| Error::new(e, "tcp: connect: private data or address too long"))?;
        let conn = crate::auth::arm(conn, &self.auth)?;
        self.shared
            .poller
            .add(&sock, self.key.load(Ordering::Relaxed), true)
            .map_err(|e| Error::os(e, "tcp: epoll add"))?;
        g.link = Some(Link::new(sock, conn, true, self.cfg.peer_timeout));
        g.phase = Phase::Connecting;
        self.drive(&mut g);
        Ok(())
    }
    fn accept(&self, param: &[u8]) -> Result<()> {
        let mut g = self.inner.lock();
        if g.phase != Phase::Idle {
            return Err(Error::new(
                errno::FI_EISCONN,
                "tcp: accept on an endpoint that already connected",
            ));
        }
        let h = g.handle.as_ref().ok_or_else(|| {
            Error::inval("tcp: accept needs an endpoint opened with a connection request's info")
        })?;
        let req =
            h.0.clone().downcast::<Request>().map_err(|_| {
                Error::inval("tcp: accept: the handle is not a tcp connection request")
            })?;
        let mut slot = req.link.lock().unwrap_or_else(|e| e.into_inner());
        let mut link = slot.take().ok_or_else(|| {
            Error::inval("tcp: accept: the request was already accepted or rejected")
        })?;
        // A refused accept (private data over the limit) keeps the request
        // for another try.
        if let Err(e) = link.conn.accept(param) {
            *slot = Some(link);
            return Err(Error::new(e, "tcp: accept"));
        }
        drop(slot);
        g.handle = None;
        self.shared
            .poller
            .add(&link.sock, self.key.load(Ordering::Relaxed), true)
            .map_err(|e| Error::os(e, "tcp: epoll add"))?;
        g.link = Some(link);
        g.phase = Phase::Accepting;
        self.drive(&mut g);
        Ok(())
    }
    fn shutdown(&self, _flags: u64) -> Result<()> {
        let mut g = self.inner.lock();
        let Inner { link, rx, .. } = &mut *g;
        let l = link
            .as_mut()
            .ok_or_else(|| Error::new(errno::FI_ENOTCONN, "tcp: shutdown without a connection"))?;
        l.conn.shutdown(rx);
        let was = g.phase;
        g.phase = Phase::Done;
        if was != Phase::Done {
            // Receives still posted are canceled (messages already in stay
            // for later receives).
            g.rx.fail_posted(errno::FI_ECANCELED);
            g.gone = Some(errno::FI_ECANCELED);
        }
        // The cancellations reach the CQ before the EQ says it ended.
        self.drive(&mut g);
        if was != Phase::Done {
            // This side's end of the connection, reported as the peer's
            // is (FI_SHUTDOWN on the endpoint's EQ).
            Self::eq_event(&g, eq_event::FI_SHUTDOWN, Vec::new());
        }
        Ok(())
    }
    fn getpeer(&self) -> Result<Vec<u8>> {
        let g = self.inner.lock();
        let l = g
            .link
            .as_ref()
            .ok_or_else(|| Error::new(errno::FI_ENOTCONN, "tcp: no connection"))?;
        Ok(crate::addr::encode(
            &l.sock
                .peer_addr()
                .map_err(|e| Error::os(e, "tcp: getpeername"))?,
        ))
    }
}
