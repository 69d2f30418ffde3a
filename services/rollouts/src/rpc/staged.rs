//! The gateway's questions about staged rollouts (`capstan.rpc.rollouts.*_rollout*`). Each
//! checks the actor's level first (reading 7; starting and acting 8; a rollout to every node
//! 10), reads its input into the domain's types (a bad field is `invalid_request` naming it),
//! and changes through the store in one transaction with the events it causes.

use capstan_bus::RpcServer;
use capstan_events::rollouts::staged::{
    ActOnRollout, GetRollout, ListRollouts, RolloutView, Rollouts, StartRollout,
};
use capstan_events::rpc::{ErrorCode, InvalidInput, Level, RpcError};
use capstan_runtime::ServiceError;
use capstan_store::Store;
use chrono::Utc;

use crate::app;
use crate::domain::engine::Act;
use crate::domain::input;
use crate::store::staged as store;

/// A handler's answer: store failures go up with `?` (answered `unavailable`, logged once).
type Answer<T> = Result<T, ServiceError>;

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

pub async fn start(state: State, request: StartRollout) -> Answer<RolloutView> {
    if request.all {
        request
            .actor
            .require(Level::Admin, "starting a rollout to every node")?;
    } else {
        request.actor.require(Level::Change, "starting a rollout")?;
    }
    let ask = input::start_ask(&request)?;
    app::start_rollout(&state.store, ask, &request.actor.name).await
}

pub async fn list(state: State, request: ListRollouts) -> Answer<Rollouts> {
    request.actor.require(Level::Read, "reading rollouts")?;
    let mut connection = state.store.acquire().await?;
    Ok(Rollouts {
        rollouts: store::list(&mut connection, LIST_LIMIT).await?,
    })
}

pub async fn get(state: State, request: GetRollout) -> Answer<RolloutView> {
    request.actor.require(Level::Read, "reading a rollout")?;
    let mut connection = state.store.acquire().await?;
    Ok(store::view(&mut connection, request.rollout_id, true)
        .await?
        .ok_or_else(|| no_rollout(request.rollout_id))?)
}

pub async fn act(state: State, request: ActOnRollout) -> Answer<RolloutView> {
    let act = Act::parse(&request.act)
        .ok_or_else(|| InvalidInput::new("act", "must be stop, pause, resume or retry"))?;
    request
        .actor
        .require(Level::Change, &format!("{} a rollout", act.as_str()))?;
    let now = Utc::now();
    let rollout = request.rollout_id;
    let view = state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                if act == Act::Retry || act == Act::Resume {
                    if let Some(id) = store::one_under_way(transaction).await? {
                        if id != rollout {
                            return Err(under_way(id).into());
                        }
                    }
                }
                match store::act(transaction, rollout, act, now).await? {
                    Ok(()) => {}
                    Err(None) => return Err(no_rollout(rollout).into()),
                    Err(Some(reason)) => {
                        return Err(RpcError::new(ErrorCode::Conflict, reason).into())
                    }
                }
                let view = store::view(transaction, rollout, true)
                    .await?
                    .ok_or_else(|| no_rollout(rollout))?;
                Ok::<_, ServiceError>(view)
            })
        })
        .await?;
    tracing::info!(rollout, act = act.as_str(), by = %request.actor.name, "rollout acted on");
    Ok(view)
}
