//! The backups service end to end: the real plane (gateway, agent channel, backups) on a
//! database and NATS server of the test's own, a real S3-compatible server that checks every
//! signature (`capstan_e2e::s3`, s3s-fs), and a signed test agent written from PROTOCOL.md.

mod broker;
mod first_run;
mod moving;
pub(crate) mod schedule;
mod storage;
mod targets;

use capstan_e2e::plane::Plane;
use capstan_e2e::s3::S3Server;
use reqwest::StatusCode;
use serde_json::{json, Value};

/// A target on `s3`, made where new backups go; its id.
pub(crate) async fn default_target(plane: &Plane, s3: &S3Server) -> i64 {
    let (status, target) = plane
        .api(
            &plane.admin,
            "POST",
            "/api/v1/backups/targets",
            Some(target_body(s3, &s3.secret_key)),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{target}");
    let id = target["id"].as_i64().unwrap();
    let (status, chosen) = plane
        .api(
            &plane.admin,
            "POST",
            &format!("/api/v1/backups/targets/{id}/default"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{chosen}");
    assert_eq!(chosen["is_default"], true);
    id
}

pub(crate) fn target_body(s3: &S3Server, secret: &str) -> Value {
    json!({
        "name": "local s3",
        "provider": "generic_s3",
        "endpoint": s3.endpoint(),
        "region": s3.region,
        "bucket": s3.bucket,
        "folder": "fleet",
        "access_key": s3.access_key,
        "secret_key": secret,
    })
}

/// Queues a job of `primitive` for `node` as the backups service would have asked for it
/// (issue 27: the broker serves only those): the agent channel's row and the backups service's
/// own row share a correlation id, as its `request_job` would have made them, written in one
/// statement so no agent claims the job before the backups service holds it. The machine key
/// is the job's own, so one test's jobs never wait on each other. Its id.
pub(crate) async fn queue_as_backups(
    plane: &Plane,
    node: i64,
    primitive: &str,
    params: Value,
) -> i64 {
    let pool = sqlx::PgPool::connect(plane.database.url()).await.unwrap();
    let (id,): (i64,) = sqlx::query_as(
        "WITH job AS (
             INSERT INTO agent_channel.jobs (node_id, primitive, class, params, state,
                 requested_by, budget_s, correlation_id)
             VALUES ($1, $2, 'change', $3, 'pending', 'test', 300, gen_random_uuid())
             RETURNING id, node_id, primitive, params, correlation_id)
         INSERT INTO backups.jobs (idempotency_key, correlation_id, job_id, node_id, machine,
             primitive, params, seq, requested_by, dispatched_at)
         SELECT 'test/job-' || id, correlation_id, id, node_id, 'test/job-' || id, primitive,
                params, (params ->> 'seq')::bigint, 'test', now()
         FROM job RETURNING job_id",
    )
    .bind(node)
    .bind(primitive)
    .bind(params)
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    id
}
