//! The monitor's SQL: its projection of the agent channel's nodes, each node's check with its
//! live state and history, each node's served certificate, and the edge probe runs. Rows are read into the
//! contract's and the domain's types; an unknown word in a row is an error, never a guess.

use capstan_events::monitor::rpc::{
    EdgePath, EdgeProbeStatus, EdgeProbeView, EdgeVerdict, UptimeCheck,
};
use capstan_events::monitor::{
    CertProblem, CertProblemChanged, CheckKind, SiteDown, SiteUp, UptimeStatus,
};
use capstan_events::Envelope;
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::{DateTime, Utc};
use sqlx::types::Json;

use crate::domain::conditions;
use crate::domain::uptime::{Live, Setting, Up};
use crate::domain::NodeId;
use capstan_events::Word as _;

pub type Result<T> = std::result::Result<T, StoreError>;

/// The status cadence's and the health dots' SQL (MO-05..MO-07).
pub mod status;

pub(crate) fn unknown(kind: &str, text: &str) -> StoreError {
    StoreError::Database(format!("{text:?} is not a {kind}"))
}

// ---- the agent channel's nodes -------------------------------------------------------------

/// A node was paired (the kit's projection wrote its row): its check exists from now on
/// (switched on, waiting for a URL). Its check keeps running after its pairing ends while
/// switched on: a row kept only to watch a site that manages itself still does that job.
pub async fn check_made(connection: &mut PgConnection, node: NodeId) -> Result<()> {
    sqlx::query("INSERT INTO checks (node_id) VALUES ($1) ON CONFLICT (node_id) DO NOTHING")
        .bind(node)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// Whether the node is known here.
pub async fn node_known(connection: &mut PgConnection, node: NodeId) -> Result<bool> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM nodes WHERE node_id = $1)")
            .bind(node)
            .fetch_one(&mut *connection)
            .await?,
    )
}

/// The node's reported addresses.
pub async fn addresses(connection: &mut PgConnection, node: NodeId) -> Result<Vec<String>> {
    let found: Option<Json<Vec<String>>> =
        sqlx::query_scalar("SELECT addresses FROM nodes WHERE node_id = $1")
            .bind(node)
            .fetch_optional(&mut *connection)
            .await?;
    Ok(found.map(|json| json.0).unwrap_or_default())
}

// ---- checks --------------------------------------------------------------------------------

const CHECK_COLUMNS: &str = "node_id, enabled, kind, url, keyword, interval_secs, status, \
     consecutive_failures, failing_since, down_since, reason, checked_at, response_ms, next_check_at";

/// A check's row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CheckRow {
    pub node_id: NodeId,
    pub enabled: bool,
    pub kind: String,
    pub url: Option<String>,
    pub keyword: Option<String>,
    pub interval_secs: i32,
    pub status: Option<String>,
    pub consecutive_failures: i32,
    pub failing_since: Option<DateTime<Utc>>,
    pub down_since: Option<DateTime<Utc>>,
    pub reason: Option<String>,
    pub checked_at: Option<DateTime<Utc>>,
    pub response_ms: Option<i32>,
    pub next_check_at: Option<DateTime<Utc>>,
}

impl CheckRow {
    pub fn kind(&self) -> Result<CheckKind> {
        CheckKind::parse(&self.kind).ok_or_else(|| unknown("check kind", &self.kind))
    }

    pub fn live(&self) -> Result<Live> {
        let status = match self.status.as_deref() {
            None => None,
            Some("up") => Some(Up::Up),
            Some("down") => Some(Up::Down),
            Some(other) => return Err(unknown("uptime status", other)),
        };
        Ok(Live {
            status,
            consecutive_failures: u32::try_from(self.consecutive_failures).unwrap_or(0),
            failing_since: self.failing_since,
            down_since: self.down_since,
            reason: self.reason.clone(),
        })
    }

    /// The check in the API's words.
    pub fn view(&self) -> Result<UptimeCheck> {
        Ok(UptimeCheck {
            node_id: self.node_id,
            enabled: self.enabled,
            kind: self.kind()?,
            url: self.url.clone(),
            keyword: self.keyword.clone(),
            interval_secs: u32::try_from(self.interval_secs).unwrap_or(0),
            status: self.live()?.status(),
            consecutive_failures: u32::try_from(self.consecutive_failures).unwrap_or(0),
            down_since: self.down_since,
            reason: self.reason.clone(),
            checked_at: self.checked_at,
            response_ms: self.response_ms.and_then(|ms| u32::try_from(ms).ok()),
        })
    }
}

fn status_word(status: Option<Up>) -> Option<&'static str> {
    status.map(|status| match status {
        Up::Up => "up",
        Up::Down => "down",
    })
}

/// Every check, or those of one status, by node.
pub async fn checks(
    connection: &mut PgConnection,
    status: Option<UptimeStatus>,
) -> Result<Vec<CheckRow>> {
    let filter = match status {
        None => "",
        Some(UptimeStatus::Up) => "WHERE status = 'up'",
        Some(UptimeStatus::Down) => "WHERE status = 'down'",
        Some(UptimeStatus::Unknown) => "WHERE status IS NULL",
    };
    Ok(sqlx::query_as(&format!(
        "SELECT {CHECK_COLUMNS} FROM checks {filter} ORDER BY node_id"
    ))
    .fetch_all(&mut *connection)
    .await?)
}

/// How many checks are up, down, unknown (on, with a URL, no answer yet) and off.
pub async fn uptime_counts(connection: &mut PgConnection) -> Result<(i64, i64, i64, i64)> {
    Ok(sqlx::query_as(
        "SELECT count(*) FILTER (WHERE enabled AND url IS NOT NULL AND status = 'up'),
                count(*) FILTER (WHERE enabled AND url IS NOT NULL AND status = 'down'),
                count(*) FILTER (WHERE enabled AND url IS NOT NULL AND status IS NULL),
                count(*) FILTER (WHERE NOT enabled OR url IS NULL)
         FROM checks",
    )
    .fetch_one(&mut *connection)
    .await?)
}

/// The checks down the longest, at most `limit`.
pub async fn longest_down(connection: &mut PgConnection, limit: i64) -> Result<Vec<CheckRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {CHECK_COLUMNS} FROM checks
         WHERE enabled AND url IS NOT NULL AND status = 'down'
         ORDER BY down_since, node_id LIMIT $1"
    ))
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?)
}

/// One node's check, locked for the rest of the transaction when `lock`.
pub async fn check(
    connection: &mut PgConnection,
    node: NodeId,
    lock: bool,
) -> Result<Option<CheckRow>> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    Ok(sqlx::query_as(&format!(
        "SELECT {CHECK_COLUMNS} FROM checks WHERE node_id = $1{lock}"
    ))
    .bind(node)
    .fetch_optional(&mut *connection)
    .await?)
}

/// Writes an operator's setting; `live` and `next_check_at` as the caller decided them.
pub async fn set_check(
    connection: &mut PgConnection,
    node: NodeId,
    setting: &Setting,
    live: &Live,
    next_check_at: Option<DateTime<Utc>>,
    reset_answer: bool,
) -> Result<()> {
    sqlx::query("INSERT INTO checks (node_id) VALUES ($1) ON CONFLICT (node_id) DO NOTHING")
        .bind(node)
        .execute(&mut *connection)
        .await?;
    sqlx::query(
        "UPDATE checks SET enabled = $2, kind = $3, url = $4, keyword = $5, interval_secs = $6,
             status = $7, consecutive_failures = $8, failing_since = $9, down_since = $10,
             reason = $11, next_check_at = $12,
             checked_at = CASE WHEN $13 THEN NULL ELSE checked_at END,
             response_ms = CASE WHEN $13 THEN NULL ELSE response_ms END
         WHERE node_id = $1",
    )
    .bind(node)
    .bind(setting.enabled)
    .bind(setting.kind.as_str())
    .bind(setting.url.as_ref().map(|url| url.as_str()))
    .bind(setting.keyword.as_deref())
    .bind(i32::try_from(setting.interval_secs).unwrap_or(i32::MAX))
    .bind(status_word(live.status))
    .bind(i32::try_from(live.consecutive_failures).unwrap_or(i32::MAX))
    .bind(live.failing_since)
    .bind(live.down_since)
    .bind(live.reason.as_deref())
    .bind(next_check_at)
    .bind(reset_answer)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A check that is due, as taken.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Due {
    pub node_id: NodeId,
    pub kind: String,
    pub url: String,
    pub keyword: Option<String>,
    pub interval_secs: i32,
    pub next_check_at: DateTime<Utc>,
    pub addresses: Json<Vec<String>>,
}

/// Up to `limit` checks due at `now` of operational nodes, switched on and with a URL, that no
/// other replica has taken; locked for the rest of the transaction (the caller moves each one's
/// next check on before it commits).
pub async fn due_checks(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<Due>> {
    Ok(sqlx::query_as(
        "SELECT c.node_id, c.kind, c.url, c.keyword, c.interval_secs, c.next_check_at, n.addresses
         FROM checks c JOIN nodes n ON n.node_id = c.node_id
         WHERE c.next_check_at <= $1 AND c.enabled AND c.url IS NOT NULL
           AND n.install_state IS NULL
         ORDER BY c.next_check_at
         LIMIT $2
         FOR UPDATE OF c SKIP LOCKED",
    )
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?)
}

/// Moves each taken check's next check on.
pub async fn reschedule(
    connection: &mut PgConnection,
    nodes: &[NodeId],
    next: &[DateTime<Utc>],
) -> Result<()> {
    sqlx::query(
        "UPDATE checks SET next_check_at = due.next
         FROM UNNEST($1::bigint[], $2::timestamptz[]) AS due (node_id, next)
         WHERE checks.node_id = due.node_id",
    )
    .bind(nodes)
    .bind(next)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Writes a check's new live state and its history point.
pub async fn record(
    connection: &mut PgConnection,
    node: NodeId,
    live: &Live,
    ok: bool,
    at: DateTime<Utc>,
    response_ms: u32,
) -> Result<()> {
    let response_ms = i32::try_from(response_ms).unwrap_or(i32::MAX);
    sqlx::query(
        "UPDATE checks SET status = $2, consecutive_failures = $3, failing_since = $4,
             down_since = $5, reason = $6, checked_at = $7, response_ms = $8
         WHERE node_id = $1",
    )
    .bind(node)
    .bind(status_word(live.status))
    .bind(i32::try_from(live.consecutive_failures).unwrap_or(i32::MAX))
    .bind(live.failing_since)
    .bind(live.down_since)
    .bind(live.reason.as_deref())
    .bind(at)
    .bind(response_ms)
    .execute(&mut *connection)
    .await?;
    sqlx::query("INSERT INTO history (node_id, at, ok, response_ms) VALUES ($1, $2, $3, $4)")
        .bind(node)
        .bind(at)
        .bind(ok)
        .bind(response_ms)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// A node's history since `since`, oldest first.
pub async fn history(
    connection: &mut PgConnection,
    node: NodeId,
    since: DateTime<Utc>,
) -> Result<Vec<(DateTime<Utc>, bool, Option<i32>)>> {
    Ok(sqlx::query_as(
        "SELECT at, ok, response_ms FROM history WHERE node_id = $1 AND at >= $2 ORDER BY at",
    )
    .bind(node)
    .bind(since)
    .fetch_all(&mut *connection)
    .await?)
}

/// Forgets history older than `before`; how many points.
pub async fn prune_history(connection: &mut PgConnection, before: DateTime<Utc>) -> Result<u64> {
    Ok(sqlx::query("DELETE FROM history WHERE at < $1")
        .bind(before)
        .execute(&mut *connection)
        .await?
        .rows_affected())
}

// ---- events --------------------------------------------------------------------------------

fn about(node: NodeId) -> Option<String> {
    Some(format!("node/{node}"))
}

/// The site went down: the public event and the `plane:site_down` condition, together.
pub async fn site_down(connection: &mut PgConnection, event: SiteDown) -> Result<()> {
    let node = event.node_id;
    outbox::push_condition(connection, conditions::site_down(&event)).await?;
    outbox::push(connection, Envelope::new(event, about(node))).await
}

/// The site is up again (or no longer checked): the event, and `plane:site_down` cleared.
pub async fn site_up(connection: &mut PgConnection, event: SiteUp) -> Result<()> {
    let node = event.node_id;
    outbox::push_condition(connection, conditions::site_up(&event)).await?;
    outbox::push(connection, Envelope::new(event, about(node))).await
}

/// The served certificate's problem changed: the event and the `plane:cert_problem` condition.
pub async fn cert_problem_changed(
    connection: &mut PgConnection,
    event: CertProblemChanged,
) -> Result<()> {
    let node = event.node_id;
    outbox::push_condition(connection, conditions::cert_problem(&event)).await?;
    outbox::push(connection, Envelope::new(event, about(node))).await
}

// ---- certificates --------------------------------------------------------------------------

/// A node's certificate row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CertificateRow {
    pub node_id: NodeId,
    pub name: String,
    pub checked_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    pub names: Json<Vec<String>>,
    pub problem: Option<Json<CertProblem>>,
    pub placeholder_since: Option<DateTime<Utc>>,
    pub read_error: Option<String>,
}

const CERT_COLUMNS: &str =
    "node_id, name, checked_at, expires_at, names, problem, placeholder_since, read_error";

pub async fn certificate(
    connection: &mut PgConnection,
    node: NodeId,
    lock: bool,
) -> Result<Option<CertificateRow>> {
    let lock = if lock { " FOR UPDATE" } else { "" };
    Ok(sqlx::query_as(&format!(
        "SELECT {CERT_COLUMNS} FROM certificates WHERE node_id = $1{lock}"
    ))
    .bind(node)
    .fetch_optional(&mut *connection)
    .await?)
}

/// The node's certificate is to be read for `name` from `next_check_at`; a different name
/// than before forgets what was read for the old one.
pub async fn watch_certificate(
    connection: &mut PgConnection,
    node: NodeId,
    name: &str,
    next_check_at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO certificates (node_id, name, next_check_at) VALUES ($1, $2, $3)
         ON CONFLICT (node_id) DO UPDATE
         SET next_check_at = EXCLUDED.next_check_at, name = EXCLUDED.name,
             checked_at = CASE WHEN certificates.name = EXCLUDED.name THEN certificates.checked_at END,
             expires_at = CASE WHEN certificates.name = EXCLUDED.name THEN certificates.expires_at END,
             names = CASE WHEN certificates.name = EXCLUDED.name THEN certificates.names ELSE '[]' END,
             problem = CASE WHEN certificates.name = EXCLUDED.name THEN certificates.problem END,
             placeholder_since = CASE WHEN certificates.name = EXCLUDED.name
                                 THEN certificates.placeholder_since END,
             read_error = CASE WHEN certificates.name = EXCLUDED.name THEN certificates.read_error END",
    )
    .bind(node)
    .bind(name)
    .bind(next_check_at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// The node's certificate is no longer watched (its check is off or has no URL): nothing is
/// read and its problem is forgotten.
pub async fn unwatch_certificate(connection: &mut PgConnection, node: NodeId) -> Result<()> {
    sqlx::query(
        "UPDATE certificates SET next_check_at = NULL, problem = NULL, placeholder_since = NULL
         WHERE node_id = $1",
    )
    .bind(node)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A certificate read that is due.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DueCertificate {
    pub node_id: NodeId,
    pub name: String,
    pub url: String,
    pub addresses: Json<Vec<String>>,
    pub container: bool,
}

/// Up to `limit` certificate reads due at `now`, of operational nodes whose check is on and
/// still names the same host; each moved on to `next` before the transaction commits.
pub async fn take_due_certificates(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    next: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<DueCertificate>> {
    Ok(sqlx::query_as(
        "WITH due AS (
             SELECT t.node_id FROM certificates t
             JOIN checks c ON c.node_id = t.node_id
             JOIN nodes n ON n.node_id = t.node_id
             WHERE t.next_check_at <= $1 AND c.enabled AND c.url IS NOT NULL
               AND n.install_state IS NULL
             ORDER BY t.next_check_at
             LIMIT $3
             FOR UPDATE OF t SKIP LOCKED
         )
         UPDATE certificates t SET next_check_at = $2
         FROM due, checks c, nodes n
         WHERE t.node_id = due.node_id AND c.node_id = t.node_id AND n.node_id = t.node_id
         RETURNING t.node_id, t.name, c.url, n.addresses, n.container IS NOT NULL AS container",
    )
    .bind(now)
    .bind(next)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?)
}

/// Writes what a read found.
#[allow(clippy::too_many_arguments)]
pub async fn record_certificate(
    connection: &mut PgConnection,
    node: NodeId,
    checked_at: DateTime<Utc>,
    expires_at: Option<DateTime<Utc>>,
    names: &[String],
    problem: Option<&CertProblem>,
    placeholder_since: Option<DateTime<Utc>>,
    read_error: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "UPDATE certificates SET checked_at = $2, expires_at = $3, names = $4, problem = $5,
             placeholder_since = $6, read_error = $7
         WHERE node_id = $1",
    )
    .bind(node)
    .bind(checked_at)
    .bind(expires_at)
    .bind(Json(names))
    .bind(problem.map(Json))
    .bind(placeholder_since)
    .bind(read_error)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

// ---- edge probes ---------------------------------------------------------------------------

const PROBE_COLUMNS: &str = "id, node_id, status, url, addresses, requested_by, requested_at, \
     started_at, finished_at, rounds, paths, verdict, notes, error";

/// An edge probe run's row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProbeRow {
    pub id: i64,
    pub node_id: NodeId,
    pub status: String,
    pub url: String,
    pub addresses: Json<Vec<String>>,
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub rounds: i32,
    pub paths: Json<Vec<EdgePath>>,
    pub verdict: Option<String>,
    pub notes: Json<Vec<String>>,
    pub error: Option<String>,
}

impl ProbeRow {
    /// The run in the API's words.
    pub fn view(&self) -> Result<EdgeProbeView> {
        let status = EdgeProbeStatus::parse(&self.status)
            .ok_or_else(|| unknown("edge probe status", &self.status))?;
        let verdict = match self.verdict.as_deref() {
            None => None,
            Some(text) => Some(
                [
                    EdgeVerdict::SlowThroughEdge,
                    EdgeVerdict::SlowOnServer,
                    EdgeVerdict::NoProblemSeen,
                ]
                .into_iter()
                .find(|verdict| verdict.sentence() == text)
                .ok_or_else(|| unknown("verdict", text))?,
            ),
        };
        Ok(EdgeProbeView {
            id: self.id,
            node_id: self.node_id,
            status,
            url: self.url.clone(),
            requested_by: self.requested_by.clone(),
            requested_at: self.requested_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            rounds: u32::try_from(self.rounds).unwrap_or(0),
            paths: self.paths.0.clone(),
            verdict,
            notes: self.notes.0.clone(),
            error: self.error.clone(),
        })
    }
}

/// Locks the node's row for the rest of the transaction (one run is counted against the
/// hourly limit at a time) and answers its uptime URL and addresses; `None` when unknown.
pub async fn lock_node_for_probe(
    connection: &mut PgConnection,
    node: NodeId,
) -> Result<Option<(Option<String>, Vec<String>)>> {
    let found: Option<(Option<String>, Json<Vec<String>>)> = sqlx::query_as(
        "SELECT c.url, n.addresses FROM nodes n LEFT JOIN checks c ON c.node_id = n.node_id
         WHERE n.node_id = $1 FOR UPDATE OF n",
    )
    .bind(node)
    .fetch_optional(&mut *connection)
    .await?;
    Ok(found.map(|(url, addresses)| (url, addresses.0)))
}

/// Runs asked for this node since `since`.
pub async fn probes_since(
    connection: &mut PgConnection,
    node: NodeId,
    since: DateTime<Utc>,
) -> Result<u32> {
    let count: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM edge_probes WHERE node_id = $1 AND requested_at > $2",
    )
    .bind(node)
    .bind(since)
    .fetch_one(&mut *connection)
    .await?;
    Ok(u32::try_from(count).unwrap_or(u32::MAX))
}

/// A run is asked for; its id.
pub async fn queue_probe(
    connection: &mut PgConnection,
    node: NodeId,
    url: &str,
    addresses: &[String],
    requested_by: &str,
    at: DateTime<Utc>,
) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "INSERT INTO edge_probes (node_id, url, addresses, requested_by, requested_at)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(node)
    .bind(url)
    .bind(Json(addresses))
    .bind(requested_by)
    .bind(at)
    .fetch_one(&mut *connection)
    .await?)
}

pub async fn probe(connection: &mut PgConnection, id: i64) -> Result<Option<ProbeRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {PROBE_COLUMNS} FROM edge_probes WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(&mut *connection)
    .await?)
}

/// The node's newest `limit` runs, newest first.
pub async fn node_probes(
    connection: &mut PgConnection,
    node: NodeId,
    limit: i64,
) -> Result<Vec<ProbeRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {PROBE_COLUMNS} FROM edge_probes WHERE node_id = $1
         ORDER BY requested_at DESC, id DESC LIMIT $2"
    ))
    .bind(node)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?)
}

/// Takes up to `limit` queued runs no other replica has taken and marks them running from
/// `now`.
pub async fn take_queued_probes(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<ProbeRow>> {
    Ok(sqlx::query_as(&format!(
        "WITH taken AS (
             SELECT id FROM edge_probes WHERE status = 'queued'
             ORDER BY requested_at LIMIT $2 FOR UPDATE SKIP LOCKED
         )
         UPDATE edge_probes p SET status = 'running', started_at = $1
         FROM taken WHERE p.id = taken.id
         RETURNING {}",
        PROBE_COLUMNS
            .split(", ")
            .map(|column| format!("p.{}", column.trim()))
            .collect::<Vec<_>>()
            .join(", ")
    ))
    .bind(now)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?)
}

/// A run finished: its figures and verdict.
#[allow(clippy::too_many_arguments)]
pub async fn finish_probe(
    connection: &mut PgConnection,
    id: i64,
    at: DateTime<Utc>,
    rounds: u32,
    paths: &[EdgePath],
    verdict: EdgeVerdict,
    notes: &[String],
) -> Result<()> {
    sqlx::query(
        "UPDATE edge_probes SET status = 'done', finished_at = $2, rounds = $3, paths = $4,
             verdict = $5, notes = $6
         WHERE id = $1 AND status = 'running'",
    )
    .bind(id)
    .bind(at)
    .bind(i32::try_from(rounds).unwrap_or(i32::MAX))
    .bind(Json(paths))
    .bind(verdict.sentence())
    .bind(Json(notes))
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A run could not run: why.
pub async fn fail_probe(
    connection: &mut PgConnection,
    id: i64,
    at: DateTime<Utc>,
    error: &str,
) -> Result<()> {
    sqlx::query(
        "UPDATE edge_probes SET status = 'failed', finished_at = $2, error = $3
         WHERE id = $1 AND status IN ('queued', 'running')",
    )
    .bind(id)
    .bind(at)
    .bind(error)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Runs still marked running that started before `before` were lost with their replica.
pub async fn fail_lost_probes(
    connection: &mut PgConnection,
    before: DateTime<Utc>,
    at: DateTime<Utc>,
) -> Result<u64> {
    Ok(sqlx::query(
        "UPDATE edge_probes SET status = 'failed', finished_at = $2,
             error = 'the monitor stopped while the run was under way; run it again'
         WHERE status = 'running' AND started_at < $1",
    )
    .bind(before)
    .bind(at)
    .execute(&mut *connection)
    .await?
    .rows_affected())
}

/// Forgets finished runs asked for before `before`.
pub async fn prune_probes(connection: &mut PgConnection, before: DateTime<Utc>) -> Result<u64> {
    Ok(sqlx::query(
        "DELETE FROM edge_probes WHERE requested_at < $1 AND status IN ('done', 'failed')",
    )
    .bind(before)
    .execute(&mut *connection)
    .await?
    .rows_affected())
}
