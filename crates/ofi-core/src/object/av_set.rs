//! Address vector sets (`fi_av_set(3)`): ordered subsets of an address
//! vector's entries, made locally (no traffic), that name the members of a
//! collective group (`fi_join_collective`, [`Endpoint::join_collective`]).
//! A set holds the fi_addrs of its AV in order; the AV cannot close while
//! a set of it is open.
//!
//! [`Endpoint::join_collective`]: super::Endpoint::join_collective

use super::{AddressVector, CloseResult};
use crate::consts::*;
use crate::error::{errno, Error, Result};
use crate::util::av::AvCore;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The high bits of every address `fi_av_set_addr` gives (the low bits
/// number the set): far from any fi_addr an AV gives (indices) and from
/// `FI_ADDR_NOTAVAIL`.
pub const SET_ADDR_TAG: u64 = 0xa5e7 << 48;
/// The bits of a set address that number the set.
pub const SET_ADDR_MASK: u64 = (1 << 48) - 1;

/// Sets made in this process (numbers for [`AvSet::addr`]).
static SETS: AtomicU64 = AtomicU64::new(1);

/// AV set attributes (`struct fi_av_set_attr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvSetAttr {
    /// Members expected; the range may not add more (0: no bound).
    pub count: usize,
    /// First fi_addr of the range (`FI_ADDR_NOTAVAIL`: no range).
    pub start_addr: u64,
    /// Last fi_addr of the range, inclusive (`FI_ADDR_NOTAVAIL`: no range).
    pub end_addr: u64,
    /// Entries between successive members of the range (0 without one).
    pub stride: u64,
    /// Communication key (not supported: must be empty).
    pub comm_key: Vec<u8>,
    /// FI_UNIVERSE and the `FI_*_SET` flags.
    pub flags: u64,
}

impl Default for AvSetAttr {
    fn default() -> Self {
        AvSetAttr {
            count: 0,
            start_addr: FI_ADDR_NOTAVAIL,
            end_addr: FI_ADDR_NOTAVAIL,
            stride: 0,
            comm_key: Vec::new(),
            flags: 0,
        }
    }
}

/// An address vector set (`struct fid_av_set`).
pub struct AvSet {
    av: Arc<AvCore>,
    id: u64,
    /// The collectives it is made for (every one when none was named).
    flags: u64,
    members: Mutex<Vec<u64>>,
}

impl std::fmt::Debug for AvSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvSet")
            .field("id", &self.id)
            .field("members", &*self.lock())
            .finish()
    }
}

impl Drop for AvSet {
    fn drop(&mut self) {
        self.av.bound.fetch_sub(1, Ordering::AcqRel);
    }
}

impl AddressVector {
    /// Makes an AV set (`fi_av_set`) as fi_av_set(3) says: with
    /// FI_UNIVERSE every entry of the AV (in fi_addr order, the range
    /// ignored); else, with a range (both ends given, an FI_AV_TABLE AV, a
    /// stride of at least 1), the valid entries `start + stride * i` up to
    /// `end`, no more than `count` of them when `count` is not 0; else
    /// empty. A stride without a range, one end without the other, an end
    /// before the start, a communication key (not supported) or unknown
    /// flags are refused.
    pub fn av_set(&self, attr: &AvSetAttr) -> Result<AvSet> {
        let known = FI_UNIVERSE | FI_COLL_SET_FLAGS;
        if attr.flags & !known != 0 {
            return Err(Error::new(
                errno::FI_EBADFLAGS,
                format!(
                    "fi_av_set: flags {:#x} are not FI_UNIVERSE or FI_*_SET",
                    attr.flags & !known
                ),
            ));
        }
        if !attr.comm_key.is_empty() {
            return Err(Error::new(
                errno::FI_EOPNOTSUPP,
                "fi_av_set: communication keys are not supported (membership is managed by ofi)",
            ));
        }
        let core = &self.core;
        let members = if attr.flags & FI_UNIVERSE != 0 {
            core.entries().into_iter().map(|(a, _)| a).collect()
        } else {
            range_members(core, attr)?
        };
        if attr.count != 0 && members.len() > attr.count && attr.flags & FI_UNIVERSE == 0 {
            return Err(Error::inval(format!(
                "fi_av_set: the range holds {} addresses, more than count {}",
                members.len(),
                attr.count
            )));
        }
        let flags = match attr.flags & FI_COLL_SET_FLAGS {
            0 => FI_COLL_SET_FLAGS,
            f => f,
        };
        core.bound.fetch_add(1, Ordering::AcqRel);
        Ok(AvSet {
            av: core.clone(),
            id: SETS.fetch_add(1, Ordering::Relaxed) & SET_ADDR_MASK,
            flags,
            members: Mutex::new(members),
        })
    }
}

/// The members a range names (see [`AddressVector::av_set`]).
fn range_members(core: &AvCore, attr: &AvSetAttr) -> Result<Vec<u64>> {
    let (start, end) = (attr.start_addr, attr.end_addr);
    match (start == FI_ADDR_NOTAVAIL, end == FI_ADDR_NOTAVAIL) {
        (true, true) => {
            if attr.stride != 0 {
                return Err(Error::inval(
                    "fi_av_set: a stride without start_addr and end_addr",
                ));
            }
            return Ok(Vec::new());
        }
        (false, false) => {}
        _ => {
            return Err(Error::inval(
                "fi_av_set: start_addr and end_addr are both given or both FI_ADDR_NOTAVAIL",
            ))
        }
    }
    if core.kind() != av_type::FI_AV_TABLE {
        return Err(Error::inval(
            "fi_av_set: a range of addresses needs an FI_AV_TABLE address vector",
        ));
    }
    if attr.stride == 0 {
        return Err(Error::inval(
            "fi_av_set: a range needs a stride of at least 1",
        ));
    }
    if end < start {
        return Err(Error::inval(format!(
            "fi_av_set: end_addr {end} is before start_addr {start}"
        )));
    }
    // The AV's live entries in the range, in fi_addr order: no walk over
    // a range far wider than the AV.
    let out = core
        .entries()
        .into_iter()
        .map(|(a, _)| a)
        .filter(|a| (start..=end).contains(a) && (a - start) % attr.stride == 0)
        .collect();
    Ok(out)
}

impl AvSet {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The members, in order.
    pub fn members(&self) -> Vec<u64> {
        self.lock().clone()
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True without members.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// The `FI_*_SET` flags of the collectives the set was made for
    /// (every one when it named none).
    pub fn flags(&self) -> u64 {
        self.flags
    }

    /// The address vector the set is of.
    pub(crate) fn av(&self) -> &Arc<AvCore> {
        &self.av
    }

    /// The address that names the set (`fi_av_set_addr`), as the
    /// `coll_addr` of `fi_join_collective`: no traffic, stable for the
    /// set's life.
    pub fn addr(&self) -> u64 {
        SET_ADDR_TAG | self.id
    }

    /// Snapshot of `src`'s members, refused when it is of another AV.
    fn others(&self, src: &AvSet, what: &str) -> Result<Vec<u64>> {
        if !Arc::ptr_eq(&self.av, &src.av) {
            return Err(Error::inval(format!(
                "{what}: the sets belong to different address vectors"
            )));
        }
        Ok(src.lock().clone())
    }

    /// `fi_av_set_union`: appends `src`'s members not in this set, in
    /// `src`'s order.
    pub fn union(&self, src: &AvSet) -> Result<()> {
        let theirs = self.others(src, "fi_av_set_union")?;
        let mut m = self.lock();
        for a in theirs {
            if !m.contains(&a) {
                m.push(a);
            }
        }
        Ok(())
    }

    /// `fi_av_set_intersect`: keeps only the members also in `src`, in
    /// this set's order.
    pub fn intersect(&self, src: &AvSet) -> Result<()> {
        let theirs = self.others(src, "fi_av_set_intersect")?;
        self.lock().retain(|a| theirs.contains(a));
        Ok(())
    }

    /// `fi_av_set_diff`: removes the members that are in `src`, keeping
    /// this set's order.
    pub fn diff(&self, src: &AvSet) -> Result<()> {
        let theirs = self.others(src, "fi_av_set_diff")?;
        self.lock().retain(|a| !theirs.contains(a));
        Ok(())
    }

    /// `fi_av_set_insert`: appends `addr`, which must be in the AV and not
    /// yet in the set.
    pub fn insert(&self, addr: u64) -> Result<()> {
        if self.av.lookup(addr).is_err() {
            return Err(Error::inval(format!(
                "fi_av_set_insert: fi_addr {addr} is not in the address vector"
            )));
        }
        let mut m = self.lock();
        if m.contains(&addr) {
            return Err(Error::inval(format!(
                "fi_av_set_insert: fi_addr {addr} is already a member"
            )));
        }
        m.push(addr);
        Ok(())
    }

    /// `fi_av_set_remove`: removes `addr`, which must be a member; the
    /// others keep their order.
    pub fn remove(&self, addr: u64) -> Result<()> {
        let mut m = self.lock();
        let Some(i) = m.iter().position(|a| *a == addr) else {
            return Err(Error::new(
                errno::FI_EINVAL,
                format!("fi_av_set_remove: fi_addr {addr} is not a member"),
            ));
        };
        m.remove(i);
        Ok(())
    }

    /// Closes the set (`fi_close`); groups joined through it live on.
    pub fn close(self) -> CloseResult<Self> {
        Ok(())
    }
}
