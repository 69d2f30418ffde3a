//! The one way the gateway asks a domain service a question over rpc, for the JSON API and
//! the UI alike: the request's type names the service, the op and the answer
//! ([`capstan_events::rpc::Rpc`]); the operator travels inside `request` as the
//! [`capstan_events::rpc::Actor`], and a refusal comes back as the [`ApiError`] of its code.

use capstan_events::rpc::JsonRpc;

use crate::{error::ApiError, state::AppState};

impl AppState {
    /// Asks the question `request` declares and returns its declared answer.
    pub async fn ask<R: JsonRpc>(&self, request: &R) -> Result<R::Reply, ApiError> {
        Ok(self.bus.ask(request, self.rpc_timeout).await?)
    }
}

/// Asks the question `request` declares ([`AppState::ask`]).
pub async fn ask<R: JsonRpc>(state: &AppState, request: &R) -> Result<R::Reply, ApiError> {
    state.ask(request).await
}
