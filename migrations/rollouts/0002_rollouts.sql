-- Staged rollouts (issue 16; RO-10): a rollout, its stages' rules, its steps (one a node), and
-- every job a step asked for, by the idempotency key it was asked under. A step's current
-- phase names its jobs (`slots`, the keys in order); their answers are in `rollout_jobs`, so
-- a job is asked for once (the key is the primary key) and judged from its answer, never sent
-- again. The node facts a plan needs are a projection of the agent channel's events, and the
-- incidents a soak watches a projection of the incidents service's.

CREATE TABLE nodes (
    node_id       BIGINT PRIMARY KEY,
    name          TEXT NOT NULL,
    site_root     TEXT,
    container     TEXT,
    -- The Docker host its container sits on (placement_changed), if any.
    host_node_id  BIGINT,
    paired        BOOLEAN NOT NULL DEFAULT TRUE,
    vocabulary    TEXT[] NOT NULL DEFAULT '{}',
    agent_version TEXT,
    -- RO-24: "Test releases here first".
    rollout_first BOOLEAN NOT NULL DEFAULT FALSE
);

CREATE TABLE rollouts (
    id           BIGSERIAL PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('release', 'patch')),
    version      TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('running', 'paused', 'halting', 'halted', 'stopped', 'finished')),
    stage        INTEGER NOT NULL CHECK (stage >= 0),
    -- RO-21: `<viewer> <path>` a line.
    pages        TEXT[] NOT NULL DEFAULT '{}',
    soak_until   TIMESTAMPTZ,
    halt_node_id BIGINT,
    halt_reason  TEXT,
    -- RO-24: who a deploy to all left out: [{"node_id", "name", "reason"}].
    left_out     JSONB NOT NULL DEFAULT '[]',
    started_by   TEXT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    finished_at  TIMESTAMPTZ,
    CHECK ((halt_node_id IS NULL) = (halt_reason IS NULL))
);

-- RO-16: one rollout runs at a time.
CREATE UNIQUE INDEX rollouts_one_under_way ON rollouts ((TRUE))
    WHERE state IN ('running', 'paused', 'halting');

CREATE TABLE rollout_stages (
    rollout_id  BIGINT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    stage       INTEGER NOT NULL CHECK (stage >= 0),
    budget_kind TEXT NOT NULL CHECK (budget_kind IN ('nodes', 'percent')),
    budget      INTEGER NOT NULL CHECK (budget >= 0 AND (budget_kind = 'nodes' OR budget <= 100)),
    soak_secs   INTEGER NOT NULL DEFAULT 0 CHECK (soak_secs >= 0),
    PRIMARY KEY (rollout_id, stage)
);

CREATE TABLE rollout_steps (
    id            BIGSERIAL PRIMARY KEY,
    rollout_id    BIGINT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    node_id       BIGINT NOT NULL,
    machine       TEXT NOT NULL,
    stage         INTEGER NOT NULL CHECK (stage >= 0),
    phase         TEXT NOT NULL CHECK (phase IN ('waiting', 'preflight', 'probes_before', 'apply', 'probes_after', 'done')),
    verdict       TEXT NOT NULL CHECK (verdict IN ('pending', 'running', 'passed', 'failed', 'skipped')),
    reason        TEXT,
    phase_since   TIMESTAMPTZ,
    attempt       INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    has_preflight BOOLEAN NOT NULL,
    slots         TEXT[] NOT NULL DEFAULT '{}',
    -- What each page answered before and after the apply: [{"status", "errors", "failed_assets"} | null].
    probes_before JSONB NOT NULL DEFAULT '[]',
    probes_after  JSONB NOT NULL DEFAULT '[]',
    waiting_on    TEXT,
    updated_at    TIMESTAMPTZ NOT NULL,
    UNIQUE (rollout_id, node_id)
);
CREATE INDEX rollout_steps_of ON rollout_steps (rollout_id, stage);

CREATE TABLE rollout_jobs (
    key            TEXT PRIMARY KEY,
    rollout_id     BIGINT NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    step_id        BIGINT NOT NULL REFERENCES rollout_steps (id) ON DELETE CASCADE,
    node_id        BIGINT NOT NULL,
    word           TEXT NOT NULL,
    -- The request's correlation id, which the agent channel's job_finished carries back.
    correlation_id UUID NOT NULL UNIQUE,
    requested_at   TIMESTAMPTZ NOT NULL,
    job_id         BIGINT,
    outcome        TEXT CHECK (outcome IN ('completed', 'failed', 'refused', 'lost', 'withdrawn')),
    result         JSONB,
    reason         TEXT,
    finished_at    TIMESTAMPTZ
);
CREATE INDEX rollout_jobs_of ON rollout_jobs (rollout_id);

-- Incidents opened on nodes, for the soak (beyond the spec): a rollout halts when one opens on
-- a node of the stage it is soaking.
CREATE TABLE incidents_opened (
    incident_id BIGINT PRIMARY KEY,
    node_id     BIGINT NOT NULL,
    source      TEXT NOT NULL,
    title       TEXT NOT NULL,
    opened_at   TIMESTAMPTZ NOT NULL
);
CREATE INDEX incidents_opened_on ON incidents_opened (node_id, opened_at);
