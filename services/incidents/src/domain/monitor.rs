//! The monitor service's sources (MO-04, MO-09): `plane:site_down` (critical) while its uptime
//! check says the site is down, and `plane:cert_problem` (warning) while the served certificate
//! has one of its five problems. Both judge only from the facts the monitor's events left here
//! ([`MonitorFacts`]); neither probes.

use capstan_events::monitor::CertProblem;
use chrono::{DateTime, Utc};

use super::record::Severity;
use super::sources::{Condition, NodeFacts, PlaneSource, PlaneSourceName, SourceName};

/// What the monitor last said about a node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MonitorFacts {
    /// When the current outage began; `None` while the site answers (or is not checked).
    pub site_down_since: Option<DateTime<Utc>>,
    /// What the newest failing check saw.
    pub site_down_reason: Option<String>,
    /// The served certificate's problem, if it has one.
    pub cert_problem: Option<CertProblem>,
}

/// `plane:site_down`: the node's site failed two checks in a row and has not answered since.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SiteDown;

impl PlaneSource for SiteDown {
    fn name(&self) -> PlaneSourceName {
        PlaneSourceName::SiteDown
    }

    fn judge(&self, node: &NodeFacts, _now: DateTime<Utc>) -> Option<Condition> {
        let since = node.monitor.site_down_since?;
        Some(Condition {
            source: SourceName::Plane(PlaneSourceName::SiteDown),
            severity: Severity::Critical,
            detail: node
                .monitor
                .site_down_reason
                .clone()
                .unwrap_or_else(|| "The uptime check failed".to_string()),
            since,
        })
    }
}

/// `plane:cert_problem`: the certificate the origin serves has a problem; the detail names it
/// and its fix. A different reason is the same incident with its detail refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CertProblemSource;

impl PlaneSource for CertProblemSource {
    fn name(&self) -> PlaneSourceName {
        PlaneSourceName::CertProblem
    }

    fn judge(&self, node: &NodeFacts, now: DateTime<Utc>) -> Option<Condition> {
        let problem = node.monitor.cert_problem.as_ref()?;
        Some(Condition {
            source: SourceName::Plane(PlaneSourceName::CertProblem),
            severity: Severity::Warning,
            detail: format!("{}. {} Fix: {}", problem.title, problem.detail, problem.fix),
            since: problem.since.unwrap_or(now).min(now),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::tests::at;
    use crate::domain::sources::tests::node;
    use crate::domain::sources::{InstallState, Registry};
    use capstan_events::monitor::CertReason;

    fn registry() -> Registry {
        let mut registry = Registry::default();
        registry.register(Box::new(SiteDown)).unwrap();
        registry.register(Box::new(CertProblemSource)).unwrap();
        registry
    }

    #[test]
    fn mo_04_site_down_is_critical_from_the_outages_start_with_the_newest_reason() {
        let mut facts = node(1);
        assert!(
            SiteDown.judge(&facts, at(0)).is_none(),
            "an answering site opens nothing"
        );
        facts.monitor.site_down_since = Some(at(-120));
        facts.monitor.site_down_reason = Some("HTTP 500".into());
        let condition = SiteDown.judge(&facts, at(0)).unwrap();
        assert_eq!(condition.severity, Severity::Critical);
        assert_eq!(condition.since, at(-120));
        assert_eq!(condition.detail, "HTTP 500");
        assert_eq!(condition.source.to_string(), "plane:site_down");
    }

    #[test]
    fn mo_09_a_certificate_problem_is_a_warning_naming_its_fix() {
        let mut facts = node(1);
        facts.monitor.cert_problem = Some(CertProblem {
            reason: CertReason::OriginUncovered,
            title: "The origin serves a certificate for other names".into(),
            not_after: None,
            detail: "presented fallback.test; wanted shop.test".into(),
            fix: "issue_origin_cert.sh".into(),
            since: None,
        });
        let condition = CertProblemSource.judge(&facts, at(0)).unwrap();
        assert_eq!(condition.severity, Severity::Warning);
        assert!(condition.detail.contains("issue_origin_cert.sh"));
        assert_eq!(condition.source.to_string(), "plane:cert_problem");
    }

    #[test]
    fn in_13_a_node_not_operational_opens_neither() {
        let mut facts = node(1);
        facts.monitor.site_down_since = Some(at(-120));
        assert_eq!(registry().conditions(&facts, at(0)).len(), 1);
        facts.install_state = InstallState::Installing;
        assert!(registry().conditions(&facts, at(0)).is_empty());
    }
}
