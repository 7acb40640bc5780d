//! The vault end to end (KEY-1 … KEY-6): secrets go in through stdin, reach
//! exactly the runs that declare them, and leave no trace in the database,
//! the artifact store or the run record.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::both_users;
use crate::suite::runs::{Env, Server, contains};
use crate::suite::support::*;

const VALUE: &str = "tok-5e3c1a9d7b2f4e6a8c0d";

const LEAKY: &str = "t=$(cat /run/secrets/API_TOKEN)\necho \"stdout $t\"\necho \"stderr $t\" >&2\necho \"file $t\" > /airlock/output/leak.txt\nprintf '{\"echo\": \"%s\", \"digest\": \"%s\"}' \"$t\" \"$(printf %s \"$t\" | sha256sum | cut -c1-64)\" > /airlock/output/result.json\necho \"failing with $t\" >&2\nexit 3\n";

fn key_6_a_secret_printed_everywhere_is_stored_nowhere(who: Who) {
    let env = Env::new(who);
    env.sh_worker("leaky", "[secrets]\nnames = [\"API_TOKEN\"]\n[outputs.echo]\ntype = \"string\"\n[outputs.digest]\ntype = \"string\"\n", LEAKY);
    assert_eq!(env.set("API_TOKEN", VALUE.as_bytes()).0, 0);
    let v = env.run("leaky");
    assert_eq!(v["run"]["state"], "failed", "{v}");
    // Positive control: the workload really had the value (its digest is right).
    let digest = {
        use std::process::Command;
        let o = Command::new("sh")
            .args([
                "-c",
                &format!("printf %s '{VALUE}' | sha256sum | cut -c1-64"),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    assert_eq!(v["run"]["outputs"]["digest"], digest.as_str());
    assert_eq!(v["run"]["outputs"]["echo"], "[REDACTED]");
    let id = v["run"]["id"].as_str().unwrap();
    let logs = env.cmd().args(["runs", "logs", id]).output().unwrap();
    let logs = String::from_utf8_lossy(&logs.stdout);
    assert!(
        logs.contains("stdout [REDACTED]") && logs.contains("stderr [REDACTED]"),
        "{logs}"
    );
    let leak = v["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "leak.txt")
        .unwrap();
    let blob = std::fs::read(
        env.data
            .join("artifacts/sha256")
            .join(&leak["digest"].as_str().unwrap()[..2])
            .join(leak["digest"].as_str().unwrap()),
    )
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&blob), "file [REDACTED]\n");
    // Sentinel scan: no stored byte anywhere (database, WAL, artifacts) holds the value.
    let stored = env.stored_bytes();
    assert!(
        !contains(&stored, VALUE.as_bytes()),
        "the value reached storage"
    );
    assert!(
        contains(&stored, b"[REDACTED]"),
        "positive control: the scan sees stored run data"
    );
}
both_users!(key_6_a_secret_printed_everywhere_is_stored_nowhere);

fn key_5_a_declared_but_unset_secret_blocks_the_run_naming_it(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "needs",
        "[secrets]\nnames = [\"MISSING_ONE\"]\n",
        "echo '{}' > /airlock/output/result.json\n",
    );
    let v = env.run("needs");
    assert_eq!(v["run"]["state"], "blocked", "{v}");
    assert_eq!(v["run"]["error_code"], "secret_missing");
    assert!(
        v["run"]["error_message"]
            .as_str()
            .unwrap()
            .contains("MISSING_ONE")
    );
    assert_eq!(v["run"]["workload_started"], false);
    // Positive control: once set, the same worker runs.
    assert_eq!(env.set("MISSING_ONE", b"some-value-123456").0, 0);
    assert_eq!(env.run("needs")["run"]["state"], "succeeded");
}
both_users!(key_5_a_declared_but_unset_secret_blocks_the_run_naming_it);

fn key_5_env_delivery_and_undeclared_secrets_are_absent(who: Who) {
    let env = Env::new(who);
    assert_eq!(env.set("DECLARED_ONE", b"declared-value-42").0, 0);
    assert_eq!(env.set("OTHER_ONE", b"other-value-4242").0, 0);
    env.sh_worker(
        "envy",
        "[secrets]\nnames = [\"DECLARED_ONE\"]\ndelivery = \"env\"\n[outputs.ok]\ntype = \"boolean\"\n",
        "[ \"$DECLARED_ONE\" = declared-value-42 ] && [ -z \"${OTHER_ONE:-}\" ] && [ ! -e /run/secrets ] && echo '{\"ok\": true}' > /airlock/output/result.json\n",
    );
    let v = env.run("envy");
    assert_eq!(v["run"]["state"], "succeeded", "{v}");
}
both_users!(key_5_env_delivery_and_undeclared_secrets_are_absent);

fn key_4_bad_names_and_values_are_refused_and_nothing_is_written(who: Who) {
    let env = Env::new(who);
    let long = "A".repeat(65);
    for (name, value, code) in [
        ("lowercase", &b"v-123456789"[..], "secret_invalid"),
        (long.as_str(), b"v-123456789", "secret_invalid"),
        ("AIRLOCK_X", b"v-123456789", ""),
        ("DATABASE_URL", b"v-123456789", "secret_forbidden"),
        ("GOOD_NAME", b"with\0nul", "secret_invalid"),
    ] {
        let (rc, err) = env.set(name, value);
        assert_eq!(rc, 125, "{name}: {err}");
        assert!(err.contains(code), "{name}: {err}");
    }
    let (rc, err) = env.set("GOOD_NAME", &vec![b'x'; 1 << 20]);
    assert_eq!(rc, 125, "{err}");
    let list = env
        .cmd()
        .args(["secrets", "list", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(
        v["secrets"],
        serde_json::json!([]),
        "nothing partially written"
    );
}
both_users!(key_4_bad_names_and_values_are_refused_and_nothing_is_written);

fn sqlite(db: &Path, sql: &str) {
    let script = format!(
        "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nc.executescript(\"\"\"{sql}\"\"\")\nc.commit()\n"
    );
    assert!(
        Command::new("/usr/bin/python3")
            .args(["-c", &script, db.to_str().unwrap()])
            .status()
            .unwrap()
            .success()
    );
}

fn sqlite_get(db: &Path, sql: &str) -> String {
    let script = format!(
        "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nprint(c.execute(\"\"\"{sql}\"\"\").fetchone()[0])\n"
    );
    let o = Command::new("/usr/bin/python3")
        .args(["-c", &script, db.to_str().unwrap()])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn key_3_rolled_back_secret_rows_are_refused(who: Who) {
    let env = Env::new(who);
    env.sh_worker(
        "reader",
        "[secrets]\nnames = [\"ROTATING\"]\n",
        "echo '{}' > /airlock/output/result.json\n",
    );
    assert_eq!(env.set("ROTATING", b"first-value-0123456").0, 0);
    let db = env.data.join("airlock.db");
    let old_sealed = sqlite_get(&db, "SELECT sealed FROM secrets WHERE name = 'ROTATING'");
    assert_eq!(env.set("ROTATING", b"second-value-0123456").0, 0);
    assert_eq!(
        env.run("reader")["run"]["state"],
        "succeeded",
        "positive control"
    );
    // UPDATE back to the old row.
    sqlite(
        &db,
        &format!("UPDATE secrets SET version = 1, sealed = '{old_sealed}' WHERE name = 'ROTATING'"),
    );
    let v = env.run("reader");
    assert_eq!(
        (v["run"]["state"].as_str(), v["run"]["error_code"].as_str()),
        (Some("blocked"), Some("secret_rollback")),
        "{v}"
    );
    // DELETE + INSERT of the old bytes.
    sqlite(
        &db,
        &format!(
            "DELETE FROM secrets WHERE name = 'ROTATING'; INSERT INTO secrets (workspace_id, name, version, sealed, updated_at) VALUES ('ws_default', 'ROTATING', 1, '{old_sealed}', 0)"
        ),
    );
    let v = env.run("reader");
    assert_eq!(v["run"]["error_code"], "secret_rollback", "{v}");
}
both_users!(key_3_rolled_back_secret_rows_are_refused);

fn key_3_a_restored_old_database_is_refused_at_start_until_accepted(who: Who) {
    let env = Env::new(who);
    assert_eq!(env.set("KEEP", b"value-one-0123456789").0, 0);
    let db = env.data.join("airlock.db");
    // Checkpoint the WAL so the file copy is the whole database.
    sqlite(&db, "PRAGMA wal_checkpoint(TRUNCATE)");
    let backup = env.data.join("backup.db");
    std::fs::copy(&db, &backup).unwrap();
    assert_eq!(env.set("KEEP", b"value-two-0123456789").0, 0);
    sqlite(&db, "PRAGMA wal_checkpoint(TRUNCATE)");
    std::fs::copy(&backup, &db).unwrap();
    let _ = std::fs::remove_file(env.data.join("airlock.db-wal"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let up = env
        .cmd()
        .args(["up", "--listen", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert_eq!(
        up.status.code(),
        Some(125),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    assert!(
        String::from_utf8_lossy(&up.stderr).contains("accept-restore"),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    // The operator's recovery path, audited.
    let ok = env.cmd().args(["keys", "accept-restore"]).output().unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let audit = env.cmd().args(["audit", "verify"]).output().unwrap();
    assert!(audit.status.success());
    let lines = sqlite_get(
        &db,
        "SELECT COUNT(*) FROM audit_events WHERE line LIKE '%vault.restore_accepted%'",
    );
    assert_eq!(lines, "1");
}
both_users!(key_3_a_restored_old_database_is_refused_at_start_until_accepted);

/// KEY-1, KEY-2: the KEK stays in the key directory. Scanned for every KEK
/// version in raw, hex and base64 form: the database files (with WAL), the
/// artifact store, everything the CLI printed, and the stdout and stderr of
/// an `airlock up` that stored a secret, ran a worker reading it and gave a
/// channel its credential from the vault. (Under `airlock up` egress
/// decisions are not written to a log file; `sandbox exec --egress-log`
/// never loads a KEK.)
fn key_1_loose_key_directory_permissions_are_refused_and_the_kek_is_stored_nowhere(who: Who) {
    let env = Env::new(who);
    let mut printed = Vec::new();
    let mut run = |args: &[&str]| {
        let out = env.cmd().args(args).output().unwrap();
        printed.extend(&out.stdout);
        printed.extend(&out.stderr);
        out
    };
    assert_eq!(env.set("SOME_SECRET", b"secret-value-987654").0, 0);
    // Rotation and rewrap: old data stays readable.
    assert!(run(&["keys", "rotate"]).status.success());
    assert!(run(&["keys", "rewrap"]).status.success());
    // The KEKs of both versions, read before the first is retired.
    let keks = env.kek_forms();
    assert_eq!(keks.len(), 8, "two versions, four forms each");
    // Everything moved, so the old version can be retired.
    let retired = run(&["keys", "retire", "1"]);
    assert!(
        retired.status.success(),
        "{}",
        String::from_utf8_lossy(&retired.stderr)
    );
    env.sh_worker("reads", "[secrets]\nnames = [\"SOME_SECRET\"]\n", "[ \"$(cat /run/secrets/SOME_SECRET)\" = secret-value-987654 ] && echo '{}' > /airlock/output/result.json\n");
    let v = run(&["run", "reads", "--json"]);
    let v: Value = serde_json::from_slice(&v.stdout).unwrap_or(Value::Null);
    assert_eq!(v["run"]["state"], "succeeded", "{v}");

    // A server: a secret over HTTP, a run that reads one, and a channel
    // whose credential comes from the vault.
    let up = crate::suite::upstream::start();
    let policy = env.root().join("egress.toml");
    std::fs::write(
        &policy,
        format!("[channels.model]\nupstream = \"http://127.0.0.1:{}\"\nheader = \"Authorization\"\nvalue = \"Bearer ${{secret:MODEL_KEY}}\"\nmethods = [\"POST\"]\npaths = [\"/v1/\"]\ninsecure_upstream_for_tests = true\n", up.port),
    )
    .unwrap();
    env.sh_worker(
        "caller",
        "[egress]\nchannels = [\"model\"]\n",
        "python3 -c \"import os,urllib.request as u; u.urlopen(u.Request(os.environ['AIRLOCK_CHANNEL_MODEL_URL']+'/v1/chat/completions', data=b'{}', method='POST'))\" && echo '{}' > /airlock/output/result.json\n",
    );
    {
        let policy = policy.to_str().unwrap();
        let s = Server::start(&env, &[("AIRLOCK_EGRESS_POLICY", policy)]);
        let (c, v) = s.json(
            "PUT",
            "/v1/secrets/MODEL_KEY",
            Some(&format!(r#"{{"value": "{VALUE}"}}"#)),
            &[],
        );
        assert_eq!(c, 200, "{v}");
        for worker in ["reads", "caller"] {
            let (c, v) = s.json(
                "POST",
                &format!("/v1/workers/{worker}/runs"),
                Some("{}"),
                &[],
            );
            assert_eq!(c, 201, "{v}");
            let id = v["run"]["id"].as_str().unwrap().to_string();
            assert_eq!(
                s.wait_state(&id, &["succeeded", "failed", "blocked"]),
                "succeeded",
                "{worker}"
            );
        }
    }
    assert_eq!(
        up.requests()[0].header("authorization"),
        Some(format!("Bearer {VALUE}").as_str()),
        "the channel got its credential from the vault"
    );

    let stored = env.stored_bytes();
    let logs = env.server_logs();
    for (form, needle) in &keks {
        assert!(
            !contains(&stored, needle),
            "the KEK ({form}) reached the database or artifacts"
        );
        assert!(
            !contains(&logs, needle),
            "the KEK ({form}) reached the server's log"
        );
        assert!(
            !contains(&printed, needle),
            "the KEK ({form}) was printed by the CLI"
        );
    }
    // Positive controls: the scans read real data: the stored bytes hold the
    // secrets' rows, the log the server's request lines, the CLI's output
    // the run it printed.
    assert!(
        contains(&stored, b"SOME_SECRET"),
        "stored bytes hold the secrets' rows"
    );
    assert!(
        contains(&logs, b"/v1/secrets/MODEL_KEY"),
        "the server log was captured"
    );
    assert!(
        contains(&printed, b"succeeded"),
        "the CLI's output was captured"
    );

    // A key directory anyone can read is refused.
    std::fs::set_permissions(
        env.data.join("keys"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = env.cmd().args(["secrets", "list"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("keys"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
both_users!(key_1_loose_key_directory_permissions_are_refused_and_the_kek_is_stored_nowhere);

fn key_6_a_low_entropy_secret_is_named_in_a_warning_never_shown(who: Who) {
    let env = Env::new(who);
    assert_eq!(env.set("WEAK_ONE", b"aaaa").0, 0);
    env.sh_worker(
        "weak",
        "[secrets]\nnames = [\"WEAK_ONE\"]\n",
        "echo '{}' > /airlock/output/result.json\n",
    );
    let v = env.run("weak");
    let id = v["run"]["id"].as_str().unwrap();
    let db = env.data.join("airlock.db");
    let warnings = sqlite_get(
        &db,
        &format!(
            "SELECT group_concat(data, '|') FROM run_events WHERE run_id = '{id}' AND kind = 'warning'"
        ),
    );
    assert!(warnings.contains("WEAK_ONE"), "{warnings}");
    assert!(
        !warnings.contains("aaaa"),
        "the warning must not show the value: {warnings}"
    );
}
both_users!(key_6_a_low_entropy_secret_is_named_in_a_warning_never_shown);

fn key_5_channel_credentials_come_from_the_vault_and_are_never_delivered(who: Who) {
    let env = Env::new(who);
    let up = crate::suite::upstream::start();
    let policy = env.data.parent().unwrap().join("egress.toml");
    std::fs::write(
        &policy,
        format!("[channels.model]\nupstream = \"http://127.0.0.1:{}\"\nheader = \"Authorization\"\nvalue = \"Bearer ${{secret:MODEL_KEY}}\"\nmethods = [\"POST\"]\npaths = [\"/v1/\"]\ninsecure_upstream_for_tests = true\n", up.port),
    )
    .unwrap();
    assert_eq!(env.set("MODEL_KEY", VALUE.as_bytes()).0, 0);
    env.sh_worker(
        "caller",
        "[egress]\nchannels = [\"model\"]\n[outputs.status]\ntype = \"number\"\n",
        "python3 -c \"import os,json,urllib.request as u; r=u.urlopen(u.Request(os.environ['AIRLOCK_CHANNEL_MODEL_URL']+'/v1/chat/completions', data=b'{}', method='POST')); json.dump({'status': r.status}, open('/airlock/output/result.json','w'))\"\n",
    );
    let out = env
        .cmd()
        .env("AIRLOCK_EGRESS_POLICY", &policy)
        .args(["run", "caller", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(
        v["run"]["state"],
        "succeeded",
        "{v} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        up.requests()[0].header("authorization"),
        Some(format!("Bearer {VALUE}").as_str())
    );
    // A manifest cannot have the channel's credential delivered to its sandbox.
    env.sh_worker(
        "grabber",
        "[secrets]\nnames = [\"MODEL_KEY\"]\n",
        "cat /run/secrets/MODEL_KEY\n",
    );
    let out = env
        .cmd()
        .env("AIRLOCK_EGRESS_POLICY", &policy)
        .args(["run", "grabber", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(
        (v["run"]["state"].as_str(), v["run"]["error_code"].as_str()),
        (Some("blocked"), Some("secret_forbidden")),
        "{v}"
    );
    assert!(!contains(&env.stored_bytes(), VALUE.as_bytes()));
}
both_users!(key_5_channel_credentials_come_from_the_vault_and_are_never_delivered);
