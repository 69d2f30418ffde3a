-- The agent's script trust report on the nodes projection (issue 15; AC-49, AG-39): the facts
-- of plane:unmanageable, written from node_reported events (their script_trust,
-- script_trust_files and script_trust_reason facts); rebuilt from the stream like the rest of
-- the row.
ALTER TABLE nodes
    -- trusted, untrusted_file or unusable_manifest as the agent last reported it; NULL before
    -- it has reported one (an absent report is never read as healthy).
    ADD COLUMN script_trust        TEXT,
    -- The files that differ (an empty list: looked, every file matches).
    ADD COLUMN script_trust_files  JSONB NOT NULL DEFAULT '[]',
    -- Why, in the agent's words.
    ADD COLUMN script_trust_reason TEXT,
    -- When the node first reported script_trust (since the last different one).
    ADD COLUMN script_trust_since  TIMESTAMPTZ,
    -- The time of the newest node_reported applied with a script_trust: an older one arriving
    -- late changes nothing.
    ADD COLUMN script_trust_as_of  TIMESTAMPTZ;
