-- Status facts on a cadence (MO-05, MO-06) and health dots (MO-07): what the monitor keeps of
-- the agent channel's node_reported and job_* events, the jobs it asked for, and each node's dot.

-- The words the node's agent reported (node_reported); NULL until it reported any.
ALTER TABLE nodes ADD COLUMN vocabulary JSONB;

-- Projection of the agent channel's jobs of the words kept current (check_status,
-- host_report): job_queued, job_claimed, job_finished. The cover rule reads it.
CREATE TABLE status_jobs (
    job_id      BIGINT PRIMARY KEY,
    node_id     BIGINT NOT NULL,
    primitive   TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN ('queued', 'running', 'finished')),
    outcome     TEXT,
    finished_at TIMESTAMPTZ,
    CHECK ((state = 'finished') = (finished_at IS NOT NULL))
);
CREATE INDEX status_jobs_open ON status_jobs (node_id, primitive) WHERE state <> 'finished';
CREATE INDEX status_jobs_completed ON status_jobs (node_id, primitive, finished_at)
    WHERE outcome = 'completed';
CREATE INDEX status_jobs_finished_at ON status_jobs (finished_at);

-- The job this service last asked for, per node and word (request_job): cover for its window.
CREATE TABLE status_requests (
    node_id         BIGINT NOT NULL,
    primitive       TEXT NOT NULL,
    requested_at    TIMESTAMPTZ NOT NULL,
    idempotency_key TEXT NOT NULL,
    PRIMARY KEY (node_id, primitive)
);

-- The latest finished (not withdrawn) job of each word per node, with its result: the health
-- dot reads check_status's, the fleet security view host_report's.
CREATE TABLE readings (
    node_id     BIGINT NOT NULL,
    primitive   TEXT NOT NULL,
    job_id      BIGINT NOT NULL,
    outcome     TEXT NOT NULL,
    result      JSONB,
    finished_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (node_id, primitive)
);

-- Each judged node's health dot and its reasons (MO-07); a node not here is gray, never checked.
CREATE TABLE health (
    node_id    BIGINT PRIMARY KEY,
    dot        TEXT NOT NULL CHECK (dot IN ('green', 'yellow', 'red', 'gray')),
    reasons    JSONB NOT NULL DEFAULT '[]',
    checked_at TIMESTAMPTZ NOT NULL
);

-- How many status passes have run, and the last one's time: the marker tests wait on.
CREATE TABLE status_passes (
    one          BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
    passes       BIGINT NOT NULL DEFAULT 0,
    last_pass_at TIMESTAMPTZ
);
INSERT INTO status_passes DEFAULT VALUES;
