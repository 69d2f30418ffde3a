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

type Row = (NodeId, String, String, String, String, DateTime<Utc>);

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

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::monitor::SITE_DOWN;
    use capstan_store::{testsuite::TestDatabase, Store};
    use chrono::{Duration, TimeZone};

    async fn store() -> (TestDatabase, Store) {
        let database = TestDatabase::create().await;
        let store = Store::connect(database.url(), "incidents", 2)
            .await
            .unwrap();
        store.migrate(&crate::MIGRATOR).await.unwrap();
        (database, store)
    }

    fn at(minute: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap() + Duration::minutes(minute)
    }

    #[tokio::test]
    async fn a_late_older_judgement_never_brings_back_a_condition_that_ended() {
        let (_database, store) = store().await;
        let mut connection = store.pool().acquire().await.unwrap();
        let down = SITE_DOWN.happening(NodeId(7), "503 twice", at(0), at(1));
        let up = SITE_DOWN.not_happening(NodeId(7), at(5));
        record(&mut connection, &down).await.unwrap();
        assert_eq!(
            happening(&mut connection).await.unwrap()[&NodeId(7)].len(),
            1
        );
        record(&mut connection, &up).await.unwrap();
        // The "down" redelivered after the "up": older, so nothing changes.
        record(&mut connection, &down).await.unwrap();
        assert!(happening(&mut connection).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_condition_that_goes_on_keeps_the_start_it_was_first_reported_with() {
        let (_database, store) = store().await;
        let mut connection = store.pool().acquire().await.unwrap();
        record(
            &mut connection,
            &SITE_DOWN.happening(NodeId(7), "503", at(0), at(1)),
        )
        .await
        .unwrap();
        record(
            &mut connection,
            &SITE_DOWN.happening(NodeId(7), "timeout", at(4), at(4)),
        )
        .await
        .unwrap();
        let held = &happening(&mut connection).await.unwrap()[&NodeId(7)][0];
        assert_eq!(held.since, at(0));
        assert_eq!(held.detail, "timeout");
    }
}
