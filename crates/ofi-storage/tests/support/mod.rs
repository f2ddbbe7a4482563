//! What the fabric tests share: temporary backing files, targets run on
//! a thread, volumes, data patterns, the round trips every provider runs,
//! and a hand-driven initiator.

#![allow(dead_code)]

use ofi_storage::target::{Target, TargetOptions};
use ofi_storage::{EpKind, NetOptions, Status, Volume, VolumeOptions};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A volume of the target at `addr` over provider `p`, default options.
pub fn open_volume(addr: &str, p: &str) -> Volume {
    Volume::open(
        addr,
        &VolumeOptions {
            net: net(p),
            ..VolumeOptions::default()
        },
    )
    .unwrap()
}

/// A backing file in the temporary directory, removed when dropped.
pub struct TmpFile(pub PathBuf);

impl std::ops::Deref for TmpFile {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TmpFile {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TmpFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub fn tmpfile(name: &str, size: u64) -> TmpFile {
    let p = std::env::temp_dir().join(format!("ofi-storage-{}-{name}", std::process::id()));
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(size).unwrap();
    TmpFile(p)
}

pub fn net(p: &str) -> NetOptions {
    NetOptions {
        provider: Some(p.into()),
        ..NetOptions::default()
    }
}

/// Provider `p` and endpoint type `ep` ("tcp/msg" style names below).
pub fn net_ep(p: &str, ep: EpKind) -> NetOptions {
    NetOptions { ep, ..net(p) }
}

/// A target running on its own thread: stopped and joined when dropped
/// (declare it before the volumes that use it, so they close first).
pub struct Served {
    pub addr: String,
    pub stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub h: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.h.take() {
            let r = h.join();
            if !std::thread::panicking() {
                r.expect("the target thread failed");
            }
        }
    }
}

/// Runs `t` until the returned guard drops.
pub fn serve(t: Target) -> Served {
    let addr = t.local_addr().to_string();
    let stop = t.stop_flag();
    let h = std::thread::spawn(move || t.run().unwrap());
    Served {
        addr,
        stop,
        h: Some(h),
    }
}

pub fn start(path: &std::path::Path, p: &str, read_only: bool) -> Served {
    start_ep(path, net(p), read_only)
}

pub fn start_ep(path: &std::path::Path, net: NetOptions, read_only: bool) -> Served {
    serve(
        Target::bind(
            path,
            &TargetOptions {
                net,
                read_only,
                ..TargetOptions::default()
            },
        )
        .unwrap(),
    )
}

/// Opens a volume once the target has every credit back (a dead
/// initiator's are returned when its death is noticed).
pub fn open_with_credits_back(target: &str, opts: &VolumeOptions) -> Volume {
    for _ in 0..100 {
        if let Ok(v) = Volume::open(target, opts) {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the dead initiator's credits never came back");
}

/// A target on `path` with four credits in all, at most four per
/// initiator: one raw initiator can hold every one of them.
pub fn four_credits(path: &std::path::Path, net: NetOptions) -> Target {
    use ofi_storage::core::target::TargetConfig;
    Target::bind(
        path,
        &TargetOptions {
            net,
            config: TargetConfig {
                credits: 4,
                max_queue_depth: 4,
                ..TargetConfig::default()
            },
            ..TargetOptions::default()
        },
    )
    .unwrap()
}

pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub fn round_trip(p: &str) {
    round_trip_on(p, EpKind::Rdm)
}

pub fn round_trip_on(p: &str, ep: EpKind) {
    let path = tmpfile(&format!("rt-{p}-{ep:?}"), 8 << 20);
    let served = start_ep(&path, net_ep(p, ep), false);
    let addr = served.addr.clone();
    let opts = VolumeOptions {
        net: net_ep(p, ep),
        queue_depth: 8,
        ..VolumeOptions::default()
    };
    let v = Volume::open(&addr, &opts).unwrap();
    assert_eq!(v.size(), 8 << 20);
    let w = Volume::open(&addr, &opts).unwrap();
    // Many writes in flight from two initiators, then a flush.
    for i in 0..32u64 {
        let vol = if i % 2 == 0 { &v } else { &w };
        vol.submit_write(i * 65536, pattern(i as u8, 65536), i % 4 == 0, i);
    }
    let mut seen = 0;
    while seen < 32 {
        let c = v
            .next(Duration::from_millis(1))
            .or_else(|| w.next(Duration::from_millis(1)));
        if let Some(c) = c {
            assert_eq!(
                c.result.as_ref().map(Vec::len),
                Ok(65536),
                "write {}",
                c.user
            );
            seen += 1;
        }
    }
    v.flush().unwrap();
    let file = std::fs::read(&path).unwrap();
    for i in 0..32usize {
        assert!(
            file[i * 65536..(i + 1) * 65536] == pattern(i as u8, 65536)[..],
            "chunk {i} in the file"
        );
    }
    let got = w.read(3 * 65536 + 100, 5000).unwrap();
    assert_eq!(got[..], pattern(3, 65536)[100..5100]);
    // Zeroes and trims; an out-of-range read.
    v.submit_zeroes(0, 4096, true, false, 7);
    let c = v.next(Duration::from_secs(10)).unwrap();
    assert_eq!((c.user, c.result.map(|b| b.len())), (7, Ok(0)));
    assert_eq!(v.read(0, 4096).unwrap(), vec![0u8; 4096]);
    assert_eq!(v.read((8 << 20) - 10, 20), Err(Status::OutOfRange));
    assert!(v.trim(65536, 65536).is_ok());
    drop((v, w));
}

/// 128 KiB writes and reads at queue depth 16 (the NBD gateway's
/// sequential load): the target pulls each write's data while completions
/// stream back, so the initiator's fabric connection captures READ answers
/// behind a full send window; every byte must land and read back.
pub fn streaming_large_io(p: &str) {
    const IO: usize = 128 << 10;
    const N: u64 = 96;
    let path = tmpfile(&format!("stream-{p}"), N * IO as u64);
    let served = start(&path, p, false);
    let opts = VolumeOptions {
        net: net(p),
        queue_depth: 16,
        ..VolumeOptions::default()
    };
    let v = Volume::open(&served.addr, &opts).unwrap();
    let mut next = 0u64;
    let mut done = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while done < 2 * N {
        assert!(
            std::time::Instant::now() < deadline,
            "{p}: {done} of {} requests done in 60 s",
            2 * N
        );
        // Every write, then (once all are done) a read of every chunk,
        // 16 in flight.
        while next < 2 * N && next - done < 16 {
            if next < N {
                v.submit_write(next * IO as u64, pattern(next as u8, IO), false, next);
            } else if done >= N {
                let i = next - N;
                v.submit_read(i * IO as u64, IO as u32, next);
            } else {
                break;
            }
            next += 1;
        }
        if let Some(c) = v.next(Duration::from_millis(10)) {
            let got = c
                .result
                .unwrap_or_else(|e| panic!("{p}: request {}: {e:?}", c.user));
            if c.user >= N {
                let i = c.user - N;
                assert!(
                    got == pattern(i as u8, IO),
                    "{p}: chunk {i} read back wrong"
                );
            }
            done += 1;
        }
    }
    v.flush().unwrap();
    let file = std::fs::read(&path).unwrap();
    for i in 0..N as usize {
        assert!(
            file[i * IO..(i + 1) * IO] == pattern(i as u8, IO)[..],
            "{p}: chunk {i} in the file"
        );
    }
}

/// Injects `c` to `to` on `ch`, retrying while the provider answers
/// FI_EAGAIN (flow control: a full ring, say with FI_SHM_RING_SLOTS) and
/// driving `ch`'s progress between tries, for at most 10 s; any other
/// error fails the test.
pub fn inject(ch: &ofi::safe::Channel, c: &[u8], to: ofi::safe::Addr) {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match ch.inject(c, to) {
            Err(e) if e.is_again() && std::time::Instant::now() < end => {
                ch.poll().unwrap();
                std::thread::yield_now();
            }
            r => return r.unwrap(),
        }
    }
}

/// A hand-driven initiator: control connection and a raw channel.
pub struct Hostile {
    pub ctl: std::net::TcpStream,
    pub ch: ofi::safe::Channel,
    pub target: ofi::safe::Addr,
    /// The target's fabric address, as its WELCOME gave it.
    pub target_addr: Vec<u8>,
    pub token: u64,
}

impl Hostile {
    pub fn connect(addr: &str) -> Hostile {
        Hostile::connect_with(addr, &net("shm").offer().unwrap())
    }
    /// As [`connect`](Self::connect), the fabric channel opened from `info`.
    pub fn connect_with(addr: &str, info: &ofi::Info) -> Hostile {
        use std::io::{Read, Write};
        let mut ctl = std::net::TcpStream::connect(addr).unwrap();
        let ch = ofi::safe::Channel::open(info).unwrap();
        ctl.write_all(&ofi_storage::control::hello(&ch.address().unwrap()))
            .unwrap();
        ctl.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = vec![0u8; 1024];
        let mut got = Vec::new();
        let w = loop {
            let n = ctl.read(&mut b).unwrap();
            assert!(n > 0, "control connection closed before WELCOME");
            got.extend_from_slice(&b[..n]);
            if let Some((w, _)) = ofi_storage::control::parse_welcome(&got).unwrap() {
                break w;
            }
        };
        let target = ch.insert(&w.addr).unwrap();
        Hostile {
            ctl,
            ch,
            target,
            target_addr: w.addr.to_vec(),
            token: w.token,
        }
    }
    pub fn send(&self, c: &[u8]) {
        inject(&self.ch, c, self.target);
    }
    /// The next capsule from the target.
    pub fn recv(&self) -> ofi_storage::wire::Repr {
        let mut op = self.ch.recv(vec![0u8; 64]).unwrap();
        let d = op.wait(Duration::from_secs(10)).unwrap();
        ofi_storage::wire::Repr::from_bytes(d.bytes()).unwrap()
    }
    /// True once the target closed the control connection.
    pub fn dropped(&mut self) -> bool {
        use std::io::Read;
        let mut b = [0u8; 16];
        matches!(self.ctl.read(&mut b), Ok(0))
    }
}
