//! The agent keeps itself current (AG-24..AG-31): between jobs it asks the plane what release
//! is on offer, checks it by `domain::update`'s rules, fetches and checks the binary, runs it
//! with `--version`, keeps the running binary as `.bak`, renames the new one into place and
//! exits for its supervisor. The new version is on trial (`.pending`) until it has run for the
//! trial; a start that finds the previous start of the same version still on trial puts the
//! `.bak` back, records the version in `.rejected` and exits. `capstan-agent start-guard`
//! (systemd's `ExecStartPre`) restores the `.bak` when the binary on trial cannot even answer
//! `--version`.
//!
//! Beside the binary: `.bak`, `.pending`, `.rejected` and `.new` (a download being checked).
//! In the state directory: `release.json` (the highest sequence accepted) and `release_keys`
//! (held keys, honoured only when root-owned and writable by nobody else).

use std::{
    fs::{self, OpenOptions},
    io::Write as _,
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use capstan_signing::{
    release::{sha256_hex, SignedRelease, MAX_METADATA_BYTES},
    statement::MAX_STATEMENT_BYTES,
    NodeKey, PublicKey,
};
use serde_json::json;
use tracing::{info, warn};

use crate::{
    config::Config,
    domain::{
        public_log::{self, check_logged, LogKeys},
        script_trust::{BundleVerdict, ScriptTrust, TrustReport},
        trust::FileFacts,
        update::{
            self, check_binary, check_probe, held_keys_file, judge, on_start, parse_held_keys,
            parse_rejected, Accepted, Context, GuardRollBack, Guarded, Pending, Plan, Start,
            UpdateState, Verdict, COMPILED_RELEASE_KEY, PROBE_TIMEOUT,
        },
        AGENT_VERSION,
    },
    plane::{Plane, PlaneError},
    script_trust,
    state::StateDir,
};

/// The highest sequence accepted, in the state directory.
pub const ACCEPTED: &str = "release.json";
/// Held release keys, one base64 public key a line, in the state directory.
pub const HELD_KEYS: &str = "release_keys";

/// The update's settings, from the command line or the environment (`cli.rs`): the trial's
/// length (`CAPSTAN_AGENT_TRIAL_SECS`, 180 by default), how often the offer is asked for
/// (`CAPSTAN_AGENT_UPDATE_EVERY_SECS`, 300), and how long an `unlogged` verdict stands before it
/// is reported (AG-31; `CAPSTAN_AGENT_UNLOGGED_GRACE_SECS`, 900).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub trial: Duration,
    pub check_every: Duration,
    pub unlogged_grace: Duration,
}

/// The files beside the binary.
#[derive(Debug, Clone)]
pub struct Paths {
    pub binary: PathBuf,
    pub bak: PathBuf,
    pub pending: PathBuf,
    pub rejected: PathBuf,
    pub staged: PathBuf,
}

impl Paths {
    pub fn of(binary: &Path) -> Paths {
        let beside = |suffix: &str| {
            let mut name = binary.as_os_str().to_owned();
            name.push(suffix);
            PathBuf::from(name)
        };
        Paths {
            binary: binary.to_path_buf(),
            bak: beside(".bak"),
            pending: beside(".pending"),
            rejected: beside(".rejected"),
            staged: beside(".new"),
        }
    }

    /// The running binary's files.
    pub fn current() -> anyhow::Result<Paths> {
        let binary = std::env::current_exe()
            .map_err(|error| anyhow::anyhow!("cannot tell where this binary is: {error}"))?;
        Ok(Paths::of(&binary))
    }

    fn read_pending(&self) -> Option<Pending> {
        let bytes = fs::read(&self.pending).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(pending) => Some(pending),
            Err(error) => {
                warn!(%error, path = %self.pending.display(), "=== Self-update === the trial record cannot be read; it is ignored");
                None
            }
        }
    }

    fn write_pending(&self, pending: &Pending) -> std::io::Result<()> {
        write_whole(
            &self.pending,
            &serde_json::to_vec(pending).expect("a trial record serializes"),
            0o644,
        )
    }

    pub fn rejected_versions(&self) -> Vec<String> {
        fs::read_to_string(&self.rejected)
            .map(|text| parse_rejected(&text))
            .unwrap_or_default()
    }

    fn reject(&self, version: &str) -> std::io::Result<()> {
        let mut versions = self.rejected_versions();
        if !versions.iter().any(|held| held == version) {
            versions.push(version.to_string());
        }
        write_whole(
            &self.rejected,
            format!("{}\n", versions.join("\n")).as_bytes(),
            0o644,
        )
    }

    /// Puts the `.bak` back in place of the binary (one rename) and records `version` as
    /// rejected, ending its trial.
    fn roll_back(&self, version: &str) -> std::io::Result<()> {
        self.reject(version)?;
        fs::rename(&self.bak, &self.binary)?;
        let _ = fs::remove_file(&self.pending);
        Ok(())
    }
}

/// Writes `path` whole: a temporary file beside it (created exclusively, never through a
/// link), synced, renamed over it.
fn write_whole(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(format!(".{:016x}.tmp", rand::random::<u64>()));
    let temporary = PathBuf::from(temporary);
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&temporary)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
    }
    written
}

/// The text of a held keys file of the state directory, when it may be trusted: a regular
/// file owned by root and writable by nobody else (AG-28); `None` when absent or distrusted.
fn trusted_file(state: &StateDir, name: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let path = state.file(name);
    let metadata = fs::symlink_metadata(&path).ok()?;
    let facts = FileFacts {
        is_symlink: metadata.file_type().is_symlink(),
        is_dir: metadata.is_dir(),
        is_file: metadata.is_file(),
        uid: metadata.uid(),
        mode: metadata.permissions().mode() & 0o7777,
    };
    match held_keys_file(&facts, &path.display().to_string()) {
        Ok(()) => fs::read_to_string(&path).ok(),
        Err(distrust) => {
            warn!(%distrust, "=== Self-update === held keys are not honoured");
            None
        }
    }
}

/// The statement and log keys the public log is checked with (AG-27, AG-28): the compiled
/// ones and the held files (`release_statement_keys`, `transparency_log_keys`), only when
/// root-owned and writable by nobody else. The site's own key files are never read.
pub fn log_keys(state: &StateDir) -> LogKeys {
    LogKeys::of(
        trusted_file(state, public_log::STATEMENT_KEYS_FILE).as_deref(),
        trusted_file(state, public_log::LOG_KEYS_FILE).as_deref(),
    )
}

/// AG-28: before a swap, every key held now is written to the held files (each replaced whole
/// by rename), so the next binary holds them whatever it was built with.
fn hold_log_keys(state: &StateDir, keys: &LogKeys) -> Result<(), String> {
    for (name, held) in [
        (public_log::STATEMENT_KEYS_FILE, &keys.statement),
        (public_log::LOG_KEYS_FILE, &keys.log),
    ] {
        let current = fs::read_to_string(state.file(name)).unwrap_or_default();
        if let Some(text) = public_log::keys_to_hold(&current, held) {
            state
                .write(name, text.as_bytes(), 0o644)
                .map_err(|error| format!("{name}: {error}"))?;
        }
    }
    Ok(())
}

/// The keys release metadata is checked against: the one compiled in and the held ones (the
/// held file only when root-owned and writable by nobody else, AG-28).
pub fn trusted_keys(state: &StateDir) -> Vec<PublicKey> {
    let mut keys = Vec::new();
    if let Some(compiled) = COMPILED_RELEASE_KEY {
        match PublicKey::from_base64(compiled) {
            Ok(key) => keys.push(key),
            Err(error) => {
                warn!(%error, "=== Self-update === the compiled release key is not a key")
            }
        }
    }
    let path = state.file(HELD_KEYS);
    if let Ok(metadata) = fs::symlink_metadata(&path) {
        use std::os::unix::fs::MetadataExt as _;
        let facts = FileFacts {
            is_symlink: metadata.file_type().is_symlink(),
            is_dir: metadata.is_dir(),
            is_file: metadata.is_file(),
            uid: metadata.uid(),
            mode: metadata.permissions().mode() & 0o7777,
        };
        match held_keys_file(&facts, &path.display().to_string()) {
            Ok(()) => {
                let text = fs::read_to_string(&path).unwrap_or_default();
                let (held, bad) = parse_held_keys(&text);
                for line in bad {
                    warn!(
                        line,
                        "=== Self-update === a held release key line is not a key; skipped"
                    );
                }
                for key in held {
                    if !keys.contains(&key) {
                        keys.push(key);
                    }
                }
            }
            Err(distrust) => {
                warn!(%distrust, "=== Self-update === the held release keys are not honoured")
            }
        }
    }
    keys
}

/// Adds `key` to the held keys (a rotation the current key vouched for).
fn hold_key(state: &StateDir, key: &PublicKey) -> Result<(), String> {
    let path = state.file(HELD_KEYS);
    let mut text = fs::read_to_string(&path).unwrap_or_default();
    let (held, _) = parse_held_keys(&text);
    if held.contains(key) {
        return Ok(());
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&key.to_base64());
    text.push('\n');
    state
        .write(HELD_KEYS, text.as_bytes(), 0o644)
        .map_err(|error| error.to_string())
}

/// Runs `binary --version` and returns whether it succeeded and what it printed.
pub async fn probe(binary: &Path) -> Result<(bool, String), String> {
    let run = tokio::process::Command::new(binary)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(PROBE_TIMEOUT, run).await {
        Err(_) => Err(format!(
            "it did not answer within {} seconds",
            PROBE_TIMEOUT.as_secs()
        )),
        Ok(Err(error)) => Err(error.to_string()),
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

/// The running agent's side of updates.
pub struct Updater {
    settings: Settings,
    paths: Paths,
    started: Instant,
    on_trial: Option<Pending>,
    last_check: Option<Instant>,
    verdict: Option<Verdict>,
    /// The digest of metadata refused, so the same offer is not fetched and checked again
    /// (AG-25: not retried until the offer changes).
    refused: Option<String>,
    /// The support bundle's last verdict (AG-32), and the archive refused, so the same bytes
    /// are not fetched again.
    bundle: Option<BundleVerdict>,
    bundle_refused: Option<String>,
    /// The last look at the script tree (AG-39).
    trust: Option<TrustReport>,
    /// Since when the release on offer (by its metadata's digest) has been unlogged (AG-31).
    unlogged_since: Option<(String, Instant)>,
}

impl Updater {
    pub fn new(settings: Settings, paths: Paths, on_trial: Option<Pending>) -> Updater {
        Updater {
            settings,
            paths,
            started: Instant::now(),
            on_trial,
            last_check: None,
            verdict: None,
            refused: None,
            bundle: None,
            bundle_refused: None,
            trust: None,
            unlogged_since: None,
        }
    }

    /// The claim's `update_state`, `update_offered`, `update_reason` and `update_trial`, once a
    /// check has concluded since start (AG-31); `bundle_state` and `bundle_reason` once a support bundle
    /// was judged (AG-32); `script_trust`, `script_trust_files` and `script_trust_reason` once
    /// the script tree was looked at (AG-39: an empty list is "looked, all match").
    pub fn claim_fields(&self) -> Option<serde_json::Map<String, serde_json::Value>> {
        let mut fields = serde_json::Map::new();
        if let Some(verdict) = &self.verdict {
            fields.insert("update_state".into(), json!(verdict.state.as_str()));
            fields.insert("update_offered".into(), json!(verdict.offered));
            fields.insert("update_reason".into(), json!(verdict.reason));
            // AG-29: the version this process runs on trial, or null once it is trusted (the
            // plane's "who is on trial"). Sent with the verdict: the trial is settled before
            // every check, so it is current whenever a verdict is.
            fields.insert("update_trial".into(), json!(self.on_trial()));
        }
        if let Some(bundle) = &self.bundle {
            fields.insert("bundle_state".into(), json!(bundle.state.as_str()));
            fields.insert("bundle_reason".into(), json!(bundle.reason));
        }
        if let Some(trust) = &self.trust {
            fields.insert("script_trust".into(), json!(trust.state.as_str()));
            fields.insert("script_trust_files".into(), json!(trust.files));
            fields.insert("script_trust_reason".into(), json!(trust.reason));
        }
        (!fields.is_empty()).then_some(fields)
    }

    pub fn on_trial(&self) -> Option<&str> {
        self.on_trial
            .as_ref()
            .map(|pending| pending.version.as_str())
    }

    /// Ends the trial once this process has run for it: the version is trusted and the `.bak`
    /// removed.
    fn settle_trial(&mut self) {
        let Some(pending) = &self.on_trial else {
            return;
        };
        if !update::trial_passed(self.started.elapsed(), self.settings.trial) {
            return;
        }
        let _ = fs::remove_file(&self.paths.pending);
        let _ = fs::remove_file(&self.paths.bak);
        info!(version = %pending.version, "=== Self-update === trial passed; this version is trusted");
        self.on_trial = None;
    }

    /// AG-29: a deliberate stop during the trial starts it afresh.
    pub fn on_deliberate_stop(&self) {
        if let Some(pending) = &self.on_trial {
            if let Err(error) = self
                .paths
                .write_pending(&update::on_deliberate_stop(pending))
            {
                warn!(%error, "=== Self-update === cannot record the stop in the trial record");
            }
        }
    }

    /// AG-39: looks at the script tree, logging a change.
    fn look_at_scripts(&mut self, config: &Config, state: &StateDir) {
        let report = script_trust::look(config, state);
        if report != self.trust {
            if let Some(report) = &report {
                if report.state == ScriptTrust::Trusted {
                    info!("=== Script trust === every file matches the signed release manifest");
                } else {
                    warn!(state = report.state.as_str(), files = ?report.files, reason = ?report.reason, "=== Script trust ===");
                }
            }
        }
        self.trust = report;
    }

    /// AG-31: an `unlogged` verdict is reported once it has stood the grace (a publish writes
    /// the binaries before the statement); until then the update is pending. It is not marked
    /// refused: the statement is read again at every check, so a statement that appears (or
    /// changes) is taken.
    fn conclude_unlogged(&mut self, verdict: Verdict, digest: &str) {
        let since = match &self.unlogged_since {
            Some((held, since)) if held == digest => *since,
            _ => {
                let now = Instant::now();
                self.unlogged_since = Some((digest.to_string(), now));
                now
            }
        };
        if public_log::report_unlogged(since.elapsed(), self.settings.unlogged_grace) {
            self.conclude(verdict, None);
        } else {
            let reason = format!(
                "waiting for {} to appear in the public log ({})",
                verdict.offered.as_deref().unwrap_or("the release"),
                verdict.reason.as_deref().unwrap_or("unlogged")
            );
            self.conclude(
                Verdict::new(
                    UpdateState::UpdatePending,
                    verdict.offered.as_deref(),
                    Some(reason),
                ),
                None,
            );
        }
    }

    fn conclude(&mut self, verdict: Verdict, refused_digest: Option<String>) {
        if verdict.state.is_refusal() || verdict.state == UpdateState::FetchFailed {
            warn!(state = verdict.state.as_str(), offered = ?verdict.offered, reason = ?verdict.reason, "=== Self-update === update refused");
        } else if self.verdict.as_ref() != Some(&verdict) {
            info!(state = verdict.state.as_str(), offered = ?verdict.offered, "=== Self-update ===");
        }
        self.refused = refused_digest;
        self.verdict = Some(verdict);
    }

    /// Between jobs, under the job lock: settles the trial and, when a check is due, checks
    /// the offer. Returns `true` when a new binary is in place and the agent should exit for
    /// its supervisor.
    pub async fn between_jobs(
        &mut self,
        config: &Config,
        state: &StateDir,
        plane: &Plane,
        key: &NodeKey,
    ) -> bool {
        self.settle_trial();
        if self
            .last_check
            .is_some_and(|at| at.elapsed() < self.settings.check_every)
        {
            return false;
        }
        self.last_check = Some(Instant::now());
        self.look_at_scripts(config, state);
        let asked = json!({"kind": "manifest"});
        let bytes = match plane
            .send_for_bytes(
                key,
                "artifact",
                "",
                &asked,
                MAX_METADATA_BYTES,
                Duration::ZERO,
            )
            .await
        {
            Ok(bytes) => bytes,
            Err(PlaneError::Refused { status: 404, .. }) => {
                self.conclude(Verdict::new(UpdateState::None, None, None), None);
                return false;
            }
            Err(error) => {
                self.conclude(
                    Verdict::new(
                        UpdateState::FetchFailed,
                        None,
                        Some(format!(
                            "the release on offer could not be fetched: {error}"
                        )),
                    ),
                    None,
                );
                return false;
            }
        };
        let digest = sha256_hex(&bytes);
        if self.refused.as_deref() == Some(digest.as_str()) {
            return false;
        }
        let document = match SignedRelease::parse(&bytes) {
            Ok(document) => document,
            Err(error) => {
                self.conclude(
                    Verdict::new(
                        UpdateState::VerifyFailed,
                        None,
                        Some(format!("bad metadata: {error}")),
                    ),
                    Some(digest),
                );
                return false;
            }
        };
        let trusted = trusted_keys(state);
        let (accepted, judged) =
            self.judge_here(state, &document, &trusted, update::BUILT_RELEASE_SEQUENCE);
        let plan = match judged {
            Ok(plan) => plan,
            Err(verdict) => {
                self.conclude(verdict, Some(digest));
                return false;
            }
        };
        // Accepted: its sequence is the highest seen, its next key is held.
        let release = &document.signed;
        if release.sequence > accepted.highest_sequence {
            let now_accepted = Accepted {
                highest_sequence: release.sequence,
            };
            if let Err(error) = state.write_json(ACCEPTED, &now_accepted, 0o600) {
                self.conclude(
                    Verdict::new(
                        UpdateState::FetchFailed,
                        Some(&release.version),
                        Some(format!("cannot record the accepted sequence: {error}")),
                    ),
                    None,
                );
                return false;
            }
        }
        if let Some(next) = release.next_public_key() {
            if let Err(error) = hold_key(state, &next) {
                warn!(%error, "=== Self-update === cannot hold the next release key");
            }
        }
        // AG-32: a siteless machine's support bundle rides on the accepted release.
        if let Some(verdict) = script_trust::refresh_bundle(
            config,
            state,
            plane,
            key,
            release,
            &trusted,
            &mut self.bundle_refused,
        )
        .await
        {
            self.bundle = Some(verdict);
            self.look_at_scripts(config, state);
        }
        let artifact = match plan {
            Plan::Settle(verdict) => {
                self.conclude(verdict, None);
                return false;
            }
            Plan::Install(artifact) => artifact,
        };
        let version = release.version.clone();
        let arch = update::this_arch().unwrap_or_default();
        // AG-27: with statement or log keys held, the release must be in the public log, read
        // before the binary is fetched.
        let log_keys = log_keys(state);
        if log_keys.required() {
            let asked = json!({"kind": "release_statement", "version": version});
            let fetched = plane
                .send_for_bytes(
                    key,
                    "artifact",
                    "",
                    &asked,
                    MAX_STATEMENT_BYTES,
                    Duration::ZERO,
                )
                .await
                .map_err(|error| error.to_string());
            let checked = check_logged(
                fetched.as_ref().map(Vec::as_slice).map_err(Clone::clone),
                &log_keys,
                arch,
                &artifact.sha256,
                &version,
            );
            if let Err(verdict) = checked {
                self.conclude_unlogged(verdict, &digest);
                return false;
            }
        }
        self.unlogged_since = None;
        let asked = json!({"kind": "binary", "arch": arch, "version": version});
        let binary = match plane
            .send_for_bytes(
                key,
                "artifact",
                "",
                &asked,
                artifact.size as usize,
                Duration::from_secs(60),
            )
            .await
        {
            Ok(binary) => binary,
            Err(error) => {
                self.conclude(
                    Verdict::new(
                        UpdateState::FetchFailed,
                        Some(&version),
                        Some(format!("the binary could not be fetched: {error}")),
                    ),
                    None,
                );
                return false;
            }
        };
        if let Err(verdict) = check_binary(&artifact, &binary, &trusted, &version) {
            self.conclude(verdict, Some(digest));
            return false;
        }
        if let Err(error) = self.stage(&binary) {
            self.conclude(
                Verdict::new(
                    UpdateState::FetchFailed,
                    Some(&version),
                    Some(format!(
                        "the binary could not be written beside this one: {error}"
                    )),
                ),
                None,
            );
            return false;
        }
        let answer = probe(&self.paths.staged).await;
        if let Err(verdict) = check_probe(answer, &version) {
            let _ = fs::remove_file(&self.paths.staged);
            self.conclude(verdict, Some(digest));
            return false;
        }
        if log_keys.required() {
            if let Err(error) = hold_log_keys(state, &log_keys) {
                let _ = fs::remove_file(&self.paths.staged);
                self.conclude(
                    Verdict::new(
                        UpdateState::FetchFailed,
                        Some(&version),
                        Some(format!(
                            "the held log keys could not be written, so nothing is swapped: {error}"
                        )),
                    ),
                    None,
                );
                return false;
            }
        }
        match self.swap(&version) {
            Ok(()) => {
                self.conclude(
                    Verdict::new(
                        UpdateState::UpdatePending,
                        Some(&version),
                        Some(format!(
                            "{version} is installed; exiting for the supervisor to start it"
                        )),
                    ),
                    None,
                );
                true
            }
            Err(error) => {
                let _ = fs::remove_file(&self.paths.staged);
                self.conclude(
                    Verdict::new(
                        UpdateState::FetchFailed,
                        Some(&version),
                        Some(format!("the binary could not be put in place: {error}")),
                    ),
                    None,
                );
                false
            }
        }
    }

    /// `judge` against this machine's record: the highest sequence in `release.json`, none
    /// on a fresh install or once the file is lost, when `built_sequence` (the release this
    /// binary was built as) is the rollback check's floor all the same.
    fn judge_here(
        &self,
        state: &StateDir,
        document: &SignedRelease,
        trusted: &[PublicKey],
        built_sequence: u64,
    ) -> (Accepted, Result<Plan, Verdict>) {
        let accepted: Accepted = state.read_json(ACCEPTED).ok().flatten().unwrap_or_default();
        let rejected = self.paths.rejected_versions();
        let context = Context {
            trusted,
            accepted: &accepted,
            built_sequence,
            now: chrono::Utc::now().timestamp(),
            running: AGENT_VERSION,
            rejected: &rejected,
            on_trial: self.on_trial.is_some(),
            arch: update::this_arch(),
        };
        let judged = judge(document, &context);
        (accepted, judged)
    }

    /// Writes the checked bytes to `.new` (created exclusively, 0755, synced).
    fn stage(&self, binary: &[u8]) -> std::io::Result<()> {
        let _ = fs::remove_file(&self.paths.staged);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o755)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(&self.paths.staged)?;
        file.set_permissions(fs::Permissions::from_mode(0o755))?;
        file.write_all(binary)?;
        file.sync_all()
    }

    /// Keeps the running binary as `.bak` (a second name for it, then renamed into place),
    /// records the trial, then renames the new binary over the old name: at every moment the
    /// binary's path holds a whole binary.
    fn swap(&self, version: &str) -> std::io::Result<()> {
        let mut kept = self.paths.bak.as_os_str().to_owned();
        kept.push(".tmp");
        let kept = PathBuf::from(kept);
        let _ = fs::remove_file(&kept);
        if fs::hard_link(&self.paths.binary, &kept).is_err() {
            fs::copy(&self.paths.binary, &kept)?;
        }
        fs::rename(&kept, &self.paths.bak)?;
        self.paths.write_pending(&Pending {
            version: version.to_string(),
            starts: 0,
            handed_over: 0,
        })?;
        fs::rename(&self.paths.staged, &self.paths.binary)?;
        if let Some(directory) = self.paths.binary.parent() {
            let _ = fs::File::open(directory).and_then(|directory| directory.sync_all());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_signing::release::{Artifact, Release};
    use std::collections::BTreeMap;

    fn offer(signer: &NodeKey, version: &str, sequence: u64) -> SignedRelease {
        let mut binaries = BTreeMap::new();
        binaries.insert(
            update::this_arch().unwrap_or("linux-amd64").to_string(),
            Artifact::describe("capstan-agent", b"binary", signer),
        );
        Release {
            version: version.into(),
            sequence,
            expires_at: chrono::Utc::now().timestamp() + 3600,
            binaries,
            support_bundle: None,
            next_key: None,
        }
        .sign(signer)
        .unwrap()
    }

    fn updater(dir: &Path) -> Updater {
        let settings = Settings {
            trial: update::TRIAL_UPTIME,
            check_every: update::CHECK_EVERY,
            unlogged_grace: public_log::UNLOGGED_GRACE,
        };
        Updater::new(settings, Paths::of(&dir.join("capstan-agent")), None)
    }

    #[test]
    fn ag_24_a_fresh_state_directory_refuses_a_release_below_the_sequence_the_agent_was_built_as() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(&dir.path().join("state")).unwrap();
        assert!(!state.file(ACCEPTED).exists(), "a fresh install");
        let signer = NodeKey::from_secret_bytes(&[3; 32]).unwrap();
        let trusted = [signer.public_key()];
        let updater = updater(dir.path());

        let (accepted, judged) =
            updater.judge_here(&state, &offer(&signer, "0.0.1", 6), &trusted, 7);
        assert_eq!(accepted, Accepted::default());
        let refused = judged.unwrap_err();
        assert_eq!(refused.state, UpdateState::VerifyFailed);
        assert_eq!(
            refused.reason.as_deref(),
            Some("rollback: the release's sequence 6 is lower than 7, the release this agent was built as")
        );
        // a later release than the build is judged on
        let (_, judged) = updater.judge_here(&state, &offer(&signer, "0.0.2", 8), &trusted, 7);
        assert!(matches!(judged, Ok(Plan::Install(_))), "{judged:?}");
        // the record, once there, is the floor when it is higher
        state
            .write_json(
                ACCEPTED,
                &Accepted {
                    highest_sequence: 9,
                },
                0o600,
            )
            .unwrap();
        let (accepted, judged) =
            updater.judge_here(&state, &offer(&signer, "0.0.2", 8), &trusted, 7);
        assert_eq!(accepted.highest_sequence, 9);
        assert!(judged.unwrap_err().reason.unwrap().starts_with("rollback"));
    }
}
