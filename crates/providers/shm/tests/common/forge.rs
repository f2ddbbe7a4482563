//! A forging peer in the test process: two endpoints of one domain, and
//! their rings mapped so a test writes any entry into them, as a hostile
//! endpoint on the node could.

use super::ofi;
use ofi::consts::*;
use ofi::*;
use ofi_core::util::cq::CqErrEntry;
use ofi_shmem::segment::{segment_path, Segment};
use ofi_wire::shm::{Entry, Repr};
use std::time::{Duration, Instant};

/// `(pid, index)` of an `fi_shm://PID.INDEX` address.
pub fn parse_addr(a: &[u8]) -> (u32, u32) {
    let s = std::str::from_utf8(a).unwrap().trim_end_matches('\0');
    let (p, i) = s
        .strip_prefix("fi_shm://")
        .unwrap()
        .split_once('.')
        .unwrap();
    (p.parse().unwrap(), i.parse().unwrap())
}

/// Two enabled endpoints of one domain on one CQ, and `b`'s ring mapped
/// as a hostile peer maps it.
pub struct Pair {
    pub cq: CompletionQueue,
    pub a: Endpoint,
    pub b: Endpoint,
    /// `b` in the AV.
    pub fb: u64,
    /// `a`'s id as entries carry it.
    pub a_id: u64,
    /// `b`'s pid (a forger on the node knows it).
    pub b_pid: u32,
    /// `b`'s segment, mapped.
    pub seg: Segment,
    pub cached: std::sync::atomic::AtomicU64,
    /// `a`'s segment, mapped.
    pub a_seg: Segment,
    pub a_cached: std::sync::atomic::AtomicU64,
    _keep: (Fabric, Domain, AddressVector),
}

impl Pair {
    pub fn new() -> Pair {
        let mut h = Info::hints();
        h.caps = FI_MSG | FI_TAGGED | FI_RMA;
        h.fabric_attr.prov_name = Some("shm".into());
        let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
            .unwrap()
            .remove(0);
        let f = Fabric::open(&info.fabric_attr).unwrap();
        let d = f.domain(&info).unwrap();
        let cq = d
            .cq(&CqAttr {
                format: cq_format::FI_CQ_FORMAT_TAGGED,
                ..Default::default()
            })
            .unwrap();
        let av = d.av(&AvAttr::default()).unwrap();
        let a = d.endpoint(&info).unwrap();
        let b = d.endpoint(&info).unwrap();
        for e in [&a, &b] {
            e.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
            e.bind_av(&av).unwrap();
            e.enable().unwrap();
        }
        let baddr = b.getname().unwrap();
        let fb = av.insert_one(&baddr).unwrap();
        let (pid, idx) = parse_addr(&baddr);
        let (apid, aidx) = parse_addr(&a.getname().unwrap());
        // The hostile side maps b's segment like any peer would.
        let seg = Segment::open(&segment_path(ofi_shmem::proc::uid(), pid, idx), pid).unwrap();
        let a_seg = Segment::open(&segment_path(ofi_shmem::proc::uid(), apid, aidx), apid).unwrap();
        Pair {
            cq,
            a,
            b,
            fb,
            a_id: (u64::from(apid) << 32) | u64::from(aidx),
            b_pid: pid,
            seg,
            cached: std::sync::atomic::AtomicU64::new(0),
            a_seg,
            a_cached: std::sync::atomic::AtomicU64::new(0),
            _keep: (f, d, av),
        }
    }

    /// Writes an entry (header and payload) into `b`'s ring (when it is
    /// full, `b` reads what it holds first).
    pub fn inject(&self, r: &Repr, payload: &[u8]) {
        Self::push(&self.seg, &self.cached, &self.b, r, payload);
    }

    /// Writes into `b`'s ring an RTS from `a` announcing `total` bytes in
    /// one range of `a`'s memory, `(addr, len)`.
    pub fn inject_rts(&self, total: u64, cookie: u64, (addr, len): (u64, u64)) {
        let mut range = [0u8; 16];
        range[..8].copy_from_slice(&addr.to_le_bytes());
        range[8..].copy_from_slice(&len.to_le_bytes());
        self.inject(
            &Repr {
                op: ofi_wire::shm::op::RTS,
                iov_cnt: 1,
                src: self.a_id,
                total,
                cookie,
                ..Default::default()
            },
            &range,
        );
    }

    /// Writes an entry into `a`'s ring (when it is full, `a` reads what it
    /// holds first).
    pub fn inject_a(&self, r: &Repr, payload: &[u8]) {
        Self::push(&self.a_seg, &self.a_cached, &self.a, r, payload);
    }

    /// Pushes into `owner`'s ring `seg`. The ring holds FI_SHM_RING_SLOTS
    /// entries, as few as 2: while it is full, its owner progresses (reads
    /// and handles what it holds), for at most 10 s.
    fn push(
        seg: &Segment,
        cached: &std::sync::atomic::AtomicU64,
        owner: &Endpoint,
        r: &Repr,
        payload: &[u8],
    ) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while seg
            .msg_ring()
            .push_with(cached, |buf| {
                let mut e = Entry::new_unchecked(buf);
                e.payload_mut()[..payload.len()].copy_from_slice(payload);
                r.emit(&mut e);
            })
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "the ring's owner never made room"
            );
            owner.progress();
        }
    }

    /// The completion of `context`: its entry, or its error entry.
    pub fn wait(&self, context: usize) -> Result<CqTaggedEntry, CqErrEntry> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            self.a.progress();
            self.b.progress();
            let mut e = [CqTaggedEntry::default(); 1];
            match self.cq.read(&mut e) {
                Ok(1) if e[0].op_context == context => return Ok(e[0]),
                Ok(_) => {}
                Err(err) if err.is_again() => {}
                Err(_) => {
                    let e = self.cq.readerr().unwrap();
                    if e.op_context == context {
                        return Err(e);
                    }
                }
            }
        }
        panic!("no completion for context {context}");
    }
}
