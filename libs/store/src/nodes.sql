-- The node projection's table (capstan_store::nodes), as a new service's first migration
-- creates it; a service may add columns of its own.
CREATE TABLE nodes (
    node_id       BIGINT PRIMARY KEY,
    name          TEXT NOT NULL DEFAULT '',
    -- The key it was approved with.
    fingerprint   TEXT NOT NULL DEFAULT '',
    -- The addresses it reported at its join, in its order: the first is its own.
    addresses     JSONB NOT NULL DEFAULT '[]',
    -- Where its site lives: its join's, or its latest claim's.
    site_root     TEXT,
    container     TEXT,
    -- The Docker host its container sits on (placement_changed), and when that was said.
    host_node_id  BIGINT,
    placed_at     TIMESTAMPTZ,
    paired        BOOLEAN NOT NULL DEFAULT false,
    -- Its first approval heard here.
    approved_at   TIMESTAMPTZ,
    vocabulary    TEXT[] NOT NULL DEFAULT '{}',
    agent_version TEXT,
    -- The newest node_reported applied; NULL before any.
    reported_at   TIMESTAMPTZ
);
