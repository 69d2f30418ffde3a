//! Our cloud accounts, each question needing level 10: list, add, delete (the token is tried against the provider, sealed, and never shown again) and an
//! account's offer (the regions and the sizes each sells, asked of the provider now).

use capstan_events::provisioning::rpc::{
    AccountOffer, AccountView, Accounts, AddAccount, DeleteAccount, ListAccounts, Offer,
};
use capstan_events::rpc::{ErrorCode, Level, RpcError};
use capstan_runtime::ServiceError;
use capstan_store::StoreError;
use chrono::Utc;
use secrecy::SecretString;

use crate::domain::accounts;
use crate::drivers::seal::SealError;
use crate::drivers::CloudProvider;
use crate::store::{self, AccountRow};

use super::{provider_failed, sealing, Answer, State};

fn view(row: &AccountRow) -> Answer<AccountView> {
    Ok(AccountView {
        id: row.id,
        provider: row.provider()?,
        label: row.label.clone(),
        flag: row.flag()?,
        created_at: row.created_at,
        created_by: row.created_by.clone(),
    })
}

fn no_account(id: i64) -> ServiceError {
    RpcError::new(ErrorCode::NotFound, format!("no cloud account {id}")).into()
}

/// The driver of a stored account, its token opened.
pub fn driver(state: &State, row: &AccountRow) -> Answer<Box<dyn CloudProvider>> {
    let token = state
        .sealer
        .open(row.id, &row.sealed_token)
        .map_err(sealing)?;
    Ok(state
        .providers
        .driver(row.provider()?, token)
        .map_err(provider_failed)?)
}

pub async fn list_accounts(state: State, request: ListAccounts) -> Answer<Accounts> {
    request
        .actor
        .require(Level::Admin, "reading cloud accounts")?;
    let mut connection = state.store.acquire().await?;
    let rows = store::accounts(&mut connection).await?;
    Ok(Accounts {
        accounts: rows.iter().map(view).collect::<Answer<_>>()?,
        seal_key_set: state.sealer.has_key(),
    })
}

/// An account is checked, its token tried (the provider must list its instances with it),
/// sealed to the account's id and saved; the answer never carries the token.
pub async fn add_account(state: State, request: AddAccount) -> Answer<AccountView> {
    request
        .actor
        .require(Level::Admin, "adding a cloud account")?;
    let checked = accounts::check(
        &request.provider,
        &request.label,
        &request.flag,
        &request.token,
    )?;
    if !state.sealer.has_key() {
        return Err(sealing(SealError::NoKey).into());
    }
    let token = SecretString::from(request.token.clone());
    let trial = state
        .providers
        .driver(checked.provider, token.clone())
        .map_err(provider_failed)?;
    trial.list().await.map_err(|error| {
        let failed = provider_failed(error);
        RpcError::new(
            failed.code,
            format!(
                "the account was not saved: listing its servers with this token failed: {}",
                failed.message
            ),
        )
    })?;
    let now = Utc::now();
    let mut transaction = state.store.begin().await?;
    let id = store::next_account_id(&mut transaction).await?;
    let sealed = state.sealer.seal(id, &token).map_err(sealing)?;
    let inserted = store::insert_account(
        &mut transaction,
        &store::NewAccountRow {
            id,
            provider: checked.provider,
            label: &checked.label,
            flag: checked.flag,
            sealed_token: &sealed,
            created_at: now,
            created_by: &request.actor.name,
        },
    )
    .await;
    match inserted {
        Err(StoreError::AlreadyExists(_)) => {
            return Err(RpcError::new(
                ErrorCode::AlreadyExists,
                format!("label: an account labelled {:?} exists", checked.label),
            )
            .into())
        }
        other => other?,
    }
    let row = store::account(&mut transaction, id)
        .await?
        .ok_or_else(|| no_account(id))?;
    transaction.commit().await.map_err(StoreError::from)?;
    tracing::info!(account_id = id, provider = %checked.provider, actor = %request.actor.name, "cloud account added");
    view(&row)
}

/// Deletes an account (kept for its provisions' history, listed no more); refused while a
/// provision in flight uses it.
pub async fn delete_account(state: State, request: DeleteAccount) -> Answer<AccountView> {
    request
        .actor
        .require(Level::Admin, "deleting a cloud account")?;
    let mut transaction = state.store.begin().await?;
    let row = store::account(&mut transaction, request.account_id)
        .await?
        .ok_or_else(|| no_account(request.account_id))?;
    let in_flight = store::provisions_in_flight(&mut transaction, row.id).await?;
    if in_flight > 0 {
        return Err(RpcError::new(
            ErrorCode::Conflict,
            format!(
                "account {} has {in_flight} provision(s) in flight; let them finish or fail first",
                row.id
            ),
        )
        .into());
    }
    store::delete_account(&mut transaction, row.id, Utc::now(), &request.actor.name).await?;
    transaction.commit().await.map_err(StoreError::from)?;
    tracing::info!(account_id = row.id, actor = %request.actor.name, "cloud account deleted");
    view(&row)
}

/// What the account's provider sells now, region by region (PV-23).
pub async fn account_offer(state: State, request: AccountOffer) -> Answer<Offer> {
    request
        .actor
        .require(Level::Admin, "reading a cloud account's offer")?;
    let row = {
        let mut connection = state.store.acquire().await?;
        store::account(&mut connection, request.account_id)
            .await?
            .ok_or_else(|| no_account(request.account_id))?
    };
    let provider = driver(&state, &row)?;
    let regions = provider.offer().await.map_err(provider_failed)?;
    Ok(Offer {
        account_id: row.id,
        provider: row.provider()?,
        regions,
    })
}
