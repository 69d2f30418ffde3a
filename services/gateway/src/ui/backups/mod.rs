//! The backups service's pages (issue 14): the node page's Backups tab (its chains newest
//! first, each run full or incremental with its size, who asked for it and whether it was
//! verified; the last backup, the last full and the oldest held; the verify state in BK-20's
//! words; its position — fleet, its own schedule, or off — and the schedule in force; Run now
//! and Verify at level 8, Restore, Move and the position at level 10), the Targets page
//! (`/ui/backups/targets`, level 10: the targets, which is where new backups go, and the
//! fleet's coverage) and the fleet policy page (`/ui/backups/policy`: read at 7, edited at 10).
//! They ask the backups service the same rpc the JSON API does (`api/backups.rs`), as the
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

mod node_tab;
mod policy;
mod targets;

pub use node_tab::{node_tab, BackupsTab};

use axum::routing::{on, MethodFilter, MethodRouter};
use capstan_events::rpc::Level;

use crate::{
    ask::ask,
    route::{Route, UiOp},
    state::AppState,
};

/// What each backups page or form does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupsPage {
    Targets,
    SetDefaultTarget,
    Policy,
    SetPolicy,
    RunNow,
    Verify,
    Restore,
    Move,
    SetNodePolicy,
}

const fn page(path: &'static str, level: Level, op: BackupsPage) -> Route {
    Route::page(path, level, UiOp::Backups(op))
}

const fn form(path: &'static str, level: Level, op: BackupsPage, action: &'static str) -> Route {
    Route::form(path, level, UiOp::Backups(op), action)
}

use BackupsPage as P;
use Level::{Admin, Change, Read};

/// This folder's rows of the route table, at the levels of the API's routes: targets 10, the
/// policy read at 7 and changed at 10, run and verify 8, restore and move 10.
pub const ROUTES: &[Route] = &[
    page("/ui/backups/targets", Admin, P::Targets),
    form(
        "/ui/backups/targets/{id}/default",
        Admin,
        P::SetDefaultTarget,
        "set_default_backup_target",
    ),
    page("/ui/backups/policy", Read, P::Policy),
    form(
        "/ui/backups/policy",
        Admin,
        P::SetPolicy,
        "set_backup_policy",
    ),
    form(
        "/ui/nodes/{id}/backups/run",
        Change,
        P::RunNow,
        "run_backup",
    ),
    form(
        "/ui/nodes/{id}/backups/verify",
        Change,
        P::Verify,
        "verify_backup",
    ),
    form(
        "/ui/nodes/{id}/backups/restore",
        Admin,
        P::Restore,
        "restore_backup",
    ),
    form(
        "/ui/nodes/{id}/backups/move",
        Admin,
        P::Move,
        "move_backups",
    ),
    form(
        "/ui/nodes/{id}/backups/policy",
        Admin,
        P::SetNodePolicy,
        "set_node_backup_policy",
    ),
];

/// The handler of `op`.
pub fn handler(filter: MethodFilter, op: BackupsPage) -> MethodRouter<AppState> {
    match op {
        P::Targets => on(filter, targets::page),
        P::SetDefaultTarget => on(filter, targets::set_default),
        P::Policy => on(filter, policy::page),
        P::SetPolicy => on(filter, policy::save),
        P::RunNow => on(filter, node_tab::run_now),
        P::Verify => on(filter, node_tab::verify),
        P::Restore => on(filter, node_tab::restore),
        P::Move => on(filter, node_tab::move_node),
        P::SetNodePolicy => on(filter, node_tab::set_position),
    }
}
