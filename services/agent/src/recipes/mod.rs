//! The recipe loop as it runs (spec "Recipes: what the agent does on its own clock"): on every
//! agent, paired or not, each applicable recipe is ticked on its own clock; the lines go to
//! its ledgers as they happen, a repair runs under the job lock with the job marker naming
//! `recipe <name>`, and a recipe that gives up opens a case. What the claim reports
//! (`recipes`, `cases`) is kept in [`Shared`] for the claim loop.

pub mod describe;
pub mod files;
pub mod host;
pub mod served;

use chrono::Utc;
use serde_json::{json, Value};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::{
    config::Config,
    domain::recipes::{
        bounded,
        case::{self, BodyParts, Case, Riding},
        ledger::{Event, Memory, Outcome},
        registry::{self, Cadence, Placement, Recipe, RECIPES},
        tick::{plan, Hold, Step},
        Check, Mode, Verdict, MAX_DETAIL_BYTES,
    },
    domain::vocabulary,
    state::{self, StateDir},
    words,
};
use capstan_events::agent_channel::recipes::RecipeMode;
use capstan_events::Word as _;
use files::Ledgers;

/// After a repair, the check is asked again this many times, this far apart, before the
/// attempt is called failed (a restarted service takes a moment to answer).
const VERIFY_TRIES: u32 = 5;
const VERIFY_EVERY: Duration = Duration::from_secs(1);
/// An hourly recipe (certificate_expiry) is checked at most this often at the default tick.
const HOURLY: Duration = Duration::from_secs(3600);

/// How long an hourly recipe waits between checks: an hour at the default tick, and the same
/// number of ticks (six) at a shorter one (tests), as the attempt waits are. A tick that lands
/// a little early still counts (AG-43's tolerance).
pub fn hourly_wait(tick: Duration) -> Duration {
    let ticks =
        (HOURLY.as_secs_f64() / crate::domain::recipes::DEFAULT_TICK.as_secs_f64()).max(1.0);
    let wait = tick.mul_f64(ticks);
    wait.saturating_sub(tick / crate::domain::recipes::EARLY_TICK_TOLERANCE_DIVISOR)
}

/// One recipe as the claim reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reported {
    pub name: &'static str,
    pub mode: RecipeMode,
    /// Its hold marker as the last tick (or the start) found it.
    pub hold: Hold,
    pub verdict: Option<Verdict>,
    /// Its most recent case, open or closed.
    pub case: Option<Case>,
    /// The case's body still rides (no claim carrying it has succeeded yet).
    pub body_pending: bool,
}

/// What the loop tells the claim loop, shared between them.
#[derive(Debug, Clone, Default)]
pub struct Shared(Arc<Mutex<Vec<Reported>>>);

/// The bodies a claim carried: (recipe, case id).
pub type Carried = Vec<(String, i64)>;

impl Shared {
    fn set(&self, reported: Reported) {
        let mut all = self.0.lock().expect("the recipe report is not poisoned");
        match all.iter_mut().find(|entry| entry.name == reported.name) {
            Some(entry) => *entry = reported,
            None => all.push(reported),
        }
    }

    fn get(&self, name: &str) -> Option<Reported> {
        let all = self.0.lock().expect("the recipe report is not poisoned");
        all.iter().find(|entry| entry.name == name).cloned()
    }

    /// The claim's `recipes` (PROTOCOL.md: `[{"name", "mode", "verdict"}]`, with each one's
    /// `hold` and `hold_reason` besides, issue 27) and `cases`
    /// (keyed by `recipe:<name>`, absent while no recipe has had a case), and which bodies
    /// ride in it.
    pub fn claim_fields(&self) -> (Value, Option<Value>, Carried) {
        let all = self
            .0
            .lock()
            .expect("the recipe report is not poisoned")
            .clone();
        let recipes: Vec<Value> = all
            .iter()
            .map(|entry| {
                let (hold, hold_reason) = entry.hold.reported();
                json!({"name": entry.name, "mode": entry.mode.as_str(),
                       "verdict": entry.verdict.map(Verdict::as_str),
                       "hold": hold.as_str(), "hold_reason": hold_reason})
            })
            .collect();
        let riding: Vec<Riding> = all
            .iter()
            .filter_map(|entry| {
                entry.case.as_ref().map(|case| Riding {
                    recipe: entry.name,
                    case,
                    body_pending: entry.body_pending,
                })
            })
            .collect();
        if riding.is_empty() {
            return (Value::Array(recipes), None, Vec::new());
        }
        let (cases, with_body) = case::cases_field(&riding);
        let carried = with_body
            .into_iter()
            .filter_map(|recipe| {
                let id = all.iter().find(|e| e.name == recipe)?.case.as_ref()?.id;
                Some((recipe, id))
            })
            .collect();
        (Value::Array(recipes), Some(cases), carried)
    }

    /// A claim carrying these bodies succeeded: they ride no more (AG-60).
    pub fn delivered(&self, carried: &Carried) {
        let mut all = self.0.lock().expect("the recipe report is not poisoned");
        for (recipe, id) in carried {
            if let Some(entry) = all.iter_mut().find(|entry| entry.name == recipe) {
                if entry.case.as_ref().is_some_and(|case| case.id == *id) {
                    entry.body_pending = false;
                }
            }
        }
    }
}

/// Where the recipes apply on this node (AG-46).
pub fn placement(config: &Config) -> Placement {
    let site_is_checkout = config
        .site_root
        .as_ref()
        .is_some_and(|root| std::fs::symlink_metadata(root.join(".git")).is_ok());
    // AG-54: a Docker engine must answer on the socket; a docker client alone is no engine.
    let docker_engine = match words::docker::engine_answers(&config.docker_socket) {
        Ok(()) => true,
        Err(why) => {
            tracing::debug!(%why, "no Docker engine answers");
            false
        }
    };
    Placement {
        has_site: config.site_root.is_some(),
        in_container: std::path::Path::new("/.dockerenv").exists()
            || std::path::Path::new("/run/.containerenv").exists(),
        site_is_checkout,
        docker_engine,
    }
}

/// AG-46: whether `recipe` applies on this node: its scope (the registry's rule), then what
/// the machine has (fail2ban where it is installed).
pub fn applies(recipe: &Recipe, placement: &Placement) -> Result<(), registry::NotApplicable> {
    registry::applies(recipe, placement)?;
    host::applies(recipe)
}

/// Why a recipe's tick stopped: its ledger or the state directory failed.
#[derive(Debug, thiserror::Error)]
pub enum TickError {
    #[error(transparent)]
    Ledger(#[from] files::LedgerError),
    #[error(transparent)]
    State(#[from] state::StateError),
}

/// The loop.
pub struct Loop {
    state: StateDir,
    config: Config,
    ledgers: Ledgers,
    shared: Shared,
    active: Vec<&'static Recipe>,
    last_checked: HashMap<&'static str, Instant>,
    /// Whether the loop is the agent's or a test's with its own clock: the tick's time.
    mode: Mode,
}

impl Loop {
    /// Reads each recipe's ledger, reports the ones that do not apply (one journal line and
    /// one ledger line each, AG-46), and writes `interrupted` for an attempt the last run did
    /// not finish (AG-47).
    pub fn start(state: StateDir, config: Config, shared: Shared) -> Loop {
        let ledgers = Ledgers::new(&state, config.site_root.as_deref());
        let placement = placement(&config);
        let mode = Mode::compiled();
        let mut active = Vec::new();
        for recipe in RECIPES {
            if let Err(why) = registry::register(recipe) {
                warn!(recipe = recipe.name, %why, "a recipe that breaks the registry rules is not run");
                continue;
            }
            match applies(recipe, &placement) {
                Err(reason) => {
                    info!(recipe = recipe.name, %reason, "recipe not applicable here");
                    if let Err(why) = ledgers.write(
                        recipe.name,
                        Utc::now(),
                        Event::NotApplicable { reason: reason.0 },
                    ) {
                        warn!(recipe = recipe.name, %why, "cannot write the recipe ledger");
                    }
                    shared.set(Reported {
                        name: recipe.name,
                        mode: RecipeMode::NotApplicable,
                        hold: Hold::None,
                        verdict: None,
                        case: None,
                        body_pending: false,
                    });
                }
                Ok(()) => {
                    let memory = ledgers.read(recipe.name).unwrap_or_else(|why| {
                        warn!(recipe = recipe.name, %why, "cannot read the recipe ledger");
                        Memory::default()
                    });
                    if let Some(attempt) = memory.interrupted() {
                        warn!(recipe = recipe.name, attempt = attempt.attempt, "the last run stopped during this recipe's repair; the attempt counts as failed");
                        let _ = ledgers.write(
                            recipe.name,
                            Utc::now(),
                            Event::Outcome {
                                attempt: attempt.attempt,
                                outcome: Outcome::Interrupted,
                                detail: "the agent stopped while the repair ran".into(),
                            },
                        );
                    }
                    // An open case's body rides again after a restart (the plane keeps the
                    // first it took).
                    let body_pending = memory.open_case().is_some_and(|case| case.body.is_some());
                    shared.set(Reported {
                        name: recipe.name,
                        mode: mode.reported(),
                        hold: ledgers.hold(recipe.name),
                        verdict: memory.verdict,
                        case: memory.case.clone(),
                        body_pending,
                    });
                    active.push(recipe);
                }
            }
        }
        Loop {
            state,
            config,
            ledgers,
            shared,
            active,
            last_checked: HashMap::new(),
            mode,
        }
    }

    /// Ticks every applicable recipe until `shutdown`, one tick at once and then every
    /// `recipe_tick`.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let tick = self.config.recipe_tick;
        info!(
            tick_s = tick.as_secs_f64(),
            recipes = self.active.len(),
            "recipe loop running"
        );
        let mut next = tokio::time::Instant::now();
        loop {
            self.tick().await;
            next += tick;
            let now = tokio::time::Instant::now();
            if next < now {
                next = now;
            }
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
        }
    }

    /// One tick of every applicable recipe.
    pub async fn tick(&mut self) {
        let hourly = hourly_wait(self.config.recipe_tick);
        for recipe in self.active.clone() {
            if recipe.cadence == Cadence::Hourly
                && self
                    .last_checked
                    .get(recipe.name)
                    .is_some_and(|at| at.elapsed() < hourly)
            {
                continue;
            }
            self.last_checked.insert(recipe.name, Instant::now());
            if let Err(why) = self.tick_one(recipe).await {
                warn!(recipe = recipe.name, %why, "the recipe's tick could not be recorded");
            }
        }
    }

    async fn tick_one(&mut self, recipe: &'static Recipe) -> Result<(), TickError> {
        let mut memory = self.ledgers.read(recipe.name)?;
        let check = host::check(recipe, &self.config).await;
        let hold = self.ledgers.hold(recipe.name);
        let now = Utc::now();
        let steps = plan(recipe, &memory, &check, &hold, now, self.config.recipe_tick);
        let before = memory.case.as_ref().map(|case| case.id);
        let was_open = memory.open_case().is_some();
        for step in steps {
            match step {
                Step::Write(event) => {
                    let line = self.ledgers.write(recipe.name, now, event)?;
                    memory.take(&line);
                }
                Step::Escalate { id, summary } => {
                    let body = self.compose_body(recipe, &memory, &check).await;
                    let case = Case::open(id, now, summary, Some(body));
                    warn!(
                        recipe = recipe.name,
                        case = id,
                        "the recipe gave up: a case is open"
                    );
                    let line = self
                        .ledgers
                        .write(recipe.name, now, Event::Escalation { case })?;
                    memory.take(&line);
                }
                Step::Repair { attempt } => {
                    self.attempt(recipe, &mut memory, &check, attempt).await?;
                }
            }
        }
        let mut reported = self.shared.get(recipe.name).unwrap_or(Reported {
            name: recipe.name,
            mode: self.mode.reported(),
            hold: Hold::None,
            verdict: None,
            case: None,
            body_pending: false,
        });
        let after = memory.case.as_ref().map(|case| case.id);
        if after != before {
            reported.body_pending = memory.case.as_ref().is_some_and(|case| case.body.is_some());
        }
        reported.verdict = memory.verdict;
        reported.case = memory.case.clone();
        reported.hold = hold;
        // AG-61: rendered on every tick that leaves the case open (a failing tick: a pass
        // closes it), and once more when the tick closed it, so the site's notice goes.
        let closed_now = was_open && memory.open_case().is_none();
        if memory.open_case().is_some() || closed_now {
            self.render(recipe, &reported);
        }
        self.shared.set(reported);
        Ok(())
    }

    /// AG-61: `{site}/cache/recipes/<recipe>.case.json`, written whole and never read back:
    /// the case with its body, when the agent rendered it, and its delivery — `management
    /// node` once a claim carrying the case's body has succeeded (the plane has it), `local`
    /// while it has not (an unpaired node, a plane not reached yet, or, after a restart, until
    /// the next claim carries it again).
    fn render(&self, recipe: &Recipe, reported: &Reported) {
        let Some(case) = &reported.case else {
            return;
        };
        let paired = matches!(
            self.state.identity(),
            Ok(Some(identity)) if matches!(identity.pairing, crate::domain::join::Pairing::Paired { .. })
        );
        let rendered = case::rendered(
            recipe.name,
            case,
            case::delivery(paired, reported.body_pending),
            Utc::now(),
        );
        if let Err(why) = self.ledgers.render_case(recipe.name, &rendered) {
            tracing::debug!(recipe = recipe.name, %why, "the case could not be rendered outward");
        }
    }

    /// One attempt (AG-42, AG-43, AG-48): report-only ledgers it and runs nothing; otherwise
    /// the job lock (`busy` when a job holds it), the job marker, the attempt line, the repair,
    /// the check again, the outcome line.
    async fn attempt(
        &self,
        recipe: &'static Recipe,
        memory: &mut Memory,
        check: &Check,
        attempt: u32,
    ) -> Result<(), TickError> {
        let word = recipe.repair_word.unwrap_or("none").to_string();
        let started = Event::Attempt {
            attempt,
            word,
            target: check.target.clone(),
        };
        if self.mode == Mode::ReportOnly {
            for event in [
                started,
                Event::Outcome {
                    attempt,
                    outcome: Outcome::ReportOnly,
                    detail: "report-only: nothing ran".into(),
                },
            ] {
                let line = self.ledgers.write(recipe.name, Utc::now(), event)?;
                memory.take(&line);
            }
            return Ok(());
        }
        let lock = match self.state.try_lock(state::JOB_LOCK) {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                info!(
                    recipe = recipe.name,
                    "a job is running; the repair waits for the next tick"
                );
                let line = self.ledgers.write(recipe.name, Utc::now(), Event::Busy)?;
                memory.take(&line);
                return Ok(());
            }
            Err(error) => return Err(error.into()),
        };
        self.state.write(
            state::JOB_MARKER,
            format!("{}\nrecipe {}\n", std::process::id(), recipe.name).as_bytes(),
            0o600,
        )?;
        let line = self.ledgers.write(recipe.name, Utc::now(), started)?;
        memory.take(&line);
        info!(recipe = recipe.name, attempt, target = ?check.target, "recipe repair running");
        let repaired = host::repair(recipe, check.target.as_deref(), &self.config).await;
        let (outcome, detail) = match repaired {
            Err(why) => (Outcome::Failed, why),
            Ok(did) => self.verified(recipe, did).await,
        };
        info!(
            recipe = recipe.name,
            attempt,
            outcome = outcome.as_str(),
            "recipe repair ended"
        );
        let line = self.ledgers.write(
            recipe.name,
            Utc::now(),
            Event::Outcome {
                attempt,
                outcome,
                detail: bounded(&detail, MAX_DETAIL_BYTES),
            },
        )?;
        memory.take(&line);
        let _ = self.state.remove(state::JOB_MARKER);
        drop(lock);
        Ok(())
    }

    /// A repair that ran, checked again (up to `VERIFY_TRIES` times): repaired only when the
    /// check now passes.
    async fn verified(&self, recipe: &'static Recipe, did: String) -> (Outcome, String) {
        let mut verified = host::check(recipe, &self.config).await;
        for _ in 1..VERIFY_TRIES {
            if verified.verdict == Verdict::Pass {
                break;
            }
            tokio::time::sleep(VERIFY_EVERY).await;
            verified = host::check(recipe, &self.config).await;
        }
        if verified.verdict == Verdict::Pass {
            (
                Outcome::Repaired,
                format!("{}; then: {}", did.trim(), verified.detail),
            )
        } else {
            (
                Outcome::Failed,
                format!("the repair ran, and still: {}", verified.detail),
            )
        }
    }

    /// AG-59: the case's body, composed once when the escalation opens.
    async fn compose_body(&self, recipe: &Recipe, memory: &Memory, check: &Check) -> Value {
        let report = words::host::host_report(&self.config).await;
        let (recipes, _, _) = self.shared.claim_fields();
        case::compose_body(BodyParts {
            recipe: recipe.name,
            mode: self.mode,
            check: &check.detail,
            attempts: &memory.attempts,
            host_report: report.result,
            vocabulary: vocabulary::names(),
            recipes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::recipes::ledger::Line;

    /// AG-56: certificate_expiry is checked hourly: six ten-minute ticks, a tick that lands a
    /// little early counting; a test's shorter tick shortens it in proportion.
    #[test]
    fn ag_56_the_hourly_cadence_is_six_ticks_with_the_early_tolerance() {
        assert_eq!(
            hourly_wait(Duration::from_secs(600)),
            Duration::from_secs(3540)
        );
        assert_eq!(
            hourly_wait(Duration::from_secs(1)),
            Duration::from_millis(5900)
        );
    }

    fn scratch() -> (tempfile::TempDir, StateDir, Config) {
        let parent = tempfile::tempdir().unwrap();
        let state = StateDir::open(&parent.path().join("state")).unwrap();
        let site = parent.path().join("site");
        std::fs::create_dir(&site).unwrap();
        let config = Config {
            site_root: Some(site),
            ..Config::default()
        };
        (parent, state, config)
    }

    /// AG-61 on the real loop: service_health against a web server its supervisor cannot
    /// restart spends its attempts and opens a case; `{site}/cache/recipes/service_health.case.json`
    /// is then written whole (a new file each time) on every failing tick, with delivery
    /// `local` on this unpaired node, and rendered once more, closed, when the check passes.
    #[tokio::test]
    async fn ag_61_the_case_is_rendered_outward_on_every_failing_tick_and_once_closed() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let (parent, state, mut config) = scratch();
        let dir = parent.path();
        let supervisorctl = dir.join("supervisorctl");
        std::fs::write(
            &supervisorctl,
            format!(
                "#!/bin/sh\n[ \"$2\" = nginx ] || exit 4\ncase \"$1\" in status) [ -f {up} ] && exit 0; exit 3 ;; restart) exit 7 ;; esac\n",
                up = dir.join("up").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&supervisorctl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let site = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = site.local_addr().unwrap().port();
        let answering = dir.join("up");
        tokio::spawn({
            let answering = answering.clone();
            async move {
                loop {
                    let Ok((mut socket, _)) = site.accept().await else {
                        return;
                    };
                    let status = if answering.exists() {
                        "200 OK"
                    } else {
                        "503 Down"
                    };
                    let _ = tokio::io::AsyncWriteExt::write_all(
                        &mut socket,
                        format!("HTTP/1.0 {status}\r\n\r\n").as_bytes(),
                    )
                    .await;
                }
            }
        });
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        config.postgres = closed.local_addr().unwrap().to_string();
        drop(closed);
        config.services.app_unit = None;
        config.services.site_url = format!("http://127.0.0.1:{port}/");
        config.services.supervisorctl = Some(supervisorctl);
        config.recipe_tick = Duration::from_millis(20);
        let rendered = config
            .site_root
            .clone()
            .unwrap()
            .join("cache/recipes/service_health.case.json");
        let mut recipes = Loop::start(state.clone(), config.clone(), Shared::default());
        let ledgers = Ledgers::new(&state, config.site_root.as_deref());
        let mut ticks = 0;
        while ledgers
            .read("service_health")
            .unwrap()
            .open_case()
            .is_none()
        {
            assert!(
                !rendered.exists(),
                "nothing is rendered before the case opens"
            );
            ticks += 1;
            assert!(ticks < 500, "{:?}", ledgers.read("service_health"));
            recipes.tick().await;
            tokio::time::sleep(config.recipe_tick).await;
        }
        let first: Value = serde_json::from_slice(&std::fs::read(&rendered).unwrap()).unwrap();
        assert_eq!(first["delivery"], "local");
        assert_eq!(first["case"]["state"], "open");
        assert_eq!(first["case"]["body"]["recipe"], "service_health");
        assert!(first["rendered_at"].is_string());
        let inode = std::fs::metadata(&rendered).unwrap().ino();
        recipes.tick().await;
        let second = std::fs::metadata(&rendered).unwrap();
        assert_ne!(second.ino(), inode, "rendered again, whole");
        let again: Value = serde_json::from_slice(&std::fs::read(&rendered).unwrap()).unwrap();
        assert_eq!(again["case"]["notes"], 1);

        std::fs::write(&answering, b"").unwrap();
        recipes.tick().await;
        let closed: Value = serde_json::from_slice(&std::fs::read(&rendered).unwrap()).unwrap();
        assert_eq!(closed["case"]["state"], "closed");
        let inode = std::fs::metadata(&rendered).unwrap().ino();
        recipes.tick().await;
        assert_eq!(
            std::fs::metadata(&rendered).unwrap().ino(),
            inode,
            "a passing tick after the close renders nothing"
        );
    }

    /// AG-47: a repair that killed the agent left its attempt line and no outcome; the next
    /// start writes the outcome `interrupted`, so the attempt is spent.
    #[test]
    fn ag_47_an_attempt_the_last_run_never_finished_is_written_interrupted_at_start() {
        let (_parent, state, config) = scratch();
        let ledgers = Ledgers::new(&state, config.site_root.as_deref());
        let at = Utc::now();
        for event in [
            Event::Check {
                verdict: Verdict::Fail,
                detail: "down".into(),
            },
            Event::Check {
                verdict: Verdict::Fail,
                detail: "down".into(),
            },
            Event::Attempt {
                attempt: 1,
                word: "restart_unit".into(),
                target: Some("nginx".into()),
            },
        ] {
            ledgers.write("service_health", at, event).unwrap();
        }
        let _loop = Loop::start(state.clone(), config, Shared::default());
        let memory = ledgers.read("service_health").unwrap();
        assert_eq!(memory.attempts.len(), 1);
        assert_eq!(memory.attempts[0].outcome, Some(Outcome::Interrupted));
        assert!(memory.interrupted().is_none());
    }

    /// AG-46: a recipe that does not apply is reported `not-applicable` and ledgered once
    /// with its reason; AG-60: a new case's body rides until a claim carrying it succeeds.
    #[test]
    fn ag_46_not_applicable_is_reported_and_ag_60_a_body_rides_until_delivered() {
        let (_parent, state, mut config) = scratch();
        config.site_root = None;
        let shared = Shared::default();
        let _loop = Loop::start(state.clone(), config.clone(), shared.clone());
        let (recipes, cases, _) = shared.claim_fields();
        let health = recipes
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["name"] == "service_health")
            .unwrap()
            .clone();
        assert_eq!(health["mode"], "not-applicable");
        assert_eq!(health["verdict"], Value::Null);
        assert!(cases.is_none());
        let ledgers = Ledgers::new(&state, None);
        let text = std::fs::read_to_string(state.file("ledger/service_health.jsonl")).unwrap();
        let line: Line = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert!(
            matches!(line.event, Event::NotApplicable { reason } if reason.contains("no site"))
        );
        assert_eq!(ledgers.read("service_health").unwrap(), Memory::default());

        let case = Case::open(
            1,
            Utc::now(),
            "full".into(),
            Some(json!({"recipe": "disk_headroom"})),
        );
        shared.set(Reported {
            name: "disk_headroom",
            mode: RecipeMode::Armed,
            hold: Hold::None,
            verdict: Some(Verdict::Fail),
            case: Some(case),
            body_pending: true,
        });
        let (_, cases, carried) = shared.claim_fields();
        assert_eq!(
            cases.unwrap()["recipe:disk_headroom"]["body"]["recipe"],
            "disk_headroom"
        );
        shared.delivered(&carried);
        let (_, cases, carried) = shared.claim_fields();
        let cases = cases.unwrap();
        assert!(
            cases["recipe:disk_headroom"].get("body").is_none(),
            "{cases}"
        );
        assert_eq!(
            cases["recipe:disk_headroom"]["state"], "open",
            "the summary keeps riding"
        );
        assert!(carried.is_empty());
    }
}
