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
