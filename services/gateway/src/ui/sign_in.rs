//! Signing in and out, and choosing a password. Sign-in answers an unknown name and a wrong
//! password alike (and verifies a dummy hash for an unknown name, so the time taken tells
//! nothing either), and is throttled per operator name and per address
//! ([`crate::domain::throttle`]).

use askama::Template;
use axum::{
    extract::{Query, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Redirect, Response},
};
use serde::Deserialize;
use tracing::{error, info};

use super::{
    cookies,
    guard::{FormFields, PeerAddress},
    redirect_with, render, retry_after, settings, Chrome, Flash, UiError, UiSession,
};
use crate::{
    domain::{next_path::safe_next, throttle},
    identity::{digest, record_act},
    password::{self, check_new_password, Password},
    state::AppState,
    store::{self, AuditEntry},
};

#[derive(Template)]
#[template(path = "sign_in.html")]
struct SignInPage {
    chrome: Chrome,
    next: String,
    name: String,
    problem: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct NextQuery {
    next: Option<String>,
}

/// The sign-in form, with a fresh pre-session token in a cookie and in the form.
fn sign_in_form(
    headers: &HeaderMap,
    status: StatusCode,
    next: String,
    name: String,
    problem: Option<String>,
) -> Response {
    let token = cookies::random_secret();
    let mut chrome = Chrome::anonymous(headers, "Sign in", "");
    chrome.csrf = token.clone();
    let page = SignInPage {
        chrome,
        next,
        name,
        problem,
    };
    let mut response = render(status, &page.chrome, &page);
    response
        .headers_mut()
        .append(header::SET_COOKIE, cookies::pre_session(token));
    response
}

pub async fn page(headers: HeaderMap, Query(query): Query<NextQuery>) -> Response {
    sign_in_form(
        &headers,
        StatusCode::OK,
        safe_next(query.next.as_deref()),
        String::new(),
        None,
    )
}

/// The longest operator name worth looking up (the table's rule is 64).
const MAX_NAME: usize = 64;

pub async fn sign_in(
    State(state): State<AppState>,
    PeerAddress(address): PeerAddress,
    headers: HeaderMap,
    fields: FormFields,
) -> Response {
    let next = safe_next(fields.get("next"));
    let name: String = fields
        .get("name")
        .unwrap_or_default()
        .trim()
        .chars()
        .take(200)
        .collect();
    let typed = Password::new(fields.get("password").unwrap_or_default().to_string());
    let address = address.unwrap_or_else(|| "unknown".into());
    let (record, secret) = match signed_in(&state, &name, typed, &address).await {
        Ok(signed_in) => signed_in,
        Err(Refused::Unavailable) => return UiError::unavailable().into_response(),
        Err(Refused::Form {
            status,
            problem,
            retry_after_secs,
        }) => {
            let mut response = sign_in_form(&headers, status, next, name, Some(problem));
            if let Some(seconds) = retry_after_secs {
                retry_after(&mut response, seconds);
            }
            return response;
        }
    };
    let to = if record.must_change_password {
        "/ui/password".to_string()
    } else {
        next
    };
    let mut response = Redirect::to(&to).into_response();
    let headers = response.headers_mut();
    headers.append(header::SET_COOKIE, cookies::session(secret));
    headers.append(
        header::SET_COOKIE,
        cookies::clear(cookies::PRE_SESSION_COOKIE),
    );
    response
}

/// Why a sign-in started no session.
enum Refused {
    /// The database did not answer.
    Unavailable,
    /// The form again, saying why, with `Retry-After` when waiting helps.
    Form {
        status: StatusCode,
        problem: String,
        retry_after_secs: Option<u64>,
    },
}

impl Refused {
    fn form(status: StatusCode, problem: impl Into<String>) -> Refused {
        Refused::Form {
            status,
            problem: problem.into(),
            retry_after_secs: None,
        }
    }
}

/// Signs `name` in from `address` with `typed`: the attempt counted and throttled, the
/// password checked, the session started and audited. The operator and the session's secret.
async fn signed_in(
    state: &AppState,
    name: &str,
    typed: Password,
    address: &str,
) -> Result<(store::SignInRecord, String), Refused> {
    if name.is_empty() || typed.expose().is_empty() {
        return Err(Refused::form(
            StatusCode::BAD_REQUEST,
            "Enter your operator name and password.",
        ));
    }
    let attempt = counted_attempt(state, name, address).await?;
    let record = checked_password(state, name, typed, address, attempt).await?;
    if let Err(failure) = store::forget_sign_in_failure(&state.store, attempt).await {
        error!(error = %failure, "cannot take back a sign-in attempt");
    }
    if let Err(failure) = store::clear_sign_in_failures(&state.store, &record.name, address).await {
        error!(error = %failure, "cannot clear sign-in failures");
    }
    let secret = start_session(state, &record, address).await?;
    Ok((record, secret))
}

/// Counts the attempt as a failure until its password is found right, unless the name or the
/// address is throttled; a name strangers have been failing under is slowed down, never
/// stopped.
async fn counted_attempt(state: &AppState, name: &str, address: &str) -> Result<i64, Refused> {
    let ui = settings();
    let window = ui
        .throttle
        .window
        .to_std()
        .unwrap_or(std::time::Duration::from_secs(15 * 60));
    // The attempt is counted before its password is checked, under its address's lock, so
    // forty wrong passwords sent at once meet the same count one after another.
    let counted = store::count_sign_in(
        &state.store,
        name,
        address,
        window,
        ui.throttle.account_failures,
        ui.throttle.address_failures,
    )
    .await
    .map_err(|failure| {
        error!(error = %failure, "cannot read sign-in failures");
        Refused::Unavailable
    })?;
    let recent = &counted.recent;
    let verdict = throttle::verdict(recent.now, &recent.pair, &recent.address, ui.throttle);
    if let (Some(sentence), Some(seconds)) = (verdict.sentence(), verdict.retry_after_secs()) {
        info!(%address, "sign-in throttled");
        return Err(Refused::Form {
            status: StatusCode::TOO_MANY_REQUESTS,
            problem: sentence,
            retry_after_secs: Some(seconds),
        });
    }
    let delay = throttle::name_delay(recent.name, ui.throttle);
    let attempt = counted
        .count_failure(name, address)
        .await
        .map_err(|failure| {
            error!(error = %failure, "cannot record a sign-in attempt");
            Refused::Unavailable
        })?;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    Ok(attempt)
}

/// The operator `name` when `typed` is their password; an unknown name and a wrong password
/// are refused alike (and audited with the reason).
async fn checked_password(
    state: &AppState,
    name: &str,
    typed: Password,
    address: &str,
    attempt: i64,
) -> Result<store::SignInRecord, Refused> {
    let record = if name.len() <= MAX_NAME {
        store::operator_for_sign_in(&state.store, name)
            .await
            .map_err(|failure| {
                error!(error = %failure, "cannot look up an operator");
                Refused::Unavailable
            })?
    } else {
        None
    };
    let stored = record
        .as_ref()
        .and_then(|record| record.password_hash.clone());
    let matches = match password::verify(typed, stored).await {
        Ok(matches) => matches,
        Err(password::Busy) => {
            // Never checked, so not a failure of this name.
            if let Err(failure) = store::forget_sign_in_failure(&state.store, attempt).await {
                error!(error = %failure, "cannot take back a sign-in attempt");
            }
            info!(%address, "sign-in deferred: too many at once");
            return Err(Refused::Form {
                status: StatusCode::SERVICE_UNAVAILABLE,
                problem: "Too many sign-ins at once. Try again in a moment.".into(),
                retry_after_secs: Some(password::BUSY_RETRY_AFTER_SECS),
            });
        }
    };
    match record {
        Some(record) if matches => Ok(record),
        record => {
            let reason = match &record {
                None => "unknown_name",
                Some(record) if record.password_hash.is_none() => "no_password",
                Some(_) => "wrong_password",
            };
            record_act(
                &state.store,
                &AuditEntry {
                    operator: name.to_string(),
                    level: record.as_ref().map(|record| record.level),
                    address: Some(address.to_string()),
                    action: "sign_in",
                    target: None,
                    outcome: "unauthorized".into(),
                    detail: serde_json::json!({"via": "ui", "reason": reason}),
                },
            )
            .await;
            info!(%address, "sign-in refused");
            Err(Refused::form(
                StatusCode::UNAUTHORIZED,
                "That operator name and password do not match.",
            ))
        }
    }
}

/// Starts `record`'s session from `address`, audited; its secret, for the cookie.
async fn start_session(
    state: &AppState,
    record: &store::SignInRecord,
    address: &str,
) -> Result<String, Refused> {
    let ui = settings();
    let secret = cookies::random_secret();
    let csrf = cookies::random_secret();
    if let Err(failure) = store::insert_session(
        &state.store,
        record.id,
        &digest(&secret),
        &csrf,
        Some(address),
        ui.session_idle,
        ui.session_lifetime,
    )
    .await
    {
        error!(error = %failure, "cannot start a session");
        return Err(Refused::Unavailable);
    }
    record_act(
        &state.store,
        &AuditEntry {
            operator: record.name.clone(),
            level: Some(record.level),
            address: Some(address.to_string()),
            action: "sign_in",
            target: None,
            outcome: "ok".into(),
            detail: serde_json::json!({"via": "ui"}),
        },
    )
    .await;
    Ok(secret)
}

pub async fn sign_out(State(state): State<AppState>, session: UiSession) -> Response {
    if let Err(failure) = store::delete_session(&state.store, session.session_id).await {
        error!(error = %failure, "cannot end a session");
        return UiError::unavailable()
            .with_session(&session)
            .into_response();
    }
    let mut response = redirect_with(
        "/ui/sign-in",
        Flash {
            ok: true,
            text: "You are signed out.".into(),
        },
    );
    response
        .headers_mut()
        .append(header::SET_COOKIE, cookies::clear(cookies::SESSION_COOKIE));
    response
}

#[derive(Template)]
#[template(path = "password.html")]
struct PasswordPage {
    chrome: Chrome,
    required: bool,
    problem: Option<String>,
    min_chars: usize,
}

async fn must_change(state: &AppState, session: &UiSession) -> bool {
    matches!(
        store::operator_for_sign_in(&state.store, &session.name).await,
        Ok(Some(record)) if record.must_change_password
    )
}

fn password_form(
    headers: &HeaderMap,
    session: &UiSession,
    status: StatusCode,
    required: bool,
    problem: Option<String>,
) -> Response {
    let page = PasswordPage {
        chrome: Chrome::signed_in(session, headers, "Change your password", "account"),
        required,
        problem,
        min_chars: password::MIN_PASSWORD_CHARS,
    };
    render(status, &page.chrome, &page)
}

pub async fn password_page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Response {
    let required = must_change(&state, &session).await;
    password_form(&headers, &session, StatusCode::OK, required, None)
}

pub async fn change_password(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    fields: FormFields,
) -> Response {
    let required = must_change(&state, &session).await;
    let current = Password::new(
        fields
            .get("current_password")
            .unwrap_or_default()
            .to_string(),
    );
    let new = fields.get("new_password").unwrap_or_default().to_string();
    let confirm = fields.get("confirm_password").unwrap_or_default();
    match changed_password(&state, &session, current, new, confirm).await {
        Ok(()) => redirect_with(
            "/ui/",
            Flash {
                ok: true,
                text: "Your password is changed; your other sessions are signed out.".into(),
            },
        ),
        Err(NotChanged::Page(response)) => *response,
        Err(NotChanged::Problem(problem)) => {
            let mut response = password_form(
                &headers,
                &session,
                StatusCode::BAD_REQUEST,
                required,
                Some(problem.to_string()),
            );
            response
                .extensions_mut()
                .insert(crate::error::AnsweredError {
                    code: "invalid_request",
                    message: problem.to_string(),
                });
            response
        }
    }
}

/// Why a password was not changed.
enum NotChanged {
    /// What was typed: the form again, saying this.
    Problem(String),
    /// The plane could not do it now: this page.
    Page(Box<Response>),
}

impl NotChanged {
    fn unavailable(session: &UiSession) -> NotChanged {
        NotChanged::Page(Box::new(
            UiError::unavailable().with_session(session).into_response(),
        ))
    }
}

/// Changes `session`'s operator's password from `current` to `new` (typed twice), signing out
/// their other sessions.
async fn changed_password(
    state: &AppState,
    session: &UiSession,
    current: Password,
    new: String,
    confirm: &str,
) -> Result<(), NotChanged> {
    let problem = |words: &str| Err(NotChanged::Problem(words.to_string()));
    let stored = store::password_hash_of(&state.store, session.operator_id)
        .await
        .map_err(|failure| {
            error!(error = %failure, "cannot read a password hash");
            NotChanged::unavailable(session)
        })?;
    match password::verify(current.clone(), stored).await {
        Ok(true) => {}
        Ok(false) => return problem("Your current password is not right."),
        Err(password::Busy) => {
            let mut response = UiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "Busy",
                "Too many passwords are being checked at once; try again in a moment.",
            )
            .with_session(session)
            .into_response();
            retry_after(&mut response, password::BUSY_RETRY_AFTER_SECS);
            return Err(NotChanged::Page(Box::new(response)));
        }
    }
    if let Err(words) = check_new_password(&new) {
        return problem(&words.to_string());
    }
    if new != confirm {
        return problem("The new password and its confirmation differ.");
    }
    if new == current.expose() {
        return problem("Choose a password different from the current one.");
    }
    let hashed = password::hash(Password::new(new))
        .await
        .map_err(|failure| {
            error!(error = %failure, "cannot hash a password");
            NotChanged::unavailable(session)
        })?;
    store::change_password(
        &state.store,
        session.operator_id,
        &hashed,
        session.session_id,
    )
    .await
    .map_err(|failure| {
        error!(error = %failure, "cannot store a password");
        NotChanged::unavailable(session)
    })
}
