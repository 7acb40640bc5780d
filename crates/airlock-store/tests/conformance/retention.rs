//! Retention per workspace (DUR-7): a pass removes exactly what expired —
//! ended runs with everything derived from them, log lines, artifact
//! records, unneeded uploads, old schedule fires — in the workspace asked
//! for only, never an `unknown` or unfinished run, never the upload an
//! unfinished run names, never a schedule's newest fire; each removal is an
//! audit event; the preview counts what the pass then removes.

use std::time::Duration;

use airlock_store::*;

use crate::{WS_B, kinds, run_in};

const DAY: i64 = 86_400_000;

/// A run of `ws` taken to `state` through the executor's own calls, with a
/// log line, a status event and an artifact; `idempotency` given.
async fn ended(store: &Store, ws: &str, state: RunState, key: Option<&str>) -> String {
    let mut new = run_in(ws, "w");
    new.idempotency = key.map(|k| (k.to_string(), "h".to_string()));
    let run = store.create_run(new).await.unwrap().run;
    let c = store
        .claim_run("node-t", Duration::from_secs(60), &run.id)
        .await
        .unwrap()
        .unwrap();
    let json = serde_json::json!({"line": "x"});
    store
        .append_event(&run.id, c.token, "log", &json)
        .await
        .unwrap();
    store
        .append_event(&run.id, c.token, "status", &json)
        .await
        .unwrap();
    store
        .add_artifact(
            &run.id,
            c.token,
            &Artifact {
                name: "out.txt".into(),
                digest: "ab".repeat(32),
                size: 1,
                media_type: "text/plain".into(),
            },
        )
        .await
        .unwrap();
    store
        .finish_run(&run.id, c.token, state, &Finish::default())
        .await
        .unwrap();
    run.id
}

async fn upload(store: &Store, ws: &str, id: &str, digest: &str) {
    store
        .create_upload(
            &UploadRecord {
                id: id.into(),
                workspace_id: ws.into(),
                user_id: "usr_1".into(),
                name: "a.txt".into(),
                digest: digest.into(),
                size: 1,
                media_type: "text/plain".into(),
                created_at: now_ms(),
            },
            AuditRecord::system("upload.created", None),
        )
        .await
        .unwrap();
}

fn rec(step: &RetentionRemoved) -> AuditRecord {
    AuditRecord::system("retention.applied", None)
        .with_metadata(serde_json::json!({"runs": step.runs}))
}

async fn dur_7_retention_removes_what_expired_and_nothing_else(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let old = ended(&store, DEFAULT_WORKSPACE, RunState::Succeeded, Some("k1")).await;
    let failed = ended(&store, DEFAULT_WORKSPACE, RunState::Failed, None).await;
    let unknown = ended(&store, DEFAULT_WORKSPACE, RunState::Unknown, None).await;
    let other = ended(&store, WS_B, RunState::Succeeded, None).await;
    let needed = "cd".repeat(32);
    let mut waiting = run_in(DEFAULT_WORKSPACE, "w");
    waiting.input = serde_json::json!({"file": {"upload": "upl_b", "sha256": needed}});
    let waiting = store.create_run(waiting).await.unwrap().run.id;
    upload(&store, DEFAULT_WORKSPACE, "upl_a", &"ef".repeat(32)).await;
    upload(&store, DEFAULT_WORKSPACE, "upl_b", &needed).await;
    upload(&store, WS_B, "upl_c", &"ef".repeat(32)).await;
    let now = now_ms();
    for at in [1_000, 2_000, 3_000] {
        assert!(
            store
                .claim_fire(DEFAULT_WORKSPACE, "w", 0, at, now)
                .await
                .unwrap()
        );
        assert!(store.claim_fire(WS_B, "w", 0, at, now).await.unwrap());
    }
    let every = RetentionSettings {
        runs_days: Some(30),
        logs_days: Some(30),
        artifacts_days: Some(30),
        uploads_days: Some(30),
        fires_days: Some(30),
    };

    // Control: a day before anything expires, nothing is counted or removed.
    let early = now_ms() + 29 * DAY;
    assert_eq!(
        store
            .retention_preview(DEFAULT_WORKSPACE, every, early)
            .await
            .unwrap(),
        RetentionRemoved::default()
    );
    let none = store
        .apply_retention(DEFAULT_WORKSPACE, every, early, rec)
        .await
        .unwrap();
    assert_eq!(none, RetentionRemoved::default());
    assert!(
        store
            .get_run(DEFAULT_WORKSPACE, &old)
            .await
            .unwrap()
            .is_some()
    );

    // Logs and artifact records alone: the runs stay, their other events too.
    let later = now_ms() + 31 * DAY;
    let parts = RetentionSettings {
        logs_days: Some(30),
        artifacts_days: Some(30),
        ..RetentionSettings::default()
    };
    let want = store
        .retention_preview(DEFAULT_WORKSPACE, parts, later)
        .await
        .unwrap();
    let got = store
        .apply_retention(DEFAULT_WORKSPACE, parts, later, rec)
        .await
        .unwrap();
    assert_eq!(want, got);
    // old, failed; the unknown run keeps its material.
    assert_eq!((got.log_events, got.artifacts, got.runs), (2, 2, 0));
    let events = store.events(DEFAULT_WORKSPACE, &old, 0, 100).await.unwrap();
    assert_eq!(events.len(), 1, "the status event stays");
    assert!(
        store
            .artifacts(DEFAULT_WORKSPACE, &old)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .artifacts(DEFAULT_WORKSPACE, &unknown)
            .await
            .unwrap()
            .len(),
        1
    );

    // Everything.
    let want = store
        .retention_preview(DEFAULT_WORKSPACE, every, later)
        .await
        .unwrap();
    let got = store
        .apply_retention(DEFAULT_WORKSPACE, every, later, rec)
        .await
        .unwrap();
    assert_eq!(want, got);
    assert_eq!(
        got,
        RetentionRemoved {
            runs: 2,
            log_events: 0,
            artifacts: 0,
            uploads: 1,
            fires: 2,
        }
    );
    for gone in [&old, &failed] {
        assert!(
            store
                .get_run(DEFAULT_WORKSPACE, gone)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .events(DEFAULT_WORKSPACE, gone, 0, 100)
                .await
                .unwrap()
                .is_empty()
        );
    }
    for kept in [&unknown, &waiting] {
        assert!(
            store
                .get_run(DEFAULT_WORKSPACE, kept)
                .await
                .unwrap()
                .is_some()
        );
    }
    assert!(store.get_run(WS_B, &other).await.unwrap().is_some());
    assert_eq!(store.events(WS_B, &other, 0, 100).await.unwrap().len(), 2);
    // The idempotency key went with its run: the same key makes a new run.
    let mut again = run_in(DEFAULT_WORKSPACE, "w");
    again.idempotency = Some(("k1".into(), "h".into()));
    let created = store.create_run(again).await.unwrap();
    assert_ne!(created.run.id, old);
    assert!(
        store
            .get_upload(DEFAULT_WORKSPACE, "upl_a")
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.get_upload(WS_B, "upl_c").await.unwrap().is_some());
    assert!(
        store
            .get_upload(DEFAULT_WORKSPACE, "upl_b")
            .await
            .unwrap()
            .is_some()
    );
    let fires = |ws: &'static str| {
        let store = store.clone();
        async move {
            store
                .list_fires(ws, "w", 0, 10)
                .await
                .unwrap()
                .into_iter()
                .map(|f| f.fire_at)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        fires(DEFAULT_WORKSPACE).await,
        vec![3_000],
        "the newest stays"
    );
    assert_eq!(fires(WS_B).await, vec![3_000, 2_000, 1_000]);

    // Each removing step is on the chain; a pass that removed nothing is not.
    let lines = store.audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    let applied = kinds(&lines)
        .iter()
        .filter(|k| *k == "retention.applied")
        .count();
    assert_eq!(applied, 3, "logs+artifacts, the runs step, the rest");
    assert!(
        kinds(&store.audit_lines(WS_B).await.unwrap())
            .iter()
            .all(|k| k != "retention.applied")
    );
}
both!(dur_7_retention_removes_what_expired_and_nothing_else);

async fn dur_7_retention_settings_are_per_workspace(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    assert!(
        store
            .retention_settings(DEFAULT_WORKSPACE)
            .await
            .unwrap()
            .is_empty()
    );
    let s = RetentionSettings {
        runs_days: Some(7),
        ..RetentionSettings::default()
    };
    store
        .set_retention_settings(
            DEFAULT_WORKSPACE,
            s,
            "usr_1",
            AuditRecord::system("retention.set", None),
        )
        .await
        .unwrap();
    assert_eq!(
        store.retention_settings(DEFAULT_WORKSPACE).await.unwrap(),
        s
    );
    assert!(store.retention_settings(WS_B).await.unwrap().is_empty());
    assert_eq!(
        store.workspaces_with_retention().await.unwrap(),
        vec![DEFAULT_WORKSPACE.to_string()]
    );
    store
        .set_retention_settings(
            DEFAULT_WORKSPACE,
            RetentionSettings::default(),
            "usr_1",
            AuditRecord::system("retention.set", None),
        )
        .await
        .unwrap();
    assert!(store.workspaces_with_retention().await.unwrap().is_empty());
}
both!(dur_7_retention_settings_are_per_workspace);

/// Rows of `table` in `ws` (through the raw pool: what the store left).
async fn rows(store: &Store, table: &str, ws: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM {table} WHERE workspace_id = $1"
    ))
    .bind(ws)
    .fetch_one(store.pool())
    .await
    .unwrap()
}

/// Tables with a `workspace_id` column, read from the schema itself.
async fn owned_tables(store: &Store) -> Vec<String> {
    let sqlite: Option<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 1")
            .fetch_optional(store.pool())
            .await
            .unwrap_or(None);
    let mut out: Vec<String> = if sqlite.is_some() {
        let names: Vec<String> =
            sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table'")
                .fetch_all(store.pool())
                .await
                .unwrap();
        let mut with = Vec::new();
        for n in names {
            let c: i64 = sqlx::query_scalar(&format!(
                "SELECT COUNT(*) FROM pragma_table_info('{n}') WHERE name = 'workspace_id'"
            ))
            .fetch_one(store.pool())
            .await
            .unwrap();
            if c > 0 {
                with.push(n);
            }
        }
        with
    } else {
        sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.columns \
             WHERE column_name = 'workspace_id' AND table_schema = 'public'",
        )
        .fetch_all(store.pool())
        .await
        .unwrap()
    };
    out.sort();
    out
}

/// DUR-7: deleting a workspace removes every row it owns, in every table
/// the schema gives a `workspace_id` (read from the schema, so a new table
/// the deletion forgets fails here), and its quota usage; another
/// workspace's rows are untouched; its audit chain stays, ending in
/// `workspace.deleted`; nothing can be queued there afterwards; a second
/// deletion finds nothing. Control: with a run not yet ended it is refused
/// and removes nothing.
async fn dur_7_deleting_a_workspace_removes_everything_it_owns_and_nothing_else(store: Store) {
    let mut tables = owned_tables(&store).await;
    tables.retain(|t| t != "audit_events");
    let mut listed: Vec<String> = WORKSPACE_TABLES.iter().map(|t| t.to_string()).collect();
    listed.sort();
    assert_eq!(
        tables, listed,
        "tables with a workspace_id the deletion must cover"
    );

    store.ensure_workspace(WS_B, "b").await.unwrap();
    for ws in [DEFAULT_WORKSPACE, WS_B] {
        ended(&store, ws, RunState::Succeeded, Some("k1")).await;
        upload(&store, ws, &format!("upl_{ws}"), &"ef".repeat(32)).await;
        assert!(store.claim_fire(ws, "w", 0, 1_000, now_ms()).await.unwrap());
        store
            .put_model_profile(
                ws,
                "m",
                &serde_json::json!({}),
                "usr_1",
                AuditRecord::system("x", None),
            )
            .await
            .unwrap();
        store
            .set_retention_settings(
                ws,
                RetentionSettings {
                    runs_days: Some(1),
                    ..RetentionSettings::default()
                },
                "usr_1",
                AuditRecord::system("retention.set", None),
            )
            .await
            .unwrap();
    }
    // Control: an unfinished run makes the deletion refuse, removing nothing.
    let waiting = store.create_run(run_in(WS_B, "w")).await.unwrap().run;
    let before: Vec<i64> = {
        let mut v = Vec::new();
        for t in WORKSPACE_TABLES {
            v.push(rows(&store, t, WS_B).await);
        }
        v
    };
    assert!(before.iter().sum::<i64>() > 0);
    let r = store
        .delete_workspace(
            WS_B,
            now_ms(),
            |_| AuditRecord::system("workspace.deleted", None),
            |_| AuditRecord::system("workspace.purged", None),
        )
        .await
        .unwrap();
    assert_eq!(r, WorkspaceDeletion::Busy(1));
    for (t, n) in WORKSPACE_TABLES.iter().zip(&before) {
        assert_eq!(
            rows(&store, t, WS_B).await,
            *n,
            "{t} changed by a refused deletion"
        );
    }
    let c = store
        .claim_run("node-t", Duration::from_secs(60), &waiting.id)
        .await
        .unwrap()
        .unwrap();
    store
        .finish_run(
            &waiting.id,
            c.token,
            RunState::Cancelled,
            &Finish::default(),
        )
        .await
        .unwrap();

    let default_before: Vec<i64> = {
        let mut v = Vec::new();
        for t in WORKSPACE_TABLES {
            v.push(rows(&store, t, DEFAULT_WORKSPACE).await);
        }
        v
    };
    let r = store
        .delete_workspace(
            WS_B,
            now_ms(),
            |removed| {
                AuditRecord::system("workspace.deleted", None)
                    .with_metadata(serde_json::json!({"removed": removed}))
            },
            |removed| {
                AuditRecord::system("workspace.purged", None)
                    .with_metadata(serde_json::json!({"removed": removed}))
            },
        )
        .await
        .unwrap();
    let WorkspaceDeletion::Deleted(removed) = r else {
        panic!("{r:?}")
    };
    assert_eq!(removed["runs"], 2, "{removed:?}");
    for t in WORKSPACE_TABLES {
        assert_eq!(
            rows(&store, t, WS_B).await,
            0,
            "{t} kept rows of the deleted workspace"
        );
    }
    for (t, n) in WORKSPACE_TABLES.iter().zip(&default_before) {
        assert_eq!(
            rows(&store, t, DEFAULT_WORKSPACE).await,
            *n,
            "{t} of the other workspace changed"
        );
    }
    let chain = kinds(&store.audit_lines(WS_B).await.unwrap());
    assert_eq!(
        chain[chain.len() - 2..],
        [
            "workspace.deleted".to_string(),
            "workspace.purged".to_string()
        ]
    );
    assert!(chain.len() > 5, "the chain stays: {chain:?}");
    assert!(matches!(
        store.create_run(run_in(WS_B, "w")).await,
        Err(StoreError::NotFound)
    ));
    assert!(store.workspace_name(WS_B).await.unwrap().is_none());
    assert_eq!(
        store
            .delete_workspace(
                WS_B,
                now_ms(),
                |_| AuditRecord::system("x", None),
                |_| AuditRecord::system("y", None)
            )
            .await
            .unwrap(),
        WorkspaceDeletion::NotFound
    );
    // Control: the other workspace still queues runs.
    store
        .create_run(run_in(DEFAULT_WORKSPACE, "w"))
        .await
        .unwrap();
}
both!(dur_7_deleting_a_workspace_removes_everything_it_owns_and_nothing_else);

/// DUR-7: a deletion interrupted after its cut (a crash) leaves the
/// workspace unreachable at once — no member, key or secret, no run can be
/// queued, no name — with its runs still to purge; the purge, run again,
/// finishes in steps of runs (450 runs: three steps) and ends with
/// `purged_at` and one `workspace.purged` event; a second purge does
/// nothing. Control: before the purge the runs and their events are
/// there, and the other workspace is untouched throughout.
async fn dur_7_an_interrupted_workspace_deletion_is_unreachable_and_its_purge_resumes(
    store: Store,
) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    for (ws, n) in [(DEFAULT_WORKSPACE, 5), (WS_B, 225)] {
        for _ in 0..n {
            ended(&store, ws, RunState::Succeeded, None).await;
        }
        upload(&store, ws, &format!("upl_{ws}"), &"ab".repeat(32)).await;
    }
    let other_before: Vec<i64> = {
        let mut v = Vec::new();
        for t in WORKSPACE_TABLES {
            v.push(rows(&store, t, DEFAULT_WORKSPACE).await);
        }
        v
    };
    for _ in 0..225 {
        ended(&store, WS_B, RunState::Failed, None).await;
    }
    let r = store
        .cut_workspace(WS_B, now_ms(), |_| {
            AuditRecord::system("workspace.deleted", None)
        })
        .await
        .unwrap();
    assert!(matches!(r, WorkspaceDeletion::Deleted(_)), "{r:?}");
    // Unreachable at once.
    assert!(store.workspace_name(WS_B).await.unwrap().is_none());
    for t in ["memberships", "api_keys", "secrets", "data_keys"] {
        assert_eq!(rows(&store, t, WS_B).await, 0, "{t}");
    }
    assert!(matches!(
        store.create_run(run_in(WS_B, "w")).await,
        Err(StoreError::NotFound)
    ));
    // Control: the runs and their events are still there to purge.
    assert_eq!(rows(&store, "runs", WS_B).await, 450);
    assert!(rows(&store, "run_events", WS_B).await >= 450);
    assert_eq!(
        store.unpurged_workspaces().await.unwrap(),
        vec![WS_B.to_string()]
    );

    let removed = store
        .purge_workspace(WS_B, now_ms(), |removed| {
            AuditRecord::system("workspace.purged", None)
                .with_metadata(serde_json::json!({"removed": removed}))
        })
        .await
        .unwrap();
    assert_eq!(removed["runs"], 450, "{removed:?}");
    assert_eq!(removed["uploads"], 1, "{removed:?}");
    for t in WORKSPACE_TABLES {
        assert_eq!(rows(&store, t, WS_B).await, 0, "{t} kept rows");
    }
    assert!(store.unpurged_workspaces().await.unwrap().is_empty());
    let again = store
        .purge_workspace(WS_B, now_ms(), |_| AuditRecord::system("x", None))
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
    let chain = kinds(&store.audit_lines(WS_B).await.unwrap());
    assert_eq!(
        chain[chain.len() - 2..],
        [
            "workspace.deleted".to_string(),
            "workspace.purged".to_string()
        ]
    );
    for (t, n) in WORKSPACE_TABLES.iter().zip(&other_before) {
        assert_eq!(
            rows(&store, t, DEFAULT_WORKSPACE).await,
            *n,
            "{t} of the other workspace"
        );
    }
}
both!(dur_7_an_interrupted_workspace_deletion_is_unreachable_and_its_purge_resumes);

/// DUR-7 export: every column of a workspace table whose name says it
/// holds key material or a credential (`sealed`, `wrapped`, `token_hash`,
/// `secret`, `password`, `key_hash`) is withheld from exports, read from the
/// live schema, so a new such column cannot go out unnoticed. Controls: the
/// withheld list names columns the schema has; written first, this check
/// found `plans.token_hash` exported.
async fn dur_7_export_withholds_every_credential_column(store: Store) {
    let sqlite: Option<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 1")
            .fetch_optional(store.pool())
            .await
            .unwrap_or(None);
    let mut seen = Vec::new();
    for table in WORKSPACE_TABLES {
        let cols: Vec<String> = if sqlite.is_some() {
            sqlx::query_scalar(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .fetch_all(store.pool())
                .await
                .unwrap()
        } else {
            sqlx::query_scalar(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = 'public' AND table_name = $1",
            )
            .bind(*table)
            .fetch_all(store.pool())
            .await
            .unwrap()
        };
        for c in cols {
            let risky = [
                "sealed",
                "wrapped",
                "token_hash",
                "secret",
                "password",
                "key_hash",
            ]
            .iter()
            .any(|w| c.contains(w));
            let withheld = EXPORT_WITHHELD.contains(&(*table, c.as_str()));
            if withheld {
                seen.push(format!("{table}.{c}"));
            }
            assert!(!risky || withheld, "{table}.{c} would be exported");
        }
    }
    assert_eq!(seen.len(), EXPORT_WITHHELD.len(), "{seen:?}");
}
both!(dur_7_export_withholds_every_credential_column);
