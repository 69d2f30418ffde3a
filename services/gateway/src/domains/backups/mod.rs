//! The backups service's pages (issue 14): the node page's Backups tab (its chains newest
//! first, each run full or incremental with its size, who asked for it and whether it was
//! verified; the last backup, the last full and the oldest held; the verify state in BK-20's
//! words; its position — fleet, its own schedule, or off — and the schedule in force; Run now
//! and Verify at level 8, Restore, Move and the position at level 10), the Targets page
//! (`/ui/backups/targets`, level 10: the targets, which is where new backups go, and the
//! fleet's coverage) and the fleet policy page (`/ui/backups/policy`: read at 7, edited at 10).
//! They ask the backups service the same rpc the JSON API does (`api.rs` here), as the
//! signed-in operator; the service owns every rule and these pages show what it answers.
//!
//! Stable hooks for browser tests:
//! * node page: `[data-test=tab-backups]`; `[data-test=backups]` with
//!   `[data-test=last-backup]`, `[data-test=last-full]`, `[data-test=oldest]`,
//!   `[data-test=verify-state]` (`data-state=` the service's state, `data-problem=true|false`),
//!   `[data-test=shelf-problem]`, `[data-test=last-failure]`, `[data-test=recovery-key]`,
//!   `[data-test=busy]`, `#chain-<space>-<full seq>` tables with `#run-<seq>` rows carrying
//!   `[data-test=run-kind]`, `[data-test=run-size]`, `[data-test=run-by]`,
//!   `[data-test=run-verified]`; `button[data-test=backup-run-now]`,
//!   `button[data-test=verify-<seq>]`, `button[data-test=restore-<seq>]` (with its
//!   `input[name=confirm]`), `form#backup-move` with `select[name=target_id]` and
//!   `button[data-test=backup-move]`; `[data-test=node-position]` (`data-position=fleet|own|off`)
//!   and, at level 10, `form#backup-position` with `select[name=position]` and
//!   `button[data-test=save-position]`
//! * Targets page: `[data-test=coverage]`, `#target-<id>` rows with `[data-test=target-nodes]`,
//!   `[data-test=target-waiting]`, `[data-test=target-draining]`,
//!   `[data-test=where-new-backups-go]` and `button[data-test=make-default]`;
//!   `#uncovered-<node>` rows with `[data-test=uncovered-reason]` (`data-reason=`)
//! * policy page: `form#backup-policy` with one input per field (`name=` the API's field),
//!   `button[data-test=save-policy]`, `[data-test=policy-problem]`, and
//!   `[data-test=field-error-<field>]` beside the field a refusal named
//! * the menu's `a[data-test=nav-backup-policy]` and (level 10) `a[data-test=nav-backup-targets]`

pub mod api;
mod node_tab;
mod policy;
mod targets;

pub use node_tab::{node_tab, BackupsTab};

use axum::routing::on;
use capstan_events::rpc::Level;

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

use Level::{Admin, Change, Read};

/// This folder's rows of the route table, at the levels of the API's routes: targets 10, the
/// policy read at 7 and changed at 10, run and verify 8, restore and move 10.
const PAGES: &[Route] = &[
    page("/ui/backups/targets", Admin, |filter| {
        on(filter, targets::page)
    }),
    form(
        "/ui/backups/targets/{id}/default",
        Admin,
        |filter| on(filter, targets::set_default),
        "set_default_backup_target",
    ),
    page("/ui/backups/policy", Read, |filter| {
        on(filter, policy::page)
    }),
    form(
        "/ui/backups/policy",
        Admin,
        |filter| on(filter, policy::save),
        "set_backup_policy",
    ),
    form(
        "/ui/nodes/{id}/backups/run",
        Change,
        |filter| on(filter, node_tab::run_now),
        "run_backup",
    ),
    form(
        "/ui/nodes/{id}/backups/verify",
        Change,
        |filter| on(filter, node_tab::verify),
        "verify_backup",
    ),
    form(
        "/ui/nodes/{id}/backups/restore",
        Admin,
        |filter| on(filter, node_tab::restore),
        "restore_backup",
    ),
    form(
        "/ui/nodes/{id}/backups/move",
        Admin,
        |filter| on(filter, node_tab::move_node),
        "move_backups",
    ),
    form(
        "/ui/nodes/{id}/backups/policy",
        Admin,
        |filter| on(filter, node_tab::set_position),
        "set_node_backup_policy",
    ),
];

/// This folder's rows of the route table: its API and its pages.
pub fn routes() -> Vec<Route> {
    [api::ROUTES, PAGES].concat()
}
