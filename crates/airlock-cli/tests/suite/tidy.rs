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

/// Plaintext leaves the vault's types (`expose_secret`) only inside the vault
/// crate and in `airlock-service/src/secrets.rs`, and there only into a
/// buffer that is wiped when dropped (`Zeroizing`, `SecretBytes`), never into
/// a plain `Vec` or `String`.
#[test]
fn key_1_vault_plaintext_is_only_copied_into_wiping_buffers() {
    let mut files = Vec::new();
    rust_files(&crates_dir(), &mut files);
    let mut seen_in_service = 0;
    for f in &files {
        let path = f.to_string_lossy();
        if !path.contains("/src/") || path.contains("airlock-vault/src") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            if !line.contains(".expose_secret()") || line.trim_start().starts_with("//") {
                continue;
            }
            let at = format!("{}:{}", f.display(), i + 1);
            assert!(
                path.ends_with("airlock-service/src/secrets.rs"),
                "{at}: plaintext taken out of the vault outside secrets.rs: {line}"
            );
            seen_in_service += 1;
            let copies = line.contains("to_vec()") || line.contains("to_owned()");
            assert!(
                !copies || line.contains("Zeroizing::new(") || line.contains("SecretBytes::new("),
                "{at}: plaintext copied into a buffer that is not wiped: {line}"
            );
        }
    }
    // Positive control: the scan saw the service's real call sites.
    assert!(seen_in_service >= 2, "the scan found no call site");
}
