//! Workspaces, members and roles (IAM-6, IAM-7). Nobody grants what they
//! lack: a role (or a key scope) is given only by someone holding every
//! permission in it, a member is changed or removed only by someone who
//! could have granted their role, and a workspace keeps an owner.

use airlock_iam::{Permission, Role, password};
use airlock_protocol::identity::{
    Member, MemberChanged, MemberList, PutMember, RoleInfo, RoleList, WorkspaceCreated,
    WorkspaceList,
};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::{AuditRecord, StoreError};
use serde_json::json;

use super::{invalid, membership_view, printable_name};
use crate::caller::{Caller, Principal, Via};
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// The caller may hand out a role only if they hold every permission in it
/// (IAM-7), and may change or remove only members whose role they could
/// have granted.
fn may_grant(c: &Caller, role: Role) -> Result<()> {
    if role.permissions().is_subset(&c.perms) {
        Ok(())
    } else {
        Err(Error::forbidden(format!(
            "the {} role holds permissions you lack",
            role.as_str()
        )))
    }
}

/// A member who is changed is identified by a valid username, or is not
/// there at all.
fn username_or_not_found(username: &str) -> Result<String> {
    password::normalize_username(username).map_err(|_| Error::not_found())
}

impl Service {
    /// The pre-check of the last-owner rule (the store checks it again
    /// inside the membership transaction, with the workspace locked).
    async fn not_last_owner(&self, ws: &str, old: Role, new: Option<Role>) -> Result<()> {
        if old == Role::Owner && new != Some(Role::Owner) {
            let owners = self
                .store
                .count_role(ws, Role::Owner.as_str())
                .await
                .svc()?;
            if owners <= 1 {
                return Err(Error::new(
                    ErrorCode::LastOwner,
                    "a workspace keeps at least one owner",
                ));
            }
        }
        Ok(())
    }

    /// A new workspace, owned by the signed-in user who creates it.
    pub async fn create_workspace(&self, p: &Principal, name: &str) -> Result<WorkspaceCreated> {
        p.require_session()?;
        let name = printable_name(name, 100, "name")?;
        let id = self
            .store
            .create_workspace(&name, &p.user.id, self.now())
            .await
            .svc()?;
        Ok(WorkspaceCreated { id, name })
    }

    /// The principal's workspaces (a key sees only its own).
    pub async fn list_workspaces(&self, p: &Principal) -> Result<WorkspaceList> {
        let list = match &p.via {
            Via::Session { .. } => self.store.memberships_of(&p.user.id).await.svc()?,
            Via::ApiKey { workspace, .. } => self
                .store
                .membership(workspace, &p.user.id)
                .await
                .svc()?
                .into_iter()
                .collect(),
        };
        Ok(WorkspaceList {
            workspaces: list.into_iter().map(membership_view).collect(),
        })
    }

    /// The workspace's members (any member may see them).
    pub async fn list_members(&self, c: &Caller) -> Result<MemberList> {
        c.require(Permission::WorkersRead)?;
        let members = self
            .store
            .list_members(&c.workspace)
            .await
            .svc()?
            .into_iter()
            .map(membership_view)
            .collect();
        Ok(MemberList { members })
    }

    /// Adds a member or changes a role. An unknown username becomes an
    /// account without a password plus a single-use set-password token,
    /// returned once, for the administrator to hand over — only in the
    /// instance's own workspace. Returns whether a member was added.
    pub async fn put_member(
        &self,
        c: &Caller,
        username: &str,
        b: &PutMember,
    ) -> Result<(MemberChanged, bool)> {
        c.require(Permission::MembersManage)?;
        let role =
            Role::parse(&b.role).ok_or_else(|| invalid(format!("unknown role {:?}", b.role)))?;
        may_grant(c, role)?;
        let username =
            password::normalize_username(username).map_err(|e| invalid(e.to_string()))?;
        let now = self.now();
        let (user, setup_token) = match self.store.user_by_name(&username).await.svc()? {
            Some(u) => (u, None),
            None => {
                // Accounts are instance-wide, so only the instance's
                // administrators (members.manage in the workspace created
                // at bootstrap) create them. Otherwise the owner of any
                // workspace could create "carol", set her password with the
                // setup token, and wait for the real owner to add "carol"
                // elsewhere.
                if c.workspace != self.cfg.workers_workspace {
                    return Err(Error::new(
                        ErrorCode::NoSuchUser,
                        "no such user; accounts are created by the instance's administrators",
                    ));
                }
                let u = match self.store.create_user(&username, None, now).await {
                    Ok(u) => u,
                    Err(StoreError::Conflict) => {
                        // Lost a race with another invitation: the account
                        // exists now and is not this caller's to set up.
                        return Err(Error::new(
                            ErrorCode::Conflict,
                            "that account was just created; retry",
                        ));
                    }
                    Err(e) => return Err(crate::error::store(e)),
                };
                let token = self
                    .issue_reset_token(&u.id, self.cfg.identity.invite_ttl)
                    .await?;
                (u, Some(token))
            }
        };
        let existing = self.store.membership(&c.workspace, &user.id).await.svc()?;
        if let Some(m) = &existing {
            let old = Role::parse(&m.role).unwrap_or(Role::Owner);
            may_grant(c, old)?;
            self.not_last_owner(&c.workspace, old, Some(role)).await?;
        }
        self.store
            .set_member(
                &c.workspace,
                &user.id,
                role.as_str(),
                now,
                AuditRecord::system(
                    if existing.is_some() {
                        "member.role_changed"
                    } else {
                        "member.added"
                    },
                    None,
                )
                .with_actor(c.audit_actor())
                .with_metadata(json!({
                    "user": user.id,
                    "role": role.as_str(),
                    "previous": existing.as_ref().map(|m| m.role.clone()),
                })),
            )
            .await
            .svc()?;
        Ok((
            MemberChanged {
                member: Member {
                    user_id: user.id,
                    username: user.username,
                    role: role.as_str().to_string(),
                },
                setup_token,
            },
            existing.is_none(),
        ))
    }

    /// Removes a member (not the last owner, not one whose role the caller
    /// could not have granted).
    pub async fn delete_member(&self, c: &Caller, username: &str) -> Result<()> {
        c.require(Permission::MembersManage)?;
        let username = username_or_not_found(username)?;
        let Some(user) = self.store.user_by_name(&username).await.svc()? else {
            return Err(Error::not_found());
        };
        let Some(m) = self.store.membership(&c.workspace, &user.id).await.svc()? else {
            return Err(Error::not_found());
        };
        let old = Role::parse(&m.role).unwrap_or(Role::Owner);
        may_grant(c, old)?;
        self.not_last_owner(&c.workspace, old, None).await?;
        self.store
            .remove_member(
                &c.workspace,
                &user.id,
                self.now(),
                AuditRecord::system("member.removed", None)
                    .with_actor(c.audit_actor())
                    .with_metadata(json!({"user": user.id, "role": m.role})),
            )
            .await
            .svc()?;
        Ok(())
    }

    /// The role table the server enforces (IAM-7) and the caller's role.
    pub fn list_roles(&self, c: &Caller) -> Result<RoleList> {
        c.require(Permission::WorkersRead)?;
        let roles = Role::ALL
            .iter()
            .map(|r| RoleInfo {
                role: r.as_str().to_string(),
                permissions: r
                    .permissions()
                    .iter()
                    .map(|p| p.as_str().to_string())
                    .collect(),
            })
            .collect();
        Ok(RoleList {
            roles,
            yours: c.role.as_str().to_string(),
        })
    }
}
