//! Webhook secrets and the delivery replay store.

use airlock_store::*;

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
