//! How long resolving an executable takes in one long-lived process (the
//! server, agent tool calls): hashed every time against the digest cache.
//!
//! `cargo run --release -p airlock-sandbox --example exe_digest -- /usr/bin/python3.11 200`
//! prints the median and p95 microseconds per resolve for both. A
//! benchmark, not a test: nothing asserts on time.

use std::path::Path;
use std::time::{Duration, Instant};

use airlock_sandbox::{DigestCache, DigestSource, ResolvedExecutable};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| "/usr/bin/python3".into());
    let rounds: usize = args
        .next()
        .map(|n| n.parse())
        .transpose()?
        .unwrap_or(200)
        .max(1);
    let canonical = Path::new(&path).canonicalize()?;

    // Hashed: a fresh cache per resolve never has the digest.
    let hashed = time(rounds, || {
        ResolvedExecutable::open_with(&canonical, &DigestCache::new(Duration::ZERO))
    })?;
    // Cached: one cache, warmed by the first resolve.
    let cache = DigestCache::new(airlock_sandbox::exe::digest_cache::SETTLE);
    let first = ResolvedExecutable::open_with(&canonical, &cache)?;
    let hit = ResolvedExecutable::open_with(&canonical, &cache)?;
    if hit.digest_source() != DigestSource::Cached {
        return Err(format!(
            "{} is not cacheable (not root-only, or changed under two seconds ago)",
            canonical.display()
        )
        .into());
    }
    assert_eq!(first.identity().sha256, hit.identity().sha256);
    let cached = time(rounds, || ResolvedExecutable::open_with(&canonical, &cache))?;
    let size = first.identity().size;
    println!(
        "{} ({size} bytes), {rounds} resolves each, microseconds per resolve:",
        canonical.display()
    );
    println!("  hashed: median {:.1}  p95 {:.1}", hashed.0, hashed.1);
    println!("  cached: median {:.1}  p95 {:.1}", cached.0, cached.1);
    Ok(())
}

fn time<E>(
    rounds: usize,
    mut f: impl FnMut() -> Result<ResolvedExecutable, E>,
) -> Result<(f64, f64), E> {
    let mut us = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        let exe = f()?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
        drop(exe);
    }
    us.sort_by(f64::total_cmp);
    Ok((us[rounds / 2], us[(rounds * 95 / 100).min(rounds - 1)]))
}
