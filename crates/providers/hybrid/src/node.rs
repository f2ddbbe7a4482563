//! What "on this node" means: two endpoints are on one node when they
//! share the kernel (boot id), the IPC namespace, the PID namespace (shm's
//! cross-process copies name the peer by pid) and the /dev/shm file system
//! (device and inode). The node id is a 64-bit FNV-1a hash of those; the
//! override FI_HYBRID_NODE replaces it with the hash of its text (so
//! processes in namespaces that share all of the above can be made distinct
//! nodes, and the shm path can be turned off by giving every process its
//! own value; [`PER_ENDPOINT`] makes each endpoint its own node).

use std::os::unix::fs::MetadataExt;

/// The tunable's name (FI_HYBRID_NODE).
pub const VAR: &str = "node";
/// The override value that makes every endpoint a node of its own: all
/// traffic then takes the network path (tcp, or udp under FI_HYBRID_NET),
/// even inside one process.
pub const PER_ENDPOINT: &str = "@endpoint";

/// A node id for one endpoint under [`PER_ENDPOINT`]: unique per process
/// and endpoint.
pub fn endpoint_node() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    fnv1a(&[
        b"endpoint",
        &std::process::id().to_le_bytes(),
        &n.to_le_bytes(),
    ])
}

/// 64-bit FNV-1a: stable across builds and processes.
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Separator, so ("ab","c") and ("a","bc") differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The node id from the override text, when set and not empty.
pub fn from_override(text: &str) -> Option<u64> {
    let t = text.trim();
    (!t.is_empty()).then(|| fnv1a(&[b"override", t.as_bytes()]))
}

/// This process's node id (the override when set).
pub fn node_id(override_text: &str) -> u64 {
    if let Some(id) = from_override(override_text) {
        return id;
    }
    let boot = std::fs::read("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ns = |n: &str| {
        std::fs::read_link(format!("/proc/self/ns/{n}"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let (ipc, pid) = (ns("ipc"), ns("pid"));
    let shm = std::fs::metadata("/dev/shm")
        .map(|m| format!("{}:{}", m.dev(), m.ino()))
        .unwrap_or_default();
    fnv1a(&[
        b"host",
        &boot,
        ipc.as_bytes(),
        pid.as_bytes(),
        shm.as_bytes(),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_decides_and_is_stable() {
        assert_eq!(from_override(""), None);
        assert_eq!(from_override("  "), None);
        assert_eq!(from_override("hostA"), from_override(" hostA "));
        assert_ne!(from_override("hostA"), from_override("hostB"));
        assert_eq!(node_id("hostA"), from_override("hostA").unwrap());
        // Without the override, two calls in one process agree and differ
        // from any override.
        assert_eq!(node_id(""), node_id(""));
        assert_ne!(node_id(""), node_id("hostA"));
        // Golden value: FNV-1a must not drift between builds.
        assert_eq!(fnv1a(&[b"a"]), 0x089b_c907_b544_c769_u64);
    }
}
