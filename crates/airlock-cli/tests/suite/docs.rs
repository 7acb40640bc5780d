//! What a newcomer reads first is true: `airlock --help` says what airlock
//! does for its user, and every requirement id the code and documents cite
//! is stated in `docs/requirements.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::suite::support::airlock_bin;

#[test]
fn help_opens_with_what_airlock_does_for_its_user() {
    for flag in ["--help", "-h"] {
        let out = Command::new(airlock_bin()).arg(flag).output().unwrap();
        assert!(out.status.success(), "{flag}");
        let text = String::from_utf8_lossy(&out.stdout);
        let first = text.lines().next().unwrap_or("");
        assert!(
            first.starts_with("Run AI agents and automation scripts")
                && first.contains("cannot have the key"),
            "{flag} opens with: {first}"
        );
        assert!(
            !text.contains("wires the libraries"),
            "{flag} shows an implementation note: {text}"
        );
    }
}

/// Upper-case words followed by a number that are not requirement ids (MPL:
/// the licence id `MPL-2.0` of vendored test files).
const NOT_IDS: &[&str] = &[
    "UTF", "SHA", "IEEE", "ECMA", "PDF", "RFC", "ISO", "AES", "MPL",
];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The ids `docs/requirements.md` defines (`### ID — title`), each with
/// whether its entry states a status.
fn defined() -> BTreeMap<String, bool> {
    let text = std::fs::read_to_string(repo_root().join("docs/requirements.md")).unwrap();
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("### ") {
            let id = rest.split_whitespace().next().unwrap_or("").to_string();
            assert!(
                out.insert(id.clone(), false).is_none(),
                "{id} is defined twice"
            );
            current = Some(id);
        } else if line.starts_with("Status: ")
            && let Some(id) = &current
        {
            out.insert(id.clone(), true);
        }
    }
    out
}

/// Requirement ids cited in `text`: `ABC-12` (two to five capitals, a
/// hyphen, digits, whole word, not in [`NOT_IDS`]) and, for the known
/// families, test-name prefixes `abc_12_`.
fn cited(text: &str, families: &BTreeSet<String>) -> Vec<String> {
    let b = text.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if (i > 0 && word(b[i - 1])) || !b[i].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let start = i;
        let upper = b[i].is_ascii_uppercase();
        while i < b.len() && b[i].is_ascii_alphabetic() && b[i].is_ascii_uppercase() == upper {
            i += 1;
        }
        let fam = &text[start..i];
        let sep = if upper { b'-' } else { b'_' };
        if !(2..=5).contains(&fam.len()) || i >= b.len() || b[i] != sep {
            continue;
        }
        let digits = i + 1;
        let mut j = digits;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j == digits {
            continue;
        }
        let id = format!("{}-{}", fam.to_ascii_uppercase(), &text[digits..j]);
        if upper {
            if (j >= b.len() || !word(b[j])) && !NOT_IDS.contains(&fam) {
                out.push(id);
            }
        } else if j < b.len() && b[j] == b'_' && families.contains(fam) {
            out.push(id);
        }
        i = j;
    }
    out
}

/// The repository's own text files (sources, documents, migrations,
/// scripts), without build output.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !name.starts_with('.') && name != "target" {
                text_files(&p, out);
            }
        } else if ["rs", "md", "toml", "sql", "py", "sh"]
            .iter()
            .any(|x| p.extension().is_some_and(|e| e == *x))
            || p.parent().is_some_and(|d| d.ends_with("scripts"))
        {
            out.push(p);
        }
    }
}

#[test]
fn every_cited_requirement_id_is_defined_in_docs_requirements() {
    let defined = defined();
    let families: BTreeSet<String> = defined
        .keys()
        .filter_map(|id| id.split_once('-').map(|(f, _)| f.to_ascii_lowercase()))
        .collect();
    // Positive control: the scanner finds ids in both spellings, new
    // families included, and skips what only looks like one.
    assert_eq!(
        cited(
            "SBX-99 and FOO-1, fn sbx_98_x(), UTF-8, SHA-256, [A-Z0-9]{0,63}, xSBX-5, net_5",
            &families
        ),
        ["SBX-99", "FOO-1", "SBX-98"]
    );
    let mut files = Vec::new();
    text_files(&repo_root(), &mut files);
    let mut count = 0;
    let mut missing = BTreeMap::<String, Vec<String>>::new();
    // This file's own examples are not citations.
    files.retain(|f| !f.ends_with("tests/suite/docs.rs"));
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for id in cited(&text, &families) {
            count += 1;
            if !defined.contains_key(&id) {
                let rel = f.strip_prefix(repo_root()).unwrap_or(f);
                missing
                    .entry(id)
                    .or_default()
                    .push(rel.display().to_string());
            }
        }
    }
    assert!(count > 300, "the scan found only {count} citations");
    assert!(
        missing.is_empty(),
        "cited but not defined in docs/requirements.md: {missing:?}"
    );
    let without_status: Vec<_> = defined.iter().filter(|(_, s)| !**s).collect();
    assert!(
        without_status.is_empty(),
        "entries without a Status line: {without_status:?}"
    );
}

/// `airlock doctor` on this host: the real sandbox reaches the default
/// level and every check is reported; with user namespaces made
/// unavailable (a user namespace of our own whose limit is 0), it fails
/// with exit 1 and names the sysctl to change — the positive control that
/// the check can fail.
#[test]
fn cli_1_doctor_checks_the_host_and_names_the_fix() {
    use crate::suite::support::{Who, require_root, workdir};
    let dir = workdir(Who::Invoker);
    let data = dir.path().join("data");
    let out = Command::new(airlock_bin())
        .args(["--data-dir", data.to_str().unwrap(), "doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let checks = v["checks"].as_array().unwrap();
    let by = |n: &str| checks.iter().find(|c| c["name"] == n).cloned();
    assert_eq!(
        by("containment").map(|c| c["status"].clone()),
        Some(serde_json::json!("ok")),
        "{v}"
    );
    for name in [
        "user_namespaces",
        "data_directory",
        "key_directory",
        "database",
        "clock",
        "container",
    ] {
        assert!(by(name).is_some(), "no {name} check: {v}");
    }
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(out.status.code(), Some(0));
    // Human form: one line per check.
    let out = Command::new(airlock_bin())
        .args(["--data-dir", data.to_str().unwrap(), "doctor"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ok   containment: level namespaces"),
        "{text}"
    );

    if !require_root("a user namespace whose limit the test sets") {
        return;
    }
    let script = format!(
        "echo 0 > /proc/sys/user/max_user_namespaces && exec {} --data-dir {} doctor",
        airlock_bin().display(),
        data.display()
    );
    let out = Command::new("unshare")
        .args(["-U", "--map-root-user", "sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL user_namespaces"), "{text}");
    assert!(
        text.contains("sysctl -w user.max_user_namespaces="),
        "{text}"
    );
    assert!(text.contains("fix the FAIL lines first"), "{text}");
}

/// Shell completions and the man pages come from the command definitions:
/// every top-level command is in them.
#[test]
fn cli_1_completions_and_man_pages_name_every_command() {
    let help = Command::new(airlock_bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .take_while(|w| !w.ends_with(':'))
        .filter(|w| *w != "help")
        .collect();
    assert!(
        commands.contains(&"doctor") && commands.contains(&"mcp"),
        "{help}"
    );
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(airlock_bin())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        for c in &commands {
            assert!(text.contains(c), "{shell} completion lacks {c}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(airlock_bin())
        .args(["man", "--out", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(dir.path().join("airlock.1").is_file());
    for c in &commands {
        let page = dir.path().join(format!("airlock-{c}.1"));
        let text = std::fs::read_to_string(&page).unwrap_or_else(|_| panic!("no {page:?}"));
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{c}: not roff"
        );
    }
}
