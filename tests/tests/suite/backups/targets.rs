//! Targets (BK-04): level 10, tried against the storage before they are saved (a wrong key is
//! refused by the server's signature check), keys sealed at rest and never shown again.

use super::*;

#[tokio::test]
async fn bk_04_targets_are_level_10_tried_with_their_keys_and_never_show_them() {
    let s3 = S3Server::start().await;
    let plane = Plane::start().await;
    let body = target_body(&s3, &s3.secret_key);
    for token in [&plane.reader, &plane.changer] {
        let (status, refused) = plane
            .api(token, "POST", "/api/v1/backups/targets", Some(body.clone()))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
        let (status, _) = plane
            .api(token, "GET", "/api/v1/backups/targets", None)
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    }
    // A wrong secret: the storage refuses the signature, and nothing is saved.
    let (status, refused) = plane
        .api(
            &plane.admin,
            "POST",
            "/api/v1/backups/targets",
            Some(target_body(&s3, "not-the-secret")),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused.to_string().contains("403"),
        "the storage's refusal is named: {refused}"
    );
    // Bad input is named and changes nothing.
    let mut plain_http = body.clone();
    plain_http["endpoint"] = json!("http://s3.example.net");
    let (status, refused) = plane
        .api(
            &plane.admin,
            "POST",
            "/api/v1/backups/targets",
            Some(plain_http),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(refused.to_string().contains("endpoint"), "{refused}");
    let (status, listed) = plane
        .api(&plane.admin, "GET", "/api/v1/backups/targets", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["targets"], json!([]));

    let (status, created) = plane
        .api(&plane.admin, "POST", "/api/v1/backups/targets", Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["is_default"], false);
    assert_eq!(created["folder"], "fleet");
    let (_, listed) = plane
        .api(&plane.admin, "GET", "/api/v1/backups/targets", None)
        .await;
    for shown in [created.to_string(), listed.to_string()] {
        assert!(!shown.contains(&s3.secret_key), "{shown}");
        assert!(!shown.contains(&s3.access_key), "{shown}");
    }
    // Sealed at rest: the row holds neither key in the clear (read from the backups service's
    // own table, the service under test: no API shows the stored bytes, by design).
    let pool = sqlx::PgPool::connect(plane.database.url()).await.unwrap();
    let (sealed,): (Vec<u8>,) = sqlx::query_as("SELECT sealed_credentials FROM backups.targets")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    let sealed = String::from_utf8_lossy(&sealed);
    assert!(!sealed.contains(&s3.secret_key) && !sealed.contains(&s3.access_key));
    // The same name twice is refused.
    let (status, _) = plane
        .api(
            &plane.admin,
            "POST",
            "/api/v1/backups/targets",
            Some(target_body(&s3, &s3.secret_key)),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let id = created["id"].as_i64().unwrap();
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
    let (status, _) = plane
        .api(
            &plane.admin,
            "POST",
            "/api/v1/backups/targets/999/default",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    plane.stop().await;
}
