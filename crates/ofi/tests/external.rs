//! External providers: the example provider is built as a shared object,
//! loaded at run time through FI_PROVIDER_PATH, discovered, used, and
//! refused deregistration while one of its fabrics is open.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::spi::registry;
use ofi::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn find_so() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target/<profile>");
    for dir in [profile_dir.to_path_buf(), profile_dir.join("deps")] {
        let p = dir.join("libofi_ext_example.so");
        if p.exists() {
            return p;
        }
    }
    panic!(
        "libofi_ext_example.so not found under {}: build it first with `cargo build -p ofi-ext-example` (same profile)",
        profile_dir.display()
    );
}

#[test]
fn external_provider_loads_runs_and_refuses_busy_deregistration() {
    let so = find_so();
    std::env::set_var("FI_PROVIDER_PATH", so.to_str().expect("utf-8 path"));

    // Loaded on first use and listed beside the built-in providers.
    let provs = {
        ofi::init();
        registry::providers()
    };
    let ext = provs
        .iter()
        .find(|(n, _, _)| n == "loop")
        .expect("loop provider loaded from FI_PROVIDER_PATH");
    assert_eq!(
        ext.2,
        registry::Origin::External(so.to_str().unwrap().to_string())
    );
    assert!(provs
        .iter()
        .any(|(n, _, o)| n == "shm" && *o == registry::Origin::Builtin));

    // A second load of the same object is refused, not duplicated.
    // SAFETY: the test's own provider, already loaded: refused by name.
    let again = unsafe { registry::load_external(so.to_str().unwrap()) }.unwrap_err();
    assert_eq!(again.code(), errno::FI_EALREADY);
    // A file that is not a provider gives a clear error.
    // SAFETY: no such file: nothing is loaded.
    let bad = unsafe { registry::load_external("/nonexistent/libnothing.so") }.unwrap_err();
    assert!(bad.message().contains("dlopen"), "{bad}");
    // A shared object without the entry point is refused by name.
    // SAFETY: libc, already loaded in this process (its initialisers ran).
    let plain = unsafe { registry::load_external("libc.so.6") }.unwrap_err();
    assert_eq!(plain.code(), errno::FI_ENOSYS, "{plain}");
    assert!(plain.message().contains("does not export"), "{plain}");

    // Discover and use it.
    let mut h = Info::hints();
    h.caps = FI_TAGGED;
    h.fabric_attr.prov_name = Some("loop".into());
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .unwrap()
        .remove(0);
    assert_eq!(info.provider(), "loop");
    let fabric = Fabric::open(&info.fabric_attr).unwrap();
    let domain = fabric.domain(&info).unwrap();
    let cq = domain
        .cq(&CqAttr {
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            ..Default::default()
        })
        .unwrap();
    let av = domain.av(&AvAttr::default()).unwrap();
    let a = domain.endpoint(&info).unwrap();
    let b = domain.endpoint(&info).unwrap();
    for e in [&a, &b] {
        e.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
        e.bind_av(&av).unwrap();
        e.enable().unwrap();
    }
    let fb = av.insert_one(&b.getname().unwrap()).unwrap();
    let msg = b"through a provider loaded at run time";
    let mut rx = vec![0u8; 64];
    // SAFETY: rx and msg outlive the operations; we wait for both completions.
    unsafe {
        b.trecv(rx.as_mut_ptr(), rx.len(), FI_ADDR_UNSPEC, 42, 0, 1)
            .unwrap();
        a.tsend(msg.as_ptr(), msg.len(), fb, 42, 2).unwrap();
    }
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < 2 && Instant::now() < deadline {
        let mut e = [CqTaggedEntry::default(); 4];
        if let Ok(n) = cq.read(&mut e) {
            got.extend_from_slice(&e[..n]);
        }
    }
    let recv = got
        .iter()
        .find(|e| e.op_context == 1)
        .expect("receive completion");
    assert_eq!((recv.len, recv.tag), (msg.len(), 42));
    assert_eq!(&rx[..msg.len()], msg);
    assert!(got
        .iter()
        .any(|e| e.op_context == 2 && e.flags & FI_SEND != 0));

    // Busy while a fabric is open; free after everything closes.
    let e = registry::deregister("loop").unwrap_err();
    assert_eq!(e.code(), errno::FI_EBUSY);
    drop((a, b));
    cq.close().unwrap();
    av.close().unwrap();
    domain.close().unwrap();
    fabric.close().unwrap();
    registry::deregister("loop").unwrap();
    assert!(!registry::is_registered("loop"));
}

/// A copy of the example provider whose build identity says it was built
/// against an older provider interface (the literal patched in the binary,
/// as a stale plugin would carry it) is refused, naming the interface
/// version, before any of its code runs.
#[test]
fn a_plugin_built_against_other_provider_traits_is_refused_by_name() {
    let so = find_so();
    let mut bytes = std::fs::read(&so).expect("read the provider");
    let current = format!("provider-traits-{}", registry::PROVIDER_TRAITS_VERSION);
    let (new, old) = (current.as_bytes(), b"provider-traits-1");
    let mut patched = 0;
    let mut i = 0;
    while i + new.len() <= bytes.len() {
        if &bytes[i..i + new.len()] == new {
            bytes[i..i + new.len()].copy_from_slice(old);
            patched += 1;
            i += new.len();
        } else {
            i += 1;
        }
    }
    assert!(patched > 0, "the build identity literal is in the binary");
    let dir = std::env::temp_dir().join(format!("ofi-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stale = dir.join("libofi_stale_provider.so");
    std::fs::write(&stale, &bytes).unwrap();
    // SAFETY: the test's own provider with its build identity patched: it is
    // refused on that identity before its entry point runs.
    let e = unsafe { ofi::load_external(stale.to_str().unwrap()) }.unwrap_err();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(e.code(), errno::FI_ENOSYS, "{e}");
    assert!(
        e.message().contains("built against provider-traits-1")
            && e.message().contains(&format!("this ofi has {current}")),
        "{e}"
    );
}
