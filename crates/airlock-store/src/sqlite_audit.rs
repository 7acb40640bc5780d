//! Reading a workspace's audit rows from a SQLite database file straight
//! through SQLite's C interface, for verification (`Store::audit_pages`).
//!
//! Why not through sqlx: every value sqlx reads is copied out of SQLite's
//! page, into an allocation of its own and across a thread hand-off; the
//! aggregated page of `Store::audit_rows_page` trades that for two more
//! copies inside SQLite (`group_concat`) and one in the driver. Here one
//! prepared statement is stepped on a thread of its own, and each row's
//! columns are copied once, from the pointers SQLite hands out, into the
//! page's buffers. The connection is this module's own (the store's pool
//! hides the SQLite connection behind sqlx's `Any` driver), opened
//! read-only on the same file; it never writes.
//!
//! This is the only `unsafe` outside the sandbox crate (tidy: unsafe). It
//! is kept to the calls below, each with the reason it is sound; the
//! SQLite library is the one sqlx links (`libsqlite3-sys`, same version,
//! not a second copy). Every result code is checked and turned into an
//! error: nothing a database file holds can make this panic.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_int};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::ptr::NonNull;

use libsqlite3_sys as ffi;

use crate::audit::{AuditRowsPage, RowAt};
use crate::store::{Result, StoreError};

/// The rows of one page: the same query, keyset pagination on the primary
/// key, as the driver's path (`Store::audit_rows_page`).
const PAGE_SQL: &CStr =
    c"SELECT seq, hash, line FROM audit_events WHERE workspace_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";

/// How long a read waits for a writer's lock, as the store's pool does.
const BUSY_TIMEOUT_MS: c_int = 10_000;

/// A read-only connection to one database file with the page statement
/// prepared and the workspace bound. Used from one thread at a time (it is
/// `Send`, not `Sync`).
#[derive(Debug)]
pub(crate) struct PageReader {
    db: NonNull<ffi::sqlite3>,
    stmt: NonNull<ffi::sqlite3_stmt>,
}

// SAFETY: SQLite connections may move between threads as long as they are
// used by one thread at a time (the library is built threadsafe, the
// default, so the "multi-thread" mode at least holds); `PageReader` is not
// `Sync` and every use takes `&mut self`.
unsafe impl Send for PageReader {}

fn db_error(db: *mut ffi::sqlite3, what: &str) -> StoreError {
    // `sqlite3_errmsg` accepts any connection pointer SQLite returned, even
    // one whose open failed; a null `db` (out of memory at open) gives a
    // static message.
    // SAFETY: the message is a NUL-terminated string SQLite owns, valid
    // until the next call on `db`, and copied here at once.
    let msg = unsafe {
        let m = ffi::sqlite3_errmsg(db);
        if m.is_null() {
            String::from("unknown error")
        } else {
            CStr::from_ptr(m).to_string_lossy().into_owned()
        }
    };
    StoreError::Db(format!("{what}: {msg}"))
}

impl PageReader {
    /// Opens `path` read-only and prepares the page query for `workspace`.
    pub(crate) fn open(path: &Path, workspace: &str) -> Result<Self> {
        let bad = |what: &str| StoreError::Db(format!("cannot read the audit rows: {what}"));
        let file = CString::new(path.as_os_str().as_bytes()).map_err(|_| bad("path"))?;
        let ws_len = c_int::try_from(workspace.len()).map_err(|_| bad("workspace"))?;
        let mut db: *mut ffi::sqlite3 = std::ptr::null_mut();
        // SAFETY: `file` is a NUL-terminated string alive for the call, `db`
        // a valid out-pointer, and a null VFS name selects the default VFS;
        // NOMUTEX holds as `PageReader` is used by one thread at a time.
        let rc = unsafe {
            ffi::sqlite3_open_v2(
                file.as_ptr(),
                &mut db,
                // No mutex on each call: one thread at a time uses it.
                ffi::SQLITE_OPEN_READONLY | ffi::SQLITE_OPEN_NOMUTEX,
                std::ptr::null(),
            )
        };
        let Some(db) = NonNull::new(db) else {
            return Err(bad("out of memory"));
        };
        if rc != ffi::SQLITE_OK {
            let e = db_error(db.as_ptr(), "cannot open the database");
            // SAFETY: a handle from a failed open must still be closed, once;
            // nothing else holds it.
            unsafe { ffi::sqlite3_close(db.as_ptr()) };
            return Err(e);
        }
        let mut stmt: *mut ffi::sqlite3_stmt = std::ptr::null_mut();
        // SAFETY: `db` is open; `PAGE_SQL` is NUL-terminated (length -1
        // reads to the NUL) and `stmt` a valid out-pointer; the tail pointer
        // may be null.
        let rc = unsafe {
            ffi::sqlite3_busy_timeout(db.as_ptr(), BUSY_TIMEOUT_MS);
            ffi::sqlite3_prepare_v2(
                db.as_ptr(),
                PAGE_SQL.as_ptr(),
                -1,
                &mut stmt,
                std::ptr::null_mut(),
            )
        };
        let stmt = match NonNull::new(stmt) {
            Some(stmt) if rc == ffi::SQLITE_OK => stmt,
            _ => {
                let e = db_error(db.as_ptr(), "cannot prepare the audit page query");
                // SAFETY: as above; a failed prepare leaves no statement to
                // finalize (and finalizing null is a no-op anyway).
                unsafe {
                    ffi::sqlite3_finalize(stmt);
                    ffi::sqlite3_close(db.as_ptr());
                }
                return Err(e);
            }
        };
        let reader = Self { db, stmt };
        // SAFETY: `stmt` is a live statement with parameter 1; the text is
        // `ws_len` bytes at `workspace.as_ptr()`, and SQLITE_TRANSIENT makes
        // SQLite copy it before returning, so the binding outlives the
        // borrow (bindings survive `sqlite3_reset`).
        let rc = unsafe {
            ffi::sqlite3_bind_text(
                reader.stmt.as_ptr(),
                1,
                workspace.as_ptr().cast(),
                ws_len,
                ffi::SQLITE_TRANSIENT(),
            )
        };
        if rc != ffi::SQLITE_OK {
            return Err(db_error(reader.db.as_ptr(), "cannot bind the workspace"));
        }
        Ok(reader)
    }

    /// Reads up to `limit` rows after `after_seq` into `page` (emptied
    /// first), in sequence order, each column copied once. The statement is
    /// reset afterwards, so no read transaction stays open between pages
    /// (as with one query per page through the driver).
    pub(crate) fn read_page(
        &mut self,
        after_seq: i64,
        limit: i64,
        page: &mut AuditRowsPage,
    ) -> Result<()> {
        page.keys.clear();
        page.lines.clear();
        page.rows.clear();
        let stmt = self.stmt.as_ptr();
        // SAFETY: `stmt` is live and has parameters 2 and 3 (integers).
        let rc = unsafe {
            let a = ffi::sqlite3_bind_int64(stmt, 2, after_seq);
            if a == ffi::SQLITE_OK {
                ffi::sqlite3_bind_int64(stmt, 3, limit)
            } else {
                a
            }
        };
        if rc != ffi::SQLITE_OK {
            return Err(db_error(self.db.as_ptr(), "cannot bind the page"));
        }
        let out = self.step_rows(page);
        // SAFETY: `stmt` is live; resetting ends its read transaction. Its
        // return code repeats the last step's error, already reported.
        unsafe { ffi::sqlite3_reset(stmt) };
        out?;
        // The query orders by `seq` through the primary key; should a
        // database ever hand them out of order, they are put back in order.
        if !page.rows.is_sorted_by_key(|r| r.seq) {
            page.rows.sort_by_key(|r| r.seq);
        }
        Ok(())
    }

    fn step_rows(&mut self, page: &mut AuditRowsPage) -> Result<()> {
        let bad = |what: &str| StoreError::Audit(format!("malformed audit row: {what}"));
        loop {
            match self.step() {
                ffi::SQLITE_DONE => return Ok(()),
                ffi::SQLITE_ROW => {}
                _ => return Err(db_error(self.db.as_ptr(), "cannot read the audit rows")),
            }
            let seq = self.column_int(0).ok_or_else(|| bad("sequence number"))?;
            let hash = self.column_text(1).ok_or_else(|| bad("hash"))?;
            let hash = push(&mut page.keys, hash).ok_or_else(|| bad("hash"))?;
            let line = self.column_text(2).ok_or_else(|| bad("line"))?;
            let line = push(&mut page.lines, line).ok_or_else(|| bad("line"))?;
            page.rows.push(RowAt { seq, hash, line });
        }
    }

    /// One step of the statement. It takes `&mut self`, so no column text
    /// borrowed from the previous row ([`Self::column_text`]) outlives it.
    fn step(&mut self) -> c_int {
        // SAFETY: `stmt` is live and bound, and used by this thread only.
        unsafe { ffi::sqlite3_step(self.stmt.as_ptr()) }
    }

    /// The integer in column `i` of the current row; `None` for any other
    /// type (SQLite does not enforce a column's declared type).
    fn column_int(&self, i: c_int) -> Option<i64> {
        // SAFETY: called only after a step returned SQLITE_ROW, and the
        // statement has three columns, so `i` (0..3) is a valid index.
        unsafe {
            (ffi::sqlite3_column_type(self.stmt.as_ptr(), i) == ffi::SQLITE_INTEGER)
                .then(|| ffi::sqlite3_column_int64(self.stmt.as_ptr(), i))
        }
    }

    /// The text of column `i` of the current row, borrowed from SQLite: it
    /// is valid until the statement is stepped, reset or finalized, which
    /// all take `&mut self`, so the borrow checker ends it before then.
    /// `None` for SQL NULL; another value is read as text, as
    /// `group_concat` reads it.
    fn column_text(&self, i: c_int) -> Option<&[u8]> {
        let stmt = self.stmt.as_ptr();
        // Per SQLite's documentation `sqlite3_column_text` is called before
        // `sqlite3_column_bytes`, so the length is that of the text the
        // pointer shows (no conversion happens between the two calls).
        // SAFETY: only after a step returned SQLITE_ROW, `i` in 0..3; the
        // pointer is null only for NULL or out of memory, checked before
        // use; `n` bytes from it are readable for the borrow of `self`.
        unsafe {
            if ffi::sqlite3_column_type(stmt, i) == ffi::SQLITE_NULL {
                return None;
            }
            let p = ffi::sqlite3_column_text(stmt, i);
            let n = usize::try_from(ffi::sqlite3_column_bytes(stmt, i)).ok()?;
            if p.is_null() {
                return None;
            }
            Some(std::slice::from_raw_parts(p, n))
        }
    }
}

/// Appends `bytes` to `buf` if they are UTF-8, and says where they lie.
fn push(buf: &mut String, bytes: &[u8]) -> Option<std::ops::Range<usize>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let start = buf.len();
    buf.push_str(text);
    Some(start..buf.len())
}

impl Drop for PageReader {
    fn drop(&mut self) {
        // SAFETY: both are live and owned by this value alone; the statement
        // is finalized before its connection is closed, each exactly once.
        unsafe {
            ffi::sqlite3_finalize(self.stmt.as_ptr());
            ffi::sqlite3_close(self.db.as_ptr());
        }
    }
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
        // The file's name is gone; the pool's open connections still read it.
        std::fs::rename(&path, path.with_extension("moved")).unwrap();
        // Control: the raw reader can no longer open it.
        assert!(PageReader::open(&path, WS).is_err());
        let mut pages = store.audit_pages(WS, 0, 3).await.unwrap();
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
}
