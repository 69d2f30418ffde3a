//! The service kit: what every Capstan service does the same way, written once. It starts the
//! parts in order (database and schema, bus and streams), answers the health rpc, relays the
//! outbox, runs inbox-guarded consumers, and shuts everything down in a logged order when
//! asked. `main` is the shared composition root of every binary.
#![forbid(unsafe_code)]

mod consume;
mod entry;
pub mod outbound;
pub mod periodic;
mod service;

pub use capstan_store::Migrator;
pub use consume::{
    consume_patiently, consume_with_inbox, decode, event_consumer_specs, read_as, retry,
    unavailable, Apply,
};
pub use entry::{command, main, main_with, shutdown_on_signals};
pub use service::{bus_options, migrate_only, BusPublisher, Part, Service};
