//! The SQL of staged rollouts (`migrations/rollouts/0002_rollouts.sql`): the node projection,
//! rollouts and their steps read into the engine's types (an unknown word is an error), and
//! [`advance`], which runs the engine on one rollout under its row lock and writes what it
//! decided — the changed rows, the job requests and the events — in the caller's transaction.

use std::collections::HashMap;

use capstan_events::agent_channel::{CancelJob, RequestJob};
use capstan_events::rollouts::staged::{
    LeftOutView, ProbeAnswer, ProbeView, RolloutView, StageView, StepView,
};
use capstan_events::rollouts::{
    RolloutFinished, RolloutHalted, RolloutStarted, RolloutStepFinished,
};
use capstan_events::Envelope;
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};
use sqlx::types::Json;
use uuid::Uuid;

use crate::domain::engine::{
    self, Budget, Effect, Facts, Halt, Kind, Phase, Rollout, Slot, StagePolicy, State, Step,
    Verdict,
};
use crate::domain::plan::{machine_key, Candidate, LeftOut};
use crate::domain::verdict::{Finished, Outcome, Probe, ProbePage, Viewer};
use capstan_events::Word as _;

type Result<T> = std::result::Result<T, StoreError>;

/// Who the rollouts service asks as.
pub const REQUESTED_BY: &str = "service/rollouts";

/// A stored row the engine cannot read (a word outside the contract's): never guessed at.
fn corrupt(what: impl Into<String>) -> StoreError {
    StoreError::Database(format!("an unreadable rollouts row: {}", what.into()))
}

// ---- the node projection ----

pub async fn node_approved(
    connection: &mut PgConnection,
    node: i64,
    name: &str,
    site_root: Option<&str>,
    container: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO nodes (node_id, name, site_root, container, paired)
         VALUES ($1, $2, $3, $4, TRUE)
         ON CONFLICT (node_id) DO UPDATE
         SET name = EXCLUDED.name, site_root = EXCLUDED.site_root,
             container = EXCLUDED.container, paired = TRUE",
    )
    .bind(node)
    .bind(name)
    .bind(site_root)
    .bind(container)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

pub async fn node_reported(
    connection: &mut PgConnection,
    node: i64,
    agent_version: &str,
    vocabulary: &[String],
    site_root: Option<&str>,
) -> Result<()> {
    // A report without a site root (a siteless node, an event from before the field) keeps
    // the root known from the join or an earlier report.
    sqlx::query(
        "UPDATE nodes SET agent_version = $2, vocabulary = $3, site_root = COALESCE($4, site_root)
         WHERE node_id = $1",
    )
    .bind(node)
    .bind(agent_version)
    .bind(vocabulary)
    .bind(site_root)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

pub async fn placement_changed(
    connection: &mut PgConnection,
    node: i64,
    host: Option<i64>,
) -> Result<()> {
    sqlx::query("UPDATE nodes SET host_node_id = $2 WHERE node_id = $1")
        .bind(node)
        .bind(host)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

pub async fn node_unpaired(connection: &mut PgConnection, node: i64) -> Result<()> {
    sqlx::query("UPDATE nodes SET paired = FALSE WHERE node_id = $1")
        .bind(node)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

pub async fn incident_opened(
    connection: &mut PgConnection,
    incident: i64,
    node: i64,
    source: &str,
    title: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO incidents_opened (incident_id, node_id, source, title, opened_at)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (incident_id) DO NOTHING",
    )
    .bind(incident)
    .bind(node)
    .bind(source)
    .bind(title)
    .bind(at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

type NodeRow = (
    i64,
    String,
    Option<String>,
    Option<i64>,
    bool,
    Vec<String>,
    bool,
);

fn candidate(row: NodeRow) -> Candidate {
    let (node_id, name, site_root, host, paired, vocabulary, rollout_first) = row;
    Candidate {
        node_id,
        name,
        machine: machine_key(node_id, host),
        hosts_site: site_root.is_some(),
        removed: !paired,
        enabled: paired,
        vocabulary,
        rollout_first,
        management: false,
    }
}

/// The nodes named, as the planner sees them; `None` for every node known.
pub async fn candidates(
    connection: &mut PgConnection,
    nodes: Option<&[i64]>,
) -> Result<Vec<Candidate>> {
    let rows: Vec<NodeRow> = sqlx::query_as(
        "SELECT node_id, name, site_root, host_node_id, paired, vocabulary, rollout_first
         FROM nodes WHERE $1::BIGINT[] IS NULL OR node_id = ANY($1) ORDER BY name, node_id",
    )
    .bind(nodes)
    .fetch_all(&mut *connection)
    .await?;
    Ok(rows.into_iter().map(candidate).collect())
}

// ---- rollouts ----

fn budget_row(budget: Budget) -> (&'static str, i32) {
    match budget {
        Budget::Nodes(nodes) => ("nodes", i32::try_from(nodes).unwrap_or(i32::MAX)),
        Budget::Percent(percent) => ("percent", i32::from(percent)),
    }
}

/// Whether another rollout holds the turn (RO-16).
pub async fn one_under_way(connection: &mut PgConnection) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM rollouts WHERE state IN ('running', 'paused', 'halting')",
    )
    .fetch_optional(&mut *connection)
    .await?)
}

/// A new rollout, what it starts with
pub struct NewRollout<'a> {
    pub kind: Kind,
    pub version: &'a str,
    pub pages: &'a [ProbePage],
    pub policies: &'a [StagePolicy],
    pub stages: &'a [Vec<Candidate>],
    pub left_out: &'a [LeftOut],
    pub started_by: &'a str,
}

/// Stores a rollout and its steps with its `started` event; the caller then advances it.
pub async fn insert(
    connection: &mut PgConnection,
    new: &NewRollout<'_>,
    now: DateTime<Utc>,
) -> Result<i64> {
    let pages: Vec<String> = new
        .pages
        .iter()
        .map(|page| format!("{} {}", page.viewer.as_str(), page.path))
        .collect();
    let left_out: Vec<LeftOutView> = new
        .left_out
        .iter()
        .map(|left| LeftOutView {
            node_id: left.node_id,
            name: left.name.clone(),
            reason: left.reason.clone(),
        })
        .collect();
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO rollouts (kind, version, state, stage, pages, left_out, started_by, started_at)
         VALUES ($1, $2, 'running', 0, $3, $4, $5, $6) RETURNING id",
    )
    .bind(new.kind.as_str())
    .bind(new.version)
    .bind(&pages)
    .bind(Json(&left_out))
    .bind(new.started_by)
    .bind(now)
    .fetch_one(&mut *connection)
    .await?;
    for (stage, policy) in new.policies.iter().enumerate() {
        let (kind, budget) = budget_row(policy.budget);
        sqlx::query(
            "INSERT INTO rollout_stages (rollout_id, stage, budget_kind, budget, soak_secs)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(stage as i32)
        .bind(kind)
        .bind(budget)
        .bind(i32::try_from(policy.soak.num_seconds()).unwrap_or(i32::MAX))
        .execute(&mut *connection)
        .await?;
    }
    // Every step in one statement: a rollout of 1,000 nodes is one round trip, not 1,000.
    let steps = new
        .stages
        .iter()
        .enumerate()
        .flat_map(|(stage, nodes)| nodes.iter().map(move |node| (stage, node)));
    let (mut node_ids, mut machines, mut stages, mut preflights) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (stage, node) in steps {
        node_ids.push(node.node_id);
        machines.push(node.machine.clone());
        stages.push(stage as i32);
        preflights.push(new.kind == Kind::Release && node.has_preflight());
    }
    sqlx::query(
        "INSERT INTO rollout_steps (rollout_id, node_id, machine, stage, phase, verdict,
                                    has_preflight, updated_at)
         SELECT $1, node_id, machine, stage, 'waiting', 'pending', has_preflight, $6
           FROM UNNEST($2::bigint[], $3::text[], $4::int[], $5::bool[])
                AS step(node_id, machine, stage, has_preflight)",
    )
    .bind(id)
    .bind(&node_ids)
    .bind(&machines)
    .bind(&stages)
    .bind(&preflights)
    .bind(now)
    .execute(&mut *connection)
    .await?;
    let event = RolloutStarted {
        rollout_id: id,
        kind: new.kind.as_str().into(),
        version: new.version.into(),
        stages: new
            .stages
            .iter()
            .map(|nodes| nodes.iter().map(|node| node.node_id).collect())
            .collect(),
        started_by: new.started_by.into(),
    };
    outbox::push(
        connection,
        Envelope::new(event, Some(format!("rollout/{id}"))),
    )
    .await?;
    Ok(id)
}

type RolloutRow = (
    i64,
    String,
    String,
    String,
    i32,
    Vec<String>,
    Option<DateTime<Utc>>,
    Option<i64>,
    Option<String>,
);

fn page(text: &str) -> Result<ProbePage> {
    let (viewer, path) = text
        .split_once(' ')
        .ok_or_else(|| corrupt(format!("probe page {text:?}")))?;
    Ok(ProbePage {
        viewer: Viewer::parse(viewer).ok_or_else(|| corrupt(format!("viewer {viewer:?}")))?,
        path: path.to_string(),
    })
}

async fn read_rollout(
    connection: &mut PgConnection,
    id: i64,
    lock: bool,
) -> Result<Option<Rollout>> {
    let sql = format!(
        "SELECT id, kind, version, state, stage, pages, soak_until, halt_node_id, halt_reason
         FROM rollouts WHERE id = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    let Some(row): Option<RolloutRow> = sqlx::query_as(&sql)
        .bind(id)
        .fetch_optional(&mut *connection)
        .await?
    else {
        return Ok(None);
    };
    let (id, kind, version, state, stage, pages, soak_until, halt_node, halt_reason) = row;
    let stages: Vec<(String, i32, i32)> = sqlx::query_as(
        "SELECT budget_kind, budget, soak_secs FROM rollout_stages WHERE rollout_id = $1 ORDER BY stage",
    )
    .bind(id)
    .fetch_all(&mut *connection)
    .await?;
    let stages = stages
        .into_iter()
        .map(|(kind, budget, soak)| {
            let budget = match kind.as_str() {
                "nodes" => Budget::Nodes(u32::try_from(budget).unwrap_or(0)),
                "percent" => Budget::Percent(u8::try_from(budget).unwrap_or(0)),
                other => return Err(corrupt(format!("budget kind {other:?}"))),
            };
            Ok(StagePolicy {
                budget,
                soak: Duration::seconds(i64::from(soak)),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Rollout {
        id,
        kind: Kind::parse(&kind).ok_or_else(|| corrupt(format!("rollout kind {kind:?}")))?,
        version,
        state: State::parse(&state).ok_or_else(|| corrupt(format!("rollout state {state:?}")))?,
        stage: usize::try_from(stage).unwrap_or(0),
        stages,
        pages: pages.iter().map(|text| page(text)).collect::<Result<_>>()?,
        soak_until,
        halt: match (halt_node, halt_reason) {
            (Some(node_id), Some(reason)) => Some(Halt { node_id, reason }),
            _ => None,
        },
    }))
}

type StepRow = (
    i64,
    i64,
    String,
    i32,
    String,
    String,
    Option<String>,
    Option<DateTime<Utc>>,
    i32,
    bool,
    Vec<String>,
    Json<Vec<Option<Value>>>,
    Json<Vec<Option<Value>>>,
    Option<String>,
);

const STEP_COLUMNS: &str =
    "id, node_id, machine, stage, phase, verdict, reason, phase_since, attempt,
     has_preflight, slots, probes_before, probes_after, waiting_on";

fn probe_value(probe: &Option<Probe>) -> Option<Value> {
    probe.as_ref().map(|probe| {
        json!({"status": probe.status, "errors": probe.errors, "failed_assets": probe.failed_assets})
    })
}

fn probes(values: &[Option<Value>]) -> Vec<Option<Probe>> {
    values
        .iter()
        .map(|value| value.as_ref().and_then(Probe::read))
        .collect()
}

fn step(row: StepRow, answers: &HashMap<String, Finished>) -> Result<Step> {
    let (
        id,
        node_id,
        machine,
        stage,
        phase,
        verdict,
        reason,
        phase_since,
        attempt,
        has_preflight,
        slots,
        before,
        after,
        waiting_on,
    ) = row;
    Ok(Step {
        id,
        node_id,
        machine,
        stage: usize::try_from(stage).unwrap_or(0),
        phase: Phase::parse(&phase).ok_or_else(|| corrupt(format!("step phase {phase:?}")))?,
        verdict: Verdict::parse(&verdict)
            .ok_or_else(|| corrupt(format!("step verdict {verdict:?}")))?,
        reason,
        phase_since,
        attempt: u32::try_from(attempt).unwrap_or(0),
        has_preflight,
        slots: slots
            .into_iter()
            .map(|key| Slot {
                answer: answers.get(&key).cloned(),
                key,
            })
            .collect(),
        before: probes(&before.0),
        after: probes(&after.0),
        waiting_on,
    })
}

/// The answers of the rollout's jobs: all of them, or (`steps`) those of these steps alone.
async fn answers(
    connection: &mut PgConnection,
    rollout: i64,
    steps: Option<&[i64]>,
) -> Result<HashMap<String, Finished>> {
    let rows: Vec<(String, String, Option<Value>, Option<String>)> = sqlx::query_as(
        "SELECT key, outcome, result, reason FROM rollout_jobs
         WHERE rollout_id = $1 AND ($2::BIGINT[] IS NULL OR step_id = ANY($2))
           AND outcome IS NOT NULL",
    )
    .bind(rollout)
    .bind(steps)
    .fetch_all(&mut *connection)
    .await?;
    rows.into_iter()
        .map(|(key, outcome, result, reason)| {
            let outcome = Outcome::parse(&outcome)
                .ok_or_else(|| corrupt(format!("job outcome {outcome:?}")))?;
            Ok((
                key,
                Finished {
                    outcome,
                    result,
                    reason,
                },
            ))
        })
        .collect()
}

async fn read_steps(connection: &mut PgConnection, rollout: i64) -> Result<Vec<Step>> {
    let answers = answers(connection, rollout, None).await?;
    let rows: Vec<StepRow> = sqlx::query_as(&format!(
        "SELECT {STEP_COLUMNS} FROM rollout_steps WHERE rollout_id = $1 ORDER BY stage, id"
    ))
    .bind(rollout)
    .fetch_all(&mut *connection)
    .await?;
    rows.into_iter().map(|row| step(row, &answers)).collect()
}

/// The steps an advance can move without leaving `rollout`'s stage: the current stage's, and
/// every step in flight in any stage (an apply still judged after a stop; a machine busy with
/// another stage's step), with their answers alone. In the order [`read_steps`] reads them,
/// whose subsequence they are. A rollout's other steps (the stages before, done; the stages
/// after, waiting) are read only when the stage or the state changes
/// (`migrations/rollouts/0006_rollout_steps_in_flight.sql`).
async fn read_working_steps(connection: &mut PgConnection, rollout: &Rollout) -> Result<Vec<Step>> {
    let rows: Vec<StepRow> = sqlx::query_as(&format!(
        "SELECT {STEP_COLUMNS} FROM rollout_steps
         WHERE rollout_id = $1 AND (stage = $2 OR phase NOT IN ('waiting', 'done'))
         ORDER BY stage, id"
    ))
    .bind(rollout.id)
    .bind(rollout.stage as i32)
    .fetch_all(&mut *connection)
    .await?;
    let ids: Vec<i64> = rows.iter().map(|row| row.0).collect();
    let answers = answers(connection, rollout.id, Some(&ids)).await?;
    rows.into_iter().map(|row| step(row, &answers)).collect()
}

async fn save(
    connection: &mut PgConnection,
    before: &Rollout,
    rollout: &Rollout,
    old: &[Step],
    steps: &[Step],
    now: DateTime<Utc>,
) -> Result<()> {
    if before != rollout {
        let ended = matches!(
            rollout.state,
            State::Halted | State::Stopped | State::Finished
        );
        sqlx::query(
            "UPDATE rollouts SET state = $2, stage = $3, soak_until = $4, halt_node_id = $5,
                    halt_reason = $6,
                    finished_at = CASE WHEN $7 THEN COALESCE(finished_at, $8) ELSE NULL END
             WHERE id = $1",
        )
        .bind(rollout.id)
        .bind(rollout.state.as_str())
        .bind(rollout.stage as i32)
        .bind(rollout.soak_until)
        .bind(rollout.halt.as_ref().map(|halt| halt.node_id))
        .bind(rollout.halt.as_ref().map(|halt| halt.reason.as_str()))
        .bind(ended)
        .bind(now)
        .execute(&mut *connection)
        .await?;
    }
    for (was, step) in old.iter().zip(steps) {
        if was == step {
            continue;
        }
        let slots: Vec<&str> = step.slots.iter().map(|slot| slot.key.as_str()).collect();
        let before: Vec<Option<Value>> = step.before.iter().map(probe_value).collect();
        let after: Vec<Option<Value>> = step.after.iter().map(probe_value).collect();
        sqlx::query(
            "UPDATE rollout_steps SET phase = $2, verdict = $3, reason = $4, phase_since = $5,
                    attempt = $6, slots = $7, probes_before = $8, probes_after = $9,
                    waiting_on = $10, updated_at = $11
             WHERE id = $1",
        )
        .bind(step.id)
        .bind(step.phase.as_str())
        .bind(step.verdict.as_str())
        .bind(&step.reason)
        .bind(step.phase_since)
        .bind(step.attempt as i32)
        .bind(&slots)
        .bind(Json(&before))
        .bind(Json(&after))
        .bind(&step.waiting_on)
        .bind(now)
        .execute(&mut *connection)
        .await?;
    }
    Ok(())
}

/// Writes what the engine decided: each job request with its row (a key already asked for is
/// never asked again), each withdrawal, each event.
async fn write_effects(
    connection: &mut PgConnection,
    rollout: &Rollout,
    steps: &[Step],
    effects: Vec<Effect>,
    now: DateTime<Utc>,
) -> Result<()> {
    let subject = Some(format!("rollout/{}", rollout.id));
    for effect in effects {
        match effect {
            Effect::RequestJob {
                step_id,
                node_id,
                key,
                word,
                params,
            } => {
                let correlation = Uuid::now_v7();
                let inserted = sqlx::query(
                    "INSERT INTO rollout_jobs (key, rollout_id, step_id, node_id, word, correlation_id, requested_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (key) DO NOTHING",
                )
                .bind(&key)
                .bind(rollout.id)
                .bind(step_id)
                .bind(node_id)
                .bind(word)
                .bind(correlation)
                .bind(now)
                .execute(&mut *connection)
                .await?
                .rows_affected();
                if inserted == 0 {
                    continue;
                }
                let request = RequestJob {
                    idempotency_key: key,
                    node_id,
                    primitive: word.to_string(),
                    params,
                    requested_by: REQUESTED_BY.to_string(),
                };
                outbox::push_command_from(
                    connection,
                    crate::DOMAIN,
                    Envelope::new(request, subject.clone()).correlated(Some(correlation)),
                )
                .await?;
            }
            Effect::CancelJob { key } => {
                let cancel = CancelJob {
                    idempotency_key: key,
                    requested_by: REQUESTED_BY.to_string(),
                };
                outbox::push_command_from(
                    connection,
                    crate::DOMAIN,
                    Envelope::new(cancel, subject.clone()),
                )
                .await?;
            }
            Effect::StepFinished {
                step_id,
                node_id,
                verdict,
                reason,
            } => {
                let stage = steps
                    .iter()
                    .find(|step| step.id == step_id)
                    .map(|step| step.stage)
                    .unwrap_or(0);
                let event = RolloutStepFinished {
                    rollout_id: rollout.id,
                    step_id,
                    node_id,
                    stage: stage as u32,
                    verdict: verdict.as_str().into(),
                    reason,
                };
                outbox::push(connection, Envelope::new(event, subject.clone())).await?;
            }
            Effect::StageStarted { .. } => {}
            Effect::Halted(halt) => {
                let event = RolloutHalted {
                    rollout_id: rollout.id,
                    node_id: halt.node_id,
                    reason: halt.reason,
                };
                outbox::push(connection, Envelope::new(event, subject.clone())).await?;
            }
            Effect::Finished => {
                outbox::push(
                    connection,
                    Envelope::new(finished_event(rollout, steps), subject.clone()),
                )
                .await?;
            }
        }
    }
    Ok(())
}

fn finished_event(rollout: &Rollout, steps: &[Step]) -> RolloutFinished {
    let count =
        |verdict: Verdict| steps.iter().filter(|step| step.verdict == verdict).count() as u32;
    RolloutFinished {
        rollout_id: rollout.id,
        state: rollout.state.as_str().into(),
        passed: count(Verdict::Passed),
        failed: count(Verdict::Failed),
        skipped: count(Verdict::Skipped),
    }
}

/// What the engine learns on a tick: incidents opened on the soaking stage's nodes since its
/// soak began. (Copy holds, RO-17, come from site copies, which this plane does not make yet.)
async fn facts(connection: &mut PgConnection, rollout: &Rollout, steps: &[Step]) -> Result<Facts> {
    let mut facts = Facts::default();
    let Some(until) = rollout.soak_until else {
        return Ok(facts);
    };
    let soak = rollout
        .stages
        .get(rollout.stage)
        .map(|policy| policy.soak)
        .unwrap_or_default();
    let nodes: Vec<i64> = steps
        .iter()
        .filter(|step| step.stage == rollout.stage)
        .map(|step| step.node_id)
        .collect();
    let rows: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT node_id, source, title FROM incidents_opened
         WHERE node_id = ANY($1) AND opened_at >= $2 ORDER BY opened_at",
    )
    .bind(&nodes)
    .bind(until - soak)
    .fetch_all(&mut *connection)
    .await?;
    facts.incidents = rows
        .into_iter()
        .map(|(node, source, title)| (node, format!("{source} ({title})")))
        .collect();
    Ok(facts)
}

/// Runs the engine once on rollout `id` under its row lock and writes what it decided; the
/// caller commits. Returns false when there is no such rollout.
/// Its time (reading the rows, the engine's decision, writing it; not the commit) is the
/// histogram `capstan_rollouts_advance_seconds`.
///
/// Most advances judge one answer of the current stage: they read that stage's steps and the
/// steps in flight ([`read_working_steps`]), not the whole rollout, and a decision that stays in
/// the stage and the state is taken on those. One that changes either (the stage is done, a
/// miss halts, the rollout finishes) is taken again on every step, as is any advance of a
/// halting rollout (which skips the steps of every stage).
pub async fn advance(connection: &mut PgConnection, id: i64, now: DateTime<Utc>) -> Result<bool> {
    Ok(advance_reading(connection, id, now).await?.is_some())
}

/// [`advance`]; how many steps it read (`None`: no such rollout).
async fn advance_reading(
    connection: &mut PgConnection,
    id: i64,
    now: DateTime<Utc>,
) -> Result<Option<usize>> {
    let started = std::time::Instant::now();
    let Some(was) = read_rollout(connection, id, true).await? else {
        return Ok(None);
    };
    let mut read = 0;
    let mut decided = None;
    if was.state != State::Halting {
        let steps = read_working_steps(connection, &was).await?;
        read += steps.len();
        let decision = decide(connection, &was, steps, now).await?;
        let (rollout, ..) = &decision;
        if rollout.stage == was.stage && rollout.state == was.state {
            decided = Some(decision);
        }
    }
    let (rollout, old, steps, effects) = match decided {
        Some(decision) => decision,
        None => {
            let steps = read_steps(connection, id).await?;
            read += steps.len();
            decide(connection, &was, steps, now).await?
        }
    };
    save(connection, &was, &rollout, &old, &steps, now).await?;
    write_effects(connection, &rollout, &steps, effects, now).await?;
    metrics::histogram!("capstan_rollouts_advance_seconds").record(started.elapsed().as_secs_f64());
    Ok(Some(read))
}

/// The engine's decision on `steps` of rollout `was`: the rollout after it, the steps before
/// and after it, and its effects. Nothing is written.
async fn decide(
    connection: &mut PgConnection,
    was: &Rollout,
    steps: Vec<Step>,
    now: DateTime<Utc>,
) -> Result<(Rollout, Vec<Step>, Vec<Step>, Vec<Effect>)> {
    let (mut rollout, old, mut steps) = (was.clone(), steps.clone(), steps);
    let facts = facts(connection, &rollout, &steps).await?;
    let effects = engine::advance(&mut rollout, &mut steps, &facts, now);
    Ok((rollout, old, steps, effects))
}

/// An operator's act on rollout `id`, then an advance; `Err(Some(reason))` when the act is
/// refused in the rollout's state, `Err(None)` when there is no such rollout.
pub async fn act(
    connection: &mut PgConnection,
    id: i64,
    act: engine::Act,
    now: DateTime<Utc>,
) -> Result<std::result::Result<(), Option<String>>> {
    let Some(mut rollout) = read_rollout(connection, id, true).await? else {
        return Ok(Err(None));
    };
    let mut steps = read_steps(connection, id).await?;
    let (was, old) = (rollout.clone(), steps.clone());
    let effects = match engine::act(&mut rollout, &mut steps, act, now) {
        Ok(effects) => effects,
        Err(reason) => return Ok(Err(Some(reason))),
    };
    let mut effects = effects;
    if rollout.state == State::Stopped {
        effects.push(Effect::Finished);
    }
    save(connection, &was, &rollout, &old, &steps, now).await?;
    write_effects(connection, &rollout, &steps, effects, now).await?;
    advance(connection, id, now).await?;
    Ok(Ok(()))
}

/// The rollouts under way, for the tick.
pub async fn under_way(connection: &mut PgConnection) -> Result<Vec<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM rollouts WHERE state IN ('running', 'paused', 'halting')
         UNION SELECT DISTINCT rollout_id FROM rollout_steps WHERE phase = 'apply'
         ORDER BY 1",
    )
    .fetch_all(&mut *connection)
    .await?)
}

/// Records a job's end against the rollout that asked for it; the rollout's id, or `None`
/// when the job is not one of ours. A second report of the same job changes nothing.
pub async fn job_finished(
    connection: &mut PgConnection,
    correlation: Uuid,
    job_id: i64,
    outcome: &str,
    result: Option<&Value>,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(
        "UPDATE rollout_jobs SET job_id = $2, outcome = $3, result = $4, reason = $5, finished_at = $6
         WHERE correlation_id = $1 AND outcome IS NULL RETURNING rollout_id",
    )
    .bind(correlation)
    .bind(job_id)
    .bind(outcome)
    .bind(result)
    .bind(reason)
    .bind(now)
    .fetch_optional(&mut *connection)
    .await?)
}

// ---- views ----

fn probe_answer(probe: &Probe) -> ProbeAnswer {
    ProbeAnswer {
        status: probe.status,
        errors: probe.errors,
        failed_assets: probe.failed_assets.clone(),
    }
}

fn stage_view(stage: usize, policy: &StagePolicy) -> StageView {
    let (max_failed, max_failed_percent) = match policy.budget {
        Budget::Nodes(nodes) => (Some(nodes), None),
        Budget::Percent(percent) => (None, Some(percent)),
    };
    StageView {
        stage: stage as u32,
        max_failed,
        max_failed_percent,
        soak_secs: u32::try_from(policy.soak.num_seconds()).unwrap_or(0),
    }
}

type HeadRow = (
    i64,
    String,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    Json<Vec<LeftOutView>>,
);

/// A rollout as the API shows it, with its steps when `with_steps`.
pub async fn view(
    connection: &mut PgConnection,
    id: i64,
    with_steps: bool,
) -> Result<Option<RolloutView>> {
    let Some(rollout) = read_rollout(connection, id, false).await? else {
        return Ok(None);
    };
    let (_, started_by, started_at, finished_at, left_out): HeadRow = sqlx::query_as(
        "SELECT id, started_by, started_at, finished_at, left_out FROM rollouts WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&mut *connection)
    .await?;
    let steps = read_steps(connection, id).await?;
    let count =
        |verdict: Verdict| steps.iter().filter(|step| step.verdict == verdict).count() as u32;
    let names: HashMap<i64, String> = sqlx::query_as::<_, (i64, String)>(
        "SELECT node_id, name FROM nodes WHERE node_id = ANY($1)",
    )
    .bind(steps.iter().map(|step| step.node_id).collect::<Vec<_>>())
    .fetch_all(&mut *connection)
    .await?
    .into_iter()
    .collect();
    let updated: HashMap<i64, DateTime<Utc>> = sqlx::query_as::<_, (i64, DateTime<Utc>)>(
        "SELECT id, updated_at FROM rollout_steps WHERE rollout_id = $1",
    )
    .bind(id)
    .fetch_all(&mut *connection)
    .await?
    .into_iter()
    .collect();
    let step_views = if with_steps {
        steps
            .iter()
            .map(|step| StepView {
                step_id: step.id,
                node_id: step.node_id,
                node_name: names.get(&step.node_id).cloned().unwrap_or_default(),
                machine: step.machine.clone(),
                stage: step.stage as u32,
                phase: step.phase.as_str().into(),
                verdict: step.verdict.as_str().into(),
                reason: step.reason.clone(),
                waiting_on: step.waiting_on.clone(),
                attempt: step.attempt,
                probes: rollout
                    .pages
                    .iter()
                    .enumerate()
                    .map(|(index, page)| ProbeView {
                        viewer: page.viewer.as_str().into(),
                        path: page.path.clone(),
                        before: step
                            .before
                            .get(index)
                            .and_then(Option::as_ref)
                            .map(probe_answer),
                        after: step
                            .after
                            .get(index)
                            .and_then(Option::as_ref)
                            .map(probe_answer),
                    })
                    .collect(),
                updated_at: updated.get(&step.id).copied().unwrap_or(started_at),
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(Some(RolloutView {
        id,
        kind: rollout.kind,
        version: rollout.version.clone(),
        state: rollout.state,
        stage: rollout.stage as u32,
        stages: rollout
            .stages
            .iter()
            .enumerate()
            .map(|(stage, policy)| stage_view(stage, policy))
            .collect(),
        pages: rollout
            .pages
            .iter()
            .map(|page| format!("{} {}", page.viewer.as_str(), page.path))
            .collect(),
        soak_until: rollout.soak_until,
        halted_at_node: rollout.halt.as_ref().map(|halt| halt.node_id),
        halt_reason: rollout.halt.as_ref().map(|halt| halt.reason.clone()),
        started_by,
        started_at,
        finished_at,
        passed: count(Verdict::Passed),
        failed: count(Verdict::Failed),
        skipped: count(Verdict::Skipped),
        total: steps.len() as u32,
        steps: step_views,
        left_out: left_out.0,
    }))
}

/// Every rollout, newest first (at most `limit`).
pub async fn list(connection: &mut PgConnection, limit: i64) -> Result<Vec<RolloutView>> {
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM rollouts ORDER BY id DESC LIMIT $1")
        .bind(limit)
        .fetch_all(&mut *connection)
        .await?;
    let mut views = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(view) = view(connection, id, false).await? {
            views.push(view);
        }
    }
    Ok(views)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node of its own machine, with `apply_update` and no readiness check.
    fn candidate(node_id: i64) -> Candidate {
        Candidate {
            node_id,
            name: format!("site-{node_id}"),
            machine: format!("machine-{node_id}"),
            hosts_site: true,
            removed: false,
            enabled: true,
            vocabulary: vec!["apply_update".into()],
            rollout_first: false,
            management: false,
        }
    }

    /// Answers every apply asked for in `stage` as passed.
    async fn applies_pass(connection: &mut PgConnection, rollout: i64, stage: i32) {
        sqlx::query(
            "UPDATE rollout_jobs SET outcome = 'completed', finished_at = now(),
                    result = '{\"completed\": true, \"deploy_tier_passed\": true,
                               \"version\": \"2.1.0\", \"rolled_back\": false}'
             WHERE rollout_id = $1 AND outcome IS NULL
               AND step_id IN (SELECT id FROM rollout_steps WHERE stage = $2)",
        )
        .bind(rollout)
        .bind(stage)
        .execute(&mut *connection)
        .await
        .unwrap();
    }

    async fn state_and_stage(connection: &mut PgConnection, rollout: i64) -> (String, i32) {
        sqlx::query_as("SELECT state, stage FROM rollouts WHERE id = $1")
            .bind(rollout)
            .fetch_one(&mut *connection)
            .await
            .unwrap()
    }

    // Issue 16's benchmark: an advance within a stage reads that stage's steps (and any in
    // flight), not the rollout's every step; one that moves to the next stage or finishes reads
    // them all, and the rollout still goes through its stages in order to `finished` with every
    // node passed. (Fails when an advance reads every step: 9 read where 3 are wanted.)
    #[tokio::test]
    async fn an_advance_within_a_stage_reads_that_stage_and_a_stage_change_reads_all() {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let store = capstan_store::Store::connect(database.url(), "rollouts", 2)
            .await
            .unwrap();
        store.migrate(&crate::MIGRATOR).await.unwrap();
        let mut connection = store.pool().acquire().await.unwrap();
        let stages: Vec<Vec<Candidate>> = (0..3)
            .map(|stage| {
                (0..3)
                    .map(|node| candidate(stage * 10 + node + 1))
                    .collect()
            })
            .collect();
        let now = Utc::now();
        let rollout = insert(
            &mut connection,
            &NewRollout {
                kind: Kind::Release,
                version: "2.1.0",
                pages: &[],
                policies: &[StagePolicy::default(); 3],
                stages: &stages,
                left_out: &[],
                started_by: "test",
            },
            now,
        )
        .await
        .unwrap();
        // The start: stage 0's three applies asked for, from its three steps alone.
        assert_eq!(
            advance_reading(&mut connection, rollout, now)
                .await
                .unwrap(),
            Some(3)
        );
        let asked: i64 = sqlx::query_scalar("SELECT count(*) FROM rollout_jobs")
            .fetch_one(&mut *connection)
            .await
            .unwrap();
        assert_eq!(asked, 3);
        // Nothing answered yet: still the stage's steps alone.
        assert_eq!(
            advance_reading(&mut connection, rollout, now)
                .await
                .unwrap(),
            Some(3)
        );
        for stage in 0..3 {
            assert_eq!(
                state_and_stage(&mut connection, rollout).await,
                ("running".to_string(), stage)
            );
            applies_pass(&mut connection, rollout, stage).await;
            // The stage is done: that decision is taken again on all nine steps.
            assert_eq!(
                advance_reading(&mut connection, rollout, now)
                    .await
                    .unwrap(),
                Some(3 + 9),
                "stage {stage}"
            );
        }
        assert_eq!(
            state_and_stage(&mut connection, rollout).await,
            ("finished".to_string(), 2)
        );
        let passed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM rollout_steps WHERE verdict = 'passed' AND phase = 'done'",
        )
        .fetch_one(&mut *connection)
        .await
        .unwrap();
        assert_eq!(passed, 9);
        let asked: i64 = sqlx::query_scalar("SELECT count(*) FROM rollout_jobs")
            .fetch_one(&mut *connection)
            .await
            .unwrap();
        assert_eq!(asked, 9, "one apply a node");
    }
}
