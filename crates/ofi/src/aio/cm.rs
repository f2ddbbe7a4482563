//! Connection management for MSG endpoints, as futures: a [`Listener`]
//! accepts connections, [`Channel::connect`] makes one; both wait on an
//! event queue's fd through tokio.

use super::{async_fd, Channel, Parts};
use crate::consts::{ep_type, eq_event, wait_obj};
use crate::{errno, EqAttr, EqEvent, Error, EventQueue, Fabric, Info, PassiveEndpoint, Result};
use std::os::fd::OwnedFd;
use tokio::io::unix::AsyncFd;

/// An event queue with its fd registered with tokio.
pub(super) fn event_queue(fabric: &Fabric) -> Result<(EventQueue, AsyncFd<OwnedFd>)> {
    let eq = fabric.eq(&EqAttr {
        size: 0,
        wait_obj: wait_obj::FI_WAIT_FD,
    })?;
    let fd = async_fd(eq.fd()?)?;
    Ok((eq, fd))
}

/// The next event on `eq` (an error entry becomes the error), sleeping on
/// its fd in between.
pub(super) async fn next_event(
    eq: &EventQueue,
    fd: &AsyncFd<OwnedFd>,
    what: &str,
) -> Result<EqEvent> {
    loop {
        match eq.read() {
            Ok(ev) => return Ok(ev),
            Err(e) if e.code() == errno::FI_EAVAIL => {
                let er = eq.readerr()?;
                return Err(Error::new(
                    er.err,
                    format!(
                        "{what}: the connection failed (provider error {})",
                        er.prov_errno
                    ),
                ));
            }
            Err(e) if e.is_again() => {}
            Err(e) => return Err(e),
        }
        if eq.trywait().is_ok() {
            let mut g = fd
                .readable()
                .await
                .map_err(|e| Error::os(e, "aio: waiting on the event queue"))?;
            g.clear_ready();
        } else {
            tokio::task::yield_now().await;
        }
    }
}

/// Waits for FI_CONNECTED on a connecting or accepting endpoint's queue.
async fn connected(eq: &EventQueue, fd: &AsyncFd<OwnedFd>, what: &str) -> Result<()> {
    loop {
        let ev = next_event(eq, fd, what).await?;
        match ev.event {
            eq_event::FI_CONNECTED => return Ok(()),
            eq_event::FI_SHUTDOWN => {
                return Err(Error::new(
                    errno::FI_ECONNRESET,
                    format!("{what}: the peer shut the connection down"),
                ))
            }
            _ => {}
        }
    }
}

fn msg_offer(info: &Info, what: &str) -> Result<()> {
    if info.ep_attr.ep_type != ep_type::FI_EP_MSG {
        return Err(Error::inval(format!(
            "{what}: needs an MSG (connected) offer"
        )));
    }
    Ok(())
}

impl Channel {
    /// Connects to a listening peer at `addr` (its [`Listener::address`])
    /// over an MSG offer; resolves once the connection is up. Send to
    /// [`Addr::PEER`](crate::safe::Addr::PEER) on the channel.
    pub async fn connect(info: &Info, addr: &[u8]) -> Result<Channel> {
        Self::connect_mode(info, addr, false).await
    }

    /// As [`connect`](Self::connect), the channel busy-polling (see
    /// [`open_busy`](Self::open_busy)).
    pub async fn connect_busy(info: &Info, addr: &[u8]) -> Result<Channel> {
        Self::connect_mode(info, addr, true).await
    }

    async fn connect_mode(info: &Info, addr: &[u8], busy: bool) -> Result<Channel> {
        msg_offer(info, "connect")?;
        let mut parts = Parts::open(info, None)?;
        let (eq, fd) = event_queue(&parts.fabric)?;
        parts.ep.bind_eq(&eq)?;
        parts.ep.enable()?;
        parts.ep.connect(addr, &[])?;
        connected(&eq, &fd, "connect").await?;
        parts.eq = Some((eq, fd));
        parts.channel(busy)
    }
}

/// A passive endpoint accepting MSG connections.
pub struct Listener {
    // Field order is drop order: the fd leaves the reactor, the passive
    // endpoint closes, then its queue and fabric.
    fd: AsyncFd<OwnedFd>,
    pep: PassiveEndpoint,
    eq: EventQueue,
    _fabric: Fabric,
    busy: bool,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("aio::Listener")
            .field("pep", &self.pep)
            .finish()
    }
}

impl Listener {
    /// Listens on an MSG offer (its `src_addr`: ask getinfo with a node
    /// and service and FI_SOURCE, e.g. `Hints::node(..).service(..).source(true)`).
    pub fn bind(info: &Info) -> Result<Listener> {
        msg_offer(info, "listen")?;
        let fabric = Fabric::open(&info.fabric_attr)?;
        let (eq, fd) = event_queue(&fabric)?;
        let pep = fabric.passive_ep(info, 0)?;
        pep.bind_eq(&eq)?;
        pep.listen()?;
        Ok(Listener {
            fd,
            pep,
            eq,
            _fabric: fabric,
            busy: false,
        })
    }

    /// Accepted channels busy-poll (see [`Channel::open_busy`]).
    pub fn busy_poll(mut self, yes: bool) -> Listener {
        self.busy = yes;
        self
    }

    /// The address peers connect to.
    pub fn address(&self) -> Result<Vec<u8>> {
        self.pep.getname()
    }

    /// Waits for the next connection request and accepts it; resolves to
    /// the connected channel. A request whose handshake fails is an error;
    /// the listener keeps listening.
    pub async fn accept(&self) -> Result<Channel> {
        loop {
            let ev = next_event(&self.eq, &self.fd, "accept").await?;
            let Some(info) = ev.info.filter(|_| ev.event == eq_event::FI_CONNREQ) else {
                continue;
            };
            let mut parts = Parts::open(&info, None)?;
            let (eq, fd) = event_queue(&parts.fabric)?;
            parts.ep.bind_eq(&eq)?;
            parts.ep.enable()?;
            parts.ep.accept(&[])?;
            connected(&eq, &fd, "accept").await?;
            parts.eq = Some((eq, fd));
            return parts.channel(self.busy);
        }
    }
}
