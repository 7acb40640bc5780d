-- airlock schema v8 (IAM-2, OPS-2): login throttle state, shared by every
-- node on this database, so a throttle reached through one web node holds
-- on all of them. One row per (kind, key): kind is 'account' or 'client',
-- key an opaque string (a normalized user name, whether or not the account
-- exists, or a client address). Not owned by a workspace. Rows are
-- forgotten once quiet (see airlock_iam::throttle); the same text runs on
-- both backends.
CREATE TABLE login_throttles (
    kind TEXT NOT NULL,
    throttle_key TEXT NOT NULL,
    failures BIGINT NOT NULL,
    next_allowed_at BIGINT NOT NULL,
    last_failure_at BIGINT NOT NULL,
    PRIMARY KEY (kind, throttle_key)
);
CREATE INDEX login_throttles_age ON login_throttles (kind, last_failure_at);
