//! `airlock validate` and `airlock gc` (DUR-6): the real binary over a real
//! SQLite database and data directory, with artifacts made by a real run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::suite::runs::Env;
use crate::suite::support::*;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every file and symlink under `dir`: its size, modification time (ns)
/// and SHA-256 (a symlink: its target).
///
/// SQLite's own side files are left out where they hold no data: the `-shm`
/// file (the WAL's shared-memory index, which every connection maps and
/// marks, even one opened `mode=ro` with `query_only`) and an empty `-wal`.
/// Any connection creates both, a read-only one included, and only the last
/// read-write connection to close cleanly removes them, so whether they are
/// there says which process last had the file open, not what it holds. A
/// write shows in the database file or in a WAL that is not empty, and both
/// are compared (control: `snapshot_sees_a_write_left_in_the_wal`).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, i128, String)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            let ext = e.path().extension().map(|x| x.to_owned());
            let empty_wal = ext.as_ref().is_some_and(|x| x == "db-wal") && m.len() == 0;
            if ext.as_ref().is_some_and(|x| x == "db-shm") || empty_wal {
                continue;
            }
            let mtime = i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec());
            if m.is_dir() {
                out.insert(e.path(), (0, mtime, "dir".into()));
                stack.push(e.path());
            } else if m.file_type().is_symlink() {
                let t = std::fs::read_link(e.path()).unwrap();
                out.insert(e.path(), (0, mtime, format!("-> {}", t.display())));
            } else {
                let h = hex(&Sha256::digest(std::fs::read(e.path()).unwrap()));
                out.insert(e.path(), (m.len(), mtime, h));
            }
        }
    }
    out
}

/// The control for [`snapshot`]'s leaving out SQLite's side files: a write
/// that a process committed and never checkpointed (it exits without
/// closing, so the write stays in the WAL, as a crash would leave it) is a
/// difference, while a process that only reads is none.
#[test]
fn snapshot_sees_a_write_left_in_the_wal() {
    let env = env_with_run();
    let db = env.data.join("airlock.db");
    let python = |code: &str| {
        let script = format!("import os,sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\n{code}\n");
        let st = Command::new("/usr/bin/python3")
            .args(["-c", &script, db.to_str().unwrap()])
            .status()
            .unwrap();
        assert!(st.success(), "{code}");
    };
    // A clean close first: no WAL, no index.
    python("c.close()");
    let before = snapshot(&env.data);
    python("c.execute('SELECT count(*) FROM runs').fetchall()\nos._exit(0)");
    assert!(env.data.join("airlock.db-shm").exists());
    assert_eq!(snapshot(&env.data), before, "a reader left only side files");
    python("c.execute(\"UPDATE runs SET actor = 'x'\")\nc.commit()\nos._exit(0)");
    let after = snapshot(&env.data);
    let wal = env.data.join("airlock.db-wal");
    assert!(
        after.get(&wal).is_some_and(|(len, _, _)| *len > 0),
        "{after:?}"
    );
    assert_ne!(after, before);
}

/// An env with one finished run that published two artifacts.
fn env_with_run() -> Env {
    let env = Env::new(Who::Invoker);
    env.sh_worker(
        "mk",
        "[outputs.ok]\ntype = \"boolean\"\n",
        "echo '{\"ok\": true}' > /airlock/output/result.json\nprintf one > /airlock/output/a.txt\nprintf 'two two' > /airlock/output/b.txt\n",
    );
    let (v, code, err) = env.run_json(&["mk"]);
    assert_eq!(code, 0, "{v} {err}");
    assert!(
        v["artifacts"].as_array().is_some_and(|a| a.len() >= 2),
        "{v}"
    );
    env
}

/// Writes `bytes` as a blob nothing references; answers its path.
fn plant_orphan(env: &Env, bytes: &[u8]) -> PathBuf {
    let d = hex(&Sha256::digest(bytes));
    let dir = env.data.join("artifacts/sha256").join(&d[..2]);
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(&d);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn run(env: &Env, args: &[&str]) -> (i32, Value, String) {
    let out = env.cmd().args(args).output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), v, text)
}

fn validate(env: &Env, level: &str) -> (i32, Vec<(String, String)>, String) {
    let (code, v, text) = run(env, &["validate", "--level", level, "--json"]);
    let kinds = v["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| {
                    (
                        f["kind"].as_str().unwrap_or("").to_string(),
                        f["object"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    (code, kinds, text)
}

fn kinds(found: &[(String, String)]) -> Vec<&str> {
    found.iter().map(|(k, _)| k.as_str()).collect()
}

/// The manifest path `gc --apply --json` answered.
fn apply(env: &Env) -> (PathBuf, Value) {
    let (code, v, text) = run(env, &["gc", "--apply", "--grace-secs", "0", "--json"]);
    assert_eq!(code, 0, "{text}");
    (PathBuf::from(v["manifest"].as_str().unwrap()), v)
}

pub(crate) fn edit_manifest(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut m: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut m);
    std::fs::write(path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

#[test]
fn dur_6_validate_never_writes_and_gc_apply_does() {
    let env = env_with_run();
    let (code, found, text) = validate(&env, "full");
    assert_eq!((code, found.len()), (0, 0), "{text}");

    let orphan = plant_orphan(&env, b"nothing names me");
    let before = snapshot(env.root());
    for level in ["quick", "standard", "full"] {
        let _ = validate(&env, level);
    }
    // The grace: an orphan written just now may be a publication whose
    // row is not written yet, and is left (control: no grace, a candidate).
    let (code, v, text) = run(&env, &["gc", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(v["entries"].as_array().unwrap().len(), 0, "{v}");
    assert!(text.contains("1 blob(s)"), "{text}");
    let (code, v, text) = run(&env, &["gc", "--grace-secs", "0", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(v["entries"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(
        snapshot(env.root()),
        before,
        "validate or a gc dry run changed the data directory"
    );

    // Control: the snapshot sees a change, and gc --apply makes one.
    apply(&env);
    assert!(!orphan.exists());
    assert_ne!(snapshot(env.root()), before);
}

#[test]
fn dur_6_each_validate_level_finds_what_it_should() {
    let env = env_with_run();
    let blobs: Vec<PathBuf> = snapshot(&env.data.join("artifacts/sha256"))
        .into_iter()
        .filter(|(_, (_, _, h))| h != "dir")
        .map(|(p, _)| p)
        .collect();
    assert!(blobs.len() >= 2);

    // An orphan: standard sees it, quick does not look.
    let orphan = plant_orphan(&env, b"orphan bytes");
    let (code, found, text) = validate(&env, "quick");
    assert_eq!((code, found.len()), (0, 0), "{text}");
    let (code, found, text) = validate(&env, "standard");
    assert_eq!((code, kinds(&found)), (1, vec!["orphan_blob"]), "{text}");
    std::fs::remove_file(&orphan).unwrap();

    // A corrupted byte, same size: only full rehashes (control: standard passes it).
    let mut bytes = std::fs::read(&blobs[0]).unwrap();
    let original = bytes.clone();
    bytes[0] ^= 1;
    std::fs::write(&blobs[0], &bytes).unwrap();
    let (code, found, text) = validate(&env, "standard");
    assert_eq!((code, found.len()), (0, 0), "{text}");
    let (code, found, text) = validate(&env, "full");
    assert_eq!(
        (code, kinds(&found)),
        (1, vec!["digest_mismatch"]),
        "{text}"
    );
    std::fs::write(&blobs[0], &original).unwrap();

    // A deleted blob a row names: standard.
    std::fs::rename(&blobs[1], env.root().join("aside")).unwrap();
    let (code, found, text) = validate(&env, "quick");
    assert_eq!((code, found.len()), (0, 0), "{text}");
    let (code, found, text) = validate(&env, "standard");
    assert_eq!((code, kinds(&found)), (1, vec!["missing_blob"]), "{text}");
    std::fs::rename(env.root().join("aside"), &blobs[1]).unwrap();
    let (code, _, text) = validate(&env, "full");
    assert_eq!(code, 0, "{text}");

    // A broken chain (an event edited by whoever holds the file): standard.
    let script = "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nc.execute('DROP TRIGGER audit_events_no_update')\nc.execute(\"UPDATE audit_events SET line = replace(line, 'run.', 'rUn.') WHERE workspace_id='ws_default' AND seq = 2\")\nc.commit()\n";
    let st = Command::new("/usr/bin/python3")
        .args(["-c", script, env.data.join("airlock.db").to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let (code, found, text) = validate(&env, "quick");
    assert_eq!((code, found.len()), (0, 0), "{text}");
    let (code, found, text) = validate(&env, "standard");
    assert_eq!(
        (code, found),
        (
            1,
            vec![("audit_chain".to_string(), "ws_default".to_string())]
        ),
        "{text}"
    );
}

#[test]
fn dur_6_gc_apply_then_restore_round_trips_byte_for_byte() {
    let env = env_with_run();
    let referenced = snapshot(&env.data.join("artifacts/sha256"));
    plant_orphan(&env, b"first orphan");
    plant_orphan(&env, b"second orphan, longer");
    let before = snapshot(&env.data.join("artifacts"));

    let (manifest, v) = apply(&env);
    assert_eq!(v["entries"].as_array().unwrap().len(), 2, "{v}");
    assert!(
        v["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["state"] == "moved" && e["reason"] == "orphan_blob"),
        "{v}"
    );
    // A referenced blob is never a candidate: every one is still there.
    for (p, (_, _, h)) in &referenced {
        if h != "dir" {
            assert!(p.exists(), "{} was collected", p.display());
        }
    }
    let (code, found, text) = validate(&env, "full");
    assert_eq!((code, found.len()), (0, 0), "{text}");
    assert!(manifest.starts_with(env.data.join("trash")));

    let (code, _, text) = run(&env, &["gc", "restore", manifest.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    let hashes = |s: BTreeMap<PathBuf, (u64, i128, String)>| -> BTreeMap<PathBuf, (u64, String)> {
        s.into_iter().map(|(p, (n, _, h))| (p, (n, h))).collect()
    };
    assert_eq!(
        hashes(snapshot(&env.data.join("artifacts"))),
        hashes(before)
    );

    // A restore refuses to overwrite what is there: a copy in the trash
    // area, marked moved again, while the original is back in place.
    let rel = v["entries"][0]["path"].as_str().unwrap();
    let in_trash = manifest.parent().unwrap().join("files").join(rel);
    std::fs::copy(env.data.join(rel), &in_trash).unwrap();
    edit_manifest(&manifest, |m| {
        m["entries"][0]["state"] = "moved".into();
    });
    let (code, _, text) = run(&env, &["gc", "restore", manifest.to_str().unwrap()]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("already exists"), "{text}");

    // Every step is on the audit chain.
    let out = env.cmd().args(["audit", "export"]).output().unwrap();
    let export = String::from_utf8_lossy(&out.stdout);
    assert!(export.contains("\"gc.applied\""), "{export}");
    assert!(export.contains("\"gc.restored\""), "{export}");
}

#[test]
fn dur_6_gc_purge_waits_for_the_recovery_window() {
    let env = env_with_run();
    plant_orphan(&env, b"to be purged");
    let (manifest, _) = apply(&env);
    let area = manifest.parent().unwrap().to_path_buf();

    let (code, _, text) = run(&env, &["gc", "purge", manifest.to_str().unwrap()]);
    assert_eq!(code, 125, "{text}");
    assert!(text.contains("recovery window"), "{text}");
    assert!(area.exists());

    // Eight days later (the manifest's time moved back).
    edit_manifest(&manifest, |m| {
        let t = m["created_at_ms"].as_i64().unwrap();
        m["created_at_ms"] = (t - 8 * 86_400_000).into();
    });
    let (code, _, text) = run(&env, &["gc", "purge", manifest.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(!area.exists());
    let out = env.cmd().args(["audit", "export"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"gc.purged\""));

    // A manifest outside the data directory's trash area is refused.
    let elsewhere = env.root().join("manifest.json");
    std::fs::write(&elsewhere, "{}").unwrap();
    let (code, _, text) = run(&env, &["gc", "purge", elsewhere.to_str().unwrap()]);
    assert_eq!(code, 125, "{text}");
    assert!(text.contains("trash area"), "{text}");
}

#[test]
fn dur_6_an_interrupted_apply_resumes_and_a_swapped_symlink_is_refused() {
    let env = env_with_run();
    let outside = env.root().join("host-file");
    std::fs::write(&outside, b"not airlock's").unwrap();
    for b in [&b"orphan one"[..], b"orphan two", b"orphan three"] {
        plant_orphan(&env, b);
    }
    let (manifest, v) = apply(&env);
    let area = manifest.parent().unwrap().to_path_buf();
    let entries = v["entries"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 3);
    let orig = |i: usize| env.data.join(entries[i]["path"].as_str().unwrap());
    let trashed = |i: usize| {
        area.join("files")
            .join(entries[i]["path"].as_str().unwrap())
    };

    // The interruption: entry 0 not moved yet; entry 1 not moved and, after
    // the check, swapped for a symlink; entry 2 moved but not recorded.
    std::fs::rename(trashed(0), orig(0)).unwrap();
    std::fs::remove_file(trashed(1)).unwrap();
    std::os::unix::fs::symlink(&outside, orig(1)).unwrap();
    edit_manifest(&manifest, |m| {
        for i in 0..3 {
            m["entries"][i]["state"] = "planned".into();
        }
    });

    let (code, v, text) = run(
        &env,
        &["gc", "resume", manifest.to_str().unwrap(), "--json"],
    );
    assert_eq!(code, 1, "{text}");
    let states: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["moved", "refused", "moved"], "{v}");
    assert!(!orig(0).exists() && trashed(0).exists());
    assert!(trashed(2).exists());
    // The symlink was neither followed nor moved; the host file is untouched.
    assert!(
        std::fs::symlink_metadata(orig(1))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(std::fs::symlink_metadata(trashed(1)).is_err());
    assert_eq!(std::fs::read(&outside).unwrap(), b"not airlock's");
    // The manifest on disk says the same.
    let m: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    assert_eq!(m["entries"][1]["state"], "refused");
}

/// DUR-7 then DUR-6, through the real binary: a workspace's retention
/// removes a run that ended long enough ago (its record, events and
/// artifact records), a dry run first counting exactly that; the run is gone
/// from `runs get`; `gc` then finds its blobs unreferenced and moves them to
/// the trash; validate and the audit chain stay clean, with `retention.set`
/// and `retention.applied` on it. Time is moved by ageing the run's
/// `finished_at` in the database (what 40 days would do). Controls: before
/// the ageing a pass counts nothing, gc finds nothing, and the run is there;
/// a run that has not aged is kept; out-of-range days are refused.
#[test]
fn dur_7_retention_removes_an_old_run_and_gc_frees_its_blobs() {
    let env = env_with_run();
    let (v, code, err) = env.run_json(&["mk"]);
    assert_eq!(code, 0, "{v} {err}");
    let young = v["run"]["id"].as_str().unwrap().to_string();
    let (code, v, text) = run(&env, &["runs", "list", "--json"]);
    assert_eq!(code, 0, "{text}");
    let old = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .find(|id| *id != young)
        .unwrap();

    let (code, _, text) = run(&env, &["retention", "set", "--runs-days", "0"]);
    assert_ne!(code, 0, "days must be 1 or more: {text}");
    assert!(
        text.contains("invalid_request") && text.contains("runs_days"),
        "{text}"
    );
    let (code, v, text) = run(&env, &["retention", "set", "--runs-days", "30", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(v["runs_days"], 30, "{v}");
    assert!(v["logs_days"].is_null(), "{v}");
    let (code, v, text) = run(&env, &["retention", "apply", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(v["removed"]["runs"], 0, "control: nothing has aged: {v}");
    let (_, v, _) = run(&env, &["gc", "--grace-secs", "0", "--json"]);
    assert_eq!(v["entries"].as_array().map(Vec::len), Some(0), "{v}");

    // Forty days pass for the older run.
    let age = |id: &str| {
        sql(
            &env,
            &format!("UPDATE runs SET finished_at = finished_at - 40*86400000 WHERE id = '{id}'"),
        )
    };
    age(&old);

    let (code, preview, text) = run(&env, &["retention", "apply", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(preview["removed"]["runs"], 1, "{preview}");
    assert_eq!(preview["dry_run"], true);
    let (code, _, text) = run(&env, &["runs", "get", &old, "--json"]);
    assert_eq!(code, 0, "a dry run removed the run: {text}");
    let (code, v, text) = run(&env, &["retention", "apply", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(v["removed"], preview["removed"], "{v}");
    let (code, _, text) = run(&env, &["runs", "get", &old, "--json"]);
    assert_ne!(code, 0, "the old run is still there: {text}");
    let (code, _, text) = run(&env, &["runs", "get", &young, "--json"]);
    assert_eq!(code, 0, "the young run went too: {text}");

    // The young run published the same bytes, so gc finds nothing yet…
    let (_, v, _) = run(&env, &["gc", "--grace-secs", "0", "--json"]);
    assert_eq!(v["entries"].as_array().map(Vec::len), Some(0), "{v}");
    // …until it ages too; then both runs' blobs are unreferenced.
    age(&young);
    let (code, v, text) = run(&env, &["retention", "apply", "--json"]);
    assert_eq!(
        (code, v["removed"]["runs"].as_u64()),
        (0, Some(1)),
        "{text}"
    );
    let (manifest, v) = apply(&env);
    assert!(
        v["entries"]
            .as_array()
            .is_some_and(|e| e.len() >= 2 && e.iter().all(|x| x["reason"] == "orphan_blob")),
        "{v}"
    );
    assert!(manifest.exists());
    let (code, found, text) = validate(&env, "full");
    assert_eq!((code, found.len()), (0, 0), "{text}");
    let out = env.cmd().args(["audit", "verify"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = env.cmd().args(["audit", "export"]).output().unwrap();
    let export = String::from_utf8_lossy(&out.stdout);
    assert!(export.contains("\"retention.set\""), "{export}");
    assert_eq!(
        export.matches("\"retention.applied\"").count(),
        2,
        "{export}"
    );
}

/// Runs `sql` on the env's SQLite database (test set-up: what a crash would
/// have left).
pub(crate) fn sql(env: &Env, sql: &str) {
    let script = format!(
        "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nc.executescript(\"\"\"{sql}\"\"\")\nc.commit()\n"
    );
    let db = env.data.join("airlock.db");
    let st = Command::new("/usr/bin/python3")
        .args(["-c", &script, db.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success(), "{sql}");
}

/// DUR-6 `airlock recover`: a run whose holder process died after its
/// workload started is settled `unknown` (never re-run); staging files of
/// dead writers and run folders of ended or removed runs move to a
/// quarantine with their reasons and a manifest, one audit event; a dry run
/// changes nothing. Controls: a staging file whose writer is alive, one
/// whose name names no writer, and the folder of a run still running stay
/// where they are; `validate` is clean afterwards.
#[test]
fn dur_6_recover_settles_dead_runs_and_quarantines_leftovers_only() {
    let env = env_with_run();
    let (code, v, text) = run(&env, &["runs", "list", "--json"]);
    assert_eq!(code, 0, "{text}");
    let ended = v["runs"][0]["id"].as_str().unwrap().to_string();
    // A process that is gone: its pid names the dead writer and holder.
    let mut child = Command::new("/bin/true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let node = "node-recover-test";
    sql(
        &env,
        &format!(
            "INSERT INTO runs (id, workspace_id, worker_id, state, input, input_hash, trigger_source, actor, created_at, started_at, lease_owner, lease_expires_at, fencing_token, workload_started, attempt) \
             VALUES ('run_held', 'ws_default', 'mk', 'running', '{{}}', 'h', 'manual', 'tester', 1, 1, '{node}:{dead}', 99999999999999, 1, 1, 1); \
             INSERT INTO runs (id, workspace_id, worker_id, state, input, input_hash, trigger_source, actor, created_at, started_at, lease_owner, lease_expires_at, fencing_token, workload_started, attempt) \
             VALUES ('run_live', 'ws_default', 'mk', 'running', '{{}}', 'h', 'manual', 'tester', 1, 1, 'elsewhere:1', 99999999999999, 1, 1, 1);"
        ),
    );
    let tmp = env.data.join("artifacts/tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let stale = format!("{dead}-123-0.tmp");
    let live = format!("{}-123-1.tmp", std::process::id());
    for n in [&stale, &live, &"unnamed.tmp".to_string()] {
        std::fs::write(tmp.join(n), b"partial").unwrap();
    }
    for (id, file) in [
        (&ended, "out"),
        (&"run_gone".to_string(), "x"),
        (&"run_live".to_string(), "y"),
    ] {
        let d = env.data.join("runs").join(id).join("output");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file), b"left").unwrap();
    }
    let before = snapshot(&env.data);

    let (code, v, text) = run(&env, &["recover", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(snapshot(&env.data), before, "a dry run changed something");
    let planned: Vec<(String, String)> = v["files"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = vec![
        (
            format!("artifacts/tmp/{stale}"),
            "interrupted_publication".to_string(),
        ),
        (
            format!("runs/{ended}"),
            "run_folder_of_ended_run".to_string(),
        ),
        (
            "runs/run_gone".to_string(),
            "run_folder_without_run".to_string(),
        ),
    ];
    let mut sorted = planned.clone();
    sorted.sort();
    let mut want_sorted = want.clone();
    want_sorted.sort();
    assert_eq!(sorted, want_sorted, "{v}");

    let out = env
        .cmd()
        .env("AIRLOCK_NODE_ID", node)
        .args(["recover", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["runs"],
        serde_json::json!([{"id": "run_held", "state": "unknown"}]),
        "{v}"
    );
    let manifest = PathBuf::from(v["files"]["manifest"].as_str().unwrap());
    let qdir = manifest.parent().unwrap().join("files");
    for (path, _) in &want {
        assert!(!env.data.join(path).exists(), "{path} left in place");
        assert!(qdir.join(path).exists(), "{path} not in the quarantine");
    }
    assert!(
        tmp.join(&live).exists(),
        "a live writer's staging was moved"
    );
    assert!(tmp.join("unnamed.tmp").exists());
    assert!(
        env.data.join("runs/run_live/output/y").exists(),
        "a running run's folder was moved"
    );
    let (code, v, _) = run(&env, &["runs", "get", "run_live", "--json"]);
    assert_eq!(
        (code, v["run"]["state"].as_str().or(v["state"].as_str())),
        (0, Some("running")),
        "{v}"
    );
    let out = env.cmd().args(["audit", "export"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"recover.quarantined\""));
    let (code, found, text) = validate(&env, "standard");
    assert_eq!((code, found.len()), (0, 0), "{text}");
}

/// DUR-6 `airlock recover` rehashes every local blob: one whose bytes no
/// longer hash to its name (one byte changed, same size) is moved to the
/// quarantine (`corrupted_blob`, in the manifest with its reason, one audit
/// event), never deleted; a dry run only lists it. Control: the intact blob
/// of the same run stays where it is. Afterwards `validate` reports the
/// lost bytes as a missing blob, which they are.
#[test]
fn dur_6_recover_quarantines_a_corrupted_blob_and_leaves_intact_ones() {
    let env = env_with_run();
    let blobs: Vec<PathBuf> = snapshot(&env.data.join("artifacts/sha256"))
        .into_iter()
        .filter(|(_, (_, _, h))| h != "dir")
        .map(|(p, _)| p)
        .collect();
    assert!(blobs.len() >= 2);
    let mut bytes = std::fs::read(&blobs[0]).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&blobs[0], &bytes).unwrap();
    let rel = blobs[0]
        .strip_prefix(&env.data)
        .unwrap()
        .to_string_lossy()
        .into_owned();

    let (code, v, text) = run(&env, &["recover", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{text}");
    let entries = v["files"]["entries"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 1, "{v}");
    assert_eq!(
        (entries[0]["path"].as_str(), entries[0]["reason"].as_str()),
        (Some(rel.as_str()), Some("corrupted_blob")),
        "{v}"
    );
    assert!(blobs[0].exists(), "a dry run moved it");

    let (code, v, text) = run(&env, &["recover", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(v["files"]["entries"][0]["state"], "moved", "{v}");
    let manifest = PathBuf::from(v["files"]["manifest"].as_str().unwrap());
    assert!(manifest.starts_with(env.data.join("quarantine")));
    let kept = manifest.parent().unwrap().join("files").join(&rel);
    assert_eq!(std::fs::read(&kept).unwrap(), bytes, "kept, not deleted");
    assert!(!blobs[0].exists());
    let m: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    assert_eq!(m["entries"][0]["reason"], "corrupted_blob", "{m}");
    for b in &blobs[1..] {
        assert!(b.exists(), "control: intact {} stays", b.display());
    }
    let (_, _, export) = run(&env, &["audit", "export"]);
    assert!(export.contains("\"recover.quarantined\""), "{export}");
    let (code, found, text) = validate(&env, "standard");
    assert_eq!((code, kinds(&found)), (1, vec!["missing_blob"]), "{text}");
}

/// Reads one value with SQL from the env's SQLite database.
pub(crate) fn sql_value(env: &Env, query: &str) -> String {
    let script = format!(
        "import sqlite3,sys\nc=sqlite3.connect(sys.argv[1])\nprint(c.execute(\"{query}\").fetchone()[0])\n"
    );
    let out = Command::new("/usr/bin/python3")
        .args(["-c", &script, env.data.join("airlock.db").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// DUR-7 export: `airlock export-workspace` writes the workspace's row,
/// every row it owns, its audit chain (as `audit export` has it) and every
/// blob it names, each listed in the manifest with its SHA-256; blobs are
/// named by their content. A secret appears by name only: neither its value
/// nor its sealed form nor an API key hash is anywhere in the export. The
/// export is an audit event. Controls: the secret's value and sealed text
/// are real (the database holds the sealed text); an existing folder and an
/// unknown workspace are refused.
#[test]
fn dur_7_a_workspace_export_holds_everything_but_secrets() {
    const VALUE: &str = "export-secret-value-9f2d7c";
    let env = env_with_run();
    let (code, text) = env.set("TOKEN", VALUE.as_bytes());
    assert_eq!(code, 0, "{text}");
    let sealed = sql_value(&env, "SELECT sealed FROM secrets WHERE name = 'TOKEN'");
    assert!(sealed.len() > 20, "control: {sealed}");
    let out = env.root().join("export");
    let (code, v, text) = run(
        &env,
        &[
            "export-workspace",
            "ws_default",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(code, 0, "{text}");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len(), v["files"].as_array().unwrap().len());
    let mut blobs = 0;
    for f in files {
        let rel = f["path"].as_str().unwrap();
        let bytes = std::fs::read(out.join(rel)).unwrap();
        assert_eq!(
            hex(&Sha256::digest(&bytes)),
            f["sha256"].as_str().unwrap(),
            "{rel}"
        );
        if let Some(name) = rel.strip_prefix("blobs/sha256/") {
            blobs += 1;
            assert!(name.ends_with(&hex(&Sha256::digest(&bytes))), "{rel}");
        }
    }
    assert!(blobs >= 2, "{manifest}");
    let rows = |table: &str| {
        files
            .iter()
            .find(|f| f["path"] == format!("tables/{table}.jsonl"))
            .and_then(|f| f["rows"].as_u64())
            .unwrap()
    };
    assert!(rows("runs") >= 1 && rows("run_events") >= 1 && rows("artifacts") >= 2);
    assert_eq!(rows("secrets"), 1);
    let secrets = std::fs::read_to_string(out.join("tables/secrets.jsonl")).unwrap();
    assert!(
        secrets.contains("\"TOKEN\"") && !secrets.contains("sealed"),
        "{secrets}"
    );
    let mut all = Vec::new();
    let mut stack = vec![out.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.path().is_dir() {
                stack.push(e.path());
            } else {
                all.extend(std::fs::read(e.path()).unwrap());
            }
        }
    }
    let text = String::from_utf8_lossy(&all);
    assert!(!text.contains(VALUE), "the secret's value is in the export");
    assert!(
        !text.contains(&sealed),
        "the sealed secret is in the export"
    );
    // The chain as exported is the chain `audit export` shows (which now
    // also ends with the export itself).
    let after = env.cmd().args(["audit", "export"]).output().unwrap();
    let after = String::from_utf8_lossy(&after.stdout).into_owned();
    let exported = std::fs::read_to_string(out.join("audit.jsonl")).unwrap();
    assert!(exported.lines().count() > 3);
    for line in exported.lines() {
        assert!(after.contains(line), "{line}");
    }
    assert!(after.contains("\"workspace.exported\""));

    let (code, _, text) = run(
        &env,
        &[
            "export-workspace",
            "ws_default",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_ne!(code, 0, "an existing folder was written into: {text}");
    let other = env.root().join("export-2");
    let (code, _, text) = run(
        &env,
        &[
            "export-workspace",
            "ws_nope",
            "--out",
            other.to_str().unwrap(),
        ],
    );
    assert_ne!(code, 0, "{text}");
    assert!(!other.exists());
}
