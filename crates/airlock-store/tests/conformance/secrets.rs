//! Vault records: wrapped data keys and sealed secrets.

use airlock_store::*;

use crate::WS_B;

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
