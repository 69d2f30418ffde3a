-- The machines inventory, adoptions, hosts and the periodic watches (issue 29, PV-14..PV-17,
-- PV-52..PV-55).

-- The node projection (0003, the kit's columns) with what the inventory reads besides:
-- `install_state` (PV-01, NULL is operational; the kit's other services' column name, added
-- here unless the kit's own migration did) and the OS a `host_report` named (PV-54's colours).
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS install_state TEXT;
ALTER TABLE nodes ADD COLUMN IF NOT EXISTS os TEXT;
CREATE INDEX IF NOT EXISTS nodes_name ON nodes (name);

-- What is written down about a machine (PV-53, `machine_edit`): keyed by the machine's id as
-- the inventory names it, `node-<id>` or `server-<account>-<instance>`.
CREATE TABLE machine_notes (
    machine_id   TEXT PRIMARY KEY CHECK (machine_id ~ '^(node-[0-9]+|server-[0-9]+-.+)$'),
    purpose      TEXT NOT NULL DEFAULT '',
    owner        TEXT NOT NULL DEFAULT '',
    serves       TEXT NOT NULL DEFAULT '',
    release      TEXT NOT NULL DEFAULT '',
    retire_by    DATE,
    confirmed_at TIMESTAMPTZ,
    confirmed_by TEXT,
    written_at   TIMESTAMPTZ NOT NULL,
    written_by   TEXT NOT NULL
);

-- Cloud servers adopted for nodes (PV-52): hosting mode operator (one of our accounts). One
-- server is adopted for one node at most.
CREATE TABLE adoptions (
    node_id      BIGINT PRIMARY KEY,
    account_id   BIGINT NOT NULL REFERENCES accounts (id),
    provider     TEXT NOT NULL CHECK (provider IN ('linode', 'hetzner')),
    instance_id  TEXT NOT NULL,
    ipv4         TEXT,
    ipv6         TEXT,
    region       TEXT NOT NULL,
    hosting_mode TEXT NOT NULL DEFAULT 'operator' CHECK (hosting_mode IN ('operator', 'customer')),
    adopted_at   TIMESTAMPTZ NOT NULL,
    adopted_by   TEXT NOT NULL
);
CREATE UNIQUE INDEX adoptions_instance ON adoptions (account_id, instance_id);

-- Docker hosts' placement records (PV-14): address, max sites, provisioning enabled, the
-- host's own node. Soft-deleted (PV-16); one live record per address.
CREATE TABLE hosts (
    id                   BIGSERIAL PRIMARY KEY,
    address              TEXT NOT NULL,
    flag                 TEXT NOT NULL DEFAULT 'main' CHECK (flag IN ('main', 'test')),
    max_sites            INTEGER NOT NULL CHECK (max_sites BETWEEN 1 AND 500),
    provisioning_enabled BOOLEAN NOT NULL DEFAULT true,
    node_id              BIGINT,
    created_at           TIMESTAMPTZ NOT NULL,
    created_by           TEXT NOT NULL,
    deleted_at           TIMESTAMPTZ,
    deleted_by           TEXT
);
CREATE UNIQUE INDEX hosts_live_address ON hosts (address) WHERE deleted_at IS NULL;

-- A container site's placement record (PV-14's `ensure_for_node`: a docker provision's
-- container names its host at booting). Siblings are found by the host only (PV-17).
CREATE TABLE container_hosts (
    node_id BIGINT PRIMARY KEY,
    host_id BIGINT NOT NULL REFERENCES hosts (id)
);
CREATE INDEX container_hosts_host ON container_hosts (host_id);

-- The conditions this service judged, as last published (one row per condition and node), so
-- a periodic judge publishes only a change.
CREATE TABLE conditions (
    name        TEXT NOT NULL,
    node_id     BIGINT NOT NULL,
    happening   BOOLEAN NOT NULL,
    evidence    TEXT NOT NULL DEFAULT '',
    since       TIMESTAMPTZ,
    observed_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (name, node_id)
);

-- When each periodic task last ran to its end (one run per interval across replicas).
CREATE TABLE task_runs (
    task    TEXT PRIMARY KEY,
    ran_at  TIMESTAMPTZ NOT NULL,
    outcome TEXT NOT NULL
);

-- The test-cloud cleanup's record (PV-55): per account and run, what was deleted, what was held
-- and why, or why nothing was.
CREATE TABLE cleanup_runs (
    id         BIGSERIAL PRIMARY KEY,
    account_id BIGINT NOT NULL REFERENCES accounts (id),
    ran_at     TIMESTAMPTZ NOT NULL,
    refused    TEXT,
    deleted    TEXT[] NOT NULL DEFAULT '{}',
    held       TEXT[] NOT NULL DEFAULT '{}',
    failed     TEXT[] NOT NULL DEFAULT '{}'
);
CREATE INDEX cleanup_runs_account ON cleanup_runs (account_id, ran_at);
