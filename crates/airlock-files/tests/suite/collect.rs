//! DUR-4 / DUR-5: collecting an untrusted output folder into the store.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_files::{Budget, Collected, FileError, collect_into};
use nix::sys::stat::Mode;

use super::support::{Fixture, sha256_hex, within_timeout};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body";

fn collect(fx: &Fixture, budget: &Budget) -> Result<Vec<Collected>, FileError> {
    collect_into(fx.out(), budget, &fx.store)
}

fn record(rel_path: &str, bytes: &[u8], media_type: &'static str) -> Collected {
    Collected {
        rel_path: rel_path.to_owned(),
        size: bytes.len() as u64,
        sha256: sha256_hex(bytes),
        media_type,
    }
}

/// Collection fails with `reason`, publishes nothing and leaves nothing staged.
fn assert_rejected(fx: &Fixture, budget: &Budget, reason: &str) -> FileError {
    let err = collect(fx, budget).unwrap_err();
    assert_eq!(err.reason(), reason, "{err}");
    fx.assert_store_empty();
    fx.assert_sentinel_absent();
    err
}

#[test]
fn dur_4_normal_folder_is_collected_with_hashes_and_media_types() {
    let fx = Fixture::new();
    fx.write("result.json", br#"{"ok": true}"#);
    fx.write("report.txt", b"all good\n");
    fx.write("charts/plot.png", PNG);
    fx.write("charts/data/table.csv", b"a,b\n1,2\n");
    fx.write("bin/blob", b"\0\x01\x02\xff");
    fx.write("empty", b"");
    std::fs::create_dir_all(fx.out().join("charts/empty-dir")).unwrap();

    let got = collect(&fx, &Budget::default()).unwrap();

    assert_eq!(
        got,
        vec![
            record("bin/blob", b"\0\x01\x02\xff", "application/octet-stream"),
            record("charts/data/table.csv", b"a,b\n1,2\n", "text/csv"),
            record("charts/plot.png", PNG, "image/png"),
            record("empty", b"", "text/plain"),
            record("report.txt", b"all good\n", "text/plain"),
            record("result.json", br#"{"ok": true}"#, "application/json"),
        ]
    );
    // Every record names a published blob holding exactly those bytes; nothing is left staged.
    for c in &got {
        let path = fx.store.path(&c.sha256).unwrap();
        assert_eq!(sha256_hex(&std::fs::read(path).unwrap()), c.sha256);
        assert!(fx.store.verify(&c.sha256).unwrap());
    }
    assert_eq!(fx.blobs().len(), 6);
    assert!(fx.staged().is_empty());
}

#[test]
fn dur_4_collection_is_deterministic_and_dedups_identical_files() {
    let fx = Fixture::new();
    for name in ["b.txt", "a.txt", "c/a.txt", "a.txt.bak"] {
        fx.write(name, b"same bytes");
    }
    let first = collect(&fx, &Budget::default()).unwrap();
    let second = collect(&fx, &Budget::default()).unwrap();
    assert_eq!(first, second);
    let paths: Vec<_> = first.iter().map(|c| c.rel_path.as_str()).collect();
    assert_eq!(paths, ["a.txt", "a.txt.bak", "b.txt", "c/a.txt"]);
    assert_eq!(fx.blobs().len(), 1, "one blob for identical content");
}

#[test]
fn dur_4_empty_folder_yields_nothing() {
    let fx = Fixture::new();
    assert_eq!(collect(&fx, &Budget::default()).unwrap(), vec![]);
    fx.assert_store_empty();
}

#[test]
fn dur_4_symlink_to_host_file_is_rejected_and_never_read() {
    let fx = Fixture::new();
    fx.write("a-first.txt", b"legit output staged before the attack");
    symlink(fx.secret(), fx.out().join("leak.txt")).unwrap();
    let err = assert_rejected(&fx, &Budget::default(), "output_symlink");
    assert_eq!(err.to_string(), "leak.txt: symbolic links are not allowed");
}

#[test]
fn dur_4_symlinked_directory_is_rejected() {
    let fx = Fixture::new();
    symlink(fx.host.path(), fx.out().join("hostdir")).unwrap();
    let err = assert_rejected(&fx, &Budget::default(), "output_symlink");
    assert!(matches!(err, FileError::Symlink { ref path } if path == "hostdir"));
}

#[test]
fn dur_4_symlink_as_the_output_folder_itself_is_rejected() {
    let fx = Fixture::new();
    let link = fx.store_dir.path().join("out-link");
    symlink(fx.host.path(), &link).unwrap();
    let err = collect_into(&link, &Budget::default(), &fx.store).unwrap_err();
    assert_eq!(err.reason(), "output_symlink");
    fx.assert_store_empty();
    fx.assert_sentinel_absent();
}

#[test]
fn dur_4_fifo_is_rejected_without_blocking() {
    let fx = Fixture::new();
    fx.write("a.txt", b"before");
    nix::unistd::mkfifo(&fx.out().join("pipe"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
    let (out, store) = (fx.out().to_path_buf(), fx.store.clone());
    let err = within_timeout(move || collect_into(&out, &Budget::default(), &store)).unwrap_err();
    assert!(
        matches!(err, FileError::NotRegular { kind: "fifo", .. }),
        "{err}"
    );
    assert_eq!(err.reason(), "output_not_regular");
    fx.assert_store_empty();
}

#[test]
fn dur_4_socket_is_rejected() {
    let fx = Fixture::new();
    let _listener = UnixListener::bind(fx.out().join("sock")).unwrap();
    let err = assert_rejected(&fx, &Budget::default(), "output_not_regular");
    assert!(
        matches!(err, FileError::NotRegular { kind: "socket", .. }),
        "{err}"
    );
}

#[test]
fn dur_4_hard_link_to_a_host_file_is_rejected() {
    let fx = Fixture::new();
    std::fs::hard_link(fx.secret(), fx.out().join("innocent.txt")).unwrap();
    let err = assert_rejected(&fx, &Budget::default(), "output_hard_link");
    assert!(matches!(err, FileError::HardLink { ref path } if path == "innocent.txt"));
}

#[test]
fn dur_4_hard_link_rejection_has_a_positive_control() {
    // The same file, once the outside name is gone, has one link and is collected.
    let fx = Fixture::new();
    std::fs::hard_link(fx.secret(), fx.out().join("innocent.txt")).unwrap();
    std::fs::remove_file(fx.secret()).unwrap();
    let got = collect(&fx, &Budget::default()).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].rel_path, "innocent.txt");
}

#[test]
fn dur_4_too_many_files_is_rejected_and_the_limit_itself_passes() {
    let fx = Fixture::new();
    for i in 0..5 {
        fx.write(&format!("f{i}"), b"x");
    }
    let at_limit = Budget {
        max_files: 5,
        ..Budget::default()
    };
    assert_eq!(collect(&fx, &at_limit).unwrap().len(), 5);

    let fx = Fixture::new();
    for i in 0..6 {
        fx.write(&format!("f{i}"), b"x");
    }
    let err = assert_rejected(&fx, &at_limit, "output_too_many_files");
    assert!(matches!(err, FileError::TooManyFiles { limit: 5 }));
}

#[test]
fn dur_4_directories_count_toward_the_entry_budget() {
    let fx = Fixture::new();
    for i in 0..4 {
        std::fs::create_dir(fx.out().join(format!("d{i}"))).unwrap();
    }
    let budget = Budget {
        max_files: 3,
        ..Budget::default()
    };
    assert_rejected(&fx, &budget, "output_too_many_files");
}

#[test]
fn dur_4_file_over_per_file_budget_is_rejected_and_the_limit_itself_passes() {
    let budget = Budget {
        max_file_bytes: 1024,
        ..Budget::default()
    };
    let fx = Fixture::new();
    fx.write("exact.bin", &[7u8; 1024]);
    assert_eq!(collect(&fx, &budget).unwrap()[0].size, 1024);

    let fx = Fixture::new();
    fx.write("a-small.txt", b"fine");
    fx.write("big.bin", &[7u8; 1025]);
    let err = assert_rejected(&fx, &budget, "output_too_large");
    assert!(
        matches!(err, FileError::TooLarge { ref path, limit: 1024 } if path == "big.bin"),
        "{err}"
    );
}

#[test]
fn dur_4_big_file_with_small_budget_is_cut_not_copied() {
    // 8 MiB on disk, 64 KiB allowed: rejected, and nothing of it is left in the store.
    let fx = Fixture::new();
    fx.write("huge.bin", &vec![0xabu8; 8 << 20]);
    let budget = Budget {
        max_file_bytes: 64 << 10,
        ..Budget::default()
    };
    assert_rejected(&fx, &budget, "output_too_large");
}

#[test]
fn dur_4_file_growing_during_collection_never_exceeds_the_budget() {
    // A writer keeps appending while we collect. Whether we catch it at the size check or
    // while copying (which one is a race), we must never publish more than the budget.
    let fx = Fixture::new();
    let budget = Budget {
        max_file_bytes: 1 << 20,
        ..Budget::default()
    };
    let path = fx.out().join("growing.log");
    let mut file = std::fs::File::create(&path).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let chunk = [b'g'; 16 << 10];
            let mut written = 0usize;
            while !stop.load(Ordering::Relaxed) && written < 32 << 20 {
                file.write_all(&chunk).unwrap();
                written += chunk.len();
                if written == 512 << 10 {
                    ready_tx.send(()).unwrap();
                }
            }
        })
    };
    ready_rx.recv().unwrap();
    let result = collect(&fx, &budget);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    match result {
        Err(err) => {
            assert_eq!(err.reason(), "output_too_large", "{err}");
            fx.assert_store_empty();
        }
        Ok(got) => {
            // The copy finished before the file outgrew the budget: what was published is
            // exactly what was hashed, and within budget.
            assert_eq!(got.len(), 1);
            assert!(got[0].size <= budget.max_file_bytes);
            let blob = std::fs::read(fx.store.path(&got[0].sha256).unwrap()).unwrap();
            assert_eq!(blob.len() as u64, got[0].size);
            assert_eq!(sha256_hex(&blob), got[0].sha256);
        }
    }
}

#[test]
fn dur_4_total_over_budget_is_rejected() {
    let fx = Fixture::new();
    fx.write("a.bin", &[1u8; 60]);
    fx.write("b.bin", &[2u8; 60]);
    let budget = Budget {
        max_total_bytes: 100,
        max_file_bytes: 100,
        ..Budget::default()
    };
    let err = assert_rejected(&fx, &budget, "output_total_too_large");
    assert!(matches!(err, FileError::TotalTooLarge { limit: 100 }));

    let fits = Budget {
        max_total_bytes: 120,
        ..budget
    };
    assert_eq!(collect(&fx, &fits).unwrap().len(), 2);
}

#[test]
fn dur_4_too_deep_nesting_is_rejected_and_the_limit_itself_passes() {
    let budget = Budget {
        max_depth: 3,
        ..Budget::default()
    };
    let fx = Fixture::new();
    fx.write("a/b/c.txt", b"depth 3");
    assert_eq!(collect(&fx, &budget).unwrap()[0].rel_path, "a/b/c.txt");

    let fx = Fixture::new();
    fx.write("a/b/c/d.txt", b"depth 4");
    let err = assert_rejected(&fx, &budget, "output_too_deep");
    assert!(
        matches!(err, FileError::TooDeep { ref path } if path == "a/b/c/d.txt"),
        "{err}"
    );
}

#[test]
fn dur_4_invalid_utf8_name_is_rejected() {
    let fx = Fixture::new();
    let name = OsStr::from_bytes(b"bad\xffname\n.txt");
    std::fs::write(fx.out().join(name), b"x").unwrap();
    let err = assert_rejected(&fx, &Budget::default(), "output_bad_name");
    // The name is shown, but cannot smuggle raw bytes or newlines into a log line.
    assert_eq!(err.to_string(), "bad\u{fffd}name\\n.txt: invalid file name");
}

#[test]
fn dur_4_first_violation_wins_in_name_order() {
    let fx = Fixture::new();
    fx.write("a.txt", b"ok");
    symlink(fx.secret(), fx.out().join("b-link")).unwrap();
    nix::unistd::mkfifo(&fx.out().join("c-pipe"), Mode::S_IRUSR).unwrap();
    for _ in 0..3 {
        let err = collect(&fx, &Budget::default()).unwrap_err();
        assert!(
            matches!(err, FileError::Symlink { ref path } if path == "b-link"),
            "{err}"
        );
    }
    fx.assert_store_empty();
}
