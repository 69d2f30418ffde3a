//! The service kit: what every Capstan service does the same way, written once. It starts the
//! parts in order (database and schema, bus and streams), answers the health rpc, relays the
//! outbox, runs inbox-guarded consumers, and shuts everything down in a logged order when
//! asked. `main` is the shared composition root of every binary.
#![forbid(unsafe_code)]

mod consume;
mod entry;
mod error;
pub mod nodes;
pub mod outbound;
pub mod periodic;
mod service;
#[cfg(any(test, feature = "testsuite"))]
pub mod testsuite;

pub use capstan_store::Migrator;
/// The kit's TLS and backoff, which the agent shares (from `capstan-telemetry`).
pub use capstan_telemetry::{backoff, tls};
pub use consume::{
    consume_patiently, consume_with_inbox, decode, event_consumer_specs, read_as, retry,
    unavailable, Apply,
};
pub use entry::{command, main, main_with, shutdown_on_signals};
pub use error::ServiceError;
pub use nodes::NodeEvent;
pub use service::{bus_options, migrate_only, BusPublisher, Part, Service};
