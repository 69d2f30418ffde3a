//! The SQL of staged rollouts (`migrations/rollouts/0002_rollouts.sql`; its `nodes` are the
//! kit's projection, `capstan_store::nodes`):
//! rollouts and their steps read into the engine's types (an unknown word is an error), and
//! [`advance`], which runs the engine on one rollout under its row lock and writes what it
//! decided — the changed rows, the job requests and the events — in the caller's transaction.

use capstan_events::NodeId;
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

mod read;
mod run;
mod view;
mod write;

use read::*;
pub use run::{act, advance};
pub use view::{list, view};
use write::*;

type Result<T> = std::result::Result<T, StoreError>;

/// Who the rollouts service asks as.
pub const REQUESTED_BY: &str = "service/rollouts";

/// A stored row the engine cannot read (a word outside the contract's): never guessed at.
fn corrupt(what: impl Into<String>) -> StoreError {
    StoreError::Database(format!("an unreadable rollouts row: {}", what.into()))
}

// ---- the incidents a soak watches ----

pub async fn incident_opened(
    connection: &mut PgConnection,
    incident: i64,
    node: NodeId,
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
    NodeId,
    String,
    Option<String>,
    Option<NodeId>,
    bool,
    Vec<String>,
    bool,
    Option<String>,
);

fn candidate(row: NodeRow) -> Candidate {
    let (node_id, name, site_root, host, paired, vocabulary, rollout_first, install_state) = row;
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
        install_state,
    }
}

/// The nodes named, as the planner sees them; `None` for every node known.
pub async fn candidates(
    connection: &mut PgConnection,
    nodes: Option<&[NodeId]>,
) -> Result<Vec<Candidate>> {
    let rows: Vec<NodeRow> = sqlx::query_as(
        "SELECT node_id, name, site_root, host_node_id, paired, vocabulary, rollout_first,
                install_state
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

/// The steps of a new rollout, every one in one statement: a rollout of 1,000 nodes is one
/// round trip, not 1,000.
async fn insert_steps(
    connection: &mut PgConnection,
    id: i64,
    new: &NewRollout<'_>,
    now: DateTime<Utc>,
) -> Result<()> {
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
    Ok(())
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
    insert_steps(connection, id, new, now).await?;
    let event = RolloutStarted {
        rollout_id: id,
        kind: new.kind,
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

#[cfg(test)]
mod tests;
