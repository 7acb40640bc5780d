//! Agent transcripts and model profiles (AGT-1, AGT-2, DUR-2).

use std::time::Duration;

use airlock_store::*;
use serde_json::json;

use crate::{WS_B, kinds, new_run, rec, run_in};

async fn dur_2_transcript_items_are_fenced_ordered_and_answer_a_call_once(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let run = store.create_run(new_run("agent")).await.unwrap().run;
    let c = store
        .claim_run("n", Duration::from_secs(60), &run.id)
        .await
        .unwrap()
        .unwrap();
    let a = store
        .append_agent_item(&run.id, c.token, "prompt", None, &json!({"text": "hi"}))
        .await
        .unwrap()
        .unwrap();
    let b = store
        .append_agent_item(
            &run.id,
            c.token,
            "tool_result",
            Some("call_1"),
            &json!({"content": "ok"}),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((a, b), (1, 2));
    // The same call answered again is refused; nothing is written.
    assert_eq!(
        store
            .append_agent_item(
                &run.id,
                c.token,
                "tool_result",
                Some("call_1"),
                &json!({"content": "again"})
            )
            .await
            .unwrap(),
        Err(ItemRefusal::CallAnswered)
    );
    // A stale token writes nothing (control: the current one did).
    assert!(matches!(
        store
            .append_agent_item(&run.id, c.token + 1, "prompt", None, &json!({}))
            .await,
        Err(StoreError::StaleToken)
    ));
    let items = store.agent_items(DEFAULT_WORKSPACE, &run.id).await.unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].kind, "prompt");
    assert_eq!(items[1].call_id.as_deref(), Some("call_1"));
    assert_eq!(items[1].body, json!({"content": "ok"}));
    // Workspace-scoped: another workspace sees nothing of this run.
    assert!(store.agent_items(WS_B, &run.id).await.unwrap().is_empty());
    // A run of another workspace with its own items stays apart.
    let other = store.create_run(run_in(WS_B, "agent")).await.unwrap().run;
    let oc = store
        .claim_run("n", Duration::from_secs(60), &other.id)
        .await
        .unwrap()
        .unwrap();
    store
        .append_agent_item(
            &other.id,
            oc.token,
            "tool_result",
            Some("call_1"),
            &json!({"content": "b"}),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .agent_items(DEFAULT_WORKSPACE, &run.id)
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(
        store
            .agent_items(DEFAULT_WORKSPACE, &other.id)
            .await
            .unwrap()
            .is_empty()
    );
}
both!(dur_2_transcript_items_are_fenced_ordered_and_answer_a_call_once);

async fn agt_2_model_profiles_are_workspace_scoped_and_audited(store: Store) {
    store.ensure_workspace(WS_B, "b").await.unwrap();
    let body = json!({"format": "openai-chat", "channel": "openai", "model": "gpt-x"});
    store
        .put_model_profile(
            DEFAULT_WORKSPACE,
            "fast",
            &body,
            "usr_a",
            rec("model_profile.put"),
        )
        .await
        .unwrap();
    let other = json!({"format": "anthropic-messages", "channel": "anthropic", "model": "c"});
    store
        .put_model_profile(WS_B, "fast", &other, "usr_b", rec("model_profile.put"))
        .await
        .unwrap();
    let got = store
        .model_profile(DEFAULT_WORKSPACE, "fast")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.body, body);
    assert_eq!(got.updated_by, "usr_a");
    assert_eq!(
        store
            .model_profile(WS_B, "fast")
            .await
            .unwrap()
            .unwrap()
            .body,
        other
    );
    // Replacing keeps one row.
    let v2 = json!({"format": "openai-chat", "channel": "openai", "model": "gpt-y"});
    store
        .put_model_profile(
            DEFAULT_WORKSPACE,
            "fast",
            &v2,
            "usr_c",
            rec("model_profile.put"),
        )
        .await
        .unwrap();
    let list = store.list_model_profiles(DEFAULT_WORKSPACE).await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].body, v2);
    // Deleting in one workspace leaves the other's.
    assert!(
        store
            .delete_model_profile(DEFAULT_WORKSPACE, "fast", rec("model_profile.deleted"))
            .await
            .unwrap()
    );
    assert!(
        !store
            .delete_model_profile(DEFAULT_WORKSPACE, "fast", rec("model_profile.deleted"))
            .await
            .unwrap()
    );
    assert!(
        store
            .model_profile(DEFAULT_WORKSPACE, "fast")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(store.list_model_profiles(WS_B).await.unwrap().len(), 1);
    let k = kinds(&store.audit_lines(DEFAULT_WORKSPACE).await.unwrap());
    assert_eq!(
        k.iter().filter(|k| k.starts_with("model_profile.")).count(),
        3,
        "{k:?}"
    );
}
both!(agt_2_model_profiles_are_workspace_scoped_and_audited);
