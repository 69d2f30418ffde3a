//! The agent channel's pages: the dashboard, the node list, the joins and the bind listing,
//! the node page (with its recipes tab), the job page and their forms. They ask the agent
//! channel the same rpc the JSON API does (`api.rs` here), as the signed-in operator; this
//! folder contributes its rows to the one route table ([`ROUTES`]), each with its level, and
//! every form's CSRF token is checked by the session guard. Their hooks for browser tests are
//! listed in `ui/mod.rs`.

pub mod agent;
mod agent_doc;
pub mod api;
pub mod dashboard;
mod first_server;
pub mod jobs;
pub mod listing;
pub mod nodes;
mod recipes;

use axum::routing::on;
use capstan_events::rpc::Level;

use crate::route::{Handler, Route};

const fn page(path: &'static str, level: Level, handler: Handler) -> Route {
    Route::page(path, level, handler)
}

const fn form(path: &'static str, level: Level, handler: Handler, action: &'static str) -> Route {
    Route::form(path, level, handler, action)
}

use Level::{Admin, Change, Read};

/// The agent channel's rows of the route table.
const PAGES: &[Route] = &[
    page("/ui/", Read, |filter| on(filter, dashboard::page)),
    page("/ui/nodes", Read, |filter| on(filter, listing::nodes_page)),
    page("/ui/joins", Read, |filter| on(filter, listing::joins_page)),
    page("/ui/joins/{id}/bind", Admin, |filter| {
        on(filter, listing::bind_page)
    }),
    form(
        "/ui/joins/{id}/approve",
        Admin,
        |filter| on(filter, dashboard::approve_join),
        "approve_join",
    ),
    form(
        "/ui/joins/{id}/reject",
        Admin,
        |filter| on(filter, dashboard::reject_join),
        "reject_join",
    ),
    form(
        "/ui/joins/{id}/reopen",
        Admin,
        |filter| on(filter, dashboard::reopen_join),
        "reopen_join",
    ),
    page("/ui/nodes/{id}", Read, |filter| on(filter, nodes::page)),
    page("/ui/nodes/{id}/disconnect", Admin, |filter| {
        on(filter, nodes::disconnect_page)
    }),
    form(
        "/ui/nodes/{id}/disconnect",
        Admin,
        |filter| on(filter, nodes::disconnect),
        "disconnect_node",
    ),
    // As in the API: 7 at the route, the word's class decides (change 8, destructive 10).
    form(
        "/ui/nodes/{id}/jobs",
        Read,
        |filter| on(filter, nodes::create_job),
        "create_job",
    ),
    page("/ui/jobs/{id}", Read, |filter| on(filter, jobs::page)),
    page("/ui/jobs/{id}/output", Read, |filter| {
        on(filter, jobs::output)
    })
    .unframed(),
    form(
        "/ui/jobs/{id}/cancel",
        Change,
        |filter| on(filter, jobs::cancel),
        "cancel_job",
    ),
    page("/ui/jobs/{id}/mark-failed", Change, |filter| {
        on(filter, jobs::mark_failed_page)
    }),
    form(
        "/ui/jobs/{id}/mark-failed",
        Change,
        |filter| on(filter, jobs::mark_failed),
        "mark_job_failed",
    ),
];

/// This folder's rows of the route table: its API and its pages.
pub fn routes() -> Vec<Route> {
    [agent::ROUTES, api::ROUTES, PAGES].concat()
}
