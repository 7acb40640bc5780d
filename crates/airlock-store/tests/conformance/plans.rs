//! Plans: single-use, expiring tokens, scoped to their workspace.

use std::time::Duration;

use airlock_store::*;

use crate::WS_B;

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
