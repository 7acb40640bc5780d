-- airlock schema v6: agent runs (issue 13). The transcript of each agent
-- run — what the model was sent and what it answered, persisted before the
-- harness acts on it — and the workspace's model profiles (routing
-- metadata only: a profile names a credential channel of the operator's
-- egress policy, never a key). The same text runs on both backends.

-- AGT-1, DUR-2: a run's conversation, in order. `kind` is `prompt`,
-- `response` (a model's complete answer, with usage and cost) or
-- `tool_result` (what the model was told about one call).
CREATE TABLE agent_items (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    run_id TEXT NOT NULL REFERENCES runs(id),
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    call_id TEXT,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, call_id)
);

-- AGT-2: model profiles are workspace-scoped routing metadata.
CREATE TABLE model_profiles (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    name TEXT NOT NULL,
    body TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    updated_by TEXT NOT NULL,
    PRIMARY KEY (workspace_id, name)
);
