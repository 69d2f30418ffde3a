//! One error type for every HTTP answer that is not a success: `{"error": {"code", "message"}}`
//! with the status each code maps to, decided here once (CONVENTIONS.md rule 8).

use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use capstan_events::rpc::{ErrorCode, RpcError};
use capstan_events::Word as _;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The documented error body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: a `snake_case` code from a small closed set, and words for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// The error an answer carries, left in the response's extensions for the audit record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnsweredError {
    pub code: &'static str,
    pub message: String,
}

/// A refusal or failure, as the gateway answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// No credentials, or credentials the gateway does not know (never says which).
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("the body is larger than this endpoint's limit of {limit} bytes"),
        )
    }

    /// A bad input: `field` names what was wrong.
    pub fn invalid(field: &str, problem: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("{field}: {problem}"),
        )
    }

    pub fn no_route(path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("there is no route {path}; see /api/v1/openapi.json"),
        )
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this route does not take that method; see /api/v1/openapi.json",
        )
    }

    /// A failure of the gateway itself; the detail goes to the log, not to the caller.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

/// The one mapping of rpc error codes to HTTP statuses.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::AlreadyExists | ErrorCode::Conflict => StatusCode::CONFLICT,
        ErrorCode::Refused | ErrorCode::NeedsNewerAgent | ErrorCode::NotPaired => {
            StatusCode::UNPROCESSABLE_ENTITY
        }
        ErrorCode::Forbidden => StatusCode::FORBIDDEN,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::RateLimited => StatusCode::TOO_MANY_REQUESTS,
    }
}

impl From<RpcError> for ApiError {
    fn from(error: RpcError) -> ApiError {
        ApiError::new(status_of(error.code), error.code.as_str(), error.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let answered = AnsweredError {
            code: self.code,
            message: self.message.clone(),
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 6750: say which scheme would be accepted.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"capstan\""),
            );
        }
        response.extensions_mut().insert(answered);
        response
    }
}
