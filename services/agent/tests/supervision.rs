//! The supervision `deploy/agent/install.sh` installs (the systemd unit, the cron keepalive),
//! installed under a prefix and run as the machine would run it, against a release on trial
//! that answers `--version` but dies at every start (AG-29, AG-30): the start guard the
//! supervision runs puts the previous agent back after the allowed starts.

use capstan_agent::{
    domain::{
        confinement::{Grants, Writes},
        update::STARTS_WITHOUT_RECORD_ALLOWED,
    },
    words::supervision::{CRON_TEXT, SUPERVISE_TEXT, UNIT_TEXT},
};
use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

const AGENT: &str = env!("CARGO_BIN_EXE_capstan-agent");
const INSTALLER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/agent/install.sh");
/// The version the bad release says it is.
const BAD_VERSION: &str = "99.0.0";

/// A staging root with the agent installed by `install.sh --prefix`.
struct Installed {
    root: tempfile::TempDir,
}

impl Installed {
    fn with(supervision: &str) -> Installed {
        let root = tempfile::tempdir().unwrap();
        let output = Command::new("sh")
            .arg(INSTALLER)
            .arg(format!("--binary={AGENT}"))
            .arg(format!("--prefix={}", root.path().display()))
            .arg(format!("--supervision={supervision}"))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "install.sh: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Installed { root }
    }

    fn path(&self, inside: &str) -> PathBuf {
        self.root.path().join(inside.trim_start_matches('/'))
    }

    fn binary(&self) -> PathBuf {
        self.path("/usr/local/bin/capstan-agent")
    }

    fn beside(&self, suffix: &str) -> PathBuf {
        self.path(&format!("/usr/local/bin/capstan-agent{suffix}"))
    }

    /// What the agent's own update leaves after installing a release: the running binary kept
    /// as `.bak`, the new one in place, its trial recorded with no start yet. The new binary
    /// answers `--version` as the release says and exits 1 on anything else.
    fn swap_in_a_release_that_dies_at_start(&self) {
        std::fs::copy(self.binary(), self.beside(".bak")).unwrap();
        let staged = self.beside(".new");
        std::fs::write(
            &staged,
            format!(
                "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'capstan-agent {BAD_VERSION}'; exit 0; fi\necho 'cannot start' >&2\nexit 1\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(
            self.beside(".pending"),
            format!(r#"{{"version":"{BAD_VERSION}","starts":0}}"#),
        )
        .unwrap();
        std::fs::rename(&staged, self.binary()).unwrap();
    }

    fn previous_agent_is_back(&self) -> bool {
        std::fs::read(self.binary()).unwrap() == std::fs::read(AGENT).unwrap()
    }

    fn assert_rolled_back(&self) {
        assert!(self.previous_agent_is_back());
        assert!(!self.beside(".bak").exists(), "the .bak was renamed back");
        assert!(!self.beside(".pending").exists(), "the trial is over");
        assert_eq!(
            std::fs::read_to_string(self.beside(".rejected"))
                .unwrap()
                .trim(),
            BAD_VERSION
        );
    }

    /// `capstan-agent status` of the installed agent.
    fn status(&self) -> String {
        let output = Command::new(self.binary())
            .arg(format!(
                "--state-dir={}",
                self.path("/etc/capstan-agent").display()
            ))
            .arg("status")
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

/// Waits (polling, bounded) until `condition` holds.
fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A unit file's `[Service]` values of `name`.
fn unit_values(unit: &str, name: &str) -> Vec<String> {
    let service = unit.split_once("[Service]").unwrap().1;
    let service = service.split("\n[").next().unwrap_or_default();
    service
        .lines()
        .filter_map(|line| line.trim().split_once('='))
        .filter(|(key, _)| *key == name)
        .map(|(_, value)| value.trim().to_string())
        .collect()
}

/// Runs a unit's command line as systemd would for this one (a program and its arguments,
/// single-quoted as the shell quotes them): through `sh -c`. Returns whether it succeeded.
fn run_unit_command(command: &str, root: &Path) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(root)
        .status()
        .unwrap()
        .success()
}

/// Issue 27: a directory the unit lets the agent write but that is absent cannot be written
/// under `ProtectSystem=strict` (the agent cannot make it in a read-only parent): install.sh
/// makes every one but the sites' home, which is the site's (a siteless machine's support
/// bundle lands in /opt/capstan-agent).
#[test]
fn the_installer_makes_every_directory_the_unit_lets_the_agent_write_but_the_sites_home() {
    let installed = Installed::with("systemd");
    let unit = std::fs::read_to_string(installed.path("/etc/systemd/system/capstan-agent.service"))
        .expect("install.sh installs the unit");
    let granted = Grants::of_unit(&unit).paths;
    let site_home = installed.path(Writes::SiteTree.path());
    let absent: Vec<&String> = granted
        .iter()
        .filter(|path| {
            let path = Path::new(path.as_str());
            let path = if path.starts_with(installed.root.path()) {
                path.to_path_buf()
            } else {
                installed.path(&path.display().to_string())
            };
            path != site_home && !path.is_dir()
        })
        .collect();
    assert!(
        absent.is_empty(),
        "install.sh leaves absent: {absent:?} (of {granted:?})"
    );
}

#[test]
fn the_installed_systemd_unit_rolls_back_a_release_that_dies_at_every_start() {
    let installed = Installed::with("systemd");
    let unit = std::fs::read_to_string(installed.path("/etc/systemd/system/capstan-agent.service"))
        .expect("install.sh installs the unit");
    let guard = unit_values(&unit, "ExecStartPre");
    assert_eq!(guard.len(), 1, "one start guard: {guard:?}");
    let guard = &guard[0];
    assert!(guard.contains(" start-guard"), "{guard}");
    // "-": a guard that cannot run never keeps the agent down.
    let guard = guard.strip_prefix('-').expect("a failed guard is ignored");
    let start = unit_values(&unit, "ExecStart");
    let start = &start[0];
    assert!(
        start.starts_with(&installed.binary().display().to_string()),
        "the installed unit names the installed binary: {start}"
    );

    installed.swap_in_a_release_that_dies_at_start();
    // systemd's Restart=always: the guard, then the start, again and again.
    let mut starts = 0;
    loop {
        run_unit_command(guard, installed.root.path());
        if installed.previous_agent_is_back() {
            break;
        }
        assert!(
            starts <= STARTS_WITHOUT_RECORD_ALLOWED,
            "still not rolled back after {starts} starts"
        );
        assert!(
            !run_unit_command(start, installed.root.path()),
            "the bad release dies"
        );
        starts += 1;
    }
    assert_eq!(starts, STARTS_WITHOUT_RECORD_ALLOWED);
    installed.assert_rolled_back();
}

#[test]
fn the_installed_cron_keepalive_rolls_back_a_release_that_dies_at_every_start() {
    let installed = Installed::with("cron");
    let cron = std::fs::read_to_string(installed.path("/etc/cron.d/capstan-agent"))
        .expect("install.sh installs the cron file");
    let keepalive = cron
        .lines()
        .find(|line| line.starts_with("* * * * * root "))
        .expect("a line running the keepalive every minute")
        .trim_start_matches("* * * * * root ")
        .to_string();
    assert_eq!(
        Path::new(&keepalive),
        installed.path("/usr/local/bin/capstan-agent-supervise")
    );

    installed.swap_in_a_release_that_dies_at_start();
    // cron, once a minute (here, one run after another).
    let mut runs = 0;
    while !installed.previous_agent_is_back() {
        assert!(
            runs <= STARTS_WITHOUT_RECORD_ALLOWED,
            "still not rolled back after {runs} keepalive runs"
        );
        let status = Command::new(&keepalive).status().unwrap();
        assert!(status.success());
        runs += 1;
    }
    assert_eq!(runs, STARTS_WITHOUT_RECORD_ALLOWED + 1);
    installed.assert_rolled_back();
    let log = std::fs::read_to_string(installed.path("/var/log/capstan-agent.log")).unwrap();
    assert!(
        log.contains(&format!(
            "started {STARTS_WITHOUT_RECORD_ALLOWED} times on trial without once recording its start"
        )),
        "{log}"
    );
    // The run that rolled back started the previous agent: it runs; stop it.
    let mut pid = None;
    wait_until("the previous agent to run", || {
        let status = installed.status();
        pid = status
            .lines()
            .find_map(|line| line.strip_prefix("agent: running (pid "))
            .and_then(|rest| rest.split(')').next())
            .map(str::to_string);
        pid.is_some()
    });
    let pid = pid.unwrap();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    wait_until("the previous agent to stop", || {
        installed.status().contains("agent: not running")
    });
}

// AG-51: what `agent_converge` writes for an agent outside its supervision is what install.sh
// installs (the compiled copies, at the prefix's paths).
#[test]
fn the_supervision_install_sh_writes_is_the_one_compiled_into_the_agent() {
    for (supervision, files) in [
        (
            "systemd",
            vec![("/etc/systemd/system/capstan-agent.service", UNIT_TEXT)],
        ),
        (
            "cron",
            vec![
                ("/etc/cron.d/capstan-agent", CRON_TEXT),
                ("/usr/local/bin/capstan-agent-supervise", SUPERVISE_TEXT),
            ],
        ),
    ] {
        let installed = Installed::with(supervision);
        let prefix = installed.root.path().display().to_string();
        for (path, compiled) in files {
            let at_prefix = compiled
                .replace("/usr/local/bin", &format!("{prefix}/usr/local/bin"))
                .replace("/etc/capstan-agent", &format!("{prefix}/etc/capstan-agent"))
                .replace(
                    "/var/log/capstan-agent",
                    &format!("{prefix}/var/log/capstan-agent"),
                );
            assert_eq!(
                std::fs::read_to_string(installed.path(path)).unwrap(),
                at_prefix,
                "{path}"
            );
        }
    }
}
