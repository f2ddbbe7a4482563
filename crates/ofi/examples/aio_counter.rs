//! A shared counter in a registered region, incremented by several tasks
//! with remote atomics over shm, on tokio: each task fetch-adds through
//! one shared initiator channel, a compare-and-swap claims the final
//! value, and an RMA read checks it. The target's channel makes progress
//! (under manual progress it carries out the peers' atomics) while it
//! waits for the tasks.
//!
//! Run with `cargo run --release -p ofi --example aio_counter --features tokio`.

use ofi::aio::Channel;
use ofi::{Caps, EpType, Error, Hints, MrAccess, Result};

const TASKS: u64 = 4;
const ADDS: u64 = 50;

fn main() -> Result<()> {
    let info = Hints::new()
        .caps(Caps::RMA | Caps::ATOMIC)
        .ep_type(EpType::Rdm)
        .provider("shm")
        .first()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| Error::os(e, "tokio runtime"))?;
    rt.block_on(async {
        let target = Channel::open(&info)?;
        let init = Channel::open(&info)?;
        let to_target = init.insert(&target.address()?)?;
        let counter =
            target.register(vec![0u8; 8], MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)?;
        let (key, at) = (counter.key(), counter.remote_addr(0));

        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let init = init.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    for _ in 0..ADDS {
                        seen.push(init.fetch_add_u64(to_target, at, key, 1).await?);
                    }
                    Ok::<(u64, Vec<u64>), Error>((t, seen))
                })
            })
            .collect();
        // The target drives its progress until every task is done.
        let results = target
            .progress_until(async {
                let mut all = Vec::new();
                for t in tasks {
                    all.push(t.await.map_err(|e| Error::inval(format!("task: {e}")))??);
                }
                Ok::<_, Error>(all)
            })
            .await?;
        // Every value before an increment was seen exactly once.
        let mut seen: Vec<u64> = results.iter().flat_map(|(_, s)| s.clone()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..TASKS * ADDS).collect::<Vec<_>>());
        for (t, s) in &results {
            println!("task {t}: {} increments, first saw {}", s.len(), s[0]);
        }

        // Claim the final value with a compare-and-swap, then read it back.
        let total = TASKS * ADDS;
        let before = target
            .progress_until(init.compare_swap_u64(to_target, at, key, total, u64::MAX))
            .await?;
        assert_eq!(before, total);
        let read = target
            .progress_until(init.read(vec![0u8; 8], to_target, at, key))
            .await?;
        assert_eq!(read.buf, u64::MAX.to_ne_bytes());
        println!("counter reached {total}; claimed with compare-and-swap");
        let back = counter
            .into_vec()
            .map_err(|_| Error::busy("the region is still being accessed"))?;
        assert_eq!(back, u64::MAX.to_ne_bytes());
        Ok(())
    })
}
