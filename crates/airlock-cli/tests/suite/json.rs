//! `--json` (CLI-1): each command's document is the same on the local
//! data directory and against a server (one code path, the Door, over the
//! same service methods), and its top-level fields are the stable ones
//! listed here (a rename is a breaking change and must fail this test).

use std::process::Output;

use serde_json::Value;

use crate::suite::approvals::{cli as local, remote};
use crate::suite::runs::{Env, Server};
use crate::suite::support::*;

/// The JSON documents of stdout (one per line for JSON Lines).
fn docs(o: &Output, what: &str) -> Vec<Value> {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")))
        .collect()
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

#[test]
fn cli_1_json_documents_are_the_same_locally_and_remotely() {
    let env = Env::new(Who::Invoker);
    env.sh_worker("hello", "", "echo hello\necho warn >&2\n");
    let s = Server::start(&env, &[]);
    let (c, v) = s.json("POST", "/v1/workers/hello/runs", Some("{}"), &[]);
    assert_eq!(c, 201, "{v}");
    let run = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(s.wait_state(&run, &["succeeded", "failed"]), "succeeded");
    // A secret, so that the list has a row (value from stdin, never shown).
    let mut child = env
        .cmd()
        .args(["secrets", "set", "TOKEN", "--json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"s3cr3t-value\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let set = &docs(&out, "secrets set")[0];
    assert_eq!(keys(set), ["name", "version"], "{set}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("s3cr3t"));

    // (command, the stable top-level fields of its first document)
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["runs", "get", &run, "--json"],
            vec!["artifacts", "queue_position", "run"],
        ),
        (vec!["runs", "list", "--json"], vec!["next_cursor", "runs"]),
        (
            vec!["runs", "logs", &run, "--json"],
            vec!["data", "kind", "seq"],
        ),
        (vec!["runs", "actions", &run, "--json"], vec!["actions"]),
        (vec!["runs", "cancel", &run, "--json"], vec!["id", "state"]),
        (vec!["secrets", "list", "--json"], vec!["secrets"]),
        (
            vec!["approvals", "list", "--json"],
            vec!["approvals", "next_cursor"],
        ),
        (vec!["models", "list", "--json"], vec!["profiles"]),
        (vec!["stop", "--show", "--json"], vec![]),
    ];
    for (args, fields) in cases {
        let what = args.join(" ");
        let l = docs(&local(&env, &args), &format!("local {what}"));
        let r = docs(&remote(&env, &s, &args), &format!("remote {what}"));
        assert_eq!(l, r, "{what}: local and remote differ");
        assert!(!l.is_empty(), "{what}: no document");
        if !fields.is_empty() {
            assert_eq!(keys(&l[0]), fields, "{what}: {}", l[0]);
        }
    }
    // audit verify: locally every workspace of the database, remotely the
    // key's; both say so per workspace.
    let l = &docs(&local(&env, &["audit", "verify", "--json"]), "audit verify")[0];
    let r = &docs(
        &remote(&env, &s, &["audit", "verify", "--json"]),
        "audit verify",
    )[0];
    for d in [l, r] {
        let rows = d["workspaces"].as_array().unwrap();
        assert!(
            rows.iter()
                .all(|w| w["ok"] == true && w["workspace"].is_string()),
            "{d}"
        );
    }
    // The log as events: the workload's two lines, in order, by stream.
    let events = docs(&local(&env, &["runs", "logs", &run, "--json"]), "logs");
    let logs: Vec<(&str, &str)> = events
        .iter()
        .filter(|e| e["kind"] == "log")
        .map(|e| {
            (
                e["data"]["stream"].as_str().unwrap(),
                e["data"]["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        logs.contains(&("stdout", "hello\n")) && logs.contains(&("stderr", "warn\n")),
        "{logs:?}"
    );
}

#[test]
fn cli_1_worker_validate_json_names_each_problem() {
    let env = Env::new(Who::Invoker);
    env.sh_worker("fine", "", "echo ok\n");
    let out = env
        .cmd()
        .args(["worker", "validate", "--json"])
        .arg(env.workers.join("fine"))
        .output()
        .unwrap();
    let v = &docs(&out, "validate fine")[0];
    assert_eq!(v["valid"], true, "{v}");
    assert_eq!(v["id"], "fine", "{v}");
    // A manifest with an unknown field and a bad timeout: exit 1, each named.
    env.sh_worker(
        "broken",
        "[limits]\ntimeout_s = -3\nsurprise = 1\n",
        "echo ok\n",
    );
    let out = env
        .cmd()
        .args(["worker", "validate", "--json"])
        .arg(env.workers.join("broken"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["valid"], false, "{v}");
    let fields: Vec<&str> = v["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["field"].as_str().unwrap())
        .collect();
    assert!(fields.iter().any(|f| f.contains("surprise")), "{v}");
}
