//! The connection calls of an MSG channel (`fi_cm`): connect, listen,
//! accept, reject and disconnect, and the connection events; the
//! connections themselves are kept in `conn`.

use super::conn::Conns;
use super::{Addr, Channel, CmEvent, ConnRequest, Eps};
use crate::consts::*;
use crate::{Endpoint, Error, Info, Result};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

impl Channel {
    fn conns(&self, what: &str) -> Result<&Conns> {
        match &self.ep {
            Eps::Conns(c) => Ok(c),
            Eps::One(_) => Err(Error::inval(format!(
                "{what}: only an MSG channel makes connections"
            ))),
        }
    }

    /// Opens an endpoint for a new connection on the channel's queues and
    /// starts it with `start`; its address names it from then on.
    fn open_conn(
        &self,
        c: &Conns,
        info: &Info,
        start: impl FnOnce(&Endpoint) -> Result<()>,
    ) -> Result<Addr> {
        let a = c.reserve();
        let ep = self.domain.endpoint_with_context(info, a.0 as usize)?;
        ep.bind_cq(&self.cq, FI_TRANSMIT | FI_RECV)?;
        ep.bind_eq(&c.eq)?;
        ep.enable()?;
        start(&ep)?;
        c.install(a, ep);
        Ok(a)
    }

    /// MSG: starts a connection to the listening peer at `addr`, sending
    /// `param` as private data. The connection is usable once
    /// [`cm_event`](Self::cm_event) reports it
    /// [`Connected`](CmEvent::Connected) (or failed).
    pub fn connect(&self, addr: &[u8], param: &[u8]) -> Result<Addr> {
        let c = self.conns("connect")?;
        let info = c.info.clone();
        self.open_conn(c, &info, |ep| ep.connect(addr, param))
    }

    /// MSG: listens for connection requests on the offer's source address
    /// (ask getinfo with a node and service and FI_SOURCE); they arrive as
    /// [`CmEvent::Request`].
    pub fn listen(&self) -> Result<()> {
        let c = self.conns("listen")?;
        let pep = self._fabric.passive_ep(&c.info, 0)?;
        pep.bind_eq(&c.eq)?;
        pep.listen()?;
        c.set_pep(pep)
    }

    /// MSG: accepts a connection request with `param` as private data; the
    /// connection's receives may be posted at once, and it is up when
    /// [`CmEvent::Connected`] names it.
    pub fn accept(&self, req: ConnRequest, param: &[u8]) -> Result<Addr> {
        let c = self.conns("accept")?;
        self.open_conn(c, &req.info, |ep| ep.accept(param))
    }

    /// MSG: refuses a connection request; the peer's connect fails with
    /// `FI_ECONNREFUSED` and `param` as the rejection's data.
    pub fn reject(&self, req: ConnRequest, param: &[u8]) -> Result<()> {
        let c = self.conns("reject")?;
        let handle = req
            .info
            .handle
            .as_ref()
            .ok_or_else(|| Error::inval("reject: the request has no handle"))?;
        c.with_pep(|p| p.reject(handle, param))
    }

    /// MSG: shuts connection `conn` down and closes its endpoint; the
    /// peer sees FI_SHUTDOWN. Operations still posted on it are abandoned:
    /// their buffers stay with the channel until it closes.
    pub fn disconnect(&self, conn: Addr) -> Result<()> {
        let ep = self.conns("disconnect")?.remove(conn)?;
        let _ = ep.shutdown(0);
        drop(ep);
        Ok(())
    }

    /// MSG: the next connection event, without blocking (None when there is
    /// none; events that concern no connection are skipped).
    pub fn cm_event(&self) -> Result<Option<CmEvent>> {
        let c = self.conns("cm_event")?;
        loop {
            let r = c.eq.read();
            let again = matches!(&r, Err(e) if e.is_again());
            match c.event(r)? {
                Some(ev) => return Ok(Some(ev)),
                None if again => return Ok(None),
                None => {}
            }
        }
    }

    /// MSG: waits up to `timeout` for the next connection event.
    pub fn cm_wait(&self, timeout: Duration) -> Result<Option<CmEvent>> {
        let c = self.conns("cm_wait")?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.cm_event()? {
                return Ok(Some(ev));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            if let Some(ev) = c.event(c.eq.sread(Some(left)))? {
                return Ok(Some(ev));
            }
        }
    }

    /// MSG: `fi_trywait` on the event queue: Ok when it is safe to sleep on
    /// [`cm_fd`](Self::cm_fd), `FI_EAGAIN` when there are events to read.
    pub fn cm_trywait(&self) -> Result<()> {
        self.conns("cm_trywait")?.eq.trywait()
    }

    /// MSG: the event queue's wait fd, readable while connection events
    /// wait (call [`cm_trywait`](Self::cm_trywait) before sleeping on it).
    pub fn cm_fd(&self) -> Result<BorrowedFd<'_>> {
        self.conns("cm_fd")?.eq.fd()
    }
}
