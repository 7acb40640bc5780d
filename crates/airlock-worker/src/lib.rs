//! Worker bundles (RUN-1 … RUN-3): the `worker.toml` manifest parsed into
//! typed values, bundles loaded from folders, run inputs and outputs checked
//! against the declared schema, and a script worker's argv.
//!
//! Bird's-eye view: [`Manifest::from_toml`] parses text into a [`Manifest`];
//! [`load_bundle`] adds what needs the folder (id equals folder name, entry
//! resolved inside the folder, agent prompt readable); [`load_workers_dir`]
//! loads a whole `workers/` directory, reporting and skipping broken bundles.
//! [`Manifest::check_input`], [`Manifest::check_outputs`] and
//! [`Manifest::command`] are what the run service and executor call.
//!
//! Must not: spawn processes, open the network, touch a database, read
//! secrets or print. Everything here is pure parsing and checking over a
//! folder the caller names; the sandbox and the bounded file layer enforce
//! at run time what this crate lints at load time.

mod bundle;
mod command;
mod error;
mod manifest;
mod names;
mod schedule;
mod values;

pub use bundle::{Bundle, MANIFEST_FILE, MAX_PROMPT_BYTES, load_bundle, load_workers_dir};
pub use command::CommandError;
pub use error::{ManifestError, Problem};
pub use manifest::{
    AGENT_APPROVAL_TTL_S, APPROVAL_TTL_DEFAULT_S, APPROVAL_TTL_MAX_S, AgentRule, AgentSpec,
    AllowRule, Approvals, Autonomy, BUDGET_TABLE, Budgets, COST_USD_RANGE, CPUS_RANGE, Egress,
    FieldType, InputSpec, LIMIT_TABLE, Limits, MAX_AGENT_RULES, MAX_ALLOW_RULES, MAX_CHANNELS,
    MAX_CHOICES, MAX_FIELDS, MAX_FILE_BYTES, MAX_MANIFEST_BYTES, MAX_SECRETS, MAX_TRIGGERS,
    MAX_VALUE_BYTES, Manifest, OutputSpec, RelPath, RuleMatch, RuleVerdict, Runtime,
    SecretDelivery, Secrets, TOOL_OUTPUT_BYTES, Tool, Trigger, TriggerKind, UNENFORCED, Unenforced,
    WebhookFormat, WorkerKind, is_profile_name,
};
pub use names::{
    ChannelName, FieldName, NameError, PLATFORM_SECRET_NAMES, PLATFORM_SECRET_PREFIX, SecretName,
    WorkerId, is_platform_secret,
};
pub use schedule::{CronExpr, Timezone};
pub use values::{
    FILE_VALUE_KEYS, InputError, MAX_INPUT_BYTES, OutputError, RESULT_FILE, file_upload_id,
};
