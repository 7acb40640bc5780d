//! Landlock rules for the workload (SBX-3, defence in depth).
//!
//! Inside the namespaces driver Landlock repeats, in the kernel's LSM layer,
//! what the mount table already says: read and execute on the system
//! runtime, read-write on the writable roots and the private scratch areas,
//! nothing else. In the fallback level, where there is no private mount
//! table, it is the filesystem boundary itself, and it also denies TCP bind
//! and connect and scopes signals and abstract Unix sockets to the sandbox.

use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

use crate::report::Guarantee;

/// The newest ABI this code was written and tested against. Older kernels
/// get the best subset (best-effort mode); the report says what was applied.
const TARGET_ABI: ABI = ABI::V6;

/// Paths the workload may use, by kind of access.
#[derive(Debug, Clone, Default)]
pub struct LandlockPaths {
    /// Read and execute (system runtime, read-only roots, the executable).
    pub read_exec: Vec<PathBuf>,
    /// Read only, no execute (`/proc`).
    pub read_only: Vec<PathBuf>,
    /// Everything (writable roots, private `/tmp`, `/dev/shm`).
    pub read_write: Vec<PathBuf>,
    /// Directory listing only, not file contents (the new root itself, so
    /// that `ls /` works; beneath it the other rules decide).
    pub list_only: Vec<PathBuf>,
    /// Read and write of existing files only (`/dev/null` and friends).
    pub devices: Vec<PathBuf>,
    /// Deny TCP bind and connect (the fallback level has no network namespace).
    pub deny_tcp: bool,
}

/// Applies the ruleset to the calling thread and reports what is in force.
/// `no_new_privs` must be set by the caller first.
/// Returns the `landlock` guarantee and `signal_scoping` (ABI 6), which
/// best-effort mode drops silently on older kernels and which the fallback
/// level cannot do without.
pub fn apply(paths: &LandlockPaths) -> Vec<Guarantee> {
    match try_apply(paths) {
        Ok((status, abi, abi_num)) => {
            let detail = match status {
                RulesetStatus::FullyEnforced => format!("abi {abi}, fully enforced"),
                RulesetStatus::PartiallyEnforced => format!("abi {abi}, partially enforced"),
                RulesetStatus::NotEnforced => "not supported by this kernel".to_string(),
            };
            let enforced = status != RulesetStatus::NotEnforced;
            let scoped = enforced && abi_num >= 6;
            let scope_detail = if scoped {
                "signals and abstract sockets scoped to the sandbox"
            } else {
                "needs landlock abi 6"
            };
            vec![
                Guarantee::new("landlock", enforced, detail),
                Guarantee::new("signal_scoping", scoped, scope_detail),
            ]
        }
        Err(e) => vec![
            Guarantee::new("landlock", false, format!("failed: {e}")),
            Guarantee::new("signal_scoping", false, "landlock failed"),
        ],
    }
}

fn try_apply(
    paths: &LandlockPaths,
) -> Result<(RulesetStatus, String, i32), landlock::RulesetError> {
    let abi = TARGET_ABI;
    let mut ruleset = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?;
    if paths.deny_tcp {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    let ruleset = ruleset.scope(Scope::from_all(abi))?;
    let read_exec = AccessFs::from_read(abi);
    let read_only = AccessFs::ReadFile | AccessFs::ReadDir;
    let device = AccessFs::ReadFile | AccessFs::WriteFile;
    let status = ruleset
        .create()?
        .no_new_privs(true)
        .add_rules(path_beneath_rules(&paths.read_exec, read_exec))?
        .add_rules(path_beneath_rules(&paths.read_only, read_only))?
        .add_rules(path_beneath_rules(&paths.list_only, AccessFs::ReadDir))?
        .add_rules(path_beneath_rules(&paths.devices, device))?
        .add_rules(path_beneath_rules(
            &paths.read_write,
            AccessFs::from_all(abi),
        ))?
        .restrict_self()?;
    let (abi, num) = match status.landlock {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => match kernel_abi {
            Some(k) => (
                format!("{k} (used {effective_abi:?})"),
                effective_abi as i32,
            ),
            None => (format!("{}", effective_abi as i32), effective_abi as i32),
        },
        LandlockStatus::NotEnabled => ("not enabled".to_string(), 0),
        LandlockStatus::NotImplemented => ("not implemented".to_string(), 0),
    };
    Ok((status.ruleset, abi, num))
}
