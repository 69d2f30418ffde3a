//! Rollouts and their steps read into the engine's types (an unknown word is an error).

use super::*;
use capstan_events::NodeId;

pub(super) type RolloutRow = (
    i64,
    String,
    String,
    String,
    i32,
    Vec<String>,
    Option<DateTime<Utc>>,
    Option<NodeId>,
    Option<String>,
);

pub(super) fn page(text: &str) -> Result<ProbePage> {
    let (viewer, path) = text
        .split_once(' ')
        .ok_or_else(|| corrupt(format!("probe page {text:?}")))?;
    Ok(ProbePage {
        viewer: Viewer::parse(viewer).ok_or_else(|| corrupt(format!("viewer {viewer:?}")))?,
        path: path.to_string(),
    })
}

pub(super) async fn read_rollout(
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

pub(super) type StepRow = (
    i64,
    NodeId,
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

pub(super) const STEP_COLUMNS: &str =
    "id, node_id, machine, stage, phase, verdict, reason, phase_since, attempt,
     has_preflight, slots, probes_before, probes_after, waiting_on";

pub(super) fn probe_value(probe: &Option<Probe>) -> Option<Value> {
    probe.as_ref().map(|probe| {
        json!({"status": probe.status, "errors": probe.errors, "failed_assets": probe.failed_assets})
    })
}

pub(super) fn probes(values: &[Option<Value>]) -> Vec<Option<Probe>> {
    values
        .iter()
        .map(|value| value.as_ref().and_then(Probe::read))
        .collect()
}

pub(super) fn step(row: StepRow, answers: &HashMap<String, Finished>) -> Result<Step> {
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
pub(super) async fn answers(
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

pub(super) async fn read_steps(connection: &mut PgConnection, rollout: i64) -> Result<Vec<Step>> {
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
pub(super) async fn read_working_steps(
    connection: &mut PgConnection,
    rollout: &Rollout,
) -> Result<Vec<Step>> {
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
