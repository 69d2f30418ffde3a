//! The agent channel's pages: the dashboard, the node list, the joins and the bind listing,
//! the node page (with its recipes tab), the job page and their forms. They ask the agent
//! channel the same rpc the JSON API does (`operator.rs`), as the signed-in operator; this
//! folder contributes its rows to the one route table ([`ROUTES`]), each with its level, and
//! every form's CSRF token is checked by the session guard. Their hooks for browser tests are
//! listed in `ui/mod.rs`.

pub mod agent;
pub mod api;
pub mod dashboard;
mod first_server;
pub mod jobs;
pub mod listing;
pub mod nodes;
mod recipes;

use axum::routing::{on, MethodFilter, MethodRouter};
use capstan_events::rpc::Level;

use crate::{
    route::{Route, UiOp},
    state::AppState,
};

/// What each of the agent channel's pages or forms does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentChannelPage {
    Dashboard,
    ApproveJoin,
    RejectJoin,
    ReopenJoin,
    NodeList,
    JoinList,
    BindPage,
    NodePage,
    DisconnectPage,
    DisconnectNode,
    CreateJob,
    JobPage,
    JobOutput,
    CancelJob,
    MarkFailedPage,
    MarkJobFailed,
}

const fn page(path: &'static str, level: Level, op: AgentChannelPage) -> Route {
    Route::page(path, level, UiOp::AgentChannel(op))
}

const fn form(
    path: &'static str,
    level: Level,
    op: AgentChannelPage,
    action: &'static str,
) -> Route {
    Route::form(path, level, UiOp::AgentChannel(op), action)
}

use AgentChannelPage as P;
use Level::{Admin, Change, Read};

/// The agent channel's rows of the route table.
pub const ROUTES: &[Route] = &[
    page("/ui/", Read, P::Dashboard),
    page("/ui/nodes", Read, P::NodeList),
    page("/ui/joins", Read, P::JoinList),
    page("/ui/joins/{id}/bind", Admin, P::BindPage),
    form(
        "/ui/joins/{id}/approve",
        Admin,
        P::ApproveJoin,
        "approve_join",
    ),
    form("/ui/joins/{id}/reject", Admin, P::RejectJoin, "reject_join"),
    form("/ui/joins/{id}/reopen", Admin, P::ReopenJoin, "reopen_join"),
    page("/ui/nodes/{id}", Read, P::NodePage),
    page("/ui/nodes/{id}/disconnect", Admin, P::DisconnectPage),
    form(
        "/ui/nodes/{id}/disconnect",
        Admin,
        P::DisconnectNode,
        "disconnect_node",
    ),
    // As in the API: 7 at the route, the word's class decides (change 8, destructive 10).
    form("/ui/nodes/{id}/jobs", Read, P::CreateJob, "create_job"),
    page("/ui/jobs/{id}", Read, P::JobPage),
    page("/ui/jobs/{id}/output", Read, P::JobOutput),
    form("/ui/jobs/{id}/cancel", Change, P::CancelJob, "cancel_job"),
    page("/ui/jobs/{id}/mark-failed", Change, P::MarkFailedPage),
    form(
        "/ui/jobs/{id}/mark-failed",
        Change,
        P::MarkJobFailed,
        "mark_job_failed",
    ),
];

/// The handler of one of the agent channel's pages or forms.
pub fn handler(filter: MethodFilter, op: AgentChannelPage) -> MethodRouter<AppState> {
    match op {
        P::Dashboard => on(filter, dashboard::page),
        P::ApproveJoin => on(filter, dashboard::approve_join),
        P::RejectJoin => on(filter, dashboard::reject_join),
        P::ReopenJoin => on(filter, dashboard::reopen_join),
        P::NodeList => on(filter, listing::nodes_page),
        P::JoinList => on(filter, listing::joins_page),
        P::BindPage => on(filter, listing::bind_page),
        P::NodePage => on(filter, nodes::page),
        P::DisconnectPage => on(filter, nodes::disconnect_page),
        P::DisconnectNode => on(filter, nodes::disconnect),
        P::CreateJob => on(filter, nodes::create_job),
        P::JobPage => on(filter, jobs::page),
        P::JobOutput => on(filter, jobs::output),
        P::CancelJob => on(filter, jobs::cancel),
        P::MarkFailedPage => on(filter, jobs::mark_failed_page),
        P::MarkJobFailed => on(filter, jobs::mark_failed),
    }
}
