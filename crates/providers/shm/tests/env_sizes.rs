//! fi_shm(7)'s FI_SHM_TX_SIZE and FI_SHM_RX_SIZE: the context sizes the shm
//! offer advertises; 0 is refused naming the variable. One test (one
//! process): the environment is process-wide.

mod common;
use common::ofi;
use ofi::consts::*;
use ofi::*;

fn shm_offer() -> ofi::Result<Info> {
    let mut h = Info::hints();
    h.fabric_attr.prov_name = Some("shm".into());
    Ok(ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))?.remove(0))
}

#[test]
fn shm_context_sizes_follow_the_environment() {
    let default = shm_offer().unwrap();
    assert_eq!((default.tx_attr.size, default.rx_attr.size), (1024, 1024));
    std::env::set_var("FI_SHM_TX_SIZE", "100");
    std::env::set_var("FI_SHM_RX_SIZE", "200");
    let o = shm_offer().unwrap();
    assert_eq!((o.tx_attr.size, o.rx_attr.size), (100, 200));
    std::env::set_var("FI_SHM_RX_SIZE", "0");
    let e = shm_offer().unwrap_err();
    assert_eq!(e.code(), errno::FI_EINVAL);
    assert!(e.to_string().contains("FI_SHM_RX_SIZE"), "{e}");
}
