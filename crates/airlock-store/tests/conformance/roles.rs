//! AUD-3 on PostgreSQL: the two-role setup. Migrations run as an owner
//! role (not a superuser); the runtime role gets
//! `sql/postgres_runtime_role.sql`, runs the server's operations, and is
//! refused UPDATE, DELETE and TRUNCATE of the audit log and dropping or
//! disabling its triggers. Controls: the runtime role updates and deletes
//! ordinary rows; the owner can drop the trigger (which is why the server
//! must not connect as the owner).

use std::time::Duration;

use super::*;

async fn exec(store: &Store, sql: &str) -> std::result::Result<(), String> {
    sqlx::raw_sql(sql)
        .execute(store.pool())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aud_3_the_postgres_runtime_role_can_only_append_and_read_the_audit_log() {
    sqlx::any::install_default_drivers();
    let Ok(mut admin) = sqlx::AnyConnection::connect(PG_ADMIN).await else {
        assert!(
            std::env::var("AIRLOCK_TEST_SKIP_POSTGRES").is_ok(),
            "PostgreSQL at 127.0.0.1:5432 is required"
        );
        return;
    };
    let suffix = random_id("").to_lowercase().replace('-', "_");
    let (db, owner, runtime) = (
        format!("airlock_roles{suffix}"),
        format!("airlock_owner{suffix}"),
        format!("airlock_rt{suffix}"),
    );
    for sql in [
        format!("CREATE ROLE {owner} LOGIN NOSUPERUSER"),
        format!("CREATE ROLE {runtime} LOGIN NOSUPERUSER"),
        format!("CREATE DATABASE {db} OWNER {owner}"),
    ] {
        sqlx::raw_sql(&sql).execute(&mut admin).await.unwrap();
    }
    let url = |role: &str| format!("postgres://{role}@127.0.0.1:5432/{db}");

    // The owner migrates and grants.
    let owner_store = Store::open(&url(&owner)).await.unwrap();
    let grants = postgres_runtime_grants(&runtime).unwrap();
    exec(&owner_store, &grants).await.unwrap();
    assert!(postgres_runtime_grants("x; DROP TABLE runs").is_none());

    // The runtime role opens the migrated database and does the server's work.
    let rt = Store::open(&url(&runtime)).await.unwrap();
    assert!(rt.ready().await.unwrap());
    let created = rt.create_run(new_run("hello")).await.unwrap();
    let claim = rt
        .claim_next("node:1", Duration::from_secs(30), &[])
        .await
        .unwrap()
        .expect("the queued run is claimed");
    assert_eq!(claim.run.id, created.run.id);
    rt.audit(DEFAULT_WORKSPACE, rec("config.changed"))
        .await
        .unwrap();
    let lines = rt.audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    assert!(lines.len() >= 3, "{lines:?}");
    // Controls: ordinary rows may be updated and deleted by the runtime role.
    exec(&rt, "UPDATE workspaces SET name = name")
        .await
        .unwrap();
    exec(&rt, "DELETE FROM webhook_deliveries").await.unwrap();

    // The refusals.
    for (what, sql, expect) in [
        (
            "UPDATE",
            "UPDATE audit_events SET line = line",
            "permission denied",
        ),
        ("DELETE", "DELETE FROM audit_events", "permission denied"),
        ("TRUNCATE", "TRUNCATE audit_events", "permission denied"),
        (
            "DROP TRIGGER",
            "DROP TRIGGER audit_events_no_update_delete ON audit_events",
            "must be owner",
        ),
        (
            "DISABLE TRIGGER",
            "ALTER TABLE audit_events DISABLE TRIGGER ALL",
            "must be owner",
        ),
        (
            "replace the trigger function",
            "CREATE OR REPLACE FUNCTION airlock_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN OLD; END $$",
            "",
        ),
        (
            "CREATE TABLE",
            "CREATE TABLE shadow (x int)",
            "permission denied",
        ),
        (
            "rewrite the schema record",
            "DELETE FROM schema_migrations",
            "permission denied",
        ),
    ] {
        let err = exec(&rt, sql)
            .await
            .expect_err(&format!("the runtime role could {what}"));
        assert!(err.contains(expect), "{what}: {err}");
    }
    assert_eq!(
        rt.audit_lines(DEFAULT_WORKSPACE).await.unwrap(),
        lines,
        "the log is unchanged"
    );

    // Control: the owner can drop the trigger, and then delete; the runtime
    // role still cannot (its refusal is the grant, not the trigger).
    exec(&owner_store, "DELETE FROM audit_events WHERE seq = 1")
        .await
        .expect_err("the trigger refuses even the owner while it exists");
    exec(
        &owner_store,
        "DROP TRIGGER audit_events_no_update_delete ON audit_events; DROP TRIGGER audit_events_no_truncate ON audit_events",
    )
    .await
    .unwrap();
    let err = exec(&rt, "DELETE FROM audit_events").await.unwrap_err();
    assert!(err.contains("permission denied"), "{err}");
    exec(&owner_store, "TRUNCATE audit_events").await.unwrap();

    rt.pool().close().await;
    owner_store.pool().close().await;
    drop_pg(db).await;
    for role in [owner, runtime] {
        let _ = sqlx::raw_sql(&format!("DROP ROLE IF EXISTS {role}"))
            .execute(&mut admin)
            .await;
    }
}
