//! The compiled checks' rules, from facts the runtime measured on the host: what passes, what
//! fails, what cannot be told, and which unit a repair acts on (AG-52, AG-53).

use capstan_events::agent_channel::primitives::UNITS;

use super::Check;
use crate::domain::vocabulary::OWN_UNIT;

/// AG-52: at least this share of the site filesystem available...
pub const DISK_MIN_PERCENT: u64 = 10;
/// ...and at least this many bytes.
pub const DISK_MIN_BYTES: u64 = 5 * 1024 * 1024 * 1024;

/// AG-52 `disk_headroom`: the site filesystem has at least 10% and at least 5 GiB available;
/// unknown when either figure is unknown. No slope, no history.
pub fn disk_headroom(avail_bytes: Option<u64>, total_bytes: Option<u64>) -> Check {
    let (Some(avail), Some(total)) = (avail_bytes, total_bytes) else {
        return Check::unknown("the site filesystem's available or total space is unknown");
    };
    if total == 0 {
        return Check::unknown("the site filesystem reports no size");
    }
    let gib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0 * 1024.0);
    let percent = avail as f64 * 100.0 / total as f64;
    let said = format!(
        "{:.1} GiB of {:.1} GiB available ({percent:.1}%); at least {DISK_MIN_PERCENT}% and {} GiB are needed",
        gib(avail),
        gib(total),
        DISK_MIN_BYTES / (1024 * 1024 * 1024)
    );
    if avail.saturating_mul(100) >= total.saturating_mul(DISK_MIN_PERCENT)
        && avail >= DISK_MIN_BYTES
    {
        Check::pass(said)
    } else {
        Check::fail(said)
    }
}

/// A unit's state as the service manager reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitState {
    Running,
    /// Stopped, or given up on (systemd's failed).
    Down(String),
    /// Not installed on this machine (a database on another host): not this machine's to
    /// restart.
    Absent,
    Unknown(String),
}

/// Whether a service answered its probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No(String),
    Unknown(String),
}

/// One service `service_health` watches, in dependency order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// What it is to the site: PostgreSQL, the app server, the web server.
    pub role: &'static str,
    /// Its unit, from the node's own configuration.
    pub unit: String,
    pub state: UnitState,
    pub answers: Answer,
}

/// AG-53 `service_health`: each service answers, not merely runs. The first failing service in
/// dependency order (PostgreSQL, then the app server, then the web server) is the repair's
/// target — a unit given up on, or one that runs and does not answer. An absent unit is
/// skipped; the agent itself and a unit outside the compiled set are never targets.
pub fn service_health(services: &[Service]) -> Check {
    let mut unknown = Vec::new();
    let mut fine = Vec::new();
    for service in services {
        let name = format!("{} ({})", service.role, service.unit);
        if service.unit == OWN_UNIT {
            unknown.push(format!(
                "{name}: the agent is never one of service_health's units"
            ));
            continue;
        }
        let failing = match (&service.state, &service.answers) {
            (UnitState::Absent, Answer::Yes) => None,
            (UnitState::Absent, _) => {
                fine.push(format!(
                    "{name}: not installed here, not this machine's to restart"
                ));
                continue;
            }
            (UnitState::Down(why), _) => Some(format!("{name} is down: {why}")),
            // A box without a service manager the agent can ask (no systemd, no supervisord
            // configured) cannot be repaired by this recipe: it cannot tell (AG-41).
            (UnitState::Unknown(state_why), Answer::No(why)) => {
                unknown.push(format!("{name} does not answer ({why}), and {state_why}"));
                continue;
            }
            (_, Answer::No(why)) => Some(format!("{name} runs but does not answer: {why}")),
            (UnitState::Unknown(state_why), Answer::Unknown(why)) => {
                unknown.push(format!("{name}: {state_why}; {why}"));
                continue;
            }
            (_, Answer::Unknown(why)) => {
                unknown.push(format!("{name}: {why}"));
                continue;
            }
            (_, Answer::Yes) => None,
        };
        match failing {
            Some(detail) => {
                if !UNITS.contains(&service.unit.as_str()) {
                    return Check::unknown(format!(
                        "{detail}; {} is not a unit this agent may restart",
                        service.unit
                    ));
                }
                return Check::fail(detail).targeting(service.unit.clone());
            }
            None => fine.push(format!("{name} answers")),
        }
    }
    if !unknown.is_empty() {
        return Check::unknown(unknown.join("; "));
    }
    Check::pass(fine.join("; "))
}

/// What an HTTP status from the web server says of the web server and the app server behind
/// it: a 502, 503 or 504 is the web server answering for an app server that does not.
pub fn web_answer(status: Result<u16, String>) -> (Answer, Answer) {
    match status {
        Err(why) => (
            Answer::No(why),
            Answer::Unknown(
                "the web server did not answer, so the app server behind it could not be asked"
                    .into(),
            ),
        ),
        Ok(code @ (502..=504)) => (
            Answer::Yes,
            Answer::No(format!("the web server answered {code} for it")),
        ),
        Ok(code) if code >= 500 => (
            Answer::No(format!("it answered {code}")),
            Answer::Unknown(format!("the web server answered {code}")),
        ),
        Ok(_) => (Answer::Yes, Answer::Yes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::recipes::Verdict;

    const GIB: u64 = 1024 * 1024 * 1024;

    #[test]
    fn ag_52_disk_headroom_needs_ten_percent_and_five_gib() {
        assert_eq!(
            disk_headroom(Some(20 * GIB), Some(100 * GIB)).verdict,
            Verdict::Pass
        );
        assert_eq!(
            disk_headroom(Some(9 * GIB), Some(100 * GIB)).verdict,
            Verdict::Fail
        );
        // 50% of a small disk is still under 5 GiB.
        assert_eq!(
            disk_headroom(Some(4 * GIB), Some(8 * GIB)).verdict,
            Verdict::Fail
        );
        assert_eq!(
            disk_headroom(Some(5 * GIB), Some(50 * GIB)).verdict,
            Verdict::Pass
        );
        assert_eq!(
            disk_headroom(None, Some(50 * GIB)).verdict,
            Verdict::Unknown
        );
        assert_eq!(disk_headroom(Some(5 * GIB), None).verdict, Verdict::Unknown);
        assert!(disk_headroom(Some(9 * GIB), Some(100 * GIB))
            .detail
            .contains("9.0 GiB of 100.0 GiB"));
    }

    fn service(role: &'static str, unit: &str, state: UnitState, answers: Answer) -> Service {
        Service {
            role,
            unit: unit.into(),
            state,
            answers,
        }
    }

    #[test]
    fn ag_53_the_first_failing_unit_in_dependency_order_is_the_target() {
        let healthy = || {
            vec![
                service("PostgreSQL", "postgresql", UnitState::Running, Answer::Yes),
                service("the app server", "php-fpm", UnitState::Running, Answer::Yes),
                service("the web server", "nginx", UnitState::Running, Answer::Yes),
            ]
        };
        assert_eq!(service_health(&healthy()).verdict, Verdict::Pass);
        let mut both = healthy();
        both[1].answers = Answer::No("502".into());
        both[2].state = UnitState::Down("failed".into());
        let check = service_health(&both);
        assert_eq!(check.verdict, Verdict::Fail);
        assert_eq!(check.target.as_deref(), Some("php-fpm"));
        // Running and not answering is failing too.
        let mut mute = healthy();
        mute[2].answers = Answer::No("connection refused".into());
        assert_eq!(service_health(&mute).target.as_deref(), Some("nginx"));
    }

    #[test]
    fn ag_53_an_absent_unit_is_not_restarted_and_the_agent_never_is() {
        let services = vec![
            service(
                "PostgreSQL",
                "postgresql",
                UnitState::Absent,
                Answer::No("refused".into()),
            ),
            service("the web server", "nginx", UnitState::Running, Answer::Yes),
        ];
        assert_eq!(service_health(&services).verdict, Verdict::Pass);
        let agent = vec![service(
            "the web server",
            OWN_UNIT,
            UnitState::Down("stopped".into()),
            Answer::No("x".into()),
        )];
        let check = service_health(&agent);
        assert_eq!(check.verdict, Verdict::Unknown);
        assert_eq!(check.target, None);
        // A unit outside the compiled set is never a target (AG-49).
        let foreign = vec![service(
            "the web server",
            "sshd",
            UnitState::Down("x".into()),
            Answer::Yes,
        )];
        assert_eq!(service_health(&foreign).target, None);
    }

    #[test]
    fn ag_41_a_service_that_cannot_be_asked_is_unknown() {
        let services = vec![service(
            "the web server",
            "nginx",
            UnitState::Unknown("no systemd".into()),
            Answer::Unknown("no address".into()),
        )];
        assert_eq!(service_health(&services).verdict, Verdict::Unknown);
        // Not answering on a box without a service manager: nothing here can repair it.
        let services = vec![service(
            "the web server",
            "nginx",
            UnitState::Unknown("systemd is not running".into()),
            Answer::No("connection refused".into()),
        )];
        assert_eq!(service_health(&services).verdict, Verdict::Unknown);
    }

    #[test]
    fn ag_53_a_gateway_error_is_the_app_server_not_answering() {
        assert_eq!(web_answer(Ok(200)), (Answer::Yes, Answer::Yes));
        assert_eq!(web_answer(Ok(404)).0, Answer::Yes);
        assert!(matches!(web_answer(Ok(502)), (Answer::Yes, Answer::No(_))));
        assert!(matches!(web_answer(Err("refused".into())).0, Answer::No(_)));
        assert!(matches!(web_answer(Ok(500)).0, Answer::No(_)));
    }
}
