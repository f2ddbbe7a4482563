//! One-sided operations on the safe layer between two shm channels in one
//! process: the target exposes a [`Region`] that owns its memory, the
//! initiator writes, reads back and counts with fetch-and-add, a write to
//! a read-only region fails with its buffer, and the target takes its bytes
//! back by unregistering.
//!
//! No `unsafe` anywhere: buffers move into each operation and come back in
//! its completion.
//!
//! Run with `cargo run --release -p ofi --example safe_rma`.

use ofi::consts::*;
use ofi::safe::{Channel, Completion, OpId, Region};
use ofi::{Info, Result};
use std::time::{Duration, Instant};

/// Drives both channels until the initiator completes `id` (the target's
/// provider serves the request while the target is polled).
fn finish(init: &Channel, target: &Channel, id: OpId) -> Completion {
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    loop {
        target.poll(&mut theirs).expect("target poll");
        for c in theirs.drain(..) {
            if let Completion::RemoteWrite { len, data, .. } = c {
                println!("target: {len} bytes written with data {data:#x}");
            }
        }
        init.poll(&mut mine).expect("initiator poll");
        if let Some(i) = mine.iter().position(|c| match c {
            Completion::Written { id: x, .. }
            | Completion::Read { id: x, .. }
            | Completion::Atomic { id: x, .. }
            | Completion::Failed { id: x, .. } => *x == id,
            _ => false,
        }) {
            return mine.swap_remove(i);
        }
        assert!(Instant::now() < deadline, "operation {id:?} did not finish");
    }
}

/// Unregisters `r` and returns its bytes, driving the target meanwhile.
fn take_back(target: &Channel, mut r: Region) -> Vec<u8> {
    loop {
        match r.into_vec() {
            Ok(v) => return v,
            Err(back) => r = back,
        }
        target.poll(&mut Vec::new()).expect("target poll");
    }
}

fn main() -> Result<()> {
    let mut hints = Info::hints();
    hints.caps = FI_MSG | FI_RMA | FI_ATOMIC;
    hints.ep_attr.ep_type = ep_type::FI_EP_RDM;
    hints.fabric_attr.prov_name = Some("shm".into());
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&hints))?.remove(0);
    let (init, target) = (Channel::open(&info)?, Channel::open(&info)?);
    let to_target = init.insert(&target.address()?)?;

    let region = target
        .register(vec![0; 4096], FI_REMOTE_READ | FI_REMOTE_WRITE)
        .map_err(|(_, e)| e)?;
    let read_only = target
        .register(vec![0xee; 64], FI_REMOTE_READ)
        .map_err(|(_, e)| e)?;
    let key = region.key();

    let id = init
        .writedata(
            b"hello".to_vec(),
            0x5afe,
            to_target,
            region.remote_addr(16),
            key,
        )
        .map_err(|(_, e)| e)?;
    if let Completion::Written { buf, .. } = finish(&init, &target, id) {
        println!("wrote {:?}", String::from_utf8_lossy(&buf));
    }

    let id = init
        .read(vec![0; 5], to_target, region.remote_addr(16), key)
        .map_err(|(_, e)| e)?;
    if let Completion::Read { buf, .. } = finish(&init, &target, id) {
        assert_eq!(buf, b"hello");
        println!("read back {:?}", String::from_utf8_lossy(&buf));
    }

    for _ in 0..3 {
        let id = init.fetch_add_u64(to_target, region.remote_addr(0), key, 10)?;
        let c = finish(&init, &target, id);
        println!("fetch_add 10: the counter was {:?}", c.fetched_u64());
    }

    let id = init
        .write(
            vec![1; 8],
            to_target,
            read_only.remote_addr(0),
            read_only.key(),
        )
        .map_err(|(_, e)| e)?;
    if let Completion::Failed { buf, error, .. } = finish(&init, &target, id) {
        assert_eq!(error.code(), ofi::errno::FI_EACCES);
        println!(
            "write to a read-only region: {error} ({} bytes back)",
            buf.len()
        );
    }

    let bytes = take_back(&target, region);
    let counter = u64::from_ne_bytes(bytes[..8].try_into().expect("8 bytes"));
    assert_eq!((counter, &bytes[16..21]), (30, &b"hello"[..]));
    println!(
        "target's bytes: counter {counter}, text {:?}",
        String::from_utf8_lossy(&bytes[16..21])
    );
    assert_eq!(take_back(&target, read_only), vec![0xee; 64]);
    Ok(())
}
