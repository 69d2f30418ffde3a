//! An attempt at a repair and how it ended (AG-47): what the ledger records and a case
//! quotes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How an attempt ended (AG-47).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumString,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Outcome {
    /// The repair ran and the check passed again.
    Repaired,
    /// The repair ran (or could not) and the check still fails.
    Failed,
    /// AG-48: the loop is report-only; nothing ran.
    ReportOnly,
    /// The agent stopped while the repair ran.
    Interrupted,
}

/// One attempt of the current failing run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRecord {
    pub attempt: u32,
    pub at: DateTime<Utc>,
    pub word: String,
    pub target: Option<String>,
    /// `None` while it runs, or when the agent stopped during it.
    pub outcome: Option<Outcome>,
    pub detail: String,
}
