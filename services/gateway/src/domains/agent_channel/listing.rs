//! The fleet's lists, a page at a time: the nodes (`/ui/nodes`, searched by name, address,
//! fingerprint or number and filtered by health, online and placement), the joins
//! (`/ui/joins`, pending or rejected within the day, searched), and the bind page of one join
//! (`/ui/joins/{id}/bind?q=`), which finds the unpaired node a join's key is to be bound to and
//! asks for it to be confirmed by pressing its own button. The agent channel searches and pages
//! (its store, in SQL); the gateway asks for one page and draws it. The query string's
//! parameters are the JSON API's (`crate::domains::agent_channel::api::{NODE_LISTING, JOIN_LISTING}`), read by
//! the same code, so a bad one is a `400` page naming it.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::Response,
};
use capstan_events::{
    agent_channel::rpc::{JoinFilter, Joins, ListNodes, Nodes, Page, PageInfo},
    rpc::Level,
};

use super::dashboard::{join_row, node_row, JoinRow, NodeRow};
use crate::ui::{guard::PathUuid, render, Chrome, UiError, UiSession};
use crate::{
    ask::ask,
    domains::agent_channel::api::{join_listing, node_listing, JOIN_LISTING, NODE_LISTING},
    error::ApiError,
    input::QueryParams,
    AppState,
};
use capstan_events::Word as _;

/// Rows on one page of the UI's lists.
pub const UI_PAGE: u32 = 50;
/// Nodes offered on one page of the bind search.
const BIND_PAGE: u32 = 20;

/// The previous and next pages' links (the same query, another offset) and what is shown.
pub struct Pager {
    pub shown: String,
    pub previous: Option<String>,
    pub next: Option<String>,
}

fn href(path: &str, kept: &[(&str, String)], offset: u64) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in kept {
        if !value.is_empty() {
            query.append_pair(name, value);
        }
    }
    if offset > 0 {
        query.append_pair("offset", &offset.to_string());
    }
    let query = query.finish();
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    }
}

pub fn pager(path: &str, kept: &[(&str, String)], info: PageInfo, rows: usize) -> Pager {
    let shown = if rows == 0 {
        if info.total == 0 {
            "Nothing matches.".to_string()
        } else {
            format!("Nothing on this page; {} match in all.", info.total)
        }
    } else {
        format!(
            "{}–{} of {}",
            info.offset + 1,
            info.offset + rows as u64,
            info.total
        )
    };
    Pager {
        shown,
        previous: (info.offset > 0).then(|| {
            href(
                path,
                kept,
                info.offset.saturating_sub(u64::from(info.limit)),
            )
        }),
        next: info.next_offset.map(|offset| href(path, kept, offset)),
    }
}

/// A bad query string as a `400` page naming the parameter.
fn bad_query(refusal: &ApiError, session: &UiSession) -> UiError {
    UiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_request",
        "This page cannot be shown",
        format!(
            "The address asks for something this list does not know: {}",
            refusal.message
        ),
    )
    .with_session(session)
}

/// One choice of a filter's drop-down.
pub struct Choice {
    pub value: &'static str,
    pub label: &'static str,
    pub selected: bool,
}

fn choices(current: &str, all: &[(&'static str, &'static str)]) -> Vec<Choice> {
    all.iter()
        .map(|(value, label)| Choice {
            value,
            label,
            selected: *value == current,
        })
        .collect()
}

#[derive(Template)]
#[template(path = "nodes.html")]
struct NodeList {
    chrome: Chrome,
    q: String,
    health: Vec<Choice>,
    online: Vec<Choice>,
    placement: Vec<Choice>,
    nodes: Vec<NodeRow>,
    pager: Pager,
}

pub async fn nodes_page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, UiError> {
    let query = QueryParams::parse(&uri, NODE_LISTING)
        .and_then(|query| node_listing(&query, session.actor(), UI_PAGE).map(|r| (query, r)));
    let (query, request) = query.map_err(|refusal| bad_query(&refusal, &session))?;
    let answer: Nodes = ask(&state, &request)
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let kept_value = |name: &str| query.value(name).unwrap_or_default().trim().to_string();
    let kept: Vec<(&str, String)> = ["q", "health", "online", "placement", "paired", "limit"]
        .into_iter()
        .map(|name| (name, kept_value(name)))
        .collect();
    let page = NodeList {
        chrome: Chrome::signed_in(&session, &headers, "Nodes", "nodes"),
        q: kept_value("q"),
        health: choices(
            request.health.map(|dot| dot.as_str()).unwrap_or_default(),
            &[
                ("", "any health"),
                ("red", "problem (red)"),
                ("yellow", "warning (yellow)"),
                ("green", "healthy (green)"),
                ("gray", "no data (gray)"),
            ],
        ),
        online: choices(
            match request.online {
                Some(true) => "true",
                Some(false) => "false",
                None => "",
            },
            &[
                ("", "online or not"),
                ("true", "online"),
                ("false", "offline"),
            ],
        ),
        placement: choices(
            request
                .placement
                .map(|kind| kind.as_str())
                .unwrap_or_default(),
            &[
                ("", "any placement"),
                ("machine", "machines"),
                ("host", "Docker hosts"),
                ("container", "containers"),
            ],
        ),
        nodes: answer.nodes.iter().map(node_row).collect(),
        pager: pager("/ui/nodes", &kept, answer.page, answer.nodes.len()),
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

#[derive(Template)]
#[template(path = "joins.html")]
struct JoinList {
    chrome: Chrome,
    q: String,
    rejected: bool,
    joins: Vec<JoinRow>,
    pager: Pager,
    can_decide: bool,
    back: &'static str,
}

pub async fn joins_page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, UiError> {
    let query = QueryParams::parse(&uri, JOIN_LISTING)
        .and_then(|query| join_listing(&query, session.actor(), UI_PAGE).map(|r| (query, r)));
    let (query, mut request) = query.map_err(|refusal| bad_query(&refusal, &session))?;
    // The page shows the pending or the rejected; `all` is the API's.
    if request.state == JoinFilter::All {
        request.state = JoinFilter::Pending;
    }
    let rejected = request.state == JoinFilter::Rejected;
    let answer: Joins = ask(&state, &request)
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let q = query.value("q").unwrap_or_default().trim().to_string();
    let kept = [
        ("state", if rejected { "rejected" } else { "" }.to_string()),
        ("q", q.clone()),
        (
            "limit",
            query.value("limit").unwrap_or_default().trim().to_string(),
        ),
    ];
    let page = JoinList {
        chrome: Chrome::signed_in(&session, &headers, "Joins", "joins"),
        q,
        rejected,
        joins: super::dashboard::join_rows(&state, &session.actor(), &answer.joins).await,
        pager: pager("/ui/joins", &kept, answer.page, answer.joins.len()),
        can_decide: session.level >= Level::Admin,
        back: "joins",
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

#[derive(Template)]
#[template(path = "bind.html")]
struct BindPage {
    chrome: Chrome,
    join: JoinRow,
    q: String,
    searched: bool,
    nodes: Vec<NodeRow>,
    pager: Pager,
}

pub async fn bind_page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    PathUuid(join_id): PathUuid,
    uri: Uri,
) -> Result<Response, UiError> {
    let query = QueryParams::parse(&uri, &["q", "offset"])
        .and_then(|query| {
            node_listing(&query, session.actor(), BIND_PAGE).map(|request| (query, request))
        })
        .map_err(|refusal| bad_query(&refusal, &session))?;
    let (query, listing) = query;
    let q = query.value("q").unwrap_or_default().trim().to_string();
    let joins = capstan_events::agent_channel::rpc::ListJoins {
        actor: session.actor(),
        state: JoinFilter::Pending,
        search: None,
        join_id: Some(join_id),
        page: Page {
            offset: 0,
            limit: 1,
        },
    };
    let joins: Joins = ask(&state, &joins)
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let Some(join) = joins.joins.first() else {
        return Err(UiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "Not found",
            format!("Join request {join_id} is not waiting for a decision (any more)."),
        )
        .with_session(&session));
    };
    // Only nodes without a paired key can take one; the search names the rest.
    let (nodes, info) = if q.is_empty() {
        (Vec::new(), PageInfo::default())
    } else {
        let request = ListNodes {
            paired: Some(false),
            ..listing
        };
        let answer: Nodes = ask(&state, &request)
            .await
            .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
        (answer.nodes, answer.page)
    };
    let path = format!("/ui/joins/{join_id}/bind");
    let page = BindPage {
        chrome: Chrome::signed_in(&session, &headers, "Bind a join", "joins"),
        join: join_row(join),
        searched: !q.is_empty(),
        nodes: nodes.iter().map(node_row).collect(),
        pager: pager(&path, &[("q", q.clone())], info, nodes.len()),
        q,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}
