//! Durability as the initiator sees it, on a backing store that records
//! or fails its sync calls (killing the target cannot test it: the page
//! cache survives `kill -9`, so a target that never synced would pass).
//! A FUA write, a FUA write of zeroes and a FLUSH answer only after a sync
//! that succeeded: with syncs failing they fail, never Ok; and a sync
//! error, which the kernel reports once, fails every later FLUSH of every
//! session. With direct I/O, the aligned reads and writes bypass the
//! store (and the page cache), the others go through it.

mod support;

use ofi_storage::backend::{Backend, Store};
use ofi_storage::target::{Target, TargetOptions};
use ofi_storage::{Status, Volume, VolumeOptions};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use support::*;

/// A call the target made on the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Read(u64, usize),
    Write(u64, usize),
    Sync,
    Punch(u64, u64),
    Zero(u64, u64),
}

/// A file that logs every call and fails the next `fail` syncs (EIO);
/// `u32::MAX` fails them all.
#[derive(Debug)]
struct Recorder {
    file: File,
    log: Arc<Mutex<Vec<Call>>>,
    fail: Arc<AtomicU32>,
}

impl Store for Recorder {
    fn pread(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.log.lock().unwrap().push(Call::Read(offset, buf.len()));
        self.file.read_exact_at(buf, offset)
    }
    fn pwrite(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.log
            .lock()
            .unwrap()
            .push(Call::Write(offset, buf.len()));
        self.file.write_all_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.log.lock().unwrap().push(Call::Sync);
        let n = self.fail.load(Ordering::Relaxed);
        if n > 0 {
            if n != u32::MAX {
                self.fail.store(n - 1, Ordering::Relaxed);
            }
            return Err(io::Error::from_raw_os_error(5));
        }
        self.file.sync_data()
    }
    fn punch(&self, offset: u64, len: u64) -> io::Result<()> {
        self.log.lock().unwrap().push(Call::Punch(offset, len));
        self.file.punch(offset, len)
    }
    fn zero_range(&self, offset: u64, len: u64) -> io::Result<()> {
        self.log.lock().unwrap().push(Call::Zero(offset, len));
        self.file.zero_range(offset, len)
    }
}

struct Recorded {
    served: Served,
    log: Arc<Mutex<Vec<Call>>>,
    _file: TmpFile,
}

impl Recorded {
    /// What the store saw since the last call.
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

/// A target over shm on a recording store that fails its next `fail`
/// syncs.
fn recorded(tag: &str, fail: u32) -> Recorded {
    let path = tmpfile(tag, 1 << 20);
    let file = File::options().read(true).write(true).open(&path).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let store = Recorder {
        file,
        log: log.clone(),
        fail: Arc::new(AtomicU32::new(fail)),
    };
    let backend = Backend::new(Box::new(store), 1 << 20, false);
    let opts = TargetOptions {
        net: net("shm"),
        ..TargetOptions::default()
    };
    let served = serve(Target::with_backend(backend, &opts).unwrap());
    Recorded {
        served,
        log,
        _file: path,
    }
}

fn volume(addr: &str) -> Volume {
    let opts = VolumeOptions {
        net: net("shm"),
        queue_depth: 4,
        ..VolumeOptions::default()
    };
    Volume::open(addr, &opts).unwrap()
}

/// Waits for the one request in flight.
fn wait(v: &Volume) -> Result<usize, Status> {
    let c = v
        .next(std::time::Duration::from_secs(30))
        .expect("an answer");
    c.result.map(|b| b.len())
}

#[test]
fn fua_and_flush_are_synced_before_their_reply() {
    let r = recorded("synced", 0);
    let v = volume(&r.served.addr);
    assert_eq!(v.write(0, vec![1; 4096], true).map(|b| b.len()), Ok(4096));
    assert_eq!(r.take(), [Call::Write(0, 4096), Call::Sync]);
    assert_eq!(
        v.write(8192, vec![2; 4096], false).map(|b| b.len()),
        Ok(4096)
    );
    assert_eq!(r.take(), [Call::Write(8192, 4096)]);
    v.flush().unwrap();
    assert_eq!(r.take(), [Call::Sync]);
    v.submit_zeroes(16384, 4096, true, true, 1);
    assert_eq!(wait(&v), Ok(0));
    let z = r.take();
    assert_eq!(z.last(), Some(&Call::Sync), "{z:?}");
    assert!(
        matches!(z[0], Call::Punch(16384, 4096) | Call::Zero(16384, 4096)),
        "{z:?}"
    );
    drop(v);
}

#[test]
fn with_every_sync_failing_nothing_that_needs_one_answers_ok() {
    let r = recorded("unsynced", u32::MAX);
    let v = volume(&r.served.addr);
    // Without a sync, nothing fails.
    assert_eq!(v.write(0, vec![1; 4096], false).map(|b| b.len()), Ok(4096));
    assert_eq!(v.read(0, 4096).unwrap(), vec![1; 4096]);
    // What vouches for stable storage fails: an Ok here would mean the
    // answer went without the sync (or before it).
    assert_eq!(v.write(4096, vec![2; 4096], true), Err(Status::Io));
    assert_eq!(v.flush(), Err(Status::Io));
    v.submit_zeroes(16384, 4096, true, false, 1);
    assert_eq!(wait(&v), Err(Status::Io));
    drop(v);
}

#[test]
fn a_sync_error_fails_every_later_flush_of_every_session() {
    // The store fails one sync, then succeeds, as the kernel reports a
    // writeback error to one fdatasync only.
    let r = recorded("latched", 1);
    let a = volume(&r.served.addr);
    let b = volume(&r.served.addr);
    assert_eq!(a.write(0, vec![1; 4096], false).map(|x| x.len()), Ok(4096));
    assert_eq!(
        b.write(8192, vec![2; 4096], false).map(|x| x.len()),
        Ok(4096)
    );
    assert_eq!(a.flush(), Err(Status::Io), "the failing sync");
    // B's write may be among the lost pages: its FLUSH must not say Ok.
    assert_eq!(b.flush(), Err(Status::Io), "a later FLUSH over lost writes");
    assert_eq!(b.write(0, vec![3; 4096], true), Err(Status::Io));
    assert_eq!(a.flush(), Err(Status::Io));
    drop((a, b));
}

/// With direct I/O the target's aligned reads and writes go to the file
/// through O_DIRECT, straight from and into the buffers the fabric lands
/// the data in (the store sees none of them, which also shows the staging
/// buffers are aligned); the unaligned ones go through the store; FUA
/// still syncs; the bytes agree either way.
#[test]
fn direct_io_takes_the_aligned_requests_past_the_store() {
    for p in ["shm", "tcp"] {
        let path = tmpfile(&format!("direct-{p}"), 4 << 20);
        let file = File::options().read(true).write(true).open(&path).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let store = Recorder {
            file,
            log: log.clone(),
            fail: Arc::new(AtomicU32::new(0)),
        };
        let backend = Backend::new(Box::new(store), 4 << 20, false)
            .direct(&path)
            .unwrap();
        let opts = TargetOptions {
            net: net(p),
            ..TargetOptions::default()
        };
        let served = serve(Target::with_backend(backend, &opts).unwrap());
        let v = Volume::open(
            &served.addr,
            &VolumeOptions {
                net: net(p),
                queue_depth: 4,
                ..VolumeOptions::default()
            },
        )
        .unwrap();
        let take = || std::mem::take(&mut *log.lock().unwrap());
        let a = pattern(1, 128 << 10);
        assert_eq!(v.write(0, a.clone(), false).map(|b| b.len()), Ok(128 << 10));
        let b = pattern(2, 4096);
        assert_eq!(v.write(1 << 20, b.clone(), true).map(|x| x.len()), Ok(4096));
        let c = pattern(3, 1000);
        assert_eq!(v.write(100, c.clone(), false).map(|x| x.len()), Ok(1000));
        assert_eq!(take(), [Call::Sync, Call::Write(100, 1000)], "{p}");
        let mut want = a.clone();
        want[100..1100].copy_from_slice(&c);
        assert!(v.read(0, 128 << 10).unwrap() == want, "{p}: direct read");
        assert_eq!(v.read(1 << 20, 4096).unwrap(), b, "{p}");
        assert_eq!(v.read(100, 1000).unwrap(), c, "{p}");
        assert_eq!(take(), [Call::Read(100, 1000)], "{p}");
        drop(v);
        drop(served);
        let file = std::fs::read(&path).unwrap();
        assert!(file[..128 << 10] == want[..], "{p}: the file");
        assert_eq!(file[1 << 20..(1 << 20) + 4096], b[..], "{p}: the file");
    }
}
