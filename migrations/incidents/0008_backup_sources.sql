-- Projection of the backups service's judgement of each node's backup health
-- (backups.health_changed, BK-21): the facts of plane:backup_failed, plane:backups_stopped and
-- plane:backup_unverified; rebuilt from its stream like the others.
CREATE TABLE backup_facts (
    node_id       BIGINT PRIMARY KEY,
    -- The contract's BackupHealth: {"failed", "stopped", "unverified"}, each null or
    -- {"reason", "since"}.
    backup_health JSONB NOT NULL,
    -- The judged_at of the newest event applied: an older one arriving late changes nothing.
    backup_as_of  TIMESTAMPTZ NOT NULL
);
