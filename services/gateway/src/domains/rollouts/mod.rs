//! The rollouts pages (issue 16): the list with a form to start one, and a rollout's page —
//! its stages, each node's step, verdict and reason, the pages it checked before and after the
//! apply side by side, and stop, pause, resume and retry at level 8. A rollout under way
//! refreshes itself every few seconds (live progress without a script). Rollouts owns every
//! rule; these pages ask it and show what it answers.
//!
//! The Releases page (`/ui/releases`, level 7) is here too: releases are rollouts'; see
//! [`releases`] for its hooks.
//!
//! Stable hooks for browser tests: `form#start-rollout`, `#rollout-<id>` rows with
//! `a[data-test=rollout-link]`; on a rollout's page `[data-test=rollout-state]`,
//! `[data-test=halt-reason]`, `#step-<id>` rows with `[data-test=verdict]`, `[data-test=phase]`
//! and `[data-test=reason]`, `button[data-test=act-<stop|pause|resume|retry>]`.

pub mod api;
mod list;
mod releases;
pub mod releases_api;
mod rollout;

use axum::routing::on;
use capstan_events::{rpc::Level, Domain};
use serde::{de::DeserializeOwned, Serialize};

use crate::{
    ask::ask_of,
    error::ApiError,
    route::{Handler, Route},
    state::AppState,
};

const fn page(path: &'static str, level: Level, handler: Handler) -> Route {
    Route::page(path, level, handler)
}

const fn form(path: &'static str, level: Level, handler: Handler, action: &'static str) -> Route {
    Route::form(path, level, handler, action)
}

use Level::{Change, Read};

/// This folder's rows of the route table: reading at 7, starting and acting at 8 (a rollout
/// to every node needs 10, which rollouts checks).
const PAGES: &[Route] = &[
    page("/ui/rollouts", Read, |filter| on(filter, list::page)),
    form(
        "/ui/rollouts",
        Change,
        |filter| on(filter, list::start),
        "start_rollout",
    ),
    page("/ui/rollouts/{id}", Read, |filter| {
        on(filter, rollout::page)
    }),
    form(
        "/ui/rollouts/{id}/act",
        Change,
        |filter| on(filter, rollout::act),
        "act_on_rollout",
    ),
    page("/ui/releases", Read, |filter| on(filter, releases::page)),
];

/// This folder's rows of the route table: its API and its pages.
pub fn routes() -> Vec<Route> {
    [releases_api::ROUTES, api::ROUTES, PAGES].concat()
}

/// Asks the rollouts service `op`.
async fn ask<Req: Serialize, Resp: DeserializeOwned>(
    state: &AppState,
    op: &str,
    request: &Req,
) -> Result<Resp, ApiError> {
    ask_of(state, Domain::Rollouts, op, request).await
}

/// A state, for a person.
fn state_words(state: &str) -> &'static str {
    match state {
        "running" => "Running",
        "paused" => "Paused",
        "halting" => "Halting (applies under way are still judged)",
        "halted" => "Halted",
        "stopped" => "Stopped",
        "finished" => "Finished",
        _ => "Unknown",
    }
}

/// Whether a rollout in `state` is still moving (its page refreshes itself).
fn under_way(state: &str) -> bool {
    matches!(state, "running" | "paused" | "halting")
}
