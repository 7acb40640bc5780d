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

/// The pages `audit_pages` reads ahead (on SQLite through `rusqlite`,
/// on PostgreSQL through the driver) are the pages `audit_rows_page` gives,
/// one after the other (a chain shorter than the first page's 256 rows, so
/// every page asks for `limit` rows), with lines that hold tabs, newlines, control and
/// multi-byte characters, an empty line, one longer than a database page,
/// and another workspace's row in between.
async fn aud_4_audit_pages_read_ahead_are_the_rows_page_after_page(store: Store) {
    let lines = [
        "{\"a\":1}".to_string(),
        "tab\there\nnewline\r\nand é 中 😀".to_string(),
        String::new(),
        "\u{1}\u{7f} control".to_string(),
        "x".repeat(9000),
        "a\tb\tc\t".to_string(),
    ];
    let insert = "INSERT INTO audit_events (workspace_id, seq, line, hash) VALUES ($1, $2, $3, $4)";
    for (i, line) in lines.iter().enumerate() {
        let seq = i as i64 + 1;
        sqlx::query(insert)
            .bind("ws_odd")
            .bind(seq)
            .bind(line.clone())
            .bind(format!("{seq:02x}").repeat(32))
            .execute(store.pool())
            .await
            .unwrap();
        sqlx::query(insert)
            .bind(WS_B)
            .bind(seq)
            .bind("b")
            .bind("ff".repeat(32))
            .execute(store.pool())
            .await
            .unwrap();
    }
    let rows = |p: &AuditRowsPage| -> Vec<(i64, String, String)> {
        p.rows()
            .map(|r| (r.seq, r.hash.to_string(), r.line.to_string()))
            .collect()
    };
    for limit in [1, 2, 3, 5, 6, 7, 1024] {
        for start in [0, 2, 6] {
            let mut pages = store.audit_pages("ws_odd", start, limit).await.unwrap();
            let (mut after, mut all) = (start, Vec::new());
            while let Some(page) = pages.next().await.unwrap() {
                let driver = store.audit_rows_page("ws_odd", after, limit).await.unwrap();
                assert_eq!(rows(&page), rows(&driver), "limit {limit} after {after}");
                assert!(page.len() as i64 <= limit);
                after = page.last_seq().unwrap_or(after);
                all.extend(rows(&page));
            }
            let expected: Vec<(i64, String, String)> = lines
                .iter()
                .enumerate()
                .map(|(i, l)| (i as i64 + 1, format!("{:02x}", i + 1).repeat(32), l.clone()))
                .skip(start as usize)
                .collect();
            assert_eq!(all, expected, "limit {limit} from {start}");
        }
    }
    // Positive control: the comparison tells workspaces apart (same
    // sequence numbers, other lines).
    let mut pages = store.audit_pages(WS_B, 0, 3).await.unwrap();
    let b = pages.next().await.unwrap().unwrap();
    let odd = store.audit_rows_page("ws_odd", 0, 3).await.unwrap();
    assert_eq!(b.len(), 3);
    assert_ne!(rows(&b), rows(&odd));
    let mut none = store.audit_pages("ws_none", 0, 3).await.unwrap();
    let empty = none.next().await.unwrap().unwrap();
    assert!(empty.is_empty());
    assert!(none.next().await.unwrap().is_none(), "a short page ends it");
}
both!(aud_4_audit_pages_read_ahead_are_the_rows_page_after_page);

/// A long chain read ahead: the first page is small and each page after
/// it twice the one before, up to the caller's limit, and every row comes
/// once, in order, whatever the limit (a limit below the first page's
/// size, one between two steps, and one above the chain's length).
async fn aud_4_audit_pages_start_small_and_grow_to_the_limit(store: Store) {
    const N: i64 = 1300;
    sqlx::query(
        "INSERT INTO audit_events (workspace_id, seq, line, hash) \
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1300) \
         SELECT 'ws_long', i, 'line ' || CAST(i AS TEXT), 'ab' FROM n",
    )
    .execute(store.pool())
    .await
    .unwrap();
    for (limit, sizes) in [
        // 13 full pages, then an empty one.
        (100, [vec![100; 13], vec![0]].concat()),
        (300, vec![256, 300, 300, 300, 144]),
        (4096, vec![256, 512, 532]),
    ] {
        let mut pages = store.audit_pages("ws_long", 0, limit).await.unwrap();
        let (mut got_sizes, mut seqs) = (Vec::new(), Vec::new());
        while let Some(page) = pages.next().await.unwrap() {
            got_sizes.push(page.len());
            for r in page.rows() {
                assert_eq!(r.line, format!("line {}", r.seq));
                seqs.push(r.seq);
            }
        }
        assert_eq!(got_sizes, sizes, "limit {limit}");
        assert_eq!(seqs, (1..=N).collect::<Vec<_>>(), "limit {limit}");
    }
    // Control: the sizes seen are the reader's, not the chain's; a chain
    // that ends on a full page is followed by an empty one.
    let mut pages = store.audit_pages("ws_long", N - 768, 4096).await.unwrap();
    let mut sizes = Vec::new();
    while let Some(page) = pages.next().await.unwrap() {
        sizes.push(page.len());
    }
    assert_eq!(sizes, [256, 512, 0]);
}
both!(aud_4_audit_pages_start_small_and_grow_to_the_limit);

/// The workspaces with audit events, found one index seek at a time: each
/// once, sorted, ids that are prefixes of others included, and none
/// without events.
async fn aud_2_audit_workspaces_are_every_workspace_with_events_once(store: Store) {
    let insert =
        "INSERT INTO audit_events (workspace_id, seq, line, hash) VALUES ($1, $2, 'x', 'h')";
    for (ws, n) in [("ws_a_b", 3), ("ws_a", 2), ("ws_b", 1), ("ws_", 2)] {
        for seq in 1..=n {
            sqlx::query(insert)
                .bind(ws)
                .bind(seq as i64)
                .execute(store.pool())
                .await
                .unwrap();
        }
    }
    store.ensure_workspace("ws_quiet", "quiet").await.unwrap();
    let distinct: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT workspace_id FROM audit_events ORDER BY workspace_id")
            .fetch_all(store.pool())
            .await
            .unwrap();
    let found = store.audit_workspaces().await.unwrap();
    assert_eq!(found, distinct);
    assert!(found.contains(&"ws_a".to_string()) && found.contains(&"ws_a_b".to_string()));
    assert!(!found.contains(&"ws_quiet".to_string()));
    // Positive control: a workspace's first event adds it.
    sqlx::query(insert)
        .bind("ws_quiet")
        .bind(1i64)
        .execute(store.pool())
        .await
        .unwrap();
    let after = store.audit_workspaces().await.unwrap();
    assert_eq!(after.len(), found.len() + 1);
    assert!(after.contains(&"ws_quiet".to_string()));
}
both!(aud_2_audit_workspaces_are_every_workspace_with_events_once);
