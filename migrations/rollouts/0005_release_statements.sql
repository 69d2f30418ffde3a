-- A release's statement for the public log (issue 15; AG-27, RO-07): the RELEASE_STATEMENT
-- document exactly as uploaded, served to agents as artifact kind `release_statement`. NULL
-- until one is uploaded: a publish writes the binaries before the statement that records them,
-- so a statement may arrive with the release or later, with the same metadata again.
ALTER TABLE releases ADD COLUMN statement BYTEA;
