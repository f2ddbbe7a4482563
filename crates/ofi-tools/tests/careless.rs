//! Careless input to the tools: absurd sizes and counts are refused with a
//! clear message before anything is allocated or connected, and warnings
//! from loading providers reach the user on every path.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `ofi ARGS` with `env` set and FI_* cleared, killed after 30 s.
fn ofi(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ofi"));
    c.args(args).stdin(Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with("FI_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning ofi");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("waiting for ofi").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("ofi output");
    (
        status.code(),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[test]
fn info_list_shows_provider_loading_warnings() {
    let missing = "/nonexistent/libofi-nothing.so";
    let (status, out, err) = ofi(&["info", "-l"], &[("FI_PROVIDER_PATH", missing)]);
    assert_eq!(status, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("shm:"), "stdout:\n{out}");
    assert!(
        err.contains("external provider not loaded") && err.contains(missing),
        "the loading warning is lost on `ofi info -l`; stderr:\n{err}"
    );
}

/// Exit 2 with the message, quickly, without a crash or a number that is
/// not one.
fn assert_refused(args: &[&str], want: &str) {
    let (status, out, err) = ofi(args, &[]);
    assert_eq!(
        status,
        Some(2),
        "ofi {args:?} was not refused\nstdout:\n{out}\nstderr:\n{err}"
    );
    assert!(
        err.contains(want),
        "ofi {args:?}: stderr lacks {want:?}:\n{err}"
    );
    for bad in ["panicked", "memory allocation"] {
        assert!(
            !out.contains(bad) && !err.contains(bad),
            "ofi {args:?} printed {bad:?}\nstdout:\n{out}\nstderr:\n{err}"
        );
    }
    let words = out.split_whitespace().chain(err.split_whitespace());
    assert!(
        !words.into_iter().any(|w| w == "inf" || w == "NaN"),
        "ofi {args:?} printed a figure that is not a number\nstdout:\n{out}"
    );
}

#[test]
fn pingpong_refuses_a_size_no_machine_holds() {
    assert_refused(
        &["pingpong", "--local", "-p", "shm", "-S", "99999999999999"],
        "available",
    );
    assert_refused(
        &[
            "pingpong",
            "--local",
            "-p",
            "shm",
            "-S",
            "64,8g,99999999999999",
        ],
        "99999999999999",
    );
}

#[test]
fn pingpong_refuses_zero_and_absurd_iteration_counts() {
    assert_refused(&["pingpong", "--local", "-p", "shm", "-I", "0"], "-I 0");
    assert_refused(
        &["pingpong", "--local", "-p", "shm", "-I", "99999999999999"],
        "between 1 and",
    );
}

#[test]
fn bw_refuses_absurd_sizes_and_counts() {
    assert_refused(
        &["bw", "--local", "-p", "shm", "-S", "99999999999999"],
        "available",
    );
    assert_refused(&["bw", "--local", "-p", "shm", "-I", "0"], "-I 0");
}
