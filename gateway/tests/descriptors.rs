//! The descriptor limit at start (issue 29, goal 3): the gateway raises its soft `RLIMIT_NOFILE`
//! to the hard limit, and says so plainly when the hard limit is below what `max_connections`
//! needs (a client and an upstream connection per stream).

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// Starts the gateway under the descriptor limits `(soft, hard)` and returns the soft limit it
/// runs with (from `/proc/PID/limits`) and its stderr up to `listening on`.
fn start_under(soft: u64, hard: u64, max_connections: u64) -> (u64, Vec<String>) {
    let dir = tmpdir("nofile");
    let path = dir.join("config.json");
    let cfg = json!({
        "listen": "127.0.0.1:0",
        "workers": 1,
        "max_connections": max_connections,
        "providers": {"up": {"kind": "openai", "base_url": "http://127.0.0.1:9", "api_key_env": "GW_TEST_OPENAI_KEY"}},
        "models": {"gpt": {"provider": "up", "model": "m"}}
    });
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let mut cmd = Command::new(gateway_bin());
    cmd.arg("--config")
        .arg(&path)
        .env("GW_TEST_OPENAI_KEY", "k")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("start gateway");
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("gateway never said listening");
        let done = line.starts_with("listening on ");
        lines.push(line);
        if done {
            break;
        }
    }
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let row = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    let now: u64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    (now, lines)
}

fn hard_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_max
}

#[test]
fn soft_descriptor_limit_is_raised_to_the_hard_one() {
    let hard = hard_limit().min(4096);
    assert!(
        hard > 256,
        "this test needs a hard descriptor limit above 256"
    );
    // max_connections 64 needs 2 x 64 + 64 = 192 descriptors: no warning.
    let (now, lines) = start_under(256, hard, 64);
    assert_eq!(now, hard, "stderr: {lines:#?}");
    let said = format!("descriptor limit: raised from 256 to {hard}");
    assert!(
        lines.iter().any(|l| l.contains(&said)),
        "stderr: {lines:#?}"
    );
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("warning: descriptor limit")),
        "stderr: {lines:#?}"
    );
}

#[test]
fn a_hard_limit_below_what_max_connections_needs_is_said_plainly() {
    // max_connections 1,000 needs 2 x 1,000 + 64 = 2,064 descriptors.
    let (now, lines) = start_under(200, 200, 1000);
    assert_eq!(now, 200);
    let warning = lines
        .iter()
        .find(|l| l.contains("warning: descriptor limit 200 is below the 2064"))
        .unwrap_or_else(|| panic!("no warning; stderr: {lines:#?}"));
    assert!(warning.contains("max_connections 1000"), "{warning}");
}
