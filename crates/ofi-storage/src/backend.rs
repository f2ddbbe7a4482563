//! The backing store of a target: a file or a block device, read and
//! written with positioned I/O; durability by `fdatasync`.

use crate::wire::Status;
use rustix::fs::{fallocate, FallocateFlags};
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// An open volume.
#[derive(Debug)]
pub struct Backend {
    file: File,
    size: u64,
    read_only: bool,
}

fn status_of(e: &io::Error) -> Status {
    match e.raw_os_error() {
        Some(28) | Some(122) => Status::NoSpace,
        _ => Status::Io,
    }
}

impl Backend {
    /// Opens `path`; `size` creates a missing file and extends a shorter
    /// one (a block device keeps its own size). The volume's size is the
    /// file's (or device's) size afterwards.
    pub fn open(path: &Path, size: Option<u64>, read_only: bool) -> io::Result<Backend> {
        let mut o = OpenOptions::new();
        o.read(true).write(!read_only);
        if size.is_some() && !read_only {
            o.create(true);
        }
        let mut file = o.open(path)?;
        let meta = file.metadata()?;
        if let Some(want) = size {
            if meta.is_file() && meta.len() < want && !read_only {
                file.set_len(want)?;
            }
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
        Ok(Backend {
            file,
            size,
            read_only,
        })
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
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| status_of(&e))
    }

    /// Writes `buf` at `offset`; durable before returning when `fua`.
    pub fn write(&self, offset: u64, buf: &[u8], fua: bool) -> Result<(), Status> {
        self.file
            .write_all_at(buf, offset)
            .map_err(|e| status_of(&e))?;
        if fua {
            self.sync()?;
        }
        Ok(())
    }

    /// Makes every write so far durable (`fdatasync`).
    pub fn sync(&self) -> Result<(), Status> {
        self.file.sync_data().map_err(|e| status_of(&e))
    }

    /// Deallocates a range where the file system can (advisory: success
    /// either way, as NBD's TRIM allows).
    pub fn trim(&self, offset: u64, len: u32) -> Result<(), Status> {
        let _ = fallocate(
            &self.file,
            FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
            offset,
            len as u64,
        );
        Ok(())
    }

    /// Zeroes a range: punches a hole when allowed, else allocates zeroes,
    /// else writes them; durable before returning when `fua`.
    pub fn zero(&self, offset: u64, len: u32, fua: bool, may_trim: bool) -> Result<(), Status> {
        let punched = may_trim
            && fallocate(
                &self.file,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                offset,
                len as u64,
            )
            .is_ok();
        let done = punched
            || fallocate(
                &self.file,
                FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE,
                offset,
                len as u64,
            )
            .is_ok();
        if !done {
            let zeroes = vec![0u8; (len as usize).min(1 << 20)];
            let mut at = 0u64;
            while at < len as u64 {
                let n = (len as u64 - at).min(zeroes.len() as u64) as usize;
                self.file
                    .write_all_at(&zeroes[..n], offset + at)
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
