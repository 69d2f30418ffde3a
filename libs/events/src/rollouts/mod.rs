//! The rollouts service's contract: releases of the agent (signed metadata and the artifacts
//! it names), the event a publish sends, and the rpc questions the gateway (publishing and
//! listing) and the agent channel (an agent's `artifact` request) ask it.

mod events;
pub mod rpc;
pub mod staged;

pub use events::*;
pub use staged::{RolloutFinished, RolloutHalted, RolloutStarted, RolloutStepFinished};
