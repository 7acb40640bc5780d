//! Positive controls: every bundle in the repository's `workers/` loads
//! cleanly, and behaves as its documentation says.

use std::path::{Path, PathBuf};

use airlock_worker::{Bundle, load_bundle, load_workers_dir};
use serde_json::json;

fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../workers")
}

fn example(id: &str) -> Bundle {
    load_bundle(&examples_dir().join(id)).unwrap_or_else(|e| panic!("{id}: {e}"))
}

#[test]
fn run_2_every_example_loads_cleanly() {
    let (bundles, errors) = load_workers_dir(&examples_dir());
    assert!(errors.is_empty(), "{errors:#?}");
    let ids: Vec<&str> = bundles.iter().map(|b| b.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "fetch-status",
            "hello-python",
            "node-json",
            "shell-stats",
            "triage-agent"
        ]
    );
    // Each folder of workers/ is a bundle: nothing was silently skipped.
    let folders = std::fs::read_dir(examples_dir())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert_eq!(folders, bundles.len());
}

#[test]
fn run_3_hello_python_contract() {
    let b = example("hello-python");
    assert_eq!(
        b.manifest.command(Path::new("/airlock/worker")).unwrap(),
        ["python3", "/airlock/worker/main.py"]
    );
    assert_eq!(
        b.manifest.check_input(&json!({"name": "Ada"})).unwrap(),
        json!({"name": "Ada", "times": 1, "shout": false})
    );
    assert!(b.manifest.check_input(&json!({})).is_err());
    b.manifest
        .check_outputs(
            &json!({"greeting": "Hello, Ada!"}),
            &["report.txt".to_string()],
        )
        .unwrap();
    let err = b
        .manifest
        .check_outputs(&json!({"greeting": "Hello, Ada!"}), &[])
        .unwrap_err();
    assert_eq!(err.code(), "schema_violation");
}

#[test]
fn run_3_other_examples_contracts() {
    let stats = example("shell-stats");
    assert_eq!(
        stats
            .manifest
            .command(Path::new("/airlock/worker"))
            .unwrap(),
        ["sh", "/airlock/worker/stats.sh"]
    );
    stats
        .manifest
        .check_outputs(
            &json!({"lines": 2, "words": 8, "bytes": 43}),
            &["stats.txt".to_string()],
        )
        .unwrap();

    let node = example("node-json");
    assert_eq!(
        node.manifest
            .check_input(&json!({"document": {"a": [1]}}))
            .unwrap(),
        json!({"document": {"a": [1]}, "separator": "."})
    );
    node.manifest
        .check_outputs(&json!({"flat": {"a[0]": 1}, "leaves": 1}), &[])
        .unwrap();

    let fetch = example("fetch-status");
    assert_eq!(fetch.manifest.egress.allow[0].as_str(), "api.github.com");

    let agent = example("triage-agent");
    assert_eq!(agent.manifest.agent().unwrap().model, "triage");
    assert_eq!(
        agent
            .manifest
            .command(Path::new("/airlock/worker"))
            .unwrap_err()
            .code(),
        "agent_worker"
    );
}
