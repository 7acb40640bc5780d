//! Stage 5, finish: the terminal record, redacted, written under the
//! run's fencing token; the run's folder removed.
//!
//! Must not: write anything once the token is stale (someone else owns the
//! run), or store a delivered secret in the error message or outputs.

use airlock_store::StoreError;
use serde_json::json;

use super::{Outcome, RunCx};
use crate::service::Service;

impl Service {
    pub(crate) async fn finish(&self, cx: &RunCx, mut outcome: Outcome) {
        let run_id = &cx.claim.run.id;
        let token = cx.claim.token;
        // KEY-6: nothing a delivered secret touched is stored unredacted.
        if let Some(r) = cx.redactor.as_deref().filter(|r| !r.is_empty()) {
            let f = &mut outcome.finish;
            f.error_message = f.error_message.as_deref().map(|m| r.redact(m));
            f.outputs = f.outputs.take().map(|o| {
                let text = r.redact(&o.to_string());
                serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
            });
        }
        // The staged input and whatever the workload left (it may hold a
        // delivered secret in the clear) go before the run is reported
        // done; a folder that stays is said in the run's events.
        match std::fs::remove_dir_all(&cx.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                let _ = self
                    .store
                    .append_event(
                        run_id,
                        token,
                        "warning",
                        &json!({"warning": "run_folder_kept", "detail": format!("{}: {e}", cx.dir.display())}),
                    )
                    .await;
            }
        }
        // A log line; the terminal record below is what counts.
        let _ = self
            .store
            .append_event(
                run_id,
                token,
                "finish",
                &json!({"state": outcome.state.as_str(), "error_code": outcome.finish.error_code}),
            )
            .await;
        match self
            .store
            .finish_run(run_id, token, outcome.state, &outcome.finish)
            .await
        {
            Ok(()) => {}
            // Someone else owns the run now: this executor writes nothing.
            Err(StoreError::StaleToken) => {}
            // The run stays `running` under a lease nobody renews: the
            // reaper settles it (requeued before the workload started,
            // otherwise `unknown` unless the worker is idempotent, DUR-2).
            Err(_) => {}
        }
    }
}
