//! getinfo and hints: malformed hints are FI_EINVAL naming the field,
//! unsatisfiable hints are FI_ENODATA, provider lists include and exclude.
//! Expectations derive from what the unhinted offers say, never from a
//! provider's name.

use ofi::consts::*;
use ofi::errno;
use ofi::Info;
use ofi_conformance::*;

fn getinfo(h: &Info) -> ofi::Result<Vec<Info>> {
    ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(h))
}

#[track_caller]
fn assert_einval(h: &Info, field: &str) {
    match getinfo(h) {
        Ok(v) => panic!(
            "hints with a malformed {field} were accepted ({} offers)",
            v.len()
        ),
        Err(e) => {
            assert_eq!(e.code(), errno::FI_EINVAL, "malformed {field}: {e}");
            assert!(
                e.message().contains(field),
                "the FI_EINVAL message must name {field}: {e}"
            );
        }
    }
}

#[track_caller]
fn assert_enodata(h: &Info, what: &str) {
    match getinfo(h) {
        Ok(v) => panic!(
            "{what}: expected FI_ENODATA, got {:?}",
            v.iter().map(describe).collect::<Vec<_>>()
        ),
        Err(e) => assert_eq!(e.code(), errno::FI_ENODATA, "{what}: {e}"),
    }
}

fn providers() -> Vec<String> {
    let mut v: Vec<String> = offers().iter().map(|o| o.provider().to_string()).collect();
    v.dedup();
    v.sort();
    v.dedup();
    v
}

#[test]
fn unhinted_offers_are_well_formed() {
    let all = offers();
    assert!(!all.is_empty());
    for o in &all {
        assert!(
            o.fabric_attr.prov_name.is_some(),
            "offer without prov_name: {o:?}"
        );
        assert!(
            o.ep_attr.ep_type != ep_type::FI_EP_UNSPEC,
            "{}: offer without an endpoint type",
            describe(o)
        );
        assert!(
            o.caps & (FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC) != 0,
            "{}: offer with no operation class",
            describe(o)
        );
        assert!(
            o.tx_attr.caps & !o.caps & FI_PRIMARY_CAPS == 0,
            "{}: tx_attr.caps beyond caps",
            describe(o)
        );
        assert!(
            o.rx_attr.caps & !o.caps & FI_PRIMARY_CAPS == 0,
            "{}: rx_attr.caps beyond caps",
            describe(o)
        );
        // Each offer satisfies hints made from its own identity.
        let mut h = Info::hints();
        h.caps = o.caps & (FI_MSG | FI_TAGGED);
        h.ep_attr.ep_type = o.ep_attr.ep_type;
        h.fabric_attr.prov_name = o.fabric_attr.prov_name.clone();
        let got = getinfo(&h)
            .unwrap_or_else(|e| panic!("{}: hints from its own offer: {e}", describe(o)));
        assert!(got
            .iter()
            .all(|g| g.provider() == o.provider() && g.ep_attr.ep_type == o.ep_attr.ep_type));
        assert!(
            got.iter().all(|g| g.caps & h.caps == h.caps),
            "returned offers lack the asked caps"
        );
    }
}

#[test]
fn malformed_hints_are_einval_naming_the_field() {
    let mut h = Info::hints();
    h.ep_attr.ep_type = 99;
    assert_einval(&h, "ep_attr.type");

    let mut h = Info::hints();
    h.caps = FI_MSG | (1 << 14);
    assert_einval(&h, "caps");

    let mut h = Info::hints();
    h.caps = FI_MSG | 1;
    assert_einval(&h, "caps");

    // An address format no provider knows is unsatisfiable, not malformed
    // (newer libfabrics and providers define more): FI_ENODATA.
    let mut h = Info::hints();
    h.addr_format = 999;
    let e = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&h)).unwrap_err();
    assert_eq!(e.code(), errno::FI_ENODATA, "{e}");

    let mut h = Info::hints();
    h.domain_attr.threading = 42;
    assert_einval(&h, "threading");

    let mut h = Info::hints();
    h.domain_attr.av_type = 17;
    assert_einval(&h, "av_type");

    let mut h = Info::hints();
    h.mode = 1 << 3;
    assert_einval(&h, "mode");

    let mut h = Info::hints();
    h.tx_attr.op_flags = 1 << 3;
    assert_einval(&h, "tx_attr.op_flags");

    let mut h = Info::hints();
    h.fabric_attr.prov_name = Some("shm,,tcp".into());
    match getinfo(&h) {
        Err(e) => assert_eq!(
            e.code(),
            errno::FI_EINVAL,
            "provider list with an empty name: {e}"
        ),
        Ok(_) => panic!("provider list with an empty name was accepted"),
    }
}

#[test]
fn provider_specific_cap_bits_are_not_malformed() {
    // Bits 60..63 belong to providers: asking for them is not malformed
    // (an offer that lacks them simply does not match).
    for bit in 60..64 {
        let mut h = Info::hints();
        h.caps = FI_MSG | (1u64 << bit);
        if let Err(e) = getinfo(&h) {
            assert_ne!(
                e.code(),
                errno::FI_EINVAL,
                "caps bit {bit} is provider-specific, not malformed: {e}"
            );
        }
    }
}

#[test]
fn unsupported_api_version_is_refused() {
    let r = ofi::getinfo(fi_version(2, 0), None, None, 0, None);
    assert_eq!(
        r.err().map(|e| e.code()),
        Some(errno::FI_ENOSYS),
        "API version 2.0"
    );
    let r = ofi::getinfo(fi_version(1, 99), None, None, 0, None);
    assert!(
        r.is_err(),
        "API version 1.99 (newer than the library) was accepted"
    );
}

#[test]
fn unsatisfiable_hints_are_enodata() {
    let all = offers();
    let mut h = Info::hints();
    h.fabric_attr.prov_name = Some("nonexistent".into());
    assert_enodata(&h, "prov_name nonexistent");

    for ep in [ep_type::FI_EP_MSG, ep_type::FI_EP_DGRAM, ep_type::FI_EP_RDM] {
        let mut h = Info::hints();
        h.ep_attr.ep_type = ep;
        let name = enum_name(EP_TYPE_NAMES, ep).unwrap_or("?");
        if all.iter().any(|o| o.ep_attr.ep_type == ep) {
            let got = getinfo(&h)
                .unwrap_or_else(|e| panic!("{name} is offered, yet getinfo failed: {e}"));
            assert!(
                got.iter().all(|o| o.ep_attr.ep_type == ep),
                "asked for {name}, got {:?}",
                got.iter().map(describe).collect::<Vec<_>>()
            );
        } else {
            assert_enodata(&h, &format!("ep_type {name}, which no offer has"));
        }
    }

    // FI_COLLECTIVE is offered only to hints that ask for it (as
    // libfabric's util collectives are): every RDM offer with tagged
    // messages then has it.
    let mut h = Info::hints();
    h.caps = FI_COLLECTIVE;
    let rdm_tagged = all
        .iter()
        .any(|o| o.ep_attr.ep_type == ep_type::FI_EP_RDM && o.caps & FI_TAGGED != 0);
    if rdm_tagged {
        let got = getinfo(&h).unwrap_or_else(|e| panic!("FI_COLLECTIVE asked for: {e}"));
        assert!(
            got.iter()
                .all(|o| o.caps & FI_COLLECTIVE != 0 && o.ep_attr.ep_type == ep_type::FI_EP_RDM),
            "asked for FI_COLLECTIVE, got {:?}",
            got.iter().map(describe).collect::<Vec<_>>()
        );
    } else {
        assert_enodata(
            &h,
            "caps FI_COLLECTIVE, with no RDM offer of tagged messages",
        );
    }
    assert!(
        all.iter().all(|o| o.caps & FI_COLLECTIVE == 0),
        "FI_COLLECTIVE offered unasked"
    );

    for cap in [FI_RMA, FI_ATOMIC, FI_TAGGED, FI_MULTICAST] {
        let mut h = Info::hints();
        h.caps = cap;
        let name = bits_to_string(CAP_NAMES, cap);
        if all.iter().any(|o| o.caps & cap != 0) {
            let got = getinfo(&h)
                .unwrap_or_else(|e| panic!("{name} is offered, yet getinfo failed: {e}"));
            assert!(
                got.iter().all(|o| o.caps & cap != 0),
                "asked for {name}, got an offer without it"
            );
        } else {
            assert_enodata(&h, &format!("caps {name}, which no offer has"));
        }
    }

    // Asking for more than any offer gives.
    let max_inject = all.iter().map(|o| o.tx_attr.inject_size).max().unwrap_or(0);
    let mut h = Info::hints();
    h.tx_attr.inject_size = max_inject + 1;
    assert_enodata(&h, "inject_size above every offer's");
    let max_iov = all.iter().map(|o| o.rx_attr.iov_limit).max().unwrap_or(0);
    let mut h = Info::hints();
    h.rx_attr.iov_limit = max_iov + 1;
    assert_enodata(&h, "rx iov_limit above every offer's");
}

#[test]
fn provider_lists_include_and_exclude() {
    let provs = providers();
    for p in &provs {
        let mut h = Info::hints();
        h.fabric_attr.prov_name = Some(p.clone());
        let got = getinfo(&h).unwrap_or_else(|e| panic!("prov_name {p}: {e}"));
        assert!(
            !got.is_empty() && got.iter().all(|o| o.provider() == p),
            "prov_name {p} returned other providers"
        );

        h.fabric_attr.prov_name = Some(format!("nonexistent,{p}"));
        let got = getinfo(&h).unwrap_or_else(|e| panic!("prov_name nonexistent,{p}: {e}"));
        assert!(got.iter().all(|o| o.provider() == p));

        h.fabric_attr.prov_name = Some(format!("^{p}"));
        match getinfo(&h) {
            Ok(got) => {
                assert!(
                    got.iter().all(|o| o.provider() != p),
                    "^{p} still returned {p}"
                );
                assert!(
                    provs.len() > 1,
                    "^{p} returned offers although {p} is the only provider"
                );
            }
            Err(e) => {
                assert_eq!(e.code(), errno::FI_ENODATA, "^{p}: {e}");
                assert_eq!(
                    provs.len(),
                    1,
                    "^{p} excluded every provider, but there are others: {provs:?}"
                );
            }
        }
    }
    let mut h = Info::hints();
    h.fabric_attr.prov_name = Some("^nonexistent".into());
    let got = getinfo(&h).unwrap_or_else(|e| panic!("^nonexistent: {e}"));
    let every = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, None).expect("unhinted getinfo");
    assert_eq!(
        got.len(),
        every.len(),
        "excluding an unknown provider must keep every offer"
    );
}
