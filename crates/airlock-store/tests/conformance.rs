//! One conformance suite, run against both backends: every case is a
//! function of a fresh `Store`, instantiated once on SQLite (a temp file)
//! and once on PostgreSQL (a fresh database on 127.0.0.1:5432).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

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
                let (store, _dir) = super::sqlite().await;
                super::$name(store).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some((store, name)) = super::postgres().await {
                    super::$name(store.clone()).await;
                    store.pool().close().await;
                    super::drop_pg(name).await;
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

async fn run_4_create_get_list_and_workspace_isolation(store: Store) {
    let a = store.create_run(new_run("hello")).await.unwrap().run;
    assert_eq!(a.state, RunState::Queued);
    assert_eq!(
        store
            .get_run(DEFAULT_WORKSPACE, &a.id)
            .await
            .unwrap()
            .unwrap(),
        a
    );
    // Another workspace's id answers exactly like a missing one.
    store.ensure_workspace("ws_other", "other").await.unwrap();
    assert_eq!(store.get_run("ws_other", &a.id).await.unwrap(), None);
    assert_eq!(
        store
            .get_run(DEFAULT_WORKSPACE, "run_missing")
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .list_runs("ws_other", None, 10, None)
            .await
            .unwrap()
            .is_empty()
    );
    let b = store.create_run(new_run("hello")).await.unwrap().run;
    let page = store
        .list_runs(DEFAULT_WORKSPACE, None, 1, None)
        .await
        .unwrap();
    assert_eq!(page.len(), 1);
    let rest = store
        .list_runs(DEFAULT_WORKSPACE, None, 10, Some(&page[0].id))
        .await
        .unwrap();
    let mut ids: Vec<String> = page.iter().chain(&rest).map(|r| r.id.clone()).collect();
    ids.sort();
    let mut want = vec![a.id.clone(), b.id.clone()];
    want.sort();
    assert_eq!(ids, want, "cursor pagination covers every run once");
    assert_eq!(
        store
            .queue_position(DEFAULT_WORKSPACE, &a.id)
            .await
            .unwrap(),
        Some(1)
    );
}
both!(run_4_create_get_list_and_workspace_isolation);

async fn api_8_idempotency_same_different_concurrent(store: Store) {
    let mut r = new_run("hello");
    r.idempotency = Some(("key-1".into(), "hash-a".into()));
    let first = store.create_run(r.clone()).await.unwrap();
    assert!(first.created);
    let again = store.create_run(r.clone()).await.unwrap();
    assert!(!again.created);
    assert_eq!(again.run.id, first.run.id);
    let mut different = r.clone();
    different.idempotency = Some(("key-1".into(), "hash-b".into()));
    assert!(matches!(
        store.create_run(different).await,
        Err(StoreError::IdempotencyConflict)
    ));
    // Concurrent duplicates: exactly one run.
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let s = store.clone();
        let mut c = new_run("hello");
        c.idempotency = Some(("key-2".into(), "hash-c".into()));
        tasks.push(tokio::spawn(async move { s.create_run(c).await }));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut created = 0;
    for t in tasks {
        let c = t.await.unwrap().unwrap();
        created += usize::from(c.created);
        ids.insert(c.run.id);
    }
    assert_eq!((created, ids.len()), (1, 1));
    let total = store
        .list_runs(DEFAULT_WORKSPACE, None, 100, None)
        .await
        .unwrap()
        .len();
    assert_eq!(total, 2, "one run per key, nothing half-created");
}
both!(api_8_idempotency_same_different_concurrent);

async fn dur_1_claim_lease_and_fencing(store: Store) {
    let run = store.create_run(new_run("hello")).await.unwrap().run;
    let a = store
        .claim_next("node-a", Duration::from_millis(0), &[])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.run.id, run.id);
    assert!(
        store
            .claim_next("node-b", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .is_none(),
        "claimed once"
    );
    std::thread::sleep(Duration::from_millis(5));
    // The lease expired before the workload started: requeued.
    let reaped = store.reap_expired(&|_| false).await.unwrap();
    assert_eq!(reaped, vec![(run.id.clone(), RunState::Queued)]);
    let b = store
        .claim_next("node-b", Duration::from_secs(60), &[])
        .await
        .unwrap()
        .unwrap();
    assert!(b.token > a.token);
    // The stale executor's writes are refused by the store.
    assert!(matches!(
        store
            .append_event(&run.id, a.token, "log", &serde_json::json!({}))
            .await,
        Err(StoreError::StaleToken)
    ));
    assert!(matches!(
        store.mark_workload_started(&run.id, a.token).await,
        Err(StoreError::StaleToken)
    ));
    assert!(matches!(
        store
            .finish_run(&run.id, a.token, RunState::Succeeded, &Finish::default())
            .await,
        Err(StoreError::StaleToken)
    ));
    assert!(matches!(
        store
            .renew_lease(&run.id, a.token, Duration::from_secs(1))
            .await,
        Err(StoreError::StaleToken)
    ));
    // Positive control: the current holder writes.
    store
        .append_event(&run.id, b.token, "log", &serde_json::json!({"line": "hi"}))
        .await
        .unwrap();
    store
        .finish_run(
            &run.id,
            b.token,
            RunState::Succeeded,
            &Finish {
                exit_code: Some(0),
                ..Finish::default()
            },
        )
        .await
        .unwrap();
    let done = store
        .get_run(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.state, RunState::Succeeded);
    assert_eq!(
        store
            .events(DEFAULT_WORKSPACE, &run.id, 0, 100)
            .await
            .unwrap()
            .len(),
        1
    );
}
both!(dur_1_claim_lease_and_fencing);

async fn dur_2_reaper_requeues_or_marks_unknown(store: Store) {
    let plain = store.create_run(new_run("side-effects")).await.unwrap().run;
    let c = store
        .claim_next("a", Duration::from_millis(0), &[])
        .await
        .unwrap()
        .unwrap();
    store
        .mark_workload_started(&plain.id, c.token)
        .await
        .unwrap();
    let retry = store
        .create_run(new_run("idempotent-one"))
        .await
        .unwrap()
        .run;
    let c2 = store
        .claim_next("a", Duration::from_millis(0), &[])
        .await
        .unwrap()
        .unwrap();
    store
        .mark_workload_started(&retry.id, c2.token)
        .await
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let mut reaped = store
        .reap_expired(&|w| w == "idempotent-one")
        .await
        .unwrap();
    reaped.sort();
    let mut want = vec![
        (plain.id.clone(), RunState::Unknown),
        (retry.id.clone(), RunState::Queued),
    ];
    want.sort();
    assert_eq!(reaped, want);
}
both!(dur_2_reaper_requeues_or_marks_unknown);

async fn run_5_cancel_is_idempotent(store: Store) {
    let q = store.create_run(new_run("hello")).await.unwrap().run;
    assert_eq!(
        store
            .cancel_run(DEFAULT_WORKSPACE, &q.id, "me")
            .await
            .unwrap(),
        RunState::Cancelled
    );
    assert_eq!(
        store
            .cancel_run(DEFAULT_WORKSPACE, &q.id, "me")
            .await
            .unwrap(),
        RunState::Cancelled
    );
    assert!(
        store
            .claim_next("a", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .is_none(),
        "a cancelled run never starts"
    );
    let r = store.create_run(new_run("hello")).await.unwrap().run;
    let c = store
        .claim_next("a", Duration::from_secs(60), &[])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .cancel_run(DEFAULT_WORKSPACE, &r.id, "me")
            .await
            .unwrap(),
        RunState::Running
    );
    assert!(store.cancel_requested(&r.id).await.unwrap());
    store
        .finish_run(&r.id, c.token, RunState::Cancelled, &Finish::default())
        .await
        .unwrap();
    assert_eq!(
        store
            .cancel_run(DEFAULT_WORKSPACE, &r.id, "me")
            .await
            .unwrap(),
        RunState::Cancelled,
        "terminal unchanged"
    );
    assert!(matches!(
        store.cancel_run("ws_nope", &r.id, "me").await,
        Err(StoreError::NotFound)
    ));
}
both!(run_5_cancel_is_idempotent);

async fn run_7_claim_skips_workers_at_their_cap(store: Store) {
    let a = store.create_run(new_run("busy")).await.unwrap().run;
    let b = store.create_run(new_run("free")).await.unwrap().run;
    let c = store
        .claim_next("n", Duration::from_secs(60), &["busy".to_string()])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.run.id, b.id);
    assert_eq!(
        store
            .queue_position(DEFAULT_WORKSPACE, &a.id)
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store.running_per_worker().await.unwrap(),
        vec![("free".to_string(), 1)]
    );
}
both!(run_7_claim_skips_workers_at_their_cap);

async fn dur_3_plans_are_single_use_and_expire(store: Store) {
    let plan = serde_json::json!({"worker": "hello", "input_hash": "abc"});
    let (token, stored) = store
        .create_plan(DEFAULT_WORKSPACE, "hello", &plan, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        store
            .consume_plan(DEFAULT_WORKSPACE, &token)
            .await
            .unwrap()
            .plan,
        stored.plan
    );
    assert!(matches!(
        store.consume_plan(DEFAULT_WORKSPACE, &token).await,
        Err(StoreError::Plan("token already used"))
    ));
    let mut tampered = token.clone();
    tampered.push('0');
    assert!(matches!(
        store.consume_plan(DEFAULT_WORKSPACE, &tampered).await,
        Err(StoreError::Plan("unknown or tampered token"))
    ));
    let (short, _) = store
        .create_plan(DEFAULT_WORKSPACE, "hello", &plan, Duration::from_millis(0))
        .await
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    assert!(matches!(
        store.consume_plan(DEFAULT_WORKSPACE, &short).await,
        Err(StoreError::Plan("token expired"))
    ));
    // Another workspace cannot use the token.
    let (t2, _) = store
        .create_plan(DEFAULT_WORKSPACE, "hello", &plan, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(store.consume_plan("ws_other", &t2).await.is_err());
    // Racing consumers: exactly one wins.
    let (t3, _) = store
        .create_plan(DEFAULT_WORKSPACE, "hello", &plan, Duration::from_secs(60))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = store.clone();
        let t = t3.clone();
        tasks.push(tokio::spawn(async move {
            s.consume_plan(DEFAULT_WORKSPACE, &t).await.is_ok()
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += usize::from(t.await.unwrap());
    }
    assert_eq!(wins, 1);
}
both!(dur_3_plans_are_single_use_and_expire);

async fn aud_2_state_changes_are_chained_and_verify(store: Store) {
    let r = store.create_run(new_run("hello")).await.unwrap().run;
    let c = store
        .claim_next("a", Duration::from_secs(60), &[])
        .await
        .unwrap()
        .unwrap();
    store
        .finish_run(&r.id, c.token, RunState::Succeeded, &Finish::default())
        .await
        .unwrap();
    let lines = store.audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    let events: Vec<_> = lines
        .iter()
        .map(|l| airlock_audit::from_json_line(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.event_type.as_str()).collect();
    assert_eq!(kinds, ["run.created", "run.claimed", "run.finished"]);
    airlock_audit::chain::verify(events.iter()).unwrap();
}
both!(aud_2_state_changes_are_chained_and_verify);

async fn aud_3_database_refuses_update_and_delete_of_audit_rows(store: Store) {
    store.create_run(new_run("hello")).await.unwrap();
    let pool = store.pool();
    let update = sqlx::query("UPDATE audit_events SET line = 'x'")
        .execute(pool)
        .await;
    assert!(update.is_err(), "UPDATE must be refused");
    let delete = sqlx::query("DELETE FROM audit_events").execute(pool).await;
    assert!(delete.is_err(), "DELETE must be refused");
    if store.backend() == Backend::Postgres {
        assert!(
            sqlx::query("TRUNCATE audit_events")
                .execute(pool)
                .await
                .is_err(),
            "TRUNCATE must be refused"
        );
    }
    assert_eq!(
        store.audit_lines(DEFAULT_WORKSPACE).await.unwrap().len(),
        1,
        "nothing changed"
    );
    // Positive control: ordinary tables accept updates.
    assert!(
        sqlx::query("UPDATE workspaces SET name = 'renamed'")
            .execute(pool)
            .await
            .is_ok()
    );
}
both!(aud_3_database_refuses_update_and_delete_of_audit_rows);

async fn api_7_ready_reports_current_schema(store: Store) {
    assert!(store.ready().await.unwrap());
}
both!(api_7_ready_reports_current_schema);

async fn ops_2_queueing_a_run_notifies_listeners_on_postgres(store: Store) {
    let listener = store.subscribe().await.unwrap();
    match (store.backend(), listener) {
        (Backend::Sqlite, None) => {}
        (Backend::Postgres, Some(mut l)) => {
            let run = store.create_run(new_run("hello")).await.unwrap().run;
            let n = tokio::time::timeout(Duration::from_secs(10), l.recv())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(n.payload(), run.id);
        }
        (b, l) => panic!("{b:?} listener {}", l.is_some()),
    }
}
both!(ops_2_queueing_a_run_notifies_listeners_on_postgres);

async fn key_4_secret_records_are_workspace_scoped_and_audited(store: Store) {
    store
        .put_secret(DEFAULT_WORKSPACE, "GITHUB_TOKEN", 1, "sealed-v1", "me")
        .await
        .unwrap();
    store
        .put_secret(DEFAULT_WORKSPACE, "GITHUB_TOKEN", 2, "sealed-v2", "me")
        .await
        .unwrap();
    assert_eq!(
        store
            .get_secret(DEFAULT_WORKSPACE, "GITHUB_TOKEN")
            .await
            .unwrap(),
        Some((2, "sealed-v2".to_string()))
    );
    assert_eq!(
        store.get_secret("ws_other", "GITHUB_TOKEN").await.unwrap(),
        None
    );
    let list = store.list_secrets(DEFAULT_WORKSPACE).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        (list[0].0.as_str(), list[0].1, list[0].3),
        ("GITHUB_TOKEN", 2, None)
    );
    store
        .secret_read(DEFAULT_WORKSPACE, "GITHUB_TOKEN", "run_x")
        .await
        .unwrap();
    assert!(
        store.list_secrets(DEFAULT_WORKSPACE).await.unwrap()[0]
            .3
            .is_some()
    );
    assert!(
        store
            .delete_secret(DEFAULT_WORKSPACE, "GITHUB_TOKEN", "me")
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete_secret(DEFAULT_WORKSPACE, "GITHUB_TOKEN", "me")
            .await
            .unwrap()
    );
    let kinds: Vec<String> = store
        .audit_lines(DEFAULT_WORKSPACE)
        .await
        .unwrap()
        .iter()
        .map(|l| airlock_audit::from_json_line(l).unwrap().event.event_type)
        .collect();
    assert_eq!(
        kinds,
        [
            "secret.written",
            "secret.written",
            "secret.read",
            "secret.deleted"
        ]
    );
    store
        .put_data_key(DEFAULT_WORKSPACE, 1, "wrapped-1")
        .await
        .unwrap();
    store
        .put_data_key(DEFAULT_WORKSPACE, 1, "rewrapped-1")
        .await
        .unwrap();
    assert_eq!(
        store.data_key(DEFAULT_WORKSPACE).await.unwrap(),
        Some((1, "rewrapped-1".to_string()))
    );
}
both!(key_4_secret_records_are_workspace_scoped_and_audited);
