//! Webhook triggers (API-9, RUN-6): a signed endpoint per worker that
//! declares `[[triggers]] kind = "webhook"`, and the rotation of its
//! secret. Front ends hand over the path, the headers and the raw body;
//! everything else (verification, replay store, quota, the run) is here.
//!
//! - `POST /v1/workers/{id}/webhook/secret` (workers:write) makes a new
//!   secret version and shows its value once. The previous version stays
//!   valid for [`GRACE_MS`] (24 h) so the sender can be switched over, then
//!   it is retired; older versions are retired at once. Slack and Stripe
//!   issue their own signing secrets: such a secret is imported with the
//!   body `{"secret": "…"}` instead of being generated.
//! - `POST /v1/hooks/{workspace}/{worker}` is public: the signature over
//!   the raw body is the authentication. A missing worker, a worker without
//!   a webhook trigger, an endpoint without a secret, a bad or stale
//!   signature and a replayed delivery all get the same 401 (so endpoints
//!   cannot be probed) and create nothing; the reason goes to the audit
//!   trail only (`webhook.refused`).
//!
//! Replays: every accepted delivery id is recorded before the run is
//! created, atomically, so a delivery is acted on at most once while the
//! replay store remembers it ([`DELIVERY_RETENTION_MS`], one day). A sender
//! that retries a delivery with the same id — even after a 422 or a 5xx —
//! is refused: the delivery is **not** re-run. Senders with timestamps
//! (Standard Webhooks, Slack, Stripe) cannot replay older deliveries at all
//! (300 s window); GitHub has no signed timestamp, so its replay protection
//! ends when the store forgets the delivery id.
//!
//! Secret values live in the vault under the worker's workspace, named
//! [`secret_name`]; the store only records versions. This module never
//! logs or returns a secret except in the one rotation answer.

use std::sync::atomic::Ordering;

use airlock_iam::Permission;
use airlock_protocol::webhooks::{Accepted, RotateSecret, RotatedSecret, WebhookRun};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::AuditRecord;
use airlock_worker::{Bundle, Trigger, WebhookFormat};
use base64::Engine;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::audit::SYSTEM_AUDIT;
use crate::caller::Caller;
use crate::error::{Result, StoreResultExt};
use crate::runs::StartRun;
use crate::secrets::SecretError;
use crate::service::Service;
use crate::webhook_verify::{self, Headers, WebhookRefusal};

/// Largest webhook body a front end hands over (1 MiB).
pub const MAX_WEBHOOK_BODY: usize = 1 << 20;
/// How long the previous secret version keeps verifying after a rotation.
pub const GRACE_MS: i64 = 24 * 3600 * 1000;
/// How long the replay store remembers a delivery id.
pub const DELIVERY_RETENTION_MS: i64 = 24 * 3600 * 1000;
/// At most one prune of the replay store per process this often.
const PRUNE_EVERY_MS: i64 = 10 * 60 * 1000;

/// The vault workspace that holds a workspace's webhook signing keys: not
/// the workspace itself, so a worker that declares a `WEBHOOK_…` secret
/// cannot have an endpoint's key delivered into its sandbox.
pub fn webhook_vault_space(workspace: &str) -> String {
    format!("{workspace}#webhooks")
}

/// The vault name of one secret version of a worker's endpoint:
/// `WEBHOOK_` + the first 8 bytes of SHA-256(worker id) in upper-case hex
/// + `_V` + version (fits `^[A-Z][A-Z0-9_]{0,63}$` for any worker id).
pub fn webhook_secret_name(worker: &str, version: i64) -> String {
    let digest = Sha256::digest(worker.as_bytes());
    let mut name = String::from("WEBHOOK_");
    for b in digest.iter().take(8) {
        name.push_str(&format!("{b:02X}"));
    }
    name.push_str(&format!("_V{version}"));
    name
}

/// The format of a worker's webhook trigger, if it declares one.
fn webhook_format(bundle: &Bundle) -> Option<WebhookFormat> {
    bundle.manifest.triggers.iter().find_map(|t| match t {
        Trigger::Webhook { format } => Some(*format),
        _ => None,
    })
}

fn format_name(f: WebhookFormat) -> &'static str {
    match f {
        WebhookFormat::Standard => "standard",
        WebhookFormat::Github => "github",
        WebhookFormat::Slack => "slack",
        WebhookFormat::Stripe => "stripe",
    }
}

fn secret_error(e: SecretError) -> Error {
    Error::internal(format!("webhook secret: {e}"))
}

// ------------------------------------------------------------------ rotation

/// A generated secret: 32 random bytes, as the format expects them.
fn generate(format: WebhookFormat) -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| Error::internal("no randomness"))?;
    Ok(match format {
        WebhookFormat::Standard => format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        ),
        WebhookFormat::Github | WebhookFormat::Slack | WebhookFormat::Stripe => {
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        }
    })
}

/// Checks an imported secret: printable ASCII without spaces, 16 to 512
/// characters; for Standard Webhooks, base64 (optionally `whsec_`) of 16
/// to 64 bytes.
fn imported(format: WebhookFormat, secret: String) -> Result<String> {
    let bad = |m: &str| Error::new(ErrorCode::InvalidSecret, m);
    if !(16..=512).contains(&secret.len()) || !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            "secret must be 16 to 512 printable ASCII characters without spaces",
        ));
    }
    if format == WebhookFormat::Standard {
        let b64 = secret.strip_prefix("whsec_").unwrap_or(&secret);
        let ok = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(b64))
            .is_ok_and(|k| (16..=64).contains(&k.len()));
        if !ok {
            return Err(bad(
                "a Standard Webhooks secret is whsec_ followed by the base64 of 16 to 64 bytes",
            ));
        }
    }
    Ok(secret)
}

/// Why a delivery was refused (audit only; the sender sees one refusal).
enum Refusal {
    /// No such worker here, or it declares no webhook trigger.
    UnknownEndpoint,
    /// The endpoint has no live secret.
    NoSecret,
    Signature(WebhookRefusal),
    /// A verified delivery whose id was seen before.
    Replayed(String),
}

impl Refusal {
    fn code(&self) -> &'static str {
        match self {
            Self::UnknownEndpoint => "unknown_endpoint",
            Self::NoSecret => "no_secret",
            Self::Signature(r) => r.code(),
            Self::Replayed(_) => "replayed",
        }
    }
}

/// Keeps attacker-chosen path text in audit metadata short and printable.
fn clip(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(100).collect()
}

impl Service {
    /// Rotates (or, with `req.secret`, imports) the signing secret of a
    /// worker's webhook endpoint (API-9); the value is shown this once.
    pub async fn rotate_webhook_secret(
        &self,
        c: &Caller,
        worker: &str,
        req: &RotateSecret,
    ) -> Result<RotatedSecret> {
        c.require(Permission::WorkersWrite)?;
        let bundle = self
            .worker_in(&c.workspace, worker)
            .ok_or_else(Error::not_found)?;
        let format = webhook_format(&bundle).ok_or_else(|| {
            Error::new(
                ErrorCode::NoWebhookTrigger,
                "this worker declares no webhook trigger",
            )
        })?;
        let was_imported = req.secret.is_some();
        let secret = zeroize::Zeroizing::new(match &req.secret {
            Some(v) => imported(format, v.clone())?,
            None => generate(format)?,
        });
        let now = self.now();
        let ws = c.workspace.as_str();
        let version = self
            .store
            .add_webhook_secret_version(
                ws,
                worker,
                now,
                AuditRecord::system("webhook.secret_rotated", None)
                    .with_actor(c.audit_actor())
                    .with_metadata(
                        json!({"format": format_name(format), "imported": was_imported}),
                    ),
            )
            .await
            .svc()?;
        // The version row commits first: should the vault write fail, the
        // new version has no value and never verifies, while the previous
        // one keeps its grace period; rotating again repairs it.
        self.secrets
            .set(
                &webhook_vault_space(ws),
                &webhook_secret_name(worker, version),
                secret.as_bytes().to_vec(),
                c.actor_id(),
            )
            .await
            .map_err(secret_error)?;
        let mut previous_valid_until = None;
        if version > 1 {
            // Only the immediately previous version keeps a grace period.
            let retired = self
                .store
                .retire_webhook_secrets_before(ws, worker, version - 1, now)
                .await
                .svc()?;
            self.forget_webhook_values(ws, worker, &retired, c.actor_id())
                .await;
            let live = self.store.webhook_secret_versions(ws, worker).await.svc()?;
            if live.iter().any(|(v, _)| *v == version - 1) {
                previous_valid_until = Some(now.saturating_add(GRACE_MS));
            }
        }
        Ok(RotatedSecret {
            secret: secret.to_string(),
            version,
            format: format_name(format).into(),
            endpoint: format!("/v1/hooks/{ws}/{worker}"),
            previous_valid_until,
        })
    }

    /// Drops the vault values of retired versions. Best effort: a value
    /// left behind is never read again (its version is retired, and the
    /// vault space is one no worker can declare).
    async fn forget_webhook_values(&self, ws: &str, worker: &str, versions: &[i64], actor: &str) {
        for v in versions {
            let _ = self
                .secrets
                .remove(
                    &webhook_vault_space(ws),
                    &webhook_secret_name(worker, *v),
                    actor,
                )
                .await;
        }
    }

    /// Audits a refusal and answers the one `unauthenticated`. The event
    /// goes to the worker's workspace when the path names the workspace
    /// that owns the workers, else to the system chain (a path cannot
    /// create audit chains for workspaces that do not exist). A refusal
    /// that cannot be audited is answered as internal.
    async fn refuse_delivery(&self, workspace: &str, worker: &str, why: Refusal) -> Error {
        let mut meta = json!({"code": why.code(), "worker": clip(worker)});
        match &why {
            Refusal::Signature(r) => {
                if let Some(h) = r.header() {
                    meta["header"] = json!(h);
                }
            }
            // Verified, so not attacker-chosen: worth keeping for forensics.
            Refusal::Replayed(id) => meta["delivery"] = json!(clip(id)),
            Refusal::UnknownEndpoint | Refusal::NoSecret => {}
        }
        let chain = if workspace == self.cfg.workers_workspace {
            workspace
        } else {
            meta["workspace"] = json!(clip(workspace));
            SYSTEM_AUDIT
        };
        let audited = self
            .audit(
                chain,
                AuditRecord::system("webhook.refused", None).with_metadata(meta),
            )
            .await;
        if let Err(e) = audited {
            return e;
        }
        Error::new(ErrorCode::Unauthenticated, "signature verification failed")
    }

    /// The live secret values of an endpoint, newest first. The newest
    /// version is always live; older ones only within [`GRACE_MS`] of the
    /// newest's creation — past that they are retired here.
    async fn live_webhook_secrets(
        &self,
        ws: &str,
        worker: &str,
        now: i64,
    ) -> Result<Vec<zeroize::Zeroizing<Vec<u8>>>> {
        let versions = self.store.webhook_secret_versions(ws, worker).await.svc()?;
        let Some(&(newest, newest_at)) = versions.first() else {
            return Ok(Vec::new());
        };
        let in_grace = now < newest_at.saturating_add(GRACE_MS);
        let reader = format!("webhook:{worker}");
        if !in_grace && versions.len() > 1 {
            let retired = self
                .store
                .retire_webhook_secrets_before(ws, worker, newest, now)
                .await
                .svc()?;
            self.forget_webhook_values(ws, worker, &retired, &reader)
                .await;
        }
        // Secret reads are audited (KEY-6); the reader is the endpoint.
        let mut out = Vec::new();
        for (version, _) in versions.iter().filter(|(v, _)| *v == newest || in_grace) {
            match self
                .secrets
                .read_for_run(
                    &webhook_vault_space(ws),
                    &webhook_secret_name(worker, *version),
                    &reader,
                )
                .await
            {
                Ok((_, value)) => out.push(crate::secrets::bytes(&value)),
                // A version whose value never made it into the vault.
                Err(SecretError::Missing(_)) => {}
                Err(e) => return Err(secret_error(e)),
            }
        }
        Ok(out)
    }

    /// Forgets old delivery ids now and then (at most every
    /// [`PRUNE_EVERY_MS`] per process).
    async fn maybe_prune_deliveries(&self, now: i64) {
        let last = self.last_delivery_prune.load(Ordering::Relaxed);
        if now.saturating_sub(last) < PRUNE_EVERY_MS {
            return;
        }
        if self
            .last_delivery_prune
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // A failed prune is retried at the next interval; old ids only
        // make replays less likely to be accepted, never more.
        let _ = self
            .store
            .prune_deliveries(now.saturating_sub(DELIVERY_RETENTION_MS))
            .await;
    }

    /// Receives a signed delivery and starts a run of the worker with the
    /// body (a JSON object) as its input (API-9, RUN-6). A missing worker,
    /// a worker without a webhook trigger, an endpoint without a secret, a
    /// bad or stale signature and a replayed delivery all get the same
    /// `unauthenticated` and create nothing; a verified body that is not
    /// valid input is `input_invalid` and its delivery id stays used.
    pub async fn receive_webhook(
        &self,
        workspace: &str,
        worker: &str,
        headers: &Headers,
        raw: &[u8],
    ) -> Result<Accepted> {
        let now = self.now();
        let now_s = now.div_euclid(1000);
        let Some(format) = self
            .worker_in(workspace, worker)
            .as_ref()
            .and_then(webhook_format)
        else {
            return Err(self
                .refuse_delivery(workspace, worker, Refusal::UnknownEndpoint)
                .await);
        };
        // Garbage is refused before any secret is read.
        if let Err(r) = webhook_verify::precheck(format, headers, now_s) {
            return Err(self
                .refuse_delivery(workspace, worker, Refusal::Signature(r))
                .await);
        }
        let secrets = self.live_webhook_secrets(workspace, worker, now).await?;
        if secrets.is_empty() {
            return Err(self
                .refuse_delivery(workspace, worker, Refusal::NoSecret)
                .await);
        }
        let verified = webhook_verify::verify(format, &secrets, headers, raw, now_s);
        drop(secrets);
        let verified = match verified {
            Ok(v) => v,
            Err(r) => {
                return Err(self
                    .refuse_delivery(workspace, worker, Refusal::Signature(r))
                    .await);
            }
        };
        // API-4: webhook runs count against the workspace's daily quota.
        // Taken before the delivery is recorded, so a sender told 429 can
        // retry the same delivery later instead of having it refused as a
        // replay.
        let taken = self
            .take_quotas(&[(
                format!("ws:{workspace}"),
                self.cfg.quotas.runs_per_workspace_per_day,
            )])
            .await?;
        let recorded = self
            .store
            .record_delivery(workspace, worker, &verified.delivery_id, now)
            .await
            .svc();
        match recorded {
            Ok(true) => {}
            Ok(false) => {
                self.give_back(taken).await;
                let why = Refusal::Replayed(verified.delivery_id);
                return Err(self.refuse_delivery(workspace, worker, why).await);
            }
            Err(e) => {
                self.give_back(taken).await;
                return Err(e);
            }
        }
        self.maybe_prune_deliveries(now).await;
        let Ok(input) = serde_json::from_slice::<serde_json::Value>(raw) else {
            self.give_back(taken).await;
            return Err(Error::new(ErrorCode::InputInvalid, "the body is not JSON"));
        };
        let started = match self
            .start_run(StartRun {
                workspace: workspace.to_string(),
                worker_id: worker.to_string(),
                input,
                trigger: "webhook".into(),
                actor: format!("webhook:{worker}"),
                idempotency_key: None,
            })
            .await
        {
            Ok(s) => s,
            Err(e) => {
                self.give_back(taken).await;
                return Err(e);
            }
        };
        // The run exists; failing to link it would only make a retry look
        // like news, and retries are refused anyway.
        let _ = self
            .store
            .set_delivery_run(workspace, worker, &verified.delivery_id, &started.run.id)
            .await;
        Ok(Accepted {
            run: WebhookRun {
                id: started.run.id,
                worker_id: started.run.worker_id,
                state: started.run.state.as_str().into(),
                created_at: started.run.created_at,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn api_9_secret_names_are_valid_vault_names() {
        for worker in ["hello", "a", &"z".repeat(63), "x-y-z-1"] {
            for version in [1, 42, i64::MAX] {
                let n = webhook_secret_name(worker, version);
                assert!(n.len() <= 64, "{n}");
                assert!(airlock_vault::SecretName::parse(&n).is_ok(), "{n}");
                assert!(!airlock_worker::is_platform_secret(&n), "{n}");
            }
        }
        assert_eq!(
            webhook_secret_name("hello", 3),
            webhook_secret_name("hello", 3)
        );
        assert_ne!(
            webhook_secret_name("hello", 3),
            webhook_secret_name("hello", 4)
        );
        assert_ne!(
            webhook_secret_name("hello", 3),
            webhook_secret_name("hellp", 3)
        );
        // sha256("hello") = 2cf24dba5fb0a30e…
        assert_eq!(
            webhook_secret_name("hello", 7),
            "WEBHOOK_2CF24DBA5FB0A30E_V7"
        );
    }

    #[test]
    fn api_9_generated_secrets_have_the_format_s_shape() {
        let s = generate(WebhookFormat::Standard).unwrap();
        let b64 = s.strip_prefix("whsec_").unwrap();
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap()
                .len(),
            32
        );
        for f in [
            WebhookFormat::Github,
            WebhookFormat::Slack,
            WebhookFormat::Stripe,
        ] {
            let s = generate(f).unwrap();
            assert_eq!(s.len(), 64);
            assert!(s.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(
            generate(WebhookFormat::Github).unwrap(),
            generate(WebhookFormat::Github).unwrap()
        );
    }

    #[test]
    fn api_9_imported_secrets_are_checked() {
        assert!(
            imported(
                WebhookFormat::Slack,
                "8f742231b10e8888abcd99yyyzzz85a5".into()
            )
            .is_ok()
        );
        assert!(imported(WebhookFormat::Stripe, "whsec_abcdefghijklmnop".into()).is_ok());
        assert!(imported(WebhookFormat::Slack, "short".into()).is_err());
        assert!(imported(WebhookFormat::Slack, "has a space in it here".into()).is_err());
        assert!(imported(WebhookFormat::Slack, "x".repeat(513)).is_err());
        assert!(
            imported(
                WebhookFormat::Standard,
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()
            )
            .is_ok()
        );
        assert!(imported(WebhookFormat::Standard, "whsec_!!!!!!!!!!!!!!!!!!!!".into()).is_err());
        assert!(imported(WebhookFormat::Standard, "whsec_YWJjZGVmZ2g=".into()).is_err());
    }
}
