//! The rollouts service's use cases: load, decide with `domain/`, write. The rpc handlers check
//! the actor's level, read the input, call a use case here and map its answer.

use capstan_events::rollouts::staged::RolloutView;
use capstan_events::rpc::{ErrorCode, RpcError};
use capstan_events::Word as _;
use capstan_store::{Store, StoreError};
use chrono::Utc;

use crate::domain::engine::Kind;
use crate::domain::input::StartAsk;
use crate::domain::plan::{self, LeftOut, Unplannable};
use crate::store::staged::{self as store, NewRollout};

type Answer<T> = Result<T, RpcError>;

fn unavailable(error: StoreError) -> RpcError {
    capstan_runtime::unavailable(crate::DOMAIN, error)
}

fn refused(left_out: &[LeftOut]) -> String {
    let names: Vec<String> = left_out
        .iter()
        .map(|left| format!("node {} ({})", left.node_id, left.reason))
        .collect();
    format!("refused up front: {}", names.join("; "))
}

/// Why a start was not planned, as the operator reads it.
fn unplannable(why: Unplannable) -> RpcError {
    match why {
        Unplannable::NoNode(node) => RpcError::new(ErrorCode::NotFound, format!("no node {node}")),
        Unplannable::Refused(left_out) => RpcError::new(ErrorCode::Conflict, refused(&left_out)),
        Unplannable::NoneCan(left_out) => RpcError::new(
            ErrorCode::Conflict,
            "no node can take this rollout".to_string()
                + &if left_out.is_empty() {
                    String::new()
                } else {
                    format!(": {}", refused(&left_out))
                },
        ),
    }
}

/// Starts a rollout (RO-12, RO-16, RO-18, RO-24, RO-25): under a lock on the one turn a plane
/// has, reads the nodes it names, plans it, stores it and takes its first step, in one
/// transaction.
pub async fn start_rollout(store: &Store, ask: StartAsk, started_by: &str) -> Answer<RolloutView> {
    let now = Utc::now();
    let mut transaction = store.begin().await.map_err(unavailable)?;
    if let Some(id) = store::one_under_way(&mut transaction)
        .await
        .map_err(unavailable)?
    {
        return Err(RpcError::new(
            ErrorCode::Conflict,
            format!(
                "rollout {id} is under way; one rollout runs at a time (stop it or let it end first)"
            ),
        ));
    }
    // A release the plane never published: every node's apply would fail fetching it, so
    // the start is refused before anything is asked of a node.
    if ask.kind == Kind::Release
        && crate::store::site_releases::get(&mut transaction, &ask.version)
            .await
            .map_err(unavailable)?
            .is_none()
    {
        return Err(RpcError::new(
            ErrorCode::Conflict,
            format!(
                "site release {} was never published: publish it (capstan release site) before rolling it out",
                ask.version
            ),
        ));
    }
    let chosen = ask.chosen();
    let known = store::candidates(&mut transaction, (!ask.all).then_some(chosen.as_slice()))
        .await
        .map_err(unavailable)?;
    let (plan, policies) = plan::for_start(&ask, &known).map_err(unplannable)?;
    let new = NewRollout {
        kind: ask.kind,
        version: &ask.version,
        pages: &ask.pages,
        policies: &policies,
        stages: &plan.stages,
        left_out: &plan.left_out,
        started_by,
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
        .ok_or_else(|| RpcError::new(ErrorCode::NotFound, format!("no rollout {id}")))?;
    transaction
        .commit()
        .await
        .map_err(|error| unavailable(error.into()))?;
    tracing::info!(rollout = id, kind = ask.kind.as_str(), version = %ask.version, by = %started_by, "rollout started");
    Ok(view)
}
