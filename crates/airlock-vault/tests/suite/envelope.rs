//! KEY-1: envelope encryption and what the associated data binds.

use std::collections::HashSet;

use airlock_vault::{
    ExposeSecret, NONCE_LEN, SealedSecret, SecretValue, TAG_LEN, VaultError, WrappedDataKey,
};

use super::support::{Fixture, WS, name, value};

fn sealed_fixture() -> (Fixture, WrappedDataKey, SealedSecret) {
    let fx = Fixture::new();
    let wrapped = fx.vault().new_data_key(WS).unwrap();
    let dk = fx.vault().unwrap_data_key(&wrapped).unwrap();
    let sealed = fx
        .vault()
        .seal(&dk, &name("API_TOKEN"), 1, &value("tok-3f9a8b7c6d"))
        .unwrap();
    (fx, wrapped, sealed)
}

fn open_err(fx: &Fixture, wrapped: &WrappedDataKey, sealed: &SealedSecret) -> VaultError {
    let dk = fx.vault().unwrap_data_key(wrapped).unwrap();
    fx.vault().open(&dk, sealed).unwrap_err()
}

#[test]
fn key_1_sealed_secret_opens_with_its_data_key() {
    let (fx, wrapped, sealed) = sealed_fixture();
    let dk = fx.vault().unwrap_data_key(&wrapped).unwrap();
    let opened = fx.vault().open(&dk, &sealed).unwrap();
    assert_eq!(opened.expose_secret(), b"tok-3f9a8b7c6d");
    assert_eq!(
        (
            sealed.workspace.as_str(),
            sealed.name.as_str(),
            sealed.version
        ),
        (WS, "API_TOKEN", 1)
    );
    assert_eq!(sealed.data_key_version, 1);
    assert_eq!(sealed.ciphertext.len(), "tok-3f9a8b7c6d".len() + TAG_LEN);
    assert!(
        !sealed.ciphertext.windows(4).any(|w| w == b"tok-"),
        "plaintext visible in ciphertext"
    );
}

#[test]
fn key_1_ciphertext_copied_to_another_name_or_version_fails_to_decrypt() {
    let (fx, wrapped, sealed) = sealed_fixture();
    type Edit = fn(&mut SealedSecret);
    let cases: Vec<(&str, Edit)> = vec![
        ("unchanged (control)", |_| {}),
        ("other name", |s| s.name = name("OTHER_TOKEN")),
        ("other version", |s| s.version = 2),
        ("older version", |s| s.version = 0),
    ];
    for (case, edit) in cases {
        let mut copy = sealed.clone();
        edit(&mut copy);
        let dk = fx.vault().unwrap_data_key(&wrapped).unwrap();
        let result = fx.vault().open(&dk, &copy);
        if case.starts_with("unchanged") {
            assert!(result.is_ok(), "{case}");
        } else {
            assert!(
                matches!(result, Err(VaultError::DecryptionFailed)),
                "{case}: {result:?}"
            );
        }
    }
}

#[test]
fn key_1_ciphertext_copied_to_another_workspace_fails_to_decrypt() {
    let (fx, _, sealed) = sealed_fixture();
    let other = fx.vault().new_data_key("ws-2").unwrap();
    let other_dk = fx.vault().unwrap_data_key(&other).unwrap();

    // Control: a secret sealed in ws-2 opens with ws-2's key.
    let own = fx
        .vault()
        .seal(&other_dk, &name("API_TOKEN"), 1, &value("ws2-value-xyz"))
        .unwrap();
    assert!(fx.vault().open(&other_dk, &own).is_ok());

    // The ws-1 row copied into ws-2 (relabelled, same name, version and key version).
    let mut copy = sealed.clone();
    copy.workspace = "ws-2".into();
    assert!(matches!(
        fx.vault().open(&other_dk, &copy),
        Err(VaultError::DecryptionFailed)
    ));
    // Not relabelled: the key of the other workspace is refused before any decryption.
    assert!(matches!(
        fx.vault().open(&other_dk, &sealed),
        Err(VaultError::DataKeyMismatch { .. })
    ));
}

#[test]
fn key_1_ciphertext_under_another_data_key_version_fails() {
    let (fx, _, sealed) = sealed_fixture();
    let second = fx.vault().new_data_key(WS).unwrap();
    assert_eq!(second.version, 2);
    let dk2 = fx.vault().unwrap_data_key(&second).unwrap();
    let mut copy = sealed.clone();
    copy.data_key_version = 2;
    assert!(matches!(
        fx.vault().open(&dk2, &copy),
        Err(VaultError::DecryptionFailed)
    ));
}

#[test]
fn key_1_a_flipped_bit_anywhere_in_nonce_ciphertext_or_tag_fails() {
    let (fx, wrapped, sealed) = sealed_fixture();
    let dk = fx.vault().unwrap_data_key(&wrapped).unwrap();
    assert!(fx.vault().open(&dk, &sealed).is_ok(), "control");
    for i in 0..NONCE_LEN {
        for bit in [0x01u8, 0x80] {
            let mut copy = sealed.clone();
            copy.nonce[i] ^= bit;
            assert!(
                matches!(
                    fx.vault().open(&dk, &copy),
                    Err(VaultError::DecryptionFailed)
                ),
                "nonce byte {i}"
            );
        }
    }
    for i in 0..sealed.ciphertext.len() {
        for bit in [0x01u8, 0x80] {
            let mut copy = sealed.clone();
            copy.ciphertext[i] ^= bit;
            assert!(
                matches!(
                    fx.vault().open(&dk, &copy),
                    Err(VaultError::DecryptionFailed)
                ),
                "ciphertext byte {i}"
            );
        }
    }
}

#[test]
fn key_1_a_flipped_bit_in_a_wrapped_data_key_fails() {
    let (fx, wrapped, _) = sealed_fixture();
    assert!(fx.vault().unwrap_data_key(&wrapped).is_ok(), "control");
    for i in 0..NONCE_LEN {
        let mut copy = wrapped.clone();
        copy.nonce[i] ^= 0x04;
        assert!(matches!(
            fx.vault().unwrap_data_key(&copy),
            Err(VaultError::DecryptionFailed)
        ));
    }
    for i in 0..wrapped.ciphertext.len() {
        let mut copy = wrapped.clone();
        copy.ciphertext[i] ^= 0x04;
        assert!(matches!(
            fx.vault().unwrap_data_key(&copy),
            Err(VaultError::DecryptionFailed)
        ));
    }
}

#[test]
fn key_1_wrapped_data_key_relabelled_to_another_workspace_or_version_fails() {
    let (fx, wrapped, _) = sealed_fixture();
    fx.vault().rotate().unwrap(); // kek v2 exists, so a relabelled kek version is usable
    type Edit = fn(&mut WrappedDataKey);
    let cases: Vec<(&str, Edit)> = vec![
        ("other workspace", |w| w.workspace = "ws-2".into()),
        ("other data key version", |w| w.version = 2),
        ("other kek version", |w| w.kek_version = 2),
    ];
    assert!(fx.vault().unwrap_data_key(&wrapped).is_ok(), "control");
    for (case, edit) in cases {
        let mut copy = wrapped.clone();
        edit(&mut copy);
        let result = fx.vault().unwrap_data_key(&copy);
        assert!(
            matches!(result, Err(VaultError::DecryptionFailed)),
            "{case}: {result:?}"
        );
    }
    let mut unknown = wrapped.clone();
    unknown.kek_version = 9;
    assert!(matches!(
        fx.vault().unwrap_data_key(&unknown),
        Err(VaultError::UnknownKey { version: 9 })
    ));
}

#[test]
fn key_1_truncated_ciphertext_fails_with_a_typed_error() {
    let (fx, wrapped, sealed) = sealed_fixture();
    for keep in [0, 1, TAG_LEN - 1] {
        let mut copy = sealed.clone();
        copy.ciphertext.truncate(keep);
        assert!(
            matches!(
                open_err(&fx, &wrapped, &copy),
                VaultError::MalformedRecord { .. }
            ),
            "kept {keep}"
        );
    }
    for keep in [TAG_LEN, sealed.ciphertext.len() - 1] {
        let mut copy = sealed.clone();
        copy.ciphertext.truncate(keep);
        assert!(
            matches!(open_err(&fx, &wrapped, &copy), VaultError::DecryptionFailed),
            "kept {keep}"
        );
    }
    let mut short_key = wrapped.clone();
    short_key.ciphertext.pop();
    assert!(matches!(
        fx.vault().unwrap_data_key(&short_key),
        Err(VaultError::MalformedRecord { .. })
    ));
    let mut long_key = wrapped.clone();
    long_key.ciphertext.push(0);
    assert!(matches!(
        fx.vault().unwrap_data_key(&long_key),
        Err(VaultError::MalformedRecord { .. })
    ));
}

/// The million-draw check of the nonce source is a unit test in `src/crypto.rs` (an unoptimized
/// build seals ~10k records a second); here the real seal and wrap paths are sampled.
#[test]
fn key_1_nonces_are_unique_across_sealed_secrets_and_wrapped_keys() {
    let fx = Fixture::new();
    let dk = fx
        .vault()
        .unwrap_data_key(&fx.vault().new_data_key(WS).unwrap())
        .unwrap();
    let n = name("N");
    let v = value("x");
    let mut nonces = HashSet::new();
    for version in 0..20_000u64 {
        let sealed = fx.vault().seal(&dk, &n, version, &v).unwrap();
        assert!(nonces.insert(sealed.nonce), "nonce repeated at {version}");
    }
    for _ in 0..200 {
        let wrapped = fx.vault().new_data_key(WS).unwrap();
        assert!(nonces.insert(wrapped.nonce), "wrap nonce repeated");
    }
    assert_eq!(nonces.len(), 20_200);
    // Control: the set does catch a repeat.
    let any = *nonces.iter().next().unwrap();
    assert!(!nonces.insert(any));
}

#[test]
fn key_1_records_round_trip_through_json_with_base64_bytes() {
    let (fx, wrapped, sealed) = sealed_fixture();
    let json = serde_json::to_value(&sealed).unwrap();
    assert!(json["nonce"].is_string() && json["ciphertext"].is_string());
    assert_eq!(json["name"], "API_TOKEN");
    let back: SealedSecret = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, sealed);
    let back_key: WrappedDataKey =
        serde_json::from_str(&serde_json::to_string(&wrapped).unwrap()).unwrap();
    assert_eq!(back_key, wrapped);
    let dk = fx.vault().unwrap_data_key(&back_key).unwrap();
    assert!(fx.vault().open(&dk, &back).is_ok());

    // A nonce of the wrong length, an invalid name or an unknown field does not parse.
    let mut bad = json.clone();
    bad["nonce"] = "AAAA".into();
    assert!(serde_json::from_value::<SealedSecret>(bad).is_err());
    let mut bad = json.clone();
    bad["name"] = "lower".into();
    assert!(serde_json::from_value::<SealedSecret>(bad).is_err());
    let mut bad = json;
    bad["extra"] = 1.into();
    assert!(serde_json::from_value::<SealedSecret>(bad).is_err());
}

#[test]
fn key_1_debug_of_secret_value_and_data_key_never_shows_plaintext() {
    let (fx, wrapped, sealed) = sealed_fixture();
    let dk = fx.vault().unwrap_data_key(&wrapped).unwrap();
    let opened: SecretValue = fx.vault().open(&dk, &sealed).unwrap();
    let shown = format!("{opened:?} {opened:#?}");
    assert!(!shown.contains("tok-3f9a8b7c6d"), "{shown}");
    assert!(shown.contains("[REDACTED]"));
    assert_eq!(
        format!("{dk:?}"),
        r#"DataKey { workspace: "ws-1", version: 1, kek_version: 1, key: "[REDACTED]" }"#
    );
    // Control: the value itself is there to be exposed on purpose.
    assert_eq!(opened.expose_secret(), b"tok-3f9a8b7c6d");
}

#[test]
fn key_1_invalid_workspace_ids_are_refused() {
    let fx = Fixture::new();
    for ws in ["", "a\nb", &"w".repeat(129)] {
        assert!(
            matches!(
                fx.vault().new_data_key(ws),
                Err(VaultError::Parse(
                    airlock_vault::ParseError::Workspace { .. }
                ))
            ),
            "{ws:?}"
        );
    }
    assert!(fx.vault().new_data_key(&"w".repeat(128)).is_ok(), "control");
}
