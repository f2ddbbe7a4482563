//! Collectives (`fi_collective(3)`) over every offer with FI_COLLECTIVE:
//! groups of endpoints of one domain in this process (one thread drives
//! them all), joined from AV sets; every operation against computed
//! results; an application's wildcard tagged receive never takes a
//! collective's frame; bit 63 of the tag is the collectives'.
#![allow(unsafe_code)]
// The members run in lockstep over parallel arrays (buffers, results, groups),
// indexed by member.
#![allow(clippy::needless_range_loop)]

use ofi::consts::atomic_op::*;
use ofi::consts::coll_op::*;
use ofi::consts::datatype::*;
use ofi::consts::*;
use ofi::errno;
use ofi::{
    AddressVector, AvSet, AvSetAttr, CompletionQueue, CqTaggedEntry, Domain, Endpoint, EqAttr,
    EventQueue, Fabric, Info, Multicast,
};
use ofi_conformance::*;
use std::time::Instant;

/// `n` enabled endpoints of one domain, each with its CQ and EQ, sharing
/// one AV in which endpoint `i` is fi_addr `i`.
struct Members {
    // Declared first: dropped before what they are bound to.
    groups: Vec<Multicast>,
    eps: Vec<Endpoint>,
    cqs: Vec<CompletionQueue>,
    eqs: Vec<EventQueue>,
    av: AddressVector,
    _domain: Domain,
    _fabric: Fabric,
}

/// A context for endpoint `i`'s operation `k`.
fn ctx(i: usize, k: usize) -> usize {
    0x1000 * (i + 1) + k
}

/// The offer asked for again with FI_COLLECTIVE in the hints (the core
/// offers collectives to applications that ask, as libfabric does): every
/// RDM offer with tagged sends and receives must give one.
fn with_collectives(info: &Info) -> Result<Info, Skip> {
    require(info, FI_TAGGED | FI_SEND | FI_RECV)?;
    require_rdm(info, "collectives run on RDM endpoints")?;
    assert_eq!(
        info.caps & FI_COLLECTIVE,
        0,
        "FI_COLLECTIVE offered to hints that did not ask for it"
    );
    let mut h = info.clone();
    h.caps |= FI_COLLECTIVE;
    let got = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .unwrap_or_else(|e| panic!("getinfo with FI_COLLECTIVE: {e}"));
    let o = got
        .into_iter()
        .find(|o| o.caps & FI_COLLECTIVE != 0)
        .expect("an offer with FI_COLLECTIVE");
    assert_eq!(o.provider(), info.provider());
    Ok(o)
}

impl Members {
    fn open(info: &Info, n: usize) -> Result<Members, Skip> {
        let info = &with_collectives(info)?;
        let (fabric, domain, av) = open_domain(info);
        let av = av.expect("RDM offers have an AV");
        let mut m = Members {
            groups: Vec::new(),
            eps: Vec::new(),
            cqs: Vec::new(),
            eqs: Vec::new(),
            av,
            _domain: domain,
            _fabric: fabric,
        };
        for i in 0..n {
            let cq = tagged_cq(&m._domain, wait_obj::FI_WAIT_UNSPEC);
            let eq = m._fabric.eq(&EqAttr::default()).expect("eq open");
            let ep = m
                ._domain
                .endpoint_with_context(info, 0x100 + i)
                .expect("endpoint");
            ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
            ep.bind_av(&m.av).expect("bind av");
            ep.bind_eq(&eq).expect("bind eq");
            ep.enable().expect("enable");
            m.cqs.push(cq);
            m.eqs.push(eq);
            m.eps.push(ep);
        }
        for (i, ep) in m.eps.iter().enumerate() {
            assert_eq!(insert(&m.av, ep), i as u64, "fi_addr of endpoint {i}");
        }
        Ok(m)
    }

    /// Every member joins the group of `set` (each with the set's
    /// address); waits for every FI_JOIN_COMPLETE.
    fn join(&mut self, set: &AvSet, who: &[usize]) -> Vec<u64> {
        let base = self.groups.len();
        for &i in who {
            let g = self.eps[i]
                .join_collective(set.addr(), set, FI_COLLECTIVE, 0x5000 + i, 0x6000 + i)
                .unwrap_or_else(|e| panic!("join at {i}: {e}"));
            self.groups.push(g);
        }
        let deadline = Instant::now() + TIMEOUT;
        let mut done = vec![false; who.len()];
        while !done.iter().all(|d| *d) {
            assert!(
                Instant::now() < deadline,
                "joins did not complete: {done:?}"
            );
            for (k, &i) in who.iter().enumerate() {
                if done[k] {
                    continue;
                }
                match self.eqs[i].read() {
                    Ok(ev) => {
                        assert_eq!(ev.event, eq_event::FI_JOIN_COMPLETE, "event at {i}");
                        assert_eq!((ev.fid, ev.context), (0x5000 + i, 0x6000 + i));
                        done[k] = true;
                    }
                    Err(e) if e.is_again() => {}
                    Err(e) => panic!("join at {i}: {e} ({:?})", self.eqs[i].readerr()),
                }
                // The others' progress.
                for c in &self.cqs {
                    let _ = c.read::<CqTaggedEntry>(&mut []);
                }
            }
        }
        self.groups[base..].iter().map(Multicast::fi_addr).collect()
    }

    /// Reads every member's CQ until each of `who` has its `want`
    /// completions (successes), which are returned.
    fn wait(&self, who: &[usize], want: usize) -> Vec<Vec<CqTaggedEntry>> {
        let deadline = Instant::now() + TIMEOUT;
        let mut got: Vec<Vec<CqTaggedEntry>> = vec![Vec::new(); who.len()];
        while got.iter().any(|g| g.len() < want) {
            assert!(
                Instant::now() < deadline,
                "collectives did not complete: {:?}",
                got.iter().map(Vec::len).collect::<Vec<_>>()
            );
            for (k, &i) in who.iter().enumerate() {
                let mut out = Completions::default();
                poll_cq(&self.cqs[i], &mut out);
                assert!(out.err.is_empty(), "member {i}: {}", errs(&out));
                got[k].extend(out.ok);
            }
        }
        got
    }
}

fn set_of(av: &AddressVector, n: usize) -> AvSet {
    av.av_set(&AvSetAttr {
        count: n,
        start_addr: 0,
        end_addr: n as u64 - 1,
        stride: 1,
        ..Default::default()
    })
    .expect("av set")
}

conformance!(
    /// Groups of one to four endpoints join and run every collective:
    /// barrier, broadcast from every root, allreduce, allgather,
    /// reduce-scatter, alltoall, reduce, scatter and gather, each
    /// completing with the caller's context and FI_COLLECTIVE.
    fn every_collective_in_groups_of_one_to_four(info) {
        for n in 1..=4usize {
            let mut m = Members::open(info, n)?;
            let set = set_of(&m.av, n);
            let all: Vec<usize> = (0..n).collect();
            let g = m.join(&set, &all);
            // Barrier.
            for i in 0..n {
                m.eps[i].barrier(g[i], 0, ctx(i, 1)).unwrap();
            }
            for (i, c) in m.wait(&all, 1).iter().enumerate() {
                assert_eq!(c[0].op_context, ctx(i, 1));
                assert!(c[0].flags & FI_COLLECTIVE != 0, "flags {:#x}", c[0].flags);
            }
            // Allreduce (sum of u64, 3 elements).
            let data: Vec<[u64; 3]> = (0..n as u64).map(|i| [i + 1, 10 * i, 7]).collect();
            let mut res = vec![[0u64; 3]; n];
            for i in 0..n {
                // SAFETY: data and res outlive the operation (waited for below).
                unsafe {
                    m.eps[i].allreduce(
                        data[i].as_ptr().cast(),
                        3,
                        res[i].as_mut_ptr().cast(),
                        g[i],
                        FI_UINT64,
                        FI_SUM,
                        0,
                        ctx(i, 2),
                    )
                }
                .unwrap();
            }
            m.wait(&all, 1);
            let want = data.iter().fold([0u64; 3], |a, d| [a[0] + d[0], a[1] + d[1], a[2] + d[2]]);
            assert!(res.iter().all(|r| *r == want), "{res:?} != {want:?}");
            // Broadcast from every root, 4 KiB.
            for root in 0..n {
                let mut bufs: Vec<Vec<u8>> = (0..n)
                    .map(|i| if i == root { pattern(root as u64, 4096) } else { vec![0; 4096] })
                    .collect();
                for i in 0..n {
                    // SAFETY: bufs outlive the operation.
                    unsafe {
                        m.eps[i].broadcast(bufs[i].as_mut_ptr(), 4096, g[i], root as u64, FI_UINT8, 0, ctx(i, 3))
                    }
                    .unwrap();
                }
                m.wait(&all, 1);
                for b in &bufs {
                    assert_bytes_eq(b, &pattern(root as u64, 4096), "broadcast");
                }
            }
            // Allgather, alltoall, reduce-scatter (2 u32 per member).
            let mine: Vec<Vec<u32>> = (0..n).map(|i| (0..2 * n as u32).map(|k| 100 * i as u32 + k).collect()).collect();
            let mut gath = vec![vec![0u32; 2 * n]; n];
            let mut a2a = vec![vec![0u32; 2 * n]; n];
            let mut rs = vec![vec![0u32; 2]; n];
            for i in 0..n {
                // SAFETY: the buffers outlive the operations.
                unsafe {
                    m.eps[i].allgather(mine[i].as_ptr().cast(), 2, gath[i].as_mut_ptr().cast(), g[i], FI_UINT32, 0, ctx(i, 4)).unwrap();
                    m.eps[i].alltoall(mine[i].as_ptr().cast(), 2, a2a[i].as_mut_ptr().cast(), g[i], FI_UINT32, 0, ctx(i, 5)).unwrap();
                    m.eps[i].reduce_scatter(mine[i].as_ptr().cast(), 2, rs[i].as_mut_ptr().cast(), g[i], FI_UINT32, FI_SUM, 0, ctx(i, 6)).unwrap();
                }
            }
            m.wait(&all, 3);
            for i in 0..n {
                let want: Vec<u32> = (0..n).flat_map(|j| mine[j][..2].to_vec()).collect();
                assert_eq!(gath[i], want, "allgather at {i}");
                let want: Vec<u32> = (0..n).flat_map(|j| mine[j][2 * i..2 * i + 2].to_vec()).collect();
                assert_eq!(a2a[i], want, "alltoall at {i}");
                let want: Vec<u32> = (0..2).map(|k| (0..n).map(|j| mine[j][2 * i + k]).sum()).collect();
                assert_eq!(rs[i], want, "reduce_scatter at {i}");
            }
            // Reduce, scatter, gather to / from the last member.
            let root = n - 1;
            let mut red = vec![[0i32; 2]; n];
            let mut sc = vec![[0i32; 2]; n];
            let mut ga = vec![vec![0i32; 2 * n]; n];
            let src: Vec<i32> = (0..2 * n as i32).collect();
            let ones: Vec<[i32; 2]> = (0..n as i32).map(|i| [i, -i]).collect();
            for i in 0..n {
                // SAFETY: the buffers outlive the operations.
                unsafe {
                    m.eps[i].rooted(FI_REDUCE, ones[i].as_ptr().cast(), 2, red[i].as_mut_ptr().cast(), g[i], root as u64, FI_INT32, FI_SUM, 0, ctx(i, 7)).unwrap();
                    m.eps[i].rooted(FI_SCATTER, src.as_ptr().cast(), 2, sc[i].as_mut_ptr().cast(), g[i], root as u64, FI_INT32, FI_NOOP, 0, ctx(i, 8)).unwrap();
                    m.eps[i].rooted(FI_GATHER, ones[i].as_ptr().cast(), 2, ga[i].as_mut_ptr().cast(), g[i], root as u64, FI_INT32, FI_NOOP, 0, ctx(i, 9)).unwrap();
                }
            }
            m.wait(&all, 3);
            let s: i32 = (0..n as i32).sum();
            assert_eq!(red[root], [s, -s]);
            for i in 0..n {
                assert_eq!(sc[i], [2 * i as i32, 2 * i as i32 + 1], "scatter at {i}");
            }
            let want: Vec<i32> = ones.iter().flatten().copied().collect();
            assert_eq!(ga[root], want);
        }
        Ok(())
    }
);

conformance!(
    /// An application's tagged receive that ignores every tag bit, posted
    /// before the collectives run, takes none of their frames, and still
    /// takes the application's message afterwards; tags with bit 63 set
    /// are refused on an endpoint opened with FI_COLLECTIVE.
    fn wildcard_receives_never_take_collective_frames(info) {
        let n = 3;
        let mut m = Members::open(info, n)?;
        let mut wild = vec![vec![0u8; 64]; n];
        for i in 0..n {
            // SAFETY: wild outlives the receive (completed or canceled below).
            unsafe { m.eps[i].trecv(wild[i].as_mut_ptr(), 64, FI_ADDR_UNSPEC, 0, u64::MAX, ctx(i, 0)) }
                .unwrap();
        }
        let set = set_of(&m.av, n);
        let all: Vec<usize> = (0..n).collect();
        let g = m.join(&set, &all);
        for round in 0..3 {
            let one = [1u64 + round];
            let mut out = vec![[0u64]; n];
            for i in 0..n {
                m.eps[i].barrier(g[i], 0, ctx(i, 1)).unwrap();
                // SAFETY: one and out outlive the operation.
                unsafe { m.eps[i].allreduce(one.as_ptr().cast(), 1, out[i].as_mut_ptr().cast(), g[i], FI_UINT64, FI_SUM, 0, ctx(i, 2)) }
                    .unwrap();
            }
            for (i, c) in m.wait(&all, 2).iter().enumerate() {
                assert!(c.iter().all(|e| e.op_context != ctx(i, 0)), "a wildcard receive took a collective frame at {i}");
            }
            assert!(out.iter().all(|o| o[0] == n as u64 * (1 + round)));
        }
        // The application's own message still reaches the wildcard receive.
        let msg = b"application".to_vec();
        // SAFETY: msg outlives the send.
        unsafe { m.eps[0].tsend(msg.as_ptr(), msg.len(), 1, 0x77, ctx(0, 9)) }.unwrap();
        let c = wait_for(&m.cqs[1], 1, TIMEOUT);
        assert_eq!(c.ok.len(), 1, "{}", errs(&c));
        assert_eq!(c.ok[0].op_context, ctx(1, 0));
        assert_eq!(c.ok[0].tag, 0x77);
        assert_bytes_eq(&wild[1][..msg.len()], &msg, "application message");
        wait_for(&m.cqs[0], 1, TIMEOUT);
        // Bit 63 is the collectives'.
        // SAFETY: msg outlives the call (refused).
        let e = unsafe { m.eps[0].tsend(msg.as_ptr(), msg.len(), 1, 1 << 63, 0) }.unwrap_err();
        assert_eq!(e.code(), errno::FI_EINVAL, "{e}");
        let e = m.eps[0].tinject(&msg, 1, (1 << 63) | 5).unwrap_err();
        assert_eq!(e.code(), errno::FI_EINVAL, "{e}");
        let mut b = [0u8; 8];
        // SAFETY: refused: nothing is posted.
        let e = unsafe { m.eps[0].trecv(b.as_mut_ptr(), 8, FI_ADDR_UNSPEC, 1 << 63, 0, 0) }.unwrap_err();
        assert_eq!(e.code(), errno::FI_EINVAL, "{e}");
        for (i, ep) in m.eps.iter().enumerate() {
            if i != 1 {
                ep.cancel(ctx(i, 0)).unwrap();
            }
        }
        drop(m);
        drop(wild);
        Ok(())
    }
);

conformance!(
    /// An endpoint of an offer whose hints did not ask for FI_COLLECTIVE
    /// keeps all 64 tag bits (a message tagged with bit 63 set reaches a
    /// receive that names it) and joins no collective group.
    fn endpoints_without_fi_collective_keep_every_tag_bit(info) {
        require(info, FI_TAGGED | FI_SEND | FI_RECV)?;
        require_rdm(info, "collectives run on RDM endpoints")?;
        assert_eq!(info.caps & FI_COLLECTIVE, 0, "offered without being asked for");
        let (_fabric, domain, av) = open_domain(info);
        let av = av.expect("RDM offers have an AV");
        let cq = tagged_cq(&domain, wait_obj::FI_WAIT_UNSPEC);
        let ep = open_endpoint(&domain, info, &cq, &av);
        let me = insert(&av, &ep);
        let tag = (1u64 << 63) | 5;
        let msg = pattern(63, 8);
        let mut buf = [0u8; 8];
        // SAFETY: buf and msg outlive the operations (waited for below).
        unsafe {
            ep.trecv(buf.as_mut_ptr(), 8, FI_ADDR_UNSPEC, tag, 0, ctx(0, 1)).unwrap();
            ep.tsend(msg.as_ptr(), 8, me, tag, ctx(0, 2)).unwrap();
        }
        let c = wait_for(&cq, 2, TIMEOUT);
        assert_eq!(c.ok.len(), 2, "{}", errs(&c));
        let r = c.ok.iter().find(|e| e.op_context == ctx(0, 1)).expect("the receive");
        assert_eq!(r.tag, tag);
        assert_bytes_eq(&buf, &msg, "bit-63 message");
        let set = set_of(&av, 1);
        let e = ep.join_collective(set.addr(), &set, 0, 0, 0).unwrap_err();
        assert_eq!(e.code(), errno::FI_ENOSYS, "{e}");
        drop(set);
        Ok(())
    }
);
