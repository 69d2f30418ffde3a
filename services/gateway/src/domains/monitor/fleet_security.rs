//! The monitor's Fleet security page (`/ui/fleet/security`, level 7; MO-16, MO-17): one row
//! per machine from its host report, red first, with why it has its colour. It asks the monitor
//! the same rpc as `GET /api/v1/fleet/security`, as the signed-in operator. Everything a node
//! reported (names, OS, packages, services) is escaped by the template and never a link.
//!
//! Stable hooks for browser tests: `#security-<node id>` rows with `[data-test=colour]`
//! (`data-colour=red|amber|grey|green`), `[data-test=security-pending]`,
//! `[data-test=needing-restart]`, `[data-test=reboot]`, `[data-test=last-update]`,
//! `[data-test=unfinished]`, `[data-test=reasons]`; `a[data-test=nav-security]` in the menu.
//! A Docker host's site containers are rows right under it: `#container-<host id>-<n>`
//! (`n` from 0, in the monitor's order, red first) with `[data-test=container-name]`,
//! `[data-test=colour]`, `[data-test=security-pending]`, `[data-test=state]` and
//! `[data-test=reasons]`.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
    routing::on,
};
use capstan_events::monitor::rpc::{ContainerRow, GetFleetSecurity, SecurityRow};
use capstan_events::rpc::Level;
use capstan_events::NodeId;

use crate::{
    ask::ask,
    route::Route,
    state::AppState,
    ui::{
        format::{ago, Ago},
        render, Chrome, UiError, UiSession,
    },
};
use capstan_events::Word as _;

/// This page's row of the route table.
pub const ROUTES: &[Route] = &[Route::page("/ui/fleet/security", Level::Read, |filter| {
    on(filter, page)
})];

/// "unknown" for a fact the machine could not measure.
const UNKNOWN: &str = "unknown";

struct Line {
    node_id: NodeId,
    name: String,
    colour: &'static str,
    os: String,
    security_pending: String,
    needing_restart: String,
    reboot: String,
    last_update: Option<Ago>,
    unfinished: String,
    reasons: Vec<String>,
    containers: Vec<ContainerLine>,
}

/// A site container's row under its host.
struct ContainerLine {
    name: String,
    node: Option<(NodeId, String)>,
    site: String,
    state: String,
    colour: &'static str,
    security_pending: String,
    security_packages: String,
    reasons: Vec<String>,
}

fn container_line(row: &ContainerRow) -> ContainerLine {
    ContainerLine {
        name: row.name.clone(),
        node: row.node_id.zip(row.node_name.clone()),
        site: row.site.clone().unwrap_or_default(),
        state: row.state.clone().unwrap_or_else(|| UNKNOWN.to_string()),
        colour: row.colour.as_str(),
        security_pending: row
            .security_pending
            .map_or_else(|| UNKNOWN.to_string(), |count| count.to_string()),
        security_packages: listed(&row.security_packages),
        reasons: row.reasons.clone(),
    }
}

fn listed(names: &Option<Vec<String>>) -> String {
    match names {
        None => UNKNOWN.to_string(),
        Some(names) if names.is_empty() => "none".to_string(),
        Some(names) => names.join(", "),
    }
}

fn line(row: &SecurityRow) -> Line {
    Line {
        node_id: row.node_id,
        name: row.name.clone(),
        colour: row.colour.as_str(),
        os: row.os.clone().unwrap_or_else(|| UNKNOWN.to_string()),
        security_pending: row
            .security_pending
            .map_or_else(|| UNKNOWN.to_string(), |count| count.to_string()),
        needing_restart: listed(&row.services_needing_restart),
        reboot: match (row.reboot_owed, row.reboot_owed_since) {
            (None, _) => UNKNOWN.to_string(),
            (Some(false), _) => "no".to_string(),
            (Some(true), Some(since)) => {
                format!("owed since {}", since.format("%Y-%m-%d %H:%M UTC"))
            }
            (Some(true), None) => "owed".to_string(),
        },
        last_update: row.last_auto_update.map(ago),
        unfinished: listed(&row.dpkg_unfinished),
        reasons: row.reasons.clone(),
        containers: row.containers.iter().map(container_line).collect(),
    }
}

#[derive(Template)]
#[template(path = "fleet_security.html")]
struct SecurityPage {
    chrome: Chrome,
    machines: Vec<Line>,
    problem: Option<String>,
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let (machines, problem) = match ask(
        &state,
        &GetFleetSecurity {
            actor: session.actor(),
        },
    )
    .await
    {
        Ok(view) => (view.machines.iter().map(line).collect(), None),
        Err(refusal) => (Vec::new(), Some(crate::ui::refusal_sentence(&refusal))),
    };
    let page = SecurityPage {
        chrome: Chrome::signed_in(&session, &headers, "Fleet security", "security"),
        machines,
        problem,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}
