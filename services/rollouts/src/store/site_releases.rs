//! Site releases' SQL (`migrations/rollouts/0003_site_releases.sql`).

use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};

use crate::domain::site_releases::SiteUpload;

type Result<T> = std::result::Result<T, StoreError>;

/// A stored site release, as listed (without its bytes).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SiteReleaseRow {
    pub version: String,
    pub archive_sha256: String,
    pub archive_bytes: i64,
    pub files: i32,
    pub signed_by: Vec<String>,
    pub published_at: DateTime<Utc>,
    pub published_by: String,
    pub deploy_all: bool,
    pub deploy_all_outcome: Option<String>,
    pub deploy_all_rollout: Option<i64>,
    pub deploy_all_reason: Option<String>,
}

const COLUMNS: &str =
    "version, archive_sha256, octet_length(archive)::bigint AS archive_bytes, files,
    signed_by, published_at, published_by, deploy_all, deploy_all_outcome, deploy_all_rollout,
    deploy_all_reason";

/// Stores the release and its file list; `false` when the version is already published
/// (nothing is changed then).
pub async fn insert(
    connection: &mut PgConnection,
    upload: &SiteUpload,
    deploy_all: bool,
    by: &str,
    at: DateTime<Utc>,
) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO site_releases (version, manifest, signatures, archive, archive_sha256, files,
            signed_by, deploy_all, published_at, published_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (version) DO NOTHING",
    )
    .bind(&upload.version)
    .bind(&upload.manifest)
    .bind(&upload.signatures)
    .bind(&upload.archive)
    .bind(&upload.archive_sha256)
    .bind(upload.files.len() as i32)
    .bind(&upload.signed_by)
    .bind(deploy_all)
    .bind(at)
    .bind(by)
    .execute(&mut *connection)
    .await?
    .rows_affected();
    if inserted == 0 {
        return Ok(false);
    }
    for (path, sha256) in &upload.files {
        sqlx::query("INSERT INTO site_release_files (version, path, sha256) VALUES ($1, $2, $3)")
            .bind(&upload.version)
            .bind(path)
            .bind(sha256)
            .execute(&mut *connection)
            .await?;
    }
    Ok(true)
}

/// Every site release, newest first.
pub async fn list(connection: &mut PgConnection) -> Result<Vec<SiteReleaseRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM site_releases ORDER BY published_at DESC, version DESC"
    ))
    .fetch_all(&mut *connection)
    .await?)
}

/// One site release.
pub async fn get(connection: &mut PgConnection, version: &str) -> Result<Option<SiteReleaseRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM site_releases WHERE version = $1"
    ))
    .bind(version)
    .fetch_optional(&mut *connection)
    .await?)
}

/// The manifest file and signature file of `version`.
pub async fn manifest(
    connection: &mut PgConnection,
    version: &str,
) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
    Ok(
        sqlx::query_as("SELECT manifest, signatures FROM site_releases WHERE version = $1")
            .bind(version)
            .fetch_optional(&mut *connection)
            .await?,
    )
}

/// The archive of `version`.
pub async fn archive(connection: &mut PgConnection, version: &str) -> Result<Option<Vec<u8>>> {
    let row: Option<(Vec<u8>,)> =
        sqlx::query_as("SELECT archive FROM site_releases WHERE version = $1")
            .bind(version)
            .fetch_optional(&mut *connection)
            .await?;
    Ok(row.map(|(archive,)| archive))
}

/// The archive of the newest release (of `version` when named) that lists a file with this
/// hash.
pub async fn archive_holding(
    connection: &mut PgConnection,
    sha256: &str,
    version: Option<&str>,
) -> Result<Option<Vec<u8>>> {
    let row: Option<(Vec<u8>,)> = sqlx::query_as(
        "SELECT r.archive FROM site_releases r
         WHERE EXISTS (SELECT 1 FROM site_release_files f WHERE f.version = r.version AND f.sha256 = $1)
           AND ($2::text IS NULL OR r.version = $2)
         ORDER BY r.published_at DESC LIMIT 1",
    )
    .bind(sha256)
    .bind(version)
    .fetch_optional(&mut *connection)
    .await?;
    Ok(row.map(|(archive,)| archive))
}

/// The newest site release's version.
pub async fn newest(connection: &mut PgConnection) -> Result<Option<String>> {
    let row: Option<(String,)> = sqlx::query_as(
        "SELECT version FROM site_releases ORDER BY published_at DESC, version DESC LIMIT 1",
    )
    .fetch_optional(&mut *connection)
    .await?;
    Ok(row.map(|(version,)| version))
}

/// Deploy-to-all publishes not yet decided (RO-23), oldest first, locked for this decision.
pub async fn deploy_all_pending(
    connection: &mut PgConnection,
) -> Result<Vec<(String, DateTime<Utc>, String)>> {
    Ok(sqlx::query_as(
        "SELECT version, published_at, published_by FROM site_releases
         WHERE deploy_all AND deploy_all_outcome IS NULL
         ORDER BY published_at FOR UPDATE SKIP LOCKED",
    )
    .fetch_all(&mut *connection)
    .await?)
}

/// Writes a deploy-to-all's outcome back on its release (RO-23).
pub async fn record_deploy_all(
    connection: &mut PgConnection,
    version: &str,
    rollout: Option<i64>,
    reason: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "UPDATE site_releases SET deploy_all_outcome = $2, deploy_all_rollout = $3, deploy_all_reason = $4
         WHERE version = $1",
    )
    .bind(version)
    .bind(if rollout.is_some() { "started" } else { "refused" })
    .bind(rollout)
    .bind(reason)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// The rollout a deploy to all of `version` already started as `actor`, if any.
pub async fn rollout_started_by(
    connection: &mut PgConnection,
    version: &str,
    actor: &str,
) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM rollouts WHERE version = $1 AND started_by = $2 ORDER BY id LIMIT 1",
    )
    .bind(version)
    .bind(actor)
    .fetch_optional(&mut *connection)
    .await?)
}
