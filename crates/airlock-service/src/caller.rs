//! Who is asking, without any transport: a front end turns its request
//! (headers, cookies, a stdio session, a terminal) into a [`Credential`],
//! [`crate::Service::authenticate`] turns that into a [`Principal`], and
//! [`crate::Service::caller`] into a [`Caller`]: a user (or the local
//! operator) acting in one workspace with a set of effective permissions.
//! Every service operation on owned data takes a `Caller`; none takes a
//! header, a status code or a store handle.

use std::collections::BTreeSet;

use airlock_iam::{Permission, Role};
use airlock_protocol::{Error, ErrorCode};

/// What a request presented to prove who it is.
#[derive(Clone)]
pub enum Credential {
    /// `alk_…` API key.
    ApiKey(String),
    /// A session token (from a cookie) with the CSRF token the request
    /// carried, if any. `changes_state` is true for anything but a read:
    /// such a request must carry the session's CSRF token.
    Session {
        token: String,
        csrf: Option<String>,
        changes_state: bool,
    },
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ApiKey(_) => f.write_str("Credential::ApiKey([REDACTED])"),
            Self::Session { changes_state, .. } => f
                .debug_struct("Credential::Session")
                .field("changes_state", changes_state)
                .finish_non_exhaustive(),
        }
    }
}

/// What a front end knows about the client, for throttling and the record.
#[derive(Clone, Default)]
pub struct ClientInfo {
    /// The client's address as the front end resolved it (trusted proxies
    /// are the front end's business).
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    /// A session token the client already holds: revoked when a new
    /// session is issued (no fixation).
    pub session_token: Option<String>,
}

impl std::fmt::Debug for ClientInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientInfo")
            .field("ip", &self.ip)
            .field("user_agent", &self.user_agent)
            .finish_non_exhaustive()
    }
}

impl ClientInfo {
    /// The throttle key of this client.
    pub(crate) fn throttle_key(&self) -> String {
        format!("ip:{}", self.ip.as_deref().unwrap_or("unknown"))
    }
}

/// How a principal proved who it is.
#[derive(Debug, Clone)]
pub enum Via {
    Session {
        id: String,
        /// The session still owes its second factor.
        mfa_pending: bool,
    },
    ApiKey {
        id: String,
        workspace: String,
        scopes: BTreeSet<Permission>,
    },
}

/// An authenticated user.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user: airlock_store::User,
    pub via: Via,
}

impl Principal {
    /// The session id when signed in with a session.
    pub fn session_id(&self) -> Option<&str> {
        match &self.via {
            Via::Session { id, .. } => Some(id),
            Via::ApiKey { .. } => None,
        }
    }

    /// The key or session id: what identity rate limits are keyed by.
    pub fn credential_id(&self) -> &str {
        match &self.via {
            Via::Session { id, .. } | Via::ApiKey { id, .. } => id,
        }
    }

    /// Refused unless signed in with a session (not a key).
    pub fn require_session(&self) -> Result<(), Error> {
        match self.via {
            Via::Session { .. } => Ok(()),
            Via::ApiKey { .. } => Err(Error::new(
                ErrorCode::SessionRequired,
                "this operation needs a signed-in session, not an API key",
            )),
        }
    }
}

/// Who acts: a signed-in user, or the local operator (the CLI on the
/// server's own database and key directory, who holds every file the
/// server holds and so every authority).
#[derive(Debug, Clone)]
pub enum Actor {
    User(Principal),
    Operator,
}

/// The actor id recorded for the local operator.
pub const OPERATOR: &str = "cli";

/// An actor acting in one workspace.
#[derive(Debug, Clone)]
pub struct Caller {
    pub actor: Actor,
    pub workspace: String,
    pub role: Role,
    /// Effective permissions: the role's, narrowed by an API key's scopes.
    pub perms: BTreeSet<Permission>,
}

impl Caller {
    /// The local operator in `workspace`, with every permission. Only the
    /// CLI, working on files it could read anyway, builds one.
    pub fn operator(workspace: &str) -> Self {
        Self {
            actor: Actor::Operator,
            workspace: workspace.to_string(),
            role: Role::Owner,
            perms: Role::Owner.permissions(),
        }
    }

    /// Refused (`forbidden`) unless the caller holds `p` here.
    pub fn require(&self, p: Permission) -> Result<(), Error> {
        if self.perms.contains(&p) {
            Ok(())
        } else {
            Err(Error::forbidden(format!(
                "this action needs the {} permission",
                p.as_str()
            )))
        }
    }

    /// The actor recorded on runs and audit events: a user id, or `cli`.
    pub fn actor_id(&self) -> &str {
        match &self.actor {
            Actor::User(p) => &p.user.id,
            Actor::Operator => OPERATOR,
        }
    }

    pub fn principal(&self) -> Option<&Principal> {
        match &self.actor {
            Actor::User(p) => Some(p),
            Actor::Operator => None,
        }
    }

    pub fn audit_actor(&self) -> airlock_audit::chain::Actor {
        match &self.actor {
            Actor::User(p) => airlock_audit::chain::Actor::Human(p.user.id.clone()),
            Actor::Operator => airlock_audit::chain::Actor::Service(OPERATOR.into()),
        }
    }

    /// Refused unless a signed-in session makes the request.
    pub fn require_session(&self) -> Result<(), Error> {
        match &self.actor {
            Actor::User(p) => p.require_session(),
            Actor::Operator => Err(Error::new(
                ErrorCode::SessionRequired,
                "this operation needs a signed-in session",
            )),
        }
    }
}

/// What a front end may offer a caller, by name: which of these a caller
/// may do is decided here, once, so a front end that shows only what its
/// user may use (MCP's tool list, the web UI's buttons) holds no rule.
/// The operation itself checks again when it is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    ReadWorkers,
    StartRuns,
    ReadRuns,
    CancelRuns,
    DecideApprovals,
    ListSecrets,
    ReadAudit,
    WriteSecrets,
    ManageMembers,
    ManageOwnKeys,
    ExportAudit,
    StopEmergency,
    ResumeEmergency,
    ReloadWorkers,
    ManageWorkspace,
    DeleteWorkspace,
}

impl Operation {
    fn permission(self) -> Permission {
        match self {
            Self::ReadWorkers => Permission::WorkersRead,
            Self::StartRuns => Permission::RunsCreate,
            Self::ReadRuns => Permission::RunsRead,
            Self::CancelRuns => Permission::RunsCancel,
            Self::DecideApprovals => Permission::ApprovalsDecide,
            Self::ListSecrets => Permission::SecretsList,
            Self::ReadAudit => Permission::AuditRead,
            Self::WriteSecrets => Permission::SecretsWrite,
            Self::ManageMembers => Permission::MembersManage,
            Self::ManageOwnKeys => Permission::KeysOwn,
            Self::ExportAudit => Permission::AuditExport,
            Self::StopEmergency => Permission::EmergencyStop,
            Self::ResumeEmergency => Permission::EmergencyResume,
            Self::ReloadWorkers => Permission::WorkersWrite,
            Self::ManageWorkspace => Permission::WorkspaceManage,
            Self::DeleteWorkspace => Permission::WorkspaceDelete,
        }
    }
}

impl Caller {
    /// Whether the caller may do `op` here (its permission, narrowed by
    /// a key's scopes).
    pub fn may(&self, op: Operation) -> bool {
        self.perms.contains(&op.permission())
    }
}
