-- airlock schema v7: retention per workspace (DUR-7). Each column is a
-- number of days; NULL keeps that material for ever (the default). The
-- same text runs on both backends.
CREATE TABLE retention_settings (
    workspace_id TEXT PRIMARY KEY REFERENCES workspaces(id),
    runs_days BIGINT,
    logs_days BIGINT,
    artifacts_days BIGINT,
    uploads_days BIGINT,
    fires_days BIGINT,
    updated_at BIGINT NOT NULL,
    updated_by TEXT NOT NULL
);
CREATE INDEX runs_finished ON runs (workspace_id, state, finished_at);
