//! What the rollouts service tells the world.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Domain;

/// A signed release was published to this plane and is now on offer to every agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReleasePublished {
    pub version: String,
    pub sequence: i64,
    pub expires_at: DateTime<Utc>,
    /// The architectures it carries binaries for.
    pub arches: Vec<String>,
    /// Fingerprints of the keys that signed the metadata.
    pub signed_by: Vec<String>,
    /// Who uploaded it.
    pub published_by: String,
}
crate::message!(
    Domain::Rollouts,
    Event,
    ReleasePublished,
    "release_published"
);
