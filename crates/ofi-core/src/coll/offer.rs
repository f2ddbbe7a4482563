//! Which offers carry FI_COLLECTIVE: the core runs collectives over an
//! endpoint's tagged messages, so every RDM offer that sends and receives
//! tagged messages offers them, whatever its provider, to an application
//! that asks for them (FI_COLLECTIVE in the hints' caps, as libfabric's
//! util collectives are offered). An application that does not ask gets
//! endpoints without the collective side: all 64 tag bits, and no relay.

use crate::consts::*;
use crate::info::Info;

/// Whether the core runs collectives on endpoints of this offer.
pub fn supports(offer: &Info) -> bool {
    offer.ep_attr.ep_type == ep_type::FI_EP_RDM
        && offer.caps & FI_TAGGED != 0
        && offer.caps & (FI_SEND | FI_RECV) != FI_SEND
        && offer.caps & (FI_SEND | FI_RECV) != FI_RECV
}

/// Adds FI_COLLECTIVE to a provider's offer the core runs collectives on
/// when the hints ask for it (the registry calls it on every offer before
/// matching the hints).
pub fn add(offer: &mut Info, hints: Option<&Info>) {
    let asked = hints.is_some_and(|h| (h.caps | h.tx_attr.caps) & FI_COLLECTIVE != 0);
    if asked && supports(offer) {
        offer.caps |= FI_COLLECTIVE;
        offer.tx_attr.caps |= FI_COLLECTIVE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdm_offers_with_tagged_messages_get_collectives_when_asked() {
        let mut h = Info::hints();
        h.caps = FI_COLLECTIVE;
        let h = Some(&h);
        let mut o = Info::offer("p", 1).with_caps(FI_TAGGED | FI_SEND | FI_RECV);
        o.ep_attr.ep_type = ep_type::FI_EP_RDM;
        let mut unasked = o.clone();
        add(&mut o, h);
        assert!(o.caps & FI_COLLECTIVE != 0 && o.tx_attr.caps & FI_COLLECTIVE != 0);
        add(&mut unasked, None);
        assert_eq!(unasked.caps & FI_COLLECTIVE, 0);
        add(&mut unasked, Some(&Info::hints()));
        assert_eq!(unasked.caps & FI_COLLECTIVE, 0);
        let mut m = Info::offer("p", 1).with_caps(FI_MSG | FI_SEND | FI_RECV);
        m.ep_attr.ep_type = ep_type::FI_EP_RDM;
        add(&mut m, h);
        assert_eq!(m.caps & FI_COLLECTIVE, 0);
        let mut d = Info::offer("p", 1).with_caps(FI_TAGGED | FI_SEND | FI_RECV);
        d.ep_attr.ep_type = ep_type::FI_EP_DGRAM;
        add(&mut d, h);
        assert_eq!(d.caps & FI_COLLECTIVE, 0);
    }
}
