//! The shared composition root of every Capstan binary: settings (exit 64 when bad),
//! telemetry, a runtime, signals, then the binary's own `run`.

use capstan_settings::{LogFormat, Sections, Settings, EXIT_BAD_CONFIG};
use capstan_telemetry::TelemetryConfig;
use std::{future::Future, process::ExitCode};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

/// Loads settings, sets up telemetry, and runs `run` on a multi-threaded runtime until it
/// returns; SIGTERM and SIGINT cancel the token it is given. Exit codes: 0 after a clean
/// stop, 64 for bad configuration, 1 for a failure (logged with its chain of causes).
pub fn main<F, Fut>(service_name: &str, run: F) -> ExitCode
where
    F: FnOnce(Settings, CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    entry(service_name, Kind::Service, |settings, (), shutdown| {
        run(settings, shutdown)
    })
}

/// As [`main`], for a service with settings of its own: the shared sections and `S` (its
/// section, or several) are loaded together, every problem of either named before exit 64.
pub fn main_with<S, F, Fut>(service_name: &str, run: F) -> ExitCode
where
    S: Sections,
    F: FnOnce(Settings, S, CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    entry(service_name, Kind::Service, run)
}

/// As [`main`], for a one-shot command (`capstan migrate`, `capstan health`): logs go to
/// standard error, leaving standard output to the answer, and no metrics listener is opened
/// (a probe runs beside the service that already holds that port).
pub fn command<F, Fut>(name: &str, run: F) -> ExitCode
where
    F: FnOnce(Settings, CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    entry(name, Kind::Command, |settings, (), shutdown| {
        run(settings, shutdown)
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Service,
    Command,
}

fn entry<S, F, Fut>(service_name: &str, kind: Kind, run: F) -> ExitCode
where
    S: Sections,
    F: FnOnce(Settings, S, CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let (settings, own) = match capstan_settings::load::<S>() {
        Ok(loaded) => loaded,
        Err(error) => {
            eprintln!("{service_name}: {error}");
            return ExitCode::from(EXIT_BAD_CONFIG as u8);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{service_name}: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let telemetry = capstan_telemetry::init(&TelemetryConfig {
            service_name: service_name.to_string(),
            log_format: match settings.telemetry.log_format {
                LogFormat::Json => capstan_telemetry::LogFormat::Json,
                LogFormat::Pretty => capstan_telemetry::LogFormat::Pretty,
            },
            log_level: settings.telemetry.log_level.clone(),
            otlp_endpoint: settings.telemetry.otlp_endpoint.clone(),
            logs_to_stderr: kind == Kind::Command,
        });
        let _telemetry = match telemetry {
            Ok(guard) => guard,
            Err(error) => {
                eprintln!("{service_name}: {error}");
                return ExitCode::from(EXIT_BAD_CONFIG as u8);
            }
        };
        let metrics_listen = match kind {
            Kind::Service => settings.telemetry.metrics_listen,
            Kind::Command => None,
        };
        if let Err(error) = capstan_telemetry::metrics(metrics_listen) {
            eprintln!("{service_name}: {error}");
            return ExitCode::from(EXIT_BAD_CONFIG as u8);
        }
        let shutdown = shutdown_on_signals();
        info!(
            service = service_name,
            version = env!("CARGO_PKG_VERSION"),
            "starting"
        );
        match run(settings, own, shutdown).await {
            Ok(()) => {
                info!(service = service_name, "stopped cleanly");
                ExitCode::SUCCESS
            }
            Err(error) => {
                error!(
                    service = service_name,
                    error = format!("{error:#}"),
                    "stopped on failure"
                );
                ExitCode::FAILURE
            }
        }
    })
}

/// A token cancelled by the first SIGTERM or SIGINT.
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut terminate), Ok(mut interrupt)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            error!("cannot listen for signals; stop the process with SIGKILL");
            return;
        };
        tokio::select! {
            _ = terminate.recv() => info!("SIGTERM received, shutting down"),
            _ = interrupt.recv() => info!("SIGINT received, shutting down"),
        }
        cancel.cancel();
    });
    token
}
