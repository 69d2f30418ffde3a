//! The machines inventory and the Docker hosts (issue 29; the provisioning service owns every
//! rule): the JSON API (`api.rs`) and two pages asking the same rpcs as the signed-in operator
//! — `/ui/machines` (level 7: every managed node and every server in our main accounts with no
//! node, each in its PV-54 colour with what is written down about it, and, at level 8, a
//! form writing it down (Save confirms) and a Confirm button re-confirming what is written) and `/ui/hosts` (level 7: each host's
//! placement record, its own node and its containers, PV-15).
//!
//! Stable hooks for browser tests:
//! * machines page: `#machine-<id>` rows (`data-colour=red|amber|plain`,
//!   `data-kind=managed|not_managed`) with `[data-test=machine-note]` and, at level 8,
//!   `form[data-test=write-machine]` (inputs `purpose`, `owner`, `serves`, `release`,
//!   `retire_by`; `button[data-test=save-machine]`) and, when something is written,
//!   `button[data-test=confirm-machine]`; `[data-test=machines-unreachable]`
//! * hosts page: `#host-<id>` rows with `[data-test=host-node]`, `[data-test=host-containers]`
//!   (`data-count=`) and `[data-test=host-room]`
//! * the menu's `a[data-test=nav-machines]` and `a[data-test=nav-hosts]`

pub mod api;
mod pages;

use axum::routing::on;
use capstan_events::rpc::Level;

use crate::route::Route;

const PAGES: &[Route] = &[
    Route::page("/ui/machines", Level::Read, |filter| {
        on(filter, pages::machines)
    }),
    Route::form(
        "/ui/machines/{id}",
        Level::Change,
        |filter| on(filter, pages::save),
        "write_machine",
    ),
    Route::form(
        "/ui/machines/{id}/confirm",
        Level::Change,
        |filter| on(filter, pages::confirm),
        "write_machine",
    ),
    Route::page("/ui/hosts", Level::Read, |filter| on(filter, pages::hosts)),
];

/// This folder's rows of the route table: its API and its pages.
pub fn routes() -> Vec<Route> {
    [api::ROUTES, PAGES].concat()
}
