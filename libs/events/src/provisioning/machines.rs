//! The machines inventory, adoption and hosts (`capstan.rpc.provisioning.*`, issue 29): every
//! managed node and every server in our main accounts with no node (PV-53), what is written
//! down about each and its colour (PV-54); adopting a cloud server for a node on exactly one
//! match (PV-52); the Docker hosts' placement records, added by hand and deleted only when
//! nothing lives on them (PV-14..PV-16). And the two conditions provisioning judges here: the
//! daily transfer watch (`plane:machine_transfer`) and the test-cloud cleanup's refusal
//! (`plane:test_cloud_cleanup`, PV-55).

use chrono::{DateTime, NaiveDate, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{AccountFlag, CloudProvider, InstallState};
use crate::conditions::ConditionKind;
use crate::incidents::Severity;
use crate::rpc::Actor;
use crate::{Domain, NodeId};

crate::rpc! { crate::Domain::Provisioning;
    // `GET /api/v1/machines` (level 7): the inventory with its colours.
    "list_machines": ListMachines => Machines,
    // `PUT /api/v1/machines/{id}` (level 8, audited): what is written down; Save confirms.
    "write_machine": WriteMachine => MachineView,
    // `POST /api/v1/nodes/{id}/adopt` (level 10, audited): adopt on exactly one match.
    "adopt_machine": AdoptMachine => Adopted,
    // `GET /api/v1/hosts` (level 7): placement records with their containers.
    "list_hosts": ListHosts => Hosts,
    // `POST /api/v1/hosts` (level 10, audited).
    "add_host": AddHost => HostView,
    // `DELETE /api/v1/hosts/{id}` (level 10, audited): refused while anything lives on it.
    "delete_host": DeleteHost => HostView,
}

/// `plane:machine_transfer`: an instance of ours left its account or changed address (the
/// daily transfer watch), on the instance's node.
pub const MACHINE_TRANSFER: ConditionKind = ConditionKind {
    domain: Domain::Provisioning,
    name: "machine_transfer",
    severity: Severity::Warning,
    title: "A cloud server of ours left its account or changed address",
};

/// `plane:test_cloud_cleanup` (PV-55): the test-cloud cleanup refused an account (its company
/// name is not exactly the disposable marker, or it could not be asked), on the plane's own
/// node. Cleared by a passing run or by turning the cleanup off.
pub const TEST_CLOUD_CLEANUP: ConditionKind = ConditionKind {
    domain: Domain::Provisioning,
    name: "test_cloud_cleanup",
    severity: Severity::Warning,
    title: "The test-cloud cleanup refused to delete anything",
};

/// `GET /api/v1/machines` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListMachines {
    pub actor: Actor,
}

/// Whether a machine has a node (managed) or is only a server in one of our accounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MachineKind {
    Managed,
    NotManaged,
}

/// PV-54's colours: `red` (Ubuntu past standard support, retire-by passed), `amber` (nothing
/// written where something should be, unconfirmed for 90 days, serves nothing and no
/// retire-by, a retired source, a failed install), `plain` otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MachineColour {
    Red,
    Amber,
    Plain,
}

/// What is written down about a machine (PV-53), and when it was last confirmed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MachineNote {
    pub purpose: String,
    pub owner: String,
    /// What it serves.
    pub serves: String,
    pub release: String,
    pub retire_by: Option<NaiveDate>,
    pub confirmed_at: Option<DateTime<Utc>>,
    pub confirmed_by: Option<String>,
}

/// One line of the inventory. `id` is `node-<id>` for a managed node and
/// `server-<account id>-<instance id>` for a server with no node: the `{id}` of
/// `PUT /api/v1/machines/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MachineView {
    pub id: String,
    pub kind: MachineKind,
    pub node_id: Option<NodeId>,
    /// The node's name, or the provider's label of the server.
    pub name: String,
    pub addresses: Vec<String>,
    /// The account holding its server, when one is known (a provision, an adoption, a listing).
    pub account_id: Option<i64>,
    pub provider: Option<CloudProvider>,
    pub instance_id: Option<String>,
    pub region: Option<String>,
    /// The OS its agent reports, or the image a server was made from.
    pub os: Option<String>,
    pub has_agent: bool,
    /// `null` is operational (PV-01).
    pub install_state: Option<InstallState>,
    pub note: Option<MachineNote>,
    pub colour: MachineColour,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Machines {
    pub machines: Vec<MachineView>,
    /// Accounts that could not be listed just now, each with why (their servers are missing
    /// from the list).
    pub unreachable: Vec<String>,
}

/// The body of `PUT /api/v1/machines/{id}`: every field written down (Save confirms), or
/// `{"confirm_only": true}` to re-confirm what is written without changing it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MachineNoteBody {
    #[serde(default)]
    pub purpose: String,
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub serves: String,
    #[serde(default)]
    pub release: String,
    #[serde(default)]
    pub retire_by: Option<NaiveDate>,
    /// Confirm what is written as it stands (the fields must then be left out).
    #[serde(default)]
    pub confirm_only: bool,
}

/// The longest a written field may be.
pub const NOTE_FIELD_MAX_CHARS: usize = 500;

/// `PUT /api/v1/machines/{id}` (level 8, audited).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WriteMachine {
    pub actor: Actor,
    pub machine_id: String,
    pub body: MachineNoteBody,
}

/// `POST /api/v1/nodes/{id}/adopt` (level 10, audited): adopt the server the page showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AdoptMachine {
    pub actor: Actor,
    pub node_id: NodeId,
    /// The provider's id of the server the page showed: adopted only when it is the one and
    /// only match.
    pub instance_id: String,
}

/// The body of `POST /api/v1/nodes/{id}/adopt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdoptBody {
    pub instance_id: String,
}

/// A server adopted for a node (PV-52): hosting mode operator (our own account).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Adopted {
    pub node_id: NodeId,
    pub account_id: i64,
    pub provider: CloudProvider,
    pub instance_id: String,
    pub ipv4: Option<String>,
    pub ipv6: Option<String>,
    pub region: String,
    pub adopted_by: String,
    pub adopted_at: DateTime<Utc>,
}

/// `GET /api/v1/hosts` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListHosts {
    pub actor: Actor,
}

/// A container site placed on a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostContainer {
    pub node_id: NodeId,
    pub name: String,
    /// Its agent is paired.
    pub live: bool,
}

/// A Docker host's placement record (PV-14) and what lives on it (PV-15).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HostView {
    pub id: i64,
    pub address: String,
    pub flag: AccountFlag,
    pub max_sites: u32,
    pub provisioning_enabled: bool,
    /// The host's own node (its host agent), once linked.
    pub node_id: Option<NodeId>,
    pub node_name: Option<String>,
    pub node_live: bool,
    /// Its container sites (the host agent is not one of them).
    pub containers: Vec<HostContainer>,
    /// Whether provisioning may place one more site on it.
    pub has_room: bool,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub deleted_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Hosts {
    pub hosts: Vec<HostView>,
}

/// The body of `POST /api/v1/hosts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostBody {
    /// The host's public address (IPv4 or IPv6).
    pub address: String,
    /// How many container sites it takes (1..=500).
    pub max_sites: u32,
    #[serde(default = "yes")]
    pub provisioning_enabled: bool,
    /// `main` (the default, PV-12) or `test`.
    #[serde(default)]
    pub flag: Option<AccountFlag>,
}

fn yes() -> bool {
    true
}

/// The most container sites one host record may take.
pub const HOST_MAX_SITES: u32 = 500;

/// `POST /api/v1/hosts` (level 10, audited): a placement record by hand; its node is linked
/// when the host's agent is approved or reports from that address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AddHost {
    pub actor: Actor,
    pub body: HostBody,
}

/// `DELETE /api/v1/hosts/{id}` (level 10, audited): a soft delete, refused while a container
/// site or the host's own agent lives on it (PV-16).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteHost {
    pub actor: Actor,
    pub host_id: i64,
}
