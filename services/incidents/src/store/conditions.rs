//! Other services' conditions, kept as the `conditions` projection (fed through the inbox by
//! `consumers::Events`): the newest judgement of each condition on each node. The pass turns
//! the happening ones into incidents. A judgement older (by `observed_at`) than the one held
//! changes nothing, so a late redelivery never brings back a condition that ended; while a
//! condition goes on, it keeps the start it was first reported with.

use capstan_events::conditions::ConditionChanged;
use capstan_events::Word as _;
use capstan_store::PgConnection;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

use super::{severity, unknown, Result};
use crate::domain::sources::{Condition, SourceName};
use crate::domain::NodeId;

/// Keeps `condition` as the node's newest judgement of it.
pub async fn record(connection: &mut PgConnection, condition: &ConditionChanged) -> Result<()> {
    sqlx::query(
        "INSERT INTO conditions (node_id, source, domain, happening, severity, title, evidence,
                                 since, observed_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (node_id, source) DO UPDATE
         SET domain = EXCLUDED.domain, happening = EXCLUDED.happening,
             severity = EXCLUDED.severity, title = EXCLUDED.title,
             evidence = EXCLUDED.evidence, observed_at = EXCLUDED.observed_at,
             since = CASE WHEN conditions.happening AND EXCLUDED.happening
                          THEN conditions.since ELSE EXCLUDED.since END
         WHERE conditions.observed_at <= EXCLUDED.observed_at",
    )
    .bind(condition.node_id)
    .bind(condition.source())
    .bind(condition.domain.as_str())
    .bind(condition.happening)
    .bind(condition.severity.as_str())
    .bind(&condition.title)
    .bind(&condition.evidence)
    .bind(
        condition
            .since
            .or(condition.happening.then_some(condition.observed_at)),
    )
    .bind(condition.observed_at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

type Row = (i64, String, String, String, String, DateTime<Utc>);

/// The conditions other services say are happening, by node.
pub async fn happening(connection: &mut PgConnection) -> Result<HashMap<NodeId, Vec<Condition>>> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT node_id, source, severity, title, evidence, since FROM conditions
         WHERE happening ORDER BY node_id, source",
    )
    .fetch_all(&mut *connection)
    .await?;
    let mut by_node: HashMap<NodeId, Vec<Condition>> = HashMap::new();
    for (node_id, source, severity_word, title, evidence, since) in rows {
        let condition = Condition {
            source: SourceName::read(&source).map_err(|_| unknown("source", &source))?,
            severity: severity(&severity_word)?,
            title,
            detail: evidence,
            since,
        };
        by_node.entry(node_id).or_default().push(condition);
    }
    Ok(by_node)
}
