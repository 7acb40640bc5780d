//! Fixtures: output folders in tempdirs, a fresh store, and ways to look inside it.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use airlock_files::ArtifactStore;
use sha2::{Digest, Sha256};
use tempfile::TempDir;

/// Bytes that live only outside the output folder; they must never reach the store.
pub const SENTINEL: &[u8] = b"HOST-SECRET-7f3a9c-never-collect-me";

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub struct Fixture {
    pub out: TempDir,
    /// Another tempdir standing in for the host: holds the sentinel file.
    pub host: TempDir,
    pub store_dir: TempDir,
    pub store: ArtifactStore,
}

impl Fixture {
    pub fn new() -> Self {
        let out = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("secret"), SENTINEL).unwrap();
        let store_dir = tempfile::tempdir().unwrap();
        let store = ArtifactStore::open(&store_dir.path().join("artifacts")).unwrap();
        Self {
            out,
            host,
            store_dir,
            store,
        }
    }

    pub fn out(&self) -> &Path {
        self.out.path()
    }

    pub fn secret(&self) -> PathBuf {
        self.host.path().join("secret")
    }

    /// Writes `bytes` at `rel` under the output folder, creating parent directories.
    pub fn write(&self, rel: &str, bytes: &[u8]) {
        let path = self.out().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// Every published blob.
    pub fn blobs(&self) -> Vec<PathBuf> {
        files_under(&self.store.root().join("sha256"))
    }

    /// Every file left in the staging area.
    pub fn staged(&self) -> Vec<PathBuf> {
        files_under(&self.store.root().join("tmp"))
    }

    /// The store is exactly as fresh: nothing published, nothing staged.
    pub fn assert_store_empty(&self) {
        assert_eq!(self.blobs(), Vec::<PathBuf>::new(), "published blobs");
        assert_eq!(self.staged(), Vec::<PathBuf>::new(), "staged files");
    }

    /// No file anywhere in the store contains the sentinel.
    pub fn assert_sentinel_absent(&self) {
        for file in files_under(self.store.root()) {
            let bytes = std::fs::read(&file).unwrap();
            assert!(
                !bytes.windows(SENTINEL.len()).any(|w| w == SENTINEL),
                "sentinel leaked into {}",
                file.display()
            );
        }
        assert_eq!(self.store.path(&sha256_hex(SENTINEL)), None);
    }
}

pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                out.push(entry.path());
            }
        }
    }
    out.sort();
    out
}

/// Runs `f` on a thread and fails the test if it has not returned within a few seconds, so an
/// open that blocks (on a FIFO, say) is a test failure rather than a hung suite.
pub fn within_timeout<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("operation blocked (did it open a FIFO for reading?)")
}

/// The variable that lets a test skip what only root can set up (a device node, a file given
/// to another uid), instead of failing when run unprivileged.
pub const SKIP_ROOT: &str = "AIRLOCK_TEST_SKIP_ROOT";

/// `true` as root. Unprivileged: `false` (the caller skips the root-only part, after this
/// note) when [`SKIP_ROOT`] is set, else the test fails, so a missing precondition is never a
/// silent pass.
pub fn root_or_skip(what: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os(SKIP_ROOT).is_some(),
        "{what} needs root: run as root, or set {SKIP_ROOT}=1 to skip that part"
    );
    eprintln!("skipped ({SKIP_ROOT}): {what} needs root");
    false
}

/// A work directory in a tempdir, a second tempdir standing in for the host (holding
/// `secret` = [`SENTINEL`]), and the `WorkDir` under test.
pub struct Work {
    pub dir: TempDir,
    pub host: TempDir,
    pub wd: airlock_files::workdir::WorkDir,
}

impl Work {
    pub fn new() -> Self {
        Self::with_budget(airlock_files::workdir::WorkDirBudget::default())
    }

    pub fn with_budget(budget: airlock_files::workdir::WorkDirBudget) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("secret"), SENTINEL).unwrap();
        let wd = airlock_files::workdir::WorkDir::open(dir.path(), budget).unwrap();
        Self { dir, host, wd }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `bytes` at `rel` as the sandbox would (plain `std::fs`), creating parents.
    pub fn plant(&self, rel: &str, bytes: &[u8]) {
        let path = self.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    /// Every file under the host tempdir with its bytes: must stay exactly
    /// `[("secret", SENTINEL)]` whatever the work directory holds.
    pub fn host_files(&self) -> Vec<(String, Vec<u8>)> {
        files_under(self.host.path())
            .into_iter()
            .map(|p| {
                let rel = p.strip_prefix(self.host.path()).unwrap();
                (rel.display().to_string(), std::fs::read(&p).unwrap())
            })
            .collect()
    }

    pub fn assert_host_untouched(&self) {
        assert_eq!(
            self.host_files(),
            vec![("secret".to_owned(), SENTINEL.to_vec())],
            "the host folder changed"
        );
    }

    /// Names in the work directory's root that look like leftover temporary files.
    pub fn temp_leftovers(&self) -> Vec<PathBuf> {
        files_under(self.path())
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(".airlock-write-"))
            })
            .collect()
    }
}

/// Watches one directory for `open` events: proof that a planted FIFO or device was (or was
/// not) opened. `O_PATH` handles and `fstatat` produce no event; every real open does.
pub struct OpenWatch(nix::sys::inotify::Inotify);

impl OpenWatch {
    pub fn new(dir: &Path) -> Self {
        use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
        let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap();
        ino.add_watch(dir, AddWatchFlags::IN_OPEN).unwrap();
        Self(ino)
    }

    /// Names opened in the directory since the last call (drains the queue).
    pub fn opened(&self) -> Vec<String> {
        let mut names = Vec::new();
        loop {
            match self.0.read_events() {
                Ok(events) if !events.is_empty() => {
                    for e in events {
                        names.push(
                            e.name
                                .map(|n| n.to_string_lossy().into_owned())
                                .unwrap_or_default(),
                        );
                    }
                }
                Ok(_) | Err(nix::errno::Errno::EAGAIN) => return names,
                Err(e) => panic!("inotify: {e}"),
            }
        }
    }
}
