//! The gateway's questions about staged rollouts (`capstan.rpc.rollouts.*_rollout*`). Each
//! checks the actor's level first (reading 7; starting and acting 8; a rollout to every node
//! 10), reads its input into the domain's types (a bad field is `invalid_request` naming it),
//! and changes through the store in one transaction with the events it causes.

use capstan_bus::RpcServer;
use capstan_events::rollouts::staged::{
    ActOnRollout, GetRollout, ListRollouts, RolloutView, Rollouts, StartRollout,
};
use capstan_events::rpc::{ErrorCode, InvalidInput, Level, RpcError};
use capstan_store::{Store, StoreError};
use chrono::Utc;

use crate::app;
use crate::domain::engine::Act;
use crate::domain::input;
use crate::store::staged as store;

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
