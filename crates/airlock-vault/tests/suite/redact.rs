//! KEY-6: redaction of delivered values and their encodings.

use airlock_vault::{REDACTED, RedactionWarning, Redactor, SecretName, SecretValue, WarningKind};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

use super::support::name;

const STRONG: &str = "xK9#mQ2$vL7@pR4!";

fn redactor(values: &[(&str, &[u8])]) -> Redactor {
    let owned: Vec<(SecretName, SecretValue)> = values
        .iter()
        .map(|(n, v)| (name(n), SecretValue::parse(v.to_vec()).unwrap()))
        .collect();
    Redactor::new(owned.iter().map(|(n, v)| (n, v)))
}

fn strong() -> Redactor {
    redactor(&[("TOKEN", STRONG.as_bytes())])
}

#[test]
fn key_6_a_value_printed_plainly_is_replaced() {
    let r = strong();
    assert!(r.warnings().is_empty());
    assert_eq!(
        r.redact(&format!("token={STRONG} and again {STRONG}\n")),
        "token=[REDACTED] and again [REDACTED]\n"
    );
    // Control: text without the value is untouched, as is a near miss.
    let clean = "nothing to see: xK9#mQ2$vL7@pR4 (one character short)";
    assert_eq!(r.redact(clean), clean);
}

#[test]
fn key_6_a_strong_value_inside_a_longer_token_is_still_replaced() {
    let r = redactor(&[("TOKEN", b"ghp_a8F3kQ9zL2mX7vB1")]);
    assert_eq!(
        r.redact("Bearerghp_a8F3kQ9zL2mX7vB1xyz"),
        "Bearer[REDACTED]xyz"
    );
}

#[test]
fn key_6_a_value_inside_json_is_replaced_in_its_escaped_forms() {
    let value = "p\"a\\s/s\tw\u{e9}rd\u{1F512}<&>";
    let r = redactor(&[("PASSWORD", value.as_bytes())]);
    assert!(r.warnings().is_empty());
    let documents = [
        // serde_json / JavaScript
        serde_json::json!({"pw": value, "user": "bob"}).to_string(),
        // Python json.dumps (ensure_ascii): \u00e9, surrogate pair for the emoji
        r#"{"pw": "p\"a\\s/s\tw\u00e9rd\ud83d\udd12<&>", "user": "bob"}"#.to_owned(),
        r#"{"pw": "p\"a\\s/s\tw\u00E9rd\uD83D\uDD12<&>", "user": "bob"}"#.to_owned(),
        // PHP json_encode: \/ and \u escapes
        r#"{"pw":"p\"a\\s\/s\tw\u00e9rd\ud83d\udd12<&>","user":"bob"}"#.to_owned(),
        // Go encoding/json: HTML-safe escapes
        "{\"pw\":\"p\\\"a\\\\s/s\\tw\u{e9}rd\u{1F512}\\u003c\\u0026\\u003e\",\"user\":\"bob\"}"
            .to_owned(),
    ];
    for doc in documents {
        let out = r.redact(&doc);
        assert!(out.contains(REDACTED), "{doc} -> {out}");
        assert!(out.contains("bob"), "{out}");
        assert!(!out.contains("rd"), "{doc} -> {out}");
    }
    // JSON escaped twice (a JSON document inside a JSON string).
    let inner = serde_json::json!({"pw": value}).to_string();
    let outer = serde_json::json!({"log": inner}).to_string();
    assert_eq!(r.redact(&outer), r#"{"log":"{\"pw\":\"[REDACTED]\"}"}"#);
}

#[test]
fn key_6_base64_forms_are_replaced_standard_and_url_safe_padded_and_not() {
    // Bytes chosen so the standard and URL-safe alphabets differ (+/ vs -_) and padding is
    // needed.
    let value: &[u8] = b"\xfb\xff\xbfk3y-m4t3r1al!";
    let r = redactor(&[("BINARY_KEY", value)]);
    for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
        let encoded = engine.encode(value);
        let out = r.redact(&format!("key: {encoded} end"));
        assert_eq!(out, "key: [REDACTED] end", "{encoded}");
    }
    assert_ne!(STANDARD.encode(value), URL_SAFE.encode(value));
    assert!(STANDARD.encode(value).ends_with('='));
}

#[test]
fn key_6_a_value_inside_a_longer_base64_stream_is_replaced_at_any_alignment() {
    let r = strong();
    for prefix in ["", "u:", "us:", "use:"] {
        let header = STANDARD.encode(format!("{prefix}{STRONG}:suffix"));
        let out = r.redact(&format!("Authorization: Basic {header}"));
        assert!(out.contains(REDACTED), "{prefix:?}: {out}");
        // Only the boundary characters mixed with neighbours can remain.
        let kept = out.len() - "Authorization: Basic ".len() - REDACTED.len();
        assert!(kept <= header.len() - STRONG.len() * 4 / 3 + 4, "{out}");
    }
}

#[test]
fn key_6_percent_encoded_and_hex_forms_are_replaced() {
    let r = strong();
    let url = format!("GET /cb?token={}&x=1", "xK9%23mQ2%24vL7%40pR4%21");
    assert_eq!(r.redact(&url), "GET /cb?token=[REDACTED]&x=1");
    let hex: String = STRONG.bytes().map(|b| format!("{b:02x}")).collect();
    assert_eq!(r.redact(&format!("dump {hex}")), "dump [REDACTED]");
}

#[test]
fn key_6_weak_values_are_replaced_only_at_word_boundaries_and_warned_about() {
    let r = redactor(&[("PIN", b"hunter2")]);
    match r.warnings() {
        [
            RedactionWarning {
                name: n,
                kind:
                    WarningKind::LowEntropy {
                        length: 7,
                        bits_per_byte,
                    },
            },
        ] => {
            assert_eq!(n.as_str(), "PIN");
            // Seven distinct characters: log2(7) bits per byte; short is what makes it weak.
            assert!(
                (bits_per_byte - 7f64.log2()).abs() < 1e-9,
                "{bits_per_byte}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        r.redact("pw=hunter2, (hunter2) \"hunter2\" hunter2."),
        "pw=[REDACTED], ([REDACTED]) \"[REDACTED]\" [REDACTED]."
    );
    // Inside a longer word it is left alone: blind replacement would mangle logs.
    for text in ["hunter2x", "xhunter2", "hunter2_backup", "my_hunter2"] {
        assert_eq!(r.redact(text), text);
    }
}

#[test]
fn key_6_low_entropy_and_short_values_produce_warnings_instead_of_blind_replacement() {
    let r = redactor(&[
        ("SHORT", b"a"),
        ("EMPTY", b""),
        ("REPEATED", b"aaaaaaaaaaaa"),
        ("STRONG", STRONG.as_bytes()),
    ]);
    let kinds: Vec<(String, String)> = r
        .warnings()
        .iter()
        .map(|w| {
            let kind = match w.kind {
                WarningKind::TooShort { length } => format!("too short {length}"),
                WarningKind::LowEntropy { length, .. } => format!("low entropy {length}"),
            };
            (w.name.to_string(), kind)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("SHORT".into(), "too short 1".into()),
            ("EMPTY".into(), "too short 0".into()),
            ("REPEATED".into(), "low entropy 12".into()),
        ]
    );
    let log = "a cat ate a banana";
    assert_eq!(r.redact(log), log, "short value not replaced");
    assert_eq!(r.redact("x aaaaaaaaaaaa y"), "x [REDACTED] y");
    assert_eq!(
        r.redact("aaaaaaaaaaaaa"),
        "aaaaaaaaaaaaa",
        "longer run left alone"
    );
    // The warning names the secret, never its value.
    for warning in r.warnings() {
        let text = warning.to_string();
        assert!(!text.contains("aaaa"), "{text}");
    }
}

#[test]
fn key_6_redact_bytes_handles_binary_logs() {
    let r = strong();
    let mut log = vec![0xff, 0x00, 0xfe];
    log.extend_from_slice(STRONG.as_bytes());
    log.extend_from_slice(&[0x80, 0x0a]);
    let mut expected = vec![0xff, 0x00, 0xfe];
    expected.extend_from_slice(REDACTED.as_bytes());
    expected.extend_from_slice(&[0x80, 0x0a]);
    assert_eq!(r.redact_bytes(&log), expected);
    assert_eq!(r.redact_bytes(b"\xff\xfe"), b"\xff\xfe", "control");
}

#[test]
fn key_6_several_values_and_overlaps_use_the_longest_match() {
    let r = redactor(&[("SHORTER", b"Tq8vN3pZ"), ("LONGER", b"Tq8vN3pZ-w7Yk2Lm")]);
    assert_eq!(r.redact("a Tq8vN3pZ-w7Yk2Lm b"), "a [REDACTED] b");
    assert_eq!(r.redact("a Tq8vN3pZ b"), "a [REDACTED] b");
}

#[test]
fn key_6_an_empty_redactor_changes_nothing_and_debug_shows_no_value() {
    let empty = Redactor::default();
    assert!(empty.is_empty());
    assert_eq!(empty.redact("anything"), "anything");
    let r = strong();
    let shown = format!("{r:?}");
    assert!(!shown.contains("xK9"), "{shown}");
}
