//! The decision pipeline (NET-4, NET-5): strict authority parsing, special
//! names, rule match, the proxy's own resolution, classification of every
//! answer. A decision is a value; the proxy connects only to the addresses
//! in an `Allow`.

use std::net::{IpAddr, SocketAddr};

use serde::Serialize;

use crate::authority::{self, Authority, Host};
use crate::classify::{self, AddrClass};
use crate::policy::{self, Policy, Rule};
use crate::resolve::Resolve;

/// How the client wants to reach the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `CONNECT host:port` (TLS end to end).
    Connect,
    /// Plain HTTP forwarded by the proxy (only for rules marked `http`).
    PlainHttp,
}

/// The outcome for one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub allow: bool,
    /// Stable reason code (`allowed`, `no_policy`, `no_matching_rule`, …).
    pub reason: &'static str,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub rule: Option<String>,
    /// The checked addresses (the only ones the proxy may connect to).
    pub resolved: Vec<IpAddr>,
}

impl Decision {
    fn deny(reason: &'static str, target: Option<&Authority>) -> Self {
        Self {
            allow: false,
            reason,
            host: target.map(|a| host_string(&a.host)),
            port: target.map(|a| a.port),
            rule: None,
            resolved: Vec::new(),
        }
    }

    pub fn socket_addrs(&self) -> Vec<SocketAddr> {
        let port = self.port.unwrap_or(0);
        self.resolved
            .iter()
            .map(|ip| SocketAddr::new(*ip, port))
            .collect()
    }
}

pub fn host_string(h: &Host) -> String {
    match h {
        Host::Name(n) => n.clone(),
        Host::Ip(ip) => authority::ip_string(*ip),
    }
}

/// Decides on a raw authority (`host:port`, as sent in CONNECT).
pub async fn decide_raw(
    policy: Option<&Policy>,
    resolver: &dyn Resolve,
    raw: &str,
    mode: Mode,
) -> Decision {
    let Some(policy) = policy else {
        return Decision::deny(policy::NO_POLICY, None);
    };
    let default = match mode {
        Mode::Connect => None,
        Mode::PlainHttp => Some(80),
    };
    match authority::parse_authority(raw, default) {
        Ok(a) => decide(policy, resolver, &a, mode, true).await,
        Err(e) => Decision::deny(e.reason(), None),
    }
}

/// Decides on a parsed target. With `resolve == false` (for `proxy check
/// --no-resolve`) names are decided on the rules alone, unless the policy's
/// `hosts` map answers for them.
pub async fn decide(
    policy: &Policy,
    resolver: &dyn Resolve,
    target: &Authority,
    mode: Mode,
    resolve: bool,
) -> Decision {
    match &target.host {
        Host::Ip(ip) => decide_ip(policy, target, *ip, mode),
        Host::Name(name) => {
            if let Some(reason) = authority::special_use(name) {
                return Decision::deny(reason, Some(target));
            }
            let Some(rule) = policy.rules.iter().find(|r| match r {
                Rule::Host { pattern, .. } => pattern.matches(name) && r.allows_port(target.port),
                Rule::Cidr { .. } => false,
            }) else {
                let name_known = policy
                    .rules
                    .iter()
                    .any(|r| matches!(r, Rule::Host { pattern, .. } if pattern.matches(name)));
                let reason = if name_known {
                    "port_not_allowed"
                } else {
                    "no_matching_rule"
                };
                return Decision::deny(reason, Some(target));
            };
            if mode == Mode::PlainHttp && !rule.http() {
                return Decision::deny("plain_http_not_allowed", Some(target));
            }
            let answers = if let Some(fixed) = policy.hosts.get(name) {
                fixed.clone()
            } else if !resolve {
                return Decision {
                    allow: true,
                    reason: "allowed_unresolved",
                    host: Some(name.clone()),
                    port: Some(target.port),
                    rule: Some(rule.label()),
                    resolved: Vec::new(),
                };
            } else {
                match resolver.lookup(name).await {
                    Ok(a) if !a.is_empty() => a,
                    Ok(_) => return Decision::deny("dns_nxdomain", Some(target)),
                    Err(e) => return Decision::deny(e.reason(), Some(target)),
                }
            };
            // Any bad answer denies the name: a mixed answer is an attack
            // or a misconfiguration, and either way not ours to pick from.
            for ip in &answers {
                if let Some(reason) = address_refusal(policy, *ip, target.port) {
                    return Decision::deny(resolved_reason(reason), Some(target));
                }
            }
            Decision {
                allow: true,
                reason: "allowed",
                host: Some(name.clone()),
                port: Some(target.port),
                rule: Some(rule.label()),
                resolved: answers,
            }
        }
    }
}

fn decide_ip(policy: &Policy, target: &Authority, ip: IpAddr, mode: Mode) -> Decision {
    if policy::never_allowed(ip) {
        return Decision::deny("metadata_address", Some(target));
    }
    let rule = policy.rules.iter().find(|r| match r {
        Rule::Cidr { net, .. } => net.contains(ip) && r.allows_port(target.port),
        Rule::Host { .. } => false,
    });
    let Some(rule) = rule else {
        // An IP literal in any spelling never matches a name rule (NET-4).
        return Decision::deny("ip_literal_not_allowed", Some(target));
    };
    if mode == Mode::PlainHttp && !rule.http() {
        return Decision::deny("plain_http_not_allowed", Some(target));
    }
    Decision {
        allow: true,
        reason: "allowed",
        host: Some(authority::ip_string(ip)),
        port: Some(target.port),
        rule: Some(rule.label()),
        resolved: vec![ip],
    }
}

/// Why a resolved address may not be used, if it may not: metadata always;
/// anything non-public unless an explicit CIDR rule covers it.
pub fn address_refusal(policy: &Policy, ip: IpAddr, port: u16) -> Option<&'static str> {
    if policy::never_allowed(ip) {
        return Some(AddrClass::Metadata.reason());
    }
    let c = classify::classify(ip);
    if c.class == AddrClass::Public {
        return None;
    }
    let explicitly_allowed = policy
        .rules
        .iter()
        .any(|r| matches!(r, Rule::Cidr { net, .. } if net.contains(ip)) && r.allows_port(port));
    if explicitly_allowed {
        None
    } else {
        Some(c.class.reason())
    }
}

fn resolved_reason(class_reason: &'static str) -> &'static str {
    // Keep codes static: prefix is implied by the decision stage.
    class_reason
}
