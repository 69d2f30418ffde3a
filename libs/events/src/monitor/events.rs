//! What the monitor service tells the world: a site went down, came back, or its served
//! certificate's problem changed. The incidents service's `plane:site_down` and
//! `plane:cert_problem` sources are fed by these.

use crate::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CertProblem, Health};
use crate::Domain;

/// A node's site failed its second check in a row (MO-01, decision 6.1-9): it is down.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SiteDown {
    pub node_id: NodeId,
    /// The URL checked.
    pub url: String,
    /// When the first failing check of the streak ran.
    pub down_since: DateTime<Utc>,
    /// What the newest failing check saw.
    pub reason: String,
    /// When the check that decided it ran.
    pub checked_at: DateTime<Utc>,
}
crate::message!(Domain::Monitor, Event, SiteDown, "site_down");

/// A node's site that was down is no longer: it answered (`stopped` false), or its check was
/// switched off or pointed elsewhere (`stopped` true), so nothing says it is down any more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SiteUp {
    pub node_id: NodeId,
    pub url: String,
    /// When the outage that ended had begun.
    pub down_since: DateTime<Utc>,
    pub up_at: DateTime<Utc>,
    pub stopped: bool,
}
crate::message!(Domain::Monitor, Event, SiteUp, "site_up");

/// A node's served certificate has a new problem, a different one, or none any more (null).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CertProblemChanged {
    pub node_id: NodeId,
    /// The name the certificate was read for.
    pub name: String,
    pub problem: Option<CertProblem>,
    pub checked_at: DateTime<Utc>,
}
crate::message!(
    Domain::Monitor,
    Event,
    CertProblemChanged,
    "cert_problem_changed"
);

/// A node's health dot or its reasons changed (MO-07): judged from the node's latest finished
/// `check_status` (`checked_at` is when that job finished). The agent channel keeps the latest
/// for its node views and listing filter; a node never judged is gray, "never checked".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HealthChanged {
    pub node_id: NodeId,
    pub health: Health,
    pub checked_at: DateTime<Utc>,
}
crate::message!(Domain::Monitor, Event, HealthChanged, "health_changed");
