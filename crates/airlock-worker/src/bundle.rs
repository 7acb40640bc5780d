//! Bundles on disk: a folder `workers/<id>/` with `worker.toml` and an entry
//! file (RUN-1, RUN-2).
//!
//! Loading is all-or-nothing: a bundle either passes every check and becomes
//! a [`Bundle`], or it is reported with its problems and skipped. Nothing here
//! executes, writes or watches anything.
//!
//! The entry is resolved once, at load, to an absolute canonical path that
//! must stay inside the bundle folder and be a regular file. That is a load-
//! time lint, not the run-time guarantee: the executor stages bundle files
//! through the bounded file layer (DUR-4) and the broker re-checks the
//! executable's identity before exec (SBX-2), so a folder edited after load
//! cannot widen what a run sees.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::{ManifestError, Problem};
use crate::manifest::{Manifest, RelPath, Runtime, WorkerKind};
use crate::names::WorkerId;

/// The manifest's file name inside a bundle.
pub const MANIFEST_FILE: &str = "worker.toml";
/// Largest agent prompt (`AGENT.md`, `SKILL.md`), in bytes.
pub const MAX_PROMPT_BYTES: u64 = 256 * 1024;

/// A loaded bundle. Built only by [`load_bundle`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Bundle {
    pub id: WorkerId,
    /// The bundle folder, absolute and canonical.
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// The entry file, absolute and canonical, inside `dir`.
    pub entry: PathBuf,
}

fn read_error(path: &Path, e: impl std::fmt::Display) -> ManifestError {
    ManifestError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Reads a regular file of at most `max` bytes (the limit is enforced on the
/// bytes actually read, not on a size the file reported earlier).
fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, String> {
    let file = fs::File::open(path).map_err(|e| e.to_string())?;
    // Checked on the opened file: what was a regular file when it was
    // looked up may have been swapped since.
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".into());
    }
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > max {
        return Err(format!("larger than {max} bytes"));
    }
    Ok(bytes)
}

/// Loads and checks one bundle folder.
pub fn load_bundle(dir: &Path) -> Result<Bundle, ManifestError> {
    let root = fs::canonicalize(dir).map_err(|e| read_error(dir, e))?;
    if !root.is_dir() {
        return Err(read_error(dir, "not a directory"));
    }
    // The folder name as the operator wrote it (a symlinked bundle folder
    // keeps its own name), else the canonical one (for `.` and `..`).
    let folder = dir
        .file_name()
        .or_else(|| root.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();

    let manifest_path = root.join(MANIFEST_FILE);
    let meta = fs::symlink_metadata(&manifest_path).map_err(|e| read_error(&manifest_path, e))?;
    if !meta.file_type().is_file() {
        return Err(read_error(
            &manifest_path,
            "not a regular file (symlinks are not followed)",
        ));
    }
    let bytes = read_bounded(&manifest_path, crate::manifest::MAX_MANIFEST_BYTES as u64)
        .map_err(|e| read_error(&manifest_path, e))?;
    let text = String::from_utf8(bytes).map_err(|_| read_error(&manifest_path, "not UTF-8"))?;
    let manifest = Manifest::from_toml(&text)?;

    let mut problems = Vec::new();
    if manifest.id.as_str() != folder {
        problems.push(Problem::new(
            "worker.id",
            format!(
                "{:?} does not match the folder name {folder:?} (a bundle lives in workers/<id>/)",
                manifest.id.as_str()
            ),
        ));
    }
    let entry = match resolve_entry(&root, &manifest.entry) {
        Ok(entry) => {
            if let Err(message) = check_entry_kind(&manifest, &entry) {
                problems.push(Problem::new("worker.entry", message));
            }
            Some(entry)
        }
        Err(message) => {
            problems.push(Problem::new("worker.entry", message));
            None
        }
    };
    match entry {
        Some(entry) if problems.is_empty() => Ok(Bundle {
            id: manifest.id.clone(),
            dir: root,
            manifest,
            entry,
        }),
        _ => Err(ManifestError::Invalid { problems }),
    }
}

/// Resolves the entry through symlinks; it must stay inside `root` and be a
/// regular file.
fn resolve_entry(root: &Path, rel: &RelPath) -> Result<PathBuf, String> {
    let joined = root.join(rel.as_str());
    let canon = fs::canonicalize(&joined).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{:?} does not exist", rel.as_str()),
        _ => format!("cannot resolve {:?}: {e}", rel.as_str()),
    })?;
    if !canon.starts_with(root) {
        return Err(format!(
            "{:?} resolves outside the bundle folder (through a symlink)",
            rel.as_str()
        ));
    }
    let meta = fs::metadata(&canon).map_err(|e| format!("cannot stat {:?}: {e}", rel.as_str()))?;
    if !meta.is_file() {
        return Err(format!("{:?} is not a regular file", rel.as_str()));
    }
    Ok(canon)
}

/// Kind-specific checks of the entry file.
fn check_entry_kind(manifest: &Manifest, entry: &Path) -> Result<(), String> {
    match &manifest.kind {
        WorkerKind::Script {
            runtime: Runtime::Native,
        } => check_executable(entry),
        WorkerKind::Script { .. } => Ok(()),
        WorkerKind::Agent { .. } => {
            let bytes = read_bounded(entry, MAX_PROMPT_BYTES)?;
            let text =
                String::from_utf8(bytes).map_err(|_| "the prompt is not UTF-8".to_string())?;
            if text.trim().is_empty() {
                return Err("the prompt is empty".into());
            }
            if manifest.entry.file_name() == "SKILL.md" {
                parse_skill_front_matter(&text).map(|_| ())
            } else {
                Ok(())
            }
        }
    }
}

#[cfg(unix)]
fn check_executable(entry: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(entry)
        .map_err(|e| e.to_string())?
        .permissions()
        .mode();
    if mode & 0o111 == 0 {
        return Err("a native entry must be executable (chmod +x)".into());
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_executable(_entry: &Path) -> Result<(), String> {
    Ok(())
}

/// The two fields airlock reads from a `SKILL.md` front matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkillFrontMatter {
    pub name: String,
    pub description: String,
}

/// Reads the YAML front matter of a `SKILL.md` minimally: the block between
/// the first two `---` lines, top-level `key: value` lines, optional single
/// or double quotes around the value. Indented lines and list items belong
/// to other keys and are skipped; `name` and `description` must be present,
/// single-line and non-empty. This is not a YAML parser and does not try to
/// be one: the harness only needs these two values.
pub(crate) fn parse_skill_front_matter(text: &str) -> Result<SkillFrontMatter, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("SKILL.md must start with YAML front matter (a first line ---)".into());
    }
    let mut name = None;
    let mut description = None;
    let mut closed = false;
    for (i, line) in lines.enumerate() {
        let line_no = i + 2;
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        let trimmed = line.trim();
        if trimmed.is_empty()
            || trimmed.starts_with('#')
            || line.starts_with([' ', '\t'])
            || trimmed.starts_with('-')
        {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!(
                "SKILL.md front matter line {line_no}: expected key: value"
            ));
        };
        let slot = match key.trim() {
            "name" => &mut name,
            "description" => &mut description,
            _ => continue,
        };
        let value = unquote(value.trim());
        if value.is_empty() || value == "|" || value == ">" || value.starts_with(['|', '>']) {
            return Err(format!(
                "SKILL.md front matter line {line_no}: {} must be a non-empty single-line value",
                key.trim()
            ));
        }
        if slot.is_some() {
            return Err(format!(
                "SKILL.md front matter line {line_no}: {} is set twice",
                key.trim()
            ));
        }
        *slot = Some(value.to_string());
    }
    if !closed {
        return Err("SKILL.md front matter is not closed by a --- line".into());
    }
    let name = name.ok_or("SKILL.md front matter has no name")?;
    let description = description.ok_or("SKILL.md front matter has no description")?;
    if name.chars().count() > 64 {
        return Err("SKILL.md front matter: name is longer than 64 characters".into());
    }
    if description.chars().count() > 1024 {
        return Err("SKILL.md front matter: description is longer than 1024 characters".into());
    }
    Ok(SkillFrontMatter { name, description })
}

fn unquote(v: &str) -> &str {
    for q in ['"', '\''] {
        if v.len() >= 2
            && let Some(inner) = v.strip_prefix(q).and_then(|r| r.strip_suffix(q))
        {
            return inner;
        }
    }
    v
}

/// Loads every bundle folder in `dir` (hidden entries and plain files are
/// skipped). Broken bundles are reported with their folder and skipped;
/// loaded bundles are sorted by id. A second bundle with an already-used id
/// is reported and skipped (folders are visited in path order).
pub fn load_workers_dir(dir: &Path) -> (Vec<Bundle>, Vec<(PathBuf, ManifestError)>) {
    let mut bundles: Vec<Bundle> = Vec::new();
    let mut errors = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return (bundles, vec![(dir.to_path_buf(), read_error(dir, e))]),
    };
    let mut folders = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => {
                if entry.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                let path = entry.path();
                // Follows a symlinked bundle folder; load_bundle applies the
                // same rules to whatever it points at.
                if fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
                    folders.push(path);
                }
            }
            Err(e) => errors.push((dir.to_path_buf(), read_error(dir, e))),
        }
    }
    folders.sort();
    for path in folders {
        match load_bundle(&path) {
            Ok(bundle) => {
                if let Some(first) = bundles.iter().find(|b| b.id == bundle.id) {
                    let error = ManifestError::DuplicateId {
                        id: bundle.id.to_string(),
                        first: first.dir.clone(),
                    };
                    errors.push((path, error));
                } else {
                    bundles.push(bundle);
                }
            }
            Err(e) => errors.push((path, e)),
        }
    }
    bundles.sort_by(|a, b| a.id.cmp(&b.id));
    (bundles, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_1_skill_front_matter_minimal_yaml() {
        let ok = "---\nname: triage\ndescription: \"Sort issues: by label\"\nlicense: MIT\nmetadata:\n  a: b\n---\n# Body\n";
        assert_eq!(
            parse_skill_front_matter(ok).unwrap(),
            SkillFrontMatter {
                name: "triage".into(),
                description: "Sort issues: by label".into()
            }
        );
        let cases = [
            ("# no front matter\n", "must start with"),
            ("---\nname: a\ndescription: b\n", "not closed"),
            ("---\ndescription: b\n---\n", "no name"),
            ("---\nname: a\n---\n", "no description"),
            ("---\nname: a\ndescription: |\n  long\n---\n", "single-line"),
            ("---\nname: a\nname: b\ndescription: c\n---\n", "set twice"),
            ("---\nname: ''\ndescription: c\n---\n", "non-empty"),
            ("---\njust text\n---\n", "expected key: value"),
        ];
        for (text, want) in cases {
            let e = parse_skill_front_matter(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}
