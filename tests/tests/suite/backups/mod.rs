//! The backups service end to end: the real plane (gateway, agent channel, backups) on a
//! database and NATS server of the test's own, a real S3-compatible server that checks every
//! signature (`capstan_e2e::s3`, s3s-fs), and a signed test agent written from PROTOCOL.md.

mod broker;
mod first_run;
mod moving;
pub(crate) mod schedule;
mod storage;
mod targets;

use capstan_bus::Outgoing;
use capstan_e2e::heard::published;
use capstan_e2e::plane::Plane;
use capstan_e2e::s3::S3Server;
use capstan_events::NodeId;
use capstan_events::{
    agent_channel::{JobQueued, RequestJob},
    Domain, Envelope,
};
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

/// Queues a job of `primitive` for `node` as the backups service asks for one (issue 27: the
/// broker serves only those): its own row holds the request, then its `request_job` goes to the
/// agent channel over the bus with the row's correlation id, as its dispatch sends it. The
/// machine key is the job's own, so one test's jobs never wait on each other. The row is written
/// into the backups service's own table (the service under test): no API asks it for a run of
/// the test's choosing. The node must offer the word already. The agent channel's job id, from
/// its `job_queued`.
pub(crate) async fn queue_as_backups(
    plane: &Plane,
    node: i64,
    primitive: &str,
    params: Value,
) -> i64 {
    let pool = sqlx::PgPool::connect(plane.database.url()).await.unwrap();
    let (key, correlation): (String, sqlx::types::Uuid) = sqlx::query_as(
        "INSERT INTO backups.jobs (idempotency_key, correlation_id, node_id, machine, primitive,
             params, seq, requested_by, dispatched_at)
         SELECT key, gen_random_uuid(), $1, key, $2, $3, ($3 ->> 'seq')::bigint, 'test', now()
         FROM (SELECT 'test/job-' || gen_random_uuid() AS key) AS made
         RETURNING idempotency_key, correlation_id",
    )
    .bind(node)
    .bind(primitive)
    .bind(&params)
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    let request = RequestJob {
        idempotency_key: key,
        node_id: NodeId(node),
        primitive: primitive.to_string(),
        params,
        requested_by: "test".to_string(),
    };
    plane
        .bus
        .publish(Outgoing::command_from(
            Domain::Backups,
            Envelope::new(request, Some(format!("node/{node}"))).correlated(Some(correlation)),
        ))
        .await
        .unwrap();
    published::<JobQueued>(&plane.bus, "the backups service's job", |queued| {
        queued.correlation_id == Some(correlation)
    })
    .await
    .data
    .job_id
}
