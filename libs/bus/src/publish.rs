//! Publishing to JetStream: every message carries its envelope id as `Nats-Msg-Id` (so the
//! server drops a duplicate) and the trace as `traceparent`, and counts as sent only once the
//! server acknowledged it.

use async_nats::{header::NATS_MESSAGE_ID, jetstream::message::PublishMessage, HeaderMap};
use bytes::Bytes;
use capstan_events::{Message, RawEnvelope};
use capstan_telemetry::propagation::TRACEPARENT;

use crate::{classify, Bus, BusError};

/// A message ready for the wire: what the outbox relay hands the bus.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub subject: String,
    /// The envelope id, sent as `Nats-Msg-Id`.
    pub message_id: String,
    pub payload: Bytes,
    pub traceparent: Option<String>,
}

impl Outgoing {
    /// A typed message, traced from the current span.
    pub fn of<M: Message>(envelope: capstan_events::Envelope<M>) -> Outgoing {
        let subject = envelope.bus_subject();
        Outgoing::raw(subject, &envelope.into_raw())
    }

    /// A command to another service, on the subject naming `sender`
    /// (`capstan.cmd.<domain>.<name>.<sender>`, issue 27), traced from the current span.
    pub fn command_from<M: capstan_events::Command>(
        sender: capstan_events::Domain,
        envelope: capstan_events::Envelope<M>,
    ) -> Outgoing {
        let subject = capstan_events::command_subject_from::<M>(sender);
        Outgoing::raw(subject, &envelope.into_raw())
    }

    /// An envelope already in JSON form, traced from the current span.
    pub fn raw(subject: String, envelope: &RawEnvelope) -> Outgoing {
        Outgoing {
            subject,
            message_id: envelope.id.to_string(),
            payload: Bytes::from(envelope.to_bytes()),
            traceparent: capstan_telemetry::propagation::current_traceparent(),
        }
    }

    fn into_publish(self, extra: &[(&str, &str)]) -> (String, PublishMessage) {
        let mut headers = HeaderMap::new();
        for (name, value) in extra {
            // header values cannot hold line breaks; a reason may
            headers.insert(*name, value.replace(['\r', '\n'], " ").as_str());
        }
        headers.insert(NATS_MESSAGE_ID, self.message_id.as_str());
        if let Some(traceparent) = &self.traceparent {
            headers.insert(TRACEPARENT, traceparent.as_str());
        }
        (
            self.subject,
            PublishMessage::build()
                .payload(self.payload)
                .headers(headers),
        )
    }
}

impl Bus {
    /// Publishes one message and waits for JetStream's ack.
    pub async fn publish(&self, message: Outgoing) -> Result<(), BusError> {
        self.publish_batch(vec![message]).await.map(|_| ())
    }

    /// Publishes `messages` in order, pipelined (all sent, then every ack awaited), and returns
    /// how many leading messages were acknowledged. On an error the acknowledged prefix is
    /// reported in the error's place by the count, so a caller can mark exactly those sent;
    /// anything after is sent again later (JetStream drops the duplicates by id).
    pub async fn publish_batch(&self, messages: Vec<Outgoing>) -> Result<usize, BusError> {
        let mut pending = Vec::with_capacity(messages.len());
        let mut send_error = None;
        for message in messages {
            let (subject, publish) = message.into_publish(&[]);
            match self.jetstream().send_publish(subject, publish).await {
                Ok(ack) => pending.push(ack),
                Err(error) => {
                    send_error = Some(classify(format!("publishing: {error}")));
                    break;
                }
            }
        }
        let mut acknowledged = 0;
        for ack in pending {
            match ack.await {
                Ok(_) => acknowledged += 1,
                Err(error) => {
                    return if acknowledged == 0 {
                        Err(classify(format!("awaiting publish ack: {error}")))
                    } else {
                        Ok(acknowledged)
                    };
                }
            }
        }
        match send_error {
            Some(error) if acknowledged == 0 => Err(error),
            _ => Ok(acknowledged),
        }
    }

    /// Publishes one message with extra headers (dead letters carry their reason this way).
    pub(crate) async fn publish_with_headers(
        &self,
        message: Outgoing,
        extra: &[(&str, &str)],
    ) -> Result<(), BusError> {
        let (subject, publish) = message.into_publish(extra);
        self.jetstream()
            .send_publish(subject, publish)
            .await
            .map_err(|error| classify(format!("publishing: {error}")))?
            .await
            .map(|_| ())
            .map_err(|error| classify(format!("awaiting publish ack: {error}")))
    }
}
