//! The rollouts service's use cases: load, decide with `domain/`, write. The rpc handlers check
//! the actor's level, read the input, call a use case here and map its answer.

use capstan_events::rollouts::staged::RolloutView;
use capstan_events::rpc::{ErrorCode, RpcError};
use capstan_events::Word as _;
use capstan_runtime::ServiceError;
use capstan_store::{Store, StoreError};
use chrono::Utc;

use crate::domain::engine::Kind;
use crate::domain::input::StartAsk;
use crate::domain::plan::{self, LeftOut, Unplannable};
use crate::store::staged::{self as store, NewRollout};

/// A use case's answer: a refusal in the rpc's words, or a store failure (answered
/// `unavailable`, logged once).
type Answer<T> = Result<T, ServiceError>;

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
    let by = started_by.to_string();
    let (kind, version) = (ask.kind, ask.version.clone());
    let (id, view) = store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                if let Some(id) = store::one_under_way(transaction).await? {
                    return Err(RpcError::new(
                        ErrorCode::Conflict,
                        format!(
                            "rollout {id} is under way; one rollout runs at a time (stop it or let it end first)"
                        ),
                    )
                    .into());
                }
                // A release the plane never published: every node's apply would fail fetching
                // it, so the start is refused before anything is asked of a node.
                if ask.kind == Kind::Release
                    && crate::store::site_releases::get(transaction, &ask.version)
                        .await?
                        .is_none()
                {
                    return Err(RpcError::new(
                        ErrorCode::Conflict,
                        format!(
                            "site release {} was never published: publish it (capstan release site) before rolling it out",
                            ask.version
                        ),
                    )
                    .into());
                }
                let chosen = ask.chosen();
                let known =
                    store::candidates(transaction, (!ask.all).then_some(chosen.as_slice())).await?;
                let (plan, policies) = plan::for_start(&ask, &known).map_err(unplannable)?;
                let new = NewRollout {
                    kind: ask.kind,
                    version: &ask.version,
                    pages: &ask.pages,
                    policies: &policies,
                    stages: &plan.stages,
                    left_out: &plan.left_out,
                    started_by: &by,
                };
                let id = match store::insert(transaction, &new, now).await {
                    Ok(id) => id,
                    // Two starts raced: the index that keeps one rollout under way refused the
                    // second.
                    Err(StoreError::AlreadyExists(_)) => {
                        return Err(RpcError::new(
                            ErrorCode::Conflict,
                            "another rollout started at the same moment; one rollout runs at a time",
                        )
                        .into())
                    }
                    Err(error) => return Err(error.into()),
                };
                store::advance(transaction, id, now).await?;
                let view = store::view(transaction, id, true)
                    .await?
                    .ok_or_else(|| RpcError::new(ErrorCode::NotFound, format!("no rollout {id}")))?;
                Ok::<_, ServiceError>((id, view))
            })
        })
        .await?;
    tracing::info!(rollout = id, kind = kind.as_str(), version = %version, by = %started_by, "rollout started");
    Ok(view)
}
