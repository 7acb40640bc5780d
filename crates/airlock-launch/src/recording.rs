//! The recording launcher: checks and records each launch, starts nothing.

use std::sync::{Mutex, MutexGuard, PoisonError};

use airlock_sandbox::output::Captured;
use airlock_sandbox::{ContainmentReport, ExecutableIdentity, RunResult};

use crate::{Controls, Launch, LaunchFailure, Launched, Launcher};

type Answer = dyn Fn(&Launch, &Controls) -> Result<Launched, LaunchFailure> + Send + Sync;

/// A [`Launcher`] for tests of the orchestration above it. Each launch is
/// checked as the real launcher checks it ([`Launch::check`]: the request
/// parses, its channels are configured); a launch that passes is handed to
/// the answer (which may write into the request's mounts, send live output
/// or look at the cancel flag, as a workload would) and then recorded. A
/// launch that fails the check is refused and not recorded, as the real
/// launcher would start nothing.
pub struct RecordingLauncher {
    launches: Mutex<Vec<Launch>>,
    answer: Box<Answer>,
}

impl std::fmt::Debug for RecordingLauncher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingLauncher")
            .field("launches", &self.count())
            .finish_non_exhaustive()
    }
}

impl RecordingLauncher {
    /// Every launch "exits 0" with empty output.
    pub fn succeeding() -> Self {
        Self::answering(|launch, _| {
            Ok(Launched {
                result: fake_result(Some(0), None),
                egress: launch.egress.as_ref().map(|_| Default::default()),
                notices: Vec::new(),
            })
        })
    }

    /// Launches are answered by `answer`.
    pub fn answering(
        answer: impl Fn(&Launch, &Controls) -> Result<Launched, LaunchFailure> + Send + Sync + 'static,
    ) -> Self {
        Self {
            launches: Mutex::new(Vec::new()),
            answer: Box::new(answer),
        }
    }

    /// The launches seen so far, oldest first.
    pub fn launches(&self) -> MutexGuard<'_, Vec<Launch>> {
        // A panicking answer (a failed assertion in a test) must not hide
        // what was recorded before it.
        self.launches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn count(&self) -> usize {
        self.launches().len()
    }
}

impl Launcher for RecordingLauncher {
    fn launch(&self, launch: Launch, controls: Controls) -> Result<Launched, LaunchFailure> {
        launch.check()?;
        let answer = (self.answer)(&launch, &controls);
        self.launches().push(launch);
        answer
    }
}

/// A result as the broker would return it for a workload that ended with
/// `exit_code` or was killed by `signal`; its containment report says
/// `uncontained`, because nothing contained it.
pub fn fake_result(exit_code: Option<i32>, signal: Option<i32>) -> RunResult {
    RunResult {
        exit_code,
        signal,
        timed_out: false,
        cancelled: false,
        duration_ms: 0,
        stdout: Captured::default(),
        stderr: Captured::default(),
        containment: ContainmentReport::uncontained(),
        limit_hits: Vec::new(),
        executable: ExecutableIdentity {
            path: "/fake".into(),
            dev: 0,
            ino: 0,
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            sha256: String::new(),
        },
        timings: Vec::new(),
        commit_errors: Vec::new(),
    }
}
