//! Fixtures: a domain with its AV, enabled endpoints, MSG connections made
//! over a loopback listener, and the sets of endpoints that talk to each
//! other ([`Two`], [`Group`], [`Pair`]).

use crate::{describe, errno_name, is_msg, poll_cq, require, require_pairable, Completions};
use crate::{Skip, TIMEOUT};
use ofi::consts::*;
use ofi::errno;
use ofi::{
    AddressVector, CompletionQueue, CqAttr, Domain, Endpoint, EqAttr, EqEvent, EventQueue, Fabric,
    Info, PassiveEndpoint,
};
use std::time::{Duration, Instant};

/// Opens a CQ in the tagged format with the given wait object.
pub fn tagged_cq(domain: &Domain, wait: u32) -> CompletionQueue {
    domain
        .cq(&CqAttr {
            size: 0,
            format: cq_format::FI_CQ_FORMAT_TAGGED,
            wait_obj: wait,
        })
        .unwrap_or_else(|e| panic!("cq open: {e}"))
}

/// The fid (context) the MSG fixtures' listener reports on its event queue.
pub const PEP_CTX: usize = 0xc0;
/// The fid (context) of the connecting endpoint (`a`) on the event queue.
pub const A_CTX: usize = 0xca;
/// The fid (context) of the accepting endpoint (`b`) on the event queue.
pub const B_CTX: usize = 0xcb;

/// Opens fabric and domain for an offer, and an AV for endpoint types that
/// address their peers (every type but FI_EP_MSG).
pub fn open_domain(info: &Info) -> (Fabric, Domain, Option<AddressVector>) {
    let fabric = Fabric::open(&info.fabric_attr)
        .unwrap_or_else(|e| panic!("fabric open [{}]: {e}", describe(info)));
    let domain = fabric
        .domain(info)
        .unwrap_or_else(|e| panic!("domain open: {e}"));
    let av = (!is_msg(info)).then(|| {
        domain
            .av(&ofi::AvAttr::default())
            .unwrap_or_else(|e| panic!("av open: {e}"))
    });
    (fabric, domain, av)
}

/// Opens an endpoint with fid `ctx`, lets `bind` bind its CQs and counters,
/// binds `av` and `eq` when given, and enables it.
pub(crate) fn enabled_endpoint(
    domain: &Domain,
    info: &Info,
    ctx: usize,
    av: Option<&AddressVector>,
    eq: Option<&EventQueue>,
    bind: impl FnOnce(&Endpoint),
) -> Endpoint {
    let ep = domain
        .endpoint_with_context(info, ctx)
        .unwrap_or_else(|e| panic!("endpoint open: {e}"));
    bind(&ep);
    if let Some(av) = av {
        ep.bind_av(av).unwrap_or_else(|e| panic!("bind av: {e}"));
    }
    if let Some(eq) = eq {
        ep.bind_eq(eq).unwrap_or_else(|e| panic!("bind eq: {e}"));
    }
    ep.enable().unwrap_or_else(|e| panic!("enable: {e}"));
    ep
}

/// Opens an endpoint bound to `cq` (transmit and receive) and `av`, enabled.
pub fn open_endpoint(
    domain: &Domain,
    info: &Info,
    cq: &CompletionQueue,
    av: &AddressVector,
) -> Endpoint {
    enabled_endpoint(domain, info, 0, Some(av), None, |ep| {
        ep.bind_cq(cq, FI_TRANSMIT | FI_RECV)
            .unwrap_or_else(|e| panic!("bind cq: {e}"));
    })
}

/// Inserts an endpoint's address into an AV.
pub fn insert(av: &AddressVector, ep: &Endpoint) -> u64 {
    let name = ep.getname().unwrap_or_else(|e| panic!("getname: {e}"));
    av.insert_one(&name)
        .unwrap_or_else(|e| panic!("av insert: {e}"))
}

/// Reads the next event of `eq` (driving progress) until `deadline`;
/// panics naming `what` on an error entry or when the deadline passes.
pub fn eq_wait(eq: &EventQueue, deadline: Instant, what: &str) -> EqEvent {
    loop {
        match eq.read() {
            Ok(ev) => return ev,
            Err(e) if e.is_again() && Instant::now() < deadline => std::thread::yield_now(),
            Err(e) if e.is_again() => panic!("{what}: no event before the deadline"),
            Err(e) if e.code() == errno::FI_EAVAIL => match eq.readerr() {
                Ok(ee) => panic!(
                    "{what}: EQ error entry for fid {:#x}: err {} ({})",
                    ee.fid,
                    ee.err,
                    errno_name(ee.err)
                ),
                Err(e2) => panic!("{what}: EQ read said FI_EAVAIL but readerr failed: {e2}"),
            },
            Err(e) => panic!("{what}: EQ read failed: {e}"),
        }
    }
}

/// What keeps a fixture's MSG endpoints connected: the listener the
/// connecting side reached and the event queue of the connection events.
pub struct Cm {
    /// The passive endpoint (fid [`PEP_CTX`]).
    pub pep: PassiveEndpoint,
    /// Connection events of the listener and of both endpoints.
    pub eq: EventQueue,
}

/// Opens a listener on the offer's (loopback) address with its own EQ.
pub(crate) fn listen(fabric: &Fabric, info: &Info) -> Cm {
    let eq = fabric
        .eq(&EqAttr::default())
        .unwrap_or_else(|e| panic!("eq open: {e}"));
    let pep = fabric
        .passive_ep(info, PEP_CTX)
        .unwrap_or_else(|e| panic!("passive endpoint open: {e}"));
    pep.bind_eq(&eq)
        .unwrap_or_else(|e| panic!("passive endpoint bind eq: {e}"));
    pep.listen().unwrap_or_else(|e| panic!("listen: {e}"));
    Cm { pep, eq }
}

/// Waits for the FI_CONNREQ on a listener's EQ; returns the info to open
/// the accepting endpoint with.
pub(crate) fn connreq(cm: &Cm, deadline: Instant) -> Info {
    let req = eq_wait(&cm.eq, deadline, "waiting for the connection request");
    assert_eq!(
        (req.event, req.fid),
        (eq_event::FI_CONNREQ, PEP_CTX),
        "expected FI_CONNREQ from the listener"
    );
    *req.info
        .unwrap_or_else(|| panic!("FI_CONNREQ without an info to accept with"))
}

/// Connects two MSG endpoints of `domain` over the offer's loopback
/// address: `a` (fid [`A_CTX`]) connects to a listener, `b` (fid
/// [`B_CTX`]) is opened from the connection request and accepts. Returns
/// once both reported FI_CONNECTED (bounded by [`TIMEOUT`]). `bind(i, ep)`
/// binds endpoint `i`'s (0: `a`, 1: `b`) CQs and counters before enable.
pub fn connect_msg(
    fabric: &Fabric,
    domain: &Domain,
    info: &Info,
    mut bind: impl FnMut(usize, &Endpoint),
) -> (Endpoint, Endpoint, Cm) {
    let deadline = Instant::now() + TIMEOUT;
    let cm = listen(fabric, info);
    let name = cm
        .pep
        .getname()
        .unwrap_or_else(|e| panic!("listener getname: {e}"));
    let a = enabled_endpoint(domain, info, A_CTX, None, Some(&cm.eq), |ep| bind(0, ep));
    a.connect(&name, &[])
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let rinfo = connreq(&cm, deadline);
    let b = enabled_endpoint(domain, &rinfo, B_CTX, None, Some(&cm.eq), |ep| bind(1, ep));
    b.accept(&[]).unwrap_or_else(|e| panic!("accept: {e}"));
    let mut up = [false; 2];
    while !(up[0] && up[1]) {
        let ev = eq_wait(&cm.eq, deadline, "waiting for FI_CONNECTED on both sides");
        match (ev.event, ev.fid) {
            (eq_event::FI_CONNECTED, A_CTX) if !up[0] => up[0] = true,
            (eq_event::FI_CONNECTED, B_CTX) if !up[1] => up[1] = true,
            (e, fid) => panic!("unexpected event {e} for fid {fid:#x} while connecting"),
        }
    }
    (a, b, cm)
}

/// Two enabled endpoints that talk to each other, with the destination to
/// pass when sending to each.
pub struct Two {
    /// First endpoint (the connecting side for MSG).
    pub a: Endpoint,
    /// Second endpoint (the accepting side for MSG).
    pub b: Endpoint,
    /// Destination of sends to `a`: its fi_addr (RDM), or FI_ADDR_UNSPEC
    /// (connected MSG endpoints ignore destinations).
    pub fa: u64,
    /// Destination of sends to `b`.
    pub fb: u64,
    /// The connection's listener and event queue (MSG only).
    pub cm: Option<Cm>,
}

/// Opens two endpoints of `domain` that talk to each other: RDM endpoints
/// bound to `av` (which then holds both), MSG endpoints connected
/// ([`connect_msg`]; `av` is `None`). `bind(i, ep)` binds endpoint `i`'s
/// CQs and counters before enable.
pub fn open_two(
    fabric: &Fabric,
    domain: &Domain,
    av: Option<&AddressVector>,
    info: &Info,
    mut bind: impl FnMut(usize, &Endpoint),
) -> Result<Two, Skip> {
    require_pairable(info)?;
    if is_msg(info) {
        let (a, b, cm) = connect_msg(fabric, domain, info, bind);
        return Ok(Two {
            a,
            b,
            fa: FI_ADDR_UNSPEC,
            fb: FI_ADDR_UNSPEC,
            cm: Some(cm),
        });
    }
    let av = av.unwrap_or_else(|| panic!("{}: endpoints need an AV", describe(info)));
    let a = enabled_endpoint(domain, info, A_CTX, Some(av), None, |ep| bind(0, ep));
    let b = enabled_endpoint(domain, info, B_CTX, Some(av), None, |ep| bind(1, ep));
    let (fa, fb) = (insert(av, &a), insert(av, &b));
    Ok(Two {
        a,
        b,
        fa,
        fb,
        cm: None,
    })
}

/// `n` enabled endpoints of one domain, each bound to its own tagged CQ:
/// RDM endpoints share an AV that holds every endpoint's address; MSG
/// endpoints (`n` = 2 only) are connected to each other.
pub struct Group {
    /// The endpoints (declared first: dropped before what they are bound to).
    pub eps: Vec<Endpoint>,
    /// `cqs[i]` is bound to `eps[i]` for transmit and receive.
    pub cqs: Vec<CompletionQueue>,
    /// `addrs[i]` is the destination of sends to `eps[i]`: its fi_addr in
    /// `av` (RDM), FI_ADDR_UNSPEC (MSG).
    pub addrs: Vec<u64>,
    /// The connection's listener and event queue (MSG only).
    pub cm: Option<Cm>,
    /// The shared address vector (not for MSG).
    pub av: Option<AddressVector>,
    /// The domain.
    pub domain: Domain,
    /// The fabric.
    pub fabric: Fabric,
    /// The offer the group was opened with.
    pub info: Info,
}

impl Group {
    /// Opens `n` endpoints; skips unless the offer has `caps` and is RDM,
    /// or MSG with `n` = 2.
    pub fn open(info: &Info, caps: u64, n: usize) -> Result<Group, Skip> {
        Self::open_with(info, caps, n, wait_obj::FI_WAIT_UNSPEC)
    }

    /// As [`open`](Self::open), with the CQs' wait object.
    pub fn open_with(info: &Info, caps: u64, n: usize, wait: u32) -> Result<Group, Skip> {
        require(info, caps)?;
        require_pairable(info)?;
        if is_msg(info) && n != 2 {
            return Err(Skip::ep_type(
                &[ep_type::FI_EP_RDM],
                format!(
                    "a group of {n} endpoints needs FI_EP_RDM; FI_EP_MSG endpoints come in \
                     connected pairs"
                ),
            ));
        }
        let (fabric, domain, av) = open_domain(info);
        let cqs: Vec<_> = (0..n).map(|_| tagged_cq(&domain, wait)).collect();
        let (eps, addrs, cm) = match &av {
            Some(av) => {
                let eps: Vec<_> = cqs
                    .iter()
                    .map(|cq| open_endpoint(&domain, info, cq, av))
                    .collect();
                let addrs = eps.iter().map(|ep| insert(av, ep)).collect();
                (eps, addrs, None)
            }
            None => {
                let t = open_two(&fabric, &domain, None, info, |i, ep| {
                    ep.bind_cq(&cqs[i], FI_TRANSMIT | FI_RECV)
                        .unwrap_or_else(|e| panic!("bind cq: {e}"));
                })?;
                (vec![t.a, t.b], vec![t.fa, t.fb], t.cm)
            }
        };
        Ok(Group {
            eps,
            cqs,
            addrs,
            cm,
            av,
            domain,
            fabric,
            info: info.clone(),
        })
    }

    /// Drives progress on every endpoint once.
    pub fn progress(&self) {
        for ep in &self.eps {
            ep.progress();
        }
    }

    /// Reads every CQ until `want[i]` entries are in hand for each `i`, or
    /// the timeout passes.
    pub fn wait(&self, want: &[usize], timeout: Duration) -> Vec<Completions> {
        let mut out: Vec<Completions> = self.cqs.iter().map(|_| Completions::default()).collect();
        let deadline = Instant::now() + timeout;
        loop {
            let mut read = 0;
            for (cq, o) in self.cqs.iter().zip(out.iter_mut()) {
                read += poll_cq(cq, o);
            }
            let done = out.iter().zip(want).all(|(o, &w)| o.total() >= w);
            if done || Instant::now() >= deadline {
                return out;
            }
            if read == 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// Two enabled endpoints `a` and `b` of one domain with their own tagged
/// CQs: RDM endpoints share an AV holding both (`fa`, `fb`); MSG endpoints
/// are connected (`a` connected, `b` accepted; `fa` = `fb` =
/// FI_ADDR_UNSPEC).
pub struct Pair {
    /// First endpoint.
    pub a: Endpoint,
    /// Second endpoint.
    pub b: Endpoint,
    /// `a`'s CQ (transmit and receive).
    pub cq_a: CompletionQueue,
    /// `b`'s CQ (transmit and receive).
    pub cq_b: CompletionQueue,
    /// Destination of sends to `a`.
    pub fa: u64,
    /// Destination of sends to `b`.
    pub fb: u64,
    /// The connection's listener and event queue (MSG only).
    pub cm: Option<Cm>,
    /// The shared AV (not for MSG).
    pub av: Option<AddressVector>,
    /// The domain.
    pub domain: Domain,
    /// The fabric.
    pub fabric: Fabric,
    /// The offer.
    pub info: Info,
}

impl Pair {
    /// Opens a pair; skips unless the offer is RDM or MSG with `caps`.
    pub fn open(info: &Info, caps: u64) -> Result<Pair, Skip> {
        Self::open_with(info, caps, wait_obj::FI_WAIT_UNSPEC)
    }

    /// As [`open`](Self::open), with the CQs' wait object.
    pub fn open_with(info: &Info, caps: u64, wait: u32) -> Result<Pair, Skip> {
        let g = Group::open_with(info, caps, 2, wait)?;
        let Group {
            mut eps,
            mut cqs,
            addrs,
            cm,
            av,
            domain,
            fabric,
            info,
        } = g;
        let (b, a) = (
            eps.pop().expect("2 endpoints"),
            eps.pop().expect("2 endpoints"),
        );
        let (cq_b, cq_a) = (cqs.pop().expect("2 cqs"), cqs.pop().expect("2 cqs"));
        Ok(Pair {
            a,
            b,
            cq_a,
            cq_b,
            fa: addrs[0],
            fb: addrs[1],
            cm,
            av,
            domain,
            fabric,
            info,
        })
    }

    /// Reads both CQs until `a` has `na` entries and `b` has `nb` (errors
    /// included), or the timeout passes. Returns `(a's, b's)`.
    pub fn wait(&self, na: usize, nb: usize, timeout: Duration) -> (Completions, Completions) {
        let mut ca = Completions::default();
        let mut cb = Completions::default();
        let deadline = Instant::now() + timeout;
        loop {
            let read = poll_cq(&self.cq_a, &mut ca) + poll_cq(&self.cq_b, &mut cb);
            if (ca.total() >= na && cb.total() >= nb) || Instant::now() >= deadline {
                return (ca, cb);
            }
            if read == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Reads `b`'s CQ until it has `n` entries (errors included) or the
    /// timeout passes, driving `a`'s progress too without reading `a`'s CQ
    /// (its entries stay there for later reads): what `b` waits for may
    /// need `a` to progress (manual progress; a large message pushed
    /// through shm's ring moves only while its sender progresses).
    pub fn wait_b(&self, n: usize, timeout: Duration) -> Completions {
        let mut out = Completions::default();
        let deadline = Instant::now() + timeout;
        while out.total() < n && Instant::now() < deadline {
            self.a.progress();
            if poll_cq(&self.cq_b, &mut out) == 0 {
                std::thread::yield_now();
            }
        }
        out
    }

    /// Reads both CQs into running tallies until `sa` holds `na` entries and
    /// `sb` holds `nb` (errors included), or the timeout passes. Use this
    /// when earlier reads may already have taken some of the entries.
    pub fn wait_into(
        &self,
        sa: &mut Completions,
        sb: &mut Completions,
        na: usize,
        nb: usize,
        timeout: Duration,
    ) {
        let (ca, cb) = self.wait(
            na.saturating_sub(sa.total()),
            nb.saturating_sub(sb.total()),
            timeout,
        );
        sa.extend(ca);
        sb.extend(cb);
    }

    /// Reads both CQs for `d` (progress on both sides); returns what came.
    pub fn settle(&self, d: Duration) -> (Completions, Completions) {
        self.wait(usize::MAX, usize::MAX, d)
    }

    /// Drives progress on both endpoints once.
    pub fn progress(&self) {
        self.a.progress();
        self.b.progress();
    }
}
