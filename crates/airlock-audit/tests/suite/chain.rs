//! AUD-2 / AUD-4: the hash chain, the published algorithm, and verification against the
//! attack matrix in `support::attacks`.

use airlock_audit::chain::{DOMAIN_SEPARATOR, EVENT_FIELDS};
use airlock_audit::jcs::JcsError;
use airlock_audit::{
    Actor, AuditEvent, ChainError, GENESIS, Verifier, VerifySummary, append, event_bytes, hex,
    link_hash, verify, verify_against,
};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::support::{WS, attacks, chain, event};

fn run(
    events: &[airlock_audit::ChainedEvent],
    ws: Option<&str>,
    cp: Option<(u64, [u8; 32])>,
) -> Result<VerifySummary, ChainError> {
    let mut v = Verifier::new();
    if let Some(ws) = ws {
        v = v.for_workspace(ws);
    }
    if let Some((seq, head)) = cp {
        v = v.with_checkpoint(seq, head);
    }
    for e in events {
        v.push(e)?;
    }
    v.finish()
}

#[test]
fn aud_4_verify_detects_every_attack_and_names_the_first_bad_seq() {
    let rows = attacks();
    assert!(rows.len() >= 30);
    for a in rows {
        let got = run(&a.events, a.workspace, a.checkpoint);
        match (&a.expected, &got) {
            (Ok(count), Ok(summary)) => {
                assert_eq!(summary.count, *count, "{}", a.name);
                let head = a
                    .events
                    .iter()
                    .rev()
                    .find(|e| e.event.seq == *count)
                    .map_or(GENESIS, |e| e.hash);
                assert_eq!(summary.head, head, "{}", a.name);
            }
            (Err(want), Err(got)) => assert_eq!(got, want, "{}", a.name),
            _ => panic!("{}: expected {:?}, got {:?}", a.name, a.expected, got),
        }
        if a.workspace.is_none() {
            // The slice helpers agree with the streaming verifier.
            assert_eq!(verify_against(&a.events, a.checkpoint), got, "{}", a.name);
            if a.checkpoint.is_none() {
                assert_eq!(verify(&a.events), got, "{}", a.name);
            }
        }
    }
}

#[test]
fn aud_4_every_error_kind_is_exercised_by_the_matrix() {
    let kinds: std::collections::BTreeSet<String> = attacks()
        .into_iter()
        .filter_map(|a| a.expected.err())
        .map(|e| {
            format!("{e:?}")
                .split([' ', '{'])
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let all = [
        "Canonical",
        "CheckpointMismatch",
        "Duplicate",
        "Edited",
        "Missing",
        "OutOfOrder",
        "PrevMismatch",
        "Truncated",
        "WorkspaceMismatch",
    ];
    assert_eq!(kinds, all.iter().map(|s| (*s).to_owned()).collect());
}

#[test]
fn aud_4_untouched_chain_verifies_to_its_head() {
    let c = chain(20);
    let summary = verify(&c).unwrap();
    assert_eq!(
        summary,
        VerifySummary {
            count: 20,
            head: c[19].hash
        }
    );
    assert_eq!(verify_against(&c, Some((20, c[19].hash))), Ok(summary));
    assert_eq!(
        verify(&[]),
        Ok(VerifySummary {
            count: 0,
            head: GENESIS
        })
    );
}

#[test]
fn aud_4_first_bad_seq_of_each_error() {
    let cases = [
        (ChainError::Edited { seq: 7 }, 7),
        (ChainError::Missing { expected_seq: 4 }, 4),
        (ChainError::OutOfOrder { seq: 3 }, 3),
        (ChainError::Duplicate { seq: 11 }, 11),
        (ChainError::PrevMismatch { seq: 8 }, 8),
        (ChainError::WorkspaceMismatch { seq: 5 }, 5),
        (
            ChainError::Truncated {
                have: 12,
                checkpoint_seq: 15,
            },
            13,
        ),
        (ChainError::CheckpointMismatch { seq: 20 }, 20),
        (ChainError::MetadataNotObject { seq: 2 }, 2),
        (
            ChainError::Canonical {
                seq: 6,
                source: JcsError::NonFinite,
            },
            6,
        ),
        (
            ChainError::Malformed {
                seq: 9,
                source: airlock_audit::LineError {
                    reason: "expected a string",
                    offset: 13,
                },
            },
            9,
        ),
    ];
    for (err, seq) in cases {
        assert_eq!(err.first_bad_seq(), seq, "{err:?}");
        assert!(
            err.to_string().contains(&seq.to_string())
                || matches!(err, ChainError::Truncated { .. }),
            "{err}"
        );
    }
    assert_eq!(
        ChainError::Truncated {
            have: 12,
            checkpoint_seq: 15
        }
        .to_string(),
        "chain ends at event 12 but a checkpoint covers event 15"
    );
}

#[test]
fn aud_2_hash_is_the_published_algorithm() {
    // SHA-256("airlock-audit-v1\n" || prev || JCS(event)), computed by hand.
    assert_eq!(DOMAIN_SEPARATOR, b"airlock-audit-v1\n");
    let c = chain(3);
    for (i, e) in c.iter().enumerate() {
        let prev = if i == 0 { GENESIS } else { c[i - 1].hash };
        assert_eq!(e.prev_hash, prev);
        let mut h = Sha256::new();
        h.update(b"airlock-audit-v1\n");
        h.update(prev);
        h.update(
            airlock_audit::jcs::canonicalize(&serde_json::to_value(&e.event).unwrap()).unwrap(),
        );
        let by_hand: [u8; 32] = h.finalize().into();
        assert_eq!(e.hash, by_hand);
        assert_eq!(e.hash, link_hash(&prev, &event_bytes(&e.event).unwrap()));
    }
}

fn fixed_event() -> AuditEvent {
    AuditEvent {
        workspace_id: "ws-1".to_owned(),
        seq: 1,
        at: "2026-01-02T03:04:05Z".to_owned(),
        actor: Actor::Human("u-1".to_owned()),
        event_type: "login.succeeded".to_owned(),
        target: None,
        request_id: Some("req-1".to_owned()),
        run_id: None,
        action_id: None,
        decision: None,
        payload_hash: None,
        result: Some("ok".to_owned()),
        metadata: json!({"mfa": true, "ip": "192.0.2.1"}),
    }
}

#[test]
fn aud_2_canonical_event_bytes_and_hash_are_stable() {
    // Known-answer test: changing the event layout, the canonical form or the hash input
    // breaks every existing chain, so it must be a deliberate, versioned change.
    let e = fixed_event();
    assert_eq!(
        String::from_utf8(event_bytes(&e).unwrap()).unwrap(),
        r#"{"action_id":null,"actor":{"id":"u-1","kind":"human"},"at":"2026-01-02T03:04:05Z","decision":null,"event_type":"login.succeeded","metadata":{"ip":"192.0.2.1","mfa":true},"payload_hash":null,"request_id":"req-1","result":"ok","run_id":null,"seq":1,"target":null,"workspace_id":"ws-1"}"#
    );
    let c = append(None, e).unwrap();
    assert_eq!(c.prev_hash_hex(), "0".repeat(64));
    assert_eq!(c.hash_hex(), KNOWN_HASH);
    assert_eq!(hex::decode_hash(KNOWN_HASH), Ok(c.hash));
}

/// Computed independently: `hashlib.sha256(b"airlock-audit-v1\n" + bytes(32) + canonical)`.
const KNOWN_HASH: &str = "1ee102f84071234c2d58f8c4b18e3bc47737547c209f6d986ee221d5f7a230c8";

#[test]
fn aud_2_event_serialises_with_every_field_and_tagged_actor() {
    let v = serde_json::to_value(fixed_event()).unwrap();
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut fields = EVENT_FIELDS.to_vec();
    keys.sort_unstable();
    fields.sort_unstable();
    assert_eq!(
        keys, fields,
        "absent optional fields are null, never omitted"
    );
    let actors = [
        (
            Actor::Human("h".to_owned()),
            json!({"kind": "human", "id": "h"}),
        ),
        (
            Actor::Agent("a".to_owned()),
            json!({"kind": "agent", "id": "a"}),
        ),
        (
            Actor::Service("s".to_owned()),
            json!({"kind": "service", "id": "s"}),
        ),
        (Actor::System, json!({"kind": "system"})),
    ];
    for (actor, want) in actors {
        assert_eq!(serde_json::to_value(&actor).unwrap(), want);
        assert_eq!(serde_json::from_value::<Actor>(want).unwrap(), actor);
    }
}

#[test]
fn aud_2_append_links_events_and_checks_continuity() {
    let first = append(None, event(WS, 1)).unwrap();
    assert_eq!(first.prev_hash, GENESIS);
    let second = append(Some(&first), event(WS, 2)).unwrap();
    assert_eq!(second.prev_hash, first.hash);
    assert_ne!(second.hash, first.hash);

    let cases: [(Option<&airlock_audit::ChainedEvent>, AuditEvent, ChainError); 7] = [
        (None, event(WS, 2), ChainError::Missing { expected_seq: 1 }),
        (None, event(WS, 0), ChainError::OutOfOrder { seq: 0 }),
        (
            Some(&second),
            event(WS, 2),
            ChainError::OutOfOrder { seq: 2 },
        ),
        (
            Some(&second),
            event(WS, 1),
            ChainError::OutOfOrder { seq: 1 },
        ),
        (
            Some(&second),
            event(WS, 4),
            ChainError::Missing { expected_seq: 3 },
        ),
        (
            Some(&second),
            event("ws-other", 3),
            ChainError::WorkspaceMismatch { seq: 3 },
        ),
        (
            Some(&second),
            AuditEvent {
                metadata: json!(["not", "an", "object"]),
                ..event(WS, 3)
            },
            ChainError::MetadataNotObject { seq: 3 },
        ),
    ];
    for (prev, e, want) in cases {
        assert_eq!(append(prev, e), Err(want.clone()), "{want}");
    }
    assert_eq!(
        append(
            Some(&second),
            AuditEvent {
                metadata: json!({"n": 9_007_199_254_740_993_u64}),
                ..event(WS, 3)
            }
        ),
        Err(ChainError::Canonical {
            seq: 3,
            source: JcsError::InexactInteger("9007199254740993".to_owned())
        })
    );
}

#[test]
fn aud_2_chains_of_different_workspaces_are_independent() {
    let a = super::support::chain_for("ws-a", 3);
    let b = super::support::chain_for("ws-b", 3);
    assert_ne!(a[0].hash, b[0].hash, "the workspace id is hashed");
    assert_eq!(run(&a, Some("ws-a"), None).map(|s| s.count), Ok(3));
    assert_eq!(run(&b, Some("ws-b"), None).map(|s| s.count), Ok(3));
    assert_eq!(
        run(&b, Some("ws-a"), None),
        Err(ChainError::WorkspaceMismatch { seq: 1 })
    );
}
