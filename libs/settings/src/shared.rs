//! The sections every process reads: the database, the bus's delivery, the outbox relay,
//! telemetry and the outbound address policy (NATS has [`crate::nats`]).

use crate::{
    problem::{read_secret, within, Problem},
    section::Section,
};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::{net::SocketAddr, path::PathBuf, time::Duration};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// A secret: it may carry a password. `CAPSTAN__DATABASE__URL_FILE` reads it from a file.
    pub url: SecretString,
    pub url_file: Option<PathBuf>,
    /// Connections each service keeps in its pool.
    pub max_connections: u32,
}

impl Default for DatabaseSettings {
    fn default() -> DatabaseSettings {
        DatabaseSettings {
            url: SecretString::from("postgres://localhost/capstan"),
            url_file: None,
            max_connections: 5,
        }
    }
}

impl DatabaseSettings {
    /// The connection string, for the one place that connects.
    pub fn url(&self) -> &str {
        self.url.expose_secret()
    }
}

impl Section for DatabaseSettings {
    const KEY: &'static str = "database";

    fn resolve_files(&mut self) -> Vec<Problem> {
        let Some(path) = &self.url_file else {
            return Vec::new();
        };
        match read_secret("database.url_file", path) {
            Ok(url) => {
                self.url = url;
                Vec::new()
            }
            Err(problem) => vec![problem],
        }
    }

    fn validate(&self) -> Vec<Problem> {
        let mut problems = Vec::new();
        let url = self.url();
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            problems.push(Problem::new(
                "database.url",
                "must start with postgres:// or postgresql://",
            ));
        }
        if self.max_connections == 0 {
            problems.push(Problem::new(
                "database.max_connections",
                "must be at least 1",
            ));
        }
        problems
    }
}

/// Where the plane may connect on a node's or an operator's word (webhooks, uptime checks,
/// the edge probe, certificate reads): the one address policy (`capstan_runtime::outbound`,
/// docs/security.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutboundSettings {
    /// Lets those connections reach loopback, private, link-local and other non-public
    /// addresses, and webhooks use plain `http://` (labs and tests; never in production).
    pub allow_private: bool,
}

impl Section for OutboundSettings {
    const KEY: &'static str = "outbound";

    fn validate(&self) -> Vec<Problem> {
        Vec::new()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Json,
    Pretty,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySettings {
    pub log_format: LogFormat,
    /// An `EnvFilter` directive such as `info,capstan_bus=debug`.
    pub log_level: String,
    /// OTLP/HTTP endpoint (`http://collector:4318`, or `https://` verified against the system's
    /// certificate authorities, or `SSL_CERT_FILE`'s); traces are exported only when set.
    pub otlp_endpoint: Option<String>,
    /// Where a service running alone serves `/metrics`; the gateway always serves its own.
    pub metrics_listen: Option<SocketAddr>,
}

impl Default for TelemetrySettings {
    fn default() -> TelemetrySettings {
        TelemetrySettings {
            log_format: LogFormat::Pretty,
            log_level: "info".into(),
            otlp_endpoint: None,
            metrics_listen: None,
        }
    }
}

impl Section for TelemetrySettings {
    const KEY: &'static str = "telemetry";

    /// The level and the endpoint are checked where telemetry starts (exit 64 there too).
    fn validate(&self) -> Vec<Problem> {
        Vec::new()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BusSettings {
    /// Deliveries of one message before it is dead-lettered.
    pub max_deliver: u32,
    /// Seconds a consumer has to acknowledge a message before it is redelivered.
    pub ack_wait_secs: u64,
    /// Seconds an rpc waits for its answer.
    pub rpc_timeout_secs: u64,
}

impl Default for BusSettings {
    fn default() -> BusSettings {
        BusSettings {
            max_deliver: 5,
            ack_wait_secs: 30,
            rpc_timeout_secs: 5,
        }
    }
}

impl BusSettings {
    pub fn ack_wait(&self) -> Duration {
        Duration::from_secs(self.ack_wait_secs)
    }
    pub fn rpc_timeout(&self) -> Duration {
        Duration::from_secs(self.rpc_timeout_secs)
    }
}

impl Section for BusSettings {
    const KEY: &'static str = "bus";

    fn validate(&self) -> Vec<Problem> {
        if self.max_deliver == 0 {
            return vec![Problem::new("bus.max_deliver", "must be at least 1")];
        }
        Vec::new()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutboxSettings {
    /// Rows the relay publishes in one pipelined batch.
    pub batch_size: u32,
    /// Milliseconds between sweeps when no notification arrives (notifications wake it early).
    pub poll_interval_ms: u64,
}

impl Default for OutboxSettings {
    fn default() -> OutboxSettings {
        OutboxSettings {
            batch_size: 256,
            poll_interval_ms: 1000,
        }
    }
}

impl OutboxSettings {
    pub fn poll_interval(&self) -> Duration {
        Duration::from_millis(self.poll_interval_ms)
    }
}

impl Section for OutboxSettings {
    const KEY: &'static str = "outbox";

    fn validate(&self) -> Vec<Problem> {
        within("outbox.batch_size", u64::from(self.batch_size), 1, 10_000)
            .into_iter()
            .collect()
    }
}

/// The operator UI's name for this plane (`gateway.plane_name`): the gateway shows it, and
/// incidents' mail and webhooks carry it, so both read it (incidents through
/// [`crate::Loader::value`]) and neither depends on the other.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct PlaneName(String);

impl Default for PlaneName {
    fn default() -> PlaneName {
        PlaneName("Capstan".into())
    }
}

impl PlaneName {
    pub const KEY: &'static str = "gateway.plane_name";

    pub fn text(&self) -> &str {
        &self.0
    }

    /// 1 to 64 characters without control characters (it is shown in every page's title).
    pub fn validate(&self) -> Vec<Problem> {
        let name = self.0.trim();
        if name.is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
            return vec![Problem::new(
                PlaneName::KEY,
                "must be 1 to 64 characters without control characters",
            )];
        }
        Vec::new()
    }
}

impl crate::Sections for PlaneName {
    fn read(loader: &mut crate::Loader) -> PlaneName {
        let name: PlaneName = loader.value(PlaneName::KEY, PlaneName::default());
        loader.push(name.validate());
        name
    }
}
