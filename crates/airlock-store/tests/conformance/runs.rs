//! Runs as callers see them: create (with idempotency keys), get, list,
//! queue position, cancel, events and artifacts, each scoped to its workspace.

use std::time::Duration;

use airlock_store::*;

use crate::{WS_B, kinds, new_run, run_in};

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
