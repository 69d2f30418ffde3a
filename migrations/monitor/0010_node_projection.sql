-- The node projection is the kit's (capstan_store::nodes): the same columns in every service
-- that embeds it. Existing rows keep what they had. The words become TEXT[] like everywhere
-- else; "has the node reported yet" (NULL words before) is now reported_at.
ALTER TABLE nodes
    ADD COLUMN fingerprint   TEXT NOT NULL DEFAULT '',
    ADD COLUMN site_root     TEXT,
    ADD COLUMN host_node_id  BIGINT,
    ADD COLUMN placed_at     TIMESTAMPTZ,
    ADD COLUMN approved_at   TIMESTAMPTZ,
    ADD COLUMN agent_version TEXT,
    ADD COLUMN reported_at   TIMESTAMPTZ,
    ADD COLUMN words         TEXT[] NOT NULL DEFAULT '{}';
UPDATE nodes
    SET words = ARRAY(SELECT jsonb_array_elements_text(vocabulary)), reported_at = now()
    WHERE vocabulary IS NOT NULL;
ALTER TABLE nodes DROP COLUMN vocabulary;
ALTER TABLE nodes RENAME COLUMN words TO vocabulary;
