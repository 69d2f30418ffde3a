//! `/api/v1/incidents`, `/api/v1/silences`, `/api/v1/webhooks`, `/api/v1/me/notifications`,
//! `/api/v1/me/bell` and a node's alerts: the incidents service's API (levels in the rows).

use crate::api_doc::{refusals, Answer, Body, Doc, Parameter};
use crate::route::schema;
use axum::{
    extract::State,
    http::{StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::on,
    Json,
};
use capstan_events::incidents::rpc::{
    AddNote, Bell, CreateSilence, CreateWebhook, DeleteRequest, Done, GetIncident, Header,
    HeaderRequest, IncidentDetail, Incidents, ListIncidents, ListRequest, MailPreferences,
    NotificationsRequest, SetAlerts, SetNotifications, SilenceView, Silences, TriageIncident,
    Triaged, WebhookCreated, WebhookKind, Webhooks,
};
use capstan_events::incidents::Severity;
use capstan_events::rpc::Actor;
use capstan_events::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    ask::ask,
    domain::email::Email,
    error::ApiError,
    identity::Operator,
    input::{JsonBody, NodePath, PathId, QueryParams},
    route::{Method, Route},
    state::AppState,
    store,
};

use capstan_events::rpc::Level::{Admin, Change, Read};

/// This domain's rows of the route table.
pub const ROUTES: &[Route] = &[
    Route::operator(
        Method::Get,
        "/api/v1/incidents",
        Read,
        |filter| on(filter, list),
        None,
    )
    .answer(schema::<capstan_events::incidents::rpc::Incidents>)
    .doc(Doc {
        operation: "listIncidents",
        tag: "incidents",
        summary: "List incidents (needs you by default)",
        description: None,
        parameters: &[
            Parameter::Query {
                name: "view",
                description: "needs_you (default), new, snoozed, waiting, resolved, ignored or all",
                schema: r##"{"type": "string"}"##,
            },
            Parameter::Query {
                name: "node_id",
                description: "Only this node's",
                schema: r##"{"type": "integer"}"##,
            },
            Parameter::Query {
                name: "source",
                description: "agent:<recipe> or plane:<name>",
                schema: r##"{"type": "string"}"##,
            },
            Parameter::Query {
                name: "happening",
                description: "true: still happening; false: over",
                schema: r##"{"type": "boolean"}"##,
            },
        ],
        body: None,
        answer: Answer::new(
            200,
            "The incidents of the view, newest first, and the counts of every \
            view.",
        ),
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/incidents/header",
        Read,
        |filter| on(filter, header),
        None,
    )
    .answer(schema::<capstan_events::incidents::rpc::Header>)
    .doc(Doc {
        operation: "incidentsHeader",
        tag: "incidents",
        summary: "The header line's counts and colour",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/incidents/{id}",
        Read,
        |filter| on(filter, get),
        None,
    )
    .answer(schema::<capstan_events::incidents::rpc::IncidentDetail>)
    .doc(Doc {
        operation: "getIncident",
        tag: "incidents",
        summary: "An incident with its timeline and signals",
        description: None,
        parameters: &[Parameter::Id("The incident's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/incidents/{id}/triage",
        Change,
        |filter| on(filter, triage),
        Some("triage_incident"),
    )
    .body(schema::<TriageBody>)
    .answer(schema::<capstan_events::incidents::rpc::Triaged>)
    .doc(Doc {
        operation: "triageIncident",
        tag: "incidents",
        summary: "Set an incident's triage",
        description: Some("Audited."),
        parameters: &[Parameter::Id("The incident's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/incidents/{id}/notes",
        Change,
        |filter| on(filter, note),
        Some("note_incident"),
    )
    .body(schema::<NoteBody>)
    .answer(schema::<capstan_events::agent_channel::rpc::Done>)
    .doc(Doc {
        operation: "noteIncident",
        tag: "incidents",
        summary: "Leave a note on an incident",
        description: Some("Audited."),
        parameters: &[Parameter::Id("The incident's id")],
        body: None,
        answer: Answer::CREATED,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/silences",
        Change,
        |filter| on(filter, list_silences),
        None,
    )
    .answer(schema::<capstan_events::incidents::rpc::Silences>)
    .doc(Doc {
        operation: "listSilences",
        tag: "incidents",
        summary: "List silences",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/silences",
        Change,
        |filter| on(filter, create_silence),
        Some("create_silence"),
    )
    .body(schema::<SilenceBody>)
    .answer(schema::<capstan_events::incidents::rpc::SilenceView>)
    .doc(Doc {
        operation: "createSilence",
        tag: "incidents",
        summary: "Silence a node (and a Docker host's containers) until a time",
        description: Some("Audited."),
        parameters: &[],
        body: None,
        answer: Answer::CREATED,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Delete,
        "/api/v1/silences/{id}",
        Change,
        |filter| on(filter, delete_silence),
        Some("delete_silence"),
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>)
    .doc(Doc {
        operation: "deleteSilence",
        tag: "incidents",
        summary: "End a silence",
        description: Some("Audited."),
        parameters: &[Parameter::Id("The silence's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/webhooks",
        Admin,
        |filter| on(filter, list_webhooks),
        None,
    )
    .answer(schema::<capstan_events::incidents::rpc::Webhooks>)
    .doc(Doc {
        operation: "listWebhooks",
        tag: "incidents",
        summary: "List webhooks",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/webhooks",
        Admin,
        |filter| on(filter, create_webhook),
        Some("create_webhook"),
    )
    .body(schema::<WebhookBody>)
    .answer(schema::<capstan_events::incidents::rpc::WebhookCreated>)
    .doc(Doc {
        operation: "createWebhook",
        tag: "incidents",
        summary: "Create a webhook; the answer shows its secret once",
        description: Some("Audited."),
        parameters: &[],
        body: None,
        answer: Answer::CREATED,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Delete,
        "/api/v1/webhooks/{id}",
        Admin,
        |filter| on(filter, delete_webhook),
        Some("delete_webhook"),
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>)
    .doc(Doc {
        operation: "deleteWebhook",
        tag: "incidents",
        summary: "Delete a webhook",
        description: Some("Audited."),
        parameters: &[Parameter::Id("The webhook's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/me/notifications",
        Read,
        |filter| on(filter, get_notifications),
        None,
    )
    .answer(schema::<Notifications>)
    .doc(Doc {
        operation: "getNotifications",
        tag: "incidents",
        summary: "Your mail address and when you are mailed",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Put,
        "/api/v1/me/notifications",
        Read,
        |filter| on(filter, set_notifications),
        Some("set_notifications"),
    )
    // It takes the JSON it answers with; the document gives both the answer's schema.
    .answer(schema::<Notifications>)
    .doc(Doc {
        operation: "setNotifications",
        tag: "incidents",
        summary: "Set your mail address and when you are mailed",
        description: Some("Audited."),
        parameters: &[],
        body: Some(Body {
            description: None,
            required: true,
            schema: Some(r##"{"$ref": "#/components/schemas/Notifications"}"##),
        }),
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/me/bell",
        Read,
        |filter| on(filter, bell),
        None,
    )
    .answer(schema::<capstan_events::incidents::rpc::Bell>)
    .doc(Doc {
        operation: "bell",
        tag: "incidents",
        summary: "Your in-app notifications, newest first",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Put,
        "/api/v1/nodes/{id}/alerts",
        Change,
        |filter| on(filter, set_alerts),
        Some("set_alerts"),
    )
    .body(schema::<AlertsBody>)
    .answer(schema::<capstan_events::agent_channel::rpc::Done>)
    .doc(Doc {
        operation: "setAlerts",
        tag: "incidents",
        summary: "Set a node's alerts: automatic, on or off",
        description: Some("Audited."),
        parameters: &[Parameter::Id("The node's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
];

pub async fn list(
    State(state): State<AppState>,
    Operator(actor): Operator,
    uri: Uri,
) -> Result<Json<Incidents>, ApiError> {
    let query = QueryParams::parse(&uri, &["view", "node_id", "source", "happening"])?;
    let node_id = query.get::<NodeId>("node_id", "a positive whole number")?;
    if node_id.is_some_and(|node_id| node_id.get() <= 0) {
        return Err(ApiError::invalid(
            "node_id",
            "must be a positive whole number",
        ));
    }
    let request = ListIncidents {
        actor,
        view: query.get::<String>("view", "a view name")?,
        node_id,
        source: query.get::<String>("source", "agent:<recipe> or plane:<name>")?,
        happening: query.get::<bool>("happening", "true or false")?,
    };
    Ok(Json(ask(&state, &request).await?))
}

pub async fn get(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(id): PathId,
) -> Result<Json<IncidentDetail>, ApiError> {
    Ok(Json(ask(&state, &GetIncident { actor, id }).await?))
}

/// `POST /api/v1/incidents/{id}/triage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TriageBody {
    /// `resolved`, `ignored`, `new`, `snooze_4`, `snooze_24`, `snooze_72` or `snooze_168`.
    #[serde(rename = "do")]
    pub act: String,
    #[serde(default)]
    pub note: Option<String>,
}

pub async fn triage(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(id): PathId,
    JsonBody(body): JsonBody<TriageBody>,
) -> Result<Json<Triaged>, ApiError> {
    let request = TriageIncident {
        actor,
        id,
        act: body.act,
        note: body.note,
    };
    Ok(Json(ask(&state, &request).await?))
}

/// `POST /api/v1/incidents/{id}/notes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoteBody {
    pub note: String,
}

pub async fn note(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(id): PathId,
    JsonBody(body): JsonBody<NoteBody>,
) -> Result<Response, ApiError> {
    let request = AddNote {
        actor,
        id,
        note: body.note,
    };
    let done: Done = ask(&state, &request).await?;
    Ok((StatusCode::CREATED, Json(done)).into_response())
}

pub async fn header(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Header>, ApiError> {
    Ok(Json(ask(&state, &HeaderRequest { actor }).await?))
}

pub async fn list_silences(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Silences>, ApiError> {
    Ok(Json(
        ask(
            &state,
            &capstan_events::incidents::rpc::ListSilences(ListRequest { actor }),
        )
        .await?,
    ))
}

/// `POST /api/v1/silences`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SilenceBody {
    pub node_id: NodeId,
    pub ends_at: DateTime<Utc>,
    pub reason: String,
}

pub async fn create_silence(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JsonBody(body): JsonBody<SilenceBody>,
) -> Result<Response, ApiError> {
    if body.node_id.get() <= 0 {
        return Err(ApiError::invalid(
            "node_id",
            "must be a positive whole number",
        ));
    }
    let request = CreateSilence {
        actor,
        node_id: body.node_id,
        ends_at: body.ends_at,
        reason: body.reason,
    };
    let silence: SilenceView = ask(&state, &request).await?;
    Ok((StatusCode::CREATED, Json(silence)).into_response())
}

pub async fn delete_silence(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(id): PathId,
) -> Result<Json<Done>, ApiError> {
    Ok(Json(
        ask(
            &state,
            &capstan_events::incidents::rpc::DeleteSilence(DeleteRequest { actor, id }),
        )
        .await?,
    ))
}

pub async fn list_webhooks(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Webhooks>, ApiError> {
    Ok(Json(
        ask(
            &state,
            &capstan_events::incidents::rpc::ListWebhooks(ListRequest { actor }),
        )
        .await?,
    ))
}

/// `POST /api/v1/webhooks`: the answer holds the signing secret, shown this once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookBody {
    pub url: String,
    /// `standard` (Standard Webhooks JSON) or `slack`.
    pub kind: WebhookKind,
    pub min_severity: Severity,
}

pub async fn create_webhook(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JsonBody(body): JsonBody<WebhookBody>,
) -> Result<Response, ApiError> {
    let request = CreateWebhook {
        actor,
        url: body.url,
        kind: body.kind,
        min_severity: body.min_severity,
    };
    let created: WebhookCreated = ask(&state, &request).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub async fn delete_webhook(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(id): PathId,
) -> Result<Json<Done>, ApiError> {
    Ok(Json(
        ask(
            &state,
            &capstan_events::incidents::rpc::DeleteWebhook(DeleteRequest { actor, id }),
        )
        .await?,
    ))
}

/// `GET|PUT /api/v1/me/notifications`: the operator's mail address (the gateway's) and when
/// mail is wanted (the incidents service's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Notifications {
    pub email: Option<String>,
    pub email_warning: bool,
    pub email_critical: bool,
}

async fn me(state: &AppState, name: &str) -> Result<(i64, Option<String>), ApiError> {
    store::operator_contact(&state.store, name)
        .await
        .map_err(|error| ApiError::unavailable(format!("gateway: {error}")))?
        .ok_or_else(|| ApiError::forbidden(format!("no operator {name}")))
}

pub async fn get_notifications(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Notifications>, ApiError> {
    Ok(Json(notifications_of(&state, actor).await?))
}

pub async fn set_notifications(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JsonBody(body): JsonBody<Notifications>,
) -> Result<Json<Notifications>, ApiError> {
    Ok(Json(save_notifications(&state, actor, body).await?))
}

/// `actor`'s mail address (the gateway's) and when mail is wanted (the incidents service's);
/// the API and the Account page both read them here.
pub async fn notifications_of(state: &AppState, actor: Actor) -> Result<Notifications, ApiError> {
    let (operator_id, email) = me(state, &actor.name).await?;
    let preferences: MailPreferences = ask(
        state,
        &capstan_events::incidents::rpc::GetNotifications(NotificationsRequest {
            actor,
            operator_id,
        }),
    )
    .await?;
    Ok(Notifications {
        email,
        email_warning: preferences.email_warning,
        email_critical: preferences.email_critical,
    })
}

/// Sets `actor`'s mail address and preferences: the address is checked first, so a bad one
/// changes nothing.
pub async fn save_notifications(
    state: &AppState,
    actor: Actor,
    body: Notifications,
) -> Result<Notifications, ApiError> {
    let email = match body.email.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(Email::parse(text).map_err(|why| ApiError::invalid("email", why))?),
    };
    let (operator_id, _) = me(state, &actor.name).await?;
    let preferences = MailPreferences {
        email_warning: body.email_warning,
        email_critical: body.email_critical,
    };
    let request = SetNotifications {
        actor: actor.clone(),
        operator_id,
        preferences,
    };
    let _: MailPreferences = ask(state, &request).await?;
    store::set_email(&state.store, &actor.name, email.as_ref().map(Email::as_str))
        .await
        .map_err(|error| ApiError::unavailable(format!("gateway: {error}")))?;
    Ok(Notifications {
        email: email.map(|email| email.as_str().to_string()),
        ..body
    })
}

pub async fn bell(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Bell>, ApiError> {
    let (operator_id, _) = me(&state, &actor.name).await?;
    Ok(Json(
        ask(
            &state,
            &capstan_events::incidents::rpc::BellRequest(NotificationsRequest {
                actor,
                operator_id,
            }),
        )
        .await?,
    ))
}

/// `PUT /api/v1/nodes/{id}/alerts`: `automatic`, `on` or `off` (IN-15).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertsBody {
    pub alerts: String,
}

pub async fn set_alerts(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
    JsonBody(body): JsonBody<AlertsBody>,
) -> Result<Json<Done>, ApiError> {
    let request = SetAlerts {
        actor,
        node_id,
        alerts: body.alerts,
    };
    Ok(Json(ask(&state, &request).await?))
}

#[cfg(test)]
mod tests {
    use super::WebhookBody;
    use crate::input::parse_json;
    use capstan_events::incidents::rpc::WebhookKind;

    #[test]
    fn a_webhook_of_a_kind_not_known_is_refused_naming_the_field_and_the_kinds_taken() {
        let refused = parse_json::<WebhookBody>(
            br#"{"url": "https://hooks.example/x", "kind": "teams", "min_severity": "warning"}"#,
        )
        .unwrap_err();
        assert_eq!(refused.code, "invalid_request");
        assert!(
            refused
                .message
                .starts_with("kind: unknown variant `teams`, expected `standard` or `slack`"),
            "{}",
            refused.message
        );
        let taken = parse_json::<WebhookBody>(
            br#"{"url": "https://hooks.example/x", "kind": "slack", "min_severity": "warning"}"#,
        )
        .unwrap();
        assert_eq!(taken.kind, WebhookKind::Slack);
    }
}
