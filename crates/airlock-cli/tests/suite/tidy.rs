//! The architecture invariants a scan of the sources can check, driven by
//! one table ([`RULES`]). ARCHITECTURE.md marks each such invariant with
//! `(tidy: <name>)`; `architecture_md_names_every_tidy_rule` keeps the two
//! equal, so a rule cannot be documented and unchecked, or the reverse.
//!
//! Every rule has a positive control: its needles must be found somewhere
//! it is allowed (the scan really reads the code it claims to), and must not
//! be found anywhere else.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A source file of a crate's library or binary (not tests, not benches).
#[derive(Debug)]
struct Source {
    krate: String,
    path: PathBuf,
    text: String,
}

fn sources() -> Vec<Source> {
    let mut out = Vec::new();
    let Ok(crates) = std::fs::read_dir(crates_dir()) else {
        return out;
    };
    for c in crates.flatten() {
        let krate = c.file_name().to_string_lossy().into_owned();
        let mut files = Vec::new();
        rust_files(&c.path().join("src"), &mut files);
        for path in files {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // Unit tests inside a source file are test code.
            let text = match text.find("#[cfg(test)]") {
                Some(i) => text[..i].to_string(),
                None => text,
            };
            out.push(Source {
                krate: krate.clone(),
                path,
                text,
            });
        }
    }
    out
}

/// One invariant: `needles` may appear only in the crates of `allowed`.
#[derive(Debug)]
struct Rule {
    name: &'static str,
    why: &'static str,
    needles: &'static [&'static str],
    allowed: &'static [&'static str],
}

/// Every front end: what parses a request and shapes an answer.
const FRONT_ENDS: &[&str] = &["airlock-api", "airlock-cli", "airlock-mcp", "airlock-ui"];

const RULES: &[Rule] = &[
    Rule {
        name: "unsafe",
        why: "only the sandbox crate contains `unsafe`",
        needles: &["unsafe {", "unsafe fn", "unsafe impl"],
        allowed: &["airlock-sandbox"],
    },
    Rule {
        name: "print",
        why: "library crates never print; only the binary renders",
        needles: &["println!", "eprintln!", "print!(", "eprint!(", "dbg!("],
        allowed: &["airlock-cli"],
    },
    Rule {
        name: "sql",
        why: "only the store crate contains SQL",
        needles: &[
            "SELECT ",
            "INSERT INTO",
            "UPDATE runs",
            "DELETE FROM",
            "CREATE TABLE",
        ],
        allowed: &["airlock-store"],
    },
    Rule {
        name: "store",
        why: "only the service layer reaches the store: front ends and other crates never hold a Store",
        needles: &["airlock_store::", "Store::open"],
        allowed: &["airlock-store", "airlock-service"],
    },
    Rule {
        name: "status-codes",
        why: "only the HTTP front ends (the API, the web interface, and the egress proxy, itself an HTTP server) know status codes; the service answers error codes",
        needles: &["StatusCode::"],
        allowed: &["airlock-api", "airlock-cli", "airlock-egress", "airlock-ui"],
    },
    Rule {
        name: "permissions",
        why: "permission checks are the service's: no front end decides who may do what",
        needles: &["Permission::", ".require(", "perms.contains"],
        allowed: &["airlock-iam", "airlock-service"],
    },
    Rule {
        name: "quotas",
        why: "quotas and idempotency are rules of the service, not of a front end",
        needles: &["take_quota", "give_back", "idempotency_key_used"],
        allowed: &["airlock-store", "airlock-service"],
    },
];

/// The crates that may use a rule's needles, and the violations elsewhere.
fn check(rule: &Rule, all: &[Source]) -> (usize, Vec<String>) {
    let mut seen_allowed = 0;
    let mut violations = Vec::new();
    for s in all {
        for (i, line) in s.text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if !rule.needles.iter().any(|n| line.contains(n)) {
                continue;
            }
            if rule.allowed.contains(&s.krate.as_str()) {
                seen_allowed += 1;
            } else {
                violations.push(format!("{}:{}: {}", s.path.display(), i + 1, code));
            }
        }
    }
    (seen_allowed, violations)
}

#[test]
fn every_tidy_rule_holds_across_all_crates() {
    let all = sources();
    assert!(
        all.iter()
            .map(|s| &s.krate)
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            >= 12,
        "the scan found the crates"
    );
    let mut report = Vec::new();
    for rule in RULES {
        let (seen, violations) = check(rule, &all);
        // Positive control: the needles exist where they are allowed.
        assert!(
            seen > 0,
            "rule {}: no needle found in {:?}; the scan reads nothing",
            rule.name,
            rule.allowed
        );
        for v in violations {
            report.push(format!("[{}] {} — {v}", rule.name, rule.why));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

/// A rule's scan fails on the violation it is about (a synthetic file in
/// a crate it does not allow).
#[test]
fn every_tidy_rule_catches_a_planted_violation() {
    for rule in RULES {
        let outsider = ["airlock-worker", "airlock-audit"]
            .into_iter()
            .find(|k| !rule.allowed.contains(k))
            .unwrap_or("airlock-files");
        let planted = Source {
            krate: outsider.to_string(),
            path: PathBuf::from(format!("{outsider}/src/planted.rs")),
            text: format!("fn f() {{ {} }}\n", rule.needles[0]),
        };
        let (_, violations) = check(rule, &[planted]);
        assert_eq!(violations.len(), 1, "rule {} missed its needle", rule.name);
    }
}

/// Front ends do not depend on the store at all (not even for types): the
/// service re-exports what they need.
#[test]
fn front_ends_do_not_depend_on_the_store() {
    for fe in FRONT_ENDS {
        let manifest =
            std::fs::read_to_string(crates_dir().join(fe).join("Cargo.toml")).unwrap_or_default();
        let deps = manifest
            .split("[dev-dependencies]")
            .next()
            .unwrap_or_default();
        assert!(
            !deps.contains("airlock-store"),
            "{fe} depends on airlock-store outside [dev-dependencies]"
        );
        assert!(
            deps.contains("airlock-service"),
            "{fe}: the scan read its manifest"
        );
    }
}

/// ARCHITECTURE.md names each rule as `(tidy: <name>)` and no other.
#[test]
fn architecture_md_names_every_tidy_rule() {
    let doc = std::fs::read_to_string(crates_dir().join("../ARCHITECTURE.md")).unwrap_or_default();
    let mut named: Vec<&str> = doc
        .match_indices("(tidy: ")
        .filter_map(|(i, _)| {
            let rest = &doc[i + 7..];
            rest.find(')').map(|end| &rest[..end])
        })
        .collect();
    named.sort_unstable();
    named.dedup();
    let mut rules: Vec<&str> = RULES.iter().map(|r| r.name).collect();
    rules.extend(["unsafe-safety-comment", "vault-plaintext"]);
    rules.sort_unstable();
    assert_eq!(named, rules, "ARCHITECTURE.md and the tidy table differ");
}

#[test]
fn every_unsafe_block_in_the_sandbox_has_a_safety_comment() {
    let mut files = Vec::new();
    rust_files(&crates_dir().join("airlock-sandbox/src"), &mut files);
    let mut blocks = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("unsafe {") && !l.trim_start().starts_with("//") {
                blocks += 1;
                let context = lines[i.saturating_sub(4)..i].join("\n");
                assert!(
                    context.contains("SAFETY:") || l.contains("SAFETY:"),
                    "{}:{} unsafe block without a SAFETY comment",
                    f.display(),
                    i + 1
                );
            }
        }
    }
    assert!(blocks > 0, "the scan found the sandbox's unsafe blocks");
}

/// Plaintext leaves the vault's types (`expose_secret`) only inside the vault
/// crate and in `airlock-service/src/secrets.rs`, and there only into a
/// buffer that is wiped when dropped (`Zeroizing`, `SecretBytes`), never into
/// a plain `Vec` or `String`.
#[test]
fn key_1_vault_plaintext_is_only_copied_into_wiping_buffers() {
    let mut files = Vec::new();
    rust_files(&crates_dir(), &mut files);
    let mut seen_in_service = 0;
    for f in &files {
        let path = f.to_string_lossy();
        if !path.contains("/src/") || path.contains("airlock-vault/src") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            if !line.contains(".expose_secret()") || line.trim_start().starts_with("//") {
                continue;
            }
            let at = format!("{}:{}", f.display(), i + 1);
            assert!(
                path.ends_with("airlock-service/src/secrets.rs"),
                "{at}: plaintext taken out of the vault outside secrets.rs: {line}"
            );
            seen_in_service += 1;
            let copies = line.contains("to_vec()") || line.contains("to_owned()");
            assert!(
                !copies || line.contains("Zeroizing::new(") || line.contains("SecretBytes::new("),
                "{at}: plaintext copied into a buffer that is not wiped: {line}"
            );
        }
    }
    // Positive control: the scan saw the service's real call sites.
    assert!(seen_in_service >= 2, "the scan found no call site");
}
