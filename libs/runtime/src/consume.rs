//! Consumers whose effects happen once: each message's envelope id is recorded in the inbox in
//! the same transaction as what the handler writes, and a message seen before is only
//! acknowledged. Database trouble is retried (then dead-lettered); a handler's rejection, or
//! data that does not read as its type, dead-letters at once. A message of a type the consumer
//! does not apply is acknowledged without a transaction (a stream carries every event of its
//! domain; a fleet's joins and check-ins would otherwise cost each consuming service a commit
//! apiece).

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_store::PgConnection;
use capstan_store::{inbox, StoreError};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::Service;

/// What a consumer does with a message it has not seen before. It first reads the delivery
/// ([`Apply::read`]) as one of the messages it applies — in the services an enum with a variant
/// per event type, so the types a consumer reads are named once and `apply`'s `match` on them is
/// checked whole by the compiler — then applies it inside the transaction that also records it
/// in the inbox. Writes go through `connection`; outbox rows written there commit with them.
pub trait Apply: Send + Sync + 'static {
    /// A message of a type this consumer applies, read from its delivery.
    type Message: Send;

    /// What `delivery` is to this consumer: `None` for a type it does not apply, acknowledged
    /// without opening a transaction or writing its inbox row (its effect, none, is the same
    /// however often it arrives; a stream carries every event of its domain); an error for data
    /// that does not read as its type (dead-lettered at once, as [`decode`] says).
    fn read(&self, delivery: &Delivery) -> Option<Result<Self::Message, HandlerError>>;

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        message: Self::Message,
        delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>>;

    /// Told when a message already applied arrives again (a redelivery); nothing is written.
    fn skipped(&self, _delivery: &Delivery) {}
}

/// `delivery` read as an `M` and made a consumer's message by `wrap` (an enum's variant), when
/// it is of `M`'s type; for [`Apply::read`], one call per type a consumer applies:
/// `read_as(delivery, Heard::Left).or_else(|| read_as(delivery, Heard::Seen))`.
pub fn read_as<M: capstan_events::Message, T>(
    delivery: &Delivery,
    wrap: impl FnOnce(capstan_events::Envelope<M>) -> T,
) -> Option<Result<T, HandlerError>> {
    delivery
        .envelope
        .is::<M>()
        .then(|| decode::<M>(delivery).map(wrap))
}

/// The durable consumers `domain` keeps on other domains' event streams: one a row of
/// `Domain::reach().consumes`, the table the bus's permissions are made from too; and, for the
/// reader of conditions (incidents), one over the whole conditions stream.
pub fn event_consumer_specs(
    domain: capstan_events::Domain,
    max_deliver: u32,
    ack_wait: std::time::Duration,
) -> Vec<ConsumerSpec> {
    let conditions = (domain == capstan_events::conditions::READER).then(|| ConsumerSpec {
        domain,
        stream: capstan_events::conditions::STREAM.to_string(),
        durable: capstan_events::conditions::DURABLE.to_string(),
        filter_subject: capstan_events::conditions::SUBJECTS.to_string(),
        max_deliver,
        ack_wait,
    });
    domain
        .reach()
        .consumes
        .iter()
        .map(|subscription| ConsumerSpec {
            domain,
            stream: subscription.from.events_stream(),
            durable: subscription.durable.to_string(),
            filter_subject: subscription.filter_subject(),
            max_deliver,
            ack_wait,
        })
        .chain(conditions)
        .collect()
}

/// Consumes `spec` until `shutdown`, applying each new message once through `apply`.
pub async fn consume_with_inbox<A: Apply>(
    service: &Service,
    spec: ConsumerSpec,
    apply: Arc<A>,
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
                    let Some(message) = apply.read(&delivery) else {
                        metrics::counter!("capstan_events_not_applied_total", "consumer" => consumer.clone())
                            .increment(1);
                        return Ok(());
                    };
                    let message = message?;
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
                    apply.apply(&mut transaction, message, &delivery).await?;
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
pub async fn consume_patiently<A: Apply>(
    service: &Service,
    spec: ConsumerSpec,
    apply: Arc<A>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut pauses = crate::backoff::Doubling::new(
        std::time::Duration::from_millis(200),
        std::time::Duration::from_secs(10),
    );
    let mut pause = pauses.next().unwrap_or_default();
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
        pause = pauses.next().unwrap_or(pause);
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

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::agent_channel::{NodeDisconnected, NodeLeft};
    use capstan_events::{Envelope, Message, NodeId, RawEnvelope};

    /// A consumer's message, as the services write theirs.
    #[derive(Debug)]
    enum Heard {
        Disconnected(Envelope<NodeDisconnected>),
    }

    fn delivery(envelope: RawEnvelope) -> Delivery {
        Delivery {
            envelope,
            subject: "capstan.events.agent_channel.node_disconnected".into(),
            delivered: 1,
        }
    }

    fn disconnected() -> RawEnvelope {
        let data = NodeDisconnected {
            node_id: NodeId(7),
            fingerprint: "SHA256:seven".into(),
            disconnected_by: "ops".into(),
        };
        Envelope::new(data, None).into_raw()
    }

    // What a consumer reads is decoded into its variant; a type it does not read is not its
    // business (acknowledged unread); its own type with data that breaks the schema is rejected,
    // which dead-letters it before any transaction.
    #[test]
    fn a_type_read_is_decoded_another_is_passed_by_and_bad_data_is_rejected() {
        match read_as(&delivery(disconnected()), Heard::Disconnected) {
            Some(Ok(Heard::Disconnected(read))) => assert_eq!(read.data.node_id, NodeId(7)),
            other => panic!("read as its variant: {other:?}"),
        }

        let mut another = disconnected();
        another.event_type = NodeLeft::event_type().to_string();
        assert!(
            read_as(&delivery(another), Heard::Disconnected).is_none(),
            "node_left is not read as node_disconnected"
        );

        let mut broken = disconnected();
        broken.data = serde_json::json!({"node_id": "seven"});
        match read_as(&delivery(broken), Heard::Disconnected) {
            Some(Err(HandlerError::Reject(why))) => {
                assert!(why.contains("node_disconnected"), "{why}")
            }
            other => panic!("rejected: {other:?}"),
        }
    }
}
