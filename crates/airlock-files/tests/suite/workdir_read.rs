//! AGT-3 / DUR-4: `read_file` over a work directory the workload writes too.

use std::os::unix::fs::symlink;
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_files::FileError;
use airlock_files::workdir::{WorkDir, WorkDirBudget, WorkDirError};
use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, SFlag, makedev, mknod};

use super::support::{OpenWatch, SENTINEL, Work, root_or_skip, within_timeout};

const MAX: u64 = 1 << 20;

#[test]
fn agt_3_workdir_read_returns_bytes_size_and_truncation() {
    let w = Work::new();
    w.plant("notes.txt", b"hello world");
    w.plant("src/deep/er/lib.rs", b"fn main() {}");

    let r = w.wd.read("notes.txt", MAX).unwrap();
    assert_eq!(
        (r.bytes.as_slice(), r.total_size, r.truncated),
        (&b"hello world"[..], 11, false)
    );
    let r = w.wd.read("src/deep/er/lib.rs", MAX).unwrap();
    assert_eq!(r.bytes, b"fn main() {}");
    // Exactly at the bound is not truncated; one byte under is.
    let r = w.wd.read("notes.txt", 11).unwrap();
    assert_eq!((r.bytes.len(), r.truncated), (11, false));
    let r = w.wd.read("notes.txt", 5).unwrap();
    assert_eq!(
        (r.bytes.as_slice(), r.total_size, r.truncated),
        (&b"hello"[..], 11, true)
    );
    let r = w.wd.read("notes.txt", 0).unwrap();
    assert_eq!((r.bytes.len(), r.total_size, r.truncated), (0, 11, true));
}

#[test]
fn dur_4_workdir_read_never_follows_a_symlink_in_any_position() {
    let w = Work::new();
    // Final component: a link to the host secret.
    symlink(w.host.path().join("secret"), w.path().join("final")).unwrap();
    // Intermediate component: a link to the host folder, and one to a directory inside the
    // work directory (a link is refused even when it stays inside).
    symlink(w.host.path(), w.path().join("mid")).unwrap();
    std::fs::create_dir(w.path().join("real")).unwrap();
    w.plant("real/secret", b"inside");
    symlink("real", w.path().join("inner")).unwrap();

    for (rel, link) in [
        ("final", "final"),
        ("mid/secret", "mid"),
        ("inner/secret", "inner"),
    ] {
        let err = w.wd.read(rel, MAX).unwrap_err();
        assert!(
            matches!(&err, WorkDirError::File(FileError::Symlink { path }) if path == link),
            "{rel}: {err}"
        );
        // Positive control: the path does lead to a readable file when links are followed.
        assert!(std::fs::read(w.path().join(rel)).is_ok(), "{rel}");
    }
    assert_eq!(
        std::fs::read(w.path().join("mid/secret")).unwrap(),
        SENTINEL
    );

    // Root: a work directory that is itself a link is refused at open.
    let parent = tempfile::tempdir().unwrap();
    symlink(w.path(), parent.path().join("work")).unwrap();
    let err = WorkDir::open(&parent.path().join("work"), WorkDirBudget::default()).unwrap_err();
    assert_eq!(err.reason(), "symlink", "{err}");
    // Control: the real directory opens.
    WorkDir::open(w.path(), WorkDirBudget::default()).unwrap();
}

#[test]
fn dur_4_workdir_read_never_reads_etc_shadow_through_a_link() {
    let w = Work::new();
    symlink("/etc/shadow", w.path().join("shadow")).unwrap();
    symlink("/etc", w.path().join("etc")).unwrap();
    symlink("/", w.path().join("slash")).unwrap();
    for rel in ["shadow", "etc/shadow", "slash/etc/shadow"] {
        let err = w.wd.read(rel, MAX).unwrap_err();
        assert_eq!(err.reason(), "symlink", "{rel}: {err}");
    }
    // Positive control: as root, the same paths read through std::fs do reach the file.
    if nix::unistd::geteuid().is_root() {
        for rel in ["shadow", "etc/shadow", "slash/etc/shadow"] {
            let bytes = std::fs::read(w.path().join(rel)).unwrap();
            assert!(bytes.starts_with(b"root:"), "{rel}");
        }
    } else {
        // Unprivileged, /etc/shadow is unreadable anyway; the sentinel control of the test
        // above stands in for it.
        assert!(std::fs::read(w.path().join("shadow")).is_err());
    }
}

#[test]
fn dur_4_workdir_read_refuses_a_hard_link_to_a_file_outside() {
    let w = Work::new();
    std::fs::hard_link(w.host.path().join("secret"), w.path().join("linked")).unwrap();
    let err = w.wd.read("linked", MAX).unwrap_err();
    assert_eq!(err.reason(), "hard_link", "{err}");
    assert!(!err.to_string().contains("HOST-SECRET"));
    // Control: the name does hold the host bytes.
    assert_eq!(std::fs::read(w.path().join("linked")).unwrap(), SENTINEL);
}

#[test]
fn dur_4_workdir_read_refuses_a_fifo_without_opening_it() {
    let w = Work::new();
    nix::unistd::mkfifo(&w.path().join("pipe"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
    std::fs::create_dir(w.path().join("sub")).unwrap();
    nix::unistd::mkfifo(&w.path().join("sub/pipe"), Mode::S_IRUSR | Mode::S_IWUSR).unwrap();
    let watch = OpenWatch::new(w.path());
    let wd = Arc::new(w.wd);

    // No writer ever opens these FIFOs: a blocking open for reading would hang. The thread
    // bound only turns such a hang into a failure; what is asserted is the refusal and the
    // absence of any open.
    let wd2 = Arc::clone(&wd);
    let errs = within_timeout(move || {
        [
            wd2.read("pipe", MAX).unwrap_err(),
            wd2.read("pipe/x", MAX).unwrap_err(),
        ]
    });
    for err in &errs {
        assert!(
            matches!(
                err,
                WorkDirError::File(FileError::NotRegular { kind: "fifo", .. })
            ),
            "{err}"
        );
    }
    let opened = watch.opened();
    assert!(!opened.contains(&"pipe".to_owned()), "{opened:?}");

    // Positive control: an actual (non-blocking) open of the FIFO is seen by the watch.
    let fd = open(
        &w.dir.path().join("pipe"),
        OFlag::O_RDONLY | OFlag::O_NONBLOCK,
        Mode::empty(),
    )
    .unwrap();
    drop(fd);
    assert!(watch.opened().contains(&"pipe".to_owned()));
}

#[test]
fn dur_4_workdir_read_refuses_sockets_and_devices_without_opening_them() {
    let w = Work::new();
    let _sock = UnixListener::bind(w.path().join("sock")).unwrap();
    let err = w.wd.read("sock", MAX).unwrap_err();
    assert!(
        matches!(
            err,
            WorkDirError::File(FileError::NotRegular { kind: "socket", .. })
        ),
        "{err}"
    );

    if !root_or_skip("a device node (mknod)") {
        return;
    }
    // A /dev/zero twin: reading it would never end, and a model would get megabytes of NULs.
    mknod(
        &w.path().join("zero"),
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(1, 5),
    )
    .unwrap();
    let watch = OpenWatch::new(w.path());
    let err = w.wd.read("zero", MAX).unwrap_err();
    assert!(
        matches!(
            err,
            WorkDirError::File(FileError::NotRegular {
                kind: "char_device",
                ..
            })
        ),
        "{err}"
    );
    let opened = watch.opened();
    assert!(!opened.contains(&"zero".to_owned()), "{opened:?}");
    // Positive control: it is a working device, and opening it is seen.
    let mut buf = [1u8; 16];
    std::io::Read::read_exact(
        &mut std::fs::File::open(w.path().join("zero")).unwrap(),
        &mut buf,
    )
    .unwrap();
    assert_eq!(buf, [0u8; 16]);
    assert!(watch.opened().contains(&"zero".to_owned()));
}

#[test]
fn dur_4_workdir_read_cuts_a_growing_file_at_max_bytes() {
    const CUT: u64 = 4096;
    let w = Work::new();
    w.plant("log", b"");
    let path = w.path().join("log");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = Arc::clone(&stop);
        let path = path.clone();
        std::thread::spawn(move || {
            let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            while !stop.load(Ordering::Relaxed) {
                std::io::Write::write_all(&mut f, &[b'x'; 512]).unwrap();
            }
        })
    };
    // Whatever the writer has done by the time of each read, nothing past the bound is read.
    for _ in 0..200 {
        let r = w.wd.read("log", CUT).unwrap();
        assert!(r.bytes.len() as u64 <= CUT, "{}", r.bytes.len());
        assert!(r.total_size >= r.bytes.len() as u64);
    }
    // Once the file is surely larger than the bound, the read is exactly the bound.
    while std::fs::metadata(&path).unwrap().len() <= CUT {
        std::thread::yield_now();
    }
    let r = w.wd.read("log", CUT).unwrap();
    assert_eq!((r.bytes.len() as u64, r.truncated), (CUT, true));
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    // A sparse file claiming 1 TiB: the read costs the bound, not the claim.
    let huge = std::fs::File::create(w.path().join("huge")).unwrap();
    huge.set_len(1 << 40).unwrap();
    let r = w.wd.read("huge", CUT).unwrap();
    assert_eq!(
        (r.bytes.len() as u64, r.total_size, r.truncated),
        (CUT, 1 << 40, true)
    );
    assert!(r.bytes.iter().all(|b| *b == 0));
}

#[test]
fn agt_3_workdir_read_refuses_directories_and_reports_missing_files() {
    let w = Work::new();
    w.plant("dir/file", b"x");
    let cases = [
        ("dir", "is_a_directory"),
        ("missing", "not_found"),
        ("dir/missing", "not_found"),
        ("missing/file", "not_found"),
        ("dir/file/below", "not_a_directory"),
    ];
    for (rel, reason) in cases {
        let err = w.wd.read(rel, MAX).unwrap_err();
        assert_eq!(err.reason(), reason, "{rel}: {err}");
    }
}

#[test]
fn agt_3_workdir_paths_are_validated_and_errors_name_only_the_relative_path() {
    let w = Work::new();
    w.plant("ok.txt", b"ok");
    // Something real one level up, so `..` would find it if it were followed.
    let host = w.path().to_str().unwrap().to_owned();
    let bad = [
        "",
        ".",
        "..",
        "../secret",
        "a/../ok.txt",
        "./ok.txt",
        "/etc/passwd",
        "a//b",
        "a/",
        "a\\b",
        "nul\0byte",
        "new\nline",
        "esc\u{1b}[2J",
        "rtl\u{202e}txt",
    ];
    for rel in bad {
        let err = w.wd.read(rel, MAX).unwrap_err();
        assert_eq!(err.reason(), "bad_path", "{rel:?}: {err}");
        let msg = err.to_string();
        assert!(!msg.chars().any(char::is_control), "{msg:?}");
    }
    // A 10 MiB path is refused with a short message.
    let huge = "a/".repeat(5 << 20);
    let err = w.wd.read(&huge, MAX).unwrap_err();
    assert!(err.to_string().len() < 1024, "{}", err.to_string().len());

    // No error names the host path of the work directory or the host folder.
    symlink(w.host.path(), w.path().join("link")).unwrap();
    let host2 = w.host.path().to_str().unwrap().to_owned();
    for rel in ["missing", "link/secret", "link", "ok.txt/x"] {
        let msg = w.wd.read(rel, MAX).unwrap_err().to_string();
        assert!(!msg.contains(&host) && !msg.contains(&host2), "{msg}");
        assert!(!msg.contains("/tmp"), "{msg}");
    }
    // Control: the path rule does accept ordinary names, literally.
    w.plant("report%20v2.txt", b"v2");
    assert_eq!(w.wd.read("report%20v2.txt", MAX).unwrap().bytes, b"v2");
    assert_eq!(w.wd.read("ok.txt", MAX).unwrap().bytes, b"ok");
}
