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

mod list;
mod releases;
mod rollout;

use axum::routing::{on, MethodFilter, MethodRouter};
use capstan_events::{rollouts::staged::RolloutState, rpc::Level};

use crate::{
    ask::ask,
    route::{Route, UiOp},
    state::AppState,
};

/// What each rollouts page or form does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutsPage {
    List,
    Start,
    Rollout,
    Act,
    /// The Releases page (issue 15; `releases.rs`).
    Releases,
}

const fn page(path: &'static str, level: Level, op: RolloutsPage) -> Route {
    Route::page(path, level, UiOp::Rollouts(op))
}

const fn form(path: &'static str, level: Level, op: RolloutsPage, action: &'static str) -> Route {
    Route::form(path, level, UiOp::Rollouts(op), action)
}

use Level::{Change, Read};
use RolloutsPage as P;

/// This folder's rows of the route table: reading at 7, starting and acting at 8 (a rollout
/// to every node needs 10, which rollouts checks).
pub const ROUTES: &[Route] = &[
    page("/ui/rollouts", Read, P::List),
    form("/ui/rollouts", Change, P::Start, "start_rollout"),
    page("/ui/rollouts/{id}", Read, P::Rollout),
    form("/ui/rollouts/{id}/act", Change, P::Act, "act_on_rollout"),
    page("/ui/releases", Read, P::Releases),
];

/// The handler of `op`.
pub fn handler(filter: MethodFilter, op: RolloutsPage) -> MethodRouter<AppState> {
    match op {
        P::List => on(filter, list::page),
        P::Start => on(filter, list::start),
        P::Rollout => on(filter, rollout::page),
        P::Act => on(filter, rollout::act),
        P::Releases => on(filter, releases::page),
    }
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
