-- What the test consumers apply: deliberately without a unique constraint, so a message applied
-- twice would show as two rows. Only the inbox stands between a redelivery and a duplicate.
CREATE TABLE applied (
    message_id UUID NOT NULL,
    sequence   BIGINT NOT NULL,
    applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
