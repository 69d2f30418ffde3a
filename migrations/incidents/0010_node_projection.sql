-- The node projection is the kit's (capstan_store::nodes): the same columns in every service
-- that embeds it, written by capstan_runtime::NodeEvent. The Docker host becomes the kit's
-- host_node_id (placed_at already guarded it). What only incidents keeps stays on the row as
-- its own columns, which the kit's writes leave alone: paired_at (when the latest pairing
-- began; NULL while no agent is paired, what agent_silent counts from), last_checkin_at,
-- install_state, recipes, in_test_account and alerts. Existing rows keep what they had; a
-- node paired now is paired in the kit's words too, from its pairing time.
ALTER TABLE nodes RENAME COLUMN docker_host TO host_node_id;
ALTER TABLE nodes
    ADD COLUMN fingerprint   TEXT NOT NULL DEFAULT '',
    ADD COLUMN addresses     JSONB NOT NULL DEFAULT '[]',
    ADD COLUMN site_root     TEXT,
    ADD COLUMN paired        BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN approved_at   TIMESTAMPTZ,
    ADD COLUMN vocabulary    TEXT[] NOT NULL DEFAULT '{}',
    ADD COLUMN agent_version TEXT,
    ADD COLUMN reported_at   TIMESTAMPTZ;
UPDATE nodes SET paired = true, approved_at = paired_at WHERE paired_at IS NOT NULL;
