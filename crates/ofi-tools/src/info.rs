//! `ofi info`: fi_info's flags and output shape.

use crate::args::Args;
use ofi::consts::*;
use ofi::{AddrFormat, Caps, EpType, Hints, Info, Mode};

const USAGE: &str = "Usage: ofi info [OPTIONS]
  -n, --node NODE          node name or address
  -P, --port PORT          port number
  -c, --caps CAP1|CAP2     capabilities (FI_MSG|FI_TAGGED …)
  -m, --mode MOD1|MOD2     modes the application supports
  -t, --ep_type EPTYPE     endpoint type (FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM)
  -a, --addr_format FMT    address format (FI_ADDR_STR, FI_SOCKADDR_IN …)
  -p, --provider PROV      provider name or list (shm, ^tcp)
  -d, --domain DOMAIN      domain name
  -f, --fabric FABRIC      fabric name
  -s, --source             node is the source address
  -l, --list               list providers
      --list-providers     print the providers' names only, one a line,
                           best first (for scripts)
  -v, --verbose            print every attribute
  -e, --env                print every tunable with its default and help
  -g SUBSTR                only tunables whose name contains SUBSTR (with -e)
  -h, --help               this text";

fn long_to_short(a: &mut Args) {
    for (l, s) in [
        ("node", "n"),
        ("port", "P"),
        ("caps", "c"),
        ("mode", "m"),
        ("ep_type", "t"),
        ("addr_format", "a"),
        ("provider", "p"),
        ("domain", "d"),
        ("fabric", "f"),
        ("source", "s"),
        ("list", "l"),
        ("verbose", "v"),
        ("env", "e"),
        ("help", "h"),
    ] {
        if let Some(v) = a.opts.remove(l) {
            a.opts.insert(s.into(), v);
        }
    }
}

/// Runs `ofi info`; returns the exit code.
pub fn run(argv: &[String]) -> i32 {
    let mut a = match Args::parse(
        argv,
        "nPcmtapdfg",
        &[
            "node",
            "port",
            "caps",
            "mode",
            "ep_type",
            "addr_format",
            "provider",
            "domain",
            "fabric",
        ],
    ) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ofi info: {e}\n{USAGE}");
            return 2;
        }
    };
    long_to_short(&mut a);
    if a.has("h") {
        outln!("{USAGE}");
        return 0;
    }
    if a.has("e") {
        return env(a.get("g"));
    }
    ofi::init();
    if a.has("list-providers") {
        for (name, _, _) in ofi::providers() {
            outln!("{name}");
        }
        return 0;
    }
    if a.has("l") {
        for (name, ver, _) in ofi::providers() {
            outln!("{name}:\n    version: {}.{}", ver >> 16, ver & 0xffff);
        }
        return 0;
    }
    let hints = match build_hints(&a) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("ofi info: {e}");
            return 2;
        }
    };
    let flags = if a.has("s") { FI_SOURCE } else { 0 };
    match ofi::getinfo(
        FI_VERSION_CURRENT,
        a.get("n"),
        a.get("P"),
        flags,
        Some(&hints),
    ) {
        Ok(list) => {
            for i in &list {
                if a.has("v") {
                    outln!("---");
                    out!("{i}");
                } else {
                    out!("{}", i.summary());
                }
            }
            0
        }
        Err(e) => {
            // fi_info exits with the error number.
            eprintln!("fi_getinfo: -{} ({})", e.code(), e);
            e.code().clamp(1, 255)
        }
    }
}

/// Builds hints from fi_info-style options, through the typed builder
/// (the same parsers and names `ofi info` prints).
pub fn build_hints(a: &Args) -> Result<Info, String> {
    let mut h = Hints::new();
    if let Some(c) = a.get("c") {
        h = h.caps(c.parse::<Caps>().map_err(|e| e.message().to_string())?);
    }
    if let Some(m) = a.get("m") {
        h = h.mode(m.parse::<Mode>().map_err(|e| e.message().to_string())?);
    }
    if let Some(t) = a.get("t") {
        h = h.ep_type(t.parse::<EpType>().map_err(|e| e.message().to_string())?);
    }
    if let Some(f) = a.get("a") {
        h = h.addr_format(
            f.parse::<AddrFormat>()
                .map_err(|e| e.message().to_string())?,
        );
    }
    if let Some(p) = a.get("p") {
        h = h.provider(p);
    }
    if let Some(d) = a.get("d") {
        h = h.domain(d);
    }
    if let Some(f) = a.get("f") {
        h = h.fabric(f);
    }
    Ok(h.into())
}

fn env(filter: Option<&str>) -> i32 {
    ofi::init();
    for t in ofi::tunables() {
        let name = t.env_name();
        if let Some(g) = filter {
            if !name.to_ascii_lowercase().contains(&g.to_ascii_lowercase()) {
                continue;
            }
        }
        outln!("# {name}: {}", t.type_name());
        outln!("# {}", t.help);
        match t.raw() {
            Some(v) => outln!("{name} = {v} (default: {})", t.default),
            None => outln!("# {name} = {} (default)", t.default),
        }
        outln!();
    }
    0
}
