//! The running agent (`capstan-agent run`): it finishes a staged join when the plane approves
//! it, long-polls for work while paired and switched on, runs one job at a time under the job
//! lock with a job marker on disk, and posts the result. It backs off while the plane cannot be
//! reached, honours `Retry-After`, stops taking work when the plane no longer knows its key,
//! and lets go of a claim within seconds of a `leave`.

use anyhow::{bail, Context as _};
use capstan_signing::NodeKey;
use chrono::Utc;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::{
    config::Config,
    domain::{
        backoff, claim_wait,
        join::{next_step, JoinStep, Pairing},
        vocabulary, AGENT_VERSION, CLAIM_BYTES, WATCH_EVERY,
    },
    jobs::{self, JobContext, Undelivered},
    join::{self, JoinError},
    plane::{Plane, PlaneError},
    recipes::{self, Carried},
    state::{self, Identity, LockGuard, RunStatus, StateDir},
    update::{self, AtStart, Updater},
};

/// How often an agent with nothing to do (no identity, switched off, disconnected) looks again.
const IDLE_LOOK: Duration = Duration::from_secs(2);
/// `status.json` is rewritten at least this often while nothing changes.
const STATUS_REFRESH: Duration = Duration::from_secs(60);
/// The wait after a state directory the agent cannot read.
const STATE_TROUBLE_WAIT: Duration = Duration::from_secs(10);

/// Runs until SIGTERM or SIGINT.
pub async fn run(
    state: StateDir,
    config: Config,
    settings: update::Settings,
) -> anyhow::Result<()> {
    let _run_lock = take_run_lock(&state).await?;
    // AG-29: a swap on trial is counted, or rolled back, before anything else.
    let paths = update::Paths::current()?;
    let on_trial = match update::at_start(&paths)? {
        AtStart::Run(on_trial) => on_trial,
        AtStart::RolledBack(version) => bail!(
            "version {version} died during its trial: the previous agent is back in place; exiting for the supervisor to start it"
        ),
    };
    let shutdown = watch_for_signal();
    let shared = recipes::Shared::default();
    // AG-41: the recipe loop runs on every agent, paired or not, on its own clock.
    let recipe_loop = recipes::Loop::start(state.clone(), config.clone(), shared.clone());
    let manifest_clock = crate::site_release::ManifestClock::new(config.manifest_tick);
    let mut agent = Agent {
        status: RunStatus {
            pid: std::process::id(),
            ..RunStatus::default()
        },
        state,
        config,
        recipes: shared,
        shutdown: shutdown.clone(),
        failures: 0,
        last_status_check: None,
        plane: None,
        last_saved: None,
        updater: Updater::new(settings, paths, on_trial),
        exit_for_update: false,
        manifest_clock,
    };
    agent.recover_from_crash();
    agent.save_status();
    tokio::spawn(recipe_loop.run(shutdown.clone()));
    info!(version = AGENT_VERSION, state_dir = %agent.state.path().display(), "agent running");
    let mut shutdown = shutdown;
    while !*shutdown.borrow() && !agent.exit_for_update {
        let pause = agent.tick().await;
        agent.save_status();
        if pause.is_zero() {
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            _ = shutdown.wait_for(|stop| *stop) => {}
        }
    }
    if agent.exit_for_update {
        info!("a new version is in place; exiting for the supervisor to start it");
    } else {
        agent.updater.on_deliberate_stop();
    }
    agent.status.connection = "stopped".into();
    agent.save_status();
    info!("agent stopped");
    Ok(())
}

/// The run lock, held while the agent runs. `status` holds it for an instant to see whether an
/// agent runs, so it is tried for a while (three seconds) before another agent is assumed.
async fn take_run_lock(state: &StateDir) -> anyhow::Result<LockGuard> {
    for _ in 0..30 {
        if let Some(lock) = state
            .try_lock(state::RUN_LOCK)
            .context("taking the run lock")?
        {
            return Ok(lock);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!(
        "another capstan-agent is already running with {}",
        state.path().display()
    )
}

/// A receiver that turns `true` at SIGTERM or SIGINT.
fn watch_for_signal() -> watch::Receiver<bool> {
    let (stop, shutdown) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        let _ = stop.send(true);
        // Keep the sender alive so receivers see `true`, not a closed channel.
        std::future::pending::<()>().await;
    });
    shutdown
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut terminate) => {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

struct Agent {
    state: StateDir,
    config: Config,
    /// What the recipe loop reports in every claim (`recipes`, `cases`).
    recipes: recipes::Shared,
    shutdown: watch::Receiver<bool>,
    status: RunStatus,
    /// Failed claims in a row, for the backoff.
    failures: u32,
    last_status_check: Option<chrono::DateTime<Utc>>,
    /// The client for the plane the identity names.
    plane: Option<Plane>,
    /// What `status.json` last said (without its time) and when it was written.
    last_saved: Option<(String, std::time::Instant)>,
    /// Self-update (AG-24..AG-31), checked between jobs.
    updater: Updater,
    /// A new binary is in place: the loop ends and the process exits for its supervisor.
    exit_for_update: bool,
    /// The site release's manifest clock (AG-34, AG-37), between jobs.
    manifest_clock: crate::site_release::ManifestClock,
}

impl Agent {
    /// A job marker left by a process that stopped mid-job: the job is never run again, and the
    /// next claim says `idle`, so the plane marks it lost (AG-16, AG-22).
    fn recover_from_crash(&mut self) {
        if let Ok(Some((bytes, _))) = self.state.read(state::JOB_MARKER) {
            let text = String::from_utf8_lossy(&bytes);
            let job = text.lines().nth(1).unwrap_or("an unknown job").to_string();
            if let Some(recipe) = job.strip_prefix("recipe ") {
                // A recipe's repair: its ledger counts the attempt as interrupted (AG-47);
                // the plane had no job running.
                warn!(recipe, "the previous run stopped in the middle of a recipe's repair; the recipe counts it as a failed attempt");
                let _ = self.state.remove(state::JOB_MARKER);
                return;
            }
            warn!(%job, "the previous run stopped in the middle of a job; it is not run again, and the management node will mark it lost");
            self.status.crashed_job = Some(format!(
                "the previous run stopped in the middle of {job}; it was not run again (the management node marks it lost)"
            ));
            let _ = self.state.remove(state::JOB_MARKER);
        }
        for name in self
            .state
            .names_with_prefix("awaiting-")
            .unwrap_or_default()
            .into_iter()
            .chain(
                self.state
                    .names_with_prefix("decision-")
                    .unwrap_or_default(),
            )
        {
            let _ = self.state.remove(&name);
        }
    }

    /// Writes `status.json` when what it says changed, and at least once a minute so a
    /// reader can tell the agent is alive; never on every idle look.
    fn save_status(&mut self) {
        let mut compared = self.status.clone();
        compared.updated_at = None;
        let said = serde_json::to_string(&compared).unwrap_or_default();
        let fresh = self
            .last_saved
            .as_ref()
            .is_some_and(|(before, at)| *before == said && at.elapsed() < STATUS_REFRESH);
        if fresh {
            return;
        }
        self.status.updated_at = Some(Utc::now());
        match self.state.write_json(state::STATUS, &self.status, 0o600) {
            Ok(()) => self.last_saved = Some((said, std::time::Instant::now())),
            Err(error) => warn!(%error, "cannot write status.json"),
        }
    }

    fn set(&mut self, connection: &str, error: Option<String>) {
        if self.status.connection != connection {
            info!(connection, "agent state");
        }
        self.status.connection = connection.into();
        self.status.last_error = error;
    }

    fn plane_for(&mut self, management_node: &str) -> Result<Plane, crate::plane::BadAddress> {
        if let Some(plane) = &self.plane {
            if crate::plane::base_url(management_node).as_deref() == Ok(plane.base()) {
                return Ok(plane.clone());
            }
        }
        let plane = Plane::new(management_node, self.config.local_address)?;
        self.plane = Some(plane.clone());
        Ok(plane)
    }

    fn backoff(&mut self) -> Duration {
        self.failures += 1;
        backoff::delay(self.failures, rand::random::<f64>())
    }

    /// One step; returns how long to pause before the next.
    async fn tick(&mut self) -> Duration {
        // `leave` holds the job lock while it says goodbye; wait for it.
        let lock = match self.state.try_lock(state::JOB_LOCK) {
            Ok(Some(lock)) => lock,
            Ok(None) => return WATCH_EVERY,
            Err(error) => {
                self.set("state directory trouble", Some(error.to_string()));
                return STATE_TROUBLE_WAIT;
            }
        };
        if self.state.has_marker(state::LEAVE_REQUEST) {
            return WATCH_EVERY;
        }
        let identity = match self.state.identity() {
            Ok(Some(identity)) => identity,
            Ok(None) => {
                self.set("not paired", None);
                return IDLE_LOOK;
            }
            Err(error) => {
                self.set("state directory trouble", Some(error.to_string()));
                return STATE_TROUBLE_WAIT;
            }
        };
        let plane = match self.plane_for(&identity.management_node) {
            Ok(plane) => plane,
            Err(error) => {
                self.set("misconfigured", Some(error.to_string()));
                return STATE_TROUBLE_WAIT;
            }
        };
        match &identity.pairing {
            Pairing::Pending { .. } | Pairing::Rejected { .. } => {
                return self.advance_join(identity, &plane).await
            }
            Pairing::Disconnected { reason, .. } => {
                let reason = reason.clone();
                self.set("disconnected", Some(reason));
                return IDLE_LOOK;
            }
            Pairing::Paired { .. } => {}
        }
        if !self.state.enabled() {
            self.set("disabled (capstan-agent enable switches it on)", None);
            return IDLE_LOOK;
        }
        // Between jobs, under the job lock (AG-24): the offer is checked before a claim.
        if let Ok(key) = identity.key() {
            if self
                .updater
                .between_jobs(&self.config, &self.state, &plane, &key)
                .await
            {
                self.exit_for_update = true;
                return Duration::ZERO;
            }
            // AG-34, AG-37: the installed site release's manifest and deployment files, on
            // their own clock, under the job lock (never during a job of this agent's).
            self.manifest_clock
                .between_jobs(&self.state, &plane, &key)
                .await;
        }
        self.claim_and_run(&identity, &plane, lock).await
    }

    /// AG-07: the running agent finishes a staged join itself.
    async fn advance_join(&mut self, identity: Identity, plane: &Plane) -> Duration {
        let now = Utc::now();
        let step = next_step(&identity.pairing, self.last_status_check, now);
        let fingerprint = identity.fingerprint.clone();
        let result = match step {
            JoinStep::Wait => {
                self.set("joining", self.status.last_error.clone());
                return WATCH_EVERY;
            }
            JoinStep::AskStatus => {
                self.last_status_check = Some(now);
                join::check(&self.state, &self.config, plane, identity).await
            }
            JoinStep::AskAgain => {
                join::ask(
                    &self.state,
                    &self.config,
                    plane,
                    identity,
                    Some(&fingerprint),
                )
                .await
            }
        };
        match result {
            Ok(identity) => {
                self.failures = 0;
                if let Pairing::Paired { node_id, .. } = identity.pairing {
                    info!(node_id, fingerprint = %identity.fingerprint, "join approved; taking work");
                    self.set("paired", None);
                    return Duration::ZERO;
                }
                self.set("joining", None);
                WATCH_EVERY
            }
            Err(JoinError::Plane(PlaneError::RateLimited { wait, .. })) => {
                self.set(
                    "joining",
                    Some("rate limited by the management node".into()),
                );
                wait
            }
            Err(error) => {
                warn!(%error, "the join could not be advanced");
                self.set("joining", Some(error.to_string()));
                self.backoff()
            }
        }
    }

    /// Claims with the job lock let go for the long poll (so a recipe may repair meanwhile,
    /// AG-42), and takes it again before running a job the claim brought.
    async fn claim_and_run(
        &mut self,
        identity: &Identity,
        plane: &Plane,
        lock: LockGuard,
    ) -> Duration {
        let key = match identity.key() {
            Ok(key) => key,
            Err(error) => {
                self.set("state directory trouble", Some(error.to_string()));
                return STATE_TROUBLE_WAIT;
            }
        };
        let (body, carried) = self.claim_body();
        drop(lock);
        // What `status` shows must not wait for the long poll to end.
        self.save_status();
        let wait = claim_wait(rand::random::<f64>());
        let query = format!("?wait={wait}");
        let claim = plane.send(
            &key,
            "claim",
            &query,
            &body,
            CLAIM_BYTES,
            Duration::from_secs(wait),
        );
        let mut shutdown = self.shutdown.clone();
        let answer = tokio::select! {
            answer = claim => answer,
            why = watch_for_change(&self.state, &identity.fingerprint) => {
                debug!(why, "claim let go");
                return Duration::ZERO;
            }
            _ = shutdown.wait_for(|stop| *stop) => return Duration::ZERO,
        };
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => return self.claim_failed(identity, error),
        };
        self.failures = 0;
        // AG-60: the bodies this claim carried ride no more.
        self.recipes.delivered(&carried);
        self.set("connected", None);
        self.status.last_claim_at = Some(Utc::now());
        if let Some(ignored) = answer["ignored_fields"]
            .as_array()
            .filter(|fields| !fields.is_empty())
        {
            debug!(?ignored, "the plane set claim fields aside");
        }
        let job = match answer.get("job") {
            Some(job) if !job.is_null() => job.clone(),
            _ => {
                self.status.last_claim = Some("no job".into());
                return Duration::ZERO;
            }
        };
        self.status.last_claim = Some(format!(
            "job {} {}",
            job["id"],
            job["primitive"].as_str().unwrap_or("?")
        ));
        self.save_status();
        self.run_claimed(identity, plane, &key, &job).await
    }

    /// What a claim says of this node (AG-16, AG-60, issue 27), and the recipe bodies it
    /// carries.
    fn claim_body(&mut self) -> (Value, Carried) {
        let (log_access, note) = self.state.log_access();
        self.status.notes = note.into_iter().collect();
        // The agent claims only while it runs nothing and owes no result, so every claim says
        // `idle`: whatever the plane still holds as running for this node was lost (AG-16).
        let (recipes, cases, carried) = self.recipes.claim_fields();
        let mut body = json!({
            "agent_version": AGENT_VERSION,
            "idle": true,
            "vocabulary": vocabulary::names(),
            "recipes": recipes,
            "claim_bytes": CLAIM_BYTES,
            "log_access": if log_access { "on" } else { "off" },
        });
        if let Some(cases) = cases {
            body["cases"] = cases;
        }
        // The site `site.json` names, so the plane learns of a site set up on the node after
        // its join (issue 27; without it, a rollout refuses the node as hosting no site). A
        // node without the file, or with one it cannot use, says nothing: the plane keeps the
        // root it knows.
        if let Ok(Some(site)) = self.state.site() {
            body["site_root"] = json!(site.root.display().to_string());
        }
        if let (Some(fields), Some(body)) = (self.updater.claim_fields(), body.as_object_mut()) {
            body.extend(fields);
        }
        (body, carried)
    }

    /// A claim the plane did not answer with work: how long until the next.
    fn claim_failed(&mut self, identity: &Identity, error: PlaneError) -> Duration {
        match error {
            PlaneError::RateLimited { wait, code } => {
                self.set(
                    "rate limited",
                    Some(format!("429 {code}: waiting {} seconds", wait.as_secs())),
                );
                wait
            }
            PlaneError::Refused {
                status: 401, code, ..
            } if code == "unknown_key" => {
                self.disconnect(identity);
                Duration::ZERO
            }
            PlaneError::Refused {
                status: 401,
                code,
                message,
            } if code == "clock_skew" => {
                self.set(
                    "clock skew",
                    Some(format!("this machine's clock is more than five minutes from the management node's; fix the clock ({message})")),
                );
                self.backoff()
            }
            error => {
                let connection = match error {
                    PlaneError::Unreachable(_) => "unreachable",
                    _ => "refused",
                };
                self.set(connection, Some(error.to_string()));
                let wait = self.backoff();
                warn!(%error, wait_s = wait.as_secs(), "claim failed");
                wait
            }
        }
    }

    /// Runs the job a claim brought and delivers its result.
    async fn run_claimed(
        &mut self,
        identity: &Identity,
        plane: &Plane,
        key: &NodeKey,
        job: &Value,
    ) -> Duration {
        // The job lock again (a recipe's repair may hold it for a moment); then the pairing
        // and the switch as they are now, since a `leave` may have run meanwhile. A job not
        // run here is lost on the plane when the next claim says `idle`.
        let locking = self.state.clone();
        let _lock = match tokio::task::spawn_blocking(move || locking.lock(state::JOB_LOCK)).await {
            Ok(Ok(lock)) => lock,
            Ok(Err(error)) => {
                self.set("state directory trouble", Some(error.to_string()));
                return STATE_TROUBLE_WAIT;
            }
            Err(error) => {
                self.set("state directory trouble", Some(error.to_string()));
                return STATE_TROUBLE_WAIT;
            }
        };
        let still_paired = matches!(
            self.state.identity(),
            Ok(Some(current)) if current.fingerprint == identity.fingerprint
                && matches!(current.pairing, Pairing::Paired { .. })
        );
        if !still_paired || self.state.has_marker(state::LEAVE_REQUEST) || !self.state.enabled() {
            debug!("the job is not run: the pairing or the switch changed while it was claimed");
            return Duration::ZERO;
        }
        let context = JobContext {
            state: &self.state,
            config: &self.config,
            plane,
            key,
            shutdown: self.shutdown.clone(),
        };
        let delivered = match jobs::handle(&context, job).await {
            Some(report) => {
                self.status.last_claim = Some(format!(
                    "job {} {}: {}",
                    report.job_id,
                    job["primitive"].as_str().unwrap_or("?"),
                    report.outcome
                ));
                jobs::post(&context, &report).await
            }
            None => Ok(()),
        };
        match delivered {
            Ok(()) => {
                let _ = self.state.remove(state::JOB_MARKER);
            }
            Err(Undelivered::UnknownKey) => {
                let _ = self.state.remove(state::JOB_MARKER);
                self.disconnect(identity);
            }
            // The marker stays: the next start says it is idle and the plane marks the job lost.
            Err(Undelivered::Stopped) => {}
        }
        Duration::ZERO
    }

    /// `401 unknown_key` after pairing: the plane forgot this key (an operator disconnected the
    /// node); the agent takes no work until it joins again.
    fn disconnect(&mut self, identity: &Identity) {
        let reason = "the management node no longer knows this key (401 unknown_key): the node was disconnected there".to_string();
        warn!(fingerprint = %identity.fingerprint, "{reason}; taking no work");
        let mut disconnected = identity.clone();
        disconnected.pairing = Pairing::Disconnected {
            since: Utc::now(),
            reason: reason.clone(),
        };
        if let Err(error) =
            join::save_if_current(&self.state, &disconnected, Some(&identity.fingerprint))
        {
            warn!(%error, "cannot record the disconnect");
        }
        self.set("disconnected", Some(reason));
    }
}

/// Returns (with why) once a claim in flight should be let go: `leave` asked for the job lock,
/// the identity went or changed, or the run switch went off.
async fn watch_for_change(state: &StateDir, fingerprint: &str) -> &'static str {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        if state.has_marker(state::LEAVE_REQUEST) {
            return "leave requested";
        }
        match state.identity() {
            Ok(Some(identity))
                if identity.fingerprint == fingerprint
                    && matches!(identity.pairing, Pairing::Paired { .. }) => {}
            _ => return "the identity changed",
        }
        if !state.enabled() {
            return "switched off";
        }
    }
}
