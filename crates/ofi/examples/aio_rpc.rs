//! An async tagged RPC server and clients over RDM (shm), on tokio.
//!
//! One server channel answers requests; four client tasks share one client
//! channel, each with requests in flight. A request is a tagged message
//! whose tag is its id (bit 63 clear); the answer goes back to the
//! request's source (FI_SOURCE) tagged `RESPONSE | id`, where the asking
//! task has its receive posted. The server squares the number it is sent.
//!
//! Run with `cargo run --release -p ofi --example aio_rpc --features tokio`.

use ofi::aio::Channel;
use ofi::{Caps, EpType, Error, Hints, Result};

/// Tag bit of answers; requests have it clear.
const RESPONSE: u64 = 1 << 63;
const TASKS: u64 = 4;
const CALLS: u64 = 25;

async fn serve(server: Channel, requests: u64) -> Result<()> {
    for _ in 0..requests {
        // Any tag with the RESPONSE bit clear: the low bits are ignored.
        let got = server.trecv(vec![0u8; 8], 0, RESPONSE - 1).await?;
        let src = got
            .src
            .ok_or_else(|| Error::inval("request from an unknown source"))?;
        let x = u64::from_le_bytes(got.bytes().try_into().map_err(|_| Error::inval("short"))?);
        let answer = x.wrapping_mul(x).to_le_bytes().to_vec();
        server.tsend(answer, src, RESPONSE | got.tag).await?;
    }
    Ok(())
}

async fn call(client: &Channel, server: ofi::safe::Addr, id: u64, x: u64) -> Result<u64> {
    // The answer's receive is posted before the request leaves.
    let answer = client.trecv(vec![0u8; 8], RESPONSE | id, 0);
    client.tsend(x.to_le_bytes().to_vec(), server, id).await?;
    let got = answer.await?;
    Ok(u64::from_le_bytes(
        got.bytes()
            .try_into()
            .map_err(|_| Error::inval("short answer"))?,
    ))
}

fn main() -> Result<()> {
    let info = Hints::new()
        .caps(Caps::TAGGED | Caps::SOURCE)
        .ep_type(EpType::Rdm)
        .provider("shm")
        .first()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| Error::os(e, "tokio runtime"))?;
    rt.block_on(async {
        let server = Channel::open(&info)?;
        let client = Channel::open(&info)?;
        let to_server = client.insert(&server.address()?)?;
        // The server knows the client, so answers find their way back.
        server.insert(&client.address()?)?;

        let served = tokio::spawn(serve(server, TASKS * CALLS));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let client = client.clone();
            tasks.push(tokio::spawn(async move {
                let mut sum = 0u64;
                for i in 0..CALLS {
                    let id = t * CALLS + i;
                    let x = id + 1;
                    let y = call(&client, to_server, id, x).await?;
                    assert_eq!(y, x * x, "answer to call {id}");
                    sum += y;
                }
                Ok::<u64, Error>(sum)
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.map_err(|e| Error::inval(format!("task: {e}")))??;
        }
        served
            .await
            .map_err(|e| Error::inval(format!("server: {e}")))??;
        let n = TASKS * CALLS;
        assert_eq!(total, n * (n + 1) * (2 * n + 1) / 6);
        println!("{n} calls from {TASKS} tasks answered; sum of squares {total}");
        Ok(())
    })
}
