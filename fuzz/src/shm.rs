//! The shm provider's decoders under arbitrary input: ring entries
//! (`shm_entry`) and the protocol core's entry handler (`shm_handler`).

use ofi_wire::shm;

/// `shm::Repr::parse` over an entry made of arbitrary bytes; on success also
/// `rts_iov`, and the parsed header must survive emit + parse unchanged.
pub fn shm_entry(data: &[u8]) {
    let Ok(e) = shm::Entry::new_checked(data) else {
        assert!(
            data.len() < shm::HDR_LEN,
            "new_checked refused a whole header"
        );
        return;
    };
    // Every accessor on a checked entry must be in bounds.
    let _ = (e.op(), e.flags(), e.iov_cnt(), e.len(), e.is_empty());
    let _ = (e.src(), e.tag(), e.data(), e.total(), e.cookie());
    let _ = e.payload();
    let Ok(r) = shm::Repr::parse(&e) else {
        return;
    };
    let iov = r.rts_iov(&e);
    if r.op == shm::op::RTS {
        let n = r.iov_cnt as usize;
        assert!(
            (1..=shm::MAX_RTS_IOV).contains(&n),
            "RTS accepted with {n} iovs"
        );
        // Entries past iov_cnt stay zero.
        assert!(iov[n..].iter().all(|&p| p == (0, 0)));
    }
    if matches!(r.op, shm::op::INLINE | shm::op::DATA | shm::op::RMA_RESP) {
        assert!(
            r.len as usize <= e.payload().len(),
            "inline length past the entry"
        );
    }
    if matches!(
        r.op,
        shm::op::RMA_WRITE | shm::op::RMA_PULL | shm::op::RMA_READ | shm::op::ATOMIC
    ) {
        // A parsed one-sided request's range lists and inline data lie
        // inside the entry, and the lengths add up as parse promised.
        let rg = r.ranges(&e).expect("parse accepted the ranges");
        assert!((1..=shm::MAX_RANGES).contains(&rg.n_remote));
        assert!(rg.n_local <= shm::MAX_RANGES);
        let data = match r.op {
            shm::op::RMA_WRITE | shm::op::ATOMIC => r.len as usize,
            _ => 0,
        };
        assert!(
            rg.data_at + data <= e.payload().len(),
            "request past the entry"
        );
        if r.op != shm::op::ATOMIC {
            assert_eq!(
                rg.remote_len(),
                r.tag,
                "remote ranges differ from the length"
            );
        }
    }
    // Round trip through a fresh entry of the same size.
    let mut buf = vec![0u8; data.len()];
    buf[shm::HDR_LEN..].copy_from_slice(e.payload());
    let mut out = shm::Entry::new_unchecked(&mut buf[..]);
    r.emit(&mut out);
    let again = shm::Repr::parse(&shm::Entry::new_checked(&buf[..]).expect("same length"));
    assert_eq!(again, Ok(r), "emit + parse changed the header");
}

// ---- the shm protocol core's entry handler -------------------------------

/// The shm core driven as the provider drives it, over entries made of
/// arbitrary bytes: the first byte picks the receiver's limits, then each
/// entry is a length byte and that many bytes (a ring slot). Every entry is
/// decoded (`ofi_proto::shm::decode`) and dispatched against the core's
/// state: four pending rendezvous sends (the sender machine,
/// `ofi_proto::shm::rndv`: ACKs end them, NACKs start DATA pushes into a
/// ring full every third chunk) and two pending one-sided operations to
/// peers 9 and 10 (answers count only from the operation's peer:
/// `OpTable::answered`), the receiver's reassembly of DATA chunks for each
/// RTS of at most 64 KiB (`rndv::Reassembly`, held to a model of which
/// bytes arrived), ATOMIC requests decoded and checked
/// (`AtomicReq::decode`), the layout a CTS's descriptor could hold
/// (`path::coop_layout_ok`, from the CTS's fields), posted receives and
/// the unexpected budget, and the control queue (a push that finds the
/// ring full every third time). Whatever the bytes: no panic; what the
/// decoder names lies inside the entry and the limits; an operation
/// completes at most once, a one-sided one only on its peer's answer; a
/// reassembly takes each byte once and completes exactly when all came; an
/// accepted atomic's operands are exactly its bytes; an accepted layout
/// tiles at most the operation; the unexpected budget holds.
pub fn shm_handler(data: &[u8]) {
    use ofi_core::util::matching::{PostedRecv, Unexpected};
    use ofi_proto::shm::{self as core, Body, Incoming, Limits};
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let lim = Limits {
        bounce_bufs: u64::from(sel & 0xf) + 1,
        bounce_size: 4096 * (usize::from(sel >> 4) + 1),
    };
    // Four rendezvous sends (the sender machine), to peers 9 and 10, of
    // 10 000 bytes each.
    let mut sends = core::rndv::Sends::default();
    let send_cookies: Vec<u64> = (0..4u32)
        .map(|i| sends.start(9 + u64::from(i % 2), 10_000, i))
        .collect();
    let mut pushed_to = std::collections::HashMap::<u64, usize>::new();
    let mut rmas = core::OpTable::new(1);
    let rma_cookies: Vec<u64> = (0..2u32).map(|i| rmas.insert(i)).collect();
    let rma_peer = |i: &u32| 9 + u64::from(i % 2);
    // The receiver's reassemblies, and which bytes of each arrived.
    let mut reasm = core::rndv::Reassembly::<()>::default();
    let mut have = std::collections::HashMap::<(u64, u64), Vec<bool>>::new();
    let mut reassembled = std::collections::HashSet::new();
    let mut rx = core::RxState::<usize>::new(8, 3);
    rx.mq.post(
        true,
        PostedRecv {
            iov_cnt: 1,
            len: 64,
            src: ofi_core::consts::FI_ADDR_UNSPEC,
            tag: 7,
            ..Default::default()
        },
    );
    let mut ctrl = core::CtrlQueue::new();
    // The auth exchange with a key the input cannot know: whatever it
    // writes, no sender becomes trusted.
    let key = ofi_core::util::auth::AuthKey::new(b"fuzz: a key no input holds")
        .ok()
        .flatten()
        .expect("a key");
    let mut auth = core::auth::Auth::new(key, 1);
    let mut pushes = 0u32;
    let mut done = std::collections::HashSet::new();
    let mut rng_full = |_: u64, _: &ofi_wire::shm::Repr, _: &[u8]| {
        pushes += 1;
        if pushes.is_multiple_of(3) {
            core::Push::Full
        } else {
            core::Push::Done
        }
    };
    while let Some((&n, tail)) = rest.split_first() {
        let n = usize::from(n).min(tail.len());
        let (slot, next) = tail.split_at(n);
        rest = next;
        let Ok(inc) = core::decode(slot, &lim) else {
            continue;
        };
        let room = slot.len().saturating_sub(shm::HDR_LEN);
        match inc {
            Incoming::Msg { meta, body } => {
                match body {
                    Body::Inline(b) => assert!(b.len() <= room, "inline bytes past the entry"),
                    Body::Bounce(i) => {
                        assert!(i < lim.bounce_bufs && meta.total <= lim.bounce_size)
                    }
                    Body::Rts { cnt, cookie, .. } => {
                        assert!((1..=shm::MAX_RTS_IOV as u8).contains(&cnt));
                        if meta.total <= 1 << 16 {
                            use core::rndv::Started;
                            let key = (meta.from, cookie);
                            match reasm.start(meta.from, cookie, meta.total, ()) {
                                Started::Waiting => {
                                    assert!(have.insert(key, vec![false; meta.total]).is_none());
                                    // A sender may use a cookie again once
                                    // its transfer ended: a new one starts.
                                    reassembled.remove(&key);
                                }
                                Started::Complete(()) => assert_eq!(meta.total, 0),
                                Started::Duplicate(()) => assert!(have.contains_key(&key)),
                            }
                        }
                    }
                }
                if let Some(i) = rx.mq.find_posted(meta.tagged, 0, meta.tag) {
                    let c = rx.claim_posted(meta.tagged, i, meta.total);
                    assert!(c.offset + c.room <= 64);
                } else if rx.may_read() {
                    rx.hold(
                        meta.tagged,
                        Unexpected {
                            src: 0,
                            tag: meta.tag,
                            data: meta.data,
                            flags: 0,
                            len: meta.total,
                            claimed: None,
                            payload: meta.total,
                        },
                    );
                }
                assert!(rx.unexpected() <= 3, "the unexpected budget was overrun");
            }
            Incoming::Ack { cookie, status } => {
                if let Err(code) = status {
                    assert!(
                        code > 0 && code < 1024,
                        "status {code} is not an FI_E* number"
                    );
                }
                let from = core::sender(slot).unwrap_or(0);
                if let Some((i, _)) = sends.on_ack(cookie, from, status) {
                    assert_eq!(from, 9 + u64::from(i % 2), "an ACK from another peer");
                    assert!(done.insert(cookie), "a send completed twice");
                    assert!(send_cookies.contains(&cookie));
                }
                let me = 1;
                ctrl.send(9, core::ack(me, cookie, 0), &[], &mut rng_full);
            }
            Incoming::Nack { cookie } => {
                let from = core::sender(slot).unwrap_or(0);
                if sends.on_nack(cookie, from) {
                    assert!(send_cookies.contains(&cookie));
                    assert!(
                        pushed_to.insert(cookie, 0).is_none(),
                        "pushed from the start twice"
                    );
                }
                let mut n = 0u32;
                sends.run_pushes(4096, |_, peer, c| {
                    n += 1;
                    assert!(peer == 9 || peer == 10);
                    let at = pushed_to
                        .get_mut(&c.cookie)
                        .expect("a push nobody asked for");
                    assert_eq!(c.offset, *at, "chunks out of order");
                    assert!(c.len > 0 && c.len <= 4096 && c.offset + c.len <= 10_000);
                    if n.is_multiple_of(3) {
                        return false;
                    }
                    *at += c.len;
                    true
                });
            }
            Incoming::Data {
                from,
                cookie,
                offset,
                bytes,
            } => {
                use core::rndv::{BadChunk, MAX_RUNS};
                assert!(bytes.len() <= room);
                let len = bytes.len();
                let key = (from, cookie);
                // What the model says of this chunk.
                let want = match have.get(&key) {
                    None => Err(BadChunk::Unknown),
                    Some(h) if len == 0 || offset.checked_add(len).is_none_or(|e| e > h.len()) => {
                        Err(BadChunk::OutOfRange)
                    }
                    Some(h) if h[offset..offset + len].contains(&true) => Err(BadChunk::Overlap),
                    Some(h) => {
                        let mut next = h.clone();
                        next[offset..offset + len].fill(true);
                        let runs = next
                            .iter()
                            .enumerate()
                            .filter(|&(i, &b)| b && (i == 0 || !next[i - 1]))
                            .count();
                        if runs > MAX_RUNS {
                            Err(BadChunk::Fragmented)
                        } else {
                            Ok(next)
                        }
                    }
                };
                let mut placed = false;
                let got = reasm.on_data(from, cookie, offset, len, |_| placed = true);
                match (got, want) {
                    (Ok(done), Ok(next)) => {
                        assert!(placed, "an accepted chunk was not placed");
                        let all = next.iter().all(|&b| b);
                        assert_eq!(done.is_some(), all, "completion without every byte");
                        if all {
                            have.remove(&key);
                            assert!(reassembled.insert(key), "a receive completed twice");
                        } else {
                            have.insert(key, next);
                        }
                    }
                    (Err(why), Err(model)) => {
                        assert!(!placed, "a refused chunk was placed");
                        assert_eq!(why, model);
                    }
                    (got, want) => {
                        panic!("DATA ({offset}, {len}): {got:?}, the model says {want:?}")
                    }
                }
            }
            Incoming::Cts { cookie, desc, gen } => {
                let len = if sends.get(cookie).is_some() || rmas.get(cookie).is_some() {
                    10_000
                } else {
                    4096
                };
                // A descriptor holding anything: here, what the CTS says.
                let (chunk, total) = ((desc & 0xffff_ffff) as usize, (desc >> 32) as usize);
                if core::path::coop_layout_ok(gen, chunk, total, len) {
                    assert!(chunk > 0 && total <= len);
                    let mut at = 0;
                    for c in 0..gen {
                        let (off, n) = core::path::coop_span(c, chunk, total);
                        assert_eq!(off, at, "chunks leave a gap");
                        assert!(n > 0, "an empty chunk");
                        at += n;
                    }
                    assert_eq!(at, total, "chunks do not tile the transfer");
                }
            }
            Incoming::Request(req) => {
                let repr = req.repr;
                let payload = req.payload();
                let ranges = req.ranges().expect("decode checked the request's ranges");
                assert!(core::is_request(repr.op));
                assert!(ranges.data_at <= payload.len(), "ranges past the entry");
                if repr.op == shm::op::ATOMIC {
                    if let Ok(q) = core::AtomicReq::decode(&repr, &ranges, payload, 1024) {
                        assert!(ofi_core::util::atomic::valid(q.kind, q.op, q.datatype));
                        assert!(q.bytes <= 1024 && q.bytes == q.count * q.size);
                        assert_eq!(ranges.remote_len(), q.count as u64);
                        for v in [q.operand, q.compare].into_iter().flatten() {
                            assert_eq!(v.len(), q.bytes, "operands of another length");
                        }
                        assert!(q.operand.is_some() || q.read_only());
                    }
                }
                ctrl.send(
                    repr.src,
                    core::rma_answer(1, repr.cookie, 0),
                    &[],
                    &mut rng_full,
                );
            }
            Incoming::Answer {
                from,
                cookie,
                last,
                bytes,
                ..
            } => {
                assert!(bytes.len() <= room);
                if let Ok(i) = rmas.answered(cookie, from, rma_peer) {
                    assert_eq!(rma_peer(i), from, "an answer from another peer");
                    if last {
                        assert!(rmas.take(cookie).is_some());
                        assert!(done.insert(cookie), "an operation completed twice");
                        assert!(rma_cookies.contains(&cookie));
                    }
                }
            }
            Incoming::Hello { from, nonce } => {
                let ch = auth.on_hello(from, &nonce, [from as u8; 32]);
                assert_eq!(ch.repr.len as usize, shm::CHALLENGE_LEN);
                ctrl.send(from, ch.repr, ch.payload(), &mut rng_full);
            }
            Incoming::Challenge {
                from,
                echo,
                nonce,
                tag,
            } => {
                let _ = auth.on_challenge(from, &echo, &nonce, &tag);
                auth.proved(from);
                assert!(!auth.trusted(from), "trusted without a HELLO of ours");
            }
            Incoming::Proof { from, echo, tag } => {
                assert!(
                    auth.on_proof(from, &echo, &tag).is_err(),
                    "a proof made without the key"
                );
                assert!(!auth.trusted(from), "trusted without the key");
            }
            Incoming::Reject { from } => {
                assert!(!auth.on_reject(from), "a REJECT of something never asked");
            }
        }
        ctrl.flush(&mut rng_full);
    }
    assert_eq!(
        sends.len() + rmas.len() + done.len(),
        6,
        "operations lost or invented"
    );
}
