//! Architecture invariants that a grep can check (see ARCHITECTURE.md).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn only_the_sandbox_crate_contains_unsafe() {
    let mut files = Vec::new();
    rust_files(&crates_dir(), &mut files);
    assert!(files.len() > 10, "the scan found the sources");
    let offenders: Vec<_> = files
        .iter()
        .filter(|p| !p.to_string_lossy().contains("airlock-sandbox/src"))
        .filter(|p| !p.ends_with("tidy.rs"))
        .filter(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .any(|l| {
                    l.contains("unsafe {") || l.contains("unsafe fn") || l.contains("unsafe impl")
                })
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "unsafe outside airlock-sandbox: {offenders:?}"
    );
}

#[test]
fn every_unsafe_block_in_the_sandbox_has_a_safety_comment() {
    let mut files = Vec::new();
    rust_files(&crates_dir().join("airlock-sandbox/src"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("unsafe {") && !l.trim_start().starts_with("//") {
                let context = lines[i.saturating_sub(4)..i].join("\n");
                assert!(
                    context.contains("SAFETY:") || l.contains("SAFETY:"),
                    "{}:{} unsafe block without a SAFETY comment",
                    f.display(),
                    i + 1
                );
            }
        }
    }
}

#[test]
fn library_crates_never_print() {
    let mut files = Vec::new();
    rust_files(&crates_dir().join("airlock-sandbox/src"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for needle in ["println!", "eprintln!", "print!(", "eprint!("] {
            assert!(!text.contains(needle), "{} prints ({needle})", f.display());
        }
    }
}

#[test]
fn only_the_store_crate_contains_sql() {
    let mut files = Vec::new();
    rust_files(&crates_dir(), &mut files);
    let offenders: Vec<_> = files
        .iter()
        .filter(|p| {
            let s = p.to_string_lossy();
            s.contains("/src/") && !s.contains("airlock-store/")
        })
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            ["SELECT ", "INSERT INTO", "UPDATE runs", "DELETE FROM"]
                .iter()
                .any(|k| text.contains(k))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "SQL outside airlock-store: {offenders:?}"
    );
}
