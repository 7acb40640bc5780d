-- airlock schema v4: the complete HTTP API (issue 7): webhook secrets and
-- the replay store, schedule fires (exactly once), uploads, durable quotas.
-- The same text runs on both backends.

-- Webhook signing secrets: values live in the vault; rows record versions.
CREATE TABLE webhook_secrets (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    worker_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    retired_at BIGINT,
    PRIMARY KEY (workspace_id, worker_id, version)
);

-- Replay store (API-9): a delivery id is accepted once per endpoint; rows
-- outlive the 300 s tolerance (pruned after a day).
CREATE TABLE webhook_deliveries (
    workspace_id TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    run_id TEXT,
    PRIMARY KEY (workspace_id, worker_id, delivery_id)
);
CREATE INDEX webhook_deliveries_age ON webhook_deliveries (received_at);

-- Schedule fires (RUN-6): the primary key makes each fire happen once
-- across every scheduler node.
CREATE TABLE schedule_fires (
    workspace_id TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    trigger_index BIGINT NOT NULL,
    fire_at BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    run_id TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, worker_id, trigger_index, fire_at)
);

-- Uploads (API-5): content-addressed blobs (in the artifact store), owned
-- by a workspace and the uploading user.
CREATE TABLE uploads (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    digest TEXT NOT NULL,
    size BIGINT NOT NULL,
    media_type TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX uploads_workspace ON uploads (workspace_id, created_at);

-- Durable quotas (API-4): usage per subject ("user:ID", "ws:ID") per window.
CREATE TABLE quota_usage (
    subject TEXT NOT NULL,
    window_start BIGINT NOT NULL,
    used BIGINT NOT NULL,
    PRIMARY KEY (subject, window_start)
);
