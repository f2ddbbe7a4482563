//! Several initiator processes hit one target word with fetch-adds and
//! compare-and-swaps over shm: every add lands exactly once, every fetched
//! value is distinct (atomicity), and the target ends at the exact sum.
//!
//! The test re-executes its own binary as the initiators (environment
//! variable `OFI_ATOMIC_CHILD`), passing the target's address and key.
#![allow(unsafe_code)]

mod common;
use common::ofi;

use ofi::consts::*;
use ofi::{AddressVector, AvAttr, CqAttr, CqTaggedEntry, Endpoint, Info, MrAttr};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "OFI_ATOMIC_CHILD";
const PROCS: usize = 3;
const ADDS: u64 = 2000;

fn shm_info() -> Info {
    let mut h = Info::hints();
    h.caps = FI_ATOMIC;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .expect("shm offers FI_ATOMIC")
        .remove(0)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn wait_one(cq: &ofi::CompletionQueue, ep: &Endpoint) {
    let mut e = [CqTaggedEntry::default(); 1];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match cq.read(&mut e) {
            Ok(1) => return,
            Err(err) if !err.is_again() => {
                panic!("initiator cq: {err}: {:?}", cq.readerr())
            }
            _ => {}
        }
        ep.progress();
        assert!(Instant::now() < deadline, "atomic never completed");
    }
}

/// One initiator process: `ADDS` fetch-adds of 1, then prints the fetched
/// values' checksum so the parent can check they were all distinct.
fn child(spec: &str) {
    let mut it = spec.split(':');
    let name = unhex(it.next().unwrap());
    let addr: u64 = it.next().unwrap().parse().unwrap();
    let key: u64 = it.next().unwrap().parse().unwrap();
    let info = shm_info();
    let fabric = ofi::Fabric::open(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::default()).unwrap();
    let av: AddressVector = domain.av(&AvAttr::default()).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    let t = av.insert_one(&name).unwrap();
    let one = 1u64.to_ne_bytes();
    let mut old = [0u8; 8];
    let mut seen = Vec::with_capacity(ADDS as usize);
    for i in 0..ADDS {
        loop {
            // SAFETY: operand and result outlive the completion wait below.
            let r = unsafe {
                ep.fetch_atomic(
                    one.as_ptr(),
                    1,
                    old.as_mut_ptr(),
                    t,
                    addr,
                    key,
                    datatype::FI_UINT64,
                    atomic_op::FI_SUM,
                    i as usize,
                )
            };
            match r {
                Ok(()) => break,
                Err(e) if e.is_again() => ep.progress(),
                Err(e) => panic!("fetch_atomic: {e}"),
            }
        }
        wait_one(&cq, &ep);
        seen.push(u64::from_ne_bytes(old));
    }
    // Fetched values of one initiator strictly increase.
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "fetched values went backwards"
    );
    println!(
        "fetched {}",
        seen.iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
}

#[test]
fn fetch_adds_from_several_processes_are_atomic() {
    if let Ok(spec) = std::env::var(CHILD) {
        child(&spec);
        return;
    }
    let info = shm_info();
    let fabric = ofi::Fabric::open(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain.cq(&CqAttr::default()).unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let ep = domain.endpoint(&info).unwrap();
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    let mut word = Box::new([0u64; 1]);
    let base = word.as_mut_ptr() as usize;
    // SAFETY: `word` outlives the registration (dropped after `mr`).
    let mr = unsafe {
        domain.mr_reg(&MrAttr {
            iov: vec![(base, 8)],
            access: FI_REMOTE_READ | FI_REMOTE_WRITE,
            requested_key: 0x77,
            offset: 0,
        })
    }
    .unwrap();
    let virt = info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
    let addr = if virt { base as u64 } else { 0 };
    let spec = format!("{}:{addr}:{}", hex(&ep.getname().unwrap()), mr.key());
    let exe = std::env::current_exe().unwrap();
    let mut kids: Vec<_> = (0..PROCS)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "fetch_adds_from_several_processes_are_atomic",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD, &spec)
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn initiator")
        })
        .collect();
    let want = PROCS as u64 * ADDS;
    let deadline = Instant::now() + Duration::from_secs(60);
    // SAFETY: only fabric atomics write the word; a volatile read observes them.
    let value = || unsafe { std::ptr::read_volatile(base as *const u64) };
    while value() < want && Instant::now() < deadline {
        ep.progress();
    }
    let mut all = Vec::new();
    for k in kids.iter_mut() {
        let out = BufReader::new(k.stdout.take().unwrap());
        for line in out.lines().map_while(Result::ok) {
            // libtest may print its "test … " prefix on the same line.
            if let Some(at) = line.find("fetched ") {
                let v = line[at + 8..].split_whitespace().next().unwrap_or("");
                all.extend(v.split(',').map(|x| x.parse::<u64>().unwrap()));
            }
        }
        let st = k.wait().unwrap();
        assert!(st.success(), "an initiator failed: {st}");
    }
    assert_eq!(value(), want, "target word after {PROCS} x {ADDS} adds");
    all.sort_unstable();
    let expect: Vec<u64> = (0..want).collect();
    assert!(
        all == expect,
        "fetched values are not exactly 0..{want} once each"
    );
    drop(mr);
    drop(word);
}
