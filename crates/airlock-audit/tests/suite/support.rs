//! A realistic chain to attack: twenty events of one workspace with every actor kind, absent
//! and present optional fields, and metadata that exercises canonical JSON (non-ASCII keys,
//! floats, escapes, nesting).

use airlock_audit::{Actor, AuditEvent, ChainedEvent, append};
use serde_json::json;

pub const WS: &str = "ws-7f3a";

pub fn event(workspace_id: &str, seq: u64) -> AuditEvent {
    let actor = match seq % 4 {
        0 => Actor::Human(format!("user-{seq}")),
        1 => Actor::Agent("agent-claude".to_owned()),
        2 => Actor::Service("scheduler".to_owned()),
        _ => Actor::System,
    };
    let some = |s: &str| (!seq.is_multiple_of(3)).then(|| format!("{s}-{seq}"));
    AuditEvent {
        workspace_id: workspace_id.to_owned(),
        seq,
        at: format!("2026-05-01T12:00:{:02}Z", seq % 60),
        actor,
        event_type: if seq.is_multiple_of(2) {
            "action.decided"
        } else {
            "secret.read"
        }
        .to_owned(),
        target: some("target"),
        request_id: some("req"),
        run_id: some("run"),
        action_id: some("act"),
        decision: seq.is_multiple_of(2).then(|| "require_approval".to_owned()),
        payload_hash: some("sha256:abc"),
        result: Some("ok".to_owned()),
        metadata: json!({
            "n": seq,
            "ratio": 0.1 * seq as f64 + 0.05,
            "big": 1e30,
            "tiny": 1.5e-7,
            "\u{20ac}": "euro",
            "\u{1f600}": ["grin", null, true],
            "\u{fb33}": {"z": -1, "a": "line\nbreak \"quoted\" \\ tab\t\u{1}"},
            "\r": "cr",
        }),
    }
}

/// A valid chain of `n` events for [`WS`].
pub fn chain(n: u64) -> Vec<ChainedEvent> {
    chain_for(WS, n)
}

pub fn chain_for(workspace_id: &str, n: u64) -> Vec<ChainedEvent> {
    let mut out: Vec<ChainedEvent> = Vec::new();
    for seq in 1..=n {
        let next = append(out.last(), event(workspace_id, seq)).unwrap();
        out.push(next);
    }
    out
}

/// Recomputes `e.hash` over its (possibly altered) contents and current `prev_hash`, as an
/// attacker with write access to the rows would.
pub fn rehash(e: &mut ChainedEvent) {
    e.hash = e.expected_hash().unwrap();
}

/// Renumbers, relinks and rehashes everything from index `from` on: a full rewrite.
pub fn rewrite_from(events: &mut [ChainedEvent], from: usize) {
    for i in from..events.len() {
        events[i].event.seq = i as u64 + 1;
        events[i].prev_hash = if i == 0 {
            airlock_audit::GENESIS
        } else {
            events[i - 1].hash
        };
        rehash(&mut events[i]);
    }
}

/// One row of the attack matrix: what was done to the chain and what verification must say.
pub struct Attack {
    pub name: &'static str,
    pub events: Vec<ChainedEvent>,
    pub workspace: Option<&'static str>,
    pub checkpoint: Option<(u64, [u8; 32])>,
    /// `Ok(count)` or the error.
    pub expected: Result<u64, airlock_audit::ChainError>,
}

/// The attack matrix over a 20-event chain, with positive controls (rows that must verify).
pub fn attacks() -> Vec<Attack> {
    use airlock_audit::ChainError::*;
    use airlock_audit::GENESIS;

    let base = chain(20);
    let h = |seq: usize| base[seq - 1].hash;
    let head = h(20);
    let with = |f: &dyn Fn(&mut Vec<ChainedEvent>)| {
        let mut events = base.clone();
        f(&mut events);
        events
    };
    let row = |name, events, expected| Attack {
        name,
        events,
        workspace: None,
        checkpoint: None,
        expected,
    };
    let forged = |seq: u64, prev: [u8; 32]| {
        let mut e = ChainedEvent {
            event: AuditEvent {
                event_type: "role.granted".to_owned(),
                actor: Actor::Human("mallory".to_owned()),
                ..event(WS, seq)
            },
            prev_hash: prev,
            hash: [0; 32],
        };
        rehash(&mut e);
        e
    };

    vec![
        // Positive controls.
        row("untouched chain", base.clone(), Ok(20)),
        Attack {
            workspace: Some(WS),
            checkpoint: Some((20, head)),
            ..row(
                "untouched chain, workspace and checkpoint at head",
                base.clone(),
                Ok(20),
            )
        },
        Attack {
            checkpoint: Some((10, h(10))),
            ..row("untouched chain, older checkpoint", base.clone(), Ok(20))
        },
        row("empty chain", Vec::new(), Ok(0)),
        Attack {
            checkpoint: Some((0, GENESIS)),
            ..row("empty chain, genesis checkpoint", Vec::new(), Ok(0))
        },
        // Edits.
        row(
            "metadata field edited",
            with(&|c| c[6].event.metadata["n"] = json!(700)),
            Err(Edited { seq: 7 }),
        ),
        row(
            "metadata field added",
            with(&|c| c[6].event.metadata["note"] = json!("benign")),
            Err(Edited { seq: 7 }),
        ),
        row(
            "time edited",
            with(&|c| c[6].event.at = "2026-05-01T11:59:59Z".to_owned()),
            Err(Edited { seq: 7 }),
        ),
        row(
            "actor edited",
            with(&|c| c[2].event.actor = Actor::Human("mallory".to_owned())),
            Err(Edited { seq: 3 }),
        ),
        row(
            "decision removed",
            with(&|c| c[11].event.decision = None),
            Err(Edited { seq: 12 }),
        ),
        row(
            "stored hash of the last event edited",
            with(&|c| c[19].hash[0] ^= 1),
            Err(Edited { seq: 20 }),
        ),
        row(
            "stored prev_hash edited",
            with(&|c| c[8].prev_hash[31] ^= 1),
            Err(Edited { seq: 9 }),
        ),
        row(
            "event edited and its hash recomputed",
            with(&|c| {
                c[6].event.result = Some("denied".to_owned());
                rehash(&mut c[6]);
            }),
            Err(PrevMismatch { seq: 8 }),
        ),
        row(
            "seq field edited",
            with(&|c| c[6].event.seq = 8),
            Err(Missing { expected_seq: 7 }),
        ),
        row(
            "metadata made uncanonicalisable",
            with(&|c| c[5].event.metadata["n"] = json!(u64::MAX)),
            Err(Canonical {
                seq: 6,
                source: airlock_audit::JcsError::InexactInteger(u64::MAX.to_string()),
            }),
        ),
        // Deletions and truncation.
        row(
            "event deleted",
            with(&|c| drop(c.remove(6))),
            Err(Missing { expected_seq: 7 }),
        ),
        row(
            "first event deleted",
            with(&|c| drop(c.remove(0))),
            Err(Missing { expected_seq: 1 }),
        ),
        row(
            "last event deleted, no checkpoint",
            with(&|c| drop(c.pop())),
            Ok(19),
        ),
        Attack {
            checkpoint: Some((20, head)),
            ..row(
                "last event deleted, checkpoint at head",
                with(&|c| drop(c.pop())),
                Err(Truncated {
                    have: 19,
                    checkpoint_seq: 20,
                }),
            )
        },
        Attack {
            checkpoint: Some((15, h(15))),
            ..row(
                "truncated to 12, checkpoint at 15",
                with(&|c| c.truncate(12)),
                Err(Truncated {
                    have: 12,
                    checkpoint_seq: 15,
                }),
            )
        },
        Attack {
            checkpoint: Some((3, h(3))),
            ..row(
                "everything deleted, checkpoint at 3",
                Vec::new(),
                Err(Truncated {
                    have: 0,
                    checkpoint_seq: 3,
                }),
            )
        },
        Attack {
            checkpoint: Some((25, head)),
            ..row(
                "checkpoint beyond the chain",
                base.clone(),
                Err(Truncated {
                    have: 20,
                    checkpoint_seq: 25,
                }),
            )
        },
        // Reordering.
        row(
            "two events swapped",
            with(&|c| c.swap(6, 7)),
            Err(OutOfOrder { seq: 7 }),
        ),
        row(
            "event moved to the end",
            with(&|c| {
                let e = c.remove(6);
                c.push(e);
            }),
            Err(OutOfOrder { seq: 7 }),
        ),
        row(
            "late event moved early",
            with(&|c| {
                let e = c.remove(14);
                c.insert(2, e);
            }),
            Err(OutOfOrder { seq: 3 }),
        ),
        row(
            "chain reversed",
            with(&|c| c.reverse()),
            Err(OutOfOrder { seq: 1 }),
        ),
        // Insertions.
        row(
            "forged event inserted with a duplicate seq",
            with(&|c| c.insert(10, forged(11, h(10)))),
            Err(Duplicate { seq: 11 }),
        ),
        row(
            "event replayed",
            with(&|c| {
                let e = c[4].clone();
                c.insert(5, e);
            }),
            Err(Duplicate { seq: 5 }),
        ),
        row(
            "forged event inserted, later events renumbered and rehashed",
            with(&|c| {
                c.insert(10, forged(11, h(10)));
                for e in &mut c[11..] {
                    e.event.seq += 1;
                    rehash(e);
                }
            }),
            Err(PrevMismatch { seq: 12 }),
        ),
        row(
            "forged event inserted, later events renumbered only",
            with(&|c| {
                c.insert(10, forged(11, h(10)));
                for e in &mut c[11..] {
                    e.event.seq += 1;
                }
            }),
            Err(Edited { seq: 12 }),
        ),
        row(
            "forged event inserted and the rest rewritten, no checkpoint",
            with(&|c| {
                c.insert(10, forged(11, h(10)));
                rewrite_from(c, 11);
            }),
            Ok(21),
        ),
        Attack {
            checkpoint: Some((20, head)),
            ..row(
                "forged event inserted and the rest rewritten, checkpoint at head",
                with(&|c| {
                    c.insert(10, forged(11, h(10)));
                    rewrite_from(c, 11);
                }),
                Err(CheckpointMismatch { seq: 20 }),
            )
        },
        Attack {
            checkpoint: Some((20, head)),
            ..row(
                "last event edited and rehashed, checkpoint at head",
                with(&|c| {
                    c[19].event.metadata["n"] = json!(0);
                    rehash(&mut c[19]);
                }),
                Err(CheckpointMismatch { seq: 20 }),
            )
        },
        Attack {
            checkpoint: Some((10, [7; 32])),
            ..row(
                "checkpoint hash differs",
                base.clone(),
                Err(CheckpointMismatch { seq: 10 }),
            )
        },
        row(
            "first event linked to a made-up predecessor",
            with(&|c| {
                c[0].prev_hash = [1; 32];
                rehash(&mut c[0]);
            }),
            Err(PrevMismatch { seq: 1 }),
        ),
        row(
            "first event numbered 0",
            with(&|c| c[0].event.seq = 0),
            Err(OutOfOrder { seq: 0 }),
        ),
        // Workspaces.
        row(
            "workspace id edited",
            with(&|c| c[4].event.workspace_id = "ws-other".to_owned()),
            Err(WorkspaceMismatch { seq: 5 }),
        ),
        row(
            "workspace id edited and rehashed",
            with(&|c| {
                c[4].event.workspace_id = "ws-other".to_owned();
                rehash(&mut c[4]);
            }),
            Err(WorkspaceMismatch { seq: 5 }),
        ),
        row(
            "event from another workspace's valid chain spliced in",
            with(&|c| c[4] = chain_for("ws-other", 5).remove(4)),
            Err(WorkspaceMismatch { seq: 5 }),
        ),
        Attack {
            workspace: Some("ws-other"),
            ..row(
                "whole chain of another workspace",
                base.clone(),
                Err(WorkspaceMismatch { seq: 1 }),
            )
        },
    ]
}
