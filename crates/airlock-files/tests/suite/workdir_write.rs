//! AGT-3 / DUR-4: `write_file` over a work directory the workload writes too.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt, symlink};
use std::process::Command;

use airlock_files::FileError;
use airlock_files::workdir::{Usage, WorkDirBudget, WorkDirError, WriteOpts};
use nix::sys::stat::Mode;

use super::support::{SENTINEL, Work, root_or_skip, sha256_hex, within_timeout};

fn opts() -> WriteOpts {
    WriteOpts::default()
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[test]
fn agt_3_workdir_write_creates_parents_and_replaces_atomically() {
    let w = Work::new();
    let written =
        w.wd.write("src/app/main.rs", b"fn main() {}\n", &opts())
            .unwrap();
    assert_eq!(written.sha256, sha256_hex(b"fn main() {}\n"));
    assert_eq!(written.bytes, 13);
    let p = w.path().join("src/app/main.rs");
    assert_eq!(std::fs::read(&p).unwrap(), b"fn main() {}\n");
    assert_eq!(mode(&p), 0o644);
    assert_eq!(mode(&w.path().join("src")), 0o755);
    assert_eq!(mode(&w.path().join("src/app")), 0o755);

    // Replacing: a new inode each time, the old one untouched (a reader holding it keeps the
    // old bytes), and the replaced file's mode kept unless one is asked for.
    let held = std::fs::File::open(&p).unwrap();
    let before = std::fs::metadata(&p).unwrap().ino();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o750)).unwrap();
    w.wd.write("src/app/main.rs", b"v2", &opts()).unwrap();
    assert_ne!(std::fs::metadata(&p).unwrap().ino(), before);
    assert_eq!(std::fs::read(&p).unwrap(), b"v2");
    assert_eq!(mode(&p), 0o750);
    let mut old = String::new();
    std::io::Read::read_to_string(&mut &held, &mut old).unwrap();
    assert_eq!(old, "fn main() {}\n");
    // An explicit mode wins; set-uid, set-gid and sticky bits are never applied.
    let explicit = WriteOpts {
        file_mode: Some(0o7755),
        dir_mode: 0o3777,
        ..opts()
    };
    w.wd.write("bin/run.sh", b"#!/bin/sh\n", &explicit).unwrap();
    assert_eq!(mode(&w.path().join("bin/run.sh")), 0o755);
    assert_eq!(mode(&w.path().join("bin")), 0o777);
    // Empty files are files.
    w.wd.write("empty", b"", &opts()).unwrap();
    assert_eq!(std::fs::read(w.path().join("empty")).unwrap(), b"");
    assert!(w.temp_leftovers().is_empty(), "{:?}", w.temp_leftovers());
}

#[test]
fn dur_4_workdir_write_never_follows_a_symlinked_parent() {
    let w = Work::new();
    symlink(w.host.path(), w.path().join("sub")).unwrap();
    // A dangling link: following it would create the host directory `made`.
    symlink(w.host.path().join("made"), w.path().join("dangling")).unwrap();
    std::fs::create_dir(w.path().join("real")).unwrap();
    symlink(w.host.path(), w.path().join("real/deeper")).unwrap();

    for (rel, link) in [
        ("sub/planted", "sub"),
        ("sub/secret", "sub"),
        ("dangling/x", "dangling"),
        ("dangling/a/b/c", "dangling"),
        ("real/deeper/x", "real/deeper"),
    ] {
        let err = w.wd.write(rel, b"pwned", &opts()).unwrap_err();
        assert!(
            matches!(&err, WorkDirError::File(FileError::Symlink { path }) if path == link),
            "{rel}: {err}"
        );
    }
    w.assert_host_untouched();
    assert!(w.temp_leftovers().is_empty());

    // Positive control: a path-based write through the same names does land on the host.
    std::fs::write(w.path().join("sub/planted"), b"pwned").unwrap();
    assert_ne!(
        w.host_files(),
        vec![("secret".to_owned(), SENTINEL.to_vec())]
    );
}

#[test]
fn dur_4_workdir_write_never_writes_through_a_final_symlink() {
    let w = Work::new();
    symlink(w.host.path().join("secret"), w.path().join("config")).unwrap();
    symlink(w.host.path().join("new"), w.path().join("dangling")).unwrap();
    for rel in ["config", "dangling"] {
        let err = w.wd.write(rel, b"pwned", &opts()).unwrap_err();
        assert_eq!(err.reason(), "symlink", "{rel}: {err}");
        // The link is still there, unchanged.
        assert!(
            std::fs::symlink_metadata(w.path().join(rel))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
    w.assert_host_untouched();
    assert!(w.temp_leftovers().is_empty());
}

#[test]
fn dur_4_workdir_write_replaces_a_hard_link_without_touching_the_other_name() {
    let w = Work::new();
    std::fs::hard_link(w.host.path().join("secret"), w.path().join("linked")).unwrap();
    w.wd.write("linked", b"new bytes", &opts()).unwrap();
    // The host name keeps its bytes; the work-directory name is a new, single-link file.
    w.assert_host_untouched();
    let meta = std::fs::metadata(w.path().join("linked")).unwrap();
    assert_eq!(meta.nlink(), 1);
    assert_eq!(
        std::fs::read(w.path().join("linked")).unwrap(),
        b"new bytes"
    );
    assert_eq!(
        std::fs::metadata(w.host.path().join("secret"))
            .unwrap()
            .nlink(),
        1
    );

    // Positive control: writing through the name in place (what `open(O_TRUNC)` does) changes
    // the other name's bytes, which is what the check above would catch.
    let victim = w.host.path().join("victim");
    std::fs::write(&victim, b"original").unwrap();
    std::fs::hard_link(&victim, w.path().join("victim-link")).unwrap();
    std::fs::write(w.path().join("victim-link"), b"changed").unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"changed");
}

#[test]
fn dur_4_workdir_write_refuses_fifo_socket_and_directory_targets() {
    let w = Work::new();
    nix::unistd::mkfifo(&w.path().join("pipe"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
    let _sock = std::os::unix::net::UnixListener::bind(w.path().join("sock")).unwrap();
    std::fs::create_dir(w.path().join("dir")).unwrap();
    w.plant("file", b"f");
    let wd = std::sync::Arc::new(w.wd);
    let wd2 = std::sync::Arc::clone(&wd);
    let got = within_timeout(move || {
        ["pipe", "sock", "dir", "file/below"].map(|rel| {
            wd2.write(rel, b"x", &WriteOpts::default())
                .unwrap_err()
                .reason()
        })
    });
    assert_eq!(
        got,
        [
            "not_regular",
            "not_regular",
            "is_a_directory",
            "not_a_directory"
        ]
    );
    assert!(
        std::fs::symlink_metadata(w.dir.path().join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[test]
fn dur_4_workdir_write_enforces_the_byte_and_entry_budget() {
    let w = Work::with_budget(WorkDirBudget {
        max_bytes: 100,
        max_entries: 5,
        max_depth: 4,
    });
    // What the sandbox wrote counts as much as what the harness wrote.
    w.plant("sandbox.bin", &[0; 40]);
    w.wd.write("a.txt", &[1; 50], &opts()).unwrap();
    assert_eq!(
        w.wd.usage().unwrap(),
        Usage {
            bytes: 90,
            entries: 2,
            complete: true
        }
    );
    // 40 + 50 + 11 > 100.
    let err = w.wd.write("b.txt", &[2; 11], &opts()).unwrap_err();
    assert!(
        matches!(
            err,
            WorkDirError::OverBudget {
                what: "bytes",
                used: 90,
                adding: 11,
                limit: 100
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "over the work directory's budget of 100 bytes: at least 90 in use, 11 more needed"
    );
    // Replacing a file frees its old size: 40 + 60 = 100 fits.
    w.wd.write("a.txt", &[3; 60], &opts()).unwrap();
    // Entries: 2 now; `d1/d2/f` adds 3 (two directories and the file) = 5 fits, then no more.
    w.wd.write("d1/d2/f", b"", &opts()).unwrap();
    let err = w.wd.write("d1/g", b"", &opts()).unwrap_err();
    assert!(
        matches!(
            err,
            WorkDirError::OverBudget {
                what: "entries",
                used: 5,
                adding: 1,
                limit: 5
            }
        ),
        "{err}"
    );
    // Over the limit, nothing was created: no directory, no file, no temporary file.
    let err = w.wd.write("x/y/z", b"", &opts()).unwrap_err();
    assert_eq!(err.reason(), "over_budget");
    assert!(!w.path().join("x").exists());
    assert!(w.temp_leftovers().is_empty());
    // Depth: a path deeper than max_depth is refused before anything happens.
    let err = w.wd.write("a/b/c/d/e", b"", &opts()).unwrap_err();
    assert_eq!(err.reason(), "too_deep", "{err}");
    // Replacing a file within the budget still works (no new entry, no new byte).
    w.wd.write("d1/d2/f", b"", &opts()).unwrap();

    // A sandbox that filled the directory past the entry budget: the walk stops early and
    // the write is refused.
    for i in 0..20 {
        w.plant(&format!("many/{i}"), b"");
    }
    let err = w.wd.write("a.txt", b"", &opts()).unwrap_err();
    assert!(
        matches!(
            err,
            WorkDirError::OverBudget {
                what: "entries",
                limit: 5,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn dur_4_workdir_usage_is_a_bounded_walk_that_follows_no_link() {
    let w = Work::with_budget(WorkDirBudget {
        max_bytes: u64::MAX,
        max_entries: 1000,
        max_depth: 3,
    });
    w.plant("a", &[0; 10]);
    w.plant("d/b", &[0; 20]);
    w.plant("d/e/c", &[0; 30]);
    // A link to a big host file counts as one entry of size 0; a FIFO as one entry.
    std::fs::write(w.host.path().join("big"), vec![0; 1 << 20]).unwrap();
    symlink(w.host.path().join("big"), w.path().join("link")).unwrap();
    symlink(w.host.path(), w.path().join("dirlink")).unwrap();
    nix::unistd::mkfifo(&w.path().join("pipe"), Mode::S_IRUSR).unwrap();
    // A sparse file counts at its apparent size.
    std::fs::File::create(w.path().join("sparse"))
        .unwrap()
        .set_len(1000)
        .unwrap();
    assert_eq!(
        w.wd.usage().unwrap(),
        Usage {
            bytes: 1060,
            entries: 9,
            complete: true
        }
    );
    // Deeper than max_depth: the directory at the last level is counted, not entered.
    w.plant("d/e/f/g/h", &[0; 1000]);
    let u = w.wd.usage().unwrap();
    assert_eq!((u.bytes, u.entries, u.complete), (1060, 10, false));
}

#[test]
fn agt_1_workdir_write_gives_files_to_the_workload_owner() {
    let w = Work::new();
    let me = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    // Own uid and gid: always allowed.
    let own = WriteOpts {
        owner: Some(me),
        ..opts()
    };
    w.wd.write("mine/file", b"x", &own).unwrap();
    let meta = std::fs::metadata(w.path().join("mine/file")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), me);

    if !root_or_skip("giving a file to another uid (fchown)") {
        // Unprivileged, another owner is refused cleanly and leaves nothing behind.
        let other = WriteOpts {
            owner: Some((me.0 + 1, me.1 + 1)),
            ..opts()
        };
        for rel in ["theirs", "new/dirs/theirs"] {
            let err = w.wd.write(rel, b"x", &other).unwrap_err();
            assert_eq!(err.reason(), "io", "{err}");
            assert!(err.to_string().contains("cannot give it to uid"), "{err}");
        }
        assert!(!w.path().join("theirs").exists());
        // The directories it had to create were removed again.
        assert!(!w.path().join("new").exists());
        assert!(w.temp_leftovers().is_empty());
        return;
    }
    const UID: u32 = 4242;
    const GID: u32 = 4243;
    std::fs::set_permissions(w.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let theirs = WriteOpts {
        owner: Some((UID, GID)),
        ..opts()
    };
    w.wd.write("work/notes.txt", b"from the harness\n", &theirs)
        .unwrap();
    w.wd.write("plain.txt", b"root's\n", &opts()).unwrap();
    let meta = std::fs::metadata(w.path().join("work/notes.txt")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (UID, GID, 0o644)
    );
    let meta = std::fs::metadata(w.path().join("work")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (UID, GID, 0o755)
    );

    // As that uid (what the sandbox runs as under a root broker): read, append, and create
    // in the created directory.
    let as_workload = |script: &str| {
        Command::new("setpriv")
            .args([
                &format!("--reuid={UID}"),
                &format!("--regid={GID}"),
                "--clear-groups",
                "--",
                "sh",
                "-c",
                script,
            ])
            .current_dir(w.path())
            .output()
            .unwrap()
    };
    let out = as_workload("cat work/notes.txt && echo more >> work/notes.txt && touch work/new");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read(w.path().join("work/notes.txt")).unwrap(),
        b"from the harness\nmore\n"
    );
    // Positive control: a file written without an owner is not the workload's to change.
    let out = as_workload("echo more >> plain.txt");
    assert!(!out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read(w.path().join("plain.txt")).unwrap(),
        b"root's\n"
    );
}
