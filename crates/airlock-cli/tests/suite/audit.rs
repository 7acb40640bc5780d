//! AUD-3, AUD-4: the audit attack matrix through the real binary. An
//! attacker holds the SQLite file (drops the append-only triggers, then
//! edits, deletes, reorders, inserts, cuts the tail, or rewrites the chain
//! from an edit onwards with every later hash recomputed); signed
//! checkpoints kept outside the database catch what the chain alone cannot.
//! For every case `airlock audit verify` and the standalone verifier
//! (`verify_export.py --public-key`, on `airlock audit export`) agree.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::suite::runs::{Env, Server};
use crate::suite::support::*;

fn verify_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../airlock-audit/verify_export.py")
}

/// An env with a few runs' worth of events in `ws_default` and one signed
/// checkpoint of them; its number of events and public key.
fn env_with_checkpoint() -> (Env, u64, String) {
    let env = Env::new(Who::Invoker);
    env.sh_worker("quick", "", "echo '{}' > /airlock/output/result.json\n");
    for _ in 0..3 {
        let (v, _, e) = env.run_json(&["quick"]);
        assert_eq!(v["run"]["state"], "succeeded", "{v} {e}");
    }
    let out = env
        .cmd()
        .args(["audit", "checkpoint", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cp = made["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["workspace"] == "ws_default")
        .unwrap()
        .clone();
    assert_eq!(cp["written"], true, "{made}");
    let n = cp["seq"].as_u64().unwrap();
    assert!(n >= 9, "{made}");
    let out = env.cmd().args(["audit", "public-key"]).output().unwrap();
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(key.len(), 64, "{key}");
    // The signing key is in the key directory, 0600, never in the database.
    let meta = std::fs::metadata(env.data.join("keys/audit-signing.key")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o600
    );
    (env, n, key)
}

/// A copy of the env's database, its triggers dropped and `sql` applied
/// (Python's sqlite3: what anyone holding the file can do).
fn tampered_copy(env: &Env, name: &str, sql: &str) -> PathBuf {
    let copy = env.data.join(format!("copy-{name}.db"));
    std::fs::copy(env.data.join("airlock.db"), &copy).unwrap();
    let _ = std::fs::copy(
        env.data.join("airlock.db-wal"),
        env.data.join(format!("copy-{name}.db-wal")),
    );
    let script = format!(
        "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nc.execute('DROP TRIGGER audit_events_no_update')\nc.execute('DROP TRIGGER audit_events_no_delete')\n{sql}\nc.commit()\n"
    );
    let st = Command::new("/usr/bin/python3")
        .args(["-c", &script, copy.to_str().unwrap()])
        .env("PYTHONPATH", verify_script().parent().unwrap())
        .status()
        .unwrap();
    assert!(st.success(), "{name}");
    copy
}

/// What `airlock audit verify` says about ws_default of `db`: success, its
/// line, stderr.
fn airlock_verify(env: &Env, db: &Path, extra: &[&str]) -> (bool, String, String) {
    let out = env
        .cmd()
        .args(["--database-url", &format!("sqlite://{}", db.display())])
        .args(extra)
        .args(["audit", "verify"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .filter(|l| l.starts_with("ws_default: "))
        .collect::<Vec<_>>()
        .join("\n");
    (
        out.status.success(),
        line,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `airlock audit export` of `db`, checked by the standalone verifier
/// with the public key: success and its line.
fn script_verify(env: &Env, db: &Path, extra: &[&str], key: &str) -> (bool, String) {
    let out = env
        .cmd()
        .args(["--database-url", &format!("sqlite://{}", db.display())])
        .args(extra)
        .args(["audit", "export"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let file = db.with_extension("jsonl");
    std::fs::write(&file, &out.stdout).unwrap();
    run_verify_export(&file, key)
}

/// `verify_export.py --public-key KEY FILE`: success, and its verdict line.
/// `cryptography` checks the signatures: the system's, or the pinned copy
/// scripts/test installs when there is none.
pub(crate) fn run_verify_export(file: &Path, key: &str) -> (bool, String) {
    let pydeps = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pydeps-crypto");
    let mut pythonpath = std::env::var_os("PYTHONPATH").unwrap_or_default();
    if pydeps.is_dir() {
        let mut p = pydeps.into_os_string();
        if !pythonpath.is_empty() {
            p.push(":");
            p.push(&pythonpath);
        }
        pythonpath = p;
    }
    let out = Command::new("python3")
        .arg(verify_script())
        .args(["--public-key", key])
        .arg(file)
        .env("PYTHONPATH", pythonpath)
        .output()
        .unwrap();
    assert_ne!(
        out.status.code(),
        Some(2),
        "verify_export.py could not run (scripts/test installs `cryptography`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

/// The sequence number a verdict names ("bad seq N…"), if any.
fn bad_seq(line: &str) -> Option<u64> {
    let rest = line.split("bad seq ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Python that rewrites ws_default's chain from event `from` onwards: the
/// event's `event_type` changed, every later hash recomputed with the
/// published algorithm, rows updated. Nothing in the database shows it.
fn rewrite_from(from: u64) -> String {
    format!(
        r#"import json, hashlib, verify_export as ve
rows = c.execute("SELECT seq, line FROM audit_events WHERE workspace_id='ws_default' ORDER BY seq").fetchall()
prev = None
for seq, line in rows:
    o = json.loads(line)
    if seq < {from}:
        prev = bytes.fromhex(o["hash"]); continue
    if seq == {from}:
        o["event_type"] = "run.rewritten"
    o.pop("hash"); o.pop("prev_hash")
    h = hashlib.sha256(ve.DOMAIN + prev + ve.canonical_bytes(o)).digest()
    o["prev_hash"] = prev.hex(); o["hash"] = h.hex()
    c.execute("UPDATE audit_events SET line=?, hash=? WHERE workspace_id='ws_default' AND seq=?", (ve.jcs(o), h.hex(), seq))
    prev = h"#
    )
}

#[test]
fn aud_4_checkpoints_catch_tail_truncation_and_rewrites_and_both_verifiers_agree() {
    let (env, n, key) = env_with_checkpoint();
    let no_checkpoints = env.root().join("no-checkpoints");
    std::fs::create_dir_all(&no_checkpoints).unwrap();
    let none = ["--checkpoint-dir", no_checkpoints.to_str().unwrap()];

    // (name, python run on the copy, first bad seq with the checkpoint,
    //  whether the chain alone — no checkpoint — catches it)
    let ws = "workspace_id='ws_default'";
    let cases: Vec<(&str, String, Option<u64>, bool)> = vec![
        ("untouched", String::new(), None, false),
        (
            "edit",
            format!(
                "c.execute(\"UPDATE audit_events SET line = replace(line, '\\\"run.claimed\\\"', '\\\"run.claimeD\\\"') WHERE {ws} AND seq = 2\")"
            ),
            Some(2),
            true,
        ),
        (
            "delete",
            format!("c.execute(\"DELETE FROM audit_events WHERE {ws} AND seq = 4\")"),
            Some(4),
            true,
        ),
        (
            "reorder",
            format!(
                "c.executescript(\"UPDATE audit_events SET seq = -1 WHERE {ws} AND seq = 5; UPDATE audit_events SET seq = 5 WHERE {ws} AND seq = 6; UPDATE audit_events SET seq = 6 WHERE {ws} AND seq = -1\")"
            ),
            Some(5),
            true,
        ),
        (
            "insert",
            format!(
                "c.execute(\"INSERT INTO audit_events (workspace_id, seq, line, hash) SELECT workspace_id, {}, line, hash FROM audit_events WHERE {ws} AND seq = 3\")",
                n + 1
            ),
            Some(3),
            true,
        ),
        (
            "tail truncation",
            format!(
                "c.execute(\"DELETE FROM audit_events WHERE {ws} AND seq > {}\")",
                n - 2
            ),
            Some(n - 1),
            false,
        ),
        (
            "everything deleted",
            format!("c.execute(\"DELETE FROM audit_events WHERE {ws}\")"),
            Some(1),
            false,
        ),
        (
            "rewrite from an edit onwards",
            rewrite_from(3),
            Some(n),
            false,
        ),
    ];
    for (name, sql, expect, chain_alone) in cases {
        let db = tampered_copy(&env, &name.replace(' ', "-"), &sql);
        let (ok, line, stderr) = airlock_verify(&env, &db, &[]);
        let (py_ok, py_line) = script_verify(&env, &db, &[], &key);
        match expect {
            None => {
                assert!(
                    ok && line.contains(&format!("checkpoint seq={n}")),
                    "{name}: {line} {stderr}"
                );
                assert!(
                    py_ok && py_line.contains(&format!("checkpoint seq={n}")),
                    "{name}: {py_line}"
                );
            }
            Some(seq) => {
                assert!(!ok, "{name} not caught: {line}");
                assert_eq!(bad_seq(&line), Some(seq), "{name}: {line}");
                assert!(!py_ok, "{name} not caught by the script: {py_line}");
                assert_eq!(bad_seq(&py_line), Some(seq), "{name}: {py_line}");
            }
        }
        // Without a checkpoint the same copy: caught by the chain alone, or
        // (the positive control for what only checkpoints catch) passed,
        // with a warning that nothing pins the tail.
        let (ok, line, stderr) = airlock_verify(&env, &db, &none);
        let (py_ok, py_line) = script_verify(&env, &db, &none, &key);
        if expect.is_none() || !chain_alone {
            if name != "everything deleted" {
                assert!(ok, "{name} without a checkpoint: {line}");
                assert!(stderr.contains("no signed checkpoint"), "{name}: {stderr}");
                assert!(line.contains("no checkpoint"), "{name}: {line}");
                assert!(
                    py_ok && py_line.contains("(no checkpoint)"),
                    "{name}: {py_line}"
                );
            }
        } else {
            assert!(!ok && !py_ok, "{name}: {line} / {py_line}");
            assert_eq!(bad_seq(&line), bad_seq(&py_line), "{name}");
        }
    }
}

#[test]
fn aud_4_a_forged_checkpoint_is_refused_and_a_torn_line_is_tolerated() {
    let (env, n, key) = env_with_checkpoint();
    let db = env.data.join("airlock.db");
    let real = env.data.join("keys/checkpoints/ws_default.jsonl");
    let good = std::fs::read_to_string(&real).unwrap();
    assert_eq!(good.lines().count(), 1);

    // Control: the real checkpoint directory verifies with both.
    let (ok, line, _) = airlock_verify(&env, &db, &[]);
    assert!(
        ok && line.contains(&format!("checkpoint seq={n}")),
        "{line}"
    );
    assert!(script_verify(&env, &db, &[], &key).0);

    // A forged line: the real one with its head changed (not re-signed).
    let forged_dir = env.root().join("forged");
    std::fs::create_dir_all(&forged_dir).unwrap();
    let mut cp: serde_json::Value = serde_json::from_str(good.trim()).unwrap();
    cp["head"] = serde_json::Value::String("ab".repeat(32));
    std::fs::write(forged_dir.join("ws_default.jsonl"), format!("{good}{cp}\n")).unwrap();
    let dir = ["--checkpoint-dir", forged_dir.to_str().unwrap()];
    let (ok, line, _) = airlock_verify(&env, &db, &dir);
    assert!(!ok, "forged checkpoint accepted: {line}");
    assert!(
        line.contains("bad checkpoint")
            && line.contains("line 2")
            && line.contains("does not verify"),
        "{line}"
    );
    let (py_ok, py_line) = script_verify(&env, &db, &dir, &key);
    assert!(
        !py_ok && py_line.contains("bad checkpoint line") && py_line.contains("does not verify"),
        "{py_line}"
    );
    // Signed with another key (the database holder's own): refused too.
    let other = env.root().join("other-keys");
    let out = env
        .cmd()
        .args(["--key-dir", other.to_str().unwrap(), "audit", "public-key"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let other_key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_ne!(other_key, key);
    let out = env
        .cmd()
        .args(["--key-dir", other.to_str().unwrap(), "audit", "checkpoint"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let other_dir = other.join("checkpoints");
    let odir = ["--checkpoint-dir", other_dir.to_str().unwrap()];
    let (ok, line, _) = airlock_verify(&env, &db, &odir);
    assert!(!ok && line.contains("bad checkpoint"), "{line}");
    assert!(!script_verify(&env, &db, &odir, &key).0);
    // …and the same directory verifies with the key that signed it
    // (control: the refusal is about the key).
    let out = env
        .cmd()
        .args(["--database-url", &format!("sqlite://{}", db.display())])
        .args(odir)
        .args(["audit", "verify", "--public-key", &other_key])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A torn last line (a crash mid-append): skipped with a warning.
    let torn_dir = env.root().join("torn");
    std::fs::create_dir_all(&torn_dir).unwrap();
    let torn = format!("{good}{}", &good[..good.len() / 2]);
    std::fs::write(torn_dir.join("ws_default.jsonl"), &torn).unwrap();
    let dir = ["--checkpoint-dir", torn_dir.to_str().unwrap()];
    let (ok, line, stderr) = airlock_verify(&env, &db, &dir);
    assert!(
        ok && line.contains(&format!("checkpoint seq={n}")),
        "{line} {stderr}"
    );
    assert!(stderr.contains("skipped 1 checkpoint line"), "{stderr}");
    assert!(script_verify(&env, &db, &dir, &key).0);
    // The next checkpoint starts on a line of its own and is used.
    env.run_json(&["quick"]);
    let out = env
        .cmd()
        .args(dir)
        .args(["audit", "checkpoint", "--if-moved"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(torn_dir.join("ws_default.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    let (ok, line, _) = airlock_verify(&env, &db, &dir);
    assert!(
        ok && !line.contains(&format!("checkpoint seq={n} ")),
        "{line}"
    );
    assert!(script_verify(&env, &db, &dir, &key).0);
}

/// The chain's length and the checkpoint `GET /v1/audit/verify` used.
fn server_verify(server: &Server) -> (u64, Option<u64>) {
    let (c, v) = server.json("GET", "/v1/audit/verify", None, &[]);
    assert_eq!(c, 200, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    (
        v["events"].as_u64().unwrap(),
        v["checkpoint"]["seq"].as_u64(),
    )
}

fn run_one(server: &Server) {
    let (c, v) = server.json("POST", "/v1/workers/quick/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        server.wait_state(&id, &["succeeded", "failed"]),
        "succeeded"
    );
}

#[test]
fn aud_4_airlock_up_signs_checkpoints_periodically_and_at_a_clean_shutdown() {
    let env = Env::new(Who::Invoker);
    env.sh_worker("quick", "", "echo '{}' > /airlock/output/result.json\n");

    // Periodically: every second while the head moves.
    let mut server = Server::start(&env, &[("AIRLOCK_CHECKPOINT_INTERVAL_SECS", "1")]);
    run_one(&server);
    let deadline = Instant::now() + Duration::from_secs(60);
    let n = loop {
        let (events, checkpoint) = server_verify(&server);
        if checkpoint == Some(events) {
            break events;
        }
        assert!(
            Instant::now() < deadline,
            "no periodic checkpoint covers {events} events"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The export ends with the checkpoints, which the script checks.
    let (c, text) = server.request("GET", "/v1/audit/export", None, &[]);
    assert_eq!(c, 200);
    let last = text.lines().last().unwrap();
    assert!(
        last.contains("\"type\":\"checkpoint\"") && last.contains(&format!("\"seq\":{n},")),
        "{last}"
    );
    server.kill9();

    // At a clean shutdown, with the periodic checkpoints off.
    let mut server = Server::start(&env, &[("AIRLOCK_CHECKPOINT_INTERVAL_SECS", "0")]);
    run_one(&server);
    let (events, checkpoint) = server_verify(&server);
    assert!(events > n, "{events}");
    assert_eq!(
        checkpoint,
        Some(n),
        "control: no checkpoint was made while running"
    );
    let st = Command::new("kill")
        .args(["-TERM", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(
        server.wait_exit(Duration::from_secs(60)),
        "airlock up did not stop"
    );
    assert!(
        server.log_text().contains("\"event\":\"checkpoint\""),
        "{}",
        server.log_text()
    );
    let out = env
        .cmd()
        .args(["audit", "verify", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ws = v["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workspace"] == "ws_default")
        .unwrap();
    assert_eq!(ws["events"].as_u64(), Some(events), "{v}");
    assert_eq!(ws["checkpoint"]["seq"].as_u64(), Some(events), "{v}");

    // The tail cut under a running server: its next pass refuses to sign
    // and says so; nothing is appended.
    let server = Server::start(&env, &[("AIRLOCK_CHECKPOINT_INTERVAL_SECS", "1")]);
    let file = env.data.join("keys/checkpoints/ws_default.jsonl");
    let before = std::fs::read_to_string(&file).unwrap();
    let script = format!(
        "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nc.execute('DROP TRIGGER audit_events_no_delete')\nc.execute(\"DELETE FROM audit_events WHERE workspace_id='ws_default' AND seq > {}\")\nc.commit()\n",
        events - 2
    );
    let st = Command::new("/usr/bin/python3")
        .args(["-c", &script, env.data.join("airlock.db").to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server
        .log_text()
        .contains("\"event\":\"checkpoint_failed\"")
    {
        assert!(
            Instant::now() < deadline,
            "no refusal: {}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        server.log_text().contains("refusing to sign"),
        "{}",
        server.log_text()
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);
    let (c, v) = server.json("GET", "/v1/audit/verify", None, &[]);
    assert_eq!(c, 200);
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["first_bad_seq"].as_u64(), Some(events - 1), "{v}");
}
