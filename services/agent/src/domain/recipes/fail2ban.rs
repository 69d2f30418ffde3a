//! AG-50 `fail2ban` (host-scoped): the unit is active with at least one jail. The jails come
//! from `fail2ban-client status` (the server's own answer over its socket), the unit's state
//! from the service manager. Where fail2ban is not installed the recipe does not apply (one
//! `not_applicable` line with the reason, AG-46). The repair restarts the unit: the unit is a
//! constant of the recipe (as mail_gateway's is in the spec), set as the check's target only
//! when the check found it failing, and re-validated by `restart_unit` against its compiled set.

use super::{checks::UnitState, Check};

/// The unit the recipe watches and restarts.
pub const UNIT: &str = "fail2ban";

/// What `fail2ban-client status` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Jails {
    /// The server answered with these jails (possibly none).
    Listed(Vec<String>),
    /// The client ran and the server did not answer (no socket, not running).
    NoAnswer(String),
    /// The client could not be asked at all (not installed, could not start).
    Unknown(String),
}

/// Reads `fail2ban-client status`:
///
/// ```text
/// Status
/// |- Number of jail:    2
/// `- Jail list:    nginx-http-auth, sshd
/// ```
///
/// (the separators are tabs). `None` when the text is not that answer.
pub fn parse_status(text: &str) -> Option<Vec<String>> {
    let mut count = None;
    let mut names = None;
    for line in text.lines() {
        let line = line.trim_start_matches(['|', '`', '-', ' ']);
        if let Some(rest) = line.strip_prefix("Number of jail:") {
            count = rest.trim().parse::<usize>().ok();
        } else if let Some(rest) = line.strip_prefix("Jail list:") {
            names = Some(
                rest.split(',')
                    .map(str::trim)
                    .filter(|name| !name.is_empty())
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            );
        }
    }
    match (count, names) {
        (Some(0), _) => Some(Vec::new()),
        (_, Some(names)) => Some(names),
        (Some(count), None) => Some((1..=count).map(|n| format!("jail {n}")).collect()),
        (None, None) => None,
    }
}

/// AG-46: fail2ban applies where it is installed (its client or its unit file is present).
pub fn applies(
    client_installed: bool,
    unit_installed: bool,
) -> Result<(), super::registry::NotApplicable> {
    if client_installed || unit_installed {
        Ok(())
    } else {
        Err("fail2ban is not installed on this machine (no fail2ban-client and no fail2ban unit file)".into())
    }
}

/// AG-50: pass when the unit is active (or cannot be asked, and the server answers) with at
/// least one jail. A unit that is down, or runs with no jail or without its server answering,
/// fails with the unit as the repair's target. Where nothing could restart it (no service
/// manager the agent can ask, no unit installed) a fault is unknown, never a repair (AG-41).
pub fn judge(state: &UnitState, jails: &Jails) -> Check {
    let listed = |jails: &[String]| {
        format!(
            "{} jail{}: {}",
            jails.len(),
            if jails.len() == 1 { "" } else { "s" },
            jails.join(", ")
        )
    };
    match (state, jails) {
        (UnitState::Down(why), _) => {
            Check::fail(format!("fail2ban is down: {why}")).targeting(UNIT)
        }
        (UnitState::Running, Jails::Listed(jails)) if !jails.is_empty() => {
            Check::pass(format!("fail2ban is active with {}", listed(jails)))
        }
        (UnitState::Unknown(_) | UnitState::Absent, Jails::Listed(jails)) if !jails.is_empty() => {
            Check::pass(format!("fail2ban answers with {}", listed(jails)))
        }
        (UnitState::Running, Jails::Listed(_)) => {
            Check::fail("fail2ban is active with no jail: it protects nothing").targeting(UNIT)
        }
        (UnitState::Running, Jails::NoAnswer(why)) => Check::fail(format!(
            "fail2ban's unit is active but its server does not answer: {why}"
        ))
        .targeting(UNIT),
        (UnitState::Running, Jails::Unknown(why)) => Check::unknown(format!(
            "fail2ban's unit is active, and its jails cannot be counted: {why}"
        )),
        (UnitState::Absent, _) => Check::unknown(
            "fail2ban's server does not answer with a jail, and no fail2ban unit is installed that could be restarted",
        ),
        (UnitState::Unknown(state_why), Jails::Listed(_)) => Check::unknown(format!(
            "fail2ban answers with no jail, and its unit's state is unknown ({state_why})"
        )),
        (UnitState::Unknown(state_why), Jails::NoAnswer(why) | Jails::Unknown(why)) => {
            Check::unknown(format!("fail2ban: {why}; its unit's state is unknown ({state_why})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::recipes::Verdict;

    /// What fail2ban-client 0.11 and 1.0 print, tabs and all.
    const TWO: &str = "Status\n|- Number of jail:\t2\n`- Jail list:\tnginx-http-auth, sshd\n";
    const NONE: &str = "Status\n|- Number of jail:\t0\n`- Jail list:\t\n";

    #[test]
    fn ag_50_fail2ban_client_status_is_read_into_its_jails() {
        assert_eq!(
            parse_status(TWO),
            Some(vec!["nginx-http-auth".to_string(), "sshd".to_string()])
        );
        assert_eq!(parse_status(NONE), Some(Vec::new()));
        assert_eq!(parse_status("ERROR  Failed to access socket path"), None);
    }

    #[test]
    fn ag_50_active_with_a_jail_passes_and_without_one_fails_targeting_the_unit() {
        let jails = Jails::Listed(parse_status(TWO).unwrap());
        let check = judge(&UnitState::Running, &jails);
        assert_eq!(check.verdict, Verdict::Pass);
        assert!(check.detail.contains("2 jails: nginx-http-auth, sshd"));
        assert_eq!(check.target, None);

        let check = judge(&UnitState::Running, &Jails::Listed(Vec::new()));
        assert_eq!(check.verdict, Verdict::Fail);
        assert_eq!(check.target.as_deref(), Some("fail2ban"));

        let down = UnitState::Down("systemd says failed (exit-code)".into());
        let check = judge(&down, &Jails::NoAnswer("no socket".into()));
        assert_eq!(check.verdict, Verdict::Fail);
        assert_eq!(check.target.as_deref(), Some("fail2ban"));
        assert!(check.detail.contains("failed (exit-code)"));

        let mute = judge(&UnitState::Running, &Jails::NoAnswer("no socket".into()));
        assert_eq!(mute.verdict, Verdict::Fail);
        assert_eq!(mute.target.as_deref(), Some("fail2ban"));
    }

    #[test]
    fn ag_41_fail2ban_that_nothing_could_restart_or_count_is_unknown() {
        let no_systemd = UnitState::Unknown("systemd is not running".into());
        assert_eq!(
            judge(&no_systemd, &Jails::NoAnswer("no socket".into())).verdict,
            Verdict::Unknown
        );
        assert_eq!(
            judge(&no_systemd, &Jails::Listed(Vec::new())).verdict,
            Verdict::Unknown
        );
        // Its own answer is enough to pass.
        assert_eq!(
            judge(&no_systemd, &Jails::Listed(vec!["sshd".into()])).verdict,
            Verdict::Pass
        );
        assert_eq!(
            judge(
                &UnitState::Running,
                &Jails::Unknown("fail2ban-client is not installed".into())
            )
            .verdict,
            Verdict::Unknown
        );
        let absent = judge(&UnitState::Absent, &Jails::NoAnswer("x".into()));
        assert_eq!(absent.verdict, Verdict::Unknown);
        assert_eq!(absent.target, None);
    }

    #[test]
    fn ag_46_fail2ban_does_not_apply_where_it_is_not_installed() {
        assert!(applies(true, false).is_ok());
        assert!(applies(false, true).is_ok());
        assert!(applies(false, false)
            .unwrap_err()
            .contains("fail2ban is not installed"));
    }
}
