//! One-sided operations between two shm RDM endpoints in one process, on the
//! raw API: a registered region, an RMA write, a read back, a fetch-and-add,
//! a compare-and-swap, and a write that breaks the region's access rights
//! (an error completion at the initiator; the region stays untouched).
//!
//! The target never posts anything: the initiator names the region by its
//! remote key and address. The target's provider checks key, access and
//! bounds and moves the data; with manual progress the target's CQ must be
//! read now and then for that to happen, which `wait_for` does.
//!
//! Run with `cargo run --release -p ofi --example rma_atomic`.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::*;
use std::time::{Duration, Instant};

/// Reads the initiator's CQ (and drives the target's) until `context`
/// completes; returns the error entry if it failed.
fn wait_for(
    cq: &CompletionQueue,
    target_cq: &CompletionQueue,
    context: usize,
) -> std::result::Result<(), CqErrEntry> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut e = [CqTaggedEntry::default(); 1];
        match cq.read(&mut e) {
            Ok(1) if e[0].op_context == context => return Ok(()),
            Ok(_) => {}
            Err(err) if err.is_again() => {}
            Err(err) if err.code() == errno::FI_EAVAIL => {
                let e = cq.readerr().expect("an error entry is available");
                assert_eq!(e.op_context, context);
                return Err(e);
            }
            Err(err) => panic!("cq read: {err}"),
        }
        let _ = target_cq.read(&mut e);
        assert!(
            Instant::now() < deadline,
            "operation {context} did not complete"
        );
    }
}

fn main() -> Result<()> {
    let mut hints = Info::hints();
    hints.caps = FI_RMA | FI_ATOMIC;
    hints.ep_attr.ep_type = ep_type::FI_EP_RDM;
    hints.fabric_attr.prov_name = Some("shm".into());
    let info = getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&hints))?.remove(0);
    let fabric = Fabric::open(&info.fabric_attr)?;
    let domain = fabric.domain(&info)?;
    let av = domain.av(&AvAttr::default())?;
    let (cq_i, cq_t) = (
        domain.cq(&CqAttr::default())?,
        domain.cq(&CqAttr::default())?,
    );
    let open = |cq: &CompletionQueue| -> Result<Endpoint> {
        let ep = domain.endpoint(&info)?;
        ep.bind_cq(cq, FI_TRANSMIT | FI_RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        Ok(ep)
    };
    let (initiator, target) = (open(&cq_i)?, open(&cq_t)?);
    let t = av.insert_one(&target.getname()?)?;

    // The target's region: 4 KiB readable and writable remotely, and a
    // second one that may only be read.
    let mut region = vec![0u8; 4096];
    let mut read_only = vec![0xeeu8; 64];
    // SAFETY: both buffers outlive their registrations (dropped after them).
    let (mr, ro) = unsafe {
        (
            domain.mr_reg(&MrAttr {
                iov: vec![(region.as_mut_ptr() as usize, region.len())],
                access: FI_REMOTE_READ | FI_REMOTE_WRITE,
                requested_key: 1,
                offset: 0,
            })?,
            domain.mr_reg(&MrAttr {
                iov: vec![(read_only.as_mut_ptr() as usize, read_only.len())],
                access: FI_REMOTE_READ,
                requested_key: 2,
                offset: 0,
            })?,
        )
    };
    let virt = info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
    let base = |v: &Vec<u8>| if virt { v.as_ptr() as u64 } else { 0 };
    println!(
        "region key {:#x} at {:#x} ({} addressing)",
        mr.key(),
        base(&region),
        if virt { "virtual" } else { "offset" }
    );

    // Write 1 KiB at offset 512, then read it back.
    let msg: Vec<u8> = (0..1024u32).map(|i| (i * 7) as u8).collect();
    // SAFETY: msg outlives the completion waited for next.
    unsafe { initiator.write(msg.as_ptr(), msg.len(), t, base(&region) + 512, mr.key(), 1)? };
    wait_for(&cq_i, &cq_t, 1).expect("write");
    assert_eq!(&region[512..1536], &msg[..]);
    let mut back = vec![0u8; 1024];
    // SAFETY: back outlives the completion.
    unsafe {
        initiator.read(
            back.as_mut_ptr(),
            back.len(),
            t,
            base(&region) + 512,
            mr.key(),
            2,
        )?
    };
    wait_for(&cq_i, &cq_t, 2).expect("read");
    assert_eq!(back, msg);
    println!("wrote and read back {} bytes", msg.len());

    // Fetch-and-add and compare-and-swap on the first 8 bytes.
    let (add, mut old) = (5u64.to_ne_bytes(), [0u8; 8]);
    for i in 0..3 {
        // SAFETY: operand and result outlive the completion.
        unsafe {
            initiator.fetch_atomic(
                add.as_ptr(),
                1,
                old.as_mut_ptr(),
                t,
                base(&region),
                mr.key(),
                datatype::FI_UINT64,
                atomic_op::FI_SUM,
                10 + i,
            )?
        };
        wait_for(&cq_i, &cq_t, 10 + i).expect("fetch-add");
        println!("fetch-add {i}: old value {}", u64::from_ne_bytes(old));
    }
    let (swap, cmp) = (100u64.to_ne_bytes(), 15u64.to_ne_bytes());
    // SAFETY: swap, cmp and old are 8-byte locals (one FI_UINT64 each) that
    // outlive the completion, which wait_for awaits before old is read.
    unsafe {
        initiator.compare_atomic(
            swap.as_ptr(),
            1,
            cmp.as_ptr(),
            old.as_mut_ptr(),
            t,
            base(&region),
            mr.key(),
            datatype::FI_UINT64,
            atomic_op::FI_CSWAP,
            20,
        )?
    };
    wait_for(&cq_i, &cq_t, 20).expect("cswap");
    assert_eq!(u64::from_ne_bytes(old), 15);
    assert_eq!(u64::from_ne_bytes(region[..8].try_into().unwrap()), 100);
    println!("compare-and-swap 15 -> 100: done");

    // A write to the read-only region fails at the initiator.
    // SAFETY: msg outlives the completion.
    unsafe { initiator.write(msg.as_ptr(), 64, t, base(&read_only), ro.key(), 30)? };
    let err = wait_for(&cq_i, &cq_t, 30).expect_err("the write must be refused");
    assert_eq!(err.err, errno::FI_EACCES);
    assert!(read_only.iter().all(|&b| b == 0xee));
    println!(
        "write to a read-only region: {} (region untouched)",
        ofi::error::strerror(err.err)
    );

    drop((mr, ro));
    Ok(())
}
