//! The monitor's conditions (issue 28: conditions are judged where the facts live):
//! `plane:site_down` (critical, MO-04) while its uptime check says the site is down — two
//! failing checks in a row, `uptime.rs`'s streak rule — and `plane:cert_problem` (warning,
//! MO-09) while the served certificate has one of its problems. Each is judged from the fact
//! the monitor publishes in the same transaction (`SiteDown`, `SiteUp`, `CertProblemChanged`),
//! so the condition and the public event never disagree; incidents turns them into incidents.

use capstan_events::conditions::ConditionChanged;
use capstan_events::monitor::{CertProblemChanged, SiteDown, SiteUp, CERT_PROBLEM, SITE_DOWN};

/// MO-04: the site is down since the first failing check of the streak, with the newest
/// failing check's reason as the evidence.
pub fn site_down(down: &SiteDown) -> ConditionChanged {
    let evidence = if down.reason.trim().is_empty() {
        "The uptime check failed".to_string()
    } else {
        down.reason.clone()
    };
    SITE_DOWN.happening(down.node_id, evidence, down.down_since, down.checked_at)
}

/// MO-04: the site answered again, or its check stopped: it is no longer down.
pub fn site_up(up: &SiteUp) -> ConditionChanged {
    SITE_DOWN.not_happening(up.node_id, up.up_at)
}

/// MO-09: the served certificate's problem, named with its fix; none clears it. A different
/// problem is the same condition with new evidence.
pub fn cert_problem(changed: &CertProblemChanged) -> ConditionChanged {
    match &changed.problem {
        Some(problem) => CERT_PROBLEM.happening(
            changed.node_id,
            format!("{}. {} Fix: {}", problem.title, problem.detail, problem.fix),
            problem.since.unwrap_or(changed.checked_at),
            changed.checked_at,
        ),
        None => CERT_PROBLEM.not_happening(changed.node_id, changed.checked_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::incidents::Severity;
    use capstan_events::monitor::{CertProblem, CertReason};
    use capstan_events::NodeId;
    use chrono::{DateTime, Duration, TimeZone, Utc};

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000, 0).unwrap() + Duration::seconds(seconds)
    }

    fn down(reason: &str) -> SiteDown {
        SiteDown {
            node_id: NodeId(1),
            url: "https://shop.test/".into(),
            down_since: at(-120),
            reason: reason.into(),
            checked_at: at(0),
        }
    }

    #[test]
    fn mo_04_site_down_is_critical_from_the_outages_start_with_the_newest_reason() {
        let condition = site_down(&down("HTTP 500"));
        assert!(condition.happening);
        assert_eq!(condition.severity, Severity::Critical);
        assert_eq!(condition.since, Some(at(-120)));
        assert_eq!(condition.evidence, "HTTP 500");
        assert_eq!(condition.source(), "plane:site_down");
        assert_eq!(condition.observed_at, at(0));
        assert!(condition.check().is_ok());
        assert_eq!(site_down(&down("")).evidence, "The uptime check failed");
    }

    #[test]
    fn mo_04_a_site_that_answers_again_or_is_no_longer_checked_is_not_down() {
        let up = SiteUp {
            node_id: NodeId(1),
            url: "https://shop.test/".into(),
            down_since: at(-120),
            up_at: at(60),
            stopped: true,
        };
        let condition = site_up(&up);
        assert!(!condition.happening);
        assert_eq!(condition.source(), "plane:site_down");
        assert_eq!(condition.observed_at, at(60));
    }

    #[test]
    fn mo_09_a_certificate_problem_is_a_warning_naming_its_fix_and_none_clears_it() {
        let mut changed = CertProblemChanged {
            node_id: NodeId(1),
            name: "shop.test".into(),
            problem: Some(CertProblem {
                reason: CertReason::OriginUncovered,
                title: "The origin serves a certificate for other names".into(),
                not_after: None,
                detail: "presented fallback.test; wanted shop.test".into(),
                fix: "issue_origin_cert.sh".into(),
                since: None,
            }),
            checked_at: at(0),
        };
        let condition = cert_problem(&changed);
        assert!(condition.happening);
        assert_eq!(condition.severity, Severity::Warning);
        assert!(condition.evidence.contains("issue_origin_cert.sh"));
        assert_eq!(condition.source(), "plane:cert_problem");
        assert_eq!(condition.since, Some(at(0)));
        changed.problem = None;
        assert!(!cert_problem(&changed).happening);
    }
}
