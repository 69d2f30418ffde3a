-- The Docker host each container node was last announced under (`placement_changed`), so a
-- change of placement (PV-15) is announced once, in the transaction that made it. A node with
-- no row, or a NULL host, was announced under none.
CREATE TABLE placements (
    node_id      BIGINT PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
    host_node_id BIGINT
);

CREATE INDEX placements_by_host ON placements (host_node_id) WHERE host_node_id IS NOT NULL;
