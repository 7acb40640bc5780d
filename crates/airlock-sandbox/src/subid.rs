//! The host ids a root broker gives its workloads (SBX-3: "non-root uid").
//!
//! A user namespace maps the workload's uid 1000 to one host uid. For an
//! unprivileged broker that is the invoking user (the only map it may
//! write). For a root broker it must not be 0: a workload that is host root
//! without capabilities still owns what it creates as root (a set-uid root
//! file left in a writable root is a local privilege escalation), passes
//! uid-only kernel checks, and is charged to root's per-user kernel counts.
//! So a root broker takes its workloads' uid and gid from a dedicated
//! subordinate range, the way container runtimes use `/etc/subuid`.
//!
//! Where the range comes from, first match wins:
//! 1. an explicit choice (`--subid-range FIRST:COUNT` or a user name),
//!    given to [`crate::Broker::with_subids`], else the same syntax in the
//!    environment variable [`ENV_VAR`] (so that every front end of a root
//!    process, `airlock up` included, honours it);
//! 2. the `/etc/subuid` and `/etc/subgid` entries of the user
//!    [`SUBID_OWNER`];
//! 3. the built-in range [`DEFAULT_RANGE`] (2000000000:65536), which lies
//!    above what `useradd` (100000–600100000) and `systemd-nspawn`
//!    (524288–1879048191) hand out and below systemd's foreign range.
//!
//! The workload uses the first uid and the first gid of its range; the rest
//! is reserved. A range that is malformed, below 65536, missing for the
//! named user, or that overlaps an account in `/etc/passwd` / `/etc/group`
//! or another user's subordinate range is an error naming the fix: there is
//! never a fallback to uid 0.
//!
//! What this module must not do: write any file, or decide anything for an
//! unprivileged broker (whose map is always its own uid).

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The environment variable read when no explicit choice was made.
pub const ENV_VAR: &str = "AIRLOCK_SUBID_RANGE";

/// The user whose `/etc/subuid` and `/etc/subgid` entries are airlock's own.
pub const SUBID_OWNER: &str = "airlock";

/// Ids below this are system and login accounts (and `nobody`, 65534).
pub const MIN_FIRST: u32 = 65_536;

/// The range used when nothing else is configured.
pub const DEFAULT_RANGE: IdRange = IdRange {
    first: 2_000_000_000,
    count: 65_536,
};

/// A contiguous id range, written `FIRST:COUNT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    pub first: u32,
    pub count: u32,
}

impl IdRange {
    fn last(self) -> u64 {
        u64::from(self.first) + u64::from(self.count) - 1
    }
    fn contains(self, id: u32) -> bool {
        id >= self.first && u64::from(id) <= self.last()
    }
    fn overlaps(self, other: IdRange) -> bool {
        u64::from(self.first) <= other.last() && u64::from(other.first) <= self.last()
    }
}

impl fmt::Display for IdRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.first, self.count)
    }
}

/// How the operator chose the range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SubidChoice {
    /// `/etc/subuid` + `/etc/subgid` of [`SUBID_OWNER`], else [`DEFAULT_RANGE`].
    #[default]
    Default,
    /// The same explicit range for uids and gids.
    Range(IdRange),
    /// The `/etc/subuid` and `/etc/subgid` entries of this user.
    User(String),
}

impl FromStr for SubidChoice {
    type Err = SubidError;
    fn from_str(s: &str) -> Result<Self, SubidError> {
        let syntax = || SubidError::Syntax(s.to_string());
        if let Some((a, b)) = s.split_once(':') {
            let first: u32 = a.parse().map_err(|_| syntax())?;
            let count: u32 = b.parse().map_err(|_| syntax())?;
            return Ok(Self::Range(IdRange { first, count }));
        }
        let valid_name = !s.is_empty()
            && s.len() <= 32
            && s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if valid_name {
            Ok(Self::User(s.to_string()))
        } else {
            Err(syntax())
        }
    }
}

/// The ids a root broker's workloads run as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxIds {
    pub uid: u32,
    pub gid: u32,
    pub uid_range: IdRange,
    pub gid_range: IdRange,
    /// Where the ranges came from, for the containment report.
    pub source: String,
}

/// Why no range could be used. Each message names the fix.
#[derive(Debug, thiserror::Error)]
pub enum SubidError {
    #[error("sandbox id range {0:?} is neither FIRST:COUNT nor a user name")]
    Syntax(String),
    #[error(
        "sandbox {kind} range {range} must start at {MIN_FIRST} or above, hold at least one id and end below 4294967295; pass another with --subid-range FIRST:COUNT (or AIRLOCK_SUBID_RANGE)"
    )]
    OutOfBounds { kind: &'static str, range: IdRange },
    #[error(
        "sandbox id range: user {user:?} has no entry in {file}; add one (e.g. usermod --add-subuids 2000000000-2000065535 --add-subgids 2000000000-2000065535 {user}) or pass --subid-range FIRST:COUNT (or AIRLOCK_SUBID_RANGE)"
    )]
    Missing { user: String, file: &'static str },
    #[error(
        "sandbox {kind} range {range} overlaps {what}: its workloads would share ids with it; pass a free range with --subid-range FIRST:COUNT (or AIRLOCK_SUBID_RANGE), or reserve one for user {SUBID_OWNER:?} in /etc/subuid and /etc/subgid"
    )]
    Overlap {
        kind: &'static str,
        range: IdRange,
        what: String,
    },
    #[error("cannot read {file}: {error}")]
    Read { file: &'static str, error: String },
}

/// The account databases the check reads.
#[derive(Debug, Default, Clone)]
pub struct IdDatabase {
    /// `(name, uid)` from `/etc/passwd`.
    pub users: Vec<(String, u32)>,
    /// `(name, gid)` from `/etc/group`.
    pub groups: Vec<(String, u32)>,
    /// `(owner, range)` from `/etc/subuid`.
    pub subuid: Vec<(String, IdRange)>,
    /// `(owner, range)` from `/etc/subgid`.
    pub subgid: Vec<(String, IdRange)>,
}

impl IdDatabase {
    /// Reads `/etc/passwd`, `/etc/group`, `/etc/subuid` and `/etc/subgid`
    /// (missing sub-id files are empty). Accounts served only by NSS
    /// modules (LDAP, sssd) are not seen.
    pub fn load() -> Result<Self, SubidError> {
        Ok(Self {
            users: read_accounts(Path::new("/etc/passwd"), "/etc/passwd")?,
            groups: read_accounts(Path::new("/etc/group"), "/etc/group")?,
            subuid: read_subids(Path::new("/etc/subuid"), "/etc/subuid")?,
            subgid: read_subids(Path::new("/etc/subgid"), "/etc/subgid")?,
        })
    }
}

fn read_file(path: &Path, file: &'static str) -> Result<String, SubidError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(SubidError::Read {
            file,
            error: e.to_string(),
        }),
    }
}

/// `name:x:ID:…` lines (passwd and group share the first three fields).
fn read_accounts(path: &Path, file: &'static str) -> Result<Vec<(String, u32)>, SubidError> {
    Ok(parse_accounts(&read_file(path, file)?))
}

fn parse_accounts(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id = f.nth(1)?.parse().ok()?;
            Some((name.to_string(), id))
        })
        .collect()
}

fn read_subids(path: &Path, file: &'static str) -> Result<Vec<(String, IdRange)>, SubidError> {
    Ok(parse_subids(&read_file(path, file)?))
}

/// `owner:FIRST:COUNT` lines (owner may be a name or a numeric uid).
fn parse_subids(text: &str) -> Vec<(String, IdRange)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let owner = f.next()?;
            let first = f.next()?.parse().ok()?;
            let count = f.next()?.parse().ok()?;
            Some((owner.to_string(), IdRange { first, count }))
        })
        .collect()
}

/// Resolves `choice` (or, for [`SubidChoice::Default`], [`ENV_VAR`] when
/// set) against the host's account files.
pub fn resolve(choice: &SubidChoice) -> Result<SandboxIds, SubidError> {
    let (choice, from_env) = match (choice, std::env::var(ENV_VAR)) {
        (SubidChoice::Default, Ok(v)) if !v.is_empty() => (v.parse()?, true),
        (c, _) => (c.clone(), false),
    };
    let mut ids = resolve_with(&choice, &IdDatabase::load()?)?;
    if from_env {
        ids.source = format!("{ENV_VAR} ({})", ids.source);
    }
    Ok(ids)
}

/// Resolves `choice` against `db` (the pure part of [`resolve`]).
pub fn resolve_with(choice: &SubidChoice, db: &IdDatabase) -> Result<SandboxIds, SubidError> {
    let entry = |list: &[(String, IdRange)], user: &str| {
        list.iter()
            .find(|(owner, _)| owner == user)
            .map(|(_, r)| *r)
    };
    let (uid_range, gid_range, owner, source) = match choice {
        SubidChoice::Range(r) => (
            *r,
            *r,
            SUBID_OWNER.to_string(),
            format!("--subid-range {r}"),
        ),
        SubidChoice::User(user) => {
            let u = entry(&db.subuid, user).ok_or_else(|| SubidError::Missing {
                user: user.clone(),
                file: "/etc/subuid",
            })?;
            let g = entry(&db.subgid, user).ok_or_else(|| SubidError::Missing {
                user: user.clone(),
                file: "/etc/subgid",
            })?;
            (
                u,
                g,
                user.clone(),
                format!("/etc/subuid and /etc/subgid of {user}"),
            )
        }
        SubidChoice::Default => {
            match (
                entry(&db.subuid, SUBID_OWNER),
                entry(&db.subgid, SUBID_OWNER),
            ) {
                (Some(u), Some(g)) => (
                    u,
                    g,
                    SUBID_OWNER.to_string(),
                    format!("/etc/subuid and /etc/subgid of {SUBID_OWNER}"),
                ),
                (Some(_), None) => {
                    return Err(SubidError::Missing {
                        user: SUBID_OWNER.into(),
                        file: "/etc/subgid",
                    });
                }
                (None, Some(_)) => {
                    return Err(SubidError::Missing {
                        user: SUBID_OWNER.into(),
                        file: "/etc/subuid",
                    });
                }
                (None, None) => (
                    DEFAULT_RANGE,
                    DEFAULT_RANGE,
                    SUBID_OWNER.to_string(),
                    "built-in default".to_string(),
                ),
            }
        }
    };
    for (kind, range, accounts, subs, file) in [
        ("uid", uid_range, &db.users, &db.subuid, "/etc/subuid"),
        ("gid", gid_range, &db.groups, &db.subgid, "/etc/subgid"),
    ] {
        if range.count == 0 || range.first < MIN_FIRST || range.last() >= u64::from(u32::MAX) {
            return Err(SubidError::OutOfBounds { kind, range });
        }
        if let Some((name, id)) = accounts.iter().find(|(_, id)| range.contains(*id)) {
            let what = if kind == "uid" { "user" } else { "group" };
            return Err(SubidError::Overlap {
                kind,
                range,
                what: format!("{what} {name:?} ({kind} {id})"),
            });
        }
        // The owner's own reservation is the range itself, or contains it.
        if let Some((other, r)) = subs
            .iter()
            .find(|(o, r)| *o != owner && *o != SUBID_OWNER && r.overlaps(range))
        {
            return Err(SubidError::Overlap {
                kind,
                range,
                what: format!("the range {r} of {other:?} in {file}"),
            });
        }
    }
    Ok(SandboxIds {
        uid: uid_range.first,
        gid: gid_range.first,
        uid_range,
        gid_range,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> IdDatabase {
        IdDatabase {
            users: parse_accounts(
                "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\nnobody:x:65534:65534::/:/usr/sbin/nologin\n",
            ),
            groups: parse_accounts("root:x:0:\nalice:x:1000:\nnogroup:x:65534:\n"),
            subuid: parse_subids("alice:100000:65536\n"),
            subgid: parse_subids("alice:100000:65536\n"),
        }
    }

    #[test]
    fn sbx_3_default_is_the_builtin_range_and_never_root() {
        let ids = resolve_with(&SubidChoice::Default, &db()).unwrap();
        assert_eq!((ids.uid, ids.gid), (2_000_000_000, 2_000_000_000));
        assert_eq!(ids.source, "built-in default");
    }

    #[test]
    fn sbx_3_airlock_entries_win_over_the_default() {
        let mut d = db();
        d.subuid.push((
            "airlock".into(),
            IdRange {
                first: 300_000,
                count: 65_536,
            },
        ));
        d.subgid.push((
            "airlock".into(),
            IdRange {
                first: 400_000,
                count: 65_536,
            },
        ));
        let ids = resolve_with(&SubidChoice::Default, &d).unwrap();
        assert_eq!((ids.uid, ids.gid), (300_000, 400_000));
        // Only one of the two files: a clear error, not the default.
        d.subgid.clear();
        let e = resolve_with(&SubidChoice::Default, &d).unwrap_err();
        assert!(e.to_string().contains("/etc/subgid"), "{e}");
        assert!(e.to_string().contains("usermod --add-subuids"), "{e}");
    }

    #[test]
    fn sbx_3_bad_ranges_are_refused_with_the_fix() {
        let bad = [
            ("0:65536", "must start at"),
            ("1000:1", "must start at"),
            ("4294967295:1", "end below"),
            ("4294967200:1000", "end below"),
            ("70000:0", "at least one id"),
            ("120000:10", "overlaps the range 100000:65536 of \"alice\""),
            ("65000:1000", "must start at"),
        ];
        for (s, needle) in bad {
            let c: SubidChoice = s.parse().unwrap();
            let e = resolve_with(&c, &db()).unwrap_err().to_string();
            assert!(e.contains(needle), "{s}: {e}");
            assert!(e.contains("--subid-range"), "{s}: {e}");
        }
        let mut d = db();
        d.users.push(("svc".into(), 3_000_000_005));
        let c: SubidChoice = "3000000000:65536".parse().unwrap();
        let e = resolve_with(&c, &d).unwrap_err().to_string();
        assert!(e.contains("user \"svc\" (uid 3000000005)"), "{e}");
        for s in ["", "1:2:3", "x:1", "Bob", "a b"] {
            assert!(s.parse::<SubidChoice>().is_err(), "{s:?}");
        }
        // Positive control: a free range passes.
        let c: SubidChoice = "3000000000:65536".parse().unwrap();
        assert_eq!(resolve_with(&c, &db()).unwrap().uid, 3_000_000_000);
    }

    #[test]
    fn sbx_3_a_named_user_without_entries_is_refused() {
        let c: SubidChoice = "carol".parse().unwrap();
        let e = resolve_with(&c, &db()).unwrap_err().to_string();
        assert!(e.contains("\"carol\" has no entry in /etc/subuid"), "{e}");
        // Positive control: alice has entries, and they do not overlap
        // themselves.
        let c: SubidChoice = "alice".parse().unwrap();
        assert_eq!(resolve_with(&c, &db()).unwrap().uid, 100_000);
    }
}
