//! `ofi`: the command-line tools of ofi (info, pingpong, bw, storage).

#![deny(unsafe_code)]

/// Prints to stdout; a closed pipe (`ofi info | head`) ends the program
/// quietly instead of panicking.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout().lock(), $($t)*) {
            $crate::stdout_failed(e);
        }
    }};
}

/// `out!` with a newline.
macro_rules! outln {
    () => { out!("\n") };
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($t)*) {
            $crate::stdout_failed(e);
        }
    }};
}

/// Exits quietly when stdout is gone; reports other write errors.
fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("ofi: writing to stdout: {e}");
    std::process::exit(1);
}

mod args;
mod bw;
mod control;
mod data;
mod info;
mod pingpong;
mod plot;
mod report;
mod setup;
mod signals;
mod storage;
mod storage_bench;
mod watch;

const USAGE: &str = "Usage: ofi <command> [options]
Commands:
  info       list providers and their offers (fi_info)
  pingpong   latency and bandwidth between two endpoints (fi_pingpong)
  bw         bandwidth and message rate of streamed sends, RMA or atomics
  storage    a block target over the fabric, an NBD gateway and a load generator
Run 'ofi <command> -h' for a command's options.";

/// The tools' log output: the library's events on stderr at the level
/// FI_LOG_LEVEL asks for (warnings by default).
fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(ofi::config::log_level())
        .with_writer(std::io::stderr)
        .with_target(true)
        .try_init();
}

fn main() {
    init_logging();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let code = match argv.first().map(String::as_str) {
        Some("info") => info::run(&argv[1..]),
        Some("pingpong") => pingpong::run(&argv[1..]),
        Some("bw") => bw::run(&argv[1..]),
        Some("storage") => storage::run(&argv[1..]),
        Some("-h") | Some("--help") | None => {
            outln!("{USAGE}");
            0
        }
        Some(c) => {
            eprintln!("ofi: unknown command '{c}'\n{USAGE}");
            2
        }
    };
    std::process::exit(code);
}
