//! RMA and atomics over loopback, on RDM and MSG endpoints: writes and
//! reads of 0 B to 1 MiB with iov lists, virtual and offset addressing,
//! provider and user keys, remote CQ data, inject; every violation (key,
//! access, bounds, length overflow) gives the initiator an error completion
//! and leaves target memory as it was; counters on both sides and on the
//! region; atomics on several datatypes; fetch-adds from four threads;
//! FI_FENCE and FI_DELIVERY_COMPLETE. `measure` (ignored) prints figures.
#![allow(unsafe_code)]

mod common;

use common::{errno_name, pattern};
use ofi_core::consts::atomic_op::*;
use ofi_core::consts::datatype::*;
use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::object::*;
use ofi_core::util::atomic::AtomicKind;
use ofi_core::util::av::AvAttr;
use ofi_core::util::cntr::CntrAttr;
use ofi_core::util::cq::{CqAttr, CqErrEntry, CqTaggedEntry};
use ofi_core::util::eq::EqAttr;
use ofi_core::util::iov::IoVec;
use ofi_core::util::mr::MrAttr;
use ofi_core::util::rma::{Ioc, RmaIoc, RmaIov};
use ofi_core::Info;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(20);

/// Addressing and keys a pair is opened with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// FI_MR_VIRT_ADDR and provider keys.
    Virt,
    /// Offsets and user-requested keys.
    Offset,
}

fn offer(ep_type: u32, mode: Mode) -> Info {
    let mut h = Info::hints();
    h.caps = FI_MSG | FI_RMA | FI_ATOMIC | FI_RMA_EVENT | FI_FENCE;
    h.ep_attr.ep_type = ep_type;
    h.fabric_attr.prov_name = Some("tcp".into());
    h.addr_format = addr_format::FI_SOCKADDR_IN;
    h.domain_attr.mr_mode = match mode {
        Mode::Virt => mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY | mr_mode::FI_MR_ALLOCATED,
        Mode::Offset => mr_mode::FI_MR_ALLOCATED,
    };
    let o = common::loopback_offer(&h);
    let virt = o.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
    let prov = o.domain_attr.mr_mode & mr_mode::FI_MR_PROV_KEY != 0;
    assert_eq!((virt, prov), (mode == Mode::Virt, mode == Mode::Virt));
    assert!(o.caps & (FI_RMA | FI_ATOMIC) == FI_RMA | FI_ATOMIC);
    assert_eq!(o.tx_attr.rma_iov_limit, 4);
    o
}

/// One endpoint with its objects. Fields drop in declaration order.
struct Side {
    ep: Endpoint,
    cq: CompletionQueue,
    /// read, write, remote read, remote write.
    cntr: [Counter; 4],
    av: Option<AddressVector>,
    _eq: Option<EventQueue>,
    _pep: Option<PassiveEndpoint>,
    domain: Domain,
    _fabric: Fabric,
}

fn tagged_cq(d: &Domain) -> CompletionQueue {
    d.cq(&CqAttr {
        format: cq_format::FI_CQ_FORMAT_TAGGED,
        ..Default::default()
    })
    .expect("cq")
}

fn bind_all(ep: &Endpoint, cq: &CompletionQueue, cntr: &[Counter; 4]) {
    ep.bind_cq(cq, FI_TRANSMIT | FI_RECV).expect("bind cq");
    for (c, f) in cntr
        .iter()
        .zip([FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE])
    {
        ep.bind_cntr(c, f).expect("bind cntr");
    }
}

fn counters(d: &Domain) -> [Counter; 4] {
    std::array::from_fn(|_| d.cntr(&CntrAttr::default()).expect("cntr"))
}

fn open_rdm(info: &Info) -> Side {
    let fabric = Fabric::open(&info.fabric_attr).expect("fabric");
    let domain = fabric.domain(info).expect("domain");
    let cq = tagged_cq(&domain);
    let av = domain.av(&AvAttr::default()).expect("av");
    let cntr = counters(&domain);
    let ep = domain.endpoint(info).expect("endpoint");
    bind_all(&ep, &cq, &cntr);
    ep.bind_av(&av).expect("bind av");
    ep.enable().expect("enable");
    Side {
        ep,
        cq,
        cntr,
        av: Some(av),
        _eq: None,
        _pep: None,
        domain,
        _fabric: fabric,
    }
}

/// An initiator `a` and a target `b`; `dest` is b as a names it.
struct Pair {
    a: Side,
    b: Side,
    dest: u64,
    virt: bool,
    info: Info,
}

fn wait_eq(eq: &EventQueue, other: &EventQueue, want: u32) -> ofi_core::util::eq::EqEvent {
    let deadline = Instant::now() + TIMEOUT;
    while Instant::now() < deadline {
        match eq.read() {
            Ok(e) if e.event == want => return e,
            Ok(e) => panic!("unexpected EQ event {}", e.event),
            Err(e) if e.is_again() => {
                let _ = other.peek();
            }
            Err(e) => panic!("EQ error: {e} {:?}", eq.readerr()),
        }
    }
    panic!("no EQ event {want}");
}

impl Pair {
    fn open(ep_type: u32, mode: Mode) -> Pair {
        let info = offer(ep_type, mode);
        let virt = mode == Mode::Virt;
        if ep_type == ep_type::FI_EP_RDM {
            let a = open_rdm(&info);
            let b = open_rdm(&info);
            let dest =
                a.av.as_ref()
                    .unwrap()
                    .insert_one(&b.ep.getname().unwrap())
                    .unwrap();
            b.av.as_ref()
                .unwrap()
                .insert_one(&a.ep.getname().unwrap())
                .unwrap();
            return Pair {
                a,
                b,
                dest,
                virt,
                info,
            };
        }
        // MSG: b listens, a connects.
        let fb = Fabric::open(&info.fabric_attr).expect("fabric");
        let eq_b = fb.eq(&EqAttr::default()).expect("eq");
        let pep = fb.passive_ep(&info, 1).expect("pep");
        pep.bind_eq(&eq_b).expect("bind eq");
        pep.listen().expect("listen");
        let addr = pep.getname().expect("getname");
        let fa = Fabric::open(&info.fabric_attr).expect("fabric");
        let da = fa.domain(&info).expect("domain");
        let eq_a = fa.eq(&EqAttr::default()).expect("eq");
        let cq_a = tagged_cq(&da);
        let cn_a = counters(&da);
        let ep_a = da.endpoint_with_context(&info, 2).expect("endpoint");
        bind_all(&ep_a, &cq_a, &cn_a);
        ep_a.bind_eq(&eq_a).expect("bind eq");
        ep_a.enable().expect("enable");
        ep_a.connect(&addr, b"").expect("connect");
        let req = wait_eq(&eq_b, &eq_a, eq_event::FI_CONNREQ);
        let sinfo = req.info.expect("CONNREQ info");
        let db = fb.domain(&sinfo).expect("domain");
        let cq_b = tagged_cq(&db);
        let cn_b = counters(&db);
        let ep_b = db.endpoint_with_context(&sinfo, 3).expect("endpoint");
        bind_all(&ep_b, &cq_b, &cn_b);
        ep_b.bind_eq(&eq_b).expect("bind eq");
        ep_b.enable().expect("enable");
        ep_b.accept(b"").expect("accept");
        wait_eq(&eq_a, &eq_b, eq_event::FI_CONNECTED);
        wait_eq(&eq_b, &eq_a, eq_event::FI_CONNECTED);
        Pair {
            a: Side {
                ep: ep_a,
                cq: cq_a,
                cntr: cn_a,
                av: None,
                _eq: Some(eq_a),
                _pep: None,
                domain: da,
                _fabric: fa,
            },
            b: Side {
                ep: ep_b,
                cq: cq_b,
                cntr: cn_b,
                av: None,
                _eq: Some(eq_b),
                _pep: Some(pep),
                domain: db,
                _fabric: fb,
            },
            dest: 0,
            virt,
            info,
        }
    }

    /// Registers `buf` at the target with `access`; user key `key` when
    /// the domain takes user keys; `offset` for offset addressing.
    fn reg(&self, buf: &mut [u8], access: u64, key: u64, offset: u64) -> MemoryRegion {
        // SAFETY: every test keeps `buf` alive (and unmoved) longer than the region.
        unsafe {
            self.b.domain.mr_reg(&MrAttr {
                iov: vec![(buf.as_mut_ptr() as usize, buf.len())],
                access,
                requested_key: key,
                offset,
            })
        }
        .expect("mr_reg")
    }

    /// The address naming byte `off` of `buf` registered with `offset`.
    fn addr(&self, buf: &[u8], offset: u64, off: usize) -> u64 {
        if self.virt {
            buf.as_ptr() as u64 + off as u64
        } else {
            offset + off as u64
        }
    }

    /// Waits for `ctx` on a's CQ, driving b.
    fn wait(&self, ctx: usize) -> Result<CqTaggedEntry, CqErrEntry> {
        wait_cq(&self.a.cq, &self.b.ep, ctx)
    }

    fn ok(&self, ctx: usize, what: &str) -> CqTaggedEntry {
        self.wait(ctx).unwrap_or_else(|e| {
            panic!("{what}: error completion {} ({})", e.err, errno_name(e.err))
        })
    }

    fn err(&self, ctx: usize, what: &str) -> CqErrEntry {
        match self.wait(ctx) {
            Ok(e) => panic!("{what}: completed successfully: {e:?}"),
            Err(e) => e,
        }
    }

    /// Entries on b's CQ (driving a), up to `n`, within a short while.
    fn target_entries(&self, n: usize, within: Duration) -> Vec<CqTaggedEntry> {
        let mut out = Vec::new();
        let deadline = Instant::now() + within;
        let mut e = [CqTaggedEntry::default(); 8];
        while out.len() < n && Instant::now() < deadline {
            match self.b.cq.read(&mut e) {
                Ok(k) => out.extend_from_slice(&e[..k]),
                Err(er) if er.is_again() => self.a.ep.progress(),
                Err(er) => panic!("target cq: {er}: {:?}", self.b.cq.readerr()),
            }
        }
        out
    }
}

fn wait_cq(
    cq: &CompletionQueue,
    other: &Endpoint,
    ctx: usize,
) -> Result<CqTaggedEntry, CqErrEntry> {
    let deadline = Instant::now() + TIMEOUT;
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        assert!(
            Instant::now() < deadline,
            "no completion for context {ctx:#x}"
        );
        match cq.read(&mut e) {
            Ok(_) if e[0].op_context == ctx => return Ok(e[0]),
            Ok(_) => panic!("unexpected completion {:?} (waiting for {ctx:#x})", e[0]),
            Err(er) if er.code() == errno::FI_EAVAIL => {
                let x = cq.readerr().expect("readerr");
                assert_eq!(x.op_context, ctx, "unexpected error completion {x:?}");
                return Err(x);
            }
            Err(er) if er.is_again() => other.progress(),
            Err(er) => panic!("cq read: {er}"),
        }
    }
}

const RW: u64 = FI_REMOTE_READ | FI_REMOTE_WRITE;

/// Splits `buf` into `parts` ranges (some empty when `parts` > len).
fn split(buf: &[u8], parts: usize) -> Vec<IoVec> {
    let n = buf.len();
    (0..parts)
        .map(|i| {
            let (s, e) = (n * i / parts, n * (i + 1) / parts);
            IoVec {
                base: buf.as_ptr() as usize + s,
                len: e - s,
            }
        })
        .collect()
}

fn write_read(ep_type: u32, mode: Mode) {
    let p = Pair::open(ep_type, mode);
    let region_len = (1 << 20) + 8192;
    let offset = if mode == Mode::Offset { 0x10_0000 } else { 0 };
    let mut target = vec![0u8; region_len];
    let mr = p.reg(&mut target, RW, 0x5eed, offset);
    if mode == Mode::Offset {
        assert_eq!(mr.key(), 0x5eed, "user-requested key");
    }
    let mut model = target.clone();
    let mut ctx = 1usize;
    for &len in &[0usize, 1, 4096, 1 << 20] {
        for (lparts, rparts) in [(1usize, 1usize), (3, 1), (2, 2), (4, 4)] {
            let src = pattern(len as u64 * 31 + lparts as u64 * 7 + rparts as u64, len);
            let at = (ctx * 97) % 4096;
            // Remote ranges: `rparts` pieces of [at, at+len), in reverse order.
            let mut rma = Vec::new();
            let mut pieces = Vec::new();
            for i in 0..rparts {
                let (s, e) = (len * i / rparts, len * (i + 1) / rparts);
                pieces.push((s, e));
            }
            let mut cursor = 0;
            for &(s, e) in pieces.iter().rev() {
                rma.push(RmaIov {
                    addr: p.addr(&target, offset, at + s),
                    len: e - s,
                    key: mr.key(),
                });
                model[at + s..at + e].copy_from_slice(&src[cursor..cursor + (e - s)]);
                cursor += e - s;
            }
            let iov = split(&src, lparts);
            let op = RmaOp {
                iov: &iov,
                desc: &[],
                addr: p.dest,
                rma_iov: &rma,
                data: 0,
                context: ctx,
                flags: FI_COMPLETION,
                dir: RmaDir::Write,
            };
            // SAFETY: src outlives the completion waited for below.
            unsafe { p.a.ep.post_rma(&op) }.expect("write");
            let e = p.ok(ctx, &format!("write {len} B {lparts}x{rparts}"));
            assert_eq!(e.flags, FI_RMA | FI_WRITE);
            assert!(target == model, "{len} B {lparts}x{rparts}: target differs");
            ctx += 1;
            // Read the same ranges back into a differently split buffer.
            let mut back = vec![0xeeu8; len];
            let biov = split(&back, rparts.clamp(2, 4));
            let rop = RmaOp {
                iov: &biov,
                dir: RmaDir::Read,
                context: ctx,
                ..op
            };
            // SAFETY: back outlives the completion waited for below.
            unsafe { p.a.ep.post_rma(&rop) }.expect("read");
            let e = p.ok(ctx, "read");
            assert_eq!(e.flags, FI_RMA | FI_READ);
            assert!(back == src, "{len} B: read back differs");
            back.clear();
            ctx += 1;
        }
    }
    // writedata: the target's CQ gets the data, no receive is consumed.
    let mut rbuf = [0u8; 16];
    // SAFETY: rbuf outlives the endpoint's use (checked unconsumed, then dropped with p).
    unsafe { p.b.ep.recv(rbuf.as_mut_ptr(), 16, FI_ADDR_UNSPEC, 0x77) }.unwrap();
    let src = pattern(5, 100);
    let raddr = p.addr(&target, offset, 200);
    // SAFETY: src outlives the completion.
    unsafe {
        p.a.ep
            .writedata(src.as_ptr(), 100, 0xdada, p.dest, raddr, mr.key(), 0x900)
    }
    .unwrap();
    p.ok(0x900, "writedata");
    let got = p.target_entries(1, TIMEOUT);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].flags, got[0].len, got[0].data),
        (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 100, 0xdada)
    );
    assert_eq!(&target[200..300], &src[..]);
    assert!(p.target_entries(1, Duration::from_millis(50)).is_empty());
    // inject_write: buffer reusable at once, no completion on success.
    let mut inj = pattern(6, 64);
    let iaddr = p.addr(&target, offset, 4000);
    p.a.ep.inject_write(&inj, p.dest, iaddr, mr.key()).unwrap();
    inj.fill(0);
    let deadline = Instant::now() + TIMEOUT;
    while p.a.cntr[1].read() < ctx as u64 / 2 + 2 {
        assert!(Instant::now() < deadline, "inject write never counted");
        p.b.ep.progress();
    }
    assert_eq!(&target[4000..4064], &pattern(6, 64)[..]);
    let mut e = [CqTaggedEntry::default(); 1];
    assert!(p.a.cq.read(&mut e).unwrap_err().is_again());
    drop(mr);
}

#[test]
fn rdm_write_read_virtual_addresses() {
    write_read(ep_type::FI_EP_RDM, Mode::Virt);
}

#[test]
fn rdm_write_read_offsets_and_user_keys() {
    write_read(ep_type::FI_EP_RDM, Mode::Offset);
}

#[test]
fn msg_write_read_virtual_addresses() {
    write_read(ep_type::FI_EP_MSG, Mode::Virt);
}

#[test]
fn msg_write_read_offsets_and_user_keys() {
    write_read(ep_type::FI_EP_MSG, Mode::Offset);
}

fn violations(ep_type: u32, mode: Mode) {
    let p = Pair::open(ep_type, mode);
    let offset = if mode == Mode::Offset { 0x4000 } else { 0 };
    let mut rw = pattern(1, 4096);
    let mut ro = pattern(2, 512);
    let mut wo = pattern(3, 512);
    let mr_rw = p.reg(&mut rw, RW, 0x100, offset);
    let mr_ro = p.reg(&mut ro, FI_REMOTE_READ, 0x200, offset);
    let mr_wo = p.reg(&mut wo, FI_REMOTE_WRITE, 0x300, offset);
    // Registered with no access at all (local use): no remote access
    // either (it used to mean every access).
    let mut none = pattern(4, 512);
    let mr_none = p.reg(&mut none, 0, 0x400, offset);
    let none_before = none.clone();
    let before = (rw.clone(), ro.clone(), wo.clone());
    let src = pattern(9, 4097);
    let mut dst = vec![0x5au8; 4097];
    let unknown = (mr_rw.key() ^ mr_ro.key() ^ mr_wo.key()) | 0x8000_0000_0000;
    let base = p.addr(&rw, offset, 0);
    let cases: Vec<(&str, bool, u64, usize, u64, i32)> = vec![
        (
            "unknown key",
            false,
            base,
            8,
            unknown,
            errno::FI_EKEYREJECTED,
        ),
        (
            "unknown key (read)",
            true,
            base,
            8,
            unknown,
            errno::FI_EKEYREJECTED,
        ),
        (
            "write to a region without FI_REMOTE_WRITE",
            false,
            p.addr(&ro, offset, 0),
            8,
            mr_ro.key(),
            errno::FI_EACCES,
        ),
        (
            "read of a region without FI_REMOTE_READ",
            true,
            p.addr(&wo, offset, 0),
            8,
            mr_wo.key(),
            errno::FI_EACCES,
        ),
        (
            "write to a region registered with no access",
            false,
            p.addr(&none, offset, 0),
            8,
            mr_none.key(),
            errno::FI_EACCES,
        ),
        (
            "read of a region registered with no access",
            true,
            p.addr(&none, offset, 0),
            8,
            mr_none.key(),
            errno::FI_EACCES,
        ),
        (
            "one byte past the end",
            false,
            p.addr(&rw, offset, 4096 - 7),
            8,
            mr_rw.key(),
            errno::FI_EACCES,
        ),
        (
            "one byte before the start",
            false,
            base.wrapping_sub(1),
            8,
            mr_rw.key(),
            errno::FI_EACCES,
        ),
        (
            "one byte longer than the region",
            false,
            base,
            4097,
            mr_rw.key(),
            errno::FI_EACCES,
        ),
        (
            "read one byte past the end",
            true,
            p.addr(&rw, offset, 4096 - 7),
            8,
            mr_rw.key(),
            errno::FI_EACCES,
        ),
        (
            "address plus length overflows",
            false,
            u64::MAX - 3,
            8,
            mr_rw.key(),
            errno::FI_EACCES,
        ),
    ];
    let mut errors = 0u64;
    for (i, (what, read, addr, len, key, want)) in cases.into_iter().enumerate() {
        let ctx = 100 + i;
        // SAFETY: src and dst outlive the completions waited for below.
        let r = unsafe {
            if read {
                p.a.ep.read(dst.as_mut_ptr(), len, p.dest, addr, key, ctx)
            } else {
                p.a.ep.write(src.as_ptr(), len, p.dest, addr, key, ctx)
            }
        };
        r.unwrap_or_else(|e| panic!("{what}: posting failed: {e}"));
        let e = p.err(ctx, what);
        assert_eq!(e.err, want, "{what}: {}", errno_name(e.err));
        assert_eq!(
            e.flags,
            FI_RMA | if read { FI_READ } else { FI_WRITE },
            "{what}"
        );
        errors += 1;
        if read {
            assert!(
                dst.iter().all(|&b| b == 0x5a),
                "{what}: local buffer written"
            );
        }
        assert!(
            rw == before.0 && ro == before.1 && wo == before.2 && none == none_before,
            "{what}: target memory changed"
        );
    }
    assert_eq!(p.a.cntr[0].readerr() + p.a.cntr[1].readerr(), errors);
    // Atomic violations too.
    let one = 1u64.to_ne_bytes();
    let mut res = [0u8; 8];
    for (i, (addr, key, want)) in [
        (base, unknown, errno::FI_EKEYREJECTED),
        (p.addr(&ro, offset, 0), mr_ro.key(), errno::FI_EACCES),
        (p.addr(&rw, offset, 4096 - 4), mr_rw.key(), errno::FI_EACCES),
    ]
    .into_iter()
    .enumerate()
    {
        // SAFETY: one and res outlive the completion.
        unsafe {
            p.a.ep.fetch_atomic(
                one.as_ptr(),
                1,
                res.as_mut_ptr(),
                p.dest,
                addr,
                key,
                FI_UINT64,
                FI_SUM,
                200 + i,
            )
        }
        .unwrap();
        let e = p.err(200 + i, "atomic violation");
        assert_eq!(e.err, want);
        assert_eq!(e.flags, FI_ATOMIC | FI_READ);
        assert_eq!(res, [0; 8]);
        assert!(rw == before.0 && ro == before.1 && wo == before.2);
    }
    // The endpoint keeps working.
    // SAFETY: src outlives the completion.
    unsafe {
        p.a.ep
            .write(src.as_ptr(), 16, p.dest, base, mr_rw.key(), 300)
    }
    .unwrap();
    p.ok(300, "write after violations");
    assert_eq!(&rw[..16], &src[..16]);
    drop((mr_rw, mr_ro, mr_wo));
}

#[test]
fn rdm_violations_leave_memory_untouched() {
    violations(ep_type::FI_EP_RDM, Mode::Virt);
    violations(ep_type::FI_EP_RDM, Mode::Offset);
}

#[test]
fn msg_violations_leave_memory_untouched() {
    violations(ep_type::FI_EP_MSG, Mode::Virt);
    violations(ep_type::FI_EP_MSG, Mode::Offset);
}

fn wait_counts(p: &Pair, c: &Counter, want: u64) {
    let deadline = Instant::now() + TIMEOUT;
    while c.read() < want {
        assert!(
            Instant::now() < deadline,
            "counter at {} < {want}",
            c.read()
        );
        p.a.ep.progress();
        p.b.ep.progress();
    }
}

fn counters_and_region_events(ep_type: u32) {
    let p = Pair::open(ep_type, Mode::Virt);
    let mut buf = vec![0u8; 256];
    let mr = p.reg(&mut buf, RW, 0, 0);
    let region_cntr = p.b.domain.cntr(&CntrAttr::default()).unwrap();
    // FI_REMOTE_WRITE, the binding fi_mr(3) documents: writes and every
    // atomic that modifies the region count.
    mr.bind_cntr(&region_cntr, FI_REMOTE_WRITE).unwrap();
    let src = pattern(4, 64);
    let mut dst = vec![0u8; 64];
    let addr = buf.as_ptr() as u64;
    for i in 0..3 {
        // SAFETY: src outlives the completion.
        unsafe {
            p.a.ep
                .write(src.as_ptr(), 64, p.dest, addr, mr.key(), 10 + i)
        }
        .unwrap();
        p.ok(10 + i, "write");
    }
    for i in 0..2 {
        // SAFETY: dst outlives the completion.
        unsafe {
            p.a.ep
                .read(dst.as_mut_ptr(), 64, p.dest, addr, mr.key(), 20 + i)
        }
        .unwrap();
        p.ok(20 + i, "read");
    }
    let one = 1u64.to_ne_bytes();
    let mut r = [0u8; 8];
    // SAFETY: one and r outlive the completions.
    unsafe {
        p.a.ep.atomic(
            one.as_ptr(),
            1,
            p.dest,
            addr,
            mr.key(),
            FI_UINT64,
            FI_SUM,
            30,
        )
    }
    .unwrap();
    let e = p.ok(30, "atomic");
    assert_eq!(e.flags, FI_ATOMIC | FI_WRITE);
    // SAFETY: one and r outlive the completion, waited for at once.
    unsafe {
        p.a.ep.fetch_atomic(
            one.as_ptr(),
            1,
            r.as_mut_ptr(),
            p.dest,
            addr,
            mr.key(),
            FI_UINT64,
            FI_SUM,
            31,
        )
    }
    .unwrap();
    let e = p.ok(31, "fetch atomic");
    assert_eq!(e.flags, FI_ATOMIC | FI_READ);
    // Initiator: reads 2 + fetch 1, writes 3 + atomic 1. Target
    // (fi_endpoint(3)): remote writes 3 + the base atomic, remote reads 2
    // + the fetching atomic (it counted as a write); the region (fi_mr(3)):
    // 3 writes + both atomics, which modify it.
    wait_counts(&p, &p.a.cntr[0], 3);
    wait_counts(&p, &p.a.cntr[1], 4);
    wait_counts(&p, &p.b.cntr[3], 4);
    wait_counts(&p, &p.b.cntr[2], 3);
    wait_counts(&p, &region_cntr, 5);
    assert_eq!(
        [
            p.a.cntr[0].read(),
            p.a.cntr[1].read(),
            p.b.cntr[2].read(),
            p.b.cntr[3].read(),
            region_cntr.read()
        ],
        [3, 4, 3, 4, 5]
    );
    assert_eq!(p.a.cntr[2].read() + p.a.cntr[3].read(), 0);
    assert_eq!(p.b.cntr[0].read() + p.b.cntr[1].read(), 0);
    drop(mr);
}

#[test]
fn rdm_counters_and_region_events() {
    counters_and_region_events(ep_type::FI_EP_RDM);
}

#[test]
fn msg_counters_and_region_events() {
    counters_and_region_events(ep_type::FI_EP_MSG);
}

fn atomics(ep_type: u32) {
    let p = Pair::open(ep_type, Mode::Virt);
    let mut buf = vec![0u8; 1024];
    buf[..8].copy_from_slice(&40u64.to_ne_bytes());
    let mr = p.reg(&mut buf, RW, 0, 0);
    let base = buf.as_ptr() as u64;
    let k = mr.key();
    let u64s = |b: &[u8]| u64::from_ne_bytes(b[..8].try_into().unwrap());
    let mut res = [0u8; 8];
    // fetch-add.
    let two = 2u64.to_ne_bytes();
    // SAFETY: every buffer below outlives its completion, waited for at once.
    unsafe {
        p.a.ep.fetch_atomic(
            two.as_ptr(),
            1,
            res.as_mut_ptr(),
            p.dest,
            base,
            k,
            FI_UINT64,
            FI_SUM,
            1,
        )
    }
    .unwrap();
    p.ok(1, "fetch-add");
    assert_eq!((u64s(&res), u64s(&buf)), (40, 42));
    // cswap: matches, then does not.
    for (ctx, cmp, want_res, want_mem) in [(2usize, 42u64, 42u64, 7u64), (3, 42, 7, 7)] {
        let seven = 7u64.to_ne_bytes();
        let c = cmp.to_ne_bytes();
        // SAFETY: seven, c and res outlive the completion, waited for at once.
        unsafe {
            p.a.ep.compare_atomic(
                seven.as_ptr(),
                1,
                c.as_ptr(),
                res.as_mut_ptr(),
                p.dest,
                base,
                k,
                FI_UINT64,
                FI_CSWAP,
                ctx,
            )
        }
        .unwrap();
        let e = p.ok(ctx, "cswap");
        assert_eq!(e.flags, FI_ATOMIC | FI_READ);
        assert_eq!((u64s(&res), u64s(&buf)), (want_res, want_mem));
    }
    // Atomic read.
    // SAFETY: res outlives the completion, waited for at once (an atomic read has
    // no operand).
    unsafe {
        p.a.ep.fetch_atomic(
            std::ptr::null(),
            1,
            res.as_mut_ptr(),
            p.dest,
            base,
            k,
            FI_UINT64,
            FI_ATOMIC_READ,
            4,
        )
    }
    .unwrap();
    p.ok(4, "atomic read");
    assert_eq!(u64s(&res), 7);
    // i32 sum over 4 elements in two remote ranges.
    let vals: Vec<u8> = [1i32, -2, 3, -4]
        .iter()
        .flat_map(|x| x.to_ne_bytes())
        .collect();
    for (i, x) in [10i32, 20, 30, 40].iter().enumerate() {
        buf[64 + 4 * i..68 + 4 * i].copy_from_slice(&x.to_ne_bytes());
    }
    let op = AtomicOp {
        kind: AtomicKind::Basic,
        op: FI_SUM,
        datatype: FI_INT32,
        operand: &[Ioc {
            addr: vals.as_ptr() as usize,
            count: 4,
        }],
        compare: &[],
        result: &[],
        desc: &[],
        addr: p.dest,
        rma_ioc: &[
            RmaIoc {
                addr: base + 64,
                count: 2,
                key: k,
            },
            RmaIoc {
                addr: base + 72,
                count: 2,
                key: k,
            },
        ],
        data: 0,
        context: 5,
        flags: FI_COMPLETION,
    };
    // SAFETY: vals outlives the completion, waited for at once.
    unsafe { p.a.ep.post_atomic(&op) }.unwrap();
    p.ok(5, "i32 sum");
    let got: Vec<i32> = buf[64..80]
        .chunks(4)
        .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, [11, 18, 33, 36]);
    // f64 sum with fetch, u8 bor, i16 max.
    buf[128..136].copy_from_slice(&1.5f64.to_ne_bytes());
    let d = 2.25f64.to_ne_bytes();
    // SAFETY: d and res outlive the completion, waited for at once.
    unsafe {
        p.a.ep.fetch_atomic(
            d.as_ptr(),
            1,
            res.as_mut_ptr(),
            p.dest,
            base + 128,
            k,
            FI_DOUBLE,
            FI_SUM,
            6,
        )
    }
    .unwrap();
    p.ok(6, "f64 sum");
    assert_eq!(f64::from_ne_bytes(res), 1.5);
    assert_eq!(f64::from_ne_bytes(buf[128..136].try_into().unwrap()), 3.75);
    buf[200] = 0x0f;
    let m = [0xa0u8];
    // SAFETY: m outlives the completion, waited for at once.
    unsafe {
        p.a.ep
            .atomic(m.as_ptr(), 1, p.dest, base + 200, k, FI_UINT8, FI_BOR, 7)
    }
    .unwrap();
    p.ok(7, "u8 bor");
    assert_eq!(buf[200], 0xaf);
    buf[300..302].copy_from_slice(&(-5i16).to_ne_bytes());
    let h = 9i16.to_ne_bytes();
    p.a.ep
        .inject_atomic(&h, p.dest, base + 300, k, FI_INT16, FI_MAX)
        .unwrap();
    wait_counts(&p, &p.a.cntr[1], 3);
    assert_eq!(i16::from_ne_bytes([buf[300], buf[301]]), 9);
    // Undefined for the call: refused before anything is sent.
    // SAFETY: refused before the provider sees it; m outlives the call anyway.
    let e = unsafe {
        p.a.ep
            .atomic(m.as_ptr(), 1, p.dest, base, k, FI_DOUBLE, FI_BOR, 8)
    }
    .unwrap_err();
    assert_eq!(e.code(), errno::FI_EOPNOTSUPP);
    assert_eq!(
        p.a.ep
            .query_atomic(FI_UINT64, FI_SUM, FI_FETCH_ATOMIC)
            .unwrap(),
        ofi_prov_tcp::ATOMIC_MAX_BYTES / 8
    );
    drop(mr);
}

#[test]
fn rdm_atomics() {
    atomics(ep_type::FI_EP_RDM);
}

#[test]
fn msg_atomics() {
    atomics(ep_type::FI_EP_MSG);
}

/// Four threads, each with its own initiator endpoint, do 1000 fetch-adds
/// of 1 on one target word: it ends at exactly 4000 and every fetched
/// value is distinct.
#[test]
fn rdm_fetch_adds_from_four_threads_are_atomic() {
    let info = offer(ep_type::FI_EP_RDM, Mode::Virt);
    let target = open_rdm(&info);
    let mut word = vec![0u8; 8];
    // SAFETY: word outlives the region (dropped at the end of the test).
    let mr = unsafe {
        target.domain.mr_reg(&MrAttr {
            iov: vec![(word.as_mut_ptr() as usize, 8)],
            access: RW,
            requested_key: 0,
            offset: 0,
        })
    }
    .unwrap();
    let (addr, key) = (word.as_ptr() as u64, mr.key());
    let tname = target.ep.getname().unwrap();
    let seen = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (info, tname, target) = (&info, &tname, &target);
                s.spawn(move || {
                    let me = open_rdm(info);
                    let dest = me.av.as_ref().unwrap().insert_one(tname).unwrap();
                    let one = 1u64.to_ne_bytes();
                    let mut out = Vec::with_capacity(1000);
                    for i in 0..1000usize {
                        let mut r = [0u8; 8];
                        // SAFETY: one and r outlive the completion waited for.
                        unsafe {
                            me.ep.fetch_atomic(
                                one.as_ptr(),
                                1,
                                r.as_mut_ptr(),
                                dest,
                                addr,
                                key,
                                FI_UINT64,
                                FI_SUM,
                                i + 1,
                            )
                        }
                        .unwrap();
                        wait_cq(&me.cq, &target.ep, i + 1).expect("fetch-add");
                        out.push(u64::from_ne_bytes(r));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect::<Vec<u64>>()
    });
    let mut seen = seen;
    seen.sort_unstable();
    assert_eq!(seen, (0..4000).collect::<Vec<u64>>());
    assert_eq!(u64::from_ne_bytes(word[..8].try_into().unwrap()), 4000);
    drop(mr);
}

/// A read into a buffer, then a fenced write of that buffer elsewhere: the
/// write carries what the read brought.
fn fence(ep_type: u32) {
    let p = Pair::open(ep_type, Mode::Virt);
    let mut a = pattern(77, 1 << 20);
    let mut b = vec![0u8; 1 << 20];
    let mra = p.reg(&mut a, RW, 0, 0);
    let mrb = p.reg(&mut b, RW, 0, 0);
    let local = vec![0u8; 1 << 20];
    let liov = [IoVec {
        base: local.as_ptr() as usize,
        len: local.len(),
    }];
    let ra = [RmaIov {
        addr: a.as_ptr() as u64,
        len: 1 << 20,
        key: mra.key(),
    }];
    let rb = [RmaIov {
        addr: b.as_ptr() as u64,
        len: 1 << 20,
        key: mrb.key(),
    }];
    let rd = RmaOp {
        iov: &liov,
        desc: &[],
        addr: p.dest,
        rma_iov: &ra,
        data: 0,
        context: 1,
        flags: FI_COMPLETION,
        dir: RmaDir::Read,
    };
    let wr = RmaOp {
        rma_iov: &rb,
        context: 2,
        flags: FI_COMPLETION | FI_FENCE,
        dir: RmaDir::Write,
        ..rd
    };
    // SAFETY: local outlives both completions.
    unsafe {
        p.a.ep.post_rma(&rd).unwrap();
        p.a.ep.post_rma(&wr).unwrap();
    }
    let mut done = Vec::new();
    while done.len() < 2 {
        let e = wait_cq_any(&p.a.cq, &p.b.ep);
        done.push(e.op_context);
    }
    assert_eq!(done, [1, 2]);
    assert!(b == a, "the fenced write did not carry the read's data");
    drop((mra, mrb, local));
}

fn wait_cq_any(cq: &CompletionQueue, other: &Endpoint) -> CqTaggedEntry {
    let deadline = Instant::now() + TIMEOUT;
    let mut e = [CqTaggedEntry::default(); 1];
    loop {
        assert!(Instant::now() < deadline, "no completion");
        match cq.read(&mut e) {
            Ok(_) => return e[0],
            Err(er) if er.is_again() => other.progress(),
            Err(er) => panic!("cq read: {er}: {:?}", cq.readerr()),
        }
    }
}

#[test]
fn rdm_fence_orders_a_write_after_a_read() {
    fence(ep_type::FI_EP_RDM);
}

#[test]
fn msg_fence_orders_a_write_after_a_read() {
    fence(ep_type::FI_EP_MSG);
}

/// A completion level as the endpoint's default (fi_cq(3)):
/// FI_MATCH_COMPLETE completes a send only once the receiver has it in its
/// buffer; FI_DELIVERY_COMPLETE once the receiver has processed it, which
/// for an eager message with no receive posted means buffered (it used to
/// wait for the match, so a peer that posts its receive only after hearing
/// back deadlocked). A rendezvous message waits for the receive at either
/// level: its payload moves only then.
fn completion_level(ep_type: u32, level: u64) {
    let mut info = offer(ep_type, Mode::Virt);
    info.tx_attr.op_flags = level;
    let p = {
        // Open with the modified info through the same path.
        let mut q = Pair::open(ep_type, Mode::Virt);
        if ep_type == ep_type::FI_EP_RDM {
            let a = open_rdm(&info);
            let dest =
                a.av.as_ref()
                    .unwrap()
                    .insert_one(&q.b.ep.getname().unwrap())
                    .unwrap();
            q.b.av
                .as_ref()
                .unwrap()
                .insert_one(&a.ep.getname().unwrap())
                .unwrap();
            q.a = a;
            q.dest = dest;
        }
        q.info = info;
        q
    };
    for len in [8usize, 100_000] {
        let src = pattern(len as u64, len);
        let iov = [IoVec::from_slice(&src)];
        let op = SendOp {
            iov: &iov,
            desc: &[],
            dest: p.dest,
            tag: 0,
            data: 0,
            context: len,
            flags: FI_COMPLETION
                | if ep_type == ep_type::FI_EP_MSG {
                    level
                } else {
                    0
                },
            tagged: false,
        };
        // SAFETY: src outlives the completion.
        unsafe { p.a.ep.post_send(&op) }.unwrap();
        let waits = level == FI_MATCH_COMPLETE || len > 64 << 10;
        let until = Instant::now() + Duration::from_millis(if waits { 200 } else { 5000 });
        let mut e = [CqTaggedEntry::default(); 1];
        let mut done = false;
        while Instant::now() < until && !done {
            match p.a.cq.read(&mut e) {
                Ok(_) if waits => panic!("{len} B: completed before a receive was posted"),
                Ok(_) => done = true,
                Err(er) if er.is_again() => p.b.ep.progress(),
                Err(er) => panic!("{er}"),
            }
        }
        assert!(
            waits || done,
            "{len} B at FI_DELIVERY_COMPLETE: not complete with the message buffered at the receiver"
        );
        let mut dst = vec![0u8; len];
        // SAFETY: dst outlives the receive's completion.
        unsafe { p.b.ep.recv(dst.as_mut_ptr(), len, FI_ADDR_UNSPEC, 9) }.unwrap();
        if waits {
            p.ok(len, "send");
        }
        let r = wait_cq_any(&p.b.cq, &p.a.ep);
        assert_eq!(r.op_context, 9);
        assert!(dst == src);
    }
}

#[test]
fn rdm_match_complete_sends_wait_for_the_receiver() {
    completion_level(ep_type::FI_EP_RDM, FI_MATCH_COMPLETE);
}

#[test]
fn msg_match_complete_sends_wait_for_the_receiver() {
    completion_level(ep_type::FI_EP_MSG, FI_MATCH_COMPLETE);
}

#[test]
fn rdm_delivery_complete_sends_complete_once_buffered() {
    completion_level(ep_type::FI_EP_RDM, FI_DELIVERY_COMPLETE);
}

#[test]
fn msg_delivery_complete_sends_complete_once_buffered() {
    completion_level(ep_type::FI_EP_MSG, FI_DELIVERY_COMPLETE);
}
