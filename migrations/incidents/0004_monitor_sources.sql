-- Projection of the monitor service's judgements (site_down, site_up, cert_problem_changed),
-- the facts of plane:site_down and plane:cert_problem; rebuilt from its stream like the others.
CREATE TABLE monitor_facts (
    node_id          BIGINT PRIMARY KEY,
    -- When the current outage began; NULL while the site answers.
    site_down_since  TIMESTAMPTZ,
    site_down_reason TEXT,
    -- The time of the newest site event applied: an older one arriving late changes nothing.
    site_as_of       TIMESTAMPTZ,
    -- The served certificate's problem (the contract's CertProblem), or NULL.
    cert_problem     JSONB,
    cert_as_of       TIMESTAMPTZ
);
