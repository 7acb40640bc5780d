//! Syntax of schedule triggers (RUN-6): a five-field cron expression and an
//! IANA-looking time zone name.
//!
//! This is a syntax check only, so that a typo is caught when the bundle is
//! loaded rather than when the scheduler first looks at it. Evaluating a
//! schedule (next fire time, daylight-saving gaps) belongs to the scheduler,
//! which also checks the zone against the real time zone database.

use std::fmt;

use serde::Serialize;

/// A cron expression that passed the five-field syntax check:
/// `minute hour day-of-month month day-of-week`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct CronExpr(String);

/// A time zone name that looks like an IANA zone (`UTC`, `Area/City`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Timezone(String);

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: MONTHS,
    },
    // 0 and 7 are both Sunday, as in Vixie cron.
    Field {
        name: "day of week",
        min: 0,
        max: 7,
        names: DAYS,
    },
];

impl CronExpr {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        if s.len() > 256 {
            return Err("cron expression is longer than 256 characters".into());
        }
        let parts: Vec<&str> = s.split_ascii_whitespace().collect();
        if parts.len() != 5 {
            return Err(format!(
                "{s:?} has {} fields (expected 5: minute hour day-of-month month day-of-week)",
                parts.len()
            ));
        }
        for (part, field) in parts.iter().zip(FIELDS.iter()) {
            check_field(part, field).map_err(|e| format!("{s:?}: {} {e}", field.name))?;
        }
        Ok(Self(parts.join(" ")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn check_field(part: &str, f: &Field) -> Result<(), String> {
    for item in part.split(',') {
        if item.is_empty() {
            return Err(format!("{part:?} has an empty list item"));
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (item, None),
        };
        if let Some(step) = step {
            let n = number(step).ok_or_else(|| format!("step {step:?} is not a number"))?;
            if n == 0 || n > f.max {
                return Err(format!("step {step:?} is out of range 1-{}", f.max));
            }
        }
        if range == "*" {
            continue;
        }
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (value(a, f)?, Some(value(b, f)?)),
            None => (value(range, f)?, None),
        };
        if let Some(hi) = hi
            && lo > hi
        {
            return Err(format!("range {range:?} runs backwards"));
        }
    }
    Ok(())
}

fn number(s: &str) -> Option<u32> {
    if s.is_empty() || s.len() > 2 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn value(s: &str, f: &Field) -> Result<u32, String> {
    if let Some(n) = number(s) {
        return if (f.min..=f.max).contains(&n) {
            Ok(n)
        } else {
            Err(format!("value {s:?} is out of range {}-{}", f.min, f.max))
        };
    }
    let lower = s.to_ascii_lowercase();
    match f.names.iter().position(|n| *n == lower) {
        // Month names start at 1, day names at 0 (Sunday).
        Some(i) => Ok(u32::try_from(i).unwrap_or(0) + f.min),
        None => Err(format!("value {s:?} is not a number or a known name")),
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Top-level areas of the IANA time zone database.
const TZ_AREAS: &[&str] = &[
    "Africa",
    "America",
    "Antarctica",
    "Arctic",
    "Asia",
    "Atlantic",
    "Australia",
    "Europe",
    "Indian",
    "Pacific",
    "Etc",
];

impl Timezone {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        if s == "UTC" {
            return Ok(Self(s.into()));
        }
        let bad =
            || format!("{s:?} is not a time zone (expected UTC or an IANA name like Europe/Paris)");
        let mut parts = s.split('/');
        let area = parts.next().unwrap_or_default();
        if !TZ_AREAS.contains(&area) {
            return Err(bad());
        }
        let rest: Vec<&str> = parts.collect();
        if rest.is_empty() || rest.len() > 2 {
            return Err(bad());
        }
        for part in rest {
            let ok = part.len() <= 64
                && part.starts_with(|c: char| c.is_ascii_alphabetic())
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'+'));
            if !ok {
                return Err(bad());
            }
        }
        Ok(Self(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Timezone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_6_cron_syntax() {
        for ok in [
            "* * * * *",
            "0 9 * * 1-5",
            "*/15 * * * *",
            "0 0 1 jan *",
            "30 4 1,15 * SUN",
            "0 0 * * 7",
            "0-30/5 8-18 * * mon-fri",
            "5/10 * * * *",
        ] {
            assert!(CronExpr::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "* * * *",
            "* * * * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "* * * 13 *",
            "* * * * 8",
            "*/0 * * * *",
            "5-1 * * * *",
            "* * ? * *",
            "@daily",
            "1,,2 * * * *",
            "* * * foo *",
            "* * L * *",
            "-1 * * * *",
        ] {
            assert!(CronExpr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn run_6_timezone_syntax() {
        for ok in [
            "UTC",
            "Europe/Paris",
            "America/Argentina/Buenos_Aires",
            "Etc/GMT+5",
            "America/Port-au-Prince",
        ] {
            assert!(Timezone::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "utc",
            "Paris",
            "Mars/Olympus",
            "Europe/",
            "Europe/Paris/",
            "Europe/../etc",
            "Europe/Pa ris",
            "CET",
            "Europe/a/b/c",
        ] {
            assert!(Timezone::parse(bad).is_err(), "{bad}");
        }
    }
}
