//! AUD-4: JSON Lines export and strict import.

use airlock_audit::export::{ExportError, from_json_line, to_json_line};
use airlock_audit::jcs::canonicalize;
use airlock_audit::{ChainError, event_bytes, verify};
use serde_json::{Value, json};

use super::support::chain;

#[test]
fn aud_4_export_lines_round_trip_and_are_canonical() {
    let c = chain(20);
    for e in &c {
        let line = to_json_line(e).unwrap();
        assert!(!line.contains('\n'), "one event per line");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(String::from_utf8(canonicalize(&v).unwrap()).unwrap(), line);
        assert_eq!(v["hash"], json!(e.hash_hex()));
        assert_eq!(v["prev_hash"], json!(e.prev_hash_hex()));
        assert_eq!(&from_json_line(&line).unwrap(), e);
    }
    let imported: Vec<_> = c
        .iter()
        .map(|e| from_json_line(&to_json_line(e).unwrap()).unwrap())
        .collect();
    assert_eq!(verify(&imported).unwrap().head, c[19].hash);
}

#[test]
fn aud_4_export_line_layout() {
    let mut e = chain(1).remove(0);
    e.event.metadata = json!({"k": 1});
    e.hash = [0xab; 32];
    assert_eq!(
        to_json_line(&e).unwrap(),
        format!(
            concat!(
                r#"{{"action_id":"act-1","actor":{{"id":"agent-claude","kind":"agent"}},"at":"2026-05-01T12:00:01Z","#,
                r#""decision":null,"event_type":"secret.read","hash":"{}","metadata":{{"k":1}},"payload_hash":"sha256:abc-1","#,
                r#""prev_hash":"{}","request_id":"req-1","result":"ok","run_id":"run-1","seq":1,"target":"target-1","workspace_id":"ws-7f3a"}}"#
            ),
            "ab".repeat(32),
            "0".repeat(64)
        )
    );
}

#[test]
fn aud_4_integral_floats_change_spelling_but_not_their_hash() {
    // 2.0 is exported as 2 and read back as an integer: the value differs in serde_json's
    // representation but the canonical bytes, and so the chain, are unchanged.
    let mut c = chain(1);
    c[0] = airlock_audit::append(
        None,
        airlock_audit::AuditEvent {
            metadata: json!({"f": 2.0, "z": -0.0}),
            ..c[0].event.clone()
        },
    )
    .unwrap();
    let back = from_json_line(&to_json_line(&c[0]).unwrap()).unwrap();
    assert_eq!(back.event.metadata, json!({"f": 2, "z": 0}));
    assert_eq!(
        event_bytes(&back.event).unwrap(),
        event_bytes(&c[0].event).unwrap()
    );
    assert_eq!(verify(&[back]).unwrap().head, c[0].hash);
}

#[test]
fn aud_4_tampering_with_the_exported_text_is_detected() {
    let c = chain(5);
    let mut lines: Vec<String> = c.iter().map(|e| to_json_line(e).unwrap()).collect();
    lines[2] = lines[2].replace("\"result\":\"ok\"", "\"result\":\"failed\"");
    let events: Vec<_> = lines.iter().map(|l| from_json_line(l).unwrap()).collect();
    assert_eq!(verify(&events), Err(ChainError::Edited { seq: 3 }));
}

#[test]
fn aud_4_import_refuses_malformed_lines() {
    let good = to_json_line(&chain(1)[0]).unwrap();
    let v: Value = serde_json::from_str(&good).unwrap();
    let edit = |f: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let mut o = v.as_object().unwrap().clone();
        f(&mut o);
        serde_json::to_string(&o).unwrap()
    };
    let hash = v["hash"].as_str().unwrap().to_owned();
    type Case = (&'static str, String, fn(&ExportError) -> bool);
    let cases: Vec<Case> = vec![
        ("not json", "{".to_owned(), |e| {
            matches!(e, ExportError::Json(_))
        }),
        ("empty line", String::new(), |e| {
            matches!(e, ExportError::Json(_))
        }),
        ("array", "[1]".to_owned(), |e| {
            matches!(e, ExportError::NotObject)
        }),
        (
            "missing optional",
            edit(&|o| drop(o.remove("target"))),
            |e| matches!(e, ExportError::MissingField("target")),
        ),
        ("missing hash", edit(&|o| drop(o.remove("hash"))), |e| {
            matches!(e, ExportError::MissingField("hash"))
        }),
        (
            "unknown member",
            edit(&|o| drop(o.insert("extra".into(), json!(1)))),
            |e| matches!(e, ExportError::UnknownField(f) if f == "extra"),
        ),
        (
            "uppercase hash",
            edit(&|o| drop(o.insert("hash".into(), json!(hash.to_uppercase())))),
            |e| matches!(e, ExportError::BadHash { field: "hash" }),
        ),
        (
            "short prev_hash",
            edit(&|o| drop(o.insert("prev_hash".into(), json!("00")))),
            |e| matches!(e, ExportError::BadHash { field: "prev_hash" }),
        ),
        (
            "numeric hash",
            edit(&|o| drop(o.insert("hash".into(), json!(0)))),
            |e| matches!(e, ExportError::BadHash { field: "hash" }),
        ),
        (
            "float seq",
            edit(&|o| drop(o.insert("seq".into(), json!(1.5)))),
            |e| matches!(e, ExportError::Event(_)),
        ),
        (
            "unknown actor",
            edit(&|o| drop(o.insert("actor".into(), json!({"kind": "robot", "id": "r"})))),
            |e| matches!(e, ExportError::Event(_)),
        ),
        (
            "null event type",
            edit(&|o| drop(o.insert("event_type".into(), Value::Null))),
            |e| matches!(e, ExportError::Event(_)),
        ),
        (
            "metadata array",
            edit(&|o| drop(o.insert("metadata".into(), json!([])))),
            |e| matches!(e, ExportError::MetadataNotObject),
        ),
        (
            "system actor with null id",
            edit(&|o| drop(o.insert("actor".into(), json!({"kind": "system", "id": null})))),
            |e| matches!(e, ExportError::NonCanonical),
        ),
        (
            "repeated top-level key",
            good.replacen("{", "{\"seq\":2,", 1),
            |e| matches!(e, ExportError::Json(_)),
        ),
        (
            "repeated nested key",
            good.replacen("\"metadata\":{", "\"metadata\":{\"n\":0,\"n\":1,", 1),
            |e| matches!(e, ExportError::Json(_)),
        ),
        (
            "NaN",
            good.replacen("\"metadata\":{", "\"metadata\":{\"x\":NaN,", 1),
            |e| matches!(e, ExportError::Json(_)),
        ),
    ];
    assert!(from_json_line(&good).is_ok(), "positive control");
    for (name, line, ok) in cases {
        match from_json_line(&line) {
            Err(e) => assert!(ok(&e), "{name}: wrong error {e:?}"),
            Ok(_) => panic!("{name}: accepted {line}"),
        }
    }
}
