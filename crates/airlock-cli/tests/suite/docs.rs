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

/// Upper-case words followed by a number that are not requirement ids.
const NOT_IDS: &[&str] = &["UTF", "SHA", "IEEE", "ECMA", "PDF", "RFC", "ISO", "AES"];

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
