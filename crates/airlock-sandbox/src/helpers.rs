//! Threads that follow launches (the stdout and stderr drains, the status
//! reader, the init's waiter, the clean-up), kept for reuse.
//!
//! Each launch needs four or five such threads, each blocked on its own
//! descriptor for the launch's life. Starting a thread costs about 45 µs
//! on the two-core guests airlock is measured on (its stack mapped, its
//! arena, the clone), and those starts sat on a pooled launch's critical
//! path: about 0.1 ms of its 2.8 (BENCHMARKS, "the sandbox pool"). A
//! finished job's thread waits here for the next one instead of exiting,
//! and leaves after [`IDLE`] without work.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::Duration;

type Job = Box<dyn FnOnce() + Send>;

/// How long a thread without work stays.
const IDLE: Duration = Duration::from_secs(30);

/// An idle thread: its id and the sender of its job channel.
type Idle = (u64, Sender<Job>);

/// Idle threads.
static IDLE_THREADS: OnceLock<Mutex<Vec<Idle>>> = OnceLock::new();

fn idle() -> std::sync::MutexGuard<'static, Vec<Idle>> {
    // A panic while holding the lock leaves a plain list behind: go on.
    IDLE_THREADS
        .get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Runs `job` on an idle thread, or on a new one.
pub(crate) fn spawn(job: impl FnOnce() + Send + 'static) {
    let mut job: Job = Box::new(job);
    // A thread taken from the list always receives (see `work`); a send
    // fails only if that thread died, and the job comes back.
    while let Some((_, tx)) = idle().pop() {
        match tx.send(job) {
            Ok(()) => return,
            Err(mpsc::SendError(back)) => job = back,
        }
    }
    let (tx, rx) = mpsc::channel::<Job>();
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let first = job;
    // No thread to be had (the system's limit): the job is dropped with
    // the channels it holds, so the launch sees them close (no output, no
    // status, the init's exit unknown) and fails instead of hanging.
    let _ = thread::Builder::new()
        .name("airlock-follow".into())
        .spawn(move || work(id, tx, first, rx));
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn work(id: u64, tx: Sender<Job>, first: Job, rx: mpsc::Receiver<Job>) {
    first();
    loop {
        idle().push((id, tx.clone()));
        match rx.recv_timeout(IDLE) {
            Ok(job) => job(),
            Err(RecvTimeoutError::Timeout) => {
                let mut list = idle();
                match list.iter().position(|(i, _)| *i == id) {
                    // Still listed: nobody can send any more; leave.
                    Some(at) => {
                        list.swap_remove(at);
                        return;
                    }
                    // Taken from the list just now: its job is on the way.
                    None => {
                        drop(list);
                        match rx.recv() {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    }
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `n` jobs that each wait until all have started (so they must
    /// be on distinct threads: two sharing one would never meet at the
    /// barrier, and the 30 s wait for the results would fail) and returns
    /// the threads they ran on.
    fn round(n: usize) -> std::collections::BTreeSet<String> {
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
        let (done_tx, done_rx) = mpsc::channel();
        for _ in 0..n {
            let (b, d) = (barrier.clone(), done_tx.clone());
            spawn(move || {
                b.wait();
                let _ = d.send(format!("{:?}", thread::current().id()));
            });
        }
        (0..n)
            .map(|_| done_rx.recv_timeout(Duration::from_secs(30)).unwrap())
            .collect()
    }

    /// Every job runs, many at once, and a later round of jobs runs on the
    /// threads of the first: none was started for it. (Without the reuse,
    /// the second round's threads would all be new and the subset check
    /// fails.) One test process has only this test under nextest.
    #[test]
    fn jobs_run_concurrently_and_threads_are_reused() {
        let n = 8;
        let first = round(n);
        assert_eq!(first.len(), n, "jobs shared a thread: {first:?}");
        // Each thread lists itself as idle just after its job ends.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while idle().len() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "threads were not kept"
            );
            thread::sleep(Duration::from_millis(1));
        }
        let second = round(n);
        assert_eq!(second.len(), n);
        assert!(
            second.is_subset(&first),
            "new threads: {first:?} then {second:?}"
        );
    }
}
