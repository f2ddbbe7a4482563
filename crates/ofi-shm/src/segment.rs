//! Shared-memory segments: one per shm endpoint, a file in /dev/shm created
//! mode 0600, holding a header, the inbound message ring, a ring of free
//! bounce-buffer indices and the bounce buffers. Offsets, never pointers.
#![allow(unsafe_code)]

use crate::proc;
use crate::ring::{self, Slots};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Magic at the start of every segment.
pub const MAGIC: u64 = 0x6f66_695f_7368_6d31; // "ofi_shm1"
/// Layout version.
pub const VERSION: u32 = 2;
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
    _pad0: [u8; 56],
    /// Non-zero while the owner is (about to be) asleep: producers ring its doorbell.
    pub sleeping: AtomicU32,
    _pad1: [u8; 124],
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
const _: () = assert!(std::mem::size_of::<RingHeader>() == 256);

const MSG_RING_OFF: usize = 256;
const FREE_RING_OFF: usize = 512;
const SLOTS_OFF: usize = 4096;
const FREE_SLOT_SIZE: usize = 16;
/// Cooperative transfer descriptors per segment.
pub const XFER_DESCS: usize = 16;

/// A cooperative large-message copy: the receiver publishes its buffer
/// ranges, and both processes claim chunks and copy them across (the
/// receiver reading, the sender writing) until all are done. Lives in the
/// receiver's segment; every field is atomic.
#[repr(C)]
pub struct XferDesc {
    /// `generation << 32 | next chunk`: claims are CAS'd against the
    /// generation the sender was told, so a stale claim fails.
    pub claim: AtomicU64,
    /// Chunks finished (by either side).
    pub done: AtomicU64,
    /// First error number a copier met, 0 when none.
    pub failed: AtomicU64,
    /// Number of chunks.
    pub nchunks: AtomicU64,
    /// Bytes per chunk.
    pub chunk: AtomicU64,
    /// Bytes to copy.
    pub total: AtomicU64,
    /// Receiver ranges in use.
    pub recv_cnt: AtomicU64,
    _pad: AtomicU64,
    /// Receiver buffer ranges (address, length) in the receiver's address space.
    pub recv_iov: [[AtomicU64; 2]; 4],
}

const _: () = assert!(std::mem::size_of::<XferDesc>() == 128);

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
    fn pool_off(&self) -> usize {
        (self.xfer_off() + XFER_DESCS * std::mem::size_of::<XferDesc>()).next_multiple_of(4096)
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
}

// SAFETY: the mapping is shared memory accessed only through atomics and
// ring-owned slots; the pointer itself is immutable for the mapping's life.
unsafe impl Send for Segment {}
// SAFETY: as above; no method hands out unsynchronised &mut access.
unsafe impl Sync for Segment {}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

fn map(fd: libc::c_int, len: usize) -> io::Result<*mut u8> {
    // SAFETY: mapping a file we hold open; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

impl Segment {
    /// Creates and initialises this process's segment (mode 0600). A stale
    /// file at the same path (a dead process with a reused pid) is replaced.
    pub fn create(path: &Path, geo: Geometry) -> io::Result<Segment> {
        geo.validate()?;
        let c = cpath(path)?;
        let mut fd;
        loop {
            // SAFETY: c is a valid C string; flags create a new private file.
            fd = unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if fd >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EEXIST) {
                // SAFETY: unlinking a path we own by name.
                unsafe { libc::unlink(c.as_ptr()) };
                continue;
            }
            return Err(e);
        }
        let total = geo.total();
        // SAFETY: fd is our new file.
        let r = unsafe { libc::ftruncate(fd, total as libc::off_t) };
        let mapped = if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            map(fd, total)
        };
        // SAFETY: the mapping (if any) keeps the file; the fd is no longer needed.
        unsafe { libc::close(fd) };
        let base = match mapped {
            Ok(b) => b,
            Err(e) => {
                // SAFETY: removing the file we just created.
                unsafe { libc::unlink(c.as_ptr()) };
                return Err(e);
            }
        };
        let seg = Segment {
            base,
            len: total,
            geo,
            path: path.to_path_buf(),
            owner: true,
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
        ring::init(&seg.raw_msg_ring());
        let free = seg.free_ring();
        ring::init(&free);
        for i in 0..geo.pool_bufs as u64 {
            // SAFETY: payload is 8 bytes, enough for a u64 index.
            let _ = ring::push(&free, |p, _| unsafe { (p as *mut u64).write_unaligned(i) });
        }
        h.magic.store(MAGIC, Ordering::Relaxed);
        h.ready.store(READY, Ordering::Release);
        Ok(seg)
    }

    /// Maps a peer's segment after checking its header against the file.
    pub fn open(path: &Path, expect_pid: u32) -> io::Result<Segment> {
        let c = cpath(path)?;
        // SAFETY: c is a valid C string.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: st is written by fstat on success.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; st is valid.
        let r = unsafe { libc::fstat(fd, &mut st) };
        let size = st.st_size as usize;
        let res = if r < 0 {
            Err(io::Error::last_os_error())
        } else if size < SLOTS_OFF {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "segment too small",
            ))
        } else {
            map(fd, size)
        };
        // SAFETY: the mapping keeps the file alive.
        unsafe { libc::close(fd) };
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

    /// The inbound message ring (many producers, one consumer).
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
    pub fn free_ring(&self) -> ShmRing<'_> {
        ShmRing {
            // SAFETY: FREE_RING_OFF + 256 <= SLOTS_OFF <= len.
            hdr: unsafe { &*(self.base.add(FREE_RING_OFF) as *const RingHeader) },
            // SAFETY: free slots lie inside the validated geometry.
            slots: unsafe { self.base.add(self.geo.free_slots_off()) },
            cap: self.geo.pool_bufs as u64,
            slot_size: FREE_SLOT_SIZE,
        }
    }

    /// Takes a free bounce buffer index.
    pub fn alloc_bounce(&self) -> Option<u64> {
        // SAFETY: the payload holds the 8-byte index written by `free_bounce`.
        ring::pop(&self.free_ring(), |p, _| unsafe {
            (p as *const u64).read_unaligned()
        })
    }

    /// Returns a bounce buffer index (by the segment's owner).
    pub fn free_bounce(&self, idx: u64) {
        // SAFETY: the payload has room for the 8-byte index.
        let _ = ring::push(&self.free_ring(), |p, _| unsafe {
            (p as *mut u64).write_unaligned(idx)
        });
    }

    /// A bounce buffer's memory, or None for an out-of-range index.
    pub fn bounce(&self, idx: u64) -> Option<(*mut u8, usize)> {
        if idx >= self.geo.pool_bufs as u64 {
            return None;
        }
        // SAFETY: idx < pool_bufs, so the buffer lies inside the mapping.
        let p = unsafe {
            self.base
                .add(self.geo.pool_off() + idx as usize * self.geo.pool_buf_size)
        };
        Some((p, self.geo.pool_buf_size))
    }

    /// Runs `f` on a bounce buffer the caller owns (taken with
    /// `alloc_bounce`, or named by an entry the caller popped). None for an
    /// out-of-range index.
    pub fn with_bounce<R>(&self, idx: u64, f: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        let (p, len) = self.bounce(idx)?;
        // SAFETY: the range is inside the mapping; ownership of the buffer
        // passes through the free ring and the message ring, so one side at a
        // time touches it (a misbehaving peer can scribble on bytes, never
        // outside the mapping).
        Some(f(unsafe { std::slice::from_raw_parts_mut(p, len) }))
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

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what we mapped.
        unsafe { libc::munmap(self.base.cast(), self.len) };
        if self.owner {
            if let Ok(c) = cpath(&self.path) {
                // SAFETY: removing our own segment file.
                unsafe { libc::unlink(c.as_ptr()) };
            }
        }
    }
}

impl ShmRing<'_> {
    /// Claims a slot and lets `fill` write its payload bytes.
    #[inline]
    pub fn push_with<R>(&self, fill: impl FnOnce(&mut [u8]) -> R) -> Result<R, ring::PushError> {
        ring::push(self, |p, n| {
            // SAFETY: the ring hands out a claimed slot's payload exclusively.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, n) };
            fill(bytes)
        })
    }
    /// Takes the oldest entry and lets `read` see (and scratch) its bytes.
    #[inline]
    pub fn pop_with<R>(&self, read: impl FnOnce(&mut [u8]) -> R) -> Option<R> {
        ring::pop(self, |p, n| {
            // SAFETY: the ring hands out a claimed slot's payload exclusively.
            let bytes = unsafe { std::slice::from_raw_parts_mut(p, n) };
            read(bytes)
        })
    }
    /// True when an entry is ready to pop.
    #[inline]
    pub fn ready(&self) -> bool {
        ring::ready(self)
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
    /// Consumer: takes the entry at `head` and advances it.
    ///
    /// # Safety
    /// Only the ring's owner pops, one call at a time, with its own `head`.
    #[inline]
    pub unsafe fn pop_with<R>(
        &self,
        head: &mut u64,
        read: impl FnOnce(&mut [u8]) -> R,
    ) -> Option<R> {
        // SAFETY: forwarded contract: a single consumer with its position.
        unsafe {
            ring::pop_mpsc(&self.0, head, |p, n| {
                // SAFETY: a stamped slot is the consumer's until published past.
                let bytes = std::slice::from_raw_parts_mut(p, n);
                read(bytes)
            })
        }
    }
    /// Consumer: lets producers reuse the slots below `head`.
    #[inline]
    pub fn publish(&self, head: u64) {
        ring::publish_head(&self.0, head)
    }
    /// True when the entry at `head` is ready.
    #[inline]
    pub fn ready(&self, head: u64) -> bool {
        ring::ready_mpsc(&self.0, head)
    }
}

/// A ring inside a segment.
pub struct ShmRing<'a> {
    hdr: &'a RingHeader,
    slots: *mut u8,
    cap: u64,
    slot_size: usize,
}

impl Slots for ShmRing<'_> {
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
        // SAFETY: idx < cap (masked by the ring); each slot starts 8-aligned
        // with its sequence word.
        unsafe { &*(self.slots.add(idx as usize * self.slot_size) as *const AtomicU64) }
    }
    #[inline]
    unsafe fn with_payload<R>(&self, idx: u64, f: impl FnOnce(*mut u8, usize) -> R) -> R {
        // SAFETY: idx < cap; the payload follows the 8-byte sequence.
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
