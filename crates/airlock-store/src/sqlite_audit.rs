//! Reading a workspace's audit rows from a SQLite database file through
//! `rusqlite`, for verification (`Store::audit_pages`).
//!
//! Why not through sqlx: every value sqlx reads is copied out of SQLite's
//! page, into an allocation of its own and across a thread hand-off; the
//! aggregated page of `Store::audit_rows_page` trades that for two more
//! copies inside SQLite (`group_concat`) and one in the driver. Here one
//! prepared statement is stepped on a thread of its own, and each row's
//! columns are read as borrows of SQLite's memory (`Row::get_ref`) and
//! copied once into the page's buffers. The connection is this module's
//! own (the store's pool hides the SQLite connection behind sqlx's `Any`
//! driver), opened read-only on the same file; it never writes.
//!
//! `rusqlite` is a safe interface over the same SQLite library sqlx links
//! (`libsqlite3-sys`, one version, one copy), so the store holds no
//! `unsafe` (tidy: unsafe). Every error is turned into a `StoreError`:
//! nothing a database file holds can make this panic.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, params};

use crate::audit::{AuditRowsPage, RowAt};
use crate::store::{Result, StoreError};

/// The rows of one page: the same query, keyset pagination on the primary
/// key, as the driver's path (`Store::audit_rows_page`).
const PAGE_SQL: &str = "SELECT seq, hash, line FROM audit_events WHERE workspace_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";

/// How long a read waits for a writer's lock, as the store's pool does.
const BUSY_TIMEOUT: Duration = Duration::from_millis(10_000);

/// A read-only connection to one database file, with the page statement
/// prepared (in the connection's statement cache), for one workspace.
/// Used from one thread at a time (`Connection` is `Send`, not `Sync`).
#[derive(Debug)]
pub(crate) struct PageReader {
    conn: Connection,
    workspace: String,
}

fn db_error(what: &str, e: &rusqlite::Error) -> StoreError {
    StoreError::Db(format!("{what}: {e}"))
}

impl PageReader {
    /// Opens `path` read-only and prepares the page query for `workspace`.
    pub(crate) fn open(path: &Path, workspace: &str) -> Result<Self> {
        let conn = Connection::open_with_flags(
            path,
            // No mutex on each call: one thread at a time uses it.
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| db_error("cannot open the database", &e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| db_error("cannot open the database", &e))?;
        // Prepared now, so a file that is not this store's database is
        // refused here (and the driver's path used); kept in the cache.
        conn.prepare_cached(PAGE_SQL)
            .map_err(|e| db_error("cannot prepare the audit page query", &e))?;
        Ok(Self {
            conn,
            workspace: workspace.to_string(),
        })
    }

    /// Reads up to `limit` rows after `after_seq` into `page` (emptied
    /// first), in sequence order, each column copied once. The statement is
    /// reset when its rows are dropped, so no read transaction stays open
    /// between pages (as with one query per page through the driver).
    pub(crate) fn read_page(
        &mut self,
        after_seq: i64,
        limit: i64,
        page: &mut AuditRowsPage,
    ) -> Result<()> {
        page.keys.clear();
        page.lines.clear();
        page.rows.clear();
        let mut stmt = self
            .conn
            .prepare_cached(PAGE_SQL)
            .map_err(|e| db_error("cannot prepare the audit page query", &e))?;
        let mut rows = stmt
            .query(params![self.workspace, after_seq, limit])
            .map_err(|e| db_error("cannot bind the page", &e))?;
        let bad = |what: &str| StoreError::Audit(format!("malformed audit row: {what}"));
        loop {
            let row = match rows.next() {
                Ok(Some(row)) => row,
                Ok(None) => break,
                Err(e) => return Err(db_error("cannot read the audit rows", &e)),
            };
            let column = |i: usize| row.get_ref(i).ok();
            // An integer only: SQLite does not enforce a column's declared
            // type.
            let seq = column(0)
                .and_then(|v| v.as_i64().ok())
                .ok_or_else(|| bad("sequence number"))?;
            let hash = column(1).ok_or_else(|| bad("hash"))?;
            let hash = push(&mut page.keys, hash).ok_or_else(|| bad("hash"))?;
            let line = column(2).ok_or_else(|| bad("line"))?;
            let line = push(&mut page.lines, line).ok_or_else(|| bad("line"))?;
            page.rows.push(RowAt { seq, hash, line });
        }
        // The query orders by `seq` through the primary key; should a
        // database ever hand them out of order, they are put back in order.
        if !page.rows.is_sorted_by_key(|r| r.seq) {
            page.rows.sort_by_key(|r| r.seq);
        }
        Ok(())
    }
}

/// Appends a column's value to `buf` as text, and says where it lies;
/// `None` for SQL NULL, bytes that are not UTF-8, or a floating-point
/// value.
///
/// Text and blobs are their bytes and an integer its decimal digits, as
/// SQLite (and so `group_concat`, the driver's path) reads them as text.
/// The `hash` and `line` columns are declared `TEXT`, so SQLite stores
/// numbers in them as text and they hold only text, blobs and NULL; a
/// floating-point value is only possible in a table an attacker rebuilt,
/// and is refused rather than spelled differently from SQLite.
fn push(buf: &mut String, value: ValueRef<'_>) -> Option<std::ops::Range<usize>> {
    let start = buf.len();
    match value {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            buf.push_str(std::str::from_utf8(bytes).ok()?)
        }
        ValueRef::Integer(i) => {
            use std::fmt::Write as _;
            write!(buf, "{i}").ok()?;
        }
        ValueRef::Null | ValueRef::Real(_) => return None,
    }
    Some(start..buf.len())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::Store;

    const WS: &str = "ws_odd";

    /// Lines no JSON encoder writes, but a database can hold: the reader
    /// must hand each back byte for byte, whatever it contains.
    fn odd_lines() -> Vec<String> {
        vec![
            "{\"a\":1}".into(),
            "tab\there\nnewline\r\nand é ü 中 😀".into(),
            String::new(),
            "\u{1}\u{7f} control \u{1b}[31m".into(),
            "x".repeat(9000), // longer than a database page: overflow pages
            "a\tb\tc\t".into(),
            "{}".into(),
        ]
    }

    /// A SQLite store holding `odd_lines` as `WS`'s rows 1..=7 (hash
    /// column: the seq in hex, repeated), and one row of another
    /// workspace in between.
    async fn store_with_odd_rows() -> (Store, tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("airlock.db");
        let store = Store::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        let insert =
            "INSERT INTO audit_events (workspace_id, seq, line, hash) VALUES ($1, $2, $3, $4)";
        for (i, line) in odd_lines().into_iter().enumerate() {
            let seq = i as i64 + 1;
            sqlx::query(insert)
                .bind(WS)
                .bind(seq)
                .bind(line)
                .bind(format!("{seq:02x}").repeat(32))
                .execute(store.pool())
                .await
                .unwrap();
            if seq == 3 {
                sqlx::query(insert)
                    .bind("ws_other")
                    .bind(4i64)
                    .bind("other")
                    .bind("ff".repeat(32))
                    .execute(store.pool())
                    .await
                    .unwrap();
            }
        }
        (store, dir, path)
    }

    fn owned(page: &AuditRowsPage) -> Vec<(i64, String, String)> {
        page.rows()
            .map(|r| (r.seq, r.hash.to_string(), r.line.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn aud_4_raw_pages_are_the_driver_pages_byte_for_byte_across_page_boundaries() {
        let (store, _dir, path) = store_with_odd_rows().await;
        let expected: Vec<(i64, String, String)> = odd_lines()
            .into_iter()
            .enumerate()
            .map(|(i, l)| (i as i64 + 1, format!("{:02x}", i + 1).repeat(32), l))
            .collect();
        let mut reader = PageReader::open(&path, WS).unwrap();
        for limit in [1, 2, 3, 6, 7, 8, 1024] {
            for start in [0, 2, 3, 7] {
                let (mut after, mut all) = (start, Vec::new());
                loop {
                    // The same page through sqlx (the aggregate), and raw.
                    let driver = store.audit_rows_page(WS, after, limit).await.unwrap();
                    let mut raw = AuditRowsPage::default();
                    reader.read_page(after, limit, &mut raw).unwrap();
                    assert_eq!(owned(&raw), owned(&driver), "limit {limit} after {after}");
                    assert!(raw.len() as i64 <= limit);
                    all.extend(owned(&raw));
                    match raw.last_seq() {
                        Some(last) if raw.len() as i64 == limit => after = last,
                        _ => break,
                    }
                }
                assert_eq!(
                    all,
                    expected[start as usize..],
                    "limit {limit} from {start}"
                );
            }
        }
        // Positive control: the comparison sees a changed byte.
        let mut raw = AuditRowsPage::default();
        reader.read_page(1, 1, &mut raw).unwrap();
        let mut changed = expected[1].clone();
        changed.2.push(' ');
        assert_ne!(owned(&raw), vec![changed]);
        // A workspace without rows: one empty page.
        let mut none = PageReader::open(&path, "ws_none").unwrap();
        none.read_page(0, 10, &mut raw).unwrap();
        assert!(raw.is_empty());
    }

    #[tokio::test]
    async fn aud_4_where_the_raw_reader_cannot_open_the_file_the_driver_reads_the_pages() {
        let (store, _dir, path) = store_with_odd_rows().await;
        let mut raw = store.audit_pages(WS, 0, 3).await.unwrap();
        let mut expected = Vec::new();
        while let Some(p) = raw.next().await.unwrap() {
            expected.extend(owned(&p));
        }
        assert_eq!(expected.len(), 7);
        // Read through a store of one connection, opened before the rename
        // and used once. The store's own pool could open a new connection
        // after it (one still on its way back to the pool is not reused), and
        // at the old name that creates an empty database: "no such table",
        // 1 run in 50. One connection is waited for instead, and `mode=ro`
        // never creates a file.
        let url = format!("sqlite://{}", path.display());
        let one = Store::open_read_only(&url).await.unwrap();
        assert_eq!(one.audit_rows_page(WS, 0, 1).await.unwrap().len(), 1);
        // The file's name is gone; the pool's open connection still reads it.
        std::fs::rename(&path, path.with_extension("moved")).unwrap();
        // Control: the raw reader can no longer open it.
        assert!(PageReader::open(&path, WS).is_err());
        let mut pages = one.audit_pages(WS, 0, 3).await.unwrap();
        let mut got = Vec::new();
        while let Some(p) = pages.next().await.unwrap() {
            assert!(p.len() <= 3);
            got.extend(owned(&p));
        }
        assert_eq!(got, expected);
    }

    #[tokio::test]
    async fn aud_4_a_row_the_raw_reader_cannot_take_as_text_is_an_error_not_a_row() {
        let (store, _dir, path) = store_with_odd_rows().await;
        let mut reader = PageReader::open(&path, WS).unwrap();
        let mut page = AuditRowsPage::default();
        // Control: the well-formed rows read.
        reader.read_page(0, 100, &mut page).unwrap();
        assert_eq!(page.len(), 7);
        for (seq, line, hash) in [
            // A line that is not UTF-8.
            ("8", "CAST(X'7B22FF' AS TEXT)", "'00'"),
            // A sequence number that is not an integer.
            ("8.5", "'{}'", "'00'"),
            // A hash that is not UTF-8.
            ("8", "'{}'", "CAST(X'C3' AS TEXT)"),
        ] {
            sqlx::query(&format!(
                "INSERT INTO audit_events (workspace_id, seq, line, hash) VALUES ('{WS}', {seq}, {line}, {hash})"
            ))
            .execute(store.pool())
            .await
            .unwrap();
            let e = reader.read_page(0, 100, &mut page).unwrap_err();
            assert!(
                e.to_string().contains("malformed audit row"),
                "{seq} {line} {hash}: {e}"
            );
            // The row is past the page: the rows before it still read.
            reader.read_page(0, 7, &mut page).unwrap();
            assert_eq!(page.len(), 7);
            // The tampered row goes again (the delete trigger is dropped).
            sqlx::query("DROP TRIGGER IF EXISTS audit_events_no_delete")
                .execute(store.pool())
                .await
                .unwrap();
            sqlx::query("DELETE FROM audit_events WHERE seq > 7")
                .execute(store.pool())
                .await
                .unwrap();
        }
        // A database that is not there is an error too.
        assert!(PageReader::open(&path.with_extension("missing"), WS).is_err());
    }

    #[tokio::test]
    async fn aud_4_a_blob_column_reads_as_its_bytes_as_through_the_driver() {
        let (store, _dir, path) = store_with_odd_rows().await;
        // A line and a hash stored as blobs (UTF-8 bytes): SQLite reads a
        // blob as text byte for byte, so the driver's page has them too.
        sqlx::query(&format!(
            "INSERT INTO audit_events (workspace_id, seq, line, hash) VALUES ('{WS}', 8, X'7B22C3A9223A317D', X'3038')"
        ))
        .execute(store.pool())
        .await
        .unwrap();
        let driver = store.audit_rows_page(WS, 7, 10).await.unwrap();
        let mut raw = AuditRowsPage::default();
        PageReader::open(&path, WS)
            .unwrap()
            .read_page(7, 10, &mut raw)
            .unwrap();
        let expected = vec![(8, "08".to_string(), "{\"é\":1}".to_string())];
        assert_eq!(owned(&driver), expected);
        assert_eq!(owned(&raw), expected);
        // Control: the same bytes as a blob that is not UTF-8 are refused.
        sqlx::query(&format!(
            "INSERT INTO audit_events (workspace_id, seq, line, hash) VALUES ('{WS}', 9, X'7BFF7D', '09')"
        ))
        .execute(store.pool())
        .await
        .unwrap();
        let e = PageReader::open(&path, WS)
            .unwrap()
            .read_page(7, 10, &mut raw)
            .unwrap_err();
        assert!(e.to_string().contains("malformed audit row: line"), "{e}");
    }
}
