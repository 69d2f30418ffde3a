//! The questions the gateway asks the monitor service (`capstan.rpc.monitor.*`) for the
//! operator API (`/api/v1/uptime`, `/api/v1/nodes/{id}/uptime`, `/api/v1/nodes/{id}/certificate`)
//! and the pages. Each carries the [`Actor`]; the service checks the level first (reads 7,
//! changing a check 8).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CertReason, CheckKind, UptimeStatus};
use crate::rpc::Actor;

/// The rpc names under `capstan.rpc.monitor.`.
pub mod ops {
    pub const LIST_UPTIME: &str = "list_uptime";
    pub const GET_UPTIME: &str = "get_uptime";
    pub const SET_UPTIME: &str = "set_uptime";
    pub const GET_CERTIFICATE: &str = "get_certificate";
    pub const FLEET_SECURITY: &str = "fleet_security";
}

/// `GET /api/v1/uptime?status=up|down|unknown` (level 7); the service reads `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListUptime {
    pub actor: Actor,
    #[serde(default)]
    pub status: Option<String>,
}

/// One node's uptime check as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UptimeCheck {
    pub node_id: i64,
    pub enabled: bool,
    pub kind: CheckKind,
    /// The URL checked; none yet, and nothing is checked until one is set.
    pub url: Option<String>,
    /// For `keyword`: what the page must contain.
    pub keyword: Option<String>,
    pub interval_secs: u32,
    pub status: UptimeStatus,
    pub consecutive_failures: u32,
    /// When the current outage began; null when up.
    pub down_since: Option<DateTime<Utc>>,
    /// What the newest failing check saw; null when up.
    pub reason: Option<String>,
    pub checked_at: Option<DateTime<Utc>>,
    /// How long the newest check took, failing or not.
    pub response_ms: Option<u32>,
}

/// `GET /api/v1/uptime`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UptimeChecks {
    pub checks: Vec<UptimeCheck>,
}

/// `GET /api/v1/nodes/{id}/uptime` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetUptime {
    pub actor: Actor,
    pub node_id: i64,
}

/// One check in a node's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryPoint {
    pub at: DateTime<Utc>,
    pub ok: bool,
    pub response_ms: Option<u32>,
}

/// One check plus its last day of history, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UptimeDetail {
    #[serde(flatten)]
    pub check: UptimeCheck,
    pub history: Vec<HistoryPoint>,
}

/// `PUT /api/v1/nodes/{id}/uptime` (level 8, audited): the whole setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetUptime {
    pub actor: Actor,
    pub node_id: i64,
    pub enabled: bool,
    /// One of `http_status`, `keyword`, `tls_certificate`, `api`.
    pub kind: String,
    pub url: Option<String>,
    pub keyword: Option<String>,
    /// Seconds between checks; the default (60) when absent.
    pub interval_secs: Option<u32>,
}

/// `GET /api/v1/nodes/{id}/certificate` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetCertificate {
    pub actor: Actor,
    pub node_id: i64,
}

/// A certificate problem as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CertProblemView {
    pub reason: CertReason,
    pub title: String,
    pub not_after: Option<DateTime<Utc>>,
    pub detail: String,
    pub fix: String,
}

/// The certificate a node's origin serves, as last read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CertificateView {
    pub problem: Option<CertProblemView>,
    /// Stored only for a certificate that covers the name and is not the placeholder (MO-10).
    pub expires_at: Option<DateTime<Utc>>,
    /// The names the served certificate covers.
    pub names: Vec<String>,
    pub checked_at: Option<DateTime<Utc>>,
}

/// `GET /api/v1/fleet/security` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetFleetSecurity {
    pub actor: Actor,
}

/// A fleet security row's colour (MO-17).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SecurityColour {
    /// Old code serving, a critical fix waiting, or a critical fix left half done.
    Red,
    /// Other fixes or a kernel fix waiting, a reboot owed over a day, no report passed in two
    /// hours, another service on replaced code, or a package run left half done.
    Amber,
    /// Nothing reported to judge by.
    Grey,
    /// Patched.
    Green,
}

impl SecurityColour {
    pub const fn as_str(self) -> &'static str {
        match self {
            SecurityColour::Red => "red",
            SecurityColour::Amber => "amber",
            SecurityColour::Grey => "grey",
            SecurityColour::Green => "green",
        }
    }
}

/// One machine's row (MO-16), from its latest `host_report`; a fact it could not measure is
/// null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityRow {
    pub node_id: i64,
    pub name: String,
    pub colour: SecurityColour,
    /// Why it has its colour, worst first; empty when green.
    pub reasons: Vec<String>,
    /// The operating system's name.
    pub os: Option<String>,
    /// Security fixes waiting (`security_pending`).
    pub security_pending: Option<u32>,
    pub security_packages: Option<Vec<String>>,
    /// What still runs replaced code (`needrestart`).
    pub services_needing_restart: Option<Vec<String>>,
    pub reboot_owed: Option<bool>,
    pub reboot_owed_since: Option<DateTime<Utc>>,
    /// When automatic updates last ran.
    pub last_auto_update: Option<DateTime<Utc>>,
    /// Packages a package run left half done.
    pub dpkg_unfinished: Option<Vec<String>>,
    /// When the report judged finished.
    pub reported_at: Option<DateTime<Utc>>,
}

/// Every paired machine's row, red first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetSecurity {
    pub machines: Vec<SecurityRow>,
}
