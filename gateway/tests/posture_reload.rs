//! SIGHUP with the posture sections: new keys and limits apply to the next requests; a file with
//! an error in them is rejected whole (reported with its path) and the old config keeps serving.

mod common;
mod posture_support;

use std::time::{Duration, Instant};

use posture_support as ps;
use serde_json::json;

fn wait_for(mut f: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn reload_swaps_keys_and_limits_and_rejects_bad_files() {
    let mock = common::start_mock();
    let base = |keys: serde_json::Value, limits: serde_json::Value| {
        ps::config(
            mock.addr,
            json!({"keys": keys, "limits": limits, "access_log": {"enabled": false}}),
        )
    };
    let cfg = base(
        json!([{"id": "old", "key_env": "GW_RELOAD_OLD"}]),
        json!({}),
    );
    let env = [("GW_RELOAD_OLD", "sk-old"), ("GW_RELOAD_NEW", "sk-new")];
    let gw = ps::start(&cfg, &env);
    let path = gw.dir.join("config.json");
    let call = |key: &str| {
        ps::post_with(
            gw.addr,
            "/v1/chat/completions",
            &[("x-api-key", key)],
            &ps::chat("gpt", "hi"),
        )
        .status
    };
    assert_eq!(call("sk-old"), 200);
    assert_eq!(call("sk-new"), 401);

    // New keys and a one-request-per-minute policy for the new key.
    let cfg = base(
        json!([{"id": "new", "key_env": "GW_RELOAD_NEW"}]),
        json!({"keys": {"new": {"requests_per_minute": 1}}}),
    );
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    gw.signal_hup();
    wait_for(|| call("sk-old") == 401, "the old key to be refused");
    assert_eq!(call("sk-new"), 200);
    assert_eq!(call("sk-new"), 429);

    // A file whose limits name an unknown key is rejected whole: the new key keeps its config.
    let bad = base(
        json!([{"id": "new", "key_env": "GW_RELOAD_NEW"}]),
        json!({"keys": {"typo": {"requests_per_minute": 1000}}}),
    );
    std::fs::write(&path, serde_json::to_vec(&bad).unwrap()).unwrap();
    gw.signal_hup();
    let mut seen = Vec::new();
    wait_for(
        || {
            seen.extend(gw.drain_stderr());
            seen.iter().any(|l| l.contains("$.limits.keys.typo"))
        },
        "the reload error with its path",
    );
    assert_eq!(
        call("sk-new"),
        429,
        "still the running config (its counters kept)"
    );
    assert_eq!(call("sk-old"), 401);
    assert_eq!(gw.terminate(), Some(0));
}
