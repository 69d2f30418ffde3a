//! What the incidents service tells the world: an incident opened, reopened, cleared, or had
//! its triage set. Other systems (a pager, a ticket tracker) subscribe to these.

use crate::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Severity, Triage};
use crate::Domain;

/// A condition began on a node: a new incident.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IncidentOpened {
    pub incident_id: i64,
    pub node_id: NodeId,
    /// `agent:<recipe>` or `plane:<name>`.
    pub source: String,
    pub severity: Severity,
    /// The plane's words for the condition.
    pub title: String,
    /// The source's words beneath it.
    pub detail: String,
    /// When the source says it started.
    pub opened_at: DateTime<Utc>,
    /// Whether anyone was told; false when the node's alerts are off, a silence covers it, or
    /// it is folded under its Docker host's incident.
    pub signalled: bool,
}
crate::message!(Domain::Incidents, Event, IncidentOpened, "opened");

/// The same condition came back within the hour of its incident clearing (IN-04).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IncidentReopened {
    pub incident_id: i64,
    pub node_id: NodeId,
    pub source: String,
    pub severity: Severity,
    pub detail: String,
    pub at: DateTime<Utc>,
    pub signalled: bool,
}
crate::message!(Domain::Incidents, Event, IncidentReopened, "reopened");

/// The source says the condition is over.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IncidentCleared {
    pub incident_id: i64,
    pub node_id: NodeId,
    pub source: String,
    pub at: DateTime<Utc>,
}
crate::message!(Domain::Incidents, Event, IncidentCleared, "cleared");

/// A person (or the reconciler, settling or sending back an unproven fix) set the triage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IncidentTriaged {
    pub incident_id: i64,
    pub node_id: NodeId,
    pub triage: Triage,
    pub snooze_until: Option<DateTime<Utc>>,
    /// The operator's name, or `reconciler`.
    pub by: String,
    pub note: Option<String>,
    pub at: DateTime<Utc>,
}
crate::message!(Domain::Incidents, Event, IncidentTriaged, "triaged");
