//! A node's uptime check (MO-01, MO-02, MO-04; decision 6.1-9): its setting, what an answer
//! means for each kind, the streak rule and the schedule.
//!
//! * Down after [`DOWN_AFTER`] consecutive failing checks; up on the first success.
//! * The last status, the streak, when the outage began and the newest failing reason are
//!   kept; the reason is cleared by a success.
//! * Checks run every `interval_secs` (60 by default), each node at its own phase within the
//!   interval (random when its check is set), so a fleet is not checked in the same second.

use capstan_events::monitor::{CheckKind, UptimeStatus};
use chrono::{DateTime, Duration, Utc};
use url::Url;

use super::InvalidInput;
use capstan_events::Word as _;

/// Decision 6.1-9: a node is down after this many consecutive failing checks.
pub const DOWN_AFTER: u32 = 2;
/// Decision 6.1-9: the default interval.
pub const DEFAULT_INTERVAL_SECS: u32 = 60;
/// The spec's pass (~15 min) is the ceiling, not the goal: no check is set rarer than this.
pub const MAX_INTERVAL_SECS: u32 = 900;
/// The longest URL a check keeps.
pub const MAX_URL_CHARS: usize = 2048;
/// The longest keyword a page may be searched for.
pub const MAX_KEYWORD_CHARS: usize = 200;
/// The most of a page read for a keyword or a health document.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How long a check's history is kept (the node page's day).
pub const HISTORY_KEPT: Duration = Duration::days(1);
/// The longest reason kept from a failing check.
pub const MAX_REASON_CHARS: usize = 300;

/// A node's check as an operator set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub enabled: bool,
    pub kind: CheckKind,
    pub url: Option<Url>,
    pub keyword: Option<String>,
    pub interval_secs: u32,
}

impl Setting {
    /// Whether anything is to be checked: switched on and with a URL.
    pub fn active(&self) -> bool {
        self.enabled && self.url.is_some()
    }
}

/// Reads an operator's setting; `min_interval_secs` is `CAPSTAN__MONITOR__MIN_INTERVAL_SECS`.
pub fn setting(
    enabled: bool,
    kind: CheckKind,
    url: Option<&str>,
    keyword: Option<&str>,
    interval_secs: Option<u32>,
    min_interval_secs: u32,
) -> Result<Setting, InvalidInput> {
    let url = match url.map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(check_url(text)?),
    };
    let keyword = match keyword {
        None | Some("") => None,
        Some(text)
            if text.chars().count() > MAX_KEYWORD_CHARS || text.chars().any(char::is_control) =>
        {
            return Err(InvalidInput::new(
                "keyword",
                format!(
                    "must be at most {MAX_KEYWORD_CHARS} characters without control characters"
                ),
            ))
        }
        Some(text) => Some(text.to_string()),
    };
    if kind == CheckKind::Keyword && keyword.is_none() {
        return Err(InvalidInput::new(
            "keyword",
            "a keyword check needs the text the page must contain",
        ));
    }
    if kind == CheckKind::TlsCertificate && url.as_ref().is_some_and(|url| url.scheme() != "https")
    {
        return Err(InvalidInput::new(
            "url",
            "a tls_certificate check needs an https:// URL",
        ));
    }
    let interval_secs = interval_secs.unwrap_or(DEFAULT_INTERVAL_SECS);
    if !(min_interval_secs..=MAX_INTERVAL_SECS).contains(&interval_secs) {
        return Err(InvalidInput::new(
            "interval_secs",
            format!("must be from {min_interval_secs} to {MAX_INTERVAL_SECS} seconds"),
        ));
    }
    Ok(Setting {
        enabled,
        kind,
        url,
        keyword,
        interval_secs,
    })
}

/// An `http://` or `https://` URL with a host and no credentials.
pub fn check_url(text: &str) -> Result<Url, InvalidInput> {
    if text.chars().count() > MAX_URL_CHARS {
        return Err(InvalidInput::new(
            "url",
            format!("must be at most {MAX_URL_CHARS} characters"),
        ));
    }
    let url = Url::parse(text).map_err(|error| InvalidInput::new("url", error.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(InvalidInput::new("url", "must be http:// or https://"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(InvalidInput::new("url", "must name a host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(InvalidInput::new(
            "url",
            "must not carry a user or password",
        ));
    }
    Ok(url)
}

/// What one check saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    /// Failed, in words an operator reads (`HTTP 500`, `no answer within 10 s`).
    Failed(String),
}

impl Outcome {
    pub fn failed(reason: impl Into<String>) -> Outcome {
        let reason: String = reason.into();
        Outcome::Failed(reason.chars().take(MAX_REASON_CHARS).collect())
    }
}

/// MO-02: what an HTTP answer means for a check of `kind`. `body` is the start of the page
/// (at most [`MAX_BODY_BYTES`]), read only for the kinds that look at it.
pub fn judge_answer(kind: CheckKind, keyword: Option<&str>, status: u16, body: &[u8]) -> Outcome {
    let success = (200..300).contains(&status);
    match kind {
        // the TLS handshake already proved the chain; any answer over it will do, as long as
        // the site answers as http_status would have it
        CheckKind::HttpStatus | CheckKind::TlsCertificate => {
            if (200..400).contains(&status) {
                Outcome::Passed
            } else {
                Outcome::failed(format!("HTTP {status}"))
            }
        }
        CheckKind::Keyword => {
            let keyword = keyword.unwrap_or_default();
            if !success {
                Outcome::failed(format!("HTTP {status}"))
            } else if String::from_utf8_lossy(body).contains(keyword) {
                Outcome::Passed
            } else {
                Outcome::failed(format!(
                    "HTTP {status}, but the page does not contain {keyword:?}"
                ))
            }
        }
        CheckKind::Api => {
            if !success {
                Outcome::failed(format!("HTTP {status}"))
            } else if serde_json::from_slice::<serde_json::Value>(body).is_ok() {
                Outcome::Passed
            } else {
                Outcome::failed(format!(
                    "HTTP {status}, but the answer is not a JSON document"
                ))
            }
        }
    }
}

/// Whether an answer of `kind` needs its body read.
pub fn reads_body(kind: CheckKind) -> bool {
    matches!(kind, CheckKind::Keyword | CheckKind::Api)
}

/// A check's live state (`mgn_uptime_*`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Live {
    /// `None` until the first verdict.
    pub status: Option<Up>,
    pub consecutive_failures: u32,
    /// When the first failing check of the current streak ran.
    pub failing_since: Option<DateTime<Utc>>,
    pub down_since: Option<DateTime<Utc>>,
    /// The newest failing check's words; `None` once a check passes.
    pub reason: Option<String>,
}

/// Up or down, as last judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Up {
    Up,
    Down,
}

impl Live {
    pub fn status(&self) -> UptimeStatus {
        match self.status {
            None => UptimeStatus::Unknown,
            Some(Up::Up) => UptimeStatus::Up,
            Some(Up::Down) => UptimeStatus::Down,
        }
    }
}

/// What a check changed that the world is told of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    Nothing,
    /// The site is down (this check made it so, or it stays down with a different reason).
    Down {
        down_since: DateTime<Utc>,
        reason: String,
    },
    /// The site that was down answered.
    Up {
        down_since: DateTime<Utc>,
    },
}

/// MO-01, decision 6.1-9: the state after a check that ran at `at`, and what it changed.
pub fn record(live: &Live, outcome: &Outcome, at: DateTime<Utc>) -> (Live, Transition) {
    match outcome {
        Outcome::Passed => {
            let transition = match live.down_since {
                Some(down_since) => Transition::Up { down_since },
                None => Transition::Nothing,
            };
            (
                Live {
                    status: Some(Up::Up),
                    ..Live::default()
                },
                transition,
            )
        }
        Outcome::Failed(reason) => {
            let failures = live.consecutive_failures.saturating_add(1);
            let failing_since = live.failing_since.unwrap_or(at);
            let mut next = Live {
                status: live.status,
                consecutive_failures: failures,
                failing_since: Some(failing_since),
                down_since: live.down_since,
                reason: Some(reason.clone()),
            };
            if failures < DOWN_AFTER {
                return (next, Transition::Nothing);
            }
            let down_since = live.down_since.unwrap_or(failing_since);
            next.status = Some(Up::Down);
            next.down_since = Some(down_since);
            let told = live.down_since.is_some() && live.reason.as_deref() == Some(reason);
            let transition = if told {
                Transition::Nothing
            } else {
                Transition::Down {
                    down_since,
                    reason: reason.clone(),
                }
            };
            (next, transition)
        }
    }
}

/// When a check just set (or set anew) is first due: at a random point (`phase` in [0, 1))
/// within its first interval, so a fleet set at once spreads over the interval.
pub fn first_due(now: DateTime<Utc>, interval_secs: u32, phase: f64) -> DateTime<Utc> {
    let phase = phase.clamp(0.0, 1.0);
    now + Duration::milliseconds((f64::from(interval_secs) * 1000.0 * phase) as i64)
}

/// When a check that was due at `due` is next due: one interval later, keeping its phase;
/// a check that fell more than an interval behind starts again from `now`.
pub fn next_due(due: DateTime<Utc>, now: DateTime<Utc>, interval_secs: u32) -> DateTime<Utc> {
    let interval = Duration::seconds(i64::from(interval_secs));
    let next = due + interval;
    if next > now {
        next
    } else {
        now + interval
    }
}

/// A node's check as it stands, before an operator's change to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Current<'a> {
    pub enabled: bool,
    /// The kind as stored.
    pub kind: &'a str,
    pub url: Option<&'a str>,
    pub keyword: Option<&'a str>,
    pub interval_secs: i32,
    pub next_check_at: Option<DateTime<Utc>>,
    pub live: Live,
}

/// What an operator's change to a node's check does to what it had.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The new setting checks the same thing the same way (only the interval may differ),
    /// so its live state and schedule are kept.
    pub kept: bool,
    pub live: Live,
    /// An outage the old check reported, now over as far as anyone can tell: its URL and
    /// when it began.
    pub outage_over: Option<(String, DateTime<Utc>)>,
    pub next_check_at: Option<DateTime<Utc>>,
}

/// MO-01: a check pointed elsewhere, or switched off, starts again from unknown (and an outage
/// it reported is over); one that checks the same thing keeps its state, and its schedule
/// unless the interval changed. `phase` in [0, 1) places a new schedule (see [`first_due`]).
pub fn change(current: &Current, setting: &Setting, now: DateTime<Utc>, phase: f64) -> Change {
    let kept = current.enabled == setting.enabled
        && current.kind == setting.kind.as_str()
        && current.url == setting.url.as_ref().map(|url| url.as_str())
        && current.keyword == setting.keyword.as_deref();
    let outage_over = match (kept, current.live.down_since, current.url) {
        (false, Some(down_since), Some(url)) => Some((url.to_string(), down_since)),
        _ => None,
    };
    let next_check_at = match (setting.active(), kept, current.next_check_at) {
        (false, _, _) => None,
        (true, true, Some(next))
            if i64::from(current.interval_secs) == i64::from(setting.interval_secs) =>
        {
            Some(next)
        }
        (true, _, _) => Some(first_due(now, setting.interval_secs, phase)),
    };
    Change {
        kept,
        live: if kept {
            current.live.clone()
        } else {
            Live::default()
        },
        outage_over,
        next_check_at,
    }
}

/// MO-08: the host whose certificate is read for an active check's URL (none for an address,
/// which has no name to check a certificate against).
pub fn certificate_name(setting: &Setting) -> Option<String> {
    setting
        .url
        .as_ref()
        .filter(|_| setting.active())
        .and_then(|url| url.host_str())
        .filter(|host| host.parse::<std::net::IpAddr>().is_err() && !host.starts_with('['))
        .map(str::to_ascii_lowercase)
}

/// What a change to a check does to its certificate watch (MO-08).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CertificateWatch {
    /// The name to read soon (a new or renamed URL, or a check set anew).
    pub watch: Option<String>,
    /// No name to watch any more.
    pub unwatch: bool,
    /// A problem that was reported is over: the name it is cleared under.
    pub clear: Option<String>,
}

/// MO-08: a certificate is read for the URL's host soon after the URL is set or changes; a
/// problem reported for a name no longer watched is cleared. `watched` is the name watched
/// before and whether a problem is open on it.
pub fn certificate_watch(
    watched: Option<(&str, bool)>,
    name: Option<String>,
    kept: bool,
) -> CertificateWatch {
    let had_problem = watched.is_some_and(|(_, problem)| problem);
    match name {
        Some(name) => {
            let renamed = watched.is_none_or(|(old, _)| old != name);
            CertificateWatch {
                watch: (renamed || !kept).then(|| name.clone()),
                unwatch: false,
                clear: (renamed && had_problem).then_some(name),
            }
        }
        None => CertificateWatch {
            watch: None,
            unwatch: true,
            clear: watched
                .filter(|(_, problem)| *problem)
                .map(|(old, _)| old.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn active(url: &str) -> Setting {
        Setting {
            enabled: true,
            kind: CheckKind::HttpStatus,
            url: Some(Url::parse(url).unwrap()),
            keyword: None,
            interval_secs: 60,
        }
    }

    fn current(url: &str, live: Live) -> Current<'_> {
        Current {
            enabled: true,
            kind: CheckKind::HttpStatus.as_str(),
            url: Some(url),
            keyword: None,
            interval_secs: 60,
            next_check_at: Some(at(30)),
            live,
        }
    }

    #[test]
    fn mo_01_a_check_pointed_elsewhere_starts_from_unknown_and_its_outage_is_over() {
        let down = Live {
            status: Some(Up::Down),
            consecutive_failures: 2,
            down_since: Some(at(-120)),
            ..Live::default()
        };
        let moved = change(
            &current("https://old.example/", down.clone()),
            &active("https://new.example/"),
            at(0),
            0.5,
        );
        assert!(!moved.kept);
        assert_eq!(moved.live, Live::default());
        assert_eq!(
            moved.outage_over,
            Some(("https://old.example/".to_string(), at(-120)))
        );
        assert_eq!(moved.next_check_at, Some(at(30)));
        let same = change(
            &current("https://old.example/", down.clone()),
            &active("https://old.example/"),
            at(0),
            0.9,
        );
        assert!(same.kept);
        assert_eq!(same.live, down);
        assert_eq!(same.outage_over, None);
        assert_eq!(same.next_check_at, Some(at(30)), "the schedule is kept");
    }

    #[test]
    fn mo_01_a_check_switched_off_is_not_scheduled() {
        let mut off = active("https://site.example/");
        off.enabled = false;
        let changed = change(
            &current("https://site.example/", Live::default()),
            &off,
            at(0),
            0.5,
        );
        assert!(!changed.kept);
        assert_eq!(changed.next_check_at, None);
    }

    #[test]
    fn mo_08_a_certificate_is_watched_by_host_name_and_a_problem_on_an_old_name_is_cleared() {
        assert_eq!(
            certificate_name(&active("https://Site.Example/x")),
            Some("site.example".to_string())
        );
        assert_eq!(certificate_name(&active("https://192.0.2.1/")), None);
        assert_eq!(certificate_name(&active("https://[2001:db8::1]/")), None);
        let renamed = certificate_watch(
            Some(("old.example", true)),
            Some("new.example".into()),
            false,
        );
        assert_eq!(renamed.watch.as_deref(), Some("new.example"));
        assert_eq!(renamed.clear.as_deref(), Some("new.example"));
        let kept = certificate_watch(
            Some(("site.example", true)),
            Some("site.example".into()),
            true,
        );
        assert_eq!(kept, CertificateWatch::default());
        let gone = certificate_watch(Some(("site.example", true)), None, false);
        assert!(gone.unwatch);
        assert_eq!(gone.clear.as_deref(), Some("site.example"));
    }

    fn failed(reason: &str) -> Outcome {
        Outcome::failed(reason)
    }

    #[test]
    fn decision_6_1_9_one_failure_is_not_down_the_second_is() {
        let live = Live {
            status: Some(Up::Up),
            ..Live::default()
        };
        let (live, first) = record(&live, &failed("HTTP 500"), at(0));
        assert_eq!(first, Transition::Nothing);
        assert_eq!(live.status(), UptimeStatus::Up);
        assert_eq!(live.consecutive_failures, 1);
        assert_eq!(live.reason.as_deref(), Some("HTTP 500"));
        assert_eq!(live.down_since, None);
        let (live, second) = record(&live, &failed("HTTP 500"), at(60));
        assert_eq!(
            second,
            Transition::Down {
                down_since: at(0),
                reason: "HTTP 500".into()
            }
        );
        assert_eq!(live.status(), UptimeStatus::Down);
        assert_eq!(live.down_since, Some(at(0)));
    }

    #[test]
    fn mo_01_up_on_the_first_success_which_clears_the_reason_and_the_streak() {
        let mut live = Live::default();
        for second in [0, 60, 120] {
            live = record(&live, &failed("no answer within 10 s"), at(second)).0;
        }
        assert_eq!(live.consecutive_failures, 3);
        let (live, transition) = record(&live, &Outcome::Passed, at(180));
        assert_eq!(transition, Transition::Up { down_since: at(0) });
        assert_eq!(
            live,
            Live {
                status: Some(Up::Up),
                ..Live::default()
            }
        );
    }

    #[test]
    fn mo_01_staying_down_tells_again_only_when_the_newest_reason_changes() {
        let mut live = Live::default();
        live = record(&live, &failed("HTTP 500"), at(0)).0;
        let (down, told) = record(&live, &failed("HTTP 500"), at(60));
        assert!(matches!(told, Transition::Down { .. }));
        let (down, again) = record(&down, &failed("HTTP 500"), at(120));
        assert_eq!(again, Transition::Nothing);
        let (down, changed) = record(&down, &failed("HTTP 502"), at(180));
        assert_eq!(
            changed,
            Transition::Down {
                down_since: at(0),
                reason: "HTTP 502".into()
            }
        );
        assert_eq!(down.down_since, Some(at(0)), "the outage keeps its start");
    }

    #[test]
    fn mo_01_a_success_between_failures_starts_the_streak_again() {
        let mut live = Live::default();
        live = record(&live, &failed("HTTP 500"), at(0)).0;
        live = record(&live, &Outcome::Passed, at(60)).0;
        let (live, transition) = record(&live, &failed("HTTP 500"), at(120));
        assert_eq!(transition, Transition::Nothing);
        assert_eq!(live.consecutive_failures, 1);
        assert_eq!(live.failing_since, Some(at(120)));
    }

    #[test]
    fn mo_01_an_unchecked_node_is_unknown_and_a_first_failure_keeps_it_unknown() {
        assert_eq!(Live::default().status(), UptimeStatus::Unknown);
        let (live, _) = record(&Live::default(), &failed("HTTP 500"), at(0));
        assert_eq!(live.status(), UptimeStatus::Unknown);
    }

    #[test]
    fn mo_02_http_status_passes_on_2xx_and_3xx_only() {
        for status in [200, 204, 301, 302, 399] {
            assert_eq!(
                judge_answer(CheckKind::HttpStatus, None, status, b""),
                Outcome::Passed
            );
        }
        for status in [400, 404, 500, 503, 100] {
            assert_eq!(
                judge_answer(CheckKind::HttpStatus, None, status, b""),
                Outcome::Failed(format!("HTTP {status}"))
            );
        }
    }

    #[test]
    fn mo_02_keyword_needs_a_2xx_page_containing_it() {
        let kind = CheckKind::Keyword;
        assert_eq!(
            judge_answer(kind, Some("Welcome"), 200, b"<h1>Welcome</h1>"),
            Outcome::Passed
        );
        assert!(
            matches!(judge_answer(kind, Some("Welcome"), 200, b"Maintenance"), Outcome::Failed(r) if r.contains("does not contain"))
        );
        assert_eq!(
            judge_answer(kind, Some("Welcome"), 301, b"Welcome"),
            Outcome::Failed("HTTP 301".into())
        );
    }

    #[test]
    fn mo_02_api_needs_a_2xx_json_document() {
        assert_eq!(
            judge_answer(CheckKind::Api, None, 200, br#"{"ok":true}"#),
            Outcome::Passed
        );
        assert!(matches!(
            judge_answer(CheckKind::Api, None, 200, b"<html>"),
            Outcome::Failed(_)
        ));
        assert!(matches!(
            judge_answer(CheckKind::Api, None, 500, b"{}"),
            Outcome::Failed(_)
        ));
    }

    #[test]
    fn a_setting_is_read_with_its_defaults_and_bad_input_names_the_field() {
        let set = setting(
            true,
            CheckKind::HttpStatus,
            Some("https://example.com/"),
            None,
            None,
            30,
        )
        .unwrap();
        assert_eq!(set.interval_secs, DEFAULT_INTERVAL_SECS);
        assert!(set.active());
        let none = setting(true, CheckKind::HttpStatus, None, None, None, 30).unwrap();
        assert!(!none.active(), "nothing is checked without a URL");
        let field = |result: Result<Setting, InvalidInput>| result.unwrap_err().field;
        // A kind is a CheckKind before it gets here: the edge refuses any other word.
        assert_eq!(CheckKind::parse("ping"), None);
        assert_eq!(
            field(setting(
                true,
                CheckKind::HttpStatus,
                Some("ftp://x"),
                None,
                None,
                30
            )),
            "url"
        );
        assert_eq!(
            field(setting(
                true,
                CheckKind::HttpStatus,
                Some("https://u:p@x.test/"),
                None,
                None,
                30
            )),
            "url"
        );
        assert_eq!(
            field(setting(
                true,
                CheckKind::HttpStatus,
                Some("not a url"),
                None,
                None,
                30
            )),
            "url"
        );
        assert_eq!(
            field(setting(
                true,
                CheckKind::Keyword,
                Some("https://x.test/"),
                None,
                None,
                30
            )),
            "keyword"
        );
        assert_eq!(
            field(setting(
                true,
                CheckKind::TlsCertificate,
                Some("http://x.test/"),
                None,
                None,
                30
            )),
            "url"
        );
        assert_eq!(
            field(setting(
                true,
                CheckKind::HttpStatus,
                Some("https://x.test/"),
                None,
                Some(29),
                30
            )),
            "interval_secs"
        );
        assert_eq!(
            field(setting(
                true,
                CheckKind::HttpStatus,
                Some("https://x.test/"),
                None,
                Some(901),
                30
            )),
            "interval_secs"
        );
        assert!(setting(
            true,
            CheckKind::HttpStatus,
            Some("https://x.test/"),
            None,
            Some(1),
            1
        )
        .is_ok());
    }

    #[test]
    fn a_fleet_set_at_once_spreads_over_the_interval_and_keeps_its_phase() {
        assert_eq!(first_due(at(0), 60, 0.0), at(0));
        assert_eq!(first_due(at(0), 60, 0.5), at(30));
        assert!(first_due(at(0), 60, 0.999) < at(60));
        assert_eq!(next_due(at(30), at(31), 60), at(90));
        // fell behind by more than an interval: start again from now
        assert_eq!(next_due(at(30), at(200), 60), at(260));
    }
}
