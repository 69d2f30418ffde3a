//! The Releases page (issue 15): every release of the agent with its version, sequence and
//! expiry and whether it is the one on offer; the fleet's spread across versions, who runs a
//! version on trial, and who refused what and why. Releases are rollouts'; the versions nodes
//! run and their update verdicts are the agent channel's. Reading needs level 7, as the API's
//! `GET /api/v1/releases` and `GET /api/v1/fleet/versions`; publishing is `capstan release`'s.
//!
//! Stable hooks for browser tests: `#release-<version>` rows with `[data-test=sequence]`,
//! `[data-test=expiry]`, `[data-test=on-offer]`, `[data-test=statement]`; `#version-<n>` rows
//! (the n-th version, most nodes first) with `[data-test=version]`, `[data-test=count]`,
//! `[data-test=on-trial]` (links to the nodes); `#refusal-<node id>` rows with
//! `[data-test=refused-state]`, `[data-test=refused-offered]` and `[data-test=refused-reason]`.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::NodeId;
use capstan_events::{
    agent_channel::rpc::{FleetVersions, FleetVersionsRequest},
    rollouts::rpc::{ListReleases, ReleaseView, Releases},
};
use chrono::{DateTime, Utc};

use crate::{
    ask::ask,
    state::AppState,
    ui::{
        format::{ago, clip, Ago},
        render, Chrome, UiError, UiSession,
    },
};

pub struct ReleaseRow {
    pub version: String,
    pub sequence: i64,
    pub expires: Ago,
    pub expired: bool,
    pub on_offer: bool,
    pub arches: String,
    pub has_support_bundle: bool,
    pub has_statement: bool,
    pub published: Ago,
    pub published_by: String,
}

fn release_row(view: &ReleaseView, now: DateTime<Utc>) -> ReleaseRow {
    ReleaseRow {
        version: view.version.clone(),
        sequence: view.sequence,
        expires: ago(view.expires_at),
        expired: view.expires_at <= now,
        on_offer: view.on_offer,
        arches: view.arches.join(", "),
        has_support_bundle: view.has_support_bundle,
        has_statement: view.has_statement,
        published: ago(view.published_at),
        published_by: view.published_by.clone(),
    }
}

pub struct NodeLink {
    pub id: NodeId,
    pub name: String,
}

pub struct VersionRow {
    pub version: String,
    pub count: i64,
    pub on_trial: Vec<NodeLink>,
}

pub struct RefusalRow {
    pub node_id: NodeId,
    pub name: String,
    pub running: String,
    pub state: String,
    pub offered: String,
    pub reason: String,
}

/// The fleet's versions, most nodes first, and every refusal with what it refused and why.
fn spread(fleet: &FleetVersions) -> (Vec<VersionRow>, Vec<RefusalRow>) {
    let versions = fleet
        .versions
        .iter()
        .map(|count| VersionRow {
            version: count
                .version
                .as_deref()
                .map(|version| clip(version, 64))
                .unwrap_or_else(|| "not reported".into()),
            count: count.nodes,
            on_trial: count
                .on_trial
                .iter()
                .map(|node| NodeLink {
                    id: node.node_id,
                    name: clip(&node.name, 100),
                })
                .collect(),
        })
        .collect();
    let refusals = fleet
        .versions
        .iter()
        .flat_map(|count| {
            count.refusals.iter().map(move |refusal| RefusalRow {
                node_id: refusal.node_id,
                name: clip(&refusal.name, 100),
                running: count
                    .version
                    .as_deref()
                    .map(|version| clip(version, 64))
                    .unwrap_or_else(|| "not reported".into()),
                state: refusal.update_state.clone(),
                offered: refusal
                    .update_offered
                    .as_deref()
                    .map(|version| clip(version, 64))
                    .unwrap_or_else(|| "—".into()),
                reason: refusal
                    .update_reason
                    .as_deref()
                    .map(|reason| clip(reason, 1024))
                    .unwrap_or_else(|| "no reason given".into()),
            })
        })
        .collect();
    (versions, refusals)
}

#[derive(Template)]
#[template(path = "releases.html")]
struct ReleasesPage {
    chrome: Chrome,
    releases: Vec<ReleaseRow>,
    versions: Vec<VersionRow>,
    refusals: Vec<RefusalRow>,
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let refused = |refusal| UiError::from_refusal(&refusal, &session);
    let releases: Releases = ask(
        &state,
        &ListReleases {
            actor: session.actor(),
        },
    )
    .await
    .map_err(refused)?;
    let fleet: FleetVersions = ask(
        &state,
        &FleetVersionsRequest {
            actor: session.actor(),
        },
    )
    .await
    .map_err(refused)?;
    let now = Utc::now();
    let (versions, refusals) = spread(&fleet);
    let page = ReleasesPage {
        chrome: Chrome::signed_in(&session, &headers, "Releases", "releases"),
        releases: releases
            .releases
            .iter()
            .map(|view| release_row(view, now))
            .collect(),
        versions,
        refusals,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::agent_channel::rpc::{NodeName, VersionCount, VersionRefusal};

    #[test]
    fn the_spread_names_who_is_on_trial_and_each_refusal_with_the_version_it_runs() {
        let fleet = FleetVersions {
            versions: vec![
                VersionCount {
                    version: Some("1.2.0".into()),
                    nodes: 2,
                    on_trial: vec![],
                    refusals: vec![VersionRefusal {
                        node_id: NodeId(3),
                        name: "web-3".into(),
                        update_state: "verify_failed".into(),
                        update_offered: Some("1.3.0".into()),
                        update_reason: None,
                    }],
                },
                VersionCount {
                    version: None,
                    nodes: 1,
                    on_trial: vec![NodeName {
                        node_id: NodeId(9),
                        name: "x".repeat(300),
                    }],
                    refusals: vec![],
                },
            ],
            nodes: vec![],
        };
        let (versions, refusals) = spread(&fleet);
        assert_eq!(versions[0].version, "1.2.0");
        assert_eq!(versions[1].version, "not reported");
        assert!(versions[1].on_trial[0].name.chars().count() <= 101);
        assert_eq!(refusals.len(), 1);
        assert_eq!(refusals[0].running, "1.2.0");
        assert_eq!(refusals[0].offered, "1.3.0");
        assert_eq!(refusals[0].reason, "no reason given");
    }
}
