-- When the agent channel announced the node's `docker_host` (its `placement_changed` time):
-- an older announcement heard late (a redelivery) never overwrites a newer one.
ALTER TABLE nodes ADD COLUMN placed_at TIMESTAMPTZ;
