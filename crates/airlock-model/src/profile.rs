//! Model profiles: a workspace's routing metadata for one model (wire
//! format, where to send requests, the model id, prices, limits), parsed
//! from TOML or JSON and validated into a [`ModelProfile`].
//!
//! A profile never holds a credential. It names either a credential
//! channel of the operator's egress policy (`channel`, the usual case: the
//! key stays a deployment secret) or a keyless `base_url` (a local
//! llama.cpp or vLLM server), which is then a user-supplied URL and goes
//! through the outbound client's address classification like any other.
//! Storing profiles per workspace is the service's job, not this module's.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::response::Usage;

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WireFormat {
    /// `POST {base}/v1/chat/completions` (OpenAI, OpenRouter, vLLM, Ollama,
    /// llama.cpp server, LM Studio).
    #[serde(rename = "openai-chat")]
    OpenAiChat,
    /// `POST {base}/v1/responses` (OpenAI).
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// `POST {base}/v1/messages` (Anthropic).
    #[serde(rename = "anthropic-messages")]
    AnthropicMessages,
}

impl WireFormat {
    pub const ALL: [WireFormat; 3] = [
        WireFormat::OpenAiChat,
        WireFormat::OpenAiResponses,
        WireFormat::AnthropicMessages,
    ];

    /// The request path below the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Self::OpenAiChat => "/v1/chat/completions",
            Self::OpenAiResponses => "/v1/responses",
            Self::AnthropicMessages => "/v1/messages",
        }
    }

    /// The name used in profiles.
    pub fn name(self) -> &'static str {
        match self {
            Self::OpenAiChat => "openai-chat",
            Self::OpenAiResponses => "openai-responses",
            Self::AnthropicMessages => "anthropic-messages",
        }
    }
}

/// Where requests go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// A credential channel of the operator's egress policy: its upstream
    /// origin is the base URL and its header carries the credential.
    Channel(String),
    /// A keyless server at this origin (optionally with a path prefix, as
    /// in `https://openrouter.ai/api`), without the `/v1/...` part.
    BaseUrl(String),
}

/// A price in nano-dollars (1e-9 USD) per million tokens: integers, so
/// budgets add up exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Price(pub u64);

impl Price {
    /// From US dollars per million tokens (finite, 0 to 100 000).
    pub fn from_usd_per_mtok(usd: f64) -> Option<Self> {
        if !usd.is_finite() || !(0.0..=100_000.0).contains(&usd) {
            return None;
        }
        // At most 1e14, exact in f64 and in u64.
        Some(Self((usd * 1e9).round() as u64))
    }

    pub fn usd_per_mtok(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// Nano-dollars for `tokens` tokens, rounded up (never under-counts).
    fn cost(self, tokens: u64) -> u128 {
        (u128::from(tokens) * u128::from(self.0)).div_ceil(1_000_000)
    }
}

/// A profile's prices. `input` and `output` are required for a cost; an
/// absent `cached_input` is charged as `input` and an absent `reasoning`
/// as `output` (both the conservative choice: never below the real cost
/// when the provider bills that way).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prices {
    pub input: Option<Price>,
    pub cached_input: Option<Price>,
    pub output: Option<Price>,
    pub reasoning: Option<Price>,
}

/// An amount of money in nano-dollars.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Cost(pub u64);

impl Cost {
    pub fn usd(self) -> f64 {
        self.0 as f64 / 1e9
    }
    pub fn saturating_add(self, other: Cost) -> Cost {
        Cost(self.0.saturating_add(other.0))
    }
}

/// A cost could not be computed: the profile does not say what these
/// cost. The harness refuses a cost budget for such a profile unless the
/// operator overrides it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no price for {missing:?} tokens in this model profile")]
pub struct PriceUnknown {
    pub missing: Vec<&'static str>,
}

impl Prices {
    /// Ok when a cost can be computed for any usage.
    pub fn known(&self) -> Result<(), PriceUnknown> {
        let mut missing = Vec::new();
        if self.input.is_none() {
            missing.push("input");
        }
        if self.output.is_none() {
            missing.push("output");
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(PriceUnknown { missing })
        }
    }

    /// The cost of one response's usage: uncached input, cached input,
    /// visible output and reasoning output each at their price.
    pub fn cost(&self, usage: &Usage) -> Result<Cost, PriceUnknown> {
        self.known()?;
        let (Some(input), Some(output)) = (self.input, self.output) else {
            return Err(PriceUnknown {
                missing: vec!["input", "output"],
            });
        };
        let cached = self.cached_input.unwrap_or(input);
        let reasoning = self.reasoning.unwrap_or(output);
        let cached_tokens = usage.cached_input_tokens.min(usage.input_tokens);
        let reasoning_tokens = usage.reasoning_tokens.min(usage.output_tokens);
        let total = input.cost(usage.input_tokens - cached_tokens)
            + cached.cost(cached_tokens)
            + output.cost(usage.output_tokens - reasoning_tokens)
            + reasoning.cost(reasoning_tokens);
        Ok(Cost(u64::try_from(total).unwrap_or(u64::MAX)))
    }
}

/// Limits of one model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Sending the request to the response head. A non-streaming request
    /// must be fully generated within it.
    pub head_timeout: Duration,
    /// The longest silence inside a stream.
    pub idle_timeout: Duration,
    /// One attempt, connect to last byte.
    pub deadline: Duration,
    /// Bytes of one response body.
    pub max_response_bytes: usize,
    /// Bytes of one tool call's arguments.
    pub max_argument_bytes: usize,
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            head_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(300),
            deadline: Duration::from_secs(600),
            max_response_bytes: 8 << 20,
            max_argument_bytes: 1 << 20,
        }
    }
}

/// Retry bounds (the backoff itself is in [`crate::retry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryLimits {
    /// Requests in total, the first one included.
    pub max_attempts: u32,
    /// Total time spent waiting between attempts.
    pub max_wait: Duration,
}

impl Default for RetryLimits {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            max_wait: Duration::from_secs(120),
        }
    }
}

/// Which field carries the output limit on Chat Completions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_tokens`: every compatible server understands it.
    #[default]
    MaxTokens,
    /// `max_completion_tokens`: what OpenAI's reasoning models require.
    MaxCompletionTokens,
}

/// Differences between Chat Completions servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compat {
    pub max_tokens_field: MaxTokensField,
    /// Ask for usage in the stream (`stream_options.include_usage`).
    pub stream_usage: bool,
}

impl Default for Compat {
    fn default() -> Self {
        Self {
            max_tokens_field: MaxTokensField::MaxTokens,
            stream_usage: true,
        }
    }
}

/// A validated model profile.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelProfile {
    pub format: WireFormat,
    pub endpoint: Endpoint,
    pub model: String,
    pub max_output_tokens: u32,
    pub temperature: Option<f32>,
    pub stream: bool,
    pub parallel_tool_calls: Option<bool>,
    /// `auto` (default) or `required`: whether every answer must call a
    /// tool. An agent always ends with the `finish` tool, so `required`
    /// suits models that drift into prose (small local models).
    pub tool_choice: crate::ToolChoice,
    pub prices: Prices,
    pub limits: CallLimits,
    pub retry: RetryLimits,
    pub compat: Compat,
}

/// Why a profile was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("model profile is not valid {format}: {message}")]
    Syntax {
        format: &'static str,
        message: String,
    },
    #[error("model profile field {field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

/// The written form (TOML or JSON; the same fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    pub format: Option<WireFormat>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<crate::ToolChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<PricesFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<CompatFile>,
}

/// US dollars per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PricesFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_argument_bytes: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retry_wait_s: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompatFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<MaxTokensField>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_usage: Option<bool>,
}

fn invalid(field: &'static str, message: impl Into<String>) -> ProfileError {
    ProfileError::Invalid {
        field,
        message: message.into(),
    }
}

/// Checks a base URL: `https://` (or `http://`) origin with an optional
/// path prefix; no user info, query, fragment, backslash, percent-encoding
/// or `..`; the authority parsed by the egress crate's strict parser.
/// Answers it without a trailing slash.
pub fn check_base_url(url: &str) -> Result<String, String> {
    let (rest, default_port) = if let Some(r) = url.strip_prefix("https://") {
        (r, 443)
    } else if let Some(r) = url.strip_prefix("http://") {
        (r, 80)
    } else {
        return Err("must start with https:// (or http:// for a local server)".into());
    };
    if url.len() > 2048 {
        return Err("is longer than 2048 bytes".into());
    }
    if rest.contains(['?', '#', '\\', '%']) || rest.chars().any(|c| c.is_control() || c == ' ') {
        return Err(
            "may not contain a query, fragment, backslash, '%', space or control character".into(),
        );
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    airlock_egress::authority::parse_authority(authority, Some(default_port))
        .map_err(|e| format!("authority {authority:?}: {e}"))?;
    let path = path.trim_end_matches('/');
    if path.split('/').any(|seg| seg == "..") || path.contains("//") {
        return Err("path may not contain '..' or '//'".into());
    }
    if path.ends_with("/v1") || path.contains("/chat/completions") || path.ends_with("/messages") {
        return Err("give the server's base without /v1/…: the format adds its own path".into());
    }
    Ok(format!(
        "{}{}",
        &url[..url.len() - rest.len()],
        &rest[..authority.len()]
    ) + path)
}

/// True for a name the egress policy accepts for a channel.
fn valid_channel_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

fn toml_line(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("{} (line {line})", e.message().trim_end())
        }
        None => e.message().trim_end().to_string(),
    }
}

impl ModelProfile {
    pub fn from_toml(text: &str) -> Result<Self, ProfileError> {
        let file: ProfileFile = toml::from_str(text).map_err(|e| ProfileError::Syntax {
            format: "TOML",
            message: toml_line(text, &e),
        })?;
        Self::from_file(file)
    }

    pub fn from_json(text: &str) -> Result<Self, ProfileError> {
        let file: ProfileFile = serde_json::from_str(text).map_err(|e| ProfileError::Syntax {
            format: "JSON",
            message: e.to_string(),
        })?;
        Self::from_file(file)
    }

    /// Validates the written form.
    pub fn from_file(f: ProfileFile) -> Result<Self, ProfileError> {
        let format = f.format.ok_or_else(|| {
            invalid(
                "format",
                "is required (openai-chat, openai-responses or anthropic-messages)",
            )
        })?;
        let endpoint = match (f.channel, f.base_url) {
            (Some(c), None) => {
                if !valid_channel_name(&c) {
                    return Err(invalid(
                        "channel",
                        format!(
                            "{c:?}: channel names are lowercase letters, digits and '_', starting with a letter"
                        ),
                    ));
                }
                Endpoint::Channel(c)
            }
            (None, Some(u)) => Endpoint::BaseUrl(
                check_base_url(&u).map_err(|m| invalid("base_url", format!("{u:?} {m}")))?,
            ),
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "channel",
                    "give either channel or base_url, not both",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "channel",
                    "a profile needs a channel (for a provider with a key) or a base_url (a keyless server)",
                ));
            }
        };
        let model = f.model.ok_or_else(|| invalid("model", "is required"))?;
        if model.is_empty() || model.len() > 256 || model.chars().any(char::is_control) {
            return Err(invalid("model", "must be 1 to 256 printable characters"));
        }
        let max_output_tokens = f.max_output_tokens.unwrap_or(4096);
        if !(1..=1_000_000).contains(&max_output_tokens) {
            return Err(invalid(
                "max_output_tokens",
                "must be between 1 and 1000000",
            ));
        }
        let temperature = match f.temperature {
            None => None,
            Some(t) if t.is_finite() && (0.0..=2.0).contains(&t) => Some(t as f32),
            Some(t) => {
                return Err(invalid(
                    "temperature",
                    format!("{t} is not between 0 and 2"),
                ));
            }
        };
        let prices = match f.prices {
            None => Prices::default(),
            Some(p) => {
                let one = |field: &'static str,
                           v: Option<f64>|
                 -> Result<Option<Price>, ProfileError> {
                    v.map(|usd| {
                        Price::from_usd_per_mtok(usd).ok_or_else(|| {
                            invalid(field, format!("{usd} is not a price between 0 and 100000 USD per million tokens"))
                        })
                    })
                    .transpose()
                };
                Prices {
                    input: one("prices.input", p.input)?,
                    cached_input: one("prices.cached_input", p.cached_input)?,
                    output: one("prices.output", p.output)?,
                    reasoning: one("prices.reasoning", p.reasoning)?,
                }
            }
        };
        let l = f.limits.unwrap_or_default();
        let d = CallLimits::default();
        let secs = |field: &'static str,
                    v: Option<u64>,
                    default: Duration|
         -> Result<Duration, ProfileError> {
            match v {
                None => Ok(default),
                Some(s) if (1..=3600).contains(&s) => Ok(Duration::from_secs(s)),
                Some(s) => Err(invalid(
                    field,
                    format!("{s} is not between 1 and 3600 seconds"),
                )),
            }
        };
        let bytes = |field: &'static str,
                     v: Option<usize>,
                     default: usize,
                     max: usize|
         -> Result<usize, ProfileError> {
            match v {
                None => Ok(default),
                Some(b) if (1024..=max).contains(&b) => Ok(b),
                Some(b) => Err(invalid(
                    field,
                    format!("{b} is not between 1024 and {max} bytes"),
                )),
            }
        };
        let limits = CallLimits {
            head_timeout: secs("limits.head_timeout_s", l.head_timeout_s, d.head_timeout)?,
            idle_timeout: secs("limits.idle_timeout_s", l.idle_timeout_s, d.idle_timeout)?,
            deadline: secs("limits.deadline_s", l.deadline_s, d.deadline)?,
            max_response_bytes: bytes(
                "limits.max_response_bytes",
                l.max_response_bytes,
                d.max_response_bytes,
                256 << 20,
            )?,
            max_argument_bytes: bytes(
                "limits.max_argument_bytes",
                l.max_argument_bytes,
                d.max_argument_bytes,
                64 << 20,
            )?,
        };
        if limits.max_argument_bytes > limits.max_response_bytes {
            return Err(invalid(
                "limits.max_argument_bytes",
                "may not be larger than limits.max_response_bytes",
            ));
        }
        let rd = RetryLimits::default();
        let retry = RetryLimits {
            max_attempts: match l.max_attempts {
                None => rd.max_attempts,
                Some(n) if (1..=10).contains(&n) => n,
                Some(n) => {
                    return Err(invalid(
                        "limits.max_attempts",
                        format!("{n} is not between 1 and 10"),
                    ));
                }
            },
            max_wait: match l.max_retry_wait_s {
                None => rd.max_wait,
                Some(s) if s <= 3600 => Duration::from_secs(s),
                Some(s) => {
                    return Err(invalid(
                        "limits.max_retry_wait_s",
                        format!("{s} is more than 3600 seconds"),
                    ));
                }
            },
        };
        let c = f.compat.unwrap_or_default();
        if format != WireFormat::OpenAiChat
            && (c.max_tokens_field.is_some() || c.stream_usage.is_some())
        {
            return Err(invalid("compat", "applies to the openai-chat format only"));
        }
        let dc = Compat::default();
        Ok(Self {
            format,
            endpoint,
            model,
            max_output_tokens,
            temperature,
            stream: f.stream.unwrap_or(true),
            parallel_tool_calls: f.parallel_tool_calls,
            tool_choice: match f.tool_choice {
                None | Some(crate::ToolChoice::Auto) => crate::ToolChoice::Auto,
                Some(crate::ToolChoice::Required) => crate::ToolChoice::Required,
                Some(crate::ToolChoice::None) => {
                    return Err(invalid(
                        "tool_choice",
                        "is auto or required (an agent needs its tools)",
                    ));
                }
            },
            prices,
            limits,
            retry,
            compat: Compat {
                max_tokens_field: c.max_tokens_field.unwrap_or(dc.max_tokens_field),
                stream_usage: c.stream_usage.unwrap_or(dc.stream_usage),
            },
        })
    }

    /// A request for this profile's model, with its parameters set.
    pub fn request(
        &self,
        messages: Vec<crate::Message>,
        tools: Vec<crate::ToolDefinition>,
    ) -> crate::ModelRequest {
        crate::ModelRequest {
            model: self.model.clone(),
            messages,
            tools,
            tool_choice: self.tool_choice,
            parallel_tool_calls: self.parallel_tool_calls,
            max_output_tokens: self.max_output_tokens,
            temperature: self.temperature,
            stream: self.stream,
        }
    }

    /// The cost of a usage at this profile's prices.
    pub fn cost(&self, usage: &Usage) -> Result<Cost, PriceUnknown> {
        self.prices.cost(usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
format = "openai-chat"
channel = "openai"
model = "gpt-4.1-mini"
max_output_tokens = 2048
temperature = 0.2
stream = false
parallel_tool_calls = true

[prices]
input = 0.40
cached_input = 0.10
output = 1.60

[limits]
idle_timeout_s = 60
max_attempts = 3

[compat]
max_tokens_field = "max_completion_tokens"
"#;

    #[test]
    fn agt_2_profile_parses_from_toml_and_json_alike() {
        let p = ModelProfile::from_toml(FULL).expect("valid");
        assert_eq!(p.format, WireFormat::OpenAiChat);
        assert_eq!(p.endpoint, Endpoint::Channel("openai".into()));
        assert_eq!(p.max_output_tokens, 2048);
        assert!(!p.stream);
        assert_eq!(p.prices.input, Some(Price(400_000_000)));
        assert_eq!(p.prices.reasoning, None);
        assert_eq!(p.limits.idle_timeout, Duration::from_secs(60));
        assert_eq!(p.limits.head_timeout, CallLimits::default().head_timeout);
        assert_eq!(p.retry.max_attempts, 3);
        assert_eq!(
            p.compat.max_tokens_field,
            MaxTokensField::MaxCompletionTokens
        );
        let file: ProfileFile = toml::from_str(FULL).expect("toml");
        let json = serde_json::to_string(&file).expect("json");
        assert_eq!(ModelProfile::from_json(&json), Ok(p));
        let local = ModelProfile::from_json(
            r#"{"format": "anthropic-messages", "base_url": "http://127.0.0.1:8080/", "model": "smollm2"}"#,
        )
        .expect("valid");
        assert_eq!(
            local.endpoint,
            Endpoint::BaseUrl("http://127.0.0.1:8080".into())
        );
        assert!(local.prices.known().is_err(), "no prices: unknown");
        let prefixed = ModelProfile::from_toml(
            "format = \"openai-chat\"\nbase_url = \"https://openrouter.ai/api\"\nmodel = \"x\"\n",
        )
        .expect("valid");
        assert_eq!(
            prefixed.endpoint,
            Endpoint::BaseUrl("https://openrouter.ai/api".into())
        );
    }

    #[test]
    fn agt_2_tool_choice_reaches_the_request() {
        let base = "format = \"openai-chat\"\nmodel = \"m\"\nchannel = \"c\"\n";
        let auto = ModelProfile::from_toml(base).expect("valid");
        assert_eq!(
            auto.request(vec![], vec![]).tool_choice,
            crate::ToolChoice::Auto
        );
        let required =
            ModelProfile::from_toml(&format!("{base}tool_choice = \"required\"\n")).expect("valid");
        assert_eq!(
            required.request(vec![], vec![]).tool_choice,
            crate::ToolChoice::Required
        );
    }

    #[test]
    fn agt_2_profile_refusals_name_the_field() {
        let base = "format = \"openai-chat\"\nmodel = \"m\"\n";
        let cases: &[(&str, &str)] = &[
            ("model = \"m\"\nchannel = \"c\"\n", "format"),
            ("format = \"openai-chat\"\nchannel = \"c\"\n", "model"),
            (base, "channel"),
            (
                &format!("{base}channel = \"c\"\nbase_url = \"https://x.example\"\n"),
                "both",
            ),
            (&format!("{base}channel = \"Bad-Name\"\n"), "channel"),
            (
                &format!("{base}base_url = \"ftp://x.example\"\n"),
                "base_url",
            ),
            (
                &format!("{base}base_url = \"https://user@x.example\"\n"),
                "base_url",
            ),
            (
                &format!("{base}base_url = \"https://x.example/v1\"\n"),
                "without /v1",
            ),
            (
                &format!("{base}base_url = \"https://x.example/a/../b\"\n"),
                "base_url",
            ),
            (
                &format!("{base}base_url = \"https://x.example?q=1\"\n"),
                "base_url",
            ),
            (
                &format!("{base}channel = \"c\"\ntemperature = 3.0\n"),
                "temperature",
            ),
            (
                &format!("{base}channel = \"c\"\ntool_choice = \"none\"\n"),
                "tool_choice",
            ),
            (
                &format!("{base}channel = \"c\"\nmax_output_tokens = 0\n"),
                "max_output_tokens",
            ),
            (
                &format!("{base}channel = \"c\"\n[prices]\ninput = -1.0\n"),
                "prices.input",
            ),
            (
                &format!("{base}channel = \"c\"\n[prices]\noutput = nan\n"),
                "prices.output",
            ),
            (
                &format!("{base}channel = \"c\"\n[limits]\nidle_timeout_s = 0\n"),
                "limits.idle_timeout_s",
            ),
            (
                &format!("{base}channel = \"c\"\n[limits]\nmax_attempts = 50\n"),
                "limits.max_attempts",
            ),
            (
                &format!(
                    "{base}channel = \"c\"\n[limits]\nmax_response_bytes = 2048\nmax_argument_bytes = 4096\n"
                ),
                "max_argument_bytes",
            ),
            (
                &format!("{base}channel = \"c\"\nunknown = 1\n"),
                "unknown field",
            ),
            (
                &format!("{base}channel = \"c\"\n[prices]\ninptu = 1.0\n"),
                "unknown field",
            ),
            (
                "format = \"gemini\"\nmodel = \"m\"\nchannel = \"c\"\n",
                "unknown variant",
            ),
            (
                "format = \"anthropic-messages\"\nmodel = \"m\"\nchannel = \"c\"\n[compat]\nstream_usage = false\n",
                "compat",
            ),
            ("format = = 1", "line 1"),
        ];
        for (text, want) in cases {
            let e = ModelProfile::from_toml(text).expect_err(text).to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        // Positive control: the base passes with a channel.
        assert!(ModelProfile::from_toml(&format!("{base}channel = \"c\"\n")).is_ok());
    }

    #[test]
    fn agt_2_cost_from_the_price_table() {
        let p = Prices {
            input: Price::from_usd_per_mtok(3.0),
            cached_input: Price::from_usd_per_mtok(0.3),
            output: Price::from_usd_per_mtok(15.0),
            reasoning: Price::from_usd_per_mtok(10.0),
        };
        let u = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 400_000,
            output_tokens: 200_000,
            reasoning_tokens: 50_000,
        };
        // 0.6M × 3 + 0.4M × 0.3 + 0.15M × 15 + 0.05M × 10 = 1.8 + 0.12 + 2.25 + 0.5
        assert_eq!(p.cost(&u), Ok(Cost(4_670_000_000)));
        // Defaults: cached at the input price, reasoning at the output price.
        let plain = Prices {
            cached_input: None,
            reasoning: None,
            ..p
        };
        // 1M × 3 + 0.2M × 15 = 6
        assert_eq!(plain.cost(&u), Ok(Cost(6_000_000_000)));
        // Rounded up: one token at 0.05 USD/M is 50 nano-dollars, a third is 17.
        let cheap = Prices {
            input: Price::from_usd_per_mtok(0.00005),
            output: Price::from_usd_per_mtok(0.0),
            ..Prices::default()
        };
        let one = Usage {
            input_tokens: 1,
            ..Usage::default()
        };
        assert_eq!(cheap.cost(&one), Ok(Cost(1)));
        // Unknown prices are reported, naming what is missing.
        let unknown = Prices { output: None, ..p };
        assert_eq!(
            unknown.cost(&u),
            Err(PriceUnknown {
                missing: vec!["output"]
            })
        );
        assert_eq!(
            Prices::default().known(),
            Err(PriceUnknown {
                missing: vec!["input", "output"]
            })
        );
        // Inconsistent usage (cached > input) never underflows.
        let odd = Usage {
            input_tokens: 10,
            cached_input_tokens: 20,
            output_tokens: 1,
            reasoning_tokens: 5,
        };
        assert!(p.cost(&odd).is_ok());
    }
}
