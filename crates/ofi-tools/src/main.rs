//! `ofi`: the command-line tools of ofi (info, pingpong).

#![deny(unsafe_code)]

mod args;
mod info;
mod pingpong;
mod plot;

const USAGE: &str = "Usage: ofi <command> [options]
Commands:
  info       list providers and their offers (fi_info)
  pingpong   latency and bandwidth between two endpoints (fi_pingpong)
Run 'ofi <command> -h' for a command's options.";

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let code = match argv.first().map(String::as_str) {
        Some("info") => info::run(&argv[1..]),
        Some("pingpong") => pingpong::run(&argv[1..]),
        Some("-h") | Some("--help") | None => {
            println!("{USAGE}");
            0
        }
        Some(c) => {
            eprintln!("ofi: unknown command '{c}'\n{USAGE}");
            2
        }
    };
    std::process::exit(code);
}
