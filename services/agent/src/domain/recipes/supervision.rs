//! AG-51 `agent_supervision`: something restarts the agent if it stops, and something starts it
//! after a reboot. Either a systemd unit supervises this very process (its cgroup names the
//! unit, the unit runs the agent with a restarting `Restart=`, and it is enabled: wanted or
//! required by a target, not masked), or the cron keepalive `deploy/agent/install.sh` writes is
//! installed and on (`/etc/cron.d/capstan-agent` runs `capstan-agent-supervise` every minute and
//! at boot, the script and the binary it starts are there, it keeps this agent's state
//! directory, and a cron daemon runs). The facts are read from files (`/proc/self/cgroup`, the
//! unit files and their `*.wants` links, the cron file, `/proc`), never from `systemctl`, so the
//! same judgement runs on a confined agent and in tests on real files in a temporary root.
//!
//! These are the pure parts: the parsers and the judgement.

use std::path::{Path, PathBuf};

use super::Check;

/// The agent's unit as `deploy/systemd/capstan-agent.service` installs it.
pub const AGENT_UNIT: &str = "capstan-agent.service";

/// Where systemd reads unit files, most specific first (relative to the root).
pub const UNIT_DIRS: &[&str] = &[
    "etc/systemd/system",
    "run/systemd/system",
    "run/systemd/transient",
    "usr/local/lib/systemd/system",
    "lib/systemd/system",
    "usr/lib/systemd/system",
];

/// Where an enablement survives a reboot: `*.wants` / `*.requires` links here (the runtime
/// directory under /run does not survive one).
pub const ENABLE_DIRS: &[&str] = &[
    "etc/systemd/system",
    "usr/local/lib/systemd/system",
    "lib/systemd/system",
    "usr/lib/systemd/system",
];

/// The cron keepalive (install.sh) and the script it runs, relative to the root.
pub const CRON_FILE: &str = "etc/cron.d/capstan-agent";
pub const SUPERVISE_SCRIPT: &str = "usr/local/bin/capstan-agent-supervise";

/// The service unit this process runs in, from `/proc/self/cgroup` (v2 `0::/…`, or v1's
/// `name=systemd` hierarchy): the innermost `.service` of a system slice. `None` for a process
/// in a session scope or a user's manager (started by hand), or outside systemd (`0::/`).
pub fn cgroup_unit(text: &str) -> Option<String> {
    let path = text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (hierarchy, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let systemd = (hierarchy == "0" && controllers.is_empty()) || controllers == "name=systemd";
        systemd.then_some(path)
    })?;
    if path.split('/').any(|part| part == "user.slice") {
        return None;
    }
    path.split('/')
        .rev()
        .find(|part| part.ends_with(".service") && part.len() > ".service".len())
        .map(str::to_string)
}

/// A unit as its file and drop-ins say (the later assignment wins; an empty one resets).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnitFile {
    pub exec_start: Vec<String>,
    /// `Restart=`; `None` is systemd's default, `no`.
    pub restart: Option<String>,
    pub wanted_by: Vec<String>,
}

impl UnitFile {
    /// Reads the unit file then its drop-ins, in the order given.
    pub fn parse(texts: &[&str]) -> UnitFile {
        let mut unit = UnitFile::default();
        for text in texts {
            let mut section = String::new();
            for line in text.lines() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                    continue;
                }
                if line.starts_with('[') && line.ends_with(']') {
                    section = line[1..line.len() - 1].to_string();
                    continue;
                }
                let Some((key, value)) = line.split_once('=') else {
                    continue;
                };
                let value = value.trim();
                match (section.as_str(), key.trim()) {
                    ("Service", "ExecStart") if value.is_empty() => unit.exec_start.clear(),
                    ("Service", "ExecStart") => unit.exec_start.push(value.to_string()),
                    ("Service", "Restart") if value.is_empty() => unit.restart = None,
                    ("Service", "Restart") => unit.restart = Some(value.to_string()),
                    ("Install", "WantedBy") if value.is_empty() => unit.wanted_by.clear(),
                    ("Install", "WantedBy") => unit
                        .wanted_by
                        .extend(value.split_whitespace().map(str::to_string)),
                    _ => {}
                }
            }
        }
        unit
    }

    /// It starts the agent (`capstan-agent … run`).
    pub fn runs_agent(&self) -> bool {
        self.exec_start.iter().any(|line| {
            let mut words = line.split_whitespace();
            let program = words
                .next()
                .unwrap_or_default()
                .trim_start_matches(['@', '-', ':', '+', '!']);
            program.rsplit('/').next() == Some("capstan-agent") && words.any(|word| word == "run")
        })
    }

    /// Its `Restart=` brings the agent back after a crash or a kill (`always`, `on-failure`,
    /// `on-abnormal`, `on-abort`); `no`, `on-success` and `on-watchdog` do not.
    pub fn restarts(&self) -> bool {
        matches!(
            self.restart.as_deref(),
            Some("always" | "on-failure" | "on-abnormal" | "on-abort")
        )
    }
}

/// The unit this process runs in, as its files say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFacts {
    pub name: String,
    pub file: UnitFile,
    /// The targets whose `.wants`/`.requires` link it (enabled), e.g. `multi-user.target`.
    pub enabled_by: Vec<String>,
    /// Its file is a link to /dev/null.
    pub masked: bool,
}

/// The cron keepalive as its files say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keepalive {
    /// A line runs the supervise script on a schedule (restarts the agent within a minute).
    pub periodic: bool,
    /// A line runs it `@reboot`.
    pub at_reboot: bool,
    /// The supervise script is a file with an execute bit.
    pub script_runnable: bool,
    /// The script's `STATE_DIR=` and `BINARY=`.
    pub state_dir: Option<String>,
    pub binary: Option<String>,
    /// The binary it starts is a file with an execute bit.
    pub binary_runnable: bool,
}

/// Reads a cron.d file: whether an active line runs the supervise script on a schedule, and
/// whether one runs it at boot.
pub fn parse_cron(text: &str) -> (bool, bool) {
    let mut periodic = false;
    let mut at_reboot = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || !line.contains("capstan-agent-supervise") {
            continue;
        }
        if line.starts_with("@reboot") {
            at_reboot = true;
        } else if line.starts_with('@')
            || line
                .split_whitespace()
                .take(5)
                .all(|field| field.chars().all(|c| "0123456789*/,-".contains(c)))
        {
            periodic = true;
        }
    }
    (periodic, at_reboot)
}

/// The value of `NAME=value` in a shell script (the first assignment at the start of a line).
pub fn script_value(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.trim().strip_prefix(name)?.strip_prefix('=')?;
        Some(value.trim().trim_matches(['"', '\'']).to_string())
    })
}

crate::domain::refusal!(
    /// Why a unit's or the keepalive's files could not be read (what the judgement quotes).
    Unreadable
);

/// Everything the judgement needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub in_container: bool,
    /// systemd is the running init.
    pub systemd: bool,
    /// This process's cgroup path (for the detail) and the service unit it names.
    pub cgroup: String,
    pub own_unit: Option<String>,
    /// That unit's files: `Ok(None)` when no file was found.
    pub unit: Result<Option<UnitFacts>, Unreadable>,
    /// The keepalive: `Ok(None)` when its cron file is absent.
    pub keepalive: Result<Option<Keepalive>, Unreadable>,
    /// A cron daemon runs (`None`: the process list cannot be seen).
    pub cron_running: Option<bool>,
    /// This agent's state directory (resolved).
    pub state_dir: PathBuf,
}

/// AG-51: pass when a restarting supervisor exists and starts the agent after a reboot.
pub fn judge(facts: &Facts) -> Check {
    let mut not_ours = None;
    if let Some(name) = &facts.own_unit {
        match &facts.unit {
            Err(why) => {
                return Check::unknown(format!(
                    "this agent runs in {name}, whose unit file cannot be read: {why}"
                ))
            }
            Ok(None) => {
                return Check::unknown(format!(
                    "this agent runs in {name}, and no unit file for it was found"
                ))
            }
            Ok(Some(unit)) if unit.file.runs_agent() => return judge_unit(unit),
            Ok(Some(_)) => {
                not_ours = Some(format!(
                    "this agent runs in {name}, which is not the agent's unit"
                ))
            }
        }
    }
    let keepalive = match &facts.keepalive {
        Err(why) => {
            return Check::unknown(format!("the cron keepalive cannot be read: {why}"));
        }
        Ok(keepalive) => keepalive,
    };
    let Some(keepalive) = keepalive else {
        if facts.in_container && !facts.systemd && facts.cron_running != Some(true) {
            return Check::unknown(
                "this agent runs in a container with neither systemd nor cron: its supervision is the container's restart policy, which the agent cannot see",
            );
        }
        let how = not_ours.unwrap_or_else(|| {
            if facts.systemd {
                format!(
                    "this agent runs outside any service unit (its cgroup is {:?}): it was started by hand",
                    facts.cgroup
                )
            } else {
                "no service manager runs this agent".to_string()
            }
        });
        return Check::fail(format!(
            "{how}, and no cron keepalive is installed: nothing restarts it if it stops or starts it after a reboot"
        ));
    };
    let missing = keepalive_gaps(keepalive, facts);
    if !missing.is_empty() {
        return Check::fail(format!(
            "the cron keepalive does not supervise this agent: {}",
            missing.join("; ")
        ));
    }
    let boot = if keepalive.at_reboot {
        "at boot and every minute"
    } else {
        "every minute"
    };
    match facts.cron_running {
        Some(true) => Check::pass(format!(
            "the cron keepalive runs capstan-agent-supervise {boot}, and a cron daemon runs"
        )),
        Some(false) => Check::fail(
            "the cron keepalive is installed, and no cron daemon runs to run it: nothing restarts the agent",
        ),
        None => Check::unknown(
            "the cron keepalive is installed; whether a cron daemon runs cannot be seen from here",
        ),
    }
}

/// What keeps a cron keepalive from supervising this agent: no schedule, a supervise script or
/// binary that cannot run, or another agent's state directory.
fn keepalive_gaps(keepalive: &Keepalive, facts: &Facts) -> Vec<String> {
    let mut missing = Vec::new();
    if !keepalive.periodic {
        missing.push("no active line runs capstan-agent-supervise on a schedule".to_string());
    }
    if !keepalive.script_runnable {
        missing.push(format!("/{SUPERVISE_SCRIPT} is missing or not executable"));
    }
    match (&keepalive.binary, keepalive.binary_runnable) {
        (Some(_), true) => {}
        (Some(binary), false) => missing.push(format!(
            "the binary it starts, {binary}, is missing or not executable"
        )),
        (None, _) => missing.push("the supervise script names no BINARY".into()),
    }
    match &keepalive.state_dir {
        Some(dir) if facts.state_dir == Path::new(dir) => {}
        Some(dir) => missing.push(format!(
            "it keeps the agent of {dir} running, not this one (state directory {})",
            facts.state_dir.display()
        )),
        None => missing.push("the supervise script names no STATE_DIR".into()),
    }
    missing
}

fn judge_unit(unit: &UnitFacts) -> Check {
    let name = &unit.name;
    if !unit.file.restarts() {
        return Check::fail(format!(
            "{name} runs this agent with Restart={}: nothing restarts it if it stops",
            unit.file.restart.as_deref().unwrap_or("no")
        ));
    }
    let restart = unit.file.restart.as_deref().unwrap_or("no");
    if unit.masked {
        return Check::fail(format!(
            "{name} restarts this agent (Restart={restart}) but is masked: nothing starts it after a reboot"
        ));
    }
    if unit.enabled_by.is_empty() {
        return Check::fail(format!(
            "{name} restarts this agent (Restart={restart}) but is not enabled: nothing starts it after a reboot"
        ));
    }
    Check::pass(format!(
        "{name} supervises this agent (Restart={restart}) and is enabled ({})",
        unit.enabled_by.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::recipes::Verdict;

    const SHIPPED: &str = include_str!("../../../../../deploy/systemd/capstan-agent.service");

    #[test]
    fn ag_51_the_unit_is_read_from_the_cgroup_of_this_process() {
        assert_eq!(
            cgroup_unit("0::/system.slice/capstan-agent.service\n").as_deref(),
            Some("capstan-agent.service")
        );
        assert_eq!(
            cgroup_unit("12:pids:/\n1:name=systemd:/system.slice/cron.service\n0::/\n").as_deref(),
            Some("cron.service")
        );
        // Started by hand from a login: a session scope, not a unit.
        assert_eq!(
            cgroup_unit("0::/user.slice/user-0.slice/session-4.scope\n"),
            None
        );
        assert_eq!(
            cgroup_unit("0::/user.slice/user-0.slice/user@0.service/app.slice/x.service\n"),
            None
        );
        assert_eq!(cgroup_unit("0::/\n"), None);
    }

    #[test]
    fn ag_51_the_shipped_unit_runs_the_agent_and_restarts_it() {
        let unit = UnitFile::parse(&[SHIPPED]);
        assert!(unit.runs_agent());
        assert!(unit.restarts());
        assert_eq!(unit.restart.as_deref(), Some("always"));
        assert_eq!(unit.wanted_by, ["multi-user.target"]);
        // A drop-in switching restarts off wins; an empty ExecStart resets the list.
        let off = UnitFile::parse(&[SHIPPED, "[Service]\nRestart=no\n"]);
        assert!(!off.restarts());
        let other = UnitFile::parse(&[SHIPPED, "[Service]\nExecStart=\nExecStart=/bin/true\n"]);
        assert!(!other.runs_agent());
        let cron =
            UnitFile::parse(&["[Service]\nExecStart=/usr/sbin/cron -f\nRestart=on-failure\n"]);
        assert!(!cron.runs_agent());
    }

    #[test]
    fn ag_51_the_keepalive_files_are_read() {
        let cron = "# Keeps capstan-agent running\n@reboot root /usr/local/bin/capstan-agent-supervise\n* * * * * root /usr/local/bin/capstan-agent-supervise\n";
        assert_eq!(parse_cron(cron), (true, true));
        assert_eq!(
            parse_cron("#* * * * * root /usr/local/bin/capstan-agent-supervise\n"),
            (false, false)
        );
        let script = include_str!("../../../../../deploy/agent/capstan-agent-supervise");
        assert_eq!(
            script_value(script, "STATE_DIR").as_deref(),
            Some("/etc/capstan-agent")
        );
        assert_eq!(
            script_value(script, "BINARY").as_deref(),
            Some("/usr/local/bin/capstan-agent")
        );
    }

    fn unit(restart: &str, enabled_by: &[&str]) -> UnitFacts {
        UnitFacts {
            name: AGENT_UNIT.into(),
            file: UnitFile::parse(&[&SHIPPED.replace("Restart=always", restart)]),
            enabled_by: enabled_by.iter().map(|s| s.to_string()).collect(),
            masked: false,
        }
    }

    fn under_unit(unit: UnitFacts) -> Facts {
        Facts {
            in_container: false,
            systemd: true,
            cgroup: format!("/system.slice/{}", unit.name),
            own_unit: Some(unit.name.clone()),
            unit: Ok(Some(unit)),
            keepalive: Ok(None),
            cron_running: Some(true),
            state_dir: "/etc/capstan-agent".into(),
        }
    }

    fn keepalive() -> Keepalive {
        Keepalive {
            periodic: true,
            at_reboot: true,
            script_runnable: true,
            state_dir: Some("/etc/capstan-agent".into()),
            binary: Some("/usr/local/bin/capstan-agent".into()),
            binary_runnable: true,
        }
    }

    fn by_hand(systemd: bool) -> Facts {
        Facts {
            in_container: false,
            systemd,
            cgroup: "/user.slice/user-0.slice/session-4.scope".into(),
            own_unit: None,
            unit: Ok(None),
            keepalive: Ok(None),
            cron_running: Some(true),
            state_dir: "/etc/capstan-agent".into(),
        }
    }

    #[test]
    fn ag_51_a_restarting_enabled_unit_passes_and_a_restarting_unit_not_enabled_fails() {
        let check = judge(&under_unit(unit("Restart=always", &["multi-user.target"])));
        assert_eq!(check.verdict, Verdict::Pass, "{}", check.detail);
        assert!(check.detail.contains("multi-user.target"));

        let check = judge(&under_unit(unit("Restart=always", &[])));
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(check.detail.contains("not enabled"), "{}", check.detail);

        let check = judge(&under_unit(unit("Restart=no", &["multi-user.target"])));
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(check.detail.contains("Restart=no"), "{}", check.detail);

        let mut masked = unit("Restart=on-failure", &["multi-user.target"]);
        masked.masked = true;
        assert_eq!(judge(&under_unit(masked)).verdict, Verdict::Fail);

        let mut unreadable = under_unit(unit("Restart=always", &[]));
        unreadable.unit = Err("permission denied".into());
        assert_eq!(judge(&unreadable).verdict, Verdict::Unknown);
    }

    #[test]
    fn ag_51_an_agent_started_by_hand_fails_and_the_keepalive_passes_when_cron_runs() {
        let check = judge(&by_hand(true));
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(check.detail.contains("started by hand"), "{}", check.detail);

        let mut kept = by_hand(false);
        kept.keepalive = Ok(Some(keepalive()));
        assert_eq!(judge(&kept).verdict, Verdict::Pass);
        kept.cron_running = Some(false);
        assert_eq!(judge(&kept).verdict, Verdict::Fail);
        kept.cron_running = None;
        assert_eq!(judge(&kept).verdict, Verdict::Unknown);

        // A keepalive for another state directory does not supervise this agent.
        let mut elsewhere = by_hand(false);
        elsewhere.state_dir = "/tmp/other".into();
        elsewhere.keepalive = Ok(Some(keepalive()));
        let check = judge(&elsewhere);
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(check.detail.contains("not this one"), "{}", check.detail);

        let mut commented = by_hand(false);
        commented.keepalive = Ok(Some(Keepalive {
            periodic: false,
            ..keepalive()
        }));
        assert_eq!(judge(&commented).verdict, Verdict::Fail);

        // Cron's own unit is not the agent's supervisor; the keepalive it runs is.
        let mut from_cron = under_unit(UnitFacts {
            name: "cron.service".into(),
            file: UnitFile::parse(&[
                "[Service]\nExecStart=/usr/sbin/cron -f\nRestart=on-failure\n",
            ]),
            enabled_by: vec!["multi-user.target".into()],
            masked: false,
        });
        assert_eq!(judge(&from_cron).verdict, Verdict::Fail);
        from_cron.keepalive = Ok(Some(keepalive()));
        assert_eq!(judge(&from_cron).verdict, Verdict::Pass);
    }

    #[test]
    fn ag_51_a_container_without_systemd_or_cron_cannot_tell() {
        let mut contained = by_hand(false);
        contained.in_container = true;
        contained.cron_running = Some(false);
        assert_eq!(judge(&contained).verdict, Verdict::Unknown);
        // With cron in the container the keepalive is what supervises the agent.
        contained.cron_running = Some(true);
        assert_eq!(judge(&contained).verdict, Verdict::Fail);
    }
}
