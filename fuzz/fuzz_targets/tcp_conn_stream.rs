#![no_main]
//! cargo fuzz target: see `ofi_fuzz::tcp_conn_stream` (which also runs the
//! input through `ofi_fuzz::auth_stream`, the handshake with an auth key), then the same input
//! through a connection that is also an RMA target and initiator
//! ([`rma_stream`]): registered regions lent as the core's `Memory`, one-
//! sided requests of its own waiting for answers, and a frame encoder for
//! WRITE, READ, ATOMIC, RESP, RESP_DATA and DATA so inputs reach the
//! states behind the descriptor checks.

use libfuzzer_sys::fuzz_target;
use ofi_core::consts::atomic_op::{FI_ATOMIC_READ, FI_CSWAP, FI_SUM};
use ofi_core::consts::datatype::{FI_UINT32, FI_UINT64};
use ofi_core::consts::{FI_REMOTE_READ, FI_REMOTE_WRITE};
use ofi_core::error::errno;
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::iov::IoVec;
use ofi_core::util::rma::RmaIov;
use ofi_proto::tcp::{
    AtomicArgs, Config, Conn, Event, Grant, Memory, Remote, RmaReq, Rx, RxConfig, Target, TxSlice,
    COUNT_AS_READ,
};
use ofi_wire::tcp;
use std::sync::{Arc, Mutex};

fuzz_target!(|data: &[u8]| {
    ofi_fuzz::tcp_conn_stream(data);
    rma_stream(data);
});

const ARENA: usize = 4096;
/// (key, offset in the arena, length, access).
const REGIONS: [(u64, usize, usize, u64); 3] = [
    (1, 0, 2048, FI_REMOTE_READ | FI_REMOTE_WRITE),
    (2, 2048, 1024, FI_REMOTE_READ),
    (3, 3072, 1024, FI_REMOTE_WRITE),
];

/// Registered memory: one arena, three regions, virtual or offset addressing.
struct Regions {
    bytes: Box<[u8; ARENA]>,
    virt: bool,
    grants: Vec<Option<Vec<IoVec>>>,
}

impl Regions {
    fn base(&self) -> usize {
        self.bytes.as_ptr() as usize
    }
    /// The arena offset of `v`, checked to lie inside one region.
    fn offset(&self, v: IoVec, what: &str) -> usize {
        let off = v.base.wrapping_sub(self.base());
        assert!(
            REGIONS
                .iter()
                .any(|&(_, o, l, _)| off >= o && off <= o + l && v.len <= o + l - off),
            "{what}: {v:?} outside every region"
        );
        off
    }
}

struct FuzzMemory(Arc<Mutex<Regions>>);

impl Memory for FuzzMemory {
    fn resolve(&mut self, ranges: &[RmaIov], access: u64, out: &mut [IoVec]) -> Result<Grant, i32> {
        // The permission (what the access counts as does not matter here).
        let access = access & !COUNT_AS_READ;
        let mut m = self.0.lock().unwrap();
        let base = m.base();
        for (o, x) in out.iter_mut().zip(ranges) {
            let &(_, off, len, acc) = REGIONS
                .iter()
                .find(|r| r.0 == x.key)
                .ok_or(errno::FI_EKEYREJECTED)?;
            if acc & access != access {
                return Err(errno::FI_EACCES);
            }
            let start = if m.virt { (base + off) as u64 } else { 0 };
            let inside = x.addr >= start
                && x.addr
                    .checked_add(x.len as u64)
                    .is_some_and(|e| e <= start + len as u64);
            if !inside {
                return Err(errno::FI_EACCES);
            }
            *o = IoVec {
                base: base + off + (x.addr - start) as usize,
                len: x.len,
            };
        }
        m.grants.push(Some(out.to_vec()));
        Ok(Grant(m.grants.len() as u64 - 1))
    }
    fn release(&mut self, grant: Grant, _done: bool) {
        let mut m = self.0.lock().unwrap();
        let g = m.grants.get_mut(grant.0 as usize).expect("grant");
        assert!(g.take().is_some(), "grant released twice");
    }
    fn read(&mut self, from: IoVec, into: &mut [u8]) {
        let m = self.0.lock().unwrap();
        let off = m.offset(from, "capture");
        into.copy_from_slice(&m.bytes[off..off + from.len]);
    }
    fn atomic(
        &mut self,
        grant: Grant,
        index: usize,
        args: &AtomicArgs,
        operand: &[u8],
        compare: &[u8],
        result: &mut [u8],
    ) -> Result<(), i32> {
        let mut m = self.0.lock().unwrap();
        let v = m.grants[grant.0 as usize].as_ref().expect("live grant")[index];
        let off = m.offset(v, "atomic");
        ofi_core::util::atomic::apply(
            args.kind,
            args.op,
            args.datatype,
            &mut m.bytes[off..off + v.len],
            operand,
            compare,
            result,
        )
        .map_err(|e| e.code())
    }
}

/// Local memory lent to the core by address (sources and answer landings).
struct Local {
    bytes: Vec<u8>,
    lent: Vec<(usize, usize)>,
    next: usize,
}

impl Local {
    fn lend(&mut self, len: usize) -> IoVec {
        let off = self.next.min(self.bytes.len());
        let len = len.min(self.bytes.len() - off);
        self.next = off + len + 8;
        self.lent.push((off, len));
        IoVec {
            base: self.bytes.as_ptr() as usize + off,
            len,
        }
    }
    fn holds(&self, v: IoVec) -> Option<usize> {
        let off = v.base.wrapping_sub(self.bytes.as_ptr() as usize);
        self.lent
            .iter()
            .any(|&(o, l)| off >= o && off <= o + l && v.len <= o + l - off)
            .then_some(off)
    }
}

/// Frames for the structured mode: the fuzzer picks fields, lengths are
/// right unless the input says to lie.
fn rma_frames(mut p: &[u8], addr_base: u64, out: &mut Vec<u8>) {
    fn byte(p: &mut &[u8]) -> u8 {
        let b = p.first().copied().unwrap_or(0);
        *p = p.get(1..).unwrap_or(&[]);
        b
    }
    let hello = tcp::Repr {
        op: tcp::op::HELLO,
        len: 8,
        data: 8,
        ..Default::default()
    };
    out.extend_from_slice(&hello.to_bytes());
    out.extend_from_slice(b"fuzzer:2");
    while !p.is_empty() {
        let kind = byte(&mut p);
        let lie = kind & 0x80 != 0;
        let n = 1 + (byte(&mut p) as usize % 4);
        let mut d = tcp::DescRepr {
            kind: tcp::kind::RMA,
            count: n,
            ..Default::default()
        };
        for r in d.ranges.iter_mut().take(n) {
            let key = u64::from(byte(&mut p) % 5);
            let off = u64::from(u16::from_le_bytes([byte(&mut p), byte(&mut p)]) % 4200);
            // Short ranges mostly; some long enough that captured READ
            // answers fill the send stage past its compaction point.
            let len = if byte(&mut p) & 3 == 0 {
                u64::from(u16::from_le_bytes([byte(&mut p), byte(&mut p)]) % 2048)
            } else {
                u64::from(byte(&mut p) % 64)
            };
            let base = if kind & 0x40 != 0 { addr_base } else { 0 };
            *r = tcp::Range {
                addr: base + off,
                len,
                key,
            };
        }
        let total: u64 = d.ranges().iter().map(|r| r.len).sum();
        let id = u64::from(byte(&mut p) % 8);
        let (op, after) = match kind % 8 {
            0 => (tcp::op::WRITE, total as usize),
            1 => (tcp::op::READ, 0),
            2 | 3 => {
                d.kind = [tcp::kind::ATOMIC, tcp::kind::FETCH, tcp::kind::COMPARE]
                    [kind as usize / 8 % 3];
                d.op = [FI_SUM, FI_ATOMIC_READ, FI_CSWAP, 99][byte(&mut p) as usize % 4] as u8;
                d.datatype = [FI_UINT64, FI_UINT32, 200][byte(&mut p) as usize % 3] as u8;
                let size = if d.datatype == FI_UINT32 as u8 { 4 } else { 8 };
                let bytes = total as usize * size;
                let both = if d.kind == tcp::kind::COMPARE { 2 } else { 1 };
                (tcp::op::ATOMIC, bytes * both)
            }
            4 => {
                let r = tcp::Repr {
                    op: tcp::op::RESP,
                    len: u64::from(byte(&mut p) % 40),
                    tag: u64::from(byte(&mut p) % 64),
                    data: u64::from(byte(&mut p) % 3 * 13),
                    id,
                    ..Default::default()
                };
                out.extend_from_slice(&r.to_bytes());
                out.resize(out.len() + r.len as usize, 0x11);
                continue;
            }
            5 => {
                let len = 1 + u64::from(byte(&mut p) % 40);
                let o = if kind & 0x20 != 0 {
                    tcp::op::DATA
                } else {
                    tcp::op::RESP_DATA
                };
                let r = tcp::Repr {
                    op: o,
                    len,
                    id,
                    ..Default::default()
                };
                out.extend_from_slice(&r.to_bytes());
                out.resize(out.len() + len as usize, 0x22);
                continue;
            }
            _ => {
                let k = byte(&mut p) as usize;
                let take = k.min(p.len());
                out.extend_from_slice(&p[..take]);
                p = &p[take..];
                continue;
            }
        };
        let mut desc = Vec::new();
        d.append_to(&mut desc);
        // A WRITE's data may stop short in its first frame and follow in DATA.
        let first = if op == tcp::op::WRITE && kind & 0x20 != 0 {
            after / 2
        } else {
            after
        };
        let mut r = tcp::Repr {
            op,
            flags: if kind & 0x10 != 0 && op != tcp::op::READ {
                tcp::flag::CQ_DATA
            } else {
                0
            },
            len: (desc.len() + first) as u64,
            tag: first as u64,
            data: 5,
            id,
        };
        if lie {
            r.tag = r.tag.wrapping_add(u64::from(byte(&mut p) % 3));
        }
        out.extend_from_slice(&r.to_bytes());
        out.extend_from_slice(&desc);
        out.resize(out.len() + first, 0x33);
        if first < after {
            let r = tcp::Repr {
                op: tcp::op::DATA,
                len: (after - first) as u64,
                id,
                ..Default::default()
            };
            out.extend_from_slice(&r.to_bytes());
            out.resize(out.len() + after - first, 0x44);
        }
    }
}

fn split(rng: &mut u64) -> usize {
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    match *rng % 4 {
        0 => 1,
        1 => 1 + (*rng >> 8) as usize % 16,
        2 => 1 + (*rng >> 8) as usize % 512,
        _ => usize::MAX,
    }
}

/// A server-side connection that is an RMA target (regions lent as
/// `Memory`) and has one-sided requests of its own outstanding, fed the
/// input as its incoming stream. Must never panic, never touch memory
/// outside the regions and the lent local ranges, release every grant.
fn rma_stream(data: &[u8]) {
    let [ctl, seed, body @ ..] = data else {
        return;
    };
    let cfg = Config {
        eager_max: 64,
        data_chunk: 48,
        max_frame: 4096,
        max_cm_data: 16,
        max_addr_len: 16,
        max_msg_size: 1 << 16,
        ..Config::default()
    };
    let regions = Arc::new(Mutex::new(Regions {
        bytes: Box::new([0x5a; ARENA]),
        virt: ctl & 1 != 0,
        grants: Vec::new(),
    }));
    let addr_base = regions.lock().unwrap().base() as u64;
    let mut rx = Rx::new(RxConfig {
        max_unexpected_bytes: 4096,
        min_multi_recv: 0,
        depth: 4,
    });
    rx.set_memory(Some(Box::new(FuzzMemory(regions.clone()))));
    let mut conn = Conn::incoming(7, 3, cfg);
    let mut local = Local {
        bytes: vec![0x77; 8192],
        lent: Vec::new(),
        next: 0,
    };
    let mut stream = Vec::new();
    if ctl & 0x80 != 0 {
        rma_frames(body, addr_base, &mut stream);
    } else {
        stream.extend_from_slice(body);
    }
    let mut rng = u64::from(*seed) * 0x9e37_79b9 | 1;
    let mut queued = false;
    let mut at = 0;
    let mut steps = 0;
    loop {
        // Events: accept the HELLO, then queue our own requests once.
        while let Some(e) = conn.poll_event() {
            if let Event::ConnRequest { .. } = e {
                let _ = conn.accept(b"");
            }
        }
        while rx.poll_event().is_some() {}
        while rx.next_wakeup().is_some() {}
        if !queued && conn.state() == ofi_proto::tcp::State::Connected {
            queued = true;
            let rem = |id| Remote {
                addr: id,
                len: 8,
                key: 9,
            };
            let w = local.lend(8);
            let r = local.lend(100);
            let o = local.lend(8);
            let res = local.lend(8);
            let _ = conn.queue_rma(RmaReq::write(&[w], &[rem(0)], 1));
            let _ = conn.queue_rma(RmaReq::read(
                &[r],
                &[Remote {
                    addr: 0,
                    len: 100,
                    key: 9,
                }],
                2,
            ));
            let fetch = AtomicArgs {
                kind: AtomicKind::Fetch,
                op: FI_SUM,
                datatype: FI_UINT64,
            };
            let _ = conn.queue_rma(RmaReq::atomic(
                fetch,
                &[o],
                &[],
                &[res],
                &[Remote { len: 1, ..rem(8) }],
                3,
            ));
        }
        // Write what the connection wants, checking every range it names.
        let limit = split(&mut rng);
        let mut n = 0;
        {
            let t = conn.poll_transmit(&mut rx);
            for s in t.iter() {
                if n >= limit {
                    break;
                }
                if let TxSlice::Iov(v) = s {
                    if local.holds(v).is_none() {
                        regions.lock().unwrap().offset(v, "transmit");
                    }
                }
                n += s.len().min(limit - n);
            }
        }
        if n > 0 {
            conn.on_written(n);
        }
        if at >= stream.len() {
            if n == 0 {
                break;
            }
            continue;
        }
        steps += 1;
        assert!(steps < 8 * stream.len() + 1000, "no progress");
        let avail = (stream.len() - at).min(split(&mut rng));
        let got = match conn.recv_target(&mut rx) {
            Target::Header(b) | Target::Buffer(b) => {
                let k = avail.min(b.len());
                b[..k].copy_from_slice(&stream[at..at + k]);
                k
            }
            Target::Payload(iov) => {
                let iov = iov.to_vec();
                let mut k = 0;
                for v in iov {
                    if k == avail {
                        break;
                    }
                    let c = (avail - k).min(v.len);
                    let src = &stream[at + k..at + k + c];
                    match local.holds(v) {
                        Some(off) => local.bytes[off..off + c].copy_from_slice(src),
                        None => {
                            let mut m = regions.lock().unwrap();
                            let off = m.offset(v, "payload");
                            m.bytes[off..off + c].copy_from_slice(src);
                        }
                    }
                    k += c;
                }
                k
            }
            Target::Discard(left) => avail.min(left),
            Target::Blocked | Target::Closed => break,
        };
        at += got;
        conn.on_read(got, &mut rx);
    }
    if ctl & 2 != 0 {
        conn.on_eof(&mut rx);
    } else {
        conn.shutdown(&mut rx);
    }
    while conn.poll_event().is_some() {}
    rx.close(errno::FI_ECANCELED);
    let m = regions.lock().unwrap();
    assert!(
        m.grants.iter().all(Option::is_none),
        "a grant was never released"
    );
}
