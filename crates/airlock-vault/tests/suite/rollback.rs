//! KEY-3: anti-rollback high-water marks.

use std::fs;

use airlock_vault::{
    DataKey, HwmChange, HwmMark, HwmProblem, KeyDir, RecordRef, RollbackFinding, SealedSecret,
    SecretName, StartupReport, Vault, VaultConfig, VaultError,
};

use super::support::{Fixture, WS, mode, name, value};

/// The store's side of a write, done the documented way.
fn write(fx: &Fixture, dk: &DataKey, n: &SecretName, stored: Option<u64>, v: &str) -> SealedSecret {
    let vault = fx.vault();
    let version = vault.next_version(WS, n, stored).unwrap();
    let sealed = vault.seal(dk, n, version, &value(v)).unwrap();
    // (the store commits the row here)
    vault.record_write(WS, n, version).unwrap();
    sealed
}

fn setup() -> (Fixture, DataKey) {
    let fx = Fixture::new();
    let dk = fx
        .vault()
        .unwrap_data_key(&fx.vault().new_data_key(WS).unwrap())
        .unwrap();
    (fx, dk)
}

#[test]
fn key_3_every_write_bumps_the_version_and_the_mark() {
    let (fx, dk) = setup();
    let n = name("API_TOKEN");
    let v1 = write(&fx, &dk, &n, None, "value-one-aaa");
    let v2 = write(&fx, &dk, &n, Some(v1.version), "value-two-bbb");
    assert_eq!((v1.version, v2.version), (1, 2));
    assert_eq!(
        fx.vault().high_water_mark(WS, &n).unwrap(),
        Some(HwmMark {
            version: 2,
            deleted: false
        })
    );
    assert_eq!(fx.vault().hwm_counter().unwrap(), 2);
}

#[test]
fn key_3_a_record_older_than_the_mark_is_refused() {
    let (fx, dk) = setup();
    let n = name("API_TOKEN");
    let old = write(&fx, &dk, &n, None, "old-value-123");
    let new = write(&fx, &dk, &n, Some(old.version), "new-value-456");

    // Control: the current row passes.
    fx.vault().check_read(WS, &n, new.version).unwrap();
    // The old row restored by UPDATE: its bytes still decrypt (the AEAD binds version 1), so
    // only the high-water mark stops it.
    assert!(fx.vault().open(&dk, &old).is_ok());
    match fx.vault().check_read(WS, &n, old.version) {
        Err(VaultError::Rollback {
            workspace,
            name,
            stored,
            expected,
        }) => assert_eq!(
            (workspace.as_str(), name, stored, expected),
            (WS, n.clone(), 1, 2)
        ),
        other => panic!("{other:?}"),
    }
    // Relabelling the old row as version 2 does not help: the AEAD refuses it.
    let mut relabelled = old.clone();
    relabelled.version = 2;
    assert!(matches!(
        fx.vault().open(&dk, &relabelled),
        Err(VaultError::DecryptionFailed)
    ));
}

#[test]
fn key_3_delete_then_insert_of_the_old_bytes_is_refused() {
    let (fx, dk) = setup();
    let n = name("API_TOKEN");
    let v1 = write(&fx, &dk, &n, None, "first-value-1");
    let v2 = write(&fx, &dk, &n, Some(1), "second-value-2");
    // The secret is deleted, then the attacker re-inserts either old row.
    fx.vault().record_delete(WS, &n, v2.version).unwrap();
    assert_eq!(
        fx.vault().high_water_mark(WS, &n).unwrap(),
        Some(HwmMark {
            version: 2,
            deleted: true
        })
    );
    for row in [&v1, &v2] {
        assert!(matches!(
            fx.vault().check_read(WS, &n, row.version),
            Err(VaultError::Rollback { expected: 3, .. })
        ));
    }
    match fx.vault().check_startup(&[RecordRef::from(&v1)]) {
        Err(VaultError::RollbackDetected { findings }) => assert_eq!(
            findings,
            [RollbackFinding::Stale {
                workspace: WS.into(),
                name: n.clone(),
                stored: 1,
                expected: 3
            }]
        ),
        other => panic!("{other:?}"),
    }
    // Control: a legitimate re-creation gets a new version above the tombstone and passes.
    let again = write(&fx, &dk, &n, None, "recreated-value");
    assert_eq!(again.version, 3);
    fx.vault().check_read(WS, &n, 3).unwrap();
    assert!(fx.vault().check_startup(&[RecordRef::from(&again)]).is_ok());
}

#[test]
fn key_3_a_write_that_does_not_exceed_the_mark_is_refused() {
    let (fx, dk) = setup();
    let n = name("API_TOKEN");
    write(&fx, &dk, &n, None, "value-one-xyz");
    for stale in [0, 1] {
        assert!(matches!(
            fx.vault().record_write(WS, &n, stale),
            Err(VaultError::StaleWrite { current: 1, .. })
        ));
    }
    assert!(fx.vault().record_write(WS, &n, 2).is_ok(), "control");
}

#[test]
fn key_3_marks_are_per_workspace_and_name() {
    let (fx, dk) = setup();
    write(&fx, &dk, &name("A"), None, "value-a-one");
    write(&fx, &dk, &name("A"), Some(1), "value-a-two");
    assert!(fx.vault().check_read(WS, &name("B"), 1).is_ok());
    assert!(fx.vault().check_read("ws-2", &name("A"), 1).is_ok());
    assert!(fx.vault().check_read(WS, &name("A"), 1).is_err());
}

#[test]
fn key_3_marks_persist_in_an_authenticated_file_written_atomically() {
    let (mut fx, dk) = setup();
    let n = name("API_TOKEN");
    write(&fx, &dk, &n, None, "value-one-aaa");
    write(&fx, &dk, &n, Some(1), "value-two-bbb");
    let path = fx.keys().join("hwm.json");
    assert_eq!(mode(&path), 0o600);
    let leftovers: Vec<_> = fs::read_dir(fx.keys())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let file: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(file["entries"][0]["name"], "API_TOKEN");
    assert_eq!(file["entries"][0]["version"], 2);
    assert_eq!(file["kek_version"], 1);
    assert_eq!(file["mac"].as_str().unwrap().len(), 64);

    fx.reopen();
    assert!(fx.vault().check_read(WS, &n, 1).is_err());
    assert!(fx.vault().check_read(WS, &n, 2).is_ok());
}

#[test]
fn key_3_a_tampered_hwm_file_refuses_to_load() {
    let (mut fx, dk) = setup();
    let n = name("API_TOKEN");
    write(&fx, &dk, &n, None, "value-one-aaa");
    write(&fx, &dk, &n, Some(1), "value-two-bbb");
    fx.close();
    let path = fx.keys().join("hwm.json");
    let original = fs::read_to_string(&path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&original).unwrap();

    let edit = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut copy = json.clone();
        f(&mut copy);
        serde_json::to_string(&copy).unwrap()
    };
    type Expect = fn(&HwmProblem) -> bool;
    let cases: Vec<(&str, String, Expect)> = vec![
        (
            "version lowered",
            edit(&|j| j["entries"][0]["version"] = 1.into()),
            |p| *p == HwmProblem::BadMac,
        ),
        (
            "entry removed",
            edit(&|j| j["entries"] = serde_json::json!([])),
            |p| *p == HwmProblem::BadMac,
        ),
        ("counter changed", edit(&|j| j["counter"] = 0.into()), |p| {
            *p == HwmProblem::BadMac
        }),
        (
            "mac replaced",
            edit(&|j| j["mac"] = "00".repeat(32).into()),
            |p| *p == HwmProblem::BadMac,
        ),
        ("mac not hex", edit(&|j| j["mac"] = "zz".into()), |p| {
            matches!(p, HwmProblem::Malformed { .. })
        }),
        ("unknown kek", edit(&|j| j["kek_version"] = 9.into()), |p| {
            *p == HwmProblem::UnusableKey { kek_version: 9 }
        }),
        ("not json", "{".into(), |p| {
            matches!(p, HwmProblem::Malformed { .. })
        }),
    ];
    for (case, content, expected) in cases {
        fs::write(&path, content).unwrap();
        match fx.try_reopen() {
            Err(VaultError::Hwm { problem, .. }) => {
                assert!(expected(&problem), "{case}: {problem:?}")
            }
            other => panic!("{case}: {other:?}"),
        }
    }
    // Control: reformatting without changing a value still verifies (the MAC covers values).
    fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
    fx.reopen();
    fx.close();
    fs::write(&path, &original).unwrap();
    fx.reopen();
    assert!(fx.vault().check_read(WS, &n, 1).is_err());
}

#[test]
fn key_3_an_hwm_file_from_another_key_directory_refuses_to_load() {
    let (mut fx, _) = setup();
    let other = Fixture::new();
    other.vault().record_write(WS, &name("X"), 5).unwrap();
    fx.close();
    fs::copy(other.keys().join("hwm.json"), fx.keys().join("hwm.json")).unwrap();
    assert!(matches!(
        fx.try_reopen(),
        Err(VaultError::Hwm {
            problem: HwmProblem::BadMac,
            ..
        })
    ));
}

#[test]
fn key_3_a_missing_hwm_file_refuses_to_load_once_the_vault_was_used() {
    let (mut fx, dk) = setup();
    write(&fx, &dk, &name("A"), None, "value-aaaa-1");
    fx.close();
    fs::remove_file(fx.keys().join("hwm.json")).unwrap();
    assert!(matches!(
        fx.try_reopen(),
        Err(VaultError::Hwm {
            problem: HwmProblem::Missing,
            ..
        })
    ));
}

#[test]
fn key_3_a_restored_old_database_is_detected_at_startup() {
    let (fx, dk) = setup();
    let (a, b, c) = (name("A"), name("B"), name("C"));
    let a1 = write(&fx, &dk, &a, None, "a-value-one");
    let b1 = write(&fx, &dk, &b, None, "b-value-one");
    // The backup is taken here: {A v1, B v1}.
    let backup = [RecordRef::from(&a1), RecordRef::from(&b1)];
    let a2 = write(&fx, &dk, &a, Some(1), "a-value-two");
    let c1 = write(&fx, &dk, &c, None, "c-value-one");
    let live = [
        RecordRef::from(&a2),
        RecordRef::from(&b1),
        RecordRef::from(&c1),
    ];

    // Control: the live store passes.
    assert_eq!(
        fx.vault().check_startup(&live).unwrap(),
        StartupReport {
            ahead: vec![],
            unrecorded: vec![],
            counter: 4
        }
    );
    match fx.vault().check_startup(&backup) {
        Err(VaultError::RollbackDetected { findings }) => assert_eq!(
            findings,
            [
                RollbackFinding::Stale {
                    workspace: WS.into(),
                    name: a.clone(),
                    stored: 1,
                    expected: 2
                },
                RollbackFinding::Missing {
                    workspace: WS.into(),
                    name: c.clone(),
                    expected: 1
                },
            ]
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn key_3_accept_restore_is_the_recovery_path_for_a_legitimate_backup() {
    let (mut fx, dk) = setup();
    let (a, c) = (name("A"), name("C"));
    let a1 = write(&fx, &dk, &a, None, "a-value-one");
    let backup = [RecordRef::from(&a1)];
    let a2 = write(&fx, &dk, &a, Some(1), "a-value-two");
    let a3 = write(&fx, &dk, &a, Some(2), "a-value-three");
    write(&fx, &dk, &c, None, "c-value-one");
    assert!(fx.vault().check_startup(&backup).is_err());

    let changes = fx.vault().accept_restore(&backup).unwrap();
    assert_eq!(
        changes,
        [
            HwmChange {
                workspace: WS.into(),
                name: a.clone(),
                before: Some(HwmMark {
                    version: 3,
                    deleted: false
                }),
                after: HwmMark {
                    version: 1,
                    deleted: false
                },
            },
            HwmChange {
                workspace: WS.into(),
                name: c.clone(),
                before: Some(HwmMark {
                    version: 1,
                    deleted: false
                }),
                after: HwmMark {
                    version: 1,
                    deleted: true
                },
            },
        ]
    );
    fx.reopen();
    fx.vault().check_startup(&backup).unwrap();
    fx.vault().check_read(WS, &a, 1).unwrap();
    // Rows of the abandoned timeline cannot be replayed afterwards...
    for row in [&a2, &a3] {
        assert!(matches!(
            fx.vault().check_read(WS, &a, row.version),
            Err(VaultError::Rollback { .. })
        ));
    }
    assert!(fx.vault().check_read(WS, &c, 1).is_err());
    // ...and new writes skip their versions, so no (name, version) is ever sealed twice.
    let a4 = write(&fx, &dk, &a, Some(1), "a-value-four");
    assert_eq!(a4.version, 4);
    fx.vault().check_read(WS, &a, 4).unwrap();
    assert!(fx.vault().check_read(WS, &a, 1).is_err());
}

#[test]
fn key_3_recovery_mode_needs_an_explicit_accept_restore() {
    let (mut fx, dk) = setup();
    let n = name("A");
    let row = write(&fx, &dk, &n, None, "value-aaaa-1");
    fx.close();
    fs::write(fx.keys().join("hwm.json"), "{ tampered").unwrap();
    assert!(fx.try_reopen().is_err());

    let vault = Vault::recover(
        KeyDir::open_or_create(fx.keys()).unwrap(),
        VaultConfig::default(),
    )
    .unwrap();
    for result in [
        vault.check_read(WS, &n, 1).map(|_| ()),
        vault.record_write(WS, &n, 2).map(|_| ()),
        vault.check_startup(&[]).map(|_| ()),
    ] {
        assert!(matches!(result, Err(VaultError::HwmUntrusted)));
    }
    vault.accept_restore(&[RecordRef::from(&row)]).unwrap();
    vault.check_read(WS, &n, 1).unwrap();
    drop(vault);
    fx.reopen();
    fx.vault().check_startup(&[RecordRef::from(&row)]).unwrap();
}

#[test]
fn key_3_a_crash_between_commit_and_record_write_is_reported_not_refused() {
    let (fx, dk) = setup();
    let n = name("A");
    write(&fx, &dk, &n, None, "value-aaaa-1");
    // The row for version 2 was committed, then the process died before record_write.
    let version = fx.vault().next_version(WS, &n, Some(1)).unwrap();
    let committed = fx
        .vault()
        .seal(&dk, &n, version, &value("value-bbbb-2"))
        .unwrap();
    let fresh = fx
        .vault()
        .seal(&dk, &name("B"), 1, &value("value-cccc-1"))
        .unwrap();

    let report = fx
        .vault()
        .check_startup(&[RecordRef::from(&committed), RecordRef::from(&fresh)])
        .unwrap();
    assert_eq!(report.ahead, [RecordRef::from(&committed)]);
    assert_eq!(report.unrecorded, [RecordRef::from(&fresh)]);
    fx.vault().check_read(WS, &n, 2).unwrap();
    // The next write continues above the committed row.
    assert_eq!(fx.vault().next_version(WS, &n, Some(2)).unwrap(), 3);
    fx.vault().record_write(WS, &n, 2).unwrap();
    assert!(fx.vault().check_read(WS, &n, 1).is_err());
}

#[test]
fn key_3_marks_survive_kek_rotation_and_retirement() {
    let (mut fx, dk) = setup();
    let n = name("A");
    write(&fx, &dk, &n, None, "value-aaaa-1");
    write(&fx, &dk, &n, Some(1), "value-aaaa-2");
    fx.vault().rotate().unwrap();
    fx.vault().retire(1).unwrap();
    let file: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(fx.keys().join("hwm.json")).unwrap()).unwrap();
    assert_eq!(file["kek_version"], 2);
    fx.reopen();
    assert!(fx.vault().check_read(WS, &n, 1).is_err());
    fx.vault().check_read(WS, &n, 2).unwrap();
}
