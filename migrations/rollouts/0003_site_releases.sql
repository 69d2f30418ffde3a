-- Site releases (issue 16): a deterministic tar of a site directory and its signed file
-- manifest (RELEASE_MANIFEST + RELEASE_MANIFEST.sig), as `capstan release site` made them
-- where the release key lives. The plane stores and serves them through the agent's
-- `artifact` endpoint (release_manifest, release_file, release_archive); the agent verifies
-- both against its own keys. A version is published once: a second upload of it is refused.
CREATE TABLE site_releases (
    version        TEXT PRIMARY KEY CHECK (version ~ '^[0-9][A-Za-z0-9.+-]{0,31}$'),
    -- The manifest file and its signature file, exactly as signed.
    manifest       BYTEA NOT NULL,
    signatures     BYTEA NOT NULL,
    archive        BYTEA NOT NULL,
    archive_sha256 TEXT NOT NULL CHECK (archive_sha256 ~ '^[0-9a-f]{64}$'),
    files          INTEGER NOT NULL CHECK (files >= 0),
    -- Fingerprints of the keys that signed the manifest.
    signed_by      TEXT[] NOT NULL,
    -- RO-23: the publish asked for a deploy to every node; the outcome is written back once
    -- decided: `started` with the rollout, or `refused` with the reason.
    deploy_all         BOOLEAN NOT NULL DEFAULT false,
    deploy_all_outcome TEXT CHECK (deploy_all_outcome IN ('started', 'refused')),
    deploy_all_rollout BIGINT,
    deploy_all_reason  TEXT,
    published_at   TIMESTAMPTZ NOT NULL,
    published_by   TEXT NOT NULL
);

-- Every file a site release lists, by hash, so `release_file {sha256}` finds the archive that
-- holds it.
CREATE TABLE site_release_files (
    version TEXT NOT NULL REFERENCES site_releases (version) ON DELETE CASCADE,
    path    TEXT NOT NULL,
    sha256  TEXT NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    PRIMARY KEY (version, path)
);
CREATE INDEX site_release_files_by_hash ON site_release_files (sha256);

-- The deploy-to-all publishes still to be decided, for the task that starts them.
CREATE INDEX site_releases_deploy_all_pending ON site_releases (published_at)
    WHERE deploy_all AND deploy_all_outcome IS NULL;
