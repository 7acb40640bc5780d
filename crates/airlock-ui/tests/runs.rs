//! Handler tests of the runs pages (UI-1, UI-2): the list with filters
//! and paging, a run's page (header, outputs, artifacts, the log with
//! hostile lines), the live log stream, artifact downloads, cancel.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use support::*;

const WS: &str = "ws_default";

fn manifest(id: &str) -> String {
    HELLO.replace("\"hello\"", &format!("\"{id}\""))
}

/// Starts a run of `worker` with `input` through the API; its id.
async fn start(h: &Harness, cred: &Cred, worker: &str, input: serde_json::Value) -> String {
    let r = h
        .call(
            cred,
            "POST",
            &format!("/v1/workers/{worker}/runs"),
            Some(json!({ "input": input })),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body["run"]["id"].as_str().unwrap().to_string()
}

/// Runs the executor until run `id` is over.
async fn finish(h: &Harness, id: &str) -> airlock_store::RunRecord {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let exec = tokio::spawn(h.svc.clone().run_executor(stop_rx));
    let mut waited = 0;
    let run = loop {
        let run = h.store().get_run(WS, id).await.unwrap().unwrap();
        if run.state.is_terminal() {
            break run;
        }
        waited += 1;
        assert!(waited < 400, "the run never ended: {run:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = stop_tx.send(true);
    let _ = exec.await;
    run
}

/// The hostile lines the workload writes.
const HOSTILE_OUT: &str =
    "plain line\n<script>alert(1)</script>\n\u{1b}[31mred\u{1b}[0m text\nabc\u{202e}cba\n";
const HOSTILE_ERR: &str = "oops on stderr\n";

/// A harness whose `pages` worker "runs" by writing log lines, outputs
/// and artifacts (a recording launcher: this test binary cannot be a
/// sandbox init).
async fn with_a_finished_run() -> (Harness, Cred, String) {
    let launcher = airlock_launch::RecordingLauncher::answering(|launch, controls| {
        let out = &launch
            .sandbox
            .mounts
            .iter()
            .find(|m| m.writable)
            .expect("the output mount")
            .source;
        let files: [(&str, &[u8]); 3] = [
            (
                "page.html",
                b"<html><body><script>alert(document.cookie)</script></body></html>",
            ),
            ("dot.png", b"\x89PNG\r\n\x1a\n0000"),
            (
                "result.json",
                br##"{"count": 3, "title": "<b>bold</b>", "report": "# Report\n\n- one\n- <script>x</script>\n"}"##,
            ),
        ];
        for (name, bytes) in files {
            std::fs::write(out.join(name), bytes).unwrap();
        }
        if let Some(tx) = &controls.live_output {
            use airlock_sandbox::output::Stream;
            tx.send((Stream::Stdout, HOSTILE_OUT.as_bytes().to_vec()))
                .unwrap();
            tx.send((Stream::Stderr, HOSTILE_ERR.as_bytes().to_vec()))
                .unwrap();
        }
        Ok(airlock_launch::Launched {
            result: airlock_launch::fake_result(Some(0), None),
            egress: None,
            notices: Vec::new(),
        })
    });
    let m = manifest("pages")
        + "\n[inputs.note]\ntype = \"string\"\n\n[outputs.count]\ntype = \"number\"\n\n[outputs.title]\ntype = \"string\"\n\n[outputs.report]\ntype = \"string\"\n";
    let h = Harness::builder()
        .ui(airlock_ui::router)
        .worker("pages", &m, ECHO)
        .launcher(Arc::new(launcher))
        .build()
        .await;
    let owner = h.bootstrap_owner().await;
    let id = start(&h, &owner, "pages", json!({"note": "it's <i>"})).await;
    let run = finish(&h, &id).await;
    assert_eq!(run.state.as_str(), "succeeded", "{run:?}");
    (h, owner, id)
}

#[tokio::test]
async fn the_runs_list_filters_pages_and_jumps_to_an_id() {
    let h = Harness::builder()
        .ui(airlock_ui::router)
        .worker("alpha", &manifest("alpha"), ECHO)
        .worker("beta", &manifest("beta"), ECHO)
        .build()
        .await;
    let owner = h.bootstrap_owner().await;
    let b = start(&h, &owner, "beta", json!({})).await;
    let mut alphas = Vec::new();
    for _ in 0..51 {
        alphas.push(start(&h, &owner, "alpha", json!({})).await);
    }
    let r = page(&h, &owner, "/runs").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    assert!(
        r.text.contains("data-refresh=\"/ui/runs/rows?\""),
        "{}",
        r.text
    );
    assert!(r.text.contains("data-active"), "queued runs refresh");
    assert!(r.text.contains("<th scope=\"col\">"));
    // 50 a page: the oldest (beta) is on the next one.
    assert!(r.text.contains(&alphas[50]));
    assert!(!r.text.contains(&b));
    assert!(r.text.contains("id=\"next-page\""));

    // Worker filter: only alpha runs, and the next link keeps the filter.
    let r = page(&h, &owner, "/runs?worker=alpha&state=queued").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.text.contains(&b));
    let next = r
        .text
        .split("id=\"next-page\"")
        .next()
        .unwrap()
        .rsplit("href=\"")
        .next()
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&")
        .replace("&#38;", "&");
    assert!(
        next.starts_with("/runs?state=queued&worker=alpha&cursor="),
        "{next}"
    );
    let r = page(&h, &owner, &next).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.text.contains(&alphas[0]),
        "the 51st alpha run is on page 2"
    );
    assert!(!r.text.contains(&b), "the filter holds on page 2");
    assert!(!r.text.contains("id=\"next-page\""));
    assert!(r.text.contains("id=\"first-page\""));
    // The selected filters stay in the form.
    assert!(r.text.contains(r#"<option value="queued" selected>"#));
    assert!(r.text.contains(r#"name="worker" value="alpha""#));

    // Trigger and time range.
    let r = page(&h, &owner, "/runs?trigger=schedule").await;
    assert!(r.text.contains("No run matches."), "{}", r.text);
    let r = page(&h, &owner, "/runs?until=2001-01-01T00%3A00").await;
    assert!(r.text.contains("No run matches."));
    let r = page(&h, &owner, "/runs?since=2001-01-01T00%3A00&worker=beta").await;
    assert!(r.text.contains(&b));
    assert!(r.text.contains(r#"value="2001-01-01T00:00""#));

    // Bad filters: a clear message, what was typed kept, nothing listed.
    for q in ["state=bogus", "since=yesterday", "until=2026-13-01T00%3A00"] {
        let r = page(&h, &owner, &format!("/runs?{q}&worker=%3Cscript%3E")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{q}");
        assert!(r.text.contains("role=\"alert\""), "{q}");
        assert!(r.text.contains("&#60;script&#62;"), "{q}");
        assert!(!r.text.contains("<script>"), "{q}");
    }

    // An exact id jumps to the run; an unknown one says so.
    let r = page(&h, &owner, &format!("/runs?id={b}")).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(location(&r), format!("/runs/{b}"));
    let r = page(&h, &owner, "/runs?id=run_nope%3Cx%3E").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.text.contains("No run has the id"));
    assert!(!r.text.contains("nope<x>"));

    // The fragment refreshes the same filtered rows.
    let r = page(&h, &owner, "/ui/runs/rows?worker=beta").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains(&b) && !r.text.contains(&alphas[0]));
    assert!(r.text.contains("data-active"));
    assert!(!r.text.contains("<html"));
    let r = page(&h, &owner, "/ui/runs/rows?state=bogus").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    // Signed out: to sign in, and back.
    let r = page(&h, &Cred::None, "/runs?worker=alpha").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert!(location(&r).starts_with("/sign-in?next="));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_runs_page_shows_outputs_artifacts_and_an_escaped_log() {
    let (h, owner, id) = with_a_finished_run().await;
    let r = page(&h, &owner, &format!("/runs/{id}")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_page_headers(&r);
    assert_no_inline_code(&r.text);
    let t = &r.text;
    assert!(t.contains(r#"<span id="run-state" class="state state-succeeded">succeeded</span>"#));
    assert!(t.contains("exit code 0"));
    // The input, escaped.
    assert!(t.contains("it&#39;s &#60;i&#62;"), "{t}");
    // Outputs: scalars as text, Markdown rendered safely.
    assert!(t.contains("<dt>count</dt>"));
    assert!(t.contains("&#60;b&#62;bold&#60;/b&#62;"), "{t}");
    assert!(t.contains("<h3>Report</h3>"), "{t}");
    assert!(t.contains("<li>&lt;script&gt;x&lt;/script&gt;"), "{t}");
    // Artifacts, linked to the interface's download route.
    assert!(t.contains(&format!("href=\"/runs/{id}/artifacts/page.html\"")));
    // The log: a static one (the run is over), every line escaped, no
    // escape sequences or bidi overrides left.
    assert!(
        t.contains(r#"id="log" class="log" role="log" aria-live="polite""#),
        "{t}"
    );
    assert!(
        !t.contains("data-stream="),
        "a finished run has no live stream"
    );
    assert!(t.contains(r#"<div class="line stdout" data-s="stdout">&#60;script&#62;alert(1)&#60;/script&#62;</div>"#), "{t}");
    assert!(
        t.contains(r#"<div class="line stdout" data-s="stdout">red text</div>"#),
        "{t}"
    );
    assert!(
        t.contains(r#"<div class="line stdout" data-s="stdout">abccba</div>"#),
        "{t}"
    );
    assert!(
        t.contains(r#"<div class="line stderr" data-s="stderr">oops on stderr</div>"#),
        "{t}"
    );
    assert!(!t.contains('\u{1b}') && !t.contains('\u{202e}'));
    assert!(!t.contains("<script>alert"));
    assert!(t.contains(&format!("href=\"/runs/{id}/log.txt\"")));
    assert!(
        t.contains("id=\"log-follow\"")
            && t.contains("id=\"log-filter\"")
            && t.contains("id=\"log-search\"")
    );
    // Containment of the fake: uncontained, said plainly.
    assert!(t.contains("Driver <strong>uncontained</strong>"), "{t}");
    // The owner may re-run; nothing to cancel any more.
    assert!(t.contains(&format!("/workers/pages/run?from={id}")));
    assert!(!t.contains("id=\"cancel-run\""));
    // Copy as curl / CLI: the input shell-quoted (its `'` closed and escaped).
    assert!(t.contains("id=\"cmd-curl\"") && t.contains("data-copy=\"#cmd-cli\""));
    assert!(
        t.contains(r#"airlock run --remote &#39;pages&#39; --input &#39;{&#34;note&#34;:&#34;it&#39;\&#39;&#39;s &#60;i&#62;&#34;}&#39;"#),
        "{t}"
    );
    assert!(t.contains("http://airlock.test/v1/workers/pages/runs"));

    // The full log as text.
    let r = page(&h, &owner, &format!("/runs/{id}/log.txt")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    assert_eq!(r.headers["x-content-type-options"], "nosniff");
    assert!(r.text.contains("<script>alert(1)</script>") && r.text.contains("red text"));
    assert!(!r.text.contains('\u{1b}'));

    // Another workspace's member gets 404 for this run, everywhere.
    let other = h.member(&owner, "carol", "viewer").await;
    let ws2 = h.create_workspace(&other, "elsewhere").await;
    let cookie = match &other {
        Cred::Session { cookie, csrf } => Cred::Session {
            cookie: format!("{cookie}; airlock_ws={ws2}"),
            csrf: csrf.clone(),
        },
        c => c.clone(),
    };
    for path in [
        format!("/runs/{id}"),
        format!("/runs/{id}/log.txt"),
        format!("/runs/{id}/stream"),
        format!("/runs/{id}/artifacts/dot.png"),
    ] {
        let r = page(&h, &cookie, &path).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
    }
    let r = page(&h, &owner, "/runs/run_missing").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_of_a_finished_run_sends_its_lines_then_end() {
    let (h, owner, id) = with_a_finished_run().await;
    let r = page(&h, &owner, &format!("/runs/{id}/stream")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let t = &r.text;
    assert!(
        t.contains("event: line\ndata: {\"s\":\"stdout\",\"t\":\"plain line\"}"),
        "{t}"
    );
    assert!(
        t.contains(r#"{"s":"stdout","t":"<script>alert(1)</script>"}"#),
        "{t}"
    );
    assert!(t.contains(r#"{"s":"stdout","t":"red text"}"#), "{t}");
    assert!(t.contains(r#"{"s":"stderr","t":"oops on stderr"}"#), "{t}");
    assert!(
        t.contains("event: state\ndata: {\"state\":\"succeeded\"}"),
        "{t}"
    );
    assert!(t.trim_end().ends_with("event: end\ndata: {}"), "{t}");
    assert!(!t.contains('\u{1b}'));
    assert!(t.contains("\nid: "), "{t}");
    // Resuming after the last event sends only the end.
    let last: i64 = t
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .next_back()
        .unwrap()
        .parse()
        .unwrap();
    let r = page(&h, &owner, &format!("/runs/{id}/stream?after={last}")).await;
    assert!(!r.text.contains("event: line"), "{}", r.text);
    assert!(r.text.contains("event: end"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn artifacts_download_as_inert_attachments() {
    let (h, owner, id) = with_a_finished_run().await;
    let r = page(&h, &owner, &format!("/runs/{id}/artifacts/page.html")).await;
    assert_eq!(r.status, StatusCode::OK);
    let ct = r.headers["content-type"].to_str().unwrap();
    assert!(!ct.contains("html"), "{ct}");
    assert!(
        ct == "application/octet-stream" || ct.starts_with("text/plain"),
        "{ct}"
    );
    assert_eq!(r.headers["x-content-type-options"], "nosniff");
    assert_eq!(
        r.headers["content-disposition"],
        "attachment; filename=\"page.html\""
    );
    assert!(
        r.text.contains("alert(document.cookie)"),
        "the bytes as written"
    );
    let r = page(&h, &owner, &format!("/runs/{id}/artifacts/dot.png")).await;
    assert_eq!(r.headers["content-type"], "image/png");
    assert!(
        r.headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment")
    );
    let r = page(&h, &owner, &format!("/runs/{id}/artifacts/missing.txt")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = page(
        &h,
        &owner,
        &format!("/runs/{id}/artifacts/..%2F..%2Fetc%2Fpasswd"),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_viewer_cannot_cancel_and_an_owner_cancels_after_confirming() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    let viewer = h.member(&owner, "val", "viewer").await;
    let id = start(&h, &owner, "hello", json!({})).await;

    // The viewer sees the run but no cancel button; a forged form is refused.
    let r = page(&h, &viewer, &format!("/runs/{id}")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.text.contains("id=\"cancel-run\""));
    assert!(!r.text.contains("id=\"rerun\""));
    assert!(
        r.text.contains("data-stream=\""),
        "a queued run's log is live"
    );
    assert!(r.text.contains("data-reload-on-end=\"yes\""));
    for fields in [&[("confirm", "yes")][..], &[][..]] {
        let r = form(&h, &viewer, &format!("/runs/{id}/cancel"), fields).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    }
    let run = h.store().get_run(WS, &id).await.unwrap().unwrap();
    assert_eq!(run.state.as_str(), "queued");
    assert!(!run.cancel_requested);

    // The owner: a button; without confirmation a page that asks.
    let r = page(&h, &owner, &format!("/runs/{id}")).await;
    assert!(r.text.contains("id=\"cancel-run\""));
    assert!(r.text.contains("data-confirm="));
    let r = form(&h, &owner, &format!("/runs/{id}/cancel"), &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.text.contains("id=\"confirm-cancel\""));
    assert!(r.text.contains(r#"name="confirm" value="yes""#));
    let run = h.store().get_run(WS, &id).await.unwrap().unwrap();
    assert_eq!(run.state.as_str(), "queued", "asking cancels nothing");

    // Without the CSRF token: refused, nothing done.
    let r = form_raw(
        &h,
        &owner,
        &format!("/runs/{id}/cancel"),
        &[("confirm", "yes")],
        &[("sec-fetch-site", "same-origin")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        h.store()
            .get_run(WS, &id)
            .await
            .unwrap()
            .unwrap()
            .state
            .as_str(),
        "queued"
    );

    let r = form(
        &h,
        &owner,
        &format!("/runs/{id}/cancel"),
        &[("confirm", "yes")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(location(&r), format!("/runs/{id}"));
    let run = h.store().get_run(WS, &id).await.unwrap().unwrap();
    assert_eq!(run.state.as_str(), "cancelled");
    let r = page(&h, &owner, &format!("/runs/{id}")).await;
    assert!(r.text.contains("state-cancelled"));
    assert!(!r.text.contains("id=\"cancel-run\""));
    assert!(!r.text.contains("data-stream="));

    // A run id that is not in this workspace: 404.
    let r = form(
        &h,
        &owner,
        "/runs/run_elsewhere/cancel",
        &[("confirm", "yes")],
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

#[test]
fn shell_words_survive_quotes() {
    assert_eq!(airlock_ui::runs::shell_quote("it's"), r"'it'\''s'");
    assert_eq!(airlock_ui::runs::shell_quote("$HOME"), "'$HOME'");
}

#[test]
fn markdown_is_recognised_and_log_chunks_become_clean_lines() {
    use airlock_ui::runs::{LogLine, event_lines, looks_like_markdown};
    assert!(looks_like_markdown("# Title\n\ntext"));
    assert!(looks_like_markdown("intro\n- a\n- b"));
    assert!(looks_like_markdown("steps\n1. one\n2. two"));
    assert!(!looks_like_markdown("# not markdown on one line"));
    assert!(!looks_like_markdown("just\ntwo lines"));
    let e = airlock_protocol::runs::RunEvent {
        seq: 1,
        at: 0,
        kind: "log".into(),
        data: json!({"stream": "stderr", "text": "a\u{1b}[1mb\u{1b}[0m\r\n\u{2066}c\n"}),
    };
    assert_eq!(
        event_lines(&e),
        vec![
            LogLine {
                s: "stderr",
                t: "ab".into()
            },
            LogLine {
                s: "stderr",
                t: "c".into()
            }
        ]
    );
    let e = airlock_protocol::runs::RunEvent {
        seq: 2,
        at: 0,
        kind: "finish".into(),
        data: json!({"state": "failed"}),
    };
    assert_eq!(event_lines(&e)[0].s, "meta");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_log_is_capped_on_the_page_and_whole_in_the_download() {
    let launcher = airlock_launch::RecordingLauncher::answering(|_, controls| {
        if let Some(tx) = &controls.live_output {
            use airlock_sandbox::output::Stream;
            for chunk in 0..1200 {
                let text: String = (0..5).map(|k| format!("L{}|\n", chunk * 5 + k)).collect();
                tx.send((Stream::Stdout, text.into_bytes())).unwrap();
            }
        }
        Ok(airlock_launch::Launched {
            result: airlock_launch::fake_result(Some(0), None),
            egress: None,
            notices: Vec::new(),
        })
    });
    let h = Harness::builder()
        .ui(airlock_ui::router)
        .launcher(Arc::new(launcher))
        .build()
        .await;
    let owner = h.bootstrap_owner().await;
    let id = start(&h, &owner, "hello", json!({})).await;
    assert_eq!(finish(&h, &id).await.state.as_str(), "succeeded");
    let r = page(&h, &owner, &format!("/runs/{id}")).await;
    assert_eq!(r.status, StatusCode::OK);
    let t = &r.text;
    assert_eq!(
        t.matches("<div class=\"line ").count(),
        airlock_ui::runs::LOG_CAP
    );
    assert!(t.contains("L5999|") && !t.contains(">L0|<") && !t.contains(">L999|<"));
    assert!(
        t.contains(">L1000|<") || t.contains(">L1001|<"),
        "the tail, in order"
    );
    assert!(t.find(">L5000|<").unwrap() < t.find(">L5999|<").unwrap());
    assert!(
        t.contains(r#"<p id="log-omitted" class="muted" role="status">"#),
        "{t}"
    );
    let r = page(&h, &owner, &format!("/runs/{id}/log.txt")).await;
    assert!(r.text.contains("L0|\n") && r.text.contains("L5999|\n"));
    assert_eq!(r.text.lines().count(), 6000);
}

/// A run of `hello` left `unknown` by the reaper (its holder died after
/// the workload started).
async fn unknown_run(h: &Harness, cred: &Cred) -> String {
    let id = start(h, cred, "hello", json!({})).await;
    let store = h.store();
    let claim = store
        .claim_run("node-dead:1", Duration::from_secs(30), &id)
        .await
        .unwrap()
        .unwrap();
    store.mark_workload_started(&id, claim.token).await.unwrap();
    store.expire_lease(&id, "node-dead:1").await.unwrap();
    store.reap_expired(&|_| false).await.unwrap();
    assert_eq!(
        store
            .get_run(WS, &id)
            .await
            .unwrap()
            .unwrap()
            .state
            .as_str(),
        "unknown"
    );
    id
}

/// DUR-2 on the run page: an `unknown` run offers Retry and Resolve to a
/// member who may settle it, not to a viewer, whose forged forms are
/// refused; the owner's forms settle it (the service's rules: a resolve
/// needs a reason, and only `unknown` runs are settled).
#[tokio::test]
async fn an_unknown_run_is_retried_or_resolved_from_its_page() {
    let h = ui().await;
    let owner = h.bootstrap_owner().await;
    let viewer = h.member(&owner, "val", "viewer").await;
    let a = unknown_run(&h, &owner).await;
    let b = unknown_run(&h, &owner).await;

    let r = page(&h, &viewer, &format!("/runs/{a}")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(!r.text.contains("id=\"retry-run\""));
    assert!(!r.text.contains("id=\"resolve-run\""));
    let r = form(&h, &viewer, &format!("/runs/{a}/retry"), &[]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let r = form(
        &h,
        &viewer,
        &format!("/runs/{a}/resolve"),
        &[("outcome", "succeeded"), ("reason", "v")],
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let state = |id: String| {
        let store = h.store().clone();
        async move {
            store
                .get_run(WS, &id)
                .await
                .unwrap()
                .unwrap()
                .state
                .as_str()
                .to_string()
        }
    };
    assert_eq!(state(a.clone()).await, "unknown");

    // The owner: both buttons.
    let r = page(&h, &owner, &format!("/runs/{a}")).await;
    assert!(r.text.contains("id=\"retry-run\""), "{}", r.text);
    assert!(r.text.contains("id=\"resolve-run\""));
    // A resolve without a reason changes nothing.
    let r = form(
        &h,
        &owner,
        &format!("/runs/{a}/resolve"),
        &[("outcome", "failed"), ("reason", "")],
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    assert_eq!(state(a.clone()).await, "unknown");
    let r = form(
        &h,
        &owner,
        &format!("/runs/{a}/resolve"),
        &[("outcome", "failed"), ("reason", "checked by hand")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(state(a.clone()).await, "failed");
    let r = page(&h, &owner, &format!("/runs/{a}")).await;
    assert!(
        !r.text.contains("id=\"resolve-run\""),
        "settled: no buttons"
    );
    let r = form(
        &h,
        &owner,
        &format!("/runs/{b}/retry"),
        &[("reason", "again")],
    )
    .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(state(b.clone()).await, "queued");
}
