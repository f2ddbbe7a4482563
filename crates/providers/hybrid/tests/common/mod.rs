//! Set-up shared by the hybrid tests that pair two in-process endpoints.

use ofi::consts::*;
use ofi::{AvAttr, CompletionQueue, CqAttr, CqTaggedEntry, Endpoint, Fabric, Info};
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

/// One endpoint of `info` with its own fabric, domain, CQ and AV.
pub fn open(info: &Info) -> Side {
    let fab = Fabric::open(&info.fabric_attr).expect("fabric");
    let dom = fab.domain(info).expect("domain");
    let cq = dom
        .cq(&CqAttr {
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_NONE,
            ..Default::default()
        })
        .expect("cq");
    let av = dom.av(&AvAttr::default()).expect("av");
    let ep = dom.endpoint(info).expect("endpoint");
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
    ep.bind_av(&av).expect("bind av");
    ep.enable().expect("enable");
    Side {
        ep,
        cq,
        av,
        _keep: (dom, fab),
    }
}

/// Reads `cq` (driving both sides) until `n` entries came; `what` names
/// the step in failure messages.
pub fn read(sides: [&Side; 2], cq: &CompletionQueue, n: usize, what: &str) -> Vec<CqTaggedEntry> {
    let mut got = Vec::new();
    let end = Instant::now() + TIMEOUT;
    while got.len() < n {
        assert!(
            Instant::now() < end,
            "{what}: {} of {n} completions",
            got.len()
        );
        for s in sides {
            s.ep.progress();
        }
        let mut e = [CqTaggedEntry::default(); 8];
        match cq.read(&mut e) {
            Ok(k) => got.extend_from_slice(&e[..k]),
            Err(err) if err.code() == ofi::errno::FI_EAVAIL => {
                panic!("{what}: error completion: {:?}", cq.readerr())
            }
            Err(_) => {}
        }
    }
    got
}
