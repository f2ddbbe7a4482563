//! Shared-memory segments: one per shm endpoint, a file in /dev/shm created
//! mode 0600, holding a header, the inbound message ring, a ring of free
//! bounce-buffer indices, cooperative-copy descriptors and the bounce
//! buffers, and the collectives' board ([`crate::board`]). Offsets, never
//! pointers.
//!
//! What safe code gets: the header's atomics; ring slots to fill or read
//! inside a closure, each claimed by one caller at a time; bounce buffers
//! as [`Bounce`] tokens, at most one per buffer and mapping in this
//! process; the message ring's reads through its one [`MsgConsumer`].
//! Within this process no two safe calls can hold references to the same
//! bytes. (A peer process shares the memory: a hostile peer can scribble on
//! the bytes of its own rings and buffers at any time, never outside the
//! mapping; every reader validates what it reads.)
#![allow(unsafe_code)]

use crate::board::{self, Lane};
use crate::proc;
use crate::ring::{self, Slots};
use crate::wake;
pub use crate::xfer::{XferDesc, XferLayout, XFER_RANGES};
use rustix::fs::{self, Mode, OFlags};
use rustix::io::Errno;
use rustix::mm;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Magic at the start of every segment.
pub const MAGIC: u64 = 0x6f66_695f_7368_6d31; // "ofi_shm1"
/// Layout version.
pub const VERSION: u32 = 4;
const READY: u32 = 0x5245_4459;
/// Directory segments live in.
pub const SHM_DIR: &str = "/dev/shm";
/// File-name prefix of every segment.
pub const PREFIX: &str = "ofi-shm-";

/// The segment header (first 256 bytes).
#[repr(C)]
pub struct SegHeader {
    /// [`MAGIC`].
    pub magic: AtomicU64,
    /// [`VERSION`].
    pub version: u32,
    /// Owner's process id.
    pub pid: u32,
    /// Owner's start time (clock ticks since boot), against pid reuse.
    pub start_time: u64,
    /// Total mapped size.
    pub total_size: u64,
    /// Message ring slots.
    pub ring_slots: u64,
    /// Bytes per message slot (including its 8-byte sequence).
    pub slot_size: u64,
    /// Bounce buffers.
    pub pool_bufs: u64,
    /// Bytes per bounce buffer.
    pub pool_buf_size: u64,
    /// Set once the owner finished initialising.
    pub ready: AtomicU32,
    /// Set when the owner closed its endpoint (its process may live on).
    pub closed: AtomicU32,
    /// Non-zero when the owner's endpoint has an auth key: only peers that
    /// prove the same key may talk to it (public: never the key itself).
    pub keyed: AtomicU32,
    _pad0: [u8; 52],
    /// Non-zero while the owner is (about to be) asleep: producers ring its doorbell.
    pub sleeping: AtomicU32,
    _pad1: [u8; 60],
    /// The owner's heartbeat: bumped while its endpoint makes progress, so
    /// a peer tells a live but busy owner from a stuck one. Its own cache
    /// line: peers read it rarely, and nothing on the fast path shares it.
    pub beat: AtomicU64,
    _pad2: [u8; 56],
}

/// A ring's indices, each on its own cache lines.
#[repr(C)]
pub struct RingHeader {
    tail: AtomicU64,
    _p0: [u8; 120],
    head: AtomicU64,
    _p1: [u8; 120],
}

const _: () = assert!(std::mem::size_of::<SegHeader>() == 256);
const _: () = assert!(std::mem::offset_of!(SegHeader, sleeping) == 128);
const _: () = assert!(std::mem::offset_of!(SegHeader, beat) == 192);
const _: () = assert!(std::mem::size_of::<RingHeader>() == 256);

const MSG_RING_OFF: usize = 256;
const FREE_RING_OFF: usize = 512;
const SLOTS_OFF: usize = 4096;
const FREE_SLOT_SIZE: usize = 16;
/// Cooperative transfer descriptors per segment.
pub const XFER_DESCS: usize = 16;

/// Sizes of a segment's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Message ring slots (power of two, 2..=65536).
    pub ring_slots: usize,
    /// Bytes per slot (multiple of 64, 128..=1 MiB).
    pub slot_size: usize,
    /// Bounce buffers (power of two, 1..=65536).
    pub pool_bufs: usize,
    /// Bytes per bounce buffer (multiple of 4096).
    pub pool_buf_size: usize,
}

impl Geometry {
    /// Checks the sizes; a hostile header cannot make offsets overflow.
    pub fn validate(&self) -> io::Result<()> {
        let bad = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidData, m.to_string()));
        if !self.ring_slots.is_power_of_two() || !(2..=65536).contains(&self.ring_slots) {
            return bad("ring_slots must be a power of two in 2..=65536");
        }
        if !self.slot_size.is_multiple_of(64) || !(128..=1 << 20).contains(&self.slot_size) {
            return bad("slot_size must be a multiple of 64 in 128..=1MiB");
        }
        if !self.pool_bufs.is_power_of_two() || self.pool_bufs > 65536 {
            return bad("pool_bufs must be a power of two up to 65536");
        }
        if !self.pool_buf_size.is_multiple_of(4096)
            || self.pool_buf_size == 0
            || self.pool_buf_size > 16 << 20
        {
            return bad("pool_buf_size must be a multiple of 4096 up to 16MiB");
        }
        Ok(())
    }
    fn free_slots_off(&self) -> usize {
        SLOTS_OFF + self.ring_slots * self.slot_size
    }
    fn xfer_off(&self) -> usize {
        (self.free_slots_off() + self.pool_bufs * FREE_SLOT_SIZE).next_multiple_of(128)
    }
    fn board_off(&self) -> usize {
        (self.xfer_off() + XFER_DESCS * std::mem::size_of::<XferDesc>()).next_multiple_of(128)
    }
    fn pool_off(&self) -> usize {
        (self.board_off() + board::LANES * board::LANE_SIZE).next_multiple_of(4096)
    }
    /// Total bytes of a segment with these sizes.
    pub fn total(&self) -> usize {
        self.pool_off() + self.pool_bufs * self.pool_buf_size
    }
}

/// Path of an endpoint's segment.
pub fn segment_path(uid: u32, pid: u32, idx: u32) -> PathBuf {
    PathBuf::from(format!("{SHM_DIR}/{PREFIX}{uid}-{pid}-{idx}"))
}

/// Path of an endpoint's doorbell.
pub fn bell_path(uid: u32, pid: u32, idx: u32) -> PathBuf {
    PathBuf::from(format!("{SHM_DIR}/{PREFIX}{uid}-{pid}-{idx}.bell"))
}

/// A mapped segment (own or a peer's).
pub struct Segment {
    base: *mut u8,
    len: usize,
    geo: Geometry,
    path: PathBuf,
    owner: bool,
    /// Distinguishes mappings, so a [`MsgConsumer`] works on its own only.
    id: u64,
    /// Bounce buffers this process holds a [`Bounce`] for, one bit each
    /// (process memory, not shared).
    held: Box<[AtomicU64]>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

// SAFETY: the mapping is shared memory accessed only through atomics,
// claimed ring slots and bounce tokens; the pointer itself is immutable for
// the mapping's life.
unsafe impl Send for Segment {}
// SAFETY: as above; no method hands out unsynchronised &mut access: ring
// slots are claimed by CAS, bounce buffers by the `held` bits, the message
// ring's reads need the one `MsgConsumer` (`&mut`).
unsafe impl Sync for Segment {}

fn held_bits(pool_bufs: usize) -> Box<[AtomicU64]> {
    (0..pool_bufs.div_ceil(64))
        .map(|_| AtomicU64::new(0))
        .collect()
}

fn map(fd: &OwnedFd, len: usize) -> io::Result<*mut u8> {
    // SAFETY: a new shared mapping of a file we hold open, at an address the
    // kernel picks (nothing existing is replaced); the result is checked.
    let p = unsafe {
        mm::mmap(
            std::ptr::null_mut(),
            len,
            mm::ProtFlags::READ | mm::ProtFlags::WRITE,
            mm::MapFlags::SHARED,
            fd,
            0,
        )
    }?;
    Ok(p.cast())
}

impl Segment {
    /// Creates and initialises this process's segment (mode 0600), with the
    /// one consumer of its message ring; `keyed` says whether its endpoint
    /// has an auth key (peers read it from the header). A stale file at the
    /// same path (a dead process with a reused pid) is replaced.
    pub fn create(path: &Path, geo: Geometry, keyed: bool) -> io::Result<(Segment, MsgConsumer)> {
        geo.validate()?;
        let fd = loop {
            match fs::open(
                path,
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => break fd,
                // A stale file of a dead process with a reused pid.
                Err(Errno::EXIST) => {
                    let _ = fs::unlink(path);
                }
                Err(e) => return Err(e.into()),
            }
        };
        let total = geo.total();
        // The mapping (if any) keeps the file; the fd closes on return.
        let mapped = fs::ftruncate(&fd, total as u64)
            .map_err(io::Error::from)
            .and_then(|()| map(&fd, total));
        let base = match mapped {
            Ok(b) => b,
            Err(e) => {
                let _ = fs::unlink(path);
                return Err(e);
            }
        };
        let seg = Segment {
            base,
            len: total,
            geo,
            path: path.to_path_buf(),
            owner: true,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            held: held_bits(geo.pool_bufs),
        };
        let pid = std::process::id();
        // SAFETY: freshly mapped, zeroed, nobody else has it yet; header is in bounds.
        let h = unsafe { &mut *(base as *mut SegHeader) };
        h.version = VERSION;
        h.pid = pid;
        h.start_time = proc::start_time(pid).unwrap_or(0);
        h.total_size = total as u64;
        h.ring_slots = geo.ring_slots as u64;
        h.slot_size = geo.slot_size as u64;
        h.pool_bufs = geo.pool_bufs as u64;
        h.pool_buf_size = geo.pool_buf_size as u64;
        h.keyed.store(u32::from(keyed), Ordering::Relaxed);
        let free = seg.free_ring();
        // SAFETY: nobody else has mapped the segment yet.
        unsafe {
            ring::init(&seg.raw_msg_ring());
            ring::init(&free);
        }
        for i in 0..geo.pool_bufs as u64 {
            // SAFETY: payload is 8 bytes, enough for a u64 index.
            let _ = ring::push(&free, |p, _| unsafe { (p as *mut u64).write_unaligned(i) });
        }
        h.magic.store(MAGIC, Ordering::Relaxed);
        h.ready.store(READY, Ordering::Release);
        let consumer = MsgConsumer {
            // SAFETY: the only consumer of this fresh ring: `create` is the
            // one place that makes one, once per segment.
            inner: unsafe { ring::Consumer::new() },
            seg: seg.id,
        };
        Ok((seg, consumer))
    }

    /// Maps a peer's segment after checking its header against the file.
    pub fn open(path: &Path, expect_pid: u32) -> io::Result<Segment> {
        let fd = fs::open(path, OFlags::RDWR | OFlags::CLOEXEC, Mode::empty())?;
        let size = fs::fstat(&fd)?.st_size as usize;
        // The mapping keeps the file alive; the fd closes on return.
        let res = if size < SLOTS_OFF {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "segment too small",
            ))
        } else {
            map(&fd, size)
        };
        let base = res?;
        let mut seg = Segment {
            base,
            len: size,
            geo: Geometry {
                ring_slots: 2,
                slot_size: 128,
                pool_bufs: 1,
                pool_buf_size: 4096,
            },
            path: path.to_path_buf(),
            owner: false,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            held: Box::new([]),
        };
        let h = seg.header();
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        if h.ready.load(Ordering::Acquire) != READY || h.magic.load(Ordering::Relaxed) != MAGIC {
            return Err(invalid("segment is not initialised"));
        }
        if h.version != VERSION {
            return Err(invalid("segment layout version differs"));
        }
        if h.pid != expect_pid {
            return Err(invalid("segment belongs to another process"));
        }
        let geo = Geometry {
            ring_slots: h.ring_slots as usize,
            slot_size: h.slot_size as usize,
            pool_bufs: h.pool_bufs as usize,
            pool_buf_size: h.pool_buf_size as usize,
        };
        geo.validate()?;
        if geo.total() > size || h.total_size as usize != geo.total() {
            return Err(invalid("segment header disagrees with the file size"));
        }
        seg.geo = geo;
        seg.held = held_bits(geo.pool_bufs);
        Ok(seg)
    }

    /// The header.
    pub fn header(&self) -> &SegHeader {
        // SAFETY: the mapping is at least SLOTS_OFF bytes, page aligned; the
        // header's mutable fields are atomics.
        unsafe { &*(self.base as *const SegHeader) }
    }

    /// The sizes in force.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// The inbound message ring's producer side (many producers; the one
    /// consumer is the [`MsgConsumer`] `create` returned).
    pub fn msg_ring(&self) -> MsgRing<'_> {
        MsgRing(self.raw_msg_ring())
    }

    fn raw_msg_ring(&self) -> ShmRing<'_> {
        ShmRing {
            // SAFETY: MSG_RING_OFF + 256 <= SLOTS_OFF <= len.
            hdr: unsafe { &*(self.base.add(MSG_RING_OFF) as *const RingHeader) },
            // SAFETY: slots lie inside the validated geometry.
            slots: unsafe { self.base.add(SLOTS_OFF) },
            cap: self.geo.ring_slots as u64,
            slot_size: self.geo.slot_size,
        }
    }

    /// The ring of free bounce-buffer indices.
    pub(crate) fn free_ring(&self) -> ShmRing<'_> {
        ShmRing {
            // SAFETY: FREE_RING_OFF + 256 <= SLOTS_OFF <= len.
            hdr: unsafe { &*(self.base.add(FREE_RING_OFF) as *const RingHeader) },
            // SAFETY: free slots lie inside the validated geometry.
            slots: unsafe { self.base.add(self.geo.free_slots_off()) },
            cap: self.geo.pool_bufs as u64,
            slot_size: FREE_SLOT_SIZE,
        }
    }

    /// Sender: takes a free bounce buffer of this (the receiver's) segment.
    /// None when none is free (or the ring names a buffer out of range or
    /// already held here: a misbehaving owner).
    pub fn alloc_bounce(&self) -> Option<Bounce<'_>> {
        // SAFETY: the payload holds the 8-byte index written by `release`.
        let idx = ring::pop(&self.free_ring(), |p, _| unsafe {
            (p as *const u64).read_unaligned()
        })?;
        self.hold(idx)
    }

    /// Receiver: the bounce buffer an entry names, handed over by its
    /// sender. None for an index out of range, or one this process already
    /// holds (an entry naming a buffer twice).
    pub fn take_bounce(&self, idx: u64) -> Option<Bounce<'_>> {
        self.hold(idx)
    }

    fn hold(&self, idx: u64) -> Option<Bounce<'_>> {
        if idx >= self.geo.pool_bufs as u64 {
            return None;
        }
        let (word, bit) = ((idx / 64) as usize, 1u64 << (idx % 64));
        let w = self.held.get(word)?;
        if w.fetch_or(bit, Ordering::Acquire) & bit != 0 {
            return None;
        }
        Some(Bounce {
            seg: self,
            idx: idx as u32,
        })
    }

    fn unhold(&self, idx: u32) {
        let (word, bit) = ((idx / 64) as usize, 1u64 << (idx % 64));
        if let Some(w) = self.held.get(word) {
            w.fetch_and(!bit, Ordering::Release);
        }
    }

    /// A cooperative transfer descriptor, or None for an out-of-range index.
    pub fn xfer(&self, idx: u64) -> Option<&XferDesc> {
        if idx >= XFER_DESCS as u64 {
            return None;
        }
        // SAFETY: idx < XFER_DESCS, so the descriptor lies inside the mapping
        // (validated geometry); it is 128-aligned and all-atomic.
        Some(unsafe {
            &*(self.base.add(self.geo.xfer_off() + idx as usize * 128) as *const XferDesc)
        })
    }

    /// Lane `idx` of the collectives' board, or None for an out-of-range
    /// index.
    pub fn lane(&self, idx: usize) -> Option<&Lane> {
        if idx >= board::LANES {
            return None;
        }
        // SAFETY: idx < LANES, so the lane lies inside the mapping
        // (validated geometry, board between the descriptors and the
        // pool); it is 128-aligned and all-atomic.
        Some(unsafe {
            &*(self.base.add(self.geo.board_off() + idx * board::LANE_SIZE) as *const Lane)
        })
    }

    /// Consumer (the owner): about to sleep; true when it may (see
    /// [`wake::arm`]). `pending` looks for work last.
    /// Call [`Segment::sleep_disarm`] after waking, whatever this returned.
    pub fn sleep_arm(&self, pending: impl FnOnce() -> bool) -> bool {
        wake::arm(&self.header().sleeping, pending)
    }

    /// Consumer: awake again.
    pub fn sleep_disarm(&self) {
        wake::disarm(&self.header().sleeping)
    }

    /// Producer, after publishing an entry: true when the owner may sleep
    /// and its doorbell must be rung.
    #[inline]
    pub fn must_ring(&self) -> bool {
        wake::must_ring(&self.header().sleeping)
    }

    /// Owner: one more heartbeat (see [`SegHeader::beat`]).
    #[inline]
    pub fn pulse(&self) {
        let b = &self.header().beat;
        b.store(b.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// The owner's heartbeat as last published.
    pub fn heartbeat(&self) -> u64 {
        self.header().beat.load(Ordering::Relaxed)
    }

    /// True when the owner's endpoint has an auth key.
    pub fn keyed(&self) -> bool {
        self.header().keyed.load(Ordering::Relaxed) != 0
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what we mapped; no reference into the
        // mapping outlives `self` (every borrow is tied to it).
        let _ = unsafe { mm::munmap(self.base.cast(), self.len) };
        if self.owner {
            let _ = fs::unlink(&self.path);
        }
    }
}

/// The message ring: producers are peers, the consumer is the owner.
pub struct MsgRing<'a>(ShmRing<'a>);

impl MsgRing<'_> {
    /// Producer: claims a slot and lets `fill` write its payload bytes.
    /// `cached_head` is this producer's view of the consumer's position.
    #[inline]
    pub fn push_with<R>(
        &self,
        cached_head: &AtomicU64,
        fill: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, ring::PushError> {
        ring::push_mpsc(&self.0, cached_head, |p, n| {
            // SAFETY: the ring hands out a claimed slot's payload exclusively.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, n) };
            fill(bytes)
        })
    }
    /// The positions producers have claimed so far (see [`ring::claimed`]):
    /// what a peer pushed before it closed lies below this, read after
    /// its close was seen.
    pub fn claimed(&self) -> u64 {
        ring::claimed(&self.0)
    }
    /// Entries claimed by producers and not yet released by the consumer
    /// (published or being filled): 0 when the owner has read everything.
    pub fn backlog(&self) -> u64 {
        ring::occupancy(&self.0)
    }
    /// The position the consumer last published (it moves while the owner
    /// reads its ring).
    pub fn consumed(&self) -> u64 {
        self.0.head().load(Ordering::Relaxed)
    }
    /// True when the entry at position `pos` is stamped (a probe any
    /// thread may make; the consumer's position is [`MsgConsumer::position`]).
    #[inline]
    pub fn ready(&self, pos: u64) -> bool {
        ring::ready_at(&self.0, pos)
    }
}

/// The one consumer of a segment's message ring: holding it (`&mut`) is
/// the right to read the ring's entries, one at a time.
#[derive(Debug)]
pub struct MsgConsumer {
    inner: ring::Consumer,
    seg: u64,
}

impl MsgConsumer {
    /// Takes the oldest stamped entry of `seg`'s ring and lets `read` see
    /// (and scratch) its bytes. None when nothing is stamped, or when `seg`
    /// is not the segment this consumer was made with.
    #[inline]
    pub fn pop_with<R>(&mut self, seg: &Segment, read: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        if seg.id != self.seg {
            return None;
        }
        self.inner.pop(&seg.raw_msg_ring(), |p, n| {
            // SAFETY: a stamped slot is this (only) consumer's until it
            // publishes past it; `p` points to its `n` payload bytes.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, n) };
            read(bytes)
        })
    }
    /// Lets producers reuse the slots read so far.
    #[inline]
    pub fn publish(&mut self, seg: &Segment) {
        if seg.id == self.seg {
            self.inner.publish(&seg.raw_msg_ring());
        }
    }
    /// True when an entry waits at this consumer's position.
    #[inline]
    pub fn ready(&self, seg: &Segment) -> bool {
        seg.id == self.seg && self.inner.ready(&seg.raw_msg_ring())
    }
    /// Entries consumed so far (the position an idle probe looks at).
    #[inline]
    pub fn position(&self) -> u64 {
        self.inner.position()
    }
}

/// A bounce buffer this process holds: taken from the free ring by a
/// sender ([`Segment::alloc_bounce`]) or named by an entry to its receiver
/// ([`Segment::take_bounce`]). At most one token per buffer and mapping
/// exists, so its bytes are this holder's alone (within this process).
/// Dropping it returns the buffer to the free ring; [`Bounce::hand_over`]
/// gives it to the segment's owner instead.
pub struct Bounce<'a> {
    seg: &'a Segment,
    idx: u32,
}

impl Bounce<'_> {
    /// The buffer's index (what an entry carries).
    pub fn index(&self) -> u64 {
        u64::from(self.idx)
    }
    fn ptr(&self) -> *mut u8 {
        let off = self.seg.geo.pool_off() + self.idx as usize * self.seg.geo.pool_buf_size;
        // SAFETY: idx < pool_bufs (checked by `hold`), so the buffer lies
        // inside the validated mapping.
        unsafe { self.seg.base.add(off) }
    }
    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: in bounds (see `ptr`); the held bit makes this token the
        // only one for the buffer in this process.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.seg.geo.pool_buf_size) }
    }
    /// The buffer's bytes, to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`; `&mut self` keeps this borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.seg.geo.pool_buf_size) }
    }
    /// The sender published an entry naming this buffer: ownership passes
    /// to the segment's owner, which frees it once read.
    pub fn hand_over(self) -> u64 {
        let idx = self.idx;
        self.seg.unhold(idx);
        std::mem::forget(self);
        u64::from(idx)
    }
}

impl std::fmt::Debug for Bounce<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bounce").field("index", &self.idx).finish()
    }
}

impl Drop for Bounce<'_> {
    fn drop(&mut self) {
        let idx = u64::from(self.idx);
        // SAFETY: the payload has room for the 8-byte index.
        let _ = ring::push(&self.seg.free_ring(), |p, _| unsafe {
            (p as *mut u64).write_unaligned(idx)
        });
        self.seg.unhold(self.idx);
    }
}

/// A ring inside a segment.
pub(crate) struct ShmRing<'a> {
    hdr: &'a RingHeader,
    slots: *mut u8,
    cap: u64,
    slot_size: usize,
}

// SAFETY: the capacity is a validated power of two; `seq` masks its index,
// so every slot's sequence word is inside the mapping, 8-aligned and its
// own; a payload is the bytes after its slot's sequence word.
unsafe impl Slots for ShmRing<'_> {
    #[inline]
    fn capacity(&self) -> u64 {
        self.cap
    }
    #[inline]
    fn tail(&self) -> &AtomicU64 {
        &self.hdr.tail
    }
    #[inline]
    fn head(&self) -> &AtomicU64 {
        &self.hdr.head
    }
    #[inline]
    fn seq(&self, idx: u64) -> &AtomicU64 {
        let idx = idx & (self.cap - 1);
        // SAFETY: idx < cap (masked above); each slot starts 8-aligned with
        // its sequence word.
        unsafe { &*(self.slots.add(idx as usize * self.slot_size) as *const AtomicU64) }
    }
    #[inline]
    unsafe fn with_payload<R>(&self, idx: u64, f: impl FnOnce(*mut u8, usize) -> R) -> R {
        // SAFETY: idx < cap (the caller's contract); the payload follows the
        // 8-byte sequence.
        let p = unsafe { self.slots.add(idx as usize * self.slot_size + 8) };
        f(p, self.slot_size - 8)
    }
}

/// Removes segments (and doorbells) left by dead processes of this user.
/// Returns how many were removed.
pub fn reclaim_stale(uid: u32) -> usize {
    let prefix = format!("{PREFIX}{uid}-");
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
        return 0;
    };
    let mut removed = 0;
    for e in dir.flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str() else { continue };
        let Some(rest) = n.strip_prefix(&prefix) else {
            continue;
        };
        if rest.starts_with("n-") {
            // A name's alias whose segment is gone.
            let dangling = std::fs::symlink_metadata(e.path())
                .is_ok_and(|m| m.file_type().is_symlink())
                && std::fs::metadata(e.path()).is_err();
            if dangling && std::fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
            continue;
        }
        let rest = rest.strip_suffix(".bell").unwrap_or(rest);
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        let stale = if !proc::alive(pid) {
            true
        } else if n.ends_with(".bell") {
            false
        } else {
            // A live pid whose start time differs is a reused pid.
            match (read_start_time(&e.path()), proc::start_time(pid)) {
                (Some(a), Some(b)) => a != 0 && a != b,
                _ => false,
            }
        };
        if stale && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn read_start_time(path: &Path) -> Option<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut b = [0u8; 24];
    f.read_exact(&mut b).ok()?;
    if u64::from_ne_bytes(b[0..8].try_into().ok()?) != MAGIC {
        return None;
    }
    Some(u64::from_ne_bytes(b[16..24].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_segment(tag: &str) -> (Segment, MsgConsumer) {
        let path = std::env::temp_dir().join(format!(
            "ofi-shm-unit-{}-{tag}-{}",
            std::process::id(),
            NEXT_ID.load(Ordering::Relaxed)
        ));
        let geo = Geometry {
            ring_slots: 4,
            slot_size: 128,
            pool_bufs: 2,
            pool_buf_size: 4096,
        };
        Segment::create(&path, geo, false).expect("segment in the temp dir")
    }

    #[test]
    fn any_sequence_index_stays_inside_the_ring() {
        // Before: `seq` indexed without a bound and this read far past the
        // mapping (SIGSEGV).
        let (seg, _c) = tmp_segment("seq");
        let free = seg.free_ring();
        let _ = free.seq(1 << 30).load(Ordering::Relaxed);
        let _ = free.seq(u64::MAX).load(Ordering::Relaxed);
        assert!(
            std::ptr::eq(free.seq(3), free.seq(1)),
            "indices wrap at the capacity"
        );
    }

    #[test]
    fn a_bounce_buffer_has_one_holder() {
        // Before: `with_bounce` handed out `&mut [u8]` for an index, and two
        // nested calls gave two live `&mut` to the same bytes.
        let (seg, _c) = tmp_segment("bounce");
        let mut a = seg.alloc_bounce().expect("a free buffer");
        assert!(
            seg.take_bounce(a.index()).is_none(),
            "a held buffer is refused"
        );
        a.as_mut_slice()[0] = 7;
        let b = seg.alloc_bounce().expect("the other buffer");
        assert_ne!(a.index(), b.index());
        assert!(seg.alloc_bounce().is_none(), "two buffers only");
        assert!(seg.take_bounce(2).is_none(), "out of range");
        // Handed over (as by an entry), then taken by the receiver once.
        let ia = a.hand_over();
        let got = seg.take_bounce(ia).expect("the receiver takes it");
        assert_eq!(got.as_slice()[0], 7);
        assert!(seg.take_bounce(ia).is_none(), "taken once at a time");
        drop(got);
        drop(b);
        // Both dropped tokens went back to the free ring.
        let x = seg.alloc_bounce().expect("freed");
        let y = seg.alloc_bounce().expect("freed");
        assert_ne!(x.index(), y.index());
    }

    #[test]
    fn the_consumer_reads_its_own_segment_only() {
        let (seg, mut c) = tmp_segment("own");
        let (other, _oc) = tmp_segment("other");
        let cached = AtomicU64::new(0);
        other.msg_ring().push_with(&cached, |b| b[0] = 1).unwrap();
        assert!(c.pop_with(&other, |_| ()).is_none(), "not its ring");
        seg.msg_ring().push_with(&cached, |b| b[0] = 9).unwrap();
        assert!(c.ready(&seg));
        assert_eq!(c.pop_with(&seg, |b| b[0]), Some(9));
        c.publish(&seg);
        assert_eq!(c.position(), 1);
    }
}
