//! [`advance`] and [`act`]: the engine run on one rollout under its row lock, in the caller's
//! transaction.

use super::*;
use capstan_events::NodeId;

/// What the engine learns on a tick: incidents opened on the soaking stage's nodes since its
/// soak began. (Copy holds, RO-17, come from site copies, which this plane does not make yet.)
pub(super) async fn facts(
    connection: &mut PgConnection,
    rollout: &Rollout,
    steps: &[Step],
) -> Result<Facts> {
    let mut facts = Facts::default();
    let Some(until) = rollout.soak_until else {
        return Ok(facts);
    };
    let soak = rollout
        .stages
        .get(rollout.stage)
        .map(|policy| policy.soak)
        .unwrap_or_default();
    let nodes: Vec<NodeId> = steps
        .iter()
        .filter(|step| step.stage == rollout.stage)
        .map(|step| step.node_id)
        .collect();
    let rows: Vec<(NodeId, String, String)> = sqlx::query_as(
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
pub(super) async fn advance_reading(
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
pub(super) async fn decide(
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
        Err(engine::Refused(reason)) => return Ok(Err(Some(reason))),
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
