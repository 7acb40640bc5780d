//! Schedules: fires claimed exactly once, watermarks, stale takeover, and
//! fire rows scoped to their workspace.

use airlock_store::*;

use crate::WS_B;

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

/// OPS-2: one scheduler lock holder at a time; a second try gets `None`
/// while the first holds it, the holder is named, and a dropped holder
/// (its connection closed, as when its process dies) frees the lock for the
/// next try. On SQLite every try holds it (one worker per file, enforced by
/// the CLI's lock file) and nobody is named.
async fn ops_2_scheduler_lock_has_one_holder_and_passes_on(store: Store) {
    let first = store.try_scheduler_lock("node:1").await.unwrap();
    let Some(mut first) = first else {
        panic!("an untaken lock is taken")
    };
    assert!(first.still_held().await);
    let second = store.try_scheduler_lock("node:2").await.unwrap();
    if store.backend() == Backend::Sqlite {
        assert!(second.is_some());
        assert_eq!(store.scheduler_lock_holder().await.unwrap(), None);
        return;
    }
    // Positive control of the refusal below: the holder is visible.
    assert_eq!(
        store.scheduler_lock_holder().await.unwrap().as_deref(),
        Some("node:1")
    );
    assert!(second.is_none(), "a second holder while the first lives");
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let second = loop {
        if let Some(l) = store.try_scheduler_lock("node:2").await.unwrap() {
            break l;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the lock never passed on"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(
        store.scheduler_lock_holder().await.unwrap().as_deref(),
        Some("node:2")
    );
    second.release().await;
    assert_eq!(store.scheduler_lock_holder().await.unwrap(), None);
}
both!(ops_2_scheduler_lock_has_one_holder_and_passes_on);
