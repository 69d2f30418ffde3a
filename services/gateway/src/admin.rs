//! Operator administration from the command line: `capstan admin create-operator` creates an
//! operator, its first API token and a one-time password for the web UI, and prints both once
//! (only the token's digest and the password's argon2id hash are kept). Each act is written
//! to the audit log, done or refused, with `"via": "cli"`: whoever can run it holds the
//! database's credentials, so it is recorded as `capstan admin` at level 10.

use anyhow::Context;
use capstan_events::rpc::Level;
use capstan_settings::Settings;
use capstan_store::{Store, StoreError};

use crate::{
    identity::{record_act, OperatorName, Token},
    password::{self, Password},
    store::{self, AuditEntry},
    DOMAIN, MIGRATOR,
};
use capstan_events::Word as _;

/// Who a `capstan admin` act is recorded as.
pub const CLI_ACTOR: &str = "capstan admin";

/// The audit row of a `capstan admin` act on operator `name`: `ok`, or what stopped it.
async fn audit_cli<T>(
    store: &Store,
    action: &'static str,
    name: &str,
    detail: serde_json::Value,
    outcome: &Result<T, AdminError>,
) {
    let mut detail = detail;
    detail["via"] = "cli".into();
    let outcome = match outcome {
        Ok(_) => "ok".to_string(),
        Err(error) => {
            detail["message"] = error.to_string().into();
            error.code().to_string()
        }
    };
    record_act(
        store,
        &AuditEntry {
            operator: CLI_ACTOR.to_string(),
            level: Some(Level::Admin),
            address: None,
            action,
            target: Some(format!("operator/{name}")),
            outcome,
            detail,
        },
    )
    .await;
}

/// What can stop an operator from being created.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    BadName(String),
    #[error("an operator named {0:?} already exists; choose another name")]
    NameTaken(String),
    #[error("the gateway's database: {0}")]
    Store(#[from] StoreError),
    #[error("the password could not be hashed: {0}")]
    Hash(crate::password::HashError),
    #[error("there is no operator named {0:?}")]
    NoSuchOperator(String),
}

impl AdminError {
    /// The error code the audit log records.
    pub fn code(&self) -> &'static str {
        match self {
            AdminError::BadName(_) => "invalid_request",
            AdminError::NameTaken(_) => "already_exists",
            AdminError::Store(_) | AdminError::Hash(_) => "unavailable",
            AdminError::NoSuchOperator(_) => "not_found",
        }
    }
}

/// What `create-operator` hands out, once.
#[derive(Debug)]
pub struct Issued {
    pub token: Token,
    /// For the first sign-in to the web UI, which then asks for a new one.
    pub password: Password,
}

/// Creates operator `name` at `level` with a first API token and a one-time password (the
/// operator must choose a new one at the first sign-in).
pub async fn issue_operator_with_password(
    store: &Store,
    name: &str,
    level: Level,
) -> Result<Issued, AdminError> {
    let password = Password::generate();
    // Hashed before the operator is written, so a failure leaves no operator behind.
    let hash = password::hash(password.clone())
        .await
        .map_err(AdminError::Hash)?;
    let token = issue_operator(store, name, level).await?;
    set_password(store, name, &hash, true).await?;
    Ok(Issued { token, password })
}

/// Sets operator `name`'s password hash; `must_change` makes the UI ask for a new password
/// at the next sign-in.
pub async fn set_password(
    store: &Store,
    name: &str,
    password_hash: &str,
    must_change: bool,
) -> Result<(), AdminError> {
    if store::set_password(store, name, password_hash, must_change).await? {
        Ok(())
    } else {
        Err(AdminError::NoSuchOperator(name.to_string()))
    }
}

/// Hashes `password` and makes it operator `name`'s (tests and tools).
pub async fn set_password_plain(
    store: &Store,
    name: &str,
    password: &str,
    must_change: bool,
) -> Result<(), AdminError> {
    let hash = password::hash(Password::new(password.to_string()))
        .await
        .map_err(AdminError::Hash)?;
    set_password(store, name, &hash, must_change).await
}

/// Creates operator `name` at `level` with a first API token, and returns the token.
pub async fn issue_operator(store: &Store, name: &str, level: Level) -> Result<Token, AdminError> {
    let name =
        OperatorName::parse(name).map_err(|refused| AdminError::BadName(refused.to_string()))?;
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
/// schema, creates the operator and prints `token: <token>` and `password: <one-time
/// password>` on standard output (logs go to standard error), the only time either is shown.
///
/// With `email`, the operator's mail address is set too (where incident signals are mailed).
pub async fn create_operator(
    settings: &Settings,
    name: &str,
    level: Level,
    email: Option<&str>,
) -> anyhow::Result<()> {
    let email = email
        .map(crate::domain::email::Email::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let store = Store::connect(settings.database.url(), DOMAIN.as_str(), 1)
        .await
        .context("connecting to the database")?;
    let issued = async {
        store
            .migrate(&MIGRATOR)
            .await
            .context("migrating the gateway schema")?;
        let issued = issue_operator_with_password(&store, name, level).await;
        let detail = serde_json::json!({"level": u8::from(level), "email": email.is_some()});
        audit_cli(&store, "create_operator", name, detail, &issued).await;
        let issued = issued?;
        if let Some(email) = &email {
            store::set_email(&store, name, Some(email.as_str())).await?;
        }
        Ok::<_, anyhow::Error>(issued)
    }
    .await;
    store.close().await;
    let issued = issued?;
    tracing::info!(operator = name, level = u8::from(level), "operator created");
    println!("token: {}", issued.token.expose());
    println!("password: {}", issued.password.expose());
    Ok(())
}

/// Gives operator `name` a new one-time password (to be changed at the next sign-in) and ends
/// their sessions: for an operator who forgot it, or one created before passwords existed.
pub async fn reset_password(store: &Store, name: &str) -> Result<Password, AdminError> {
    let password = Password::generate();
    let hash = password::hash(password.clone())
        .await
        .map_err(AdminError::Hash)?;
    if store::reset_password(store, name, &hash).await? {
        Ok(password)
    } else {
        Err(AdminError::NoSuchOperator(name.to_string()))
    }
}

/// `capstan admin reset-password --name NAME`: prints `password: <one-time password>` once.
pub async fn reset_password_command(settings: &Settings, name: &str) -> anyhow::Result<()> {
    let store = Store::connect(settings.database.url(), DOMAIN.as_str(), 1)
        .await
        .context("connecting to the database")?;
    let reset = async {
        store
            .migrate(&MIGRATOR)
            .await
            .context("migrating the gateway schema")?;
        let reset = reset_password(&store, name).await;
        audit_cli(
            &store,
            "reset_password",
            name,
            serde_json::json!({}),
            &reset,
        )
        .await;
        Ok::<_, anyhow::Error>(reset?)
    }
    .await;
    store.close().await;
    let password = reset?;
    tracing::info!(
        operator = name,
        "operator password reset; their sessions ended"
    );
    println!("password: {}", password.expose());
    Ok(())
}
