//! Auth keys: an endpoint with a key talks only to peers that proved the
//! same key through the core's exchange (`ofi_proto::shm::auth`). Sends
//! to a peer not yet proven start the exchange and return `FI_EAGAIN`
//! until it ends; a refused peer is `FI_EKEYREJECTED`. Entries from a
//! sender that has not proven the key (a forger, or an endpoint of
//! another key) are dropped before they are acted on, logged and answered
//! REJECT once. An endpoint without a key answers a HELLO with REJECT.
//! (Keyed and unkeyed endpoints already refuse each other when one maps
//! the other's segment, from its header's `keyed` flag.)

use super::{Inner, ShmEndpoint};
use crate::peer::Peer;
use ofi_core::error::{errno, Error, Result};
use ofi_core::util::auth::nonce;
use ofi_proto::shm::auth::{reject, Out, Refusal, Standing};
use ofi_proto::shm::{Incoming, PeerId, Push};
use std::sync::atomic::Ordering;

/// Senders refused and remembered (each logged and answered once); more
/// are dropped silently.
const REFUSED_MAX: usize = 256;

impl ShmEndpoint {
    /// Whether this endpoint may send to `peer` now: always without a
    /// key; with one, once the peer proved it (`FI_EAGAIN` while the
    /// exchange runs, started here; `FI_EKEYREJECTED` once refused).
    #[inline]
    pub(super) fn gate(&self, g: &mut Inner, peer: &Peer) -> Result<()> {
        if !self.keyed || peer.trusted.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.gate_slow(g, peer)
    }

    fn gate_slow(&self, g: &mut Inner, peer: &Peer) -> Result<()> {
        let id = peer.addr.id();
        let Some(auth) = g.auth.as_mut() else {
            return Ok(());
        };
        match auth.standing(id) {
            Standing::Trusted => {
                peer.trusted.store(true, Ordering::Relaxed);
                Ok(())
            }
            Standing::Refused => Err(Error::new(
                errno::FI_EKEYREJECTED,
                format!(
                    "shm: peer {} did not prove this endpoint's auth key (its key differs) or refused ours",
                    peer.addr
                ),
            )),
            Standing::Pending => {
                if !g.proofs.is_empty() {
                    self.push_proofs(g);
                }
                Err(Error::again())
            }
            Standing::Unknown => {
                if let Some(hello) = auth.hello(id, nonce()?) {
                    self.send_out(g, &hello);
                }
                Err(Error::again())
            }
        }
    }

    /// Pushes an exchange entry (queued in order when the peer's ring is
    /// full).
    fn send_out(&self, g: &mut Inner, o: &Out) {
        self.send_ctrl_with(g, o.to, o.repr, o.payload());
    }

    /// Pushes the PROOFs owed; each peer is trusted once its PROOF is in
    /// its ring (nothing sent to it afterwards can overtake the PROOF).
    pub(super) fn push_proofs(&self, g: &mut Inner) {
        let mut owed = std::mem::take(&mut g.proofs);
        owed.retain(|o| {
            if self.try_ctrl(g, o.to, &o.repr, o.payload()) == Push::Full {
                return true;
            }
            if let Some(a) = g.auth.as_mut() {
                a.proved(o.to);
            }
            false
        });
        g.proofs = owed;
    }

    /// True when entries of `from` may be acted on: always without a key;
    /// with one, once `from` proved it. Otherwise the entry is dropped
    /// (logged and answered REJECT the first time).
    #[inline]
    pub(super) fn admit_sender(&self, g: &mut Inner, from: PeerId) -> bool {
        if !self.keyed || from == g.last_trusted {
            return true;
        }
        if g.auth.as_ref().is_some_and(|a| a.trusted(from)) {
            g.last_trusted = from;
            return true;
        }
        self.refuse(
            g,
            from,
            "an entry from a sender that has not proven the auth key",
            false,
        );
        false
    }

    /// Refuses `from`: logged once per sender; answered REJECT the first
    /// time, or every time for a failed exchange (`always`: its answer).
    fn refuse(&self, g: &mut Inner, from: PeerId, what: &str, always: bool) {
        let first = !g.refused.contains(&from);
        if first && g.refused.len() < REFUSED_MAX {
            g.refused.push(from);
            tracing::warn!(
                peer = %crate::addr::ShmAddr::from_id(from),
                "shm: refused {what} (FI_EKEYREJECTED)"
            );
        } else if !always {
            return;
        }
        self.send_ctrl(g, from, reject(self.me.id()));
    }

    /// An entry of the auth exchange.
    pub(super) fn auth_entry(&self, g: &mut Inner, inc: Incoming<'_>) {
        let Some(auth) = g.auth.as_mut() else {
            // No key here: a keyed peer must not talk to us.
            if let Incoming::Hello { from, .. } = inc {
                self.refuse(g, from, "a HELLO: this endpoint has no auth key", true);
            }
            return;
        };
        match inc {
            Incoming::Hello { from, nonce: ni } => match nonce() {
                Ok(na) => {
                    let ch = auth.on_hello(from, &ni, na);
                    self.send_out(g, &ch);
                }
                Err(e) => tracing::error!(error = %e, "shm: no nonce to answer a HELLO"),
            },
            Incoming::Challenge {
                from,
                echo,
                nonce: na,
                tag,
            } => match auth.on_challenge(from, &echo, &na, &tag) {
                Ok(proof) => {
                    g.proofs.push(proof);
                    self.push_proofs(g);
                }
                Err(Refusal::BadProof) => self.refuse(
                    g,
                    from,
                    "a peer whose CHALLENGE does not prove our auth key",
                    true,
                ),
                Err(Refusal::NotAsked) => {
                    tracing::debug!("shm: a CHALLENGE nobody asked for, ignored")
                }
            },
            Incoming::Proof { from, echo, tag } => match auth.on_proof(from, &echo, &tag) {
                Ok(()) => {
                    g.refused.retain(|r| *r != from);
                    if let Some(p) = g.by_id.get(&from) {
                        p.trusted.store(true, Ordering::Relaxed);
                    }
                }
                Err(Refusal::BadProof) => self.refuse(
                    g,
                    from,
                    "a peer whose PROOF does not prove our auth key",
                    true,
                ),
                Err(Refusal::NotAsked) => tracing::debug!("shm: a PROOF nobody asked for, ignored"),
            },
            Incoming::Reject { from } if auth.on_reject(from) => {
                g.proofs.retain(|o| o.to != from);
                tracing::warn!(
                    peer = %crate::addr::ShmAddr::from_id(from),
                    "shm: the peer refused this endpoint's auth key (FI_EKEYREJECTED)"
                );
            }
            _ => {}
        }
    }
}
