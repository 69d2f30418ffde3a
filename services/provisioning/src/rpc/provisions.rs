//! Provisions: asked for by an operator (level 10, PV-03), followed by anyone who reads the fleet
//! (level 7) — their steps with times, the install's log with secrets masked, the auto-approval
//! verdict over their agent's join — and retried once failed (level 10, PV-02). The work itself
//! runs in `tasks::workflow`, woken here.

use capstan_events::agent_channel::rpc::JoinState;
use capstan_events::provisioning::provisions::{
    GetProvision, JoinVerdicts, ListProvisions, ProvisionView, Provisions, RequestProvision,
    RetryProvision, StepView, VerdictView, Verdicts, JOIN_VERDICTS_MAX, PROVISIONS_LISTED_MAX,
};
use capstan_events::provisioning::{CloudProvider, ProvisionRequested, ProvisionStep};
use capstan_events::rpc::{ErrorCode, Level, RpcError};
use capstan_events::{Envelope, Word as _};
use capstan_runtime::ServiceError;
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::Utc;

use crate::domain::{install, offer, request};
use crate::store::{self, JoinRow, ProvisionRow};

use super::{driver, provider_failed, Answer, State};

fn invalid(error: impl std::fmt::Display) -> ServiceError {
    RpcError::new(ErrorCode::InvalidRequest, error.to_string()).into()
}

fn no_provision(id: i64) -> ServiceError {
    RpcError::new(ErrorCode::NotFound, format!("no provision {id}")).into()
}

/// A join's verdict in the contract's words (none for a join that matched no provision).
pub(crate) fn verdict_view(join: &JoinRow, provision: &ProvisionRow) -> Answer<VerdictView> {
    Ok(VerdictView {
        join_id: join.id,
        provision_id: provision.id,
        provision_name: provision.name.clone(),
        instance_id: provision.instance_id.clone(),
        provision_requested_at: provision.requested_at,
        approved: join.state()? == JoinState::Approved,
        reasons: join.reasons.clone(),
        key_differs: join.key_differs,
        second_join: join.second_join,
        judged_at: join.judged_at.unwrap_or(join.requested_at),
    })
}

/// A provision as the API shows it; `full` adds its steps, log and verdict.
async fn view(
    connection: &mut PgConnection,
    row: &ProvisionRow,
    full: bool,
) -> Answer<ProvisionView> {
    let (steps, install_log, approval) = if full {
        let steps = store::steps(connection, row.id)
            .await?
            .into_iter()
            .map(|step| {
                Ok(StepView {
                    step: ProvisionStep::parse(&step.step).ok_or_else(|| {
                        StoreError::Database(format!("{:?} is not a provision step", step.step))
                    })?,
                    at: step.at,
                    detail: step.detail,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        let approval = store::latest_join_of(connection, row.id)
            .await?
            .map(|join| verdict_view(&join, row))
            .transpose()?;
        (steps, row.install_log.clone(), approval)
    } else {
        (Vec::new(), String::new(), None)
    };
    Ok(ProvisionView {
        id: row.id,
        account_id: row.account_id,
        account_label: row.account_label.clone(),
        provider: row.provider()?,
        flag: row.flag()?,
        kind: row.kind()?,
        name: row.name.clone(),
        region: row.region.clone(),
        size: row.size.clone(),
        image: row.image.clone(),
        step: row.step()?,
        step_since: row.step_since,
        failure: row.failure.clone(),
        retries: u32::try_from(row.retries).unwrap_or(0),
        instance_id: row.instance_id.clone(),
        ipv4: row.ipv4.clone(),
        ipv6: row.ipv6.clone(),
        node_id: row.node_id,
        expected_key: row.expected_key.clone(),
        password_retired: row.password_retired,
        steps,
        install_log,
        approval,
        requested_by: row.requested_by.clone(),
        requested_at: row.requested_at,
    })
}

pub async fn list_provisions(state: State, request: ListProvisions) -> Answer<Provisions> {
    request.actor.require(Level::Read, "reading provisions")?;
    let mut connection = state.store.acquire().await?;
    let rows = store::provisions(
        &mut connection,
        request.flag,
        request.in_flight,
        PROVISIONS_LISTED_MAX as i64,
    )
    .await?;
    let mut provisions = Vec::with_capacity(rows.len());
    for row in &rows {
        provisions.push(view(&mut connection, row, false).await?);
    }
    Ok(Provisions { provisions })
}

pub async fn get_provision(state: State, request: GetProvision) -> Answer<ProvisionView> {
    request.actor.require(Level::Read, "reading a provision")?;
    let mut connection = state.store.acquire().await?;
    let row = store::provision(&mut connection, request.provision_id)
        .await?
        .ok_or_else(|| no_provision(request.provision_id))?;
    view(&mut connection, &row, true).await
}

/// PV-03's checks before anything is saved: the account live, the words, the plane's URL, the
/// size sold in the region (the provider asked now).
async fn checked_ask(
    state: &State,
    request: &RequestProvision,
) -> Answer<(store::AccountRow, CloudProvider, request::Checked)> {
    let account = {
        let mut connection = state.store.acquire().await?;
        store::account(&mut connection, request.account_id)
            .await?
            .ok_or_else(|| {
                invalid(format!(
                    "account_id: no cloud account {}",
                    request.account_id
                ))
            })?
    };
    let provider = account.provider()?;
    let checked = request::check(
        provider,
        &request.kind,
        &request.name,
        &request.region,
        &request.size,
        request.image.as_deref(),
    )
    .map_err(invalid)?;
    if state.settings.plane_url.is_none() {
        return Err(RpcError::new(
            ErrorCode::Unavailable,
            "no plane URL is set (CAPSTAN__PROVISIONING__PLANE_URL): a new machine would not know where to join",
        )
        .into());
    }
    let offered = driver(state, &account)?
        .offer()
        .await
        .map_err(provider_failed)?;
    offer::check_size(&offered, &checked.region, &checked.size).map_err(|refusal| {
        let field = match refusal {
            offer::OfferRefusal::NoSuchRegion { .. } => "region",
            _ => "size",
        };
        invalid(format!("{field}: {refusal}"))
    })?;
    Ok((account, provider, checked))
}

/// PV-03: the words are checked, the account must be live, the plane's URL and the seal key
/// set, and the size sold in the region (asked of the provider now) before anything is saved;
/// then the provision is saved at `requested` with its event, and the workflow woken.
pub async fn request_provision(state: State, request: RequestProvision) -> Answer<ProvisionView> {
    request.actor.require(Level::Admin, "asking for a server")?;
    let (account, provider, checked) = checked_ask(&state, &request).await?;
    let now = Utc::now();
    let mut transaction = state.store.begin().await?;
    let inserted = store::insert_provision(
        &mut transaction,
        &store::NewProvision {
            account_id: account.id,
            kind: checked.kind,
            name: &checked.name,
            region: &checked.region,
            size: &checked.size,
            image: &checked.image,
            requested_by: &request.actor.name,
            at: now,
        },
    )
    .await;
    let id = match inserted {
        Err(StoreError::AlreadyExists(_)) => {
            return Err(RpcError::new(
                ErrorCode::AlreadyExists,
                format!("name: a provision of {:?} is in flight", checked.name),
            )
            .into())
        }
        other => other?,
    };
    let event = ProvisionRequested {
        provision_id: id,
        account_id: account.id,
        provider,
        kind: checked.kind,
        name: checked.name.clone(),
        region: checked.region.clone(),
        size: checked.size.clone(),
        image: checked.image.clone(),
        requested_by: request.actor.name.clone(),
        requested_at: now,
    };
    outbox::push(&mut transaction, Envelope::new(event, None)).await?;
    let row = store::provision(&mut transaction, id)
        .await?
        .ok_or_else(|| no_provision(id))?;
    transaction.commit().await.map_err(StoreError::from)?;
    state.wake.notify_one();
    tracing::info!(provision_id = id, name = %checked.name, kind = %checked.kind, actor = %request.actor.name, "provision requested");
    let mut connection = state.store.acquire().await?;
    view(&mut connection, &row, true).await
}

/// PV-02: only an `install_failed` provision is retried; each finished step is kept, so the run
/// resumes where it failed.
pub async fn retry_provision(state: State, request: RetryProvision) -> Answer<ProvisionView> {
    request
        .actor
        .require(Level::Admin, "retrying a provision")?;
    let mut transaction = state.store.begin().await?;
    let row = store::provision(&mut transaction, request.provision_id)
        .await?
        .ok_or_else(|| no_provision(request.provision_id))?;
    let progress = install::Progress {
        step: row.step()?,
        since: row.step_since,
        failure: row.failure.clone(),
        retries: u32::try_from(row.retries).unwrap_or(0),
    };
    progress
        .retry(Utc::now())
        .map_err(|refused| RpcError::new(ErrorCode::Conflict, refused.to_string()))?;
    let retried = store::retried(&mut transaction, row.id, Utc::now(), &request.actor.name).await;
    if let Err(StoreError::AlreadyExists(_)) = retried {
        return Err(RpcError::new(
            ErrorCode::Conflict,
            format!("another provision of {:?} is in flight", row.name),
        )
        .into());
    }
    retried?;
    let row = store::provision(&mut transaction, row.id)
        .await?
        .ok_or_else(|| no_provision(row.id))?;
    transaction.commit().await.map_err(StoreError::from)?;
    state.wake.notify_one();
    tracing::info!(provision_id = row.id, actor = %request.actor.name, "provision retried");
    let mut connection = state.store.acquire().await?;
    view(&mut connection, &row, true).await
}

/// AC-09: the verdicts over the joins asked about that matched a provision.
pub async fn join_verdicts(state: State, request: JoinVerdicts) -> Answer<Verdicts> {
    request
        .actor
        .require(Level::Read, "reading join verdicts")?;
    if request.join_ids.len() > JOIN_VERDICTS_MAX {
        return Err(invalid(format!(
            "join_ids: {} asked, at most {JOIN_VERDICTS_MAX}",
            request.join_ids.len()
        )));
    }
    let mut connection = state.store.acquire().await?;
    let joins = store::joins(&mut connection, &request.join_ids).await?;
    let mut verdicts = Vec::new();
    for join in joins {
        let Some(provision_id) = join.provision_id else {
            continue;
        };
        if let Some(provision) = store::provision(&mut connection, provision_id).await? {
            verdicts.push(verdict_view(&join, &provision)?);
        }
    }
    Ok(Verdicts { verdicts })
}
