-- host_report's shorter windows (MO-06): what the monitor hears of the jobs that shorten them.
-- The data root's run and the boot id are read from the node's newest host_report (readings).

CREATE TABLE host_report_triggers (
    node_id                BIGINT PRIMARY KEY,
    -- A reboot was asked (a job of a reboot word queued) at this time ...
    reboot_asked_at        TIMESTAMPTZ,
    -- ... when the newest host_report carried this boot id (NULL: none known); asked every
    -- two minutes until a report finished after the asking carries another.
    reboot_boot_id         TEXT,
    -- The newest end of a data-root job: a host_report is asked at once after it.
    data_root_job_ended_at TIMESTAMPTZ
);
