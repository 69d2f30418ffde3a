//! The trial of a new version (AG-29, AG-30): what a start decides, the start guard the
//! supervisor runs before every start, and the `--version` probe both use.

use std::{fs, path::Path};

use tracing::{info, warn};

use super::files::Paths;
use crate::domain::{
    update::{
        self, check_probe, on_start, GuardRollBack, Guarded, Pending, ProbeError, Start,
        PROBE_TIMEOUT,
    },
    AGENT_VERSION,
};

/// Runs `binary --version` and returns whether it succeeded and what it printed.
pub async fn probe(binary: &Path) -> Result<(bool, String), ProbeError> {
    let run = tokio::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(PROBE_TIMEOUT, run).await {
        Err(_) => Err(ProbeError::Timeout(PROBE_TIMEOUT)),
        Ok(Err(error)) => Err(ProbeError::NotRun(error)),
        Ok(Ok(output)) => Ok((
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )),
    }
}

/// What a start decided (AG-29).
pub enum AtStart {
    /// Run; `Some` when this version is on trial.
    Run(Option<Pending>),
    /// The previous start of this version died on trial: the `.bak` is back in place; exit so
    /// the supervisor starts it.
    RolledBack(String),
}

/// AG-29 at start.
pub fn at_start(paths: &Paths) -> anyhow::Result<AtStart> {
    let pending = paths.read_pending();
    match on_start(pending.as_ref(), AGENT_VERSION, paths.bak.exists()) {
        Start::Run { clear_pending } => {
            if clear_pending {
                let _ = fs::remove_file(&paths.pending);
            }
            Ok(AtStart::Run(None))
        }
        Start::Trial(counted) => {
            paths.write_pending(&counted).map_err(|error| {
                anyhow::anyhow!(
                    "cannot record the trial in {}: {error}",
                    paths.pending.display()
                )
            })?;
            info!(version = %counted.version, "=== Self-update === running on trial");
            Ok(AtStart::Run(Some(counted)))
        }
        Start::RollBack { version } => {
            paths.roll_back(&version).map_err(|error| {
                anyhow::anyhow!("cannot put {} back: {error}", paths.bak.display())
            })?;
            warn!(%version, "=== Self-update === the previous start of this version died during its trial: the previous agent is back and this version is rejected");
            Ok(AtStart::RolledBack(version))
        }
    }
}

/// AG-30: `capstan-agent start-guard`, run by the supervisor before every start (the unit's
/// `ExecStartPre`, the cron keepalive). It counts the start it hands over in `.pending`, so a
/// binary that dies before it can record its own start is still rolled back (AG-29). Returns
/// what it did.
pub async fn start_guard(paths: &Paths) -> anyhow::Result<String> {
    let Some(pending) = paths.read_pending() else {
        return Ok("no swap on trial".into());
    };
    let has_bak = paths.bak.exists();
    let answer = probe(&paths.binary).await;
    let probe_ok = check_probe(answer, &pending.version).is_ok();
    match update::guard(Some(&pending), has_bak, probe_ok) {
        Guarded::Start => Ok(format!(
            "{} is on trial with no {} to go back to; starting it",
            pending.version,
            paths.bak.display()
        )),
        Guarded::HandOver(counted) => {
            paths.write_pending(&counted).map_err(|error| {
                anyhow::anyhow!(
                    "cannot count the start in {}: {error}",
                    paths.pending.display()
                )
            })?;
            Ok(format!(
                "{} on trial answers --version; start {} of it handed over ({} recorded by it)",
                counted.version, counted.handed_over, counted.starts
            ))
        }
        Guarded::RollBack { version, why } => {
            paths.roll_back(&version).map_err(|error| {
                anyhow::anyhow!("cannot put {} back: {error}", paths.bak.display())
            })?;
            let what = match why {
                GuardRollBack::NoAnswer => format!(
                    "{} cannot answer --version as {version}",
                    paths.binary.display()
                ),
                GuardRollBack::NeverStarted { handed_over } => format!(
                    "{} was started {handed_over} times on trial without once recording its start",
                    paths.binary.display()
                ),
            };
            warn!(%version, reason = %what, "=== Self-update === the start guard rolled the version back");
            Ok(format!(
                "{what}: the previous binary is back and {version} is rejected"
            ))
        }
    }
}
