//! Operator identity: names, API tokens (`cap_` and 32 random bytes, base64url; kept only as
//! SHA-256 digests and found by digest), the bearer check every operator route passes, and
//! the audit record of every act that changes something. A token never reaches a log line or
//! an error message.

use axum::{
    extract::{ConnectInfo, FromRequestParts, RawPathParams, Request, State},
    http::{header, request::Parts, HeaderMap},
    middleware::Next,
    response::{IntoResponse, Response},
};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use capstan_events::rpc::{Actor, Level};
use capstan_store::Store;
use rand::RngCore;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::{fmt, net::IpAddr, net::SocketAddr};
use tracing::{error, warn};

use crate::{
    error::{AnsweredError, ApiError},
    route::Route,
    state::{AppState, ClientAddress},
    store::{self, AuditEntry},
};

/// What every token starts with, so a leaked one is recognisable (secret scanners).
pub const TOKEN_PREFIX: &str = "cap_";
/// Random bytes in a token.
const TOKEN_BYTES: usize = 32;
/// `cap_` and 43 characters of unpadded base64url.
const TOKEN_LENGTH: usize = 4 + 43;

/// An operator's name: `^[a-z0-9][a-z0-9._@-]{0,63}$` (the same rule the table checks). It
/// cannot contain `/`, so no operator can pass for a service (`service/backups`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorName(String);

impl OperatorName {
    pub fn parse(name: &str) -> Result<OperatorName, BadOperatorName> {
        let mut characters = name.chars();
        let first_ok = characters
            .next()
            .is_some_and(|first| first.is_ascii_lowercase() || first.is_ascii_digit());
        let rest_ok = characters.all(|character| {
            character.is_ascii_lowercase()
                || character.is_ascii_digit()
                || matches!(character, '.' | '_' | '@' | '-')
        });
        if first_ok && rest_ok && name.len() <= 64 {
            Ok(OperatorName(name.to_string()))
        } else {
            Err(BadOperatorName(name.to_string()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A name refused as an operator's, quoted in the refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "operator name {0:?} must be 1 to 64 lower-case letters, digits, '.', '_', '@' \
     or '-', starting with a letter or digit"
)]
pub struct BadOperatorName(pub String);

/// A freshly issued token. Its `Debug` does not show it; [`Token::expose`] is the one way out.
pub struct Token(String);

impl Token {
    /// `cap_` and 32 bytes from the operating system's generator, base64url without padding.
    pub fn generate() -> Token {
        let mut bytes = [0u8; TOKEN_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        Token(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn sha256(&self) -> [u8; 32] {
        digest(&self.0)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("Token(cap_…)")
    }
}

pub(crate) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether `candidate` has a token's shape; anything else is refused without a look-up.
fn looks_like_token(candidate: &str) -> bool {
    candidate.len() == TOKEN_LENGTH
        && candidate.starts_with(TOKEN_PREFIX)
        && candidate[TOKEN_PREFIX.len()..]
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// The address a request comes from, as far as the gateway can vouch for it: the TCP peer, or
/// the client a trusted proxy names (see [`crate::state::ClientAddresses`]); IPv4 shown as IPv4.
pub fn peer_address(request: &Request) -> Option<IpAddr> {
    address_of(request.extensions())
}

/// [`peer_address`] from a request's extensions.
pub fn address_of(extensions: &axum::http::Extensions) -> Option<IpAddr> {
    extensions
        .get::<ClientAddress>()
        .map(|ClientAddress(address)| *address)
        .or_else(|| {
            extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(address)| address.ip())
        })
        .map(|address| address.to_canonical())
}

/// The bearer token of `Authorization: Bearer <token>`, or why there is none usable.
fn bearer(headers: &HeaderMap) -> Result<&str, ApiError> {
    let missing = || {
        ApiError::unauthorized(
            "send Authorization: Bearer <token>; `capstan admin create-operator` issues one",
        )
    };
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(missing)?
        .to_str()
        .map_err(|_| missing())?;
    let (scheme, token) = value.trim().split_once(' ').ok_or_else(missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(missing());
    }
    Ok(token.trim())
}

/// The operator a request's bearer token belongs to, as an [`Actor`] from `address`. Unknown,
/// revoked and malformed tokens get the same answer, which never repeats the token.
pub async fn authenticate(
    store: &Store,
    headers: &HeaderMap,
    address: Option<IpAddr>,
) -> Result<Actor, ApiError> {
    let token = bearer(headers)?;
    let refused = || ApiError::unauthorized("the token is not valid: unknown or revoked");
    if !looks_like_token(token) {
        return Err(refused());
    }
    let found = store::operator_by_token(store, &digest(token))
        .await
        .map_err(|failure| {
            error!(error = %failure, "cannot look up an operator token");
            ApiError::unavailable("operator tokens cannot be checked just now; try again shortly")
        })?;
    let (name, level) = found.ok_or_else(refused)?;
    Ok(Actor {
        name,
        level,
        address: address.map(|address| address.to_string()),
    })
}

/// The operator a request was authorised for, put in place by [`authorize`].
pub struct Operator(pub Actor);

impl<S: Send + Sync> FromRequestParts<S> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        parts
            .extensions
            .get::<Actor>()
            .cloned()
            .map(Operator)
            .ok_or_else(|| ApiError::internal("this route was built without its access check"))
    }
}

/// What a handler adds to the audit record of its act (the node a join was bound to, the
/// job created).
#[derive(Debug, Clone)]
pub struct AuditDetail(pub Value);

/// The access check of an operator route, from the route table: a known, live token
/// (else `401`), at least `route`'s level (else `403`). An act that changes something
/// (`route.action`) is written to the audit log once answered, refused or not.
pub async fn authorize(
    State(state): State<AppState>,
    route: &'static Route,
    needed: Level,
    request: Request,
    next: Next,
) -> Response {
    let address = peer_address(&request);
    let actor = match authenticate(&state.store, request.headers(), address).await {
        Ok(actor) => actor,
        Err(refusal) => return refusal.into_response(),
    };
    let (mut parts, body) = request.into_parts();
    let target = audit_target(route, &mut parts).await;
    let mut request = Request::from_parts(parts, body);
    let response = if actor.level < needed {
        ApiError::forbidden(format!(
            "{} {} needs level {}; {} has level {}",
            route.method.as_ref(),
            route.path,
            u8::from(needed),
            actor.name,
            u8::from(actor.level)
        ))
        .into_response()
    } else {
        request.extensions_mut().insert(actor.clone());
        next.run(request).await
    };
    if let Some(entry) = audit_entry(route, actor, target, &response, None) {
        record_act(&state.store, &entry).await;
    }
    response
}

/// What the `{id}` of `route` names, as the audit log writes it: `job/42`.
pub(crate) async fn audit_target(route: &Route, parts: &mut Parts) -> Option<String> {
    RawPathParams::from_request_parts(parts, &())
        .await
        .ok()
        .and_then(|params| {
            let id = params.iter().find(|(name, _)| *name == "id")?.1.to_string();
            Some(format!("{}/{id}", route.target_kind()?))
        })
}

/// The audit row of `route`'s act (none for a route that is not an act), with how `response`
/// ended it; `via` is added to the detail (`"ui"` for the web UI's acts).
pub(crate) fn audit_entry(
    route: &Route,
    actor: Actor,
    target: Option<String>,
    response: &Response,
    via: Option<&str>,
) -> Option<AuditEntry> {
    let action = route.action?;
    let (outcome, mut detail) = outcome_of(response);
    if let (Some(via), Value::Object(detail)) = (via, &mut detail) {
        detail.insert("via".into(), via.into());
    }
    Some(AuditEntry {
        operator: actor.name,
        level: Some(actor.level),
        address: actor.address,
        action,
        target,
        outcome,
        detail,
    })
}

/// How an act ended (`ok` or the error code) and the detail to keep: the refusal's words, or
/// what the handler added.
fn outcome_of(response: &Response) -> (String, Value) {
    let (outcome, mut detail) = match response.extensions().get::<AnsweredError>() {
        Some(refusal) => (
            refusal.code.to_string(),
            json!({"message": refusal.message}),
        ),
        // The UI answers a done act with a redirect back to its page.
        None if response.status().is_success() || response.status().is_redirection() => {
            ("ok".to_string(), json!({}))
        }
        None => (response.status().as_u16().to_string(), json!({})),
    };
    if let (Some(AuditDetail(Value::Object(extra))), Value::Object(detail)) =
        (response.extensions().get::<AuditDetail>(), &mut detail)
    {
        detail.extend(extra.clone());
    }
    (outcome, detail)
}

/// Writes the audit row of an answered act. The act has happened (or been refused) by now; a
/// row that cannot be written is logged loudly rather than turned into a failure the caller
/// would retry.
pub(crate) async fn record_act(store: &Store, entry: &AuditEntry) {
    if let Err(failure) = store::insert_audit(store, entry).await {
        error!(
            operator = %entry.operator,
            action = entry.action,
            target = ?entry.target,
            outcome = %entry.outcome,
            error = %failure,
            "audit row not written"
        );
        metrics::counter!("capstan_gateway_audit_failures_total").increment(1);
    } else if entry.outcome == "forbidden" {
        warn!(operator = %entry.operator, action = entry.action, "operator act refused for its level");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_cap_and_43_base64url_characters_and_never_shows_in_debug() {
        let token = Token::generate();
        assert!(looks_like_token(token.expose()), "{}", token.expose());
        assert_eq!(format!("{token:?}"), "Token(cap_…)");
        assert_ne!(Token::generate().expose(), token.expose());
        assert_eq!(token.sha256(), digest(token.expose()));
    }

    #[test]
    fn malformed_tokens_are_refused_before_any_look_up() {
        assert!(!looks_like_token("cap_short"));
        assert!(!looks_like_token(&format!("xyz_{}", "a".repeat(43))));
        assert!(!looks_like_token(&format!("cap_{}", "a/".repeat(21) + "a")));
        assert!(looks_like_token(&format!("cap_{}", "a".repeat(43))));
    }

    #[test]
    fn operator_names_are_plain_and_cannot_pass_for_a_service() {
        assert!(OperatorName::parse("ada").is_ok());
        assert!(OperatorName::parse("ada.lovelace@example.org").is_ok());
        assert!(OperatorName::parse("service/backups").is_err());
        assert!(OperatorName::parse("Ada").is_err());
        assert!(OperatorName::parse("").is_err());
        assert!(OperatorName::parse("-ada").is_err());
        assert!(OperatorName::parse(&"a".repeat(65)).is_err());
    }

    #[test]
    fn the_bearer_scheme_is_read_case_insensitively_and_anything_else_is_refused() {
        let mut headers = HeaderMap::new();
        assert!(bearer(&headers).is_err());
        headers.insert(header::AUTHORIZATION, "bearer cap_x".parse().unwrap());
        assert_eq!(bearer(&headers).unwrap(), "cap_x");
        headers.insert(header::AUTHORIZATION, "Basic YWRhOng=".parse().unwrap());
        let refusal = bearer(&headers).unwrap_err();
        assert_eq!(refusal.code, "unauthorized");
        assert!(!refusal.message.contains("YWRh"));
    }
}
