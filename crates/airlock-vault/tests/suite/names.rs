//! KEY-4 / KEY-5: what a secret name and a secret value may be.

use airlock_vault::{ExposeSecret, MAX_SECRET_VALUE_LEN, ParseError, SecretName, SecretValue};

#[test]
fn key_4_secret_names_follow_the_pattern() {
    let valid = ["A", "API_TOKEN", "A1", "A_", "Z9_8_7", &"A".repeat(64)];
    for name in valid {
        assert_eq!(SecretName::parse(name).unwrap().as_str(), name);
    }
    let invalid = [
        ("", "empty"),
        ("api_token", "lower-case"),
        ("Api_Token", "mixed case"),
        ("1ABC", "leading digit"),
        ("_ABC", "leading underscore"),
        ("A-B", "dash"),
        ("A B", "space"),
        ("A.B", "dot"),
        ("ÄB", "non-ASCII"),
        ("AB\n", "newline"),
    ];
    for (name, case) in invalid {
        assert!(
            matches!(SecretName::parse(name), Err(ParseError::SecretName { .. })),
            "{case}"
        );
    }
    let too_long = "A".repeat(65);
    assert!(SecretName::parse(&too_long).is_err(), "65 characters");
}

#[test]
fn key_5_names_prefixed_airlock_are_reserved_for_the_platform() {
    for name in ["AIRLOCK_X", "AIRLOCK_", "AIRLOCK_SESSION_KEY"] {
        assert!(
            matches!(SecretName::parse(name), Err(ParseError::SecretName { .. })),
            "{name}"
        );
    }
    // Control: the prefix rule is exact.
    for name in ["AIRLOCK", "AIRLOCKX", "MY_AIRLOCK_X"] {
        assert!(SecretName::parse(name).is_ok(), "{name}");
    }
}

#[test]
fn key_4_secret_names_deserialize_only_when_valid() {
    let ok: SecretName = serde_json::from_str("\"API_TOKEN\"").unwrap();
    assert_eq!(ok.as_str(), "API_TOKEN");
    assert_eq!(serde_json::to_string(&ok).unwrap(), "\"API_TOKEN\"");
    assert!(serde_json::from_str::<SecretName>("\"api\"").is_err());
    assert!(serde_json::from_str::<SecretName>("\"AIRLOCK_KEK\"").is_err());
}

#[test]
fn key_4_values_up_to_32_kib_without_nul_are_accepted() {
    for len in [0, 1, MAX_SECRET_VALUE_LEN] {
        let value = SecretValue::parse(vec![b'x'; len]).unwrap();
        assert_eq!(value.len(), len);
    }
    let binary: Vec<u8> = (1..=255).collect();
    assert_eq!(
        SecretValue::parse(binary.clone()).unwrap().expose_secret(),
        binary
    );
}

#[test]
fn key_4_a_value_too_large_or_with_a_nul_byte_is_refused() {
    let cases = [
        ("32 KiB + 1", vec![b'x'; MAX_SECRET_VALUE_LEN + 1]),
        ("1 MiB", vec![b'x'; 1024 * 1024]),
        ("NUL inside", b"abc\0def".to_vec()),
        ("NUL only", vec![0]),
        ("NUL at the end", b"value\0".to_vec()),
    ];
    for (case, bytes) in cases {
        assert!(
            matches!(
                SecretValue::parse(bytes),
                Err(ParseError::SecretValue { .. })
            ),
            "{case}"
        );
    }
    assert!(
        SecretValue::try_from("no nul".to_owned()).is_ok(),
        "control"
    );
}

#[test]
fn key_4_a_refused_value_is_not_echoed_in_the_error() {
    let err = SecretValue::try_from("hunter2-secret\0".to_owned()).unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn key_4_debug_of_a_secret_value_is_redacted() {
    let value = SecretValue::try_from("s3cr3t-plaintext".to_owned()).unwrap();
    assert_eq!(format!("{value:?}"), "SecretValue([REDACTED])");
    assert_eq!(format!("{value:#?}"), "SecretValue([REDACTED])");
}
