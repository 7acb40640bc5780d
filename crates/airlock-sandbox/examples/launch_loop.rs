//! Launches the same command N times from one process, as `airlock up` and
//! the agent harness do, and prints the median time to the `resolved` stage
//! and to the end of the launch: the first launch hashes the executable, the
//! rest take the digest from the cache when the file is root-only.
//!
//! `cargo run --release -p airlock-sandbox --example launch_loop -- target/release/airlock 30 /usr/bin/python3 -c pass`
//! (the first argument is the airlock binary, the sandbox init). A
//! benchmark, not a test.

use std::path::PathBuf;

use airlock_sandbox::{Broker, SandboxRequest, SandboxSpec};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let init = PathBuf::from(args.next().ok_or("usage: launch_loop AIRLOCK N CMD...")?);
    let rounds: usize = args.next().ok_or("missing N")?.parse::<usize>()?.max(2);
    let argv: Vec<String> = args.collect();
    let spec = SandboxSpec::parse(SandboxRequest {
        argv,
        timings: true,
        ..Default::default()
    })?;
    // POOL=N keeps N pre-built sandboxes ready (airlock_sandbox::pool).
    let pool: usize = std::env::var("POOL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let broker = Broker::with_init_exe(init).with_pool(pool)?;
    let (mut resolved, mut total, mut wall) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        if pool > 0 && i > 0 {
            // Let the filler replace the sandbox just used, as it would
            // between an agent's tool calls.
            std::thread::sleep(std::time::Duration::from_millis(30));
        }
        let t = std::time::Instant::now();
        let r = broker.run(&spec)?;
        wall.push(t.elapsed().as_secs_f64() * 1e3);
        if i + 1 == rounds {
            let stages: Vec<String> = r
                .timings
                .iter()
                .map(|(s, t)| format!("{s} {t:.2}"))
                .collect();
            println!("last launch: {}", stages.join(" | "));
        }
        let at = |stage: &str| r.timings.iter().find(|(s, _)| s == stage).map(|(_, t)| *t);
        resolved.push(at("resolved").unwrap_or(f64::NAN));
        total.push(at("cleaned_up").unwrap_or(f64::NAN));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "first launch: resolved {:.2} ms, done {:.2} ms",
        resolved[0], total[0]
    );
    let (mut r, mut t, mut w) = (resolved.split_off(1), total.split_off(1), wall.split_off(1));
    println!(
        "next {} launches (median): resolved {:.2} ms, done {:.2} ms, wall {:.2} ms",
        rounds - 1,
        median(&mut r),
        median(&mut t),
        median(&mut w)
    );
    if let Some(s) = broker.pool_stats() {
        println!("pool: {s:?}");
    }
    Ok(())
}
