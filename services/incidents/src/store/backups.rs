//! The backups service's judgements, kept as the `backup_facts` projection (fed through the
//! inbox by `consumers::Events`): the facts the `plane:backup_*` sources judge from. An event
//! older than the newest applied changes nothing, so a late redelivery never brings back a
//! judgement that cleared.

use capstan_events::backups::HealthChanged;
use capstan_store::PgConnection;
use sqlx::types::Json;

use super::Result;

/// The node's backup health is now `changed.health`.
pub async fn health_changed(connection: &mut PgConnection, changed: &HealthChanged) -> Result<()> {
    sqlx::query(
        "INSERT INTO backup_facts (node_id, backup_health, backup_as_of) VALUES ($1, $2, $3)
         ON CONFLICT (node_id) DO UPDATE
         SET backup_health = EXCLUDED.backup_health, backup_as_of = EXCLUDED.backup_as_of
         WHERE backup_facts.backup_as_of <= EXCLUDED.backup_as_of",
    )
    .bind(changed.node_id)
    .bind(Json(&changed.health))
    .bind(changed.judged_at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}
