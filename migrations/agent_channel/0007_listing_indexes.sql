-- The operator's listings page through the nodes by name and through the joins newest first
-- (store/listing.rs): these indexes hand a page over in order without sorting the whole table.
CREATE INDEX nodes_by_name_and_id ON nodes (name, id);
CREATE INDEX joins_pending_newest ON joins (requested_at DESC, id) WHERE state = 'pending';
