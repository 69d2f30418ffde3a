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
///
/// HTTP/1.1 only, served by hyper directly rather than through `axum::serve`, whose
/// version-sniffing first read (24 bytes, for an HTTP/2 preface) leaves every connection a
/// 16 KiB read buffer; here it is 8 KiB, which at thousands of agents holding a long poll each
/// is tens of megabytes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    use hyper::service::Service as _;
    use hyper_util::{rt::TokioIo, service::TowerToHyperService};
    use std::net::SocketAddr;

    let connect =
        TowerToHyperService::new(app(state).into_make_service_with_connect_info::<SocketAddr>());
    let connections = tokio_util::task::TaskTracker::new();
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
        // The router with this connection's `ConnectInfo`.
        let Ok(service) = connect.call(address).await;
        let stop = stop.clone();
        connections.spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                .with_upgrades();
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = stop.cancelled() => connection.as_mut().graceful_shutdown(),
            }
            // Finishes the request in hand, then closes.
            let _ = connection.await;
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}
