//! Webhooks (level 10): where signals are posted besides the bell and mail, Standard Webhooks
//! JSON or a Slack-compatible body, each with its minimum severity, and the delivery log (the
//! latest deliveries with every attempt and what the receiver answered). Creating one shows its
//! signing secret once, on that answer only; it is never stored by the gateway, logged or put
//! in a cookie.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use capstan_events::incidents::{
    rpc::{
        CreateWebhook, DeleteRequest, Done, ListRequest, WebhookDeliveriesRequest, WebhookDelivery,
        WebhookKind,
    },
    Severity,
};

use super::{ask, attempts};
use crate::{
    error::{AnsweredError, ApiError},
    identity::AuditDetail,
    state::AppState,
    ui::{
        acted,
        format::{ago, Ago},
        guard::{FormFields, PathId},
        refusal_sentence, render, Chrome, UiError, UiSession,
    },
};
use capstan_events::Word as _;

/// The longest URL a webhook may have.
const MAX_URL: usize = 2000;

/// The deliveries the delivery log shows.
const LOG_ROWS: u32 = 50;

/// One delivery of the log, with its attempts.
struct Delivery {
    id: i64,
    when: Ago,
    incident_id: i64,
    webhook_id: i64,
    url: String,
    state: String,
    attempts: u32,
    log: Vec<super::Attempt>,
}

fn delivery(found: WebhookDelivery) -> Delivery {
    Delivery {
        id: found.id,
        when: ago(found.at),
        incident_id: found.incident_id,
        webhook_id: found.webhook_id,
        url: found.url.unwrap_or_default(),
        state: found.state,
        attempts: found.attempts,
        log: attempts(&found.log),
    }
}

struct Line {
    id: i64,
    url: String,
    kind: &'static str,
    min_severity: &'static str,
    by: String,
    created: Ago,
}

#[derive(Template)]
#[template(path = "incidents_webhooks.html")]
struct WebhooksPage {
    chrome: Chrome,
    webhooks: Vec<Line>,
    problem: Option<String>,
    /// A webhook just created: its secret, shown this once.
    created: Option<(i64, String)>,
    max_url: usize,
    deliveries: Vec<Delivery>,
    log_problem: Option<String>,
}

async fn webhooks_page(
    state: &AppState,
    session: &UiSession,
    headers: &HeaderMap,
    status: StatusCode,
    created: Option<(i64, String)>,
    problem: Option<String>,
) -> Response {
    let request = ListRequest {
        actor: session.actor(),
    };
    let (webhooks, listing_problem) = match ask(
        state,
        &capstan_events::incidents::rpc::ListWebhooks(request),
    )
    .await
    {
        Ok(listed) => (
            listed
                .webhooks
                .into_iter()
                .map(|webhook| Line {
                    id: webhook.id,
                    url: webhook.url,
                    kind: webhook.kind.as_str(),
                    min_severity: webhook.min_severity.as_str(),
                    by: webhook.created_by,
                    created: ago(webhook.created_at),
                })
                .collect(),
            None,
        ),
        Err(refusal) => (Vec::new(), Some(refusal_sentence(&refusal))),
    };
    let request = WebhookDeliveriesRequest {
        actor: session.actor(),
        limit: LOG_ROWS,
    };
    let (deliveries, log_problem) = match ask(state, &request).await {
        Ok(log) => (log.deliveries.into_iter().map(delivery).collect(), None),
        Err(refusal) => (Vec::new(), Some(refusal_sentence(&refusal))),
    };
    let page = WebhooksPage {
        chrome: Chrome::signed_in(session, headers, "Webhooks", "webhooks"),
        webhooks,
        problem: problem.or(listing_problem),
        created,
        max_url: MAX_URL,
        deliveries,
        log_problem,
    };
    render(status, &page.chrome, &page)
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    Ok(webhooks_page(&state, &session, &headers, StatusCode::OK, None, None).await)
}

/// The webhook a form asks for, checked before anything is asked.
fn read(fields: &FormFields) -> Result<(String, WebhookKind, Severity), ApiError> {
    let url = fields.get("url").unwrap_or_default().trim().to_string();
    if url.is_empty() || url.len() > MAX_URL {
        return Err(ApiError::invalid(
            "url",
            format!("give the receiver's address (at most {MAX_URL} characters)"),
        ));
    }
    let kind = WebhookKind::parse(fields.get("kind").unwrap_or_default())
        .ok_or_else(|| ApiError::invalid("kind", "must be standard or slack"))?;
    let min_severity = Severity::parse(fields.get("min_severity").unwrap_or_default())
        .ok_or_else(|| ApiError::invalid("min_severity", "must be warning or critical"))?;
    Ok((url, kind, min_severity))
}

pub async fn create(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    fields: FormFields,
) -> Response {
    let answer = match read(&fields) {
        Ok((url, kind, min_severity)) => {
            let request = CreateWebhook {
                actor: session.actor(),
                url,
                kind,
                min_severity,
            };
            ask(&state, &request).await
        }
        Err(refusal) => Err(refusal),
    };
    match answer {
        Ok(created) => {
            let id = created.webhook.id;
            let mut response = webhooks_page(
                &state,
                &session,
                &headers,
                StatusCode::OK,
                Some((id, created.secret)),
                None,
            )
            .await;
            response
                .extensions_mut()
                .insert(AuditDetail(serde_json::json!({
                    "webhook_id": id,
                    "kind": created.webhook.kind,
                    "min_severity": created.webhook.min_severity.as_str(),
                })));
            response
        }
        Err(refusal) => {
            let mut response = webhooks_page(
                &state,
                &session,
                &headers,
                if refusal.status.is_client_error() {
                    StatusCode::BAD_REQUEST
                } else {
                    refusal.status
                },
                None,
                Some(refusal_sentence(&refusal)),
            )
            .await;
            response.extensions_mut().insert(AnsweredError {
                code: refusal.code,
                message: refusal.message,
            });
            response.into_response()
        }
    }
}

pub async fn delete(
    State(state): State<AppState>,
    session: UiSession,
    PathId(id): PathId,
) -> Response {
    let request = DeleteRequest {
        actor: session.actor(),
        id,
    };
    let answer: Result<Done, ApiError> = ask(
        &state,
        &capstan_events::incidents::rpc::DeleteWebhook(request),
    )
    .await;
    acted(
        "/ui/webhooks",
        answer.map(|_| format!("Webhook {id} is deleted; it is told nothing more.")),
    )
}

#[cfg(test)]
mod tests {
    use super::super::fields;
    use super::*;

    #[test]
    fn a_webhook_form_is_checked_naming_its_field() {
        let (url, kind, severity) = read(&fields(&[
            ("url", " https://hooks.example/x "),
            ("kind", "slack"),
            ("min_severity", "critical"),
        ]))
        .unwrap();
        assert_eq!(
            (url.as_str(), kind.as_str(), severity),
            ("https://hooks.example/x", "slack", Severity::Critical)
        );
        for (list, field) in [
            (vec![("kind", "slack"), ("min_severity", "critical")], "url"),
            (
                vec![
                    ("url", "https://x"),
                    ("kind", "teams"),
                    ("min_severity", "critical"),
                ],
                "kind",
            ),
            (
                vec![
                    ("url", "https://x"),
                    ("kind", "slack"),
                    ("min_severity", "info"),
                ],
                "min_severity",
            ),
        ] {
            let refusal = read(&fields(&list)).unwrap_err();
            assert!(refusal.message.starts_with(field), "{}", refusal.message);
        }
    }
}
