//! Containment reports (SBX-6): what was actually in force, never assumed.

use serde::{Deserialize, Serialize};

/// The driver that ran the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    Namespaces,
    Landlock,
    Uncontained,
}

/// The rung of the containment ladder reached. Ordered weakest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Nothing: the development driver.
    Uncontained,
    /// Landlock + seccomp with every network socket denied; no PID, mount
    /// or network namespace.
    LandlockSeccomp,
    /// Full namespace isolation plus Landlock and seccomp.
    Namespaces,
}

/// One guarantee and whether it is in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guarantee {
    pub name: String,
    pub in_force: bool,
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub detail: String,
}

impl Guarantee {
    pub fn new(name: &str, in_force: bool, detail: impl Into<String>) -> Self {
        Self {
            name: name.to_string(),
            in_force,
            detail: detail.into(),
        }
    }
}

/// The containment report attached to every result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainmentReport {
    pub driver: Driver,
    pub level: Level,
    pub guarantees: Vec<Guarantee>,
}

/// Guarantees that `--require-containment` insists on at the namespaces
/// level. Limits the caller asked for are added by [`ContainmentReport::missing`].
pub const REQUIRED_AT_FULL_LEVEL: &[&str] = &[
    "user_namespace",
    "mount_namespace",
    "pid_namespace",
    "network_namespace",
    "ipc_namespace",
    "uts_namespace",
    "private_root",
    "no_new_privs",
    "capabilities_dropped",
    "seccomp",
    "landlock",
    "rlimits",
    "unprivileged_host_uid",
    "no_setid_files",
];

impl ContainmentReport {
    pub fn uncontained() -> Self {
        Self {
            driver: Driver::Uncontained,
            level: Level::Uncontained,
            guarantees: vec![Guarantee::new(
                "uncontained",
                false,
                "development driver: the workload runs with the caller's privileges, network and files",
            )],
        }
    }

    pub fn get(&self, name: &str) -> Option<&Guarantee> {
        self.guarantees.iter().find(|g| g.name == name)
    }

    pub fn in_force(&self, name: &str) -> bool {
        self.get(name).is_some_and(|g| g.in_force)
    }

    pub fn push(&mut self, g: Guarantee) {
        self.guarantees.retain(|x| x.name != g.name);
        self.guarantees.push(g);
    }

    /// The required guarantees that are not in force. `extra` names limits
    /// the caller explicitly asked for (e.g. `memory_limit`).
    pub fn missing(&self, extra: &[&str]) -> Vec<String> {
        if self.level < Level::Namespaces {
            let mut m = vec![format!("level {:?} is below namespaces", self.level)];
            m.extend(
                REQUIRED_AT_FULL_LEVEL
                    .iter()
                    .chain(extra)
                    .filter(|n| !self.in_force(n))
                    .map(|n| n.to_string()),
            );
            return m;
        }
        REQUIRED_AT_FULL_LEVEL
            .iter()
            .chain(extra)
            .filter(|n| !self.in_force(n))
            .map(|n| n.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbx_6_levels_are_ordered_weakest_first() {
        assert!(Level::Uncontained < Level::LandlockSeccomp);
        assert!(Level::LandlockSeccomp < Level::Namespaces);
    }

    #[test]
    fn sbx_6_missing_lists_every_absent_guarantee() {
        let mut r = ContainmentReport {
            driver: Driver::Namespaces,
            level: Level::Namespaces,
            guarantees: REQUIRED_AT_FULL_LEVEL
                .iter()
                .map(|n| Guarantee::new(n, true, ""))
                .collect(),
        };
        assert!(r.missing(&[]).is_empty());
        assert_eq!(
            r.missing(&["memory_limit"]),
            vec!["memory_limit".to_string()]
        );
        r.push(Guarantee::new("seccomp", false, "not supported"));
        assert_eq!(r.missing(&[]), vec!["seccomp".to_string()]);
        assert!(!ContainmentReport::uncontained().missing(&[]).is_empty());
    }
}
