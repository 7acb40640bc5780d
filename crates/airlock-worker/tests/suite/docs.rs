//! docs/workers.md stays in step with the code: every complete manifest in
//! it parses, and the limit and budget tables match the data.

use std::path::Path;

use airlock_worker::{
    BUDGET_TABLE, LIMIT_TABLE, Manifest, PLATFORM_SECRET_NAMES, PLATFORM_SECRET_PREFIX, Tool,
    UNENFORCED,
};

fn doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/workers.md");
    std::fs::read_to_string(path).unwrap()
}

/// The ```toml blocks of the document.
fn toml_blocks(doc: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```toml") => current = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn run_1_every_complete_manifest_in_the_docs_parses() {
    let blocks = toml_blocks(&doc());
    let complete: Vec<&String> = blocks.iter().filter(|b| b.contains("[worker]")).collect();
    assert!(
        complete.len() >= 4,
        "expected one complete example per kind"
    );
    for block in complete {
        if let Err(e) = Manifest::from_toml(block) {
            panic!("docs/workers.md example does not parse: {e}\n---\n{block}");
        }
    }
}

#[test]
fn run_1_docs_list_the_limits_budgets_tools_and_platform_secrets() {
    let doc = doc();
    let row = |name: &str, default: u64, max: u64| {
        doc.lines().any(|l| {
            l.starts_with(&format!("| `{name}`"))
                && l.contains(&format!("| {default} |"))
                && l.contains(&format!("| {max} |"))
        })
    };
    for (name, default, max) in LIMIT_TABLE.iter().chain(BUDGET_TABLE) {
        assert!(
            row(name, *default, *max),
            "docs/workers.md has no row for {name} = {default}, max {max}"
        );
    }
    for (name, _) in Tool::ALL {
        assert!(
            doc.contains(&format!("`{name}`")),
            "tool {name} is not documented"
        );
    }
    assert!(doc.contains(PLATFORM_SECRET_PREFIX));
    for name in PLATFORM_SECRET_NAMES {
        assert!(
            doc.contains(&format!("`{name}`")),
            "platform secret {name} is not documented"
        );
    }
}

#[test]
fn run_1_docs_list_every_field_refused_because_it_is_not_enforced() {
    let doc = doc();
    let section = doc
        .split("## Fields that are refused until they are enforced")
        .nth(1)
        .expect("docs/workers.md has the section")
        .split("\n## ")
        .next()
        .unwrap();
    for u in UNENFORCED {
        assert!(
            section.contains(&format!("| `{}` | {} |", u.field, u.why)),
            "docs/workers.md does not list {} with its reason",
            u.field
        );
    }
}
