//! The monitor service's use cases: load, decide with `domain/`, write. The rpc handlers check
//! the actor's level, read the input, call a use case here and map its answer.

use capstan_events::monitor::{CertProblemChanged, SiteUp};
use capstan_events::rpc::{ErrorCode, RpcError};
use capstan_store::{PgConnection, Store, StoreError};
use chrono::{DateTime, Utc};

use crate::domain::uptime::{self, first_due, Current, Setting};
use crate::domain::NodeId;
use crate::drivers::Prober;
use crate::store::{self, CheckRow};

/// How soon after its URL is set or changes a node's certificate is first read, at most.
pub const CERT_SOON_SECS: u32 = 10;

type Answer<T> = Result<T, RpcError>;

fn unavailable(error: StoreError) -> RpcError {
    capstan_runtime::unavailable(crate::DOMAIN, error)
}

fn no_node(node: NodeId) -> RpcError {
    RpcError::new(ErrorCode::NotFound, format!("no node {node}"))
}

/// Sets a node's uptime check (MO-01, MO-08): the URL gets the plane's address policy first;
/// then, in one transaction, the check as it stands is read, the change decided
/// ([`uptime::change`], [`uptime::certificate_watch`]), and the check, its certificate watch
/// and the events they cause are written. Answers the check as stored.
pub async fn set_uptime(
    store: &Store,
    prober: &Prober,
    node: NodeId,
    setting: &Setting,
) -> Answer<CheckRow> {
    // An operator's URL gets the plane's address policy before anything is written.
    if let Some(url) = &setting.url {
        prober.url_allowed(url).await.map_err(|reason| {
            RpcError::new(
                ErrorCode::Refused,
                format!("url: {url} is refused: {reason}"),
            )
        })?;
    }
    let now = Utc::now();
    let mut transaction = store.begin().await.map_err(unavailable)?;
    if !store::node_known(&mut transaction, node)
        .await
        .map_err(unavailable)?
    {
        return Err(no_node(node));
    }
    let old = store::check(&mut transaction, node, true)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| no_node(node))?;
    let current = Current {
        enabled: old.enabled,
        kind: &old.kind,
        url: old.url.as_deref(),
        keyword: old.keyword.as_deref(),
        interval_secs: old.interval_secs,
        next_check_at: old.next_check_at,
        live: old.live().map_err(unavailable)?,
    };
    let phase = rand::random::<f64>();
    let change = uptime::change(&current, setting, now, phase);
    if let Some((url, down_since)) = change.outage_over.clone() {
        let up = SiteUp {
            node_id: node,
            url,
            down_since,
            up_at: now,
            stopped: true,
        };
        store::site_up(&mut transaction, up)
            .await
            .map_err(unavailable)?;
    }
    store::set_check(
        &mut transaction,
        node,
        setting,
        &change.live,
        change.next_check_at,
        !change.kept,
    )
    .await
    .map_err(unavailable)?;
    watch_certificate(&mut transaction, node, setting, change.kept, now, phase).await?;
    let row = store::check(&mut transaction, node, false)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| no_node(node))?;
    transaction
        .commit()
        .await
        .map_err(|e| unavailable(e.into()))?;
    Ok(row)
}

/// MO-08: the certificate is read for the URL's host, soon after it is set or changes; a
/// problem reported on a name no longer read is cleared.
async fn watch_certificate(
    connection: &mut PgConnection,
    node: NodeId,
    setting: &Setting,
    kept: bool,
    now: DateTime<Utc>,
    phase: f64,
) -> Answer<()> {
    let old = store::certificate(connection, node, true)
        .await
        .map_err(unavailable)?;
    let watched = old
        .as_ref()
        .map(|row| (row.name.as_str(), row.problem.is_some()));
    let watch = uptime::certificate_watch(watched, uptime::certificate_name(setting), kept);
    if let Some(name) = &watch.watch {
        let due = first_due(now, CERT_SOON_SECS, phase);
        store::watch_certificate(connection, node, name, due)
            .await
            .map_err(unavailable)?;
    }
    if watch.unwatch {
        store::unwatch_certificate(connection, node)
            .await
            .map_err(unavailable)?;
    }
    if let Some(name) = watch.clear {
        let cleared = CertProblemChanged {
            node_id: node,
            name,
            problem: None,
            checked_at: now,
        };
        store::cert_problem_changed(connection, cleared)
            .await
            .map_err(unavailable)?;
    }
    Ok(())
}
