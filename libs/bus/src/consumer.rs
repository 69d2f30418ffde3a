//! Durable pull consumers with explicit acks. A handler's answer decides the message's fate:
//! done (ack), try again later (nak with a growing delay), or never (dead-letter now). A
//! message still failing after `max_deliver` deliveries, or one that is not a CloudEvents
//! envelope at all, goes to the dead-letter subject with the reason; nothing is dropped
//! silently, and the consumer keeps going.

use async_nats::jetstream::{
    self,
    consumer::{pull, AckPolicy, DeliverPolicy},
    AckKind,
};
use capstan_events::{dead_letter_subject, Domain, RawEnvelope};
use capstan_telemetry::propagation::{set_parent, TRACEPARENT};
use futures::StreamExt;
use std::{future::Future, time::Duration};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, info_span, warn, Instrument};

use crate::{Bus, BusError, Outgoing};

/// A message handed to a handler.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub envelope: RawEnvelope,
    pub subject: String,
    /// 1 on the first delivery.
    pub delivered: u64,
}

/// Why a handler did not take a message.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// Something passing (the database is away): deliver again later, dead-letter after the
    /// last allowed delivery.
    #[error("{0}")]
    Retry(String),
    /// The message itself is wrong (an unknown type, data that breaks its schema): no
    /// delivery will ever succeed, dead-letter it now.
    #[error("{0}")]
    Reject(String),
}

/// Which messages a consumer takes and how patiently.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// The owning domain: its dead letters go to `capstan.dlq.<domain>.<durable>`.
    pub domain: Domain,
    pub stream: String,
    /// The durable name, shared by every replica of the consuming service.
    pub durable: String,
    pub filter_subject: String,
    /// Deliveries before a failing message is dead-lettered.
    pub max_deliver: u32,
    /// Time to ack before JetStream delivers again.
    pub ack_wait: Duration,
}

/// Headers on a dead letter, so whoever reads it knows what happened.
pub const DEAD_LETTER_REASON: &str = "Capstan-Dead-Letter-Reason";
pub const DEAD_LETTER_SUBJECT: &str = "Capstan-Original-Subject";
pub const DEAD_LETTER_CONSUMER: &str = "Capstan-Consumer";
pub const DEAD_LETTER_DELIVERIES: &str = "Capstan-Deliveries";

impl ConsumerSpec {
    fn config(&self) -> pull::Config {
        pull::Config {
            durable_name: Some(self.durable.clone()),
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::Explicit,
            ack_wait: self.ack_wait,
            // We dead-letter on the last allowed delivery ourselves; the server's own limit
            // would stop redelivering silently, so it stays unlimited.
            max_deliver: -1,
            filter_subject: self.filter_subject.clone(),
            max_ack_pending: 1_000,
            ..Default::default()
        }
    }

    fn dead_letter_subject(&self) -> String {
        dead_letter_subject(self.domain, &self.durable)
    }
}

/// The delay before the next delivery after the `delivered`-th failed: 100 ms doubling, at
/// most 30 s.
pub fn retry_delay(delivered: u64) -> Duration {
    let exponent = delivered.saturating_sub(1).min(9) as u32;
    Duration::from_millis(100 * 2u64.pow(exponent)).min(Duration::from_secs(30))
}

enum Fate {
    Ack,
    Nak(Duration),
    DeadLetter(String),
}

impl Bus {
    /// Creates the durable consumer if it is missing (or updates it), then hands every
    /// message to `handler` one at a time until `shutdown`. Survives server restarts: a broken
    /// message stream is rebuilt after a short pause.
    pub async fn consume<H, Fut>(
        &self,
        spec: ConsumerSpec,
        handler: H,
        shutdown: CancellationToken,
    ) -> Result<(), BusError>
    where
        H: Fn(Delivery) -> Fut + Send + Sync,
        Fut: Future<Output = Result<(), HandlerError>> + Send,
    {
        let mut pause = Duration::from_millis(100);
        while !shutdown.is_cancelled() {
            match self.consume_until_broken(&spec, &handler, &shutdown).await {
                Ok(()) => return Ok(()),
                Err(error @ BusError::Refused(_)) if pause >= Duration::from_secs(5) => {
                    return Err(error)
                }
                Err(error) => {
                    warn!(consumer = %spec.durable, %error, "consumer interrupted, reconnecting");
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(Duration::from_secs(5));
        }
        Ok(())
    }

    async fn consume_until_broken<H, Fut>(
        &self,
        spec: &ConsumerSpec,
        handler: &H,
        shutdown: &CancellationToken,
    ) -> Result<(), BusError>
    where
        H: Fn(Delivery) -> Fut + Send + Sync,
        Fut: Future<Output = Result<(), HandlerError>> + Send,
    {
        let stream = self
            .jetstream()
            .get_stream(&spec.stream)
            .await
            .map_err(|error| crate::classify(format!("stream {}: {error}", spec.stream)))?;
        let consumer: jetstream::consumer::PullConsumer = stream
            .create_consumer(spec.config())
            .await
            .map_err(|error| crate::classify(format!("consumer {}: {error}", spec.durable)))?;
        let mut messages = consumer
            .stream()
            .max_messages_per_batch(100)
            .heartbeat(Duration::from_secs(5))
            .expires(Duration::from_secs(30))
            .messages()
            .await
            .map_err(|error| crate::classify(format!("consumer {}: {error}", spec.durable)))?;
        info!(consumer = %spec.durable, subject = %spec.filter_subject, "consuming");
        loop {
            let next = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                next = messages.next() => next,
            };
            let message = match next {
                None => return Err(BusError::Unavailable("message stream ended".into())),
                Some(Err(error)) => {
                    return Err(BusError::Unavailable(format!("message stream: {error}")))
                }
                Some(Ok(message)) => message,
            };
            self.take(spec, handler, message).await;
        }
    }

    async fn take<H, Fut>(&self, spec: &ConsumerSpec, handler: &H, message: jetstream::Message)
    where
        H: Fn(Delivery) -> Fut + Send + Sync,
        Fut: Future<Output = Result<(), HandlerError>> + Send,
    {
        let delivered = message
            .info()
            .map(|info| info.delivered as u64)
            .unwrap_or(1);
        let traceparent = message
            .headers
            .as_ref()
            .and_then(|headers| headers.get(TRACEPARENT))
            .map(|value| value.as_str().to_string());
        let fate = match RawEnvelope::from_slice(&message.payload) {
            Err(error) => Fate::DeadLetter(error.to_string()),
            Ok(envelope) => {
                let span = info_span!(
                    "consume",
                    consumer = %spec.durable,
                    message_type = %envelope.event_type,
                    message_id = %envelope.id,
                    delivered,
                );
                set_parent(&span, traceparent.as_deref());
                let delivery = Delivery {
                    envelope,
                    subject: message.subject.to_string(),
                    delivered,
                };
                match handler(delivery).instrument(span).await {
                    Ok(()) => Fate::Ack,
                    Err(HandlerError::Reject(reason)) => Fate::DeadLetter(reason),
                    Err(HandlerError::Retry(reason)) if delivered >= spec.max_deliver as u64 => {
                        Fate::DeadLetter(format!(
                            "still failing after {delivered} deliveries: {reason}"
                        ))
                    }
                    Err(HandlerError::Retry(reason)) => {
                        warn!(consumer = %spec.durable, delivered, %reason, "handler failed, will retry");
                        Fate::Nak(retry_delay(delivered))
                    }
                }
            }
        };
        metrics::counter!("capstan_bus_consumed_total", "consumer" => spec.durable.clone(),
            "fate" => match &fate { Fate::Ack => "ack", Fate::Nak(_) => "retry", Fate::DeadLetter(_) => "dead_letter" })
        .increment(1);
        let acked = match fate {
            Fate::Ack => message.ack().await,
            Fate::Nak(delay) => message.ack_with(AckKind::Nak(Some(delay))).await,
            Fate::DeadLetter(reason) => {
                match self.dead_letter(spec, &message, &reason, delivered).await {
                    Ok(()) => message.ack_with(AckKind::Term).await,
                    Err(error) => {
                        // Never drop it: leave it to be delivered again and dead-lettered then.
                        error!(consumer = %spec.durable, %reason, %error, "cannot dead-letter, will retry");
                        message
                            .ack_with(AckKind::Nak(Some(retry_delay(delivered))))
                            .await
                    }
                }
            }
        };
        if let Err(error) = acked {
            // The effect is committed with its inbox row, so a redelivery is harmless.
            warn!(consumer = %spec.durable, %error, "acknowledgement not sent, message will be redelivered");
        }
    }

    async fn dead_letter(
        &self,
        spec: &ConsumerSpec,
        message: &jetstream::Message,
        reason: &str,
        delivered: u64,
    ) -> Result<(), BusError> {
        error!(consumer = %spec.durable, subject = %message.subject, delivered, reason, "dead-lettering message");
        let sequence = message
            .info()
            .map(|info| info.stream_sequence)
            .unwrap_or_default();
        let mut outgoing = Outgoing {
            subject: spec.dead_letter_subject(),
            message_id: format!("{}-{}-{sequence}", spec.stream, spec.durable),
            payload: message.payload.clone(),
            traceparent: None,
        };
        if let Some(headers) = &message.headers {
            outgoing.traceparent = headers.get(TRACEPARENT).map(|value| value.to_string());
        }
        self.publish_with_headers(
            outgoing,
            &[
                (DEAD_LETTER_REASON, reason),
                (DEAD_LETTER_SUBJECT, message.subject.as_str()),
                (DEAD_LETTER_CONSUMER, spec.durable.as_str()),
                (DEAD_LETTER_DELIVERIES, &delivered.to_string()),
            ],
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_grow_and_stay_bounded() {
        assert_eq!(retry_delay(1), Duration::from_millis(100));
        assert_eq!(retry_delay(2), Duration::from_millis(200));
        assert_eq!(retry_delay(4), Duration::from_millis(800));
        assert_eq!(retry_delay(1_000), Duration::from_secs(30));
    }
}
