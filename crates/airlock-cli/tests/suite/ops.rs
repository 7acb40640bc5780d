//! Operations (OPS-3): the backup and restore procedure of
//! docs/operations.md, performed as written, on SQLite.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::suite::runs::{Env, Server};
use crate::suite::support::*;

const SECRET: &str = "drill-secret-value-0123456789";

/// The artifact the drill's run writes: `seq 1 20000`.
fn expected_artifact() -> String {
    (1..=20000).map(|i| format!("{i}\n")).collect()
}

fn sh(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Where the drill keeps its database.
enum Db {
    Sqlite,
    /// A PostgreSQL database of the drill's own (dropped at the end).
    Postgres(String),
}

const PG_HOST: [&str; 4] = ["-h", "127.0.0.1", "-U", "postgres"];

impl Db {
    /// A fresh PostgreSQL database named for this process and `tag`.
    fn postgres(tag: &str) -> Option<Self> {
        let name = format!("airlock_drill_{}_{tag}", std::process::id());
        let ok = Command::new("psql")
            .args(PG_HOST)
            .args(["-qc", &format!("CREATE DATABASE {name}")])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var("AIRLOCK_TEST_SKIP_POSTGRES").is_ok(),
                "PostgreSQL at 127.0.0.1:5432 is required"
            );
            return None;
        }
        Some(Self::Postgres(name))
    }
    fn url(&self) -> Option<String> {
        match self {
            Db::Sqlite => None,
            Db::Postgres(n) => Some(format!("postgres://postgres@127.0.0.1:5432/{n}")),
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Db::Postgres(n) = self {
            let _ = Command::new("psql")
                .args(PG_HOST)
                .args(["-qc", &format!("DROP DATABASE IF EXISTS {n} WITH (FORCE)")])
                .status();
        }
    }
}

/// `airlock` in `env` on `db`.
fn cmd(env: &Env, db: &Db) -> Command {
    let mut c = env.cmd();
    if let Some(url) = db.url() {
        c.env("AIRLOCK_DATABASE_URL", url);
    }
    c
}

/// `airlock ARGS` in `env` on `db`: (exit status, stdout, stderr).
fn airlock_in(env: &Env, db: &Db, args: &[&str]) -> (i32, String, String) {
    let out = cmd(env, db).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn server(env: &Env, db: &Db) -> Server {
    match db.url() {
        Some(url) => Server::start(env, &[("AIRLOCK_DATABASE_URL", &url)]),
        None => Server::start(env, &[]),
    }
}

/// The bytes at `path` of `s` (curl decodes the chunked answer): status,
/// body.
pub(crate) fn download(s: &Server, path: &str) -> (String, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "-H"])
        .arg(format!("Authorization: Bearer {}", s.key()))
        .arg(format!("{}{path}", s.base_url()))
        .output()
        .unwrap();
    let mut body = out.stdout;
    let split = body.iter().rposition(|b| *b == b'\n').unwrap_or(0);
    let code = String::from_utf8_lossy(&body[split + 1..]).into_owned();
    body.truncate(split);
    (code, body)
}

/// Backup, in the documented order: key directory, database (online
/// `sqlite3 .backup`), blobs.
fn backup(env: &Env, db: &Db, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    sh(Command::new("cp")
        .arg("-a")
        .arg(env.data.join("keys"))
        .arg(to.join("keys")));
    match db.url() {
        None => sh(Command::new("sqlite3")
            .arg(env.data.join("airlock.db"))
            .arg(format!(".backup '{}'", to.join("airlock.db").display()))),
        Some(url) => sh(Command::new("pg_dump")
            .arg("--format=custom")
            .arg(format!("--file={}", to.join("airlock.pgdump").display()))
            .arg(url)),
    }
    std::fs::create_dir_all(to.join("data")).unwrap();
    for d in ["artifacts", "uploads", "runs"] {
        if env.data.join(d).exists() {
            sh(Command::new("cp")
                .arg("-a")
                .arg(env.data.join(d))
                .arg(to.join("data")));
        }
    }
}

/// Restore into a fresh data directory; the key directory only if asked.
fn restore(env: &Env, db: &Db, from: &Path, with_keys: bool) {
    let _ = std::fs::remove_dir_all(&env.data);
    std::fs::create_dir_all(&env.data).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&env.data, std::fs::Permissions::from_mode(0o700)).unwrap();
    if with_keys {
        sh(Command::new("cp")
            .arg("-a")
            .arg(from.join("keys"))
            .arg(env.data.join("keys")));
    }
    match db.url() {
        None => sh(Command::new("cp")
            .arg(from.join("airlock.db"))
            .arg(env.data.join("airlock.db"))),
        Some(url) => sh(Command::new("pg_restore")
            .arg("--no-owner")
            .arg(format!("--dbname={url}"))
            .arg(from.join("airlock.pgdump"))),
    }
    for e in std::fs::read_dir(from.join("data")).unwrap() {
        sh(Command::new("cp")
            .arg("-a")
            .arg(e.unwrap().path())
            .arg(&env.data));
    }
}

/// The drill: a run with an artifact and a secret, audit events and a
/// signed checkpoint; back up with the server running; destroy the data
/// directory (and use a new database); restore. Then `validate --level
/// full` and `audit verify` pass, the secret still decrypts (a new run
/// reads it), and the old run's artifact downloads byte for byte. Positive
/// control: the same restore without the key directory fails clearly (the
/// secret cannot be read). `control` and `real` are where the two restores
/// put the database (on SQLite, the data directory's file each time).
fn drill(db: &Db, control: &Db, real: &Db) {
    let env = Env::new(Who::Invoker);
    env.sh_worker(
        "drill",
        "[secrets]\nnames = [\"DRILL_TOKEN\"]\n[outputs.digest]\ntype = \"string\"\n",
        "t=$(cat /run/secrets/DRILL_TOKEN)\nseq 1 20000 > /airlock/output/numbers.txt\nprintf '{\"digest\": \"%s\"}' \"$(printf %s \"$t\" | sha256sum | cut -c1-64)\" > /airlock/output/result.json\n",
    );
    let want_digest: String = <sha2::Sha256 as sha2::Digest>::digest(SECRET.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut set = cmd(&env, db)
        .args(["secrets", "set", "DRILL_TOKEN"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut set.stdin.take().unwrap(), SECRET.as_bytes()).unwrap();
    assert!(set.wait().unwrap().success());
    let run = |db: &Db| {
        let (code, out, err) = airlock_in(&env, db, &["run", "drill", "--json"]);
        let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        (code, v, err)
    };
    let (code, v, err) = run(db);
    assert_eq!(code, 0, "{v} {err}");
    let run_id = v["run"]["id"]
        .as_str()
        .or(v["id"].as_str())
        .unwrap()
        .to_string();
    let (code, out, err) = airlock_in(&env, db, &["audit", "checkpoint"]);
    assert_eq!(code, 0, "{out} {err}");

    // Back up while the server runs, then destroy.
    let s = server(&env, db);
    let art = format!("/v1/runs/{run_id}/artifacts/numbers.txt");
    let (c, body) = download(&s, &art);
    assert_eq!(c, "200");
    assert!(
        body == expected_artifact().as_bytes(),
        "the artifact as written"
    );
    let backup_dir = env.root().join("backup");
    backup(&env, db, &backup_dir);
    drop(s);
    std::fs::remove_dir_all(&env.data).unwrap();

    // Positive control: without the key directory the secret is lost, and
    // the run says so.
    restore(&env, control, &backup_dir, false);
    let (code, v, err) = run(control);
    assert_ne!(code, 0, "{v} {err}");
    assert_ne!(v["run"]["state"], "succeeded", "{v}");
    assert_eq!(v["run"]["error_code"], "vault_error", "{v}");
    assert!(
        v["run"]["error_message"]
            .as_str()
            .is_some_and(|m| m.contains("decryption failed: wrong key")),
        "a clear refusal: {v}"
    );

    // The real restore.
    restore(&env, real, &backup_dir, true);
    let (code, out, err) = airlock_in(&env, real, &["validate", "--level", "full"]);
    assert_eq!(code, 0, "validate --level full: {out} {err}");
    let (code, out, err) = airlock_in(&env, real, &["audit", "verify"]);
    assert_eq!(code, 0, "audit verify: {out} {err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("ws_default: ok") && l.contains("checkpoint seq=")),
        "the run's workspace verified against its checkpoint: {out}"
    );
    let (code, v, err) = run(real);
    assert_eq!(code, 0, "the secret decrypts after the restore: {v} {err}");
    let digest = v["run"]["outputs"]["digest"]
        .as_str()
        .or(v["outputs"]["digest"].as_str());
    assert_eq!(digest, Some(want_digest.as_str()), "{v}");
    let s = server(&env, real);
    let (c, body) = download(&s, &art);
    assert_eq!(c, "200");
    assert!(body == expected_artifact().as_bytes(), "byte for byte");
    drop(s);
}

#[test]
fn ops_3_restore_drill_on_sqlite() {
    if Command::new("sqlite3").arg("-version").output().is_err() {
        assert!(
            std::env::var_os("AIRLOCK_TEST_SKIP_SQLITE3").is_some(),
            "sqlite3 is missing: run scripts/test (or set AIRLOCK_TEST_SKIP_SQLITE3=1)"
        );
        return;
    }
    drill(&Db::Sqlite, &Db::Sqlite, &Db::Sqlite);
}

/// The same drill with `pg_dump` / `pg_restore` into new databases.
#[test]
fn ops_3_restore_drill_on_postgresql() {
    let (Some(db), Some(control), Some(real)) = (
        Db::postgres("source"),
        Db::postgres("control"),
        Db::postgres("real"),
    ) else {
        return;
    };
    drill(&db, &control, &real);
}
