//! The storage mid-layer's decoders and cores (`ofi-storage` without its
//! fabric drivers).

use ofi_storage::core::sim::Sim;
use ofi_storage::wire::Repr;

/// `wire::Repr::from_bytes` on arbitrary bytes: an accepted capsule
/// re-emits to exactly its bytes.
pub fn storage_capsule(data: &[u8]) {
    if let Ok(r) = Repr::from_bytes(data) {
        assert_eq!(
            &r.to_bytes()[..],
            data,
            "{r:?} does not re-emit to its bytes"
        );
    }
}

/// The initiator and target cores in the simulator on a schedule the input
/// writes (submissions, raw capsules, deliveries in any order, kills, new
/// initiators): the simulator panics on any I/O outside the volume or a
/// staging slot, and every credit and slot must come back at the end.
pub fn storage_cores(data: &[u8]) {
    Sim::fuzz(data);
}

/// An NBD client's whole side of a connection (handshake, then requests)
/// through the gateway's handshake and request checks: every forwarded
/// request lies inside the export.
pub fn storage_nbd(data: &[u8]) {
    ofi_storage::nbd::fuzz(data);
}
