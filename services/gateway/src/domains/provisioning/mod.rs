//! The provisioning service's pages (issue 29): our cloud accounts (`/ui/provisioning/accounts`,
//! level 10: the list, an add form whose token is never shown again, delete), the provisions
//! (`/ui/provisioning`, level 7) under Main | Test tabs (PV-13: `?account=main|test`, remembered
//! in a cookie; the other tab shows its count), the "New server" form (level 10; the regions and
//! sizes drawn from the account's offer), a provision's page (its steps with times, the
//! install's log as the service masked it, Retry when the install failed, the node once it has
//! one, the auto-approval verdict with its reasons, a differing key red), the dashboard's banner
//! of provisions in flight ([`banner`]), and what the join cards show of a join that matches a
//! provision ([`join_cards`], AC-09, AC-11). They ask the provisioning service the same rpc the
//! JSON API does (`api.rs` here), as the signed-in operator. An operator below level 10 sees no
//! provisioning action (no form, no button), and the forms refuse them (the route table's 10).
//!
//! Stable hooks for browser tests:
//! * the menu's `a[data-test=nav-provisioning]` and (level 10) `a[data-test=nav-cloud-accounts]`
//! * accounts: `[data-test=no-seal-key]`, `#account-<id>` rows with `[data-test=account-flag]`
//!   and `button[data-test=delete-account]`; `form#add-account` with `select[name=provider]`,
//!   `input[name=label]`, `select[name=flag]`, `input[name=token]`,
//!   `button[data-test=add-account]`
//! * provisions: `a[data-test=tab-main|tab-test]` (the current one `aria-current=page`),
//!   `[data-test=other-count]`, `a[data-test=new-server]` (level 10), `#provision-<id>` rows
//!   with `a[data-test=provision-link]` and `[data-test=provision-step]` (`data-step=`)
//! * New server: `form#choose-account` (`select[name=account]`), `form#new-server` with
//!   `select[name=kind]`, `select[name=plan]` (`<region> <size>`), `input[name=name]`,
//!   `input[name=image]`, `button[data-test=request-provision]`; `[data-test=offer-problem]`
//! * a provision: `[data-test=provision-step]` (`data-step=`), `[data-test=failure]`,
//!   `#step-<n>` rows with `[data-test=step-name]` and `time`, `[data-test=install-log]`,
//!   `button[data-test=retry-provision]` (level 10, install failed), `a[data-test=node-link]`,
//!   `[data-test=verdict]` (`data-approved=true|false`) with `[data-test=verdict-reason]` items
//!   and `[data-test=key-differs]`
//! * dashboard: `[data-test=provisions-banner]` with `#banner-provision-<id>` items
//! * join cards: `[data-test=join-provision]` in a `#join-<id>` row, with
//!   `a[data-test=join-provision-link]`, `[data-test=join-instance]`, `[data-test=join-age]`,
//!   `[data-test=join-pending-reason]` items, `[data-test=join-key-differs]` and
//!   `[data-test=join-second]`

mod accounts;
pub mod api;
mod banner;
mod join_cards;
mod provision;
mod provisions;

pub use banner::{banner, Banner};
pub use join_cards::{join_cards, JoinProvision};

use axum::routing::on;
use capstan_events::provisioning::{AccountFlag, InstallKind, ProvisionStep};
use capstan_events::rpc::Level;

use crate::route::{Handler, Route};

const fn page(path: &'static str, level: Level, handler: Handler) -> Route {
    Route::page(path, level, handler)
}

const fn form(path: &'static str, level: Level, handler: Handler, action: &'static str) -> Route {
    Route::form(path, level, handler, action)
}

use Level::{Admin, Read};

/// This folder's rows of the route table, at the API's levels: accounts and every act 10,
/// reading provisions 7.
const PAGES: &[Route] = &[
    page("/ui/provisioning", Read, |filter| {
        on(filter, provisions::page)
    }),
    page("/ui/provisioning/new", Admin, |filter| {
        on(filter, provisions::new_page)
    }),
    form(
        "/ui/provisioning/provisions",
        Admin,
        |filter| on(filter, provisions::request),
        "request_provision",
    ),
    page("/ui/provisioning/provisions/{id}", Read, |filter| {
        on(filter, provision::page)
    }),
    form(
        "/ui/provisioning/provisions/{id}/retry",
        Admin,
        |filter| on(filter, provision::retry),
        "retry_provision",
    ),
    page("/ui/provisioning/accounts", Admin, |filter| {
        on(filter, accounts::page)
    }),
    form(
        "/ui/provisioning/accounts",
        Admin,
        |filter| on(filter, accounts::add),
        "add_cloud_account",
    ),
    form(
        "/ui/provisioning/accounts/{id}/delete",
        Admin,
        |filter| on(filter, accounts::delete),
        "delete_cloud_account",
    ),
];

/// This folder's rows of the route table: its API and its pages.
pub fn routes() -> Vec<Route> {
    [api::ROUTES, PAGES].concat()
}

/// A step, for a person.
fn step_words(step: ProvisionStep) -> &'static str {
    match step {
        ProvisionStep::Requested => "Requested",
        ProvisionStep::Creating => "Creating the instance",
        ProvisionStep::Booting => "Waiting for the instance to run",
        ProvisionStep::Installing => "Installing over SSH",
        ProvisionStep::Done => "Installed",
        ProvisionStep::InstallFailed => "Install failed",
    }
}

/// Whether a provision at `step` is still under way (its page refreshes itself; the banner
/// lists it).
fn in_flight(step: ProvisionStep) -> bool {
    !matches!(step, ProvisionStep::Done | ProvisionStep::InstallFailed)
}

/// A kind, for a person.
fn kind_words(kind: InstallKind) -> &'static str {
    match kind {
        InstallKind::Agent => "Agent",
        InstallKind::Site => "Site",
        InstallKind::DockerHost => "Docker host",
    }
}

/// A flag, for a person (the tabs' names).
fn flag_words(flag: AccountFlag) -> &'static str {
    match flag {
        AccountFlag::Main => "Main",
        AccountFlag::Test => "Test",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::IntoEnumIterator;

    #[test]
    fn only_done_and_failed_provisions_are_out_of_flight() {
        let landed: Vec<ProvisionStep> = ProvisionStep::iter()
            .filter(|step| !in_flight(*step))
            .collect();
        assert_eq!(landed, [ProvisionStep::Done, ProvisionStep::InstallFailed]);
        for step in ProvisionStep::iter() {
            assert!(!step_words(step).is_empty());
        }
    }
}
