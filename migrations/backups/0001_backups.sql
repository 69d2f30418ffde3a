-- The backups service: targets (where backups are stored, credentials sealed), storage spaces
-- (one node's folder on one target, BK-01..BK-03) and the runs the broker has opened in them.

-- A backup target (BK-04). `sealed_credentials` is ChaCha20-Poly1305 over the JSON
-- {"access_key", "secret_key"} with the key CAPSTAN__BACKUPS__SEAL_KEY_FILE names: a 12-byte
-- nonce, then the ciphertext and its tag. It is never read back to an operator.
CREATE TABLE targets (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name               TEXT NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    provider           TEXT NOT NULL CHECK (provider IN ('backblaze', 'amazon_s3', 'linode',
                           'cloudflare_r2', 'wasabi', 'digitalocean_spaces', 'hetzner',
                           'generic_s3')),
    endpoint           TEXT NOT NULL,
    region             TEXT NOT NULL,
    bucket             TEXT NOT NULL,
    folder             TEXT NOT NULL DEFAULT '',
    sealed_credentials BYTEA NOT NULL,
    -- Whether the store honours `If-None-Match: *` on PUT (the broker signs it into every PUT).
    conditional_writes BOOLEAN NOT NULL DEFAULT true,
    -- "Where new backups go": at most one target is the default.
    is_default         BOOLEAN NOT NULL DEFAULT false,
    created_by         TEXT NOT NULL,
    created_at         TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX targets_one_default ON targets (is_default) WHERE is_default;

-- A storage space (BK-01): one node's folder on one target. A node has at most one active
-- space; Move (BK-02) opens a new one and sets the old draining.
CREATE TABLE spaces (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    target_id  BIGINT NOT NULL REFERENCES targets (id),
    node_id    BIGINT NOT NULL,
    state      TEXT NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'draining', 'retired')),
    opened_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    drained_at TIMESTAMPTZ
);
CREATE UNIQUE INDEX spaces_one_active ON spaces (node_id) WHERE state = 'active';
CREATE INDEX spaces_by_node ON spaces (node_id);

-- A run of a node's chain, opened when the broker first hands out PUT URLs for it: its seq
-- (per node, only grows, across spaces) lives in exactly one space. Later reads (verify,
-- restore, the next run's previous manifest) find it here.
CREATE TABLE runs (
    node_id     BIGINT NOT NULL,
    seq         BIGINT NOT NULL CHECK (seq BETWEEN 1 AND 9007199254740992),
    space_id    BIGINT NOT NULL REFERENCES spaces (id),
    job_id      BIGINT NOT NULL,
    kind        TEXT CHECK (kind IN ('full', 'incremental')),
    opened_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (node_id, seq)
);
CREATE UNIQUE INDEX runs_by_job ON runs (job_id);
