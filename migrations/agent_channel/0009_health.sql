-- Each node's health dot as the monitor judged it (MO-07): the projection of the monitor's
-- health_changed events, for the node views and the listing's health filter. The rule lives in
-- the monitor alone; a node not here is gray, never checked.
CREATE TABLE node_health (
    node_id    BIGINT PRIMARY KEY,
    dot        TEXT NOT NULL CHECK (dot IN ('green', 'yellow', 'red', 'gray')),
    reasons    JSONB NOT NULL DEFAULT '[]',
    checked_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX node_health_by_dot ON node_health (dot);
