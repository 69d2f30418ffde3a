//! The gateway's state, below every handler: what each request can reach ([`AppState`]: the
//! bus, the store, the settings it needs, this process's long polls) and the client address
//! the edge worked out for it. Handlers import this module; the router (`http.rs`) imports the
//! route table (`routes.rs`), which imports the handlers; nothing here imports any of them.

use axum::http::HeaderName;
use capstan_bus::Bus;
use capstan_settings::GatewaySettings;
use capstan_store::Store;
use capstan_telemetry::MetricsHandle;
use ipnet::IpNet;
use std::{net::IpAddr, sync::Arc, time::Duration};

/// What every handler can reach: one pointer to the gateway's [`Shared`] parts. A request holds
/// it in several places at once (the edge, the handler, the rpc it waits on), for as long as a
/// long poll waits, so a copy is a pointer rather than the 800 bytes of the parts.
#[derive(Clone)]
pub struct AppState(Arc<(Shared, LongPolls)>);

impl From<Shared> for AppState {
    fn from(shared: Shared) -> AppState {
        AppState(Arc::new((shared, LongPolls::default())))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0 .0
    }
}

impl AppState {
    /// This gateway process's long polls, released together when it stops.
    pub(crate) fn long_polls(&self) -> &LongPolls {
        &self.0 .1
    }
}

/// This gateway process as the agent channel knows it: every agent request it forwards names
/// `gateway`, and when it stops (`stopping`) its open long polls are answered at once and the
/// claims the agent channel holds for them are released ([`crate::domains::agent_channel::agent::release`]).
pub struct LongPolls {
    pub gateway: uuid::Uuid,
    pub stopping: tokio_util::sync::CancellationToken,
}

impl Default for LongPolls {
    fn default() -> LongPolls {
        LongPolls {
            gateway: uuid::Uuid::now_v7(),
            stopping: tokio_util::sync::CancellationToken::new(),
        }
    }
}

/// The gateway's bus, store and settings, shared by every request through [`AppState`].
pub struct Shared {
    pub bus: Bus,
    /// The `gateway` schema: operators, tokens, audit.
    pub store: Store,
    pub rpc_timeout: Duration,
    pub metrics: MetricsHandle,
    /// Whose word the gateway takes for a request's client address.
    pub client_addresses: ClientAddresses,
}

/// The proxies whose client address header is believed, and that header (GW-07;
/// `gateway.trusted_proxies`, `gateway.client_address_header`). The default trusts nobody: the
/// TCP peer is every request's address.
#[derive(Debug, Clone)]
pub struct ClientAddresses {
    pub trusted: Arc<[IpNet]>,
    pub header: HeaderName,
}

impl Default for ClientAddresses {
    fn default() -> ClientAddresses {
        ClientAddresses {
            trusted: Arc::from(Vec::new()),
            header: HeaderName::from_static("x-forwarded-for"),
        }
    }
}

impl ClientAddresses {
    pub fn from_settings(gateway: &GatewaySettings) -> Result<ClientAddresses, String> {
        let header = HeaderName::try_from(gateway.client_address_header.to_ascii_lowercase())
            .map_err(|error| format!("gateway.client_address_header: {error}"))?;
        let trusted = gateway
            .trusted_networks()
            .map_err(|reason| format!("gateway.trusted_proxies: {reason}"))?;
        Ok(ClientAddresses {
            trusted: Arc::from(trusted),
            header,
        })
    }
}

/// The client address of a request, as the edge ([`crate::http`]) worked it out.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub IpAddr);
