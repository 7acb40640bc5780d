//! RUN-1, RUN-2: bundles on disk. The id equals the folder name; the entry
//! stays inside the folder whatever symlinks say; a broken bundle is
//! reported and skipped, never half-loaded.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use airlock_worker::{ManifestError, load_bundle, load_workers_dir};

use super::{AGENT_SECTION, AGENT_WORKER, SCRIPT_WORKER, assert_problem, worker};

/// Writes `workers/<folder>/worker.toml` and, when given, the entry file.
fn bundle(root: &Path, folder: &str, manifest: &str, entry: Option<(&str, &str)>) -> PathBuf {
    let dir = root.join(folder);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("worker.toml"), manifest).unwrap();
    if let Some((path, content)) = entry {
        let p = dir.join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }
    dir
}

fn script_manifest(id: &str, entry: &str) -> String {
    worker(
        SCRIPT_WORKER,
        &[
            ("id", Some(&format!("{id:?}"))),
            ("entry", Some(&format!("{entry:?}"))),
        ],
    )
}

fn agent_manifest(entry: &str) -> String {
    format!(
        "{}{AGENT_SECTION}",
        worker(AGENT_WORKER, &[("entry", Some(&format!("{entry:?}")))])
    )
}

fn refused(dir: &Path) -> ManifestError {
    match load_bundle(dir) {
        Ok(b) => panic!("expected {} to be refused, loaded {b:?}", dir.display()),
        Err(e) => e,
    }
}

#[test]
fn run_1_valid_bundle_loads_with_canonical_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = bundle(
        tmp.path(),
        "demo",
        &script_manifest("demo", "main.py"),
        Some(("main.py", "print(1)\n")),
    );
    let b = load_bundle(&dir).unwrap();
    let root = fs::canonicalize(&dir).unwrap();
    assert_eq!(b.id.as_str(), "demo");
    assert_eq!(b.dir, root);
    assert_eq!(b.entry, root.join("main.py"));
    assert!(b.entry.is_absolute());
    assert_eq!(b.manifest.id, b.id);
}

#[test]
fn run_1_id_must_equal_folder_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = bundle(
        tmp.path(),
        "other",
        &script_manifest("demo", "main.py"),
        Some(("main.py", "")),
    );
    let err = refused(&dir);
    assert_problem(
        &err,
        "worker.id",
        "\"demo\" does not match the folder name \"other\"",
        "mismatch",
    );
    // Positive control: the same manifest in the right folder loads.
    let dir = bundle(
        tmp.path(),
        "demo",
        &script_manifest("demo", "main.py"),
        Some(("main.py", "")),
    );
    load_bundle(&dir).unwrap();
    // A trailing slash or `.` still means the folder's own name.
    load_bundle(&PathBuf::from(format!("{}/", dir.display()))).unwrap();
    load_bundle(&dir.join(".")).unwrap();
}

#[test]
fn run_1_entry_escaping_via_dot_dot_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("outside.py"), "print('escaped')\n").unwrap();
    let dir = bundle(
        tmp.path(),
        "demo",
        &script_manifest("demo", "../outside.py"),
        None,
    );
    assert_problem(
        &refused(&dir),
        "worker.entry",
        "\"..\" component",
        "dot-dot",
    );
}

#[test]
fn run_1_entry_escaping_via_symlink_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("evil.py"), "print('escaped')\n").unwrap();
    let dir = bundle(
        tmp.path(),
        "demo",
        &script_manifest("demo", "main.py"),
        None,
    );
    symlink(outside.join("evil.py"), dir.join("main.py")).unwrap();
    assert_problem(
        &refused(&dir),
        "worker.entry",
        "resolves outside the bundle folder",
        "file symlink",
    );

    // A symlinked directory on the way is followed too.
    let dir = bundle(
        tmp.path(),
        "demo2",
        &script_manifest("demo2", "lib/evil.py"),
        None,
    );
    symlink(&outside, dir.join("lib")).unwrap();
    assert_problem(
        &refused(&dir),
        "worker.entry",
        "resolves outside the bundle folder",
        "dir symlink",
    );

    // Positive control: a symlink that stays inside the folder is fine.
    let dir = bundle(
        tmp.path(),
        "demo3",
        &script_manifest("demo3", "main.py"),
        Some(("src/real.py", "")),
    );
    symlink("src/real.py", dir.join("main.py")).unwrap();
    let b = load_bundle(&dir).unwrap();
    assert_eq!(b.entry, fs::canonicalize(&dir).unwrap().join("src/real.py"));
}

#[test]
fn run_1_absolute_missing_and_non_regular_entries_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = bundle(
        tmp.path(),
        "abs",
        &script_manifest("abs", "/etc/passwd"),
        None,
    );
    assert_problem(&refused(&dir), "worker.entry", "absolute path", "absolute");

    let dir = bundle(
        tmp.path(),
        "missing",
        &script_manifest("missing", "main.py"),
        None,
    );
    assert_problem(
        &refused(&dir),
        "worker.entry",
        "\"main.py\" does not exist",
        "missing",
    );

    let dir = bundle(
        tmp.path(),
        "dangling",
        &script_manifest("dangling", "main.py"),
        None,
    );
    symlink("nowhere.py", dir.join("main.py")).unwrap();
    assert_problem(&refused(&dir), "worker.entry", "does not exist", "dangling");

    let dir = bundle(
        tmp.path(),
        "isdir",
        &script_manifest("isdir", "src"),
        Some(("src/x.py", "")),
    );
    assert_problem(
        &refused(&dir),
        "worker.entry",
        "not a regular file",
        "directory",
    );
}

#[test]
fn run_1_native_entry_must_be_executable() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = worker(
        SCRIPT_WORKER,
        &[
            ("entry", Some("\"bin/tool\"")),
            ("runtime", Some("\"native\"")),
        ],
    );
    let dir = bundle(
        tmp.path(),
        "demo",
        &manifest,
        Some(("bin/tool", "#!/bin/sh\n")),
    );
    assert_problem(
        &refused(&dir),
        "worker.entry",
        "must be executable",
        "not executable",
    );
    fs::set_permissions(dir.join("bin/tool"), fs::Permissions::from_mode(0o755)).unwrap();
    load_bundle(&dir).unwrap();
}

#[test]
fn run_1_agent_prompts_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // Positive controls.
    let dir = bundle(
        root,
        "demo",
        &agent_manifest("AGENT.md"),
        Some(("AGENT.md", "# Triage\nDo it.\n")),
    );
    load_bundle(&dir).unwrap();
    fs::remove_dir_all(&dir).unwrap();
    let skill = "---\nname: triage\ndescription: Sorts issues\n---\n# Triage\n";
    let dir = bundle(
        root,
        "demo",
        &agent_manifest("skills/SKILL.md"),
        Some(("skills/SKILL.md", skill)),
    );
    load_bundle(&dir).unwrap();
    fs::remove_dir_all(&dir).unwrap();

    for (label, entry, content, fragment) in [
        ("empty prompt", "AGENT.md", " \n\n", "the prompt is empty"),
        (
            "skill without front matter",
            "SKILL.md",
            "# Triage\n",
            "must start with YAML front matter",
        ),
        (
            "skill without description",
            "SKILL.md",
            "---\nname: triage\n---\nbody\n",
            "front matter has no description",
        ),
        (
            "skill without name",
            "SKILL.md",
            "---\ndescription: d\n---\nbody\n",
            "front matter has no name",
        ),
        ("prompt not utf-8", "AGENT.md", "\u{0}", ""),
    ] {
        let dir = bundle(root, "demo", &agent_manifest(entry), Some((entry, content)));
        if label == "prompt not utf-8" {
            fs::write(dir.join(entry), [0xff, 0xfe, 0x00]).unwrap();
            assert_problem(&refused(&dir), "worker.entry", "not UTF-8", label);
        } else {
            assert_problem(&refused(&dir), "worker.entry", fragment, label);
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    let dir = bundle(
        root,
        "demo",
        &agent_manifest("AGENT.md"),
        Some(("AGENT.md", "")),
    );
    fs::write(dir.join("AGENT.md"), "x".repeat(256 * 1024 + 1)).unwrap();
    assert_problem(
        &refused(&dir),
        "worker.entry",
        "larger than 262144 bytes",
        "huge prompt",
    );
}

#[test]
fn run_2_unreadable_manifests_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();

    let err = refused(&root.join("absent"));
    assert_eq!(err.code(), "bundle_unreadable");

    fs::create_dir(root.join("empty")).unwrap();
    let err = refused(&root.join("empty"));
    assert_eq!(err.code(), "bundle_unreadable");
    assert!(err.to_string().contains("worker.toml"), "{err}");

    // A symlinked worker.toml is not followed, even one pointing inside.
    let dir = root.join("linked");
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("real.toml"), script_manifest("linked", "main.py")).unwrap();
    fs::write(dir.join("main.py"), "").unwrap();
    symlink("real.toml", dir.join("worker.toml")).unwrap();
    let err = refused(&dir);
    assert!(err.to_string().contains("not a regular file"), "{err}");

    let dir = bundle(
        root,
        "big",
        &format!("# {}\n", "x".repeat(256 * 1024)),
        None,
    );
    assert!(refused(&dir).to_string().contains("larger than"));

    let dir = bundle(root, "latin1", "", None);
    fs::write(dir.join("worker.toml"), [0x69, 0x64, 0xe9]).unwrap();
    assert!(refused(&dir).to_string().contains("not UTF-8"));
}

#[test]
fn run_2_workers_dir_skips_broken_bundles_and_sorts_by_id() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    bundle(
        root,
        "zeta",
        &script_manifest("zeta", "main.py"),
        Some(("main.py", "")),
    );
    bundle(
        root,
        "alpha",
        &script_manifest("alpha", "main.py"),
        Some(("main.py", "")),
    );
    bundle(root, "broken", &script_manifest("broken", "main.py"), None);
    bundle(
        root,
        "mismatch",
        &script_manifest("other", "main.py"),
        Some(("main.py", "")),
    );
    bundle(root, "syntax", "[worker\n", None);
    bundle(root, ".hidden", "not even toml", None);
    fs::write(root.join("README.md"), "workers live here\n").unwrap();

    let (bundles, errors) = load_workers_dir(root);
    let ids: Vec<&str> = bundles.iter().map(|b| b.id.as_str()).collect();
    assert_eq!(ids, ["alpha", "zeta"]);
    let failed: Vec<(String, &str)> = errors
        .iter()
        .map(|(p, e)| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                e.code(),
            )
        })
        .collect();
    assert_eq!(
        failed,
        [
            ("broken".to_string(), "manifest_invalid"),
            ("mismatch".to_string(), "manifest_invalid"),
            ("syntax".to_string(), "manifest_syntax"),
        ]
    );
}

#[test]
fn run_2_missing_workers_dir_is_one_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (bundles, errors) = load_workers_dir(&tmp.path().join("nope"));
    assert!(bundles.is_empty());
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].1.code(), "bundle_unreadable");
}

#[test]
fn agt_5_a_bundle_that_asks_for_approvals_loads_with_them() {
    // `approvals.required` is enforced now (the run waits for a person), so
    // a worker that asks for it loads with the request intact.
    let tmp = tempfile::tempdir().unwrap();
    let asks = format!(
        "{}\n[approvals]\nrequired = true\nreason = \"sends mail\"\nttl_s = 120\n",
        script_manifest("asks", "main.py")
    );
    bundle(tmp.path(), "asks", &asks, Some(("main.py", "print(1)\n")));
    let plain = format!(
        "{}\n[approvals]\nrequired = false\n",
        script_manifest("plain", "main.py")
    );
    bundle(tmp.path(), "plain", &plain, Some(("main.py", "print(1)\n")));
    let (bundles, errors) = load_workers_dir(tmp.path());
    assert!(errors.is_empty(), "{errors:?}");
    let asks = bundles.iter().find(|b| b.id.as_str() == "asks").unwrap();
    assert!(asks.manifest.approvals.required);
    assert_eq!(
        asks.manifest.approvals.reason.as_deref(),
        Some("sends mail")
    );
    assert_eq!(asks.manifest.approvals.ttl_s(), 120);
    let plain = bundles.iter().find(|b| b.id.as_str() == "plain").unwrap();
    assert!(!plain.manifest.approvals.required);
    assert_eq!(
        plain.manifest.approvals.ttl_s(),
        airlock_worker::APPROVAL_TTL_DEFAULT_S
    );
    assert!(airlock_worker::UNENFORCED.is_empty());
}
