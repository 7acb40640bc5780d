-- airlock schema v7 (DUR-7): retention per workspace and workspace deletion.
-- Each retention_settings column is a number of days; NULL keeps that
-- material for ever (the default). The same text runs on both backends.
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

-- Workspace deletion (DUR-7): the row stays, marked, so that the deleted
-- workspace's audit chain (append-only) is still listed and verified.
ALTER TABLE workspaces ADD COLUMN deleted_at BIGINT;
