-- Edge versus direct (MO-11, MO-12): each run an operator asked for, its paths' figures and
-- its verdict. A run is taken by one replica (queued -> running) and finished by it (done);
-- one found running past the run limit was lost with its replica (failed).
CREATE TABLE edge_probes (
    id           BIGSERIAL PRIMARY KEY,
    node_id      BIGINT NOT NULL,
    status       TEXT NOT NULL DEFAULT 'queued'
                 CHECK (status IN ('queued', 'running', 'done', 'failed')),
    -- The node's uptime URL when the run was asked for (its origin is compared).
    url          TEXT NOT NULL,
    -- The node's own addresses when the run was asked for (the direct paths).
    addresses    JSONB NOT NULL DEFAULT '[]',
    requested_by TEXT NOT NULL,
    requested_at TIMESTAMPTZ NOT NULL,
    started_at   TIMESTAMPTZ,
    finished_at  TIMESTAMPTZ,
    rounds       INTEGER NOT NULL DEFAULT 0,
    -- The contract's EdgePath list, the edge first.
    paths        JSONB NOT NULL DEFAULT '[]',
    -- The verdict line, in the spec's words; set when done.
    verdict      TEXT,
    notes        JSONB NOT NULL DEFAULT '[]',
    error        TEXT
);
-- The per-node hourly limit and the node page's list.
CREATE INDEX edge_probes_by_node ON edge_probes (node_id, requested_at);
CREATE INDEX edge_probes_waiting ON edge_probes (requested_at) WHERE status IN ('queued', 'running');
