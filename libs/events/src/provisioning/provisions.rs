//! The questions about provisions (`capstan.rpc.provisioning.*`, issue 29): an operator asks for
//! a server of a kind in an account, region and size (level 10, PV-03); anyone who reads the
//! fleet (level 7) follows its steps, its install log (secrets masked) and the auto-approval
//! verdict over the join it is waiting for (AC-09); a failed install is retried (level 10,
//! PV-02). The agent channel's join cards ask for the verdicts over the joins they show.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{AccountFlag, CloudProvider, InstallKind, ProvisionStep};
use crate::conditions::ConditionKind;
use crate::incidents::Severity;
use crate::rpc::Actor;
use crate::{Domain, NodeId};

/// `plane:provisioned_second_join` (AC-11), on the plane's own node: a join came from a
/// provisioned machine's address after its agent was admitted; it was refused.
pub const SECOND_JOIN: ConditionKind = ConditionKind {
    domain: Domain::Provisioning,
    name: "provisioned_second_join",
    severity: Severity::Critical,
    title: "A second join came from a provisioned machine",
};

crate::rpc! { crate::Domain::Provisioning;
    // `GET /api/v1/provisioning/provisions` (level 7): newest first; the dashboard banner asks
    // for those in flight.
    "list_provisions": ListProvisions => Provisions,
    // `POST /api/v1/provisioning/provisions` (level 10, audited).
    "request_provision": RequestProvision => ProvisionView,
    // `GET /api/v1/provisioning/provisions/{id}` (level 7): with its steps and install log.
    "get_provision": GetProvision => ProvisionView,
    // `POST /api/v1/provisioning/provisions/{id}/retry` (level 10, audited).
    "retry_provision": RetryProvision => ProvisionView,
    // The join cards (level 7): why each join that matches a provision is still pending.
    "join_verdicts": JoinVerdicts => Verdicts,
}

/// `GET /api/v1/provisioning/provisions` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListProvisions {
    pub actor: Actor,
    /// Only provisions in accounts of this flag (the dashboard's Main | Test tab, PV-13).
    #[serde(default)]
    pub flag: Option<AccountFlag>,
    /// Only provisions in flight (the dashboard banner, PV-03).
    #[serde(default)]
    pub in_flight: bool,
}

/// The most provisions one listing holds (newest first).
pub const PROVISIONS_LISTED_MAX: usize = 200;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Provisions {
    pub provisions: Vec<ProvisionView>,
}

/// `POST /api/v1/provisioning/provisions` (level 10): `{"account_id", "kind", "name", "region",
/// "size", "image"}`. Words are checked by the service, which names the field that is wrong; a
/// size the region does not sell is refused before anything is made, naming those it does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestProvision {
    pub actor: Actor,
    pub account_id: i64,
    /// `agent`, `site` or `docker-host`.
    pub kind: String,
    /// The node's name: lower-case letters, digits and `-`, 1 to 50 characters (a Docker host's
    /// agent joins as `<name>-host`).
    pub name: String,
    pub region: String,
    pub size: String,
    /// The provider's image; absent, the provider's Debian image.
    #[serde(default)]
    pub image: Option<String>,
}

/// `GET /api/v1/provisioning/provisions/{id}` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetProvision {
    pub actor: Actor,
    pub provision_id: i64,
}

/// `POST /api/v1/provisioning/provisions/{id}/retry` (level 10): only an `install_failed` one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RetryProvision {
    pub actor: Actor,
    pub provision_id: i64,
}

/// A provision as the API and its page show it: never the root password.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProvisionView {
    pub id: i64,
    pub account_id: i64,
    pub account_label: String,
    pub provider: CloudProvider,
    pub flag: AccountFlag,
    pub kind: InstallKind,
    pub name: String,
    pub region: String,
    pub size: String,
    pub image: String,
    pub step: ProvisionStep,
    pub step_since: DateTime<Utc>,
    /// Why it failed (`install_failed` only), secrets masked (PV-02).
    pub failure: Option<String>,
    /// How many times Retry was pressed.
    pub retries: u32,
    /// The provider's instance, once made.
    pub instance_id: Option<String>,
    pub ipv4: Vec<String>,
    pub ipv6: Vec<String>,
    /// The node made for it (the agent's join is bound to it).
    pub node_id: Option<NodeId>,
    /// The agent key fingerprint the install printed (AC-10).
    pub expected_key: Option<String>,
    /// Whether the root password was retired after the install, proven by a refused login
    /// (PV-06).
    pub password_retired: bool,
    /// Each step it entered, oldest first (the page's list; empty in listings).
    pub steps: Vec<StepView>,
    /// The install's output with every secret masked (`get_provision` only; empty in listings).
    pub install_log: String,
    /// The auto-approval verdict over the join its agent sent, when one came (AC-09).
    pub approval: Option<VerdictView>,
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
}

/// One step a provision entered, with its time and what it noted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepView {
    pub step: ProvisionStep,
    pub at: DateTime<Utc>,
    pub detail: Option<String>,
}

/// The join cards' question (level 7): the verdicts over these joins (at most 500).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JoinVerdicts {
    pub actor: Actor,
    pub join_ids: Vec<Uuid>,
}

/// The most joins one [`JoinVerdicts`] asks about.
pub const JOIN_VERDICTS_MAX: usize = 500;

/// The verdicts over the joins asked about that match a provision (a join from a machine the
/// plane did not provision has none: it is never auto-approved).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Verdicts {
    pub verdicts: Vec<VerdictView>,
}

/// Where the auto-approval stands over one join (AC-08, AC-09, AC-11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerdictView {
    pub join_id: Uuid,
    pub provision_id: i64,
    pub provision_name: String,
    pub instance_id: Option<String>,
    /// When the provision was asked for (the card shows its age, AC-11).
    pub provision_requested_at: DateTime<Utc>,
    pub approved: bool,
    /// Why it is still pending, each in the plane's words (empty once approved).
    pub reasons: Vec<String>,
    /// The join's key differs from the one the install printed (shown red, AC-09).
    pub key_differs: bool,
    /// A second join from the address after the node's agent was admitted (AC-11): refused.
    pub second_join: bool,
    pub judged_at: DateTime<Utc>,
}
