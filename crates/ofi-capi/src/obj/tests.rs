//! The objects driven through their C ops tables, as a C program would:
//! two shm RDM endpoints exchanging tagged messages in one process.

use crate::abi::*;
use ofi_core::consts::*;
use ofi_core::error::errno::*;
use std::ptr::null_mut;

fn rdm_info(prov: &str, caps: u64) -> *mut fi_info {
    let mut h = ofi_core::Info::hints();
    h.caps = caps;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some(prov.into());
    let offers = ofi::getinfo((1 << 16) | 17, None, None, 0, Some(&h)).expect("shm offers");
    let ci = crate::info::info_to_c(&offers[0]);
    assert!(!ci.is_null());
    // As fi_pingpong does: without FI_DIRECTED_RECV, receives ignore their
    // source address.
    // SAFETY: ci is a fresh fi_info.
    unsafe { (*ci).caps &= !FI_DIRECTED_RECV };
    ci
}

/// Objects of one test, closed in reverse order at the end.
struct World {
    info: *mut fi_info,
    fab: *mut fid_fabric,
    dom: *mut fid_domain,
    cq: *mut fid_cq,
    av: *mut fid_av,
    eps: [*mut fid_ep; 2],
}

fn close(f: *mut fid) -> c_int {
    // SAFETY: f is a live object made by this library.
    unsafe { ((*(*f).ops).close.expect("close slot"))(f) }
}

fn open_world(caps: u64) -> World {
    open_world_on("shm", caps)
}

fn open_world_on(prov: &str, caps: u64) -> World {
    open_world_keys(prov, caps, [None, None])
}

/// As [`open_world_on`], endpoint `i` opened with `keys[i]` as its
/// `ep_attr->auth_key` (set in the C info for that `fi_endpoint` call).
fn open_world_keys(prov: &str, caps: u64, keys: [Option<&[u8]>; 2]) -> World {
    let info = rdm_info(prov, caps);
    let mut fab = null_mut();
    let mut dom = null_mut();
    let mut cq = null_mut();
    let mut av = null_mut();
    let mut eps = [null_mut(); 2];
    // SAFETY: every pointer passed is a live object or out-parameter of
    // this test; every slot is filled (Some).
    unsafe {
        assert_eq!(
            super::fabric::fi_fabric((*info).fabric_attr, &mut fab, null_mut()),
            0
        );
        assert_eq!((*fab).fid.fclass, class::FI_CLASS_FABRIC);
        let fops = &*(*fab).ops;
        assert_eq!(fops.size, std::mem::size_of::<fi_ops_fabric>());
        assert_eq!(fops.domain.unwrap()(fab, info, &mut dom, null_mut()), 0);
        let dops = &*(*dom).ops;
        let mut cattr: fi_cq_attr = std::mem::zeroed();
        cattr.format = cq_format::FI_CQ_FORMAT_TAGGED;
        cattr.wait_obj = wait_obj::FI_WAIT_UNSPEC;
        assert_eq!(
            dops.cq_open.unwrap()(dom, &mut cattr, &mut cq, null_mut()),
            0
        );
        let mut aattr: fi_av_attr = std::mem::zeroed();
        aattr.r#type = av_type::FI_AV_TABLE;
        assert_eq!(
            dops.av_open.unwrap()(dom, &mut aattr, &mut av, null_mut()),
            0
        );
        for (ep, key) in eps.iter_mut().zip(keys) {
            let mut k = key.map(<[u8]>::to_vec).unwrap_or_default();
            (*(*info).ep_attr).auth_key = if k.is_empty() {
                null_mut()
            } else {
                k.as_mut_ptr()
            };
            (*(*info).ep_attr).auth_key_size = k.len();
            let r = dops.endpoint.unwrap()(dom, info, ep, null_mut());
            // The key is this test's memory: out of the info before it is freed.
            (*(*info).ep_attr).auth_key = null_mut();
            (*(*info).ep_attr).auth_key_size = 0;
            assert_eq!(r, 0);
            let bind = (*(**ep).fid.ops).bind.unwrap();
            assert_eq!(
                bind(&mut (**ep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
                0
            );
            assert_eq!(bind(&mut (**ep).fid, &mut (*av).fid, 0), 0);
            let control = (*(**ep).fid.ops).control.unwrap();
            assert_eq!(control(&mut (**ep).fid, control::FI_ENABLE, null_mut()), 0);
        }
    }
    World {
        info,
        fab,
        dom,
        cq,
        av,
        eps,
    }
}

impl World {
    /// Inserts endpoint `i`'s address into the AV.
    fn insert(&self, i: usize) -> fi_addr_t {
        let mut name = [0u8; 128];
        let mut len = 4usize;
        let mut fa = FI_ADDR_NOTAVAIL;
        // SAFETY: live objects; buffers sized as passed.
        unsafe {
            let getname = (*(*self.eps[i]).cm).getname.unwrap();
            let ep = &mut (*self.eps[i]).fid as *mut fid;
            // Too small: the full length comes back with -FI_ETOOSMALL.
            assert_eq!(
                getname(ep, name.as_mut_ptr().cast(), &mut len),
                -FI_ETOOSMALL
            );
            assert!(len > 4 && len <= name.len());
            assert_eq!(getname(ep, name.as_mut_ptr().cast(), &mut len), 0);
            let insert = (*(*self.av).ops).insert.unwrap();
            assert_eq!(
                insert(self.av, name.as_ptr().cast(), 1, &mut fa, 0, null_mut()),
                1
            );
        }
        fa
    }

    /// Reads one tagged completion, spinning until it arrives.
    fn completion(&self) -> fi_cq_tagged_entry {
        // SAFETY: live CQ of format TAGGED; the entry is written by the read.
        unsafe {
            let read = (*(*self.cq).ops).read.unwrap();
            let mut e: fi_cq_tagged_entry = std::mem::zeroed();
            for _ in 0..1_000_000 {
                let n = read(self.cq, (&mut e as *mut fi_cq_tagged_entry).cast(), 1);
                if n == 1 {
                    return e;
                }
                assert_eq!(n, -(FI_EAGAIN as ssize_t));
            }
        }
        panic!("no completion");
    }

    fn close_all(self) {
        // The domain has endpoints, queues and an AV open: refused.
        // SAFETY: live domain.
        assert_eq!(close(unsafe { &mut (*self.dom).fid }), -FI_EBUSY);
        // SAFETY: live CQ, bound to the endpoints: refused too.
        assert_eq!(close(unsafe { &mut (*self.cq).fid }), -FI_EBUSY);
        for ep in self.eps {
            // SAFETY: live endpoint.
            assert_eq!(close(unsafe { &mut (*ep).fid }), 0);
        }
        // SAFETY: live objects, closed children first.
        unsafe {
            assert_eq!(close(&mut (*self.av).fid), 0);
            assert_eq!(close(&mut (*self.cq).fid), 0);
            assert_eq!(close(&mut (*self.dom).fid), 0);
            assert_eq!(close(&mut (*self.fab).fid), 0);
            crate::info::free_info(self.info);
        }
    }
}

#[test]
fn tagged_exchange_through_the_c_tables() {
    tagged_exchange("shm");
}

#[test]
fn tagged_exchange_over_tcp_rdm() {
    tagged_exchange("tcp");
}

fn tagged_exchange(prov: &str) {
    let w = open_world_on(prov, FI_TAGGED | FI_MSG);
    let _a0 = w.insert(0);
    let a1 = w.insert(1);
    let mut rbuf = [0u8; 16];
    let sbuf = *b"hello, tables!!\0";
    let rctx = 0x1111usize as *mut c_void;
    let sctx = 0x2222usize as *mut c_void;
    // SAFETY: live endpoints; the buffers outlive the completions read below.
    unsafe {
        let t1 = &*(*w.eps[1]).tagged;
        let t0 = &*(*w.eps[0]).tagged;
        assert_eq!(t0.size, std::mem::size_of::<fi_ops_tagged>());
        let r = t1.recv.unwrap()(
            w.eps[1],
            rbuf.as_mut_ptr().cast(),
            rbuf.len(),
            null_mut(),
            // Not the sender: ignored without FI_DIRECTED_RECV.
            a1,
            0x77,
            0,
            rctx,
        );
        assert_eq!(r, 0);
        let s = t0.send.unwrap()(
            w.eps[0],
            sbuf.as_ptr().cast(),
            sbuf.len(),
            null_mut(),
            a1,
            0x77,
            sctx,
        );
        assert_eq!(s, 0);
    }
    let mut seen = Vec::new();
    for _ in 0..2 {
        let e = w.completion();
        seen.push(e.op_context as usize);
        if e.op_context == rctx {
            assert_eq!(e.tag, 0x77);
            assert_eq!(e.len, sbuf.len());
            assert_ne!(e.flags & FI_RECV, 0);
        }
    }
    seen.sort();
    assert_eq!(seen, vec![0x1111, 0x2222]);
    assert_eq!(rbuf, sbuf);

    // An empty tagged message from a NULL iov (Open MPI's Ssend ack).
    // SAFETY: live endpoints; no buffers.
    unsafe {
        let t1 = &*(*w.eps[1]).tagged;
        let t0 = &*(*w.eps[0]).tagged;
        assert_eq!(
            t1.recv.unwrap()(
                w.eps[1],
                null_mut(),
                0,
                null_mut(),
                FI_ADDR_UNSPEC,
                5,
                0,
                rctx
            ),
            0
        );
        let m = fi_msg_tagged {
            msg_iov: std::ptr::null(),
            desc: null_mut(),
            iov_count: 0,
            addr: a1,
            tag: 5,
            ignore: 0,
            context: sctx,
            data: 0,
        };
        assert_eq!(t0.sendmsg.unwrap()(w.eps[0], &m, FI_COMPLETION), 0);
    }
    let mut seen = Vec::new();
    for _ in 0..2 {
        let e = w.completion();
        assert_eq!(e.len, 0);
        seen.push(e.op_context as usize);
    }
    seen.sort();
    assert_eq!(seen, vec![0x1111, 0x2222]);
    w.close_all();
}

/// `ep_attr->auth_key` reaches the tcp provider through `fi_endpoint`:
/// endpoints with different keys cannot exchange a message (the send
/// fails with FI_EKEYREJECTED), equal keys can.
#[test]
fn auth_keys_pass_through_the_c_tables_over_tcp() {
    for (keys, ok) in [
        ([Some(&b"k1"[..]), Some(&b"k2"[..])], false),
        ([Some(&b"k1"[..]), Some(&b"k1"[..])], true),
    ] {
        let w = open_world_keys("tcp", FI_TAGGED | FI_MSG, keys);
        let _a0 = w.insert(0);
        let a1 = w.insert(1);
        let sbuf = *b"keyed";
        let mut rbuf = [0u8; 5];
        // SAFETY: live endpoints; the buffers outlive the completions read
        // below (the receive is cancelled when the send fails).
        unsafe {
            let t1 = &*(*w.eps[1]).tagged;
            let t0 = &*(*w.eps[0]).tagged;
            let rctx = 0x11usize as *mut c_void;
            let sctx = 0x22usize as *mut c_void;
            let r = t1.recv.unwrap()(
                w.eps[1],
                rbuf.as_mut_ptr().cast(),
                5,
                null_mut(),
                FI_ADDR_UNSPEC,
                9,
                0,
                rctx,
            );
            assert_eq!(r, 0);
            let s = t0.send.unwrap()(w.eps[0], sbuf.as_ptr().cast(), 5, null_mut(), a1, 9, sctx);
            assert_eq!(s, 0);
            let read = (*(*w.cq).ops).read.unwrap();
            let readerr = (*(*w.cq).ops).readerr.unwrap();
            let mut e: fi_cq_tagged_entry = std::mem::zeroed();
            let mut got = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while got.len() < if ok { 2 } else { 1 } {
                assert!(
                    std::time::Instant::now() < deadline,
                    "keys {keys:?}: completions {got:?}"
                );
                let n = read(w.cq, (&mut e as *mut fi_cq_tagged_entry).cast(), 1);
                if n == 1 {
                    got.push((e.op_context as usize, 0));
                } else if n == -(FI_EAVAIL as ssize_t) {
                    let mut er: fi_cq_err_entry = std::mem::zeroed();
                    assert_eq!(readerr(w.cq, &mut er, 0), 1);
                    got.push((er.op_context as usize, er.err));
                }
            }
            if ok {
                got.sort();
                assert_eq!(got, [(0x11, 0), (0x22, 0)], "equal keys");
                assert_eq!(rbuf, sbuf);
            } else {
                assert_eq!(got, [(0x22, FI_EKEYREJECTED)], "different keys");
                assert_eq!(rbuf, [0; 5], "bytes crossed between different keys");
                let cancel = (*(*w.eps[1]).ops).cancel.unwrap();
                assert_eq!(cancel(&mut (*w.eps[1]).fid, rctx), 0);
                for _ in 0..1000 {
                    if read(w.cq, (&mut e as *mut fi_cq_tagged_entry).cast(), 1)
                        == -(FI_EAVAIL as ssize_t)
                    {
                        let mut er: fi_cq_err_entry = std::mem::zeroed();
                        readerr(w.cq, &mut er, 0);
                        break;
                    }
                }
            }
        }
        w.close_all();
    }
}

#[test]
fn bad_arguments_are_einval() {
    // SAFETY: the calls must reject NULL and foreign pointers without
    // touching anything beyond a struct fid.
    unsafe {
        let mut fab = null_mut();
        assert_eq!(
            super::fabric::fi_fabric(null_mut(), &mut fab, null_mut()),
            -FI_EINVAL
        );
        let mut bogus = fid {
            fclass: class::FI_CLASS_EP,
            context: null_mut(),
            ops: null_mut(),
        };
        assert_eq!(super::close::<super::ep::EpObj>(&mut bogus), -FI_EINVAL);
        assert_eq!(super::close::<super::ep::EpObj>(null_mut()), -FI_EINVAL);
    }
}

#[test]
fn every_ops_table_is_full() {
    let w = open_world(FI_TAGGED | FI_MSG);
    // SAFETY: live objects; tables are statics of this library.
    unsafe {
        let ep = &*w.eps[0];
        let tables: [(&[u8], usize); 6] = [
            (bytes_of(&*ep.msg), std::mem::size_of::<fi_ops_msg>()),
            (bytes_of(&*ep.tagged), std::mem::size_of::<fi_ops_tagged>()),
            (bytes_of(&*ep.rma), std::mem::size_of::<fi_ops_rma>()),
            (bytes_of(&*ep.atomic), std::mem::size_of::<fi_ops_atomic>()),
            (bytes_of(&*ep.cm), std::mem::size_of::<fi_ops_cm>()),
            (
                bytes_of(&*ep.collective),
                std::mem::size_of::<fi_ops_collective>(),
            ),
        ];
        for (t, size) in tables {
            assert_eq!(t.len(), size);
            // Every word after `size` is a non-NULL function pointer.
            for w in t.chunks(8).skip(1) {
                assert_ne!(w, [0u8; 8]);
            }
        }
    }
    w.close_all();
}

/// The bytes of a table.
///
/// # Safety
/// `t` is a plain-old-data table.
unsafe fn bytes_of<T>(t: &T) -> &[u8] {
    // SAFETY: the caller's contract; the slice covers exactly *t.
    unsafe { std::slice::from_raw_parts((t as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// Calls a slot of the fid's base `fi_ops`.
fn bind(f: *mut fid, b: *mut fid, flags: u64) -> c_int {
    // SAFETY: f and b are live objects made by this library.
    unsafe { ((*(*f).ops).bind.expect("bind slot"))(f, b, flags) }
}

fn enable(f: *mut fid) -> c_int {
    // SAFETY: f is a live endpoint made by this library.
    unsafe { ((*(*f).ops).control.expect("control slot"))(f, control::FI_ENABLE, null_mut()) }
}

/// Reads the next EQ event, waiting up to 5 s.
fn eq_event(eq: *mut fid_eq, buf: &mut [u8; 64]) -> (u32, ssize_t) {
    let mut event = 0u32;
    // SAFETY: live EQ; buf has 64 writable bytes.
    let n = unsafe {
        (*(*eq).ops).sread.unwrap()(eq, &mut event, buf.as_mut_ptr().cast(), 64, 5000, 0)
    };
    (event, n)
}

#[test]
fn msg_connect_accept_and_send_over_tcp() {
    let mut h = ofi_core::Info::hints();
    h.caps = FI_MSG;
    h.ep_attr.ep_type = ep_type::FI_EP_MSG;
    h.fabric_attr.prov_name = Some("tcp".into());
    let offers = ofi::getinfo(
        (1 << 16) | 17,
        Some("127.0.0.1"),
        Some("0"),
        FI_SOURCE,
        Some(&h),
    )
    .expect("tcp msg offers");
    let info = crate::info::info_to_c(&offers[0]);
    let (mut fab, mut eq, mut pep, mut dom) = (null_mut(), null_mut(), null_mut(), null_mut());
    let (mut cq, mut cep, mut sep, mut sdom) = (null_mut(), null_mut(), null_mut(), null_mut());
    let mut buf = [0u8; 64];
    // SAFETY: every pointer is a live object or out-parameter of this test.
    unsafe {
        assert_eq!(
            super::fabric::fi_fabric((*info).fabric_attr, &mut fab, null_mut()),
            0
        );
        let fops = &*(*fab).ops;
        let mut eattr: fi_eq_attr = std::mem::zeroed();
        eattr.wait_obj = wait_obj::FI_WAIT_UNSPEC;
        assert_eq!(
            fops.eq_open.unwrap()(fab, &mut eattr, &mut eq, null_mut()),
            0
        );
        assert_eq!(fops.passive_ep.unwrap()(fab, info, &mut pep, null_mut()), 0);
        assert_eq!(bind(&mut (*pep).fid, &mut (*eq).fid, 0), 0);
        assert_eq!((*(*pep).cm).listen.unwrap()(pep), 0);
        let mut name = [0u8; 64];
        let mut len = name.len();
        assert_eq!(
            (*(*pep).cm).getname.unwrap()(&mut (*pep).fid, name.as_mut_ptr().cast(), &mut len),
            0
        );
        assert_eq!(len, 16);

        // Client: domain, CQ, endpoint, connect.
        assert_eq!(fops.domain.unwrap()(fab, info, &mut dom, null_mut()), 0);
        let mut cattr: fi_cq_attr = std::mem::zeroed();
        cattr.format = cq_format::FI_CQ_FORMAT_MSG;
        cattr.wait_obj = wait_obj::FI_WAIT_FD;
        assert_eq!(
            (*(*dom).ops).cq_open.unwrap()(dom, &mut cattr, &mut cq, null_mut()),
            0
        );
        let mut fd: c_int = -1;
        let ctl = (*(*cq).fid.ops).control.unwrap();
        assert_eq!(
            ctl(
                &mut (*cq).fid,
                control::FI_GETWAIT,
                (&mut fd as *mut c_int).cast()
            ),
            0
        );
        assert!(fd >= 0);
        assert_eq!(
            (*(*dom).ops).endpoint.unwrap()(dom, info, &mut cep, null_mut()),
            0
        );
        assert_eq!(bind(&mut (*cep).fid, &mut (*eq).fid, 0), 0);
        assert_eq!(
            bind(&mut (*cep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
            0
        );
        assert_eq!(enable(&mut (*cep).fid), 0);
        let data = *b"hi!";
        assert_eq!(
            (*(*cep).cm).connect.unwrap()(cep, name.as_ptr().cast(), data.as_ptr().cast(), 3),
            0
        );

        // Server: the request carries an fi_info whose handle opens the
        // accepting endpoint.
        let (ev, n) = eq_event(eq, &mut buf);
        assert_eq!(ev, eq_event::FI_CONNREQ);
        assert_eq!(n as usize, std::mem::size_of::<fi_eq_cm_entry>() + 3);
        let entry = buf.as_ptr().cast::<fi_eq_cm_entry>().read_unaligned();
        assert_eq!(entry.fid, &mut (*pep).fid as *mut fid);
        assert_eq!(&buf[16..19], b"hi!");
        let rinfo = entry.info;
        assert!(!rinfo.is_null());
        assert_eq!((*(*rinfo).handle).fclass, class::FI_CLASS_CONNREQ);
        assert_eq!(fops.domain.unwrap()(fab, rinfo, &mut sdom, null_mut()), 0);
        assert_eq!(
            (*(*sdom).ops).endpoint.unwrap()(sdom, rinfo, &mut sep, null_mut()),
            0
        );
        assert_eq!(bind(&mut (*sep).fid, &mut (*eq).fid, 0), 0);
        assert_eq!(
            bind(&mut (*sep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
            0
        );
        assert_eq!(enable(&mut (*sep).fid), 0);
        let mut rbuf = [0u8; 8];
        let rctx = 0x55usize as *mut c_void;
        assert_eq!(
            (*(*sep).msg).recv.unwrap()(sep, rbuf.as_mut_ptr().cast(), 8, null_mut(), 0, rctx),
            0
        );
        assert_eq!((*(*sep).cm).accept.unwrap()(sep, null_mut(), 0), 0);
        let mut connected = Vec::new();
        for _ in 0..2 {
            let (ev, n) = eq_event(eq, &mut buf);
            assert_eq!(ev, eq_event::FI_CONNECTED, "{n}");
            connected.push(buf.as_ptr().cast::<fi_eq_cm_entry>().read_unaligned().fid);
        }
        assert!(connected.contains(&(&mut (*sep).fid as *mut fid)));
        assert!(connected.contains(&(&mut (*cep).fid as *mut fid)));

        let sctx = 0x66usize as *mut c_void;
        assert_eq!(
            (*(*cep).msg).send.unwrap()(cep, b"ping".as_ptr().cast(), 4, null_mut(), 0, sctx),
            0
        );
        let mut got = Vec::new();
        let read = (*(*cq).ops).sread.unwrap();
        while got.len() < 2 {
            let mut e: fi_cq_msg_entry = std::mem::zeroed();
            let n = read(
                cq,
                (&mut e as *mut fi_cq_msg_entry).cast(),
                1,
                std::ptr::null(),
                5000,
            );
            assert_eq!(n, 1);
            got.push((e.op_context as usize, e.len));
        }
        got.sort();
        assert_eq!(got[0], (0x55, 4));
        assert_eq!(got[1].0, 0x66);
        assert_eq!(&rbuf[..4], b"ping");

        crate::info::free_info(rinfo);
        for f in [
            &mut (*cep).fid as *mut fid,
            &mut (*sep).fid,
            &mut (*pep).fid,
            &mut (*cq).fid,
            &mut (*eq).fid,
            &mut (*sdom).fid,
            &mut (*dom).fid,
            &mut (*fab).fid,
        ] {
            assert_eq!(close(f), 0);
        }
        crate::info::free_info(info);
    }
}

#[test]
fn rma_atomics_counters_and_errors_over_shm() {
    let mut h = ofi_core::Info::hints();
    h.caps = FI_MSG | FI_RMA | FI_ATOMIC;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    // Virtual addresses and provider keys (hints with mr_mode 0 get neither).
    h.domain_attr.mr_mode = mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY;
    let offers = ofi::getinfo((1 << 16) | 17, None, None, 0, Some(&h)).expect("shm offers");
    let info = crate::info::info_to_c(&offers[0]);
    let (mut fab, mut dom, mut cq, mut av, mut cntr) =
        (null_mut(), null_mut(), null_mut(), null_mut(), null_mut());
    let mut eps = [null_mut(); 2];
    let mut target = [0u64; 4];
    let mut mr: *mut fid_mr = null_mut();
    // SAFETY: every pointer is a live object or out-parameter of this test;
    // target outlives every operation on it.
    unsafe {
        assert_eq!(
            super::fabric::fi_fabric((*info).fabric_attr, &mut fab, null_mut()),
            0
        );
        assert_eq!(
            (*(*fab).ops).domain.unwrap()(fab, info, &mut dom, null_mut()),
            0
        );
        let dops = &*(*dom).ops;
        let mut cattr: fi_cq_attr = std::mem::zeroed();
        cattr.format = cq_format::FI_CQ_FORMAT_DATA;
        assert_eq!(
            dops.cq_open.unwrap()(dom, &mut cattr, &mut cq, null_mut()),
            0
        );
        let mut aattr: fi_av_attr = std::mem::zeroed();
        assert_eq!(
            dops.av_open.unwrap()(dom, &mut aattr, &mut av, null_mut()),
            0
        );
        let mut nattr: fi_cntr_attr = std::mem::zeroed();
        nattr.wait_obj = wait_obj::FI_WAIT_UNSPEC;
        assert_eq!(
            dops.cntr_open.unwrap()(dom, &mut nattr, &mut cntr, null_mut()),
            0
        );
        for ep in eps.iter_mut() {
            assert_eq!(dops.endpoint.unwrap()(dom, info, ep, null_mut()), 0);
            assert_eq!(
                bind(&mut (**ep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
                0
            );
            assert_eq!(bind(&mut (**ep).fid, &mut (*av).fid, 0), 0);
            assert_eq!(
                bind(&mut (**ep).fid, &mut (*cntr).fid, FI_WRITE | FI_READ),
                0
            );
            assert_eq!(enable(&mut (**ep).fid), 0);
        }
        let w = World {
            info,
            fab,
            dom,
            cq,
            av,
            eps,
        };
        let _ = w.insert(0);
        let a1 = w.insert(1);
        let reg = (*(*dom).mr).reg.unwrap();
        let access = FI_REMOTE_READ | FI_REMOTE_WRITE;
        let tp = target.as_mut_ptr();
        assert_eq!(
            reg(
                &mut (*dom).fid,
                tp.cast(),
                32,
                access,
                0,
                0,
                0,
                &mut mr,
                null_mut()
            ),
            0
        );
        let key = (*mr).key;
        let base = tp as u64;

        // Write 7 into target[1], read it back into `back`.
        let seven = 7u64;
        let rma = &*(*eps[0]).rma;
        let ctx = 0x10usize as *mut c_void;
        let r = rma.write.unwrap()(
            eps[0],
            (&seven as *const u64).cast(),
            8,
            null_mut(),
            a1,
            base + 8,
            key,
            ctx,
        );
        assert_eq!(r, 0);
        let cwait = (*(*cntr).ops).wait.unwrap();
        assert_eq!(cwait(cntr, 1, 5000), 0);
        let mut back = 0u64;
        let r = rma.read.unwrap()(
            eps[0],
            (&mut back as *mut u64).cast(),
            8,
            null_mut(),
            a1,
            base + 8,
            key,
            ctx,
        );
        assert_eq!(r, 0);
        assert_eq!(cwait(cntr, 2, 5000), 0);
        assert_eq!(back, 7);

        // Fetch-add 5 to target[1]: the old value comes back.
        let at = &*(*eps[0]).atomic;
        let mut count = 0usize;
        assert_eq!(
            at.readwritevalid.unwrap()(eps[0], datatype::FI_UINT64, atomic_op::FI_SUM, &mut count),
            0
        );
        assert!(count >= 1);
        let five = 5u64;
        let mut old = 0u64;
        let r = at.readwrite.unwrap()(
            eps[0],
            (&five as *const u64).cast(),
            1,
            null_mut(),
            (&mut old as *mut u64).cast(),
            null_mut(),
            a1,
            base + 8,
            key,
            datatype::FI_UINT64,
            atomic_op::FI_SUM,
            ctx,
        );
        assert_eq!(r, 0);
        assert_eq!(cwait(cntr, 3, 5000), 0);
        assert_eq!(old, 7);
        assert_eq!(std::ptr::read_volatile(tp.add(1)), 12);

        // A bad key fails with an error completion, read with readerr.
        let mut drained = 0;
        while drained < 3 {
            let mut e: fi_cq_data_entry = std::mem::zeroed();
            let n = (*(*cq).ops).read.unwrap()(cq, (&mut e as *mut fi_cq_data_entry).cast(), 1);
            if n == 1 {
                drained += 1;
            }
        }
        let r = rma.write.unwrap()(
            eps[0],
            (&seven as *const u64).cast(),
            8,
            null_mut(),
            a1,
            base,
            key ^ 1,
            ctx,
        );
        assert_eq!(r, 0);
        let mut n;
        loop {
            let mut e: fi_cq_data_entry = std::mem::zeroed();
            n = (*(*cq).ops).read.unwrap()(cq, (&mut e as *mut fi_cq_data_entry).cast(), 1);
            if n != -(FI_EAGAIN as ssize_t) {
                break;
            }
        }
        assert_eq!(n, -(FI_EAVAIL as ssize_t));
        let mut err: fi_cq_err_entry = std::mem::zeroed();
        assert_eq!((*(*cq).ops).readerr.unwrap()(cq, &mut err, 0), 1);
        assert_eq!(err.op_context, ctx);
        assert_ne!(err.err, 0);
        assert!(err.err_data.is_null());
        assert_eq!(err.err_data_size, 0);
        assert_eq!((*(*cntr).ops).readerr.unwrap()(cntr), 1);
        let s = (*(*cq).ops).strerror.unwrap()(cq, err.prov_errno, err.err_data, null_mut(), 0);
        assert!(!std::ffi::CStr::from_ptr(s).to_bytes().is_empty());

        assert_eq!(close(&mut (*mr).fid), 0);
        for ep in eps {
            assert_eq!(close(&mut (*ep).fid), 0);
        }
        assert_eq!(close(&mut (*cntr).fid), 0);
        let _ = w.eps;
        assert_eq!(close(&mut (*av).fid), 0);
        assert_eq!(close(&mut (*cq).fid), 0);
        assert_eq!(close(&mut (*dom).fid), 0);
        assert_eq!(close(&mut (*fab).fid), 0);
        crate::info::free_info(info);
    }
}

/// A triggered FI_ATOMIC_READ whose operand is NULL (fi_atomic(3): it is
/// ignored and may be NULL) reads the target once the counter fires; the
/// deferred path handed the NULL operand on and shm copied from address 0.
#[test]
fn triggered_atomic_read_with_a_null_operand() {
    let mut h = ofi_core::Info::hints();
    h.caps = FI_MSG | FI_RMA | FI_ATOMIC | FI_TRIGGER;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    h.fabric_attr.prov_name = Some("shm".into());
    h.domain_attr.mr_mode = mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY;
    let offers = ofi::getinfo((1 << 16) | 17, None, None, 0, Some(&h)).expect("shm offers");
    let info = crate::info::info_to_c(&offers[0]);
    let (mut fab, mut dom, mut cq, mut av, mut cntr) =
        (null_mut(), null_mut(), null_mut(), null_mut(), null_mut());
    let mut eps = [null_mut(); 2];
    let mut target = [0x5a5a_5a5a_5a5a_5a5au64; 2];
    let mut mr: *mut fid_mr = null_mut();
    // SAFETY: every pointer is a live object or out-parameter of this test;
    // target, the result and the triggered context outlive the operation.
    unsafe {
        assert_eq!(
            super::fabric::fi_fabric((*info).fabric_attr, &mut fab, null_mut()),
            0
        );
        assert_eq!(
            (*(*fab).ops).domain.unwrap()(fab, info, &mut dom, null_mut()),
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
        let mut nattr: fi_cntr_attr = std::mem::zeroed();
        assert_eq!(
            dops.cntr_open.unwrap()(dom, &mut nattr, &mut cntr, null_mut()),
            0
        );
        for ep in eps.iter_mut() {
            assert_eq!(dops.endpoint.unwrap()(dom, info, ep, null_mut()), 0);
            assert_eq!(
                bind(&mut (**ep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
                0
            );
            assert_eq!(bind(&mut (**ep).fid, &mut (*av).fid, 0), 0);
            assert_eq!(enable(&mut (**ep).fid), 0);
        }
        let w = World {
            info,
            fab,
            dom,
            cq,
            av,
            eps,
        };
        let _ = w.insert(0);
        let a1 = w.insert(1);
        let tp = target.as_mut_ptr();
        assert_eq!(
            (*(*dom).mr).reg.unwrap()(
                &mut (*dom).fid,
                tp.cast(),
                16,
                FI_REMOTE_READ | FI_REMOTE_WRITE,
                0,
                0,
                0,
                &mut mr,
                null_mut()
            ),
            0
        );
        let mut tctx: fi_triggered_context = std::mem::zeroed();
        tctx.event_type = trigger_event::FI_TRIGGER_THRESHOLD;
        tctx.trigger.threshold = fi_trigger_threshold { cntr, threshold: 1 };
        let tctx_p = (&mut tctx as *mut fi_triggered_context).cast::<c_void>();
        let operand = fi_ioc {
            addr: null_mut(),
            count: 1,
        };
        let remote = fi_rma_ioc {
            addr: tp as u64,
            count: 1,
            key: (*mr).key,
        };
        let m = fi_msg_atomic {
            msg_iov: &operand,
            desc: null_mut(),
            iov_count: 1,
            addr: a1,
            rma_iov: &remote,
            rma_iov_count: 1,
            datatype: datatype::FI_UINT64,
            op: atomic_op::FI_ATOMIC_READ,
            context: tctx_p,
            data: 0,
        };
        let mut old = 0u64;
        let mut result = fi_ioc {
            addr: (&mut old as *mut u64).cast(),
            count: 1,
        };
        let at = &*(*eps[0]).atomic;
        assert_eq!(
            at.readwritemsg.unwrap()(eps[0], &m, &mut result, null_mut(), 1, FI_TRIGGER),
            0
        );
        assert_eq!((*(*cntr).ops).add.unwrap()(cntr, 1), 0);
        assert_eq!(w.completion().op_context, tctx_p);
        assert_eq!(old, 0x5a5a_5a5a_5a5a_5a5a, "the target's value");
        assert_eq!(close(&mut (*mr).fid), 0);
        assert_eq!(close(&mut (*cntr).fid), 0);
        w.close_all();
    }
}

#[test]
fn triggered_send_waits_for_its_counter() {
    let w = open_world(FI_TAGGED | FI_MSG | FI_TRIGGER);
    let _ = w.insert(0);
    let a1 = w.insert(1);
    let mut cntr = null_mut();
    let mut rbuf = [0u8; 4];
    let sbuf = *b"trig";
    // SAFETY: live objects; buffers and the triggered context outlive the
    // completions read below.
    unsafe {
        let mut nattr: fi_cntr_attr = std::mem::zeroed();
        assert_eq!(
            (*(*w.dom).ops).cntr_open.unwrap()(w.dom, &mut nattr, &mut cntr, null_mut()),
            0
        );
        let mut tctx: fi_triggered_context = std::mem::zeroed();
        tctx.event_type = trigger_event::FI_TRIGGER_THRESHOLD;
        tctx.trigger.threshold = fi_trigger_threshold { cntr, threshold: 1 };
        let tctx_p = (&mut tctx as *mut fi_triggered_context).cast::<c_void>();
        let t1 = &*(*w.eps[1]).tagged;
        let rctx = 0x31usize as *mut c_void;
        assert_eq!(
            t1.recv.unwrap()(
                w.eps[1],
                rbuf.as_mut_ptr().cast(),
                4,
                null_mut(),
                FI_ADDR_UNSPEC,
                9,
                0,
                rctx
            ),
            0
        );
        let iov = iovec {
            iov_base: sbuf.as_ptr() as *mut c_void,
            iov_len: 4,
        };
        let m = fi_msg_tagged {
            msg_iov: &iov,
            desc: null_mut(),
            iov_count: 1,
            addr: a1,
            tag: 9,
            ignore: 0,
            context: tctx_p,
            data: 0,
        };
        assert_eq!(
            (*(*w.eps[0]).tagged).sendmsg.unwrap()(w.eps[0], &m, FI_TRIGGER | FI_COMPLETION),
            0
        );
        let read = (*(*w.cq).ops).read.unwrap();
        let mut e: fi_cq_tagged_entry = std::mem::zeroed();
        for _ in 0..1000 {
            assert_eq!(
                read(w.cq, (&mut e as *mut fi_cq_tagged_entry).cast(), 1),
                -(FI_EAGAIN as ssize_t)
            );
        }
        assert_eq!((*(*cntr).ops).add.unwrap()(cntr, 1), 0);
        let mut seen = vec![w.completion().op_context, w.completion().op_context];
        seen.sort();
        assert_eq!(seen, vec![rctx, tctx_p]);
        assert_eq!(&rbuf, b"trig");
        assert_eq!(close(&mut (*cntr).fid), 0);
    }
    w.close_all();
}

#[test]
fn rejected_connection_reports_the_private_data() {
    let mut h = ofi_core::Info::hints();
    h.caps = FI_MSG;
    h.ep_attr.ep_type = ep_type::FI_EP_MSG;
    h.fabric_attr.prov_name = Some("tcp".into());
    let offers = ofi::getinfo(
        (1 << 16) | 17,
        Some("127.0.0.1"),
        Some("0"),
        FI_SOURCE,
        Some(&h),
    )
    .expect("tcp msg offers");
    let info = crate::info::info_to_c(&offers[0]);
    let (mut fab, mut seq, mut ceq, mut pep, mut dom) =
        (null_mut(), null_mut(), null_mut(), null_mut(), null_mut());
    let (mut cq, mut cep) = (null_mut(), null_mut());
    let mut buf = [0u8; 64];
    // SAFETY: every pointer is a live object or out-parameter of this test.
    unsafe {
        assert_eq!(
            super::fabric::fi_fabric((*info).fabric_attr, &mut fab, null_mut()),
            0
        );
        let fops = &*(*fab).ops;
        let mut eattr: fi_eq_attr = std::mem::zeroed();
        eattr.wait_obj = wait_obj::FI_WAIT_UNSPEC;
        assert_eq!(
            fops.eq_open.unwrap()(fab, &mut eattr, &mut seq, null_mut()),
            0
        );
        assert_eq!(
            fops.eq_open.unwrap()(fab, &mut eattr, &mut ceq, null_mut()),
            0
        );
        assert_eq!(fops.passive_ep.unwrap()(fab, info, &mut pep, null_mut()), 0);
        assert_eq!(bind(&mut (*pep).fid, &mut (*seq).fid, 0), 0);
        assert_eq!((*(*pep).cm).listen.unwrap()(pep), 0);
        let mut name = [0u8; 64];
        let mut len = name.len();
        assert_eq!(
            (*(*pep).cm).getname.unwrap()(&mut (*pep).fid, name.as_mut_ptr().cast(), &mut len),
            0
        );
        assert_eq!(fops.domain.unwrap()(fab, info, &mut dom, null_mut()), 0);
        let mut cattr: fi_cq_attr = std::mem::zeroed();
        assert_eq!(
            (*(*dom).ops).cq_open.unwrap()(dom, &mut cattr, &mut cq, null_mut()),
            0
        );
        assert_eq!(
            (*(*dom).ops).endpoint.unwrap()(dom, info, &mut cep, null_mut()),
            0
        );
        assert_eq!(bind(&mut (*cep).fid, &mut (*ceq).fid, 0), 0);
        assert_eq!(
            bind(&mut (*cep).fid, &mut (*cq).fid, FI_TRANSMIT | FI_RECV),
            0
        );
        assert_eq!(enable(&mut (*cep).fid), 0);
        assert_eq!(
            (*(*cep).cm).connect.unwrap()(cep, name.as_ptr().cast(), null_mut(), 0),
            0
        );

        let (ev, _) = eq_event(seq, &mut buf);
        assert_eq!(ev, eq_event::FI_CONNREQ);
        let entry = buf.as_ptr().cast::<fi_eq_cm_entry>().read_unaligned();
        // fi_pingpong's error path: an endpoint is opened for the request,
        // then the request is rejected; the endpoint still owns the handle.
        let (mut sdom, mut sep) = (null_mut(), null_mut());
        assert_eq!(
            fops.domain.unwrap()(fab, entry.info, &mut sdom, null_mut()),
            0
        );
        assert_eq!(
            (*(*sdom).ops).endpoint.unwrap()(sdom, entry.info, &mut sep, null_mut()),
            0
        );
        let no = *b"no";
        let reject = (*(*pep).cm).reject.unwrap();
        assert_eq!(reject(pep, (*entry.info).handle, no.as_ptr().cast(), 2), 0);
        assert_eq!(close(&mut (*sep).fid), 0);
        assert_eq!(close(&mut (*sdom).fid), 0);
        crate::info::free_info(entry.info);

        let (_, n) = eq_event(ceq, &mut buf);
        assert_eq!(n, -(FI_EAVAIL as ssize_t));
        // An fi_eq_err_entry without a buffer of the application's: err_data
        // points at the library's copy.
        let mut err: fi_eq_err_entry = std::mem::zeroed();
        let readerr = (*(*ceq).ops).readerr.unwrap();
        let n = readerr(ceq, &mut err, 0);
        assert_eq!(n as usize, std::mem::size_of::<fi_eq_err_entry>());
        assert_eq!(err.fid, &mut (*cep).fid as *mut fid);
        assert_eq!(err.err, FI_ECONNREFUSED);
        assert_eq!(err.err_data_size, 2);
        assert_eq!(
            std::slice::from_raw_parts(err.err_data.cast::<u8>(), 2),
            b"no"
        );

        for f in [
            &mut (*cep).fid as *mut fid,
            &mut (*pep).fid,
            &mut (*cq).fid,
            &mut (*seq).fid,
            &mut (*ceq).fid,
            &mut (*dom).fid,
            &mut (*fab).fid,
        ] {
            assert_eq!(close(f), 0);
        }
        crate::info::free_info(info);
    }
}

impl World {
    /// The next completion or error completion of the CQ (format TAGGED),
    /// with its source address.
    fn next(&self) -> Result<(fi_cq_tagged_entry, fi_addr_t), fi_cq_err_entry> {
        // SAFETY: live CQ of format TAGGED; the entries are written by the calls.
        unsafe {
            let ops = &*(*self.cq).ops;
            loop {
                let mut e: fi_cq_tagged_entry = std::mem::zeroed();
                let mut src = 0u64;
                let n = ops.readfrom.unwrap()(
                    self.cq,
                    (&mut e as *mut fi_cq_tagged_entry).cast(),
                    1,
                    &mut src,
                );
                if n == 1 {
                    return Ok((e, src));
                }
                if n == -(FI_EAVAIL as ssize_t) {
                    let mut err: fi_cq_err_entry = std::mem::zeroed();
                    assert_eq!(ops.readerr.unwrap()(self.cq, &mut err, 0), 1);
                    return Err(err);
                }
                assert_eq!(n, -(FI_EAGAIN as ssize_t));
            }
        }
    }

    fn trecvmsg(
        &self,
        i: usize,
        buf: Option<&mut [u8]>,
        tag: u64,
        ctx: *mut c_void,
        flags: u64,
    ) -> ssize_t {
        let (iov, n) = match buf {
            Some(b) => (
                iovec {
                    iov_base: b.as_mut_ptr().cast(),
                    iov_len: b.len(),
                },
                1,
            ),
            None => (
                iovec {
                    iov_base: null_mut(),
                    iov_len: 0,
                },
                0,
            ),
        };
        let m = fi_msg_tagged {
            msg_iov: if n == 1 { &iov } else { std::ptr::null() },
            desc: null_mut(),
            iov_count: n,
            addr: FI_ADDR_UNSPEC,
            tag,
            ignore: 0,
            context: ctx,
            data: 0,
        };
        // SAFETY: live endpoint; the buffer outlives the completion the
        // caller reads.
        unsafe { (*(*self.eps[i]).tagged).recvmsg.unwrap()(self.eps[i], &m, flags) }
    }
}

/// FI_DISCARD without FI_PEEK or FI_CLAIM is refused alike on every
/// provider (fi_tagged(3)); shm posted it as a receive and filled the
/// buffer, hybrid dropped a queued message but filled the buffer for a
/// later one.
#[test]
fn discard_alone_is_refused_on_every_provider() {
    let builtin: Vec<String> = ofi::providers()
        .into_iter()
        .filter(|(_, _, o)| *o == ofi::spi::registry::Origin::Builtin)
        .map(|(name, _, _)| name)
        .collect();
    assert!(builtin.len() >= 4, "built-in providers: {builtin:?}");
    for prov in builtin.iter().map(String::as_str) {
        let w = open_world_on(prov, FI_TAGGED | FI_MSG);
        let mut rbuf = [0u8; 8];
        let r = w.trecvmsg(
            1,
            Some(&mut rbuf),
            5,
            0x55 as *mut c_void,
            FI_DISCARD | FI_COMPLETION,
        );
        assert_eq!(r, -(FI_EBADFLAGS as ssize_t), "{prov}");
        w.close_all();
    }
}

#[test]
fn peek_claim_cancel_and_readfrom_over_shm() {
    let w = open_world(FI_TAGGED | FI_MSG | FI_SOURCE);
    let a0 = w.insert(0);
    let a1 = w.insert(1);
    let sbuf = *b"abc";
    let mut claim: fi_context = fi_context {
        internal: [null_mut(); 4],
    };
    let cctx = (&mut claim as *mut fi_context).cast::<c_void>();
    // SAFETY: live endpoint; sbuf outlives the send's completion.
    unsafe {
        let t0 = &*(*w.eps[0]).tagged;
        assert_eq!(
            t0.send.unwrap()(
                w.eps[0],
                sbuf.as_ptr().cast(),
                3,
                null_mut(),
                a1,
                3,
                0x70 as *mut c_void
            ),
            0
        );
    }
    // Peek (and claim) until the message is there: FI_ENOMSG until then.
    let found = 'peek: loop {
        assert_eq!(
            w.trecvmsg(1, None, 3, cctx, FI_PEEK | FI_CLAIM | FI_COMPLETION),
            0
        );
        // Each peek completes once, found or not (the send's own
        // completion may come in between).
        loop {
            match w.next() {
                Ok((e, src)) if e.op_context == cctx => break 'peek (e, src),
                Ok((e, _)) => assert_eq!(e.op_context as usize, 0x70),
                Err(err) => {
                    assert_eq!(err.err, FI_ENOMSG);
                    assert_eq!(err.op_context, cctx);
                    break;
                }
            }
        }
    };
    assert_eq!(found.0.len, 3);
    assert_eq!(found.0.tag, 3);
    assert_eq!(found.1, a0);
    let mut rbuf = [0u8; 8];
    assert_eq!(
        w.trecvmsg(1, Some(&mut rbuf), 3, cctx, FI_CLAIM | FI_COMPLETION),
        0
    );
    let got = loop {
        match w.next() {
            Ok((e, _)) if e.op_context == cctx => break e,
            Ok((e, _)) => assert_eq!(e.op_context as usize, 0x70),
            Err(err) => panic!("claim failed: {}", err.err),
        }
    };
    assert_eq!(got.len, 3);
    assert_eq!(&rbuf[..3], b"abc");

    // A receive that never matches is canceled by its context.
    let mut cbuf = [0u8; 4];
    let xctx = 0x99usize as *mut c_void;
    // SAFETY: live endpoint; cbuf outlives the cancel's completion.
    unsafe {
        let t1 = &*(*w.eps[1]).tagged;
        assert_eq!(
            t1.recv.unwrap()(
                w.eps[1],
                cbuf.as_mut_ptr().cast(),
                4,
                null_mut(),
                FI_ADDR_UNSPEC,
                99,
                0,
                xctx
            ),
            0
        );
        let cancel = (*(*w.eps[1]).ops).cancel.unwrap();
        assert_eq!(cancel(&mut (*w.eps[1]).fid, xctx), 0);
    }
    loop {
        match w.next() {
            Err(err) => {
                assert_eq!(err.err, FI_ECANCELED);
                assert_eq!(err.op_context, xctx);
                break;
            }
            Ok((e, _)) => assert_eq!(e.op_context as usize, 0x70),
        }
    }
    w.close_all();
}
