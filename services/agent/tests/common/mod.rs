//! The agent's end-to-end fixtures come from `capstan-e2e` (one plane fixture for the whole
//! workspace); this adds only the agent binary this package builds.

pub use capstan_e2e::{
    agent::{mode_of, Agent},
    plane::Plane,
    wait_for,
};

/// The real agent binary of this package on a state directory of its own.
pub fn agent() -> Agent {
    Agent::new(env!("CARGO_BIN_EXE_capstan-agent"))
}
