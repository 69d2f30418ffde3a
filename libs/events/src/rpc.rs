//! The shape of every rpc reply, `{"ok": ...}` or `{"error": {"code", "message"}}`, and the
//! small closed set of error codes every layer maps once.

use schemars::JsonSchema;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

use crate::words::Word as _;
use crate::Domain;

/// A question one service answers over `capstan.rpc.<domain>.<op>`: the request type names its
/// domain, its op and the type of its answer, so neither an asker nor a server can pair a
/// request with the wrong answer. Declared with [`rpc!`](crate::rpc!) beside the types; the op
/// name is written nowhere else.
pub trait Rpc: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The service that answers.
    const DOMAIN: Domain;
    /// The last segment of the subject, `snake_case`.
    const OP: &'static str;
    /// What a successful answer carries.
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// `capstan.rpc.<domain>.<op>`.
    fn subject() -> String {
        crate::rpc_subject(Self::DOMAIN, Self::OP)
    }
}

/// An rpc whose request and answer are JSON alone.
pub trait JsonRpc: Rpc {}

/// An rpc whose request and answer are each a JSON half beside a raw body carried byte for byte
/// (an agent's request, whose digest covers its exact bytes; a release's artifacts).
pub trait BodyRpc: Rpc {}

/// Declares the rpcs of one domain: each op's name, request type and answer type, once.
///
/// ```ignore
/// rpc! { Domain::Monitor;
///     "set_uptime": SetUptime => UptimeCheck,
///     "publish_release" [body]: PublishRelease => ReleaseView,
/// }
/// ```
///
/// `[body]` marks an rpc that carries a raw body beside its JSON both ways ([`BodyRpc`]); the
/// others are [`JsonRpc`].
#[macro_export]
macro_rules! rpc {
    ($domain:expr; $($op:literal $([$body:ident])?: $request:ty => $reply:ty),+ $(,)?) => {
        $( $crate::rpc!(@one $domain, $op, $request, $reply $(, $body)?); )+
    };
    (@one $domain:expr, $op:literal, $request:ty, $reply:ty) => {
        $crate::rpc!(@rpc $domain, $op, $request, $reply);
        impl $crate::rpc::JsonRpc for $request {}
    };
    (@one $domain:expr, $op:literal, $request:ty, $reply:ty, body) => {
        $crate::rpc!(@rpc $domain, $op, $request, $reply);
        impl $crate::rpc::BodyRpc for $request {}
    };
    (@rpc $domain:expr, $op:literal, $request:ty, $reply:ty) => {
        impl $crate::rpc::Rpc for $request {
            const DOMAIN: $crate::Domain = $domain;
            const OP: &'static str = $op;
            type Reply = $reply;
        }
    };
}

/// What went wrong, as every layer names it. The gateway maps each to one HTTP status.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    NotFound,
    AlreadyExists,
    Conflict,
    Refused,
    Forbidden,
    Unavailable,
    Internal,
    /// A job names a primitive the node's agent did not report (PROTOCOL.md: "needs a newer
    /// agent"); the message names the missing word.
    NeedsNewerAgent,
    /// A job for a node that has no paired agent.
    NotPaired,
    /// Asked too often: the message says the limit and when the next may be asked.
    RateLimited,
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

/// Input that breaks a rule of a service's domain: what was wrong, naming the field. Nothing
/// is changed. Each domain's rules answer with it; over rpc it is `invalid_request`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidInput {
    pub field: &'static str,
    pub reason: String,
}

impl InvalidInput {
    pub fn new(field: &'static str, reason: impl Into<String>) -> InvalidInput {
        InvalidInput {
            field,
            reason: reason.into(),
        }
    }
}

impl From<InvalidInput> for RpcError {
    fn from(error: InvalidInput) -> RpcError {
        RpcError::new(ErrorCode::InvalidRequest, error.to_string())
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

/// What an operator (or a service acting for the plane) may do. Every route and rpc declares
/// the level it needs (ARCHITECTURE.md, decision 6.2-3).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(into = "u8", try_from = "u8")]
pub enum Level {
    /// 7: reads, and runs read-class jobs.
    Read = 7,
    /// 8: changes nodes, runs change-class jobs, cancels jobs, triages.
    Change = 8,
    /// 10: destructive and trust-changing acts: approve a join, disconnect, restore, delete.
    Admin = 10,
}

impl From<Level> for u8 {
    fn from(level: Level) -> u8 {
        level as u8
    }
}

impl TryFrom<u8> for Level {
    type Error = String;
    fn try_from(value: u8) -> Result<Level, String> {
        match value {
            7 => Ok(Level::Read),
            8 => Ok(Level::Change),
            10 => Ok(Level::Admin),
            other => Err(format!("level {other} is not one of 7, 8, 10")),
        }
    }
}

/// How a service acting for itself is named: `service/<domain>`.
pub const SERVICE_ACTOR_PREFIX: &str = "service/";

/// Who asks: an operator (by name, with their level) or a service of the plane.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Actor {
    /// `ada` for an operator, `service/backups` for a service.
    pub name: String,
    pub level: Level,
    /// Where an operator's request came from, for the record.
    #[serde(default)]
    pub address: Option<String>,
}

impl Actor {
    /// A service of the plane acting for itself (`service/provisioning`), at level 10. An
    /// operator's name never holds a `/` (the gateway refuses one), so no operator is taken
    /// for a service.
    pub fn service(domain: Domain) -> Actor {
        Actor {
            name: format!("{SERVICE_ACTOR_PREFIX}{}", domain.as_str()),
            level: Level::Admin,
            address: None,
        }
    }

    /// Whether the actor is the service `domain` ([`Actor::service`]).
    pub fn is_service(&self, domain: Domain) -> bool {
        self.name
            .strip_prefix(SERVICE_ACTOR_PREFIX)
            .is_some_and(|name| name == domain.as_str())
    }

    /// Refuses with `forbidden` unless the actor is the service `domain`: a question only that
    /// service may ask.
    pub fn require_service(&self, domain: Domain, what: &str) -> Result<(), RpcError> {
        if self.is_service(domain) {
            return Ok(());
        }
        Err(RpcError::new(
            ErrorCode::Forbidden,
            format!(
                "{what} is asked only by the {} service; {} may not",
                domain.as_str(),
                self.name
            ),
        ))
    }

    /// Refuses with `forbidden` unless the actor holds `needed`.
    pub fn require(&self, needed: Level, what: &str) -> Result<(), RpcError> {
        if self.level >= needed {
            Ok(())
        } else {
            Err(RpcError::new(
                ErrorCode::Forbidden,
                format!(
                    "{what} needs level {}; {} has {}",
                    needed as u8, self.name, self.level as u8
                ),
            ))
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
    /// Which replica answered: an id each running service draws at its start, so a caller can
    /// tell replicas apart (a new replica is serving once an answer carries its id). Absent
    /// from an older service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<uuid::Uuid>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_travel_as_their_numbers_and_only_7_8_10_exist() {
        assert_eq!(
            serde_json::to_value(Level::Admin).unwrap(),
            serde_json::json!(10)
        );
        assert_eq!(
            serde_json::from_value::<Level>(serde_json::json!(8)).unwrap(),
            Level::Change
        );
        assert!(serde_json::from_value::<Level>(serde_json::json!(9)).is_err());
    }

    #[test]
    fn an_actor_below_the_needed_level_is_forbidden() {
        let reader = Actor {
            name: "ro".into(),
            level: Level::Read,
            address: None,
        };
        assert!(reader.require(Level::Read, "listing nodes").is_ok());
        let refused = reader
            .require(Level::Admin, "approving a join")
            .unwrap_err();
        assert_eq!(refused.code, ErrorCode::Forbidden);
        assert!(
            refused.message.contains("needs level 10"),
            "{}",
            refused.message
        );
    }

    #[test]
    fn a_service_actor_is_told_apart_from_operators_and_other_services() {
        let provisioning = Actor::service(Domain::Provisioning);
        assert_eq!(provisioning.name, "service/provisioning");
        assert!(provisioning.is_service(Domain::Provisioning));
        assert!(provisioning
            .require_service(Domain::Provisioning, "registering a node")
            .is_ok());
        for other in [
            Actor::service(Domain::Backups),
            Actor {
                name: "provisioning".into(),
                level: Level::Admin,
                address: None,
            },
            Actor {
                name: "service/provisioning2".into(),
                level: Level::Admin,
                address: None,
            },
        ] {
            let refused = other
                .require_service(Domain::Provisioning, "registering a node")
                .unwrap_err();
            assert_eq!(refused.code, ErrorCode::Forbidden, "{}", other.name);
            assert!(refused.message.contains(&other.name), "{}", refused.message);
        }
    }

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
