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
    let agent = "[worker]\nid = \"agent\"\ntitle = \"agent\"\nkind = \"agent\"\nentry = \"AGENT.md\"\n\n[agent]\nmodel = \"m\"\nchannel = \"openai\"\ntools = []\nautonomy = \"ask\"\n".to_string();
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
    let r = h.run("agent").await;
    assert_eq!(ended(&r), blocked(RunErrorCode::AgentUnavailable));
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
