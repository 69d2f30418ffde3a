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
use capstan_events::{rollouts::staged::RolloutState, rpc::Level};

use crate::{
    ask::ask,
    route::{Handler, Route},
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

/// A state, for a person.
fn state_words(state: RolloutState) -> &'static str {
    match state {
        RolloutState::Running => "Running",
        RolloutState::Paused => "Paused",
        RolloutState::Halting => "Halting (applies under way are still judged)",
        RolloutState::Halted => "Halted",
        RolloutState::Stopped => "Stopped",
        RolloutState::Finished => "Finished",
    }
}

/// Whether a rollout in `state` is still moving (its page refreshes itself).
fn under_way(state: RolloutState) -> bool {
    state.active()
}
