//! Shared transmit contexts (`fi_stx_context`, fi_endpoint(3) "SHARED
//! CONTEXTS"): "mostly opaque to an application": endpoints bound to one
//! post their operations to themselves, and completions go to the CQs and
//! counters bound to each endpoint.
//!
//! In ofi a provider's endpoints already share their domain's transmit
//! engine (tcp: one progress engine and poller per domain, a queue per
//! connection), so the context adds no queue of its own: it holds the
//! transmit attributes its endpoints must stay within ("Endpoints
//! associated with a shared transmit context must use a subset of the
//! transmit context's attributes"), checked when one binds, and counts
//! them (it cannot close while any is bound).

use crate::error::{Error, Result};
use crate::info::TxAttr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// A shared transmit context.
#[derive(Debug)]
pub struct StxCore {
    attr: TxAttr,
    /// Endpoints bound to it.
    pub bound: AtomicUsize,
}

impl StxCore {
    /// A context with these attributes.
    pub fn new(attr: TxAttr) -> Arc<Self> {
        Arc::new(StxCore {
            attr,
            bound: AtomicUsize::new(0),
        })
    }

    /// The context's transmit attributes.
    pub fn attr(&self) -> &TxAttr {
        &self.attr
    }

    /// Whether an endpoint's transmit attributes are a subset of the
    /// context's (caps, ordering, completion order, limits); `FI_EINVAL`
    /// naming the first that is not.
    pub fn admits(&self, ep: &TxAttr) -> Result<()> {
        let c = &self.attr;
        let bits = [
            ("caps", ep.caps, c.caps),
            ("msg_order", ep.msg_order, c.msg_order),
            ("comp_order", ep.comp_order, c.comp_order),
        ];
        for (name, want, have) in bits {
            if want & !have != 0 {
                return Err(Error::inval(format!(
                    "bind stx: the endpoint's tx_attr.{name} {want:#x} is not within the context's {have:#x}"
                )));
            }
        }
        let limits = [
            ("inject_size", ep.inject_size, c.inject_size),
            ("size", ep.size, c.size),
            ("iov_limit", ep.iov_limit, c.iov_limit),
            ("rma_iov_limit", ep.rma_iov_limit, c.rma_iov_limit),
        ];
        for (name, want, have) in limits {
            if want > have {
                return Err(Error::inval(format!(
                    "bind stx: the endpoint's tx_attr.{name} {want} exceeds the context's {have}"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::*;

    #[test]
    fn endpoints_must_stay_within_the_contexts_attributes() {
        let attr = TxAttr {
            caps: FI_MSG | FI_SEND,
            size: 64,
            iov_limit: 4,
            inject_size: 64,
            ..Default::default()
        };
        let s = StxCore::new(attr.clone());
        s.admits(&attr).expect("its own attributes");
        s.admits(&TxAttr {
            size: 16,
            ..attr.clone()
        })
        .expect("a smaller queue");
        let e = s
            .admits(&TxAttr {
                caps: FI_MSG | FI_RMA,
                ..attr.clone()
            })
            .expect_err("more caps");
        assert_eq!(e.code(), crate::error::errno::FI_EINVAL);
        assert!(s.admits(&TxAttr { size: 65, ..attr }).is_err());
    }
}
