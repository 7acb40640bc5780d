//! Claims, leases, fencing and the reaper: what an executor does with a run.

use std::time::Duration;

use airlock_store::*;

use crate::new_run;

async fn dur_1_claim_lease_and_fencing(store: Store) {
    let run = store.create_run(new_run("hello")).await.unwrap().run;
    let a = store
        .claim_next("node-a", Duration::from_millis(0), &[])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.run.id, run.id);
    assert!(
        store
            .claim_next("node-b", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .is_none(),
        "claimed once"
    );
    std::thread::sleep(Duration::from_millis(5));
    // The lease expired before the workload started: requeued.
    let reaped = store.reap_expired(&|_| false).await.unwrap();
    assert_eq!(reaped, vec![(run.id.clone(), RunState::Queued)]);
    let b = store
        .claim_next("node-b", Duration::from_secs(60), &[])
        .await
        .unwrap()
        .unwrap();
    assert!(b.token > a.token);
    // The stale executor's writes are refused by the store.
    assert!(matches!(
        store
            .append_event(&run.id, a.token, "log", &serde_json::json!({}))
            .await,
        Err(StoreError::StaleToken)
    ));
    assert!(matches!(
        store.mark_workload_started(&run.id, a.token).await,
        Err(StoreError::StaleToken)
    ));
    assert!(matches!(
        store
            .finish_run(&run.id, a.token, RunState::Succeeded, &Finish::default())
            .await,
        Err(StoreError::StaleToken)
    ));
    assert!(matches!(
        store
            .renew_lease(&run.id, a.token, Duration::from_secs(1))
            .await,
        Err(StoreError::StaleToken)
    ));
    // Positive control: the current holder writes.
    store
        .append_event(&run.id, b.token, "log", &serde_json::json!({"line": "hi"}))
        .await
        .unwrap();
    store
        .finish_run(
            &run.id,
            b.token,
            RunState::Succeeded,
            &Finish {
                exit_code: Some(0),
                ..Finish::default()
            },
        )
        .await
        .unwrap();
    let done = store
        .get_run(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.state, RunState::Succeeded);
    assert_eq!(
        store
            .events(DEFAULT_WORKSPACE, &run.id, 0, 100)
            .await
            .unwrap()
            .len(),
        1
    );
}
both!(dur_1_claim_lease_and_fencing);

async fn dur_2_reaper_requeues_or_marks_unknown(store: Store) {
    let plain = store.create_run(new_run("side-effects")).await.unwrap().run;
    let c = store
        .claim_next("a", Duration::from_millis(0), &[])
        .await
        .unwrap()
        .unwrap();
    store
        .mark_workload_started(&plain.id, c.token)
        .await
        .unwrap();
    let retry = store
        .create_run(new_run("idempotent-one"))
        .await
        .unwrap()
        .run;
    let c2 = store
        .claim_next("a", Duration::from_millis(0), &[])
        .await
        .unwrap()
        .unwrap();
    store
        .mark_workload_started(&retry.id, c2.token)
        .await
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let mut reaped = store
        .reap_expired(&|w| w == "idempotent-one")
        .await
        .unwrap();
    reaped.sort();
    let mut want = vec![
        (plain.id.clone(), RunState::Unknown),
        (retry.id.clone(), RunState::Queued),
    ];
    want.sort();
    assert_eq!(reaped, want);
}
both!(dur_2_reaper_requeues_or_marks_unknown);

async fn run_7_claim_skips_workers_at_their_cap(store: Store) {
    let a = store.create_run(new_run("busy")).await.unwrap().run;
    let b = store.create_run(new_run("free")).await.unwrap().run;
    let c = store
        .claim_next("n", Duration::from_secs(60), &["busy".to_string()])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(c.run.id, b.id);
    assert_eq!(
        store
            .queue_position(DEFAULT_WORKSPACE, &a.id)
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store.running_per_worker().await.unwrap(),
        vec![("free".to_string(), 1)]
    );
}
both!(run_7_claim_skips_workers_at_their_cap);

/// The SIGTERM drain's settlement (DUR-2) under the holder's token: not
/// started → queued with the attempt given back; started, idempotent,
/// first attempt → queued (attempt kept); started otherwise → `unknown`
/// (`abandoned`); a stale token settles nothing. Each is a `run.drained`
/// audit event.
async fn dur_2_drain_settles_a_held_run_by_the_reapers_rules(store: Store) {
    let claim = |store: Store| async move {
        store
            .claim_next("n:1", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .unwrap()
    };
    let fresh = store.create_run(new_run("w")).await.unwrap().run;
    let c = claim(store.clone()).await;
    assert_eq!(c.run.id, fresh.id);
    assert_eq!(
        store
            .settle_drained(&fresh.id, c.token, false)
            .await
            .unwrap(),
        RunState::Queued
    );
    let r = store
        .get_run(DEFAULT_WORKSPACE, &fresh.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((r.state, r.attempt), (RunState::Queued, 0), "{r:?}");
    // Stale: settled already, nothing more.
    assert!(matches!(
        store.settle_drained(&fresh.id, c.token, false).await,
        Err(StoreError::StaleToken)
    ));

    for (idempotent, want) in [(true, RunState::Queued), (false, RunState::Unknown)] {
        let run = store.create_run(new_run("w")).await.unwrap().run;
        let c = store
            .claim_run("n:1", Duration::from_secs(60), &run.id)
            .await
            .unwrap()
            .unwrap();
        store
            .mark_workload_started(&c.run.id, c.token)
            .await
            .unwrap();
        assert_eq!(
            store
                .settle_drained(&c.run.id, c.token, idempotent)
                .await
                .unwrap(),
            want
        );
        let r = store
            .get_run(DEFAULT_WORKSPACE, &c.run.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(r.state, want);
        assert_eq!(r.attempt, 1);
        if want == RunState::Unknown {
            assert_eq!(r.error_code.as_deref(), Some("abandoned"));
        }
    }
    let audit = store
        .audit_lines(DEFAULT_WORKSPACE)
        .await
        .unwrap()
        .join("\n");
    assert_eq!(audit.matches("\"run.drained\"").count(), 3, "{audit}");
}
both!(dur_2_drain_settles_a_held_run_by_the_reapers_rules);

/// A run queued again after its workload started begins its next attempt
/// with no artifacts, whichever path requeued it (the reaper, the drain, a
/// person's retry of an `unknown` run): the run's artifacts are its last
/// attempt's, so an attempt that writes fewer files does not inherit the
/// earlier attempt's extra ones. Control: before each requeue the earlier
/// attempt's artifacts are there, and a run that becomes `unknown` keeps
/// them (they are what a person judges it by).
async fn dur_2_a_requeued_attempt_starts_without_the_earlier_attempts_artifacts(store: Store) {
    let artifact = |name: &str| Artifact {
        name: name.into(),
        digest: format!("sha256:{name}"),
        size: 1,
        media_type: "text/plain".into(),
    };
    let names = |store: Store, id: String| async move {
        let mut v: Vec<String> = store
            .artifacts(DEFAULT_WORKSPACE, &id)
            .await
            .unwrap()
            .into_iter()
            .map(|a| a.name)
            .collect();
        v.sort();
        v
    };
    // One attempt: started, publishes `a` and `b`, lease `lease`.
    let attempt = |store: Store, id: String, lease: Duration| async move {
        let c = store.claim_run("n:1", lease, &id).await.unwrap().unwrap();
        store.mark_workload_started(&id, c.token).await.unwrap();
        for n in ["a", "b"] {
            store
                .add_artifact(&id, c.token, &artifact(n))
                .await
                .unwrap();
        }
        c.token
    };

    // The reaper.
    let reaped = store.create_run(new_run("w")).await.unwrap().run;
    attempt(store.clone(), reaped.id.clone(), Duration::from_millis(0)).await;
    assert_eq!(names(store.clone(), reaped.id.clone()).await, ["a", "b"]);
    std::thread::sleep(Duration::from_millis(5));
    let out = store.reap_expired(&|_| true).await.unwrap();
    assert_eq!(out, vec![(reaped.id.clone(), RunState::Queued)]);
    assert!(names(store.clone(), reaped.id.clone()).await.is_empty());
    // The next attempt writes only `a`: `b` is not the run's.
    let c = store
        .claim_run("n:2", Duration::from_secs(60), &reaped.id)
        .await
        .unwrap()
        .unwrap();
    store
        .add_artifact(&reaped.id, c.token, &artifact("a"))
        .await
        .unwrap();
    assert_eq!(names(store.clone(), reaped.id.clone()).await, ["a"]);

    // The drain.
    let drained = store.create_run(new_run("w")).await.unwrap().run;
    let token = attempt(store.clone(), drained.id.clone(), Duration::from_secs(60)).await;
    assert_eq!(names(store.clone(), drained.id.clone()).await, ["a", "b"]);
    assert_eq!(
        store
            .settle_drained(&drained.id, token, true)
            .await
            .unwrap(),
        RunState::Queued
    );
    assert!(names(store.clone(), drained.id.clone()).await.is_empty());

    // A person's retry of an `unknown` run.
    let unknown = store.create_run(new_run("w")).await.unwrap().run;
    let token = attempt(store.clone(), unknown.id.clone(), Duration::from_secs(60)).await;
    assert_eq!(
        store
            .settle_drained(&unknown.id, token, false)
            .await
            .unwrap(),
        RunState::Unknown
    );
    assert_eq!(names(store.clone(), unknown.id.clone()).await, ["a", "b"]);
    let retried = store
        .retry_unknown(
            DEFAULT_WORKSPACE,
            &unknown.id,
            airlock_audit::Actor::System,
            Some("again"),
        )
        .await
        .unwrap();
    assert!(matches!(retried, Settled::Done(_)));
    assert!(names(store.clone(), unknown.id.clone()).await.is_empty());

    // Each requeue's audit event counts what went.
    let audit = store
        .audit_lines(DEFAULT_WORKSPACE)
        .await
        .unwrap()
        .join("\n");
    assert_eq!(
        audit.matches("\"artifacts_dropped\":2").count(),
        3,
        "{audit}"
    );
}
both!(dur_2_a_requeued_attempt_starts_without_the_earlier_attempts_artifacts);
