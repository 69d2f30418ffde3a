//! The agent channel's refusals and the order signatures are checked in (PROTOCOL.md
//! "Signing"): `missing_signature`, `bad_digest`, `clock_skew`, then the plane's own key lookup
//! (`unknown_key`), `bad_signature`, and its replay check (`replayed`).

use capstan_events::agent_channel::rpc::AgentRequest;
use capstan_signing::{parse_signature, verify_content_digest, ParsedSignature, PublicKey};

use super::MAX_CLOCK_SKEW_SECONDS;

/// Every answer the agent channel gives an agent that is not a success, each with the status
/// and code PROTOCOL.md assigns it. The message is plain words for a person.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{message}")]
    Unauthorized { code: &'static str, message: String },
    #[error("too many requests; try again in {retry_after} seconds")]
    RateLimited { retry_after: u64 },
    #[error("too many join requests are pending{0}; try again later")]
    TooManyPending(&'static str),
    #[error("this key is already paired with a node; a node joins once")]
    AlreadyJoined,
    #[error("this key was rejected more than a day ago and is retired; generate a new key and ask again")]
    KeyRetired,
    #[error("job {0} is not running for this node")]
    NotRunning(i64),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    BadKind(String),
    #[error("{0}")]
    BadArch(String),
    #[error("the plane cannot answer right now: {0}")]
    Unavailable(String),
    /// The backups broker: the job's word does not allow what was asked.
    #[error("{0}")]
    Forbidden(String),
    /// The backups broker: a key asked to be written is stored already.
    #[error("{0}")]
    Exists(String),
}

impl AgentError {
    pub fn status(&self) -> u16 {
        match self {
            AgentError::InvalidRequest(_) | AgentError::BadKind(_) | AgentError::BadArch(_) => 400,
            AgentError::Unauthorized { .. } => 401,
            AgentError::NotFound(_) => 404,
            AgentError::Forbidden(_) => 403,
            AgentError::Exists(_) => 409,
            AgentError::AlreadyJoined | AgentError::KeyRetired | AgentError::NotRunning(_) => 409,
            AgentError::RateLimited { .. } | AgentError::TooManyPending(_) => 429,
            AgentError::Unavailable(_) => 503,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            AgentError::InvalidRequest(_) => "invalid_request",
            AgentError::Unauthorized { code, .. } => code,
            AgentError::RateLimited { .. } => "rate_limited",
            AgentError::TooManyPending(_) => "too_many_pending",
            AgentError::AlreadyJoined => "already_joined",
            AgentError::KeyRetired => "key_retired",
            AgentError::NotRunning(_) => "not_running",
            AgentError::NotFound(_) => "not_found",
            AgentError::BadKind(_) => "bad_kind",
            AgentError::BadArch(_) => "bad_arch",
            AgentError::Unavailable(_) => "unavailable",
            AgentError::Forbidden(_) => "forbidden",
            AgentError::Exists(_) => "exists",
        }
    }

    pub fn retry_after(&self) -> Option<u64> {
        match self {
            AgentError::RateLimited { retry_after } => Some(*retry_after),
            AgentError::TooManyPending(_) => Some(60),
            _ => None,
        }
    }

    /// The JSON body every error has: `{"error": {"code", "message"}}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({"error": {"code": self.code(), "message": self.to_string()}})
    }

    pub fn unknown_key() -> AgentError {
        AgentError::Unauthorized {
            code: "unknown_key",
            message: "no approved node holds this key".into(),
        }
    }

    pub fn replayed() -> AgentError {
        AgentError::Unauthorized {
            code: "replayed",
            message: "this nonce was already used by this key; sign each request afresh".into(),
        }
    }

    /// A store failure, in words that leak nothing of the database.
    pub fn unavailable(error: impl std::fmt::Display) -> AgentError {
        tracing::error!(%error, "agent channel store failed");
        AgentError::Unavailable("its database did not answer".into())
    }
}

fn unauthorized(code: &'static str, message: impl ToString) -> AgentError {
    AgentError::Unauthorized {
        code,
        message: message.to_string(),
    }
}

/// Checks 1 to 3, which need no key: the signature headers parse, the digest matches the exact
/// body, and `created` is within five minutes of `now` (Unix seconds).
pub fn check_unkeyed(
    request: &AgentRequest,
    body: &[u8],
    now: i64,
) -> Result<ParsedSignature, AgentError> {
    let (Some(input), Some(signature), Some(digest)) = (
        request.signature_input.as_deref(),
        request.signature.as_deref(),
        request.content_digest.as_deref(),
    ) else {
        return Err(unauthorized(
            "missing_signature",
            "the request needs Content-Digest, Signature-Input and Signature headers",
        ));
    };
    let parsed = parse_signature(input, signature)
        .map_err(|error| unauthorized("missing_signature", error))?;
    verify_content_digest(digest, body).map_err(|error| unauthorized(error.code(), error))?;
    parsed
        .check_clock(now, MAX_CLOCK_SKEW_SECONDS)
        .map_err(|error| unauthorized("clock_skew", error))?;
    Ok(parsed)
}

/// Checks 1 and 3 on a request's head alone, for a body not yet read (`vet_agent_request`):
/// the signature headers parse and `created` is within the skew. The digest is checked once the
/// body is read; a request whose body would also fail it hears this refusal instead
/// (docs/security.md, "The gateway's connections").
pub fn check_head(request: &AgentRequest, now: i64) -> Result<ParsedSignature, AgentError> {
    let (Some(input), Some(signature), Some(_)) = (
        request.signature_input.as_deref(),
        request.signature.as_deref(),
        request.content_digest.as_deref(),
    ) else {
        return Err(unauthorized(
            "missing_signature",
            "the request needs Content-Digest, Signature-Input and Signature headers",
        ));
    };
    let parsed = parse_signature(input, signature)
        .map_err(|error| unauthorized("missing_signature", error))?;
    parsed
        .check_clock(now, MAX_CLOCK_SKEW_SECONDS)
        .map_err(|error| unauthorized("clock_skew", error))?;
    Ok(parsed)
}

/// Check 5: the signature over POST, the path as received and the digest, by `key`.
pub fn check_signature(
    parsed: &ParsedSignature,
    key: &PublicKey,
    request: &AgentRequest,
) -> Result<(), AgentError> {
    let digest = request.content_digest.as_deref().unwrap_or_default();
    parsed
        .verify(key, "POST", &request.path, digest)
        .map_err(|error| unauthorized(error.code(), error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::agent_channel::rpc::AgentEndpoint;
    use capstan_signing::{sign_request, NodeKey};

    fn signed(key: &NodeKey, body: &[u8], created: i64) -> AgentRequest {
        let headers = sign_request(key, "POST", "/api/v1/agent/claim", body, created);
        AgentRequest {
            endpoint: AgentEndpoint::Claim,
            path: "/api/v1/agent/claim".into(),
            query: None,
            content_digest: Some(headers.content_digest),
            signature_input: Some(headers.signature_input),
            signature: Some(headers.signature),
            source_address: "203.0.113.7".into(),
            gateway: None,
            poll: None,
        }
    }

    fn code(result: Result<ParsedSignature, AgentError>) -> &'static str {
        result.map(|_| "ok").unwrap_or_else(|error| error.code())
    }

    #[test]
    fn ac_14_a_request_signed_by_the_key_passes_every_check() {
        let key = NodeKey::generate();
        let request = signed(&key, b"{}", 1_000);
        let parsed = check_unkeyed(&request, b"{}", 1_000).unwrap();
        assert_eq!(parsed.keyid(), &key.public_key().fingerprint());
        assert!(check_signature(&parsed, &key.public_key(), &request).is_ok());
        let stranger = NodeKey::generate();
        assert_eq!(
            check_signature(&parsed, &stranger.public_key(), &request)
                .unwrap_err()
                .status(),
            401
        );
    }

    #[test]
    fn failures_are_named_in_protocol_order() {
        let key = NodeKey::generate();
        let mut unsigned = signed(&key, b"{}", 1_000);
        unsigned.signature = None;
        assert_eq!(
            code(check_unkeyed(&unsigned, b"{}", 1_000)),
            "missing_signature"
        );
        // A wrong body and a stale clock: the digest is named first.
        assert_eq!(
            code(check_unkeyed(&signed(&key, b"{}", 1_000), b"{ }", 5_000)),
            "bad_digest"
        );
        assert_eq!(
            code(check_unkeyed(&signed(&key, b"{}", 1_000), b"{}", 1_301)),
            "clock_skew"
        );
        assert_eq!(
            code(check_unkeyed(&signed(&key, b"{}", 1_301), b"{}", 1_000)),
            "clock_skew"
        );
        assert_eq!(
            code(check_unkeyed(&signed(&key, b"{}", 1_300), b"{}", 1_000)),
            "ok"
        );
    }

    #[test]
    fn a_signature_over_another_path_is_a_bad_signature() {
        let key = NodeKey::generate();
        let mut request = signed(&key, b"{}", 1_000);
        request.path = "/api/v1/agent/leave".into();
        let parsed = check_unkeyed(&request, b"{}", 1_000).unwrap();
        let refused = check_signature(&parsed, &key.public_key(), &request).unwrap_err();
        assert_eq!(refused.code(), "bad_signature");
    }

    #[test]
    fn every_refusal_has_the_documented_status_and_body_shape() {
        let cases = [
            (
                AgentError::InvalidRequest("name".into()),
                400,
                "invalid_request",
            ),
            (AgentError::unknown_key(), 401, "unknown_key"),
            (AgentError::replayed(), 401, "replayed"),
            (
                AgentError::RateLimited { retry_after: 3 },
                429,
                "rate_limited",
            ),
            (AgentError::TooManyPending(""), 429, "too_many_pending"),
            (AgentError::AlreadyJoined, 409, "already_joined"),
            (AgentError::NotRunning(4), 409, "not_running"),
            (AgentError::NotFound("job 4".into()), 404, "not_found"),
            (AgentError::BadKind("kind".into()), 400, "bad_kind"),
            (AgentError::BadArch("arch".into()), 400, "bad_arch"),
        ];
        for (error, status, code) in cases {
            assert_eq!((error.status(), error.code()), (status, code));
            assert_eq!(error.body()["error"]["code"], code);
            assert!(!error.body()["error"]["message"]
                .as_str()
                .unwrap()
                .is_empty());
        }
    }
}
