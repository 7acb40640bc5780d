//! Shared helpers: manifest texts built from a valid base with overrides.

mod bundle;
mod command;
mod docs;
mod examples;
mod inputs;
mod manifest;
mod outputs;

use airlock_worker::{Manifest, ManifestError};

/// The `[worker]` table of a valid script worker, one `key = value` per
/// entry, in order.
pub const SCRIPT_WORKER: &[(&str, &str)] = &[
    ("id", "\"demo\""),
    ("title", "\"Demo\""),
    ("kind", "\"script\""),
    ("entry", "\"main.py\""),
    ("runtime", "\"python3\""),
];

/// The `[worker]` table of a valid agent worker.
pub const AGENT_WORKER: &[(&str, &str)] = &[
    ("id", "\"demo\""),
    ("title", "\"Demo\""),
    ("kind", "\"agent\""),
    ("entry", "\"AGENT.md\""),
];

/// A valid `[agent]` section.
pub const AGENT_SECTION: &str = "[agent]\nmodel = \"gpt-4o-mini\"\ntools = [\"read_file\", \"finish\"]\nautonomy = \"ask-writes\"\n";

/// A `[worker]` table from `base` with `overrides` applied: `Some(v)`
/// replaces or adds the key, `None` removes it.
pub fn worker(base: &[(&str, &str)], overrides: &[(&str, Option<&str>)]) -> String {
    let mut rows: Vec<(String, String)> = base
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    for (key, value) in overrides {
        match value {
            Some(v) => match rows.iter_mut().find(|(k, _)| k == key) {
                Some(row) => row.1 = (*v).to_string(),
                None => rows.push(((*key).to_string(), (*v).to_string())),
            },
            None => rows.retain(|(k, _)| k != key),
        }
    }
    let mut out = String::from("[worker]\n");
    for (k, v) in rows {
        out.push_str(&format!("{k} = {v}\n"));
    }
    out
}

/// A valid script manifest followed by `rest`.
pub fn script(rest: &str) -> String {
    format!("{}{rest}", worker(SCRIPT_WORKER, &[]))
}

/// A valid agent manifest followed by `rest`.
pub fn agent(rest: &str) -> String {
    format!("{}{AGENT_SECTION}{rest}", worker(AGENT_WORKER, &[]))
}

/// Parses a manifest that must be valid.
pub fn parse_ok(text: &str) -> Manifest {
    match Manifest::from_toml(text) {
        Ok(m) => m,
        Err(e) => panic!("expected a valid manifest, got: {e}\n---\n{text}"),
    }
}

/// Asserts that `err` has a problem at exactly `field` whose message
/// contains `fragment`, and that the rendered error names the field.
pub fn assert_problem(err: &ManifestError, field: &str, fragment: &str, label: &str) {
    let problems = err.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.field == field && p.message.contains(fragment)),
        "{label}: expected a problem at {field:?} containing {fragment:?}, got {problems:#?}"
    );
    let rendered = err.to_string();
    assert!(
        rendered.contains(field) && rendered.contains(fragment),
        "{label}: the message {rendered:?} should name {field:?}"
    );
}
