-- The network a join came from (an IPv4 address, an IPv6 /64), which the per-source cap on
-- pending joins counts by (PROTOCOL.md "join"). Written by the service from the source
-- address; requests lodged before this column existed count by their address (they expire
-- within the hour).
ALTER TABLE joins ADD COLUMN source_network TEXT;
UPDATE joins SET source_network = source_address;
ALTER TABLE joins ALTER COLUMN source_network SET NOT NULL;

DROP INDEX joins_pending_by_address;
CREATE INDEX joins_pending_by_network ON joins (source_network) WHERE state = 'pending';
