//! IAM-2 login throttling policy: after a number of free failures each further failure doubles the
//! wait up to a cap. It slows guessing, never locks anyone out for good, and reveals nothing:
//! keys are opaque strings (the caller passes the normalized username whether or not the account
//! exists, and separately a client key).
//!
//! Only the policy lives here, as pure functions of a failure count and a clock. The state (one
//! row per key: failures, next allowed time, last failure) lives in the database
//! (`airlock_store::Store::throttle_*`), so that a throttle reached through one web node holds on
//! every other node sharing that database. Growth is bounded there: quiet keys are forgotten after
//! [`ThrottleConfig::forget_after_ms`] and the table is trimmed to `max_entries` keys per kind.

#[derive(Debug, Clone, Copy)]
pub struct ThrottleConfig {
    pub free_failures: u32,
    pub base_delay_ms: i64,
    pub max_delay_ms: i64,
    pub max_entries: usize,
}

const FIFTEEN_MIN_MS: i64 = 15 * 60 * 1000;
const ONE_DAY_MS: i64 = 24 * 60 * 60 * 1000;

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

    /// A disabled throttle neither checks nor records anything.
    pub fn is_disabled(&self) -> bool {
        self.max_delay_ms <= 0 || self.base_delay_ms <= 0 || self.max_entries == 0
    }

    /// The wait imposed right after the `failures`-th consecutive failure: none while
    /// `failures <= free_failures`, then `min(base * 2^(failures-free-1), max)`.
    pub fn delay_after(&self, failures: i64) -> i64 {
        if self.is_disabled() || failures <= i64::from(self.free_failures) {
            return 0;
        }
        let exp = (failures - i64::from(self.free_failures) - 1).clamp(0, 62);
        self.base_delay_ms
            .saturating_mul(1i64 << exp)
            .min(self.max_delay_ms)
    }

    /// How long a key with no new failure is remembered once its wait has passed: a day, so a
    /// patient guesser gets its free failures back at most once a day, and the table stays small.
    pub fn forget_after_ms(&self) -> i64 {
        ONE_DAY_MS.max(self.max_delay_ms)
    }

    /// `Err(retry_after_ms)` while `now_ms` is before `next_allowed_ms`, else `Ok(())`.
    pub fn check(&self, next_allowed_ms: Option<i64>, now_ms: i64) -> Result<(), i64> {
        match next_allowed_ms {
            Some(next) if !self.is_disabled() && now_ms < next => Err(next - now_ms),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays `n` failures at `now` the way the store applies them.
    fn after(cfg: &ThrottleConfig, n: i64, now: i64) -> Option<i64> {
        (1..=n)
            .map(|f| cfg.delay_after(f))
            .filter(|d| *d > 0)
            .map(|d| now + d)
            .max()
    }

    #[test]
    fn free_failures_then_growing_delay_never_permanent() {
        let cfg = ThrottleConfig::per_account();
        for f in 1..=5 {
            assert_eq!(cfg.delay_after(f), 0, "5 failures are free");
        }
        let mut last = 0;
        for i in 0..8 {
            let wait = cfg.delay_after(6 + i);
            assert_eq!(wait, 1000 << i);
            assert!(wait > last);
            last = wait;
            let now = 1_000_000;
            assert_eq!(cfg.check(Some(now + wait), now), Err(wait));
            assert!(cfg.check(Some(now + wait), now + wait - 1).is_err());
            assert_eq!(
                cfg.check(Some(now + wait), now + wait),
                Ok(()),
                "never permanent"
            );
        }
        assert_eq!(
            cfg.check(None, 0),
            Ok(()),
            "an unknown key waits for nothing"
        );
    }

    #[test]
    fn cap_is_respected() {
        let cfg = ThrottleConfig::per_account();
        assert_eq!(cfg.delay_after(100), 15 * 60 * 1000);
        assert_eq!(cfg.delay_after(i64::MAX), 15 * 60 * 1000);
        let next = after(&cfg, 100, 0);
        assert_eq!(cfg.check(next, 0), Err(15 * 60 * 1000));
        assert_eq!(cfg.check(next, 15 * 60 * 1000), Ok(()));
        assert!(cfg.forget_after_ms() >= cfg.max_delay_ms);
    }

    #[test]
    fn per_client_allows_twenty() {
        let cfg = ThrottleConfig::per_client();
        assert_eq!(after(&cfg, 20, 0), None);
        assert_eq!(cfg.check(after(&cfg, 21, 0), 0), Err(1000));
    }

    #[test]
    fn disabled_never_throttles() {
        let cfg = ThrottleConfig::disabled();
        assert!(cfg.is_disabled());
        assert_eq!(cfg.delay_after(1000), 0);
        assert_eq!(cfg.check(Some(i64::MAX), 0), Ok(()));
    }
}
