//! The gateway's pure rules: no I/O, unit-tested. The gateway holds no domain rule of the
//! fleet (those belong to the services it asks); what is here is about operators at its door.

pub mod agent_request;
pub mod client_address;
pub mod email;
pub mod next_path;
pub mod throttle;
