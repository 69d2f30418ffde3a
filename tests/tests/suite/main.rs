//! Workspace tests against real servers: each test starts its own `nats-server -js` and
//! creates its own database, so they run in parallel and leave nothing behind.

mod agent_channel;
mod backups;
mod boundaries;
mod dead_letters;
mod incidents;
mod monitor;
mod nothing_lost;
mod provisioning;
mod recipe_certificates;
mod recipes;
mod releases;
mod replicas;
mod rollouts;
mod rollouts_agents;
mod rpc;
mod rpc_bodies;
mod trace;
mod ui;
