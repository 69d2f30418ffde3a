//! The incidents service's SQL. Every statement is bound, never built from input; callers hold
//! the transaction, so a change, its timeline, its signals and the events it causes commit
//! together. Rows are read into the domain's types here: a word in a row that the domain does
//! not know is an error, never a default.

use capstan_events::incidents::{rpc::WebhookKind, Severity, Status, Triage};
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};
use sqlx::types::Json;

use crate::domain::cases::{CaseState, StoredCase};
use crate::domain::grouping::Silence;
use crate::domain::record::{Actor, Incident};
use crate::domain::signals::{MailPreferences, Recipient, WebhookTarget};
use crate::domain::sources::{Alerts, InstallState, NodeFacts, RecipeName, SourceName};
use crate::domain::NodeId;
use capstan_events::Word as _;

pub mod acts;
pub mod conditions;
mod effects;
pub mod projections;
pub mod signals;

pub use effects::{apply, Audience};

pub type Result<T> = std::result::Result<T, StoreError>;

/// A word in a row that this code does not know: the row is refused, not guessed at.
pub fn unknown(column: &str, value: &str) -> StoreError {
    StoreError::Database(format!("unknown {column} {value:?} in a stored row"))
}

pub fn status(text: &str) -> Result<Status> {
    Status::parse(text).ok_or_else(|| unknown("status", text))
}

pub fn triage(text: &str) -> Result<Triage> {
    Triage::parse(text).ok_or_else(|| unknown("triage", text))
}

pub fn severity(text: &str) -> Result<Severity> {
    Severity::parse(text).ok_or_else(|| unknown("severity", text))
}

pub fn webhook_kind(text: &str) -> Result<WebhookKind> {
    WebhookKind::parse(text).ok_or_else(|| unknown("webhook kind", text))
}

pub fn source(text: &str) -> Result<SourceName> {
    SourceName::read(text).map_err(|_| unknown("source", text))
}

/// The columns of an incident row, in [`IncidentRow`]'s order.
pub const INCIDENT_COLUMNS: &str = "id, node_id, source, severity, status, triage, triage_at, \
     triage_by, snooze_until, title, detail, opened_at, closed_at, last_seen_at, case_id, \
     heard_open, grouped_under";

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct IncidentRow {
    pub id: i64,
    pub node_id: NodeId,
    pub source: String,
    pub severity: String,
    pub status: String,
    pub triage: String,
    pub triage_at: DateTime<Utc>,
    pub triage_by: Option<String>,
    pub snooze_until: Option<DateTime<Utc>>,
    pub title: String,
    pub detail: String,
    pub opened_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub last_seen_at: DateTime<Utc>,
    pub case_id: Option<i64>,
    pub heard_open: bool,
    pub grouped_under: Option<NodeId>,
}

/// An incident as it is stored: the domain's record, its title and the host it is folded
/// under.
#[derive(Debug, Clone)]
pub struct StoredIncident {
    pub incident: Incident,
    pub title: String,
    pub grouped_under: Option<NodeId>,
}

impl TryFrom<IncidentRow> for StoredIncident {
    type Error = StoreError;

    fn try_from(row: IncidentRow) -> Result<StoredIncident> {
        Ok(StoredIncident {
            incident: Incident {
                id: row.id,
                node_id: row.node_id,
                source: source(&row.source)?,
                severity: severity(&row.severity)?,
                status: status(&row.status)?,
                triage: triage(&row.triage)?,
                triage_at: row.triage_at,
                triage_by: row.triage_by.map_or(Actor::Reconciler, Actor::Person),
                snooze_until: row.snooze_until,
                opened_at: row.opened_at,
                closed_at: row.closed_at,
                last_seen_at: row.last_seen_at,
                detail: row.detail,
                case_id: row.case_id,
                heard_open: row.heard_open,
            },
            title: row.title,
            grouped_under: row.grouped_under,
        })
    }
}

fn incidents(rows: Vec<IncidentRow>) -> Result<Vec<StoredIncident>> {
    rows.into_iter().map(StoredIncident::try_from).collect()
}

/// The incidents the reconciler and the case intake work from: the latest of each source on
/// each node (every open one is the latest of its source), for `node` or for every node.
pub async fn held(connection: &mut PgConnection, node: Option<NodeId>) -> Result<Vec<Incident>> {
    let rows: Vec<IncidentRow> = sqlx::query_as(&format!(
        "SELECT DISTINCT ON (node_id, source) {INCIDENT_COLUMNS} FROM incidents
         WHERE $1::bigint IS NULL OR node_id = $1
         ORDER BY node_id, source, id DESC"
    ))
    .bind(node)
    .fetch_all(&mut *connection)
    .await?;
    Ok(incidents(rows)?
        .into_iter()
        .map(|stored| stored.incident)
        .collect())
}

/// One incident, locked for a person's act when `for_update`.
pub async fn incident(
    connection: &mut PgConnection,
    id: i64,
    for_update: bool,
) -> Result<Option<StoredIncident>> {
    let lock = if for_update { "FOR UPDATE" } else { "" };
    let row: Option<IncidentRow> = sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM incidents WHERE id = $1 {lock}"
    ))
    .bind(id)
    .fetch_optional(&mut *connection)
    .await?;
    row.map(StoredIncident::try_from).transpose()
}

/// Every incident for the list, newest first, narrowed by node and source (the view, which
/// depends on the time of reading, is the domain's to apply).
pub async fn listed(
    connection: &mut PgConnection,
    node: Option<NodeId>,
    source: Option<&str>,
    happening: Option<bool>,
) -> Result<Vec<StoredIncident>> {
    let rows: Vec<IncidentRow> = sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM incidents
         WHERE ($1::bigint IS NULL OR node_id = $1)
           AND ($2::text IS NULL OR source = $2)
           AND ($3::boolean IS NULL OR (status = 'open') = $3)
         ORDER BY id DESC"
    ))
    .bind(node)
    .bind(source)
    .bind(happening)
    .fetch_all(&mut *connection)
    .await?;
    incidents(rows)
}

/// The open incidents of `host`'s containers folded under it, of `source`.
pub async fn grouped_under(
    connection: &mut PgConnection,
    host: NodeId,
    source: &str,
) -> Result<Vec<StoredIncident>> {
    let rows: Vec<IncidentRow> = sqlx::query_as(&format!(
        "SELECT {INCIDENT_COLUMNS} FROM incidents
         WHERE grouped_under = $1 AND source = $2 ORDER BY id"
    ))
    .bind(host)
    .bind(source)
    .fetch_all(&mut *connection)
    .await?;
    incidents(rows)
}

/// The host's latest incident of `source`: the one a container's incident is folded under.
pub async fn host_incident(
    connection: &mut PgConnection,
    host: NodeId,
    source: &str,
) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM incidents WHERE node_id = $1 AND source = $2 ORDER BY id DESC LIMIT 1",
    )
    .bind(host)
    .bind(source)
    .fetch_optional(&mut *connection)
    .await?)
}

#[derive(Debug, Clone, sqlx::FromRow)]
struct NodeRow {
    node_id: NodeId,
    paired_at: Option<DateTime<Utc>>,
    last_checkin_at: Option<DateTime<Utc>>,
    install_state: Option<String>,
    recipes: Json<Vec<String>>,
    docker_host: Option<NodeId>,
    in_test_account: bool,
    alerts: String,
}

pub fn alerts(text: &str) -> Result<Alerts> {
    match text {
        "automatic" => Ok(Alerts::Automatic),
        "on" => Ok(Alerts::On),
        "off" => Ok(Alerts::Off),
        other => Err(unknown("alerts", other)),
    }
}

pub const fn alerts_word(alerts: Alerts) -> &'static str {
    match alerts {
        Alerts::Automatic => "automatic",
        Alerts::On => "on",
        Alerts::Off => "off",
    }
}

impl NodeRow {
    fn facts(self, checkins_as_of: Option<DateTime<Utc>>) -> Result<NodeFacts> {
        Ok(NodeFacts {
            node_id: self.node_id,
            paired_at: self.paired_at,
            last_checkin_at: self.last_checkin_at,
            checkins_as_of,
            install_state: InstallState::from_reported(self.install_state.as_deref()),
            recipes: self.recipes.0,
            alerts: alerts(&self.alerts)?,
            in_test_account: self.in_test_account,
            docker_host: self.docker_host,
        })
    }
}

const NODE_COLUMNS: &str =
    "node_id, paired_at, last_checkin_at, install_state, recipes, host_node_id AS docker_host, \
     in_test_account, alerts";
/// The nodes (other services' conditions are apart, in `conditions.rs`).
const NODE_FROM: &str = "nodes";

/// How far the agent channel's reports of check-ins run.
pub async fn checkins_as_of(connection: &mut PgConnection) -> Result<Option<DateTime<Utc>>> {
    Ok(
        sqlx::query_scalar("SELECT as_of FROM checkins_known WHERE id = 1")
            .fetch_optional(&mut *connection)
            .await?,
    )
}

/// What this service holds about every node it knows.
pub async fn nodes(connection: &mut PgConnection) -> Result<Vec<NodeFacts>> {
    let as_of = checkins_as_of(connection).await?;
    let rows: Vec<NodeRow> = sqlx::query_as(&format!(
        "SELECT {NODE_COLUMNS} FROM {NODE_FROM} ORDER BY node_id"
    ))
    .fetch_all(&mut *connection)
    .await?;
    rows.into_iter().map(|row| row.facts(as_of)).collect()
}

/// What this service holds about `node`, if it knows it.
pub async fn node(connection: &mut PgConnection, node: NodeId) -> Result<Option<NodeFacts>> {
    let as_of = checkins_as_of(connection).await?;
    let row: Option<NodeRow> = sqlx::query_as(&format!(
        "SELECT {NODE_COLUMNS} FROM {NODE_FROM} WHERE node_id = $1"
    ))
    .bind(node)
    .fetch_optional(&mut *connection)
    .await?;
    row.map(|row| row.facts(as_of)).transpose()
}

/// Node names by id.
pub type NodeNames = std::collections::HashMap<NodeId, String>;

/// Node names by id, for the answers that show them.
pub async fn node_names(connection: &mut PgConnection) -> Result<NodeNames> {
    let rows: Vec<(NodeId, String)> = sqlx::query_as("SELECT node_id, name FROM nodes")
        .fetch_all(&mut *connection)
        .await?;
    Ok(rows.into_iter().collect())
}

/// Silences not deleted whose end has not come.
pub async fn active_silences(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
) -> Result<Vec<Silence>> {
    let rows: Vec<(NodeId, String, String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT node_id, by_person, reason, ends_at FROM silences
         WHERE deleted_at IS NULL AND ends_at > $1",
    )
    .bind(now)
    .fetch_all(&mut *connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(node_id, by, reason, ends_at)| Silence {
            node_id,
            by,
            reason,
            ends_at,
        })
        .collect())
}

/// Who a signal tells: every active level-10 operator, with their address and preferences
/// (no address when mail is not `enabled`, so no mail delivery is made).
pub async fn recipients(connection: &mut PgConnection, enabled: bool) -> Result<Vec<Recipient>> {
    /// An operator, their address and their preferences (absent: the default).
    type Row = (i64, Option<String>, Option<bool>, Option<bool>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT o.operator_id, o.email, p.email_warning, p.email_critical
         FROM operators o LEFT JOIN mail_preferences p USING (operator_id)
         WHERE o.active AND o.level = 10 ORDER BY o.operator_id",
    )
    .fetch_all(&mut *connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(operator_id, email, warning, critical)| {
            let default = MailPreferences::default();
            Recipient {
                operator_id,
                email: email.filter(|_| enabled),
                mail: MailPreferences {
                    email_warning: warning.unwrap_or(default.email_warning),
                    email_critical: critical.unwrap_or(default.email_critical),
                },
            }
        })
        .collect())
}

/// The webhooks a signal may go to.
pub async fn webhook_targets(connection: &mut PgConnection) -> Result<Vec<WebhookTarget>> {
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT id, min_severity FROM webhooks WHERE deleted_at IS NULL ORDER BY id",
    )
    .fetch_all(&mut *connection)
    .await?;
    rows.into_iter()
        .map(|(webhook_id, min_severity)| {
            Ok(WebhookTarget {
                webhook_id,
                min_severity: severity(&min_severity)?,
            })
        })
        .collect()
}

#[derive(Debug, Clone, sqlx::FromRow)]
struct CaseRow {
    source: String,
    id: i64,
    state: String,
    opened_at: DateTime<Utc>,
    closed_at: Option<DateTime<Utc>>,
    summary: String,
    notes: i32,
    last_note: Option<String>,
    body: Option<String>,
    last_seen_at: DateTime<Utc>,
}

/// The cases held for `node`, locked: the intake of one claim works on them alone.
pub async fn cases(connection: &mut PgConnection, node: NodeId) -> Result<Vec<StoredCase>> {
    let rows: Vec<CaseRow> = sqlx::query_as(
        "SELECT source, id, state, opened_at, closed_at, summary, notes, last_note, body,
                last_seen_at
         FROM cases WHERE node_id = $1 ORDER BY source, id FOR UPDATE",
    )
    .bind(node)
    .fetch_all(&mut *connection)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(StoredCase {
                source: RecipeName::parse(&row.source)
                    .map_err(|_| unknown("case source", &row.source))?,
                id: row.id,
                state: match row.state.as_str() {
                    "open" => CaseState::Open,
                    "closed" => CaseState::Closed,
                    other => return Err(unknown("case state", other)),
                },
                opened_at: row.opened_at,
                closed_at: row.closed_at,
                summary: row.summary,
                notes: u32::try_from(row.notes).unwrap_or_default(),
                last_note: row.last_note,
                body: row.body,
                last_seen_at: row.last_seen_at,
            })
        })
        .collect()
}

pub const fn case_state_word(state: CaseState) -> &'static str {
    match state {
        CaseState::Open => "open",
        CaseState::Closed => "closed",
    }
}
