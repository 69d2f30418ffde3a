//! The one way the gateway asks the agent channel a question over rpc, for the JSON API and
//! the UI alike: the operator travels inside `request` as the [`capstan_events::rpc::Actor`].

use capstan_events::Domain;
use serde::{de::DeserializeOwned, Serialize};

use crate::{error::ApiError, AppState};

/// Asks the agent channel `op`; its refusal comes back as the [`ApiError`] of its code.
pub async fn ask<Req, Resp>(state: &AppState, op: &str, request: &Req) -> Result<Resp, ApiError>
where
    Req: Serialize,
    Resp: DeserializeOwned,
{
    Ok(state
        .bus
        .request(Domain::AgentChannel, op, request, state.rpc_timeout)
        .await?)
}
