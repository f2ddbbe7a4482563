//! Incoming entries: every kind decoded and checked before the endpoint
//! acts on it. A malformed entry, or one naming something impossible here
//! (a bounce buffer out of range, a message larger than a bounce buffer),
//! is [`Dropped`] with its reason; nothing a peer writes can make the
//! decoder panic or name memory outside the entry.

use super::PeerId;
use ofi_base::auth::{Nonce, Tag, NONCE_LEN};
use ofi_wire::shm::{flag, op, Entry, RangeList, Ranges, Repr, MAX_RTS_IOV};
use ofi_wire::WireError;

/// What the receiving endpoint's own segment allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bounce buffers in the segment.
    pub bounce_bufs: u64,
    /// Bytes per bounce buffer (the largest BOUNCE message accepted).
    pub bounce_size: usize,
}

/// A two-sided message's header fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsgMeta {
    /// Sender.
    pub from: PeerId,
    /// Tagged message.
    pub tagged: bool,
    /// Tag (tagged messages).
    pub tag: u64,
    /// Remote CQ data (with `cq_data`).
    pub data: u64,
    /// `data` is remote CQ data.
    pub cq_data: bool,
    /// Message length.
    pub total: usize,
}

/// Where a message's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    /// In the entry.
    Inline(&'a [u8]),
    /// In this bounce buffer of the receiver's segment (index checked
    /// against [`Limits`]).
    Bounce(u64),
    /// In the sender's memory: these (address, length) ranges; the
    /// receiver copies them and answers ACK or NACK naming `cookie`.
    Rts {
        /// The sender's operation id.
        cookie: u64,
        /// Sender ranges (the first `cnt` are valid).
        iov: [(u64, u64); MAX_RTS_IOV],
        /// Ranges in use (1..=[`MAX_RTS_IOV`]).
        cnt: u8,
    },
}

/// A decoded entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incoming<'a> {
    /// A message (INLINE, BOUNCE, RTS).
    Msg {
        /// Its header fields.
        meta: MsgMeta,
        /// Where its bytes are.
        body: Body<'a>,
    },
    /// The receiver finished with our RTS (`status`: Ok or FI_E*).
    Ack {
        /// Our operation id.
        cookie: u64,
        /// The outcome the receiver reports.
        status: Result<(), i32>,
    },
    /// The receiver cannot copy across processes: push our RTS data.
    Nack {
        /// Our operation id.
        cookie: u64,
    },
    /// A pushed chunk of a peer's RTS message.
    Data {
        /// Sender.
        from: PeerId,
        /// The sender's operation id.
        cookie: u64,
        /// Byte offset in the message.
        offset: usize,
        /// The bytes.
        bytes: &'a [u8],
    },
    /// Clear to send: help copy our message (or pulled write) through the
    /// receiver's transfer descriptor `desc` of generation `gen`.
    Cts {
        /// Our operation id.
        cookie: u64,
        /// Descriptor index in the receiver's segment (unchecked here: the
        /// segment knows how many it has).
        desc: u64,
        /// Generation to claim with.
        gen: u64,
    },
    /// A one-sided request for this endpoint to execute (RMA_WRITE,
    /// RMA_PULL, RMA_READ, ATOMIC), its ranges checked against the entry.
    Request(OneSided<'a>),
    /// Auth: a peer starts proving keys with us (its nonce).
    Hello {
        /// Sender.
        from: PeerId,
        /// Its nonce.
        nonce: Nonce,
    },
    /// Auth: the acceptor's answer to our HELLO.
    Challenge {
        /// Sender.
        from: PeerId,
        /// Our HELLO's nonce, echoed.
        echo: Nonce,
        /// Its nonce.
        nonce: Nonce,
        /// Its proof.
        tag: Tag,
    },
    /// Auth: the initiator's answer to our CHALLENGE.
    Proof {
        /// Sender.
        from: PeerId,
        /// Our CHALLENGE's nonce, echoed.
        echo: Nonce,
        /// Its proof.
        tag: Tag,
    },
    /// Auth: the sender refused our proof or our entries.
    Reject {
        /// Sender.
        from: PeerId,
    },
    /// A target's answer to our one-sided request.
    Answer {
        /// Sender (only the operation's target may answer it).
        from: PeerId,
        /// Our operation id.
        cookie: u64,
        /// FI_E* number, 0 on success.
        status: u64,
        /// The target cannot copy across processes: push (writes).
        push: bool,
        /// The final answer.
        last: bool,
        /// Offset of `bytes` in the read or fetched data.
        offset: usize,
        /// Read or fetched bytes carried inline.
        bytes: &'a [u8],
    },
}

/// Why an entry was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// The header or its lists did not parse.
    Malformed(WireError),
    /// BOUNCE names a buffer out of range, or a message larger than one.
    BadBounce {
        /// The index it named.
        index: u64,
    },
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dropped::Malformed(e) => write!(f, "malformed entry: {e}"),
            Dropped::BadBounce { index } => {
                write!(f, "entry names an invalid bounce buffer ({index})")
            }
        }
    }
}

/// True for the request opcodes a target answers.
pub fn is_request(o: u8) -> bool {
    matches!(o, op::RMA_WRITE | op::RMA_PULL | op::RMA_READ | op::ATOMIC)
}

/// `N` bytes of `p` at `at` (the lengths were checked by `Repr::parse`).
fn take<const N: usize>(p: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(b) = p.get(at..at + N) {
        out.copy_from_slice(b);
    }
    out
}

/// True for the auth exchange's opcodes (accepted from any sender).
pub fn is_auth(o: u8) -> bool {
    matches!(o, op::HELLO | op::CHALLENGE | op::PROOF | op::REJECT)
}

/// The sender an entry names, before it is decoded (`None` for bytes too
/// short to hold a header).
pub fn sender(b: &[u8]) -> Option<PeerId> {
    Entry::new_checked(b).ok().map(|e| e.src())
}

/// The common entry, decoded on its own: a whole message inline (INLINE).
/// Its header fields and bytes, as [`decode`] gives them for the same
/// entry; `None` for every other entry and for a malformed one (`decode`
/// then says why).
#[inline]
pub fn inline_msg(b: &[u8]) -> Option<(MsgMeta, &[u8])> {
    let e = Entry::new_checked(b).ok()?;
    let payload = b.get(ofi_wire::shm::HDR_LEN..)?;
    if e.op() != op::INLINE || e.flags() & !flag::ALL != 0 {
        return None;
    }
    let len = e.len() as usize;
    let bytes = payload.get(..len)?;
    if len as u64 != e.total() {
        return None;
    }
    let flags = e.flags();
    Some((
        MsgMeta {
            from: e.src(),
            tagged: flags & flag::TAGGED != 0,
            tag: e.tag(),
            data: e.data(),
            cq_data: flags & flag::CQ_DATA != 0,
            total: len,
        },
        bytes,
    ))
}

/// Decodes one ring entry (header and payload, as the slot holds it).
#[inline]
pub fn decode<'a>(b: &'a [u8], lim: &Limits) -> Result<Incoming<'a>, Dropped> {
    let e = Entry::new_checked(b).map_err(Dropped::Malformed)?;
    let r = Repr::parse(&e).map_err(Dropped::Malformed)?;
    let payload: &'a [u8] = &b[ofi_wire::shm::HDR_LEN..];
    // Lengths below were checked by `parse` against the payload.
    let inline = |n: u32| &payload[..(n as usize).min(payload.len())];
    Ok(match r.op {
        op::INLINE | op::BOUNCE | op::RTS => {
            let meta = MsgMeta {
                from: r.src,
                tagged: r.flags & flag::TAGGED != 0,
                tag: r.tag,
                data: r.data,
                cq_data: r.flags & flag::CQ_DATA != 0,
                total: usize::try_from(r.total).unwrap_or(usize::MAX),
            };
            let body = match r.op {
                op::INLINE => Body::Inline(inline(r.len)),
                op::BOUNCE => {
                    if r.cookie >= lim.bounce_bufs || meta.total > lim.bounce_size {
                        return Err(Dropped::BadBounce { index: r.cookie });
                    }
                    Body::Bounce(r.cookie)
                }
                _ => Body::Rts {
                    cookie: r.cookie,
                    iov: r.rts_iov(&e),
                    cnt: r.iov_cnt,
                },
            };
            Incoming::Msg { meta, body }
        }
        op::ACK => Incoming::Ack {
            cookie: r.cookie,
            status: if r.data == 0 {
                Ok(())
            } else {
                Err(super::status_code(r.data))
            },
        },
        op::NACK => Incoming::Nack { cookie: r.cookie },
        op::DATA => Incoming::Data {
            from: r.src,
            cookie: r.cookie,
            offset: usize::try_from(r.total).unwrap_or(usize::MAX),
            bytes: inline(r.len),
        },
        op::CTS => Incoming::Cts {
            cookie: r.cookie,
            desc: r.tag,
            gen: r.data,
        },
        op::RMA_RESP => Incoming::Answer {
            from: r.src,
            cookie: r.cookie,
            status: r.data,
            push: r.flags & flag::PUSH != 0,
            last: r.flags & flag::LAST != 0,
            offset: usize::try_from(r.total).unwrap_or(usize::MAX),
            bytes: inline(r.len),
        },
        op::HELLO => Incoming::Hello {
            from: r.src,
            nonce: take(payload, 0),
        },
        op::CHALLENGE => Incoming::Challenge {
            from: r.src,
            echo: take(payload, 0),
            nonce: take(payload, NONCE_LEN),
            tag: take(payload, 2 * NONCE_LEN),
        },
        op::PROOF => Incoming::Proof {
            from: r.src,
            echo: take(payload, 0),
            tag: take(payload, NONCE_LEN),
        },
        op::REJECT => Incoming::Reject { from: r.src },
        // `parse` checked the ranges of every request kind.
        o if is_request(o) => Incoming::Request(OneSided {
            repr: r,
            list: r.range_list(payload).map_err(Dropped::Malformed)?,
        }),
        o => return Err(Dropped::Malformed(WireError::UnknownOp(o))),
    })
}

/// A decoded one-sided request: its header, its range lists (checked by
/// [`decode`], read in place from the entry when executed) and the entry
/// it came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OneSided<'a> {
    /// The header.
    pub repr: Repr,
    list: RangeList<'a>,
}

impl<'a> OneSided<'a> {
    /// Its ranges and where its inline data starts in the payload, copied out.
    pub fn ranges(&self) -> Result<Ranges, Dropped> {
        Ok(self.list.to_ranges())
    }
    /// Its ranges, read in place.
    #[inline]
    pub fn list(&self) -> RangeList<'a> {
        self.list
    }
    /// The entry's payload (ranges, then inline data).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.list.payload()
    }
}

/// A target's answer to our one-sided request, as [`Incoming::Answer`]
/// carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer<'a> {
    /// Sender (only the operation's target may answer it).
    pub from: PeerId,
    /// Our operation id.
    pub cookie: u64,
    /// FI_E* number, 0 on success.
    pub status: u64,
    /// The target cannot copy across processes: push (writes).
    pub push: bool,
    /// The final answer.
    pub last: bool,
    /// Offset of `bytes` in the read or fetched data.
    pub offset: usize,
    /// Read or fetched bytes carried inline.
    pub bytes: &'a [u8],
}

/// A one-sided entry decoded on its own (see [`one_sided`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OneSidedIn<'a> {
    /// A request for this endpoint to execute.
    Request(OneSided<'a>),
    /// A target's answer to one of ours.
    Answer(Answer<'a>),
}

/// The entries of a one-sided stream, decoded on their own: a request
/// (RMA_WRITE, RMA_PULL, RMA_READ, ATOMIC) or an answer (RMA_RESP), as
/// [`decode`] gives them for the same entry; `None` for every other entry
/// and for a malformed one (`decode` then says why).
#[inline]
pub fn one_sided(b: &[u8]) -> Option<OneSidedIn<'_>> {
    let e = Entry::new_checked(b).ok()?;
    let o = e.op();
    if o == op::RMA_RESP {
        let payload = b.get(ofi_wire::shm::HDR_LEN..)?;
        let flags = e.flags();
        if flags & !flag::ALL != 0 {
            return None;
        }
        return Some(OneSidedIn::Answer(Answer {
            from: e.src(),
            cookie: e.cookie(),
            status: e.data(),
            push: flags & flag::PUSH != 0,
            last: flags & flag::LAST != 0,
            offset: usize::try_from(e.total()).unwrap_or(usize::MAX),
            bytes: payload.get(..e.len() as usize)?,
        }));
    }
    if !is_request(o) {
        return None;
    }
    let (repr, list) = Repr::parse_request(b).ok()?;
    Some(OneSidedIn::Request(OneSided { repr, list }))
}

/// What an endpoint that closes owes the sender of an entry still in its
/// ring: an ACK for an RTS, a final answer for a one-sided request (a
/// chunk of a write owes nothing until its last).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owed {
    /// ACK the RTS `cookie` of `to`.
    Ack {
        /// The sender.
        to: PeerId,
        /// Its operation id.
        cookie: u64,
    },
    /// Answer request `cookie` of `to`.
    Answer {
        /// The initiator.
        to: PeerId,
        /// Its operation id.
        cookie: u64,
    },
}

/// The answer a closing endpoint owes for entry `b`, if any.
pub fn owed(b: &[u8]) -> Option<Owed> {
    let e = Entry::new_checked(b).ok()?;
    let r = Repr::parse(&e).ok()?;
    match r.op {
        op::RTS => Some(Owed::Ack {
            to: r.src,
            cookie: r.cookie,
        }),
        op::RMA_WRITE if r.flags & flag::LAST == 0 => None,
        o if is_request(o) => Some(Owed::Answer {
            to: r.src,
            cookie: r.cookie,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits {
        bounce_bufs: 4,
        bounce_size: 8192,
    };

    fn entry(r: Repr, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; ofi_wire::shm::HDR_LEN + 256];
        b[ofi_wire::shm::HDR_LEN..ofi_wire::shm::HDR_LEN + payload.len()].copy_from_slice(payload);
        r.emit(&mut Entry::new_unchecked(&mut b[..]));
        b
    }

    /// `inline_msg` answers exactly for the entries `decode` reads as an
    /// inline message, with the same fields and bytes.
    fn inline_agrees_with_decode(b: &[u8]) {
        let fast = inline_msg(b);
        match decode(b, &LIM) {
            Ok(Incoming::Msg {
                meta,
                body: Body::Inline(bytes),
            }) => assert_eq!(fast, Some((meta, bytes))),
            _ => assert_eq!(fast, None),
        }
    }

    #[test]
    fn the_inline_decoder_agrees_with_the_general_one() {
        for (op_, flags, len, total) in [
            (op::INLINE, flag::TAGGED | flag::CQ_DATA, 3, 3),
            (op::INLINE, 0, 0, 0),
            (op::INLINE, 0, 256, 256),
            (op::INLINE, 0, 257, 257),
            (op::INLINE, 0, 3, 4),
            (op::INLINE, 0x80, 3, 3),
            (op::INLINE, flag::LAST, 3, 3),
            (op::DATA, 0, 3, 3),
            (op::RTS, 0, 0, 3),
            (0, 0, 3, 3),
        ] {
            let b = entry(
                Repr {
                    op: op_,
                    flags,
                    iov_cnt: 1,
                    len,
                    total,
                    src: 9,
                    tag: 5,
                    data: 77,
                    ..Default::default()
                },
                b"abc",
            );
            inline_agrees_with_decode(&b);
            inline_agrees_with_decode(&b[..ofi_wire::shm::HDR_LEN - 1]);
        }
    }

    proptest::proptest! {
        #[test]
        fn the_inline_decoder_agrees_on_any_bytes(
            mut b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..160),
            inline in proptest::prelude::any::<bool>(),
        ) {
            // Half the inputs start as inline entries, so the agreement is
            // tested where it matters.
            if inline && b.len() > 40 {
                b[0] = op::INLINE;
            }
            inline_agrees_with_decode(&b);
        }

        #[test]
        fn the_one_sided_decoder_agrees_on_any_bytes(
            mut b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            pick in 0u8..6,
        ) {
            // Most inputs start as one-sided entries, so the agreement is
            // tested where it matters.
            if b.len() > 2 {
                b[0] = [op::RMA_WRITE, op::RMA_PULL, op::RMA_READ, op::ATOMIC, op::RMA_RESP, b[0]][pick as usize];
                b[2] &= 0x33;
            }
            one_sided_agrees_with_decode(&b);
        }
    }

    /// `one_sided` answers exactly for the entries `decode` reads as a
    /// request or an answer, with the same fields.
    fn one_sided_agrees_with_decode(b: &[u8]) {
        let fast = one_sided(b);
        match decode(b, &LIM) {
            Ok(Incoming::Request(req)) => {
                assert_eq!(fast, Some(OneSidedIn::Request(req)));
                let Some(OneSidedIn::Request(f)) = fast else {
                    unreachable!()
                };
                assert_eq!(Ok(f.list().to_ranges()), req.ranges());
            }
            Ok(Incoming::Answer {
                from,
                cookie,
                status,
                push,
                last,
                offset,
                bytes,
            }) => assert_eq!(
                fast,
                Some(OneSidedIn::Answer(Answer {
                    from,
                    cookie,
                    status,
                    push,
                    last,
                    offset,
                    bytes
                }))
            ),
            _ => assert_eq!(fast, None),
        }
    }

    #[test]
    fn the_one_sided_decoder_agrees_with_the_general_one() {
        let mut ranges = [0u8; 64];
        ranges[8..16].copy_from_slice(&4u64.to_le_bytes());
        ranges[24..32].copy_from_slice(&0x9000u64.to_le_bytes());
        ranges[32..40].copy_from_slice(&4u64.to_le_bytes());
        for (op_, flags, iov_cnt, len, tag) in [
            (op::RMA_WRITE, flag::LAST, 1, 4, 4),
            (op::RMA_WRITE, flag::LAST | flag::CQ_DATA, 1, 2, 4),
            (op::RMA_WRITE, 0x80, 1, 4, 4),
            (op::RMA_WRITE, flag::LAST, 1, 4, 5),
            (op::RMA_WRITE, flag::LAST, 0, 4, 4),
            (op::RMA_READ, 0, 0x11, 0, 4),
            (op::RMA_PULL, 0, 0x11, 0, 4),
            (op::RMA_READ, 0, 1, 0, 4),
            (op::ATOMIC, flag::LAST, 1, 4, 0),
            (op::RMA_RESP, flag::LAST, 0, 0, 0),
            (op::RMA_RESP, flag::PUSH, 0, 3, 0),
            (op::RMA_RESP, 0x80, 0, 3, 0),
            (op::RMA_RESP, 0, 0, 5000, 0),
            (op::INLINE, 0, 0, 3, 0),
            (op::ACK, 0, 0, 0, 0),
        ] {
            let b = entry(
                Repr {
                    op: op_,
                    flags,
                    iov_cnt,
                    len,
                    src: 9,
                    tag,
                    data: 104,
                    total: if op_ == op::ATOMIC { 4 } else { 0 },
                    cookie: 77,
                },
                &ranges,
            );
            one_sided_agrees_with_decode(&b);
            one_sided_agrees_with_decode(&b[..ofi_wire::shm::HDR_LEN - 1]);
            one_sided_agrees_with_decode(&b[..ofi_wire::shm::HDR_LEN + 30]);
        }
    }

    #[test]
    fn inline_message_carries_its_bytes() {
        let b = entry(
            Repr {
                op: op::INLINE,
                flags: flag::TAGGED | flag::CQ_DATA,
                len: 3,
                total: 3,
                src: 9,
                tag: 5,
                data: 77,
                ..Default::default()
            },
            b"abc",
        );
        let Ok(Incoming::Msg { meta, body }) = decode(&b, &LIM) else {
            panic!("an inline message")
        };
        assert_eq!(body, Body::Inline(b"abc"));
        assert!(meta.tagged && meta.cq_data);
        assert_eq!((meta.from, meta.tag, meta.data, meta.total), (9, 5, 77, 3));
    }

    #[test]
    fn bounce_index_and_size_are_checked() {
        let r = Repr {
            op: op::BOUNCE,
            total: 100,
            cookie: 3,
            ..Default::default()
        };
        assert!(matches!(
            decode(&entry(r, &[]), &LIM),
            Ok(Incoming::Msg {
                body: Body::Bounce(3),
                ..
            })
        ));
        let out = Repr { cookie: 4, ..r };
        assert_eq!(
            decode(&entry(out, &[]), &LIM),
            Err(Dropped::BadBounce { index: 4 })
        );
        let big = Repr { total: 8193, ..r };
        assert!(decode(&entry(big, &[]), &LIM).is_err());
    }

    #[test]
    fn ack_status_is_an_error_number_or_eio() {
        let ack = |data| Repr {
            op: op::ACK,
            cookie: 1,
            data,
            ..Default::default()
        };
        let st = |d| match decode(&entry(ack(d), &[]), &LIM) {
            Ok(Incoming::Ack { status, .. }) => status,
            other => panic!("{other:?}"),
        };
        assert_eq!(st(0), Ok(()));
        assert_eq!(st(104), Err(104));
        assert_eq!(st(u64::MAX), Err(ofi_base::error::errno::FI_EIO));
    }

    #[test]
    fn a_closing_endpoint_owes_rts_and_last_requests_an_answer() {
        let rts = Repr {
            op: op::RTS,
            iov_cnt: 1,
            total: 1 << 20,
            src: 4,
            cookie: 8,
            ..Default::default()
        };
        assert_eq!(owed(&entry(rts, &[])), Some(Owed::Ack { to: 4, cookie: 8 }));
        let inline = Repr {
            op: op::INLINE,
            ..Default::default()
        };
        assert_eq!(owed(&entry(inline, &[])), None);
        let mut ranges = [0u8; 24];
        ranges[8..16].copy_from_slice(&4u64.to_le_bytes());
        let chunk = Repr {
            op: op::RMA_WRITE,
            iov_cnt: 1,
            len: 2,
            tag: 4,
            src: 4,
            cookie: 9,
            ..Default::default()
        };
        assert_eq!(owed(&entry(chunk, &ranges)), None, "not the last chunk");
        let last = Repr {
            flags: flag::LAST,
            ..chunk
        };
        assert_eq!(
            owed(&entry(last, &ranges)),
            Some(Owed::Answer { to: 4, cookie: 9 })
        );
    }

    #[test]
    fn auth_entries_carry_nonces_and_proofs() {
        let mut p = [0u8; 96];
        for (i, b) in p.iter_mut().enumerate() {
            *b = i as u8;
        }
        let ch = Repr {
            op: op::CHALLENGE,
            len: 96,
            src: 5,
            ..Default::default()
        };
        let Ok(Incoming::Challenge {
            from,
            echo,
            nonce,
            tag,
        }) = decode(&entry(ch, &p), &LIM)
        else {
            panic!("a challenge")
        };
        assert_eq!(
            (from, echo[0], nonce[0], tag[0], tag[31]),
            (5, 0, 32, 64, 95)
        );
        let pr = Repr {
            op: op::PROOF,
            len: 64,
            src: 6,
            ..Default::default()
        };
        assert!(matches!(
            decode(&entry(pr, &p), &LIM),
            Ok(Incoming::Proof { from: 6, echo, tag }) if echo[1] == 1 && tag[0] == 32
        ));
        let bad = Repr { len: 63, ..pr };
        assert!(decode(&entry(bad, &p), &LIM).is_err(), "wrong length");
        assert_eq!(sender(&entry(pr, &p)), Some(6));
        assert_eq!(sender(&[0u8; 10]), None);
        assert!(is_auth(op::HELLO) && !is_auth(op::INLINE));
    }

    #[test]
    fn malformed_entries_are_dropped() {
        assert!(matches!(
            decode(&[0u8; 10], &LIM),
            Err(Dropped::Malformed(_))
        ));
        let unknown = Repr {
            op: 99,
            ..Default::default()
        };
        assert!(decode(&entry(unknown, &[]), &LIM).is_err());
        let rts0 = Repr {
            op: op::RTS,
            iov_cnt: 0,
            total: 1 << 20,
            ..Default::default()
        };
        assert!(decode(&entry(rts0, &[]), &LIM).is_err());
    }
}
