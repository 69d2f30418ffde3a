//! Telemetry for every Capstan process: `tracing` logs (JSON or pretty), OpenTelemetry traces
//! (exported over OTLP/HTTP when an endpoint is set), W3C `traceparent` propagation helpers for
//! the bus and HTTP, and Prometheus metrics.
#![forbid(unsafe_code)]

pub mod backoff;
pub mod propagation;
pub mod tls;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::{net::SocketAddr, sync::OnceLock};
use tracing_subscriber::{layer::SubscriberExt, util::SubscriberInitExt, EnvFilter, Layer};

pub use metrics_exporter_prometheus::PrometheusHandle as MetricsHandle;

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Pretty,
}

/// What [`init`] needs to know.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// `service.name` on every span: `capstan` for the all-in-one, else the service.
    pub service_name: String,
    pub log_format: LogFormat,
    /// An `EnvFilter` directive; `RUST_LOG` wins when set.
    pub log_level: String,
    pub otlp_endpoint: Option<String>,
    /// Logs to standard error instead of standard output: for one-shot commands whose
    /// standard output is their answer.
    pub logs_to_stderr: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("telemetry is already set up in this process")]
    AlreadyInitialised,
    #[error("bad log filter {0:?}: {1}")]
    BadFilter(String, String),
    #[error("cannot start the OTLP exporter for {endpoint}: {reason}")]
    Exporter { endpoint: String, reason: String },
    #[error("cannot start the metrics exporter: {0}")]
    Metrics(String),
}

/// Flushes and stops trace export when dropped; keep it alive for the life of the process.
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        // Export what is buffered; a collector that is gone must not hang shutdown.
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
    }
}

/// Sets up logging and tracing for the process. Spans always get real trace ids (so they
/// propagate across the bus); they leave the process only when an OTLP endpoint is set
/// (`http://` or `https://`). Call it inside the tokio runtime that will carry the exports.
pub fn init(config: &TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    let mut builder = SdkTracerProvider::builder().with_resource(resource(&config.service_name));
    if let Some(endpoint) = &config.otlp_endpoint {
        use opentelemetry_otlp::WithExportConfig;
        use opentelemetry_otlp::WithHttpConfig;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(otlp_client())
            .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
            .build()
            .map_err(|error| TelemetryError::Exporter {
                endpoint: endpoint.clone(),
                reason: error.to_string(),
            })?;
        // Exports run as a task of the process's tokio runtime, where the HTTP client can run.
        let processor =
            opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                exporter,
                opentelemetry_sdk::runtime::Tokio,
            )
            .build();
        builder = builder.with_span_processor(processor);
    }
    install(config, builder.build())
}

/// How long one export may take before it is given up.
const OTLP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The OTLP client: `http://` or `https://` through rustls with the ring provider, trusting the
/// system's certificate authorities (`SSL_CERT_FILE` or `SSL_CERT_DIR` name others, such as a
/// private CA of the collector's).
fn otlp_client() -> opentelemetry_http::hyper::HyperClient<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
> {
    // No trusted roots here: https exports fail to verify, and each failure says why.
    let connector = tls::https_connector(None, |error| {
        eprintln!("capstan-telemetry: no trusted certificate authorities ({error}); https OTLP exports cannot be verified");
    });
    opentelemetry_http::hyper::HyperClient::new(connector, OTLP_TIMEOUT, None)
}

/// Sets up tracing with spans going to `exporter` synchronously: for tests that read spans
/// back (the in-memory exporter of `opentelemetry_sdk::testing`).
#[cfg(feature = "testing")]
pub fn init_with_exporter(
    config: &TelemetryConfig,
    exporter: opentelemetry_sdk::trace::InMemorySpanExporter,
) -> Result<TelemetryGuard, TelemetryError> {
    let provider = SdkTracerProvider::builder()
        .with_resource(resource(&config.service_name))
        .with_simple_exporter(exporter)
        .build();
    install(config, provider)
}

fn resource(service_name: &str) -> opentelemetry_sdk::Resource {
    opentelemetry_sdk::Resource::builder()
        .with_service_name(service_name.to_string())
        .build()
}

fn install(
    config: &TelemetryConfig,
    provider: SdkTracerProvider,
) -> Result<TelemetryGuard, TelemetryError> {
    let directive = std::env::var("RUST_LOG").unwrap_or_else(|_| config.log_level.clone());
    let filter = EnvFilter::try_new(&directive)
        .map_err(|error| TelemetryError::BadFilter(directive.clone(), error.to_string()))?;
    let tracer = provider.tracer("capstan");
    let fmt = match (config.log_format, config.logs_to_stderr) {
        (LogFormat::Json, false) => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .boxed(),
        (LogFormat::Json, true) => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_writer(std::io::stderr)
            .boxed(),
        (LogFormat::Pretty, false) => tracing_subscriber::fmt::layer().compact().boxed(),
        (LogFormat::Pretty, true) => tracing_subscriber::fmt::layer()
            .compact()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    // The log level governs what is printed, not what is traced: spans at info and above always
    // exist, so a `traceparent` travels on whatever the logs are set to.
    tracing_subscriber::registry()
        .with(fmt.with_filter(filter))
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO),
        )
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInitialised)?;
    Ok(TelemetryGuard { provider })
}

static METRICS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder once and returns its handle (the gateway
/// renders it at `/metrics`). With `listen`, also serves `/metrics` there, for a service that
/// runs alone in its container.
pub fn metrics(listen: Option<SocketAddr>) -> Result<PrometheusHandle, TelemetryError> {
    if let Some(handle) = METRICS.get() {
        return Ok(handle.clone());
    }
    let builder = PrometheusBuilder::new();
    let handle = match listen {
        Some(address) => {
            let (recorder, exporter) = builder
                .with_http_listener(address)
                .build()
                .map_err(|error| TelemetryError::Metrics(error.to_string()))?;
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder)
                .map_err(|error| TelemetryError::Metrics(error.to_string()))?;
            tokio::spawn(exporter);
            handle
        }
        None => builder
            .install_recorder()
            .map_err(|error| TelemetryError::Metrics(error.to_string()))?,
    };
    Ok(METRICS.get_or_init(|| handle).clone())
}
