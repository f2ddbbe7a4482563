//! Endpoint names: an alias in /dev/shm that points a name an application
//! chose (`fi_ns://node:service`, `fi_shm://name`, a plain name; see
//! fi_shm(7)) at an endpoint's segment, so that a peer that knows only the
//! name finds the endpoint.
//!
//! The alias is a symbolic link `ofi-shm-UID-n-NAME` whose target is the
//! segment's file name (`ofi-shm-UID-PID-IDX`). Creating it is atomic (the
//! first endpoint to claim a name gets it); a link left by a dead process
//! is replaced; only links owned by this user are believed. Safe code: no
//! `unsafe` here.

use crate::proc;
use crate::segment::{segment_path, PREFIX, SHM_DIR};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// Longest name accepted (bytes, before escaping).
pub const NAME_MAX: usize = 96;

/// The name as a file-name component: ASCII letters, digits and `._:-`
/// kept, every other byte as `%XX`. `None` for an empty or too long name.
fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.len() > NAME_MAX {
        return None;
    }
    let mut s = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b".:_-".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    Some(s)
}

/// Path of the alias of `name` for user `uid` (`None`: not a valid name).
pub fn name_path(uid: u32, name: &str) -> Option<PathBuf> {
    Some(PathBuf::from(format!(
        "{SHM_DIR}/{PREFIX}{uid}-n-{}",
        escape(name)?
    )))
}

/// Reads the alias of `name`: the `(pid, idx)` of the endpoint it names,
/// if it exists, is this user's, and points at a segment of this user.
pub fn resolve(uid: u32, name: &str) -> Option<(u32, u32)> {
    let path = name_path(uid, name)?;
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.file_type().is_symlink() || meta.uid() != uid {
        return None;
    }
    let target = std::fs::read_link(&path).ok()?;
    let rest = target.to_str()?.strip_prefix(&format!("{PREFIX}{uid}-"))?;
    let (pid, idx) = rest.split_once('-')?;
    Some((pid.parse().ok()?, idx.parse().ok()?))
}

/// An alias this endpoint holds; removed on drop (if it still points at
/// the endpoint).
#[derive(Debug)]
pub struct NameClaim {
    path: PathBuf,
    pid: u32,
    idx: u32,
    uid: u32,
    name: String,
}

impl NameClaim {
    /// Points `name` at endpoint `(pid, idx)` of user `uid`. A name held by
    /// a live endpoint is `AddrInUse`; one left by an endpoint that is gone
    /// (no segment, or its process exited) is taken over. An empty or too
    /// long name is `InvalidInput`.
    pub fn claim(uid: u32, name: &str, pid: u32, idx: u32) -> io::Result<NameClaim> {
        let path = name_path(uid, name).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("shm endpoint name '{name}' is empty or longer than {NAME_MAX} bytes"),
            )
        })?;
        let target = format!("{PREFIX}{uid}-{pid}-{idx}");
        for _ in 0..2 {
            match std::os::unix::fs::symlink(&target, &path) {
                Ok(()) => {
                    return Ok(NameClaim {
                        path,
                        pid,
                        idx,
                        uid,
                        name: name.to_string(),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let holder = resolve(uid, name);
                    let live = holder
                        .is_some_and(|(p, i)| proc::alive(p) && segment_path(uid, p, i).exists());
                    if live {
                        break;
                    }
                    // Gone (or not ours to believe): take it over.
                    let _ = std::fs::remove_file(&path);
                }
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            format!("shm endpoint name '{name}' is held by a live endpoint"),
        ))
    }

    /// The name claimed.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for NameClaim {
    fn drop(&mut self) {
        if resolve(self.uid, &self.name) == Some((self.pid, self.idx)) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_names_apart_and_bounded() {
        assert_eq!(escape("127.0.0.1:9228").unwrap(), "127.0.0.1:9228");
        assert_eq!(escape("a/b").unwrap(), "a%2Fb");
        assert_ne!(escape("a/b"), escape("a%2Fb"));
        assert!(escape("").is_none());
        assert!(escape(&"x".repeat(NAME_MAX + 1)).is_none());
    }

    #[test]
    fn claim_resolve_release_and_takeover() {
        let uid = proc::uid();
        let pid = std::process::id();
        let name = format!("name-test-{pid}");
        // No segment behind it: a second claim takes it over.
        let a = NameClaim::claim(uid, &name, pid, 900_001).unwrap();
        assert_eq!(resolve(uid, &name), Some((pid, 900_001)));
        let b = NameClaim::claim(uid, &name, pid, 900_002).unwrap();
        assert_eq!(resolve(uid, &name), Some((pid, 900_002)));
        drop(a); // no longer ours: leaves b's link alone
        assert_eq!(resolve(uid, &name), Some((pid, 900_002)));
        drop(b);
        assert_eq!(resolve(uid, &name), None);
    }
}
