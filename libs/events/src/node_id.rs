//! [`NodeId`]: a node's number as the agent channel gave it, carried through the contract as
//! its own type so a node is never confused with a job, an incident or a count.

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// A node's id: the agent channel's number for it, the same in every service. On the wire and
/// in JSON it is the bare number; in SQL (with the `sqlx` feature) a `BIGINT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type), sqlx(transparent))]
pub struct NodeId(pub i64);

impl NodeId {
    /// The bare number, for a query or a log field.
    pub const fn get(self) -> i64 {
        self.0
    }
}

/// The schema is the bare `int64`'s, written in place: the published event schemas and the
/// OpenAPI document stay what they were before the type existed (no `$defs` entry, no
/// description a field did not have).
impl JsonSchema for NodeId {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        i64::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        i64::json_schema(generator)
    }
}

impl From<i64> for NodeId {
    fn from(id: i64) -> Self {
        NodeId(id)
    }
}

impl From<NodeId> for i64 {
    fn from(id: NodeId) -> Self {
        id.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::str::FromStr for NodeId {
    type Err = std::num::ParseIntError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.parse().map(NodeId)
    }
}

#[cfg(test)]
mod tests {
    use super::NodeId;

    #[test]
    fn a_node_id_is_the_bare_number_on_the_wire() {
        assert_eq!(serde_json::to_string(&NodeId(42)).unwrap(), "42");
        assert_eq!(serde_json::from_str::<NodeId>("42").unwrap(), NodeId(42));
        assert!(serde_json::from_str::<NodeId>("\"42\"").is_err());
        assert_eq!("7".parse::<NodeId>().unwrap(), NodeId(7));
        assert_eq!(NodeId(7).to_string(), "7");
        assert_eq!(
            serde_json::to_value(schemars::schema_for!(NodeId)).unwrap()["format"],
            "int64"
        );
    }
}
