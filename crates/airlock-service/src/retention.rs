//! Retention per workspace and workspace deletion (DUR-7): reading and setting a workspace's
//! settings, a pass that removes what they let go of (`apply_retention`,
//! with a dry run), and the periodic pass `airlock up` runs. Every removal
//! is audited (`retention.applied`, in the same commit as the rows it
//! removed); setting is audited too (`retention.set`). What a setting
//! removes is written once, in `airlock_store::retention`.
//!
//! All of it is `workspace.manage`. No MCP tool reaches it (SPEC DUR-6: no
//! destructive retention operation over MCP).
//!
//! Must not: contain SQL; remove bytes (blobs are `gc`'s).

use std::sync::Arc;
use std::time::Duration;

use airlock_iam::Permission;
use airlock_protocol::retention::{
    MAX_DAYS, Retention, RetentionApplied, RetentionRemoved, WorkspaceDeleted,
};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::{AuditRecord, RetentionSettings, WorkspaceDeletion};
use serde_json::json;

use crate::caller::Caller;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

fn to_store(r: &Retention) -> Result<RetentionSettings> {
    let days = |name: &str, v: Option<u64>| -> Result<Option<i64>> {
        match v {
            None => Ok(None),
            Some(d) if (1..=MAX_DAYS).contains(&d) => Ok(i64::try_from(d).ok()),
            Some(d) => Err(Error::new(
                ErrorCode::InvalidRequest,
                format!(
                    "{name} is {d}; it must be between 1 and {MAX_DAYS} days, or absent to keep for ever"
                ),
            )),
        }
    };
    Ok(RetentionSettings {
        runs_days: days("runs_days", r.runs_days)?,
        logs_days: days("logs_days", r.logs_days)?,
        artifacts_days: days("artifacts_days", r.artifacts_days)?,
        uploads_days: days("uploads_days", r.uploads_days)?,
        fires_days: days("fires_days", r.fires_days)?,
    })
}

fn from_store(s: RetentionSettings) -> Retention {
    let days = |v: Option<i64>| v.and_then(|d| u64::try_from(d).ok());
    Retention {
        runs_days: days(s.runs_days),
        logs_days: days(s.logs_days),
        artifacts_days: days(s.artifacts_days),
        uploads_days: days(s.uploads_days),
        fires_days: days(s.fires_days),
    }
}

fn removed(r: &airlock_store::RetentionRemoved) -> RetentionRemoved {
    RetentionRemoved {
        runs: r.runs,
        log_events: r.log_events,
        artifacts: r.artifacts,
        uploads: r.uploads,
        fires: r.fires,
    }
}

impl Service {
    /// The caller's workspace's retention settings.
    pub async fn get_retention(&self, c: &Caller) -> Result<Retention> {
        c.require(Permission::WorkspaceManage)?;
        let s = self.store.retention_settings(&c.workspace).await.svc()?;
        Ok(from_store(s))
    }

    /// Replaces the caller's workspace's retention settings (a missing
    /// field keeps that material for ever). Nothing is removed until the
    /// next pass.
    pub async fn set_retention(&self, c: &Caller, r: &Retention) -> Result<Retention> {
        c.require(Permission::WorkspaceManage)?;
        let s = to_store(r)?;
        let rec = AuditRecord::system("retention.set", None)
            .with_actor(c.audit_actor())
            .with_metadata(json!({"retention": r}));
        self.store
            .set_retention_settings(&c.workspace, s, c.actor_id(), rec)
            .await
            .svc()?;
        Ok(from_store(s))
    }

    /// One retention pass over the caller's workspace now; with
    /// `dry_run`, only what it would remove.
    pub async fn apply_retention(&self, c: &Caller, dry_run: bool) -> Result<RetentionApplied> {
        c.require(Permission::WorkspaceManage)?;
        self.retention_pass(&c.workspace, c.audit_actor(), dry_run)
            .await
    }

    async fn retention_pass(
        &self,
        workspace: &str,
        actor: airlock_audit::chain::Actor,
        dry_run: bool,
    ) -> Result<RetentionApplied> {
        let s = self.store.retention_settings(workspace).await.svc()?;
        let now = self.cfg.clock.now_ms();
        let settings = from_store(s);
        let out = if dry_run {
            self.store
                .retention_preview(workspace, s, now)
                .await
                .svc()?
        } else {
            self.store
                .apply_retention(workspace, s, now, |step| {
                    AuditRecord::system("retention.applied", None)
                        .with_actor(actor.clone())
                        .with_metadata(json!({
                            "retention": settings,
                            "removed": removed(step),
                        }))
                })
                .await
                .svc()?
        };
        Ok(RetentionApplied {
            dry_run,
            retention: settings,
            removed: removed(&out),
        })
    }

    /// Runs a retention pass over every workspace with settings, at start
    /// and then every `cfg.retention_interval` (zero: never), until `stop`
    /// flips; `report` hears each workspace's outcome.
    pub async fn run_retention(
        self: Arc<Self>,
        mut stop: tokio::sync::watch::Receiver<bool>,
        report: impl Fn(&str, Result<RetentionApplied>) + Send + 'static,
    ) {
        let every = self.cfg.retention_interval;
        if every.is_zero() {
            return;
        }
        // A moment after start, so start-up recovery goes first.
        let mut wait = Duration::from_secs(5).min(every);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.changed() => if *stop.borrow() { break },
            }
            wait = every;
            // A deletion a crash interrupted is finished first.
            if let Err(e) = self.resume_purges().await {
                report("", Err(e));
            }
            let workspaces = match self.store.workspaces_with_retention().await.svc() {
                Ok(w) => w,
                Err(e) => {
                    report("", Err(e));
                    continue;
                }
            };
            for ws in workspaces {
                if *stop.borrow() {
                    return;
                }
                let r = self
                    .retention_pass(&ws, airlock_audit::chain::Actor::System, false)
                    .await;
                report(&ws, r);
            }
        }
    }
}

/// The `workspace.purged` event: what the purge after a deletion removed.
fn purged_event(removed: &std::collections::BTreeMap<String, u64>) -> AuditRecord {
    AuditRecord::system("workspace.purged", None).with_metadata(json!({"removed": removed}))
}

impl Service {
    /// Whether the caller may delete their workspace: `workspace.delete`,
    /// and not the workspace of this server's local workers folder (which
    /// [`Service::delete_workspace`] refuses). For a front end choosing
    /// what to offer; the deletion checks again.
    pub fn may_delete_workspace(&self, c: &Caller) -> bool {
        c.may(crate::Operation::DeleteWorkspace) && c.workspace != self.cfg.workers_workspace
    }

    /// Finishes the purge of every deleted workspace a crash left with rows
    /// (see `airlock_store::deletion`); answers how many were finished.
    pub async fn resume_purges(&self) -> Result<usize> {
        let pending = self.store.unpurged_workspaces().await.svc()?;
        for ws in &pending {
            self.store
                .purge_workspace(ws, self.cfg.clock.now_ms(), purged_event)
                .await
                .svc()?;
        }
        Ok(pending.len())
    }
}

impl Service {
    /// Deletes the caller's workspace `id` (`workspace.delete`): every row
    /// it owns and every row derived from them — the cut in one transaction
    /// with its `workspace.deleted` audit event, then the purge in short
    /// steps ending with `workspace.purged` (see `airlock_store::deletion`). Its
    /// audit chain stays; blobs are left to `gc`. `confirm` must be the
    /// workspace's name. Refused while any of its runs has not ended
    /// (`workspace_busy`), and for the workspace the local workers folder
    /// belongs to.
    pub async fn delete_workspace(
        &self,
        c: &Caller,
        id: &str,
        confirm: &str,
    ) -> Result<WorkspaceDeleted> {
        c.require(Permission::WorkspaceDelete)?;
        // Another workspace's id looks like one that does not exist.
        let not_found = || Error::new(ErrorCode::NotFound, "no such workspace");
        if id != c.workspace {
            return Err(not_found());
        }
        if id == self.cfg.workers_workspace {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                "the workspace of this server's local workers folder cannot be deleted",
            ));
        }
        let name = self
            .store
            .workspace_name(id)
            .await
            .svc()?
            .ok_or_else(not_found)?;
        if confirm != name {
            return Err(Error::new(
                ErrorCode::InvalidRequest,
                "confirm must be the workspace's name, exactly",
            ));
        }
        let actor = c.audit_actor();
        let outcome = self
            .store
            .delete_workspace(
                id,
                self.cfg.clock.now_ms(),
                |removed| {
                    AuditRecord::system("workspace.deleted", None)
                        .with_actor(actor.clone())
                        .with_metadata(json!({"name": name, "removed": removed}))
                },
                |removed| purged_event(removed).with_actor(actor.clone()),
            )
            .await
            .svc()?;
        match outcome {
            WorkspaceDeletion::Deleted(removed) => Ok(WorkspaceDeleted {
                id: id.to_string(),
                removed,
            }),
            WorkspaceDeletion::NotFound => Err(not_found()),
            WorkspaceDeletion::Busy(n) => Err(Error::new(
                ErrorCode::WorkspaceBusy,
                format!(
                    "{n} run(s) of the workspace have not ended; cancel them (or `airlock stop`) first"
                ),
            )),
        }
    }
}
