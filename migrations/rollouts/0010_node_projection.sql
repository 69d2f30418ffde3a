-- The node projection is the kit's (capstan_store::nodes): the same columns in every service
-- that embeds it. Existing rows keep what they had; a node that reported before this
-- migration counts as reported (its agent_version is set), the columns this service never
-- filled start empty and fill from the next events.
ALTER TABLE nodes
    ALTER COLUMN name SET DEFAULT '',
    ALTER COLUMN paired SET DEFAULT false,
    ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '',
    ADD COLUMN addresses   JSONB NOT NULL DEFAULT '[]',
    ADD COLUMN placed_at   TIMESTAMPTZ,
    ADD COLUMN approved_at TIMESTAMPTZ,
    ADD COLUMN reported_at TIMESTAMPTZ;
UPDATE nodes SET reported_at = now() WHERE agent_version IS NOT NULL;
