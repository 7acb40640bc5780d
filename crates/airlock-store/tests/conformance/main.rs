//! One conformance suite, run against both backends: every case is a
//! function of a fresh `Store`, instantiated once on SQLite (a temp file)
//! and once on PostgreSQL (a fresh database on 127.0.0.1:5432).
//!
//! One test binary; the cases live in one file per resource, named like the
//! store's own files (`runs.rs`, `execution.rs`, `identity.rs`, …). This
//! file holds the backends, the `both!` macro and the helpers they share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use airlock_store::*;
use sqlx::Connection;

async fn sqlite() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("airlock.db").display());
    (Store::open(&url).await.unwrap(), dir)
}

const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

async fn postgres() -> Option<(Store, String)> {
    sqlx::any::install_default_drivers();
    let mut admin = match sqlx::AnyConnection::connect(PG_ADMIN).await {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var("AIRLOCK_TEST_SKIP_POSTGRES").is_ok(),
                "PostgreSQL at 127.0.0.1:5432 is required for the conformance suite ({e}); set AIRLOCK_TEST_SKIP_POSTGRES=1 to skip locally"
            );
            return None;
        }
    };
    let name = random_id("airlock_test").to_lowercase();
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let store = Store::open(&format!("postgres://postgres@127.0.0.1:5432/{name}"))
        .await
        .unwrap();
    Some((store, name))
}

async fn drop_pg(name: String) {
    if let Ok(mut admin) = sqlx::AnyConnection::connect(PG_ADMIN).await {
        let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await;
    }
}

macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let (store, _dir) = crate::sqlite().await;
                super::$name(store).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some((store, name)) = crate::postgres().await {
                    super::$name(store.clone()).await;
                    store.pool().close().await;
                    crate::drop_pg(name).await;
                }
            }
        }
    };
}

fn new_run(worker: &str) -> NewRun {
    NewRun {
        workspace_id: DEFAULT_WORKSPACE.into(),
        worker_id: worker.into(),
        input: serde_json::json!({"name": "ada"}),
        trigger: "manual".into(),
        actor: "tester".into(),
        plan_id: None,
        idempotency: None,
    }
}

// Workspace isolation. The cases named `*_workspace_scoped`,
// `*_per_workspace` and `*_never_cross_workspaces` put a record in a second
// workspace (`WS_B`) whose other keys (run id, token, secret name, version,
// an owner, an audit sequence number, the same worker, trigger index and
// fire instant …) match the call, and check that a call made for the first
// workspace neither sees, counts nor changes it.
// `scripts/mutate_workspace_predicates` checks that every `workspace_id = $N`
// predicate in `src/` is pinned by such a case.

/// Sorts before `DEFAULT_WORKSPACE`, so an unfiltered scan meets it first.
const WS_B: &str = "ws_b";

fn run_in(workspace: &str, worker: &str) -> NewRun {
    NewRun {
        workspace_id: workspace.into(),
        ..new_run(worker)
    }
}

fn kinds(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| airlock_audit::from_json_line(l).unwrap().event.event_type)
        .collect()
}

fn rec(kind: &str) -> AuditRecord {
    AuditRecord::system(kind, None)
}

mod agents;
mod approvals;
mod audit;
mod execution;
mod identity;
mod maintenance;
mod plans;
mod retention;
mod roles;
mod runs;
mod schedules;
mod secrets;
mod store;
mod throttles;
mod uploads;
mod webhooks;
