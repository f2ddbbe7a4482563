//! A storage service using the mid-layer without NBD: it serves a scratch
//! file as a volume over the fabric (shm here; pass a provider name as the
//! first argument for another), opens it with the initiator API, keeps 16
//! writes in flight, flushes, reads everything back and checks it against
//! the file.
//!
//!   cargo run --release -p ofi-storage --example volume [-- tcp]

use ofi_storage::target::{Target, TargetOptions};
use ofi_storage::{NetOptions, Volume, VolumeOptions};
use std::sync::atomic::Ordering;
use std::time::Duration;

fn main() -> Result<(), String> {
    let provider = std::env::args().nth(1).unwrap_or_else(|| "shm".into());
    let net = NetOptions {
        provider: Some(provider.clone()),
        ..NetOptions::default()
    };
    let path = std::env::temp_dir().join(format!("ofi-storage-example-{}", std::process::id()));
    let size = 16u64 << 20;

    // The target: a 16 MiB file, served on a loopback control port.
    let target = Target::bind(
        &path,
        &TargetOptions {
            net: net.clone(),
            size: Some(size),
            ..TargetOptions::default()
        },
    )?;
    let addr = target.local_addr().to_string();
    let stop = target.stop_flag();
    let server = std::thread::spawn(move || target.run());

    // The initiator: 16 commands in flight, 256 KiB each.
    let vol = Volume::open(
        &addr,
        &VolumeOptions {
            net,
            queue_depth: 16,
            ..VolumeOptions::default()
        },
    )?;
    println!(
        "volume on {addr} over {provider}: {} bytes, queue depth {}, max I/O {}",
        vol.size(),
        vol.queue_depth(),
        vol.max_io()
    );
    let chunk = 256 << 10;
    let chunks = size / chunk as u64;
    let fill = |i: u64| vec![(i as u8).wrapping_mul(7).wrapping_add(1); chunk];
    for i in 0..chunks {
        vol.submit_write(i * chunk as u64, fill(i), false, i);
    }
    for _ in 0..chunks {
        let c = vol
            .next(Duration::from_secs(30))
            .ok_or("a write did not complete")?;
        c.result.map_err(|s| format!("write {}: {s}", c.user))?;
    }
    vol.flush().map_err(|s| format!("flush: {s}"))?;
    for i in 0..chunks {
        let got = vol
            .read(i * chunk as u64, chunk as u32)
            .map_err(|s| format!("read {i}: {s}"))?;
        if got != fill(i) {
            return Err(format!("chunk {i} read back differs"));
        }
    }
    let file = std::fs::read(&path).map_err(|e| e.to_string())?;
    let same = (0..chunks).all(|i| file[(i * chunk as u64) as usize..][..chunk] == fill(i)[..]);
    println!("wrote {chunks} chunks of {chunk} bytes, flushed, read back: file matches: {same}");
    drop(vol);
    stop.store(true, Ordering::Relaxed);
    server.join().map_err(|_| "target thread panicked")??;
    let _ = std::fs::remove_file(&path);
    if same {
        Ok(())
    } else {
        Err("the backing file differs".into())
    }
}
