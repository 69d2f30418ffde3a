//! The gateway's questions about staged rollouts (`capstan.rpc.rollouts.*_rollout*`). Each
//! checks the actor's level first (reading 7; starting and acting 8; a rollout to every node
//! 10), reads its input into the domain's types (a bad field is `invalid_request` naming it),
//! and changes through the store in one transaction with the events it causes.

use std::collections::HashSet;

use capstan_bus::RpcServer;
use capstan_events::rollouts::staged::{
    ActOnRollout, GetRollout, ListRollouts, RolloutView, Rollouts, StageRequest, StartRollout,
};
use capstan_events::rpc::{ErrorCode, InvalidInput, Level, RpcError};
use capstan_store::{Store, StoreError};
use chrono::Utc;

use crate::domain::engine::{Act, Kind, StagePolicy};
use crate::domain::input;
use crate::domain::plan::{self, Candidate, LeftOut};
use crate::domain::verdict;
use crate::store::staged::{self as store, NewRollout};
use capstan_events::Word as _;

type Answer<T> = Result<T, RpcError>;

/// How many rollouts a list shows.
pub const LIST_LIMIT: i64 = 200;

/// What every handler reaches.
#[derive(Clone)]
pub struct State {
    pub store: Store,
}

/// Adds the staged-rollout questions to `server`.
pub fn routes(server: RpcServer, state: State) -> RpcServer {
    server
        .route_with_state(&state, start)
        .route_with_state(&state, list)
        .route_with_state(&state, get)
        .route_with_state(&state, act)
}

fn unavailable(error: StoreError) -> RpcError {
    capstan_runtime::unavailable(crate::DOMAIN, error)
}

fn no_rollout(id: i64) -> RpcError {
    RpcError::new(ErrorCode::NotFound, format!("no rollout {id}"))
}

fn under_way(id: i64) -> RpcError {
    RpcError::new(
        ErrorCode::Conflict,
        format!(
            "rollout {id} is under way; one rollout runs at a time (stop it or let it end first)"
        ),
    )
}

/// A stage's rules, from the domain's reading of what the operator asked.
fn policy(stage: &StageRequest) -> Result<StagePolicy, InvalidInput> {
    input::stage_policy(stage.max_failed, stage.max_failed_percent, stage.soak_secs)
        .map_err(|reason| InvalidInput::new("stages", reason))
}

/// A release rollout of a version the plane never published: every node's apply would fail
/// fetching it, so the start is refused before anything is asked of a node.
fn never_published(version: &str) -> RpcError {
    RpcError::new(
        ErrorCode::Conflict,
        format!(
            "site release {version} was never published: publish it (capstan release site) before rolling it out"
        ),
    )
}

fn refused(left_out: Vec<LeftOut>) -> RpcError {
    let names: Vec<String> = left_out
        .iter()
        .map(|left| format!("node {} ({})", left.node_id, left.reason))
        .collect();
    RpcError::new(
        ErrorCode::Conflict,
        format!("refused up front: {}", names.join("; ")),
    )
}

pub async fn start(state: State, request: StartRollout) -> Answer<RolloutView> {
    let kind = match request.kind.as_deref() {
        None | Some("") => Kind::Release,
        Some(word) => Kind::parse(word)
            .ok_or_else(|| InvalidInput::new("kind", "must be release or patch"))?,
    };
    if request.all {
        request
            .actor
            .require(Level::Admin, "starting a rollout to every node")?;
    } else {
        request.actor.require(Level::Change, "starting a rollout")?;
    }
    let version = match kind {
        Kind::Release => {
            let version = request.version.clone().unwrap_or_default();
            if !input::version_ok(&version) {
                return Err(InvalidInput::new(
                    "version",
                    "a release rollout names the release's version (digits first, at most 64 of letters, digits, . + -)",
                )
                .into());
            }
            version
        }
        Kind::Patch => {
            if request.version.as_deref().is_some_and(|v| !v.is_empty()) {
                return Err(InvalidInput::new("version", "a patch run applies no release").into());
            }
            String::new()
        }
    };
    let pages = verdict::probe_pages(request.pages.as_deref().unwrap_or(""))
        .map_err(|reason| InvalidInput::new("pages", reason))?;
    if kind == Kind::Patch && !pages.is_empty() {
        return Err(InvalidInput::new("pages", "a patch run checks no pages").into());
    }
    if request.all && !request.stages.is_empty() {
        return Err(InvalidInput::new("stages", "with all, the plane plans the stages").into());
    }
    if !request.all {
        if request.stages.is_empty() || request.stages.iter().any(|stage| stage.nodes.is_empty()) {
            return Err(InvalidInput::new(
                "stages",
                "name at least one stage, each with at least one node (or all: true)",
            )
            .into());
        }
        if request.stages.len() > plan::MAX_STAGES {
            return Err(InvalidInput::new(
                "stages",
                format!("at most {} stages", plan::MAX_STAGES),
            )
            .into());
        }
    }
    let chosen: Vec<i64> = request
        .stages
        .iter()
        .flat_map(|s| s.nodes.clone())
        .collect();
    if chosen.len() > plan::MAX_NODES {
        return Err(InvalidInput::new(
            "stages",
            format!("at most {} nodes in a rollout", plan::MAX_NODES),
        )
        .into());
    }
    let mut seen = HashSet::new();
    if let Some(twice) = chosen.iter().find(|node| !seen.insert(**node)) {
        return Err(InvalidInput::new("stages", format!("node {twice} is named twice")).into());
    }
    let mut policies: Vec<StagePolicy> = request
        .stages
        .iter()
        .map(policy)
        .collect::<Result<_, _>>()?;

    let now = Utc::now();
    let mut transaction = state.store.begin().await.map_err(unavailable)?;
    if let Some(id) = store::one_under_way(&mut transaction)
        .await
        .map_err(unavailable)?
    {
        return Err(under_way(id));
    }
    if kind == Kind::Release
        && crate::store::site_releases::get(&mut transaction, &version)
            .await
            .map_err(unavailable)?
            .is_none()
    {
        return Err(never_published(&version));
    }
    let plan = if request.all {
        let everyone = store::candidates(&mut transaction, None)
            .await
            .map_err(unavailable)?;
        let plan = match kind {
            Kind::Release => plan::deploy_all(&everyone),
            Kind::Patch => plan::patch_run(&everyone),
        };
        policies = vec![StagePolicy::default(); plan.stages.len()];
        plan
    } else {
        let known = store::candidates(&mut transaction, Some(&chosen))
            .await
            .map_err(unavailable)?;
        let find = |node: i64| -> Answer<Candidate> {
            known
                .iter()
                .find(|candidate| candidate.node_id == node)
                .cloned()
                .ok_or_else(|| RpcError::new(ErrorCode::NotFound, format!("no node {node}")))
        };
        let stages: Vec<Vec<Candidate>> = request
            .stages
            .iter()
            .map(|stage| stage.nodes.iter().map(|node| find(*node)).collect())
            .collect::<Answer<_>>()?;
        match kind {
            Kind::Release => plan::chosen(stages, !pages.is_empty()).map_err(refused)?,
            Kind::Patch => {
                let plan = plan::patch_run(&stages.concat());
                if !plan.left_out.is_empty() {
                    return Err(refused(plan.left_out));
                }
                policies = vec![StagePolicy::default(); plan.stages.len()];
                plan
            }
        }
    };
    if plan.stages.is_empty() {
        return Err(RpcError::new(
            ErrorCode::Conflict,
            "no node can take this rollout".to_string()
                + &if plan.left_out.is_empty() {
                    String::new()
                } else {
                    format!(": {}", refused(plan.left_out).message)
                },
        ));
    }
    let new = NewRollout {
        kind,
        version: &version,
        pages: &pages,
        policies: &policies,
        stages: &plan.stages,
        left_out: &plan.left_out,
        started_by: &request.actor.name,
    };
    let id = match store::insert(&mut transaction, &new, now).await {
        Ok(id) => id,
        // Two starts raced: the index that keeps one rollout under way refused the second.
        Err(StoreError::AlreadyExists(_)) => {
            return Err(RpcError::new(
                ErrorCode::Conflict,
                "another rollout started at the same moment; one rollout runs at a time",
            ))
        }
        Err(error) => return Err(unavailable(error)),
    };
    store::advance(&mut transaction, id, now)
        .await
        .map_err(unavailable)?;
    let view = store::view(&mut transaction, id, true)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| no_rollout(id))?;
    transaction
        .commit()
        .await
        .map_err(|error| unavailable(error.into()))?;
    tracing::info!(rollout = id, kind = kind.as_str(), %version, by = %request.actor.name, "rollout started");
    Ok(view)
}

pub async fn list(state: State, request: ListRollouts) -> Answer<Rollouts> {
    request.actor.require(Level::Read, "reading rollouts")?;
    let mut connection = state
        .store
        .pool()
        .acquire()
        .await
        .map_err(|error| unavailable(error.into()))?;
    Ok(Rollouts {
        rollouts: store::list(&mut connection, LIST_LIMIT)
            .await
            .map_err(unavailable)?,
    })
}

pub async fn get(state: State, request: GetRollout) -> Answer<RolloutView> {
    request.actor.require(Level::Read, "reading a rollout")?;
    let mut connection = state
        .store
        .pool()
        .acquire()
        .await
        .map_err(|error| unavailable(error.into()))?;
    store::view(&mut connection, request.rollout_id, true)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| no_rollout(request.rollout_id))
}

pub async fn act(state: State, request: ActOnRollout) -> Answer<RolloutView> {
    let act = Act::parse(&request.act)
        .ok_or_else(|| InvalidInput::new("act", "must be stop, pause, resume or retry"))?;
    request
        .actor
        .require(Level::Change, &format!("{} a rollout", act.as_str()))?;
    let now = Utc::now();
    let mut transaction = state.store.begin().await.map_err(unavailable)?;
    if act == Act::Retry || act == Act::Resume {
        if let Some(id) = store::one_under_way(&mut transaction)
            .await
            .map_err(unavailable)?
        {
            if id != request.rollout_id {
                return Err(under_way(id));
            }
        }
    }
    match store::act(&mut transaction, request.rollout_id, act, now)
        .await
        .map_err(unavailable)?
    {
        Ok(()) => {}
        Err(None) => return Err(no_rollout(request.rollout_id)),
        Err(Some(reason)) => return Err(RpcError::new(ErrorCode::Conflict, reason)),
    }
    let view = store::view(&mut transaction, request.rollout_id, true)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| no_rollout(request.rollout_id))?;
    transaction
        .commit()
        .await
        .map_err(|error| unavailable(error.into()))?;
    tracing::info!(rollout = request.rollout_id, act = act.as_str(), by = %request.actor.name, "rollout acted on");
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::engine::Budget;

    #[test]
    fn a_bad_stage_is_invalid_input_naming_stages() {
        let stage = |max_failed, max_failed_percent, soak_secs| StageRequest {
            nodes: vec![1],
            max_failed,
            max_failed_percent,
            soak_secs,
        };
        assert_eq!(
            policy(&stage(Some(2), None, None)).unwrap().budget,
            Budget::Nodes(2)
        );
        let error = RpcError::from(policy(&stage(Some(1), Some(10), None)).unwrap_err());
        assert_eq!(error.code, ErrorCode::InvalidRequest);
        assert!(error.message.contains("stages"), "{}", error.message);
        assert!(error.message.contains("not both"), "{}", error.message);
    }
}
