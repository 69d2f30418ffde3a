//! Status facts kept current on a cadence (MO-05, MO-06): on every status pass, each operational
//! paired node whose agent offers `check_status` (and, on its own stamp, `host_report`) and has
//! no cover for the word gets one job asked of the agent channel.
//!
//! Cover is the job table's rule: a job of the word queued or running, or one completed inside
//! the window, covers the node; so does this service's own request inside the window (it counts
//! from the moment it is asked, before the agent channel has queued it), so a stale node yields
//! one job per window however many passes run, and a job that failed is asked again only when
//! its window has passed.

use chrono::{DateTime, Duration, Utc};

use super::NodeId;
use capstan_events::agent_channel::primitives;

/// The words kept current, in the order a pass asks for them.
pub const WORDS: [&str; 2] = [primitives::CHECK_STATUS, primitives::HOST_REPORT];

/// `STATUS_REFRESH_SECONDS`: the window of both words (MO-05, MO-06), one hour.
pub const STATUS_REFRESH_SECS: u32 = 3600;

/// `DATA_ROOT_RUN_REFRESH_SECONDS` (MO-06): host_report's window while the node's last report
/// says its data root is being encrypted, decrypted or re-keyed, five minutes.
pub const DATA_ROOT_RUN_REFRESH_SECS: u32 = 300;

/// `REBOOT_REFRESH_SECONDS` (MO-06): host_report's window after a reboot was asked, until a
/// report carries a new boot id, two minutes.
pub const REBOOT_REFRESH_SECS: u32 = 120;

/// The data root's states in a host report (`data_root.run`) that shorten the window.
pub const DATA_ROOT_RUNS: [&str; 3] = ["encrypting", "decrypting", "re-keying"];

/// The words that reboot a machine. The wire name is a GAP of the spec (inventory, "Wire
/// names", item 15); this is the name the plane watches for when it is added to the catalogue.
pub const REBOOT_WORDS: [&str; 1] = ["reboot"];

/// The words that encrypt, decrypt or re-key a data root (wire names a GAP of the spec, as
/// above): when one ends, a host_report is asked at once (MO-06).
pub const DATA_ROOT_WORDS: [&str; 3] =
    ["data_root_encrypt", "data_root_decrypt", "data_root_rekey"];

/// Who the jobs are asked by.
pub const REQUESTED_BY: &str = "service/monitor";

/// What is known of one node's jobs of one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cover {
    /// A job of the word is queued or running.
    pub open: bool,
    /// When its latest completed job finished.
    pub completed_at: Option<DateTime<Utc>>,
    /// When this service last asked for one.
    pub requested_at: Option<DateTime<Utc>>,
}

/// One node as a pass sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate<'a> {
    pub node_id: NodeId,
    /// Paired (its agent may claim jobs).
    pub paired: bool,
    /// Its install state is none (installed and running).
    pub operational: bool,
    /// The words its agent reported; `None` until it has reported any.
    pub vocabulary: Option<&'a [String]>,
}

/// Whether `cover` covers the word at `now` for a window of `window`.
pub fn covered(cover: &Cover, now: DateTime<Utc>, window: Duration) -> bool {
    covered_since(cover, now, window, None)
}

/// As [`covered`], where a job completed or asked for at or before `since` is no cover (a
/// data-root job ended then, and the report must be newer than it); a queued or running job
/// still is, so an ending asks for one job, never a pile.
pub fn covered_since(
    cover: &Cover,
    now: DateTime<Utc>,
    window: Duration,
    since: Option<DateTime<Utc>>,
) -> bool {
    let inside = |at: Option<DateTime<Utc>>| {
        at.is_some_and(|at| now - at < window && since.is_none_or(|since| at > since))
    };
    cover.open || inside(cover.completed_at) || inside(cover.requested_at)
}

/// The host_report windows (MO-06): hourly, and the two shorter ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    pub hourly: Duration,
    pub data_root_run: Duration,
    pub reboot: Duration,
}

impl Windows {
    /// The spec's windows: an hour, five minutes, two minutes.
    pub fn spec() -> Windows {
        Windows {
            hourly: Duration::seconds(i64::from(STATUS_REFRESH_SECS)),
            data_root_run: Duration::seconds(i64::from(DATA_ROOT_RUN_REFRESH_SECS)),
            reboot: Duration::seconds(i64::from(REBOOT_REFRESH_SECS)),
        }
    }
}

/// What the plane knows of a node that asks for its host_report sooner than hourly (MO-06).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    /// The newest report's `data_root.run`, when it reported one.
    pub data_root_run: Option<String>,
    /// The newest report's boot id and when it finished.
    pub boot_id: Option<String>,
    pub reported_at: Option<DateTime<Utc>>,
    /// A reboot was asked at this time, when the newest report carried this boot id.
    pub reboot_asked: Option<(DateTime<Utc>, Option<String>)>,
    /// The node's data root opened (told to this plane as its escrow holder) at this time.
    pub data_root_opened_at: Option<DateTime<Utc>>,
    /// The newest end of a data-root job on the node.
    pub data_root_job_ended_at: Option<DateTime<Utc>>,
}

impl HostFacts {
    /// The last report says the data root is being encrypted, decrypted or re-keyed.
    pub fn data_root_running(&self) -> bool {
        self.data_root_run
            .as_deref()
            .is_some_and(|run| DATA_ROOT_RUNS.contains(&run))
    }

    /// A reboot was asked and no report since carries a new boot id.
    pub fn reboot_awaited(&self) -> bool {
        let Some((asked_at, boot_before)) = &self.reboot_asked else {
            return false;
        };
        let rebooted = self.reported_at.is_some_and(|at| at > *asked_at)
            && self.boot_id.is_some()
            && self.boot_id != *boot_before;
        !rebooted
    }

    /// The data root opened after the newest report (or before any report).
    pub fn opened_since_report(&self) -> bool {
        match (self.data_root_opened_at, self.reported_at) {
            (Some(opened), Some(reported)) => opened > reported,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    /// host_report's window for this node: two minutes after a reboot request or an opening
    /// since the last report, five while its data root runs, else hourly.
    pub fn window(&self, windows: &Windows) -> Duration {
        let mut window = windows.hourly;
        if self.data_root_running() {
            window = window.min(windows.data_root_run);
        }
        if self.reboot_awaited() || self.opened_since_report() {
            window = window.min(windows.reboot);
        }
        window
    }
}

/// Whether a pass at `now` asks `node` for a host_report (MO-06): as [`due`], on the window
/// the node's facts give, and at once when a data-root job ended after the last report and
/// the last asking (a queued or running report still covers).
pub fn host_report_due(
    node: &Candidate<'_>,
    cover: &Cover,
    facts: &HostFacts,
    now: DateTime<Utc>,
    windows: &Windows,
) -> bool {
    let window = facts.window(windows);
    offers(node, "host_report") && !covered_since(cover, now, window, facts.data_root_job_ended_at)
}

fn offers(node: &Candidate<'_>, word: &str) -> bool {
    let offers = node
        .vocabulary
        .is_some_and(|words| words.iter().any(|offered| offered == word));
    node.paired && node.operational && offers
}

/// Whether a pass at `now` asks `node` for a job of `word` (MO-05, MO-06): an operational,
/// paired node whose agent offers the word and that has no cover for it.
pub fn due(
    node: &Candidate<'_>,
    word: &str,
    cover: &Cover,
    now: DateTime<Utc>,
    window: Duration,
) -> bool {
    offers(node, word) && !covered(cover, now, window)
}

/// The idempotency key of the job asked for `node`'s `word` at `now`: one per window (of its
/// length) and per data-root ending `since`, so a request sent twice (a redelivery, two
/// replicas) makes one job, and an ending inside a window still makes its own.
pub fn idempotency_key(
    node: NodeId,
    word: &str,
    now: DateTime<Utc>,
    window: Duration,
    since: Option<DateTime<Utc>>,
) -> String {
    let window_secs = window.num_seconds().max(1);
    let bucket = now.timestamp().div_euclid(window_secs);
    match since {
        None => format!("monitor/{word}/{node}/{window_secs}/{bucket}"),
        Some(since) => format!(
            "monitor/{word}/{node}/{window_secs}/{bucket}/after/{}",
            since.timestamp_micros()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(secs: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
    }

    fn hour() -> Duration {
        Duration::seconds(i64::from(STATUS_REFRESH_SECS))
    }

    fn words() -> Vec<String> {
        vec!["check_status".to_string(), "host_report".to_string()]
    }

    fn node(vocabulary: Option<&[String]>) -> Candidate<'_> {
        Candidate {
            node_id: NodeId(7),
            paired: true,
            operational: true,
            vocabulary,
        }
    }

    #[test]
    fn mo_05_a_node_never_checked_is_asked_for_check_status() {
        let words = words();
        assert!(due(
            &node(Some(&words)),
            "check_status",
            &Cover::default(),
            at(0),
            hour()
        ));
    }

    #[test]
    fn mo_05_a_queued_or_running_job_is_cover_however_old() {
        let words = words();
        let open = Cover {
            open: true,
            completed_at: Some(at(-10 * 3600)),
            requested_at: Some(at(-5 * 3600)),
        };
        assert!(!due(
            &node(Some(&words)),
            "check_status",
            &open,
            at(0),
            hour()
        ));
    }

    #[test]
    fn mo_05_a_check_completed_inside_the_hour_is_cover_and_one_outside_is_not() {
        let words = words();
        let inside = Cover {
            completed_at: Some(at(-3599)),
            ..Cover::default()
        };
        assert!(!due(
            &node(Some(&words)),
            "check_status",
            &inside,
            at(0),
            hour()
        ));
        let outside = Cover {
            completed_at: Some(at(-3600)),
            ..Cover::default()
        };
        assert!(due(
            &node(Some(&words)),
            "check_status",
            &outside,
            at(0),
            hour()
        ));
    }

    #[test]
    fn mo_05_a_stale_node_gets_one_job_per_window_however_many_passes_run() {
        let words = words();
        let node = node(Some(&words));
        let mut cover = Cover::default();
        let mut asked = Vec::new();
        // a pass every 15 minutes for three hours; the node never answers (the job failed
        // and nothing completes)
        for pass in 0..12 {
            let now = at(pass * 900);
            if due(&node, "check_status", &cover, now, hour()) {
                asked.push(pass);
                cover.requested_at = Some(now);
            }
        }
        assert_eq!(asked, [0, 4, 8]);
    }

    #[test]
    fn mo_05_the_request_itself_is_cover_before_the_job_is_seen() {
        let words = words();
        let asked = Cover {
            requested_at: Some(at(-1)),
            ..Cover::default()
        };
        assert!(!due(
            &node(Some(&words)),
            "check_status",
            &asked,
            at(0),
            hour()
        ));
    }

    #[test]
    fn mo_05_an_agent_that_lacks_the_word_or_has_not_reported_is_not_asked() {
        let other = vec!["restart_unit".to_string()];
        assert!(!due(
            &node(Some(&other)),
            "check_status",
            &Cover::default(),
            at(0),
            hour()
        ));
        assert!(!due(
            &node(None),
            "check_status",
            &Cover::default(),
            at(0),
            hour()
        ));
    }

    #[test]
    fn mo_05_non_operational_or_unpaired_nodes_are_skipped() {
        let words = words();
        let mut installing = node(Some(&words));
        installing.operational = false;
        assert!(!due(
            &installing,
            "check_status",
            &Cover::default(),
            at(0),
            hour()
        ));
        let mut unpaired = node(Some(&words));
        unpaired.paired = false;
        assert!(!due(
            &unpaired,
            "check_status",
            &Cover::default(),
            at(0),
            hour()
        ));
    }

    #[test]
    fn mo_06_host_report_rides_its_own_stamp() {
        let words = words();
        // a fresh check_status says nothing of host_report: each word has its own cover
        let node = node(Some(&words));
        assert!(due(&node, "host_report", &Cover::default(), at(0), hour()));
        let reported = Cover {
            completed_at: Some(at(-60)),
            ..Cover::default()
        };
        assert!(!due(&node, "host_report", &reported, at(0), hour()));
    }

    #[test]
    fn mo_05_one_idempotency_key_per_node_word_and_window() {
        let key = |node, word, now| idempotency_key(node, word, now, hour(), None);
        let first = key(NodeId(7), "check_status", at(0));
        assert_eq!(first, key(NodeId(7), "check_status", at(1)));
        assert_ne!(first, key(NodeId(8), "check_status", at(1)));
        assert_ne!(first, key(NodeId(7), "host_report", at(1)));
        let next_window = at(3600 - (1_700_000_000 % 3600));
        assert_ne!(first, key(NodeId(7), "check_status", next_window));
    }

    fn minutes(count: i64) -> Duration {
        Duration::minutes(count)
    }

    /// The passes (one a minute for `span` minutes) that ask for a host_report, when each
    /// asking is answered by a report finished within the pass, carrying what `report` says.
    fn host_passes(
        span: i64,
        mut facts: HostFacts,
        report: impl Fn(i64, &mut HostFacts),
    ) -> Vec<i64> {
        let words = words();
        let node = node(Some(&words));
        let mut cover = Cover::default();
        let mut asked = Vec::new();
        for minute in 0..span {
            let now = at(minute * 60);
            if host_report_due(&node, &cover, &facts, now, &Windows::spec()) {
                asked.push(minute);
                cover.requested_at = Some(now);
                cover.completed_at = Some(now);
                facts.reported_at = Some(now);
                report(minute, &mut facts);
            }
        }
        asked
    }

    #[test]
    fn mo_06_host_report_is_asked_every_five_minutes_while_the_data_root_is_encrypting() {
        for run in DATA_ROOT_RUNS {
            let facts = HostFacts {
                data_root_run: Some(run.to_string()),
                ..HostFacts::default()
            };
            assert_eq!(facts.window(&Windows::spec()), minutes(5), "{run}");
            assert_eq!(host_passes(16, facts, |_, _| ()), [0, 5, 10, 15], "{run}");
        }
        // a data root that is mounted, stopped or not reported is asked hourly
        for run in [Some("mounted"), Some("stopped"), None] {
            let facts = HostFacts {
                data_root_run: run.map(str::to_string),
                ..HostFacts::default()
            };
            assert_eq!(facts.window(&Windows::spec()), minutes(60), "{run:?}");
        }
    }

    #[test]
    fn mo_06_after_a_reboot_request_every_two_minutes_until_a_report_carries_a_new_boot_id() {
        let facts = HostFacts {
            boot_id: Some("boot-a".into()),
            reported_at: Some(at(-600)),
            reboot_asked: Some((at(-30), Some("boot-a".into()))),
            ..HostFacts::default()
        };
        // reports keep the old boot id for four minutes, then the machine is back
        let asked = host_passes(20, facts, |minute, facts| {
            if minute >= 3 {
                facts.boot_id = Some("boot-b".into());
            }
        });
        // every two minutes while the old boot id is reported; the report asked at minute 4
        // carries the new one, and then the hour rules again
        assert_eq!(asked, [0, 2, 4]);
    }

    #[test]
    fn mo_06_a_report_from_before_the_reboot_request_never_ends_the_wait() {
        let facts = HostFacts {
            boot_id: Some("boot-b".into()),
            reported_at: Some(at(-60)),
            reboot_asked: Some((at(-30), Some("boot-a".into()))),
            ..HostFacts::default()
        };
        assert!(facts.reboot_awaited());
        let answered = HostFacts {
            reported_at: Some(at(1)),
            ..facts.clone()
        };
        assert!(!answered.reboot_awaited());
        let same_boot = HostFacts {
            boot_id: Some("boot-a".into()),
            ..answered
        };
        assert!(same_boot.reboot_awaited());
    }

    #[test]
    fn mo_06_a_data_root_opened_since_the_last_report_is_asked_every_two_minutes() {
        let facts = HostFacts {
            reported_at: Some(at(-600)),
            data_root_opened_at: Some(at(-60)),
            ..HostFacts::default()
        };
        assert!(facts.opened_since_report());
        assert_eq!(facts.window(&Windows::spec()), minutes(2));
        // the first report after the opening ends it
        assert_eq!(host_passes(10, facts, |_, _| ()), [0]);
    }

    #[test]
    fn mo_06_the_shortest_window_that_applies_wins() {
        let facts = HostFacts {
            data_root_run: Some("re-keying".into()),
            reboot_asked: Some((at(-30), None)),
            ..HostFacts::default()
        };
        assert_eq!(facts.window(&Windows::spec()), minutes(2));
    }

    #[test]
    fn mo_06_a_data_root_job_that_ends_asks_for_a_report_at_once_and_only_once() {
        let words = words();
        let node = node(Some(&words));
        let windows = Windows::spec();
        // reported ten minutes ago: hourly, not due
        let mut cover = Cover {
            completed_at: Some(at(-600)),
            requested_at: Some(at(-601)),
            ..Cover::default()
        };
        let mut facts = HostFacts::default();
        assert!(!host_report_due(&node, &cover, &facts, at(0), &windows));
        // the job ends: due at once
        facts.data_root_job_ended_at = Some(at(5));
        assert!(host_report_due(&node, &cover, &facts, at(6), &windows));
        // asked: the cover rule holds, many passes ask nothing more
        cover.requested_at = Some(at(6));
        for second in 7..200 {
            assert!(!host_report_due(
                &node,
                &cover,
                &facts,
                at(second),
                &windows
            ));
        }
        // queued is cover too, however the ending compares
        let open = Cover {
            open: true,
            ..Cover::default()
        };
        assert!(!host_report_due(&node, &open, &facts, at(7), &windows));
        // the ending makes its own idempotency key inside the same hour
        assert_ne!(
            idempotency_key(
                NodeId(7),
                "host_report",
                at(6),
                windows.hourly,
                facts.data_root_job_ended_at
            ),
            idempotency_key(NodeId(7), "host_report", at(6), windows.hourly, None)
        );
    }

    #[test]
    fn mo_06_the_shorter_windows_keep_the_node_rules() {
        let words = words();
        let facts = HostFacts {
            data_root_run: Some("encrypting".into()),
            data_root_job_ended_at: Some(at(-1)),
            ..HostFacts::default()
        };
        let mut installing = node(Some(&words));
        installing.operational = false;
        assert!(!host_report_due(
            &installing,
            &Cover::default(),
            &facts,
            at(0),
            &Windows::spec()
        ));
        let other = vec!["check_status".to_string()];
        assert!(!host_report_due(
            &node(Some(&other)),
            &Cover::default(),
            &facts,
            at(0),
            &Windows::spec()
        ));
    }
}
