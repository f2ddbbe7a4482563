//! A deterministic simulated network for the tcp core, in the style of
//! quinn-proto's `Pair`: endpoints ("sides") with simulated user memory,
//! connections joined by in-memory byte pipes, and a seeded RNG choosing
//! how many bytes every simulated read and write moves (1 byte up to
//! everything), so every split of headers and payloads is exercised.
//!
//! User memory is simulated too (no unsafe anywhere): an address is an
//! offset into a side's `Mem` arena, so the harness can check that
//! payload reads land inside the buffers the test posted.
#![allow(dead_code)]

use ofi_base::auth::{AuthKey, NONCE_LEN};
use ofi_base::consts::{FI_REMOTE_READ, FI_REMOTE_WRITE};
use ofi_base::error::errno;
use ofi_base::iov::IoVec;
use ofi_base::rma::RmaIov;
use ofi_proto::tcp::{
    AtomicArgs, Config, Conn, ConnId, Event, Grant, Memory, RecvDone, RecvReq, Rx, RxConfig,
    SendReq, Target, TxSlice, COUNT_AS_READ,
};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// Proptest case count: `PROPTEST_CASES` if set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// xorshift64*: small, seeded, good enough to pick split sizes.
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

/// First simulated address.
pub const MEM_BASE: usize = 0x1_0000;
const GUARD: usize = 32;
const GUARD_BYTE: u8 = 0xee;
/// What fresh receive buffers hold.
pub const FRESH: u8 = 0xaa;

/// Simulated user memory: a bump-allocated arena.
#[derive(Debug)]
pub struct Mem {
    bytes: Vec<u8>,
    origin: usize,
}

impl Default for Mem {
    fn default() -> Self {
        Mem::at(MEM_BASE)
    }
}

impl Mem {
    /// An arena whose first simulated address is `origin`.
    pub fn at(origin: usize) -> Self {
        Mem {
            bytes: Vec::new(),
            origin,
        }
    }
    /// True if `v` lies in this arena.
    pub fn holds(&self, v: IoVec) -> bool {
        v.base >= self.origin && v.base + v.len <= self.origin + self.bytes.len()
    }
    /// A buffer of `len` bytes filled with [`FRESH`], with guard bytes
    /// around it.
    pub fn alloc(&mut self, len: usize) -> IoVec {
        self.bytes.resize(self.bytes.len() + GUARD, GUARD_BYTE);
        let off = self.bytes.len();
        self.bytes.resize(off + len, FRESH);
        self.bytes.resize(self.bytes.len() + GUARD, GUARD_BYTE);
        IoVec {
            base: self.origin + off,
            len,
        }
    }
    /// A buffer holding `pattern(seed, i)`.
    pub fn alloc_pattern(&mut self, len: usize, seed: u64) -> IoVec {
        let v = self.alloc(len);
        let p = pattern(seed, len);
        self.put(v.base, &p);
        v
    }
    pub fn get(&self, v: IoVec) -> &[u8] {
        let off = v.base - self.origin;
        &self.bytes[off..off + v.len]
    }
    pub fn get_mut(&mut self, v: IoVec) -> &mut [u8] {
        let off = v.base - self.origin;
        &mut self.bytes[off..off + v.len]
    }
    pub fn put(&mut self, base: usize, data: &[u8]) {
        let off = base - self.origin;
        self.bytes[off..off + data.len()].copy_from_slice(data);
    }
    /// Copies `src` into `iov` from byte `offset` (what a driver does with
    /// `copy_to_iov`).
    pub fn scatter(&mut self, iov: &[IoVec], mut offset: usize, src: &[u8]) -> usize {
        let mut done = 0;
        for v in iov {
            if done == src.len() {
                break;
            }
            if offset >= v.len {
                offset -= v.len;
                continue;
            }
            let n = (v.len - offset).min(src.len() - done);
            self.put(v.base + offset, &src[done..done + n]);
            done += n;
            offset = 0;
        }
        done
    }
    /// Bytes of a list of ranges, concatenated.
    pub fn gather(&self, iov: &[IoVec]) -> Vec<u8> {
        iov.iter().flat_map(|v| self.get(*v).to_vec()).collect()
    }
    /// True if no guard byte was overwritten.
    pub fn guards_intact(&self, v: IoVec) -> bool {
        let off = v.base - self.origin;
        self.bytes[off - GUARD..off]
            .iter()
            .all(|&b| b == GUARD_BYTE)
            && self.bytes[off + v.len..off + v.len + GUARD]
                .iter()
                .all(|&b| b == GUARD_BYTE)
    }
}

/// Test content: distinct per seed and position.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut r = XorShift::new(seed ^ 0x5151);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

/// What moved through which kind of read target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub header_bytes: usize,
    /// Read straight into posted receive buffers.
    pub payload_bytes: usize,
    /// Read into core buffers (unexpected eager payloads, control payloads).
    pub buffer_bytes: usize,
    pub discard_bytes: usize,
    /// Copied out of core buffers by the driver (CopyOut).
    pub copied_bytes: usize,
    pub blocked: usize,
    pub written: usize,
}

/// First simulated address of registered (RMA target) memory.
pub const RMA_BASE: usize = 0x4000_0000;

/// A registered region of a [`SimTarget`].
#[derive(Clone, Copy, Debug)]
pub struct SimRegion {
    pub key: u64,
    pub buf: IoVec,
    pub access: u64,
    /// Offset addressing: the address of the region's first byte.
    pub offset: u64,
}

/// Registered memory and remote-access counts of a simulated target.
#[derive(Debug)]
pub struct SimTarget {
    pub mem: Mem,
    pub regions: Vec<SimRegion>,
    /// FI_MR_VIRT_ADDR (else offsets).
    pub virt: bool,
    /// Live grants: access and resolved ranges.
    grants: HashMap<u64, (u64, Vec<IoVec>)>,
    next: u64,
    pub remote_reads: usize,
    pub remote_writes: usize,
    pub released_undone: usize,
    /// Captures of READ data before a later frame changed memory.
    pub copies: usize,
    /// Keys of regions being closed (`Memory::live` answers false).
    pub revoked: Vec<u64>,
    /// Keys of regions FI_COMMIT_COMPLETE can make durable.
    pub durable: Vec<u64>,
    /// Every persisted range with the bytes it held when persisted.
    pub persisted: Vec<(IoVec, Vec<u8>)>,
    /// Make `persist` fail with this FI_E* number.
    pub fail_persist: Option<i32>,
}

impl SimTarget {
    pub fn new(virt: bool) -> Arc<Mutex<SimTarget>> {
        Arc::new(Mutex::new(SimTarget {
            mem: Mem::at(RMA_BASE),
            regions: Vec::new(),
            virt,
            grants: HashMap::new(),
            next: 1,
            remote_reads: 0,
            remote_writes: 0,
            released_undone: 0,
            copies: 0,
            revoked: Vec::new(),
            durable: Vec::new(),
            persisted: Vec::new(),
            fail_persist: None,
        }))
    }
    /// Registers `len` bytes holding `pattern(seed)`; returns the region.
    pub fn register(&mut self, key: u64, len: usize, seed: u64, access: u64) -> SimRegion {
        let buf = self.mem.alloc_pattern(len, seed);
        let r = SimRegion {
            key,
            buf,
            access,
            offset: 0,
        };
        self.regions.push(r);
        r
    }
    /// The address a peer names for byte `off` of region `r`.
    pub fn addr(&self, r: &SimRegion, off: usize) -> u64 {
        if self.virt {
            (r.buf.base + off) as u64
        } else {
            r.offset + off as u64
        }
    }
    /// Grants not yet released.
    pub fn grants_held(&self) -> usize {
        self.grants.len()
    }
    /// True if `v` lies inside a revoked region.
    fn in_revoked(&self, v: IoVec) -> bool {
        self.regions.iter().any(|r| {
            self.revoked.contains(&r.key)
                && v.base >= r.buf.base
                && v.base + v.len <= r.buf.base + r.buf.len
        })
    }
    /// The region `v` lies in.
    fn region_of(&self, v: IoVec) -> Option<&SimRegion> {
        self.regions
            .iter()
            .find(|r| v.base >= r.buf.base && v.base + v.len <= r.buf.base + r.buf.len)
    }
    /// True if `v` lies inside a registered region.
    pub fn inside(&self, v: IoVec) -> bool {
        self.regions
            .iter()
            .any(|r| v.base >= r.buf.base && v.base + v.len <= r.buf.base + r.buf.len)
    }
    fn resolve_one(&self, x: &RmaIov, access: u64) -> Result<IoVec, i32> {
        let r = self
            .regions
            .iter()
            .find(|r| r.key == x.key)
            .ok_or(errno::FI_EKEYREJECTED)?;
        if r.access & access != access {
            return Err(errno::FI_EACCES);
        }
        let start = if self.virt {
            r.buf.base as u64
        } else {
            r.offset
        };
        let end = start + r.buf.len as u64;
        let ok = x.addr >= start && x.addr.checked_add(x.len as u64).is_some_and(|e| e <= end);
        if !ok {
            return Err(errno::FI_EACCES);
        }
        Ok(IoVec {
            base: r.buf.base + (x.addr - start) as usize,
            len: x.len,
        })
    }
}

/// The [`Memory`] a simulated side lends its `Rx`.
pub struct SimMemory(pub Arc<Mutex<SimTarget>>);

impl Memory for SimMemory {
    fn resolve(&mut self, ranges: &[RmaIov], access: u64, out: &mut [IoVec]) -> Result<Grant, i32> {
        let mut t = self.0.lock().unwrap();
        assert_eq!(out.len(), ranges.len());
        // The permission, and what the access counts as.
        let (access, counted) = if access & COUNT_AS_READ != 0 {
            (access & !COUNT_AS_READ, FI_REMOTE_READ)
        } else {
            (access, access)
        };
        for (o, x) in out.iter_mut().zip(ranges) {
            *o = t.resolve_one(x, access)?;
        }
        let g = t.next;
        t.next += 1;
        t.grants.insert(g, (counted, out.to_vec()));
        Ok(Grant(g))
    }
    fn release(&mut self, grant: Grant, done: bool) {
        let mut t = self.0.lock().unwrap();
        let (access, _) = t
            .grants
            .remove(&grant.0)
            .expect("release of an unknown grant");
        if !done {
            t.released_undone += 1;
        } else if access == FI_REMOTE_READ {
            t.remote_reads += 1;
        } else {
            assert_eq!(access, FI_REMOTE_WRITE);
            t.remote_writes += 1;
        }
    }
    fn live(&mut self, grant: Grant) -> bool {
        let t = self.0.lock().unwrap();
        let (_, iov) = t.grants.get(&grant.0).expect("live of an unknown grant");
        !iov.iter().any(|v| t.in_revoked(*v))
    }
    fn check_durable(&mut self, grant: Grant) -> Result<(), i32> {
        let t = self.0.lock().unwrap();
        let (_, iov) = t.grants.get(&grant.0).expect("check of an unknown grant");
        let all = iov
            .iter()
            .all(|v| t.region_of(*v).is_some_and(|r| t.durable.contains(&r.key)));
        if all {
            Ok(())
        } else {
            Err(errno::FI_EOPNOTSUPP)
        }
    }
    fn persist(&mut self, grant: Grant) -> Result<(), i32> {
        let mut t = self.0.lock().unwrap();
        if let Some(e) = t.fail_persist {
            return Err(e);
        }
        let (_, iov) = t
            .grants
            .get(&grant.0)
            .expect("persist of an unknown grant")
            .clone();
        for v in iov {
            assert!(
                t.region_of(v).is_some_and(|r| t.durable.contains(&r.key)),
                "persist of a range check_durable refused: {v:?}"
            );
            let bytes = t.mem.get(v).to_vec();
            t.persisted.push((v, bytes));
        }
        Ok(())
    }
    fn read(&mut self, from: IoVec, into: &mut [u8]) {
        let mut t = self.0.lock().unwrap();
        assert!(t.inside(from), "capture outside every region: {from:?}");
        into.copy_from_slice(t.mem.get(from));
        t.copies += 1;
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
        let mut t = self.0.lock().unwrap();
        let target = t
            .grants
            .get(&grant.0)
            .expect("atomic on an unknown grant")
            .1[index];
        ofi_base::atomic::apply(
            args.kind,
            args.op,
            args.datatype,
            t.mem.get_mut(target),
            operand,
            compare,
            result,
        )
        .map_err(|e| e.code())
    }
}

/// One endpoint: its receive side, its connections, its memory.
pub struct Side {
    pub addr: Vec<u8>,
    pub rx: Rx,
    pub mem: Mem,
    pub conns: Vec<Conn>,
    pub rx_events: Vec<Event>,
    pub conn_events: Vec<(ConnId, Event)>,
    /// Accept every HELLO with this private data.
    pub auto_accept: Option<Vec<u8>>,
    /// Buffers receives were posted with: payload reads must land inside.
    pub posted_regions: Vec<IoVec>,
    pub stats: Stats,
    pub wakeups: usize,
    /// Registered memory peers' one-sided requests run against.
    pub target: Option<Arc<Mutex<SimTarget>>>,
}

impl Side {
    /// Makes this side an RMA target (virtual or offset addressing).
    pub fn make_target(&mut self, virt: bool) -> Arc<Mutex<SimTarget>> {
        let t = SimTarget::new(virt);
        self.rx.set_memory(Some(Box::new(SimMemory(t.clone()))));
        self.target = Some(t.clone());
        t
    }

    /// The outcome of one-sided request `context`, if it completed.
    pub fn rma_result(&self, context: usize) -> Option<Result<(), i32>> {
        self.conn_events.iter().find_map(|(_, e)| match e {
            Event::RmaComplete { context: c } if *c == context => Some(Ok(())),
            Event::RmaError { context: c, err } if *c == context => Some(Err(*err)),
            _ => None,
        })
    }

    /// Remote CQ data entries delivered here: (flags, len, data, src).
    pub fn remote_cq(&self) -> Vec<(u64, usize, u64, u64)> {
        self.rx_events
            .iter()
            .filter_map(|e| match e {
                Event::RemoteCqData {
                    flags,
                    len,
                    data,
                    src,
                } => Some((*flags, *len, *data, *src)),
                _ => None,
            })
            .collect()
    }

    /// Bytes of `v`, in user or registered memory.
    pub fn bytes(&self, v: IoVec) -> Vec<u8> {
        match &self.target {
            Some(t) if v.base >= RMA_BASE => t.lock().unwrap().mem.get(v).to_vec(),
            _ => self.mem.get(v).to_vec(),
        }
    }

    pub fn new(addr: &[u8], rx_cfg: RxConfig) -> Self {
        Side {
            addr: addr.to_vec(),
            rx: Rx::new(rx_cfg),
            mem: Mem::default(),
            conns: Vec::new(),
            rx_events: Vec::new(),
            conn_events: Vec::new(),
            auto_accept: Some(Vec::new()),
            posted_regions: Vec::new(),
            stats: Stats::default(),
            wakeups: 0,
            target: None,
        }
    }

    /// Posts a receive and remembers its buffers.
    pub fn post(&mut self, r: RecvReq) -> Result<(), i32> {
        self.posted_regions
            .extend_from_slice(&r.iov[..r.iov_cnt.min(r.iov.len())]);
        let res = self.rx.post_recv(&r);
        self.pump();
        res
    }

    pub fn send(&mut self, conn: ConnId, r: SendReq) -> Result<(), i32> {
        self.conns[conn as usize].queue_send(r)
    }

    /// Collects events, performs CopyOut copies, answers HELLOs.
    pub fn pump(&mut self) {
        for c in self.conns.iter_mut() {
            while let Some(e) = c.poll_event() {
                if let Event::ConnRequest { .. } = e {
                    if let Some(pd) = &self.auto_accept {
                        c.accept(pd).expect("accept");
                    }
                }
                self.conn_events.push((c.id(), e));
            }
        }
        while let Some(mut e) = self.rx.poll_event() {
            if let Event::RecvComplete(RecvDone { copy, .. }) = &mut e {
                if let Some(c) = copy.take() {
                    let n = self.mem.scatter(c.iov(), c.offset, &c.bytes);
                    assert_eq!(n, c.bytes.len(), "CopyOut larger than the receive");
                    self.stats.copied_bytes += n;
                    self.rx.recycle(c.bytes);
                }
            }
            self.rx_events.push(e);
        }
        while self.rx.next_wakeup().is_some() {
            self.wakeups += 1;
        }
    }

    /// The completion of receive `context` (panics if missing).
    pub fn done(&self, context: usize) -> RecvDone {
        self.try_done(context)
            .unwrap_or_else(|| panic!("no completion for receive {context}: {:?}", self.rx_events))
    }
    pub fn try_done(&self, context: usize) -> Option<RecvDone> {
        self.rx_events.iter().find_map(|e| match e {
            Event::RecvComplete(d) if d.context == context => Some(d.clone()),
            _ => None,
        })
    }
    /// Every receive-side event for `context`.
    pub fn rx_events_for(&self, context: usize) -> Vec<&Event> {
        self.rx_events
            .iter()
            .filter(|e| match e {
                Event::RecvComplete(d) => d.context == context,
                Event::RecvError { context: c, .. } | Event::RecvCanceled { context: c, .. } => {
                    *c == context
                }
                _ => false,
            })
            .collect()
    }
    /// Send contexts completed, in order.
    pub fn sends_done(&self) -> Vec<usize> {
        self.conn_events
            .iter()
            .filter_map(|(_, e)| match e {
                Event::SendComplete { context } => Some(*context),
                _ => None,
            })
            .collect()
    }
    pub fn send_errors(&self) -> Vec<(usize, i32)> {
        self.conn_events
            .iter()
            .filter_map(|(_, e)| match e {
                Event::SendError { context, err } => Some((*context, *err)),
                _ => None,
            })
            .collect()
    }
    /// Receive contexts completed successfully, in completion order.
    pub fn recvs_done(&self) -> Vec<usize> {
        self.rx_events
            .iter()
            .filter_map(|e| match e {
                Event::RecvComplete(d) => Some(d.context),
                _ => None,
            })
            .collect()
    }
    pub fn has_conn_event(&self, f: impl Fn(&Event) -> bool) -> bool {
        self.conn_events.iter().any(|(_, e)| f(e))
    }
}

/// A connection between two sides: `ends[i]` is (side, conn), `pipes[i]`
/// the bytes in flight toward end `i`.
pub struct Link {
    pub ends: [(usize, ConnId); 2],
    pub pipes: [VecDeque<u8>; 2],
    /// Once set, nothing more is delivered.
    pub cut: bool,
    /// Bytes that may still be delivered toward each end (`None`: any).
    pub limit: [Option<usize>; 2],
}

/// How many bytes one simulated read or write moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Splits {
    /// 1 byte, a few, up to a page, or everything, at random.
    Random,
    /// Always one byte.
    Bytewise,
    /// Always everything the target takes.
    Whole,
}

pub struct World {
    pub sides: Vec<Side>,
    pub links: Vec<Link>,
    pub rng: XorShift,
    pub splits: Splits,
    pub cfg: Config,
}

impl World {
    pub fn new(seed: u64, cfg: Config) -> Self {
        World {
            sides: Vec::new(),
            links: Vec::new(),
            rng: XorShift::new(seed),
            splits: Splits::Random,
            cfg,
        }
    }

    pub fn add_side(&mut self, addr: &[u8], rx_cfg: RxConfig) -> usize {
        self.sides.push(Side::new(addr, rx_cfg));
        self.sides.len() - 1
    }

    /// Opens a connection from `client` to `server` (HELLO queued, the
    /// server side waiting for it); returns (link, client conn, server conn).
    /// Each side's peer fi_addr is the other side's index.
    pub fn connect(&mut self, client: usize, server: usize, pd: &[u8]) -> (usize, ConnId, ConnId) {
        let cid = self.sides[client].conns.len() as ConnId;
        let caddr = self.sides[client].addr.clone();
        let c = Conn::connect(cid, server as u64, self.cfg, &caddr, pd).expect("connect");
        self.sides[client].conns.push(c);
        let sid = self.sides[server].conns.len() as ConnId;
        self.sides[server]
            .conns
            .push(Conn::incoming(sid, client as u64, self.cfg));
        self.links.push(Link {
            ends: [(client, cid), (server, sid)],
            pipes: [VecDeque::new(), VecDeque::new()],
            cut: false,
            limit: [None, None],
        });
        (self.links.len() - 1, cid, sid)
    }

    /// [`connect`](Self::connect) with auth keys on either end (`None`: no
    /// key); the nonces come from the world's seeded generator.
    pub fn connect_auth(
        &mut self,
        client: usize,
        server: usize,
        pd: &[u8],
        client_key: Option<&[u8]>,
        server_key: Option<&[u8]>,
    ) -> (usize, ConnId, ConnId) {
        let (l, cid, sid) = self.connect(client, server, pd);
        for (side, id, key) in [(client, cid, client_key), (server, sid, server_key)] {
            let Some(k) = key.and_then(|k| AuthKey::new(k).expect("key")) else {
                continue;
            };
            let mut nonce = [0u8; NONCE_LEN];
            for b in nonce.iter_mut() {
                *b = self.rng.next_u64() as u8;
            }
            let c = std::mem::replace(
                &mut self.sides[side].conns[id as usize],
                Conn::incoming(id, 0, self.cfg),
            );
            self.sides[side].conns[id as usize] = c.with_auth(k, nonce);
        }
        (l, cid, sid)
    }

    /// A connected pair: side 0 (client, address "A") and side 1 (server,
    /// "B"), link 0, conn 0 on each side.
    pub fn pair(seed: u64, cfg: Config, rx_cfg: RxConfig) -> World {
        let mut w = World::new(seed, cfg);
        w.add_side(b"A", rx_cfg);
        w.add_side(b"B", rx_cfg);
        w.connect(0, 1, b"");
        w.run();
        for s in w.sides.iter_mut() {
            s.conn_events.clear();
            s.stats = Stats::default();
        }
        w
    }

    pub fn conn(&mut self, side: usize, id: ConnId) -> &mut Conn {
        &mut self.sides[side].conns[id as usize]
    }

    fn pick(&mut self) -> usize {
        match self.splits {
            Splits::Bytewise => 1,
            Splits::Whole => usize::MAX,
            Splits::Random => match self.rng.below(4) {
                0 => 1,
                1 => self.rng.range(1, 16),
                2 => self.rng.range(1, 4096),
                _ => usize::MAX,
            },
        }
    }

    /// Writes up to `limit` bytes from end `end` of link `l`.
    pub fn tx(&mut self, l: usize, end: usize, limit: usize) -> usize {
        if self.links[l].cut {
            return 0;
        }
        let (s, c) = self.links[l].ends[end];
        let side = &mut self.sides[s];
        let conn = &mut side.conns[c as usize];
        let mut out = Vec::new();
        {
            let t = conn.poll_transmit(&mut side.rx);
            for sl in t.iter() {
                if out.len() >= limit {
                    break;
                }
                let room = limit - out.len();
                match sl {
                    TxSlice::Bytes(b) => out.extend_from_slice(&b[..b.len().min(room)]),
                    TxSlice::Iov(v) if v.base >= RMA_BASE => {
                        let t = side
                            .target
                            .as_ref()
                            .expect("registered memory")
                            .lock()
                            .unwrap();
                        assert!(t.inside(v), "answer from outside every region: {v:?}");
                        let b = t.mem.get(v);
                        out.extend_from_slice(&b[..b.len().min(room)]);
                    }
                    TxSlice::Iov(v) => {
                        let b = side.mem.get(v);
                        out.extend_from_slice(&b[..b.len().min(room)]);
                    }
                }
            }
        }
        let n = out.len();
        if n > 0 {
            conn.on_written(n);
            side.stats.written += n;
            self.links[l].pipes[1 - end].extend(out);
        }
        side.pump();
        n
    }

    /// The driver's fast path for a send on `side`'s connection `conn`
    /// ([`Conn::frame_now`]): when taken, the frame is built (payload from
    /// the side's memory), at most `room` bytes of it go into the pipe at
    /// once and the rest is left to the connection ([`Conn::frame_written`]).
    /// `None`: not taken (the caller queues the send); `Some(true)`: written
    /// whole, complete; `Some(false)`: part staged, completes as `req.context`.
    pub fn send_now(
        &mut self,
        side: usize,
        conn: ConnId,
        req: SendReq,
        room: usize,
    ) -> Option<bool> {
        let l = self
            .links
            .iter()
            .position(|l| l.ends.contains(&(side, conn)))
            .expect("a link for this connection");
        let end = self.links[l]
            .ends
            .iter()
            .position(|e| *e == (side, conn))
            .expect("end");
        let sd = &mut self.sides[side];
        let c = &mut sd.conns[conn as usize];
        let mut hdr = [0u8; ofi_wire::tcp::HDR_LEN];
        let total = c.frame_now(&req, &mut hdr)?;
        let mut frame = hdr.to_vec();
        frame.extend_from_slice(&sd.mem.gather(req.iov()));
        assert_eq!(frame.len(), total, "frame_now's length");
        let n = room.min(total);
        let whole = c.frame_written(&frame, n, req.context);
        assert_eq!(whole, n == total);
        sd.stats.written += n;
        self.links[l].pipes[1 - end].extend(&frame[..n]);
        Some(whole)
    }

    /// Reads up to `limit` bytes at end `end` of link `l`.
    pub fn rx(&mut self, l: usize, end: usize, limit: usize) -> usize {
        if self.links[l].cut {
            return 0;
        }
        let (s, c) = self.links[l].ends[end];
        let side = &mut self.sides[s];
        let conn = &mut side.conns[c as usize];
        let cap = self.links[l].limit[end].unwrap_or(usize::MAX);
        let pipe = &mut self.links[l].pipes[end];
        let avail = pipe.len().min(limit).min(cap);
        let n = match conn.recv_target(&mut side.rx) {
            Target::Header(b) => {
                let n = avail.min(b.len());
                for (d, s) in b.iter_mut().zip(pipe.drain(..n)) {
                    *d = s;
                }
                side.stats.header_bytes += n;
                n
            }
            Target::Buffer(b) => {
                let n = avail.min(b.len());
                for (d, s) in b.iter_mut().zip(pipe.drain(..n)) {
                    *d = s;
                }
                side.stats.buffer_bytes += n;
                n
            }
            Target::Payload(iov) => {
                assert!(!iov.is_empty(), "empty payload target");
                let mut n = 0;
                for v in iov {
                    assert!(v.len > 0, "zero-length payload range");
                    if v.base >= RMA_BASE {
                        let t = side
                            .target
                            .as_ref()
                            .expect("registered memory")
                            .lock()
                            .unwrap();
                        assert!(t.inside(*v), "payload range {v:?} outside every region");
                    } else {
                        assert!(
                            side.posted_regions
                                .iter()
                                .any(|r| v.base >= r.base && v.base + v.len <= r.base + r.len),
                            "payload range {v:?} outside every posted buffer"
                        );
                    }
                    if n == avail {
                        break;
                    }
                    let k = (avail - n).min(v.len);
                    let bytes: Vec<u8> = pipe.drain(..k).collect();
                    if v.base >= RMA_BASE {
                        let t = side.target.as_ref().expect("registered memory");
                        t.lock().unwrap().mem.put(v.base, &bytes);
                    } else {
                        side.mem.put(v.base, &bytes);
                    }
                    n += k;
                }
                side.stats.payload_bytes += n;
                n
            }
            Target::Discard(left) => {
                assert!(left > 0, "empty discard target");
                let n = avail.min(left);
                pipe.drain(..n);
                side.stats.discard_bytes += n;
                n
            }
            Target::Blocked => {
                side.stats.blocked += 1;
                0
            }
            Target::Closed => 0,
        };
        if n > 0 {
            conn.on_read(n, &mut side.rx);
            if let Some(c) = &mut self.links[l].limit[end] {
                *c -= n;
            }
        }
        side.pump();
        n
    }

    /// Runs every link, both directions, with random splits, until nothing
    /// moves.
    pub fn run(&mut self) {
        let mut rounds = 0u64;
        loop {
            rounds += 1;
            assert!(rounds < 10_000_000, "no quiescence");
            let mut moved = 0;
            for _ in 0..self.links.len() * 4 {
                let l = self.rng.below(self.links.len());
                let end = self.rng.below(2);
                let lim = self.pick();
                moved += if self.rng.chance(2) {
                    self.tx(l, end, lim)
                } else {
                    self.rx(l, end, lim)
                };
            }
            if moved == 0 {
                // Confirm: a full pass that moves nothing.
                for l in 0..self.links.len() {
                    for end in 0..2 {
                        moved += self.tx(l, end, usize::MAX);
                        moved += self.rx(l, end, usize::MAX);
                    }
                }
                // Reading may have queued frames (a CTS for a message that
                // was parked): a driver checks `wants_transmit`.
                let pending = self.links.iter().any(|l| {
                    !l.cut
                        && l.ends
                            .iter()
                            .any(|&(s, c)| self.sides[s].conns[c as usize].wants_transmit())
                });
                if moved == 0 && !pending {
                    break;
                }
            }
        }
    }

    /// Ends link `l`: end `eof_end` reads EOF, the other end gets a socket
    /// error (as when the stream dies mid-transfer).
    pub fn cut(&mut self, l: usize, eof_end: usize, err: i32) {
        self.links[l].cut = true;
        let (s, c) = self.links[l].ends[eof_end];
        let side = &mut self.sides[s];
        side.conns[c as usize].on_eof(&mut side.rx);
        side.pump();
        let (s, c) = self.links[l].ends[1 - eof_end];
        let side = &mut self.sides[s];
        side.conns[c as usize].on_error(err, &mut side.rx);
        side.pump();
    }

    /// Bytes in flight on a link (both directions).
    pub fn in_flight(&self, l: usize) -> usize {
        self.links[l].pipes[0].len() + self.links[l].pipes[1].len()
    }
}
