-- How far the `nodes_seen` reports run: the agent channel's clock at the last report sent.
-- One row; the replica sending the next report reads it under the tick's advisory lock.
CREATE TABLE seen_reports (
    id    INT PRIMARY KEY CHECK (id = 1),
    as_of TIMESTAMPTZ NOT NULL
);
