//! Model profiles (AGT-2): a workspace's routing metadata for its agents'
//! models, kept in the store. Writing one is `agents.manage`; reading is
//! `workers.read` (a profile holds no secret: it names a credential
//! channel of the operator's policy, whose key stays a deployment secret).
//!
//! A profile is validated by `airlock-model` when it is written and again
//! when a run uses it (a stored profile a later version refuses blocks the
//! run with `model_profile_invalid`, it is never half-used).
//!
//! Must not: contain SQL; store or return a credential.

use airlock_iam::Permission;
use airlock_model::ModelProfile as Profile;
use airlock_model::profile::ProfileFile;
use airlock_protocol::models::{ModelProfile, ModelProfileList, PutModelProfile};
use airlock_protocol::{Error, ErrorCode};
use airlock_store::{AuditRecord, StoredProfile};
use serde_json::json;

use crate::caller::Caller;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

fn view(p: StoredProfile) -> ModelProfile {
    ModelProfile {
        name: p.name,
        profile: p.body,
        updated_at: p.updated_at,
        updated_by: p.updated_by,
    }
}

fn check_name(name: &str) -> Result<()> {
    if airlock_worker::is_profile_name(name) {
        Ok(())
    } else {
        Err(Error::new(
            airlock_protocol::ErrorCode::InvalidRequest,
            "a model profile name is 1 to 64 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit",
        ))
    }
}

/// The written form of a profile, validated: what is stored.
pub(crate) fn validated(
    profile: &serde_json::Value,
) -> std::result::Result<(ProfileFile, Profile), String> {
    let file: ProfileFile = serde_json::from_value(profile.clone()).map_err(|e| e.to_string())?;
    let parsed = Profile::from_file(file.clone()).map_err(|e| e.to_string())?;
    Ok((file, parsed))
}

impl Service {
    /// Creates or replaces a model profile of the caller's workspace.
    pub async fn put_model_profile(
        &self,
        c: &Caller,
        name: &str,
        b: &PutModelProfile,
    ) -> Result<ModelProfile> {
        c.require(Permission::AgentsManage)?;
        check_name(name)?;
        let (file, _) = validated(&b.profile).map_err(|m| {
            Error::new(
                ErrorCode::ModelProfileInvalid,
                format!("the model profile is invalid: {m}"),
            )
        })?;
        let body = serde_json::to_value(&file).map_err(|e| Error::internal(e.to_string()))?;
        let rec = AuditRecord::system("model_profile.put", None)
            .with_actor(c.audit_actor())
            .with_metadata(json!({"name": name, "profile": body}));
        let stored = self
            .store
            .put_model_profile(&c.workspace, name, &body, c.actor_id(), rec)
            .await
            .svc()?;
        Ok(view(stored))
    }

    /// One model profile of the caller's workspace.
    pub async fn get_model_profile(&self, c: &Caller, name: &str) -> Result<ModelProfile> {
        c.require(Permission::WorkersRead)?;
        check_name(name)?;
        self.store
            .model_profile(&c.workspace, name)
            .await
            .svc()?
            .map(view)
            .ok_or_else(Error::not_found)
    }

    /// The caller's workspace's model profiles, by name.
    pub async fn list_model_profiles(&self, c: &Caller) -> Result<ModelProfileList> {
        c.require(Permission::WorkersRead)?;
        let profiles = self
            .store
            .list_model_profiles(&c.workspace)
            .await
            .svc()?
            .into_iter()
            .map(view)
            .collect();
        Ok(ModelProfileList { profiles })
    }

    /// Deletes a model profile (runs that name it then end
    /// `model_profile_missing`).
    pub async fn delete_model_profile(&self, c: &Caller, name: &str) -> Result<()> {
        c.require(Permission::AgentsManage)?;
        check_name(name)?;
        let rec = AuditRecord::system("model_profile.deleted", None)
            .with_actor(c.audit_actor())
            .with_metadata(json!({"name": name}));
        if self
            .store
            .delete_model_profile(&c.workspace, name, rec)
            .await
            .svc()?
        {
            Ok(())
        } else {
            Err(Error::not_found())
        }
    }
}
