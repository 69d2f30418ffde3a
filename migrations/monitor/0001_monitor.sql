-- The monitor service: its projection of the agent channel's nodes, each node's uptime check
-- with its live state, the checks' history (a day is kept), and each node's served certificate.

-- Projection of the agent channel's node events (node_approved, node_left, node_disconnected):
-- rebuilt from the stream by replaying it, as docs/incidents.md says for incidents.
CREATE TABLE nodes (
    node_id       BIGINT PRIMARY KEY,
    name          TEXT NOT NULL DEFAULT '',
    -- The addresses the node reported at its join, in its order: the first is its own.
    addresses     JSONB NOT NULL DEFAULT '[]',
    -- The container the node's site runs in, when it is one (names the certificate fix).
    container     TEXT,
    -- Provisioning's install state; NULL is installed and running (operational).
    install_state TEXT,
    paired        BOOLEAN NOT NULL DEFAULT false
);

-- A node's uptime check (MO-01): its setting and its live state.
CREATE TABLE checks (
    node_id              BIGINT PRIMARY KEY,
    enabled              BOOLEAN NOT NULL DEFAULT true,
    kind                 TEXT NOT NULL DEFAULT 'http_status'
                         CHECK (kind IN ('http_status', 'keyword', 'tls_certificate', 'api')),
    url                  TEXT,
    keyword              TEXT,
    interval_secs        INTEGER NOT NULL DEFAULT 60 CHECK (interval_secs > 0),
    -- NULL until the first check (unknown).
    status               TEXT CHECK (status IN ('up', 'down')),
    consecutive_failures INTEGER NOT NULL DEFAULT 0 CHECK (consecutive_failures >= 0),
    -- The first failing check of the current streak; kept while down.
    failing_since        TIMESTAMPTZ,
    down_since           TIMESTAMPTZ,
    -- The newest failing check's words; NULL when the last check passed.
    reason               TEXT,
    checked_at           TIMESTAMPTZ,
    response_ms          INTEGER,
    -- When the next check is due; NULL while nothing is to be checked.
    next_check_at        TIMESTAMPTZ,
    CHECK ((status = 'down') = (down_since IS NOT NULL))
);
CREATE INDEX checks_due ON checks (next_check_at) WHERE next_check_at IS NOT NULL;

-- Every check's outcome, for the node page's last day.
CREATE TABLE history (
    node_id     BIGINT NOT NULL,
    at          TIMESTAMPTZ NOT NULL,
    ok          BOOLEAN NOT NULL,
    response_ms INTEGER
);
CREATE INDEX history_by_node ON history (node_id, at);
CREATE INDEX history_at ON history (at);

-- The certificate a node's origin serves (MO-08..MO-10).
CREATE TABLE certificates (
    node_id           BIGINT PRIMARY KEY,
    -- The name it was read for (the URL's host).
    name              TEXT NOT NULL,
    checked_at        TIMESTAMPTZ,
    -- Stored only for a certificate that covers the name and is not the placeholder (MO-10).
    expires_at        TIMESTAMPTZ,
    names             JSONB NOT NULL DEFAULT '[]',
    -- The first of the five reasons, or NULL (the contract's CertProblem).
    problem           JSONB,
    -- When the placeholder was first seen served, kept across checks (placeholder_since).
    placeholder_since TIMESTAMPTZ,
    -- Why the last read failed (no TLS answer), when it did.
    read_error        TEXT,
    next_check_at     TIMESTAMPTZ
);
CREATE INDEX certificates_due ON certificates (next_check_at) WHERE next_check_at IS NOT NULL;
