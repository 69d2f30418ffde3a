-- The provisioning service (issue 29): our cloud accounts, with their API tokens sealed at
-- rest, and the provisions made in them, each step stored with its time before the next starts.

-- Our own cloud accounts (PV-12, PV-58), flagged main or test. The token is sealed with the
-- service's seal key (ChaCha20-Poly1305, the account's id as associated data) and never read
-- back out to anyone. A deleted account is kept (its provisions name it) and listed no more.
CREATE TABLE accounts (
    id           BIGSERIAL PRIMARY KEY,
    provider     TEXT NOT NULL CHECK (provider IN ('linode', 'hetzner')),
    label        TEXT NOT NULL CHECK (length(label) BETWEEN 1 AND 100),
    flag         TEXT NOT NULL CHECK (flag IN ('main', 'test')),
    sealed_token BYTEA NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    created_by   TEXT NOT NULL,
    deleted_at   TIMESTAMPTZ,
    deleted_by   TEXT
);
-- Two live accounts never share a label.
CREATE UNIQUE INDEX accounts_live_label ON accounts (label) WHERE deleted_at IS NULL;

-- A provision (PV-03): a server of a kind asked for in an account, region and size, and where
-- it stands. The root password is held sealed while the bootstrap needs it (PV-05), never in
-- clear.
CREATE TABLE provisions (
    id                   BIGSERIAL PRIMARY KEY,
    account_id           BIGINT NOT NULL REFERENCES accounts (id),
    kind                 TEXT NOT NULL CHECK (kind IN ('agent', 'site', 'docker-host')),
    name                 TEXT NOT NULL,
    region               TEXT NOT NULL,
    size                 TEXT NOT NULL,
    image                TEXT NOT NULL,
    step                 TEXT NOT NULL DEFAULT 'requested'
                         CHECK (step IN ('requested', 'creating', 'booting', 'installing',
                                         'done', 'install_failed')),
    step_since           TIMESTAMPTZ NOT NULL,
    -- The reason of an install_failed (secrets masked), NULL otherwise (PV-02).
    failure              TEXT,
    retries              INTEGER NOT NULL DEFAULT 0 CHECK (retries >= 0),
    -- The provider's instance once created, and the addresses it reported.
    instance_id          TEXT,
    ipv4                 TEXT[] NOT NULL DEFAULT '{}',
    ipv6                 TEXT[] NOT NULL DEFAULT '{}',
    -- The node made for it, and the agent key its install printed (AC-10).
    node_id              BIGINT,
    expected_key         TEXT,
    sealed_root_password BYTEA,
    requested_by         TEXT NOT NULL,
    requested_at         TIMESTAMPTZ NOT NULL,
    CHECK ((step = 'install_failed') = (failure IS NOT NULL))
);
CREATE INDEX provisions_account ON provisions (account_id);
-- One live provision per name: a second ask for a name in flight is refused.
CREATE UNIQUE INDEX provisions_live_name ON provisions (name)
    WHERE step NOT IN ('done', 'install_failed');

-- Each step a provision entered, with its time (the provision's page lists them).
CREATE TABLE provision_steps (
    provision_id BIGINT NOT NULL REFERENCES provisions (id),
    step         TEXT NOT NULL
                 CHECK (step IN ('requested', 'creating', 'booting', 'installing',
                                 'done', 'install_failed')),
    at           TIMESTAMPTZ NOT NULL,
    detail       TEXT
);
CREATE INDEX provision_steps_provision ON provision_steps (provision_id, at);
