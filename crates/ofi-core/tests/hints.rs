//! Hint validation and matching: unit cases for each field and property
//! tests of the matching rules.

use ofi_core::consts::*;
use ofi_core::error::errno;
use ofi_core::hints::{match_offer, validate_hints, ProviderFilter};
use ofi_core::info::*;
use proptest::prelude::*;

/// A change to hints.
type Edit = Box<dyn Fn(&mut Info)>;

fn offer() -> Info {
    Info {
        caps: FI_MSG
            | FI_TAGGED
            | FI_SEND
            | FI_RECV
            | FI_MULTI_RECV
            | FI_SOURCE
            | FI_DIRECTED_RECV
            | FI_LOCAL_COMM,
        addr_format: addr_format::FI_ADDR_STR,
        tx_attr: TxAttr {
            caps: FI_MSG | FI_TAGGED | FI_SEND,
            inject_size: 4096,
            size: 1024,
            iov_limit: 4,
            msg_order: order::FI_ORDER_SAS,
            ..Default::default()
        },
        rx_attr: RxAttr {
            caps: FI_MSG | FI_TAGGED | FI_RECV,
            size: 1024,
            iov_limit: 4,
            msg_order: order::FI_ORDER_SAS,
            ..Default::default()
        },
        ep_attr: EpAttr {
            ep_type: ep_type::FI_EP_RDM,
            protocol: protocol::FI_PROTO_SHM,
            max_msg_size: 1 << 40,
            mem_tag_format: 0xaaaa_aaaa_aaaa_aaaa,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            ..Default::default()
        },
        domain_attr: DomainAttr {
            name: Some("shm".into()),
            threading: threading::FI_THREAD_SAFE,
            control_progress: progress::FI_PROGRESS_AUTO,
            data_progress: progress::FI_PROGRESS_MANUAL,
            resource_mgmt: resource_mgmt::FI_RM_ENABLED,
            // Preferred, not required: hints of any mr_mode may have it.
            mr_mode: mr_mode::FI_MR_VIRT_ADDR,
            cq_data_size: 8,
            cq_cnt: 1024,
            ep_cnt: 256,
            mr_iov_limit: 4,
            ..Default::default()
        },
        fabric_attr: FabricAttr {
            name: Some("shm".into()),
            prov_name: Some("shm".into()),
            prov_version: fi_version(1, 0),
            api_version: FI_VERSION_CURRENT,
        },
        ..Default::default()
    }
}

#[test]
fn empty_hints_match_everything() {
    assert_eq!(
        match_offer(&offer(), &Info::hints()).unwrap().caps,
        offer().caps
    );
}

#[test]
fn each_unsatisfiable_field_is_named() {
    let cases: Vec<(&str, Edit)> = vec![
        ("caps", Box::new(|h| h.caps = FI_RMA)),
        (
            "ep_attr.type",
            Box::new(|h| h.ep_attr.ep_type = ep_type::FI_EP_MSG),
        ),
        (
            "addr_format",
            Box::new(|h| h.addr_format = addr_format::FI_SOCKADDR_IN),
        ),
        (
            "fabric_attr.prov_name",
            Box::new(|h| h.fabric_attr.prov_name = Some("tcp".into())),
        ),
        (
            "fabric_attr.name",
            Box::new(|h| h.fabric_attr.name = Some("other".into())),
        ),
        (
            "domain_attr.name",
            Box::new(|h| h.domain_attr.name = Some("other".into())),
        ),
        (
            "tx_attr.inject_size",
            Box::new(|h| h.tx_attr.inject_size = 1 << 20),
        ),
        ("tx_attr.size", Box::new(|h| h.tx_attr.size = 1 << 20)),
        ("tx_attr.iov_limit", Box::new(|h| h.tx_attr.iov_limit = 64)),
        ("rx_attr.size", Box::new(|h| h.rx_attr.size = 1 << 20)),
        ("rx_attr.iov_limit", Box::new(|h| h.rx_attr.iov_limit = 64)),
        (
            "tx_attr.msg_order",
            Box::new(|h| h.tx_attr.msg_order = order::FI_ORDER_RAW),
        ),
        (
            "ep_attr.max_msg_size",
            Box::new(|h| h.ep_attr.max_msg_size = usize::MAX),
        ),
        (
            "ep_attr.protocol",
            Box::new(|h| h.ep_attr.protocol = protocol::FI_PROTO_XNET),
        ),
        (
            "domain_attr.data_progress",
            Box::new(|h| h.domain_attr.data_progress = progress::FI_PROGRESS_AUTO),
        ),
        (
            "domain_attr.mr_mode",
            Box::new(|h| h.domain_attr.mr_mode = mr_mode::FI_MR_VIRT_ADDR),
        ),
        (
            "domain_attr.cq_data_size",
            Box::new(|h| h.domain_attr.cq_data_size = 16),
        ),
        (
            "domain_attr.ep_cnt",
            Box::new(|h| h.domain_attr.ep_cnt = 1 << 20),
        ),
        ("mode", Box::new(|h| h.mode = 0)),
    ];
    for (field, set) in cases {
        let mut h = Info::hints();
        set(&mut h);
        let mut o = offer();
        if field == "mode" {
            o.mode = FI_CONTEXT;
        }
        if field == "domain_attr.mr_mode" {
            o.domain_attr.mr_mode |= mr_mode::FI_MR_LOCAL;
        }
        assert_eq!(match_offer(&o, &h).unwrap_err(), field, "hint on {field}");
    }
}

#[test]
fn satisfiable_hints_narrow_the_offer() {
    let mut h = Info::hints();
    h.caps = FI_TAGGED;
    h.tx_attr.size = 16;
    h.rx_attr.size = 32;
    h.domain_attr.threading = threading::FI_THREAD_DOMAIN;
    h.domain_attr.av_type = av_type::FI_AV_TABLE;
    h.domain_attr.mr_mode = mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_LOCAL;
    h.domain_attr.data_progress = progress::FI_PROGRESS_MANUAL;
    let m = match_offer(&offer(), &h).unwrap();
    assert_eq!(
        m.caps & (FI_TAGGED | FI_MSG),
        FI_TAGGED,
        "only the asked operation class"
    );
    assert_ne!(m.caps & FI_SEND, 0, "FI_TAGGED implies send and receive");
    assert_eq!(m.tx_attr.size, 16);
    assert_eq!(m.rx_attr.size, 32);
    assert_eq!(m.domain_attr.threading, threading::FI_THREAD_DOMAIN);
    assert_eq!(m.domain_attr.av_type, av_type::FI_AV_TABLE);
}

#[test]
fn malformed_hints_are_einval_naming_the_field() {
    let cases: Vec<(&str, Edit)> = vec![
        ("caps", Box::new(|h| h.caps = 1)),
        ("mode", Box::new(|h| h.mode = 1 << 3)),
        ("ep_attr.type", Box::new(|h| h.ep_attr.ep_type = 99)),
        (
            "domain_attr.threading",
            Box::new(|h| h.domain_attr.threading = 9),
        ),
        (
            "domain_attr.control_progress",
            Box::new(|h| h.domain_attr.control_progress = 3),
        ),
        (
            "domain_attr.data_progress",
            Box::new(|h| h.domain_attr.data_progress = 3),
        ),
        (
            "domain_attr.resource_mgmt",
            Box::new(|h| h.domain_attr.resource_mgmt = 3),
        ),
        (
            "domain_attr.av_type",
            Box::new(|h| h.domain_attr.av_type = 3),
        ),
        (
            "domain_attr.mr_mode",
            Box::new(|h| h.domain_attr.mr_mode = 1 << 20),
        ),
        (
            "tx_attr.op_flags",
            Box::new(|h| h.tx_attr.op_flags = 1 << 14),
        ),
        (
            "tx_attr.caps",
            Box::new(|h| {
                h.caps = FI_MSG;
                h.tx_attr.caps = FI_TAGGED;
            }),
        ),
        (
            "ep_attr.auth_key",
            Box::new(|h| h.ep_attr.auth_key = Some(Vec::new())),
        ),
        (
            "provider list",
            Box::new(|h| h.fabric_attr.prov_name = Some("shm,,tcp".into())),
        ),
    ];
    for (field, set) in cases {
        let mut h = Info::hints();
        set(&mut h);
        let e = validate_hints(&h).unwrap_err();
        assert_eq!(e.code(), errno::FI_EINVAL, "{field}");
        assert!(
            e.message().contains(field),
            "message '{}' should name {field}",
            e.message()
        );
    }
}

#[test]
fn provider_lists() {
    let inc = ProviderFilter::parse("shm, TCP").unwrap();
    assert!(inc.allows("shm") && inc.allows("tcp") && !inc.allows("udp"));
    assert!(
        inc.allows("tcp;ofi_rxm"),
        "a layered name matches by component"
    );
    let exc = ProviderFilter::parse("^tcp,udp").unwrap();
    assert!(exc.allows("shm") && !exc.allows("tcp") && !exc.allows("udp"));
    assert!(ProviderFilter::parse("").is_err());
    // libfabric's layered names for RDM over a core provider: ofi's core
    // providers make RDM themselves, so the name asks for their RDM offers.
    let layered = ProviderFilter::parse("tcp;ofi_rxm, udp;OFI_RXD").unwrap();
    assert!(layered.allows("tcp") && layered.allows("udp") && !layered.allows("shm"));
    assert!(
        layered.allows_offer("tcp", ep_type::FI_EP_RDM)
            && !layered.allows_offer("tcp", ep_type::FI_EP_MSG)
    );
    assert!(
        layered.allows_offer("udp", ep_type::FI_EP_RDM)
            && !layered.allows_offer("udp", ep_type::FI_EP_DGRAM)
    );
    assert!(!layered.allows_offer("shm", ep_type::FI_EP_RDM));
    // Only RDM utilities: another layered name names nothing.
    assert!(!ProviderFilter::parse("tcp;ofi_mrail")
        .unwrap()
        .allows("tcp"));
    // Excluding a layered name excludes the RDM offers, not the provider.
    let no_rxm = ProviderFilter::parse("^tcp;ofi_rxm").unwrap();
    assert!(no_rxm.allows("tcp") && no_rxm.allows_offer("tcp", ep_type::FI_EP_MSG));
    assert!(
        !no_rxm.allows_offer("tcp", ep_type::FI_EP_RDM)
            && no_rxm.allows_offer("shm", ep_type::FI_EP_RDM)
    );
    assert!(ProviderFilter::parse("^").is_err());
}

fn arb_caps() -> impl Strategy<Value = u64> {
    prop::sample::subsequence(
        vec![
            FI_MSG,
            FI_TAGGED,
            FI_RMA,
            FI_ATOMIC,
            FI_SEND,
            FI_RECV,
            FI_MULTI_RECV,
            FI_SOURCE,
            FI_DIRECTED_RECV,
            FI_LOCAL_COMM,
            FI_REMOTE_COMM,
        ],
        0..5,
    )
    .prop_map(|v| v.into_iter().fold(0, |a, b| a | b))
}

proptest! {
    /// A match never returns an offer that lacks an asked primary capability,
    /// and an offer that has every asked capability and no other constraint matches.
    #[test]
    fn caps_matching_is_subset(caps in arb_caps()) {
        let mut h = Info::hints();
        h.caps = caps;
        let o = offer();
        let primary = caps & !FI_SECONDARY_CAPS;
        match match_offer(&o, &h) {
            Ok(m) => {
                prop_assert_eq!(primary & !o.caps, 0);
                prop_assert_eq!(m.caps & primary, primary);
                prop_assert_eq!(m.caps & !o.caps, 0, "never more than offered");
            }
            Err(field) => {
                prop_assert_eq!(field, "caps");
                prop_assert_ne!((caps & !(FI_RMA_EVENT | FI_SOURCE_ERR)) & !o.caps, 0);
            }
        }
    }

    /// Size limits: a hint at or below the offer matches, above fails.
    #[test]
    fn size_limits(tx in 0usize..4096, inject in 0usize..8192, iov in 0usize..8) {
        let mut h = Info::hints();
        h.tx_attr.size = tx;
        h.tx_attr.inject_size = inject;
        h.tx_attr.iov_limit = iov;
        let ok = inject <= 4096 && tx <= 1024 && iov <= 4;
        prop_assert_eq!(match_offer(&offer(), &h).is_ok(), ok);
    }

    /// Hints built from valid enum values validate, and match the offer (an
    /// RDM endpoint, FI_THREAD_SAFE, manual data progress, any AV type)
    /// exactly when the offer satisfies them: the endpoint type must be
    /// unspecified or RDM, auto data progress is refused, any threading
    /// level is met by FI_THREAD_SAFE; the match echoes what was asked.
    #[test]
    fn valid_enums_validate_and_match_by_the_rules(
        ep in 0u32..=5, th in 0u32..=5, pr in 0u32..=2, av in 0u32..=2,
    ) {
        let mut h = Info::hints();
        h.ep_attr.ep_type = ep;
        h.domain_attr.threading = th;
        h.domain_attr.data_progress = pr;
        h.domain_attr.av_type = av;
        prop_assert!(validate_hints(&h).is_ok());
        let o = offer();
        let r = match_offer(&o, &h);
        if ep != ep_type::FI_EP_UNSPEC && ep != ep_type::FI_EP_RDM {
            prop_assert_eq!(r.err(), Some("ep_attr.type"));
        } else if pr == progress::FI_PROGRESS_AUTO {
            prop_assert_eq!(r.err(), Some("domain_attr.data_progress"));
        } else {
            let m = r.expect("a satisfiable hint matches");
            prop_assert_eq!(m.ep_attr.ep_type, ep_type::FI_EP_RDM);
            let th_want = if th == 0 { o.domain_attr.threading } else { th };
            prop_assert_eq!(m.domain_attr.threading, th_want);
            prop_assert_eq!(m.domain_attr.data_progress, progress::FI_PROGRESS_MANUAL);
            prop_assert_eq!(m.domain_attr.av_type, av);
        }
    }
}

#[test]
fn optional_mr_mode_bits_narrow_to_the_hints() {
    let mut o = offer();
    o.domain_attr.mr_mode =
        mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY | mr_mode::FI_MR_ALLOCATED;
    let mut h = Info::hints();
    h.domain_attr.mr_mode = mr_mode::FI_MR_PROV_KEY | mr_mode::FI_MR_LOCAL;
    let m = match_offer(&o, &h).expect("optional bits never refuse");
    assert_eq!(m.domain_attr.mr_mode, mr_mode::FI_MR_PROV_KEY);
    // The old modes are kept as given; 0 allows none of the optional bits.
    for m in [mr_mode::FI_MR_BASIC, mr_mode::FI_MR_SCALABLE, 0] {
        h.domain_attr.mr_mode = m;
        assert_eq!(match_offer(&o, &h).unwrap().domain_attr.mr_mode, m);
    }
    // Both old modes, or one with new bits, match nothing.
    for m in [
        mr_mode::FI_MR_BASIC | mr_mode::FI_MR_SCALABLE,
        mr_mode::FI_MR_BASIC | mr_mode::FI_MR_LOCAL,
    ] {
        h.domain_attr.mr_mode = m;
        assert_eq!(match_offer(&o, &h).unwrap_err(), "domain_attr.mr_mode");
    }
    // An offer that needs FI_MR_LOCAL: only hints that allow it.
    o.domain_attr.mr_mode |= mr_mode::FI_MR_LOCAL;
    h.domain_attr.mr_mode = 0;
    assert_eq!(match_offer(&o, &h).unwrap_err(), "domain_attr.mr_mode");
    h.domain_attr.mr_mode = mr_mode::FI_MR_BASIC;
    assert_eq!(match_offer(&o, &h).unwrap_err(), "domain_attr.mr_mode");
}

#[test]
fn an_old_api_reads_mr_mode_the_old_way() {
    use ofi_core::hints::offer_mr_mode;
    let v = |minor| fi_version(1, minor);
    let pref = mr_mode::FI_MR_VIRT_ADDR | mr_mode::FI_MR_PROV_KEY | mr_mode::FI_MR_ALLOCATED;
    assert_eq!(offer_mr_mode(v(0), Some(0), pref), Ok(mr_mode::FI_MR_BASIC));
    assert_eq!(offer_mr_mode(v(4), None, pref), Ok(mr_mode::FI_MR_BASIC));
    assert_eq!(
        offer_mr_mode(v(0), Some(mr_mode::FI_MR_SCALABLE), pref),
        Ok(mr_mode::FI_MR_SCALABLE)
    );
    assert_eq!(offer_mr_mode(v(5), Some(0), pref), Ok(0));
    assert_eq!(offer_mr_mode(v(17), None, pref), Ok(pref));
    assert_eq!(
        offer_mr_mode(v(17), Some(mr_mode::FI_MR_PROV_KEY), pref),
        Ok(mr_mode::FI_MR_PROV_KEY)
    );
    // What an old mode implies is what a domain opened with it does.
    let mut d = DomainAttr {
        mr_mode: mr_mode::FI_MR_BASIC,
        ..Default::default()
    };
    assert_eq!(d.mr_mode_in_force(), pref);
    d.mr_mode = mr_mode::FI_MR_SCALABLE;
    assert_eq!(d.mr_mode_in_force(), 0);
}

#[test]
fn generic_sockaddr_hints_take_either_family() {
    use addr_format::*;
    use ofi_core::hints::addr_format_fits;
    for have in [FI_SOCKADDR, FI_SOCKADDR_IN, FI_SOCKADDR_IN6] {
        assert!(addr_format_fits(FI_SOCKADDR, have));
        assert!(addr_format_fits(FI_FORMAT_UNSPEC, have));
    }
    assert!(!addr_format_fits(FI_SOCKADDR, FI_ADDR_STR));
    assert!(!addr_format_fits(FI_SOCKADDR_IN, FI_SOCKADDR_IN6));
    assert!(!addr_format_fits(FI_SOCKADDR_IN6, FI_SOCKADDR));
    assert!(!addr_format_fits(77, FI_SOCKADDR_IN));
}

#[test]
fn nodes_must_resolve_before_providers_are_asked() {
    use ofi_core::hints::check_node;
    let e = check_node(Some("g00n13s"), 0, None).unwrap_err();
    assert_eq!(e.code(), ofi_core::error::errno::FI_ENODATA, "{e}");
    assert!(check_node(Some("g00n13s"), FI_SOURCE, None).is_err());
    check_node(Some("127.0.0.1"), 0, None).unwrap();
    check_node(Some("::1"), FI_NUMERICHOST, None).unwrap();
    check_node(Some("localhost"), 0, None).unwrap();
    assert!(check_node(Some("localhost"), FI_NUMERICHOST, None).is_err());
    check_node(None, 0, None).unwrap();
    // Names in a provider's own format are the provider's to judge.
    check_node(Some("fi_shm://g00n13s"), 0, None).unwrap();
    let mut h = Info::hints();
    h.addr_format = addr_format::FI_ADDR_STR;
    check_node(Some("g00n13s"), 0, Some(&h)).unwrap();
}
