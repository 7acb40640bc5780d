//! The executor's stages over a real store (SQLite in a temporary folder)
//! and vault, with the recording launcher instead of a sandbox: each
//! stage's failure ends the run in the right state with the right code,
//! and the launcher saw a launch only when the run got that far. The real
//! sandbox runs the same stages in the CLI suite (runs, secrets, egress).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use airlock_launch::{Launch, LaunchFailure, Launched, RecordingLauncher, fake_result};
use airlock_sandbox::LaunchError;
use airlock_store::{DEFAULT_WORKSPACE, RunErrorCode, RunRecord, RunState, Store};

use super::{OUTPUT_DIR, authorise::trigger_needed};
use crate::runs::StartRun;
use crate::{Config, Service};

const WS: &str = DEFAULT_WORKSPACE;

struct Harness {
    dir: tempfile::TempDir,
    svc: Arc<Service>,
    fake: Arc<RecordingLauncher>,
}

/// `worker.toml` of a `sh` script worker, with `rest` appended.
fn script(id: &str, rest: &str) -> String {
    format!(
        "[worker]\nid = \"{id}\"\ntitle = \"{id}\"\nkind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n\n{rest}"
    )
}

fn write_worker(workers: &Path, id: &str, manifest: &str) {
    let dir = workers.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("worker.toml"), manifest).unwrap();
    if manifest.contains("kind = \"agent\"") {
        std::fs::write(dir.join("AGENT.md"), "# Agent\nDo the thing.\n").unwrap();
    } else {
        std::fs::write(dir.join("run.sh"), "echo hi\n").unwrap();
    }
}

/// Where the launch request's writable output mount points on the host.
fn output_dir(launch: &Launch) -> PathBuf {
    launch
        .sandbox
        .mounts
        .iter()
        .find(|m| m.target == Path::new(OUTPUT_DIR) && m.writable)
        .expect("the output mount")
        .source
        .clone()
}

/// A fake workload that writes `files` into the output folder, then ends
/// with `result`.
fn writes(
    files: &'static [(&'static str, &'static [u8])],
    result: fn() -> airlock_sandbox::RunResult,
) -> RecordingLauncher {
    RecordingLauncher::answering(move |launch, _| {
        let out = output_dir(launch);
        for (name, bytes) in files {
            let path = out.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        Ok(Launched {
            result: result(),
            egress: launch.egress.as_ref().map(|_| Default::default()),
            notices: Vec::new(),
        })
    })
}

fn exit0() -> airlock_sandbox::RunResult {
    fake_result(Some(0), None)
}

impl Harness {
    async fn new(
        workers: &[(&str, String)],
        policy: Option<&str>,
        fake: RecordingLauncher,
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (id, manifest) in workers {
            write_worker(&root.join("workers"), id, manifest);
        }
        let mut cfg = Config::with_defaults(root.join("data"), root.join("workers"));
        cfg.egress_policy = policy.map(|text| {
            let p = root.join("egress.toml");
            if text != "MISSING" {
                std::fs::write(&p, text).unwrap();
            }
            p
        });
        let store = Store::open(&format!("sqlite://{}", root.join("airlock.db").display()))
            .await
            .unwrap();
        let fake = Arc::new(fake);
        let svc = Service::open_with_launcher(store, cfg, fake.clone()).unwrap();
        assert!(svc.worker_errors().is_empty(), "{:?}", svc.worker_errors());
        Self { dir, svc, fake }
    }

    async fn set_secret(&self, name: &str, value: &[u8]) {
        self.svc
            .secrets
            .set(WS, name, value.to_vec(), "test")
            .await
            .unwrap();
    }

    /// Creates a run of `worker` from `trigger` by `actor`, and executes it.
    async fn run_as(&self, worker: &str, trigger: &str, actor: &str) -> RunRecord {
        let created = self
            .svc
            .start_run(StartRun {
                workspace: WS.into(),
                worker_id: worker.into(),
                input: serde_json::json!({}),
                trigger: trigger.into(),
                actor: actor.into(),
                idempotency_key: None,
            })
            .await
            .unwrap();
        self.execute_next().await;
        self.svc.run_in(WS, &created.run.id).await.unwrap()
    }

    async fn run(&self, worker: &str) -> RunRecord {
        self.run_as(worker, "cli", "local").await
    }

    async fn execute_next(&self) {
        let claim = self
            .svc
            .store
            .claim_next(&self.svc.owner, self.svc.cfg.lease, &[])
            .await
            .unwrap()
            .expect("a queued run");
        self.svc.execute(claim).await;
    }
}

/// `(state, code)` of a finished run.
fn ended(r: &RunRecord) -> (RunState, Option<&str>) {
    (r.state, r.error_code.as_deref())
}

fn blocked(code: RunErrorCode) -> (RunState, Option<&'static str>) {
    assert_eq!(code.state(), RunState::Blocked);
    (RunState::Blocked, Some(code.as_str()))
}

fn failed(code: RunErrorCode) -> (RunState, Option<&'static str>) {
    (code.state(), Some(code.as_str()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_3_a_clean_run_is_launched_once_with_the_manifest_request() {
    let h = Harness::new(
        &[(
            "hello",
            script(
                "hello",
                "[outputs.greeting]\ntype = \"string\"\n\n[limits]\ntimeout_s = 30\nmemory_mb = 64\npids = 16\n",
            ),
        )],
        None,
        writes(
            &[("result.json", b"{\"greeting\": \"hi\"}"), ("note.txt", b"a note\n")],
            exit0,
        ),
    )
    .await;
    let r = h.run("hello").await;
    assert_eq!(ended(&r), (RunState::Succeeded, None), "{r:?}");
    assert_eq!(r.outputs, Some(serde_json::json!({"greeting": "hi"})));
    let artifacts = h.svc.store.artifacts(WS, &r.id).await.unwrap();
    assert_eq!(
        artifacts
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>(),
        ["note.txt", "result.json"]
    );

    let launches = h.fake.launches();
    assert_eq!(launches.len(), 1);
    let l = &launches[0];
    let worker_dir = h.dir.path().join("workers/hello");
    let run_dir = h.dir.path().join("data/runs").join(&r.id);
    assert_eq!(l.sandbox.argv, ["sh", "/airlock/worker/run.sh"]);
    assert_eq!(l.sandbox.cwd.as_deref(), Some(Path::new(OUTPUT_DIR)));
    let mounts: Vec<(&Path, &Path, bool)> = l
        .sandbox
        .mounts
        .iter()
        .map(|m| (m.source.as_path(), m.target.as_path(), m.writable))
        .collect();
    assert_eq!(
        mounts,
        [
            (worker_dir.as_path(), Path::new("/airlock/worker"), false),
            (
                run_dir.join("input.json").as_path(),
                Path::new("/airlock/input.json"),
                false
            ),
            (
                run_dir.join("output").as_path(),
                Path::new("/airlock/output"),
                true
            ),
        ]
    );
    assert_eq!(l.sandbox.timeout, Some(std::time::Duration::from_secs(30)));
    assert_eq!(l.sandbox.limits.memory_bytes, Some(64 << 20));
    assert_eq!(l.sandbox.limits.pids, Some(16));
    assert!(l.sandbox.env.is_empty() && l.sandbox.secret_files.is_empty());
    assert!(l.egress.is_none(), "no [egress]: no network at all");
    assert!(
        l.platform_env
            .contains(&("AIRLOCK_RUN_ID".to_string(), r.id.clone()))
    );
    // The run folder is gone once the run is over.
    assert!(!run_dir.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_4_authorise_refusals_block_before_any_launch() {
    let webhook_only = script("hook", "[[triggers]]\nkind = \"webhook\"\n");
    let agent = "[worker]\nid = \"agent\"\ntitle = \"agent\"\nkind = \"agent\"\nentry = \"AGENT.md\"\n\n[agent]\nmodel = \"m\"\ntools = []\nautonomy = \"ask-writes\"\n".to_string();
    let h = Harness::new(
        &[
            ("plain", script("plain", "")),
            ("hook", webhook_only),
            ("turncoat", script("turncoat", "")),
            ("agent", agent),
            ("gone", script("gone", "")),
        ],
        None,
        RecordingLauncher::succeeding(),
    )
    .await;

    let r = h.run_as("plain", "api", "usr_not_a_member").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::ActorNotAuthorized));
    // A webhook-only worker cannot be started by hand: refused when the run
    // is created …
    let refused = h
        .svc
        .start_run(StartRun {
            workspace: WS.into(),
            worker_id: "hook".into(),
            input: serde_json::json!({}),
            trigger: "cli".into(),
            actor: "local".into(),
            idempotency_key: None,
        })
        .await
        .unwrap_err();
    assert_eq!(
        refused.code,
        airlock_protocol::ErrorCode::TriggerNotDeclared
    );
    // … and re-checked when it executes: a worker that lost its manual
    // trigger while the run was queued.
    let queued = h
        .svc
        .start_run(StartRun {
            workspace: WS.into(),
            worker_id: "turncoat".into(),
            input: serde_json::json!({}),
            trigger: "cli".into(),
            actor: "local".into(),
            idempotency_key: None,
        })
        .await
        .unwrap();
    write_worker(
        &h.dir.path().join("workers"),
        "turncoat",
        &script("turncoat", "[[triggers]]\nkind = \"webhook\"\n"),
    );
    h.svc.load_workers();
    h.execute_next().await;
    let r = h.svc.run_in(WS, &queued.run.id).await.unwrap();
    assert_eq!(ended(&r), blocked(RunErrorCode::TriggerNotDeclared));
    // An agent without a model profile in the workspace.
    let r = h.run("agent").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::ModelProfileMissing));
    // A worker removed between queueing and execution.
    let created = h
        .svc
        .start_run(StartRun {
            workspace: WS.into(),
            worker_id: "gone".into(),
            input: serde_json::json!({}),
            trigger: "cli".into(),
            actor: "local".into(),
            idempotency_key: None,
        })
        .await
        .unwrap();
    std::fs::remove_dir_all(h.dir.path().join("workers/gone")).unwrap();
    h.svc.load_workers();
    h.execute_next().await;
    let r = h.svc.run_in(WS, &created.run.id).await.unwrap();
    assert_eq!(ended(&r), failed(RunErrorCode::WorkerMissing));
    assert_eq!(h.fake.count(), 0, "nothing was launched");

    // Positive controls: the same workers, from sources they accept.
    let r = h.run_as("plain", "api", "local").await;
    assert_eq!(r.state, RunState::Succeeded, "{r:?}");
    let r = h.run_as("hook", "webhook", "webhook:hook").await;
    assert_eq!(r.state, RunState::Succeeded, "{r:?}");
    assert_eq!(h.fake.count(), 2);
}

#[test]
fn run_6_every_manual_front_end_needs_the_manual_trigger() {
    use airlock_worker::TriggerKind;
    for (source, kind) in [
        ("cli", Some(TriggerKind::Manual)),
        ("api", Some(TriggerKind::Manual)),
        ("plan", Some(TriggerKind::Manual)),
        ("mcp", Some(TriggerKind::Manual)),
        ("ui", Some(TriggerKind::Manual)),
        ("schedule", Some(TriggerKind::Schedule)),
        ("webhook", Some(TriggerKind::Webhook)),
        ("anything-else", None),
    ] {
        assert_eq!(trigger_needed(source), kind, "{source}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_5_an_unreadable_operator_policy_blocks_runs_that_declare_secrets() {
    // Before: the policy text defaulted to "" and the check that keeps
    // channel credentials out of [secrets] ran over no names and passed.
    let h = Harness::new(
        &[
            (
                "reader",
                script("reader", "[secrets]\nnames = [\"MODEL_KEY\"]\n"),
            ),
            (
                "caller",
                script("caller", "[egress]\nallow = [\"api.example.com\"]\n"),
            ),
            ("plain", script("plain", "")),
        ],
        Some("MISSING"),
        RecordingLauncher::succeeding(),
    )
    .await;
    h.set_secret("MODEL_KEY", b"sk-live-0123456789abcdef").await;
    let r = h.run("reader").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::EgressPolicyUnreadable));
    let r = h.run("caller").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::EgressPolicyUnreadable));
    assert_eq!(h.fake.count(), 0);
    // A run that needs neither egress nor secrets does not need the policy.
    let r = h.run("plain").await;
    assert_eq!(r.state, RunState::Succeeded, "{r:?}");
    assert_eq!(h.fake.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_5_channel_credentials_and_missing_secrets_block_before_any_launch() {
    let policy = "[channels.model]\nupstream = \"https://api.example.org\"\nheader = \"Authorization\"\nvalue = \"Bearer ${secret:MODEL_KEY}\"\n";
    let h = Harness::new(
        &[
            (
                "grabber",
                script("grabber", "[secrets]\nnames = [\"MODEL_KEY\"]\n"),
            ),
            ("needs", script("needs", "[secrets]\nnames = [\"UNSET\"]\n")),
            (
                "envy",
                script(
                    "envy",
                    "[secrets]\nnames = [\"BINARY\"]\ndelivery = \"env\"\n",
                ),
            ),
            (
                "elsewhere",
                script("elsewhere", "[egress]\nchannels = [\"other\"]\n"),
            ),
            (
                "caller",
                script("caller", "[egress]\nchannels = [\"model\"]\n"),
            ),
        ],
        Some(policy),
        RecordingLauncher::succeeding(),
    )
    .await;
    h.set_secret("MODEL_KEY", b"sk-live-0123456789abcdef").await;
    h.set_secret(
        "BINARY",
        &[0xff, 0xfe, 0x41, 0x42, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48],
    )
    .await;
    let r = h.run("grabber").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::SecretForbidden));
    let r = h.run("needs").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::SecretMissing));
    let r = h.run("envy").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::SecretInvalid));
    let r = h.run("elsewhere").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::EgressPolicyInvalid));
    assert_eq!(h.fake.count(), 0);

    // Positive control: the channel the policy has; the sandbox is given
    // that channel alone, and its credential stays with the proxy.
    let r = h.run("caller").await;
    assert_eq!(r.state, RunState::Succeeded, "{r:?}");
    let launches = h.fake.launches();
    let plan = launches[0].egress.as_ref().expect("an egress plan");
    assert_eq!(plan.channels, ["model"]);
    let policy = plan.policy.as_ref().unwrap();
    assert_eq!(
        policy.channels["model"].value.expose(),
        "Bearer sk-live-0123456789abcdef"
    );
    assert!(launches[0].sandbox.secret_files.is_empty() && launches[0].sandbox.env.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_4_an_invalid_operator_policy_blocks_egress_runs() {
    let h = Harness::new(
        &[(
            "caller",
            script("caller", "[egress]\nallow = [\"api.example.com\"]\n"),
        )],
        Some("this is not toml ["),
        RecordingLauncher::succeeding(),
    )
    .await;
    let r = h.run("caller").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::EgressPolicyInvalid));
    assert_eq!(h.fake.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_4_a_run_folder_that_cannot_be_staged_fails_before_any_launch() {
    let h = Harness::new(
        &[("plain", script("plain", ""))],
        None,
        RecordingLauncher::succeeding(),
    )
    .await;
    let runs = h.dir.path().join("data/runs");
    std::fs::remove_dir_all(&runs).unwrap();
    std::fs::write(&runs, b"not a folder").unwrap();
    let r = h.run("plain").await;
    assert_eq!(ended(&r), failed(RunErrorCode::StagingFailed));
    assert_eq!(h.fake.count(), 0);
    // Positive control.
    std::fs::remove_file(&runs).unwrap();
    std::fs::create_dir(&runs).unwrap();
    assert_eq!(h.run("plain").await.state, RunState::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_4_launch_failures_end_the_run_with_their_code() {
    type Answer = fn() -> Result<Launched, LaunchFailure>;
    let cases: [(Answer, RunErrorCode); 4] = [
        (
            || Err(LaunchFailure::EgressUnavailable("no runtime".into())),
            RunErrorCode::EgressUnavailable,
        ),
        (
            || {
                Err(LaunchFailure::Sandbox(LaunchError::Executable(
                    airlock_sandbox::exe::ExeError::NotFound("sh".into()),
                )))
            },
            RunErrorCode::ExecutableNotFound,
        ),
        (
            || {
                Err(LaunchFailure::Sandbox(
                    LaunchError::ContainmentUnavailable {
                        missing: vec!["user_namespace".into()],
                        report: Box::new(airlock_sandbox::ContainmentReport::uncontained()),
                    },
                ))
            },
            RunErrorCode::ContainmentUnavailable,
        ),
        (
            || {
                Err(LaunchFailure::Sandbox(LaunchError::Setup {
                    stage: "mount".into(),
                    error: "refused".into(),
                }))
            },
            RunErrorCode::SandboxSetupFailed,
        ),
    ];
    for (answer, code) in cases {
        let h = Harness::new(
            &[("plain", script("plain", ""))],
            None,
            RecordingLauncher::answering(move |_, _| answer()),
        )
        .await;
        let r = h.run("plain").await;
        assert_eq!(ended(&r), (code.state(), Some(code.as_str())), "{r:?}");
        assert_eq!(h.fake.count(), 1);
        if code == RunErrorCode::ContainmentUnavailable {
            assert_eq!(r.state, RunState::Blocked);
            assert!(r.containment.is_some(), "the report is kept: {r:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_4_collect_turns_each_ending_into_its_code() {
    fn with(f: impl FnOnce(&mut airlock_sandbox::RunResult)) -> airlock_sandbox::RunResult {
        let mut r = fake_result(None, None);
        f(&mut r);
        r
    }
    type Case = (
        &'static str,
        &'static [(&'static str, &'static [u8])],
        fn() -> airlock_sandbox::RunResult,
        (RunState, Option<&'static str>),
    );
    let cases: &[Case] = &[
        (
            "exit 3",
            &[],
            || fake_result(Some(3), None),
            failed(RunErrorCode::ExitNonzero),
        ),
        (
            "signal",
            &[],
            || fake_result(None, Some(9)),
            failed(RunErrorCode::KilledBySignal),
        ),
        (
            "memory",
            &[],
            || {
                with(|r| {
                    r.signal = Some(9);
                    r.limit_hits = vec!["memory".into()];
                })
            },
            failed(RunErrorCode::MemoryLimit),
        ),
        (
            "timeout",
            &[],
            || with(|r| r.timed_out = true),
            (RunState::TimedOut, Some("timeout")),
        ),
        (
            "cancelled",
            &[],
            || with(|r| r.cancelled = true),
            (RunState::Cancelled, Some("cancelled")),
        ),
        (
            "not an object",
            &[("result.json", b"[1]")],
            exit0,
            failed(RunErrorCode::SchemaViolation),
        ),
        (
            "missing output",
            &[("result.json", b"{}")],
            exit0,
            failed(RunErrorCode::SchemaViolation),
        ),
        (
            "file output over max_bytes",
            &[
                ("result.json", b"{\"n\": 1}"),
                ("report.txt", b"0123456789abcdef"),
            ],
            exit0,
            failed(RunErrorCode::SchemaViolation),
        ),
        (
            "control",
            &[
                ("result.json", b"{\"n\": 1}"),
                ("report.txt", b"0123456789"),
            ],
            exit0,
            (RunState::Succeeded, None),
        ),
    ];
    let manifest = script(
        "w",
        "[outputs.n]\ntype = \"number\"\n\n[outputs.report]\ntype = \"file\"\npath = \"report.txt\"\nmax_bytes = 10\nrequired = false\n",
    );
    for (label, files, result, want) in cases {
        let h = Harness::new(&[("w", manifest.clone())], None, writes(files, *result)).await;
        let r = h.run("w").await;
        assert_eq!(ended(&r), *want, "{label}: {r:?}");
        assert_eq!(h.fake.count(), 1, "{label}");
    }

    // A symlink in the output folder never reaches the artifact store.
    let h = Harness::new(
        &[("w", script("w", ""))],
        None,
        RecordingLauncher::answering(|launch, _| {
            std::os::unix::fs::symlink("/etc/passwd", output_dir(launch).join("link")).unwrap();
            Ok(Launched {
                result: exit0(),
                egress: None,
                notices: Vec::new(),
            })
        }),
    )
    .await;
    let r = h.run("w").await;
    assert_eq!(ended(&r), failed(RunErrorCode::OutputSymlink));
    assert!(h.svc.store.artifacts(WS, &r.id).await.unwrap().is_empty());
}

const SECRET: &str = "tok-4f8b1c2d9e7a6b5c3d2e1f0a";

/// Echoes the delivered secret file into the outputs, as a careless
/// script would, plus `big` bytes of text.
fn leaks(big: usize) -> RecordingLauncher {
    RecordingLauncher::answering(move |launch, _| {
        let f = launch
            .sandbox
            .secret_files
            .iter()
            .find(|f| f.name == "TOKEN")
            .expect("TOKEN delivered as a file");
        let value = String::from_utf8(f.value.expose().to_vec()).unwrap();
        let out = output_dir(launch);
        std::fs::write(
            out.join("result.json"),
            serde_json::json!({ "echo": format!("the token is {value}") }).to_string(),
        )
        .unwrap();
        let mut text = "x".repeat(big);
        text.push_str(&format!("\ntoken={value}\n"));
        std::fs::write(out.join("log.txt"), text).unwrap();
        Ok(Launched {
            result: exit0(),
            egress: None,
            notices: Vec::new(),
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_6_delivered_secrets_are_redacted_from_outputs_and_artifacts() {
    let manifest = script(
        "leaky",
        "[secrets]\nnames = [\"TOKEN\"]\n\n[outputs.echo]\ntype = \"string\"\n\n[limits]\noutput_bytes = 40000000\n",
    );
    let h = Harness::new(&[("leaky", manifest.clone())], None, leaks(0)).await;
    h.set_secret("TOKEN", SECRET.as_bytes()).await;
    let r = h.run("leaky").await;
    assert_eq!(r.state, RunState::Succeeded, "{r:?}");
    let outputs = r.outputs.unwrap().to_string();
    assert!(!outputs.contains(SECRET), "{outputs}");
    assert!(
        outputs.contains("the token is"),
        "positive control: {outputs}"
    );
    for a in h.svc.store.artifacts(WS, &r.id).await.unwrap() {
        let path = h.svc.artifacts.path(&a.digest).unwrap();
        let bytes = std::fs::read(path).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(SECRET),
            "{} holds the secret",
            a.name
        );
    }

    // Too large to redact in memory: not published, and the run fails.
    let h = Harness::new(&[("leaky", manifest)], None, leaks(17 << 20)).await;
    h.set_secret("TOKEN", SECRET.as_bytes()).await;
    let r = h.run("leaky").await;
    assert_eq!(ended(&r), failed(RunErrorCode::RedactionFailed));
    assert!(!r.error_message.unwrap_or_default().contains(SECRET));
    for a in h.svc.store.artifacts(WS, &r.id).await.unwrap() {
        assert_ne!(a.name, "log.txt", "the unredactable artifact was recorded");
    }
}

#[test]
fn run_4_mapped_codes_keep_the_lower_layers_strings() {
    use airlock_sandbox::exe::ExeError;
    let launch = [
        LaunchError::Executable(ExeError::NotFound("x".into())),
        LaunchError::Executable(ExeError::Changed("x".into())),
        LaunchError::Executable(ExeError::NotExecutable("x".into())),
        LaunchError::ContainmentUnavailable {
            missing: vec![],
            report: Box::new(airlock_sandbox::ContainmentReport::uncontained()),
        },
        LaunchError::Setup {
            stage: "x".into(),
            error: "x".into(),
        },
        LaunchError::Exec {
            path: "x".into(),
            error: "x".into(),
        },
        LaunchError::Io(std::io::Error::other("x")),
    ];
    for e in &launch {
        assert_eq!(super::launch::launch_error_code(e).as_str(), e.reason());
    }
    let p = || "x".to_string();
    let files = [
        airlock_files::FileError::Symlink { path: p() },
        airlock_files::FileError::NotRegular {
            path: p(),
            kind: "fifo",
        },
        airlock_files::FileError::HardLink { path: p() },
        airlock_files::FileError::TooManyFiles { limit: 1 },
        airlock_files::FileError::TooLarge {
            path: p(),
            limit: 1,
        },
        airlock_files::FileError::TotalTooLarge { limit: 1 },
        airlock_files::FileError::TooDeep { path: p() },
        airlock_files::FileError::BadName { path: p() },
        airlock_files::FileError::Io {
            path: p(),
            error: p(),
        },
    ];
    for e in &files {
        assert_eq!(super::collect::file_error_code(e).as_str(), e.reason());
    }
    let secrets = [
        crate::secrets::SecretError::Invalid(p()),
        crate::secrets::SecretError::Platform(p()),
        crate::secrets::SecretError::Missing(p()),
        crate::secrets::SecretError::Corrupt(p()),
    ];
    for e in &secrets {
        assert_eq!(super::stage::secret_code(e).as_str(), e.code());
    }
}

fn gated() -> String {
    script(
        "gated",
        "[approvals]\nrequired = true\nreason = \"sends mail\"\nttl_s = 60\n",
    )
}

impl Harness {
    /// Creates a run of `worker` as `actor` (not executed).
    async fn create(&self, worker: &str, actor: &str) -> RunRecord {
        self.svc
            .start_run(StartRun {
                workspace: WS.into(),
                worker_id: worker.into(),
                input: serde_json::json!({}),
                trigger: "api".into(),
                actor: actor.into(),
                idempotency_key: None,
            })
            .await
            .unwrap()
            .run
    }

    async fn approve_as_operator(&self, run: &RunRecord) -> airlock_protocol::approvals::Approval {
        let a = self
            .svc
            .store
            .run_approval(WS, &run.id)
            .await
            .unwrap()
            .unwrap();
        let op = crate::Caller::operator(WS);
        self.svc
            .approve(&op, &a.id, &airlock_protocol::approvals::Approve::default())
            .await
            .unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_5_a_gated_run_executes_only_with_its_approval_for_exactly_its_payload() {
    let h = Harness::new(
        &[("gated", gated()), ("plain", script("plain", ""))],
        None,
        RecordingLauncher::succeeding(),
    )
    .await;
    // The run waits, with a request binding the hash of its payload.
    let run = h.create("gated", "local").await;
    assert_eq!(run.state, RunState::AwaitingApproval);
    let req = h
        .svc
        .store
        .run_approval(WS, &run.id)
        .await
        .unwrap()
        .unwrap();
    let payload = Service::plan_body(&h.svc.worker("gated").unwrap(), &serde_json::json!({}));
    // Stored as its canonical form (`1.0` is `1` there).
    assert_eq!(
        airlock_audit::canonicalize(&req.payload).unwrap(),
        airlock_audit::canonicalize(&payload).unwrap()
    );
    assert_eq!(
        req.payload_hash,
        airlock_store::sha256_hex(&airlock_audit::canonicalize(&payload).unwrap())
    );
    for key in [
        "worker",
        "input_hash",
        "entry_sha256",
        "runtime",
        "limits",
        "egress",
    ] {
        assert!(payload.get(key).is_some(), "{key} is bound");
    }
    assert_eq!(req.reason.as_deref(), Some("sends mail"));
    assert_eq!(req.expires_at - req.created_at, 60_000);
    // Nothing claims it; approved, it runs once and uses the approval.
    assert!(
        h.svc
            .store
            .claim_next("n", h.svc.cfg.lease, &[])
            .await
            .unwrap()
            .is_none()
    );
    h.approve_as_operator(&run).await;
    h.execute_next().await;
    let r = h.svc.run_in(WS, &run.id).await.unwrap();
    assert_eq!(r.state, RunState::Succeeded, "{r:?}");
    assert_eq!(h.fake.count(), 1);
    let used = h
        .svc
        .store
        .get_approval(WS, &req.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        used.state,
        airlock_protocol::approvals::ApprovalState::Consumed
    );

    // One field changed between the approval and the claim (the entry was
    // edited): refused, nothing launched.
    let run = h.create("gated", "local").await;
    h.approve_as_operator(&run).await;
    std::fs::write(h.dir.path().join("workers/gated/run.sh"), "echo changed\n").unwrap();
    h.svc.load_workers();
    h.execute_next().await;
    let r = h.svc.run_in(WS, &run.id).await.unwrap();
    assert_eq!(ended(&r), blocked(RunErrorCode::ApprovalInvalid));
    assert!(
        r.error_message.as_deref().unwrap_or("").contains("changed"),
        "{r:?}"
    );
    assert_eq!(h.fake.count(), 1, "nothing more was launched");

    // A worker that starts requiring approvals refuses its queued runs
    // that have none.
    let queued = h.create("plain", "local").await;
    write_worker(
        &h.dir.path().join("workers"),
        "plain",
        &script("plain", "[approvals]\nrequired = true\n"),
    );
    h.svc.load_workers();
    h.execute_next().await;
    let r = h.svc.run_in(WS, &queued.id).await.unwrap();
    assert_eq!(ended(&r), blocked(RunErrorCode::ApprovalInvalid));
    assert_eq!(h.fake.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_5_rejected_and_expired_requests_end_the_run_without_a_launch() {
    let h = Harness::new(&[("gated", gated())], None, RecordingLauncher::succeeding()).await;
    let op = crate::Caller::operator(WS);
    let run = h.create("gated", "local").await;
    let req = h
        .svc
        .store
        .run_approval(WS, &run.id)
        .await
        .unwrap()
        .unwrap();
    h.svc
        .reject(
            &op,
            &req.id,
            &airlock_protocol::approvals::Reject {
                note: Some("no".into()),
            },
        )
        .await
        .unwrap();
    let r = h.svc.run_in(WS, &run.id).await.unwrap();
    assert_eq!(ended(&r), blocked(RunErrorCode::ApprovalRejected));
    // Replay of a decided request: refused (409 over HTTP).
    let again = h
        .svc
        .approve(
            &op,
            &req.id,
            &airlock_protocol::approvals::Approve::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(again.code, airlock_protocol::ErrorCode::ApprovalNotPending);
    // Nobody decides: the reaper's pass ends it once its time is up (the
    // harness clock is the system clock here; the boundary itself is in
    // the store's conformance cases).
    let run = h.create("gated", "local").await;
    let req = h
        .svc
        .store
        .run_approval(WS, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        h.svc
            .store
            .expire_approvals(req.expires_at - 1)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        h.svc
            .store
            .expire_approvals(req.expires_at)
            .await
            .unwrap()
            .len(),
        1
    );
    let r = h.svc.run_in(WS, &run.id).await.unwrap();
    assert_eq!(ended(&r), blocked(RunErrorCode::ApprovalExpired));
    assert_eq!(h.fake.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_6_a_stopped_workspace_starts_nothing_and_resuming_restarts_nothing() {
    let h = Harness::new(
        &[("plain", script("plain", "")), ("gated", gated())],
        None,
        RecordingLauncher::succeeding(),
    )
    .await;
    let op = crate::Caller::operator(WS);
    let queued = h.create("plain", "local").await;
    let waiting = h.create("gated", "local").await;
    let out = h
        .svc
        .emergency_stop(
            &op,
            &airlock_protocol::emergency::StopRequest {
                reason: Some("drill".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(out.runs_cancelled, 2);
    for id in [&queued.id, &waiting.id] {
        let r = h.svc.run_in(WS, id).await.unwrap();
        assert_eq!(ended(&r), failed(RunErrorCode::EmergencyStop));
        assert_eq!(r.state, RunState::Cancelled);
    }
    // New runs are refused while stopped.
    let refused = h
        .svc
        .start_run(StartRun {
            workspace: WS.into(),
            worker_id: "plain".into(),
            input: serde_json::json!({}),
            trigger: "api".into(),
            actor: "local".into(),
            idempotency_key: None,
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code, airlock_protocol::ErrorCode::EmergencyStopped);
    // A run that slipped in (created as the stop landed) is refused when
    // it would start.
    let slipped = h
        .svc
        .store
        .create_run(airlock_store::NewRun {
            workspace_id: WS.into(),
            worker_id: "plain".into(),
            input: serde_json::json!({}),
            trigger: "api".into(),
            actor: "local".into(),
            plan_id: None,
            idempotency: None,
        })
        .await
        .unwrap()
        .run;
    h.execute_next().await;
    let r = h.svc.run_in(WS, &slipped.id).await.unwrap();
    assert_eq!(
        (r.state, r.error_code.as_deref()),
        (RunState::Cancelled, Some("emergency_stop"))
    );
    assert_eq!(h.fake.count(), 0, "nothing was launched");
    // Resume: nothing restarts; new runs run.
    let st = h.svc.emergency_resume(&op).await.unwrap();
    assert!(!st.stopped);
    for id in [&queued.id, &waiting.id, &slipped.id] {
        assert_eq!(
            h.svc.run_in(WS, id).await.unwrap().state,
            RunState::Cancelled
        );
    }
    assert!(
        h.svc
            .store
            .claim_next("n", h.svc.cfg.lease, &[])
            .await
            .unwrap()
            .is_none()
    );
    let r = h.run_as("plain", "api", "local").await;
    assert_eq!(r.state, RunState::Succeeded);
    assert_eq!(h.fake.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_4_the_journal_hands_out_dispatch_tickets_and_rules_only_skip_the_person() {
    use crate::journal::{Decided, Verdict};
    use airlock_protocol::approvals::{Approve, Grant};
    use std::time::Duration;
    let h = Harness::new(
        &[("plain", script("plain", ""))],
        None,
        RecordingLauncher::succeeding(),
    )
    .await;
    let op = crate::Caller::operator(WS);
    let run = h.create("plain", "local").await;
    let claim = |lease| {
        let store = h.svc.store.clone();
        let id = run.id.clone();
        async move {
            store
                .claim_run("n", lease, &id)
                .await
                .unwrap()
                .expect("claimable")
        }
    };
    let c = claim(Duration::from_secs(60)).await;
    let ask = || Verdict::RequireApproval {
        detail: serde_json::json!({"risk": "write"}),
        reason: "the agent wants to look at the repository".into(),
        ttl: Duration::from_secs(60),
    };
    let git = serde_json::json!({"tool": "run_command", "argv": ["git", "status"]});
    let (a, created) = h
        .svc
        .propose_action(&c.run, c.token, "call-1", "run_command", &git)
        .await
        .unwrap();
    assert!(created);
    let Decided::AwaitingApproval(a, req) = h
        .svc
        .decide_action(&c.run, c.token, &a.id, ask())
        .await
        .unwrap()
    else {
        panic!("no rule yet: a person decides");
    };
    assert_eq!(req.requested_by, format!("agent:{}", run.id));
    // Dispatch is refused until approved.
    let refused = h
        .svc
        .dispatch_action(&c.run, c.token, &a.id, &git)
        .await
        .unwrap_err();
    assert_eq!(refused.code, airlock_protocol::ErrorCode::Conflict);
    assert!(h.svc.park_for_approval(&c.run, c.token).await.unwrap());
    // A rule for an interpreter is refused; a narrow one that covers the
    // request is taken (the operator holds policy.manage).
    let bad = Approve {
        grant: Some(Grant::ArgvPrefix),
        argv_prefix: Some(vec!["sh".into()]),
        ..Approve::default()
    };
    assert_eq!(
        h.svc.approve(&op, &req.id, &bad).await.unwrap_err().code,
        airlock_protocol::ErrorCode::RuleRefused
    );
    let other = Approve {
        grant: Some(Grant::ArgvPrefix),
        argv_prefix: Some(vec!["ls".into()]),
        ..Approve::default()
    };
    assert_eq!(
        h.svc.approve(&op, &req.id, &other).await.unwrap_err().code,
        airlock_protocol::ErrorCode::RuleRefused,
        "a rule must cover its request"
    );
    let good = Approve {
        grant: Some(Grant::ArgvPrefix),
        argv_prefix: Some(vec!["git".into(), "status".into()]),
        payload_hash: Some(req.payload_hash.clone()),
        ..Approve::default()
    };
    let decided = h.svc.approve(&op, &req.id, &good).await.unwrap();
    let rule = decided.grant_id.clone().unwrap();
    // The run was requeued; its new holder dispatches, consuming the approval.
    let c = claim(Duration::from_secs(60)).await;
    let changed = serde_json::json!({"tool": "run_command", "argv": ["git", "push"]});
    assert_eq!(
        h.svc
            .dispatch_action(&c.run, c.token, &a.id, &changed)
            .await
            .unwrap_err()
            .code,
        airlock_protocol::ErrorCode::ApprovalHashMismatch,
        "one field changed"
    );
    let reordered: serde_json::Value =
        serde_json::from_str(r#"{"argv": ["git", "status"], "tool": "run_command"}"#).unwrap();
    let ticket = h
        .svc
        .dispatch_action(&c.run, c.token, &a.id, &reordered)
        .await
        .unwrap();
    assert_eq!(ticket.action().attempt, 1);
    assert_eq!(ticket.idempotency_key(), "call-1");
    let done = h
        .svc
        .complete_action(
            ticket,
            crate::ActionEnd::Completed,
            Some(&serde_json::json!({"exit": 0})),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        done.state,
        airlock_protocol::actions::ActionState::Completed
    );
    // The rule now covers `git status --short`, alone or in a compound
    // command whose every segment it covers, but not `git push` after it.
    let covered = serde_json::json!({"tool": "run_command", "argv": ["git", "status", "--short"]});
    let (b, _) = h
        .svc
        .propose_action(&c.run, c.token, "call-2", "run_command", &covered)
        .await
        .unwrap();
    let Decided::Ready(b) = h
        .svc
        .decide_action(&c.run, c.token, &b.id, ask())
        .await
        .unwrap()
    else {
        panic!("the rule covers it");
    };
    assert_eq!(b.grant_id.as_deref(), Some(rule.as_str()));
    let sneaky =
        serde_json::json!({"tool": "run_command", "argv": ["sh", "-c", "git status && git push"]});
    let (s, _) = h
        .svc
        .propose_action(&c.run, c.token, "call-3", "run_command", &sneaky)
        .await
        .unwrap();
    assert!(matches!(
        h.svc
            .decide_action(&c.run, c.token, &s.id, ask())
            .await
            .unwrap(),
        Decided::AwaitingApproval(..)
    ));
    // Revoked, it covers nothing.
    h.svc.revoke_approval_rule(&op, &rule).await.unwrap();
    let (d, _) = h
        .svc
        .propose_action(&c.run, c.token, "call-4", "run_command", &covered)
        .await
        .unwrap();
    assert!(matches!(
        h.svc
            .decide_action(&c.run, c.token, &d.id, ask())
            .await
            .unwrap(),
        Decided::AwaitingApproval(..)
    ));
    // A denial is a value: the action is aborted, never dispatchable.
    let (e, _) = h
        .svc
        .propose_action(
            &c.run,
            c.token,
            "call-5",
            "http_request",
            &serde_json::json!({"url": "https://x"}),
        )
        .await
        .unwrap();
    let Decided::Denied(e) = h
        .svc
        .decide_action(
            &c.run,
            c.token,
            &e.id,
            Verdict::Deny {
                detail: serde_json::json!({}),
            },
        )
        .await
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(e.state, airlock_protocol::actions::ActionState::Aborted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agt_5_a_person_never_approves_their_own_run_unless_the_workspace_allows_it() {
    let h = Harness::new(&[("gated", gated())], None, RecordingLauncher::succeeding()).await;
    let op = crate::Caller::operator(WS);
    // Started by the operator (`cli`): the operator may not approve it …
    let run = h.create("gated", crate::OPERATOR).await;
    let req = h
        .svc
        .store
        .run_approval(WS, &run.id)
        .await
        .unwrap()
        .unwrap();
    let err = h
        .svc
        .approve(
            &op,
            &req.id,
            &airlock_protocol::approvals::Approve::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, airlock_protocol::ErrorCode::SelfApproval);
    // … nor grant a rule on a run's approval …
    // … unless the workspace allows self-approval (policy.manage).
    h.svc
        .put_approval_settings(
            &op,
            &airlock_protocol::approvals::PutApprovalSettings {
                allow_self_approval: true,
            },
        )
        .await
        .unwrap();
    let ok = h
        .svc
        .approve(
            &op,
            &req.id,
            &airlock_protocol::approvals::Approve::default(),
        )
        .await
        .unwrap();
    assert_eq!(ok.decided_by.as_deref(), Some(crate::OPERATOR));
    // A run's approval takes no standing grant.
    let run = h.create("gated", "usr_someone").await;
    let req = h
        .svc
        .store
        .run_approval(WS, &run.id)
        .await
        .unwrap()
        .unwrap();
    let grant = airlock_protocol::approvals::Approve {
        grant: Some(airlock_protocol::approvals::Grant::Payload),
        ..Default::default()
    };
    assert_eq!(
        h.svc.approve(&op, &req.id, &grant).await.unwrap_err().code,
        airlock_protocol::ErrorCode::RuleRefused
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dur_2_the_reaper_parks_an_unfinished_dispatch_for_a_person_to_settle() {
    use crate::journal::Verdict;
    use airlock_protocol::actions::{ActionState, SettleAction, Settlement};
    use std::time::Duration;
    let h = Harness::new(
        &[("plain", script("plain", ""))],
        None,
        RecordingLauncher::succeeding(),
    )
    .await;
    let run = h.create("plain", "local").await;
    let c = h
        .svc
        .store
        .claim_run("n", Duration::from_millis(0), &run.id)
        .await
        .unwrap()
        .unwrap();
    let p = serde_json::json!({"argv": ["deploy"]});
    let (a, _) = h
        .svc
        .propose_action(&c.run, c.token, "k", "run_command", &p)
        .await
        .unwrap();
    h.svc
        .decide_action(
            &c.run,
            c.token,
            &a.id,
            Verdict::Allow {
                detail: serde_json::json!({}),
            },
        )
        .await
        .unwrap();
    let ticket = h
        .svc
        .dispatch_action(&c.run, c.token, &a.id, &p)
        .await
        .unwrap();
    drop(ticket); // the executor dies before it records anything
    tokio::time::sleep(Duration::from_millis(5)).await;
    let reaped = h.svc.reap_once().await.unwrap();
    assert!(
        reaped.contains(&(run.id.clone(), RunState::AwaitingApproval)),
        "{reaped:?}"
    );
    let op = crate::Caller::operator(WS);
    let list = h.svc.list_actions(&op, &run.id).await.unwrap();
    assert_eq!(list.actions[0].state, ActionState::OutcomeUnknown);
    // Nothing runs it again on its own.
    assert!(
        h.svc
            .store
            .claim_next("n", h.svc.cfg.lease, &[])
            .await
            .unwrap()
            .is_none()
    );
    let settled = h
        .svc
        .settle_action(
            &op,
            &run.id,
            &a.id,
            &SettleAction {
                outcome: Settlement::Failed,
                note: Some("checked by hand".into()),
            },
        )
        .await
        .unwrap();
    assert_eq!(settled.state, ActionState::Failed);
    assert_eq!(
        h.svc.run_in(WS, &run.id).await.unwrap().state,
        RunState::Queued,
        "resumes"
    );
}
