//! The gateway's public contract: what it tells the plane about operators, whose identity it
//! owns. Other services keep what they need of operators (incidents: who is told of a signal,
//! and where mail goes) as a projection of [`OperatorChanged`].

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rpc::Level;
use crate::Domain;

/// An operator was created or changed (level, mail address, removed). The whole record each
/// time, so a listener keeps the latest and needs no history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct OperatorChanged {
    pub operator_id: i64,
    pub name: String,
    pub level: Level,
    /// Where the operator's mail goes; `None` when they gave no address.
    pub email: Option<String>,
    /// False once the operator is removed: they are told nothing more.
    pub active: bool,
    pub changed_at: DateTime<Utc>,
}
crate::message!(Domain::Gateway, Event, OperatorChanged, "operator_changed");
