//! Reading the audit log (AUD-1, AUD-2): pages, chain verification and
//! JSON Lines export, for callers in a workspace, and for the operator
//! over every workspace of a database ([`AuditLog`], which needs neither
//! the key directory nor the workers: an auditor can verify a copy).

use airlock_audit::{PreparedLine, Verifier, VerifySummary, map_in_runs};
use airlock_iam::Permission;
use airlock_protocol::Error;
use airlock_protocol::audit::{
    AuditPage, AuditVerification, CheckpointMade, ListAudit, MAX_AUDIT_SCAN,
};
use airlock_store::{AuditRecord, AuditRowRef, Store};

use crate::caller::Caller;
use crate::checkpoints::{Checkpoints, checkpoint_all, verify_with_checkpoints};
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// The chain of instance-level identity events (logins, bootstrap,
/// resets): they belong to no single workspace.
pub const SYSTEM_AUDIT: &str = "ws_system";

/// Rows read per page when verifying a stored chain: memory stays bounded
/// whatever the chain's length (about 2.5 MB of lines per page of server
/// events, with up to three pages read ahead: `audit verify` peaks at
/// 35–38 MiB). Pages of 1024 rows peaked at 21 MiB but cost 8–20% more time,
/// mostly per-page work (BENCHMARKS.md, "Larger pages").
pub(crate) const VERIFY_PAGE: i64 = 4096;

/// Verifies one workspace's chain from its stored lines: the count and
/// head, or the first sequence number that does not verify (a line that is
/// not the canonical form of an event counts as bad at its position).
/// Each line is hashed as it is stored ([`airlock_audit::LineView`] says
/// why that is as strong as re-canonicalising it).
pub fn verify_lines(workspace: &str, lines: &[String]) -> AuditVerification {
    let mut v = Verifier::new().for_workspace(workspace);
    for l in lines {
        if let Err(e) = v.push_line(l) {
            return bad(e.first_bad_seq());
        }
    }
    verdict(v)
}

/// Verifies one workspace's chain as the database holds it, a page at a
/// time: every line as [`verify_lines`] does, and also that the row's own
/// `seq` and `hash` columns (what the database orders, finds and pages rows
/// by) say what the hashed line says. Those columns are not covered by the
/// chain, so without this check a row could be re-keyed unnoticed.
#[cfg(test)]
async fn verify_stored_in_pages(
    store: &Store,
    workspace: &str,
    page: i64,
) -> Result<AuditVerification> {
    let v = Verifier::new().for_workspace(workspace);
    Ok(to_verification(
        verify_rows(store, workspace, page, v, 0).await?,
    ))
}

/// Pushes the rows of `workspace` after `after` through `v`, in pages of
/// up to `page` rows (the first ones smaller: `Store::audit_pages`),
/// checking the key columns (see
/// [`verify_stored_in_pages`]): the summary, or the first bad sequence.
pub(crate) async fn verify_rows(
    store: &Store,
    workspace: &str,
    page: i64,
    mut v: Verifier,
    after: i64,
) -> Result<std::result::Result<VerifySummary, u64>> {
    // The next pages are read (on the store's reading thread) while this
    // one is checked. Within a page, the lines are read and hashed, and the
    // rows' hash columns decoded, on every core (`map_in_runs`: a line's
    // hash depends only on its own bytes); then the sequence, links and key
    // columns are checked in order, exactly as one line at a time.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // From the start, the rows whose `seq` column is zero or negative are
    // read too (all but one at exactly `i64::MIN`: the pages ask for `seq`
    // after a bound): airlock never writes one, verification refuses it,
    // and a first page after 0 would never see it.
    let after = if after <= 0 { i64::MIN } else { after };
    let mut pages = store.audit_pages(workspace, after, page).await.svc()?;
    while let Some(rows) = pages.next().await.svc()? {
        let rows: Vec<AuditRowRef<'_>> = rows.rows().collect();
        let prepared = map_in_runs(&rows, threads, |row| {
            (
                PreparedLine::prepare(row.line),
                airlock_audit::hex::decode_hash(row.hash),
            )
        });
        if prepared.len() != rows.len() {
            return Err(Error::internal("audit verification lost a row"));
        }
        for (row, (line, column_hash)) in rows.iter().zip(&prepared) {
            match v.push_prepared(line) {
                Err(e) => return Ok(Err(e.first_bad_seq())),
                Ok(Some((seq, hash))) => {
                    let columns_agree =
                        i64::try_from(seq) == Ok(row.seq) && *column_hash == Ok(hash);
                    if !columns_agree {
                        return Ok(Err(seq));
                    }
                }
                // After a gap: the verdict is already "missing", decided by
                // `finish` or by the missing event turning up.
                Ok(None) => {}
            }
        }
    }
    Ok(v.finish().map_err(|e| e.first_bad_seq()))
}

pub(crate) fn to_verification(r: std::result::Result<VerifySummary, u64>) -> AuditVerification {
    match r {
        Ok(sum) => AuditVerification {
            ok: true,
            events: Some(sum.count),
            head: Some(airlock_store::hex(&sum.head)),
            first_bad_seq: None,
            checkpoint: None,
            checkpoint_error: None,
            warnings: Vec::new(),
        },
        Err(seq) => bad(seq),
    }
}

fn bad(seq: u64) -> AuditVerification {
    AuditVerification {
        ok: false,
        events: None,
        head: None,
        first_bad_seq: Some(seq),
        checkpoint: None,
        checkpoint_error: None,
        warnings: Vec::new(),
    }
}

fn verdict(v: Verifier) -> AuditVerification {
    to_verification(v.finish().map_err(|e| e.first_bad_seq()))
}

impl Service {
    /// Appends an audit event to `workspace`'s chain.
    pub(crate) async fn audit(&self, workspace: &str, rec: AuditRecord) -> Result<()> {
        self.store.audit(workspace, rec).await.svc()
    }

    /// Records one call of a front end that has no other record of its
    /// own (an MCP tool call): which operation, and its outcome (`ok` or
    /// the error code). The operation's own effects are audited where
    /// they happen; this says who asked, through what.
    pub async fn audit_front_end_call(
        &self,
        c: &Caller,
        front_end: &str,
        operation: &str,
        outcome: std::result::Result<(), &Error>,
    ) -> Result<()> {
        let result = match outcome {
            Ok(()) => "ok".to_string(),
            Err(e) => e.code.as_str().to_string(),
        };
        self.audit(
            &c.workspace,
            AuditRecord::system(&format!("{front_end}.call"), None)
                .with_actor(c.audit_actor())
                .with_result(&result)
                .with_metadata(serde_json::json!({
                    "operation": operation,
                    "api_key": match c.principal().map(|p| &p.via) {
                        Some(crate::caller::Via::ApiKey { id, .. }) => Some(id.as_str()),
                        _ => None,
                    },
                })),
        )
        .await
    }

    /// A page of the caller's workspace's audit events, in sequence order.
    /// With a filter (`event_type`, `actor`), the events read that match
    /// it: at most [`MAX_AUDIT_SCAN`] are read per call, so a page may
    /// hold fewer than `limit` events while `next_cursor` is still set.
    pub async fn list_audit(&self, c: &Caller, q: &ListAudit) -> Result<AuditPage> {
        c.require(Permission::AuditRead)?;
        let limit = q.limit.unwrap_or(100);
        if !(1..=airlock_protocol::MAX_PAGE).contains(&limit) {
            return Err(Error::invalid_query("limit must be between 1 and 500"));
        }
        let after = q.after.unwrap_or(0);
        if after < 0 {
            return Err(Error::invalid_query("after must not be negative"));
        }
        for (name, v) in [("event_type", &q.event_type), ("actor", &q.actor)] {
            if v.as_ref().is_some_and(|v| v.chars().count() > 128) {
                return Err(Error::invalid_query(format!(
                    "{name} is at most 128 characters"
                )));
            }
        }
        let filter = AuditFilter {
            event_type: q.event_type.as_deref().filter(|v| !v.is_empty()),
            actor: q.actor.as_deref().filter(|v| !v.is_empty()),
        };
        let batch = if filter.is_empty() {
            limit
        } else {
            airlock_protocol::MAX_PAGE
        };
        let mut events = Vec::new();
        let mut cursor = after;
        let mut scanned = 0;
        let next_cursor = loop {
            let lines = self
                .store
                .audit_page(&c.workspace, cursor, batch)
                .await
                .svc()?;
            let read = i64::try_from(lines.len()).unwrap_or(0);
            for l in &lines {
                let e: serde_json::Value = serde_json::from_str(l).map_err(Error::internal)?;
                cursor = e["seq"].as_i64().unwrap_or(cursor);
                if filter.matches(&e) {
                    events.push(e);
                    if i64::try_from(events.len()).unwrap_or(0) == limit {
                        break;
                    }
                }
            }
            scanned += read;
            if i64::try_from(events.len()).unwrap_or(0) == limit {
                break Some(cursor);
            }
            if read < batch {
                break None;
            }
            if scanned >= MAX_AUDIT_SCAN {
                break Some(cursor);
            }
        };
        Ok(AuditPage {
            events,
            next_cursor,
        })
    }

    /// Verifies the caller's workspace's chain, against its signed
    /// checkpoints when there are some (AUD-4).
    pub async fn verify_audit(&self, c: &Caller) -> Result<AuditVerification> {
        c.require(Permission::AuditRead)?;
        let cps = self.checkpoints();
        verify_with_checkpoints(&self.store, &c.workspace, &cps).await
    }

    /// The caller's workspace's chain as JSON Lines (one event per line,
    /// each ending in `\n`), then its signed checkpoints (lines of `type`
    /// `checkpoint`), verifiable with `verify_export.py`.
    pub async fn export_audit(&self, c: &Caller) -> Result<String> {
        c.require(Permission::AuditExport)?;
        let lines = self.store.audit_lines(&c.workspace).await.svc()?;
        let cps = self.checkpoints().lines(&c.workspace)?;
        Ok(join_lines(lines, cps))
    }
}

pub(crate) fn join_lines(lines: Vec<String>, checkpoints: Vec<String>) -> String {
    let mut out = String::new();
    for l in lines.into_iter().chain(checkpoints) {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The operator's view of a database's audit log: every workspace's
/// chain, without the vault, the workers or a running server.
///
/// Checkpoints are read from (and made into) `checkpoints`: by default
/// the key directory's; an auditor with a copy names the directory and the
/// public key instead.
#[derive(Debug, Clone)]
pub struct AuditLog {
    store: Store,
    checkpoints: Checkpoints,
}

impl AuditLog {
    pub async fn connect(url: &str, checkpoints: Checkpoints) -> Result<Self> {
        let store = Store::open(url)
            .await
            .map_err(|e| Error::internal(format!("cannot open the database: {e}")))?;
        Ok(Self { store, checkpoints })
    }

    /// Every workspace's chain, verified against its newest signed
    /// checkpoint: the workspaces with events, and those with checkpoints
    /// (a workspace whose every event was deleted still has those).
    pub async fn verify_all(&self) -> Result<Vec<(String, AuditVerification)>> {
        let mut all = self.store.audit_workspaces().await.svc()?;
        all.extend(self.checkpoints.workspaces()?);
        all.sort();
        all.dedup();
        let mut out = Vec::new();
        for ws in all {
            let v = verify_with_checkpoints(&self.store, &ws, &self.checkpoints).await?;
            out.push((ws, v));
        }
        Ok(out)
    }

    /// One workspace's chain as JSON Lines, then its checkpoints.
    pub async fn export(&self, workspace: &str) -> Result<String> {
        Ok(join_lines(
            self.store.audit_lines(workspace).await.svc()?,
            self.checkpoints.lines(workspace)?,
        ))
    }

    /// Signs a checkpoint of every workspace's chain (see
    /// [`make_checkpoint`]); `force`: also where the head has not moved.
    pub async fn checkpoint_all(&self, force: bool) -> Result<Vec<CheckpointMade>> {
        checkpoint_all(&self.store, &self.checkpoints, force).await
    }

    /// The public key checkpoints are signed with, as 64 hex digits (the
    /// signing key is created if there is none yet).
    pub fn public_key(&self) -> Result<String> {
        Ok(airlock_store::hex(&self.checkpoints.public_key_creating()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SQLite store with `n` events in the default workspace, and its
    /// audit triggers dropped (an attacker with the database file).
    async fn tampered_store(n: usize) -> (Store, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("airlock.db").display());
        let store = Store::open(&url).await.unwrap();
        for i in 0..n {
            let rec = AuditRecord::system("config.changed", None)
                .with_metadata(serde_json::json!({"i": i}));
            store.audit(crate::DEFAULT_WORKSPACE, rec).await.unwrap();
        }
        for t in ["audit_events_no_update", "audit_events_no_delete"] {
            sqlx::query(&format!("DROP TRIGGER {t}"))
                .execute(store.pool())
                .await
                .unwrap();
        }
        (store, dir)
    }

    async fn verify(store: &Store, page: i64) -> AuditVerification {
        verify_stored_in_pages(store, crate::DEFAULT_WORKSPACE, page)
            .await
            .unwrap()
    }

    async fn exec(store: &Store, sql: &str) {
        sqlx::query(sql).execute(store.pool()).await.unwrap();
    }

    #[tokio::test]
    async fn aud_4_stored_chain_is_read_in_pages_and_its_key_columns_must_agree() {
        let (store, _dir) = tampered_store(7).await;
        // Positive controls: every page size gives the same verdict, and the
        // in-memory path over the same lines agrees.
        let all = store.audit_lines(crate::DEFAULT_WORKSPACE).await.unwrap();
        let whole = verify_lines(crate::DEFAULT_WORKSPACE, &all);
        assert!(whole.ok && whole.events == Some(7), "{whole:?}");
        for page in [1, 2, 3, 7, 8, 1024, VERIFY_PAGE] {
            assert_eq!(verify(&store, page).await, whole, "page {page}");
        }

        // The hash column no longer says what the line says.
        exec(&store, "UPDATE audit_events SET hash = replace(hash, substr(hash, 1, 1), CASE substr(hash, 1, 1) WHEN 'a' THEN 'b' ELSE 'a' END) WHERE seq = 3").await;
        let v = verify(&store, 2).await;
        assert_eq!((v.ok, v.first_bad_seq), (false, Some(3)), "{v:?}");
        // The lines alone still verify: only the column check sees this.
        let lines = store.audit_lines(crate::DEFAULT_WORKSPACE).await.unwrap();
        assert!(verify_lines(crate::DEFAULT_WORKSPACE, &lines).ok);
    }

    #[tokio::test]
    async fn aud_4_a_row_re_keyed_under_another_seq_is_bad() {
        let (store, _dir) = tampered_store(5).await;
        // Row 5 moved to seq 50: the lines still come in order and verify.
        exec(&store, "UPDATE audit_events SET seq = 50 WHERE seq = 5").await;
        let lines = store.audit_lines(crate::DEFAULT_WORKSPACE).await.unwrap();
        assert!(verify_lines(crate::DEFAULT_WORKSPACE, &lines).ok);
        let v = verify(&store, 2).await;
        assert_eq!((v.ok, v.first_bad_seq), (false, Some(5)), "{v:?}");
    }

    #[tokio::test]
    async fn aud_4_tampered_rows_are_named_by_their_first_bad_seq() {
        for (name, sql, bad) in [
            (
                "edited",
                "UPDATE audit_events SET line = replace(line, '\"i\":1', '\"i\":9') WHERE seq = 2",
                2,
            ),
            (
                "re-spelled, same event",
                "UPDATE audit_events SET line = replace(line, '\"i\":1', '\"i\":1.0') WHERE seq = 2",
                2,
            ),
            ("deleted", "DELETE FROM audit_events WHERE seq = 4", 4),
            (
                "reordered",
                "UPDATE audit_events SET seq = -1 WHERE seq = 5; UPDATE audit_events SET seq = 5 WHERE seq = 6; UPDATE audit_events SET seq = 6 WHERE seq = -1",
                5,
            ),
            (
                "replayed",
                "INSERT INTO audit_events (workspace_id, seq, line, hash) SELECT workspace_id, 100, line, hash FROM audit_events WHERE seq = 3",
                3,
            ),
        ] {
            let (store, _dir) = tampered_store(7).await;
            assert!(verify(&store, 2).await.ok, "{name}: positive control");
            for stmt in sql.split("; ") {
                exec(&store, stmt).await;
            }
            let v = verify(&store, 2).await;
            assert_eq!((v.ok, v.first_bad_seq), (false, Some(bad)), "{name}: {v:?}");
        }
    }

    /// `audit verify`'s pages grow 256, 512, … rows, so its page breaks fall
    /// after rows 256 and 768 of a chain: a row edited, or whose hash column
    /// was changed, on either side of a break is named; and so is a second
    /// row with the `seq` a page ended with, in a table rebuilt without its
    /// primary key (a page that started after that `seq` would never read
    /// it).
    #[tokio::test]
    async fn aud_4_rows_at_the_page_breaks_are_checked_like_any_other() {
        let (store, _dir) = tampered_store(800).await;
        let ok = verify(&store, VERIFY_PAGE).await;
        assert!(ok.ok && ok.events == Some(800), "control: {ok:?}");
        for seq in [255, 256, 257, 767, 768, 769, 800] {
            for (tamper, undo) in [
                (
                    "UPDATE audit_events SET line = replace(line, '\"i\":', '\"j\":') WHERE seq = ",
                    "UPDATE audit_events SET line = replace(line, '\"j\":', '\"i\":') WHERE seq = ",
                ),
                (
                    "UPDATE audit_events SET hash = upper(hash) WHERE seq = ",
                    "UPDATE audit_events SET hash = lower(hash) WHERE seq = ",
                ),
            ] {
                exec(&store, &format!("{tamper}{seq}")).await;
                let v = verify(&store, VERIFY_PAGE).await;
                assert_eq!((v.ok, v.first_bad_seq), (false, Some(seq)), "{tamper}{seq}");
                exec(&store, &format!("{undo}{seq}")).await;
                assert_eq!(verify(&store, VERIFY_PAGE).await, ok, "{undo}{seq}");
            }
        }
        // The table rebuilt without its primary key (control: it still
        // verifies), then a copy of one row added under the same `seq`. On
        // one connection of its own, with the store's pool closed: a pooled
        // connection may still hold a read of the schema from before the
        // rebuild (verification reads the file on a connection of its own).
        use sqlx::Connection;
        store.pool().close().await;
        let mut attacker = sqlx::AnyConnection::connect(store.url()).await.unwrap();
        for sql in [
            "CREATE TABLE audit_copy AS SELECT * FROM audit_events",
            "DROP TABLE audit_events",
            "ALTER TABLE audit_copy RENAME TO audit_events",
            "CREATE INDEX audit_events_by_seq ON audit_events (workspace_id, seq)",
        ] {
            sqlx::query(sql).execute(&mut attacker).await.unwrap();
        }
        assert_eq!(verify(&store, VERIFY_PAGE).await, ok, "control: rebuilt");
        for seq in [300, 256, 768] {
            let copy =
                format!("INSERT INTO audit_events SELECT * FROM audit_events WHERE seq = {seq}");
            sqlx::query(&copy).execute(&mut attacker).await.unwrap();
            let v = verify(&store, VERIFY_PAGE).await;
            assert_eq!(
                (v.ok, v.first_bad_seq),
                (false, Some(seq)),
                "a second row {seq}"
            );
            let undo = format!(
                "DELETE FROM audit_events WHERE rowid = (SELECT MAX(rowid) FROM audit_events WHERE seq = {seq})"
            );
            sqlx::query(&undo).execute(&mut attacker).await.unwrap();
            assert_eq!(verify(&store, VERIFY_PAGE).await, ok, "{seq} removed again");
        }
        // A copy of a row under a `seq` no page after 0 would read.
        for seq in [0, -7, i64::MIN + 1] {
            let copy = format!(
                "INSERT INTO audit_events (workspace_id, seq, line, hash) SELECT workspace_id, {seq}, line, hash FROM audit_events WHERE seq = 5"
            );
            sqlx::query(&copy).execute(&mut attacker).await.unwrap();
            let v = verify(&store, VERIFY_PAGE).await;
            assert!(!v.ok, "a copy under seq {seq}: {v:?}");
            let undo = format!("DELETE FROM audit_events WHERE seq = {seq}");
            sqlx::query(&undo).execute(&mut attacker).await.unwrap();
            assert_eq!(verify(&store, VERIFY_PAGE).await, ok, "{seq} removed again");
        }
    }
}

/// Which audit events a listing keeps.
struct AuditFilter<'a> {
    event_type: Option<&'a str>,
    actor: Option<&'a str>,
}

impl AuditFilter<'_> {
    fn is_empty(&self) -> bool {
        self.event_type.is_none() && self.actor.is_none()
    }

    fn matches(&self, e: &serde_json::Value) -> bool {
        let kind = e["event_type"].as_str().unwrap_or("");
        let type_ok = match self.event_type {
            None => true,
            Some(t) => match t.strip_suffix('*') {
                Some(prefix) => kind.starts_with(prefix),
                None => kind == t,
            },
        };
        let actor_ok = match self.actor {
            None => true,
            Some(a) => {
                e["actor"]["id"].as_str() == Some(a) || e["actor"]["kind"].as_str() == Some(a)
            }
        };
        type_ok && actor_ok
    }
}

#[cfg(test)]
mod filter_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_audit_filter_matches_type_prefix_and_actor_id_or_kind() {
        let e =
            json!({"event_type": "approval.approved", "actor": {"kind": "human", "id": "usr_1"}});
        let f = |t, a| {
            AuditFilter {
                event_type: t,
                actor: a,
            }
            .matches(&e)
        };
        assert!(f(None, None));
        assert!(f(Some("approval.approved"), None));
        assert!(f(Some("approval.*"), Some("usr_1")));
        assert!(f(None, Some("human")));
        assert!(!f(Some("approval"), None));
        assert!(!f(Some("run.*"), None));
        assert!(!f(None, Some("usr_2")));
        let system = json!({"event_type": "x", "actor": {"kind": "system"}});
        assert!(
            AuditFilter {
                event_type: None,
                actor: Some("system")
            }
            .matches(&system)
        );
    }
}
