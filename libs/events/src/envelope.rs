//! The CloudEvents 1.0 envelope (structured JSON mode) every event and command travels in.

use chrono::{DateTime, SubsecRound, Utc};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use uuid::Uuid;

use crate::Message;

/// The only CloudEvents version we speak.
pub const SPEC_VERSION: &str = "1.0";

/// The largest envelope the bus carries (NATS' default `max_payload`). A bigger one is refused
/// before it is parsed.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// A CloudEvents 1.0 event in structured JSON mode, with Capstan's extension attributes
/// `dataversion`, `correlationid` and `causationid`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope<T> {
    pub specversion: String,
    /// UUIDv7; also the `Nats-Msg-Id` header, so JetStream drops a duplicate publish.
    pub id: Uuid,
    /// `capstan/<service>`.
    pub source: String,
    /// `capstan.<domain>.<name>`.
    #[serde(rename = "type")]
    pub event_type: String,
    pub time: DateTime<Utc>,
    pub datacontenttype: String,
    /// The entity the message is about, such as `node/17`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The version of `data`'s shape.
    pub dataversion: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlationid: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causationid: Option<Uuid>,
    pub data: T,
}

/// An envelope whose `data` has not been read into a type yet: what a consumer first sees.
pub type RawEnvelope = Envelope<serde_json::Value>;

/// Why bytes off the bus are not a message we can take. Each is a reason to dead-letter.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EnvelopeError {
    #[error("message of {size} bytes is larger than the {limit} byte limit")]
    TooLarge { size: usize, limit: usize },
    #[error("malformed envelope: {0}")]
    Malformed(String),
    #[error("unsupported specversion {0:?}, expected \"1.0\"")]
    UnsupportedSpecVersion(String),
    #[error("unsupported datacontenttype {0:?}, expected \"application/json\"")]
    UnsupportedContentType(String),
    #[error("unknown message type {0:?}")]
    UnknownType(String),
    #[error(
        "unsupported dataversion {found} of {event_type}, this consumer reads version {expected}"
    )]
    UnsupportedVersion {
        event_type: String,
        found: u32,
        expected: u32,
    },
    #[error("data of {event_type} does not match its schema: {reason}")]
    InvalidData { event_type: String, reason: String },
}

impl<T: Message> Envelope<T> {
    /// A new envelope for `data`, about `subject` (such as `node/17`) when there is one.
    pub fn new(data: T, subject: Option<String>) -> Self {
        Envelope {
            specversion: SPEC_VERSION.to_string(),
            id: Uuid::now_v7(),
            source: T::DOMAIN.source(),
            event_type: T::event_type(),
            // CloudEvents readers in other languages choke on nanoseconds; microseconds are
            // what PostgreSQL keeps too.
            time: Utc::now().trunc_subsecs(6),
            datacontenttype: "application/json".to_string(),
            subject,
            dataversion: T::VERSION,
            correlationid: None,
            causationid: None,
            data,
        }
    }

    /// The same envelope, marked as part of the work `correlation` names.
    pub fn correlated(mut self, correlation: Option<Uuid>) -> Self {
        self.correlationid = correlation;
        self
    }

    /// The same envelope, marked as caused by `cause` and sharing its correlation.
    pub fn caused_by<C>(mut self, cause: &Envelope<C>) -> Self {
        self.causationid = Some(cause.id);
        self.correlationid = cause.correlationid.or(Some(cause.id));
        self
    }

    /// The subject this envelope is published on.
    pub fn bus_subject(&self) -> String {
        T::subject()
    }

    /// The envelope with `data` as JSON, ready for an outbox row or the wire.
    pub fn into_raw(self) -> RawEnvelope {
        let data = serde_json::to_value(&self.data)
            .expect("a Message's data serialises to JSON (derived Serialize)");
        Envelope {
            specversion: self.specversion,
            id: self.id,
            source: self.source,
            event_type: self.event_type,
            time: self.time,
            datacontenttype: self.datacontenttype,
            subject: self.subject,
            dataversion: self.dataversion,
            correlationid: self.correlationid,
            causationid: self.causationid,
            data,
        }
    }
}

impl RawEnvelope {
    /// Reads bytes off the bus, refusing anything too large, malformed, or not CloudEvents 1.0
    /// JSON, with a reason fit for a dead letter.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(EnvelopeError::TooLarge {
                size: bytes.len(),
                limit: MAX_MESSAGE_BYTES,
            });
        }
        let envelope: RawEnvelope = serde_json::from_slice(bytes)
            .map_err(|error| EnvelopeError::Malformed(error.to_string()))?;
        if envelope.specversion != SPEC_VERSION {
            return Err(EnvelopeError::UnsupportedSpecVersion(envelope.specversion));
        }
        if envelope.datacontenttype != "application/json" {
            return Err(EnvelopeError::UnsupportedContentType(
                envelope.datacontenttype,
            ));
        }
        Ok(envelope)
    }

    /// The envelope as bytes for the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a RawEnvelope always serialises")
    }

    /// Whether this is an `M`, by its `type`.
    pub fn is<M: Message>(&self) -> bool {
        self.event_type == M::event_type()
    }

    /// Reads `data` as an `M`, checking the type and `dataversion` first.
    pub fn decode<M: Message + DeserializeOwned>(&self) -> Result<Envelope<M>, EnvelopeError> {
        if !self.is::<M>() {
            return Err(EnvelopeError::UnknownType(self.event_type.clone()));
        }
        if self.dataversion != M::VERSION {
            return Err(EnvelopeError::UnsupportedVersion {
                event_type: self.event_type.clone(),
                found: self.dataversion,
                expected: M::VERSION,
            });
        }
        let data: M = serde_json::from_value(self.data.clone()).map_err(|error| {
            EnvelopeError::InvalidData {
                event_type: self.event_type.clone(),
                reason: error.to_string(),
            }
        })?;
        Ok(Envelope {
            specversion: self.specversion.clone(),
            id: self.id,
            source: self.source.clone(),
            event_type: self.event_type.clone(),
            time: self.time,
            datacontenttype: self.datacontenttype.clone(),
            subject: self.subject.clone(),
            dataversion: self.dataversion,
            correlationid: self.correlationid,
            causationid: self.causationid,
            data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_channel::NodeLeft;
    use crate::NodeId;

    fn started() -> Envelope<NodeLeft> {
        Envelope::new(
            NodeLeft {
                node_id: NodeId(17),
                fingerprint: "SHA256:abc".into(),
                left_at: Utc::now(),
            },
            Some("node/17".into()),
        )
    }

    #[test]
    fn an_envelope_carries_every_cloudevents_attribute_with_its_spelling() {
        let raw = started().into_raw();
        let json: serde_json::Value = serde_json::from_slice(&raw.to_bytes()).unwrap();
        for attribute in [
            "specversion",
            "id",
            "source",
            "type",
            "time",
            "datacontenttype",
            "subject",
            "dataversion",
            "data",
        ] {
            assert!(json.get(attribute).is_some(), "missing {attribute}");
        }
        assert_eq!(json["specversion"], "1.0");
        assert_eq!(json["type"], "capstan.agent_channel.node_left");
        assert_eq!(json["source"], "capstan/agent-channel");
        assert_eq!(raw.id.get_version_num(), 7);
    }

    #[test]
    fn an_envelope_reads_back_into_its_type() {
        let original = started();
        let raw = RawEnvelope::from_slice(&original.clone().into_raw().to_bytes()).unwrap();
        assert_eq!(raw.decode::<NodeLeft>().unwrap(), original);
    }

    #[test]
    fn a_caused_message_shares_the_correlation_of_its_cause() {
        let cause = started().correlated(Some(Uuid::now_v7()));
        let effect = started().caused_by(&cause);
        assert_eq!(effect.causationid, Some(cause.id));
        assert_eq!(effect.correlationid, cause.correlationid);
    }

    #[test]
    fn bad_bytes_are_refused_with_a_reason() {
        assert!(matches!(
            RawEnvelope::from_slice(b"{not json"),
            Err(EnvelopeError::Malformed(_))
        ));
        let too_big = vec![b' '; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(
            RawEnvelope::from_slice(&too_big),
            Err(EnvelopeError::TooLarge { .. })
        ));
        let mut raw = started().into_raw();
        raw.specversion = "0.3".into();
        assert_eq!(
            RawEnvelope::from_slice(&raw.to_bytes()),
            Err(EnvelopeError::UnsupportedSpecVersion("0.3".into()))
        );
    }

    #[test]
    fn an_unknown_version_or_type_is_refused_when_decoding() {
        let mut raw = started().into_raw();
        raw.dataversion = 2;
        assert!(matches!(
            raw.decode::<NodeLeft>(),
            Err(EnvelopeError::UnsupportedVersion { found: 2, .. })
        ));
        raw.dataversion = 1;
        raw.event_type = "capstan.agent_channel.other".into();
        assert!(matches!(
            raw.decode::<NodeLeft>(),
            Err(EnvelopeError::UnknownType(_))
        ));
        raw.event_type = "capstan.agent_channel.node_left".into();
        raw.data = serde_json::json!({"node_id": "seventeen"});
        assert!(matches!(
            raw.decode::<NodeLeft>(),
            Err(EnvelopeError::InvalidData { .. })
        ));
    }
}
