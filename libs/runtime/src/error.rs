//! `ServiceError`: what a service's rpc handler fails with. `?` takes a store or bus failure
//! or a refusal in the rpc's words as it comes; the rpc server answers it in the rpc's words
//! (`IntoRpcError`), logging a store or bus failure once with its cause and answering
//! `unavailable` in words that name the service, never the database's message.

use capstan_bus::{BusError, IntoRpcError};
use capstan_events::rpc::{ErrorCode, InvalidInput, RpcError};
use capstan_events::Domain;
use capstan_store::StoreError;

/// A handler's failure.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Refused in the rpc's own words (a level, a bad input, nothing found): answered as is.
    #[error(transparent)]
    Refused(#[from] RpcError),
    /// The service's database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The bus failed (an event or a question to another service).
    #[error(transparent)]
    Bus(#[from] BusError),
}

impl From<InvalidInput> for ServiceError {
    fn from(invalid: InvalidInput) -> Self {
        ServiceError::Refused(invalid.into())
    }
}

impl IntoRpcError for ServiceError {
    fn into_rpc_error(self, domain: Domain) -> RpcError {
        match self {
            ServiceError::Refused(refused) => refused,
            ServiceError::Store(error) => crate::unavailable(domain, error),
            ServiceError::Bus(error) => {
                tracing::error!(%error, service = %domain, "bus failed");
                RpcError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "the {} service could not reach the bus",
                        domain.service_name()
                    ),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A refusal is answered in its own words; a store or bus failure is `unavailable`, naming
    // the service and not the database's or the bus's message.
    #[test]
    fn refusals_pass_and_failures_are_unavailable_naming_the_service() {
        let refused = RpcError::new(ErrorCode::NotFound, "no node 7");
        assert_eq!(
            ServiceError::from(refused.clone()).into_rpc_error(Domain::Monitor),
            refused
        );
        let invalid = ServiceError::from(InvalidInput::new("limit", "must be at most 100"))
            .into_rpc_error(Domain::Monitor);
        assert_eq!(invalid.code, ErrorCode::InvalidRequest);
        assert!(invalid.message.contains("limit"), "{}", invalid.message);

        let store = ServiceError::from(StoreError::Database("relation x is secret".into()))
            .into_rpc_error(Domain::Monitor);
        assert_eq!(store.code, ErrorCode::Unavailable);
        assert!(store.message.contains("monitor"), "{}", store.message);
        assert!(!store.message.contains("secret"), "{}", store.message);

        let bus = ServiceError::from(BusError::Unavailable("nats down at 10.0.0.1".into()))
            .into_rpc_error(Domain::Backups);
        assert_eq!(bus.code, ErrorCode::Unavailable);
        assert!(bus.message.contains("backups"), "{}", bus.message);
        assert!(!bus.message.contains("10.0.0.1"), "{}", bus.message);
    }
}
