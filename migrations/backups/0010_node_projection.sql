-- The node projection is the kit's (capstan_store::nodes): the same columns in every service
-- that embeds it. Existing rows keep what they had; the columns this service never filled
-- start empty and fill from the next events (a replay of the stream fills them at once).
ALTER TABLE nodes
    ALTER COLUMN name SET DEFAULT '',
    ALTER COLUMN fingerprint SET DEFAULT '',
    ALTER COLUMN paired SET DEFAULT false,
    ADD COLUMN addresses     JSONB NOT NULL DEFAULT '[]',
    ADD COLUMN site_root     TEXT,
    ADD COLUMN container     TEXT,
    ADD COLUMN placed_at     TIMESTAMPTZ,
    ADD COLUMN agent_version TEXT,
    ADD COLUMN reported_at   TIMESTAMPTZ;
