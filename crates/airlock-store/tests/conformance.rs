//! One conformance suite, run against both backends: every case is a
//! function of a fresh `Store`, instantiated once on SQLite (a temp file)
//! and once on PostgreSQL (a fresh database on 127.0.0.1:5432).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use airlock_protocol::actions::{ActionState, Settlement};
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

// ------------------------------------------------------------ workspace isolation of existing queries
//
// Each case below puts a record in a second workspace whose other keys
// (run id, token, secret name, version …) match the call, and checks that a
// call made for the first workspace neither sees nor changes it.
// `scripts/mutate_workspace_predicates` checks that every `workspace_id = $N`
// predicate in `src/` is pinned by a case here.

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

async fn aud_2_audit_chains_are_per_workspace(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    for _ in 0..3 {
        store
            .audit(DEFAULT_WORKSPACE, AuditRecord::system("a.event", None))
            .await
            .unwrap();
    }
    store
        .audit(WS_B, AuditRecord::system("b.event", None))
        .await
        .unwrap();
    store
        .audit(DEFAULT_WORKSPACE, AuditRecord::system("a.event", None))
        .await
        .unwrap();
    for (ws, want) in [(DEFAULT_WORKSPACE, 4), (WS_B, 1)] {
        let lines = store.audit_lines(ws).await.unwrap();
        let events: Vec<_> = lines
            .iter()
            .map(|l| airlock_audit::from_json_line(l).unwrap())
            .collect();
        assert_eq!(events.len(), want, "{ws} sees only its own events");
        let seqs: Vec<u64> = events.iter().map(|e| e.event.seq).collect();
        assert_eq!(seqs, (1..=want as u64).collect::<Vec<_>>(), "{ws}");
        assert!(events.iter().all(|e| e.event.workspace_id == ws));
        airlock_audit::chain::verify(events.iter()).unwrap();
    }
}
both!(aud_2_audit_chains_are_per_workspace);

async fn run_4_runs_events_artifacts_and_cancel_are_workspace_scoped(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    // B's run is the oldest: as a list cursor it would hide every A run.
    let rb = store.create_run(run_in(WS_B, "hello")).await.unwrap().run;
    tokio::time::sleep(Duration::from_millis(3)).await;
    let ra1 = store.create_run(new_run("hello")).await.unwrap().run;
    let ra2 = store.create_run(new_run("hello")).await.unwrap().run;
    let page = store
        .list_runs(DEFAULT_WORKSPACE, None, 10, Some(&rb.id))
        .await
        .unwrap();
    assert_eq!(page.len(), 2, "another workspace's id is not a cursor");
    let b_runs: Vec<String> = store
        .list_runs(WS_B, None, 10, None)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(b_runs, vec![rb.id.clone()]);
    assert_eq!(store.get_run(WS_B, &ra1.id).await.unwrap(), None);

    // Events and artifacts of an A run, asked for as B.
    let c = store
        .claim_run("node", Duration::from_secs(60), &ra1.id)
        .await
        .unwrap()
        .unwrap();
    store
        .append_event(&ra1.id, c.token, "log", &serde_json::json!({"line": "x"}))
        .await
        .unwrap();
    store
        .add_artifact(
            &ra1.id,
            c.token,
            &Artifact {
                name: "out.txt".into(),
                digest: "sha256:00".into(),
                size: 1,
                media_type: "text/plain".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .events(DEFAULT_WORKSPACE, &ra1.id, 0, 100)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .events(WS_B, &ra1.id, 0, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .artifacts(DEFAULT_WORKSPACE, &ra1.id)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(store.artifacts(WS_B, &ra1.id).await.unwrap().is_empty());

    // Cancelling an A run as B: not found, and nothing changes.
    assert!(matches!(
        store.cancel_run(WS_B, &ra2.id, "mallory").await,
        Err(StoreError::NotFound)
    ));
    let q = store
        .get_run(DEFAULT_WORKSPACE, &ra2.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((q.state, q.cancel_requested), (RunState::Queued, false));
    assert!(matches!(
        store.cancel_run(WS_B, &ra1.id, "mallory").await,
        Err(StoreError::NotFound)
    ));
    assert!(!store.cancel_requested(&ra1.id).await.unwrap());
    assert!(
        !kinds(&store.audit_lines(WS_B).await.unwrap())
            .iter()
            .any(|k| k == "run.cancel_requested")
    );
    // Positive control.
    assert_eq!(
        store
            .cancel_run(DEFAULT_WORKSPACE, &ra1.id, "me")
            .await
            .unwrap(),
        RunState::Running
    );
    assert!(store.cancel_requested(&ra1.id).await.unwrap());
}
both!(run_4_runs_events_artifacts_and_cancel_are_workspace_scoped);

async fn api_8_idempotency_keys_are_per_workspace(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let keyed = |ws: &str| {
        let mut r = run_in(ws, "hello");
        r.idempotency = Some(("key-1".into(), "hash-a".into()));
        r
    };
    // Same actor, key and request hash in two workspaces: two runs.
    let b = store.create_run(keyed(WS_B)).await.unwrap();
    let a = store.create_run(keyed(DEFAULT_WORKSPACE)).await.unwrap();
    assert!(a.created && b.created);
    assert_ne!(a.run.id, b.run.id);
    for _ in 0..2 {
        let again = store.create_run(keyed(DEFAULT_WORKSPACE)).await.unwrap();
        assert!(!again.created);
        assert_eq!(again.run.id, a.run.id);
        let again_b = store.create_run(keyed(WS_B)).await.unwrap();
        assert!(!again_b.created);
        assert_eq!(again_b.run.id, b.run.id);
    }
}
both!(api_8_idempotency_keys_are_per_workspace);

async fn dur_3_plan_tokens_are_workspace_scoped(store: Store) {
    let plan = serde_json::json!({"worker": "hello"});
    let (token, stored) = store
        .create_plan(DEFAULT_WORKSPACE, "hello", &plan, Duration::from_secs(60))
        .await
        .unwrap();
    // To another workspace the token does not exist at all.
    assert!(matches!(
        store.consume_plan(WS_B, &token).await,
        Err(StoreError::Plan("unknown or tampered token"))
    ));
    // …and it is still unused in its own.
    assert_eq!(
        store
            .consume_plan(DEFAULT_WORKSPACE, &token)
            .await
            .unwrap()
            .id,
        stored.id
    );
}
both!(dur_3_plan_tokens_are_workspace_scoped);

async fn key_4_vault_records_never_cross_workspaces(store: Store) {
    store
        .put_data_key(DEFAULT_WORKSPACE, 1, "a1")
        .await
        .unwrap();
    store
        .put_data_key(DEFAULT_WORKSPACE, 2, "a2")
        .await
        .unwrap();
    assert_eq!(store.data_key(WS_B).await.unwrap(), None);
    store.put_data_key(WS_B, 1, "b1").await.unwrap();
    assert_eq!(
        store.data_key(WS_B).await.unwrap(),
        Some((1, "b1".to_string()))
    );
    assert_eq!(
        store.data_key(DEFAULT_WORKSPACE).await.unwrap(),
        Some((2, "a2".to_string()))
    );
    assert_eq!(store.data_key_version(WS_B, 2).await.unwrap(), None);
    assert_eq!(
        store.data_key_version(WS_B, 1).await.unwrap(),
        Some("b1".to_string())
    );

    store
        .put_secret(DEFAULT_WORKSPACE, "TOKEN", 1, "sealed-a", "me")
        .await
        .unwrap();
    store
        .put_secret(WS_B, "OTHER", 1, "sealed-b", "me")
        .await
        .unwrap();
    assert_eq!(store.get_secret(WS_B, "TOKEN").await.unwrap(), None);
    let names: Vec<String> = store
        .list_secrets(WS_B)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(names, ["OTHER"]);
    // B reading or deleting A's secret name touches nothing of A's.
    store.secret_read(WS_B, "TOKEN", "run_x").await.unwrap();
    assert!(!store.delete_secret(WS_B, "TOKEN", "mallory").await.unwrap());
    let a = store.list_secrets(DEFAULT_WORKSPACE).await.unwrap();
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].0.as_str(), a[0].3), ("TOKEN", None));
    assert_eq!(
        store.get_secret(DEFAULT_WORKSPACE, "TOKEN").await.unwrap(),
        Some((1, "sealed-a".to_string()))
    );
}
both!(key_4_vault_records_never_cross_workspaces);

// ------------------------------------------------------------ identity (IAM-1 … IAM-7)

fn rec(kind: &str) -> AuditRecord {
    AuditRecord::system(kind, None)
}

async fn iam_1_bootstrap_creates_the_first_owner_exactly_once(store: Store) {
    assert_eq!(store.bootstrap_state().await.unwrap(), BootstrapState::Open);
    assert_eq!(
        store.bootstrap_begin("hash-1", 1_000).await.unwrap(),
        BootstrapState::Open
    );
    // A new begin replaces the earlier unused token.
    assert_eq!(
        store.bootstrap_begin("hash-2", 1_001).await.unwrap(),
        BootstrapState::Open
    );
    let claim = |s: &Store, token: &'static str, user: String| {
        let s = s.clone();
        async move {
            s.bootstrap_claim(token, &user, "phc", DEFAULT_WORKSPACE, "Acme", 2_000)
                .await
                .unwrap()
        }
    };
    assert_eq!(claim(&store, "hash-1", "old".into()).await, None);
    assert_eq!(claim(&store, "wrong", "x".into()).await, None);
    // A taken username fails the claim and leaves the bootstrap open.
    store.create_user("taken", None, 1).await.unwrap();
    assert_eq!(claim(&store, "hash-2", "taken".into()).await, None);
    assert_eq!(store.bootstrap_state().await.unwrap(), BootstrapState::Open);
    assert_eq!(
        store.count_role(DEFAULT_WORKSPACE, "owner").await.unwrap(),
        0
    );

    // Racing claims with the right token: exactly one owner.
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(tokio::spawn(claim(&store, "hash-2", format!("owner{i}"))));
    }
    let mut winners = Vec::new();
    for t in tasks {
        if let Some(u) = t.await.unwrap() {
            winners.push(u);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim wins");
    let owner = &winners[0];
    assert_eq!(store.count_users().await.unwrap(), 2);
    assert_eq!(
        store.count_role(DEFAULT_WORKSPACE, "owner").await.unwrap(),
        1
    );
    let members = store.list_members(DEFAULT_WORKSPACE).await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(
        (
            members[0].user_id.as_str(),
            members[0].role.as_str(),
            members[0].workspace_name.as_str()
        ),
        (owner.id.as_str(), "owner", "Acme")
    );
    assert_eq!(
        store.user_by_id(&owner.id).await.unwrap().as_ref(),
        Some(owner)
    );
    let events: Vec<_> = store
        .audit_lines(DEFAULT_WORKSPACE)
        .await
        .unwrap()
        .iter()
        .map(|l| airlock_audit::from_json_line(l).unwrap().event)
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "bootstrap.completed");
    assert_eq!(
        events[0].actor,
        airlock_audit::chain::Actor::Human(owner.id.clone())
    );

    // Closed for good.
    assert_eq!(
        store.bootstrap_state().await.unwrap(),
        BootstrapState::Closed
    );
    assert_eq!(
        store.bootstrap_begin("hash-3", 3_000).await.unwrap(),
        BootstrapState::Closed
    );
    assert_eq!(claim(&store, "hash-2", "late".into()).await, None);
    assert_eq!(claim(&store, "hash-3", "later".into()).await, None);
    assert_eq!(store.count_users().await.unwrap(), 2);
}
both!(iam_1_bootstrap_creates_the_first_owner_exactly_once);

async fn iam_1_bootstrap_is_closed_once_an_owner_exists(store: Store) {
    assert_eq!(
        store.bootstrap_begin("hash-1", 1).await.unwrap(),
        BootstrapState::Open
    );
    let u = store.create_user("ada", None, 1).await.unwrap();
    store.create_workspace("Ada's", &u.id, 2).await.unwrap();
    assert_eq!(
        store.bootstrap_state().await.unwrap(),
        BootstrapState::Closed
    );
    assert_eq!(
        store.bootstrap_begin("hash-2", 3).await.unwrap(),
        BootstrapState::Closed
    );
    let claimed = store
        .bootstrap_claim("hash-1", "eve", "phc", DEFAULT_WORKSPACE, "x", 4)
        .await
        .unwrap();
    assert_eq!(claimed, None);
    assert_eq!(store.user_by_name("eve").await.unwrap(), None);
}
both!(iam_1_bootstrap_is_closed_once_an_owner_exists);

async fn iam_2_users_are_unique_and_found_by_name_and_id(store: Store) {
    assert_eq!(store.count_users().await.unwrap(), 0);
    let ada = store.create_user("ada", Some("phc-1"), 10).await.unwrap();
    assert!(ada.id.starts_with("usr_"));
    assert_eq!(
        (
            ada.username.as_str(),
            ada.password_hash.as_deref(),
            ada.created_at,
            ada.disabled
        ),
        ("ada", Some("phc-1"), 10, false)
    );
    assert!(matches!(
        store.create_user("ada", None, 11).await,
        Err(StoreError::Conflict)
    ));
    let bob = store.create_user("bob", None, 12).await.unwrap();
    assert_eq!(bob.password_hash, None);
    assert_eq!(store.user_by_name("ada").await.unwrap(), Some(ada.clone()));
    assert_eq!(store.user_by_id(&ada.id).await.unwrap(), Some(ada.clone()));
    assert_eq!(store.user_by_id(&bob.id).await.unwrap(), Some(bob.clone()));
    assert_eq!(store.user_by_name("nobody").await.unwrap(), None);
    assert_eq!(store.user_by_id("usr_missing").await.unwrap(), None);
    store.set_password(&bob.id, "phc-2").await.unwrap();
    assert_eq!(
        store
            .user_by_name("bob")
            .await
            .unwrap()
            .unwrap()
            .password_hash
            .as_deref(),
        Some("phc-2")
    );
    assert!(matches!(
        store.set_password("usr_missing", "phc").await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.count_users().await.unwrap(), 2);
    let json = serde_json::to_value(&ada).unwrap();
    assert!(json.get("password_hash").is_none(), "{json}");
}
both!(iam_2_users_are_unique_and_found_by_name_and_id);

async fn iam_6_members_are_workspace_scoped(store: Store) {
    let alice = store.create_user("alice", None, 1).await.unwrap();
    let bob = store.create_user("bob", None, 1).await.unwrap();
    let carol = store.create_user("carol", None, 1).await.unwrap();
    let a = store.create_workspace("A", &alice.id, 10).await.unwrap();
    let b = store.create_workspace("B", &bob.id, 20).await.unwrap();
    assert!(a.starts_with("ws_") && a != b);
    assert_eq!(
        kinds(&store.audit_lines(&b).await.unwrap()),
        ["workspace.created"]
    );

    store
        .set_member(&a, &carol.id, "viewer", 30, rec("member.added"))
        .await
        .unwrap();
    store
        .set_member(&b, &carol.id, "admin", 40, rec("member.added"))
        .await
        .unwrap();
    let names = |ms: Vec<Membership>| -> Vec<(String, String)> {
        ms.into_iter().map(|m| (m.username, m.role)).collect()
    };
    assert_eq!(
        names(store.list_members(&a).await.unwrap()),
        [
            ("alice".into(), "owner".into()),
            ("carol".into(), "viewer".into())
        ]
    );
    assert_eq!(
        names(store.list_members(&b).await.unwrap()),
        [
            ("bob".into(), "owner".into()),
            ("carol".into(), "admin".into())
        ]
    );
    assert_eq!(store.membership(&a, &bob.id).await.unwrap(), None);
    assert_eq!(
        store.membership(&a, &carol.id).await.unwrap(),
        Some(Membership {
            workspace_id: a.clone(),
            workspace_name: "A".into(),
            user_id: carol.id.clone(),
            username: "carol".into(),
            role: "viewer".into(),
            created_at: 30,
        })
    );
    // Changing a role changes it in that workspace only.
    store
        .set_member(&a, &carol.id, "operator", 50, rec("member.role_changed"))
        .await
        .unwrap();
    assert_eq!(
        store.membership(&a, &carol.id).await.unwrap().unwrap().role,
        "operator"
    );
    assert_eq!(
        store.membership(&b, &carol.id).await.unwrap().unwrap().role,
        "admin"
    );
    assert_eq!(store.count_role(&a, "owner").await.unwrap(), 1);
    assert_eq!(store.count_role(&a, "admin").await.unwrap(), 0);
    assert_eq!(store.count_role(&b, "admin").await.unwrap(), 1);
    let of_carol: Vec<(String, String)> = store
        .memberships_of(&carol.id)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.workspace_name, m.role))
        .collect();
    assert_eq!(
        of_carol,
        [
            ("A".into(), "operator".into()),
            ("B".into(), "admin".into())
        ]
    );

    // Removing from A: bob is not in A (his B membership stays); carol's
    // A keys are revoked, her B key is not.
    assert!(
        !store
            .remove_member(&a, &bob.id, 60, rec("member.removed"))
            .await
            .unwrap()
    );
    assert!(store.membership(&b, &bob.id).await.unwrap().is_some());
    let key = |ws: &str, hash: &str| {
        let (s, ws, hash, user) = (
            store.clone(),
            ws.to_string(),
            hash.to_string(),
            carol.id.clone(),
        );
        async move {
            s.create_api_key(
                &ws,
                &user,
                "ci",
                "ak_x",
                &hash,
                &[],
                None,
                70,
                rec("api_key.created"),
            )
            .await
            .unwrap()
        }
    };
    key(&a, "ka").await;
    key(&b, "kb").await;
    assert!(
        store
            .remove_member(&a, &carol.id, 80, rec("member.removed"))
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .api_key_by_hash("ka")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        Some(80)
    );
    assert_eq!(
        store
            .api_key_by_hash("kb")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    assert_eq!(store.membership(&a, &carol.id).await.unwrap(), None);
    assert!(store.membership(&b, &carol.id).await.unwrap().is_some());
    assert!(
        !store
            .remove_member(&a, &carol.id, 90, rec("member.removed"))
            .await
            .unwrap()
    );
    assert_eq!(
        kinds(&store.audit_lines(&a).await.unwrap()),
        [
            "workspace.created",
            "member.added",
            "member.role_changed",
            "api_key.created",
            "member.removed"
        ]
    );
}
both!(iam_6_members_are_workspace_scoped);

async fn iam_3_sessions_store_hashes_and_revoke(store: Store) {
    let u = store.create_user("u", None, 1).await.unwrap();
    let v = store.create_user("v", None, 1).await.unwrap();
    let s1 = store
        .create_session(
            &u.id,
            "t1",
            "c1",
            false,
            Some("ua"),
            Some("10.0.0.1"),
            100,
            1_000,
        )
        .await
        .unwrap();
    assert!(s1.id.starts_with("ses_"));
    let s2 = store
        .create_session(&u.id, "t2", "c2", true, None, None, 110, 1_000)
        .await
        .unwrap();
    let _s3 = store
        .create_session(&u.id, "t3", "c3", false, None, None, 120, 150)
        .await
        .unwrap();
    let sv = store
        .create_session(&v.id, "tv", "cv", false, None, None, 130, 1_000)
        .await
        .unwrap();
    assert_eq!(
        store.session_by_token_hash("t1").await.unwrap(),
        Some(s1.clone())
    );
    assert!(
        store
            .session_by_token_hash("t2")
            .await
            .unwrap()
            .unwrap()
            .mfa_pending
    );
    assert_eq!(store.session_by_token_hash("nope").await.unwrap(), None);
    store.touch_session(&s1.id, 200).await.unwrap();
    assert_eq!(
        store
            .session_by_token_hash("t1")
            .await
            .unwrap()
            .unwrap()
            .last_seen_at,
        200
    );
    // Expired (s3) sessions are not listed; newest activity first.
    let ids = |l: Vec<SessionRecord>| l.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_sessions(&u.id, 160).await.unwrap()),
        [s1.id.clone(), s2.id.clone()]
    );
    // Another user cannot revoke u's session.
    assert!(!store.revoke_session(&v.id, &s2.id, 170).await.unwrap());
    assert!(store.session_by_token_hash("t2").await.unwrap().is_some());
    assert!(store.revoke_session(&u.id, &s2.id, 170).await.unwrap());
    assert!(!store.revoke_session(&u.id, &s2.id, 171).await.unwrap());
    assert_eq!(store.session_by_token_hash("t2").await.unwrap(), None);
    assert_eq!(
        ids(store.list_sessions(&u.id, 160).await.unwrap()),
        vec![s1.id.clone()]
    );
    // All but the current one (only s3 is left unrevoked besides s1).
    assert_eq!(
        store
            .revoke_sessions_of(&u.id, Some(&s1.id), 300)
            .await
            .unwrap(),
        1
    );
    assert!(store.session_by_token_hash("t1").await.unwrap().is_some());
    assert_eq!(store.revoke_sessions_of(&u.id, None, 301).await.unwrap(), 1);
    assert_eq!(store.session_by_token_hash("t1").await.unwrap(), None);
    assert!(store.list_sessions(&u.id, 160).await.unwrap().is_empty());
    assert_eq!(ids(store.list_sessions(&v.id, 160).await.unwrap()), [sv.id]);
    let json = serde_json::to_value(&s1).unwrap();
    assert!(json.get("csrf_hash").is_none(), "{json}");
}
both!(iam_3_sessions_store_hashes_and_revoke);

async fn iam_5_api_keys_are_scoped_to_workspace_and_user(store: Store) {
    let u = store.create_user("u", None, 1).await.unwrap();
    let v = store.create_user("v", None, 1).await.unwrap();
    let a = store.create_workspace("A", &u.id, 2).await.unwrap();
    let b = store.create_workspace("B", &v.id, 3).await.unwrap();
    store
        .set_member(&b, &u.id, "operator", 4, rec("member.added"))
        .await
        .unwrap();
    store
        .set_member(&a, &v.id, "operator", 4, rec("member.added"))
        .await
        .unwrap();
    let scopes = vec!["runs:create".to_string(), "runs:read".to_string()];
    let k1 = store
        .create_api_key(
            &a,
            &u.id,
            "ci",
            "ak_1",
            "h1",
            &scopes,
            Some(10_000),
            100,
            rec("api_key.created"),
        )
        .await
        .unwrap();
    assert!(k1.id.starts_with("key_"));
    assert_eq!(
        (
            k1.scopes.clone(),
            k1.expires_at,
            k1.revoked_at,
            k1.last_used_at
        ),
        (scopes.clone(), Some(10_000), None, None)
    );
    let k2 = store
        .create_api_key(
            &b,
            &u.id,
            "ci",
            "ak_2",
            "h2",
            &[],
            None,
            110,
            rec("api_key.created"),
        )
        .await
        .unwrap();
    let k3 = store
        .create_api_key(
            &a,
            &v.id,
            "ci",
            "ak_3",
            "h3",
            &[],
            None,
            120,
            rec("api_key.created"),
        )
        .await
        .unwrap();
    assert_eq!(store.api_key_by_hash("h1").await.unwrap(), Some(k1.clone()));
    assert_eq!(store.api_key_by_hash("nope").await.unwrap(), None);
    assert_eq!(
        store.list_api_keys(&a, &u.id).await.unwrap(),
        vec![k1.clone()]
    );
    assert_eq!(
        store.list_api_keys(&b, &u.id).await.unwrap(),
        vec![k2.clone()]
    );
    assert_eq!(
        store.list_api_keys(&a, &v.id).await.unwrap(),
        vec![k3.clone()]
    );
    // A token hash is unique.
    assert!(
        store
            .create_api_key(
                &a,
                &u.id,
                "dup",
                "ak_1",
                "h1",
                &[],
                None,
                130,
                rec("api_key.created")
            )
            .await
            .is_err()
    );
    // Wrong workspace or wrong user: refused, key untouched.
    assert!(
        !store
            .revoke_api_key(&b, &u.id, &k1.id, 200, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .revoke_api_key(&a, &v.id, &k1.id, 200, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .revoke_api_key(&a, &u.id, "key_missing", 200, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .api_key_by_hash("h1")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    store.touch_api_key(&k1.id, 300).await.unwrap();
    assert_eq!(
        store
            .api_key_by_hash("h1")
            .await
            .unwrap()
            .unwrap()
            .last_used_at,
        Some(300)
    );
    assert!(
        store
            .revoke_api_key(&a, &u.id, &k1.id, 400, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    // Revoking again is a no-op (still true, time unchanged, not re-audited).
    assert!(
        store
            .revoke_api_key(&a, &u.id, &k1.id, 500, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    let k1_now = store.api_key_by_hash("h1").await.unwrap().unwrap();
    assert_eq!(k1_now.revoked_at, Some(400));
    assert_eq!(
        store
            .api_key_by_hash("h2")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    assert_eq!(
        store
            .api_key_by_hash("h3")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    let lines = store.audit_lines(&a).await.unwrap();
    assert_eq!(
        kinds(&lines),
        [
            "workspace.created",
            "member.added",
            "api_key.created",
            "api_key.created",
            "api_key.revoked"
        ]
    );
    let created = airlock_audit::from_json_line(&lines[2]).unwrap().event;
    assert_eq!(created.target.as_deref(), Some(k1.id.as_str()));
}
both!(iam_5_api_keys_are_scoped_to_workspace_and_user);

async fn iam_4_mfa_steps_and_recovery_codes_are_single_use(store: Store) {
    let u = store.create_user("u", None, 1).await.unwrap();
    let v = store.create_user("v", None, 1).await.unwrap();
    assert_eq!(store.mfa(&u.id).await.unwrap(), None);
    assert!(!store.mfa_use_step(&u.id, 5).await.unwrap(), "no factor");
    store.mfa_begin(&u.id, 100).await.unwrap();
    assert_eq!(
        store.mfa(&u.id).await.unwrap(),
        Some(MfaRecord {
            confirmed_at: None,
            last_step: None
        })
    );
    assert!(!store.mfa_use_step(&u.id, 5).await.unwrap(), "unconfirmed");
    let codes: Vec<String> = (0..10).map(|i| format!("code-{i}")).collect();
    assert!(store.mfa_confirm(&u.id, 10, &codes, 200).await.unwrap());
    assert!(
        !store.mfa_confirm(&u.id, 11, &codes, 201).await.unwrap(),
        "not pending"
    );
    assert!(
        !store.mfa_confirm(&v.id, 11, &codes, 201).await.unwrap(),
        "never begun"
    );
    assert_eq!(
        store.mfa(&u.id).await.unwrap(),
        Some(MfaRecord {
            confirmed_at: Some(200),
            last_step: Some(10)
        })
    );
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 10);
    // Steps only move forward: replay and older steps are refused.
    assert!(!store.mfa_use_step(&u.id, 10).await.unwrap());
    assert!(store.mfa_use_step(&u.id, 11).await.unwrap());
    assert!(!store.mfa_use_step(&u.id, 11).await.unwrap());
    assert!(!store.mfa_use_step(&u.id, 9).await.unwrap());
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (s, id) = (store.clone(), u.id.clone());
        tasks.push(tokio::spawn(async move {
            s.mfa_use_step(&id, 12).await.unwrap()
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += usize::from(t.await.unwrap());
    }
    assert_eq!(wins, 1, "one step, one use");
    assert_eq!(store.mfa(&u.id).await.unwrap().unwrap().last_step, Some(12));

    // Recovery codes.
    assert!(store.use_recovery_code(&u.id, "code-3", 300).await.unwrap());
    assert!(!store.use_recovery_code(&u.id, "code-3", 301).await.unwrap());
    assert!(!store.use_recovery_code(&u.id, "code-x", 301).await.unwrap());
    assert!(
        !store.use_recovery_code(&v.id, "code-4", 301).await.unwrap(),
        "not v's"
    );
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 9);
    // Re-enrolling discards the old codes and the confirmation.
    store.mfa_begin(&u.id, 400).await.unwrap();
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 0);
    assert_eq!(store.mfa(&u.id).await.unwrap().unwrap().confirmed_at, None);
    assert!(
        store
            .mfa_confirm(&u.id, 20, &codes[..2], 410)
            .await
            .unwrap()
    );
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 2);
    store.mfa_remove(&u.id).await.unwrap();
    assert_eq!(store.mfa(&u.id).await.unwrap(), None);
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 0);

    // Operator reset tokens: single use, and they expire.
    store
        .create_reset_token(&u.id, "r1", 100, 200)
        .await
        .unwrap();
    store
        .create_reset_token(&v.id, "r2", 100, 200)
        .await
        .unwrap();
    assert_eq!(store.consume_reset_token("nope", 150).await.unwrap(), None);
    assert_eq!(
        store.consume_reset_token("r1", 150).await.unwrap(),
        Some(u.id.clone())
    );
    assert_eq!(store.consume_reset_token("r1", 151).await.unwrap(), None);
    assert_eq!(
        store.consume_reset_token("r2", 200).await.unwrap(),
        None,
        "expired"
    );
    assert_eq!(
        store.consume_reset_token("r2", 199).await.unwrap(),
        Some(v.id.clone())
    );
}
both!(iam_4_mfa_steps_and_recovery_codes_are_single_use);

async fn api_9_webhook_secret_versions_rotate_retire_and_are_workspace_scoped(store: Store) {
    let ws = DEFAULT_WORKSPACE;
    let rotated = || AuditRecord::system("webhook.secret_rotated", None);
    assert!(
        store
            .webhook_secret_versions(ws, "hook")
            .await
            .unwrap()
            .is_empty()
    );
    for (at, want) in [(1_000, 1), (2_000, 2), (3_000, 3)] {
        let v = store
            .add_webhook_secret_version(ws, "hook", at, rotated())
            .await
            .unwrap();
        assert_eq!(v, want);
    }
    assert_eq!(
        store.webhook_secret_versions(ws, "hook").await.unwrap(),
        vec![(3, 3_000), (2, 2_000), (1, 1_000)]
    );
    // Retiring is once: a second call (or a concurrent one) gets nothing.
    assert_eq!(
        store
            .retire_webhook_secrets_before(ws, "hook", 2, 4_000)
            .await
            .unwrap(),
        vec![1]
    );
    assert!(
        store
            .retire_webhook_secrets_before(ws, "hook", 2, 4_000)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.webhook_secret_versions(ws, "hook").await.unwrap(),
        vec![(3, 3_000), (2, 2_000)]
    );
    // A retired version's number is never reused.
    assert_eq!(
        store
            .add_webhook_secret_version(ws, "hook", 5_000, rotated())
            .await
            .unwrap(),
        4
    );
    // Another worker and another workspace count on their own.
    assert_eq!(
        store
            .add_webhook_secret_version(ws, "other", 1_000, rotated())
            .await
            .unwrap(),
        1
    );
    store.ensure_workspace("ws_other", "other").await.unwrap();
    assert!(
        store
            .webhook_secret_versions("ws_other", "hook")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .add_webhook_secret_version("ws_other", "hook", 1_000, rotated())
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .retire_webhook_secrets_before("ws_other", "hook", 99, 6_000)
            .await
            .unwrap(),
        vec![1]
    );
    assert_eq!(
        store.webhook_secret_versions(ws, "hook").await.unwrap(),
        vec![(4, 5_000), (3, 3_000), (2, 2_000)]
    );
    // Concurrent rotations get distinct versions.
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move {
            s.add_webhook_secret_version(
                DEFAULT_WORKSPACE,
                "busy",
                1_000,
                AuditRecord::system("webhook.secret_rotated", None),
            )
            .await
            .unwrap()
        }));
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.unwrap());
    }
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 3, 4, 5, 6]);
    // Rotation and retirement are audited in the workspace's chain.
    let lines = store.audit_lines(ws).await.unwrap().join("\n");
    assert!(lines.contains("webhook.secret_rotated"));
    assert!(lines.contains("webhook.secret_retired"));
    assert!(
        !store
            .audit_lines("ws_other")
            .await
            .unwrap()
            .join("\n")
            .contains("\"worker\":\"other\"")
    );
}
both!(api_9_webhook_secret_versions_rotate_retire_and_are_workspace_scoped);

async fn api_9_replay_store_accepts_each_delivery_once(store: Store) {
    let ws = DEFAULT_WORKSPACE;
    store.ensure_workspace("ws_other", "other").await.unwrap();
    assert!(
        store
            .record_delivery(ws, "hook", "d1", 1_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .record_delivery(ws, "hook", "d1", 1_500)
            .await
            .unwrap()
    );
    // The same id at another endpoint or in another workspace is news.
    assert!(
        store
            .record_delivery(ws, "other", "d1", 1_000)
            .await
            .unwrap()
    );
    assert!(
        store
            .record_delivery("ws_other", "hook", "d1", 1_000)
            .await
            .unwrap()
    );
    // Two (and more) concurrent copies of one delivery: exactly one wins.
    for round in 0..3 {
        let id = format!("race-{round}");
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (s, id) = (store.clone(), id.clone());
            tasks.push(tokio::spawn(async move {
                s.record_delivery(DEFAULT_WORKSPACE, "hook", &id, 3_000)
                    .await
                    .unwrap()
            }));
        }
        let mut wins = 0;
        for t in tasks {
            wins += usize::from(t.await.unwrap());
        }
        assert_eq!(wins, 1, "{id}");
    }
    // The run link is per workspace and endpoint.
    assert_eq!(
        store.delivery_run(ws, "hook", "d1").await.unwrap(),
        Some(None)
    );
    store
        .set_delivery_run(ws, "hook", "d1", "run_a")
        .await
        .unwrap();
    store
        .set_delivery_run("ws_other", "hook", "d9", "run_b")
        .await
        .unwrap();
    assert_eq!(
        store.delivery_run(ws, "hook", "d1").await.unwrap(),
        Some(Some("run_a".into()))
    );
    assert_eq!(
        store.delivery_run("ws_other", "hook", "d1").await.unwrap(),
        Some(None)
    );
    assert_eq!(store.delivery_run(ws, "hook", "d9").await.unwrap(), None);
    // Pruning forgets old ids only; a forgotten id is news again.
    assert_eq!(store.prune_deliveries(2_000).await.unwrap(), 3);
    assert!(
        store
            .record_delivery(ws, "hook", "d1", 4_000)
            .await
            .unwrap()
    );
    assert!(
        !store
            .record_delivery(ws, "hook", "race-0", 4_000)
            .await
            .unwrap()
    );
}
both!(api_9_replay_store_accepts_each_delivery_once);

// ------------------------------------------------------------ uploads (API-5)

fn upload(id: &str, ws: &str, user: &str, at: i64) -> UploadRecord {
    UploadRecord {
        id: id.into(),
        workspace_id: ws.into(),
        user_id: user.into(),
        name: format!("{id}/report.txt"),
        digest: "ab".repeat(32),
        size: 42,
        media_type: "text/plain".into(),
        created_at: at,
    }
}

async fn api_5_uploads_are_recorded_audited_and_workspace_scoped(store: Store) {
    store.ensure_workspace("ws_a", "a").await.unwrap();
    store.ensure_workspace("ws_b", "b").await.unwrap();
    let u1 = upload("upl_1", "ws_a", "usr_1", 100);
    store
        .create_upload(&u1, rec("upload.created"))
        .await
        .unwrap();
    assert_eq!(
        store.get_upload("ws_a", "upl_1").await.unwrap(),
        Some(u1.clone())
    );
    // Another workspace's id answers exactly like a missing one.
    assert_eq!(store.get_upload("ws_b", "upl_1").await.unwrap(), None);
    assert_eq!(store.get_upload("ws_a", "upl_missing").await.unwrap(), None);
    assert!(
        store
            .list_uploads("ws_b", "usr_1", 10)
            .await
            .unwrap()
            .is_empty()
    );
    // The audit event landed in the same workspace's chain, and only there.
    let a_lines = store.audit_lines("ws_a").await.unwrap();
    assert_eq!(kinds(&a_lines), ["upload.created"]);
    assert!(store.audit_lines("ws_b").await.unwrap().is_empty());

    // A reused id is a conflict in any workspace, and writes neither row nor audit event.
    let clash = upload("upl_1", "ws_b", "usr_2", 101);
    assert!(matches!(
        store.create_upload(&clash, rec("upload.created")).await,
        Err(StoreError::Conflict)
    ));
    assert_eq!(store.get_upload("ws_b", "upl_1").await.unwrap(), None);
    assert!(store.audit_lines("ws_b").await.unwrap().is_empty());
    assert_eq!(store.audit_lines("ws_a").await.unwrap().len(), 1);
}
both!(api_5_uploads_are_recorded_audited_and_workspace_scoped);

async fn api_5_upload_lists_are_per_user_newest_first_and_limited(store: Store) {
    store.ensure_workspace("ws_a", "a").await.unwrap();
    store.ensure_workspace("ws_b", "b").await.unwrap();
    for (id, ws, user, at) in [
        ("upl_1", "ws_a", "usr_1", 100),
        ("upl_2", "ws_a", "usr_1", 300),
        ("upl_3", "ws_a", "usr_1", 200),
        ("upl_4", "ws_a", "usr_2", 400),
        ("upl_5", "ws_b", "usr_1", 500),
    ] {
        store
            .create_upload(&upload(id, ws, user, at), rec("upload.created"))
            .await
            .unwrap();
    }
    let ids = |v: Vec<UploadRecord>| v.into_iter().map(|u| u.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_uploads("ws_a", "usr_1", 10).await.unwrap()),
        ["upl_2", "upl_3", "upl_1"]
    );
    assert_eq!(
        ids(store.list_uploads("ws_a", "usr_1", 2).await.unwrap()),
        ["upl_2", "upl_3"]
    );
    // A limit below one still answers with one row; one above the cap is clamped.
    assert_eq!(
        ids(store.list_uploads("ws_a", "usr_1", 0).await.unwrap()),
        ["upl_2"]
    );
    assert_eq!(
        store
            .list_uploads("ws_a", "usr_1", i64::MAX)
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(
        ids(store.list_uploads("ws_a", "usr_2", 10).await.unwrap()),
        ["upl_4"]
    );
    assert_eq!(
        ids(store.list_uploads("ws_b", "usr_1", 10).await.unwrap()),
        ["upl_5"]
    );
    assert!(
        store
            .list_uploads("ws_b", "usr_2", 10)
            .await
            .unwrap()
            .is_empty()
    );
}
both!(api_5_upload_lists_are_per_user_newest_first_and_limited);

async fn run_6_schedule_fire_is_claimed_exactly_once(store: Store) {
    let fire = 1_800_000_900_000;
    let mut handles = Vec::new();
    for _ in 0..8 {
        let s = store.clone();
        handles.push(tokio::spawn(async move {
            s.claim_fire(DEFAULT_WORKSPACE, "nightly", 1, fire, fire + 5)
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for h in handles {
        if h.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 1, "exactly one of 8 concurrent claims wins");
    // Claimed, no outcome yet.
    let latest = store
        .latest_fire(DEFAULT_WORKSPACE, "nightly", 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (latest.fire_at, latest.outcome.as_str(), latest.run_id),
        (fire, FIRE_CLAIMED, None)
    );
    assert_eq!(
        store
            .last_fire(DEFAULT_WORKSPACE, "nightly", 1)
            .await
            .unwrap(),
        Some(fire)
    );
    store
        .set_fire_outcome(
            DEFAULT_WORKSPACE,
            "nightly",
            1,
            fire,
            "created",
            Some("run_x"),
        )
        .await
        .unwrap();
    let latest = store
        .latest_fire(DEFAULT_WORKSPACE, "nightly", 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.outcome, "created");
    assert_eq!(latest.run_id.as_deref(), Some("run_x"));
    // A claimed fire stays claimed: claiming again is refused.
    assert!(
        !store
            .claim_fire(DEFAULT_WORKSPACE, "nightly", 1, fire, fire + 60_000)
            .await
            .unwrap()
    );
    // Another trigger index, worker or workspace is another fire.
    assert!(
        store
            .claim_fire(DEFAULT_WORKSPACE, "nightly", 2, fire, fire)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_fire(DEFAULT_WORKSPACE, "daily", 1, fire, fire)
            .await
            .unwrap()
    );
    store.ensure_workspace("ws_other", "other").await.unwrap();
    assert_eq!(
        store.last_fire("ws_other", "nightly", 1).await.unwrap(),
        None
    );
    assert!(
        store
            .claim_fire("ws_other", "nightly", 1, fire, fire)
            .await
            .unwrap()
    );
    // Recording an outcome needs a claim.
    assert!(matches!(
        store
            .set_fire_outcome(DEFAULT_WORKSPACE, "nightly", 1, fire + 1, "created", None)
            .await,
        Err(StoreError::NotFound)
    ));
}
both!(run_6_schedule_fire_is_claimed_exactly_once);

async fn run_6_schedule_watermark_and_stale_takeover(store: Store) {
    let t0 = 1_800_000_000_000;
    assert_eq!(
        store.latest_fire(DEFAULT_WORKSPACE, "w", 0).await.unwrap(),
        None
    );
    // Arming is a watermark, not a fire.
    store
        .arm_schedule(DEFAULT_WORKSPACE, "w", 0, t0)
        .await
        .unwrap();
    store
        .arm_schedule(DEFAULT_WORKSPACE, "w", 0, t0)
        .await
        .unwrap();
    let latest = store
        .latest_fire(DEFAULT_WORKSPACE, "w", 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((latest.fire_at, latest.outcome.as_str()), (t0, FIRE_ARMED));
    assert_eq!(
        store.last_fire(DEFAULT_WORKSPACE, "w", 0).await.unwrap(),
        None
    );
    // A claim left behind becomes stale; concurrent takeovers resolve to one.
    let fire = t0 + 60_000;
    assert!(
        store
            .claim_fire(DEFAULT_WORKSPACE, "w", 0, fire, fire)
            .await
            .unwrap()
    );
    assert!(
        !store
            .reclaim_fire(DEFAULT_WORKSPACE, "w", 0, fire, fire, fire + 1)
            .await
            .unwrap(),
        "not stale yet"
    );
    let later = fire + 300_000;
    let mut handles = Vec::new();
    for _ in 0..4 {
        let s = store.clone();
        handles.push(tokio::spawn(async move {
            s.reclaim_fire(DEFAULT_WORKSPACE, "w", 0, fire, fire + 1, later)
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for h in handles {
        if h.await.unwrap() {
            won += 1;
        }
    }
    assert_eq!(won, 1);
    let latest = store
        .latest_fire(DEFAULT_WORKSPACE, "w", 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((latest.fire_at, latest.created_at), (fire, later));
    store
        .set_fire_outcome(
            DEFAULT_WORKSPACE,
            "w",
            0,
            fire,
            "skipped_missing_input",
            None,
        )
        .await
        .unwrap();
    // Only claimed fires can be taken over.
    assert!(
        !store
            .reclaim_fire(DEFAULT_WORKSPACE, "w", 0, fire, i64::MAX, later)
            .await
            .unwrap()
    );
    let fires = store
        .list_fires(DEFAULT_WORKSPACE, "w", 0, 10)
        .await
        .unwrap();
    let got: Vec<(i64, &str)> = fires
        .iter()
        .map(|f| (f.fire_at, f.outcome.as_str()))
        .collect();
    assert_eq!(got, [(fire, "skipped_missing_input"), (t0, FIRE_ARMED)]);
    assert_eq!(
        store.last_fire(DEFAULT_WORKSPACE, "w", 0).await.unwrap(),
        Some(fire)
    );
}
both!(run_6_schedule_watermark_and_stale_takeover);

// ------------------------------------------------------------ workspace isolation: owners, audit pages, schedule fires
//
// Like the isolation cases above: the other workspace holds a record whose
// other keys match the call (an owner, an audit sequence number, the same
// worker, trigger index and fire instant), and a call for the first
// workspace must neither count, see nor change it.

async fn iam_7_last_owner_is_counted_per_workspace(store: Store) {
    let alice = store.create_user("alice", None, 1).await.unwrap();
    let bob = store.create_user("bob", None, 1).await.unwrap();
    let carol = store.create_user("carol", None, 1).await.unwrap();
    let a = store.create_workspace("A", &alice.id, 10).await.unwrap();
    let b = store.create_workspace("B", &bob.id, 20).await.unwrap();
    // Alice is A's only owner; bob owns B (and is a viewer in A).
    store
        .set_member(&a, &bob.id, "viewer", 30, rec("member.added"))
        .await
        .unwrap();
    assert!(matches!(
        store
            .set_member(&a, &alice.id, "admin", 40, rec("member.role_changed"))
            .await,
        Err(StoreError::LastOwner)
    ));
    assert!(matches!(
        store
            .remove_member(&a, &alice.id, 50, rec("member.removed"))
            .await,
        Err(StoreError::LastOwner)
    ));
    // Nothing changed in A, and B's owner is untouched.
    assert_eq!(
        store.membership(&a, &alice.id).await.unwrap().unwrap().role,
        "owner"
    );
    assert_eq!(store.count_role(&a, "owner").await.unwrap(), 1);
    assert_eq!(
        store.membership(&b, &bob.id).await.unwrap().unwrap().role,
        "owner"
    );
    assert_eq!(
        kinds(&store.audit_lines(&a).await.unwrap()),
        ["workspace.created", "member.added"]
    );
    // With a second owner in A, alice can step down.
    store
        .set_member(&a, &carol.id, "owner", 60, rec("member.added"))
        .await
        .unwrap();
    store
        .set_member(&a, &alice.id, "admin", 70, rec("member.role_changed"))
        .await
        .unwrap();
    // Carol is now A's only owner again: B's owner does not count for A.
    assert!(matches!(
        store
            .remove_member(&a, &carol.id, 80, rec("member.removed"))
            .await,
        Err(StoreError::LastOwner)
    ));
    assert_eq!(store.count_role(&a, "owner").await.unwrap(), 1);
}
both!(iam_7_last_owner_is_counted_per_workspace);

async fn aud_2_audit_pages_are_per_workspace(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    // B has more lines than A, under the same sequence numbers and after
    // every sequence number A has.
    for _ in 0..5 {
        store
            .audit(WS_B, AuditRecord::system("b.event", None))
            .await
            .unwrap();
    }
    for _ in 0..2 {
        store
            .audit(DEFAULT_WORKSPACE, AuditRecord::system("a.event", None))
            .await
            .unwrap();
    }
    let all_a = store.audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    assert_eq!(all_a.len(), 2);
    assert_eq!(
        store.audit_page(DEFAULT_WORKSPACE, 0, 100).await.unwrap(),
        all_a,
        "A's first page is A's lines only"
    );
    assert_eq!(
        store.audit_page(DEFAULT_WORKSPACE, 0, 1).await.unwrap(),
        all_a[..1]
    );
    assert_eq!(
        store.audit_page(DEFAULT_WORKSPACE, 1, 100).await.unwrap(),
        all_a[1..]
    );
    assert!(
        store
            .audit_page(DEFAULT_WORKSPACE, 2, 100)
            .await
            .unwrap()
            .is_empty(),
        "after A's last line there is nothing, whatever B has"
    );
    let page_b = store.audit_page(WS_B, 2, 100).await.unwrap();
    assert_eq!(kinds(&page_b), ["b.event", "b.event", "b.event"]);
    assert_eq!(page_b, store.audit_lines(WS_B).await.unwrap()[2..]);
}
both!(aud_2_audit_pages_are_per_workspace);

/// Lists a schedule's rows as `(fire_at, outcome, run_id, created_at)`.
async fn fire_rows(
    store: &Store,
    ws: &str,
    worker: &str,
    index: i64,
) -> Vec<(i64, String, Option<String>, i64)> {
    store
        .list_fires(ws, worker, index, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|f| (f.fire_at, f.outcome, f.run_id, f.created_at))
        .collect()
}

async fn run_6_fire_reclaim_is_workspace_scoped(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let fire = 1_800_000_060_000;
    // The same fire claimed in both workspaces: B's claim is stale, A's is
    // fresh.
    assert!(
        store
            .claim_fire(WS_B, "nightly", 1, fire, fire)
            .await
            .unwrap()
    );
    assert!(
        store
            .claim_fire(DEFAULT_WORKSPACE, "nightly", 1, fire, fire + 100_000)
            .await
            .unwrap()
    );
    let later = fire + 300_000;
    assert!(
        !store
            .reclaim_fire(DEFAULT_WORKSPACE, "nightly", 1, fire, fire + 1, later)
            .await
            .unwrap(),
        "A's claim is not stale; B's stale claim is not A's to take over"
    );
    assert_eq!(
        fire_rows(&store, WS_B, "nightly", 1).await,
        [(fire, FIRE_CLAIMED.to_string(), None, fire)],
        "B's claim is untouched"
    );
    assert_eq!(
        fire_rows(&store, DEFAULT_WORKSPACE, "nightly", 1).await,
        [(fire, FIRE_CLAIMED.to_string(), None, fire + 100_000)]
    );
    // B's claim is B's to take over.
    assert!(
        store
            .reclaim_fire(WS_B, "nightly", 1, fire, fire + 1, later)
            .await
            .unwrap()
    );
    assert_eq!(
        fire_rows(&store, WS_B, "nightly", 1).await,
        [(fire, FIRE_CLAIMED.to_string(), None, later)]
    );
    assert_eq!(
        fire_rows(&store, DEFAULT_WORKSPACE, "nightly", 1).await,
        [(fire, FIRE_CLAIMED.to_string(), None, fire + 100_000)]
    );
}
both!(run_6_fire_reclaim_is_workspace_scoped);

async fn run_6_fire_outcome_is_workspace_scoped(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let fire = 1_800_000_120_000;
    assert!(
        store
            .claim_fire(WS_B, "nightly", 1, fire, fire)
            .await
            .unwrap()
    );
    // Only B claimed this fire: A has nothing to record an outcome on.
    assert!(matches!(
        store
            .set_fire_outcome(
                DEFAULT_WORKSPACE,
                "nightly",
                1,
                fire,
                "created",
                Some("run_a")
            )
            .await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        fire_rows(&store, WS_B, "nightly", 1).await,
        [(fire, FIRE_CLAIMED.to_string(), None, fire)]
    );
    // Both claimed it: A's outcome is A's alone.
    assert!(
        store
            .claim_fire(DEFAULT_WORKSPACE, "nightly", 1, fire, fire + 5)
            .await
            .unwrap()
    );
    store
        .set_fire_outcome(
            DEFAULT_WORKSPACE,
            "nightly",
            1,
            fire,
            "created",
            Some("run_a"),
        )
        .await
        .unwrap();
    assert_eq!(
        fire_rows(&store, DEFAULT_WORKSPACE, "nightly", 1).await,
        [(
            fire,
            "created".to_string(),
            Some("run_a".to_string()),
            fire + 5
        )]
    );
    assert_eq!(
        fire_rows(&store, WS_B, "nightly", 1).await,
        [(fire, FIRE_CLAIMED.to_string(), None, fire)],
        "B's claim keeps its outcome"
    );
}
both!(run_6_fire_outcome_is_workspace_scoped);

async fn run_6_fire_reads_are_workspace_scoped(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let t0 = 1_800_000_000_000;
    // B's schedule with the same worker and trigger index fired more, and
    // later, than A's.
    for (i, at) in [t0, t0 + 60_000, t0 + 120_000].into_iter().enumerate() {
        assert!(store.claim_fire(WS_B, "w", 0, at, at).await.unwrap());
        store
            .set_fire_outcome(WS_B, "w", 0, at, "created", Some(&format!("run_b{i}")))
            .await
            .unwrap();
    }
    // A has never fired or armed this schedule.
    assert_eq!(
        store.latest_fire(DEFAULT_WORKSPACE, "w", 0).await.unwrap(),
        None
    );
    assert!(
        store
            .list_fires(DEFAULT_WORKSPACE, "w", 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A is armed at t0 and fires once, at t0 + 60s.
    store
        .arm_schedule(DEFAULT_WORKSPACE, "w", 0, t0)
        .await
        .unwrap();
    let fire = t0 + 60_000;
    assert!(
        store
            .claim_fire(DEFAULT_WORKSPACE, "w", 0, fire, fire)
            .await
            .unwrap()
    );
    let latest = store
        .latest_fire(DEFAULT_WORKSPACE, "w", 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (latest.fire_at, latest.outcome.as_str(), latest.run_id),
        (fire, FIRE_CLAIMED, None),
        "A's watermark is A's newest row, not B's"
    );
    assert_eq!(
        fire_rows(&store, DEFAULT_WORKSPACE, "w", 0).await,
        [
            (fire, FIRE_CLAIMED.to_string(), None, fire),
            (t0, FIRE_ARMED.to_string(), None, t0)
        ]
    );
    assert_eq!(
        store
            .list_fires(DEFAULT_WORKSPACE, "w", 0, 1)
            .await
            .unwrap()
            .len(),
        1
    );
    let b = store.latest_fire(WS_B, "w", 0).await.unwrap().unwrap();
    assert_eq!(
        (b.fire_at, b.run_id.as_deref()),
        (t0 + 120_000, Some("run_b2"))
    );
    assert_eq!(fire_rows(&store, WS_B, "w", 0).await.len(), 3);
}
both!(run_6_fire_reads_are_workspace_scoped);

async fn api_8_idempotency_key_used_is_per_workspace(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let mut r = run_in(WS_B, "hello");
    r.idempotency = Some(("key-1".into(), "hash-a".into()));
    store.create_run(r).await.unwrap();
    assert!(
        store
            .idempotency_key_used(WS_B, "tester", "key-1")
            .await
            .unwrap()
    );
    assert!(
        !store
            .idempotency_key_used(DEFAULT_WORKSPACE, "tester", "key-1")
            .await
            .unwrap(),
        "B's key is not used in A"
    );
    assert!(
        !store
            .idempotency_key_used(WS_B, "someone-else", "key-1")
            .await
            .unwrap()
    );
    let mut r = new_run("hello");
    r.idempotency = Some(("key-1".into(), "hash-a".into()));
    store.create_run(r).await.unwrap();
    assert!(
        store
            .idempotency_key_used(DEFAULT_WORKSPACE, "tester", "key-1")
            .await
            .unwrap()
    );
}
both!(api_8_idempotency_key_used_is_per_workspace);

// ------------------------------------------------------------ approvals, actions, emergency stop (AGT-5, AGT-6, DUR-2)

/// The roles that hold `approvals.decide` (the service passes the same
/// list from the role table).
const DECIDERS: &[&str] = &["owner", "admin", "assistant_manager", "human_assistant"];
const T: i64 = 1_900_000_000_000;

fn payload(worker: &str) -> serde_json::Value {
    serde_json::json!({"worker": worker, "input_hash": "ab", "limits": {"timeout_s": 30, "memory_mb": 256}, "egress": {"allow": []}})
}

fn ask(expires_at: i64) -> NewApproval {
    NewApproval {
        payload: payload("gated"),
        reason: Some("sends mail".into()),
        requested_by: "tester".into(),
        expires_at,
        now: T,
    }
}

fn decision(approve: bool, by: &str, now: i64) -> Decision {
    Decision {
        approve,
        by: by.into(),
        audit_actor: airlock_audit::Actor::Human(by.into()),
        note: None,
        grant: airlock_protocol::approvals::Grant::Once,
        argv_prefix: None,
        expected_hash: None,
        now,
    }
}

async fn gated_run(store: &Store, ws: &str, expires_at: i64) -> (RunRecord, Approval) {
    let (created, approval) = store
        .create_run_awaiting_approval(run_in(ws, "gated"), ask(expires_at))
        .await
        .unwrap();
    (created.run, approval.unwrap())
}

/// A user who is a member of `ws` with `role` (and the owner it needs).
async fn member(store: &Store, ws: &str, name: &str, role: &str) -> String {
    let u = match store.user_by_name(name).await.unwrap() {
        Some(u) => u,
        None => store.create_user(name, None, T).await.unwrap(),
    };
    if store.count_role(ws, "owner").await.unwrap() == 0 && role != "owner" {
        let o = store
            .create_user(&format!("owner-{ws}"), None, T)
            .await
            .unwrap();
        store
            .set_member(ws, &o.id, "owner", T, rec("member.set"))
            .await
            .unwrap();
    }
    store
        .set_member(ws, &u.id, role, T, rec("member.set"))
        .await
        .unwrap();
    u.id
}

use airlock_protocol::approvals::{Approval, ApprovalState, Grant};

async fn agt_5_approval_requests_bind_the_canonical_payload_and_are_workspace_scoped(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let (run, a) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    assert_eq!(run.state, RunState::AwaitingApproval);
    assert_eq!(a.state, ApprovalState::Pending);
    assert_eq!(a.run_id, run.id);
    assert_eq!(a.requested_by, "tester");
    assert_eq!(a.run_actor, "tester");
    // The hash is SHA-256 over the RFC 8785 bytes of the payload.
    let jcs = airlock_audit::canonicalize(&payload("gated")).unwrap();
    assert_eq!(a.payload_hash, sha256_hex(&jcs));
    assert_eq!(a.payload, payload("gated"));
    // Key order does not change the hash; one changed field does.
    let reordered: serde_json::Value = serde_json::from_str(
        r#"{"limits": {"memory_mb": 256, "timeout_s": 30}, "egress": {"allow": []}, "input_hash": "ab", "worker": "gated"}"#,
    )
    .unwrap();
    assert_eq!(canonical_payload(&reordered).unwrap().1, a.payload_hash);
    let mut changed = payload("gated");
    changed["limits"]["timeout_s"] = serde_json::json!(31);
    assert_ne!(canonical_payload(&changed).unwrap().1, a.payload_hash);
    // A waiting run is not claimable.
    assert!(
        store
            .claim_next("n", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .is_none()
    );
    // The request is an `approval` event on the run's stream.
    let ev = store
        .events(DEFAULT_WORKSPACE, &run.id, 0, 10)
        .await
        .unwrap();
    assert!(
        ev.iter().any(|e| e.kind == "approval"
            && e.data["id"] == a.id
            && e.data["payload_hash"] == a.payload_hash.as_str()),
        "{ev:?}"
    );
    // Another workspace sees nothing of it.
    assert_eq!(store.get_approval(WS_B, &a.id).await.unwrap(), None);
    assert_eq!(store.run_approval(WS_B, &run.id).await.unwrap(), None);
    assert!(
        store
            .list_approvals(WS_B, None, None, 50, None)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store
            .decide_approval(WS_B, &a.id, &decision(true, "cli", T))
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .consume_approval(WS_B, &a.id, &a.payload_hash, T, DECIDERS, "cli")
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(
        !store
            .cancel_waiting_run(WS_B, &run.id, "x", T)
            .await
            .unwrap()
    );
    // Positive controls: its own workspace sees it.
    assert_eq!(
        store.get_approval(DEFAULT_WORKSPACE, &a.id).await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(
        store
            .run_approval(DEFAULT_WORKSPACE, &run.id)
            .await
            .unwrap(),
        Some(a.clone())
    );
    // Paging and filters; another workspace's id is not a cursor.
    let (_, b_first) = gated_run(&store, WS_B, T + 60_000).await;
    let (run2, a2) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    let all = store
        .list_approvals(DEFAULT_WORKSPACE, None, None, 50, None)
        .await
        .unwrap();
    assert_eq!(
        all.iter()
            .map(|x| x.id.clone())
            .collect::<std::collections::BTreeSet<_>>(),
        [a.id.clone(), a2.id.clone()].into()
    );
    let one = store
        .list_approvals(DEFAULT_WORKSPACE, None, None, 1, None)
        .await
        .unwrap();
    let rest = store
        .list_approvals(DEFAULT_WORKSPACE, None, None, 10, Some(&one[0].id))
        .await
        .unwrap();
    assert_eq!(one.len() + rest.len(), 2);
    assert_eq!(
        store
            .list_approvals(DEFAULT_WORKSPACE, None, None, 10, Some(&b_first.id))
            .await
            .unwrap()
            .len(),
        2,
        "another workspace's id is not a cursor"
    );
    let of_run2 = store
        .list_approvals(DEFAULT_WORKSPACE, None, Some(&run2.id), 10, None)
        .await
        .unwrap();
    assert_eq!(of_run2, vec![a2.clone()]);
    assert!(
        store
            .list_approvals(
                DEFAULT_WORKSPACE,
                Some(ApprovalState::Approved),
                None,
                10,
                None
            )
            .await
            .unwrap()
            .is_empty()
    );
    // Cancelling the waiting run cancels its request; another's is untouched.
    assert!(
        store
            .cancel_waiting_run(DEFAULT_WORKSPACE, &run2.id, "x", T)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .get_run(DEFAULT_WORKSPACE, &run2.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        RunState::Cancelled
    );
    assert_eq!(
        store
            .get_approval(DEFAULT_WORKSPACE, &a2.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Cancelled
    );
    assert_eq!(
        store
            .get_approval(DEFAULT_WORKSPACE, &a.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Pending
    );
}
both!(agt_5_approval_requests_bind_the_canonical_payload_and_are_workspace_scoped);

async fn agt_5_idempotent_gated_runs_are_per_workspace(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let keyed = |ws: &str, hash: &str| NewRun {
        idempotency: Some(("k".into(), hash.into())),
        ..run_in(ws, "gated")
    };
    // B's key first: an unfiltered lookup would meet it first.
    let (b, _) = store
        .create_run_awaiting_approval(keyed(WS_B, "h-b"), ask(T + 1000))
        .await
        .unwrap();
    let (a, a_req) = store
        .create_run_awaiting_approval(keyed(DEFAULT_WORKSPACE, "h-a"), ask(T + 1000))
        .await
        .unwrap();
    assert!(a.created && b.created);
    let (again, again_req) = store
        .create_run_awaiting_approval(keyed(DEFAULT_WORKSPACE, "h-a"), ask(T + 1000))
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.run.id, a.run.id);
    assert_eq!(again_req, a_req);
    assert!(matches!(
        store
            .create_run_awaiting_approval(keyed(DEFAULT_WORKSPACE, "other"), ask(T + 1000))
            .await,
        Err(StoreError::IdempotencyConflict)
    ));
}
both!(agt_5_idempotent_gated_runs_are_per_workspace);

async fn agt_5_approve_and_reject_racing_have_exactly_one_winner(store: Store) {
    for round in 0..3 {
        let (run, a) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (store, id) = (store.clone(), a.id.clone());
            tasks.push(tokio::spawn(async move {
                let d = decision((i + round) % 2 == 0, &format!("u{i}"), T + 1);
                store
                    .decide_approval(DEFAULT_WORKSPACE, &id, &d)
                    .await
                    .unwrap()
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(w) => winners.push(w),
                Err(ApprovalRefusal::NotOpen(_)) => {}
                Err(other) => panic!("{other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one decision wins");
        let w = &winners[0];
        let run = store
            .get_run(DEFAULT_WORKSPACE, &run.id)
            .await
            .unwrap()
            .unwrap();
        match w.state {
            ApprovalState::Approved => assert_eq!(run.state, RunState::Queued),
            ApprovalState::Rejected => {
                assert_eq!(run.state, RunState::Blocked);
                assert_eq!(run.error_code.as_deref(), Some("approval_rejected"));
            }
            s => panic!("{s:?}"),
        }
        // A decided approval is not decided again (replay → refused).
        assert_eq!(
            store
                .decide_approval(DEFAULT_WORKSPACE, &a.id, &decision(true, "late", T + 2))
                .await
                .unwrap(),
            Err(ApprovalRefusal::NotOpen(w.state))
        );
        if let Ok(Some(c)) = store.claim_next("n", Duration::from_secs(60), &[]).await {
            store
                .finish_run(&c.run.id, c.token, RunState::Succeeded, &Finish::default())
                .await
                .unwrap();
        }
    }
}
both!(agt_5_approve_and_reject_racing_have_exactly_one_winner);

async fn agt_5_expiry_is_exact_and_ends_the_run(store: Store) {
    let exp = T + 10_000;
    // One millisecond before: still decidable.
    let (_, a) = gated_run(&store, DEFAULT_WORKSPACE, exp).await;
    assert!(
        store
            .decide_approval(DEFAULT_WORKSPACE, &a.id, &decision(true, "cli", exp - 1))
            .await
            .unwrap()
            .is_ok()
    );
    // At the instant: expired, for a decision …
    let (run, b) = gated_run(&store, DEFAULT_WORKSPACE, exp).await;
    assert_eq!(
        store
            .decide_approval(DEFAULT_WORKSPACE, &b.id, &decision(true, "cli", exp))
            .await
            .unwrap(),
        Err(ApprovalRefusal::Expired)
    );
    // … and for the sweep, which ends the run `blocked` (`approval_expired`).
    assert!(store.expire_approvals(exp - 1).await.unwrap().is_empty());
    let expired = store.expire_approvals(exp).await.unwrap();
    assert_eq!(
        expired.iter().map(|x| x.id.clone()).collect::<Vec<_>>(),
        vec![b.id.clone()]
    );
    assert_eq!(expired[0].state, ApprovalState::Expired);
    let run = store
        .get_run(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (run.state, run.error_code.as_deref()),
        (RunState::Blocked, Some("approval_expired"))
    );
    // An approved request is usable only before its expiry.
    let approved = store
        .get_approval(DEFAULT_WORKSPACE, &a.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &approved.payload_hash,
                exp,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::Expired)
    );
    assert!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &approved.payload_hash,
                exp - 1,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap()
            .is_ok()
    );
    let lines = store.audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    assert!(kinds(&lines).contains(&"approval.expired".to_string()));
}
both!(agt_5_expiry_is_exact_and_ends_the_run);

async fn agt_5_an_approval_is_used_once_after_every_check(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let alice = member(&store, DEFAULT_WORKSPACE, "alice", "human_assistant").await;
    let (_, a) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    // A pending request cannot be used.
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &a.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::NotOpen(ApprovalState::Pending))
    );
    // The approver pins the hash they saw: another hash is refused.
    let mut d = decision(true, &alice, T);
    d.expected_hash = Some("00".repeat(32));
    assert_eq!(
        store
            .decide_approval(DEFAULT_WORKSPACE, &a.id, &d)
            .await
            .unwrap(),
        Err(ApprovalRefusal::HashMismatch)
    );
    d.expected_hash = Some(a.payload_hash.clone());
    let a = store
        .decide_approval(DEFAULT_WORKSPACE, &a.id, &d)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (a.state, a.decided_by.as_deref()),
        (ApprovalState::Approved, Some(alice.as_str()))
    );
    // One changed field: refused, and nothing is used up.
    let mut changed = payload("gated");
    changed["egress"]["allow"] = serde_json::json!(["evil.example"]);
    let (_, other_hash) = canonical_payload(&changed).unwrap();
    assert_eq!(
        store
            .consume_approval(DEFAULT_WORKSPACE, &a.id, &other_hash, T, DECIDERS, "cli")
            .await
            .unwrap(),
        Err(ApprovalRefusal::HashMismatch)
    );
    // Another workspace's stop does not stop this one.
    store
        .emergency_stop(WS_B, "cli", airlock_audit::Actor::System, None, T)
        .await
        .unwrap();
    // The approver must still hold approvals.decide here; being an owner
    // of another workspace does not count.
    member(&store, WS_B, "alice", "owner").await;
    member(&store, DEFAULT_WORKSPACE, "alice", "viewer").await;
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &a.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::ApproverLost)
    );
    member(&store, DEFAULT_WORKSPACE, "alice", "assistant_manager").await;
    // Its own workspace's stop cancels an approved, unused request …
    store
        .emergency_stop(
            DEFAULT_WORKSPACE,
            "cli",
            airlock_audit::Actor::System,
            None,
            T,
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &a.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::NotOpen(ApprovalState::Cancelled))
    );
    // … and the use itself checks the stop: a request approved while
    // stopped is refused, then usable once resumed.
    let (_, s) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    let s = store
        .decide_approval(DEFAULT_WORKSPACE, &s.id, &decision(true, &alice, T))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &s.id,
                &s.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::Stopped)
    );
    store
        .emergency_resume(DEFAULT_WORKSPACE, "cli", airlock_audit::Actor::System, T)
        .await
        .unwrap();
    assert!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &s.id,
                &s.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap()
            .is_ok()
    );
    // A fresh approval, used by 100 concurrent consumers: one wins.
    let (_, a) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    let a = store
        .decide_approval(DEFAULT_WORKSPACE, &a.id, &decision(true, &alice, T))
        .await
        .unwrap()
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (store, id, hash) = (store.clone(), a.id.clone(), a.payload_hash.clone());
        tasks.push(tokio::spawn(async move {
            store
                .consume_approval(DEFAULT_WORKSPACE, &id, &hash, T + 5, DECIDERS, "cli")
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(used) => {
                won += 1;
                assert_eq!(used.state, ApprovalState::Consumed);
            }
            Err(ApprovalRefusal::NotOpen(ApprovalState::Consumed)) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(won, 1, "100 concurrent consumers, one use");
    // Replay of a used approval is refused.
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &a.payload_hash,
                T + 6,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::NotOpen(ApprovalState::Consumed))
    );
    // The operator (`cli`) decides without a membership.
    let (_, o) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    let o = store
        .decide_approval(DEFAULT_WORKSPACE, &o.id, &decision(true, "cli", T))
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &o.id,
                &o.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap()
            .is_ok()
    );
    let k = kinds(&store.audit_lines(DEFAULT_WORKSPACE).await.unwrap());
    for want in [
        "approval.requested",
        "approval.approved",
        "approval.consumed",
    ] {
        assert!(k.contains(&want.to_string()), "{want}");
    }
}
both!(agt_5_an_approval_is_used_once_after_every_check);

async fn agt_5_rules_and_settings_are_listed_revocable_and_workspace_scoped(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    // An action approval with an argv-prefix grant needs a running agent run.
    let run = store.create_run(new_run("agent")).await.unwrap().run;
    let c = store
        .claim_run("n", Duration::from_secs(60), &run.id)
        .await
        .unwrap()
        .unwrap();
    let p = serde_json::json!({"tool": "run_command", "argv": ["git", "status"]});
    let act = store
        .propose_action(&run.id, c.token, "call-1", "run_command", &p, T)
        .await
        .unwrap()
        .unwrap()
        .action;
    let (_, req) = store
        .request_action_approval(
            &run.id,
            c.token,
            &act.id,
            &serde_json::json!({"verdict": "require_approval"}),
            None,
            T + 60_000,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(req.requested_by, format!("agent:{}", run.id));
    let mut d = decision(true, "cli", T);
    d.grant = Grant::ArgvPrefix;
    d.argv_prefix = Some(vec!["git".into(), "status".into()]);
    let decided = store
        .decide_approval(DEFAULT_WORKSPACE, &req.id, &d)
        .await
        .unwrap()
        .unwrap();
    let rule_id = decided.grant_id.clone().unwrap();
    let rules = store.list_rules(DEFAULT_WORKSPACE).await.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].argv_prefix.as_deref(),
        Some(&["git".to_string(), "status".to_string()][..])
    );
    assert_eq!(rules[0].source_approval, req.id);
    assert_eq!(
        store
            .live_rules(DEFAULT_WORKSPACE, "agent", "run_other")
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .live_rules(DEFAULT_WORKSPACE, "other-worker", &run.id)
            .await
            .unwrap()
            .is_empty()
    );
    // Another workspace sees and revokes nothing.
    assert!(store.list_rules(WS_B).await.unwrap().is_empty());
    assert!(
        store
            .live_rules(WS_B, "agent", &run.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        !store
            .revoke_rule(WS_B, &rule_id, "x", airlock_audit::Actor::System, T)
            .await
            .unwrap()
    );
    assert!(
        store
            .revoke_rule(
                DEFAULT_WORKSPACE,
                &rule_id,
                "cli",
                airlock_audit::Actor::System,
                T
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .revoke_rule(
                DEFAULT_WORKSPACE,
                &rule_id,
                "cli",
                airlock_audit::Actor::System,
                T
            )
            .await
            .unwrap(),
        "once"
    );
    assert!(
        store
            .live_rules(DEFAULT_WORKSPACE, "agent", &run.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.list_rules(DEFAULT_WORKSPACE).await.unwrap()[0]
            .revoked_by
            .as_deref(),
        Some("cli")
    );
    // Settings: off by default, per workspace.
    assert!(
        !store
            .approval_settings(DEFAULT_WORKSPACE)
            .await
            .unwrap()
            .allow_self_approval
    );
    store
        .put_approval_settings(WS_B, true, "cli", airlock_audit::Actor::System, T)
        .await
        .unwrap();
    assert!(
        store
            .approval_settings(WS_B)
            .await
            .unwrap()
            .allow_self_approval
    );
    assert!(
        !store
            .approval_settings(DEFAULT_WORKSPACE)
            .await
            .unwrap()
            .allow_self_approval
    );
    let k = kinds(&store.audit_lines(DEFAULT_WORKSPACE).await.unwrap());
    assert!(
        k.contains(&"approval_rule.created".to_string())
            && k.contains(&"approval_rule.revoked".to_string())
    );
}
both!(agt_5_rules_and_settings_are_listed_revocable_and_workspace_scoped);

async fn dur_2_the_action_journal_moves_under_the_run_token(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let run = store.create_run(new_run("agent")).await.unwrap().run;
    let c = store
        .claim_run("n", Duration::from_secs(60), &run.id)
        .await
        .unwrap()
        .unwrap();
    let p = serde_json::json!({"tool": "write_file", "path": "a.txt", "sha256": "00"});
    let first = store
        .propose_action(&run.id, c.token, "k1", "write_file", &p, T)
        .await
        .unwrap()
        .unwrap();
    assert!(first.created);
    assert_eq!(
        (first.action.state, first.action.seq),
        (ActionState::Proposed, 1)
    );
    // The same key and payload is the same action; another payload is refused.
    let again = store
        .propose_action(&run.id, c.token, "k1", "write_file", &p, T)
        .await
        .unwrap()
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.action.id, first.action.id);
    let other = serde_json::json!({"tool": "write_file", "path": "b.txt"});
    assert_eq!(
        store
            .propose_action(&run.id, c.token, "k1", "write_file", &other, T)
            .await
            .unwrap(),
        Err(ActionRefusal::KeyReused)
    );
    // A stale token writes nothing.
    assert!(matches!(
        store
            .propose_action(&run.id, c.token - 1, "k2", "write_file", &p, T)
            .await,
        Err(StoreError::StaleToken)
    ));
    let id = first.action.id.clone();
    let hash = first.action.payload_hash.clone();
    // Dispatch needs a decision first.
    assert_eq!(
        store
            .dispatch_action(&run.id, c.token, &id, &hash, T, DECIDERS, "cli")
            .await
            .unwrap(),
        Err(ActionRefusal::NotIn(ActionState::Proposed))
    );
    let decided = store
        .decide_action(
            &run.id,
            c.token,
            &id,
            true,
            &serde_json::json!({"verdict": "allow", "rule": "read-only"}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decided.state, ActionState::Decided);
    // One changed field: refused.
    assert_eq!(
        store
            .dispatch_action(&run.id, c.token, &id, &"0".repeat(64), T, DECIDERS, "cli")
            .await
            .unwrap(),
        Err(ActionRefusal::HashMismatch)
    );
    // 100 concurrent dispatches of one action: one wins.
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (store, run_id, id, hash) = (store.clone(), run.id.clone(), id.clone(), hash.clone());
        tasks.push(tokio::spawn(async move {
            store
                .dispatch_action(&run_id, c.token, &id, &hash, T + 1, DECIDERS, "cli")
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(a) => {
                won += 1;
                assert_eq!((a.state, a.attempt), (ActionState::Dispatched, 1));
            }
            Err(ActionRefusal::NotIn(ActionState::Dispatched)) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(won, 1);
    let done = store
        .finish_action(
            &run.id,
            c.token,
            &id,
            ActionEnd::Completed,
            Some(&serde_json::json!({"bytes": 3})),
            None,
            T + 2,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (done.state, done.result.clone()),
        (
            ActionState::Completed,
            Some(serde_json::json!({"bytes": 3}))
        )
    );
    assert_eq!(
        store
            .finish_action(&run.id, c.token, &id, ActionEnd::Failed, None, None, T + 3)
            .await
            .unwrap(),
        Err(ActionRefusal::NotIn(ActionState::Completed))
    );
    // Denied: aborted with `denied`, never dispatchable.
    let denied = store
        .propose_action(
            &run.id,
            c.token,
            "k2",
            "http_request",
            &serde_json::json!({"url": "https://x"}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    let denied = store
        .decide_action(
            &run.id,
            c.token,
            &denied.id,
            false,
            &serde_json::json!({"verdict": "deny"}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(denied.state, ActionState::Aborted);
    assert_eq!(denied.error.as_ref().unwrap()["code"], "denied");
    // Approval: the action waits, the run parks holding nothing, the
    // decision requeues it, and the new holder dispatches, consuming the
    // approval once.
    let risky = store
        .propose_action(
            &run.id,
            c.token,
            "k3",
            "run_command",
            &serde_json::json!({"argv": ["rm", "x"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    let (waiting, req) = store
        .request_action_approval(
            &run.id,
            c.token,
            &risky.id,
            &serde_json::json!({"verdict": "require_approval"}),
            Some("tainted by https://x".into()),
            T + 60_000,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(waiting.state, ActionState::AwaitingApproval);
    assert_eq!(waiting.approval_id.as_deref(), Some(req.id.as_str()));
    assert_eq!(req.payload_hash, risky.payload_hash);
    assert!(store.park_for_approval(&run.id, c.token, T).await.unwrap());
    let parked = store
        .get_run(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(parked.state, RunState::AwaitingApproval);
    assert!(matches!(
        store
            .propose_action(&run.id, c.token, "k4", "x", &p, T)
            .await,
        Err(StoreError::StaleToken)
    ));
    store
        .decide_approval(DEFAULT_WORKSPACE, &req.id, &decision(true, "cli", T))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .get_action(DEFAULT_WORKSPACE, &run.id, &risky.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ActionState::Approved
    );
    let c2 = store
        .claim_run("n", Duration::from_secs(60), &run.id)
        .await
        .unwrap()
        .expect("requeued");
    let d = store
        .dispatch_action(
            &run.id,
            c2.token,
            &risky.id,
            &risky.payload_hash,
            T + 1,
            DECIDERS,
            "cli",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.state, ActionState::Dispatched);
    assert_eq!(
        store
            .get_approval(DEFAULT_WORKSPACE, &req.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Consumed
    );
    // Workspace scope: another workspace sees no action.
    assert!(store.list_actions(WS_B, &run.id).await.unwrap().is_empty());
    assert_eq!(
        store.get_action(WS_B, &run.id, &risky.id).await.unwrap(),
        None
    );
    let mine = store
        .list_actions(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap();
    assert_eq!(
        mine.iter().map(|a| a.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let ev = store
        .events(DEFAULT_WORKSPACE, &run.id, 0, 500)
        .await
        .unwrap();
    assert!(
        ev.iter()
            .any(|e| e.kind == "tool_call" && e.data["state"] == "dispatched")
    );
    let lines = store.audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    let dispatched = lines
        .iter()
        .map(|l| airlock_audit::from_json_line(l).unwrap().event)
        .find(|e| {
            e.event_type == "action.dispatched" && e.action_id.as_deref() == Some(risky.id.as_str())
        })
        .expect("audited");
    assert_eq!(
        dispatched.payload_hash.as_deref(),
        Some(risky.payload_hash.as_str())
    );
    assert_eq!(dispatched.metadata["approval"], req.id.as_str());
}
both!(dur_2_the_action_journal_moves_under_the_run_token);

async fn dur_2_a_dispatched_action_without_a_result_waits_for_a_person(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let run = store.create_run(new_run("agent")).await.unwrap().run;
    let c = store
        .claim_run("n", Duration::from_millis(0), &run.id)
        .await
        .unwrap()
        .unwrap();
    store.mark_workload_started(&run.id, c.token).await.unwrap();
    let p = serde_json::json!({"argv": ["deploy"]});
    let a = store
        .propose_action(&run.id, c.token, "k", "run_command", &p, T)
        .await
        .unwrap()
        .unwrap()
        .action;
    store
        .decide_action(
            &run.id,
            c.token,
            &a.id,
            true,
            &serde_json::json!({}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    store
        .dispatch_action(&run.id, c.token, &a.id, &a.payload_hash, T, DECIDERS, "cli")
        .await
        .unwrap()
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    // The executor is gone (its lease expired): recovery, not a retry.
    let recovered = store.recover_dispatched(store_now()).await.unwrap();
    assert_eq!(recovered, vec![(run.id.clone(), vec![a.id.clone()])]);
    assert_eq!(
        store
            .get_action(DEFAULT_WORKSPACE, &run.id, &a.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ActionState::OutcomeUnknown
    );
    let r = store
        .get_run(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.state, RunState::AwaitingApproval, "waits for a person");
    // The reaper leaves it alone, nothing claims it, recovery is idempotent.
    assert!(store.reap_expired(&|_| true).await.unwrap().is_empty());
    assert!(
        store
            .claim_next("n", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .recover_dispatched(store_now())
            .await
            .unwrap()
            .is_empty()
    );
    // Another workspace cannot settle it.
    assert!(matches!(
        store
            .settle_action(
                WS_B,
                &run.id,
                &a.id,
                Settlement::Succeeded,
                "x",
                airlock_audit::Actor::System,
                None,
                None,
                T
            )
            .await,
        Err(StoreError::NotFound)
    ));
    // A person says: re-run it, after a new approval of the same payload.
    let rerun = store
        .settle_action(
            DEFAULT_WORKSPACE,
            &run.id,
            &a.id,
            Settlement::Rerun,
            "cli",
            airlock_audit::Actor::System,
            Some("unsure"),
            Some(("re-run of an unknown outcome".into(), T + 60_000)),
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rerun.state, ActionState::AwaitingApproval);
    let req = store
        .get_approval(DEFAULT_WORKSPACE, rerun.approval_id.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (req.payload_hash.as_str(), req.state),
        (a.payload_hash.as_str(), ApprovalState::Pending)
    );
    assert_eq!(
        store
            .get_run(DEFAULT_WORKSPACE, &run.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        RunState::AwaitingApproval
    );
    store
        .decide_approval(DEFAULT_WORKSPACE, &req.id, &decision(true, "cli", T))
        .await
        .unwrap()
        .unwrap();
    let c2 = store
        .claim_run("n", Duration::from_millis(0), &run.id)
        .await
        .unwrap()
        .expect("resumed");
    let again = store
        .dispatch_action(
            &run.id,
            c2.token,
            &a.id,
            &a.payload_hash,
            T,
            DECIDERS,
            "cli",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.attempt, 2);
    std::thread::sleep(Duration::from_millis(5));
    // Crashed again: settled by a person as succeeded this time.
    store.recover_dispatched(store_now()).await.unwrap();
    assert_eq!(
        store
            .settle_action(
                DEFAULT_WORKSPACE,
                &run.id,
                &a.id,
                Settlement::Succeeded,
                "cli",
                airlock_audit::Actor::System,
                None,
                None,
                T
            )
            .await
            .unwrap()
            .unwrap()
            .state,
        ActionState::Completed
    );
    assert_eq!(
        store
            .get_run(DEFAULT_WORKSPACE, &run.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        RunState::Queued,
        "resumes"
    );
    assert_eq!(
        store
            .settle_action(
                DEFAULT_WORKSPACE,
                &run.id,
                &a.id,
                Settlement::Failed,
                "cli",
                airlock_audit::Actor::System,
                None,
                None,
                T
            )
            .await
            .unwrap(),
        Err(ActionRefusal::NotIn(ActionState::Completed))
    );
    let k = kinds(&store.audit_lines(DEFAULT_WORKSPACE).await.unwrap());
    assert!(
        k.contains(&"action.outcome_unknown".to_string())
            && k.contains(&"action.settled".to_string())
    );
}
both!(dur_2_a_dispatched_action_without_a_result_waits_for_a_person);

fn store_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn agt_6_an_emergency_stop_ends_what_it_must_and_resume_restarts_nothing(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    // In A: a queued run, a waiting run, a running run with open actions.
    let running = store.create_run(new_run("agent")).await.unwrap().run;
    let c = store
        .claim_run("n", Duration::from_secs(60), &running.id)
        .await
        .unwrap()
        .unwrap();
    let open = store
        .propose_action(
            &running.id,
            c.token,
            "k",
            "run_command",
            &serde_json::json!({"argv": ["ls"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    let decided = store
        .propose_action(
            &running.id,
            c.token,
            "k2",
            "run_command",
            &serde_json::json!({"argv": ["pwd"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    store
        .decide_action(
            &running.id,
            c.token,
            &decided.id,
            true,
            &serde_json::json!({}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    let queued = store.create_run(new_run("hello")).await.unwrap().run;
    let (waiting, req) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    // The same in B, which is not stopped.
    let b_run = store.create_run(run_in(WS_B, "agent")).await.unwrap().run;
    let bc = store
        .claim_run("n", Duration::from_secs(60), &b_run.id)
        .await
        .unwrap()
        .unwrap();
    let b_act = store
        .propose_action(
            &b_run.id,
            bc.token,
            "k",
            "run_command",
            &serde_json::json!({"argv": ["ls"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    store
        .decide_action(
            &b_run.id,
            bc.token,
            &b_act.id,
            true,
            &serde_json::json!({}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    let b_queued = store.create_run(run_in(WS_B, "hello")).await.unwrap().run;
    let (_, b_req) = gated_run(&store, WS_B, T + 60_000).await;

    let out = store
        .emergency_stop(
            DEFAULT_WORKSPACE,
            "usr_x",
            airlock_audit::Actor::Human("usr_x".into()),
            Some("runaway"),
            T,
        )
        .await
        .unwrap();
    assert_eq!(out.running, vec![running.id.clone()]);
    assert_eq!(
        (
            out.stopped.runs_cancelled,
            out.stopped.runs_stopping,
            out.stopped.approvals_cancelled,
            out.stopped.actions_aborted
        ),
        (2, 1, 1, 2)
    );
    assert!(out.stopped.state.stopped);
    assert_eq!(out.stopped.state.reason.as_deref(), Some("runaway"));
    for id in [&queued.id, &waiting.id] {
        let r = store.get_run(DEFAULT_WORKSPACE, id).await.unwrap().unwrap();
        assert_eq!(
            (r.state, r.error_code.as_deref()),
            (RunState::Cancelled, Some("emergency_stop")),
            "{id}"
        );
    }
    assert_eq!(
        store.cancel_kind(&running.id).await.unwrap(),
        Some(CANCEL_BY_EMERGENCY_STOP)
    );
    assert_eq!(
        store
            .get_approval(DEFAULT_WORKSPACE, &req.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Cancelled
    );
    for a in [&open, &decided] {
        let a = store
            .get_action(DEFAULT_WORKSPACE, &running.id, &a.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(a.state, ActionState::Aborted);
        assert_eq!(a.error.unwrap()["code"], "emergency_stop");
    }
    // Nothing new is dispatched or asked for while stopped.
    let late = store
        .propose_action(
            &running.id,
            c.token,
            "k3",
            "run_command",
            &serde_json::json!({"argv": ["id"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    store
        .decide_action(
            &running.id,
            c.token,
            &late.id,
            true,
            &serde_json::json!({}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .dispatch_action(
                &running.id,
                c.token,
                &late.id,
                &late.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ActionRefusal::Stopped)
    );
    let ask_late = store
        .propose_action(
            &running.id,
            c.token,
            "k4",
            "run_command",
            &serde_json::json!({"argv": ["rm"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    assert_eq!(
        store
            .request_action_approval(
                &running.id,
                c.token,
                &ask_late.id,
                &serde_json::json!({}),
                None,
                T + 1000,
                T
            )
            .await
            .unwrap()
            .map(|_| ()),
        Err(ActionRefusal::Stopped)
    );
    // B is untouched: its queued run, request and action stand and dispatch.
    assert!(!store.emergency_state(WS_B).await.unwrap().stopped);
    assert_eq!(
        store
            .get_run(WS_B, &b_queued.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        RunState::Queued
    );
    assert_eq!(
        store
            .get_approval(WS_B, &b_req.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Pending
    );
    assert_eq!(store.cancel_kind(&b_run.id).await.unwrap(), Some(0));
    assert!(
        store
            .dispatch_action(
                &b_run.id,
                bc.token,
                &b_act.id,
                &b_act.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap()
            .is_ok()
    );
    // Resume in B changes nothing in A; resume in A restarts nothing.
    store
        .emergency_resume(WS_B, "cli", airlock_audit::Actor::System, T)
        .await
        .unwrap();
    assert!(
        store
            .emergency_state(DEFAULT_WORKSPACE)
            .await
            .unwrap()
            .stopped
    );
    assert_eq!(
        store.stopped_workspaces().await.unwrap(),
        vec![DEFAULT_WORKSPACE.to_string()]
    );
    let st = store
        .emergency_resume(
            DEFAULT_WORKSPACE,
            "usr_y",
            airlock_audit::Actor::Human("usr_y".into()),
            T + 1,
        )
        .await
        .unwrap();
    assert!(!st.stopped);
    assert_eq!(st.changed_by.as_deref(), Some("usr_y"));
    for id in [&queued.id, &waiting.id] {
        assert_eq!(
            store
                .get_run(DEFAULT_WORKSPACE, id)
                .await
                .unwrap()
                .unwrap()
                .state,
            RunState::Cancelled
        );
    }
    assert!(
        store
            .claim_next("n", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .map(|c| c.run.workspace_id)
            != Some(DEFAULT_WORKSPACE.to_string())
    );
    let k = kinds(&store.audit_lines(DEFAULT_WORKSPACE).await.unwrap());
    assert!(
        k.contains(&"emergency.stopped".to_string())
            && k.contains(&"emergency.resumed".to_string())
    );
}
both!(agt_6_an_emergency_stop_ends_what_it_must_and_resume_restarts_nothing);
