//! The shape of every rpc reply, `{"ok": ...}` or `{"error": {"code", "message"}}`, and the
//! small closed set of error codes every layer maps once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What went wrong, as every layer names it. The gateway maps each to one HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    NotFound,
    AlreadyExists,
    Conflict,
    Refused,
    Forbidden,
    Unavailable,
    Internal,
}

impl ErrorCode {
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Refused => "refused",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
        }
    }
}

/// The error half of a reply: a code and words for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{code:?}: {message}")]
pub struct RpcError {
    pub code: ErrorCode,
    pub message: String,
}

impl RpcError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }
}

/// A reply on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reply<T> {
    Ok(T),
    Error(RpcError),
}

impl<T> From<Result<T, RpcError>> for Reply<T> {
    fn from(result: Result<T, RpcError>) -> Self {
        match result {
            Ok(value) => Reply::Ok(value),
            Err(error) => Reply::Error(error),
        }
    }
}

impl<T> From<Reply<T>> for Result<T, RpcError> {
    fn from(reply: Reply<T>) -> Self {
        match reply {
            Reply::Ok(value) => Ok(value),
            Reply::Error(error) => Err(error),
        }
    }
}

/// The name of the health question every service answers.
pub const HEALTH: &str = "health";

/// Every service's answer to `capstan.rpc.<domain>.health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    pub service: String,
    pub version: String,
    pub ready: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_have_the_documented_json_shape() {
        let ok: Reply<u32> = Ok(3).into();
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            serde_json::json!({"ok": 3})
        );
        let error: Reply<u32> = Err(RpcError::new(ErrorCode::NotFound, "no node 3")).into();
        assert_eq!(
            serde_json::to_value(&error).unwrap(),
            serde_json::json!({"error": {"code": "not_found", "message": "no node 3"}})
        );
    }
}
