//! The questions the gateway asks the incidents service (`capstan.rpc.incidents.*`), for the
//! operator API (`/api/v1/incidents`, `/silences`, `/webhooks`, `/me/notifications`) and the
//! pages. Each carries the [`Actor`]; the service checks the level before it reads or changes
//! anything.

use crate::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Severity, Status, Triage};
use crate::rpc::Actor;

// The rpcs under `capstan.rpc.incidents.`: each op's name, request and answer, declared once.
crate::rpc! { crate::Domain::Incidents;
    "list": ListIncidents => Incidents,
    "get": GetIncident => IncidentDetail,
    "triage": TriageIncident => Triaged,
    "note": AddNote => Done,
    "header": HeaderRequest => Header,
    "list_silences": ListSilences => Silences,
    "create_silence": CreateSilence => SilenceView,
    "delete_silence": DeleteSilence => Done,
    "list_webhooks": ListWebhooks => Webhooks,
    "create_webhook": CreateWebhook => WebhookCreated,
    "delete_webhook": DeleteWebhook => Done,
    "get_notifications": GetNotifications => MailPreferences,
    "set_notifications": SetNotifications => MailPreferences,
    "bell": BellRequest => Bell,
    "set_alerts": SetAlerts => Done,
    "webhook_deliveries": WebhookDeliveriesRequest => WebhookDeliveries,
}

/// `list_silences`: every silence the actor may see.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ListSilences(pub ListRequest);

/// `list_webhooks`: every webhook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ListWebhooks(pub ListRequest);

/// `delete_silence`: the silence to end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct DeleteSilence(pub DeleteRequest);

/// `delete_webhook`: the webhook to delete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct DeleteWebhook(pub DeleteRequest);

/// `get_notifications`: an operator's mail preferences.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct GetNotifications(pub NotificationsRequest);

/// `bell`: an operator's bell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct BellRequest(pub NotificationsRequest);

/// `GET /api/v1/incidents?view=&node_id=&source=&happening=` (level 7). `view` is read by the
/// service (needs_you when absent; an unknown one is refused naming the values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListIncidents {
    pub actor: Actor,
    #[serde(default)]
    pub view: Option<String>,
    #[serde(default)]
    pub node_id: Option<NodeId>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub happening: Option<bool>,
}

/// One incident as the API shows it. `needs_you` and `triage` are read at the time of the
/// answer (an expired snooze reads as new).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IncidentView {
    pub id: i64,
    pub node_id: NodeId,
    /// The node's name as the agent channel last said it, when known.
    pub node_name: Option<String>,
    pub source: String,
    pub title: String,
    pub detail: String,
    pub severity: Severity,
    pub status: Status,
    pub triage: Triage,
    /// One of `new`, `snoozed`, `waiting`, `resolved`, `ignored`.
    pub view: String,
    pub needs_you: bool,
    pub snooze_until: Option<DateTime<Utc>>,
    pub opened_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub last_seen_at: DateTime<Utc>,
    /// The Docker host's incident this one is folded under, if any.
    pub group_id: Option<i64>,
}

/// How many incidents are in each view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct ViewCounts {
    pub needs_you: u64,
    pub new: u64,
    pub snoozed: u64,
    pub waiting: u64,
    pub resolved: u64,
    pub ignored: u64,
    pub all: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Incidents {
    pub incidents: Vec<IncidentView>,
    /// The counts of the node/source/happening filter, over every view.
    pub counts: ViewCounts,
}

/// `GET /api/v1/incidents/{id}` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetIncident {
    pub actor: Actor,
    pub id: i64,
}

/// One line of the timeline, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TimelineView {
    pub at: DateTime<Utc>,
    /// `opened`, `cleared`, `reopened`, `triage`, `note`.
    pub kind: String,
    /// An operator's name, or `reconciler`.
    pub by: String,
    pub triage: Option<Triage>,
    pub note: Option<String>,
}

/// One delivery of a signal: a bell, a mail or a webhook, and how it went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SignalView {
    pub at: DateTime<Utc>,
    /// `bell`, `mail`, `webhook`, or `held` when nobody was told (the target says why).
    pub channel: String,
    /// The operator or webhook told, or why the signal was held back.
    pub target: String,
    /// `pending`, `delivered`, `given_up`, `held`.
    pub state: String,
    pub attempts: u32,
    /// Each attempt: when, and what the other end said.
    pub log: Vec<AttemptView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AttemptView {
    pub at: DateTime<Utc>,
    pub ok: bool,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct IncidentDetail {
    #[serde(flatten)]
    pub incident: IncidentView,
    pub timeline: Vec<TimelineView>,
    pub signals: Vec<SignalView>,
    /// Incidents of the host's containers folded under this one.
    pub grouped: Vec<IncidentView>,
}

/// `POST /api/v1/incidents/{id}/triage` (level 8): `do` is one of `resolved`, `ignored`,
/// `new`, `snooze_4`, `snooze_24`, `snooze_72`, `snooze_168`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TriageIncident {
    pub actor: Actor,
    pub id: i64,
    #[serde(rename = "do")]
    pub act: String,
    #[serde(default)]
    pub note: Option<String>,
}

/// What a triage act did: the incident after it, and whether anything was recorded (setting
/// the triage it already has records nothing, IN-19).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Triaged {
    pub incident: IncidentView,
    pub recorded: bool,
}

/// `POST /api/v1/incidents/{id}/notes` (level 8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AddNote {
    pub actor: Actor,
    pub id: i64,
    pub note: String,
}

/// The header line (IN-16), from counts alone; `colour` is absent when there is nothing to say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HeaderRequest {
    pub actor: Actor,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Header {
    pub needs_you: u64,
    pub happening: u64,
    /// `red`, `amber`, `blue`, or `None` when the line is absent.
    pub colour: Option<String>,
    pub words: String,
}

/// Asks for everything of one kind (silences, webhooks) the actor may see.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListRequest {
    pub actor: Actor,
}

/// Removes one thing by id (a silence, a webhook).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteRequest {
    pub actor: Actor,
    pub id: i64,
}

/// `POST /api/v1/silences` (level 8): a maintenance window on a node (and, on a Docker host,
/// its containers) until `ends_at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateSilence {
    pub actor: Actor,
    pub node_id: NodeId,
    pub ends_at: DateTime<Utc>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SilenceView {
    pub id: i64,
    pub node_id: NodeId,
    pub node_name: Option<String>,
    pub by: String,
    pub reason: String,
    pub created_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub active: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Silences {
    pub silences: Vec<SilenceView>,
}

/// What a webhook's body looks like: the Standard Webhooks shape, or Slack's incoming-webhook
/// message.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
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
pub enum WebhookKind {
    Standard,
    Slack,
}

/// `POST /api/v1/webhooks` (level 10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateWebhook {
    pub actor: Actor,
    pub url: String,
    pub kind: WebhookKind,
    pub min_severity: Severity,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookView {
    pub id: i64,
    pub url: String,
    pub kind: WebhookKind,
    pub min_severity: Severity,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Webhooks {
    pub webhooks: Vec<WebhookView>,
}

/// The answer to creating a webhook: its secret, shown this once and never again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookCreated {
    #[serde(flatten)]
    pub webhook: WebhookView,
    pub secret: String,
}

/// The webhooks' delivery log (level 10): the latest deliveries to any webhook, newest first,
/// each with its attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookDeliveriesRequest {
    pub actor: Actor,
    /// At most this many (the service caps it).
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookDelivery {
    pub id: i64,
    /// When the signal was made.
    pub at: DateTime<Utc>,
    pub incident_id: i64,
    pub webhook_id: i64,
    /// The webhook's address (kept after the webhook is deleted).
    pub url: Option<String>,
    /// `pending`, `delivered`, `given_up`.
    pub state: String,
    pub attempts: u32,
    pub log: Vec<AttemptView>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WebhookDeliveries {
    pub deliveries: Vec<WebhookDelivery>,
}

/// One operator's mail preferences, keyed by the gateway's operator id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NotificationsRequest {
    pub actor: Actor,
    pub operator_id: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MailPreferences {
    pub email_warning: bool,
    pub email_critical: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetNotifications {
    pub actor: Actor,
    pub operator_id: i64,
    pub preferences: MailPreferences,
}

/// The bell: an operator's latest in-app notifications, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BellItem {
    pub at: DateTime<Utc>,
    pub incident_id: i64,
    pub node_id: NodeId,
    pub node_name: Option<String>,
    pub title: String,
    pub severity: Severity,
    /// `opened`, `reopened`, `unproven`.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Bell {
    pub items: Vec<BellItem>,
}

/// A node's Alerts setting (IN-15): `automatic`, `on` or `off` (level 8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetAlerts {
    pub actor: Actor,
    pub node_id: NodeId,
    pub alerts: String,
}

/// An act that answers nothing but its success.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Done {}
