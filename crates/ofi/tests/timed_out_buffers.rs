//! An operation that fails with FI_ETIMEDOUT hands no buffer back: its
//! peer was declared dead by silence but may be alive, and a late answer
//! (shm writes read answers across processes) could still land in the
//! buffer. Here the target never polls; the initiator's read times out
//! after FI_SHM_PEER_TIMEOUT_MS and its error carries no buffer (it used
//! to carry the buffer, which the target's answer could later overwrite).
//! Its own process: the environment is process-wide.

use ofi::consts::*;
use ofi::errno;
use ofi::safe::Channel;
use ofi::{Info, MrAccess};
use std::time::Duration;

#[test]
fn a_timed_out_read_keeps_its_buffer() {
    std::env::set_var("FI_SHM_PEER_TIMEOUT_MS", "200");
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_RMA;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .expect("shm offer")
        .remove(0);
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
    let t0 = std::time::Instant::now();
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
