//! The questions the gateway asks (`capstan.rpc.monitor.*`). Each checks the actor's level
//! first (ARCHITECTURE.md 6.2-3: reads 7, changing a check 8, an edge probe — a look that
//! changes nothing — 7), reads or changes through the
//! store, and answers in the contract's words. A change and the events it causes commit
//! together.

use capstan_bus::RpcServer;
use capstan_events::monitor::rpc::{
    CertProblemView, CertificateView, EdgeProbeStarted, EdgeProbeView, EdgeProbes, GetCertificate,
    GetEdgeProbe, GetUptime, GetUptimeSummary, HistoryPoint, ListEdgeProbes, ListUptime, SetUptime,
    StartEdgeProbe, UptimeCheck, UptimeChecks, UptimeDetail, UptimeSummary,
};
use capstan_events::monitor::UptimeStatus;
use capstan_events::rpc::{ErrorCode, Level, RpcError};
use capstan_events::NodeId;
use capstan_runtime::ServiceError;
use capstan_store::{Store, StoreError};
use chrono::Utc;
use std::sync::Arc;

use crate::app;
use crate::domain::edge;
use crate::domain::uptime::{self, HISTORY_KEPT};
use crate::domain::InvalidInput;
use crate::drivers::Prober;
use crate::store::{self, CheckRow};
use capstan_events::Word as _;

/// A handler's answer: store and bus failures go up with `?` (answered `unavailable`).
type Answer<T> = Result<T, ServiceError>;

pub use crate::app::CERT_SOON_SECS;

/// What every handler reaches.
#[derive(Clone)]
pub struct State {
    pub store: Store,
    /// `CAPSTAN__MONITOR__MIN_INTERVAL_SECS`.
    pub min_interval_secs: u32,
    /// The checks' resolver and address policy: a URL is checked when it is set.
    pub prober: Arc<Prober>,
}

/// Adds the monitor service's questions to `server`.
pub fn routes(server: RpcServer, state: State) -> RpcServer {
    server
        .route_with_state(&state, list_uptime)
        .route_with_state(&state, get_uptime)
        .route_with_state(&state, set_uptime)
        .route_with_state(&state, get_certificate)
        .route_with_state(&state, start_edge_probe)
        .route_with_state(&state, get_edge_probe)
        .route_with_state(&state, list_edge_probes)
        .route_with_state(&state, uptime_summary)
        .route_with_state(&state, fleet_security)
}

/// The most down checks the summary lists.
pub const SUMMARY_LIMIT_MAX: u32 = 100;

pub async fn uptime_summary(state: State, request: GetUptimeSummary) -> Answer<UptimeSummary> {
    request.actor.require(Level::Read, "reading uptime")?;
    if request.limit > SUMMARY_LIMIT_MAX {
        return Err(
            InvalidInput::new("limit", format!("must be at most {SUMMARY_LIMIT_MAX}")).into(),
        );
    }
    let mut connection = state.store.acquire().await?;
    let (up, down, unknown, off) = store::uptime_counts(&mut connection).await?;
    let rows = store::longest_down(&mut connection, i64::from(request.limit)).await?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(UptimeSummary {
        up: count(up),
        down: count(down),
        unknown: count(unknown),
        off: count(off),
        down_checks: rows.iter().map(view).collect::<Answer<_>>()?,
    })
}

fn no_node(node: NodeId) -> RpcError {
    RpcError::new(ErrorCode::NotFound, format!("no node {node}"))
}

fn view(row: &CheckRow) -> Answer<UptimeCheck> {
    Ok(row.view()?)
}

pub async fn list_uptime(state: State, request: ListUptime) -> Answer<UptimeChecks> {
    request.actor.require(Level::Read, "reading uptime")?;
    let status = match request.status.as_deref() {
        None | Some("") => None,
        Some(text) => Some(UptimeStatus::parse(text).ok_or_else(|| {
            RpcError::from(InvalidInput::new("status", "must be up, down or unknown"))
        })?),
    };
    let mut connection = state.store.acquire().await?;
    let rows = store::checks(&mut connection, status).await?;
    Ok(UptimeChecks {
        checks: rows.iter().map(view).collect::<Answer<_>>()?,
    })
}

pub async fn get_uptime(state: State, request: GetUptime) -> Answer<UptimeDetail> {
    request.actor.require(Level::Read, "reading uptime")?;
    let mut connection = state.store.acquire().await?;
    let row = store::check(&mut connection, request.node_id, false)
        .await?
        .ok_or_else(|| no_node(request.node_id))?;
    let history = store::history(&mut connection, request.node_id, Utc::now() - HISTORY_KEPT)
        .await?
        .into_iter()
        .map(|(at, ok, response_ms)| HistoryPoint {
            at,
            ok,
            response_ms: response_ms.and_then(|ms| u32::try_from(ms).ok()),
        })
        .collect();
    Ok(UptimeDetail {
        check: view(&row)?,
        history,
    })
}

pub async fn set_uptime(state: State, request: SetUptime) -> Answer<UptimeCheck> {
    request
        .actor
        .require(Level::Change, "changing a node's uptime check")?;
    let setting = uptime::setting(
        request.enabled,
        request.kind,
        request.url.as_deref(),
        request.keyword.as_deref(),
        request.interval_secs,
        state.min_interval_secs,
    )
    .map_err(RpcError::from)?;
    let row = app::set_uptime(&state.store, &state.prober, request.node_id, &setting).await?;
    view(&row)
}

pub async fn get_certificate(state: State, request: GetCertificate) -> Answer<CertificateView> {
    request
        .actor
        .require(Level::Read, "reading a node's certificate")?;
    let mut connection = state.store.acquire().await?;
    if !store::node_known(&mut connection, request.node_id).await? {
        return Err(no_node(request.node_id).into());
    }
    let row = store::certificate(&mut connection, request.node_id, false).await?;
    Ok(match row {
        None => CertificateView {
            problem: None,
            expires_at: None,
            names: Vec::new(),
            checked_at: None,
        },
        Some(row) => CertificateView {
            problem: row.problem.map(|problem| {
                let problem = problem.0;
                CertProblemView {
                    reason: problem.reason,
                    title: problem.title,
                    not_after: problem.not_after,
                    detail: problem.detail,
                    fix: problem.fix,
                }
            }),
            expires_at: row.expires_at,
            names: row.names.0,
            checked_at: row.checked_at,
        },
    })
}

/// `GET /api/v1/fleet/security` (level 7): every paired machine's row from its latest host
/// report, judged (MO-16, MO-17), red first.
pub async fn fleet_security(
    state: State,
    request: capstan_events::monitor::rpc::GetFleetSecurity,
) -> Answer<capstan_events::monitor::rpc::FleetSecurity> {
    use crate::domain::security::{self, Machine};
    request
        .actor
        .require(Level::Read, "reading the fleet's security")?;
    let mut connection = state.store.acquire().await?;
    let rows = store::status::machines(&mut connection).await?;
    let mut site_nodes = security::SiteNodes::new();
    for (container, node, name) in store::status::site_nodes(&mut connection).await? {
        site_nodes.entry(container).or_insert((node, name));
    }
    let now = Utc::now();
    let mut machines = Vec::with_capacity(rows.len());
    for row in &rows {
        let outcome = row.outcome()?;
        let report = match (outcome, row.finished_at) {
            (Some(outcome), Some(at)) => {
                Some((outcome, row.result.as_ref().map(|json| &json.0), at))
            }
            _ => None,
        };
        let machine = Machine {
            node_id: row.node_id,
            name: &row.name,
            report,
        };
        let mut judged = security::row(&machine, now);
        judged.containers = security::container_rows(&machine, &judged, &site_nodes, now);
        machines.push(judged);
    }
    security::sort(&mut machines);
    Ok(capstan_events::monitor::rpc::FleetSecurity { machines })
}

/// MO-11, MO-12: queues a run comparing the node's site through its public name and directly;
/// the monitor's edge probe task takes it. Refused, changing nothing, when the node has no
/// site address or no address of its own, or had 10 runs in the last hour.
pub async fn start_edge_probe(state: State, request: StartEdgeProbe) -> Answer<EdgeProbeStarted> {
    request
        .actor
        .require(Level::Read, "comparing a node's edge and direct paths")?;
    let node = request.node_id;
    let now = Utc::now();
    let mut transaction = state.store.begin().await?;
    let (url, addresses) = store::lock_node_for_probe(&mut transaction, node)
        .await?
        .ok_or_else(|| no_node(node))?;
    let refused = |why: String| RpcError::new(ErrorCode::Refused, format!("node {node}: {why}"));
    let site = edge::site(url.as_deref()).map_err(|why| refused(why.to_string()))?;
    if edge::direct_targets(&addresses).is_empty() {
        return Err(refused(
            "it reported no address of its own, so there is no direct path to compare".into(),
        )
        .into());
    }
    let recent =
        store::probes_since(&mut transaction, node, now - chrono::Duration::hours(1)).await?;
    edge::may_run(recent)
        .map_err(|why| RpcError::new(ErrorCode::RateLimited, format!("node {node}: {why}")))?;
    let id = store::queue_probe(
        &mut transaction,
        node,
        site.origin.as_str(),
        &addresses,
        &request.actor.name,
        now,
    )
    .await?;
    transaction.commit().await.map_err(StoreError::from)?;
    Ok(EdgeProbeStarted { id })
}

pub async fn get_edge_probe(state: State, request: GetEdgeProbe) -> Answer<EdgeProbeView> {
    request
        .actor
        .require(Level::Read, "reading an edge probe")?;
    let mut connection = state.store.acquire().await?;
    let row = store::probe(&mut connection, request.id)
        .await?
        .ok_or_else(|| {
            RpcError::new(ErrorCode::NotFound, format!("no edge probe {}", request.id))
        })?;
    Ok(row.view()?)
}

pub async fn list_edge_probes(state: State, request: ListEdgeProbes) -> Answer<EdgeProbes> {
    request
        .actor
        .require(Level::Read, "reading a node's edge probes")?;
    let mut connection = state.store.acquire().await?;
    if !store::node_known(&mut connection, request.node_id).await? {
        return Err(no_node(request.node_id).into());
    }
    let rows = store::node_probes(&mut connection, request.node_id, edge::LISTED_PER_NODE).await?;
    Ok(EdgeProbes {
        probes: rows
            .iter()
            .map(|row| Ok(row.view()?))
            .collect::<Answer<_>>()?,
    })
}
