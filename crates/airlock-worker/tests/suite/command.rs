//! RUN-1: a script worker's argv in the sandbox; agents are not executable.

use std::path::Path;

use airlock_worker::CommandError;

use super::{SCRIPT_WORKER, agent, parse_ok, worker};

#[test]
fn run_1_runtime_to_argv() {
    let cases = [
        (
            "python3",
            "main.py",
            vec!["python3", "/airlock/worker/main.py"],
        ),
        (
            "node",
            "src/index.js",
            vec!["node", "/airlock/worker/src/index.js"],
        ),
        ("bash", "run.sh", vec!["bash", "/airlock/worker/run.sh"]),
        ("sh", "run.sh", vec!["sh", "/airlock/worker/run.sh"]),
        ("native", "bin/tool", vec!["/airlock/worker/bin/tool"]),
    ];
    for (runtime, entry, argv) in cases {
        let m = parse_ok(&worker(
            SCRIPT_WORKER,
            &[
                ("runtime", Some(&format!("{runtime:?}"))),
                ("entry", Some(&format!("{entry:?}"))),
            ],
        ));
        assert_eq!(
            m.command(Path::new("/airlock/worker")).unwrap(),
            argv,
            "{runtime}"
        );
        assert_eq!(
            m.command(Path::new("/airlock/worker/")).unwrap(),
            argv,
            "{runtime} /"
        );
    }
}

#[test]
fn run_1_an_agent_worker_has_no_command_of_its_own() {
    let err = parse_ok(&agent(""))
        .command(Path::new("/airlock/worker"))
        .unwrap_err();
    assert_eq!(err, CommandError::AgentWorker);
    assert_eq!(err.code(), "agent_worker");
    assert_eq!(
        err.to_string(),
        "an agent worker has no command of its own: its harness runs each tool call"
    );
}

#[test]
fn run_1_bundle_dir_must_be_absolute_and_clean() {
    let m = parse_ok(&worker(SCRIPT_WORKER, &[]));
    for dir in ["airlock/worker", "/airlock/../etc", "/airlock/./worker", ""] {
        let err = m.command(Path::new(dir)).unwrap_err();
        assert_eq!(err.code(), "invalid_bundle_dir", "{dir}");
    }
}
