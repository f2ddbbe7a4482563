//! Durable memory: which registered memory `FI_COMMIT_COMPLETE` can make
//! durable, and making it so.
//!
//! A range is durable-capable when every page of it lies in a shared
//! mapping (`mmap(MAP_SHARED)`) of a regular file on a file system that
//! keeps data across power loss: not tmpfs or ramfs (`/dev/shm` among
//! them), not a deleted file, not anonymous or private memory. Writing
//! such a range back is `msync(MS_SYNC)` over the pages it touches: once
//! it returns, the bytes are on the file's stable storage, which is what
//! an initiator's `FI_COMMIT_COMPLETE` completion promises.
//!
//! Where memory lies is read from `/proc/self/maps` once per region, at
//! the first commit request that names it (registration itself stays
//! cheap: most regions never see one).
#![allow(unsafe_code)]

use crate::error::{errno, Error, Result};

/// ramfs (`statfs.f_type`; tmpfs's is libc's `TMPFS_MAGIC`).
const RAMFS_MAGIC: libc::__fsword_t = 0x8584_58f6;

/// One line of `/proc/self/maps`: `[start, end)`, shared or private, the
/// inode (0: anonymous) and the path, if any.
#[derive(Debug, PartialEq, Eq)]
struct Mapping<'a> {
    start: usize,
    end: usize,
    shared: bool,
    inode: u64,
    path: &'a str,
}

fn parse_line(line: &str) -> Option<Mapping<'_>> {
    // start-end perms offset dev inode [path]
    let mut f = line.splitn(6, ' ');
    let range = f.next()?;
    let perms = f.next()?;
    let _offset = f.next()?;
    let _dev = f.next()?;
    let inode = f.next()?.parse().ok()?;
    let path = f.next().unwrap_or("").trim_start();
    let (a, b) = range.split_once('-')?;
    Some(Mapping {
        start: usize::from_str_radix(a, 16).ok()?,
        end: usize::from_str_radix(b, 16).ok()?,
        shared: perms.as_bytes().get(3) == Some(&b's'),
        inode,
        path,
    })
}

/// Why `[addr, addr + len)` cannot be made durable, given the process's
/// mappings (`maps`, as `/proc/self/maps` lists them) and a file-system
/// check for a mapped path (`Err` names why the path's file system does
/// not keep data); `Ok` when it can.
fn check_ranges(
    maps: &str,
    ranges: &[(usize, usize)],
    fs_ok: &mut dyn FnMut(&str) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    for &(addr, len) in ranges {
        let end = addr
            .checked_add(len)
            .ok_or_else(|| format!("[{addr:#x}, +{len}) wraps the address space"))?;
        let mut at = addr;
        let mut checked: Vec<&str> = Vec::new();
        for m in maps.lines().filter_map(parse_line) {
            if at >= end {
                break;
            }
            if m.end <= at {
                continue;
            }
            if m.start > at {
                return Err(format!("{at:#x} is not mapped"));
            }
            if !m.shared || m.inode == 0 || m.path.is_empty() || !m.path.starts_with('/') {
                return Err(format!(
                    "{at:#x} is not in a shared mapping of a file (anonymous or private memory)"
                ));
            }
            if m.path.ends_with(" (deleted)") {
                return Err(format!("{at:#x} maps a deleted file ({})", m.path));
            }
            if !checked.contains(&m.path) {
                fs_ok(m.path)?;
                checked.push(m.path);
            }
            at = m.end;
        }
        if at < end {
            return Err(format!("{at:#x} is not mapped"));
        }
    }
    Ok(())
}

/// Whether the file at `path` lives on a file system that keeps data.
fn file_system_keeps_data(path: &str) -> std::result::Result<(), String> {
    let c = std::ffi::CString::new(path).map_err(|_| format!("{path}: a NUL in the path"))?;
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `c` is a NUL-terminated path and `st` a writable statfs.
    let r = unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) };
    if r != 0 {
        return Err(format!(
            "{path}: statfs: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: statfs returned 0 and filled `st`.
    let kind = unsafe { st.assume_init() }.f_type;
    if kind == libc::TMPFS_MAGIC || kind == RAMFS_MAGIC {
        return Err(format!(
            "{path} is on a memory file system (tmpfs or ramfs): nothing there survives power loss"
        ));
    }
    Ok(())
}

/// Checks that every range (address, length) of a region can be made
/// durable; `FI_EOPNOTSUPP` with the reason when one cannot.
pub fn check(ranges: &[(usize, usize)]) -> Result<()> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| {
        Error::new(
            errno::FI_EOPNOTSUPP,
            format!("FI_COMMIT_COMPLETE: cannot read /proc/self/maps: {e}"),
        )
    })?;
    check_ranges(&maps, ranges, &mut file_system_keeps_data).map_err(|why| {
        Error::new(
            errno::FI_EOPNOTSUPP,
            format!("FI_COMMIT_COMPLETE: region memory cannot be made durable: {why}"),
        )
    })
}

fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p)
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096)
}

/// Writes `[addr, addr + len)` back to its file and waits until it is on
/// stable storage (`msync(MS_SYNC)` over the pages it touches). The range
/// must lie in memory [`check`] accepted and that stays mapped for the
/// call (a registered region held by an access).
pub fn persist(addr: usize, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let page = page_size();
    let start = addr & !(page - 1);
    let span = addr - start + len;
    // SAFETY: msync reads no memory through the pointer and writes none;
    // it writes pages of a shared file mapping back to the file. The span
    // covers whole pages of a registered region that the caller's access
    // keeps mapped.
    let r = unsafe { libc::msync(start as *mut libc::c_void, span, libc::MS_SYNC) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::new(
            errno::FI_EIO,
            format!("FI_COMMIT_COMPLETE: msync of [{addr:#x}, +{len}): {e}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/prog
7f0000000000-7f0000002000 rw-s 00000000 fe:01 4242        /data/vol.img
7f0000002000-7f0000004000 rw-s 00002000 fe:01 4242        /data/vol.img
7f0000004000-7f0000005000 rw-p 00000000 00:00 0 
7f0000006000-7f0000007000 rw-s 00000000 00:05 77          /dev/shm/seg
7f0000008000-7f0000009000 rw-s 00000000 fe:01 99          /data/old.img (deleted)
7f000000a000-7f000000b000 rw-p 00000000 fe:01 4243        /data/private.img
";

    fn ok_fs(path: &str) -> std::result::Result<(), String> {
        if path.starts_with("/dev/shm") {
            Err("tmpfs".into())
        } else {
            Ok(())
        }
    }

    fn check_at(ranges: &[(usize, usize)]) -> std::result::Result<(), String> {
        check_ranges(MAPS, ranges, &mut ok_fs)
    }

    #[test]
    fn parses_lines_with_and_without_paths() {
        let m = parse_line("7f0000004000-7f0000005000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(
            (m.start, m.end, m.shared, m.inode, m.path),
            (0x7f00_0000_4000, 0x7f00_0000_5000, false, 0, "")
        );
        let m =
            parse_line("7f0000000000-7f0000002000 rw-s 00000000 fe:01 4242        /data/vol.img")
                .unwrap();
        assert!(m.shared);
        assert_eq!((m.inode, m.path), (4242, "/data/vol.img"));
        assert!(parse_line("garbage").is_none());
    }

    #[test]
    fn a_shared_file_mapping_spanning_two_lines_is_accepted() {
        check_at(&[(0x7f00_0000_1000, 0x2000)]).unwrap();
        check_at(&[(0x7f00_0000_0000, 0x4000), (0x7f00_0000_0010, 1)]).unwrap();
    }

    #[test]
    fn anything_else_is_refused_with_a_reason() {
        for (range, why) in [
            ((0x7f00_0000_3000, 0x2000), "anonymous"),
            ((0x7f00_0000_6000, 0x10), "tmpfs"),
            ((0x7f00_0000_8000, 0x10), "deleted"),
            ((0x7f00_0000_a000, 0x10), "private"),
            ((0x7f00_0000_5000, 0x10), "not mapped"),
            ((0x7f00_0000_3000, 0x1001), "anonymous"),
            ((usize::MAX - 4, 0x10), "wraps"),
        ] {
            let e = check_at(&[range]).unwrap_err();
            assert!(e.contains(why), "{range:x?}: {e}");
        }
        // One bad range fails the whole region.
        assert!(check_at(&[(0x7f00_0000_0000, 0x10), (0x7f00_0000_4000, 0x10)]).is_err());
    }

    #[test]
    fn real_memory_anonymous_is_refused_and_a_file_mapping_is_persisted() {
        let v = [0u8; 64];
        let e = check(&[(v.as_ptr() as usize, v.len())]).unwrap_err();
        assert_eq!(e.code(), errno::FI_EOPNOTSUPP);

        let dir = std::env::temp_dir();
        let path = dir.join(format!("ofi-durable-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(8192).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared mapping of the 8 KiB file, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                8192,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as usize;
        let res = check(&[(base + 100, 5000)]);
        let tmp = file_system_keeps_data(dir.to_str().unwrap()).is_err();
        if tmp {
            // The temporary directory is itself on tmpfs: refused, by name.
            assert!(res.unwrap_err().to_string().contains("memory file system"));
        } else {
            res.unwrap();
            // SAFETY: inside the live 8 KiB mapping.
            unsafe { std::ptr::write_bytes((base + 100) as *mut u8, 0xab, 5000) };
            persist(base + 100, 5000).unwrap();
            let back = std::fs::read(&path).unwrap();
            assert!(back[100..5100].iter().all(|&b| b == 0xab));
            assert_eq!(back[99], 0);
        }
        // SAFETY: the mapping made above, not used after.
        unsafe { libc::munmap(p, 8192) };
        std::fs::remove_file(&path).unwrap();
        if std::path::Path::new("/dev/shm").is_dir() {
            assert!(file_system_keeps_data("/dev/shm").is_err());
        }
    }
}
