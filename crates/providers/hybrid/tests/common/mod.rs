//! Set-up shared by the hybrid tests that pair in-process endpoints.
#![allow(dead_code)]

use ofi::consts::*;
use ofi::{
    AddressVector, AvAttr, CompletionQueue, CqAttr, CqTaggedEntry, Domain, Endpoint, Fabric, Info,
};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(20);

/// An endpoint with its CQ and AV (its domain and fabric kept alive).
pub struct Side {
    /// The endpoint.
    pub ep: Endpoint,
    /// Its CQ (transmit and receive).
    pub cq: CompletionQueue,
    /// Its AV.
    pub av: ofi::AddressVector,
    _keep: (ofi::Domain, Fabric),
}

/// A CQ of tagged entries without a wait object (the tests poll).
pub fn cq(dom: &Domain) -> CompletionQueue {
    dom.cq(&CqAttr {
        format: cq_format::FI_CQ_FORMAT_TAGGED,
        wait_obj: wait_obj::FI_WAIT_NONE,
        ..Default::default()
    })
    .expect("cq")
}

/// An enabled endpoint of `info` in `dom` on `av`, with a CQ of its own.
pub fn endpoint_on(dom: &Domain, info: &Info, av: &AddressVector) -> (Endpoint, CompletionQueue) {
    let cq = cq(dom);
    let ep = dom.endpoint(info).expect("endpoint");
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
    ep.bind_av(av).expect("bind av");
    ep.enable().expect("enable");
    (ep, cq)
}

/// One endpoint of `info` with its own fabric, domain, CQ and AV.
pub fn open(info: &Info) -> Side {
    let fab = Fabric::open(&info.fabric_attr).expect("fabric");
    let dom = fab.domain(info).expect("domain");
    let av = dom.av(&AvAttr::default()).expect("av");
    let (ep, cq) = endpoint_on(&dom, info, &av);
    Side {
        ep,
        cq,
        av,
        _keep: (dom, fab),
    }
}

/// Posts with `op`, retrying while it answers FI_EAGAIN (flow control: a
/// full ring or queue) and driving every endpoint of `drive` between tries,
/// for at most the tests' timeout; any other answer is returned.
pub fn post(drive: &[&Endpoint], mut op: impl FnMut() -> ofi::Result<()>) -> ofi::Result<()> {
    let end = Instant::now() + TIMEOUT;
    loop {
        match op() {
            Err(e) if e.is_again() && Instant::now() < end => {
                for ep in drive {
                    ep.progress();
                }
                std::thread::yield_now();
            }
            r => return r,
        }
    }
}

/// Reads `cq` (driving both sides) until `n` entries came; `what` names
/// the step in failure messages.
pub fn read(sides: [&Side; 2], cq: &CompletionQueue, n: usize, what: &str) -> Vec<CqTaggedEntry> {
    read_from(&[&sides[0].ep, &sides[1].ep], cq, n, what)
        .into_iter()
        .map(|(e, _)| e)
        .collect()
}

/// Reads `cq` with each entry's source address (driving every endpoint
/// of `drive`) until `n` entries came; `what` names the step in failure
/// messages. An error entry fails the test.
pub fn read_from(
    drive: &[&Endpoint],
    cq: &CompletionQueue,
    n: usize,
    what: &str,
) -> Vec<(CqTaggedEntry, u64)> {
    let mut got = Vec::new();
    let end = Instant::now() + TIMEOUT;
    while got.len() < n {
        assert!(
            Instant::now() < end,
            "{what}: {} of {n} completions",
            got.len()
        );
        for ep in drive {
            ep.progress();
        }
        let mut e = [CqTaggedEntry::default(); 8];
        let mut s = [0u64; 8];
        match cq.readfrom(&mut e, &mut s) {
            Ok(k) => got.extend(e[..k].iter().copied().zip(s[..k].iter().copied())),
            Err(err) if err.code() == ofi::errno::FI_EAVAIL => {
                panic!("{what}: error completion: {:?}", cq.readerr())
            }
            Err(_) => {}
        }
    }
    got
}
