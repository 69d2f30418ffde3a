//! The questions asked of the provisioning service (`capstan.rpc.provisioning.*`), each from
//! the gateway with the operator's actor, one file per thing asked about: our cloud accounts and
//! their offers (`accounts.rs`), provisions and the verdicts over their joins (`provisions.rs`),
//! the machines inventory and adoption (`machines.rs`), the Docker hosts' placement records
//! (`hosts.rs`).

mod accounts;
pub mod hosts;
pub mod machines;
mod provisions;

pub use accounts::*;
pub use hosts::{add_host, delete_host, list_hosts};
pub use machines::{adopt_machine, list_machines, write_machine};
pub use provisions::*;

use std::sync::Arc;

use tokio::sync::Notify;

use crate::settings::ProvisioningSettings;

use capstan_bus::RpcServer;
use capstan_events::rpc::{ErrorCode, RpcError};
use capstan_runtime::ServiceError;
use capstan_store::Store;

use crate::drivers::seal::{SealError, Sealer};
use crate::drivers::{ProviderError, Providers};

/// A handler's answer: store and bus failures go up with `?` (answered `unavailable`).
pub type Answer<T> = Result<T, ServiceError>;

/// What every handler reaches.
#[derive(Clone, Debug)]
pub struct State {
    pub store: Store,
    pub sealer: Sealer,
    pub providers: Providers,
    pub settings: Arc<ProvisioningSettings>,
    /// Wakes the workflow (a provision asked for or retried).
    pub wake: Arc<Notify>,
}

/// Adds the provisioning service's questions to `server`.
pub fn routes(server: RpcServer, state: State) -> RpcServer {
    server
        .route_with_state(&state, list_accounts)
        .route_with_state(&state, add_account)
        .route_with_state(&state, delete_account)
        .route_with_state(&state, account_offer)
        .route_with_state(&state, list_provisions)
        .route_with_state(&state, request_provision)
        .route_with_state(&state, get_provision)
        .route_with_state(&state, retry_provision)
        .route_with_state(&state, join_verdicts)
        .route_with_state(&state, list_machines)
        .route_with_state(&state, write_machine)
        .route_with_state(&state, adopt_machine)
        .route_with_state(&state, list_hosts)
        .route_with_state(&state, add_host)
        .route_with_state(&state, delete_host)
}

pub(crate) fn sealing(error: SealError) -> RpcError {
    RpcError::new(ErrorCode::Unavailable, error.to_string())
}

/// A provider's failure in an answer's words: the token refused is the operator's to fix; a
/// provider that did not answer is unavailable.
pub(crate) fn provider_failed(error: ProviderError) -> RpcError {
    let code = match error {
        ProviderError::Refused { .. }
        | ProviderError::Rejected { .. }
        | ProviderError::Unusable(_) => ErrorCode::Refused,
        ProviderError::NotFound(_) => ErrorCode::NotFound,
        ProviderError::RateLimited { .. } => ErrorCode::RateLimited,
        ProviderError::Timeout(_)
        | ProviderError::Unreachable(_)
        | ProviderError::Server { .. }
        | ProviderError::BadAnswer(_) => ErrorCode::Unavailable,
    };
    RpcError::new(code, error.to_string())
}
