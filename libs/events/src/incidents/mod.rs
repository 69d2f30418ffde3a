//! The incidents service's contract: the record's words (status, triage, severity) shared by
//! the service's domain and the gateway, its public events, and the rpc questions the gateway
//! asks it for the operator API and pages.

mod events;
pub mod rpc;

pub use events::*;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Is the condition still there? Owned by the source; nothing a person does changes it (IN-01).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Status {
    Open,
    Closed,
}

impl Status {
    pub const ALL: [Status; 2] = [Status::Open, Status::Closed];
}

/// What is being done about it? Owned by a person (IN-01); the reconciler writes it only to
/// settle an incident that cleared before anyone looked and to send an unproven fix back.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Triage {
    New,
    /// Until the incident's `snooze_until`.
    Snoozed,
    Resolved,
    Ignored,
}

impl Triage {
    pub const ALL: [Triage; 4] = [
        Triage::New,
        Triage::Snoozed,
        Triage::Resolved,
        Triage::Ignored,
    ];
}

/// IN-08: critical when visitors or data are at risk now, warning otherwise. Ordered, so a
/// webhook's minimum severity is a comparison.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Severity {
    Warning,
    Critical,
}

impl Severity {
    pub const ALL: [Severity; 2] = [Severity::Warning, Severity::Critical];
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::words::Word;

    #[test]
    fn every_word_reads_back_as_it_is_spelled_on_the_wire_and_nothing_else_is_one() {
        for status in Status::ALL {
            assert_eq!(Status::parse(status.as_str()), Some(status));
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        for triage in Triage::ALL {
            assert_eq!(Triage::parse(triage.as_str()), Some(triage));
            assert_eq!(serde_json::to_value(triage).unwrap(), triage.as_str());
        }
        for severity in Severity::ALL {
            assert_eq!(Severity::parse(severity.as_str()), Some(severity));
            assert_eq!(serde_json::to_value(severity).unwrap(), severity.as_str());
        }
        assert_eq!(Triage::parse("New"), None);
        assert_eq!(Status::parse(""), None);
        assert!(Severity::Critical > Severity::Warning);
    }
}
