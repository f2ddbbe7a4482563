//! The core's shared objects on their own: completion queue formats and
//! error ordering, counters, address vectors and memory regions.

use ofi_core::consts::*;
use ofi_core::error::{errno, Error, Result};
use ofi_core::provider::AddrOps;
use ofi_core::util::av::{AvAttr, AvCore};
use ofi_core::util::cntr::{CntrAttr, CntrCore};
use ofi_core::util::cq::*;
use ofi_core::util::mr::{MrAttr, MrMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct TestAddrs;

impl AddrOps for TestAddrs {
    fn canonical(&self, addr: &[u8]) -> Result<Vec<u8>> {
        if addr.starts_with(b"t://") {
            Ok(addr.to_vec())
        } else {
            Err(Error::inval("not a t:// address"))
        }
    }
    fn to_string(&self, addr: &[u8]) -> String {
        String::from_utf8_lossy(addr).into_owned()
    }
    fn resolve(&self, node: &str, service: &str) -> Result<Vec<u8>> {
        Ok(format!("t://{node}:{service}").into_bytes())
    }
}

fn cq(wait: u32) -> Arc<CqCore> {
    CqCore::new(&CqAttr {
        size: 8,
        format: cq_format::FI_CQ_FORMAT_TAGGED,
        wait_obj: wait,
    })
    .unwrap()
}

#[test]
fn cq_formats_carry_the_libfabric_fields() {
    let q = cq(wait_obj::FI_WAIT_NONE);
    q.push(completion(7, FI_RECV | FI_TAGGED, 5, 0x1000, 42, 9), 3);
    q.push(
        completion(8, FI_SEND | FI_MSG, 0, 0, 0, 0),
        FI_ADDR_NOTAVAIL,
    );
    let mut t = [CqTaggedEntry::default(); 1];
    let mut src = [0u64; 1];
    assert_eq!(q.readfrom(&mut t, &mut src).unwrap(), 1);
    assert_eq!(
        t[0],
        CqTaggedEntry {
            op_context: 7,
            flags: FI_RECV | FI_TAGGED,
            len: 5,
            buf: 0x1000,
            data: 42,
            tag: 9
        }
    );
    assert_eq!(src[0], 3);
    let mut c = [CqEntry::default(); 4];
    assert_eq!(q.read(&mut c).unwrap(), 1);
    assert_eq!(c[0].op_context, 8);
    assert!(q.read(&mut c).unwrap_err().is_again());
    assert_eq!(std::mem::size_of::<CqEntry>(), 8);
    assert_eq!(std::mem::size_of::<CqMsgEntry>(), 24);
    assert_eq!(std::mem::size_of::<CqDataEntry>(), 40);
    assert_eq!(std::mem::size_of::<CqTaggedEntry>(), 48);
    assert_eq!(std::mem::size_of::<CqErrEntry>(), 80);
}

#[test]
fn cq_errors_keep_their_place_in_order() {
    let q = cq(wait_obj::FI_WAIT_NONE);
    q.push(completion(1, FI_RECV, 0, 0, 0, 0), 0);
    q.push_err(error_completion(2, FI_RECV, errno::FI_ETRUNC, 4, 6, 0), 0);
    q.push(completion(3, FI_RECV, 0, 0, 0, 0), 0);
    let mut e = [CqMsgEntry::default(); 4];
    assert_eq!(q.read(&mut e).unwrap(), 1, "stops before the error");
    assert_eq!(q.read(&mut e).unwrap_err().code(), errno::FI_EAVAIL);
    let err = q.readerr().unwrap();
    assert_eq!(
        (err.op_context, err.err, err.len, err.olen),
        (2, errno::FI_ETRUNC, 4, 6)
    );
    assert_eq!(q.read(&mut e).unwrap(), 1);
    assert_eq!(e[0].op_context, 3);
    assert!(q.readerr().unwrap_err().is_again());
}

#[test]
fn cq_readfrom_with_hands_entries_in_order_up_to_max_and_stops_at_errors() {
    let q = cq(wait_obj::FI_WAIT_NONE);
    let mut seen = Vec::new();
    let mut take = |q: &CqCore, max| {
        seen.clear();
        let r = q.readfrom_with(max, |e, src| seen.push((e.op_context, e.len, src)));
        (r, seen.clone())
    };
    assert!(take(&q, 16).0.unwrap_err().is_again(), "empty");
    for ctx in 1..=3 {
        q.push(
            completion(ctx, FI_RECV, ctx * 10, 0, 0, 0),
            ctx as u64 + 100,
        );
    }
    q.push_err(error_completion(4, FI_RECV, errno::FI_ETRUNC, 4, 6, 0), 0);
    q.push(completion(5, FI_SEND, 0, 0, 0, 0), FI_ADDR_NOTAVAIL);
    assert_eq!(take(&q, 2), (Ok(2), vec![(1, 10, 101), (2, 20, 102)]));
    assert_eq!(
        take(&q, 16),
        (Ok(1), vec![(3, 30, 103)]),
        "stops before the error"
    );
    let (r, none) = take(&q, 16);
    assert_eq!((r.unwrap_err().code(), none), (errno::FI_EAVAIL, vec![]));
    assert_eq!(q.readerr().unwrap().op_context, 4);
    assert_eq!(
        take(&q, 16),
        (Ok(1), vec![(5, 0, FI_ADDR_NOTAVAIL)]),
        "the source comes with each entry"
    );
    // Room for none: 0 while entries wait, FI_EAGAIN once the queue is empty.
    assert!(take(&q, 0).0.unwrap_err().is_again());
    q.push(completion(6, FI_RECV, 0, 0, 0, 0), 0);
    assert_eq!(take(&q, 0), (Ok(0), vec![]));
    assert_eq!(take(&q, 1).0.unwrap(), 1);
}

#[test]
fn cq_rejects_bad_attributes() {
    assert_eq!(
        CqCore::new(&CqAttr {
            size: 0,
            format: 9,
            wait_obj: 0
        })
        .unwrap_err()
        .code(),
        errno::FI_EINVAL
    );
    assert_eq!(
        CqCore::new(&CqAttr {
            size: 0,
            format: 1,
            wait_obj: 42
        })
        .unwrap_err()
        .code(),
        errno::FI_EINVAL
    );
    assert_eq!(
        CqCore::new(&CqAttr {
            size: 0,
            format: 1,
            wait_obj: wait_obj::FI_WAIT_MUTEX_COND
        })
        .unwrap_err()
        .code(),
        errno::FI_ENOSYS
    );
    let q = cq(wait_obj::FI_WAIT_NONE);
    let mut e = [CqEntry::default(); 1];
    assert_eq!(
        q.sread(&mut e, Some(Duration::from_millis(1)))
            .unwrap_err()
            .code(),
        errno::FI_ENOSYS
    );
    // Room for no entry (fi_cq_read(cq, NULL, 0)) only drives progress:
    // FI_EAGAIN when empty, 0 when entries wait, none taken.
    let mut none: [CqEntry; 0] = [];
    assert!(q.read(&mut none).unwrap_err().is_again());
    q.push(completion(3, FI_RECV, 0, 0, 0, 0), 0);
    assert_eq!(q.read(&mut none).unwrap(), 0);
    assert_eq!(q.read(&mut e).unwrap(), 1);
    assert_eq!(e[0].op_context, 3);
    assert!(q.read(&mut none).unwrap_err().is_again());
}

#[test]
fn cq_sread_times_out_and_wakes() {
    let q = cq(wait_obj::FI_WAIT_FD);
    let mut e = [CqEntry::default(); 1];
    let t = Instant::now();
    assert!(q
        .sread(&mut e, Some(Duration::from_millis(50)))
        .unwrap_err()
        .is_again());
    assert!(t.elapsed() >= Duration::from_millis(50));
    let q2 = q.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        q2.push(completion(11, FI_RECV, 0, 0, 0, 0), 0);
    });
    assert_eq!(q.sread(&mut e, Some(Duration::from_secs(10))).unwrap(), 1);
    assert_eq!(e[0].op_context, 11);
    h.join().unwrap();
    assert!(q.wait_fd().is_some());
}

#[test]
fn counters_count_and_wait() {
    let c = CntrCore::new(&CntrAttr::default()).unwrap();
    c.add(3);
    assert_eq!(c.read(), 3);
    c.set(10);
    c.add_err(2);
    assert_eq!((c.read(), c.readerr()), (10, 2));
    c.wait(10, Some(Duration::from_millis(10))).unwrap();
    assert_eq!(
        c.wait(11, Some(Duration::from_millis(20)))
            .unwrap_err()
            .code(),
        errno::FI_ETIMEDOUT
    );
    let c2 = c.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        c2.add(5);
    });
    c.wait(15, Some(Duration::from_secs(10))).unwrap();
    h.join().unwrap();
    let c3 = c.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        c3.add_err(1);
    });
    assert_eq!(
        c.wait(100, Some(Duration::from_secs(10)))
            .unwrap_err()
            .code(),
        errno::FI_EAVAIL
    );
    h.join().unwrap();
    assert_eq!(
        CntrCore::new(&CntrAttr {
            events: 5,
            wait_obj: 0
        })
        .unwrap_err()
        .code(),
        errno::FI_EINVAL
    );
}

/// An application's AV never learns; a private one told to learns up to
/// its limit, and finds what it learned again without a duplicate.
#[test]
fn av_learns_senders_only_when_told_and_up_to_its_limit() {
    let av = AvCore::new(
        &AvAttr {
            av_type: av_type::FI_AV_TABLE,
            count: 4,
        },
        Arc::new(TestAddrs),
    )
    .unwrap();
    assert_eq!(
        av.reverse_or_learn(b"t://a"),
        None,
        "learning is off by default"
    );
    assert_eq!(av.count(), 0);
    av.set_learning(3);
    // A malformed name is not learned (it uses up one of the 3).
    assert_eq!(av.reverse_or_learn(b"bogus"), None);
    let a = av.reverse_or_learn(b"t://a").expect("learned");
    assert_eq!(av.reverse_or_learn(b"t://a"), Some(a), "found again");
    assert_eq!(av.find(b"t://a"), Some(a));
    let b = av.reverse_or_learn(b"t://b").expect("learned");
    assert_ne!(a, b);
    assert_eq!(av.reverse_or_learn(b"t://c"), None, "limit reached");
    assert_eq!(av.count(), 2);
}

#[test]
fn av_table_insert_lookup_remove_reverse() {
    let av = AvCore::new(
        &AvAttr {
            av_type: av_type::FI_AV_TABLE,
            count: 4,
        },
        Arc::new(TestAddrs),
    )
    .unwrap();
    let mut out = [0u64; 3];
    let n = av
        .insert(&[b"t://a", b"bogus", b"t://b"], &mut out)
        .unwrap();
    assert_eq!(n, 2);
    assert_eq!(out, [0, FI_ADDR_NOTAVAIL, 1]);
    assert_eq!(&*av.lookup(1).unwrap(), b"t://b");
    assert_eq!(av.reverse(b"t://a"), Some(0));
    assert_eq!(av.straddr(b"t://a"), "t://a");
    let g = av.generation();
    assert_eq!(
        av.remove(&[0, 99]).unwrap_err().code(),
        errno::FI_EINVAL,
        "unknown address: nothing removed"
    );
    assert!(av.lookup(0).is_ok());
    av.remove(&[0]).unwrap();
    assert_ne!(av.generation(), g, "removal changes the generation");
    assert_eq!(av.lookup(0).unwrap_err().code(), errno::FI_ENOENT);
    assert_eq!(av.reverse(b"t://a"), None);
    assert_eq!(av.insertsvc("h", "9").unwrap(), 0, "freed slot reused");
    assert_eq!(av.count(), 2);
    assert_eq!(
        AvCore::new(
            &AvAttr {
                av_type: 7,
                count: 0
            },
            Arc::new(TestAddrs)
        )
        .unwrap_err()
        .code(),
        errno::FI_EINVAL
    );
    let map = AvCore::new(
        &AvAttr {
            av_type: av_type::FI_AV_MAP,
            count: 0,
        },
        Arc::new(TestAddrs),
    )
    .unwrap();
    assert_eq!(map.kind(), av_type::FI_AV_MAP);
}

#[test]
fn av_duplicates_are_aliases_with_one_primary() {
    let av = AvCore::new(&AvAttr::default(), Arc::new(TestAddrs)).unwrap();
    let mut out = [0u64; 4];
    av.insert(&[b"t://a", b"t://b", b"t://a", b"t://a"], &mut out)
        .unwrap();
    assert_eq!(out, [0, 1, 2, 3], "each insert its own fi_addr, in order");
    for a in [0, 2, 3] {
        assert_eq!(&*av.lookup(a).unwrap(), b"t://a");
        assert_eq!(av.primary(a), Some(0), "fi_addr {a}'s primary");
    }
    assert_eq!(av.primary(1), Some(1));
    assert_eq!(av.primary(9), None);
    assert_eq!(av.reverse(b"t://a"), Some(0));
    // Removing the primary promotes the first alias left; removing every
    // alias forgets the address.
    av.remove(&[0]).unwrap();
    assert_eq!(av.reverse(b"t://a"), Some(2));
    assert_eq!(av.primary(3), Some(2));
    av.remove(&[3]).unwrap();
    assert_eq!(av.primary(2), Some(2));
    av.remove(&[2]).unwrap();
    assert_eq!(av.reverse(b"t://a"), None);
    // A re-insert after removal is a fresh primary.
    let mut o = [0u64];
    av.insert(&[b"t://a"], &mut o).unwrap();
    assert_eq!(av.reverse(b"t://a"), Some(o[0]));
    assert_eq!(av.primary(o[0]), Some(o[0]));
}

/// Registers for this test: `buf` outlives every region, and no endpoint
/// ever accesses the ranges (the map is used alone).
#[allow(unsafe_code)]
fn reg(
    map: &std::sync::Arc<MrMap>,
    a: &MrAttr,
    prov_key: bool,
) -> Result<std::sync::Arc<ofi_core::util::mr::MrCore>> {
    // SAFETY: see above.
    unsafe { map.register(a, prov_key) }
}

#[test]
fn mr_keys_access_and_bounds() {
    let map = MrMap::new();
    let buf = vec![0u8; 4096];
    let base = buf.as_ptr() as usize;
    let attr = MrAttr {
        iov: vec![(base, 4096)],
        access: FI_REMOTE_READ,
        requested_key: 0,
        offset: 0,
    };
    let a = reg(&map, &attr, true).unwrap();
    let b = reg(&map, &attr, true).unwrap();
    assert_ne!(a.key, b.key);
    assert!(
        a.key.abs_diff(b.key) > 1 << 20,
        "provider keys are not sequential"
    );
    assert_eq!(map.lookup(a.key).unwrap().key, a.key);
    assert_eq!(
        a.check(base as u64 + 100, 100, FI_REMOTE_READ, true)
            .unwrap(),
        base + 100
    );
    assert_eq!(
        a.check(base as u64 + 4000, 100, FI_REMOTE_READ, true)
            .unwrap_err()
            .code(),
        errno::FI_EACCES
    );
    assert_eq!(
        a.check(base as u64, 8, FI_REMOTE_WRITE, true)
            .unwrap_err()
            .code(),
        errno::FI_EACCES
    );
    assert_eq!(
        a.check(4000, 96, FI_REMOTE_READ, false).unwrap(),
        base + 4000,
        "offset addressing"
    );
    assert_eq!(
        a.check(u64::MAX - 4, 100, FI_REMOTE_READ, false)
            .unwrap_err()
            .code(),
        errno::FI_EACCES
    );
    let user = MrAttr {
        requested_key: 77,
        ..attr.clone()
    };
    let u = reg(&map, &user, false).unwrap();
    assert_eq!(u.key, 77);
    assert_eq!(
        reg(&map, &user, false).unwrap_err().code(),
        errno::FI_ENOKEY
    );
    drop(u);
    assert!(map.lookup(77).is_none(), "closing a region frees its key");
    reg(&map, &user, false).unwrap();
    assert_eq!(
        reg(
            &map,
            &MrAttr {
                iov: vec![],
                ..attr.clone()
            },
            true
        )
        .unwrap_err()
        .code(),
        errno::FI_EINVAL
    );
    assert_eq!(
        reg(
            &map,
            &MrAttr {
                access: 1 << 40,
                ..attr.clone()
            },
            true
        )
        .unwrap_err()
        .code(),
        errno::FI_EBADFLAGS
    );
    drop(buf);
}

#[test]
fn eq_events_errors_peek_and_waits() {
    use ofi_core::util::eq::{EqAttr, EqCore, EqError, EqEvent};
    let q = EqCore::new(&EqAttr::default()).unwrap();
    assert!(q.read(false).unwrap_err().is_again());
    q.push(EqEvent {
        event: eq_event::FI_CONNREQ,
        fid: 5,
        cm_data: b"hi".to_vec(),
        ..Default::default()
    });
    q.push_err(EqError {
        fid: 6,
        err: errno::FI_ECONNREFUSED,
        err_data: b"no".to_vec(),
        ..Default::default()
    });
    let peeked = q.read(true).unwrap();
    assert_eq!(
        peeked,
        q.read(false).unwrap(),
        "peek leaves the event in place"
    );
    assert_eq!(
        (peeked.event, peeked.fid, peeked.cm_data.as_slice()),
        (eq_event::FI_CONNREQ, 5, &b"hi"[..])
    );
    assert_eq!(q.read(false).unwrap_err().code(), errno::FI_EAVAIL);
    let e = q.readerr().unwrap();
    assert_eq!(
        (e.fid, e.err, e.err_data.as_slice()),
        (6, errno::FI_ECONNREFUSED, &b"no"[..])
    );
    let t = Instant::now();
    assert!(q
        .sread(Some(Duration::from_millis(30)), false)
        .unwrap_err()
        .is_again());
    assert!(t.elapsed() >= Duration::from_millis(30));
    let q2 = q.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        q2.write(EqEvent {
            event: eq_event::FI_NOTIFY,
            data: 99,
            ..Default::default()
        });
    });
    assert_eq!(
        q.sread(Some(Duration::from_secs(10)), false).unwrap().data,
        99
    );
    h.join().unwrap();
    let q3 = q.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        q3.signal();
    });
    assert!(
        q.sread(Some(Duration::from_secs(10)), false)
            .unwrap_err()
            .is_again(),
        "signal interrupts sread"
    );
    h.join().unwrap();
    assert!(q.wait_fd().is_some());
    assert_eq!(
        EqCore::new(&EqAttr {
            size: 0,
            wait_obj: 77
        })
        .unwrap_err()
        .code(),
        errno::FI_EINVAL
    );
}
