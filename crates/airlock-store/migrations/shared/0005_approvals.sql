-- airlock schema v5: agents under control (issue 13): payload-bound
-- approvals and the standing rules a decision may create, the action
-- journal of agent runs, per-workspace approval settings and the
-- emergency stop. The same text runs on both backends. Every owned row
-- carries its workspace.

-- AGT-5: an approval binds the SHA-256 of the RFC 8785 canonical JSON of
-- its payload (stored canonical, in full), the requester, the run and an
-- expiry. Decided once (`pending` → approved | rejected | expired |
-- cancelled), used once (`approved` → consumed).
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    run_id TEXT NOT NULL REFERENCES runs(id),
    worker_id TEXT NOT NULL,
    action_id TEXT,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    payload_hash TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    run_actor TEXT NOT NULL,
    reason TEXT,
    state TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    decided_by TEXT,
    decided_at BIGINT,
    note TEXT,
    grant_kind TEXT,
    grant_id TEXT,
    consumed_at BIGINT
);
CREATE INDEX approvals_workspace ON approvals (workspace_id, created_at, id);
CREATE INDEX approvals_open ON approvals (state, expires_at);
CREATE INDEX approvals_run ON approvals (run_id);

-- Standing grants ("always allow similar"): narrow, listed, revocable.
CREATE TABLE approval_rules (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    kind TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    run_id TEXT,
    payload_hash TEXT,
    argv_prefix TEXT,
    source_approval TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT,
    revoked_by TEXT
);
CREATE INDEX approval_rules_workspace ON approval_rules (workspace_id, worker_id);

-- Whether the member who started a run may approve its requests.
CREATE TABLE approval_settings (
    workspace_id TEXT PRIMARY KEY REFERENCES workspaces(id),
    allow_self_approval BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    updated_by TEXT NOT NULL
);

-- DUR-2 for agents: one row per tool call, written before anything
-- happens, `dispatched` committed before the side effect starts.
CREATE TABLE actions (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    run_id TEXT NOT NULL REFERENCES runs(id),
    seq BIGINT NOT NULL,
    idempotency_key TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    payload_hash TEXT NOT NULL,
    state TEXT NOT NULL,
    decision TEXT,
    approval_id TEXT,
    grant_id TEXT,
    attempt BIGINT NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT,
    created_at BIGINT NOT NULL,
    decided_at BIGINT,
    dispatched_at BIGINT,
    finished_at BIGINT,
    settled_by TEXT,
    UNIQUE (run_id, idempotency_key),
    UNIQUE (run_id, seq)
);
CREATE INDEX actions_state ON actions (workspace_id, state);

-- AGT-6: the emergency stop, one row per workspace that ever stopped.
CREATE TABLE emergency_stops (
    workspace_id TEXT PRIMARY KEY REFERENCES workspaces(id),
    stopped BIGINT NOT NULL,
    changed_at BIGINT NOT NULL,
    changed_by TEXT NOT NULL,
    reason TEXT
);
