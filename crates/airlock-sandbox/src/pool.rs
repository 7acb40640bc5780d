//! A pool of pre-built, never-used sandboxes (issue 14).
//!
//! Most of a launch does not depend on the launch: spawning the init,
//! moving it into its cgroup (an RCU grace period on this kind of host),
//! creating the namespaces, mapping the ids and building the platform's
//! part of the root (system binds, `/etc`, `/proc` with its masks, `/dev`,
//! `/tmp`). A pooled sandbox has done all of that and waits, blocked on
//! its spec pipe, for exactly one launch: the launch's roots, secrets and
//! executable are added, the root is entered and the workload starts.
//!
//! The rules that keep this as strong as a cold launch:
//! - **Used once.** [`Pool::take`] moves a sandbox out of the pool; its
//!   PID 1 reads one spec and ends with its workload. Nothing is returned
//!   to the pool, ever.
//! - **Built for the launch.** Sandboxes are kept per [`PoolKey`]: every
//!   input of the pre-built part (the init binary, the host ids, the
//!   cgroup limits, the size of `/tmp`). A launch takes only from its own
//!   key; PID 1 checks the key's fields again against the launch's spec
//!   and refuses a mismatch.
//! - **Alive.** A sandbox whose init died (killed, or failed) is never
//!   handed out: `take` checks, discards it and tries the next one; the
//!   filler replaces it.
//! - **Never a failure.** An empty pool (or one that cannot be built) means
//!   a cold launch, which `--timings` reports as `pool_empty`.
//!
//! The filler is one long-lived thread per pool: an init dies with the
//! thread that spawned it (`PR_SET_PDEATHSIG`), so the spawning thread
//! must outlive every sandbox it made.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crate::cgroup::{Cgroup, CgroupLimits};
use crate::report::Guarantee;
use crate::wire::{InitEvent, InitSpec};

/// Everything a pre-built sandbox was built with. A launch uses a pooled
/// sandbox only when its key is equal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PoolKey {
    pub init_exe: PathBuf,
    pub outer_uid: u32,
    pub outer_gid: u32,
    pub switch_ids: bool,
    pub host_ids: String,
    pub limits: (Option<u64>, Option<u64>, Option<u64>),
    pub tmp_bytes: u64,
}

impl PoolKey {
    pub fn cgroup_limits(&self) -> CgroupLimits {
        CgroupLimits {
            memory_bytes: self.limits.0,
            pids: self.limits.1,
            cpu_millicores: self.limits.2,
        }
    }
}

/// One pre-built sandbox, waiting for its launch.
pub(crate) struct Pooled {
    pub child: crate::sys::SpawnedInit,
    pub cgroup: Cgroup,
    pub base: Vec<Guarantee>,
    /// The spec pipe: the launch's spec goes here.
    pub spec: File,
    pub status: BufReader<File>,
    pub control: UnixStream,
    /// The host directory the sandbox's root is mounted on (in its own
    /// mount namespace; on the host it stays empty).
    pub root_dir: PathBuf,
    pub built_at: Instant,
}

impl Pooled {
    /// Alive and not too old to use. A sandbox's `/etc` entries are the
    /// files they were when it was built (a package upgrade replaces
    /// `ld.so.cache` by rename, say), so it is used within [`MAX_AGE`].
    fn usable(&mut self) -> bool {
        self.built_at.elapsed() < MAX_AGE && matches!(self.child.try_wait(), Ok(None))
    }

    /// Ends an unused sandbox and removes what it held.
    pub fn discard(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.cgroup.destroy();
        let _ = std::fs::remove_dir(&self.root_dir);
    }
}

/// Counters, for `--timings`-style reports and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Launches that used a pooled sandbox.
    pub pooled: u64,
    /// Launches that found no ready sandbox of their key.
    pub empty: u64,
    /// Sandboxes found dead in the pool and discarded.
    pub dead: u64,
    /// Sandboxes built.
    pub built: u64,
    /// Sandboxes that failed to build.
    pub failed: u64,
    /// Sandboxes ready now.
    pub ready: u64,
}

/// How the filler builds one sandbox; the broker provides it.
pub(crate) type Builder = dyn Fn(&PoolKey) -> Result<Pooled, String> + Send + Sync;

struct State {
    ready: HashMap<PoolKey, Vec<Pooled>>,
    /// Keys launched recently, with when; the filler keeps these stocked.
    wanted: HashMap<PoolKey, Instant>,
    /// Consecutive build failures per key; a key that keeps failing is
    /// no longer stocked (its launches go cold).
    failures: HashMap<PoolKey, u32>,
}

/// The pool. Shared by a broker's clones.
pub(crate) struct Pool {
    per_key: usize,
    state: Mutex<State>,
    wake: Condvar,
    build: Box<Builder>,
    pooled: AtomicU64,
    empty: AtomicU64,
    dead: AtomicU64,
    built: AtomicU64,
    failed: AtomicU64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("per_key", &self.per_key)
            .finish_non_exhaustive()
    }
}

/// At most this many keys are stocked at once (the least recently
/// launched is dropped first).
const MAX_KEYS: usize = 4;
/// A pooled sandbox older than this is replaced, not used.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(300);
/// A key that failed to build this many times in a row is given up.
const MAX_FAILURES: u32 = 3;

impl Pool {
    /// A pool keeping `per_key` sandboxes ready for each recently launched
    /// key, and its filler thread.
    pub fn start(per_key: usize, build: Box<Builder>) -> std::io::Result<Arc<Pool>> {
        let pool = Arc::new(Pool {
            per_key: per_key.max(1),
            state: Mutex::new(State {
                ready: HashMap::new(),
                wanted: HashMap::new(),
                failures: HashMap::new(),
            }),
            wake: Condvar::new(),
            build,
            pooled: AtomicU64::new(0),
            empty: AtomicU64::new(0),
            dead: AtomicU64::new(0),
            built: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&pool);
        thread::Builder::new()
            .name("airlock-sandbox-pool".into())
            .spawn(move || fill(weak))?;
        Ok(pool)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain collections behind,
        // still consistent: keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A live, never-used sandbox built for `key`, if one is ready. Either
    /// way, `key` is stocked from now on.
    pub fn take(&self, key: &PoolKey) -> Option<Pooled> {
        let mut dead = self.want(key.clone());
        let taken = {
            let mut st = self.lock();
            let mut taken = None;
            if let Some(list) = st.ready.get_mut(key) {
                while let Some(mut p) = list.pop() {
                    if p.usable() {
                        taken = Some(p);
                        break;
                    }
                    self.dead.fetch_add(1, Ordering::Relaxed);
                    dead.push(p);
                }
            }
            taken
        };
        // The filler is not woken here: building a replacement now would
        // take the CPU from the launch that just took one (two cores,
        // measured: 5 ms more per launch). The broker calls
        // [`Pool::launched`] once the launch's sandbox is gone.
        for p in dead {
            p.discard();
        }
        match &taken {
            Some(_) => self.pooled.fetch_add(1, Ordering::Relaxed),
            None => self.empty.fetch_add(1, Ordering::Relaxed),
        };
        taken
    }

    /// Keeps `key` stocked from now on, before its first launch, and
    /// wakes the filler to build its sandboxes.
    pub fn stock(&self, key: PoolKey) {
        let dropped = self.want(key);
        for p in dropped {
            p.discard();
        }
        self.wake.notify_one();
    }

    /// How many sandboxes of `key` are ready now.
    pub fn ready_for(&self, key: &PoolKey) -> usize {
        self.lock().ready.get(key).map_or(0, Vec::len)
    }

    /// Marks `key` wanted now; when that makes too many keys, the least
    /// recently wanted one is no longer stocked and its ready sandboxes
    /// are returned, to be discarded outside the lock.
    fn want(&self, key: PoolKey) -> Vec<Pooled> {
        let mut st = self.lock();
        st.wanted.insert(key, Instant::now());
        if st.wanted.len() > MAX_KEYS
            && let Some(oldest) = st
                .wanted
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(k, _)| k.clone())
        {
            st.wanted.remove(&oldest);
            return st.ready.remove(&oldest).unwrap_or_default();
        }
        Vec::new()
    }

    /// A launch is over: time to replace what it took.
    pub fn launched(&self) {
        self.wake.notify_one();
    }

    pub fn stats(&self) -> PoolStats {
        let ready = self.lock().ready.values().map(|v| v.len() as u64).sum();
        PoolStats {
            pooled: self.pooled.load(Ordering::Relaxed),
            empty: self.empty.load(Ordering::Relaxed),
            dead: self.dead.load(Ordering::Relaxed),
            built: self.built.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            ready,
        }
    }

    /// Process ids of the ready sandboxes' inits (for tests and
    /// diagnostics).
    pub fn ready_pids(&self) -> Vec<u32> {
        self.lock()
            .ready
            .values()
            .flatten()
            .map(|p| p.child.id())
            .collect()
    }

    /// The next key short of sandboxes, if any.
    fn short(&self) -> Option<PoolKey> {
        let st = self.lock();
        st.wanted
            .keys()
            .filter(|k| st.failures.get(*k).copied().unwrap_or(0) < MAX_FAILURES)
            .find(|k| st.ready.get(*k).map_or(0, Vec::len) < self.per_key)
            .cloned()
    }

    fn fill_one(&self, key: PoolKey) {
        match (self.build)(&key) {
            Ok(p) => {
                self.built.fetch_add(1, Ordering::Relaxed);
                let mut st = self.lock();
                st.failures.remove(&key);
                if st.wanted.contains_key(&key) {
                    st.ready.entry(key).or_default().push(p);
                } else {
                    drop(st);
                    p.discard();
                }
            }
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                *self.lock().failures.entry(key).or_default() += 1;
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let ready: Vec<Pooled> = {
            let mut st = self.lock();
            st.ready.drain().flat_map(|(_, v)| v).collect()
        };
        for p in ready {
            p.discard();
        }
    }
}

/// The filler: keeps every wanted key stocked until the pool is dropped.
fn fill(pool: Weak<Pool>) {
    loop {
        let Some(p) = pool.upgrade() else { return };
        while let Some(key) = p.short() {
            p.fill_one(key);
        }
        let st = p.lock();
        // Woken by a take; the timeout lets the thread notice that the
        // pool was dropped, and replace sandboxes that died while waiting.
        let _ = p.wake.wait_timeout(st, Duration::from_secs(1));
        let mut st = p.lock();
        let mut dead = Vec::new();
        for list in st.ready.values_mut() {
            let mut i = 0;
            while i < list.len() {
                if list[i].usable() {
                    i += 1;
                } else {
                    dead.push(list.swap_remove(i));
                    p.dead.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        drop(st);
        for d in dead {
            d.discard();
        }
    }
}

/// Waits, up to `limit`, for a freshly spawned pooled init to report that
/// its sandbox is built.
pub(crate) fn await_ready(status: &mut BufReader<File>, limit: Duration) -> Result<(), String> {
    let until = Instant::now() + limit;
    loop {
        if status.buffer().is_empty() {
            let left = until.saturating_duration_since(Instant::now());
            let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
            let mut fds = [nix::poll::PollFd::new(
                status.get_ref().as_fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
                Ok(0) => return Err("the pooled sandbox did not get ready in time".into()),
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        let mut line = String::new();
        match status.read_line(&mut line) {
            Ok(0) => return Err("the pooled sandbox's init ended while it was built".into()),
            Ok(_) => match serde_json::from_str::<InitEvent>(&line) {
                Ok(InitEvent::PoolReady) => return Ok(()),
                Ok(InitEvent::SetupFailed { stage, error }) => {
                    return Err(format!("{stage}: {error}"));
                }
                _ => {}
            },
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Writes one spec line.
pub(crate) fn send_spec(pipe: &mut File, spec: &InitSpec) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(spec).map_err(std::io::Error::other)?;
    line.push(b'\n');
    pipe.write_all(&line)
}

/// Sends descriptors, in order, over the pooled sandbox's control socket.
pub(crate) fn send_fds<'a>(
    control: &UnixStream,
    fds: impl IntoIterator<Item = &'a OwnedFd>,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    for fd in fds {
        crate::sys::send_fd(control.as_raw_fd(), fd.as_raw_fd()).map_err(std::io::Error::from)?;
    }
    Ok(())
}
