//! IAM-2 throttles over shared state: the policy is
//! `airlock_iam::throttle::ThrottleConfig`, the state a table in the store,
//! so every node on one database sees the same throttles (OPS-2).

use std::sync::atomic::Ordering;

use airlock_iam::throttle::ThrottleConfig;
use airlock_store::ThrottleKind;

use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// How often one process bounds the throttle table (per kind).
const PRUNE_EVERY_MS: i64 = 60_000;

impl Service {
    fn throttle_cfg(&self, kind: ThrottleKind) -> ThrottleConfig {
        match kind {
            ThrottleKind::Account => self.cfg.identity.account_throttle,
            ThrottleKind::Client => self.cfg.identity.client_throttle,
        }
    }

    /// The longest wait (ms) any of `keys` still owes at `now`, if any.
    pub(crate) async fn throttle_wait(
        &self,
        keys: &[(ThrottleKind, &str)],
        now: i64,
    ) -> Result<Option<i64>> {
        let mut longest = None;
        for &(kind, key) in keys {
            let cfg = self.throttle_cfg(kind);
            if cfg.is_disabled() {
                continue;
            }
            let next = self.store.throttle_next_allowed(kind, key).await.svc()?;
            if let Err(wait) = cfg.check(next, now) {
                longest = longest.max(Some(wait));
            }
        }
        Ok(longest)
    }

    /// Counts a failure of `key` (shared by every node).
    pub(crate) async fn throttle_failure(
        &self,
        kind: ThrottleKind,
        key: &str,
        now: i64,
    ) -> Result<()> {
        let cfg = self.throttle_cfg(kind);
        if cfg.is_disabled() {
            return Ok(());
        }
        self.store
            .throttle_failure(kind, key, now, &move |n| cfg.delay_after(n))
            .await
            .svc()?;
        self.maybe_prune_throttles(kind, now).await;
        Ok(())
    }

    /// Forgets `key` after a success.
    pub(crate) async fn throttle_success(&self, kind: ThrottleKind, key: &str) -> Result<()> {
        if self.throttle_cfg(kind).is_disabled() {
            return Ok(());
        }
        self.store.throttle_clear(kind, key).await.svc()
    }

    /// Bounds the shared table now and then (at most every
    /// [`PRUNE_EVERY_MS`] per process and kind).
    async fn maybe_prune_throttles(&self, kind: ThrottleKind, now: i64) {
        let last = match kind {
            ThrottleKind::Account => &self.last_throttle_prune[0],
            ThrottleKind::Client => &self.last_throttle_prune[1],
        };
        let seen = last.load(Ordering::Relaxed);
        if now.saturating_sub(seen) < PRUNE_EVERY_MS
            || last
                .compare_exchange(seen, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        let cfg = self.throttle_cfg(kind);
        let max = i64::try_from(cfg.max_entries).unwrap_or(i64::MAX);
        // A failed prune is retried at the next interval; until then the
        // table only holds a few more rows.
        let _ = self
            .store
            .prune_throttles(kind, now, now.saturating_sub(cfg.forget_after_ms()), max)
            .await;
    }
}
