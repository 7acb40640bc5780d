//! Architecture invariants of this crate, checked by reading its sources.

use std::fs;
use std::path::Path;

use airlock_vault::{DataKey, KeyDir, Redactor, SecretValue, Vault};

fn sources() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: Vec<(String, String)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .map(|p| (p.display().to_string(), fs::read_to_string(&p).unwrap()))
        .collect();
    files.sort();
    files
}

#[test]
fn key_1_the_vault_crate_neither_prints_nor_talks_to_a_database() {
    let forbidden = [
        "println!",
        "eprintln!",
        "print!(",
        "dbg!",
        "sqlx",
        "rusqlite",
        "postgres",
    ];
    let sources = sources();
    assert!(sources.len() >= 8, "control: the sources were found");
    for (path, text) in &sources {
        for word in forbidden {
            assert!(!text.contains(word), "{path} contains {word}");
        }
    }
}

#[test]
fn key_1_vault_types_can_be_shared_across_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Vault>();
    shareable::<KeyDir>();
    shareable::<DataKey>();
    shareable::<SecretValue>();
    shareable::<Redactor>();
}
