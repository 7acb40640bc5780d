//! IAM-7: roles and permissions. [`TABLE`] is the one place the role table lives; every
//! check ([`Role::permits`]), listing ([`Role::permissions`]) and the rendered documentation
//! ([`markdown_table`]) is derived from it.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// One thing a workspace member may be allowed to do. Serialized as the dotted name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Permission {
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

impl Permission {
    pub const ALL: &'static [Permission] = &[
        Permission::WorkspaceManage,
        Permission::WorkspaceDelete,
        Permission::MembersManage,
        Permission::WorkersRead,
        Permission::WorkersWrite,
        Permission::AgentsManage,
        Permission::RunsCreate,
        Permission::RunsCancel,
        Permission::RunsRead,
        Permission::ApprovalsDecide,
        Permission::PolicyManage,
        Permission::SecretsWrite,
        Permission::SecretsList,
        Permission::AuditRead,
        Permission::AuditExport,
        Permission::EmergencyStop,
        Permission::EmergencyResume,
        Permission::KeysOwn,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::WorkspaceManage => "workspace.manage",
            Permission::WorkspaceDelete => "workspace.delete",
            Permission::MembersManage => "members.manage",
            Permission::WorkersRead => "workers.read",
            Permission::WorkersWrite => "workers.write",
            Permission::AgentsManage => "agents.manage",
            Permission::RunsCreate => "runs.create",
            Permission::RunsCancel => "runs.cancel",
            Permission::RunsRead => "runs.read",
            Permission::ApprovalsDecide => "approvals.decide",
            Permission::PolicyManage => "policy.manage",
            Permission::SecretsWrite => "secrets.write",
            Permission::SecretsList => "secrets.list",
            Permission::AuditRead => "audit.read",
            Permission::AuditExport => "audit.export",
            Permission::EmergencyStop => "emergency.stop",
            Permission::EmergencyResume => "emergency.resume",
            Permission::KeysOwn => "keys.own",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|p| p.as_str() == s)
    }
}

/// A workspace member's role. Serialized in snake_case ("assistant_manager").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Owner,
    Admin,
    AssistantManager,
    HumanAssistant,
    Developer,
    Viewer,
}

use Role::{
    Admin as A, AssistantManager as M, Developer as D, HumanAssistant as H, Owner as O, Viewer as V,
};

/// IAM-7: each permission and the roles that hold it (docs/requirements.md;
/// mirrored in ARCHITECTURE.md).
pub const TABLE: &[(Permission, &[Role])] = &[
    (Permission::WorkspaceManage, &[O, A]),
    (Permission::WorkspaceDelete, &[O]),
    (Permission::MembersManage, &[O, A]),
    (Permission::WorkersRead, &[O, A, M, H, D, V]),
    (Permission::WorkersWrite, &[O, A, D]),
    (Permission::AgentsManage, &[O, A, M, D]),
    (Permission::RunsCreate, &[O, A, M, H, D]),
    (Permission::RunsCancel, &[O, A, M, H, D]),
    (Permission::RunsRead, &[O, A, M, H, D, V]),
    (Permission::ApprovalsDecide, &[O, A, M, H]),
    (Permission::PolicyManage, &[O, A, M]),
    (Permission::SecretsWrite, &[O, A, D]),
    (Permission::SecretsList, &[O, A, M, D]),
    (Permission::AuditRead, &[O, A, M]),
    (Permission::AuditExport, &[O, A, M]),
    (Permission::EmergencyStop, &[O, A, M, H, D]),
    (Permission::EmergencyResume, &[O, A]),
    (Permission::KeysOwn, &[O, A, M, H, D, V]),
];

impl Role {
    /// In table-column order.
    pub const ALL: &'static [Role] = &[O, A, M, H, D, V];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Admin => "admin",
            Role::AssistantManager => "assistant_manager",
            Role::HumanAssistant => "human_assistant",
            Role::Developer => "developer",
            Role::Viewer => "viewer",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| r.as_str() == s)
    }

    fn column_title(self) -> &'static str {
        match self {
            Role::Owner => "Owner",
            Role::Admin => "Admin",
            Role::AssistantManager => "Asst. Manager",
            Role::HumanAssistant => "Human Asst.",
            Role::Developer => "Developer",
            Role::Viewer => "Viewer",
        }
    }

    pub fn permits(self, p: Permission) -> bool {
        TABLE
            .iter()
            .any(|(perm, roles)| *perm == p && roles.contains(&self))
    }

    pub fn permissions(self) -> BTreeSet<Permission> {
        TABLE
            .iter()
            .filter(|(_, roles)| roles.contains(&self))
            .map(|(p, _)| *p)
            .collect()
    }

    /// Nobody can grant a permission they lack: true iff target's set ⊆ granter's set.
    pub fn can_grant(granter: Role, target: Role) -> bool {
        target.permissions().is_subset(&granter.permissions())
    }
}

/// The role table as Markdown, in [`TABLE`] order, for docs and `--help` output.
pub fn markdown_table() -> String {
    let mut out = String::from("| permission |");
    for r in Role::ALL {
        out.push(' ');
        out.push_str(r.column_title());
        out.push_str(" |");
    }
    out.push_str("\n|---|");
    for _ in Role::ALL {
        out.push_str("---|");
    }
    out.push('\n');
    for (p, roles) in TABLE {
        out.push_str("| `");
        out.push_str(p.as_str());
        out.push_str("` |");
        for r in Role::ALL {
            out.push_str(if roles.contains(r) { " ✓ |" } else { "  |" });
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written out independently of TABLE: columns Owner, Admin, AsstMgr, HumanAsst, Developer, Viewer.
    const EXPECTED: [(&str, [bool; 6]); 18] = [
        ("workspace.manage", [true, true, false, false, false, false]),
        (
            "workspace.delete",
            [true, false, false, false, false, false],
        ),
        ("members.manage", [true, true, false, false, false, false]),
        ("workers.read", [true, true, true, true, true, true]),
        ("workers.write", [true, true, false, false, true, false]),
        ("agents.manage", [true, true, true, false, true, false]),
        ("runs.create", [true, true, true, true, true, false]),
        ("runs.cancel", [true, true, true, true, true, false]),
        ("runs.read", [true, true, true, true, true, true]),
        ("approvals.decide", [true, true, true, true, false, false]),
        ("policy.manage", [true, true, true, false, false, false]),
        ("secrets.write", [true, true, false, false, true, false]),
        ("secrets.list", [true, true, true, false, true, false]),
        ("audit.read", [true, true, true, false, false, false]),
        ("audit.export", [true, true, true, false, false, false]),
        ("emergency.stop", [true, true, true, true, true, false]),
        ("emergency.resume", [true, true, false, false, false, false]),
        ("keys.own", [true, true, true, true, true, true]),
    ];
    const COLS: [&str; 6] = [
        "owner",
        "admin",
        "assistant_manager",
        "human_assistant",
        "developer",
        "viewer",
    ];

    #[test]
    fn every_role_and_permission_matches_the_spec() {
        assert_eq!(Permission::ALL.len(), 18);
        assert_eq!(TABLE.len(), 18);
        for (name, row) in EXPECTED {
            let p = Permission::parse(name).expect(name);
            for (col, want) in COLS.iter().zip(row) {
                let r = Role::parse(col).expect(col);
                assert_eq!(r.permits(p), want, "{col} × {name}");
                assert_eq!(r.permissions().contains(&p), want, "{col} × {name}");
            }
        }
    }

    #[test]
    fn names_round_trip_through_str_and_serde() {
        for p in Permission::ALL {
            assert_eq!(Permission::parse(p.as_str()), Some(*p));
            let j = serde_json::to_string(p).unwrap();
            assert_eq!(j, format!("\"{}\"", p.as_str()));
            assert_eq!(serde_json::from_str::<Permission>(&j).unwrap(), *p);
        }
        for r in Role::ALL {
            assert_eq!(Role::parse(r.as_str()), Some(*r));
            let j = serde_json::to_string(r).unwrap();
            assert_eq!(j, format!("\"{}\"", r.as_str()));
            assert_eq!(serde_json::from_str::<Role>(&j).unwrap(), *r);
        }
        assert_eq!(Permission::parse("workspace.Manage"), None);
        assert_eq!(Role::parse("Owner"), None);
    }

    #[test]
    fn grants_never_exceed_the_granter() {
        for r in Role::ALL {
            assert!(Role::can_grant(Role::Owner, *r));
            assert!(Role::can_grant(*r, *r));
            assert!(Role::can_grant(*r, Role::Viewer));
        }
        assert!(!Role::can_grant(Role::Admin, Role::Owner));
        assert!(!Role::can_grant(Role::Viewer, Role::Developer));
        assert!(!Role::can_grant(
            Role::HumanAssistant,
            Role::AssistantManager
        ));
        assert!(!Role::can_grant(Role::Developer, Role::AssistantManager));
    }

    #[test]
    fn markdown_table_has_header_and_one_row_per_permission() {
        let md = markdown_table();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| permission | Owner | Admin | Asst. Manager | Human Asst. | Developer | Viewer |"
        );
        assert_eq!(lines[1], "|---|---|---|---|---|---|---|");
        assert_eq!(lines.len(), 2 + 18);
        assert_eq!(lines[3], "| `workspace.delete` | ✓ |  |  |  |  |  |");
        for (line, (p, roles)) in lines[2..].iter().zip(TABLE) {
            assert!(line.starts_with(&format!("| `{}` |", p.as_str())));
            assert_eq!(line.matches('✓').count(), roles.len());
        }
    }
}
