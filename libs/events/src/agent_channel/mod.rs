//! The agent channel's contract: its public events and commands, the catalog of primitives the
//! plane knows, and the rpc questions the gateway asks it (agent traffic and operator acts).

mod events;
pub mod primitives;
pub mod rpc;

pub use events::*;
