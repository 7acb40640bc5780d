//! Anti-rollback high-water marks (KEY-3), pinned in the key directory, outside the database.
//!
//! For every (workspace, secret name) the vault has seen written, `hwm.json` holds the highest
//! version recorded, whether the secret was deleted (a tombstone), and, after an accepted
//! restore, the highest version of the abandoned timeline. A global counter counts every
//! change. The file is authenticated with HMAC-SHA256 under a key derived (HKDF-SHA256) from a
//! KEK, named in the file, and written atomically.
//!
//! ```text
//! {
//!   "format": 1,
//!   "kek_version": 2,                    // KEK whose derived key computed "mac"
//!   "counter": 17,                       // global change counter
//!   "entries": [                         // sorted by (workspace, name), unique
//!     {"workspace": "ws-1", "name": "API_TOKEN", "version": 3},
//!     {"workspace": "ws-1", "name": "OLD", "version": 5, "deleted": true},
//!     {"workspace": "ws-2", "name": "DB_PASSWORD", "version": 2, "abandoned_through": 4}
//!   ],
//!   "mac": "<hex HMAC-SHA256 over label || 0x00 || compact JSON of the fields above>"
//! }
//! ```
//!
//! What the file cannot do: if someone restores an old `hwm.json` together with an old
//! database, the two agree and nothing is detected. Doing that needs write access to the key
//! directory, which holds the KEKs too: that is outside what a database-only attacker can do.
//!
//! This module is pure logic plus the file codec; the vault decides when to call it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::crypto::{self, HWM_MAC_LABEL};
use crate::error::{HwmProblem, RollbackFinding, VaultError};
use crate::fsutil;
use crate::keydir::KeyDir;
use crate::secret::{SecretName, check_workspace};

pub(crate) const HWM_FILE: &str = "hwm.json";
const HWM_FORMAT: u32 = 1;
const HWM_MAX_LEN: u64 = 256 * 1024 * 1024;

/// One secret as the store holds it: what `check_startup` and `accept_restore` compare.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordRef {
    pub workspace: String,
    pub name: SecretName,
    pub version: u64,
}

impl RecordRef {
    pub fn new(workspace: impl Into<String>, name: SecretName, version: u64) -> Self {
        RecordRef {
            workspace: workspace.into(),
            name,
            version,
        }
    }
}

impl From<&crate::envelope::SealedSecret> for RecordRef {
    fn from(sealed: &crate::envelope::SealedSecret) -> Self {
        RecordRef::new(
            sealed.workspace.clone(),
            sealed.name.clone(),
            sealed.version,
        )
    }
}

/// The high-water mark of one secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HwmMark {
    /// Highest version recorded (for a deleted secret: the version it was deleted at).
    pub version: u64,
    /// The secret was deleted; any record of it at or below `version` is refused.
    pub deleted: bool,
}

/// One change made by `accept_restore`, for the caller's audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HwmChange {
    pub workspace: String,
    pub name: SecretName,
    pub before: Option<HwmMark>,
    pub after: HwmMark,
}

/// What `check_startup` found that is not a rollback but worth knowing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartupReport {
    /// Records above their high-water mark: the store committed a write whose `record_write`
    /// did not happen (a crash in between). Reading them is allowed; calling `record_write`
    /// after verifying that they decrypt raises the mark.
    pub ahead: Vec<RecordRef>,
    /// Records the high-water marks have never seen (same cause, for a first version).
    pub unrecorded: Vec<RecordRef>,
    /// The global change counter.
    pub counter: u64,
}

type Key = (String, SecretName);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    version: u64,
    deleted: bool,
    /// After an accepted restore: versions in (version, abandoned_through] belong to the
    /// abandoned timeline and are refused; new writes start above it. 0 when none.
    abandoned_through: u64,
}

impl Entry {
    /// The highest version ever handed out for this secret.
    fn ceiling(&self) -> u64 {
        self.version.max(self.abandoned_through)
    }
    fn mark(&self) -> HwmMark {
        HwmMark {
            version: self.version,
            deleted: self.deleted,
        }
    }
}

/// The high-water marks in memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Marks {
    counter: u64,
    entries: BTreeMap<Key, Entry>,
}

fn key(workspace: &str, name: &SecretName) -> Key {
    (workspace.to_owned(), name.clone())
}

impl Marks {
    pub(crate) fn counter(&self) -> u64 {
        self.counter
    }

    pub(crate) fn mark(&self, workspace: &str, name: &SecretName) -> Option<HwmMark> {
        self.entries.get(&key(workspace, name)).map(Entry::mark)
    }

    /// `Some(expected)` when a record at `stored` must be refused.
    pub(crate) fn refusal(&self, workspace: &str, name: &SecretName, stored: u64) -> Option<u64> {
        let entry = self.entries.get(&key(workspace, name))?;
        if entry.deleted {
            // A record of a deleted secret at or below the tombstone is the old row coming back
            // (DELETE + INSERT of old bytes); a re-creation must use a higher version.
            return (stored <= entry.version).then_some(entry.version + 1);
        }
        let older = stored < entry.version;
        let abandoned = stored > entry.version && stored <= entry.abandoned_through;
        (older || abandoned).then_some(entry.version)
    }

    /// The version the next write of this secret must use. `stored` is the version of the
    /// store's current row, if any (it can be above the mark after a crash, see
    /// [`StartupReport::ahead`]).
    pub(crate) fn next_version(
        &self,
        workspace: &str,
        name: &SecretName,
        stored: Option<u64>,
    ) -> u64 {
        let ceiling = self
            .entries
            .get(&key(workspace, name))
            .map_or(0, Entry::ceiling);
        ceiling.max(stored.unwrap_or(0)).saturating_add(1)
    }

    /// The marks after a write of `version`; refused unless it exceeds every version handed
    /// out before.
    pub(crate) fn with_write(
        &self,
        workspace: &str,
        name: &SecretName,
        version: u64,
    ) -> Result<Marks, VaultError> {
        let current = self
            .entries
            .get(&key(workspace, name))
            .map_or(0, Entry::ceiling);
        if version <= current {
            return Err(VaultError::StaleWrite {
                workspace: workspace.to_owned(),
                name: name.clone(),
                version,
                current,
            });
        }
        let mut next = self.clone();
        next.counter = next.counter.saturating_add(1);
        next.entries.insert(
            key(workspace, name),
            Entry {
                version,
                deleted: false,
                abandoned_through: 0,
            },
        );
        Ok(next)
    }

    /// The marks after deleting the row at `version`: a tombstone at the highest version seen.
    pub(crate) fn with_delete(&self, workspace: &str, name: &SecretName, version: u64) -> Marks {
        let ceiling = self
            .entries
            .get(&key(workspace, name))
            .map_or(0, Entry::ceiling);
        let mut next = self.clone();
        next.counter = next.counter.saturating_add(1);
        next.entries.insert(
            key(workspace, name),
            Entry {
                version: ceiling.max(version),
                deleted: true,
                abandoned_through: 0,
            },
        );
        next
    }

    /// Compares the store's records with the marks.
    pub(crate) fn startup(&self, records: &[RecordRef]) -> (Vec<RollbackFinding>, StartupReport) {
        let mut findings = Vec::new();
        let mut report = StartupReport {
            counter: self.counter,
            ..StartupReport::default()
        };
        let mut present = BTreeSet::new();
        for record in records {
            present.insert(key(&record.workspace, &record.name));
            if let Some(expected) = self.refusal(&record.workspace, &record.name, record.version) {
                findings.push(RollbackFinding::Stale {
                    workspace: record.workspace.clone(),
                    name: record.name.clone(),
                    stored: record.version,
                    expected,
                });
                continue;
            }
            match self.entries.get(&key(&record.workspace, &record.name)) {
                None => report.unrecorded.push(record.clone()),
                Some(entry) if record.version > entry.version => report.ahead.push(record.clone()),
                Some(_) => {}
            }
        }
        for ((workspace, name), entry) in &self.entries {
            if !entry.deleted && !present.contains(&(workspace.clone(), name.clone())) {
                findings.push(RollbackFinding::Missing {
                    workspace: workspace.clone(),
                    name: name.clone(),
                    expected: entry.version,
                });
            }
        }
        (findings, report)
    }

    /// The marks that accept `records` as the truth, and what changed. Versions the abandoned
    /// timeline reached stay refused and are skipped by new writes; secrets absent from
    /// `records` become tombstones, so their newer rows cannot be brought back either.
    pub(crate) fn restored(&self, records: &[RecordRef]) -> (Marks, Vec<HwmChange>) {
        let mut entries: BTreeMap<Key, Entry> = BTreeMap::new();
        for record in records {
            let k = key(&record.workspace, &record.name);
            let version = entries
                .get(&k)
                .map_or(record.version, |e| e.version.max(record.version));
            let ceiling = self.entries.get(&k).map_or(0, Entry::ceiling);
            entries.insert(
                k,
                Entry {
                    version,
                    deleted: false,
                    abandoned_through: if ceiling > version { ceiling } else { 0 },
                },
            );
        }
        for (k, old) in &self.entries {
            if !entries.contains_key(k) {
                entries.insert(
                    k.clone(),
                    Entry {
                        version: old.ceiling(),
                        deleted: true,
                        abandoned_through: 0,
                    },
                );
            }
        }
        let mut changes = Vec::new();
        for (k, after) in &entries {
            let before = self.entries.get(k);
            if before != Some(after) {
                changes.push(HwmChange {
                    workspace: k.0.clone(),
                    name: k.1.clone(),
                    before: before.map(Entry::mark),
                    after: after.mark(),
                });
            }
        }
        let next = Marks {
            counter: self.counter.saturating_add(1),
            entries,
        };
        (next, changes)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HwmFile {
    format: u32,
    kek_version: u32,
    counter: u64,
    entries: Vec<FileEntry>,
    mac: String,
}

/// The authenticated part of [`HwmFile`], serialized compactly as the MAC's input.
#[derive(Serialize)]
struct Body<'a> {
    format: u32,
    kek_version: u32,
    counter: u64,
    entries: &'a [FileEntry],
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    workspace: String,
    // A string, not a SecretName: the MAC is checked before any field is interpreted.
    name: String,
    version: u64,
    #[serde(default, skip_serializing_if = "is_false")]
    deleted: bool,
    #[serde(default, skip_serializing_if = "is_zero")]
    abandoned_through: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn body_bytes(kek_version: u32, counter: u64, entries: &[FileEntry]) -> Result<Vec<u8>, String> {
    serde_json::to_vec(&Body {
        format: HWM_FORMAT,
        kek_version,
        counter,
        entries,
    })
    .map_err(|e| e.to_string())
}

/// Reads and authenticates `hwm.json`. `Ok(None)` when the file does not exist; otherwise the
/// marks and the KEK version that authenticated them.
pub(crate) fn load(dir: &Path, keydir: &KeyDir) -> Result<Option<(Marks, u32)>, VaultError> {
    let path = dir.join(HWM_FILE);
    let refuse = |problem| VaultError::Hwm {
        path: path.clone(),
        problem,
    };
    let malformed = |reason: String| refuse(HwmProblem::Malformed { reason });
    let Some(bytes) = fsutil::read_checked(&path, HWM_MAX_LEN)? else {
        return Ok(None);
    };
    if bytes.len() as u64 > HWM_MAX_LEN {
        return Err(malformed("file too large".into()));
    }
    let file: HwmFile = serde_json::from_slice(&bytes).map_err(|e| malformed(e.to_string()))?;
    if file.format != HWM_FORMAT {
        return Err(malformed(format!("unsupported format {}", file.format)));
    }
    let kek = keydir.kek(file.kek_version).map_err(|_| {
        refuse(HwmProblem::UnusableKey {
            kek_version: file.kek_version,
        })
    })?;
    let mac_key = crypto::hwm_mac_key(kek.bytes());
    let tag = decode_hex(&file.mac).ok_or_else(|| malformed("mac is not 64 hex digits".into()))?;
    let body = body_bytes(file.kek_version, file.counter, &file.entries).map_err(malformed)?;
    if !crypto::verify_mac(&mac_key, &[HWM_MAC_LABEL, &[0], &body], &tag) {
        return Err(refuse(HwmProblem::BadMac));
    }
    // Authenticated: the content was written by this vault, but check it anyway.
    let mut entries = BTreeMap::new();
    for entry in file.entries {
        check_workspace(&entry.workspace).map_err(|e| malformed(e.to_string()))?;
        let name = SecretName::parse(&entry.name).map_err(|e| malformed(e.to_string()))?;
        let value = Entry {
            version: entry.version,
            deleted: entry.deleted,
            abandoned_through: entry.abandoned_through,
        };
        if entries.insert((entry.workspace, name), value).is_some() {
            return Err(malformed("repeated entry".into()));
        }
    }
    Ok(Some((
        Marks {
            counter: file.counter,
            entries,
        },
        file.kek_version,
    )))
}

/// Writes `marks` to `hwm.json`, authenticated under `kek_version`, atomically.
pub(crate) fn store(
    dir: &Path,
    marks: &Marks,
    keydir: &KeyDir,
    kek_version: u32,
) -> Result<(), VaultError> {
    let path = dir.join(HWM_FILE);
    let malformed = |reason: String| VaultError::Hwm {
        path: path.clone(),
        problem: HwmProblem::Malformed { reason },
    };
    let kek = keydir.kek(kek_version)?;
    let mac_key = crypto::hwm_mac_key(kek.bytes());
    let entries: Vec<FileEntry> = marks
        .entries
        .iter()
        .map(|((workspace, name), e)| FileEntry {
            workspace: workspace.clone(),
            name: name.as_str().to_owned(),
            version: e.version,
            deleted: e.deleted,
            abandoned_through: e.abandoned_through,
        })
        .collect();
    let body = body_bytes(kek_version, marks.counter, &entries).map_err(malformed)?;
    let tag = crypto::mac(&mac_key, &[HWM_MAC_LABEL, &[0], &body]);
    let file = HwmFile {
        format: HWM_FORMAT,
        kek_version,
        counter: marks.counter,
        entries,
        mac: encode_hex(&tag),
    };
    let bytes = serde_json::to_vec_pretty(&file).map_err(|e| malformed(e.to_string()))?;
    fsutil::write_atomic(dir, HWM_FILE, &bytes)
}

fn encode_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}

fn decode_hex(text: &str) -> Option<[u8; 32]> {
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 32];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        out[i] = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}
