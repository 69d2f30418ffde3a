//! Input from outside, parsed at the edge into values that cannot be wrong: bodies read under a
//! cap (refused with `413` before they are read whole), JSON bodies, query strings and path ids,
//! each refused with `400 invalid_request` naming the field.

use axum::{
    body::Body,
    extract::{FromRequest, FromRequestParts, RawPathParams, Request},
    http::{header, request::Parts, HeaderMap, Uri},
};
use bytes::{Bytes, BytesMut};
use capstan_events::NodeId;
use futures::StreamExt;
use serde::de::DeserializeOwned;
use std::str::FromStr;
use uuid::Uuid;

use crate::error::ApiError;

/// The cap on an operator's JSON body (a job's parameters are the largest part).
pub const OPERATOR_BODY_LIMIT: usize = 1024 * 1024;

/// The length the request declares, when it declares one.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Reads `body` whole, refusing with `413 too_large` when `Content-Length` declares more than
/// `limit`, or as soon as a body without one (chunked) passes it: reading stops there, and
/// nothing beyond the cap is held.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Bytes, ApiError> {
    if declared_length(headers).is_some_and(|length| length > limit as u64) {
        return Err(ApiError::too_large(limit));
    }
    let mut frames = body.into_data_stream();
    let mut collected = BytesMut::new();
    while let Some(frame) = frames.next().await {
        let frame = frame
            .map_err(|error| ApiError::invalid("body", format!("could not be read: {error}")))?;
        if collected.len() + frame.len() > limit {
            return Err(ApiError::too_large(limit));
        }
        collected.extend_from_slice(&frame);
    }
    Ok(collected.freeze())
}

/// Parses `bytes` as `T`, naming the field that is wrong (`node_id: invalid type ...`).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        let field = if path == "." {
            "body".to_string()
        } else {
            path
        };
        ApiError::invalid(&field, error.inner())
    })?;
    deserializer
        .end()
        .map_err(|error| ApiError::invalid("body", error))?;
    Ok(value)
}

/// An operator's JSON body; an empty body reads as `{}`.
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        let bytes = read_limited(&parts.headers, body, OPERATOR_BODY_LIMIT).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return parse_json(b"{}").map(JsonBody);
        }
        parse_json(&bytes).map(JsonBody)
    }
}

/// A query string's parameters, refused when one is unknown to the route or repeated.
#[derive(Debug, Default)]
pub struct QueryParams(Vec<(String, String)>);

impl QueryParams {
    pub fn parse(uri: &Uri, known: &[&str]) -> Result<QueryParams, ApiError> {
        let Some(query) = uri.query() else {
            return Ok(QueryParams::default());
        };
        let pairs: Vec<(String, String)> = axum::extract::Query::try_from_uri(uri)
            .map(|axum::extract::Query(pairs)| pairs)
            .map_err(|_| ApiError::invalid("query", format!("{query:?} is not a query string")))?;
        for (index, (name, _)) in pairs.iter().enumerate() {
            if !known.contains(&name.as_str()) {
                let known = known.join(", ");
                return Err(ApiError::invalid(
                    name,
                    format!("this route takes no such parameter (it takes: {known})"),
                ));
            }
            if pairs[..index].iter().any(|(earlier, _)| earlier == name) {
                return Err(ApiError::invalid(name, "given more than once"));
            }
        }
        Ok(QueryParams(pairs))
    }

    /// The parameter `name` as given, or `None` when absent.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }

    /// The parameter `name` parsed as `T`, or `None` when absent; `expected` says what it
    /// should look like, for the refusal.
    pub fn get<T: FromStr>(&self, name: &str, expected: &str) -> Result<Option<T>, ApiError> {
        let Some((_, value)) = self.0.iter().find(|(key, _)| key == name) else {
            return Ok(None);
        };
        value
            .parse()
            .map(Some)
            .map_err(|_| ApiError::invalid(name, format!("{value:?} is not {expected}")))
    }
}

/// The `{id}` of the route, percent-decoded.
async fn path_id(parts: &mut Parts) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, &())
        .await
        .map_err(|_| ApiError::invalid("path", "is not valid UTF-8"))?;
    params
        .iter()
        .find(|(name, _)| *name == "id")
        .map(|(_, value)| value.to_string())
        .ok_or_else(|| ApiError::internal("the route has no {id}"))
}

fn positive_id(raw: &str, field: &str) -> Result<i64, ApiError> {
    match raw.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(ApiError::invalid(
            field,
            format!("{raw:?} is not a positive whole number"),
        )),
    }
}

/// `{id}` of `/api/v1/nodes/{id}/...`: the contract's node id.
pub struct NodePath(pub NodeId);
/// `{id}` of `/api/v1/jobs/{id}/...`.
pub struct JobId(pub i64);
/// `{id}` of `/api/v1/joins/{id}/...`.
pub struct JoinId(pub Uuid);
/// A positive whole-number `{id}` of any other path (`/api/v1/incidents/{id}`).
pub struct PathId(pub i64);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        positive_id(&path_id(parts).await?, "id").map(PathId)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for NodePath {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        positive_id(&path_id(parts).await?, "node id").map(|id| NodePath(NodeId(id)))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for JobId {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        positive_id(&path_id(parts).await?, "job id").map(JobId)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for JoinId {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let raw = path_id(parts).await?;
        Uuid::from_str(&raw)
            .map(JoinId)
            .map_err(|_| ApiError::invalid("join id", format!("{raw:?} is not a UUID")))
    }
}
