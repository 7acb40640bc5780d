//! AUD-4 with several nodes: worker processes on one PostgreSQL database
//! signing checkpoints into one shared checkpoint directory (and key
//! directory), periodically, while `airlock audit checkpoint` runs in
//! loops from several more processes and `audit verify` reads the files.

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::suite::roles::Node;
use crate::suite::runs::{Env, PgDb, Server};
use crate::suite::support::*;

/// What identifies a checkpoint: workspace, seq, head, time.
type Key = (String, u64, String, String);

fn key_of(v: &Value, ws_field: &str) -> Key {
    (
        v[ws_field].as_str().unwrap_or("").to_string(),
        v["seq"].as_u64().unwrap_or(u64::MAX),
        v["head"].as_str().unwrap_or("").to_string(),
        v["at"].as_str().unwrap_or("").to_string(),
    )
}

/// The lines of a checkpoint file that are not one whole checkpoint: a
/// torn or interleaved write shows here. Also checks the file ends with a
/// line feed.
fn broken_lines(text: &str) -> Vec<String> {
    let mut bad = Vec::new();
    if !text.is_empty() && !text.ends_with('\n') {
        bad.push("(no final line feed)".to_string());
    }
    for line in text.split_terminator('\n') {
        let ok = serde_json::from_str::<Value>(line).is_ok_and(|v| {
            v["type"] == "checkpoint"
                && v["seq"].is_u64()
                && v["head"].as_str().is_some_and(|h| h.len() == 64)
                && v["signature"].as_str().is_some_and(|s| s.len() == 128)
                && v.as_object().is_some_and(|o| o.len() == 7)
        });
        if !ok {
            bad.push(line.to_string());
        }
    }
    bad
}

/// `audit export` of `ws`, then `verify_export.py --public-key`: success,
/// and its verdict line.
fn script_verify(env: &Env, url: &str, cp_dir: &str, ws: &str, key: &str) -> (bool, String) {
    let out = env
        .cmd()
        .env("AIRLOCK_DATABASE_URL", url)
        .env("AIRLOCK_CHECKPOINT_DIR", cp_dir)
        .args(["audit", "export", "--workspace", ws])
        .output()
        .unwrap();
    assert!(out.status.success());
    let file = env.root().join("export.jsonl");
    std::fs::write(&file, &out.stdout).unwrap();
    crate::suite::audit::run_verify_export(&file, key)
}

/// Two worker nodes (checkpointing every second) and a web node on one
/// PostgreSQL database share one `--checkpoint-dir` and key directory;
/// runs created through the web node keep every chain moving while three
/// more processes each run `airlock audit checkpoint` in a loop and a
/// fourth runs `audit verify` in a loop. Afterwards every line of every
/// file is one whole signed checkpoint (none torn, none interleaved),
/// every checkpoint a command reported is in the file (as often as it was
/// reported), the
/// periodic signers added theirs, and no `audit verify` saw a torn line.
/// Lines are in the order they were appended, not by sequence: an older
/// checkpoint appended after a newer one (as a node that read the chain
/// earlier does; the test also appends one by hand, so the case is always
/// there) still verifies, with the newest by sequence used, in `audit
/// verify` and in `verify_export.py`. Controls: the line check flags a
/// half-written line; with the chain cut below the newest checkpoint but
/// above the last line's, both verifiers fail, naming the first missing
/// event — they took the highest sequence, not the last line.
fn aud_4_nodes_sharing_a_checkpoint_directory_never_tear_a_line(who: Who) {
    let Some(db) = PgDb::new() else { return };
    let env = Env::new(who);
    env.sh_worker("w", "", "echo '{}' > /airlock/output/result.json\n");
    let url = db.url();
    let cp_dir = env.root().join("shared-checkpoints");
    let cp_dir_s = cp_dir.to_str().unwrap().to_string();
    let node_env: &[(&str, &str)] = &[
        ("AIRLOCK_CHECKPOINT_DIR", &cp_dir_s),
        ("AIRLOCK_CHECKPOINT_INTERVAL_SECS", "1"),
    ];
    let nodes: Vec<Node> = (0..2)
        .map(|n| Node::worker_with(&env, &url, n, node_env))
        .collect();
    let web = Server::start_with(
        &env,
        &["serve", "--role", "web"],
        &[
            ("AIRLOCK_DATABASE_URL", &url),
            ("AIRLOCK_CHECKPOINT_DIR", &cp_dir_s),
        ],
    );
    let cli = || {
        let mut c = env.cmd();
        c.env("AIRLOCK_DATABASE_URL", &url)
            .env("AIRLOCK_CHECKPOINT_DIR", &cp_dir_s);
        c
    };
    const LOOPS: usize = 15;
    const SIGNERS: usize = 3;
    let stop = AtomicBool::new(false);
    let (reported, verifies) = std::thread::scope(|s| {
        let runs = s.spawn(|| {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let (c, v) = web.json("POST", "/v1/workers/w/runs", Some("{}"), &[]);
                assert_eq!(c, 201, "{v}");
                n += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            n
        });
        let verifier = s.spawn(|| {
            let mut outs = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let out = cli().args(["audit", "verify"]).output().unwrap();
                outs.push((
                    out.status.success(),
                    String::from_utf8_lossy(&out.stdout).into_owned()
                        + &String::from_utf8_lossy(&out.stderr),
                ));
            }
            outs
        });
        let signers: Vec<_> = (0..SIGNERS)
            .map(|_| {
                s.spawn(|| {
                    let mut made = Vec::new();
                    for _ in 0..LOOPS {
                        let out = cli()
                            .args(["audit", "checkpoint", "--json"])
                            .output()
                            .unwrap();
                        assert!(
                            out.status.success(),
                            "{}",
                            String::from_utf8_lossy(&out.stderr)
                        );
                        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
                        for m in v["checkpoints"].as_array().unwrap() {
                            if m["written"] == true {
                                made.push(key_of(m, "workspace"));
                            }
                        }
                    }
                    made
                })
            })
            .collect();
        let reported: Vec<Key> = signers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        // One more periodic pass after the last command.
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, Ordering::SeqCst);
        let runs = runs.join().unwrap();
        eprintln!("{runs} runs created while checkpointing");
        (reported, verifier.join().unwrap())
    });
    drop(web);
    drop(nodes);
    assert!(
        reported.len() >= SIGNERS * LOOPS,
        "each command signed at least one chain"
    );

    // Every line whole; every reported checkpoint there once; periodic
    // ones too.
    let mut in_files: HashMap<Key, usize> = HashMap::new();
    let mut descents = 0;
    let mut files = Vec::new();
    for e in std::fs::read_dir(&cp_dir).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let bad = broken_lines(&text);
        assert!(bad.is_empty(), "{}: broken lines {bad:?}", path.display());
        let mut high = 0;
        for line in text.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let k = key_of(&v, "workspace_id");
            if k.1 < high {
                descents += 1;
            }
            high = high.max(k.1);
            *in_files.entry(k).or_default() += 1;
        }
        files.push(path);
    }
    // Two processes signing the same head in the same millisecond make
    // the same line (Ed25519 signatures are deterministic): count them.
    let mut wanted: HashMap<&Key, usize> = HashMap::new();
    for k in &reported {
        *wanted.entry(k).or_default() += 1;
    }
    for (k, n) in wanted {
        assert!(
            in_files.get(k).copied().unwrap_or(0) >= n,
            "{k:?} reported {n} time(s), in the files {:?}",
            in_files.get(k)
        );
    }
    let total: usize = in_files.values().sum();
    assert!(
        total > reported.len(),
        "the nodes' periodic checkpoints are there too ({total} lines, {} by commands)",
        reported.len()
    );
    eprintln!(
        "{total} checkpoint lines in {} file(s), {} by commands; {descents} appended after a newer one",
        files.len(),
        reported.len()
    );
    assert!(!verifies.is_empty());
    for (ok, out) in &verifies {
        assert!(*ok, "audit verify during the appends: {out}");
        assert!(!out.contains("skipped"), "a reader saw a torn line: {out}");
    }

    // Control of the line check: half a line is flagged.
    let sample = std::fs::read_to_string(&files[0]).unwrap();
    let first = sample.lines().next().unwrap();
    assert_eq!(
        broken_lines(&format!("{}\n{}", first, &first[..first.len() / 2])).len(),
        2
    );

    // An older checkpoint appended after the newest (a slow node): the
    // newest by sequence is still the one used.
    let ws = "ws_default";
    let file = cp_dir.join(format!("{ws}.jsonl"));
    let text = std::fs::read_to_string(&file).unwrap();
    let parsed: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let max_seq = parsed
        .iter()
        .filter_map(|v| v["seq"].as_u64())
        .max()
        .unwrap();
    let (oldest_i, oldest) = parsed
        .iter()
        .enumerate()
        .min_by_key(|(_, v)| v["seq"].as_u64())
        .unwrap();
    let oldest_seq = oldest["seq"].as_u64().unwrap();
    assert!(oldest_seq + 2 < max_seq, "{oldest_seq} {max_seq}");
    let old_line = text.lines().nth(oldest_i).unwrap().to_string();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all(format!("{old_line}\n").as_bytes()).unwrap();
    }
    let out = cli().args(["audit", "verify"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with(&format!("{ws}: ok"))
            && l.contains(&format!("checkpoint seq={max_seq} "))),
        "the highest sequence is used, not the last line: {stdout}"
    );
    let key = String::from_utf8(cli().args(["audit", "public-key"]).output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    let (ok, verdict) = script_verify(&env, &url, &cp_dir_s, ws, &key);
    assert!(ok, "{verdict}");
    assert!(
        verdict.contains(&format!("checkpoint seq={max_seq} ")),
        "{verdict}"
    );

    // Control: cut the chain below the newest checkpoint but above the
    // last line's (the file holder with the database's superuser). Taking
    // the last line would pass; both verifiers refuse, naming the first
    // missing event.
    let cut = max_seq - 1;
    let sql = format!(
        "ALTER TABLE audit_events DISABLE TRIGGER USER; \
         DELETE FROM audit_events WHERE workspace_id = '{ws}' AND seq > {cut}; \
         ALTER TABLE audit_events ENABLE TRIGGER USER;"
    );
    let out = Command::new("psql")
        .args([url.as_str(), "-v", "ON_ERROR_STOP=1", "-qc", &sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli().args(["audit", "verify"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("{ws}: bad seq {max_seq}")),
        "{stdout}"
    );
    let (ok, verdict) = script_verify(&env, &url, &cp_dir_s, ws, &key);
    assert!(!ok, "{verdict}");
    assert!(verdict.contains(&format!("{max_seq}")), "{verdict}");
}

#[test]
fn aud_4_nodes_sharing_a_checkpoint_directory_never_tear_a_line_as_invoker() {
    aud_4_nodes_sharing_a_checkpoint_directory_never_tear_a_line(Who::Invoker);
}
