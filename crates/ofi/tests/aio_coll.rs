//! The async layer's collectives: three channels on one current-thread
//! runtime join a group (each join a future, all awaited together) over
//! shm and over tcp, and run collectives whose futures own their buffers;
//! bad input resolves at once to an error holding the buffers.

use ofi::aio::Channel;
use ofi::consts::*;
use ofi::errno;
use ofi::safe::{Addr, Collective};
use ofi::Info;
use std::time::Duration;

fn offer(prov: &str) -> Info {
    let mut h = Info::hints();
    h.caps = FI_TAGGED | FI_COLLECTIVE;
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

async fn member(ch: &Channel, m: &[Addr], r: usize) {
    let n = m.len();
    let g = ch
        .join(m)
        .await
        .unwrap_or_else(|e| panic!("join at {r}: {e}"));
    assert_eq!((g.rank(), g.size()), (r, n));
    ch.barrier(&g).await.unwrap();
    let c = Collective::reduce(
        atomic_op::FI_SUM,
        datatype::FI_UINT64,
        u64s(&[r as u64 + 1]),
    );
    let d = ch.allreduce(&g, c).await.unwrap();
    assert_eq!(from_u64s(&d.buf.output), [(1..=n as u64).sum::<u64>()]);
    let buf = if r == 2 {
        b"async".to_vec()
    } else {
        vec![0; 5]
    };
    let d = ch.broadcast(&g, buf, m[2]).await.unwrap();
    assert_eq!(d.buf, b"async");
    let d = ch
        .allgather(
            &g,
            Collective::data(datatype::FI_UINT64, u64s(&[10 * r as u64])),
        )
        .await
        .unwrap();
    assert_eq!(
        from_u64s(&d.buf.output),
        (0..n as u64).map(|j| 10 * j).collect::<Vec<_>>()
    );
    // A root that is not a member, and a short scatter input at the root,
    // resolve at once with the buffers.
    let e = ch
        .reduce(
            &g,
            Collective::reduce(atomic_op::FI_SUM, datatype::FI_UINT64, u64s(&[1])),
            Addr(77),
        )
        .await
        .unwrap_err();
    assert_eq!(e.error.code(), errno::FI_EINVAL);
    assert_eq!(e.buf.map(|c| c.input), Some(u64s(&[1])));
    let short = Collective {
        datatype: datatype::FI_UINT64,
        op: coll_op::FI_NOOP,
        input: vec![0; 8],
        output: vec![0; 8],
    };
    let e = ch.scatter(&g, short, m[r]).await.unwrap_err();
    assert_eq!(e.error.code(), errno::FI_EINVAL);
    ch.barrier(&g).await.unwrap();
}

fn three(prov: &str) {
    let info = offer(prov);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let chans: Vec<Channel> = (0..3).map(|_| Channel::open(&info).unwrap()).collect();
            let names: Vec<Vec<u8>> = chans.iter().map(|c| c.address().unwrap()).collect();
            let m: Vec<Vec<Addr>> = chans
                .iter()
                .map(|c| names.iter().map(|a| c.insert(a).unwrap()).collect())
                .collect();
            // Every member's task at once; the channels close only once
            // all are done (a closing endpoint ends its connections).
            let tasks: Vec<_> = chans
                .iter()
                .zip(m)
                .enumerate()
                .map(|(r, (ch, m))| {
                    let ch = ch.clone();
                    tokio::spawn(async move { member(&ch, &m, r).await })
                })
                .collect();
            for t in tasks {
                t.await.expect("a member panicked");
            }
            drop(chans);
        });
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the members finished (or one panicked)");
}

#[test]
fn three_async_channels_run_collectives_over_shm() {
    three("shm");
}

#[test]
fn three_async_channels_run_collectives_over_tcp() {
    three("tcp");
}

#[test]
fn an_async_channel_without_fi_collective_joins_nothing() {
    let mut h = Info::hints();
    h.caps = FI_TAGGED;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .unwrap()
        .remove(0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let ch = Channel::open(&info).unwrap();
        let me = ch.insert(&ch.address().unwrap()).unwrap();
        let e = ch.join(&[me]).await.unwrap_err();
        assert_eq!(e.code(), errno::FI_ENOSYS);
    });
}
