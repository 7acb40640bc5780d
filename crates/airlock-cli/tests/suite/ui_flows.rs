//! Agent runs, approvals, the emergency stop and a Viewer's limits in the
//! real headless Chromium (UI-1, UI-2, AGT-5, AGT-6, IAM-3), against the
//! real `airlock up` with the scripted model server and real sandboxes.
//! Like the flows of `ui_browser`, each ends with zero CSP reports in the
//! server's log and zero axe-core WCAG 2 A/AA violations on the pages it
//! checked (both themes, 1280 and 375 px; screenshots in
//! `target/ui-screenshots/`).
//!
//! Who decides: the service refuses self-approval (the member who started
//! a run does not approve its requests unless the workspace allows it), so
//! the owner starts each run with an API key and a second member, added
//! on the members page, decides in the browser.

use std::time::{Duration, Instant};

use airlock_modeltest::{Step, call};
use serde_json::{Value, json};

use crate::suite::agents::{Model, agent_worker, put_profile};
use crate::suite::browser::HANG_GUARD;
use crate::suite::runs::{ALL_SCOPES, OWNER_PASSWORD, count_procs};
use crate::suite::support::{Who, sleep_marker};
use crate::suite::ui_browser::{OWNER, Ui};

/// Lets the server reach the scripted model on loopback.
const MODEL_ENV: (&str, &str) = ("AIRLOCK_MODEL_ALLOW_PRIVATE", "127.0.0.1/32");
/// The password every added member sets.
const MEMBER_PASSWORD: &str = "another correct horse staple";

/// A flow with an agent worker `agent` (`run_command` and `finish`, every
/// state-changing action waiting for a person) whose model is `model`.
fn agent_ui(flow: &'static str, model: &Model) -> Option<Ui> {
    Ui::start_prepared(
        flow,
        |env| {
            agent_worker(env, &["run_command", "finish"], "ask-writes", "");
            put_profile(env, model, "");
        },
        &[MODEL_ENV],
    )
}

/// An API key of the owner with every permission (the owner must exist).
fn owner_key(ui: &Ui) -> String {
    let (c, cookie, csrf) = ui.server.login(OWNER, OWNER_PASSWORD);
    assert_eq!(c, 201, "owner sign-in over the API");
    let (c, v) = ui.server.json(
        "POST",
        "/v1/keys",
        Some(&format!(r#"{{"name": "flows", "scopes": {ALL_SCOPES}}}"#)),
        &[("cookie", &cookie), ("x-csrf-token", &csrf)],
    );
    assert_eq!(c, 201, "{v}");
    v["key"].as_str().unwrap().to_string()
}

/// An API request with `key`.
fn api(ui: &Ui, key: &str, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let auth = format!("Bearer {key}");
    ui.server
        .json(method, path, body, &[("authorization", auth.as_str())])
}

/// The signed-in owner adds `username` with `role` on the members page;
/// the new member sets a password with the one-time token shown there.
fn add_member(ui: &Ui, username: &str, role: &str) {
    ui.open("/members");
    let form = "section[aria-labelledby='add-h'] form";
    ui.b.fill(&format!("{form} #member-username"), username);
    ui.b.select(&format!("{form} #member-role"), role);
    ui.b.submit(form);
    ui.b.wait_for("#setup-token");
    let token = ui.b.text("#setup-token").trim().to_string();
    assert!(!token.is_empty(), "no set-password token shown");
    // (No page takes the token: the new member uses the API.)
    let (c, body) = ui.server.request(
        "POST",
        "/v1/password/reset",
        Some(&json!({"token": token, "new_password": MEMBER_PASSWORD}).to_string()),
        &[],
    );
    assert_eq!(c, 204, "{body}");
}

/// Starts a run of `agent` as the owner (with the owner's key); its id.
fn start_run(ui: &Ui, key: &str) -> String {
    let (c, v) = api(
        ui,
        key,
        "POST",
        "/v1/workers/agent/runs",
        Some(r#"{"input": {}}"#),
    );
    assert_eq!(c, 201, "{v}");
    v["run"]["id"].as_str().unwrap().to_string()
}

/// The pending approval of `run`, once it appears.
fn pending(ui: &Ui, key: &str, run: &str) -> Value {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let (_, v) = api(
            ui,
            key,
            "GET",
            &format!("/v1/approvals?state=pending&run={run}"),
            None,
        );
        if let Some(a) = v["approvals"].as_array().and_then(|a| a.first()) {
            return a.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no approval request for {run}: {v}; run: {}",
            api(ui, key, "GET", &format!("/v1/runs/{run}"), None).1
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_of(ui: &Ui, key: &str, run: &str) -> Value {
    api(ui, key, "GET", &format!("/v1/runs/{run}"), None).1["run"].clone()
}

/// Waits until `run` is in one of `want` (hang guard); the state reached.
fn wait_state(ui: &Ui, key: &str, run: &str, want: &[&str]) -> String {
    let deadline = Instant::now() + HANG_GUARD;
    loop {
        let s = run_of(ui, key, run)["state"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if want.contains(&s.as_str()) {
            return s;
        }
        assert!(Instant::now() < deadline, "run {run} stuck in {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn actions(ui: &Ui, key: &str, run: &str) -> Vec<Value> {
    let (c, v) = api(ui, key, "GET", &format!("/v1/runs/{run}/actions"), None);
    assert_eq!(c, 200, "{v}");
    v["actions"].as_array().cloned().unwrap_or_default()
}

/// On a run's page, waits until `#run-state` reads `state` (the page
/// follows the run live and reloads itself when it ends).
fn wait_run_page(ui: &Ui, state: &str) {
    ui.b.wait_until(
        &format!("the run page shows {state}"),
        &format!(
            "document.readyState === 'complete' && document.getElementById('run-state') && \
             document.getElementById('run-state').textContent.trim() === '{state}'"
        ),
    );
}

/// Signs the owner out of the browser and `username` in.
fn switch_to(ui: &Ui, username: &str) {
    ui.sign_out();
    ui.sign_in(username, MEMBER_PASSWORD, None);
}

/// The inbox of `who` lists `approval` with the nav badge counting one;
/// checks the inbox, opens the request, checks it shows the payload in
/// full and its hash, and checks the page.
fn open_from_inbox(ui: &Ui, approval: &Value) {
    let id = approval["id"].as_str().unwrap();
    ui.open("/approvals");
    assert_eq!(
        ui.b.text("#badge-approvals").trim(),
        "1",
        "the nav badge counts the pending request"
    );
    let link = format!("a[href='/approvals/{id}']");
    assert!(ui.b.exists(&link), "the inbox does not list {id}");
    ui.capture("approvals");
    ui.b.click_and_load(&link);
    ui.assert_at(&format!("/approvals/{id}"));
    assert_eq!(ui.b.text("#approval-state").trim(), "pending");
    let shown: Value = serde_json::from_str(&ui.b.text("#payload"))
        .unwrap_or_else(|e| panic!("#payload is not JSON ({e}): {}", ui.b.text("#payload")));
    assert_eq!(
        shown, approval["payload"],
        "the page shows the full payload"
    );
    assert_eq!(
        ui.b.text("#payload-hash").trim(),
        approval["payload_hash"].as_str().unwrap(),
        "the page shows the payload's hash"
    );
    ui.capture("approval");
}

/// A run whose command needs approval; the owner started it, a second
/// member (a Human Assistant) opens it from the inbox, sees exactly what
/// would run, approves with a note, and the run completes.
#[test]
fn ui_an_agent_run_asks_for_approval_and_is_approved_from_the_inbox() {
    let model = Model::start(vec![
        Step::calls(vec![call(
            "c1",
            "run_command",
            r#"{"argv": ["sh", "-c", "echo approved-and-ran"]}"#,
        )]),
        Step::calls(vec![call("f", "finish", "{}")]),
    ]);
    let Some(ui) = agent_ui("approve", &model) else {
        return;
    };
    ui.signed_in_owner();
    let key = owner_key(&ui);
    add_member(&ui, "reviewer", "human_assistant");
    let run = start_run(&ui, &key);
    let a = pending(&ui, &key, &run);
    assert_eq!(a["payload"]["tool"], "run_command", "{a}");
    let id = a["id"].as_str().unwrap().to_string();
    switch_to(&ui, "reviewer");
    open_from_inbox(&ui, &a);

    ui.b.fill("#note", "checked: it only echoes");
    ui.b.click_and_load("#approve");
    ui.assert_at(&format!("/approvals/{id}"));
    let state = ui.b.text("#approval-state");
    assert!(
        ["approved", "consumed"].contains(&state.trim()),
        "after approving, the request is {state}"
    );
    ui.open(&format!("/runs/{run}"));
    wait_run_page(&ui, "succeeded");
    assert_eq!(wait_state(&ui, &key, &run, &["succeeded"]), "succeeded");
    // What was approved ran, once, and the decision kept its note and
    // its author.
    let acts = actions(&ui, &key, &run);
    assert_eq!(acts[0]["state"], "completed", "{acts:?}");
    let result = &model.results(1)[0];
    assert!(result.contains("approved-and-ran"), "{result}");
    let (_, d) = api(&ui, &key, "GET", &format!("/v1/approvals/{id}"), None);
    assert_eq!(d["note"], "checked: it only echoes", "{d}");
    assert_ne!(d["decided_by"], d["run_actor"], "{d}");
    assert_eq!(model.server.violations(), Vec::<String>::new());
    ui.capture("run");
    ui.finish();
}

/// The same request rejected with a note: the command never runs, the
/// model is told, and the run goes on to its end (the agent finishes
/// without it).
#[test]
fn ui_a_rejected_action_ends_the_run_without_running_it() {
    let model = Model::start(vec![
        Step::calls(vec![call(
            "c1",
            "run_command",
            r#"{"argv": ["sh", "-c", "echo rejected-but-ran"]}"#,
        )]),
        Step::calls(vec![call("f", "finish", "{}")]),
    ]);
    let Some(ui) = agent_ui("reject", &model) else {
        return;
    };
    ui.signed_in_owner();
    let key = owner_key(&ui);
    add_member(&ui, "reviewer", "human_assistant");
    let run = start_run(&ui, &key);
    let a = pending(&ui, &key, &run);
    let id = a["id"].as_str().unwrap().to_string();
    switch_to(&ui, "reviewer");
    open_from_inbox(&ui, &a);

    ui.b.fill("#note", "no commands today");
    ui.b.click_and_load("#reject");
    ui.assert_at(&format!("/approvals/{id}"));
    assert_eq!(ui.b.text("#approval-state").trim(), "rejected");
    assert!(
        !ui.b.exists("#approve") && !ui.b.exists("#reject"),
        "a decided request still offers a decision"
    );
    // The run ends: the agent is told and finishes without the command.
    ui.open(&format!("/runs/{run}"));
    let end = wait_state(
        &ui,
        &key,
        &run,
        &["succeeded", "failed", "blocked", "cancelled"],
    );
    assert_eq!(end, "succeeded", "{}", run_of(&ui, &key, &run));
    ui.b.refresh();
    wait_run_page(&ui, "succeeded");
    // Never dispatched: the action was aborted, the model was told it was
    // rejected, and nothing the command prints reached it.
    let acts = actions(&ui, &key, &run);
    let commands: Vec<&Value> = acts.iter().filter(|a| a["kind"] == "run_command").collect();
    assert_eq!(commands.len(), 1, "{acts:?}");
    assert_eq!(commands[0]["state"], "aborted", "{acts:?}");
    assert_eq!(commands[0]["dispatched_at"], Value::Null, "{acts:?}");
    assert_eq!(
        commands[0]["error"]["code"], "approval_rejected",
        "{acts:?}"
    );
    let told = &model.results(1)[0];
    assert!(told.contains("rejected"), "{told}");
    assert!(!told.contains("rejected-but-ran"), "{told}");
    let (_, ev) = ui.server.request(
        "GET",
        &format!("/v1/runs/{run}/events"),
        None,
        &[("authorization", &format!("Bearer {key}"))],
    );
    let output_lines = ev
        .lines()
        .filter(|l| l.contains("rejected-but-ran") && !l.contains("argv"))
        .count();
    assert_eq!(output_lines, 0, "the command's output is in the run: {ev}");
    let (_, d) = api(&ui, &key, "GET", &format!("/v1/approvals/{id}"), None);
    assert_eq!(d["state"], "rejected", "{d}");
    assert_eq!(d["note"], "no commands today", "{d}");
    let listed = ui.b.text("#run-approvals");
    assert!(listed.contains("decided by reviewer"), "{listed}");
    ui.capture("run-rejected");
    ui.finish();
}

/// While the agent's command runs, the owner presses the emergency stop
/// and confirms: the banner shows on every page, the sandboxed process is
/// gone, the run ends cancelled; then the owner resumes.
#[test]
fn ui_the_emergency_stop_halts_a_running_agent() {
    let marker = sleep_marker(Who::Invoker, 6000);
    let model = Model::start(vec![
        Step::calls(vec![call(
            "s",
            "run_command",
            &format!(r#"{{"argv": ["sleep", "{marker}"]}}"#),
        )]),
        Step::calls(vec![call("f", "finish", "{}")]),
    ]);
    let Some(ui) = agent_ui("stop", &model) else {
        return;
    };
    ui.signed_in_owner();
    let key = owner_key(&ui);
    let run = start_run(&ui, &key);
    // The operator (the local CLI) approves the command.
    let a = pending(&ui, &key, &run);
    let o = ui
        .env
        .cmd()
        .args([
            "approvals",
            "approve",
            a["id"].as_str().unwrap(),
            "--hash",
            a["payload_hash"].as_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let procs = format!("sleep {marker}");
    let deadline = Instant::now() + HANG_GUARD;
    while count_procs(&procs) == 0 {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    ui.open(&format!("/runs/{run}"));
    wait_run_page(&ui, "running");
    assert!(!ui.b.exists("#emergency-banner"));

    let asked = ui.b.submit_confirmed("form[action='/emergency/stop']");
    assert!(asked.contains("Stop everything"), "{asked}");
    ui.b.wait_for("#emergency-banner");
    // The sandboxed process is gone (a hang guard, not a timing bound).
    let deadline = Instant::now() + HANG_GUARD;
    while count_procs(&procs) > 0 {
        assert!(Instant::now() < deadline, "the command survived the stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        wait_state(&ui, &key, &run, &["cancelled", "failed", "succeeded"]),
        "cancelled"
    );
    assert_eq!(run_of(&ui, &key, &run)["error_code"], "emergency_stop");
    assert_eq!(
        model.server.requests().len(),
        1,
        "no model request after the stop"
    );
    ui.open(&format!("/runs/{run}"));
    wait_run_page(&ui, "cancelled");
    // The banner on every page, the stop button on none.
    for page in ["/", "/runs", "/approvals", "/workers", "/account"] {
        ui.open(page);
        assert!(ui.b.exists("#emergency-banner"), "no banner on {page}");
        assert!(
            !ui.b.exists("#emergency-stop"),
            "{page} offers the stop while stopped"
        );
    }
    ui.open("/");
    ui.capture("overview-stopped");
    // Resume: the banner goes, the stop button is back; the run stays
    // cancelled.
    let asked = ui.b.submit_confirmed("form[action='/emergency/resume']");
    assert!(asked.contains("Resume"), "{asked}");
    ui.b.wait_for("#emergency-stop");
    assert!(!ui.b.exists("#emergency-banner"));
    let (c, v) = api(&ui, &key, "GET", "/v1/emergency-stop", None);
    assert_eq!(c, 200, "{v}");
    assert_eq!(v["stopped"], false, "{v}");
    assert_eq!(run_of(&ui, &key, &run)["state"], "cancelled");
    ui.finish();
}

/// `fetch` from the current page, with the page's CSRF token (from its
/// `<meta name="csrf-token">`) and `fields` as a form body; the status and
/// the body of the answer.
fn forge(ui: &Ui, path: &str, fields: Value) -> (u16, String) {
    let v = ui.b.execute_async(
        "const [path, fields, done] = arguments;
         const token = document.querySelector('meta[name=csrf-token]').content;
         const body = new URLSearchParams(Object.assign({_csrf: token}, fields));
         fetch(path, {method: 'POST', body, credentials: 'same-origin', redirect: 'manual'})
           .then(r => r.text().then(t => done({status: r.status, body: t})))
           .catch(e => done({status: 0, body: String(e)}));",
        vec![json!(path), fields],
    );
    (
        v["status"].as_u64().unwrap_or(0) as u16,
        v["body"].as_str().unwrap_or("").to_string(),
    )
}

/// A Viewer sees a pending request and a run but no approve, reject,
/// cancel or emergency stop button; the same requests forged from the
/// Viewer's page, with the session's valid CSRF token, are refused and
/// change nothing.
#[test]
fn ui_a_viewer_sees_no_decision_or_cancel_buttons_and_a_forged_request_is_refused() {
    let model = Model::start(vec![
        Step::calls(vec![call(
            "c1",
            "run_command",
            r#"{"argv": ["sh", "-c", "echo viewer-must-not-approve"]}"#,
        )]),
        Step::calls(vec![call("f", "finish", "{}")]),
    ]);
    let Some(ui) = agent_ui("viewer", &model) else {
        return;
    };
    ui.signed_in_owner();
    let key = owner_key(&ui);
    add_member(&ui, "watcher", "viewer");
    let run = start_run(&ui, &key);
    let a = pending(&ui, &key, &run);
    let id = a["id"].as_str().unwrap().to_string();
    let hash = a["payload_hash"].as_str().unwrap().to_string();
    switch_to(&ui, "watcher");

    ui.open("/approvals");
    assert!(
        ui.b.exists(&format!("a[href='/approvals/{id}']")),
        "a Viewer reads the inbox"
    );
    ui.open(&format!("/approvals/{id}"));
    assert_eq!(ui.b.text("#approval-state").trim(), "pending");
    for absent in [
        "#approve",
        "#reject",
        "form[action$='/approve']",
        "form[action$='/reject']",
        "#note",
        "#emergency-stop",
    ] {
        assert!(
            !ui.b.exists(absent),
            "the Viewer's approval page has {absent}"
        );
    }
    ui.capture("approval-viewer");
    ui.open(&format!("/runs/{run}"));
    assert_eq!(ui.b.text("#run-state").trim(), "awaiting_approval");
    for absent in ["#cancel-run", "form[action$='/cancel']", "#emergency-stop"] {
        assert!(!ui.b.exists(absent), "the Viewer's run page has {absent}");
    }
    ui.capture("run-viewer");

    // Forged from the Viewer's own page, with a valid CSRF token: refused
    // for want of the permission.
    ui.open(&format!("/approvals/{id}"));
    let (c, body) = forge(
        &ui,
        &format!("/approvals/{id}/approve"),
        json!({"payload_hash": hash, "note": "forged"}),
    );
    assert_eq!(c, 403, "approve: {body}");
    assert!(
        body.contains("Not allowed") && !body.contains("sent from another site"),
        "not refused for want of the permission: {body}"
    );
    let (c, body) = forge(&ui, &format!("/approvals/{id}/reject"), json!({}));
    assert_eq!(c, 403, "reject: {body}");
    let (c, body) = forge(
        &ui,
        &format!("/runs/{run}/cancel"),
        json!({"confirm": "yes"}),
    );
    assert_eq!(c, 403, "cancel: {body}");
    let (c, body) = forge(&ui, "/emergency/stop", json!({"confirm": "yes"}));
    assert_eq!(c, 403, "emergency stop: {body}");
    // Nothing changed.
    let (_, d) = api(&ui, &key, "GET", &format!("/v1/approvals/{id}"), None);
    assert_eq!(d["state"], "pending", "{d}");
    assert_eq!(d["decided_by"], Value::Null, "{d}");
    assert_eq!(run_of(&ui, &key, &run)["state"], "awaiting_approval");
    let (_, e) = api(&ui, &key, "GET", "/v1/emergency-stop", None);
    assert_eq!(e["stopped"], false, "{e}");
    assert_eq!(
        actions(&ui, &key, &run)[0]["state"],
        "awaiting_approval",
        "the command did not run"
    );
    ui.finish();
}
