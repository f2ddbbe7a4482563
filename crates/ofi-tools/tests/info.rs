//! `ofi info --list-providers`: the registered providers' names, one a
//! line, best first (what scripts loop over).

use std::process::Command;

#[test]
fn list_providers_prints_the_names_best_first() {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ofi"));
    c.args(["info", "--list-providers"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("FI_") {
            c.env_remove(k);
        }
    }
    let o = c.output().expect("running ofi");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "stdout:\n{out}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["hybrid", "shm", "tcp", "udp"],
        "stdout:\n{out}"
    );
}
