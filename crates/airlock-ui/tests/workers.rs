//! Handler tests of the workers pages (UI-1): the catalog, a worker's
//! page, and the run form generated from the manifest — controls per
//! type, typed conversion, errors beside fields with what was typed kept,
//! idempotency, permission, CSRF, prefill from an earlier run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use axum::http::StatusCode;
use serde_json::{Value, json};
use support::*;

/// A worker with one input of each kind the form generates, hostile text
/// in its title and descriptions, a secret, egress and a webhook.
const FORMY: &str = r#"
[worker]
id = "formy"
title = "<script>alert(1)</script> \"quoted\" & 'single'"
description = "Does <b>things</b> with \"quotes\" & <img/src=x/onerror=alert(1)>"
kind = "script"
entry = "run.sh"
runtime = "sh"

[inputs.name]
type = "string"
max_length = 100
description = "Who to greet <script>alert(2)</script>"

[inputs.notes]
type = "string"
required = false
description = "Free text"

[inputs.times]
type = "number"
default = 1
description = "How many times"

[inputs.shout]
type = "boolean"
default = false
description = "Loudly"

[inputs.ratio]
type = "number"
minimum = 0
maximum = 2.5
required = false
description = "A bounded number"

[inputs.colour]
type = "string"
enum = ["red", "green", "blue"]
default = "green"
description = "A colour"

[inputs.size]
type = "string"
enum = ["xs", "s", "m", "l", "xl", "xxl", "\u001b[31m<b>red</b>"]
required = false
description = "A size"

[inputs.level]
type = "number"
enum = [1, 2.5, 3]
default = 3
description = "A level"

[inputs.motto]
type = "string"
max_length = 50
default = "\u001b[1m<i>hi</i>"
description = "A default with an escape"

[inputs.doc]
type = "json"
required = false
description = "Any JSON"

[inputs.attachment]
type = "file"
required = false
description = "A file"

[outputs.greeting]
type = "string"
description = "The greeting"

[secrets]
names = ["API_TOKEN", "OTHER_TOKEN"]

[egress]
allow = ["api.example.com"]

[limits]
timeout_s = 30

[[triggers]]
kind = "manual"

[[triggers]]
kind = "webhook"
format = "github"
"#;

const PLAIN: &str = "[worker]\nid = \"plain\"\ntitle = \"Plain\"\ndescription = \"d\"\n\
                     kind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n";

/// A worker only a schedule starts.
const SCHEDULED: &str = "[worker]\nid = \"nightly\"\ntitle = \"Nightly\"\ndescription = \"d\"\n\
kind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n\
[[triggers]]\nkind = \"schedule\"\ncron = \"0 3 * * *\"\ntimezone = \"UTC\"\n";

/// A worker whose one input is a small required file.
const FILEY: &str = "[worker]\nid = \"filey\"\ntitle = \"Filey\"\ndescription = \"d\"\n\
kind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n\
[inputs.doc]\ntype = \"file\"\nmax_bytes = 8\n";

async fn harness() -> Harness {
    ui_with(&[
        ("formy", FORMY, ECHO),
        ("filey", FILEY, ECHO),
        ("plain", PLAIN, ECHO),
        ("nightly", SCHEDULED, ECHO),
    ])
    .await
}

async fn runs(h: &Harness, cred: &Cred) -> Vec<Value> {
    let r = h.call(cred, "GET", "/v1/runs", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    r.body["runs"].as_array().unwrap().clone()
}

/// The value of hidden field `name` in a page.
fn hidden(html: &str, name: &str) -> String {
    let marker = format!(r#"name="{name}" value=""#);
    html.split(&marker)
        .nth(1)
        .unwrap_or_else(|| panic!("no field {name}"))
        .split('"')
        .next()
        .unwrap()
        .to_string()
}

/// The minimal valid form for `formy`, with its token and a key.
fn formy_fields<'a>(key: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut f = vec![("_key", key), ("in.name", "Ada")];
    f.extend_from_slice(extra);
    f
}

fn assert_escaped(html: &str) {
    assert!(!html.contains("<script>alert"), "unescaped script");
    assert!(!html.contains("<img/src"), "unescaped img");
    assert!(!html.contains("<b>things"), "unescaped b");
    // A declared choice is sent back exactly as declared, so it may keep
    // an escape inside a `value` attribute (never shown); nowhere else.
    let shown: String = html
        .split("value=\"")
        .enumerate()
        .map(|(i, part)| {
            if i == 0 {
                part
            } else {
                part.split_once('"').map_or("", |p| p.1)
            }
        })
        .collect();
    assert!(
        !shown.contains('\u{1b}'),
        "a terminal escape reached the page"
    );
}

#[tokio::test]
async fn the_catalog_lists_workers_escaped() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = page(&h, &owner, "/workers").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    assert_escaped(&r.text);
    assert!(
        r.text
            .contains("&#60;script&#62;alert(1)&#60;/script&#62; &#34;quoted&#34;"),
        "{}",
        r.text
    );
    assert!(r.text.contains(r#"href="/workers/formy""#));
    assert!(r.text.contains(r#"href="/workers/nightly""#));
    assert!(r.text.contains("manual, webhook"));
    assert!(r.text.contains(r#"aria-current="page">Workers"#));
    assert!(r.text.contains(r#"href="/workers/formy/run""#));
    assert!(
        !r.text.contains(r#"href="/workers/nightly/run""#),
        "no form for a worker only a schedule starts"
    );
    // A viewer sees the catalog too.
    let viewer = h.member(&owner, "vera", "viewer").await;
    let r = page(&h, &viewer, "/workers").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains(r#"href="/workers/formy""#));
    assert!(!r.text.contains(r#"href="/workers/formy/run""#));
}

#[tokio::test]
async fn a_bundle_that_fails_to_load_is_shown_without_its_escapes() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    // A bundle that breaks after start, then a reload.
    let bad = "[worker]\nid = \"broken\"\ntitle = \"x\\u001b[31m<script>alert(3)</script>\"\n";
    let dir = h.dir.path().join("workers").join("broken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("worker.toml"), bad).unwrap();
    let r = h.call(&owner, "POST", "/v1/workers/reload", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert!(
        !r.body["errors"].as_array().unwrap().is_empty(),
        "{}",
        r.body
    );
    let r = page(&h, &owner, "/workers").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains("did not load"), "{}", r.text);
    assert!(r.text.contains(">broken<"), "{}", r.text);
    assert_escaped(&r.text);
    assert!(
        r.text.contains(r#"href="/workers/formy""#),
        "the others still listed"
    );
}

#[tokio::test]
async fn a_workers_page_shows_its_manifest_escaped() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = h
        .call(
            &owner,
            "PUT",
            "/v1/secrets/API_TOKEN",
            Some(json!({"value": "s3cr3t-value"})),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.body);
    let r = page(&h, &owner, "/workers/formy").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    assert_escaped(&r.text);
    let t = &r.text;
    assert!(
        t.contains("Who to greet &#60;script&#62;alert(2)&#60;/script&#62;"),
        "{t}"
    );
    // Secrets: names and whether they are set, never a value.
    assert!(
        t.contains("API_TOKEN</span> — <span class=\"secret-present\">"),
        "{t}"
    );
    assert!(
        t.contains("OTHER_TOKEN</span> — <span class=\"secret-missing\">"),
        "{t}"
    );
    assert!(!t.contains("s3cr3t-value"));
    assert!(t.contains("api.example.com"));
    assert!(t.contains("30.0 s"), "the time limit: {t}");
    assert!(t.contains("github signatures"));
    let ws = h.call(&owner, "GET", "/v1/workspaces", None).await;
    let ws_id = ws.body["workspaces"][0]["workspace_id"].as_str().unwrap();
    assert!(t.contains(&format!("/v1/hooks/{ws_id}/formy")), "{t}");
    assert!(t.contains(r#"id="run-form""#), "the owner gets the form");
    // Unknown worker: 404 page.
    let r = page(&h, &owner, "/workers/nope").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_page_headers(&r);
}

#[tokio::test]
async fn the_form_has_a_control_per_declared_type() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = page(&h, &owner, "/workers/formy/run").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_no_inline_code(&r.text);
    assert_escaped(&r.text);
    let t = &r.text;
    assert!(
        t.contains(r#"<input type="text" id="in-name" name="in.name" value="" maxlength="100" required aria-describedby="in-name-help">"#),
        "{t}"
    );
    assert!(t.contains(r#"<label for="in-name">name"#));
    assert!(t.contains(r#"id="in-name-help""#));
    assert!(
        t.contains(r#"<textarea id="in-notes" name="in.notes""#),
        "no max_length: a text area"
    );
    assert!(
        t.contains(r#"<input type="number" id="in-times" name="in.times" value="1" step="any""#),
        "{t}"
    );
    assert!(
        t.contains(r#"<input type="number" id="in-ratio" name="in.ratio" value="" step="any" inputmode="decimal" min="0" max="2.5""#),
        "{t}"
    );
    assert!(t.contains("(number, 0 to 2.5)"), "{t}");
    assert!(t.contains("default &#60;i&#62;hi&#60;/i&#62;)"), "{t}");
    assert!(
        t.contains(
            r#"<input type="checkbox" id="in-shout" name="in.shout" value="true" aria-describedby"#
        ),
        "unchecked by default: {t}"
    );
    // Three choices with a default: radios, the default chosen.
    assert!(
        t.contains(
            r#"<input type="radio" id="in-colour-2" name="in.colour" value="green" checked"#
        ),
        "{t}"
    );
    assert!(t.contains(r#"<label for="in-colour-2" class="inline">green</label>"#));
    // Six choices: a select with an empty choice (the input is optional).
    assert!(t.contains(r#"<select id="in-size" name="in.size""#), "{t}");
    assert!(t.contains(r#"<option value="xxl">xxl</option>"#));
    // A choice with a terminal escape and markup reads as plain text.
    assert!(t.contains(">&#60;b&#62;red&#60;/b&#62;</option>"), "{t}");
    assert!(t.contains(r#"<option value="">(not given)</option>"#));
    assert!(t.contains(r#"<textarea id="in-doc" name="in.doc" rows="8" class="json""#));
    // A file input: an enabled control, and the form sends files.
    assert!(
        t.contains(
            r#"<input type="file" id="in-attachment" name="in.attachment" aria-describedby"#
        ),
        "{t}"
    );
    assert!(t.contains(r#"enctype="multipart/form-data""#), "{t}");
    assert!(t.contains(r#"name="_key" value="ui-"#));
    // Each rendering has its own key.
    let again = page(&h, &owner, "/workers/formy/run").await;
    assert_ne!(hidden(&again.text, "_key"), hidden(t, "_key"));
}

#[tokio::test]
async fn sending_the_form_starts_a_typed_run_and_redirects_to_it() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let page_r = page(&h, &owner, "/workers/formy/run").await;
    let key = hidden(&page_r.text, "_key");
    let fields = formy_fields(
        &key,
        &[
            ("in.times", " 3 "),
            ("in.shout", "true"),
            ("in.colour", "blue"),
            ("in.size", ""),
            ("in.doc", r#"{"a": [1, 2.5]}"#),
            ("in.notes", ""),
            ("in.undeclared", "ignored"),
        ],
    );
    let r = form(&h, &owner, "/workers/formy/run", &fields).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let all = runs(&h, &owner).await;
    assert_eq!(all.len(), 1);
    let run = &all[0];
    assert_eq!(
        location(&r),
        format!("/runs/{}", run["id"].as_str().unwrap())
    );
    assert_eq!(run["trigger"], "ui");
    assert_eq!(
        run["input"],
        json!({"name": "Ada", "times": 3, "shout": true, "colour": "blue", "level": 3, "motto": "\u{1b}[1m<i>hi</i>", "doc": {"a": [1, 2.5]}})
    );
    // An unchecked box sends nothing: false. A decimal stays a number.
    let r = form(
        &h,
        &owner,
        "/workers/formy/run",
        &[("in.name", "Bo"), ("in.times", "2.5")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let all = runs(&h, &owner).await;
    assert_eq!(all.len(), 2);
    let newest = all.iter().find(|r| r["input"]["name"] == "Bo").unwrap();
    assert_eq!(newest["input"]["shout"], false);
    assert_eq!(newest["input"]["times"], 2.5);
    assert_eq!(newest["input"]["colour"], "green", "the default applies");
}

#[tokio::test]
async fn errors_are_shown_beside_fields_with_what_was_typed_kept() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    // A number that does not parse and JSON that does not: caught before
    // the service, nothing started.
    let r = form(
        &h,
        &owner,
        "/workers/formy/run",
        &[
            ("_key", "ui-abc"),
            ("in.name", "Ada <b>\"x\"</b>"),
            ("in.times", "three"),
            ("in.doc", "{not json"),
            ("in.shout", "true"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert_page_headers(&r);
    let t = &r.text;
    assert!(
        t.contains(r#"id="in-times-error">expected a number"#),
        "{t}"
    );
    assert!(
        t.contains(r#"aria-describedby="in-times-help in-times-error" aria-invalid="true""#),
        "{t}"
    );
    assert!(t.contains(r#"id="in-doc-error">not valid JSON"#), "{t}");
    assert!(t.contains(r#"value="three""#), "typed text kept: {t}");
    assert!(t.contains("{not json</textarea>"), "{t}");
    assert!(
        t.contains(r#"value="Ada &#60;b&#62;&#34;x&#34;&#60;/b&#62;""#),
        "{t}"
    );
    assert!(t.contains(r#"name="in.shout" value="true" checked"#), "{t}");
    assert!(
        t.contains(r#"name="_key" value="ui-abc""#),
        "the same key: {t}"
    );
    assert!(t.contains("role=\"alert\""));
    // The service's own check: a missing required input and an oversized
    // one, by field.
    let r = form(&h, &owner, "/workers/formy/run", &[("in.times", "4")]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(
        r.text
            .contains(r#"id="in-name-error">missing required input"#),
        "{}",
        r.text
    );
    assert!(r.text.contains(r#"value="4""#));
    let long = "x".repeat(101);
    let r = form(&h, &owner, "/workers/formy/run", &[("in.name", &long)]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains(r#"id="in-name-error">"#), "{}", r.text);
    assert!(r.text.contains(&long), "kept");
    // A number outside its bounds.
    let r = form(
        &h,
        &owner,
        "/workers/formy/run",
        &[("in.name", "Ada"), ("in.ratio", "7")],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(
        r.text
            .contains(r#"id="in-ratio-error">7 is above the maximum 2.5"#),
        "{}",
        r.text
    );
    // A value not among the choices.
    let r = form(
        &h,
        &owner,
        "/workers/formy/run",
        &[("in.name", "Ada"), ("in.colour", "mauve")],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains(r#"id="in-colour-error">"#), "{}", r.text);
    assert!(runs(&h, &owner).await.is_empty(), "nothing was started");
}

#[tokio::test]
async fn the_same_form_sent_twice_starts_one_run() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let key = hidden(&page(&h, &owner, "/workers/formy/run").await.text, "_key");
    let first = form(&h, &owner, "/workers/formy/run", &formy_fields(&key, &[])).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", first.text);
    let second = form(&h, &owner, "/workers/formy/run", &formy_fields(&key, &[])).await;
    assert_eq!(second.status, StatusCode::SEE_OTHER, "{}", second.text);
    assert_eq!(location(&first), location(&second));
    assert_eq!(runs(&h, &owner).await.len(), 1);
    // The same key with other values: refused, a fresh key offered.
    let r = form(
        &h,
        &owner,
        "/workers/formy/run",
        &formy_fields(&key, &[("in.times", "9")]),
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(r.text.contains("already sent"), "{}", r.text);
    let fresh = hidden(&r.text, "_key");
    assert_ne!(fresh, key);
    assert!(r.text.contains(r#"value="9""#));
    assert_eq!(runs(&h, &owner).await.len(), 1);
    let r = form(
        &h,
        &owner,
        "/workers/formy/run",
        &formy_fields(&fresh, &[("in.times", "9")]),
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(runs(&h, &owner).await.len(), 2);
}

#[tokio::test]
async fn a_viewer_sees_no_form_and_a_forged_one_is_refused() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let viewer = h.member(&owner, "vera", "viewer").await;
    let r = page(&h, &viewer, "/workers/formy").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(!r.text.contains(r#"id="run-form""#));
    assert!(r.text.contains("does not include starting runs"));
    assert!(
        r.text.contains("secret-unknown"),
        "a viewer cannot list secrets: {}",
        r.text
    );
    let r = page(&h, &viewer, "/workers/formy/run").await;
    assert!(!r.text.contains(r#"id="run-form""#));
    let r = form(&h, &viewer, "/workers/formy/run", &[("in.name", "Ada")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert_page_headers(&r);
    assert!(runs(&h, &owner).await.is_empty());
}

#[tokio::test]
async fn a_form_without_its_token_or_from_another_site_starts_nothing() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = form_raw(
        &h,
        &owner,
        "/workers/formy/run",
        &[("in.name", "Ada")],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert!(r.text.contains("Nothing was changed"), "{}", r.text);
    let (_, csrf) = owner.parts();
    let r = form_raw(
        &h,
        &owner,
        "/workers/formy/run",
        &[("_csrf", "stale-token"), ("in.name", "Ada")],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let r = form_raw(
        &h,
        &owner,
        "/workers/formy/run",
        &[("_csrf", &csrf), ("in.name", "Ada")],
        &[("sec-fetch-site", "cross-site")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert!(runs(&h, &owner).await.is_empty());
    // Signed out: a page saying nothing was done.
    let cookie_only = Cred::CookieOnly("airlock_session=gone".into());
    let r = form_raw(
        &h,
        &cookie_only,
        "/workers/formy/run",
        &[("_csrf", &csrf), ("in.name", "Ada")],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    assert!(runs(&h, &owner).await.is_empty());
}

#[tokio::test]
async fn edit_and_rerun_prefills_from_an_earlier_run() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let input = json!({"name": "Grace \"<H>\"", "level": 1, "times": 7, "shout": true, "colour": "red", "size": "xl", "doc": {"k": [1]}});
    let r = h
        .call(
            &owner,
            "POST",
            "/v1/workers/formy/runs",
            Some(json!({ "input": input })),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let run_id = r.body["run"]["id"].as_str().unwrap().to_string();
    let r = page(&h, &owner, &format!("/workers/formy/run?from={run_id}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let t = &r.text;
    assert!(t.contains(r#"value="Grace &#34;&#60;H&#62;&#34;""#), "{t}");
    assert!(t.contains(r#"name="in.times" value="7""#), "{t}");
    assert!(t.contains(r#"name="in.shout" value="true" checked"#), "{t}");
    assert!(t.contains(r#"value="red" checked"#), "{t}");
    assert!(t.contains(r#"<option value="xl" selected>"#), "{t}");
    assert!(t.contains(r#"name="in.level" value="1" checked"#), "{t}");
    assert!(t.contains("&#34;k&#34;"), "{t}");
    assert!(t.contains(&format!(r#"name="_from" value="{run_id}""#)));
    // Sending it starts a second run with the same input.
    let key = hidden(t, "_key");
    let r = form(
        &h,
        &owner,
        "/workers/formy/run",
        &[
            ("_key", key.as_str()),
            ("in.name", "Grace \"<H>\""),
            ("in.times", "7"),
            ("in.shout", "true"),
            ("in.colour", "red"),
            ("in.size", "xl"),
            ("in.level", "1"),
            ("in.doc", "{\"k\": [1]}"),
        ],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let all = runs(&h, &owner).await;
    assert_eq!(all.len(), 2);
    assert_eq!(all[0]["input"], all[1]["input"]);
    // A run of another worker, or an unknown one: 404.
    let r = h
        .call(
            &owner,
            "POST",
            "/v1/workers/plain/runs",
            Some(json!({"input": {}})),
        )
        .await;
    let plain_run = r.body["run"]["id"].as_str().unwrap().to_string();
    let r = page(&h, &owner, &format!("/workers/formy/run?from={plain_run}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = page(&h, &owner, "/workers/formy/run?from=run_doesnotexist").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

#[tokio::test]
async fn another_workspaces_run_is_not_found() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = h
        .call(
            &owner,
            "POST",
            "/v1/workers/formy/runs",
            Some(json!({"input": {"name": "Ada"}})),
        )
        .await;
    let run_id = r.body["run"]["id"].as_str().unwrap().to_string();
    // The same person, switched to a workspace of their own.
    let other = h.create_workspace(&owner, "elsewhere").await;
    let (cookie, _) = owner.parts();
    let there = Cred::CookieOnly(format!("{cookie}; airlock_ws={other}"));
    let r = page(&h, &there, &format!("/workers/formy/run?from={run_id}")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert!(!r.text.contains("Ada"));
    let r = page(&h, &there, "/workers").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.text.contains("/workers/formy"), "{}", r.text);
}

#[tokio::test]
async fn a_worker_without_a_manual_trigger_offers_no_form() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let r = page(&h, &owner, "/workers/nightly").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(!r.text.contains(r#"id="run-form""#));
    assert!(r.text.contains("0 3 * * * (UTC)"), "{}", r.text);
    let r = form(&h, &owner, "/workers/nightly/run", &[]).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(r.text.contains("Nothing was started"), "{}", r.text);
    assert!(runs(&h, &owner).await.is_empty());
}

#[tokio::test]
async fn recent_runs_of_the_worker_are_listed() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    for _ in 0..2 {
        let r = h
            .call(
                &owner,
                "POST",
                "/v1/workers/plain/runs",
                Some(json!({"input": {}})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    }
    let r = h
        .call(
            &owner,
            "POST",
            "/v1/workers/formy/runs",
            Some(json!({"input": {"name": "x"}})),
        )
        .await;
    let formy_run = r.body["run"]["id"].as_str().unwrap().to_string();
    let r = page(&h, &owner, "/workers/plain").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.text
            .matches(r#"<td data-label="Worker">plain</td>"#)
            .count(),
        2,
        "{}",
        r.text
    );
    assert!(!r.text.contains(&formy_run));
    assert!(r.text.contains("This worker takes no input."));
}

#[tokio::test]
async fn a_form_larger_than_the_limit_starts_nothing() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let huge = "x".repeat(2 << 20);
    let r = form(
        &h,
        &owner,
        "/workers/formy/run",
        &[("in.notes", &huge), ("in.name", "Ada")],
    )
    .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.text);
    assert_page_headers(&r);
    assert!(r.text.contains("larger than"), "{}", r.text);
    assert!(runs(&h, &owner).await.is_empty());
}

/// A `multipart/form-data` form as a browser sends it from the page:
/// `fields` in order (the page puts `_csrf` first), then `files` as
/// `(field, file name, content type, bytes)`.
async fn multipart_form(
    h: &Harness,
    cred: &Cred,
    path: &str,
    fields: &[(&str, &str)],
    files: &[(&str, &str, &str, &[u8])],
) -> Resp {
    const B: &str = "----airlockTestBoundary7MA4YWxk";
    let mut body = Vec::new();
    for (k, v) in fields {
        body.extend_from_slice(
            format!("--{B}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                .as_bytes(),
        );
    }
    for (k, name, ty, bytes) in files {
        body.extend_from_slice(
            format!(
                "--{B}\r\nContent-Disposition: form-data; name=\"{k}\"; filename=\"{name}\"\r\n\
                 Content-Type: {ty}\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{B}--\r\n").as_bytes());
    let mut b = axum::http::Request::builder()
        .method("POST")
        .uri(path)
        .header("host", HOST)
        .header("sec-fetch-site", "same-origin")
        .header("content-type", format!("multipart/form-data; boundary={B}"));
    let c = browser_cookies(cred);
    if !c.is_empty() {
        b = b.header("cookie", c);
    }
    h.send(b.body(axum::body::Body::from(body)).unwrap()).await
}

fn csrf_of(cred: &Cred) -> String {
    match cred {
        Cred::Session { csrf, .. } => csrf.clone(),
        _ => String::new(),
    }
}

#[tokio::test]
async fn a_file_chosen_in_the_form_is_uploaded_and_given_to_the_run() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let csrf = csrf_of(&owner);
    let page_r = page(&h, &owner, "/workers/formy/run").await;
    let key = hidden(&page_r.text, "_key");
    let r = multipart_form(
        &h,
        &owner,
        "/workers/formy/run",
        &[
            ("_csrf", &csrf),
            ("_key", &key),
            ("in.name", "Ada"),
            ("in.times", "2"),
        ],
        &[(
            "in.attachment",
            "note 100%.txt",
            "text/plain",
            b"hello from a file\n",
        )],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let all = runs(&h, &owner).await;
    assert_eq!(all.len(), 1);
    let run = &all[0];
    assert_eq!(
        location(&r),
        format!("/runs/{}", run["id"].as_str().unwrap())
    );
    assert_eq!(run["input"]["name"], "Ada");
    assert_eq!(run["input"]["times"], 2);
    let doc = &run["input"]["attachment"];
    assert_eq!(doc["name"], "note 100%.txt", "{doc}");
    assert_eq!(doc["size"], 18);
    assert_eq!(doc["sha256"].as_str().unwrap().len(), 64, "{doc}");
    // The upload is the owner's, with the bytes sent, as the API shows it.
    let id = doc["upload"].as_str().unwrap();
    let up = h
        .call(&owner, "GET", &format!("/v1/uploads/{id}"), None)
        .await;
    assert_eq!(up.status, StatusCode::OK, "{}", up.body);
    assert_eq!(up.body["upload"]["size"], 18);
    assert_eq!(up.body["upload"]["digest"], doc["sha256"]);
    let link = up.body["download_url"].as_str().unwrap();
    let content = h.call(&owner, "GET", link, None).await;
    assert_eq!(content.bytes, b"hello from a file\n");

    // The same form sent again (its file uploaded again): the same run.
    let again = multipart_form(
        &h,
        &owner,
        "/workers/formy/run",
        &[
            ("_csrf", &csrf),
            ("_key", &key),
            ("in.name", "Ada"),
            ("in.times", "2"),
        ],
        &[(
            "in.attachment",
            "note 100%.txt",
            "text/plain",
            b"hello from a file\n",
        )],
    )
    .await;
    assert_eq!(again.status, StatusCode::SEE_OTHER, "{}", again.text);
    assert_eq!(location(&again), location(&r));
    assert_eq!(runs(&h, &owner).await.len(), 1);
    // With another file under the same key: not the same request.
    let other = multipart_form(
        &h,
        &owner,
        "/workers/formy/run",
        &[
            ("_csrf", &csrf),
            ("_key", &key),
            ("in.name", "Ada"),
            ("in.times", "2"),
        ],
        &[(
            "in.attachment",
            "note 100%.txt",
            "text/plain",
            b"another file\n",
        )],
    )
    .await;
    assert_eq!(other.status, StatusCode::CONFLICT, "{}", other.text);
    assert_eq!(runs(&h, &owner).await.len(), 1);

    // No file chosen (a browser still sends an empty part): not given.
    let r = multipart_form(
        &h,
        &owner,
        "/workers/formy/run",
        &[("_csrf", &csrf), ("in.name", "Bo")],
        &[("in.attachment", "", "application/octet-stream", b"")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let all = runs(&h, &owner).await;
    let bo = all.iter().find(|r| r["input"]["name"] == "Bo").unwrap();
    assert!(bo["input"].get("attachment").is_none(), "{bo}");
}

#[tokio::test]
async fn a_file_over_its_limit_or_a_forged_multipart_form_starts_nothing() {
    let h = harness().await;
    let owner = h.bootstrap_owner().await;
    let csrf = csrf_of(&owner);
    // Larger than the input's max_bytes: the error is beside the field.
    let r = multipart_form(
        &h,
        &owner,
        "/workers/filey/run",
        &[("_csrf", &csrf)],
        &[("in.doc", "big.txt", "text/plain", b"123456789")],
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(
        r.text
            .contains("the file is larger than this input&#39;s limit of 8 bytes")
            || r.text
                .contains("the file is larger than this input's limit of 8 bytes")
            || r.text
                .contains("the file is larger than this input&#x27;s limit of 8 bytes"),
        "{}",
        r.text
    );
    // A required file left out: the service names the field.
    let r = multipart_form(&h, &owner, "/workers/filey/run", &[("_csrf", &csrf)], &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("missing required input"), "{}", r.text);
    // Without the token, with a stale one, or from another site: refused.
    let file: &[(&str, &str, &str, &[u8])] = &[("in.doc", "a.txt", "text/plain", b"ok")];
    let r = multipart_form(&h, &owner, "/workers/filey/run", &[], file).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let r = multipart_form(
        &h,
        &owner,
        "/workers/filey/run",
        &[("_csrf", "stale")],
        file,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    // The token after the file does not count: it must come first.
    let r = multipart_form(
        &h,
        &owner,
        "/workers/filey/run",
        &[("in.x", "y"), ("_csrf", &csrf)],
        file,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert!(runs(&h, &owner).await.is_empty());
    let me = h.store().user_by_name("owner").await.unwrap().unwrap().id;
    let uploads = h
        .store()
        .list_uploads(airlock_store::DEFAULT_WORKSPACE, &me, 500)
        .await
        .unwrap();
    assert!(uploads.is_empty(), "nothing was uploaded: {uploads:?}");
    // And the good one starts a run.
    let r = multipart_form(&h, &owner, "/workers/filey/run", &[("_csrf", &csrf)], file).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(runs(&h, &owner).await.len(), 1);
}
