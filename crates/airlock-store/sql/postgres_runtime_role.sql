-- airlock on PostgreSQL with two roles (AUD-3): the OWNER owns the tables
-- (migrations run as it: `airlock admin migrate`), the RUNTIME role is what
-- `airlock up` connects as. This script gives the runtime role what the
-- server needs and no more: on the audit log, only INSERT and SELECT.
--
-- Run it as the owner after the migrations, and again after every upgrade
-- (it is idempotent; new tables get no grant until it runs). Replace
-- `airlock_runtime` with your runtime role's name (or print the script with
-- `airlock admin pg-runtime-grants --role NAME`). Create the role first:
--   CREATE ROLE airlock_runtime LOGIN PASSWORD '…';
-- The runtime role must own nothing and must not be a superuser: the
-- owner of a table can drop or disable its triggers.

GRANT USAGE ON SCHEMA public TO airlock_runtime;
REVOKE CREATE ON SCHEMA public FROM airlock_runtime;

-- Everything the server reads and writes.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM airlock_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO airlock_runtime;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO airlock_runtime;

-- The audit log: append and read. No UPDATE, DELETE or TRUNCATE (refused
-- before the triggers run); not being the owner, the runtime role cannot
-- drop, disable or replace the triggers either.
REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON audit_events FROM airlock_runtime;

-- The schema's record is the owner's: the runtime role only reads it.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON schema_migrations FROM airlock_runtime;
