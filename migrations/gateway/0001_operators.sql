-- Operator identity, owned by the gateway: operators, their API tokens (only a SHA-256 digest
-- of each is kept; the token is shown once, when issued) and the audit log of operator acts.
-- Passwords and browser sessions come later (issue 5) as tables of their own beside these.

CREATE TABLE operators (
    id bigserial PRIMARY KEY,
    -- The same rule as identity::OperatorName: no '/', so no operator passes for a service.
    name text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9._@-]{0,63}$'),
    -- 7 reads and runs read words, 8 changes, 10 destructive or trust-changing acts.
    level smallint NOT NULL CHECK (level IN (7, 8, 10)),
    created_at timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz
);

CREATE TABLE api_tokens (
    id bigserial PRIMARY KEY,
    operator_id bigint NOT NULL REFERENCES operators (id),
    token_sha256 bytea NOT NULL UNIQUE CHECK (octet_length(token_sha256) = 32),
    label text NOT NULL DEFAULT '' CHECK (length(label) <= 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at timestamptz
);

CREATE INDEX api_tokens_operator_id ON api_tokens (operator_id);

-- Who did what, from where, to what, and how it ended. `operator` is a name, not a reference:
-- the record outlives the operator.
CREATE TABLE audit_log (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    operator text NOT NULL,
    level smallint NOT NULL,
    address text,
    action text NOT NULL,
    target text,
    outcome text NOT NULL,
    detail jsonb NOT NULL DEFAULT '{}'::jsonb
);

CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_operator_at ON audit_log (operator, at);
