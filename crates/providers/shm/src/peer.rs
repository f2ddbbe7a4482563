//! Peers: another endpoint's mapped segment, its doorbell and its liveness.

use crate::addr::ShmAddr;
use ofi_core::error::{errno, Error, Result};
use ofi_proto::shm::liveness::Seen;
use ofi_shmem::doorbell::Bell;
use ofi_shmem::proc::{self, Watch};
use ofi_shmem::segment::{bell_path, segment_path, Segment};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// A mapped peer endpoint.
pub struct Peer {
    /// Its address.
    pub addr: ShmAddr,
    /// Its segment.
    pub seg: Segment,
    bell: OnceLock<Option<Bell>>,
    watch: Watch,
    /// False once the peer refused a cross-process copy (EPERM).
    pub cma_ok: AtomicBool,
    /// True once a cross-process copy from this peer succeeded.
    pub cma_proven: AtomicBool,
    /// This process's last view of the peer's published ring position.
    pub cached_head: AtomicU64,
    /// True once the peer proved this endpoint's auth key (endpoints
    /// without a key never look at it).
    pub trusted: AtomicBool,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer").field("addr", &self.addr).finish()
    }
}

impl Peer {
    /// Maps a peer's segment for an endpoint that has an auth key
    /// (`keyed`) or not. Nothing at the address (no segment, its process
    /// exited, its endpoint closed) is `FI_ECONNREFUSED`, as a connection
    /// attempt to a process that is not running; a peer with a key when
    /// this endpoint has none, or the other way round, is
    /// `FI_EKEYREJECTED` (endpoints of different keys exchange nothing).
    pub fn open(addr: ShmAddr, keyed: bool) -> Result<Peer> {
        let uid = proc::uid();
        let path = segment_path(uid, addr.pid, addr.idx);
        let refused =
            |why: String| Error::new(errno::FI_ECONNREFUSED, format!("shm peer {addr}: {why}"));
        let seg = Segment::open(&path, addr.pid)
            .map_err(|e| refused(format!("no endpoint at this address ({e})")))?;
        let watch = Watch::new(addr.pid, seg.header().start_time);
        if watch.dead() {
            return Err(refused("its process has exited".into()));
        }
        if seg.header().closed.load(Ordering::Acquire) != 0 {
            return Err(refused("its endpoint has closed".into()));
        }
        if seg.keyed() != keyed {
            let (its, ours) = if keyed { ("no", "one") } else { ("an", "none") };
            return Err(Error::new(
                errno::FI_EKEYREJECTED,
                format!("shm peer {addr} has {its} auth key and this endpoint has {ours}: endpoints of different keys cannot talk"),
            ));
        }
        Ok(Peer {
            addr,
            seg,
            bell: OnceLock::new(),
            watch,
            cma_ok: AtomicBool::new(true),
            cma_proven: AtomicBool::new(false),
            cached_head: AtomicU64::new(0),
            trusted: AtomicBool::new(false),
        })
    }

    /// Wakes the peer if it sleeps. Call after publishing an entry.
    #[inline]
    pub fn notify(&self) {
        // The handshake with the owner's `sleep_arm`: either it sees our
        // entry, or we see it asleep.
        if self.seg.must_ring() {
            let bell = self.bell.get_or_init(|| {
                Bell::open_peer(&bell_path(proc::uid(), self.addr.pid, self.addr.idx)).ok()
            });
            if let Some(b) = bell {
                b.ring();
            }
        }
    }

    /// True once the peer closed its endpoint.
    #[inline]
    pub fn closed(&self) -> bool {
        self.seg.header().closed.load(Ordering::Acquire) != 0
    }

    /// True once the peer's endpoint closed or its process exited.
    pub fn dead(&self) -> bool {
        self.closed() || self.watch.dead()
    }

    /// A look at the peer for the liveness check (one system call: the
    /// process watch).
    pub fn seen(&self) -> Seen {
        let ring = self.seg.msg_ring();
        Seen {
            exited: self.watch.dead(),
            closed: self.closed(),
            backlog: ring.backlog(),
            consumed: ring.consumed(),
            beat: self.seg.heartbeat(),
        }
    }
}
