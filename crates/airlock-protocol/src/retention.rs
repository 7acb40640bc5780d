//! Retention per workspace (DUR-7): how many days each kind of material is
//! kept (absent: for ever), and what a pass removed. Removing is
//! `workspace.manage`; the bytes of artifacts and uploads no record names
//! any more are left to `airlock gc`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The most days a setting may name (100 years).
pub const MAX_DAYS: u64 = 36_500;

/// A workspace's retention: days per kind of material; a missing or null
/// field keeps that material for ever. Body of `PUT /v1/retention`, and
/// what `GET /v1/retention` answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Runs that ended (never `unknown` ones) this many days ago, with
    /// their events, artifact records, transcript, actions and approvals.
    #[schema(minimum = 1, maximum = 36500)]
    pub runs_days: Option<u64>,
    /// The log lines of runs that ended this many days ago.
    #[schema(minimum = 1, maximum = 36500)]
    pub logs_days: Option<u64>,
    /// The artifact records of runs that ended this many days ago.
    #[schema(minimum = 1, maximum = 36500)]
    pub artifacts_days: Option<u64>,
    /// Uploads made this many days ago that no unfinished run names.
    #[schema(minimum = 1, maximum = 36500)]
    pub uploads_days: Option<u64>,
    /// Schedule fires made this many days ago (each schedule's newest
    /// stays).
    #[schema(minimum = 1, maximum = 36500)]
    pub fires_days: Option<u64>,
}

impl<'de> Deserialize<'de> for Retention {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            #[serde(default, deserialize_with = "crate::whole::option_u64")]
            runs_days: Option<u64>,
            #[serde(default, deserialize_with = "crate::whole::option_u64")]
            logs_days: Option<u64>,
            #[serde(default, deserialize_with = "crate::whole::option_u64")]
            artifacts_days: Option<u64>,
            #[serde(default, deserialize_with = "crate::whole::option_u64")]
            uploads_days: Option<u64>,
            #[serde(default, deserialize_with = "crate::whole::option_u64")]
            fires_days: Option<u64>,
        }
        let r: Raw = crate::object_only::deserialize(d)?;
        Ok(Retention {
            runs_days: r.runs_days,
            logs_days: r.logs_days,
            artifacts_days: r.artifacts_days,
            uploads_days: r.uploads_days,
            fires_days: r.fires_days,
        })
    }
}

/// Body of `POST /v1/workspaces/{id}/delete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteWorkspace {
    /// The workspace's name, typed again: what is deleted cannot be
    /// brought back.
    #[schema(max_length = 100)]
    pub confirm: String,
}

/// What deleting a workspace removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceDeleted {
    pub id: String,
    /// Rows removed, by table. The audit chain is not among them: it stays.
    pub removed: std::collections::BTreeMap<String, u64>,
}

/// What a retention pass removed (or, for a dry run, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RetentionRemoved {
    pub runs: u64,
    pub log_events: u64,
    pub artifacts: u64,
    pub uploads: u64,
    pub fires: u64,
}

/// Answer of `POST /v1/retention/apply`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RetentionApplied {
    /// Nothing was removed: the counts are what a pass would remove now.
    pub dry_run: bool,
    /// The settings the pass used.
    pub retention: Retention,
    pub removed: RetentionRemoved,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dur_7_retention_bodies_are_objects_of_known_whole_days() {
        let r: Retention = serde_json::from_str(r#"{"runs_days": 30, "logs_days": 7.0}"#).unwrap();
        assert_eq!(r.runs_days, Some(30));
        assert_eq!(r.logs_days, Some(7));
        assert_eq!(r.uploads_days, None);
        let empty: Retention = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, Retention::default());
        for bad in [
            "[]",
            r#"{"runs_days": -1}"#,
            r#"{"runs_days": 1.5}"#,
            r#"{"runs_days": "30"}"#,
            r#"{"run_days": 30}"#,
        ] {
            assert!(serde_json::from_str::<Retention>(bad).is_err(), "{bad}");
        }
    }
}
