//! What `airlock validate` and `airlock gc` read (DUR-6): a read-only
//! connection that can read everything and write nothing.

use airlock_store::*;

use crate::rec;

async fn dur_6_read_only_store_reads_blob_references_and_refuses_writes(store: Store) {
    let digest = "cd".repeat(32);
    store
        .create_upload(
            &UploadRecord {
                id: "upl_m".into(),
                workspace_id: DEFAULT_WORKSPACE.into(),
                user_id: "usr_1".into(),
                name: "a.txt".into(),
                digest: digest.clone(),
                size: 7,
                media_type: "text/plain".into(),
                created_at: 1,
            },
            rec("upload.created"),
        )
        .await
        .unwrap();

    let ro = Store::open_read_only(store.url()).await.unwrap();
    assert_eq!(ro.integrity_problems().await.unwrap(), Vec::<String>::new());
    assert_eq!(ro.schema_version().await.unwrap(), SCHEMA_VERSION);
    assert_eq!(
        ro.blob_refs().await.unwrap(),
        vec![BlobRef {
            kind: "upload",
            object: "upl_m".into(),
            digest: digest.clone(),
            size: 7,
        }]
    );
    assert!(ro.digest_referenced(&digest).await.unwrap());
    assert!(!ro.digest_referenced(&"ef".repeat(32)).await.unwrap());

    // It writes nothing; control: the same write through the ordinary store succeeds.
    assert!(ro.audit(DEFAULT_WORKSPACE, rec("x.ro")).await.is_err());
    store.audit(DEFAULT_WORKSPACE, rec("x.rw")).await.unwrap();
    ro.pool().close().await;
}
both!(dur_6_read_only_store_reads_blob_references_and_refuses_writes);

#[tokio::test]
async fn dur_6_read_only_open_of_a_missing_sqlite_file_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("airlock.db");
    let url = format!("sqlite://{}", db.display());
    assert!(Store::open_read_only(&url).await.is_err());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
