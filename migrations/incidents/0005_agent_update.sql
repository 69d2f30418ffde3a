-- The agent's self-update report on the nodes projection (issue 15): the facts of
-- plane:agent_update_refused, written from node_reported events (their update_state,
-- update_offered and update_reason facts); rebuilt from the stream like the rest of the row.
ALTER TABLE nodes
    -- AC-43's closed set as the agent last reported it; NULL before it has reported one.
    ADD COLUMN update_state   TEXT,
    -- The version on offer the verdict is about, and why, in the agent's words.
    ADD COLUMN update_offered TEXT,
    ADD COLUMN update_reason  TEXT,
    -- When the node first reported update_state (since the last different one).
    ADD COLUMN update_since   TIMESTAMPTZ,
    -- The time of the newest node_reported applied with an update_state: an older one arriving
    -- late changes nothing, so a redelivery never brings back a refusal a later release ended.
    ADD COLUMN update_as_of   TIMESTAMPTZ;
