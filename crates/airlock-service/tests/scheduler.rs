//! The scheduler over a real store (RUN-6): schedules fire once per
//! intended local time across daylight-saving changes, two nodes on one
//! database fire each schedule exactly once (SQLite and PostgreSQL), a fire
//! whose required input is missing is skipped, recorded and audited, and a
//! new schedule never fires retroactively.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use airlock_iam::ManualClock;
use airlock_service::{Config, FireOutcome, FireResult, Service};
use airlock_store::{DEFAULT_WORKSPACE, RunRecord, Store, random_id};
use sqlx::Connection;

const WS: &str = DEFAULT_WORKSPACE;

/// Unix ms of an RFC 3339 instant.
fn ms(s: &str) -> i64 {
    s.parse::<jiff::Timestamp>().unwrap().as_millisecond()
}

fn utc(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).unwrap().to_string()
}

fn paris(ms: i64) -> String {
    let z = jiff::Timestamp::from_millisecond(ms)
        .unwrap()
        .to_zoned_datetime(jiff::tz::TimeZone::get("Europe/Paris").unwrap());
    format!("{}{}", z.datetime(), z.offset())
}

/// A worker folder: `[inputs]` and `[[triggers]]` given as TOML text.
fn write_worker(workers: &Path, id: &str, rest: &str) {
    let dir = workers.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("worker.toml"),
        format!(
            "[worker]\nid = \"{id}\"\ntitle = \"{id}\"\ndescription = \"test\"\nkind = \"script\"\nentry = \"run.sh\"\nruntime = \"sh\"\n\n{rest}"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("run.sh"), "echo hi\n").unwrap();
}

/// A schedule in Paris with an optional `team` input, plus a manual
/// trigger (index 0), so the schedule is trigger 1.
fn paris_worker(workers: &Path, id: &str, cron: &str) {
    write_worker(
        workers,
        id,
        &format!(
            "[inputs.team]\ntype = \"string\"\nrequired = false\n\n\
             [[triggers]]\nkind = \"manual\"\n\n\
             [[triggers]]\nkind = \"schedule\"\ncron = \"{cron}\"\ntimezone = \"Europe/Paris\"\ninput = {{ team = \"core\" }}\n"
        ),
    );
}

struct Node {
    svc: Arc<Service>,
    /// The node's own handle on the database, to inspect and stage rows.
    store: Store,
}

/// A node: a Service over `url`, sharing `root`'s workers and data folders
/// with the other nodes of the test (as nodes share a key directory).
async fn node(url: &str, root: &Path, name: &str) -> Node {
    let store = Store::open(url).await.unwrap();
    let mut cfg = Config::with_defaults(root.join("data"), root.join("workers"));
    cfg.node_id = name.to_string();
    let svc = Service::open(store.clone(), cfg).unwrap();
    assert!(svc.worker_errors().is_empty(), "{:?}", svc.worker_errors());
    Node { svc, store }
}

fn sqlite_url(root: &Path) -> String {
    format!("sqlite://{}", root.join("airlock.db").display())
}

async fn runs_of(store: &Store, worker: &str) -> Vec<RunRecord> {
    store
        .list_runs(WS, None, 500, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.worker_id == worker)
        .collect()
}

/// Ticks at every `step` from `from` to `to` (both included), collecting
/// what this node fired.
async fn tick_through(svc: &Service, from: i64, to: i64, step: Duration) -> Vec<FireOutcome> {
    let step = i64::try_from(step.as_millis()).unwrap();
    let mut out = Vec::new();
    let mut t = from;
    while t <= to {
        out.extend(svc.schedule_tick(t).await.unwrap());
        t += step;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_6_spring_forward_in_paris_fires_once_at_three() {
    let dir = tempfile::tempdir().unwrap();
    paris_worker(&dir.path().join("workers"), "nightly", "30 2 * * *");
    let n = node(&sqlite_url(dir.path()), dir.path(), "a").await;

    // The first tick arms the schedule; the 28th's 02:30 (earlier that
    // day) is not fired retroactively, and nothing is recorded as a fire.
    assert!(
        n.svc
            .schedule_tick(ms("2026-03-28T12:00:00Z"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(n.store.last_fire(WS, "nightly", 1).await.unwrap(), None);

    // Every minute across the night of the change (02:00 CET → 03:00 CEST
    // at 01:00 UTC on 2026-03-29), then every 10 minutes until the next
    // night's fire.
    let mut fired = tick_through(
        &n.svc,
        ms("2026-03-28T12:01:00Z"),
        ms("2026-03-29T03:00:00Z"),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(utc(fired[0].fire_at), "2026-03-29T01:00:00Z");
    assert_eq!(paris(fired[0].fire_at), "2026-03-29T03:00:00+02");
    assert_eq!(fired[0].trigger_index, 1);
    assert!(matches!(fired[0].result, FireResult::Created { .. }));

    fired.extend(
        tick_through(
            &n.svc,
            ms("2026-03-29T03:10:00Z"),
            ms("2026-03-30T01:00:00Z"),
            Duration::from_secs(600),
        )
        .await,
    );
    let when: Vec<String> = fired.iter().map(|f| paris(f.fire_at)).collect();
    assert_eq!(when, ["2026-03-29T03:00:00+02", "2026-03-30T02:30:00+02"]);

    let runs = runs_of(&n.store, "nightly").await;
    assert_eq!(runs.len(), 2);
    for r in &runs {
        assert_eq!(r.trigger, "schedule");
        assert_eq!(r.actor, "schedule");
        assert_eq!(r.input, serde_json::json!({"team": "core"}));
    }
    assert_eq!(
        n.store.last_fire(WS, "nightly", 1).await.unwrap(),
        Some(ms("2026-03-30T00:30:00Z"))
    );
    let fires = n.store.list_fires(WS, "nightly", 1, 10).await.unwrap();
    let outcomes: Vec<&str> = fires.iter().map(|f| f.outcome.as_str()).collect();
    assert_eq!(outcomes, ["created", "created", "armed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_6_fall_back_in_paris_fires_once_not_twice() {
    let dir = tempfile::tempdir().unwrap();
    paris_worker(&dir.path().join("workers"), "nightly", "30 2 * * *");
    let n = node(&sqlite_url(dir.path()), dir.path(), "a").await;
    n.svc
        .schedule_tick(ms("2026-10-24T12:00:00Z"))
        .await
        .unwrap();
    // 02:00–03:00 local happens twice on 2026-10-25 (00:00–02:00 UTC).
    let fired = tick_through(
        &n.svc,
        ms("2026-10-24T12:01:00Z"),
        ms("2026-10-25T12:00:00Z"),
        Duration::from_secs(60),
    )
    .await;
    let when: Vec<String> = fired.iter().map(|f| paris(f.fire_at)).collect();
    assert_eq!(when, ["2026-10-25T02:30:00+02"]);
    assert_eq!(utc(fired[0].fire_at), "2026-10-25T00:30:00Z");
    assert_eq!(runs_of(&n.store, "nightly").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_6_downtime_catches_up_one_fire_not_a_burst() {
    let dir = tempfile::tempdir().unwrap();
    paris_worker(&dir.path().join("workers"), "quarter", "*/15 * * * *");
    let n = node(&sqlite_url(dir.path()), dir.path(), "a").await;
    n.svc
        .schedule_tick(ms("2026-05-01T10:00:00Z"))
        .await
        .unwrap();
    let f = n
        .svc
        .schedule_tick(ms("2026-05-01T10:15:00Z"))
        .await
        .unwrap();
    assert_eq!(f.len(), 1);
    // Down for three days: one fire, the most recent missed one.
    let f = n
        .svc
        .schedule_tick(ms("2026-05-04T09:20:00Z"))
        .await
        .unwrap();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(utc(f[0].fire_at), "2026-05-04T09:15:00Z");
    // And nothing more until the next quarter hour.
    assert!(
        n.svc
            .schedule_tick(ms("2026-05-04T09:29:59Z"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(runs_of(&n.store, "quarter").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_6_missing_required_input_is_skipped_recorded_and_audited() {
    let dir = tempfile::tempdir().unwrap();
    write_worker(
        &dir.path().join("workers"),
        "needy",
        "[inputs.team]\ntype = \"string\"\n\n\
         [[triggers]]\nkind = \"schedule\"\ncron = \"0 * * * *\"\ntimezone = \"Europe/Paris\"\n",
    );
    let n = node(&sqlite_url(dir.path()), dir.path(), "a").await;
    n.svc
        .schedule_tick(ms("2026-05-01T09:30:00Z"))
        .await
        .unwrap();
    let f = n
        .svc
        .schedule_tick(ms("2026-05-01T10:00:00Z"))
        .await
        .unwrap();
    assert_eq!(f.len(), 1);
    assert!(
        matches!(&f[0].result, FireResult::SkippedMissingInput { reason } if reason.contains("team")),
        "{f:?}"
    );
    assert!(runs_of(&n.store, "needy").await.is_empty());
    let fires = n.store.list_fires(WS, "needy", 0, 10).await.unwrap();
    assert_eq!(fires[0].fire_at, ms("2026-05-01T10:00:00Z"));
    assert_eq!(fires[0].outcome, "skipped_missing_input");
    assert_eq!(fires[0].run_id, None);
    let audit = n.store.audit_lines(WS).await.unwrap();
    let skipped: Vec<serde_json::Value> = audit
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.to_string().contains("schedule.skipped"))
        .collect();
    assert_eq!(skipped.len(), 1, "{audit:?}");
    let text = skipped[0].to_string();
    assert!(text.contains("needy") && text.contains("team"), "{text}");
    // The skip is the fire: it is not retried on the next tick.
    assert!(
        n.svc
            .schedule_tick(ms("2026-05-01T10:00:30Z"))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_6_a_stale_claim_is_taken_over_without_a_duplicate_run() {
    let dir = tempfile::tempdir().unwrap();
    paris_worker(&dir.path().join("workers"), "quarter", "*/15 * * * *");
    let n = node(&sqlite_url(dir.path()), dir.path(), "a").await;
    let store = n.store.clone();
    n.svc
        .schedule_tick(ms("2026-05-01T10:00:00Z"))
        .await
        .unwrap();
    // Another node claimed 10:15, created the run, and died before
    // recording the outcome.
    let fire = ms("2026-05-01T10:15:00Z");
    assert!(
        store
            .claim_fire(WS, "quarter", 1, fire, fire)
            .await
            .unwrap()
    );
    let input = serde_json::json!({"team": "core"});
    let orphan = store
        .create_run(airlock_store::NewRun {
            workspace_id: WS.into(),
            worker_id: "quarter".into(),
            input: input.clone(),
            trigger: "schedule".into(),
            actor: "schedule".into(),
            plan_id: None,
            idempotency: Some((
                format!("schedule:quarter:1:{fire}"),
                airlock_store::sha256_hex(format!("quarter\n{input}").as_bytes()),
            )),
        })
        .await
        .unwrap()
        .run;
    // Not stale yet: left alone.
    assert!(
        n.svc
            .schedule_tick(ms("2026-05-01T10:16:00Z"))
            .await
            .unwrap()
            .is_empty()
    );
    // Stale: taken over; the idempotency key finds the same run.
    let f = n
        .svc
        .schedule_tick(ms("2026-05-01T10:18:00Z"))
        .await
        .unwrap();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].fire_at, fire);
    assert_eq!(
        f[0].result,
        FireResult::Created {
            run_id: orphan.id.clone()
        }
    );
    assert_eq!(runs_of(&n.store, "quarter").await.len(), 1);
    let latest = store.latest_fire(WS, "quarter", 1).await.unwrap().unwrap();
    assert_eq!(latest.outcome, "created");
    assert_eq!(latest.run_id, Some(orphan.id));
}

/// Two nodes on one database tick the same instants concurrently: every
/// fire is claimed by exactly one of them and becomes exactly one run.
async fn two_nodes_fire_each_schedule_once(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let workers = dir.path().join("workers");
    paris_worker(&workers, "quarter", "*/15 * * * *");
    paris_worker(&workers, "nightly", "30 2 * * *");
    let a = node(url, dir.path(), "node-a").await;
    let b = node(url, dir.path(), "node-b").await;
    // From 23:00 UTC on the eve of the spring-forward to 02:00 UTC: the
    // quarter schedule fires at 23:15 … 02:00 (00:45 then 01:00 across the
    // gap), the nightly one once, at 01:00 UTC.
    let start = ms("2026-03-28T23:00:00Z");
    let end = ms("2026-03-29T02:00:00Z");
    let mut all: Vec<FireOutcome> = Vec::new();
    let mut t = start;
    while t <= end {
        let (sa, sb) = (a.svc.clone(), b.svc.clone());
        let ha = tokio::spawn(async move { sa.schedule_tick(t).await.unwrap() });
        let hb = tokio::spawn(async move { sb.schedule_tick(t).await.unwrap() });
        all.extend(ha.await.unwrap());
        all.extend(hb.await.unwrap());
        t += 30_000;
    }
    let mut quarter: Vec<i64> = all
        .iter()
        .filter(|f| f.worker_id == "quarter")
        .map(|f| f.fire_at)
        .collect();
    quarter.sort_unstable();
    let expected: Vec<i64> = (1..=12).map(|k| start + k * 15 * 60_000).collect();
    assert_eq!(quarter, expected, "each fire handled by exactly one node");
    let nightly: Vec<String> = all
        .iter()
        .filter(|f| f.worker_id == "nightly")
        .map(|f| utc(f.fire_at))
        .collect();
    assert_eq!(nightly, ["2026-03-29T01:00:00Z"]);
    assert!(
        all.iter()
            .all(|f| matches!(f.result, FireResult::Created { .. }))
    );
    assert_eq!(runs_of(&a.store, "quarter").await.len(), 12);
    assert_eq!(runs_of(&b.store, "nightly").await.len(), 1);
    // Ticking again at the same instants changes nothing.
    assert!(a.svc.schedule_tick(end).await.unwrap().is_empty());
    assert!(b.svc.schedule_tick(end).await.unwrap().is_empty());
    assert_eq!(runs_of(&a.store, "quarter").await.len(), 12);
    a.store.pool().close().await;
    b.store.pool().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_6_two_nodes_on_sqlite_fire_each_schedule_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    two_nodes_fire_each_schedule_once(&sqlite_url(dir.path())).await;
}

const PG_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_6_two_nodes_on_postgres_fire_each_schedule_exactly_once() {
    sqlx::any::install_default_drivers();
    let mut admin = match sqlx::AnyConnection::connect(PG_ADMIN).await {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var("AIRLOCK_TEST_SKIP_POSTGRES").is_ok(),
                "PostgreSQL at 127.0.0.1:5432 is required ({e}); set AIRLOCK_TEST_SKIP_POSTGRES=1 to skip locally"
            );
            return;
        }
    };
    let name = random_id("airlock_test").to_lowercase();
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    two_nodes_fire_each_schedule_once(&format!("postgres://postgres@127.0.0.1:5432/{name}")).await;
    let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_6_run_scheduler_ticks_on_the_clock_and_stops() {
    let dir = tempfile::tempdir().unwrap();
    paris_worker(&dir.path().join("workers"), "quarter", "*/15 * * * *");
    let n = node(&sqlite_url(dir.path()), dir.path(), "a").await;
    let clock = Arc::new(ManualClock::new(ms("2026-05-01T10:14:00Z")));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let handle = tokio::spawn(n.svc.clone().run_scheduler(clock.clone(), stop_rx));

    let store = n.store.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    // Armed at the clock's time, not fired.
    while store.latest_fire(WS, "quarter", 1).await.unwrap().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "never armed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(runs_of(&n.store, "quarter").await.is_empty());
    clock.set(ms("2026-05-01T10:15:00.200Z"));
    while runs_of(&n.store, "quarter").await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never fired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop_tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), handle)
        .await
        .expect("the scheduler stops")
        .unwrap();
    assert_eq!(runs_of(&n.store, "quarter").await.len(), 1);
    assert_eq!(
        store.last_fire(WS, "quarter", 1).await.unwrap(),
        Some(ms("2026-05-01T10:15:00Z"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_6_an_unknown_zone_is_reported_and_never_fires() {
    let dir = tempfile::tempdir().unwrap();
    write_worker(
        &dir.path().join("workers"),
        "lost",
        "[[triggers]]\nkind = \"schedule\"\ncron = \"* * * * *\"\ntimezone = \"Europe/Atlantis\"\n",
    );
    let n = node(&sqlite_url(dir.path()), dir.path(), "a").await;
    let entries = n.svc.schedules();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].schedule.as_ref().err(),
        Some(&airlock_service::schedule_eval::ScheduleError::UnknownZone(
            "Europe/Atlantis".into()
        ))
    );
    for t in ["2026-05-01T10:00:00Z", "2026-05-01T10:05:00Z"] {
        assert!(n.svc.schedule_tick(ms(t)).await.unwrap().is_empty());
    }
    assert_eq!(n.store.latest_fire(WS, "lost", 0).await.unwrap(), None);
}
