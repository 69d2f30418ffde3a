//! Periodic work: the uptime checks (MO-01), the served-certificate reads (MO-08), the edge
//! probe runs operators ask for (MO-11) and the pruning of history. Checks are taken from the table with `FOR UPDATE SKIP LOCKED` and moved
//! on to their next due time before they run, so replicas share the work and none is run twice;
//! each result is written, with the event it causes, in a transaction of its own.

use capstan_events::NodeId;
use std::sync::Arc;
use std::time::Duration;

use capstan_events::monitor::{CertProblemChanged, CheckKind, SiteDown, SiteUp};
use capstan_store::{Store, StoreError};
use chrono::{DateTime, Utc};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use url::Url;

use crate::domain::certificates::{self, Www};
use crate::domain::edge;
use crate::domain::pinning;
use crate::domain::uptime::{self, next_due, Outcome, Transition, HISTORY_KEPT};
use crate::drivers::http::{Checked, Target};
use crate::drivers::{ProbeError, Prober};
use crate::store::{self, Due, DueCertificate};
use capstan_events::Word as _;

/// The status pass (MO-05, MO-06).
pub mod status;

/// The lock that makes one replica prune history each time.
pub const PRUNE_LOCK: &str = "capstan-monitor-prune";
/// How often history is pruned.
pub const PRUNE_EVERY: Duration = Duration::from_secs(300);

/// How the checks run.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    pub tick: Duration,
    pub concurrency: usize,
    pub cert_interval: chrono::Duration,
    pub cert_warn_days: u32,
    /// The longest a check may take: a check is never taken again while one may still run.
    pub timeout: Duration,
}

/// Looks for due checks every tick and runs them, at most `concurrency` at once, until `stop`.
pub async fn uptime(
    store: Store,
    prober: Arc<Prober>,
    pace: Pace,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let permits = Arc::new(Semaphore::new(pace.concurrency));
    let mut running: JoinSet<()> = JoinSet::new();
    let mut ticks = tokio::time::interval(pace.tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        while running.try_join_next().is_some() {}
        let room = permits.available_permits();
        if room == 0 {
            continue;
        }
        let due = match take_due(&store, Utc::now(), room as i64, pace.timeout).await {
            Ok(due) => due,
            Err(error) => {
                warn!(%error, "taking due uptime checks failed; trying again next tick");
                continue;
            }
        };
        for check in due {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let (store, prober) = (store.clone(), prober.clone());
            running.spawn(async move {
                let _permit = permit;
                if let Err(error) = run_check(&store, &prober, &check).await {
                    warn!(node_id = check.node_id.get(), %error, "recording an uptime check failed");
                }
            });
        }
    }
    running.shutdown().await;
    Ok(())
}

/// Takes up to `limit` due checks and moves each on to its next due time.
pub async fn take_due(
    store: &Store,
    now: DateTime<Utc>,
    limit: i64,
    timeout: Duration,
) -> Result<Vec<Due>, StoreError> {
    let running_until = now + chrono::Duration::from_std(timeout).unwrap_or_default();
    let mut transaction = store.begin().await?;
    let due = store::due_checks(&mut transaction, now, limit).await?;
    if due.is_empty() {
        return Ok(due);
    }
    let nodes: Vec<NodeId> = due.iter().map(|check| check.node_id).collect();
    let next: Vec<DateTime<Utc>> = due
        .iter()
        .map(|check| {
            next_due(check.next_check_at, now, check.interval_secs.max(1) as u32).max(running_until)
        })
        .collect();
    store::reschedule(&mut transaction, &nodes, &next).await?;
    transaction.commit().await?;
    Ok(due)
}

/// Runs one check and records it.
pub async fn run_check(store: &Store, prober: &Prober, due: &Due) -> Result<(), StoreError> {
    let kind = CheckKind::parse(&due.kind);
    let url = Url::parse(&due.url);
    let (Some(kind), Ok(url)) = (kind, url) else {
        return Err(StoreError::Database(format!(
            "node {}'s check cannot be read: kind {:?}, url {:?}",
            due.node_id, due.kind, due.url
        )));
    };
    let at = Utc::now();
    let checked = prober
        .check(Target {
            url: &url,
            kind,
            keyword: due.keyword.as_deref(),
            addresses: &due.addresses.0,
        })
        .await;
    debug!(node_id = due.node_id.get(), outcome = ?checked.outcome, route = ?checked.route, ms = checked.response_ms, "uptime check");
    record(store, due, &checked, at).await
}

/// Writes a check's result and the event it causes, unless the check was changed meanwhile.
pub async fn record(
    store: &Store,
    due: &Due,
    checked: &Checked,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    let mut transaction = store.begin().await?;
    let Some(row) = store::check(&mut transaction, due.node_id, true).await? else {
        return Ok(());
    };
    let unchanged = row.enabled
        && row.url.as_deref() == Some(due.url.as_str())
        && row.kind == due.kind
        && row.keyword == due.keyword;
    if !unchanged {
        return Ok(());
    }
    let live = row.live()?;
    let (next, transition) = uptime::record(&live, &checked.outcome, at);
    let ok = checked.outcome == Outcome::Passed;
    store::record(
        &mut transaction,
        due.node_id,
        &next,
        ok,
        at,
        checked.response_ms,
    )
    .await?;
    match transition {
        Transition::Nothing => {}
        Transition::Down { down_since, reason } => {
            store::site_down(
                &mut transaction,
                SiteDown {
                    node_id: due.node_id,
                    url: due.url.clone(),
                    down_since,
                    reason,
                    checked_at: at,
                },
            )
            .await?;
        }
        Transition::Up { down_since } => {
            store::site_up(
                &mut transaction,
                SiteUp {
                    node_id: due.node_id,
                    url: due.url.clone(),
                    down_since,
                    up_at: at,
                    stopped: false,
                },
            )
            .await?;
        }
    }
    transaction.commit().await?;
    Ok(())
}

/// Reads due served certificates every tick until `stop`.
pub async fn certificates(
    store: Store,
    prober: Arc<Prober>,
    pace: Pace,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(pace.tick, "monitor certificates", stop, || async {
        let now = Utc::now();
        let due = {
            let mut transaction = store.begin().await?;
            let due = store::take_due_certificates(
                &mut transaction,
                now,
                now + pace.cert_interval,
                pace.concurrency as i64,
            )
            .await?;
            transaction.commit().await?;
            due
        };
        let reads = due
            .iter()
            .map(|certificate| read_certificate(&store, &prober, certificate, pace));
        for outcome in futures::future::join_all(reads).await {
            if let Err(error) = outcome {
                warn!(%error, "recording a certificate read failed");
            }
        }
        Ok::<(), StoreError>(())
    })
    .await
}

/// MO-08..MO-10: reads the certificate the node's origin serves for its name, judges it and
/// records it; a changed problem is told.
pub async fn read_certificate(
    store: &Store,
    prober: &Prober,
    due: &DueCertificate,
    pace: Pace,
) -> Result<(), StoreError> {
    let name = due.name.as_str();
    let served = served_at_origin(prober, due).await;
    let at = Utc::now();
    let mut transaction = store.begin().await?;
    let Some(row) = store::certificate(&mut transaction, due.node_id, true).await? else {
        return Ok(());
    };
    if row.name != due.name {
        return Ok(());
    }
    let old_problem = row.problem.as_ref().map(|problem| problem.0.clone());
    let (origin, served) = match served {
        Ok(found) => found,
        Err(error) => {
            // Nothing was read: what was known stands, and the failure is kept for the page.
            store::record_certificate(
                &mut transaction,
                due.node_id,
                at,
                row.expires_at,
                &row.names.0,
                old_problem.as_ref(),
                row.placeholder_since,
                Some(&error.to_string()),
            )
            .await?;
            transaction.commit().await?;
            return Ok(());
        }
    };
    drop(transaction);
    let www = www_at_origin(prober, name, origin).await;
    let judged = certificates::judge(
        name,
        &served,
        &www,
        row.placeholder_since,
        at,
        pace.cert_warn_days,
        due.container,
    );
    record_judged(store, due, at, &served, judged).await
}

/// The origin (the node's own address, the first it reported, else the name resolved) and the
/// certificate it serves for the node's name.
async fn served_at_origin(
    prober: &Prober,
    due: &DueCertificate,
) -> Result<(std::net::IpAddr, certificates::Served), ProbeError> {
    let name = due.name.as_str();
    let origin = match pinning::own_address(&due.addresses.0) {
        Some(address) => address,
        None => prober
            .resolver
            .addresses(name)
            .await?
            .first()
            .copied()
            .ok_or_else(|| ProbeError::NotFound(name.to_string()))?,
    };
    let served = prober.served_certificate(origin, name).await?;
    Ok((origin, served))
}

/// What the origin serves for `www.<name>`, when that name resolves (MO-10's third reason).
async fn www_at_origin(prober: &Prober, name: &str, origin: std::net::IpAddr) -> Www {
    match certificates::www_name(name) {
        Some(www) if prober.resolver.addresses(&www).await.is_ok() => {
            match prober.served_certificate(origin, &www).await {
                Ok(served) => Www::Served(served),
                Err(_) => Www::NotResolving,
            }
        }
        _ => Www::NotResolving,
    }
}

/// Records a judged read, unless the node's certificate row went or changed name meanwhile;
/// a changed problem is told (MO-08).
async fn record_judged(
    store: &Store,
    due: &DueCertificate,
    at: DateTime<Utc>,
    served: &certificates::Served,
    judged: certificates::Judged,
) -> Result<(), StoreError> {
    let name = due.name.as_str();
    let mut transaction = store.begin().await?;
    let Some(row) = store::certificate(&mut transaction, due.node_id, true).await? else {
        return Ok(());
    };
    if row.name != due.name {
        return Ok(());
    }
    store::record_certificate(
        &mut transaction,
        due.node_id,
        at,
        judged.expires_at,
        &served.names,
        judged.problem.as_ref(),
        judged.placeholder_since,
        None,
    )
    .await?;
    let old_problem = row.problem.map(|problem| problem.0);
    if old_problem != judged.problem {
        store::cert_problem_changed(
            &mut transaction,
            CertProblemChanged {
                node_id: due.node_id,
                name: name.to_string(),
                problem: judged.problem,
                checked_at: at,
            },
        )
        .await?;
    }
    transaction.commit().await?;
    Ok(())
}

/// Forgets history older than a day, one replica at a time, until `stop`.
pub async fn prune(store: Store, stop: CancellationToken) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(PRUNE_EVERY, "monitor history", stop, || async {
        let Some(mut transaction) = store.lead_tick(PRUNE_LOCK).await? else {
            return Ok(());
        };
        store::prune_history(&mut transaction, Utc::now() - HISTORY_KEPT).await?;
        store::prune_probes(&mut transaction, Utc::now() - edge::KEPT).await?;
        transaction.commit().await?;
        Ok::<(), StoreError>(())
    })
    .await
}

/// Edge probe runs at once per replica, at most.
pub const PROBES_AT_ONCE: usize = 8;

/// Takes queued edge probe runs every tick and runs each (MO-11), at most [`PROBES_AT_ONCE`]
/// at a time, until `stop`; a run found still running past its limit was lost with its
/// replica and is failed, saying so.
pub async fn edge_probes(
    store: Store,
    prober: Arc<Prober>,
    pace: Pace,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let mut running: JoinSet<()> = JoinSet::new();
    let mut ticks = tokio::time::interval(pace.tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A run is given up at its limit, so one running past it (with a margin for the clocks of
    // two replicas) was lost.
    let lost_after = chrono::Duration::from_std(edge::RUN_LIMIT).unwrap_or_default()
        + chrono::Duration::seconds(60);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = ticks.tick() => {}
        }
        while running.try_join_next().is_some() {}
        let room = PROBES_AT_ONCE.saturating_sub(running.len());
        let now = Utc::now();
        let taken = async {
            let mut transaction = store.begin().await?;
            store::fail_lost_probes(&mut transaction, now - lost_after, now).await?;
            let taken = if room == 0 {
                Vec::new()
            } else {
                store::take_queued_probes(&mut transaction, now, room as i64).await?
            };
            transaction.commit().await?;
            Ok::<_, StoreError>(taken)
        }
        .await;
        let taken = match taken {
            Ok(taken) => taken,
            Err(error) => {
                warn!(%error, "taking queued edge probes failed; trying again next tick");
                continue;
            }
        };
        for probe in taken {
            let (store, prober) = (store.clone(), prober.clone());
            running.spawn(async move {
                if let Err(error) = run_edge_probe(&store, &prober, &probe).await {
                    warn!(probe = probe.id, %error, "recording an edge probe failed");
                }
            });
        }
    }
    running.shutdown().await;
    Ok(())
}

/// Runs one edge probe and records what it found (MO-11, MO-12); the run is given up at the
/// run limit, whatever happens.
pub async fn run_edge_probe(
    store: &Store,
    prober: &Prober,
    probe: &store::ProbeRow,
) -> Result<(), StoreError> {
    let site = edge::site(Some(&probe.url));
    let direct = edge::direct_targets(&probe.addresses.0);
    let outcome = match site {
        Ok(site) => tokio::time::timeout(edge::RUN_LIMIT, prober.edge_probe(&site, &direct))
            .await
            .map_err(|_| format!("the run did not end within {} s", edge::RUN_LIMIT.as_secs())),
        Err(error) => Err(error.to_string()),
    };
    let at = Utc::now();
    let mut connection = store.pool().acquire().await?;
    match outcome {
        Ok(probed) => {
            let verdict = edge::verdict(&probed.paths);
            let notes = edge::notes(&probed.paths);
            debug!(
                probe = probe.id,
                verdict = verdict.sentence(),
                rounds = probed.rounds,
                "edge probe"
            );
            store::finish_probe(
                &mut connection,
                probe.id,
                at,
                probed.rounds,
                &probed.paths,
                verdict,
                &notes,
            )
            .await
        }
        Err(error) => store::fail_probe(&mut connection, probe.id, at, &error).await,
    }
}
