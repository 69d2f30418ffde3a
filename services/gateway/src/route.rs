//! The route table's types: a row ([`Route`]), who may call it ([`Access`]) and what answers
//! it ([`Handler`]), with the constructors the rows are written with. Each domain's folder
//! (`domains/<domain>/`) declares its rows with these, its handlers in them; the guards read the
//! row of a request; `routes.rs` assembles the table from the folders' lists and builds the
//! router from it. This module names no domain: a row carries its handler, not an enum of ops.

use axum::routing::{MethodFilter, MethodRouter};
use capstan_events::{agent_channel::rpc::AgentEndpoint, rpc::Level};

use crate::{api_doc::Doc, state::AppState};

/// A route's method; `as_ref()` is its name as HTTP spells it (`GET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::AsRefStr)]
#[strum(serialize_all = "UPPERCASE")]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub(crate) fn filter(self) -> MethodFilter {
        match self {
            Method::Get => MethodFilter::GET,
            Method::Post => MethodFilter::POST,
            Method::Put => MethodFilter::PUT,
            Method::Delete => MethodFilter::DELETE,
        }
    }
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone: probes (`/healthz` tells anyone only ready or not).
    Public,
    /// An agent, signed as PROTOCOL.md says; the agent channel checks the signature.
    AgentSigned,
    /// An operator with a bearer token of at least this level.
    Operator(Level),
    /// An operator signed in to the web UI with a session of at least this level; a POST also
    /// needs the session's CSRF token.
    Session(Level),
    /// The sign-in form's POST: no session yet, so its CSRF token is the double-submit
    /// pre-session cookie's.
    PreSession,
}

impl Access {
    /// As the OpenAPI document's `x-capstan-level` states it: `7`, `"agent-signed"`, `"public"`.
    pub fn as_json(self) -> serde_json::Value {
        match self {
            Access::Public => "public".into(),
            Access::AgentSigned => "agent-signed".into(),
            Access::Operator(level) | Access::Session(level) => u8::from(level).into(),
            Access::PreSession => "pre-session".into(),
        }
    }
}

/// What answers a route: builds its handler for the route's method (`on(filter, handler)`),
/// written in the row beside its path so that the table names no domain's types.
pub type Handler = fn(MethodFilter) -> MethodRouter<AppState>;

/// A contract type's schema, as the OpenAPI document refers to it: [`schema::<T>`](schema).
pub type SchemaOf = fn(&mut schemars::SchemaGenerator) -> schemars::Schema;

/// The schema of `T` in `generator`: a reference to it in the document's components.
pub fn schema<T: schemars::JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
) -> schemars::Schema {
    generator.subschema_for::<T>()
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub method: Method,
    /// axum's syntax: `/api/v1/nodes/{id}`.
    pub path: &'static str,
    pub access: Access,
    /// For an operator act that changes something, its name in the audit log.
    pub action: Option<&'static str>,
    pub handler: Handler,
    /// For an agent route, the protocol endpoint it is (the connection code answers these).
    pub endpoint: Option<AgentEndpoint>,
    /// Whether a GET of the UI draws a page in the frame, with its header parts; not for a
    /// live part a page polls (a job's output).
    pub framed: bool,
    /// The JSON body it takes, for the OpenAPI document.
    pub body: Option<SchemaOf>,
    /// The JSON it answers with when it succeeds, for the OpenAPI document.
    pub answer: Option<SchemaOf>,
    /// What the OpenAPI document says of it (every route but the UI's has one).
    pub doc: Option<Doc>,
}

impl Route {
    pub(crate) const fn public(method: Method, path: &'static str, handler: Handler) -> Route {
        Route::new(method, path, Access::Public, handler, None)
    }

    pub(crate) const fn agent(
        path: &'static str,
        endpoint: AgentEndpoint,
        handler: Handler,
    ) -> Route {
        Route {
            endpoint: Some(endpoint),
            ..Route::new(Method::Post, path, Access::AgentSigned, handler, None)
        }
    }

    pub(crate) const fn read(
        method: Method,
        path: &'static str,
        level: Level,
        handler: Handler,
    ) -> Route {
        Route::new(method, path, Access::Operator(level), handler, None)
    }

    pub(crate) const fn act(
        path: &'static str,
        level: Level,
        handler: Handler,
        action: &'static str,
    ) -> Route {
        Route::new(
            Method::Post,
            path,
            Access::Operator(level),
            handler,
            Some(action),
        )
    }

    /// An operator API route of any method: `action` names it in the audit log when it changes
    /// something.
    pub(crate) const fn operator(
        method: Method,
        path: &'static str,
        level: Level,
        handler: Handler,
        action: Option<&'static str>,
    ) -> Route {
        Route::new(method, path, Access::Operator(level), handler, action)
    }

    pub(crate) const fn page(path: &'static str, level: Level, handler: Handler) -> Route {
        Route::new(Method::Get, path, Access::Session(level), handler, None)
    }

    pub(crate) const fn form(
        path: &'static str,
        level: Level,
        handler: Handler,
        action: &'static str,
    ) -> Route {
        Route::new(
            Method::Post,
            path,
            Access::Session(level),
            handler,
            Some(action),
        )
    }

    /// This route's answer is a live part a page polls, not a page in the frame.
    pub(crate) const fn unframed(self) -> Route {
        Route {
            framed: false,
            ..self
        }
    }

    pub(crate) const fn new(
        method: Method,
        path: &'static str,
        access: Access,
        handler: Handler,
        action: Option<&'static str>,
    ) -> Route {
        Route {
            method,
            path,
            access,
            action,
            handler,
            endpoint: None,
            framed: true,
            body: None,
            answer: None,
            doc: None,
        }
    }

    /// The JSON body this route takes (`schema::<T>`).
    pub(crate) const fn body(self, body: SchemaOf) -> Route {
        Route {
            body: Some(body),
            ..self
        }
    }

    /// The JSON this route answers with (`schema::<T>`).
    pub(crate) const fn answer(self, answer: SchemaOf) -> Route {
        Route {
            answer: Some(answer),
            ..self
        }
    }

    /// What the OpenAPI document says of this route: summary, description, parameters,
    /// answer and refusals.
    pub(crate) const fn doc(self, doc: Doc) -> Route {
        Route {
            doc: Some(doc),
            ..self
        }
    }

    /// Whether the route belongs to the operator UI (`/` and `/ui...`), not the API.
    pub fn is_ui(&self) -> bool {
        self.path == "/" || self.path == "/ui" || self.path.starts_with("/ui/")
    }

    /// What the `{id}` of the path names in the audit log: `join`, `node`, `job`.
    pub fn target_kind(&self) -> Option<&'static str> {
        let before = self.path.split("/{id}").next()?;
        if before == self.path {
            return None;
        }
        let collection = before.rsplit('/').next()?;
        collection.strip_suffix('s')
    }
}
