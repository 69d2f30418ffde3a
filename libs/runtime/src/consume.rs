//! Consumers whose effects happen once: each message's envelope id is recorded in the inbox in
//! the same transaction as what the handler writes, and a message seen before is only
//! acknowledged. Database trouble is retried (then dead-lettered); a handler's rejection
//! dead-letters at once. A message of a type the consumer does not apply is acknowledged
//! without a transaction (a stream carries every event of its domain; a fleet's joins and
//! check-ins would otherwise cost each consuming service a commit apiece).

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_store::PgConnection;
use capstan_store::{inbox, StoreError};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::Service;

/// What a consumer does with a message it has not seen before, inside the transaction that
/// also records it in the inbox. Writes go through `connection`; outbox rows written there
/// commit with them.
pub trait Apply: Send + Sync + 'static {
    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>>;

    /// Told when a message already applied arrives again (a redelivery); nothing is written.
    fn skipped(&self, _delivery: &Delivery) {}

    /// Whether `apply` does anything with a message of this type. One it does not is
    /// acknowledged without opening a transaction or writing its inbox row (its effect, none, is
    /// the same however often it arrives). Every type by default. A type `apply` reads but
    /// `applies` does not name is acknowledged unread: a new branch in `apply` is named here too.
    fn applies(&self, _delivery: &Delivery) -> bool {
        true
    }
}

/// The durable consumers `domain` keeps on other domains' event streams: one a row of
/// `Domain::reach().consumes`, the table the bus's permissions are made from too.
pub fn event_consumer_specs(
    domain: capstan_events::Domain,
    max_deliver: u32,
    ack_wait: std::time::Duration,
) -> Vec<ConsumerSpec> {
    domain
        .reach()
        .consumes
        .iter()
        .map(|subscription| ConsumerSpec {
            domain,
            stream: subscription.from.events_stream(),
            durable: subscription.durable.to_string(),
            filter_subject: subscription.from.events_subjects(),
            max_deliver,
            ack_wait,
        })
        .collect()
}

/// Consumes `spec` until `shutdown`, applying each new message once through `apply`.
pub async fn consume_with_inbox(
    service: &Service,
    spec: ConsumerSpec,
    apply: Arc<dyn Apply>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let store = service.store.clone();
    let consumer = spec.durable.clone();
    service
        .bus
        .consume(
            spec,
            move |delivery: Delivery| {
                let store = store.clone();
                let apply = apply.clone();
                let consumer = consumer.clone();
                async move {
                    if !apply.applies(&delivery) {
                        metrics::counter!("capstan_events_not_applied_total", "consumer" => consumer.clone())
                            .increment(1);
                        return Ok(());
                    }
                    let mut transaction = store.begin().await.map_err(retry)?;
                    if !inbox::record(&mut transaction, &consumer, delivery.envelope.id)
                        .await
                        .map_err(retry)?
                    {
                        debug!(%consumer, message_id = %delivery.envelope.id, "already applied, skipping");
                        apply.skipped(&delivery);
                        metrics::counter!("capstan_inbox_duplicates_total", "consumer" => consumer.clone())
                            .increment(1);
                        return Ok(());
                    }
                    apply.apply(&mut transaction, &delivery).await?;
                    transaction
                        .commit()
                        .await
                        .map_err(|error| retry(error.into()))?;
                    Ok(())
                }
            },
            shutdown,
        )
        .await?;
    Ok(())
}

/// As [`consume_with_inbox`], for another service's stream, which may not exist until that
/// service first starts: a consumer that cannot start is tried again, with a growing pause,
/// until `shutdown` — never a reason to stop this service.
pub async fn consume_patiently(
    service: &Service,
    spec: ConsumerSpec,
    apply: Arc<dyn Apply>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut pause = std::time::Duration::from_millis(200);
    while !shutdown.is_cancelled() {
        match consume_with_inbox(service, spec.clone(), apply.clone(), shutdown.clone()).await {
            Ok(()) => return Ok(()),
            Err(error) => {
                tracing::warn!(consumer = %spec.durable, error = format!("{error:#}"), "cannot consume yet, trying again");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(std::time::Duration::from_secs(10));
    }
    Ok(())
}

/// A store failure while applying a message: passing, so the message is delivered again (and
/// dead-lettered after the last allowed delivery).
pub fn retry(error: StoreError) -> HandlerError {
    HandlerError::Retry(error.to_string())
}

/// `delivery`'s data read as an `M`, or its rejection (dead-lettered at once) saying why not.
pub fn decode<M: capstan_events::Message>(
    delivery: &Delivery,
) -> Result<capstan_events::Envelope<M>, HandlerError> {
    delivery
        .envelope
        .decode::<M>()
        .map_err(|error| HandlerError::Reject(error.to_string()))
}

/// A store failure answering an rpc: logged with its cause, answered `unavailable` in words
/// that name the service and not the database's message.
pub fn unavailable(
    domain: capstan_events::Domain,
    error: StoreError,
) -> capstan_events::rpc::RpcError {
    tracing::error!(%error, service = %domain, "store failed");
    capstan_events::rpc::RpcError::new(
        capstan_events::rpc::ErrorCode::Unavailable,
        format!(
            "the {} service's database did not answer",
            domain.service_name()
        ),
    )
}
