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
    let broker = Broker::with_init_exe(init);
    let (mut resolved, mut total) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let r = broker.run(&spec)?;
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
    let (mut r, mut t) = (resolved.split_off(1), total.split_off(1));
    println!(
        "next {} launches (median): resolved {:.2} ms, done {:.2} ms",
        rounds - 1,
        median(&mut r),
        median(&mut t)
    );
    Ok(())
}
