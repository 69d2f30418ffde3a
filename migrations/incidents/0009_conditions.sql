-- Conditions are judged where the facts live (issue 28): the monitor, backups and the agent
-- channel judge their own conditions and publish them (`capstan.conditions.<domain>.<name>`);
-- this service keeps the newest judgement of each condition on each node and turns the
-- happening ones into incidents. The per-source facts it judged from before go.
CREATE TABLE conditions (
    node_id     BIGINT NOT NULL,
    -- plane:<name>: the incident's source and kind.
    source      TEXT NOT NULL,
    -- The domain that judged it (the subject it came on proves it).
    domain      TEXT NOT NULL,
    happening   BOOLEAN NOT NULL,
    severity    TEXT NOT NULL CHECK (severity IN ('warning', 'critical')),
    -- The plane's words for it, and what the judge saw.
    title       TEXT NOT NULL,
    evidence    TEXT NOT NULL,
    -- When it began, while happening (kept from the first report while it goes on).
    since       TIMESTAMPTZ,
    -- When the judge looked: an older judgement arriving late changes nothing.
    observed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (node_id, source),
    CHECK (NOT happening OR since IS NOT NULL)
);
CREATE INDEX conditions_happening ON conditions (node_id) WHERE happening;

-- What was open stays open until its judge says it is over: every open incident of another
-- service's source becomes a happening condition as of its opening, which a later "not
-- happening" (or a newer judgement) replaces.
INSERT INTO conditions (node_id, source, domain, happening, severity, title, evidence, since,
                        observed_at)
SELECT node_id, source,
       CASE source
           WHEN 'plane:site_down' THEN 'monitor'
           WHEN 'plane:cert_problem' THEN 'monitor'
           WHEN 'plane:agent_update_refused' THEN 'agent_channel'
           WHEN 'plane:unmanageable' THEN 'agent_channel'
           ELSE 'backups'
       END,
       TRUE, severity, title, detail, opened_at, opened_at
FROM incidents
WHERE status = 'open' AND source LIKE 'plane:%' AND source <> 'plane:agent_silent'
ON CONFLICT (node_id, source) DO NOTHING;

DROP TABLE monitor_facts;
DROP TABLE backup_facts;
ALTER TABLE IF EXISTS nodes
    DROP COLUMN IF EXISTS update_state,
    DROP COLUMN IF EXISTS update_offered,
    DROP COLUMN IF EXISTS update_reason,
    DROP COLUMN IF EXISTS update_since,
    DROP COLUMN IF EXISTS update_as_of,
    DROP COLUMN IF EXISTS script_trust,
    DROP COLUMN IF EXISTS script_trust_files,
    DROP COLUMN IF EXISTS script_trust_reason,
    DROP COLUMN IF EXISTS script_trust_since,
    DROP COLUMN IF EXISTS script_trust_as_of;
