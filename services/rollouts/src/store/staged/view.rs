//! The operator's views of rollouts.

use super::*;
use capstan_events::NodeId;

pub(super) fn probe_answer(probe: &Probe) -> ProbeAnswer {
    ProbeAnswer {
        status: probe.status,
        errors: probe.errors,
        failed_assets: probe.failed_assets.clone(),
    }
}

pub(super) fn stage_view(stage: usize, policy: &StagePolicy) -> StageView {
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

pub(super) type HeadRow = (
    i64,
    String,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    Json<Vec<LeftOutView>>,
);

/// A step as the operator sees it, with its pages' answers before and after the apply.
fn step_view(
    rollout: &Rollout,
    step: &Step,
    node_name: String,
    updated_at: DateTime<Utc>,
) -> StepView {
    StepView {
        step_id: step.id,
        node_id: step.node_id,
        node_name,
        machine: step.machine.clone(),
        stage: step.stage as u32,
        phase: step.phase,
        verdict: step.verdict,
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
        updated_at,
    }
}

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
    let names: HashMap<NodeId, String> = sqlx::query_as::<_, (NodeId, String)>(
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
            .map(|step| {
                let name = names.get(&step.node_id).cloned().unwrap_or_default();
                let updated_at = updated.get(&step.id).copied().unwrap_or(started_at);
                step_view(&rollout, step, name, updated_at)
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
