//! The gateway: the plane's only HTTP listener. It terminates agent and operator traffic,
//! renders the operator UI, serves the operator JSON API and `/metrics`, and forwards every
//! domain question to the owning service over NATS rpc. It owns operator identity and no
//! domain rule.
#![forbid(unsafe_code)]

pub mod admin;
mod agent;
mod ask;
pub mod domain;
pub mod error;
mod health;
mod http;
pub mod identity;
mod input;
pub mod openapi;
pub mod operator;
pub mod password;
pub mod routes;
pub mod store;
pub mod tasks;
pub mod ui;

pub use http::{app, AppState, ClientAddresses};

use anyhow::Context;
use capstan_events::Domain;
use capstan_runtime::{Part, Service};
use capstan_settings::Settings;
use sqlx::migrate::Migrator;
use tokio_util::sync::CancellationToken;
use tracing::info;

pub const DOMAIN: Domain = Domain::Gateway;

/// The migrations of the `gateway` schema (operators, API tokens, audit, passwords, sessions).
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/gateway");

/// Runs the gateway until `shutdown`: its rpc, its outbox relay and the HTTP listener.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let metrics = capstan_telemetry::metrics(settings.telemetry.metrics_listen)
        .context("starting gateway: metrics")?;
    let listen = settings.gateway.listen;
    ui::configure(&settings.gateway);
    tokio::task::spawn_blocking(password::warm_up);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("starting gateway: listening on {listen}"))?;
    let state = AppState {
        bus: service.bus.clone(),
        store: service.store.clone(),
        rpc_timeout: settings.bus.rpc_timeout(),
        metrics,
        client_addresses: ClientAddresses::from_settings(&settings.gateway)
            .map_err(anyhow::Error::msg)
            .context("starting gateway: client addresses")?,
    };
    let serve: Part = Box::new(move |stop: CancellationToken| {
        Box::pin(async move {
            info!(%listen, "gateway listening");
            serve(listener, state, stop).await
        })
    });
    let sweeping: Part = {
        let (store, idle, lifetime) = (
            service.store.clone(),
            settings.gateway.session_idle(),
            settings.gateway.session_lifetime(),
        );
        Box::new(move |stop: CancellationToken| Box::pin(tasks::run(store, idle, lifetime, stop)))
    };
    let rpc = service.rpc();
    service.run(rpc, vec![serve, sweeping], shutdown).await
}

/// Serves the gateway's routes on `listener` until `stop`, finishing requests in hand.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    axum::serve(
        listener,
        app(state).into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(async move { stop.cancelled().await })
    .await
    .context("gateway: serving HTTP")
}
