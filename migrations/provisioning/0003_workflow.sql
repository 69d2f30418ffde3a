-- The provision workflow (issue 29): what each step stored before the next began, the joins
-- auto-approval judges, and the node facts it reads (the kit's node projection).

-- The instance's SSH host key as first seen (trust on first use; a later session refuses any
-- other), the install's output with every secret masked, whether the root password was
-- retired and proven refused (PV-06), the join the node's agent was admitted with, and who runs
-- the provision now (a replica's lease, renewed while a step runs, so a restarted service or
-- another replica resumes it once the lease lapses).
ALTER TABLE provisions
    ADD COLUMN host_key         TEXT,
    ADD COLUMN install_log      TEXT NOT NULL DEFAULT '',
    ADD COLUMN password_retired BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN join_id          UUID,
    ADD COLUMN lease_holder     TEXT,
    ADD COLUMN lease_until      TIMESTAMPTZ,
    ADD COLUMN retry_at         TIMESTAMPTZ;
CREATE INDEX provisions_in_flight ON provisions (id) WHERE step NOT IN ('done', 'install_failed');

-- The agent channel's joins, as its events told them (join_requested, node_approved,
-- join_rejected), with auto-approval's latest verdict over each (AC-09).
CREATE TABLE joins (
    id             UUID PRIMARY KEY,
    name           TEXT NOT NULL,
    fingerprint    TEXT NOT NULL,
    source_address TEXT NOT NULL,
    addresses      TEXT[] NOT NULL DEFAULT '{}',
    requested_at   TIMESTAMPTZ NOT NULL,
    expires_at     TIMESTAMPTZ NOT NULL,
    state          TEXT NOT NULL DEFAULT 'pending'
                   CHECK (state IN ('pending', 'approved', 'rejected')),
    node_id        BIGINT,
    -- The provision it matched, and why it is still pending (NULL: never judged, or no match).
    provision_id   BIGINT REFERENCES provisions (id),
    reasons        TEXT[] NOT NULL DEFAULT '{}',
    key_differs    BOOLEAN NOT NULL DEFAULT false,
    second_join    BOOLEAN NOT NULL DEFAULT false,
    judged_at      TIMESTAMPTZ
);
CREATE INDEX joins_pending ON joins (source_address) WHERE state = 'pending';

-- The node projection's table (capstan_store::nodes), the kit's columns.
CREATE TABLE nodes (
    node_id       BIGINT PRIMARY KEY,
    name          TEXT NOT NULL DEFAULT '',
    fingerprint   TEXT NOT NULL DEFAULT '',
    addresses     JSONB NOT NULL DEFAULT '[]',
    site_root     TEXT,
    container     TEXT,
    host_node_id  BIGINT,
    placed_at     TIMESTAMPTZ,
    paired        BOOLEAN NOT NULL DEFAULT false,
    approved_at   TIMESTAMPTZ,
    vocabulary    TEXT[] NOT NULL DEFAULT '{}',
    agent_version TEXT,
    reported_at   TIMESTAMPTZ
);
