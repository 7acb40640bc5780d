//! IAM-2 login throttling: after a number of free failures each further failure doubles the
//! wait up to a cap. It slows guessing, never locks anyone out for good, and reveals nothing:
//! keys are opaque strings (the caller passes the normalized username whether or not the account
//! exists, and separately a client key). Memory is bounded by `max_entries`.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

#[derive(Debug, Clone, Copy)]
pub struct ThrottleConfig {
    pub free_failures: u32,
    pub base_delay_ms: i64,
    pub max_delay_ms: i64,
    pub max_entries: usize,
}

const FIFTEEN_MIN_MS: i64 = 15 * 60 * 1000;

impl ThrottleConfig {
    /// 5 free failures, then 1 s doubling, capped at 15 min; 100 000 keys.
    pub fn per_account() -> Self {
        Self {
            free_failures: 5,
            base_delay_ms: 1000,
            max_delay_ms: FIFTEEN_MIN_MS,
            max_entries: 100_000,
        }
    }

    /// 20 free failures, then 1 s doubling, capped at 15 min; 100 000 keys.
    pub fn per_client() -> Self {
        Self {
            free_failures: 20,
            ..Self::per_account()
        }
    }

    /// Never throttles and stores nothing.
    pub fn disabled() -> Self {
        Self {
            free_failures: u32::MAX,
            base_delay_ms: 0,
            max_delay_ms: 0,
            max_entries: 0,
        }
    }

    fn is_disabled(&self) -> bool {
        self.max_delay_ms <= 0 || self.base_delay_ms <= 0 || self.max_entries == 0
    }

    fn delay_for(&self, failures: u32) -> i64 {
        if failures <= self.free_failures {
            return 0;
        }
        let exp = (failures - self.free_failures - 1).min(62);
        self.base_delay_ms
            .saturating_mul(1i64 << exp)
            .min(self.max_delay_ms)
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    next_allowed_ms: i64,
    last_ms: i64,
}

#[derive(Debug)]
pub struct Throttle {
    cfg: ThrottleConfig,
    entries: Mutex<HashMap<String, Entry>>,
}

impl Throttle {
    pub fn new(cfg: ThrottleConfig) -> Self {
        Self {
            cfg,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panic elsewhere while holding the lock leaves consistent plain data; keep going.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ok(()) if an attempt is allowed now; Err(retry_after_ms) otherwise.
    pub fn check(&self, key: &str, now_ms: i64) -> Result<(), i64> {
        if self.cfg.is_disabled() {
            return Ok(());
        }
        match self.lock().get(key) {
            Some(e) if now_ms < e.next_allowed_ms => Err(e.next_allowed_ms - now_ms),
            _ => Ok(()),
        }
    }

    /// After a failure: failures += 1; once failures > free_failures,
    /// next_allowed = now + min(base * 2^(failures-free-1), max).
    pub fn failure(&self, key: &str, now_ms: i64) {
        if self.cfg.is_disabled() {
            return;
        }
        let mut map = self.lock();
        let e = map.entry(key.to_owned()).or_insert(Entry {
            failures: 0,
            next_allowed_ms: i64::MIN,
            last_ms: now_ms,
        });
        e.failures = e.failures.saturating_add(1);
        e.last_ms = now_ms;
        let delay = self.cfg.delay_for(e.failures);
        if delay > 0 {
            e.next_allowed_ms = now_ms.saturating_add(delay);
        }
        if map.len() > self.cfg.max_entries {
            prune(&mut map, self.cfg.max_entries, now_ms);
        }
    }

    /// Forget the key (after a successful login).
    pub fn success(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Number of keys currently remembered.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Shrinks to ~90% of `max` so pruning is amortized: entries whose delay has passed go first,
/// oldest first; only if that is not enough are still-waiting entries dropped, oldest first.
fn prune(map: &mut HashMap<String, Entry>, max: usize, now_ms: i64) {
    let target = max - max / 10;
    let excess = map.len().saturating_sub(target);
    let mut order: Vec<(bool, i64, String)> = map
        .iter()
        .map(|(k, e)| (now_ms < e.next_allowed_ms, e.last_ms, k.clone()))
        .collect();
    order.sort_unstable();
    for (_, _, k) in order.into_iter().take(excess) {
        map.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_failures_then_growing_delay_never_permanent() {
        let t = Throttle::new(ThrottleConfig::per_account());
        let mut now = 1_000_000;
        for _ in 0..5 {
            assert_eq!(t.check("alice", now), Ok(()));
            t.failure("alice", now);
        }
        assert_eq!(t.check("alice", now), Ok(()), "5 failures are free");
        let mut last = 0;
        for i in 0..8 {
            t.failure("alice", now);
            let wait = t.check("alice", now).unwrap_err();
            assert_eq!(wait, 1000 << i);
            assert!(wait > last);
            last = wait;
            assert!(t.check("alice", now + wait - 1).is_err());
            now += wait;
            assert_eq!(t.check("alice", now), Ok(()), "never permanent");
        }
        assert_eq!(t.check("bob", now), Ok(()), "keys are independent");
    }

    #[test]
    fn cap_is_respected_and_success_resets() {
        let t = Throttle::new(ThrottleConfig::per_account());
        for _ in 0..100 {
            t.failure("k", 0);
        }
        assert_eq!(t.check("k", 0), Err(15 * 60 * 1000));
        assert_eq!(t.check("k", 15 * 60 * 1000), Ok(()));
        t.success("k");
        assert!(t.is_empty());
        for _ in 0..5 {
            t.failure("k", 0);
        }
        assert_eq!(t.check("k", 0), Ok(()), "counting restarted");
    }

    #[test]
    fn per_client_allows_twenty() {
        let t = Throttle::new(ThrottleConfig::per_client());
        for _ in 0..20 {
            t.failure("1.2.3.4", 0);
        }
        assert_eq!(t.check("1.2.3.4", 0), Ok(()));
        t.failure("1.2.3.4", 0);
        assert_eq!(t.check("1.2.3.4", 0), Err(1000));
    }

    #[test]
    fn disabled_never_throttles() {
        let t = Throttle::new(ThrottleConfig::disabled());
        for _ in 0..1000 {
            t.failure("k", 0);
        }
        assert_eq!(t.check("k", 0), Ok(()));
        assert!(t.is_empty());
    }

    #[test]
    fn memory_is_bounded_and_waiting_entries_survive_pruning() {
        let cfg = ThrottleConfig {
            free_failures: 0,
            max_entries: 50,
            ..ThrottleConfig::per_account()
        };
        let t = Throttle::new(cfg);
        for _ in 0..20 {
            t.failure("attacked", 0); // oldest entry, but waits until 900_000
        }
        for i in 0..800 {
            // Each of these waits 1 s and has expired by the next one.
            t.failure(&format!("k{i}"), i64::from(i) * 1000);
            assert!(t.len() <= 50);
        }
        assert!(
            t.check("attacked", 800_000).is_err(),
            "still-waiting entry kept"
        );
        // Even if every entry is still waiting, the bound holds.
        for i in 0..1000 {
            t.failure(&format!("w{i}"), 20_000);
            assert!(t.len() <= 50);
        }
    }
}
