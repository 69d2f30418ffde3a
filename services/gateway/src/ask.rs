//! The one way the gateway asks a domain service a question over rpc, for the JSON API and
//! the UI alike: the operator travels inside `request` as the [`capstan_events::rpc::Actor`],
//! and a refusal comes back as the [`ApiError`] of its code.

use capstan_events::Domain;
use serde::{de::DeserializeOwned, Serialize};

use crate::{error::ApiError, state::AppState};

/// Asks `domain`'s service `op`.
pub async fn ask_of<Req, Resp>(
    state: &AppState,
    domain: Domain,
    op: &str,
    request: &Req,
) -> Result<Resp, ApiError>
where
    Req: Serialize,
    Resp: DeserializeOwned,
{
    Ok(state
        .bus
        .request(domain, op, request, state.rpc_timeout)
        .await?)
}

/// Asks the agent channel `op`.
pub async fn ask<Req, Resp>(state: &AppState, op: &str, request: &Req) -> Result<Resp, ApiError>
where
    Req: Serialize,
    Resp: DeserializeOwned,
{
    ask_of(state, Domain::AgentChannel, op, request).await
}
