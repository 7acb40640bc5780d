//! The Model Context Protocol front end (MCP-1), on the official SDK
//! (`rmcp`): airlock's tools and resources for MCP hosts (Claude Desktop,
//! Cursor, Claude Code, codex).
//!
//! One door: every tool parses its arguments into protocol types, calls
//! one method of [`airlock_service::Service`] with the [`Caller`] the HTTP
//! gate resolved from the request's API key (`airlock_api::app_with_mcp`
//! puts it in the request's extensions), and shapes the answer. Who may
//! do what, quotas, idempotency and the audit of each effect are the
//! service's; this crate adds one audit event per tool call
//! (`mcp.call`: operation, outcome, key id).
//!
//! Served statelessly over streamable HTTP at `/mcp` (no sessions: any
//! web node answers any request, and the 2026-07-28 revision has none);
//! older clients (2025-11-25, 2025-06-18) are answered the same way.
//! `airlock mcp stdio` is a relay to that endpoint and never opens the
//! database.
//!
//! Must not: hold a rule; reach the store; accept a session cookie; show
//! a secret's value.

mod schema;
mod tools;

use std::sync::Arc;

use airlock_service::{Caller, Service};
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    Implementation, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
pub use tokio_util::sync::CancellationToken;

pub use tools::{MAX_ARGUMENT_BYTES, MAX_WAIT};

/// The largest request body the SDK reads (the HTTP front end refuses
/// larger ones first; a call's arguments are bounded again, at
/// [`MAX_ARGUMENT_BYTES`], with a JSON-RPC error).
pub const MAX_BODY_BYTES: usize = 2 << 20;

/// How `/mcp` is reached.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// `Host` values (`name` or `name:port`) answered; others get 403
    /// (DNS rebinding). Empty: loopback names only.
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`scheme://host:port`) answered; a request that
    /// carries any other `Origin` gets 403. Empty: every request with an
    /// `Origin` header is refused (MCP hosts send none).
    pub allowed_origins: Vec<String>,
    /// Ends every open stream when the server stops.
    pub shutdown: CancellationToken,
}

/// The MCP handler: the service, nothing else.
#[derive(Clone)]
pub struct Airlock {
    svc: Arc<Service>,
}

impl std::fmt::Debug for Airlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Airlock(mcp)")
    }
}

impl Airlock {
    pub fn new(svc: Arc<Service>) -> Self {
        Self { svc }
    }
}

/// The streamable HTTP service to mount at `/mcp` behind the gate.
pub fn http_service(
    svc: Arc<Service>,
    opts: HttpOptions,
) -> StreamableHttpService<Airlock, NeverSessionManager> {
    let hosts = if opts.allowed_hosts.is_empty() {
        vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
    } else {
        opts.allowed_hosts
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_allowed_hosts(hosts)
        .with_allowed_origins(opts.allowed_origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(opts.shutdown);
    StreamableHttpService::new(
        move || Ok(Airlock::new(svc.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The caller the gate put in the request; its absence is a wiring bug
/// (the service is mounted only behind the gate), answered as an error.
fn caller(ctx: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
    ctx.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("no authenticated caller", None))
}

/// Progress of one call, when the client asked for it (`progressToken`).
pub(crate) struct Progress {
    to: Option<(Peer<RoleServer>, ProgressToken)>,
    cancel: CancellationToken,
}

impl Progress {
    fn of(ctx: &RequestContext<RoleServer>) -> Self {
        Self {
            to: ctx.meta.get_progress_token().map(|t| (ctx.peer.clone(), t)),
            cancel: ctx.ct.clone(),
        }
    }

    /// One notification; a client that went away is not an error of the
    /// call (the wait ends by cancellation or its deadline).
    pub(crate) async fn send(&self, step: u64, events: usize, state: airlock_protocol::RunState) {
        if let Some((peer, token)) = &self.to {
            let p = ProgressNotificationParam::new(token.clone(), step as f64)
                .with_message(format!("{state}; {events} event(s)"));
            let _ = peer.notify_progress(p).await;
        }
    }

    pub(crate) fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    pub(crate) async fn wait_cancelled(&self) {
        self.cancel.cancelled().await
    }
}

fn tool_of(spec: &tools::ToolSpec) -> Tool {
    Tool::new(spec.name, spec.description, (spec.input)())
        .with_title(spec.title)
        .with_raw_output_schema((spec.output)())
        .with_annotations(spec.annotations())
}

fn refused(e: &airlock_protocol::Error) -> CallToolResult {
    let body = serde_json::json!({"error": {"code": e.code, "message": e.public_message()}});
    CallToolResult::error(vec![ContentBlock::text(body.to_string())])
}

const RUN_PREFIX: &str = "airlock://runs/";

impl Airlock {
    /// The call's audit event. A call whose record cannot be written is
    /// answered with an error (its own effects, if any, were audited by
    /// the service already).
    async fn audited(
        &self,
        c: &Caller,
        operation: &str,
        refusal: Option<&airlock_protocol::Error>,
    ) -> Result<(), ErrorData> {
        let outcome = refusal.map_or(Ok(()), Err);
        self.svc
            .audit_front_end_call(c, "mcp", operation, outcome)
            .await
            .map_err(|e| ErrorData::internal_error(format!("audit: {}", e.message), None))
    }
}

impl ServerHandler for Airlock {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(
            Implementation::new("airlock", env!("CARGO_PKG_VERSION")).with_title("airlock"),
        )
        .with_instructions(
            "airlock runs workers (scripts and AI agents) in a sandbox. list_workers, describe_worker, \
             then start_run with a fresh idempotency_key and watch it with get_run (it waits up to 50 s \
             per call). Risky agent actions wait for a person's approval.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let c = caller(&ctx)?;
        let tools = tools::TOOLS
            .iter()
            .filter(|t| c.may(t.operation))
            .map(tool_of)
            .collect();
        Ok(ListToolsResult::with_all_items(tools)
            .with_cache_scope(CacheScope::Private)
            .with_ttl_ms(0))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::find(name).map(tool_of)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let c = caller(&ctx)?;
        let Some(spec) = tools::find(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!("no tool {:?}", request.name),
                None,
            ));
        };
        let size = request
            .arguments
            .as_ref()
            .map_or(0, |a| serde_json::to_vec(a).map_or(usize::MAX, |v| v.len()));
        if size > MAX_ARGUMENT_BYTES {
            return Err(ErrorData::invalid_params(
                format!("arguments are at most {MAX_ARGUMENT_BYTES} bytes as JSON"),
                None,
            ));
        }
        let progress = Progress::of(&ctx);
        let outcome = tools::call(&self.svc, &c, spec, request.arguments, &progress).await?;
        let (result, refusal) = match outcome {
            tools::Outcome::Ok(v) => (CallToolResult::structured(v), None),
            tools::Outcome::Refused(e) => (refused(&e), Some(e)),
        };
        self.audited(&c, spec.name, refusal.as_ref()).await?;
        Ok(result.into())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new("airlock://runs/{run_id}", "run")
                .with_description("A run: state, outputs, artifacts (JSON)")
                .with_mime_type("application/json"),
            ResourceTemplate::new("airlock://runs/{run_id}/log", "run log")
                .with_description("A run's log as text (redacted when stored)")
                .with_mime_type("text/plain"),
        ]))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let c = caller(&ctx)?;
        let q = airlock_protocol::runs::ListRuns {
            state: None,
            limit: Some(20),
            cursor: None,
            ..Default::default()
        };
        let runs = match self.svc.list_runs(&c, &q).await {
            Ok(l) => l.runs,
            // Not allowed to read runs: nothing to list.
            Err(e) if e.code == airlock_protocol::ErrorCode::Forbidden => Vec::new(),
            Err(e) => {
                return Err(ErrorData::internal_error(
                    e.public_message().to_string(),
                    None,
                ));
            }
        };
        let resources = runs
            .iter()
            .map(|r| {
                Resource::new(
                    format!("{RUN_PREFIX}{}", r.id),
                    format!("run {} of {} ({})", r.id, r.worker_id, r.state),
                )
                .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources).with_cache_scope(CacheScope::Private))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let c = caller(&ctx)?;
        let uri = request.uri.clone();
        let not_found = || ErrorData::resource_not_found(format!("no resource {uri}"), None);
        // Missing or not the caller's: the same answer; anything else is
        // the server's failure, said as such.
        let refused = |e: airlock_protocol::Error| match e.code {
            airlock_protocol::ErrorCode::NotFound | airlock_protocol::ErrorCode::Forbidden => {
                not_found()
            }
            _ => ErrorData::internal_error(e.public_message().to_string(), None),
        };
        let rest = uri.strip_prefix(RUN_PREFIX).ok_or_else(not_found)?;
        let (run_id, log) = match rest.strip_suffix("/log") {
            Some(id) => (id, true),
            None => (rest, false),
        };
        if run_id.is_empty() || run_id.contains('/') {
            return Err(not_found());
        }
        let contents = if log {
            let text = self.svc.run_log(&c, run_id).await.map_err(refused)?;
            ResourceContents::text(text, uri.clone()).with_mime_type("text/plain")
        } else {
            let d = self.svc.run_detail(&c, run_id).await.map_err(refused)?;
            let text = serde_json::to_string(&d)
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            ResourceContents::text(text, uri.clone()).with_mime_type("application/json")
        };
        self.audited(&c, "read_resource", None).await?;
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}
