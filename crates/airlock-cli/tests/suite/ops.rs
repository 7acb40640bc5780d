//! Operations (OPS-3): the backup and restore procedure of
//! docs/operations.md, performed as written, on SQLite and on PostgreSQL
//! with two roles.

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

/// The two PostgreSQL roles of README's "PostgreSQL with two roles"
/// (AUD-3), named for this test process: the owner, which owns the tables
/// and migrates, and the runtime role the server connects as. Dropped at
/// the end (after the databases, which are declared after them).
struct PgRoles {
    owner: String,
    runtime: String,
}

impl PgRoles {
    fn new() -> Option<Self> {
        let pid = std::process::id();
        let (owner, runtime) = (
            format!("airlock_drill_owner_{pid}"),
            format!("airlock_drill_runtime_{pid}"),
        );
        let ok = Command::new("psql")
            .args(PG_HOST)
            .args(["-v", "ON_ERROR_STOP=1", "-q"])
            .args(["-c", &format!("DROP ROLE IF EXISTS {owner}")])
            .args(["-c", &format!("DROP ROLE IF EXISTS {runtime}")])
            .args(["-c", &format!("CREATE ROLE {owner} LOGIN")])
            .args(["-c", &format!("CREATE ROLE {runtime} LOGIN")])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var("AIRLOCK_TEST_SKIP_POSTGRES").is_ok(),
                "PostgreSQL at 127.0.0.1:5432 is required"
            );
            return None;
        }
        Some(Self { owner, runtime })
    }
}

impl Drop for PgRoles {
    fn drop(&mut self) {
        for r in [&self.runtime, &self.owner] {
            let _ = Command::new("psql")
                .args(PG_HOST)
                .args(["-qc", &format!("DROP ROLE IF EXISTS {r}")])
                .status();
        }
    }
}

/// Where the drill keeps its database.
enum Db {
    Sqlite,
    /// A PostgreSQL database of the drill's own (dropped at the end),
    /// owned by `owner`; airlock connects as `runtime`.
    Postgres {
        name: String,
        owner: String,
        runtime: String,
    },
}

const PG_HOST: [&str; 4] = ["-h", "127.0.0.1", "-U", "postgres"];

impl Db {
    /// A fresh, empty PostgreSQL database named for this process and
    /// `tag`, owned by the owner role (README: `CREATE DATABASE airlock
    /// OWNER airlock_owner`).
    fn postgres(tag: &str, roles: &PgRoles) -> Option<Self> {
        let name = format!("airlock_drill_{}_{tag}", std::process::id());
        let ok = Command::new("psql")
            .args(PG_HOST)
            .args([
                "-qc",
                &format!("CREATE DATABASE {name} OWNER {}", roles.owner),
            ])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var("AIRLOCK_TEST_SKIP_POSTGRES").is_ok(),
                "PostgreSQL at 127.0.0.1:5432 is required"
            );
            return None;
        }
        Some(Self::Postgres {
            name,
            owner: roles.owner.clone(),
            runtime: roles.runtime.clone(),
        })
    }
    /// What airlock connects as: on PostgreSQL the runtime role.
    fn url(&self) -> Option<String> {
        match self {
            Db::Sqlite => None,
            Db::Postgres { name, runtime, .. } => {
                Some(format!("postgres://{runtime}@127.0.0.1:5432/{name}"))
            }
        }
    }
    /// The owner's connection (migrations, grants, backup, restore).
    fn owner_url(&self) -> Option<String> {
        match self {
            Db::Sqlite => None,
            Db::Postgres { name, owner, .. } => {
                Some(format!("postgres://{owner}@127.0.0.1:5432/{name}"))
            }
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Db::Postgres { name, .. } = self {
            let _ = Command::new("psql")
                .args(PG_HOST)
                .args([
                    "-qc",
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                ])
                .status();
        }
    }
}

/// README's two-role steps, as the owner: `airlock admin migrate`, then
/// `airlock admin pg-runtime-grants --role RUNTIME | psql OWNER_URL -v
/// ON_ERROR_STOP=1` (the grants of
/// `crates/airlock-store/sql/postgres_runtime_role.sql`). After a restore
/// only the grants are needed (`migrate` finds the schema current).
fn pg_owner_setup(env: &Env, db: &Db, migrate: bool) {
    let (Some(owner_url), Db::Postgres { runtime, .. }) = (db.owner_url(), db) else {
        return;
    };
    if migrate {
        let out = env
            .cmd()
            .env("AIRLOCK_DATABASE_URL", &owner_url)
            .args(["admin", "migrate"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "admin migrate: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let grants = env
        .cmd()
        .args(["admin", "pg-runtime-grants", "--role", runtime])
        .output()
        .unwrap();
    assert!(grants.status.success());
    let mut psql = Command::new("psql")
        .args([owner_url.as_str(), "-v", "ON_ERROR_STOP=1", "-q"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut psql.stdin.take().unwrap(), &grants.stdout).unwrap();
    let out = psql.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the grants: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `psql URL -c SQL`: success, and what it printed on stderr.
fn psql_as(url: &str, sql: &str) -> (bool, String) {
    let out = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// After the restore, the two roles are as before: every table is the
/// owner's (`--no-owner --role=OWNER`), and the runtime role is refused
/// UPDATE, DELETE and TRUNCATE of the audit log, dropping or disabling its
/// triggers; the log is unchanged. Control: the owner can disable the
/// triggers and delete and truncate (in a transaction rolled back).
fn check_roles_after_restore(db: &Db) {
    let (Some(rt), Some(owner_url), Db::Postgres { owner, .. }) = (db.url(), db.owner_url(), db)
    else {
        return;
    };
    let (ok, tables) = psql_as(
        &owner_url,
        "SELECT tablename || ':' || tableowner FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
    );
    assert!(ok, "{tables}");
    assert!(tables.lines().count() > 10, "{tables}");
    for line in tables.lines() {
        assert!(
            line.ends_with(&format!(":{owner}")),
            "not the owner's: {line}"
        );
    }
    let count = |url: &str| psql_as(url, "SELECT count(*) || ':' || max(seq) FROM audit_events");
    let (ok, before) = count(&rt);
    assert!(ok, "the runtime role reads the log: {before}");
    for sql in [
        "UPDATE audit_events SET line = 'x' WHERE seq = 1",
        "DELETE FROM audit_events WHERE seq = 1",
        "TRUNCATE audit_events",
        "DROP TRIGGER audit_events_no_update_delete ON audit_events",
        "ALTER TABLE audit_events DISABLE TRIGGER USER",
    ] {
        let (ok, err) = psql_as(&rt, sql);
        assert!(!ok, "the runtime role did {sql}");
        assert!(
            err.contains("permission denied") || err.contains("must be owner"),
            "{sql}: {err}"
        );
    }
    assert_eq!(count(&rt), (true, before.clone()), "the log is unchanged");
    // Control: what the runtime role is refused, the owner can do.
    let (ok, err) = psql_as(
        &owner_url,
        "BEGIN; ALTER TABLE audit_events DISABLE TRIGGER USER;          DELETE FROM audit_events WHERE seq = 1; TRUNCATE audit_events; ROLLBACK;",
    );
    assert!(ok, "the owner: {err}");
    assert_eq!(count(&rt), (true, before), "rolled back");
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
        // As the owner, so the triggers and grants come along.
        Some(_) => sh(Command::new("pg_dump")
            .arg("--format=custom")
            .arg(format!("--file={}", to.join("airlock.pgdump").display()))
            .args(db.owner_url())),
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
        // Into the new empty database owned by the owner role, as that
        // role; then the runtime role's grants again.
        Some(_) => {
            let Db::Postgres { owner, .. } = db else {
                unreachable!("a URL is PostgreSQL")
            };
            sh(Command::new("pg_restore")
                .arg("--no-owner")
                .arg(format!("--role={owner}"))
                .arg("--exit-on-error")
                .arg(format!("--dbname={}", db.owner_url().unwrap_or_default()))
                .arg(from.join("airlock.pgdump")));
            pg_owner_setup(env, db, false);
        }
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
    pg_owner_setup(&env, db, true);
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
    check_roles_after_restore(real);
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

/// The same drill on PostgreSQL with the two roles of README (AUD-3), as
/// docs/operations.md says: the owner migrates and grants, the server and
/// every command run as the runtime role; `pg_dump` as the owner;
/// `pg_restore --no-owner --role=OWNER` into new databases owned by the
/// owner, the grants applied again. Afterwards the runtime role is still
/// refused changing the audit log (control: the owner can).
#[test]
fn ops_3_restore_drill_on_postgresql() {
    let Some(roles) = PgRoles::new() else { return };
    let (Some(db), Some(control), Some(real)) = (
        Db::postgres("source", &roles),
        Db::postgres("control", &roles),
        Db::postgres("real", &roles),
    ) else {
        return;
    };
    drill(&db, &control, &real);
}
