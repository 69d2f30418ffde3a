//! Layered configuration: defaults in code < an optional `capstan.toml` (or the file
//! `CAPSTAN_CONFIG` names) < environment variables `CAPSTAN__SECTION__KEY`. With no file and no
//! variables every service runs against `postgres://localhost/capstan` and
//! `nats://127.0.0.1:4222`. Unknown keys are refused, so a typo never passes silently.
//!
//! This crate holds the loader and the sections every process shares ([`Settings`]); each
//! service defines its own section in its crate (`services/<service>/src/settings.rs`) as a
//! [`Section`], and its binary loads the shared sections plus its own ([`load`]). Every problem
//! of every section read is reported at once, each naming its key.
#![forbid(unsafe_code)]

mod nats;
mod problem;
mod section;
mod shared;

pub use nats::{NatsCredentials, NatsSettings};
pub use problem::{all_within, read_secret, within, Problem, SettingsError};
pub use section::{service_sections, Loader, Section, Sections, SHARED_SECTIONS};
pub use shared::{
    BusSettings, DatabaseSettings, LogFormat, OutboundSettings, OutboxSettings, PlaneName,
    TelemetrySettings,
};

/// The exit code of a process started with bad configuration (`EX_USAGE`).
pub const EXIT_BAD_CONFIG: i32 = 64;

/// The sections every Capstan process reads.
#[derive(Debug, Clone)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub nats: NatsSettings,
    pub telemetry: TelemetrySettings,
    pub bus: BusSettings,
    pub outbox: OutboxSettings,
    pub outbound: OutboundSettings,
}

impl Sections for Settings {
    fn read(loader: &mut Loader) -> Settings {
        Settings {
            database: loader.section(),
            nats: loader.section(),
            telemetry: loader.section(),
            bus: loader.section(),
            outbox: loader.section(),
            outbound: loader.section(),
        }
    }
}

impl Settings {
    /// The shared sections alone, from this process's file and environment ([`load`]).
    pub fn load() -> Result<Settings, SettingsError> {
        load::<()>().map(|(settings, ())| settings)
    }

    /// The shared sections alone, from `file` and `environment` ([`load_from`]).
    pub fn load_from(
        file: Option<&str>,
        environment: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, SettingsError> {
        load_from::<()>(file, environment).map(|(settings, ())| settings)
    }
}

/// The shared sections and `S` (a service's own): defaults < `capstan.toml` (or
/// `$CAPSTAN_CONFIG`) < `CAPSTAN__*` environment variables.
pub fn load<S: Sections>() -> Result<(Settings, S), SettingsError> {
    let file = match std::env::var("CAPSTAN_CONFIG") {
        Ok(path) => Some(path),
        Err(_) => std::path::Path::new("capstan.toml")
            .exists()
            .then(|| "capstan.toml".to_string()),
    };
    load_from(file.as_deref(), std::env::vars())
}

/// Defaults < `file` (which must exist when named) < `environment`, where only the
/// `CAPSTAN__*` variables are read; tests use it to point a process at their own servers.
/// Every problem of every section read is in the error.
pub fn load_from<S: Sections>(
    file: Option<&str>,
    environment: impl IntoIterator<Item = (String, String)>,
) -> Result<(Settings, S), SettingsError> {
    let mut loader = Loader::new(file, environment)?;
    let shared = Settings::read(&mut loader);
    let own = S::read(&mut loader);
    loader.finish((shared, own))
}

#[cfg(test)]
mod tests;
