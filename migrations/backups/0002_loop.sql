-- The backups service's loop (issue 14): the fleet policy and each node's position (BK-08),
-- the node facts the schedule reads (projected from the agent channel's events), every job
-- this service asked for (the machine's turn, BK-09), and each run's and verify's outcome.

-- The fleet policy. No row: the built-in default (on; BK-05).
CREATE TABLE fleet_policy (
    singleton         BOOLEAN PRIMARY KEY DEFAULT true CHECK (singleton),
    enabled           BOOLEAN NOT NULL,
    every_minutes     INTEGER NOT NULL CHECK (every_minutes BETWEEN 1 AND 10080),
    window_start_hour SMALLINT NOT NULL CHECK (window_start_hour BETWEEN 0 AND 23),
    window_hours      SMALLINT NOT NULL CHECK (window_hours BETWEEN 1 AND 24),
    mode              TEXT NOT NULL CHECK (mode IN ('chain', 'full_only')),
    keep_days         INTEGER NOT NULL CHECK (keep_days BETWEEN 1 AND 3650),
    full_every_days   INTEGER NOT NULL CHECK (full_every_days BETWEEN 1 AND 365),
    verify_every_days INTEGER NOT NULL CHECK (verify_every_days BETWEEN 0 AND 365),
    changed_by        TEXT NOT NULL,
    changed_at        TIMESTAMPTZ NOT NULL
);

-- A node's own decision (BK-08). No row: it follows the fleet. `own` freezes every field;
-- `off` stores the decision and no field.
CREATE TABLE node_policies (
    node_id           BIGINT PRIMARY KEY,
    position          TEXT NOT NULL CHECK (position IN ('own', 'off')),
    every_minutes     INTEGER CHECK (every_minutes BETWEEN 1 AND 10080),
    window_start_hour SMALLINT CHECK (window_start_hour BETWEEN 0 AND 23),
    window_hours      SMALLINT CHECK (window_hours BETWEEN 1 AND 24),
    mode              TEXT CHECK (mode IN ('chain', 'full_only')),
    keep_days         INTEGER CHECK (keep_days BETWEEN 1 AND 3650),
    full_every_days   INTEGER CHECK (full_every_days BETWEEN 1 AND 365),
    verify_every_days INTEGER CHECK (verify_every_days BETWEEN 0 AND 365),
    decided_by        TEXT NOT NULL,
    decided_at        TIMESTAMPTZ NOT NULL,
    CHECK ((position = 'own') = (every_minutes IS NOT NULL AND window_start_hour IS NOT NULL
        AND window_hours IS NOT NULL AND mode IS NOT NULL AND keep_days IS NOT NULL
        AND full_every_days IS NOT NULL AND verify_every_days IS NOT NULL)),
    CHECK (position = 'own' OR (every_minutes IS NULL AND window_start_hour IS NULL
        AND window_hours IS NULL AND mode IS NULL AND keep_days IS NULL
        AND full_every_days IS NULL AND verify_every_days IS NULL))
);

-- The nodes as the agent channel told of them (node_approved, node_reported,
-- placement_changed, node_left/node_disconnected).
CREATE TABLE nodes (
    node_id       BIGINT PRIMARY KEY,
    name          TEXT NOT NULL,
    -- The key fingerprint it was approved with: a manifest is trusted only when signed by the
    -- key with this fingerprint.
    fingerprint   TEXT NOT NULL,
    paired        BOOLEAN NOT NULL DEFAULT true,
    -- The Docker host its container sits on (RO-12 / BK-09 machine), if any.
    host_node_id  BIGINT,
    vocabulary    TEXT[] NOT NULL DEFAULT '{}',
    -- PV-01: NULL is operational. No agent channel event carries it yet.
    install_state TEXT,
    approved_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Every job this service asked the agent channel for. An unfinished one holds its machine's
-- turn (BK-09): one backup, verify or restore at a time per machine.
CREATE TABLE jobs (
    idempotency_key TEXT PRIMARY KEY,
    correlation_id  UUID NOT NULL UNIQUE,
    -- The agent channel's job, once it said (job_queued, or job_finished for a refusal).
    job_id          BIGINT UNIQUE,
    node_id         BIGINT NOT NULL,
    machine         TEXT NOT NULL,
    primitive       TEXT NOT NULL CHECK (primitive IN ('backup_run', 'verify_backup',
                        'restore_database', 'restore_project')),
    params          JSONB NOT NULL,
    seq             BIGINT,
    requested_by    TEXT NOT NULL,
    dispatched_at   TIMESTAMPTZ NOT NULL,
    finished_at     TIMESTAMPTZ,
    outcome         TEXT CHECK (outcome IN ('completed', 'failed', 'refused', 'lost', 'withdrawn')),
    reason          TEXT,
    CHECK ((finished_at IS NULL) = (outcome IS NULL))
);
CREATE UNIQUE INDEX jobs_one_turn_per_machine ON jobs (machine) WHERE finished_at IS NULL;
CREATE INDEX jobs_by_node ON jobs (node_id, primitive, dispatched_at DESC);

-- What a run that landed says of itself (its manifest, signature checked).
ALTER TABLE runs
    ADD COLUMN full_seq     BIGINT,
    ADD COLUMN previous_seq BIGINT,
    ADD COLUMN started_at   TIMESTAMPTZ,
    ADD COLUMN finished_at  TIMESTAMPTZ,
    ADD COLUMN bytes        BIGINT,
    ADD COLUMN manifest     JSONB,
    ADD COLUMN landed_at    TIMESTAMPTZ,
    ADD COLUMN verified_at  TIMESTAMPTZ;

-- Each verify_backup's end (BK-19): its level, its counts or the node's reasons.
CREATE TABLE verifies (
    job_id       BIGINT PRIMARY KEY,
    node_id      BIGINT NOT NULL,
    seq          BIGINT NOT NULL,
    level        SMALLINT NOT NULL CHECK (level IN (2, 3)),
    ok           BOOLEAN NOT NULL,
    finished_at  TIMESTAMPTZ NOT NULL,
    checked      JSONB,
    problems     JSONB NOT NULL DEFAULT '[]',
    requested_by TEXT NOT NULL
);
CREATE INDEX verifies_by_node ON verifies (node_id, finished_at DESC);
