//! The outside systems a signal reaches: mail over SMTP and webhooks over HTTP(S), each behind
//! a trait with its real implementation. [`Drivers::attempt`] makes one delivery attempt and
//! says how it went, in words for the delivery log.

pub mod mail;
pub mod webhook;

use capstan_events::incidents::rpc::WebhookKind;
use capstan_store::{Store, StoreError};
use chrono::Utc;
use futures::future::BoxFuture;

use crate::domain::mail::mail;
use crate::domain::signals::{Signal, SignalKind, SignalReason};
use crate::domain::webhooks::{slack_body, standard_body, IncidentSignal, WebhookSecret};
use crate::store::signals::{self, Due};

/// Why a delivery (or a check of where it would go) failed, told apart so a caller can tell a
/// timeout from a refusal. Each message is the line the delivery log shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// An address, URL, message or setting this driver cannot use as written.
    #[error("{0}")]
    Unusable(String),
    /// The plane's address policy (or the webhook scheme rule) refuses where it would go.
    #[error("{0}")]
    Refused(String),
    /// Where it would go is not there: a name that does not resolve, an operator without a
    /// mail address, a deleted webhook.
    #[error("{0}")]
    NotFound(String),
    /// No connection could be made (to the other end, or to the plane's database).
    #[error("{0}")]
    Unreachable(String),
    /// The other end answered, refusing or failing.
    #[error("{0}")]
    Rejected(String),
    /// No answer in time.
    #[error("{0}")]
    Timeout(String),
}

/// Sends one plain-text mail.
pub trait Mailer: Send + Sync {
    /// `Ok` with what the server answered, or `Err` saying why it was not sent.
    fn send<'a>(
        &'a self,
        to: &'a str,
        subject: &'a str,
        body: &'a str,
    ) -> BoxFuture<'a, Result<String, DeliveryError>>;
}

/// Posts one webhook body with its headers.
pub trait Poster: Send + Sync {
    fn post<'a>(
        &'a self,
        url: &'a str,
        headers: &'a [(&'static str, String)],
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<String, DeliveryError>>;
}

/// What deliveries go through.
pub struct Drivers {
    /// `None` when no SMTP server is configured: then no mail delivery is ever made.
    pub mailer: Option<Box<dyn Mailer>>,
    pub poster: Box<dyn Poster>,
    /// The plane's name, in mail subjects.
    pub plane_name: String,
}

fn reason(text: &str) -> SignalReason {
    match text {
        "reopened" => SignalReason::Reopened,
        "unproven" => SignalReason::Unproven,
        _ => SignalReason::Opened,
    }
}

impl Drivers {
    /// One attempt of `due`: `Ok` with the other end's answer, `Err` with why it failed.
    pub async fn attempt(&self, store: &Store, due: &Due) -> Result<String, DeliveryError> {
        let unreachable = |error: StoreError| DeliveryError::Unreachable(error.to_string());
        let severity = crate::store::severity(&due.severity)
            .map_err(|error| DeliveryError::Unusable(error.to_string()))?;
        let incident = IncidentSignal {
            incident_id: due.incident_id,
            node_id: due.node_id,
            node_name: due
                .node_name
                .clone()
                .unwrap_or_else(|| format!("node {}", due.node_id)),
            source: due.source.clone(),
            title: due.title.clone(),
            detail: due.detail.clone(),
            severity,
            reason: reason(&due.reason),
            at: due.signal_at,
        };
        let mut connection = store
            .pool()
            .acquire()
            .await
            .map_err(|error| DeliveryError::Unreachable(format!("database: {error}")))?;
        match due.channel.as_str() {
            "mail" => {
                let Some(mailer) = &self.mailer else {
                    return Err(DeliveryError::Unusable(
                        "mail is not configured (CAPSTAN__INCIDENTS__SMTP_URL)".into(),
                    ));
                };
                let address = signals::mail_address(&mut connection, due.target)
                    .await
                    .map_err(unreachable)?
                    .ok_or_else(|| {
                        DeliveryError::NotFound("the operator has no mail address now".into())
                    })?;
                let (subject, body) = mail(&self.plane_name, &incident);
                mailer.send(&address, &subject, &body).await
            }
            "webhook" => {
                let (url, kind, secret) = signals::webhook(&mut connection, due.target)
                    .await
                    .map_err(unreachable)?
                    .ok_or_else(|| DeliveryError::NotFound("the webhook was deleted".into()))?;
                drop(connection);
                let secret = WebhookSecret::parse(&secret)
                    .map_err(|error| DeliveryError::Unusable(error.to_string()))?;
                let signal = Signal {
                    kind: SignalKind::for_severity(severity),
                    reason: incident.reason,
                    severity,
                };
                let kind = crate::store::webhook_kind(&kind)
                    .map_err(|error| DeliveryError::Unusable(error.to_string()))?;
                let body = match kind {
                    WebhookKind::Slack => slack_body(&incident),
                    WebhookKind::Standard => standard_body(&signal, &incident),
                }
                .to_string();
                // One id per delivery, the same on every retry, so a receiver can drop repeats.
                let id = format!("msg_capstan_{}", due.id);
                let headers = secret.headers(&id, Utc::now(), body.as_bytes());
                self.poster.post(&url, &headers, body.as_bytes()).await
            }
            other => Err(DeliveryError::Unusable(format!(
                "no driver delivers over {other:?}"
            ))),
        }
    }
}
