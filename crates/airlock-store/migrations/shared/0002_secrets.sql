-- airlock schema v2: the vault's records (ciphertext only; keys live in the key directory).
CREATE TABLE data_keys (
    workspace_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    wrapped TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, version)
);

CREATE TABLE secrets (
    workspace_id TEXT NOT NULL,
    name TEXT NOT NULL,
    version BIGINT NOT NULL,
    sealed TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    last_used_at BIGINT,
    PRIMARY KEY (workspace_id, name)
);
