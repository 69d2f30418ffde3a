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

crate::domain::refusal!(
    /// Why a server or a certificate gave no answer to read (what the check's detail says).
    Unanswered
);

/// What an HTTP status from the web server says of the web server and the app server behind
/// it: a 502, 503 or 504 is the web server answering for an app server that does not.
pub fn web_answer(status: Result<u16, Unanswered>) -> (Answer, Answer) {
    match status {
        Err(Unanswered(why)) => (
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

/// AG-56: a served certificate needs at least this many days left.
pub const CERTIFICATE_MIN_DAYS: i64 = 14;

/// What the machine's own web server served for one name (SNI, local connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    pub name: String,
    /// Whole days left on the certificate it served, or why none could be read.
    pub days_left: Result<i64, Unanswered>,
}

/// AG-56 `certificate_expiry`: every name the site's TLS vhosts serve has a certificate with
/// at least 14 days left. Failing names the one with the fewest days (the one to re-issue);
/// a name whose certificate could not be read, or no names at all, is unknown, unless another
/// name already fails.
pub fn certificate_expiry(served: &[Served]) -> Check {
    if served.is_empty() {
        return Check::unknown(
            "the web server's enabled sites name no host served over TLS, so there is no certificate to ask for",
        );
    }
    let mut unread = Vec::new();
    let mut read: Vec<(&str, i64)> = Vec::new();
    for entry in served {
        match &entry.days_left {
            Ok(days) => read.push((&entry.name, *days)),
            Err(why) => unread.push(format!("{}: {why}", entry.name)),
        }
    }
    let said: Vec<String> = read
        .iter()
        .map(|(name, days)| format!("{name}: {days} days left"))
        .collect();
    if let Some((name, days)) = read.iter().min_by_key(|(_, days)| *days) {
        if *days < CERTIFICATE_MIN_DAYS {
            let mut detail = format!(
                "{name}'s certificate has {days} days left, under {CERTIFICATE_MIN_DAYS} (certbot's own renewal has not renewed it); {}",
                said.join(", ")
            );
            if !unread.is_empty() {
                detail.push_str(&format!("; not read: {}", unread.join("; ")));
            }
            return Check::fail(detail);
        }
    }
    if !unread.is_empty() {
        return Check::unknown(format!(
            "not read: {}{}",
            unread.join("; "),
            if said.is_empty() {
                String::new()
            } else {
                format!("; {}", said.join(", "))
            }
        ));
    }
    Check::pass(said.join(", "))
}

/// A site container as the Docker engine lists it, with what its site answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteContainer {
    /// The container's name (without Docker's leading `/`).
    pub name: String,
    /// The site it serves (its `capstan.site` label).
    pub site: String,
    /// The engine's `State`: `running`, `exited`, `restarting`, ...
    pub state: String,
    /// Held stopped on purpose (`<state dir>/sites/<site>/held`): left alone.
    pub held: bool,
    /// What the site answered on the container's published port.
    pub answers: Answer,
}

/// AG-54 `container_health`: each site container runs and its site answers on its published
/// port; the first that does not (in the engine's order) is the repair's target. A held
/// container is left alone; no site containers at all is unknown (nothing to watch).
pub fn container_health(containers: &[SiteContainer]) -> Check {
    if containers.is_empty() {
        return Check::unknown(
            "the Docker engine lists no site container (none carries the capstan.site label)",
        );
    }
    let mut fine = Vec::new();
    let mut unknown = Vec::new();
    for container in containers {
        let name = format!("{} (site {})", container.name, container.site);
        if container.held {
            fine.push(format!("{name} is held, left alone"));
            continue;
        }
        let failing = if container.state != "running" {
            Some(format!("{name} is {}", container.state))
        } else {
            match &container.answers {
                Answer::Yes => None,
                Answer::No(why) => Some(format!("{name} runs but its site does not answer: {why}")),
                Answer::Unknown(why) => {
                    unknown.push(format!("{name}: {why}"));
                    continue;
                }
            }
        };
        match failing {
            Some(detail) => return Check::fail(detail).targeting(container.name.clone()),
            None => fine.push(format!("{name} answers")),
        }
    }
    if !unknown.is_empty() {
        return Check::unknown(unknown.join("; "));
    }
    Check::pass(fine.join("; "))
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

    fn served(name: &str, days_left: Result<i64, Unanswered>) -> Served {
        Served {
            name: name.into(),
            days_left,
        }
    }

    #[test]
    fn ag_56_every_served_name_needs_fourteen_days_and_the_fewest_is_named() {
        let fine = [served("a.test", Ok(80)), served("b.test", Ok(14))];
        assert_eq!(certificate_expiry(&fine).verdict, Verdict::Pass);
        let near = [
            served("a.test", Ok(80)),
            served("b.test", Ok(9)),
            served("c.test", Ok(3)),
            served("d.test", Err("connection refused".into())),
        ];
        let check = certificate_expiry(&near);
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(
            check
                .detail
                .starts_with("c.test's certificate has 3 days left"),
            "{}",
            check.detail
        );
        assert!(check.detail.contains("d.test: connection refused"));
        let expired = [served("a.test", Ok(-2))];
        assert_eq!(certificate_expiry(&expired).verdict, Verdict::Fail);
    }

    #[test]
    fn ag_56_an_unread_certificate_or_no_names_is_unknown() {
        let unread = [
            served("a.test", Ok(80)),
            served("b.test", Err("refused".into())),
        ];
        assert_eq!(certificate_expiry(&unread).verdict, Verdict::Unknown);
        assert_eq!(certificate_expiry(&[]).verdict, Verdict::Unknown);
    }

    fn container(name: &str, state: &str, held: bool, answers: Answer) -> SiteContainer {
        SiteContainer {
            name: name.into(),
            site: format!("{name}.test"),
            state: state.into(),
            held,
            answers,
        }
    }

    #[test]
    fn ag_54_the_first_container_not_running_or_not_answering_is_the_target() {
        let fine = container("a", "running", false, Answer::Yes);
        assert_eq!(
            container_health(std::slice::from_ref(&fine)).verdict,
            Verdict::Pass
        );
        let stopped = container("b", "exited", false, Answer::No("refused".into()));
        let mute = container("c", "running", false, Answer::No("502".into()));
        let check = container_health(&[fine.clone(), stopped, mute.clone()]);
        assert_eq!(check.verdict, Verdict::Fail);
        assert_eq!(check.target.as_deref(), Some("b"));
        let check = container_health(&[fine, mute]);
        assert_eq!(check.target.as_deref(), Some("c"));
        assert!(check.detail.contains("does not answer: 502"));
    }

    #[test]
    fn ag_54_a_held_container_is_left_alone_and_none_at_all_is_unknown() {
        let held = container("b", "exited", true, Answer::No("refused".into()));
        let check = container_health(&[held]);
        assert_eq!(check.verdict, Verdict::Pass);
        assert_eq!(check.target, None);
        assert!(check.detail.contains("held"));
        assert_eq!(container_health(&[]).verdict, Verdict::Unknown);
        let unknown = container("a", "running", false, Answer::Unknown("no port".into()));
        assert_eq!(container_health(&[unknown]).verdict, Verdict::Unknown);
    }
}
