//! The incidents service's pages: the header line on every page (IN-16), the Incidents list
//! (IN-17), an incident's page (IN-18), the node page's Incidents card, Silences, Webhooks, the
//! bell, and the Account page's mail preferences. They ask the incidents service the same rpc
//! the JSON API does (`api/incidents.rs`), as the signed-in operator; this folder contributes
//! its rows to the one route table ([`ROUTES`]), each with its level, and every form's CSRF
//! token is checked by the session guard.
//!
//! Everything a node or a note said (titles' detail, notes, node names, delivery answers) is
//! escaped by the templates and never becomes a link (IN-20): an `href` carries only our own
//! ids.
//!
//! Stable hooks for browser tests:
//! * every page: `[data-test=incident-line]` (`data-colour=red|amber|blue`; absent when there
//!   is nothing to say), `a[data-test=nav-incidents]`
//! * list: `[data-test=view-<view>]` (with `aria-current` on the one shown, its count in
//!   `[data-test=count]`), `#incident-<id>` rows with `a[data-test=incident-link]`,
//!   `input[name=id]` checkboxes, `select[name=do]`, `button[data-test=bulk-triage]`
//! * incident page: `[data-test=incident-state]`, `[data-test=incident-triage]`,
//!   `ol[data-test=timeline]` of `li[data-kind=...]`, `[data-test=evidence]`,
//!   `button[data-test=triage-<do>]`, `textarea[name=note]`, `button[data-test=add-note]`,
//!   `[data-test=signals]`
//! * node page: `[data-test=node-incidents]`
//! * silences: `form#create-silence`, `#silence-<id>` rows, `button[data-test=end-silence]`
//! * webhooks: `form#create-webhook`, `[data-test=webhook-secret]`, `#webhook-<id>` rows,
//!   `button[data-test=delete-webhook]`
//! * bell: `#bell-<n>` rows; account: `form#notifications`

pub mod api;
mod bell;
mod header;
mod incident;
mod list;
mod node_card;
mod notifications;
mod silences;
mod webhooks;

pub use header::HEADER_PART;
pub use node_card::{node_card, NodeCard};
pub use notifications::{notifications_section, NotificationsSection};

use axum::routing::on;
use capstan_events::NodeId;
use capstan_events::Word as _;
use capstan_events::{incidents::Severity, rpc::Level};

use crate::ui::UiSession;
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

/// This folder's rows of the route table: reading at 7, triage, notes and silences at 8 (IN-19),
/// webhooks and the bell (whose signals go to level-10 operators) at 10.
const PAGES: &[Route] = &[
    page("/ui/incidents", Read, |filter| on(filter, list::page)),
    form(
        "/ui/incidents/bulk-triage",
        Change,
        |filter| on(filter, list::bulk_triage),
        "triage_incidents",
    ),
    page("/ui/incidents/{id}", Read, |filter| {
        on(filter, incident::page)
    }),
    form(
        "/ui/incidents/{id}/triage",
        Change,
        |filter| on(filter, incident::triage),
        "triage_incident",
    ),
    form(
        "/ui/incidents/{id}/notes",
        Change,
        |filter| on(filter, incident::note),
        "note_incident",
    ),
    page("/ui/silences", Change, |filter| on(filter, silences::page)),
    form(
        "/ui/silences",
        Change,
        |filter| on(filter, silences::create),
        "create_silence",
    ),
    form(
        "/ui/silences/{id}/end",
        Change,
        |filter| on(filter, silences::end),
        "delete_silence",
    ),
    page("/ui/webhooks", Admin, |filter| on(filter, webhooks::page)),
    form(
        "/ui/webhooks",
        Admin,
        |filter| on(filter, webhooks::create),
        "create_webhook",
    ),
    form(
        "/ui/webhooks/{id}/delete",
        Admin,
        |filter| on(filter, webhooks::delete),
        "delete_webhook",
    ),
    page("/ui/bell", Admin, |filter| on(filter, bell::page)),
    form(
        "/ui/account/notifications",
        Read,
        |filter| on(filter, notifications::save),
        "set_notifications",
    ),
];

/// This folder's rows of the route table: its API and its pages.
pub fn routes() -> Vec<Route> {
    [api::ROUTES, PAGES].concat()
}

/// One attempt of a delivery (a bell, a mail, a webhook) as the delivery logs show it: what
/// the other end answered is shown as text, clipped.
pub struct Attempt {
    pub when: crate::ui::format::Ago,
    pub ok: bool,
    pub detail: String,
}

/// A delivery's attempts, oldest first.
fn attempts(log: &[capstan_events::incidents::rpc::AttemptView]) -> Vec<Attempt> {
    log.iter()
        .map(|attempt| Attempt {
            when: crate::ui::format::ago(attempt.at),
            ok: attempt.ok,
            detail: crate::ui::format::clip(&attempt.detail, 500),
        })
        .collect()
}

/// A node as the pages name it: its name as the agent channel last said it, else its number.
fn node_label(node_id: NodeId, name: Option<&str>) -> String {
    match name {
        Some(name) if !name.trim().is_empty() => name.to_string(),
        _ => format!("node {node_id}"),
    }
}

/// Whether `session` may triage, write notes and silence (IN-19: level 8).
fn can_triage(session: &UiSession) -> bool {
    session.level >= Level::Change
}

fn severity_word(severity: Severity) -> &'static str {
    severity.as_str()
}

/// The words of a view, for a person.
fn view_words(view: &str) -> &'static str {
    match view {
        "needs_you" => "Needs you",
        "new" => "New",
        "snoozed" => "Snoozed",
        "waiting" => "Waiting for proof",
        "resolved" => "Resolved",
        "ignored" => "Ignored",
        _ => "All",
    }
}

/// The triage acts, as the buttons and the bulk dropdown offer them (IN-18, IN-19).
const ACTS: [(&str, &str); 7] = [
    ("resolved", "Resolve"),
    ("ignored", "Ignore"),
    ("new", "Back to new"),
    ("snooze_4", "Snooze 4 hours"),
    ("snooze_24", "Snooze 1 day"),
    ("snooze_72", "Snooze 3 days"),
    ("snooze_168", "Snooze 1 week"),
];

/// What a triage act did, as a sentence.
fn act_done_words(act: &str) -> &'static str {
    match act {
        "resolved" => "resolved",
        "ignored" => "ignored",
        "new" => "back to new",
        "snooze_4" => "snoozed for 4 hours",
        "snooze_24" => "snoozed for 1 day",
        "snooze_72" => "snoozed for 3 days",
        "snooze_168" => "snoozed for 1 week",
        _ => "changed",
    }
}

/// A form's fields, for the tests of the forms.
#[cfg(test)]
fn fields(list: &[(&str, &str)]) -> crate::ui::guard::FormFields {
    crate::ui::guard::FormFields(
        list.iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_act_has_words_and_the_acts_are_the_contracts() {
        let acts: Vec<&str> = ACTS.iter().map(|(act, _)| *act).collect();
        assert_eq!(
            acts,
            [
                "resolved",
                "ignored",
                "new",
                "snooze_4",
                "snooze_24",
                "snooze_72",
                "snooze_168"
            ]
        );
        for act in acts {
            assert_ne!(act_done_words(act), "changed", "{act}");
        }
    }

    #[test]
    fn a_node_without_a_name_is_named_by_its_number() {
        assert_eq!(node_label(NodeId(5), None), "node 5");
        assert_eq!(node_label(NodeId(5), Some("  ")), "node 5");
        assert_eq!(node_label(NodeId(5), Some("web-1")), "web-1");
    }
}
