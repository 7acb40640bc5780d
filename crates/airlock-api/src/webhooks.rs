//! Webhook triggers (API-9, RUN-6): a signed endpoint per worker that
//! declares `[[triggers]] kind = "webhook"`, and the rotation of its secret.
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

use std::sync::atomic::{AtomicI64, Ordering};

use airlock_iam::Permission;
use airlock_service::CreateRun;
use airlock_service::secrets::SecretError;
use airlock_store::AuditRecord;
use airlock_worker::{Bundle, Trigger, WebhookFormat};
use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use zeroize::Zeroizing;

use crate::auth::{Caller, SYSTEM_AUDIT};
use crate::webhook_verify::{self, WebhookRefusal};
use crate::{ApiError, AppState};

/// Largest webhook body read (1 MiB).
pub const MAX_BODY: usize = 1 << 20;
/// How long the previous secret version keeps verifying after a rotation.
pub const GRACE_MS: i64 = 24 * 3600 * 1000;
/// How long the replay store remembers a delivery id.
pub const DELIVERY_RETENTION_MS: i64 = 24 * 3600 * 1000;
/// At most one prune of the replay store per process this often.
const PRUNE_EVERY_MS: i64 = 10 * 60 * 1000;

/// The routes of this module, with their OpenAPI descriptions.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(rotate_secret))
        .routes(routes!(receive))
}

/// The vault workspace that holds a workspace's webhook signing keys: not
/// the workspace itself, so a worker that declares a `WEBHOOK_…` secret
/// cannot have an endpoint's key delivered into its sandbox.
pub fn vault_space(workspace: &str) -> String {
    format!("{workspace}#webhooks")
}

/// The vault name of one secret version of a worker's endpoint:
/// `WEBHOOK_` + the first 8 bytes of SHA-256(worker id) in upper-case hex
/// + `_V` + version (fits `^[A-Z][A-Z0-9_]{0,63}$` for any worker id).
pub fn secret_name(worker: &str, version: i64) -> String {
    let digest = Sha256::digest(worker.as_bytes());
    let mut name = String::from("WEBHOOK_");
    for b in digest.iter().take(8) {
        name.push_str(&format!("{b:02X}"));
    }
    name.push_str(&format!("_V{version}"));
    name
}

/// The format of a worker's webhook trigger, if it declares one.
pub fn webhook_format(bundle: &Bundle) -> Option<WebhookFormat> {
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

fn internal(what: &str) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", what)
}

fn secret_error(e: SecretError) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.code(), e.to_string())
}

// ------------------------------------------------------------------ rotation

/// Optional body of a rotation.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateBody {
    /// A secret issued by the sender (Slack's signing secret, Stripe's
    /// `whsec_…` endpoint secret). Omit it to have one generated.
    #[serde(default)]
    pub secret: Option<String>,
}

/// The new secret, shown once.
#[derive(Debug, Serialize, ToSchema)]
pub struct RotatedSecret {
    /// Configure this at the sender. Standard Webhooks: `whsec_<base64>`;
    /// other formats: the string itself is the HMAC key.
    pub secret: String,
    pub version: i64,
    /// `standard`, `github`, `slack` or `stripe`.
    pub format: String,
    /// Where the sender posts, relative to this server.
    pub endpoint: String,
    /// Until when (Unix ms) the previous version still verifies; `null`
    /// when there is none.
    pub previous_valid_until: Option<i64>,
}

/// A generated secret: 32 random bytes, as the format expects them.
fn generate(format: WebhookFormat) -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| internal("no randomness"))?;
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
fn imported(format: WebhookFormat, secret: String) -> Result<String, ApiError> {
    let bad = |m: &str| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_secret", m);
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

/// Rotates the signing secret of a worker's webhook endpoint (API-9).
#[utoipa::path(
    post,
    path = "/v1/workers/{id}/webhook/secret",
    tag = "webhooks",
    params(("id" = String, Path, description = "worker id")),
    request_body(content = Option<RotateBody>, content_type = "application/json", description = "optional: import a secret issued by the sender; omit the body to have one generated"),
    responses(
        (status = 201, description = "the new secret, shown this once", body = RotatedSecret),
        (status = 404, description = "no such worker in this workspace", body = crate::openapi::ErrorBody),
        (status = 409, description = "the worker declares no webhook trigger", body = crate::openapi::ErrorBody),
        (status = "4XX", description = "error", body = crate::openapi::ErrorBody),
        (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)
    )
)]
pub async fn rotate_secret(
    State(s): State<AppState>,
    c: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    c.require(Permission::WorkersWrite)?;
    let bundle = s
        .service
        .worker_in(&c.workspace, &id)
        .ok_or_else(ApiError::not_found)?;
    let format = webhook_format(&bundle).ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "no_webhook_trigger",
            "this worker declares no webhook trigger",
        )
    })?;
    let req: RotateBody = if body.iter().all(u8::is_ascii_whitespace) {
        RotateBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_body", e.to_string()))?
    };
    let was_imported = req.secret.is_some();
    let secret = match req.secret {
        Some(v) => imported(format, v)?,
        None => generate(format)?,
    };
    let store = s.service.store();
    let now = s.auth.now();
    let ws = c.workspace.as_str();
    let version = store
        .add_webhook_secret_version(
            ws,
            &id,
            now,
            AuditRecord::system("webhook.secret_rotated", None)
                .with_actor(c.audit_actor())
                .with_metadata(json!({"format": format_name(format), "imported": was_imported})),
        )
        .await?;
    // The version row commits first: should the vault write fail, the new
    // version has no value and never verifies, while the previous one keeps
    // its grace period; rotating again repairs it.
    s.service
        .secrets()
        .set(
            &vault_space(ws),
            &secret_name(&id, version),
            secret.as_bytes().to_vec(),
            c.actor(),
        )
        .await
        .map_err(secret_error)?;
    let mut previous_valid_until = None;
    if version > 1 {
        // Only the immediately previous version keeps a grace period.
        let retired = store
            .retire_webhook_secrets_before(ws, &id, version - 1, now)
            .await?;
        forget_values(&s, ws, &id, &retired, c.actor()).await;
        let live = store.webhook_secret_versions(ws, &id).await?;
        if live.iter().any(|(v, _)| *v == version - 1) {
            previous_valid_until = Some(now.saturating_add(GRACE_MS));
        }
    }
    let out = RotatedSecret {
        secret,
        version,
        format: format_name(format).into(),
        endpoint: format!("/v1/hooks/{ws}/{id}"),
        previous_valid_until,
    };
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

/// Drops the vault values of retired versions. Best effort: a value left
/// behind is never read again (its version is retired).
async fn forget_values(s: &AppState, ws: &str, worker: &str, versions: &[i64], actor: &str) {
    for v in versions {
        let _ = s
            .service
            .secrets()
            .remove(&vault_space(ws), &secret_name(worker, *v), actor)
            .await;
    }
}

// ------------------------------------------------------------------ delivery

/// A run started by a delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookRun {
    pub id: String,
    pub worker_id: String,
    pub state: String,
    pub created_at: i64,
}

/// The answer to an accepted delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    pub run: WebhookRun,
}

/// Why a delivery was refused (audit only; the sender sees one 401).
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

/// Audits a refusal and answers the one 401. The event goes to the
/// worker's workspace when the path names the workspace that owns the
/// workers, else to the system chain (a path cannot create audit chains
/// for workspaces that do not exist). A refusal that cannot be audited is
/// answered with the generic 500.
async fn refuse(s: &AppState, workspace: &str, worker: &str, why: Refusal) -> ApiError {
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
    let chain = if workspace == s.service.config().workers_workspace {
        workspace
    } else {
        meta["workspace"] = json!(clip(workspace));
        SYSTEM_AUDIT
    };
    let audited = s
        .service
        .store()
        .audit(
            chain,
            AuditRecord::system("webhook.refused", None).with_metadata(meta),
        )
        .await;
    if audited.is_err() {
        return internal("audit failed");
    }
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthenticated",
        "signature verification failed",
    )
}

/// The live secret values of an endpoint, newest first. The newest version
/// is always live; older ones only within [`GRACE_MS`] of the newest's
/// creation — past that they are retired here.
async fn live_secrets(
    s: &AppState,
    ws: &str,
    worker: &str,
    now: i64,
) -> Result<Vec<Zeroizing<Vec<u8>>>, ApiError> {
    let store = s.service.store();
    let versions = store.webhook_secret_versions(ws, worker).await?;
    let Some(&(newest, newest_at)) = versions.first() else {
        return Ok(Vec::new());
    };
    let in_grace = now < newest_at.saturating_add(GRACE_MS);
    if !in_grace && versions.len() > 1 {
        let actor = format!("webhook:{worker}");
        let retired = store
            .retire_webhook_secrets_before(ws, worker, newest, now)
            .await?;
        forget_values(s, ws, worker, &retired, &actor).await;
    }
    // Secret reads are audited (KEY-6); the reader is the endpoint.
    let reader = format!("webhook:{worker}");
    let mut out = Vec::new();
    for (version, _) in versions.iter().filter(|(v, _)| *v == newest || in_grace) {
        match s
            .service
            .secrets()
            .read_for_run(&vault_space(ws), &secret_name(worker, *version), &reader)
            .await
        {
            // Wiped when the caller drops the list.
            Ok((_, value)) => out.push(airlock_service::secrets::bytes(&value)),
            // A version whose value never made it into the vault.
            Err(SecretError::Missing(_)) => {}
            Err(e) => return Err(secret_error(e)),
        }
    }
    Ok(out)
}

static LAST_PRUNE: AtomicI64 = AtomicI64::new(i64::MIN);

/// Forgets old delivery ids now and then (at most every
/// [`PRUNE_EVERY_MS`] per process).
async fn maybe_prune(s: &AppState, now: i64) {
    let last = LAST_PRUNE.load(Ordering::Relaxed);
    if now.saturating_sub(last) < PRUNE_EVERY_MS {
        return;
    }
    if LAST_PRUNE
        .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let _ = s
        .service
        .store()
        .prune_deliveries(now.saturating_sub(DELIVERY_RETENTION_MS))
        .await;
}

/// Receives a signed delivery and starts a run of the worker with the body
/// (a JSON object) as its input (API-9, RUN-6).
#[utoipa::path(
    post,
    path = "/v1/hooks/{workspace}/{worker}",
    tag = "webhooks",
    params(
        ("workspace" = String, Path, description = "workspace id"),
        ("worker" = String, Path, description = "worker id")
    ),
    request_body(content = Object, content_type = "application/json", description = "the signed body, verified byte for byte; at most 1 MiB"),
    responses(
        (status = 202, description = "verified; the run is queued", body = Accepted),
        (status = 401, description = "refused: bad, stale or replayed signature, or no such endpoint (never more detail)", body = crate::openapi::ErrorBody),
        (status = 413, description = "body larger than 1 MiB", body = crate::openapi::ErrorBody),
        (status = 422, description = "verified, but the body is not valid input for the worker; nothing was created", body = crate::openapi::ErrorBody),
        (status = 429, description = "rate limited or the workspace's daily run quota is used up", body = crate::openapi::ErrorBody),
        (status = "5XX", description = "internal error", body = crate::openapi::ErrorBody)
    ),
    security(())
)]
pub async fn receive(
    State(s): State<AppState>,
    Path((workspace, worker)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let raw = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the body is larger than 1 MiB",
        )
    })?;
    let now = s.auth.now();
    let now_s = now.div_euclid(1000);
    let Some(format) = s
        .service
        .worker_in(&workspace, &worker)
        .as_ref()
        .and_then(webhook_format)
    else {
        return Err(refuse(&s, &workspace, &worker, Refusal::UnknownEndpoint).await);
    };
    // Garbage is refused before any secret is read.
    if let Err(r) = webhook_verify::precheck(format, &headers, now_s) {
        return Err(refuse(&s, &workspace, &worker, Refusal::Signature(r)).await);
    }
    let secrets = live_secrets(&s, &workspace, &worker, now).await?;
    if secrets.is_empty() {
        return Err(refuse(&s, &workspace, &worker, Refusal::NoSecret).await);
    }
    let verified = match webhook_verify::verify(format, &secrets, &headers, &raw, now_s) {
        Ok(v) => v,
        Err(r) => return Err(refuse(&s, &workspace, &worker, Refusal::Signature(r)).await),
    };
    drop(secrets);
    let store = s.service.store();
    // API-4: webhook runs count against the workspace's daily quota. Taken
    // before the delivery is recorded, so a sender told 429 can retry the
    // same delivery later instead of having it refused as a replay.
    let taken = crate::take_quotas(
        &s,
        &[(
            format!("ws:{workspace}"),
            s.limits.cfg.runs_per_workspace_per_day,
        )],
    )
    .await?;
    if !store
        .record_delivery(&workspace, &worker, &verified.delivery_id, now)
        .await?
    {
        crate::give_back(&s, taken).await;
        let why = Refusal::Replayed(verified.delivery_id);
        return Err(refuse(&s, &workspace, &worker, why).await);
    }
    maybe_prune(&s, now).await;
    let input: serde_json::Value = match serde_json::from_slice(&raw) {
        Ok(v) => v,
        Err(_) => {
            crate::give_back(&s, taken).await;
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "input_invalid",
                "the body is not JSON",
            ));
        }
    };
    let created = match s
        .service
        .create_run(CreateRun {
            workspace: workspace.clone(),
            worker_id: worker.clone(),
            input,
            trigger: "webhook".into(),
            actor: format!("webhook:{worker}"),
            idempotency_key: None,
        })
        .await
    {
        Ok(c) => c,
        Err(e) => {
            crate::give_back(&s, taken).await;
            return Err(e.into());
        }
    };
    // The run exists; failing to link it would only make a retry look
    // like news, and retries are refused anyway.
    let _ = store
        .set_delivery_run(&workspace, &worker, &verified.delivery_id, &created.run.id)
        .await;
    let run = WebhookRun {
        id: created.run.id,
        worker_id: created.run.worker_id,
        state: created.run.state.as_str().into(),
        created_at: created.run.created_at,
    };
    Ok((StatusCode::ACCEPTED, Json(Accepted { run })).into_response())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn api_9_secret_names_are_valid_vault_names() {
        for worker in ["hello", "a", &"z".repeat(63), "x-y-z-1"] {
            for version in [1, 42, i64::MAX] {
                let n = secret_name(worker, version);
                assert!(n.len() <= 64, "{n}");
                assert!(airlock_vault::SecretName::parse(&n).is_ok(), "{n}");
                assert!(!airlock_worker::is_platform_secret(&n), "{n}");
            }
        }
        assert_eq!(secret_name("hello", 3), secret_name("hello", 3));
        assert_ne!(secret_name("hello", 3), secret_name("hello", 4));
        assert_ne!(secret_name("hello", 3), secret_name("hellp", 3));
        // sha256("hello") = 2cf24dba5fb0a30e…
        assert_eq!(secret_name("hello", 7), "WEBHOOK_2CF24DBA5FB0A30E_V7");
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
