//! The monitor service's pages: the dashboard's Sites card (how many sites are up, down, not
//! yet known or off, and those down the longest, with since when and why), the node page's
//! Uptime card (status, since when, why, the last day's response times as an inline SVG
//! sparkline, the served certificate, and the edge-versus-direct form with its newest runs),
//! and an edge probe run's page (MO-11, MO-12). They ask the monitor the same rpc the JSON API
//! does (`api.rs` here), as the signed-in operator. Every card and page is bounded: the
//! dashboard lists at most [`SITES_DOWN_LISTED`] down sites, the sparkline at most
//! [`sparkline::BUCKETS`] points, whatever the fleet or the history.
//!
//! Stable hooks for browser tests:
//! * dashboard: `[data-test=sites]` with `[data-test=sites-counts]`, `#site-down-<node>` rows
//! * node page: `[data-test=node-uptime]` with `[data-test=uptime-status]`
//!   (`data-status=up|down|unknown|off`), `[data-test=uptime-since]`,
//!   `[data-test=uptime-reason]`, `svg[data-test=sparkline]`; `[data-test=node-certificate]`;
//!   `form#edge-probe` with `button[data-test=edge-probe-run]`, `#edge-probe-<id>` rows
//! * edge probe page: `[data-test=edge-probe-status]` (`data-status=`),
//!   `[data-test=edge-verdict]`, `[data-test=edge-notes]`, `#edge-path-<n>` rows with
//!   `[data-test=stalls]` and `[data-test=rate-limited]`, `a[data-test=edge-refresh]`

pub mod api;
pub mod fleet_security;
pub mod sparkline;

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
    routing::on,
};
use capstan_events::monitor::rpc::{
    EdgeProbeStatus, EdgeProbeView, GetCertificate, GetEdgeProbe, GetUptime, GetUptimeSummary,
    ListEdgeProbes, StartEdgeProbe, UptimeCheck,
};
use capstan_events::monitor::UptimeStatus;
use capstan_events::rpc::Level;
use capstan_events::NodeId;
use capstan_events::Word as _;

use crate::ui::{
    acted,
    format::{ago, clip, Ago},
    guard::{NodePath, PathId},
    refusal_sentence, render, Chrome, UiError, UiSession,
};
use crate::{ask::ask, identity::AuditDetail, route::Route, state::AppState};

/// The down sites the dashboard lists, the longest down first.
pub const SITES_DOWN_LISTED: u32 = 10;
/// The edge probe runs the node page lists.
const PROBES_LISTED: usize = 5;

/// This folder's rows of the route table: reading, and running an edge probe (a look that
/// changes nothing on the node), at 7.
const PAGES: &[Route] = &[
    Route::page("/ui/edge-probes/{id}", Level::Read, |filter| {
        on(filter, probe_page)
    }),
    Route::form(
        "/ui/nodes/{id}/edge-probe",
        Level::Read,
        |filter| on(filter, start_probe),
        "edge_probe",
    ),
];

/// This folder's rows of the route table: its API and its pages.
pub fn routes() -> Vec<Route> {
    [api::ROUTES, fleet_security::ROUTES, PAGES].concat()
}

fn status_word(check: &UptimeCheck) -> &'static str {
    if !check.enabled || check.url.is_none() {
        return "off";
    }
    match check.status {
        UptimeStatus::Up => "up",
        UptimeStatus::Down => "down",
        UptimeStatus::Unknown => "unknown",
    }
}

// ---- the dashboard's Sites card ------------------------------------------------------------

pub struct SiteDown {
    pub node_id: NodeId,
    pub url: String,
    pub since: Option<Ago>,
    pub reason: String,
}

/// The dashboard's Sites card.
pub struct SitesCard {
    pub up: u64,
    pub down: u64,
    pub unknown: u64,
    pub off: u64,
    pub rows: Vec<SiteDown>,
    pub problem: Option<String>,
}

/// The card, asked as the operator; a refusal is the card's problem, never the page's.
pub async fn sites_card(state: &AppState, session: &UiSession) -> SitesCard {
    let request = GetUptimeSummary {
        actor: session.actor(),
        limit: SITES_DOWN_LISTED,
    };
    match ask(state, &request).await {
        Ok(summary) => SitesCard {
            up: summary.up,
            down: summary.down,
            unknown: summary.unknown,
            off: summary.off,
            rows: summary
                .down_checks
                .iter()
                .map(|check| SiteDown {
                    node_id: check.node_id,
                    url: clip(check.url.as_deref().unwrap_or_default(), 200),
                    since: check.down_since.map(ago),
                    reason: clip(check.reason.as_deref().unwrap_or_default(), 200),
                })
                .collect(),
            problem: None,
        },
        Err(refusal) => SitesCard {
            up: 0,
            down: 0,
            unknown: 0,
            off: 0,
            rows: Vec::new(),
            problem: Some(refusal_sentence(&refusal)),
        },
    }
}

// ---- the node page's Uptime card -----------------------------------------------------------

pub struct Certificate {
    pub checked: Option<Ago>,
    pub expires: Option<Ago>,
    pub names: String,
    pub problem: Option<(String, String, String)>,
}

pub struct ProbeRow {
    pub id: i64,
    pub status: &'static str,
    pub verdict: String,
    pub when: Ago,
}

/// The node page's Uptime card.
pub struct UptimeCard {
    pub node_id: NodeId,
    pub status: &'static str,
    pub url: String,
    pub kind: String,
    pub interval_secs: u32,
    pub since: Option<Ago>,
    pub checked: Option<Ago>,
    pub response_ms: Option<u32>,
    pub reason: String,
    pub sparkline: Option<sparkline::Sparkline>,
    pub problem: Option<String>,
    pub certificate: Option<Certificate>,
    pub certificate_problem: Option<String>,
    pub probes: Vec<ProbeRow>,
    pub probes_problem: Option<String>,
}

fn probe_status(status: EdgeProbeStatus) -> &'static str {
    status.as_str()
}

fn probe_row(view: &EdgeProbeView) -> ProbeRow {
    ProbeRow {
        id: view.id,
        status: probe_status(view.status),
        verdict: view
            .verdict
            .map(|verdict| verdict.sentence().to_string())
            .or_else(|| view.error.as_deref().map(|error| clip(error, 200)))
            .unwrap_or_default(),
        when: ago(view.requested_at),
    }
}

/// The card of node `node_id`, asked as the operator; each part's refusal is its own problem.
pub async fn uptime_card(state: &AppState, session: &UiSession, node_id: NodeId) -> UptimeCard {
    let actor = session.actor();
    let uptime_request = GetUptime {
        actor: actor.clone(),
        node_id,
    };
    let certificate_request = GetCertificate {
        actor: actor.clone(),
        node_id,
    };
    let probes_request = ListEdgeProbes { actor, node_id };
    let (uptime, certificate, probes) = tokio::join!(
        ask(state, &uptime_request),
        ask(state, &certificate_request),
        ask(state, &probes_request),
    );
    let mut card = UptimeCard {
        node_id,
        status: "off",
        url: String::new(),
        kind: String::new(),
        interval_secs: 0,
        since: None,
        checked: None,
        response_ms: None,
        reason: String::new(),
        sparkline: None,
        problem: None,
        certificate: None,
        certificate_problem: None,
        probes: Vec::new(),
        probes_problem: None,
    };
    match uptime {
        Ok(detail) => {
            let check = &detail.check;
            card.status = status_word(check);
            card.url = clip(check.url.as_deref().unwrap_or_default(), 300);
            card.kind = check.kind.as_str().to_string();
            card.interval_secs = check.interval_secs;
            card.since = check.down_since.map(ago);
            card.checked = check.checked_at.map(ago);
            card.response_ms = check.response_ms;
            card.reason = clip(check.reason.as_deref().unwrap_or_default(), 300);
            card.sparkline = sparkline::draw(&detail.history, chrono::Utc::now());
        }
        Err(refusal) => card.problem = Some(refusal_sentence(&refusal)),
    }
    match certificate {
        Ok(view) => {
            card.certificate = Some(Certificate {
                checked: view.checked_at.map(ago),
                expires: view.expires_at.map(ago),
                names: clip(&view.names.join(", "), 300),
                problem: view.problem.map(|problem| {
                    (
                        clip(&problem.title, 200),
                        clip(&problem.detail, 500),
                        clip(&problem.fix, 300),
                    )
                }),
            })
        }
        Err(refusal) => card.certificate_problem = Some(refusal_sentence(&refusal)),
    }
    match probes {
        Ok(listed) => {
            card.probes = listed
                .probes
                .iter()
                .take(PROBES_LISTED)
                .map(probe_row)
                .collect()
        }
        Err(refusal) => card.probes_problem = Some(refusal_sentence(&refusal)),
    }
    card
}

// ---- the edge probe form and page ----------------------------------------------------------

/// `POST /ui/nodes/{id}/edge-probe`: starts a run and shows its page.
pub async fn start_probe(
    State(state): State<AppState>,
    session: UiSession,
    NodePath(node_id): NodePath,
) -> Response {
    let request = StartEdgeProbe {
        actor: session.actor(),
        node_id,
    };
    match ask(&state, &request).await {
        Ok(started) => {
            let mut response = acted(
                &format!("/ui/edge-probes/{}", started.id),
                Ok(format!(
                    "Comparing edge and direct: run {} is under way (it ends within 100 s).",
                    started.id
                )),
            );
            response
                .extensions_mut()
                .insert(AuditDetail(serde_json::json!({"probe_id": started.id})));
            response
        }
        Err(refusal) => acted(&format!("/ui/nodes/{node_id}"), Err(refusal)),
    }
}

struct PathRow {
    kind: &'static str,
    target: String,
    requests: u32,
    stalls: u32,
    p50: String,
    p95: String,
    statuses: String,
    errors: u32,
    rate_limited: u32,
    last_error: String,
    certificate: String,
}

fn millis(ms: Option<u32>) -> String {
    ms.map(|ms| format!("{ms} ms"))
        .unwrap_or_else(|| "—".into())
}

#[derive(Template)]
#[template(path = "edge_probe.html")]
struct ProbePage {
    chrome: Chrome,
    id: i64,
    node_id: NodeId,
    status: &'static str,
    finished: bool,
    url: String,
    requested_by: String,
    requested: Ago,
    rounds: u32,
    verdict: String,
    notes: Vec<String>,
    error: String,
    paths: Vec<PathRow>,
}

pub async fn probe_page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    PathId(id): PathId,
) -> Result<Response, UiError> {
    let view: EdgeProbeView = ask(
        &state,
        &GetEdgeProbe {
            actor: session.actor(),
            id,
        },
    )
    .await
    .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let paths = view
        .paths
        .iter()
        .map(|path| PathRow {
            kind: match path.kind {
                capstan_events::monitor::rpc::EdgePathKind::Edge => "edge",
                capstan_events::monitor::rpc::EdgePathKind::Direct => "direct",
            },
            target: clip(&path.target, 200),
            requests: path.requests,
            stalls: path.stalls,
            p50: millis(path.p50_ms),
            p95: millis(path.p95_ms),
            statuses: path
                .statuses
                .iter()
                .map(|(status, count)| format!("{status}×{count}"))
                .collect::<Vec<_>>()
                .join(", "),
            errors: path.errors,
            rate_limited: path.rate_limited,
            last_error: clip(path.last_error.as_deref().unwrap_or_default(), 200),
            certificate: path
                .certificate
                .as_ref()
                .map(|certificate| {
                    clip(
                        &format!(
                            "{}{}",
                            certificate.names.join(", "),
                            if certificate.self_signed {
                                " (self-signed)"
                            } else {
                                ""
                            }
                        ),
                        300,
                    )
                })
                .unwrap_or_default(),
        })
        .collect();
    let page = ProbePage {
        chrome: Chrome::signed_in(&session, &headers, format!("Edge probe {id}"), "nodes"),
        id,
        node_id: view.node_id,
        status: probe_status(view.status),
        finished: matches!(view.status, EdgeProbeStatus::Done | EdgeProbeStatus::Failed),
        url: clip(&view.url, 300),
        requested_by: view.requested_by.clone(),
        requested: ago(view.requested_at),
        rounds: view.rounds,
        verdict: view
            .verdict
            .map(|verdict| verdict.sentence().to_string())
            .unwrap_or_default(),
        notes: view.notes.iter().map(|note| clip(note, 500)).collect(),
        error: clip(view.error.as_deref().unwrap_or_default(), 500),
        paths,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}
