//! The bell (level 10): the in-app notifications the incidents service delivered to this
//! operator, newest first. Signals go to every level-10 operator (IN-14), so the page is
//! theirs; each names the incident by its number and the node by what the agent channel said,
//! escaped, never a link.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::incidents::rpc::{Bell, NotificationsRequest};

use super::{ask, node_label};
use crate::{
    state::AppState,
    ui::{
        format::{ago, Ago},
        render, Chrome, UiError, UiSession,
    },
};
use capstan_events::Word as _;

struct Item {
    when: Ago,
    incident_id: i64,
    node: String,
    title: String,
    severity: &'static str,
    reason: &'static str,
}

#[derive(Template)]
#[template(path = "incidents_bell.html")]
struct BellPage {
    chrome: Chrome,
    items: Vec<Item>,
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let request = NotificationsRequest {
        actor: session.actor(),
        operator_id: session.operator_id,
    };
    let bell: Bell = ask(
        &state,
        &capstan_events::incidents::rpc::BellRequest(request),
    )
    .await
    .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let items = bell
        .items
        .iter()
        .map(|item| Item {
            when: ago(item.at),
            incident_id: item.incident_id,
            node: node_label(item.node_id, item.node_name.as_deref()),
            title: item.title.clone(),
            severity: item.severity.as_str(),
            reason: match item.reason.as_str() {
                "opened" => "opened",
                "reopened" => "reopened",
                "unproven" => "back to new: the fix was not proven",
                _ => "changed",
            },
        })
        .collect();
    let page = BellPage {
        chrome: Chrome::signed_in(&session, &headers, "Bell", "bell"),
        items,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}
