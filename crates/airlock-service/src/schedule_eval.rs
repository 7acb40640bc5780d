//! Evaluation of schedule triggers (RUN-6): given a five-field cron
//! expression, an IANA time zone and an instant, the next fire instant
//! strictly after it (and the last one at or before it).
//!
//! # Why `jiff`
//!
//! The time zone arithmetic uses `jiff` 1.x, and the cron matching is ours.
//! `jiff` reads the system time zone database (`/usr/share/zoneinfo`, the
//! one the operator keeps updated with the OS), reports an unknown zone as
//! an error value, and exposes exactly what DST handling needs: whether a
//! local time is unambiguous, in a gap or in a fold, with the offsets on
//! each side and the transition instants. `croner` would bring `chrono` and
//! `chrono-tz` (a second, compiled-in copy of the zone database that only
//! changes with a rebuild) and its own DST policy; the policy below is part
//! of our contract, so it is implemented here and tested directly.
//!
//! # Semantics
//!
//! - Syntax as in `docs/workers.md`: minute, hour, day of month, month
//!   (`1-12` or `jan`-`dec`), day of week (`0-7` or `sun`-`sat`, 0 and 7
//!   are Sunday); `*`, lists, ranges `a-b`, steps `/n`; `a/n` means `a-max/n`.
//! - Day of month and day of week: as in Vixie cron, a field is
//!   *unrestricted* when it starts with `*`. When both are restricted a day
//!   matches if **either** matches (`0 0 1 * mon` = every 1st and every
//!   Monday); otherwise both must match (the `*` one matches every day).
//! - Fields are matched against the **local wall-clock time** in the zone.
//! - The instant of a local time `c` is the first instant at which the
//!   zone's wall clock reaches `c`. Consequences:
//!   - a local time skipped by a spring-forward gap fires once, at the first
//!     instant after the gap (02:30 on the spring-forward day in
//!     `Europe/Paris` fires at 03:00 local, 01:00 UTC); several skipped times
//!     and the time right after the gap share that one instant and fire
//!     once;
//!   - a local time repeated by a fall-back fold fires once, at its first
//!     occurrence (02:30 on the fall-back day in `Europe/Paris` fires at
//!     02:30 +02:00, 00:30 UTC, not again at 02:30 +01:00).
//!
//!   This mapping is monotone (a later local time never gets an earlier
//!   instant), so fires are ordered like local times and never repeat.
//! - Searches are bounded: [`SEARCH_DAYS`] days (a little over 9 years,
//!   longer than the 8-year wait for a 29 February across a skipped century
//!   leap year). An expression that never matches (`0 0 31 2 *`) yields
//!   `None` after that search, never an endless loop.
//! - An unknown zone, or an expression that does not parse, is a
//!   [`ScheduleError`], never a panic.

use jiff::Timestamp;
use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{AmbiguousOffset, TimeZone};

/// How many days a search looks ahead (or back) before giving up.
pub const SEARCH_DAYS: u32 = 366 * 9 + 3;

/// Why a schedule cannot be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("cron expression {0}")]
    Cron(String),
    #[error("unknown time zone {0:?} (not in the time zone database)")]
    UnknownZone(String),
}

/// A parsed schedule: the sets of matching values and the zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    dom_star: bool,
    dow_star: bool,
    tz: TimeZone,
}

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// The next fire of `cron` in `timezone` strictly after `after_ms`.
pub fn next_fire(cron: &str, timezone: &str, after_ms: i64) -> Result<Option<i64>, ScheduleError> {
    Ok(Schedule::new(cron, timezone)?.next_after(after_ms))
}

impl Schedule {
    /// Parses `cron` and looks `timezone` up in the system database.
    pub fn new(cron: &str, timezone: &str) -> Result<Self, ScheduleError> {
        let parts: Vec<&str> = cron.split_ascii_whitespace().collect();
        let [mi, h, dom, mon, dow] = parts.as_slice() else {
            return Err(ScheduleError::Cron(format!(
                "{cron:?} has {} fields (expected 5)",
                parts.len()
            )));
        };
        let err = |name: &str, e: String| ScheduleError::Cron(format!("{cron:?}: {name} {e}"));
        let minutes = field(mi, 0, 59, &[]).map_err(|e| err("minute", e))?;
        let hours = field(h, 0, 23, &[]).map_err(|e| err("hour", e))?;
        let days = field(dom, 1, 31, &[]).map_err(|e| err("day of month", e))?;
        let months = field(mon, 1, 12, MONTHS).map_err(|e| err("month", e))?;
        let mut weekdays = field(dow, 0, 7, DAYS).map_err(|e| err("day of week", e))?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7);
        }
        // The manifest has already checked the name's shape (`UTC` or
        // `Area/City`); here it must also exist in the database.
        if timezone.is_empty() || timezone.len() > 128 {
            return Err(ScheduleError::UnknownZone(timezone.to_string()));
        }
        let tz = TimeZone::get(timezone)
            .map_err(|_| ScheduleError::UnknownZone(timezone.to_string()))?;
        Ok(Self {
            minutes,
            hours,
            days,
            months,
            weekdays,
            dom_star: dom.starts_with('*'),
            dow_star: dow.starts_with('*'),
            tz,
        })
    }

    fn day_matches(&self, d: Date) -> bool {
        if !bit(self.months, d.month()) {
            return false;
        }
        let dom = bit(self.days, d.day());
        let dow = bit(self.weekdays, d.weekday().to_sunday_zero_offset());
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// The first instant at which the zone's wall clock reaches `dt`.
    fn instant(&self, dt: DateTime) -> Option<i64> {
        let ts = match self.tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => offset.to_timestamp(dt).ok()?,
            // The first occurrence (the offset in force before the fold).
            AmbiguousOffset::Fold { before, .. } => before.to_timestamp(dt).ok()?,
            // `dt` read with the later offset lies before the transition;
            // the transition that follows it is the end of the gap.
            AmbiguousOffset::Gap { after, .. } => {
                let early = after.to_timestamp(dt).ok()?;
                self.tz.following(early).next()?.timestamp()
            }
        };
        Some(ts.as_millisecond())
    }

    fn times(&self) -> impl DoubleEndedIterator<Item = (i8, i8)> + '_ {
        (0i8..24)
            .filter(|h| bit(self.hours, *h))
            .flat_map(move |h| {
                (0i8..60)
                    .filter(|m| bit(self.minutes, *m))
                    .map(move |m| (h, m))
            })
    }

    /// The first fire strictly after `after_ms`; `None` when there is none
    /// within [`SEARCH_DAYS`].
    pub fn next_after(&self, after_ms: i64) -> Option<i64> {
        let after = Timestamp::from_millisecond(after_ms).ok()?;
        let local = self.tz.to_datetime(after);
        // Local times before the minute of `after` map to instants at or
        // before `after` (the mapping is monotone), so start there.
        let first = (local.hour(), local.minute());
        let mut date = local.date();
        for i in 0..SEARCH_DAYS {
            if self.day_matches(date) {
                for (h, m) in self.times() {
                    if i == 0 && (h, m) < first {
                        continue;
                    }
                    let dt = DateTime::from_parts(date, Time::new(h, m, 0, 0).ok()?);
                    let t = self.instant(dt)?;
                    if t > after_ms {
                        return Some(t);
                    }
                }
            }
            date = date.tomorrow().ok()?;
        }
        None
    }

    /// The last fire at or before `at_ms`; `None` when there is none within
    /// [`SEARCH_DAYS`].
    pub fn last_at_or_before(&self, at_ms: i64) -> Option<i64> {
        let at = Timestamp::from_millisecond(at_ms).ok()?;
        // After a fold the wall clock has already shown times later than
        // the current one; a day of margin covers every real fold.
        let mut date = self.tz.to_datetime(at).date().tomorrow().ok()?;
        for _ in 0..SEARCH_DAYS + 1 {
            if self.day_matches(date) {
                for (h, m) in self.times().rev() {
                    let dt = DateTime::from_parts(date, Time::new(h, m, 0, 0).ok()?);
                    let t = self.instant(dt)?;
                    if t <= at_ms {
                        return Some(t);
                    }
                }
            }
            date = date.yesterday().ok()?;
        }
        None
    }

    /// The most recent fire in `(after_ms, up_to_ms]`, if any. After a
    /// scheduler's downtime this is the one missed fire it catches up on.
    pub fn latest_in(&self, after_ms: i64, up_to_ms: i64) -> Option<i64> {
        // Cheap check first: usually nothing is due.
        let next = self.next_after(after_ms)?;
        if next > up_to_ms {
            return None;
        }
        self.last_at_or_before(up_to_ms)
            .filter(|t| *t > after_ms)
            .or(Some(next))
    }
}

fn bit(set: u64, v: i8) -> bool {
    u32::try_from(v).is_ok_and(|v| v < 64 && set & (1u64 << v) != 0)
}

fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 2 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn value(s: &str, min: u32, max: u32, names: &[&str]) -> Result<u32, String> {
    if let Some(n) = number(s) {
        return if (min..=max).contains(&n) {
            Ok(n)
        } else {
            Err(format!("value {s:?} is out of range {min}-{max}"))
        };
    }
    let lower = s.to_ascii_lowercase();
    let i = names
        .iter()
        .position(|n| *n == lower)
        .ok_or_else(|| format!("value {s:?} is not a number or a known name"))?;
    // Month names start at 1, day names at 0 (Sunday): both at `min`.
    Ok(u32::try_from(i).map_err(|e| e.to_string())? + min)
}

/// The set of values of one field, as bits.
fn field(part: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, String> {
    let mut set = 0u64;
    for item in part.split(',') {
        if item.is_empty() {
            return Err(format!("{part:?} has an empty list item"));
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let n = number(s).ok_or_else(|| format!("step {s:?} is not a number"))?;
                if n == 0 || n > max {
                    return Err(format!("step {s:?} is out of range 1-{max}"));
                }
                (r, Some(n))
            }
            None => (item, None),
        };
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, min, max, names)?, value(b, min, max, names)?)
        } else {
            let v = value(range, min, max, names)?;
            // `a/n` runs from a to the end of the field.
            (v, if step.is_some() { max } else { v })
        };
        if lo > hi {
            return Err(format!("range {range:?} runs backwards"));
        }
        let step = usize::try_from(step.unwrap_or(1)).map_err(|e| e.to_string())?;
        for v in (lo..=hi).step_by(step) {
            set |= 1u64 << v;
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Unix ms of an RFC 3339 instant.
    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_millisecond()
    }

    /// RFC 3339 UTC of Unix ms.
    fn utc(ms: i64) -> String {
        Timestamp::from_millisecond(ms).unwrap().to_string()
    }

    /// Local wall-clock time with offset, for readable assertions.
    fn local(ms: i64, tz: &str) -> String {
        let tz = TimeZone::get(tz).unwrap();
        let z = Timestamp::from_millisecond(ms)
            .unwrap()
            .to_zoned_datetime(tz);
        format!("{}{}", z.datetime(), z.offset())
    }

    /// Every fire in `(from, to]`, by repeated `next_after`.
    fn fires(cron: &str, tz: &str, from: &str, to: &str) -> Vec<i64> {
        let s = Schedule::new(cron, tz).unwrap();
        let (mut t, end) = (ms(from), ms(to));
        let mut out = Vec::new();
        while let Some(n) = s.next_after(t) {
            if n > end {
                break;
            }
            assert!(n > t, "strictly after");
            out.push(n);
            t = n;
        }
        out
    }

    #[test]
    fn run_6_every_15_minutes() {
        let f = fires(
            "*/15 * * * *",
            "UTC",
            "2026-05-01T10:07:00Z",
            "2026-05-01T11:00:00Z",
        );
        let got: Vec<String> = f.into_iter().map(utc).collect();
        assert_eq!(
            got,
            [
                "2026-05-01T10:15:00Z",
                "2026-05-01T10:30:00Z",
                "2026-05-01T10:45:00Z",
                "2026-05-01T11:00:00Z"
            ]
        );
        // Strictly after: a fire instant itself is not "next".
        let s = Schedule::new("*/15 * * * *", "UTC").unwrap();
        assert_eq!(
            s.next_after(ms("2026-05-01T10:15:00Z")),
            Some(ms("2026-05-01T10:30:00Z"))
        );
        assert_eq!(
            s.next_after(ms("2026-05-01T10:14:59.999Z")),
            Some(ms("2026-05-01T10:15:00Z"))
        );
    }

    #[test]
    fn run_6_weekdays_only() {
        // 2026-05-01 is a Friday.
        let f = fires(
            "0 9 * * mon-fri",
            "UTC",
            "2026-05-01T00:00:00Z",
            "2026-05-08T23:59:00Z",
        );
        let got: Vec<String> = f.into_iter().map(utc).collect();
        assert_eq!(
            got,
            [
                "2026-05-01T09:00:00Z",
                "2026-05-04T09:00:00Z",
                "2026-05-05T09:00:00Z",
                "2026-05-06T09:00:00Z",
                "2026-05-07T09:00:00Z",
                "2026-05-08T09:00:00Z"
            ]
        );
        // 1-5 is the same set; 0 and 7 are both Sunday.
        assert_eq!(
            fires(
                "0 9 * * 1-5",
                "UTC",
                "2026-05-01T00:00:00Z",
                "2026-05-08T23:59:00Z"
            )
            .len(),
            6
        );
        assert_eq!(
            fires(
                "0 9 * * 7",
                "UTC",
                "2026-05-01T00:00:00Z",
                "2026-05-31T23:59:00Z"
            ),
            fires(
                "0 9 * * 0",
                "UTC",
                "2026-05-01T00:00:00Z",
                "2026-05-31T23:59:00Z"
            ),
        );
    }

    #[test]
    fn run_6_day_of_month_or_day_of_week() {
        // Both restricted: the 13th OR any Friday (May 2026: Fridays are
        // 1, 8, 15, 22, 29; the 13th is a Wednesday).
        let days: Vec<String> = fires(
            "0 0 13 * fri",
            "UTC",
            "2026-04-30T12:00:00Z",
            "2026-05-31T23:59:00Z",
        )
        .into_iter()
        .map(|t| utc(t)[..10].to_string())
        .collect();
        assert_eq!(
            days,
            [
                "2026-05-01",
                "2026-05-08",
                "2026-05-13",
                "2026-05-15",
                "2026-05-22",
                "2026-05-29"
            ]
        );
        // Day of week `*`: only the 13th.
        assert_eq!(
            fires(
                "0 0 13 * *",
                "UTC",
                "2026-04-30T12:00:00Z",
                "2026-05-31T23:59:00Z"
            )
            .len(),
            1
        );
        // Day of month `*`: only Fridays.
        assert_eq!(
            fires(
                "0 0 * * fri",
                "UTC",
                "2026-04-30T12:00:00Z",
                "2026-05-31T23:59:00Z"
            )
            .len(),
            5
        );
        // A field starting with `*` counts as unrestricted (Vixie cron):
        // odd days AND Fridays.
        let days: Vec<String> = fires(
            "0 0 */2 * fri",
            "UTC",
            "2026-04-30T12:00:00Z",
            "2026-05-31T23:59:00Z",
        )
        .into_iter()
        .map(|t| utc(t)[..10].to_string())
        .collect();
        assert_eq!(days, ["2026-05-01", "2026-05-15", "2026-05-29"]);
    }

    #[test]
    fn run_6_month_names() {
        let got: Vec<String> = fires(
            "0 12 1 jan,JUL *",
            "UTC",
            "2026-01-01T12:00:00Z",
            "2028-01-01T12:00:00Z",
        )
        .into_iter()
        .map(utc)
        .collect();
        assert_eq!(
            got,
            [
                "2026-07-01T12:00:00Z",
                "2027-01-01T12:00:00Z",
                "2027-07-01T12:00:00Z",
                "2028-01-01T12:00:00Z"
            ]
        );
        assert_eq!(
            fires(
                "0 0 1 mar-may *",
                "UTC",
                "2026-01-01T00:00:00Z",
                "2026-12-31T00:00:00Z"
            ),
            fires(
                "0 0 1 3-5 *",
                "UTC",
                "2026-01-01T00:00:00Z",
                "2026-12-31T00:00:00Z"
            ),
        );
    }

    #[test]
    fn run_6_paris_spring_forward_fires_once_at_the_end_of_the_gap() {
        // 2026-03-29: 02:00 CET jumps to 03:00 CEST (01:00 UTC).
        let f = fires(
            "30 2 * * *",
            "Europe/Paris",
            "2026-03-27T12:00:00Z",
            "2026-03-31T12:00:00Z",
        );
        let got: Vec<String> = f.iter().map(|t| local(*t, "Europe/Paris")).collect();
        assert_eq!(
            got,
            [
                "2026-03-28T02:30:00+01",
                "2026-03-29T03:00:00+02",
                "2026-03-30T02:30:00+02",
                "2026-03-31T02:30:00+02"
            ]
        );
        assert_eq!(utc(f[1]), "2026-03-29T01:00:00Z");
        // Every skipped time and 03:00 itself share the one instant.
        let f = fires(
            "*/15 * * * *",
            "Europe/Paris",
            "2026-03-29T00:40:00Z",
            "2026-03-29T01:20:00Z",
        );
        let got: Vec<String> = f.into_iter().map(utc).collect();
        assert_eq!(
            got,
            [
                "2026-03-29T00:45:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T01:15:00Z"
            ]
        );
    }

    #[test]
    fn run_6_paris_fall_back_fires_once_at_the_first_occurrence() {
        // 2026-10-25: 03:00 CEST falls back to 02:00 CET (01:00 UTC).
        let f = fires(
            "30 2 * * *",
            "Europe/Paris",
            "2026-10-23T12:00:00Z",
            "2026-10-26T12:00:00Z",
        );
        let got: Vec<String> = f.iter().map(|t| local(*t, "Europe/Paris")).collect();
        assert_eq!(
            got,
            [
                "2026-10-24T02:30:00+02",
                "2026-10-25T02:30:00+02",
                "2026-10-26T02:30:00+01"
            ]
        );
        // Starting inside the second 02:xx hour: the first 02:30 is past,
        // and it is not repeated.
        let s = Schedule::new("30 2 * * *", "Europe/Paris").unwrap();
        assert_eq!(
            local(
                s.next_after(ms("2026-10-25T01:10:00Z")).unwrap(),
                "Europe/Paris"
            ),
            "2026-10-26T02:30:00+01"
        );
        // Every 15 minutes: the repeated hour fires only in its first pass.
        let got: Vec<String> = fires(
            "*/15 * * * *",
            "Europe/Paris",
            "2026-10-24T23:50:00Z",
            "2026-10-25T02:00:00Z",
        )
        .into_iter()
        .map(utc)
        .collect();
        assert_eq!(
            got,
            [
                "2026-10-25T00:00:00Z",
                "2026-10-25T00:15:00Z",
                "2026-10-25T00:30:00Z",
                "2026-10-25T00:45:00Z",
                "2026-10-25T02:00:00Z"
            ]
        );
    }

    #[test]
    fn run_6_new_york_across_both_changes() {
        // Spring: 2026-03-08 02:00 EST jumps to 03:00 EDT (07:00 UTC).
        let f = fires(
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T00:00:00Z",
            "2026-03-09T23:00:00Z",
        );
        let got: Vec<String> = f.iter().map(|t| local(*t, "America/New_York")).collect();
        assert_eq!(
            got,
            [
                "2026-03-07T02:30:00-05",
                "2026-03-08T03:00:00-04",
                "2026-03-09T02:30:00-04"
            ]
        );
        assert_eq!(utc(f[1]), "2026-03-08T07:00:00Z");
        // Fall: 2026-11-01 02:00 EDT falls back to 01:00 EST; 01:30 repeats.
        let f = fires(
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T00:00:00Z",
            "2026-11-02T23:00:00Z",
        );
        let got: Vec<String> = f.iter().map(|t| local(*t, "America/New_York")).collect();
        assert_eq!(
            got,
            [
                "2026-10-31T01:30:00-04",
                "2026-11-01T01:30:00-04",
                "2026-11-02T01:30:00-05"
            ]
        );
        // A time outside the changes is unaffected on the change days.
        assert_eq!(
            fires(
                "0 12 * * *",
                "America/New_York",
                "2026-10-31T20:00:00Z",
                "2026-11-01T20:00:00Z"
            )
            .into_iter()
            .map(utc)
            .collect::<Vec<_>>(),
            ["2026-11-01T17:00:00Z"]
        );
    }

    #[test]
    fn run_6_twenty_ninth_of_february() {
        let got: Vec<String> = fires(
            "0 0 29 2 *",
            "UTC",
            "2026-01-01T00:00:00Z",
            "2033-01-01T00:00:00Z",
        )
        .into_iter()
        .map(utc)
        .collect();
        assert_eq!(got, ["2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"]);
        // 2100 is not a leap year: 8 years without one, still found.
        let s = Schedule::new("0 0 29 feb *", "UTC").unwrap();
        assert_eq!(
            s.next_after(ms("2096-03-01T00:00:00Z")).map(utc),
            Some("2104-02-29T00:00:00Z".into())
        );
        assert_eq!(
            s.last_at_or_before(ms("2104-02-28T00:00:00Z")).map(utc),
            Some("2096-02-29T00:00:00Z".into())
        );
    }

    #[test]
    fn run_6_impossible_date_never_fires_and_the_search_ends() {
        for cron in ["0 0 31 2 *", "0 0 30 feb *", "0 0 31 4,6,9,11 *"] {
            let s = Schedule::new(cron, "Europe/Paris").unwrap();
            let start = std::time::Instant::now();
            assert_eq!(s.next_after(ms("2026-01-01T00:00:00Z")), None, "{cron}");
            assert_eq!(
                s.last_at_or_before(ms("2026-01-01T00:00:00Z")),
                None,
                "{cron}"
            );
            assert_eq!(s.latest_in(0, ms("2026-01-01T00:00:00Z")), None, "{cron}");
            assert!(start.elapsed() < std::time::Duration::from_secs(5));
        }
        // But 31 Feb OR a Monday fires (day-of-week OR).
        assert!(
            Schedule::new("0 0 31 2 mon", "UTC")
                .unwrap()
                .next_after(ms("2026-01-01T00:00:00Z"))
                .is_some()
        );
    }

    #[test]
    fn run_6_unknown_zone_and_bad_cron_are_errors() {
        assert_eq!(
            Schedule::new("* * * * *", "Mars/Olympus_Mons").err(),
            Some(ScheduleError::UnknownZone("Mars/Olympus_Mons".into()))
        );
        assert!(matches!(
            next_fire("* * * * *", "", 0),
            Err(ScheduleError::UnknownZone(_))
        ));
        for bad in [
            "",
            "* * * *",
            "60 * * * *",
            "*/0 * * * *",
            "5-1 * * * *",
            "* * * foo *",
            "* * 0 * *",
            "1,,2 * * * *",
        ] {
            assert!(
                matches!(Schedule::new(bad, "UTC"), Err(ScheduleError::Cron(_))),
                "{bad}"
            );
        }
        assert!(next_fire("0 0 * * *", "America/Argentina/Buenos_Aires", 0).is_ok());
    }

    #[test]
    fn run_6_last_at_or_before_and_latest_in() {
        let s = Schedule::new("*/15 * * * *", "Europe/Paris").unwrap();
        assert_eq!(
            s.last_at_or_before(ms("2026-05-01T10:14:00Z")).map(utc),
            Some("2026-05-01T10:00:00Z".into())
        );
        assert_eq!(
            s.last_at_or_before(ms("2026-05-01T10:15:00Z")).map(utc),
            Some("2026-05-01T10:15:00Z".into())
        );
        // Inside the repeated hour of a fold: the last fire is the first
        // pass's 02:45 (00:45 UTC), not a second-pass time.
        assert_eq!(
            s.last_at_or_before(ms("2026-10-25T01:20:00Z")).map(utc),
            Some("2026-10-25T00:45:00Z".into())
        );
        // Downtime: only the most recent missed fire.
        assert_eq!(
            s.latest_in(ms("2026-05-01T08:00:00Z"), ms("2026-05-01T10:20:00Z"))
                .map(utc),
            Some("2026-05-01T10:15:00Z".into())
        );
        assert_eq!(
            s.latest_in(ms("2026-05-01T10:15:00Z"), ms("2026-05-01T10:29:59Z")),
            None
        );
        let daily = Schedule::new("30 2 * * *", "Europe/Paris").unwrap();
        assert_eq!(
            daily
                .latest_in(ms("2026-03-28T12:00:00Z"), ms("2026-03-29T01:00:00Z"))
                .map(utc),
            Some("2026-03-29T01:00:00Z".into())
        );
    }
}
