-- airlock schema v9 (DUR-7): a workspace's deletion is a cut (one
-- transaction: marked deleted_at, access and keys removed) and then a purge
-- in short steps; purged_at says the purge finished, so one interrupted by
-- a crash is resumed. Workspaces deleted before v9 were removed in one
-- transaction: they are purged already. The same text runs on both backends.
ALTER TABLE workspaces ADD COLUMN purged_at BIGINT;
UPDATE workspaces SET purged_at = deleted_at WHERE deleted_at IS NOT NULL;
