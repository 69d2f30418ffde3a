//! The Targets page (`/ui/backups/targets`, level 10, BK-04): every target without its
//! credentials, which one new backups go to (and a button to choose another), and the fleet's
//! coverage from `fleet_coverage`: how many nodes back up to each target, how many wait for
//! their first backup there, how many were moved away and still have backups held there, and
//! the nodes that are not backed up with why.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::backups::rpc::{
    FleetCoverage, FleetCoverageRequest, ListTargets, SealKeyView, SetDefaultTarget, TargetView,
    Targets,
};
use capstan_events::NodeId;

use super::ask;
use crate::{
    error::ApiError,
    identity::AuditDetail,
    state::AppState,
    ui::{
        acted,
        format::{ago, clip, Ago},
        guard::PathId,
        refusal_sentence, render, Chrome, UiError, UiSession,
    },
};
use capstan_events::Word as _;

struct Line {
    id: i64,
    name: String,
    provider: String,
    endpoint: String,
    bucket: String,
    folder: String,
    is_default: bool,
    created: Ago,
    nodes: u32,
    waiting: u32,
    draining: u32,
}

struct UncoveredLine {
    node_id: NodeId,
    name: String,
    reason: &'static str,
    words: String,
}

#[derive(Template)]
#[template(path = "backups_targets.html")]
struct TargetsPage {
    chrome: Chrome,
    targets: Vec<Line>,
    has_default: bool,
    coverage: Option<CoverageLine>,
    uncovered: Vec<UncoveredLine>,
    problem: Option<String>,
    seal_key: SealKeyView,
}

struct CoverageLine {
    nodes: u32,
    covered: u32,
    uncovered: u32,
    listed: usize,
    /// More nodes are uncovered than are listed.
    more: bool,
}

fn line(target: &TargetView, coverage: Option<&FleetCoverage>) -> Line {
    let counts = coverage.and_then(|coverage| {
        coverage
            .targets
            .iter()
            .find(|row| row.target_id == target.id)
    });
    Line {
        id: target.id,
        name: clip(&target.name, 100),
        provider: target.provider.as_str().to_string(),
        endpoint: clip(&target.endpoint, 300),
        bucket: clip(&target.bucket, 100),
        folder: clip(&target.folder, 300),
        is_default: target.is_default,
        created: ago(target.created_at),
        nodes: counts.map_or(0, |row| row.nodes),
        waiting: counts.map_or(0, |row| row.waiting),
        draining: counts.map_or(0, |row| row.draining),
    }
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let listed: Targets = ask(
        &state,
        &ListTargets {
            actor: session.actor(),
        },
    )
    .await
    .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let request = FleetCoverageRequest {
        actor: session.actor(),
    };
    let (coverage, problem) = match ask(&state, &request).await {
        Ok(coverage) => (Some(coverage), None),
        Err(refusal) => (None, Some(refusal_sentence(&refusal))),
    };
    let page = TargetsPage {
        chrome: Chrome::signed_in(&session, &headers, "Backup targets", "backup-targets"),
        targets: listed
            .targets
            .iter()
            .map(|target| line(target, coverage.as_ref()))
            .collect(),
        has_default: listed.targets.iter().any(|target| target.is_default),
        coverage: coverage.as_ref().map(|coverage| CoverageLine {
            nodes: coverage.nodes,
            covered: coverage.covered,
            uncovered: coverage.uncovered_count,
            listed: coverage.uncovered.len(),
            more: coverage.uncovered.len() < coverage.uncovered_count as usize,
        }),
        uncovered: coverage
            .iter()
            .flat_map(|coverage| coverage.uncovered.iter())
            .map(|node| UncoveredLine {
                node_id: node.node_id,
                name: clip(&node.name, 100),
                reason: node.reason.as_str(),
                words: clip(&node.words, 300),
            })
            .collect(),
        problem,
        seal_key: listed.seal_key.clone(),
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// "Where new backups go": new nodes are given this target.
pub async fn set_default(
    State(state): State<AppState>,
    session: UiSession,
    PathId(target_id): PathId,
) -> Response {
    let request = SetDefaultTarget {
        actor: session.actor(),
        target_id,
    };
    let answer: Result<TargetView, ApiError> = ask(&state, &request).await;
    let mut response = acted(
        "/ui/backups/targets",
        answer.map(|target| format!("New backups go to {} now.", clip(&target.name, 100))),
    );
    response
        .extensions_mut()
        .insert(AuditDetail(serde_json::json!({"target_id": target_id})));
    response
}
