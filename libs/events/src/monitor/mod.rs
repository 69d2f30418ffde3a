//! The monitor service's contract: the words its checks are spoken in (check kinds, uptime
//! status, certificate reasons) shared by the service's domain, the gateway and the incidents
//! service, its public events, and the rpc questions the gateway asks it.

mod events;
pub mod rpc;

pub use events::*;

use crate::conditions::ConditionKind;
use crate::incidents::Severity;
use crate::Domain;

/// `plane:site_down` (MO-04): the uptime check failed twice in a row and the site has not
/// answered since.
pub const SITE_DOWN: ConditionKind = ConditionKind {
    domain: Domain::Monitor,
    name: "site_down",
    severity: Severity::Critical,
    title: "The site is down",
};
/// `plane:cert_problem` (MO-09): the certificate the origin serves has one of its problems.
pub const CERT_PROBLEM: ConditionKind = ConditionKind {
    domain: Domain::Monitor,
    name: "cert_problem",
    severity: Severity::Warning,
    title: "The served certificate has a problem",
};

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How a node's uptime is checked (MO-02, decision 6.1-9).
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
pub enum CheckKind {
    /// The default: the URL answers 2xx or 3xx.
    HttpStatus,
    /// The URL answers 2xx and its body contains the node's keyword.
    Keyword,
    /// An `https://` URL whose certificate chain is valid for its name (and answers at all).
    TlsCertificate,
    /// The URL is a health document: it answers 2xx with a JSON body.
    Api,
}

impl CheckKind {
    pub const ALL: [CheckKind; 4] = [
        CheckKind::HttpStatus,
        CheckKind::Keyword,
        CheckKind::TlsCertificate,
        CheckKind::Api,
    ];
}

/// A node's uptime as last judged: `unknown` until its first check.
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
pub enum UptimeStatus {
    Up,
    Down,
    Unknown,
}

impl UptimeStatus {
    pub const ALL: [UptimeStatus; 3] =
        [UptimeStatus::Up, UptimeStatus::Down, UptimeStatus::Unknown];
}

/// The five reasons a served certificate is a problem (MO-09), in the order they are judged.
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
pub enum CertReason {
    /// Two thirds of its life and a day more have passed and the same certificate is served.
    RenewalOverdue,
    /// It expires within the warning days (21 by default), or has expired.
    ExpiryApproaching,
    /// `www.<name>` resolves and the certificate served for it does not cover it.
    WwwUncovered,
    /// The origin serves a certificate for other names.
    OriginUncovered,
    /// The origin serves a self-signed certificate: the placeholder, never renewed.
    Placeholder,
}

impl CertReason {
    pub const ALL: [CertReason; 5] = [
        CertReason::RenewalOverdue,
        CertReason::ExpiryApproaching,
        CertReason::WwwUncovered,
        CertReason::OriginUncovered,
        CertReason::Placeholder,
    ];
}

/// A served certificate's current problem (`mgn_cert_problem`): the incident's evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CertProblem {
    pub reason: CertReason,
    /// The plane's words for it.
    pub title: String,
    /// The served certificate's expiry, when it is this node's to date.
    pub not_after: Option<DateTime<Utc>>,
    /// What was seen: the names presented and wanted, the dates.
    pub detail: String,
    /// What fixes it.
    pub fix: String,
    /// For the placeholder: when it was first seen served (kept across checks).
    pub since: Option<DateTime<Utc>>,
}

/// A node's health dot (MO-07, spec "Dashboard Features"), judged by the monitor from the
/// node's latest `check_status`: red when the last check failed, the disk is over 90 % full or
/// PostgreSQL does not accept connections; yellow when the disk is over 80 % or the load
/// average over 5; green when all is well; gray when never checked or it reported no data.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Default,
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
pub enum HealthDot {
    Green,
    Yellow,
    Red,
    #[default]
    Gray,
}

impl HealthDot {
    pub const ALL: [HealthDot; 4] = [
        HealthDot::Green,
        HealthDot::Yellow,
        HealthDot::Red,
        HealthDot::Gray,
    ];
}

/// The dot and, for any colour but green, the sentences that made it so.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    pub dot: HealthDot,
    pub reasons: Vec<String>,
}
