//! Login throttle state (IAM-2): shared through the database, counted
//! atomically, bounded.

use airlock_store::*;

/// The shape of the IAM-2 policy: 2 free failures, then 1 s doubling.
fn delay(failures: i64) -> i64 {
    if failures <= 2 {
        0
    } else {
        1000 << (failures - 3).min(20)
    }
}

async fn iam_2_throttle_state_counts_waits_clears_and_kinds_are_separate(store: Store) {
    let a = ThrottleKind::Account;
    assert_eq!(
        store.throttle_next_allowed(a, "acct:ada").await.unwrap(),
        None
    );
    for n in 1..=2 {
        assert_eq!(
            store
                .throttle_failure(a, "acct:ada", 10_000, &delay)
                .await
                .unwrap(),
            n
        );
    }
    // Free failures impose no wait beyond now.
    assert_eq!(
        store.throttle_next_allowed(a, "acct:ada").await.unwrap(),
        Some(10_000)
    );
    store
        .throttle_failure(a, "acct:ada", 10_000, &delay)
        .await
        .unwrap();
    assert_eq!(
        store.throttle_next_allowed(a, "acct:ada").await.unwrap(),
        Some(11_000)
    );
    // A later failure with a shorter wait never shortens a longer one.
    store
        .throttle_failure(a, "acct:ada", 10_500, &|_| 1)
        .await
        .unwrap();
    assert_eq!(
        store.throttle_next_allowed(a, "acct:ada").await.unwrap(),
        Some(11_000)
    );
    // The same key in the other kind is another throttle.
    assert_eq!(
        store
            .throttle_next_allowed(ThrottleKind::Client, "acct:ada")
            .await
            .unwrap(),
        None
    );
    store.throttle_clear(a, "acct:ada").await.unwrap();
    assert_eq!(
        store.throttle_next_allowed(a, "acct:ada").await.unwrap(),
        None
    );
    assert_eq!(
        store
            .throttle_failure(a, "acct:ada", 20_000, &delay)
            .await
            .unwrap(),
        1,
        "counting restarts after a success"
    );
}
both!(iam_2_throttle_state_counts_waits_clears_and_kinds_are_separate);

async fn iam_2_concurrent_throttle_failures_each_count(store: Store) {
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .throttle_failure(ThrottleKind::Client, "ip:10.0.0.1", 5_000, &delay)
                .await
                .unwrap()
        }));
    }
    let mut counts = Vec::new();
    for t in tasks {
        counts.push(t.await.unwrap());
    }
    counts.sort_unstable();
    assert_eq!(counts, (1..=20).collect::<Vec<i64>>(), "no failure lost");
    assert_eq!(
        store
            .throttle_next_allowed(ThrottleKind::Client, "ip:10.0.0.1")
            .await
            .unwrap(),
        Some(5_000 + delay(20))
    );
}
both!(iam_2_concurrent_throttle_failures_each_count);

async fn iam_2_throttle_table_is_bounded_and_waiting_keys_go_last(store: Store) {
    let c = ThrottleKind::Client;
    // An old key still waiting (until 1_000_000), then 30 keys that waited
    // nothing, one per second.
    store
        .throttle_failure(c, "attacked", 0, &|_| 1_000_000)
        .await
        .unwrap();
    for i in 0..30 {
        store
            .throttle_failure(c, &format!("k{i}"), 1_000 + i * 1_000, &|_| 0)
            .await
            .unwrap();
    }
    store
        .throttle_failure(ThrottleKind::Account, "other-kind", 0, &|_| 0)
        .await
        .unwrap();
    // Quiet keys (last failure before 10_500, no wait left) are forgotten.
    let removed = store
        .prune_throttles(c, 40_000, 10_500, 1000)
        .await
        .unwrap();
    assert_eq!(removed, 10, "k0..k9 were quiet");
    assert_eq!(store.throttle_next_allowed(c, "k0").await.unwrap(), None);
    assert_eq!(
        store.throttle_next_allowed(c, "k10").await.unwrap(),
        Some(11_000)
    );
    assert!(
        store
            .throttle_next_allowed(c, "attacked")
            .await
            .unwrap()
            .is_some()
    );
    // Over the bound (21 keys > 10): trimmed to 9, oldest done keys first,
    // the waiting key kept.
    store.prune_throttles(c, 40_000, 0, 10).await.unwrap();
    assert_eq!(
        store.throttle_next_allowed(c, "attacked").await.unwrap(),
        Some(1_000_000),
        "a still-waiting key outlives the trim"
    );
    assert_eq!(store.throttle_next_allowed(c, "k20").await.unwrap(), None);
    assert_eq!(
        store.throttle_next_allowed(c, "k29").await.unwrap(),
        Some(30_000)
    );
    // The other kind is untouched.
    assert!(
        store
            .throttle_next_allowed(ThrottleKind::Account, "other-kind")
            .await
            .unwrap()
            .is_some()
    );
}
both!(iam_2_throttle_table_is_bounded_and_waiting_keys_go_last);
