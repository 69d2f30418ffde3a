//! The Account page (an operator's own API tokens: create, shown once; revoke) and the audit
//! log's page (level 10).

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use tracing::error;

use super::{
    format::{ago, Ago},
    guard::{FormFields, PathId},
    redirect_with, render, Chrome, Flash, UiError, UiSession,
};
use crate::{
    identity::{AuditDetail, Token},
    input::QueryParams,
    state::AppState,
    store,
};

/// The longest label a token may carry (the table's rule is 200).
const MAX_LABEL: usize = 200;

struct TokenLine {
    id: i64,
    label: String,
    created: Ago,
    last_used: Option<Ago>,
    revoked: Option<Ago>,
}

#[derive(Template)]
#[template(path = "account.html")]
struct AccountPage {
    chrome: Chrome,
    level: u8,
    tokens: Vec<TokenLine>,
    /// A token just created: shown this once.
    new_token: Option<String>,
    problem: Option<String>,
    notifications: crate::domains::incidents::NotificationsSection,
}

async fn account(
    state: &AppState,
    session: &UiSession,
    headers: &HeaderMap,
    status: StatusCode,
    new_token: Option<String>,
    problem: Option<String>,
) -> Response {
    let rows = match store::tokens_of(&state.store, session.operator_id).await {
        Ok(rows) => rows,
        Err(failure) => {
            error!(error = %failure, "cannot list tokens");
            return UiError::unavailable().with_session(session).into_response();
        }
    };
    let tokens = rows
        .into_iter()
        .map(|row| TokenLine {
            id: row.id,
            label: row.label,
            created: ago(row.created_at),
            last_used: row.last_used_at.map(ago),
            revoked: row.revoked_at.map(ago),
        })
        .collect();
    let notifications = crate::domains::incidents::notifications_section(state, session).await;
    let page = AccountPage {
        chrome: Chrome::signed_in(session, headers, "Account", "account"),
        notifications,
        level: u8::from(session.level),
        tokens,
        new_token,
        problem,
    };
    render(status, &page.chrome, &page)
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Response {
    account(&state, &session, &headers, StatusCode::OK, None, None).await
}

pub async fn create_token(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    fields: FormFields,
) -> Response {
    let label = fields.get("label").unwrap_or_default().trim().to_string();
    if label.is_empty() || label.chars().count() > MAX_LABEL || label.chars().any(char::is_control)
    {
        let problem =
            format!("Give the token a label of 1 to {MAX_LABEL} characters, so you know it later.");
        let mut response = account(
            &state,
            &session,
            &headers,
            StatusCode::BAD_REQUEST,
            None,
            Some(problem.clone()),
        )
        .await;
        response
            .extensions_mut()
            .insert(crate::error::AnsweredError {
                code: "invalid_request",
                message: problem,
            });
        return response;
    }
    let token = Token::generate();
    let id =
        match store::add_token(&state.store, session.operator_id, &token.sha256(), &label).await {
            Ok(id) => id,
            Err(failure) => {
                error!(error = %failure, "cannot store a token");
                return UiError::unavailable()
                    .with_session(&session)
                    .into_response();
            }
        };
    // Shown once, on this answer; never stored, logged or put in a cookie.
    let mut response = account(
        &state,
        &session,
        &headers,
        StatusCode::OK,
        Some(token.expose().to_string()),
        None,
    )
    .await;
    response.extensions_mut().insert(AuditDetail(
        serde_json::json!({"token_id": id, "label": label}),
    ));
    response
}

pub async fn revoke_token(
    State(state): State<AppState>,
    session: UiSession,
    PathId(token_id): PathId,
) -> Response {
    match store::revoke_own_token(&state.store, session.operator_id, token_id).await {
        Ok(true) => redirect_with(
            "/ui/account",
            Flash {
                ok: true,
                text: format!("Token {token_id} is revoked; it no longer opens the API."),
            },
        ),
        Ok(false) => super::acted(
            "/ui/account",
            Err(crate::error::ApiError {
                status: StatusCode::NOT_FOUND,
                code: "not_found",
                message: format!("You have no live token {token_id}."),
            }),
        ),
        Err(failure) => {
            error!(error = %failure, "cannot revoke a token");
            UiError::unavailable()
                .with_session(&session)
                .into_response()
        }
    }
}

/// Rows on one page of the audit log.
const AUDIT_PAGE_ROWS: i64 = 50;

struct AuditLine {
    id: i64,
    when: Ago,
    operator: String,
    level: i16,
    action: String,
    target: String,
    outcome: String,
    ok: bool,
    address: String,
    detail: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
struct AuditPage {
    chrome: Chrome,
    rows: Vec<AuditLine>,
    /// The `before` of the next (older) page, if there are more rows.
    older: Option<i64>,
    first_page: bool,
}

pub async fn audit_page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, UiError> {
    let before = QueryParams::parse(&uri, &["before"])
        .and_then(|query| query.get::<i64>("before", "a row id"))
        .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let rows = store::audit_page(&state.store, before, AUDIT_PAGE_ROWS + 1)
        .await
        .map_err(|failure| {
            error!(error = %failure, "cannot read the audit log");
            UiError::unavailable().with_session(&session)
        })?;
    let more = rows.len() as i64 > AUDIT_PAGE_ROWS;
    let rows: Vec<AuditLine> = rows
        .into_iter()
        .take(AUDIT_PAGE_ROWS as usize)
        .map(|row| AuditLine {
            id: row.id,
            when: ago(row.at),
            operator: row.operator,
            level: row.level,
            action: row.action,
            target: row.target.unwrap_or_default(),
            ok: row.outcome == "ok",
            outcome: row.outcome,
            address: row.address.unwrap_or_default(),
            detail: match &row.detail {
                serde_json::Value::Object(map) if map.is_empty() => String::new(),
                detail => detail.to_string(),
            },
        })
        .collect();
    let older = more.then(|| rows.last().map(|row| row.id)).flatten();
    let page = AuditPage {
        chrome: Chrome::signed_in(&session, &headers, "Audit log", "audit"),
        rows,
        older,
        first_page: before.is_none(),
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}
