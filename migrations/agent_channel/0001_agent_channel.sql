-- The node registry, joins, the job queue and the replay cache of the agent channel.

CREATE TABLE nodes (
    id            BIGSERIAL PRIMARY KEY,
    name          TEXT NOT NULL,
    -- The paired agent's key (standard base64 of the raw 32 bytes) and its fingerprint; both
    -- null while no agent is paired. Only the public half is ever stored.
    public_key    TEXT,
    fingerprint   TEXT UNIQUE,
    addresses     JSONB NOT NULL DEFAULT '[]',
    site_root     TEXT,
    container     TEXT,
    agent_version TEXT,
    vocabulary    JSONB NOT NULL DEFAULT '[]',
    claim_bytes   BIGINT,
    -- The claim's other facts (recipes, update state, log access, cases, ...), as last reported.
    facts         JSONB NOT NULL DEFAULT '{}',
    connected_at  TIMESTAMPTZ,
    last_seen_at  TIMESTAMPTZ,
    left_at       TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((public_key IS NULL) = (fingerprint IS NULL))
);
CREATE INDEX nodes_name ON nodes (name);

CREATE TABLE joins (
    id             UUID PRIMARY KEY,
    public_key     TEXT NOT NULL,
    fingerprint    TEXT NOT NULL,
    name           TEXT NOT NULL,
    source_address TEXT NOT NULL,
    addresses      JSONB NOT NULL,
    agent_version  TEXT NOT NULL,
    site_root      TEXT,
    container      TEXT,
    state          TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected', 'expired', 'retired')),
    requested_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at     TIMESTAMPTZ NOT NULL,
    decided_at     TIMESTAMPTZ,
    decided_by     TEXT,
    node_id        BIGINT REFERENCES nodes (id)
);
-- One open request per key: the same key asking again renews it.
CREATE UNIQUE INDEX joins_one_open_per_key ON joins (fingerprint) WHERE state IN ('pending', 'rejected');
CREATE INDEX joins_pending_by_address ON joins (source_address) WHERE state = 'pending';

CREATE TABLE jobs (
    id              BIGSERIAL PRIMARY KEY,
    node_id         BIGINT NOT NULL REFERENCES nodes (id),
    primitive       TEXT NOT NULL,
    class           TEXT NOT NULL CHECK (class IN ('read', 'change', 'destructive')),
    params          JSONB NOT NULL DEFAULT '{}',
    state           TEXT NOT NULL CHECK (state IN ('pending', 'running', 'completed', 'failed', 'refused', 'lost', 'withdrawn')),
    -- What the node reported (completed, failed, refused), or lost/withdrawn from the plane:
    -- kept apart from the state so refusals can be counted, never matched by text.
    outcome         TEXT CHECK (outcome IN ('completed', 'failed', 'refused', 'lost', 'withdrawn')),
    reason          TEXT,
    result          JSONB,
    output          TEXT NOT NULL DEFAULT '',
    requested_by    TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    correlation_id  UUID,
    budget_s        INTEGER NOT NULL,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_at      TIMESTAMPTZ,
    finished_at     TIMESTAMPTZ,
    marked_by       TEXT
);
-- One running job per node, held by the database itself.
CREATE UNIQUE INDEX jobs_one_running_per_node ON jobs (node_id) WHERE state = 'running';
CREATE INDEX jobs_pending_by_node ON jobs (node_id, id) WHERE state = 'pending';
CREATE INDEX jobs_by_node ON jobs (node_id, id DESC);
CREATE INDEX jobs_refused ON jobs (node_id, finished_at) WHERE outcome = 'refused';

-- Nonces seen per key within the replay window; shared by every replica, kept across restarts.
CREATE TABLE nonces (
    fingerprint TEXT NOT NULL,
    nonce       TEXT NOT NULL,
    seen_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (fingerprint, nonce)
);
CREATE INDEX nonces_seen_at ON nonces (seen_at);

-- Wakes a long-polling claim of the node the moment a job is queued for it (every replica
-- listens), delivered at commit.
CREATE FUNCTION job_queued_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'pending' THEN
        PERFORM pg_notify('capstan_agent_channel_jobs', NEW.node_id::text);
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER job_queued_notify AFTER INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION job_queued_notify();
