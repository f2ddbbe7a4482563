//! Auth keys on shm: the exchange by which two endpoints with auth keys
//! prove to each other that they hold the same key, and the record of
//! which peers did. Pure: nonces come in from the driver (the system's
//! random source), entries go out for the driver to push.
//!
//! The initiator I (the endpoint about to send first) pushes HELLO with a
//! fresh nonce `Ni` into the acceptor A's ring; A answers CHALLENGE with
//! `Ni`, its own fresh nonce `Na` and
//! `HMAC(key, "ofi-shm-v1 acceptor" | I | A | Ni | Na)`; I checks it (A
//! holds the key: I trusts A) and answers PROOF with `Na` and
//! `HMAC(key, "ofi-shm-v1 initiator" | I | A | Ni | Na)`; A checks it and
//! trusts I. A wrong proof is answered with REJECT and the peer is
//! refused (`FI_EKEYREJECTED` for what this endpoint sends it). Only
//! nonces and proofs are written into shared memory, never the key; a
//! proof names both endpoints and both fresh nonces, so it is useless for
//! another pair or another exchange, and the two roles' labels differ, so
//! a proof cannot be reflected.
//!
//! The driver sends nothing but HELLO to a peer it does not trust, and
//! drops every entry but the exchange's from a sender it does not trust.
//! After a good CHALLENGE the initiator trusts the acceptor only once its
//! PROOF is pushed ([`Auth::proved`]), so no data of it can overtake the
//! proof in the acceptor's ring.

use super::PeerId;
use ofi_base::auth::{AuthKey, Nonce, Tag, MAC_LEN, NONCE_LEN};
use ofi_wire::shm::{op, Repr, CHALLENGE_LEN};
use std::collections::HashMap;

/// The acceptor's label in the transcript.
const ACCEPTOR: &[u8] = b"ofi-shm-v1 acceptor";
/// The initiator's label in the transcript.
const INITIATOR: &[u8] = b"ofi-shm-v1 initiator";

const _: () = assert!(NONCE_LEN == ofi_wire::shm::AUTH_NONCE && MAC_LEN == ofi_wire::shm::AUTH_TAG);

/// An exchange entry for the driver to push into peer `to`'s ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Out {
    /// The peer whose ring it goes to.
    pub to: PeerId,
    /// Its header (`len` is the payload's length).
    pub repr: Repr,
    bytes: [u8; CHALLENGE_LEN],
}

impl Out {
    fn new(to: PeerId, me: PeerId, o: u8, parts: &[&[u8]]) -> Out {
        let mut bytes = [0u8; CHALLENGE_LEN];
        let mut at = 0;
        for p in parts {
            bytes[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        Out {
            to,
            repr: Repr {
                op: o,
                len: at as u32,
                src: me,
                ..Default::default()
            },
            bytes,
        }
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.bytes[..self.repr.len as usize]
    }
}

/// Where a peer stands with this endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    /// No exchange yet: start one ([`Auth::hello`]).
    Unknown,
    /// An exchange runs (or this endpoint's PROOF waits to be pushed).
    Pending,
    /// It proved the key.
    Trusted,
    /// It failed to prove the key, or refused ours.
    Refused,
}

/// Why an exchange entry was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It answers nothing this endpoint asked (no HELLO or CHALLENGE of
    /// ours carries that nonce): ignored, the peer's standing unchanged.
    NotAsked,
    /// Its proof is wrong: the peer does not hold this endpoint's key. The
    /// peer is refused; answer [`reject`].
    BadProof,
}

#[derive(Clone, Debug, Default)]
struct PeerAuth {
    /// Our HELLO's nonce while we wait for its CHALLENGE.
    hello: Option<Nonce>,
    /// (its HELLO's nonce, our CHALLENGE's nonce) while we wait for its PROOF.
    challenged: Option<(Nonce, Nonce)>,
    /// Our PROOF, verified CHALLENGE, not yet pushed.
    owed: bool,
    trusted: bool,
    refused: bool,
}

/// An endpoint's key and what each peer proved.
#[derive(Debug)]
pub struct Auth {
    key: AuthKey,
    me: PeerId,
    peers: HashMap<PeerId, PeerAuth>,
}

/// REJECT from `me`: this endpoint refused the receiver's proof or entries.
pub fn reject(me: PeerId) -> Repr {
    Repr {
        op: op::REJECT,
        src: me,
        ..Default::default()
    }
}

fn transcript<'a>(
    label: &'a [u8],
    i: &'a [u8; 8],
    a: &'a [u8; 8],
    ni: &'a Nonce,
    na: &'a Nonce,
) -> [&'a [u8]; 5] {
    [label, i, a, ni, na]
}

impl Auth {
    /// The record of endpoint `me`, whose key is `key`.
    pub fn new(key: AuthKey, me: PeerId) -> Self {
        Auth {
            key,
            me,
            peers: HashMap::new(),
        }
    }

    /// Where `peer` stands.
    pub fn standing(&self, peer: PeerId) -> Standing {
        match self.peers.get(&peer) {
            None => Standing::Unknown,
            Some(p) if p.refused => Standing::Refused,
            Some(p) if p.trusted => Standing::Trusted,
            Some(p) if p.hello.is_some() || p.owed => Standing::Pending,
            Some(_) => Standing::Unknown,
        }
    }

    /// True once `peer` proved the key.
    #[inline]
    pub fn trusted(&self, peer: PeerId) -> bool {
        self.peers.get(&peer).is_some_and(|p| p.trusted)
    }

    /// Starts an exchange with `peer` (initiator) with the fresh `nonce`:
    /// the HELLO to push; `None` when one runs already or the peer's
    /// standing is settled.
    pub fn hello(&mut self, peer: PeerId, nonce: Nonce) -> Option<Out> {
        let p = self.peers.entry(peer).or_default();
        if p.trusted || p.refused || p.hello.is_some() || p.owed {
            return None;
        }
        p.hello = Some(nonce);
        Some(Out::new(peer, self.me, op::HELLO, &[&nonce]))
    }

    /// A HELLO from `from` with its nonce `ni`: the CHALLENGE to answer
    /// with (acceptor), proving the key over the fresh nonce `na`.
    pub fn on_hello(&mut self, from: PeerId, ni: &Nonce, na: Nonce) -> Out {
        let (i, a) = (from.to_le_bytes(), self.me.to_le_bytes());
        let tag = self.key.mac(&transcript(ACCEPTOR, &i, &a, ni, &na));
        self.peers.entry(from).or_default().challenged = Some((*ni, na));
        Out::new(from, self.me, op::CHALLENGE, &[ni, &na, &tag])
    }

    /// A CHALLENGE from `from` echoing `ni` with its nonce `na` and proof
    /// `tag`. Good: `from` is trusted as soon as the returned PROOF is
    /// pushed ([`Auth::proved`]; until then it stands pending).
    pub fn on_challenge(
        &mut self,
        from: PeerId,
        ni: &Nonce,
        na: &Nonce,
        tag: &Tag,
    ) -> Result<Out, Refusal> {
        let me = self.me;
        let p = self.peers.entry(from).or_default();
        if p.hello.as_ref() != Some(ni) {
            return Err(Refusal::NotAsked);
        }
        p.hello = None;
        let (i, a) = (me.to_le_bytes(), from.to_le_bytes());
        if !self.key.verify(&transcript(ACCEPTOR, &i, &a, ni, na), tag) {
            p.refused = true;
            return Err(Refusal::BadProof);
        }
        let proof = self.key.mac(&transcript(INITIATOR, &i, &a, ni, na));
        p.owed = true;
        Ok(Out::new(from, me, op::PROOF, &[na, &proof]))
    }

    /// Our PROOF to `peer` is in its ring: it is trusted.
    pub fn proved(&mut self, peer: PeerId) {
        if let Some(p) = self.peers.get_mut(&peer) {
            if p.owed {
                p.owed = false;
                p.trusted = true;
            }
        }
    }

    /// A PROOF from `from` echoing our CHALLENGE's nonce `na` with proof
    /// `tag`. Good: `from` is trusted.
    pub fn on_proof(&mut self, from: PeerId, na: &Nonce, tag: &Tag) -> Result<(), Refusal> {
        let me = self.me;
        let p = self.peers.entry(from).or_default();
        let Some((ni, mine)) = p.challenged else {
            return Err(Refusal::NotAsked);
        };
        if &mine != na {
            return Err(Refusal::NotAsked);
        }
        p.challenged = None;
        let (i, a) = (from.to_le_bytes(), me.to_le_bytes());
        if !self
            .key
            .verify(&transcript(INITIATOR, &i, &a, &ni, na), tag)
        {
            p.refused = true;
            p.trusted = false;
            return Err(Refusal::BadProof);
        }
        p.trusted = true;
        p.refused = false;
        Ok(())
    }

    /// A REJECT from `from`: refused if we were asking it (our HELLO or
    /// PROOF outstanding); true then. A REJECT from a peer we did not ask
    /// changes nothing (anyone could write one).
    pub fn on_reject(&mut self, from: PeerId) -> bool {
        match self.peers.get_mut(&from) {
            Some(p) if p.hello.is_some() || p.owed => {
                p.hello = None;
                p.owed = false;
                p.refused = true;
                true
            }
            _ => false,
        }
    }

    /// Forgets `peer` (declared dead: a new endpoint at its address must
    /// prove the key again).
    pub fn forget(&mut self, peer: PeerId) {
        self.peers.remove(&peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofi_wire::shm::{HELLO_LEN, PROOF_LEN};

    fn key(b: &[u8]) -> AuthKey {
        AuthKey::new(b).unwrap().unwrap()
    }

    const I: PeerId = (10 << 32) | 1;
    const A: PeerId = (20 << 32) | 2;

    fn split<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
        b[at..at + N].try_into().unwrap()
    }

    /// Runs one exchange between `i` and `a`; what each ends with.
    fn exchange(i: &mut Auth, a: &mut Auth) -> (Standing, Standing) {
        let hello = i.hello(A, [1; 32]).expect("a HELLO");
        assert_eq!(hello.repr.len as usize, HELLO_LEN);
        let ch = a.on_hello(I, &split(hello.payload(), 0), [2; 32]);
        assert_eq!(ch.repr.len as usize, CHALLENGE_LEN);
        let p = ch.payload();
        match i.on_challenge(A, &split(p, 0), &split(p, 32), &split(p, 64)) {
            Ok(proof) => {
                assert_eq!(proof.repr.len as usize, PROOF_LEN);
                assert_eq!(i.standing(A), Standing::Pending, "trusted only once pushed");
                i.proved(A);
                let q = proof.payload();
                let _ = a.on_proof(I, &split(q, 0), &split(q, 32));
            }
            Err(r) => assert_eq!(r, Refusal::BadProof),
        }
        (i.standing(A), a.standing(I))
    }

    #[test]
    fn same_keys_trust_each_other_different_keys_refuse() {
        let (mut i, mut a) = (Auth::new(key(b"job"), I), Auth::new(key(b"job"), A));
        assert_eq!(
            exchange(&mut i, &mut a),
            (Standing::Trusted, Standing::Trusted)
        );
        assert!(i.trusted(A) && a.trusted(I));
        let (mut i, mut a) = (Auth::new(key(b"job"), I), Auth::new(key(b"other"), A));
        let (si, sa) = exchange(&mut i, &mut a);
        assert_eq!(
            si,
            Standing::Refused,
            "the initiator refuses a wrong CHALLENGE"
        );
        assert_ne!(sa, Standing::Trusted, "no PROOF came");
        assert!(i.hello(A, [3; 32]).is_none(), "refused stays refused");
    }

    #[test]
    fn a_wrong_or_replayed_proof_is_refused_and_unasked_entries_ignored() {
        let mut a = Auth::new(key(b"job"), A);
        // A PROOF with no CHALLENGE of ours: ignored.
        assert_eq!(a.on_proof(I, &[2; 32], &[0; 32]), Err(Refusal::NotAsked));
        assert_eq!(a.standing(I), Standing::Unknown);
        // A forger answers our CHALLENGE without the key.
        let _ = a.on_hello(I, &[1; 32], [2; 32]);
        assert_eq!(
            a.on_proof(I, &[9; 32], &[0; 32]),
            Err(Refusal::NotAsked),
            "wrong nonce"
        );
        assert_eq!(a.on_proof(I, &[2; 32], &[0; 32]), Err(Refusal::BadProof));
        assert_eq!(a.standing(I), Standing::Refused);
        assert!(!a.trusted(I));
        // A proof recorded from another exchange is useless for a new nonce.
        let (mut i2, mut a2) = (Auth::new(key(b"job"), I), Auth::new(key(b"job"), A));
        let h = i2.hello(A, [1; 32]).unwrap();
        let ch = a2.on_hello(I, &split(h.payload(), 0), [2; 32]);
        let p = ch.payload();
        let proof = i2
            .on_challenge(A, &split(p, 0), &split(p, 32), &split(p, 64))
            .unwrap();
        let mut a3 = Auth::new(key(b"job"), A);
        let _ = a3.on_hello(I, &[1; 32], [7; 32]);
        let q = proof.payload();
        assert_eq!(
            a3.on_proof(I, &[7; 32], &split(q, 32)),
            Err(Refusal::BadProof)
        );
        // A CHALLENGE nobody asked for: ignored.
        let mut i4 = Auth::new(key(b"job"), I);
        assert_eq!(
            i4.on_challenge(A, &[1; 32], &[2; 32], &[0; 32]),
            Err(Refusal::NotAsked)
        );
    }

    #[test]
    fn a_proof_cannot_be_reflected_and_names_both_ends() {
        // The acceptor's proof under the initiator's label fails, and a
        // proof made for another acceptor fails.
        let k = key(b"job");
        let (i, a) = (I.to_le_bytes(), A.to_le_bytes());
        let t = k.mac(&transcript(ACCEPTOR, &i, &a, &[1; 32], &[2; 32]));
        assert!(!k.verify(&transcript(INITIATOR, &i, &a, &[1; 32], &[2; 32]), &t));
        let other = ((30u64 << 32) | 3).to_le_bytes();
        assert!(!k.verify(&transcript(ACCEPTOR, &i, &other, &[1; 32], &[2; 32]), &t));
    }

    #[test]
    fn a_reject_counts_only_when_we_asked() {
        let mut i = Auth::new(key(b"job"), I);
        assert!(!i.on_reject(A), "not asked");
        assert_eq!(i.standing(A), Standing::Unknown);
        i.hello(A, [1; 32]).unwrap();
        assert_eq!(i.standing(A), Standing::Pending);
        assert!(i.on_reject(A));
        assert_eq!(i.standing(A), Standing::Refused);
        i.forget(A);
        assert_eq!(i.standing(A), Standing::Unknown, "forgotten after a death");
        // Simultaneous exchanges: each side both initiator and acceptor.
        let (mut x, mut y) = (Auth::new(key(b"k"), I), Auth::new(key(b"k"), A));
        let hx = x.hello(A, [1; 32]).unwrap();
        let hy = y.hello(I, [5; 32]).unwrap();
        let cy = y.on_hello(I, &split(hx.payload(), 0), [2; 32]);
        let cx = x.on_hello(A, &split(hy.payload(), 0), [6; 32]);
        let p = cy.payload();
        let px = x
            .on_challenge(A, &split(p, 0), &split(p, 32), &split(p, 64))
            .unwrap();
        let p = cx.payload();
        let py = y
            .on_challenge(I, &split(p, 0), &split(p, 32), &split(p, 64))
            .unwrap();
        x.proved(A);
        y.proved(I);
        let q = px.payload();
        assert_eq!(y.on_proof(I, &split(q, 0), &split(q, 32)), Ok(()));
        let q = py.payload();
        assert_eq!(x.on_proof(A, &split(q, 0), &split(q, 32)), Ok(()));
        assert!(x.trusted(A) && y.trusted(I));
    }
}
