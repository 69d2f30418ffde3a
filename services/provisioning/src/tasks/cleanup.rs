//! The hourly test-cloud cleanup (PV-55), off by default (`provisioning.test_cloud_cleanup`):
//! per test-flagged account, one at a time, the provider's company name is asked; only when it
//! is exactly the disposable marker are old servers and unattached volumes deleted, never one
//! tagged `keep` (any case) or a server at a live node's address (held). Any refusal — another
//! company name, or an account that could not be asked — deletes nothing in that account,
//! is recorded (`cleanup_runs`) and opens `plane:test_cloud_cleanup` on the plane's own node;
//! a passing run, or the cleanup turned off, clears it.

use std::net::IpAddr;

use capstan_events::provisioning::machines::TEST_CLOUD_CLEANUP;
use capstan_events::provisioning::AccountFlag;
use capstan_runtime::ServiceError;
use capstan_store::{nodes, PgConnection, StoreError};
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::domain::cleanup::{self, Held};
use crate::drivers::{CloudProvider, ProviderError};
use crate::rpc::{driver, State};
use crate::store::watch::{self, CleanupRecord};
use crate::store::{self as accounts_store, AccountRow};

pub const TASK: &str = "test_cloud_cleanup";
/// The lock that makes one replica run it.
pub const LOCK: &str = "capstan-provisioning-test-cloud-cleanup";

/// Hourly.
pub fn every() -> chrono::Duration {
    chrono::Duration::hours(1)
}

/// The cleanup's settings (`provisioning.test_cloud_cleanup`, `test_cloud_max_age_hours`,
/// `plane_node`).
#[derive(Debug, Clone)]
pub struct Cleanup {
    pub enabled: bool,
    pub max_age: chrono::Duration,
    pub plane_node: Option<String>,
}

/// What one run came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub ran: bool,
    pub deleted_servers: Vec<String>,
    pub deleted_volumes: Vec<String>,
    /// Each refused account, in words.
    pub refusals: Vec<String>,
    /// Whether the condition is open on the plane's node after the run.
    pub condition_open: bool,
}

/// Runs the cleanup when due, looking every [`super::due::LOOK_EVERY`] until `stop`.
pub async fn clean(state: State, settings: Cleanup, stop: CancellationToken) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(
        super::due::LOOK_EVERY,
        "the test-cloud cleanup",
        stop,
        || {
            let (state, settings) = (state.clone(), settings.clone());
            async move { tick(&state, &settings, Utc::now(), false).await.map(|_| ()) }
        },
    )
    .await
}

/// Clears the condition wherever it is open (the cleanup turned off, or a passing run).
async fn clear(connection: &mut PgConnection, now: DateTime<Utc>) -> Result<(), StoreError> {
    for node in watch::happening_on(connection, &TEST_CLOUD_CLEANUP).await? {
        watch::judge(connection, &TEST_CLOUD_CLEANUP, node, None, now).await?;
    }
    Ok(())
}

/// The addresses of every live (paired) node: a server there is never deleted.
async fn live_addresses(connection: &mut PgConnection) -> Result<Vec<IpAddr>, StoreError> {
    Ok(nodes::paired(connection)
        .await?
        .iter()
        .flat_map(|node| node.addresses.iter())
        .filter_map(|text| text.split('/').next()?.parse().ok())
        .collect())
}

/// One account's pass: what was deleted, held and failed, or why nothing was.
async fn pass(
    provider: &dyn CloudProvider,
    account: &AccountRow,
    live: &[IpAddr],
    settings: &Cleanup,
    now: DateTime<Utc>,
    report: &mut Report,
) -> Result<CleanupRecord, ProviderError> {
    // The account's company name first: nothing else is asked of an account that is not
    // disposable.
    let company = provider.company_name().await?;
    let flag = account.flag().unwrap_or(AccountFlag::Main);
    if let Err(refusal) = cleanup::account_disposable(flag, &company) {
        return Ok(CleanupRecord {
            refused: Some(refusal.to_string()),
            ..CleanupRecord::default()
        });
    }
    let servers: Vec<cleanup::Server> = provider
        .list()
        .await?
        .into_iter()
        .map(|instance| cleanup::Server {
            addresses: instance.addresses(),
            id: instance.id,
            created_at: instance.created_at,
            tags: instance.tags,
        })
        .collect();
    let volumes: Vec<cleanup::Volume> = provider
        .volumes()
        .await?
        .into_iter()
        .map(|volume| cleanup::Volume {
            attached: volume.attached_to.is_some(),
            id: volume.id,
            created_at: volume.created_at,
            tags: volume.tags,
        })
        .collect();
    let plan = match cleanup::plan(
        flag,
        &company,
        &servers,
        &volumes,
        live,
        now,
        settings.max_age,
    ) {
        Ok(plan) => plan,
        Err(refusal) => {
            return Ok(CleanupRecord {
                refused: Some(refusal.to_string()),
                ..CleanupRecord::default()
            })
        }
    };
    let mut record = CleanupRecord {
        held: plan
            .held
            .iter()
            .map(|(id, why)| {
                let why = match why {
                    Held::Tagged => "tagged keep".to_string(),
                    Held::LiveNode(address) => format!("a live node is at {address}"),
                    Held::Young => "younger than the max age".to_string(),
                    Held::Attached => "attached".to_string(),
                };
                format!("{id}: {why}")
            })
            .collect(),
        ..CleanupRecord::default()
    };
    for id in &plan.delete_servers {
        match provider.delete_instance(id).await {
            Ok(()) => {
                record.deleted.push(format!("server {id}"));
                report.deleted_servers.push(id.clone());
            }
            Err(error) => record.failed.push(format!("server {id}: {error}")),
        }
    }
    for id in &plan.delete_volumes {
        match provider.delete_volume(id).await {
            Ok(()) => {
                record.deleted.push(format!("volume {id}"));
                report.deleted_volumes.push(id.clone());
            }
            Err(error) => record.failed.push(format!("volume {id}: {error}")),
        }
    }
    Ok(record)
}

/// One look at `now`: off, it clears the condition; on and due (or `force`), it cleans every
/// test-flagged account, one at a time, as the one replica.
pub async fn tick(
    state: &State,
    settings: &Cleanup,
    now: DateTime<Utc>,
    force: bool,
) -> Result<Report, ServiceError> {
    let Some(mut transaction) = state.store.lead_tick(LOCK).await? else {
        return Ok(Report::default());
    };
    if !settings.enabled {
        // PV-55: "cleared ... by turning the task off".
        clear(&mut transaction, now).await?;
        transaction.commit().await.map_err(StoreError::from)?;
        return Ok(Report::default());
    }
    if !force && !super::due::due(&mut transaction, TASK, every(), now).await? {
        return Ok(Report::default());
    }
    let live = live_addresses(&mut transaction).await?;
    let mut report = Report {
        ran: true,
        ..Report::default()
    };
    let mut problems = Vec::new();
    for account in accounts_store::accounts(&mut transaction).await? {
        if account.flag()? != AccountFlag::Test {
            continue;
        }
        let record = match driver(state, &account) {
            Ok(provider) => pass(
                provider.as_ref(),
                &account,
                &live,
                settings,
                now,
                &mut report,
            )
            .await
            .unwrap_or_else(|error| CleanupRecord {
                refused: Some(format!("the provider could not be asked: {error}")),
                ..CleanupRecord::default()
            }),
            Err(error) => CleanupRecord {
                refused: Some(format!("the account could not be used: {error}")),
                ..CleanupRecord::default()
            },
        };
        if let Some(refused) = &record.refused {
            tracing::warn!(account_id = account.id, %refused, "test-cloud cleanup refused an account");
            report.refusals.push(format!(
                "account {} ({}): {refused}",
                account.id, account.label
            ));
        }
        for failed in &record.failed {
            problems.push(format!(
                "account {} ({}): {failed}",
                account.id, account.label
            ));
        }
        tracing::info!(
            account_id = account.id,
            deleted = record.deleted.len(),
            held = record.held.len(),
            failed = record.failed.len(),
            "test-cloud cleanup pass"
        );
        watch::record_cleanup(&mut transaction, account.id, now, &record).await?;
    }
    problems.splice(0..0, report.refusals.iter().cloned());
    if problems.is_empty() {
        clear(&mut transaction, now).await?;
    } else {
        let evidence = problems.join("; ");
        match super::due::plane_node(&mut transaction, settings.plane_node.as_deref()).await? {
            Some(node) => {
                watch::judge(
                    &mut transaction,
                    &TEST_CLOUD_CLEANUP,
                    node,
                    Some(&evidence),
                    now,
                )
                .await?;
                report.condition_open = true;
            }
            None => tracing::warn!(
                plane_node = settings.plane_node.as_deref().unwrap_or(""),
                %evidence,
                "the test-cloud cleanup refused, and no plane node is known to raise plane:test_cloud_cleanup on (set provisioning.plane_node)"
            ),
        }
    }
    let outcome = format!(
        "{} server(s) and {} volume(s) deleted, {} refusal(s)",
        report.deleted_servers.len(),
        report.deleted_volumes.len(),
        report.refusals.len()
    );
    watch::ran(&mut transaction, TASK, now, &outcome).await?;
    transaction.commit().await.map_err(StoreError::from)?;
    Ok(report)
}
