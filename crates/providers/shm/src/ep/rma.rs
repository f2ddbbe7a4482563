//! One-sided operations over shm: RMA writes and reads and atomics,
//! executed by the target against its registered regions.
//!
//! The initiator puts a request in the target's ring. The target checks
//! every remote range (key, access, bounds) before touching memory, then:
//! - RMA_WRITE: copies the inline data into place (small writes, chunks);
//! - RMA_PULL: copies the initiator's buffer straight into place with one
//!   process_vm_readv (large writes: one copy);
//! - RMA_READ: answers inline (small) or copies straight into the
//!   initiator's buffer with process_vm_writev (large);
//! - ATOMIC: applies the operation under the domain's atomic lock.
//!
//! and answers with RMA_RESP (status, and any read or fetched bytes). The
//! initiator completes on that answer, so writes are delivery-complete and
//! every violation comes back as an error completion. When the kernel
//! refuses cross-process copies, writes are pushed and reads answered in
//! ring-sized chunks instead.
//!
//! A target executes the requests of its ring in order, so operations from
//! one initiator are processed in the order issued (reads answered in
//! chunks hold the ring until they finish).

use super::*;
use ofi_core::util::iov::{copy_from_iov, copy_to_iov};
use ofi_core::util::mr::MrMap;
use ofi_core::util::rma::{self as core_rma, Ioc, Resolved, RmaIov};
use ofi_wire::shm::{put_ranges, Ranges, WireRange, LOCAL_LEN, MAX_RANGES, RANGE_LEN};

/// Largest operand list of one atomic, in bytes (operands and compare
/// values travel inline in one ring entry, results come back in one).
pub(super) const ATOMIC_MAX_BYTES: usize = 1024;

/// Room for inline write data after `n` remote ranges.
fn write_room(n: usize) -> usize {
    INLINE_MAX - n * RANGE_LEN
}

/// True for the request opcodes a target answers.
pub(super) fn is_request(o: u8) -> bool {
    matches!(o, op::RMA_WRITE | op::RMA_PULL | op::RMA_READ | op::ATOMIC)
}

/// A final answer carrying only a status.
pub(super) fn answer(me: u64, cookie: u64, status: i32) -> Repr {
    Repr {
        op: op::RMA_RESP,
        flags: flag::LAST,
        src: me,
        cookie,
        data: status as u64,
        ..Default::default()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Write,
    Read,
    Atomic,
}

/// An operation waiting for its target's answer.
pub(super) struct PendingRma {
    peer: Arc<Peer>,
    gen: u32,
    kind: Kind,
    /// Write source, read destination, or atomic result ranges.
    local: [IoVec; MAX_IOV],
    cnt: usize,
    remote: [WireRange; MAX_RANGES],
    nr: usize,
    len: usize,
    /// Bytes a chunked write has pushed so far.
    pushed: usize,
    /// FI_INJECT data that does not fit one entry.
    owned: Option<Box<[u8]>>,
    data: u64,
    cq_data: bool,
    context: usize,
    flags: u64,
    completion: bool,
}

/// A read answered in chunks through the initiator's ring.
pub(super) struct ReadPush {
    to: u64,
    cookie: u64,
    src: [IoVec; MAX_RANGES],
    n: usize,
    offset: usize,
    len: usize,
    /// Keeps the regions registered while the chunks go out.
    _mrs: Vec<Resolved>,
}

fn wire_ranges(rma_iov: &[RmaIov]) -> ([WireRange; MAX_RANGES], usize) {
    let mut out = [WireRange::default(); MAX_RANGES];
    for (o, r) in out.iter_mut().zip(rma_iov) {
        *o = WireRange {
            addr: r.addr,
            len: r.len as u64,
            key: r.key,
        };
    }
    (out, rma_iov.len().min(MAX_RANGES))
}

fn locals(iov: &[IoVec]) -> ([(u64, u64); MAX_RANGES], usize) {
    let mut out = [(0, 0); MAX_RANGES];
    for (o, v) in out.iter_mut().zip(iov) {
        *o = (v.base as u64, v.len as u64);
    }
    (out, iov.len().min(MAX_RANGES))
}

fn resolved_iov(res: &[Resolved]) -> ([IoVec; MAX_RANGES], usize) {
    let mut out = [IoVec::default(); MAX_RANGES];
    for (o, r) in out.iter_mut().zip(res) {
        *o = IoVec {
            base: r.addr,
            len: r.len,
        };
    }
    (out, res.len().min(MAX_RANGES))
}

/// Resolves a request's remote ranges (lengths in `elem`-byte elements)
/// against the domain's regions, all or nothing; `Err` is the FI_E* number
/// to answer with.
fn resolve_request(
    map: &MrMap,
    rg: &Ranges,
    elem: usize,
    access: u64,
    virt: bool,
) -> std::result::Result<Vec<Resolved>, i32> {
    let mut ranges = [RmaIov::default(); MAX_RANGES];
    for (o, r) in ranges.iter_mut().zip(rg.remote()) {
        let len = usize::try_from(r.len)
            .ok()
            .and_then(|l| l.checked_mul(elem))
            .ok_or(errno::FI_EINVAL)?;
        *o = RmaIov {
            addr: r.addr,
            len,
            key: r.key,
        };
    }
    let mut res = Vec::with_capacity(rg.n_remote);
    core_rma::resolve_all(map, &ranges[..rg.n_remote], access, virt, &mut res)
        .map_err(|e| e.code())?;
    Ok(res)
}

/// The target's resolved ranges and the initiator's ranges of a request,
/// as the cross-process copy takes them.
fn cma_ranges(res: &[Resolved], rg: &Ranges) -> (Vec<Range>, Vec<Range>) {
    let local = res
        .iter()
        .map(|x| Range {
            base: x.addr,
            len: x.len,
        })
        .collect();
    let remote = rg
        .local()
        .iter()
        .map(|&(a, l)| Range {
            base: a as usize,
            len: l as usize,
        })
        .collect();
    (local, remote)
}

fn cma_refused(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(c) if c == libc_eperm() || c == libc_enosys())
}

impl ShmEndpoint {
    /// True while sends or one-sided operations of this endpoint are in flight.
    pub(super) fn outstanding(&self, g: &Inner) -> bool {
        g.sends.len() != g.free_sends.len() || g.rmas.len() != g.free_rmas.len()
    }

    /// Whether a transmit operation may start now: a fenced one waits for
    /// everything before it, and nothing overtakes a write still being
    /// pushed in chunks (FI_ORDER_WAW and co). `FI_EAGAIN` otherwise.
    pub(super) fn admit(&self, g: &Inner, flags: u64) -> Result<()> {
        if (flags & FI_FENCE != 0 && self.outstanding(g)) || !g.rma_pushes.is_empty() {
            return Err(Error::again());
        }
        Ok(())
    }

    fn alloc_rma(&self, g: &mut Inner, mut p: PendingRma) -> u64 {
        self.busy.store(true, Ordering::Relaxed);
        let gen = g.next_gen;
        g.next_gen = g.next_gen.wrapping_add(1).max(1);
        p.gen = gen;
        let idx = match g.free_rmas.pop() {
            Some(i) => {
                g.rmas[i as usize] = Some(p);
                i
            }
            None => {
                g.rmas.push(Some(p));
                (g.rmas.len() - 1) as u32
            }
        };
        (u64::from(gen) << 32) | u64::from(idx)
    }

    fn rma_slot(g: &mut Inner, cookie: u64) -> Option<&mut PendingRma> {
        g.rmas
            .get_mut(cookie as u32 as usize)?
            .as_mut()
            .filter(|p| p.gen == (cookie >> 32) as u32)
    }

    fn take_rma(&self, g: &mut Inner, cookie: u64) -> Option<PendingRma> {
        let idx = cookie as u32;
        let slot = g.rmas.get_mut(idx as usize)?;
        if slot
            .as_ref()
            .is_some_and(|p| p.gen == (cookie >> 32) as u32)
        {
            let p = slot.take();
            g.free_rmas.push(idx);
            g.rma_pushes.retain(|c| *c != cookie);
            return p;
        }
        None
    }

    /// Completes a one-sided operation at the initiator (`err` 0: success).
    fn rma_done(&self, g: &Inner, p: &PendingRma, err: i32) {
        g.b.tx_done(p.context, p.flags, p.completion, (err != 0).then_some(err));
    }

    /// Posts an RMA read or write.
    ///
    /// # Safety
    /// As `EndpointOps::post_rma`.
    pub(super) unsafe fn rma_inner(&self, o: &RmaOp<'_>) -> Result<()> {
        self.check_enabled("one-sided operation")?;
        if o.iov.len() > IOV_LIMIT || o.rma_iov.len() > MAX_RANGES || o.rma_iov.is_empty() {
            return Err(Error::inval(format!(
                "shm: {} local / {} remote ranges exceed the limit of {IOV_LIMIT}",
                o.iov.len(),
                o.rma_iov.len()
            )));
        }
        let len = iov_len(o.iov);
        let inject = o.flags & FI_INJECT != 0;
        let mut g = self.lock();
        self.admit(&g, o.flags)?;
        let peer = self.usable_peer(&mut g, o.addr)?;
        let completion = g.b.tx_completion(o.flags);
        let (remote, nr) = wire_ranges(o.rma_iov);
        let mut local = [IoVec::default(); MAX_IOV];
        local[..o.iov.len()].copy_from_slice(o.iov);
        let cq_data = o.flags & FI_REMOTE_CQ_DATA != 0 && !o.read;
        let mut p = PendingRma {
            peer: peer.clone(),
            gen: 0,
            kind: if o.read { Kind::Read } else { Kind::Write },
            local,
            cnt: o.iov.len(),
            remote,
            nr,
            len,
            pushed: 0,
            owned: None,
            data: o.data,
            cq_data,
            context: o.context,
            flags: FI_RMA | if o.read { FI_READ } else { FI_WRITE },
            completion,
        };
        let room = write_room(nr);
        let chunked = !o.read
            && len > room
            && (self.cfg.disable_cma || !peer.cma_ok.load(Ordering::Relaxed) || inject);
        if inject && len > room {
            let mut v = vec![0u8; len];
            // SAFETY: post_rma's caller keeps the iov readable for this call.
            unsafe { copy_from_iov(o.iov, 0, &mut v) };
            p.owned = Some(v.into_boxed_slice());
        }
        let cookie = self.alloc_rma(&mut g, p);
        if chunked {
            g.rma_pushes.push_back(cookie);
            self.run_rma_pushes(&mut g);
            return Ok(());
        }
        let (lr, nl) = locals(o.iov);
        let mut r = Repr {
            src: self.me.id(),
            tag: len as u64,
            cookie,
            ..Default::default()
        };
        let pushed = if o.read || len > room {
            r.op = if o.read { op::RMA_READ } else { op::RMA_PULL };
            r.flags = if cq_data { flag::CQ_DATA } else { 0 };
            r.data = if cq_data { o.data } else { 0 };
            r.iov_cnt = nr as u8 | if len > 0 { (nl as u8) << 4 } else { 0 };
            let nl = if len > 0 { nl } else { 0 };
            peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
                let mut e = Entry::new_unchecked(b);
                put_ranges(e.payload_mut(), &remote[..nr], &lr[..nl]);
                r.emit(&mut e);
            })
        } else {
            r.op = op::RMA_WRITE;
            r.flags = flag::LAST | if cq_data { flag::CQ_DATA } else { 0 };
            r.data = if cq_data { o.data } else { 0 };
            r.iov_cnt = nr as u8;
            r.len = len as u32;
            peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
                let mut e = Entry::new_unchecked(b);
                let pl = e.payload_mut();
                let at = put_ranges(pl, &remote[..nr], &[]);
                // SAFETY: post_rma's caller keeps the iov readable for this call.
                unsafe { copy_from_iov(o.iov, 0, &mut pl[at..at + len]) };
                r.emit(&mut e);
            })
        };
        if pushed.is_err() {
            self.take_rma(&mut g, cookie);
            return Err(self.ring_full(&peer));
        }
        peer.notify();
        Ok(())
    }

    /// Posts an atomic: operands (and compare values) inline, results back
    /// in the answer.
    ///
    /// # Safety
    /// As `EndpointOps::post_atomic`.
    pub(super) unsafe fn atomic_inner(&self, o: &AtomicOp<'_>) -> Result<()> {
        self.check_enabled("one-sided operation")?;
        let size = atomic::datatype_size(o.datatype)
            .ok_or_else(|| Error::inval(format!("shm: unknown datatype {}", o.datatype)))?;
        if o.rma_ioc.len() > MAX_RANGES || o.result.len() > MAX_IOV {
            return Err(Error::inval("shm: too many atomic ranges"));
        }
        let count: usize = o.rma_ioc.iter().map(|r| r.count).sum();
        let bytes = count * size;
        let with_operand = !o.operand.is_empty();
        let with_compare = o.kind == AtomicKind::Compare;
        let inline = bytes * (usize::from(with_operand) + usize::from(with_compare));
        if bytes > ATOMIC_MAX_BYTES || o.rma_ioc.len() * RANGE_LEN + inline > INLINE_MAX {
            return Err(Error::new(
                errno::FI_EMSGSIZE,
                format!("shm: an atomic of {bytes} bytes exceeds {ATOMIC_MAX_BYTES}"),
            ));
        }
        let mut g = self.lock();
        self.admit(&g, o.flags)?;
        let peer = self.usable_peer(&mut g, o.addr)?;
        let completion = g.b.tx_completion(o.flags);
        let mut remote = [WireRange::default(); MAX_RANGES];
        for (w, r) in remote.iter_mut().zip(o.rma_ioc) {
            *w = WireRange {
                addr: r.addr,
                len: r.count as u64,
                key: r.key,
            };
        }
        let nr = o.rma_ioc.len();
        let mut local = [IoVec::default(); MAX_IOV];
        for (l, r) in local.iter_mut().zip(o.result) {
            *l = IoVec {
                base: r.addr,
                len: r.count * size,
            };
        }
        let fetch = o.kind != AtomicKind::Basic;
        let cookie = self.alloc_rma(
            &mut g,
            PendingRma {
                peer: peer.clone(),
                gen: 0,
                kind: Kind::Atomic,
                local,
                cnt: if fetch { o.result.len() } else { 0 },
                remote,
                nr,
                len: if fetch { bytes } else { 0 },
                pushed: 0,
                owned: None,
                data: 0,
                cq_data: false,
                context: o.context,
                flags: FI_ATOMIC | if fetch { FI_READ } else { FI_WRITE },
                completion,
            },
        );
        let kind_code: u64 = match o.kind {
            AtomicKind::Basic => 0,
            AtomicKind::Fetch => 1,
            AtomicKind::Compare => 2,
        };
        let r = Repr {
            op: op::ATOMIC,
            flags: flag::LAST,
            iov_cnt: nr as u8,
            len: inline as u32,
            src: self.me.id(),
            tag: u64::from(o.op) | u64::from(o.datatype) << 8 | kind_code << 16,
            total: count as u64,
            cookie,
            ..Default::default()
        };
        let to_iov = |l: &[Ioc]| -> ([IoVec; MAX_IOV], usize) {
            let mut v = [IoVec::default(); MAX_IOV];
            for (d, s) in v.iter_mut().zip(l) {
                *d = IoVec {
                    base: s.addr,
                    len: s.count * size,
                };
            }
            (v, l.len().min(MAX_IOV))
        };
        let (ov, on) = to_iov(o.operand);
        let (cv, cn) = to_iov(o.compare);
        let pushed = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
            let mut e = Entry::new_unchecked(b);
            let pl = e.payload_mut();
            let mut at = put_ranges(pl, &remote[..nr], &[]);
            if with_operand {
                // SAFETY: post_atomic's caller keeps the operands readable.
                unsafe { copy_from_iov(&ov[..on], 0, &mut pl[at..at + bytes]) };
                at += bytes;
            }
            if with_compare {
                // SAFETY: as above, for the compare values.
                unsafe { copy_from_iov(&cv[..cn], 0, &mut pl[at..at + bytes]) };
            }
            r.emit(&mut e);
        });
        if pushed.is_err() {
            self.take_rma(&mut g, cookie);
            return Err(self.ring_full(&peer));
        }
        peer.notify();
        Ok(())
    }

    /// Pushes write chunks (initiator) and read-answer chunks (target)
    /// until the rings fill.
    pub(super) fn run_rma_pushes(&self, g: &mut Inner) {
        while let Some(&cookie) = g.rma_pushes.front() {
            let me = self.me.id();
            let Some(p) = Self::rma_slot(g, cookie) else {
                g.rma_pushes.pop_front();
                continue;
            };
            let room = write_room(p.nr);
            let mut stalled = false;
            while p.pushed < p.len || (p.len == 0 && p.pushed == 0) {
                let n = (p.len - p.pushed).min(room);
                let last = p.pushed + n == p.len;
                let r = Repr {
                    op: op::RMA_WRITE,
                    flags: if last { flag::LAST } else { 0 }
                        | if last && p.cq_data { flag::CQ_DATA } else { 0 },
                    iov_cnt: p.nr as u8,
                    len: n as u32,
                    src: me,
                    tag: p.len as u64,
                    data: if last && p.cq_data { p.data } else { 0 },
                    total: p.pushed as u64,
                    cookie,
                };
                let at0 = p.pushed;
                let ok = p.peer.seg.msg_ring().push_with(&p.peer.cached_head, |b| {
                    let mut e = Entry::new_unchecked(b);
                    let pl = e.payload_mut();
                    let at = put_ranges(pl, &p.remote[..p.nr], &[]);
                    match &p.owned {
                        Some(v) => pl[at..at + n].copy_from_slice(&v[at0..at0 + n]),
                        // SAFETY: post_rma's caller keeps the source valid
                        // until the write completes.
                        None => unsafe {
                            copy_from_iov(&p.local[..p.cnt], at0, &mut pl[at..at + n]);
                        },
                    }
                    r.emit(&mut e);
                });
                if ok.is_err() {
                    stalled = true;
                    break;
                }
                p.peer.notify();
                p.pushed += n;
                if p.len == 0 {
                    p.pushed = 1;
                }
            }
            if stalled {
                break;
            }
            g.rma_pushes.pop_front();
        }
        while let Some(rp) = g.read_pushes.front_mut() {
            let to = rp.to;
            let peer = match self.peer_by_id(g, to) {
                Ok(p) => p,
                Err(_) => {
                    g.read_pushes.pop_front();
                    continue;
                }
            };
            let rp = g.read_pushes.front_mut().expect("front checked above");
            let mut stalled = false;
            while rp.offset < rp.len {
                let n = (rp.len - rp.offset).min(INLINE_MAX);
                let last = rp.offset + n == rp.len;
                let r = Repr {
                    op: op::RMA_RESP,
                    flags: if last { flag::LAST } else { 0 },
                    len: n as u32,
                    src: self.me.id(),
                    total: rp.offset as u64,
                    cookie: rp.cookie,
                    ..Default::default()
                };
                let off = rp.offset;
                let ok = peer.seg.msg_ring().push_with(&peer.cached_head, |b| {
                    let mut e = Entry::new_unchecked(b);
                    // SAFETY: the ranges were resolved against regions kept
                    // registered by `_mrs`.
                    unsafe { copy_from_iov(&rp.src[..rp.n], off, &mut e.payload_mut()[..n]) };
                    r.emit(&mut e);
                });
                if ok.is_err() {
                    stalled = !peer.dead();
                    if !stalled {
                        rp.offset = rp.len;
                    }
                    break;
                }
                peer.notify();
                rp.offset += n;
            }
            if stalled {
                break;
            }
            g.read_pushes.pop_front();
        }
    }

    /// Target side: checks and executes a one-sided request, then answers.
    pub(super) fn rma_target(&self, g: &mut Inner, r: &Repr, e: &Entry<&[u8]>) {
        let me = self.me.id();
        let rg = match r.ranges(e) {
            Ok(rg) => rg,
            Err(err) => {
                tracing::warn!(error = %err, "shm: dropping a malformed one-sided request");
                return;
            }
        };
        let Some(map) = g.b.mr_map.clone() else {
            self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_EKEYREJECTED));
            return;
        };
        let virt = g.b.info.domain_attr.mr_mode & mr_mode::FI_MR_VIRT_ADDR != 0;
        let payload = e.payload();
        match r.op {
            op::ATOMIC => self.atomic_target(g, r, &rg, &map, virt, payload),
            op::RMA_READ => {
                let res = match resolve_request(&map, &rg, 1, FI_REMOTE_READ, virt) {
                    Ok(res) => res,
                    Err(code) => {
                        self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                        return;
                    }
                };
                let len = r.tag as usize;
                let (src, ns) = resolved_iov(&res);
                // An initiator that has closed (or died) may have freed the
                // buffer: never write into it.
                if self
                    .peer_by_id(g, r.src)
                    .is_ok_and(|p| p.closed() || p.dead())
                {
                    self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_ECONNRESET));
                    return;
                }
                let cma = !self.cfg.disable_cma
                    && self
                        .peer_by_id(g, r.src)
                        .is_ok_and(|p| p.cma_ok.load(Ordering::Relaxed));
                if len <= INLINE_MAX {
                    let mut buf = [0u8; INLINE_MAX];
                    // SAFETY: resolved ranges are registered memory of this
                    // process, kept registered by `res` for this call.
                    unsafe { copy_from_iov(&src[..ns], 0, &mut buf[..len]) };
                    self.count_target(g, &res, FI_REMOTE_READ);
                    let mut a = answer(me, r.cookie, 0);
                    a.len = len as u32;
                    self.send_ctrl_with(g, r.src, a, &buf[..len]);
                    return;
                }
                if cma {
                    let (local, remote) = cma_ranges(&res, &rg);
                    let pid = ShmAddr::from_id(r.src).pid;
                    // SAFETY: the local ranges are resolved, registered memory.
                    match unsafe { cma::write_to(pid, &local, &remote) } {
                        Ok(n) if n == len => {
                            self.count_target(g, &res, FI_REMOTE_READ);
                            self.send_ctrl(g, r.src, answer(me, r.cookie, 0));
                            return;
                        }
                        Ok(_) => {
                            self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_EIO));
                            return;
                        }
                        Err(err) if cma_refused(&err) => {
                            if let Ok(p) = self.peer_by_id(g, r.src) {
                                p.cma_ok.store(false, Ordering::Relaxed);
                            }
                        }
                        Err(err) => {
                            tracing::debug!(error = %err, "shm: read answer copy failed");
                            self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_EFAULT));
                            return;
                        }
                    }
                }
                self.count_target(g, &res, FI_REMOTE_READ);
                self.busy.store(true, Ordering::Relaxed);
                g.read_pushes.push_back(ReadPush {
                    to: r.src,
                    cookie: r.cookie,
                    src,
                    n: ns,
                    offset: 0,
                    len,
                    _mrs: res,
                });
            }
            _ => {
                // RMA_WRITE (inline data or a chunk) and RMA_PULL.
                let last = r.op == op::RMA_PULL || r.flags & flag::LAST != 0;
                let res = match resolve_request(&map, &rg, 1, FI_REMOTE_WRITE, virt) {
                    Ok(res) => res,
                    Err(code) => {
                        self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                        return;
                    }
                };
                let (dst, nd) = resolved_iov(&res);
                if r.op == op::RMA_WRITE {
                    let at = rg.data_at;
                    let data = &payload[at..at + r.len as usize];
                    // SAFETY: resolved ranges are registered memory of this
                    // process; the chunk lies inside the write (checked by parse).
                    unsafe { copy_to_iov(&dst[..nd], r.total as usize, data) };
                } else {
                    let len = r.tag as usize;
                    let peer_ok = self.peer_by_id(g, r.src).ok();
                    if self.cfg.disable_cma
                        || peer_ok
                            .as_ref()
                            .is_some_and(|p| !p.cma_ok.load(Ordering::Relaxed))
                    {
                        let mut a = answer(me, r.cookie, 0);
                        a.flags |= flag::PUSH;
                        self.send_ctrl(g, r.src, a);
                        return;
                    }
                    let (local, remote) = cma_ranges(&res, &rg);
                    let pid = ShmAddr::from_id(r.src).pid;
                    let copied = if len >= self.cfg.coop_threshold {
                        // Large: the initiator copies half, chunk by chunk,
                        // into the ranges resolved here (each byte once).
                        match self.coop_read(g, r.src, r.cookie, &local, &remote, len) {
                            None => Err(std::io::Error::from_raw_os_error(libc_eperm())),
                            Some(Ok(n)) => Ok(n),
                            Some(Err(code)) => {
                                self.send_ctrl(g, r.src, answer(me, r.cookie, code));
                                return;
                            }
                        }
                    } else {
                        // SAFETY: the local ranges are resolved, registered memory.
                        unsafe { cma::read_from(pid, &local, &remote) }
                    };
                    match copied {
                        Ok(got) if got == len => {}
                        Ok(_) => {
                            self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_EIO));
                            return;
                        }
                        Err(err) if cma_refused(&err) => {
                            if let Some(p) = peer_ok {
                                p.cma_ok.store(false, Ordering::Relaxed);
                            }
                            let mut a = answer(me, r.cookie, 0);
                            a.flags |= flag::PUSH;
                            self.send_ctrl(g, r.src, a);
                            return;
                        }
                        Err(err) => {
                            tracing::debug!(error = %err, "shm: pulling a write failed");
                            self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_EFAULT));
                            return;
                        }
                    }
                }
                if last {
                    self.count_target(g, &res, FI_REMOTE_WRITE);
                    if r.flags & flag::CQ_DATA != 0 {
                        let src_addr = self.src_addr(g, r.src);
                        if let Some(cq) = &g.b.rx_cq {
                            cq.push(
                                CqTaggedEntry {
                                    flags: FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
                                    len: r.tag as usize,
                                    data: r.data,
                                    ..Default::default()
                                },
                                src_addr,
                            );
                        }
                    }
                    self.send_ctrl(g, r.src, answer(me, r.cookie, 0));
                }
            }
        }
    }

    fn count_target(&self, g: &Inner, res: &[Resolved], access: u64) {
        for (i, x) in res.iter().enumerate() {
            // One event per operation for the endpoint, one per region touched.
            if i == 0 {
                core_rma::count_remote(&g.b, Some(&x.mr), access);
            } else if !res[..i].iter().any(|y| Arc::ptr_eq(&y.mr, &x.mr)) {
                x.mr.count_remote(access);
            }
        }
    }

    fn atomic_target(
        &self,
        g: &mut Inner,
        r: &Repr,
        rg: &Ranges,
        map: &Arc<MrMap>,
        virt: bool,
        payload: &[u8],
    ) {
        let me = self.me.id();
        let aop = (r.tag & 0xff) as u32;
        let dt = ((r.tag >> 8) & 0xff) as u32;
        let kind = match (r.tag >> 16) & 0xff {
            0 => AtomicKind::Basic,
            1 => AtomicKind::Fetch,
            2 => AtomicKind::Compare,
            _ => {
                self.send_ctrl(g, r.src, answer(me, r.cookie, errno::FI_EINVAL));
                return;
            }
        };
        let fail =
            |s: &Self, g: &mut Inner, code: i32| s.send_ctrl(g, r.src, answer(me, r.cookie, code));
        let Some(size) = atomic::datatype_size(dt).filter(|_| atomic::valid(kind, aop, dt)) else {
            fail(self, g, errno::FI_EOPNOTSUPP);
            return;
        };
        let count = r.total as usize;
        let Some(bytes) = count.checked_mul(size).filter(|b| *b <= ATOMIC_MAX_BYTES) else {
            fail(self, g, errno::FI_EMSGSIZE);
            return;
        };
        let read_only = kind == AtomicKind::Fetch && aop == atomic_op::FI_ATOMIC_READ;
        let with_compare = kind == AtomicKind::Compare;
        let with_operand = r.len as usize != if with_compare { bytes } else { 0 };
        let expect = bytes * (usize::from(with_operand) + usize::from(with_compare));
        if r.len as usize != expect || (!with_operand && !read_only) {
            fail(self, g, errno::FI_EINVAL);
            return;
        }
        let access = if read_only {
            FI_REMOTE_READ
        } else {
            FI_REMOTE_WRITE
        };
        let res = match resolve_request(map, rg, size, access, virt) {
            Ok(res) => res,
            Err(code) => {
                fail(self, g, code);
                return;
            }
        };
        let at = rg.data_at;
        let operand = if with_operand {
            &payload[at..at + bytes]
        } else {
            &[][..]
        };
        let compare = if with_compare {
            let c = at + if with_operand { bytes } else { 0 };
            &payload[c..c + bytes]
        } else {
            &[][..]
        };
        let mut out = [0u8; ATOMIC_MAX_BYTES];
        let mut off = 0;
        for x in &res {
            let l = x.len;
            let o = if with_operand {
                &operand[off..off + l]
            } else {
                &[][..]
            };
            let c = if with_compare {
                &compare[off..off + l]
            } else {
                &[][..]
            };
            let rs = if kind == AtomicKind::Basic {
                &mut [][..]
            } else {
                &mut out[off..off + l]
            };
            // SAFETY: `x` was resolved against a region registered in this
            // domain (still held by `res`).
            if let Err(err) = unsafe { core_rma::apply_atomic(map, kind, aop, dt, x, o, c, rs) } {
                fail(self, g, err.code());
                return;
            }
            off += l;
        }
        self.count_target(g, &res, access);
        let mut a = answer(me, r.cookie, 0);
        let back = if kind == AtomicKind::Basic { 0 } else { bytes };
        a.len = back as u32;
        self.send_ctrl_with(g, r.src, a, &out[..back]);
    }

    /// Initiator side: an answer from a target.
    pub(super) fn rma_answer(&self, g: &mut Inner, r: &Repr, bytes: &[u8]) {
        let cookie = r.cookie;
        let Some(p) = Self::rma_slot(g, cookie) else {
            tracing::debug!(cookie, "shm: answer for no pending one-sided operation");
            return;
        };
        if r.flags & flag::PUSH != 0 {
            if p.kind == Kind::Write && p.pushed == 0 {
                p.peer.cma_ok.store(false, Ordering::Relaxed);
                g.rma_pushes.push_back(cookie);
                self.busy.store(true, Ordering::Relaxed);
                return;
            }
            let p = self.take_rma(g, cookie).expect("slot checked above");
            self.rma_done(g, &p, errno::FI_EIO);
            return;
        }
        if r.data != 0 {
            let p = self.take_rma(g, cookie).expect("slot checked above");
            self.rma_done(g, &p, status_code(r.data));
            return;
        }
        if !bytes.is_empty() {
            let at = r.total as usize;
            if p.kind == Kind::Write || at.checked_add(bytes.len()).is_none_or(|e| e > p.len) {
                tracing::warn!(cookie, "shm: answer bytes outside the operation");
                let p = self.take_rma(g, cookie).expect("slot checked above");
                self.rma_done(g, &p, errno::FI_EIO);
                return;
            }
            // SAFETY: the read or result buffer stays valid and unaliased
            // until the operation completes (post_rma / post_atomic contract).
            unsafe { copy_to_iov(&p.local[..p.cnt], at, bytes) };
        }
        if r.flags & flag::LAST != 0 {
            let p = self.take_rma(g, cookie).expect("slot checked above");
            self.rma_done(g, &p, 0);
        }
    }

    /// The source of a pending write the target pulls (for a CTS): peer,
    /// local ranges and length.
    pub(super) fn rma_source(
        &self,
        g: &mut Inner,
        cookie: u64,
    ) -> Option<(Arc<Peer>, [IoVec; MAX_IOV], usize, usize)> {
        let p = Self::rma_slot(g, cookie)?;
        (p.kind == Kind::Write && p.owned.is_none())
            .then(|| (p.peer.clone(), p.local, p.cnt, p.len))
    }

    /// Before the endpoint closes: drives progress until no read is waiting
    /// for a target that may still copy into this process's memory (the
    /// target is alive and has not closed), for at most five seconds.
    pub(super) fn settle_reads(&self, g: &mut Inner) {
        let waiting = |g: &Inner| {
            g.rmas
                .iter()
                .flatten()
                .any(|p| p.kind == Kind::Read && !p.peer.dead() && !p.peer.closed())
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while waiting(g) && Instant::now() < deadline {
            self.progress_locked(g);
            std::hint::spin_loop();
        }
        if waiting(g) {
            tracing::warn!("shm: closing with reads still unanswered by a live target");
        }
    }

    /// Pending one-sided operations whose target died complete with FI_EIO.
    pub(super) fn rma_liveness(&self, g: &mut Inner) {
        let dead: Vec<u64> = g
            .rmas
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                p.as_ref()
                    .filter(|p| p.peer.dead() || p.peer.closed())
                    .map(|p| (u64::from(p.gen) << 32) | i as u64)
            })
            .collect();
        for cookie in dead {
            if let Some(p) = self.take_rma(g, cookie) {
                tracing::warn!(
                    pid = p.peer.addr.pid,
                    "shm: target gone with a one-sided operation in flight"
                );
                self.rma_done(g, &p, errno::FI_EIO);
            }
        }
    }
}

const _: () = assert!(MAX_RANGES * RANGE_LEN + MAX_RANGES * LOCAL_LEN <= INLINE_MAX);
const _: () = assert!(MAX_RANGES * RANGE_LEN + 2 * ATOMIC_MAX_BYTES <= INLINE_MAX);
