//! DUR-5: the content-addressed artifact store.

use std::os::unix::fs::{PermissionsExt, symlink};

use airlock_files::{ArtifactStore, FileError};

use super::support::{files_under, sha256_hex};

fn fresh() -> (tempfile::TempDir, ArtifactStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = ArtifactStore::open(&dir.path().join("store")).unwrap();
    (dir, store)
}

#[test]
fn dur_5_open_creates_private_directories() {
    let (_dir, store) = fresh();
    for sub in ["tmp", "sha256"] {
        let meta = std::fs::metadata(store.root().join(sub)).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700, "{sub}");
    }
    // Opening again is fine.
    ArtifactStore::open(store.root()).unwrap();
}

#[test]
fn dur_5_put_publishes_under_the_digest_read_only() {
    let (_dir, store) = fresh();
    let bytes = b"hello artifact";
    let (digest, size) = store.put(&bytes[..], 1024).unwrap();
    assert_eq!((digest.as_str(), size), (sha256_hex(bytes).as_str(), 14));
    let path = store.path(&digest).unwrap();
    assert_eq!(
        path,
        store.root().join("sha256").join(&digest[..2]).join(&digest)
    );
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o400
    );
    assert!(files_under(&store.root().join("tmp")).is_empty());
}

#[test]
fn dur_5_same_content_twice_yields_one_blob() {
    let (_dir, store) = fresh();
    let a = store.put(&b"twice"[..], 1024).unwrap();
    let b = store.put(&b"twice"[..], 1024).unwrap();
    assert_eq!(a, b);
    assert_eq!(files_under(&store.root().join("sha256")).len(), 1);
    assert!(files_under(&store.root().join("tmp")).is_empty());
}

#[test]
fn dur_5_empty_content_is_a_blob_too() {
    let (_dir, store) = fresh();
    let (digest, size) = store.put(&b""[..], 0).unwrap();
    assert_eq!(
        digest,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(size, 0);
    assert!(store.path(&digest).is_some());
}

#[test]
fn dur_5_put_over_the_limit_fails_and_leaves_nothing() {
    let (_dir, store) = fresh();
    let err = store.put(&[0u8; 101][..], 100).unwrap_err();
    assert!(
        matches!(err, FileError::TooLarge { limit: 100, .. }),
        "{err}"
    );
    // An endless source is cut too, instead of filling the disk.
    let err = store.put(std::io::repeat(b'z'), 1 << 20).unwrap_err();
    assert_eq!(err.reason(), "output_too_large");
    assert!(files_under(store.root()).is_empty());
    // Positive control: exactly at the limit is fine.
    assert_eq!(store.put(&[0u8; 100][..], 100).unwrap().1, 100);
}

#[test]
fn dur_5_path_rejects_malformed_digests_and_traversal() {
    let (dir, store) = fresh();
    let (digest, _) = store.put(&b"x"[..], 10).unwrap();
    // Something a traversal would reach if the digest were used as a path.
    std::fs::write(dir.path().join("passwd"), b"root:x:0:0").unwrap();
    let bad = [
        "../../etc/passwd".to_owned(),
        "../../passwd".to_owned(),
        format!("../{}", &digest[3..]),
        digest.to_uppercase(),
        digest[..63].to_owned(),
        format!("{digest}0"),
        format!("{}/{}", &digest[..2], &digest),
        String::new(),
        "zz".repeat(32),
    ];
    for d in &bad {
        assert_eq!(store.path(d), None, "{d}");
        let err = store.verify(d).unwrap_err();
        assert_eq!(err.reason(), "output_bad_name", "{d}");
    }
    // Positive control, and a well-formed digest with no blob.
    assert!(store.path(&digest).is_some());
    assert_eq!(store.path(&"0".repeat(64)), None);
    assert_eq!(
        store.verify(&"0".repeat(64)).unwrap_err().reason(),
        "output_io"
    );
}

#[test]
fn dur_5_path_does_not_follow_a_planted_symlink() {
    let (dir, store) = fresh();
    std::fs::write(dir.path().join("elsewhere"), b"not a blob").unwrap();
    let digest = "ab".repeat(32);
    let shard = store.root().join("sha256").join("ab");
    std::fs::create_dir(&shard).unwrap();
    symlink(dir.path().join("elsewhere"), shard.join(&digest)).unwrap();
    assert_eq!(store.path(&digest), None);
    assert_eq!(store.verify(&digest).unwrap_err().reason(), "output_io");
}

#[test]
fn dur_5_verify_detects_tampering() {
    let (_dir, store) = fresh();
    let (digest, _) = store.put(&b"original"[..], 100).unwrap();
    assert!(store.verify(&digest).unwrap());
    let path = store.path(&digest).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&path, b"tampered").unwrap();
    assert!(!store.verify(&digest).unwrap());
}
