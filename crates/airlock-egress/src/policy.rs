//! Egress policy (NET-2, NET-3): loaded and validated before any listener
//! opens. Anything wrong — a missing file, a syntax error, an unknown field,
//! `*` or `*.tld`, a CIDR that covers a metadata address — means the proxy
//! denies everything with reason `no_policy`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::authority::{self, Host};
use crate::classify::{self, AddrClass};

/// Reason code when no valid policy is loaded.
pub const NO_POLICY: &str = "no_policy";

/// A host pattern: an exact name, or every name strictly below a suffix
/// (`*.example.com` matches `a.example.com`, never `example.com`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    Suffix(String),
}

impl HostPattern {
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Self::Exact(n) => n == name,
            Self::Suffix(s) => name
                .strip_suffix(s.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }
}

/// An IP network (`base/prefix`), parsed strictly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub base: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Self, String> {
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, p),
            None => (s, if s.contains(':') { "128" } else { "32" }),
        };
        let base: IpAddr = ip
            .parse()
            .map_err(|_| format!("{s:?} is not an IP network"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= if base.is_ipv4() { 32 } else { 128 })
            .ok_or_else(|| format!("{s:?} has an invalid prefix length"))?;
        let cidr = Self { base, prefix };
        if cidr.network() != base {
            return Err(format!("{s:?} has host bits set"));
        }
        Ok(cidr)
    }

    fn network(&self) -> IpAddr {
        match self.base {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(self.prefix))
                };
                IpAddr::V4((bits & mask).into())
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(self.prefix))
                };
                IpAddr::V6((bits & mask).into())
            }
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let other = Cidr {
            base: ip,
            prefix: self.prefix,
        };
        ip.is_ipv4() == self.base.is_ipv4() && other.network() == self.base
    }
}

/// One allow rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Host {
        pattern: HostPattern,
        ports: Vec<u16>,
        /// Plain HTTP allowed (otherwise only CONNECT).
        http: bool,
    },
    Cidr {
        net: Cidr,
        ports: Vec<u16>,
        http: bool,
    },
}

impl Rule {
    pub fn label(&self) -> String {
        match self {
            Rule::Host {
                pattern: HostPattern::Exact(n),
                ..
            } => n.clone(),
            Rule::Host {
                pattern: HostPattern::Suffix(s),
                ..
            } => format!("*.{s}"),
            Rule::Cidr { net, .. } => {
                // Written without `format!`: a CIDR rule's label is built for every request it
                // allows.
                let mut label = crate::authority::ip_string(net.base);
                label.push('/');
                label.push_str(itoa::Buffer::new().format(net.prefix));
                label
            }
        }
    }
    fn ports(&self) -> &[u16] {
        match self {
            Rule::Host { ports, .. } | Rule::Cidr { ports, .. } => ports,
        }
    }
    pub fn allows_port(&self, port: u16) -> bool {
        self.ports().contains(&port)
    }
    pub fn http(&self) -> bool {
        match self {
            Rule::Host { http, .. } | Rule::Cidr { http, .. } => *http,
        }
    }
}

/// A credential that must never be printed, logged or serialised.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential(String);

impl Credential {
    /// Wraps a value resolved on the trusted side (a channel's header value,
    /// a model provider key).
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential([REDACTED])")
    }
}

/// A credential channel (NET-6).
#[derive(Debug, Clone)]
pub struct Channel {
    pub name: String,
    /// `https://host[:port]` (or `http://` on loopback with the test flag).
    pub scheme_https: bool,
    pub host: Host,
    pub port: u16,
    pub header: http::HeaderName,
    pub value: Credential,
    /// The raw secret inside `value`, scrubbed from responses and logs.
    pub secret: Credential,
    /// Every form of `secret` (raw, JSON-escaped, percent-encoded, hex, base64), found in
    /// response headers and bodies and replaced there (NET-6).
    pub scrub: Arc<airlock_redact::Patterns>,
    pub methods: Vec<http::Method>,
    pub path_prefixes: Vec<String>,
    pub insecure_upstream_for_tests: bool,
}

/// Limits per connection and per sandbox (NET-7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub tunnel_lifetime: Duration,
    pub header_read_timeout: Duration,
    pub max_bytes_per_connection: u64,
    pub max_bytes_per_sandbox: u64,
    pub max_concurrent_tunnels: usize,
    /// Client connections served as HTTP at once on one sandbox's listener
    /// (a connection that became a tunnel counts against
    /// `max_concurrent_tunnels` instead). Past it, a new connection's
    /// requests are answered 429 `too_many_connections` and it is closed;
    /// past 17 times it, a new connection is closed unanswered. Either way
    /// the proxy's open sockets stay bounded whatever a sandbox opens.
    pub max_connections: usize,
    pub max_requests_per_second: u32,
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            tunnel_lifetime: Duration::from_secs(3600),
            header_read_timeout: Duration::from_secs(10),
            max_bytes_per_connection: 1 << 30,
            max_bytes_per_sandbox: 4 << 30,
            max_concurrent_tunnels: 64,
            max_connections: 256,
            max_requests_per_second: 100,
            max_header_bytes: 16 * 1024,
        }
    }
}

/// A validated policy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub rules: Vec<Rule>,
    pub hosts: BTreeMap<String, Vec<IpAddr>>,
    pub channels: BTreeMap<String, Channel>,
    pub limits: Limits,
}

/// Why a policy was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read policy {path}: {error}")]
    Read { path: String, error: String },
    #[error("policy is not valid TOML or has an unknown field: {0}")]
    Syntax(String),
    #[error("rule {index}: {message}")]
    Rule { index: usize, message: String },
    #[error("hosts entry {name:?}: {message}")]
    Hosts { name: String, message: String },
    #[error("channel {name:?}: {message}")]
    Channel { name: String, message: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    allow: Vec<RuleFile>,
    #[serde(default)]
    hosts: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    channels: BTreeMap<String, ChannelFile>,
    #[serde(default)]
    limits: LimitsFile,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    host: Option<String>,
    cidr: Option<String>,
    #[serde(default)]
    ports: Vec<u16>,
    #[serde(default)]
    http: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelFile {
    upstream: String,
    header: String,
    /// Template with exactly one `${env:NAME}` or `${file:/path}` reference.
    value: String,
    #[serde(default)]
    methods: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    insecure_upstream_for_tests: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFile {
    connect_timeout_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
    tunnel_lifetime_s: Option<u64>,
    header_read_timeout_ms: Option<u64>,
    max_bytes_per_connection: Option<u64>,
    max_bytes_per_sandbox: Option<u64>,
    max_concurrent_tunnels: Option<usize>,
    max_connections: Option<usize>,
    max_requests_per_second: Option<u32>,
    max_header_bytes: Option<usize>,
}

/// Where channel secrets are read from (trusted side only; never the sandbox).
pub trait SecretSource {
    fn get(&self, reference: &str) -> Option<String>;
}

/// `${env:NAME}` from this process's environment, `${file:/path}` from a file.
#[derive(Debug, Default, Clone, Copy)]
pub struct EnvAndFiles;

impl SecretSource for EnvAndFiles {
    fn get(&self, reference: &str) -> Option<String> {
        if let Some(name) = reference.strip_prefix("env:") {
            return std::env::var(name).ok().filter(|v| !v.is_empty());
        }
        if let Some(path) = reference.strip_prefix("file:") {
            let v = std::fs::read_to_string(path).ok()?;
            let v = v.trim_end_matches(['\n', '\r']).to_string();
            return (!v.is_empty()).then_some(v);
        }
        None
    }
}

impl Policy {
    /// Reads and validates a policy file.
    pub fn load(path: &Path, secrets: &dyn SecretSource) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError::Read {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
        Self::from_toml(&text, secrets)
    }

    pub fn from_toml(text: &str, secrets: &dyn SecretSource) -> Result<Self, PolicyError> {
        let file: PolicyFile =
            toml::from_str(text).map_err(|e| PolicyError::Syntax(e.message().to_string()))?;
        let mut policy = Policy::default();
        for (index, r) in file.allow.into_iter().enumerate() {
            let rule = parse_rule(&r).map_err(|message| PolicyError::Rule { index, message })?;
            policy.rules.push(rule);
        }
        for (name, addrs) in file.hosts {
            let host =
                authority::parse_authority(&name, Some(443)).map_err(|e| PolicyError::Hosts {
                    name: name.clone(),
                    message: e.to_string(),
                })?;
            let Host::Name(n) = host.host else {
                return Err(PolicyError::Hosts {
                    name,
                    message: "must be a name, not an address".into(),
                });
            };
            let mut ips = Vec::new();
            for a in addrs {
                ips.push(a.parse::<IpAddr>().map_err(|_| PolicyError::Hosts {
                    name: n.clone(),
                    message: format!("{a:?} is not an IP address"),
                })?);
            }
            if ips.is_empty() {
                return Err(PolicyError::Hosts {
                    name: n,
                    message: "needs at least one address".into(),
                });
            }
            policy.hosts.insert(n, ips);
        }
        for (name, c) in file.channels {
            let ch = parse_channel(&name, &c, secrets).map_err(|message| PolicyError::Channel {
                name: name.clone(),
                message,
            })?;
            policy.channels.insert(name, ch);
        }
        let d = Limits::default();
        let l = file.limits;
        policy.limits = Limits {
            connect_timeout: l
                .connect_timeout_ms
                .map(Duration::from_millis)
                .unwrap_or(d.connect_timeout),
            idle_timeout: l
                .idle_timeout_ms
                .map(Duration::from_millis)
                .unwrap_or(d.idle_timeout),
            tunnel_lifetime: l
                .tunnel_lifetime_s
                .map(Duration::from_secs)
                .unwrap_or(d.tunnel_lifetime),
            header_read_timeout: l
                .header_read_timeout_ms
                .map(Duration::from_millis)
                .unwrap_or(d.header_read_timeout),
            max_bytes_per_connection: l
                .max_bytes_per_connection
                .unwrap_or(d.max_bytes_per_connection),
            max_bytes_per_sandbox: l.max_bytes_per_sandbox.unwrap_or(d.max_bytes_per_sandbox),
            max_concurrent_tunnels: l.max_concurrent_tunnels.unwrap_or(d.max_concurrent_tunnels),
            max_connections: l.max_connections.unwrap_or(d.max_connections).max(1),
            max_requests_per_second: l
                .max_requests_per_second
                .unwrap_or(d.max_requests_per_second),
            max_header_bytes: l
                .max_header_bytes
                .unwrap_or(d.max_header_bytes)
                .clamp(1024, 1 << 20),
        };
        Ok(policy)
    }

    /// Adds a rule from `--allow`: `HOST[:PORT]`, `IP[:PORT]`, `CIDR`, or
    /// `http://HOST[:PORT]` for plain HTTP.
    pub fn add_allow(&mut self, spec: &str) -> Result<(), PolicyError> {
        let err = |message: String| PolicyError::Rule {
            index: self.rules.len(),
            message,
        };
        let (http, rest) = match spec.strip_prefix("http://") {
            Some(r) => (true, r),
            None => (false, spec),
        };
        let default_port = if http { 80 } else { 443 };
        let rule = if rest.contains('/') {
            RuleFile {
                host: None,
                cidr: Some(rest.to_string()),
                ports: vec![default_port],
                http,
            }
        } else if rest.starts_with('*') {
            // Wildcards go to the rule parser, which owns their validation.
            let (host, port) = match rest.rsplit_once(':') {
                Some((h, p)) => (
                    h,
                    p.parse::<u16>()
                        .map_err(|_| err(format!("bad port in {spec:?}")))?,
                ),
                None => (rest, default_port),
            };
            RuleFile {
                host: Some(host.to_string()),
                cidr: None,
                ports: vec![port],
                http,
            }
        } else {
            let a = authority::parse_authority(rest, Some(default_port))
                .map_err(|e| err(e.to_string()))?;
            match a.host {
                Host::Ip(ip) => RuleFile {
                    host: None,
                    cidr: Some(ip.to_string()),
                    ports: vec![a.port],
                    http,
                },
                Host::Name(_) => {
                    let host = rest.rsplit_once(':').map_or(rest, |(h, _)| h).to_string();
                    RuleFile {
                        host: Some(host),
                        cidr: None,
                        ports: vec![a.port],
                        http,
                    }
                }
            }
        };
        let parsed = parse_rule(&rule).map_err(err)?;
        self.rules.push(parsed);
        Ok(())
    }
}

fn parse_rule(r: &RuleFile) -> Result<Rule, String> {
    let ports = if r.ports.is_empty() {
        vec![if r.http { 80 } else { 443 }]
    } else {
        r.ports.clone()
    };
    if ports.contains(&0) {
        return Err("port 0 is not a port".into());
    }
    match (&r.host, &r.cidr) {
        (Some(h), None) => {
            if h == "*" {
                return Err("\"*\" would allow every host; list hosts or suffixes".into());
            }
            let (suffix, name) = match h.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, h.as_str()),
            };
            let a = authority::parse_authority(name, Some(443))
                .map_err(|e| format!("host {h:?}: {e}"))?;
            let Host::Name(n) = a.host else {
                return Err(format!("host {h:?} is an IP literal; use a cidr rule"));
            };
            if suffix && !n.contains('.') {
                return Err(format!("{h:?} covers a whole top-level domain"));
            }
            if !suffix && let Some(reason) = authority::special_use(&n) {
                return Err(format!("host {h:?} is a special-use name ({reason})"));
            }
            Ok(Rule::Host {
                pattern: if suffix {
                    HostPattern::Suffix(n)
                } else {
                    HostPattern::Exact(n)
                },
                ports,
                http: r.http,
            })
        }
        (None, Some(c)) => {
            let net = Cidr::parse(c)?;
            if METADATA.iter().any(|ip| net.contains(*ip)) {
                return Err(format!("cidr {c:?} covers a cloud metadata address"));
            }
            Ok(Rule::Cidr {
                net,
                ports,
                http: r.http,
            })
        }
        _ => Err("a rule needs exactly one of host or cidr".into()),
    }
}

/// Cloud metadata endpoints: never allowed, whatever a rule says. Typed, not strings:
/// [`never_allowed`] runs for every request, and parsing a list of strings each time cost more
/// than the rest of the check.
pub const METADATA: [IpAddr; 4] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
];

/// True for addresses no rule can ever open.
pub fn never_allowed(ip: IpAddr) -> bool {
    classify::classify(ip).class == AddrClass::Metadata || METADATA.contains(&ip)
}

fn parse_channel(
    name: &str,
    c: &ChannelFile,
    secrets: &dyn SecretSource,
) -> Result<Channel, String> {
    let valid_name = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        && name.starts_with(|ch: char| ch.is_ascii_lowercase());
    if !valid_name {
        return Err("names are lowercase letters, digits and '_', starting with a letter".into());
    }
    let (https, rest) = if let Some(r) = c.upstream.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = c.upstream.strip_prefix("http://") {
        (false, r)
    } else {
        return Err("upstream must be an https:// origin".into());
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') || rest.contains('?') || rest.contains('#') {
        return Err("upstream must be an origin (scheme, host, port) without a path".into());
    }
    let a = authority::parse_authority(rest, Some(if https { 443 } else { 80 }))
        .map_err(|e| e.to_string())?;
    if !https {
        let loopback = match &a.host {
            Host::Ip(ip) => ip.is_loopback(),
            Host::Name(n) => n == "localhost",
        };
        if !(c.insecure_upstream_for_tests && loopback) {
            return Err("plain http upstreams are only allowed on loopback with insecure_upstream_for_tests = true".into());
        }
    }
    let header = http::HeaderName::from_bytes(c.header.as_bytes())
        .map_err(|_| format!("{:?} is not a header name", c.header))?;
    let (before, after) = c
        .value
        .split_once("${")
        .ok_or("value must reference a secret as ${env:NAME} or ${file:/path}")?;
    let (reference, tail) = after.split_once('}').ok_or("unterminated ${…} in value")?;
    if tail.contains("${") {
        return Err("value may reference one secret only".into());
    }
    let secret = secrets
        .get(reference)
        .ok_or_else(|| format!("secret {reference:?} is not set on the trusted side"))?;
    if secret.chars().any(|ch| ch.is_control()) {
        return Err(format!("secret {reference:?} contains control characters"));
    }
    // A value this short could not be scrubbed from responses without destroying them.
    if airlock_redact::strength(secret.as_bytes()) == airlock_redact::Strength::TooShort {
        return Err(format!(
            "secret {reference:?} is shorter than {} bytes: too short to scrub from responses",
            airlock_redact::MIN_REDACTED_LEN
        ));
    }
    let value = format!("{before}{secret}{tail}");
    http::HeaderValue::from_str(&value)
        .map_err(|_| "value is not a valid header value".to_string())?;
    let methods = if c.methods.is_empty() {
        vec![http::Method::GET, http::Method::POST]
    } else {
        c.methods
            .iter()
            .map(|m| {
                http::Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                    .map_err(|_| format!("bad method {m:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?
    };
    if methods
        .iter()
        .any(|m| matches!(m.as_str(), "TRACE" | "TRACK" | "CONNECT"))
    {
        return Err("TRACE, TRACK and CONNECT are never allowed on a channel".into());
    }
    let path_prefixes = if c.paths.is_empty() {
        vec!["/".to_string()]
    } else {
        c.paths.clone()
    };
    if path_prefixes
        .iter()
        .any(|p| !p.starts_with('/') || p.contains("..") || p.contains('%'))
    {
        return Err("paths must start with '/' and contain no '..' or '%'".into());
    }
    Ok(Channel {
        name: name.to_string(),
        scheme_https: https,
        host: a.host,
        port: a.port,
        header,
        value: Credential(value),
        scrub: Arc::new(airlock_redact::Patterns::new([secret.as_bytes()])),
        secret: Credential(secret),
        methods,
        path_prefixes,
        insecure_upstream_for_tests: c.insecure_upstream_for_tests,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn metadata_addresses_are_never_allowed() {
        let spelled = [
            "169.254.169.254",
            "fd00:ec2::254",
            "168.63.129.16",
            "100.100.100.200",
        ];
        let listed: Vec<IpAddr> = spelled.iter().map(|m| m.parse().unwrap()).collect();
        assert_eq!(listed, METADATA);
        for ip in listed {
            assert!(never_allowed(ip), "{ip}");
        }
        // Positive control: an address next to one of them is not refused by the list.
        assert!(!never_allowed("169.254.169.253".parse().unwrap()));
        assert!(!never_allowed("168.63.129.17".parse().unwrap()));
    }

    #[test]
    fn a_cidr_rule_is_labelled_as_display_writes_it() {
        for (base, prefix) in [
            ("127.0.0.1", 32u8),
            ("10.0.0.0", 8),
            ("0.0.0.0", 0),
            ("255.255.255.255", 32),
            ("2001:db8::", 32),
        ] {
            let rule = Rule::Cidr {
                net: Cidr {
                    base: base.parse().unwrap(),
                    prefix,
                },
                ports: vec![80],
                http: false,
            };
            assert_eq!(rule.label(), format!("{base}/{prefix}"));
        }
    }
}
