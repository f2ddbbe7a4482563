//! An async echo server with connection management over tcp MSG
//! endpoints (loopback), on tokio: a listener accepts connections and
//! serves each in its own task; three clients connect at once, send
//! messages, check the echoes and hang up; the server sees each
//! disconnection as its pending receive failing.
//!
//! Run with `cargo run --release -p ofi --example aio_echo --features tokio`.

use ofi::aio::{Channel, Listener};
use ofi::safe::Addr;
use ofi::{Caps, EpType, Error, Hints, Result};

const CLIENTS: usize = 3;
const MESSAGES: usize = 10;

/// Echoes until the peer goes away; returns how many messages it echoed.
async fn echo(conn: Channel) -> usize {
    let mut n = 0;
    let mut buf = vec![0u8; 256];
    loop {
        let Ok(got) = conn.recv(buf).await else {
            // The client hung up: its receive fails (connection reset).
            return n;
        };
        // The received buffer goes straight back out, cut to the message.
        let mut reply = got.buf;
        reply.truncate(got.len);
        let Ok(sent) = conn.send(reply, Addr::PEER).await else {
            return n;
        };
        buf = sent.buf;
        buf.resize(256, 0);
        n += 1;
    }
}

async fn client(info: ofi::Info, server: Vec<u8>, me: usize) -> Result<()> {
    let conn = Channel::connect(&info, &server).await?;
    for i in 0..MESSAGES {
        let reply = conn.recv(vec![0u8; 256]);
        let msg = format!("client {me} message {i}").into_bytes();
        let sent = conn.send(msg, Addr::PEER).await?;
        assert_eq!(reply.await?.bytes(), &sent.buf[..]);
    }
    println!("client {me}: {MESSAGES} echoes");
    Ok(())
}

fn main() -> Result<()> {
    let info = Hints::new()
        .caps(Caps::MSG)
        .ep_type(EpType::Msg)
        .provider("tcp")
        .node("127.0.0.1")
        .service("0")
        .source(true)
        .first()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| Error::os(e, "tokio runtime"))?;
    rt.block_on(async {
        let listener = Listener::bind(&info)?;
        let addr = listener.address()?;
        let server = tokio::spawn(async move {
            let mut sessions = Vec::new();
            for _ in 0..CLIENTS {
                let conn = listener.accept().await?;
                sessions.push(tokio::spawn(echo(conn)));
            }
            let mut echoed = 0;
            for s in sessions {
                echoed += s.await.map_err(|e| Error::inval(format!("session: {e}")))?;
            }
            Ok::<usize, Error>(echoed)
        });
        let clients: Vec<_> = (0..CLIENTS)
            .map(|me| tokio::spawn(client(info.clone(), addr.clone(), me)))
            .collect();
        for c in clients {
            c.await
                .map_err(|e| Error::inval(format!("client: {e}")))??;
        }
        let echoed = server
            .await
            .map_err(|e| Error::inval(format!("server: {e}")))??;
        assert_eq!(echoed, CLIENTS * MESSAGES);
        println!("server: {CLIENTS} connections, {echoed} messages echoed, all closed");
        Ok(())
    })
}
