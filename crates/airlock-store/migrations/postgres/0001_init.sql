-- airlock schema v1 (SQLite). Every owned row carries a workspace id.
CREATE TABLE workspaces (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    worker_id TEXT NOT NULL,
    state TEXT NOT NULL,
    input TEXT NOT NULL,
    input_hash TEXT NOT NULL,
    trigger_source TEXT NOT NULL,
    actor TEXT NOT NULL,
    plan_id TEXT,
    created_at BIGINT NOT NULL,
    started_at BIGINT,
    finished_at BIGINT,
    lease_owner TEXT,
    lease_expires_at BIGINT,
    fencing_token BIGINT NOT NULL DEFAULT 0,
    workload_started BIGINT NOT NULL DEFAULT 0,
    attempt BIGINT NOT NULL DEFAULT 0,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    exit_code BIGINT,
    signal BIGINT,
    error_code TEXT,
    error_message TEXT,
    containment TEXT,
    egress TEXT,
    outputs TEXT,
    next_event_seq BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX runs_queue ON runs (state, created_at, id);
CREATE INDEX runs_workspace ON runs (workspace_id, created_at, id);

CREATE TABLE run_events (
    workspace_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs(id),
    seq BIGINT NOT NULL,
    at BIGINT NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE artifacts (
    workspace_id TEXT NOT NULL,
    run_id TEXT NOT NULL REFERENCES runs(id),
    name TEXT NOT NULL,
    digest TEXT NOT NULL,
    size BIGINT NOT NULL,
    media_type TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, name)
);

CREATE TABLE idempotency_keys (
    workspace_id TEXT NOT NULL,
    actor TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    run_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, actor, key)
);

CREATE TABLE plans (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    worker_id TEXT NOT NULL,
    plan TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT,
    run_id TEXT
);

CREATE TABLE audit_events (
    workspace_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    line TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (workspace_id, seq)
);

CREATE FUNCTION airlock_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only';
END
$$;

CREATE TRIGGER audit_events_no_update_delete BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION airlock_audit_append_only();

CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION airlock_audit_append_only();
