//! ARCHITECTURE.md mirrors the role table kept as data in `roles::TABLE`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[test]
fn architecture_md_mirrors_the_role_table() {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ARCHITECTURE.md"),
    )
    .unwrap();
    let table = airlock_iam::roles::markdown_table();
    assert!(
        doc.contains(&table),
        "ARCHITECTURE.md's role table differs from roles::TABLE; paste this:\n{table}"
    );
}
