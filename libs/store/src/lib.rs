//! PostgreSQL for every service: a pool whose connections live in the service's own schema,
//! that schema's embedded migrations, the transactional outbox with its relay, and the inbox
//! that makes a consumer's effects happen once. `sqlx` errors are translated here.
#![forbid(unsafe_code)]

pub mod inbox;
pub mod nodes;
pub mod outbox;
mod relay;
#[cfg(feature = "testsuite")]
pub mod testsuite;

pub use relay::{OutboxRelay, Publisher, RelayMessage};
/// The types a service's wiring names without depending on sqlx itself.
pub use sqlx::{migrate::Migrator, PgConnection, Postgres, Transaction};

use sqlx::{
    postgres::{PgConnectOptions, PgPoolOptions},
    ConnectOptions, Connection, Executor, PgPool,
};
use std::{str::FromStr, time::Duration};

/// What went wrong with the database, in words the caller can act on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    #[error("already exists: {0}")]
    AlreadyExists(String),
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("bad schema name {0:?}: lower-case letters, digits and underscores only")]
    BadSchema(String),
    #[error("migrating schema {schema}: {reason}")]
    Migration { schema: String, reason: String },
    #[error("database error: {0}")]
    Database(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match &error {
            sqlx::Error::RowNotFound => StoreError::NotFound,
            sqlx::Error::Database(database) if database.code().as_deref() == Some("23505") => {
                StoreError::AlreadyExists(database.message().to_string())
            }
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_) => StoreError::Unavailable(error.to_string()),
            _ => StoreError::Database(error.to_string()),
        }
    }
}

/// A service's database: a pool whose every connection has `search_path` set to the
/// service's schema, so its SQL never names another service's tables.
#[derive(Clone, Debug)]
pub struct Store {
    pool: PgPool,
    schema: String,
    options: PgConnectOptions,
}

fn valid_schema(schema: &str) -> bool {
    !schema.is_empty()
        && schema.len() <= 63
        && schema.starts_with(|first: char| first.is_ascii_lowercase() || first == '_')
        && schema
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl Store {
    /// Connects to `url`, creates `schema` when it is missing, and opens a pool of at most
    /// `max_connections` connections living in it.
    pub async fn connect(
        url: &str,
        schema: &str,
        max_connections: u32,
    ) -> Result<Store, StoreError> {
        if !valid_schema(schema) {
            return Err(StoreError::BadSchema(schema.to_string()));
        }
        let options = PgConnectOptions::from_str(url)
            .map_err(|error| StoreError::Unavailable(format!("bad database url: {error}")))?
            .application_name(&format!("capstan-{schema}"))
            .log_statements(tracing::log::LevelFilter::Trace)
            .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1));
        let mut first = connect_patiently(&options).await?;
        // Only create what is missing: CREATE SCHEMA needs the CREATE right on the database even
        // when the schema exists, and a production role owns its schema and nothing more.
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(schema)
                .fetch_one(&mut first)
                .await?;
        if !exists {
            // Replicas starting together on a fresh database race here: IF NOT EXISTS does not
            // keep two concurrent creates from colliding on pg_namespace's unique index, and
            // the loser's schema exists all the same.
            match first
                .execute(format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"").as_str())
                .await
                .map_err(StoreError::from)
            {
                Ok(_) | Err(StoreError::AlreadyExists(_)) => {}
                Err(error) => return Err(error),
            }
        }
        first.close().await.ok();
        let search_path = format!("SET search_path TO \"{schema}\"");
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .after_connect(move |connection, _| {
                let search_path = search_path.clone();
                Box::pin(async move {
                    connection.execute(search_path.as_str()).await?;
                    Ok(())
                })
            })
            .connect_with(options.clone())
            .await?;
        Ok(Store {
            pool,
            schema: schema.to_string(),
            options,
        })
    }

    /// Creates the outbox and inbox, then applies the service's own migrations, all inside
    /// its schema. Safe to run from several replicas at once.
    pub async fn migrate(&self, migrator: &Migrator) -> Result<(), StoreError> {
        let failed = |reason: String| StoreError::Migration {
            schema: self.schema.clone(),
            reason,
        };
        let mut transaction = self.pool.begin().await?;
        // One replica at a time creates the shared tables (CREATE IF NOT EXISTS races).
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind(format!("capstan-bootstrap-{}", self.schema))
            .execute(&mut *transaction)
            .await?;
        transaction
            .execute(outbox::BOOTSTRAP)
            .await
            .map_err(|error| failed(format!("creating the outbox: {error}")))?;
        transaction
            .execute(inbox::BOOTSTRAP)
            .await
            .map_err(|error| failed(format!("creating the inbox: {error}")))?;
        transaction.commit().await?;
        migrator
            .run(&self.pool)
            .await
            .map_err(|error| failed(error.to_string()))
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// A connection of the pool, in this schema.
    pub async fn acquire(&self) -> Result<sqlx::pool::PoolConnection<sqlx::Postgres>, StoreError> {
        Ok(self.pool.acquire().await?)
    }

    /// Runs `work` in a transaction of its own: committed when it returns `Ok`, rolled back
    /// when it fails (its error, `E`, is anything a store failure converts into):
    ///
    /// ```ignore
    /// let row = store.in_transaction(|tx| Box::pin(async move {
    ///     let row = read(tx).await?;
    ///     write(tx, &row).await?;
    ///     Ok::<_, ServiceError>(row)
    /// })).await?;
    /// ```
    pub async fn in_transaction<T, E, F>(&self, work: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: for<'t> FnOnce(&'t mut PgConnection) -> futures::future::BoxFuture<'t, Result<T, E>>,
    {
        let mut transaction = self.begin().await?;
        let done = work(&mut transaction).await;
        match done {
            Ok(value) => {
                transaction.commit().await.map_err(StoreError::from)?;
                Ok(value)
            }
            Err(error) => {
                // Dropping it rolls it back; an explicit rollback says so sooner.
                transaction.rollback().await.ok();
                Err(error)
            }
        }
    }

    /// Starts a transaction; write the state change and its outbox rows in it.
    pub async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        Ok(self.pool.begin().await?)
    }

    /// Starts the transaction of one periodic tick as the one replica that runs it: `None`
    /// when another replica holds `lock` now. The lock is transaction-scoped, so it ends with
    /// the transaction; a tick whose connection is lost cannot commit what it did as leader.
    pub async fn lead_tick(
        &self,
        lock: &str,
    ) -> Result<Option<sqlx::Transaction<'static, sqlx::Postgres>>, StoreError> {
        let mut transaction = self.pool.begin().await?;
        let leader: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock(hashtext($1))")
            .bind(lock)
            .fetch_one(&mut *transaction)
            .await?;
        Ok(leader.then_some(transaction))
    }

    /// A connection of its own, outside the pool, in this schema: for a session-level lock
    /// that must end when its holder dies (a pooled connection would keep it).
    pub async fn dedicated_connection(&self) -> Result<PgConnection, StoreError> {
        let mut connection = self.options.connect().await?;
        connection
            .execute(format!("SET search_path TO \"{}\"", self.schema).as_str())
            .await?;
        Ok(connection)
    }

    /// A LISTEN connection of its own, outside the pool: a listener holds its connection for
    /// as long as it listens, and must not take one of the slots the service's work shares.
    pub async fn listener(&self) -> Result<sqlx::postgres::PgListener, StoreError> {
        let own = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(self.options.clone())
            .await?;
        Ok(sqlx::postgres::PgListener::connect_with(&own).await?)
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Closes every connection, waiting for those in use to be returned.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Connects, retrying for up to 30 seconds so a plane started with its database still
/// coming up waits for it instead of failing.
async fn connect_patiently(options: &PgConnectOptions) -> Result<PgConnection, StoreError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut pause = Duration::from_millis(100);
    loop {
        match options.connect().await {
            Ok(connection) => return Ok(connection),
            Err(error) => {
                let error = StoreError::from(error);
                if !matches!(error, StoreError::Unavailable(_))
                    || tokio::time::Instant::now() + pause > deadline
                {
                    return Err(error);
                }
                tracing::warn!(%error, "database not reachable yet, retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_name_is_a_plain_lower_case_identifier() {
        assert!(valid_schema("agent_channel"));
        assert!(valid_schema("_private2"));
        assert!(!valid_schema("Agent"));
        assert!(!valid_schema("a;drop"));
        assert!(!valid_schema("a\"b"));
        assert!(!valid_schema(""));
        assert!(!valid_schema("9lives"));
    }
}
