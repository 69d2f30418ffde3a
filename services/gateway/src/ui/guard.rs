//! The door of the UI's routes, from the route table: a live session (else a GET is sent to
//! sign in and a POST is refused 401), a password already chosen (else to the change-password
//! page), on every POST the session's CSRF token (else 403; checked here for every `Session`
//! POST, so no route can forget it), and the route's level (else 403). An act is written to
//! the audit log once answered, as the API's are. The sign-in form's POST has its own door:
//! the double-submit pre-session token.

use axum::{
    body::Body,
    extract::{FromRequestParts, Request, State},
    http::{request::Parts, Method, StatusCode},
    middleware::Next,
    response::{IntoResponse, Redirect, Response},
};
use capstan_events::rpc::{Actor, Level};
use capstan_events::NodeId;
use tracing::warn;

use super::{cookies, settings, UiError};
use crate::{
    identity::{self, digest, peer_address},
    input::read_limited,
    route::Route,
    state::AppState,
    store::{self, SessionRecord},
    ui::header_parts::{self, HeaderLine, HeaderPart},
};

/// The most a UI form may send.
pub const FORM_BODY_LIMIT: usize = 64 * 1024;

/// The signed-in operator of a UI request, put in place by [`require_session`].
#[derive(Clone)]
pub struct UiSession {
    pub session_id: i64,
    pub operator_id: i64,
    pub name: String,
    pub level: Level,
    pub csrf: String,
    pub address: Option<String>,
    /// The header lines of a page (the incidents' IN-16 line among them), asked once by
    /// [`require_session`] for a page drawn in the frame.
    pub header: Vec<HeaderLine>,
}

impl std::fmt::Debug for UiSession {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("UiSession")
            .field("name", &self.name)
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

impl UiSession {
    pub fn actor(&self) -> Actor {
        Actor {
            name: self.name.clone(),
            level: self.level,
            address: self.address.clone(),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for UiSession {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, UiError> {
        parts.extensions.get::<UiSession>().cloned().ok_or_else(|| {
            UiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Something went wrong",
                "This page was built without its session check.",
            )
        })
    }
}

/// A UI form's fields, parsed once by the guard (which needed the `csrf` field).
#[derive(Debug, Clone, Default)]
pub struct FormFields(pub Vec<(String, String)>);

impl FormFields {
    pub fn parse(bytes: &[u8]) -> FormFields {
        FormFields(url::form_urlencoded::parse(bytes).into_owned().collect())
    }

    /// A form as a browser would send these pairs, for the form readers' tests.
    #[cfg(test)]
    pub fn of(pairs: &[(&str, &str)]) -> FormFields {
        let encoded = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        FormFields::parse(encoded.as_bytes())
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for FormFields {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, UiError> {
        Ok(parts
            .extensions
            .get::<FormFields>()
            .cloned()
            .unwrap_or_default())
    }
}

/// Routes a signed-in operator may use before choosing their own password.
fn allowed_before_password_change(route: &Route) -> bool {
    matches!(route.path, "/ui/password" | "/ui/sign-out")
}

/// Where sign-in sends the operator back to: this request's path and query.
fn sign_in_location(parts: &Parts) -> String {
    let here = parts
        .uri
        .path_and_query()
        .map(|path| path.as_str())
        .unwrap_or("/ui/");
    let next: String = url::form_urlencoded::byte_serialize(here.as_bytes()).collect();
    format!("/ui/sign-in?next={next}")
}

/// Reads the form body under [`FORM_BODY_LIMIT`] and puts it back for the handler.
async fn read_form(parts: &Parts, body: Body) -> Result<(FormFields, Body), Response> {
    match read_limited(&parts.headers, body, FORM_BODY_LIMIT).await {
        Ok(bytes) => Ok((FormFields::parse(&bytes), Body::from(bytes))),
        Err(refusal) => Err(UiError::new(
            refusal.status,
            refusal.code,
            "That form could not be read",
            "The form sent was too large or unreadable; go back and try again.",
        )
        .into_response()),
    }
}

fn csrf_refused() -> UiError {
    UiError::forbidden(
        "This form has expired or did not come from this site. Go back, reload the page and \
         try again.",
    )
}

/// The door of a `Session(needed)` route; a page drawn in the frame gets the lines of
/// `header_parts`.
pub async fn require_session(
    State(state): State<AppState>,
    route: &'static Route,
    needed: Level,
    header_parts: &'static [HeaderPart],
    request: Request,
    next: Next,
) -> Response {
    let address = peer_address(&request).map(|address| address.to_string());
    let (mut parts, body) = request.into_parts();
    let is_post = parts.method == Method::POST;
    let record = match live_session(&state, &parts, is_post).await {
        Ok(record) => record,
        Err(refusal) => return refusal,
    };
    let session = UiSession {
        session_id: record.session_id,
        operator_id: record.operator_id,
        name: record.name.clone(),
        level: record.level,
        csrf: record.csrf_token.clone(),
        address,
        header: Vec::new(),
    };
    let body = if is_post {
        match checked_form(&session, route, &mut parts, body).await {
            Ok(body) => body,
            Err(refusal) => return refusal,
        }
    } else {
        body
    };
    if record.must_change_password && !allowed_before_password_change(route) {
        if is_post {
            return UiError::forbidden("Choose your own password first.")
                .with_session(&session)
                .into_response();
        }
        return Redirect::to("/ui/password").into_response();
    }
    let target = identity::audit_target(route, &mut parts).await;
    let actor = session.actor();
    let response = if session.level < needed {
        UiError::forbidden(format!(
            "This needs level {}; {} has level {}.",
            u8::from(needed),
            session.name,
            u8::from(session.level)
        ))
        .with_session(&session)
        .into_response()
    } else {
        let mut session = session;
        // Not before the operator's own password is chosen: that page shows nothing else.
        if !record.must_change_password && route.method == crate::route::Method::Get && route.framed
        {
            session.header = header_parts::lines(header_parts, &state, &actor).await;
        }
        parts.extensions.insert(actor.clone());
        parts.extensions.insert(session);
        next.run(Request::from_parts(parts, body)).await
    };
    if let Some(entry) = identity::audit_entry(route, actor, target, &response, Some("ui")) {
        identity::record_act(&state.store, &entry).await;
    }
    response
}

/// The live session the request's cookie names; else a GET is sent to sign in, a POST is
/// refused (401), and a database that does not answer is a 503 page.
async fn live_session(
    state: &AppState,
    parts: &Parts,
    is_post: bool,
) -> Result<SessionRecord, Response> {
    let found = match cookies::read(&parts.headers, cookies::SESSION_COOKIE) {
        Some(secret) if cookies::looks_like_secret(&secret) => {
            let ui = settings();
            store::session_by_digest(
                &state.store,
                &digest(&secret),
                ui.session_idle,
                ui.session_lifetime,
            )
            .await
        }
        _ => Ok(None),
    };
    match found {
        Ok(Some(record)) => Ok(record),
        Ok(None) if is_post => Err(UiError::unauthorized(
            "Your session has ended, so nothing was done. Sign in again and repeat it.",
        )
        .into_response()),
        Ok(None) => Err(Redirect::to(&sign_in_location(parts)).into_response()),
        Err(failure) => {
            tracing::error!(error = %failure, "cannot look up a session");
            Err(UiError::unavailable().into_response())
        }
    }
}

/// A POST's form, read once and kept for the handler, when its `csrf` field is the session's
/// token; else the 403 page.
async fn checked_form(
    session: &UiSession,
    route: &Route,
    parts: &mut Parts,
    body: Body,
) -> Result<Body, Response> {
    let (fields, body) = read_form(parts, body).await?;
    let given = fields.get("csrf").unwrap_or_default();
    if !cookies::tokens_match(&session.csrf, given) {
        warn!(operator = %session.name, route = route.path, "ui form refused: csrf token missing or wrong");
        return Err(csrf_refused().with_session(session).into_response());
    }
    parts.extensions.insert(fields);
    Ok(body)
}

/// The door of the sign-in form's POST: the `csrf` field must equal the pre-session cookie
/// the sign-in page set (a double submit: another site can make a browser send the cookie but
/// cannot read it to put it in the form).
pub async fn require_pre_session(route: &'static Route, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let (fields, body) = match read_form(&parts, body).await {
        Ok(read) => read,
        Err(refusal) => return refusal,
    };
    let expected = cookies::read(&parts.headers, cookies::PRE_SESSION_COOKIE).unwrap_or_default();
    let given = fields.get("csrf").unwrap_or_default();
    if !cookies::looks_like_secret(&expected) || !cookies::tokens_match(&expected, given) {
        warn!(
            route = route.path,
            "sign-in form refused: pre-session token missing or wrong"
        );
        return UiError {
            sign_in: true,
            ..csrf_refused()
        }
        .into_response();
    }
    parts.extensions.insert(fields);
    next.run(Request::from_parts(parts, body)).await
}

/// The address of the peer, as [`peer_address`] vouches for it.
pub struct PeerAddress(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for PeerAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(PeerAddress(
            identity::address_of(&parts.extensions).map(|address| address.to_string()),
        ))
    }
}

/// The `{id}` of a UI path, as the raw text.
async fn raw_id(parts: &mut Parts) -> Option<String> {
    let params = axum::extract::RawPathParams::from_request_parts(parts, &())
        .await
        .ok()?;
    params
        .iter()
        .find(|(name, _)| *name == "id")
        .map(|(_, value)| value.to_string())
}

fn no_such_page() -> UiError {
    UiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        "Not found",
        "There is nothing at this address.",
    )
}

/// A positive whole-number `{id}` (node, job, token); anything else is a 404 page.
pub struct PathId(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, UiError> {
        let session = parts.extensions.get::<UiSession>().cloned();
        let refusal = || match &session {
            Some(session) => no_such_page().with_session(session),
            None => no_such_page(),
        };
        match raw_id(parts).await.and_then(|raw| raw.parse::<i64>().ok()) {
            Some(id) if id > 0 => Ok(PathId(id)),
            _ => Err(refusal()),
        }
    }
}

/// The `{id}` of `/ui/nodes/{id}/...`, a positive whole number read as the contract's node id;
/// anything else is a 404 page, as for [`PathId`].
pub struct NodePath(pub NodeId);

impl<S: Send + Sync> FromRequestParts<S> for NodePath {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, UiError> {
        let PathId(id) = PathId::from_request_parts(parts, state).await?;
        Ok(NodePath(NodeId(id)))
    }
}

/// A UUID `{id}` (a join); anything else is a 404 page.
pub struct PathUuid(pub uuid::Uuid);

impl<S: Send + Sync> FromRequestParts<S> for PathUuid {
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, UiError> {
        let session = parts.extensions.get::<UiSession>().cloned();
        match raw_id(parts).await.and_then(|raw| raw.parse().ok()) {
            Some(id) => Ok(PathUuid(id)),
            None => Err(match &session {
                Some(session) => no_such_page().with_session(session),
                None => no_such_page(),
            }),
        }
    }
}
