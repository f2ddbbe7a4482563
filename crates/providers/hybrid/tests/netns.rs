//! Three processes on two "hosts": network namespaces joined by a veth
//! pair (10.98.N.1 and 10.98.N.2, the shared fixture's), made distinct nodes with FI_HYBRID_NODE
//! (namespaces share /dev/shm, the boot id and the IPC namespace, so by
//! default they would be one node). Processes 0 and 1 share host A, 2 is on
//! host B. Every process exchanges an 8 B and a 100 kB tagged message with
//! every other, data checked; in one run the pair on host A talks through
//! shm (no TCP connection inside namespace A) and the pairs across hosts
//! through tcp (a connection across the veth). Needs root and `ip` (the
//! shared fixture fails without them). The namespaces are removed at the end.
#![allow(unsafe_code)]

use ofi::consts::*;
use ofi::{AvAttr, CqAttr, CqTaggedEntry, Fabric, Info};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const N: usize = 3;
const SIZES: [usize; 2] = [8, 100_000];
const TIMEOUT: Duration = Duration::from_secs(30);

fn pattern(from: usize, to: usize, size: usize) -> Vec<u8> {
    (0..size)
        .map(|k| (k as u8).wrapping_mul(31) ^ (from as u8 * 16 + to as u8))
        .collect()
}

fn tag(from: usize, to: usize, s: usize) -> u64 {
    ((from as u64) << 16) | ((to as u64) << 8) | s as u64
}

fn wait_files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let end = Instant::now() + TIMEOUT;
    loop {
        let v: Vec<PathBuf> = (0..N).map(|i| dir.join(format!("{i}.{ext}"))).collect();
        if v.iter().all(|p| p.exists()) {
            return v;
        }
        assert!(Instant::now() < end, "peers never wrote their .{ext} files");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn put(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!("{name}.tmp"));
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// Established TCP connections (IPv4) in this namespace as (local ip,
/// remote ip), from /proc/net/tcp.
fn connections() -> Vec<([u8; 4], [u8; 4])> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let ip = |s: &str| -> Option<[u8; 4]> {
        let h = u32::from_str_radix(s.split(':').next()?, 16).ok()?;
        Some(h.to_le_bytes())
    };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(3) == Some(&"01")).then(|| Some((ip(f[1])?, ip(f[2])?)))?
        })
        .collect()
}

/// One process of the run (HYB_CHILD set by the parent test).
#[test]
fn child() {
    let Ok(me) = std::env::var("HYB_CHILD") else {
        return;
    };
    let me: usize = me.parse().unwrap();
    let dir = PathBuf::from(std::env::var("HYB_DIR").unwrap());
    let mut h = Info::hints();
    h.caps = FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM;
    h.ep_attr.ep_type = ep_type::FI_EP_RDM;
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h))
        .unwrap()
        .into_iter()
        .find(|i| i.provider() == "hybrid")
        .expect("the hybrid RDM offer");
    let fab = Fabric::open(&info.fabric_attr).unwrap();
    let dom = fab.domain(&info).unwrap();
    let cq = dom
        .cq(&CqAttr {
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait_obj::FI_WAIT_NONE,
            ..Default::default()
        })
        .unwrap();
    let av = dom.av(&AvAttr::default()).unwrap();
    let ep = dom.endpoint(&info).unwrap();
    ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV).unwrap();
    ep.bind_av(&av).unwrap();
    ep.enable().unwrap();
    let name = ep.getname().unwrap();
    put(&dir, &format!("{me}.addr"), &name);
    let addrs: Vec<Vec<u8>> = wait_files(&dir, "addr")
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let fi: Vec<u64> = addrs.iter().map(|a| av.insert_one(a).unwrap()).collect();
    let node = |a: &[u8]| ofi_prov_hybrid::addr::HybridAddr::decode(a).unwrap().node;
    let peers: Vec<usize> = (0..N).filter(|&j| j != me).collect();
    let mut rx: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    for &j in &peers {
        for (s, &size) in SIZES.iter().enumerate() {
            rx.push((j, s, vec![0u8; size]));
        }
    }
    for (k, (j, s, buf)) in rx.iter_mut().enumerate() {
        // SAFETY: `rx` outlives the receives, which complete below.
        unsafe {
            ep.trecv(
                buf.as_mut_ptr(),
                buf.len(),
                fi[*j],
                tag(*j, me, *s),
                0,
                0x1000 + k,
            )
        }
        .unwrap();
    }
    let tx: Vec<(usize, usize, Vec<u8>)> = peers
        .iter()
        .flat_map(|&j| {
            SIZES
                .iter()
                .enumerate()
                .map(move |(s, &z)| (j, s, pattern(me, j, z)))
        })
        .collect();
    for (k, (j, s, buf)) in tx.iter().enumerate() {
        // SAFETY: `tx` outlives the sends, which complete below.
        unsafe { ep.tsend(buf.as_ptr(), buf.len(), fi[*j], tag(me, *j, *s), 0x2000 + k) }.unwrap();
    }
    let want = rx.len() + tx.len();
    let mut got = 0;
    let end = Instant::now() + TIMEOUT;
    while got < want {
        assert!(
            Instant::now() < end,
            "child {me}: {got} of {want} completions"
        );
        let mut e = [CqTaggedEntry::default(); 8];
        match cq.read(&mut e) {
            Ok(k) => got += k,
            Err(err) if err.code() == ofi::errno::FI_EAVAIL => {
                panic!("child {me}: error completion {:?}", cq.readerr())
            }
            Err(_) => {}
        }
    }
    for (j, s, buf) in &rx {
        assert!(
            *buf == pattern(*j, me, SIZES[*s]),
            "child {me}: data from {j} corrupted"
        );
    }
    // Locality: same node id -> shm, no TCP connection inside this
    // namespace; another node -> a TCP connection across the veth.
    let shm: Vec<usize> = peers
        .iter()
        .copied()
        .filter(|&j| node(&addrs[j]) == node(&name))
        .collect();
    let tcp: Vec<usize> = peers
        .iter()
        .copied()
        .filter(|&j| node(&addrs[j]) != node(&name))
        .collect();
    let conns = connections();
    let inside = conns.iter().filter(|(l, r)| l == r && l[0] == 10).count();
    let across = conns
        .iter()
        .filter(|(l, r)| l != r && l[0] == 10 && r[0] == 10)
        .count();
    assert_eq!(
        inside, 0,
        "child {me}: a TCP connection inside its namespace: {conns:?}"
    );
    if !tcp.is_empty() {
        assert!(
            across > 0,
            "child {me}: no TCP connection across the veth: {conns:?}"
        );
    }
    println!("child {me} ok: shm peers {shm:?}, tcp peers {tcp:?}");
    put(&dir, &format!("{me}.done"), b"");
    wait_files(&dir, "done");
    // Let the others see every file before anyone closes.
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
fn three_processes_on_two_hosts() {
    if std::env::var("HYB_CHILD").is_ok() {
        return;
    }
    // The shared fixture: fails without root and iproute2 (never passes
    // without running), removes the namespaces on drop.
    let h = ofi_testkit::netns::Netns::pair("hyb", 0);
    let (na, nb) = (h.names[0].clone(), h.names[1].clone());
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("ofi-hybrid-netns-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut kids = Vec::new();
    for (i, (ns, host)) in [(&na, "host-a"), (&na, "host-a"), (&nb, "host-b")]
        .iter()
        .enumerate()
    {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns])
            .arg(&exe)
            .args(["--exact", "child", "--nocapture", "--test-threads=1"])
            .env("HYB_CHILD", i.to_string())
            .env("HYB_DIR", &dir)
            .env("FI_HYBRID_NODE", host)
            .env_remove("FI_PROVIDER")
            .env_remove("FI_TCP_IFACE")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        kids.push(c.spawn().expect("spawn child"));
    }
    let end = Instant::now() + Duration::from_secs(60);
    let mut outs = Vec::new();
    for mut k in kids {
        loop {
            if let Ok(Some(_)) = k.try_wait() {
                break;
            }
            if Instant::now() > end {
                let _ = k.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        outs.push(k.wait_with_output().expect("child output"));
    }
    let _ = std::fs::remove_dir_all(&dir);
    for (i, o) in outs.iter().enumerate() {
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "child {i} failed\n{out}\n{err}");
        let want = match i {
            0 => "child 0 ok: shm peers [1], tcp peers [2]",
            1 => "child 1 ok: shm peers [0], tcp peers [2]",
            _ => "child 2 ok: shm peers [], tcp peers [0, 1]",
        };
        assert!(out.contains(want), "child {i}: {out}\n{err}");
    }
}
