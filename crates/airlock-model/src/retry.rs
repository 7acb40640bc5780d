//! When and how long to wait before trying a model request again.
//!
//! Retried: 429 (honouring `retry-after-ms`, `retry-after` in seconds or as
//! an HTTP date), 5xx including Anthropic's 529 "overloaded", transport
//! errors, timeouts, and streams that closed before their terminal event.
//! Never retried: other 4xx, a refused destination, a response too large,
//! output that is not the format's JSON. The wait is exponential with
//! jitter, bounded per wait and in total; a `retry-after` longer than what
//! is left of the total is not waited for: the request fails at once with
//! the provider's answer.
//!
//! Time comes from a [`Clock`], so tests record the waits instead of
//! sleeping through them and never depend on timing.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::profile::RetryLimits;

/// The time source of the retry loop.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Wall-clock time (to read `retry-after` dates).
    fn now(&self) -> SystemTime;
    /// Waits `d`.
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// A number in `[0, 1)` for jitter.
    fn jitter(&self) -> f64;
}

/// The real clock: tokio's timer and a per-process random jitter.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep(d))
    }
    fn jitter(&self) -> f64 {
        // The standard library's randomly keyed hasher is random enough to
        // spread retries; no cryptographic property is needed here.
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
        );
        (h.finish() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A clock for tests: waits return at once and are recorded; the time and
/// the jitter are fixed.
#[derive(Debug)]
pub struct ManualClock {
    now: SystemTime,
    jitter: f64,
    slept: Mutex<Vec<Duration>>,
}

impl ManualClock {
    pub fn new(now: SystemTime, jitter: f64) -> Self {
        Self {
            now,
            jitter: jitter.clamp(0.0, 0.999_999),
            slept: Mutex::new(Vec::new()),
        }
    }

    /// Every wait asked for, in order.
    pub fn slept(&self) -> Vec<Duration> {
        self.slept.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        self.now
    }
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        if let Ok(mut s) = self.slept.lock() {
            s.push(d);
        }
        Box::pin(std::future::ready(()))
    }
    fn jitter(&self) -> f64 {
        self.jitter
    }
}

/// The backoff schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub limits: RetryLimits,
    /// The first wait (before jitter); doubled each attempt.
    pub base_delay: Duration,
    /// The largest single computed wait.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new(RetryLimits::default())
    }
}

impl RetryPolicy {
    pub fn new(limits: RetryLimits) -> Self {
        Self {
            limits,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }

    /// The wait before attempt `attempt + 1` after attempt `attempt`
    /// (1-based) failed: the server's `retry-after` when it gave one,
    /// otherwise `base × 2^(attempt-1)` capped at `max_delay`, of which the
    /// upper half is jittered ("equal jitter": never less than half, so a
    /// crowd of clients spreads out without any retrying at once).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
        if let Some(d) = retry_after {
            return d;
        }
        let exp = self
            .base_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let capped = exp.min(self.max_delay);
        let half = capped / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// Reads `retry-after-ms` (OpenAI) or `retry-after` (seconds or an HTTP
/// date, RFC 9110) from response headers. A date in the past means "now";
/// anything unparsable is ignored (the backoff applies).
pub fn retry_after(headers: &http::HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0 && *v < 1e10)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = v.parse::<f64>()
        && secs.is_finite()
        && (0.0..1e10).contains(&secs)
    {
        return Some(Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                http::HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    type Case = (&'static [(&'static str, &'static str)], Option<Duration>);

    #[test]
    fn agt_2_retry_after_forms() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2026 07:28:00 GMT").expect("date");
        let cases: &[Case] = &[
            (&[("retry-after", "7")], Some(Duration::from_secs(7))),
            (&[("retry-after", " 0 ")], Some(Duration::ZERO)),
            (&[("retry-after", "1.5")], Some(Duration::from_millis(1500))),
            (
                &[("retry-after", "Wed, 21 Oct 2026 07:28:30 GMT")],
                Some(Duration::from_secs(30)),
            ),
            (
                &[("retry-after", "Wed, 21 Oct 2026 07:27:00 GMT")],
                Some(Duration::ZERO),
            ),
            (
                &[("retry-after-ms", "250")],
                Some(Duration::from_millis(250)),
            ),
            (
                &[("retry-after-ms", "250"), ("retry-after", "9")],
                Some(Duration::from_millis(250)),
            ),
            (
                &[("retry-after-ms", "-1"), ("retry-after", "9")],
                Some(Duration::from_secs(9)),
            ),
            (&[("retry-after", "soon")], None),
            (&[("retry-after", "-3")], None),
            (&[("retry-after", "1e400")], None),
            (&[], None),
        ];
        for (h, want) in cases {
            assert_eq!(retry_after(&headers(h), now), *want, "{h:?}");
        }
    }

    #[test]
    fn agt_2_backoff_is_exponential_jittered_and_capped() {
        let p = RetryPolicy::default();
        // Jitter 0: the lower half; jitter ~1: the full value.
        assert_eq!(p.delay(1, None, 0.0), Duration::from_millis(250));
        assert_eq!(p.delay(2, None, 0.0), Duration::from_millis(500));
        assert_eq!(p.delay(3, None, 0.0), Duration::from_millis(1000));
        assert_eq!(p.delay(3, None, 1.0), Duration::from_millis(2000));
        assert_eq!(p.delay(30, None, 1.0), Duration::from_secs(30), "capped");
        assert_eq!(p.delay(u32::MAX, None, 0.5), Duration::from_millis(22_500));
        // A server's retry-after is used as given.
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(7)), 0.9),
            Duration::from_secs(7)
        );
        let j = SystemClock.jitter();
        assert!((0.0..1.0).contains(&j));
    }
}
