//! The fixed taxonomy of run error codes (RUN-4): one enum, each code with
//! its stable string, the terminal state it puts a run in, and what it
//! means.
//!
//! Every place that ends a run with an error — the executor's stages, the
//! reaper, a cancel of a queued run — names one of these values, so a code
//! that is emitted is a code that is documented: docs/workers.md carries
//! [`markdown_table`] verbatim and a test fails when the two differ.
//!
//! Why the state is derived from the code: "blocked" means the run could
//! not start and a person must fix something (a credential, a policy, the
//! host); "failed" means it ran, or tried to, and did not succeed. Tying
//! each code to one state keeps the two from disagreeing between call
//! sites.
//!
//! Must not: change a string once released (clients and stored rows
//! depend on them); add a code without a row in the table.

use serde::{Deserialize, Serialize};

use crate::RunState;

macro_rules! run_error_codes {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $state:ident, $what:literal; )*) => {
        /// Why a run ended other than `succeeded` (RUN-4). Serialised as its
        /// stable string.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum RunErrorCode {
            $( $(#[$doc])* #[serde(rename = $code)] $variant, )*
        }

        impl RunErrorCode {
            /// Every code, in the order of the documentation table.
            pub const ALL: &[RunErrorCode] = &[$(RunErrorCode::$variant),*];

            /// The stable string stored in `runs.error_code` and shown to
            /// clients.
            pub fn as_str(self) -> &'static str {
                match self { $(RunErrorCode::$variant => $code,)* }
            }

            /// The terminal state a run with this code is in.
            pub fn state(self) -> RunState {
                match self { $(RunErrorCode::$variant => RunState::$state,)* }
            }

            /// What the code means, as documented.
            pub fn description(self) -> &'static str {
                match self { $(RunErrorCode::$variant => $what,)* }
            }
        }
    };
}

run_error_codes! {
    // --- authorise: the run did not start.
    ActorNotAuthorized = "actor_not_authorized", Blocked,
        "The member who created the run may no longer create runs in its workspace (checked again when it executes).";
    WorkerMissing = "worker_missing", Failed,
        "The run's worker is no longer loaded in the run's workspace.";
    TriggerNotDeclared = "trigger_not_declared", Blocked,
        "The run came from a trigger its worker does not declare (e.g. started by hand, but `[[triggers]]` has no `manual`).";
    // --- agent runs: the model (AGT-2).
    ModelProfileMissing = "model_profile_missing", Blocked,
        "The agent's `model` names no model profile of the run's workspace (`airlock models put NAME`).";
    ModelProfileInvalid = "model_profile_invalid", Blocked,
        "The agent's model profile is stored but no longer valid (a field this version refuses).";
    ProviderCredentialsMissing = "provider_credentials_missing", Blocked,
        "The model profile names a credential channel the operator's egress policy does not have, or whose secret is not set; audited.";
    ModelPriceUnknown = "model_price_unknown", Blocked,
        "The agent has a cost budget but its model profile has no prices for input and output tokens (give a local model explicit zero prices).";
    ModelFailed = "model_failed", Failed,
        "The model provider failed after bounded retries (the run's events name the model error code, e.g. `model_rate_limited`, `model_stream_cut`).";
    AgentNoFinish = "agent_no_finish", Failed,
        "The model stopped without calling `finish` and did not after one reminder.";
    EgressPolicyUnreadable = "egress_policy_unreadable", Blocked,
        "The operator egress policy (`AIRLOCK_EGRESS_POLICY`) is configured but cannot be read, so neither its channels nor the credentials it keeps out of `[secrets]` are known.";
    EgressPolicyInvalid = "egress_policy_invalid", Blocked,
        "The operator egress policy, an `[egress] allow` rule or a requested channel is invalid or not configured.";
    SecretForbidden = "secret_forbidden", Blocked,
        "A declared secret is a channel credential or a platform secret; it is never delivered to a sandbox.";
    SecretMissing = "secret_missing", Blocked,
        "A declared secret (or a channel credential the policy references) is not set.";
    SecretInvalid = "secret_invalid", Blocked,
        "A secret cannot be delivered as declared (e.g. not UTF-8 for `delivery = \"env\"`, or a denied variable name).";
    SecretRollback = "secret_rollback", Blocked,
        "A secret's record is older than its high-water mark (a restored or replayed database).";
    SecretCorrupt = "secret_corrupt", Blocked,
        "A secret's stored record or its data key cannot be decoded.";
    VaultError = "vault_error", Blocked,
        "The vault could not open a secret (key directory, KEK or data key).";
    StoreError = "store_error", Blocked,
        "The database failed while secrets were read for the run.";
    // --- approvals and the emergency stop: the run did not start.
    ApprovalRejected = "approval_rejected", Blocked,
        "A person rejected the run's approval request (`[approvals] required = true`); nothing executed.";
    ApprovalExpired = "approval_expired", Blocked,
        "Nobody approved the run before its request expired (`approvals.ttl_s`), or the approval expired before the run was claimed; nothing executed.";
    ApprovalInvalid = "approval_invalid", Blocked,
        "The approval could not be used: the payload about to execute is not the approved one (the worker changed), or the approver no longer holds `approvals.decide`; nothing executed.";
    EmergencyStop = "emergency_stop", Cancelled,
        "The workspace's emergency stop: a queued or waiting run ended before it started, or a running one was killed with every process.";
    // --- stage and launch.
    StagingFailed = "staging_failed", Failed,
        "The run's folder, input or output directory could not be prepared.";
    ContainmentUnavailable = "containment_unavailable", Blocked,
        "The required sandbox guarantees could not be established; nothing executed.";
    EgressUnavailable = "egress_unavailable", Failed,
        "The run asked for egress but its proxy could not be started or could not serve the sandbox's listener.";
    SandboxIdsInvalid = "sandbox_ids_invalid", Blocked,
        "The host ids the sandbox would run as (the sandbox id range) are missing, malformed or overlap an account; nothing executed.";
    SandboxSetupFailed = "sandbox_setup_failed", Failed,
        "The sandbox could not be set up (invalid request, namespaces, mounts, cgroup).";
    ExecutableNotFound = "executable_not_found", Failed,
        "The worker's runtime or entry was not found on the sandbox's `PATH`.";
    ExecutableChanged = "executable_changed", Failed,
        "The executable changed between resolution and exec (SBX-2).";
    ExecutableInvalid = "executable_invalid", Failed,
        "The executable is not a regular executable file, or could not be read.";
    ExecFailed = "exec_failed", Failed,
        "The sandbox started but the workload could not be executed.";
    // --- agent runs: budgets (AGT-7) and the pipeline.
    BudgetSteps = "budget_steps", Failed,
        "The agent made as many model requests as `agent.budgets.steps` allows.";
    BudgetToolCalls = "budget_tool_calls", Failed,
        "The agent dispatched as many tool calls as `agent.budgets.tool_calls` allows and asked for another.";
    BudgetTokens = "budget_tokens", Failed,
        "The agent's model requests used `agent.budgets.tokens` tokens.";
    BudgetCost = "budget_cost", Failed,
        "The agent's model requests cost `agent.budgets.cost_usd`, priced from its model profile.";
    BudgetWallTime = "budget_wall_time", Failed,
        "The agent spent `agent.budgets.wall_time_s` on model requests and tool calls (waiting for a person is not counted).";
    BudgetEgressBytes = "budget_egress_bytes", Failed,
        "The agent's tools moved `agent.budgets.egress_bytes` through its egress proxy.";
    // --- the workload ended badly.
    ExitNonzero = "exit_nonzero", Failed,
        "The workload exited with a non-zero status.";
    KilledBySignal = "killed_by_signal", Failed,
        "The workload was killed by a signal.";
    MemoryLimit = "memory_limit", Failed,
        "The workload was killed at its memory limit.";
    Timeout = "timeout", TimedOut,
        "The workload ran past `limits.timeout_s`; it and every descendant were killed.";
    Cancelled = "cancelled", Cancelled,
        "The run was cancelled (before it started, or while running: every process was killed).";
    // --- collect.
    SchemaViolation = "schema_violation", Failed,
        "The outputs do not match `[outputs]` (or `result.json` is not a JSON object).";
    OutputSymlink = "output_symlink", Failed,
        "The output folder holds a symbolic link.";
    OutputNotRegular = "output_not_regular", Failed,
        "The output folder holds a FIFO, socket or device.";
    OutputHardLink = "output_hard_link", Failed,
        "The output folder holds a file with more than one hard link.";
    OutputTooManyFiles = "output_too_many_files", Failed,
        "The output folder holds more than 1000 files.";
    OutputTooLarge = "output_too_large", Failed,
        "An output file is larger than `limits.output_bytes`.";
    OutputTotalTooLarge = "output_total_too_large", Failed,
        "The output folder holds more than `limits.output_bytes` in total.";
    OutputTooDeep = "output_too_deep", Failed,
        "The output folder nests deeper than 16 levels.";
    OutputBadName = "output_bad_name", Failed,
        "An output file has a name the artifact store refuses.";
    OutputIo = "output_io", Failed,
        "Reading the outputs or publishing an artifact failed (e.g. a full disk).";
    RedactionFailed = "redaction_failed", Failed,
        "A text artifact of a run that received secrets could not be redacted, so it was not published.";
    // --- after the fact.
    Abandoned = "abandoned", Unknown,
        "The executor disappeared while the workload may have had effects; a person decides (DUR-2).";
    Internal = "internal", Failed,
        "An internal error (e.g. the database failed mid-run); see the run's events.";
}

impl RunErrorCode {
    /// The code for a stored string, if it is one.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for RunErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The table docs/workers.md carries (its "Run error codes" section).
pub fn markdown_table() -> String {
    let mut out = String::from("| code | state | when |\n|---|---|---|\n");
    for c in RunErrorCode::ALL {
        out.push_str(&format!(
            "| `{}` | `{}` | {} |\n",
            c.as_str(),
            c.state().as_str(),
            c.description()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn run_4_codes_are_distinct_snake_case_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for c in RunErrorCode::ALL {
            let s = c.as_str();
            assert!(seen.insert(s), "{s} twice");
            assert!(
                s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{s}"
            );
            assert_eq!(RunErrorCode::parse(s), Some(*c));
            assert_eq!(serde_json::to_value(c).unwrap(), serde_json::json!(s));
            assert_eq!(
                serde_json::from_value::<RunErrorCode>(serde_json::json!(s)).unwrap(),
                *c
            );
            assert!(c.state().is_terminal() && c.state() != RunState::Succeeded);
        }
        assert_eq!(RunErrorCode::parse("output_*"), None);
    }

    #[test]
    fn run_4_docs_workers_md_mirrors_the_error_code_table() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/workers.md"),
        )
        .unwrap();
        let table = markdown_table();
        assert!(
            doc.contains(&table),
            "docs/workers.md's run error code table differs from RunErrorCode; paste this:\n{table}"
        );
    }

    /// The store sets codes itself in two places (a queued run cancelled,
    /// a run reaped as abandoned): through the enum, never a string
    /// literal in SQL that the table could miss.
    #[test]
    fn run_4_the_store_writes_no_error_code_literal() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        // Built at run time so this file does not match itself.
        let needle = ["error_code", "='"].concat();
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let compact: String = text.split_whitespace().collect();
            assert!(
                !compact.contains(&needle),
                "{} writes an error code literal in SQL",
                path.display()
            );
        }
    }
}
