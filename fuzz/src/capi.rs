//! The C ABI's argument handling: a script of calls to the exported
//! functions of `libfabric.so.1` (`fi_getinfo` with arbitrary hints, node,
//! service, flags and version; `fi_tostr` of every type; `fi_av_insert`,
//! `fi_av_insertsvc`, `fi_av_insertsym`, `fi_av_straddr`, `fi_av_lookup`,
//! `fi_av_remove` on a shm and a tcp AV; `fi_strerror`; `fi_param_get`;
//! `fi_fabric` with arbitrary attributes), each argument taken from the
//! input. Every call honours the C contract (pointers are valid for what
//! the type promises) and nothing else, so any crash, panic or leak is the
//! library's. A panic caught by the library's panic boundary counts too:
//! libFuzzer's panic hook aborts on it, and [`panicked`] reports it to the
//! replay tests.

use fabric::abi::*;
use fabric::obj::fabric::fi_fabric;
use fabric::top;
use ofi_core::consts::{av_type, ep_type, FI_ADDR_NOTAVAIL};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Once, OnceLock};

/// The input as a stream of values; past its end every read gives zeros.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        let s = self.bytes(4);
        b[..s.len()].copy_from_slice(s);
        u32::from_le_bytes(b)
    }
    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }
    /// Up to `max` bytes, length first.
    fn blob(&mut self, max: usize) -> Vec<u8> {
        let n = usize::from(self.u8()) % (max + 1);
        self.bytes(n).to_vec()
    }
    /// A string of up to `max` bytes without NUL (any other byte allowed).
    fn text(&mut self, max: usize) -> Vec<u8> {
        let mut v = self.blob(max);
        v.retain(|&b| b != 0);
        v
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A malloc'd NUL-terminated copy (the library frees hint strings with free()).
fn c_dup(s: &[u8]) -> *mut c_char {
    // SAFETY: malloc of len + 1 bytes, filled and terminated below.
    unsafe {
        let p = libc::malloc(s.len() + 1).cast::<u8>();
        assert!(!p.is_null(), "malloc");
        std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
        *p.add(s.len()) = 0;
        p.cast()
    }
}

/// A malloc'd copy of raw bytes (at least one byte is allocated).
fn c_bytes(s: &[u8]) -> *mut c_void {
    // SAFETY: malloc of max(len, 1) bytes, len of them filled.
    unsafe {
        let p = libc::malloc(s.len().max(1)).cast::<u8>();
        assert!(!p.is_null(), "malloc");
        std::ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
        p.cast()
    }
}

/// A host string for `node` that never leaves this machine for name
/// resolution: NULL, loopback, or an address literal made of the input's
/// digits, dots and colons (a string of them that is no literal, such as
/// fifteen digits, goes to the system's DNS resolver: such strings become
/// the dotted quad of the input's first bytes instead).
fn node(c: &mut Cursor<'_>) -> Option<Vec<u8>> {
    match c.u8() % 4 {
        0 => None,
        1 => Some(b"127.0.0.1".to_vec()),
        2 => Some(b"::1".to_vec()),
        _ => {
            const CH: &[u8] = b"0123456789.:";
            let raw = c.blob(24);
            let s: Vec<u8> = raw.iter().map(|b| CH[usize::from(*b) % CH.len()]).collect();
            let literal =
                std::str::from_utf8(&s).is_ok_and(|t| t.parse::<std::net::IpAddr>().is_ok());
            if literal {
                return Some(s);
            }
            let q = |i: usize| raw.get(i).copied().unwrap_or(0);
            Some(format!("{}.{}.{}.{}", q(0), q(1), q(2), q(3)).into_bytes())
        }
    }
}

/// Fuzzed hints from `fi_dupinfo(NULL)` (as `fi_allocinfo`), freed by the
/// caller with `fi_freeinfo`.
fn hints(c: &mut Cursor<'_>) -> *mut fi_info {
    // SAFETY: fi_dupinfo(NULL) allocates a zeroed info with its attributes.
    let h = unsafe { top::fi_dupinfo(null()) };
    assert!(!h.is_null(), "fi_allocinfo");
    // SAFETY: h and its attribute structs are live and owned here; strings
    // and addresses are malloc'd with their lengths, as fi_freeinfo expects.
    unsafe {
        let i = &mut *h;
        let which = c.u32();
        i.caps = c.u64();
        i.mode = c.u64();
        i.addr_format = c.u32() % 16;
        if which & 1 != 0 {
            let a = c.blob(40);
            i.src_addrlen = a.len();
            i.src_addr = c_bytes(&a);
        }
        if which & 2 != 0 {
            let a = c.blob(40);
            i.dest_addrlen = a.len();
            i.dest_addr = c_bytes(&a);
        }
        let t = &mut *i.tx_attr;
        t.caps = c.u64();
        t.mode = c.u64();
        t.op_flags = c.u64();
        t.msg_order = c.u64();
        t.inject_size = c.u64() as usize;
        t.size = c.u64() as usize;
        t.iov_limit = c.u64() as usize;
        let r = &mut *i.rx_attr;
        r.caps = c.u64();
        r.op_flags = c.u64();
        r.size = c.u64() as usize;
        let e = &mut *i.ep_attr;
        e.r#type = c.u32() % 6;
        e.protocol = c.u32();
        e.max_msg_size = c.u64() as usize;
        e.mem_tag_format = c.u64();
        e.tx_ctx_cnt = usize::from(c.u8());
        if which & 4 != 0 {
            let k = c.blob(32);
            e.auth_key_size = k.len();
            e.auth_key = c_bytes(&k).cast();
        }
        let d = &mut *i.domain_attr;
        d.threading = c.u32() % 8;
        d.control_progress = c.u32() % 4;
        d.data_progress = c.u32() % 4;
        d.resource_mgmt = c.u32() % 4;
        d.av_type = c.u32() % 4;
        d.mr_mode = c.u32() as c_int;
        d.mr_key_size = usize::from(c.u8());
        d.cq_data_size = usize::from(c.u8());
        d.caps = c.u64();
        d.mode = c.u64();
        if which & 8 != 0 {
            d.name = c_dup(&c.text(16));
        }
        if which & 16 != 0 {
            let k = c.blob(32);
            d.auth_key_size = k.len();
            d.auth_key = c_bytes(&k).cast();
        }
        let f = &mut *i.fabric_attr;
        if which & 32 != 0 {
            f.prov_name = c_dup(&c.text(16));
        }
        if which & 64 != 0 {
            f.name = c_dup(&c.text(16));
        }
        f.api_version = c.u32();
    }
    h
}

/// A fabric, domain and AV of one provider, opened once per process.
struct Av {
    _fabric: *mut fid_fabric,
    _domain: *mut fid_domain,
    av: *mut fid_av,
}

/// Opens `prov`'s RDM AV through the C ABI (never closed: one per process).
fn open_av(prov: &str) -> Option<Av> {
    // SAFETY: every pointer is a live object or out-parameter of this block.
    unsafe {
        let h = top::fi_dupinfo(null());
        (*(*h).fabric_attr).prov_name = c_dup(prov.as_bytes());
        (*(*h).ep_attr).r#type = ep_type::FI_EP_RDM;
        let mut info = null_mut();
        let r = top::fi_getinfo((1 << 16) | 17, null(), null(), 0, h, &mut info);
        top::fi_freeinfo(h);
        if r != 0 {
            return None;
        }
        let mut fab = null_mut();
        let mut dom = null_mut();
        let mut av = null_mut();
        if fi_fabric((*info).fabric_attr, &mut fab, null_mut()) != 0 {
            return None;
        }
        if (*(*fab).ops).domain?(fab, info, &mut dom, null_mut()) != 0 {
            return None;
        }
        let mut attr: fi_av_attr = std::mem::zeroed();
        attr.r#type = av_type::FI_AV_TABLE;
        if (*(*dom).ops).av_open?(dom, &mut attr, &mut av, null_mut()) != 0 {
            return None;
        }
        top::fi_freeinfo(info);
        Some(Av {
            _fabric: fab,
            _domain: dom,
            av,
        })
    }
}

/// The shm and tcp AVs, kept in a static so that leak checkers see them
/// reachable (they are never closed).
struct Avs([Option<Av>; 2]);

// SAFETY: the AVs are library objects usable from any thread; the fuzz
// target and its replay call them from one thread at a time.
unsafe impl Send for Avs {}
// SAFETY: shared access only reads the AV pointers (`av_of`); the calls
// made through them come from one thread at a time (the fuzz target and
// its replay are single-threaded).
unsafe impl Sync for Avs {}

static AVS: OnceLock<Avs> = OnceLock::new();

/// The AV of provider `i` (0: shm, 1: tcp), if it could be opened.
fn av_of(i: usize) -> Option<*mut fid_av> {
    AVS.get_or_init(|| Avs([open_av("shm"), open_av("tcp")])).0[i]
        .as_ref()
        .map(|a| a.av)
}

static PANICKED: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// True once any call panicked inside the library (even if its panic
/// boundary caught it).
pub fn panicked() -> bool {
    PANICKED.load(Ordering::Relaxed)
}

fn setup() {
    HOOK.call_once(|| {
        // The library's warnings for refused input would flood the run: an
        // application-installed subscriber that drops everything (the C
        // ABI keeps a subscriber the process already has).
        let _ =
            tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default());
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |i| {
            PANICKED.store(true, Ordering::Relaxed);
            prev(i);
        }));
    });
}

/// A buffer holding `data`, then 300 bytes of 0xA5 and 300 zeros: up to 8
/// addresses read as the format allows (sockaddrs, or strings of at most
/// 256 bytes) from a position inside `data` stay inside it.
fn padded(data: &[u8]) -> Vec<u8> {
    let mut v = data.to_vec();
    v.extend(std::iter::repeat_n(0xA5, 300));
    v.extend(std::iter::repeat_n(0, 300));
    v
}

/// One `fi_av_*` call on a shm or tcp AV.
fn av_call(c: &mut Cursor<'_>, op: u8) {
    let which = usize::from(c.u8() & 1);
    {
        let Some(av) = av_of(which) else {
            return;
        };
        // SAFETY: av is live; every buffer is sized as the call's contract
        // asks (count entries, padded addresses, len bytes).
        unsafe {
            let ops = &*(*av).ops;
            match op {
                0 => {
                    let count = usize::from(c.u8() % 9);
                    let flags = if c.u8() & 1 != 0 { FI_SYNC_ERR } else { 0 };
                    let with_out = c.u8() & 1 != 0;
                    let buf = padded(&c.blob(200));
                    let mut out = vec![FI_ADDR_NOTAVAIL - 1; count];
                    let mut st = vec![-1 as c_int; count];
                    let ctx = if flags != 0 {
                        st.as_mut_ptr().cast()
                    } else {
                        null_mut()
                    };
                    let outp = if with_out {
                        out.as_mut_ptr()
                    } else {
                        null_mut()
                    };
                    let n = ops.insert.unwrap()(av, buf.as_ptr().cast(), count, outp, flags, ctx);
                    assert!(n <= count as c_int, "{n} inserted of {count}");
                    if with_out && n >= 0 {
                        let got: Vec<u64> = out
                            .iter()
                            .copied()
                            .filter(|a| *a != FI_ADDR_NOTAVAIL)
                            .collect();
                        assert_eq!(got.len(), n as usize, "fi_addr entries vs return value");
                        if !got.is_empty() {
                            let mut g = got.clone();
                            assert_eq!(ops.remove.unwrap()(av, g.as_mut_ptr(), g.len(), 0), 0);
                        }
                    }
                    if flags != 0 && n >= 0 {
                        let ok = st.iter().filter(|s| **s == 0).count();
                        assert_eq!(ok, n as usize, "FI_SYNC_ERR statuses vs return value");
                    }
                }
                1 => {
                    let buf = padded(&c.blob(200));
                    let mut text = vec![0u8; usize::from(c.u8())];
                    let mut len = text.len();
                    let p = if text.is_empty() {
                        null_mut()
                    } else {
                        text.as_mut_ptr()
                    };
                    ops.straddr.unwrap()(av, buf.as_ptr().cast(), p.cast(), &mut len);
                }
                2 => {
                    let fa = if c.u8() & 1 != 0 {
                        c.u64()
                    } else {
                        u64::from(c.u8())
                    };
                    let mut buf = vec![0u8; usize::from(c.u8())];
                    let mut len = buf.len();
                    ops.lookup.unwrap()(av, fa, buf.as_mut_ptr().cast(), &mut len);
                }
                3 => {
                    let n = node(c).map(|v| c_dup(&v));
                    let s = c_dup(&c.text(12));
                    let mut fa = 0u64;
                    let r = ops.insertsvc.unwrap()(
                        av,
                        n.unwrap_or(null_mut()),
                        s,
                        &mut fa,
                        0,
                        null_mut(),
                    );
                    if r == 1 {
                        assert_eq!(ops.remove.unwrap()(av, &mut fa, 1, 0), 0);
                    }
                    libc::free(s.cast());
                    if let Some(n) = n {
                        libc::free(n.cast());
                    }
                }
                _ => {
                    let n = c_dup(&node(c).unwrap_or_default());
                    let s = c_dup(&c.text(8));
                    let (nc, sc) = (usize::from(c.u8() % 4), usize::from(c.u8() % 4));
                    let mut out = vec![FI_ADDR_NOTAVAIL; nc * sc];
                    let r =
                        ops.insertsym.unwrap()(av, n, nc, s, sc, out.as_mut_ptr(), 0, null_mut());
                    assert!(r <= (nc * sc) as c_int, "insertsym: {r} of {}", nc * sc);
                    let mut got: Vec<u64> =
                        out.into_iter().filter(|a| *a != FI_ADDR_NOTAVAIL).collect();
                    if !got.is_empty() {
                        assert_eq!(ops.remove.unwrap()(av, got.as_mut_ptr(), got.len(), 0), 0);
                    }
                    libc::free(n.cast());
                    libc::free(s.cast());
                }
            }
        }
    }
}

/// `fi_getinfo` with fuzzed hints (or none), node, service, flags, version;
/// the offers are printed with `fi_tostr`, duplicated and freed.
fn getinfo_call(c: &mut Cursor<'_>) {
    let h = if c.u8() & 1 != 0 {
        hints(c)
    } else {
        null_mut()
    };
    let version = match c.u8() % 3 {
        0 => (1 << 16) | 17,
        1 => (1 << 16) | u32::from(c.u8() % 24),
        _ => c.u32(),
    };
    let n = node(c).map(|v| c_dup(&v));
    let s = if c.u8() & 1 != 0 {
        Some(c_dup(&c.text(12)))
    } else {
        None
    };
    let flags = c.u64();
    let mut info = null_mut();
    // SAFETY: strings are NUL-terminated, hints a live info, info writable.
    unsafe {
        let r = top::fi_getinfo(
            version,
            n.unwrap_or(null_mut()),
            s.unwrap_or(null_mut()),
            flags,
            h,
            &mut info,
        );
        assert!(r <= 0, "fi_getinfo returned {r}");
        assert!(r == 0 || info.is_null(), "an error with a list");
        let mut i = info;
        while !i.is_null() {
            let t = top::fi_tostr(i.cast(), tostr_type::FI_TYPE_INFO);
            assert!(!t.is_null());
            let d = top::fi_dupinfo(i);
            assert!(!d.is_null(), "fi_dupinfo of an offer");
            top::fi_freeinfo(d);
            i = (*i).next;
        }
        top::fi_freeinfo(info);
        if !h.is_null() {
            // Formatting the hints themselves (any values).
            top::fi_tostr(h.cast(), tostr_type::FI_TYPE_INFO);
            top::fi_freeinfo(h);
        }
        for p in [n, s].into_iter().flatten() {
            libc::free(p.cast());
        }
    }
}

/// `fi_tostr` / `fi_tostr_r` of any type: scalars from the input, structs
/// from fuzzed hints, a live AV as FI_TYPE_FID.
fn tostr_call(c: &mut Cursor<'_>) {
    let ty = c.u32() % 40;
    let mut scalar = [0u64; 8];
    for v in scalar.iter_mut() {
        *v = c.u64();
    }
    let h = hints(c);
    let mut buf = vec![0u8; usize::from(c.u8())];
    // SAFETY: data points to what `ty` names: the struct for struct types,
    // a live fid for FI_TYPE_FID, 64 readable bytes otherwise.
    unsafe {
        let data: *const c_void = match ty {
            tostr_type::FI_TYPE_INFO => h.cast(),
            tostr_type::FI_TYPE_TX_ATTR => (*h).tx_attr.cast(),
            tostr_type::FI_TYPE_RX_ATTR => (*h).rx_attr.cast(),
            tostr_type::FI_TYPE_EP_ATTR => (*h).ep_attr.cast(),
            tostr_type::FI_TYPE_DOMAIN_ATTR => (*h).domain_attr.cast(),
            tostr_type::FI_TYPE_FABRIC_ATTR => (*h).fabric_attr.cast(),
            tostr_type::FI_TYPE_FID => av_of(0).map_or(null(), |a| a.cast_const().cast()),
            _ => scalar.as_ptr().cast(),
        };
        let t = top::fi_tostr(data, ty);
        assert!(!t.is_null());
        let _ = CStr::from_ptr(t);
        let p = if buf.is_empty() {
            null_mut()
        } else {
            buf.as_mut_ptr()
        };
        top::fi_tostr_r(p.cast(), buf.len(), data, ty);
        top::fi_freeinfo(h);
    }
}

/// `fi_strerror`, `fi_param_get` and `fi_fabric` with arbitrary arguments.
fn misc_call(c: &mut Cursor<'_>) {
    // SAFETY: strings are NUL-terminated; value has room for any param type.
    unsafe {
        match c.u8() % 3 {
            0 => {
                let t = top::fi_strerror(c.u32() as c_int);
                assert!(!t.is_null());
                let _ = CStr::from_ptr(t);
            }
            1 => {
                // The core's parameters (NULL provider) by any name; the
                // value slot has room for every parameter type.
                let name = c_dup(&c.text(24));
                let mut value = [0u64; 2];
                top::fi_param_get(null_mut(), name, value.as_mut_ptr().cast());
                libc::free(name.cast());
            }
            _ => {
                let h = hints(c);
                let mut fab = null_mut();
                if fi_fabric((*h).fabric_attr, &mut fab, null_mut()) == 0 {
                    assert!(!fab.is_null());
                    assert_eq!(((*(*fab).fid.ops).close.unwrap())(&mut (*fab).fid), 0);
                }
                top::fi_freeinfo(h);
            }
        }
    }
}

/// Runs the script in `data`: up to 12 calls, each chosen by one byte.
pub fn capi_args(data: &[u8]) {
    setup();
    let mut c = Cursor(data);
    for _ in 0..12 {
        if c.is_empty() {
            break;
        }
        match c.u8() % 9 {
            0 | 1 => getinfo_call(&mut c),
            2 => tostr_call(&mut c),
            3 => misc_call(&mut c),
            op => av_call(&mut c, op - 4),
        }
    }
    assert!(!panicked(), "a call panicked inside the library");
}
