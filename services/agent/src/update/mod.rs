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

mod files;
pub mod keys;
mod trial;

use std::{
    fs::{self, OpenOptions},
    io::Write as _,
    os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _},
    path::PathBuf,
    time::{Duration, Instant},
};

use capstan_events::Word as _;
use capstan_signing::{
    release::{sha256_hex, Release, SignedRelease, MAX_METADATA_BYTES},
    statement::MAX_STATEMENT_BYTES,
    NodeKey, PublicKey,
};
use serde_json::json;
use tracing::{info, warn};

use self::keys::{hold_key, hold_log_keys};
pub use self::{
    files::Paths,
    keys::{log_keys, trusted_keys, HELD_KEYS},
    trial::{at_start, probe, start_guard, AtStart},
};
use crate::{
    config::Config,
    domain::{
        public_log::{self, check_logged, LogKeys},
        script_trust::{BundleVerdict, ScriptTrust, TrustReport},
        update::{
            self, check_binary, check_probe, judge, Accepted, Context, Pending, Plan, UpdateState,
            Verdict,
        },
        AGENT_VERSION,
    },
    plane::{Plane, PlaneError},
    script_trust,
    state::StateDir,
};

/// The highest sequence accepted, in the state directory.
pub const ACCEPTED: &str = "release.json";

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
        let offer = Offer {
            config,
            state,
            plane,
            key,
        };
        match self.check_offer(&offer).await {
            Ok(version) => {
                let reason =
                    format!("{version} is installed; exiting for the supervisor to start it");
                self.conclude(
                    Verdict::new(UpdateState::UpdatePending, Some(&version), Some(reason)),
                    None,
                );
                true
            }
            Err(Stop::Quiet) => false,
            Err(Stop::Conclude(verdict, refused_digest)) => {
                self.conclude(verdict, refused_digest);
                false
            }
            Err(Stop::Unlogged(verdict, digest)) => {
                self.conclude_unlogged(verdict, &digest);
                false
            }
        }
    }

    /// The steps of one check, each stopping it with the verdict it concludes with: the offer's
    /// metadata, judged here and accepted, the public log, the binary, and its installation.
    /// Returns the version put in place.
    async fn check_offer(&mut self, offer: &Offer<'_>) -> Result<String, Stop> {
        let bytes = fetch_metadata(offer).await?;
        let digest = sha256_hex(&bytes);
        if self.refused.as_deref() == Some(digest.as_str()) {
            return Err(Stop::Quiet);
        }
        let refused = |verdict| Stop::Conclude(verdict, Some(digest.clone()));
        let document = SignedRelease::parse(&bytes).map_err(|error| {
            let reason = format!("bad metadata: {error}");
            refused(Verdict::new(UpdateState::VerifyFailed, None, Some(reason)))
        })?;
        let trusted = trusted_keys(offer.state);
        let (accepted, judged) = self.judge_here(
            offer.state,
            &document,
            &trusted,
            update::BUILT_RELEASE_SEQUENCE,
        );
        let plan = judged.map_err(refused)?;
        let release = &document.signed;
        self.accept(offer, release, &accepted, &trusted).await?;
        let artifact = match plan {
            Plan::Settle(verdict) => return Err(Stop::Conclude(verdict, None)),
            Plan::Install(artifact) => artifact,
        };
        let version = release.version.clone();
        let arch = update::this_arch().unwrap_or_default();
        // AG-27: with statement or log keys held, the release must be in the public log, read
        // before the binary is fetched.
        let log_keys = log_keys(offer.state);
        if log_keys.required() {
            check_public_log(offer, &log_keys, arch, &artifact.sha256, &version)
                .await
                .map_err(|verdict| Stop::Unlogged(verdict, digest.clone()))?;
        }
        self.unlogged_since = None;
        let binary = fetch_binary(offer, arch, artifact.size as usize, &version).await?;
        check_binary(&artifact, &binary, &trusted, &version).map_err(refused)?;
        self.install(offer.state, &binary, &log_keys, &version, &digest)
            .await?;
        Ok(version)
    }

    /// Accepted: its sequence is the highest seen, its next key is held, and a siteless
    /// machine's support bundle that rides on it is refreshed (AG-32).
    async fn accept(
        &mut self,
        offer: &Offer<'_>,
        release: &Release,
        accepted: &Accepted,
        trusted: &[PublicKey],
    ) -> Result<(), Stop> {
        if release.sequence > accepted.highest_sequence {
            let now_accepted = Accepted {
                highest_sequence: release.sequence,
            };
            offer
                .state
                .write_json(ACCEPTED, &now_accepted, 0o600)
                .map_err(|error| {
                    let reason = format!("cannot record the accepted sequence: {error}");
                    Stop::failed(&release.version, reason)
                })?;
        }
        if let Some(next) = release.next_public_key() {
            if let Err(error) = hold_key(offer.state, &next) {
                warn!(%error, "=== Self-update === cannot hold the next release key");
            }
        }
        if let Some(verdict) = script_trust::refresh_bundle(
            offer.config,
            offer.state,
            offer.plane,
            offer.key,
            release,
            trusted,
            &mut self.bundle_refused,
        )
        .await
        {
            self.bundle = Some(verdict);
            self.look_at_scripts(offer.config, offer.state);
        }
        Ok(())
    }

    /// Stages the checked binary, runs it with `--version`, writes the held log keys and swaps
    /// it in; the staged copy is removed when any of them fails.
    async fn install(
        &self,
        state: &StateDir,
        binary: &[u8],
        log_keys: &LogKeys,
        version: &str,
        digest: &str,
    ) -> Result<(), Stop> {
        self.stage(binary).map_err(|error| {
            let reason = format!("the binary could not be written beside this one: {error}");
            Stop::failed(version, reason)
        })?;
        let unstage = || {
            let _ = fs::remove_file(&self.paths.staged);
        };
        let answer = probe(&self.paths.staged).await;
        if let Err(verdict) = check_probe(answer, version) {
            unstage();
            return Err(Stop::Conclude(verdict, Some(digest.to_string())));
        }
        if log_keys.required() {
            if let Err(error) = hold_log_keys(state, log_keys) {
                unstage();
                let reason = format!(
                    "the held log keys could not be written, so nothing is swapped: {error}"
                );
                return Err(Stop::failed(version, reason));
            }
        }
        self.swap(version).map_err(|error| {
            unstage();
            Stop::failed(
                version,
                format!("the binary could not be put in place: {error}"),
            )
        })
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

/// What one check of the offer speaks with.
struct Offer<'a> {
    config: &'a Config,
    state: &'a StateDir,
    plane: &'a Plane,
    key: &'a NodeKey,
}

/// How a check ended short of a swap.
enum Stop {
    /// The offer refused before, unchanged: nothing new to conclude (AG-25).
    Quiet,
    /// The verdict, with the metadata's digest when the offer is refused until it changes.
    Conclude(Verdict, Option<String>),
    /// AG-31: not (yet) in the public log; the digest of the offer's metadata.
    Unlogged(Verdict, String),
}

impl Stop {
    /// `fetch_failed` for `version`: the plane or this machine failed, not the release.
    fn failed(version: &str, reason: String) -> Stop {
        Stop::Conclude(
            Verdict::new(UpdateState::FetchFailed, Some(version), Some(reason)),
            None,
        )
    }
}

/// The offer's signed metadata; none on offer (404) settles the state `none`.
async fn fetch_metadata(offer: &Offer<'_>) -> Result<Vec<u8>, Stop> {
    let asked = json!({"kind": "manifest"});
    let fetched = offer
        .plane
        .send_for_bytes(
            offer.key,
            "artifact",
            "",
            &asked,
            MAX_METADATA_BYTES,
            Duration::ZERO,
        )
        .await;
    match fetched {
        Ok(bytes) => Ok(bytes),
        Err(PlaneError::Refused { status: 404, .. }) => Err(Stop::Conclude(
            Verdict::new(UpdateState::None, None, None),
            None,
        )),
        Err(error) => {
            let reason = format!("the release on offer could not be fetched: {error}");
            Err(Stop::Conclude(
                Verdict::new(UpdateState::FetchFailed, None, Some(reason)),
                None,
            ))
        }
    }
}

/// AG-27: the release statement for `version`, checked against the held log keys.
async fn check_public_log(
    offer: &Offer<'_>,
    log_keys: &LogKeys,
    arch: &str,
    sha256: &str,
    version: &str,
) -> Result<(), Verdict> {
    let asked = json!({"kind": "release_statement", "version": version});
    let fetched = offer
        .plane
        .send_for_bytes(
            offer.key,
            "artifact",
            "",
            &asked,
            MAX_STATEMENT_BYTES,
            Duration::ZERO,
        )
        .await;
    check_logged(fetched.as_deref(), log_keys, arch, sha256, version)
}

/// The binary for this machine's architecture, at most the size the metadata says.
async fn fetch_binary(
    offer: &Offer<'_>,
    arch: &str,
    size: usize,
    version: &str,
) -> Result<Vec<u8>, Stop> {
    let asked = json!({"kind": "binary", "arch": arch, "version": version});
    offer
        .plane
        .send_for_bytes(
            offer.key,
            "artifact",
            "",
            &asked,
            size,
            Duration::from_secs(60),
        )
        .await
        .map_err(|error| Stop::failed(version, format!("the binary could not be fetched: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_signing::release::Artifact;
    use std::collections::BTreeMap;
    use std::path::Path;

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
