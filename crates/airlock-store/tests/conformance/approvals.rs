//! Approvals, the action journal and the emergency stop (AGT-5, AGT-6,
//! DUR-2).

use std::time::Duration;

use airlock_protocol::actions::{ActionState, Settlement};
use airlock_store::*;

use crate::{WS_B, kinds, new_run, rec, run_in};

/// The roles that hold `approvals.decide` (the service passes the same
/// list from the role table).
const DECIDERS: &[&str] = &["owner", "admin", "assistant_manager", "human_assistant"];
const T: i64 = 1_900_000_000_000;

fn payload(worker: &str) -> serde_json::Value {
    serde_json::json!({"worker": worker, "input_hash": "ab", "limits": {"timeout_s": 30, "memory_mb": 256}, "egress": {"allow": []}})
}

fn ask(expires_at: i64) -> NewApproval {
    NewApproval {
        payload: payload("gated"),
        reason: Some("sends mail".into()),
        requested_by: "tester".into(),
        expires_at,
        now: T,
    }
}

fn decision(approve: bool, by: &str, now: i64) -> Decision {
    Decision {
        approve,
        by: by.into(),
        audit_actor: airlock_audit::Actor::Human(by.into()),
        note: None,
        grant: airlock_protocol::approvals::Grant::Once,
        argv_prefix: None,
        expected_hash: None,
        now,
    }
}

async fn gated_run(store: &Store, ws: &str, expires_at: i64) -> (RunRecord, Approval) {
    let (created, approval) = store
        .create_run_awaiting_approval(run_in(ws, "gated"), ask(expires_at))
        .await
        .unwrap();
    (created.run, approval.unwrap())
}

/// A user who is a member of `ws` with `role` (and the owner it needs).
async fn member(store: &Store, ws: &str, name: &str, role: &str) -> String {
    let u = match store.user_by_name(name).await.unwrap() {
        Some(u) => u,
        None => store.create_user(name, None, T).await.unwrap(),
    };
    if store.count_role(ws, "owner").await.unwrap() == 0 && role != "owner" {
        let o = store
            .create_user(&format!("owner-{ws}"), None, T)
            .await
            .unwrap();
        store
            .set_member(ws, &o.id, "owner", T, rec("member.set"))
            .await
            .unwrap();
    }
    store
        .set_member(ws, &u.id, role, T, rec("member.set"))
        .await
        .unwrap();
    u.id
}

use airlock_protocol::approvals::{Approval, ApprovalState, Grant};

async fn agt_5_approval_requests_bind_the_canonical_payload_and_are_workspace_scoped(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let (run, a) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    assert_eq!(run.state, RunState::AwaitingApproval);
    assert_eq!(a.state, ApprovalState::Pending);
    assert_eq!(a.run_id, run.id);
    assert_eq!(a.requested_by, "tester");
    assert_eq!(a.run_actor, "tester");
    // The hash is SHA-256 over the RFC 8785 bytes of the payload.
    let jcs = airlock_audit::canonicalize(&payload("gated")).unwrap();
    assert_eq!(a.payload_hash, sha256_hex(&jcs));
    assert_eq!(a.payload, payload("gated"));
    // Key order does not change the hash; one changed field does.
    let reordered: serde_json::Value = serde_json::from_str(
        r#"{"limits": {"memory_mb": 256, "timeout_s": 30}, "egress": {"allow": []}, "input_hash": "ab", "worker": "gated"}"#,
    )
    .unwrap();
    assert_eq!(canonical_payload(&reordered).unwrap().1, a.payload_hash);
    let mut changed = payload("gated");
    changed["limits"]["timeout_s"] = serde_json::json!(31);
    assert_ne!(canonical_payload(&changed).unwrap().1, a.payload_hash);
    // A waiting run is not claimable.
    assert!(
        store
            .claim_next("n", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .is_none()
    );
    // The request is an `approval` event on the run's stream.
    let ev = store
        .events(DEFAULT_WORKSPACE, &run.id, 0, 10)
        .await
        .unwrap();
    assert!(
        ev.iter().any(|e| e.kind == "approval"
            && e.data["id"] == a.id
            && e.data["payload_hash"] == a.payload_hash.as_str()),
        "{ev:?}"
    );
    // Another workspace sees nothing of it.
    assert_eq!(store.get_approval(WS_B, &a.id).await.unwrap(), None);
    assert_eq!(store.run_approval(WS_B, &run.id).await.unwrap(), None);
    assert!(
        store
            .list_approvals(WS_B, None, None, 50, None)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        store
            .decide_approval(WS_B, &a.id, &decision(true, "cli", T))
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        store
            .consume_approval(WS_B, &a.id, &a.payload_hash, T, DECIDERS, "cli")
            .await,
        Err(StoreError::NotFound)
    ));
    assert!(
        !store
            .cancel_waiting_run(WS_B, &run.id, "x", T)
            .await
            .unwrap()
    );
    // Positive controls: its own workspace sees it.
    assert_eq!(
        store.get_approval(DEFAULT_WORKSPACE, &a.id).await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(
        store
            .run_approval(DEFAULT_WORKSPACE, &run.id)
            .await
            .unwrap(),
        Some(a.clone())
    );
    // Paging and filters; another workspace's id is not a cursor.
    let (_, b_first) = gated_run(&store, WS_B, T + 60_000).await;
    let (run2, a2) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    let all = store
        .list_approvals(DEFAULT_WORKSPACE, None, None, 50, None)
        .await
        .unwrap();
    assert_eq!(
        all.iter()
            .map(|x| x.id.clone())
            .collect::<std::collections::BTreeSet<_>>(),
        [a.id.clone(), a2.id.clone()].into()
    );
    let one = store
        .list_approvals(DEFAULT_WORKSPACE, None, None, 1, None)
        .await
        .unwrap();
    let rest = store
        .list_approvals(DEFAULT_WORKSPACE, None, None, 10, Some(&one[0].id))
        .await
        .unwrap();
    assert_eq!(one.len() + rest.len(), 2);
    assert_eq!(
        store
            .list_approvals(DEFAULT_WORKSPACE, None, None, 10, Some(&b_first.id))
            .await
            .unwrap()
            .len(),
        2,
        "another workspace's id is not a cursor"
    );
    let of_run2 = store
        .list_approvals(DEFAULT_WORKSPACE, None, Some(&run2.id), 10, None)
        .await
        .unwrap();
    assert_eq!(of_run2, vec![a2.clone()]);
    assert!(
        store
            .list_approvals(
                DEFAULT_WORKSPACE,
                Some(ApprovalState::Approved),
                None,
                10,
                None
            )
            .await
            .unwrap()
            .is_empty()
    );
    // Cancelling the waiting run cancels its request; another's is untouched.
    assert!(
        store
            .cancel_waiting_run(DEFAULT_WORKSPACE, &run2.id, "x", T)
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .get_run(DEFAULT_WORKSPACE, &run2.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        RunState::Cancelled
    );
    assert_eq!(
        store
            .get_approval(DEFAULT_WORKSPACE, &a2.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Cancelled
    );
    assert_eq!(
        store
            .get_approval(DEFAULT_WORKSPACE, &a.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Pending
    );
}
both!(agt_5_approval_requests_bind_the_canonical_payload_and_are_workspace_scoped);

async fn agt_5_idempotent_gated_runs_are_per_workspace(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let keyed = |ws: &str, hash: &str| NewRun {
        idempotency: Some(("k".into(), hash.into())),
        ..run_in(ws, "gated")
    };
    // B's key first: an unfiltered lookup would meet it first.
    let (b, _) = store
        .create_run_awaiting_approval(keyed(WS_B, "h-b"), ask(T + 1000))
        .await
        .unwrap();
    let (a, a_req) = store
        .create_run_awaiting_approval(keyed(DEFAULT_WORKSPACE, "h-a"), ask(T + 1000))
        .await
        .unwrap();
    assert!(a.created && b.created);
    let (again, again_req) = store
        .create_run_awaiting_approval(keyed(DEFAULT_WORKSPACE, "h-a"), ask(T + 1000))
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.run.id, a.run.id);
    assert_eq!(again_req, a_req);
    assert!(matches!(
        store
            .create_run_awaiting_approval(keyed(DEFAULT_WORKSPACE, "other"), ask(T + 1000))
            .await,
        Err(StoreError::IdempotencyConflict)
    ));
}
both!(agt_5_idempotent_gated_runs_are_per_workspace);

async fn agt_5_approve_and_reject_racing_have_exactly_one_winner(store: Store) {
    for round in 0..3 {
        let (run, a) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (store, id) = (store.clone(), a.id.clone());
            tasks.push(tokio::spawn(async move {
                let d = decision((i + round) % 2 == 0, &format!("u{i}"), T + 1);
                store
                    .decide_approval(DEFAULT_WORKSPACE, &id, &d)
                    .await
                    .unwrap()
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(w) => winners.push(w),
                Err(ApprovalRefusal::NotOpen(_)) => {}
                Err(other) => panic!("{other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one decision wins");
        let w = &winners[0];
        let run = store
            .get_run(DEFAULT_WORKSPACE, &run.id)
            .await
            .unwrap()
            .unwrap();
        match w.state {
            ApprovalState::Approved => assert_eq!(run.state, RunState::Queued),
            ApprovalState::Rejected => {
                assert_eq!(run.state, RunState::Blocked);
                assert_eq!(run.error_code.as_deref(), Some("approval_rejected"));
            }
            s => panic!("{s:?}"),
        }
        // A decided approval is not decided again (replay → refused).
        assert_eq!(
            store
                .decide_approval(DEFAULT_WORKSPACE, &a.id, &decision(true, "late", T + 2))
                .await
                .unwrap(),
            Err(ApprovalRefusal::NotOpen(w.state))
        );
        if let Ok(Some(c)) = store.claim_next("n", Duration::from_secs(60), &[]).await {
            store
                .finish_run(&c.run.id, c.token, RunState::Succeeded, &Finish::default())
                .await
                .unwrap();
        }
    }
}
both!(agt_5_approve_and_reject_racing_have_exactly_one_winner);

async fn agt_5_expiry_is_exact_and_ends_the_run(store: Store) {
    let exp = T + 10_000;
    // One millisecond before: still decidable.
    let (_, a) = gated_run(&store, DEFAULT_WORKSPACE, exp).await;
    assert!(
        store
            .decide_approval(DEFAULT_WORKSPACE, &a.id, &decision(true, "cli", exp - 1))
            .await
            .unwrap()
            .is_ok()
    );
    // At the instant: expired, for a decision …
    let (run, b) = gated_run(&store, DEFAULT_WORKSPACE, exp).await;
    assert_eq!(
        store
            .decide_approval(DEFAULT_WORKSPACE, &b.id, &decision(true, "cli", exp))
            .await
            .unwrap(),
        Err(ApprovalRefusal::Expired)
    );
    // … and for the sweep, which ends the run `blocked` (`approval_expired`).
    assert!(store.expire_approvals(exp - 1).await.unwrap().is_empty());
    let expired = store.expire_approvals(exp).await.unwrap();
    assert_eq!(
        expired.iter().map(|x| x.id.clone()).collect::<Vec<_>>(),
        vec![b.id.clone()]
    );
    assert_eq!(expired[0].state, ApprovalState::Expired);
    let run = store
        .get_run(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (run.state, run.error_code.as_deref()),
        (RunState::Blocked, Some("approval_expired"))
    );
    // An approved request is usable only before its expiry.
    let approved = store
        .get_approval(DEFAULT_WORKSPACE, &a.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &approved.payload_hash,
                exp,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::Expired)
    );
    assert!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &approved.payload_hash,
                exp - 1,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap()
            .is_ok()
    );
    let lines = store.audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    assert!(kinds(&lines).contains(&"approval.expired".to_string()));
}
both!(agt_5_expiry_is_exact_and_ends_the_run);

async fn agt_5_an_approval_is_used_once_after_every_check(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let alice = member(&store, DEFAULT_WORKSPACE, "alice", "human_assistant").await;
    let (_, a) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    // A pending request cannot be used.
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &a.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::NotOpen(ApprovalState::Pending))
    );
    // The approver pins the hash they saw: another hash is refused.
    let mut d = decision(true, &alice, T);
    d.expected_hash = Some("00".repeat(32));
    assert_eq!(
        store
            .decide_approval(DEFAULT_WORKSPACE, &a.id, &d)
            .await
            .unwrap(),
        Err(ApprovalRefusal::HashMismatch)
    );
    d.expected_hash = Some(a.payload_hash.clone());
    let a = store
        .decide_approval(DEFAULT_WORKSPACE, &a.id, &d)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (a.state, a.decided_by.as_deref()),
        (ApprovalState::Approved, Some(alice.as_str()))
    );
    // One changed field: refused, and nothing is used up.
    let mut changed = payload("gated");
    changed["egress"]["allow"] = serde_json::json!(["evil.example"]);
    let (_, other_hash) = canonical_payload(&changed).unwrap();
    assert_eq!(
        store
            .consume_approval(DEFAULT_WORKSPACE, &a.id, &other_hash, T, DECIDERS, "cli")
            .await
            .unwrap(),
        Err(ApprovalRefusal::HashMismatch)
    );
    // Another workspace's stop does not stop this one.
    store
        .emergency_stop(WS_B, "cli", airlock_audit::Actor::System, None, T)
        .await
        .unwrap();
    // The approver must still hold approvals.decide here; being an owner
    // of another workspace does not count.
    member(&store, WS_B, "alice", "owner").await;
    member(&store, DEFAULT_WORKSPACE, "alice", "viewer").await;
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &a.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::ApproverLost)
    );
    member(&store, DEFAULT_WORKSPACE, "alice", "assistant_manager").await;
    // Its own workspace's stop cancels an approved, unused request …
    store
        .emergency_stop(
            DEFAULT_WORKSPACE,
            "cli",
            airlock_audit::Actor::System,
            None,
            T,
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &a.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::NotOpen(ApprovalState::Cancelled))
    );
    // … and the use itself checks the stop: a request approved while
    // stopped is refused, then usable once resumed.
    let (_, s) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    let s = store
        .decide_approval(DEFAULT_WORKSPACE, &s.id, &decision(true, &alice, T))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &s.id,
                &s.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::Stopped)
    );
    store
        .emergency_resume(DEFAULT_WORKSPACE, "cli", airlock_audit::Actor::System, T)
        .await
        .unwrap();
    assert!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &s.id,
                &s.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap()
            .is_ok()
    );
    // A fresh approval, used by 100 concurrent consumers: one wins.
    let (_, a) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    let a = store
        .decide_approval(DEFAULT_WORKSPACE, &a.id, &decision(true, &alice, T))
        .await
        .unwrap()
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (store, id, hash) = (store.clone(), a.id.clone(), a.payload_hash.clone());
        tasks.push(tokio::spawn(async move {
            store
                .consume_approval(DEFAULT_WORKSPACE, &id, &hash, T + 5, DECIDERS, "cli")
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(used) => {
                won += 1;
                assert_eq!(used.state, ApprovalState::Consumed);
            }
            Err(ApprovalRefusal::NotOpen(ApprovalState::Consumed)) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(won, 1, "100 concurrent consumers, one use");
    // Replay of a used approval is refused.
    assert_eq!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &a.id,
                &a.payload_hash,
                T + 6,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ApprovalRefusal::NotOpen(ApprovalState::Consumed))
    );
    // The operator (`cli`) decides without a membership.
    let (_, o) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    let o = store
        .decide_approval(DEFAULT_WORKSPACE, &o.id, &decision(true, "cli", T))
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .consume_approval(
                DEFAULT_WORKSPACE,
                &o.id,
                &o.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap()
            .is_ok()
    );
    let k = kinds(&store.audit_lines(DEFAULT_WORKSPACE).await.unwrap());
    for want in [
        "approval.requested",
        "approval.approved",
        "approval.consumed",
    ] {
        assert!(k.contains(&want.to_string()), "{want}");
    }
}
both!(agt_5_an_approval_is_used_once_after_every_check);

async fn agt_5_rules_and_settings_are_listed_revocable_and_workspace_scoped(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    // An action approval with an argv-prefix grant needs a running agent run.
    let run = store.create_run(new_run("agent")).await.unwrap().run;
    let c = store
        .claim_run("n", Duration::from_secs(60), &run.id)
        .await
        .unwrap()
        .unwrap();
    let p = serde_json::json!({"tool": "run_command", "argv": ["git", "status"]});
    let act = store
        .propose_action(&run.id, c.token, "call-1", "run_command", &p, T)
        .await
        .unwrap()
        .unwrap()
        .action;
    let (_, req) = store
        .request_action_approval(
            &run.id,
            c.token,
            &act.id,
            &serde_json::json!({"verdict": "require_approval"}),
            None,
            T + 60_000,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(req.requested_by, format!("agent:{}", run.id));
    let mut d = decision(true, "cli", T);
    d.grant = Grant::ArgvPrefix;
    d.argv_prefix = Some(vec!["git".into(), "status".into()]);
    let decided = store
        .decide_approval(DEFAULT_WORKSPACE, &req.id, &d)
        .await
        .unwrap()
        .unwrap();
    let rule_id = decided.grant_id.clone().unwrap();
    let rules = store.list_rules(DEFAULT_WORKSPACE).await.unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0].argv_prefix.as_deref(),
        Some(&["git".to_string(), "status".to_string()][..])
    );
    assert_eq!(rules[0].source_approval, req.id);
    assert_eq!(
        store
            .live_rules(DEFAULT_WORKSPACE, "agent", "run_other")
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .live_rules(DEFAULT_WORKSPACE, "other-worker", &run.id)
            .await
            .unwrap()
            .is_empty()
    );
    // Another workspace sees and revokes nothing.
    assert!(store.list_rules(WS_B).await.unwrap().is_empty());
    assert!(
        store
            .live_rules(WS_B, "agent", &run.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        !store
            .revoke_rule(WS_B, &rule_id, "x", airlock_audit::Actor::System, T)
            .await
            .unwrap()
    );
    assert!(
        store
            .revoke_rule(
                DEFAULT_WORKSPACE,
                &rule_id,
                "cli",
                airlock_audit::Actor::System,
                T
            )
            .await
            .unwrap()
    );
    assert!(
        !store
            .revoke_rule(
                DEFAULT_WORKSPACE,
                &rule_id,
                "cli",
                airlock_audit::Actor::System,
                T
            )
            .await
            .unwrap(),
        "once"
    );
    assert!(
        store
            .live_rules(DEFAULT_WORKSPACE, "agent", &run.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.list_rules(DEFAULT_WORKSPACE).await.unwrap()[0]
            .revoked_by
            .as_deref(),
        Some("cli")
    );
    // Settings: off by default, per workspace.
    assert!(
        !store
            .approval_settings(DEFAULT_WORKSPACE)
            .await
            .unwrap()
            .allow_self_approval
    );
    store
        .put_approval_settings(WS_B, true, "cli", airlock_audit::Actor::System, T)
        .await
        .unwrap();
    assert!(
        store
            .approval_settings(WS_B)
            .await
            .unwrap()
            .allow_self_approval
    );
    assert!(
        !store
            .approval_settings(DEFAULT_WORKSPACE)
            .await
            .unwrap()
            .allow_self_approval
    );
    let k = kinds(&store.audit_lines(DEFAULT_WORKSPACE).await.unwrap());
    assert!(
        k.contains(&"approval_rule.created".to_string())
            && k.contains(&"approval_rule.revoked".to_string())
    );
}
both!(agt_5_rules_and_settings_are_listed_revocable_and_workspace_scoped);

async fn dur_2_the_action_journal_moves_under_the_run_token(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let run = store.create_run(new_run("agent")).await.unwrap().run;
    let c = store
        .claim_run("n", Duration::from_secs(60), &run.id)
        .await
        .unwrap()
        .unwrap();
    let p = serde_json::json!({"tool": "write_file", "path": "a.txt", "sha256": "00"});
    let first = store
        .propose_action(&run.id, c.token, "k1", "write_file", &p, T)
        .await
        .unwrap()
        .unwrap();
    assert!(first.created);
    assert_eq!(
        (first.action.state, first.action.seq),
        (ActionState::Proposed, 1)
    );
    // The same key and payload is the same action; another payload is refused.
    let again = store
        .propose_action(&run.id, c.token, "k1", "write_file", &p, T)
        .await
        .unwrap()
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.action.id, first.action.id);
    let other = serde_json::json!({"tool": "write_file", "path": "b.txt"});
    assert_eq!(
        store
            .propose_action(&run.id, c.token, "k1", "write_file", &other, T)
            .await
            .unwrap(),
        Err(ActionRefusal::KeyReused)
    );
    // A stale token writes nothing.
    assert!(matches!(
        store
            .propose_action(&run.id, c.token - 1, "k2", "write_file", &p, T)
            .await,
        Err(StoreError::StaleToken)
    ));
    let id = first.action.id.clone();
    let hash = first.action.payload_hash.clone();
    // Dispatch needs a decision first.
    assert_eq!(
        store
            .dispatch_action(&run.id, c.token, &id, &hash, T, DECIDERS, "cli")
            .await
            .unwrap(),
        Err(ActionRefusal::NotIn(ActionState::Proposed))
    );
    let decided = store
        .decide_action(
            &run.id,
            c.token,
            &id,
            true,
            &serde_json::json!({"verdict": "allow", "rule": "read-only"}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(decided.state, ActionState::Decided);
    // One changed field: refused.
    assert_eq!(
        store
            .dispatch_action(&run.id, c.token, &id, &"0".repeat(64), T, DECIDERS, "cli")
            .await
            .unwrap(),
        Err(ActionRefusal::HashMismatch)
    );
    // 100 concurrent dispatches of one action: one wins.
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (store, run_id, id, hash) = (store.clone(), run.id.clone(), id.clone(), hash.clone());
        tasks.push(tokio::spawn(async move {
            store
                .dispatch_action(&run_id, c.token, &id, &hash, T + 1, DECIDERS, "cli")
                .await
                .unwrap()
        }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(a) => {
                won += 1;
                assert_eq!((a.state, a.attempt), (ActionState::Dispatched, 1));
            }
            Err(ActionRefusal::NotIn(ActionState::Dispatched)) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(won, 1);
    let done = store
        .finish_action(
            &run.id,
            c.token,
            &id,
            ActionEnd::Completed,
            Some(&serde_json::json!({"bytes": 3})),
            None,
            T + 2,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (done.state, done.result.clone()),
        (
            ActionState::Completed,
            Some(serde_json::json!({"bytes": 3}))
        )
    );
    assert_eq!(
        store
            .finish_action(&run.id, c.token, &id, ActionEnd::Failed, None, None, T + 3)
            .await
            .unwrap(),
        Err(ActionRefusal::NotIn(ActionState::Completed))
    );
    // Denied: aborted with `denied`, never dispatchable.
    let denied = store
        .propose_action(
            &run.id,
            c.token,
            "k2",
            "http_request",
            &serde_json::json!({"url": "https://x"}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    let denied = store
        .decide_action(
            &run.id,
            c.token,
            &denied.id,
            false,
            &serde_json::json!({"verdict": "deny"}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(denied.state, ActionState::Aborted);
    assert_eq!(denied.error.as_ref().unwrap()["code"], "denied");
    // Approval: the action waits, the run parks holding nothing, the
    // decision requeues it, and the new holder dispatches, consuming the
    // approval once.
    let risky = store
        .propose_action(
            &run.id,
            c.token,
            "k3",
            "run_command",
            &serde_json::json!({"argv": ["rm", "x"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    let (waiting, req) = store
        .request_action_approval(
            &run.id,
            c.token,
            &risky.id,
            &serde_json::json!({"verdict": "require_approval"}),
            Some("tainted by https://x".into()),
            T + 60_000,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(waiting.state, ActionState::AwaitingApproval);
    assert_eq!(waiting.approval_id.as_deref(), Some(req.id.as_str()));
    assert_eq!(req.payload_hash, risky.payload_hash);
    assert!(store.park_for_approval(&run.id, c.token, T).await.unwrap());
    let parked = store
        .get_run(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(parked.state, RunState::AwaitingApproval);
    assert!(matches!(
        store
            .propose_action(&run.id, c.token, "k4", "x", &p, T)
            .await,
        Err(StoreError::StaleToken)
    ));
    store
        .decide_approval(DEFAULT_WORKSPACE, &req.id, &decision(true, "cli", T))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .get_action(DEFAULT_WORKSPACE, &run.id, &risky.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ActionState::Approved
    );
    let c2 = store
        .claim_run("n", Duration::from_secs(60), &run.id)
        .await
        .unwrap()
        .expect("requeued");
    let d = store
        .dispatch_action(
            &run.id,
            c2.token,
            &risky.id,
            &risky.payload_hash,
            T + 1,
            DECIDERS,
            "cli",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.state, ActionState::Dispatched);
    assert_eq!(
        store
            .get_approval(DEFAULT_WORKSPACE, &req.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Consumed
    );
    // Workspace scope: another workspace sees no action.
    assert!(store.list_actions(WS_B, &run.id).await.unwrap().is_empty());
    assert_eq!(
        store.get_action(WS_B, &run.id, &risky.id).await.unwrap(),
        None
    );
    let mine = store
        .list_actions(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap();
    assert_eq!(
        mine.iter().map(|a| a.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let ev = store
        .events(DEFAULT_WORKSPACE, &run.id, 0, 500)
        .await
        .unwrap();
    assert!(
        ev.iter()
            .any(|e| e.kind == "tool_call" && e.data["state"] == "dispatched")
    );
    let lines = store.audit_lines(DEFAULT_WORKSPACE).await.unwrap();
    let dispatched = lines
        .iter()
        .map(|l| airlock_audit::from_json_line(l).unwrap().event)
        .find(|e| {
            e.event_type == "action.dispatched" && e.action_id.as_deref() == Some(risky.id.as_str())
        })
        .expect("audited");
    assert_eq!(
        dispatched.payload_hash.as_deref(),
        Some(risky.payload_hash.as_str())
    );
    assert_eq!(dispatched.metadata["approval"], req.id.as_str());
}
both!(dur_2_the_action_journal_moves_under_the_run_token);

async fn dur_2_a_dispatched_action_without_a_result_waits_for_a_person(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let run = store.create_run(new_run("agent")).await.unwrap().run;
    let c = store
        .claim_run("n", Duration::from_millis(0), &run.id)
        .await
        .unwrap()
        .unwrap();
    store.mark_workload_started(&run.id, c.token).await.unwrap();
    let p = serde_json::json!({"argv": ["deploy"]});
    let a = store
        .propose_action(&run.id, c.token, "k", "run_command", &p, T)
        .await
        .unwrap()
        .unwrap()
        .action;
    store
        .decide_action(
            &run.id,
            c.token,
            &a.id,
            true,
            &serde_json::json!({}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    store
        .dispatch_action(&run.id, c.token, &a.id, &a.payload_hash, T, DECIDERS, "cli")
        .await
        .unwrap()
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    // The executor is gone (its lease expired): recovery, not a retry.
    let recovered = store.recover_dispatched(store_now()).await.unwrap();
    assert_eq!(recovered, vec![(run.id.clone(), vec![a.id.clone()])]);
    assert_eq!(
        store
            .get_action(DEFAULT_WORKSPACE, &run.id, &a.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ActionState::OutcomeUnknown
    );
    let r = store
        .get_run(DEFAULT_WORKSPACE, &run.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.state, RunState::AwaitingApproval, "waits for a person");
    // The reaper leaves it alone, nothing claims it, recovery is idempotent.
    assert!(store.reap_expired(&|_| true).await.unwrap().is_empty());
    assert!(
        store
            .claim_next("n", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .recover_dispatched(store_now())
            .await
            .unwrap()
            .is_empty()
    );
    // Another workspace cannot settle it.
    assert!(matches!(
        store
            .settle_action(
                WS_B,
                &run.id,
                &a.id,
                Settlement::Succeeded,
                "x",
                airlock_audit::Actor::System,
                None,
                None,
                T
            )
            .await,
        Err(StoreError::NotFound)
    ));
    // A person says: re-run it, after a new approval of the same payload.
    let rerun = store
        .settle_action(
            DEFAULT_WORKSPACE,
            &run.id,
            &a.id,
            Settlement::Rerun,
            "cli",
            airlock_audit::Actor::System,
            Some("unsure"),
            Some(("re-run of an unknown outcome".into(), T + 60_000)),
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rerun.state, ActionState::AwaitingApproval);
    let req = store
        .get_approval(DEFAULT_WORKSPACE, rerun.approval_id.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (req.payload_hash.as_str(), req.state),
        (a.payload_hash.as_str(), ApprovalState::Pending)
    );
    assert_eq!(
        store
            .get_run(DEFAULT_WORKSPACE, &run.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        RunState::AwaitingApproval
    );
    store
        .decide_approval(DEFAULT_WORKSPACE, &req.id, &decision(true, "cli", T))
        .await
        .unwrap()
        .unwrap();
    let c2 = store
        .claim_run("n", Duration::from_millis(0), &run.id)
        .await
        .unwrap()
        .expect("resumed");
    let again = store
        .dispatch_action(
            &run.id,
            c2.token,
            &a.id,
            &a.payload_hash,
            T,
            DECIDERS,
            "cli",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.attempt, 2);
    std::thread::sleep(Duration::from_millis(5));
    // Crashed again: settled by a person as succeeded this time.
    store.recover_dispatched(store_now()).await.unwrap();
    assert_eq!(
        store
            .settle_action(
                DEFAULT_WORKSPACE,
                &run.id,
                &a.id,
                Settlement::Succeeded,
                "cli",
                airlock_audit::Actor::System,
                None,
                None,
                T
            )
            .await
            .unwrap()
            .unwrap()
            .state,
        ActionState::Completed
    );
    assert_eq!(
        store
            .get_run(DEFAULT_WORKSPACE, &run.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        RunState::Queued,
        "resumes"
    );
    assert_eq!(
        store
            .settle_action(
                DEFAULT_WORKSPACE,
                &run.id,
                &a.id,
                Settlement::Failed,
                "cli",
                airlock_audit::Actor::System,
                None,
                None,
                T
            )
            .await
            .unwrap(),
        Err(ActionRefusal::NotIn(ActionState::Completed))
    );
    let k = kinds(&store.audit_lines(DEFAULT_WORKSPACE).await.unwrap());
    assert!(
        k.contains(&"action.outcome_unknown".to_string())
            && k.contains(&"action.settled".to_string())
    );
}
both!(dur_2_a_dispatched_action_without_a_result_waits_for_a_person);

fn store_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn agt_6_an_emergency_stop_ends_what_it_must_and_resume_restarts_nothing(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    // In A: a queued run, a waiting run, a running run with open actions.
    let running = store.create_run(new_run("agent")).await.unwrap().run;
    let c = store
        .claim_run("n", Duration::from_secs(60), &running.id)
        .await
        .unwrap()
        .unwrap();
    let open = store
        .propose_action(
            &running.id,
            c.token,
            "k",
            "run_command",
            &serde_json::json!({"argv": ["ls"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    let decided = store
        .propose_action(
            &running.id,
            c.token,
            "k2",
            "run_command",
            &serde_json::json!({"argv": ["pwd"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    store
        .decide_action(
            &running.id,
            c.token,
            &decided.id,
            true,
            &serde_json::json!({}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    let queued = store.create_run(new_run("hello")).await.unwrap().run;
    let (waiting, req) = gated_run(&store, DEFAULT_WORKSPACE, T + 60_000).await;
    // The same in B, which is not stopped.
    let b_run = store.create_run(run_in(WS_B, "agent")).await.unwrap().run;
    let bc = store
        .claim_run("n", Duration::from_secs(60), &b_run.id)
        .await
        .unwrap()
        .unwrap();
    let b_act = store
        .propose_action(
            &b_run.id,
            bc.token,
            "k",
            "run_command",
            &serde_json::json!({"argv": ["ls"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    store
        .decide_action(
            &b_run.id,
            bc.token,
            &b_act.id,
            true,
            &serde_json::json!({}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    let b_queued = store.create_run(run_in(WS_B, "hello")).await.unwrap().run;
    let (_, b_req) = gated_run(&store, WS_B, T + 60_000).await;

    let out = store
        .emergency_stop(
            DEFAULT_WORKSPACE,
            "usr_x",
            airlock_audit::Actor::Human("usr_x".into()),
            Some("runaway"),
            T,
        )
        .await
        .unwrap();
    assert_eq!(out.running, vec![running.id.clone()]);
    assert_eq!(
        (
            out.stopped.runs_cancelled,
            out.stopped.runs_stopping,
            out.stopped.approvals_cancelled,
            out.stopped.actions_aborted
        ),
        (2, 1, 1, 2)
    );
    assert!(out.stopped.state.stopped);
    assert_eq!(out.stopped.state.reason.as_deref(), Some("runaway"));
    for id in [&queued.id, &waiting.id] {
        let r = store.get_run(DEFAULT_WORKSPACE, id).await.unwrap().unwrap();
        assert_eq!(
            (r.state, r.error_code.as_deref()),
            (RunState::Cancelled, Some("emergency_stop")),
            "{id}"
        );
    }
    assert_eq!(
        store.cancel_kind(&running.id).await.unwrap(),
        Some(CANCEL_BY_EMERGENCY_STOP)
    );
    assert_eq!(
        store
            .get_approval(DEFAULT_WORKSPACE, &req.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Cancelled
    );
    for a in [&open, &decided] {
        let a = store
            .get_action(DEFAULT_WORKSPACE, &running.id, &a.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(a.state, ActionState::Aborted);
        assert_eq!(a.error.unwrap()["code"], "emergency_stop");
    }
    // Nothing new is dispatched or asked for while stopped.
    let late = store
        .propose_action(
            &running.id,
            c.token,
            "k3",
            "run_command",
            &serde_json::json!({"argv": ["id"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    store
        .decide_action(
            &running.id,
            c.token,
            &late.id,
            true,
            &serde_json::json!({}),
            None,
            T,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .dispatch_action(
                &running.id,
                c.token,
                &late.id,
                &late.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap(),
        Err(ActionRefusal::Stopped)
    );
    let ask_late = store
        .propose_action(
            &running.id,
            c.token,
            "k4",
            "run_command",
            &serde_json::json!({"argv": ["rm"]}),
            T,
        )
        .await
        .unwrap()
        .unwrap()
        .action;
    assert_eq!(
        store
            .request_action_approval(
                &running.id,
                c.token,
                &ask_late.id,
                &serde_json::json!({}),
                None,
                T + 1000,
                T
            )
            .await
            .unwrap()
            .map(|_| ()),
        Err(ActionRefusal::Stopped)
    );
    // B is untouched: its queued run, request and action stand and dispatch.
    assert!(!store.emergency_state(WS_B).await.unwrap().stopped);
    assert_eq!(
        store
            .get_run(WS_B, &b_queued.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        RunState::Queued
    );
    assert_eq!(
        store
            .get_approval(WS_B, &b_req.id)
            .await
            .unwrap()
            .unwrap()
            .state,
        ApprovalState::Pending
    );
    assert_eq!(store.cancel_kind(&b_run.id).await.unwrap(), Some(0));
    assert!(
        store
            .dispatch_action(
                &b_run.id,
                bc.token,
                &b_act.id,
                &b_act.payload_hash,
                T,
                DECIDERS,
                "cli"
            )
            .await
            .unwrap()
            .is_ok()
    );
    // Resume in B changes nothing in A; resume in A restarts nothing.
    store
        .emergency_resume(WS_B, "cli", airlock_audit::Actor::System, T)
        .await
        .unwrap();
    assert!(
        store
            .emergency_state(DEFAULT_WORKSPACE)
            .await
            .unwrap()
            .stopped
    );
    assert_eq!(
        store.stopped_workspaces().await.unwrap(),
        vec![DEFAULT_WORKSPACE.to_string()]
    );
    let st = store
        .emergency_resume(
            DEFAULT_WORKSPACE,
            "usr_y",
            airlock_audit::Actor::Human("usr_y".into()),
            T + 1,
        )
        .await
        .unwrap();
    assert!(!st.stopped);
    assert_eq!(st.changed_by.as_deref(), Some("usr_y"));
    for id in [&queued.id, &waiting.id] {
        assert_eq!(
            store
                .get_run(DEFAULT_WORKSPACE, id)
                .await
                .unwrap()
                .unwrap()
                .state,
            RunState::Cancelled
        );
    }
    assert!(
        store
            .claim_next("n", Duration::from_secs(60), &[])
            .await
            .unwrap()
            .map(|c| c.run.workspace_id)
            != Some(DEFAULT_WORKSPACE.to_string())
    );
    let k = kinds(&store.audit_lines(DEFAULT_WORKSPACE).await.unwrap());
    assert!(
        k.contains(&"emergency.stopped".to_string())
            && k.contains(&"emergency.resumed".to_string())
    );
}
both!(agt_6_an_emergency_stop_ends_what_it_must_and_resume_restarts_nothing);
