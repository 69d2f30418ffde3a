//! Outgoing webhooks: signing per the Standard Webhooks convention and the bodies sent.
//! Each delivery carries `webhook-id`, `webhook-timestamp` (Unix seconds) and
//! `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, keyed by the webhook's
//! secret `whsec_<base64>` (shown once, at creation). A `standard` webhook gets the generic JSON
//! body, a `slack` one a Slack incoming-webhook body in which nothing a node said can become a
//! link or a mention.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use chrono::{DateTime, Utc};
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::{json, Value};
use sha2::Sha256;

use super::record::Severity;
use super::signals::{Signal, SignalReason};
use super::{IncidentId, InvalidInput, NodeId};

/// A webhook secret's prefix.
pub const SECRET_PREFIX: &str = "whsec_";
/// The bytes of a secret this plane makes.
pub const SECRET_BYTES: usize = 32;
/// The Standard Webhooks bounds on a secret's length, in bytes.
pub const MIN_SECRET_BYTES: usize = 24;
pub const MAX_SECRET_BYTES: usize = 64;

/// A webhook's signing key. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("WebhookSecret(redacted)")
    }
}

impl WebhookSecret {
    /// A new secret from `random` bytes the caller drew from a secure source.
    pub fn from_random(random: [u8; SECRET_BYTES]) -> WebhookSecret {
        WebhookSecret(random.to_vec())
    }

    /// Reads `whsec_<base64>`; the key is 24 to 64 bytes.
    pub fn parse(text: &str) -> Result<WebhookSecret, InvalidInput> {
        let refuse = || {
            InvalidInput::new(
                "secret",
                "must be whsec_ followed by the base64 of 24 to 64 bytes",
            )
        };
        let encoded = text.strip_prefix(SECRET_PREFIX).ok_or_else(refuse)?;
        let key = STANDARD.decode(encoded).map_err(|_| refuse())?;
        if !(MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&key.len()) {
            return Err(refuse());
        }
        Ok(WebhookSecret(key))
    }

    /// The secret as it is shown once and stored: `whsec_<base64>`.
    pub fn reveal(&self) -> String {
        format!("{SECRET_PREFIX}{}", STANDARD.encode(&self.0))
    }

    fn mac(&self, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    /// The `webhook-signature` value: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let tag = self.mac(id, timestamp, body).finalize().into_bytes();
        format!("v1,{}", STANDARD.encode(tag))
    }

    /// Whether any `v1` signature in a `webhook-signature` value (space-separated) is this
    /// secret's over id, timestamp and body, compared in constant time.
    pub fn verifies(&self, id: &str, timestamp: i64, body: &[u8], header: &str) -> bool {
        header
            .split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .filter_map(|encoded| STANDARD.decode(encoded).ok())
            .any(|tag| self.mac(id, timestamp, body).verify_slice(&tag).is_ok())
    }

    /// The three headers of one delivery attempt of message `id` at `at`.
    pub fn headers(&self, id: &str, at: DateTime<Utc>, body: &[u8]) -> [(&'static str, String); 3] {
        let timestamp = at.timestamp();
        [
            ("webhook-id", id.to_string()),
            ("webhook-timestamp", timestamp.to_string()),
            ("webhook-signature", self.sign(id, timestamp, body)),
        ]
    }
}

/// What a signal tells a webhook.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IncidentSignal {
    pub incident_id: IncidentId,
    pub node_id: NodeId,
    pub node_name: String,
    pub source: String,
    pub title: String,
    pub detail: String,
    pub severity: Severity,
    pub reason: SignalReason,
    pub at: DateTime<Utc>,
}

/// The generic JSON body: Standard Webhooks' `{"type", "timestamp", "data"}`.
pub fn standard_body(signal: &Signal, incident: &IncidentSignal) -> Value {
    json!({
        "type": signal.kind.as_str(),
        "timestamp": incident.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "data": incident,
    })
}

/// Slack's control characters in message text (`&`, `<`, `>`), escaped so that nothing a node
/// said becomes a link, a mention or markup.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Slack-compatible incoming-webhook body.
pub fn slack_body(incident: &IncidentSignal) -> Value {
    let what = match incident.reason {
        SignalReason::Opened => "opened",
        SignalReason::Reopened => "reopened",
        SignalReason::Unproven => "is back: the fix is not proven",
    };
    let severity = match incident.severity {
        Severity::Critical => "Critical",
        Severity::Warning => "Warning",
    };
    let text = format!(
        "{severity} incident {what} on {}: {}\n{}",
        slack_escape(&incident.node_name),
        slack_escape(&incident.title),
        slack_escape(&incident.detail),
    );
    json!({ "text": text })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::domain::signals::{announce, Hush};

    /// The Standard Webhooks reference implementation's own vector (libraries/rust `test_sign`
    /// in github.com/standard-webhooks/standard-webhooks).
    const VECTOR_SECRET: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    const VECTOR_ID: &str = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
    const VECTOR_TIMESTAMP: i64 = 1649367553;
    const VECTOR_BODY: &[u8] = br#"{"email":"test@example.com","username":"test_user"}"#;
    const VECTOR_SIGNATURE: &str = "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=";

    #[test]
    fn a_signature_matches_the_standard_webhooks_reference_vector() {
        let secret = WebhookSecret::parse(VECTOR_SECRET).unwrap();
        assert_eq!(
            secret.sign(VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY),
            VECTOR_SIGNATURE
        );
        assert!(secret.verifies(VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY, VECTOR_SIGNATURE));
    }

    #[test]
    fn a_signature_over_another_body_id_or_time_does_not_verify() {
        let secret = WebhookSecret::parse(VECTOR_SECRET).unwrap();
        assert!(!secret.verifies(VECTOR_ID, VECTOR_TIMESTAMP, b"{}", VECTOR_SIGNATURE));
        assert!(!secret.verifies("msg_other", VECTOR_TIMESTAMP, VECTOR_BODY, VECTOR_SIGNATURE));
        assert!(!secret.verifies(
            VECTOR_ID,
            VECTOR_TIMESTAMP + 1,
            VECTOR_BODY,
            VECTOR_SIGNATURE
        ));
        let several = format!("v1,AAAA v2,xyz {VECTOR_SIGNATURE}");
        assert!(secret.verifies(VECTOR_ID, VECTOR_TIMESTAMP, VECTOR_BODY, &several));
    }

    #[test]
    fn the_headers_carry_id_unix_timestamp_and_signature() {
        let secret = WebhookSecret::parse(VECTOR_SECRET).unwrap();
        let at = Utc.timestamp_opt(VECTOR_TIMESTAMP, 0).unwrap();
        let headers = secret.headers(VECTOR_ID, at, VECTOR_BODY);
        assert_eq!(
            headers,
            [
                ("webhook-id", VECTOR_ID.to_string()),
                ("webhook-timestamp", VECTOR_TIMESTAMP.to_string()),
                ("webhook-signature", VECTOR_SIGNATURE.to_string()),
            ]
        );
    }

    #[test]
    fn a_secret_is_whsec_and_base64_of_24_to_64_bytes_and_is_never_shown_by_debug() {
        let made = WebhookSecret::from_random([7; SECRET_BYTES]);
        assert!(made.reveal().starts_with("whsec_"));
        assert_eq!(WebhookSecret::parse(&made.reveal()).unwrap(), made);
        assert_eq!(format!("{made:?}"), "WebhookSecret(redacted)");
        for bad in ["C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "whsec_!!", "whsec_AAAA"] {
            assert_eq!(
                WebhookSecret::parse(bad).unwrap_err().field,
                "secret",
                "{bad}"
            );
        }
    }

    fn incident(detail: &str) -> IncidentSignal {
        IncidentSignal {
            incident_id: 9,
            node_id: NodeId(1),
            node_name: "web-1".into(),
            source: "agent:disk_headroom".into(),
            title: "The site's disk is running out of space".into(),
            detail: detail.into(),
            severity: Severity::Critical,
            reason: SignalReason::Opened,
            at: Utc.timestamp_opt(VECTOR_TIMESTAMP, 0).unwrap(),
        }
    }

    #[test]
    fn the_standard_body_names_the_signal_type_and_carries_the_incident() {
        let signal = announce(SignalReason::Opened, Severity::Critical, Hush::default())
            .signal()
            .unwrap();
        let body = standard_body(&signal, &incident("3% free"));
        assert_eq!(body["type"], "incident.opened_critical");
        assert_eq!(body["timestamp"], "2022-04-07T21:39:13Z");
        assert_eq!(body["data"]["incident_id"], 9);
        assert_eq!(body["data"]["severity"], "critical");
    }

    #[test]
    fn in_20_nothing_a_node_said_becomes_a_link_or_mention_in_a_slack_body() {
        let body = slack_body(&incident("<https://evil.example|click> <!channel> & more"));
        let text = body["text"].as_str().unwrap();
        assert!(!text.contains('<') && !text.contains('>'));
        assert!(text.contains("&lt;https://evil.example|click&gt; &lt;!channel&gt; &amp; more"));
        assert!(text.starts_with("Critical incident opened on web-1"));
    }
}
