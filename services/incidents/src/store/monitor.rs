//! The monitor service's judgements, kept as the `monitor_facts` projection (fed through the
//! inbox by `consumers::Events`): the facts `plane:site_down` and `plane:cert_problem`
//! judge from. An event older than the newest applied of its kind changes nothing, so a late
//! redelivery never brings back an outage that ended.

use capstan_events::monitor::{CertProblemChanged, SiteDown, SiteUp};
use capstan_store::PgConnection;
use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::Result;

/// The site went down (or stays down with a newer reason), as of `at`.
pub async fn site_down(
    connection: &mut PgConnection,
    down: &SiteDown,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO monitor_facts (node_id, site_down_since, site_down_reason, site_as_of)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (node_id) DO UPDATE
         SET site_down_since = EXCLUDED.site_down_since,
             site_down_reason = EXCLUDED.site_down_reason, site_as_of = EXCLUDED.site_as_of
         WHERE monitor_facts.site_as_of IS NULL OR monitor_facts.site_as_of <= EXCLUDED.site_as_of",
    )
    .bind(down.node_id)
    .bind(down.down_since)
    .bind(&down.reason)
    .bind(at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// The site answers again (or is no longer checked), as of `at`.
pub async fn site_up(connection: &mut PgConnection, up: &SiteUp, at: DateTime<Utc>) -> Result<()> {
    sqlx::query(
        "INSERT INTO monitor_facts (node_id, site_as_of) VALUES ($1, $2)
         ON CONFLICT (node_id) DO UPDATE
         SET site_down_since = NULL, site_down_reason = NULL, site_as_of = EXCLUDED.site_as_of
         WHERE monitor_facts.site_as_of IS NULL OR monitor_facts.site_as_of <= EXCLUDED.site_as_of",
    )
    .bind(up.node_id)
    .bind(at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// The served certificate's problem is now `changed.problem`.
pub async fn cert_problem(
    connection: &mut PgConnection,
    changed: &CertProblemChanged,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO monitor_facts (node_id, cert_problem, cert_as_of) VALUES ($1, $2, $3)
         ON CONFLICT (node_id) DO UPDATE
         SET cert_problem = EXCLUDED.cert_problem, cert_as_of = EXCLUDED.cert_as_of
         WHERE monitor_facts.cert_as_of IS NULL OR monitor_facts.cert_as_of <= EXCLUDED.cert_as_of",
    )
    .bind(changed.node_id)
    .bind(changed.problem.as_ref().map(Json))
    .bind(changed.checked_at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}
