//! A run's events (API-6), its log and its artifacts, for every front end:
//! a page at a time, or followed live until the run ends.

use std::time::Duration;

use airlock_iam::Permission;
use airlock_protocol::Error;
use airlock_protocol::runs::{Artifact, EventPage, RunEvent};

use crate::caller::Caller;
use crate::error::{Result, StoreResultExt};
use crate::service::Service;

/// The largest log [`Service::run_log`] assembles.
pub const MAX_LOG_BYTES: usize = 16 << 20;
/// How often a follower looks for new events when there are none.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// What a follower gets next.
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    Events(Vec<RunEvent>),
    /// The run is terminal and every event has been delivered.
    End,
}

/// A run's events followed live (API-6): pages in order, then [`Followed::End`].
#[derive(Debug)]
pub struct EventFollower {
    svc: std::sync::Arc<Service>,
    workspace: String,
    run_id: String,
    after: i64,
    done: bool,
}

impl EventFollower {
    /// The next events after the last delivered one, waiting while the
    /// run is live and quiet; `None` after [`Followed::End`]. A store
    /// failure ends the stream with the error (the client resumes from
    /// the last event id it saw).
    pub async fn next(&mut self) -> Option<Result<Followed>> {
        if self.done {
            return None;
        }
        loop {
            let events = match self
                .svc
                .store
                .events(&self.workspace, &self.run_id, self.after, 100)
                .await
                .svc()
            {
                Ok(e) => e,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            if let Some(last) = events.last() {
                self.after = last.seq;
                return Some(Ok(Followed::Events(events)));
            }
            let terminal = match self.svc.run_in(&self.workspace, &self.run_id).await {
                Ok(r) => r.state.is_terminal(),
                // Gone (or the caller's workspace lost it): nothing follows.
                Err(_) => true,
            };
            if terminal {
                self.done = true;
                return Some(Ok(Followed::End));
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    }
}

impl Service {
    /// Events of a run after `after` (a page of at most `limit`, 1 to 500).
    pub async fn run_events(
        &self,
        c: &Caller,
        run_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<EventPage> {
        c.require(Permission::RunsRead)?;
        if !(1..=airlock_protocol::MAX_PAGE).contains(&limit) {
            return Err(Error::invalid_query("limit must be between 1 and 500"));
        }
        let run = self.run_in(&c.workspace, run_id).await?;
        let events = self
            .store
            .events(&c.workspace, run_id, after.max(0), limit)
            .await
            .svc()?;
        let finished = run.state.is_terminal() && i64::try_from(events.len()).unwrap_or(0) < limit;
        Ok(EventPage { events, finished })
    }

    /// Follows a run's events from after `after` until it ends.
    pub async fn follow_events(
        self: &std::sync::Arc<Self>,
        c: &Caller,
        run_id: &str,
        after: i64,
    ) -> Result<EventFollower> {
        c.require(Permission::RunsRead)?;
        self.run_in(&c.workspace, run_id).await?;
        Ok(EventFollower {
            svc: self.clone(),
            workspace: c.workspace.clone(),
            run_id: run_id.to_string(),
            after: after.max(0),
            done: false,
        })
    }

    /// A run's log as text: its `log` events in order (redacted when they
    /// were stored), at most [`MAX_LOG_BYTES`].
    pub async fn run_log(&self, c: &Caller, run_id: &str) -> Result<String> {
        c.require(Permission::RunsRead)?;
        self.run_in(&c.workspace, run_id).await?;
        let mut text = String::new();
        let mut after = 0;
        loop {
            let events = self
                .store
                .events(&c.workspace, run_id, after, 500)
                .await
                .svc()?;
            let Some(last) = events.last().map(|e| e.seq) else {
                break;
            };
            for e in events.iter().filter(|e| e.kind == "log") {
                text.push_str(e.data["text"].as_str().unwrap_or(""));
            }
            after = last;
            if text.len() > MAX_LOG_BYTES {
                break;
            }
        }
        Ok(text)
    }

    /// An artifact of a run and the path of its immutable blob.
    pub async fn artifact(
        &self,
        c: &Caller,
        run_id: &str,
        name: &str,
    ) -> Result<(Artifact, std::path::PathBuf)> {
        c.require(Permission::RunsRead)?;
        let a = self
            .store
            .artifacts(&c.workspace, run_id)
            .await
            .svc()?
            .into_iter()
            .find(|a| a.name == name)
            .ok_or_else(Error::not_found)?;
        // Fetched (and checked against its digest) from the shared blob
        // store when another node made it (DUR-5).
        let path = match self
            .blobs
            .fetch(&a.digest, u64::try_from(a.size).unwrap_or(0))
            .await
        {
            Ok(p) => p,
            Err(crate::blobs::BlobError::NotFound(_)) => return Err(Error::not_found()),
            Err(e) => return Err(e.to_error(&format!("artifact {name}"))),
        };
        Ok((a, path))
    }
}
