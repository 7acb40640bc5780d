//! The launch request and the recording launcher, without namespaces: a
//! launch is checked as the real launcher checks it, a refused launch is
//! not recorded (nothing would have started), and an answer can act on
//! the request's mounts and controls as a workload would. Real launches
//! are covered by the CLI suite (`sandbox exec`, runs, egress).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_egress::policy::EnvAndFiles;
use airlock_egress::proxy::NullLog;
use airlock_launch::{
    Controls, EgressPlan, Launch, LaunchFailure, Launched, Launcher, Policy, RecordingLauncher,
    SandboxRequest, channel_env, fake_result,
};
use airlock_sandbox::Mount;

/// A policy with one channel, `model`, whose credential is a file.
fn policy_with_model_channel(dir: &std::path::Path) -> Policy {
    let key = dir.join("key");
    std::fs::write(&key, "k-123\n").unwrap();
    let text = format!(
        "[channels.model]\nupstream = \"https://api.example.org\"\nheader = \"Authorization\"\nvalue = \"Bearer ${{file:{}}}\"\n",
        key.display()
    );
    Policy::from_toml(&text, &EnvAndFiles).unwrap()
}

fn request(argv: &[&str]) -> SandboxRequest {
    SandboxRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        ..SandboxRequest::default()
    }
}

fn egress(policy: Policy, channels: &[&str]) -> Option<EgressPlan> {
    Some(EgressPlan {
        policy: Ok(policy),
        channels: channels.iter().map(|s| s.to_string()).collect(),
        log: Arc::new(NullLog),
        resolver: None,
        halt: None,
    })
}

#[test]
fn seam_a_refused_request_is_not_launched_and_not_recorded() {
    let fake = RecordingLauncher::succeeding();
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Launch, &str)> = vec![
        ("no argv", Launch::offline(request(&[])), "invalid_request"),
        (
            "mount source missing",
            Launch::offline(SandboxRequest {
                mounts: vec![Mount {
                    source: dir.path().join("absent"),
                    target: "/airlock/x".into(),
                    writable: false,
                }],
                ..request(&["true"])
            }),
            "invalid_request",
        ),
        (
            "channel not in the policy",
            Launch {
                egress: egress(policy_with_model_channel(dir.path()), &["other"]),
                ..Launch::offline(request(&["true"]))
            },
            "channel_not_configured",
        ),
    ];
    for (label, launch, code) in cases {
        let err = fake.launch(launch, Controls::default()).unwrap_err();
        assert_eq!(err.code(), code, "{label}: {err}");
    }
    assert_eq!(fake.count(), 0);

    // Positive control: the same shapes, valid, are launched and recorded.
    std::fs::create_dir(dir.path().join("present")).unwrap();
    let ok = [
        Launch::offline(request(&["true"])),
        Launch::offline(SandboxRequest {
            mounts: vec![Mount {
                source: dir.path().join("present"),
                target: "/airlock/x".into(),
                writable: false,
            }],
            ..request(&["true"])
        }),
        Launch {
            egress: egress(policy_with_model_channel(dir.path()), &["model"]),
            ..Launch::offline(request(&["true"]))
        },
    ];
    for launch in ok {
        let done = fake.launch(launch, Controls::default()).unwrap();
        assert_eq!(done.result.exit_code, Some(0));
    }
    assert_eq!(fake.count(), 3);
    // Egress was planned for the third only, and only it has a summary.
    assert!(fake.launches()[2].egress.is_some());
}

#[test]
fn seam_an_invalid_policy_is_deny_everything_not_a_refusal() {
    // NET-2: `sandbox exec` with a broken policy file still runs, behind a
    // proxy that refuses every request; its channels have nothing to check
    // against.
    let fake = RecordingLauncher::succeeding();
    let launch = Launch {
        egress: Some(EgressPlan {
            policy: Policy::from_toml("not toml [", &EnvAndFiles),
            channels: vec!["model".into()],
            log: Arc::new(NullLog),
            resolver: None,
            halt: None,
        }),
        ..Launch::offline(request(&["true"]))
    };
    assert!(launch.egress.as_ref().unwrap().policy.is_err());
    fake.launch(launch, Controls::default()).unwrap();
    assert_eq!(fake.count(), 1);
}

#[test]
fn seam_the_answer_acts_as_the_workload_would() {
    let out = tempfile::tempdir().unwrap();
    let fake = RecordingLauncher::answering(|launch, controls| {
        // Write where the request's writable mount points, as a worker does.
        let m = launch
            .sandbox
            .mounts
            .iter()
            .find(|m| m.writable)
            .expect("a writable mount");
        std::fs::write(m.source.join("result.json"), b"{}").unwrap();
        let cancelled = controls
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::SeqCst));
        let mut result = fake_result(if cancelled { None } else { Some(0) }, None);
        result.cancelled = cancelled;
        Ok(Launched {
            result,
            egress: None,
            notices: Vec::new(),
        })
    });
    let launch = || {
        Launch::offline(SandboxRequest {
            mounts: vec![Mount {
                source: out.path().to_path_buf(),
                target: "/airlock/output".into(),
                writable: true,
            }],
            ..request(&["sh", "-c", "echo {} > /airlock/output/result.json"])
        })
    };
    let done = fake.launch(launch(), Controls::default()).unwrap();
    assert_eq!(done.result.exit_code, Some(0));
    assert!(out.path().join("result.json").exists());

    let cancel = Arc::new(AtomicBool::new(true));
    let controls = Controls {
        cancel: Some(cancel),
        kill: None,
        live_output: None,
    };
    let done = fake.launch(launch(), controls).unwrap();
    assert!(done.result.cancelled);
    assert_eq!(fake.count(), 2);
}

#[test]
fn seam_channel_urls_point_at_the_sandbox_proxy() {
    assert_eq!(
        channel_env("model"),
        (
            "AIRLOCK_CHANNEL_MODEL_URL".to_string(),
            "http://127.0.0.1:3128/channels/model".to_string()
        )
    );
}

#[test]
fn seam_failure_codes_are_stable() {
    let cases = [
        (
            LaunchFailure::ChannelNotConfigured("x".into()),
            "channel_not_configured",
        ),
        (
            LaunchFailure::EgressUnavailable("x".into()),
            "egress_unavailable",
        ),
        (
            LaunchFailure::Request(airlock_sandbox::SpecError::NoCommand),
            "invalid_request",
        ),
    ];
    for (f, code) in cases {
        assert_eq!(f.code(), code);
    }
}
