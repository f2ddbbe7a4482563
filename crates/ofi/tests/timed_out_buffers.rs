//! An operation that fails with FI_ETIMEDOUT hands no buffer back: its
//! peer was declared dead by silence but may be alive, and a late answer
//! (shm writes read answers across processes) could still land in the
//! buffer. Here the target never polls; the initiator's read times out
//! after FI_SHM_PEER_TIMEOUT_MS and its error carries no buffer (it used
//! to carry the buffer, which the target's answer could later overwrite).
//! The async layer's futures follow the same rule (they used to resolve
//! to the buffer whatever the error). Its own process: the environment is
//! process-wide.

use ofi::consts::*;
use ofi::errno;
use ofi::safe::Channel;
use ofi::{Info, MrAccess};
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

fn shm_rma() -> Info {
    std::env::set_var("FI_SHM_PEER_TIMEOUT_MS", "200");
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_RMA;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .expect("shm offer")
        .remove(0)
}

#[test]
fn a_timed_out_read_keeps_its_buffer() {
    let info = shm_rma();
    let init = Channel::open(&info).expect("initiator");
    let target = Channel::open(&info).expect("target");
    let to_target = init.insert(&target.address().unwrap()).unwrap();
    let region = target
        .register(vec![7u8; 1 << 16], MrAccess::REMOTE_READ)
        .expect("region");
    let mut op = init
        .read(
            vec![0u8; 1 << 16],
            to_target,
            region.remote_addr(0),
            region.key(),
        )
        .expect("read posted");
    // The target never polls: its ring keeps the request unread.
    let t0 = Instant::now();
    let Err(e) = op.wait(Duration::from_secs(20)) else {
        panic!("the read must fail once the target is declared dead by silence");
    };
    assert_eq!(e.error.code(), errno::FI_ETIMEDOUT, "{}", e.error);
    // The provider's failure, not the wait running out (it too reports
    // FI_ETIMEDOUT, with the operation still in flight).
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "failed after {:?}: the wait ran out",
        t0.elapsed()
    );
    assert!(
        op.check()
            .is_some_and(|r| r.is_err_and(|e| e.error.code() == errno::FI_EALREADY)),
        "the operation ended: its result was taken"
    );
    assert!(
        e.buf.is_none(),
        "the buffer of a timed-out read was handed back"
    );
    drop(region);
}

#[test]
fn a_timed_out_async_read_keeps_its_buffer() {
    let info = shm_rma();
    // Busy polling needs no runtime: the future is polled by hand.
    let init = ofi::aio::Channel::open_busy(&info).expect("initiator");
    let target = ofi::aio::Channel::open_busy(&info).expect("target");
    let to_target = init.insert(&target.address().unwrap()).unwrap();
    let region = target
        .register(vec![7u8; 1 << 16], MrAccess::REMOTE_READ)
        .expect("region");
    // The target is never polled: its ring keeps the request unread.
    let t0 = Instant::now();
    let mut read = std::pin::pin!(init.read(
        vec![0u8; 1 << 16],
        to_target,
        region.remote_addr(0),
        region.key(),
    ));
    let mut cx = Context::from_waker(Waker::noop());
    let r = loop {
        if let Poll::Ready(r) = read.as_mut().poll(&mut cx) {
            break r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the read must fail once the target is declared dead by silence"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let Err(e) = r else {
        panic!("the read completed with an unpolled target");
    };
    assert_eq!(e.error.code(), errno::FI_ETIMEDOUT, "{}", e.error);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert!(
        e.buf.is_none(),
        "the buffer of a timed-out async read was handed back"
    );
    drop(region);
}
