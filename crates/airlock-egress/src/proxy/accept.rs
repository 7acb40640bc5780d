//! Where a sandbox's listener is accepted: a thread of its own that drives the accept loop with
//! [`tokio::runtime::Handle::block_on`] and spawns each connection onto the proxy's runtime.
//!
//! Why not a task on the runtime's one worker, beside the relays: a new connection then woke
//! the worker wherever it had slept, often on the core of the busiest process of the path (a
//! co-located upstream, the client), and preempted it once per connection (BENCHMARKS.md,
//! "Where the proxy accepts", has the figures and a variant that did not help).
//!
//! Lifecycle: [`Acceptor::stop`] wakes the loop through a [`Notify`] and joins the thread; when it
//! returns, no connection will be handed to the runtime any more and the listening socket is
//! closed. The proxy stops its acceptors before its runtime is dropped ([`super::Egress`]'s
//! `Drop`), so the loop never runs on a runtime that is shutting down.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Handle;
use tokio::sync::Notify;

/// How long the loop waits after an `accept` error (out of descriptors, out of memory) before
/// it tries again: the error is the machine's, not one connection's.
const RETRY_AFTER_ERROR: Duration = Duration::from_millis(10);

/// The thread accepting one listener.
#[derive(Debug)]
pub(super) struct Acceptor {
    stopped: AtomicBool,
    wake: Arc<Notify>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Acceptor {
    /// Starts accepting `listener` for `runtime`, calling `on_accept` with each connection on
    /// the new thread, inside the runtime's context (so it may `tokio::spawn`; it must not
    /// block: it takes a place and spawns).
    pub(super) fn start(
        listener: std::net::TcpListener,
        runtime: &Handle,
        mut on_accept: impl FnMut(TcpStream) + Send + 'static,
    ) -> io::Result<Self> {
        listener.set_nonblocking(true)?;
        let listener = {
            let _context = runtime.enter();
            TcpListener::from_std(listener)?
        };
        let wake = Arc::new(Notify::new());
        let stop = wake.clone();
        let rt = runtime.clone();
        let thread = std::thread::Builder::new()
            .name("airlock-accept".into())
            .spawn(move || {
                rt.block_on(async move {
                    loop {
                        tokio::select! {
                            biased;
                            _ = stop.notified() => break,
                            r = listener.accept() => match r {
                                Ok((stream, _)) => on_accept(stream),
                                Err(_) => tokio::select! {
                                    _ = stop.notified() => break,
                                    _ = tokio::time::sleep(RETRY_AFTER_ERROR) => {}
                                },
                            },
                        }
                    }
                });
            })?;
        Ok(Self {
            stopped: AtomicBool::new(false),
            wake,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Whether [`Acceptor::stop`] was called.
    pub(super) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// Stops accepting and returns once the thread has ended and the listening socket is closed
    /// (see the module's doc). Idempotent; never called from the accepting thread itself.
    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let thread = match self.thread.lock() {
            Ok(mut t) => t.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        let Some(thread) = thread else {
            return; // stopped before
        };
        // A permit is stored when the loop is not waiting yet, so the wake is never lost.
        self.wake.notify_one();
        // The thread never panics (`on_accept` only counts and spawns), so a join error would
        // carry nothing to act on.
        let _ = thread.join();
    }
}
