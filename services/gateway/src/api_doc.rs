//! What a row of the route table says of itself in the OpenAPI document ([`Doc`]): its
//! operation's name, tag, summary and description, the parameters it reads, what it answers and
//! the refusals it gives. `openapi.rs` builds every path of the document from the rows with
//! these, beside what the row already carries (method, path, level, the contract types of its
//! body and answer). Schemas that are no contract type (the agent protocol's bodies, the probes'
//! answers) are written here as JSON text, read when the document is built. This module names
//! no domain.

/// The document's part of a row.
#[derive(Debug, Clone, Copy)]
pub struct Doc {
    /// The `operationId`: `listIncidents`.
    pub operation: &'static str,
    pub tag: &'static str,
    pub summary: &'static str,
    /// An agent route's ends, in the document, with how it is signed and its body's cap.
    pub description: Option<&'static str>,
    /// Its path and query parameters (an agent route's signature headers come from its access).
    pub parameters: &'static [Parameter],
    /// What the body is beyond the row's `body` type: its description, whether it may be left
    /// out, or its schema when the row names no type.
    pub body: Option<Body>,
    pub answer: Answer,
    pub refusals: &'static [Refusal],
}

/// A path or query parameter.
#[derive(Debug, Clone, Copy)]
pub enum Parameter {
    /// One of the document's `components.parameters`, by name: `NodeId`.
    Shared(&'static str),
    /// A positive whole-number `{id}`, with what it names: "The rollout's id".
    Id(&'static str),
    /// An `{id}` that is a word, not a number: what it names, and its schema as JSON text.
    TextId {
        description: &'static str,
        schema: &'static str,
    },
    /// An optional query parameter, its schema as JSON text.
    Query {
        name: &'static str,
        description: &'static str,
        schema: &'static str,
    },
}

/// The request body as the document gives it.
#[derive(Debug, Clone, Copy)]
pub struct Body {
    pub description: Option<&'static str>,
    pub required: bool,
    /// The body's schema as JSON text, when the row names no `body` type.
    pub schema: Option<&'static str>,
}

impl Body {
    /// A body the route ignores: `{}` or nothing.
    pub const IGNORED: Body = Body {
        description: Some("Ignored; send `{}` or nothing."),
        required: false,
        schema: Some(r#"{"type": "object"}"#),
    };
}

/// The answer when the route succeeds.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub status: u16,
    pub description: &'static str,
    /// The answer's `content` as JSON text, when it is not the row's `answer` type as JSON.
    pub content: Option<&'static str>,
}

impl Answer {
    /// `200`, the row's answer type.
    pub const DONE: Answer = Answer::new(200, "Done.");
    /// `201`, the row's answer type.
    pub const CREATED: Answer = Answer::new(201, "Done.");

    /// `status`, the row's answer type as JSON, described.
    pub const fn new(status: u16, description: &'static str) -> Answer {
        Answer {
            status,
            description,
            content: None,
        }
    }
}

/// A refusal the route gives.
#[derive(Debug, Clone, Copy)]
pub enum Refusal {
    /// One of the document's `components.responses`, by name: `(404, "NotFound")`.
    Shared(u16, &'static str),
    /// The gateway's error body, described here.
    Said(u16, &'static str),
    /// The gateway's error body, described here, with the seconds to wait in `Retry-After`.
    RetryAfter(u16, &'static str),
    /// Another body, its `content` as JSON text.
    Other {
        status: u16,
        description: &'static str,
        content: &'static str,
    },
}

impl Refusal {
    pub fn status(self) -> u16 {
        match self {
            Refusal::Shared(status, _)
            | Refusal::Said(status, _)
            | Refusal::RetryAfter(status, _)
            | Refusal::Other { status, .. } => status,
        }
    }
}

/// The operator API's shared refusals (`components.responses`).
pub mod refusals {
    use super::Refusal;

    pub const BAD_REQUEST: Refusal = Refusal::Shared(400, "BadRequest");
    pub const UNAUTHORIZED: Refusal = Refusal::Shared(401, "Unauthorized");
    pub const FORBIDDEN: Refusal = Refusal::Shared(403, "Forbidden");
    pub const NOT_FOUND: Refusal = Refusal::Shared(404, "NotFound");
    pub const CONFLICT: Refusal = Refusal::Shared(409, "Conflict");
    pub const TOO_LARGE: Refusal = Refusal::Shared(413, "TooLarge");
    pub const UNPROCESSABLE: Refusal = Refusal::Shared(422, "Unprocessable");
    pub const TOO_MANY_REQUESTS: Refusal = Refusal::Shared(429, "TooManyRequests");
    pub const INTERNAL: Refusal = Refusal::Shared(500, "Internal");
    pub const UNAVAILABLE: Refusal = Refusal::Shared(503, "Unavailable");

    /// An operator route that reads or acts on one thing.
    pub const ONE: &[Refusal] = &[
        BAD_REQUEST,
        UNAUTHORIZED,
        FORBIDDEN,
        NOT_FOUND,
        INTERNAL,
        UNAVAILABLE,
    ];
    /// An act the thing's state may not allow.
    pub const ONE_IN_STATE: &[Refusal] = &[
        BAD_REQUEST,
        UNAUTHORIZED,
        FORBIDDEN,
        NOT_FOUND,
        CONFLICT,
        INTERNAL,
        UNAVAILABLE,
    ];
    /// A listing: no one thing to be missing.
    pub const LISTING: &[Refusal] = &[BAD_REQUEST, UNAUTHORIZED, FORBIDDEN, INTERNAL, UNAVAILABLE];

    /// The agent routes' refusals, as PROTOCOL.md words them.
    pub const AGENT_INVALID: Refusal = Refusal::Said(
        400,
        "`invalid_request`, naming the field (also `bad_kind`, `bad_arch` for artifacts).",
    );
    pub const AGENT_UNSIGNED: Refusal = Refusal::Said(
        401,
        "`missing_signature`, `bad_digest`, `clock_skew`, `unknown_key`, `bad_signature` or `replayed`, checked in that order.",
    );
    pub const AGENT_TOO_LARGE: Refusal = Refusal::Said(413, "`too_large`.");
    pub const AGENT_THROTTLED: Refusal = Refusal::RetryAfter(
        429,
        "`rate_limited` (or `too_many_pending` for joins); wait `Retry-After` seconds.",
    );
    pub const AGENT_UNAVAILABLE: Refusal =
        Refusal::Said(503, "`unavailable`: the agent channel did not answer.");
}
