//! KEY-2: KEK versions, rotation, rewrap, retirement and the operation counters.

use std::fs;

use airlock_vault::{ExposeSecret, KekState, KeyRef, VaultError};

use super::support::{Fixture, WS, limit, mode, name, value};

#[test]
fn key_2_rotation_installs_a_new_current_kek_and_old_data_stays_readable() {
    let mut fx = Fixture::new();
    let old = fx.vault().new_data_key(WS).unwrap();
    assert_eq!(old.kek_version, 1);
    assert_eq!(fx.vault().rotate().unwrap(), 2);
    assert_eq!(fx.vault().current_kek_version(), 2);
    assert_eq!(mode(&fx.keys().join("kek-v2")), 0o600);
    assert_eq!(fs::read(fx.keys().join("kek-v2")).unwrap().len(), 32);
    assert_ne!(
        fs::read(fx.keys().join("kek-v1")).unwrap(),
        fs::read(fx.keys().join("kek-v2")).unwrap()
    );

    let new = fx.vault().new_data_key(WS).unwrap();
    assert_eq!((new.kek_version, new.version), (2, 2));
    assert!(
        fx.vault().unwrap_data_key(&old).is_ok(),
        "old kek still decrypts"
    );

    // Survives a restart.
    fx.reopen();
    assert_eq!(fx.vault().current_kek_version(), 2);
    assert!(fx.vault().unwrap_data_key(&old).is_ok());
    assert!(fx.vault().unwrap_data_key(&new).is_ok());
}

#[test]
fn key_2_rewrap_moves_a_data_key_to_the_newest_kek_and_is_idempotent() {
    let fx = Fixture::new();
    let wrapped = fx.vault().new_data_key(WS).unwrap();
    let dk = fx.vault().unwrap_data_key(&wrapped).unwrap();
    let sealed = fx
        .vault()
        .seal(
            &dk,
            &name("DB_PASSWORD"),
            1,
            &value("correct horse battery"),
        )
        .unwrap();
    fx.vault().rotate().unwrap();
    fx.vault().rotate().unwrap();

    let moved = fx.vault().rewrap(&wrapped).unwrap();
    assert_eq!(
        (moved.workspace.as_str(), moved.version, moved.kek_version),
        (WS, 1, 3)
    );
    assert_ne!(moved.ciphertext, wrapped.ciphertext);
    // Resumable: a second pass leaves the record as it is.
    assert_eq!(fx.vault().rewrap(&moved).unwrap(), moved);

    // Secrets sealed before the rewrap open with the rewrapped key: nothing else to rewrite.
    let dk = fx.vault().unwrap_data_key(&moved).unwrap();
    assert_eq!(dk.kek_version(), 3);
    assert_eq!(
        fx.vault().open(&dk, &sealed).unwrap().expose_secret(),
        b"correct horse battery"
    );
}

#[test]
fn key_2_a_retired_kek_version_fails_with_a_typed_error() {
    let mut fx = Fixture::new();
    let stale = fx.vault().new_data_key(WS).unwrap();
    let moved_source = fx.vault().new_data_key("ws-2").unwrap();
    fx.vault().rotate().unwrap();
    let moved = fx.vault().rewrap(&moved_source).unwrap();
    fx.vault().retire(1).unwrap();

    assert!(matches!(
        fx.vault().unwrap_data_key(&stale),
        Err(VaultError::RetiredKey { version: 1 })
    ));
    assert!(matches!(
        fx.vault().rewrap(&stale),
        Err(VaultError::RetiredKey { version: 1 })
    ));
    // Control: the data key rewrapped before retirement still opens.
    assert!(fx.vault().unwrap_data_key(&moved).is_ok());

    // Retirement is persistent; retiring again is a no-op.
    fx.reopen();
    assert!(matches!(
        fx.vault().unwrap_data_key(&stale),
        Err(VaultError::RetiredKey { version: 1 })
    ));
    fx.vault().retire(1).unwrap();
    let states: Vec<(u32, KekState, bool)> = fx
        .vault()
        .keks()
        .iter()
        .map(|k| (k.version, k.state, k.current))
        .collect();
    assert_eq!(
        states,
        [(1, KekState::Retired, false), (2, KekState::Active, true)]
    );
    // The operator may delete a retired key's file.
    fx.close();
    fs::remove_file(fx.keys().join("kek-v1")).unwrap();
    fx.reopen();
    assert!(fx.vault().unwrap_data_key(&moved).is_ok());
}

#[test]
fn key_2_the_current_or_an_unknown_kek_cannot_be_retired() {
    let fx = Fixture::new();
    assert!(matches!(
        fx.vault().retire(1),
        Err(VaultError::RetireCurrent { version: 1 })
    ));
    assert!(matches!(
        fx.vault().retire(5),
        Err(VaultError::UnknownKey { version: 5 })
    ));
    fx.vault().rotate().unwrap();
    assert!(fx.vault().retire(1).is_ok(), "control");
}

#[test]
fn key_2_the_kek_operation_counter_forces_rotation() {
    let fx = Fixture::with_config(limit(3));
    let first = fx.vault().new_data_key(WS).unwrap();
    fx.vault().new_data_key(WS).unwrap();
    assert!(!fx.vault().needs_rotation(), "control: below the limit");
    fx.vault().new_data_key(WS).unwrap();
    assert!(fx.vault().needs_rotation());
    match fx.vault().new_data_key(WS) {
        Err(VaultError::KeyExhausted {
            key,
            operations,
            limit,
        }) => assert_eq!((key, operations, limit), (KeyRef::Kek { version: 1 }, 3, 3)),
        other => panic!("{other:?}"),
    }
    // Decryption is not an encryption: still allowed.
    assert!(fx.vault().unwrap_data_key(&first).is_ok());

    fx.vault().rotate().unwrap();
    assert!(!fx.vault().needs_rotation());
    let moved = fx.vault().rewrap(&first).unwrap();
    assert_eq!(moved.kek_version, 2);
    assert!(fx.vault().new_data_key(WS).is_ok());
}

#[test]
fn key_2_operation_counts_survive_a_restart() {
    let mut fx = Fixture::with_config(limit(10));
    for _ in 0..4 {
        fx.vault().new_data_key(WS).unwrap();
    }
    fx.reopen();
    assert_eq!(fx.vault().keks()[0].operations, 4);
    for _ in 0..6 {
        fx.vault().new_data_key(WS).unwrap();
    }
    fx.reopen();
    assert!(fx.vault().needs_rotation());
    assert!(matches!(
        fx.vault().new_data_key(WS),
        Err(VaultError::KeyExhausted { .. })
    ));
}

#[test]
fn key_2_counts_are_reserved_in_blocks_and_only_ever_over_count() {
    // With a large limit, a restart may skip the rest of a reserved block (≤ limit / 64).
    let mut fx = Fixture::with_config(limit(64 * 100));
    for _ in 0..3 {
        fx.vault().new_data_key(WS).unwrap();
    }
    assert_eq!(fx.vault().keks()[0].operations, 3);
    fx.reopen();
    let after = fx.vault().keks()[0].operations;
    assert!((3..=100).contains(&after), "{after}");
}

#[test]
fn key_2_the_data_key_operation_counter_forces_a_new_data_key() {
    let fx = Fixture::with_config(limit(2));
    let wrapped = fx.vault().new_data_key(WS).unwrap();
    let dk = fx.vault().unwrap_data_key(&wrapped).unwrap();
    let n = name("TOKEN");
    let first = fx.vault().seal(&dk, &n, 1, &value("first-value")).unwrap();
    fx.vault().seal(&dk, &n, 2, &value("second-value")).unwrap();
    assert!(fx.vault().data_key_needs_rotation(&dk));
    match fx.vault().seal(&dk, &n, 3, &value("third-value")) {
        Err(VaultError::KeyExhausted { key, .. }) => assert_eq!(
            key,
            KeyRef::DataKey {
                workspace: WS.into(),
                version: 1
            }
        ),
        other => panic!("{other:?}"),
    }
    // Rotating the data key: a new version, sealing resumes, the old key still opens.
    let next = fx.vault().new_data_key(WS).unwrap();
    assert_eq!(next.version, 2);
    let dk2 = fx.vault().unwrap_data_key(&next).unwrap();
    assert!(!fx.vault().data_key_needs_rotation(&dk2));
    let third = fx.vault().seal(&dk2, &n, 3, &value("third-value")).unwrap();
    assert_eq!(third.data_key_version, 2);
    assert!(fx.vault().open(&dk, &first).is_ok());
    assert!(fx.vault().open(&dk2, &third).is_ok());
}
