//! Identity records (IAM-1 … IAM-7): users, workspace memberships, the
//! one-time bootstrap, sessions, API keys, the second factor and operator
//! resets.
//!
//! Only hashes of secrets are stored (passwords, session and CSRF tokens,
//! API keys, recovery codes, reset tokens); the TOTP secret lives in the
//! vault. Every time is passed in by the caller (`now`, Unix milliseconds)
//! so that policy — expiry, idle timeouts — stays with the caller and tests
//! control the clock. Workspace-owned rows (memberships, API keys) are only
//! ever read or changed together with their workspace id.

use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::ids::random_id;
use crate::store::{AuditRecord, Result, Store, StoreError};

/// A user account. The password hash never leaves the server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct User {
    pub id: String,
    pub username: String,
    #[serde(skip)]
    pub password_hash: Option<String>,
    pub created_at: i64,
    pub disabled: bool,
}

/// A user's role in one workspace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Membership {
    pub workspace_id: String,
    pub workspace_name: String,
    pub user_id: String,
    pub username: String,
    pub role: String,
    pub created_at: i64,
}

/// A browser session (IAM-3); the token itself is never stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionRecord {
    pub id: String,
    pub user_id: String,
    #[serde(skip)]
    pub csrf_hash: String,
    pub mfa_pending: bool,
    pub user_agent: Option<String>,
    pub client_ip: Option<String>,
    pub created_at: i64,
    pub last_seen_at: i64,
    pub expires_at: i64,
}

/// An API key (IAM-5); the token itself is never stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApiKeyRecord {
    pub id: String,
    pub workspace_id: String,
    pub user_id: String,
    pub name: String,
    pub prefix: String,
    pub scopes: Vec<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
}

/// The state of a user's second factor (IAM-4).
#[derive(Debug, Clone, PartialEq)]
pub struct MfaRecord {
    pub confirmed_at: Option<i64>,
    pub last_step: Option<i64>,
}

/// Whether the first owner may still be created (IAM-1).
#[derive(Debug, Clone, PartialEq)]
pub enum BootstrapState {
    Open,
    Closed,
}

const USER_COLUMNS: &str = "id, username, password_hash, created_at, disabled_at";

fn user_from_row(r: &AnyRow) -> Result<User> {
    Ok(User {
        id: r.try_get("id")?,
        username: r.try_get("username")?,
        password_hash: r.try_get("password_hash")?,
        created_at: r.try_get("created_at")?,
        disabled: r.try_get::<Option<i64>, _>("disabled_at")?.is_some(),
    })
}

const MEMBERSHIP_SELECT: &str = "SELECT m.workspace_id, w.name AS workspace_name, m.user_id, u.username, m.role, m.created_at \
     FROM memberships m JOIN workspaces w ON w.id = m.workspace_id JOIN users u ON u.id = m.user_id";

fn membership_from_row(r: &AnyRow) -> Result<Membership> {
    Ok(Membership {
        workspace_id: r.try_get("workspace_id")?,
        workspace_name: r.try_get("workspace_name")?,
        user_id: r.try_get("user_id")?,
        username: r.try_get("username")?,
        role: r.try_get("role")?,
        created_at: r.try_get("created_at")?,
    })
}

const SESSION_COLUMNS: &str = "id, user_id, csrf_hash, mfa_pending, user_agent, client_ip, created_at, last_seen_at, expires_at";

fn session_from_row(r: &AnyRow) -> Result<SessionRecord> {
    Ok(SessionRecord {
        id: r.try_get("id")?,
        user_id: r.try_get("user_id")?,
        csrf_hash: r.try_get("csrf_hash")?,
        mfa_pending: r.try_get::<i64, _>("mfa_pending")? != 0,
        user_agent: r.try_get("user_agent")?,
        client_ip: r.try_get("client_ip")?,
        created_at: r.try_get("created_at")?,
        last_seen_at: r.try_get("last_seen_at")?,
        expires_at: r.try_get("expires_at")?,
    })
}

const API_KEY_COLUMNS: &str = "id, workspace_id, user_id, name, prefix, scopes, created_at, expires_at, revoked_at, last_used_at";

fn api_key_from_row(r: &AnyRow) -> Result<ApiKeyRecord> {
    let scopes: String = r.try_get("scopes")?;
    Ok(ApiKeyRecord {
        id: r.try_get("id")?,
        workspace_id: r.try_get("workspace_id")?,
        user_id: r.try_get("user_id")?,
        name: r.try_get("name")?,
        prefix: r.try_get("prefix")?,
        scopes: serde_json::from_str(&scopes)
            .map_err(|e| StoreError::Db(format!("api key scopes: {e}")))?,
        created_at: r.try_get("created_at")?,
        expires_at: r.try_get("expires_at")?,
        revoked_at: r.try_get("revoked_at")?,
        last_used_at: r.try_get("last_used_at")?,
    })
}

impl Store {
    // ------------------------------------------------------------ bootstrap (IAM-1)

    /// Closed if a bootstrap was ever used or any workspace has an owner;
    /// otherwise stores `token_hash` (replacing an earlier unused one) and
    /// returns Open.
    pub async fn bootstrap_begin(&self, token_hash: &str, now: i64) -> Result<BootstrapState> {
        let mut tx = self.pool.begin().await?;
        // Write first (SQLite takes its write lock here, so the read below
        // cannot fail on a lock upgrade). A used bootstrap is never replaced.
        let n = sqlx::query(
            "INSERT INTO bootstrap (id, token_hash, created_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO UPDATE SET token_hash = excluded.token_hash, created_at = excluded.created_at \
             WHERE bootstrap.used_at IS NULL",
        )
        .bind(token_hash)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let owners: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM memberships WHERE role = 'owner'")
                .fetch_one(&mut *tx)
                .await?;
        if n == 0 || owners > 0 {
            tx.rollback().await?;
            return Ok(BootstrapState::Closed);
        }
        tx.commit().await?;
        Ok(BootstrapState::Open)
    }

    /// Open while no bootstrap was used and no workspace has an owner.
    pub async fn bootstrap_state(&self) -> Result<BootstrapState> {
        let used: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM bootstrap WHERE used_at IS NOT NULL")
                .fetch_one(&self.pool)
                .await?;
        let owners: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM memberships WHERE role = 'owner'")
                .fetch_one(&self.pool)
                .await?;
        Ok(if used > 0 || owners > 0 {
            BootstrapState::Closed
        } else {
            BootstrapState::Open
        })
    }

    /// Creates the first owner exactly once: marks the bootstrap used, creates
    /// the user, names (or creates) the workspace, makes the user its owner and
    /// audits `bootstrap.completed` — in one transaction. A wrong, used or
    /// raced token, or a taken username, returns `None` and changes nothing.
    pub async fn bootstrap_claim(
        &self,
        token_hash: &str,
        username: &str,
        password_hash: &str,
        workspace_id: &str,
        workspace_name: &str,
        now: i64,
    ) -> Result<Option<User>> {
        let id = random_id("usr");
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE bootstrap SET used_at = $1, owner_id = $2 WHERE id = 1 AND used_at IS NULL AND token_hash = $3",
        )
        .bind(now)
        .bind(&id)
        .bind(token_hash)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        let owners: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM memberships WHERE role = 'owner'")
                .fetch_one(&mut *tx)
                .await?;
        let inserted = if owners == 0 {
            sqlx::query(
                "INSERT INTO users (id, username, password_hash, created_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (username) DO NOTHING",
            )
            .bind(&id)
            .bind(username)
            .bind(password_hash)
            .bind(now)
            .execute(&mut *tx)
            .await?
            .rows_affected()
        } else {
            0
        };
        if inserted != 1 {
            tx.rollback().await?;
            return Ok(None);
        }
        sqlx::query(
            "INSERT INTO workspaces (id, name, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO UPDATE SET name = excluded.name",
        )
        .bind(workspace_id)
        .bind(workspace_name)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO memberships (workspace_id, user_id, role, created_at) VALUES ($1, $2, 'owner', $3)",
        )
        .bind(workspace_id)
        .bind(&id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        self.audit_in(
            &mut tx,
            workspace_id,
            AuditRecord::system("bootstrap.completed", None)
                .with_actor(airlock_audit::chain::Actor::Human(id.clone()))
                .with_metadata(serde_json::json!({"user": id, "username": username, "workspace_name": workspace_name})),
        )
        .await?;
        tx.commit().await?;
        Ok(Some(User {
            id,
            username: username.to_string(),
            password_hash: Some(password_hash.to_string()),
            created_at: now,
            disabled: false,
        }))
    }

    // ------------------------------------------------------------ users

    /// A new user; a taken username is [`StoreError::Conflict`].
    pub async fn create_user(
        &self,
        username: &str,
        password_hash: Option<&str>,
        now: i64,
    ) -> Result<User> {
        let id = random_id("usr");
        let n = sqlx::query(
            "INSERT INTO users (id, username, password_hash, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (username) DO NOTHING",
        )
        .bind(&id)
        .bind(username)
        .bind(password_hash)
        .bind(now)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if n == 0 {
            return Err(StoreError::Conflict);
        }
        Ok(User {
            id,
            username: username.to_string(),
            password_hash: password_hash.map(str::to_string),
            created_at: now,
            disabled: false,
        })
    }

    pub async fn user_by_name(&self, username: &str) -> Result<Option<User>> {
        let row = sqlx::query(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE username = $1"
        ))
        .bind(username)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<User>> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(user_from_row).transpose()
    }

    /// Replaces a user's password hash; [`StoreError::NotFound`] for an
    /// unknown user.
    pub async fn set_password(&self, user_id: &str, password_hash: &str) -> Result<()> {
        let n = sqlx::query("UPDATE users SET password_hash = $1 WHERE id = $2")
            .bind(password_hash)
            .bind(user_id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if n == 0 {
            return Err(StoreError::NotFound);
        }
        Ok(())
    }

    pub async fn count_users(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM users")
            .fetch_one(&self.pool)
            .await?)
    }

    // ------------------------------------------------------------ workspaces and members (IAM-6, IAM-7)

    /// A new workspace with `owner_id` as its owner, audited
    /// `workspace.created` in the new workspace. Returns its id.
    pub async fn create_workspace(&self, name: &str, owner_id: &str, now: i64) -> Result<String> {
        let id = random_id("ws");
        let mut tx = self.pool.begin().await?;
        sqlx::query("INSERT INTO workspaces (id, name, created_at) VALUES ($1, $2, $3)")
            .bind(&id)
            .bind(name)
            .bind(now)
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO memberships (workspace_id, user_id, role, created_at) VALUES ($1, $2, 'owner', $3)",
        )
        .bind(&id)
        .bind(owner_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let mut rec = AuditRecord::system("workspace.created", None)
            .with_actor(airlock_audit::chain::Actor::Human(owner_id.to_string()))
            .with_metadata(serde_json::json!({"name": name}));
        rec.target = Some(id.clone());
        self.audit_in(&mut tx, &id, rec).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Every workspace a user belongs to, oldest membership first.
    pub async fn memberships_of(&self, user_id: &str) -> Result<Vec<Membership>> {
        let rows = sqlx::query(&format!(
            "{MEMBERSHIP_SELECT} WHERE m.user_id = $1 ORDER BY m.created_at, m.workspace_id"
        ))
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(membership_from_row).collect()
    }

    pub async fn membership(&self, workspace: &str, user_id: &str) -> Result<Option<Membership>> {
        let row = sqlx::query(&format!(
            "{MEMBERSHIP_SELECT} WHERE m.workspace_id = $1 AND m.user_id = $2"
        ))
        .bind(workspace)
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(membership_from_row).transpose()
    }

    /// The members of one workspace, by username.
    pub async fn list_members(&self, workspace: &str) -> Result<Vec<Membership>> {
        let rows = sqlx::query(&format!(
            "{MEMBERSHIP_SELECT} WHERE m.workspace_id = $1 ORDER BY u.username, m.user_id"
        ))
        .bind(workspace)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(membership_from_row).collect()
    }

    /// Adds a member or changes their role; `audit` commits with it, in
    /// `workspace`.
    pub async fn set_member(
        &self,
        workspace: &str,
        user_id: &str,
        role: &str,
        now: i64,
        audit: AuditRecord,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        lock_workspace(&mut tx, workspace).await?;
        sqlx::query(
            "INSERT INTO memberships (workspace_id, user_id, role, created_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (workspace_id, user_id) DO UPDATE SET role = excluded.role",
        )
        .bind(workspace)
        .bind(user_id)
        .bind(role)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        keeps_an_owner(&mut tx, workspace).await?;
        self.audit_in(&mut tx, workspace, audit).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Removes a membership and revokes the user's API keys in this
    /// workspace, with `audit`, in one transaction. False if there was no
    /// such membership (nothing changes).
    pub async fn remove_member(
        &self,
        workspace: &str,
        user_id: &str,
        now: i64,
        audit: AuditRecord,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        lock_workspace(&mut tx, workspace).await?;
        let n = sqlx::query("DELETE FROM memberships WHERE workspace_id = $1 AND user_id = $2")
            .bind(workspace)
            .bind(user_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        keeps_an_owner(&mut tx, workspace).await?;
        sqlx::query(
            "UPDATE api_keys SET revoked_at = $1 WHERE workspace_id = $2 AND user_id = $3 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(workspace)
        .bind(user_id)
        .execute(&mut *tx)
        .await?;
        self.audit_in(&mut tx, workspace, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Revokes every live API key of a user, in every workspace (after a
    /// password reset). Returns how many.
    pub async fn revoke_api_keys_of(&self, user_id: &str, now: i64) -> Result<u64> {
        Ok(sqlx::query(
            "UPDATE api_keys SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(user_id)
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    /// How many members of `workspace` hold `role`.
    pub async fn count_role(&self, workspace: &str, role: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM memberships WHERE workspace_id = $1 AND role = $2",
        )
        .bind(workspace)
        .bind(role)
        .fetch_one(&self.pool)
        .await?)
    }

    // ------------------------------------------------------------ sessions (IAM-3)

    #[allow(clippy::too_many_arguments)]
    pub async fn create_session(
        &self,
        user_id: &str,
        token_hash: &str,
        csrf_hash: &str,
        mfa_pending: bool,
        user_agent: Option<&str>,
        client_ip: Option<&str>,
        now: i64,
        expires_at: i64,
    ) -> Result<SessionRecord> {
        let id = random_id("ses");
        sqlx::query(
            "INSERT INTO sessions (id, token_hash, user_id, csrf_hash, mfa_pending, user_agent, client_ip, created_at, last_seen_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9)",
        )
        .bind(&id)
        .bind(token_hash)
        .bind(user_id)
        .bind(csrf_hash)
        .bind(i64::from(mfa_pending))
        .bind(user_agent)
        .bind(client_ip)
        .bind(now)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(SessionRecord {
            id,
            user_id: user_id.to_string(),
            csrf_hash: csrf_hash.to_string(),
            mfa_pending,
            user_agent: user_agent.map(str::to_string),
            client_ip: client_ip.map(str::to_string),
            created_at: now,
            last_seen_at: now,
            expires_at,
        })
    }

    /// A session that is not revoked; expiry is the caller's to check.
    pub async fn session_by_token_hash(&self, token_hash: &str) -> Result<Option<SessionRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE token_hash = $1 AND revoked_at IS NULL"
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    pub async fn touch_session(&self, id: &str, now: i64) -> Result<()> {
        sqlx::query("UPDATE sessions SET last_seen_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(now)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Revokes one of the user's own sessions; false if there is no such
    /// live session of this user.
    pub async fn revoke_session(&self, user_id: &str, session_id: &str, now: i64) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE sessions SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(session_id)
        .bind(user_id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    /// Revokes all of a user's sessions except `except`; returns how many.
    pub async fn revoke_sessions_of(
        &self,
        user_id: &str,
        except: Option<&str>,
        now: i64,
    ) -> Result<u64> {
        Ok(sqlx::query(
            "UPDATE sessions SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL AND ($3 = '' OR id <> $3)",
        )
        .bind(now)
        .bind(user_id)
        .bind(except.unwrap_or(""))
        .execute(&self.pool)
        .await?
        .rows_affected())
    }

    /// Live (not revoked, not expired) sessions of a user, most recently
    /// seen first.
    pub async fn list_sessions(&self, user_id: &str, now: i64) -> Result<Vec<SessionRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > $2 \
             ORDER BY last_seen_at DESC, id"
        ))
        .bind(user_id)
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(session_from_row).collect()
    }

    // ------------------------------------------------------------ API keys (IAM-5)

    /// Stores a new key with `audit` (its target defaults to the new key's
    /// id) in one transaction.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_api_key(
        &self,
        workspace: &str,
        user_id: &str,
        name: &str,
        prefix: &str,
        token_hash: &str,
        scopes: &[String],
        expires_at: Option<i64>,
        now: i64,
        audit: AuditRecord,
    ) -> Result<ApiKeyRecord> {
        let id = random_id("key");
        let scopes_json =
            serde_json::to_string(scopes).map_err(|e| StoreError::Db(e.to_string()))?;
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO api_keys (id, workspace_id, user_id, name, prefix, token_hash, scopes, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(&id)
        .bind(workspace)
        .bind(user_id)
        .bind(name)
        .bind(prefix)
        .bind(token_hash)
        .bind(&scopes_json)
        .bind(now)
        .bind(expires_at)
        .execute(&mut *tx)
        .await?;
        let mut audit = audit;
        if audit.target.is_none() {
            audit.target = Some(id.clone());
        }
        self.audit_in(&mut tx, workspace, audit).await?;
        tx.commit().await?;
        Ok(ApiKeyRecord {
            id,
            workspace_id: workspace.to_string(),
            user_id: user_id.to_string(),
            name: name.to_string(),
            prefix: prefix.to_string(),
            scopes: scopes.to_vec(),
            created_at: now,
            expires_at,
            revoked_at: None,
            last_used_at: None,
        })
    }

    /// A key in any state: the caller checks revocation and expiry so it
    /// can audit why a key was refused.
    pub async fn api_key_by_hash(&self, token_hash: &str) -> Result<Option<ApiKeyRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {API_KEY_COLUMNS} FROM api_keys WHERE token_hash = $1"
        ))
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(api_key_from_row).transpose()
    }

    /// A user's keys in one workspace, oldest first.
    pub async fn list_api_keys(&self, workspace: &str, user_id: &str) -> Result<Vec<ApiKeyRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {API_KEY_COLUMNS} FROM api_keys WHERE workspace_id = $1 AND user_id = $2 ORDER BY created_at, id"
        ))
        .bind(workspace)
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(api_key_from_row).collect()
    }

    /// Revokes a user's key in a workspace, with `audit`, in one
    /// transaction. False if the workspace and user have no such key; an
    /// already revoked key is left as it is (true, not audited again).
    pub async fn revoke_api_key(
        &self,
        workspace: &str,
        user_id: &str,
        key_id: &str,
        now: i64,
        audit: AuditRecord,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE api_keys SET revoked_at = $1 WHERE workspace_id = $2 AND user_id = $3 AND id = $4 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(workspace)
        .bind(user_id)
        .bind(key_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            let exists: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM api_keys WHERE workspace_id = $1 AND user_id = $2 AND id = $3",
            )
            .bind(workspace)
            .bind(user_id)
            .bind(key_id)
            .fetch_one(&mut *tx)
            .await?;
            tx.rollback().await?;
            return Ok(exists > 0);
        }
        self.audit_in(&mut tx, workspace, audit).await?;
        tx.commit().await?;
        Ok(true)
    }

    pub async fn touch_api_key(&self, id: &str, now: i64) -> Result<()> {
        sqlx::query("UPDATE api_keys SET last_used_at = $1 WHERE id = $2")
            .bind(now)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    // ------------------------------------------------------------ second factor (IAM-4)

    pub async fn mfa(&self, user_id: &str) -> Result<Option<MfaRecord>> {
        let row = sqlx::query("SELECT confirmed_at, last_step FROM mfa WHERE user_id = $1")
            .bind(user_id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| {
            Ok(MfaRecord {
                confirmed_at: r.try_get("confirmed_at")?,
                last_step: r.try_get("last_step")?,
            })
        })
        .transpose()
    }

    /// Starts (or restarts) enrolment: an unconfirmed record, and no
    /// recovery codes.
    pub async fn mfa_begin(&self, user_id: &str, now: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO mfa (user_id, confirmed_at, last_step, created_at) VALUES ($1, NULL, NULL, $2) \
             ON CONFLICT (user_id) DO UPDATE SET confirmed_at = NULL, last_step = NULL, created_at = excluded.created_at",
        )
        .bind(user_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM recovery_codes WHERE user_id = $1")
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Confirms a pending enrolment, recording the verified step and the
    /// recovery code hashes, in one transaction. False if not pending.
    pub async fn mfa_confirm(
        &self,
        user_id: &str,
        step: i64,
        code_hashes: &[String],
        now: i64,
    ) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let n = sqlx::query(
            "UPDATE mfa SET confirmed_at = $1, last_step = $2 WHERE user_id = $3 AND confirmed_at IS NULL",
        )
        .bind(now)
        .bind(step)
        .bind(user_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n != 1 {
            tx.rollback().await?;
            return Ok(false);
        }
        sqlx::query("DELETE FROM recovery_codes WHERE user_id = $1")
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        for h in code_hashes {
            sqlx::query(
                "INSERT INTO recovery_codes (user_id, code_hash) VALUES ($1, $2) ON CONFLICT (user_id, code_hash) DO NOTHING",
            )
            .bind(user_id)
            .bind(h)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Records a used TOTP step if it is newer than the last one (a
    /// compare-and-set: of concurrent uses of one step, exactly one wins).
    pub async fn mfa_use_step(&self, user_id: &str, step: i64) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE mfa SET last_step = $1 WHERE user_id = $2 AND confirmed_at IS NOT NULL AND (last_step IS NULL OR last_step < $1)",
        )
        .bind(step)
        .bind(user_id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Uses a recovery code once: true iff an unused matching code was
    /// marked used now.
    pub async fn use_recovery_code(
        &self,
        user_id: &str,
        code_hash: &str,
        now: i64,
    ) -> Result<bool> {
        let n = sqlx::query(
            "UPDATE recovery_codes SET used_at = $1 WHERE user_id = $2 AND code_hash = $3 AND used_at IS NULL",
        )
        .bind(now)
        .bind(user_id)
        .bind(code_hash)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    pub async fn unused_recovery_codes(&self, user_id: &str) -> Result<i64> {
        Ok(sqlx::query_scalar(
            "SELECT COUNT(*) FROM recovery_codes WHERE user_id = $1 AND used_at IS NULL",
        )
        .bind(user_id)
        .fetch_one(&self.pool)
        .await?)
    }

    /// Removes the second factor and its recovery codes.
    pub async fn mfa_remove(&self, user_id: &str) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM recovery_codes WHERE user_id = $1")
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM mfa WHERE user_id = $1")
            .bind(user_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    // ------------------------------------------------------------ operator-assisted reset (IAM-4)

    pub async fn create_reset_token(
        &self,
        user_id: &str,
        token_hash: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO reset_tokens (token_hash, user_id, created_at, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(token_hash)
        .bind(user_id)
        .bind(now)
        .bind(expires_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Uses a reset token once: marks it used iff unused and not expired,
    /// and returns its user.
    pub async fn consume_reset_token(&self, token_hash: &str, now: i64) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "UPDATE reset_tokens SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL AND expires_at > $1 RETURNING user_id",
        )
        .bind(now)
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await?)
    }
}

/// Serialises membership changes of one workspace: a row lock on
/// PostgreSQL, the write lock on SQLite (a write that changes nothing).
async fn lock_workspace(tx: &mut sqlx::Transaction<'_, sqlx::Any>, workspace: &str) -> Result<()> {
    sqlx::query("UPDATE workspaces SET name = name WHERE id = $1")
        .bind(workspace)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// IAM-7: a workspace keeps at least one owner. Checked inside the
/// change's transaction, after it, so two owners demoting each other at
/// once cannot both succeed.
async fn keeps_an_owner(tx: &mut sqlx::Transaction<'_, sqlx::Any>, workspace: &str) -> Result<()> {
    let owners: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM memberships WHERE workspace_id = $1 AND role = 'owner'",
    )
    .bind(workspace)
    .fetch_one(&mut **tx)
    .await?;
    if owners == 0 {
        return Err(StoreError::LastOwner);
    }
    Ok(())
}
