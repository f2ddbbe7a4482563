//! A ping-pong between two shm RDM endpoints in one process, on the raw API.
//!
//! Opens a fabric and domain from the shm provider's offer, one completion
//! queue, one address vector holding both endpoints' addresses, and two
//! endpoints bound to them. Endpoint A sends a message to B, B sends it back,
//! and every completion is read from the CQ; the data is checked on both
//! legs and the round-trip latency is printed.
//!
//! The raw layer takes caller-owned memory by pointer: each buffer must stay
//! alive (and a receive buffer unaliased) until its completion is read,
//! which this example guarantees by waiting for every completion before the
//! buffers are touched or dropped.
//!
//! Run with `cargo run --release -p ofi --example pingpong_rdm`.
#![allow(unsafe_code)]

use std::time::{Duration, Instant};

use ofi::consts::*;
use ofi::*;

/// Bytes per message.
const LEN: usize = 64;
/// Round trips to time (after a short warm-up).
const ROUNDS: usize = 1000;
/// Round trips before timing starts.
const WARMUP: usize = 20;

/// Context values identifying the four operations of one round trip.
const CTX_A_SEND: usize = 1;
const CTX_B_RECV: usize = 2;
const CTX_B_SEND: usize = 3;
const CTX_A_RECV: usize = 4;

/// Reads the CQ until a completion carrying `context` arrives; returns it.
/// Fails after five seconds, or on an error completion.
fn wait_for(cq: &CompletionQueue, context: usize) -> Result<CqTaggedEntry> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut e = [CqTaggedEntry::default(); 1];
        match cq.read(&mut e) {
            Ok(1) if e[0].op_context == context => return Ok(e[0]),
            Ok(1) => panic!(
                "completion for context {} while waiting for {context}",
                e[0].op_context
            ),
            Ok(_) => {}
            Err(err) if err.is_again() => {}
            Err(err) => {
                eprintln!("error completion: {:?}", cq.readerr());
                return Err(err);
            }
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for the completion of context {context}");
        }
    }
}

fn main() -> Result<()> {
    let mut hints = Info::hints();
    hints.caps = FI_MSG;
    hints.ep_attr.ep_type = ep_type::FI_EP_RDM;
    hints.fabric_attr.prov_name = Some("shm".into());
    let info = ofi::getinfo(FI_VERSION_CURRENT, None, None, 0, Some(&hints))?.remove(0);

    let fabric = Fabric::open(&info.fabric_attr)?;
    let domain = fabric.domain(&info)?;
    let cq = domain.cq(&CqAttr {
        format: cq_format::FI_CQ_FORMAT_TAGGED,
        ..Default::default()
    })?;
    let av = domain.av(&AvAttr::default())?;
    let a = domain.endpoint(&info)?;
    let b = domain.endpoint(&info)?;
    for ep in [&a, &b] {
        ep.bind_cq(&cq, FI_TRANSMIT | FI_RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
    }
    let addr_a = av.insert_one(&a.getname()?)?;
    let addr_b = av.insert_one(&b.getname()?)?;
    println!(
        "provider {}: endpoint A = {}, endpoint B = {}",
        info.provider(),
        av.straddr(&a.getname()?),
        av.straddr(&b.getname()?)
    );

    let mut ping = [0u8; LEN];
    let mut a_rx = [0u8; LEN];
    let mut b_rx = [0u8; LEN];
    let mut rtts = Vec::with_capacity(ROUNDS);

    for round in 0..WARMUP + ROUNDS {
        for (i, byte) in ping.iter_mut().enumerate() {
            *byte = (round + i) as u8;
        }
        let start = Instant::now();

        // SAFETY: b_rx lives until the end of main and is not touched until
        // CTX_B_RECV completes below.
        unsafe { b.recv(b_rx.as_mut_ptr(), LEN, FI_ADDR_UNSPEC, CTX_B_RECV)? };
        // SAFETY: a_rx lives until the end of main and is not touched until
        // CTX_A_RECV completes below.
        unsafe { a.recv(a_rx.as_mut_ptr(), LEN, addr_b, CTX_A_RECV)? };
        // SAFETY: ping is neither dropped nor written until CTX_A_SEND
        // completes below.
        unsafe { a.send(ping.as_ptr(), LEN, addr_b, CTX_A_SEND)? };

        wait_for(&cq, CTX_A_SEND)?;
        let got = wait_for(&cq, CTX_B_RECV)?;
        assert_eq!(got.len, LEN, "B received {} bytes", got.len);

        // SAFETY: b_rx holds the completed receive and is neither dropped
        // nor written until CTX_B_SEND completes below.
        unsafe { b.send(b_rx.as_ptr(), LEN, addr_a, CTX_B_SEND)? };
        wait_for(&cq, CTX_B_SEND)?;
        let back = wait_for(&cq, CTX_A_RECV)?;
        let rtt = start.elapsed();

        assert_eq!(back.len, LEN, "A received {} bytes", back.len);
        assert_eq!(b_rx, ping, "round {round}: B received the wrong bytes");
        assert_eq!(a_rx, ping, "round {round}: A received the wrong bytes");
        if round >= WARMUP {
            rtts.push(rtt);
        }
    }

    rtts.sort();
    let total: Duration = rtts.iter().sum();
    let pct = |p: usize| rtts[(rtts.len() - 1) * p / 100].as_secs_f64() * 1e6;
    println!(
        "{ROUNDS} round trips of {LEN} bytes, data checked: mean {:.2} us, p50 {:.2} us, p99 {:.2} us (one thread drives both endpoints)",
        total.as_secs_f64() * 1e6 / rtts.len() as f64,
        pct(50),
        pct(99),
    );
    Ok(())
}
