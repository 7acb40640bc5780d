//! Reading and appending the audit chain (AUD-1 … AUD-3): one event on its
//! own, every line or one page of a workspace, the rows of a chain in
//! bounded pages (for verification), and the workspaces that have events.
//!
//! Appending inside a caller's transaction (`Store::audit_in`) lives in
//! `store.rs`, with the `Store` type, because every resource uses it.

use crate::store::{AuditRecord, Backend, Result, Store, StoreError};

/// One stored audit row: the key columns the database orders and finds
/// rows by, and the line the chain hashes. Verification checks that the
/// columns agree with the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub seq: i64,
    /// The hash as stored in its own column (64 lowercase hex digits).
    pub hash: String,
    pub line: String,
}

/// One page of stored audit rows as the database returned it: two text
/// values (the rows' key columns and lengths, and their lines one after the
/// other), and where each row's fields lie in them, in sequence order. The
/// rows are handed out as slices of those texts ([`AuditRowsPage::rows`]),
/// so a page of any number of rows is three allocations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditRowsPage {
    pub(crate) keys: String,
    pub(crate) lines: String,
    pub(crate) rows: Vec<RowAt>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowAt {
    pub(crate) seq: i64,
    pub(crate) hash: std::ops::Range<usize>,
    pub(crate) line: std::ops::Range<usize>,
}

/// A workspace's chain read ahead in pages ([`Store::audit_pages`]): the
/// next pages are read, on another thread, while the caller checks this
/// one.
#[derive(Debug)]
pub struct AuditPages {
    rx: tokio::sync::mpsc::Receiver<Result<AuditRowsPage>>,
}

/// Pages read ahead of the one being checked (each up to `limit` lines).
const PAGES_AHEAD: usize = 2;

/// Rows of the first page [`Store::audit_pages`] reads; each page after it
/// asks for twice as many as the one before, up to the caller's limit.
/// Nothing can be checked until the first page is read: at 4096 rows that
/// was a few milliseconds with one core idle, of a chain of 10^5 events
/// verified in about 100 ms.
const FIRST_PAGE: i64 = 256;

/// Where each page of [`Store::audit_pages`] starts, and how many rows it
/// asks for ([`FIRST_PAGE`], then twice the page before, up to `limit`).
///
/// A page after the first starts at the last `seq` of the page before,
/// inclusive, and leaves out its first row when that is the row already
/// handed out. Had it started after that `seq`, a second row with the same
/// `seq` right after a page break would never be read: a table rebuilt
/// without its primary key can hold one, and verification names it a
/// duplicate only if it sees it.
#[derive(Debug)]
struct PageCursor {
    /// Rows with a larger `seq` come next (when `seen` is `None`).
    after: i64,
    /// The `seq` the page before ended with.
    seen: Option<i64>,
    asked: i64,
    limit: i64,
}

impl PageCursor {
    fn new(after_seq: i64, limit: i64) -> Self {
        Self {
            after: after_seq,
            seen: None,
            asked: FIRST_PAGE.min(limit),
            limit,
        }
    }

    /// The next query's `seq > after` and `LIMIT`: one row more when it
    /// starts at a row already handed out. `seq` is an integer, so
    /// `seq > s - 1` is `seq >= s`.
    fn query(&self) -> (i64, i64) {
        match self.seen {
            Some(seen) => (seen.saturating_sub(1), self.asked.saturating_add(1)),
            None => (self.after, self.asked),
        }
    }

    /// Takes the page the query gave: leaves out the row already handed
    /// out, and says whether another page may follow (this one was full).
    fn take(&mut self, page: &mut AuditRowsPage) -> bool {
        let (_, asked) = self.query();
        let (got, last) = (page.rows.len(), page.last_seq());
        if self.seen.is_some() && page.rows.first().map(|r| r.seq) == self.seen {
            page.rows.remove(0);
        }
        let Some(last) = last.filter(|_| i64::try_from(got) == Ok(asked)) else {
            return false;
        };
        if self.seen == Some(last) {
            // Every row had the `seq` seen before (and at least one of them
            // was handed out): the next page starts after it, so the
            // reading always moves on.
            (self.after, self.seen) = (last, None);
        } else {
            self.seen = Some(last);
        }
        self.asked = self.asked.saturating_mul(2).min(self.limit);
        true
    }
}

impl AuditPages {
    /// The next page, in sequence order; `None` after the last row (a
    /// page shorter than asked for ends the chain, as does an empty one).
    pub async fn next(&mut self) -> Result<Option<AuditRowsPage>> {
        self.rx.recv().await.transpose()
    }
}

/// A row of an [`AuditRowsPage`], borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditRowRef<'a> {
    pub seq: i64,
    /// The hash as stored in its own column (64 lowercase hex digits).
    pub hash: &'a str,
    pub line: &'a str,
}

impl AuditRowsPage {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The last row's sequence number (where the next page starts after).
    pub fn last_seq(&self) -> Option<i64> {
        self.rows.last().map(|r| r.seq)
    }

    /// The rows, in sequence order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = AuditRowRef<'_>> + '_ {
        self.rows.iter().map(|r| AuditRowRef {
            seq: r.seq,
            // The ranges were cut from these texts at char boundaries by
            // `split_page`; an empty slice can only follow a logic error.
            hash: self.keys.get(r.hash.clone()).unwrap_or_default(),
            line: self.lines.get(r.line.clone()).unwrap_or_default(),
        })
    }
}

impl Store {
    /// Appends an audit event on its own.
    pub async fn audit(&self, workspace: &str, rec: AuditRecord) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        self.audit_in(&mut tx, workspace, rec).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Every audit line of a workspace, in sequence order.
    pub async fn audit_lines(&self, workspace: &str) -> Result<Vec<String>> {
        Ok(
            sqlx::query_scalar(
                "SELECT line FROM audit_events WHERE workspace_id = $1 ORDER BY seq",
            )
            .bind(workspace)
            .fetch_all(&self.pool)
            .await?,
        )
    }

    /// One page of a workspace's audit lines: sequence numbers after
    /// `after_seq`, in order, at most `limit`.
    pub async fn audit_page(
        &self,
        workspace: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT line FROM audit_events WHERE workspace_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(workspace)
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Up to `limit` rows of a workspace's chain with sequence numbers
    /// after `after_seq`, in order: a chain of any length read in pages of
    /// bounded size (keyset pagination on the primary key).
    pub async fn audit_rows(
        &self,
        workspace: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<AuditRow>> {
        let page = self.audit_rows_page(workspace, after_seq, limit).await?;
        Ok(page
            .rows()
            .map(|r| AuditRow {
                seq: r.seq,
                hash: r.hash.to_string(),
                line: r.line.to_string(),
            })
            .collect())
    }

    /// [`audit_rows`](Self::audit_rows) as one page whose rows borrow
    /// from it (no allocation per row).
    pub async fn audit_rows_page(
        &self,
        workspace: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<AuditRowsPage> {
        // Two values per page instead of three per row: the page's key
        // columns and line lengths joined in the database as
        // `seq TAB hash TAB bytes TAB` per row, and its lines joined as
        // they are, in the same order (one pass of one aggregate step feeds
        // both). The byte lengths delimit the lines, so no character in a
        // line can be taken for a separator; the lines are copied into the
        // aggregate once, not first into a per-row concatenation. Reading
        // rows one by one through the driver cost more than hashing them.
        // The backends differ only in the aggregate's spelling.
        let sql = match self.backend {
            Backend::Sqlite => {
                "SELECT group_concat(seq || char(9) || hash || char(9) || octet_length(line) || char(9), ''), group_concat(line, '') \
                 FROM (SELECT seq, hash, line FROM audit_events WHERE workspace_id = $1 AND seq > $2 ORDER BY seq LIMIT $3) page"
            }
            Backend::Postgres => {
                "SELECT string_agg(seq::text || E'\\t' || hash || E'\\t' || octet_length(line)::text || E'\\t', ''), string_agg(line, '') \
                 FROM (SELECT seq, hash, line FROM audit_events WHERE workspace_id = $1 AND seq > $2 ORDER BY seq LIMIT $3) page"
            }
        };
        let (keys, lines): (Option<String>, Option<String>) = sqlx::query_as(sql)
            .bind(workspace)
            .bind(after_seq)
            .bind(limit)
            .fetch_one(&self.pool)
            .await?;
        let (keys, lines) = (keys.unwrap_or_default(), lines.unwrap_or_default());
        // The aggregate's order is the database's choice: the rows are put
        // back in sequence order here (already in order, in practice).
        let mut rows = split_page(&keys, &lines)?;
        if !rows.is_sorted_by_key(|r| r.seq) {
            rows.sort_by_key(|r| r.seq);
        }
        Ok(AuditRowsPage { keys, lines, rows })
    }

    /// A workspace's chain after `after_seq` in pages of up to `limit` rows
    /// (the rows [`audit_rows_page`](Self::audit_rows_page) gives, page
    /// after page), read ahead of the caller: verification hashes one page
    /// while the next ones are read. The first pages are smaller
    /// ([`FIRST_PAGE`] rows, doubling up to `limit`), so the caller can
    /// start sooner; each page after the first starts at the row the one
    /// before ended with, which it leaves out ([`PageCursor`]: a second row
    /// with that `seq` is handed out, not skipped).
    ///
    /// On a SQLite file the pages are read on a thread of their own,
    /// through `rusqlite` (`sqlite_audit`: each line copied once, no
    /// aggregate, no sqlx driver); otherwise (PostgreSQL, an in-memory
    /// database, a file SQLite cannot open read-only) a task reads
    /// them as [`audit_rows_page`](Self::audit_rows_page) does. Each page
    /// is its own query, on both paths: no read transaction is held across
    /// pages.
    pub async fn audit_pages(
        &self,
        workspace: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<AuditPages> {
        let (tx, rx) = tokio::sync::mpsc::channel(PAGES_AHEAD);
        let limit = limit.max(1);
        let file = match self.backend {
            Backend::Sqlite => crate::sqlite_files::database_path(self.url()).map(|(p, _)| p),
            Backend::Postgres => None,
        };
        // The raw reader is opened first, off the runtime's threads; where
        // it cannot open the file (SQLite refuses a read-only connection to
        // it, say), the driver's path below reads the same rows.
        let reader = match file {
            Some(file) => {
                let ws = workspace.to_string();
                tokio::task::spawn_blocking(move || {
                    crate::sqlite_audit::PageReader::open(&file, &ws)
                })
                .await
                .ok()
                .and_then(|r| r.ok())
            }
            None => None,
        };
        if let Some(reader) = reader {
            std::thread::Builder::new()
                .name("audit-read".into())
                .spawn(move || read_pages_from_file(reader, after_seq, limit, &tx))
                .map_err(|e| StoreError::Db(format!("cannot start the audit reader: {e}")))?;
        } else {
            let (store, workspace) = (self.clone(), workspace.to_string());
            tokio::spawn(async move {
                let mut cursor = PageCursor::new(after_seq, limit);
                loop {
                    let (after, asked) = cursor.query();
                    let mut page = store.audit_rows_page(&workspace, after, asked).await;
                    let more = match &mut page {
                        Ok(p) => cursor.take(p),
                        Err(_) => false,
                    };
                    if tx.send(page).await.is_err() || !more {
                        return;
                    }
                }
            });
        }
        Ok(AuditPages { rx })
    }

    /// The last row of a workspace's chain: its `seq` and `hash` columns
    /// (`None` for a workspace without events).
    pub async fn audit_head(&self, workspace: &str) -> Result<Option<(i64, String)>> {
        Ok(sqlx::query_as(
            "SELECT seq, hash FROM audit_events WHERE workspace_id = $1 ORDER BY seq DESC LIMIT 1",
        )
        .bind(workspace)
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Workspaces that have audit events.
    pub async fn audit_workspaces(&self) -> Result<Vec<String>> {
        // One index seek per workspace (each the least id above the one
        // before), where `SELECT DISTINCT` read every row's index entry:
        // 50 ms at 10^6 events, before `audit verify` could start.
        Ok(sqlx::query_scalar(
            "WITH RECURSIVE w(id) AS ( \
               SELECT MIN(workspace_id) FROM audit_events \
               UNION ALL \
               SELECT (SELECT MIN(workspace_id) FROM audit_events WHERE workspace_id > w.id) FROM w WHERE w.id IS NOT NULL \
             ) SELECT id FROM w WHERE id IS NOT NULL ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?)
    }
}

/// The body of [`Store::audit_pages`]' reading thread on a SQLite file:
/// pages until one is short, each sent as soon as it is read (or the
/// first error); stops early when the receiver is gone.
fn read_pages_from_file(
    mut reader: crate::sqlite_audit::PageReader,
    after_seq: i64,
    limit: i64,
    tx: &tokio::sync::mpsc::Sender<Result<AuditRowsPage>>,
) {
    let mut cursor = PageCursor::new(after_seq, limit);
    // Each page's buffers are sized like the previous page's, and an
    // eighth, or twice that while the pages still grow, so they are filled
    // without growing, and copying, step by step (up to 64 MiB: a larger
    // page grows as it is read).
    let (mut keys, mut lines, mut rows) = (0usize, 0usize, 0usize);
    loop {
        let mut page = AuditRowsPage {
            keys: String::with_capacity(keys),
            lines: String::with_capacity(lines),
            rows: Vec::with_capacity(rows),
        };
        let (after, asked) = cursor.query();
        let read = reader.read_page(after, asked, &mut page);
        let grow = if cursor.asked < cursor.limit { 2 } else { 1 };
        let room = |n: usize| n.saturating_add(n / 8).saturating_mul(grow).min(1 << 26);
        (keys, lines, rows) = (
            room(page.keys.len()),
            room(page.lines.len()),
            room(page.rows.len()),
        );
        let more = read.is_ok() && cursor.take(&mut page);
        if tx.blocking_send(read.map(|()| page)).is_err() || !more {
            return;
        }
    }
}

/// Where the rows of one aggregated page lie in its two texts (see
/// [`Store::audit_rows_page`]), in the order the page holds them: `keys`
/// is `seq TAB hash TAB bytes TAB` per row, `lines` the lines one after
/// the other, each `bytes` long. Every line must be accounted for.
fn split_page(keys: &str, lines: &str) -> Result<Vec<RowAt>> {
    let bad = |what: &str| StoreError::Audit(format!("malformed audit page: {what}"));
    let mut out = Vec::new();
    let (mut at, mut line_at) = (0usize, 0usize);
    while at < keys.len() {
        let mut field = || -> Result<std::ops::Range<usize>> {
            let rest = keys.get(at..).ok_or_else(|| bad("missing field"))?;
            let end = rest.find('\t').ok_or_else(|| bad("missing field"))?;
            let f = at..at + end;
            at += end + 1;
            Ok(f)
        };
        let seq_at = field()?;
        let seq: i64 = keys
            .get(seq_at)
            .unwrap_or_default()
            .parse()
            .map_err(|_| bad("sequence number"))?;
        let hash = field()?;
        let len_at = field()?;
        let len: usize = keys
            .get(len_at)
            .unwrap_or_default()
            .parse()
            .map_err(|_| bad("line length"))?;
        let line = line_at..line_at.checked_add(len).ok_or_else(|| bad("line length"))?;
        // `get` refuses a range past the end or not on a char boundary.
        lines.get(line.clone()).ok_or_else(|| bad("line length"))?;
        line_at = line.end;
        out.push(RowAt { seq, hash, line });
    }
    if line_at != lines.len() {
        return Err(bad("bytes after the last line"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages as [`Store::audit_pages`] hands them out over a table whose
    /// rows have the sequence numbers `seqs` (sorted; repeats allowed, as
    /// in a table rebuilt without its primary key): each page's query is
    /// played on the list, then given to the cursor.
    fn pages_over(seqs: &[i64], after_seq: i64, limit: i64) -> Vec<Vec<i64>> {
        let mut cursor = PageCursor::new(after_seq, limit);
        let mut out = Vec::new();
        loop {
            assert!(out.len() <= 2 * seqs.len() + 2, "no end: {seqs:?} {limit}");
            let (after, asked) = cursor.query();
            let mut page = AuditRowsPage::default();
            for &seq in seqs.iter().filter(|&&s| s > after).take(asked as usize) {
                page.rows.push(RowAt {
                    seq,
                    hash: 0..0,
                    line: 0..0,
                });
            }
            let more = cursor.take(&mut page);
            out.push(page.rows.iter().map(|r| r.seq).collect());
            if !more {
                return out;
            }
        }
    }

    /// Every stored row after `after_seq` is handed out once when each
    /// `seq` is stored once; when one is stored more than once, it is
    /// handed out at least twice (verification names the second a
    /// duplicate), wherever the page breaks fall; the reading always ends.
    #[test]
    fn aud_4_pages_hand_out_every_row_and_repeat_every_repeated_seq() {
        // Every sorted list of up to six numbers from 1..=4, repeats allowed.
        let mut tables: Vec<Vec<i64>> = vec![Vec::new()];
        for _ in 0..6 {
            let longer: Vec<Vec<i64>> = tables
                .iter()
                .flat_map(|t| {
                    let from = t.last().copied().unwrap_or(1);
                    (from..=4).map(move |n| [t.clone(), vec![n]].concat())
                })
                .collect();
            tables.extend(longer);
            tables.sort();
            tables.dedup();
        }
        let edge = [i64::MAX - 1, i64::MAX, i64::MAX, i64::MAX];
        tables.push(edge.to_vec());
        tables.push(vec![i64::MIN + 1, i64::MIN + 1, 0, 0]);
        for seqs in &tables {
            for after_seq in [i64::MIN, 0, 2] {
                for limit in 1..=5 {
                    let handed: Vec<i64> = pages_over(seqs, after_seq, limit).concat();
                    let stored: Vec<i64> =
                        seqs.iter().copied().filter(|&s| s > after_seq).collect();
                    let count = |v: &[i64], s: i64| v.iter().filter(|&&x| x == s).count();
                    for &s in &stored {
                        let (want, got) = (count(&stored, s), count(&handed, s));
                        assert!(
                            if want == 1 { got == 1 } else { got >= 2 },
                            "{seqs:?} after {after_seq} limit {limit}: {handed:?}"
                        );
                    }
                    assert!(
                        handed.iter().all(|s| stored.contains(s)),
                        "{seqs:?} after {after_seq} limit {limit}: {handed:?}"
                    );
                }
            }
        }
        // Control: the check tells the old paging (each page after the
        // last `seq` of the one before) apart: it hands out a `seq` stored
        // twice across a page break only once.
        let old_paging = |seqs: &[i64], limit: usize| {
            let (mut after, mut out) = (0i64, Vec::<i64>::new());
            loop {
                let page: Vec<i64> = seqs
                    .iter()
                    .copied()
                    .filter(|&s| s > after)
                    .take(limit)
                    .collect();
                out.extend(&page);
                match page.last() {
                    Some(&last) if page.len() == limit => after = last,
                    _ => return out,
                }
            }
        };
        assert_eq!(old_paging(&[1, 2, 2, 3], 2), [1, 2, 3]);
        assert_eq!(pages_over(&[1, 2, 2, 3], 0, 2).concat(), [1, 2, 2, 3]);
        assert!(tables.len() > 200, "{}", tables.len());
    }

    #[test]
    fn an_aggregated_page_splits_into_its_rows_whatever_the_lines_hold() {
        let lines = ["{\"a\":1}", "tab\there\nnewline and é", ""];
        let (mut keys, mut text) = (String::new(), String::new());
        for (i, l) in lines.iter().enumerate() {
            keys.push_str(&format!("{}\t{}\t{}\t", i + 1, "ab".repeat(32), l.len()));
            text.push_str(l);
        }
        let rows = AuditRowsPage {
            rows: split_page(&keys, &text).unwrap(),
            keys,
            lines: text,
        };
        assert_eq!(rows.len(), 3);
        assert_eq!(rows.last_seq(), Some(3));
        for (i, (r, l)) in rows.rows().zip(lines).enumerate() {
            assert_eq!(
                (r.seq, r.hash, r.line),
                (i as i64 + 1, "ab".repeat(32).as_str(), l)
            );
        }
        assert!(split_page("", "").unwrap().is_empty());
        for (keys, lines) in [
            ("1\tab", "a"),
            ("x\tab\t1\t", "a"),
            ("1\tab\t9\t", "short"),
            ("1\tab\t1\t", "é"),
            ("1\tab\t1\t", "ab"),
            ("", "a"),
        ] {
            assert!(split_page(keys, lines).is_err(), "{keys:?} {lines:?}");
        }
    }
}
