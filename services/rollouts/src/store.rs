//! The rollouts service's SQL: releases and their artifacts (`migrations/rollouts/`).

pub mod site_releases;
pub mod staged;

use capstan_events::{rollouts::ReleasePublished, Envelope};
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::{DateTime, Utc};

use crate::domain::releases::{ArtifactKind, Published, Upload};

type Result<T> = std::result::Result<T, StoreError>;

/// A stored release, as listed.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReleaseRow {
    pub version: String,
    pub sequence: i64,
    pub expires_at: DateTime<Utc>,
    pub metadata: Vec<u8>,
    pub published_at: DateTime<Utc>,
    pub published_by: String,
    /// Whether its release statement is stored (AG-27).
    pub has_statement: bool,
}

/// Locks the releases against another publish until the transaction ends, so "higher than
/// every published sequence" holds when two uploads race.
pub async fn lock(connection: &mut PgConnection) -> Result<()> {
    sqlx::query("LOCK TABLE releases IN SHARE ROW EXCLUSIVE MODE")
        .execute(&mut *connection)
        .await?;
    Ok(())
}

pub async fn published(connection: &mut PgConnection) -> Result<Vec<Published>> {
    let rows: Vec<(String, i64, String, Option<Vec<u8>>)> = sqlx::query_as(
        "SELECT version, sequence, metadata_sha256, sha256(statement) FROM releases",
    )
    .fetch_all(&mut *connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(version, sequence, metadata_sha256, statement)| Published {
                version,
                sequence,
                metadata_sha256,
                statement_sha256: statement
                    .map(|digest| digest.iter().map(|byte| format!("{byte:02x}")).collect()),
            },
        )
        .collect())
}

/// Stores the release, its artifacts and its event, in the caller's transaction.
pub async fn insert(
    connection: &mut PgConnection,
    upload: &Upload,
    event: ReleasePublished,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO releases (version, sequence, expires_at, metadata, metadata_sha256, published_at, published_by, statement)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(upload.version())
    .bind(upload.sequence())
    .bind(upload.expires_at)
    .bind(&upload.metadata)
    .bind(&upload.metadata_sha256)
    .bind(at)
    .bind(&event.published_by)
    .bind(upload.statement.as_ref().map(|statement| &statement.bytes))
    .execute(&mut *connection)
    .await?;
    for part in &upload.parts {
        sqlx::query(
            "INSERT INTO release_artifacts (version, kind, arch, sha256, bytes) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(upload.version())
        .bind(part.kind.as_str())
        .bind(&part.arch)
        .bind(&part.sha256)
        .bind(&part.bytes)
        .execute(&mut *connection)
        .await?;
    }
    let subject = format!("release/{}", upload.version());
    outbox::push(connection, Envelope::new(event, Some(subject))).await
}

/// Stores `statement` as the release statement of `version` (RO-07: it may come after the
/// release).
pub async fn set_statement(
    connection: &mut PgConnection,
    version: &str,
    statement: &[u8],
) -> Result<()> {
    sqlx::query("UPDATE releases SET statement = $2 WHERE version = $1")
        .bind(version)
        .bind(statement)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// The release statement of `version`, or of the release on offer; `None` when that release
/// has none (or there is no such release).
pub async fn statement(
    connection: &mut PgConnection,
    version: Option<&str>,
) -> Result<Option<Vec<u8>>> {
    let row: Option<(Option<Vec<u8>>,)> = sqlx::query_as(
        "SELECT statement FROM releases WHERE ($1::text IS NULL OR version = $1)
         ORDER BY sequence DESC LIMIT 1",
    )
    .bind(version)
    .fetch_optional(&mut *connection)
    .await?;
    Ok(row.and_then(|(statement,)| statement))
}

/// Every release, highest sequence first.
pub async fn list(connection: &mut PgConnection) -> Result<Vec<ReleaseRow>> {
    Ok(sqlx::query_as(
        "SELECT version, sequence, expires_at, metadata, published_at, published_by,
                statement IS NOT NULL AS has_statement
         FROM releases ORDER BY sequence DESC",
    )
    .fetch_all(&mut *connection)
    .await?)
}

/// The release on offer: the highest sequence.
pub async fn on_offer(connection: &mut PgConnection) -> Result<Option<ReleaseRow>> {
    Ok(sqlx::query_as(
        "SELECT version, sequence, expires_at, metadata, published_at, published_by,
                statement IS NOT NULL AS has_statement
         FROM releases ORDER BY sequence DESC LIMIT 1",
    )
    .fetch_optional(&mut *connection)
    .await?)
}

/// An artifact's bytes: of `version`, or of the release on offer.
pub async fn artifact(
    connection: &mut PgConnection,
    kind: ArtifactKind,
    arch: &str,
    version: Option<&str>,
) -> Result<Option<Vec<u8>>> {
    let row: Option<(Vec<u8>,)> = sqlx::query_as(
        "SELECT a.bytes FROM release_artifacts a JOIN releases r ON r.version = a.version
         WHERE a.kind = $1 AND a.arch = $2 AND ($3::text IS NULL OR a.version = $3)
         ORDER BY r.sequence DESC LIMIT 1",
    )
    .bind(kind.as_str())
    .bind(arch)
    .bind(version)
    .fetch_optional(&mut *connection)
    .await?;
    Ok(row.map(|(bytes,)| bytes))
}
