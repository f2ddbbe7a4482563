//! One-sided operations on the safe layer between two shm channels in one
//! process: the target exposes a [`Region`] that owns its memory, the
//! initiator writes, reads back and counts with fetch-and-add, a write to
//! a read-only region fails with its buffer, and the target takes its bytes
//! back by unregistering.
//!
//! No `unsafe` anywhere: buffers move into each operation and come back
//! from its handle.
//!
//! Run with `cargo run --release -p ofi --example safe_rma`.

use ofi::safe::{Channel, Done, Op, OpError, Region};
use ofi::{Caps, EpType, ErrorKind, Hints, MrAccess, Result};
use std::time::{Duration, Instant};

/// Drives both channels until the initiator's operation finishes (the
/// target's provider serves the request while the target is polled).
fn finish<B: Send + 'static>(
    init: &Channel,
    target: &Channel,
    op: &mut Op<'_, B>,
) -> std::result::Result<Done<B>, OpError<B>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        target.poll()?;
        while let Some(w) = target.remote_write() {
            println!("target: {} bytes written with data {:#x}", w.len, w.data);
        }
        init.poll()?;
        if let Some(r) = op.check() {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "operation {:?} did not finish",
            op.id()
        );
    }
}

/// Unregisters `r` and returns its bytes, driving the target meanwhile.
fn take_back(target: &Channel, mut r: Region) -> Result<Vec<u8>> {
    loop {
        match r.into_vec() {
            Ok(v) => return Ok(v),
            Err(back) => r = back,
        }
        target.poll()?;
    }
}

fn main() -> Result<()> {
    let info = Hints::new()
        .caps(Caps::MSG | Caps::RMA | Caps::ATOMIC)
        .ep_type(EpType::Rdm)
        .provider("shm")
        .first()?;
    let (init, target) = (Channel::open(&info)?, Channel::open(&info)?);
    let to_target = init.insert(&target.address()?)?;

    let region = target.register(
        vec![0; 4096],
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    )?;
    let read_only = target.register(vec![0xee; 64], MrAccess::REMOTE_READ)?;
    let key = region.key();

    let mut op = init.writedata(
        b"hello".to_vec(),
        0x5afe,
        to_target,
        region.remote_addr(16),
        key,
    )?;
    let done = finish(&init, &target, &mut op)?;
    println!("wrote {:?}", String::from_utf8_lossy(&done.buf));

    let mut op = init.read(vec![0; 5], to_target, region.remote_addr(16), key)?;
    let done = finish(&init, &target, &mut op)?;
    assert_eq!(done.buf, b"hello");
    println!("read back {:?}", String::from_utf8_lossy(&done.buf));

    for _ in 0..3 {
        let mut op = init.fetch_add_u64(to_target, region.remote_addr(0), key, 10)?;
        let done = finish(&init, &target, &mut op)?;
        println!("fetch_add 10: the counter was {:?}", done.fetched_u64());
    }

    let mut op = init.write(
        vec![1; 8],
        to_target,
        read_only.remote_addr(0),
        read_only.key(),
    )?;
    let e = finish(&init, &target, &mut op).expect_err("a read-only region refuses writes");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied);
    println!(
        "write to a read-only region: {} ({} bytes back)",
        e.error,
        e.buf.map_or(0, |b| b.len())
    );

    let bytes = take_back(&target, region)?;
    let counter = u64::from_ne_bytes(bytes[..8].try_into().expect("8 bytes"));
    assert_eq!((counter, &bytes[16..21]), (30, &b"hello"[..]));
    println!(
        "target's bytes: counter {counter}, text {:?}",
        String::from_utf8_lossy(&bytes[16..21])
    );
    assert_eq!(take_back(&target, read_only)?, vec![0xee; 64]);
    Ok(())
}
