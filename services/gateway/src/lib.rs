//! The gateway: the plane's only HTTP listener. It terminates agent and operator traffic,
//! renders the operator UI, serves the operator JSON API and `/metrics`, and forwards every
//! domain question to the owning service over NATS rpc. It owns operator identity and no
//! domain rule.
#![forbid(unsafe_code)]

pub mod admin;
pub mod api_doc;
mod ask;
mod connection;
pub mod domain;
pub mod domains;
pub mod error;
mod health;
mod http;
pub mod identity;
mod input;
pub mod openapi;
pub mod password;
pub mod route;
pub mod routes;
pub mod settings;
mod state;
pub mod store;
pub mod tasks;
pub mod ui;

pub use connection::ConnectionLimits;
pub use http::app;
pub use state::{AppState, ClientAddresses, Shared};

use anyhow::Context;
use capstan_events::Domain;
use capstan_runtime::{Part, Service};
use capstan_settings::Settings;
use settings::GatewaySettings;
use sqlx::migrate::Migrator;
use tokio_util::sync::CancellationToken;
use tracing::info;

pub const DOMAIN: Domain = Domain::Gateway;

/// The migrations of the `gateway` schema (operators, API tokens, audit, passwords, sessions).
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/gateway");

/// Runs the gateway until `shutdown`: its rpc, its outbox relay and the HTTP listener.
pub async fn run(
    settings: Settings,
    gateway: GatewaySettings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let metrics = capstan_telemetry::metrics(settings.telemetry.metrics_listen)
        .context("starting gateway: metrics")?;
    let listen = gateway.listen;
    ui::configure(&gateway);
    tokio::task::spawn_blocking(password::warm_up);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("starting gateway: listening on {listen}"))?;
    let state = AppState::from(Shared {
        bus: service.bus.clone(),
        store: service.store.clone(),
        rpc_timeout: settings.bus.rpc_timeout(),
        metrics,
        client_addresses: ClientAddresses::from_settings(&gateway)
            .context("starting gateway: client addresses")?,
    });
    let limits = ConnectionLimits::from_settings(&gateway);
    let serve: Part = Box::new(move |stop: CancellationToken| {
        Box::pin(async move {
            info!(%listen, max_connections = limits.max_connections, "gateway listening");
            serve_with(listener, state, limits, stop).await
        })
    });
    let sweeping: Part = {
        let (store, idle, lifetime) = (
            service.store.clone(),
            gateway.session_idle(),
            gateway.session_lifetime(),
        );
        Box::new(move |stop: CancellationToken| Box::pin(tasks::run(store, idle, lifetime, stop)))
    };
    let rpc = service.rpc();
    service.run(rpc, vec![serve, sweeping], shutdown).await
}

/// Serves the gateway's routes on `listener` until `stop`, finishing requests in hand, with
/// the default [`ConnectionLimits`].
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    serve_with(listener, state, ConnectionLimits::default(), stop).await
}

/// Serves the gateway's routes on `listener` until `stop`, finishing requests in hand.
///
/// HTTP/1.1 only. Each connection is served by [`connection::serve`]: an agent's request there,
/// everything else by hyper directly (not through `axum::serve`, whose version-sniffing first
/// read leaves every connection a 16 KiB read buffer). At most `limits.max_connections` are
/// open at once: one more is closed as it is accepted, and counted in
/// `capstan_gateway_connections_refused_total`.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: AppState,
    limits: ConnectionLimits,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let routes = app(state.clone());
    let connections = tokio_util::task::TaskTracker::new();
    let open = std::sync::Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    loop {
        let (stream, address) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(%error, "gateway: accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            metrics::counter!("capstan_gateway_connections_refused_total").increment(1);
            // Closed at once, unread: nothing of the stranger's is held.
            drop(stream);
            continue;
        };
        let serving = connection::serve(
            stream,
            address,
            state.clone(),
            routes.clone(),
            limits,
            stop.clone(),
        );
        connections.spawn(connection::task(serving, permit));
    }
    drop(listener);
    domains::agent_channel::agent::release(&state).await;
    connections.close();
    connections.wait().await;
    Ok(())
}
