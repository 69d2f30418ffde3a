-- The incidents service: its projections of other services' facts (nodes, operators), the
-- agent cases it holds, incidents and their timelines, silences, webhooks, and signals with
-- their deliveries (the durable outbox of mail, webhooks and bells).

-- Projection of the agent channel's node events (node_approved, node_reported, node_left,
-- node_disconnected, nodes_seen); rebuilt from the stream by replaying it (docs/incidents.md).
CREATE TABLE nodes (
    node_id         BIGINT PRIMARY KEY,
    name            TEXT NOT NULL DEFAULT '',
    -- When its agent was paired; NULL while no agent is paired.
    paired_at       TIMESTAMPTZ,
    -- The agent channel's last stamp of a check-in, as its nodes_seen reports say.
    last_checkin_at TIMESTAMPTZ,
    -- Provisioning's install state; NULL is installed and running (operational).
    install_state   TEXT,
    -- The recipe names the node last reported.
    recipes         JSONB NOT NULL DEFAULT '[]',
    container       TEXT,
    docker_host     BIGINT,
    in_test_account BOOLEAN NOT NULL DEFAULT false,
    -- The node's Alerts setting (IN-15), owned here.
    alerts          TEXT NOT NULL DEFAULT 'automatic' CHECK (alerts IN ('automatic', 'on', 'off'))
);

-- How far the agent channel's nodes_seen reports run: its clock at the latest report.
CREATE TABLE checkins_known (
    id    INT PRIMARY KEY CHECK (id = 1),
    as_of TIMESTAMPTZ NOT NULL
);

-- Projection of the gateway's operator_changed events: who a signal tells.
CREATE TABLE operators (
    operator_id BIGINT PRIMARY KEY,
    name        TEXT NOT NULL,
    level       SMALLINT NOT NULL CHECK (level IN (7, 8, 10)),
    email       TEXT,
    active      BOOLEAN NOT NULL
);

-- An operator's mail preferences (IN-14), owned here; absent is the default.
CREATE TABLE mail_preferences (
    operator_id   BIGINT PRIMARY KEY,
    email_warning BOOLEAN NOT NULL,
    email_critical BOOLEAN NOT NULL
);

-- Agent cases (AC-47): the latest cases of each recipe of each node.
CREATE TABLE cases (
    node_id      BIGINT NOT NULL,
    source       TEXT NOT NULL,
    id           BIGINT NOT NULL CHECK (id > 0),
    state        TEXT NOT NULL CHECK (state IN ('open', 'closed')),
    opened_at    TIMESTAMPTZ NOT NULL,
    closed_at    TIMESTAMPTZ,
    summary      TEXT NOT NULL,
    notes        INT NOT NULL DEFAULT 0,
    last_note    TEXT,
    body         TEXT,
    last_seen_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (node_id, source, id)
);

-- The latest case the plane refused per node and source, with why (AC-47), for the node page.
CREATE TABLE case_refusals (
    node_id  BIGINT NOT NULL,
    source   TEXT NOT NULL,
    case_id  BIGINT,
    reason   TEXT NOT NULL,
    at       TIMESTAMPTZ NOT NULL,
    refusals BIGINT NOT NULL DEFAULT 1,
    PRIMARY KEY (node_id, source)
);

CREATE TABLE incidents (
    id            BIGSERIAL PRIMARY KEY,
    node_id       BIGINT NOT NULL,
    source        TEXT NOT NULL,
    severity      TEXT NOT NULL CHECK (severity IN ('warning', 'critical')),
    status        TEXT NOT NULL CHECK (status IN ('open', 'closed')),
    triage        TEXT NOT NULL CHECK (triage IN ('new', 'snoozed', 'resolved', 'ignored')),
    triage_at     TIMESTAMPTZ NOT NULL,
    -- The operator who set the triage; NULL is the reconciler.
    triage_by     TEXT,
    snooze_until  TIMESTAMPTZ,
    title         TEXT NOT NULL,
    detail        TEXT NOT NULL,
    opened_at     TIMESTAMPTZ NOT NULL,
    closed_at     TIMESTAMPTZ,
    last_seen_at  TIMESTAMPTZ NOT NULL,
    case_id       BIGINT,
    heard_open    BOOLEAN NOT NULL,
    -- The Docker host's node this incident is folded under, while it is.
    grouped_under BIGINT,
    CHECK ((triage = 'snoozed') = (snooze_until IS NOT NULL)),
    CHECK ((status = 'closed') = (closed_at IS NOT NULL))
);
CREATE INDEX incidents_by_node_source ON incidents (node_id, source, id DESC);
CREATE INDEX incidents_open ON incidents (node_id) WHERE status = 'open';

CREATE TABLE timeline (
    id          BIGSERIAL PRIMARY KEY,
    incident_id BIGINT NOT NULL REFERENCES incidents (id),
    at          TIMESTAMPTZ NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('opened', 'cleared', 'reopened', 'triage', 'note')),
    -- The operator; NULL is the reconciler.
    by_person   TEXT,
    triage      TEXT CHECK (triage IN ('new', 'snoozed', 'resolved', 'ignored')),
    note        TEXT
);
CREATE INDEX timeline_by_incident ON timeline (incident_id, id);

-- Maintenance windows: incidents open and clear but signal nobody until ends_at.
CREATE TABLE silences (
    id         BIGSERIAL PRIMARY KEY,
    node_id    BIGINT NOT NULL,
    by_person  TEXT NOT NULL,
    reason     TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    ends_at    TIMESTAMPTZ NOT NULL,
    deleted_at TIMESTAMPTZ
);

CREATE TABLE webhooks (
    id           BIGSERIAL PRIMARY KEY,
    url          TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('standard', 'slack')),
    min_severity TEXT NOT NULL CHECK (min_severity IN ('warning', 'critical')),
    -- whsec_<base64>: the plane signs with it, so it is kept; it is shown once.
    secret       TEXT NOT NULL,
    created_by   TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    deleted_at   TIMESTAMPTZ
);

-- One per opening, reopening or unproven fix (IN-14): told, or held back and why.
CREATE TABLE signals (
    id          BIGSERIAL PRIMARY KEY,
    incident_id BIGINT NOT NULL REFERENCES incidents (id),
    reason      TEXT NOT NULL CHECK (reason IN ('opened', 'reopened', 'unproven')),
    severity    TEXT NOT NULL CHECK (severity IN ('warning', 'critical')),
    at          TIMESTAMPTZ NOT NULL,
    held        TEXT CHECK (held IN ('alerts_off', 'silenced', 'grouped'))
);
CREATE INDEX signals_by_incident ON signals (incident_id);

-- Each signal's deliveries: the durable outbox of bells, mail and webhooks.
CREATE TABLE deliveries (
    id               BIGSERIAL PRIMARY KEY,
    signal_id        BIGINT NOT NULL REFERENCES signals (id),
    channel          TEXT NOT NULL CHECK (channel IN ('bell', 'mail', 'webhook')),
    -- The operator (bell, mail) or the webhook.
    target           BIGINT NOT NULL,
    state            TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'given_up')),
    attempts         INT NOT NULL DEFAULT 0,
    created_at       TIMESTAMPTZ NOT NULL,
    next_attempt_at  TIMESTAMPTZ NOT NULL,
    first_attempt_at TIMESTAMPTZ,
    finished_at      TIMESTAMPTZ
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX deliveries_bell ON deliveries (target, id DESC) WHERE channel = 'bell';

-- The delivery log: every attempt and what the other end said.
CREATE TABLE delivery_attempts (
    id          BIGSERIAL PRIMARY KEY,
    delivery_id BIGINT NOT NULL REFERENCES deliveries (id),
    at          TIMESTAMPTZ NOT NULL,
    ok          BOOLEAN NOT NULL,
    detail      TEXT NOT NULL
);
CREATE INDEX delivery_attempts_by_delivery ON delivery_attempts (delivery_id, id);
