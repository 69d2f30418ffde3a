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

/// The words kept current, in the order a pass asks for them.
pub const WORDS: [&str; 2] = ["check_status", "host_report"];

/// `STATUS_REFRESH_SECONDS`: the window of both words (MO-05, MO-06), one hour.
pub const STATUS_REFRESH_SECS: u32 = 3600;

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
    let inside = |at: Option<DateTime<Utc>>| at.is_some_and(|at| now - at < window);
    cover.open || inside(cover.completed_at) || inside(cover.requested_at)
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
    let offers = node
        .vocabulary
        .is_some_and(|words| words.iter().any(|offered| offered == word));
    node.paired && node.operational && offers && !covered(cover, now, window)
}

/// The idempotency key of the job asked for `node`'s `word` at `now`: one per window, so a
/// request sent twice (a redelivery, two replicas) makes one job.
pub fn idempotency_key(node: NodeId, word: &str, now: DateTime<Utc>, window: Duration) -> String {
    let window_secs = window.num_seconds().max(1);
    format!(
        "monitor/{word}/{node}/{}",
        now.timestamp().div_euclid(window_secs)
    )
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
            node_id: 7,
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
        let first = idempotency_key(7, "check_status", at(0), hour());
        assert_eq!(first, idempotency_key(7, "check_status", at(1), hour()));
        assert_ne!(first, idempotency_key(8, "check_status", at(1), hour()));
        assert_ne!(first, idempotency_key(7, "host_report", at(1), hour()));
        let next_window = at(3600 - (1_700_000_000 % 3600));
        assert_ne!(
            first,
            idempotency_key(7, "check_status", next_window, hour())
        );
    }
}
