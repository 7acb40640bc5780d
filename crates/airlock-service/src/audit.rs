//! Reading the audit log (AUD-1, AUD-2): pages, chain verification and
//! JSON Lines export, for callers in a workspace, and for the operator
//! over every workspace of a database ([`AuditLog`], which needs neither
//! the key directory nor the workers: an auditor can verify a copy).

use airlock_iam::Permission;
use airlock_protocol::Error;
use airlock_protocol::audit::{AuditPage, AuditVerification, ListAudit};
use airlock_store::{AuditRecord, Store};

use crate::caller::Caller;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// The chain of instance-level identity events (logins, bootstrap,
/// resets): they belong to no single workspace.
pub const SYSTEM_AUDIT: &str = "ws_system";

/// Verifies one workspace's chain from its stored lines: the count and
/// head, or the first sequence number that does not verify (an unreadable
/// line counts as bad at its position).
pub fn verify_lines(workspace: &str, lines: &[String]) -> AuditVerification {
    let mut v = airlock_audit::chain::Verifier::new().for_workspace(workspace);
    for (i, l) in lines.iter().enumerate() {
        let bad = match airlock_audit::from_json_line(l) {
            Ok(e) => v.push(&e).err().map(|e| e.first_bad_seq()),
            Err(_) => Some(u64::try_from(i + 1).unwrap_or(u64::MAX)),
        };
        if let Some(seq) = bad {
            return AuditVerification {
                ok: false,
                events: None,
                head: None,
                first_bad_seq: Some(seq),
            };
        }
    }
    match v.finish() {
        Ok(sum) => AuditVerification {
            ok: true,
            events: Some(sum.count),
            head: Some(airlock_store::hex(&sum.head)),
            first_bad_seq: None,
        },
        Err(e) => AuditVerification {
            ok: false,
            events: None,
            head: None,
            first_bad_seq: Some(e.first_bad_seq()),
        },
    }
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
        let lines = self
            .store
            .audit_page(&c.workspace, after, limit)
            .await
            .svc()?;
        let mut events = Vec::with_capacity(lines.len());
        for l in &lines {
            events.push(serde_json::from_str(l).map_err(Error::internal)?);
        }
        let next_cursor = if i64::try_from(events.len()).unwrap_or(0) == limit {
            events
                .last()
                .and_then(|e: &serde_json::Value| e["seq"].as_i64())
        } else {
            None
        };
        Ok(AuditPage {
            events,
            next_cursor,
        })
    }

    /// Verifies the caller's workspace's chain.
    pub async fn verify_audit(&self, c: &Caller) -> Result<AuditVerification> {
        c.require(Permission::AuditRead)?;
        let lines = self.store.audit_lines(&c.workspace).await.svc()?;
        Ok(verify_lines(&c.workspace, &lines))
    }

    /// The caller's workspace's chain as JSON Lines (one event per line,
    /// each ending in `\n`), verifiable with `verify_export.py`.
    pub async fn export_audit(&self, c: &Caller) -> Result<String> {
        c.require(Permission::AuditExport)?;
        let lines = self.store.audit_lines(&c.workspace).await.svc()?;
        Ok(join_lines(lines))
    }
}

fn join_lines(lines: Vec<String>) -> String {
    let mut out = String::new();
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

/// The operator's view of a database's audit log: every workspace's
/// chain, without the vault, the workers or a running server.
#[derive(Debug, Clone)]
pub struct AuditLog {
    store: Store,
}

impl AuditLog {
    pub async fn connect(url: &str) -> Result<Self> {
        let store = Store::open(url)
            .await
            .map_err(|e| Error::internal(format!("cannot open the database: {e}")))?;
        Ok(Self { store })
    }

    /// Every workspace's chain, verified.
    pub async fn verify_all(&self) -> Result<Vec<(String, AuditVerification)>> {
        let mut out = Vec::new();
        for ws in self.store.audit_workspaces().await.svc()? {
            let lines = self.store.audit_lines(&ws).await.svc()?;
            let v = verify_lines(&ws, &lines);
            out.push((ws, v));
        }
        Ok(out)
    }

    /// One workspace's chain as JSON Lines.
    pub async fn export(&self, workspace: &str) -> Result<String> {
        Ok(join_lines(self.store.audit_lines(workspace).await.svc()?))
    }
}
