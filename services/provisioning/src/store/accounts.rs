//! Our cloud accounts, their tokens sealed, and how many provisions in flight use one.

use capstan_events::provisioning::{AccountFlag, CloudProvider};
use capstan_events::Word as _;
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};

type Result<T> = std::result::Result<T, StoreError>;

/// An account's row (its sealed token apart from what is shown).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AccountRow {
    pub id: i64,
    pub provider: String,
    pub label: String,
    pub flag: String,
    pub sealed_token: Vec<u8>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
}

impl AccountRow {
    pub fn provider(&self) -> Result<CloudProvider> {
        CloudProvider::parse(&self.provider)
            .ok_or_else(|| StoreError::Database(format!("{:?} is not a provider", self.provider)))
    }

    pub fn flag(&self) -> Result<AccountFlag> {
        AccountFlag::parse(&self.flag)
            .ok_or_else(|| StoreError::Database(format!("{:?} is not a flag", self.flag)))
    }
}

const ACCOUNT_COLUMNS: &str = "id, provider, label, flag, sealed_token, created_at, created_by";

/// The live accounts, oldest first.
pub async fn accounts(connection: &mut PgConnection) -> Result<Vec<AccountRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE deleted_at IS NULL ORDER BY id"
    ))
    .fetch_all(connection)
    .await?)
}

/// A live account.
pub async fn account(connection: &mut PgConnection, id: i64) -> Result<Option<AccountRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE id = $1 AND deleted_at IS NULL"
    ))
    .bind(id)
    .fetch_optional(connection)
    .await?)
}

/// The next account id, taken before the row is written (its token is sealed to it).
pub async fn next_account_id(connection: &mut PgConnection) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT nextval(pg_get_serial_sequence('accounts', 'id'))")
            .fetch_one(connection)
            .await?,
    )
}

/// A new account's row.
pub struct NewAccountRow<'a> {
    pub id: i64,
    pub provider: CloudProvider,
    pub label: &'a str,
    pub flag: AccountFlag,
    pub sealed_token: &'a [u8],
    pub created_at: DateTime<Utc>,
    pub created_by: &'a str,
}

/// Writes a new account; a live label taken is `AlreadyExists`.
pub async fn insert_account(connection: &mut PgConnection, row: &NewAccountRow<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO accounts (id, provider, label, flag, sealed_token, created_at, created_by) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(row.id)
    .bind(row.provider.as_str())
    .bind(row.label)
    .bind(row.flag.as_str())
    .bind(row.sealed_token)
    .bind(row.created_at)
    .bind(row.created_by)
    .execute(connection)
    .await?;
    Ok(())
}

/// Marks a live account deleted; `false` when there was none.
pub async fn delete_account(
    connection: &mut PgConnection,
    id: i64,
    at: DateTime<Utc>,
    by: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE accounts SET deleted_at = $2, deleted_by = $3 WHERE id = $1 AND deleted_at IS NULL",
    )
    .bind(id)
    .bind(at)
    .bind(by)
    .execute(connection)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// How many of the account's provisions are in flight (not done, not failed).
pub async fn provisions_in_flight(connection: &mut PgConnection, account_id: i64) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM provisions \
         WHERE account_id = $1 AND step NOT IN ('done', 'install_failed')",
    )
    .bind(account_id)
    .fetch_one(connection)
    .await?)
}
