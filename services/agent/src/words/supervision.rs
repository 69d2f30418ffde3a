//! The agent's own supervision (AG-51): the facts `agent_supervision` judges, read from files,
//! and the word `agent_converge`, its repair.
//!
//! `agent_converge` is this project's stand-in for the spec's install_agent.sh: it writes the
//! supervision `deploy/agent/install.sh` would and, under the job marker the attempt holds,
//! restarts nothing. Where systemd runs it writes the shipped unit
//! (`deploy/systemd/capstan-agent.service`, compiled in) when none that restarts the agent is
//! there, asks systemd to reload its units, and enables the unit; it never starts, stops or
//! restarts one. Elsewhere it writes the cron keepalive (`/etc/cron.d/capstan-agent` and
//! `capstan-agent-supervise`, compiled in) and runs neither. An agent a person started by hand
//! on a systemd box stays unsupervised until its next start (the spec: three attempts, then a
//! case, and a person restarts it). Under the shipped unit the file system is read-only to the
//! agent, so only the enabling (systemd does it over its socket) can succeed there; a write it
//! cannot make fails the attempt with the reason.
//!
//! Every path is taken under a root (`/` in the agent) so the same code runs in tests on real
//! files in a temporary directory.

use serde_json::json;
use std::{
    fs::{self, OpenOptions},
    io::{ErrorKind, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use super::{find_program, run_program, systemd_running, Failed, FileError, Finished, Redaction};
use crate::{
    config::Config,
    domain::recipes::supervision::{
        self, cgroup_unit, parse_cron, script_value, Facts, Keepalive, UnitFacts, UnitFile,
        Unreadable, AGENT_UNIT, CRON_FILE, ENABLE_DIRS, SUPERVISE_SCRIPT, UNIT_DIRS,
    },
};

/// The unit `deploy/agent/install.sh` installs.
pub const UNIT_TEXT: &str = include_str!("../../../../deploy/systemd/capstan-agent.service");
/// The script the cron keepalive runs.
pub const SUPERVISE_TEXT: &str = include_str!("../../../../deploy/agent/capstan-agent-supervise");
/// The cron keepalive, as install.sh writes it (`tests/supervision.rs` pins the two together).
pub const CRON_TEXT: &str =
    "# Keeps capstan-agent running where systemd does not (installed by install.sh).
@reboot root /usr/local/bin/capstan-agent-supervise
* * * * * root /usr/local/bin/capstan-agent-supervise
";

/// Why the agent's supervision could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SupervisionError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{} has no directory", path.display())]
    NoDirectory { path: PathBuf },
    #[error("{} does not exist: cron is not installed here, so a keepalive would never run", dir.display())]
    NoCron { dir: PathBuf },
}

fn under(root: &Path, relative: &str) -> PathBuf {
    root.join(relative.trim_start_matches('/'))
}

fn executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// The unit `name` as its files under `root` say: `Ok(None)` when no file is found.
pub fn unit_facts(root: &Path, name: &str) -> Result<Option<UnitFacts>, SupervisionError> {
    let mut main = None;
    let mut masked = false;
    for dir in UNIT_DIRS {
        let path = under(root, dir).join(name);
        match fs::symlink_metadata(&path) {
            Err(error) if error.kind() == ErrorKind::NotFound => continue,
            Err(error) => return Err(FileError::at(&path)(error).into()),
            Ok(meta) => {
                if meta.file_type().is_symlink()
                    && fs::read_link(&path).is_ok_and(|target| target == Path::new("/dev/null"))
                {
                    masked = true;
                    break;
                }
                main = Some(path);
                break;
            }
        }
    }
    let mut texts = Vec::new();
    match &main {
        Some(path) => texts.push(fs::read_to_string(path).map_err(FileError::at(path))?),
        None if masked => {}
        None => return Ok(None),
    }
    // Drop-ins: by file name across the directories, the most specific directory's copy of
    // a name winning.
    let mut dropins: Vec<(String, PathBuf)> = Vec::new();
    for dir in UNIT_DIRS {
        let Ok(entries) = fs::read_dir(under(root, dir).join(format!("{name}.d"))) else {
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if file.ends_with(".conf") && !dropins.iter().any(|(seen, _)| *seen == file) {
                dropins.push((file, entry.path()));
            }
        }
    }
    dropins.sort();
    for (_, path) in dropins {
        texts.push(fs::read_to_string(&path).map_err(FileError::at(&path))?);
    }
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut enabled_by = Vec::new();
    for dir in ENABLE_DIRS {
        let Ok(entries) = fs::read_dir(under(root, dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let target = entry.file_name().to_string_lossy().into_owned();
            let Some(target) = target
                .strip_suffix(".wants")
                .or_else(|| target.strip_suffix(".requires"))
            else {
                continue;
            };
            if fs::symlink_metadata(entry.path().join(name)).is_ok()
                && !enabled_by.iter().any(|seen| seen == target)
            {
                enabled_by.push(target.to_string());
            }
        }
    }
    enabled_by.sort();
    Ok(Some(UnitFacts {
        name: name.to_string(),
        file: UnitFile::parse(&texts),
        enabled_by,
        masked,
    }))
}

/// The cron keepalive under `root`: `Ok(None)` when its cron file is absent.
pub fn keepalive(root: &Path) -> Result<Option<Keepalive>, SupervisionError> {
    let cron = under(root, CRON_FILE);
    let text = match fs::read_to_string(&cron) {
        Ok(text) => text,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(FileError::at(&cron)(error).into()),
    };
    let (periodic, at_reboot) = parse_cron(&text);
    let script = under(root, SUPERVISE_SCRIPT);
    let script_text = fs::read_to_string(&script).unwrap_or_default();
    let binary = script_value(&script_text, "BINARY");
    Ok(Some(Keepalive {
        periodic,
        at_reboot,
        script_runnable: executable(&script),
        state_dir: script_value(&script_text, "STATE_DIR"),
        binary_runnable: binary
            .as_deref()
            .is_some_and(|binary| executable(&under(root, binary))),
        binary,
    }))
}

/// Whether a cron daemon runs, from the process list under `proc_dir`: `None` when no other
/// process can be seen (a confined agent's `/proc` shows only its own).
pub fn cron_running(proc_dir: &Path) -> Option<bool> {
    let own = std::process::id().to_string();
    let mut others = 0;
    for entry in fs::read_dir(proc_dir).ok()?.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if pid == own || !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        others += 1;
        let comm = fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if matches!(comm.trim(), "cron" | "crond") {
            return Some(true);
        }
    }
    (others > 0).then_some(false)
}

/// Everything `agent_supervision` judges, under `root` and `proc_dir`.
pub fn facts(
    root: &Path,
    proc_dir: &Path,
    state_dir: &Path,
    in_container: bool,
    systemd: bool,
) -> Facts {
    let cgroup_text = fs::read_to_string(proc_dir.join("self/cgroup"));
    let (cgroup, own_unit) = match &cgroup_text {
        Ok(text) => {
            let path = text
                .lines()
                .find(|line| line.starts_with("0::") || line.contains(":name=systemd:"))
                .and_then(|line| line.splitn(3, ':').nth(2))
                .unwrap_or_default()
                .to_string();
            (path, cgroup_unit(text))
        }
        Err(error) => (format!("unreadable: {error}"), None),
    };
    let unit = match &own_unit {
        Some(name) => unit_facts(root, name).map_err(|error| Unreadable(error.to_string())),
        None => Ok(None),
    };
    Facts {
        in_container,
        systemd,
        cgroup,
        own_unit,
        unit,
        keepalive: keepalive(root).map_err(|error| Unreadable(error.to_string())),
        cron_running: cron_running(proc_dir),
        state_dir: fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf()),
    }
}

/// Writes `text` to `path` whole (a temporary file beside it, then a rename) unless it already
/// holds exactly that; whether it wrote.
fn write_whole(path: &Path, text: &str, mode: u32) -> Result<bool, SupervisionError> {
    let fail = FileError::at(path);
    if fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file())
        && fs::read_to_string(path).is_ok_and(|old| old == text)
        && fs::metadata(path).is_ok_and(|meta| meta.permissions().mode() & 0o7777 == mode)
    {
        return Ok(false);
    }
    let dir = path.parent().ok_or_else(|| SupervisionError::NoDirectory {
        path: path.to_path_buf(),
    })?;
    let temporary = dir.join(format!(
        ".{}.{:016x}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        rand::random::<u64>()
    ));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&temporary)?;
        file.write_all(text.as_bytes())?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if let Err(error) = written {
        let _ = fs::remove_file(&temporary);
        return Err(fail(error).into());
    }
    Ok(true)
}

/// The agent's unit under `root`, written when there is none that runs and restarts the
/// agent (a working unit someone adjusted is left as they made it); whether it wrote.
pub fn write_unit(root: &Path) -> Result<bool, SupervisionError> {
    let path = under(root, "etc/systemd/system").join(AGENT_UNIT);
    if let Ok(Some(unit)) = unit_facts(root, AGENT_UNIT) {
        if !unit.masked && unit.file.runs_agent() && unit.file.restarts() {
            return Ok(false);
        }
    }
    write_whole(&path, UNIT_TEXT, 0o644)
}

/// The cron keepalive under `root`: the supervise script and the cron file; what it wrote.
/// Refused where there is no cron.d directory (cron is not installed: nothing would run it).
pub fn write_keepalive(root: &Path) -> Result<Vec<String>, SupervisionError> {
    let cron = under(root, CRON_FILE);
    let cron_dir = cron.parent().expect("the cron file has a directory");
    if !cron_dir.is_dir() {
        return Err(SupervisionError::NoCron {
            dir: cron_dir.to_path_buf(),
        });
    }
    let script = under(root, SUPERVISE_SCRIPT);
    if let Some(dir) = script.parent() {
        fs::create_dir_all(dir).map_err(FileError::at(dir))?;
    }
    let mut written = Vec::new();
    // The script first: a cron line never runs a script that is not there yet.
    if write_whole(&script, SUPERVISE_TEXT, 0o755)? {
        written.push(format!("/{SUPERVISE_SCRIPT}"));
    }
    if write_whole(&cron, CRON_TEXT, 0o644)? {
        written.push(format!("/{CRON_FILE}"));
    }
    Ok(written)
}

/// `agent_converge`: writes and enables the agent's supervision; restarts nothing.
pub async fn agent_converge(_config: &Config) -> Result<Finished, Failed> {
    let root = Path::new("/");
    if !systemd_running() {
        let written = write_keepalive(root).map_err(Failed::new)?;
        return Ok(done(
            json!({"supervision": "cron keepalive", "written": written}),
        ));
    }
    let systemctl = find_program("systemctl")
        .ok_or_else(|| Failed::new("systemd runs and systemctl is not installed"))?;
    let wrote = write_unit(root).map_err(Failed::new)?;
    if wrote {
        let ran = run_program(&systemctl, &["daemon-reload"])
            .await
            .map_err(Failed::new)?;
        if !ran.success {
            return Err(Failed::new(format!(
                "systemctl daemon-reload failed: {}",
                ran.stderr.trim()
            )));
        }
    }
    let ran = run_program(&systemctl, &["enable", AGENT_UNIT])
        .await
        .map_err(Failed::new)?;
    if !ran.success {
        return Err(Failed::new(format!(
            "systemctl enable {AGENT_UNIT} failed: {}",
            ran.stderr.trim()
        )));
    }
    let written: Vec<String> = if wrote {
        vec![format!("/etc/systemd/system/{AGENT_UNIT}")]
    } else {
        Vec::new()
    };
    Ok(done(
        json!({"supervision": "systemd", "written": written, "enabled": AGENT_UNIT}),
    ))
}

fn done(result: serde_json::Value) -> Finished {
    let written = result["written"]
        .as_array()
        .map(|files| {
            files
                .iter()
                .filter_map(|file| file.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let mut output = format!(
        "supervision: {}; written: {}",
        result["supervision"].as_str().unwrap_or_default(),
        if written.is_empty() {
            "nothing (already in place)"
        } else {
            &written
        }
    );
    if let Some(unit) = result["enabled"].as_str() {
        output.push_str(&format!("; enabled {unit}"));
    }
    output.push_str("; nothing was started or restarted");
    Finished {
        output,
        result,
        redaction: Redaction::Text,
    }
}

/// The facts on this machine (AG-51).
pub fn facts_here(state_dir: &Path, in_container: bool) -> supervision::Facts {
    facts(
        Path::new("/"),
        Path::new("/proc"),
        state_dir,
        in_container,
        systemd_running(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::recipes::{supervision::judge, Verdict};
    use std::os::unix::fs::symlink;

    /// A root and a process directory in a temporary directory: this process runs in `cgroup`,
    /// and `comms` are the other processes.
    fn scratch(cgroup: &str, comms: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let proc_dir = dir.path().join("proc");
        fs::create_dir_all(proc_dir.join("self")).unwrap();
        fs::write(proc_dir.join("self/cgroup"), cgroup).unwrap();
        for (n, comm) in comms.iter().enumerate() {
            let pid = proc_dir.join(format!("{}", 100_000 + n));
            fs::create_dir_all(&pid).unwrap();
            fs::write(pid.join("comm"), format!("{comm}\n")).unwrap();
        }
        fs::create_dir_all(root.join("etc/systemd/system")).unwrap();
        (dir, root, proc_dir)
    }

    fn verdict(root: &Path, proc_dir: &Path, systemd: bool) -> crate::domain::recipes::Check {
        judge(&facts(
            root,
            proc_dir,
            Path::new("/etc/capstan-agent"),
            false,
            systemd,
        ))
    }

    #[test]
    fn ag_51_the_installed_unit_passes_once_enabled_and_fails_when_not() {
        let (_dir, root, proc_dir) =
            scratch("0::/system.slice/capstan-agent.service\n", &["systemd"]);
        fs::write(root.join("etc/systemd/system").join(AGENT_UNIT), UNIT_TEXT).unwrap();
        let check = verdict(&root, &proc_dir, true);
        assert_eq!(check.verdict, Verdict::Fail, "{}", check.detail);
        assert!(check.detail.contains("not enabled"), "{}", check.detail);
        // What `systemctl enable` makes: the target's wants link.
        let wants = root.join("etc/systemd/system/multi-user.target.wants");
        fs::create_dir_all(&wants).unwrap();
        symlink(
            "/etc/systemd/system/capstan-agent.service",
            wants.join(AGENT_UNIT),
        )
        .unwrap();
        let check = verdict(&root, &proc_dir, true);
        assert_eq!(check.verdict, Verdict::Pass, "{}", check.detail);
        // A drop-in that switches restarts off fails it again.
        let dropin = root.join("etc/systemd/system/capstan-agent.service.d");
        fs::create_dir_all(&dropin).unwrap();
        fs::write(dropin.join("override.conf"), "[Service]\nRestart=no\n").unwrap();
        let check = verdict(&root, &proc_dir, true);
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(check.detail.contains("Restart=no"), "{}", check.detail);
        // Masked: the unit file is a link to /dev/null.
        fs::remove_dir_all(&dropin).unwrap();
        fs::remove_file(root.join("etc/systemd/system").join(AGENT_UNIT)).unwrap();
        fs::create_dir_all(root.join("lib/systemd/system")).unwrap();
        fs::write(root.join("lib/systemd/system").join(AGENT_UNIT), UNIT_TEXT).unwrap();
        symlink(
            "/dev/null",
            root.join("etc/systemd/system").join(AGENT_UNIT),
        )
        .unwrap();
        assert_eq!(verdict(&root, &proc_dir, true).verdict, Verdict::Fail);
    }

    #[test]
    fn ag_51_an_agent_started_by_hand_on_systemd_stays_failing_after_the_unit_is_written() {
        let (_dir, root, proc_dir) =
            scratch("0::/user.slice/user-0.slice/session-3.scope\n", &["sshd"]);
        let check = verdict(&root, &proc_dir, true);
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(check.detail.contains("started by hand"), "{}", check.detail);
        // The repair's write: the unit appears, and this process is still outside it.
        assert!(write_unit(&root).unwrap());
        assert_eq!(
            fs::read_to_string(root.join("etc/systemd/system").join(AGENT_UNIT)).unwrap(),
            UNIT_TEXT
        );
        assert!(!write_unit(&root).unwrap(), "a working unit is left alone");
        assert_eq!(verdict(&root, &proc_dir, true).verdict, Verdict::Fail);
        // A unit that does not restart the agent is replaced.
        fs::write(
            root.join("etc/systemd/system").join(AGENT_UNIT),
            UNIT_TEXT.replace("Restart=always", "Restart=no"),
        )
        .unwrap();
        assert!(write_unit(&root).unwrap());
    }

    #[test]
    fn ag_51_the_keepalive_the_repair_writes_passes_where_cron_runs() {
        let (_dir, root, proc_dir) = scratch("0::/\n", &["cron", "sshd"]);
        fs::create_dir_all(root.join("etc/cron.d")).unwrap();
        let check = verdict(&root, &proc_dir, false);
        assert_eq!(check.verdict, Verdict::Fail, "{}", check.detail);
        let written = write_keepalive(&root).unwrap();
        assert_eq!(
            written,
            [
                "/usr/local/bin/capstan-agent-supervise",
                "/etc/cron.d/capstan-agent"
            ]
        );
        let mode = |path: &str| fs::metadata(root.join(path)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("usr/local/bin/capstan-agent-supervise"), 0o755);
        assert_eq!(mode("etc/cron.d/capstan-agent"), 0o644);
        assert!(write_keepalive(&root).unwrap().is_empty(), "written once");
        // The keepalive starts /usr/local/bin/capstan-agent, which is not installed here yet.
        let check = verdict(&root, &proc_dir, false);
        assert_eq!(check.verdict, Verdict::Fail);
        assert!(
            check.detail.contains("missing or not executable"),
            "{}",
            check.detail
        );
        fs::write(root.join("usr/local/bin/capstan-agent"), b"#!/bin/sh\n").unwrap();
        fs::set_permissions(
            root.join("usr/local/bin/capstan-agent"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        let check = verdict(&root, &proc_dir, false);
        assert_eq!(check.verdict, Verdict::Pass, "{}", check.detail);
        // Without a cron daemon nothing runs it.
        let (_dir2, _, no_cron) = scratch("0::/\n", &["sshd"]);
        assert_eq!(verdict(&root, &no_cron, false).verdict, Verdict::Fail);
    }

    #[test]
    fn ag_51_no_keepalive_is_written_where_cron_is_not_installed() {
        let (_dir, root, _proc) = scratch("0::/\n", &[]);
        let refused = write_keepalive(&root).unwrap_err().to_string();
        assert!(refused.contains("cron is not installed"), "{refused}");
        assert!(!root.join("usr/local/bin/capstan-agent-supervise").exists());
    }

    #[test]
    fn a_hidden_process_list_is_unknown_not_absent() {
        let (_dir, _root, proc_dir) = scratch("0::/\n", &[]);
        assert_eq!(cron_running(&proc_dir), None);
    }
}
