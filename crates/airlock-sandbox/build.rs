//! Names this build's sandbox init protocol (`AIRLOCK_SANDBOX_INIT_ID`): the crate's version and
//! a hash of its sources. The broker and the init it starts compare it, so an
//! `airlock-sandbox-init` left over from another build is never used (`src/init_binary.rs`).

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn main() {
    println!("cargo::rerun-if-changed=src");
    println!("cargo::rerun-if-changed=Cargo.toml");
    let mut paths = Vec::new();
    files(Path::new("src"), &mut paths);
    paths.push(PathBuf::from("Cargo.toml"));
    paths.sort();
    // FNV-1a, 64 bits: a fingerprint of the sources, not a security boundary (the init binary is
    // trusted like the airlock binary beside it).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for p in &paths {
        eat(p.to_string_lossy().as_bytes());
        eat(&[0]);
        eat(&std::fs::read(p).unwrap_or_default());
        eat(&[0]);
    }
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo::rustc-env=AIRLOCK_SANDBOX_INIT_ID={version}-{h:016x}");
}
