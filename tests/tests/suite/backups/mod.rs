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
