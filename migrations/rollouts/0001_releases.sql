-- Releases of the agent (issue 15): the signed metadata as uploaded, and the artifacts it
-- names. The plane never holds the signing key; it stores and serves what was signed
-- elsewhere. A version and a sequence are each used once (a publish that reuses either is
-- refused), so the release on offer is the one with the highest sequence.
CREATE TABLE releases (
    version       TEXT PRIMARY KEY CHECK (version ~ '^[0-9][A-Za-z0-9.+-]{0,63}$'),
    sequence      BIGINT NOT NULL UNIQUE CHECK (sequence > 0),
    expires_at    TIMESTAMPTZ NOT NULL,
    -- The metadata document exactly as signed and uploaded (what agents are served).
    metadata      BYTEA NOT NULL,
    -- Its SHA-256, so a second upload of the same bytes is recognised as the same publish.
    metadata_sha256 TEXT NOT NULL CHECK (metadata_sha256 ~ '^[0-9a-f]{64}$'),
    published_at  TIMESTAMPTZ NOT NULL,
    published_by  TEXT NOT NULL
);

-- One row per artifact: a binary per architecture, or the support bundle's archive.
CREATE TABLE release_artifacts (
    version  TEXT NOT NULL REFERENCES releases (version) ON DELETE CASCADE,
    kind     TEXT NOT NULL CHECK (kind IN ('binary', 'support_bundle')),
    -- The architecture of a binary; '' for the support bundle.
    arch     TEXT NOT NULL CHECK (
        (kind = 'binary' AND arch IN ('linux-amd64', 'linux-arm64'))
        OR (kind = 'support_bundle' AND arch = '')
    ),
    sha256   TEXT NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    bytes    BYTEA NOT NULL,
    PRIMARY KEY (version, kind, arch)
);
