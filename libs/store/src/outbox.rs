//! The transactional outbox: a service writes the events and commands it emits here, in the
//! same transaction as the state change they describe. The relay publishes them afterwards, so
//! a crash between commit and publish only delays a message, never loses it.

use capstan_events::{Command, Domain, Envelope, Message, RawEnvelope};
use sqlx::PgConnection;

use crate::StoreError;

/// The outbox's table and the trigger that wakes the relay when a transaction that wrote to
/// it commits (`NOTIFY` is delivered at commit). Idempotent.
pub(crate) const BOOTSTRAP: &str = r#"
CREATE TABLE IF NOT EXISTS outbox (
    id          BIGSERIAL PRIMARY KEY,
    message_id  UUID NOT NULL UNIQUE,
    subject     TEXT NOT NULL,
    payload     TEXT NOT NULL,
    traceparent TEXT,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('capstan_outbox_' || TG_TABLE_SCHEMA, '');
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
"#;

/// The channel the relay of `schema` listens on.
pub fn channel(schema: &str) -> String {
    format!("capstan_outbox_{schema}")
}

/// Writes a typed message into the outbox within the caller's transaction.
pub async fn push<M: Message>(
    connection: &mut PgConnection,
    envelope: Envelope<M>,
) -> Result<(), StoreError> {
    let subject = envelope.bus_subject();
    push_raw(connection, &subject, &envelope.into_raw()).await
}

/// Writes a command to another service within the caller's transaction, on the subject that
/// names `sender` (`capstan.cmd.<domain>.<name>.<sender>`): the only subject of the other
/// domain's commands the sender's bus user may publish, and how the owner knows who asked.
pub async fn push_command_from<M: Command>(
    connection: &mut PgConnection,
    sender: Domain,
    envelope: Envelope<M>,
) -> Result<(), StoreError> {
    let subject = capstan_events::command_subject_from::<M>(sender);
    push_raw(connection, &subject, &envelope.into_raw()).await
}

/// Writes a condition the service judged (`capstan_events::conditions`) within the caller's
/// transaction, on its subject `capstan.conditions.<domain>.<name>`.
pub async fn push_condition(
    connection: &mut PgConnection,
    condition: capstan_events::conditions::ConditionChanged,
) -> Result<(), StoreError> {
    let subject = condition.subject();
    push_raw(connection, &subject, &condition.envelope()).await
}

/// Writes an envelope already in JSON form; the current span's trace goes with it.
pub async fn push_raw(
    connection: &mut PgConnection,
    subject: &str,
    envelope: &RawEnvelope,
) -> Result<(), StoreError> {
    let payload = String::from_utf8(envelope.to_bytes()).expect("JSON is UTF-8");
    sqlx::query(
        "INSERT INTO outbox (message_id, subject, payload, traceparent) VALUES ($1, $2, $3, $4)",
    )
    .bind(envelope.id)
    .bind(subject)
    .bind(payload)
    .bind(capstan_telemetry::propagation::current_traceparent())
    .execute(connection)
    .await?;
    Ok(())
}

/// Messages written but not yet acknowledged by the bus.
pub async fn pending(connection: &mut PgConnection) -> Result<i64, StoreError> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM outbox")
        .fetch_one(connection)
        .await?)
}
