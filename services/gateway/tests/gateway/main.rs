//! The gateway in-process against a NATS server and a database of each test's own, with a
//! small fake of the agent channel answering its rpc ops (the real service is tested on its
//! own): operator identity, the route table's levels, the agent routes' caps and forwarding,
//! the error mapping, the audit log and the OpenAPI document.

mod agent;
mod auth;
mod backups_ui;
mod browser;
mod errors;
mod harness;
mod incidents_ui;
mod listing;
mod machines;
mod openapi;
mod probes;
mod releases;
mod sign_in;
mod ui;
mod ui_routes;
