//! The audit chain: state changes are chained, rows are append-only, and
//! chains and pages are per workspace.

use std::time::Duration;

use airlock_store::*;

use crate::{WS_B, kinds, new_run};

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

async fn aud_4_audit_rows_page_a_chain_with_its_key_columns(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    for _ in 0..5 {
        store
            .audit(DEFAULT_WORKSPACE, AuditRecord::system("a.event", None))
            .await
            .unwrap();
    }
    store
        .audit(WS_B, AuditRecord::system("b.event", None))
        .await
        .unwrap();
    let lines = store.audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    let mut rows = Vec::new();
    let mut after = 0;
    loop {
        let page = store.audit_rows(DEFAULT_WORKSPACE, after, 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        after = last.seq;
        rows.extend(page);
    }
    assert_eq!(
        rows.iter().map(|r| r.line.clone()).collect::<Vec<_>>(),
        lines,
        "every line once, in order, and only this workspace's"
    );
    for (i, r) in rows.iter().enumerate() {
        let e = airlock_audit::from_json_line(&r.line).unwrap();
        assert_eq!(r.seq, i as i64 + 1);
        assert_eq!(r.seq as u64, e.event.seq, "the seq column is the line's");
        assert_eq!(r.hash, e.hash_hex(), "the hash column is the line's");
    }
}
both!(aud_4_audit_rows_page_a_chain_with_its_key_columns);
