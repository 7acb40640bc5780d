//! Audit verification against plain SHA-256 over the same bytes, in one process (issue 14,
//! goal 5). Not a test: it measures, it asserts nothing about time.
//!
//! ```text
//! verify_bench measure N [--old]   # N events: verify the stored lines, SHA-256 the same bytes
//! verify_bench emit N              # N stored lines of one valid chain, one per line, to stdout
//! ```
//!
//! `measure` builds the chain in chunks of 10 000 lines (untimed) and times, per chunk, in
//! alternating order: `Verifier::push_line` over the lines, SHA-256 of each line (`Sha256::digest`, the
//! same crate and CPU features the verifier uses), and with `--old` the previous path
//! (`from_json_line`, then `Verifier::push`, which parses and re-canonicalises). Only a chunk
//! is in memory at a time. `scripts/bench_audit.py` runs it and `airlock audit verify` on a
//! database built from `emit`.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use airlock_audit::{
    Actor, AuditEvent, ChainedEvent, Verifier, append, from_json_line, to_json_line,
};
use sha2::{Digest, Sha256};

const CHUNK: u64 = 10_000;
const WS: &str = "ws_default";

/// An event shaped like the ones a server writes (runs, actions, secrets, logins), about 500
/// bytes as a stored line, like the lines of the database BENCHMARKS.md measured.
fn event(seq: u64) -> AuditEvent {
    let id = |p: &str, n: u64| {
        format!(
            "{p}_01JD{:022}",
            n.wrapping_mul(2_654_435_761) % 10u64.pow(20)
        )
    };
    let (event_type, actor, metadata) = match seq % 5 {
        0 => (
            "run.created",
            Actor::Human(id("usr", seq % 7)),
            serde_json::json!({"worker": "trivial", "trigger": "manual", "inputs_hash": format!("sha256:{:064x}", seq), "queued": seq % 13}),
        ),
        1 => (
            "run.claimed",
            Actor::System,
            serde_json::json!({"executor": "exec-1", "lease_ms": 30000, "fencing_token": seq}),
        ),
        2 => (
            "action.decided",
            Actor::Agent(id("agt", seq % 3)),
            serde_json::json!({"tool": "run_command", "policy": "require_approval", "risk": "medium", "argv0": "python3", "cost_usd": 0.0125}),
        ),
        3 => (
            "secret.read",
            Actor::Service("executor".to_owned()),
            serde_json::json!({"name": "OPENAI_API_KEY", "purpose": "model channel \"default\"", "bytes": 51}),
        ),
        _ => (
            "run.finished",
            Actor::System,
            serde_json::json!({"status": "succeeded", "exit_code": 0, "duration_ms": 1234 + seq % 1000, "outputs": ["result.json"], "note": "Zürich → 東京"}),
        ),
    };
    AuditEvent {
        workspace_id: WS.to_owned(),
        seq,
        at: format!(
            "2026-12-0{}T12:{:02}:{:02}.{:03}Z",
            1 + seq % 9,
            seq % 60,
            (seq / 60) % 60,
            seq % 1000
        ),
        actor,
        event_type: event_type.to_owned(),
        target: Some(id("run", seq / 5)),
        request_id: seq.is_multiple_of(2).then(|| id("req", seq)),
        run_id: Some(id("run", seq / 5)),
        action_id: (seq % 5 == 2).then(|| id("act", seq)),
        decision: (seq % 5 == 2).then(|| "require_approval".to_owned()),
        payload_hash: (seq % 5 == 2).then(|| format!("sha256:{:064x}", seq * 31)),
        result: Some("ok".to_owned()),
        metadata,
    }
}

/// The next `CHUNK` (or fewer) stored lines after `prev`.
fn chunk(prev: &mut Option<ChainedEvent>, from: u64, to: u64) -> Result<Vec<String>, String> {
    let mut lines = Vec::with_capacity((to - from + 1) as usize);
    for seq in from..=to {
        let e = append(prev.as_ref(), event(seq)).map_err(|e| e.to_string())?;
        lines.push(to_json_line(&e).map_err(|e| e.to_string())?);
        *prev = Some(e);
    }
    Ok(lines)
}

fn measure(n: u64, old: bool) -> Result<(), String> {
    let mut prev = None;
    let mut new_v = Verifier::new().for_workspace(WS);
    let mut old_v = Verifier::new().for_workspace(WS);
    let (mut t_new, mut t_old, mut t_sha) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut bytes = 0u64;
    let mut sink = 0u8;
    let mut from = 1;
    while from <= n {
        let to = (from + CHUNK - 1).min(n);
        let lines = chunk(&mut prev, from, to)?;
        bytes += lines.iter().map(|l| l.len() as u64).sum::<u64>();

        // Alternate which goes first, so that neither always meets a warmer cache.
        let odd = (from / CHUNK) % 2 == 1;
        for first in [odd, !odd] {
            let t = Instant::now();
            if first {
                for l in &lines {
                    sink ^= Sha256::digest(l.as_bytes())[0];
                }
                t_sha += t.elapsed();
            } else {
                for l in &lines {
                    new_v.push_line(l).map_err(|e| e.to_string())?;
                }
                t_new += t.elapsed();
            }
        }

        if old {
            let t = Instant::now();
            for l in &lines {
                let e = from_json_line(l).map_err(|e| e.to_string())?;
                old_v.push(&e).map_err(|e| e.to_string())?;
            }
            t_old += t.elapsed();
        }
        from = to + 1;
    }
    let head = new_v.finish().map_err(|e| e.to_string())?.head;
    if old && old_v.finish().map_err(|e| e.to_string())?.head != head {
        return Err("the two verifiers disagree on the head".to_owned());
    }
    let rate = |d: Duration| n as f64 / d.as_secs_f64();
    println!("events {n} bytes {bytes} (sink {sink})");
    println!(
        "sha256   {:9.1} ms {:10.0} events/s {:7.1} MB/s",
        t_sha.as_secs_f64() * 1e3,
        rate(t_sha),
        bytes as f64 / t_sha.as_secs_f64() / 1e6
    );
    println!(
        "verify   {:9.1} ms {:10.0} events/s  ratio to sha256 {:.2} (throughput {:.0}% of sha256)",
        t_new.as_secs_f64() * 1e3,
        rate(t_new),
        t_new.as_secs_f64() / t_sha.as_secs_f64(),
        100.0 * t_sha.as_secs_f64() / t_new.as_secs_f64()
    );
    if old {
        println!(
            "old      {:9.1} ms {:10.0} events/s  ratio to sha256 {:.2}",
            t_old.as_secs_f64() * 1e3,
            rate(t_old),
            t_old.as_secs_f64() / t_sha.as_secs_f64()
        );
    }
    Ok(())
}

fn emit(n: u64) -> Result<(), String> {
    let mut prev = None;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut from = 1;
    while from <= n {
        let to = (from + CHUNK - 1).min(n);
        for l in chunk(&mut prev, from, to)? {
            writeln!(out, "{l}").map_err(|e| e.to_string())?;
        }
        from = to + 1;
    }
    out.flush().map_err(|e| e.to_string())
}

/// Builds one chunk, then verifies it `n` times over (fresh verifier each time): for a
/// profiler, which then sees verification only.
fn profile(n: u64) -> Result<(), String> {
    let lines = chunk(&mut None, 1, CHUNK)?;
    let t = Instant::now();
    for _ in 0..n {
        let mut v = Verifier::new().for_workspace(WS);
        for l in &lines {
            v.push_line(l).map_err(|e| e.to_string())?;
        }
    }
    println!(
        "{:.0} events/s",
        (n * CHUNK) as f64 / t.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.get(1).and_then(|s| s.parse::<u64>().ok());
    let result = match (args.first().map(String::as_str), n) {
        (Some("measure"), Some(n)) => measure(n, args.iter().any(|a| a == "--old")),
        (Some("emit"), Some(n)) => emit(n),
        (Some("profile"), Some(n)) => profile(n),
        _ => Err("usage: verify_bench measure N [--old] | emit N".to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("verify_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
