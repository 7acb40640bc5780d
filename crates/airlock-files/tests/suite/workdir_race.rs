//! DUR-4 / AGT-3: a workload racing renames against the harness never gets it out of the root.

use std::os::fd::AsFd;
use std::os::unix::fs::symlink;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use airlock_files::workdir::{ListOpts, WriteOpts};
use nix::fcntl::{OFlag, RenameFlags, open, renameat2};
use nix::sys::stat::Mode;

use super::support::{SENTINEL, Work};

/// Rounds of write + read + list under the race. Pass/fail never depends on how many of them
/// the swapper actually interleaved with: every round must stay inside.
const ROUNDS: usize = 2000;

#[test]
fn dur_4_workdir_rename_race_never_escapes_the_root() {
    let w = Work::new();
    // `d` is a real directory; `alt` a symlink to the host folder (which holds `secret`, the
    // canary). The swapper exchanges the two names atomically, over and over, so `d` is
    // sometimes the directory and sometimes the link.
    std::fs::create_dir(w.path().join("d")).unwrap();
    std::fs::write(w.path().join("d/secret"), b"inside").unwrap();
    std::fs::write(w.path().join("d/.inside"), b"").unwrap();
    symlink(w.host.path(), w.path().join("alt")).unwrap();

    let dir = open(
        w.path(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    let swap = move |fd: &std::os::fd::OwnedFd| {
        renameat2(
            fd.as_fd(),
            "d",
            fd.as_fd(),
            "alt",
            RenameFlags::RENAME_EXCHANGE,
        )
        .unwrap();
    };

    // Deterministic first: with `d` the link, every operation through it is refused.
    swap(&dir);
    assert_eq!(
        w.wd.write("d/secret", b"pwned", &WriteOpts::default())
            .unwrap_err()
            .reason(),
        "symlink"
    );
    assert_eq!(w.wd.read("d/secret", 1024).unwrap_err().reason(), "symlink");
    assert_eq!(
        w.wd.list("d", &ListOpts::default()).unwrap_err().reason(),
        "symlink"
    );
    swap(&dir);
    w.assert_host_untouched();

    // Then the race.
    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let stop = Arc::clone(&stop);
        let swaps = Arc::clone(&swaps);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                swap(&dir);
                swaps.fetch_add(1, Ordering::Relaxed);
            }
            // Leave `d` as the real directory.
            if swaps.load(Ordering::Relaxed) % 2 == 1 {
                swap(&dir);
            }
        })
    };
    let (mut ok, mut refused) = (0u64, 0u64);
    for i in 0..ROUNDS {
        let body = format!("round {i}");
        match w
            .wd
            .write("d/secret", body.as_bytes(), &WriteOpts::default())
        {
            Ok(_) => ok += 1,
            Err(_) => refused += 1,
        }
        let _ =
            w.wd.write(&format!("d/new-{i}"), b"new", &WriteOpts::default());
        if let Ok(r) = w.wd.read("d/secret", 1024) {
            assert!(
                !r.bytes.windows(SENTINEL.len()).any(|x| x == SENTINEL),
                "round {i}: read the host canary"
            );
        }
        if let Ok(listing) = w.wd.list("d", &ListOpts::default()) {
            // Only the real directory holds `.inside`; the host folder does not.
            assert_eq!(
                listing.entries.first().map(|e| e.path.as_str()),
                Some("d/.inside"),
                "round {i}: listed something else"
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    eprintln!(
        "{ROUNDS} rounds, {} swaps: {ok} writes landed inside, {refused} refused",
        swaps.load(Ordering::Relaxed)
    );
    // Nothing was written outside: the canary is intact and nothing appeared beside it.
    w.assert_host_untouched();
    assert!(w.temp_leftovers().is_empty(), "{:?}", w.temp_leftovers());

    // Positive control, made deterministic by swapping before the naive call: a path-based
    // std::fs write through the same name lands on the host, and the check above sees it.
    let dir = open(
        w.path(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
        Mode::empty(),
    )
    .unwrap();
    renameat2(&dir, "d", &dir, "alt", RenameFlags::RENAME_EXCHANGE).unwrap();
    std::fs::write(w.path().join("d/secret"), b"naive").unwrap();
    std::fs::write(w.path().join("d/new-naive"), b"naive").unwrap();
    assert_eq!(
        w.host_files(),
        vec![
            ("new-naive".to_owned(), b"naive".to_vec()),
            ("secret".to_owned(), b"naive".to_vec()),
        ]
    );
}
