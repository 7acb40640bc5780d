//! Identity (IAM-1 … IAM-7): bootstrap, users, members, sessions, API
//! keys, the second factor and the last-owner rule.

use airlock_store::*;

use crate::{kinds, rec};

async fn iam_1_bootstrap_creates_the_first_owner_exactly_once(store: Store) {
    assert_eq!(store.bootstrap_state().await.unwrap(), BootstrapState::Open);
    assert_eq!(
        store.bootstrap_begin("hash-1", 1_000).await.unwrap(),
        BootstrapState::Open
    );
    // A new begin replaces the earlier unused token.
    assert_eq!(
        store.bootstrap_begin("hash-2", 1_001).await.unwrap(),
        BootstrapState::Open
    );
    let claim = |s: &Store, token: &'static str, user: String| {
        let s = s.clone();
        async move {
            s.bootstrap_claim(token, &user, "phc", DEFAULT_WORKSPACE, "Acme", 2_000)
                .await
                .unwrap()
        }
    };
    assert_eq!(claim(&store, "hash-1", "old".into()).await, None);
    assert_eq!(claim(&store, "wrong", "x".into()).await, None);
    // A taken username fails the claim and leaves the bootstrap open.
    store.create_user("taken", None, 1).await.unwrap();
    assert_eq!(claim(&store, "hash-2", "taken".into()).await, None);
    assert_eq!(store.bootstrap_state().await.unwrap(), BootstrapState::Open);
    assert_eq!(
        store.count_role(DEFAULT_WORKSPACE, "owner").await.unwrap(),
        0
    );

    // Racing claims with the right token: exactly one owner.
    let mut tasks = Vec::new();
    for i in 0..8 {
        tasks.push(tokio::spawn(claim(&store, "hash-2", format!("owner{i}"))));
    }
    let mut winners = Vec::new();
    for t in tasks {
        if let Some(u) = t.await.unwrap() {
            winners.push(u);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one claim wins");
    let owner = &winners[0];
    assert_eq!(store.count_users().await.unwrap(), 2);
    assert_eq!(
        store.count_role(DEFAULT_WORKSPACE, "owner").await.unwrap(),
        1
    );
    let members = store.list_members(DEFAULT_WORKSPACE).await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(
        (
            members[0].user_id.as_str(),
            members[0].role.as_str(),
            members[0].workspace_name.as_str()
        ),
        (owner.id.as_str(), "owner", "Acme")
    );
    assert_eq!(
        store.user_by_id(&owner.id).await.unwrap().as_ref(),
        Some(owner)
    );
    let events: Vec<_> = store
        .audit_lines(DEFAULT_WORKSPACE)
        .await
        .unwrap()
        .iter()
        .map(|l| airlock_audit::from_json_line(l).unwrap().event)
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "bootstrap.completed");
    assert_eq!(
        events[0].actor,
        airlock_audit::chain::Actor::Human(owner.id.clone())
    );

    // Closed for good.
    assert_eq!(
        store.bootstrap_state().await.unwrap(),
        BootstrapState::Closed
    );
    assert_eq!(
        store.bootstrap_begin("hash-3", 3_000).await.unwrap(),
        BootstrapState::Closed
    );
    assert_eq!(claim(&store, "hash-2", "late".into()).await, None);
    assert_eq!(claim(&store, "hash-3", "later".into()).await, None);
    assert_eq!(store.count_users().await.unwrap(), 2);
}
both!(iam_1_bootstrap_creates_the_first_owner_exactly_once);

async fn iam_1_bootstrap_is_closed_once_an_owner_exists(store: Store) {
    assert_eq!(
        store.bootstrap_begin("hash-1", 1).await.unwrap(),
        BootstrapState::Open
    );
    let u = store.create_user("ada", None, 1).await.unwrap();
    store.create_workspace("Ada's", &u.id, 2).await.unwrap();
    assert_eq!(
        store.bootstrap_state().await.unwrap(),
        BootstrapState::Closed
    );
    assert_eq!(
        store.bootstrap_begin("hash-2", 3).await.unwrap(),
        BootstrapState::Closed
    );
    let claimed = store
        .bootstrap_claim("hash-1", "eve", "phc", DEFAULT_WORKSPACE, "x", 4)
        .await
        .unwrap();
    assert_eq!(claimed, None);
    assert_eq!(store.user_by_name("eve").await.unwrap(), None);
}
both!(iam_1_bootstrap_is_closed_once_an_owner_exists);

async fn iam_2_users_are_unique_and_found_by_name_and_id(store: Store) {
    assert_eq!(store.count_users().await.unwrap(), 0);
    let ada = store.create_user("ada", Some("phc-1"), 10).await.unwrap();
    assert!(ada.id.starts_with("usr_"));
    assert_eq!(
        (
            ada.username.as_str(),
            ada.password_hash.as_deref(),
            ada.created_at,
            ada.disabled
        ),
        ("ada", Some("phc-1"), 10, false)
    );
    assert!(matches!(
        store.create_user("ada", None, 11).await,
        Err(StoreError::Conflict)
    ));
    let bob = store.create_user("bob", None, 12).await.unwrap();
    assert_eq!(bob.password_hash, None);
    assert_eq!(store.user_by_name("ada").await.unwrap(), Some(ada.clone()));
    assert_eq!(store.user_by_id(&ada.id).await.unwrap(), Some(ada.clone()));
    assert_eq!(store.user_by_id(&bob.id).await.unwrap(), Some(bob.clone()));
    assert_eq!(store.user_by_name("nobody").await.unwrap(), None);
    assert_eq!(store.user_by_id("usr_missing").await.unwrap(), None);
    store.set_password(&bob.id, "phc-2").await.unwrap();
    assert_eq!(
        store
            .user_by_name("bob")
            .await
            .unwrap()
            .unwrap()
            .password_hash
            .as_deref(),
        Some("phc-2")
    );
    assert!(matches!(
        store.set_password("usr_missing", "phc").await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.count_users().await.unwrap(), 2);
    let json = serde_json::to_value(&ada).unwrap();
    assert!(json.get("password_hash").is_none(), "{json}");
}
both!(iam_2_users_are_unique_and_found_by_name_and_id);

async fn iam_6_members_are_workspace_scoped(store: Store) {
    let alice = store.create_user("alice", None, 1).await.unwrap();
    let bob = store.create_user("bob", None, 1).await.unwrap();
    let carol = store.create_user("carol", None, 1).await.unwrap();
    let a = store.create_workspace("A", &alice.id, 10).await.unwrap();
    let b = store.create_workspace("B", &bob.id, 20).await.unwrap();
    assert!(a.starts_with("ws_") && a != b);
    assert_eq!(
        kinds(&store.audit_lines(&b).await.unwrap()),
        ["workspace.created"]
    );

    store
        .set_member(&a, &carol.id, "viewer", 30, rec("member.added"))
        .await
        .unwrap();
    store
        .set_member(&b, &carol.id, "admin", 40, rec("member.added"))
        .await
        .unwrap();
    let names = |ms: Vec<Membership>| -> Vec<(String, String)> {
        ms.into_iter().map(|m| (m.username, m.role)).collect()
    };
    assert_eq!(
        names(store.list_members(&a).await.unwrap()),
        [
            ("alice".into(), "owner".into()),
            ("carol".into(), "viewer".into())
        ]
    );
    assert_eq!(
        names(store.list_members(&b).await.unwrap()),
        [
            ("bob".into(), "owner".into()),
            ("carol".into(), "admin".into())
        ]
    );
    assert_eq!(store.membership(&a, &bob.id).await.unwrap(), None);
    assert_eq!(
        store.membership(&a, &carol.id).await.unwrap(),
        Some(Membership {
            workspace_id: a.clone(),
            workspace_name: "A".into(),
            user_id: carol.id.clone(),
            username: "carol".into(),
            role: "viewer".into(),
            created_at: 30,
        })
    );
    // Changing a role changes it in that workspace only.
    store
        .set_member(&a, &carol.id, "operator", 50, rec("member.role_changed"))
        .await
        .unwrap();
    assert_eq!(
        store.membership(&a, &carol.id).await.unwrap().unwrap().role,
        "operator"
    );
    assert_eq!(
        store.membership(&b, &carol.id).await.unwrap().unwrap().role,
        "admin"
    );
    assert_eq!(store.count_role(&a, "owner").await.unwrap(), 1);
    assert_eq!(store.count_role(&a, "admin").await.unwrap(), 0);
    assert_eq!(store.count_role(&b, "admin").await.unwrap(), 1);
    let of_carol: Vec<(String, String)> = store
        .memberships_of(&carol.id)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.workspace_name, m.role))
        .collect();
    assert_eq!(
        of_carol,
        [
            ("A".into(), "operator".into()),
            ("B".into(), "admin".into())
        ]
    );

    // Removing from A: bob is not in A (his B membership stays); carol's
    // A keys are revoked, her B key is not.
    assert!(
        !store
            .remove_member(&a, &bob.id, 60, rec("member.removed"))
            .await
            .unwrap()
    );
    assert!(store.membership(&b, &bob.id).await.unwrap().is_some());
    let key = |ws: &str, hash: &str| {
        let (s, ws, hash, user) = (
            store.clone(),
            ws.to_string(),
            hash.to_string(),
            carol.id.clone(),
        );
        async move {
            s.create_api_key(
                &ws,
                &user,
                "ci",
                "ak_x",
                &hash,
                &[],
                None,
                70,
                rec("api_key.created"),
            )
            .await
            .unwrap()
        }
    };
    key(&a, "ka").await;
    key(&b, "kb").await;
    assert!(
        store
            .remove_member(&a, &carol.id, 80, rec("member.removed"))
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .api_key_by_hash("ka")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        Some(80)
    );
    assert_eq!(
        store
            .api_key_by_hash("kb")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    assert_eq!(store.membership(&a, &carol.id).await.unwrap(), None);
    assert!(store.membership(&b, &carol.id).await.unwrap().is_some());
    assert!(
        !store
            .remove_member(&a, &carol.id, 90, rec("member.removed"))
            .await
            .unwrap()
    );
    assert_eq!(
        kinds(&store.audit_lines(&a).await.unwrap()),
        [
            "workspace.created",
            "member.added",
            "member.role_changed",
            "api_key.created",
            "member.removed"
        ]
    );
}
both!(iam_6_members_are_workspace_scoped);

async fn iam_3_sessions_store_hashes_and_revoke(store: Store) {
    let u = store.create_user("u", None, 1).await.unwrap();
    let v = store.create_user("v", None, 1).await.unwrap();
    let s1 = store
        .create_session(
            &u.id,
            "t1",
            "c1",
            false,
            Some("ua"),
            Some("10.0.0.1"),
            100,
            1_000,
        )
        .await
        .unwrap();
    assert!(s1.id.starts_with("ses_"));
    let s2 = store
        .create_session(&u.id, "t2", "c2", true, None, None, 110, 1_000)
        .await
        .unwrap();
    let _s3 = store
        .create_session(&u.id, "t3", "c3", false, None, None, 120, 150)
        .await
        .unwrap();
    let sv = store
        .create_session(&v.id, "tv", "cv", false, None, None, 130, 1_000)
        .await
        .unwrap();
    assert_eq!(
        store.session_by_token_hash("t1").await.unwrap(),
        Some(s1.clone())
    );
    assert!(
        store
            .session_by_token_hash("t2")
            .await
            .unwrap()
            .unwrap()
            .mfa_pending
    );
    assert_eq!(store.session_by_token_hash("nope").await.unwrap(), None);
    store.touch_session(&s1.id, 200).await.unwrap();
    assert_eq!(
        store
            .session_by_token_hash("t1")
            .await
            .unwrap()
            .unwrap()
            .last_seen_at,
        200
    );
    // Expired (s3) sessions are not listed; newest activity first.
    let ids = |l: Vec<SessionRecord>| l.into_iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(
        ids(store.list_sessions(&u.id, 160).await.unwrap()),
        [s1.id.clone(), s2.id.clone()]
    );
    // Another user cannot revoke u's session.
    assert!(!store.revoke_session(&v.id, &s2.id, 170).await.unwrap());
    assert!(store.session_by_token_hash("t2").await.unwrap().is_some());
    assert!(store.revoke_session(&u.id, &s2.id, 170).await.unwrap());
    assert!(!store.revoke_session(&u.id, &s2.id, 171).await.unwrap());
    assert_eq!(store.session_by_token_hash("t2").await.unwrap(), None);
    assert_eq!(
        ids(store.list_sessions(&u.id, 160).await.unwrap()),
        vec![s1.id.clone()]
    );
    // All but the current one (only s3 is left unrevoked besides s1).
    assert_eq!(
        store
            .revoke_sessions_of(&u.id, Some(&s1.id), 300)
            .await
            .unwrap(),
        1
    );
    assert!(store.session_by_token_hash("t1").await.unwrap().is_some());
    assert_eq!(store.revoke_sessions_of(&u.id, None, 301).await.unwrap(), 1);
    assert_eq!(store.session_by_token_hash("t1").await.unwrap(), None);
    assert!(store.list_sessions(&u.id, 160).await.unwrap().is_empty());
    assert_eq!(ids(store.list_sessions(&v.id, 160).await.unwrap()), [sv.id]);
    let json = serde_json::to_value(&s1).unwrap();
    assert!(json.get("csrf_hash").is_none(), "{json}");
}
both!(iam_3_sessions_store_hashes_and_revoke);

async fn iam_5_api_keys_are_scoped_to_workspace_and_user(store: Store) {
    let u = store.create_user("u", None, 1).await.unwrap();
    let v = store.create_user("v", None, 1).await.unwrap();
    let a = store.create_workspace("A", &u.id, 2).await.unwrap();
    let b = store.create_workspace("B", &v.id, 3).await.unwrap();
    store
        .set_member(&b, &u.id, "operator", 4, rec("member.added"))
        .await
        .unwrap();
    store
        .set_member(&a, &v.id, "operator", 4, rec("member.added"))
        .await
        .unwrap();
    let scopes = vec!["runs:create".to_string(), "runs:read".to_string()];
    let k1 = store
        .create_api_key(
            &a,
            &u.id,
            "ci",
            "ak_1",
            "h1",
            &scopes,
            Some(10_000),
            100,
            rec("api_key.created"),
        )
        .await
        .unwrap();
    assert!(k1.id.starts_with("key_"));
    assert_eq!(
        (
            k1.scopes.clone(),
            k1.expires_at,
            k1.revoked_at,
            k1.last_used_at
        ),
        (scopes.clone(), Some(10_000), None, None)
    );
    let k2 = store
        .create_api_key(
            &b,
            &u.id,
            "ci",
            "ak_2",
            "h2",
            &[],
            None,
            110,
            rec("api_key.created"),
        )
        .await
        .unwrap();
    let k3 = store
        .create_api_key(
            &a,
            &v.id,
            "ci",
            "ak_3",
            "h3",
            &[],
            None,
            120,
            rec("api_key.created"),
        )
        .await
        .unwrap();
    assert_eq!(store.api_key_by_hash("h1").await.unwrap(), Some(k1.clone()));
    assert_eq!(store.api_key_by_hash("nope").await.unwrap(), None);
    assert_eq!(
        store.list_api_keys(&a, &u.id).await.unwrap(),
        vec![k1.clone()]
    );
    assert_eq!(
        store.list_api_keys(&b, &u.id).await.unwrap(),
        vec![k2.clone()]
    );
    assert_eq!(
        store.list_api_keys(&a, &v.id).await.unwrap(),
        vec![k3.clone()]
    );
    // A token hash is unique.
    assert!(
        store
            .create_api_key(
                &a,
                &u.id,
                "dup",
                "ak_1",
                "h1",
                &[],
                None,
                130,
                rec("api_key.created")
            )
            .await
            .is_err()
    );
    // Wrong workspace or wrong user: refused, key untouched.
    assert!(
        !store
            .revoke_api_key(&b, &u.id, &k1.id, 200, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .revoke_api_key(&a, &v.id, &k1.id, 200, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .revoke_api_key(&a, &u.id, "key_missing", 200, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .api_key_by_hash("h1")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    store.touch_api_key(&k1.id, 300).await.unwrap();
    assert_eq!(
        store
            .api_key_by_hash("h1")
            .await
            .unwrap()
            .unwrap()
            .last_used_at,
        Some(300)
    );
    assert!(
        store
            .revoke_api_key(&a, &u.id, &k1.id, 400, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    // Revoking again is a no-op (still true, time unchanged, not re-audited).
    assert!(
        store
            .revoke_api_key(&a, &u.id, &k1.id, 500, rec("api_key.revoked"))
            .await
            .unwrap()
    );
    let k1_now = store.api_key_by_hash("h1").await.unwrap().unwrap();
    assert_eq!(k1_now.revoked_at, Some(400));
    assert_eq!(
        store
            .api_key_by_hash("h2")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    assert_eq!(
        store
            .api_key_by_hash("h3")
            .await
            .unwrap()
            .unwrap()
            .revoked_at,
        None
    );
    let lines = store.audit_lines(&a).await.unwrap();
    assert_eq!(
        kinds(&lines),
        [
            "workspace.created",
            "member.added",
            "api_key.created",
            "api_key.created",
            "api_key.revoked"
        ]
    );
    let created = airlock_audit::from_json_line(&lines[2]).unwrap().event;
    assert_eq!(created.target.as_deref(), Some(k1.id.as_str()));
}
both!(iam_5_api_keys_are_scoped_to_workspace_and_user);

async fn iam_4_mfa_steps_and_recovery_codes_are_single_use(store: Store) {
    let u = store.create_user("u", None, 1).await.unwrap();
    let v = store.create_user("v", None, 1).await.unwrap();
    assert_eq!(store.mfa(&u.id).await.unwrap(), None);
    assert!(!store.mfa_use_step(&u.id, 5).await.unwrap(), "no factor");
    store.mfa_begin(&u.id, 100).await.unwrap();
    assert_eq!(
        store.mfa(&u.id).await.unwrap(),
        Some(MfaRecord {
            confirmed_at: None,
            last_step: None
        })
    );
    assert!(!store.mfa_use_step(&u.id, 5).await.unwrap(), "unconfirmed");
    let codes: Vec<String> = (0..10).map(|i| format!("code-{i}")).collect();
    assert!(store.mfa_confirm(&u.id, 10, &codes, 200).await.unwrap());
    assert!(
        !store.mfa_confirm(&u.id, 11, &codes, 201).await.unwrap(),
        "not pending"
    );
    assert!(
        !store.mfa_confirm(&v.id, 11, &codes, 201).await.unwrap(),
        "never begun"
    );
    assert_eq!(
        store.mfa(&u.id).await.unwrap(),
        Some(MfaRecord {
            confirmed_at: Some(200),
            last_step: Some(10)
        })
    );
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 10);
    // Steps only move forward: replay and older steps are refused.
    assert!(!store.mfa_use_step(&u.id, 10).await.unwrap());
    assert!(store.mfa_use_step(&u.id, 11).await.unwrap());
    assert!(!store.mfa_use_step(&u.id, 11).await.unwrap());
    assert!(!store.mfa_use_step(&u.id, 9).await.unwrap());
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (s, id) = (store.clone(), u.id.clone());
        tasks.push(tokio::spawn(async move {
            s.mfa_use_step(&id, 12).await.unwrap()
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += usize::from(t.await.unwrap());
    }
    assert_eq!(wins, 1, "one step, one use");
    assert_eq!(store.mfa(&u.id).await.unwrap().unwrap().last_step, Some(12));

    // Recovery codes.
    assert!(store.use_recovery_code(&u.id, "code-3", 300).await.unwrap());
    assert!(!store.use_recovery_code(&u.id, "code-3", 301).await.unwrap());
    assert!(!store.use_recovery_code(&u.id, "code-x", 301).await.unwrap());
    assert!(
        !store.use_recovery_code(&v.id, "code-4", 301).await.unwrap(),
        "not v's"
    );
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 9);
    // Re-enrolling discards the old codes and the confirmation.
    store.mfa_begin(&u.id, 400).await.unwrap();
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 0);
    assert_eq!(store.mfa(&u.id).await.unwrap().unwrap().confirmed_at, None);
    assert!(
        store
            .mfa_confirm(&u.id, 20, &codes[..2], 410)
            .await
            .unwrap()
    );
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 2);
    store.mfa_remove(&u.id).await.unwrap();
    assert_eq!(store.mfa(&u.id).await.unwrap(), None);
    assert_eq!(store.unused_recovery_codes(&u.id).await.unwrap(), 0);

    // Operator reset tokens: single use, and they expire.
    store
        .create_reset_token(&u.id, "r1", 100, 200)
        .await
        .unwrap();
    store
        .create_reset_token(&v.id, "r2", 100, 200)
        .await
        .unwrap();
    assert_eq!(store.consume_reset_token("nope", 150).await.unwrap(), None);
    assert_eq!(
        store.consume_reset_token("r1", 150).await.unwrap(),
        Some(u.id.clone())
    );
    assert_eq!(store.consume_reset_token("r1", 151).await.unwrap(), None);
    assert_eq!(
        store.consume_reset_token("r2", 200).await.unwrap(),
        None,
        "expired"
    );
    assert_eq!(
        store.consume_reset_token("r2", 199).await.unwrap(),
        Some(v.id.clone())
    );
}
both!(iam_4_mfa_steps_and_recovery_codes_are_single_use);

async fn iam_7_last_owner_is_counted_per_workspace(store: Store) {
    let alice = store.create_user("alice", None, 1).await.unwrap();
    let bob = store.create_user("bob", None, 1).await.unwrap();
    let carol = store.create_user("carol", None, 1).await.unwrap();
    let a = store.create_workspace("A", &alice.id, 10).await.unwrap();
    let b = store.create_workspace("B", &bob.id, 20).await.unwrap();
    // Alice is A's only owner; bob owns B (and is a viewer in A).
    store
        .set_member(&a, &bob.id, "viewer", 30, rec("member.added"))
        .await
        .unwrap();
    assert!(matches!(
        store
            .set_member(&a, &alice.id, "admin", 40, rec("member.role_changed"))
            .await,
        Err(StoreError::LastOwner)
    ));
    assert!(matches!(
        store
            .remove_member(&a, &alice.id, 50, rec("member.removed"))
            .await,
        Err(StoreError::LastOwner)
    ));
    // Nothing changed in A, and B's owner is untouched.
    assert_eq!(
        store.membership(&a, &alice.id).await.unwrap().unwrap().role,
        "owner"
    );
    assert_eq!(store.count_role(&a, "owner").await.unwrap(), 1);
    assert_eq!(
        store.membership(&b, &bob.id).await.unwrap().unwrap().role,
        "owner"
    );
    assert_eq!(
        kinds(&store.audit_lines(&a).await.unwrap()),
        ["workspace.created", "member.added"]
    );
    // With a second owner in A, alice can step down.
    store
        .set_member(&a, &carol.id, "owner", 60, rec("member.added"))
        .await
        .unwrap();
    store
        .set_member(&a, &alice.id, "admin", 70, rec("member.role_changed"))
        .await
        .unwrap();
    // Carol is now A's only owner again: B's owner does not count for A.
    assert!(matches!(
        store
            .remove_member(&a, &carol.id, 80, rec("member.removed"))
            .await,
        Err(StoreError::LastOwner)
    ));
    assert_eq!(store.count_role(&a, "owner").await.unwrap(), 1);
}
both!(iam_7_last_owner_is_counted_per_workspace);
