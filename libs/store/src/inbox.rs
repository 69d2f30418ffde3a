//! The inbox: a consumer records each envelope id in the same transaction as its effects, and
//! skips an id it has recorded before, so a redelivered message has no second effect.

use sqlx::PgConnection;
use std::time::Duration;
use uuid::Uuid;

use crate::StoreError;

/// How long an id is remembered. JetStream redelivers within minutes; a week is ample.
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

pub(crate) const BOOTSTRAP: &str = r#"
CREATE TABLE IF NOT EXISTS inbox (
    consumer    TEXT NOT NULL,
    message_id  UUID NOT NULL,
    received_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX IF NOT EXISTS inbox_received_at ON inbox (received_at);
"#;

/// Records `message_id` for `consumer`. `true`: first sight, apply the effects in this same
/// transaction. `false`: already applied, do nothing (and acknowledge).
pub async fn record(
    connection: &mut PgConnection,
    consumer: &str,
    message_id: Uuid,
) -> Result<bool, StoreError> {
    let inserted = sqlx::query(
        "INSERT INTO inbox (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
    )
    .bind(consumer)
    .bind(message_id)
    .execute(connection)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// Forgets ids older than [`RETENTION`]; returns how many.
pub async fn prune(connection: &mut PgConnection) -> Result<u64, StoreError> {
    Ok(
        sqlx::query("DELETE FROM inbox WHERE received_at < now() - make_interval(secs => $1)")
            .bind(RETENTION.as_secs_f64())
            .execute(connection)
            .await?
            .rows_affected(),
    )
}
