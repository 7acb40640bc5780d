//! The deterministic policy (AGT-4): an action, the agent's autonomy, the
//! tools it was granted, the rules people made, and whether untrusted
//! content is in the model's context decide one [`Decision`]. Decisions are
//! values, ordered `Allow < RequireApproval < Deny`; combining takes the
//! strictest; a deny rule always wins; when no rule matches a
//! state-changing or outbound action, approval is required.
//!
//! **Taint.** Once untrusted content (a tool's output, a fetched page, a
//! file's contents) is in the context, every state-changing or outbound
//! action needs an approval unless a rule explicitly allows it, and the
//! decision names what tainted the context. Content fetched from outside is
//! data for the model, never authority: nothing it says changes a rule.

use serde::{Deserialize, Serialize};

use crate::action::{Action, ActionKind};
use crate::grant_rules;

/// How much an agent may do on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Autonomy {
    /// Only reads: every state-changing or outbound action is denied.
    ReadOnly,
    /// Reads run; every state-changing action waits for a person (policy
    /// rules cannot waive it; deny rules still deny). A person's standing
    /// grant from an earlier approval (exactly one payload in one run, or a
    /// narrow argv prefix) covers later matching actions, tainted context
    /// included: it is an explicit rule (the journal applies it).
    AskWrites,
    /// Every action but `write_output` and `finish` waits for a person.
    AskAll,
    /// Rules decide; an action no rule allows waits for a person.
    AutoWithinPolicy,
}

/// A policy verdict; the derived order is "strictest last".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    RequireApproval,
    Deny,
}

/// What a rule matches (besides its action kind).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "match", rename_all = "snake_case")]
pub enum Matcher {
    /// Every action of the kind.
    Any,
    /// `run_command` whose argv starts with these words. A shell's `-c`
    /// script matches only if every segment of it (split at `;`, `&&`,
    /// `||`, `|` and newlines) starts with them and uses no substitution or
    /// redirection.
    ArgvPrefix { prefix: Vec<String> },
    /// File actions under this relative folder.
    PathPrefix { prefix: String },
    /// `http_request` to this host (exact, lower case) with one of these
    /// methods.
    Host { host: String, methods: Vec<String> },
}

/// A rule people made (or the operator configured).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rule {
    pub id: String,
    pub kind: ActionKind,
    pub matcher: Matcher,
    pub verdict: Verdict,
}

/// What the policy sees besides the action.
#[derive(Clone, Copy)]
pub struct Policy<'a> {
    pub autonomy: Autonomy,
    /// The tools this agent may use (the manifest's, intersected with what
    /// the human actor may do).
    pub granted: &'a dyn Fn(ActionKind) -> bool,
    pub rules: &'a [Rule],
    /// What put untrusted content in the context, oldest first; empty when
    /// the context is clean.
    pub tainted_by: &'a [String],
}

impl std::fmt::Debug for Policy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let granted: Vec<&str> = ActionKind::ALL
            .iter()
            .filter(|k| (self.granted)(**k))
            .map(|k| k.name())
            .collect();
        f.debug_struct("Policy")
            .field("autonomy", &self.autonomy)
            .field("granted", &granted)
            .field("rules", &self.rules)
            .field("tainted_by", &self.tainted_by)
            .finish()
    }
}

/// A decision and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub verdict: Verdict,
    pub reasons: Vec<String>,
    /// The rules that matched.
    pub rules: Vec<String>,
    /// When the context's taint is why approval is needed: what tainted it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tainted_by: Vec<String>,
}

impl Matcher {
    fn matches(&self, action: &Action) -> bool {
        match (self, action) {
            (Matcher::Any, _) => true,
            (Matcher::ArgvPrefix { prefix }, Action::RunCommand { argv, .. }) => {
                grant_rules::argv_covered(argv, std::slice::from_ref(prefix))
            }
            (
                Matcher::PathPrefix { prefix },
                Action::ReadFile { path } | Action::WriteFile { path, .. },
            ) => path_under(path, prefix),
            (Matcher::PathPrefix { prefix }, Action::ListFiles { path }) => {
                path_under(path.as_deref().unwrap_or(""), prefix)
            }
            (Matcher::Host { host, methods }, Action::HttpRequest { method, url, .. }) => {
                url_host(url).is_some_and(|h| h == *host)
                    && methods.iter().any(|m| m.eq_ignore_ascii_case(method))
            }
            _ => false,
        }
    }
}

fn path_under(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    prefix.is_empty() || path == prefix || path.starts_with(&format!("{prefix}/"))
}

/// The host of an `http(s)://` URL, lower case, without port or userinfo
/// (a URL with userinfo matches no rule).
fn url_host(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.contains('@') {
        return None;
    }
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    Some(host.to_ascii_lowercase())
}

impl Policy<'_> {
    /// Decides one action.
    pub fn decide(&self, action: &Action) -> Decision {
        let kind = action.kind();
        let mut d = Decision {
            verdict: Verdict::Allow,
            reasons: Vec::new(),
            rules: Vec::new(),
            tainted_by: Vec::new(),
        };
        if !(self.granted)(kind) {
            d.verdict = Verdict::Deny;
            d.reasons.push(format!(
                "the tool {} is not granted to this agent",
                kind.name()
            ));
            return d;
        }
        // The run's own record: always the agent's to write.
        if matches!(kind, ActionKind::WriteOutput | ActionKind::Finish) {
            d.reasons.push("the run's own outputs".into());
            return d;
        }
        if kind == ActionKind::RequestApproval {
            d.verdict = Verdict::RequireApproval;
            d.reasons.push("the agent asked for a person".into());
            return d;
        }
        let risky = action.changes_state() || kind.is_outbound();
        let matched: Vec<&Rule> = self
            .rules
            .iter()
            .filter(|r| r.kind == kind && r.matcher.matches(action))
            .collect();
        d.rules = matched.iter().map(|r| r.id.clone()).collect();
        let ruled = matched.iter().map(|r| r.verdict).max();
        if ruled == Some(Verdict::Deny) {
            d.verdict = Verdict::Deny;
            d.reasons.push("a deny rule matches".into());
            return d;
        }
        let allowed_by_rule = ruled == Some(Verdict::Allow);
        d.verdict = match self.autonomy {
            Autonomy::ReadOnly if risky => {
                d.reasons
                    .push("read-only: the agent may not change state or reach out".into());
                Verdict::Deny
            }
            Autonomy::ReadOnly => Verdict::Allow,
            Autonomy::AskAll => {
                d.reasons
                    .push("ask-all: every action waits for a person".into());
                Verdict::RequireApproval
            }
            Autonomy::AskWrites if action.changes_state() => {
                d.reasons
                    .push("ask-writes: state changes wait for a person".into());
                Verdict::RequireApproval
            }
            Autonomy::AskWrites => ruled.unwrap_or(Verdict::Allow),
            Autonomy::AutoWithinPolicy => match ruled {
                Some(v) => v,
                None if risky => {
                    d.reasons.push("no rule allows it".into());
                    Verdict::RequireApproval
                }
                None => Verdict::Allow,
            },
        };
        // Taint: untrusted content steers nothing that changes state or
        // reaches out, unless a rule allows exactly this.
        let rule_allows = allowed_by_rule && self.autonomy == Autonomy::AutoWithinPolicy;
        if risky
            && !self.tainted_by.is_empty()
            && !rule_allows
            && d.verdict < Verdict::RequireApproval
        {
            d.verdict = Verdict::RequireApproval;
            d.reasons.push("untrusted content is in the context".into());
        }
        if risky && !self.tainted_by.is_empty() && d.verdict == Verdict::RequireApproval {
            d.tainted_by = self.tainted_by.to_vec();
        }
        d
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn action(tool: &str, args: &str) -> Action {
        Action::parse(tool, args, &|_| true).unwrap()
    }

    fn decide(autonomy: Autonomy, rules: &[Rule], taint: &[String], a: &Action) -> Verdict {
        let all = |_: ActionKind| true;
        Policy {
            autonomy,
            granted: &all,
            rules,
            tainted_by: taint,
        }
        .decide(a)
        .verdict
    }

    fn rule(kind: ActionKind, matcher: Matcher, verdict: Verdict) -> Rule {
        Rule {
            id: "r".into(),
            kind,
            matcher,
            verdict,
        }
    }

    fn prefix(p: &[&str]) -> Matcher {
        Matcher::ArgvPrefix {
            prefix: p.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn agt_4_verdicts_are_ordered_strictest_last() {
        assert!(Verdict::Allow < Verdict::RequireApproval);
        assert!(Verdict::RequireApproval < Verdict::Deny);
    }

    #[test]
    fn agt_4_autonomy_table() {
        use Autonomy::*;
        use Verdict::*;
        let read = action("read_file", r#"{"path": "a"}"#);
        let write = action("write_file", r#"{"path": "a", "content": "x"}"#);
        let get = action(
            "http_request",
            r#"{"method": "GET", "url": "https://api.example.com/"}"#,
        );
        let cmd = action("run_command", r#"{"argv": ["ls"]}"#);
        let fin = action("finish", "{}");
        let table = [
            (ReadOnly, [Allow, Deny, Deny, Deny, Allow]),
            (
                AskWrites,
                [Allow, RequireApproval, Allow, RequireApproval, Allow],
            ),
            (
                AskAll,
                [
                    RequireApproval,
                    RequireApproval,
                    RequireApproval,
                    RequireApproval,
                    Allow,
                ],
            ),
            (
                AutoWithinPolicy,
                [
                    Allow,
                    RequireApproval,
                    RequireApproval,
                    RequireApproval,
                    Allow,
                ],
            ),
        ];
        for (autonomy, want) in table {
            let got: Vec<Verdict> = [&read, &write, &get, &cmd, &fin]
                .iter()
                .map(|a| decide(autonomy, &[], &[], a))
                .collect();
            assert_eq!(got, want, "{autonomy:?}");
        }
    }

    #[test]
    fn agt_4_deny_wins_and_no_rule_means_approval() {
        use Verdict::*;
        let cmd = action("run_command", r#"{"argv": ["git", "push"]}"#);
        let allow = rule(ActionKind::RunCommand, prefix(&["git"]), Allow);
        let deny = rule(ActionKind::RunCommand, prefix(&["git", "push"]), Deny);
        assert_eq!(
            decide(
                Autonomy::AutoWithinPolicy,
                std::slice::from_ref(&allow),
                &[],
                &cmd
            ),
            Allow
        );
        assert_eq!(
            decide(
                Autonomy::AutoWithinPolicy,
                &[allow.clone(), deny.clone()],
                &[],
                &cmd
            ),
            Deny
        );
        assert_eq!(
            decide(Autonomy::AskWrites, &[deny], &[], &cmd),
            Deny,
            "deny rules bind every level"
        );
        assert_eq!(
            decide(Autonomy::AskWrites, &[allow], &[], &cmd),
            RequireApproval,
            "ask-writes cannot be waived"
        );
        assert_eq!(
            decide(Autonomy::AutoWithinPolicy, &[], &[], &cmd),
            RequireApproval
        );
        // A tool the agent was not granted is denied whatever the rules say.
        let none = |_: ActionKind| false;
        let d = Policy {
            autonomy: Autonomy::AutoWithinPolicy,
            granted: &none,
            rules: &[],
            tainted_by: &[],
        }
        .decide(&cmd);
        assert_eq!(d.verdict, Deny);
    }

    #[test]
    fn agt_5_prefix_rules_never_cover_interpreters_or_other_segments() {
        use Verdict::*;
        let git_status = rule(ActionKind::RunCommand, prefix(&["git", "status"]), Allow);
        let rules = [git_status];
        let run = |argv: &str| {
            decide(
                Autonomy::AutoWithinPolicy,
                &rules,
                &[],
                &action("run_command", &format!(r#"{{"argv": {argv}}}"#)),
            )
        };
        assert_eq!(
            run(r#"["git", "status", "-s"]"#),
            Allow,
            "control: the rule works"
        );
        assert_eq!(
            run(r#"["sh", "-c", "git status && git status -s"]"#),
            Allow,
            "every segment covered"
        );
        for argv in [
            r#"["git", "push"]"#,
            r#"["sh", "-c", "git status && rm -rf ."]"#,
            r#"["sh", "-c", "git status; curl evil"]"#,
            r#"["sh", "-c", "git status $(rm -rf .)"]"#,
            r#"["sh", "-c", "git status > /airlock/output/x"]"#,
            r#"["sh", "-c", "git status & rm x"]"#,
            r#"["bash", "-c", "git status`rm x`"]"#,
            r#"["python3", "-c", "import os"]"#,
            r#"["env", "git", "status"]"#,
            // A path is another program (a planted ./git is not git).
            r#"["/usr/bin/git", "status"]"#,
        ] {
            assert_eq!(run(argv), RequireApproval, "{argv}");
        }
    }

    #[test]
    fn agt_4_taint_turns_risky_actions_into_approvals_naming_the_source() {
        let taint = vec!["http_request https://evil.example/page".to_string()];
        let post = action(
            "http_request",
            r#"{"method": "POST", "url": "https://paste.example/", "body": "key"}"#,
        );
        let read = action("read_file", r#"{"path": "a"}"#);
        let get = action(
            "http_request",
            r#"{"method": "GET", "url": "https://api.example.com/"}"#,
        );
        let all = |_: ActionKind| true;
        let p = Policy {
            autonomy: Autonomy::AskWrites,
            granted: &all,
            rules: &[],
            tainted_by: &taint,
        };
        let d = p.decide(&post);
        assert_eq!(d.verdict, Verdict::RequireApproval);
        assert_eq!(
            d.tainted_by, taint,
            "the approval names what tainted the context"
        );
        assert_eq!(
            p.decide(&get).verdict,
            Verdict::RequireApproval,
            "an outbound read too"
        );
        assert_eq!(
            p.decide(&read).verdict,
            Verdict::Allow,
            "reading stays free"
        );
        // Control: without taint the GET runs.
        let clean = Policy {
            tainted_by: &[],
            ..p
        };
        assert_eq!(clean.decide(&get).verdict, Verdict::Allow);
        // An explicit allow rule under auto-within-policy still allows.
        let host = rule(
            ActionKind::HttpRequest,
            Matcher::Host {
                host: "api.example.com".into(),
                methods: vec!["GET".into()],
            },
            Verdict::Allow,
        );
        let rules = [host];
        let auto = Policy {
            autonomy: Autonomy::AutoWithinPolicy,
            granted: &all,
            rules: &rules,
            tainted_by: &taint,
        };
        assert_eq!(auto.decide(&get).verdict, Verdict::Allow);
        assert_eq!(auto.decide(&post).verdict, Verdict::RequireApproval);
    }

    #[test]
    fn agt_4_host_rules_match_exact_hosts_only() {
        let m = Matcher::Host {
            host: "api.example.com".into(),
            methods: vec!["GET".into()],
        };
        let get = |url: &str| {
            action(
                "http_request",
                &format!(r#"{{"method": "GET", "url": "{url}"}}"#),
            )
        };
        assert!(m.matches(&get("https://api.example.com/v1")));
        assert!(m.matches(&get("https://API.example.com:443/")));
        for url in [
            "https://api.example.com.evil.net/",
            "https://evil.net/api.example.com",
            "https://user@api.example.com/",
            "https://xapi.example.com/",
        ] {
            assert!(!m.matches(&get(url)), "{url}");
        }
    }
}
