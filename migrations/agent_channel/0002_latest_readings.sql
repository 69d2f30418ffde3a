-- The latest finished check_status and host_report of each node feed its health dot and its
-- placement (dashboard); this index answers "the newest of that word for that node" at once.
CREATE INDEX jobs_latest_reading ON jobs (node_id, primitive, finished_at DESC, id DESC)
    WHERE finished_at IS NOT NULL AND primitive IN ('check_status', 'host_report');
