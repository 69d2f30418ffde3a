//! The Account page's notification preferences: the operator's mail address and whether a
//! warning or a critical incident sends mail (critical on, warning off by default). Read and
//! written as the API's `/api/v1/me/notifications` does (`api.rs`).

use axum::{extract::State, response::Response};

use crate::{
    domains::incidents::api::{notifications_of, save_notifications, Notifications},
    error::ApiError,
    identity::AuditDetail,
    state::AppState,
    ui::{acted, guard::FormFields, refusal_sentence, UiSession},
};

/// The longest address the form takes (the gateway's rule checks it again).
const MAX_EMAIL: usize = 254;

/// What the Account page's section shows.
pub struct NotificationsSection {
    pub email: String,
    pub email_warning: bool,
    pub email_critical: bool,
    pub max_email: usize,
    /// Why the preferences could not be read, in words.
    pub problem: Option<String>,
}

/// The section for `session`; a refusal is the section's problem, never the page's.
pub async fn notifications_section(state: &AppState, session: &UiSession) -> NotificationsSection {
    match notifications_of(state, session.actor()).await {
        Ok(notifications) => NotificationsSection {
            email: notifications.email.unwrap_or_default(),
            email_warning: notifications.email_warning,
            email_critical: notifications.email_critical,
            max_email: MAX_EMAIL,
            problem: None,
        },
        Err(refusal) => NotificationsSection {
            email: String::new(),
            email_warning: false,
            email_critical: true,
            max_email: MAX_EMAIL,
            problem: Some(refusal_sentence(&refusal)),
        },
    }
}

/// A checkbox: sent (`on`) when ticked, absent when not.
fn ticked(fields: &FormFields, name: &str) -> bool {
    fields.get(name).is_some()
}

pub async fn save(
    State(state): State<AppState>,
    session: UiSession,
    fields: FormFields,
) -> Response {
    let email = fields.get("email").unwrap_or_default().trim().to_string();
    if email.chars().count() > MAX_EMAIL {
        return acted(
            "/ui/account",
            Err(ApiError::invalid(
                "email",
                format!("is longer than {MAX_EMAIL} characters"),
            )),
        );
    }
    let body = Notifications {
        email: (!email.is_empty()).then_some(email),
        email_warning: ticked(&fields, "email_warning"),
        email_critical: ticked(&fields, "email_critical"),
    };
    let (warning, critical) = (body.email_warning, body.email_critical);
    let answer = save_notifications(&state, session.actor(), body).await;
    let mut response = acted(
        "/ui/account",
        answer.map(|saved| match saved.email {
            Some(email) => format!(
                "Saved: mail goes to {email} for {}.",
                match (warning, critical) {
                    (true, true) => "warnings and critical incidents",
                    (false, true) => "critical incidents",
                    (true, false) => "warnings",
                    (false, false) => "nothing (both are off)",
                }
            ),
            None => "Saved. You have no mail address, so no mail is sent to you.".to_string(),
        }),
    );
    response
        .extensions_mut()
        .insert(AuditDetail(serde_json::json!({
            "email_warning": warning,
            "email_critical": critical,
        })));
    response
}
