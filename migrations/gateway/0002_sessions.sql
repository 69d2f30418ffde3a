-- The operator web UI's identity: a password per operator (an argon2id PHC string, never the
-- password), browser sessions (kept only as a SHA-256 digest of the cookie's random id) and the
-- sign-in failures the throttle counts.

-- NULL until one is set: an operator without a password signs in with a token only (the API).
ALTER TABLE operators
    ADD COLUMN password_hash text CHECK (password_hash IS NULL OR password_hash LIKE '$argon2id$%'),
    -- Set with a one-time password: the operator chooses their own before anything else.
    ADD COLUMN must_change_password boolean NOT NULL DEFAULT false;

CREATE TABLE sessions (
    id bigserial PRIMARY KEY,
    operator_id bigint NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    session_sha256 bytea NOT NULL UNIQUE CHECK (octet_length(session_sha256) = 32),
    -- Rendered in every form of the session and compared on every POST; random, per session.
    csrf_token text NOT NULL CHECK (length(csrf_token) >= 32),
    address text,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Touched at most once a minute; the idle timeout counts from it.
    last_seen_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX sessions_operator_id ON sessions (operator_id);
CREATE INDEX sessions_last_seen_at ON sessions (last_seen_at);

-- One row per refused sign-in: the name tried (which may name nobody) and the address.
CREATE TABLE sign_in_failures (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    name text NOT NULL CHECK (length(name) <= 200),
    address text
);

CREATE INDEX sign_in_failures_name_at ON sign_in_failures (name, at);
CREATE INDEX sign_in_failures_address_at ON sign_in_failures (address, at);
CREATE INDEX sign_in_failures_at ON sign_in_failures (at);
