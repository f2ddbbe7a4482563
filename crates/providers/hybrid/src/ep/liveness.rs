//! Peer death: an inner endpoint declares a peer dead through its EQ; the
//! application's directed receives from it fail, later ones fail at once
//! until the peer speaks again, and the application's EQ hears of it by
//! its outer fi_addr. Each path's deaths touch only that path's peers.

use super::{visible_src, HybridEp, State, PATH_NAMES};
use ofi_core::consts::*;
use ofi_core::util::peer::PeerDown;

impl HybridEp {
    /// The inner endpoint of `path` declared peers dead: its own pending
    /// operations fail through its CQ; here the application's directed
    /// receives from those peers fail and its EQ hears of each, named by
    /// its outer fi_addr. Peers on the other path are not touched.
    pub(super) fn peers_down(&self, st: &mut State, path: usize) {
        for _ in 0..64 {
            let Ok(e) = self.paths[path].eq.readerr() else {
                return;
            };
            let Some(down) = PeerDown::from_eq_error(&e) else {
                continue;
            };
            let outer = visible_src(self.outer_src(st, path, down.fi_addr));
            let err = down.cause.errno();
            tracing::info!(
                fi_addr = outer,
                path = PATH_NAMES[path],
                cause = down.cause.describe(),
                "hybrid: peer declared dead"
            );
            if outer != FI_ADDR_NOTAVAIL {
                for tagged in [false, true] {
                    while let Some(r) = st.mq.take_posted_from(tagged, outer) {
                        let fl = FI_RECV | if tagged { FI_TAGGED } else { FI_MSG };
                        Self::rx_error(st, r.context, fl, err, r.tag, 0, 0);
                    }
                }
                let raw = st.b.av.as_ref().and_then(|av| av.lookup(outer).ok());
                if let Some(raw) = raw {
                    if !st.dead.iter().any(|d| d.0 == outer) {
                        st.dead.push((outer, raw.to_vec(), err));
                    }
                }
            }
            if let Some(eq) = &st.b.eq {
                // Named as the application knows the peer: its fi_addr and
                // hybrid address.
                let raw = st.b.av.as_ref().and_then(|av| av.lookup(outer).ok());
                eq.push_err(ofi_core::util::eq::EqError {
                    fid: st.b.fid,
                    data: outer,
                    err_data: raw.map_or(e.err_data.clone(), |a| a.to_vec()),
                    ..e
                });
            }
        }
    }
}
