//! The safe layer's collectives: three channels, one thread each, join a
//! group over shm and over tcp and run every collective, the buffers
//! owned by the operations and handed back with the results; bad input
//! comes back with its buffers; a channel opened without FI_COLLECTIVE
//! joins nothing.

use ofi::consts::*;
use ofi::errno;
use ofi::safe::{Addr, Channel, Collective, Group};
use ofi::Info;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn offer(prov: &str, caps: u64) -> Info {
    let mut h = Info::hints();
    h.caps = caps;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some(prov.into());
    let (node, service, flags) = if prov == "tcp" {
        h.addr_format = addr_format::FI_SOCKADDR_IN;
        (Some("127.0.0.1"), Some("0"), FI_SOURCE)
    } else {
        (None, None, 0)
    };
    let v = ofi::getinfo(FI_VERSION_CURRENT, node, service, flags, Some(&h))
        .unwrap_or_else(|e| panic!("{prov}: getinfo: {e}"));
    v.into_iter().next().expect("an offer")
}

fn u64s(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn from_u64s(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// Member `r` of `n`: every collective, checked.
fn member(ch: &Channel, g: &Group, r: usize, n: usize) {
    let who = |k: usize| g.members()[k];
    let mut op = ch.barrier(g).unwrap();
    op.wait(T).unwrap();
    // Allreduce: sum of [r + 1, 10 r].
    let c = Collective::reduce(
        atomic_op::FI_SUM,
        datatype::FI_UINT64,
        u64s(&[r as u64 + 1, 10 * r as u64]),
    );
    let d = ch.allreduce(g, c).unwrap().wait(T).unwrap();
    let s: u64 = (1..=n as u64).sum();
    assert_eq!(from_u64s(&d.buf.output), [s, 10 * (s - n as u64)]);
    assert_eq!(
        from_u64s(&d.buf.input),
        [r as u64 + 1, 10 * r as u64],
        "the input comes back"
    );
    // Broadcast from rank 1.
    let buf = if r == 1 {
        b"from rank one".to_vec()
    } else {
        vec![0; 13]
    };
    let d = ch.broadcast(g, buf, who(1)).unwrap().wait(T).unwrap();
    assert_eq!(d.buf, b"from rank one");
    // Allgather, alltoall, reduce-scatter (2 u64 per member and block).
    let mine: Vec<u64> = (0..2 * n as u64).map(|k| 100 * r as u64 + k).collect();
    let d = ch
        .allgather(g, Collective::data(datatype::FI_UINT64, u64s(&mine[..2])))
        .unwrap()
        .wait(T)
        .unwrap();
    let want: Vec<u64> = (0..n as u64).flat_map(|j| [100 * j, 100 * j + 1]).collect();
    assert_eq!(from_u64s(&d.buf.output), want);
    let d = ch
        .alltoall(g, Collective::data(datatype::FI_UINT64, u64s(&mine)))
        .unwrap()
        .wait(T)
        .unwrap();
    let want: Vec<u64> = (0..n as u64)
        .flat_map(|j| [100 * j + 2 * r as u64, 100 * j + 2 * r as u64 + 1])
        .collect();
    assert_eq!(from_u64s(&d.buf.output), want);
    let d = ch
        .reduce_scatter(
            g,
            Collective::reduce(atomic_op::FI_SUM, datatype::FI_UINT64, u64s(&mine)),
        )
        .unwrap()
        .wait(T)
        .unwrap();
    let want: Vec<u64> = (0..2)
        .map(|k| (0..n as u64).map(|j| 100 * j + 2 * r as u64 + k).sum())
        .collect();
    assert_eq!(from_u64s(&d.buf.output), want);
    // Reduce, scatter and gather to / from the last rank.
    let root = who(n - 1);
    let d = ch
        .reduce(
            g,
            Collective::reduce(atomic_op::FI_MAX, datatype::FI_UINT64, u64s(&[r as u64])),
            root,
        )
        .unwrap()
        .wait(T)
        .unwrap();
    if r == n - 1 {
        assert_eq!(from_u64s(&d.buf.output), [n as u64 - 1]);
    } else {
        assert!(d.buf.output.is_empty());
    }
    let src: Vec<u64> = (0..n as u64).map(|j| 7 * j).collect();
    let c = Collective {
        datatype: datatype::FI_UINT64,
        op: coll_op::FI_NOOP,
        input: if r == n - 1 { u64s(&src) } else { Vec::new() },
        output: vec![0; 8],
    };
    let d = ch.scatter(g, c, root).unwrap().wait(T).unwrap();
    assert_eq!(from_u64s(&d.buf.output), [7 * r as u64]);
    let d = ch
        .gather(
            g,
            Collective::data(datatype::FI_UINT64, u64s(&[r as u64 * 3])),
            root,
        )
        .unwrap()
        .wait(T)
        .unwrap();
    if r == n - 1 {
        assert_eq!(
            from_u64s(&d.buf.output),
            (0..n as u64).map(|j| 3 * j).collect::<Vec<_>>()
        );
    }
    // Bad input comes back with its buffers.
    let e = ch
        .allreduce(g, Collective::reduce(atomic_op::FI_SUM, 999, vec![1, 2, 3]))
        .unwrap_err();
    assert_eq!(e.error.code(), errno::FI_EINVAL);
    assert_eq!(e.buf.input, [1, 2, 3]);
    let e = ch
        .allreduce(
            g,
            Collective::reduce(atomic_op::FI_BOR, datatype::FI_DOUBLE, vec![0; 8]),
        )
        .unwrap_err();
    assert_eq!(e.error.code(), errno::FI_EOPNOTSUPP, "{}", e.error);
    // Everyone done before anyone leaves.
    ch.barrier(g).unwrap().wait(T).unwrap();
}

fn group_of_three(prov: &str) {
    let info = offer(prov, FI_TAGGED | FI_COLLECTIVE);
    assert!(info.caps & FI_COLLECTIVE != 0);
    let n = 3;
    let chans: Vec<Channel> = (0..n).map(|_| Channel::open(&info).unwrap()).collect();
    let names: Vec<Vec<u8>> = chans.iter().map(|c| c.address().unwrap()).collect();
    let members: Vec<Vec<Addr>> = chans
        .iter()
        .map(|c| names.iter().map(|a| c.insert(a).unwrap()).collect())
        .collect();
    // Nobody closes before every member's last barrier completed: a
    // closing endpoint ends its connections (frames still on their way
    // go with them), and the others would see a member gone.
    let all_done = std::sync::Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = chans
        .into_iter()
        .zip(members)
        .enumerate()
        .map(|(r, (ch, m))| {
            let all_done = all_done.clone();
            std::thread::spawn(move || {
                let g = ch
                    .join(&m, T)
                    .unwrap_or_else(|e| panic!("join at {r}: {e}"));
                assert_eq!((g.rank(), g.size()), (r, n));
                member(&ch, &g, r, n);
                all_done.wait();
                drop(g);
                ch
            })
        })
        .collect();
    for t in threads {
        drop(t.join().expect("a member panicked"));
    }
}

#[test]
fn three_channels_run_every_collective_over_shm() {
    group_of_three("shm");
}

#[test]
fn three_channels_run_every_collective_over_tcp() {
    group_of_three("tcp");
}

#[test]
fn a_channel_without_fi_collective_joins_nothing() {
    let info = offer("shm", FI_TAGGED);
    assert_eq!(info.caps & FI_COLLECTIVE, 0);
    let ch = Channel::open(&info).unwrap();
    let me = ch.insert(&ch.address().unwrap()).unwrap();
    let e = ch.join(&[me], T).unwrap_err();
    assert_eq!(e.code(), errno::FI_ENOSYS);
}
