//! The backing store of a target: a file or a block device, read and
//! written with positioned I/O; durability by `fdatasync`.
//!
//! With [`Backend::direct`] the aligned reads and writes (offset, length
//! and buffer address multiples of [`DIRECT_ALIGN`], as the target's
//! staging buffers are) go through a second descriptor opened with
//! `O_DIRECT`: the device moves the bytes to and from the buffer the
//! fabric lands them in, with no copy through the page cache. The rest
//! stays buffered (Linux keeps the two coherent: a direct access writes
//! back and drops the cached pages of its range first).
//!
//! The bytes go through a [`Store`] (a [`File`] for a real volume; a test
//! may wrap one to record or fail calls). A failed sync is latched: the
//! kernel reports a writeback error to one `fdatasync` only, after which
//! the lost pages read as clean, so every later sync of this backend (a
//! FLUSH or a FUA write of any session) fails too, until the target
//! restarts.

use crate::wire::Status;
use rustix::fs::{fallocate, FallocateFlags};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tracing::error;

/// What a backend does to its bytes.
pub trait Store: Send + std::fmt::Debug {
    /// Reads `buf.len()` bytes at `offset`.
    fn pread(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes `buf` at `offset`.
    fn pwrite(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every write so far durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// Deallocates a range, which then reads as zeroes (a hole).
    fn punch(&self, offset: u64, len: u64) -> io::Result<()>;
    /// Zeroes a range and keeps it allocated.
    fn zero_range(&self, offset: u64, len: u64) -> io::Result<()>;
}

impl Store for File {
    fn pread(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_exact_at(buf, offset)
    }
    fn pwrite(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write_all_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        self.sync_data()
    }
    fn punch(&self, offset: u64, len: u64) -> io::Result<()> {
        let f = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        Ok(fallocate(self, f, offset, len)?)
    }
    fn zero_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let f = FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE;
        Ok(fallocate(self, f, offset, len)?)
    }
}

/// Alignment of offset, length and memory for direct I/O: the largest
/// logical block size of common devices (4096-byte sectors), which also
/// covers 512-byte ones.
pub const DIRECT_ALIGN: usize = 4096;

/// An open volume.
#[derive(Debug)]
pub struct Backend {
    store: Box<dyn Store>,
    /// The same file opened with O_DIRECT, for aligned I/O.
    direct: Option<File>,
    /// Reads and writes that went through `direct`.
    direct_ios: AtomicU64,
    size: u64,
    read_only: bool,
    /// A sync failed: writes may be lost, and no later sync may say
    /// otherwise.
    lost: AtomicBool,
}

fn status_of(e: &io::Error) -> Status {
    match e.raw_os_error() {
        Some(28) | Some(122) => Status::NoSpace,
        _ => Status::Io,
    }
}

/// `fsync` of the directory holding `path`: its entry for the file (a new
/// name) is durable after it.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

impl Backend {
    /// Opens `path`; `size` creates a missing file and extends a shorter
    /// one (a block device keeps its own size). The volume's size is the
    /// file's (or device's) size afterwards. A file created or extended
    /// here is durable, size and name (its directory synced), before this
    /// returns.
    pub fn open(path: &Path, size: Option<u64>, read_only: bool) -> io::Result<Backend> {
        Backend::open_with(path, size, read_only, sync_dir)
    }

    /// [`open`](Self::open), the directory synced by `sync_dir`.
    fn open_with(
        path: &Path,
        size: Option<u64>,
        read_only: bool,
        sync_dir: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<Backend> {
        let mut o = OpenOptions::new();
        o.read(true).write(!read_only);
        let mut created = false;
        if size.is_some() && !read_only {
            // create_new first: whether this call made the file decides
            // whether its directory must be synced.
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(_) => created = true,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let mut file = o.open(path)?;
        let meta = file.metadata()?;
        let mut extended = false;
        if let Some(want) = size {
            if meta.is_file() && meta.len() < want && !read_only {
                file.set_len(want)?;
                extended = true;
            }
        }
        if created || extended {
            file.sync_all()?;
        }
        if created {
            sync_dir(path)?;
        }
        // Regular files report their length; block devices their size by
        // seeking to the end.
        let size = file.seek(SeekFrom::End(0))?;
        if size == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is empty (use --size to create or extend it)",
                    path.display()
                ),
            ));
        }
        Ok(Backend::new(Box::new(file), size, read_only))
    }

    /// A volume of `size` bytes on `store`.
    pub fn new(store: Box<dyn Store>, size: u64, read_only: bool) -> Backend {
        Backend {
            store,
            direct: None,
            direct_ios: AtomicU64::new(0),
            size,
            read_only,
            lost: AtomicBool::new(false),
        }
    }

    /// Also opens `path` (the file or device this backend serves) with
    /// O_DIRECT, for the aligned reads and writes; an error when the file
    /// system refuses direct I/O.
    pub fn direct(mut self, path: &Path) -> io::Result<Backend> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = OpenOptions::new()
            .read(true)
            .write(!self.read_only)
            .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
            .open(path)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{}: direct I/O (O_DIRECT): {e}", path.display()),
                )
            })?;
        self.direct = Some(f);
        Ok(self)
    }

    /// Reads and writes that went through O_DIRECT so far.
    pub fn direct_ios(&self) -> u64 {
        self.direct_ios.load(Ordering::Relaxed)
    }

    /// The O_DIRECT descriptor, when `buf` at `offset` may use it.
    fn direct_for(&self, offset: u64, buf: &[u8]) -> Option<&File> {
        let a = DIRECT_ALIGN;
        let aligned = offset.is_multiple_of(a as u64)
            && buf.len().is_multiple_of(a)
            && !buf.is_empty()
            && (buf.as_ptr() as usize).is_multiple_of(a);
        let f = self.direct.as_ref().filter(|_| aligned)?;
        self.direct_ios.fetch_add(1, Ordering::Relaxed);
        Some(f)
    }

    /// Volume size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// True when opened read-only.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Reads `buf.len()` bytes at `offset` (the core checked the range).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Status> {
        let r = match self.direct_for(offset, buf) {
            Some(f) => f.read_exact_at(buf, offset),
            None => self.store.pread(buf, offset),
        };
        r.map_err(|e| status_of(&e))
    }

    /// Writes `buf` at `offset`; durable before returning when `fua`.
    pub fn write(&self, offset: u64, buf: &[u8], fua: bool) -> Result<(), Status> {
        let r = match self.direct_for(offset, buf) {
            Some(f) => f.write_all_at(buf, offset),
            None => self.store.pwrite(buf, offset),
        };
        r.map_err(|e| status_of(&e))?;
        if fua {
            self.sync()?;
        }
        Ok(())
    }

    /// Makes every write so far durable (`fdatasync`). Once a sync has
    /// failed, every later one fails too (see the module's comment).
    pub fn sync(&self) -> Result<(), Status> {
        if self.lost.load(Ordering::Relaxed) {
            return Err(Status::Io);
        }
        self.store.sync().map_err(|e| {
            error!(
                "storage: syncing the volume failed ({e}): writes may be lost; \
                 every later FLUSH and FUA write fails until the target restarts"
            );
            self.lost.store(true, Ordering::Relaxed);
            Status::Io
        })
    }

    /// Deallocates a range where the store can (advisory: success either
    /// way, as NBD's TRIM allows).
    pub fn trim(&self, offset: u64, len: u32) -> Result<(), Status> {
        let _ = self.store.punch(offset, len as u64);
        Ok(())
    }

    /// Zeroes a range: punches a hole when allowed, else allocates zeroes,
    /// else writes them; durable before returning when `fua`.
    pub fn zero(&self, offset: u64, len: u32, fua: bool, may_trim: bool) -> Result<(), Status> {
        let done = (may_trim && self.store.punch(offset, len as u64).is_ok())
            || self.store.zero_range(offset, len as u64).is_ok();
        if !done {
            let zeroes = vec![0u8; (len as usize).min(1 << 20)];
            let mut at = 0u64;
            while at < len as u64 {
                let n = (len as u64 - at).min(zeroes.len() as u64) as usize;
                self.store
                    .pwrite(&zeroes[..n], offset + at)
                    .map_err(|e| status_of(&e))?;
                at += n as u64;
            }
        }
        if fua {
            self.sync()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::path::PathBuf;

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    fn tmpdir(tag: &str) -> Tmp {
        let d =
            std::env::temp_dir().join(format!("ofi-storage-backend-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Tmp(d)
    }

    #[test]
    fn a_created_file_has_its_directory_synced_and_an_existing_one_not() {
        let d = tmpdir("dirsync");
        let path = d.0.join("vol.img");
        let synced = RefCell::new(Vec::new());
        let rec = |p: &Path| {
            synced.borrow_mut().push(p.to_path_buf());
            Ok(())
        };
        let b = Backend::open_with(&path, Some(1 << 20), false, rec).unwrap();
        assert_eq!(b.size(), 1 << 20);
        assert_eq!(*synced.borrow(), vec![path.clone()], "created: not synced");
        drop(b);
        // Opened again (and extended): the name exists already.
        let rec = |p: &Path| {
            synced.borrow_mut().push(p.to_path_buf());
            Ok(())
        };
        let b = Backend::open_with(&path, Some(2 << 20), false, rec).unwrap();
        assert_eq!(b.size(), 2 << 20);
        assert_eq!(synced.borrow().len(), 1, "{:?}", synced.borrow());
        // The real directory sync works on a relative path's parent too.
        sync_dir(Path::new("vol.img")).unwrap();
        sync_dir(&path).unwrap();
    }

    #[test]
    fn direct_io_takes_the_aligned_requests_and_agrees_with_buffered_io() {
        let d = tmpdir("direct");
        let path = d.0.join("vol.img");
        let b = Backend::open(&path, Some(1 << 20), false)
            .unwrap()
            .direct(&path)
            .unwrap();
        // An aligned buffer: a window of a larger allocation.
        let mut big = vec![0u8; 3 * DIRECT_ALIGN];
        let at = big.as_ptr().align_offset(DIRECT_ALIGN);
        let buf = &mut big[at..at + DIRECT_ALIGN];
        buf.fill(0xa5);
        b.write(8192, buf, false).unwrap();
        assert_eq!(b.direct_ios(), 1, "an aligned write goes direct");
        // Unaligned offset, length or memory: buffered, over the same bytes.
        b.write(8192 + 100, &[1; 10], false).unwrap();
        let mut odd = vec![0u8; DIRECT_ALIGN + 1];
        b.read(8192, &mut odd[1..]).unwrap();
        assert_eq!(b.direct_ios(), 1, "unaligned I/O is buffered");
        let mut want = vec![0xa5; DIRECT_ALIGN];
        want[100..110].fill(1);
        assert_eq!(odd[1..], want[..]);
        // A direct read sees the buffered write (written back first).
        buf.fill(0);
        b.read(8192, buf).unwrap();
        assert_eq!(b.direct_ios(), 2);
        assert_eq!(buf[..], want[..]);
        b.sync().unwrap();
        let file = std::fs::read(&path).unwrap();
        assert_eq!(file[8192..8192 + DIRECT_ALIGN], want[..]);
    }

    /// A store whose syncs fail once, as the kernel reports a writeback
    /// error to one fdatasync only.
    #[derive(Debug)]
    struct FailsOnce(File, AtomicBool);
    impl Store for FailsOnce {
        fn pread(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.0.pread(buf, offset)
        }
        fn pwrite(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            self.0.pwrite(buf, offset)
        }
        fn sync(&self) -> io::Result<()> {
            if self.1.swap(false, Ordering::Relaxed) {
                return Err(io::Error::from_raw_os_error(5));
            }
            self.0.sync()
        }
        fn punch(&self, offset: u64, len: u64) -> io::Result<()> {
            self.0.punch(offset, len)
        }
        fn zero_range(&self, offset: u64, len: u64) -> io::Result<()> {
            self.0.zero_range(offset, len)
        }
    }

    #[test]
    fn a_failed_sync_fails_every_later_one() {
        let d = tmpdir("latch");
        let path = d.0.join("vol.img");
        let f = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        f.set_len(1 << 20).unwrap();
        let b = Backend::new(
            Box::new(FailsOnce(f, AtomicBool::new(true))),
            1 << 20,
            false,
        );
        b.write(0, &[1; 4096], false).unwrap();
        assert_eq!(b.sync(), Err(Status::Io));
        // The store would report success now: the backend does not.
        assert_eq!(b.sync(), Err(Status::Io));
        assert_eq!(b.write(0, &[2; 4096], true), Err(Status::Io));
        assert_eq!(b.zero(0, 4096, true, false), Err(Status::Io));
        // What needs no sync still works.
        b.write(8192, &[3; 4096], false).unwrap();
        let mut r = [0u8; 4096];
        b.read(8192, &mut r).unwrap();
        assert_eq!(r, [3; 4096]);
    }
}
