//! Operator administration from the command line: `capstan admin create-operator` creates an
//! operator and its first API token, and prints the token once (only its digest is kept).

use anyhow::Context;
use capstan_events::rpc::Level;
use capstan_settings::Settings;
use capstan_store::{Store, StoreError};

use crate::{
    identity::{OperatorName, Token},
    store, DOMAIN, MIGRATOR,
};

/// What can stop an operator from being created.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    BadName(String),
    #[error("an operator named {0:?} already exists; choose another name")]
    NameTaken(String),
    #[error("the gateway's database: {0}")]
    Store(#[from] StoreError),
}

/// Creates operator `name` at `level` with a first API token, and returns the token.
pub async fn issue_operator(store: &Store, name: &str, level: Level) -> Result<Token, AdminError> {
    let name = OperatorName::parse(name).map_err(AdminError::BadName)?;
    let token = Token::generate();
    let mut transaction = store.begin().await?;
    let operator_id = match store::insert_operator(&mut transaction, name.as_str(), level).await {
        Ok(id) => id,
        Err(StoreError::AlreadyExists(_)) => {
            return Err(AdminError::NameTaken(name.as_str().to_string()))
        }
        Err(error) => return Err(error.into()),
    };
    store::insert_token(
        &mut transaction,
        operator_id,
        &token.sha256(),
        "issued by capstan admin create-operator",
    )
    .await?;
    transaction.commit().await.map_err(StoreError::from)?;
    Ok(token)
}

/// `capstan admin create-operator --name NAME --level N`: connects, migrates the gateway's
/// schema, creates the operator and prints `token: <token>` on standard output (logs go to
/// standard error), the only time the token is shown.
pub async fn create_operator(settings: &Settings, name: &str, level: Level) -> anyhow::Result<()> {
    let store = Store::connect(settings.database.url(), DOMAIN.as_str(), 1)
        .await
        .context("connecting to the database")?;
    let issued = async {
        store
            .migrate(&MIGRATOR)
            .await
            .context("migrating the gateway schema")?;
        Ok::<_, anyhow::Error>(issue_operator(&store, name, level).await?)
    }
    .await;
    store.close().await;
    let token = issued?;
    tracing::info!(operator = name, level = u8::from(level), "operator created");
    println!("token: {}", token.expose());
    Ok(())
}
