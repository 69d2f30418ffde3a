//! The route table's types: a row ([`Route`]), who may call it ([`Access`]) and what it does
//! ([`Op`], [`UiOp`]), with the constructors the rows are written with. The handlers' modules
//! (`api/<domain>.rs`, `ui/<domain>/`, the guards) import these to declare their rows and to
//! read the row of a request; `routes.rs` assembles the table and builds the router from it,
//! and nothing it does is needed to name a route.

use axum::routing::MethodFilter;
use capstan_events::{agent_channel::rpc::AgentEndpoint, rpc::Level};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Put,
    Delete,
}

impl Method {
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }

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

/// What a route does; each has exactly one handler (`routes.rs` picks it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Healthz,
    Livez,
    Metrics,
    OpenApi,
    Agent(AgentEndpoint),
    ListJoins,
    ApproveJoin,
    RejectJoin,
    ReopenJoin,
    ListNodes,
    GetNode,
    DisconnectNode,
    CreateJob,
    ListJobs,
    GetJob,
    JobOutput,
    CancelJob,
    MarkJobFailed,
    RefusalCount,
    /// A route of the incidents service's API (`api/incidents.rs`).
    Incidents(crate::domains::incidents::api::IncidentsOp),
    /// A route of the monitor service's API (`api/monitor.rs`).
    Monitor(crate::domains::monitor::api::MonitorOp),
    /// A route of the releases API (`api/releases.rs`).
    Releases(crate::domains::rollouts::releases_api::ReleasesOp),
    /// A route of the rollouts API (`api/rollouts.rs`).
    Rollouts(crate::domains::rollouts::api::RolloutsOp),
    /// A route of the backups service's API (`api/backups.rs`).
    Backups(crate::domains::backups::api::BackupsOp),
    /// A page or form of the operator UI.
    Ui(UiOp),
}

/// What a route of the operator UI does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UiOp {
    /// `/` and `/ui`: to the dashboard.
    ToDashboard,
    Static,
    SignInPage,
    SignIn,
    SignOut,
    PasswordPage,
    ChangePassword,
    AccountPage,
    CreateToken,
    RevokeToken,
    AuditPage,
    /// A page or form of the agent channel (`ui/agent_channel/`).
    AgentChannel(crate::domains::agent_channel::AgentChannelPage),
    /// A page or form of the incidents service (`ui/incidents/`).
    Incidents(crate::domains::incidents::IncidentsPage),
    /// A page or form of the rollouts service (`ui/rollouts/`).
    Rollouts(crate::domains::rollouts::RolloutsPage),
    /// The monitor's Fleet security page (`ui/fleet_security.rs`).
    FleetSecurity,
    /// A page or form of the monitor service (`ui/monitor/`).
    Monitor(crate::domains::monitor::MonitorPage),
    /// A page or form of the backups service (`ui/backups/`).
    Backups(crate::domains::backups::BackupsPage),
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub method: Method,
    /// axum's syntax: `/api/v1/nodes/{id}`.
    pub path: &'static str,
    pub access: Access,
    pub op: Op,
    /// For an operator act that changes something, its name in the audit log.
    pub action: Option<&'static str>,
}

impl Route {
    pub(crate) const fn public(method: Method, path: &'static str, op: Op) -> Route {
        Route {
            method,
            path,
            access: Access::Public,
            op,
            action: None,
        }
    }

    pub(crate) const fn agent(path: &'static str, endpoint: AgentEndpoint) -> Route {
        Route {
            method: Method::Post,
            path,
            access: Access::AgentSigned,
            op: Op::Agent(endpoint),
            action: None,
        }
    }

    pub(crate) const fn read(method: Method, path: &'static str, level: Level, op: Op) -> Route {
        Route {
            method,
            path,
            access: Access::Operator(level),
            op,
            action: None,
        }
    }

    pub(crate) const fn act(
        path: &'static str,
        level: Level,
        op: Op,
        action: &'static str,
    ) -> Route {
        Route {
            method: Method::Post,
            path,
            access: Access::Operator(level),
            op,
            action: Some(action),
        }
    }

    pub(crate) const fn ui_public(method: Method, path: &'static str, op: UiOp) -> Route {
        Route::public(method, path, Op::Ui(op))
    }

    pub(crate) const fn page(path: &'static str, level: Level, op: UiOp) -> Route {
        Route {
            method: Method::Get,
            path,
            access: Access::Session(level),
            op: Op::Ui(op),
            action: None,
        }
    }

    pub(crate) const fn form(
        path: &'static str,
        level: Level,
        op: UiOp,
        action: &'static str,
    ) -> Route {
        Route {
            method: Method::Post,
            path,
            access: Access::Session(level),
            op: Op::Ui(op),
            action: Some(action),
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
