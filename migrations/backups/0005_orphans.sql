-- The orphan sweep (beyond the spec): run objects in a space's listing that belong to no
-- recorded run (the parts of a run that died before its manifest) are recorded when a pass
-- first sees them and deleted with the plane's own credential a day later, only if nothing
-- claims them by then (services/backups/src/domain/orphans.rs).

CREATE TABLE orphans (
    space_id   BIGINT NOT NULL REFERENCES spaces (id),
    -- The node's key, `<seq>/<name>`.
    seq        BIGINT NOT NULL,
    name       TEXT NOT NULL,
    bytes      BIGINT NOT NULL,
    first_seen TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (space_id, seq, name)
);

-- What the sweep counts per node: orphans seen and waiting out their day, and every orphan it
-- deleted (with their bytes), since the node was first listed.
ALTER TABLE shelf
    ADD COLUMN orphans_waiting       INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN orphans_deleted       BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN orphan_bytes_deleted  BIGINT NOT NULL DEFAULT 0;
