//! Multicast groups (`fi_join`, `struct fid_mc`, `fi_mc_addr`): the group a
//! DGRAM endpoint joined, or the collective group an RDM endpoint joined
//! (`fi_join_collective`, which is `fi_join` with FI_COLLECTIVE and a
//! `struct fi_collective_addr`); `fi_mc_addr` (inline in the headers)
//! reads the `fi_addr` field; `fi_close` leaves.

use super::{publish, shut_core, unpublish, CObj, EINVAL, ENOSYS};
use crate::abi::*;
use ofi_core::consts::FI_COLLECTIVE;
use ofi_core::{Endpoint, Multicast};

/// A group as C sees it: `struct fid_mc`, then the raw-layer group.
#[repr(C)]
pub struct McObj {
    c: fid_mc,
    core: Option<Multicast>,
}

// SAFETY: repr(C), first field fid_mc whose first field is fid.
unsafe impl CObj for McObj {
    const CLASS: usize = class::FI_CLASS_MC;
    fn base_ops() -> *const fi_ops {
        &MC_FI_OPS
    }
    fn shut(&mut self) -> Result<(), c_int> {
        shut_core(&mut self.core, Multicast::close)
    }
}

static MC_FI_OPS: fi_ops = super::fid_ops::<McObj>(super::bind_nosys, super::control_nosys);

/// `fi_join` on endpoint `e`: the group at `addr` (in the endpoint's
/// address format); FI_JOIN_COMPLETE naming the new `fid_mc` goes to the
/// endpoint's EQ. With FI_COLLECTIVE, `addr` is a `struct
/// fi_collective_addr` and the group is a collective one (`-FI_ENOSYS` on
/// an endpoint opened without FI_COLLECTIVE).
///
/// # Safety
/// Arguments as `fi_join(3)`: `addr` is an address of the endpoint's
/// format (with FI_COLLECTIVE, a `struct fi_collective_addr`), `mc`
/// writable.
pub(crate) unsafe fn join(
    e: &Endpoint,
    addr: *const c_void,
    flags: u64,
    mc: *mut *mut fid_mc,
    context: *mut c_void,
) -> c_int {
    if flags & FI_COLLECTIVE != 0 {
        if e.info().caps & FI_COLLECTIVE == 0 {
            return ENOSYS;
        }
        // SAFETY: with FI_COLLECTIVE, `addr` is a struct
        // fi_collective_addr (fi_join_collective builds it) and `mc` is
        // writable: the caller's contract.
        return unsafe { join_collective(e, addr.cast(), flags, mc, context) };
    }
    if addr.is_null() || mc.is_null() {
        return EINVAL;
    }
    // SAFETY: addr is an address of the endpoint's format (caller's contract).
    let Some(len) = (unsafe { super::addr_len(e.info().addr_format, addr) }) else {
        return EINVAL;
    };
    // SAFETY: addr_len read the format: len bytes are readable.
    let Some(a) = (unsafe { super::bytes(addr, len) }) else {
        return EINVAL;
    };
    let p = publish(McObj {
        c: fid_mc {
            fid: fid {
                fclass: class::FI_CLASS_MC,
                context,
                ops: &MC_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            fi_addr: ofi_core::consts::FI_ADDR_NOTAVAIL,
        },
        core: None,
    });
    match e.join(a, flags, p as usize, context as usize) {
        Ok(m) => {
            // SAFETY: p came from publish and is not yet given out.
            unsafe {
                (*p).c.fi_addr = m.fi_addr();
                (*p).core = Some(m);
                *mc = p.cast::<fid_mc>();
            }
            0
        }
        Err(err) => {
            // SAFETY: p came from publish, was never given out, holds no core.
            unsafe { unpublish(p) };
            crate::guard::err(&err)
        }
    }
}

/// A new group object for a join; the caller fills it in.
fn new_group(context: *mut c_void) -> *mut McObj {
    publish(McObj {
        c: fid_mc {
            fid: fid {
                fclass: class::FI_CLASS_MC,
                context,
                ops: &MC_FI_OPS as *const fi_ops as *mut fi_ops,
            },
            fi_addr: ofi_core::consts::FI_ADDR_NOTAVAIL,
        },
        core: None,
    })
}

/// `fi_join_collective` (`fi_join` with FI_COLLECTIVE): the group of the
/// AV set `addr->set` names, joined through `addr->coll_addr` (its address,
/// a joined group's, or FI_ADDR_NOTAVAIL: see
/// `ofi_core::Endpoint::join_collective`). FI_JOIN_COMPLETE naming the new
/// `fid_mc` goes to the endpoint's EQ once every member joined.
///
/// # Safety
/// `addr` is NULL or a readable `struct fi_collective_addr` whose `set` is
/// NULL or a fid; `mc` is NULL or writable.
unsafe fn join_collective(
    e: &Endpoint,
    addr: *const fi_collective_addr,
    flags: u64,
    mc: *mut *mut fid_mc,
    context: *mut c_void,
) -> c_int {
    if addr.is_null() || mc.is_null() {
        return EINVAL;
    }
    // SAFETY: addr is non-null and readable (this function's contract).
    let ca = unsafe { *addr };
    // SAFETY: ca.set is NULL or a fid of the application.
    let Some(set) = (unsafe { super::av_set::av_set(ca.set) }) else {
        return EINVAL;
    };
    let p = new_group(context);
    match e.join_collective(ca.coll_addr, set, flags, p as usize, context as usize) {
        Ok(m) => {
            // SAFETY: p came from publish and is not yet given out.
            unsafe {
                (*p).c.fi_addr = m.fi_addr();
                (*p).core = Some(m);
                *mc = p.cast::<fid_mc>();
            }
            0
        }
        Err(err) => {
            // SAFETY: p came from publish, was never given out, holds no core.
            unsafe { unpublish(p) };
            crate::guard::err(&err)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::abi::*;
    use ofi_core::consts::*;
    use ofi_core::error::errno::*;
    use std::ptr::null_mut;

    fn close(f: *mut fid) -> c_int {
        // SAFETY: f is a live object made by this library.
        unsafe { ((*(*f).ops).close.expect("close slot"))(f) }
    }

    /// A udp DGRAM endpoint joins a group through the C tables: the
    /// FI_JOIN_COMPLETE names the fid_mc and the join's context, fi_mc_addr
    /// names the group in the AV, close leaves; collective and malformed
    /// joins are refused.
    #[test]
    fn join_reports_the_group_and_its_address_through_the_c_tables() {
        let mut h = ofi_core::Info::hints();
        h.caps = FI_MSG | FI_MULTICAST;
        h.ep_attr.ep_type = ep_type::FI_EP_DGRAM;
        h.fabric_attr.prov_name = Some("udp".into());
        h.addr_format = addr_format::FI_SOCKADDR_IN;
        let offers = ofi::getinfo(
            (1 << 16) | 17,
            Some("127.0.0.1"),
            Some("0"),
            FI_SOURCE,
            Some(&h),
        )
        .expect("udp DGRAM offers");
        let info = crate::info::info_to_c(&offers[0]);
        let (mut fab, mut dom, mut eq, mut av, mut cq, mut ep) = (
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
            null_mut(),
        );
        let mut group: libc::sockaddr_in =
            // SAFETY: plain data; all-zero is valid.
            unsafe { std::mem::zeroed() };
        group.sin_family = libc::AF_INET as u16;
        group.sin_port = 45_123u16.to_be();
        group.sin_addr.s_addr = u32::from_be_bytes([239, 255, 7, 11]).to_be();
        let ctx = 0x5150usize as *mut c_void;
        // SAFETY: every pointer passed is a live object or out-parameter of
        // this test; every slot is filled.
        unsafe {
            assert_eq!(
                super::super::fabric::fi_fabric((*info).fabric_attr, &mut fab, null_mut()),
                0
            );
            let fops = &*(*fab).ops;
            assert_eq!(fops.domain.unwrap()(fab, info, &mut dom, null_mut()), 0);
            let mut eattr: fi_eq_attr = std::mem::zeroed();
            eattr.wait_obj = wait_obj::FI_WAIT_UNSPEC;
            assert_eq!(
                fops.eq_open.unwrap()(fab, &mut eattr, &mut eq, null_mut()),
                0
            );
            let dops = &*(*dom).ops;
            let mut cattr: fi_cq_attr = std::mem::zeroed();
            cattr.format = cq_format::FI_CQ_FORMAT_TAGGED;
            assert_eq!(
                dops.cq_open.unwrap()(dom, &mut cattr, &mut cq, null_mut()),
                0
            );
            let mut aattr: fi_av_attr = std::mem::zeroed();
            assert_eq!(
                dops.av_open.unwrap()(dom, &mut aattr, &mut av, null_mut()),
                0
            );
            assert_eq!(dops.endpoint.unwrap()(dom, info, &mut ep, null_mut()), 0);
            let bind = (*(*ep).fid.ops).bind.unwrap();
            assert_eq!(
                bind(&mut (*ep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
                0
            );
            assert_eq!(bind(&mut (*ep).fid, &mut (*av).fid, 0), 0);
            assert_eq!(bind(&mut (*ep).fid, &mut (*eq).fid, 0), 0);
            let control = (*(*ep).fid.ops).control.unwrap();
            assert_eq!(control(&mut (*ep).fid, control::FI_ENABLE, null_mut()), 0);

            let join = (*(*ep).cm).join.unwrap();
            let mut mc: *mut fid_mc = null_mut();
            let g = (&group as *const libc::sockaddr_in).cast::<c_void>();
            assert_eq!(join(ep, g, FI_COLLECTIVE, &mut mc, ctx), -FI_ENOSYS);
            assert_eq!(join(ep, null_mut(), 0, &mut mc, ctx), -FI_EINVAL);
            assert_eq!(join(ep, g, 0, &mut mc, ctx), 0);
            assert!(!mc.is_null());
            assert_eq!((*mc).fid.fclass, class::FI_CLASS_MC);
            // FI_JOIN_COMPLETE: fid is the group, context the join's.
            let mut event = 0u32;
            let mut entry: fi_eq_entry = std::mem::zeroed();
            let n = (*(*eq).ops).sread.unwrap()(
                eq,
                &mut event,
                (&mut entry as *mut fi_eq_entry).cast(),
                std::mem::size_of::<fi_eq_entry>(),
                5000,
                0,
            );
            assert_eq!(n, std::mem::size_of::<fi_eq_entry>() as ssize_t);
            assert_eq!(event, eq_event::FI_JOIN_COMPLETE);
            assert_eq!(entry.fid, mc.cast::<fid>());
            assert_eq!(entry.context, ctx);
            // fi_mc_addr names the group in the AV.
            let fa = (*mc).fi_addr;
            assert_ne!(fa, FI_ADDR_NOTAVAIL);
            let mut back: libc::sockaddr_in = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in>();
            let lookup = (*(*av).ops).lookup.unwrap();
            assert_eq!(
                lookup(
                    av,
                    fa,
                    (&mut back as *mut libc::sockaddr_in).cast(),
                    &mut len
                ),
                0
            );
            assert_eq!(
                (back.sin_addr.s_addr, back.sin_port),
                (group.sin_addr.s_addr, group.sin_port)
            );
            // Close leaves, and forgets the group's address.
            assert_eq!(close(&mut (*mc).fid), 0);
            assert_ne!(
                lookup(
                    av,
                    fa,
                    (&mut back as *mut libc::sockaddr_in).cast(),
                    &mut len
                ),
                0
            );
            assert_eq!(close(&mut (*ep).fid), 0);
            assert_eq!(close(&mut (*av).fid), 0);
            assert_eq!(close(&mut (*cq).fid), 0);
            assert_eq!(close(&mut (*eq).fid), 0);
            assert_eq!(close(&mut (*dom).fid), 0);
            assert_eq!(close(&mut (*fab).fid), 0);
            crate::info::free_info(info);
        }
    }
}
