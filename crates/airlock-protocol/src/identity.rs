//! Identity and access (IAM-1 … IAM-7): bootstrap, sessions, second
//! factor, password reset, API keys, workspaces, members and roles.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An account. Its password hash never leaves the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct User {
    pub id: String,
    pub username: String,
    pub created_at: i64,
    pub disabled: bool,
}

/// A user's role in one workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Membership {
    pub workspace_id: String,
    pub workspace_name: String,
    pub user_id: String,
    pub username: String,
    pub role: String,
    pub created_at: i64,
}

/// A browser session; its token is only ever in the cookie.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Session {
    pub id: String,
    pub user_id: String,
    /// The session still owes its second factor and can do nothing else.
    pub mfa_pending: bool,
    pub user_agent: Option<String>,
    pub client_ip: Option<String>,
    pub created_at: i64,
    pub last_seen_at: i64,
    pub expires_at: i64,
    /// Whether this is the session making the request.
    #[serde(default)]
    pub current: bool,
}

/// An API key's record; the key itself is shown once, at creation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApiKey {
    pub id: String,
    pub workspace_id: String,
    pub user_id: String,
    pub name: String,
    /// The first characters of the key, to recognise it.
    pub prefix: String,
    pub scopes: Vec<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
}

/// Body of `POST /v1/bootstrap` (IAM-1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Bootstrap {
    /// The one-time capability from the key directory's `bootstrap.token`.
    #[schema(min_length = 1, max_length = 256)]
    pub token: String,
    #[schema(
        min_length = 1,
        max_length = 64,
        pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
    )]
    pub username: String,
    #[schema(min_length = 12, max_length = 1024)]
    pub password: String,
    /// The first workspace's name (default `default`).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 100)]
    pub workspace_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Bootstrapped {
    pub user: User,
    pub workspace_id: String,
}

/// Body of `POST /v1/session`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Login {
    #[schema(max_length = 256)]
    pub username: String,
    #[schema(max_length = 1024)]
    pub password: String,
}

/// A new session. The token is in the `Set-Cookie` header only; the CSRF
/// token must accompany every state-changing request (`X-CSRF-Token`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionIssued {
    pub session: Session,
    pub csrf_token: String,
    /// The session can only complete `POST /v1/session/mfa` until then.
    pub mfa_required: bool,
}

/// Body of `POST /v1/session/mfa`: exactly one of the two.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecondFactor {
    /// A six-digit TOTP code.
    #[serde(default)]
    #[schema(max_length = 16)]
    pub code: Option<String>,
    /// One of the ten recovery codes.
    #[serde(default)]
    #[schema(max_length = 64)]
    pub recovery_code: Option<String>,
}

/// How the caller authenticated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Via {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

/// `GET /v1/session`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WhoAmI {
    pub user: User,
    pub mfa_enabled: bool,
    pub via: Via,
    pub workspaces: Vec<Membership>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionList {
    pub sessions: Vec<Session>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Revoked {
    pub revoked: u64,
}

/// Body of `POST /v1/mfa/totp`: the current password again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Reauthenticate {
    #[schema(max_length = 1024)]
    pub password: String,
}

/// A new TOTP secret, shown once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TotpEnrolment {
    /// Base32.
    pub secret: String,
    pub otpauth_uri: String,
}

/// Body of `POST /v1/mfa/totp/confirm`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TotpCode {
    #[schema(max_length = 16)]
    pub code: String,
}

/// Ten one-use recovery codes, shown once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RecoveryCodes {
    pub recovery_codes: Vec<String>,
}

/// Body of `POST /v1/password/reset`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordReset {
    #[schema(min_length = 1, max_length = 256)]
    pub token: String,
    #[schema(min_length = 12, max_length = 1024)]
    pub new_password: String,
}

/// Body of `POST /v1/keys`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    #[schema(min_length = 1, max_length = 64)]
    pub name: String,
    /// Permissions (at most the creator's); default: all of the creator's
    /// but `approvals.decide`, which a key holds only when named here.
    #[serde(default)]
    #[schema(value_type = Option<Vec<PermissionName>>)]
    pub scopes: Option<Vec<String>>,
    /// Lifetime in seconds (default 90 days, at most 366 days).
    #[serde(default, deserialize_with = "crate::whole::option_u64")]
    #[schema(minimum = 1, maximum = 31622400)]
    pub expires_in_s: Option<u64>,
}

/// A new key, shown once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KeyCreated {
    pub key: String,
    pub api_key: ApiKey,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KeyList {
    pub api_keys: Vec<ApiKey>,
}

/// Body of `POST /v1/workspaces`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWorkspace {
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceCreated {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceList {
    pub workspaces: Vec<Membership>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MemberList {
    pub members: Vec<Membership>,
}

/// The role names of IAM-7, for the document (the server parses them
/// with the role table itself; a test keeps the two equal).
pub const ROLE_NAMES: [&str; 6] = [
    "owner",
    "admin",
    "assistant_manager",
    "human_assistant",
    "developer",
    "viewer",
];

/// The permission names of IAM-7, for the document (kept equal to the
/// role table by a test).
pub const PERMISSION_NAMES: [&str; 18] = [
    "workspace.manage",
    "workspace.delete",
    "members.manage",
    "workers.read",
    "workers.write",
    "agents.manage",
    "runs.create",
    "runs.cancel",
    "runs.read",
    "approvals.decide",
    "policy.manage",
    "secrets.write",
    "secrets.list",
    "audit.read",
    "audit.export",
    "emergency.stop",
    "emergency.resume",
    "keys.own",
];

/// A role name (schema only: the wire carries a string).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[allow(dead_code)]
pub enum RoleName {
    #[serde(rename = "owner")]
    Owner,
    #[serde(rename = "admin")]
    Admin,
    #[serde(rename = "assistant_manager")]
    AssistantManager,
    #[serde(rename = "human_assistant")]
    HumanAssistant,
    #[serde(rename = "developer")]
    Developer,
    #[serde(rename = "viewer")]
    Viewer,
}

/// A permission name (schema only: the wire carries a string).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[allow(dead_code)]
pub enum PermissionName {
    #[serde(rename = "workspace.manage")]
    WorkspaceManage,
    #[serde(rename = "workspace.delete")]
    WorkspaceDelete,
    #[serde(rename = "members.manage")]
    MembersManage,
    #[serde(rename = "workers.read")]
    WorkersRead,
    #[serde(rename = "workers.write")]
    WorkersWrite,
    #[serde(rename = "agents.manage")]
    AgentsManage,
    #[serde(rename = "runs.create")]
    RunsCreate,
    #[serde(rename = "runs.cancel")]
    RunsCancel,
    #[serde(rename = "runs.read")]
    RunsRead,
    #[serde(rename = "approvals.decide")]
    ApprovalsDecide,
    #[serde(rename = "policy.manage")]
    PolicyManage,
    #[serde(rename = "secrets.write")]
    SecretsWrite,
    #[serde(rename = "secrets.list")]
    SecretsList,
    #[serde(rename = "audit.read")]
    AuditRead,
    #[serde(rename = "audit.export")]
    AuditExport,
    #[serde(rename = "emergency.stop")]
    EmergencyStop,
    #[serde(rename = "emergency.resume")]
    EmergencyResume,
    #[serde(rename = "keys.own")]
    KeysOwn,
}

/// Body of `PUT /v1/members/{username}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PutMember {
    #[schema(value_type = RoleName)]
    pub role: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Member {
    pub user_id: String,
    pub username: String,
    pub role: String,
}

/// A member added (201) or changed (200). A new account comes with a
/// single-use set-password token, shown once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MemberChanged {
    pub member: Member,
    pub setup_token: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RoleInfo {
    pub role: String,
    pub permissions: Vec<String>,
}

/// `GET /v1/roles`: the table the server enforces.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RoleList {
    pub roles: Vec<RoleInfo>,
    /// The caller's role in this workspace.
    pub yours: String,
}
