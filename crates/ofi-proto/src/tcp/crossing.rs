//! Simultaneous connect (RDM): two endpoints that send to each other for
//! the first time at once each open a connection, and the two cross. Both
//! ends must keep the same one without talking about it.
//!
//! Rule: **the connection initiated by the endpoint with the lower address
//! (bytewise) survives.** Each side applies it when a HELLO arrives while
//! it has its own connection to that peer:
//!
//! - lower side: its own connection wins; it answers the peer's HELLO with
//!   REJECT carrying `reject::SIMULTANEOUS` ([`Conn::reject_with`]);
//! - higher side: the peer's connection wins; it accepts the HELLO, moves
//!   the sends queued on its own connection to the accepted one
//!   ([`Conn::take_queued_sends`], then [`Conn::queue_send`] in order) and
//!   sends to that peer through it from now on. Its own connection then
//!   receives the REJECT and closes.
//!
//! Sends wait while a connection is connecting, so nothing was written on
//! the losing connection and moving the queue keeps their order. The two
//! HELLOs and the two answers may arrive in any order: when the REJECT
//! comes first, [`Event::Rejected`] with `SIMULTANEOUS` keeps the queued
//! sends for the driver to move once the peer's HELLO arrives.
//!
//! [`Conn::reject_with`]: super::Conn::reject_with
//! [`Conn::take_queued_sends`]: super::Conn::take_queued_sends
//! [`Conn::queue_send`]: super::Conn::queue_send
//! [`Event::Rejected`]: super::Event::Rejected

use std::cmp::Ordering;

/// What the endpoint already has with the peer whose HELLO just arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Nothing.
    None,
    /// Its own connection to the peer, connecting or connected.
    Outgoing,
    /// An earlier connection from the same peer (the peer reconnects, e.g.
    /// after a restart).
    Incoming,
}

/// What to do with an incoming HELLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloDecision {
    /// Accept it; no other connection is involved.
    Accept,
    /// Crossing connections and the peer's wins: accept it, move the
    /// outgoing connection's queued sends to it and route the peer's
    /// traffic through it; the outgoing one will be rejected.
    AcceptRetireOutgoing,
    /// Crossing connections and ours wins: reject it with
    /// `reject::SIMULTANEOUS`.
    RejectSimultaneous,
    /// Accept it and close the earlier incoming connection, which the
    /// peer has given up.
    AcceptReplaceIncoming,
}

/// Decides an incoming HELLO from `peer_addr` at the endpoint `my_addr`.
/// A HELLO from the endpoint's own address is its own outgoing connection
/// seen from the other end (sending to itself): accepted.
pub fn decide_hello(my_addr: &[u8], peer_addr: &[u8], existing: Existing) -> HelloDecision {
    match existing {
        Existing::None => HelloDecision::Accept,
        Existing::Incoming => HelloDecision::AcceptReplaceIncoming,
        Existing::Outgoing => match my_addr.cmp(peer_addr) {
            Ordering::Less => HelloDecision::RejectSimultaneous,
            Ordering::Greater => HelloDecision::AcceptRetireOutgoing,
            Ordering::Equal => HelloDecision::Accept,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_keep_the_lower_address_connection() {
        let a: &[u8] = &[10, 0, 0, 1, 0x1f, 0x90];
        let b: &[u8] = &[10, 0, 0, 2, 0x1f, 0x90];
        // a < b: a's connection survives. a rejects b's HELLO; b accepts a's.
        assert_eq!(
            decide_hello(a, b, Existing::Outgoing),
            HelloDecision::RejectSimultaneous
        );
        assert_eq!(
            decide_hello(b, a, Existing::Outgoing),
            HelloDecision::AcceptRetireOutgoing
        );
        // Without a crossing connection everyone is accepted.
        assert_eq!(decide_hello(a, b, Existing::None), HelloDecision::Accept);
        assert_eq!(decide_hello(b, a, Existing::None), HelloDecision::Accept);
        // A reconnecting peer replaces its old connection.
        assert_eq!(
            decide_hello(a, b, Existing::Incoming),
            HelloDecision::AcceptReplaceIncoming
        );
        // Sending to oneself.
        assert_eq!(
            decide_hello(a, a, Existing::Outgoing),
            HelloDecision::Accept
        );
    }

    #[test]
    fn the_rule_is_antisymmetric_for_any_addresses() {
        let addrs: [&[u8]; 5] = [&[], &[0], &[0, 0], &[1], &[0xff, 0]];
        for x in addrs {
            for y in addrs {
                let dx = decide_hello(x, y, Existing::Outgoing);
                let dy = decide_hello(y, x, Existing::Outgoing);
                if x == y {
                    assert_eq!((dx, dy), (HelloDecision::Accept, HelloDecision::Accept));
                } else {
                    // Exactly one side rejects, the other accepts.
                    assert_ne!(
                        dx == HelloDecision::RejectSimultaneous,
                        dy == HelloDecision::RejectSimultaneous
                    );
                }
            }
        }
    }
}
