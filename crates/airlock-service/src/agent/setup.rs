//! Setting an agent run up, on the trusted side: its model profile, the
//! credential channel that carries the model's key (read from the
//! operator's egress policy and the vault, never given to a sandbox), the
//! model client, the tools it may use (the worker's ∩ what its human actor
//! may do), its budgets, its egress for tools and its work directory.
//!
//! Every refusal here ends the run before anything executes, `blocked`
//! with a code that says what a person must fix.
//!
//! Must not: start anything; put the model credential anywhere but the
//! model client.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use airlock_agent::ActionKind;
use airlock_egress::client::{ClientOptions, OutboundClient};
use airlock_egress::policy::{Policy, PolicyError};
use airlock_files::workdir::{WorkDir, WorkDirBudget};
use airlock_model::{
    Endpoint, EndpointError, HttpModelClient, ModelClient, ModelEndpoint, ModelProfile,
    ToolDefinition, channel_client_options,
};
use airlock_protocol::runs::Run;
use airlock_store::{AuditRecord, RunErrorCode};
use airlock_worker::{AgentSpec, Bundle, Tool};
use serde_json::json;

use crate::executor::{Authorised, Outcome, RunCx, secret_code};
use crate::service::Service;

/// The worker's egress, for `run_command` sandboxes and `http_request`.
#[derive(Clone)]
pub(crate) struct ToolEgress {
    pub(crate) policy: Policy,
    pub(crate) channels: Vec<String>,
    /// Where its proxy's decision lines go (NET-7).
    pub(crate) log: std::sync::Arc<dyn airlock_egress::proxy::LogSink>,
}

/// An agent run, ready to loop.
pub(crate) struct Agent {
    pub(crate) run: Run,
    pub(crate) token: i64,
    pub(crate) bundle: Bundle,
    pub(crate) spec: AgentSpec,
    pub(crate) profile: ModelProfile,
    pub(crate) client: Arc<dyn ModelClient>,
    pub(crate) tools: Vec<ToolDefinition>,
    pub(crate) granted: BTreeSet<ActionKind>,
    pub(crate) autonomy: airlock_agent::Autonomy,
    pub(crate) budgets: airlock_agent::Budgets,
    /// `data/runs/<id>/work`: persists across the run's tool calls.
    pub(crate) work: PathBuf,
    pub(crate) workdir: Arc<WorkDir>,
    /// Who owns what `write_file` creates: the sandbox ids under a root
    /// broker, so that a later `run_command` can change it.
    pub(crate) work_owner: Option<(u32, u32)>,
    /// `None`: tools have no network at all.
    pub(crate) egress: Option<ToolEgress>,
    /// What taints the context from the start (a webhook's input is
    /// written by someone outside the workspace).
    pub(crate) input_taint: Option<String>,
}

/// The tool of the manifest as an action kind.
fn kind_of(t: Tool) -> ActionKind {
    match t {
        Tool::RunCommand => ActionKind::RunCommand,
        Tool::ReadFile => ActionKind::ReadFile,
        Tool::WriteFile => ActionKind::WriteFile,
        Tool::ListFiles => ActionKind::ListFiles,
        Tool::HttpRequest => ActionKind::HttpRequest,
        Tool::RequestApproval => ActionKind::RequestApproval,
        Tool::WriteOutput => ActionKind::WriteOutput,
        Tool::Finish => ActionKind::Finish,
    }
}

/// The manifest's `[[agent.rules]]` as the policy's rules (ids name the
/// entry: `worker:<n>`).
pub(crate) fn rules_of(rules: &[airlock_worker::AgentRule]) -> Vec<airlock_agent::Rule> {
    use airlock_agent::Verdict;
    use airlock_agent::policy::Matcher;
    use airlock_worker::{RuleMatch, RuleVerdict};
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| airlock_agent::Rule {
            id: format!("worker:{i}"),
            kind: kind_of(r.tool),
            matcher: match &r.matcher {
                RuleMatch::Any => Matcher::Any,
                RuleMatch::ArgvPrefix(p) => Matcher::ArgvPrefix { prefix: p.clone() },
                RuleMatch::PathPrefix(p) => Matcher::PathPrefix { prefix: p.clone() },
                RuleMatch::Host { host, methods } => Matcher::Host {
                    host: host.clone(),
                    methods: methods.clone(),
                },
            },
            verdict: match r.verdict {
                RuleVerdict::Allow => Verdict::Allow,
                RuleVerdict::Ask => Verdict::RequireApproval,
                RuleVerdict::Deny => Verdict::Deny,
            },
        })
        .collect()
}

/// A tool's argument schema as this worker's model sees it: `finish` and
/// `write_output` name the worker's declared outputs and their types (so
/// a model, or a server that holds output to the schema, cannot invent
/// one); every other tool's schema is the same for all workers.
pub(crate) fn parameters_for(k: ActionKind, m: &airlock_worker::Manifest) -> serde_json::Value {
    use airlock_worker::FieldType;
    use serde_json::{Map, Value, json};
    if !matches!(k, ActionKind::Finish | ActionKind::WriteOutput)
        || m.outputs
            .values()
            .any(|o| matches!(o.ty, FieldType::File { .. }))
    {
        return k.parameters();
    }
    let mut props = Map::new();
    for (name, o) in &m.outputs {
        let schema = match &o.ty {
            FieldType::String {
                choices,
                max_length,
            } => {
                let mut s = json!({"type": "string"});
                if !choices.is_empty() {
                    s["enum"] = json!(choices);
                }
                if let Some(n) = max_length {
                    s["maxLength"] = json!(n);
                }
                s
            }
            FieldType::Number {
                choices,
                minimum,
                maximum,
            } => {
                let mut s = json!({"type": "number"});
                if !choices.is_empty() {
                    s["enum"] = json!(choices);
                }
                if let Some(m) = minimum {
                    s["minimum"] = json!(m);
                }
                if let Some(m) = maximum {
                    s["maximum"] = json!(m);
                }
                s
            }
            FieldType::Boolean => json!({"type": "boolean"}),
            FieldType::Json { .. } | FieldType::File { .. } => json!({}),
        };
        props.insert(name.as_str().to_string(), schema);
    }
    let names: Vec<Value> = props.keys().map(|n| json!(n)).collect();
    match k {
        ActionKind::WriteOutput if names.is_empty() => k.parameters(),
        ActionKind::WriteOutput => json!({
            "type": "object",
            "properties": {"name": {"type": "string", "enum": names}, "value": {}},
            "required": ["name", "value"],
            "additionalProperties": false
        }),
        _ => json!({
            "type": "object",
            "properties": {
                "outputs": {"type": "object", "properties": props, "additionalProperties": false},
                "summary": {"type": "string"}
            },
            "additionalProperties": false
        }),
    }
}

pub(crate) fn autonomy_of(a: airlock_worker::Autonomy) -> airlock_agent::Autonomy {
    match a {
        airlock_worker::Autonomy::ReadOnly => airlock_agent::Autonomy::ReadOnly,
        airlock_worker::Autonomy::AskAll => airlock_agent::Autonomy::AskAll,
        airlock_worker::Autonomy::AskWrites => airlock_agent::Autonomy::AskWrites,
        airlock_worker::Autonomy::AutoWithinPolicy => airlock_agent::Autonomy::AutoWithinPolicy,
    }
}

fn blocked(code: RunErrorCode, message: impl Into<String>) -> Outcome {
    Outcome::fail(code, message)
}

impl Service {
    pub(crate) async fn agent_setup(&self, cx: &RunCx, a: Authorised) -> Result<Agent, Outcome> {
        let run = cx.claim.run.clone();
        let Some(spec) = a.bundle.manifest.agent().cloned() else {
            return Err(Outcome::fail(RunErrorCode::Internal, "not an agent worker"));
        };

        // The model profile (AGT-2): workspace-scoped routing metadata.
        let stored = self
            .store
            .model_profile(&run.workspace_id, &spec.model)
            .await
            .map_err(|e| Outcome::fail(RunErrorCode::Internal, e.to_string()))?
            .ok_or_else(|| {
                blocked(
                    RunErrorCode::ModelProfileMissing,
                    format!(
                        "the agent's model profile {:?} does not exist in this workspace; create it with `airlock models put {}`",
                        spec.model, spec.model
                    ),
                )
            })?;
        let (_, profile) = crate::model_profiles::validated(&stored.body).map_err(|m| {
            blocked(
                RunErrorCode::ModelProfileInvalid,
                format!("model profile {:?}: {m}", spec.model),
            )
        })?;
        // An unknown price cannot honour a cost budget (explicit zero
        // prices are how a local model says it is free).
        if let Err(p) = profile.prices.known() {
            return Err(blocked(
                RunErrorCode::ModelPriceUnknown,
                format!(
                    "model profile {:?} has no price for {} tokens, so the agent's cost budget ({} USD) cannot be kept; give the profile [prices] (0 for a local model)",
                    spec.model,
                    p.missing.join(" and "),
                    spec.budgets.cost_usd
                ),
            ));
        }

        // The operator's policy, with the channel secrets that are set.
        let policy = match &a.policy_text {
            Some(text) => {
                let source = self
                    .secrets
                    .channel_source_available(&run.workspace_id, text, &run.id)
                    .await
                    .map_err(|e| Outcome::fail(secret_code(&e), e.to_string()))?;
                Some(Policy::from_toml(text, &source))
            }
            None => None,
        };
        let client = self.model_client(&run, &profile, policy.as_ref()).await?;

        // The worker's egress for its tools: the operator's policy plus the
        // manifest's allow rules, narrowed to the channels it names.
        let m = &a.bundle.manifest;
        let egress = if m.egress.allow.is_empty() && m.egress.channels.is_empty() {
            None
        } else {
            let invalid = |msg: String| Outcome::fail(RunErrorCode::EgressPolicyInvalid, msg);
            let mut p = match policy {
                Some(Ok(p)) => p,
                Some(Err(e)) => return Err(invalid(format!("the operator egress policy: {e}"))),
                None => Policy::default(),
            };
            for rule in &m.egress.allow {
                p.add_allow(rule.as_str())
                    .map_err(|err| invalid(err.to_string()))?;
            }
            let channels: Vec<String> = m
                .egress
                .channels
                .iter()
                .map(|c| c.as_str().to_string())
                .collect();
            if let Some(missing) = channels.iter().find(|c| !p.channels.contains_key(*c)) {
                return Err(invalid(format!(
                    "channel {missing:?} is not configured by the operator"
                )));
            }
            // The model's own channel stays the harness's: a tool that
            // could use it would spend the model's key outside the agent's
            // budgets (and talk to the model without the transcript).
            if let Endpoint::Channel(model_channel) = &profile.endpoint
                && channels.iter().any(|c| c == model_channel)
            {
                return Err(invalid(format!(
                    "the worker's [egress] channels name {model_channel:?}, the channel of its model profile {:?}: its tools could then use the model's key outside the agent's budgets; give tools a channel of their own",
                    spec.model
                )));
            }
            Some(ToolEgress {
                policy: p,
                channels,
                log: self.cfg.egress_log.clone(),
            })
        };

        // Tools: the worker's grants ∩ what its actor may do (AGT-4). The
        // actor's authority was checked by authorise and is checked again
        // before every dispatch.
        let granted: BTreeSet<ActionKind> = spec.tools.iter().map(|t| kind_of(*t)).collect();
        let tools = granted
            .iter()
            .map(|k| ToolDefinition {
                name: k.name().to_string(),
                description: super::prompt::tool_description(*k, m),
                parameters: parameters_for(*k, m),
            })
            .collect();

        let b = &spec.budgets;
        let budgets = airlock_agent::Budgets {
            steps: Some(b.steps),
            tool_calls: Some(b.tool_calls),
            tokens: Some(b.tokens),
            // Nano-dollars, rounded down (never above what was asked).
            cost_nano_usd: Some((b.cost_usd * 1e9).floor() as u64),
            wall_time_ms: Some(b.wall_time_s.saturating_mul(1000)),
            egress_bytes: Some(b.egress_bytes),
        };

        // The work directory: created once, kept across tool calls and
        // restarts until the run ends (finish removes the run folder).
        let work = cx.dir.join("work");
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&work)
                .map_err(|e| {
                    Outcome::fail(
                        RunErrorCode::StagingFailed,
                        format!("cannot create the work directory: {e}"),
                    )
                })?;
        }
        let workdir = WorkDir::open(
            &work,
            WorkDirBudget {
                max_bytes: m.limits.disk_mb << 20,
                max_entries: 10_000,
                max_depth: 32,
            },
        )
        .map_err(|e| {
            Outcome::fail(
                RunErrorCode::StagingFailed,
                format!("cannot open the work directory: {e}"),
            )
        })?;

        let input_taint = (run.trigger == "webhook")
            .then(|| "the run's input (a webhook delivery from outside)".to_string());
        Ok(Agent {
            token: cx.claim.token,
            autonomy: autonomy_of(spec.autonomy),
            bundle: a.bundle,
            spec,
            profile,
            client,
            tools,
            granted,
            budgets,
            work,
            workdir: Arc::new(workdir),
            work_owner: self.launcher.workload_owner(),
            egress,
            input_taint,
            run,
        })
    }

    /// The model client for a profile: its channel's credential from the
    /// operator's policy (trusted side), or a keyless base URL.
    async fn model_client(
        &self,
        run: &Run,
        profile: &ModelProfile,
        policy: Option<&Result<Policy, PolicyError>>,
    ) -> Result<Arc<dyn ModelClient>, Outcome> {
        let missing = |name: String, why: String| async move {
            // AGT-2: audited, and the run says what to fix.
            let _ = self
                .audit(
                    &run.workspace_id,
                    AuditRecord::system("agent.provider_credentials_missing", Some(&run.id))
                        .with_metadata(json!({"channel": name, "reason": why})),
                )
                .await;
            Err(blocked(
                RunErrorCode::ProviderCredentialsMissing,
                format!(
                    "the model profile uses channel {name:?}, which {why}; the operator configures channels and their keys"
                ),
            ))
        };
        let channel = match (&profile.endpoint, policy) {
            (Endpoint::BaseUrl(_), _) => None,
            (Endpoint::Channel(name), None) => {
                return missing(name.clone(), "is not configured (no egress policy)".into()).await;
            }
            (Endpoint::Channel(name), Some(Err(PolicyError::Channel { name: bad, message })))
                if bad == name =>
            {
                return missing(name.clone(), format!("cannot be used ({message})")).await;
            }
            (Endpoint::Channel(_), Some(Err(e))) => {
                return Err(blocked(
                    RunErrorCode::EgressPolicyInvalid,
                    format!("the operator egress policy: {e}"),
                ));
            }
            (Endpoint::Channel(name), Some(Ok(p))) => match p.channels.get(name) {
                Some(c) => Some(c.clone()),
                None => {
                    return missing(
                        name.clone(),
                        "is not in the operator's egress policy".into(),
                    )
                    .await;
                }
            },
        };
        let endpoint = match ModelEndpoint::from_profile(profile, channel.as_ref()) {
            Ok(e) => e,
            Err(EndpointError::CredentialsMissing(name)) => {
                return missing(name, "has no credential".into()).await;
            }
            Err(e) => return Err(blocked(RunErrorCode::ModelProfileInvalid, e.to_string())),
        };
        let mut opts = ClientOptions {
            total_deadline: profile.limits.deadline,
            response_timeout: profile.limits.head_timeout,
            max_response_bytes: profile.limits.max_response_bytes,
            allowed_private: self.cfg.model_allow_private.clone(),
            ..ClientOptions::default()
        };
        match (&profile.endpoint, &channel) {
            (_, Some(c)) => opts = channel_client_options(c, opts),
            (Endpoint::BaseUrl(u), None) => opts.allow_plain_http = u.starts_with("http://"),
            (Endpoint::Channel(_), None) => {}
        }
        let resolver: Arc<dyn airlock_egress::resolve::Resolve> =
            match airlock_egress::resolve::SystemResolver::new() {
                Ok(r) => Arc::new(r),
                Err(e) => {
                    return Err(Outcome::fail(
                        RunErrorCode::ModelFailed,
                        format!("the resolver for model requests: {e}"),
                    ));
                }
            };
        Ok(Arc::new(HttpModelClient::new(
            endpoint,
            OutboundClient::new(resolver, opts),
        )))
    }
}
