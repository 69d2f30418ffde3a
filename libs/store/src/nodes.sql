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
    reported_at   TIMESTAMPTZ,
    -- Provisioning's install state (PV-01, its install_state_changed): NULL is operational;
    -- installing, install_failed, copy, switching, retired (or any word not known) are not.
    install_state TEXT,
    -- When the install state applied was changed; an older change heard late is ignored.
    install_state_at TIMESTAMPTZ
);

-- Install states heard for a node before its approval (provisioning makes the node and says
-- `installing` long before the node's agent joins): kept here until node_approved makes the
-- node's row, which then takes it.
CREATE TABLE early_install_states (
    node_id       BIGINT PRIMARY KEY,
    install_state TEXT,
    changed_at    TIMESTAMPTZ NOT NULL
);
