//! `GET /v1/runs` filters (worker, trigger, created time range) with
//! cursor paging under the same filter, on both backends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use common::*;
use serde_json::{Value, json};

fn ids(r: &Resp) -> Vec<String> {
    r.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

fn wall_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

async fn api_runs_filter_by_worker_trigger_and_time(db: Db) {
    let h = Harness::builder()
        .db(db)
        .worker("alpha", &HELLO.replace("\"hello\"", "\"alpha\""), ECHO)
        .worker("beta", &HELLO.replace("\"hello\"", "\"beta\""), ECHO)
        .build()
        .await;
    let owner = h.bootstrap_owner().await;
    let start = |w: &'static str| {
        let (h, owner) = (&h, owner.clone());
        async move {
            let r = h
                .call(
                    &owner,
                    "POST",
                    &format!("/v1/workers/{w}/runs"),
                    Some(json!({})),
                )
                .await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
            r.body["run"]["id"].as_str().unwrap().to_string()
        }
    };
    let a1 = start("alpha").await;
    let b1 = start("beta").await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mid = wall_ms();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let a2 = start("alpha").await;
    // A run started from a plan has the trigger `plan`.
    let r = h
        .call(
            &owner,
            "POST",
            "/v1/plans",
            Some(json!({"worker": "beta", "input": {}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let token = r.body["token"].clone();
    let r = h
        .call(
            &owner,
            "POST",
            "/v1/plans/run",
            Some(json!({ "token": token })),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let p = r.body["run"]["id"].as_str().unwrap().to_string();

    let get = |q: String| {
        let (h, owner) = (&h, owner.clone());
        async move {
            let r = h.call(&owner, "GET", &format!("/v1/runs?{q}"), None).await;
            assert_eq!(r.status, StatusCode::OK, "{q}: {}", r.body);
            r
        }
    };
    assert_eq!(
        ids(&get("worker=alpha".into()).await),
        [a2.as_str(), a1.as_str()]
    );
    assert_eq!(ids(&get("trigger=plan".into()).await), [p.as_str()]);
    assert_eq!(
        ids(&get("trigger=api&worker=beta".into()).await),
        [b1.as_str()]
    );
    assert_eq!(
        ids(&get(format!("since={mid}")).await),
        [p.as_str(), a2.as_str()]
    );
    assert_eq!(
        ids(&get(format!("until={mid}")).await),
        [b1.as_str(), a1.as_str()]
    );
    assert_eq!(
        ids(&get(format!("until={mid}&worker=alpha")).await),
        [a1.as_str()]
    );
    assert!(ids(&get("worker=nobody".into()).await).is_empty());
    // Paging keeps the filter: one alpha run a page, then the other, then none.
    let first = get("worker=alpha&limit=1".into()).await;
    assert_eq!(ids(&first), [a2.as_str()]);
    let cursor = first.body["next_cursor"].as_str().unwrap().to_string();
    let second = get(format!("worker=alpha&limit=1&cursor={cursor}")).await;
    assert_eq!(ids(&second), [a1.as_str()]);
    let cursor = second.body["next_cursor"].as_str().unwrap().to_string();
    let third = get(format!("worker=alpha&limit=1&cursor={cursor}")).await;
    assert!(ids(&third).is_empty());
    assert_eq!(third.body["next_cursor"], Value::Null);
    // Bad filters are the caller's error, named.
    for q in [
        "since=-1",
        "until=soon",
        &format!("worker={}", "w".repeat(65)),
    ] {
        let r = h.call(&owner, "GET", &format!("/v1/runs?{q}"), None).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{q}: {}", r.body);
        assert_eq!(r.body["error"]["code"], "invalid_query", "{q}: {}", r.body);
    }
}

on_both_backends!(api_runs_filter_by_worker_trigger_and_time);

#[tokio::test]
async fn the_openapi_document_describes_the_run_filters() {
    let h = Harness::new().await;
    let r = h.call(&Cred::None, "GET", "/v1/openapi.json", None).await;
    assert_eq!(r.status, StatusCode::OK);
    let params = r.body["paths"]["/v1/runs"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .clone();
    let named = |n: &str| {
        params
            .iter()
            .find(|p| p["name"] == n)
            .unwrap_or_else(|| panic!("no {n} parameter"))
            .clone()
    };
    assert_eq!(named("worker")["schema"]["maxLength"], 64);
    assert_eq!(named("trigger")["schema"]["maxLength"], 64);
    assert_eq!(named("since")["schema"]["minimum"], 0);
    assert_eq!(named("until")["schema"]["minimum"], 0);
}
