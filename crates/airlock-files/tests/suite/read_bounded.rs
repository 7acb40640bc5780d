//! DUR-4 / RUN-3: reading one small file (`result.json`) from an untrusted output folder.

use std::os::unix::fs::symlink;

use airlock_files::{FileError, read_bounded};
use nix::sys::stat::Mode;

use super::support::{Fixture, SENTINEL, within_timeout};

const MAX: u64 = 64 << 10;

#[test]
fn dur_4_read_bounded_reads_a_present_file() {
    let fx = Fixture::new();
    fx.write("result.json", br#"{"answer": 42}"#);
    fx.write("nested/deeper/result.json", b"[]");
    assert_eq!(
        read_bounded(fx.out(), "result.json", MAX).unwrap(),
        Some(br#"{"answer": 42}"#.to_vec())
    );
    assert_eq!(
        read_bounded(fx.out(), "nested/deeper/result.json", MAX).unwrap(),
        Some(b"[]".to_vec())
    );
}

#[test]
fn dur_4_read_bounded_absent_is_none() {
    let fx = Fixture::new();
    fx.write("file", b"x");
    for rel in ["result.json", "missing-dir/result.json", "file/result.json"] {
        assert_eq!(read_bounded(fx.out(), rel, MAX).unwrap(), None, "{rel}");
    }
}

#[test]
fn dur_4_read_bounded_rejects_traversal_and_absolute_paths() {
    let fx = Fixture::new();
    // The folder under test is `out/`; a real file sits one level up, so `..` would find
    // something if it were followed.
    let out = fx.out().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(fx.out().join("escape.json"), SENTINEL).unwrap();
    let rels = [
        "../escape.json",
        "..",
        ".",
        "./result.json",
        "a/../result.json",
        "/etc/passwd",
        "",
        "a//b",
        "a/",
        "nul\0byte",
    ];
    for rel in rels {
        let err = read_bounded(&out, rel, MAX).unwrap_err();
        assert_eq!(err.reason(), "output_bad_name", "{rel:?}: {err}");
    }
    // Positive control: the same file is readable from its own folder.
    assert!(
        read_bounded(fx.out(), "escape.json", MAX)
            .unwrap()
            .is_some()
    );
}

#[test]
fn dur_4_read_bounded_rejects_a_symlink_to_a_host_file() {
    let fx = Fixture::new();
    symlink(fx.secret(), fx.out().join("result.json")).unwrap();
    let err = read_bounded(fx.out(), "result.json", MAX).unwrap_err();
    assert_eq!(err.reason(), "output_symlink");
    assert!(!err.to_string().contains("HOST-SECRET"));
}

#[test]
fn dur_4_read_bounded_rejects_a_symlinked_parent_directory() {
    let fx = Fixture::new();
    std::fs::write(fx.host.path().join("result.json"), SENTINEL).unwrap();
    symlink(fx.host.path(), fx.out().join("sub")).unwrap();
    let err = read_bounded(fx.out(), "sub/result.json", MAX).unwrap_err();
    assert!(
        matches!(err, FileError::Symlink { ref path } if path == "sub"),
        "{err}"
    );
}

#[test]
fn dur_4_read_bounded_rejects_a_fifo_without_blocking() {
    let fx = Fixture::new();
    nix::unistd::mkfifo(&fx.out().join("result.json"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
    let out = fx.out().to_path_buf();
    let err = within_timeout(move || read_bounded(&out, "result.json", MAX)).unwrap_err();
    assert!(
        matches!(err, FileError::NotRegular { kind: "fifo", .. }),
        "{err}"
    );
}

#[test]
fn dur_4_read_bounded_rejects_a_hard_link() {
    let fx = Fixture::new();
    std::fs::hard_link(fx.secret(), fx.out().join("result.json")).unwrap();
    let err = read_bounded(fx.out(), "result.json", MAX).unwrap_err();
    assert_eq!(err.reason(), "output_hard_link");
}

#[test]
fn dur_4_read_bounded_rejects_a_directory_in_place_of_the_file() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.out().join("result.json")).unwrap();
    let err = read_bounded(fx.out(), "result.json", MAX).unwrap_err();
    assert!(
        matches!(
            err,
            FileError::NotRegular {
                kind: "directory",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn dur_4_read_bounded_enforces_the_byte_budget() {
    let fx = Fixture::new();
    fx.write("exact.json", &[b' '; 100]);
    fx.write("over.json", &[b' '; 101]);
    assert_eq!(
        read_bounded(fx.out(), "exact.json", 100)
            .unwrap()
            .unwrap()
            .len(),
        100
    );
    let err = read_bounded(fx.out(), "over.json", 100).unwrap_err();
    assert!(
        matches!(err, FileError::TooLarge { limit: 100, .. }),
        "{err}"
    );
}
