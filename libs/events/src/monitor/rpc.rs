//! The questions the gateway asks the monitor service (`capstan.rpc.monitor.*`) for the
//! operator API (`/api/v1/uptime`, `/api/v1/nodes/{id}/uptime`, `/api/v1/nodes/{id}/certificate`)
//! and the pages. Each carries the [`Actor`]; the service checks the level first (reads 7,
//! changing a check 8).

use std::collections::BTreeMap;

use crate::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CertReason, CheckKind, UptimeStatus};
use crate::rpc::Actor;

// The rpcs under `capstan.rpc.monitor.`: each op's name, request and answer, declared once.
crate::rpc! { crate::Domain::Monitor;
    "list_uptime": ListUptime => UptimeChecks,
    "get_uptime": GetUptime => UptimeDetail,
    "set_uptime": SetUptime => UptimeCheck,
    "get_certificate": GetCertificate => CertificateView,
    "start_edge_probe": StartEdgeProbe => EdgeProbeStarted,
    "get_edge_probe": GetEdgeProbe => EdgeProbeView,
    "list_edge_probes": ListEdgeProbes => EdgeProbes,
    "uptime_summary": GetUptimeSummary => UptimeSummary,
    "fleet_security": GetFleetSecurity => FleetSecurity,
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
    pub node_id: NodeId,
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
    pub node_id: NodeId,
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
    pub node_id: NodeId,
    pub enabled: bool,
    pub kind: CheckKind,
    pub url: Option<String>,
    pub keyword: Option<String>,
    /// Seconds between checks; the default (60) when absent.
    pub interval_secs: Option<u32>,
}

/// `GET /api/v1/nodes/{id}/certificate` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetCertificate {
    pub actor: Actor,
    pub node_id: NodeId,
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

/// One machine's row (MO-16), from its latest `host_report`; a fact it could not measure is
/// null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SecurityRow {
    pub node_id: NodeId,
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
    /// A Docker host's site containers (its report's `containers`), each a row under it.
    #[serde(default)]
    pub containers: Vec<ContainerRow>,
}

/// A site container's row under its host (MO-16): its state from the host's report, the
/// security fixes its host's report found waiting (a site container runs its host's base, so
/// the fixes it waits for are the host's), and the node living in it when it is paired here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContainerRow {
    /// The container's name.
    pub name: String,
    /// The site it serves (its site label), when it has one.
    pub site: Option<String>,
    /// The paired node whose site runs in it, and its name.
    pub node_id: Option<NodeId>,
    pub node_name: Option<String>,
    /// Its state as the engine said (`running`, `exited`, …).
    pub state: Option<String>,
    pub colour: SecurityColour,
    /// Why it has its colour, worst first; empty when green.
    pub reasons: Vec<String>,
    /// Security fixes waiting for it (its host's `security_pending`).
    pub security_pending: Option<u32>,
    pub security_packages: Option<Vec<String>>,
}

/// Every paired machine's row, red first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetSecurity {
    pub machines: Vec<SecurityRow>,
}

/// `POST /api/v1/nodes/{id}/edge-probe` (level 7: it looks, it changes nothing): compare the
/// node's site through its public name and straight at its own addresses (MO-11). At most 10
/// runs per node an hour; the 11th is `rate_limited`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StartEdgeProbe {
    pub actor: Actor,
    pub node_id: NodeId,
}

/// The run was taken: `GET /api/v1/edge-probes/{id}` follows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EdgeProbeStarted {
    pub id: i64,
}

/// `GET /api/v1/edge-probes/{id}` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetEdgeProbe {
    pub actor: Actor,
    pub id: i64,
}

/// A node's newest edge probes, newest first (level 7; the node page's card).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListEdgeProbes {
    pub actor: Actor,
    pub node_id: NodeId,
}

/// Where an edge probe run stands.
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
pub enum EdgeProbeStatus {
    /// Taken, not yet started.
    Queued,
    Running,
    /// Finished: its paths and verdict are final.
    Done,
    /// It could not run, or the monitor stopped while it ran; `error` says which.
    Failed,
}

/// MO-12: the one verdict line, in the spec's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum EdgeVerdict {
    /// The edge stalled and the origin, asked directly, answered without stalling.
    #[serde(rename = "Slow through the edge, fast direct")]
    SlowThroughEdge,
    /// The origin stalled when asked directly (or no direct path answered while the edge
    /// stalled).
    #[serde(rename = "Slow on the server")]
    SlowOnServer,
    #[serde(rename = "No problem seen")]
    NoProblemSeen,
}

impl EdgeVerdict {
    pub const fn sentence(self) -> &'static str {
        match self {
            EdgeVerdict::SlowThroughEdge => "Slow through the edge, fast direct",
            EdgeVerdict::SlowOnServer => "Slow on the server",
            EdgeVerdict::NoProblemSeen => "No problem seen",
        }
    }
}

/// Which way a path goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EdgePathKind {
    /// Through the site's public name (its edge, such as Cloudflare or a relay).
    Edge,
    /// Straight at one of the machine's own addresses, the name kept for SNI and `Host`.
    Direct,
}

/// The certificate an origin presented on a direct path (neither its name nor its chain is
/// verified there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PresentedCertificate {
    /// The DNS names it covers.
    pub names: Vec<String>,
    pub not_after: DateTime<Utc>,
    /// Its issuer is its subject (a placeholder or a server's fallback certificate).
    pub self_signed: bool,
}

/// One path's requests (MO-12). Times are to the answer's status line, in milliseconds, of
/// the requests that were answered or stalled (a request never answered counts as the 10 s
/// it was given); errors and 429s are counted apart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EdgePath {
    pub kind: EdgePathKind,
    /// The public name (edge) or the address asked (direct).
    pub target: String,
    /// For the edge: the addresses the name resolved to.
    pub addresses: Vec<String>,
    pub requests: u32,
    /// Requests that took 5 s or more, or had no answer within 10 s.
    pub stalls: u32,
    pub p50_ms: Option<u32>,
    pub p95_ms: Option<u32>,
    /// How many answers of each status, by status code.
    pub statuses: BTreeMap<String, u32>,
    /// Requests that got no HTTP answer (refused, reset, a TLS failure).
    pub errors: u32,
    /// 429 answers: the site's own per-address limit, never a stall.
    pub rate_limited: u32,
    /// The newest error's words.
    pub last_error: Option<String>,
    /// For a direct `https://` path: the certificate the origin presented.
    pub certificate: Option<PresentedCertificate>,
}

/// One edge probe run (MO-11, MO-12).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EdgeProbeView {
    pub id: i64,
    pub node_id: NodeId,
    pub status: EdgeProbeStatus,
    /// The node's uptime URL the run compared (its scheme, name and port).
    pub url: String,
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Rounds sent (each: a `GET /login` and a `POST {}` down every path at once).
    pub rounds: u32,
    pub paths: Vec<EdgePath>,
    /// Set when the run is done.
    pub verdict: Option<EdgeVerdict>,
    /// What the verdict alone does not say (the name resolving to the machine itself, 429s
    /// as the site's limit, direct paths that never answered).
    pub notes: Vec<String>,
    /// Why a failed run failed.
    pub error: Option<String>,
}

/// A node's newest edge probes, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EdgeProbes {
    pub probes: Vec<EdgeProbeView>,
}

/// The dashboard's sites card (level 7): how many checks are in each state, and the longest
/// down first, at most `limit` of them — bounded however large the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetUptimeSummary {
    pub actor: Actor,
    pub limit: u32,
}

/// What the sites card shows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UptimeSummary {
    pub up: u64,
    pub down: u64,
    /// Checked by nothing yet (no answer so far) while on and with a URL.
    pub unknown: u64,
    /// Switched off, or with no URL to check.
    pub off: u64,
    /// The longest down first.
    pub down_checks: Vec<UptimeCheck>,
}
