-- The storage pass (BK-12, BK-13, BK-15, BK-17): what listing a node's storage with the plane's
-- own credential saw, and when retention first found a chain surplus.

-- One row per node the pass has listed.
CREATE TABLE shelf (
    node_id       BIGINT PRIMARY KEY,
    -- BK-17: when every live space of the node was last listed, and the newest object write
    -- those listings saw.
    checked_at    TIMESTAMPTZ,
    newest_at     TIMESTAMPTZ,
    -- BK-15: the storage check's one line; NULL when every backup is whole. Left as it was
    -- when a manifest could not be read (a fact about the pass, not the storage).
    problem       TEXT,
    -- Why the last pass could not list or read something (NULL when it could).
    pass_error    TEXT,
    pass_error_at TIMESTAMPTZ
);

-- BK-12: a chain goes a day after a pass first found it surplus.
CREATE TABLE surplus (
    space_id BIGINT NOT NULL REFERENCES spaces (id),
    full_seq BIGINT NOT NULL,
    since    TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (space_id, full_seq)
);

-- BK-22: the owner's recovery key as the node's latest check_status reported it (read from
-- the agent channel's job_finished; never written by the plane on a node).
ALTER TABLE nodes
    ADD COLUMN recovery_state       TEXT CHECK (recovery_state IN ('already', 'none', 'invalid')),
    ADD COLUMN recovery_fingerprint TEXT,
    ADD COLUMN recovery_reported_at TIMESTAMPTZ;

-- BK-21: the node's backup health as last judged and sent (backups.health_changed).
CREATE TABLE health (
    node_id   BIGINT PRIMARY KEY,
    health    JSONB NOT NULL,
    judged_at TIMESTAMPTZ NOT NULL
);
