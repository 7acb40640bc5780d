-- airlock schema v3: identity (IAM-1 … IAM-7). Only hashes of tokens,
-- passwords and codes are stored; TOTP secrets live in the vault.
CREATE TABLE users (
    id TEXT PRIMARY KEY,
    username TEXT NOT NULL UNIQUE,
    password_hash TEXT NULL,
    created_at BIGINT NOT NULL,
    disabled_at BIGINT NULL
);

CREATE TABLE memberships (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    user_id TEXT NOT NULL REFERENCES users(id),
    role TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (workspace_id, user_id)
);
CREATE INDEX memberships_user ON memberships (user_id);

CREATE TABLE bootstrap (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    token_hash TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    used_at BIGINT NULL,
    owner_id TEXT NULL
);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    user_id TEXT NOT NULL REFERENCES users(id),
    csrf_hash TEXT NOT NULL,
    mfa_pending BIGINT NOT NULL DEFAULT 0,
    user_agent TEXT NULL,
    client_ip TEXT NULL,
    created_at BIGINT NOT NULL,
    last_seen_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    user_id TEXT NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    prefix TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL, -- JSON array of permission strings
    created_at BIGINT NOT NULL,
    expires_at BIGINT NULL,
    revoked_at BIGINT NULL,
    last_used_at BIGINT NULL
);
CREATE INDEX api_keys_owner ON api_keys (workspace_id, user_id);

CREATE TABLE mfa (
    user_id TEXT PRIMARY KEY REFERENCES users(id),
    confirmed_at BIGINT NULL,
    last_step BIGINT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE recovery_codes (
    user_id TEXT NOT NULL REFERENCES users(id),
    code_hash TEXT NOT NULL,
    used_at BIGINT NULL,
    PRIMARY KEY (user_id, code_hash)
);

CREATE TABLE reset_tokens (
    token_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    used_at BIGINT NULL
);
