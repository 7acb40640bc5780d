//! Uploads (API-5).

use airlock_store::*;

use crate::{kinds, rec};

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
