//! The one error vocabulary. Every refusal any front end shows carries one
//! of these codes; the table is the documentation (README renders it, a
//! test checks every code the code base emits is in it).

use std::time::Duration;

use serde::{Deserialize, Serialize};

macro_rules! error_codes {
    ($($variant:ident = $code:literal : $doc:literal,)+) => {
        /// Why an operation was refused. Stable: clients match on these.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum ErrorCode {
            $(#[doc = $doc] $variant,)+
        }

        impl ErrorCode {
            /// Every code, in table order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant,)+];

            /// The code as it appears on the wire.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)+ }
            }

            /// One line saying what the code means.
            pub fn description(self) -> &'static str {
                match self { $(ErrorCode::$variant => $doc,)+ }
            }

            pub fn parse(s: &str) -> Option<Self> {
                match s { $($code => Some(ErrorCode::$variant),)+ _ => None }
            }
        }
    };
}

error_codes! {
    // Who is asking.
    Unauthenticated = "unauthenticated": "no valid credential: sign in or present an API key",
    MfaRequired = "mfa_required": "the session still owes its second factor",
    SessionRequired = "session_required": "this operation needs a signed-in session, not an API key",
    CsrfFailed = "csrf_failed": "a cookie-authenticated change without the session's X-CSRF-Token",
    Forbidden = "forbidden": "the caller lacks the permission this operation needs",
    NoWorkspace = "no_workspace": "the user is not a member of any workspace",
    // What was asked for.
    NotFound = "not_found": "no such object in this workspace (another workspace's object looks the same)",
    NoRoute = "no_route": "no such route",
    MethodNotAllowed = "method_not_allowed": "the route does not take that method",
    InvalidRequest = "invalid_request": "the request could not be understood",
    InvalidBody = "invalid_body": "the body is not valid JSON of the expected shape, or a field breaks its rule",
    InvalidQuery = "invalid_query": "a query parameter is missing, unknown or out of range",
    BodyTooLarge = "body_too_large": "the body is larger than this operation accepts",
    UnsupportedMediaType = "unsupported_media_type": "the body's Content-Type is not the one this operation takes",
    Conflict = "conflict": "the object changed or was created concurrently; retry",
    // Limits.
    RateLimited = "rate_limited": "too many requests; retry after the time given",
    QuotaExceeded = "quota_exceeded": "a durable daily quota is used up; retry after the time given",
    TooManyStreams = "too_many_streams": "too many open event streams for this user",
    // Identity.
    LoginFailed = "login_failed": "wrong username, password or code (never says which)",
    MfaNotPending = "mfa_not_pending": "no second-factor step or enrolment is outstanding",
    MfaEnabled = "mfa_enabled": "TOTP is already enabled; an operator reset is needed to change it",
    InvalidCode = "invalid_code": "the TOTP code is not valid now",
    ReauthenticationFailed = "reauthentication_failed": "the password given to confirm a sensitive change is wrong",
    BootstrapRefused = "bootstrap_refused": "bootstrap is closed or the capability is wrong",
    ResetRefused = "reset_refused": "the reset or set-password token is unknown, used or expired",
    LastOwner = "last_owner": "a workspace keeps at least one owner",
    WorkspaceBusy = "workspace_busy": "the workspace has runs that have not ended; cancel them (or stop the workspace) and delete it then",
    NoSuchUser = "no_such_user": "no such account; accounts are created by the instance's administrators",
    // Workers and runs.
    UnknownWorker = "unknown_worker": "no such worker in this workspace",
    InputInvalid = "input_invalid": "the input does not match the worker's declared inputs",
    IdempotencyConflict = "idempotency_conflict": "the idempotency key was used with a different request",
    InvalidIdempotencyKey = "invalid_idempotency_key": "the idempotency key must be 1 to 255 printable ASCII characters",
    PlanRefused = "plan_refused": "the plan token is unknown, used, expired, or the worker changed since planning",
    NoWebhookTrigger = "no_webhook_trigger": "the worker declares no webhook trigger",
    RunNotUnknown = "run_not_unknown": "only a run whose outcome is unknown can be retried or resolved",
    TriggerNotDeclared = "trigger_not_declared": "the worker does not declare a trigger for runs from this source (e.g. no manual trigger)",
    // Approvals, agent actions and the emergency stop.
    ApprovalNotPending = "approval_not_pending": "the approval was already decided, used, expired or cancelled (a replay is refused)",
    ApprovalExpired = "approval_expired": "the approval expired before it was decided or used",
    ApprovalHashMismatch = "approval_hash_mismatch": "the payload hash given is not the request's (it is not what was reviewed)",
    SelfApproval = "self_approval": "the member who started the run cannot approve its requests unless the workspace allows self-approval",
    RuleRefused = "rule_refused": "the standing rule is too broad (empty, an interpreter, a -c/-e form) or does not fit the request",
    ModelProfileInvalid = "model_profile_invalid": "the model profile breaks a rule of its wire format (unknown format, both or neither of channel and base_url, a refused base URL, a price out of range, …)",
    EmergencyStopped = "emergency_stopped": "the workspace is under an emergency stop; nothing starts or runs until it is resumed",
    // Secrets.
    SecretInvalid = "secret_invalid": "the secret's name or value breaks its rule",
    SecretForbidden = "secret_forbidden": "a platform secret name: it can never be stored, declared or delivered",
    SecretMissing = "secret_missing": "no such secret",
    SecretRollback = "secret_rollback": "the stored secret is older than the vault's high-water mark (a restored or rolled-back row)",
    InvalidSecret = "invalid_secret": "an imported webhook signing secret has the wrong shape",
    // Uploads.
    InvalidName = "invalid_name": "the file name was refused (traversal, absolute path, control characters, …)",
    MediaTypeRequired = "media_type_required": "the upload has no Content-Type",
    MediaTypeMismatch = "media_type_mismatch": "the declared Content-Type contradicts the content",
    BadArchive = "bad_archive": "a ZIP upload failed its checks (symlink, escape, duplicate, bomb, encryption)",
    LinkInvalid = "link_invalid": "the download link is not valid for this caller",
    LinkExpired = "link_expired": "the download link has expired",
    // The server.
    NotReady = "not_ready": "the database is unreachable or its schema is not current",
    BlobStoreUnavailable = "blob_store_unavailable": "the blob store (the S3 bucket) could not be reached or refused the request; nothing was recorded, retry later",
    Internal = "internal": "an internal error; details are in the server's log, never in the answer",
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused operation: a code, a message for people, and for limits how
/// long to wait. The message never carries internal detail to a remote
/// caller (front ends replace it for [`ErrorCode::Internal`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
    pub retry_after: Option<Duration>,
}

impl Error {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A limit: the caller may retry after `wait`.
    pub fn limited(code: ErrorCode, message: impl Into<String>, wait: Duration) -> Self {
        Self {
            retry_after: Some(wait),
            ..Self::new(code, message)
        }
    }

    /// What a front end may show the caller: the message, unless the code
    /// is a server failure whose message is for the local log only
    /// (`internal`, `secret_rollback`, `not_ready`); the blob store's
    /// refusal names the store and nothing of its client, so it is shown.
    pub fn public_message(&self) -> &str {
        match self.code {
            ErrorCode::Internal | ErrorCode::SecretRollback | ErrorCode::NotReady => {
                "internal error"
            }
            _ => &self.message,
        }
    }

    /// An internal failure; `detail` is for the local log only.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::Internal, detail.to_string())
    }

    pub fn not_found() -> Self {
        Self::new(ErrorCode::NotFound, "no such resource")
    }

    pub fn invalid_body(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidBody, message)
    }

    pub fn invalid_query(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidQuery, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Forbidden, message)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

/// The one error shape on the wire: `{"error": {"code", "message", "request_id"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
    /// Also in the `X-Request-Id` header and the server's access log.
    pub request_id: String,
}

impl From<ErrorBody> for Error {
    fn from(b: ErrorBody) -> Self {
        Error::new(b.error.code, b.error.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_wire_names() {
        for c in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(c.as_str()), Some(*c));
            let json = serde_json::to_string(c).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert!(!c.description().is_empty());
        }
    }
}

#[cfg(test)]
mod public_message_tests {
    use super::*;

    /// A server failure's detail never reaches a caller through a front
    /// end; a client error's message does (the control).
    #[test]
    fn a_server_failures_detail_is_not_public() {
        for code in [
            ErrorCode::Internal,
            ErrorCode::SecretRollback,
            ErrorCode::NotReady,
        ] {
            let e = Error::new(code, "db at /var/lib/secret.db: disk I/O error");
            assert_eq!(e.public_message(), "internal error", "{code:?}");
        }
        let e = Error::internal("sqlx: pool timed out");
        assert!(!e.public_message().contains("sqlx"));
        let e = Error::invalid_body("name is required");
        assert_eq!(e.public_message(), "name is required");
        let e = Error::new(
            ErrorCode::BlobStoreUnavailable,
            "the blob store s3://b is unreachable",
        );
        assert_eq!(e.public_message(), "the blob store s3://b is unreachable");
    }
}
